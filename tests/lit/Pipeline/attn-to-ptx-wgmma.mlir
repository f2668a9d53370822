// RUN: flashjit-opt %s -attn-to-nvvm="block-n=128 num-warps=8 wgmma=true" -attn-nvvm-to-ptx="arch=sm_90a" | FileCheck %s
// The sm_90a path to PTX: each warpgroup's S = Q K^T and O += P V are
// wgmma.mma_async chains (fence, k16 steps, commit, wait); cp.async writes
// the 128-byte-swizzled tiles and fence.proxy.async hands them to wgmma.
// The kernel's assembly by ptxas is checked for the whole matrix in
// tests/unit/gpu_codegen.

// CHECK: gpu.binary @flashjit_kernels
// CHECK-SAME: .target sm_90a
// CHECK-SAME: .entry causal
// (In any order: the masked kernel's blocks, the masked-value guard among
// them, are laid out as LLVM likes.)
// CHECK-DAG: cp.async.cg.shared.global
// CHECK-DAG: fence.proxy.async.shared::cta
// CHECK-DAG: wgmma.fence.sync.aligned
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK-DAG: wgmma.commit_group.sync.aligned
// CHECK-DAG: wgmma.wait_group.sync.aligned 0
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
attn.attention @causal attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 128 : i64, head_dim_v = 128 : i64, heads_q = 8 : i64,
    heads_kv = 8 : i64, scale = 0.088 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
