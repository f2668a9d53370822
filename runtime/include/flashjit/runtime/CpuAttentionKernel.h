//===- CpuAttentionKernel.h - Running generated CPU kernels ------*- C++
//-*-===//
//
// The host side of a generated CPU kernel, without the compiler: checks the
// caller's tensors and arguments, lays out the kernel's argument list
// (KernelAbi.h), splits the (batch, head, q tile) work items over LLVM's
// thread pool and reports out-of-range buffer reads and tile counts. The
// kernel comes as a packed function pointer, from the compiler's in-memory
// JIT or from a kernel.so that loadCpuKernel() dlopens out of a cache entry
// or bundle. Needs no MLIR, no GPU and no CUDA driver.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_CPUATTENTIONKERNEL_H
#define FLASHJIT_RUNTIME_CPUATTENTIONKERNEL_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/TileClass.h"
#include "flashjit/frontend/Variant.h"

#include <memory>
#include <string>
#include <vector>

namespace flashjit {

/// What a CPU run reports besides its outputs.
struct RunStats {
  /// Tile classes seen by the kernel, summed over batches and heads; only
  /// filled when compiled with CompileOptions::countTiles.
  TileCounts tiles;
  bool tilesCounted = false;
};

namespace runtime {

struct KernelArtifacts;

/// The tile size (block_m and block_n) and LLVM opt level the compiler uses
/// when CompileOptions leaves them at their defaults; `flashjit bundle
/// --target cpu` builds kernels with them.
inline constexpr int kDefaultCpuBlock = 64;
inline constexpr int kDefaultCpuOptLevel = 2;

/// A packed kernel entry point: args[i] points at argument i of the
/// KernelAbi.h argument list.
using CpuKernelFn = void (*)(void **args);

/// What the host side needs to know about a generated CPU kernel.
struct CpuKernelInfo {
  /// Queries and keys per tile the kernel was compiled with.
  int blockM = 64;
  int blockN = 64;
  /// Whether the kernel counts tile classes (RunStats::tiles).
  bool countTiles = false;
};

/// A runnable CPU kernel. Thread-safe: run() may be called concurrently.
class CpuAttentionKernel {
public:
  /// Wraps \p fn, the packed entry of \p spec's kernel; \p owner keeps its
  /// code alive (a JIT engine or a dlopen handle) as long as this object.
  /// Throws UserError if \p info's tile sizes are not positive.
  CpuAttentionKernel(AttentionSpec spec, CpuKernelInfo info, CpuKernelFn fn,
                     std::shared_ptr<void> owner);

  /// Computes O (and LSE when the spec returns it) for q [B, Hq, Sq, Dqk],
  /// k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv] into o [B, Hq, Sq, Dv] and lse
  /// [B, Hq, Sq] (fp32), any strides, host memory. \p lse is required when
  /// spec().returnLse and ignored otherwise. Work is spread over
  /// \p numThreads threads (0: all cores). Throws UserError for bad tensors
  /// or arguments, and after the run for a buffer read out of range (such
  /// reads load nothing and give 0; the outputs are then unspecified).
  RunStats run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
               const TensorRef &o, const TensorRef *lse,
               const Arguments &args = {}, int numThreads = 0) const;

  /// The spec this kernel computes.
  const AttentionSpec &spec() const { return spec_; }
  const CpuKernelInfo &info() const { return info_; }

private:
  AttentionSpec spec_;
  CpuKernelInfo info_;
  CpuKernelFn fn_;
  std::shared_ptr<void> owner_;
  /// Buffers and parameters in kernel-argument order (sorted by name).
  std::vector<BufferDecl> buffers_;
  std::vector<ParamDecl> params_;
};

/// Loads the CPU kernel of \p artifacts (a cache entry or a bundle, made by
/// the compiler's compileCpuArtifacts): parses its spec text, dlopens
/// kernel.so from memory and looks up the packed entry `<entry>_packed`. No
/// compiler, no code generation. Throws UserError if the artifacts are not
/// for "cpu", lack kernel.so, were compiled for CPU features this host
/// lacks (naming them), or the shared object cannot be loaded or lacks the
/// entry (with dlerror's text).
std::shared_ptr<const CpuAttentionKernel>
loadCpuKernel(const KernelArtifacts &artifacts);

} // namespace runtime
} // namespace flashjit

#endif // FLASHJIT_RUNTIME_CPUATTENTIONKERNEL_H
