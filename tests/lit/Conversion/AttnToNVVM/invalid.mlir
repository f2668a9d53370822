// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm -verify-diagnostics

// expected-error @+1 {{the GPU kernel needs Q, K, V and O of one 16-bit dtype}}
attn.attention @f32 attributes {
    dtype_q = f32, dtype_k = f32, dtype_v = f32, dtype_o = f32,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// expected-error @+1 {{head dims must be multiples of 16 up to 256}}
attn.attention @d264 attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 264 : i64, head_dim_v = 264 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// RUN: not flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=100000" 2>&1 | FileCheck %s --check-prefix=BLOCK
// BLOCK: block-n a multiple of 16 up to 128
attn.attention @big_block attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
