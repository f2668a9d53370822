//===- MmaStrategy.h - The forward kernel's two matrix products -*- C++ -*-===//
//
// One interface over the instruction families that compute a key tile's
// S = Q K^T and O += P V: mma.sync m16n8k16 on ldmatrix fragments
// (MmaSync.cpp, sm_80 and up) and wgmma.mma_async on shared-memory
// descriptors (Wgmma.cpp, sm_90a). Both give every warp its rows of S in
// the mma.sync C-fragment layout (../shared/notes/MMA-FRAGMENTS.md: thread
// (g, t) of a warp holds rows g and g + 8, columns 2t and 2t + 1 of each n8
// tile), so the variant, the online softmax and the epilogue are written
// once. Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_MMASTRATEGY_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_MMASTRATEGY_H

#include "KernelOps.h"

#include <memory>
#include <string>

namespace flashjit::nvvm {

/// The per-warp shape of the forward kernel's products.
struct TileShape {
  int headDimQK = 0, headDimV = 0; ///< D, Dv
  int blockM = 0, blockN = 0;      ///< query rows per CTA, keys per tile
  int rowsPerWarp = 16;            ///< 16 or 32 (MT m16 tiles)
  int mTiles() const { return rowsPerWarp / 16; } ///< MT
  int sTiles() const { return blockN / 8; }       ///< n8 tiles of S
  int oTiles() const { return headDimV / 8; }     ///< n8 tiles of O
  int qkSteps() const { return headDimQK / 16; }  ///< k16 steps of Q K^T
  int pvSteps() const { return blockN / 16; }     ///< k16 steps of P V
};

/// Computes a warp's S = Q K^T and O += P V of one key tile. S has
/// MT * nS * 4 f32 per thread (s[(mt * nS + jn) * 4 + i]), O MT * nO * 4.
/// The forward kernel calls the hooks in the order they are declared.
class ForwardMma {
public:
  virtual ~ForwardMma() = default;
  /// True if shared tiles use the 128-byte swizzle (else padded rows).
  virtual bool swizzled() const = 0;
  /// After Q's loads are issued: per-lane addresses or descriptors of the
  /// Q tile at \p sQ and the first K / V stage at \p sK / \p sV.
  virtual void prepare(mlir::Value sQ, mlir::Value sK, mlir::Value sV) = 0;
  /// After the first barrier (Q is in shared memory).
  virtual void loadQ() {}
  /// Before the barrier that publishes a K/V stage to every warp.
  virtual void publishStage() {}
  /// The K/V stage of this tile starts \p stageOff bytes (i64) after the
  /// first.
  virtual void selectStage(mlir::Value stageOff) = 0;
  /// selectStage, and whether any element of the stage's V tile is NaN or
  /// Inf (i1, the same in every thread of the CTA: the masked-value vote,
  /// MaskedValues.h) where the products can tell it at no barrier of its
  /// own; null where they cannot (then selectStage alone: every kernel but
  /// the fp8 one).
  virtual mlir::Value selectStageVoting(mlir::Value stageOff) {
    selectStage(stageOff);
    return mlir::Value();
  }
  /// For products whose selectStageVoting votes: the guarded path of the
  /// masked-value isolation (MaskedValues.h) where \p poisoned (that vote,
  /// and the tile partial): \p o (the layout of accumulatePV's) plus the
  /// non-finite terms of P V over the keys with a nonzero weight, P as
  /// accumulatePV takes it (\p p in the layout of S), and the stage's V as
  /// the product reads it with its non-finite elements replaced by 0;
  /// elsewhere \p o. Every thread of the CTA must call it.
  virtual llvm::SmallVector<mlir::Value>
  isolateNonFiniteV(llvm::ArrayRef<mlir::Value> o,
                    llvm::ArrayRef<mlir::Value> p, mlir::Value poisoned,
                    mlir::Value lane) {
    (void)p, (void)poisoned, (void)lane;
    return llvm::SmallVector<mlir::Value>(o);
  }
  /// S = Q K^T of the selected stage.
  virtual llvm::SmallVector<mlir::Value> computeS() = 0;
  /// computeS with \p whileInFlight emitted while the product runs
  /// (wgmma: between its issue and its wait; else before it). It must not
  /// read or write S's registers.
  virtual llvm::SmallVector<mlir::Value>
  computeSWhile(llvm::function_ref<void()> whileInFlight) {
    whileInFlight();
    return computeS();
  }
  /// \p o + P V of the selected stage, \p p in the layout of S.
  virtual llvm::SmallVector<mlir::Value>
  accumulatePV(llvm::ArrayRef<mlir::Value> o,
               llvm::ArrayRef<mlir::Value> p) = 0;

  // The overlapped tile step (wgmma only: FlashForwardKernel's
  // overlapLoop): the products are issued as wgmma groups and waited for
  // with wgmmaWait (Wgmma.h); the results of an issue must not be read
  // before a wait that covers its group.

  /// S = Q K^T of the selected stage, issued and committed as one group.
  virtual llvm::SmallVector<mlir::Value> issueS();
  /// \p p (the layout of S, f32) as the 16-bit pairs P V takes (i32).
  virtual llvm::SmallVector<mlir::Value> packP(llvm::ArrayRef<mlir::Value> p);
  /// packP's inverse (exact: f32 holds every 16-bit value).
  virtual llvm::SmallVector<mlir::Value>
  unpackP(llvm::ArrayRef<mlir::Value> pPacked);
  /// \p o + P V of the K/V stage \p stageOff bytes (i64) after the first,
  /// \p pPacked from packP; issued and committed as one group (\p pPacked
  /// must stay live up to the wait: wgmmaWait's keep).
  virtual llvm::SmallVector<mlir::Value>
  issuePV(llvm::ArrayRef<mlir::Value> o, llvm::ArrayRef<mlir::Value> pPacked,
          mlir::Value stageOff);
};

/// mma.sync m16n8k16 with ldmatrix fragments from padded tiles; Q stays in
/// registers while D * MT <= 128.
std::unique_ptr<ForwardMma> createMmaSyncForward(KernelOps &ops,
                                                 const TileShape &shape,
                                                 mlir::Value warp,
                                                 mlir::Value lane);
/// wgmma.mma_async per warpgroup (4 warps, 64 query rows): S from Q and K
/// descriptors, O += P V with P in registers and V MN-major. With \p
/// narrowDescriptors, issueS and issuePV pass 32-bit descriptor words into
/// their asm (wgmmaIssueOffsets' narrowHi; the overlapped loop's registers).
std::unique_ptr<ForwardMma> createWgmmaForward(KernelOps &ops,
                                               const TileShape &shape,
                                               mlir::Value warp,
                                               bool narrowDescriptors = false);

/// The fp8 forward's products (WgmmaFp8.cpp; issue 18), wgmma m64nNk32 per
/// warpgroup: S = Q K^T from the K-major Q and K tiles (PTX type names
/// \p typeQ, \p typeK: "e4m3" or "e5m2"), O += P V with P packed to e4m3
/// in registers (times 256: the epilogue divides it out) and V read from
/// \p sVt, a head_dim_v x block_n K-major transpose of the stage's V that
/// selectStage writes (its \p nthreads threads, \p tid, then a CTA
/// barrier). The transpose orders each 16 keys as the accumulator holds
/// P (thread t of a quad: keys 2t, 2t + 1, 2t + 8, 2t + 9 as its 4
/// consecutive k), so P needs no shuffle.
std::unique_ptr<ForwardMma>
createWgmmaFp8Forward(KernelOps &ops, const TileShape &shape, mlir::Value warp,
                      mlir::Value tid, int nthreads, mlir::Value sVt,
                      const std::string &typeQ, const std::string &typeK,
                      const std::string &typeV);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_MMASTRATEGY_H
