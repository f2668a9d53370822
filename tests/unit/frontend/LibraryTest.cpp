//===- LibraryTest.cpp - Standard masks and score modifiers ---------------===//
//
// Each helper of Library.h is evaluated with the interpreter at every point
// of small grids and compared with the formula its header comment states,
// written out here independently.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

using namespace flashjit;
using flashjit::test::freshSeed;
using flashjit::test::uniformInt;

namespace {

using MaskFn =
    std::function<bool(int64_t i, int64_t j, int64_t sq, int64_t sk)>;

/// Checks \p mask against \p expected at every (q, kv) for several shapes,
/// including seqlen_q != seqlen_k both ways.
void checkMaskEverywhere(const Expr &mask, const MaskFn &expected,
                         const Arguments &args = {}) {
  REQUIRE(mask.type() == ScalarType::Bool);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {2, 5}, {5, 2}, {7, 7}, {3, 11}, {11, 4}, {16, 16}};
  int64_t mismatches = 0;
  for (auto [sq, sk] : shapes)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j) {
        EvalPoint p;
        p.batch = 1;
        p.head = 2;
        p.qIdx = i;
        p.kvIdx = j;
        p.seqlenQ = sq;
        p.seqlenK = sk;
        Value v = evaluate(mask, p, args);
        if (v.asBool() != expected(i, j, sq, sk)) {
          if (++mismatches <= 5)
            UNSCOPED_INFO("mismatch at sq=" << sq << " sk=" << sk << " q=" << i
                                            << " kv=" << j);
        }
      }
  CHECK(mismatches == 0);
}

int64_t alignedQ(int64_t i, int64_t sq, int64_t sk, Alignment a) {
  return a == Alignment::TopLeft ? i : i + sk - sq;
}

} // namespace

TEST_CASE("library: aligned_q_idx and causal", "[frontend][library]") {
  CHECK(structurallyEqual(aligned_q_idx(Alignment::TopLeft), q_idx));
  CHECK(aligned_q_idx(Alignment::BottomRight).type() == ScalarType::Int32);
  CHECK(toString(Alignment::TopLeft) == "top_left");
  CHECK(toString(Alignment::BottomRight) == "bottom_right");
  EvalPoint p;
  p.qIdx = 2;
  p.seqlenQ = 3;
  p.seqlenK = 10;
  CHECK(evaluate(aligned_q_idx(Alignment::BottomRight), p, {}).intValue == 9);
  CHECK(evaluate(aligned_q_idx(Alignment::TopLeft), p, {}).intValue == 2);

  for (Alignment a : {Alignment::TopLeft, Alignment::BottomRight}) {
    INFO(toString(a));
    checkMaskEverywhere(causal(a),
                        [a](int64_t i, int64_t j, int64_t sq, int64_t sk) {
                          return j <= alignedQ(i, sq, sk, a);
                        });
  }
}

TEST_CASE("library: sliding windows", "[frontend][library]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 12; ++trial) {
    int left = static_cast<int>(uniformInt(rng, 0, 6));
    int right = static_cast<int>(uniformInt(rng, 0, 4));
    Alignment a = trial % 2 ? Alignment::TopLeft : Alignment::BottomRight;
    bool cur = trial % 4 < 2;
    INFO("left=" << left << " right=" << right << " " << toString(a)
                 << " include_current=" << cur);
    Expr m = sliding_window(left, right, a, cur);
    checkMaskEverywhere(m, [=](int64_t i, int64_t j, int64_t sq, int64_t sk) {
      int64_t c = alignedQ(i, sq, sk, a);
      bool inWindow = j >= c - left && j <= c + right;
      return inWindow && (cur || j != c);
    });
  }
  // The window holds left + 1 + right keys away from the edges.
  Expr m = sliding_window(3, 2, Alignment::TopLeft);
  int count = 0;
  for (int j = 0; j < 30; ++j) {
    EvalPoint p;
    p.qIdx = 10;
    p.kvIdx = j;
    p.seqlenQ = p.seqlenK = 30;
    count += evaluate(m, p, {}).asBool();
  }
  CHECK(count == 6);
}

TEST_CASE("library: sliding window bounds may be parameters",
          "[frontend][library]") {
  Expr m = sliding_window(param<int32_t>("left"), 1, Alignment::TopLeft);
  CHECK(readsData(m));
  for (int left : {0, 2, 5}) {
    Arguments args;
    args.set("left", Scalar::i32(left));
    checkMaskEverywhere(
        m,
        [left](int64_t i, int64_t j, int64_t, int64_t) {
          return j >= i - left && j <= i + 1;
        },
        args);
  }
}

TEST_CASE("library: prefix_lm and chunked", "[frontend][library]") {
  for (int prefix : {0, 1, 3, 20})
    for (Alignment a : {Alignment::TopLeft, Alignment::BottomRight}) {
      INFO("prefix " << prefix << " " << toString(a));
      checkMaskEverywhere(prefix_lm(prefix, a),
                          [=](int64_t i, int64_t j, int64_t sq, int64_t sk) {
                            return j < prefix || j <= alignedQ(i, sq, sk, a);
                          });
    }
  // The default alignment is top-left.
  checkMaskEverywhere(prefix_lm(2), [](int64_t i, int64_t j, int64_t, int64_t) {
    return j < 2 || j <= i;
  });
  for (int chunk : {1, 2, 3, 5, 100}) {
    INFO("chunk " << chunk);
    checkMaskEverywhere(chunked(chunk),
                        [=](int64_t i, int64_t j, int64_t, int64_t) {
                          return i / chunk == j / chunk;
                        });
    checkMaskEverywhere(chunked(chunk) && causal(Alignment::TopLeft),
                        [=](int64_t i, int64_t j, int64_t, int64_t) {
                          return i / chunk == j / chunk && j <= i;
                        });
  }
  Arguments args;
  args.set("c", Scalar::i32(4));
  checkMaskEverywhere(
      chunked(param<int32_t>("c")),
      [](int64_t i, int64_t j, int64_t, int64_t) { return i / 4 == j / 4; },
      args);
}

TEST_CASE("library: softcap, alibi, relative_bias", "[frontend][library]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);

  const float cap = 30.0f;
  Expr sc = softcap(cap);
  CHECK(sc.type() == ScalarType::Float32);
  CHECK(readsScore(sc));
  Expr scParam = softcap(param<float>("cap"));
  for (int t = 0; t < 50; ++t) {
    double s = flashjit::test::uniform(rng, -200.0, 200.0);
    EvalPoint p;
    p.score = s;
    double expected = cap * std::tanh(s / cap);
    CHECK(evaluate(sc, p, {}).floatValue == Approx(expected).epsilon(1e-12));
    Arguments args;
    args.set("cap", Scalar::f32(50.0f));
    CHECK(evaluate(scParam, p, args).floatValue ==
          Approx(50.0 * std::tanh(s / 50.0)).epsilon(1e-12));
  }

  std::vector<float> slopes(4);
  for (float &x : slopes)
    x = std::abs(flashjit::test::nonZero(rng));
  Expr al = alibi(buffer<float>("slopes"));
  CHECK(al.type() == ScalarType::Float32);
  CHECK(readsScore(al));
  CHECK(readsData(al));
  Arguments alArgs;
  alArgs.bind("slopes", slopes.data(), 4);
  for (int t = 0; t < 50; ++t) {
    EvalPoint p;
    p.head = uniformInt(rng, 0, 3);
    p.qIdx = uniformInt(rng, 0, 40);
    p.kvIdx = uniformInt(rng, 0, 40);
    p.seqlenQ = p.seqlenK = 41;
    p.score = flashjit::test::uniform(rng, -5, 5);
    double expected = p.score - static_cast<double>(slopes[p.head]) *
                                    std::abs(double(p.qIdx - p.kvIdx));
    CHECK(evaluate(al, p, alArgs).floatValue ==
          Approx(expected).epsilon(1e-12).margin(1e-12));
  }

  const int maxDist = 3;
  std::vector<float> table(2 * maxDist + 1);
  for (float &x : table)
    x = flashjit::test::nonZero(rng);
  Expr rb = relative_bias(buffer<float>("table"), maxDist);
  CHECK(rb.type() == ScalarType::Float32);
  Arguments rbArgs;
  rbArgs.bind("table", table.data(), static_cast<int64_t>(table.size()));
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 10; ++j) {
      EvalPoint p;
      p.qIdx = i;
      p.kvIdx = j;
      p.seqlenQ = p.seqlenK = 10;
      p.score = 0.75;
      int64_t d = std::clamp<int64_t>(j - i, -maxDist, maxDist) + maxDist;
      CHECK(evaluate(rb, p, rbArgs).floatValue ==
            Approx(0.75 + table[d]).epsilon(1e-12));
    }
}

TEST_CASE("library: helpers are plain expressions that round-trip as text",
          "[frontend][library][text]") {
  const Expr helpers[] = {causal(Alignment::TopLeft),
                          causal(Alignment::BottomRight),
                          sliding_window(128, 0, Alignment::TopLeft),
                          sliding_window(64, 3, Alignment::BottomRight, false),
                          prefix_lm(16, Alignment::BottomRight),
                          chunked(8192) && causal(Alignment::TopLeft),
                          softcap(30.0f),
                          softcap(param<float>("cap")),
                          alibi(buffer<float>("slopes")),
                          relative_bias(buffer<float>("bias"), 32)};
  for (const Expr &e : helpers) {
    std::string text = printExpr(e);
    INFO(text);
    CHECK(structurallyEqual(parseExpr(text), e));
  }
}

TEST_CASE("library: text sugar expands to the C++ helper's tree",
          "[frontend][library][text]") {
  struct Case {
    const char *text;
    Expr cpp;
  };
  const Case cases[] = {
      {"causal(top_left)", causal(Alignment::TopLeft)},
      {"causal( bottom_right )", causal(Alignment::BottomRight)},
      {"aligned_q_idx(bottom_right)", aligned_q_idx(Alignment::BottomRight)},
      {"sliding_window(128, 0, top_left)",
       sliding_window(128, 0, Alignment::TopLeft)},
      {"sliding_window(64, 3, bottom_right, false)",
       sliding_window(64, 3, Alignment::BottomRight, false)},
      {"sliding_window(0, 0, top_left, false)",
       sliding_window(0, 0, Alignment::TopLeft, false)},
      {"sliding_window(5, 2, top_left, true)",
       sliding_window(5, 2, Alignment::TopLeft, true)},
      {"sliding_window(param<i32>(w), 0, bottom_right)",
       sliding_window(param<int32_t>("w"), 0, Alignment::BottomRight)},
      {"prefix_lm(16)", prefix_lm(16)},
      {"prefix_lm(16, bottom_right)", prefix_lm(16, Alignment::BottomRight)},
      {"chunked(8192) && causal(top_left)",
       chunked(8192) && causal(Alignment::TopLeft)},
      {"chunked(param<i64>(c))", chunked(param<int64_t>("c"))},
      {"softcap(30.0)", softcap(30.0f)},
      {"softcap(param<f32>(cap))", softcap(param<float>("cap"))},
      {"alibi(slopes)", alibi(buffer<float>("slopes"))},
      {"alibi(buffer<f32>(slopes))", alibi(buffer<float>("slopes"))},
      {"relative_bias(bias, 32)", relative_bias(buffer<float>("bias"), 32)},
      {"relative_bias(bias, 0)", relative_bias(buffer<float>("bias"), 0)},
      {"softcap(20.0) + 1.0", softcap(20.0f) + 1.0f},
      {"causal(top_left) || (buffer<i32>(doc)[q_idx] == "
       "buffer<i32>(doc)[kv_idx])",
       causal(Alignment::TopLeft) ||
           (buffer<int32_t>("doc")[q_idx] == buffer<int32_t>("doc")[kv_idx])},
  };
  for (const Case &c : cases) {
    INFO(c.text);
    Expr parsed = parseExpr(c.text);
    std::string canonical = printExpr(c.cpp);
    INFO(canonical);
    CHECK(printExpr(parsed) == canonical);
    CHECK(hashExpr(parsed) == hashExpr(c.cpp));
    CHECK(structurallyEqual(parsed, c.cpp));
    // The canonical text reads back as the same tree.
    CHECK(structurallyEqual(parseExpr(canonical), c.cpp));
    CHECK(printExpr(parseExpr(printExpr(parsed))) == canonical);
  }
  // In a spec: the same cache hash as the spec built in C++.
  AttentionSpec fromText = parseSpec(
      "attention(name=gemma, mask=sliding_window(4096, 0, bottom_right), "
      "score=softcap(param<f32>(cap)), head_dim=128, dtype=bf16)");
  AttentionSpec fromCpp;
  Variant v("gemma");
  v.mask(sliding_window(4096, 0, Alignment::BottomRight))
      .scoreMod(softcap(param<float>("cap")));
  fromCpp.variant = v;
  fromCpp.headDimQK = fromCpp.headDimV = 128;
  fromCpp.dtypeQ = fromCpp.dtypeK = fromCpp.dtypeV = fromCpp.dtypeO =
      DType::BF16;
  CHECK(printSpec(fromText) == printSpec(fromCpp));
  CHECK(hashSpec(fromText) == hashSpec(fromCpp));
  CHECK(hashSpec(parseSpec(printSpec(fromText))) == hashSpec(fromCpp));
}

TEST_CASE("library: text sugar errors point at the argument",
          "[frontend][library][text][error]") {
  struct Case {
    const char *text;
    const char *at;      // the text at the error's column
    const char *message; // part of the message
  };
  const Case cases[] = {
      {"causal()", ")", "takes 1 argument, got 0"},
      {"causal(top_left, 1)", "1)", "at most 1 argument"},
      {"causal(diagonal)", "diagonal", "'diagonal'"},
      {"causal(1)", "1)", "expected an alignment"},
      {"causal", "", "expected '(' after 'causal'"},
      {"causal(top_left", "", "expected ',' or ')'"},
      {"sliding_window(-1, 0, top_left)", "-1", "left = -1 must be >= 0"},
      {"sliding_window(8, -2, top_left)", "-2", "right = -2 must be >= 0"},
      {"sliding_window(128, 1.5, top_left)", "1.5",
       "right must be an integer, got f32"},
      {"sliding_window(128, 0)", ")", "at least 3 arguments, got 2"},
      {"sliding_window(1, 0, top_left, maybe)", "maybe",
       "include_current must be true or false, got 'maybe'"},
      {"sliding_window(1, 0, top_left, true, 3)", "3)", "at most 4"},
      {"prefix_lm(score)", "score", "prefix_len must be an integer, got f32"},
      {"prefix_lm(-3)", "-3", "prefix_len = -3 must be >= 0"},
      {"chunked(0)", "0", "chunk_size = 0 must be >= 1"},
      {"chunked(q_idx < 3)", "q_idx", "must be an integer, got bool"},
      {"softcap(true)", "true", "cap must be a number, got bool"},
      {"softcap()", ")", "got 0"},
      {"alibi(buffer<i32>(slopes))", "buffer", "must be f32, got i32"},
      {"alibi(3)", "3", "expected a buffer name"},
      {"relative_bias(bias, -1)", "-1", "max_distance = -1 must be >= 0"},
      {"relative_bias(bias, param<i32>(d))", "param",
       "max_distance must be an i32 literal"},
      {"relative_bias(bias)", ")", "takes 2 arguments, got 1"},
      {"score + softcap(30.0, 2.0)", "2.0", "at most 1 argument"},
  };
  for (const Case &c : cases) {
    INFO(c.text);
    std::string text = c.text;
    size_t column = *c.at ? text.rfind(c.at) + 1 : text.size() + 1;
    bool threw = false;
    try {
      parseExpr(text);
    } catch (const ParseError &e) {
      threw = true;
      INFO(e.what());
      CHECK(e.column() == column);
      CHECK(e.message().find(c.message) != std::string::npos);
    }
    CHECK(threw);
  }
  // A type error of the expansion's use is an ordinary type error.
  CHECK_THROWS_AS(parseExpr("q_idx + causal(top_left)"), UserError);
  CHECK_THROWS_AS(parseSpec("attention(mask=softcap(30.0))"), UserError);
}
