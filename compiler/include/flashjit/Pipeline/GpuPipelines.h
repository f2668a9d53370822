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

#include "flashjit/runtime/KernelAbi.h"
#include "mlir/IR/DialectRegistry.h"

#include "mlir/Pass/PassManager.h"

#include <string>

namespace flashjit {

/// convert-attn-to-nvvm with the tiles and modes of \p config (every
/// field chosen: compileGpu takes them from resolveGpuTileConfig), then
/// attn-expand-scalar, canonicalize and cse on the gpu.module.
void buildAttnToNVVMPipeline(mlir::OpPassManager &pm,
                             const KernelConfig &config);

/// gpu.module(convert-vector-to-llvm), then MLIR's gpu-lower-to-nvvm
/// pipeline for config.arch ("sm_80" or "sm_90a", validated before: LLVM
/// aborts on an unknown chip) with PTX ISA 8.0, opt level 3, format isa.
void buildNVVMToPTXPipeline(mlir::OpPassManager &pm,
                            const KernelConfig &config);

/// Registers the GPU, NVVM and vector dialects, their conversion interfaces
/// and LLVM IR translations, and the NVVM target.
void registerGpuDialects(mlir::DialectRegistry &registry);

/// Registers the named pipelines `attn-to-nvvm` and `attn-nvvm-to-ptx` (for
/// flashjit-opt).
void registerGpuPipelines();

} // namespace flashjit

#endif // FLASHJIT_PIPELINE_GPUPIPELINES_H
