//===- TileClassifier.h - Run-time tile classification code -----*- C++ -*-===//
//
// Emits, as IR, the interval arithmetic of flashjit::classifyTile
// (frontend/lib/TileClass.cpp, the specification) over a mask region, so a
// kernel classifies each (q tile, kv tile) from the real sequence lengths
// and parameter values at run time. Integers become (bounded, lo, hi) with
// bounds computed in i128 and "bounded" false whenever the concrete
// operation could wrap; bools become (canBeFalse, canBeTrue); floats and
// buffer reads are unknown. Every rule mirrors the host rule exactly.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_DIALECT_ATTN_TRANSFORMS_TILECLASSIFIER_H
#define FLASHJIT_DIALECT_ATTN_TRANSFORMS_TILECLASSIFIER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Region.h"

namespace flashjit::attn {

/// The index ranges of one tile, as i64 values (closed intervals).
struct TileBoxValues {
  mlir::Value batch, head, qLo, qHi, kvLo, kvHi, seqlenQ, seqlenK;
};

/// The abstract value of the mask over a tile: full = !canBeFalse,
/// empty = canBeFalse && !canBeTrue (as classifyTile decides).
struct TileClassValues {
  mlir::Value canBeFalse, canBeTrue; // i1
};

/// Emits at \p b's insertion point the abstract evaluation of \p mask (a
/// region taking the six i32 indices and yielding i1 through attn.yield).
/// \p paramValue gives the run-time value of an attn.param op. Never fails:
/// ops it does not model come out unknown (sound, like the host).
TileClassValues buildTileClassifier(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Region &mask,
    const TileBoxValues &box,
    llvm::function_ref<mlir::Value(mlir::Operation *)> paramValue);

} // namespace flashjit::attn

#endif // FLASHJIT_DIALECT_ATTN_TRANSFORMS_TILECLASSIFIER_H
