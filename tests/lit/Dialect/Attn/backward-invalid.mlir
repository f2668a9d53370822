// RUN: flashjit-opt %s -split-input-file -verify-diagnostics
// The backward's verifiers: region signatures, where gradient ops may
// appear, f32-only gradients, tile shapes.

// expected-error @+1 {{'score_grad' region takes 8 arguments, has 7}}
attn.attention @bad_grad_args attributes {
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
} score_grad {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

attn.attention @grad_in_score attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 8 : i64, head_dim_v = 8 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.35 : f32, return_lse = true,
    params = {cap = f32}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  // expected-error @+1 {{must be inside a score_grad region}}
  attn.param_grad "cap", %s
  attn.yield %s : f32
}

// -----

attn.attention @int_buffer_grad attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 8 : i64, head_dim_v = 8 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.35 : f32, return_lse = true,
    params = {}, buffers = {doc = i32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
} score_grad {
^bb0(%ds: f32, %s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  // expected-error @+1 {{buffer 'doc' is declared 'i32'; only f32 ones have gradients}}
  attn.buffer_grad "doc"[%q], %ds : i32
  attn.yield %ds : f32
}

// -----

attn.attention @undeclared attributes {
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
} score_grad {
^bb0(%ds: f32, %s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  // expected-error @+1 {{'rel' is not declared in the enclosing attn.attention's buffers}}
  attn.buffer_grad "rel"[%q], %ds : i32
  attn.yield %ds : f32
}

// -----

func.func @bad_dot(%a: memref<16x8xf32>, %b: memref<16x8xf32>, %c: memref<16x8xf32>) {
  // expected-error @+1 {{accumulator must be 8x8}}
  attn.dot %a transpose_lhs, %b into %c scale 1.0 : memref<16x8xf32>, memref<16x8xf32>, memref<16x8xf32>
  return
}

// -----

func.func @bad_softmax_grad(%p: memref<16x16xf32>, %dp: memref<16x8xf32>, %d: memref<16xf32>) {
  // expected-error @+1 {{p, dp and out must have one type}}
  attn.softmax_grad %p, %dp, %d into %p : memref<16x16xf32>, memref<16x8xf32>, memref<16xf32>, memref<16x16xf32>
  return
}

// -----

func.func @bad_score_grad(%g: memref<16x16xf32>, %i: i64) {
  // expected-error @+1 {{'body' region takes 8 arguments, has 7}}
  attn.score_grad %g, %g at(%i, %i) valid(%i, %i) batch %i head %i seqlens(%i, %i) : memref<16x16xf32>, memref<16x16xf32> {
  ^bb0(%x: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
    attn.yield %x : f32
  }
  return
}

// -----

// score_grad_of_output (the GPU backward's score_grad of s') needs the
// region it describes.
// expected-error @+1 {{has score_grad_of_output without a score_grad region}}
attn.attention @output_without_grad attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 8 : i64, head_dim_v = 8 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.35 : f32, return_lse = true,
    params = {}, buffers = {}, score_grad_of_output} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
