//===- RingTest.cpp - Ring attention on the CPU against float64 -----------===//
//
// Issue 20: context-parallel (ring) attention with ranks as threads of an
// InProcessRing standing in for NCCL. Each case makes global Q, K, V, cuts
// them over R ranks (shardSequence / shardVarlen), runs ringAttentionCpu on
// every rank at once, puts the outputs back together and compares them with
// the float64 reference of the WHOLE sequence (referenceAttention /
// referenceVarlenAttention). Variants with index-dependent masks and
// modifiers (causal, windows, ALiBi, document masks) fail here if the
// kernels saw local instead of global indices. Also checked: which chunk
// pairs are skipped (causal: half; zigzag: the same work on every rank) and
// the errors of bad input.
//
//===----------------------------------------------------------------------===//
#include "BlockMaskSupport.h"
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/runtime/Ring.h"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <stdexcept>
#include <thread>

using namespace flashjit;
using namespace flashjit::test;
using runtime::InProcessRing;
using runtime::RingOptions;
using runtime::RingSchedule;
using runtime::RingStats;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

CompileOptions varlenOptions() {
  CompileOptions o;
  o.varlen = true;
  return o;
}

struct Case {
  std::string name;
  AttentionSpec spec;
  std::vector<int32_t> docs; // global doc ids (document masks)
  std::vector<float> slopes; // ALiBi
  std::vector<float> sink;   // attention sink
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

AttentionSpec baseSpec(DType dtype) {
  AttentionSpec s;
  s.headDimQK = 16;
  s.headDimV = 8;
  s.headsQ = 4;
  s.headsKV = 2;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = dtype;
  return s;
}

/// Every variant family of the issue, on sequences of \p seqlen tokens.
std::vector<Case> cases(int64_t seqlen, DType dtype, std::mt19937 &rng) {
  std::vector<Case> out;
  auto add = [&](std::string name, Variant v, Causal causal) {
    Case c{std::move(name), baseSpec(dtype), {}, {}, {}};
    c.spec.variant = std::move(v);
    c.spec.causal = causal;
    out.push_back(std::move(c));
  };
  add("dense", Variant("dense"), Causal::None);
  add("causal", Variant("causal"), Causal::TopLeft);
  add("window",
      Variant("window").mask(sliding_window(5, 2, Alignment::TopLeft)),
      Causal::None);
  add("softcap_causal", Variant("softcap").scoreMod(softcap(0.5f)),
      Causal::BottomRight);
  Buffer slopes = buffer<float>("slopes");
  add("alibi_causal", Variant("alibi").scoreMod(alibi(slopes)),
      Causal::TopLeft);
  out.back().slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  Buffer doc = buffer<int32_t>("doc");
  add("document_causal", Variant("doc").mask(doc[q_idx] == doc[kv_idx]),
      Causal::TopLeft);
  out.back().docs = flashjit::testing::randomDocs(rng, seqlen, false, 12);
  add("sink_causal", Variant("sink"), Causal::TopLeft);
  out.back().spec.sink = true;
  out.back().sink = {0.5f, -1.0f, -std::numeric_limits<float>::infinity(),
                     2.0f};
  return out;
}

std::vector<uint8_t> bytesOf(const TensorRef &like) {
  return std::vector<uint8_t>(static_cast<size_t>(
      std::max<int64_t>(like.numel(), 1) * byteSize(like.dtype)));
}

/// Runs \p body(rank, transport) on R threads; rethrows the first error.
template <class F> void onRanks(int ranks, F &&body) {
  InProcessRing ring(ranks);
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, ring.rank(r));
      } catch (const std::exception &e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < ranks; ++r)
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
  for (const std::string &e : errors)
    REQUIRE(e.empty());
}

struct DenseResult {
  std::vector<uint8_t> o;
  std::vector<float> lse;
  std::vector<RingStats> stats;
};

/// Ring attention of \p c over R ranks on global tensors q, k, v; returns
/// the global O and LSE put back together.
DenseResult runDenseRing(const Case &c, const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, int ranks, Sharding sharding,
                         RingSchedule schedule = RingSchedule::Ring) {
  auto kernel = cachedKernel(contextParallelSpec(c.spec));
  int64_t b = q.shape[0], sq = q.shape[2], sk = k.shape[2];
  DenseResult res;
  TensorRef o = TensorRef::contiguous(nullptr, c.spec.dtypeO,
                                      {b, c.spec.headsQ, sq, c.spec.headDimV});
  res.o = bytesOf(o);
  o.data = res.o.data();
  res.lse.assign(static_cast<size_t>(b * c.spec.headsQ * sq), 0.0f);
  TensorRef lse = TensorRef::contiguous3(res.lse.data(), DType::F32,
                                         {b, c.spec.headsQ, sq});
  res.stats.resize(static_cast<size_t>(ranks));
  Arguments args = c.args();
  std::mutex mu;
  onRanks(ranks, [&](int r, runtime::RingTransport &t) {
    auto local = [&](const TensorRef &g, int64_t len) {
      TensorRef l = g;
      l.shape[2] = len;
      l = TensorRef::contiguous(nullptr, g.dtype, l.shape);
      return l;
    };
    TensorRef lq = local(q, sq / ranks), lk = local(k, sk / ranks),
              lv = local(v, sk / ranks), lo = local(o, sq / ranks);
    std::vector<uint8_t> bq = bytesOf(lq), bk = bytesOf(lk), bv = bytesOf(lv),
                         bo = bytesOf(lo);
    lq.data = bq.data(), lk.data = bk.data(), lv.data = bv.data();
    lo.data = bo.data();
    std::vector<float> bl(static_cast<size_t>(lo.numel() / lo.shape[3] + 1));
    TensorRef ll = TensorRef::contiguous3(bl.data(), DType::F32,
                                          {b, c.spec.headsQ, sq / ranks});
    shardSequence(q, lq, r, ranks, sharding);
    shardSequence(k, lk, r, ranks, sharding);
    shardSequence(v, lv, r, ranks, sharding);
    RingStats st = runtime::ringAttentionCpu(
        c.spec, *kernel, t, lq, lk, lv, lo, &ll, args, {sharding, 1, schedule});
    std::lock_guard<std::mutex> lock(mu);
    res.stats[static_cast<size_t>(r)] = st;
    unshardSequence(lo, o, r, ranks, sharding);
    unshardSequence(ll, lse, r, ranks, sharding);
  });
  return res;
}

void checkAgainst(const ReferenceOutput &ref, const DenseResult &got,
                  DType dtype, const std::string &what) {
  const AttentionShape &s = ref.shape;
  double atol = dtype == DType::BF16 ? 1e-2 : 2e-5;
  double worstO = 0, worstLse = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h)
      for (int64_t i = 0; i < s.seqlenQ; ++i) {
        int64_t row = (b * s.headsQ + h) * s.seqlenQ + i;
        double want = ref.lse[static_cast<size_t>(row)];
        float lse = got.lse[static_cast<size_t>(row)];
        INFO(what << " row b=" << b << " h=" << h << " i=" << i);
        if (want == -kInf)
          REQUIRE(lse == -std::numeric_limits<float>::infinity());
        else
          worstLse = std::max(worstLse, std::abs(lse - want));
        for (int64_t d = 0; d < s.headDimV; ++d) {
          float x = loadAsFloat(got.o.data(), dtype, row * s.headDimV + d);
          double w = ref.o[static_cast<size_t>(row * s.headDimV + d)];
          REQUIRE(!std::isnan(x));
          worstO = std::max(worstO, std::abs(x - w) / (1 + std::abs(w)));
        }
      }
  INFO(what << ": max |O err| " << worstO << ", max |LSE err| " << worstLse);
  CHECK(worstO <= atol);
  CHECK(worstLse <= 1e-4);
}

struct Globals {
  StridedTensor q, k, v;
};

Globals makeGlobals(const AttentionSpec &s, int64_t b, int64_t sq, int64_t sk,
                    std::mt19937 &rng) {
  Globals g{{s.dtypeQ, {b, s.headsQ, sq, s.headDimQK}, false},
            {s.dtypeK, {b, s.headsKV, sk, s.headDimQK}, false},
            {s.dtypeV, {b, s.headsKV, sk, s.headDimV}, false}};
  g.q.randomize(rng);
  g.k.randomize(rng);
  g.v.randomize(rng);
  return g;
}

} // namespace

TEST_CASE("ring attention equals the float64 reference of the whole "
          "sequence for 1-8 ranks, every variant, both shardings",
          "[ring]") {
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  // Chunk lengths 3 and 7 (odd, smaller than a tile): 8 ranks zigzag is
  // 16 chunks, up to 112 tokens. bf16 runs two variants on 2 and 8 ranks.
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (Sharding sharding : {Sharding::Contiguous, Sharding::Zigzag}) {
      std::vector<int> rankCounts{1, 2, 3, 4, 5, 8};
      if (dtype == DType::BF16)
        rankCounts = {2, 8};
      for (int ranks : rankCounts) {
        int64_t chunk = ranks % 2 ? 3 : 7;
        int64_t seqlen = numChunks(ranks, sharding) * chunk;
        for (const Case &c : cases(seqlen, dtype, rng)) {
          if (dtype == DType::BF16 && c.name != "causal" &&
              c.name != "document_causal")
            continue;
          std::string what =
              fmt::format("{} {} ranks={} {} seqlen={}", c.name,
                          toString(dtype), ranks, toString(sharding), seqlen);
          Globals g = makeGlobals(c.spec, 2, seqlen, seqlen, rng);
          ReferenceOutput ref =
              referenceAttention(c.spec, g.q.ref, g.k.ref, g.v.ref, c.args());
          DenseResult got =
              runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, ranks, sharding);
          checkAgainst(ref, got, dtype, what);
        }
      }
    }
  }
}

TEST_CASE("a document mask skips the chunk pairs between documents (host "
          "buffers decide through the buffer-range rule)",
          "[ring]") {
  std::mt19937 rng(13);
  Case c{"doc", baseSpec(DType::F32), {}, {}, {}};
  Buffer doc = buffer<int32_t>("doc");
  c.spec.variant = Variant("doc").mask(doc[q_idx] == doc[kv_idx]);
  const int ranks = 4;
  const int64_t chunk = 6, seqlen = 2 * ranks * chunk;
  // One document per zigzag chunk: only a rank's own chunks attend each
  // other, so of its 4R pairs it computes 2 (own chunk against itself).
  for (int64_t t = 0; t < seqlen; ++t)
    c.docs.push_back(static_cast<int32_t>(t / chunk));
  Globals g = makeGlobals(c.spec, 1, seqlen, seqlen, rng);
  DenseResult got =
      runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, ranks, Sharding::Zigzag);
  for (const RingStats &st : got.stats) {
    CHECK(st.pairsComputed == 2);
    CHECK(st.pairsSkipped == 4 * ranks - 2);
  }
  checkAgainst(referenceAttention(c.spec, g.q.ref, g.k.ref, g.v.ref, c.args()),
               got, DType::F32, "doc");
}

TEST_CASE("ring attention with seqlen_q != seqlen_k (bottom-right causal, "
          "window) sees the global lengths",
          "[ring]") {
  std::mt19937 rng(7);
  for (Causal causal : {Causal::BottomRight, Causal::TopLeft})
    for (Sharding sharding : {Sharding::Contiguous, Sharding::Zigzag}) {
      Case c{"unequal", baseSpec(DType::F32), {}, {}, {}};
      c.spec.causal = causal;
      int ranks = 3;
      int64_t n = numChunks(ranks, sharding);
      Globals g = makeGlobals(c.spec, 1, 2 * n, 5 * n, rng);
      ReferenceOutput ref =
          referenceAttention(c.spec, g.q.ref, g.k.ref, g.v.ref);
      checkAgainst(ref,
                   runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, ranks, sharding),
                   DType::F32,
                   fmt::format("{} {}", toString(causal), toString(sharding)));
    }
}

TEST_CASE("causal ring skips the empty chunk pairs, and zigzag gives every "
          "rank the same work",
          "[ring]") {
  std::mt19937 rng(11);
  Case c{"causal", baseSpec(DType::F32), {}, {}, {}};
  c.spec.variant = Variant("causal");
  c.spec.causal = Causal::TopLeft;
  for (int ranks : {2, 4, 8}) {
    INFO("ranks = " << ranks);
    Globals g = makeGlobals(c.spec, 1, 4 * ranks, 4 * ranks, rng);
    DenseResult plain =
        runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, ranks, Sharding::Contiguous);
    int skipped = 0;
    for (int r = 0; r < ranks; ++r) {
      // Rank r's queries precede every key of ranks above it.
      CHECK(plain.stats[size_t(r)].pairsSkipped == ranks - 1 - r);
      CHECK(plain.stats[size_t(r)].pairsComputed == r + 1);
      CHECK(plain.stats[size_t(r)].shifts == ranks - 1);
      // RingOptions::overlap (on by default) is a GPU matter.
      CHECK_FALSE(plain.stats[size_t(r)].overlapped);
      skipped += plain.stats[size_t(r)].pairsSkipped;
    }
    CHECK(skipped == ranks * (ranks - 1) / 2);
    DenseResult zig =
        runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, ranks, Sharding::Zigzag);
    for (int r = 0; r < ranks; ++r) {
      // 4R pairs per rank: own step 3 of 4, every other step 2 of 4.
      CHECK(zig.stats[size_t(r)].pairsComputed == 2 * ranks + 1);
      CHECK(zig.stats[size_t(r)].pairsSkipped == 2 * ranks - 1);
    }
    ReferenceOutput ref = referenceAttention(c.spec, g.q.ref, g.k.ref, g.v.ref);
    checkAgainst(ref, plain, DType::F32, "contiguous");
    checkAgainst(ref, zig, DType::F32, "zigzag");
  }
}

TEST_CASE("the in-process ring stays a host copy when asked to overlap: "
          "each rank receives its predecessor's bytes, shift after shift",
          "[ring]") {
  for (int ranks : {1, 3}) {
    INFO("ranks = " << ranks);
    onRanks(ranks, [&](int r, runtime::RingTransport &t) {
      if (t.overlapShifts(true))
        throw std::runtime_error("InProcessRing::overlapShifts(true) is true");
      const int n = 1001, prev = (r + ranks - 1) % ranks;
      auto word = [&](int rank, int step, int i) {
        return rank * 1000000 + step * 10000 + i;
      };
      std::vector<int32_t> send(n), recv(n);
      for (int step = 0; step < ranks + 2; ++step) {
        for (int i = 0; i < n; ++i)
          send[size_t(i)] = word(r, step, i), recv[size_t(i)] = -1;
        t.startShift(send.data(), recv.data(), n * sizeof(int32_t));
        t.waitShift();
        for (int i = 0; i < n; ++i)
          if (recv[size_t(i)] != word(prev, step, i))
            throw std::runtime_error(
                fmt::format("rank {} shift {} word {}: {} != {}", r, step, i,
                            recv[size_t(i)], word(prev, step, i)));
      }
    });
  }
}

TEST_CASE("ring attention on packed varlen batches equals the varlen "
          "float64 reference",
          "[ring]") {
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  struct Config {
    int ranks;
    Sharding sharding;
    RingSchedule schedule;
  };
  for (auto [ranks, sharding, schedule] :
       {Config{2, Sharding::Zigzag, RingSchedule::AllGather},
        Config{3, Sharding::Contiguous, RingSchedule::Ring},
        Config{4, Sharding::Zigzag, RingSchedule::Ring},
        Config{5, Sharding::Contiguous, RingSchedule::AllGather},
        Config{1, Sharding::Contiguous, RingSchedule::Ring}}) {
    int64_t n = numChunks(ranks, sharding);
    // Sequences of 3n, 0, n and 2n tokens (an empty one included).
    std::vector<int32_t> cu{0};
    for (int64_t m : {3, 0, 1, 2})
      cu.push_back(static_cast<int32_t>(cu.back() + m * n));
    std::vector<int32_t> localCu = shardCuSeqlens(cu, ranks, sharding);
    for (const Case &c : cases(cu.back(), DType::F32, rng)) {
      std::string what = fmt::format(
          "varlen {} ranks={} {} {}", c.name, ranks, toString(sharding),
          schedule == RingSchedule::Ring ? "ring" : "all-gather");
      INFO(what);
      const AttentionSpec &s = c.spec;
      int64_t total = cu.back();
      PackedTensor q(s.dtypeQ, total, s.headsQ, s.headDimQK),
          k(s.dtypeK, total, s.headsKV, s.headDimQK),
          v(s.dtypeV, total, s.headsKV, s.headDimV),
          o(s.dtypeO, total, s.headsQ, s.headDimV);
      q.randomize(rng), k.randomize(rng), v.randomize(rng);
      std::vector<float> lse(static_cast<size_t>(s.headsQ * total), 0.0f);
      TensorRef lseRef =
          TensorRef::contiguous2(lse.data(), DType::F32, {s.headsQ, total});
      Arguments args = c.args();
      VarlenReferenceOutput ref =
          referenceVarlenAttention(s, q.ref, k.ref, v.ref, cu, cu, args);
      auto kernel = cachedKernel(contextParallelSpec(s), varlenOptions());
      std::mutex mu;
      onRanks(ranks, [&](int r, runtime::RingTransport &t) {
        int64_t lt = total / ranks;
        PackedTensor lq(s.dtypeQ, lt, s.headsQ, s.headDimQK),
            lk(s.dtypeK, lt, s.headsKV, s.headDimQK),
            lv(s.dtypeV, lt, s.headsKV, s.headDimV),
            lo(s.dtypeO, lt, s.headsQ, s.headDimV);
        std::vector<float> ll(static_cast<size_t>(s.headsQ * lt + 1));
        TensorRef llRef =
            TensorRef::contiguous2(ll.data(), DType::F32, {s.headsQ, lt});
        shardVarlen(q.ref, lq.ref, cu, r, ranks, sharding);
        shardVarlen(k.ref, lk.ref, cu, r, ranks, sharding);
        shardVarlen(v.ref, lv.ref, cu, r, ranks, sharding);
        runtime::ringAttentionCpuVarlen(s, *kernel, t, lq.ref, lk.ref, lv.ref,
                                        lo.ref, &llRef, localCu, localCu, args,
                                        {sharding, 1, schedule});
        std::lock_guard<std::mutex> lock(mu);
        unshardVarlen(lo.ref, o.ref, cu, r, ranks, sharding);
        unshardVarlen(llRef, lseRef, cu, r, ranks, sharding);
      });
      double worst = 0;
      for (int64_t t = 0; t < total; ++t)
        for (int64_t h = 0; h < s.headsQ; ++h) {
          double want = ref.lseAt(h, t);
          float got = lse[static_cast<size_t>(h * total + t)];
          INFO("token " << t << " head " << h);
          if (want == -kInf)
            REQUIRE(got == -std::numeric_limits<float>::infinity());
          else
            REQUIRE(std::abs(got - want) <= 1e-4);
          for (int64_t d = 0; d < s.headDimV; ++d)
            worst = std::max(worst, std::abs(o.at(t, h, d) - ref.oAt(t, h, d)));
        }
      CHECK(worst <= 2e-5);
    }
  }
}

TEST_CASE("ring attention errors name the field and value", "[ring]") {
  AttentionSpec spec = baseSpec(DType::F32);
  spec.causal = Causal::TopLeft;
  auto ringKernel = cachedKernel(contextParallelSpec(spec));
  StridedTensor q(DType::F32, {1, 4, 6, 16}, false),
      k(DType::F32, {1, 2, 6, 16}, false), v(DType::F32, {1, 2, 6, 8}, false),
      o(DType::F32, {1, 4, 6, 8}, false);
  std::vector<float> lse(24);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 4, 6});
  InProcessRing one(1);

  // A kernel of the spec itself reads local indices: refused.
  auto plain = cachedKernel(spec);
  expectUserError(
      [&] {
        runtime::ringAttentionCpu(spec, *plain, one.rank(0), q.ref, k.ref,
                                  v.ref, o.ref, &l);
      },
      {"contextParallelSpec"});
  // Zigzag needs two equal chunks per rank.
  StridedTensor q5(DType::F32, {1, 4, 5, 16}, false),
      o5(DType::F32, {1, 4, 5, 8}, false);
  std::vector<float> lse5(20);
  TensorRef l5 = TensorRef::contiguous3(lse5.data(), DType::F32, {1, 4, 5});
  expectUserError(
      [&] {
        runtime::ringAttentionCpu(spec, *ringKernel, one.rank(0), q5.ref, k.ref,
                                  v.ref, o5.ref, &l5, {},
                                  {Sharding::Zigzag, 1});
      },
      {"seqlen_q = 5", "zigzag"});
  // A dense ring call with a varlen kernel.
  auto varlenKernel = cachedKernel(contextParallelSpec(spec), varlenOptions());
  expectUserError(
      [&] {
        runtime::ringAttentionCpu(spec, *varlenKernel, one.rank(0), q.ref,
                                  k.ref, v.ref, o.ref, &l);
      },
      {"ringAttentionCpuVarlen"});
  // Ranks and sharding helpers.
  expectUserError([] { InProcessRing r(0); }, {"ranks = 0"});
  expectUserError([&] { one.rank(1); }, {"rank = 1 outside [0, 1)"});
  StridedTensor g10(DType::F32, {1, 4, 10, 16}, false),
      l5b(DType::F32, {1, 4, 5, 16}, false);
  expectUserError(
      [&] { shardSequence(g10.ref, l5b.ref, 0, 2, Sharding::Zigzag); },
      {"seqlen 10 is not divisible by 4", "zigzag"});
  std::vector<int32_t> cu{0, 4, 9};
  expectUserError([&] { shardCuSeqlens(cu, 2, Sharding::Contiguous); },
                  {"sequence 1", "= 5", "not divisible by 2"});
  Variant reserved("r");
  reserved.mask(q_idx >= param<int32_t>("cp_q_chunk"));
  AttentionSpec rs = spec;
  rs.variant = reserved;
  expectUserError([&] { contextParallelSpec(rs); },
                  {"'cp_q_chunk' is reserved"});
}

TEST_CASE("ranks given differently shaped tensors are named, and every rank "
          "stops",
          "[ring]") {
  AttentionSpec spec = baseSpec(DType::F32);
  auto kernel = cachedKernel(contextParallelSpec(spec));
  InProcessRing ring(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      // Rank 0: batch 2 x 3 tokens; rank 1: batch 3 x 2 tokens (the same
      // K/V bytes, another layout).
      int64_t b = r == 0 ? 2 : 3, s = r == 0 ? 3 : 2;
      StridedTensor q(DType::F32, {b, 4, s, 16}, false),
          k(DType::F32, {b, 2, s, 16}, false),
          v(DType::F32, {b, 2, s, 8}, false),
          o(DType::F32, {b, 4, s, 8}, false);
      std::vector<float> lse(static_cast<size_t>(b * 4 * s));
      TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {b, 4, s});
      try {
        runtime::ringAttentionCpu(spec, *kernel, ring.rank(r), q.ref, k.ref,
                                  v.ref, o.ref, &l);
      } catch (const UserError &e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  INFO(errors[0] << " | " << errors[1]);
  CHECK(errors[0].find("different layout") != std::string::npos);
  CHECK(errors[1].find("different layout") != std::string::npos);
}

TEST_CASE("ring attention on empty sequences and batches writes nothing and "
          "does not hang",
          "[ring]") {
  Case c{"causal", baseSpec(DType::F32), {}, {}, {}};
  c.spec.causal = Causal::TopLeft;
  std::mt19937 rng(3);
  for (auto [batch, seqlen] : {std::pair<int64_t, int64_t>{2, 0}, {0, 8}}) {
    INFO("batch " << batch << " seqlen " << seqlen);
    Globals g = makeGlobals(c.spec, batch, seqlen, seqlen, rng);
    DenseResult got =
        runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, 2, Sharding::Zigzag);
    for (const RingStats &st : got.stats) {
      CHECK(st.pairsComputed == 0);
      CHECK(st.shifts == 1);
    }
  }
}

TEST_CASE("the all-gather schedule equals the float64 reference, and Auto "
          "picks it for GQA with few K/V heads",
          "[ring]") {
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (Sharding sharding : {Sharding::Contiguous, Sharding::Zigzag})
    for (int ranks : {1, 2, 3, 5, 8}) {
      int64_t seqlen = numChunks(ranks, sharding) * (ranks % 2 ? 3 : 5);
      for (const Case &c : cases(seqlen, DType::F32, rng)) {
        if (c.name == "dense" || c.name == "softcap_causal")
          continue;
        std::string what = fmt::format("all-gather {} ranks={} {}", c.name,
                                       ranks, toString(sharding));
        Globals g = makeGlobals(c.spec, 2, seqlen, seqlen, rng);
        ReferenceOutput ref =
            referenceAttention(c.spec, g.q.ref, g.k.ref, g.v.ref, c.args());
        DenseResult got = runDenseRing(c, g.q.ref, g.k.ref, g.v.ref, ranks,
                                       sharding, RingSchedule::AllGather);
        checkAgainst(ref, got, DType::F32, what);
        for (const RingStats &st : got.stats) {
          CHECK(st.allGather);
          CHECK(st.shifts == ranks - 1);
          CHECK(st.pairsComputed + st.pairsSkipped ==
                (sharding == Sharding::Zigzag ? 2 : 1));
        }
      }
    }
  // Auto: 8 query heads on 1 K/V head gather for up to 8 ranks (the
  // gathered K/V is at most the local Q and O); 4 on 2 (this file's spec)
  // only for 1 or 2 ranks.
  Case gqa{"causal", baseSpec(DType::F32), {}, {}, {}};
  gqa.spec.causal = Causal::TopLeft;
  gqa.spec.headsQ = 8, gqa.spec.headsKV = 1, gqa.spec.headDimV = 16;
  Case mha = gqa;
  mha.spec.headsQ = 4, mha.spec.headsKV = 2, mha.spec.headDimV = 8;
  for (auto [c, ranks, want] : {std::tuple{&gqa, 8, true},
                                {&gqa, 3, true},
                                {&mha, 2, true},
                                {&mha, 3, false}}) {
    INFO(c->spec.headsQ << "/" << c->spec.headsKV << " ranks " << ranks);
    Globals g = makeGlobals(c->spec, 1, 2 * ranks, 2 * ranks, rng);
    DenseResult got = runDenseRing(*c, g.q.ref, g.k.ref, g.v.ref, ranks,
                                   Sharding::Contiguous, RingSchedule::Auto);
    for (const RingStats &st : got.stats)
      CHECK(st.allGather == want);
    checkAgainst(referenceAttention(c->spec, g.q.ref, g.k.ref, g.v.ref), got,
                 DType::F32, "auto");
  }
}
