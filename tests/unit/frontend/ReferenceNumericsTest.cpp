//===- ReferenceNumericsTest.cpp - float64 reference vs hand values -------===//
//
// LSE and O for a small case computed by hand; GQA mapping through
// constant-V probes; strided and sliced tensors equal contiguous ones;
// fp16/bf16/fp32 inputs; score modifiers (softcap, ALiBi, relative bias,
// parameters) and random masks against this suite's own naive attention.
//
//===----------------------------------------------------------------------===//
#include "ReferenceSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace flashjit;
using flashjit::test::HostTensor;
using flashjit::test::naiveAttention;
using flashjit::test::NaiveOutput;

namespace {

bool allowAll(int64_t, int64_t, int64_t, int64_t) { return true; }
double identity(double s, int64_t, int64_t, int64_t, int64_t) { return s; }

void checkClose(const ReferenceOutput &got, const NaiveOutput &want,
                double tol) {
  REQUIRE(got.o.size() == want.o.size());
  REQUIRE(got.lse.size() == want.lse.size());
  int64_t bad = 0;
  for (size_t i = 0; i < want.o.size(); ++i)
    if (!(std::abs(got.o[i] - want.o[i]) <= tol * (1 + std::abs(want.o[i]))))
      if (++bad <= 5)
        UNSCOPED_INFO("o[" << i << "] = " << got.o[i] << ", expected "
                           << want.o[i]);
  for (size_t i = 0; i < want.lse.size(); ++i) {
    bool ok = std::isinf(want.lse[i]) ? got.lse[i] == want.lse[i]
                                      : std::abs(got.lse[i] - want.lse[i]) <=
                                            tol * (1 + std::abs(want.lse[i]));
    if (!ok && ++bad <= 10)
      UNSCOPED_INFO("lse[" << i << "] = " << got.lse[i] << ", expected "
                           << want.lse[i]);
  }
  CHECK(bad == 0);
}

AttentionSpec f32Spec(int dqk, int dv) {
  AttentionSpec s;
  s.headDimQK = dqk;
  s.headDimV = dv;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F32;
  return s;
}

} // namespace

TEST_CASE("reference: LSE and O computed by hand", "[frontend][reference]") {
  AttentionSpec spec = f32Spec(2, 2);
  spec.scale = 1.0f;
  HostTensor q(DType::F32, {1, 1, 1, 2}), k(DType::F32, {1, 1, 3, 2}),
      v(DType::F32, {1, 1, 3, 2});
  q.set(0, 0, 0, 0, 1);
  q.set(0, 0, 0, 1, 2);
  // Keys (1,0), (0,1), (1,1): scores 1, 2, 3.
  const float keys[3][2] = {{1, 0}, {0, 1}, {1, 1}};
  const float vals[3][2] = {{1, 0}, {0, 1}, {2, 3}};
  for (int j = 0; j < 3; ++j)
    for (int d = 0; d < 2; ++d) {
      k.set(0, 0, j, d, keys[j][d]);
      v.set(0, 0, j, d, vals[j][d]);
    }
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0);
  const double z = e1 + e2 + e3;
  ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref);
  CHECK(out.lseAt(0, 0, 0) == Approx(std::log(z)).epsilon(1e-14));
  CHECK(out.lseAt(0, 0, 0) == Approx(3.4076059644443806).epsilon(1e-14));
  CHECK(out.oAt(0, 0, 0, 0) == Approx((e1 + 2 * e3) / z).epsilon(1e-14));
  CHECK(out.oAt(0, 0, 0, 1) == Approx((e2 + 3 * e3) / z).epsilon(1e-14));

  // Default scale 1/sqrt(2), then a score modifier 2 * s - 1.
  spec.scale.reset();
  spec.variant.scoreMod(2.0f * score - 1.0f);
  // The spec's scale is an f32: the default is 1/sqrt(2) rounded to f32.
  const double c = spec.effectiveScale();
  CHECK(c == Approx(1 / std::sqrt(2.0)).epsilon(1e-7));
  double s1 = 2 * c - 1, s2 = 4 * c - 1, s3 = 6 * c - 1;
  double z2 = std::exp(s1) + std::exp(s2) + std::exp(s3);
  out = referenceAttention(spec, q.ref, k.ref, v.ref);
  CHECK(out.lseAt(0, 0, 0) == Approx(std::log(z2)).epsilon(1e-14));
  CHECK(out.oAt(0, 0, 0, 1) ==
        Approx((std::exp(s2) + 3 * std::exp(s3)) / z2).epsilon(1e-14));

  // Merging: LSE over keys {0,1} and {2} combine to the LSE over all.
  spec.variant = Variant();
  spec.scale = 1.0f;
  spec.variant.mask(kv_idx < 2);
  double lseA = referenceAttention(spec, q.ref, k.ref, v.ref).lse[0];
  spec.variant.mask(kv_idx >= 2);
  double lseB = referenceAttention(spec, q.ref, k.ref, v.ref).lse[0];
  CHECK(std::log(std::exp(lseA) + std::exp(lseB)) ==
        Approx(std::log(z)).epsilon(1e-14));
  CHECK(lseB == Approx(3.0).epsilon(1e-15));
}

TEST_CASE("reference: GQA maps query head h to kv head h / (Hq / Hkv)",
          "[frontend][reference][gqa]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (auto [hq, hkv] : {std::pair{6, 2}, std::pair{6, 3}, std::pair{8, 1},
                         std::pair{4, 4}, std::pair{12, 4}}) {
    INFO("heads_q " << hq << " heads_kv " << hkv);
    AttentionSpec spec = f32Spec(16, 8);
    spec.headsQ = hq;
    spec.headsKV = hkv;
    spec.causal = Causal::BottomRight;
    const int64_t sq = 5, sk = 7;
    HostTensor q(DType::F32, {2, hq, sq, 16}), k(DType::F32, {2, hkv, sk, 16}),
        v(DType::F32, {2, hkv, sk, 8});
    auto r = [&](auto...) { return flashjit::test::nonZero(rng); };
    q.fill(r);
    k.fill(r);
    v.fill([](int64_t, int64_t g, int64_t, int64_t) { return float(g + 1); });
    ReferenceOutput out = referenceAttention(spec, q.ref, k.ref, v.ref);
    CHECK(out.shape.headsQ == hq);
    CHECK(out.shape.headsKV == hkv);
    int64_t bad = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t d = 0; d < 8; ++d) {
            double expected = double(h / (hq / hkv) + 1);
            if (std::abs(out.oAt(b, h, i, d) - expected) > 1e-12)
              ++bad;
          }
    CHECK(bad == 0);
    // And against the naive oracle with random V.
    v.fill(r);
    checkClose(referenceAttention(spec, q.ref, k.ref, v.ref),
               naiveAttention(
                   q, k, v, 0.25,
                   [&](int64_t, int64_t, int64_t i, int64_t j) {
                     return j <= i + sk - sq;
                   },
                   identity),
               1e-12);
  }
}

TEST_CASE("reference: strided and sliced tensors equal contiguous ones",
          "[frontend][reference][strides]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t B = 2, Hq = 4, Hkv = 2, Sq = 6, Sk = 9, D = 8, Dv = 12;
  AttentionSpec spec = f32Spec(D, Dv);
  spec.headsQ = Hq;
  spec.headsKV = Hkv;
  spec.variant.mask(sliding_window(3, 1, Alignment::BottomRight));
  spec.variant.scoreMod(softcap(4.0f));
  HostTensor q(DType::F32, {B, Hq, Sq, D}), k(DType::F32, {B, Hkv, Sk, D}),
      v(DType::F32, {B, Hkv, Sk, Dv});
  HostTensor q2(DType::F32, {B, Hq, Sq, D}, true),
      k2(DType::F32, {B, Hkv, Sk, D}, true, 3),
      v2(DType::F32, {B, Hkv, Sk, Dv}, false, 5);
  std::vector<float> vals(4096);
  for (float &x : vals)
    x = flashjit::test::nonZero(rng);
  auto pick = [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    return vals[static_cast<size_t>(((a * 7 + b) * 13 + c) * 17 + d) % 4096];
  };
  q.fill(pick);
  k.fill(pick);
  v.fill(pick);
  q2.fill(pick);
  k2.fill(pick);
  v2.fill(pick);
  ReferenceOutput a = referenceAttention(spec, q.ref, k.ref, v.ref);
  ReferenceOutput b = referenceAttention(spec, q2.ref, k2.ref, v2.ref);
  REQUIRE(a.o.size() == b.o.size());
  CHECK(a.o == b.o);
  CHECK(a.lse == b.lse);

  // K shared by both batches through a zero batch stride.
  HostTensor kb(DType::F32, {1, Hkv, Sk, D});
  kb.fill(pick);
  TensorRef kBroadcast = kb.ref;
  kBroadcast.shape[0] = B;
  kBroadcast.strides[0] = 0;
  HostTensor kFull(DType::F32, {B, Hkv, Sk, D});
  kFull.fill([&](int64_t, int64_t h, int64_t s, int64_t d) {
    return pick(0, h, s, d);
  });
  ReferenceOutput c = referenceAttention(spec, q.ref, kBroadcast, v.ref);
  ReferenceOutput e = referenceAttention(spec, q.ref, kFull.ref, v.ref);
  CHECK(c.o == e.o);
  CHECK(c.lse == e.lse);
}

TEST_CASE("reference: fp16, bf16 and fp32 inputs",
          "[frontend][reference][dtype]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (DType dq : {DType::F16, DType::BF16, DType::F32})
    for (DType dkv : {DType::F16, DType::BF16, DType::F32}) {
      INFO(toString(dq) << " / " << toString(dkv));
      AttentionSpec spec = f32Spec(32, 16);
      spec.headsQ = spec.headsKV = 2;
      spec.dtypeQ = dq;
      spec.dtypeK = spec.dtypeV = dkv;
      spec.causal = Causal::TopLeft;
      HostTensor q(dq, {1, 2, 5, 32}), k(dkv, {1, 2, 7, 32}),
          v(dkv, {1, 2, 7, 16});
      auto r = [&](auto...) { return flashjit::test::nonZero(rng); };
      q.fill(r);
      k.fill(r);
      v.fill(r);
      checkClose(
          referenceAttention(spec, q.ref, k.ref, v.ref),
          naiveAttention(
              q, k, v, spec.effectiveScale(),
              [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; },
              identity),
          1e-12);
    }
  // The reference reads the rounded value: 1 + 2^-11 in fp16 reads as 1.
  AttentionSpec spec = f32Spec(1, 1);
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = DType::F16;
  HostTensor q(DType::F16, {1, 1, 1, 1}), k(DType::F16, {1, 1, 1, 1}),
      v(DType::F16, {1, 1, 1, 1});
  q.set(0, 0, 0, 0, 1.0f + std::ldexp(1.0f, -11));
  k.set(0, 0, 0, 0, 1.0f);
  v.set(0, 0, 0, 0, 3.0f);
  CHECK(referenceAttention(spec, q.ref, k.ref, v.ref).lse[0] == 1.0);
}

TEST_CASE("reference: score modifiers against a direct computation",
          "[frontend][reference][score]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t B = 2, H = 3, Sq = 6, Sk = 8, D = 16;
  HostTensor q(DType::F32, {B, H, Sq, D}), k(DType::F32, {B, H, Sk, D}),
      v(DType::F32, {B, H, Sk, D});
  auto r = [&](auto...) { return 2.0f * flashjit::test::nonZero(rng); };
  q.fill(r);
  k.fill(r);
  v.fill(r);
  AttentionSpec spec = f32Spec(D, D);
  spec.headsQ = spec.headsKV = H;
  spec.scale = 1.0f;

  SECTION("softcap") {
    spec.variant.scoreMod(softcap(5.0f));
    checkClose(referenceAttention(spec, q.ref, k.ref, v.ref),
               naiveAttention(q, k, v, 1.0, allowAll,
                              [](double s, int64_t, int64_t, int64_t, int64_t) {
                                return 5.0 * std::tanh(s / 5.0);
                              }),
               1e-12);
  }
  SECTION("softcap with a runtime parameter") {
    spec.variant.scoreMod(softcap(param<float>("cap")));
    Arguments args;
    args.set("cap", Scalar::f32(3.5f));
    checkClose(referenceAttention(spec, q.ref, k.ref, v.ref, args),
               naiveAttention(q, k, v, 1.0, allowAll,
                              [](double s, int64_t, int64_t, int64_t, int64_t) {
                                return 3.5 * std::tanh(s / 3.5);
                              }),
               1e-12);
    CHECK_THROWS_AS(referenceAttention(spec, q.ref, k.ref, v.ref), UserError);
  }
  SECTION("alibi") {
    std::vector<float> slopes = {0.5f, 0.25f, 0.125f};
    spec.variant.scoreMod(alibi(buffer<float>("slopes")));
    spec.causal = Causal::TopLeft;
    Arguments args;
    args.bind("slopes", slopes.data(), 3);
    checkClose(
        referenceAttention(spec, q.ref, k.ref, v.ref, args),
        naiveAttention(
            q, k, v, 1.0,
            [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; },
            [&](double s, int64_t, int64_t h, int64_t i, int64_t j) {
              return s - slopes[h] * std::abs(double(i - j));
            }),
        1e-12);
    CHECK_THROWS_AS(referenceAttention(spec, q.ref, k.ref, v.ref), UserError);
  }
  SECTION("relative bias") {
    std::vector<float> table(7);
    for (float &t : table)
      t = flashjit::test::nonZero(rng);
    spec.variant.scoreMod(relative_bias(buffer<float>("rel"), 3));
    Arguments args;
    args.bind("rel", table.data(), 7);
    checkClose(referenceAttention(spec, q.ref, k.ref, v.ref, args),
               naiveAttention(
                   q, k, v, 1.0, allowAll,
                   [&](double s, int64_t, int64_t, int64_t i, int64_t j) {
                     return s + table[std::clamp<int64_t>(j - i, -3, 3) + 3];
                   }),
               1e-12);
  }
  SECTION("a modifier reading batch, head and positions") {
    spec.variant.scoreMod(score * (batch + 1) - 0.1f * head +
                          cast<float>(q_idx % 2 == kv_idx % 2));
    checkClose(referenceAttention(spec, q.ref, k.ref, v.ref),
               naiveAttention(
                   q, k, v, 1.0, allowAll,
                   [](double s, int64_t b, int64_t h, int64_t i, int64_t j) {
                     return s * double(b + 1) - double(0.1f) * double(h) +
                            (i % 2 == j % 2 ? 1.0 : 0.0);
                   }),
               1e-12);
  }
}

TEST_CASE("reference: random masks and shapes against the naive oracle",
          "[frontend][reference][property]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t sq = flashjit::test::uniformInt(rng, 0, 9);
    const int64_t sk = flashjit::test::uniformInt(rng, 0, 9);
    const int64_t left = flashjit::test::uniformInt(rng, 0, 4);
    const int64_t right = flashjit::test::uniformInt(rng, 0, 3);
    const int64_t chunk = flashjit::test::uniformInt(rng, 1, 4);
    const Alignment al =
        rng() % 2 ? Alignment::TopLeft : Alignment::BottomRight;
    const int kind = static_cast<int>(rng() % 4);
    INFO("trial " << trial << " sq=" << sq << " sk=" << sk << " kind=" << kind
                  << " left=" << left << " right=" << right
                  << " chunk=" << chunk << " " << toString(al));
    AttentionSpec spec = f32Spec(8, 4);
    spec.scale = 0.7f;
    auto ai = [&](int64_t i) {
      return al == Alignment::TopLeft ? i : i + sk - sq;
    };
    flashjit::test::NaiveMask m;
    switch (kind) {
    case 0:
      spec.variant.mask(sliding_window(int32_t(left), int32_t(right), al));
      m = [&](int64_t, int64_t, int64_t i, int64_t j) {
        return j >= ai(i) - left && j <= ai(i) + right;
      };
      break;
    case 1:
      spec.variant.mask(prefix_lm(int32_t(left), al));
      m = [&](int64_t, int64_t, int64_t i, int64_t j) {
        return j < left || j <= ai(i);
      };
      break;
    case 2:
      spec.variant.mask(chunked(int32_t(chunk)) && causal(al));
      m = [&](int64_t, int64_t, int64_t i, int64_t j) {
        return i / chunk == j / chunk && j <= ai(i);
      };
      break;
    default:
      spec.variant.mask(
          sliding_window(int32_t(left), int32_t(right), al, false));
      m = [&](int64_t, int64_t, int64_t i, int64_t j) {
        return j >= ai(i) - left && j <= ai(i) + right && j != ai(i);
      };
    }
    HostTensor q(DType::F32, {1, 1, sq, 8}), k(DType::F32, {1, 1, sk, 8}),
        v(DType::F32, {1, 1, sk, 4});
    auto r = [&](auto...) { return flashjit::test::nonZero(rng); };
    q.fill(r);
    k.fill(r);
    v.fill(r);
    checkClose(referenceAttention(spec, q.ref, k.ref, v.ref),
               naiveAttention(q, k, v, double(0.7f), m, identity), 1e-12);
  }
}

TEST_CASE("reference: bad tensors and arguments are UserErrors",
          "[frontend][reference][error]") {
  AttentionSpec spec = f32Spec(8, 8);
  HostTensor q(DType::F32, {1, 1, 2, 8}), k(DType::F32, {1, 1, 3, 8}),
      v(DType::F32, {1, 1, 3, 8}), kBad(DType::F32, {1, 1, 3, 16});
  CHECK_NOTHROW(referenceAttention(spec, q.ref, k.ref, v.ref));
  CHECK_THROWS_AS(referenceAttention(spec, q.ref, kBad.ref, v.ref), UserError);
  HostTensor q16(DType::F16, {1, 1, 2, 8});
  CHECK_THROWS_AS(referenceAttention(spec, q16.ref, k.ref, v.ref), UserError);
  spec.variant.mask(buffer<int32_t>("doc")[q_idx] == 1);
  CHECK_THROWS_AS(referenceAttention(spec, q.ref, k.ref, v.ref), UserError);
}

TEST_CASE("reference: an invalid GQA grouping is a UserError, not a crash",
          "[frontend][reference][error][gqa]") {
  // heads_kv = 3 does not divide heads_q = 4: query head 3 would map to
  // kv head 3 / (4 / 3) = 3, past the end of K and V.
  AttentionSpec spec = f32Spec(8, 8);
  spec.headsQ = 4;
  spec.headsKV = 3;
  HostTensor q(DType::F32, {1, 4, 2, 8}), k(DType::F32, {1, 3, 3, 8}),
      v(DType::F32, {1, 3, 3, 8});
  CHECK_THROWS_AS(referenceAttention(spec, q.ref, k.ref, v.ref), UserError);
}

TEST_CASE("reference: a NaN score at an allowed key makes the row NaN, in "
          "any key order",
          "[frontend][reference]") {
  // The kernels' row maximum propagates NaN (IEEE maximum); the oracle must
  // too, wherever the NaN key stands, and its backward must not hide it.
  AttentionSpec s = f32Spec(4, 4);
  for (int nanKey = 0; nanKey < 3; ++nanKey) {
    float q[2 * 4] = {1, 0, 0, 0, 0, 1, 0, 0};
    float k[3 * 4] = {1, 0, 0, 0, -1, 0, 0, 0, 0, 1, 0, 0};
    float v[3 * 4] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    float dO[2 * 4] = {1, -1, 0.5f, 2, 0.25f, 1, -1, 1};
    k[nanKey * 4 + 1] = std::nanf(""); // row 1 (q = e1) sees a NaN score
    auto T = [](float *p, int64_t n) {
      return TensorRef::contiguous(p, DType::F32, {1, 1, n, 4});
    };
    ReferenceOutput r = referenceAttention(s, T(q, 2), T(k, 3), T(v, 3));
    INFO("NaN at key " << nanKey);
    // q = e0 reads k[.][0] only, but 0 * NaN = NaN too: both rows NaN.
    for (int i = 0; i < 2; ++i) {
      CHECK(std::isnan(r.lse[i]));
      for (int d = 0; d < 4; ++d)
        CHECK(std::isnan(r.o[i * 4 + d]));
    }
    ReferenceGradients g =
        referenceAttentionBackward(s, T(q, 2), T(k, 3), T(v, 3), T(dO, 2));
    for (int d = 0; d < 4; ++d)
      CHECK(std::isnan(g.dq[4 + d]));
  }
}

TEST_CASE("reference: sampled rows equal the rows of the whole reference",
          "[frontend][reference][rows]") {
  const uint64_t seed = flashjit::test::freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  AttentionSpec spec = f32Spec(16, 8);
  spec.headsQ = 6;
  spec.headsKV = 2;
  spec.causal = Causal::BottomRight;
  Variant v("rows");
  v.mask(sliding_window(3, 1, Alignment::TopLeft) || kv_idx == 0);
  v.scoreMod(softcap(2.0f) + cast<float>(head) * 0.125f);
  spec.variant = v;
  const int64_t b = 2, sq = 9, sk = 13;
  HostTensor q(DType::F32, {b, 6, sq, 16}), k(DType::F32, {b, 2, sk, 16}),
      vt(DType::F32, {b, 2, sk, 8});
  auto r = [&](auto...) { return flashjit::test::nonZero(rng); };
  q.fill(r);
  k.fill(r);
  vt.fill(r);
  ReferenceOutput all = referenceAttention(spec, q.ref, k.ref, vt.ref);
  std::vector<RowIndex> rows;
  std::uniform_int_distribution<int64_t> ub(0, b - 1), uh(0, 5), ui(0, sq - 1);
  for (int n = 0; n < 20; ++n)
    rows.push_back({ub(rng), uh(rng), ui(rng)});
  rows.push_back({b - 1, 5, sq - 1});
  std::vector<ReferenceRow> some =
      referenceAttentionRows(spec, q.ref, k.ref, vt.ref, rows);
  REQUIRE(some.size() == rows.size());
  for (const ReferenceRow &row : some) {
    auto [bi, h, i] = row.row;
    INFO("row " << bi << " " << h << " " << i);
    CHECK(row.lse == all.lseAt(bi, h, i));
    for (int64_t d = 0; d < 8; ++d)
      CHECK(row.o[d] == all.oAt(bi, h, i, d));
  }
  const RowIndex outside[] = {{b, 0, 0}, {0, 6, 0}, {0, 0, sq}, {0, -1, 0}};
  for (const RowIndex &row : outside)
    CHECK_THROWS_AS(
        referenceAttentionRows(spec, q.ref, k.ref, vt.ref, std::span(&row, 1)),
        UserError);
}
