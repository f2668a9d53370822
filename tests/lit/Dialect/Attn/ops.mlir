// RUN: flashjit-opt %s | flashjit-opt | FileCheck %s
// Every attn op parses, verifies and prints back (round trip).

// CHECK-LABEL: attn.attention @causal_softcap
// CHECK-SAME: heads_q = 4 : i64
// CHECK: mask {
// CHECK: %[[C:.*]] = arith.cmpi sle
// CHECK: attn.yield %[[C]] : i1
// CHECK: } score {
// CHECK: attn.param "cap" : f32
// CHECK: attn.buffer_load "bias"[%{{.*}}] : i32 -> f32
attn.attention @causal_softcap attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 4 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {cap = f32}, buffers = {bias = f32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %cap = attn.param "cap" : f32
  %x = attn.buffer_load "bias"[%h] : i32 -> f32
  %0 = arith.divf %s, %cap : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %cap, %1 : f32
  %3 = arith.addf %2, %x : f32
  attn.yield %3 : f32
}

// CHECK-LABEL: func.func @scalars
// CHECK: attn.div %{{.*}}, %{{.*}} : i32
// CHECK: attn.rem %{{.*}}, %{{.*}} : i64
// CHECK: attn.fptosi_sat %{{.*}} : f32 to i32
// CHECK: attn.load_elem %{{.*}}[%{{.*}}] size %{{.*}} status %{{.*}}[1] : i32 -> i32
func.func @scalars(%a: i32, %b: i32, %c: i64, %f: f32, %p: !llvm.ptr, %n: i64) {
  %0 = attn.div %a, %b : i32
  %1 = attn.rem %c, %c : i64
  %2 = attn.fptosi_sat %f : f32 to i32
  %3 = attn.load_elem %p[%a] size %n status %p[1] : i32 -> i32
  return
}

// CHECK-LABEL: func.func @tiles
// CHECK: attn.fill
// CHECK: attn.load_tile %{{.*}}[%{{.*}}] rows %{{.*}} strides(%{{.*}}, %{{.*}}) into %{{.*}} : bf16, memref<16x32xf32>
// CHECK: attn.dot %{{.*}}, %{{.*}} transpose_rhs into %{{.*}} scale
// CHECK: attn.mask_select
// CHECK: attn.score_mod
// CHECK: attn.row_max
// CHECK: attn.exp2
// CHECK: attn.rescale
// CHECK: attn.row_sum
// CHECK: attn.dot %{{.*}}, %{{.*}} into %{{.*}} accumulate scale
// CHECK: attn.store_tile {{.*}} -> f16
// CHECK: attn.store_lse
func.func @tiles(%p: !llvm.ptr, %i: i64, %q: memref<16x32xf32>,
                 %k: memref<16x32xf32>, %s: memref<16x16xf32>,
                 %m: memref<16xf32>, %m2: memref<16xf32>, %l: memref<16xf32>,
                 %acc: memref<16x32xf32>, %x: f32) {
  attn.fill %x, %m : f32, memref<16xf32>
  attn.load_tile %p[%i] rows %i strides(%i, %i) into %q : bf16, memref<16x32xf32>
  attn.dot %q, %k transpose_rhs into %s scale 0.5 : memref<16x32xf32>, memref<16x32xf32>, memref<16x16xf32>
  attn.mask_select %s at(%i, %i) valid(%i, %i) batch %i head %i seqlens(%i, %i) : memref<16x16xf32> {
  ^bb0(%b: i32, %h: i32, %qi: i32, %kv: i32, %sq: i32, %sk: i32):
    %0 = arith.cmpi sle, %kv, %qi : i32
    attn.yield %0 : i1
  }
  attn.score_mod %s at(%i, %i) valid(%i, %i) batch %i head %i seqlens(%i, %i) post_scale 1.0 : memref<16x16xf32> {
  ^bb0(%v: f32, %b: i32, %h: i32, %qi: i32, %kv: i32, %sq: i32, %sk: i32):
    attn.yield %v : f32
  }
  attn.row_max %s, %m into %m2 : memref<16x16xf32>, memref<16xf32>, memref<16xf32>
  attn.exp2 %s, %m2 into %s : memref<16x16xf32>, memref<16xf32>, memref<16x16xf32>
  attn.rescale %acc by %m : memref<16x32xf32>, memref<16xf32>
  attn.row_sum %s into %l : memref<16x16xf32>, memref<16xf32>
  attn.dot %s, %k into %acc accumulate scale 1.0 : memref<16x16xf32>, memref<16x32xf32>, memref<16x32xf32>
  attn.store_tile %acc, %l into %p[%i] rows %i strides(%i, %i) : memref<16x32xf32>, memref<16xf32> -> f16
  attn.store_lse %m, %l into %p[%i] rows %i stride %i : memref<16xf32>, memref<16xf32>
  return
}

// CHECK-LABEL: func.func @mask_reduce
// CHECK: %{{.*}}:2 = attn.mask_reduce at(%{{.*}}, %{{.*}}) valid(%{{.*}}, %{{.*}}) batch %{{.*}} head %{{.*}} seqlens(%{{.*}}, %{{.*}}) {
// CHECK: ^bb0(%batch: i32, %head: i32, %q_idx: i32, %kv_idx: i32, %seqlen_q: i32, %seqlen_k: i32):
// CHECK: attn.yield %{{.*}} : i1
func.func @mask_reduce(%x: i64) -> (i1, i1) {
  %any, %all = attn.mask_reduce at(%x, %x) valid(%x, %x) batch %x head %x seqlens(%x, %x) {
  ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    %0 = arith.cmpi sle, %kv, %q : i32
    attn.yield %0 : i1
  }
  return %any, %all : i1, i1
}
