// RUN: flashjit-opt %s -split-input-file -attn-tile="block-m=16 block-n=32" | FileCheck %s
// RUN: flashjit-opt %s -split-input-file -attn-tile="count-tiles=true" | FileCheck %s --check-prefix=COUNT

// A causal kernel: the kernel ABI, the loops over work items and K/V tiles,
// the run-time classification guarding the tile, the mask only on partial
// tiles, log2(e) folded into the dot's scale (no score modifier).

// CHECK-LABEL: func.func @causal(
// CHECK-SAME: %[[Q:[^:]*]]: !llvm.ptr, %[[K:[^:]*]]: !llvm.ptr, %[[V:[^:]*]]: !llvm.ptr, %[[O:[^:]*]]: !llvm.ptr, %[[LSE:[^:]*]]: !llvm.ptr, %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr,
// CHECK-SAME: %[[BEGIN:[^:]*]]: i64, %[[END:[^:]*]]: i64)
// CHECK-NOT: attn.attention
// CHECK-DAG: memref.alloca() {alignment = 64 : i64} : memref<16x64xf32>
// CHECK-DAG: memref.alloca() {alignment = 64 : i64} : memref<32x64xf32>
// CHECK-DAG: memref.alloca() {alignment = 64 : i64} : memref<16x32xf32>
// CHECK: scf.for %{{.*}} = %[[BEGIN]] to %[[END]]
// CHECK: attn.load_tile %[[Q]]
// CHECK: scf.for
// Interval rule for kv <= q: can be false iff kv_hi > q_lo, can be true iff
// kv_lo <= q_hi; the tile is skipped when it cannot be true.
// CHECK: %[[CANFALSE:.*]] = arith.cmpi sgt, %{{.*}}, %[[QLO:.*]] : i64
// CHECK: %[[CANTRUE:.*]] = arith.cmpi sle, %[[KVLO:.*]], %{{.*}} : i64
// CHECK: %[[FULL:.*]] = arith.xori %[[CANFALSE]]
// CHECK: %[[NOTTRUE:.*]] = arith.xori %[[CANTRUE]]
// CHECK: %[[EMPTY:.*]] = arith.andi %[[CANFALSE]], %[[NOTTRUE]]
// CHECK: %[[LIVE:.*]] = arith.xori %[[EMPTY]]
// CHECK: scf.if %[[LIVE]] {
// CHECK: attn.load_tile %[[K]]
// CHECK: attn.load_tile %[[V]]
// CHECK: attn.dot {{.*}} transpose_rhs into {{.*}} scale 0.180336878
// CHECK: scf.if %[[FULL]] {
// CHECK-NEXT: attn.mask_select
// CHECK-NEXT: ^bb0
// CHECK-NEXT: %[[T:.*]] = arith.constant true
// CHECK-NEXT: attn.yield %[[T]] : i1
// CHECK: } else {
// CHECK-NEXT: attn.mask_select
// CHECK-NEXT: ^bb0
// CHECK-NEXT: arith.cmpi sle
// CHECK-NOT: attn.score_mod
// CHECK: attn.row_max
// CHECK: attn.exp2
// CHECK: attn.exp2
// CHECK: attn.rescale
// CHECK: attn.row_sum
// CHECK: attn.rescale
// O += P V: unguarded in a full tile, skipping P = 0 (masked keys) in a
// partial one.
// CHECK: scf.if %[[FULL]] {
// CHECK-NEXT: attn.dot {{.*}} into {{.*}} accumulate scale 1.0
// CHECK-NEXT: } else {
// CHECK-NEXT: attn.dot {{.*}} into {{.*}} accumulate skip_zero_lhs scale 1.0
// CHECK: attn.store_tile {{.*}} into %[[O]]
// CHECK: attn.store_lse {{.*}} into %[[LSE]]

// COUNT-LABEL: func.func @causal
// COUNT: llvm.atomicrmw add
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

// -----

// A score modifier with a parameter and a buffer: the parameter becomes the
// kernel argument, the buffer read a bounds-checked attn.load_elem, and
// log2(e) moves after the modifier (post_scale). No LSE requested.

// CHECK-LABEL: func.func @biased(
// CHECK-SAME: %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr, %{{[^:]*}}: !llvm.ptr, %[[STATUS:[^:]*]]: !llvm.ptr, %{{[^:]*}}: !llvm.ptr,
// CHECK-SAME: %[[BUF:[^:]*]]: !llvm.ptr, %[[SIZE:[^:]*]]: i64, %[[CAP:[^:]*]]: f32,
// CHECK: attn.dot {{.*}} transpose_rhs into {{.*}} scale 1.250000e-01
// CHECK: attn.score_mod {{.*}} post_scale 1.44269502
// CHECK: attn.load_elem %[[BUF]][%{{.*}}] size %[[SIZE]] status %[[STATUS]][0] : i32 -> f32
// CHECK: arith.divf %{{.*}}, %[[CAP]]
// CHECK-NOT: attn.param
// CHECK-NOT: attn.store_lse
attn.attention @biased attributes {
    dtype_q = f16, dtype_k = f16, dtype_v = f16, dtype_o = f16,
    head_dim_qk = 32 : i64, head_dim_v = 32 : i64, heads_q = 2 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = false,
    params = {cap = f32}, buffers = {bias = f32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %x = attn.buffer_load "bias"[%h] : i32 -> f32
  %cap = attn.param "cap" : f32
  %0 = arith.divf %s, %cap : f32
  %1 = arith.addf %0, %x : f32
  attn.yield %1 : f32
}
