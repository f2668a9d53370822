//===- RingBackwardTest.cpp - The ring backward against float64 -----------===//
//
// Issue 20's backward ring on the CPU: ranks as threads of an
// InProcessRing run ringAttentionCpu and then ringAttentionBackwardCpu on
// their parts of global Q, K, V, dO; the gradients put back together (and
// the data gradients summed over the ranks) are compared with
// referenceAttentionBackward of the whole sequence. Also: bit-identical
// gradients run to run (the deterministic mode), the dK/dV shifts made,
// and a backward kernel of the wrong spec refused.
//
//===----------------------------------------------------------------------===//
#include "BlockMaskSupport.h"
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/Ring.h"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <thread>

using namespace flashjit;
using namespace flashjit::test;
using runtime::InProcessRing;
using runtime::RingStats;

namespace {

CompileOptions varlenOptions() {
  CompileOptions o;
  o.varlen = true;
  return o;
}

std::shared_ptr<const CpuBackward> backwardKernel(const AttentionSpec &spec) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const CpuBackward>> cache;
  std::lock_guard<std::mutex> lock(mu);
  std::string key = printSpec(spec);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, compileCpuBackward(spec)).first;
  return it->second;
}

struct BwdCase {
  std::string name;
  AttentionSpec spec;
  std::vector<int32_t> docs;
  std::vector<float> slopes, sink;
  Arguments args() const {
    Arguments a;
    if (!docs.empty())
      a.bind("doc", docs.data(), static_cast<int64_t>(docs.size()));
    if (!slopes.empty())
      a.bind("slopes", slopes.data(), static_cast<int64_t>(slopes.size()));
    if (!sink.empty())
      a.bindSink(sink.data(), static_cast<int64_t>(sink.size()));
    return a;
  }
};

std::vector<BwdCase> bwdCases(int64_t seqlen, std::mt19937 &rng) {
  std::vector<BwdCase> out;
  auto add = [&](std::string name, Variant v, Causal causal) {
    BwdCase c;
    c.name = std::move(name);
    c.spec.variant = std::move(v);
    c.spec.headDimQK = 16, c.spec.headDimV = 8;
    c.spec.headsQ = 4, c.spec.headsKV = 2;
    c.spec.dtypeQ = c.spec.dtypeK = c.spec.dtypeV = c.spec.dtypeO = DType::F32;
    c.spec.causal = causal;
    out.push_back(std::move(c));
  };
  add("causal", Variant("causal"), Causal::TopLeft);
  add("window",
      Variant("window").mask(sliding_window(4, 1, Alignment::TopLeft)),
      Causal::None);
  add("softcap", Variant("softcap").scoreMod(softcap(0.5f)), Causal::TopLeft);
  add("alibi", Variant("alibi").scoreMod(alibi(buffer<float>("slopes"))),
      Causal::TopLeft);
  out.back().slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  Buffer doc = buffer<int32_t>("doc");
  add("document", Variant("doc").mask(doc[q_idx] == doc[kv_idx]),
      Causal::TopLeft);
  out.back().docs = flashjit::testing::randomDocs(rng, seqlen, false, 10);
  add("sink", Variant("sink"), Causal::TopLeft);
  out.back().spec.sink = true;
  out.back().sink = {0.5f, -1.0f, -std::numeric_limits<float>::infinity(),
                     1.0f};
  return out;
}

struct Grads {
  std::vector<float> dq, dk, dv, dSlopes, dSink;
  std::vector<RingStats> stats;
};

/// Forward then backward ring over \p ranks on the global tensors.
Grads runRingBackward(const BwdCase &c, const StridedTensor &q,
                      const StridedTensor &k, const StridedTensor &v,
                      const StridedTensor &dO, int ranks, Sharding sharding) {
  AttentionSpec ring = contextParallelSpec(c.spec);
  auto fwd = cachedKernel(ring);
  auto bwd = backwardKernel(ring);
  Grads g;
  g.dq.assign(size_t(q.ref.numel()), 0.0f);
  g.dk.assign(size_t(k.ref.numel()), 0.0f);
  g.dv.assign(size_t(v.ref.numel()), 0.0f);
  g.stats.resize(size_t(ranks));
  TensorRef dqG = TensorRef::contiguous(g.dq.data(), DType::F32, q.ref.shape);
  TensorRef dkG = TensorRef::contiguous(g.dk.data(), DType::F32, k.ref.shape);
  TensorRef dvG = TensorRef::contiguous(g.dv.data(), DType::F32, v.ref.shape);
  Arguments args = c.args();
  InProcessRing ringT(ranks);
  std::mutex mu;
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto local = [&](const TensorRef &t, std::vector<float> &store) {
          std::array<int64_t, 4> s = t.shape;
          s[2] /= ranks;
          store.assign(size_t(std::max<int64_t>(s[0] * s[1] * s[2] * s[3], 1)),
                       0.0f);
          return TensorRef::contiguous(store.data(), DType::F32, s);
        };
        std::vector<float> bq, bk, bv, bdo, bo, bdq, bdk, bdv;
        TensorRef lq = local(q.ref, bq), lk = local(k.ref, bk),
                  lv = local(v.ref, bv), ldo = local(dO.ref, bdo),
                  lo = local(dO.ref, bo), ldq = local(q.ref, bdq),
                  ldk = local(k.ref, bdk), ldv = local(v.ref, bdv);
        shardSequence(q.ref, lq, r, ranks, sharding);
        shardSequence(k.ref, lk, r, ranks, sharding);
        shardSequence(v.ref, lv, r, ranks, sharding);
        shardSequence(dO.ref, ldo, r, ranks, sharding);
        std::vector<float> bl(size_t(lo.shape[0] * lo.shape[1] * lo.shape[2]));
        TensorRef ll = TensorRef::contiguous3(
            bl.data(), DType::F32, {lo.shape[0], lo.shape[1], lo.shape[2]});
        runtime::RingTransport &t = ringT.rank(r);
        runtime::ringAttentionCpu(c.spec, *fwd, t, lq, lk, lv, lo, &ll, args,
                                  {sharding, 1});
        RingStats st;
        DataGradients dg = runtime::ringAttentionBackwardCpu(
            c.spec, *bwd, t, lq, lk, lv, lo, ll, ldo, ldq, ldk, ldv, args,
            {sharding, 1}, &st);
        std::lock_guard<std::mutex> lock(mu);
        g.stats[size_t(r)] = st;
        unshardSequence(ldq, dqG, r, ranks, sharding);
        unshardSequence(ldk, dkG, r, ranks, sharding);
        unshardSequence(ldv, dvG, r, ranks, sharding);
        auto sum = [](std::vector<float> &acc, const std::vector<float> &x) {
          acc.resize(x.size(), 0.0f);
          for (size_t i = 0; i < x.size(); ++i)
            acc[i] += x[i];
        };
        if (dg.dBuffers.count("slopes"))
          sum(g.dSlopes, dg.dBuffers["slopes"]);
        sum(g.dSink, dg.dSink);
      } catch (const std::exception &e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    REQUIRE(errors[size_t(r)].empty());
  }
  return g;
}

double worst(const std::vector<float> &got, const std::vector<double> &want) {
  REQUIRE(got.size() == want.size());
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(!std::isnan(got[i]));
    w = std::max(w, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
  }
  return w;
}

} // namespace

TEST_CASE("ring backward equals the float64 reference gradients of the "
          "whole sequence for 1-8 ranks, every variant, both shardings",
          "[ring][backward]") {
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  // Sampled: each variant on one (ranks, sharding) pair (FLASHJIT_TEST_SEED
  // does not change the pairing; the data and documents vary).
  const std::pair<int, Sharding> configs[] = {
      {8, Sharding::Zigzag}, {2, Sharding::Zigzag}, {3, Sharding::Contiguous},
      {4, Sharding::Zigzag}, {5, Sharding::Zigzag}, {1, Sharding::Contiguous}};
  const size_t variants = bwdCases(1, rng).size();
  for (size_t which = 0; which < variants; ++which) {
    auto [ranks, sharding] = configs[which % 6];
    int64_t seqlen = numChunks(ranks, sharding) * (ranks % 2 ? 3 : 5);
    BwdCase c = bwdCases(seqlen, rng)[which];
    std::string what = fmt::format("{} ranks={} {} seqlen={}", c.name, ranks,
                                   toString(sharding), seqlen);
    INFO(what);
    const AttentionSpec &s = c.spec;
    StridedTensor q(DType::F32, {2, s.headsQ, seqlen, s.headDimQK}, false),
        k(DType::F32, {2, s.headsKV, seqlen, s.headDimQK}, false),
        v(DType::F32, {2, s.headsKV, seqlen, s.headDimV}, false),
        dO(DType::F32, {2, s.headsQ, seqlen, s.headDimV}, false);
    q.randomize(rng), k.randomize(rng), v.randomize(rng), dO.randomize(rng);
    ReferenceGradients ref =
        referenceAttentionBackward(s, q.ref, k.ref, v.ref, dO.ref, c.args());
    Grads g = runRingBackward(c, q, k, v, dO, ranks, sharding);
    CHECK(worst(g.dq, ref.dq) <= 2e-4);
    CHECK(worst(g.dk, ref.dk) <= 2e-4);
    CHECK(worst(g.dv, ref.dv) <= 2e-4);
    if (!c.slopes.empty()) {
      std::vector<double> want = ref.dBuffers.at("slopes");
      CHECK(worst(g.dSlopes, want) <= 1e-3);
    }
    if (s.sink) {
      CHECK(worst(g.dSink, ref.dSink) <= 1e-3);
    }
    for (const RingStats &st : g.stats)
      CHECK(st.shifts == (ranks == 1 ? 0 : 2 * ranks - 1));
  }
}

TEST_CASE("ring backward is bit-identical run to run, and refuses a "
          "backward kernel of another spec",
          "[ring][backward]") {
  std::mt19937 rng(5);
  BwdCase c = bwdCases(24, rng)[0]; // causal
  const AttentionSpec &s = c.spec;
  StridedTensor q(DType::F32, {1, s.headsQ, 24, s.headDimQK}, false),
      k(DType::F32, {1, s.headsKV, 24, s.headDimQK}, false),
      v(DType::F32, {1, s.headsKV, 24, s.headDimV}, false),
      dO(DType::F32, {1, s.headsQ, 24, s.headDimV}, false);
  q.randomize(rng), k.randomize(rng), v.randomize(rng), dO.randomize(rng);
  Grads a = runRingBackward(c, q, k, v, dO, 3, Sharding::Zigzag);
  Grads b = runRingBackward(c, q, k, v, dO, 3, Sharding::Zigzag);
  CHECK(std::memcmp(a.dq.data(), b.dq.data(), a.dq.size() * 4) == 0);
  CHECK(std::memcmp(a.dk.data(), b.dk.data(), a.dk.size() * 4) == 0);
  CHECK(std::memcmp(a.dv.data(), b.dv.data(), a.dv.size() * 4) == 0);
  // Causal zigzag: the backward skips the pairs the forward skips.
  for (const RingStats &st : a.stats) {
    CHECK(st.pairsComputed == 2 * 3 + 1);
    CHECK(st.pairsSkipped == 2 * 3 - 1);
  }

  auto plain = backwardKernel(s); // local indices: refused
  InProcessRing one(1);
  std::vector<float> lse(size_t(s.headsQ * 24));
  TensorRef l =
      TensorRef::contiguous3(lse.data(), DType::F32, {1, s.headsQ, 24});
  StridedTensor o(DType::F32, {1, s.headsQ, 24, s.headDimV}, false),
      dq(DType::F32, {1, s.headsQ, 24, s.headDimQK}, false),
      dk(DType::F32, {1, s.headsKV, 24, s.headDimQK}, false),
      dv(DType::F32, {1, s.headsKV, 24, s.headDimV}, false);
  expectUserError(
      [&] {
        runtime::ringAttentionBackwardCpu(s, *plain, one.rank(0), q.ref, k.ref,
                                          v.ref, o.ref, l, dO.ref, dq.ref,
                                          dk.ref, dv.ref);
      },
      {"contextParallelSpec"});
}

TEST_CASE("ring backward on packed varlen batches equals the varlen float64 "
          "reference gradients",
          "[ring][backward]") {
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const std::pair<int, Sharding> configs[] = {
      {2, Sharding::Zigzag}, {3, Sharding::Contiguous}, {4, Sharding::Zigzag}};
  // Two variants (CI time): a buffer mask whose offsets are per sequence,
  // and causal with a sink (d sink per rank).
  const char *names[] = {"document", "sink"};
  int turn = 0;
  for (const char *name : names) {
    auto [ranks, sharding] = configs[(turn++) % 3];
    int64_t n = numChunks(ranks, sharding);
    // Sequences of 2n, 0, 3n and n tokens (an empty one included).
    std::vector<int32_t> cu{0};
    for (int64_t m : {2, 0, 3, 1})
      cu.push_back(static_cast<int32_t>(cu.back() + m * n));
    std::vector<int32_t> localCu = shardCuSeqlens(cu, ranks, sharding);
    int64_t total = cu.back();
    BwdCase c;
    for (BwdCase &x : bwdCases(total, rng))
      if (x.name == name)
        c = x;
    std::string what =
        fmt::format("varlen {} ranks={} {}", c.name, ranks, toString(sharding));
    INFO(what);
    const AttentionSpec &s = c.spec;
    PackedTensor q(DType::F32, total, s.headsQ, s.headDimQK),
        k(DType::F32, total, s.headsKV, s.headDimQK),
        v(DType::F32, total, s.headsKV, s.headDimV),
        dO(DType::F32, total, s.headsQ, s.headDimV),
        dq(DType::F32, total, s.headsQ, s.headDimQK),
        dk(DType::F32, total, s.headsKV, s.headDimQK),
        dv(DType::F32, total, s.headsKV, s.headDimV);
    q.randomize(rng), k.randomize(rng), v.randomize(rng), dO.randomize(rng);
    Arguments args = c.args();
    VarlenReferenceGradients ref = referenceVarlenAttentionBackward(
        s, q.ref, k.ref, v.ref, dO.ref, cu, cu, args);
    AttentionSpec ring = contextParallelSpec(s);
    auto fwd = cachedKernel(ring, varlenOptions());
    auto bwd = compileCpuBackward(ring, varlenOptions());
    std::vector<float> dSlopes, dSink;
    std::mutex mu;
    InProcessRing hub(ranks);
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          int64_t lt = total / ranks;
          PackedTensor lq(DType::F32, lt, s.headsQ, s.headDimQK),
              lk(DType::F32, lt, s.headsKV, s.headDimQK),
              lv(DType::F32, lt, s.headsKV, s.headDimV),
              lo(DType::F32, lt, s.headsQ, s.headDimV),
              ldo(DType::F32, lt, s.headsQ, s.headDimV),
              ldq(DType::F32, lt, s.headsQ, s.headDimQK),
              ldk(DType::F32, lt, s.headsKV, s.headDimQK),
              ldv(DType::F32, lt, s.headsKV, s.headDimV);
          std::vector<float> ll(static_cast<size_t>(s.headsQ * lt + 1));
          TensorRef llRef =
              TensorRef::contiguous2(ll.data(), DType::F32, {s.headsQ, lt});
          shardVarlen(q.ref, lq.ref, cu, r, ranks, sharding);
          shardVarlen(k.ref, lk.ref, cu, r, ranks, sharding);
          shardVarlen(v.ref, lv.ref, cu, r, ranks, sharding);
          shardVarlen(dO.ref, ldo.ref, cu, r, ranks, sharding);
          runtime::RingTransport &t = hub.rank(r);
          runtime::ringAttentionCpuVarlen(s, *fwd, t, lq.ref, lk.ref, lv.ref,
                                          lo.ref, &llRef, localCu, localCu,
                                          args, {sharding, 1});
          DataGradients g = runtime::ringAttentionBackwardCpuVarlen(
              s, *bwd, t, lq.ref, lk.ref, lv.ref, lo.ref, llRef, ldo.ref,
              ldq.ref, ldk.ref, ldv.ref, localCu, localCu, args, {sharding, 1});
          std::lock_guard<std::mutex> lock(mu);
          unshardVarlen(ldq.ref, dq.ref, cu, r, ranks, sharding);
          unshardVarlen(ldk.ref, dk.ref, cu, r, ranks, sharding);
          unshardVarlen(ldv.ref, dv.ref, cu, r, ranks, sharding);
          auto sum = [](std::vector<float> &acc, const std::vector<float> &x) {
            acc.resize(x.size(), 0.0f);
            for (size_t i = 0; i < x.size(); ++i)
              acc[i] += x[i];
          };
          if (g.dBuffers.count("slopes"))
            sum(dSlopes, g.dBuffers["slopes"]);
          sum(dSink, g.dSink);
        } catch (const std::exception &e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    for (std::thread &t : threads)
      t.join();
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r << ": " << errors[size_t(r)]);
      REQUIRE(errors[size_t(r)].empty());
    }
    double wq = 0, wk = 0, wv = 0;
    for (int64_t t = 0; t < total; ++t) {
      for (int64_t h = 0; h < s.headsQ; ++h)
        for (int64_t d = 0; d < s.headDimQK; ++d)
          wq = std::max(wq, std::abs(dq.at(t, h, d) - ref.dqAt(t, h, d)));
      for (int64_t h = 0; h < s.headsKV; ++h) {
        for (int64_t d = 0; d < s.headDimQK; ++d)
          wk = std::max(wk, std::abs(dk.at(t, h, d) - ref.dkAt(t, h, d)));
        for (int64_t d = 0; d < s.headDimV; ++d)
          wv = std::max(wv, std::abs(dv.at(t, h, d) - ref.dvAt(t, h, d)));
      }
    }
    CHECK(wq <= 2e-4);
    CHECK(wk <= 2e-4);
    CHECK(wv <= 2e-4);
    if (!c.slopes.empty())
      CHECK(worst(dSlopes, ref.dBuffers.at("slopes")) <= 1e-3);
    if (s.sink)
      CHECK(worst(dSink, ref.dSink) <= 1e-3);
  }
}
