//===- LimitsTest.cpp - Deep expressions and error locations --------------===//
//
// Expressions deeper than kMaxExprDepth are refused with a UserError (the
// tree walkers are recursive: deeper input would overflow the stack), in
// text and in C++; helpers report errors at the caller's line; errors about
// run-time input carry no (internal) source location.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"

#include <catch2/catch.hpp>

#include <string>

using namespace flashjit;

TEST_CASE("limits: deeply nested text is a ParseError, not a crash",
          "[frontend][limits]") {
  std::string nested = std::string(20000, '(') + "q_idx" +
                       std::string(20000, ')') + " >= kv_idx";
  CHECK_THROWS_AS(parseExpr(nested), ParseError);
  CHECK_THROWS_WITH(parseExpr(nested), Catch::Contains("levels deep"));
  std::string chain = "q_idx";
  for (int i = 0; i < 20000; ++i)
    chain += " + 1";
  CHECK_THROWS_WITH(parseExpr(chain + " >= kv_idx"),
                    Catch::Contains("levels deep"));
  CHECK_THROWS_AS(parseExpr(std::string(60000, '!') + "true"), ParseError);
  CHECK_THROWS_AS(parseExpr(std::string(60000, '-') + "q_idx"), ParseError);
  // Just inside the limit still parses.
  std::string ok = "q_idx";
  for (int i = 0; i < kMaxExprDepth / 2; ++i)
    ok += " + 1";
  CHECK(parseExpr(ok + " >= kv_idx")->depth() < kMaxExprDepth);
}

TEST_CASE("limits: every tree within the limit round-trips through its text",
          "[frontend][limits]") {
  // The canonical text puts one parenthesis per binary node, so a flat sum
  // of d terms prints d nested groups: it must parse back at any depth the
  // DSL accepts, and one more level must not.
  Expr e = q_idx;
  while (e->depth() < kMaxExprDepth - 1)
    e = e + 1;
  Expr deep = e >= kv_idx;
  REQUIRE(deep->depth() == kMaxExprDepth);
  std::string text = printExpr(deep);
  CHECK(printExpr(parseExpr(text)) == text);
  Expr neg = q_idx;
  while (neg->depth() < kMaxExprDepth - 1)
    neg = -neg;
  CHECK(printExpr(parseExpr(printExpr(neg >= kv_idx))) ==
        printExpr(neg >= kv_idx));
  CHECK_THROWS_WITH(parseExpr("(" + printExpr(e + 1) + " >= kv_idx)"),
                    Catch::Contains("levels deep"));
}

TEST_CASE("limits: a variant refuses a mask deeper than the limit",
          "[frontend][limits]") {
  Expr e = q_idx;
  for (int i = 0; i < kMaxExprDepth + 5; ++i)
    e = e + 1;
  CHECK(e->depth() == kMaxExprDepth + 6);
  Variant v("deep");
  int line = __LINE__ + 1;
  CHECK_THROWS_MATCHES(
      v.mask(e >= kv_idx), UserError,
      Catch::Predicate<UserError>([&](const UserError &err) {
        return err.location().line() == static_cast<unsigned>(line) &&
               err.message().find("levels deep") != std::string::npos;
      }));
  CHECK_THROWS_AS(v.scoreMod(score + cast<float>(e)), UserError);
}

TEST_CASE("limits: helpers report errors at the caller's line",
          "[frontend][limits]") {
  auto lineOf = [](auto &&f) -> unsigned {
    try {
      f();
    } catch (const UserError &e) {
      return e.location().line();
    }
    return 0;
  };
  unsigned line = __LINE__ + 1;
  CHECK(lineOf([] { alibi(buffer<int32_t>("s")); }) == line);
  line = __LINE__ + 1;
  CHECK(lineOf([] { relative_bias(buffer<float>("t"), -1); }) == line);
  line = __LINE__ + 1;
  CHECK(lineOf([] { chunked(0); }) == line);
  // The nodes a helper builds carry the caller's line too.
  line = __LINE__ + 1;
  Expr c = causal(Alignment::BottomRight);
  CHECK(c->loc().line() == line);
}

TEST_CASE("limits: errors about run-time input carry no internal location",
          "[frontend][limits]") {
  Variant v("p");
  v.scoreMod(score * param<float>("s"));
  Arguments none;
  try {
    none.validateFor(v);
    FAIL("expected a UserError");
  } catch (const UserError &e) {
    CHECK(std::string(e.location().file_name()).empty());
    CHECK(std::string(e.what()).find("Arguments.cpp") == std::string::npos);
    CHECK(std::string(e.what()).find("parameter 's'") != std::string::npos);
  }
}

TEST_CASE("limits: spec fields that set the same value twice are refused",
          "[frontend][limits]") {
  CHECK_THROWS_WITH(parseSpec("attention(head_dim_qk=64, head_dim=32)"),
                    Catch::Contains("conflicts with 'head_dim_qk'"));
  CHECK_THROWS_WITH(parseSpec("attention(head_dim=32, head_dim_v=64)"),
                    Catch::Contains("conflicts with 'head_dim'"));
  CHECK_THROWS_WITH(parseSpec("attention(dtype=bf16, dtype_o=fp16)"),
                    Catch::Contains("conflicts with 'dtype'"));
  CHECK(parseSpec("attention(head_dim_qk=64, head_dim_v=32)").headDimV == 32);
}
