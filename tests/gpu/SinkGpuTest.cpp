//===- SinkGpuTest.cpp - Attention sinks in the GPU forward ---------------===//
//
// Issue 22. The kernels of sinkKernels() (tests/support/KernelMatrix.h),
// generated ahead of time by gen_matrix_kernels, on the GPU against the
// float64 reference with the sink: dense, causal top-left with seqlen_q >
// seqlen_k (rows with no allowed key: O = 0 exactly, LSE = sink[h]), a
// window, softcap, a document mask, varlen (empty sequences) and
// block-sparse (a GPU-built block mask); GQA, odd shapes, fresh random
// inputs and sinks (one head -inf: no sink). GpuSinkGradient's d sink
// against the host formula on the kernel's own O and LSE, run to run
// bit-identical, and against the float64 reference backward. A sink of -inf
// on every head
// gives bit for bit the outputs of the same kernel without a sink. A
// hidden [.sinkbench] case times the dense D=128 pair (with / without a
// sink) at N = 4096 and 16384.
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "KernelMatrix.h"
#include "TestSeed.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/SinkGradient.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::freshSeed;
using flashjit::test::GpuTensor;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

const testing::SparseKernel &sinkKernel(const std::string &id) {
  static std::vector<testing::SparseKernel> all = testing::sinkKernels();
  for (const auto &k : all)
    if (k.id == id)
      return k;
  FAIL("no sink kernel " << id);
  throw;
}

/// Host and device copies of sink[heads_q]: uniform in [-2, 2], one head
/// -inf (no sink), unless \p all is given.
struct Sinks {
  std::vector<float> host;
  DeviceBuffer device;
  Sinks(Device &dev, int hq, std::mt19937_64 &rng,
        std::optional<float> all = std::nullopt) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int h = 0; h < hq; ++h)
      host.push_back(all ? *all : u(rng));
    if (!all)
      host[rng() % hq] = -kInf;
    device = DeviceBuffer(dev, hq * sizeof(float));
    device.copyFromHost(host.data(), hq * sizeof(float));
  }
  void bind(test::VariantArgs &a) {
    a.host.bindSink(host.data(), int64_t(host.size()));
    a.device.bindSink(static_cast<const float *>(device.data()),
                      int64_t(host.size()));
  }
};

/// A packed varlen tensor [total, heads, dim] (rank 3), or the LSE
/// [heads, total] (rank 2, fp32) when \p dim is 0.
GpuTensor varlenTensor(Device &dev, DType t, int64_t total, int64_t heads,
                       int64_t dim) {
  if (dim == 0) {
    GpuTensor x(dev, t, {heads, total, 1, 1}, 4);
    x.hostRef.rank = x.deviceRef.rank = 2;
    return x;
  }
  GpuTensor x(dev, t, {total, heads, dim, 1}, 4);
  x.hostRef.rank = x.deviceRef.rank = 3;
  return x;
}

} // namespace

TEST_CASE("GPU forward with an attention sink matches the float64 reference",
          "[gpu][sink]") {
  Device &dev = Device::get(0);
  for (const char *id :
       {"sink_none_d128_bf16_g2", "sink_causal_tl_d64_fp16_g1",
        "sink_window_lr_d96_bf16_g3", "sink_softcap_d128_fp16_g2",
        "sink_doc_d64_bf16_g1", "sink_bs_doc_d128_bf16_g2"}) {
    const testing::SparseKernel &sk = sinkKernel(id);
    const AttentionSpec &spec = sk.spec;
    auto kernel = test::loadAheadOfTime(sk.id, spec, dev, /*sparse=*/true);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    for (int r = 0; r < 3; ++r) {
      int64_t batch = 1 + rng() % 2, sq = 1 + rng() % 300,
              sk2 = 1 + rng() % 300;
      // A top-left causal row always sees key 0: the last call has no keys
      // at all (every row empty).
      if (spec.causal == Causal::TopLeft && r == 2)
        sk2 = 0;
      INFO(id << ", seed " << seed << ", batch " << batch << ", seqlen_q " << sq
              << ", seqlen_k " << sk2 << ": " << printSpec(spec));
      GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, sq, spec.headDimQK}),
          k(dev, spec.dtypeK, {batch, spec.headsKV, sk2, spec.headDimQK}),
          v(dev, spec.dtypeV, {batch, spec.headsKV, sk2, spec.headDimV}),
          o(dev, spec.dtypeO, {batch, spec.headsQ, sq, spec.headDimV}),
          lse(dev, DType::F32, {batch, spec.headsQ, sq, 1}, 3);
      q.randomize(rng, 2.0f);
      k.randomize(rng, 2.0f);
      v.randomize(rng);
      o.poison();
      lse.poison();
      test::VariantArgs args(dev, spec, sq, sk2);
      Sinks sinks(dev, spec.headsQ, rng);
      sinks.bind(args);
      if (sk.blockSparse) {
        DeviceBlockMask m = kernel->buildBlockMask(batch, sq, sk2, args.device);
        kernel->runBlockSparse(q.deviceRef, k.deviceRef, v.deviceRef,
                               o.deviceRef, &lse.deviceRef, m, args.device);
      } else {
        kernel->run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                    &lse.deviceRef, args.device);
      }
      ReferenceOutput want =
          referenceAttention(spec, q.hostRef, k.hostRef, v.hostRef, args.host);
      o.download();
      lse.download();
      test::compareOutputs(spec, o, lse, want, batch, sq);
      // Rows with no allowed key (no keys at all, or bottom-right causal
      // with sq > sk: rows 0..sq - sk - 1): O = 0 exactly and LSE = the
      // head's sink.
      int64_t emptyRows = sk2 == 0 ? sq
                          : spec.causal == Causal::BottomRight && !sk.varlen
                              ? std::max<int64_t>(0, sq - sk2)
                              : 0;
      if (batch == 1)
        for (int64_t h = 0; h < spec.headsQ; ++h)
          for (int64_t i = 0; i < emptyRows; ++i) {
            INFO("empty row " << i << " of head " << h);
            CHECK(lse.at(0, h, i) == Approx(sinks.host[h]).margin(1e-5));
            for (int64_t d = 0; d < spec.headDimV; ++d)
              if (o.at(0, h, i, d) != 0.0f) {
                FAIL_CHECK("o[0," << h << "," << i << "," << d
                                  << "] = " << o.at(0, h, i, d));
                break;
              }
          }
    }
  }
}

TEST_CASE("GPU d sink matches the formula and the float64 backward",
          "[gpu][sink]") {
  Device &dev = Device::get(0);
  GpuSinkGradient grad(dev);
  for (const char *id :
       {"sink_none_d128_bf16_g2", "sink_causal_tl_d64_fp16_g1"}) {
    const testing::SparseKernel &sk = sinkKernel(id);
    const AttentionSpec &spec = sk.spec;
    auto kernel = test::loadAheadOfTime(sk.id, spec, dev, /*sparse=*/true);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    int64_t batch = 2, sq = 1 + rng() % 200, skv = 1 + rng() % 200;
    INFO(id << ", seed " << seed << ", seqlen_q " << sq << ", seqlen_k "
            << skv);
    GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, sq, spec.headDimQK}),
        k(dev, spec.dtypeK, {batch, spec.headsKV, skv, spec.headDimQK}),
        v(dev, spec.dtypeV, {batch, spec.headsKV, skv, spec.headDimV}),
        o(dev, spec.dtypeO, {batch, spec.headsQ, sq, spec.headDimV}),
        dO(dev, spec.dtypeO, {batch, spec.headsQ, sq, spec.headDimV}),
        lse(dev, DType::F32, {batch, spec.headsQ, sq, 1}, 3);
    for (GpuTensor *t : {&q, &k, &v, &dO})
      t->randomize(rng);
    test::VariantArgs args(dev, spec, sq, skv);
    Sinks sinks(dev, spec.headsQ, rng);
    sinks.bind(args);
    kernel->run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                &lse.deviceRef, args.device);
    DeviceBuffer d1(dev, spec.headsQ * sizeof(float)),
        d2(dev, spec.headsQ * sizeof(float));
    d1.fill(0xFF);
    d2.fill(0xFF);
    grad.run(spec, o.deviceRef, dO.deviceRef, lse.deviceRef, args.device,
             static_cast<float *>(d1.data()));
    grad.run(spec, o.deviceRef, dO.deviceRef, lse.deviceRef, args.device,
             static_cast<float *>(d2.data()));
    std::vector<float> g1(spec.headsQ), g2(spec.headsQ);
    d1.copyToHost(g1.data(), g1.size() * sizeof(float));
    d2.copyToHost(g2.data(), g2.size() * sizeof(float));
    CHECK(g1 == g2); // deterministic
    o.download();
    lse.download();
    ReferenceGradients ref = referenceAttentionBackward(
        spec, q.hostRef, k.hostRef, v.hostRef, dO.hostRef, args.host);
    for (int64_t h = 0; h < spec.headsQ; ++h) {
      double want = 0;
      if (sinks.host[h] != -kInf)
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t i = 0; i < sq; ++i) {
            double d = 0;
            for (int64_t e = 0; e < spec.headDimV; ++e)
              d += double(o.at(b, h, i, e)) * double(dO.at(b, h, i, e));
            want -= std::exp(double(sinks.host[h]) - lse.at(b, h, i)) * d;
          }
      INFO("head " << h << " sink " << sinks.host[h]);
      CHECK(g1[h] == Approx(want).epsilon(1e-5).margin(1e-5));
      // The float64 oracle: O rounded to 16 bits inside D, so the error
      // grows like sqrt(rows).
      double tol = test::tolerance(spec.dtypeO) *
                   std::sqrt(double(batch * sq)) * (1 + std::abs(ref.dSink[h]));
      CHECK(std::abs(g1[h] - ref.dSink[h]) <= tol);
    }
  }
}

TEST_CASE("GPU varlen forward with an attention sink", "[gpu][sink]") {
  Device &dev = Device::get(0);
  const testing::SparseKernel &sk = sinkKernel("sink_vl_causal_br_d64_bf16_g2");
  const AttentionSpec &spec = sk.spec;
  auto kernel = test::loadAheadOfTime(sk.id, spec, dev, /*sparse=*/true);
  uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::vector<int32_t> cuQ{0}, cuK{0};
  for (int32_t len : {37, 0, 130, 1, int32_t(rng() % 300)}) {
    cuQ.push_back(cuQ.back() + len);
    cuK.push_back(cuK.back() + int32_t(rng() % 200));
  }
  INFO("seed " << seed);
  int64_t tq = cuQ.back(), tk = cuK.back();
  DeviceCuSeqlens cu(cuQ, cuK, dev);
  GpuTensor q = varlenTensor(dev, spec.dtypeQ, tq, spec.headsQ, spec.headDimQK),
            k = varlenTensor(dev, spec.dtypeK, tk, spec.headsKV,
                             spec.headDimQK),
            v = varlenTensor(dev, spec.dtypeV, tk, spec.headsKV, spec.headDimV),
            o = varlenTensor(dev, spec.dtypeO, tq, spec.headsQ, spec.headDimV),
            lse = varlenTensor(dev, DType::F32, tq, spec.headsQ, 0);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  o.poison();
  lse.poison();
  test::VariantArgs args(dev, spec, tq, tk);
  Sinks sinks(dev, spec.headsQ, rng);
  sinks.bind(args);
  kernel->runVarlen(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                    &lse.deviceRef, cu, args.device);
  VarlenReferenceOutput want = referenceVarlenAttention(
      spec, q.hostRef, k.hostRef, v.hostRef, cuQ, cuK, args.host);
  o.download();
  lse.download();
  const double tol = test::tolerance(spec.dtypeO);
  for (int64_t t = 0; t < tq; ++t)
    for (int64_t h = 0; h < spec.headsQ; ++h) {
      double wl = want.lseAt(h, t);
      float gl = lse.at(h, t, 0);
      INFO("token " << t << " head " << h);
      if (std::isinf(wl))
        CHECK(gl == float(wl));
      else
        CHECK(std::abs(gl - wl) <= 1e-4 * (1 + std::abs(wl)));
      for (int64_t d = 0; d < spec.headDimV; ++d) {
        double w = want.oAt(t, h, d);
        float got = o.at(t, h, d);
        if (!(std::abs(got - w) <= tol * (1 + std::abs(w)))) {
          FAIL_CHECK("o[" << t << "," << h << "," << d << "] = " << got
                          << ", want " << w);
          return;
        }
      }
    }
}

TEST_CASE("GPU: a sink of -inf on every head is no sink, bit for bit",
          "[gpu][sink]") {
  Device &dev = Device::get(0);
  const testing::SparseKernel &withSink = sinkKernel("sink_bench_d128");
  const testing::SparseKernel &plain = sinkKernel("sink_bench_plain_d128");
  auto a = test::loadAheadOfTime(withSink.id, withSink.spec, dev, true);
  auto b = test::loadAheadOfTime(plain.id, plain.spec, dev, true);
  const AttentionSpec &spec = plain.spec;
  std::mt19937_64 rng(freshSeed());
  int64_t sq = 333, sk = 517;
  GpuTensor q(dev, spec.dtypeQ, {1, spec.headsQ, sq, spec.headDimQK}),
      k(dev, spec.dtypeK, {1, spec.headsKV, sk, spec.headDimQK}),
      v(dev, spec.dtypeV, {1, spec.headsKV, sk, spec.headDimV}),
      o1(dev, spec.dtypeO, {1, spec.headsQ, sq, spec.headDimV}),
      o2(dev, spec.dtypeO, {1, spec.headsQ, sq, spec.headDimV}),
      l1(dev, DType::F32, {1, spec.headsQ, sq, 1}, 3),
      l2(dev, DType::F32, {1, spec.headsQ, sq, 1}, 3);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  test::VariantArgs args(dev, withSink.spec, sq, sk);
  Sinks sinks(dev, spec.headsQ, rng, -kInf);
  sinks.bind(args);
  a->run(q.deviceRef, k.deviceRef, v.deviceRef, o1.deviceRef, &l1.deviceRef,
         args.device);
  b->run(q.deviceRef, k.deviceRef, v.deviceRef, o2.deviceRef, &l2.deviceRef,
         Arguments{});
  for (GpuTensor *t : {&o1, &o2, &l1, &l2})
    t->download();
  CHECK(o1.host == o2.host);
  CHECK(l1.host == l2.host);
  // Without a sink bound, or with a short one: UserError before launching.
  test::VariantArgs none(dev, withSink.spec, sq, sk);
  CHECK_THROWS_AS(a->run(q.deviceRef, k.deviceRef, v.deviceRef, o1.deviceRef,
                         &l1.deviceRef, none.device),
                  UserError);
  none.device.bindSink(static_cast<const float *>(sinks.device.data()), 3);
  CHECK_THROWS_AS(a->run(q.deviceRef, k.deviceRef, v.deviceRef, o1.deviceRef,
                         &l1.deviceRef, none.device),
                  UserError);
}

TEST_CASE("GPU forward timing with and without a sink", "[.sinkbench]") {
  // Dense D=128 bf16, 16 heads, batch 32768 / N: the same kernel tiles with
  // and without a sink; median of 50 runs after 10 warm-up (CUDA events).
  Device &dev = Device::get(0);
  const testing::SparseKernel &withSink = sinkKernel("sink_bench_d128");
  const testing::SparseKernel &plain = sinkKernel("sink_bench_plain_d128");
  auto a = test::loadAheadOfTime(withSink.id, withSink.spec, dev, true);
  auto b = test::loadAheadOfTime(plain.id, plain.spec, dev, true);
  const AttentionSpec &spec = plain.spec;
  std::mt19937_64 rng(1);
  for (int64_t n : {4096, 16384}) {
    int64_t batch = 32768 / n;
    GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, n, 128}),
        k(dev, spec.dtypeK, {batch, spec.headsKV, n, 128}),
        v(dev, spec.dtypeV, {batch, spec.headsKV, n, 128}),
        o(dev, spec.dtypeO, {batch, spec.headsQ, n, 128}),
        l(dev, DType::F32, {batch, spec.headsQ, n, 1}, 3);
    q.randomize(rng);
    k.randomize(rng);
    v.randomize(rng);
    test::VariantArgs args(dev, withSink.spec, n, n);
    Sinks sinks(dev, spec.headsQ, rng);
    sinks.bind(args);
    auto time = [&](GpuAttentionKernel &kern, const Arguments &ar) {
      for (int i = 0; i < 10; ++i)
        kern.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                 &l.deviceRef, ar);
      dev.synchronize();
      EventTimer timer(dev);
      std::vector<double> ms;
      for (int i = 0; i < 50; ++i) {
        timer.start();
        kern.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                 &l.deviceRef, ar);
        ms.push_back(timer.stopMs());
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    double tSink = time(*a, args.device), tPlain = time(*b, Arguments{});
    double flops = 4.0 * batch * spec.headsQ * double(n) * n * 128;
    WARN("dense D=128 N=" << n << ": no sink " << tPlain << " ms ("
                          << flops / tPlain / 1e9 << " TF/s), sink " << tSink
                          << " ms (" << flops / tSink / 1e9 << " TF/s), ratio "
                          << tSink / tPlain);
  }
}
