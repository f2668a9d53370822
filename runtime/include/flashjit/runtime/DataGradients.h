//===- DataGradients.h - Gradients of a variant's buffers and parameters --===//
//
// What a backward run returns besides dQ, dK and dV: the gradients of the
// f32 buffers and f32 parameters the score modifier reads (CPU:
// CpuBackwardKernel; GPU: GpuAttentionBackwardKernel). Header-only.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_DATAGRADIENTS_H
#define FLASHJIT_RUNTIME_DATAGRADIENTS_H

#include <map>
#include <string>
#include <vector>

namespace flashjit {

/// Gradients of the f32 buffers and f32 parameters the score modifier
/// reads (fp32).
struct DataGradients {
  /// dBuffer for every f32 buffer the score modifier reads, by name: as
  /// many elements as the bound buffer, zero where nothing reads it.
  std::map<std::string, std::vector<float>> dBuffers;
  /// dParam for every f32 parameter the score modifier reads, by name.
  std::map<std::string, float> dParams;
  /// d sink [heads_q] of a spec with an attention sink (empty otherwise):
  /// -sum over batch and rows of exp(sink[h] - LSE_i) * dO_i . O_i.
  std::vector<float> dSink;
};

} // namespace flashjit

#endif // FLASHJIT_RUNTIME_DATAGRADIENTS_H
