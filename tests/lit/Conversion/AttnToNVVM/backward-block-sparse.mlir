// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=32 num-warps=4 backward=true block-sparse=true" | FileCheck %s
// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=32 num-warps=4 backward=true" | FileCheck %s --check-prefix=DENSE
// The block-sparse GPU backward: the three kernels take the transposed
// block mask after the fixed arguments (5 list pointers, 3 i32: row
// strides and list pitch), and the module also holds the transposer
// @w_bwd_mask (one warp; 9 list pointers, 5 i32), which looks each mask
// key tile of a key tile up by binary search (scf.while in an scf.for over
// them) and compacts the partial tiles (index and key-group word) and the
// full ones with ballots. A dense backward has no transposer.

// CHECK-LABEL: gpu.module @flashjit_kernels
// CHECK-DAG: gpu.func @w_bwd_pre(
// CHECK-DAG: gpu.func @w_bwd(
// CHECK-DAG: gpu.func @w_bwd_post(
// CHECK: gpu.func @w_bwd_mask(%{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32) kernel
// CHECK-SAME: known_block_size = array<i32: 32, 1, 1>
// CHECK: scf.for
// CHECK: scf.while
// CHECK: scf.while
// CHECK: nvvm.vote.sync ballot
// CHECK: nvvm.vote.sync ballot
// CHECK: nvvm.vote.sync ballot
// CHECK: gpu.return

// DENSE-LABEL: gpu.module @flashjit_kernels
// DENSE: gpu.func @w_bwd(
// DENSE-NOT: @w_bwd_mask
attn.attention @w attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %c = arith.constant 100 : i32
  %lo = arith.subi %q, %c : i32
  %0 = arith.cmpi sge, %kv, %lo : i32
  %1 = arith.cmpi sle, %kv, %q : i32
  %2 = arith.andi %0, %1 : i1
  attn.yield %2 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
