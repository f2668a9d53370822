//===- BackwardDQ.cpp - the GPU backward's dQ, turns and stores
//-------------===//
//
// Part of BackwardBuilder (BackwardBuilder.h): the GPU backward's dQ, turns and
// stores.
//
//===----------------------------------------------------------------------===//
#include "BackwardBuilder.h"

#include "BackwardKernelBase.h"
#include "BackwardMma.h"
#include "MaskedValues.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace flashjit::nvvm::detail {

void BackwardBuilder::waitTurn(Value head, Value q0, Value qLast) {
  const int BM = c.blockM(), nthreads = 32 * c.numWarps;
  Value numK = arith::DivUIOp::create(b, ops.add(seqlenK, ops.ci32(BM - 1)),
                                      ops.ci32(BM));
  // Key tiles above this one that visit the query tile (the classifier
  // headLoop skips by): all of them without a mask, else counted by the
  // CTA, one key tile per thread and round (bar.red.popc).
  Value above = ops.sub(ops.sub(numK, kTile), ops.ci32(1));
  Value turn = above;
  if (em.hasMask()) {
    Value rounds = arith::DivUIOp::create(
        b, ops.add(above, ops.ci32(nthreads - 1)), ops.ci32(nthreads));
    Value zeroIdx = arith::ConstantIndexOp::create(b, 0);
    Value one = arith::ConstantIndexOp::create(b, 1);
    auto loop = scf::ForOp::create(b, zeroIdx, ops.toIndex(rounds), one,
                                   ValueRange{ops.ci32(0)});
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(loop.getBody());
    Value r = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
    Value j = ops.add(ops.add(kTile, ops.ci32(1)),
                      ops.add(ops.mul(r, ops.ci32(nthreads)), tid));
    Value inRange = ops.cmp(arith::CmpIPredicate::slt, j, numK);
    Value visits = ops.guarded(inRange, ops.i1, ops.cb(false), [&] {
      return classify(head, q0, qLast, ops.mul(j, ops.ci32(BM))).second;
    });
    Value n =
        ops.inlineAsm(ops.i32,
                      ValueRange{arith::ExtUIOp::create(b, ops.i32, visits)},
                      "{ .reg .pred p; setp.ne.u32 p, $1, 0; "
                      "bar.red.popc.u32 $0, 0, p; }",
                      "=r,r")
            .getResult(0);
    scf::YieldOp::create(b,
                         ValueRange{ops.add(loop.getRegionIterArgs()[0], n)});
    b.setInsertionPointAfter(loop);
    turn = loop.getResult(0);
  }
  Value qTile = arith::DivUIOp::create(b, q0, ops.ci32(c.blockN));
  Value sem = semaphore(headsQ, head, qTile);
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)), [&] {
    ops.inlineAsm(Type(), ValueRange{sem, turn},
                  "{ .reg .pred p; .reg .s32 v; FJ_TURN_WAIT: "
                  "ld.acquire.gpu.global.s32 v, [$0]; setp.ne.s32 p, v, $1; "
                  "@p bra FJ_TURN_WAIT; }",
                  "l,r");
  });
  gpu::BarrierOp::create(b);
}

void BackwardBuilder::addDQ(Value head, Value q0, Value qLast, Value needsMask,
                            Value kVote) {
  // Deterministic mode: dQaccum of this query tile in key-tile order.
  // (Block-sparse kernels have no deterministic mode yet: the turn counts
  // would have to follow the lists, not the classifier.)
  if (!c.blockSparse)
    ops.ifThen(deterministic, [&] { waitTurn(head, q0, qLast); });
  accumulateDQ(head, q0, needsMask, kVote);
  // Q, dO, dS^T, LSE and D are free for the next tile.
  gpu::BarrierOp::create(b);
  if (!c.blockSparse)
    releaseTurn(head, q0);
}

void BackwardBuilder::releaseTurn(Value head, Value q0) {
  // The next key tile may add to this query tile's dQ (release: after this
  // CTA's adds, which the barrier before this ordered).
  ops.ifThen(ops.land(deterministic,
                      ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0))),
             [&] {
               Value qTile = arith::DivUIOp::create(b, q0, ops.ci32(c.blockN));
               ops.inlineAsm(Type(), ValueRange{semaphore(headsQ, head, qTile)},
                             "red.release.gpu.global.add.s32 [$0], 1;", "l");
             });
}

SmallVector<Value> BackwardBuilder::zeroedWhereUnweighted(ArrayRef<Value> p,
                                                          ArrayRef<Value> ds) {
  SmallVector<Value> out;
  for (auto [pe, de] : llvm::zip_equal(p, ds))
    out.push_back(ops.sel(ops.feq(pe, ops.cf32(0.0f)), ops.cf32(0.0f), de));
  return out;
}

SmallVector<Value> BackwardBuilder::zeroWhereUnweighted(ArrayRef<Value> p,
                                                        ArrayRef<Value> ds,
                                                        Value needsMask) {
  auto zero = [&] { return zeroedWhereUnweighted(p, ds); };
  // mma.sync (padded tiles): in every tile, as the branch below made the
  // block-sparse D = 128 window kernel spill 8 bytes (ptxas, sm_90a).
  if (!mma->swizzled())
    return zero();
  // Only a tile that evaluates the mask has pairs with P = 0 that a row
  // does not attend; elsewhere P = 0 only by underflow, at a pair the row
  // attends, where a NaN or Inf in dP or D reaches the float64 gradient
  // too. One uniform branch, no per-element work in full tiles.
  SmallVector<Type> types(ds.size(), ops.f32);
  auto ifOp = scf::IfOp::create(b, types, needsMask, /*withElse=*/true);
  OpBuilder::InsertionGuard ig(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(b, zero());
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, ds);
  return SmallVector<Value>(ifOp.getResults());
}

SmallVector<Value> BackwardBuilder::checkedDS(ArrayRef<Value> p,
                                              ArrayRef<Value> ds,
                                              ArrayRef<Value> dsPacked,
                                              Value needsMask) {
  // Only a tile that evaluates the mask has masked pairs (P = +0 there:
  // dS' = +-0 unless dP - D is NaN or Inf); the check is this thread's own
  // (packed words, as the products and the dS^T tile take them).
  Value bad = ops.guarded(needsMask, ops.i1, ops.cb(false),
                          [&] { return wordsHaveNonFinite(ops, dsPacked); });
  SmallVector<Type> types(dsPacked.size(), ops.i32);
  auto ifOp = scf::IfOp::create(b, types, ops.unlikely(bad), /*withElse=*/true);
  OpBuilder::InsertionGuard ig(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(b, mma->packA(zeroedWhereUnweighted(p, ds)));
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, dsPacked);
  return SmallVector<Value>(ifOp.getResults());
}

void BackwardBuilder::voteOnK() {
  // Every thread's K chunks have landed (the V group may still be in
  // flight), then the CTA sees the whole tile.
  NVVM::CpAsyncWaitGroupOp::create(b, 1);
  gpu::BarrierOp::create(b);
  Value poisoned =
      tileHasNonFiniteIf(ops, ops.cb(true), VoteGroup{tid, 32 * c.numWarps, 0},
                         sK, c.blockM(), c.headDimQK, mma->swizzled());
  // Padded rows (mma.sync) have kPad spare elements: the answer waits in
  // row 0's, read where a partial tile needs it, instead of holding a
  // register across the tile loop (the D = 128 softcap-window kernel
  // spilled 4-16 bytes with one). The tile loop's barriers publish it.
  kFlag = ops.gepBytes(sK, int64_t(2) * c.headDimQK);
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)), [&] {
    LLVM::StoreOp::create(b, ops.sel(poisoned, ops.ci32(1), ops.ci32(0)), kFlag,
                          /*alignment=*/4);
  });
}

Value BackwardBuilder::publishDS(Value needsMask) {
  mma->publish();
  if (!isolate || kFlag || checkResults) {
    gpu::BarrierOp::create(b);
    return Value();
  }
  // Swizzled tiles (wgmma): the CTA votes on K at this barrier, which
  // every tile has (dS^T published to dQ's product), and only in partial
  // tiles (the only ones with masked pairs). K has landed: the tile's
  // first barrier follows the wait for every cp.async group, K's included.
  // No barrier, register or wait of its own.
  return barrierVotingIf(ops, needsMask, VoteGroup{tid, 32 * c.numWarps, 0}, sK,
                         c.blockM(), c.headDimQK, mma->swizzled());
}

void BackwardBuilder::guardDQ(Value needsMask, Value kVote,
                              llvm::function_ref<SmallVector<Value>()> plain,
                              llvm::function_ref<void(ArrayRef<Value>)> add) {
  // Only a partial tile has masked pairs; the guarded product where K
  // holds a NaN or Inf (almost never: then the product as without a mask).
  Value poisoned =
      kFlag ? ops.guarded(needsMask, ops.i1, ops.cb(false),
                          [&] {
                            Value f = LLVM::LoadOp::create(b, ops.i32, kFlag,
                                                           /*alignment=*/4);
                            return ops.cmp(arith::CmpIPredicate::ne, f,
                                           ops.ci32(0));
                          })
            : kVote;
  // Each branch adds its own dQ (no merged values: the plain branch keeps
  // the registers it has without a mask).
  // (The guarded branch is cold: laid out of the tile loop's hot path.)
  auto ifOp = scf::IfOp::create(b, TypeRange{}, ops.unlikely(poisoned),
                                /*withElse=*/true);
  OpBuilder::InsertionGuard ig(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  add(dqSkipZero(ops, shape, warp, lane, sDS, sK, mma->swizzled()));
  b.setInsertionPointToStart(ifOp.elseBlock());
  add(plain());
}

void BackwardBuilder::accumulateDQ(Value head, Value q0, Value needsMask,
                                   Value kVote) {
  if (!isolate)
    return atomicDQ(head, q0, mma->computeDQ());
  guardDQ(
      needsMask, kVote, [&] { return mma->computeDQ(); },
      [&](ArrayRef<Value> v) { atomicDQ(head, q0, v); });
}

void BackwardBuilder::atomicDQ(Value head, Value q0, ArrayRef<Value> dq) {
  const int D = c.headDimQK, rowGroups = shape.rowGroups();
  const int dqCols = shape.dqCols(), nQ = dqCols / 8;
  Value rg = arith::RemUIOp::create(b, warp, ops.ci32(rowGroups));
  Value cg = arith::DivUIOp::create(b, warp, ops.ci32(rowGroups));
  for (int r = 0; r < 2; ++r) {
    Value row = ops.add(ops.add(q0, ops.add(ops.mul(rg, ops.ci32(16)), g)),
                        ops.ci32(8 * r));
    ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ), [&] {
      Value base = ops.mul(workRow(headsQ, head, row), ops.ci64(D));
      for (int jd = 0; jd < nQ; ++jd) {
        // wgmma kernels (PTX 8.1, GpuPipelines.cpp): both columns in one
        // vector reduction (8-byte aligned: the column is even).
        if (c.wgmma) {
          Value col = ops.add(
              ops.add(ops.mul(cg, ops.ci32(dqCols)), ops.mul(t, ops.ci32(2))),
              ops.ci32(jd * 8));
          Value addr = ops.gepBytes(
              dqAccum, ops.mul(ops.add(base, ops.ext64(col)), ops.ci64(4)));
          ops.inlineAsm(
              Type(),
              ValueRange{addr, dq[jd * 4 + 2 * r], dq[jd * 4 + 2 * r + 1]},
              "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f");
          continue;
        }
        for (int cc = 0; cc < 2; ++cc) {
          Value col = ops.add(
              ops.add(ops.mul(cg, ops.ci32(dqCols)), ops.mul(t, ops.ci32(2))),
              ops.ci32(jd * 8 + cc));
          Value addr = ops.gepBytes(
              dqAccum, ops.mul(ops.add(base, ops.ext64(col)), ops.ci64(4)));
          LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::fadd, addr,
                                    dq[jd * 4 + 2 * r + cc],
                                    LLVM::AtomicOrdering::monotonic);
        }
      }
    });
  }
}

void BackwardBuilder::storeRows(int tensor, Value headIdx, ArrayRef<Value> acc,
                                int dim, Value factor) {
  // shape.splitDim: this warpgroup's half of the columns.
  Value col0 = shape.splitDim
                   ? ops.mul(arith::DivUIOp::create(b, warp, ops.ci32(4)),
                             ops.ci32(dim / 2))
                   : Value();
  for (int r = 0; r < 2; ++r) {
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, kvRow[r], seqlenK));
    Value rowOff = offset(tensor, batch, headIdx, kvRow[r]);
    for (int jd = 0; jd < shape.accRegs(dim) / 4; ++jd) {
      Value x0 = acc[jd * 4 + 2 * r], x1 = acc[jd * 4 + 2 * r + 1];
      if (factor) {
        x0 = ops.fmul(x0, factor);
        x1 = ops.fmul(x1, factor);
      }
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      if (col0)
        col = ops.add(col, col0);
      LLVM::StoreOp::create(b, ops.pack(x0, x1),
                            address(tensor, ops.add(rowOff, ops.ext64(col))),
                            /*alignment=*/4);
    }
  }
}

} // namespace flashjit::nvvm::detail
