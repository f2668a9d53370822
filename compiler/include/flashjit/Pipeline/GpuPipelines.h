//===- GpuPipelines.h - Named pass pipelines of the GPU backend --*- C++
//-*-===//
//
//   attn IR --buildAttnToNVVMPipeline--> gpu.module with the kernel (nvvm,
//            llvm, arith, scf ops)
//   kernel  --buildNVVMToPTXPipeline-->  gpu.binary holding PTX
//
// Compiler-internal (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_PIPELINE_GPUPIPELINES_H
#define FLASHJIT_PIPELINE_GPUPIPELINES_H

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"

#include <string>

namespace flashjit {

/// Options of the GPU stages.
struct GpuPipelineOptions {
  /// "sm_80" or "sm_90a" (validated before the pipeline runs: LLVM aborts on
  /// an unknown chip).
  std::string arch = "sm_90a";
  /// Keys per tile and warps per CTA (compileGpu fills them from
  /// defaultGpuTileConfig).
  int blockN = 64;
  int numWarps = 4;
  int minBlocksPerSM = 1;
  /// Query rows per warp, 16 or 32 (block_m = rowsPerWarp * numWarps).
  int rowsPerWarp = 16;
  /// Varlen and block-sparse kernels (GpuCompileOptions).
  bool varlen = false;
  bool blockSparse = false;
  /// wgmma.mma_async instead of mma.sync (sm_90a; GpuTileConfig::wgmma).
  bool wgmma = false;
};

/// convert-attn-to-nvvm, then attn-expand-scalar, canonicalize and cse on
/// the gpu.module.
void buildAttnToNVVMPipeline(mlir::OpPassManager &pm,
                             const GpuPipelineOptions &options);

/// gpu.module(convert-vector-to-llvm), then MLIR's gpu-lower-to-nvvm
/// pipeline for options.arch with PTX ISA 8.0, opt level 3, format isa.
void buildNVVMToPTXPipeline(mlir::OpPassManager &pm,
                            const GpuPipelineOptions &options);

/// Registers the GPU, NVVM and vector dialects, their conversion interfaces
/// and LLVM IR translations, and the NVVM target.
void registerGpuDialects(mlir::DialectRegistry &registry);

/// Registers the named pipelines `attn-to-nvvm` and `attn-nvvm-to-ptx` (for
/// flashjit-opt).
void registerGpuPipelines();

} // namespace flashjit

#endif // FLASHJIT_PIPELINE_GPUPIPELINES_H
