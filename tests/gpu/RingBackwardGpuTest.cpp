//===- RingBackwardGpuTest.cpp - The GPU ring backward on one GPU ---------===//
//
// Issue 20: ringAttentionBackwardGpu, checked against the float64
// reference backward of the whole sequence (each rank's dQ, dK and dV put
// back with unshardSequence). O and LSE come from the float64 forward
// (rounded to the kernel's dtypes, then sharded), so the check depends on
// no forward kernel; gradients are NaN-poisoned before each run. The
// kernels are ringBackwardKernels() (tests/support/KernelMatrix.h: no
// mask, causal with GQA, a document mask), made ahead of time by
// gen_matrix_kernels.
//
// Transports as RingGpuTest.cpp: NCCL with a communicator of one rank
// (skipped with the reason where libnccl does not load), and 2 and 4 ranks
// as threads on one GPU (RingTestSupport.h), each rank with its own kernel
// object (the backward kernel's workspaces serve one stream at a time).
//
//===----------------------------------------------------------------------===//
#include "BackwardTestSupport.h"
#include "GpuTestSupport.h"
#include "KernelMatrix.h"
#include "RingTestSupport.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/NcclTransport.h"
#include "flashjit/runtime/PagedOps.h"
#include "flashjit/runtime/RingGpu.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;
using namespace flashjit::test::backward;

namespace {

/// One rank's tensors: its parts of the global inputs (sharded on the
/// host, then uploaded) and its gradients.
struct RankTensors {
  std::unique_ptr<GpuTensor> q, k, v, o, dO, lse, dq, dk, dv;
};

/// Runs every rank: rank -> its tensors, the device arguments, the kernel
/// objects (one per rank); returns each rank's stats.
using RunRanks = std::function<std::vector<RingStats>(
    std::vector<RankTensors> &, const Arguments &)>;

/// The ring backward's gradients in global order, host bytes of dQ, dK,
/// dV (for the determinism check).
struct RingResult {
  std::vector<RingStats> stats;
  std::vector<uint8_t> bytes;
};

GpuTensor *make(std::unique_ptr<GpuTensor> &t, Device &dev, DType dtype,
                std::array<int64_t, 4> shape, int rank = 4) {
  t = std::make_unique<GpuTensor>(dev, dtype, shape, rank);
  return t.get();
}

/// A ring backward of \p ranks ranks over random global tensors of \p spec
/// at batch \p batch and seqlen \p s, checked against the float64
/// reference backward.
RingResult checkRingBackward(Device &dev, const AttentionSpec &spec, int ranks,
                             Sharding sharding, int64_t batch, int64_t s,
                             const RunRanks &runRanks) {
  INFO(ranks << " ranks, " << toString(sharding) << ", batch " << batch
             << ", global seqlen " << s);
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dvv = spec.headDimV, l = s / ranks;
  const DType dt = spec.dtypeQ;
  std::mt19937_64 rng(200 + ranks + 7 * int(sharding));
  GpuTensor q(dev, dt, {batch, hq, s, dqk}), k(dev, dt, {batch, hkv, s, dqk}),
      v(dev, dt, {batch, hkv, s, dvv}), o(dev, dt, {batch, hq, s, dvv}),
      dO(dev, dt, {batch, hq, s, dvv}),
      lse(dev, DType::F32, {batch, hq, s, 1}, 3),
      dq(dev, dt, {batch, hq, s, dqk}), dk(dev, dt, {batch, hkv, s, dqk}),
      dv(dev, dt, {batch, hkv, s, dvv});
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  dO.randomize(rng);
  test::VariantArgs args(dev, spec, s, s); // doc_id: s global entries
  AttentionSpec fwd = spec;
  fwd.returnLse = true;
  ReferenceOutput ref =
      referenceAttention(fwd, q.hostRef, k.hostRef, v.hostRef, args.host);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < s; ++i) {
        put(lse, b, h, i, 0, ref.lseAt(b, h, i));
        for (int64_t d = 0; d < dvv; ++d)
          put(o, b, h, i, d, ref.oAt(b, h, i, d));
      }
  std::vector<RankTensors> parts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    RankTensors &p = parts[size_t(r)];
    std::pair<GpuTensor *, GpuTensor *> in[] = {
        {&q, make(p.q, dev, dt, {batch, hq, l, dqk})},
        {&k, make(p.k, dev, dt, {batch, hkv, l, dqk})},
        {&v, make(p.v, dev, dt, {batch, hkv, l, dvv})},
        {&o, make(p.o, dev, dt, {batch, hq, l, dvv})},
        {&dO, make(p.dO, dev, dt, {batch, hq, l, dvv})},
        {&lse, make(p.lse, dev, DType::F32, {batch, hq, l, 1}, 3)}};
    for (auto [g, t] : in) {
      shardSequence(g->hostRef, t->hostRef, r, ranks, sharding);
      upload(*t);
    }
    for (GpuTensor *t : {make(p.dq, dev, dt, {batch, hq, l, dqk}),
                         make(p.dk, dev, dt, {batch, hkv, l, dqk}),
                         make(p.dv, dev, dt, {batch, hkv, l, dvv})})
      t->poison();
  }
  RingResult res;
  res.stats = runRanks(parts, args.device);
  for (int r = 0; r < ranks; ++r) {
    RankTensors &p = parts[size_t(r)];
    for (auto [t, g] : {std::pair{p.dq.get(), &dq}, std::pair{p.dk.get(), &dk},
                        std::pair{p.dv.get(), &dv}}) {
      t->download();
      unshardSequence(t->hostRef, g->hostRef, r, ranks, sharding);
    }
  }
  ReferenceGradients want = referenceAttentionBackward(
      spec, q.hostRef, k.hostRef, v.hostRef, dO.hostRef, args.host, {});
  DenseGradChecks c = compareDenseGradients(dq, dk, dv, want, ref);
  const GradCheck &cq = c.q, &ck = c.k, &cv = c.v;
  std::printf("  ring bwd %-26s %d ranks %-10s s%-4lld dQ %.2e/%.2e  dK "
              "%.2e/%.2e  dV %.2e/%.2e (max/norm rel err)\n",
              spec.variant.name().c_str(), ranks,
              std::string(toString(sharding)).c_str(), (long long)s,
              cq.relMax(), cq.relNorm(), ck.relMax(), ck.relNorm(), cv.relMax(),
              cv.relNorm());
  checkGrad("dQ", cq, dt);
  checkGrad("dK", ck, dt);
  checkGrad("dV", cv, dt);
  for (GpuTensor *g : {&dq, &dk, &dv})
    res.bytes.insert(res.bytes.end(), g->host.begin(), g->host.end());
  return res;
}

/// Ring backward kernel \p id of ringBackwardKernels(): its whole-sequence
/// spec, and \p copies kernel objects (one per rank).
struct LoadedBackward {
  AttentionSpec spec;
  std::vector<std::unique_ptr<GpuAttentionBackwardKernel>> kernels;
};

LoadedBackward loadRingBackward(Device &dev, const std::string &id,
                                int copies) {
  for (const testing::RingKernel &k : testing::ringBackwardKernels())
    if (k.id == id) {
      LoadedBackward l;
      l.spec = k.spec;
      for (int c = 0; c < copies; ++c)
        l.kernels.push_back(
            loadBackward(id, testing::ringKernelSpec(k.spec), dev));
      return l;
    }
  FAIL("no ring backward kernel " << id);
  throw;
}

/// Every rank as a thread over \p kind's transports (host-staged by
/// default), rank r on kernel r, shifts overlapped or not as \p overlap
/// says.
std::vector<RingStats>
runThreads(Device &dev, const LoadedBackward &ring, const GpuPagedOps &ops,
           Sharding sharding, const GpuBackwardOptions &backward,
           std::vector<RankTensors> &parts, const Arguments &args,
           test::RankTransport kind = test::RankTransport::Staged,
           bool overlap = true) {
  std::vector<RingStats> stats(parts.size());
  test::runRankThreads(
      dev, static_cast<int>(parts.size()),
      [&](int r, RingTransport &t, CUstream stream) {
        RankTensors &p = parts[size_t(r)];
        RingOptions opts;
        opts.sharding = sharding;
        opts.overlap = overlap;
        ringAttentionBackwardGpu(
            ring.spec, *ring.kernels[size_t(r)], ops, dev, t, p.q->deviceRef,
            p.k->deviceRef, p.v->deviceRef, p.o->deviceRef, p.lse->deviceRef,
            p.dO->deviceRef, p.dq->deviceRef, p.dk->deviceRef, p.dv->deviceRef,
            args, opts, backward, stream, &stats[size_t(r)]);
      },
      kind);
  return stats;
}

/// Global seqlens with odd chunks: contiguous R * 75 (75 tokens a rank),
/// zigzag 2R * 41 (two chunks of 41). VariantArgs' documents are 37
/// tokens long, so they straddle the chunks.
int64_t oddSeqlen(int ranks, Sharding sh) {
  return sh == Sharding::Zigzag ? 2 * ranks * 41 : ranks * 75;
}

} // namespace

TEST_CASE("GPU ring backward over NCCL, one rank: dense, causal zigzag and "
          "a document mask against the float64 reference backward",
          "[gpu][ring][nccl]") {
  std::string why;
  if (!Nccl::available(&why)) {
    WARN("SKIPPED: libnccl cannot be loaded: " << why);
    return;
  }
  const Nccl &nccl = Nccl::get();
  WARN("NCCL " << nccl.version() << " from " << nccl.path());
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  NcclCommunicator comm(nccl.uniqueId(), 1, 0, dev);
  CUstream stream = nullptr;
  REQUIRE(Driver::get().cuStreamCreate(&stream, CU_STREAM_DEFAULT) ==
          CUDA_SUCCESS);
  NcclTransport t(comm.handle(), stream);
  struct Case {
    const char *id;
    Sharding sharding;
    int computed; // chunk pairs computed (0: not checked)
  };
  for (Case c : {Case{"ringbwd_none_d64_bf16_g1", Sharding::Contiguous, 1},
                 Case{"ringbwd_causal_tl_d64_bf16_g2", Sharding::Zigzag, 3},
                 Case{"ringbwd_doc_d64_fp16_g1", Sharding::Zigzag, 0}}) {
    INFO(c.id << ", one NCCL rank");
    LoadedBackward ring = loadRingBackward(dev, c.id, 1);
    RingResult res = checkRingBackward(
        dev, ring.spec, 1, c.sharding, 2, oddSeqlen(1, c.sharding),
        [&](std::vector<RankTensors> &parts, const Arguments &args) {
          RankTensors &p = parts[0];
          RingOptions opts;
          opts.sharding = c.sharding;
          RingStats st;
          ringAttentionBackwardGpu(
              ring.spec, *ring.kernels[0], ops, dev, t, p.q->deviceRef,
              p.k->deviceRef, p.v->deviceRef, p.o->deviceRef, p.lse->deviceRef,
              p.dO->deviceRef, p.dq->deviceRef, p.dk->deviceRef,
              p.dv->deviceRef, args, opts, {}, stream, &st);
          REQUIRE(Driver::get().cuStreamSynchronize(stream) == CUDA_SUCCESS);
          return std::vector<RingStats>{st};
        });
    // Zigzag on one rank: chunks 0 and 1; the causal pair (0, 1) is empty
    // (the document mask is causal too, but whether its pair is skipped is
    // the classifier's business: 3 or 4).
    if (c.computed > 0)
      CHECK(res.stats[0].pairsComputed == c.computed);
    CHECK(res.stats[0].pairsComputed >=
          3 - 2 * (c.sharding == Sharding::Contiguous));
    CHECK(res.stats[0].pairsComputed + res.stats[0].pairsSkipped ==
          (c.sharding == Sharding::Zigzag ? 4 : 1));
    CHECK(res.stats[0].shifts == 0);
  }
  REQUIRE(Driver::get().cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("GPU ring backward, ranks as threads on one GPU: 2 and 4 ranks, "
          "both shardings, against the float64 reference backward",
          "[gpu][ring]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  for (const char *id : {"ringbwd_causal_tl_d64_bf16_g2",
                         "ringbwd_doc_d64_fp16_g1", "ringbwd_none_d64_bf16_g1"})
    for (int ranks : {2, 4})
      for (Sharding sh : {Sharding::Zigzag, Sharding::Contiguous}) {
        INFO(id);
        LoadedBackward ring = loadRingBackward(dev, id, ranks);
        RingResult res = checkRingBackward(
            dev, ring.spec, ranks, sh, 2, oddSeqlen(ranks, sh),
            [&](std::vector<RankTensors> &parts, const Arguments &args) {
              return runThreads(dev, ring, ops, sh, {}, parts, args);
            });
        for (int r = 0; r < ranks; ++r) {
          CHECK(res.stats[size_t(r)].shifts == 2 * ranks - 1);
          if (std::string(id) != "ringbwd_causal_tl_d64_bf16_g2")
            continue;
          // Causal: zigzag computes 2R + 1 of 4R pairs on every rank,
          // contiguous r + 1 of R (as the forward).
          CHECK(res.stats[size_t(r)].pairsComputed ==
                (sh == Sharding::Zigzag ? 2 * ranks + 1 : r + 1));
        }
      }
}

TEST_CASE("GPU ring backward, deterministic mode: bit-identical gradients "
          "run to run",
          "[gpu][ring]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  GpuBackwardOptions det;
  det.deterministic = true;
  for (int ranks : {2, 4}) {
    INFO(ranks << " ranks");
    LoadedBackward ring =
        loadRingBackward(dev, "ringbwd_causal_tl_d64_bf16_g2", ranks);
    std::vector<std::vector<uint8_t>> runs;
    for (int rep = 0; rep < 2; ++rep)
      runs.push_back(checkRingBackward(dev, ring.spec, ranks, Sharding::Zigzag,
                                       2, oddSeqlen(ranks, Sharding::Zigzag),
                                       [&](std::vector<RankTensors> &parts,
                                           const Arguments &args) {
                                         return runThreads(dev, ring, ops,
                                                           Sharding::Zigzag,
                                                           det, parts, args);
                                       })
                         .bytes);
    REQUIRE(runs[0].size() == runs[1].size());
    CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size()) == 0);
  }
}

TEST_CASE("GPU ring backward, overlapped K/V shifts: device-to-device ranks "
          "as threads, bit-identical to the serial path (deterministic) and "
          "against the reference",
          "[gpu][ring][overlap]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  GpuBackwardOptions det;
  det.deterministic = true;
  for (const char *id :
       {"ringbwd_causal_tl_d64_bf16_g2", "ringbwd_doc_d64_fp16_g1"})
    for (int ranks : {2, 4}) {
      LoadedBackward ring = loadRingBackward(dev, id, ranks);
      std::vector<uint8_t> out[2];
      for (int overlap = 0; overlap < 2; ++overlap) {
        INFO(id << ", " << ranks << " ranks, zigzag"
                << (overlap ? ", overlapped" : ", serial"));
        RingResult res = checkRingBackward(
            dev, ring.spec, ranks, Sharding::Zigzag, 2,
            oddSeqlen(ranks, Sharding::Zigzag),
            [&](std::vector<RankTensors> &parts, const Arguments &args) {
              return runThreads(dev, ring, ops, Sharding::Zigzag, det, parts,
                                args, test::RankTransport::Device,
                                overlap != 0);
            });
        for (const RingStats &st : res.stats) {
          CHECK(st.shifts == 2 * ranks - 1);
          CHECK(st.overlapped == (overlap != 0));
        }
        out[overlap] = std::move(res.bytes);
      }
      INFO(id << ", " << ranks << " ranks: overlapped vs serial");
      REQUIRE(out[0].size() == out[1].size());
      CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size()) == 0);
    }
}

TEST_CASE("GPU ring backward refuses a kernel of another spec and an odd "
          "zigzag length",
          "[gpu][ring]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  LoadedBackward causal =
      loadRingBackward(dev, "ringbwd_causal_tl_d64_bf16_g2", 1);
  LoadedBackward dense = loadRingBackward(dev, "ringbwd_none_d64_bf16_g1", 1);
  const AttentionSpec &spec = causal.spec;
  auto tensors = [&](int64_t l) {
    RankTensors p;
    for (auto *t : {&p.q, &p.dq})
      make(*t, dev, spec.dtypeQ, {1, 4, l, 64});
    for (auto *t : {&p.o, &p.dO})
      make(*t, dev, spec.dtypeO, {1, 4, l, 64});
    for (auto *t : {&p.k, &p.v, &p.dk, &p.dv})
      make(*t, dev, spec.dtypeK, {1, 2, l, 64});
    make(p.lse, dev, DType::F32, {1, 4, l, 1}, 3);
    return p;
  };
  InProcessRing host(1);
  test::StagedDeviceRing t(host.rank(0), nullptr);
  RingOptions zigzag;
  zigzag.sharding = Sharding::Zigzag;
  auto call = [&](const GpuAttentionBackwardKernel &kernel, RankTensors &p) {
    ringAttentionBackwardGpu(spec, kernel, ops, dev, t, p.q->deviceRef,
                             p.k->deviceRef, p.v->deviceRef, p.o->deviceRef,
                             p.lse->deviceRef, p.dO->deviceRef, p.dq->deviceRef,
                             p.dk->deviceRef, p.dv->deviceRef, {}, zigzag);
  };
  RankTensors even = tensors(64), odd = tensors(63);
  CHECK_THROWS_WITH(
      call(*dense.kernels[0], even),
      Catch::Contains("was not compiled from contextParallelSpec"));
  CHECK_THROWS_WITH(call(*causal.kernels[0], odd),
                    Catch::Contains("local seqlen_q = 63 is odd"));
}

TEST_CASE("GpuPagedOps::accumulate: fp32 += 16-bit and the rounding back, "
          "strided views, against the host bit for bit",
          "[gpu][ring]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::mt19937_64 rng(31);
  for (DType t : {DType::BF16, DType::F16}) {
    INFO(toString(t));
    // Views of rows [3, 3 + 37) of 45: strides of the whole tensor.
    GpuTensor src(dev, t, {2, 3, 45, 24}), acc(dev, DType::F32, {2, 3, 37, 24}),
        out(dev, t, {2, 3, 45, 24});
    src.randomize(rng, 3.0f);
    acc.randomize(rng, 3.0f);
    out.poison();
    TensorRef srcView = sliceDim(src.deviceRef, 2, 3, 37);
    TensorRef outView = sliceDim(out.deviceRef, 2, 5, 37);
    ops.accumulate(srcView, acc.deviceRef, true);
    ops.accumulate(acc.deviceRef, outView, false);
    std::vector<uint8_t> accBefore = acc.host;
    TensorRef before = acc.hostRef;
    before.data = accBefore.data();
    dev.synchronize();
    acc.download();
    out.download();
    int64_t wrongSum = 0, wrongRound = 0, touched = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t i = 0; i < 45; ++i)
          for (int64_t d = 0; d < 24; ++d) {
            bool inside = i >= 5 && i < 5 + 37;
            uint16_t bits;
            std::memcpy(
                &bits, out.host.data() + out.hostRef.offset(b, h, i, d) * 2, 2);
            if (!inside) { // outside the view: still the poison
              touched += bits != 0xFFFF;
              continue;
            }
            float want = loadAsFloat(before.data, DType::F32,
                                     before.offset(b, h, i - 5, d)) +
                         src.at(b, h, i - 5 + 3, d);
            float got = acc.at(b, h, i - 5, d);
            wrongSum += std::memcmp(&want, &got, 4) != 0;
            std::vector<uint8_t> r(2);
            storeFromFloat(r.data(), t, 0, want);
            wrongRound += std::memcmp(r.data(), &bits, 2) != 0;
          }
    CHECK(wrongSum == 0);
    CHECK(wrongRound == 0);
    CHECK(touched == 0);
  }
  GpuTensor a(dev, DType::F32, {2, 3, 5, 1}, 3),
      b(dev, DType::F32, {2, 3, 7, 1}, 3);
  CHECK_THROWS_WITH(ops.accumulate(a.deviceRef, b.deviceRef, true),
                    Catch::Contains("src is [2, 3, 5] but dst [2, 3, 7]"));
}
