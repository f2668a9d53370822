// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=64 num-warps=4" | FileCheck %s
// attn.attention becomes one kernel: cp.async tile loads, ldmatrix
// fragments, mma.sync on tensor cores, the mask cloned per element, the
// interval classifier per tile, and the launch's shared memory recorded.

// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: attn.attention
// CHECK: gpu.module @flashjit_kernels
// CHECK: llvm.mlir.global external @flashjit_smem() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK-LABEL: gpu.func @causal(
// CHECK-SAME: kernel
// CHECK-SAME: flashjit.shared_bytes = 46080 : i64
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK-SAME: nvvm.minctasm = 1 : i32
// CHECK: nvvm.cp.async.shared.global {{.*}}, 16, cache = cg
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// CHECK: nvvm.mma.sync
// CHECK-SAME: multiplicandAPtxType = #nvvm.mma_type<bf16>
// CHECK: arith.cmpi sle
// CHECK: nvvm.shfl.sync bfly
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// CHECK: gpu.return
attn.attention @causal attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 4 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// Parameters become kernel arguments, buffers bounds-checked loads that flag
// out-of-range reads in `status` (the sixth pointer).
// CHECK-LABEL: gpu.func @softcap_doc(
// CHECK-SAME: %{{.*}}: f32, %[[DOC:.*]]: !llvm.ptr<1>, %[[SIZE:.*]]: i64)
// CHECK: arith.cmpi slt, %{{.*}}, %[[SIZE]] : i64
// CHECK: scf.if
// CHECK: llvm.load {{.*}} -> i32
// CHECK: } else {
// CHECK: llvm.store
// CHECK: math.tanh
attn.attention @softcap_doc attributes {
    dtype_q = f16, dtype_k = f16, dtype_v = f16, dtype_o = f16,
    head_dim_qk = 128 : i64, head_dim_v = 128 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.088 : f32, return_lse = false,
    params = {cap = f32}, buffers = {doc_id = i32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %dq = attn.buffer_load "doc_id"[%q] : i32 -> i32
  %dk = attn.buffer_load "doc_id"[%kv] : i32 -> i32
  %0 = arith.cmpi eq, %dq, %dk : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %cap = attn.param "cap" : f32
  %0 = arith.divf %s, %cap : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %cap, %1 : f32
  attn.yield %2 : f32
}
