//===- GpuCompiler.h - Attention specs to GPU kernels -----------*- C++ -*-===//
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
#include "flashjit/compiler/TilePolicy.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <string>
#include <vector>

namespace flashjit {

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
  /// Forward: the kernel `<name>`. Backward: the three kernels of
  /// abi::gpu::BackwardArg (runtime/KernelAbi.h; run by
  /// runtime::GpuAttentionBackwardKernel) in one PTX module: mma.sync, or
  /// on sm_90a wgmma (the default at head dims 64 and 128 without a score
  /// modifier, not block-sparse; mma = Wgmma / MmaSync force either). The
  /// image's threads, blockM (keys per CTA), blockN (query rows per tile)
  /// and sharedBytes describe `<name>_bwd`.
  KernelKind kind = KernelKind::Forward;
  /// Decode only: K/V cp.async stages of the decode kernel
  /// (KernelConfig::decodeStages): 2, or 3 (Q overlaid on the third stage,
  /// one CTA barrier per key tile; head_dim_qk at most 128); 0 picks the
  /// default (3 where it applies, else 2). Another value, or a value on
  /// another kind, throws UserError.
  int decodeStages = 0;
  /// Backward only: the synchronous tile step (KernelConfig::syncBackward)
  /// where the wgmma kernel's order is a choice (mask or score-modifier
  /// code at head dims above 64, not split, not block-sparse; elsewhere
  /// it changes nothing and the resolved config does not record it). False
  /// leaves the order to the compiler: the pipelined step, and the
  /// synchronous one where that spills (compileGpuArtifacts). Throws
  /// UserError (validateForGpu) on other kinds.
  bool syncBackward = false;
  /// Directory that receives <name>.<key>.attn.mlir, .gpu.mlir and
  /// .<arch>.ptx (<key>: gpuCacheKey's hash, so compiles never overwrite each
  /// other); empty means $FLASHJIT_DUMP_DIR if set, else no files.
  std::string dumpDir;
};

/// The tiles compileGpu uses for \p spec and \p options: the options'
/// non-zero fields over defaultGpuTileConfig's choice (a default CTAs-per-SM
/// bound belongs to the default tiles: reshaped tiles get 1 unless
/// asked). Implemented in TilePolicy.cpp.
GpuTileConfig resolveGpuTileConfig(const AttentionSpec &spec,
                                   const GpuCompileOptions &options);

/// A generated GPU kernel: PTX and its launch facts.
struct GpuKernelImage {
  /// The kernel's symbol (the variant's name).
  std::string name;
  /// PTX text (ISA 8.0).
  std::string ptx;
  /// The resolved kernel configuration (resolveGpuTileConfig): target
  /// (config.arch), kind, tiles, instructions (config.wgmma) and modes.
  KernelConfig config;
  /// Dynamic shared memory per CTA, bytes (config.sharedBytes(head dims)).
  int sharedBytes = 0;
  /// The attn IR (with the user's locations) and the GPU-dialect IR.
  std::string attnText;
  std::string gpuText;
  /// Time per step, with a final "total".
  std::vector<StageTiming> timings;

  /// What runtime::GpuAttentionKernel needs to launch it.
  runtime::GpuKernelInfo info() const { return {name, config, sharedBytes}; }
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
