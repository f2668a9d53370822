// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true wgmma=true" | FileCheck %s
// The sm_90a backward at head dim 128 with a mask. Mask code that reads no
// buffer (causal here) takes the pipelined tile step: S^T and dP^T issued
// together and waited for one group at a time (wait_group 1, then 0), the
// next query tile's loads issued after the first barrier, dV, dQ and dK
// each issued before the previous group is waited for.

// CHECK-LABEL: gpu.func @c128_bwd(
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK-NOT: wgmma.wait_group
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: math.exp2
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: red.global.add.v2.f32
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: gpu.return
attn.attention @c128 attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 128 : i64, head_dim_v = 128 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.088388 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// A document mask (buffer reads) at head dim 128: the pipelined step with
// dP^T issued once P^T is made (S^T waited for alone, wait_group 0), so the
// mask runs beside S^T only; dV, dQ and dK still overlap (wait_group 1).

// CHECK-LABEL: gpu.func @d128_bwd(
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK: wgmma.commit_group.sync.aligned;
// CHECK-NOT: wgmma.mma_async
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: math.exp2
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: gpu.return
attn.attention @d128 attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 128 : i64, head_dim_v = 128 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.088388 : f32, return_lse = true,
    params = {}, buffers = {doc_id = i32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %dq = attn.buffer_load "doc_id"[%q] : i32 -> i32
  %dk = attn.buffer_load "doc_id"[%kv] : i32 -> i32
  %0 = arith.cmpi eq, %dq, %dk : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// A score modifier that reads a buffer (a per-key bias) keeps the
// synchronous step at head dim 128: each product waited for in its own
// asm right after its commit (wait_group 0 only).

// CHECK-LABEL: gpu.func @b128_bwd(
// CHECK-NOT: "wgmma.wait_group.sync.aligned 1;"
// CHECK: wgmma.commit_group.sync.aligned;\0Awgmma.wait_group.sync.aligned 0;
// CHECK-NOT: "wgmma.wait_group.sync.aligned 1;"
// CHECK: gpu.return
attn.attention @b128 attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 128 : i64, head_dim_v = 128 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.088388 : f32, return_lse = true,
    params = {}, buffers = {bias = f32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = attn.buffer_load "bias"[%kv] : i32 -> f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} score_grad {
^bb0(%ds: f32, %s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %ds : f32
}
