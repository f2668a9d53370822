//===- FlashForwardKernel.h - FlashAttention-2 GPU forward kernel -*- C++ -*-//
//
// Builds the GPU forward kernel (mma.sync m16n8k16 and ldmatrix, or sm_90a
// wgmma.mma_async; cp.async double buffering) and the block-mask builder as
// gpu.funcs inside a gpu.module. The variant's mask and score modifier come
// in through a FragmentEmitter, emitted once per accumulator element, and its
// tile classification once per (q tile, kv tile). The pieces they are built
// from live beside their implementations in
// compiler/lib/Conversion/AttnToNVVM/: KernelOps (builder primitives),
// SharedTile (shared-memory layouts, cp.async), MmaSync and Wgmma (one file
// per instruction family), VariantTile (the variant on a tile),
// OnlineSoftmax, RegionEmitter. Internal to the compiler (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_FLASHFORWARDKERNEL_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_FLASHFORWARDKERNEL_H

#include "flashjit/Conversion/AttnToNVVM/FragmentEmitter.h"
#include "flashjit/runtime/Fp8Abi.h"
#include "flashjit/runtime/KernelAbi.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace flashjit::nvvm {

/// Compile-time shape of a kernel: the configuration record's tiles and
/// modes (runtime/KernelAbi.h; every field chosen) plus what the attn op
/// fixes.
struct KernelShape : flashjit::KernelConfig {
  std::string name = "flash_fwd";
  /// Head dims of the shared-memory tiles and the MMAs: multiples of 16.
  int headDimQK = 128;
  int headDimV = 128;
  /// Head dims of the tensors (forward kernels only; 0: headDimQK /
  /// headDimV): where they are below the tile's (paddedHeadDim), loads are
  /// predicated at the tensor's last column and zero-fill the rest, O's
  /// stores stop there.
  int tensorHeadDimQK = 0;
  int tensorHeadDimV = 0;
  /// The tensors' head dims (tensorHeadDimQK/V, else the tiles').
  int tensorQK() const { return tensorHeadDimQK ? tensorHeadDimQK : headDimQK; }
  int tensorV() const { return tensorHeadDimV ? tensorHeadDimV : headDimV; }
  /// bf16 operands, else fp16 (Q, K, V and O share the dtype; fp8
  /// kernels: O's dtype).
  bool bf16 = true;
  /// fp8 Q, K and V (issue 18; sm_90a wgmma forward with cp.async loads):
  /// the PTX type names of their elements, "e4m3" or "e5m2" (empty: not
  /// fp8). O is bf16 or fp16 (bf16 above). Tiles hold one byte per
  /// element in rows of 128 bytes per 128 head-dim elements (fp8SharedBytes)
  /// and take the descale arguments (runtime/Fp8Abi.h).
  std::string fp8Q, fp8K, fp8V;
  bool fp8() const { return !fp8Q.empty(); }
  bool returnLse = true;
  /// The spec has an attention sink (attn.attention's `sink`): one more
  /// kernel argument (abi::gpu::kSinkArgs), folded into each row's
  /// statistics in the epilogue.
  bool sink = false;
  /// Dynamic shared memory the forward kernel needs, in bytes (Q, two K/V
  /// stages).
  int sharedBytes() const {
    if (fp8())
      return int(fp8SharedBytes(*this, headDimQK, headDimV));
    return int(KernelConfig::sharedBytes(headDimQK, headDimV));
  }
};

/// Adds `gpu.func @<config.name>` to \p gpuModule. Arguments:
/// abi::gpu::forwardArgTypes(config.varlen, config.blockSparse, config.sink)
/// (runtime/KernelAbi.h: tensors, strides, seqlens, scale, cu_seqlens,
/// block-mask lists, sink), then emitter.extraArgumentTypes(): the variant's
/// parameters sorted by name (their scalar types), then each buffer sorted
/// by name as (!llvm.ptr<1>, i64 element count).
/// The head_dim stride of every tensor is 1. Grid: (ceil(seqlen_q /
/// blockM), heads_q, batch), block: 32 * numWarps threads, dynamic shared
/// memory: config.sharedBytes().
///
/// varlen: seqlen_q / seqlen_k are the largest sequence lengths (the grid
/// covers them) and batch is the number of sequences; CTA (m, h, b) reads
/// cu_seqlens_q/k[b], [b + 1] and does nothing when query tile m starts past
/// its sequence. Tokens are addressed (cu_seqlens[b] + index) * seq stride
/// (batch strides are unused: q [total_q, heads, D], lse [heads, total_q]
/// have head and seq strides only). Masks see batch = b, per-sequence q_idx,
/// kv_idx and seqlens.
///
/// block-sparse: the key-tile loop visits the row's partial tiles (still
/// classified and masked per element) and then its full tiles (bounds only,
/// no mask code); listed tiles at or past ceil(seqlen_k / blockN) of the
/// sequence are skipped.
void buildFlashForwardKernel(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Operation *gpuModule,
                             const KernelShape &config,
                             FragmentEmitter &emitter);

/// Adds `gpu.func @<config.name>_block_mask`, the block-mask builder of a
/// block-sparse kernel, to \p gpuModule. It writes the BlockMask lists
/// (frontend/BlockMask.h) of the emitter's mask for tiles of
/// config.blockM() x config.blockN, exactly as flashjit::referenceBlockMask
/// defines them: a tile is full when the mask holds at every element of the
/// tile clipped to the sequence, empty when at none. Each tile is first
/// classified by interval arithmetic (the tile classifier, with buffer
/// ranges: a document mask is decided there except on document
/// boundaries); where that cannot decide, the CTA evaluates the mask at
/// every element of the tile.
/// Arguments: abi::gpu::blockMaskArgTypes(config.varlen)
/// (runtime/KernelAbi.h), then emitter.extraArgumentTypes().
/// Grid: (num_q_tiles, heads extent, batch extent) (BlockMask rows: row
/// (b, h, m) = (b * gridDim.y + h) * num_q_tiles + m; the mask sees batch
/// b and head h), block: abi::gpu::kBlockMaskThreads threads, dynamic shared
/// memory: num_kv_tiles bytes rounded up to a multiple of 16 (one class per key
/// tile). The status flags must be zero before the launch. varlen: tiles
/// are local to sequence b; rows of q tiles past the sequence get empty
/// lists.
void buildBlockMaskKernel(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Operation *gpuModule, const KernelShape &config,
                          FragmentEmitter &emitter);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_FLASHFORWARDKERNEL_H
