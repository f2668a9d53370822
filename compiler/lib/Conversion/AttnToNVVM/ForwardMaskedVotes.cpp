//===- ForwardMaskedVotes.cpp - Where the forward votes on masked values --===//
//
// The forward kernel's masked-value vote and guarded product
// (ForwardKernelBuilder.h; the scheme, its placements and why they are
// exact: MaskedValues.h).
//
//===----------------------------------------------------------------------===//
#include "ForwardKernelBuilder.h"

#include "SharedTile.h"
#include "Tma.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>

namespace flashjit::nvvm::detail {

ForwardKernelBuilder::VotePlacement
ForwardKernelBuilder::votePlacement() const {
  // Only with a mask: without one no key in range is masked (keys past
  // seqlen_k load as 0), and the PTX of dense kernels stays as it was.
  // fp8 kernels vote in their V transpose instead (fp8Isolation).
  if (!em.hasMask() || !maskedValueIsolation() || c.fp8())
    return VotePlacement::None;
  // Result checks: no vote in the first pass, the in-tile vote in the rare
  // second one (checkedLoop).
  if (checksResults())
    return rerunning ? VotePlacement::InTile : VotePlacement::None;
  // Warp-specialised kernels, the overlapped consumer loop too
  // (ForwardOverlap.cpp), publish it (below); the in-tile vote (a barrier
  // of both consumer warpgroups in every partial tile) stays reachable by
  // setMaskedValueTileVoteForTesting.
  if (maskedValueTileVote() || !c.tma)
    return VotePlacement::InTile;
  // TMA without warp specialisation: TileEnd (the vote on the next tile at
  // the closing barrier) measured 4-8 points slower than the in-tile vote
  // at head dim 64 on an H100 (session 16, bench/RESULTS.md: the closing
  // barrier waits for the next tile to land, delaying the issue behind it),
  // so those kernels keep InTile; TileEnd stays reachable by
  // setMaskedValueTileEndVoteForTesting.
  if (!c.warpSpecialized)
    return maskedValueTileEndVote() ? VotePlacement::TileEnd
                                    : VotePlacement::InTile;
  return VotePlacement::Published;
}

bool ForwardKernelBuilder::fp8Isolation() const {
  // Only with a mask, as votePlacement.
  return c.fp8() && em.hasMask() && maskedValueIsolation();
}

bool ForwardKernelBuilder::checksResults() const {
  if (!em.hasMask() || !maskedValueIsolation() || !c.tma ||
      maskedValueTileVote())
    return false;
  // Warp-specialised kernels (head dim 128; two consumer warpgroups, the
  // overlapped loop too) paid 2-15% for the published vote on an H100
  // (sessions 19-22, [maskbench]): they check their results, the producer
  // loading the row block's tiles again where the consumers rerun
  // (buildWarpSpecialized). setMaskedValuePublishedVoteForTesting restores
  // the published vote. The ping-pong (by name only) keeps the published
  // vote: a rerun's in-tile vote would meet the turns' named barriers.
  if (c.warpSpecialized)
    return !c.fp8() && !c.pingPong && !maskedValuePublishedVote();
  // The TMA kernels without warp specialisation at head dim 64 (their
  // default there) paid 14-18% for the in-tile vote on a document mask
  // (sessions 16-17): they check their results instead. The testing
  // switches restore the votes (MaskedValueTesting.h).
  return !maskedValueTileEndVote() && std::max(c.headDimQK, c.headDimV) <= 64;
}

SmallVector<Value> ForwardKernelBuilder::checkedLoop() {
  // Exact (MaskedValues.h, "The forward at head dim 64"): a NaN or Inf in
  // V of a tile this CTA visits makes some O accumulator of the CTA NaN or
  // Inf for good; without one, the in-tile vote would find nothing and
  // the guarded loop computes what the plain one did. Warp-specialised
  // kernels: the consumer warps' loop (overlapped or serial), their vote
  // at named barrier 1, and the decision published to the producer
  // (publishDecision), which loads the tiles again where it holds.
  SmallVector<Value> fin(c.overlapSoftmax ? overlapLoop()
                                          : SmallVector<Value>(mainLoop()));
  Value bad =
      voteOr(ops, computeGroup(),
             valuesHaveNonFinite(ops, ArrayRef<Value>(fin).take_front(nAcc)));
  if (c.warpSpecialized)
    publishDecision(bad);
  SmallVector<Type> types(fin.size(), ops.f32);
  auto again = scf::IfOp::create(b, types, bad, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(again.elseBlock());
  scf::YieldOp::create(b, fin);
  b.setInsertionPointToStart(again.thenBlock());
  // Every stage is free (the last tile's closing barrier and the vote's;
  // warp-specialised: every consumer thread released each position's
  // stage before the vote): the ring's uses go on from the first pass's
  // count, so each stage's mbarrier phases continue where they stopped.
  // The second pass is the same loop with the in-tile vote (rare path),
  // O, m and l starting again from init. (The overlapped consumers rerun
  // the overlapped loop: mainLoop's serial step beside it made ptxas spill
  // 8-52 bytes in the overlap by name for masks alone, window_lr_br and
  // chunked_causal at head dim 128.)
  rerunning = true;
  useBase = ops.add(ops.sub(jEnd, jBegin), ops.ci32(1));
  if (!c.warpSpecialized)
    for (int s = 0; s + 1 < stages; ++s) {
      Value pos = ops.add(jBegin, ops.ci32(s));
      issueKV(pos, arith::RemUIOp::create(b, useOf(pos), ops.ci32(stages)));
    }
  SmallVector<Value> guarded(c.overlapSoftmax ? overlapLoop()
                                              : SmallVector<Value>(mainLoop()));
  scf::YieldOp::create(b, guarded);
  rerunning = false;
  useBase = Value();
  return SmallVector<Value>(again.getResults());
}

void ForwardKernelBuilder::publishDecision(Value rerun) {
  // The consumers' first thread: the word, then its arrival (release: the
  // producer's wait acquires the word).
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)), [&] {
    LLVM::StoreOp::create(b, arith::ExtUIOp::create(b, ops.i32, rerun),
                          decisionWord(), /*alignment=*/4);
    mbarrierArrive(ops, decisionBarrier());
  });
}

Value ForwardKernelBuilder::awaitDecision() {
  mbarrierWait(ops, decisionBarrier(), ops.ci32(0));
  Value word =
      LLVM::LoadOp::create(b, ops.i32, decisionWord(), /*alignment=*/4);
  return ops.cmp(arith::CmpIPredicate::ne, word, ops.ci32(0));
}

VoteGroup ForwardKernelBuilder::computeGroup() const {
  // Warp-specialised: the consumer warps meet at named barrier 1 (the
  // producer never reaches a barrier in the loop); else the CTA.
  return VoteGroup{tid, nthreads, c.warpSpecialized ? 1 : 0};
}

Value ForwardKernelBuilder::voteMaskedValues(Value needsMask) {
  // The tile (K and V, one cp.async group or one mbarrier) has landed here,
  // at S, where fewer registers are live than at P V.
  Value sVTile = ops.gepBytes(sV, stageOff);
  if (votePlacement() == VotePlacement::InTile)
    return tileHasNonFiniteIf(ops, needsMask, computeGroup(), sVTile, c.blockN,
                              c.headDimV, mma->swizzled());
  Value bad = chunksHaveNonFiniteIf(ops, needsMask, computeGroup(), sVTile,
                                    c.blockN, c.headDimV, mma->swizzled());
  publishWarpVote(ops, bad, lane, voteWord(tileStage),
                  ops.add(tileUse, ops.ci32(1)), votedBarrier(tileStage),
                  /*branchFree=*/c.overlapSoftmax);
  return Value();
}

Value ForwardKernelBuilder::awaitMaskedVote(Value needsMask) {
  // The stage's use u completes phase u / stages of its barrier.
  Value parity = ops.land(arith::DivUIOp::create(b, tileUse, ops.ci32(stages)),
                          ops.ci32(1));
  return awaitPublishedVote(ops, needsMask, voteWord(tileStage),
                            ops.add(tileUse, ops.ci32(1)),
                            votedBarrier(tileStage), parity);
}

void ForwardKernelBuilder::skipMaskedVote() {
  if (c.overlapSoftmax) { // no branch on the lane (publishWarpVote)
    mbarrierArriveIf(
        ops, votedBarrier(tileStage),
        arith::ExtUIOp::create(
            b, ops.i32, ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0))));
    return;
  }
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)),
             [&] { mbarrierArrive(ops, votedBarrier(tileStage)); });
}

void ForwardKernelBuilder::initMaskedVotes() {
  if (c.warpSpecialized && checksResults()) { // one arrival: publishDecision
    mbarrierInit(ops, decisionBarrier(), 1);
    return;
  }
  if (votePlacement() != VotePlacement::Published)
    return;
  for (int s = 0; s < stages; ++s) {
    mbarrierInit(ops, votedBarrier(ops.ci32(s)), c.numWarps);
    LLVM::StoreOp::create(b, ops.ci32(0), voteWord(ops.ci32(s)),
                          /*alignment=*/4);
  }
}

Value ForwardKernelBuilder::maskedTile(Value j) {
  auto [mayBeFalse, mayBeTrue] = classify(j);
  Value pastEnd = ops.cmp(
      arith::CmpIPredicate::sgt,
      ops.add(ops.mul(j, ops.ci32(c.blockN)), ops.ci32(c.blockN)), seqlenK);
  return ops.land(ops.lor(mayBeFalse, pastEnd), mayBeTrue);
}

Value ForwardKernelBuilder::voteFirstTile() {
  // Position jBegin uses stage 0.
  Value cond =
      ops.guarded(ops.cmp(arith::CmpIPredicate::sle, jBegin, jEnd), ops.i1,
                  ops.cb(false), [&] { return maskedTile(jBegin); });
  ops.ifThen(cond, [&] { waitKV(jBegin); });
  return tileHasNonFiniteIf(ops, cond, computeGroup(), sV, c.blockN, c.headDimV,
                            mma->swizzled());
}

Value ForwardKernelBuilder::voteAtTileEnd(Value it) {
  // Tile it + 1 was issued stages - 1 positions ago; the start of the next
  // iteration would wait for it right after this barrier anyway.
  Value next = ops.add(it, ops.ci32(1));
  Value cond =
      ops.guarded(ops.cmp(arith::CmpIPredicate::sle, next, jEnd), ops.i1,
                  ops.cb(false), [&] { return maskedTile(next); });
  ops.ifThen(cond, [&] { waitKV(next); });
  Value stage =
      arith::RemUIOp::create(b, ops.sub(next, jBegin), ops.ci32(stages));
  Value sVNext =
      ops.gepBytes(sV, ops.mul(ops.ext64(stage), ops.ci64(stageBytes)));
  return barrierVotingIf(ops, cond, computeGroup(), sVNext, c.blockN,
                         c.headDimV, mma->swizzled());
}

SmallVector<Value> ForwardKernelBuilder::isolateMaskedValues(ArrayRef<Value> o,
                                                             ArrayRef<Value> p,
                                                             Value poisoned) {
  if (c.fp8()) // the V tile the product reads is the fp8 mma's transpose
    return mma->isolateNonFiniteV(o, p, poisoned, lane);
  // The rewritten stage is read by wgmma and later written by TMA (async
  // proxy); in warp-specialised kernels the consumers' release of the
  // stage follows the fence, so the producer's next write follows it too.
  return isolateNonFiniteV(ops, sh, o, p, poisoned, ops.gepBytes(sV, stageOff),
                           lane, computeGroup(), mma->swizzled(),
                           /*asyncProxy=*/c.wgmma || c.tma);
}

} // namespace flashjit::nvvm::detail
