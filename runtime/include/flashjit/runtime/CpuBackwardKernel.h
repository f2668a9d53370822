//===- CpuBackwardKernel.h - Running generated CPU backward kernels -*- C++
//-*-===//
//
// The host side of a generated CPU backward kernel (attn-tile-backward):
// checks the caller's tensors, lays out the backward argument list
// (KernelAbi.h, abi::bwd), runs the dK/dV kernel and the dQ kernel over
// LLVM's thread pool, transposes a BlockMask for the K/V-outer kernel and
// reduces the buffer and parameter gradients in a fixed order. No MLIR.
//
// Semantics (README, "Backward"): for the loss L with dO = dL/dO,
//   P = exp(s' - LSE) on allowed keys, D = rowsum(dO * O),
//   dV = P^T dO, dP = dO V^T, dS' = P * (dP - D), dS = dS' * ds'/ds,
//   dQ = scale * dS K, dK = scale * dS^T Q,
//   dBuffer[idx] += dS' * ds'/dbuffer[idx], dParam += dS' * ds'/dparam,
// with K/V gradients summed over the query heads of each K/V head (GQA).
// Masked entries, rows with no allowed key (LSE = -inf) and empty
// sequences contribute exactly zero. Deterministic: every element of dQ,
// dK and dV is accumulated by one work item in a fixed order, and the
// buffer/parameter gradients by fixed ranges of work items whose partial
// sums are added in order; the result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_CPUBACKWARDKERNEL_H
#define FLASHJIT_RUNTIME_CPUBACKWARDKERNEL_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/DataGradients.h"

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flashjit {

namespace runtime {

/// A runnable CPU backward kernel. Thread-safe: runs may be concurrent.
class CpuBackwardKernel {
public:
  /// Wraps \p dkdvFn and \p dqFn, the packed entries `<symbol>` and
  /// `<symbol>_dq` of \p spec's backward kernel (\p config: arch "cpu",
  /// kind Backward, its tile sizes cpuBlockM/blockN, varlen and
  /// block-sparse flags; countTiles is ignored); \p owner keeps their code
  /// alive. Throws UserError for non-positive tile sizes.
  CpuBackwardKernel(AttentionSpec spec, KernelConfig config, CpuKernelFn dkdvFn,
                    CpuKernelFn dqFn, std::shared_ptr<void> owner);

  /// Gradients of a dense call: q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk],
  /// v [B, Hkv, Sk, Dv] as the forward got them, o [B, Hq, Sq, Dv] and lse
  /// [B, Hq, Sq] (fp32, natural log) as the forward wrote them, dO like o
  /// (o's dtype); writes dq like q, dk like k, dv like v (the inputs'
  /// dtypes, fp32 accumulation), overwriting every element. Returns the
  /// gradients of every f32 buffer and parameter the score modifier reads.
  /// Any strides. Throws UserError for bad tensors (naming the tensor and
  /// field), arguments, a varlen or block-sparse kernel (runVarlen /
  /// runBlockSparse), and after the run for a buffer read out of range.
  DataGradients run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                    const TensorRef &o, const TensorRef &lse,
                    const TensorRef &dO, const TensorRef &dq,
                    const TensorRef &dk, const TensorRef &dv,
                    const Arguments &args = {}, int numThreads = 0) const;

  /// run() for a block-sparse kernel, with the BlockMask the forward used
  /// (its tiles must equal this kernel's; checkBlockMaskFor).
  DataGradients runBlockSparse(const TensorRef &q, const TensorRef &k,
                               const TensorRef &v, const TensorRef &o,
                               const TensorRef &lse, const TensorRef &dO,
                               const TensorRef &dq, const TensorRef &dk,
                               const TensorRef &dv, const BlockMask &blockMask,
                               const Arguments &args = {},
                               int numThreads = 0) const;

  /// Gradients of a packed varlen call (CpuAttentionKernel::runVarlen's
  /// layout: q [total_q, Hq, Dqk], lse [Hq, total_q], dO like o, dq like q,
  /// dk like k, dv like v). Empty sequences own no rows. \p blockMask is
  /// required by block-sparse kernels and must be null otherwise.
  DataGradients
  runVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
            const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
            const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
            std::span<const int32_t> cuSeqlensQ,
            std::span<const int32_t> cuSeqlensK, const Arguments &args = {},
            const BlockMask *blockMask = nullptr, int numThreads = 0) const;

  /// The spec whose gradients this kernel computes.
  const AttentionSpec &spec() const { return spec_; }
  /// The configuration it was compiled with (KernelAbi.h).
  const KernelConfig &config() const { return config_; }

private:
  AttentionSpec spec_;
  KernelConfig config_;
  CpuKernelFn dkdv_, dq_;
  std::shared_ptr<void> owner_;
  std::vector<BufferDecl> buffers_;
  std::vector<ParamDecl> params_;
};

/// Loads the CPU backward kernel of \p artifacts (made by the compiler's
/// compileCpuBackwardArtifacts: a cache entry or a bundle item): like
/// loadCpuKernel, looking up the packed entries `<entry>_packed` (dK/dV) and
/// `<entry>_dq_packed` (abi::bwd::kDqSuffix). No compiler. Throws UserError
/// like loadCpuKernel (not "cpu", no kernel.so, missing CPU features, a
/// missing entry, `<entry>_config` not artifacts.config), and when
/// artifacts.config.kind is not KernelKind::Backward or the spec text does
/// not return LSE (not a backwardSpec).
std::shared_ptr<const CpuBackwardKernel>
loadCpuBackwardKernel(const KernelArtifacts &artifacts);

} // namespace runtime
} // namespace flashjit

#endif // FLASHJIT_RUNTIME_CPUBACKWARDKERNEL_H
