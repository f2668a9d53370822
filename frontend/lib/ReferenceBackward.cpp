//===- ReferenceBackward.cpp - float64 reference attention backward -------===//
//
// One query row at a time, straight from the formulas in ReferenceBackward.h:
// the row's scores and modified scores are recomputed through the
// interpreter exactly as the forward reference computes them (the same
// mask, block-mask tiles and -inf rule), then P, O, D, and the row's
// contributions to dQ, dK, dV and the buffer and parameter gradients are
// accumulated. Deliberately simple: this is the oracle, not a kernel.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/ReferenceBackward.h"

#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Interpreter.h"

#include "ReferenceCommon.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>

namespace flashjit {
namespace {

using detail::kAllowed;
using detail::kMasked;
using detail::kSkip;
using detail::nanMax;
using detail::tileStates;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// What the backward needs of a spec, computed once.
struct Problem {
  Expr mask;
  Expr scoreMod;
  ScoreModDerivative deriv;
  double scale;
  const Arguments &args;
  int64_t group; // heads_q / heads_kv
  int64_t headDimQK, headDimV;
  ReferenceDataGradients &grads;
  /// sink[heads_q] of a spec with a sink, else null.
  const float *sink;
  /// The dtype O is rounded to for D (referenceAttentionBackward).
  std::optional<DType> roundOForD;
};

/// Where one query row's operands and gradients live: element d of key j
/// of K at kBase + j * kStep + d * kD (V, dO alike), its dK at
/// dk + j * dkStep + d (dV alike), the row's dQ at dq + d.
struct RowIO {
  const TensorRef &q, &k, &v, &dO;
  int64_t qBase, qD;
  int64_t kBase, kStep, kD;
  int64_t vBase, vStep, vD;
  int64_t doBase, doD;
  double *dq;
  double *dk;
  int64_t dkStep;
  double *dv;
  int64_t dvStep;
};

double load(const TensorRef &t, int64_t offset) {
  return static_cast<double>(loadAsFloat(t.data, t.dtype, offset));
}

/// \p x as a tensor of \p dtype would store it (via float, as a kernel
/// accumulating in fp32 stores O).
double roundTo(DType dtype, double x) {
  uint32_t bytes = 0; // room for one element of any dtype
  storeFromFloat(&bytes, dtype, 0, static_cast<float>(x));
  return static_cast<double>(loadAsFloat(&bytes, dtype, 0));
}

/// Adds one query row's contributions (see ReferenceBackward.h).
void backwardRow(const Problem &pr, EvalPoint p, const RowIO &r,
                 const std::vector<char> *tiles, int64_t blockN) {
  const int64_t sk = p.seqlenK;
  std::vector<double> s(sk), sm(sk);
  std::vector<char> use(sk, 0);
  double m = kNegInf;
  for (int64_t j = 0; j < sk; ++j) {
    p.kvIdx = j;
    char state = tiles ? (*tiles)[j / blockN] : kMasked;
    use[j] = state == kAllowed ||
             (state == kMasked && evaluate(pr.mask, p, pr.args).asBool());
    if (!use[j])
      continue;
    double dot = 0.0;
    for (int64_t d = 0; d < pr.headDimQK; ++d)
      dot += load(r.q, r.qBase + d * r.qD) *
             load(r.k, r.kBase + j * r.kStep + d * r.kD);
    s[j] = pr.scale * dot;
    p.score = s[j];
    sm[j] = evaluate(pr.scoreMod, p, pr.args).floatValue;
    if (sm[j] == kNegInf) // no weight, as in the forward
      use[j] = 0;
    else
      m = nanMax(m, sm[j]);
  }
  // The sink: one more logit in the denominator, with no value.
  const double sink = pr.sink ? pr.sink[p.head] : kNegInf;
  if (m == kNegInf && sink == kNegInf)
    return; // no allowed key: O = 0, LSE = -inf, zero gradient
  m = nanMax(m, sink);
  double l = sink == kNegInf ? 0.0 : std::exp(sink - m);
  for (int64_t j = 0; j < sk; ++j)
    if (use[j])
      l += std::exp(sm[j] - m);
  const double lse = m + std::log(l);

  // P, O and D = dO . O.
  std::vector<double> pj(sk, 0.0), o(pr.headDimV, 0.0), dO(pr.headDimV);
  for (int64_t d = 0; d < pr.headDimV; ++d)
    dO[d] = load(r.dO, r.doBase + d * r.doD);
  for (int64_t j = 0; j < sk; ++j) {
    if (!use[j])
      continue;
    pj[j] = std::exp(sm[j] - lse);
    for (int64_t d = 0; d < pr.headDimV; ++d)
      o[d] += pj[j] * load(r.v, r.vBase + j * r.vStep + d * r.vD);
  }
  double dRow = 0.0;
  for (int64_t d = 0; d < pr.headDimV; ++d)
    dRow += dO[d] * (pr.roundOForD ? roundTo(*pr.roundOForD, o[d]) : o[d]);
  // d LSE / d sink = exp(sink - LSE), and every P of the row has
  // d P_j / d sink = -P_j exp(sink - LSE): d sink = -exp(sink - LSE) D.
  if (sink != kNegInf)
    pr.grads.dSink[p.head] -= std::exp(sink - lse) * dRow;

  for (int64_t j = 0; j < sk; ++j) {
    if (!use[j] || pj[j] == 0.0)
      continue; // P = 0: every term below is zero
    double dP = 0.0;
    for (int64_t d = 0; d < pr.headDimV; ++d) {
      double vjd = load(r.v, r.vBase + j * r.vStep + d * r.vD);
      dP += dO[d] * vjd;
      r.dv[j * r.dvStep + d] += pj[j] * dO[d];
    }
    const double dSp = pj[j] * (dP - dRow);
    p.kvIdx = j;
    p.score = s[j];
    const double dS = dSp * evaluate(pr.deriv.score, p, pr.args).floatValue;
    for (int64_t d = 0; d < pr.headDimQK; ++d) {
      r.dq[d] += pr.scale * dS * load(r.k, r.kBase + j * r.kStep + d * r.kD);
      r.dk[j * r.dkStep + d] += pr.scale * dS * load(r.q, r.qBase + d * r.qD);
    }
    for (const BufferDerivative &bd : pr.deriv.buffers) {
      const double g = evaluate(bd.derivative, p, pr.args).floatValue;
      if (g == 0.0)
        continue; // e.g. a read in a select branch not taken here
      std::vector<double> &dBuf = pr.grads.dBuffers.at(bd.buffer);
      const int64_t idx = evaluate(bd.index, p, pr.args).intValue;
      if (idx < 0 || idx >= static_cast<int64_t>(dBuf.size()))
        throw UserError(fmt::format("buffer '{}' read at index {}, outside "
                                    "[0, {})",
                                    bd.buffer, idx, dBuf.size()));
      dBuf[idx] += dSp * g;
    }
    for (const ParamDerivative &pd : pr.deriv.params)
      pr.grads.dParams.at(pd.param) +=
          dSp * evaluate(pd.derivative, p, pr.args).floatValue;
  }
}

/// Checks dO against the rank and sizes O would have.
void checkDO(const TensorRef &dO, int rank, std::initializer_list<int64_t> want,
             std::initializer_list<const char *> what) {
  if (dO.rank != rank)
    throw UserError(fmt::format("dO.rank = {}, expected {}", dO.rank, rank));
  auto w = want.begin();
  auto n = what.begin();
  for (int i = 0; i < rank; ++i, ++w, ++n) {
    if (dO.shape[i] != *w)
      throw UserError(fmt::format("dO.shape[{}] = {}, expected {} ({})", i,
                                  dO.shape[i], *w, *n));
    if (dO.strides[i] < 0)
      throw UserError(
          fmt::format("dO.strides[{}] = {} is negative", i, dO.strides[i]));
  }
  if (dO.numel() > 0 && !dO.data)
    throw UserError(
        fmt::format("dO.data is null but dO has {} elements", dO.numel()));
}

/// The gradients' buffers and parameters, zeroed, and what every row needs
/// (the derivatives among it).
Problem prepare(const AttentionSpec &spec, const Arguments &args,
                const std::vector<std::string> &params, int64_t headsQ,
                int64_t headsKV, ReferenceDataGradients &grads,
                std::optional<DType> roundOForD) {
  args.validateFor(spec.variant);
  args.validateSinkFor(spec, /*hostValues=*/true);
  if (spec.sink)
    grads.dSink.assign(headsQ, 0.0);
  ScoreModDerivative deriv =
      differentiateScoreMod(spec.variant.scoreExpr(), params);
  std::function<void(const Expr &)> walk = [&](const Expr &e) {
    if (auto *l = llvm::dyn_cast<BufferLoadExpr>(e.get());
        l && l->type() == ScalarType::Float32)
      grads.dBuffers.try_emplace(l->name(), args.buffers.at(l->name()).size,
                                 0.0);
    for (const Expr &op : e->operands())
      walk(op);
  };
  walk(spec.variant.scoreExpr());
  for (const std::string &p : params)
    grads.dParams[p] = 0.0;
  return {spec.effectiveMask(),
          spec.variant.scoreExpr(),
          std::move(deriv),
          spec.effectiveScale(),
          args,
          headsQ / headsKV,
          spec.headDimQK,
          spec.headDimV,
          grads,
          spec.sink ? static_cast<const float *>(args.sink.data) : nullptr,
          roundOForD};
}

} // namespace

ReferenceGradients referenceAttentionBackward(
    const AttentionSpec &spec, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &dO, const Arguments &args,
    const std::vector<std::string> &params, const BlockMask *bm,
    std::optional<DType> roundOForD) {
  spec.validate();
  rejectFp8(spec, "the backward reference");
  AttentionShape shape = checkAttentionTensors(spec, q, k, v);
  checkDO(dO, 4, {shape.batch, shape.headsQ, shape.seqlenQ, shape.headDimV},
          {"batch", "heads_q", "seqlen_q", "head_dim_v"});
  if (bm)
    checkBlockMaskFor(*bm, bm->blockM, bm->blockN, shape.batch, shape.headsQ,
                      shape.seqlenQ, shape.seqlenK);
  ReferenceGradients g;
  g.shape = shape;
  Problem pr =
      prepare(spec, args, params, shape.headsQ, shape.headsKV, g, roundOForD);
  g.dq.assign(shape.batch * shape.headsQ * shape.seqlenQ * shape.headDimQK,
              0.0);
  g.dk.assign(shape.batch * shape.headsKV * shape.seqlenK * shape.headDimQK,
              0.0);
  g.dv.assign(shape.batch * shape.headsKV * shape.seqlenK * shape.headDimV,
              0.0);
  for (int64_t b = 0; b < shape.batch; ++b)
    for (int64_t h = 0; h < shape.headsQ; ++h) {
      const int64_t hk = h / pr.group; // GQA: dK/dV of hk sum over its heads
      std::vector<char> tiles;
      for (int64_t i = 0; i < shape.seqlenQ; ++i) {
        if (bm && i % bm->blockM == 0)
          tiles = tileStates(*bm, b, h, i / bm->blockM);
        RowIO r{q,
                k,
                v,
                dO,
                q.offset(b, h, i, 0),
                q.strides[3],
                k.offset(b, hk, 0, 0),
                k.strides[2],
                k.strides[3],
                v.offset(b, hk, 0, 0),
                v.strides[2],
                v.strides[3],
                dO.offset(b, h, i, 0),
                dO.strides[3],
                shape.headDimQK ? &g.dqAt(b, h, i, 0) : nullptr,
                g.dk.data() +
                    (b * shape.headsKV + hk) * shape.seqlenK * shape.headDimQK,
                shape.headDimQK,
                g.dv.data() +
                    (b * shape.headsKV + hk) * shape.seqlenK * shape.headDimV,
                shape.headDimV};
        EvalPoint p{b, h, i, 0, shape.seqlenQ, shape.seqlenK, 0.0};
        backwardRow(pr, p, r, bm ? &tiles : nullptr, bm ? bm->blockN : 1);
      }
    }
  return g;
}

VarlenReferenceGradients referenceVarlenAttentionBackward(
    const AttentionSpec &spec, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &dO,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, const std::vector<std::string> &params,
    const BlockMask *bm, std::optional<DType> roundOForD) {
  VarlenShape shape = checkVarlenTensors(spec, q, k, v, cuSeqlensQ, cuSeqlensK);
  checkDO(dO, 3, {shape.totalQ, shape.headsQ, shape.headDimV},
          {"total_q", "heads_q", "head_dim_v"});
  if (bm)
    checkBlockMaskFor(*bm, bm->blockM, bm->blockN, shape.batch, shape.headsQ,
                      shape.maxSeqlenQ, shape.maxSeqlenK, cuSeqlensQ,
                      cuSeqlensK);
  VarlenReferenceGradients g;
  g.shape = shape;
  Problem pr =
      prepare(spec, args, params, shape.headsQ, shape.headsKV, g, roundOForD);
  g.dq.assign(shape.totalQ * shape.headsQ * shape.headDimQK, 0.0);
  g.dk.assign(shape.totalK * shape.headsKV * shape.headDimQK, 0.0);
  g.dv.assign(shape.totalK * shape.headsKV * shape.headDimV, 0.0);
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t q0 = cuSeqlensQ[b], sq = cuSeqlensQ[b + 1] - q0;
    const int64_t k0 = cuSeqlensK[b], sk = cuSeqlensK[b + 1] - k0;
    for (int64_t h = 0; h < shape.headsQ; ++h) {
      const int64_t hk = h / pr.group;
      std::vector<char> tiles;
      for (int64_t i = 0; i < sq; ++i) {
        if (bm && i % bm->blockM == 0)
          tiles = tileStates(*bm, b, h, i / bm->blockM);
        RowIO r{q,
                k,
                v,
                dO,
                q.offset(q0 + i, h, 0),
                q.strides[2],
                k.offset(k0, hk, 0),
                k.strides[0],
                k.strides[2],
                v.offset(k0, hk, 0),
                v.strides[0],
                v.strides[2],
                dO.offset(q0 + i, h, 0),
                dO.strides[2],
                g.dq.data() + ((q0 + i) * shape.headsQ + h) * shape.headDimQK,
                g.dk.data() + (k0 * shape.headsKV + hk) * shape.headDimQK,
                shape.headsKV * shape.headDimQK,
                g.dv.data() + (k0 * shape.headsKV + hk) * shape.headDimV,
                shape.headsKV * shape.headDimV};
        EvalPoint p{b, h, i, 0, sq, sk, 0.0};
        backwardRow(pr, p, r, bm ? &tiles : nullptr, bm ? bm->blockN : 1);
      }
    }
  }
  return g;
}

} // namespace flashjit
