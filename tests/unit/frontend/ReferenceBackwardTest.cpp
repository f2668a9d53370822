//===- ReferenceBackwardTest.cpp - float64 backward vs finite differences -===//
//
// The reference backward against central finite differences of the float64
// forward reference, for the loss L = sum(dO * O) with fresh random dO: every
// element of dQ, dK, dV, every element of every f32 buffer the modifier
// reads and every parameter asked for, on odd small shapes (GQA, both causal
// alignments with seqlen_q != seqlen_k, windows, fully masked rows, seqlen 0
// and 1, -inf scores, softcap, ALiBi, a learned bias, a relative-position
// table, a block mask, strided [B, S, H, D] tensors, varlen with empty
// sequences). roundOForD (D from O rounded to bf16) against the change it
// must make: dS' moves by P_ij (D_i - D~_i), dV not at all.
//
// Finite difference: D(h) = (L(x + h) - L(x - h)) / 2h, extrapolated
// R = (4 D(h/2) - D(h)) / 3 (error O(h^4)), h = 2^-9; every input sits on a
// 2^-12 grid in [-2, 2], so x +- h and x +- h/2 are exact in f32 (the
// tensors are fp32). Tolerance |g - R| <= 1e-6 (1 + |g|). An element whose
// four perturbed losses all equal L exactly (it reaches no allowed key) must
// have a gradient of exactly 0.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"

#include "ReferenceSupport.h"
#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>

using namespace flashjit;
using flashjit::test::expectUserError;
using flashjit::test::expectUserErrorAt;
using flashjit::test::freshSeed;
using flashjit::test::HostTensor;
using flashjit::test::uniformInt;

namespace {

constexpr double kH = 1.0 / 512.0;

float gridValue(std::mt19937_64 &rng) {
  return static_cast<float>(uniformInt(rng, -8192, 8192)) / 4096.0f;
}

/// The rank-3 view [d1, d2, d3] of a HostTensor of shape [1, d1, d2, d3]
/// (the varlen layout [total, heads, head_dim]).
TensorRef as3(const HostTensor &t) {
  TensorRef r = t.ref;
  r.rank = 3;
  r.shape = {t.ref.shape[1], t.ref.shape[2], t.ref.shape[3], 1};
  r.strides = {t.ref.strides[1], t.ref.strides[2], t.ref.strides[3], 1};
  return r;
}

/// One gradient check: \p grad against the finite difference of \p loss
/// along the variable that \p set moves (set(x) writes x, get() reads it).
struct FdStats {
  int checked = 0, exactZero = 0;
};
void checkFd(const std::function<double()> &loss, double base,
             const std::function<float()> &get,
             const std::function<void(float)> &set, double grad,
             const std::string &what, FdStats &stats) {
  const float x = get();
  double l[4];
  const double steps[4] = {-kH, -kH / 2, kH / 2, kH};
  for (int i = 0; i < 4; ++i) {
    set(static_cast<float>(x + steps[i]));
    l[i] = loss();
  }
  set(x);
  INFO(what << ": analytic " << grad);
  REQUIRE(std::isfinite(grad));
  ++stats.checked;
  if (l[0] == base && l[1] == base && l[2] == base && l[3] == base) {
    ++stats.exactZero;
    CHECK(grad == 0.0); // exactly zero, never a rounding residue
    return;
  }
  const double d1 = (l[3] - l[0]) / (2 * kH), d2 = (l[2] - l[1]) / kH;
  const double r = (4 * d2 - d1) / 3;
  INFO("finite difference " << r);
  CHECK(std::fabs(grad - r) <= 1e-6 * (1 + std::fabs(grad)));
}

/// A dense (or block-sparse) problem with its data.
struct DenseCase {
  std::string name;
  AttentionSpec spec;
  int64_t batch = 1, seqlenQ = 1, seqlenK = 1;
  bool bshd = false;
  std::map<std::string, std::vector<float>> buffers; // sizes; filled here
  std::vector<std::string> params;                   // f32, asked for
  std::function<BlockMask(const AttentionSpec &)> blockMask;
};

/// Runs one case on fresh random data and checks every gradient.
FdStats checkDense(DenseCase c, std::mt19937_64 &rng) {
  INFO("case " << c.name);
  const AttentionSpec &s = c.spec;
  HostTensor q(DType::F32, {c.batch, s.headsQ, c.seqlenQ, s.headDimQK}, c.bshd,
               c.bshd ? 1 : 0),
      k(DType::F32, {c.batch, s.headsKV, c.seqlenK, s.headDimQK}, c.bshd),
      v(DType::F32, {c.batch, s.headsKV, c.seqlenK, s.headDimV}, c.bshd),
      dO(DType::F32, {c.batch, s.headsQ, c.seqlenQ, s.headDimV}, c.bshd, 2);
  for (HostTensor *t : {&q, &k, &v, &dO})
    t->fill([&](int64_t, int64_t, int64_t, int64_t) { return gridValue(rng); });
  Arguments args;
  for (auto &[name, data] : c.buffers) {
    for (float &x : data)
      x = gridValue(rng);
    args.bind(name, data.data(), static_cast<int64_t>(data.size()));
  }
  for (const std::string &p : c.params)
    args.set(p, Scalar::f32(2.0f + std::fabs(gridValue(rng))));
  std::unique_ptr<BlockMask> bm;
  if (c.blockMask)
    bm = std::make_unique<BlockMask>(c.blockMask(s));

  ReferenceGradients g = referenceAttentionBackward(
      s, q.ref, k.ref, v.ref, dO.ref, args, c.params, bm.get());
  auto loss = [&] {
    ReferenceOutput o =
        bm ? referenceAttention(s, q.ref, k.ref, v.ref, args, *bm)
           : referenceAttention(s, q.ref, k.ref, v.ref, args);
    double l = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < s.headsQ; ++h)
        for (int64_t i = 0; i < c.seqlenQ; ++i)
          for (int64_t d = 0; d < s.headDimV; ++d)
            l += dO.get(b, h, i, d) * o.oAt(b, h, i, d);
    return l;
  };
  const double base = loss();
  REQUIRE(std::isfinite(base));
  FdStats st;
  auto tensor =
      [&](HostTensor &t, const char *name,
          const std::function<double &(int64_t, int64_t, int64_t, int64_t)>
              &grad) {
        const auto &sh = t.ref.shape;
        for (int64_t a = 0; a < sh[0]; ++a)
          for (int64_t b = 0; b < sh[1]; ++b)
            for (int64_t i = 0; i < sh[2]; ++i)
              for (int64_t d = 0; d < sh[3]; ++d)
                checkFd(
                    loss, base,
                    [&] { return static_cast<float>(t.get(a, b, i, d)); },
                    [&](float x) { t.set(a, b, i, d, x); }, grad(a, b, i, d),
                    name + ("[" + std::to_string(a) + "," + std::to_string(b) +
                            "," + std::to_string(i) + "," + std::to_string(d) +
                            "]"),
                    st);
      };
  tensor(q, "dQ", [&](auto a, auto b, auto i, auto d) -> double & {
    return g.dqAt(a, b, i, d);
  });
  tensor(k, "dK", [&](auto a, auto b, auto i, auto d) -> double & {
    return g.dkAt(a, b, i, d);
  });
  tensor(v, "dV", [&](auto a, auto b, auto i, auto d) -> double & {
    return g.dvAt(a, b, i, d);
  });
  for (auto &[name, data] : c.buffers) {
    REQUIRE(g.dBuffers.at(name).size() == data.size());
    for (size_t e = 0; e < data.size(); ++e)
      checkFd(
          loss, base, [&] { return data[e]; }, [&](float x) { data[e] = x; },
          g.dBuffers.at(name)[e], "d" + name + "[" + std::to_string(e) + "]",
          st);
  }
  for (const std::string &p : c.params)
    checkFd(
        loss, base, [&] { return args.params[p].floatValue; },
        [&](float x) { args.params[p].floatValue = x; }, g.dParams.at(p),
        "d" + p, st);
  return st;
}

AttentionSpec makeSpec(int hq, int hkv, int dqk, int dv,
                       Causal causal = Causal::None) {
  AttentionSpec s;
  s.headsQ = hq;
  s.headsKV = hkv;
  s.headDimQK = dqk;
  s.headDimV = dv;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = DType::F32;
  s.causal = causal;
  return s;
}

std::vector<DenseCase> denseCases() {
  std::vector<DenseCase> cs;
  auto add = [&](std::string name, AttentionSpec spec, int64_t b, int64_t sq,
                 int64_t sk) -> DenseCase & {
    DenseCase c;
    c.name = std::move(name);
    c.spec = std::move(spec);
    c.batch = b;
    c.seqlenQ = sq;
    c.seqlenK = sk;
    cs.push_back(std::move(c));
    return cs.back();
  };
  add("plain", makeSpec(1, 1, 3, 2), 1, 3, 4);
  add("causal top-left, GQA, seqlen_q > seqlen_k",
      makeSpec(4, 2, 3, 2, Causal::TopLeft), 2, 5, 3);
  // Rows 0 and 1 see no key (i + 3 - 5 < 0): fully masked rows.
  add("causal bottom-right, fully masked rows, [B, S, H, D] strided",
      makeSpec(2, 1, 2, 3, Causal::BottomRight), 1, 5, 3)
      .bshd = true;
  add("causal bottom-right, seqlen_k > seqlen_q",
      makeSpec(1, 1, 3, 3, Causal::BottomRight), 2, 3, 6);
  {
    AttentionSpec s = makeSpec(2, 1, 2, 2);
    s.variant.mask(sliding_window(1, 1, Alignment::BottomRight));
    add("sliding window (1, 1) bottom-right", s, 1, 4, 7);
  }
  {
    AttentionSpec s = makeSpec(2, 2, 3, 2);
    s.variant.scoreMod(softcap(param<float>("cap")));
    s.scale = 2.0f; // scores of a few units: tanh well off its linear part
    add("softcap(param cap), d cap", s, 1, 4, 5).params = {"cap"};
  }
  {
    AttentionSpec s = makeSpec(4, 2, 3, 2, Causal::BottomRight);
    s.variant.scoreMod(alibi(buffer<float>("slope")));
    add("ALiBi slopes, GQA, causal bottom-right", s, 2, 4, 6).buffers["slope"] =
        std::vector<float>(4);
  }
  {
    AttentionSpec s = makeSpec(2, 1, 2, 3);
    s.variant.scoreMod(
        score +
        buffer<float>("bias")[(head * seqlen_q + q_idx) * seqlen_k + kv_idx]);
    add("learned bias [heads, seqlen_q, seqlen_k]", s, 1, 3, 4)
        .buffers["bias"] = std::vector<float>(2 * 3 * 4);
  }
  {
    AttentionSpec s = makeSpec(1, 1, 3, 2, Causal::TopLeft);
    s.variant.scoreMod(relative_bias(buffer<float>("rel"), 2));
    add("relative-position table", s, 1, 6, 6).buffers["rel"] =
        std::vector<float>(5);
  }
  {
    // Row 1 fully masked; key 2 scores -inf (no weight); a nonlinear
    // modifier reading a per-key buffer.
    AttentionSpec s = makeSpec(2, 1, 2, 2);
    s.variant.mask(q_idx != 1);
    Buffer w = buffer<float>("w");
    s.variant.scoreMod(
        select(kv_idx == 2, -std::numeric_limits<float>::infinity(),
               score * sigmoid(score) + exp2(w[kv_idx] * 0.5f) * tanh(score)));
    add("masked row, -inf key, nonlinear modifier with a buffer", s, 1, 3, 4)
        .buffers["w"] = std::vector<float>(4);
  }
  add("seqlen_q = 0", makeSpec(2, 1, 2, 2), 1, 0, 3);
  add("seqlen_k = 0", makeSpec(2, 1, 2, 2), 1, 3, 0);
  add("seqlen 1", makeSpec(1, 1, 2, 2, Causal::BottomRight), 2, 1, 1);
  {
    // A causal spec visited through the tiles of a window's block mask:
    // partial tiles apply the causal mask, full tiles admit every key.
    AttentionSpec s = makeSpec(1, 1, 2, 2, Causal::TopLeft);
    DenseCase &c = add("block mask", s, 1, 5, 6);
    c.blockMask = [](const AttentionSpec &spec) {
      AttentionSpec w = spec;
      w.causal = Causal::None;
      w.variant.mask(sliding_window(2, 0, Alignment::TopLeft));
      return referenceBlockMask(w, 2, 2, 1, 5, 6);
    };
  }
  return cs;
}

} // namespace

TEST_CASE("reference backward: finite differences of the float64 forward",
          "[reference][backward]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  int checked = 0, zero = 0;
  for (const DenseCase &c : denseCases()) {
    FdStats st = checkDense(c, rng);
    checked += st.checked;
    zero += st.exactZero;
  }
  WARN("reference backward: " << checked << " gradient elements checked, "
                              << zero << " of them exactly zero");
  CHECK(checked > 500);
  CHECK(zero > 0);
  CHECK(zero < checked / 3);
}

TEST_CASE("reference backward: empty structures give exact zeros",
          "[reference][backward]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // Bottom-right causal, seqlen_q 5 > seqlen_k 3: rows 0 and 1 see nothing.
  AttentionSpec s = makeSpec(1, 1, 2, 2, Causal::BottomRight);
  HostTensor q(DType::F32, {1, 1, 5, 2}), k(DType::F32, {1, 1, 3, 2}),
      v(DType::F32, {1, 1, 3, 2}), dO(DType::F32, {1, 1, 5, 2});
  for (HostTensor *t : {&q, &k, &v, &dO})
    t->fill([&](int64_t, int64_t, int64_t, int64_t) { return gridValue(rng); });
  ReferenceGradients g =
      referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref);
  for (int64_t i : {0, 1})
    for (int64_t d = 0; d < 2; ++d)
      CHECK(g.dqAt(0, 0, i, d) == 0.0);
  // Row 2 sees one key (P = 1, so dS' = dP - D = 0); rows 3 and 4 see more.
  for (int64_t i = 3; i < 5; ++i)
    CHECK((g.dqAt(0, 0, i, 0) != 0.0 || g.dqAt(0, 0, i, 1) != 0.0));
  // Even NaN in dO of a fully masked row never reaches a gradient.
  dO.set(0, 0, 0, 0, std::numeric_limits<float>::quiet_NaN());
  ReferenceGradients g2 =
      referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref);
  for (double x : g2.dq)
    CHECK(std::isfinite(x));
  CHECK(g2.dk == g.dk);
  CHECK(g2.dv == g.dv);
}

TEST_CASE("reference backward: GQA sums dK and dV over the query heads",
          "[reference][backward]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // The GQA problem against the same problem with each K/V head repeated
  // for its query heads (plain multi-head attention, an independent path).
  AttentionSpec gqa = makeSpec(6, 2, 3, 2, Causal::BottomRight);
  gqa.variant.scoreMod(alibi(buffer<float>("slope")));
  AttentionSpec mha = gqa;
  mha.headsKV = 6;
  std::vector<float> slopes(6);
  for (float &x : slopes)
    x = gridValue(rng);
  Arguments args;
  args.bind("slope", slopes.data(), 6);
  HostTensor q(DType::F32, {2, 6, 4, 3}), k(DType::F32, {2, 2, 5, 3}),
      v(DType::F32, {2, 2, 5, 2}), dO(DType::F32, {2, 6, 4, 2}),
      k6(DType::F32, {2, 6, 5, 3}), v6(DType::F32, {2, 6, 5, 2});
  for (HostTensor *t : {&q, &k, &v, &dO})
    t->fill([&](int64_t, int64_t, int64_t, int64_t) { return gridValue(rng); });
  k6.fill([&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return static_cast<float>(k.get(b, h / 3, j, d));
  });
  v6.fill([&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return static_cast<float>(v.get(b, h / 3, j, d));
  });
  ReferenceGradients g =
      referenceAttentionBackward(gqa, q.ref, k.ref, v.ref, dO.ref, args);
  ReferenceGradients m =
      referenceAttentionBackward(mha, q.ref, k6.ref, v6.ref, dO.ref, args);
  CHECK(g.dq == m.dq);
  CHECK(g.dBuffers.at("slope") == m.dBuffers.at("slope"));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hk = 0; hk < 2; ++hk)
      for (int64_t j = 0; j < 5; ++j) {
        for (int64_t d = 0; d < 3; ++d) {
          double sum = 0;
          for (int64_t h = 3 * hk; h < 3 * hk + 3; ++h)
            sum += m.dkAt(b, h, j, d);
          CHECK(std::fabs(g.dkAt(b, hk, j, d) - sum) <= 1e-12);
        }
        for (int64_t d = 0; d < 2; ++d) {
          double sum = 0;
          for (int64_t h = 3 * hk; h < 3 * hk + 3; ++h)
            sum += m.dvAt(b, h, j, d);
          CHECK(std::fabs(g.dvAt(b, hk, j, d) - sum) <= 1e-12);
        }
      }
}

TEST_CASE("reference backward: varlen with empty sequences matches finite "
          "differences",
          "[reference][backward]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  // Sequences (seqlen_q, seqlen_k): (3, 2) with row 0 empty under
  // bottom-right causality, (0, 0), (2, 4), (1, 3), (1, 0).
  const std::vector<int32_t> cuQ = {0, 3, 3, 5, 6, 7}, cuK = {0, 2, 2, 6, 9, 9};
  AttentionSpec s = makeSpec(2, 1, 2, 3, Causal::BottomRight);
  s.variant.scoreMod(alibi(buffer<float>("slope")));
  std::vector<float> slopes = {gridValue(rng), gridValue(rng)};
  Arguments args;
  args.bind("slope", slopes.data(), 2);
  HostTensor q(DType::F32, {1, 7, 2, 2}), k(DType::F32, {1, 9, 1, 2}),
      v(DType::F32, {1, 9, 1, 3}), dO(DType::F32, {1, 7, 2, 3});
  for (HostTensor *t : {&q, &k, &v, &dO})
    t->fill([&](int64_t, int64_t, int64_t, int64_t) { return gridValue(rng); });
  VarlenReferenceGradients g = referenceVarlenAttentionBackward(
      s, as3(q), as3(k), as3(v), as3(dO), cuQ, cuK, args);
  auto loss = [&] {
    VarlenReferenceOutput o =
        referenceVarlenAttention(s, as3(q), as3(k), as3(v), cuQ, cuK, args);
    double l = 0;
    for (int64_t t = 0; t < 7; ++t)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 3; ++d)
          l += dO.get(0, t, h, d) * o.oAt(t, h, d);
    return l;
  };
  const double base = loss();
  FdStats st;
  auto tensor =
      [&](HostTensor &t, const char *name,
          const std::function<double(int64_t, int64_t, int64_t)> &grad) {
        const auto &sh = t.ref.shape;
        for (int64_t a = 0; a < sh[1]; ++a)
          for (int64_t h = 0; h < sh[2]; ++h)
            for (int64_t d = 0; d < sh[3]; ++d)
              checkFd(
                  loss, base,
                  [&] { return static_cast<float>(t.get(0, a, h, d)); },
                  [&](float x) { t.set(0, a, h, d, x); }, grad(a, h, d),
                  name + ("[" + std::to_string(a) + "," + std::to_string(h) +
                          "," + std::to_string(d) + "]"),
                  st);
      };
  tensor(q, "dQ", [&](auto t, auto h, auto d) { return g.dqAt(t, h, d); });
  tensor(k, "dK", [&](auto t, auto h, auto d) { return g.dkAt(t, h, d); });
  tensor(v, "dV", [&](auto t, auto h, auto d) { return g.dvAt(t, h, d); });
  for (size_t e = 0; e < slopes.size(); ++e)
    checkFd(
        loss, base, [&] { return slopes[e]; }, [&](float x) { slopes[e] = x; },
        g.dBuffers.at("slope")[e], "dslope[" + std::to_string(e) + "]", st);
  // Query row 0 of sequence 0 sees no key and sequence 4 has no keys at
  // all: exact zeros.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 2; ++d) {
      CHECK(g.dqAt(0, h, d) == 0.0);
      CHECK(g.dqAt(6, h, d) == 0.0);
    }
  CHECK(st.exactZero > 0);
  CHECK(st.checked == 7 * 2 * 2 + 9 * 2 + 9 * 3 + 2);
}

TEST_CASE("reference backward: roundOForD moves D by the rounding of O only",
          "[reference][backward]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed << " (FLASHJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  // ALiBi, causal bottom-right (row 0 sees no key), seqlen_q 6, seqlen_k 5.
  // With D~_i = dO_i . round_bf16(O_i) and delta_i = D_i - D~_i, every dS'_ij
  // moves by P_ij delta_i, so (d s'/d score = 1, d s'/d slope = -|i - j|):
  //   dQ~_i - dQ_i = scale delta_i sum_j P_ij k_j,
  //   dslope~[h] - dslope[h] = -sum_i delta_i sum_j P_ij |i - j|,
  // with O, LSE and so P from the forward reference and the rounding done
  // here; dV reads no D and must not move.
  AttentionSpec s = makeSpec(2, 1, 3, 4, Causal::BottomRight);
  s.variant.scoreMod(alibi(buffer<float>("slope")));
  std::vector<float> slopes = {gridValue(rng), gridValue(rng)};
  Arguments args;
  args.bind("slope", slopes.data(), 2);
  const int64_t sq = 6, sk = 5;
  HostTensor q(DType::F32, {1, 2, sq, 3}), k(DType::F32, {1, 1, sk, 3}),
      v(DType::F32, {1, 1, sk, 4}), dO(DType::F32, {1, 2, sq, 4});
  for (HostTensor *t : {&q, &k, &v, &dO})
    t->fill([&](int64_t, int64_t, int64_t, int64_t) { return gridValue(rng); });
  ReferenceGradients exact =
      referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref, args);
  ReferenceGradients same = referenceAttentionBackward(
      s, q.ref, k.ref, v.ref, dO.ref, args, {}, nullptr, std::nullopt);
  ReferenceGradients rounded = referenceAttentionBackward(
      s, q.ref, k.ref, v.ref, dO.ref, args, {}, nullptr, DType::BF16);
  CHECK(same.dq == exact.dq);
  CHECK(same.dBuffers == exact.dBuffers);
  CHECK(rounded.dv == exact.dv);

  ReferenceOutput f = referenceAttention(s, q.ref, k.ref, v.ref, args);
  const double scale = s.effectiveScale();
  std::vector<double> dSlope(2, 0.0);
  double maxDelta = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      double delta = 0;
      for (int64_t d = 0; d < 4; ++d) {
        uint16_t bits = 0;
        storeFromFloat(&bits, DType::BF16, 0,
                       static_cast<float>(f.oAt(0, h, i, d)));
        delta += dO.get(0, h, i, d) *
                 (f.oAt(0, h, i, d) - loadAsFloat(&bits, DType::BF16, 0));
      }
      maxDelta = std::max(maxDelta, std::fabs(delta));
      std::vector<double> pk(3, 0.0);
      for (int64_t j = 0; j <= i - (sq - sk) && j < sk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < 3; ++d)
          dot += q.get(0, h, i, d) * k.get(0, 0, j, d);
        const double dist = std::fabs(static_cast<double>(i - j));
        const double p =
            std::exp(scale * dot - slopes[h] * dist - f.lseAt(0, h, i));
        for (int64_t d = 0; d < 3; ++d)
          pk[d] += p * k.get(0, 0, j, d);
        dSlope[h] -= delta * p * dist;
      }
      for (int64_t d = 0; d < 3; ++d)
        CHECK(std::fabs(rounded.dqAt(0, h, i, d) - exact.dqAt(0, h, i, d) -
                        scale * delta * pk[d]) <= 1e-12);
    }
  CHECK(maxDelta > 1e-5); // the rounding moved D
  for (int64_t h = 0; h < 2; ++h)
    CHECK(std::fabs(rounded.dBuffers.at("slope")[h] -
                    exact.dBuffers.at("slope")[h] - dSlope[h]) <= 1e-12);

  // The varlen reference passes it through: one sequence is the dense case.
  const std::vector<int32_t> cu = {0, static_cast<int32_t>(sq)},
                             cuK = {0, static_cast<int32_t>(sk)};
  HostTensor q3(DType::F32, {1, sq, 2, 3}), dO3(DType::F32, {1, sq, 2, 4});
  q3.fill([&](int64_t, int64_t t, int64_t h, int64_t d) {
    return static_cast<float>(q.get(0, h, t, d));
  });
  dO3.fill([&](int64_t, int64_t t, int64_t h, int64_t d) {
    return static_cast<float>(dO.get(0, h, t, d));
  });
  HostTensor k3(DType::F32, {1, sk, 1, 3}), v3(DType::F32, {1, sk, 1, 4});
  k3.fill([&](int64_t, int64_t t, int64_t, int64_t d) {
    return static_cast<float>(k.get(0, 0, t, d));
  });
  v3.fill([&](int64_t, int64_t t, int64_t, int64_t d) {
    return static_cast<float>(v.get(0, 0, t, d));
  });
  VarlenReferenceGradients vr =
      referenceVarlenAttentionBackward(s, as3(q3), as3(k3), as3(v3), as3(dO3),
                                       cu, cuK, args, {}, nullptr, DType::BF16);
  CHECK(vr.dBuffers.at("slope") == rounded.dBuffers.at("slope"));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t d = 0; d < 3; ++d)
        CHECK(vr.dqAt(i, h, d) == rounded.dqAt(0, h, i, d));
}

TEST_CASE("reference backward: bad input is a UserError naming the field",
          "[reference][backward]") {
  AttentionSpec s = makeSpec(1, 1, 2, 4);
  HostTensor q(DType::F32, {1, 1, 3, 2}), k(DType::F32, {1, 1, 3, 2}),
      v(DType::F32, {1, 1, 3, 4}), dO(DType::F32, {1, 1, 3, 5});
  expectUserError(
      [&] {
        return referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref);
      },
      {"dO.shape[3] = 5, expected 4 (head_dim_v)"});
  HostTensor dO2(DType::F32, {1, 1, 3, 4});
  s.variant.scoreMod(softcap(param<float>("cap")));
  Arguments args;
  args.set("cap", Scalar::f32(3.0f));
  expectUserError(
      [&] {
        return referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO2.ref, args,
                                          {"nope"});
      },
      {"'nope'"});
  AttentionSpec t = makeSpec(1, 1, 2, 4);
  t.variant.scoreMod(cast<float>(cast<int32_t>(score * 4.0f))); // this line
  const unsigned line = __LINE__ - 1;
  expectUserErrorAt(
      [&] {
        return referenceAttentionBackward(t, q.ref, k.ref, v.ref, dO2.ref);
      },
      line, {"not differentiable"});
}
