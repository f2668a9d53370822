//===- DecodeStages.cpp - The decode kernel's three-stage key loop --------===//
//
// DecodeKernelBuilder with KernelConfig::decodeStages = 3: a ring of three
// cp.async K/V stages, Q's tile overlaid on the third (Q lives in registers
// once loaded, MmaSync's qInRegisters). Tile j sits in stage (j - jBegin) %
// 3. Iteration j waits for tile j (tile j + 1 may stay in flight), meets
// the CTA at one barrier (tile j is visible to every thread, and every warp
// is done with tile j - 1, whose stage then takes tile j + 2), issues tile
// j + 2 and computes tile j: two tiles are in flight during a tile's
// products, where two stages had one and a second barrier per tile. Every
// iteration commits one cp.async group (empty past jEnd), so
// cp.async.wait_group 1 always means "all but the newest".
//
//===----------------------------------------------------------------------===//
#include "DecodeKernelBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace flashjit::nvvm::detail {

void DecodeKernelBuilder::prologueThree() {
  // The page ids of both first tiles before either is issued: one
  // page-table round trip, not two.
  SmallVector<SmallVector<Value>, 2> kIds, vIds;
  for (int i = 0; i < 2; ++i) {
    Value j = ops.add(jBegin, ops.ci32(i));
    kIds.push_back(pageIdsOf(j, c.headDimQK));
    vIds.push_back(c.headDimV != c.headDimQK ? pageIdsOf(j, c.headDimV)
                                             : kIds.back());
  }
  for (int i = 0; i < 2; ++i) {
    Value j = ops.add(jBegin, ops.ci32(i));
    ifElse(
        b, ops.cmp(arith::CmpIPredicate::sle, j, jEnd),
        [&] { loadKV(j, ops.ci32(i), kIds[i], vIds[i]); },
        [&] { NVVM::CpAsyncCommitGroupOp::create(b); });
  }
  carryPageIdsOf(ops.add(jBegin, ops.ci32(2)));
  // Q's group is the oldest of three: Q has landed. The loop's first
  // barrier orders these reads of the third stage before its first copy.
  NVVM::CpAsyncWaitGroupOp::create(b, 2);
  gpu::BarrierOp::create(b);
  mma->loadQ();
}

ValueRange DecodeKernelBuilder::mainLoopThree() {
  Value lb = ops.toIndex(jBegin);
  Value ub = ops.toIndex(arith::MaxSIOp::create(
      b, ops.add(jEnd, ops.ci32(1)), jBegin)); // empty when jEnd < jBegin
  auto loop = scf::ForOp::create(b, lb, ub, one, init);
  OpBuilder::InsertionGuard lg(b);
  b.setInsertionPointToStart(loop.getBody());
  Value j = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  ValueRange state = loop.getRegionIterArgs();
  Value rel = ops.sub(j, jBegin);
  Value stage = arith::RemUIOp::create(b, rel, ops.ci32(3));
  Value freed = arith::RemUIOp::create(b, ops.add(rel, ops.ci32(2)),
                                       ops.ci32(3)); // tile j - 1's stage
  ValueRange kIds = state.slice(init.size() - nKIds - nVIds, nKIds);
  ValueRange vIds = nVIds ? state.slice(init.size() - nVIds, nVIds) : kIds;
  state = state.take_front(init.size() - nKIds - nVIds);
  NVVM::CpAsyncWaitGroupOp::create(b, 1); // tile j has landed
  mma->publishStage();
  gpu::BarrierOp::create(b);
  Value jAhead = ops.add(j, ops.ci32(2));
  ifElse(
      b, ops.cmp(arith::CmpIPredicate::sle, jAhead, jEnd),
      [&] { loadKV(jAhead, freed, kIds, vIds); },
      [&] { NVVM::CpAsyncCommitGroupOp::create(b); });
  // The page ids of tile j + 3, in flight during this tile's math.
  SmallVector<Value> nextIds = pageIdsOf(ops.add(j, ops.ci32(3)), c.headDimQK);
  if (nVIds) {
    SmallVector<Value> v = pageIdsOf(ops.add(j, ops.ci32(3)), c.headDimV);
    nextIds.append(v.begin(), v.end());
  }
  SmallVector<Value> yield = visitTile(j, stage, state);
  yield.append(nextIds.begin(), nextIds.end());
  scf::YieldOp::create(b, yield);
  return loop.getResults();
}

} // namespace flashjit::nvvm::detail
