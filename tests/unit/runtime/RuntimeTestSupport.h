//===- RuntimeTestSupport.h - Shared helpers of runtime tests ---*- C++ -*-===//
//
// Random well-typed DSL expressions over a fixed set of parameters and
// buffers (so that every tree fits one kernel signature), the variants the
// reference tests cover, and an expression-evaluation kernel generator used
// by both the no-GPU (compile only) and the [gpu] (run and compare) tests.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTSUPPORT_H
#define FLASHJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTSUPPORT_H

#include "flashjit/frontend/CudaPrinter.h"
#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Variant.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace flashjit::test {

/// Random expressions. Leaves: index leaves, constants (extremes included),
/// parameters pi (i32) / pl (i64) / pf (f32), buffers bi / bl / bf indexed
/// by q_idx or kv_idx (in range when the buffers hold max(seqlens) entries).
class RandomExprBuilder {
public:
  RandomExprBuilder(uint64_t seed, bool allowFloat)
      : rng_(seed), allowFloat_(allowFloat) {}

  Expr gen(ScalarType t, int depth) {
    if (depth <= 0 || pick(5) == 0)
      return leaf(t);
    switch (t) {
    case ScalarType::Bool:
      return genBool(depth);
    case ScalarType::Float32:
      return genFloat(depth);
    default:
      return genInt(t, depth);
    }
  }

  ScalarType numericType() {
    if (allowFloat_)
      return pick(3) == 0 ? ScalarType::Float32
                          : (pick(2) ? ScalarType::Int32 : ScalarType::Int64);
    return pick(2) ? ScalarType::Int32 : ScalarType::Int64;
  }

  uint32_t pick(uint32_t n) {
    return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_);
  }

private:
  Expr idxLeaf() {
    static const Expr *leaves[] = {&batch,  &head,     &q_idx,
                                   &kv_idx, &seqlen_q, &seqlen_k};
    return *leaves[pick(6)];
  }
  Expr bufIndex() { return pick(2) ? q_idx : kv_idx; }

  Expr leaf(ScalarType t) {
    switch (t) {
    case ScalarType::Bool:
      return constant(ScalarType::Bool, pick(2), 0.0f);
    case ScalarType::Int32: {
      static const int64_t special[] = {0,  1,  -1,        2,         3,   7,
                                        -7, 31, INT32_MIN, INT32_MAX, 100, 17};
      switch (pick(5)) {
      case 0:
      case 1:
        return idxLeaf();
      case 2:
        return constant(ScalarType::Int32, special[pick(12)], 0.0f);
      case 3:
        return param("pi", ScalarType::Int32);
      default:
        return buffer<int32_t>("bi")[bufIndex()];
      }
    }
    case ScalarType::Int64: {
      static const int64_t special[] = {
          0, 1, -1, 5, -3, INT64_MIN, INT64_MAX, int64_t(1) << 40, 123456789};
      switch (pick(4)) {
      case 0:
        return cast(ScalarType::Int64, idxLeaf());
      case 1:
        return constant(ScalarType::Int64, special[pick(9)], 0.0f);
      case 2:
        return param("pl", ScalarType::Int64);
      default:
        return buffer<int64_t>("bl")[bufIndex()];
      }
    }
    case ScalarType::Float32: {
      static const float special[] = {0.0f,
                                      -0.0f,
                                      1.0f,
                                      -2.5f,
                                      30.0f,
                                      0.125f,
                                      1e10f,
                                      -3e9f,
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::quiet_NaN()};
      switch (pick(5)) {
      case 0:
        return score;
      case 1:
        return constant(ScalarType::Float32, 0, special[pick(11)]);
      case 2:
        return param("pf", ScalarType::Float32);
      case 3:
        return buffer<float>("bf")[bufIndex()];
      default:
        return cast(ScalarType::Float32, idxLeaf());
      }
    }
    }
    return Expr();
  }

  Expr genBool(int depth) {
    switch (pick(5)) {
    case 0:
      return gen(ScalarType::Bool, depth - 1) &&
             gen(ScalarType::Bool, depth - 1);
    case 1:
      return gen(ScalarType::Bool, depth - 1) ||
             gen(ScalarType::Bool, depth - 1);
    case 2:
      return !gen(ScalarType::Bool, depth - 1);
    default: {
      ScalarType t = numericType();
      static const BinaryOp cmp[] = {BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt,
                                     BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge};
      return makeBinary(cmp[pick(6)], gen(t, depth - 1), gen(t, depth - 1),
                        std::source_location::current());
    }
    }
  }

  Expr genInt(ScalarType t, int depth) {
    auto sub = [&] { return gen(t, depth - 1); };
    switch (pick(12)) {
    case 0:
      return sub() + sub();
    case 1:
      return sub() - sub();
    case 2:
      return sub() * sub();
    case 3:
      return sub() / sub();
    case 4:
      return sub() % sub();
    case 5:
      return min(sub(), sub());
    case 6:
      return max(sub(), sub());
    case 7:
      return abs(sub());
    case 8:
      return -sub();
    case 9:
      return select(gen(ScalarType::Bool, depth - 1), sub(), sub());
    case 10: {
      if (allowFloat_ && pick(2))
        return cast(t, gen(ScalarType::Float32, depth - 1));
      ScalarType other =
          t == ScalarType::Int32 ? ScalarType::Int64 : ScalarType::Int32;
      return cast(t, gen(other, depth - 1));
    }
    default:
      return cast(t, gen(ScalarType::Bool, depth - 1));
    }
  }

  Expr genFloat(int depth) {
    auto sub = [&] { return gen(ScalarType::Float32, depth - 1); };
    switch (pick(16)) {
    case 0:
      return sub() + sub();
    case 1:
      return sub() - sub();
    case 2:
      return sub() * sub();
    case 3:
      return sub() / sub();
    case 4:
      return min(sub(), sub());
    case 5:
      return max(sub(), sub());
    case 6:
      return abs(sub());
    case 7:
      return -sub();
    case 8:
      return exp(sub());
    case 9:
      return exp2(sub());
    case 10:
      return log(sub());
    case 11:
      return tanh(sub());
    case 12:
      return sigmoid(sub());
    case 13:
      return sqrt(sub());
    case 14:
      return select(gen(ScalarType::Bool, depth - 1), sub(), sub());
    default:
      return cast(ScalarType::Float32, gen(numericType(), depth - 1));
    }
  }

  std::mt19937_64 rng_;
  bool allowFloat_;
};

/// The C++ type a kernel stores an expression's value as.
inline std::string_view storeType(ScalarType t) {
  return t == ScalarType::Bool ? "unsigned char" : cudaTypeName(t);
}

/// A translation unit with one kernel per expression:
///   fj_expr_<n>(const float *scores, T *out, int nb, int nh, int nq, int nk,
///               int p_pi, long long p_pl, float p_pf,
///               const int *buf_bi, long long buf_bi_size, (same for bl, bf))
/// Thread t evaluates point t of the grid [nb, nh, nq, nk] (row-major) with
/// score = scores[t].
inline std::string expressionKernels(const std::vector<Expr> &exprs) {
  CudaNames names;
  names.bufferIds = {"bi", "bl", "bf"};
  std::string src(cudaPrelude());
  for (size_t n = 0; n < exprs.size(); ++n)
    src += fmt::format(
        "extern \"C\" __global__ void fj_expr_{}(const float *scores, {} *out, "
        "int nb, int nh, int nq, int nk, int p_pi, long long p_pl, float p_pf, "
        "const int *buf_bi, long long buf_bi_size, const long long *buf_bl, "
        "long long buf_bl_size, const float *buf_bf, long long buf_bf_size) "
        "{{\n"
        "  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (t >= (long long)nb * nh * nq * nk) return;\n"
        "  const int kv_idx = (int)(t % nk), q_idx = (int)(t / nk % nq);\n"
        "  const int head = (int)(t / nk / nq % nh), batch = (int)(t / nk / nq "
        "/ nh);\n"
        "  const int seqlen_q = nq, seqlen_k = nk;\n"
        "  const float score = scores[t];\n"
        "  (void)kv_idx; (void)q_idx; (void)head; (void)batch; (void)seqlen_q;"
        " (void)seqlen_k; (void)score; (void)p_pi; (void)p_pl; (void)p_pf;\n"
        "  out[t] = ({})({});\n}}\n",
        n, storeType(exprs[n].type()), storeType(exprs[n].type()),
        printCudaExpr(exprs[n], names));
  return src;
}

/// A named attention spec for the reference tests.
struct NamedSpec {
  std::string label;
  AttentionSpec spec;
};

/// The variants the reference is checked on: plain, both causal alignments,
/// sliding window, softcap (with a parameter), ALiBi (f32 buffer), document
/// mask (i32 buffer), GQA, prefix-LM, chunked, odd head dims, dtypes.
inline std::vector<NamedSpec> referenceVariants() {
  std::vector<NamedSpec> out;
  auto add = [&](std::string label, Variant v, auto &&tweak) {
    AttentionSpec s;
    s.variant = std::move(v);
    s.headDimQK = s.headDimV = 64;
    tweak(s);
    out.push_back({std::move(label), std::move(s)});
  };
  auto none = [](AttentionSpec &) {};
  add("dense_bf16", Variant("dense"), none);
  add("causal_top_left_fp16", Variant("causal_tl"), [](AttentionSpec &s) {
    s.causal = Causal::TopLeft;
    s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F16;
  });
  add("causal_bottom_right_fp32", Variant("causal_br"), [](AttentionSpec &s) {
    s.causal = Causal::BottomRight;
    s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F32;
    s.headDimQK = 96;
    s.headDimV = 32;
  });
  {
    Variant v("swa");
    v.mask(sliding_window(16, 0, Alignment::BottomRight));
    add("sliding_window", std::move(v), none);
  }
  {
    Variant v("softcap");
    v.scoreMod(softcap(param("cap", ScalarType::Float32)));
    add("softcap_param", std::move(v),
        [](AttentionSpec &s) { s.causal = Causal::TopLeft; });
  }
  {
    Variant v("alibi");
    v.scoreMod(alibi(buffer<float>("slopes")));
    add("alibi_gqa", std::move(v), [](AttentionSpec &s) {
      s.headsQ = 4;
      s.headsKV = 2;
      s.headDimQK = s.headDimV = 128;
    });
  }
  {
    Variant v("document");
    Buffer doc = buffer<int32_t>("doc_id");
    v.mask(doc[q_idx] == doc[kv_idx]);
    add("doc_id_causal", std::move(v), [](AttentionSpec &s) {
      s.causal = Causal::TopLeft;
      s.headsQ = 6;
      s.headsKV = 1;
    });
  }
  {
    Variant v("prefix");
    v.mask(prefix_lm(param("prefix", ScalarType::Int32)));
    add("prefix_lm_d192", std::move(v), [](AttentionSpec &s) {
      s.headDimQK = s.headDimV = 192;
      s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F16;
    });
  }
  {
    Variant v("chunked");
    v.mask(chunked(8) && causal(Alignment::TopLeft));
    v.scoreMod(score * 0.5f + cast(ScalarType::Float32, head));
    add("chunked_d256", std::move(v), [](AttentionSpec &s) {
      s.headDimQK = s.headDimV = 256;
      s.scale = 0.07f;
    });
  }
  {
    Variant v("neg_inf_scores");
    // A score modifier that sends some keys to -inf: they carry no weight.
    v.scoreMod(select(kv_idx % 3 == 0, -std::numeric_limits<float>::infinity(),
                      score));
    add("score_neg_inf", std::move(v), [](AttentionSpec &s) {
      s.returnLse = true;
      s.headDimQK = 32;
      s.headDimV = 48;
    });
  }
  return out;
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTSUPPORT_H
