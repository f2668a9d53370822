//===- FlashForwardKernel.h - FlashAttention-2 GPU forward kernel -*- C++ -*-//
//
// Builds the GPU forward kernel (mma.sync m16n8k16 and ldmatrix, or sm_90a
// wgmma.mma_async; cp.async double buffering) as a gpu.func inside a
// gpu.module. The variant's mask and score modifier come in through a
// FragmentEmitter, emitted once per accumulator element, and its tile
// classification once per (q tile, kv tile). Internal to the compiler (includes
// MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_FLASHFORWARDKERNEL_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_FLASHFORWARDKERNEL_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <utility>

namespace flashjit::nvvm {

/// Index values of one element or one tile bound, all i32.
struct IndexValues {
  mlir::Value batch, head, qIdx, kvIdx, seqlenQ, seqlenK;
};

/// Emits the variant's code inside the kernel.
class FragmentEmitter {
public:
  virtual ~FragmentEmitter() = default;
  /// True if the score modifier is not the identity.
  virtual bool hasScoreMod() const = 0;
  /// True if the mask is not the constant true.
  virtual bool hasMask() const = 0;
  /// True if the mask / the score modifier reads buffers: the kernel then
  /// evaluates it only where the interpreter does (mask: in-range elements;
  /// score modifier: allowed elements), so no read goes out of range.
  virtual bool maskReadsBuffers() const = 0;
  virtual bool scoreReadsBuffers() const = 0;
  /// The modified score (f32) of one element; \p score is scale * q.k.
  virtual mlir::Value emitScore(mlir::OpBuilder &b, mlir::Location loc,
                                const IndexValues &idx, mlir::Value score) = 0;
  /// The mask (i1) of one element.
  virtual mlir::Value emitMask(mlir::OpBuilder &b, mlir::Location loc,
                               const IndexValues &idx) = 0;
  /// Emits, at \p b's insertion point, the parts of the mask that depend on
  /// q_idx and not kv_idx once per value in \p qIdx (buffer reads there
  /// guarded by q_idx < seqlen_q) and the parts that depend on kv_idx and not
  /// q_idx once per value in \p kvIdx (guarded by kv_idx < seqlen_k); the
  /// other indices come from \p base. Until endMaskFactors(), emitMask of
  /// an element whose q_idx and kv_idx are among these Values emits only the
  /// rest (a document mask's doc_id[q_idx] and doc_id[kv_idx] are read once
  /// per row and column instead of once per element). The same buffer
  /// elements are read as by per-element evaluation on in-range elements.
  virtual void beginMaskFactors(mlir::OpBuilder &b, mlir::Location loc,
                                const IndexValues &base,
                                llvm::ArrayRef<mlir::Value> qIdx,
                                llvm::ArrayRef<mlir::Value> kvIdx) {}
  virtual void endMaskFactors() {}
  /// True if emitMask of one element reads buffers (after beginMaskFactors:
  /// only the parts depending on both indices count).
  virtual bool maskElementReadsBuffers() const { return maskReadsBuffers(); }
  /// Interval classification of a tile whose inclusive index ranges are
  /// [lo, hi] (seqlens exact): (mayBeFalse, mayBeTrue), both i1. With
  /// \p bufferRanges, integer buffer reads over short in-range index
  /// intervals scan the buffer for their range (the tile classifier's
  /// BufferReader) instead of being unknown.
  virtual std::pair<mlir::Value, mlir::Value>
  emitClassify(mlir::OpBuilder &b, mlir::Location loc, const IndexValues &lo,
               const IndexValues &hi, bool bufferRanges = false) = 0;
  /// Types of the kernel arguments that follow the fixed ones (parameters
  /// and buffers).
  virtual llvm::SmallVector<mlir::Type>
  extraArgumentTypes(mlir::MLIRContext *ctx) const = 0;
  /// The kernel's values for extraArgumentTypes(), before any emit call.
  virtual void setArguments(mlir::ValueRange args) = 0;
  /// The `status` argument: i32 per buffer, set to 1 by an out-of-range read.
  virtual void setStatus(mlir::Value status) = 0;
};

/// Compile-time shape of the kernel.
struct KernelConfig {
  std::string name = "flash_fwd";
  int headDimQK = 128;
  int headDimV = 128;
  /// bf16 operands, else fp16 (Q, K, V and O share the dtype).
  bool bf16 = true;
  /// Query rows per CTA: rowsPerWarp * numWarps.
  int blockM = 64;
  /// Query rows per warp: 16 (one m16 tile) or 32 (two m16 tiles that share
  /// every K and V fragment loaded from shared memory).
  int rowsPerWarp = 16;
  /// Keys per tile, a multiple of 16.
  int blockN = 64;
  int numWarps = 4;
  /// CTAs per SM the register allocation must allow (ptxas .minnctapersm):
  /// registers per thread <= 65536 / (minBlocksPerSM * 32 * numWarps).
  int minBlocksPerSM = 1;
  bool returnLse = true;
  /// Packed variable-length sequences (cu_seqlens arguments; see
  /// buildFlashForwardKernel).
  bool varlen = false;
  /// Visits only the key tiles a block mask lists (block-mask arguments),
  /// and the module also gets the block-mask builder kernel.
  bool blockSparse = false;
  /// Hopper warpgroup MMA (sm_90a only): each group of 4 warps computes its
  /// 64 query rows with wgmma.mma_async (S = Q K^T with Q and K read from
  /// shared memory, O += P V with P in registers and V read from shared
  /// memory) instead of mma.sync. Needs rowsPerWarp = 16, numWarps a
  /// multiple of 4 and head dims that are multiples of 64 (tiles are stored
  /// in 64-element column blocks with the 128-byte swizzle).
  bool wgmma = false;
  /// Dynamic shared memory the kernel needs, in bytes (Q, two K/V stages).
  int sharedBytes() const;
};

/// Adds `gpu.func @<config.name>` to \p gpuModule. Kernel arguments, in order:
///   q, k, v, o, lse, status                : 6 x !llvm.ptr<1>
///   q, k, v, o strides (batch, head, seq)  : 12 x i64 (elements)
///   lse strides (batch, head, seq)         : 3 x i64
///   seqlen_q, seqlen_k, heads_q / heads_kv : 3 x i32
///   scale, scale * log2(e)                 : 2 x f32
///   varlen only: cu_seqlens_q, cu_seqlens_k : 2 x !llvm.ptr<1> (i32,
///       batch + 1 entries each)
///   block-sparse only: kv_num_blocks, kv_indices, full_kv_num_blocks,
///       full_kv_indices                    : 4 x !llvm.ptr<1> (i32, the
///       BlockMask lists, frontend/BlockMask.h)
///     row_batch_stride, row_head_stride, num_kv_tiles : 3 x i32 (block-mask
///       row of (b, h, q tile m) = b * row_batch_stride + h *
///       row_head_stride + m; 0 strides share a row; num_kv_tiles is the
///       row pitch of the index lists)
///   emitter.extraArgumentTypes(): the variant's parameters sorted by name
///       (their scalar types), then each buffer sorted by name as
///       (!llvm.ptr<1>, i64 element count)
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
                             const KernelConfig &config,
                             FragmentEmitter &emitter);

/// Adds `gpu.func @<config.name>_block_mask`, the block-mask builder of a
/// block-sparse kernel, to \p gpuModule. It writes the BlockMask lists
/// (frontend/BlockMask.h) of the emitter's mask for tiles of
/// config.blockM x config.blockN, exactly as flashjit::referenceBlockMask
/// defines them: a tile is full when the mask holds at every element of the
/// tile clipped to the sequence, empty when at none. Each tile is first
/// classified by interval arithmetic (the tile classifier, with buffer
/// ranges: a document mask is decided there except on document
/// boundaries); where that cannot decide, the CTA evaluates the mask at
/// every element of the tile.
/// Kernel arguments, in order:
///   status                                 : !llvm.ptr<1> (as the forward
///       kernel's)
///   kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices
///                                          : 4 x !llvm.ptr<1> (i32 outputs,
///       rows of num_kv_tiles indices)
///   seqlen_q, seqlen_k, num_q_tiles, num_kv_tiles : 4 x i32 (varlen: the
///       largest sequence lengths)
///   varlen only: cu_seqlens_q, cu_seqlens_k : 2 x !llvm.ptr<1>
///   emitter.extraArgumentTypes()
/// Grid: (num_q_tiles, heads extent, batch extent) (BlockMask rows: row
/// (b, h, m) = (b * gridDim.y + h) * num_q_tiles + m; the mask sees batch
/// b and head h), block: kBlockMaskThreads threads, dynamic shared memory:
/// num_kv_tiles bytes rounded up to a multiple of 16 (one class per key
/// tile). The status flags must be zero before the launch. varlen: tiles
/// are local to sequence b; rows of q tiles past the sequence get empty
/// lists.
void buildBlockMaskKernel(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Operation *gpuModule,
                          const KernelConfig &config, FragmentEmitter &emitter);

/// Threads per CTA of the block-mask builder.
inline constexpr int kBlockMaskThreads = 256;

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_FLASHFORWARDKERNEL_H
