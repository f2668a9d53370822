// RUN: flashjit-opt %s -split-input-file -verify-diagnostics
// The verifiers reject malformed attn ops with a message naming the field.

// expected-error @+1 {{heads_kv = 3 must be positive and divide heads_q = 4}}
attn.attention @bad_heads attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 4 : i64,
    heads_kv = 3 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// expected-error @+1 {{tensor element type must be f16, bf16, f32 or (q, k, v) f8E4M3FN / f8E5M2, got 'i8'}}
attn.attention @bad_dtype attributes {
    dtype_q = i8, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
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

// fp8 Q/K/V are memory types (issue 18), an fp8 O is not.
// expected-error @+1 {{tensor element type must be f16, bf16 or f32, got 'f8E4M3FN'}}
attn.attention @fp8_output attributes {
    dtype_q = f8E4M3FN, dtype_k = f8E4M3FN, dtype_v = f8E4M3FN, dtype_o = f8E4M3FN,
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

// expected-error @+1 {{'mask' region takes 6 arguments, has 5}}
attn.attention @bad_args attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

attn.attention @undeclared_param attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  // expected-error @+1 {{'cap' is not declared in the enclosing attn.attention's params}}
  %c = attn.param "cap" : f32
  attn.yield %c : f32
}

// -----

// expected-error @+1 {{'mask' region must yield 'i1', yields 'f32'}}
attn.attention @mask_yields_float attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %f = arith.constant 1.0 : f32
  attn.yield %f : f32
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

func.func @dot_shapes(%a: memref<16x32xf32>, %b: memref<16x64xf32>, %c: memref<16x16xf32>) {
  // expected-error @+1 {{contraction sizes differ: lhs has 32, rhs has 64}}
  attn.dot %a, %b transpose_rhs into %c scale 1.0 : memref<16x32xf32>, memref<16x64xf32>, memref<16x16xf32>
  return
}

// -----

func.func @dot_skip_transposed(%a: memref<16x32xf32>, %b: memref<16x32xf32>, %c: memref<16x16xf32>) {
  // expected-error @+1 {{skip_zero_lhs is for O += P V and the backward's lhs-weighted products; it cannot be combined with transpose_rhs}}
  attn.dot %a, %b transpose_rhs into %c skip_zero_lhs scale 1.0 : memref<16x32xf32>, memref<16x32xf32>, memref<16x16xf32>
  return
}

// -----

func.func @row_counts(%s: memref<16x16xf32>, %m: memref<8xf32>, %o: memref<16xf32>) {
  // expected-error @+1 {{row counts differ}}
  attn.row_max %s, %m into %o : memref<16x16xf32>, memref<8xf32>, memref<16xf32>
  return
}

// -----

func.func @store_type(%acc: memref<16x16xf32>, %l: memref<16xf32>, %p: !llvm.ptr, %i: i64) {
  // expected-error @+1 {{element type must be f16, bf16 or f32, got 'i32'}}
  attn.store_tile %acc, %l into %p[%i] rows %i strides(%i, %i) : memref<16x16xf32>, memref<16xf32> -> i32
  return
}

// -----

func.func @mask_reduce_args(%x: i64) -> i1 {
  // expected-error @+1 {{'mask' region takes 6 arguments, has 5}}
  %any, %all = attn.mask_reduce at(%x, %x) valid(%x, %x) batch %x head %x seqlens(%x, %x) {
  ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32):
    %t = arith.constant true
    attn.yield %t : i1
  }
  return %any : i1
}
