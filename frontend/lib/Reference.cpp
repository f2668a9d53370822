//===- Reference.cpp - float64 reference attention ------------------------===//
//
// Straight from the definition, one query row at a time: every score in
// double, the score modifier and the mask through the interpreter, a two-pass
// softmax (max, then sum) over the allowed keys. Deliberately simple: this is
// the oracle, not a kernel.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Reference.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Interpreter.h"

#include <cmath>
#include <limits>

namespace flashjit {

ReferenceOutput referenceAttention(const AttentionSpec &spec,
                                   const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const Arguments &args) {
  spec.validate();
  AttentionShape shape = checkAttentionTensors(spec, q, k, v);
  args.validateFor(spec.variant);
  const Expr mask = spec.effectiveMask();
  const Expr &scoreMod = spec.variant.scoreExpr();
  const double scale = spec.effectiveScale();
  const int64_t group = shape.headsQ / shape.headsKV;

  ReferenceOutput out;
  out.shape = shape;
  out.o.assign(shape.batch * shape.headsQ * shape.seqlenQ * shape.headDimV,
               0.0);
  out.lse.assign(shape.batch * shape.headsQ * shape.seqlenQ,
                 -std::numeric_limits<double>::infinity());

  std::vector<double> s(shape.seqlenK);
  std::vector<char> use(shape.seqlenK);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.headsQ; ++h) {
      const int64_t hk = h / group; // GQA: query head h reads K/V head hk
      for (int64_t i = 0; i < shape.seqlenQ; ++i) {
        EvalPoint p{b, h, i, 0, shape.seqlenQ, shape.seqlenK, 0.0};
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < shape.seqlenK; ++j) {
          p.kvIdx = j;
          use[j] = evaluate(mask, p, args).asBool();
          if (!use[j])
            continue;
          double dot = 0.0;
          for (int64_t d = 0; d < shape.headDimQK; ++d)
            dot += static_cast<double>(
                       loadAsFloat(q.data, q.dtype, q.offset(b, h, i, d))) *
                   static_cast<double>(
                       loadAsFloat(k.data, k.dtype, k.offset(b, hk, j, d)));
          p.score = scale * dot;
          s[j] = evaluate(scoreMod, p, args).floatValue;
          // A key whose modified score is -inf carries no weight.
          if (s[j] == -std::numeric_limits<double>::infinity())
            use[j] = 0;
          else
            m = std::max(m, s[j]);
        }
        if (m == -std::numeric_limits<double>::infinity())
          continue; // no allowed key: O = 0, LSE = -inf
        double l = 0.0;
        for (int64_t j = 0; j < shape.seqlenK; ++j)
          if (use[j])
            l += std::exp(s[j] - m);
        for (int64_t j = 0; j < shape.seqlenK; ++j) {
          if (!use[j])
            continue;
          double pj = std::exp(s[j] - m) / l;
          for (int64_t d = 0; d < shape.headDimV; ++d)
            out.oAt(b, h, i, d) +=
                pj * static_cast<double>(
                         loadAsFloat(v.data, v.dtype, v.offset(b, hk, j, d)));
        }
        out.lseAt(b, h, i) = m + std::log(l);
      }
    }
  }
  return out;
}

} // namespace flashjit
