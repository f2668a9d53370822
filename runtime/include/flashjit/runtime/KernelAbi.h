//===- KernelAbi.h - Argument order of generated kernels --------*- C++ -*-===//
//
// The argument lists of every generated kernel, defined once for the
// compiler that builds them and the runtime that calls them. No MLIR here.
//
// CPU. The compiler's attn-tile pass builds, and the runtime's
// CpuAttentionKernel calls, kernels with plain pointers and scalars (no
// memref descriptors), in this order:
//
//   q, k, v, o, lse, status, counters                   pointers
//   for each buffer, sorted by name: data, size         pointer, i64
//   for each parameter, sorted by name: value           i32, i64 or f32
//   batch, seqlen_q, seqlen_k                           i64
//   q strides[4], k strides[4], v strides[4], o strides[4], lse strides[3]
//   varlen only: cu_seqlens_q, cu_seqlens_k             pointers (i32)
//   block-sparse only: kv_num_blocks, kv_indices,
//     full_kv_num_blocks, full_kv_indices               pointers (i32)
//     row_batch_stride, row_head_stride, num_kv_tiles   i64
//   sink only: sink                                     pointer (f32
//                                                       [heads_q])
//   item_begin, item_end                                i64
//
// Strides are in elements. One work item is one (batch, head, q tile):
// item = (b * heads_q + h) * ceil(seqlen_q / block_m) + q_tile. `status` is
// an i32 per buffer, set to 1 when the kernel read it out of range;
// `counters` is i64[3] (empty, partial, full tile counts) and is written
// only by kernels compiled with count-tiles; block-sparse kernels count only
// the tiles they visit (a listed full tile counts full; a listed partial
// tile counts as the run-time classifier finds it).
//
// Varlen: batch is the number of sequences and seqlen_q/seqlen_k the largest
// sequence lengths (items cover those); q, k, v, o are packed
// [total, heads, head_dim] tensors passed as 4-D strides (0, head stride,
// token stride, dim stride) and lse [heads_q, total_q] as (0, head stride,
// token stride): token t of sequence b is at (cu_seqlens[b] + t) * token
// stride. Items past their sequence's end do nothing.
//
// Block-sparse: the row of item (b, h, q tile) in the BlockMask is
// b * row_batch_stride + h * row_head_stride + q_tile (a stride is 0 where
// the mask is shared); its lists start at row * num_kv_tiles. Listed tiles
// at or past the (sequence's) last key tile are skipped.
//
// The block-mask builder `<kernel>_block_mask` (attn-build-block-mask) of a
// block-sparse kernel takes:
//
//   status                                              pointer
//   for each buffer, sorted by name: data, size         pointer, i64
//   for each parameter, sorted by name: value           i32, i64 or f32
//   seqlen_q, seqlen_k                                  i64 (varlen: largest)
//   varlen only: cu_seqlens_q, cu_seqlens_k             pointers (i32)
//   kv_num_blocks, kv_indices, full_kv_num_blocks,
//     full_kv_indices                                   pointers (i32, out)
//   mask_batch, mask_heads, num_q_tiles, num_kv_tiles   i64
//   row_begin, row_end                                  i64
//
// and fills rows [row_begin, row_end) of a BlockMask of extents
// [mask_batch, mask_heads, num_q_tiles(, num_kv_tiles)].
//
// The host calls a kernel through a packed entry point `void entry(void
// **args)`, args[i] pointing at argument i: ORC's `_mlir_<symbol>` wrapper
// in memory, `<symbol>_packed` (kPackedSuffix) in a compiled kernel.so.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_KERNELABI_H
#define FLASHJIT_RUNTIME_KERNELABI_H

#include "flashjit/frontend/Arguments.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit::abi {

/// Pointer arguments before the buffers.
constexpr int kLeadingPointers = 7;
/// i64 scalars after the parameters: 3 sizes, 19 strides, 2 item bounds.
constexpr int kTrailingScalars = 3 + 4 * 4 + 3 + 2;
/// Extra arguments of varlen kernels: cu_seqlens_q, cu_seqlens_k.
constexpr int kVarlenArgs = 2;
/// Extra arguments of block-sparse kernels: 4 list pointers, 3 scalars.
constexpr int kBlockSparseArgs = 4 + 3;
/// Extra arguments of kernels with an attention sink: the sink pointer.
constexpr int kSinkArgs = 1;
/// Builder arguments besides buffers, parameters and the varlen pointers:
/// status, 2 seqlens, 4 list pointers, 4 extents, 2 row bounds.
constexpr int kBuilderFixedArgs = 1 + 2 + 4 + 4 + 2;
/// The block-mask builder of kernel `<symbol>` is `<symbol>_block_mask`.
constexpr const char *kBlockMaskSuffix = "_block_mask";
/// The packed entry point of kernel `<symbol>` in a kernel.so.
constexpr const char *kPackedSuffix = "_packed";

/// One argument of a packed entry point: args[i] points at a Slot, which the
/// kernel reads with the argument's own type (every member starts at the
/// union's address).
union Slot {
  void *ptr;
  int64_t i64;
  int32_t i32;
  float f32;
};

/// A pointer argument.
inline Slot ptrSlot(const void *p) {
  Slot s;
  s.ptr = const_cast<void *>(p);
  return s;
}
/// An i64 argument.
inline Slot i64Slot(int64_t v) {
  Slot s;
  s.i64 = v;
  return s;
}
/// A run-time parameter, in its declared type (f32, i32 or i64).
inline Slot scalarSlot(const Scalar &v) {
  Slot s;
  s.i64 = 0;
  if (v.type == ScalarType::Float32)
    s.f32 = v.floatValue;
  else if (v.type == ScalarType::Int32)
    s.i32 = static_cast<int32_t>(v.intValue);
  else
    s.i64 = v.intValue;
  return s;
}

/// The CPU backward (attn-tile-backward; runtime::CpuBackwardKernel calls
/// it). Two entries with one argument list: `<symbol>`, the dK/dV kernel
/// (one work item = one (batch, K/V head, K/V tile): item = (b * heads_kv +
/// hk) * ceil(seqlen_k / block_n) + kv_tile), and `<symbol>_dq`
/// (kDqSuffix), the dQ kernel (items as the forward's), which alone
/// accumulates the buffer and parameter gradients:
///
///   q, k, v, o, lse, dO, dq, dk, dv, status, param_grads    pointers
///   for each buffer, sorted by name: data, size, grad       ptr, i64, ptr
///   for each parameter, sorted by name: value               i32, i64, f32
///   batch, seqlen_q, seqlen_k                               i64
///   strides of q[4], k[4], v[4], o[4], lse[3], dO[4], dq[4], dk[4], dv[4]
///   varlen only: cu_seqlens_q, cu_seqlens_k                 pointers (i32)
///   block-sparse only: num_blocks, indices, full_num_blocks,
///     full_indices                                          pointers (i32)
///     row_batch_stride, row_head_stride, row_pitch          i64
///   item_begin, item_end                                    i64
///
/// `grad` of a buffer is an f32 array of its size and `param_grads` one f32
/// per parameter (sorted by name; only f32 ones are written): the dQ kernel
/// adds into them (the host gives each fixed range of items its own zeroed
/// arrays and sums them in order, so the result is deterministic). The dQ
/// kernel reads the block-sparse lists of the forward's BlockMask (rows =
/// q tiles, entries = K/V tiles); the dK/dV kernel reads them transposed
/// (rows = K/V tiles at row b * row_batch_stride + h * row_head_stride +
/// kv_tile with pitch num_q_tiles, entries = q tiles, increasing).
namespace bwd {
/// Pointer arguments before the buffers.
constexpr int kLeadingPointers = 11;
/// Arguments per buffer: data, size, grad.
constexpr int kPerBuffer = 3;
/// i64 scalars after the parameters: 3 sizes, 35 strides, 2 item bounds.
constexpr int kTrailingScalars = 3 + 8 * 4 + 3 + 2;
/// The dQ kernel of backward kernel `<symbol>` is `<symbol>_dq`.
constexpr const char *kDqSuffix = "_dq";
} // namespace bwd

} // namespace flashjit::abi

namespace flashjit {

/// Which kernels of a variant a configuration builds: the forward kernel,
/// or the backward kernels (GPU: the three of abi::gpu::BackwardArg,
/// FlashAttention-2's Algorithm 2: preprocess, main, dQ conversion; CPU: the
/// dK/dV and dQ kernels of CpuBackwardKernel.h), or the split-KV decode
/// kernels over a paged KV cache (GPU: abi::gpu::DecodeArg and
/// abi::gpu::MergeArg, run by runtime::GpuDecodeKernel).
enum class KernelKind { Forward, Backward, Decode };

/// "forward" or "backward" (the name cache keys, manifests and bundles
/// use).
inline const char *toString(KernelKind kind) {
  switch (kind) {
  case KernelKind::Forward:
    return "forward";
  case KernelKind::Backward:
    return "backward";
  case KernelKind::Decode:
    return "decode";
  }
  return "?";
}

/// The kind named \p name by toString(KernelKind), or false.
inline bool parseKernelKind(std::string_view name, KernelKind &kind) {
  for (KernelKind k :
       {KernelKind::Forward, KernelKind::Backward, KernelKind::Decode})
    if (name == toString(k)) {
      kind = k;
      return true;
    }
  return false;
}

/// The tile and launch facts of one kernel, CPU or GPU, in one MLIR-free
/// record. It travels unchanged from the compile options to the launcher:
/// the GPU tile policy fills it (compiler/TilePolicy.h:
/// defaultGpuTileConfig), the pipeline and the convert-attn-to-nvvm pass
/// build from it, cache keys hold the requested one and manifests,
/// bundles, GpuKernelImage, GpuKernelInfo and CpuAttentionKernel the
/// resolved one (read and written by one function pair, CacheEntry.cpp),
/// and the launcher's grid, block and shared memory follow from it. Zero
/// fields mean "not chosen yet" where a request carries it.
///
/// GPU kernels use arch ("sm_80", "sm_90a"), kind, blockN, numWarps,
/// rowsPerWarp, minBlocksPerSM, wgmma, varlen and blockSparse (decode
/// kernels also decodeStages); block_m is
/// rowsPerWarp * numWarps. CPU kernels (arch "cpu") use the subset kind,
/// cpuBlockM, blockN, varlen, blockSparse, countTiles and optLevel; their
/// GPU fields stay 0 / false.
struct KernelConfig {
  /// Target: "sm_80", "sm_90a" or "cpu".
  std::string arch = "sm_90a";
  KernelKind kind = KernelKind::Forward;
  /// Keys per tile (GPU: a multiple of 16, at most 128; CPU: 16 to 128).
  /// GPU backward: query rows per tile of the main kernel's inner loop (the
  /// N of S^T = K Q^T).
  int blockN = 0;
  /// GPU: warps per CTA (4 or 8).
  int numWarps = 0;
  /// GPU: query rows per warp: 16 (one m16 tile) or 32 (two, mma.sync
  /// only).
  int rowsPerWarp = 0;
  /// GPU: CTAs per SM the register allocation must allow (ptxas
  /// .minnctapersm): registers per thread <= 65536 / (minBlocksPerSM * 32 *
  /// numWarps).
  int minBlocksPerSM = 0;
  /// GPU: wgmma.mma_async per warpgroup (sm_90a) instead of mma.sync.
  bool wgmma = false;
  /// wgmma kernels only: Q, K and V arrive by TMA (cp.async.bulk.tensor
  /// through host-built tensor maps, abi::gpu::kTensorMapArgs) into a ring
  /// of K/V stages (kvStages()), each completing on its own mbarrier, instead
  /// of cp.async issued by every thread. Dense kernels only (not varlen or
  /// block-sparse).
  bool tma = false;
  /// tma kernels only: warp-specialised (FlashAttention-3's structure, Shah
  /// et al. 2024, section 3.1): one more warpgroup, the producer, beside
  /// the numWarps consumer warps; one of its threads issues the TMA loads
  /// into the K/V ring, each stage freed by the consumers' arrivals on its
  /// "empty" mbarrier (no CTA barrier in the loop), and setmaxnreg moves
  /// registers from the producer to the consumers. threads() counts the
  /// producer; blockM() does not.
  bool warpSpecialized = false;
  /// warpSpecialized kernels only: FlashAttention-3's intra-warpgroup
  /// overlap (Shah et al. 2024, section 3.2): each consumer warpgroup
  /// issues a key tile's S = Q K^T and the previous tile's O += P V
  /// together and computes the tile's softmax while P V runs (holding the
  /// previous tile's stage one step longer); else the serial tile step
  /// (S, softmax, P V, each product waited for at once).
  bool overlapSoftmax = false;
  /// overlapSoftmax kernels with two consumer warpgroups only:
  /// FlashAttention-3's inter-warpgroup ping-pong (Shah et al. 2024,
  /// section 3.1): the consumer warpgroups take turns, through two named
  /// barriers, to issue a tile's products, so one warpgroup's softmax runs
  /// while the other's products do.
  bool pingPong = false;
  /// wgmma backward kernels with mask or score-modifier code, head dims up
  /// to 128 and above 64, not block-sparse (the only ones whose order is a
  /// choice): the synchronous tile step (each product waited for at once)
  /// instead of the pipelined one (the next products issued while the
  /// mask and softmax run; compiler/lib/Conversion/AttnToNVVM/
  /// BackwardTileStep.cpp). compileGpuArtifacts builds it where the
  /// pipelined kernel spills (GpuCompileOptions::syncBackward asks for
  /// it). Score modifiers that read buffers or have data gradients take
  /// the synchronous step either way.
  bool syncBackward = false;
  /// Packed variable-length sequences (cu_seqlens arguments).
  bool varlen = false;
  /// Visits only the key tiles of a block mask (block-mask arguments; the
  /// module also holds the block-mask builder).
  bool blockSparse = false;
  /// GPU decode kernels only: K/V cp.async stages, 2 or 3. 2 (or 0, the
  /// records written before the field): Q has its own tile, the loop waits
  /// for tile j, then prefetches tile j + 1 into the other stage, with a
  /// CTA barrier before and after the tile's products. 3: Q lands in the
  /// third stage's bytes (it lives in registers once loaded, so head_dim_qk
  /// at most 128 with 16 rows per warp), two tiles are in flight during a
  /// tile's products and one barrier per tile orders the stages.
  int decodeStages = 0;
  /// CPU: queries per tile (GPU kernels derive theirs: blockM()).
  int cpuBlockM = 0;
  /// CPU: the kernel counts tile classes (RunStats::tiles).
  bool countTiles = false;
  /// CPU: LLVM optimisation level, 0..3.
  int optLevel = 0;

  /// True for a CPU kernel (arch "cpu").
  bool isCpu() const { return arch == "cpu"; }
  /// The tensor-core instructions as --mma spells them: "wgmma.tma.ws",
  /// "wgmma.tma", "wgmma" or "mma.sync" (GPU kernels).
  const char *mmaName() const {
    return warpSpecialized ? "wgmma.tma.ws"
           : tma           ? "wgmma.tma"
           : wgmma         ? "wgmma"
                           : "mma.sync";
  }
  /// Query rows per CTA (GPU: rowsPerWarp * numWarps) or per tile (CPU).
  /// GPU backward: keys per CTA (16 per warp, the M of S^T = K Q^T).
  int blockM() const { return isCpu() ? cpuBlockM : rowsPerWarp * numWarps; }
  /// Threads per CTA (GPU): numWarps warps, and the producer warpgroup of
  /// a warp-specialised kernel.
  int threads() const { return 32 * numWarps + (warpSpecialized ? 128 : 0); }
  /// Dynamic shared memory of the GPU forward kernel, in bytes: the Q tile
  /// and kvStages() K/V stages of 16-bit elements, rows padded by kSharedRowPad
  /// elements for mma.sync (ldmatrix without bank conflicts), unpadded and
  /// 128-byte swizzled for wgmma; with tma, one 8-byte mbarrier for Q and
  /// one per stage after them (warpSpecialized: then one "empty" and one
  /// "voted" mbarrier per stage, then a 32-bit word per stage: the
  /// masked-value vote, compiler/lib/Conversion/AttnToNVVM/MaskedValues.h;
  /// kernels that check their result use stage 0's mbarrier and word for
  /// the consumers' decision to run the row block again).
  /// Decode: the forward's layout with two stages; with decodeStages 3,
  /// three padded K/V stages, the Q tile overlaid on the third (its bytes
  /// beyond the stage's, if any, after it).
  /// Backward (main kernel): K and V of its blockM() keys, Q and dO of
  /// blockN query rows, dS^T [blockM() x blockN] (padded rows of 16-bit
  /// elements), then LSE and D of the query rows (fp32); wgmma: unpadded
  /// and two stages of Q, dO, LSE and D (the next query tile's loads run
  /// during the current one's products).
  int64_t sharedBytes(int headDimQK, int headDimV) const {
    if (kind == KernelKind::Backward) {
      int64_t p = kSharedRowPad, m = blockM(), n = blockN;
      if (wgmma)
        return 2 * (m * (headDimQK + headDimV) +
                    2 * n * (headDimQK + headDimV) + m * n) +
               16 * n;
      return 2 * (m * (headDimQK + p) + m * (headDimV + p) +
                  n * (headDimQK + p) + n * (headDimV + p) + m * (n + p)) +
             8 * n;
    }
    if (kind == KernelKind::Decode && decodeStages == 3) {
      const int64_t p = kSharedRowPad;
      const int64_t stage =
          2 * int64_t(blockN) * (headDimQK + p + headDimV + p);
      const int64_t q = 2 * int64_t(blockM()) * (headDimQK + p);
      return 2 * stage + (q > stage ? q : stage);
    }
    return forwardBytes(headDimQK, headDimV, kvStages(headDimQK, headDimV));
  }
  /// K/V stages of the forward kernel's shared-memory ring: 2 (double
  /// buffering); tma kernels 3 where minBlocksPerSM CTAs of them still fit
  /// in an SM's 228 KiB (each CTA also reserves 1 KiB).
  int kvStages(int headDimQK, int headDimV) const {
    if (!tma)
      return 2;
    int64_t three = forwardBytes(headDimQK, headDimV, 3);
    return minBlocksPerSM * (three + 1024) <= 233472 ? 3 : 2;
  }
  bool operator==(const KernelConfig &) const = default;

  /// Elements of padding per shared-memory row of mma.sync tiles.
  static constexpr int kSharedRowPad = 8;

private:
  int64_t forwardBytes(int headDimQK, int headDimV, int stages) const {
    int64_t pad = wgmma ? 0 : kSharedRowPad;
    return 2 * (int64_t(blockM()) * (headDimQK + pad) +
                stages * int64_t(blockN) * (headDimQK + pad + headDimV + pad)) +
           (tma ? 8 * (stages + 1) : 0) + (warpSpecialized ? 20 * stages : 0);
  }
};

namespace abi {

/// A CPU kernel.so declares the configuration it was compiled with:
/// symbol `<symbol>_config` (kConfigSuffix) is an array of kConfigWords
/// i64 in ConfigWord order. The loader compares it with the manifest
/// before anything runs (loadCpuKernel).
constexpr const char *kConfigSuffix = "_config";
/// The words of `<symbol>_config`.
enum ConfigWord : int {
  kConfigMagic = 0, ///< kConfigMagicValue (the layout's version)
  kConfigKind,      ///< KernelKind
  kConfigBlockM,    ///< queries per tile
  kConfigBlockN,    ///< keys per tile
  kConfigCountTiles,
  kConfigVarlen,
  kConfigBlockSparse,
  kConfigWords,
};
/// "fjcfg" and layout 1.
inline constexpr int64_t kConfigMagicValue = 0x666a636667'01;

/// The words a CPU kernel of \p c declares.
inline std::vector<int64_t> cpuConfigWords(const KernelConfig &c) {
  return {kConfigMagicValue, int64_t(c.kind), c.cpuBlockM,  c.blockN,
          c.countTiles,      c.varlen,        c.blockSparse};
}

} // namespace abi

} // namespace flashjit

namespace flashjit::abi {

/// GPU kernels (PTX entries built by the convert-attn-to-nvvm pass and
/// launched by runtime::GpuAttentionKernel). The argument list of a kernel
/// is its fixed arguments (forwardArgTypes / blockMaskArgTypes), then the
/// variant's: each parameter sorted by name (its scalar type), then each
/// buffer sorted by name as (pointer, i64 element count).
namespace gpu {

/// The type of one GPU kernel argument: a global pointer, i64, i32, f32 or
/// a CUtensorMap passed by value (kTensorMapBytes, 64-byte aligned; the
/// kernel reads it in parameter space, `.param .align 64 .b8 [128]`).
enum class ArgType { Ptr, I64, I32, F32, TensorMap };

/// Bytes of a CUtensorMap (cuda.h: CU_TENSOR_MAP_NUM_QWORDS * 8).
inline constexpr int kTensorMapBytes = 128;
/// tma forward kernels, after the fixed arguments: the tensor maps of Q, K
/// and V, each rank 4 over [batch, heads, seqlen, head_dim] (innermost
/// first in the map: head_dim, seqlen, heads, batch), boxes of 64 head_dim
/// elements (128 bytes, the 128-byte swizzle) x block_m (Q) or block_n
/// (K, V) rows, out-of-range rows zero-filled.
inline constexpr int kTensorMapArgs = 3;

/// Positions of the forward kernel's fixed arguments. Strides are in
/// elements, three per tensor: (batch, head, seq); the head_dim stride is 1.
/// Grid: (ceil(seqlen_q / block_m), heads_q, batch), block: 32 * num_warps
/// threads.
enum ForwardArg : int {
  kQ = 0,           ///< Q [batch, heads_q, seqlen_q, head_dim_qk]
  kK = 1,           ///< K [batch, heads_kv, seqlen_k, head_dim_qk]
  kV = 2,           ///< V [batch, heads_kv, seqlen_k, head_dim_v]
  kO = 3,           ///< O [batch, heads_q, seqlen_q, head_dim_v]
  kLse = 4,         ///< LSE [batch, heads_q, seqlen_q] f32 (may be null)
  kStatus = 5,      ///< i32 per buffer, set to 1 by an out-of-range read
  kQStrides = 6,    ///< 3 x i64
  kKStrides = 9,    ///< 3 x i64
  kVStrides = 12,   ///< 3 x i64
  kOStrides = 15,   ///< 3 x i64
  kLseStrides = 18, ///< 3 x i64
  kSeqlenQ = 21,    ///< i32 (varlen: the largest sequence)
  kSeqlenK = 22,    ///< i32 (varlen: the largest sequence)
  kHeadGroup = 23,  ///< i32: heads_q / heads_kv (GQA)
  kScale = 24,      ///< f32: the softmax scale
  kScaleLog2 = 25,  ///< f32: scale * log2(e)
  /// varlen only, from here: cu_seqlens_q, cu_seqlens_k (pointers to i32,
  /// batch + 1 entries each).
  kForwardFixedArgs = 26,
};

/// Forward kernels of a spec with an attention sink (AttentionSpec::sink),
/// after the varlen and block-sparse arguments (if any): one pointer to the
/// f32 sink [heads_q]. Then the variant's arguments.
inline constexpr int kSinkArgs = 1;

/// Block-sparse forward kernels, after the varlen arguments (if any):
/// kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices (pointers
/// to the BlockMask's i32 lists, frontend/BlockMask.h), then
/// row_batch_stride, row_head_stride, num_kv_tiles (i32): the row of (b, h,
/// q tile m) is b * row_batch_stride + h * row_head_stride + m.
inline constexpr int kBlockSparseListArgs = 4;
inline constexpr int kBlockSparseScalarArgs = 3;

/// The forward kernel's fixed argument types, in order (\p sink: the spec
/// has an attention sink; \p tma appends the kTensorMapArgs tensor maps: tma
/// kernels are neither varlen nor block-sparse).
inline std::vector<ArgType> forwardArgTypes(bool varlen, bool blockSparse,
                                            bool sink = false,
                                            bool tma = false) {
  std::vector<ArgType> t(kQStrides, ArgType::Ptr);
  t.insert(t.end(), kSeqlenQ - kQStrides, ArgType::I64);
  t.insert(t.end(), kScale - kSeqlenQ, ArgType::I32);
  t.insert(t.end(), kForwardFixedArgs - kScale, ArgType::F32);
  if (varlen)
    t.insert(t.end(), kVarlenArgs, ArgType::Ptr);
  if (blockSparse) {
    t.insert(t.end(), kBlockSparseListArgs, ArgType::Ptr);
    t.insert(t.end(), kBlockSparseScalarArgs, ArgType::I32);
  }
  if (sink)
    t.insert(t.end(), kSinkArgs, ArgType::Ptr);
  if (tma)
    t.insert(t.end(), kTensorMapArgs, ArgType::TensorMap);
  return t;
}

/// Positions of the block-mask builder's fixed arguments (kernel
/// `<forward kernel>_block_mask`). Grid: (num_q_tiles, mask heads, mask
/// batch), block: kBlockMaskThreads threads, dynamic shared memory:
/// num_kv_tiles bytes rounded up to a multiple of 16.
enum BlockMaskArg : int {
  kMaskStatus = 0,     ///< as the forward kernel's status
  kMaskLists = 1,      ///< 4 output lists (pointers to i32), as above
  kMaskSeqlenQ = 5,    ///< i32 (varlen: the largest sequence)
  kMaskSeqlenK = 6,    ///< i32
  kMaskNumQTiles = 7,  ///< i32
  kMaskNumKvTiles = 8, ///< i32: the row pitch of the index lists
  /// varlen only, from here: cu_seqlens_q, cu_seqlens_k.
  kBlockMaskFixedArgs = 9,
};

/// The block-mask builder's fixed argument types, in order.
inline std::vector<ArgType> blockMaskArgTypes(bool varlen) {
  std::vector<ArgType> t(kMaskSeqlenQ, ArgType::Ptr);
  t.insert(t.end(), kBlockMaskFixedArgs - kMaskSeqlenQ, ArgType::I32);
  if (varlen)
    t.insert(t.end(), kVarlenArgs, ArgType::Ptr);
  return t;
}

/// Threads per CTA of the block-mask builder.
inline constexpr int kBlockMaskThreads = 256;

/// The backward kernels of a variant `<name>` (KernelKind::Backward), run in
/// this order on one stream, all with the same arguments:
///   `<name>_bwd_pre`   D = rowsum(dO * O) (fp32) and dQaccum = 0;
///                      grid (ceil(seqlen_q / kBackwardRowsPerCta), heads_q,
///                      batch), block kBackwardRowThreads, no shared memory;
///   `<name>_bwd`       one CTA per (key tile of block_m keys, kv head,
///                      batch), looping over the query heads of its group and
///                      the query tiles that can see it: dK, dV written,
///                      dS K added to dQaccum (fp32 atomics);
///                      grid (ceil(seqlen_k / block_m), heads_kv, batch),
///                      block 32 * num_warps, the config's shared memory;
///   `<name>_bwd_post`  dQ = scale * dQaccum in the inputs' dtype; grid and
///   block
///                      as `_bwd_pre`.
/// Strides are in elements, three per tensor (batch, head, seq); the
/// head_dim stride is 1. dQaccum [batch, heads_q, seqlen_q, head_dim_qk]
/// and D [batch, heads_q, seqlen_q] are contiguous fp32 workspaces.
///
/// Varlen (KernelConfig::varlen; GpuAttentionBackwardKernel::runVarlen):
/// as the forward's, batch is the number of sequences and seqlen_q /
/// seqlen_k the longest ones (the grids cover those); q, k, v, o, dO, dq,
/// dk, dv are packed [total, heads, head_dim] tensors passed with strides
/// (0, head stride, token stride) and lse [heads_q, total_q] with (0, head
/// stride, token stride); token t of sequence b is at (cu_seqlens[b] + t) *
/// token stride. dQaccum is [total_q, heads_q, head_dim_qk] and D
/// [total_q, heads_q]. CTAs and rows past their sequence's end do nothing.
///
/// Deterministic mode (semaphores not null; one i32 per (batch, head_q,
/// query tile of block_n rows of the longest sequence), zeroed by
/// `_bwd_pre`): the main kernel's CTA x handles key tile
/// ceil(seqlen_k / block_m) - 1 - x (the last key tile first), and adds its
/// dS K of query tile i to dQaccum only after every key tile above it that
/// visits tile i has added its own (it waits until the counter equals that
/// number, counted with the same tile classifier that decides the visits,
/// then increments it). Each dQaccum element thus receives its atomic adds
/// in one fixed order, and dQ is bit-identical between runs. A CTA waits
/// only for CTAs of lower x in the same (kv head, batch), which start
/// earlier, so the waits cannot deadlock.
/// After the fixed arguments come the variant's (parameters, then (pointer,
/// i64 size) per buffer, as the forward's), then the gradient arrays of
/// the score modifier's derivative: one f32 pointer per buffer (sorted by
/// name; as many elements as the buffer, null for buffers that are not
/// f32), then, when the variant has parameters, one f32 pointer with one
/// element per parameter (sorted by name). `_bwd` adds dBuffer[idx] and
/// dParam into them with fp32 atomics (they must be zero before the run);
/// a gradient index outside its buffer adds nothing and sets the buffer's
/// status flag.
enum BackwardArg : int {
  kBwdQ = 0,          ///< Q [batch, heads_q, seqlen_q, head_dim_qk]
  kBwdK = 1,          ///< K [batch, heads_kv, seqlen_k, head_dim_qk]
  kBwdV = 2,          ///< V [batch, heads_kv, seqlen_k, head_dim_v]
  kBwdO = 3,          ///< O [batch, heads_q, seqlen_q, head_dim_v]
  kBwdDO = 4,         ///< dO, as O
  kBwdLse = 5,        ///< LSE [batch, heads_q, seqlen_q] f32 (natural log)
  kBwdDQ = 6,         ///< dQ, as Q (out)
  kBwdDK = 7,         ///< dK, as K (out)
  kBwdDV = 8,         ///< dV, as V (out)
  kBwdDQAccum = 9,    ///< fp32 workspace, see above
  kBwdDelta = 10,     ///< fp32 workspace, see above
  kBwdStatus = 11,    ///< i32 per buffer, set to 1 by an out-of-range read
  kBwdStrides = 12,   ///< 3 x i64 for each of q k v o dO lse dQ dK dV
  kBwdSeqlenQ = 39,   ///< i32
  kBwdSeqlenK = 40,   ///< i32
  kBwdHeadGroup = 41, ///< i32: heads_q / heads_kv (GQA)
  kBwdScale = 42,     ///< f32: the softmax scale
  kBwdScaleLog2 = 43, ///< f32: scale * log2(e)
  /// i32 per (batch, head_q, query tile of block_n rows): the deterministic
  /// mode's dQ turn counters (null: the default mode, dQ by unordered
  /// atomics). See "Deterministic mode" above.
  kBwdSemaphores = 44,
  /// varlen only, from here: cu_seqlens_q, cu_seqlens_k (pointers to i32,
  /// batch + 1 entries each); then the variant's arguments.
  kBackwardFixedArgs = 45,
};
/// Tensors with strides in the backward kernels' arguments.
inline constexpr int kBackwardStridedTensors = 9;
/// Query rows per CTA (one warp each) of `_bwd_pre` and `_bwd_post`.
inline constexpr int kBackwardRowsPerCta = 4;
inline constexpr int kBackwardRowThreads = 32 * kBackwardRowsPerCta;
/// The suffixes of the three backward kernels.
inline constexpr const char *kBackwardPreSuffix = "_bwd_pre";
inline constexpr const char *kBackwardMainSuffix = "_bwd";
inline constexpr const char *kBackwardPostSuffix = "_bwd_post";

/// Block-sparse backward kernels (KernelConfig::blockSparse), after the
/// varlen arguments (if any): the block mask transposed for the key-tile-
/// outer main kernel by `<name>_bwd_mask` (BackwardMaskArg below):
/// q_num_blocks, q_indices, full_q_num_blocks, full_q_indices,
/// q_key_groups (pointers to i32), then row_batch_stride, row_head_stride,
/// num_q_tiles (i32): row (b, h, key tile j) is b * row_batch_stride + h *
/// row_head_stride + j (h a query head; a stride is 0 where the mask is
/// shared) and lists q_num_blocks[row] partial and full_q_num_blocks[row]
/// full query tiles of block_n rows, increasing, at row * num_q_tiles;
/// q_key_groups beside q_indices holds each partial tile's key-group word.
///
/// The backward's block-sparse rule (flashjit::TransposedBlockMask,
/// checkBackwardBlockTiles): each backward query tile lies in one mask
/// tile's rows (mask block_m a multiple of the backward's block_n); its key
/// tile of block_m keys may span several mask tiles, classed per 8 keys
/// (mask block_n a multiple of 8): not listed where every 8-key group's
/// mask tile is unlisted, full where every one is full, else partial with
/// word w: bit g (keys 8 g .. 8 g + 7 of the tile) where that group's mask
/// tile is unlisted (its keys are not allowed), bit 16 + g where it is full
/// (allowed without the mask code); w = 0: every group partial.
inline constexpr int kBackwardSparseListArgs = 5;

/// The backward kernels' fixed argument types, in order (\p varlen,
/// \p blockSparse: KernelConfig::varlen, KernelConfig::blockSparse).
inline std::vector<ArgType> backwardArgTypes(bool varlen = false,
                                             bool blockSparse = false) {
  std::vector<ArgType> t(kBwdStrides, ArgType::Ptr);
  t.insert(t.end(), kBwdSeqlenQ - kBwdStrides, ArgType::I64);
  t.insert(t.end(), kBwdScale - kBwdSeqlenQ, ArgType::I32);
  t.insert(t.end(), kBwdSemaphores - kBwdScale, ArgType::F32);
  t.push_back(ArgType::Ptr); // kBwdSemaphores
  if (varlen)
    t.insert(t.end(), kVarlenArgs, ArgType::Ptr);
  if (blockSparse) {
    t.insert(t.end(), kBackwardSparseListArgs, ArgType::Ptr);
    t.insert(t.end(), kBlockSparseScalarArgs, ArgType::I32);
  }
  return t;
}
/// backwardArgTypes of the kernels built from \p c.
inline std::vector<ArgType> backwardArgTypes(const KernelConfig &c) {
  return backwardArgTypes(c.varlen, c.blockSparse);
}

/// The block-sparse backward's mask transposer `<name>_bwd_mask`
/// (kBackwardMaskSuffix; no variant arguments): writes, for each key tile
/// of the backward's block_m keys, the query tiles of block_n rows it
/// visits (partial with their key-group words, and full, increasing), under
/// the rule above. Grid: (ceil(seqlen_k / block_m), mask heads, mask
/// batch), block kBackwardMaskThreads threads (one warp), no shared
/// memory; output row (b, h, j) = (b * gridDim.y + h) * gridDim.x + j.
/// Host twin: flashjit::transposeBlockMask (frontend/BlockMask.h).
enum BackwardMaskArg : int {
  /// 4 pointers (i32): the BlockMask's kv_num_blocks, kv_indices,
  /// full_kv_num_blocks, full_kv_indices.
  kBmIn = 0,
  /// 5 pointers (i32): the transposed q_num_blocks, q_indices,
  /// full_q_num_blocks, full_q_indices, q_key_groups.
  kBmOut = 4,
  kBmMaskQTiles = 9,   ///< i32: the mask's num_q_tiles
  kBmMaskKvTiles = 10, ///< i32: the mask's num_kv_tiles (its list pitch)
  kBmQRatio = 11,      ///< i32: mask block_m / backward block_n
  kBmMaskBlockN = 12,  ///< i32: the mask's block_n (keys per mask tile)
  kBmQTiles = 13,      ///< i32: ceil(seqlen_q / block_n), the output pitch
  kBackwardMaskArgs = 14,
};
/// The mask transposer's argument types, in order.
inline std::vector<ArgType> backwardMaskArgTypes() {
  std::vector<ArgType> t(kBmMaskQTiles, ArgType::Ptr);
  t.insert(t.end(), kBackwardMaskArgs - kBmMaskQTiles, ArgType::I32);
  return t;
}
/// Threads per CTA of `<name>_bwd_mask`.
inline constexpr int kBackwardMaskThreads = 32;
inline constexpr const char *kBackwardMaskSuffix = "_bwd_mask";

/// The split-KV decode kernel of a variant `<name>` (KernelKind::Decode),
/// `<name>_decode`: one CTA per (split s and row tile, kv head, batch):
/// grid (num_splits * num_row_tiles, heads_kv, batch), block 32 *
/// num_warps, the config's shared memory. The CTA's query rows are the
/// group's query heads times q_len packed (row r: head hk * group + r /
/// q_len, query r % q_len; block_m rows per row tile), its keys the tiles
/// [s * T, min((s + 1) * T, n) ) of the sequence's n = ceil(seq_len /
/// block_n) key tiles, T = ceil(n / num_splits), read through the page
/// table. Three ways to merge, chosen per call by the runtime:
///  - num_splits = 1: the CTA writes O (the inputs' dtype) and LSE itself;
///    the partial workspaces and counters are not used (may be null);
///  - num_splits > 1, counters not null (fused): each CTA writes its fp32
///    partial O and LSE, then counts itself in its (batch, kv head, row
///    tile) group's arrival counter (fence.acq_rel.gpu, atom.add); the CTA
///    that arrives last merges the group's num_splits partial states into O
///    and LSE. The counters must be 0 when the launch starts (the runtime
///    zeroes them on the call's stream). One CTA merges num_splits x the
///    group's rows, so this is for small merges;
///  - num_splits > 1, counters null (separate): the CTAs write their
///    partial states only, and `<name>_decode_merge` (MergeArg), launched
///    next on the same stream, merges them, one CTA per row.
/// All write what the merge writes: an empty split (O = 0, LSE = -inf)
/// merges as nothing, m = max of the partial LSEs (and the sink), weights
/// exp2(LSE_s - m); a row with no allowed key gets O = 0 and LSE = -inf
/// (sink[h] with a sink); a NaN partial LSE is not an empty split (its row
/// is NaN). Partial O [num_splits, batch, heads_q, q_len, head_dim_v] and
/// LSE [num_splits, batch, heads_q, q_len] are contiguous fp32 workspaces.
enum DecodeArg : int {
  kDecQ = 0,           ///< Q [batch, heads_q, q_len, head_dim_qk]
  kDecKCache = 1,      ///< K cache [pages, heads_kv, page_size, head_dim_qk]
  kDecVCache = 2,      ///< V cache [pages, heads_kv, page_size, head_dim_v]
  kDecOPart = 3,       ///< partial O (f32)
  kDecLsePart = 4,     ///< partial LSE (f32)
  kDecStatus = 5,      ///< i32 per buffer, set to 1 by an out-of-range read
  kDecPages = 6,       ///< i32 page ids
  kDecPageStart = 7,   ///< i32 [batch]: sequence b's first entry in pages
  kDecSeqLens = 8,     ///< i32 [batch]: tokens of sequence b
  kDecO = 9,           ///< O [batch, heads_q, q_len, head_dim_v]
  kDecLse = 10,        ///< LSE [batch, heads_q, q_len] f32 (null: not written)
  kDecCounters = 11,   ///< i32 [batch, heads_kv, row tiles], 0; null: separate
  kDecQStrides = 12,   ///< 3 x i64: batch, head, query
  kDecKStrides = 15,   ///< 3 x i64: page, head, slot
  kDecVStrides = 18,   ///< 3 x i64: page, head, slot
  kDecOStrides = 21,   ///< 3 x i64: batch, head, query
  kDecLseStrides = 24, ///< 3 x i64: batch, head, query
  kDecQLen = 27,       ///< i32: query tokens per sequence
  kDecGroup = 28,      ///< i32: heads_q / heads_kv
  kDecPageShift = 29,  ///< i32: log2(page_size)
  kDecNumSplits = 30,  ///< i32
  kDecRowTiles = 31,   ///< i32: ceil(group * q_len / block_m)
  kDecBatch = 32,      ///< i32
  kDecHeadsQ = 33,     ///< i32
  kDecScale = 34,      ///< f32: the softmax scale
  kDecScaleLog2 = 35,  ///< f32: scale * log2(e)
  kDecodeFixedArgs = 36,
  /// Specs with an attention sink only: f32 sink [heads_q] (device memory),
  /// the last fixed argument. The sink joins each row's denominator once,
  /// in the merge, not in the splits: LSE = log(exp(sink[h]) + sum_s
  /// exp(LSE_s)), O = sum_s exp(LSE_s - LSE) O_s; a row with no allowed key
  /// gets O = 0, LSE = sink[h].
  kDecSink = 36,
};

/// The decode kernel's fixed argument types, in order (\p sink: the spec
/// has an attention sink, one more pointer kDecSink; the variant's
/// parameters and buffers follow, as for the forward).
inline std::vector<ArgType> decodeArgTypes(bool sink = false) {
  std::vector<ArgType> t(kDecQStrides, ArgType::Ptr);
  t.insert(t.end(), kDecQLen - kDecQStrides, ArgType::I64);
  t.insert(t.end(), kDecScale - kDecQLen, ArgType::I32);
  t.insert(t.end(), kDecodeFixedArgs - kDecScale, ArgType::F32);
  if (sink)
    t.push_back(ArgType::Ptr);
  return t;
}

/// The merge kernel's arguments (no variant arguments).
enum MergeArg : int {
  kMrgOPart = 0,      ///< partial O (f32), as above
  kMrgLsePart = 1,    ///< partial LSE (f32)
  kMrgO = 2,          ///< O [batch, heads_q, q_len, head_dim_v]
  kMrgLse = 3,        ///< LSE [batch, heads_q, q_len] f32 (may be null)
  kMrgOStrides = 4,   ///< 3 x i64
  kMrgLseStrides = 7, ///< 3 x i64
  kMrgNumSplits = 10, ///< i32
  kMergeFixedArgs = 11,
  /// Specs with an attention sink only: f32 sink [heads_q] (device memory).
  /// The sink joins each row's denominator once, here, not in the splits:
  /// LSE = log(exp(sink[h]) + sum_s exp(LSE_s)), O = sum_s exp(LSE_s - LSE)
  /// O_s; a row with no allowed key gets O = 0, LSE = sink[h].
  kMrgSink = 11,
};

/// The merge kernel's argument types, in order (\p sink: the spec has an
/// attention sink, one more pointer kMrgSink).
inline std::vector<ArgType> mergeArgTypes(bool sink = false) {
  std::vector<ArgType> t(kMrgOStrides, ArgType::Ptr);
  t.insert(t.end(), kMrgNumSplits - kMrgOStrides, ArgType::I64);
  t.insert(t.end(), kMergeFixedArgs - kMrgNumSplits, ArgType::I32);
  if (sink)
    t.push_back(ArgType::Ptr);
  return t;
}

/// Threads per CTA of the merge kernel (one row; DecodeMergeKernel.h).
inline constexpr int kMergeThreads = 128;
/// The suffixes of the decode kernels.
inline constexpr const char *kDecodeSuffix = "_decode";
inline constexpr const char *kDecodeMergeSuffix = "_decode_merge";

} // namespace gpu

} // namespace flashjit::abi

#endif // FLASHJIT_RUNTIME_KERNELABI_H
