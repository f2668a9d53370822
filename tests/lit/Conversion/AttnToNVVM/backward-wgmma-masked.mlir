// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true wgmma=true" | FileCheck %s
// The sm_90a backward at head dim 128 with a mask (causal here) keeps the
// synchronous tile step by default (the pipelined one spills in some masked
// kernels there; setMaskedPipelinedBackwardForTesting builds it, see
// GpuCodegenTest): each product waited for in its own asm right after its
// commit (wait_group 0 only), S^T before dP^T.

// CHECK-LABEL: gpu.func @c128_bwd(
// CHECK-NOT: "wgmma.wait_group.sync.aligned 1;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// CHECK: wgmma.commit_group.sync.aligned;\0Awgmma.wait_group.sync.aligned 0;
// CHECK: math.exp2
// CHECK-NOT: "wgmma.wait_group.sync.aligned 1;"
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

