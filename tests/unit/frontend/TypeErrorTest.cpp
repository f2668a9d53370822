//===- TypeErrorTest.cpp - DSL type errors point at the user's line -------===//
//
// Every mistake the header lists throws flashjit::UserError when the bad
// expression is built, and the error's location() is the line of this file
// that built it (std::source_location threaded through ExprArg). Each bad
// expression sits on the line right after `line = __LINE__ + 1`.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <limits>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::expectUserErrorAt;

TEST_CASE("type error: bool in arithmetic", "[frontend][types][error]") {
  unsigned line = __LINE__ + 1;
  auto boolPlusFloat = [] { return (q_idx > 0) + 1.5f; };
  expectUserErrorAt(boolPlusFloat, line);
  line = __LINE__ + 1;
  auto intPlusBool = [] { return q_idx + true; };
  expectUserErrorAt(intPlusBool, line);
  line = __LINE__ + 1;
  auto boolTimesBool = [] { return (q_idx > 0) * (kv_idx > 0); };
  expectUserErrorAt(boolTimesBool, line);
  line = __LINE__ + 1;
  auto negBool = [] { return -(q_idx > kv_idx); };
  expectUserErrorAt(negBool, line);
  line = __LINE__ + 1;
  auto absBool = [] { return abs(q_idx > kv_idx); };
  expectUserErrorAt(absBool, line);
  line = __LINE__ + 1;
  auto expBool = [] { return exp(score > 0.0f); };
  expectUserErrorAt(expBool, line);
  line = __LINE__ + 1;
  auto minBool = [] { return min(q_idx > 0, 1); };
  expectUserErrorAt(minBool, line);
  line = __LINE__ + 1;
  auto divBool = [] { return score / (q_idx == kv_idx); };
  expectUserErrorAt(divBool, line);
}

TEST_CASE("type error: % on floats, logic on numbers",
          "[frontend][types][error]") {
  unsigned line = __LINE__ + 1;
  auto remFloat = [] { return score % 2.0f; };
  expectUserErrorAt(remFloat, line);
  line = __LINE__ + 1;
  auto remPromoted = [] { return q_idx % 2.5f; };
  expectUserErrorAt(remPromoted, line);
  line = __LINE__ + 1;
  auto remScoreInt = [] { return score % 3; };
  expectUserErrorAt(remScoreInt, line);
  line = __LINE__ + 1;
  auto andInts = [] { return q_idx && kv_idx; };
  expectUserErrorAt(andInts, line);
  line = __LINE__ + 1;
  auto orIntLit = [] { return (q_idx > 0) || 1; };
  expectUserErrorAt(orIntLit, line);
  line = __LINE__ + 1;
  auto notInt = [] { return !q_idx; };
  expectUserErrorAt(notInt, line);
  line = __LINE__ + 1;
  auto andFloat = [] { return score && (q_idx > 0); };
  expectUserErrorAt(andFloat, line);
}

TEST_CASE("type error: comparisons mixing bool", "[frontend][types][error]") {
  unsigned line = __LINE__ + 1;
  auto boolEqInt = [] { return (q_idx > 0) == 1; };
  expectUserErrorAt(boolEqInt, line);
  line = __LINE__ + 1;
  auto boolLtBool = [] { return (q_idx > 0) < (kv_idx > 0); };
  expectUserErrorAt(boolLtBool, line);
  line = __LINE__ + 1;
  auto boolGeFloat = [] { return true >= score; };
  expectUserErrorAt(boolGeFloat, line);
}

TEST_CASE("type error: select and cast", "[frontend][types][error]") {
  unsigned line = __LINE__ + 1;
  auto intCond = [] { return select(q_idx, 1, 2); };
  expectUserErrorAt(intCond, line);
  line = __LINE__ + 1;
  auto floatCond = [] { return select(score, score, 0.0f); };
  expectUserErrorAt(floatCond, line);
  line = __LINE__ + 1;
  auto boolAndNumber = [] { return select(q_idx > 0, true, 1); };
  expectUserErrorAt(boolAndNumber, line);
  line = __LINE__ + 1;
  auto castToBool = [] { return cast(ScalarType::Bool, q_idx); };
  expectUserErrorAt(castToBool, line);
}

TEST_CASE("type error: buffers indexed by non-integers",
          "[frontend][types][error]") {
  Buffer doc = buffer<int32_t>("doc_id");
  unsigned line = __LINE__ + 1;
  auto byFloat = [&] { return doc[q_idx * 0.5f]; };
  expectUserErrorAt(byFloat, line);
  line = __LINE__ + 1;
  auto byScore = [&] { return doc[score]; };
  expectUserErrorAt(byScore, line);
  line = __LINE__ + 1;
  auto byFloatLiteral = [&] { return doc[1.0f]; };
  expectUserErrorAt(byFloatLiteral, line);
  line = __LINE__ + 1;
  auto byBool = [&] { return doc[q_idx == kv_idx]; };
  expectUserErrorAt(byBool, line);
}

TEST_CASE("type error: bad names and bool-typed params/buffers",
          "[frontend][types][error]") {
  unsigned line = __LINE__ + 1;
  auto emptyName = [] { return param<float>(""); };
  expectUserErrorAt(emptyName, line);
  line = __LINE__ + 1;
  auto digitName = [] { return param<int32_t>("1window"); };
  expectUserErrorAt(digitName, line);
  line = __LINE__ + 1;
  auto dashName = [] { return param("soft-cap", ScalarType::Float32); };
  expectUserErrorAt(dashName, line);
  line = __LINE__ + 1;
  auto boolParam = [] { return param("flag", ScalarType::Bool); };
  expectUserErrorAt(boolParam, line);
  line = __LINE__ + 1;
  auto spaceBuffer = [] { return buffer<int32_t>("doc id"); };
  expectUserErrorAt(spaceBuffer, line);
  line = __LINE__ + 1;
  auto boolBuffer = [] { return Buffer("mask_bits", ScalarType::Bool); };
  expectUserErrorAt(boolBuffer, line);
  line = __LINE__ + 1;
  auto badVariant = [] { return Variant("my variant"); };
  expectUserErrorAt(badVariant, line);
  line = __LINE__ + 1;
  auto dotVariant = [] { return Variant("v.1"); };
  expectUserErrorAt(dotVariant, line);
}

TEST_CASE("type error: unsigned literal overflow", "[frontend][types][error]") {
  constexpr uint64_t big = uint64_t{INT64_MAX} + 1;
  unsigned line = __LINE__ + 1;
  auto direct = [] { return ExprArg(big); };
  expectUserErrorAt(direct, line);
  line = __LINE__ + 1;
  auto inOperator = [] { return q_idx + ~uint64_t{0}; };
  expectUserErrorAt(inOperator, line);
  // The largest representable unsigned value is fine.
  CHECK(ExprArg(uint64_t{INT64_MAX}).expr().type() == ScalarType::Int64);
}

TEST_CASE("type error: variant masks and score modifiers",
          "[frontend][types][error][variant]") {
  unsigned line = __LINE__ + 1;
  auto floatMask = [] { return Variant().mask(q_idx * 1.5f); };
  expectUserErrorAt(floatMask, line);
  line = __LINE__ + 1;
  auto intMask = [] { return Variant().mask(q_idx - kv_idx); };
  expectUserErrorAt(intMask, line);
  line = __LINE__ + 1;
  auto scoreMask = [] { return Variant().mask(score > 0.0f); };
  expectUserErrorAt(scoreMask, line);
  line = __LINE__ + 1;
  auto boolScore = [] { return Variant().scoreMod(q_idx >= kv_idx); };
  expectUserErrorAt(boolScore, line);
  auto floatOfQ = [](Expr, Expr, Expr q, Expr) { return q * 2.0f; };
  line = __LINE__ + 1;
  auto lambdaMask = [&] { return Variant().mask(floatOfQ); };
  expectUserErrorAt(lambdaMask, line);

  SECTION("conflicting parameter types between mask and score") {
    Variant v;
    v.mask(q_idx - kv_idx < param<int32_t>("w"));
    line = __LINE__ + 1;
    auto conflict = [&] { return v.scoreMod(score * param<float>("w")); };
    expectUserErrorAt(conflict, line, {"w"});
  }
  SECTION("conflicting parameter types, score set first") {
    Variant v;
    v.scoreMod(score * param<float>("w"));
    line = __LINE__ + 1;
    auto conflict = [&] { return v.mask(q_idx < param<int64_t>("w")); };
    expectUserErrorAt(conflict, line, {"w"});
  }
  SECTION("conflicting buffer element types between mask and score") {
    Variant v;
    v.mask(buffer<int32_t>("doc")[q_idx] == buffer<int32_t>("doc")[kv_idx]);
    Buffer fdoc = buffer<float>("doc");
    line = __LINE__ + 1;
    auto conflict = [&] { return v.scoreMod(score + fdoc[head]); };
    expectUserErrorAt(conflict, line, {"doc"});
  }
  SECTION("conflicting parameter types inside one mask") {
    // The header does not say whether the error points at the line that
    // installs the mask or at the line that declared the conflicting
    // parameter; both are the user's lines, so either is accepted.
    const unsigned declLine = __LINE__ + 1;
    Expr n32 = param<int32_t>("n"), n64 = param<int64_t>("n");
    const unsigned maskLine = __LINE__ + 1;
    auto conflict = [&] { return Variant().mask(n32 > q_idx && n64 > 0); };
    bool threw = false;
    try {
      conflict();
    } catch (const UserError &e) {
      threw = true;
      INFO(e.what());
      CHECK(
          (e.location().line() == declLine || e.location().line() == maskLine));
      CHECK(std::string(e.what()).find("'n'") != std::string::npos);
    }
    CHECK(threw);
  }
}

TEST_CASE("type error: library helpers reject bad constants",
          "[frontend][types][error][library]") {
  unsigned line = __LINE__ + 1;
  auto negLeft = [] { return sliding_window(-1, 0, Alignment::TopLeft); };
  expectUserErrorAt(negLeft, line);
  line = __LINE__ + 1;
  auto negRight = [] { return sliding_window(4, -2, Alignment::BottomRight); };
  expectUserErrorAt(negRight, line);
  line = __LINE__ + 1;
  auto floatLeft = [] { return sliding_window(score, 0, Alignment::TopLeft); };
  expectUserErrorAt(floatLeft, line);
  line = __LINE__ + 1;
  auto zeroChunk = [] { return chunked(0); };
  expectUserErrorAt(zeroChunk, line);
  line = __LINE__ + 1;
  auto negChunk = [] { return chunked(-8); };
  expectUserErrorAt(negChunk, line);
  // These helpers take no location parameter, so only the throw is checked.
  expectUserError([] { return alibi(buffer<int32_t>("slopes")); });
  expectUserError([] { return relative_bias(buffer<int64_t>("table"), 4); });
  expectUserError([] { return relative_bias(buffer<float>("table"), -1); });
}
