// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true wgmma=true" | FileCheck %s
// RUN: not flashjit-opt %s -convert-attn-to-nvvm="block-n=32 num-warps=8 backward=true wgmma=true" 2>&1 | FileCheck %s --check-prefix=SHAPE
// The sm_90a backward (wgmma=true): two warpgroups of 64 keys (256
// threads, 128 keys per CTA), 64-row query tiles in unpadded 128-byte-
// swizzled tiles (K, V [128 x 64], two stages of Q, dO [64 x 64], dS^T
// [128 x 64], then two stages of LSE and D: 82944 bytes), made visible to
// the async proxy before the products read them. Asynchronous products:
// S^T = K Q^T and dP^T = V dO^T issued together (descriptors), waited for
// one group at a time; the next tile's loads issued after the first
// barrier; dV += P^T dO (P^T in registers, dO transposed) issued before
// the dS^T barrier, dQ = dS K per warpgroup (N = D / 2 = 32; dS and K both
// MN-major: imm-trans-a = imm-trans-b = 1) and dK += dS^T Q each issued
// before the previous group is waited for; dQ by vector reductions.

// CHECK-LABEL: gpu.func @w_bwd(
// CHECK-SAME: flashjit.shared_bytes = 82944 : i64
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: nvvm.cp.async.shared.global
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: {{gpu.barrier|nvvm.barrier}}
// CHECK: nvvm.cp.async.shared.global
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK-NOT: wgmma.wait_group
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: red.global.add.v2.f32
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: gpu.return

// SHAPE: unsupported wgmma GPU backward shape: block-n 64, num-warps 8, head dims 64 or 128
attn.attention @w attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
