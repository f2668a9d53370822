//===- TileScores.h - Masked, modified scores of one tile pair -*- C++ -*-===//
//
// The one place that evaluates an attn.attention's variant on a tile of
// scores: attn-tile (forward) and attn-tile-backward both call
// emitMaskedScores, so the forward and the backward can never mask or
// modify a score differently. Private to compiler/lib/Dialect/Attn.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_LIB_DIALECT_ATTN_TRANSFORMS_TILESCORES_H
#define FLASHJIT_LIB_DIALECT_ATTN_TRANSFORMS_TILESCORES_H

#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Region.h"

namespace flashjit::attn {

/// log2(e): the forward and backward kernels work in the exp2 domain.
inline constexpr double kLog2e = 1.4426950408889634;

/// Where one (q tile, K/V tile) pair lies: the `where` operands of
/// attn.mask_select, attn.score_mod and attn.score_grad, all i64.
struct TilePairWhere {
  mlir::Value q0;      ///< first query row of the tile
  mlir::Value kv0;     ///< first key row of the tile
  mlir::Value qRows;   ///< valid query rows, <= block_m
  mlir::Value kvRows;  ///< valid key rows, <= block_n
  mlir::Value batch;   ///< batch index
  mlir::Value head;    ///< query head index
  mlir::Value seqlenQ; ///< query length of this (batch) sequence
  mlir::Value seqlenK; ///< key length of this (batch) sequence
};

/// True if \p op's score region yields its score argument unchanged (no
/// attn.score_mod is emitted and log2(e) is folded into the QK^T scale).
bool isIdentityScore(AttentionOp op);

/// The memref tiles one score evaluation reads and writes (f32).
struct ScoreTiles {
  mlir::Value q; ///< [block_m, head_dim_qk]
  mlir::Value k; ///< [block_n, head_dim_qk]
  mlir::Value s; ///< [block_m, block_n], written
  /// [block_m, block_n] or null: receives scale * QK^T before the mask and
  /// the modifier (the backward's score_grad input). Written only when
  /// \p op has a score modifier.
  mlir::Value raw;
};

/// Emits, at \p b's insertion point, the scores of one tile pair of \p op
/// into tiles.s:
///   S = scale * Q K^T               (scale * log2(e) if isIdentityScore)
///   tiles.raw = S                   (if tiles.raw and not isIdentityScore)
///   mask: bounds only when the tile is full (\p knownFull, or the run-time
///         i1 \p full), else the user's mask region per element
///         (attn.mask_select: -inf where false or out of bounds)
///   S = score_mod(S) * log2(e)      (unless isIdentityScore)
/// \p cloneRegion clones one of \p op's regions into the new op's empty
/// region with the kernel's own argument mapping (KernelRegions.h).
void emitMaskedScores(
    mlir::ImplicitLocOpBuilder &b, AttentionOp op, const ScoreTiles &tiles,
    const TilePairWhere &where, mlir::Value full, bool knownFull,
    llvm::function_ref<void(mlir::Region &from, mlir::Region &to)> cloneRegion);

} // namespace flashjit::attn

#endif // FLASHJIT_LIB_DIALECT_ATTN_TRANSFORMS_TILESCORES_H
