//===- SinkTest.cpp - Attention sinks in the spec and the references ------===//
//
// Issue 22. The spec option (canonical text, parser, hash, equality), the
// sink's argument checks, the float64 forward reference checked against the
// no-sink reference through the exact identities
//   LSE_sink = log(exp(LSE) + exp(sink)),  O_sink = O exp(LSE - LSE_sink)
// (and O = 0, LSE = sink on rows with no allowed key), and the float64
// backward's d sink (and dQ, dK, dV with a sink) against central finite
// differences of the forward reference for L = sum(dO * O), on fresh random
// odd shapes with GQA, masks, a score modifier and varlen.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"

#include "ReferenceSupport.h"
#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;
using flashjit::test::HostTensor;
using flashjit::test::uniformInt;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// A value on a 2^-12 grid in [-2, 2] (exact under the finite-difference
/// steps below).
float gridValue(std::mt19937_64 &rng) {
  return static_cast<float>(uniformInt(rng, -8192, 8192)) / 4096.0f;
}

AttentionSpec sinkSpec(int hq, int hkv, int dqk, int dv) {
  AttentionSpec s;
  s.headsQ = hq;
  s.headsKV = hkv;
  s.headDimQK = dqk;
  s.headDimV = dv;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F32;
  s.sink = true;
  return s;
}

double logAddExp(double a, double b) {
  double m = std::max(a, b);
  if (m == -std::numeric_limits<double>::infinity())
    return m;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

} // namespace

TEST_CASE("sink: spec text, parser, hash and equality", "[sink]") {
  AttentionSpec plain;
  AttentionSpec s = plain;
  s.sink = true;
  // A spec without a sink keeps the text (and cache key) it always had.
  CHECK(printSpec(plain).find("sink") == std::string::npos);
  CHECK(printSpec(s).ends_with(", sink=true)"));
  CHECK(hashSpec(s) != hashSpec(plain));
  CHECK_FALSE(structurallyEqual(s, plain));
  AttentionSpec back = parseSpec(printSpec(s));
  CHECK(back.sink);
  CHECK(structurallyEqual(back, s));
  CHECK(printSpec(back) == printSpec(s));
  CHECK_FALSE(parseSpec("attention(sink=false)").sink);
  CHECK(parseSpec("attention(heads_q=4, sink=true, causal=top_left)").sink);
  expectUserError([] { return parseSpec("attention(sink=maybe)"); },
                  {"sink must be true or false"});
  expectUserError([] { return parseSpec("attention(sink=true, sink=true)"); });
}

TEST_CASE("sink: argument errors name the field and the value", "[sink]") {
  AttentionSpec s = sinkSpec(3, 1, 4, 4);
  std::vector<float> good{0.5f, -1.0f, -kInf}; // -inf: no sink for head 2
  Arguments a;
  expectUserError([&] { a.validateSinkFor(s, true); },
                  {"declares a sink", "heads_q = 3"});
  a.bindSink(good.data(), 2);
  expectUserError([&] { a.validateSinkFor(s, true); },
                  {"2 elements", "heads_q = 3"});
  a.bindSink(good.data(), 3);
  a.validateSinkFor(s, true); // finite and -inf are fine
  for (float bad : {std::nanf(""), kInf}) {
    std::vector<float> v = good;
    v[1] = bad;
    Arguments b;
    b.bindSink(v.data(), 3);
    expectUserError([&] { b.validateSinkFor(s, true); },
                    {"sink[1] = ", "finite or -inf"});
    b.validateSinkFor(s, false); // device memory: values not read
  }
  Arguments wrongType;
  int32_t ints[3] = {0, 0, 0};
  wrongType.sink = {ints, ScalarType::Int32, 3};
  expectUserError([&] { wrongType.validateSinkFor(s, true); },
                  {"sink holds i32", "f32"});
  Arguments nullData;
  nullData.sink = {nullptr, ScalarType::Float32, 3};
  expectUserError([&] { nullData.validateSinkFor(s, true); },
                  {"null data pointer"});
  AttentionSpec plain = s;
  plain.sink = false;
  expectUserError([&] { a.validateSinkFor(plain, true); },
                  {"declares no sink"});

  // The reference checks the sink too.
  HostTensor q(DType::F32, {1, 3, 2, 4}), k(DType::F32, {1, 1, 2, 4}),
      v(DType::F32, {1, 1, 2, 4});
  expectUserError([&] { return referenceAttention(s, q.ref, k.ref, v.ref); },
                  {"declares a sink"});
  HostTensor dO(DType::F32, {1, 3, 2, 4});
  expectUserError(
      [&] {
        return referenceAttentionBackward(plain, q.ref, k.ref, v.ref, dO.ref,
                                          a);
      },
      {"declares no sink"});
}

TEST_CASE("sink: the forward reference obeys the log-sum-exp identities",
          "[sink]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    int hkv = int(uniformInt(rng, 1, 2)), group = int(uniformInt(rng, 1, 3));
    int hq = hkv * group;
    int dqk = int(uniformInt(rng, 1, 9)), dv = int(uniformInt(rng, 1, 9));
    int64_t batch = uniformInt(rng, 1, 2), sq = uniformInt(rng, 0, 13),
            sk = uniformInt(rng, 0, 11);
    AttentionSpec s = sinkSpec(hq, hkv, dqk, dv);
    // Top-left causal with sq > sk leaves rows with no allowed key; the
    // softcap reads a parameter.
    s.causal = trial % 2 ? Causal::TopLeft : Causal::BottomRight;
    if (trial % 3 == 0)
      s.variant.scoreMod(softcap(param<float>("cap")));
    INFO("trial " << trial << ": " << printSpec(s) << " batch " << batch
                  << " sq " << sq << " sk " << sk);
    HostTensor q(DType::F32, {batch, hq, sq, dqk}, true),
        k(DType::F32, {batch, hkv, sk, dqk}),
        v(DType::F32, {batch, hkv, sk, dv});
    for (HostTensor *t : {&q, &k, &v})
      t->fill([&](auto...) { return gridValue(rng); });
    std::vector<float> sink(hq);
    for (float &x : sink)
      x = gridValue(rng) * 2.0f;
    sink[uniformInt(rng, 0, hq - 1)] = -kInf;
    Arguments args;
    if (trial % 3 == 0)
      args.set("cap", Scalar::f32(1.5));
    Arguments withSink = args;
    withSink.bindSink(sink.data(), hq);
    AttentionSpec plain = s;
    plain.sink = false;
    ReferenceOutput r = referenceAttention(s, q.ref, k.ref, v.ref, withSink);
    ReferenceOutput p = referenceAttention(plain, q.ref, k.ref, v.ref, args);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < sq; ++i) {
          double lse = p.lseAt(b, h, i), want = logAddExp(lse, sink[h]);
          INFO("row " << b << "," << h << "," << i << " sink " << sink[h]);
          if (sink[h] == -kInf) {
            // -inf is no sink: bit-identical to the plain reference.
            CHECK(r.lseAt(b, h, i) == lse);
            for (int64_t d = 0; d < dv; ++d)
              CHECK(r.oAt(b, h, i, d) == p.oAt(b, h, i, d));
            continue;
          }
          CHECK(std::isfinite(r.lseAt(b, h, i)));
          CHECK(r.lseAt(b, h, i) == Approx(want).epsilon(1e-12).margin(1e-12));
          if (lse == -std::numeric_limits<double>::infinity())
            CHECK(r.lseAt(b, h, i) == double(sink[h])); // empty row
          double w = std::exp(lse - r.lseAt(b, h, i));
          for (int64_t d = 0; d < dv; ++d)
            CHECK(r.oAt(b, h, i, d) ==
                  Approx(p.oAt(b, h, i, d) * w).margin(1e-12));
        }
  }
}

TEST_CASE("sink: the backward reference matches finite differences", "[sink]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  constexpr double kH = 1.0 / 512.0;
  for (int trial = 0; trial < 4; ++trial) {
    int hkv = int(uniformInt(rng, 1, 2)), group = int(uniformInt(rng, 1, 2));
    int hq = hkv * group;
    int dqk = int(uniformInt(rng, 1, 5)), dv = int(uniformInt(rng, 1, 5));
    int64_t sq = uniformInt(rng, 1, 7), sk = uniformInt(rng, 1, 6);
    const bool varlen = trial == 3;
    AttentionSpec s = sinkSpec(hq, hkv, dqk, dv);
    if (trial == 0)
      s.causal = Causal::TopLeft; // rows past sk: no allowed key
    if (trial == 1) {
      s.variant.mask(sliding_window(2, 1, Alignment::TopLeft));
      s.variant.scoreMod(softcap(2.0f));
    }
    if (trial == 2) {
      Buffer doc = buffer<int32_t>("doc");
      s.variant.mask(doc[q_idx] == doc[kv_idx]);
    }
    INFO("trial " << trial << ": " << printSpec(s) << " sq " << sq << " sk "
                  << sk);
    // Varlen: two sequences (the second empty) packed as [total, H, D],
    // held in [1, total, H, D] tensors.
    std::vector<int32_t> cuQ{0, int32_t(sq), int32_t(sq)},
        cuK{0, int32_t(sk), int32_t(sk)};
    HostTensor q(DType::F32, {1, varlen ? sq : hq, varlen ? hq : sq, dqk}),
        k(DType::F32, {1, varlen ? sk : hkv, varlen ? hkv : sk, dqk}),
        v(DType::F32, {1, varlen ? sk : hkv, varlen ? hkv : sk, dv}),
        dO(DType::F32, {1, varlen ? sq : hq, varlen ? hq : sq, dv});
    for (HostTensor *t : {&q, &k, &v, &dO})
      t->fill([&](auto...) { return gridValue(rng); });
    auto as3 = [](const HostTensor &t) {
      TensorRef r = t.ref;
      r.rank = 3;
      r.shape = {t.ref.shape[1], t.ref.shape[2], t.ref.shape[3], 1};
      r.strides = {t.ref.strides[1], t.ref.strides[2], t.ref.strides[3], 1};
      return r;
    };
    std::vector<float> sink(hq);
    for (float &x : sink)
      x = gridValue(rng);
    std::vector<int32_t> doc(std::max(sq, sk));
    for (size_t i = 0; i < doc.size(); ++i)
      doc[i] = int32_t(i) / 3;
    Arguments args;
    args.bindSink(sink.data(), hq);
    if (trial == 2)
      args.bind("doc", doc.data(), int64_t(doc.size()));
    auto loss = [&]() {
      double l = 0.0;
      if (varlen) {
        VarlenReferenceOutput r =
            referenceVarlenAttention(s, as3(q), as3(k), as3(v), cuQ, cuK, args);
        for (int64_t t = 0; t < sq; ++t)
          for (int64_t h = 0; h < hq; ++h)
            for (int64_t d = 0; d < dv; ++d)
              l += dO.get(0, t, h, d) * r.oAt(t, h, d);
        return l;
      }
      ReferenceOutput r = referenceAttention(s, q.ref, k.ref, v.ref, args);
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t d = 0; d < dv; ++d)
            l += dO.get(0, h, i, d) * r.oAt(0, h, i, d);
      return l;
    };
    std::vector<double> dSink, dq;
    if (varlen) {
      VarlenReferenceGradients g = referenceVarlenAttentionBackward(
          s, as3(q), as3(k), as3(v), as3(dO), cuQ, cuK, args);
      dSink = g.dSink;
      dq = g.dq;
    } else {
      ReferenceGradients g =
          referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref, args);
      dSink = g.dSink;
      dq = g.dq;
    }
    REQUIRE(dSink.size() == size_t(hq));
    auto fd = [&](const std::function<void(float)> &set, float x) {
      double l[4];
      const double steps[4] = {-kH, -kH / 2, kH / 2, kH};
      for (int i = 0; i < 4; ++i) {
        set(static_cast<float>(x + steps[i]));
        l[i] = loss();
      }
      set(x);
      double d1 = (l[3] - l[0]) / (2 * kH), d2 = (l[2] - l[1]) / kH;
      return (4 * d2 - d1) / 3;
    };
    for (int h = 0; h < hq; ++h) {
      float x = sink[h];
      double want = fd([&](float y) { sink[h] = y; }, x);
      INFO("d sink[" << h << "]");
      CHECK(std::abs(dSink[h] - want) <= 1e-6 * (1 + std::abs(dSink[h])));
      CHECK(dSink[h] != 0.0); // every head has rows that see a key
    }
    // dQ keeps its form with the sink-including LSE: check one element.
    int64_t h = uniformInt(rng, 0, hq - 1), i = uniformInt(rng, 0, sq - 1),
            d = uniformInt(rng, 0, dqk - 1);
    int64_t a1 = varlen ? i : h, a2 = varlen ? h : i;
    float x = float(q.get(0, a1, a2, d));
    double want = fd([&](float y) { q.set(0, a1, a2, d, y); }, x);
    double got =
        varlen ? dq[(i * hq + h) * dqk + d] : dq[(h * sq + i) * dqk + d];
    INFO("dq at head " << h << " row " << i << " dim " << d);
    CHECK(std::abs(got - want) <= 1e-6 * (1 + std::abs(got)));
  }
}
