//===- FlashBackwardKernel.cpp - FlashAttention-2 GPU backward kernels ----===//
//
// Pre: a gpu.module. Post: it holds the three backward kernels of
// FlashBackwardKernel.h, built from nvvm, llvm, arith and scf ops.
//
// The algorithm is FlashAttention-2's backward pass (Dao 2023, Algorithm
// 2); its five products come from a BackwardMma (BackwardMma.h: mma.sync
// with 4 warps of 16 keys, or on sm_90a wgmma with two warpgroups of 64
// keys and 64-row query tiles in 128-byte-swizzled shared tiles, which the
// padded layout's sharedBytes covers):
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

#include <limits>
#include <optional>

using namespace mlir;

namespace flashjit::nvvm {

namespace abi = flashjit::abi::gpu;

namespace {

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
  /// dS^T, exactly 0 where \p p is (masked keys are isolated,
  /// MaskedValues.h: dP^T is NaN for every query of a key whose V holds a
  /// NaN or Inf, and a score modifier's derivative of a NaN score is NaN).
  SmallVector<Value> zeroWhereUnweighted(ArrayRef<Value> p, ArrayRef<Value> ds);
  void storeRows(int tensor, Value headIdx, ArrayRef<Value> acc, int dim,
                 Value factor);

  /// Q and dO of the tile at \p q0 (cp.async), LSE (log2 units) and D of
  /// its rows into shared memory; waited for and published to the products.
  void loadQueryTile(Value head, Value q0);
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

  // [K | V | Q | dO | dS^T | LSE | D]
  sK = ops.sharedBase();
  Value sV = ops.gepBytes(sK, int64_t(2) * BM * (D + P));
  sQ = ops.gepBytes(sV, int64_t(2) * BM * (Dv + P));
  sDO = ops.gepBytes(sQ, int64_t(2) * BN * (D + P));
  sDS = ops.gepBytes(sDO, int64_t(2) * BN * (Dv + P));
  sLse = ops.gepBytes(sDS, int64_t(2) * BM * (BN + P));
  sDelta = ops.gepBytes(sLse, int64_t(4) * BN);

  // K and V of this CTA's keys: loaded once.
  const int nthreads = 32 * W;
  Value zero32 = ops.ci32(0);
  auto tensorBase = [&](int tn, Value h) {
    return address(tn, offset(tn, batch, h, zero32));
  };
  loadTileAsync(ops, tid, nthreads, sK, tensorBase(TK, headKV), st[TK][2], k0,
                seqlenK, BM, D, swz);
  loadTileAsync(ops, tid, nthreads, sV, tensorBase(TV, headKV), st[TV][2], k0,
                seqlenK, BM, Dv, swz);
  NVVM::CpAsyncCommitGroupOp::create(b);
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
  Value zeroIdx = arith::ConstantIndexOp::create(b, 0);
  Value one = arith::ConstantIndexOp::create(b, 1);

  // Query heads of this kv head's group, then query tiles.
  auto heads = scf::ForOp::create(b, zeroIdx, ops.toIndex(group), one, init);
  OpBuilder::InsertionGuard hg(b);
  b.setInsertionPointToStart(heads.getBody());
  Value head =
      ops.add(ops.mul(headKV, group),
              arith::IndexCastOp::create(b, ops.i32, heads.getInductionVar()));
  // dK, dV and the data gradients' running sums (per query head).
  SmallVector<Value> carried(heads.getRegionIterArgs());
  if (grads->active())
    carried.append(grads->initState());
  if (c.blockSparse) {
    SmallVector<Value> res = listedTileLoop(head, carried, kPastEnd);
    if (grads->active())
      grads->flush(ArrayRef<Value>(res).drop_front(nK + nV), lane);
    scf::YieldOp::create(b, ArrayRef<Value>(res).take_front(nK + nV));
    return SmallVector<Value>(heads.getResults());
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
    ValueRange state = tiles.getRegionIterArgs();
    auto tileIf = scf::IfOp::create(b, TypeRange(state), mayBeTrue,
                                    /*withElse=*/true);
    {
      OpBuilder::InsertionGuard ig(b);
      b.setInsertionPointToStart(tileIf.elseBlock()); // empty: skipped
      scf::YieldOp::create(b, state);
      b.setInsertionPointToStart(tileIf.thenBlock());
      scf::YieldOp::create(b, tileStep(state, head, q0, qLast, needsMask));
    }
    scf::YieldOp::create(b, tileIf.getResults());
  }
  SmallVector<Value> res(tiles.getResults());
  if (grads->active())
    grads->flush(ArrayRef<Value>(res).drop_front(nK + nV), lane);
  scf::YieldOp::create(b, ArrayRef<Value>(res).take_front(nK + nV));
  return SmallVector<Value>(heads.getResults());
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
    scf::YieldOp::create(b, state);
    b.setInsertionPointToStart(tileIf.thenBlock());
    scf::YieldOp::create(
        b, tileStep(state, head, q0, qLast, needsMask, boundsOnly));
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
      colLse.push_back(loadShared(ops.f32, sLse, columnOffset(jn, cc)));
      if (colDelta)
        colDelta->push_back(loadShared(ops.f32, sDelta, columnOffset(jn, cc)));
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
      d.push_back(loadShared(ops.f32, sDelta, columnOffset(jn, cc)));
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
  // Masked keys are isolated: dS' and dS exactly 0 where P is (before the
  // data gradients read dS', after the modifier's derivative).
  if (em.hasMask() && grads->active())
    ds = zeroWhereUnweighted(p, ds);
  if (grads->active())
    ds = grads->scoreGrad(ds, s, scale, batch, head, seqlenQ, seqlenK,
                          {kvRow[0], kvRow[1]}, coords.qLane, nS, gradState);
  if (em.hasMask())
    ds = zeroWhereUnweighted(p, ds);
  // dK += dS^T Q (scaled at the end).
  dk = mma->accumulateDK(dk, ds);
  // dS^T into shared memory, then dQaccum += dS K.
  mma->storeDS(ds);
  mma->publish();
  gpu::BarrierOp::create(b);
  addDQ(head, q0, qLast, needsMask);
  return llvm::to_vector(llvm::concat<Value>(dk, dv, gradState));
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

void BackwardBuilder::accumulateDQ(Value head, Value q0, Value needsMask) {
  const int D = c.headDimQK, rowGroups = shape.rowGroups();
  const int dqCols = shape.dqCols(), nQ = dqCols / 8;
  SmallVector<Value> dq;
  if (!em.hasMask()) {
    dq = mma->computeDQ();
  } else {
    // Only a partial tile has masked pairs; there the CTA votes on whether
    // K holds a NaN or Inf (almost never: then the product as without a
    // mask).
    Value poisoned =
        tileHasNonFiniteIf(ops, needsMask, VoteGroup{tid, 32 * c.numWarps, 0},
                           sK, c.blockM(), D, mma->swizzled());
    SmallVector<Type> types(nQ * 4, ops.f32);
    auto ifOp = scf::IfOp::create(b, types, poisoned, /*withElse=*/true);
    OpBuilder::InsertionGuard ig(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(
        b, dqSkipZero(ops, shape, warp, lane, sDS, sK, mma->swizzled()));
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, mma->computeDQ());
    b.setInsertionPointAfter(ifOp);
    dq.assign(ifOp.getResults().begin(), ifOp.getResults().end());
  }
  Value rg = arith::RemUIOp::create(b, warp, ops.ci32(rowGroups));
  Value cg = arith::DivUIOp::create(b, warp, ops.ci32(rowGroups));
  for (int r = 0; r < 2; ++r) {
    Value row = ops.add(ops.add(q0, ops.add(ops.mul(rg, ops.ci32(16)), g)),
                        ops.ci32(8 * r));
    ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ), [&] {
      Value base = ops.mul(workRow(headsQ, head, row), ops.ci64(D));
      for (int jd = 0; jd < nQ; ++jd)
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
