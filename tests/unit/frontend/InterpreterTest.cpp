//===- InterpreterTest.cpp - Evaluating expressions at one point ----------===//
//
// The interpreter follows the DSL's integer rules exactly (two's-complement
// wrap, truncating division, x / 0 == x % 0 == 0), saturates f32 -> integer
// casts (NaN -> 0), evaluates f32 in double, and reports missing parameters,
// missing buffers and out-of-range buffer indices as UserError. Expected
// values are computed here with unsigned arithmetic and <cmath>.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Interpreter.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace flashjit;
using flashjit::test::freshSeed;

namespace {

int32_t wrap32(uint64_t bits) {
  return static_cast<int32_t>(static_cast<uint32_t>(bits));
}

int64_t evalInt(const Expr &e, const Arguments &args = {},
                const EvalPoint &p = {}) {
  Value v = evaluate(e, p, args);
  CHECK(v.type == e.type());
  return v.intValue;
}

double evalFloat(const Expr &e, const Arguments &args = {},
                 const EvalPoint &p = {}) {
  Value v = evaluate(e, p, args);
  CHECK(v.type == ScalarType::Float32);
  return v.floatValue;
}

Arguments i32Args(int32_t a, int32_t b) {
  Arguments args;
  args.set("a", Scalar::i32(a)).set("b", Scalar::i32(b));
  return args;
}

Arguments i64Args(int64_t a, int64_t b) {
  Arguments args;
  args.set("a", Scalar::i64(a)).set("b", Scalar::i64(b));
  return args;
}

} // namespace

TEST_CASE("interpreter: leaves read the evaluation point",
          "[frontend][interpreter]") {
  EvalPoint p;
  p.batch = 3;
  p.head = 5;
  p.qIdx = 7;
  p.kvIdx = 11;
  p.seqlenQ = 13;
  p.seqlenK = 17;
  p.score = -1.25;
  CHECK(evalInt(batch, {}, p) == 3);
  CHECK(evalInt(head, {}, p) == 5);
  CHECK(evalInt(q_idx, {}, p) == 7);
  CHECK(evalInt(kv_idx, {}, p) == 11);
  CHECK(evalInt(seqlen_q, {}, p) == 13);
  CHECK(evalInt(seqlen_k, {}, p) == 17);
  CHECK(evalFloat(score, {}, p) == -1.25);
  CHECK(evalInt(q_idx * kv_idx - head, {}, p) == 72);
  Value b = evaluate(q_idx < kv_idx, p, {});
  CHECK(b.type == ScalarType::Bool);
  CHECK(b.asBool());
  CHECK(!evaluate(q_idx >= kv_idx, p, {}).asBool());
}

TEST_CASE("interpreter: i32 and i64 arithmetic wraps",
          "[frontend][interpreter]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  Expr a32 = param<int32_t>("a"), b32 = param<int32_t>("b");
  Expr a64 = param<int64_t>("a"), b64 = param<int64_t>("b");
  for (int t = 0; t < 200; ++t) {
    int32_t a = static_cast<int32_t>(rng()), b = static_cast<int32_t>(rng());
    if (t == 0) {
      a = INT32_MAX;
      b = 1;
    }
    INFO("a=" << a << " b=" << b);
    Arguments args = i32Args(a, b);
    CHECK(evalInt(a32 + b32, args) == wrap32(uint64_t(uint32_t(a)) + b));
    CHECK(evalInt(a32 - b32, args) == wrap32(uint32_t(a) - uint32_t(b)));
    CHECK(evalInt(a32 * b32, args) ==
          wrap32(uint64_t(uint32_t(a)) * uint32_t(b)));
    CHECK(evalInt(-a32, args) == wrap32(0u - uint32_t(a)));
    if (b != 0 && !(a == INT32_MIN && b == -1)) {
      CHECK(evalInt(a32 / b32, args) == a / b);
      CHECK(evalInt(a32 % b32, args) == a % b);
    }
    CHECK(evalInt(min(a32, b32), args) == std::min(a, b));
    CHECK(evalInt(max(a32, b32), args) == std::max(a, b));

    int64_t x = static_cast<int64_t>(rng()), y = static_cast<int64_t>(rng());
    INFO("x=" << x << " y=" << y);
    Arguments args64 = i64Args(x, y);
    CHECK(evalInt(a64 + b64, args64) ==
          static_cast<int64_t>(uint64_t(x) + uint64_t(y)));
    CHECK(evalInt(a64 - b64, args64) ==
          static_cast<int64_t>(uint64_t(x) - uint64_t(y)));
    CHECK(evalInt(a64 * b64, args64) ==
          static_cast<int64_t>(uint64_t(x) * uint64_t(y)));
    if (y != 0) {
      CHECK(evalInt(a64 / b64, args64) == x / y);
      CHECK(evalInt(a64 % b64, args64) == x % y);
    }
  }
  CHECK(evalInt(a32 + b32, i32Args(INT32_MAX, 1)) == INT32_MIN);
  CHECK(evalInt(a64 + b64, i64Args(INT64_MAX, 1)) == INT64_MIN);
  CHECK(evalInt(a32 * b32, i32Args(65536, 65536)) == 0);
  CHECK(evalInt(-a32, i32Args(INT32_MIN, 0)) == INT32_MIN);
  // abs(INT32_MIN) == INT32_MIN, as Expr.h states.
  CHECK(evalInt(abs(a32), i32Args(INT32_MIN, 0)) == INT32_MIN);
  CHECK(evalInt(abs(a32), i32Args(-17, 0)) == 17);
  CHECK(evalInt(abs(a64), i64Args(INT64_MIN, 0)) == INT64_MIN);
  // INT_MIN / -1 wraps to INT_MIN, and its remainder is 0.
  CHECK(evalInt(a32 / b32, i32Args(INT32_MIN, -1)) == INT32_MIN);
  CHECK(evalInt(a32 % b32, i32Args(INT32_MIN, -1)) == 0);
  CHECK(evalInt(a64 / b64, i64Args(INT64_MIN, -1)) == INT64_MIN);
  CHECK(evalInt(a64 % b64, i64Args(INT64_MIN, -1)) == 0);
}

TEST_CASE("interpreter: truncating division, division by zero is 0",
          "[frontend][interpreter]") {
  Expr a = param<int32_t>("a"), b = param<int32_t>("b");
  CHECK(evalInt(a / b, i32Args(-7, 2)) == -3);
  CHECK(evalInt(a % b, i32Args(-7, 2)) == -1);
  CHECK(evalInt(a / b, i32Args(7, -2)) == -3);
  CHECK(evalInt(a % b, i32Args(7, -2)) == 1);
  CHECK(evalInt(a / b, i32Args(-7, -2)) == 3);
  CHECK(evalInt(a % b, i32Args(-7, -2)) == -1);
  CHECK(evalInt(a / b, i32Args(12345, 0)) == 0);
  CHECK(evalInt(a % b, i32Args(12345, 0)) == 0);
  CHECK(evalInt(a / b, i32Args(INT32_MIN, 0)) == 0);
  Expr x = param<int64_t>("a"), y = param<int64_t>("b");
  CHECK(evalInt(x / y, i64Args(-99, 0)) == 0);
  CHECK(evalInt(x % y, i64Args(-99, 0)) == 0);
  CHECK(evalInt(x / y, i64Args(-9, 4)) == -2);
  // Literal divisors too.
  CHECK(evalInt(q_idx / 0) == 0);
  CHECK(evalInt(q_idx % 0) == 0);
  // f32 division follows IEEE (the zero rule is for integers).
  Arguments f;
  f.set("x", Scalar::f32(1.5f));
  CHECK(std::isinf(evalFloat(param<float>("x") / 0.0f, f)));
}

TEST_CASE("interpreter: casts saturate and truncate",
          "[frontend][interpreter]") {
  Expr x = param<float>("x");
  auto toI32 = [&](float v) {
    Arguments args;
    args.set("x", Scalar::f32(v));
    return evalInt(cast<int32_t>(x), args);
  };
  auto toI64 = [&](float v) {
    Arguments args;
    args.set("x", Scalar::f32(v));
    return evalInt(cast<int64_t>(x), args);
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(toI32(2.75f) == 2);
  CHECK(toI32(-2.75f) == -2);
  CHECK(toI32(-0.5f) == 0);
  CHECK(toI32(3e9f) == INT32_MAX);
  CHECK(toI32(-3e9f) == INT32_MIN);
  CHECK(toI32(inf) == INT32_MAX);
  CHECK(toI32(-inf) == INT32_MIN);
  CHECK(toI32(nan) == 0);
  CHECK(toI32(-nan) == 0);
  CHECK(toI32(2147483520.0f) == 2147483520);
  CHECK(toI64(1e19f) == INT64_MAX);
  CHECK(toI64(-1e19f) == INT64_MIN);
  CHECK(toI64(nan) == 0);
  CHECK(toI64(inf) == INT64_MAX);
  CHECK(toI64(-123456789012.0f) == -123456790528); // the f32 nearest
  // bool -> number gives 0 or 1.
  EvalPoint p;
  p.qIdx = 4;
  p.kvIdx = 2;
  CHECK(evalInt(cast<int32_t>(q_idx > kv_idx), {}, p) == 1);
  CHECK(evalInt(cast<int64_t>(q_idx < kv_idx), {}, p) == 0);
  CHECK(evalFloat(cast<float>(q_idx > kv_idx), {}, p) == 1.0);
  // i32 -> i64 and integer -> f32.
  CHECK(evalInt(cast<int64_t>(q_idx - 10), {}, p) == -6);
  CHECK(evalFloat(cast<float>(q_idx - 10), {}, p) == -6.0);
  CHECK(evalFloat(q_idx * 0.5f, {}, p) == 2.0);
}

TEST_CASE("interpreter: select, min, max, comparisons",
          "[frontend][interpreter]") {
  EvalPoint p;
  p.qIdx = 3;
  p.kvIdx = 8;
  p.score = 2.5;
  CHECK(evalInt(select(q_idx < kv_idx, q_idx, kv_idx), {}, p) == 3);
  CHECK(evalInt(select(q_idx > kv_idx, q_idx, kv_idx), {}, p) == 8);
  CHECK(evalFloat(select(q_idx > kv_idx, score, -score), {}, p) == -2.5);
  CHECK(evaluate(select(q_idx < kv_idx, q_idx == 3, false), p, {}).asBool());
  CHECK(evalFloat(min(score, 1.0f), {}, p) == 1.0);
  CHECK(evalFloat(max(score, q_idx), {}, p) == 3.0);
  CHECK(evalInt(min(q_idx - kv_idx, -7), {}, p) == -7);
  CHECK(evalInt(max(q_idx - kv_idx, -7), {}, p) == -5);
  CHECK(evaluate((q_idx < kv_idx) == (kv_idx > q_idx), p, {}).asBool());
  CHECK(evaluate((q_idx < kv_idx) != (kv_idx < q_idx), p, {}).asBool());
  CHECK(evaluate(!(q_idx == kv_idx) && (q_idx <= 3) && (kv_idx >= 8), p, {})
            .asBool());
  CHECK(evaluate((q_idx > 3) || (kv_idx != 8) || true, p, {}).asBool());
  CHECK(!evaluate((q_idx > 3) || (kv_idx != 8), p, {}).asBool());

  Arguments nanArgs;
  nanArgs.set("x", Scalar::f32(std::numeric_limits<float>::quiet_NaN()));
  Expr x = param<float>("x");
  CHECK(!evaluate(x < 1.0f, {}, nanArgs).asBool());
  CHECK(!evaluate(x == x, {}, nanArgs).asBool());
  CHECK(evaluate(x != x, {}, nanArgs).asBool());
}

TEST_CASE("interpreter: math functions match <cmath>",
          "[frontend][interpreter]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  Expr x = param<float>("x");
  for (int t = 0; t < 300; ++t) {
    float v = static_cast<float>(flashjit::test::uniform(rng, -20.0, 20.0));
    double d = v;
    Arguments args;
    args.set("x", Scalar::f32(v));
    INFO("x = " << v);
    CHECK(evalFloat(exp(x), args) == Approx(std::exp(d)).epsilon(1e-12));
    CHECK(evalFloat(exp2(x), args) == Approx(std::exp2(d)).epsilon(1e-12));
    CHECK(evalFloat(tanh(x), args) == Approx(std::tanh(d)).epsilon(1e-12));
    CHECK(evalFloat(sigmoid(x), args) ==
          Approx(1.0 / (1.0 + std::exp(-d))).epsilon(1e-12));
    CHECK(evalFloat(abs(x), args) == std::abs(d));
    CHECK(evalFloat(-x, args) == -d);
    if (v > 0) {
      CHECK(evalFloat(log(x), args) == Approx(std::log(d)).epsilon(1e-12));
      CHECK(evalFloat(sqrt(x), args) == Approx(std::sqrt(d)).epsilon(1e-12));
    }
    float w = flashjit::test::nonZero(rng);
    args.set("w", Scalar::f32(w));
    Expr y = param<float>("w");
    CHECK(evalFloat(x * y + x / y - y, args) ==
          Approx(d * w + d / w - w).epsilon(1e-12));
  }
  Arguments args;
  args.set("x", Scalar::f32(-1.0f));
  CHECK(std::isnan(evalFloat(log(x), args)));
  CHECK(std::isnan(evalFloat(sqrt(x), args)));
  args.set("x", Scalar::f32(0.0f));
  CHECK(evalFloat(log(x), args) == -std::numeric_limits<double>::infinity());
  CHECK(evalFloat(sigmoid(x), args) == 0.5);
  // Integers are promoted: exp(q_idx) at q_idx = 2.
  EvalPoint p;
  p.qIdx = 2;
  CHECK(evalFloat(exp(q_idx), {}, p) == Approx(std::exp(2.0)).epsilon(1e-12));
  // f32 is evaluated in double: 0.1 + 0.2 as doubles of the f32 literals.
  CHECK(evalFloat(constant(ScalarType::Float32, 0, 0.1f) + 0.2f) ==
        double(0.1f) + double(0.2f));
}

TEST_CASE("interpreter: parameters and buffers", "[frontend][interpreter]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> doc(9);
  std::vector<int64_t> big(5);
  std::vector<float> slope(4);
  for (auto &d : doc)
    d = static_cast<int32_t>(flashjit::test::uniformInt(rng, -50, 50));
  for (auto &b : big)
    b = static_cast<int64_t>(rng());
  for (auto &s : slope)
    s = flashjit::test::nonZero(rng);
  Arguments args;
  args.bind("doc", doc.data(), 9).bind("big", big.data(), 5);
  args.bind("slope", slope.data(), 4);
  args.set("w", Scalar::i32(-3)).set("cap", Scalar::f32(2.5f));
  args.set("n", Scalar::i64(int64_t{1} << 40));

  Expr docQ = buffer<int32_t>("doc")[q_idx];
  for (int64_t i = 0; i < 9; ++i) {
    EvalPoint p;
    p.qIdx = i;
    p.head = i % 4;
    CHECK(evalInt(docQ, args, p) == doc[i]);
    CHECK(evalFloat(buffer<float>("slope")[head], args, p) == slope[i % 4]);
    if (i < 5)
      CHECK(evalInt(buffer<int64_t>("big")[q_idx], args, p) == big[i]);
  }
  CHECK(evalInt(param<int32_t>("w") * 2, args) == -6);
  CHECK(evalFloat(param<float>("cap"), args) == 2.5);
  CHECK(evalInt(param<int64_t>("n") + 1, args) == (int64_t{1} << 40) + 1);
  // Index computed by an i64 expression.
  EvalPoint p;
  p.kvIdx = 4;
  CHECK(evalInt(buffer<int32_t>("doc")[cast<int64_t>(kv_idx) * 2], args, p) ==
        doc[8]);

  SECTION("missing parameter") {
    flashjit::test::expectUserError(
        [&] { return evaluate(param<float>("nope") + 1.0f, {}, args); },
        {"nope"});
  }
  SECTION("missing buffer") {
    flashjit::test::expectUserError(
        [&] { return evaluate(buffer<int32_t>("absent")[q_idx], {}, args); },
        {"absent"});
  }
  SECTION("buffer index out of range") {
    EvalPoint at;
    at.qIdx = 9;
    flashjit::test::expectUserError([&] { return evaluate(docQ, at, args); },
                                    {"doc"});
    at.qIdx = -1;
    flashjit::test::expectUserError([&] { return evaluate(docQ, at, args); },
                                    {"doc"});
    flashjit::test::expectUserError(
        [&] { return evaluate(buffer<int64_t>("big")[5], {}, args); });
  }
}
