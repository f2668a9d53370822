//===- ConcurrencyGpuTest.cpp - Many threads, many streams ----------------===//
//
// Issue 21, §4 on the GPU: a serving host loads kernels and launches them
// from many threads, each on its own stream. Kernels of the variant matrix
// (made ahead of time by gen_matrix_kernels) are
// - loaded by 8 threads at once (module loads on one context), every load
//   usable;
// - run by 8 threads at once, each on its own non-blocking stream with its
//   own tensors, several rounds of different kernels and shapes, every
//   output checked against the float64 reference.
// Catch2's assertions are not thread-safe: threads collect failures as text
// and the test asserts on the main thread.
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "KernelMatrix.h"

#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Launch.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <mutex>
#include <set>
#include <thread>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;

namespace {

/// Up to \p n matrix kernels of different variants.
std::vector<testing::MatrixKernel> someKernels(size_t n) {
  std::vector<testing::MatrixKernel> out;
  std::set<std::string> seen;
  for (const testing::MatrixKernel &k : testing::kernelMatrix())
    if (out.size() < n && seen.insert(k.variant).second)
      out.push_back(k);
  return out;
}

/// The kernel files of \p id: (info, ptx).
std::pair<GpuKernelInfo, std::string> readKernel(const std::string &id) {
  std::string base = test::matrixKernelDir() + "/" + id;
  std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
  INFO("kernel files " << base << ".{info,ptx}");
  REQUIRE(infoFile);
  REQUIRE(ptxFile);
  GpuKernelInfo info = test::readKernelInfo(infoFile);
  REQUIRE(infoFile);
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  return {info, ptx.str()};
}

/// Runs \p kernel on \p stream on fresh inputs and compares with the
/// reference; "" or the first mismatch.
std::string runOnStream(Device &dev, const GpuAttentionKernel &kernel,
                        const AttentionSpec &spec, const Stream &stream,
                        int64_t sq, int64_t sk, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  GpuTensor q(dev, spec.dtypeQ, {1, hq, sq, spec.headDimQK});
  GpuTensor k(dev, spec.dtypeK, {1, hkv, sk, spec.headDimQK});
  GpuTensor v(dev, spec.dtypeV, {1, hkv, sk, spec.headDimV});
  GpuTensor o(dev, spec.dtypeO, {1, hq, sq, spec.headDimV});
  GpuTensor lse(dev, DType::F32, {1, hq, sq, 1}, 3);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  o.poison();
  lse.poison();
  test::VariantArgs args(dev, spec, sq, sk);
  kernel.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
             spec.returnLse ? &lse.deviceRef : nullptr, args.device,
             stream.handle());
  stream.synchronize();
  o.download();
  lse.download();
  ReferenceOutput want =
      referenceAttention(spec, q.hostRef, k.hostRef, v.hostRef, args.host);
  const double tol = test::tolerance(spec.dtypeO);
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      double wl = want.lseAt(0, h, i);
      bool empty = std::isinf(wl) && wl < 0;
      for (int64_t d = 0; d < spec.headDimV; ++d) {
        float got = o.at(0, h, i, d);
        double w = want.oAt(0, h, i, d);
        if (std::isnan(got) || (empty ? got != 0.0f : std::fabs(got - w) > tol))
          return fmt::format("{} {}x{}: o[{},{},{}] = {}, want {}",
                             spec.variant.name(), sq, sk, h, i, d, got, w);
      }
      if (spec.returnLse) {
        float gl = lse.at(0, h, i);
        if (empty
                ? !(std::isinf(gl) && gl < 0)
                : !(std::fabs(gl - wl) <= 1e-4 * std::max(1.0, std::fabs(wl))))
          return fmt::format("{} {}x{}: lse[{},{}] = {}, want {}",
                             spec.variant.name(), sq, sk, h, i, gl, wl);
      }
    }
  return {};
}

} // namespace

TEST_CASE("8 threads load the same kernels at once", "[gpu][concurrency]") {
  Device &dev = Device::get(0);
  std::vector<testing::MatrixKernel> kernels = someKernels(2);
  REQUIRE(!kernels.empty());
  std::vector<std::pair<GpuKernelInfo, std::string>> files;
  for (const auto &k : kernels)
    files.push_back(readKernel(k.id));
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      try {
        const auto &k = kernels[t % kernels.size()];
        const auto &[info, ptx] = files[t % kernels.size()];
        GpuAttentionKernel loaded(k.spec, info, ptx, dev);
        Stream stream(dev);
        std::string f =
            runOnStream(dev, loaded, k.spec, stream, 77, 130, 1234 + t);
        if (!f.empty()) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(f);
        }
      } catch (const std::exception &e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(e.what());
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (const std::string &f : failures)
    UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

TEST_CASE("8 threads run kernels on 8 streams at once", "[gpu][concurrency]") {
  Device &dev = Device::get(0);
  std::vector<testing::MatrixKernel> kernels = someKernels(4);
  REQUIRE(!kernels.empty());
  std::vector<std::unique_ptr<GpuAttentionKernel>> loaded;
  for (const auto &k : kernels)
    loaded.push_back(test::loadAheadOfTime(k.id, k.spec, dev));
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {65, 17}, {130, 257}, {300, 77}, {513, 513}};
  std::mutex mu;
  std::vector<std::string> failures;
  int runs = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      try {
        Stream stream(dev);
        for (int r = 0; r < 6; ++r) {
          size_t i = (t + r) % kernels.size();
          auto [sq, sk] = shapes[(t * 3 + r) % std::size(shapes)];
          std::string f = runOnStream(dev, *loaded[i], kernels[i].spec, stream,
                                      sq, sk, seed + 100 * t + r);
          std::lock_guard<std::mutex> lock(mu);
          ++runs;
          if (!f.empty())
            failures.push_back(f);
        }
      } catch (const std::exception &e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(e.what());
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (size_t i = 0; i < failures.size() && i < 10; ++i)
    UNSCOPED_INFO(failures[i]);
  CHECK(failures.empty());
  CHECK(runs == 48);
}
