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
#include "flashjit/runtime/DecodeKernel.h"

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
/// fields as given (0: the tile policy picks), kernel kind, varlen,
/// block-sparse and syncBackward.
KernelConfig requestedConfig(const GpuCompileOptions &options);

/// Empty when the artifacts \p a (a cache entry or a bundle) hold the kernel
/// \p spec and \p options compile to: the configuration is exactly
/// resolveGpuTileConfig's (or, for a wgmma backward, that of its
/// synchronous-step fallback, and for a policy-chosen one that of its
/// mma.sync fallback: compileGpuArtifacts), the entry symbol the variant's,
/// and the PTX declares that configuration (runtime::gpuLaunchConfigMismatch);
/// else what differs. The cache runs it on every disk hit (a mismatch is a
/// miss, recompiled with one warning), and `flashjit compile` reports it the
/// same.
std::string gpuEntryMismatch(const AttentionSpec &spec,
                             const GpuCompileOptions &options,
                             const runtime::KernelArtifacts &a);

/// The disk-cache key of \p spec compiled with \p options (arch, block_n,
/// warps, CTAs per SM, rows per warp, mma, varlen and block-sparse as
/// requested) and kernel kind (forward, backward or decode: each has its
/// own key) for this build and environment (CacheKey::make). Throws
/// UserError like validateForGpu.
runtime::CacheKey gpuCacheKey(const AttentionSpec &spec,
                              const GpuCompileOptions &options);

/// Generates the GPU kernel of \p spec and everything a cache entry holds:
/// kernel.attn.mlir, kernel.gpu.mlir, kernel.ptx, the cubin
/// (runtime::assembleCubin: ptxas where it exists, else nvJitLink; no cubin
/// for wgmma / setmaxnreg PTX without ptxas) and registers/spills from its
/// report, with the launch facts. A failing assembler only leaves out the cubin
/// or the report (with a warning on stderr). A wgmma backward that spills
/// per ptxas and takes the pipelined tile step where the synchronous one
/// is a choice (KernelConfig::syncBackward) is built with the synchronous
/// step where that spills less; then, if the instructions and tiles are
/// the policy's (no mma, block_n, warps, rows or CTAs per SM asked for)
/// and it still spills, with mma.sync where that spills less (ties keep
/// the earlier kernel; one note on stderr per fallback taken);
/// gpuEntryMismatch takes any of them. Throws UserError or CompileError
/// like compileGpu.
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

/// The loaded backward kernels (`<name>_bwd_pre`, `<name>_bwd`,
/// `<name>_bwd_post`) of \p spec for \p device, through the same tiers as
/// loadOrCompileGpu: memory, disk cache (key with kind backward), else a
/// compile. The kernels are compiled for backwardSpec(\p spec) (LSE on;
/// the gradients do not depend on it); options.kind is set to
/// KernelKind::Backward and options.arch to gpuTargetFor(device); the other
/// options pick the backward's tiles (0: its tile rule) and its modes
/// (options.varlen, options.blockSparse: the forward's, so that
/// runVarlen / runBlockSparse take its calls). Throws UserError
/// (unsupported spec, options or device), CompileError, or DriverError
/// when loading fails.
std::shared_ptr<const runtime::GpuAttentionBackwardKernel>
loadOrCompileGpuBackward(const AttentionSpec &spec, runtime::Device &device,
                         GpuCompileOptions options = {},
                         runtime::DiskCache *cache = nullptr,
                         LoadReport *report = nullptr);

/// The loaded split-KV decode kernels (`<name>_decode`,
/// `<name>_decode_merge`) of \p spec for \p device, through the same tiers
/// as loadOrCompileGpu: memory (per context, cache directory and key), the
/// disk cache (key with kind decode; a hit whose configuration or PTX
/// entries do not match the request, gpuEntryMismatch, is a miss recompiled
/// with one warning), else a compile. options.kind is set to
/// KernelKind::Decode and options.arch to gpuTargetFor(device); the other
/// options pick the decode tiles (0: its tile rule). The kernel object is
/// shared by every caller of the same key in this process; its run() takes
/// a per-call workspace on the caller's stream (see
/// runtime::GpuDecodeKernel::run), so callers on several threads and
/// streams need no lock.
/// Throws UserError (unsupported spec, options or device, e.g. varlen,
/// block_sparse or a wgmma mma, which the decode kernel does not take),
/// CompileError, or DriverError when loading fails.
std::shared_ptr<const runtime::GpuDecodeKernel>
loadOrCompileGpuDecode(const AttentionSpec &spec, runtime::Device &device,
                       GpuCompileOptions options = {},
                       runtime::DiskCache *cache = nullptr,
                       LoadReport *report = nullptr);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_GPUCACHE_H
