//===- Jit.h - One compile-or-load entry point, CPU and GPU -----*- C++ -*-===//
//
// flashjit::loadOrCompile(spec, target, options, &report) is what a host
// application calls for either target: this process's memory tier, then
// the disk cache (runtime/Cache.h), else a compile and a store; one
// LoadReport says which served it. It returns a JitKernel holding the
// loaded kernel of its target and the one KernelConfig it was built with.
// loadOrCompileCpu (Compiler.h) and loadOrCompileGpu (GpuCache.h) are the
// per-target halves it calls. Library flashjit_gpu_cache (built where the
// CUDA toolkit is). Free of MLIR and LLVM headers.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_JIT_H
#define FLASHJIT_COMPILER_JIT_H

#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"

#include <memory>

namespace flashjit {

/// Where loadOrCompile's kernel runs.
enum class JitTarget : uint8_t {
  CPU, ///< the host CPU (runtime::CpuAttentionKernel)
  GPU  ///< a CUDA device (runtime::GpuAttentionKernel)
};

/// How loadOrCompile compiles and where it looks.
struct JitOptions {
  /// CPU tiles, modes, opt level, tile counting (JitTarget::CPU).
  CompileOptions cpu;
  /// GPU tiles, instructions and modes (JitTarget::GPU); gpu.arch is
  /// replaced by gpuTargetFor(device).
  GpuCompileOptions gpu;
  /// GPU: the device (nullptr: runtime::Device::get(0)).
  runtime::Device *device = nullptr;
  /// The disk cache (nullptr: runtime::defaultCache()).
  runtime::DiskCache *cache = nullptr;
};

/// A loaded kernel of either target. Cheap to copy (shared ownership);
/// thread-safe like the kernel it holds.
class JitKernel {
public:
  /// A CPU kernel.
  explicit JitKernel(std::shared_ptr<const CpuKernel> cpu);
  /// A GPU kernel.
  explicit JitKernel(std::shared_ptr<const runtime::GpuAttentionKernel> gpu);

  JitTarget target() const { return cpu_ ? JitTarget::CPU : JitTarget::GPU; }
  /// The configuration it was built with (KernelAbi.h): target (arch),
  /// kind, tiles and modes.
  const KernelConfig &config() const;
  /// The spec it computes.
  const AttentionSpec &spec() const;
  /// The CPU kernel (run, runVarlen, runBlockSparse, buildBlockMask, stage
  /// texts and times), or nullptr for a GPU kernel.
  const std::shared_ptr<const CpuKernel> &cpu() const { return cpu_; }
  /// The GPU kernel, or nullptr for a CPU kernel.
  const std::shared_ptr<const runtime::GpuAttentionKernel> &gpu() const {
    return gpu_;
  }

private:
  std::shared_ptr<const CpuKernel> cpu_;
  std::shared_ptr<const runtime::GpuAttentionKernel> gpu_;
};

/// The kernel of \p spec for \p target, from the cheapest source: this
/// process's memory tier, the disk cache, else a compile (stored). A cache
/// entry whose manifest, checksums or declared configuration disagree with
/// the request is a miss (one warning) and is recompiled. Fills \p report
/// if given. Throws UserError (unsupported spec, option or device),
/// CompileError, or DriverError (GPU loading), like loadOrCompileCpu and
/// loadOrCompileGpu.
JitKernel loadOrCompile(const AttentionSpec &spec, JitTarget target,
                        const JitOptions &options = {},
                        LoadReport *report = nullptr);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_JIT_H
