// RUN: flashjit-opt %s -attn-to-nvvm="block-n=128 num-warps=8 wgmma=true tma=true" -attn-nvvm-to-ptx="arch=sm_90a" | FileCheck %s
// tma=true: the tensor maps of Q, K and V are the last three fixed
// arguments, by value in parameter space (64-byte aligned, 128 bytes) and
// read there (flashjit-mark-grid-constants after convert-gpu-to-nvvm: no
// copy to local memory); one thread arms an mbarrier per stage and issues
// cp.async.bulk.tensor loads that complete on it, every thread waits on the
// stage's parity; no cp.async.

// CHECK: gpu.binary @flashjit_kernels
// CHECK-SAME: .entry causal(
// CHECK-SAME: .param .align 64 .b8 causal_param_{{[0-9]+}}[128],
// CHECK-SAME: .param .align 64 .b8 causal_param_{{[0-9]+}}[128],
// CHECK-SAME: .param .align 64 .b8 causal_param_{{[0-9]+}}[128]
// CHECK-NOT: cp.async.cg
// CHECK-SAME: mbarrier.init.shared::cta.b64
// CHECK-SAME: mbarrier.arrive.expect_tx.shared::cta.b64
// CHECK-SAME: cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK-SAME: mbarrier.try_wait.parity.shared::cta.b64
// CHECK-SAME: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
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
