// RUN: flashjit-opt %s -split-input-file -convert-attn-to-scf | FileCheck %s
// Each tile op becomes scalar loops; no attn op remains.

// bf16 loads widen with a 16-bit shift; rows past `rows` are zero-filled.
// CHECK-LABEL: func.func @load_bf16(
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK: %[[IN:.*]] = arith.cmpi slt, %[[I]], %{{.*}} : index
// CHECK: scf.if %[[IN]] {
// CHECK: scf.for
// CHECK: llvm.getelementptr {{.*}} -> !llvm.ptr, bf16
// CHECK: llvm.load {{.*}} -> i16
// CHECK: arith.shli
// CHECK: arith.bitcast {{.*}} : i32 to f32
// CHECK: memref.store
// CHECK: } else {
// CHECK: memref.store
// CHECK-NOT: attn.
func.func @load_bf16(%p: !llvm.ptr, %off: i64, %rows: i64, %rs: i64, %cs: i64, %t: memref<16x32xf32>) {
  attn.load_tile %p[%off] rows %rows strides(%rs, %cs) into %t : bf16, memref<16x32xf32>
  return
}

// -----

// S = scale * Q K^T: a reduction over the head dim with reassoc so LLVM can
// vectorise it.
// CHECK-LABEL: func.func @dot_qk(
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for {{.*}} iter_args
// CHECK: arith.mulf {{.*}} fastmath<reassoc>
// CHECK: arith.addf {{.*}} fastmath<reassoc>
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: memref.store
func.func @dot_qk(%q: memref<16x32xf32>, %k: memref<8x32xf32>, %s: memref<16x8xf32>) {
  attn.dot %q, %k transpose_rhs into %s scale 0.5 : memref<16x32xf32>, memref<8x32xf32>, memref<16x8xf32>
  return
}

// -----

// O += P V with skip_zero_lhs: a zero P element (a masked key) skips its V
// row, so 0 * inf never happens; UNE keeps NaN in P. Without the attribute
// the row is always added.
// CHECK-LABEL: func.func @dot_pv_skip(
// CHECK: scf.for %[[I:.*]] =
// CHECK: scf.for %[[K:.*]] =
// CHECK: %[[P:.*]] = memref.load %{{.*}}[%[[I]], %[[K]]]
// CHECK: %[[NZ:.*]] = arith.cmpf une, %[[P]], %{{.*}} : f32
// CHECK: scf.if %[[NZ]] {
// CHECK: scf.for
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK-LABEL: func.func @dot_pv(
// CHECK-NOT: arith.cmpf une
// CHECK: return
func.func @dot_pv_skip(%p: memref<16x8xf32>, %v: memref<8x32xf32>, %acc: memref<16x32xf32>) {
  attn.dot %p, %v into %acc accumulate skip_zero_lhs scale 1.0 : memref<16x8xf32>, memref<8x32xf32>, memref<16x32xf32>
  return
}
func.func @dot_pv(%p: memref<16x8xf32>, %v: memref<8x32xf32>, %acc: memref<16x32xf32>) {
  attn.dot %p, %v into %acc accumulate scale 1.0 : memref<16x8xf32>, memref<8x32xf32>, memref<16x32xf32>
  return
}

// -----

// A full tile runs no mask code: only the columns past `cols` (and rows past
// `rows`) become -inf.
// CHECK-LABEL: func.func @mask_full(
// CHECK-SAME: %[[S:[^:]*]]: memref<16x8xf32>
// CHECK: %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: scf.for %[[I:.*]] =
// CHECK: %[[START:.*]] = arith.select
// CHECK: scf.for %[[J:.*]] = %[[START]]
// CHECK-NEXT: memref.store %[[NINF]], %[[S]][%[[I]], %[[J]]]
// CHECK-NOT: arith.cmpi sle
func.func @mask_full(%s: memref<16x8xf32>, %i: i64) {
  attn.mask_select %s at(%i, %i) valid(%i, %i) batch %i head %i seqlens(%i, %i) : memref<16x8xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    %t = arith.constant true
    attn.yield %t : i1
  }
  return
}

// -----

// A partial tile inlines the user's mask per in-bounds element, with
// q_idx = q0 + i and kv_idx = kv0 + j as i32.
// CHECK-LABEL: func.func @mask_partial(
// CHECK-SAME: %[[S:[^:]*]]: memref<16x8xf32>, %[[Q0:[^:]*]]: i64, %[[KV0:[^:]*]]: i64
// CHECK: scf.for %[[I:.*]] =
// CHECK: scf.for %[[J:.*]] =
// CHECK: %[[OK:.*]] = scf.if %{{.*}} -> (i1) {
// CHECK: %[[QI:.*]] = arith.addi %[[Q0]], %{{.*}} : i64
// CHECK: %[[Q32:.*]] = arith.trunci %[[QI]] : i64 to i32
// CHECK: %[[KI:.*]] = arith.addi %[[KV0]], %{{.*}} : i64
// CHECK: %[[K32:.*]] = arith.trunci %[[KI]] : i64 to i32
// CHECK: %[[M:.*]] = arith.cmpi sle, %[[K32]], %[[Q32]] : i32
// CHECK: scf.yield %[[M]] : i1
// CHECK: arith.select %[[OK]]
func.func @mask_partial(%s: memref<16x8xf32>, %q0: i64, %kv0: i64, %n: i64) {
  attn.mask_select %s at(%q0, %kv0) valid(%n, %n) batch %n head %n seqlens(%n, %n) : memref<16x8xf32> {
  ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    %0 = arith.cmpi sle, %kv, %q : i32
    attn.yield %0 : i1
  }
  return
}

// -----

// The score modifier runs only on allowed (not -inf) scores, then log2(e).
// CHECK-LABEL: func.func @score(
// CHECK: %[[X:.*]] = memref.load
// CHECK: %[[LIVE:.*]] = arith.cmpf one, %[[X]]
// CHECK: scf.if %[[LIVE]] {
// CHECK: math.tanh
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: memref.store
func.func @score(%s: memref<16x8xf32>, %n: i64) {
  attn.score_mod %s at(%n, %n) valid(%n, %n) batch %n head %n seqlens(%n, %n) post_scale 1.44269502 : memref<16x8xf32> {
  ^bb0(%x: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    %0 = math.tanh %x : f32
    attn.yield %0 : f32
  }
  return
}

// -----

// exp2 relative to the row max is 0 on rows whose max is -inf (no NaN from
// (-inf) - (-inf)).
// CHECK-LABEL: func.func @softmax_step(
// CHECK: %[[MI:.*]] = memref.load
// CHECK: %[[DEAD:.*]] = arith.cmpf oeq, %[[MI]]
// CHECK: math.exp2
// CHECK: arith.select %[[DEAD]]
// CHECK: arith.maximumf {{.*}} fastmath<reassoc>
func.func @softmax_step(%s: memref<16x8xf32>, %m: memref<16xf32>, %m2: memref<16xf32>) {
  attn.exp2 %s, %m into %s : memref<16x8xf32>, memref<16xf32>, memref<16x8xf32>
  attn.row_max %s, %m into %m2 : memref<16x8xf32>, memref<16xf32>, memref<16xf32>
  return
}

// -----

// O = acc / l with exact zeros for l = 0, rounded to bf16 with integer ops;
// LSE = (m + log2 l) ln 2, -inf for l = 0.
// CHECK-LABEL: func.func @store(
// CHECK: arith.cmpf oeq
// CHECK: arith.divf
// CHECK: arith.bitcast {{.*}} : f32 to i32
// CHECK: arith.constant 32767 : i32
// CHECK: arith.trunci {{.*}} : i32 to i16
// CHECK: llvm.store {{.*}} : i16, !llvm.ptr
// CHECK: math.log2
// CHECK: llvm.store {{.*}} : f32, !llvm.ptr
func.func @store(%acc: memref<16x32xf32>, %l: memref<16xf32>, %m: memref<16xf32>, %p: !llvm.ptr, %i: i64) {
  attn.store_tile %acc, %l into %p[%i] rows %i strides(%i, %i) : memref<16x32xf32>, memref<16xf32> -> bf16
  attn.store_lse %m, %l into %p[%i] rows %i stride %i : memref<16xf32>, memref<16xf32>
  return
}

// -----

// attn.mask_reduce: rows until the answer is known (an allowed and a
// disallowed element seen), every column of a row, the mask inlined.
// CHECK-LABEL: func.func @mask_reduce(
// CHECK: %[[R:.*]]:3 = scf.while (%[[I:.*]] = %{{.*}}, %[[ANY:.*]] = %false, %[[ALL:.*]] = %true)
// CHECK: %[[NOTALL:.*]] = arith.xori %[[ALL]], %true
// CHECK: %[[DECIDED:.*]] = arith.andi %[[ANY]], %[[NOTALL]]
// CHECK: %[[INROWS:.*]] = arith.cmpi slt, %[[I]], %{{.*}} : index
// CHECK: scf.condition
// CHECK: } do {
// CHECK: scf.for {{.*}} iter_args(%[[A:.*]] = %{{.*}}, %[[L:.*]] = %{{.*}}) -> (i1, i1) {
// CHECK: %[[M:.*]] = arith.cmpi sle
// CHECK: arith.ori %[[A]], %[[M]]
// CHECK: arith.andi %[[L]], %[[M]]
// CHECK: return %[[R]]#1, %[[R]]#2
// CHECK-NOT: attn.
func.func @mask_reduce(%q0: i64, %kv0: i64, %rows: i64, %cols: i64, %b: i64) -> (i1, i1) {
  %any, %all = attn.mask_reduce at(%q0, %kv0) valid(%rows, %cols) batch %b head %b seqlens(%b, %b) {
  ^bb0(%bb: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    %0 = arith.cmpi sle, %kv, %q : i32
    attn.yield %0 : i1
  }
  return %any, %all : i1, i1
}
