//===- Reference.cpp - float64 reference attention ------------------------===//
//
// Straight from the definition, one query row at a time: every score in
// double, the score modifier and the mask through the interpreter, a two-pass
// softmax (max, then sum) over the allowed keys. Deliberately simple: this is
// the oracle, not a kernel. The varlen and block-sparse oracles run the same
// row function on the rows of each sequence and with the keys a block mask
// admits; the block-mask oracle evaluates the mask at every element.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Reference.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Interpreter.h"

#include "ReferenceCommon.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace flashjit {
namespace {

using detail::kAllowed;
using detail::kMasked;
using detail::kSkip;
using detail::nanMax;
using detail::tileStates;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// What the reference needs of a spec, computed once.
struct Problem {
  Expr mask;
  Expr scoreMod;
  double scale;
  const Arguments &args;
  int64_t group; // heads_q / heads_kv
  int64_t headDimQK, headDimV;
  /// sink[heads_q] of a spec with a sink, else null.
  const float *sink;
  int64_t headsKV;
};

/// Where the operands of one query row live: element d of the query row at
/// qBase + d * qD, element d of key j at kBase + j * kStep + d * kD (V
/// alike).
struct RowOperands {
  const TensorRef &q, &k, &v;
  int64_t qBase, qD;
  int64_t kBase, kStep, kD;
  int64_t vBase, vStep, vD;
};

/// Attends one query row: keys j < p.seqlenK allowed by the mask (or by
/// \p tiles, when given, with tile j / blockN), softmax over the finite
/// modified scores. Writes head_dim_v values to \p oRow and returns the LSE.
double attendRow(const Problem &pr, EvalPoint p, const RowOperands &r,
                 const std::vector<char> *tiles, int64_t blockN, double *oRow) {
  const int64_t sk = p.seqlenK;
  // FP8 inputs: real values are stored * descale (Fp8.h), applied in
  // double; 1 for 16/32-bit tensors.
  const int64_t hk = p.head / pr.group;
  const double qkDescale =
      descaleAt(pr.args.qDescale, p.batch, hk, pr.headsKV) *
      descaleAt(pr.args.kDescale, p.batch, hk, pr.headsKV);
  const double vDescale = descaleAt(pr.args.vDescale, p.batch, hk, pr.headsKV);
  std::vector<double> s(sk);
  std::vector<char> use(sk);
  double m = kNegInf;
  for (int64_t j = 0; j < sk; ++j) {
    p.kvIdx = j;
    char state = tiles ? (*tiles)[j / blockN] : kMasked;
    use[j] = state == kAllowed ||
             (state == kMasked && evaluate(pr.mask, p, pr.args).asBool());
    if (!use[j])
      continue;
    double dot = 0.0; // of the stored values (fp8: before the descales)
    for (int64_t d = 0; d < pr.headDimQK; ++d)
      dot += static_cast<double>(
                 loadAsFloat(r.q.data, r.q.dtype, r.qBase + d * r.qD)) *
             static_cast<double>(loadAsFloat(r.k.data, r.k.dtype,
                                             r.kBase + j * r.kStep + d * r.kD));
    p.score = pr.scale * qkDescale * dot;
    s[j] = evaluate(pr.scoreMod, p, pr.args).floatValue;
    // A key whose modified score is -inf carries no weight.
    if (s[j] == kNegInf)
      use[j] = 0;
    else
      m = nanMax(m, s[j]);
  }
  for (int64_t d = 0; d < pr.headDimV; ++d)
    oRow[d] = 0.0;
  // The sink joins the denominator as one more logit with no value.
  const double sink = pr.sink ? pr.sink[p.head] : kNegInf;
  if (m == kNegInf && sink == kNegInf)
    return kNegInf; // no allowed key and no sink: O = 0, LSE = -inf
  m = nanMax(m, sink);
  double l = sink == kNegInf ? 0.0 : std::exp(sink - m);
  for (int64_t j = 0; j < sk; ++j)
    if (use[j])
      l += std::exp(s[j] - m);
  for (int64_t j = 0; j < sk; ++j) {
    if (!use[j])
      continue;
    double pj = vDescale * std::exp(s[j] - m) / l;
    for (int64_t d = 0; d < pr.headDimV; ++d)
      oRow[d] +=
          pj * static_cast<double>(loadAsFloat(
                   r.v.data, r.v.dtype, r.vBase + j * r.vStep + d * r.vD));
  }
  return m + std::log(l);
}

Problem problemOf(const AttentionSpec &spec, const Arguments &args,
                  int64_t batch, int64_t headsQ, int64_t headsKV) {
  args.validateSinkFor(spec, /*hostValues=*/true);
  args.validateDescalesFor(spec, batch, /*hostValues=*/true);
  return {spec.effectiveMask(),
          spec.variant.scoreExpr(),
          spec.effectiveScale(),
          args,
          headsQ / headsKV,
          spec.headDimQK,
          spec.headDimV,
          spec.sink ? static_cast<const float *>(args.sink.data) : nullptr,
          headsKV};
}

ReferenceOutput denseReference(const AttentionSpec &spec, const TensorRef &q,
                               const TensorRef &k, const TensorRef &v,
                               const Arguments &args, const BlockMask *bm) {
  spec.validate();
  AttentionShape shape = checkAttentionTensors(spec, q, k, v);
  args.validateFor(spec.variant);
  if (bm)
    checkBlockMaskFor(*bm, bm->blockM, bm->blockN, shape.batch, shape.headsQ,
                      shape.seqlenQ, shape.seqlenK);
  Problem pr = problemOf(spec, args, shape.batch, shape.headsQ, shape.headsKV);

  ReferenceOutput out;
  out.shape = shape;
  out.o.assign(shape.batch * shape.headsQ * shape.seqlenQ * shape.headDimV,
               0.0);
  out.lse.assign(shape.batch * shape.headsQ * shape.seqlenQ, kNegInf);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.headsQ; ++h) {
      const int64_t hk = h / pr.group; // GQA: query head h reads K/V head hk
      std::vector<char> tiles;
      for (int64_t i = 0; i < shape.seqlenQ; ++i) {
        if (bm && i % bm->blockM == 0)
          tiles = tileStates(*bm, b, h, i / bm->blockM);
        RowOperands r{q,
                      k,
                      v,
                      q.offset(b, h, i, 0),
                      q.strides[3],
                      k.offset(b, hk, 0, 0),
                      k.strides[2],
                      k.strides[3],
                      v.offset(b, hk, 0, 0),
                      v.strides[2],
                      v.strides[3]};
        EvalPoint p{b, h, i, 0, shape.seqlenQ, shape.seqlenK, 0.0};
        out.lseAt(b, h, i) =
            attendRow(pr, p, r, bm ? &tiles : nullptr, bm ? bm->blockN : 1,
                      &out.oAt(b, h, i, 0));
      }
    }
  }
  return out;
}

/// Fills \p bm's lists for one (b, h) of a seqlenQ x seqlenK problem by
/// evaluating the mask at every element of every tile.
void classifyRows(BlockMask &bm, const Expr &mask, const Arguments &args,
                  int64_t b, int64_t h, int64_t seqlenQ, int64_t seqlenK) {
  const int64_t nq = (seqlenQ + bm.blockM - 1) / bm.blockM,
                nk = (seqlenK + bm.blockN - 1) / bm.blockN;
  for (int64_t m = 0; m < nq; ++m) {
    const int64_t r = bm.row(b, h, m);
    for (int64_t n = 0; n < nk; ++n) {
      bool any = false, all = true;
      EvalPoint p{b, h, 0, 0, seqlenQ, seqlenK, 0.0};
      for (int64_t i = m * bm.blockM;
           i < std::min(seqlenQ, (m + 1) * bm.blockM); ++i)
        for (int64_t j = n * bm.blockN;
             j < std::min(seqlenK, (n + 1) * bm.blockN); ++j) {
          p.qIdx = i;
          p.kvIdx = j;
          bool allowed = evaluate(mask, p, args).asBool();
          any = any || allowed;
          all = all && allowed;
        }
      if (all)
        bm.fullKvIndices[r * bm.numKvTiles + bm.fullKvNumBlocks[r]++] =
            static_cast<int32_t>(n);
      else if (any)
        bm.kvIndices[r * bm.numKvTiles + bm.kvNumBlocks[r]++] =
            static_cast<int32_t>(n);
    }
  }
}

BlockMask emptyBlockMask(int64_t blockM, int64_t blockN, BlockMaskExtent ext,
                         int64_t seqlenQ, int64_t seqlenK) {
  if (blockM < 1 || blockN < 1)
    throw UserError("block_m and block_n must be positive",
                    std::source_location());
  BlockMask bm;
  bm.blockM = blockM;
  bm.blockN = blockN;
  bm.seqlenQ = seqlenQ;
  bm.seqlenK = seqlenK;
  bm.batch = ext.batch;
  bm.heads = ext.heads;
  bm.numQTiles = (seqlenQ + blockM - 1) / blockM;
  bm.numKvTiles = (seqlenK + blockN - 1) / blockN;
  int64_t rows = bm.batch * bm.heads * bm.numQTiles;
  bm.kvNumBlocks.assign(rows, 0);
  bm.fullKvNumBlocks.assign(rows, 0);
  bm.kvIndices.assign(rows * bm.numKvTiles, 0);
  bm.fullKvIndices.assign(rows * bm.numKvTiles, 0);
  return bm;
}

} // namespace

ReferenceOutput referenceAttention(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const Arguments &args) {
  return denseReference(spec, q, k, v, args, nullptr);
}

ReferenceOutput referenceAttention(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const Arguments &args,
                                   const BlockMask &blockMask) {
  return denseReference(spec, q, k, v, args, &blockMask);
}

std::vector<ReferenceRow>
referenceAttentionRows(const AttentionSpec &spec, const TensorRef &q,
                       const TensorRef &k, const TensorRef &v,
                       std::span<const RowIndex> rows, const Arguments &args) {
  spec.validate();
  AttentionShape shape = checkAttentionTensors(spec, q, k, v);
  args.validateFor(spec.variant);
  Problem pr = problemOf(spec, args, shape.batch, shape.headsQ, shape.headsKV);
  std::vector<ReferenceRow> out;
  out.reserve(rows.size());
  for (const RowIndex &row : rows) {
    if (row.batch < 0 || row.batch >= shape.batch || row.head < 0 ||
        row.head >= shape.headsQ || row.qIdx < 0 || row.qIdx >= shape.seqlenQ)
      throw UserError(fmt::format("reference row (batch {}, head {}, q_idx "
                                  "{}) is outside [{}, {}, {}]",
                                  row.batch, row.head, row.qIdx, shape.batch,
                                  shape.headsQ, shape.seqlenQ),
                      std::source_location());
    const int64_t hk = row.head / pr.group;
    RowOperands r{q,
                  k,
                  v,
                  q.offset(row.batch, row.head, row.qIdx, 0),
                  q.strides[3],
                  k.offset(row.batch, hk, 0, 0),
                  k.strides[2],
                  k.strides[3],
                  v.offset(row.batch, hk, 0, 0),
                  v.strides[2],
                  v.strides[3]};
    EvalPoint p{row.batch,     row.head,      row.qIdx, 0,
                shape.seqlenQ, shape.seqlenK, 0.0};
    ReferenceRow result;
    result.row = row;
    result.o.assign(shape.headDimV, 0.0);
    result.lse = attendRow(pr, p, r, nullptr, 1, result.o.data());
    out.push_back(std::move(result));
  }
  return out;
}

VarlenReferenceOutput
referenceVarlenAttention(const AttentionSpec &spec, const TensorRef &q,
                         const TensorRef &k, const TensorRef &v,
                         std::span<const int32_t> cuSeqlensQ,
                         std::span<const int32_t> cuSeqlensK,
                         const Arguments &args, const BlockMask *bm) {
  VarlenShape shape = checkVarlenTensors(spec, q, k, v, cuSeqlensQ, cuSeqlensK);
  args.validateFor(spec.variant);
  if (bm)
    checkBlockMaskFor(*bm, bm->blockM, bm->blockN, shape.batch, shape.headsQ,
                      shape.maxSeqlenQ, shape.maxSeqlenK, cuSeqlensQ,
                      cuSeqlensK);
  Problem pr = problemOf(spec, args, shape.batch, shape.headsQ, shape.headsKV);

  VarlenReferenceOutput out;
  out.shape = shape;
  out.o.assign(shape.totalQ * shape.headsQ * shape.headDimV, 0.0);
  out.lse.assign(shape.headsQ * shape.totalQ, kNegInf);
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t q0 = cuSeqlensQ[b], sq = cuSeqlensQ[b + 1] - q0;
    const int64_t k0 = cuSeqlensK[b], sk = cuSeqlensK[b + 1] - k0;
    for (int64_t h = 0; h < shape.headsQ; ++h) {
      const int64_t hk = h / pr.group;
      std::vector<char> tiles;
      for (int64_t i = 0; i < sq; ++i) {
        if (bm && i % bm->blockM == 0)
          tiles = tileStates(*bm, b, h, i / bm->blockM);
        RowOperands r{q,
                      k,
                      v,
                      q.offset(q0 + i, h, 0),
                      q.strides[2],
                      k.offset(k0, hk, 0),
                      k.strides[0],
                      k.strides[2],
                      v.offset(k0, hk, 0),
                      v.strides[0],
                      v.strides[2]};
        EvalPoint p{b, h, i, 0, sq, sk, 0.0};
        out.lseAt(h, q0 + i) =
            attendRow(pr, p, r, bm ? &tiles : nullptr, bm ? bm->blockN : 1,
                      &out.oAt(q0 + i, h, 0));
      }
    }
  }
  return out;
}

BlockMask referenceBlockMask(const AttentionSpec &spec, int64_t blockM,
                             int64_t blockN, int64_t batch, int64_t seqlenQ,
                             int64_t seqlenK, const Arguments &args) {
  spec.validate();
  args.validateFor(spec.variant);
  if (batch < 0 || seqlenQ < 0 || seqlenK < 0)
    throw UserError("batch, seqlen_q and seqlen_k must be >= 0",
                    std::source_location());
  Expr mask = spec.effectiveMask();
  BlockMask bm = emptyBlockMask(
      blockM, blockN, blockMaskExtent(mask, batch, spec.headsQ, false), seqlenQ,
      seqlenK);
  for (int64_t b = 0; b < bm.batch; ++b)
    for (int64_t h = 0; h < bm.heads; ++h)
      classifyRows(bm, mask, args, b, h, seqlenQ, seqlenK);
  return bm;
}

BlockMask referenceVarlenBlockMask(const AttentionSpec &spec, int64_t blockM,
                                   int64_t blockN,
                                   std::span<const int32_t> cuSeqlensQ,
                                   std::span<const int32_t> cuSeqlensK,
                                   const Arguments &args) {
  spec.validate();
  args.validateFor(spec.variant);
  if (cuSeqlensQ.size() != cuSeqlensK.size())
    throw UserError("cu_seqlens_q and cu_seqlens_k differ in length",
                    std::source_location());
  int64_t maxQ = checkCuSeqlens("cu_seqlens_q", cuSeqlensQ,
                                cuSeqlensQ.empty() ? 0 : cuSeqlensQ.back());
  int64_t maxK = checkCuSeqlens("cu_seqlens_k", cuSeqlensK,
                                cuSeqlensK.empty() ? 0 : cuSeqlensK.back());
  int64_t batch = static_cast<int64_t>(cuSeqlensQ.size()) - 1;
  Expr mask = spec.effectiveMask();
  BlockMask bm = emptyBlockMask(blockM, blockN,
                                blockMaskExtent(mask, batch, spec.headsQ, true),
                                maxQ, maxK);
  bm.cuSeqlensQ.assign(cuSeqlensQ.begin(), cuSeqlensQ.end());
  bm.cuSeqlensK.assign(cuSeqlensK.begin(), cuSeqlensK.end());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < bm.heads; ++h)
      classifyRows(bm, mask, args, b, h, cuSeqlensQ[b + 1] - cuSeqlensQ[b],
                   cuSeqlensK[b + 1] - cuSeqlensK[b]);
  return bm;
}

} // namespace flashjit
