// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=128 num-warps=8 wgmma=true" -verify-diagnostics | FileCheck %s
// wgmma=true: two warpgroups issue wgmma.mma_async (S = Q K^T from shared
// memory, O += P V with P in registers and V transposed), cp.async into
// unpadded 128-byte-swizzled tiles made visible to the async proxy, and the
// mask still cloned per accumulator element.

// CHECK: llvm.mlir.global external @flashjit_smem() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK-LABEL: gpu.func @causal(
// CHECK-SAME: flashjit.shared_bytes = 81920 : i64
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: nvvm.cp.async.shared.global
// CHECK: llvm.inline_asm has_side_effects {{.*}}"fence.proxy.async.shared::cta;"
// CHECK: llvm.inline_asm has_side_effects {{.*}}wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 0;
// CHECK: arith.cmpi sle
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: llvm.inline_asm has_side_effects {{.*}}wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: gpu.return
attn.attention @causal attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 4 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// expected-error @+1 {{wgmma kernels need rows-per-warp 16 and head dims that are multiples of 64}}
attn.attention @d96 attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 96 : i64, head_dim_v = 96 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.1 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.constant true
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
