//===- RingVarlenGpuTest.cpp - The GPU ring on packed varlen batches ------===//
//
// Issue 20: ringAttentionGpuVarlen, checked against the float64 varlen
// reference of the whole packed batch (each rank's part put back with
// unshardVarlen). Sequences of 37, 0, 5 and 61 tokens per chunk (odd chunk
// lengths, not whole tiles, an empty sequence), 1 to 4 ranks as threads on
// one GPU with device-to-device shifts (RingTestSupport.h's DeviceRing),
// both shardings, the ring and the all-gather schedules; the overlapped
// ring bit for bit against the serial one; one NCCL rank where libnccl
// loads. The backward (ringAttentionBackwardGpuVarlen) is checked the same
// way against the float64 varlen reference backward, O and LSE coming from
// the float64 forward. Kernels: ringVarlenKernels() and
// ringVarlenBackwardKernels() (RingVarlenKernels.h), made ahead of time by
// gen_matrix_kernels.
//
//===----------------------------------------------------------------------===//
#include "BackwardTestSupport.h"
#include "GpuTestSupport.h"
#include "RingTestSupport.h"
#include "RingVarlenKernels.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Reference.h"
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
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;
using flashjit::test::VariantArgs;

namespace {

/// A packed tensor [total, heads, dim], or an LSE [heads, total] for
/// \p dim 0, in host and device memory.
std::unique_ptr<GpuTensor> packed(Device &dev, DType t, int64_t total,
                                  int64_t heads, int64_t dim) {
  if (dim == 0) {
    auto x = std::make_unique<GpuTensor>(
        dev, t, std::array<int64_t, 4>{heads, total, 1, 1});
    x->hostRef.rank = x->deviceRef.rank = 2;
    return x;
  }
  auto x = std::make_unique<GpuTensor>(
      dev, t, std::array<int64_t, 4>{total, heads, dim, 1});
  x->hostRef.rank = x->deviceRef.rank = 3;
  return x;
}

/// One rank's tensors (its parts of q, k, v; its outputs).
struct VarlenRank {
  std::unique_ptr<GpuTensor> q, k, v, o, lse;
};

/// The whole-batch spec of a varlen ring kernel (returning LSE) and its
/// kernel.
struct LoadedVarlen {
  AttentionSpec spec;
  std::unique_ptr<GpuAttentionKernel> kernel;
};

LoadedVarlen &varlenKernel(Device &dev,
                           std::map<std::string, LoadedVarlen> &loaded,
                           const std::string &id) {
  if (auto it = loaded.find(id); it != loaded.end())
    return it->second;
  for (const testing::RingKernel &k : testing::ringVarlenKernels())
    if (k.id == id) {
      LoadedVarlen l;
      l.spec = k.spec;
      l.spec.returnLse = true;
      l.kernel =
          test::loadAheadOfTime(id, testing::ringKernelSpec(k.spec), dev);
      return loaded.emplace(id, std::move(l)).first->second;
    }
  FAIL("no varlen ring kernel " << id);
  throw;
}

/// Global cu_seqlens for \p ranks ranks under \p sharding: sequences of
/// 37, 0, 5 and 61 tokens per chunk.
std::vector<int32_t> globalCu(int ranks, Sharding sharding) {
  int64_t n = numChunks(ranks, sharding);
  std::vector<int32_t> cu{0};
  for (int64_t m : {37, 0, 5, 61})
    cu.push_back(static_cast<int32_t>(cu.back() + m * n));
  return cu;
}

/// Runs every rank (rank -> its tensors, the local cu_seqlens, the device
/// arguments) and returns each rank's stats.
using RunVarlen = std::function<std::vector<RingStats>(
    std::vector<VarlenRank> &, const std::vector<int32_t> &,
    const Arguments &)>;

/// A varlen ring run of \p ranks ranks over random global tensors of
/// \p spec packed by globalCu(); the outputs, put back in global order,
/// are compared with referenceVarlenAttention. \p bytes, where given,
/// receives O and LSE in global order.
std::vector<RingStats> checkVarlen(Device &dev, const AttentionSpec &spec,
                                   int ranks, Sharding sharding,
                                   const RunVarlen &run,
                                   std::vector<uint8_t> *bytes = nullptr) {
  const std::vector<int32_t> cu = globalCu(ranks, sharding);
  const std::vector<int32_t> localCu = shardCuSeqlens(cu, ranks, sharding);
  const int64_t total = cu.back(), lt = total / ranks;
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dv = spec.headDimV;
  std::mt19937_64 rng(40 + ranks + 7 * int(sharding));
  auto q = packed(dev, spec.dtypeQ, total, hq, dqk);
  auto k = packed(dev, spec.dtypeK, total, hkv, dqk);
  auto v = packed(dev, spec.dtypeV, total, hkv, dv);
  auto o = packed(dev, spec.dtypeO, total, hq, dv);
  auto lse = packed(dev, DType::F32, total, hq, 0);
  q->randomize(rng, 2.0f);
  k->randomize(rng, 2.0f);
  v->randomize(rng);
  // doc_id: documents of 37 tokens over the longest sequence's indices.
  int64_t longest = 61 * numChunks(ranks, sharding);
  VariantArgs args(dev, spec, longest, longest);
  std::vector<VarlenRank> parts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    VarlenRank &p = parts[size_t(r)];
    p.q = packed(dev, spec.dtypeQ, lt, hq, dqk);
    p.k = packed(dev, spec.dtypeK, lt, hkv, dqk);
    p.v = packed(dev, spec.dtypeV, lt, hkv, dv);
    p.o = packed(dev, spec.dtypeO, lt, hq, dv);
    p.lse = packed(dev, DType::F32, lt, hq, 0);
    for (auto [g, t] :
         {std::pair{q.get(), p.q.get()}, std::pair{k.get(), p.k.get()},
          std::pair{v.get(), p.v.get()}}) {
      shardVarlen(g->hostRef, t->hostRef, cu, r, ranks, sharding);
      t->device.copyFromHost(t->host.data(), t->host.size());
    }
    p.o->poison();
    p.lse->poison();
  }
  std::vector<RingStats> stats = run(parts, localCu, args.device);
  for (int r = 0; r < ranks; ++r) {
    VarlenRank &p = parts[size_t(r)];
    p.o->download();
    p.lse->download();
    unshardVarlen(p.o->hostRef, o->hostRef, cu, r, ranks, sharding);
    unshardVarlen(p.lse->hostRef, lse->hostRef, cu, r, ranks, sharding);
  }
  VarlenReferenceOutput want = referenceVarlenAttention(
      spec, q->hostRef, k->hostRef, v->hostRef, cu, cu, args.host);
  double worstO = 0, worstLse = 0;
  for (int64_t t = 0; t < total; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      double wl = want.lseAt(h, t);
      bool empty = std::isinf(wl) && wl < 0;
      for (int64_t d = 0; d < dv; ++d) {
        float got = o->at(t, h, d);
        double w = want.oAt(t, h, d);
        if (std::isnan(got) || (empty && got != 0.0f)) {
          FAIL_CHECK("o[" << t << "," << h << "," << d << "] = " << got
                          << ", want " << w);
          return stats;
        }
        worstO = std::max(worstO, std::fabs(got - w));
      }
      float gl = lse->at(h, t, 0);
      if (empty ? !(std::isinf(gl) && gl < 0) : !std::isfinite(gl)) {
        FAIL_CHECK("lse[" << h << "," << t << "] = " << gl << ", want " << wl);
        return stats;
      }
      if (!empty)
        worstLse = std::max(worstLse,
                            std::fabs(gl - wl) / std::max(1.0, std::fabs(wl)));
    }
  INFO("max |O - O_ref| = " << worstO << ", max rel LSE error = " << worstLse);
  CHECK(worstO <= test::tolerance(spec.dtypeO));
  CHECK(worstLse <= 1e-4);
  if (bytes) {
    *bytes = o->host;
    bytes->insert(bytes->end(), lse->host.begin(), lse->host.end());
  }
  return stats;
}

/// Every rank as a thread with its own stream over \p kind's transports.
std::vector<RingStats> runThreads(Device &dev, const LoadedVarlen &ring,
                                  const GpuPagedOps &ops, RingOptions opts,
                                  std::vector<VarlenRank> &parts,
                                  const std::vector<int32_t> &localCu,
                                  const Arguments &args,
                                  test::RankTransport kind) {
  std::vector<RingStats> stats(parts.size());
  test::runRankThreads(
      dev, static_cast<int>(parts.size()),
      [&](int r, RingTransport &t, CUstream stream) {
        VarlenRank &p = parts[size_t(r)];
        stats[size_t(r)] = ringAttentionGpuVarlen(
            ring.spec, *ring.kernel, ops, dev, t, p.q->deviceRef,
            p.k->deviceRef, p.v->deviceRef, p.o->deviceRef, &p.lse->deviceRef,
            localCu, localCu, args, opts, stream);
      },
      kind);
  return stats;
}

const char *name(Sharding s) {
  return s == Sharding::Zigzag ? "zigzag" : "contiguous";
}

const char *const kIds[] = {"ringvl_causal_tl_d64_bf16_g2",
                            "ringvl_doc_d64_fp16_g1",
                            "ringvl_window_lr_d64_bf16_g1"};

} // namespace

TEST_CASE("GPU varlen ring forward, ranks as threads: 1 to 4 ranks, both "
          "shardings, odd lengths and an empty sequence, against the varlen "
          "reference, overlapped vs serial bit for bit",
          "[gpu][ring][varlen]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedVarlen> kernels;
  for (const char *id : kIds)
    for (int ranks : {1, 2, 3, 4})
      for (Sharding sh : {Sharding::Zigzag, Sharding::Contiguous}) {
        LoadedVarlen &ring = varlenKernel(dev, kernels, id);
        std::vector<uint8_t> out[2];
        for (int overlap = 0; overlap < 2; ++overlap) {
          INFO(id << ", " << ranks << " ranks, " << name(sh)
                  << (overlap ? ", overlapped" : ", serial"));
          RingOptions opts;
          opts.sharding = sh;
          opts.overlap = overlap != 0;
          opts.schedule = RingSchedule::Ring;
          std::vector<RingStats> stats = checkVarlen(
              dev, ring.spec, ranks, sh,
              [&](std::vector<VarlenRank> &parts,
                  const std::vector<int32_t> &cu, const Arguments &args) {
                return runThreads(dev, ring, ops, opts, parts, cu, args,
                                  test::RankTransport::Device);
              },
              &out[overlap]);
          for (int r = 0; r < ranks; ++r) {
            const RingStats &st = stats[size_t(r)];
            CHECK_FALSE(st.allGather);
            CHECK(st.shifts == ranks - 1);
            CHECK(st.overlapped == (overlap != 0 && ranks > 1));
            int64_t per = sh == Sharding::Zigzag ? 2 : 1;
            CHECK(st.pairsComputed + st.pairsSkipped == per * per * ranks);
            // Causal: every sequence's pair is empty above the diagonal of
            // chunks (the empty sequence's always), so zigzag computes
            // 2R + 1 of 4R pairs on every rank, contiguous r + 1 of R.
            if (std::string(id) == "ringvl_causal_tl_d64_bf16_g2")
              CHECK(st.pairsComputed ==
                    (sh == Sharding::Zigzag ? 2 * ranks + 1 : r + 1));
          }
        }
        INFO(id << ", " << ranks << " ranks, " << name(sh)
                << ": overlapped vs serial");
        REQUIRE(out[0].size() == out[1].size());
        CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size()) == 0);
      }
}

TEST_CASE("GPU varlen ring forward, all-gather schedule: 1 to 4 ranks as "
          "threads, both shardings, against the varlen reference",
          "[gpu][ring][varlen][allgather]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedVarlen> kernels;
  for (const char *id : kIds)
    for (int ranks : {1, 2, 3, 4})
      for (Sharding sh : {Sharding::Zigzag, Sharding::Contiguous}) {
        INFO(id << ", " << ranks << " ranks, " << name(sh) << ", all-gather");
        LoadedVarlen &ring = varlenKernel(dev, kernels, id);
        RingOptions opts;
        opts.sharding = sh;
        opts.schedule = RingSchedule::AllGather;
        std::vector<RingStats> stats = checkVarlen(
            dev, ring.spec, ranks, sh,
            [&](std::vector<VarlenRank> &parts, const std::vector<int32_t> &cu,
                const Arguments &args) {
              return runThreads(dev, ring, ops, opts, parts, cu, args,
                                test::RankTransport::Device);
            });
        for (const RingStats &st : stats) {
          CHECK(st.allGather);
          CHECK(st.shifts == ranks - 1);
          // One call per local query chunk against the whole keys.
          CHECK(st.pairsComputed == (sh == Sharding::Zigzag ? 2 : 1));
        }
      }
}

TEST_CASE("GPU varlen ring forward over NCCL, one rank: causal zigzag and "
          "the document mask against the varlen reference",
          "[gpu][ring][varlen][nccl]") {
  std::string why;
  if (!Nccl::available(&why)) {
    WARN("SKIPPED: libnccl cannot be loaded: " << why);
    return;
  }
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedVarlen> kernels;
  NcclCommunicator comm(Nccl::get().uniqueId(), 1, 0, dev);
  CUstream stream = nullptr;
  REQUIRE(Driver::get().cuStreamCreate(&stream, CU_STREAM_DEFAULT) ==
          CUDA_SUCCESS);
  {
    NcclTransport t(comm.handle(), stream);
    for (const char *id : {kIds[0], kIds[1]})
      for (RingSchedule schedule :
           {RingSchedule::Ring, RingSchedule::AllGather}) {
        INFO(id << ", one NCCL rank, "
                << (schedule == RingSchedule::Ring ? "ring" : "all-gather"));
        LoadedVarlen &ring = varlenKernel(dev, kernels, id);
        RingOptions opts;
        opts.sharding = Sharding::Zigzag;
        opts.schedule = schedule;
        std::vector<RingStats> stats = checkVarlen(
            dev, ring.spec, 1, Sharding::Zigzag,
            [&](std::vector<VarlenRank> &parts, const std::vector<int32_t> &cu,
                const Arguments &args) {
              VarlenRank &p = parts[0];
              RingStats st = ringAttentionGpuVarlen(
                  ring.spec, *ring.kernel, ops, dev, t, p.q->deviceRef,
                  p.k->deviceRef, p.v->deviceRef, p.o->deviceRef,
                  &p.lse->deviceRef, cu, cu, args, opts, stream);
              return std::vector<RingStats>{st};
            });
        CHECK(stats[0].shifts == 0);
        CHECK(stats[0].allGather == (schedule == RingSchedule::AllGather));
      }
  }
  REQUIRE(Driver::get().cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("GPU varlen ring forward refuses a dense kernel, a varlen kernel "
          "in the dense call and an odd local sequence under zigzag",
          "[gpu][ring][varlen]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedVarlen> kernels;
  LoadedVarlen &ring = varlenKernel(dev, kernels, kIds[0]);
  const AttentionSpec &spec = ring.spec;
  std::unique_ptr<GpuAttentionKernel> dense = test::loadAheadOfTime(
      "ring_causal_tl_d64_bf16_g2", testing::ringKernelSpec(spec), dev);
  auto q = packed(dev, spec.dtypeQ, 10, 4, 64);
  auto k = packed(dev, spec.dtypeK, 10, 2, 64);
  auto v = packed(dev, spec.dtypeV, 10, 2, 64);
  auto o = packed(dev, spec.dtypeO, 10, 4, 64);
  auto lse = packed(dev, DType::F32, 10, 4, 0);
  std::vector<int32_t> even{0, 4, 10}, odd{0, 5, 10};
  InProcessRing host(1);
  test::StagedDeviceRing t(host.rank(0), nullptr);
  RingOptions zigzag;
  zigzag.sharding = Sharding::Zigzag;
  CHECK_THROWS_WITH(
      ringAttentionGpuVarlen(spec, *dense, ops, dev, t, q->deviceRef,
                             k->deviceRef, v->deviceRef, o->deviceRef,
                             &lse->deviceRef, even, even, {}, zigzag),
      Catch::Contains("needs a varlen forward kernel"));
  CHECK_THROWS_WITH(
      ringAttentionGpuVarlen(spec, *ring.kernel, ops, dev, t, q->deviceRef,
                             k->deviceRef, v->deviceRef, o->deviceRef,
                             &lse->deviceRef, odd, odd, {}, zigzag),
      Catch::Contains("local sequence 0 has 5 tokens, odd"));
  auto dq = std::make_unique<GpuTensor>(dev, spec.dtypeQ,
                                        std::array<int64_t, 4>{1, 4, 8, 64});
  auto dkv = std::make_unique<GpuTensor>(dev, spec.dtypeK,
                                         std::array<int64_t, 4>{1, 2, 8, 64});
  auto dlse = std::make_unique<GpuTensor>(
      dev, DType::F32, std::array<int64_t, 4>{1, 4, 8, 1}, 3);
  CHECK_THROWS_WITH(ringAttentionGpu(spec, *ring.kernel, ops, dev, t,
                                     dq->deviceRef, dkv->deviceRef,
                                     dkv->deviceRef, dq->deviceRef,
                                     &dlse->deviceRef, {}, zigzag),
                    Catch::Contains("needs a dense forward kernel"));
}

namespace {

/// One rank's backward tensors: its parts of the global inputs and its
/// gradients.
struct BackwardRank {
  std::unique_ptr<GpuTensor> q, k, v, o, dO, lse, dq, dk, dv;
};

/// Runs every rank of a backward; returns each rank's stats.
using RunBackward = std::function<std::vector<RingStats>(
    std::vector<BackwardRank> &, const std::vector<int32_t> &,
    const Arguments &)>;

/// A varlen ring backward of \p ranks ranks over random global tensors of
/// \p spec packed by globalCu(), checked against
/// referenceVarlenAttentionBackward; returns the host bytes of dQ, dK, dV
/// in global order.
std::vector<uint8_t> checkVarlenBackward(Device &dev, const AttentionSpec &spec,
                                         int ranks, Sharding sharding,
                                         const RunBackward &run,
                                         std::vector<RingStats> &stats) {
  using namespace flashjit::test::backward;
  const std::vector<int32_t> cu = globalCu(ranks, sharding);
  const std::vector<int32_t> localCu = shardCuSeqlens(cu, ranks, sharding);
  const int64_t total = cu.back(), lt = total / ranks;
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dvv = spec.headDimV;
  const DType dt = spec.dtypeQ;
  std::mt19937_64 rng(400 + ranks + 7 * int(sharding));
  auto q = packed(dev, dt, total, hq, dqk),
       k = packed(dev, dt, total, hkv, dqk);
  auto v = packed(dev, dt, total, hkv, dvv),
       o = packed(dev, dt, total, hq, dvv);
  auto dO = packed(dev, dt, total, hq, dvv);
  auto lse = packed(dev, DType::F32, total, hq, 0);
  auto dq = packed(dev, dt, total, hq, dqk),
       dk = packed(dev, dt, total, hkv, dqk);
  auto dv = packed(dev, dt, total, hkv, dvv);
  q->randomize(rng, 2.0f);
  k->randomize(rng, 2.0f);
  v->randomize(rng);
  dO->randomize(rng);
  int64_t longest = 61 * numChunks(ranks, sharding);
  VariantArgs args(dev, spec, longest, longest);
  AttentionSpec fwd = spec;
  fwd.returnLse = true;
  VarlenReferenceOutput ref = referenceVarlenAttention(
      fwd, q->hostRef, k->hostRef, v->hostRef, cu, cu, args.host);
  for (int64_t t = 0; t < total; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      storeFromFloat(lse->hostRef.data, DType::F32,
                     lse->hostRef.offset(h, t, 0),
                     static_cast<float>(ref.lseAt(h, t)));
      for (int64_t d = 0; d < dvv; ++d)
        storeFromFloat(o->hostRef.data, dt, o->hostRef.offset(t, h, d),
                       static_cast<float>(ref.oAt(t, h, d)));
    }
  std::vector<BackwardRank> parts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    BackwardRank &p = parts[size_t(r)];
    p.q = packed(dev, dt, lt, hq, dqk), p.k = packed(dev, dt, lt, hkv, dqk);
    p.v = packed(dev, dt, lt, hkv, dvv), p.o = packed(dev, dt, lt, hq, dvv);
    p.dO = packed(dev, dt, lt, hq, dvv);
    p.lse = packed(dev, DType::F32, lt, hq, 0);
    std::pair<GpuTensor *, GpuTensor *> in[] = {
        {q.get(), p.q.get()}, {k.get(), p.k.get()},   {v.get(), p.v.get()},
        {o.get(), p.o.get()}, {dO.get(), p.dO.get()}, {lse.get(), p.lse.get()}};
    for (auto [g, t] : in) {
      shardVarlen(g->hostRef, t->hostRef, cu, r, ranks, sharding);
      upload(*t);
    }
    p.dq = packed(dev, dt, lt, hq, dqk), p.dk = packed(dev, dt, lt, hkv, dqk);
    p.dv = packed(dev, dt, lt, hkv, dvv);
    for (GpuTensor *t : {p.dq.get(), p.dk.get(), p.dv.get()})
      t->poison();
  }
  stats = run(parts, localCu, args.device);
  for (int r = 0; r < ranks; ++r) {
    BackwardRank &p = parts[size_t(r)];
    for (auto [t, g] :
         {std::pair{p.dq.get(), dq.get()}, std::pair{p.dk.get(), dk.get()},
          std::pair{p.dv.get(), dv.get()}}) {
      t->download();
      unshardVarlen(t->hostRef, g->hostRef, cu, r, ranks, sharding);
    }
  }
  VarlenReferenceGradients want =
      referenceVarlenAttentionBackward(spec, q->hostRef, k->hostRef, v->hostRef,
                                       dO->hostRef, cu, cu, args.host, {});
  GradCheck cq, ck, cv;
  for (int64_t t = 0; t < total; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      bool empty = std::isinf(ref.lseAt(h, t));
      for (int64_t d = 0; d < dqk; ++d)
        cq.add(dq->at(t, h, d), want.dqAt(t, h, d), empty);
    }
  for (int64_t t = 0; t < total; ++t)
    for (int64_t h = 0; h < hkv; ++h) {
      bool unseen = true;
      for (int64_t d = 0; d < dvv; ++d)
        unseen = unseen && want.dvAt(t, h, d) == 0.0;
      for (int64_t d = 0; d < dqk; ++d)
        ck.add(dk->at(t, h, d), want.dkAt(t, h, d), unseen);
      for (int64_t d = 0; d < dvv; ++d)
        cv.add(dv->at(t, h, d), want.dvAt(t, h, d), unseen);
    }
  std::printf("  varlen ring bwd %-8s %d ranks %-10s dQ %.2e/%.2e  dK "
              "%.2e/%.2e  dV %.2e/%.2e (max/norm rel err)\n",
              spec.variant.name().c_str(), ranks,
              std::string(toString(sharding)).c_str(), cq.relMax(),
              cq.relNorm(), ck.relMax(), ck.relNorm(), cv.relMax(),
              cv.relNorm());
  checkGrad("dQ", cq, dt);
  checkGrad("dK", ck, dt);
  checkGrad("dV", cv, dt);
  std::vector<uint8_t> bytes;
  for (const auto *g : {dq.get(), dk.get(), dv.get()})
    bytes.insert(bytes.end(), g->host.begin(), g->host.end());
  return bytes;
}

} // namespace

TEST_CASE("GPU varlen ring backward, ranks as threads: 1 to 4 ranks, both "
          "shardings, odd lengths and an empty sequence, against the varlen "
          "reference backward, deterministic overlapped vs serial bit for "
          "bit",
          "[gpu][ring][varlen][backward]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  for (const testing::RingKernel &rk : testing::ringVarlenBackwardKernels())
    for (int ranks : {1, 2, 3, 4}) {
      // One kernel object per rank: the backward's workspaces serve one
      // stream at a time.
      std::vector<std::unique_ptr<GpuAttentionBackwardKernel>> kernels;
      for (int r = 0; r < ranks; ++r)
        kernels.push_back(test::backward::loadBackward(
            rk.id, testing::ringKernelSpec(rk.spec), dev));
      for (Sharding sh : {Sharding::Zigzag, Sharding::Contiguous}) {
        std::vector<uint8_t> out[2];
        for (int overlap = 0; overlap < 2; ++overlap) {
          INFO(rk.id << ", " << ranks << " ranks, " << name(sh)
                     << (overlap ? ", overlapped" : ", serial"));
          std::vector<RingStats> stats;
          out[overlap] = checkVarlenBackward(
              dev, rk.spec, ranks, sh,
              [&](std::vector<BackwardRank> &parts,
                  const std::vector<int32_t> &cu, const Arguments &args) {
                std::vector<RingStats> st(parts.size());
                test::runRankThreads(
                    dev, ranks,
                    [&](int r, RingTransport &t, CUstream stream) {
                      BackwardRank &p = parts[size_t(r)];
                      RingOptions opts;
                      opts.sharding = sh;
                      opts.overlap = overlap != 0;
                      GpuBackwardOptions bo;
                      bo.deterministic = true;
                      ringAttentionBackwardGpuVarlen(
                          rk.spec, *kernels[size_t(r)], ops, dev, t,
                          p.q->deviceRef, p.k->deviceRef, p.v->deviceRef,
                          p.o->deviceRef, p.lse->deviceRef, p.dO->deviceRef,
                          p.dq->deviceRef, p.dk->deviceRef, p.dv->deviceRef, cu,
                          cu, args, opts, bo, stream, &st[size_t(r)]);
                    },
                    test::RankTransport::Device);
                return st;
              },
              stats);
          for (int r = 0; r < ranks; ++r) {
            const RingStats &st = stats[size_t(r)];
            CHECK(st.shifts == (ranks > 1 ? 2 * ranks - 1 : 0));
            if (rk.id == "ringvlbwd_causal_tl_d64_bf16_g2")
              CHECK(st.pairsComputed ==
                    (sh == Sharding::Zigzag ? 2 * ranks + 1 : r + 1));
          }
        }
        INFO(rk.id << ", " << ranks << " ranks, " << name(sh)
                   << ": overlapped vs serial");
        REQUIRE(out[0].size() == out[1].size());
        CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size()) == 0);
      }
    }
}
