//===- DerivativePropertyTest.cpp - Derivatives vs finite differences -----===//
//
// Over thousands of random differentiable trees (RandomExprGen in tame mode:
// every node kind, f32 parameters and buffers, nested selects, abs/min/max
// kinks), the derived d s'/d score, d s'/d buffer element and d s'/d param,
// evaluated with the interpreter, equal a float64 central finite difference
// of the interpreter:
//
//   D(h) = (f(x + h) - f(x - h)) / 2h
//   R(h) = (4 D(h/2) - D(h)) / 3          (Richardson, error O(h^4))
//
// with h = 2^-10, compared with R(h/2) (buffer and parameter values sit on
// a 2^-12 grid, so x +- h, h/2, h/4 are exact in f32). Tolerance:
// |d - R(h/2)| <= 1e-6 (1 + |R(h/2)|) + 64 eps max|f| / (h/4), the second
// term bounding double rounding in the finest difference (eps = 2^-52).
// A point is skipped, and counted, where
//  - a kink lies in [x - h, x + h]: some bool node (comparison, select
//    condition), the sign of an abs or sqrt operand, or a min/max choice
//    differs at one of the seven points x, x +- h, x +- h/2, x +- h/4;
//  - f is not finite at one of them, or some f32 subexpression of f is not
//    finite at x (the chain rule needs finite intermediates: score / (x / 0)
//    is 0 in IEEE arithmetic, but not differentiable in x);
//  - R(h) and R(h/2) differ by more than half the tolerance (the
//    extrapolation has not converged: a pole or a steep exp is near);
// and the test requires most points to be checked.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include "RandomExpr.h"
#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <set>

using namespace flashjit;
using flashjit::test::freshSeed;
using flashjit::test::RandomExprGen;
using flashjit::test::uniformInt;

namespace {

/// LLVM-style dyn_cast through the nodes' classof (tests link no LLVM).
template <class T> const T *as(const ExprNode *n) {
  return T::classof(n) ? static_cast<const T *>(n) : nullptr;
}
template <class T> bool is(const ExprNode *n) { return T::classof(n); }

constexpr int kBuf = RandomExprGen::kTameBufferSize;
constexpr double kH = 1.0 / 1024.0;

/// The conditions whose value decides which piece of a piecewise tree is
/// evaluated: every bool node, abs/sqrt operand signs, min/max choices.
std::vector<Expr> kinkConditions(const Expr &root) {
  std::vector<Expr> out;
  std::set<const ExprNode *> seen;
  std::function<void(const Expr &)> walk = [&](const Expr &e) {
    if (!seen.insert(e.get()).second)
      return;
    if (e.type() == ScalarType::Bool)
      out.push_back(e);
    if (auto *u = as<UnaryExpr>(e.get());
        u && u->type() == ScalarType::Float32 &&
        (u->op() == UnaryOp::Abs || u->op() == UnaryOp::Sqrt)) {
      out.push_back(u->operand() > 0.0f);
      out.push_back(u->operand() < 0.0f);
    }
    if (auto *b = as<BinaryExpr>(e.get());
        b && b->type() == ScalarType::Float32 &&
        (b->op() == BinaryOp::Min || b->op() == BinaryOp::Max))
      out.push_back(b->rhs() < b->lhs());
    for (const Expr &op : e->operands())
      walk(op);
  };
  walk(root);
  return out;
}

/// Every f32 node of \p root.
std::vector<Expr> floatNodes(const Expr &root) {
  std::vector<Expr> out;
  std::set<const ExprNode *> seen;
  std::function<void(const Expr &)> walk = [&](const Expr &e) {
    if (!seen.insert(e.get()).second)
      return;
    if (e.type() == ScalarType::Float32)
      out.push_back(e);
    for (const Expr &op : e->operands())
      walk(op);
  };
  walk(root);
  return out;
}

/// Parameter and buffer values on a grid, plus the point.
struct Setting {
  std::array<float, kBuf> bufF32{};
  std::array<int32_t, kBuf> bufI32{};
  std::array<int64_t, kBuf> bufI64{};
  float pfA = 0, pfB = 0;
  EvalPoint point;

  Arguments args() const {
    Arguments a;
    a.set("pf_a", Scalar::f32(pfA))
        .set("pf_b", Scalar::f32(pfB))
        .set("pi_a", Scalar::i32(3))
        .set("pi_b", Scalar::i32(-2))
        .set("pl_a", Scalar::i64(5));
    a.bind("buf_f32", bufF32.data(), kBuf);
    a.bind("buf_i32", bufI32.data(), kBuf);
    a.bind("buf_i64", bufI64.data(), kBuf);
    return a;
  }
};

float gridValue(std::mt19937_64 &rng) {
  return static_cast<float>(uniformInt(rng, -4096 * 4, 4096 * 4)) / 4096.0f;
}

struct Counts {
  int checked = 0, nonZero = 0, kink = 0, nonFinite = 0, curved = 0;
};

/// Checks \p derivative against the finite difference of \p f along one
/// variable: \p perturb(setting, t) moves that variable by t.
void checkOne(const Expr &f, const std::vector<Expr> &kinks,
              const std::vector<Expr> &floatNodes, const Setting &base,
              double derivative,
              const std::function<void(Setting &, double)> &perturb,
              Counts &counts, const char *what) {
  constexpr int kN = 7;
  const double steps[kN] = {-kH, -kH / 2, -kH / 4, kH / 4, kH / 2, kH, 0.0};
  double fv[kN];
  std::vector<std::vector<bool>> sig(kN);
  for (int i = 0; i < kN; ++i) {
    Setting s = base;
    perturb(s, steps[i]);
    Arguments a = s.args();
    fv[i] = evaluate(f, s.point, a).floatValue;
    for (const Expr &k : kinks)
      sig[i].push_back(evaluate(k, s.point, a).asBool());
  }
  for (int i = 0; i < kN - 1; ++i)
    if (sig[i] != sig[kN - 1]) {
      ++counts.kink;
      return;
    }
  // The chain rule needs finite intermediates: score / (x / 0) is 0 in
  // IEEE for every x, but its derivative through the inf is not defined.
  {
    Arguments a = base.args();
    for (const Expr &n : floatNodes)
      if (!std::isfinite(evaluate(n, base.point, a).floatValue)) {
        ++counts.nonFinite;
        return;
      }
  }
  double fmax = 0;
  for (double v : fv) {
    if (!std::isfinite(v)) {
      ++counts.nonFinite;
      return;
    }
    fmax = std::max(fmax, std::fabs(v));
  }
  const double d1 = (fv[5] - fv[0]) / (2 * kH), d2 = (fv[4] - fv[1]) / kH,
               d4 = (fv[3] - fv[2]) / (kH / 2);
  const double r1 = (4 * d2 - d1) / 3, r2 = (4 * d4 - d2) / 3;
  // Double rounding in the differences, at the finest step.
  const double roundoff = 64 * 0x1p-52 * fmax / (kH / 4);
  const double tol = 1e-6 * (1 + std::fabs(r2)) + roundoff;
  if (std::fabs(r1 - r2) > tol / 2) {
    ++counts.curved; // the extrapolation has not converged here
    return;
  }
  ++counts.checked;
  if (derivative != 0 || r2 != 0)
    ++counts.nonZero;
  INFO("d/d " << what << ": f = " << printExpr(f));
  INFO("derived " << derivative << ", finite difference " << r2
                  << ", tolerance " << tol);
  CHECK(std::fabs(derivative - r2) <= tol);
}

} // namespace

TEST_CASE("derivative property: random trees match central differences",
          "[derivative][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  RandomExprGen gen(seed);
  gen.tame = true;
  std::mt19937_64 &rng = gen.rng();
  constexpr int kTrees = 5000, kPoints = 4;
  Counts counts;
  int treesChecked = 0;
  for (int t = 0; t < kTrees; ++t) {
    Expr f = gen.gen(ScalarType::Float32, 1 + static_cast<int>(gen.pick(5)));
    std::vector<std::string> params;
    for (const char *p : {"pf_a", "pf_b"})
      if (printExpr(f).find(std::string("param<f32>(") + p + ")") !=
          std::string::npos)
        params.push_back(p);
    ScoreModDerivative d = differentiateScoreMod(f, params);
    std::vector<Expr> kinks = kinkConditions(f), nodes = floatNodes(f);
    const int before = counts.checked;
    for (int k = 0; k < kPoints; ++k) {
      Setting s;
      for (int i = 0; i < kBuf; ++i) {
        s.bufF32[i] = gridValue(rng);
        s.bufI32[i] = static_cast<int32_t>(uniformInt(rng, -5, 5));
        s.bufI64[i] = uniformInt(rng, -5, 5);
      }
      s.pfA = gridValue(rng);
      s.pfB = gridValue(rng);
      s.point = {uniformInt(rng, 0, 2),        uniformInt(rng, 0, 3),
                 uniformInt(rng, 0, 9),        uniformInt(rng, 0, 9),
                 uniformInt(rng, 1, 12),       uniformInt(rng, 1, 12),
                 test::uniform(rng, -4.0, 4.0)};
      Arguments a = s.args();
      checkOne(
          f, kinks, nodes, s, evaluate(d.score, s.point, a).floatValue,
          [](Setting &x, double h) { x.point.score += h; }, counts, "score");
      for (const ParamDerivative &p : d.params) {
        checkOne(
            f, kinks, nodes, s, evaluate(p.derivative, s.point, a).floatValue,
            [&](Setting &x, double h) {
              float &v = p.param == "pf_a" ? x.pfA : x.pfB;
              v = static_cast<float>(v + h);
            },
            counts, p.param.c_str());
      }
      // Every element of the f32 buffer: the sum of the terms whose index
      // reads that element (what a backward kernel accumulates).
      for (int e = 0; e < kBuf; ++e) {
        double sum = 0;
        for (const BufferDerivative &b : d.buffers)
          if (evaluate(b.index, s.point, a).intValue == e)
            sum += evaluate(b.derivative, s.point, a).floatValue;
        checkOne(
            f, kinks, nodes, s, sum,
            [e](Setting &x, double h) {
              x.bufF32[e] = static_cast<float>(x.bufF32[e] + h);
            },
            counts, "buf_f32 element");
      }
    }
    treesChecked += counts.checked > before;
  }
  INFO("checked " << counts.checked << " points of " << treesChecked
                  << " trees; skipped " << counts.kink << " near kinks, "
                  << counts.nonFinite << " non-finite, " << counts.curved
                  << " too curved");
  WARN("derivative property: checked "
       << counts.checked << " (tree, point, variable) triples ("
       << counts.nonZero << " with a nonzero derivative) of " << treesChecked
       << " trees; skipped " << counts.kink << " near kinks, "
       << counts.nonFinite << " non-finite, " << counts.curved
       << " too curved");
  CHECK(treesChecked >= kTrees / 2);
  CHECK(counts.nonZero >= kTrees);
  CHECK(counts.checked >= 10 * (counts.curved + counts.kink + 1));
}

TEST_CASE("derivative property: exactly the step functions of a variable are "
          "refused",
          "[derivative][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  RandomExprGen gen(seed);
  int refused = 0, accepted = 0;
  for (int t = 0; t < 3000; ++t) {
    Expr f = gen.gen(ScalarType::Float32, 1 + static_cast<int>(gen.pick(5)));
    // The oracle: lines of casts to an integer of an f32 value that reads
    // the score or an f32 buffer.
    std::set<unsigned> badLines;
    std::function<bool(const Expr &)> readsVar = [&](const Expr &e) {
      if (is<ScoreExpr>(e.get()))
        return true;
      if (auto *l = as<BufferLoadExpr>(e.get());
          l && l->type() == ScalarType::Float32)
        return true;
      for (const Expr &op : e->operands())
        if (readsVar(op))
          return true;
      return false;
    };
    std::function<void(const Expr &)> walk = [&](const Expr &e) {
      if (auto *c = as<CastExpr>(e.get());
          c && isInteger(c->type()) &&
          c->operand().type() == ScalarType::Float32 && readsVar(c->operand()))
        badLines.insert(c->loc().line());
      for (const Expr &op : e->operands())
        walk(op);
    };
    walk(f);
    INFO("f = " << printExpr(f));
    try {
      ScoreModDerivative d = differentiateScoreMod(f);
      ++accepted;
      CHECK(badLines.empty());
      CHECK(d.score.type() == ScalarType::Float32);
      CHECK(structurallyEqual(parseExpr(printExpr(d.score)), d.score));
      for (const BufferDerivative &b : d.buffers) {
        CHECK(b.buffer == "buf_f32");
        CHECK(isInteger(b.index.type()));
        CHECK(structurallyEqual(parseExpr(printExpr(b.derivative)),
                                b.derivative));
      }
    } catch (const UserError &e) {
      ++refused;
      INFO("error: " << e.what());
      CHECK(badLines.count(e.location().line()) == 1);
    }
  }
  CHECK(refused > 0);
  CHECK(accepted > 0);
}

TEST_CASE("derivative property: derivatives written in the output agree with "
          "the originals on random trees",
          "[derivative][property]") {
  // derivativeInOutput's result at s' = f(s) against differentiateScoreMod's
  // at s (both evaluated in double): the rewrite must be an identity.
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  RandomExprGen gen(seed);
  gen.tame = true;
  std::mt19937_64 &rng = gen.rng();
  int rewritten = 0, compared = 0;
  // About 1 random tree in 240 reads the score only below an invertible
  // chain (measured: 21 of 5000).
  for (int t = 0; t < 20000; ++t) {
    Expr f = gen.gen(ScalarType::Float32, 1 + static_cast<int>(gen.pick(5)));
    ScoreModDerivative d = differentiateScoreMod(f);
    if (!readsScore(d.score))
      continue;
    std::optional<ScoreModDerivative> o = derivativeInOutput(d, f);
    if (!o)
      continue;
    INFO(printExpr(f) << "\n  d = " << printExpr(d.score)
                      << "\n  in s' = " << printExpr(o->score));
    CHECK(o->buffers.size() == d.buffers.size());
    ++rewritten;
    for (int k = 0; k < 4; ++k) {
      Setting s;
      for (int i = 0; i < kBuf; ++i) {
        s.bufF32[i] = gridValue(rng);
        s.bufI32[i] = static_cast<int32_t>(uniformInt(rng, -5, 5));
        s.bufI64[i] = uniformInt(rng, -5, 5);
      }
      s.pfA = gridValue(rng);
      s.pfB = gridValue(rng);
      s.point = {uniformInt(rng, 0, 2),        uniformInt(rng, 0, 3),
                 uniformInt(rng, 0, 9),        uniformInt(rng, 0, 9),
                 uniformInt(rng, 1, 12),       uniformInt(rng, 1, 12),
                 test::uniform(rng, -4.0, 4.0)};
      Arguments a = s.args();
      double want = evaluate(d.score, s.point, a).floatValue;
      EvalPoint out = s.point;
      out.score = evaluate(f, s.point, a).floatValue;
      if (!std::isfinite(want) || !std::isfinite(out.score))
        continue;
      double got = evaluate(o->score, out, a).floatValue;
      // Recovering a node from s' rounds (s' - a, s' / c): relative to the
      // magnitudes involved.
      double tol =
          1e-9 * std::max({1.0, std::fabs(want), std::fabs(out.score)});
      CHECK(std::fabs(got - want) <= tol);
      ++compared;
    }
  }
  WARN("derivative property: " << rewritten << " trees written in s', "
                               << compared << " points compared");
  CHECK(rewritten >= 40);
  CHECK(compared >= 80);
}
