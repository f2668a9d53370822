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
// beside dK; one barrier fewer per tile. The kernel:
//   _bwd_pre:  D_i = dO_i . O_i (fp32), dQaccum_i = 0        (warp per row;
//              BackwardRowKernels.cpp)
//   _bwd:      one CTA per (key tile, kv head, batch); K and V of its keys
//              stay in shared memory; for each query head of the group and
//              each query tile the classifier does not find empty:
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
//===----------------------------------------------------------------------===//
#include "flashjit/Conversion/AttnToNVVM/FlashBackwardKernel.h"

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

using namespace mlir;

namespace flashjit::nvvm {

namespace abi = flashjit::abi::gpu;

namespace {

/// The first \p n results of \p op.
SmallVector<Value> firstResults(scf::ForOp op, int n) {
  SmallVector<Value> out(op.getResults());
  out.resize(n);
  return out;
}

/// The main kernel `_bwd`.
class BackwardBuilder : public BackwardKernelBase {
public:
  BackwardBuilder(ImplicitLocOpBuilder &b, const KernelShape &c,
                  FragmentEmitter &em)
      : BackwardKernelBase(b, c, em) {}

  void build(Operation *gpuModule) {
    buildBackwardRowKernel(b, gpuModule, c, em, /*pre=*/true);
    mainKernel(gpuModule);
    buildBackwardRowKernel(b, gpuModule, c, em, /*pre=*/false);
  }

private:
  void mainKernel(Operation *gpuModule);
  /// The loop over the query heads of the group and their query tiles;
  /// returns dK and dV (unscaled).
  SmallVector<Value> headLoop(int nK, int nV);
  /// block-sparse: the loop over the query tiles the transposed block mask
  /// lists for this key tile and query \p head (partial ones classified and
  /// masked as the dense loop's tiles, full ones with no mask code; tiles
  /// past the sequence's queries skipped); returns the final \p carried.
  SmallVector<Value> listedTileLoop(Value head, ValueRange carried,
                                    Value kPastEnd);
  /// One non-empty query tile at \p q0 of query head \p head; \p state
  /// is dK, dV and the data gradients' running sums. \p boundsOnly
  /// (block-sparse; i1): a listed full tile at a sequence end, whose
  /// out-of-range elements are masked without the mask code.
  SmallVector<Value> tileStep(ValueRange state, Value head, Value q0,
                              Value qLast, Value needsMask,
                              Value boundsOnly = Value());
  /// tileStep with asynchronous products (wgmma): \p state ends with the
  /// query-tile stage (i32, 0 / 1) and whether this tile's Q, dO, LSE and
  /// D were prefetched into it (i1); \p nextVisited (i1): the next query
  /// tile is visited too, so its loads are issued into the other stage
  /// during this tile's products. Returns the state for the next tile.
  SmallVector<Value> asyncTileStep(ValueRange state, Value head, Value q0,
                                   Value qLast, Value needsMask,
                                   Value boundsOnly, Value nextVisited);
  /// The state a skipped tile passes on (asyncProducts: nothing
  /// prefetched).
  SmallVector<Value> skippedState(ValueRange state);
  /// Runs tileStep or asyncTileStep.
  SmallVector<Value> visit(ValueRange state, Value head, Value q0, Value qLast,
                           Value needsMask, Value boundsOnly,
                           Value nextVisited) {
    if (pipelined)
      return asyncTileStep(state, head, q0, qLast, needsMask, boundsOnly,
                           nextVisited);
    return tileStep(state, head, q0, qLast, needsMask, boundsOnly);
  }
  /// Where \p boundsOnly holds: -inf for the elements of \p scores (S^T
  /// fragments; first query column \p qLane) past seqlen_q or seqlen_k.
  void maskPastEnds(MutableArrayRef<Value> scores, Value qLane,
                    Value boundsOnly);
  /// (mayBeFalse, mayBeTrue) of the key tile at \p kFirst for the query
  /// tile [q0, qLast] of query head \p head: the tile is visited where
  /// mayBeTrue holds.
  std::pair<Value, Value> classify(Value head, Value q0, Value qLast,
                                   Value kFirst);
  /// Deterministic mode: waits (whole CTA) until every key tile above this
  /// CTA's that visits query tile [q0, qLast] of \p head has added to its
  /// dQaccum.
  void waitTurn(Value head, Value q0, Value qLast);
  /// Deterministic mode: thread 0 increments the query tile's counter once
  /// the CTA's dQ adds are done (after a barrier).
  void releaseTurn(Value head, Value q0);
  /// accumulateDQ, in key-tile order in the deterministic mode (waitTurn,
  /// releaseTurn); then Q, dO, dS^T, LSE and D are free for the next tile.
  void addDQ(Value head, Value q0, Value qLast, Value needsMask);
  /// dQaccum += dS K for the tile at \p q0 (dS^T in shared memory); with
  /// a mask, where the tile is partial (\p needsMask) and K holds a NaN or
  /// Inf, the guarded product (MaskedValues.h, dqSkipZero).
  void accumulateDQ(Value head, Value q0, Value needsMask);
  /// Sets kPoisoned or kFlag: once per CTA, as soon as the K tile has
  /// landed (V still in flight), the CTA votes on whether it holds a NaN or
  /// Inf. K stays in shared memory for the whole kernel, so the answer
  /// holds for every query tile, and the tile loop keeps no vote of its own
  /// (its registers: the block-sparse D = 128 mma.sync kernel spilled with
  /// a vote per tile).
  void voteOnK();
  /// With a mask: \p add (dQaccum += ...) of, where \p needsMask (a partial
  /// tile) and K is poisoned, dQ = dS K term by term from shared memory
  /// (dqSkipZero), else \p plain()'s product.
  void guardDQ(Value needsMask, llvm::function_ref<SmallVector<Value>()> plain,
               llvm::function_ref<void(ArrayRef<Value>)> add);
  /// dS^T, exactly 0 where \p p is (masked keys are isolated,
  /// MaskedValues.h: dP^T is NaN for every query of a key whose V holds a
  /// NaN or Inf, and a score modifier's derivative of a NaN score is NaN).
  SmallVector<Value> zeroWhereUnweighted(ArrayRef<Value> p, ArrayRef<Value> ds);
  /// dQaccum += \p dq (this warp's part of dS K, BackwardMma.h's layout)
  /// for the tile at \p q0.
  void atomicDQ(Value head, Value q0, ArrayRef<Value> dq);
  void storeRows(int tensor, Value headIdx, ArrayRef<Value> acc, int dim,
                 Value factor);

  /// Q and dO of the tile at \p q0 (cp.async), LSE (log2 units) and D of
  /// its rows into shared memory; waited for and published to the products.
  void loadQueryTile(Value head, Value q0);
  /// Issues (cp.async, not committed) Q, dO, LSE (natural log) and D of
  /// the tile at \p q0 into query-tile stage \p stage (i32) of the ring
  /// (asyncProducts).
  void issueQueryTile(Value head, Value q0, Value stage);
  /// P^T = exp2(t - LSE log2 e), exactly 0 where \p scores is -inf (also
  /// for rows with LSE = -inf, which have no allowed key). With
  /// \p colDelta, D of this thread's query columns is read beside LSE into
  /// it (2 per n8 tile of S^T).
  SmallVector<Value> probabilities(ArrayRef<Value> scores,
                                   SmallVectorImpl<Value> *colDelta);
  /// dS'^T = P^T (dP^T - D) with D of this thread's query columns
  /// (\p colDelta, or read from shared memory here when it is empty).
  SmallVector<Value> scoreGradients(ArrayRef<Value> p, ArrayRef<Value> dp,
                                    ArrayRef<Value> colDelta);
  /// This thread's query column \p jn * 8 + 2 t + \p cc (byte offset in
  /// the fp32 LSE / D rows).
  Value columnOffset(int jn, int cc) {
    return ops.mul(ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jn * 8 + cc)),
                   ops.ci32(4));
  }

  Value loadShared(Type ty, Value base, Value byteOff) {
    return LLVM::LoadOp::create(b, ty, ops.gepBytes(base, ops.ext64(byteOff)),
                                /*alignment=*/4);
  }

  std::optional<BackwardDataGrads> grads; // once the arguments are bound
  /// The products (mma.sync or wgmma; c.wgmma).
  std::unique_ptr<BackwardMma> mma;
  BackwardTileShape shape;
  // The main kernel's indices and shared tiles.
  Value tid, warp, lane, g, t, headKV, headsQ, kTile, k0, kvRow[2];
  /// i1: the semaphores argument is not null (deterministic mode).
  Value deterministic;
  Value sK, sQ, sDO, sDS, sLse, sDelta;
  /// With a mask, whether this CTA's K tile holds a NaN or Inf (voteOnK):
  /// kPoisoned (i1) with swizzled tiles, else the i32 at kFlag (shared
  /// memory, non-zero: poisoned).
  Value kPoisoned, kFlag;
  /// The current tile's LSE and D rows (stage of the ring); lseRaw: LSE is
  /// stored in natural-log units (scaled by log2 e when read).
  Value sLseCur, sDeltaCur;
  bool lseRaw = false;
  /// Bytes between the stages of the Q / dO ring (asyncProducts).
  int64_t qStageBytes = 0;
  /// asyncTileStep (wgmma), except with mask or score-modifier code at head
  /// dims above 64: those kernels spilled 4-48 bytes in ptxas (D = 128 fp16
  /// causal bottom-right / doc_id / chunked-causal / varlen causal with
  /// GQA, ALiBi, a bias table; 2026-12-02) and keep the synchronous
  /// tileStep. Both isolate masked keys (dS' zeroed where P is, the
  /// guarded dQ: MaskedValues.h).
  bool pipelined = false;
};

void BackwardBuilder::mainKernel(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  const int W = c.numWarps, BM = c.blockM(), BN = c.blockN;
  const int D = c.headDimQK, Dv = c.headDimV;
  shape = BackwardTileShape{D, Dv, BM, BN, W};
  gpu::GPUFuncOp fn = declare(gpuModule, abi::kBackwardMainSuffix, 32 * W,
                              c.KernelConfig::sharedBytes(D, Dv));
  grads.emplace(ops, em, gradArgs);
  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  warp = arith::DivUIOp::create(b, tid, ops.ci32(32));
  lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  mma = c.wgmma ? createWgmmaBackward(ops, shape, warp, lane)
                : createMmaSyncBackward(ops, shape, warp, lane);
  // Above head dim 64, mask or score-modifier code beside the pipelined
  // step's accumulators in flight spills: those kernels keep the
  // synchronous order.
  pipelined = mma->asyncProducts() &&
              !((em.hasMask() || em.hasScoreMod()) && std::max(D, Dv) > 64);
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
  kvRow[0] = ops.add(ops.add(k0, ops.mul(warp, ops.ci32(16))), g);
  kvRow[1] = ops.add(kvRow[0], ops.ci32(8));

  // [K | V | Q | dO | dS^T | LSE | D]; asynchronous products (wgmma):
  // [K | V | Q_0 | dO_0 | Q_1 | dO_1 | dS^T | LSE_0 | D_0 | LSE_1 | D_1],
  // two stages of the query tile (KernelConfig::sharedBytes).
  const int stages = mma->asyncProducts() ? 2 : 1;
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
  if (em.hasMask())
    NVVM::CpAsyncCommitGroupOp::create(b); // K first: the vote reads it
  loadTileAsync(ops, tid, nthreads, sV, tensorBase(TV, headKV), st[TV][2], k0,
                seqlenK, BM, Dv, swz);
  NVVM::CpAsyncCommitGroupOp::create(b);
  if (em.hasMask())
    voteOnK();
  mma->prepare(sK, sV, sQ, sDO, sDS);

  const int nK = D / 8 * 4, nV = Dv / 8 * 4;
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
  // Asynchronous products: the query-tile stage, carried across heads.
  const bool async = pipelined;
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
  auto tiles = scf::ForOp::create(b, zeroIdx, ops.toIndex(numQ), one, carried);
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
  Value listedFull = ops.cmp(arith::CmpIPredicate::sge, it, numPartial);
  Value fi = arith::MaxSIOp::create(b, ops.sub(it, numPartial), ops.ci32(0));
  Value qTile = ops.sel(listedFull, read(qLists[3], fi), read(qLists[1], it));
  Value q0 = ops.mul(qTile, ops.ci32(BN));
  Value qLast =
      ops.sub(arith::MinSIOp::create(b, ops.add(q0, ops.ci32(BN)), seqlenQ),
              ops.ci32(1));
  // Listed partial: classified as the dense loop's tiles (skipped where the
  // mask holds nowhere); listed full: no mask code. Tiles past this
  // sequence's queries (a layout shared by shorter sequences): skipped.
  auto [mayBeFalse, mayBeTrue] = classify(head, q0, qLast, k0);
  mayBeFalse = ops.land(mayBeFalse, ops.lnot(listedFull));
  mayBeTrue = ops.land(ops.lor(mayBeTrue, listedFull),
                       ops.cmp(arith::CmpIPredicate::slt, q0, seqlenQ));
  Value qPastEnd =
      ops.cmp(arith::CmpIPredicate::sgt, ops.add(q0, ops.ci32(BN)), seqlenQ);
  // A listed full tile at a sequence end masks only what lies past it (the
  // mask is not evaluated on a full tile).
  Value atEnd = ops.lor(kPastEnd, qPastEnd);
  Value needsMask = ops.land(ops.lor(mayBeFalse, atEnd), ops.lnot(listedFull));
  Value boundsOnly = ops.land(atEnd, listedFull);
  ValueRange state = tiles.getRegionIterArgs();
  auto tileIf = scf::IfOp::create(b, TypeRange(state), mayBeTrue,
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard ig(b);
    b.setInsertionPointToStart(tileIf.elseBlock()); // empty: skipped
    scf::YieldOp::create(b, skippedState(state));
    b.setInsertionPointToStart(tileIf.thenBlock());
    // Listed tiles are not prefetched.
    scf::YieldOp::create(
        b, visit(state, head, q0, qLast, needsMask, boundsOnly, ops.cb(false)));
  }
  scf::YieldOp::create(b, tileIf.getResults());
  return SmallVector<Value>(tiles.getResults());
}

void BackwardBuilder::maskPastEnds(MutableArrayRef<Value> scores, Value qLane,
                                   Value boundsOnly) {
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  // Element (key row g or g + 8, query column q0 + 2t + 8jn + (i & 1)).
  for (int jn = 0; jn < c.blockN / 8; ++jn)
    for (int i = 0; i < 4; ++i) {
      Value col = ops.add(qLane, ops.ci32(jn * 8 + (i & 1)));
      Value out =
          ops.lor(ops.cmp(arith::CmpIPredicate::sge, kvRow[i / 2], seqlenK),
                  ops.cmp(arith::CmpIPredicate::sge, col, seqlenQ));
      Value &v = scores[jn * 4 + i];
      v = ops.sel(ops.land(boundsOnly, out), minusInf, v);
    }
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
  const int nS = c.blockN / 8;
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
  for (int jn = 0; colDelta.empty() && jn < c.blockN / 8; ++jn)
    for (int cc = 0; cc < 2; ++cc)
      d.push_back(loadShared(ops.f32, sDeltaCur, columnOffset(jn, cc)));
  SmallVector<Value> ds;
  for (int jn = 0; jn < c.blockN / 8; ++jn)
    for (int i = 0; i < 4; ++i)
      ds.push_back(ops.fmul(p[jn * 4 + i],
                            ops.fsub(dp[jn * 4 + i], d[jn * 2 + (i & 1)])));
  return ds;
}

SmallVector<Value> BackwardBuilder::tileStep(ValueRange state, Value head,
                                             Value q0, Value qLast,
                                             Value needsMask,
                                             Value boundsOnly) {
  const int nS = c.blockN / 8, nK = c.headDimQK / 8 * 4;
  const int nV = c.headDimV / 8 * 4;
  loadQueryTile(head, q0);
  // S^T = K Q^T (this warp's 16 keys x BN queries).
  SmallVector<Value> s = mma->computeS();
  // Scores in log2 units, masked where the tile needs it.
  KeyRowCoords coords{batch,
                      head,
                      seqlenQ,
                      seqlenK,
                      kvRow[0],
                      kvRow[1],
                      ops.add(q0, ops.mul(t, ops.ci32(2)))};
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
  SmallVector<Value> gradState(state.begin() + nK + nV, state.end());
  // dV += P^T dO; dP^T = V dO^T.
  dv = mma->accumulateDV(dv, p);
  SmallVector<Value> dp = mma->computeDP();
  // dS'^T = P^T (dP^T - D); dS^T = score_grad(dS'^T, s).
  SmallVector<Value> ds = scoreGradients(p, dp, colDelta);
  // Masked keys are isolated: dS' exactly 0 where P is (before the data
  // gradients read it); score_grad leaves dS 0 where dS' is
  // (BackwardDataGrads::scoreGrad), so P need not outlive it.
  if (em.hasMask())
    ds = zeroWhereUnweighted(p, ds);
  if (grads->active())
    ds = grads->scoreGrad(ds, s, scale, batch, head, seqlenQ, seqlenK,
                          {kvRow[0], kvRow[1]}, coords.qLane, nS, gradState);
  // dK += dS^T Q (scaled at the end).
  dk = mma->accumulateDK(dk, ds);
  // dS^T into shared memory, then dQaccum += dS K.
  mma->storeDS(ds);
  mma->publish();
  gpu::BarrierOp::create(b);
  addDQ(head, q0, qLast, needsMask);
  return llvm::to_vector(llvm::concat<Value>(dk, dv, gradState));
}

SmallVector<Value> BackwardBuilder::skippedState(ValueRange state) {
  SmallVector<Value> out(state);
  if (pipelined)
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

SmallVector<Value> BackwardBuilder::asyncTileStep(ValueRange state, Value head,
                                                  Value q0, Value qLast,
                                                  Value needsMask,
                                                  Value boundsOnly,
                                                  Value nextVisited) {
  const int BN = c.blockN, nS = BN / 8, nK = c.headDimQK / 8 * 4;
  const int nV = c.headDimV / 8 * 4;
  Value stage = state[state.size() - 2], prefetched = state.back();
  // This tile's Q, dO, LSE and D: prefetched by the tile before, else
  // loaded now. Its stage was last read by the tile before that one, which
  // every warp finished before the previous tile's first barrier.
  ops.ifThen(ops.lnot(prefetched), [&] { issueQueryTile(head, q0, stage); });
  NVVM::CpAsyncCommitGroupOp::create(b);
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  mma->publish(); // K, V (first tile), Q and dO are read by the products
  gpu::BarrierOp::create(b);
  // Every warp is past the previous tile: its stage takes the next tile.
  Value other = ops.sub(ops.ci32(1), stage);
  ops.ifThen(nextVisited,
             [&] { issueQueryTile(head, ops.add(q0, ops.ci32(BN)), other); });
  NVVM::CpAsyncCommitGroupOp::create(b);
  mma->selectStage(ops.mul(ops.ext64(stage), ops.ci64(qStageBytes)));
  sLseCur = ops.gepBytes(sLse, ops.mul(ops.ext64(stage), ops.ci64(8 * BN)));
  sDeltaCur = ops.gepBytes(sLseCur, int64_t(4) * BN);
  lseRaw = true;

  // S^T = K Q^T and dP^T = V dO^T in flight together; S^T first.
  SmallVector<Value> sAcc = mma->issueS();
  SmallVector<Value> dpAcc = mma->issueDP();
  SmallVector<Value> s = mma->wait(sAcc, 1);
  KeyRowCoords coords{batch,
                      head,
                      seqlenQ,
                      seqlenK,
                      kvRow[0],
                      kvRow[1],
                      ops.add(q0, ops.mul(t, ops.ci32(2)))};
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
  SmallVector<Value> dp = mma->wait(dpAcc, 0);

  SmallVector<Value> dk(state.begin(), state.begin() + nK);
  SmallVector<Value> dv(state.begin() + nK, state.begin() + nK + nV);
  SmallVector<Value> gradState(state.begin() + nK + nV,
                               state.begin() + (state.size() - 2));
  // dS'^T = P^T (dP^T - D); dS^T = score_grad(dS'^T, s).
  SmallVector<Value> ds = scoreGradients(p, dp, {});
  // Masked keys are isolated (as in tileStep).
  if (em.hasMask())
    ds = zeroWhereUnweighted(p, ds);
  if (grads->active())
    ds = grads->scoreGrad(ds, s, scale, batch, head, seqlenQ, seqlenK,
                          {kvRow[0], kvRow[1]}, coords.qLane, nS, gradState);
  SmallVector<Value> pA = mma->packA(p), dsA = mma->packA(ds);
  // dS^T into shared memory while dV += P^T dO runs; then dQ = dS K
  // (wgmma groups complete in order: dV, dQ, dK).
  mma->storeDS(ds);
  dv = mma->issueDV(dv, pA);
  mma->publish();
  gpu::BarrierOp::create(b);
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
  if (em.hasMask())
    guardDQ(
        needsMask, [&] { return dq; },
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

void BackwardBuilder::addDQ(Value head, Value q0, Value qLast,
                            Value needsMask) {
  // Deterministic mode: dQaccum of this query tile in key-tile order.
  // (Block-sparse kernels have no deterministic mode yet: the turn counts
  // would have to follow the lists, not the classifier.)
  if (!c.blockSparse)
    ops.ifThen(deterministic, [&] { waitTurn(head, q0, qLast); });
  accumulateDQ(head, q0, needsMask);
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

SmallVector<Value> BackwardBuilder::zeroWhereUnweighted(ArrayRef<Value> p,
                                                        ArrayRef<Value> ds) {
  SmallVector<Value> out;
  for (auto [pe, de] : llvm::zip_equal(p, ds))
    out.push_back(ops.sel(ops.feq(pe, ops.cf32(0.0f)), ops.cf32(0.0f), de));
  return out;
}

void BackwardBuilder::voteOnK() {
  // Every thread's K chunks have landed (the V group may still be in
  // flight), then the CTA sees the whole tile.
  NVVM::CpAsyncWaitGroupOp::create(b, 1);
  gpu::BarrierOp::create(b);
  Value poisoned =
      tileHasNonFiniteIf(ops, ops.cb(true), VoteGroup{tid, 32 * c.numWarps, 0},
                         sK, c.blockM(), c.headDimQK, mma->swizzled());
  if (mma->swizzled()) {
    kPoisoned = poisoned;
    return;
  }
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

void BackwardBuilder::guardDQ(Value needsMask,
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
            : ops.land(needsMask, kPoisoned);
  // Each branch adds its own dQ (no merged values: the plain branch keeps
  // the registers it has without a mask).
  auto ifOp = scf::IfOp::create(b, TypeRange{}, poisoned, /*withElse=*/true);
  OpBuilder::InsertionGuard ig(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  add(dqSkipZero(ops, shape, warp, lane, sDS, sK, mma->swizzled()));
  b.setInsertionPointToStart(ifOp.elseBlock());
  add(plain());
}

void BackwardBuilder::accumulateDQ(Value head, Value q0, Value needsMask) {
  if (!em.hasMask())
    return atomicDQ(head, q0, mma->computeDQ());
  guardDQ(
      needsMask, [&] { return mma->computeDQ(); },
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
  for (int r = 0; r < 2; ++r) {
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, kvRow[r], seqlenK));
    Value rowOff = offset(tensor, batch, headIdx, kvRow[r]);
    for (int jd = 0; jd < dim / 8; ++jd) {
      Value x0 = acc[jd * 4 + 2 * r], x1 = acc[jd * 4 + 2 * r + 1];
      if (factor) {
        x0 = ops.fmul(x0, factor);
        x1 = ops.fmul(x1, factor);
      }
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      LLVM::StoreOp::create(b, ops.pack(x0, x1),
                            address(tensor, ops.add(rowOff, ops.ext64(col))),
                            /*alignment=*/4);
    }
  }
}

} // namespace

void buildFlashBackwardKernels(OpBuilder &builder, Location loc,
                               Operation *gpuModule, const KernelShape &config,
                               FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  BackwardBuilder(b, config, emitter).build(gpuModule);
}

} // namespace flashjit::nvvm
