// RUN: flashjit-opt %s -attn-to-llvm-cpu="block-m=32 block-n=32" | FileCheck %s
// The whole CPU pipeline: attn.attention to the LLVM dialect, ready for the
// ORC JIT. Plain-pointer ABI, LLVM intrinsics for exp2/tanh, no attn/scf/memref left.

// CHECK-LABEL: llvm.func @softcap(
// CHECK-SAME: %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr
// CHECK-DAG: llvm.intr.exp2
// CHECK-DAG: llvm.intr.tanh
// CHECK-NOT: attn.
// CHECK-NOT: scf.
// CHECK-NOT: memref.
attn.attention @softcap attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %c = arith.constant 30.0 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %c, %1 : f32
  attn.yield %2 : f32
}
