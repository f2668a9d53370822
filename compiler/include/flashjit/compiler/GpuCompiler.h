//===- GpuCompiler.h - Compiling attention specs to GPU kernels --*- C++
//-*-===//
//
// compileGpu() turns an AttentionSpec into PTX for an NVIDIA GPU
// (attn dialect -> convert-attn-to-nvvm -> NVVM/LLVM -> PTX) with the facts
// needed to launch it (flashjit::runtime::GpuAttentionKernel runs it).
// Needs no GPU and no CUDA driver: CI generates and assembles every kernel.
// Free of MLIR and LLVM headers.
//
// Supported: Q, K, V and O of one dtype, bf16 or fp16; head dims multiples
// of 16 up to 256; targets sm_80 and sm_90a. Anything else is a UserError
// raised before MLIR or LLVM is touched.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_GPUCOMPILER_H
#define FLASHJIT_COMPILER_GPUCOMPILER_H

#include "flashjit/compiler/Compiler.h"

#include <string>
#include <vector>

namespace flashjit {

/// The tensor-core instructions of a GPU kernel.
enum class GpuMma {
  /// defaultGpuTileConfig's choice: Wgmma on sm_90a where it applies.
  Default,
  /// mma.sync m16n8k16 with ldmatrix fragments (sm_80 and sm_90a;
  /// FlashAttention-2's instructions).
  MmaSync,
  /// wgmma.mma_async (sm_90a only): warpgroups of 4 warps, 64 query rows
  /// each, Q and K read from shared memory by descriptor, P from registers
  /// (FlashAttention-3's instructions, Shah et al. 2024, section 3). Needs
  /// head dims that are multiples of 64 and rowsPerWarp 16.
  Wgmma,
};

/// "default", "mma.sync" or "wgmma".
const char *toString(GpuMma mma);

/// How to compile one spec for a GPU.
struct GpuCompileOptions {
  /// "sm_80" or "sm_90a".
  std::string arch = "sm_90a";
  /// Keys per tile (a multiple of 16); 0 picks defaultGpuTileConfig's.
  int blockN = 0;
  /// Warps per CTA (block_m = rowsPerWarp * warps); 0 picks
  /// defaultGpuTileConfig's.
  int numWarps = 0;
  /// CTAs per SM the register allocation must allow (1 to 4); 0 picks the
  /// default (1 when blockN, numWarps or rowsPerWarp changes the default
  /// tiles). Higher values cap registers and may spill (see ptxas -v).
  int minBlocksPerSM = 0;
  /// Query rows per warp: 16 (one m16 tile) or 32 (two m16 tiles sharing
  /// every K/V fragment, as FlashAttention-2 does); 0 picks the default.
  /// block_m = rowsPerWarp * numWarps.
  int rowsPerWarp = 0;
  /// Tensor-core instructions; Default picks defaultGpuTileConfig's.
  /// Choosing one sets the default tiles of that kind; numWarps, blockN,
  /// minBlocksPerSM and rowsPerWarp still override them.
  GpuMma mma = GpuMma::Default;
  /// Packed variable-length sequences (cu_seqlens arguments,
  /// GpuAttentionKernel::runVarlen). Above head_dim 64 the default mma.sync
  /// tiles are then 8 warps of 16 rows and 64 keys (4 x 32 would spill).
  bool varlen = false;
  /// Visits only the key tiles of a block mask
  /// (GpuAttentionKernel::runBlockSparse); the PTX also holds the block-mask
  /// builder `<name>_block_mask` (GpuAttentionKernel::buildBlockMask). With
  /// a mask the default mma.sync tiles are then 8 warps of 16 rows (4 x 32
  /// spills;
  /// defaultGpuTileConfig(spec, arch, varlen, blockSparse) gives them).
  bool blockSparse = false;
  /// Directory that receives <name>.attn.mlir, .gpu.mlir and .ptx; empty
  /// means $FLASHJIT_DUMP_DIR if set, else no files.
  std::string dumpDir;
};

/// The tile configuration of a GPU kernel.
struct GpuTileConfig {
  /// Keys per tile (a multiple of 16).
  int blockN = 64;
  /// Warps per CTA (block_m = rowsPerWarp * numWarps).
  int numWarps = 8;
  /// CTAs per SM the register allocation must allow (1: up to 255
  /// registers per thread).
  int minBlocksPerSM = 1;
  /// Query rows per warp, 16 or 32 (block_m = rowsPerWarp * numWarps).
  int rowsPerWarp = 16;
  /// wgmma.mma_async instead of mma.sync (GpuMma::Wgmma).
  bool wgmma = false;
};

/// The default tile configuration of \p spec on \p arch ("sm_80" or
/// "sm_90a"; GpuCompileOptions overrides it), chosen from the tile
/// experiment on an H200 (bench/RESULTS.md) among configurations that
/// ptxas assembles without spills. mma.sync tiles (sm_80, \p mma MmaSync,
/// head dims that are not multiples of 64), block_m = 128 everywhere:
/// - head_dim <= 64: 4 warps of 32 query rows, 64-key tiles (variants that
///   read buffers: 8 warps of 16 rows);
/// - head_dim <= 128: 4 warps of 32 rows, 32-key tiles for no mask or a
///   top-left causal one, without buffers; else 8 warps of 16 rows, 64-key
///   tiles (4 x 32 spills there);
/// - head_dim > 128: 8 warps of 16 rows, 64-key tiles on sm_90a for masks
///   of depth <= 4 (causal, one-sided windows, document ids), else 32 (also
///   on sm_80, whose shared memory holds less);
/// - \p varlen kernels above head_dim 64 and \p blockSparse kernels with a
///   mask: 8 warps of 16 rows, 64-key tiles wherever the rules above give
///   4 x 32 (their extra per-sequence or list state spills it).
///
/// On sm_90a, when head_dim_qk and head_dim_v are multiples of 64, \p mma
/// Default or Wgmma gives wgmma tiles instead: above head_dim 64, 8 warps
/// (two warpgroups, 128 query rows) with 128-key tiles up to head_dim 128
/// and 64-key tiles above (half that for variants that read buffers and
/// have a mask and a score modifier, or are varlen or block-sparse); at
/// head_dim 64, 4
/// warps (one warpgroup, 64 query rows) with 128-key tiles when there is
/// neither a mask nor a score modifier, else 64-key tiles and 3 CTAs per SM.
/// \p mma MmaSync gives the mma.sync tiles above; Wgmma where it cannot
/// apply (sm_80, other head dims) is a UserError in validateForGpu.
GpuTileConfig defaultGpuTileConfig(const AttentionSpec &spec,
                                   const std::string &arch = "sm_90a",
                                   bool varlen = false,
                                   bool blockSparse = false,
                                   GpuMma mma = GpuMma::Default);

/// A generated GPU kernel: PTX and its launch facts.
struct GpuKernelImage {
  /// The kernel's symbol (the variant's name).
  std::string name;
  /// The target architecture, e.g. "sm_90a".
  std::string arch;
  /// PTX text (ISA 8.0).
  std::string ptx;
  /// Threads per CTA, query rows per CTA, keys per tile.
  int threads = 0;
  int blockM = 0;
  int blockN = 0;
  /// Dynamic shared memory per CTA, bytes.
  int sharedBytes = 0;
  /// The modes it was compiled with (GpuCompileOptions).
  bool varlen = false;
  bool blockSparse = false;
  /// wgmma.mma_async (true) or mma.sync.
  bool wgmma = false;
  /// The attn IR (with the user's locations) and the GPU-dialect IR.
  std::string attnText;
  std::string gpuText;
  /// Time per step, with a final "total".
  std::vector<StageTiming> timings;
};

/// Checks that the GPU backend supports \p spec and \p options (after
/// spec.validate()); throws UserError naming the field otherwise.
void validateForGpu(const AttentionSpec &spec,
                    const GpuCompileOptions &options);

/// Generates the GPU kernel of \p spec. Throws UserError (unsupported spec or
/// option) or CompileError (a pass failed: the message holds the
/// diagnostics).
GpuKernelImage compileGpu(const AttentionSpec &spec,
                          const GpuCompileOptions &options = {});

} // namespace flashjit

#endif // FLASHJIT_COMPILER_GPUCOMPILER_H
