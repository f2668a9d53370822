// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=128 num-warps=8 wgmma=true tma=true warp-specialized=true overlap-softmax=true ping-pong=true" | FileCheck %s
// RUN: flashjit-opt %s -attn-to-nvvm="block-n=128 num-warps=8 wgmma=true tma=true warp-specialized=true overlap-softmax=true ping-pong=true" -attn-nvvm-to-ptx="arch=sm_90a" | FileCheck %s --check-prefix=PTX
// RUN: not flashjit-opt %s -convert-attn-to-nvvm="block-n=128 num-warps=8 wgmma=true tma=true warp-specialized=true ping-pong=true" 2>&1 | FileCheck %s --check-prefix=ERR
// ping-pong=true (FlashAttention-3's inter-warpgroup ping-pong on the
// intra-warpgroup overlap, ForwardOverlap.cpp): a consumer's warpgroup
// (tid >> 7) owns named barrier 2 + warpgroup, the other's is 5 - that;
// warpgroup 0 arrives on its own once before the loop (it takes the first
// turn). In each of the step's four versions (masked or not, a P V pending
// or not) the warpgroup syncs on its own barrier (256 threads) before
// issuing S = Q K^T, and arrives on the other's after the last product it
// issues, before any wait. After the loop and the last pending P V
// (flushPV, which like the empty tile's takes no turn) warpgroup 0 syncs
// on its own barrier once more, taking warpgroup 1's last arrival; nothing
// else touches barriers 2 and 3.

// CHECK-LABEL: gpu.func @causal(
// CHECK: nvvm.setmaxregister increase 240
// CHECK: %[[WG:.*]] = arith.shrui %{{.*}}, %c7_i32 : i32
// CHECK: %[[SELF:.*]] = arith.addi %[[WG]], %c2_i32 : i32
// CHECK: %[[OTHER:.*]] = arith.subi %c5_i32, %[[SELF]] : i32
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[WG]], %c0_i32
// CHECK: scf.if %[[FIRST]] {
// CHECK-NEXT: %[[N0:.*]] = arith.constant 256 : i32
// CHECK-NEXT: nvvm.barrier.arrive id = %[[SELF]] number_of_threads = %[[N0]]
// CHECK-NEXT: }
// CHECK: scf.for
// CHECK-NOT: nvvm.barrier.arrive
// CHECK: nvvm.barrier id = %[[SELF]] number_of_threads = %{{.*}}
// CHECK-NOT: wgmma.wait_group
// CHECK: wgmma.mma_async{{.*}}wgmma.commit_group.sync.aligned;\0A}"
// CHECK-NOT: wgmma.wait_group
// CHECK: wgmma.mma_async{{.*}}wgmma.commit_group.sync.aligned;\0A}"
// CHECK-NOT: wgmma.wait_group
// CHECK: nvvm.barrier.arrive id = %[[OTHER]] number_of_threads = %{{.*}}
// CHECK: wgmma.wait_group.sync.aligned 1;
// CHECK: wgmma.wait_group.sync.aligned 0;
// CHECK: nvvm.barrier id = %[[SELF]]
// CHECK: nvvm.barrier.arrive id = %[[OTHER]]
// CHECK: nvvm.barrier id = %[[SELF]]
// CHECK: nvvm.barrier.arrive id = %[[OTHER]]
// CHECK: nvvm.barrier id = %[[SELF]]
// CHECK: nvvm.barrier.arrive id = %[[OTHER]]
// CHECK-NOT: nvvm.barrier id = %[[SELF]]
// CHECK-NOT: nvvm.barrier.arrive
// CHECK: wgmma.wait_group.sync.aligned 0;
// CHECK: %[[WG2:.*]] = arith.subi %[[SELF]], %c2_i32
// CHECK: %[[FIRST2:.*]] = arith.cmpi eq, %[[WG2]], %c0_i32
// CHECK: scf.if %[[FIRST2]] {
// CHECK-NEXT: %[[N1:.*]] = arith.constant 256 : i32
// CHECK-NEXT: nvvm.barrier id = %[[SELF]] number_of_threads = %[[N1]]
// CHECK-NEXT: }
// CHECK-NOT: nvvm.barrier id = %[[SELF]]
// CHECK-NOT: nvvm.barrier.arrive
// CHECK: gpu.return

// PTX: gpu.binary @flashjit_kernels
// PTX-SAME: bar.arrive
// PTX-COUNT-5: bar.sync \09%r{{[0-9]+}}, 256;
// PTX-NOT: bar.sync \09%r
// ERR: ping-pong kernels are overlap-softmax kernels with num-warps 8
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
