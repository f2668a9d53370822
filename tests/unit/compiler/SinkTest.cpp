//===- SinkTest.cpp - CPU kernels with attention sinks vs the reference ---===//
//
// Issue 22. The CPU forward (O, LSE) and backward (dQ, dK, dV, d sink) of
// specs with an attention sink against the float64 references (which
// SinkTest.cpp of the frontend checks against the no-sink reference and
// finite differences), on fresh random odd shapes over 16-row tiles: GQA,
// causal in both alignments (top-left with seqlen_q > seqlen_k leaves rows
// with no allowed key: O = 0 exactly, LSE = sink[h]), a sliding window with
// softcap, a document mask, block-sparse, varlen with an empty sequence,
// and a head whose sink is -inf (no sink: LSE -inf on its empty rows).
// Every output is poisoned with NaN first, so an unwritten element fails.
//
// Tolerance per tensor with reference r: |x - r| <= tol (1 + max |r|),
// tol = 1e-4 (fp32), 2.5e-2 (bf16); LSE to 1e-4 (1 + |r|) (fp32 state);
// d sink (a sum over every row of a head of exp(sink - LSE) D, with D
// reading the rounded O) for bf16 as BackwardTest.cpp's compareData judges
// data gradients: |x - r| <= 2 |r~ - r| + tol (1 + max |r|), r~ the
// reference whose D reads O rounded to the dtype.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// A contiguous tensor with storage: [B, H, S, D] or packed [total, H, D].
struct Buf {
  std::vector<uint8_t> bytes;
  TensorRef ref;
  Buf(DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t x : shape)
      n *= x;
    bytes.assign(std::max<int64_t>(n, 1) * byteSize(dtype), 0xFF); // NaN
    ref.data = bytes.data();
    ref.dtype = dtype;
    ref.rank = int(shape.size());
    int64_t stride = 1;
    for (int i = ref.rank - 1; i >= 0; --i) {
      ref.shape[i] = shape[i];
      ref.strides[i] = std::max<int64_t>(stride, 1);
      stride *= shape[i];
    }
  }
  int64_t count() const { return int64_t(bytes.size()) / byteSize(ref.dtype); }
  void randomize(std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < count(); ++i)
      storeFromFloat(bytes.data(), ref.dtype, i, u(rng));
  }
  float at(int64_t i) const { return loadAsFloat(bytes.data(), ref.dtype, i); }
};

double tolFor(DType d) { return d == DType::F32 ? 1e-4 : 2.5e-2; }

/// "" when got(i) matches want(i) for i < n within tol (1 + max |want|).
template <class G, class W>
std::string compare(const std::string &what, int64_t n, double tol, G got,
                    W want) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(want(i)))
      scale = std::max(scale, std::abs(double(want(i))));
  double t = tol * (1 + scale);
  for (int64_t i = 0; i < n; ++i) {
    double g = got(i), w = want(i);
    bool ok = std::isinf(w) ? g == w : std::abs(g - w) <= t;
    if (!ok || std::isnan(g))
      return what + "[" + std::to_string(i) + "] = " + std::to_string(g) +
             ", expected " + std::to_string(w) + " (tolerance " +
             std::to_string(t) + ")";
  }
  return {};
}

AttentionSpec sinkSpec(int hq, int hkv, int dqk, int dv, DType dt,
                       Causal causal = Causal::None) {
  AttentionSpec s;
  s.headsQ = hq;
  s.headsKV = hkv;
  s.headDimQK = dqk;
  s.headDimV = dv;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = dt;
  s.causal = causal;
  s.sink = true;
  return s;
}

/// One case: a spec with its run-time arguments.
struct Case {
  std::string name;
  AttentionSpec spec;
  bool blockSparse = false;
  bool varlen = false;
};

std::vector<Case> cases() {
  std::vector<Case> cs;
  cs.push_back({"dense, GQA 4:2, fp32", sinkSpec(4, 2, 8, 8, DType::F32)});
  cs.push_back({"causal top-left (empty rows), dv != dqk, bf16",
                sinkSpec(3, 3, 16, 8, DType::BF16, Causal::TopLeft)});
  cs.push_back({"causal bottom-right, GQA 2:1, fp32",
                sinkSpec(2, 1, 8, 8, DType::F32, Causal::BottomRight)});
  {
    AttentionSpec s = sinkSpec(2, 1, 8, 4, DType::F32);
    s.variant.mask(sliding_window(3, 2, Alignment::TopLeft));
    s.variant.scoreMod(softcap(param<float>("cap")));
    s.scale = 1.5f;
    cs.push_back({"window (3, 2) + softcap(cap), fp32", s});
  }
  {
    AttentionSpec s = sinkSpec(2, 2, 8, 8, DType::F32);
    Buffer doc = buffer<int32_t>("doc");
    s.variant.mask(doc[q_idx] == doc[kv_idx]);
    cs.push_back({"document mask, fp32", s});
    cs.push_back({"document mask, block-sparse, fp32", s, true});
  }
  cs.push_back({"varlen causal top-left, GQA 2:1, fp32",
                sinkSpec(2, 1, 8, 8, DType::F32, Causal::TopLeft), false,
                true});
  return cs;
}

/// Binds the case's parameters and buffers, and the sink.
void bindArgs(const Case &c, Arguments &a, std::vector<int32_t> &doc,
              std::vector<float> &sink, int64_t sq, int64_t sk,
              std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  sink.resize(c.spec.headsQ);
  for (float &x : sink)
    x = u(rng);
  sink[rng() % sink.size()] = -kInf; // no sink for that head
  a.bindSink(sink.data(), int64_t(sink.size()));
  auto readsParam = [&](const char *n) {
    for (const ParamDecl &p : c.spec.variant.params())
      if (p.name == n)
        return true;
    return false;
  };
  if (readsParam("cap"))
    a.set("cap", Scalar::f32(1.0 + 0.5 * (rng() % 3)));
  if (!c.spec.variant.buffers().empty()) {
    doc.assign(std::max<int64_t>({sq, sk, 1}), 0);
    int32_t d = 0;
    for (int32_t &x : doc) {
      if (rng() % 5 == 0)
        ++d;
      x = d;
    }
    a.bind("doc", doc.data(), int64_t(doc.size()));
  }
}

CompileOptions optionsOf(const Case &c) {
  CompileOptions o;
  o.blockM = 16;
  o.blockN = 16;
  o.blockSparse = c.blockSparse;
  o.varlen = c.varlen;
  return o;
}

/// Forward and backward of one dense (or block-sparse) case against the
/// references; "" when everything matches.
std::string runDense(const Case &c, int64_t batch, int64_t sq, int64_t sk,
                     std::mt19937 &rng) {
  const AttentionSpec &s = c.spec;
  CompileOptions opt = optionsOf(c);
  auto fwd = test::cachedKernel(s, opt);
  auto bwd = loadOrCompileCpuBackward(s, opt);
  Arguments args;
  std::vector<int32_t> doc;
  std::vector<float> sink;
  bindArgs(c, args, doc, sink, sq, sk, rng);
  Buf q(s.dtypeQ, {batch, s.headsQ, sq, s.headDimQK}),
      k(s.dtypeK, {batch, s.headsKV, sk, s.headDimQK}),
      v(s.dtypeV, {batch, s.headsKV, sk, s.headDimV}),
      o(s.dtypeO, {batch, s.headsQ, sq, s.headDimV}),
      dO(s.dtypeO, {batch, s.headsQ, sq, s.headDimV}),
      dq(s.dtypeQ, {batch, s.headsQ, sq, s.headDimQK}),
      dk(s.dtypeK, {batch, s.headsKV, sk, s.headDimQK}),
      dv(s.dtypeV, {batch, s.headsKV, sk, s.headDimV}),
      lse(DType::F32, {batch, s.headsQ, sq});
  lse.ref.rank = 3;
  for (Buf *t : {&q, &k, &v, &dO})
    t->randomize(rng);
  std::optional<BlockMask> bm;
  if (c.blockSparse) {
    bm = fwd->buildBlockMask(batch, sq, sk, args);
    fwd->runBlockSparse(q.ref, k.ref, v.ref, o.ref, &lse.ref, *bm, args);
  } else {
    fwd->run(q.ref, k.ref, v.ref, o.ref, &lse.ref, args);
  }
  ReferenceOutput r = bm ? referenceAttention(s, q.ref, k.ref, v.ref, args, *bm)
                         : referenceAttention(s, q.ref, k.ref, v.ref, args);
  double tol = tolFor(s.dtypeQ);
  std::string e = compare(
      "o", int64_t(r.o.size()), tol, [&](int64_t i) { return o.at(i); },
      [&](int64_t i) { return r.o[i]; });
  for (int64_t i = 0; e.empty() && i < int64_t(r.lse.size()); ++i) {
    double w = r.lse[i], g = lse.at(i);
    bool ok =
        std::isinf(w) ? g == w : std::abs(g - w) <= 1e-4 * (1 + std::abs(w));
    if (!ok)
      e = "lse[" + std::to_string(i) + "] = " + std::to_string(g) +
          ", expected " + std::to_string(w);
    // A row with no allowed key: O exactly 0, LSE = the head's sink.
    int64_t h = (i / sq) % s.headsQ;
    if (ok && w == double(sink[h]))
      for (int64_t d = 0; d < s.headDimV; ++d)
        if (o.at(i * s.headDimV + d) != 0.0f)
          e = "o of an empty row is not exactly 0";
  }
  if (!e.empty())
    return "forward: " + e;

  DataGradients g =
      bm ? bwd->runBlockSparse(q.ref, k.ref, v.ref, o.ref, lse.ref, dO.ref,
                               dq.ref, dk.ref, dv.ref, *bm, args)
         : bwd->run(q.ref, k.ref, v.ref, o.ref, lse.ref, dO.ref, dq.ref, dk.ref,
                    dv.ref, args);
  ReferenceGradients rg = referenceAttentionBackward(
      s, q.ref, k.ref, v.ref, dO.ref, args, {}, bm ? &*bm : nullptr);
  e = compare(
      "dq", int64_t(rg.dq.size()), tol, [&](int64_t i) { return dq.at(i); },
      [&](int64_t i) { return rg.dq[i]; });
  if (e.empty())
    e = compare(
        "dk", int64_t(rg.dk.size()), tol, [&](int64_t i) { return dk.at(i); },
        [&](int64_t i) { return rg.dk[i]; });
  if (e.empty())
    e = compare(
        "dv", int64_t(rg.dv.size()), tol, [&](int64_t i) { return dv.at(i); },
        [&](int64_t i) { return rg.dv[i]; });
  if (e.empty() && g.dSink.size() != size_t(s.headsQ))
    e = "dSink has " + std::to_string(g.dSink.size()) + " elements";
  // fp16/bf16: D reads the rounded O; allow twice the error of the
  // reference whose D does the same (BackwardTest.cpp's compareData).
  std::vector<double> roundedSink = rg.dSink;
  if (s.dtypeO != DType::F32)
    roundedSink =
        referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref, args, {},
                                   bm ? &*bm : nullptr, s.dtypeO)
            .dSink;
  double sinkScale = 0;
  for (int64_t h = 0; h < s.headsQ; ++h)
    sinkScale = std::max(sinkScale, std::abs(rg.dSink[h]));
  for (int64_t h = 0; e.empty() && h < s.headsQ; ++h) {
    const double x = g.dSink[h], r = rg.dSink[h];
    const double t = 2 * std::abs(roundedSink[h] - r) + tol * (1 + sinkScale);
    if (!(std::abs(x - r) <= t))
      e = "dsink[" + std::to_string(h) + "] = " + std::to_string(x) +
          ", expected " + std::to_string(r) + " (tolerance " +
          std::to_string(t) + ", D of the rounded O gives " +
          std::to_string(roundedSink[h]) + ")";
  }
  for (int64_t h = 0; e.empty() && h < s.headsQ; ++h)
    if (sink[h] == -kInf && g.dSink[h] != 0.0f)
      e = "d sink of a -inf sink is not 0";
  return e.empty() ? e : "backward: " + e;
}

/// One varlen case with an empty sequence in the middle.
std::string runVarlen(const Case &c, std::vector<int32_t> lensQ,
                      std::vector<int32_t> lensK, std::mt19937 &rng) {
  const AttentionSpec &s = c.spec;
  CompileOptions opt = optionsOf(c);
  auto fwd = test::cachedKernel(s, opt);
  auto bwd = loadOrCompileCpuBackward(s, opt);
  std::vector<int32_t> cuQ{0}, cuK{0};
  for (size_t i = 0; i < lensQ.size(); ++i) {
    cuQ.push_back(cuQ.back() + lensQ[i]);
    cuK.push_back(cuK.back() + lensK[i]);
  }
  int64_t tq = cuQ.back(), tk = cuK.back();
  Arguments args;
  std::vector<int32_t> doc;
  std::vector<float> sink;
  bindArgs(c, args, doc, sink, 0, 0, rng);
  Buf q(s.dtypeQ, {tq, s.headsQ, s.headDimQK}),
      k(s.dtypeK, {tk, s.headsKV, s.headDimQK}),
      v(s.dtypeV, {tk, s.headsKV, s.headDimV}),
      o(s.dtypeO, {tq, s.headsQ, s.headDimV}),
      dO(s.dtypeO, {tq, s.headsQ, s.headDimV}),
      dq(s.dtypeQ, {tq, s.headsQ, s.headDimQK}),
      dk(s.dtypeK, {tk, s.headsKV, s.headDimQK}),
      dv(s.dtypeV, {tk, s.headsKV, s.headDimV}),
      lse(DType::F32, {s.headsQ, tq});
  for (Buf *t : {&q, &k, &v, &dO})
    t->randomize(rng);
  fwd->runVarlen(q.ref, k.ref, v.ref, o.ref, &lse.ref, cuQ, cuK, args);
  VarlenReferenceOutput r =
      referenceVarlenAttention(s, q.ref, k.ref, v.ref, cuQ, cuK, args);
  double tol = tolFor(s.dtypeQ);
  std::string e = compare(
      "o", int64_t(r.o.size()), tol, [&](int64_t i) { return o.at(i); },
      [&](int64_t i) { return r.o[i]; });
  if (e.empty())
    e = compare(
        "lse", int64_t(r.lse.size()), tol, [&](int64_t i) { return lse.at(i); },
        [&](int64_t i) { return r.lse[i]; });
  if (!e.empty())
    return "forward: " + e;
  DataGradients g = bwd->runVarlen(q.ref, k.ref, v.ref, o.ref, lse.ref, dO.ref,
                                   dq.ref, dk.ref, dv.ref, cuQ, cuK, args);
  VarlenReferenceGradients rg = referenceVarlenAttentionBackward(
      s, q.ref, k.ref, v.ref, dO.ref, cuQ, cuK, args);
  e = compare(
      "dq", int64_t(rg.dq.size()), tol, [&](int64_t i) { return dq.at(i); },
      [&](int64_t i) { return rg.dq[i]; });
  if (e.empty())
    e = compare(
        "dk", int64_t(rg.dk.size()), tol, [&](int64_t i) { return dk.at(i); },
        [&](int64_t i) { return rg.dk[i]; });
  if (e.empty())
    e = compare(
        "dsink", s.headsQ, tol, [&](int64_t h) { return g.dSink.at(h); },
        [&](int64_t h) { return rg.dSink.at(h); });
  return e.empty() ? e : "backward: " + e;
}

} // namespace

TEST_CASE("sink: CPU forward and backward match the float64 reference",
          "[sink]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (const Case &c : cases()) {
    for (int trial = 0; trial < 3; ++trial) {
      std::string e;
      if (c.varlen) {
        std::vector<int32_t> lq{int32_t(1 + rng() % 37), 0,
                                int32_t(1 + rng() % 20)};
        std::vector<int32_t> lk{int32_t(1 + rng() % 30), int32_t(rng() % 5),
                                int32_t(rng() % 20)};
        INFO(c.name << ", varlen trial " << trial);
        e = runVarlen(c, lq, lk, rng);
        CHECK(e == "");
        continue;
      }
      int64_t batch = 1 + rng() % 2, sq = rng() % 41, sk = rng() % 37;
      if (trial == 0) // top-left causal: rows past seqlen_k see no key
        sq = sk + 1 + rng() % 17;
      INFO(c.name << ": batch " << batch << ", seqlen_q " << sq << ", seqlen_k "
                  << sk);
      e = runDense(c, batch, sq, sk, rng);
      CHECK(e == "");
    }
  }
}

TEST_CASE("sink: a sink of -inf everywhere is no sink, bit for bit", "[sink]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  // Bottom-right causal with sq > sk: rows 0..sq - sk - 1 see no key.
  AttentionSpec s = sinkSpec(2, 1, 8, 8, DType::F32, Causal::BottomRight);
  AttentionSpec plain = s;
  plain.sink = false;
  CompileOptions opt;
  opt.blockM = opt.blockN = 16;
  int64_t sq = 23, sk = 11;
  Buf q(s.dtypeQ, {1, 2, sq, 8}), k(s.dtypeK, {1, 1, sk, 8}),
      v(s.dtypeV, {1, 1, sk, 8}), o1(s.dtypeO, {1, 2, sq, 8}),
      o2(s.dtypeO, {1, 2, sq, 8}), l1(DType::F32, {1, 2, sq}),
      l2(DType::F32, {1, 2, sq});
  l1.ref.rank = l2.ref.rank = 3;
  for (Buf *t : {&q, &k, &v})
    t->randomize(rng);
  std::vector<float> sink{-kInf, -kInf};
  Arguments a;
  a.bindSink(sink.data(), 2);
  test::cachedKernel(s, opt)->run(q.ref, k.ref, v.ref, o1.ref, &l1.ref, a);
  test::cachedKernel(plain, opt)->run(q.ref, k.ref, v.ref, o2.ref, &l2.ref);
  CHECK(o1.bytes == o2.bytes);
  CHECK(l1.bytes == l2.bytes);
  CHECK(std::isinf(l1.at(sq))); // row 0 of head 1 sees no key
}

TEST_CASE("sink: CPU runs reject a missing, short or bad sink", "[sink]") {
  AttentionSpec s = sinkSpec(2, 1, 8, 8, DType::F32);
  CompileOptions opt;
  opt.blockM = opt.blockN = 16;
  auto fwd = test::cachedKernel(s, opt);
  auto bwd = loadOrCompileCpuBackward(s, opt);
  Buf q(DType::F32, {1, 2, 3, 8}), k(DType::F32, {1, 1, 3, 8}),
      v(DType::F32, {1, 1, 3, 8}), o(DType::F32, {1, 2, 3, 8}),
      lse(DType::F32, {1, 2, 3});
  lse.ref.rank = 3;
  expectUserError([&] { fwd->run(q.ref, k.ref, v.ref, o.ref, &lse.ref); },
                  {"declares a sink"});
  std::vector<float> sink{0.0f, std::nanf("")};
  Arguments a;
  a.bindSink(sink.data(), 1);
  expectUserError([&] { fwd->run(q.ref, k.ref, v.ref, o.ref, &lse.ref, a); },
                  {"sink has 1 elements", "heads_q = 2"});
  a.bindSink(sink.data(), 2);
  expectUserError([&] { fwd->run(q.ref, k.ref, v.ref, o.ref, &lse.ref, a); },
                  {"sink[1] = nan"});
  // dq, dk, dv of their own: outputs may not alias the inputs.
  Buf dq(DType::F32, {1, 2, 3, 8}), dk(DType::F32, {1, 1, 3, 8}),
      dv(DType::F32, {1, 1, 3, 8});
  expectUserError(
      [&] {
        return bwd->run(q.ref, k.ref, v.ref, o.ref, lse.ref, o.ref, dq.ref,
                        dk.ref, dv.ref, a);
      },
      {"sink[1] = nan"});
  AttentionSpec plain = s;
  plain.sink = false;
  sink[1] = 1.0f;
  expectUserError(
      [&] {
        test::cachedKernel(plain, opt)
            ->run(q.ref, k.ref, v.ref, o.ref, &lse.ref, a);
      },
      {"declares no sink"});
}
