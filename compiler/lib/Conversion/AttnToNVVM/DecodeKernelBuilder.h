//===- DecodeKernelBuilder.h - The split-KV decode kernel builder -*- C++
//-*-===//
//
// Private to AttnToNVVM: the class that emits `<name>_decode`
// (FlashDecodeKernel.cpp: arguments, work location, key tiles and the main
// loop; DecodeEpilogue.cpp: the final O and LSE of one split, the partial
// rows of several and the fused last-CTA merge).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_DECODEKERNELBUILDER_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_DECODEKERNELBUILDER_H

#include "flashjit/Conversion/AttnToNVVM/FlashDecodeKernel.h"

#include "DecodeMerge.h"
#include "KernelOps.h"
#include "MmaStrategy.h"
#include "OnlineSoftmax.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <memory>
#include <utility>

namespace flashjit::nvvm::detail {

using namespace mlir;

/// scf.if with both branches, filled by \p then and \p otherwise.
inline void ifElse(ImplicitLocOpBuilder &b, Value cond,
                   llvm::function_ref<void()> then,
                   llvm::function_ref<void()> otherwise) {
  auto ifOp = scf::IfOp::create(b, cond, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  then();
  b.setInsertionPointToStart(ifOp.elseBlock());
  otherwise();
}

class DecodeKernelBuilder {
public:
  DecodeKernelBuilder(ImplicitLocOpBuilder &b, const KernelShape &c,
                      FragmentEmitter &em)
      : ops(b, c.bf16), b(b), c(c), em(em), nthreads(32 * c.numWarps) {
    sh.headDimQK = c.headDimQK;
    sh.headDimV = c.headDimV;
    sh.blockM = c.blockM();
    sh.blockN = c.blockN;
    sh.rowsPerWarp = 16;
  }

  void build(Operation *gpuModule);

private:
  /// K/V stages (KernelConfig::decodeStages; 0 reads as 2).
  int stages() const { return c.decodeStages == 3 ? 3 : 2; }
  void bindArguments(gpu::GPUFuncOp fn);
  void locate();
  void planKeyTiles();
  SmallVector<Value> pageIdsOf(Value j, int dim);
  /// Appends the page ids of tile \p j's K rows (then V's, where the head
  /// dims differ) to the loop's state (init) and records their counts.
  void carryPageIdsOf(Value j);
  void loadKV(Value j, Value stage, ValueRange kIds, ValueRange vIds);
  std::pair<Value, Value> classify(Value j);
  /// (may be false, may be true) of the mask over the CTA's rows and keys
  /// [kvLo, kvHi].
  std::pair<Value, Value> classifyKeys(Value kvLo, Value kvHi);
  /// The longest run of n <= \p limit key tiles (keys keysOf(n)) the
  /// classifier proves empty, by \p steps halvings.
  Value
  longestEmptyRun(Value limit, Value steps,
                  llvm::function_ref<std::pair<Value, Value>(Value)> keysOf);
  /// The key tiles [first, end) that may hold a key the CTA's rows see
  /// (frontend DecodeSplits.h, visibleKeyTiles).
  std::pair<Value, Value> visibleTiles();
  /// Two stages: tile jBegin in flight, the page ids of jBegin + 1 in the
  /// loop's state, Q's fragments loaded.
  void prologueTwo();
  /// Three stages (DecodeStages.cpp): tiles jBegin and jBegin + 1 in
  /// flight (a cp.async group each, empty past jEnd), the page ids of
  /// jBegin + 2 in the loop's state, Q's fragments loaded from the third
  /// stage.
  void prologueThree();
  ValueRange mainLoop();
  /// The three-stage loop (DecodeStages.cpp): one CTA barrier per tile.
  ValueRange mainLoopThree();
  /// Tile j from stage \p stage: the masked-value vote, the products and
  /// the online softmax of the warps with rows; the new state.
  SmallVector<Value> visitTile(Value j, Value stage, ValueRange state);
  SmallVector<Value> tileStep(ValueRange state, Value kv0, Value needsMask,
                              Value poisoned);
  void epilogue(ValueRange fin);
  /// One split: the merge of the CTA's own state, written as O and LSE.
  void storeFinal(ValueRange fin, ArrayRef<SoftmaxFinal> f,
                  ArrayRef<Value> lse);
  /// Several splits: the partial rows (split, batch, head, query).
  void storePartials(ValueRange fin, ArrayRef<SoftmaxFinal> f,
                     ArrayRef<Value> lse, Value rowsTotal);
  SplitMerge splitMerge(Value rowsTotal);
  /// Masked keys are isolated (MaskedValues.h): where the tile is visited
  /// and partial, whether its V holds a NaN or Inf (the CTA's vote; slots
  /// past the sequence's length load as 0); null without a mask.
  Value voteMaskedValues(Value visited, Value needsMask);

  KernelOps ops;
  ImplicitLocOpBuilder &b;
  const KernelShape &c;
  FragmentEmitter &em;
  const int nthreads;
  TileShape sh;
  std::unique_ptr<ForwardMma> mma;

  Value qPtr, kPtr, vPtr, oPart, lsePart, pages, pageStartPtr, seqLensPtr;
  Value counters;
  Value qS[3], kS[3], vS[3];
  DecodeOutputs out;
  Value qLen, group, pageShift, numSplits, rowTiles, batchCount, headsQ;
  Value scale, scaleLog2;
  Value tid, warp, lane, g, t, split, rowTile, headKV, batch;
  Value seqLen, pageStart, rows, r0, rLast, warpActive;
  Value sK, sV, stageOff;
  int64_t stageBytes = 0;
  PackedRowCoords at;
  SmallVector<Value, 2> rowIdx; // packed row of the thread's rows g, g + 8
  SmallVector<Value> init;
  int nAcc = 0;
  // Page ids carried through the main loop: those of the next tile's K (and,
  // with head_dim_v != head_dim_qk, V) rows.
  int nKIds = 0, nVIds = 0;
  Value numKv, jBegin, jEnd, one;
};

} // namespace flashjit::nvvm::detail

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_DECODEKERNELBUILDER_H
