//===- SpecTest.cpp - Variants, specs, their text and validation ----------===//
//
// Variant defaults and accessors, AttentionSpec::validate/effectiveScale/
// effectiveMask, and printSpec/parseSpec: the documented field order, random
// specs round-tripping, fields in any order or left out, unknown and repeated
// fields rejected.
//
//===----------------------------------------------------------------------===//
#include "RandomExpr.h"
#include "TestSupport.h"

#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Variant.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;

namespace flashjit::test {

/// A random valid spec: random name, mask (no score), score modifier,
/// head dims, dtypes, GQA grouping, causal mode, scale and LSE flag.
inline AttentionSpec randomSpec(RandomExprGen &gen) {
  static const DType dtypes[] = {DType::F16, DType::BF16, DType::F32};
  static const Causal causals[] = {Causal::None, Causal::TopLeft,
                                   Causal::BottomRight};
  std::string name = "v" + std::to_string(gen.pick(100000));
  if (gen.pick(2))
    name = "_" + name + "_x";
  AttentionSpec s;
  s.variant = Variant(name);
  gen.allowScore = false;
  if (gen.pick(4))
    s.variant.mask(gen.gen(ScalarType::Bool, 1 + gen.pick(4)));
  gen.allowScore = true;
  if (gen.pick(4))
    s.variant.scoreMod(gen.gen(gen.numericType(), 1 + gen.pick(4)));
  s.headDimQK = 1 + static_cast<int>(gen.pick(kMaxHeadDim));
  s.headDimV = 1 + static_cast<int>(gen.pick(kMaxHeadDim));
  s.dtypeQ = dtypes[gen.pick(3)];
  s.dtypeK = dtypes[gen.pick(3)];
  s.dtypeV = dtypes[gen.pick(3)];
  s.dtypeO = dtypes[gen.pick(3)];
  s.headsKV = 1 + static_cast<int>(gen.pick(8));
  s.headsQ = s.headsKV * (1 + static_cast<int>(gen.pick(8)));
  s.causal = causals[gen.pick(3)];
  if (gen.pick(2))
    s.scale = std::ldexp(static_cast<float>(1 + gen.pick(1 << 20)),
                         -static_cast<int>(gen.pick(40)));
  s.returnLse = gen.pick(2);
  return s;
}

} // namespace flashjit::test

TEST_CASE("variant: defaults, accessors, params and buffers",
          "[frontend][variant]") {
  Variant v;
  CHECK(v.name() == "attention");
  CHECK(v.maskExpr().type() == ScalarType::Bool);
  CHECK(structurallyEqual(v.maskExpr(), constant(ScalarType::Bool, 1, 0.0f)));
  CHECK(structurallyEqual(v.scoreExpr(), score));
  CHECK(v.params().empty());
  CHECK(v.buffers().empty());

  Variant w("doc_swa");
  w.mask([](Expr, Expr, Expr q, Expr kv) {
    Buffer doc = buffer<int32_t>("doc");
    return doc[q] == doc[kv] && q - kv < param<int32_t>("window");
  });
  w.scoreMod([](Expr s, Expr, Expr h, Expr q, Expr kv) {
    return s * param<float>("scale2") -
           buffer<float>("slope")[h] * abs(q - kv) + param<float>("scale2");
  });
  CHECK(w.name() == "doc_swa");
  CHECK(!readsScore(w.maskExpr()));
  CHECK(readsScore(w.scoreExpr()));
  auto params = w.params();
  std::sort(params.begin(), params.end(),
            [](auto &a, auto &b) { return a.name < b.name; });
  REQUIRE(params.size() == 2);
  CHECK(params[0] == ParamDecl{"scale2", ScalarType::Float32});
  CHECK(params[1] == ParamDecl{"window", ScalarType::Int32});
  auto buffers = w.buffers();
  std::sort(buffers.begin(), buffers.end(),
            [](auto &a, auto &b) { return a.name < b.name; });
  REQUIRE(buffers.size() == 2);
  CHECK(buffers[0] == BufferDecl{"doc", ScalarType::Int32});
  CHECK(buffers[1] == BufferDecl{"slope", ScalarType::Float32});

  // An integer score modifier is promoted to f32.
  Variant r;
  r.scoreMod(q_idx - kv_idx);
  CHECK(r.scoreExpr().type() == ScalarType::Float32);
  EvalPoint p;
  p.qIdx = 2;
  p.kvIdx = 7;
  CHECK(evaluate(r.scoreExpr(), p, {}).floatValue == -5.0);
  // Setting the mask again replaces it.
  r.mask(q_idx >= kv_idx);
  r.mask(q_idx <= kv_idx);
  CHECK(structurallyEqual(r.maskExpr(), q_idx <= kv_idx));
}

TEST_CASE("spec: validate names the bad field", "[frontend][spec]") {
  AttentionSpec ok;
  CHECK_NOTHROW(ok.validate());
  ok.headDimQK = kMaxHeadDim;
  ok.headDimV = 1;
  CHECK_NOTHROW(ok.validate());

  auto bad = [](auto mutate) {
    AttentionSpec s;
    mutate(s);
    return s;
  };
  auto checkBad = [](const AttentionSpec &s, const char *a, const char *b) {
    bool threw = false;
    try {
      s.validate();
    } catch (const UserError &e) {
      threw = true;
      std::string m = e.what();
      INFO(m);
      CHECK((m.find(a) != std::string::npos || m.find(b) != std::string::npos));
    }
    CHECK(threw);
  };
  checkBad(bad([](AttentionSpec &s) { s.headDimQK = 0; }), "head_dim_qk",
           "headDimQK");
  checkBad(bad([](AttentionSpec &s) { s.headDimQK = 1025; }), "head_dim_qk",
           "headDimQK");
  // The spec's limit is the CPU backend's (512), stated with the GPU's.
  checkBad(bad([](AttentionSpec &s) { s.headDimQK = 513; }),
           "head_dim_qk = 513 is out of range [1, 512] (the CPU backend's "
           "limit; the GPU kernels take up to 256)",
           "headDimQK");
  checkBad(bad([](AttentionSpec &s) { s.headDimV = -4; }), "head_dim_v",
           "headDimV");
  checkBad(bad([](AttentionSpec &s) { s.headsQ = 0; }), "heads_q", "headsQ");
  checkBad(bad([](AttentionSpec &s) { s.headsKV = 0; }), "heads_kv", "headsKV");
  checkBad(bad([](AttentionSpec &s) {
             s.headsQ = 6;
             s.headsKV = 4;
           }),
           "heads_kv", "headsKV");
  checkBad(bad([](AttentionSpec &s) {
             s.scale = std::numeric_limits<float>::infinity();
           }),
           "scale", "scale");
  checkBad(bad([](AttentionSpec &s) {
             s.scale = std::numeric_limits<float>::quiet_NaN();
           }),
           "scale", "scale");
}

TEST_CASE("spec: effective scale and mask", "[frontend][spec]") {
  AttentionSpec s;
  s.headDimQK = 64;
  CHECK(s.effectiveScale() == 0.125f);
  s.headDimQK = 96;
  CHECK(s.effectiveScale() == Approx(1.0 / std::sqrt(96.0)).epsilon(1e-7));
  s.scale = 0.3f;
  CHECK(s.effectiveScale() == 0.3f);

  AttentionSpec c;
  CHECK(structurallyEqual(c.effectiveMask(), c.variant.maskExpr()));
  c.causal = Causal::TopLeft;
  CHECK(structurallyEqual(c.effectiveMask(), causal(Alignment::TopLeft)));
  c.causal = Causal::BottomRight;
  CHECK(structurallyEqual(c.effectiveMask(), causal(Alignment::BottomRight)));
  CHECK(toString(Causal::None) == "none");
  CHECK(toString(Causal::TopLeft) == "top_left");
  CHECK(toString(Causal::BottomRight) == "bottom_right");

  // With a real mask the causal mask is ANDed in: check the semantics.
  c.variant.mask(sliding_window(2, 2, Alignment::TopLeft));
  Expr m = c.effectiveMask();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 9; ++j) {
      EvalPoint p;
      p.qIdx = i;
      p.kvIdx = j;
      p.seqlenQ = 4;
      p.seqlenK = 9;
      bool expected = j >= i - 2 && j <= i + 2 && j <= i + 5;
      CHECK(evaluate(m, p, {}).asBool() == expected);
    }
}

TEST_CASE("spec text: the documented default form", "[frontend][spec][text]") {
  AttentionSpec s;
  CHECK(printSpec(s) ==
        "attention(name=attention, mask=true, score=score, head_dim_qk=128, "
        "head_dim_v=128, dtype_q=bf16, dtype_k=bf16, dtype_v=bf16, "
        "dtype_o=bf16, heads_q=1, heads_kv=1, causal=none, scale=default, "
        "lse=true)");
  CHECK(structurallyEqual(parseSpec(printSpec(s)), s));
  CHECK(structurallyEqual(parseSpec("attention()"), s));
  CHECK(toString(DType::F16) == "fp16");
  CHECK(toString(DType::BF16) == "bf16");
  CHECK(toString(DType::F32) == "fp32");
}

TEST_CASE("spec text: random specs round-trip",
          "[frontend][spec][text][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  flashjit::test::RandomExprGen gen(seed);
  int failures = 0;
  for (int i = 0; i < 500 && failures < 3; ++i) {
    AttentionSpec s = flashjit::test::randomSpec(gen);
    std::string text = printSpec(s);
    INFO(text);
    try {
      AttentionSpec back = parseSpec(text);
      bool eq = structurallyEqual(back, s);
      CHECK(eq);
      if (!eq)
        ++failures;
      CHECK(printSpec(back) == text);
    } catch (const UserError &e) {
      ++failures;
      FAIL_CHECK(e.what());
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("spec text: any order, defaults, friendly expressions",
          "[frontend][spec][text]") {
  AttentionSpec s = parseSpec(
      "attention(lse=false, heads_kv=2, causal=bottom_right, "
      "mask=q_idx - kv_idx < 128 && buffer<i32>(doc)[q_idx] == "
      "buffer<i32>(doc)[kv_idx], heads_q=8, name=swa, scale=0.125, "
      "score=30.0 * tanh(score / 30.0), dtype_v=fp32, head_dim_v=64)");
  AttentionSpec e;
  e.variant = Variant("swa");
  Buffer doc = buffer<int32_t>("doc");
  e.variant.mask(q_idx - kv_idx < 128 && doc[q_idx] == doc[kv_idx]);
  e.variant.scoreMod(30.0f * tanh(score / 30.0f));
  e.returnLse = false;
  e.headsKV = 2;
  e.headsQ = 8;
  e.causal = Causal::BottomRight;
  e.scale = 0.125f;
  e.dtypeV = DType::F32;
  e.headDimV = 64;
  CHECK(structurallyEqual(s, e));
  CHECK(s.headDimQK == 128);
  CHECK(s.dtypeQ == DType::BF16);

  // Functions with commas inside a field.
  AttentionSpec m = parseSpec("attention(mask=min(q_idx, kv_idx) >= 2, "
                              "score=max(score, -5.0))");
  CHECK(structurallyEqual(m.variant.maskExpr(), min(q_idx, kv_idx) >= 2));
  CHECK(structurallyEqual(m.variant.scoreExpr(), max(score, -5.0f)));
}

TEST_CASE("spec text: malformed specs are rejected",
          "[frontend][spec][text][error]") {
  for (const char *text :
       {"attention(bogus=1)", "attention(heads_q=2, heads_q=2)",
        "attention(name=a, name=b)", "attention(heads_q=2", "attention(",
        "attn()", "attention(dtype_q=fp8)", "attention(causal=diagonal)",
        "attention(lse=maybe)", "attention(head_dim_qk=abc)"}) {
    INFO(text);
    CHECK_THROWS_AS(parseSpec(text), UserError);
  }
  for (const char *text :
       {"attention(bogus=1)", "attention(heads_q=2, heads_q=2)"}) {
    INFO(text);
    CHECK_THROWS_AS(parseSpec(text), ParseError);
  }
  // Validation applies to parsed specs.
  expectUserError([] { return parseSpec("attention(head_dim_qk=0)"); });
  expectUserError([] { return parseSpec("attention(heads_q=6, heads_kv=4)"); });
  expectUserError([] { return parseSpec("attention(name=1abc)"); });
  // The mask may not read score and the score may not be bool.
  expectUserError([] { return parseSpec("attention(mask=score > 0.0)"); });
  expectUserError([] { return parseSpec("attention(score=q_idx > 0)"); });
}
