//===- Pipelines.h - Named pass pipelines of the compiler --------*- C++
//-*-===//
//
// The stages every kernel goes through, as pipeline builders shared by the
// in-process compiler and flashjit-opt (which registers them by name):
//
//   attn IR   --buildAttnToTilesPipeline-->     tile program (attn tile ops)
//   tiles     --buildTilesToLLVMCPUPipeline-->  LLVM dialect for the host
//
// Compiler-internal (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_PIPELINE_PIPELINES_H
#define FLASHJIT_PIPELINE_PIPELINES_H

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"

#include <cstdint>

namespace flashjit {

/// Options of the tiling stage.
struct TileOptions {
  int64_t blockM = 64;
  int64_t blockN = 64;
  /// Instrument kernels to count full/partial/empty tiles.
  bool countTiles = false;
  /// Packed variable-length sequences (cu_seqlens arguments).
  bool varlen = false;
  /// Block-sparse kernels (block-mask arguments) plus their block-mask
  /// builders (@f_block_mask).
  bool blockSparse = false;
  /// The backward kernels (attn-tile-backward: @f for dK/dV, @f_dq for dQ
  /// and the data gradients) instead of the forward; no block-mask builder
  /// (the backward takes the forward's BlockMask).
  bool backward = false;
};

/// attn.attention -> FlashAttention-2 tile program: attn-build-block-mask
/// (block-sparse only), attn-tile, attn-expand-scalar, canonicalize, cse.
void buildAttnToTilesPipeline(mlir::OpPassManager &pm,
                              const TileOptions &options);

/// Tile program -> LLVM dialect for the host CPU: convert-attn-to-scf, then
/// scf -> cf, math, memref, arith, cf, func to LLVM.
void buildTilesToLLVMCPUPipeline(mlir::OpPassManager &pm);

/// Registers the dialects (and LLVM IR translations) the compiler uses.
void registerFlashjitDialects(mlir::DialectRegistry &registry);

/// Registers flashjit's passes and the named pipelines `attn-to-tiles`,
/// `attn-tiles-to-llvm-cpu` and `attn-to-llvm-cpu` (for flashjit-opt).
void registerFlashjitPassesAndPipelines();

} // namespace flashjit

#endif // FLASHJIT_PIPELINE_PIPELINES_H
