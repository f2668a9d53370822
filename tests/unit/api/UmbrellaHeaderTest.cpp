//===- UmbrellaHeaderTest.cpp - The C++ API in one include ----------------===//
//
// flashjit/flashjit.h is this file's first and only flashjit include, so the
// build fails if the umbrella header does not compile alone; the test links
// the flashjit::flashjit target only. It then uses the header the way the
// quickstart does: a DSL variant, the cached CPU entry point and a run
// checked against the float64 reference.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

using namespace flashjit;

TEST_CASE("flashjit/flashjit.h compiles alone and runs a kernel", "[api]") {
  // The GPU entry point and kernel types are declared (nothing runs here).
  STATIC_REQUIRE(std::is_class_v<runtime::GpuAttentionKernel>);
  STATIC_REQUIRE(std::is_class_v<runtime::DeviceBuffer>);
  STATIC_REQUIRE(std::is_class_v<GpuCompileOptions>);

  Variant v("umbrella_swa");
  v.mask(sliding_window(8, 0, Alignment::TopLeft));
  v.scoreMod(softcap(30.0f));
  AttentionSpec spec;
  spec.variant = v;
  spec.headDimQK = spec.headDimV = 16;
  spec.headsQ = spec.headsKV = 2;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;

  // A disabled cache: compiled in memory, nothing written.
  runtime::CacheConfig config;
  config.enabled = false;
  runtime::DiskCache cache(config);
  LoadReport report;
  std::shared_ptr<const CpuKernel> kernel =
      loadOrCompileCpu(spec, {}, &cache, &report);
  CHECK(report.outcome == runtime::CacheOutcome::Uncached);
  CHECK_FALSE(report.memoryHit);

  // q, k, v, o: [1, 2, 24, 16] fp32; lse: [1, 2, 24] fp32.
  const int64_t n = 24;
  const std::array<int64_t, 4> shape{1, 2, n, 16};
  std::vector<float> qs(2 * n * 16), ks(qs.size()), vs(qs.size()),
      os(qs.size());
  std::vector<float> lses(2 * n);
  for (size_t i = 0; i < qs.size(); ++i) {
    qs[i] = std::sin(0.1f * float(i));
    ks[i] = std::cos(0.07f * float(i));
    vs[i] = std::sin(0.013f * float(i) + 1.0f);
  }
  TensorRef q = TensorRef::contiguous(qs.data(), DType::F32, shape);
  TensorRef k = TensorRef::contiguous(ks.data(), DType::F32, shape);
  TensorRef vt = TensorRef::contiguous(vs.data(), DType::F32, shape);
  TensorRef o = TensorRef::contiguous(os.data(), DType::F32, shape);
  TensorRef lse = TensorRef::contiguous3(lses.data(), DType::F32, {1, 2, n});
  kernel->run(q, k, vt, o, &lse);
  ReferenceOutput ref = referenceAttention(spec, q, k, vt);
  double err = 0;
  for (size_t i = 0; i < os.size(); ++i)
    err = std::max(err, std::fabs(os[i] - ref.o[i]));
  for (size_t i = 0; i < lses.size(); ++i)
    err = std::max(err, std::fabs(lses[i] - ref.lse[i]));
  CHECK(err < 1e-4);
}
