//===- Reference.h - float64 reference attention -----------------*- C++
//-*-===//
//
// The test oracle: attention computed row by row in double precision straight
// from the definition (Vaswani et al. 2017, eq. 1, with the project's mask and
// score-modifier semantics), with no tiling and no online softmax, so it is
// obviously right rather than fast. Every backend is checked against it.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_REFERENCE_H
#define FLASHJIT_FRONTEND_REFERENCE_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <vector>

namespace flashjit {

/// Reference outputs, contiguous, in double.
struct ReferenceOutput {
  AttentionShape shape;
  /// O [batch, heads_q, seqlen_q, head_dim_v].
  std::vector<double> o;
  /// LSE [batch, heads_q, seqlen_q], natural log; -inf for rows with no
  /// allowed key.
  std::vector<double> lse;

  double &oAt(int64_t b, int64_t h, int64_t i, int64_t d) {
    return o[((b * shape.headsQ + h) * shape.seqlenQ + i) * shape.headDimV + d];
  }
  double &lseAt(int64_t b, int64_t h, int64_t i) {
    return lse[(b * shape.headsQ + h) * shape.seqlenQ + i];
  }
};

/// Computes O and LSE for \p spec on q, k, v (see checkAttentionTensors for
/// shapes; any dtype, any strides). Scores are scale * q.k in double, then
/// the score modifier, then the mask; softmax runs over allowed keys only.
/// Keys whose modified score is -inf contribute nothing; a row with no
/// contributing key gets O = 0 and LSE = -inf exactly. Throws UserError for
/// bad tensors or arguments.
ReferenceOutput referenceAttention(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v,
                                   const Arguments &args = {});

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_REFERENCE_H
