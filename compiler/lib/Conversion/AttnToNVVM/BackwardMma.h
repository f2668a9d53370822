//===- BackwardMma.h - The GPU backward kernel's matrix products -*- C++
//-*-===//
//
// One interface over the instruction families that compute the backward
// main kernel's five products of a query tile (FlashBackwardKernel.cpp):
// S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q and dQ = dS K.
// mma.sync m16n8k16 on ldmatrix fragments of padded tiles
// (BackwardMmaSync.cpp, sm_80 and up) and wgmma.mma_async on descriptors of
// 128-byte-swizzled tiles (BackwardWgmma.cpp, sm_90a, two warpgroups). Both
// give warp w the keys 16 w .. 16 w + 15 of S^T, dP^T, dK and dV in the
// mma.sync C-fragment layout (../shared/notes/MMA-FRAGMENTS.md) and dQ in
// the layout accumulateDQ maps (rows 16 (w % rowGroups).., columns
// dqCols (w / rowGroups)..), so the variant code, P and dS and the dQ
// atomics are written once. Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDMMA_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDMMA_H

#include "KernelOps.h"

#include <memory>

namespace flashjit::nvvm {

/// The shapes of the backward main kernel's products.
struct BackwardTileShape {
  int headDimQK = 0, headDimV = 0; ///< D, Dv
  int blockM = 0;                  ///< keys per CTA (16 per warp)
  int blockN = 0;                  ///< query rows per tile
  int numWarps = 0;
  /// The split-head-dim wgmma kernel (createWgmmaSplitBackward): the two
  /// warpgroups share the CTA's 64 keys, each holding S^T and dP^T of half
  /// the query rows (32 w / 4..) and dK, dV of half the head dims.
  bool splitDim = false;
  /// n8 tiles of S^T per warp.
  int sTiles() const { return blockN / 8 / (splitDim ? 2 : 1); }
  /// f32 accumulators per thread of a warp's dK or dV of \p dim columns.
  int accRegs(int dim) const { return dim / (splitDim ? 2 : 1) / 8 * 4; }
  /// Warps along dQ's query rows (16 each) and along its columns.
  int rowGroups() const { return blockN / 16; }
  int colGroups() const { return numWarps / rowGroups(); }
  int dqCols() const { return headDimQK / colGroups(); } ///< per warp
};

/// The backward kernel's products of one query tile. Fragments per thread:
/// S^T and dP^T sTiles() * 4 f32 (x[jn * 4 + i]), dK accRegs(D), dV
/// accRegs(Dv), dQ dqCols() / 2. The kernel calls prepare once, then per tile:
/// publish before the barrier after Q / dO arrived, computeS, accumulateDV,
/// computeDP, accumulateDK, storeDS, publish before the next barrier,
/// computeDQ.
class BackwardMma {
public:
  virtual ~BackwardMma() = default;
  /// True if shared tiles use the 128-byte swizzle (else padded rows).
  virtual bool swizzled() const = 0;
  /// Per-lane addresses or descriptors of the shared tiles: K and V
  /// [blockM x D / Dv], Q and dO [blockN x D / Dv], dS^T [blockM x blockN].
  virtual void prepare(mlir::Value sK, mlir::Value sV, mlir::Value sQ,
                       mlir::Value sDO, mlir::Value sDS) = 0;
  /// Before a barrier that publishes shared-memory writes to the products.
  virtual void publish() {}
  /// S^T = K Q^T (this warp's 16 keys x blockN queries).
  virtual llvm::SmallVector<mlir::Value> computeS() = 0;
  /// dP^T = V dO^T.
  virtual llvm::SmallVector<mlir::Value> computeDP() = 0;
  /// \p dv + P^T dO (\p p in the layout of S^T).
  virtual llvm::SmallVector<mlir::Value>
  accumulateDV(llvm::ArrayRef<mlir::Value> dv,
               llvm::ArrayRef<mlir::Value> p) = 0;
  /// \p dk + dS^T Q (\p ds in the layout of S^T).
  virtual llvm::SmallVector<mlir::Value>
  accumulateDK(llvm::ArrayRef<mlir::Value> dk,
               llvm::ArrayRef<mlir::Value> ds) = 0;
  /// Writes this warp's dS^T (16-bit) into the shared dS^T tile.
  virtual void storeDS(llvm::ArrayRef<mlir::Value> ds) = 0;
  /// This warp's part of dQ = dS K (the dS^T tile complete in shared
  /// memory).
  virtual llvm::SmallVector<mlir::Value> computeDQ() = 0;

  // Asynchronous products (wgmma only; BackwardTileStep.cpp's pipelined
  // tile step). Each issue* call issues and commits one group and returns
  // accumulators that are read only after a wait covering the group.

  /// True if the issue* / wait interface below is implemented.
  virtual bool asyncProducts() const { return false; }
  /// The Q / dO tiles of the next products start \p stageBytes (i64)
  /// after the sQ / sDO of prepare (a shared-memory ring of query tiles).
  virtual void selectStage(mlir::Value stageBytes);
  /// S^T = K Q^T, issued.
  virtual llvm::SmallVector<mlir::Value> issueS();
  /// dP^T = V dO^T, issued.
  virtual llvm::SmallVector<mlir::Value> issueDP();
  /// The A-operand registers (packed 16-bit pairs) of \p x in the layout
  /// of S^T, for issueDV / issueDK.
  virtual llvm::SmallVector<mlir::Value> packA(llvm::ArrayRef<mlir::Value> x);
  /// \p dv + P^T dO with \p pPacked = packA(P^T), issued.
  virtual llvm::SmallVector<mlir::Value>
  issueDV(llvm::ArrayRef<mlir::Value> dv, llvm::ArrayRef<mlir::Value> pPacked);
  /// \p dk + dS^T Q with \p dsPacked = packA(dS^T), issued.
  virtual llvm::SmallVector<mlir::Value>
  issueDK(llvm::ArrayRef<mlir::Value> dk, llvm::ArrayRef<mlir::Value> dsPacked);
  /// storeDS of \p dsPacked = packA(dS^T) (the same words the products
  /// take).
  virtual void storeDSPacked(llvm::ArrayRef<mlir::Value> dsPacked);
  /// computeDQ, issued.
  virtual llvm::SmallVector<mlir::Value> issueDQ();
  /// Waits until at most \p pending groups are in flight; returns \p acc
  /// (accumulators of the groups that completed) to read from now on;
  /// \p keep (packed A operands of groups in flight) stay live up to here.
  virtual llvm::SmallVector<mlir::Value>
  wait(llvm::ArrayRef<mlir::Value> acc, int pending,
       llvm::ArrayRef<mlir::Value> keep = {});
};

/// mma.sync m16n8k16 with ldmatrix fragments from padded tiles (any warp
/// count; dQ split over rowGroups x colGroups warps).
std::unique_ptr<BackwardMma> createMmaSyncBackward(KernelOps &ops,
                                                   const BackwardTileShape &sh,
                                                   mlir::Value warp,
                                                   mlir::Value lane);
/// wgmma.mma_async per warpgroup of 64 keys (8 warps, blockN = 64): S^T
/// and dP^T from K / V and Q / dO descriptors, dV and dK with P^T and dS^T
/// in registers and dO / Q MN-major, dQ per warpgroup (64 queries x D / 2)
/// with dS read MN-major from the dS^T tile.
std::unique_ptr<BackwardMma> createWgmmaBackward(KernelOps &ops,
                                                 const BackwardTileShape &sh,
                                                 mlir::Value warp,
                                                 mlir::Value lane);
/// wgmma.mma_async for head dims above 128 (sh.splitDim; 8 warps, 64 keys
/// per CTA, blockN = 64, head dims multiples of 128): warp w holds keys
/// 16 (w % 4).. of S^T and dP^T for queries 32 (w / 4).. (m64n32), dV and
/// dK for columns Dv / 2 (w / 4).. and D / 2 (w / 4)..; P^T and dS^T go
/// through shared memory (accumulateDV / accumulateDK store and publish
/// them behind a CTA barrier; storeDS does nothing), P^T into the unused
/// second query-tile stage. Synchronous products only.
std::unique_ptr<BackwardMma>
createWgmmaSplitBackward(KernelOps &ops, const BackwardTileShape &sh,
                         mlir::Value warp, mlir::Value lane);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDMMA_H
