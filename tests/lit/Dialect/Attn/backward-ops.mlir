// RUN: flashjit-opt %s | flashjit-opt | FileCheck %s
// The backward's ops parse, verify and print back (round trip): the
// score_grad region of attn.attention with attn.buffer_grad and
// attn.param_grad, and the backward tile ops.

// CHECK-LABEL: attn.attention @softcap_alibi
// CHECK: } score {
// CHECK: } score_grad {
// CHECK-NEXT: ^bb0(%[[DS:[^:]*]]: f32, %[[S:[^:]*]]: f32, %{{.*}}: i32
// CHECK: attn.buffer_grad "slopes"[%{{.*}}], %{{.*}} : i32
// CHECK: attn.param_grad "cap", %{{.*}}
// CHECK: attn.yield %{{.*}} : f32
attn.attention @softcap_alibi attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 8 : i64, head_dim_v = 8 : i64, heads_q = 2 : i64,
    heads_kv = 1 : i64, scale = 0.35 : f32, return_lse = true,
    params = {cap = f32}, buffers = {slopes = f32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %cap = attn.param "cap" : f32
  %0 = arith.divf %s, %cap : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %cap, %1 : f32
  attn.yield %2 : f32
} score_grad {
^bb0(%ds: f32, %s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %cap = attn.param "cap" : f32
  attn.buffer_grad "slopes"[%h], %ds : i32
  attn.param_grad "cap", %ds
  attn.yield %ds : f32
}

// A forward kernel has no score_grad region and prints none.
// CHECK-LABEL: attn.attention @forward
// CHECK: } score {
// CHECK-NOT: score_grad
// CHECK: func.func @tiles
attn.attention @forward attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 8 : i64, head_dim_v = 8 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.35 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// CHECK: attn.load_lse %{{.*}}[%{{.*}}] rows %{{.*}} stride %{{.*}} into %{{.*}} : memref<16xf32>
// CHECK: attn.row_dot %{{.*}}, %{{.*}} into %{{.*}} : memref<16x8xf32>, memref<16x8xf32>, memref<16xf32>
// CHECK: attn.softmax_grad %{{.*}}, %{{.*}}, %{{.*}} into %{{.*}} : memref<16x16xf32>
// CHECK: attn.dot %{{.*}} transpose_lhs, %{{.*}} into %{{.*}} accumulate scale
// CHECK: attn.dot %{{.*}} transpose_lhs, %{{.*}} into %{{.*}} accumulate skip_zero_lhs scale
// CHECK: attn.exp2 %{{.*}}, %{{.*}} into %{{.*}} zero_masked : memref<16x16xf32>
// CHECK: attn.score_grad %{{.*}}, %{{.*}} at(
// CHECK: ^bb0(%d_score: f32, %score: f32, %batch: i32
func.func @tiles(%p: !llvm.ptr, %off: i64, %n: i64, %st: i64, %i: i64) {
  %l = memref.alloca() : memref<16xf32>
  %d = memref.alloca() : memref<16xf32>
  %o = memref.alloca() : memref<16x8xf32>
  %do = memref.alloca() : memref<16x8xf32>
  %s = memref.alloca() : memref<16x16xf32>
  %ds = memref.alloca() : memref<16x16xf32>
  %dv = memref.alloca() : memref<16x8xf32>
  attn.load_lse %p[%off] rows %n stride %st into %l : memref<16xf32>
  attn.row_dot %do, %o into %d : memref<16x8xf32>, memref<16x8xf32>, memref<16xf32>
  attn.softmax_grad %s, %ds, %d into %ds : memref<16x16xf32>, memref<16x16xf32>, memref<16xf32>, memref<16x16xf32>
  attn.dot %s transpose_lhs, %do into %dv accumulate scale 1.0 : memref<16x16xf32>, memref<16x8xf32>, memref<16x8xf32>
  attn.dot %s transpose_lhs, %do into %dv accumulate skip_zero_lhs scale 1.0 : memref<16x16xf32>, memref<16x8xf32>, memref<16x8xf32>
  attn.exp2 %s, %l into %s zero_masked : memref<16x16xf32>, memref<16xf32>, memref<16x16xf32>
  attn.score_grad %ds, %s at(%i, %i) valid(%n, %n) batch %i head %i seqlens(%n, %n) : memref<16x16xf32>, memref<16x16xf32> {
  ^bb0(%g: f32, %x: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    %0 = arith.mulf %g, %x : f32
    attn.yield %0 : f32
  }
  return
}
