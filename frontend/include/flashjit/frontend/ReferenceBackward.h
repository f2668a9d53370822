//===- ReferenceBackward.h - float64 reference attention backward -*- C++
//-*-===//
//
// The oracle of the backward pass: the gradients of attention computed row
// by row in double precision, with no tiling, beside the float64 forward of
// Reference.h. For the loss L with dO = dL/dO (FlashAttention-2 paper,
// Algorithm 2, and the README's "Backward semantics"), per (batch, head,
// q_idx) row i and allowed key j (keys of the row the mask, the causal mask,
// the block mask and the score modifier admit: s'_ij != -inf):
//
//   s_ij   = scale * q_i . k_j            s'_ij = score_mod(s_ij, ...)
//   P_ij   = exp(s'_ij - LSE_i)           O_i = sum_j P_ij v_j
//   D_i    = dO_i . O_i
//   dV_j  += P_ij dO_i                    dP_ij = dO_i . v_j
//   dS'_ij = P_ij (dP_ij - D_i)           dS_ij = dS'_ij * d s'/d score
//   dQ_i  += scale * dS_ij k_j            dK_j += scale * dS_ij q_i
//   dBuffer[idx] += dS'_ij * d s'/d buffer[idx]   (each f32 buffer read)
//   dParam       += dS'_ij * d s'/d param         (each parameter asked for)
//   dSink[h]     -= exp(sink[h] - LSE_i) * D_i    (specs with a sink)
//
// with d s'/d ... the symbolic derivatives of Derivative.h. Under GQA, dK
// and dV of a key/value head sum over the query heads that read it. Masked
// entries, keys with P_ij = 0, rows with no allowed key (O = 0,
// LSE = -inf) and empty sequences contribute exactly zero, never NaN. O and
// LSE are recomputed here from Q, K and V (two passes, as the forward
// reference), so the oracle depends on no forward kernel's output.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_REFERENCEBACKWARD_H
#define FLASHJIT_FRONTEND_REFERENCEBACKWARD_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace flashjit {

/// Gradients of the f32 buffers and parameters a score modifier reads.
struct ReferenceDataGradients {
  /// dBuffer for every f32 buffer the score modifier reads, by name: as many
  /// elements as the bound buffer (Arguments::buffers), zero where no
  /// allowed element reads it.
  std::map<std::string, std::vector<double>> dBuffers;
  /// dParam for every parameter asked for, by name.
  std::map<std::string, double> dParams;
  /// d sink [heads_q] of a spec with an attention sink (empty otherwise):
  /// -sum over batch and rows of exp(sink[h] - LSE_i) * D_i.
  std::vector<double> dSink;
};

/// Reference gradients of a dense (or block-sparse) call, contiguous, in
/// double.
struct ReferenceGradients : ReferenceDataGradients {
  AttentionShape shape;
  /// dQ [batch, heads_q, seqlen_q, head_dim_qk].
  std::vector<double> dq;
  /// dK [batch, heads_kv, seqlen_k, head_dim_qk] (summed over the query
  /// heads of each key/value head).
  std::vector<double> dk;
  /// dV [batch, heads_kv, seqlen_k, head_dim_v] (likewise).
  std::vector<double> dv;

  double &dqAt(int64_t b, int64_t h, int64_t i, int64_t d) {
    return dq[((b * shape.headsQ + h) * shape.seqlenQ + i) * shape.headDimQK +
              d];
  }
  double &dkAt(int64_t b, int64_t h, int64_t j, int64_t d) {
    return dk[((b * shape.headsKV + h) * shape.seqlenK + j) * shape.headDimQK +
              d];
  }
  double &dvAt(int64_t b, int64_t h, int64_t j, int64_t d) {
    return dv[((b * shape.headsKV + h) * shape.seqlenK + j) * shape.headDimV +
              d];
  }
};

/// The gradients of attention for \p spec on q, k, v (shapes and any dtype
/// and strides as referenceAttention) given dO [batch, heads_q, seqlen_q,
/// head_dim_v] (any dtype and strides), with the semantics in this file's
/// header. With \p blockMask, the keys a row considers are those of
/// referenceAttention's block-sparse overload. \p params names the f32
/// parameters whose gradient is wanted. Throws UserError for bad tensors
/// (naming the tensor and field, "dO.shape[3] = 5, expected 4
/// (head_dim_v)"), arguments or block mask, a parameter in \p params the
/// score modifier does not read as f32, a score modifier that is not
/// differentiable (at the user's line), or a buffer read out of bounds.
///
/// \p roundOForD, when set, rounds each element of the reference's own
/// float64 O (recomputed from Q, K and V, never a kernel's output) to that
/// dtype (round to nearest even, as storeFromFloat) before D_i = dO_i . O_i,
/// and only there: P, dP and the other terms keep the float64 values. This
/// is the D of an implementation that stores O in that dtype and reads it
/// back (FlashAttention's backward reads the fp16/bf16 O), for tests that
/// judge a low-precision kernel against the error such an implementation
/// makes. Every gradient that reads D (dQ, dK, the buffer, parameter and
/// sink gradients) sees the rounded D; dV does not. nullopt (the default)
/// keeps D exact.
ReferenceGradients
referenceAttentionBackward(const AttentionSpec &spec, const TensorRef &q,
                           const TensorRef &k, const TensorRef &v,
                           const TensorRef &dO, const Arguments &args = {},
                           const std::vector<std::string> &params = {},
                           const BlockMask *blockMask = nullptr,
                           std::optional<DType> roundOForD = std::nullopt);

/// Reference gradients of a packed varlen call, contiguous, in double.
struct VarlenReferenceGradients : ReferenceDataGradients {
  VarlenShape shape;
  /// dQ [total_q, heads_q, head_dim_qk].
  std::vector<double> dq;
  /// dK [total_k, heads_kv, head_dim_qk].
  std::vector<double> dk;
  /// dV [total_k, heads_kv, head_dim_v].
  std::vector<double> dv;

  double &dqAt(int64_t t, int64_t h, int64_t d) {
    return dq[(t * shape.headsQ + h) * shape.headDimQK + d];
  }
  double &dkAt(int64_t t, int64_t h, int64_t d) {
    return dk[(t * shape.headsKV + h) * shape.headDimQK + d];
  }
  double &dvAt(int64_t t, int64_t h, int64_t d) {
    return dv[(t * shape.headsKV + h) * shape.headDimV + d];
  }
};

/// The gradients of referenceVarlenAttention (each packed sequence on its
/// own, indices counted from its first token), given dO [total_q, heads_q,
/// head_dim_v]. Empty sequences contribute nothing. \p roundOForD as
/// referenceAttentionBackward's. Errors as referenceAttentionBackward, plus
/// the cu_seqlens checks of checkVarlenTensors.
VarlenReferenceGradients referenceVarlenAttentionBackward(
    const AttentionSpec &spec, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &dO,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args = {}, const std::vector<std::string> &params = {},
    const BlockMask *blockMask = nullptr,
    std::optional<DType> roundOForD = std::nullopt);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_REFERENCEBACKWARD_H
