// RUN: flashjit-opt %s -attn-tile="block-sparse=true" | FileCheck %s
// RUN: flashjit-opt %s -attn-tile="varlen=true" | FileCheck %s --check-prefix=VARLEN

// block-sparse: the block-mask arguments follow the strides; the K/V loop
// becomes a loop over the row's partial tiles (classified, mask on partial
// ones) and one over its full tiles (no classification, bounds only).
// CHECK-LABEL: func.func @causal(
// CHECK-SAME: i64, %[[NUM:[^:]*]]: !llvm.ptr, %[[IDX:[^:]*]]: !llvm.ptr, %[[FNUM:[^:]*]]: !llvm.ptr, %[[FIDX:[^:]*]]: !llvm.ptr,
// CHECK-SAME: %[[BS:[^:]*]]: i64, %[[HS:[^:]*]]: i64, %[[CAP:[^:]*]]: i64, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// CHECK: llvm.getelementptr %[[NUM]][%[[ROW:[0-9]+]]]
// CHECK: scf.for
// CHECK: llvm.getelementptr %[[IDX]]
// CHECK: arith.cmpi sgt
// CHECK: attn.mask_select
// CHECK: arith.cmpi sle, %kv_idx, %q_idx
// CHECK: llvm.getelementptr %[[FNUM]][%[[ROW]]]
// CHECK: scf.for
// CHECK: llvm.getelementptr %[[FIDX]]
// CHECK-NOT: arith.cmpi sgt
// CHECK: attn.mask_select
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.constant true
// CHECK-NOT: arith.cmpi sle, %kv_idx

// varlen: each item reads its sequence's start and length from cu_seqlens
// and does nothing past the sequence's end; tokens are addressed from the
// sequence's first token with the token stride.
// VARLEN-LABEL: func.func @causal(
// VARLEN-SAME: %[[CUQ:[^:]*]]: !llvm.ptr, %[[CUK:[^:]*]]: !llvm.ptr, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// VARLEN: %[[QS:.*]] = llvm.load {{.*}} -> i32
// VARLEN: llvm.getelementptr %[[CUK]]
// VARLEN: %[[IN:.*]] = arith.cmpi slt
// VARLEN: scf.if %[[IN]] {
// VARLEN: attn.load_tile
attn.attention @causal attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
