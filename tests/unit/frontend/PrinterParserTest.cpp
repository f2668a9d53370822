//===- PrinterParserTest.cpp - Canonical text of expressions --------------===//
//
// parseExpr(printExpr(e)) is structurally equal to e for thousands of random
// trees; the canonical forms the headers document print as documented; the
// friendly text a user types parses with C precedence into the same tree the
// C++ operators build; syntax errors and unknown identifiers throw ParseError
// with the column of the offending character.
//
//===----------------------------------------------------------------------===//
#include "RandomExpr.h"
#include "TestSupport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include <catch2/catch.hpp>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

using namespace flashjit;
using flashjit::test::freshSeed;

namespace {

/// Counts node kinds and operators in \p e, so the property test can show it
/// covered every one.
struct Coverage {
  std::set<ExprKind> kinds;
  std::set<UnaryOp> unary;
  std::set<BinaryOp> binary;
  std::set<ScalarType> castTargets;
  void add(const Expr &e) {
    kinds.insert(e.kind());
    if (auto *u = dynamic_cast<const UnaryExpr *>(e.get()))
      unary.insert(u->op());
    if (auto *b = dynamic_cast<const BinaryExpr *>(e.get()))
      binary.insert(b->op());
    if (e.kind() == ExprKind::Cast)
      castTargets.insert(e.type());
    for (const Expr &op : e->operands())
      add(op);
  }
};

} // namespace

TEST_CASE("printer: documented canonical forms", "[frontend][printer]") {
  CHECK(printExpr(q_idx) == "q_idx");
  CHECK(printExpr(score) == "score");
  CHECK(printExpr(seqlen_k) == "seqlen_k");
  CHECK(printExpr(constant(ScalarType::Int32, 5, 0.0f)) == "5");
  CHECK(printExpr(constant(ScalarType::Int64, 5, 0.0f)) == "5L");
  CHECK(printExpr(constant(ScalarType::Float32, 0, 5.0f)) == "5.0");
  CHECK(printExpr(constant(ScalarType::Bool, 1, 0.0f)) == "true");
  CHECK(printExpr(constant(ScalarType::Bool, 0, 0.0f)) == "false");
  CHECK(printExpr(param<float>("cap")) == "param<f32>(cap)");
  CHECK(printExpr(param<int64_t>("n")) == "param<i64>(n)");
  CHECK(printExpr(buffer<int32_t>("doc_id")[q_idx]) ==
        "buffer<i32>(doc_id)[q_idx]");
  CHECK(printExpr(q_idx >= kv_idx) == "(q_idx >= kv_idx)");
  CHECK(printExpr(q_idx >= kv_idx && q_idx - kv_idx < 1024) ==
        "((q_idx >= kv_idx) && ((q_idx - kv_idx) < 1024))");
  CHECK(printExpr(min(q_idx, kv_idx)) == "min(q_idx, kv_idx)");
  CHECK(printExpr(max(score, 1.5f)) == "max(score, 1.5)");
  // Printing is deterministic and location-free.
  Expr a = q_idx % 3 == kv_idx % 3;
  Expr b = q_idx % 3 == kv_idx % 3;
  CHECK(printExpr(a) == printExpr(b));
}

TEST_CASE("printer: printFloat is shortest and reads back exactly",
          "[frontend][printer]") {
  CHECK(printFloat(5.0f) == "5.0");
  CHECK(printFloat(0.1f) == "0.1");
  CHECK(printFloat(-2.5f) == "-2.5");
  CHECK(printFloat(1.0f / 3.0f) == "0.33333334");
  CHECK(printFloat(std::numeric_limits<float>::infinity()) == "inf");
  CHECK(printFloat(-std::numeric_limits<float>::infinity()) == "-inf");
  CHECK(printFloat(std::numeric_limits<float>::quiet_NaN()) == "nan");

  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1e30f,
                               -1e-30f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::lowest(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               16777217.0f,
                               123456789.0f};
  for (int i = 0; i < 3000; ++i) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(f))
      values.push_back(f);
  }
  for (float f : values) {
    std::string text = printFloat(f);
    INFO(text << " for bits " << std::bit_cast<uint32_t>(f));
    CHECK(text.find_first_of(".eE") != std::string::npos);
    float back = std::strtof(text.c_str(), nullptr);
    CHECK(std::bit_cast<uint32_t>(back) == std::bit_cast<uint32_t>(f));
    // Shortest: no more significant digits than the shortest round trip.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f);
    std::string shortest(buf, res.ptr);
    auto digits = [](const std::string &s) {
      std::string mantissa = s.substr(0, s.find_first_of("eE"));
      size_t first = mantissa.find_first_not_of("-0.");
      if (first == std::string::npos)
        return size_t{0};
      size_t n = 0;
      for (size_t i = first; i < mantissa.size(); ++i)
        n += mantissa[i] >= '0' && mantissa[i] <= '9';
      // Trailing zeros of an integer mantissa are not significant.
      size_t last = mantissa.find_last_not_of("0.");
      for (size_t i = last + 1; i < mantissa.size(); ++i)
        n -= mantissa[i] == '0';
      return n;
    };
    INFO("shortest: " << shortest);
    CHECK(digits(text) <= digits(shortest));
  }
}

TEST_CASE("printer/parser: thousands of random trees round-trip",
          "[frontend][printer][parser][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  flashjit::test::RandomExprGen gen(seed);
  const ScalarType types[] = {ScalarType::Bool, ScalarType::Int32,
                              ScalarType::Int64, ScalarType::Float32};
  int failures = 0;
  int64_t nodes = 0;
  Coverage cov;
  for (int i = 0; i < 4000 && failures < 3; ++i) {
    Expr e = gen.gen(types[i % 4], 1 + i % 7);
    cov.add(e);
    std::string text = printExpr(e);
    nodes += static_cast<int64_t>(text.size());
    Expr back;
    try {
      back = parseExpr(text);
    } catch (const UserError &err) {
      ++failures;
      FAIL_CHECK("parse failed on tree " << i << ": " << text << "\n  "
                                         << err.what());
      continue;
    }
    if (!structurallyEqual(back, e)) {
      ++failures;
      FAIL_CHECK("round trip changed tree " << i << ":\n  printed " << text
                                            << "\n  reprinted "
                                            << printExpr(back));
      continue;
    }
    CHECK(back.type() == e.type());
    // The text is a fixed point and the hash follows it.
    CHECK(printExpr(back) == text);
    CHECK(hashExpr(back) == hashExpr(e));
  }
  CHECK(failures == 0);
  CHECK(nodes > 4000);
  // The generator reached every node kind, operator and cast target.
  CHECK(cov.kinds.size() == 9);
  CHECK(cov.unary.size() == 9);
  CHECK(cov.binary.size() == 15);
  CHECK(cov.castTargets.size() == 3);
}

TEST_CASE("printer/parser: extreme constants round-trip",
          "[frontend][printer][parser]") {
  const float inf = std::numeric_limits<float>::infinity();
  const Expr cases[] = {
      constant(ScalarType::Int32, INT32_MIN, 0.0f),
      constant(ScalarType::Int32, INT32_MAX, 0.0f),
      constant(ScalarType::Int32, -1, 0.0f),
      constant(ScalarType::Int64, INT64_MIN, 0.0f),
      constant(ScalarType::Int64, INT64_MAX, 0.0f),
      constant(ScalarType::Int64, -7, 0.0f),
      constant(ScalarType::Float32, 0, -0.0f),
      constant(ScalarType::Float32, 0, inf),
      constant(ScalarType::Float32, 0, -inf),
      constant(ScalarType::Float32, 0, std::numeric_limits<float>::quiet_NaN()),
      constant(ScalarType::Float32, 0, -1e-45f),
      -constant(ScalarType::Int32, 5, 0.0f),
      -constant(ScalarType::Int32, INT32_MIN, 0.0f),
      -constant(ScalarType::Float32, 0, -0.0f),
      -(-q_idx),
      q_idx - -3,
      score * -0.0f,
      cast<float>(constant(ScalarType::Int32, -3, 0.0f)),
      cast<int64_t>(constant(ScalarType::Int32, 4, 0.0f)) + int64_t{1},
      select(q_idx > 0, select(kv_idx > 0, score, -inf), score * 2.0f),
      q_idx - kv_idx - 1,
      q_idx - (kv_idx - 1),
      q_idx / 2 * 3,
      q_idx / (2 * 3)};
  for (const Expr &e : cases) {
    std::string text = printExpr(e);
    INFO(text);
    Expr back = parseExpr(text);
    CHECK(structurallyEqual(back, e));
  }
}

TEST_CASE("parser: friendly text uses C precedence", "[frontend][parser]") {
  struct Case {
    const char *text;
    Expr expected;
  };
  Buffer slope = buffer<float>("slope");
  const Case cases[] = {
      {"q_idx >= kv_idx && q_idx - kv_idx < 1024",
       q_idx >= kv_idx && q_idx - kv_idx < 1024},
      {"30.0 * tanh(score / 30.0)", 30.0f * tanh(score / 30.0f)},
      {"score - buffer<f32>(slope)[head] * abs(q_idx - kv_idx)",
       score - slope[head] * abs(q_idx - kv_idx)},
      {"q_idx + kv_idx * 2", q_idx + kv_idx * 2},
      {"q_idx * kv_idx + 2", q_idx * kv_idx + 2},
      {"q_idx - kv_idx - 1", (q_idx - kv_idx) - 1},
      {"q_idx / 2 / 3", (q_idx / 2) / 3},
      {"q_idx % 3 == 0", (q_idx % 3) == 0},
      {"q_idx < kv_idx == kv_idx < q_idx",
       (q_idx < kv_idx) == (kv_idx < q_idx)},
      {"q_idx < 1 || q_idx > 5 && kv_idx > 2",
       (q_idx < 1) || ((q_idx > 5) && (kv_idx > 2))},
      {"!(q_idx == kv_idx) && kv_idx <= q_idx",
       !(q_idx == kv_idx) && kv_idx <= q_idx},
      {"-q_idx * 2", (-q_idx) * 2},
      {"  ( q_idx>=kv_idx )  ", q_idx >= kv_idx},
      {"((q_idx))", q_idx},
      {"q_idx + 2.5", q_idx + 2.5f},
      {"score * 2", score * 2},
      {"q_idx + 5L", q_idx + int64_t{5}},
      {"min(q_idx, kv_idx + 1)", min(q_idx, kv_idx + 1)},
      {"max(score, 0)", max(score, 0)},
      {"select(q_idx > kv_idx, score, -1.0)",
       select(q_idx > kv_idx, score, -1.0f)},
      {"exp2(score) + sigmoid(score) - sqrt(score) + log(score) + exp(1.0)",
       exp2(score) + sigmoid(score) - sqrt(score) + log(score) +
           flashjit::exp(1.0f)},
      {"cast<i64>(q_idx) * param<i64>(stride)",
       cast<int64_t>(q_idx) * param<int64_t>("stride")},
      {"kv_idx < seqlen_k - seqlen_q + q_idx + 1",
       kv_idx < seqlen_k - seqlen_q + q_idx + 1},
      {"batch + head < 3 != false", (batch + head < 3) != false},
      {"param<f32>(cap) * tanh(score / param<f32>(cap))",
       param<float>("cap") * tanh(score / param<float>("cap"))},
  };
  for (const Case &c : cases) {
    INFO(c.text << "\n  expected " << printExpr(c.expected));
    Expr e = parseExpr(c.text);
    INFO("  got " << printExpr(e));
    CHECK(structurallyEqual(e, c.expected));
  }
}

TEST_CASE("parser: type errors are UserErrors", "[frontend][parser][error]") {
  for (const char *text :
       {"q_idx + true", "score % 2.0", "q_idx && kv_idx", "!q_idx",
        "buffer<i32>(doc)[score]", "buffer<i32>(doc)[1.5]",
        "select(q_idx, 1, 2)", "cast<bool>(q_idx)", "param<bool>(flag)",
        "(q_idx > 0) < (kv_idx > 0)", "exp(q_idx > 0)"}) {
    INFO(text);
    CHECK_THROWS_AS(parseExpr(text), UserError);
  }
}

TEST_CASE("parser: syntax errors carry the column",
          "[frontend][parser][error]") {
  struct Case {
    const char *text;
    size_t column; // 1-based column of the offending character
  };
  const Case exact[] = {
      {"q_idx >= foo", 10},          // unknown identifier
      {"bogus(q_idx)", 1},           // unknown function
      {"q_idx $ kv_idx", 7},         // unexpected character
      {"q_idx ) ", 7},               // unbalanced parenthesis
      {"q_idx >= kv_idx extra", 17}, // trailing input
      {"1 +* 2", 4},                 // operator where an operand belongs
      {"q_idx + @", 9},              // bad character as operand
      {"score * unknown_leaf", 9},   // unknown identifier
  };
  for (const Case &c : exact) {
    INFO(c.text);
    bool threw = false;
    try {
      parseExpr(c.text);
    } catch (const ParseError &e) {
      threw = true;
      INFO(e.what());
      CHECK(e.column() == c.column);
      CHECK(!e.message().empty());
    }
    CHECK(threw);
  }
  // Input that ends too early: the column is at or just past the end.
  for (const char *text : {"q_idx +", "exp(score", "min(q_idx,", "(q_idx",
                           "buffer<i32>(doc)[q_idx"}) {
    INFO(text);
    const size_t n = std::string(text).size();
    bool threw = false;
    try {
      parseExpr(text);
    } catch (const ParseError &e) {
      threw = true;
      INFO(e.what());
      CHECK(e.column() >= n);
      CHECK(e.column() <= n + 1);
    }
    CHECK(threw);
  }
  CHECK_THROWS_AS(parseExpr(""), ParseError);
  CHECK_THROWS_AS(parseExpr("   "), ParseError);
  CHECK_THROWS_AS(parseExpr("min(q_idx)"), UserError);
  CHECK_THROWS_AS(parseExpr("param<f32>()"), UserError);
  CHECK_THROWS_AS(parseExpr("param<f99>(x)"), UserError);
}

TEST_CASE("parser: errors quote a bounded excerpt of a huge input",
          "[frontend][parser][error]") {
  // A 2 MB literal once gave a 4 MB message (the literal, the whole text and
  // a caret line as long as the text).
  const std::string huge(size_t(2) << 20, '1');
  const std::string ident(size_t(2) << 20, 'x');
  struct Case {
    std::string text;
    bool spec;
  };
  const Case cases[] = {
      {huge, false},                             // malformed integer
      {huge + ".5", false},                      // f32 out of range
      {"q_idx + " + ident, false},               // unknown identifier
      {"attention(" + ident + "=1)", true},      // unknown field
      {"attention(dtype=" + ident + ")", true},  // unknown dtype
      {"attention(causal=" + ident + ")", true}, // unknown causal mode
      {"param<" + ident + ">(cap)", false},      // unknown type
      {std::string(size_t(2) << 20, ' ') + "q_idx +", false}, // early end
  };
  for (const Case &c : cases) {
    INFO(c.text.substr(0, 40));
    bool threw = false;
    try {
      if (c.spec)
        parseSpec(c.text);
      else
        parseExpr(c.text);
    } catch (const ParseError &e) {
      threw = true;
      std::string what = e.what();
      INFO(what.substr(0, 2000));
      CHECK(what.size() < 1200);
      CHECK(what.find(std::to_string(c.text.size()) + " bytes") !=
            std::string::npos);
    }
    CHECK(threw);
  }
  // In the middle of a long text, the caret still points at the culprit.
  std::string sum = "q_idx";
  for (int i = 0; i < 400; ++i) // 3205 bytes, nested under 1000 levels
    sum += " + q_idx";
  const std::string text = sum + " $ " + sum;
  try {
    parseExpr(text);
    FAIL("no ParseError");
  } catch (const ParseError &e) {
    CHECK(e.column() == sum.size() + 2);
    std::string what = e.what();
    size_t nl1 = what.find('\n'), nl2 = what.find('\n', nl1 + 1);
    std::string quoted = what.substr(nl1 + 1, nl2 - nl1 - 1);
    std::string caret =
        what.substr(nl2 + 1, what.find('\n', nl2 + 1) - nl2 - 1);
    INFO(what);
    REQUIRE(caret.find('^') != std::string::npos);
    CHECK(quoted[caret.find('^')] == '$');
    CHECK(quoted.size() < 220);
    CHECK(quoted.find("...") == 2);
  }
  // Short texts are quoted whole, as before.
  try {
    parseExpr("q_idx $ kv_idx");
  } catch (const ParseError &e) {
    CHECK(std::string(e.what()) ==
          "unexpected '$' after the expression at column 7\n"
          "  q_idx $ kv_idx\n"
          "        ^");
  }
  CHECK(excerpt("short") == "short");
  CHECK(excerpt(std::string(500, 'a')) ==
        std::string(kExcerptChars, 'a') + "... (500 bytes in all)");
  // Never splits a UTF-8 character: 'é' is 2 bytes.
  std::string accents;
  for (int i = 0; i < 150; ++i)
    accents += "\xc3\xa9";
  CHECK(excerpt(accents).substr(0, kExcerptChars) ==
        accents.substr(0, kExcerptChars));
  CHECK(excerpt(accents, 7).substr(0, 6) == accents.substr(0, 6));
  CHECK(excerpt(accents, 7).substr(6, 3) == "...");
}

TEST_CASE("parser: messages quote non-ASCII text as whole characters",
          "[frontend][parser][error]") {
  // A lone byte of a multi-byte character would make the message invalid
  // UTF-8 (Python's ctypes binding then fails to decode it).
  CHECK_THROWS_WITH(parseExpr("q_idx >= kv_idx \xE2\x88\xA7 1"),
                    Catch::Contains("'\xE2\x88\xA7' (not ASCII)"));
  CHECK_THROWS_WITH(parseExpr("q_idx >= \xC3\xA9"),
                    Catch::Contains("'\xC3\xA9' (not ASCII)"));
  CHECK_THROWS_WITH(parseExpr("q_idx >= \xFF"), Catch::Contains("byte 0xFF"));
  CHECK_THROWS_WITH(parseExpr("q_idx \x01"), Catch::Contains("byte 0x01"));
}
