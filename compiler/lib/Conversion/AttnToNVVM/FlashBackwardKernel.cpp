//===- FlashBackwardKernel.cpp - FlashAttention-2 GPU backward kernels ----===//
//
// Pre: a gpu.module. Post: it holds the three backward kernels of
// FlashBackwardKernel.h, built from nvvm, llvm, arith and scf ops.
//
// The algorithm is FlashAttention-2's backward pass (Dao 2023, Algorithm
// 2); its five products come from a BackwardMma (BackwardMma.h: mma.sync
// with 4 warps of 16 keys, or on sm_90a wgmma with two warpgroups of 64
// keys and 64-row query tiles in 128-byte-swizzled shared tiles). With
// wgmma the products are asynchronous (asyncTileStep, the order of
// FlashAttention-3's backward, Shah et al. 2024): Q, dO, LSE and D of the
// next visited query tile load into the other stage of a two-stage ring
// during the current tile; S^T and dP^T are issued together; dV, dQ and dK
// are issued before the previous group is waited for, so the dQ atomics run
// beside dK; one barrier fewer per tile. Block-sparse wgmma kernels load the
// next listed query tile into the other stage in either step (the
// synchronous one too, which masked kernels keep above head dim 64). The
// kernel:
//   _bwd_pre:  D_i = dO_i . O_i (fp32), dQaccum_i = 0        (warp per row;
//              BackwardRowKernels.cpp)
//   _bwd:      one CTA per (key tile, kv head, batch); K and V of its keys
//              stay in shared memory; for each query head of the group and
//              each query tile the classifier does not find empty (masked
//              wgmma kernels up to head dim 64 loop only from the first to
//              the last such tile, found by a scan first: visitedRange):
//                S^T = K Q^T                      (rows: keys, 16 per warp)
//                P^T = exp2(t - LSE log2 e)       (t: VariantTile, the
//                                                  forward's per-element code)
//                dV += P^T dO;  dP^T = V dO^T;  dS'^T = P^T (dP^T - D)
//                dS^T = score_grad(dS'^T, s) (identity without a score
//                       modifier; BackwardDataGrads: the buffer and
//                       parameter gradients, reduced per query head)
//                dK += dS^T Q
//                dS^T -> shared memory; dQaccum += dS K (fp32 atomics;
//                       deterministic mode: after the key tiles above this
//                       one that visit the query tile, see waitTurn)
//              then dK * scale and dV are written in the inputs' dtype.
//              varlen: the CTA's sequence from cu_seqlens, nothing past its
//              keys; rows and keys addressed from its first tokens.
//   _bwd_post: dQ = scale * dQaccum in the inputs' dtype  (warp per row;
//              BackwardRowKernels.cpp)
// Fragment layouts: ../shared/notes/MMA-FRAGMENTS.md; the C fragment of two
// n8 tiles is the A fragment of one k16 slice (P^T and dS^T stay in
// registers for dV and dK); both instruction kinds give each warp its 16
// keys in that layout, so everything between the products is shared. Arguments:
// abi::gpu::backwardArgTypes (runtime/KernelAbi.h).
//
#include "flashjit/Conversion/AttnToNVVM/FlashBackwardKernel.h"
#include "flashjit/compiler/BackwardOrderTesting.h"

#include "BackwardBuilder.h"
#include "MaskedValues.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <optional>

namespace flashjit::nvvm::detail {

/// setListedPrefetchBackwardForTesting's switch.
static std::atomic<bool> listedPrefetch{true};
/// setTileRangeBackwardForTesting's switch.
static std::atomic<bool> tileRangeScan{true};
/// setProductsFirstBackwardForTesting's switch.
static std::atomic<bool> productsFirstOrder{true};
/// setMaskedLoadsAfterProductsBackwardForTesting's switch.
static std::atomic<bool> maskedLoadsLate{false};
/// setTileRangeWideBackwardForTesting's switch.
static std::atomic<bool> tileRangeWide{false};

void BackwardBuilder::mainKernel(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  const int W = c.numWarps, BM = c.blockM(), BN = c.blockN;
  const int D = c.headDimQK, Dv = c.headDimV;
  shape = BackwardTileShape{D, Dv, BM, BN, W};
  // rowsPerWarp 8: two warpgroups share 64 keys (TilePolicy.cpp).
  shape.splitDim = c.wgmma && c.rowsPerWarp == 8;
  gpu::GPUFuncOp fn = declare(gpuModule, abi::kBackwardMainSuffix, 32 * W,
                              c.KernelConfig::sharedBytes(D, Dv));
  grads.emplace(ops, em, gradArgs);
  // Block-sparse kernels without mask code isolate too: a key tile may
  // span a mask tile the block mask leaves out (its keys loaded, P = 0).
  isolate = (em.hasMask() || c.blockSparse) && maskedValueIsolation();
  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  warp = arith::DivUIOp::create(b, tid, ops.ci32(32));
  lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  mma = shape.splitDim ? createWgmmaSplitBackward(ops, shape, warp, lane)
        : c.wgmma      ? createWgmmaBackward(ops, shape, warp, lane)
                       : createMmaSyncBackward(ops, shape, warp, lane);
  if (shape.splitDim)
    qCol0 =
        ops.mul(arith::DivUIOp::create(b, warp, ops.ci32(4)), ops.ci32(BN / 2));
  // Above head dim 64, mask or score-modifier code beside the pipelined
  // step's accumulators in flight spills in some kernels: those take the
  // synchronous order where the configuration asks (compileGpuArtifacts'
  // fallback), and always with a score modifier that reads buffers or has
  // buffer or parameter gradients, in the split kernel and block-sparse
  // kernels; a mask that reads buffers issues dP^T once P^T is made.
  const bool wide = std::max(D, Dv) > 64;
  const bool variantCode = em.hasMask() || em.hasScoreMod();
  const bool scoreBuffers =
      em.scoreReadsBuffers() || !em.dataGradSites().empty();
  pipelined = mma->asyncProducts() &&
              (!(variantCode && wide) || (!scoreBuffers && !c.syncBackward &&
                                          !shape.splitDim && !c.blockSparse));
  dpAfterP = pipelined && wide && em.maskReadsBuffers();
  checkResults = isolate && pipelined && !wide && !grads->active() &&
                 !maskedValueBackwardTileVote();
  // Block-sparse wgmma kernels (not the split one, whose P^T lies in the
  // second stage) prefetch the next listed query tile into the ring, with
  // either step.
  prefetchListed =
      c.blockSparse && c.wgmma && !shape.splitDim && listedPrefetch.load();
  ring = pipelined || prefetchListed;
  // Above head dim 64 the pipelined step issues dV before the dS^T stores
  // and, without variant code, S^T and dP^T before the next tile's loads.
  dvBeforeStores = pipelined && wide && productsFirstOrder.load();
  loadsAfterProducts =
      dvBeforeStores && (!variantCode || maskedLoadsLate.load());
  // The dense tile loop over the visited range only: masked wgmma kernels
  // up to head dim 64 (a sliding window's CTA visits ~18 of N / 64 query
  // tiles; each empty one cost a loop step of ~110 cycles); above it only
  // under setTileRangeWideBackwardForTesting (two matrix kernels spill).
  tileRange = em.hasMask() && c.wgmma && (!wide || tileRangeWide.load()) &&
              !c.blockSparse && tileRangeScan.load();
  const bool swz = mma->swizzled();
  const int P = swz ? 0 : kPad;
  // Deterministic mode: the last key tile first (KernelAbi.h).
  deterministic = LLVM::ICmpOp::create(b, LLVM::ICmpPredicate::ne, semaphores,
                                       LLVM::ZeroOp::create(b, ops.ptrG));
  Value x = NVVM::BlockIdXOp::create(b, ops.i32);
  kTile = ops.sel(
      deterministic,
      ops.sub(ops.sub(NVVM::GridDimXOp::create(b, ops.i32), ops.ci32(1)), x),
      x);
  headKV = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  headsQ = ops.mul(NVVM::GridDimYOp::create(b, ops.i32), group);
  k0 = ops.mul(kTile, ops.ci32(BM));
  // varlen: this CTA's sequence; nothing to do past its keys.
  locateSequence();
  if (c.varlen)
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, k0, seqlenK));
  Value keyWarp =
      shape.splitDim ? arith::RemUIOp::create(b, warp, ops.ci32(4)) : warp;
  kvRow[0] = ops.add(ops.add(k0, ops.mul(keyWarp, ops.ci32(16))), g);
  kvRow[1] = ops.add(kvRow[0], ops.ci32(8));

  // [K | V | Q | dO | dS^T | LSE | D]; asynchronous products (wgmma):
  // [K | V | Q_0 | dO_0 | Q_1 | dO_1 | dS^T | LSE_0 | D_0 | LSE_1 | D_1],
  // two stages of the query tile (KernelConfig::sharedBytes; the split
  // kernel's P^T lies in the second).
  const int stages = c.wgmma ? 2 : 1;
  qStageBytes = int64_t(2) * BN * (D + Dv + 2 * P);
  sK = ops.sharedBase();
  Value sV = ops.gepBytes(sK, int64_t(2) * BM * (D + P));
  sQ = ops.gepBytes(sV, int64_t(2) * BM * (Dv + P));
  sDO = ops.gepBytes(sQ, int64_t(2) * BN * (D + P));
  sDS = ops.gepBytes(sQ, stages * qStageBytes);
  sLse = ops.gepBytes(sDS, int64_t(2) * BM * (BN + P));
  sDelta = ops.gepBytes(sLse, int64_t(4) * BN);
  sLseCur = sLse;
  sDeltaCur = sDelta;

  // K and V of this CTA's keys: loaded once.
  const int nthreads = 32 * W;
  Value zero32 = ops.ci32(0);
  auto tensorBase = [&](int tn, Value h) {
    return address(tn, offset(tn, batch, h, zero32));
  };
  loadTileAsync(ops, tid, nthreads, sK, tensorBase(TK, headKV), st[TK][2], k0,
                seqlenK, BM, D, swz);
  // mma.sync (padded tiles): the vote on K once, before the tile loop (K
  // first: the vote reads it); swizzled tiles vote at each partial tile's
  // dS barrier instead (publishDS).
  const bool voteFirst = isolate && !swz;
  if (voteFirst)
    NVVM::CpAsyncCommitGroupOp::create(b);
  loadTileAsync(ops, tid, nthreads, sV, tensorBase(TV, headKV), st[TV][2], k0,
                seqlenK, BM, Dv, swz);
  NVVM::CpAsyncCommitGroupOp::create(b);
  if (voteFirst)
    voteOnK();
  mma->prepare(sK, sV, sQ, sDO, sDS);

  const int nK = shape.accRegs(D), nV = shape.accRegs(Dv);
  SmallVector<Value> fin = headLoop(nK, nV);
  // K and V are waited for by the first tile; with none, here.
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  storeRows(TDK, headKV, ArrayRef<Value>(fin).take_front(nK), D, scale);
  storeRows(TDV, headKV, ArrayRef<Value>(fin).drop_front(nK), Dv, Value());
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

SmallVector<Value> BackwardBuilder::headLoop(int nK, int nV) {
  const int BM = c.blockM(), BN = c.blockN;
  Value kPastEnd =
      ops.cmp(arith::CmpIPredicate::sgt, ops.add(k0, ops.ci32(BM)), seqlenK);
  Value numQ = arith::DivUIOp::create(b, ops.add(seqlenQ, ops.ci32(BN - 1)),
                                      ops.ci32(BN));
  SmallVector<Value> init(nK + nV, ops.cf32(0.0f));
  // The query-tile ring (asynchronous products, or the block-sparse
  // prefetch): its stage, carried across heads.
  const bool async = ring;
  if (async)
    init.push_back(ops.ci32(0));
  Value zeroIdx = arith::ConstantIndexOp::create(b, 0);
  Value one = arith::ConstantIndexOp::create(b, 1);

  // Query heads of this kv head's group, then query tiles.
  auto heads = scf::ForOp::create(b, zeroIdx, ops.toIndex(group), one, init);
  OpBuilder::InsertionGuard hg(b);
  b.setInsertionPointToStart(heads.getBody());
  Value head =
      ops.add(ops.mul(headKV, group),
              arith::IndexCastOp::create(b, ops.i32, heads.getInductionVar()));
  // dK, dV and the data gradients' running sums (per query head), then
  // (async) the stage and "this tile was prefetched".
  ValueRange headArgs = heads.getRegionIterArgs();
  SmallVector<Value> carried(headArgs.take_front(nK + nV));
  if (grads->active())
    carried.append(grads->initState());
  if (async)
    carried.append({headArgs.back(), ops.cb(false)});
  // The head loop's results from the tile loop's.
  auto headYield = [&](ArrayRef<Value> res) {
    SmallVector<Value> out(res.take_front(nK + nV));
    if (async)
      out.push_back(res[res.size() - 2]);
    return out;
  };
  auto flushGrads = [&](ArrayRef<Value> res) {
    if (grads->active())
      grads->flush(res.drop_front(nK + nV).drop_back(async ? 2 : 0), lane);
  };
  if (c.blockSparse) {
    SmallVector<Value> res = listedTileLoop(head, carried, kPastEnd);
    flushGrads(res);
    scf::YieldOp::create(b, headYield(res));
    return firstResults(heads, nK + nV);
  }
  // Only the query tiles from the first to the last the classifier does
  // not find empty (tileRange): the loop no longer steps through the
  // empty ones around them.
  Value lb = zeroIdx, ub = ops.toIndex(numQ);
  if (tileRange) {
    auto [first, last] = visitedRange(head, numQ);
    lb = ops.toIndex(first);
    ub = ops.toIndex(ops.add(last, ops.ci32(1)));
  }
  auto tiles = scf::ForOp::create(b, lb, ub, one, carried);
  {
    OpBuilder::InsertionGuard tg(b);
    b.setInsertionPointToStart(tiles.getBody());
    Value q0 =
        ops.mul(arith::IndexCastOp::create(b, ops.i32, tiles.getInductionVar()),
                ops.ci32(BN));
    Value qLast =
        ops.sub(arith::MinSIOp::create(b, ops.add(q0, ops.ci32(BN)), seqlenQ),
                ops.ci32(1));
    auto [mayBeFalse, mayBeTrue] = classify(head, q0, qLast, k0);
    Value qPastEnd =
        ops.cmp(arith::CmpIPredicate::sgt, ops.add(q0, ops.ci32(BN)), seqlenQ);
    Value needsMask = ops.lor(mayBeFalse, ops.lor(kPastEnd, qPastEnd));
    // Async: whether the next query tile is visited (its loads are then
    // issued during this one's products).
    Value nextVisited;
    if (async) {
      Value q1 = ops.add(q0, ops.ci32(BN));
      Value q1Last =
          ops.sub(arith::MinSIOp::create(b, ops.add(q1, ops.ci32(BN)), seqlenQ),
                  ops.ci32(1));
      nextVisited = ops.land(ops.cmp(arith::CmpIPredicate::slt, q1, seqlenQ),
                             classify(head, q1, q1Last, k0).second);
    }
    ValueRange state = tiles.getRegionIterArgs();
    auto tileIf = scf::IfOp::create(b, TypeRange(state), mayBeTrue,
                                    /*withElse=*/true);
    {
      OpBuilder::InsertionGuard ig(b);
      b.setInsertionPointToStart(tileIf.elseBlock()); // empty: skipped
      scf::YieldOp::create(b, skippedState(state));
      b.setInsertionPointToStart(tileIf.thenBlock());
      scf::YieldOp::create(
          b, visit(state, head, q0, qLast, needsMask, Value(), nextVisited));
    }
    scf::YieldOp::create(b, tileIf.getResults());
  }
  SmallVector<Value> res(tiles.getResults());
  flushGrads(res);
  scf::YieldOp::create(b, headYield(res));
  return firstResults(heads, nK + nV);
}

SmallVector<Value> BackwardBuilder::listedTileLoop(Value head,
                                                   ValueRange carried,
                                                   Value kPastEnd) {
  const int BN = c.blockN;
  // Row (batch, head, key tile) of the transposed lists (KernelAbi.h).
  Value row = ops.add(
      ops.add(ops.mul(batch, rowBatchStride), ops.mul(head, rowHeadStride)),
      kTile);
  Value listRow = ops.mul(ops.ext64(row), ops.ext64(listPitch));
  Value numPartial = ops.loadI32(qLists[0], row);
  Value numListed = ops.add(numPartial, ops.loadI32(qLists[2], row));
  auto tiles = scf::ForOp::create(
      b, arith::ConstantIndexOp::create(b, 0), ops.toIndex(numListed),
      arith::ConstantIndexOp::create(b, 1), carried);
  OpBuilder::InsertionGuard tg(b);
  b.setInsertionPointToStart(tiles.getBody());
  Value it = arith::IndexCastOp::create(b, ops.i32, tiles.getInductionVar());
  // Both reads stay inside the row: partial + full <= num_q_tiles.
  auto read = [&](Value list, Value i) {
    Value p = LLVM::GEPOp::create(b, ops.ptrG, ops.i32, list,
                                  ValueRange{ops.add(listRow, ops.ext64(i))});
    return LLVM::LoadOp::create(b, ops.i32, p, /*alignment=*/4).getResult();
  };
  // Entry i's query tile (its list: partial before full).
  auto isFull = [&](Value i) {
    return ops.cmp(arith::CmpIPredicate::sge, i, numPartial);
  };
  auto entryTile = [&](Value i, Value full) {
    Value fi = arith::MaxSIOp::create(b, ops.sub(i, numPartial), ops.ci32(0));
    return ops.sel(full, read(qLists[3], fi), read(qLists[1], i));
  };
  Value listedFull = isFull(it);
  Value qTile = entryTile(it, listedFull);
  // The ring: the next entry's tile is loaded into the other stage during
  // this one (nextVisited; a tile past the queries is not). It may still
  // be skipped by the classifier: the skip waits for its loads then, so the
  // tile after it can reuse the stage. The index stays in the row.
  Value nextQ0, nextVisited = ops.cb(false);
  if (prefetchListed) {
    Value next = ops.add(it, ops.ci32(1));
    Value i = arith::MinSIOp::create(b, next, ops.sub(numListed, ops.ci32(1)));
    nextQ0 = ops.mul(entryTile(i, isFull(i)), ops.ci32(BN));
    nextVisited = ops.land(ops.cmp(arith::CmpIPredicate::slt, next, numListed),
                           ops.cmp(arith::CmpIPredicate::slt, nextQ0, seqlenQ));
  }
  // A partial tile spanning mask tiles of several classes (word != 0):
  // masked, with each key row's class (applyKeyGroups); one with a full
  // group is visited whatever the classifier says.
  keyGroups = ops.sel(listedFull, ops.ci32(0), read(qLists[4], it));
  Value spans = ops.cmp(arith::CmpIPredicate::ne, keyGroups, ops.ci32(0));
  Value fullGroups =
      ops.cmp(arith::CmpIPredicate::uge, keyGroups, ops.ci32(1 << 16));
  Value q0 = ops.mul(qTile, ops.ci32(BN));
  Value qLast =
      ops.sub(arith::MinSIOp::create(b, ops.add(q0, ops.ci32(BN)), seqlenQ),
              ops.ci32(1));
  // Listed partial: classified as the dense loop's tiles (skipped where the
  // mask holds nowhere); listed full: no mask code. Tiles past this
  // sequence's queries (a layout shared by shorter sequences): skipped.
  auto [mayBeFalse, mayBeTrue] = classify(head, q0, qLast, k0);
  mayBeFalse = ops.land(mayBeFalse, ops.lnot(listedFull));
  mayBeTrue = ops.land(ops.lor(mayBeTrue, ops.lor(listedFull, fullGroups)),
                       ops.cmp(arith::CmpIPredicate::slt, q0, seqlenQ));
  Value qPastEnd =
      ops.cmp(arith::CmpIPredicate::sgt, ops.add(q0, ops.ci32(BN)), seqlenQ);
  // A listed full tile at a sequence end masks only what lies past it (the
  // mask is not evaluated on a full tile).
  Value atEnd = ops.lor(kPastEnd, qPastEnd);
  Value needsMask = ops.land(ops.lor(ops.lor(mayBeFalse, spans), atEnd),
                             ops.lnot(listedFull));
  Value boundsOnly = ops.land(atEnd, listedFull);
  ValueRange state = tiles.getRegionIterArgs();
  auto tileIf = scf::IfOp::create(b, TypeRange(state), mayBeTrue,
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard ig(b);
    b.setInsertionPointToStart(tileIf.elseBlock()); // empty: skipped
    if (prefetchListed) // its prefetched loads land before the stage's next
      NVVM::CpAsyncWaitGroupOp::create(b, 0);
    scf::YieldOp::create(b, skippedState(state));
    b.setInsertionPointToStart(tileIf.thenBlock());
    scf::YieldOp::create(b, visit(state, head, q0, qLast, needsMask, boundsOnly,
                                  nextVisited, nextQ0));
  }
  keyGroups = Value();
  scf::YieldOp::create(b, tileIf.getResults());
  return SmallVector<Value>(tiles.getResults());
}

void BackwardBuilder::applyKeyGroups(KeyRowCoords &at) {
  if (!keyGroups)
    return;
  // Key rows kvRow[r] lie in 8-key group (kvRow[r] - k0) / 8 of the tile.
  Value one = ops.ci32(1);
  for (int r = 0; r < 2; ++r) {
    Value grp = arith::DivUIOp::create(b, ops.sub(kvRow[r], k0), ops.ci32(8));
    auto bit = [&](Value shift) {
      Value v = arith::ShRUIOp::create(b, keyGroups, shift);
      return ops.cmp(arith::CmpIPredicate::ne, arith::AndIOp::create(b, v, one),
                     ops.ci32(0));
    };
    (r ? at.rowOff1 : at.rowOff0) = bit(grp);
    (r ? at.rowFull1 : at.rowFull0) = bit(ops.add(grp, ops.ci32(16)));
  }
}

void BackwardBuilder::maskPastEnds(MutableArrayRef<Value> scores, Value qLane,
                                   Value boundsOnly) {
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  // Element (key row g or g + 8, query column q0 + 2t + 8jn + (i & 1)).
  for (int jn = 0; jn < shape.sTiles(); ++jn)
    for (int i = 0; i < 4; ++i) {
      Value col = ops.add(qLane, ops.ci32(jn * 8 + (i & 1)));
      Value out =
          ops.lor(ops.cmp(arith::CmpIPredicate::sge, kvRow[i / 2], seqlenK),
                  ops.cmp(arith::CmpIPredicate::sge, col, seqlenQ));
      Value &v = scores[jn * 4 + i];
      v = ops.sel(ops.land(boundsOnly, out), minusInf, v);
    }
}

std::pair<Value, Value> BackwardBuilder::visitedRange(Value head, Value numQ) {
  const int BN = c.blockN;
  // Lane l classifies tiles l, l + 32, ...; redux.sync gives every lane
  // (and every warp: the same inputs) the warp's first and last.
  Value none = ops.ci32(std::numeric_limits<int32_t>::max());
  auto scan = scf::ForOp::create(b, ops.toIndex(lane), ops.toIndex(numQ),
                                 arith::ConstantIndexOp::create(b, 32),
                                 ValueRange{none, ops.ci32(-1)});
  {
    OpBuilder::InsertionGuard sg(b);
    b.setInsertionPointToStart(scan.getBody());
    Value j = arith::IndexCastOp::create(b, ops.i32, scan.getInductionVar());
    Value q0 = ops.mul(j, ops.ci32(BN));
    Value qLast =
        ops.sub(arith::MinSIOp::create(b, ops.add(q0, ops.ci32(BN)), seqlenQ),
                ops.ci32(1));
    Value nonEmpty = classify(head, q0, qLast, k0).second;
    ValueRange acc = scan.getRegionIterArgs();
    // j grows: the first hit stays, the last moves.
    Value first = ops.sel(
        ops.land(nonEmpty, ops.cmp(arith::CmpIPredicate::eq, acc[0], none)), j,
        acc[0]);
    scf::YieldOp::create(b, ValueRange{first, ops.sel(nonEmpty, j, acc[1])});
  }
  auto reduce = [&](Value v, NVVM::ReduxKind kind) -> Value {
    return NVVM::ReduxOp::create(b, ops.i32, v, kind, ops.ci32(-1));
  };
  return {reduce(scan.getResult(0), NVVM::ReduxKind::MIN),
          reduce(scan.getResult(1), NVVM::ReduxKind::MAX)};
}

std::pair<Value, Value> BackwardBuilder::classify(Value head, Value q0,
                                                  Value qLast, Value kFirst) {
  if (!em.hasMask())
    return {ops.cb(false), ops.cb(true)};
  Value kLast = ops.sub(
      arith::MinSIOp::create(b, ops.add(kFirst, ops.ci32(c.blockM())), seqlenK),
      ops.ci32(1));
  IndexValues lo{batch, head, q0, kFirst, seqlenQ, seqlenK};
  IndexValues hi{batch, head, qLast, kLast, seqlenQ, seqlenK};
  return em.emitClassify(b, b.getLoc(), lo, hi);
}

} // namespace flashjit::nvvm::detail

namespace flashjit::nvvm {

void buildFlashBackwardKernels(mlir::OpBuilder &builder, mlir::Location loc,
                               mlir::Operation *gpuModule,
                               const KernelShape &config,
                               FragmentEmitter &emitter) {
  mlir::ImplicitLocOpBuilder b(loc, builder);
  detail::BackwardBuilder(b, config, emitter).build(gpuModule);
}

} // namespace flashjit::nvvm

void flashjit::setListedPrefetchBackwardForTesting(bool on) {
  flashjit::nvvm::detail::listedPrefetch.store(on);
}

void flashjit::setTileRangeBackwardForTesting(bool on) {
  flashjit::nvvm::detail::tileRangeScan.store(on);
}

void flashjit::setProductsFirstBackwardForTesting(bool on) {
  flashjit::nvvm::detail::productsFirstOrder.store(on);
}

void flashjit::setMaskedLoadsAfterProductsBackwardForTesting(bool on) {
  flashjit::nvvm::detail::maskedLoadsLate.store(on);
}

void flashjit::setTileRangeWideBackwardForTesting(bool on) {
  flashjit::nvvm::detail::tileRangeWide.store(on);
}
