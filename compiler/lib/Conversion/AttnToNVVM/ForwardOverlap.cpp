//===- ForwardOverlap.cpp - The forward's overlapped consumer loop --------===//
//
// Part of the forward kernel's builder (ForwardKernelBuilder.h): the loop of
// the warp-specialised consumers with FlashAttention-3's intra-warpgroup
// overlap (Shah et al. 2024, section 3.2; KernelConfig::overlapSoftmax).
// mainLoop's tile step runs S = Q K^T, the softmax and O += P V one after
// the other, each product waited for at once. Here each consumer warpgroup
// keeps two wgmma groups in flight: at key tile j it issues S_j = Q K_j^T,
// then O += P_{j-1} V_{j-1} of the previous tile, waits for S_j alone
// (wgmma.wait_group 1), computes tile j's scores and softmax while P V
// runs on the tensor cores, then waits for P V (wait_group 0), releases
// the stage of tile j - 1 (its V has been read) and rescales O.
//
// The maths (m, l, alpha, P: OnlineSoftmax.h; frames: a value "in frame m"
// is scaled by exp2(-m) per row). The serial step computes
//   m_j = max(m_{j-1}, rowmax S_j),  alpha_j = exp2(m_{j-1} - m_j),
//   P_j = exp2(S_j - m_j),  l_j = alpha_j l_{j-1} + rowsum P_j,
//   O_j = alpha_j O_{j-1} + P_j V_j                       (frame m_j).
// Here the accumulator holds, on entering tile j with a pending tile j - 1,
//   Õ_{j-1} = O_{j-1} - P_{j-1} V_{j-1} = alpha_{j-1} O_{j-2}  (frame m_{j-1}).
// The step adds the pending product, Õ_{j-1} + P_{j-1} V_{j-1} = O_{j-1}
// (still frame m_{j-1}, so P_{j-1}, computed in frame m_{j-1}, is added
// unscaled), and only then multiplies by the new alpha_j:
//   alpha_j O_{j-1} = O_j - P_j V_j = Õ_j                     (frame m_j),
// the invariant for tile j + 1 with P_j pending. l needs no deferral (no
// product). The rescale must follow the wait for P V: scaling before the
// issue would put P_{j-1} in frame m_j unscaled. After the last tile the
// pending product completes O_last (flushPV) and the epilogue divides by l.
//
// Tile positions: the loop visits every position of [jBegin, jEnd] (warp-
// specialised kernels are dense: never varlen or block-sparse), and each
// position's stage is (it - jBegin) % stages, released once by every
// consumer thread. Empty tiles (skipped by the classifier) read nothing:
// their stage is released at once, and a pending product completes first
// (flushPV), so the tile in flight is always the previous position: the
// consumer holds at most the stage of position it - 1 while it waits for
// position it, and the producer's load of position it needs only the
// release of position it - stages (a ring of 2 stages cannot deadlock; 3
// are needed for the producer to run a tile ahead: TilePolicy.cpp).
// A tile after an empty one (or the first) has nothing pending: it takes
// the same step without the P V (pending = false).
//
// Masked values (MaskedValues.h): tile j's vote on its V runs while both
// products are in flight, and its isolation (the non-finite terms added to
// Õ_j, the stage's V rewritten) closes the step, after the rescale, so
// P_j V_j (issued at tile j + 1 or by flushPV) reads the rewritten V. The
// vote is published as in the serial step: each warp scans its chunks of
// V_j and publishes its share (full tiles: only its arrival; empty tiles:
// the arrival in the skip branch), so lane 0 of every warp arrives once
// per use of the stage, before its release of the stage (at tile j + 1,
// flushPV or the skip branch); the warp reads the vote only before the
// isolation, with tile j's use and stage, so the two consumer warpgroups
// never meet at a barrier in the loop (setMaskedValueTileVoteForTesting
// restores the in-tile vote, a barrier of both in every partial tile).
// Without a branch on the lane (publishWarpVote's branchFree): with one
// (and with the in-tile vote) ptxas took the whole loop as divergent,
// computed every step's wgmma descriptors in vector registers and moved
// them with R2UR (236 R2UR and 18 WARPSYNC in the causal kernel, 48 R2UR
// in the issue of a full tile's products against 16 without isolation);
// branch-free, 72 and 2 (four versions of the step, 16-17 per issue).
//
// Registers: the versions of a step (masked or not, pending or not) are
// separate regions, so no branch runs between a wgmma's issue and its wait
// except the vote's (which touches no accumulator); P_{j-1} is kept live up
// to the wait (wgmmaWait's keep), so ptxas need not serialise the products.
//
// Ping-pong (KernelConfig::pingPong; FlashAttention-3's inter-warpgroup
// schedule, Shah et al. 2024, section 3.1): the two consumer warpgroups
// take turns to issue a tile's products, so that one warpgroup's softmax
// runs while the other's products occupy the tensor cores. Each
// warpgroup owns a named barrier (kTurnBarrier + its index: 2 and 3;
// barrier 0 is the CTA's, 1 the consumers' vote group) of 256 threads.
// A turn: bar.sync on its own barrier (128 threads of this warpgroup,
// waiting for 128 arrivals of the other), issue S_j and the pending
// P_{j-1} V_{j-1}, bar.arrive on the other's barrier. Before the loop
// warpgroup 0 arrives on its own barrier once, so its first sync passes
// at once and it takes the first turn; after the loop (and its flushPV)
// it syncs on its own barrier once more, which takes warpgroup 1's last
// arrival, so that both barriers end where they began (nothing left
// arrived at when the CTA exits; where the CTA has no non-empty tile, the
// opening arrival and the closing sync meet). Every non-empty tile is one
// turn (pending or not, masked or not: all four versions of the step sync
// and arrive once); empty tiles and flushPV (after an empty tile and after
// the last) issue their P V outside the turns. Tile classification is the
// CTA's (its first and last query rows), so both warpgroups visit the
// same non-empty tiles and take the same number of turns N: barrier 2
// takes warpgroup 0's opening arrival, N syncs and closing sync, and
// warpgroup 1's N arrivals (N + 1 generations of 256); barrier 3 takes
// warpgroup 1's N syncs and warpgroup 0's N arrivals (N generations).
// Warpgroup 0's sync k pairs with warpgroup 1's arrival k - 1 (its own
// opening one for k = 1; the closing sync with arrival N), warpgroup 1's
// sync k with warpgroup 0's arrival k. No barrier holds arrivals of two
// generations: warpgroup 1's arrival k + 1 at barrier 2 follows its sync
// k + 1 on barrier 3, which needs warpgroup 0's arrival k + 1, made after
// warpgroup 0's sync k + 1 on barrier 2 completed (and symmetrically for
// barrier 3). The masked-value votes (published, or the in-tile vote for
// testing) and the isolation's barrier wait for the other warpgroup only
// at or after the point where both have taken their turn of the same
// tile, so the turns add no cycle to them; nor to the K/V ring: a
// warpgroup waiting for tile j to land has taken its turn j - 1, so the
// other can finish its step j - 1 and release the stage of tile j - 2.
//
//===----------------------------------------------------------------------===//
#include "ForwardKernelBuilder.h"

#include "Tma.h"
#include "Wgmma.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace flashjit::nvvm::detail {

namespace {

/// The named barrier of consumer warpgroup 0's turns; warpgroup 1's is the
/// next one.
constexpr int kTurnBarrier = 2;

/// The types of \p values.
SmallVector<Type> typesOf(ValueRange values) {
  return SmallVector<Type>(values.getTypes().begin(), values.getTypes().end());
}

} // namespace

// The loop state: O (nAcc), m and l (2 MT each), then the pending tile's P
// packed (4 pvSteps i32) and whether there is one (i1). The pending tile is
// always the previous position: its stage is not carried.

void ForwardKernelBuilder::initTurns() {
  // Consumer threads only (tid < 256): warpgroup tid / 128.
  Value wg = arith::ShRUIOp::create(b, tid, ops.ci32(7));
  turnSelf = ops.add(wg, ops.ci32(kTurnBarrier));
  turnOther = ops.sub(ops.ci32(2 * kTurnBarrier + 1), turnSelf);
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, wg, ops.ci32(0)), [&] {
    NVVM::BarrierArriveOp::create(b, turnSelf, ops.ci32(256));
  });
}

void ForwardKernelBuilder::closeTurns() {
  Value wg = ops.sub(turnSelf, ops.ci32(kTurnBarrier));
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, wg, ops.ci32(0)),
             [&] { awaitTurn(); });
}

void ForwardKernelBuilder::awaitTurn() {
  NVVM::BarrierOp::create(b, TypeRange{}, turnSelf, ops.ci32(256),
                          NVVM::BarrierReductionAttr(), Value());
}

void ForwardKernelBuilder::passTurn() {
  NVVM::BarrierArriveOp::create(b, turnOther, ops.ci32(256));
}

SmallVector<Value> ForwardKernelBuilder::overlapLoop() {
  const int nP = 4 * sh.pvSteps();
  if (c.pingPong)
    initTurns();
  SmallVector<Value> loopInit(init);
  loopInit.append(nP, ops.ci32(0));
  loopInit.push_back(ops.cb(false));
  Value lb = ops.toIndex(jBegin);
  Value ub = ops.toIndex(ops.add(jEnd, ops.ci32(1)));
  auto loop = scf::ForOp::create(b, lb, ub, one, loopInit);
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value it = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
    ValueRange state = loop.getRegionIterArgs();
    Value use = useOf(it); // checkedLoop's second pass: from useBase
    Value stage = arith::RemUIOp::create(b, use, ops.ci32(stages));
    if (votePlacement() == VotePlacement::Published) {
      tileUse = use;
      tileStage = stage;
    }
    Value prevStage = arith::RemUIOp::create(
        b, ops.add(useOf(it), ops.ci32(stages - 1)), ops.ci32(stages));
    waitKV(it);
    Value kv0 = ops.mul(it, ops.ci32(c.blockN));
    auto [mayBeFalse, mayBeTrue] = classify(it);
    Value pastEnd = ops.cmp(arith::CmpIPredicate::sgt,
                            ops.add(kv0, ops.ci32(c.blockN)), seqlenK);
    Value needsMask = ops.lor(mayBeFalse, pastEnd);
    Value pending = state.back();
    auto tileIf =
        scf::IfOp::create(b, typesOf(state), mayBeTrue, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard tg(b);
      b.setInsertionPointToStart(tileIf.thenBlock());
      auto pendIf =
          scf::IfOp::create(b, typesOf(state), pending, /*withElse=*/true);
      for (bool p : {true, false}) {
        OpBuilder::InsertionGuard pg(b);
        b.setInsertionPointToStart(p ? pendIf.thenBlock() : pendIf.elseBlock());
        scf::YieldOp::create(
            b, overlapTile(state, kv0, needsMask, stage, prevStage, p));
      }
      scf::YieldOp::create(b, pendIf.getResults());
      // Empty tile: nothing read; the pending product first (its stage is
      // released before the next position's load is waited for).
      b.setInsertionPointToStart(tileIf.elseBlock());
      SmallVector<Value> flushed = flushPV(state, prevStage);
      if (votePlacement() == VotePlacement::Published)
        skipMaskedVote();
      mbarrierArrive(ops, emptyBarrier(stage));
      scf::YieldOp::create(b, flushed);
    }
    scf::YieldOp::create(b, tileIf.getResults());
  }
  SmallVector<Value> fin =
      flushPV(loop.getResults(),
              arith::RemUIOp::create(b, useOf(jEnd), ops.ci32(stages)));
  if (c.pingPong)
    closeTurns();
  fin.resize(init.size());
  return fin;
}

SmallVector<Value>
ForwardKernelBuilder::overlapTile(ValueRange state, Value kv0, Value needsMask,
                                  Value stage, Value prevStage, bool pending) {
  auto maskIf =
      scf::IfOp::create(b, typesOf(state), needsMask, /*withElse=*/true);
  for (bool masked : {true, false}) {
    OpBuilder::InsertionGuard mg(b);
    b.setInsertionPointToStart(masked ? maskIf.thenBlock()
                                      : maskIf.elseBlock());
    scf::YieldOp::create(
        b, overlapStep(state, kv0, stage, prevStage, masked, pending));
  }
  return SmallVector<Value>(maskIf.getResults());
}

SmallVector<Value>
ForwardKernelBuilder::overlapStep(ValueRange state, Value kv0, Value stage,
                                  Value pendStage, bool masked, bool pending) {
  const int MT = sh.mTiles(), nS = sh.sTiles(), nO = sh.oTiles();
  const int nP = 4 * sh.pvSteps(), nInit = int(init.size());
  SmallVector<Value> pPrev(state.slice(nInit, nP));
  stageOff = ops.mul(ops.ext64(stage), ops.ci64(stageBytes));
  mma->selectStage(stageOff);

  // Issue S_j, then P_{j-1} V_{j-1}; the vote on V_j (partial tiles) runs
  // while both are in flight (published: this warp's share, and in full
  // tiles only its arrival for the stage's use).
  // Ping-pong: both products issued in this warpgroup's turn.
  if (c.pingPong)
    awaitTurn();
  SmallVector<Value> sAcc = mma->issueS();
  SmallVector<Value> oAcc(state.begin(), state.begin() + nAcc);
  if (pending)
    oAcc = mma->issuePV(oAcc, pPrev,
                        ops.mul(ops.ext64(pendStage), ops.ci64(stageBytes)));
  if (c.pingPong)
    passTurn();
  const VotePlacement vp = votePlacement();
  Value poisoned;
  if (masked && vp != VotePlacement::None)
    poisoned = voteMaskedValues(ops.cb(true));
  else if (vp == VotePlacement::Published)
    skipMaskedVote();
  SmallVector<Value> s = wgmmaWait(ops, sAcc, pending ? 1 : 0);

  // Tile j's scores and softmax while P V runs.
  at.kvLane = ops.add(kv0, ops.mul(t, ops.ci32(2)));
  SmallVector<Value> st =
      variantScores(ops, em, s, at, MT, nS, scale, scaleLog2, masked);
  SoftmaxRows old;
  old.m.assign(state.begin() + nAcc, state.begin() + nAcc + 2 * MT);
  old.l.assign(state.begin() + nAcc + 2 * MT, state.begin() + nAcc + 4 * MT);
  SmallVector<Value> alpha;
  SoftmaxRows next = softmaxStep(ops, st, MT, nS, old, alpha);

  // O_{j-1} complete (frame m_{j-1}): V_{j-1} is free; then Õ_j.
  SmallVector<Value> o = oAcc;
  if (pending) {
    o = wgmmaWait(ops, oAcc, 0, pPrev);
    mbarrierArrive(ops, emptyBarrier(pendStage));
  }
  rescaleRows(ops, o, MT, nO, alpha);
  // P_j packed only now: registers that a later wgmma reads, written while
  // one is in flight, make ptxas serialise the products (C7513).
  SmallVector<Value> p = mma->packP(st);
  if (masked && vp == VotePlacement::Published) // as late as can be
    poisoned = awaitMaskedVote(ops.cb(true));
  if (poisoned) // P as the product takes it, from its packed words
    o = isolateMaskedValues(o, mma->unpackP(p), poisoned);
  o.append(next.m.begin(), next.m.end());
  o.append(next.l.begin(), next.l.end());
  o.append(p.begin(), p.end());
  o.push_back(ops.cb(true));
  return o;
}

SmallVector<Value> ForwardKernelBuilder::flushPV(ValueRange state,
                                                 Value pendStage) {
  const int nP = 4 * sh.pvSteps(), nInit = int(init.size());
  auto flushIf =
      scf::IfOp::create(b, typesOf(state), state.back(), /*withElse=*/true);
  {
    OpBuilder::InsertionGuard fg(b);
    b.setInsertionPointToStart(flushIf.thenBlock());
    SmallVector<Value> pPrev(state.slice(nInit, nP));
    SmallVector<Value> o =
        mma->issuePV(SmallVector<Value>(state.take_front(nAcc)), pPrev,
                     ops.mul(ops.ext64(pendStage), ops.ci64(stageBytes)));
    o = wgmmaWait(ops, o, 0, pPrev);
    mbarrierArrive(ops, emptyBarrier(pendStage));
    o.append(state.begin() + nAcc, state.end());
    scf::YieldOp::create(b, o);
    b.setInsertionPointToStart(flushIf.elseBlock());
    scf::YieldOp::create(b, SmallVector<Value>(state));
  }
  SmallVector<Value> out(flushIf.getResults());
  out.back() = ops.cb(false);
  return out;
}

} // namespace flashjit::nvvm::detail
