//===- CpuAttentionKernel.h - Running generated CPU kernels ----*- C++ -*-===//
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
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/TileClass.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/KernelAbi.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flashjit {

/// What a CPU run reports besides its outputs.
struct RunStats {
  /// Tile classes seen by the kernel, summed over batches and heads; only
  /// filled when compiled with CompileOptions::countTiles. Block-sparse
  /// runs count the tiles they visit only (a listed full tile as full, a
  /// listed partial one as the run-time classifier finds it), so tiles the
  /// block mask leaves out appear nowhere.
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

/// A runnable CPU kernel. Thread-safe: run() may be called concurrently.
class CpuAttentionKernel {
public:
  /// Wraps \p fn, the packed entry of \p spec's kernel, and (block-sparse
  /// kernels) \p blockMaskFn, the packed entry of its block-mask builder;
  /// \p owner keeps their code alive (a JIT engine or a dlopen handle) as
  /// long as this object. \p config is the kernel's configuration (arch
  /// "cpu"; cpuBlockM, blockN, countTiles, varlen, blockSparse). Throws
  /// UserError if its tile sizes are not positive.
  CpuAttentionKernel(AttentionSpec spec, KernelConfig config, CpuKernelFn fn,
                     std::shared_ptr<void> owner,
                     CpuKernelFn blockMaskFn = nullptr);

  /// Computes O (and LSE when the spec returns it) for q [B, Hq, Sq, Dqk],
  /// k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv] into o [B, Hq, Sq, Dv] and lse
  /// [B, Hq, Sq] (fp32), any strides, host memory. \p lse is required when
  /// spec().returnLse and ignored otherwise. Work is spread over
  /// \p numThreads threads (0: all cores). Throws UserError for bad tensors
  /// or arguments, for a varlen or block-sparse kernel (use runVarlen /
  /// runBlockSparse), and after the run for a buffer read out of range
  /// (such reads load nothing and give 0; the outputs are then
  /// unspecified).
  RunStats run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
               const TensorRef &o, const TensorRef *lse,
               const Arguments &args = {}, int numThreads = 0) const;

  /// run() for a block-sparse kernel: only the tiles \p blockMask lists are
  /// visited (BlockMask.h states the semantics; FlexAttention's BlockMask
  /// form). Throws UserError unless the kernel is block-sparse and not
  /// varlen and the mask fits the call (checkBlockMaskFor: tile sizes equal
  /// to the kernel's, batch 1 or B, heads 1 or heads_q, the call's
  /// seqlens), plus everything run() throws.
  RunStats runBlockSparse(const TensorRef &q, const TensorRef &k,
                          const TensorRef &v, const TensorRef &o,
                          const TensorRef *lse, const BlockMask &blockMask,
                          const Arguments &args = {}, int numThreads = 0) const;

  /// Runs a varlen kernel on packed sequences (FlashAttention's
  /// flash_attn_varlen_func layout): q [total_q, heads_q, head_dim_qk],
  /// k [total_k, heads_kv, head_dim_qk], v [total_k, heads_kv, head_dim_v],
  /// o [total_q, heads_q, head_dim_v], lse [heads_q, total_q] (fp32), any
  /// strides; sequence b is query tokens [cu_seqlens_q[b],
  /// cu_seqlens_q[b + 1]) and key tokens [cu_seqlens_k[b],
  /// cu_seqlens_k[b + 1]) (int32, batch + 1 entries, first 0,
  /// non-decreasing, last = total). Masks and score modifiers see
  /// batch = b, q_idx/kv_idx from the sequence's first token and that
  /// sequence's seqlen_q/seqlen_k, so causal alignment is per sequence.
  /// Sequences of length 0 are allowed: nothing of theirs is written.
  /// \p blockMask is required by block-sparse kernels (tiles local to each
  /// sequence; see BlockMask.h) and must be null otherwise. Throws UserError
  /// for a kernel compiled without varlen, a block mask given to (or missing
  /// from) the wrong kind of kernel, and for bad tensors, cu_seqlens
  /// (naming the entry), arguments or block masks.
  RunStats runVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                     const TensorRef &o, const TensorRef *lse,
                     std::span<const int32_t> cuSeqlensQ,
                     std::span<const int32_t> cuSeqlensK,
                     const Arguments &args = {},
                     const BlockMask *blockMask = nullptr,
                     int numThreads = 0) const;

  /// Builds the block mask of spec().effectiveMask() for \p batch x
  /// seqlen_q x seqlen_k calls with \p args (the mask's parameters and
  /// buffers; reuse the result only while they are unchanged), by running
  /// the kernel's generated builder: each (q tile, kv tile) is classified
  /// by interval arithmetic and, where that cannot decide (masks reading
  /// buffers), by evaluating the mask at each element. Extents follow
  /// blockMaskExtent (batch 1 unless the mask reads `batch`, heads 1 unless
  /// it reads `head`). The caller owns the result and passes it to
  /// runBlockSparse. Throws UserError unless the kernel is block-sparse and
  /// not varlen, for negative sizes, bad arguments, and buffer reads out of
  /// range.
  BlockMask buildBlockMask(int64_t batch, int64_t seqlenQ, int64_t seqlenK,
                           const Arguments &args = {},
                           int numThreads = 0) const;

  /// The same for a packed varlen batch (block-sparse varlen kernels): one
  /// row block per sequence, tiles local to each sequence; the mask keeps
  /// copies of the cu_seqlens and only fits calls with the same ones.
  BlockMask buildVarlenBlockMask(std::span<const int32_t> cuSeqlensQ,
                                 std::span<const int32_t> cuSeqlensK,
                                 const Arguments &args = {},
                                 int numThreads = 0) const;

  /// The spec this kernel computes.
  const AttentionSpec &spec() const { return spec_; }
  /// The configuration it was compiled with (KernelAbi.h).
  const KernelConfig &config() const { return info_; }

private:
  AttentionSpec spec_;
  KernelConfig info_;
  CpuKernelFn fn_;
  std::shared_ptr<void> owner_;
  CpuKernelFn blockMaskFn_ = nullptr;
  /// Buffers and parameters in kernel-argument order (sorted by name).
  std::vector<BufferDecl> buffers_;
  std::vector<ParamDecl> params_;
};

/// Loads the CPU kernel of \p artifacts (a cache entry or a bundle, made by
/// the compiler's compileCpuArtifacts): parses its spec text, dlopens
/// kernel.so from memory and looks up the packed entry `<entry>_packed`. No
/// compiler, no code generation. Throws UserError if the artifacts are not
/// for "cpu" or not of KernelKind::Forward (a backward entry:
/// loadCpuBackwardKernel), lack kernel.so, were compiled for CPU features this
/// host lacks (naming them), the shared object cannot be loaded or lacks the
/// entry (with dlerror's text), or the configuration it declares
/// (`<entry>_config`, abi::cpuConfigWords) is not artifacts.config.
std::shared_ptr<const CpuAttentionKernel>
loadCpuKernel(const KernelArtifacts &artifacts);

} // namespace runtime
} // namespace flashjit

#endif // FLASHJIT_RUNTIME_CPUATTENTIONKERNEL_H
