//===- Fp8Test.cpp - fp8 dtypes, quantisation and the fp8 reference -------===//
//
// Issue 18's foundation. The e4m3/e5m2 decoders agree with an independent
// decoding on all 256 codes of each format (the OCP formula in double with
// std::pow; e5m2 also as the top byte of a binary16); the encoders agree
// with a brute-force nearest search over every finite code (ties to the
// even code) on random values of every binade, and overflow as documented
// (torch's non-saturating cast: e4m3 -> NaN, e5m2 -> inf; the Sat variants
// clamp). Spec text: dtype=e4m3 gives fp8 Q/K/V and a bf16 O, round trips,
// hashes apart; fp8 O is refused. quantizeFp8's round trip stays within half
// a step of the format per element; the fp8 reference equals the reference
// on the inputs dequantised by hand; outlier heads show per-block scaling
// beating per-tensor.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/Types.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;

namespace {

/// The OCP OFP8 definition, written out independently of Types.cpp:
/// (-1)^s 2^(e - bias) (1 + m / 2^M) for normal codes, (-1)^s 2^(1 - bias)
/// (m / 2^M) for e == 0; e4m3 NaN at S.1111.111, e5m2 inf at S.11111.00 and
/// NaN above.
double ocpDecode(uint8_t c, int expBits, int mantBits, int bias, bool ieee) {
  const int s = c >> 7, e = (c >> mantBits) & ((1 << expBits) - 1),
            m = c & ((1 << mantBits) - 1);
  const int eMax = (1 << expBits) - 1, mMax = (1 << mantBits) - 1;
  double v;
  if (ieee && e == eMax)
    v = m == 0 ? std::numeric_limits<double>::infinity()
               : std::numeric_limits<double>::quiet_NaN();
  else if (!ieee && e == eMax && m == mMax)
    v = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0)
    v = std::pow(2.0, 1 - bias) * (m / std::pow(2.0, mantBits));
  else
    v = std::pow(2.0, e - bias) * (1.0 + m / std::pow(2.0, mantBits));
  return s ? -v : v;
}

/// The code nearest to \p x among the finite codes of a format (decoded by
/// \p dec), ties to the even code; x must be within the finite range.
uint8_t nearestCode(double x, float (*dec)(uint8_t)) {
  int best = -1;
  double bestErr = 0;
  for (int c = 0; c < 256; ++c) {
    double v = dec(uint8_t(c));
    if (!std::isfinite(v) || (v == 0.0 && std::signbit(v) != std::signbit(x)))
      continue;
    if ((v > 0 && x < 0) || (v < 0 && x > 0))
      continue;
    double err = std::fabs(x - v);
    if (best < 0 || err < bestErr || (err == bestErr && (c & 1) == 0)) {
      best = c;
      bestErr = err;
    }
  }
  return uint8_t(best);
}

/// A random float of magnitude in [2^lo, 2^hi], random sign.
float randomValue(std::mt19937_64 &rng, int lo, int hi) {
  std::uniform_real_distribution<double> e(lo, hi);
  std::bernoulli_distribution neg(0.5);
  double v = std::exp2(e(rng));
  return float(neg(rng) ? -v : v);
}

} // namespace

TEST_CASE("fp8: spellings and sizes", "[frontend][fp8]") {
  CHECK(toString(DType::E4M3) == "e4m3");
  CHECK(toString(DType::E5M2) == "e5m2");
  for (DType d : {DType::E4M3, DType::E5M2})
    CHECK(parseDType(toString(d)) == d);
  CHECK(parseDType("float8_e4m3fn") == DType::E4M3);
  CHECK(parseDType("float8_e5m2") == DType::E5M2);
  CHECK(!parseDType("fp8"));
  CHECK(!parseDType("e4m3fnuz"));
  CHECK(byteSize(DType::E4M3) == 1);
  CHECK(byteSize(DType::E5M2) == 1);
  CHECK(isFp8(DType::E5M2));
  CHECK(!isFp8(DType::BF16));
  CHECK(fp8MaxFinite(DType::E4M3) == 448.0f);
  CHECK(fp8MaxFinite(DType::E5M2) == 57344.0f);
}

TEST_CASE("fp8: decoding every code matches the OCP definition",
          "[frontend][fp8]") {
  int nanE4 = 0, nanE5 = 0, infE5 = 0;
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    double e4 = ocpDecode(uint8_t(c), 4, 3, 7, false);
    double e5 = ocpDecode(uint8_t(c), 5, 2, 15, true);
    float g4 = e4m3ToFloat(uint8_t(c)), g5 = e5m2ToFloat(uint8_t(c));
    if (std::isnan(e4)) {
      CHECK(std::isnan(g4));
      ++nanE4;
    } else {
      CHECK(double(g4) == e4);
      CHECK(std::signbit(g4) == bool(c & 0x80)); // -0 at 0x80
    }
    if (std::isnan(e5)) {
      CHECK(std::isnan(g5));
      ++nanE5;
    } else {
      CHECK(double(g5) == e5);
      infE5 += std::isinf(e5);
    }
    // e5m2 is binary16 with the low 8 bits dropped: a second oracle.
    float h = halfToFloat(uint16_t(c << 8));
    CHECK((std::isnan(h) ? std::isnan(g5) : h == g5));
  }
  CHECK(nanE4 == 2);
  CHECK(nanE5 == 6);
  CHECK(infE5 == 2);
  CHECK(e4m3ToFloat(0x7e) == 448.0f);
  CHECK(e4m3ToFloat(0x01) == std::ldexp(1.0f, -9));
  CHECK(e5m2ToFloat(0x7b) == 57344.0f);
  CHECK(e5m2ToFloat(0x01) == std::ldexp(1.0f, -16));
}

TEST_CASE("fp8: encoding rounds to the nearest code, ties to even",
          "[frontend][fp8]") {
  // Every finite code round-trips (both signs of zero).
  for (int c = 0; c < 256; ++c) {
    float v4 = e4m3ToFloat(uint8_t(c)), v5 = e5m2ToFloat(uint8_t(c));
    if (!std::isnan(v4)) {
      CHECK(floatToE4M3(v4) == c);
      CHECK(floatToE4M3Sat(v4) == c);
    }
    if (std::isfinite(v5)) {
      CHECK(floatToE5M2(v5) == c);
      CHECK(floatToE5M2Sat(v5) == c);
    }
  }
  // Midpoints between neighbours tie to the even code; a hair off goes to
  // the nearer one.
  for (int c = 0; c < 0x7e; ++c) {
    double lo = e4m3ToFloat(uint8_t(c)), hi = e4m3ToFloat(uint8_t(c + 1));
    float mid = float((lo + hi) / 2);
    CHECK(floatToE4M3(mid) == ((c & 1) ? c + 1 : c));
    CHECK(floatToE4M3(std::nextafter(mid, 0.0f)) == c);
    CHECK(floatToE4M3(std::nextafter(mid, 1e9f)) == c + 1);
  }
  // Random values across every binade against the brute-force search.
  std::mt19937_64 rng(freshSeed());
  for (int i = 0; i < 4000; ++i) {
    float x4 = std::clamp(randomValue(rng, -12, 9), -448.0f, 448.0f);
    float x5 = std::clamp(randomValue(rng, -18, 16), -57344.0f, 57344.0f);
    INFO("x4 = " << x4 << ", x5 = " << x5);
    CHECK(floatToE4M3(x4) == nearestCode(x4, e4m3ToFloat));
    CHECK(floatToE5M2(x5) == nearestCode(x5, e5m2ToFloat));
  }
}

TEST_CASE("fp8: overflow, inf and NaN (torch's non-saturating cast)",
          "[frontend][fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // e4m3: 464 ties down to 448; above it the value would need 480: NaN.
  CHECK(floatToE4M3(464.0f) == 0x7e);
  CHECK(floatToE4M3(std::nextafter(464.0f, 1e9f)) == 0x7f);
  CHECK(floatToE4M3(-500.0f) == 0xff);
  CHECK(floatToE4M3(inf) == 0x7f);
  CHECK(floatToE4M3(nan) == 0x7f);
  CHECK(floatToE4M3Sat(1e6f) == 0x7e);
  CHECK(floatToE4M3Sat(-inf) == 0xfe);
  CHECK(floatToE4M3Sat(nan) == 0x7f);
  // e5m2: 61440 (the midpoint to 65536) ties to the even code, inf.
  CHECK(floatToE5M2(61439.0f) == 0x7b);
  CHECK(floatToE5M2(61440.0f) == 0x7c);
  CHECK(floatToE5M2(-inf) == 0xfc);
  CHECK(std::isnan(e5m2ToFloat(floatToE5M2(nan))));
  CHECK(floatToE5M2Sat(61440.0f) == 0x7b);
  CHECK(floatToE5M2Sat(-inf) == 0xfb);
  // Subnormals: half the smallest step ties to zero, a bit more rounds up.
  CHECK(floatToE4M3(std::ldexp(1.0f, -10)) == 0x00);
  CHECK(floatToE4M3(std::ldexp(1.5f, -10)) == 0x01);
  CHECK(floatToE4M3(-std::ldexp(1.0f, -12)) == 0x80);
  // storeFromFloat / loadAsFloat go through the same conversions.
  uint8_t buf[2];
  storeFromFloat(buf, DType::E4M3, 0, 3.3f);
  storeFromFloat(buf, DType::E5M2, 1, 3.3f);
  CHECK(loadAsFloat(buf, DType::E4M3, 0) == 3.25f);
  CHECK(loadAsFloat(buf, DType::E5M2, 1) == 3.5f);
}

TEST_CASE("fp8: spec text, validation and hashes", "[frontend][fp8]") {
  AttentionSpec s = parseSpec("attention(name=f8, mask=true, score=score, "
                              "head_dim=64, dtype=e4m3)");
  CHECK(s.dtypeQ == DType::E4M3);
  CHECK(s.dtypeK == DType::E4M3);
  CHECK(s.dtypeV == DType::E4M3);
  CHECK(s.dtypeO == DType::BF16);
  AttentionSpec back = parseSpec(printSpec(s));
  CHECK(structurallyEqual(back, s));
  AttentionSpec e5 = s;
  e5.dtypeK = e5.dtypeV = DType::E5M2;
  CHECK(structurallyEqual(parseSpec(printSpec(e5)), e5));
  AttentionSpec bf = s;
  bf.dtypeQ = bf.dtypeK = bf.dtypeV = DType::BF16;
  CHECK(hashSpec(s) != hashSpec(e5));
  CHECK(hashSpec(s) != hashSpec(bf));
  AttentionSpec bad = s;
  bad.dtypeO = DType::E4M3;
  expectUserError([&] { bad.validate(); }, {"dtype_o = e4m3", "fp8 output"});
  expectUserError(
      [] {
        return parseSpec("attention(name=f8, mask=true, score=score, "
                         "head_dim=64, dtype_o=e5m2)");
      },
      {"fp8 output"});
  expectUserError(
      [] {
        return parseSpec("attention(name=f8, mask=true, score=score, "
                         "head_dim=64, dtype=fp8)");
      },
      {"unknown dtype 'fp8'", "e4m3"});
}

namespace {

/// A contiguous float tensor [b, h, s, d] filled from N(0, 1), head \p
/// loudHead's channels < \p loudChannels multiplied by \p factor.
std::vector<float> gaussian(std::mt19937_64 &rng, std::array<int64_t, 4> sh,
                            int64_t loudHead = -1, int64_t loudChannels = 0,
                            float factor = 1.0f) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(sh[0] * sh[1] * sh[2] * sh[3]);
  for (int64_t i = 0; i < int64_t(x.size()); ++i) {
    int64_t d = i % sh[3], h = (i / (sh[3] * sh[2])) % sh[1];
    x[i] = n(rng) * (h == loudHead && d < loudChannels ? factor : 1.0f);
  }
  return x;
}

/// The real value of element \p i of quantised \p t (4-D, contiguous),
/// decoded by hand: the fp8 code's value times its block's descale.
double realValue(const Fp8Tensor &t, int64_t i, int64_t headGroup) {
  const auto &sh = t.ref.shape;
  int64_t b = i / (sh[1] * sh[2] * sh[3]), h = (i / (sh[2] * sh[3])) % sh[1];
  double code = t.ref.dtype == DType::E4M3 ? e4m3ToFloat(t.data[i])
                                           : e5m2ToFloat(t.data[i]);
  double d = t.descale.size() == 1
                 ? t.descale[0]
                 : t.descale[b * (sh[1] / headGroup) + h / headGroup];
  return code * d;
}

} // namespace

TEST_CASE("fp8: quantizeFp8 round trip within half a step", "[frontend][fp8]") {
  std::mt19937_64 rng(freshSeed());
  const std::array<int64_t, 4> sh{2, 4, 13, 24};
  std::vector<float> x = gaussian(rng, sh, 1, 3, 100.0f);
  // Seen through [b, s, h, d] strides (sequence-major), values as in x.
  std::vector<float> strided(x.size());
  for (int64_t b = 0; b < sh[0]; ++b)
    for (int64_t h = 0; h < sh[1]; ++h)
      for (int64_t s = 0; s < sh[2]; ++s)
        for (int64_t d = 0; d < sh[3]; ++d)
          strided[((b * sh[2] + s) * sh[1] + h) * sh[3] + d] =
              x[((b * sh[1] + h) * sh[2] + s) * sh[3] + d];
  TensorRef in = TensorRef::contiguous(strided.data(), DType::F32, sh);
  in.strides = {sh[2] * sh[1] * sh[3], sh[3], sh[1] * sh[3], 1};
  for (DType f : {DType::E4M3, DType::E5M2})
    for (Fp8Scaling sc : {Fp8Scaling::PerTensor, Fp8Scaling::PerBlock})
      for (int64_t group : {1, 2}) {
        Fp8Tensor t = quantizeFp8(in, f, sc, group);
        CHECK(t.descale.size() ==
              (sc == Fp8Scaling::PerTensor ? 1u : size_t(2 * 4 / group)));
        const int mant = f == DType::E4M3 ? 3 : 2;
        const int minExp = f == DType::E4M3 ? -6 : -14;
        for (int64_t i = 0; i < int64_t(x.size()); ++i) {
          double real = realValue(t, i, group);
          // Half a step at |x| (relative 2^-(M+1)), or half the subnormal
          // step of the block, plus the f32 rounding of x / descale.
          double desc = t.descale.size() == 1
                            ? t.descale[0]
                            : t.descale[(i / (13 * 24 * 4)) * (4 / group) +
                                        ((i / (13 * 24)) % 4) / group];
          double bound = std::max(std::fabs(x[i]) * std::ldexp(1.0, -mant - 1),
                                  desc * std::ldexp(1.0, minExp - mant - 1)) *
                             (1 + 1e-6) +
                         1e-30;
          INFO("element " << i << " x " << x[i] << " real " << real);
          REQUIRE(std::fabs(real - x[i]) <= bound);
        }
      }
}

TEST_CASE("fp8: quantizeFp8 and descale errors", "[frontend][fp8]") {
  std::vector<float> x(2 * 2 * 3 * 8, 1.0f);
  TensorRef in = TensorRef::contiguous(x.data(), DType::F32, {2, 2, 3, 8});
  expectUserError(
      [&] { return quantizeFp8(in, DType::BF16, Fp8Scaling::PerTensor); },
      {"not fp8"});
  expectUserError(
      [&] { return quantizeFp8(in, DType::E4M3, Fp8Scaling::PerBlock, 3); },
      {"headGroup = 3"});
  x[5] = std::numeric_limits<float>::infinity();
  expectUserError(
      [&] { return quantizeFp8(in, DType::E4M3, Fp8Scaling::PerTensor); },
      {"inf", "must be finite"});
  x[5] = 0.0f;
  std::fill(x.begin(), x.end(), 0.0f); // all zero: descale 1, codes 0
  Fp8Tensor z = quantizeFp8(in, DType::E4M3, Fp8Scaling::PerBlock);
  CHECK(z.descale == std::vector<float>(4, 1.0f));

  AttentionSpec spec;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = DType::E4M3;
  spec.headsQ = 4;
  spec.headsKV = 2;
  float three[3] = {1, 1, 1}, bad[1] = {std::nanf("")};
  expectUserError(
      [&] {
        Arguments().bindKDescale(three, 3).validateDescalesFor(spec, 2, true);
      },
      {"k_descale has 3 elements", "batch * heads_kv = 4"});
  expectUserError(
      [&] {
        Arguments().bindVDescale(bad, 1).validateDescalesFor(spec, 2, true);
      },
      {"v_descale[0] = nan"});
  AttentionSpec mixed = spec;
  mixed.dtypeQ = DType::BF16;
  expectUserError(
      [&] {
        Arguments().bindQDescale(three, 1).validateDescalesFor(mixed, 2, true);
      },
      {"q_descale was given", "bf16"});
  Arguments().bindQDescale(three, 1).bindKDescale(three, 1).validateDescalesFor(
      spec, 2, true); // per tensor: fine

  // dequantizeFp8 checks the descale's length against batch * heads_kv
  // (2 * 2 here) and its element type; 1 and 4 elements are fine.
  std::fill(x.begin(), x.end(), 1.0f); // every code 448 (descale 1/448)
  Fp8Tensor q8 = quantizeFp8(in, DType::E4M3, Fp8Scaling::PerBlock);
  float four[4] = {1, 2, 3, 4};
  int32_t ints[4] = {1, 1, 1, 1};
  expectUserError(
      [&] {
        return dequantizeFp8(q8.ref, BufferRef{three, ScalarType::Float32, 3},
                             2);
      },
      {"descale has 3 elements", "batch * heads_kv = 4"});
  expectUserError(
      [&] {
        return dequantizeFp8(q8.ref, BufferRef{ints, ScalarType::Int32, 4}, 2);
      },
      {"element type i32", "must be f32"});
  DequantizedTensor d4 =
      dequantizeFp8(q8.ref, BufferRef{four, ScalarType::Float32, 4}, 2);
  DequantizedTensor d1 =
      dequantizeFp8(q8.ref, BufferRef{four, ScalarType::Float32, 1}, 2);
  REQUIRE(d4.data.size() == x.size());
  REQUIRE(d1.data.size() == x.size());
  // Element (b, h, t, d) of [2, 2, 3, 8] at ((b * 2 + h) * 3 + t) * 8 + d.
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h) {
      size_t i = size_t(((b * 2 + h) * 3 + 2) * 8 + 5);
      CHECK(d4.data[i] == 448.0f * four[b * 2 + h]);
      CHECK(d1.data[i] == 448.0f);
    }
}

namespace {

/// Max |O - ref| over rows of two references.
double maxDiff(const ReferenceOutput &a, const ReferenceOutput &b) {
  double worst = 0;
  for (size_t i = 0; i < a.o.size(); ++i)
    worst = std::max(worst, std::fabs(a.o[i] - b.o[i]));
  for (size_t i = 0; i < a.lse.size(); ++i)
    worst = std::max(worst, std::fabs(a.lse[i] - b.lse[i]));
  return worst;
}

/// The fp32 tensor of \p t's real values (decoded by hand, realValue).
std::vector<float> realTensor(const Fp8Tensor &t, int64_t headGroup) {
  std::vector<float> out(t.data.size());
  for (int64_t i = 0; i < int64_t(out.size()); ++i)
    out[i] = float(realValue(t, i, headGroup));
  return out;
}

} // namespace

TEST_CASE("fp8: the reference dequantises exactly", "[frontend][fp8]") {
  std::mt19937_64 rng(freshSeed());
  AttentionSpec spec =
      parseSpec("attention(name=f8ref, mask=kv_idx <= q_idx + 3, "
                "score=20.0 * tanh(score / 20.0), head_dim_qk=24, "
                "head_dim_v=40, dtype=e4m3, heads_q=6, heads_kv=2)");
  spec.dtypeV = DType::E5M2;
  const int64_t b = 2, sq = 11, sk = 19, g = 3;
  for (Fp8Scaling sc : {Fp8Scaling::PerTensor, Fp8Scaling::PerBlock}) {
    std::vector<float> q = gaussian(rng, {b, 6, sq, 24}),
                       k = gaussian(rng, {b, 2, sk, 24}),
                       v = gaussian(rng, {b, 2, sk, 40});
    auto ref = [](std::vector<float> &x, std::array<int64_t, 4> sh) {
      return TensorRef::contiguous(x.data(), DType::F32, sh);
    };
    Fp8Tensor q8 = quantizeFp8(ref(q, {b, 6, sq, 24}), DType::E4M3, sc, g);
    Fp8Tensor k8 = quantizeFp8(ref(k, {b, 2, sk, 24}), DType::E4M3, sc);
    Fp8Tensor v8 = quantizeFp8(ref(v, {b, 2, sk, 40}), DType::E5M2, sc);
    Arguments args;
    args.qDescale = q8.descaleRef();
    args.kDescale = k8.descaleRef();
    args.vDescale = v8.descaleRef();
    ReferenceOutput got =
        referenceAttention(spec, q8.ref, k8.ref, v8.ref, args);
    // The oracle: the f32 reference on the real values, decoded by hand.
    std::vector<float> qr = realTensor(q8, g), kr = realTensor(k8, 1),
                       vr = realTensor(v8, 1);
    AttentionSpec f32 = spec;
    f32.dtypeQ = f32.dtypeK = f32.dtypeV = DType::F32;
    ReferenceOutput want =
        referenceAttention(f32, ref(qr, {b, 6, sq, 24}),
                           ref(kr, {b, 2, sk, 24}), ref(vr, {b, 2, sk, 40}));
    // Real values rounded to f32 once (fp8 * descale): ~1e-7 relative.
    CHECK(maxDiff(got, want) < 1e-5);
    // Without the descales the answer is different (they are applied).
    ReferenceOutput plain = referenceAttention(spec, q8.ref, k8.ref, v8.ref);
    CHECK(maxDiff(plain, want) > 1e-2);
  }
}

TEST_CASE("fp8: per-block scaling beats per-tensor on outlier heads",
          "[frontend][fp8]") {
  // Q, K and V carry 4 channels 100x larger in head 0 (the FA3 paper's
  // outlier setting, §4.3, placed in one head); heads 1-3 are N(0, 1),
  // and in the second setting K and V of heads 2, 3 are also 1000x quieter
  // (heads of very different scale in one tensor). Per-tensor scales are
  // set by the outliers, per-block ones per [batch, head]. The error is the
  // relative RMS error of O per head against the float64 reference on the
  // unquantised inputs. e4m3 is scale-invariant above its subnormal range
  // (2^-6 * scale), so the outliers alone change the other heads' error
  // little (both ~4.4e-2); the quiet heads fall into e4m3's subnormals
  // under the per-tensor scale and lose most of their bits.
  std::mt19937_64 rng(freshSeed());
  AttentionSpec spec = parseSpec("attention(name=f8out, mask=true, "
                                 "score=score, head_dim=64, dtype=e4m3, "
                                 "heads_q=4, heads_kv=4)");
  spec.dtypeO = DType::F32;
  const int64_t b = 2, s = 48, hs = s * 64;
  for (int quiet = 0; quiet < 2; ++quiet) {
    std::vector<float> q = gaussian(rng, {b, 4, s, 64}, 0, 4, 100.0f),
                       k = gaussian(rng, {b, 4, s, 64}, 0, 4, 100.0f),
                       v = gaussian(rng, {b, 4, s, 64}, 0, 4, 100.0f);
    if (quiet)
      for (std::vector<float> *t : {&k, &v})
        for (int64_t i = 0; i < int64_t(t->size()); ++i)
          if ((i / hs) % 4 >= 2)
            (*t)[i] *= 1e-3f;
    auto ref = [&](std::vector<float> &x) {
      return TensorRef::contiguous(x.data(), DType::F32, {b, 4, s, 64});
    };
    AttentionSpec f32 = spec;
    f32.dtypeQ = f32.dtypeK = f32.dtypeV = DType::F32;
    ReferenceOutput exact = referenceAttention(f32, ref(q), ref(k), ref(v));
    // err[scaling][head]: relative RMS error of O over both batches.
    double err[2][4] = {};
    for (Fp8Scaling sc : {Fp8Scaling::PerTensor, Fp8Scaling::PerBlock}) {
      Fp8Tensor q8 = quantizeFp8(ref(q), DType::E4M3, sc),
                k8 = quantizeFp8(ref(k), DType::E4M3, sc),
                v8 = quantizeFp8(ref(v), DType::E4M3, sc);
      Arguments a;
      a.qDescale = q8.descaleRef();
      a.kDescale = k8.descaleRef();
      a.vDescale = v8.descaleRef();
      ReferenceOutput r = referenceAttention(spec, q8.ref, k8.ref, v8.ref, a);
      double se[4] = {}, sv[4] = {};
      for (size_t i = 0; i < r.o.size(); ++i) {
        size_t h = (i / hs) % 4;
        se[h] += (r.o[i] - exact.o[i]) * (r.o[i] - exact.o[i]);
        sv[h] += exact.o[i] * exact.o[i];
      }
      for (int h = 0; h < 4; ++h)
        err[sc == Fp8Scaling::PerBlock][h] = std::sqrt(se[h] / sv[h]);
    }
    INFO("quiet " << quiet << ": relative RMS error of O in heads 1-3 per "
                  << "tensor " << err[0][1] << ", " << err[0][2] << ", "
                  << err[0][3] << "; per block " << err[1][1] << ", "
                  << err[1][2] << ", " << err[1][3]);
    // Within e4m3's precision (3 mantissa bits: ~2^-4 per element) where
    // no head is pushed into the subnormals.
    for (int h = 1; h < 4; ++h) {
      CHECK(err[1][h] < 0.1);
      CHECK((err[0][h] < 0.1) == !(quiet && h >= 2));
    }
    if (quiet) { // the quiet heads: per block wins by far
      CHECK(err[1][2] * 5 < err[0][2]);
      CHECK(err[1][3] * 5 < err[0][3]);
    } else { // the outliers alone: equal within noise (~5% per head)
      double t = err[0][1] + err[0][2] + err[0][3],
             bl = err[1][1] + err[1][2] + err[1][3];
      CHECK(bl < 1.1 * t);
      CHECK(t < 1.1 * bl);
    }
  }
}
