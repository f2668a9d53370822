//===- BackwardTest.cpp - CPU backward kernels vs the float64 reference ---===//
//
// The backward matrix: variants (dense, causal both alignments, windows,
// softcap with d cap, ALiBi slopes, a relative-position table, a document
// mask, a nonlinear modifier reading a buffer, chunked, prefix-LM) x dtypes
// (fp32, bf16, fp16) x GQA x modes (dense, block-sparse with the forward's
// BlockMask, varlen with empty sequences) x fresh random odd shapes
// (seqlens 0..45 over 16-row tiles, batch 1-2, [B, S, H, D] strides on half
// the cases). Each case runs the compiled forward (O, LSE), then the
// compiled backward on fresh random dO, and compares dQ, dK, dV and every
// buffer and parameter gradient with referenceAttentionBackward (float64,
// itself checked against finite differences in ReferenceBackwardTest).
//
// Tolerance, per gradient tensor g with reference r:
//   |g - r| <= tol * (1 + max |r|),   tol = 1e-4 (fp32), 4e-3 (fp16),
//                                           2.5e-2 (bf16)
// (inputs are rounded to the dtype before the reference sees them; the
// error left is fp32 accumulation plus the rounding of O and of the
// gradients themselves to the dtype). fp16/bf16 buffer and parameter
// gradients are judged as FlashAttention's tests judge low precision, by
// the error an implementation of that precision makes (compareData says
// why): |g - r| <= 2 |r~ - r| + tol * (1 + max |r|), with r~ the float64
// reference whose D reads O rounded to the dtype; fp32 cases check those
// strictly. Every element of dQ, dK and dV is poisoned with NaN before the
// run, so an unwritten element fails; the edge-case test requires dQ rows
// with no allowed key to be exactly 0.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::freshSeed;

namespace {

/// A 4-D tensor [B, H, S, D] (or laid out [B, S, H, D]) or a 3-D packed
/// varlen tensor [total, H, D] with its own storage.
struct Buf {
  std::vector<uint8_t> bytes;
  TensorRef ref;

  static Buf dense(DType dtype, int64_t b, int64_t h, int64_t s, int64_t d,
                   bool bshd) {
    Buf t;
    int64_t n = b * h * s * d;
    t.bytes.assign(std::max<int64_t>(n, 1) * byteSize(dtype), 0);
    t.ref = TensorRef::contiguous(t.bytes.data(), dtype, {b, h, s, d});
    if (bshd)
      t.ref.strides = {s * h * d, d, h * d, 1};
    for (int64_t &x : t.ref.strides)
      x = std::max<int64_t>(x, 1);
    return t;
  }
  static Buf packed(DType dtype, int64_t total, int64_t h, int64_t d) {
    Buf t;
    t.bytes.assign(std::max<int64_t>(total * h * d, 1) * byteSize(dtype), 0);
    t.ref.data = t.bytes.data();
    t.ref.dtype = dtype;
    t.ref.rank = 3;
    t.ref.shape = {total, h, d, 1};
    t.ref.strides = {std::max<int64_t>(h * d, 1), d, 1, 1};
    return t;
  }
  int64_t count() const {
    return static_cast<int64_t>(bytes.size()) / byteSize(ref.dtype);
  }
  void randomize(std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < count(); ++i)
      storeFromFloat(bytes.data(), ref.dtype, i, u(rng));
  }
  void poison() { std::fill(bytes.begin(), bytes.end(), uint8_t{0xFF}); }
  float at4(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return loadAsFloat(bytes.data(), ref.dtype, ref.offset(a, b, c, d));
  }
};

double tolFor(DType d) {
  return d == DType::F32 ? 1e-4 : d == DType::F16 ? 4e-3 : 2.5e-2;
}

/// Compares \p n gradient elements got(i) with want(i); "" when they match.
std::string compare(const char *what, int64_t n, DType dtype,
                    const std::function<float(int64_t)> &got,
                    const std::function<double(int64_t)> &want) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i)
    scale = std::max(scale, std::abs(want(i)));
  double tol = tolFor(dtype) * (1 + scale);
  for (int64_t i = 0; i < n; ++i) {
    float g = got(i);
    double w = want(i);
    bool ok = w == 0.0 && std::isfinite(w) ? (std::abs(g) <= tol)
                                           : std::abs(g - w) <= tol;
    if (!std::isfinite(g) || !ok) {
      std::ostringstream os;
      os << what << "[" << i << "] = " << g << ", expected " << w
         << " (tolerance " << tol << ")";
      return os.str();
    }
  }
  return {};
}

/// Compares the \p n elements of a buffer or parameter gradient got(i)
/// with the float64 reference want(i); "" when they match. fp32: compare's
/// rule. fp16/bf16: the kernel's D = rowsum(dO * O) reads O rounded to the
/// dtype, so each dS'_ij carries the error P_ij (D_i - D~_i) and a row's
/// dS' sums to D_i - D~_i instead of 0, an error these gradients (sums over
/// every row of dS' times a weight such as ALiBi's |q_idx - kv_idx|, up to
/// 44 here) add up while their own value cancels to a small number: no
/// tolerance relative to max |want| both admits it and still catches a
/// wrong gradient. So, as FlashAttention's tests judge
/// low-precision results (at most about twice the error of an
/// implementation of the same precision), \p rounded(i) is the float64
/// reference whose D reads O rounded to the dtype (referenceAttentionBackward's
/// roundOForD), and the test asks
///   |got - want| <= 2 |rounded - want| + tol * (1 + max |want|).
std::string compareData(const std::string &what, int64_t n, DType dtype,
                        const std::function<float(int64_t)> &got,
                        const std::function<double(int64_t)> &want,
                        const std::function<double(int64_t)> &rounded) {
  if (dtype == DType::F32)
    return compare(what.c_str(), n, dtype, got, want);
  double scale = 0;
  for (int64_t i = 0; i < n; ++i)
    scale = std::max(scale, std::abs(want(i)));
  const double base = tolFor(dtype) * (1 + scale);
  for (int64_t i = 0; i < n; ++i) {
    const double g = got(i), w = want(i), r = rounded(i);
    const double tol = 2 * std::abs(r - w) + base;
    if (!std::isfinite(g) || !(std::abs(g - w) <= tol)) {
      std::ostringstream os;
      os << what << "[" << i << "] = " << g << ", expected " << w
         << " (tolerance " << tol << " = 2 * |" << r
         << " (D of the rounded O) - expected| + " << base << ")";
      return os.str();
    }
  }
  return {};
}

/// compareData over every buffer gradient of the reference \p want: the
/// kernel's \p got must hold each, of the same size; \p rounded (the
/// reference with D from the rounded O) for fp16/bf16, else nullptr.
std::string
compareBufferGrads(const std::map<std::string, std::vector<float>> &got,
                   const std::map<std::string, std::vector<double>> &want,
                   const std::map<std::string, std::vector<double>> *rounded,
                   DType dtype) {
  for (const auto &[name, w] : want) {
    auto it = got.find(name);
    if (it == got.end())
      return "no gradient for buffer " + name;
    const std::vector<float> &g = it->second;
    if (g.size() != w.size())
      return "dBuffer size mismatch for " + name;
    const std::vector<double> &r = rounded ? rounded->at(name) : w;
    std::string e = compareData(
        "d" + name, int64_t(w.size()), dtype, [&](int64_t i) { return g[i]; },
        [&](int64_t i) { return w[i]; }, [&](int64_t i) { return r[i]; });
    if (!e.empty())
      return e;
  }
  return {};
}

/// One compiled pair: forward (with LSE) and backward, same tiles.
struct Pair {
  std::string name;
  AttentionSpec spec;
  CompileOptions options;
  std::shared_ptr<const CpuKernel> fwd;
  std::shared_ptr<const CpuBackward> bwd;
  /// Binds fresh buffers / parameters for a call of this size.
  std::function<void(Arguments &, std::map<std::string, std::vector<float>> &,
                     std::vector<int32_t> &, int64_t sq, int64_t sk,
                     std::mt19937 &)>
      bindArgs;
  std::vector<std::string> params; ///< f32 parameters whose grads are checked
};

Pair makePair(std::string name, AttentionSpec spec, CompileOptions options = {},
              std::vector<std::string> params = {}) {
  Pair p;
  p.name = std::move(name);
  if (!options.blockM)
    options.blockM = 16;
  if (!options.blockN)
    options.blockN = 16;
  spec.returnLse = true;
  p.spec = spec;
  p.options = options;
  p.fwd = test::cachedKernel(spec, options);
  p.bwd = compileCpuBackward(spec, options);
  p.params = std::move(params);
  p.bindArgs = [](Arguments &, std::map<std::string, std::vector<float>> &,
                  std::vector<int32_t> &, int64_t, int64_t, std::mt19937 &) {};
  return p;
}

CompileOptions opts(int bm, int bn, bool varlen, bool blockSparse) {
  CompileOptions o;
  o.blockM = bm;
  o.blockN = bn;
  o.varlen = varlen;
  o.blockSparse = blockSparse;
  return o;
}

AttentionSpec spec(int hq, int hkv, int dqk, int dv, DType dt,
                   Causal causal = Causal::None) {
  AttentionSpec s;
  s.headsQ = hq;
  s.headsKV = hkv;
  s.headDimQK = dqk;
  s.headDimV = dv;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = dt;
  s.causal = causal;
  return s;
}

/// Runs one dense (or block-sparse) case; "" when every gradient matches.
std::string runDense(const Pair &p, int64_t batch, int64_t sq, int64_t sk,
                     bool bshd, std::mt19937 &rng, int numThreads = 0,
                     std::vector<std::vector<uint8_t>> *keep = nullptr,
                     int64_t zeroRowsBelow = 0) {
  const AttentionSpec &s = p.spec;
  Arguments args;
  std::map<std::string, std::vector<float>> fbufs;
  std::vector<int32_t> ibuf;
  p.bindArgs(args, fbufs, ibuf, sq, sk, rng);
  Buf q = Buf::dense(s.dtypeQ, batch, s.headsQ, sq, s.headDimQK, bshd);
  Buf k = Buf::dense(s.dtypeK, batch, s.headsKV, sk, s.headDimQK, bshd);
  Buf v = Buf::dense(s.dtypeV, batch, s.headsKV, sk, s.headDimV, bshd);
  Buf o = Buf::dense(s.dtypeO, batch, s.headsQ, sq, s.headDimV, bshd);
  Buf dO = Buf::dense(s.dtypeO, batch, s.headsQ, sq, s.headDimV, !bshd);
  Buf dq = Buf::dense(s.dtypeQ, batch, s.headsQ, sq, s.headDimQK, !bshd);
  Buf dk = Buf::dense(s.dtypeK, batch, s.headsKV, sk, s.headDimQK, bshd);
  Buf dv = Buf::dense(s.dtypeV, batch, s.headsKV, sk, s.headDimV, bshd);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  dO.randomize(rng);
  for (Buf *t : {&dq, &dk, &dv})
    t->poison();
  std::vector<float> lse(std::max<int64_t>(batch * s.headsQ * sq, 1));
  TensorRef lseRef =
      TensorRef::contiguous3(lse.data(), DType::F32, {batch, s.headsQ, sq});
  for (int64_t &x : lseRef.strides)
    x = std::max<int64_t>(x, 1);
  std::optional<BlockMask> bm;
  if (p.options.blockSparse) {
    bm = p.fwd->buildBlockMask(batch, sq, sk, args);
    p.fwd->runBlockSparse(q.ref, k.ref, v.ref, o.ref, &lseRef, *bm, args);
  } else {
    p.fwd->run(q.ref, k.ref, v.ref, o.ref, &lseRef, args);
  }
  DataGradients g =
      bm ? p.bwd->runBlockSparse(q.ref, k.ref, v.ref, o.ref, lseRef, dO.ref,
                                 dq.ref, dk.ref, dv.ref, *bm, args, numThreads)
         : p.bwd->run(q.ref, k.ref, v.ref, o.ref, lseRef, dO.ref, dq.ref,
                      dk.ref, dv.ref, args, numThreads);
  if (keep) {
    for (Buf *t : {&dq, &dk, &dv})
      keep->push_back(t->bytes);
    for (auto &[n, b] : g.dBuffers)
      keep->push_back(std::vector<uint8_t>(
          reinterpret_cast<const uint8_t *>(b.data()),
          reinterpret_cast<const uint8_t *>(b.data() + b.size())));
    return {};
  }
  // Rows with no allowed key: dQ exactly 0 (not merely small).
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h)
      for (int64_t i = 0; i < std::min(zeroRowsBelow, sq); ++i)
        for (int64_t d = 0; d < s.headDimQK; ++d)
          if (dq.at4(b, h, i, d) != 0.0f)
            return "dq of fully masked row " + std::to_string(i) +
                   " is not exactly 0";
  ReferenceGradients r = referenceAttentionBackward(
      s, q.ref, k.ref, v.ref, dO.ref, args, p.params, bm ? &*bm : nullptr);
  // The reference again with D from O rounded to the dtype, for the data
  // gradients of fp16/bf16 (compareData).
  const bool dataLowPrecision =
      s.dtypeO != DType::F32 && (!r.dBuffers.empty() || !r.dParams.empty());
  ReferenceGradients rr =
      dataLowPrecision
          ? referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref, args,
                                       p.params, bm ? &*bm : nullptr, s.dtypeO)
          : ReferenceGradients{};
  auto idx4 = [](const Buf &t, int64_t i, int64_t h, int64_t sl, int64_t d) {
    int64_t dd = i % d, rest = i / d;
    int64_t j = rest % sl;
    rest /= sl;
    return t.at4(rest / h, rest % h, j, dd);
  };
  std::string e = compare(
      "dq", batch * s.headsQ * sq * s.headDimQK, s.dtypeQ,
      [&](int64_t i) { return idx4(dq, i, s.headsQ, sq, s.headDimQK); },
      [&](int64_t i) { return r.dq[i]; });
  if (e.empty())
    e = compare(
        "dk", batch * s.headsKV * sk * s.headDimQK, s.dtypeK,
        [&](int64_t i) { return idx4(dk, i, s.headsKV, sk, s.headDimQK); },
        [&](int64_t i) { return r.dk[i]; });
  if (e.empty())
    e = compare(
        "dv", batch * s.headsKV * sk * s.headDimV, s.dtypeV,
        [&](int64_t i) { return idx4(dv, i, s.headsKV, sk, s.headDimV); },
        [&](int64_t i) { return r.dv[i]; });
  if (e.empty())
    e = compareBufferGrads(g.dBuffers, r.dBuffers,
                           dataLowPrecision ? &rr.dBuffers : nullptr, s.dtypeQ);
  for (auto &[name, want] : r.dParams) {
    if (!e.empty())
      break;
    float got = g.dParams.at(name);
    double round = dataLowPrecision ? rr.dParams.at(name) : want;
    e = compareData(
        "d" + name, 1, s.dtypeQ, [&](int64_t) { return got; },
        [&](int64_t) { return want; }, [&](int64_t) { return round; });
  }
  return e;
}

/// Runs one varlen case with the given sequence lengths.
std::string runVarlen(const Pair &p, const std::vector<int32_t> &lensQ,
                      const std::vector<int32_t> &lensK, std::mt19937 &rng) {
  const AttentionSpec &s = p.spec;
  std::vector<int32_t> cuQ{0}, cuK{0};
  for (size_t i = 0; i < lensQ.size(); ++i) {
    cuQ.push_back(cuQ.back() + lensQ[i]);
    cuK.push_back(cuK.back() + lensK[i]);
  }
  int64_t tq = cuQ.back(), tk = cuK.back();
  int64_t maxQ = *std::max_element(lensQ.begin(), lensQ.end());
  int64_t maxK = *std::max_element(lensK.begin(), lensK.end());
  Arguments args;
  std::map<std::string, std::vector<float>> fbufs;
  std::vector<int32_t> ibuf;
  p.bindArgs(args, fbufs, ibuf, maxQ, maxK, rng);
  Buf q = Buf::packed(s.dtypeQ, tq, s.headsQ, s.headDimQK);
  Buf k = Buf::packed(s.dtypeK, tk, s.headsKV, s.headDimQK);
  Buf v = Buf::packed(s.dtypeV, tk, s.headsKV, s.headDimV);
  Buf o = Buf::packed(s.dtypeO, tq, s.headsQ, s.headDimV);
  Buf dO = Buf::packed(s.dtypeO, tq, s.headsQ, s.headDimV);
  Buf dq = Buf::packed(s.dtypeQ, tq, s.headsQ, s.headDimQK);
  Buf dk = Buf::packed(s.dtypeK, tk, s.headsKV, s.headDimQK);
  Buf dv = Buf::packed(s.dtypeV, tk, s.headsKV, s.headDimV);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  dO.randomize(rng);
  for (Buf *t : {&dq, &dk, &dv})
    t->poison();
  std::vector<float> lse(std::max<int64_t>(s.headsQ * tq, 1));
  TensorRef lseRef =
      TensorRef::contiguous2(lse.data(), DType::F32, {s.headsQ, tq});
  lseRef.strides = {std::max<int64_t>(tq, 1), 1, 1, 1};
  std::optional<BlockMask> bm;
  if (p.options.blockSparse)
    bm = p.fwd->buildVarlenBlockMask(cuQ, cuK, args);
  p.fwd->runVarlen(q.ref, k.ref, v.ref, o.ref, &lseRef, cuQ, cuK, args,
                   bm ? &*bm : nullptr);
  DataGradients g =
      p.bwd->runVarlen(q.ref, k.ref, v.ref, o.ref, lseRef, dO.ref, dq.ref,
                       dk.ref, dv.ref, cuQ, cuK, args, bm ? &*bm : nullptr);
  VarlenReferenceGradients r =
      referenceVarlenAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref, cuQ, cuK,
                                       args, p.params, bm ? &*bm : nullptr);
  // D from O rounded to the dtype, for fp16/bf16 data gradients.
  const bool dataLowPrecision =
      s.dtypeO != DType::F32 && (!r.dBuffers.empty() || !r.dParams.empty());
  VarlenReferenceGradients rr =
      dataLowPrecision
          ? referenceVarlenAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref,
                                             cuQ, cuK, args, p.params,
                                             bm ? &*bm : nullptr, s.dtypeO)
          : VarlenReferenceGradients{};
  auto at3 = [](const Buf &t, int64_t i) {
    return loadAsFloat(t.bytes.data(), t.ref.dtype, i); // contiguous
  };
  std::string e = compare(
      "dq", tq * s.headsQ * s.headDimQK, s.dtypeQ,
      [&](int64_t i) { return at3(dq, i); },
      [&](int64_t i) { return r.dq[i]; });
  if (e.empty())
    e = compare(
        "dk", tk * s.headsKV * s.headDimQK, s.dtypeK,
        [&](int64_t i) { return at3(dk, i); },
        [&](int64_t i) { return r.dk[i]; });
  if (e.empty())
    e = compare(
        "dv", tk * s.headsKV * s.headDimV, s.dtypeV,
        [&](int64_t i) { return at3(dv, i); },
        [&](int64_t i) { return r.dv[i]; });
  if (e.empty())
    e = compareBufferGrads(g.dBuffers, r.dBuffers,
                           dataLowPrecision ? &rr.dBuffers : nullptr, s.dtypeQ);
  return e;
}

/// Binds an f32 buffer `name` of \p n random elements in [lo, hi].
void bindF32(Arguments &a, std::map<std::string, std::vector<float>> &store,
             const std::string &name, int64_t n, float lo, float hi,
             std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> &b = store[name];
  b.resize(std::max<int64_t>(n, 1));
  for (float &x : b)
    x = u(rng);
  a.bind(name, b.data(), n);
}

std::vector<Pair> densePairs() {
  std::vector<Pair> ps;
  ps.push_back(makePair("dense, GQA 2:1, fp32", spec(2, 1, 8, 8, DType::F32)));
  ps.push_back(makePair("causal top-left, bf16, dv != dqk",
                        spec(3, 3, 16, 8, DType::BF16, Causal::TopLeft)));
  ps.push_back(makePair("causal bottom-right, GQA 4:2, fp16",
                        spec(4, 2, 8, 8, DType::F16, Causal::BottomRight),
                        opts(32, 16, false, false)));
  {
    AttentionSpec s = spec(2, 1, 8, 4, DType::F32);
    s.variant.mask(sliding_window(3, 2, Alignment::BottomRight));
    s.variant.scoreMod(softcap(param<float>("cap")));
    s.scale = 1.5f; // scores of a few units: tanh off its linear part
    Pair p = makePair("window (3, 2) bottom-right + softcap(cap), d cap", s, {},
                      {"cap"});
    p.bindArgs = [](Arguments &a, auto &, auto &, int64_t, int64_t,
                    std::mt19937 &rng) {
      a.set("cap", Scalar::f32(
                       std::uniform_real_distribution<float>(0.8f, 2.0f)(rng)));
    };
    ps.push_back(std::move(p));
  }
  {
    AttentionSpec s = spec(4, 2, 8, 8, DType::BF16, Causal::BottomRight);
    s.variant.scoreMod(alibi(buffer<float>("slope")));
    Pair p = makePair("ALiBi slopes, GQA 4:2, causal bottom-right, bf16", s);
    p.bindArgs = [](Arguments &a, auto &st, auto &, int64_t, int64_t,
                    std::mt19937 &rng) {
      bindF32(a, st, "slope", 4, 0.05f, 0.5f, rng);
    };
    ps.push_back(std::move(p));
  }
  {
    AttentionSpec s = spec(1, 1, 4, 4, DType::F32, Causal::TopLeft);
    s.variant.scoreMod(relative_bias(buffer<float>("rel"), 5));
    Pair p = makePair("relative-position table, fp32", s);
    p.bindArgs = [](Arguments &a, auto &st, auto &, int64_t, int64_t,
                    std::mt19937 &rng) {
      bindF32(a, st, "rel", 11, -1.0f, 1.0f, rng);
    };
    ps.push_back(std::move(p));
  }
  {
    AttentionSpec s = spec(2, 2, 8, 8, DType::F16);
    Buffer doc = buffer<int32_t>("doc");
    s.variant.mask(doc[q_idx] == doc[kv_idx]);
    Pair p = makePair("document mask (int32 buffer), fp16", s);
    p.bindArgs = [](Arguments &a, auto &, std::vector<int32_t> &ib, int64_t sq,
                    int64_t sk, std::mt19937 &rng) {
      ib.assign(std::max<int64_t>({sq, sk, 1}), 0);
      int32_t d = 0;
      for (int32_t &x : ib) {
        if (rng() % 9 == 0)
          ++d;
        x = d;
      }
      a.bind("doc", ib.data(), int64_t(ib.size()));
    };
    ps.push_back(std::move(p));
  }
  {
    // Row 3 fully masked; key 2 scores -inf; a nonlinear modifier reading a
    // per-key buffer.
    AttentionSpec s = spec(2, 1, 4, 4, DType::F32);
    s.variant.mask(q_idx != 3);
    Buffer w = buffer<float>("w");
    s.variant.scoreMod(
        select(kv_idx == 2, -std::numeric_limits<float>::infinity(),
               score * sigmoid(score) + exp2(w[kv_idx] * 0.5f) * tanh(score)));
    Pair p = makePair("masked row, -inf key, nonlinear modifier, buffer", s);
    p.bindArgs = [](Arguments &a, auto &st, auto &, int64_t, int64_t sk,
                    std::mt19937 &rng) {
      bindF32(a, st, "w", sk, -1.0f, 1.0f, rng);
    };
    ps.push_back(std::move(p));
  }
  {
    AttentionSpec s = spec(2, 2, 8, 8, DType::BF16);
    s.variant.mask(chunked(7) && causal(Alignment::TopLeft));
    ps.push_back(makePair("chunked(7) causal, bf16", s));
  }
  {
    AttentionSpec s = spec(3, 1, 4, 8, DType::F32);
    s.variant.mask(prefix_lm(5, Alignment::BottomRight));
    ps.push_back(makePair("prefix-LM(5) bottom-right, GQA 3:1", s));
  }
  // Block-sparse: the forward's generated BlockMask, transposed on the host
  // for the dK/dV kernel.
  ps.push_back(makePair("block-sparse causal bottom-right, GQA 2:1, bf16",
                        spec(2, 1, 8, 8, DType::BF16, Causal::BottomRight),
                        opts(16, 16, false, true)));
  {
    AttentionSpec s = spec(2, 2, 8, 4, DType::F32);
    s.variant.mask(sliding_window(9, 0, Alignment::TopLeft));
    s.variant.scoreMod(alibi(buffer<float>("slope")));
    Pair p = makePair("block-sparse window (9, 0) + ALiBi, fp32", s,
                      opts(32, 16, false, true));
    p.bindArgs = [](Arguments &a, auto &st, auto &, int64_t, int64_t,
                    std::mt19937 &rng) {
      bindF32(a, st, "slope", 2, 0.05f, 0.5f, rng);
    };
    ps.push_back(std::move(p));
  }
  return ps;
}

std::vector<Pair> varlenPairs() {
  std::vector<Pair> ps;
  ps.push_back(makePair("varlen causal bottom-right, GQA 2:1, fp32",
                        spec(2, 1, 8, 8, DType::F32, Causal::BottomRight),
                        opts(16, 16, true, false)));
  {
    AttentionSpec s = spec(2, 2, 4, 8, DType::BF16, Causal::TopLeft);
    s.variant.scoreMod(alibi(buffer<float>("slope")));
    Pair p = makePair("varlen ALiBi causal top-left, bf16", s,
                      opts(16, 32, true, false));
    p.bindArgs = [](Arguments &a, auto &st, auto &, int64_t, int64_t,
                    std::mt19937 &rng) {
      bindF32(a, st, "slope", 2, 0.05f, 0.5f, rng);
    };
    ps.push_back(std::move(p));
  }
  ps.push_back(makePair("varlen block-sparse causal top-left, fp16",
                        spec(1, 1, 8, 8, DType::F16, Causal::TopLeft),
                        opts(16, 16, true, true)));
  return ps;
}

int64_t pickLen(std::mt19937 &rng) {
  // Edges often (0, 1, one tile, one tile + 1), else uniform in [0, 45].
  static const int64_t edges[] = {0, 1, 15, 16, 17, 31, 33};
  if (rng() % 4 == 0)
    return edges[rng() % 7];
  return static_cast<int64_t>(rng() % 46);
}

} // namespace

TEST_CASE("backward matrix: CPU kernels vs the float64 reference",
          "[backward][cpu]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  auto t0 = std::chrono::steady_clock::now();
  int cases = 0;
  for (const Pair &p : densePairs()) {
    for (int i = 0; i < 70; ++i) {
      int64_t batch = 1 + rng() % 2, sq = pickLen(rng), sk = pickLen(rng);
      bool bshd = rng() % 2;
      INFO(p.name << ": batch " << batch << ", seqlen_q " << sq << ", seqlen_k "
                  << sk << (bshd ? ", [B, S, H, D]" : ""));
      std::string e = runDense(p, batch, sq, sk, bshd, rng);
      REQUIRE(e == "");
      ++cases;
    }
  }
  for (const Pair &p : varlenPairs()) {
    for (int i = 0; i < 60; ++i) {
      int n = 1 + rng() % 4;
      std::vector<int32_t> lq, lk;
      for (int j = 0; j < n; ++j) {
        lq.push_back(static_cast<int32_t>(pickLen(rng)));
        lk.push_back(static_cast<int32_t>(pickLen(rng)));
      }
      if (i % 5 == 0) { // an empty sequence in the middle
        lq.insert(lq.begin(), 0);
        lk.insert(lk.begin(), 0);
      }
      INFO(p.name << ": seqlens_q " << test::toText(lq) << ", seqlens_k "
                  << test::toText(lk));
      std::string e = runVarlen(p, lq, lk, rng);
      REQUIRE(e == "");
      ++cases;
    }
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  WARN("backward matrix: " << cases << " cases in " << secs << " s");
  CHECK(cases >= 1000);
}

TEST_CASE("backward: deterministic across runs and thread counts",
          "[backward][cpu]") {
  AttentionSpec s = spec(4, 2, 8, 8, DType::F32, Causal::BottomRight);
  s.variant.scoreMod(alibi(buffer<float>("slope")));
  Pair p = makePair("alibi", s);
  p.bindArgs = [](Arguments &a, auto &st, auto &, int64_t, int64_t,
                  std::mt19937 &rng) {
    bindF32(a, st, "slope", 4, 0.05f, 0.5f, rng);
  };
  std::vector<std::vector<uint8_t>> runs[3];
  for (int r = 0; r < 3; ++r) {
    std::mt19937 rng(1234); // the same inputs each time
    runDense(p, 2, 77, 93, false, rng, r == 0 ? 1 : 0, &runs[r]);
  }
  REQUIRE(runs[0].size() == 4);
  CHECK(runs[0] == runs[1]);
  CHECK(runs[1] == runs[2]);
}

TEST_CASE("backward: edge cases give exact zeros and no NaN",
          "[backward][cpu]") {
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  SECTION("fully masked rows (bottom-right causal, seqlen_q > seqlen_k)") {
    Pair p = makePair("br", spec(2, 1, 4, 4, DType::F32, Causal::BottomRight));
    // Rows 0..6 of 10 see no key.
    CHECK(runDense(p, 1, 10, 3, false, rng, 0, nullptr, 7) == "");
    CHECK(runDense(p, 2, 40, 17, true, rng, 0, nullptr, 23) == "");
  }
  SECTION("seqlen 0 and 1, both alignments") {
    for (Causal c : {Causal::TopLeft, Causal::BottomRight}) {
      Pair p = makePair("c", spec(1, 1, 4, 4, DType::F32, c));
      for (auto [sq, sk] : {std::pair<int64_t, int64_t>{0, 0},
                            {0, 5},
                            {5, 0},
                            {1, 1},
                            {1, 20},
                            {20, 1}})
        CHECK(runDense(p, 2, sq, sk, false, rng) == "");
    }
  }
  SECTION("windows at the sequence edges") {
    AttentionSpec s = spec(1, 1, 4, 4, DType::F32);
    s.variant.mask(sliding_window(0, 0, Alignment::TopLeft));
    Pair p = makePair("diag", s);
    CHECK(runDense(p, 1, 33, 33, false, rng) == "");
    CHECK(runDense(p, 1, 33, 20, false, rng) == ""); // rows past the keys
  }
  SECTION("softcap's 1 - tanh^2 factor (saturated scores)") {
    AttentionSpec s = spec(1, 1, 8, 8, DType::F32);
    s.variant.scoreMod(softcap(0.5f));
    s.scale = 4.0f; // |s| up to ~32: tanh saturates, the factor ~ 0
    Pair p = makePair("softcap", s);
    CHECK(runDense(p, 1, 20, 21, false, rng) == "");
  }
}

TEST_CASE("backward: user errors", "[backward][cpu]") {
  Pair p = makePair("e", spec(2, 1, 4, 4, DType::F32));
  std::mt19937 rng(1);
  Buf q = Buf::dense(DType::F32, 1, 2, 5, 4, false);
  Buf k = Buf::dense(DType::F32, 1, 1, 6, 4, false);
  Buf v = Buf::dense(DType::F32, 1, 1, 6, 4, false);
  Buf o = Buf::dense(DType::F32, 1, 2, 5, 4, false);
  Buf dO = Buf::dense(DType::BF16, 1, 2, 5, 4, false);
  Buf dq = Buf::dense(DType::F32, 1, 2, 4, 4, false);
  std::vector<float> lse(10);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 2, 5});
  expectUserError(
      [&] {
        return p.bwd->run(q.ref, k.ref, v.ref, o.ref, l, dO.ref, q.ref, k.ref,
                          v.ref);
      },
      {"dO.dtype"});
  expectUserError(
      [&] {
        return p.bwd->run(q.ref, k.ref, v.ref, o.ref, l, o.ref, dq.ref, k.ref,
                          v.ref);
      },
      {"dq.shape[2] = 4, expected 5"});
  CompileOptions counting;
  counting.countTiles = true;
  expectUserError([&] { return compileCpuBackward(p.spec, counting); },
                  {"countTiles"});
  AttentionSpec bad = spec(1, 1, 4, 4, DType::F32);
  bad.variant.scoreMod(cast<float>(cast<int32_t>(score)));
  expectUserError([&] { return compileCpuBackward(bad); });
}

TEST_CASE("backward: CPU time at N = 4096", "[.][bench]") {
  AttentionSpec s = spec(1, 1, 64, 64, DType::F32);
  s.returnLse = true;
  CompileOptions o;
  auto fwd = compileCpu(s, o);
  auto bwd = compileCpuBackward(s, o);
  const int64_t n = 4096;
  std::mt19937 rng(3);
  Buf q = Buf::dense(DType::F32, 1, 1, n, 64, false),
      k = Buf::dense(DType::F32, 1, 1, n, 64, false),
      v = Buf::dense(DType::F32, 1, 1, n, 64, false),
      out = Buf::dense(DType::F32, 1, 1, n, 64, false),
      dO = Buf::dense(DType::F32, 1, 1, n, 64, false),
      dq = Buf::dense(DType::F32, 1, 1, n, 64, false),
      dk = Buf::dense(DType::F32, 1, 1, n, 64, false),
      dv = Buf::dense(DType::F32, 1, 1, n, 64, false);
  for (Buf *t : {&q, &k, &v, &dO})
    t->randomize(rng);
  std::vector<float> lse(n);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, n});
  auto time = [](auto &&f) {
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - t0)
                                .count());
    }
    return best;
  };
  double tf = time([&] { fwd->run(q.ref, k.ref, v.ref, out.ref, &l); });
  double tb = time([&] {
    bwd->run(q.ref, k.ref, v.ref, out.ref, l, dO.ref, dq.ref, dk.ref, dv.ref);
  });
  WARN("N = 4096, D = 64, 1 head, fp32: forward " << tf << " s, backward " << tb
                                                  << " s, ratio " << tb / tf);
}
