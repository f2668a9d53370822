//===- GpuCache.h - The cached entry point for GPU kernels -----*- C++ -*-===//
//
// loadOrCompileGpu() is what a host application calls for a GPU kernel:
// memory tier (per CUDA context and key), then the disk cache
// (runtime/Cache.h), else compileGpu + nvJitLink + ptxas -v and a store. A
// hit loads the cached cubin (or PTX) through the runtime: no MLIR, no code
// generation. Library flashjit_gpu_cache (the compiler plus the CUDA
// runtime; built where the CUDA toolkit is). Free of MLIR and LLVM headers.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_GPUCACHE_H
#define FLASHJIT_COMPILER_GPUCACHE_H

#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Cache.h"

#include <memory>
#include <string>

namespace flashjit {

namespace runtime {
class Device;
struct DeviceProperties;
} // namespace runtime

/// The code-generation target for a device: "sm_90a" for compute capability
/// 9.0, "sm_80" for other 8.x and newer devices (forward-compatible PTX).
/// Throws UserError for compute capability below 8.0.
std::string gpuTargetFor(const runtime::DeviceProperties &device);

/// The configuration \p options request (CacheKey::config): arch, tile
/// fields as given (0: the tile policy picks), kernel kind, varlen and
/// block-sparse.
KernelConfig requestedConfig(const GpuCompileOptions &options);

/// Empty when the artifacts \p a (a cache entry or a bundle) hold the kernel
/// \p spec and \p options compile to: the configuration is exactly
/// resolveGpuTileConfig's, the entry symbol the variant's, and the PTX
/// declares that configuration (runtime::gpuLaunchConfigMismatch); else
/// what differs. The cache runs it on every disk hit (a mismatch is a miss,
/// recompiled with one warning), and `flashjit compile` reports it the same.
std::string gpuEntryMismatch(const AttentionSpec &spec,
                             const GpuCompileOptions &options,
                             const runtime::KernelArtifacts &a);

/// The disk-cache key of \p spec compiled with \p options (arch, block_n,
/// warps, CTAs per SM, rows per warp, mma, varlen and block-sparse as
/// requested) for this build and environment
/// (CacheKey::make). Throws UserError like validateForGpu, and for
/// KernelKind::Backward (not cached yet: the key has no kernel kind).
runtime::CacheKey gpuCacheKey(const AttentionSpec &spec,
                              const GpuCompileOptions &options);

/// Generates the GPU kernel of \p spec and everything a cache entry holds:
/// kernel.attn.mlir, kernel.gpu.mlir, kernel.ptx, the cubin (nvJitLink) and
/// registers/spills (ptxas -v), with the launch facts. A failing nvJitLink
/// or ptxas only leaves out the cubin or the report (with a warning on
/// stderr). Throws UserError or CompileError like compileGpu.
runtime::KernelArtifacts
compileGpuArtifacts(const AttentionSpec &spec,
                    const GpuCompileOptions &options = {});

/// The artifacts of \p spec with \p options from the disk cache \p cache
/// (nullptr: runtime::defaultCache(), see FLASHJIT_CACHE_DIR,
/// FLASHJIT_DISABLE_CACHE, FLASHJIT_ALWAYS_COMPILE), else
/// compileGpuArtifacts() and a store. Needs no GPU. A disabled, unwritable
/// or full cache gives one warning and an in-memory compile. Throws like
/// compileGpuArtifacts.
runtime::KernelArtifacts loadOrCompileGpuArtifacts(
    const AttentionSpec &spec, const GpuCompileOptions &options,
    runtime::DiskCache *cache = nullptr, LoadReport *report = nullptr);

/// The loaded kernel of \p spec for \p device, from the cheapest source:
/// this process's memory tier (per context, cache directory and key), the
/// disk cache, else a compile. options.arch is replaced by
/// gpuTargetFor(device). A cubin generated for the device's architecture
/// is loaded as is, else the PTX (nvJitLink or the driver JIT). With
/// FLASHJIT_ALWAYS_COMPILE both tiers are skipped. Fills \p report if given.
/// Throws UserError (unsupported spec, option or device), CompileError, or
/// DriverError when loading fails.
std::shared_ptr<const runtime::GpuAttentionKernel>
loadOrCompileGpu(const AttentionSpec &spec, runtime::Device &device,
                 GpuCompileOptions options = {},
                 runtime::DiskCache *cache = nullptr,
                 LoadReport *report = nullptr);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_GPUCACHE_H
