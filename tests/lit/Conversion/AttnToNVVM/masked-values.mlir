// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=64 num-warps=4" | FileCheck %s --check-prefix=FWD
// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=64 num-warps=4 backward=true" | FileCheck %s --check-prefix=BWD
// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=64 num-warps=4 decode=true" | FileCheck %s --check-prefix=DEC
// RUN: flashjit-opt %s -split-input-file -convert-attn-to-nvvm="block-n=64 num-warps=8 backward=true wgmma=true" | FileCheck %s --check-prefix=BWDW
// Masked keys are isolated (issue 21 section 3, MaskedValues.h). Forward:
// in a partially masked tile (the condition the mask code runs under) the
// CTA votes, before S, on NaN or Inf in the V tile (vector loads of its
// chunks in a run-time loop, one OR-reducing barrier); where the vote
// holds (a branch marked unlikely: llvm.intr.expect), the guarded path
// adds the non-finite terms (16-bit weights picked
// from the quad with shfl.sync idx, a run-time loop over the 64 keys),
// then rewrites the tile (barrier, 16-byte stores, barrier); the one
// product P V follows in both cases. Backward: the CTA votes on NaN or Inf
// in its K tile (one fma.rn.bf16x2 x * 0 + acc per 32-bit word): mma.sync
// once, as soon as K has landed (cp.async group 1 waited for, barrier),
// thread 0 leaving the answer in shared memory (K's row padding), read by
// partial tiles; wgmma (BWDW) in each partial tile, at the barrier that
// publishes dS^T (bar.red.or there, bar.sync in full tiles; no wait or
// barrier before the tile loop). dS' is 0 where P is (cmpf oeq + select):
// mma.sync in every tile, wgmma only in the tiles that evaluate the mask
// (a branch on the masked scores' condition). dQ = dS K runs term by term (a loop
// over the keys, dS != 0) and adds its own dQ where a partial tile meets
// a poisoned K, else the mma.
// Decode:
// the vote before the tile's branch (every warp: warps without rows join
// the rewrite), the guarded path, and the merge counts a NaN partial LSE as
// live (cmpf une). Kernels without a mask have none of it.

// FWD-LABEL: gpu.func @causal(
// FWD: %[[VOTE:[0-9]+]] = scf.if %[[PARTIAL:[0-9]+]] -> (i1) {
// FWD: scf.for
// FWD: llvm.load {{.*}} : !llvm.ptr<3> -> vector<4xi32>
// FWD: nvvm.barrier #nvvm.reduction<or>
// FWD: } else {
// FWD-NEXT: scf.yield %false{{.*}} : i1
// FWD: nvvm.mma.sync
// FWD: scf.if %[[PARTIAL]] -> (f32,
// FWD: %[[COLD:[0-9]+]] = llvm.intr.expect %[[VOTE]], %false{{.*}} : i1
// FWD-NEXT: scf.if %[[COLD]] -> (f32,
// FWD: scf.for {{.*}} to %c64
// FWD: nvvm.shfl.sync  idx {{.*}} : i32 -> i32
// FWD: arith.cmpf une
// FWD: gpu.barrier
// FWD: llvm.store {{.*}} : vector<4xi32>, !llvm.ptr<3>
// FWD: gpu.barrier
// FWD: } else {
// FWD-NOT: nvvm.mma.sync
// FWD: scf.yield
// FWD: nvvm.mma.sync
// FWD: gpu.return

// BWD-LABEL: gpu.func @causal_bwd(
// BWD: nvvm.cp.async.wait.group 1
// BWD-NEXT: gpu.barrier
// BWD: scf.if %{{.*}} -> (i1) {
// BWD: nvvm.barrier #nvvm.reduction<or>
// BWD: llvm.store {{.*}} : i32, !llvm.ptr<3>
// BWD: arith.cmpf oeq
// BWD: arith.select
// BWD: llvm.load {{.*}} : !llvm.ptr<3> -> i32
// BWD-NEXT: arith.constant 0 : i32
// BWD-NEXT: arith.cmpi ne
// BWD: scf.if %{{.*}} {
// BWD: scf.for {{.*}} to %c64
// BWD: arith.cmpf une
// BWD: llvm.atomicrmw fadd
// BWD: } else {
// BWD: nvvm.ldmatrix
// BWD: nvvm.mma.sync
// BWD: llvm.atomicrmw fadd

// BWDW-LABEL: gpu.func @causal_bwd(
// Head dim 64 (issue 21 section 3, session 17): no vote on K and no
// reducing barrier. In partial tiles each thread checks its packed dS^T
// (a tree of 16-bit fmas: NaN or Inf stays NaN or Inf) ...
// BWDW-NOT: nvvm.barrier #nvvm.reduction<or>
// BWDW: %[[DSHIT:[0-9]+]] = scf.if %[[PARTIAL:[0-9]+]] -> (i1) {
// BWDW: llvm.inline_asm {{.*}}"fma.rn.bf16x2 $0, $1, $2, $3;"
// BWDW: } else {
// BWDW-NEXT: scf.yield %false{{.*}} : i1
// ... and only where one holds zeroes its dS' where P is 0 (a cold branch).
// BWDW: %[[DSCOLD:[0-9]+]] = llvm.intr.expect %[[DSHIT]], %false{{.*}} : i1
// BWDW-NEXT: scf.if %[[DSCOLD]] -> (i32,
// BWDW: arith.cmpf oeq
// BWDW-NEXT: arith.select
// Its dQ fragment is checked once the product has landed (|x| >= inf).
// BWDW: math.absf
// BWDW-NEXT: arith.constant 0x7F800000
// BWDW-NEXT: arith.cmpf uge
// BWDW-NOT: nvvm.barrier #nvvm.reduction<or>
// BWDW: gpu.return

// DEC-LABEL: gpu.func @causal_decode(
// DEC: %[[VOTE:[0-9]+]] = scf.if %{{.*}} -> (i1) {
// DEC: nvvm.barrier #nvvm.reduction<or>
// DEC: %[[COLD:[0-9]+]] = llvm.intr.expect %[[VOTE]], %false{{.*}} : i1
// DEC-NEXT: scf.if %[[COLD]] -> (f32,
// DEC: nvvm.shfl.sync  idx
// DEC: } else {
// DEC: scf.if %[[VOTE]] {
// DEC: gpu.barrier
// DEC: llvm.store {{.*}} : vector<4xi32>, !llvm.ptr<3>
// DEC: gpu.barrier
// One split: the CTA's own merge (a NaN LSE is live: une).
// DEC: arith.cmpf une
// Several: the arrival counter, then the last CTA's merge.
// DEC: fence.acq_rel.gpu
// DEC: nvvm.barrier #nvvm.reduction<or>
// DEC: arith.cmpf une
// DEC: gpu.return
// Or the merge kernel, a second launch (a NaN LSE is live: une).
// DEC-LABEL: gpu.func @causal_decode_merge(
// DEC: arith.cmpf une
// DEC: gpu.return
// And its serial twin, for few splits over many rows (the same test).
// DEC-LABEL: gpu.func @causal_decode_merge_serial(
// DEC: arith.cmpf une
// DEC: gpu.return
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

// FWD-LABEL: gpu.func @dense(
// FWD-NOT: nvvm.barrier #nvvm.reduction
// FWD-NOT: nvvm.shfl.sync  idx
// FWD: gpu.return
// BWD-LABEL: gpu.func @dense_bwd(
// BWD-NOT: nvvm.barrier #nvvm.reduction
// BWD: gpu.return
// BWDW-LABEL: gpu.func @dense_bwd(
// BWDW-NOT: nvvm.barrier #nvvm.reduction
// BWDW-NOT: arith.cmpf oeq {{.*}}, %cst{{.*}} : f32
// BWDW: gpu.return
// DEC-LABEL: gpu.func @dense_decode(
// DEC-NOT: nvvm.barrier #nvvm.reduction
// DEC-NOT: nvvm.shfl.sync  idx
// The split merge's arrival (its barrier reduction is not a vote).
// DEC: fence.acq_rel.gpu
// DEC: gpu.return
attn.attention @dense attributes {
    dtype_q = f16, dtype_k = f16, dtype_v = f16, dtype_o = f16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.constant true
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
