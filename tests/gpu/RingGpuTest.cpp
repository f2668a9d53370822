//===- RingGpuTest.cpp - The GPU ring forward on one GPU ------------------===//
//
// Issue 20: ringAttentionGpu, checked against the float64 reference of the
// whole sequence (each rank's output put back with unshardSequence). The
// kernels are ringKernels() (tests/support/KernelMatrix.h: causal, document
// and window masks), made ahead of time by gen_matrix_kernels.
//
// Two transports: NCCL with a communicator of one rank (the one-GPU
// machine; libnccl found as RingNcclGpuTest.cpp finds it, skipped with the
// reason where none loads), and ranks as threads on one GPU whose shifts
// are staged through host memory and an InProcessRing (RingTestSupport.h). NCCL
// itself cannot run two ranks of one communicator on one GPU (ncclCommInitRank
// refuses a duplicate device), so the multi-rank schedules (2 and 4 ranks, both
// shardings) are checked through the staged transport, and the overlapped
// shifts ([overlap]) through device-to-device ranks as threads (DeviceRing),
// bit for bit against the serial path. The hidden [.ringbench] case times
// both orderings.
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "KernelMatrix.h"
#include "RingTestSupport.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/NcclTransport.h"
#include "flashjit/runtime/PagedOps.h"
#include "flashjit/runtime/RingGpu.h"

#include <catch2/catch.hpp>

#include <chrono>
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
using flashjit::test::StagedDeviceRing;
using flashjit::test::VariantArgs;

namespace {

/// One rank's tensors: its parts of q, k, v (sharded on the host, then
/// uploaded) and its outputs.
struct RankTensors {
  std::unique_ptr<GpuTensor> q, k, v, o, lse;
};

/// A ring run of \p ranks ranks over the global tensors of \p spec at batch
/// \p batch and seqlen \p s; its outputs, put back in global order, are
/// compared with the float64 reference. \p runRanks runs every rank
/// (rank -> its tensors) and returns each rank's stats.
using RunRanks = std::function<std::vector<RingStats>(
    std::vector<RankTensors> &, const Arguments &)>;

std::vector<RingStats> checkRing(Device &dev, const AttentionSpec &spec,
                                 int ranks, Sharding sharding, int64_t batch,
                                 int64_t s, const RunRanks &runRanks,
                                 std::vector<uint8_t> *bytes = nullptr) {
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dv = spec.headDimV, l = s / ranks;
  std::mt19937_64 rng(20 + ranks + 7 * int(sharding));
  GpuTensor q(dev, spec.dtypeQ, {batch, hq, s, dqk});
  GpuTensor k(dev, spec.dtypeK, {batch, hkv, s, dqk});
  GpuTensor v(dev, spec.dtypeV, {batch, hkv, s, dv});
  GpuTensor o(dev, spec.dtypeO, {batch, hq, s, dv});
  GpuTensor lse(dev, DType::F32, {batch, hq, s, 1}, 3);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  VariantArgs args(dev, spec, s, s); // doc_id: s global entries
  std::vector<RankTensors> parts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    RankTensors &p = parts[size_t(r)];
    p.q = std::make_unique<GpuTensor>(
        dev, spec.dtypeQ, std::array<int64_t, 4>{batch, hq, l, dqk});
    p.k = std::make_unique<GpuTensor>(
        dev, spec.dtypeK, std::array<int64_t, 4>{batch, hkv, l, dqk});
    p.v = std::make_unique<GpuTensor>(
        dev, spec.dtypeV, std::array<int64_t, 4>{batch, hkv, l, dv});
    p.o = std::make_unique<GpuTensor>(dev, spec.dtypeO,
                                      std::array<int64_t, 4>{batch, hq, l, dv});
    p.lse = std::make_unique<GpuTensor>(
        dev, DType::F32, std::array<int64_t, 4>{batch, hq, l, 1}, 3);
    for (auto [g, t] : {std::pair{&q, p.q.get()}, std::pair{&k, p.k.get()},
                        std::pair{&v, p.v.get()}}) {
      shardSequence(g->hostRef, t->hostRef, r, ranks, sharding);
      t->device.copyFromHost(t->host.data(), t->host.size());
    }
    p.o->poison();
    p.lse->poison();
  }
  std::vector<RingStats> stats = runRanks(parts, args.device);
  for (int r = 0; r < ranks; ++r) {
    RankTensors &p = parts[size_t(r)];
    p.o->download();
    p.lse->download();
    unshardSequence(p.o->hostRef, o.hostRef, r, ranks, sharding);
    unshardSequence(p.lse->hostRef, lse.hostRef, r, ranks, sharding);
  }
  ReferenceOutput want =
      referenceAttention(spec, q.hostRef, k.hostRef, v.hostRef, args.host);
  test::compareOutputs(spec, o, lse, want, batch, s);
  if (bytes) { // O and LSE in global order, for bit-for-bit comparisons
    *bytes = o.host;
    bytes->insert(bytes->end(), lse.host.begin(), lse.host.end());
  }
  return stats;
}

/// The whole-sequence spec of a ring kernel (returning LSE) and its kernel.
struct LoadedRing {
  AttentionSpec spec;
  std::unique_ptr<GpuAttentionKernel> kernel;
};

/// Ring kernel \p id, loaded once per test case into \p loaded (a map:
/// references stay valid as it grows).
LoadedRing &ringKernel(Device &dev, std::map<std::string, LoadedRing> &loaded,
                       const std::string &id) {
  if (auto it = loaded.find(id); it != loaded.end())
    return it->second;
  for (const testing::RingKernel &k : testing::ringKernels())
    if (k.id == id) {
      LoadedRing l;
      l.spec = k.spec;
      l.spec.returnLse = true;
      l.kernel =
          test::loadAheadOfTime(id, testing::ringKernelSpec(k.spec), dev);
      return loaded.emplace(id, std::move(l)).first->second;
    }
  FAIL("no ring kernel " << id);
  throw;
}

/// Runs every rank as a thread with its own stream over \p kind's
/// transports (host-staged by default), shifts overlapped or not as
/// \p overlap says, under \p schedule (the ring by default); rethrows the
/// first rank's exception.
std::vector<RingStats>
runThreads(Device &dev, const LoadedRing &ring, const GpuPagedOps &ops,
           Sharding sharding, std::vector<RankTensors> &parts,
           const Arguments &args,
           test::RankTransport kind = test::RankTransport::Staged,
           bool overlap = true, RingSchedule schedule = RingSchedule::Ring) {
  std::vector<RingStats> stats(parts.size());
  test::runRankThreads(
      dev, static_cast<int>(parts.size()),
      [&](int r, RingTransport &t, CUstream stream) {
        RankTensors &p = parts[size_t(r)];
        RingOptions opts;
        opts.sharding = sharding;
        opts.overlap = overlap;
        opts.schedule = schedule;
        stats[size_t(r)] = ringAttentionGpu(
            ring.spec, *ring.kernel, ops, dev, t, p.q->deviceRef,
            p.k->deviceRef, p.v->deviceRef, p.o->deviceRef, &p.lse->deviceRef,
            args, opts, stream);
      },
      kind);
  return stats;
}

const char *name(Sharding s) {
  return s == Sharding::Zigzag ? "zigzag" : "contiguous";
}

} // namespace

TEST_CASE("GPU ring forward over NCCL, one rank: causal zigzag, document "
          "and window masks against the whole sequence's reference",
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
  std::map<std::string, LoadedRing> kernels;
  NcclCommunicator comm(nccl.uniqueId(), 1, 0, dev);
  CUstream stream = nullptr;
  REQUIRE(Driver::get().cuStreamCreate(&stream, CU_STREAM_DEFAULT) ==
          CUDA_SUCCESS);
  NcclTransport t(comm.handle(), stream);
  struct Case {
    const char *id;
    Sharding sharding;
    int computed; // chunk pairs computed of perRank^2 (0: not checked)
  };
  for (Case c : {Case{"ring_causal_tl_d64_bf16_g2", Sharding::Zigzag, 3},
                 Case{"ring_doc_d64_fp16_g1", Sharding::Zigzag, 0},
                 Case{"ring_window_lr_d64_bf16_g1", Sharding::Contiguous, 1}}) {
    INFO(c.id << ", " << name(c.sharding) << ", one NCCL rank");
    LoadedRing &ring = ringKernel(dev, kernels, c.id);
    std::vector<RingStats> stats = checkRing(
        dev, ring.spec, 1, c.sharding, 2, 226,
        [&](std::vector<RankTensors> &parts, const Arguments &args) {
          RankTensors &p = parts[0];
          RingOptions opts;
          opts.sharding = c.sharding;
          opts.schedule = RingSchedule::Ring;
          RingStats st = ringAttentionGpu(
              ring.spec, *ring.kernel, ops, dev, t, p.q->deviceRef,
              p.k->deviceRef, p.v->deviceRef, p.o->deviceRef, &p.lse->deviceRef,
              args, opts, stream);
          REQUIRE(Driver::get().cuStreamSynchronize(stream) == CUDA_SUCCESS);
          return std::vector<RingStats>{st};
        });
    // Zigzag on one rank: chunks 0 and 1, the causal pair (0, 1) is empty
    // (the document mask is causal too, but whether its pair is skipped is
    // the classifier's business: 3 or 4).
    if (c.computed > 0)
      CHECK(stats[0].pairsComputed == c.computed);
    CHECK(stats[0].pairsComputed >=
          3 - 2 * (c.sharding == Sharding::Contiguous));
    CHECK(stats[0].pairsComputed + stats[0].pairsSkipped ==
          (c.sharding == Sharding::Zigzag ? 4 : 1));
    CHECK(stats[0].shifts == 0);
  }
  REQUIRE(Driver::get().cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("GPU ring forward, ranks as threads on one GPU: 2 and 4 ranks, "
          "both shardings, against the whole sequence's reference",
          "[gpu][ring]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedRing> kernels;
  for (const char *id : {"ring_causal_tl_d64_bf16_g2", "ring_doc_d64_fp16_g1",
                         "ring_window_lr_d64_bf16_g1"})
    for (int ranks : {2, 4})
      for (Sharding sh : {Sharding::Zigzag, Sharding::Contiguous}) {
        INFO(id << ", " << ranks << " ranks, " << name(sh));
        LoadedRing &ring = ringKernel(dev, kernels, id);
        // Zigzag chunks of 200 / (2 R) = 50 or 25 tokens: not whole tiles.
        std::vector<RingStats> stats = checkRing(
            dev, ring.spec, ranks, sh, 2, 200,
            [&](std::vector<RankTensors> &parts, const Arguments &args) {
              return runThreads(dev, ring, ops, sh, parts, args);
            });
        for (int r = 0; r < ranks; ++r) {
          CHECK(stats[size_t(r)].shifts == ranks - 1);
          // Host-staged shifts do not overlap (overlapShifts says false).
          CHECK_FALSE(stats[size_t(r)].overlapped);
          if (std::string(id) != "ring_causal_tl_d64_bf16_g2")
            continue;
          // Causal: zigzag computes 2R + 1 of 4R pairs on every rank,
          // contiguous r + 1 of R.
          CHECK(stats[size_t(r)].pairsComputed ==
                (sh == Sharding::Zigzag ? 2 * ranks + 1 : r + 1));
        }
      }
}

TEST_CASE("GPU ring forward refuses a kernel of another spec and an odd "
          "zigzag length",
          "[gpu][ring]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedRing> kernels;
  LoadedRing &causal = ringKernel(dev, kernels, "ring_causal_tl_d64_bf16_g2");
  LoadedRing &window = ringKernel(dev, kernels, "ring_window_lr_d64_bf16_g1");
  const AttentionSpec &spec = causal.spec;
  auto tensors = [&](int64_t l) {
    RankTensors p;
    p.q = std::make_unique<GpuTensor>(dev, spec.dtypeQ,
                                      std::array<int64_t, 4>{1, 4, l, 64});
    p.k = std::make_unique<GpuTensor>(dev, spec.dtypeK,
                                      std::array<int64_t, 4>{1, 2, l, 64});
    p.v = std::make_unique<GpuTensor>(dev, spec.dtypeV,
                                      std::array<int64_t, 4>{1, 2, l, 64});
    p.o = std::make_unique<GpuTensor>(dev, spec.dtypeO,
                                      std::array<int64_t, 4>{1, 4, l, 64});
    p.lse = std::make_unique<GpuTensor>(dev, DType::F32,
                                        std::array<int64_t, 4>{1, 4, l, 1}, 3);
    return p;
  };
  InProcessRing host(1);
  StagedDeviceRing t(host.rank(0), nullptr);
  RingOptions zigzag;
  zigzag.sharding = Sharding::Zigzag;
  RankTensors even = tensors(64), odd = tensors(63);
  CHECK_THROWS_WITH(
      ringAttentionGpu(spec, *window.kernel, ops, dev, t, even.q->deviceRef,
                       even.k->deviceRef, even.v->deviceRef, even.o->deviceRef,
                       &even.lse->deviceRef, {}, zigzag),
      Catch::Contains("was not compiled from contextParallelSpec"));
  CHECK_THROWS_WITH(ringAttentionGpu(spec, *causal.kernel, ops, dev, t,
                                     odd.q->deviceRef, odd.k->deviceRef,
                                     odd.v->deviceRef, odd.o->deviceRef,
                                     &odd.lse->deviceRef, {}, zigzag),
                    Catch::Contains("local seqlen_q = 63 is odd"));
}

TEST_CASE("GPU ring forward, overlapped shifts: device-to-device ranks as "
          "threads, bit-identical to the serial path and against the "
          "reference",
          "[gpu][ring][overlap]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedRing> kernels;
  struct Case {
    const char *id;
    Sharding sharding;
  };
  for (Case c : {Case{"ring_causal_tl_d64_bf16_g2", Sharding::Zigzag},
                 Case{"ring_doc_d64_fp16_g1", Sharding::Zigzag},
                 Case{"ring_window_lr_d64_bf16_g1", Sharding::Contiguous}})
    for (int ranks : {2, 4}) {
      LoadedRing &ring = ringKernel(dev, kernels, c.id);
      // Chunks of 1000 / (2 R) or 1000 / R tokens: several tiles, not
      // whole ones, so a step's kernels run long enough for a racing copy
      // to land while they read.
      std::vector<uint8_t> out[2];
      for (int overlap = 0; overlap < 2; ++overlap) {
        INFO(c.id << ", " << ranks << " ranks, " << name(c.sharding)
                  << (overlap ? ", overlapped" : ", serial"));
        std::vector<RingStats> stats = checkRing(
            dev, ring.spec, ranks, c.sharding, 2, 1000,
            [&](std::vector<RankTensors> &parts, const Arguments &args) {
              return runThreads(dev, ring, ops, c.sharding, parts, args,
                                test::RankTransport::Device, overlap != 0);
            },
            &out[overlap]);
        for (const RingStats &st : stats) {
          CHECK(st.shifts == ranks - 1);
          CHECK(st.overlapped == (overlap != 0));
        }
      }
      INFO(c.id << ", " << ranks << " ranks: overlapped vs serial");
      REQUIRE(out[0].size() == out[1].size());
      CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size()) == 0);
    }
}

TEST_CASE("GPU ring forward, all-gather schedule: 1 to 4 ranks as threads, "
          "both shardings, against the reference, overlapped vs serial bit "
          "for bit, and Auto's choice",
          "[gpu][ring][allgather]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedRing> kernels;
  for (const char *id : {"ring_causal_tl_d64_bf16_g2", "ring_doc_d64_fp16_g1",
                         "ring_window_lr_d64_bf16_g1"})
    for (int ranks : {1, 2, 3, 4})
      for (Sharding sh : {Sharding::Zigzag, Sharding::Contiguous}) {
        LoadedRing &ring = ringKernel(dev, kernels, id);
        // 216 tokens: zigzag chunks of 27 to 108, contiguous of 54 to 216.
        std::vector<uint8_t> out[2];
        for (int overlap = 0; overlap < 2; ++overlap) {
          INFO(id << ", " << ranks << " ranks, " << name(sh)
                  << (overlap ? ", overlapped" : ", serial"));
          std::vector<RingStats> stats = checkRing(
              dev, ring.spec, ranks, sh, 2, 216,
              [&](std::vector<RankTensors> &parts, const Arguments &args) {
                return runThreads(dev, ring, ops, sh, parts, args,
                                  test::RankTransport::Device, overlap != 0,
                                  RingSchedule::AllGather);
              },
              &out[overlap]);
          for (const RingStats &st : stats) {
            CHECK(st.allGather);
            CHECK(st.shifts == ranks - 1);
            CHECK(st.overlapped == (overlap != 0 && ranks > 1));
            // One call per local query chunk against the whole key
            // sequence; none of these masks empties a whole chunk row.
            CHECK(st.pairsComputed == (sh == Sharding::Zigzag ? 2 : 1));
            CHECK(st.pairsSkipped == 0);
          }
        }
        INFO(id << ", " << ranks << " ranks, " << name(sh)
                << ": overlapped vs serial");
        REQUIRE(out[0].size() == out[1].size());
        CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size()) == 0);
      }
  // Auto gathers while the K/V of all ranks take no more bytes per token
  // than the rank's Q and O: Hq 4, Hkv 2 (g2) up to 2 ranks, Hq = Hkv (g1)
  // only one.
  struct AutoCase {
    const char *id;
    int ranks;
    bool gathers;
  };
  for (AutoCase c : {AutoCase{"ring_causal_tl_d64_bf16_g2", 2, true},
                     AutoCase{"ring_causal_tl_d64_bf16_g2", 4, false},
                     AutoCase{"ring_doc_d64_fp16_g1", 1, true},
                     AutoCase{"ring_doc_d64_fp16_g1", 2, false}}) {
    INFO(c.id << ", " << c.ranks << " ranks, Auto");
    LoadedRing &ring = ringKernel(dev, kernels, c.id);
    std::vector<RingStats> stats =
        checkRing(dev, ring.spec, c.ranks, Sharding::Zigzag, 1, 200,
                  [&](std::vector<RankTensors> &parts, const Arguments &args) {
                    return runThreads(dev, ring, ops, Sharding::Zigzag, parts,
                                      args, test::RankTransport::Device, true,
                                      RingSchedule::Auto);
                  });
    for (const RingStats &st : stats)
      CHECK(st.allGather == c.gathers);
  }
}

namespace {

/// Milliseconds per ring forward of the causal zigzag ring kernel over a
/// global sequence of \p n tokens (batch 1, constant inputs), \p ranks
/// ranks as threads on one GPU over device-to-device transports: the
/// wall time of \p reps calls per rank after one warm-up call.
double timeThreads(Device &dev, const LoadedRing &ring, const GpuPagedOps &ops,
                   int ranks, int64_t n, bool overlap, int reps,
                   RingSchedule schedule = RingSchedule::Ring) {
  const AttentionSpec &spec = ring.spec;
  const int64_t l = n / ranks, hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t d = spec.headDimQK;
  std::vector<RankTensors> parts(static_cast<size_t>(ranks));
  for (RankTensors &p : parts) {
    auto t = [&](DType dt, int64_t h, int64_t dim, int rank = 4) {
      auto g = std::make_unique<GpuTensor>(
          dev, dt, std::array<int64_t, 4>{1, h, l, dim}, rank);
      g->device.fill(0x3C); // bf16 0x3C3C ~ 0.0115 (finite scores)
      return g;
    };
    p.q = t(spec.dtypeQ, hq, d), p.k = t(spec.dtypeK, hkv, d);
    p.v = t(spec.dtypeV, hkv, d), p.o = t(spec.dtypeO, hq, d);
    p.lse = t(DType::F32, hq, 1, 3);
  }
  auto run = [&](int calls) {
    test::runRankThreads(
        dev, ranks,
        [&](int r, RingTransport &t, CUstream stream) {
          RankTensors &p = parts[size_t(r)];
          RingOptions opts;
          opts.sharding = Sharding::Zigzag;
          opts.overlap = overlap;
          opts.schedule = schedule;
          for (int c = 0; c < calls; ++c)
            ringAttentionGpu(spec, *ring.kernel, ops, dev, t, p.q->deviceRef,
                             p.k->deviceRef, p.v->deviceRef, p.o->deviceRef,
                             &p.lse->deviceRef, {}, opts, stream);
        },
        test::RankTransport::Device);
  };
  run(1);
  dev.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  run(reps);
  dev.synchronize();
  std::chrono::duration<double, std::milli> ms =
      std::chrono::steady_clock::now() - t0;
  return ms.count() / reps;
}

/// The same through one NCCL rank (no shifts: a ring of one holds the
/// whole sequence), or -1 where libnccl does not load.
double timeNccl(Device &dev, const LoadedRing &ring, const GpuPagedOps &ops,
                int64_t n, bool overlap, int reps) {
  if (!Nccl::available())
    return -1;
  const AttentionSpec &spec = ring.spec;
  const int64_t hq = spec.headsQ, hkv = spec.headsKV, d = spec.headDimQK;
  NcclCommunicator comm(Nccl::get().uniqueId(), 1, 0, dev);
  const Driver &drv = Driver::get();
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  double out = 0;
  {
    NcclTransport t(comm.handle(), stream);
    GpuTensor q(dev, spec.dtypeQ, {1, hq, n, d}),
        k(dev, spec.dtypeK, {1, hkv, n, d});
    GpuTensor v(dev, spec.dtypeV, {1, hkv, n, d}),
        o(dev, spec.dtypeO, {1, hq, n, d});
    GpuTensor lse(dev, DType::F32, {1, hq, n, 1}, 3);
    for (GpuTensor *g : {&q, &k, &v})
      g->device.fill(0x3C);
    RingOptions opts;
    opts.sharding = Sharding::Zigzag;
    opts.overlap = overlap;
    opts.schedule = RingSchedule::Ring;
    auto call = [&] {
      ringAttentionGpu(spec, *ring.kernel, ops, dev, t, q.deviceRef,
                       k.deviceRef, v.deviceRef, o.deviceRef, &lse.deviceRef,
                       {}, opts, stream);
    };
    call();
    REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      call();
    REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    std::chrono::duration<double, std::milli> ms =
        std::chrono::steady_clock::now() - t0;
    out = ms.count() / reps;
  }
  REQUIRE(drv.cuStreamDestroy(stream) == CUDA_SUCCESS);
  return out;
}

} // namespace

TEST_CASE("GPU ring forward timing: serial vs overlapped shifts on one GPU",
          "[.ringbench]") {
  Device &dev = Device::get(0);
  dev.makeCurrent();
  GpuPagedOps ops(dev);
  std::map<std::string, LoadedRing> kernels;
  LoadedRing &ring = ringKernel(dev, kernels, "ring_causal_tl_d64_bf16_g2");
  const int reps = 10;
  std::printf("ring forward, causal zigzag, bf16, Hq 4 Hkv 2 D 64, batch 1; "
              "ms per call (mean of %d), ring serial / ring overlapped; "
              "ranks as threads also all-gather (overlapped)\n",
              reps);
  for (int64_t n : {16384, 32768, 65536}) {
    // One NCCL rank makes no shift (the ring of one holds everything):
    // both orderings run the same work, so they must time the same.
    double ns = timeNccl(dev, ring, ops, n, false, reps);
    double no = timeNccl(dev, ring, ops, n, true, reps);
    if (ns >= 0)
      std::printf("N %6lld  nccl 1 rank           %8.3f / %8.3f  (x%.3f)\n",
                  static_cast<long long>(n), ns, no, ns / no);
    // Ranks as threads sharing the GPU: the shifts are device copies of
    // the K/V slice (n / R tokens), hidden behind the other streams' work
    // when overlapped.
    for (int ranks : {1, 2, 4}) {
      double s = timeThreads(dev, ring, ops, ranks, n, false, reps);
      double o = timeThreads(dev, ring, ops, ranks, n, true, reps);
      double ag = timeThreads(dev, ring, ops, ranks, n, true, reps,
                              RingSchedule::AllGather);
      std::printf("N %6lld  %d ranks as threads   %8.3f / %8.3f  (x%.3f)  "
                  "all-gather %8.3f\n",
                  static_cast<long long>(n), ranks, s, o, s / o, ag);
    }
  }
}
