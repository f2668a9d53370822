// RUN: flashjit-opt %s -attn-to-nvvm="block-n=64 num-warps=8" -attn-nvvm-to-ptx="arch=sm_90a" | FileCheck %s
// RUN: not flashjit-opt %s -attn-to-nvvm -attn-nvvm-to-ptx="arch=sm_70" 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: arch 'sm_70' is not supported
// The whole GPU path: attn.attention to a gpu.binary holding PTX for
// sm_90a with tensor-core, ldmatrix and cp.async instructions.

// CHECK: gpu.binary @flashjit_kernels
// CHECK-SAME: .target sm_90a
// CHECK-SAME: .entry window
// CHECK-SAME: cp.async.cg.shared.global
// CHECK-SAME: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-SAME: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
attn.attention @window attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 128 : i64, head_dim_v = 128 : i64, heads_q = 8 : i64,
    heads_kv = 8 : i64, scale = 0.088 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %c = arith.constant 256 : i32
  %lo = arith.subi %q, %c : i32
  %0 = arith.cmpi sge, %kv, %lo : i32
  %1 = arith.cmpi sle, %kv, %q : i32
  %2 = arith.andi %0, %1 : i1
  attn.yield %2 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
