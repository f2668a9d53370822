//===- TileClassifier.h - Run-time tile classification code -----*- C++ -*-===//
//
// Emits, as IR, the interval arithmetic of flashjit::classifyTile
// (frontend/lib/TileClass.cpp, the specification) over a mask region, so a
// kernel classifies each (q tile, kv tile) from the real sequence lengths
// and parameter values at run time. Integers become (bounded, lo, hi) with
// bounds computed in i128 and "bounded" false whenever the concrete
// operation could wrap; bools become (canBeFalse, canBeTrue); floats are
// unknown, and so are buffer reads unless the caller passes a BufferReader
// (the buffer-range rule of flashjit::TileClassOptions::bufferRanges: an
// in-range index interval of at most kBufferRangeScanLimit indices is
// scanned for the elements' minimum and maximum). Every rule mirrors the
// host rule exactly.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_DIALECT_ATTN_TRANSFORMS_TILECLASSIFIER_H
#define FLASHJIT_DIALECT_ATTN_TRANSFORMS_TILECLASSIFIER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Region.h"

#include <functional>

namespace flashjit::attn {

class BufferLoadOp;

/// The index ranges of one tile, as i64 values (closed intervals).
struct TileBoxValues {
  mlir::Value batch, head, qLo, qHi, kvLo, kvHi, seqlenQ, seqlenK;
};

/// The abstract value of the mask over a tile: full = !canBeFalse,
/// empty = canBeFalse && !canBeTrue (as classifyTile decides).
struct TileClassValues {
  mlir::Value canBeFalse, canBeTrue; // i1
};

/// How the classifier reads the buffers of the mask (the buffer-range
/// rule). Each callback is given the attn.buffer_load of the mask region
/// being classified (not a clone) and emits at the builder's insertion
/// point. (std::function, not function_ref, so that a braced initialiser of
/// lambdas does not dangle.)
struct BufferReader {
  /// The number of elements of the buffer \p load reads, as an i64 (>= 0).
  /// Called once per attn.buffer_load per classification, outside the scan.
  std::function<mlir::Value(mlir::OpBuilder &b, mlir::Location loc,
                            BufferLoadOp load)>
      size;
  /// Element \p index (an i64 in [0, size), guaranteed by the classifier) of
  /// that buffer, as a value of load's result type (i32 or i64). Called in
  /// the body of the scan's scf.for; must not check bounds, set status flags
  /// or have other side effects.
  std::function<mlir::Value(mlir::OpBuilder &b, mlir::Location loc,
                            BufferLoadOp load, mlir::Value index)>
      loadElement;
};

/// Emits at \p b's insertion point the abstract evaluation of \p mask (a
/// region taking the six i32 indices and yielding i1 through attn.yield).
/// \p paramValue gives the run-time value of an attn.param op. With
/// \p buffers, an attn.buffer_load of an integer buffer whose index interval
/// [lo, hi] is bounded, lies inside [0, size) and holds at most
/// kBufferRangeScanLimit indices becomes [min, max] of elements lo..hi,
/// found by an scf.for that reads exactly those elements; other reads stay
/// unknown. Without \p buffers every buffer read is unknown. Never fails:
/// ops it does not model come out unknown (sound, like the host).
TileClassValues buildTileClassifier(
    mlir::OpBuilder &b, mlir::Location loc, mlir::Region &mask,
    const TileBoxValues &box,
    llvm::function_ref<mlir::Value(mlir::Operation *)> paramValue,
    const BufferReader *buffers = nullptr);

} // namespace flashjit::attn

#endif // FLASHJIT_DIALECT_ATTN_TRANSFORMS_TILECLASSIFIER_H
