//===- SharedTile.h - Tiles of 16-bit elements in shared memory -*- C++ -*-===//
//
// The two shared-memory layouts of Q, K and V tiles and their cp.async
// loads: padded rows (mma.sync reads them with ldmatrix; kPad elements of
// padding per row keep ldmatrix free of bank conflicts) or 64-element column
// blocks of 128-byte rows with the 128-byte swizzle (16-byte chunk c of row
// r stored at chunk c ^ (r % 8)), the canonical layout of wgmma's matrix
// descriptors (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix
// Layout"). A TMA load (cp.async.bulk.tensor) writes the swizzled layout
// too. Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_SHAREDTILE_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_SHAREDTILE_H

#include "KernelOps.h"

namespace flashjit::nvvm {

/// Elements of padding per shared-memory row of the padded layout.
inline constexpr int kPad = 8;

/// Byte offset in shared memory of the 16-byte chunk \p col (8 elements)
/// of row \p row in a tile of \p rows x \p dim 16-bit elements: rows of
/// dim + kPad elements, or (\p swizzled) 64-element column blocks of
/// rows x 128 bytes with chunk c of row r stored at chunk c ^ (r % 8).
mlir::Value tileOffset(KernelOps &ops, mlir::Value row, mlir::Value col,
                       int rows, int dim, bool swizzled);

/// cp.async (16 bytes a thread and step, .cg) of a tile of \p rows x \p dim
/// 16-bit elements from global rows row0.. (row stride \p stride elements,
/// i64) into shared memory at \p smem, in the layout of tileOffset; rows at
/// or past \p seqlen are zero-filled (source size 0, nothing read). The
/// \p nthreads threads of the CTA (thread index \p tid) share the chunks.
/// \p cols (0: \p dim): the tensor's head dim where it is below the
/// tile's (a padded tile): each load then moves headDimVectorElems(cols)
/// elements (cp.async of 16, 8 or 4 bytes, or a plain 2-byte load and
/// store), and columns at or past \p cols are zero-filled without a read.
void loadTileAsync(KernelOps &ops, mlir::Value tid, int nthreads,
                   mlir::Value smem, mlir::Value gBase, mlir::Value stride,
                   mlir::Value row0, mlir::Value seqlen, int rows, int dim,
                   bool swizzled, int cols = 0);

/// loadTileAsync of an fp8 tile (one byte per element; issue 18): \p rows x
/// \p dimBytes bytes from global rows row0.. (row stride \p stride bytes,
/// i64, a multiple of 16) in the swizzled layout of tileOffset with
/// dimBytes / 2 16-bit columns (the same bytes: 128-byte rows, column
/// blocks of 128 elements); rows at or past \p seqlen zero-filled.
void loadFp8TileAsync(KernelOps &ops, mlir::Value tid, int nthreads,
                      mlir::Value smem, mlir::Value gBase, mlir::Value stride,
                      mlir::Value row0, mlir::Value seqlen, int rows,
                      int dimBytes);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_SHAREDTILE_H
