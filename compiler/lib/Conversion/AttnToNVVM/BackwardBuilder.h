//===- BackwardBuilder.h - The GPU backward's main kernel -------*- C++ -*-===//
//
// BackwardBuilder builds `_bwd`, the main backward kernel
// (FlashBackwardKernel.cpp has the algorithm). Its methods are split by
// concern: the kernel, its loops over query heads and tiles and the tile
// classifier (FlashBackwardKernel.cpp); one query tile's step, synchronous or
// pipelined (BackwardTileStep.cpp); dQ's accumulation, the deterministic mode's
// turns, masked-value votes and the dK/dV stores (BackwardDQ.cpp). Private to
// this directory.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDBUILDER_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDBUILDER_H

#include "BackwardDataGrads.h"
#include "BackwardKernelBase.h"
#include "BackwardMma.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <memory>
#include <optional>
#include <utility>

namespace flashjit::nvvm {
struct KeyRowCoords; // VariantTile.h
} // namespace flashjit::nvvm

namespace flashjit::nvvm::detail {

using namespace mlir;
namespace abi = flashjit::abi::gpu;

/// The first \p n results of \p op.
inline SmallVector<Value> firstResults(scf::ForOp op, int n) {
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
  /// is dK, dV and the data gradients' running sums (then, with the ring,
  /// the stage and "prefetched", as asyncTileStep's). \p boundsOnly
  /// (block-sparse; i1): a listed full tile at a sequence end, whose
  /// out-of-range elements are masked without the mask code. With the
  /// ring (prefetchListed), the tile at \p nextQ0 is loaded into the other
  /// stage where \p nextVisited holds, as asyncTileStep does.
  SmallVector<Value> tileStep(ValueRange state, Value head, Value q0,
                              Value qLast, Value needsMask,
                              Value boundsOnly = Value(),
                              Value nextVisited = Value(),
                              Value nextQ0 = Value());
  /// tileStep with asynchronous products (wgmma): \p state ends with the
  /// query-tile stage (i32, 0 / 1) and whether this tile's Q, dO, LSE and
  /// D were prefetched into it (i1); \p nextVisited (i1): the next query
  /// tile, at \p nextQ0 (null: q0 + blockN), is visited too, so its loads
  /// are issued into the other stage during this tile's products. Returns
  /// the state for the next tile.
  SmallVector<Value> asyncTileStep(ValueRange state, Value head, Value q0,
                                   Value qLast, Value needsMask,
                                   Value boundsOnly, Value nextVisited,
                                   Value nextQ0 = Value());
  /// The ring's start of a tile (\p state as asyncTileStep's): this
  /// tile's Q, dO, LSE and D loaded into its stage unless prefetched,
  /// waited for and published (CTA barrier); then the tile at \p nextQ0
  /// (null: q0 + blockN) issued into the other stage where \p nextVisited
  /// holds (prefetchNext; with loadsAfterProducts the caller issues it
  /// after the products), and the products, sLseCur and sDeltaCur set to this
  /// stage.
  /// Returns the other stage (i32).
  Value enterStage(ValueRange state, Value head, Value q0, Value nextVisited,
                   Value nextQ0);
  /// Issues (and commits) the tile at \p nextQ0 (null: q0 + blockN) into
  /// stage \p other where \p nextVisited holds (enterStage's prefetch).
  void prefetchNext(Value head, Value q0, Value nextVisited, Value nextQ0,
                    Value other);
  /// The state a skipped tile passes on (ring: nothing prefetched).
  SmallVector<Value> skippedState(ValueRange state);
  /// Runs tileStep or asyncTileStep.
  SmallVector<Value> visit(ValueRange state, Value head, Value q0, Value qLast,
                           Value needsMask, Value boundsOnly, Value nextVisited,
                           Value nextQ0 = Value()) {
    if (pipelined)
      return asyncTileStep(state, head, q0, qLast, needsMask, boundsOnly,
                           nextVisited, nextQ0);
    return tileStep(state, head, q0, qLast, needsMask, boundsOnly,
                    ring ? nextVisited : Value(), nextQ0);
  }
  /// Where \p boundsOnly holds: -inf for the elements of \p scores (S^T
  /// fragments; first query column \p qLane) past seqlen_q or seqlen_k.
  void maskPastEnds(MutableArrayRef<Value> scores, Value qLane,
                    Value boundsOnly);
  /// block-sparse: the class of \p at's key rows from the visited tile's
  /// key-group word (keyGroups; KernelAbi.h's rule); nothing elsewhere.
  void applyKeyGroups(KeyRowCoords &at);
  /// (mayBeFalse, mayBeTrue) of the key tile at \p kFirst for the query
  /// tile [q0, qLast] of query head \p head: the tile is visited where
  /// mayBeTrue holds.
  std::pair<Value, Value> classify(Value head, Value q0, Value qLast,
                                   Value kFirst);
  /// tileRange: the first and last query tile (i32; INT32_MAX and -1 if
  /// none) of the \p numQ tiles of query head \p head that classify does
  /// not find empty for this CTA's keys; each lane classifies every 32nd
  /// tile, redux.sync combines them (no barrier, no shared memory).
  std::pair<Value, Value> visitedRange(Value head, Value numQ);
  /// Deterministic mode: waits (whole CTA) until every key tile above this
  /// CTA's that visits query tile [q0, qLast] of \p head has added to its
  /// dQaccum.
  void waitTurn(Value head, Value q0, Value qLast);
  /// Deterministic mode: thread 0 increments the query tile's counter once
  /// the CTA's dQ adds are done (after a barrier).
  void releaseTurn(Value head, Value q0);
  /// accumulateDQ, in key-tile order in the deterministic mode (waitTurn,
  /// releaseTurn); then Q, dO, dS^T, LSE and D are free for the next tile.
  void addDQ(Value head, Value q0, Value qLast, Value needsMask, Value kVote);
  /// dQaccum += dS K for the tile at \p q0 (dS^T in shared memory); with
  /// a mask, where the tile is partial (\p needsMask) and K holds a NaN or
  /// Inf (\p kVote, publishDS's answer, or kFlag), the guarded product
  /// (MaskedValues.h, dqSkipZero).
  void accumulateDQ(Value head, Value q0, Value needsMask, Value kVote);
  /// mma.sync kernels (padded tiles) with a mask: sets kFlag once per CTA,
  /// as soon as the K tile has landed (V still in flight): the CTA votes
  /// on whether it holds a NaN or Inf. K stays in shared memory for the
  /// whole kernel, so the answer holds for every query tile, and the tile
  /// loop keeps no vote of its own (its registers: the block-sparse D = 128
  /// mma.sync kernel spilled with a vote per tile).
  void voteOnK();
  /// Publishes the tile's dS^T to dQ's product: fence and the CTA barrier.
  /// Swizzled kernels that isolate masked keys (not checkResults) make it,
  /// in a partial tile
  /// (\p needsMask), the CTA's OR vote on whether the K tile holds a NaN or
  /// Inf and return the answer (i1; false in full tiles); else a null
  /// Value. No vote, wait or barrier of its own, and no register across
  /// the tile loop: the prologue's K vote had delayed each CTA's first
  /// query-tile loads by a round trip and a barrier.
  Value publishDS(Value needsMask);
  /// With a mask: \p add (dQaccum += ...) of, where \p needsMask (a partial
  /// tile) and K is poisoned (\p kVote from publishDS, or kFlag; with
  /// checkResults: this thread's dQ has a NaN or Inf), dQ = dS K
  /// term by term from shared memory (dqSkipZero), else \p plain()'s
  /// product.
  void guardDQ(Value needsMask, Value kVote,
               llvm::function_ref<SmallVector<Value>()> plain,
               llvm::function_ref<void(ArrayRef<Value>)> add);
  /// dS^T, exactly 0 where \p p is, in a tile that evaluates the mask
  /// (\p needsMask); elsewhere \p ds itself (masked keys are isolated,
  /// MaskedValues.h: dP^T is NaN for every query of a key whose V holds a
  /// NaN or Inf, D for every row that attends one, and a score modifier's
  /// derivative of a NaN score is NaN; a tile without masked pairs needs
  /// nothing: each of its rows attends each of its keys). mma.sync
  /// kernels: in every tile (registers).
  SmallVector<Value> zeroWhereUnweighted(ArrayRef<Value> p, ArrayRef<Value> ds,
                                         Value needsMask);
  /// \p ds with every element 0 where \p p is 0 (one select each).
  SmallVector<Value> zeroedWhereUnweighted(ArrayRef<Value> p,
                                           ArrayRef<Value> ds);
  /// checkResults: \p dsPacked (packA(\p ds)) where this thread's packed
  /// dS^T has no NaN or Inf or the tile evaluates no mask (\p needsMask
  /// false); else packA of \p ds zeroed where \p p is 0 (a cold branch of
  /// this thread only). The same products as zeroWhereUnweighted's
  /// (MaskedValues.h, "Backward").
  SmallVector<Value> checkedDS(ArrayRef<Value> p, ArrayRef<Value> ds,
                               ArrayRef<Value> dsPacked, Value needsMask);
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
  /// The score score_grad reads for element \p e of this thread's S^T
  /// fragments, built where it is called (inside the element's dS' != 0
  /// branch): scale * q.k from \p s, or, where the region reads the
  /// modified score (FragmentEmitter::scoreGradOfOutput), s' = (log2 P +
  /// LSE log2 e) ln 2 from \p p and the row's LSE, so \p s can die at P.
  /// Finite there: dS' != 0 needs P != 0.
  std::function<Value(int)> scoreGradInput(ArrayRef<Value> s,
                                           ArrayRef<Value> p);
  /// This thread's query column \p jn * 8 + 2 t + \p cc (byte offset in
  /// the fp32 LSE / D rows).
  Value columnOffset(int jn, int cc) {
    Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jn * 8 + cc));
    return ops.mul(qCol0 ? ops.add(col, qCol0) : col, ops.ci32(4));
  }
  /// This thread's first query column of the tile at \p q0.
  Value queryLane(Value q0) {
    Value lane0 = ops.add(q0, ops.mul(t, ops.ci32(2)));
    return qCol0 ? ops.add(lane0, qCol0) : lane0;
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
  /// shape.splitDim: the first query column of this warp's S^T (32 per
  /// warpgroup); else null (column 0).
  Value qCol0;
  /// i1: the semaphores argument is not null (deterministic mode).
  Value deterministic;
  Value sK, sQ, sDO, sDS, sLse, sDelta;
  /// mma.sync kernels with a mask: whether this CTA's K tile holds a NaN
  /// or Inf (voteOnK), the i32 at kFlag (shared memory, non-zero:
  /// poisoned). Null in swizzled kernels (publishDS votes per tile).
  Value kFlag;
  /// Masked keys are isolated (MaskedValues.h): the spec has a mask and the
  /// testing hook (MaskedValueTesting.h) has not turned isolation off.
  bool isolate = false;
  /// isolate in the pipelined step at head dims up to 64 without
  /// score_grad code: each thread checks its own dS^T and dQ for a NaN or
  /// Inf (checkedDS; asyncTileStep's dQ) instead of zeroing dS' in every
  /// partial tile and the CTA's vote on K at its dS^T barrier (kept for
  /// timing: setMaskedValueBackwardTileVoteForTesting).
  bool checkResults = false;
  /// The current tile's LSE and D rows (stage of the ring); lseRaw: LSE is
  /// stored in natural-log units (scaled by log2 e when read).
  Value sLseCur, sDeltaCur;
  bool lseRaw = false;
  /// Bytes between the stages of the Q / dO ring (asyncProducts).
  int64_t qStageBytes = 0;
  /// asyncTileStep (wgmma), except with mask or score-modifier code at head
  /// dims above 64 where KernelConfig::syncBackward asks for the
  /// synchronous tileStep (compileGpuArtifacts' fallback: bottom-right and
  /// varlen windows, varlen bottom-right causal and document masks spill
  /// 4-16 bytes pipelined in ptxas 13 at D = 128; 2026-12-06), and always
  /// with a score modifier that reads buffers or has data gradients (ALiBi,
  /// a bias table: 8-36 bytes), in the split kernel (head dim 256) and in
  /// block-sparse kernels (neither measured pipelined with masks). Both
  /// steps isolate masked keys (dS' zeroed where P is, the guarded dQ:
  /// MaskedValues.h).
  bool pipelined = false;
  /// block-sparse wgmma kernels (not the split one): the listed-tile loop
  /// issues the next listed tile's Q, dO, LSE and D into the other stage
  /// of the ring during the current tile, in either step
  /// (setListedPrefetchBackwardForTesting can turn it off: then listed
  /// tiles are loaded when visited, session 16's kernels).
  bool prefetchListed = false;
  /// The dense (not block-sparse) tile loop runs from the first to the
  /// last query tile the classifier does not find empty (visitedRange):
  /// masked wgmma kernels up to head dim 64, unless
  /// setTileRangeBackwardForTesting turned it off (then every query tile
  /// is stepped through, the kernels before session 20).
  bool tileRange = false;
  /// asyncTileStep issues dV += P^T dO before the dS^T stores: pipelined
  /// kernels above head dim 64, unless setProductsFirstBackwardForTesting
  /// turned it off (then the stores come first, the kernels before
  /// session 21).
  bool dvBeforeStores = false;
  /// asyncTileStep issues S^T and dP^T before the next tile's loads
  /// (prefetchNext): dvBeforeStores kernels without mask or score-modifier
  /// code (with them, ptxas 13 spilled 4-28 bytes in the matrix's
  /// softcap-window and first-key kernels at D = 128); with them too where
  /// setMaskedLoadsAfterProductsBackwardForTesting turned it on.
  bool loadsAfterProducts = false;
  /// The loops carry the query-tile ring's stage and "prefetched"
  /// (pipelined or prefetchListed).
  bool ring = false;
  /// block-sparse: the visited partial tile's key-group word (i32, 0 for
  /// full tiles; KernelAbi.h), set by listedTileLoop; null elsewhere.
  Value keyGroups;
  /// asyncTileStep issues dP^T = V dO^T only once P^T is made, not beside
  /// S^T: a pipelined mask that reads buffers at head dims above 64 (a
  /// document mask at D = 128 spilled 8 bytes of stack with both products
  /// in flight, none so).
  bool dpAfterP = false;
};

} // namespace flashjit::nvvm::detail

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDBUILDER_H
