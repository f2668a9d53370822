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

namespace {

/// Host and device copies of the parameters and buffers a variant reads.
struct VariantArgs {
  Arguments host, device;
  std::vector<std::unique_ptr<std::vector<int32_t>>> intData;
  std::vector<std::unique_ptr<std::vector<float>>> floatData;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;

  VariantArgs(Device &dev, const AttentionSpec &spec, int64_t sq, int64_t sk) {
    for (const ParamDecl &p : spec.variant.params()) {
      Scalar v = p.type == ScalarType::Float32 ? Scalar::f32(20.0f)
                 : p.type == ScalarType::Int32 ? Scalar::i32(5)
                                               : Scalar::i64(5);
      host.set(p.name, v);
      device.set(p.name, v);
    }
    for (const BufferDecl &b : spec.variant.buffers()) {
      if (b.elementType == ScalarType::Float32) { // per-head slopes
        auto data = std::make_unique<std::vector<float>>();
        for (int h = 0; h < spec.headsQ; ++h)
          data->push_back(std::exp2(-8.0f * (h + 1) / spec.headsQ));
        bind(dev, b.name, *data);
        floatData.push_back(std::move(data));
      } else { // per-token document ids, documents of 37 tokens
        auto data = std::make_unique<std::vector<int32_t>>();
        for (int64_t i = 0; i < std::max<int64_t>({sq, sk, 1}); ++i)
          data->push_back(static_cast<int32_t>(i / 37));
        bind(dev, b.name, *data);
        intData.push_back(std::move(data));
      }
    }
  }

  template <class T>
  void bind(Device &dev, const std::string &name, const std::vector<T> &v) {
    auto buf = std::make_unique<DeviceBuffer>(dev, v.size() * sizeof(T));
    buf->copyFromHost(v.data(), v.size() * sizeof(T));
    host.bind(name, v.data(), static_cast<int64_t>(v.size()));
    device.bind(name, static_cast<const T *>(buf->data()),
                static_cast<int64_t>(v.size()));
    buffers.push_back(std::move(buf));
  }
};

double tolerance(DType t) {
  switch (t) {
  case DType::BF16:
    return 1.6e-2;
  case DType::F16:
    return 2e-3;
  case DType::F32:
    return 2e-4;
  }
  return 0;
}

/// Runs one spec at one shape on the GPU and the CPU and compares.
void checkShape(Device &dev, NvrtcReference &ref, const AttentionSpec &spec,
                int64_t batch, int64_t sq, int64_t sk, int layout,
                uint64_t seed) {
  INFO("batch " << batch << ", seqlen_q " << sq << ", seqlen_k " << sk
                << ", layout " << layout);
  std::mt19937_64 rng(seed);
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  GpuTensor q(dev, spec.dtypeQ, {batch, hq, sq, spec.headDimQK}, 4,
              layout == 1);
  GpuTensor k(dev, spec.dtypeK, {batch, hkv, sk, spec.headDimQK}, 4, false,
              layout == 2 ? 8 : 0);
  GpuTensor v(dev, spec.dtypeV, {batch, hkv, sk, spec.headDimV}, 4,
              layout == 2);
  GpuTensor o(dev, spec.dtypeO, {batch, hq, sq, spec.headDimV}, 4, layout == 1,
              layout == 2 ? 3 : 0);
  GpuTensor lse(dev, DType::F32, {batch, hq, sq, 1}, 3);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  o.poison();
  lse.poison();
  VariantArgs args(dev, spec, sq, sk);

  ref.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
          spec.returnLse ? &lse.deviceRef : nullptr, args.device);
  o.download();
  lse.download();
  ReferenceOutput want =
      referenceAttention(spec, q.hostRef, k.hostRef, v.hostRef, args.host);

  const double tol = tolerance(spec.dtypeO);
  double worstO = 0, worstLse = 0;
  int64_t emptyRows = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        double wl = want.lseAt(b, h, i);
        bool empty = std::isinf(wl) && wl < 0;
        emptyRows += empty;
        for (int64_t d = 0; d < spec.headDimV; ++d) {
          float got = o.at(b, h, i, d);
          double w = want.oAt(b, h, i, d);
          if (std::isnan(got) || (empty && got != 0.0f)) {
            FAIL_CHECK("o[" << b << "," << h << "," << i << "," << d
                            << "] = " << got << ", want " << w
                            << (empty ? " (row with no allowed key)" : ""));
            return;
          }
          worstO = std::max(worstO, std::fabs(got - w));
        }
        if (spec.returnLse) {
          float gl = lse.at(b, h, i);
          if (empty ? !(std::isinf(gl) && gl < 0) : !std::isfinite(gl)) {
            FAIL_CHECK("lse[" << b << "," << h << "," << i << "] = " << gl
                              << ", want " << wl);
            return;
          }
          if (!empty)
            worstLse = std::max(worstLse, std::fabs(gl - wl) /
                                              std::max(1.0, std::fabs(wl)));
        }
      }
  INFO("max |O - O_ref| = " << worstO << ", max rel LSE error = " << worstLse
                            << ", empty rows = " << emptyRows);
  CHECK(worstO <= tol);
  CHECK(worstLse <= 1e-4);
}

} // namespace

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
      checkShape(dev, ref, named.spec, 2, sq, sk, layout++ % 3, seed++);
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
  checkShape(dev, ref, s, 1, 33, 70, 0, 99);
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

TEST_CASE("NVRTC reference at large N (timing; not checked against the CPU)",
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
