//===- SinkGradient.h - d sink of the attention backward on the GPU -*- C++
//-*-===//
//
// The one gradient an attention sink adds to the backward (README,
// "Attention sinks"): for query head h,
//
//   d sink[h] = - sum_{b, i} exp(sink[h] - LSE[b,h,i]) * D[b,h,i],
//   D[b,h,i]  = sum_d dO[b,h,i,d] * O[b,h,i,d],
//
// from the forward's O and LSE (which already includes the sink) and the
// upstream dO. dQ, dK and dV need nothing new (GpuAttentionBackwardKernel
// recomputes P from that LSE), so this is a small kernel of its own: one
// CTA per query head, each thread a fixed set of rows in a fixed order,
// then a fixed shared-memory tree in double, so the result is bit-identical
// run to run (deterministic). CUDA C compiled by NVRTC when the object is
// made (no MLIR; the module is loaded once per object).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_SINKGRADIENT_H
#define FLASHJIT_RUNTIME_SINKGRADIENT_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/Module.h"

#include <cuda.h>

#include <string_view>

namespace flashjit::runtime {

class Device;

/// The d sink kernel of one device. Thread-safe (run holds no state).
class GpuSinkGradient {
public:
  /// Compiles the kernel for \p device's architecture with NVRTC and loads
  /// it. Throws DriverError if NVRTC or loading fails.
  explicit GpuSinkGradient(Device &device);

  /// Writes d sink [heads_q] (fp32, device memory, overwritten) of a spec
  /// with a sink: \p o and \p dO [B, Hq, Sq, Dv] in the spec's dtype O
  /// (any strides, head_dim stride 1), \p lse [B, Hq, Sq] fp32 (the
  /// forward's, which includes the sink), the sink in \p args (device
  /// memory, Arguments::sink). Varlen calls pass o/dO [total_q, Hq, Dv] and
  /// lse [Hq, total_q] (rank 3 and 2). A head whose sink is -inf gets 0.
  /// Asynchronous on \p stream. Throws UserError for a spec without a sink,
  /// a missing or short sink, null \p dSink, or tensors that do not match
  /// the spec (naming the field).
  void run(const AttentionSpec &spec, const TensorRef &o, const TensorRef &dO,
           const TensorRef &lse, const Arguments &args, float *dSink,
           CUstream stream = nullptr) const;

  /// The kernel's CUDA C source (the no-GPU tests compile it with NVRTC).
  static std::string_view source();
  /// The kernel's name in source().
  static constexpr const char *kKernelName = "flashjit_sink_grad";
  /// Threads per CTA (one CTA per query head).
  static constexpr int kThreads = 256;

private:
  Device *device_;
  Module module_;
  Function function_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_SINKGRADIENT_H
