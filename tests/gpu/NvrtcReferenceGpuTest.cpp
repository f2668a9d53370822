//===- NvrtcReferenceGpuTest.cpp - NVRTC reference vs float64 oracle ------===//
//
// The NVRTC reference kernel on the GPU against flashjit::referenceAttention
// (float64, CPU) on small odd shapes, every covered variant, both causal
// alignments, GQA, buffers and parameters, strided layouts. Outputs are
// poisoned with NaN before each run so unwritten elements fail.
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "RuntimeTestSupport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/NvrtcReference.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <memory>

using namespace flashjit;
using namespace flashjit::runtime;
using Catch::Matchers::Contains;
using flashjit::test::GpuTensor;

TEST_CASE("NVRTC reference matches the float64 reference on odd shapes",
          "[gpu][reference]") {
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> shapes[] = {
      {0, 17}, {17, 0}, {1, 1}, {1, 300}, {17, 65}, {65, 17}, {300, 300}};
  uint64_t seed = 1;
  for (const test::NamedSpec &named : test::referenceVariants()) {
    INFO("variant " << named.label);
    NvrtcReference ref(named.spec, dev);
    CHECK(ref.function().localBytes() == 0);
    int layout = 0;
    for (auto [sq, sk] : shapes)
      test::checkShape(dev, test::runWith(ref), named.spec, 2, sq, sk,
                       layout++ % 3, seed++);
  }
}

TEST_CASE("NVRTC reference without LSE and with mixed dtypes",
          "[gpu][reference]") {
  Device &dev = Device::get(0);
  AttentionSpec s;
  s.headDimQK = 64;
  s.headDimV = 64;
  s.returnLse = false;
  s.dtypeQ = DType::F16;
  s.dtypeK = DType::BF16;
  s.dtypeV = DType::F32;
  s.dtypeO = DType::F32;
  s.causal = Causal::BottomRight;
  NvrtcReference ref(s, dev);
  test::checkShape(dev, test::runWith(ref), s, 1, 33, 70, 0, 99);
}

TEST_CASE("NVRTC reference reports an out-of-range buffer read",
          "[gpu][reference]") {
  Device &dev = Device::get(0);
  AttentionSpec s;
  s.headDimQK = s.headDimV = 32;
  Variant v("oob");
  Buffer doc = buffer<int32_t>("doc_id");
  v.mask(doc[q_idx + 5] >= 0);
  s.variant = v;
  NvrtcReference ref(s, dev);
  GpuTensor q(dev, s.dtypeQ, {1, 1, 8, 32}), k(dev, s.dtypeK, {1, 1, 8, 32}),
      vt(dev, s.dtypeV, {1, 1, 8, 32}), o(dev, s.dtypeO, {1, 1, 8, 32}),
      lse(dev, DType::F32, {1, 1, 8, 1}, 3);
  std::vector<int32_t> ids(8, 0);
  DeviceBuffer idsDev(dev, ids.size() * 4);
  idsDev.copyFromHost(ids.data(), ids.size() * 4);
  Arguments args;
  args.bind("doc_id", static_cast<const int32_t *>(idsDev.data()), 8);
  REQUIRE_THROWS_WITH(ref.run(q.deviceRef, k.deviceRef, vt.deviceRef,
                              o.deviceRef, &lse.deviceRef, args),
                      Contains("buffer 'doc_id' read at index") &&
                          Contains("outside [0, 8)"));
  // Bad tensors are rejected before launch, naming the field.
  REQUIRE_THROWS_WITH(ref.run(q.deviceRef, k.deviceRef, vt.deviceRef,
                              o.deviceRef, nullptr, args),
                      Contains("lse"));
}

TEST_CASE("NVRTC reference at large N (timing, not checked against the CPU)",
          "[gpu][reference][.large]") {
  Device &dev = Device::get(0);
  for (int64_t n : {4096, 32768}) {
    AttentionSpec s;
    s.headsQ = 8;
    s.headsKV = 8;
    s.causal = Causal::BottomRight;
    NvrtcReference ref(s, dev);
    std::mt19937_64 rng(n);
    GpuTensor q(dev, s.dtypeQ, {1, 8, n, 128}),
        k(dev, s.dtypeK, {1, 8, n, 128}), v(dev, s.dtypeV, {1, 8, n, 128}),
        o(dev, s.dtypeO, {1, 8, n, 128}), lse(dev, DType::F32, {1, 8, n, 1}, 3);
    q.randomize(rng);
    k.randomize(rng);
    v.randomize(rng);
    o.poison();
    auto t0 = std::chrono::steady_clock::now();
    ref.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef, &lse.deviceRef);
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    o.download();
    lse.download();
    int64_t bad = 0;
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t i = 0; i < n; ++i) {
        bad += !std::isfinite(lse.at(0, h, i));
        for (int64_t d = 0; d < 128; ++d)
          bad += !std::isfinite(o.at(0, h, i, d));
      }
    WARN("NVRTC reference, causal bf16, B=1 H=8 N=" << n << " D=128: " << ms
                                                    << " ms");
    CHECK(bad == 0);
  }
}
