//===- ReferenceMaskTest.cpp - Masks checked cell by cell -----------------===//
//
// The uniform probe: Q = 0 makes every score 0, so every allowed key gets
// weight 1/n; V = identity rows (V[j][d] = (j == d), head_dim_v >= seqlen_k)
// makes O[i][j] = 1/n_i on allowed keys and exactly 0 elsewhere, and
// LSE[i] = log(n_i). The expected masks below are written out by hand.
// Also: fully masked rows (O == 0 exactly, LSE == -inf, no NaN) and
// seqlens 0 and 1.
//
//===----------------------------------------------------------------------===//
#include "ReferenceSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::test::HostTensor;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

/// Runs the uniform probe for \p spec at sq x sk (batch 2, one head) and
/// checks every cell against \p rows ('1' = allowed).
void checkProbe(AttentionSpec spec, const std::vector<std::string> &rows,
                const Arguments &args = {}) {
  const int64_t sq = static_cast<int64_t>(rows.size());
  const int64_t sk = sq ? static_cast<int64_t>(rows[0].size()) : 0;
  const int64_t dv = std::max<int64_t>(sk, 1) + 1;
  spec.headDimQK = 4;
  spec.headDimV = static_cast<int>(dv);
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  HostTensor q(DType::F32, {2, 1, sq, 4});
  HostTensor k(DType::F32, {2, 1, sk, 4});
  HostTensor v(DType::F32, {2, 1, sk, dv});
  k.fill([&](auto...) { return flashjit::test::nonZero(rng); });
  v.fill([](int64_t, int64_t, int64_t j, int64_t d) {
    return j == d ? 1.0f : 0.0f;
  });
  ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref, args);
  REQUIRE(out.o.size() == static_cast<size_t>(2 * sq * dv));
  REQUIRE(out.lse.size() == static_cast<size_t>(2 * sq));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < sq; ++i) {
      const std::string &row = rows[static_cast<size_t>(i)];
      const int64_t n = std::count(row.begin(), row.end(), '1');
      INFO("b=" << b << " row " << i << " expected " << row);
      for (int64_t d = 0; d < dv; ++d) {
        INFO("column " << d);
        double o = out.oAt(b, 0, i, d);
        if (d < sk && row[static_cast<size_t>(d)] == '1')
          CHECK(o == Approx(1.0 / double(n)).epsilon(1e-14));
        else
          CHECK(o == 0.0);
      }
      if (n == 0)
        CHECK(out.lseAt(b, 0, i) == -kInf);
      else
        CHECK(out.lseAt(b, 0, i) ==
              Approx(std::log(double(n))).epsilon(1e-14).margin(1e-15));
    }
}

AttentionSpec withMask(const Expr &mask) {
  AttentionSpec s;
  s.variant.mask(mask);
  return s;
}

AttentionSpec withCausal(Causal c) {
  AttentionSpec s;
  s.causal = c;
  return s;
}

} // namespace

TEST_CASE("reference probe: causal top-left vs bottom-right, 2x5 and 5x2",
          "[frontend][reference][mask]") {
  const std::vector<std::string> tl25 = {"10000", "11000"};
  const std::vector<std::string> br25 = {"11110", "11111"};
  const std::vector<std::string> tl52 = {"10", "11", "11", "11", "11"};
  const std::vector<std::string> br52 = {"00", "00", "00", "10", "11"};
  SECTION("through the spec's causal field") {
    checkProbe(withCausal(Causal::TopLeft), tl25);
    checkProbe(withCausal(Causal::BottomRight), br25);
    checkProbe(withCausal(Causal::TopLeft), tl52);
    checkProbe(withCausal(Causal::BottomRight), br52);
  }
  SECTION("through the causal() helper") {
    checkProbe(withMask(causal(Alignment::TopLeft)), tl25);
    checkProbe(withMask(causal(Alignment::BottomRight)), br25);
    checkProbe(withMask(causal(Alignment::TopLeft)), tl52);
    checkProbe(withMask(causal(Alignment::BottomRight)), br52);
  }
  SECTION("no mask: every key") {
    checkProbe(AttentionSpec(), {"11111", "11111"});
  }
}

TEST_CASE("reference probe: sliding windows", "[frontend][reference][mask]") {
  checkProbe(withMask(sliding_window(2, 0, Alignment::TopLeft)),
             {"100000", "110000", "111000", "011100", "001110", "000111"});
  checkProbe(withMask(sliding_window(2, 0, Alignment::TopLeft, false)),
             {"000000", "100000", "110000", "011000", "001100", "000110"});
  checkProbe(withMask(sliding_window(1, 1, Alignment::TopLeft)),
             {"11000", "11100", "01110", "00111", "00011"});
  checkProbe(withMask(sliding_window(1, 1, Alignment::TopLeft, false)),
             {"01000", "10100", "01010", "00101", "00010"});
  checkProbe(withMask(sliding_window(1, 0, Alignment::BottomRight)),
             {"001100", "000110", "000011"});
  checkProbe(withMask(sliding_window(0, 0, Alignment::BottomRight)),
             {"00010", "00001"});
  // A window with the spec's causal mask ANDed in.
  AttentionSpec s = withMask(sliding_window(1, 1, Alignment::TopLeft));
  s.causal = Causal::TopLeft;
  checkProbe(s, {"10000", "11000", "01100", "00110", "00011"});
  // The window width as a runtime parameter.
  Arguments args;
  args.set("w", Scalar::i32(1));
  checkProbe(
      withMask(sliding_window(param<int32_t>("w"), 0, Alignment::TopLeft)),
      {"1000", "1100", "0110", "0011"}, args);
}

TEST_CASE("reference probe: prefix_lm and chunked",
          "[frontend][reference][mask]") {
  checkProbe(withMask(prefix_lm(2)),
             {"11000", "11000", "11100", "11110", "11111"});
  checkProbe(withMask(prefix_lm(2, Alignment::BottomRight)),
             {"11100", "11110", "11111"});
  checkProbe(withMask(chunked(3)), {"1110000", "1110000", "1110000", "0001110",
                                    "0001110", "0001110", "0000001"});
  checkProbe(withMask(chunked(3) && causal(Alignment::TopLeft)),
             {"1000000", "1100000", "1110000", "0001000", "0001100", "0001110",
              "0000001"});
  // Document masking through a buffer: documents {0,1,2}, {3,4}.
  std::vector<int32_t> doc = {7, 7, 7, 9, 9};
  Arguments args;
  args.bind("doc", doc.data(), 5);
  Buffer d = buffer<int32_t>("doc");
  checkProbe(withMask(d[q_idx] == d[kv_idx] && causal(Alignment::TopLeft)),
             {"10000", "11000", "11100", "00010", "00011"}, args);
}

TEST_CASE("reference: fully masked rows give O = 0 and LSE = -inf",
          "[frontend][reference][mask]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  AttentionSpec spec;
  spec.headDimQK = spec.headDimV = 8;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = DType::F32;
  HostTensor q(DType::F32, {1, 1, 4, 8}), k(DType::F32, {1, 1, 6, 8}),
      v(DType::F32, {1, 1, 6, 8});
  auto r = [&](auto...) { return flashjit::test::nonZero(rng); };
  q.fill(r);
  k.fill(r);
  v.fill(r);
  auto checkMasked = [&](const AttentionSpec &s, int64_t row) {
    ReferenceOutput out = referenceAttention(s, q.ref, k.ref, v.ref);
    for (double x : out.o)
      CHECK(!std::isnan(x));
    for (double x : out.lse)
      CHECK(!std::isnan(x));
    for (int64_t d = 0; d < 8; ++d)
      CHECK(out.oAt(0, 0, row, d) == 0.0);
    CHECK(out.lseAt(0, 0, row) == -kInf);
  };
  SECTION("a mask that allows nothing") {
    spec.variant.mask(kv_idx < 0);
    for (int64_t i = 0; i < 4; ++i)
      checkMasked(spec, i);
  }
  SECTION("only the first rows masked (bottom-right, seqlen_q > seqlen_k)") {
    HostTensor q8(DType::F32, {1, 1, 8, 8});
    q8.fill(r);
    spec.causal = Causal::BottomRight;
    ReferenceOutput out = referenceAttention(spec, q8.ref, k.ref, v.ref);
    for (int64_t i = 0; i < 2; ++i) {
      CHECK(out.lseAt(0, 0, i) == -kInf);
      for (int64_t d = 0; d < 8; ++d)
        CHECK(out.oAt(0, 0, i, d) == 0.0);
    }
    for (int64_t i = 2; i < 8; ++i)
      CHECK(std::isfinite(out.lseAt(0, 0, i)));
  }
  SECTION("a score modifier that sends every allowed score to -inf") {
    spec.variant.scoreMod(
        select(kv_idx >= 0, -std::numeric_limits<float>::infinity(), score));
    for (int64_t i = 0; i < 4; ++i)
      checkMasked(spec, i);
  }
  SECTION("-inf scores on some keys just drop those keys") {
    spec.variant.scoreMod(select(
        kv_idx == q_idx, -std::numeric_limits<float>::infinity(), score));
    ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref);
    auto expected = flashjit::test::naiveAttention(
        q, k, v, spec.effectiveScale(),
        [](int64_t, int64_t, int64_t, int64_t) { return true; },
        [](double s, int64_t, int64_t, int64_t i, int64_t j) {
          return i == j ? -kInf : s;
        });
    for (size_t x = 0; x < expected.o.size(); ++x)
      CHECK(out.o[x] == Approx(expected.o[x]).margin(1e-12));
    for (size_t x = 0; x < expected.lse.size(); ++x)
      CHECK(out.lse[x] == Approx(expected.lse[x]).margin(1e-12));
  }
}

TEST_CASE("reference: seqlen 0 and 1", "[frontend][reference]") {
  AttentionSpec spec;
  spec.headDimQK = spec.headDimV = 4;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = DType::F32;
  SECTION("seqlen_q = 0") {
    HostTensor q(DType::F32, {2, 1, 0, 4}), k(DType::F32, {2, 1, 3, 4}),
        v(DType::F32, {2, 1, 3, 4});
    ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref);
    CHECK(out.o.empty());
    CHECK(out.lse.empty());
    CHECK(out.shape.seqlenQ == 0);
    CHECK(out.shape.seqlenK == 3);
  }
  SECTION("seqlen_k = 0: every row is fully masked") {
    HostTensor q(DType::F32, {2, 1, 3, 4}), k(DType::F32, {2, 1, 0, 4}),
        v(DType::F32, {2, 1, 0, 4});
    q.fill([](auto...) { return 0.75f; });
    ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref);
    REQUIRE(out.o.size() == 24);
    REQUIRE(out.lse.size() == 6);
    for (double x : out.o)
      CHECK(x == 0.0);
    for (double x : out.lse)
      CHECK(x == -kInf);
  }
  SECTION("seqlen 1 x 1: O = V[0], LSE = the one score") {
    HostTensor q(DType::F32, {1, 1, 1, 4}), k(DType::F32, {1, 1, 1, 4}),
        v(DType::F32, {1, 1, 1, 4});
    const float qv[] = {1, 2, 3, 4}, kvv[] = {0.5f, -1, 2, 0.25f},
                vv[] = {-3, 0.5f, 7, 1.25f};
    for (int d = 0; d < 4; ++d) {
      q.set(0, 0, 0, d, qv[d]);
      k.set(0, 0, 0, d, kvv[d]);
      v.set(0, 0, 0, d, vv[d]);
    }
    ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref);
    // q.k = 0.5 - 2 + 6 + 1 = 5.5; scale 1/sqrt(4) = 0.5.
    CHECK(out.lseAt(0, 0, 0) == Approx(2.75).epsilon(1e-15));
    for (int d = 0; d < 4; ++d)
      CHECK(out.oAt(0, 0, 0, d) == Approx(vv[d]).epsilon(1e-15));
    // With causal bottom-right and seqlen 1 x 1 the key is still allowed.
    spec.causal = Causal::BottomRight;
    CHECK(referenceAttention(spec, q.ref, k.ref, v.ref).lse[0] ==
          Approx(2.75).epsilon(1e-15));
  }
}
