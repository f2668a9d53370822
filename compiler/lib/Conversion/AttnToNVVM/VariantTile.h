//===- VariantTile.h - The variant on a tile of scores -----------*- C++
//-*-===//
//
// Applies the user's score modifier and mask to a thread's accumulator
// fragments of S = Q K^T (the mma.sync C-fragment layout) through a
// FragmentEmitter. Every kernel that needs a tile's probabilities (forward;
// backward recomputing P from the LSE) calls this one function, so no two
// kernels evaluate a variant differently. Private to the AttnToNVVM
// conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_VARIANTTILE_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_VARIANTTILE_H

#include "KernelOps.h"

#include "flashjit/Conversion/AttnToNVVM/FragmentEmitter.h"

namespace flashjit::nvvm {

/// Where a thread's fragments sit in the attention matrix.
struct FragmentCoords {
  mlir::Value batch, head, seqlenQ, seqlenK;
  /// Per m16 tile of the warp: the thread's query rows g and g + 8.
  llvm::SmallVector<mlir::Value, 4> qRow0, qRow1;
  /// Key index of the thread's first column: kv0 + 2 t.
  mlir::Value kvLane;
  /// Whether variantScores passes each element's float(q_idx - kv_idx) to
  /// the score modifier (IndexValues::distF): one conversion per row and
  /// tile, one f32 subtraction of a constant per element. Exact where
  /// |q_idx - kv_idx| + 2 sTiles 8 < 2^24.
  bool floatDistance = false;
};

/// The scores of \p s (MT * nS * 4 f32 per thread, s = q.k) in log2 units:
/// score_mod(scale * s) * log2(e), or s * \p scaleLog2 without a score
/// modifier. With \p masked, elements outside the sequences or not allowed
/// by the mask become -inf, and buffer reads happen only where the
/// interpreter does them (the mask on in-range elements, the score modifier
/// on allowed ones); without, the tile is full (every in-range element is
/// allowed) and no mask code is emitted.
llvm::SmallVector<mlir::Value>
variantScores(KernelOps &ops, FragmentEmitter &em,
              llvm::ArrayRef<mlir::Value> s, const FragmentCoords &at,
              int mTiles, int sTiles, mlir::Value scale, mlir::Value scaleLog2,
              bool masked);

/// Where a thread's fragments of a transposed tile S^T = K Q^T sit (the
/// backward kernel: rows are keys, columns queries).
struct KeyRowCoords {
  mlir::Value batch, head, seqlenQ, seqlenK;
  /// The thread's key rows g and g + 8 (one m16 tile).
  mlir::Value kvRow0, kvRow1;
  /// Query index of the thread's first column: q0 + 2 t.
  mlir::Value qLane;
  /// Block-sparse backward tiles spanning mask tiles of several classes
  /// (null otherwise; i1 per key row, only where masked): the row's keys
  /// are not allowed (an unlisted mask tile), or allowed in range without
  /// the mask code (a listed full one).
  mlir::Value rowOff0 = {}, rowOff1 = {}, rowFull0 = {}, rowFull1 = {};
};

/// variantScores on S^T (sTiles * 4 f32 per thread, s = q.k): element
/// (key row, query column) gets exactly the score and mask the forward
/// gives (query row, key column), through the same per-element code.
llvm::SmallVector<mlir::Value>
variantScoresKeyRows(KernelOps &ops, FragmentEmitter &em,
                     llvm::ArrayRef<mlir::Value> s, const KeyRowCoords &at,
                     int sTiles, mlir::Value scale, mlir::Value scaleLog2,
                     bool masked);

/// Where a thread's fragments sit when a CTA's rows are several query
/// heads packed together (decode: the GQA group's heads times q_len): per
/// m16 tile, the head and query index of the thread's rows g and g + 8
/// (padding rows: a valid head and q_idx = seqlen_q, so they are out of
/// range).
struct PackedRowCoords {
  mlir::Value batch, seqlenQ, seqlenK;
  llvm::SmallVector<mlir::Value, 4> head0, head1, qRow0, qRow1;
  /// Key index of the thread's first column: kv0 + 2 t.
  mlir::Value kvLane;
};

/// variantScores for packed rows: each element gets the head of its own
/// row, through the same per-element code (the mask is not factored).
llvm::SmallVector<mlir::Value>
variantScoresPacked(KernelOps &ops, FragmentEmitter &em,
                    llvm::ArrayRef<mlir::Value> s, const PackedRowCoords &at,
                    int mTiles, int sTiles, mlir::Value scale,
                    mlir::Value scaleLog2, bool masked);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_VARIANTTILE_H
