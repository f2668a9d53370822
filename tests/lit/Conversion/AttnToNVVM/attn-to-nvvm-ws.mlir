// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=128 num-warps=8 wgmma=true tma=true warp-specialized=true" | FileCheck %s --check-prefixes=CHECK,SERIAL
// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=128 num-warps=8 wgmma=true tma=true warp-specialized=true overlap-softmax=true" | FileCheck %s --check-prefixes=CHECK,OVL
// warp-specialized=true: FlashAttention-3's structure. 256 consumer
// threads and a producer warpgroup (384 threads); thread 0 initialises the
// Q and per-stage full mbarriers (one arrival) and the per-stage empty
// mbarriers (256 arrivals); then one scf.if splits the roles: the producer
// gives registers back (setmaxnreg 24) and its first thread loops over the
// key tiles, waiting for a stage's release before loading it by TMA; the
// consumers take registers (setmaxnreg 240), wait for each stage's data,
// compute and release it with an arrival, no CTA barrier in their loop.
// overlap-softmax=true (FlashAttention-3's intra-warpgroup overlap): the
// first step of the loop (a partial tile with the previous tile's P V
// pending) issues S = Q K^T and P V as two wgmma groups without waiting,
// waits for S alone (wait_group 1), then for P V (wait_group 0), and only
// then releases the previous tile's stage.

// CHECK-LABEL: gpu.func @causal(
// CHECK-SAME: flashjit.grid_constant_args = array<i32: [[Q:[0-9]+]], [[K:[0-9]+]], [[V:[0-9]+]]>
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// CHECK: mbarrier.init.shared::cta.b64
// CHECK: mbarrier.init.shared::cta.b64
// CHECK: gpu.barrier
// CHECK: cp.async.bulk.tensor.4d
// CHECK: scf.if
// CHECK: nvvm.setmaxregister decrease 24
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK: mbarrier.arrive.expect_tx
// CHECK: cp.async.bulk.tensor.4d
// CHECK: } else {
// CHECK: nvvm.setmaxregister increase 240
// CHECK: mbarrier.try_wait.parity
// CHECK: scf.for
// CHECK-NOT: gpu.barrier
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: gpu.barrier
// SERIAL-NOT: wgmma.wait_group.sync.aligned 1
// SERIAL: wgmma.mma_async
// OVL: wgmma.mma_async{{.*}}wgmma.commit_group.sync.aligned;\0A}"
// OVL-NOT: wgmma.wait_group
// OVL: wgmma.mma_async{{.*}}wgmma.commit_group.sync.aligned;\0A}"
// OVL-NOT: wgmma.wait_group
// OVL: wgmma.wait_group.sync.aligned 1;
// OVL-NOT: gpu.barrier
// OVL-NOT: mbarrier.arrive
// OVL: wgmma.wait_group.sync.aligned 0;
// CHECK-NOT: gpu.barrier
// CHECK: mbarrier.arrive.shared::cta.b64
// CHECK-NOT: gpu.barrier
// CHECK: gpu.return
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
