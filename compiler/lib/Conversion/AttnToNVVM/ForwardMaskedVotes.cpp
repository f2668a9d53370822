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

namespace flashjit::nvvm::detail {

ForwardKernelBuilder::VotePlacement
ForwardKernelBuilder::votePlacement() const {
  // Only with a mask: without one no key in range is masked (keys past
  // seqlen_k load as 0), and the PTX of dense kernels stays as it was.
  if (!em.hasMask() || !maskedValueIsolation())
    return VotePlacement::None;
  // The overlapped consumer loop (ForwardOverlap.cpp) keeps the vote in the
  // tile: the published protocol's once-per-use arrivals are mainLoop's.
  if (maskedValueTileVote() || !c.tma || c.overlapSoftmax)
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
                  ops.add(tileUse, ops.ci32(1)), votedBarrier(tileStage));
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
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)),
             [&] { mbarrierArrive(ops, votedBarrier(tileStage)); });
}

void ForwardKernelBuilder::initMaskedVotes() {
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
  // The rewritten stage is read by wgmma and later written by TMA (async
  // proxy); in warp-specialised kernels the consumers' release of the
  // stage follows the fence, so the producer's next write follows it too.
  return isolateNonFiniteV(ops, sh, o, p, poisoned, ops.gepBytes(sV, stageOff),
                           lane, computeGroup(), mma->swizzled(),
                           /*asyncProxy=*/c.wgmma || c.tma);
}

} // namespace flashjit::nvvm::detail
