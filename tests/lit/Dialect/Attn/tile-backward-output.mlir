// RUN: flashjit-opt %s -attn-tile-backward -verify-diagnostics
// The CPU backward passes score_grad the raw score: a score_grad written in
// the modifier's output (the GPU backward's score_grad_of_output) is
// refused, not run on the wrong argument.

// expected-error @+1 {{has score_grad_of_output: the CPU backward passes score_grad the raw score}}
attn.attention @softcap_of_output attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 8 : i64, head_dim_v = 8 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.35 : f32, return_lse = true,
    params = {}, buffers = {}, score_grad_of_output} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %c = arith.constant 3.000000e+01 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %c, %1 : f32
  attn.yield %2 : f32
} score_grad {
^bb0(%ds: f32, %y: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32,
     %sk: i32):
  // dS = dS' * (1 - (s' / 30)^2)
  %c = arith.constant 3.000000e+01 : f32
  %one = arith.constant 1.000000e+00 : f32
  %t = arith.divf %y, %c : f32
  %t2 = arith.mulf %t, %t : f32
  %f = arith.subf %one, %t2 : f32
  %g = arith.mulf %ds, %f : f32
  attn.yield %g : f32
}
