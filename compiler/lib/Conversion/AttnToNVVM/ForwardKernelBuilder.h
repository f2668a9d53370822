//===- ForwardKernelBuilder.h - The GPU forward kernel's builder -*- C++
//-*-===//
//
// Internal to the AttnToNVVM conversion: the builder of the forward kernel
// (FlashForwardKernel.cpp). Its members are defined in two files:
// FlashForwardKernel.cpp (arguments, tile planning, the loop over key tiles,
// the tile step, the epilogue) and ForwardLoads.cpp (where Q, K and V live
// in shared memory and how they get there: cp.async, TMA, and the
// warp-specialised producer).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_FORWARDKERNELBUILDER_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_FORWARDKERNELBUILDER_H

#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

#include "KernelOps.h"
#include "MaskedValues.h"
#include "MmaStrategy.h"
#include "OnlineSoftmax.h"
#include "VariantTile.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace flashjit::nvvm::detail {

using namespace mlir;
namespace abi = flashjit::abi::gpu;

class ForwardKernelBuilder {
public:
  ForwardKernelBuilder(ImplicitLocOpBuilder &b, const KernelShape &c,
                       FragmentEmitter &em)
      : ops(b, c.bf16), b(b), c(c), em(em), nthreads(32 * c.numWarps) {
    sh.headDimQK = c.headDimQK;
    sh.headDimV = c.headDimV;
    sh.blockM = c.blockM();
    sh.blockN = c.blockN;
    sh.rowsPerWarp = c.rowsPerWarp;
  }

  void build(Operation *gpuModule);

private:
  gpu::GPUFuncOp declare(Operation *gpuModule);
  void bindArguments(gpu::GPUFuncOp fn);
  /// Indices of this CTA and thread, the sequence (varlen), tensor bases.
  void locate();
  /// Shared memory, the Q load, the MMA's addresses, the loop state.
  void prologue();
  /// [jBegin, jEnd]: the positions of the key tiles the loop visits.
  void planKeyTiles();
  /// The score modifier's row-only part for each of the thread's rows,
  /// before the key loop (a consumer's, where warp-specialised), for a
  /// kernel without a mask or block list (unless
  /// setForwardScoreRowFactorsForTesting(false)); variantScores then emits
  /// only the rest.
  void beginScoreRowFactors();
  /// Loads key tile \p j into K/V stage \p stage (cp.async, one group; tma:
  /// the caller is one thread, the stage's mbarrier completes the copy).
  void loadKV(Value j, Value stage);
  /// tma: the mbarrier of K/V stage \p stage (i32), or Q's (stage -1).
  Value barrier(Value stage) {
    return ops.gepBytes(
        bars, ops.mul(ops.ext64(ops.add(stage, ops.ci32(1))), ops.ci64(8)));
  }
  /// tma: thread 0 arms stage \p stage's mbarrier and loads key tile \p j
  /// into it, when tile position \p pos is at most jEnd.
  void issueKV(Value pos, Value stage);
  /// tma: waits for the stage of loop position \p pos (the useOf(pos) /
  /// stages-th use of that stage: parity its lowest bit).
  void waitKV(Value pos);
  /// The first K/V tile, then Q's fragments once Q has landed.
  void firstLoad();
  /// warpSpecialized: the producer warpgroup (setmaxnreg down; its first
  /// thread loads every K/V tile into the ring, each stage once the
  /// consumers have released it) and the consumer warps (setmaxnreg up;
  /// the loop and the epilogue) as the two branches of one scf.if.
  void buildWarpSpecialized();
  /// warpSpecialized: stage \p stage's "empty" mbarrier (numWarps * 32
  /// arrivals: every consumer thread once it has read the stage).
  Value emptyBarrier(Value stage) {
    return ops.gepBytes(barrier(stage), ops.ci64(8 * int64_t(stages)));
  }
  /// The loop over key tiles; returns the final state.
  ValueRange mainLoop();
  /// checksResults(): mainLoop (overlapSoftmax: overlapLoop) without
  /// isolation, then one vote of the computing threads on whether any O
  /// accumulator came out NaN or Inf (warp-specialised: published to the
  /// producer, publishDecision); only then the row block again from its
  /// first tile with the in-tile vote in the same loop (rerunning, the
  /// ring's uses continuing at useBase). Returns the final state.
  SmallVector<Value> checkedLoop();
  /// Warp-specialised checkedLoop: the consumers' first thread writes
  /// \p rerun (i1, the same in every consumer thread) to decisionWord and
  /// arrives at decisionBarrier.
  void publishDecision(Value rerun);
  /// Warp-specialised checkedLoop, the producer thread after its first
  /// pass of loads: waits for the consumers' decision; whether they rerun
  /// the row block (then it loads the tiles again).
  Value awaitDecision();
  /// The decision's mbarrier (one arrival, one phase per kernel) and its
  /// 32-bit word: the Published vote's mbarrier and word of stage 0, which
  /// a checking kernel never uses for votes.
  Value decisionBarrier() { return votedBarrier(ops.ci32(0)); }
  Value decisionWord() { return voteWord(ops.ci32(0)); }
  /// One non-empty key tile at \p kv0: the new loop state from \p state.
  /// \p voted: the tile's masked-value vote where it was taken before the
  /// tile (VotePlacement::TileEnd), else null.
  SmallVector<Value> tileStep(ValueRange state, Value kv0, Value needsMask,
                              Value voted = Value());
  /// overlapSoftmax: the consumers' loop over key tiles with
  /// FlashAttention-3's intra-warpgroup overlap (ForwardOverlap.cpp);
  /// returns the final state (O, m, l) as mainLoop's.
  SmallVector<Value> overlapLoop();
  /// overlapLoop's non-empty tile at \p kv0 in K/V stage \p stage: both
  /// versions, masked and not, under one scf.if on \p needsMask.
  /// \p prevStage: the previous position's stage (its P V is pending).
  SmallVector<Value> overlapTile(ValueRange state, Value kv0, Value needsMask,
                                 Value stage, Value prevStage, bool pending);
  /// One version of overlapTile: S of this tile, and (\p pending) the
  /// previous tile's P V in flight beside it.
  SmallVector<Value> overlapStep(ValueRange state, Value kv0, Value stage,
                                 Value prevStage, bool masked, bool pending);
  /// overlapLoop's state with its pending P V (if any; of K/V stage
  /// \p pendStage) completed and that stage released.
  SmallVector<Value> flushPV(ValueRange state, Value pendStage);
  /// pingPong: this consumer warpgroup's named barrier (turnSelf) and the
  /// other's (turnOther), and the first warpgroup's opening arrival on its
  /// own, so it takes the first turn (ForwardOverlap.cpp, "Ping-pong").
  void initTurns();
  /// pingPong: after the loop, the first warpgroup's closing sync on its
  /// own barrier (it takes the other's last arrival).
  void closeTurns();
  /// pingPong: waits for this warpgroup's turn to issue products.
  void awaitTurn();
  /// pingPong: hands the turn to the other warpgroup.
  void passTurn();
  /// O / l and LSE; rows with no allowed key give O = 0, LSE = -inf.
  void epilogue(ValueRange fin);
  /// Where the masked-value vote runs (MaskedValues.h, "Where the
  /// forward's vote runs"); None: no isolation code in this loop (no mask,
  /// turned off for testing, or the first pass of checkedLoop).
  /// Definitions: ForwardMaskedVotes.cpp.
  enum class VotePlacement { None, InTile, TileEnd, Published };
  VotePlacement votePlacement() const;
  /// Whether the kernel isolates masked keys by checking its result
  /// (checkedLoop): TMA without warp specialisation, head dims up to 64;
  /// warp-specialised kernels (16-bit).
  bool checksResults() const;
  /// Whether the fp8 kernel isolates masked keys: its V transpose votes
  /// (ForwardMma::selectStageVoting; votePlacement is None there) and its
  /// products take the guarded path (ForwardMma::isolateNonFiniteV).
  bool fp8Isolation() const;
  /// The ring use of loop position \p pos: pos - jBegin, plus useBase in
  /// checkedLoop's second pass (mainLoop and overlapLoop).
  Value useOf(Value pos) {
    Value use = ops.sub(pos, jBegin);
    return useBase ? ops.add(use, useBase) : use;
  }
  /// Masked keys are isolated (MaskedValues.h): where the tile is partial
  /// (\p needsMask), InTile: whether its V holds a NaN or Inf (the
  /// computing threads' vote, with a barrier); Published: this warp's scan
  /// and its share of the stage's published vote (returns null;
  /// awaitMaskedVote reads it). Called while S's product is in flight.
  Value voteMaskedValues(Value needsMask);
  /// Published: where \p needsMask, waits for the stage's vote and returns
  /// it; else false.
  Value awaitMaskedVote(Value needsMask);
  /// Published: this warp's arrival at the stage's vote in a skipped tile.
  void skipMaskedVote();
  /// TileEnd: the vote on the first tile (its own barrier, once per CTA).
  Value voteFirstTile();
  /// TileEnd: the closing CTA barrier of loop position \p it, which also
  /// returns the vote on the tile at it + 1 where that tile needs one
  /// (waits for it to land first); else false.
  Value voteAtTileEnd(Value it);
  /// Whether dense key tile \p j is non-empty and partial (mask code).
  Value maskedTile(Value j);
  /// Published: the leader's setup of the votes' mbarriers and words;
  /// warp-specialised checkedLoop: of the decision's mbarrier.
  void initMaskedVotes();
  /// Published: stage \p stage's "voted" mbarrier (numWarps arrivals: lane
  /// 0 of each consumer warp) and its 32-bit vote word.
  Value votedBarrier(Value stage) {
    return ops.gepBytes(barrier(stage), ops.ci64(16 * int64_t(stages)));
  }
  Value voteWord(Value stage) {
    return ops.gepBytes(bars, ops.add(ops.ci64(8 * (1 + 3 * int64_t(stages))),
                                      ops.mul(ops.ext64(stage), ops.ci64(4))));
  }
  /// \p o plus P V's non-finite terms, the stage's V rewritten, where
  /// \p poisoned (MaskedValues.h, isolateNonFiniteV); the plain product
  /// follows.
  SmallVector<Value> isolateMaskedValues(ArrayRef<Value> o, ArrayRef<Value> p,
                                         Value poisoned);
  /// The threads that compute (the votes' barrier group).
  VoteGroup computeGroup() const;
  /// Padded tiles (tensorV() below headDimV): stores the two packed 16-bit
  /// values \p v of O columns \p col, col + 1 (fragment column block \p jd)
  /// at \p p, only those below tensorV(); 2-byte stores where it is odd.
  void storePaddedO(Value v, Value p, Value col, int jd);

  /// (mayBeFalse, mayBeTrue) of key tile \p j for this CTA's query tile.
  std::pair<Value, Value> classify(Value j);
  /// The key tile at loop position \p it (block-sparse: from the lists).
  Value tileAt(Value it);
  /// tileAt(it) where it <= jEnd, else 0 (nothing read).
  Value tileAtIfAny(Value it) {
    return ops.guarded(ops.cmp(arith::CmpIPredicate::sle, it, jEnd), ops.i32,
                       ops.ci32(0), [&] { return tileAt(it); });
  }
  /// The 16-bit tensor at \p ptr with strides \p s: the address of head
  /// \p h of this sequence (first token \p start where varlen).
  Value tensorBase(Value ptr, Value *s, Value h, Value start) {
    Value off = ops.add(seqOff(s, start), ops.mul(ops.ext64(h), s[1]));
    return ops.gepBytes(ptr, ops.mul(off, ops.ci64(2)));
  }
  /// tensorBase of Q, K or V: one byte per element in fp8 kernels.
  Value inputBase(Value ptr, Value *s, Value h, Value start) {
    if (!c.fp8())
      return tensorBase(ptr, s, h, start);
    return ops.gepBytes(ptr,
                        ops.add(seqOff(s, start), ops.mul(ops.ext64(h), s[1])));
  }
  /// fp8: the descale arguments (runtime/Fp8Abi.h); scale and scaleLog2
  /// become scale * q_descale * k_descale (and its log2(e) multiple),
  /// vDescale / 256 multiplies O in the epilogue (WgmmaFp8.cpp's P).
  void loadDescales();
  /// fp8: the shared-memory layout and the products (WgmmaFp8.cpp).
  void planFp8Tiles(Value smem);
  /// Element offset of this sequence in a tensor with strides \p s: batch *
  /// s[0], or (varlen) its first token * s[2].
  Value seqOff(Value *s, Value start) {
    return c.varlen ? ops.mul(ops.ext64(start), s[2])
                    : ops.mul(ops.ext64(batch), s[0]);
  }

  KernelOps ops;
  ImplicitLocOpBuilder &b;
  const KernelShape &c;
  FragmentEmitter &em;
  const int nthreads;
  TileShape sh;
  std::unique_ptr<ForwardMma> mma;

  // Arguments.
  Value qPtr, kPtr, vPtr, oPtr, lsePtr;
  Value qS[3], kS[3], vS[3], oS[3], lS[3];
  Value seqlenQ, seqlenK, group, scale, scaleLog2, cuQ, cuK;
  Value lists[4], rowBatchStride, rowHeadStride, listPitch;
  Value sinkPtr; // f32 [heads_q], specs with a sink only
  // fp8: q/k/v descale pointers, their per-block flags, heads_kv; the
  // epilogue's factor v_descale / 256.
  Value descale[3], descaleBlock[3], headsKV, oFactor;
  // Indices and bases.
  Value tid, warp, lane, g, t, qTile, head, batch, q0, qStart, kStart;
  Value kBase, vBase, sK, sV;
  Value oBase;    // null where the epilogue computes it (overlapSoftmax)
  Value stageOff; // i64 bytes from the first K/V stage to this tile's
  // tma: this tile's use of the ring (useOf(position)) and its stage.
  Value tileUse, tileStage;
  // checkedLoop's second pass: the loop votes in the tile (rerunning) and
  // the ring's uses start at useBase (the first pass's count); else null.
  bool rerunning = false;
  Value useBase;
  int64_t stageBytes = 0;
  // tma: the tensor maps of Q, K, V, the mbarriers, the K/V head, stages.
  Value tmQ, tmK, tmV, bars, headKV, isLeader;
  int stages = 2;
  FragmentCoords at;
  Value qLast;
  // pingPong: the named barriers of this consumer warpgroup's turns and of
  // the other's.
  Value turnSelf, turnOther;
  // Loop state: O fragments (nAcc), m (2 MT rows), l (2 MT).
  SmallVector<Value> init;
  int nAcc = 0;
  Value numKv, jBegin, jEnd, numPartial, listRow, one;
};

/// Runs \p then in the then-block and \p otherwise in the else-block of
/// `scf.if cond` (no results).
void ifElse(ImplicitLocOpBuilder &b, Value cond,
            llvm::function_ref<void()> then,
            llvm::function_ref<void()> otherwise);

} // namespace flashjit::nvvm::detail

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_FORWARDKERNELBUILDER_H
