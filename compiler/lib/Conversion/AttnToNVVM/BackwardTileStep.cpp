//===- BackwardTileStep.cpp - one query tile of the GPU backward
//------------===//
//
// Part of BackwardBuilder (BackwardBuilder.h): one query tile of the GPU
// backward.
//
//===----------------------------------------------------------------------===//
#include "BackwardBuilder.h"

#include "BackwardKernelBase.h"
#include "BackwardMma.h"
#include "MaskedValues.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>

namespace flashjit::nvvm::detail {

void BackwardBuilder::loadQueryTile(Value head, Value q0) {
  const int BN = c.blockN;
  const float log2e = 1.4426950408889634f;
  Value zero32 = ops.ci32(0);
  loadTileAsync(ops, tid, 32 * c.numWarps, sQ,
                address(TQ, offset(TQ, batch, head, zero32)), st[TQ][2], q0,
                seqlenQ, BN, c.headDimQK, mma->swizzled());
  loadTileAsync(ops, tid, 32 * c.numWarps, sDO,
                address(TDO, offset(TDO, batch, head, zero32)), st[TDO][2], q0,
                seqlenQ, BN, c.headDimV, mma->swizzled());
  NVVM::CpAsyncCommitGroupOp::create(b);
  ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, tid, ops.ci32(BN)), [&] {
    Value row = ops.add(q0, tid);
    Value ok = ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ);
    Value lse = ops.guarded(ok, ops.f32, ops.cf32(0.0f), [&]() -> Value {
      return LLVM::LoadOp::create(
          b, ops.f32, address(TLse, offset(TLse, batch, head, row), 4),
          /*alignment=*/4);
    });
    Value dl = ops.guarded(ok, ops.f32, ops.cf32(0.0f), [&]() -> Value {
      return LLVM::LoadOp::create(
          b, ops.f32,
          ops.gepBytes(delta, ops.mul(workRow(headsQ, head, row), ops.ci64(4))),
          /*alignment=*/4);
    });
    Value off = ops.ext64(ops.mul(tid, ops.ci32(4)));
    LLVM::StoreOp::create(b, ops.fmul(lse, ops.cf32(log2e)),
                          ops.gepBytes(sLse, off), /*alignment=*/4);
    LLVM::StoreOp::create(b, dl, ops.gepBytes(sDelta, off), /*alignment=*/4);
  });
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  mma->publish(); // K, V (first tile), Q and dO are read by the products
  gpu::BarrierOp::create(b);
}

SmallVector<Value>
BackwardBuilder::probabilities(ArrayRef<Value> scores,
                               SmallVectorImpl<Value> *colDelta) {
  const int nS = shape.sTiles();
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> colLse;
  for (int jn = 0; jn < nS; ++jn)
    for (int cc = 0; cc < 2; ++cc) {
      Value lse = loadShared(ops.f32, sLseCur, columnOffset(jn, cc));
      colLse.push_back(lseRaw ? ops.fmul(lse, ops.cf32(1.4426950408889634f))
                              : lse);
      if (colDelta)
        colDelta->push_back(
            loadShared(ops.f32, sDeltaCur, columnOffset(jn, cc)));
    }
  SmallVector<Value> p;
  for (int jn = 0; jn < nS; ++jn)
    for (int i = 0; i < 4; ++i) {
      Value v = scores[jn * 4 + i];
      Value e = ops.exp2(ops.fsub(v, colLse[jn * 2 + (i & 1)]));
      p.push_back(ops.sel(ops.feq(v, minusInf), ops.cf32(0.0f), e));
    }
  return p;
}

SmallVector<Value> BackwardBuilder::scoreGradients(ArrayRef<Value> p,
                                                   ArrayRef<Value> dp,
                                                   ArrayRef<Value> colDelta) {
  SmallVector<Value> d(colDelta.begin(), colDelta.end());
  for (int jn = 0; colDelta.empty() && jn < shape.sTiles(); ++jn)
    for (int cc = 0; cc < 2; ++cc)
      d.push_back(loadShared(ops.f32, sDeltaCur, columnOffset(jn, cc)));
  SmallVector<Value> ds;
  for (int jn = 0; jn < shape.sTiles(); ++jn)
    for (int i = 0; i < 4; ++i)
      ds.push_back(ops.fmul(p[jn * 4 + i],
                            ops.fsub(dp[jn * 4 + i], d[jn * 2 + (i & 1)])));
  return ds;
}

std::function<Value(int)> BackwardBuilder::scoreGradInput(ArrayRef<Value> s,
                                                          ArrayRef<Value> p) {
  if (!em.scoreGradOfOutput())
    return [this, s](int e) { return ops.fmul(s[e], scale); };
  return [this, p](int e) {
    Value lse = loadShared(ops.f32, sLseCur, columnOffset(e / 4, e & 1));
    if (!lseRaw)
      lse = ops.fmul(lse, ops.cf32(0.6931471805599453f)); // to natural log
    // s' = ln P + LSE: P = exp2((s' - LSE) log2 e).
    return ops.fadd(
        ops.fmul(math::Log2Op::create(b, p[e]), ops.cf32(0.6931471805599453f)),
        lse);
  };
}

SmallVector<Value> BackwardBuilder::tileStep(ValueRange state, Value head,
                                             Value q0, Value qLast,
                                             Value needsMask, Value boundsOnly,
                                             Value nextVisited, Value nextQ0) {
  const int nS = shape.sTiles(), nK = shape.accRegs(c.headDimQK);
  const int nV = shape.accRegs(c.headDimV);
  // The ring (block-sparse prefetch): state ends with stage, prefetched.
  const int ringArgs = nextVisited ? 2 : 0;
  Value other;
  if (nextVisited)
    other = enterStage(state, head, q0, nextVisited, nextQ0);
  else
    loadQueryTile(head, q0);
  // With the ring, the products are the asynchronous ones waited for at
  // once: they address the stage from two descriptors (registers: the
  // synchronous ones' eight, each moved to the stage, spilled at D = 128).
  const bool waitNow = bool(nextVisited);
  // S^T = K Q^T (this warp's 16 keys x BN queries).
  SmallVector<Value> s =
      waitNow ? mma->wait(mma->issueS(), 0) : mma->computeS();
  // Scores in log2 units, masked where the tile needs it.
  KeyRowCoords coords{batch,    head,     seqlenQ,      seqlenK,
                      kvRow[0], kvRow[1], queryLane(q0)};
  applyKeyGroups(coords);
  SmallVector<Type> sTypes(nS * 4, ops.f32);
  auto maskIf = scf::IfOp::create(b, sTypes, needsMask, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard mg(b);
    for (bool masked : {true, false}) {
      b.setInsertionPointToStart(masked ? maskIf.thenBlock()
                                        : maskIf.elseBlock());
      scf::YieldOp::create(b, variantScoresKeyRows(ops, em, s, coords, nS,
                                                   scale, scaleLog2, masked));
    }
  }
  SmallVector<Value> scores(maskIf.getResults());
  if (boundsOnly)
    maskPastEnds(scores, coords.qLane, boundsOnly);
  // mma.sync reads D with LSE; wgmma, whose accumulators leave fewer
  // registers, after dP (scoreGradients).
  SmallVector<Value> colDelta;
  SmallVector<Value> p = probabilities(scores, c.wgmma ? nullptr : &colDelta);

  SmallVector<Value> dk(state.begin(), state.begin() + nK);
  SmallVector<Value> dv(state.begin() + nK, state.begin() + nK + nV);
  SmallVector<Value> gradState(state.begin() + nK + nV,
                               state.begin() + (state.size() - ringArgs));
  // dV += P^T dO; dP^T = V dO^T.
  if (waitNow) {
    SmallVector<Value> pA = mma->packA(p);
    dv = mma->wait(mma->issueDV(dv, pA), 0, pA);
  } else {
    dv = mma->accumulateDV(dv, p);
  }
  SmallVector<Value> dp =
      waitNow ? mma->wait(mma->issueDP(), 0) : mma->computeDP();
  // dS'^T = P^T (dP^T - D); dS^T = score_grad(dS'^T, s).
  SmallVector<Value> ds = scoreGradients(p, dp, colDelta);
  // Masked keys are isolated: dS' exactly 0 where P is (before the data
  // gradients read it); score_grad leaves dS 0 where dS' is
  // (BackwardDataGrads::scoreGrad), so P need not outlive it.
  if (isolate)
    ds = zeroWhereUnweighted(p, ds, needsMask);
  if (grads->active())
    ds = grads->scoreGrad(ds, scoreGradInput(s, p), batch, head, seqlenQ,
                          seqlenK, {kvRow[0], kvRow[1]}, coords.qLane, nS,
                          gradState);
  // dK += dS^T Q (scaled at the end).
  if (waitNow) {
    SmallVector<Value> dsA = mma->packA(ds);
    dk = mma->wait(mma->issueDK(dk, dsA), 0, dsA);
  } else {
    dk = mma->accumulateDK(dk, ds);
  }
  // dS^T into shared memory, then dQaccum += dS K.
  mma->storeDS(ds);
  Value kVote = publishDS(needsMask);
  // With the ring too, the barrier after dQ (addDQ): without it ptxas
  // moves the next tile's list reads and classifier into this one's
  // products and the D = 128 kernels spill (32-40 bytes).
  addDQ(head, q0, qLast, needsMask, kVote);
  SmallVector<Value> out =
      llvm::to_vector(llvm::concat<Value>(dk, dv, gradState));
  if (nextVisited)
    out.append({other, nextVisited});
  return out;
}

SmallVector<Value> BackwardBuilder::skippedState(ValueRange state) {
  SmallVector<Value> out(state);
  if (ring)
    out.back() = ops.cb(false);
  return out;
}

void BackwardBuilder::issueQueryTile(Value head, Value q0, Value stage) {
  const int BN = c.blockN, nthreads = 32 * c.numWarps;
  Value zero32 = ops.ci32(0);
  Value qOff = ops.mul(ops.ext64(stage), ops.ci64(qStageBytes));
  loadTileAsync(ops, tid, nthreads, ops.gepBytes(sQ, qOff),
                address(TQ, offset(TQ, batch, head, zero32)), st[TQ][2], q0,
                seqlenQ, BN, c.headDimQK, mma->swizzled());
  loadTileAsync(ops, tid, nthreads, ops.gepBytes(sDO, qOff),
                address(TDO, offset(TDO, batch, head, zero32)), st[TDO][2], q0,
                seqlenQ, BN, c.headDimV, mma->swizzled());
  // LSE (threads 0..BN-1) and D (BN..2BN-1) of the rows, 4 bytes each,
  // zero past seqlen_q (cp.async with source size 0 reads nothing).
  Value rows = ops.gepBytes(sLse, ops.mul(ops.ext64(stage), ops.ci64(8 * BN)));
  Value r = arith::RemUIOp::create(b, tid, ops.ci32(BN));
  Value row = ops.add(q0, r);
  Value ok = ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ);
  Value srow = ops.sel(ok, row, zero32);
  Value size = ops.sel(ok, ops.ci32(4), zero32);
  auto copy4 = [&](Value dst, Value src) {
    NVVM::CpAsyncOp::create(
        b, dst, src, b.getI32IntegerAttr(4),
        NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                             NVVM::LoadCacheModifierKind::CA),
        size);
  };
  Value dstOff = ops.ext64(ops.mul(tid, ops.ci32(4)));
  ops.ifThen(ops.cmp(arith::CmpIPredicate::ult, tid, ops.ci32(BN)), [&] {
    copy4(ops.gepBytes(rows, dstOff),
          address(TLse, offset(TLse, batch, head, srow), 4));
  });
  ops.ifThen(
      ops.land(ops.cmp(arith::CmpIPredicate::uge, tid, ops.ci32(BN)),
               ops.cmp(arith::CmpIPredicate::ult, tid, ops.ci32(2 * BN))),
      [&] {
        copy4(ops.gepBytes(rows, dstOff),
              ops.gepBytes(delta,
                           ops.mul(workRow(headsQ, head, srow), ops.ci64(4))));
      });
}

Value BackwardBuilder::enterStage(ValueRange state, Value head, Value q0,
                                  Value nextVisited, Value nextQ0) {
  const int BN = c.blockN;
  Value stage = state[state.size() - 2], prefetched = state.back();
  // This tile's Q, dO, LSE and D: prefetched by the tile before, else
  // loaded now. Its stage was last read by the tile before that one, which
  // every warp finished before the previous tile's first barrier.
  ops.ifThen(ops.lnot(prefetched), [&] { issueQueryTile(head, q0, stage); });
  NVVM::CpAsyncCommitGroupOp::create(b);
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  mma->publish(); // K, V (first tile), Q and dO are read by the products
  gpu::BarrierOp::create(b);
  // Every warp is past the previous tile: its stage takes the next tile
  // (loadsAfterProducts: once S^T and dP^T are issued, prefetchNext).
  Value other = ops.sub(ops.ci32(1), stage);
  if (!loadsAfterProducts)
    prefetchNext(head, q0, nextVisited, nextQ0, other);
  mma->selectStage(ops.mul(ops.ext64(stage), ops.ci64(qStageBytes)));
  sLseCur = ops.gepBytes(sLse, ops.mul(ops.ext64(stage), ops.ci64(8 * BN)));
  sDeltaCur = ops.gepBytes(sLseCur, int64_t(4) * BN);
  lseRaw = true;
  return other;
}

void BackwardBuilder::prefetchNext(Value head, Value q0, Value nextVisited,
                                   Value nextQ0, Value other) {
  ops.ifThen(nextVisited, [&] {
    issueQueryTile(head, nextQ0 ? nextQ0 : ops.add(q0, ops.ci32(c.blockN)),
                   other);
  });
  NVVM::CpAsyncCommitGroupOp::create(b);
}

SmallVector<Value>
BackwardBuilder::asyncTileStep(ValueRange state, Value head, Value q0,
                               Value qLast, Value needsMask, Value boundsOnly,
                               Value nextVisited, Value nextQ0) {
  const int nS = shape.sTiles();
  const int nK = shape.accRegs(c.headDimQK), nV = shape.accRegs(c.headDimV);
  Value other = enterStage(state, head, q0, nextVisited, nextQ0);

  // S^T = K Q^T and dP^T = V dO^T in flight together, S^T first; with
  // dpAfterP, dP^T issued once P^T is made.
  SmallVector<Value> sAcc = mma->issueS();
  SmallVector<Value> dpAcc;
  if (!dpAfterP)
    dpAcc = mma->issueDP();
  // loadsAfterProducts: the next tile's loads while the products run
  // (issued first, their ~18 cp.async per thread and address arithmetic
  // kept the tensor cores idle at every tile's start).
  if (loadsAfterProducts)
    prefetchNext(head, q0, nextVisited, nextQ0, other);
  SmallVector<Value> s = mma->wait(sAcc, dpAfterP ? 0 : 1);
  KeyRowCoords coords{batch,    head,     seqlenQ,      seqlenK,
                      kvRow[0], kvRow[1], queryLane(q0)};
  applyKeyGroups(coords);
  SmallVector<Type> sTypes(nS * 4, ops.f32);
  auto maskIf = scf::IfOp::create(b, sTypes, needsMask, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard mg(b);
    for (bool masked : {true, false}) {
      b.setInsertionPointToStart(masked ? maskIf.thenBlock()
                                        : maskIf.elseBlock());
      scf::YieldOp::create(b, variantScoresKeyRows(ops, em, s, coords, nS,
                                                   scale, scaleLog2, masked));
    }
  }
  SmallVector<Value> scores(maskIf.getResults());
  if (boundsOnly)
    maskPastEnds(scores, coords.qLane, boundsOnly);
  SmallVector<Value> p = probabilities(scores, nullptr);
  if (dpAfterP)
    dpAcc = mma->issueDP();
  SmallVector<Value> dp = mma->wait(dpAcc, 0);

  SmallVector<Value> dk(state.begin(), state.begin() + nK);
  SmallVector<Value> dv(state.begin() + nK, state.begin() + nK + nV);
  SmallVector<Value> gradState(state.begin() + nK + nV,
                               state.begin() + (state.size() - 2));
  // dS'^T = P^T (dP^T - D); dS^T = score_grad(dS'^T, s).
  SmallVector<Value> ds = scoreGradients(p, dp, {});
  // Masked keys are isolated (as in tileStep; checkResults: where this
  // thread's dS^T has a NaN or Inf).
  if (isolate && !checkResults)
    ds = zeroWhereUnweighted(p, ds, needsMask);
  if (grads->active())
    ds = grads->scoreGrad(ds, scoreGradInput(s, p), batch, head, seqlenQ,
                          seqlenK, {kvRow[0], kvRow[1]}, coords.qLane, nS,
                          gradState);
  SmallVector<Value> pA = mma->packA(p), dsA = mma->packA(ds);
  // dS^T into shared memory while dV += P^T dO runs; then dQ = dS K
  // (wgmma groups complete in order: dV, dQ, dK).
  // dvBeforeStores: dV is issued before the dS^T stores (it reads P^T from
  // registers only), so the tensor cores start while they are written.
  if (dvBeforeStores)
    dv = mma->issueDV(dv, pA);
  if (checkResults) {
    dsA = checkedDS(p, ds, dsA, needsMask);
    mma->storeDSPacked(dsA);
  } else {
    mma->storeDS(ds);
  }
  if (!dvBeforeStores)
    dv = mma->issueDV(dv, pA);
  Value kVote = publishDS(needsMask);
  SmallVector<Value> dq = mma->issueDQ();
  dv = mma->wait(dv, 1, pA);
  // dK += dS^T Q (scaled at the end) runs during the dQ atomics.
  dk = mma->issueDK(dk, dsA);
  dq = mma->wait(dq, 1, dsA);
  // Deterministic mode: dQaccum of this query tile in key-tile order.
  if (!c.blockSparse)
    ops.ifThen(deterministic, [&] { waitTurn(head, q0, qLast); });
  // A partial tile meeting a poisoned K: the guarded dQ instead (dS^T and
  // K are still in shared memory; dK's product only reads them).
  // checkResults: a masked pair meets a NaN or Inf in K only as 0 * Inf or
  // 0 * NaN, so only a thread whose dQ has one takes it.
  if (checkResults)
    kVote = ops.guarded(needsMask, ops.i1, ops.cb(false),
                        [&] { return valuesHaveNonFinite(ops, dq); });
  if (isolate)
    guardDQ(
        needsMask, kVote, [&] { return dq; },
        [&](ArrayRef<Value> v) { atomicDQ(head, q0, v); });
  else
    atomicDQ(head, q0, dq);
  if (!c.blockSparse) {
    // The CTA's adds before the release (the default mode needs no
    // barrier here: the next tile's first barrier orders the shared tiles).
    ops.ifThen(deterministic, [&] { gpu::BarrierOp::create(b); });
    releaseTurn(head, q0);
  }
  dk = mma->wait(dk, 0, dsA);
  SmallVector<Value> out =
      llvm::to_vector(llvm::concat<Value>(dk, dv, gradState));
  out.append({other, nextVisited});
  return out;
}

} // namespace flashjit::nvvm::detail
