//===- RingMultiGpuTest.cpp - The GPU ring over NCCL on several GPUs ------===//
//
// Issue 20 §2, for machines with several GPUs (skipped, with the reason,
// on fewer than 2 or without libnccl): rank r on GPU r, one thread per
// rank, each with its own communicator (ncclCommInitRank from one unique
// id), stream, NcclTransport, kernel object and GpuPagedOps.
// [gpu][ring][multigpu] checks 2, 4 and 8 ranks (as many as there are
// GPUs) against the float64 reference of the whole sequence, overlapped
// and serial, bit for bit against each other. [gpu][ring][multigpu]
// [backward] checks ringAttentionBackwardGpu on the same machines (causal
// zigzag and a document mask): dQ, dK and dV against the float64 reference
// backward of the whole sequence (RingBackwardGpuTest.cpp's tolerances),
// deterministic mode bit for bit run to run and overlapped vs serial.
// The hidden [.ringmultibench] case times the forward at N = 128k-1M
// (causal zigzag and a document mask of 16k-token documents, zigzag) on R
// GPUs against one GPU running the whole sequence: fraction of ideal =
// T(1) / (R T(R)).
//
//===----------------------------------------------------------------------===//
#include "BackwardTestSupport.h"
#include "GpuTestSupport.h"
#include "KernelMatrix.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/NcclTransport.h"
#include "flashjit/runtime/PagedOps.h"
#include "flashjit/runtime/RingGpu.h"

#include <catch2/catch.hpp>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;

namespace {

/// One rank on its GPU: its device, kernel, merge ops, arguments (device
/// buffers on its GPU) and tensors.
struct GpuRank {
  Device *dev = nullptr;
  std::shared_ptr<GpuAttentionKernel> kernel; // cached per (id, device)
  std::shared_ptr<GpuPagedOps> ops;
  std::unique_ptr<test::VariantArgs> args; // correctness runs
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  Arguments benchArgs; // timing runs
  std::unique_ptr<GpuTensor> q, k, v, o, lse;
};

/// Whether this machine can run the multi-GPU cases; the reason if not.
bool multiGpu(std::string &why) {
  if (!Nccl::available(&why))
    return false;
  if (Device::count() < 2) {
    why = "fewer than 2 GPUs";
    return false;
  }
  return true;
}

/// Ring kernel \p id's whole-sequence spec (returning LSE).
AttentionSpec ringSpec(const std::string &id) {
  for (const testing::RingKernel &k : testing::ringKernels())
    if (k.id == id) {
      AttentionSpec s = k.spec;
      s.returnLse = true;
      return s;
    }
  FAIL("no ring kernel " << id);
  throw;
}

/// Kernels and merge ops per device, loaded once in a test case (the
/// timing case makes many rings) and released before the devices.
struct RankCache {
  std::map<std::pair<std::string, int>, std::shared_ptr<GpuAttentionKernel>>
      kernels;
  std::map<int, std::shared_ptr<GpuPagedOps>> ops;
  std::map<std::pair<std::string, int>,
           std::shared_ptr<GpuAttentionBackwardKernel>>
      backward; // [backward]: one per (id, device)
};

/// Rank r's device, kernel and ops for ring kernel \p id.
GpuRank makeRank(RankCache &cache, int r, const std::string &id,
                 const AttentionSpec &spec) {
  GpuRank g;
  g.dev = &Device::get(r);
  g.dev->makeCurrent();
  std::shared_ptr<GpuAttentionKernel> &k = cache.kernels[{id, r}];
  if (!k)
    k = test::loadAheadOfTime(id, testing::ringKernelSpec(spec), *g.dev);
  std::shared_ptr<GpuPagedOps> &o = cache.ops[r];
  if (!o)
    o = std::make_shared<GpuPagedOps>(*g.dev);
  g.kernel = k, g.ops = o;
  return g;
}

/// Runs ringAttentionGpu on every rank (rank r on its GPU, one thread
/// each, a communicator per rank): one warm-up call, then \p reps timed
/// calls (0: none). Returns the ms per timed call (0 without reps) and
/// each rank's stats in \p stats; rethrows the first rank's exception.
double runRanks(std::vector<GpuRank> &ranks, const AttentionSpec &spec,
                Sharding sharding, bool overlap, int reps,
                std::vector<RingStats> &stats) {
  const int n = static_cast<int>(ranks.size());
  NcclUniqueId id = Nccl::get().uniqueId();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  stats.assign(static_cast<size_t>(n), {});
  std::barrier sync(n);
  double ms = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      bool passed = false; // both barriers
      try {
        GpuRank &g = ranks[size_t(r)];
        g.dev->makeCurrent();
        const Driver &d = Driver::get();
        CUstream stream = nullptr;
        if (d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) != CUDA_SUCCESS)
          throw std::runtime_error("cuStreamCreate failed");
        {
          NcclCommunicator comm(id, n, r, *g.dev);
          NcclTransport t(comm.handle(), stream);
          RingOptions opts;
          opts.sharding = sharding;
          opts.overlap = overlap;
          opts.schedule = RingSchedule::Ring; // what this file measures
          const Arguments &args = g.args ? g.args->device : g.benchArgs;
          auto call = [&] {
            stats[size_t(r)] = ringAttentionGpu(
                spec, *g.kernel, *g.ops, *g.dev, t, g.q->deviceRef,
                g.k->deviceRef, g.v->deviceRef, g.o->deviceRef,
                &g.lse->deviceRef, args, opts, stream);
          };
          call();
          d.cuStreamSynchronize(stream);
          sync.arrive_and_wait();
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < reps; ++i)
            call();
          d.cuStreamSynchronize(stream);
          sync.arrive_and_wait();
          passed = true;
          std::chrono::duration<double, std::milli> el =
              std::chrono::steady_clock::now() - t0;
          if (r == 0 && reps > 0)
            ms = el.count() / reps;
        }
        d.cuStreamDestroy(stream);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        if (!passed)
          sync.arrive_and_drop();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
  return ms;
}

} // namespace

TEST_CASE("GPU ring forward over NCCL on 2, 4 and 8 GPUs against the whole "
          "sequence's reference, overlapped and serial bit for bit",
          "[gpu][ring][multigpu]") {
  std::string why;
  if (!multiGpu(why)) {
    WARN("SKIPPED: " << why);
    return;
  }
  struct Case {
    const char *id;
    Sharding sharding;
  };
  // 2000 tokens: chunks of 125 or 250 (8 ranks zigzag: 125), not whole
  // tiles; documents of 37 tokens straddle them.
  const int64_t batch = 2, s = 2000;
  RankCache cache;
  for (Case c : {Case{"ring_causal_tl_d64_bf16_g2", Sharding::Zigzag},
                 Case{"ring_doc_d64_fp16_g1", Sharding::Zigzag},
                 Case{"ring_window_lr_d64_bf16_g1", Sharding::Contiguous}}) {
    AttentionSpec spec = ringSpec(c.id);
    const int64_t hq = spec.headsQ, hkv = spec.headsKV, d = spec.headDimQK;
    Device &dev0 = Device::get(0);
    dev0.makeCurrent();
    std::mt19937_64 rng(2020);
    GpuTensor q(dev0, spec.dtypeQ, {batch, hq, s, d});
    GpuTensor k(dev0, spec.dtypeK, {batch, hkv, s, d});
    GpuTensor v(dev0, spec.dtypeV, {batch, hkv, s, d});
    q.randomize(rng, 2.0f), k.randomize(rng, 2.0f), v.randomize(rng);
    test::VariantArgs hostArgs(dev0, spec, s, s);
    ReferenceOutput want = referenceAttention(spec, q.hostRef, k.hostRef,
                                              v.hostRef, hostArgs.host);
    for (int n : {2, 4, 8}) {
      if (n > Device::count())
        continue;
      std::vector<uint8_t> out[2];
      for (int overlap = 0; overlap < 2; ++overlap) {
        INFO(c.id << ", " << n << " GPUs" << (overlap ? ", overlapped" : ""));
        std::vector<GpuRank> ranks;
        const int64_t l = s / n;
        for (int r = 0; r < n; ++r) {
          GpuRank g = makeRank(cache, r, c.id, spec);
          g.args = std::make_unique<test::VariantArgs>(*g.dev, spec, s, s);
          auto t = [&](const GpuTensor *global, DType dt, int64_t h,
                       int64_t dim, int rank = 4) {
            auto p = std::make_unique<GpuTensor>(
                *g.dev, dt, std::array<int64_t, 4>{batch, h, l, dim}, rank);
            if (global) {
              shardSequence(global->hostRef, p->hostRef, r, n, c.sharding);
              p->device.copyFromHost(p->host.data(), p->host.size());
            } else {
              p->poison();
            }
            return p;
          };
          g.q = t(&q, spec.dtypeQ, hq, d), g.k = t(&k, spec.dtypeK, hkv, d);
          g.v = t(&v, spec.dtypeV, hkv, d),
          g.o = t(nullptr, spec.dtypeO, hq, d);
          g.lse = t(nullptr, DType::F32, hq, 1, 3);
          ranks.push_back(std::move(g));
        }
        std::vector<RingStats> stats;
        runRanks(ranks, spec, c.sharding, overlap != 0, 0, stats);
        GpuTensor o(dev0, spec.dtypeO, {batch, hq, s, d});
        GpuTensor lse(dev0, DType::F32, {batch, hq, s, 1}, 3);
        for (int r = 0; r < n; ++r) {
          GpuRank &g = ranks[size_t(r)];
          g.o->download(), g.lse->download();
          unshardSequence(g.o->hostRef, o.hostRef, r, n, c.sharding);
          unshardSequence(g.lse->hostRef, lse.hostRef, r, n, c.sharding);
          CHECK(stats[size_t(r)].shifts == n - 1);
          CHECK(stats[size_t(r)].overlapped == (overlap != 0));
        }
        test::compareOutputs(spec, o, lse, want, batch, s);
        out[overlap] = o.host;
        out[overlap].insert(out[overlap].end(), lse.host.begin(),
                            lse.host.end());
      }
      INFO(c.id << ", " << n << " GPUs: overlapped vs serial");
      REQUIRE(out[0].size() == out[1].size());
      CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size()) == 0);
    }
  }
}

namespace {

/// Ms per ring forward of ring kernel \p id over \p n GPUs at global
/// seqlen \p s (batch 1, constant inputs; a document mask's documents
/// 16384 tokens long), zigzag, overlapped or not.
double timeGpus(RankCache &cache, const std::string &id, int n, int64_t s,
                bool overlap) {
  AttentionSpec spec = ringSpec(id);
  const int64_t hq = spec.headsQ, hkv = spec.headsKV, d = spec.headDimQK;
  const int64_t l = s / n;
  std::vector<int32_t> doc(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i)
    doc[size_t(i)] = static_cast<int32_t>(i / 16384);
  std::vector<GpuRank> ranks;
  for (int r = 0; r < n; ++r) {
    GpuRank g = makeRank(cache, r, id, spec);
    for (const BufferDecl &b : spec.variant.buffers()) {
      auto buf = std::make_unique<DeviceBuffer>(*g.dev, doc.size() * 4);
      buf->copyFromHost(doc.data(), doc.size() * 4);
      g.benchArgs.bind(b.name, static_cast<const int32_t *>(buf->data()), s);
      g.buffers.push_back(std::move(buf));
    }
    auto t = [&](DType dt, int64_t h, int64_t dim, int rank = 4) {
      auto p = std::make_unique<GpuTensor>(
          *g.dev, dt, std::array<int64_t, 4>{1, h, l, dim}, rank);
      p->device.fill(0x3C); // bf16 0x3C3C ~ 0.0115, fp16 0x3C3C ~ 1.06
      return p;
    };
    g.q = t(spec.dtypeQ, hq, d), g.k = t(spec.dtypeK, hkv, d);
    g.v = t(spec.dtypeV, hkv, d), g.o = t(spec.dtypeO, hq, d);
    g.lse = t(DType::F32, hq, 1, 3);
    ranks.push_back(std::move(g));
  }
  std::vector<RingStats> stats;
  return runRanks(ranks, spec, Sharding::Zigzag, overlap, 5, stats);
}

} // namespace

TEST_CASE("GPU ring forward throughput on several GPUs against the ideal",
          "[.ringmultibench]") {
  std::string why;
  if (!multiGpu(why)) {
    WARN("SKIPPED: " << why);
    return;
  }
  std::printf("ring forward, zigzag, Hq 4 Hkv 2 D 64, batch 1, %d GPUs; ms "
              "per call (mean of 5); fraction of ideal = T1 / (R * TR)\n",
              Device::count());
  RankCache cache;
  for (const char *id : {"ring_causal_tl_d64_bf16_g2", "ring_doc_d64_fp16_g1"})
    for (int64_t s : {131072, 262144, 524288, 1048576}) {
      // One GPU over a ring of one NCCL rank: the whole sequence.
      double t1 = timeGpus(cache, id, 1, s, true);
      for (int n : {2, 4, 8}) {
        if (n > Device::count())
          continue;
        double ser = timeGpus(cache, id, n, s, false);
        double ovl = timeGpus(cache, id, n, s, true);
        std::printf("%-28s N %8lld  1 GPU %9.3f  %d GPUs serial %9.3f "
                    "(%.0f%%)  overlapped %9.3f (%.0f%%)\n",
                    id, static_cast<long long>(s), t1, n, ser,
                    100 * t1 / (n * ser), ovl, 100 * t1 / (n * ovl));
      }
    }
}

namespace {

namespace bwd = flashjit::test::backward;

/// A backward case over the whole sequence (host copies, on GPU 0): random
/// inputs, O and LSE from the float64 forward rounded to the kernel's
/// dtypes (so the check depends on no forward kernel), the gradients put
/// back from the ranks, and the float64 reference backward.
struct BackwardCase {
  AttentionSpec spec;
  int64_t batch = 2, s = 0;
  std::unique_ptr<GpuTensor> q, k, v, o, dO, lse, dq, dk, dv;
  ReferenceOutput ref;
  ReferenceGradients want;
};

/// Ring backward kernel \p id of ringBackwardKernels(): the whole-sequence
/// case at batch 2 and global seqlen \p s.
std::unique_ptr<BackwardCase> makeBackwardCase(const std::string &id,
                                               int64_t s) {
  auto c = std::make_unique<BackwardCase>();
  bool found = false;
  for (const testing::RingKernel &k : testing::ringBackwardKernels())
    if (k.id == id)
      c->spec = k.spec, found = true;
  REQUIRE(found);
  const AttentionSpec &spec = c->spec;
  const int64_t b = c->batch, hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dvv = spec.headDimV;
  const DType dt = spec.dtypeQ;
  c->s = s;
  Device &dev0 = Device::get(0);
  dev0.makeCurrent();
  auto t = [&](std::unique_ptr<GpuTensor> &p, DType dtype, int64_t h,
               int64_t dim, int rank = 4) {
    p = std::make_unique<GpuTensor>(dev0, dtype,
                                    std::array<int64_t, 4>{b, h, s, dim}, rank);
  };
  t(c->q, dt, hq, dqk), t(c->k, dt, hkv, dqk), t(c->v, dt, hkv, dvv);
  t(c->o, dt, hq, dvv), t(c->dO, dt, hq, dvv), t(c->lse, DType::F32, hq, 1, 3);
  t(c->dq, dt, hq, dqk), t(c->dk, dt, hkv, dqk), t(c->dv, dt, hkv, dvv);
  std::mt19937_64 rng(2021);
  c->q->randomize(rng, 2.0f), c->k->randomize(rng, 2.0f);
  c->v->randomize(rng), c->dO->randomize(rng);
  test::VariantArgs args(dev0, spec, s, s); // doc_id: s global entries
  AttentionSpec fwd = spec;
  fwd.returnLse = true;
  c->ref = referenceAttention(fwd, c->q->hostRef, c->k->hostRef, c->v->hostRef,
                              args.host);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < s; ++i) {
        bwd::put(*c->lse, bi, h, i, 0, c->ref.lseAt(bi, h, i));
        for (int64_t d = 0; d < dvv; ++d)
          bwd::put(*c->o, bi, h, i, d, c->ref.oAt(bi, h, i, d));
      }
  c->want =
      referenceAttentionBackward(spec, c->q->hostRef, c->k->hostRef,
                                 c->v->hostRef, c->dO->hostRef, args.host, {});
  return c;
}

/// One rank of the backward on its GPU: its kernel object (one per device,
/// loaded once per test case), merge ops, the global arguments in its
/// memory and its parts of the tensors (gradients NaN-poisoned).
struct BackwardRank {
  Device *dev = nullptr;
  std::shared_ptr<GpuAttentionBackwardKernel> kernel;
  std::shared_ptr<GpuPagedOps> ops;
  std::unique_ptr<test::VariantArgs> args;
  std::unique_ptr<GpuTensor> q, k, v, o, dO, lse, dq, dk, dv;
};

/// Rank r of \p n of case \p c (kernel \p id) under \p sharding.
BackwardRank makeBackwardRank(RankCache &cache, const std::string &id,
                              const BackwardCase &c, int r, int n,
                              Sharding sharding) {
  BackwardRank g;
  g.dev = &Device::get(r);
  g.dev->makeCurrent();
  std::shared_ptr<GpuAttentionBackwardKernel> &k = cache.backward[{id, r}];
  if (!k)
    k = bwd::loadBackward(id, testing::ringKernelSpec(c.spec), *g.dev);
  std::shared_ptr<GpuPagedOps> &o = cache.ops[r];
  if (!o)
    o = std::make_shared<GpuPagedOps>(*g.dev);
  g.kernel = k, g.ops = o;
  g.args = std::make_unique<test::VariantArgs>(*g.dev, c.spec, c.s, c.s);
  auto part = [&](std::unique_ptr<GpuTensor> &p, const GpuTensor &global) {
    const TensorRef &w = global.hostRef;
    p = std::make_unique<GpuTensor>(
        *g.dev, w.dtype,
        std::array<int64_t, 4>{w.shape[0], w.shape[1], c.s / n, w.shape[3]},
        global.hostRef.rank);
    shardSequence(w, p->hostRef, r, n, sharding);
    bwd::upload(*p);
  };
  part(g.q, *c.q), part(g.k, *c.k), part(g.v, *c.v), part(g.o, *c.o);
  part(g.dO, *c.dO), part(g.lse, *c.lse);
  part(g.dq, *c.dq), part(g.dk, *c.dk), part(g.dv, *c.dv);
  for (GpuTensor *t : {g.dq.get(), g.dk.get(), g.dv.get()})
    t->poison();
  return g;
}

/// Runs ringAttentionBackwardGpu on every rank (rank r on its GPU, one
/// thread each, a communicator per rank) and waits for it; returns each
/// rank's stats and rethrows the first rank's exception.
std::vector<RingStats> runBackwardRanks(std::vector<BackwardRank> &ranks,
                                        const AttentionSpec &spec,
                                        const RingOptions &opts,
                                        const GpuBackwardOptions &backward) {
  const int n = static_cast<int>(ranks.size());
  NcclUniqueId id = Nccl::get().uniqueId();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<RingStats> stats(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        BackwardRank &g = ranks[size_t(r)];
        g.dev->makeCurrent();
        const Driver &d = Driver::get();
        CUstream stream = nullptr;
        if (d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) != CUDA_SUCCESS)
          throw std::runtime_error("cuStreamCreate failed");
        {
          NcclCommunicator comm(id, n, r, *g.dev);
          NcclTransport t(comm.handle(), stream);
          ringAttentionBackwardGpu(
              spec, *g.kernel, *g.ops, *g.dev, t, g.q->deviceRef,
              g.k->deviceRef, g.v->deviceRef, g.o->deviceRef, g.lse->deviceRef,
              g.dO->deviceRef, g.dq->deviceRef, g.dk->deviceRef,
              g.dv->deviceRef, g.args->device, opts, backward, stream,
              &stats[size_t(r)]);
          if (d.cuStreamSynchronize(stream) != CUDA_SUCCESS)
            throw std::runtime_error("cuStreamSynchronize failed");
        }
        d.cuStreamDestroy(stream);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
  return stats;
}

/// The gradients of \p ranks put back in global order into \p c, checked
/// against the float64 reference backward; returns the host bytes of dQ,
/// dK and dV.
std::vector<uint8_t> checkBackwardRanks(BackwardCase &c,
                                        std::vector<BackwardRank> &ranks,
                                        Sharding sharding) {
  const int n = static_cast<int>(ranks.size());
  for (int r = 0; r < n; ++r) {
    BackwardRank &g = ranks[size_t(r)];
    g.dev->makeCurrent();
    for (auto [t, w] :
         {std::pair{g.dq.get(), c.dq.get()}, std::pair{g.dk.get(), c.dk.get()},
          std::pair{g.dv.get(), c.dv.get()}}) {
      t->download();
      unshardSequence(t->hostRef, w->hostRef, r, n, sharding);
    }
  }
  bwd::DenseGradChecks k =
      bwd::compareDenseGradients(*c.dq, *c.dk, *c.dv, c.want, c.ref);
  const DType dt = c.spec.dtypeQ;
  std::printf("  ring bwd %-26s %d GPUs s%-5lld dQ %.2e/%.2e  dK %.2e/%.2e  "
              "dV %.2e/%.2e (max/norm rel err)\n",
              c.spec.variant.name().c_str(), n, (long long)c.s, k.q.relMax(),
              k.q.relNorm(), k.k.relMax(), k.k.relNorm(), k.v.relMax(),
              k.v.relNorm());
  bwd::checkGrad("dQ", k.q, dt);
  bwd::checkGrad("dK", k.k, dt);
  bwd::checkGrad("dV", k.v, dt);
  std::vector<uint8_t> bytes;
  for (GpuTensor *g : {c.dq.get(), c.dk.get(), c.dv.get()})
    bytes.insert(bytes.end(), g->host.begin(), g->host.end());
  return bytes;
}

} // namespace

TEST_CASE("GPU ring backward over NCCL on 2, 4 and 8 GPUs against the whole "
          "sequence's reference backward, deterministic bit for bit run to "
          "run and overlapped vs serial",
          "[gpu][ring][multigpu][backward]") {
  std::string why;
  if (!multiGpu(why)) {
    WARN("SKIPPED: " << why);
    return;
  }
  // 656 tokens: zigzag chunks of 164, 82 or 41 (not whole tiles, the
  // lengths RingBackwardGpuTest.cpp checks); documents of 37 tokens
  // straddle them.
  const int64_t s = 16 * 41;
  const Sharding sh = Sharding::Zigzag;
  RankCache cache;
  for (const char *id :
       {"ringbwd_causal_tl_d64_bf16_g2", "ringbwd_doc_d64_fp16_g1"}) {
    std::unique_ptr<BackwardCase> c = makeBackwardCase(id, s);
    for (int n : {2, 4, 8}) {
      if (n > Device::count())
        continue;
      // Runs: default (atomic dQ) overlapped; deterministic overlapped
      // twice; deterministic serial. All against the reference; the
      // deterministic ones bit for bit.
      std::vector<uint8_t> out[4];
      for (int run = 0; run < 4; ++run) {
        RingOptions opts;
        opts.sharding = sh;
        opts.overlap = run < 3;
        GpuBackwardOptions backward;
        backward.deterministic = run > 0;
        INFO(id << ", " << n << " GPUs, run " << run
                << (backward.deterministic ? ", deterministic" : "")
                << (opts.overlap ? ", overlapped" : ", serial"));
        std::vector<BackwardRank> ranks;
        for (int r = 0; r < n; ++r)
          ranks.push_back(makeBackwardRank(cache, id, *c, r, n, sh));
        std::vector<RingStats> stats =
            runBackwardRanks(ranks, c->spec, opts, backward);
        for (const RingStats &st : stats) {
          CHECK(st.shifts == 2 * n - 1);
          CHECK(st.overlapped == opts.overlap);
          // Causal zigzag: 2R + 1 of 4R chunk pairs on every rank.
          if (std::string(id) == "ringbwd_causal_tl_d64_bf16_g2")
            CHECK(st.pairsComputed == 2 * n + 1);
        }
        out[run] = checkBackwardRanks(*c, ranks, sh);
      }
      INFO(id << ", " << n << " GPUs: deterministic run to run, serial");
      for (int run : {2, 3}) {
        REQUIRE(out[1].size() == out[run].size());
        CHECK(std::memcmp(out[1].data(), out[run].data(), out[1].size()) == 0);
      }
    }
  }
}
