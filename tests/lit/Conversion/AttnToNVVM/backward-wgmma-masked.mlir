// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true wgmma=true" | FileCheck %s --check-prefix=PIPE
// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true wgmma=true sync-backward=true" | FileCheck %s --check-prefix=SYNC
// RUN: not flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true sync-backward=true" 2>&1 | FileCheck %s --check-prefix=BAD
// The sm_90a backward at head dim 128 with a mask (causal here) takes the
// pipelined tile step by default: S^T and dP^T issued together, S^T
// waited for with dP^T still in flight (wait_group 1) while the mask and
// exp2 run. sync-backward=true (KernelConfig::syncBackward, the fallback
// where the pipelined kernel spills) gives the synchronous step: each
// product waited for in its own asm right after its commit (wait_group 0
// only), S^T before dP^T.

// PIPE-LABEL: gpu.func @c128_bwd(
// PIPE: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// PIPE-NOT: wgmma.wait_group
// PIPE: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// PIPE: "wgmma.wait_group.sync.aligned 1;"
// PIPE: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// PIPE: "wgmma.wait_group.sync.aligned 0;"
// PIPE: gpu.return

// SYNC-LABEL: gpu.func @c128_bwd(
// SYNC-NOT: "wgmma.wait_group.sync.aligned 1;"
// SYNC: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, z, 1, 1, 0, 0;
// SYNC: wgmma.commit_group.sync.aligned;\0Awgmma.wait_group.sync.aligned 0;
// SYNC: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// SYNC-NOT: "wgmma.wait_group.sync.aligned 1;"
// SYNC: gpu.return

// BAD: sync-backward kernels are wgmma backward kernels
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

