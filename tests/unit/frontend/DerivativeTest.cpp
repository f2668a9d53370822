//===- DerivativeTest.cpp - Each derivative rule, printing, errors --------===//
//
// Every rule of Derivative.h checked against its closed form written out by
// hand in C++ (evaluated in double at fresh random points), the subgradient
// conventions at their kinks, the library modifiers (softcap's 1 - tanh^2,
// ALiBi's slope read, the relative-bias table read), the simplifications
// and the canonical text, and every UserError at the user's line.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::expectUserErrorAt;
using flashjit::test::freshSeed;
using flashjit::test::nonZero;
using flashjit::test::uniform;
using flashjit::test::uniformInt;

namespace {

/// LLVM-style dyn_cast through the nodes' classof (tests link no LLVM).
template <class T> const T *as(const ExprNode *n) {
  return T::classof(n) ? static_cast<const T *>(n) : nullptr;
}
template <class T> bool is(const ExprNode *n) { return T::classof(n); }

double at(const Expr &e, double s, const Arguments &args = {},
          EvalPoint p = {0, 0, 0, 0, 1, 1, 0.0}) {
  p.score = s;
  return evaluate(e, p, args).floatValue;
}

double dScoreAt(const Expr &f, double s, const Arguments &args = {},
                EvalPoint p = {0, 0, 0, 0, 1, 1, 0.0}) {
  return at(differentiate(f, DiffVar::score()), s, args, p);
}

/// Relative closeness for values computed in double from f32 literals.
bool near(double got, double want, double rel = 1e-6) {
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

/// d/ds of `op(c * score)` against c * op'(c * s) at 50 random s (in the
/// op's domain), with a fresh nonzero f32 c.
void checkUnary(const std::function<Expr(Expr)> &op,
                const std::function<double(double)> &derivative,
                bool positiveOnly) {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  float c = nonZero(rng);
  Expr f = op(c * score);
  Expr d = differentiate(f, DiffVar::score());
  INFO("f = " << printExpr(f) << ", d = " << printExpr(d));
  for (int i = 0; i < 50; ++i) {
    double s = uniform(rng, -3.0, 3.0);
    if (positiveOnly && c * s <= 0)
      s = -s;
    if (c * s == 0)
      continue;
    INFO("s = " << s);
    CHECK(near(at(d, s), c * derivative(c * s)));
  }
}

} // namespace

TEST_CASE("derivative: unary rules match their closed forms", "[derivative]") {
  checkUnary([](Expr a) { return exp(a); },
             [](double x) { return std::exp(x); }, false);
  checkUnary([](Expr a) { return exp2(a); },
             [](double x) { return std::exp2(x) * std::log(2.0); }, false);
  checkUnary([](Expr a) { return log(a); }, [](double x) { return 1.0 / x; },
             true);
  checkUnary([](Expr a) { return tanh(a); },
             [](double x) { return 1.0 - std::tanh(x) * std::tanh(x); }, false);
  checkUnary([](Expr a) { return sigmoid(a); },
             [](double x) {
               double e = 1.0 / (1.0 + std::exp(-x));
               return e * (1.0 - e);
             },
             false);
  checkUnary([](Expr a) { return sqrt(a); },
             [](double x) { return 0.5 / std::sqrt(x); }, true);
  checkUnary([](Expr a) { return abs(a); },
             [](double x) { return x > 0 ? 1.0 : -1.0; }, false);
  checkUnary([](Expr a) { return -a; }, [](double) { return -1.0; }, false);
}

TEST_CASE("derivative: binary rules, select and casts match closed forms",
          "[derivative]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const float c = nonZero(rng), k = nonZero(rng);
  Expr cap = param<float>("p");
  Arguments args;
  args.set("p", Scalar::f32(k));
  // (expression, closed-form d/ds)
  const std::vector<std::pair<Expr, std::function<double(double)>>> cases = {
      {score + c * score, [&](double) { return 1.0 + c; }},
      {c - score * score, [&](double s) { return -2.0 * s; }},
      {score * cap, [&](double) { return double(k); }},
      {(score + c) / (score * score + 2.0f),
       [&](double s) {
         double n = s + c, m = s * s + 2.0;
         return (m - n * 2.0 * s) / (m * m);
       }},
      {c / exp(score), [&](double s) { return -c * std::exp(-s); }},
      {min(2.0f * score, score + c),
       [&](double s) { return 2.0 * s <= s + c ? 2.0 : 1.0; }},
      {max(2.0f * score, score + c),
       [&](double s) { return 2.0 * s >= s + c ? 2.0 : 1.0; }},
      {select(score > c, score * score, exp(score)),
       [&](double s) { return s > c ? 2.0 * s : std::exp(s); }},
      {cast<float>(q_idx - kv_idx) * score + cast<float>(score > 0.0f),
       [&](double) { return 2.0 - 5.0; }},
  };
  EvalPoint p{0, 0, 2, 5, 8, 8, 0.0};
  for (const auto &[f, want] : cases) {
    INFO("f = " << printExpr(f));
    for (int i = 0; i < 20; ++i) {
      double s = uniform(rng, -3.0, 3.0);
      INFO("s = " << s);
      CHECK(near(dScoreAt(f, s, args, p), want(s)));
    }
  }
}

TEST_CASE("derivative: conventions at kinks", "[derivative]") {
  // abs'(0) = 0, like PyTorch's sign(0) = 0.
  CHECK(dScoreAt(abs(score), 0.0) == 0.0);
  CHECK(dScoreAt(abs(score - 1.5f), 1.5) == 0.0);
  // sqrt'(0) = 0 (one-sided +inf would make dQ/dK NaN).
  CHECK(dScoreAt(sqrt(score), 0.0) == 0.0);
  CHECK(dScoreAt(sqrt(score * score), 0.0) == 0.0);
  // min/max ties take the first operand's derivative.
  CHECK(dScoreAt(min(2.0f * score, 3.0f * score), 0.0) == 2.0);
  CHECK(dScoreAt(max(3.0f * score, 2.0f * score), 0.0) == 3.0);
  CHECK(dScoreAt(min(score, 1.0f), 1.0) == 1.0);
  CHECK(dScoreAt(max(1.0f, score), 1.0) == 0.0);
  // A select takes its chosen branch's derivative at the flip point too.
  CHECK(dScoreAt(select(score >= 0.0f, 4.0f * score, -score), 0.0) == 4.0);
  // cast<f32> of a bool of the score is a step: derivative 0.
  CHECK(dScoreAt(cast<float>(score > 0.0f) * 7.0f, 0.5) == 0.0);
}

TEST_CASE("derivative: nested abs grows the printed derivative "
          "polynomially, not exponentially",
          "[derivative]") {
  // Each abs once doubled its operand's derivative in the printed text
  // (found 2026-12-02: 70 MB at depth 20, a hang at 999).
  auto nested = [](int depth) {
    Expr e = score - 0.25f;
    for (int i = 0; i < depth; ++i)
      e = abs(e) - 0.5f;
    return e;
  };
  auto printedSize = [&](int depth) {
    return printExpr(differentiate(nested(depth), DiffVar::score())).size();
  };
  size_t s8 = printedSize(8), s20 = printedSize(20);
  INFO("printed derivative: depth 8 " << s8 << " chars, depth 20 " << s20);
  // Quadratic in the depth at most (each level repeats its operand, whose
  // text is linear): 2.5^2 = 6.25x from 8 to 20, where doubling gave
  // 2^12x.
  CHECK(s20 < 10 * s8);
  // Still the right values: the product of the signs of the levels'
  // operands, at points where none of them is 0.
  for (double x : {-3.1, -0.6, 0.1, 0.4, 0.8, 2.7}) {
    double v = x - 0.25, sign = 1;
    for (int i = 0; i < 5; ++i) {
      sign *= v > 0 ? 1 : -1;
      v = std::fabs(v) - 0.5;
    }
    INFO("x = " << x);
    CHECK(dScoreAt(nested(5), x) == sign);
  }
}

TEST_CASE("derivative: index-only subexpressions have derivative 0",
          "[derivative]") {
  Expr idx = cast<float>(q_idx - kv_idx) * 2.0f + cast<float>(head);
  Expr d = differentiate(idx, DiffVar::score());
  CHECK(printExpr(d) == "0.0");
  Expr f = score * 3.0f + exp(cast<float>(abs(q_idx - kv_idx)));
  CHECK(printExpr(differentiate(f, DiffVar::score())) == "3.0");
  // A parameter that is not the variable is a constant.
  CHECK(printExpr(differentiate(score + param<float>("b"), DiffVar::score())) ==
        "1.0");
}

TEST_CASE("derivative: softcap's factor is 1 - tanh^2", "[derivative]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  ScoreModDerivative d = differentiateScoreMod(softcap(30.0f));
  CHECK(printDerivative(d) ==
        "d score'/d score = (30.0 * ((1.0 - (tanh((score / 30.0)) * "
        "tanh((score / 30.0)))) / 30.0))\n");
  CHECK(d.buffers.empty());
  for (int i = 0; i < 50; ++i) {
    double s = uniform(rng, -200.0, 200.0), t = std::tanh(s / 30.0);
    CHECK(near(at(d.score, s), 1.0 - t * t));
  }
  // The soft cap as a runtime parameter, differentiated with respect to it:
  // d/dc c * tanh(s / c) = tanh(s / c) - (s / c) (1 - tanh^2(s / c)).
  ScoreModDerivative dp =
      differentiateScoreMod(softcap(param<float>("cap")), {"cap"});
  REQUIRE(dp.params.size() == 1);
  CHECK(dp.params[0].param == "cap");
  for (int i = 0; i < 50; ++i) {
    float c = static_cast<float>(uniform(rng, 5.0, 50.0));
    double s = uniform(rng, -100.0, 100.0), t = std::tanh(s / c);
    Arguments args;
    args.set("cap", Scalar::f32(c));
    CHECK(near(at(dp.score, s, args), 1.0 - t * t));
    CHECK(near(at(dp.params[0].derivative, s, args),
               t - (s / c) * (1.0 - t * t), 1e-5));
  }
}

TEST_CASE("derivative: written in the modifier's output where the "
          "derivative reads the score only through the output path",
          "[derivative]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // Softcap: 1 - tanh^2(s / 30) = 1 - (s' / 30)^2.
  Expr cap = softcap(30.0f);
  std::optional<ScoreModDerivative> y =
      derivativeInOutput(differentiateScoreMod(cap), cap);
  REQUIRE(y);
  CHECK(printDerivative(*y) ==
        "d score'/d score = (30.0 * ((1.0 - ((score / 30.0) * (score / "
        "30.0))) / 30.0))\n");
  // Each modifier's rewritten derivatives at s' = mod(s) equal the
  // original ones at s (double evaluation of f32 literals).
  std::vector<float> slope{0.5f, 0.25f, 0.125f};
  Arguments args;
  args.bind("slope", slope.data(), int64_t(slope.size()));
  auto alibiPart = buffer<float>("slope")[head] * abs(q_idx - kv_idx);
  const Expr mods[] = {
      cap,
      exp(score),
      2.0f - exp(score * 0.5f),
      -(sigmoid(score) * 4.0f) + 1.0f,
      30.0f * tanh(score / 30.0f) - alibiPart,
      tanh(score) / 8.0f + buffer<float>("slope")[head],
  };
  for (const Expr &mod : mods) {
    INFO(printExpr(mod));
    ScoreModDerivative d = differentiateScoreMod(mod);
    std::optional<ScoreModDerivative> o = derivativeInOutput(d, mod);
    REQUIRE(o);
    REQUIRE(o->buffers.size() == d.buffers.size());
    for (int i = 0; i < 40; ++i) {
      EvalPoint p{0,
                  uniformInt(rng, 0, 2),
                  uniformInt(rng, 0, 30),
                  uniformInt(rng, 0, 30),
                  31,
                  31,
                  uniform(rng, -6.0, 6.0)};
      EvalPoint out = p;
      out.score = evaluate(mod, p, args).floatValue;
      CHECK(near(evaluate(o->score, out, args).floatValue,
                 evaluate(d.score, p, args).floatValue, 1e-9));
      for (size_t k = 0; k < d.buffers.size(); ++k)
        CHECK(near(evaluate(o->buffers[k].derivative, out, args).floatValue,
                   evaluate(d.buffers[k].derivative, p, args).floatValue,
                   1e-9));
    }
  }
  // exp's derivative is its own value: the output itself.
  std::optional<ScoreModDerivative> e =
      derivativeInOutput(differentiateScoreMod(exp(score)), exp(score));
  REQUIRE(e);
  CHECK(printExpr(e->score) == "score");
  // Derivatives that do not read the score come back unchanged.
  Expr alibiMod = alibi(buffer<float>("slope"));
  ScoreModDerivative ad = differentiateScoreMod(alibiMod);
  std::optional<ScoreModDerivative> ao = derivativeInOutput(ad, alibiMod);
  REQUIRE(ao);
  CHECK(printDerivative(*ao) == printDerivative(ad));
}

TEST_CASE("derivative: not written in the output where a derivative needs "
          "the raw score",
          "[derivative]") {
  // d s'/d cap reads s / cap, which tanh does not give back.
  Expr learned = softcap(param<float>("cap"));
  CHECK_FALSE(
      derivativeInOutput(differentiateScoreMod(learned, {"cap"}), learned));
  // The score inside the derivative, not below an invertible chain.
  Expr square = exp(score * score);
  CHECK_FALSE(derivativeInOutput(differentiateScoreMod(square), square));
  Expr gelu = score * sigmoid(score * 1.702f);
  CHECK_FALSE(derivativeInOutput(differentiateScoreMod(gelu), gelu));
  // A zero or non-literal factor is not divided by (c * tanh(s) with c = 0
  // would give 0 / 0).
  Expr zero = 0.0f * tanh(score);
  CHECK_FALSE(derivativeInOutput(differentiateScoreMod(zero), zero));
  Expr byParam = param<float>("c") * tanh(score);
  CHECK_FALSE(derivativeInOutput(differentiateScoreMod(byParam), byParam));
}

TEST_CASE("derivative: ALiBi reads one slope per head", "[derivative]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  ScoreModDerivative d = differentiateScoreMod(alibi(buffer<float>("slope")));
  CHECK(printExpr(d.score) == "1.0");
  REQUIRE(d.buffers.size() == 1);
  CHECK(d.buffers[0].buffer == "slope");
  CHECK(printExpr(d.buffers[0].index) == "head");
  CHECK(printExpr(d.buffers[0].derivative) ==
        "-(cast<f32>(abs((q_idx - kv_idx))))");
  for (int i = 0; i < 20; ++i) {
    EvalPoint p{0,
                uniformInt(rng, 0, 7),
                uniformInt(rng, 0, 40),
                uniformInt(rng, 0, 40),
                41,
                41,
                uniform(rng, -5, 5)};
    CHECK(evaluate(d.buffers[0].derivative, p, {}).floatValue ==
          -std::fabs(double(p.qIdx - p.kvIdx)));
  }
}

TEST_CASE("derivative: relative bias reads the clipped table entry",
          "[derivative]") {
  Buffer table = buffer<float>("rel");
  Expr mod = relative_bias(table, 4);
  ScoreModDerivative d = differentiateScoreMod(mod);
  CHECK(printExpr(d.score) == "1.0");
  REQUIRE(d.buffers.size() == 1);
  CHECK(d.buffers[0].buffer == "rel");
  CHECK(printExpr(d.buffers[0].derivative) == "1.0");
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = 0; j < 12; ++j) {
      EvalPoint p{0, 0, i, j, 12, 12, 0.0};
      CHECK(evaluate(d.buffers[0].index, p, {}).intValue ==
            std::clamp<int64_t>(j - i, -4, 4) + 4);
    }
}

TEST_CASE("derivative: reads of one buffer at different indices are "
          "separate terms",
          "[derivative]") {
  Buffer b = buffer<float>("w");
  Expr mod = score * b[head] + b[q_idx] * b[q_idx] + b[head] * 2.0f;
  ScoreModDerivative d = differentiateScoreMod(mod);
  REQUIRE(d.buffers.size() == 2);
  CHECK(printExpr(d.buffers[0].index) == "head");
  CHECK(printExpr(d.buffers[0].derivative) == "(score + 2.0)");
  CHECK(printExpr(d.buffers[1].index) == "q_idx");
  CHECK(printExpr(d.buffers[1].derivative) ==
        "(buffer<f32>(w)[q_idx] + buffer<f32>(w)[q_idx])");
  CHECK(printExpr(d.score) == "buffer<f32>(w)[head]");
  // A read only in a select condition has a zero derivative: no term.
  Expr cond = select(b[kv_idx] > 0.0f, score, 2.0f * score);
  CHECK(differentiateScoreMod(cond).buffers.empty());
}

TEST_CASE("derivative: simplification rules", "[derivative]") {
  auto dS = [](const Expr &f) {
    return printExpr(differentiate(f, DiffVar::score()));
  };
  CHECK(dS(score + 0.0f) == "1.0");
  CHECK(dS(score * 1.0f) == "1.0");
  CHECK(dS(2.0f * (3.0f * score)) == "6.0");
  CHECK(dS(score / 1.0f) == "1.0");
  CHECK(dS(-(-score)) == "1.0");
  CHECK(dS(score * 0.0f) == "0.0"); // two literals: folded exactly
  // x * 0 is kept for a non-literal x: exp(score) may be inf.
  CHECK(dS(exp(score) * 0.0f) == "(exp(score) * 0.0)");
  // select(c, x, x) -> x; a select of literals absorbs the operator.
  CHECK(dS(select(q_idx > kv_idx, score, score)) == "1.0");
  CHECK(dS(2.0f * abs(score)) ==
        "select((score > 0.0), 2.0, select((score < 0.0), -2.0, 0.0))");
  CHECK(dS(select(q_idx > kv_idx, score, 0.0f)) ==
        "select((q_idx > kv_idx), 1.0, 0.0)");
  CHECK(dS(select(true, score * 3.0f, score)) == "3.0");
}

TEST_CASE("derivative: forward nodes and shared subtrees are reused",
          "[derivative]") {
  Expr e = exp(score);
  // d exp(score) = exp(score) * 1 -> the forward node itself.
  CHECK(differentiate(e, DiffVar::score()).get() == e.get());
  Expr t = tanh(score * score);
  Expr f = t + t;
  Expr d = differentiate(f, DiffVar::score());
  auto *sum = as<BinaryExpr>(d.get());
  REQUIRE(sum);
  CHECK(sum->op() == BinaryOp::Add);
  // Both terms are one node: the shared subtree was differentiated once.
  CHECK(sum->lhs().get() == sum->rhs().get());
  // ... and that derivative refers to the forward tanh node.
  std::function<bool(const Expr &)> reaches = [&](const Expr &x) {
    if (x.get() == t.get())
      return true;
    for (const Expr &op : x->operands())
      if (reaches(op))
        return true;
    return false;
  };
  CHECK(reaches(sum->lhs()));
}

TEST_CASE("derivative: canonical text round-trips through the parser",
          "[derivative]") {
  Buffer slope = buffer<float>("slope");
  Expr mod = softcap(param<float>("cap")) -
             slope[head] * sqrt(cast<float>(abs(q_idx - kv_idx)) + 1.0f);
  ScoreModDerivative d = differentiateScoreMod(mod, {"cap"});
  std::string text = printDerivative(d);
  CHECK(text.find("d score'/d score = ") == 0);
  CHECK(text.find("\nd score'/d buffer<f32>(slope)[head] = ") !=
        std::string::npos);
  CHECK(text.find("\nd score'/d param<f32>(cap) = ") != std::string::npos);
  for (const Expr &e :
       {d.score, d.buffers.at(0).derivative, d.params.at(0).derivative})
    CHECK(structurallyEqual(parseExpr(printExpr(e)), e));
}

TEST_CASE("derivative: a step function of the score is a UserError at the "
          "user's line",
          "[derivative]") {
  // The modifier is built on the marked line; the error points at it.
  Expr floorLike = cast<float>(cast<int32_t>(score * 2.0f)); // line A
  unsigned lineA = __LINE__ - 1;
  expectUserErrorAt([&] { return differentiateScoreMod(floorLike); }, lineA,
                    {"not differentiable", "score", "i32"});
  Expr intOp = cast<float>(cast<int64_t>(score) % 3L) + score; // line B
  unsigned lineB = __LINE__ - 1;
  expectUserErrorAt([&] { return differentiate(intOp, DiffVar::score()); },
                    lineB, {"score", "i64"});
  Buffer table = buffer<float>("t");
  Expr indexed = table[cast<int32_t>(score)]; // line C
  unsigned lineC = __LINE__ - 1;
  expectUserErrorAt([&] { return differentiateScoreMod(indexed); }, lineC);
  // Also in a select condition, and through a promotion inside an operator.
  Expr cond = select(cast<int32_t>(score) > 2, score, 0.0f); // line D
  unsigned lineD = __LINE__ - 1;
  expectUserErrorAt([&] { return differentiateScoreMod(cond); }, lineD);
  // An f32 buffer cast to an integer: its gradient would be wrong.
  Expr bufStep = score + cast<float>(cast<int32_t>(table[head])); // line E
  unsigned lineE = __LINE__ - 1;
  expectUserErrorAt([&] { return differentiateScoreMod(bufStep); }, lineE,
                    {"buffer 't'"});
  // ... but the same cast of an index or an unrequested parameter is fine.
  Expr ok =
      score + cast<float>(cast<int32_t>(param<float>("p") * 2.0f) + q_idx);
  CHECK(printExpr(differentiateScoreMod(ok).score) == "1.0");
  expectUserError([&] { return differentiateScoreMod(ok, {"p"}); },
                  {"parameter 'p'"});
}

TEST_CASE("derivative: bad requests are UserErrors naming the field",
          "[derivative]") {
  Expr mod = score * param<float>("a") + cast<float>(param<int32_t>("n"));
  expectUserError([&] { return differentiateScoreMod(mod, {"zz"}); },
                  {"'zz'", "no f32 parameter"});
  expectUserError([&] { return differentiateScoreMod(mod, {"n"}); }, {"'n'"});
  expectUserError([&] { return differentiate(q_idx > 3, DiffVar::score()); },
                  {"bool", "not f32"});
  expectUserError(
      [&] {
        return differentiate(score, DiffVar::read(buffer<int32_t>("i")[0]));
      },
      {"f32 buffer read"});
  CHECK(printExpr(differentiateScoreMod(mod, {"a"}).params.at(0).derivative) ==
        "score");
}
