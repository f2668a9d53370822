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
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <span>
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

/// The same, with the block-sparse semantics of \p blockMask (BlockMask.h):
/// key j of query i is considered only when its tile is listed partial (the
/// mask then decides) or full (allowed without evaluating the mask). The
/// mask must fit the call (checkBlockMaskFor); throws UserError otherwise.
ReferenceOutput referenceAttention(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const Arguments &args,
                                   const BlockMask &blockMask);

/// One query row: batch index, query head, query position.
struct RowIndex {
  int64_t batch = 0, head = 0, qIdx = 0;
};

/// The reference output of one query row.
struct ReferenceRow {
  RowIndex row;
  /// O of the row [head_dim_v].
  std::vector<double> o;
  /// LSE of the row (natural log; -inf when no key is allowed).
  double lse = 0.0;
};

/// The reference of the query rows \p rows only, with exactly the values
/// referenceAttention() gives for them (the same row computation, seqlen_q
/// and seqlen_k of the whole call): for checking big problems on sampled
/// rows. Throws UserError for bad tensors or arguments, or a row outside
/// [batch, heads_q, seqlen_q].
std::vector<ReferenceRow> referenceAttentionRows(const AttentionSpec &spec,
                                                 const TensorRef &q,
                                                 const TensorRef &k,
                                                 const TensorRef &v,
                                                 std::span<const RowIndex> rows,
                                                 const Arguments &args = {});

/// Reference outputs of a packed varlen call, contiguous, in double.
struct VarlenReferenceOutput {
  VarlenShape shape;
  /// O [total_q, heads_q, head_dim_v].
  std::vector<double> o;
  /// LSE [heads_q, total_q] (FlashAttention's varlen layout).
  std::vector<double> lse;

  double &oAt(int64_t t, int64_t h, int64_t d) {
    return o[(t * shape.headsQ + h) * shape.headDimV + d];
  }
  double &lseAt(int64_t h, int64_t t) { return lse[h * shape.totalQ + t]; }
};

/// Attention of each packed sequence on its own (checkVarlenTensors gives
/// the layout): for sequence b, the mask and score modifier see batch = b,
/// q_idx and kv_idx counted from the sequence's first token and seqlen_q /
/// seqlen_k of that sequence, so causal alignment applies per sequence.
/// With \p blockMask, its tile coordinates are per sequence as well.
VarlenReferenceOutput referenceVarlenAttention(
    const AttentionSpec &spec, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, std::span<const int32_t> cuSeqlensQ,
    std::span<const int32_t> cuSeqlensK, const Arguments &args = {},
    const BlockMask *blockMask = nullptr);

/// The exact block mask of spec.effectiveMask() for tiles of \p blockM x
/// \p blockN, by evaluating the mask at every element (the oracle of the
/// generated builder): a tile is full when the mask holds at every element
/// of the tile clipped to the sequence, empty when at none, partial
/// otherwise; lists are in increasing tile order; extents follow
/// blockMaskExtent. Throws UserError for bad sizes or arguments.
BlockMask referenceBlockMask(const AttentionSpec &spec, int64_t blockM,
                             int64_t blockN, int64_t batch, int64_t seqlenQ,
                             int64_t seqlenK, const Arguments &args = {});

/// The same for a packed varlen batch (tiles local to each sequence).
BlockMask referenceVarlenBlockMask(const AttentionSpec &spec, int64_t blockM,
                                   int64_t blockN,
                                   std::span<const int32_t> cuSeqlensQ,
                                   std::span<const int32_t> cuSeqlensK,
                                   const Arguments &args = {});

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_REFERENCE_H
