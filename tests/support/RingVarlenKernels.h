//===- RingVarlenKernels.h - The ring's varlen GPU kernels ------*- C++ -*-===//
//
// The issue-20 ring kernels for packed varlen batches, apart from
// KernelMatrix.h so that adding them recompiles only their generator and
// test: the varlen GPU forward (GpuCompileOptions::varlen) and backward of
// ringKernelSpec(spec), run by ringAttentionGpuVarlen and
// ringAttentionBackwardGpuVarlen.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_SUPPORT_RINGVARLENKERNELS_H
#define FLASHJIT_TESTS_SUPPORT_RINGVARLENKERNELS_H

#include "KernelMatrix.h"

#include <vector>

namespace flashjit::testing {

/// \p spec is the attention over the whole sequence; the kernel is the
/// varlen forward of ringKernelSpec(spec): a causal mask with GQA, a
/// document mask (buffer reads at global per-sequence indices) and a
/// two-sided window; both 16-bit dtypes.
inline std::vector<RingKernel> ringVarlenKernels() {
  return {
      {"ringvl_causal_tl_d64_bf16_g2",
       matrixSpec("causal_tl", 64, DType::BF16, 4, 2)},
      {"ringvl_doc_d64_fp16_g1", matrixSpec("doc_id", 64, DType::F16, 2, 2)},
      {"ringvl_window_lr_d64_bf16_g1",
       matrixSpec("window_lr", 64, DType::BF16, 2, 2)},
  };
}

/// The varlen GPU backward (GpuCompileOptions::kind = Backward, varlen)
/// of ringKernelSpec(spec), run by ringAttentionBackwardGpuVarlen: a
/// causal mask with GQA and a document mask.
inline std::vector<RingKernel> ringVarlenBackwardKernels() {
  return {
      {"ringvlbwd_causal_tl_d64_bf16_g2",
       matrixSpec("causal_tl", 64, DType::BF16, 4, 2)},
      {"ringvlbwd_doc_d64_fp16_g1", matrixSpec("doc_id", 64, DType::F16, 2, 2)},
  };
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_SUPPORT_RINGVARLENKERNELS_H
