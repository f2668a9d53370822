//===- RuntimeGpuTest.cpp - Driver, modules and launches on a real GPU ----===//
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/Module.h"
#include "flashjit/runtime/Nvrtc.h"
#include "flashjit/runtime/Ptxas.h"

#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using Catch::Matchers::Contains;

namespace {
const char *kKernels = R"(
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
// Reverses n floats through dynamic shared memory (n floats of it).
extern "C" __global__ void reverse_smem(const float *x, float *y, int n) {
  extern __shared__ float s[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = s[n - 1 - i];
}
__device__ int counter;
extern "C" __global__ void bump() { atomicAdd(&counter, 1); }
)";

std::string ptxFor(const std::string &arch) {
  NvrtcOptions o;
  o.arch = arch;
  return compileCuda(kKernels, o).ptx;
}
std::string ptxFor(Device &dev) { return ptxFor(dev.properties().arch()); }

void runSaxpy(Device &dev, const Module &m, CUstream stream) {
  const int n = 1000;
  std::vector<float> x(n), y(n, 1.0f), out(n);
  std::iota(x.begin(), x.end(), 0.0f);
  DeviceBuffer dx(dev, n * 4), dy(dev, n * 4);
  dx.copyFromHost(x.data(), n * 4);
  dy.copyFromHost(y.data(), n * 4);
  KernelArgs a;
  a.add(2.0f).add(dx.ptr()).add(dy.ptr()).add(n);
  LaunchConfig c;
  c.grid = {(n + 255) / 256, 1, 1};
  c.block = {256, 1, 1};
  c.stream = stream;
  launch(m.function("saxpy"), c, a);
  dev.synchronize();
  dy.copyToHost(out.data(), n * 4);
  for (int i = 0; i < n; ++i)
    REQUIRE(out[i] == 2.0f * i + 1.0f);
}
} // namespace

TEST_CASE("device properties of the GPU", "[gpu][runtime]") {
  REQUIRE(Device::count() >= 1);
  const DeviceProperties &p = Device::get(0).properties();
  CHECK(p.smCount > 0);
  CHECK(p.ccMajor >= 7);
  CHECK(p.maxSharedPerBlockOptin >= p.maxSharedPerBlock);
  if (p.ccMajor == 9 && p.ccMinor == 0)
    CHECK(p.arch() == "sm_90a");
  REQUIRE_THROWS_AS(Device::get(Device::count()), UserError);
}

TEST_CASE("PTX loads through nvJitLink and through the driver JIT",
          "[gpu][runtime]") {
  Device &dev = Device::get(0);
  std::string ptx = ptxFor(dev);
  // The default assembler: whole-program ptxas where it exists.
  Module viaLink = Module::fromPtx(dev, ptx);
  CHECK(viaLink.path() ==
        (ptxasAvailable() ? LoadPath::Ptxas : LoadPath::NvJitLink));
  runSaxpy(dev, viaLink, nullptr);

  PtxLoadOptions jit;
  jit.forceDriverJit = true;
  Module viaJit = Module::fromPtx(dev, ptx, jit);
  CHECK(viaJit.path() == LoadPath::DriverJit);
  Stream s(dev);
  runSaxpy(dev, viaJit, s.handle());

  CubinResult c = ptxToCubin(ptx, dev.properties().arch());
  Module viaCubin = Module::fromCubin(dev, c.cubin.data(), c.cubin.size());
  CHECK(viaCubin.path() == LoadPath::Cubin);
  runSaxpy(dev, viaCubin, nullptr);
}

TEST_CASE("driver errors name the CUresult and the symbol", "[gpu][runtime]") {
  Device &dev = Device::get(0);
  Module m = Module::fromPtx(dev, ptxFor(dev));
  REQUIRE_THROWS_WITH(m.function("no_such_kernel"),
                      Contains("CUDA_ERROR_NOT_FOUND") &&
                          Contains("no_such_kernel"));
  REQUIRE_THROWS_WITH(m.global("no_such_global"),
                      Contains("CUDA_ERROR_NOT_FOUND"));
  // Broken PTX: both paths fail, and the error carries both logs.
  std::string bad = ptxFor(dev);
  bad.replace(bad.find(".entry saxpy"), 12, ".entry saxpy }");
  REQUIRE_THROWS_WITH(
      Module::fromPtx(dev, bad),
      Contains(ptxasAvailable() ? "ptxas failed" : "nvJitLink failed") &&
          Contains("driver JIT error log"));
  // A cubin of another arch does not load.
  std::string other = dev.properties().ccMajor == 8 ? "sm_90a" : "sm_80";
  // (PTX for that arch: PTX of a newer target cannot be assembled for it.)
  CubinResult c = ptxToCubin(ptxFor(other), other);
  REQUIRE_THROWS_WITH(Module::fromCubin(dev, c.cubin.data(), c.cubin.size()),
                      Contains("CUDA_ERROR"));
}

TEST_CASE("launch checks its configuration and raises the shared memory "
          "limit above 48 KiB",
          "[gpu][runtime]") {
  Device &dev = Device::get(0);
  Module m = Module::fromPtx(dev, ptxFor(dev));
  Function rev = m.function("reverse_smem");
  const int n = 96 * 1024 / 4; // 96 KiB of floats: needs the opt-in
  std::vector<float> x(n), y(n);
  std::iota(x.begin(), x.end(), 0.0f);
  DeviceBuffer dx(dev, n * 4), dy(dev, n * 4);
  dx.copyFromHost(x.data(), n * 4);
  dy.fill(0xFF);
  KernelArgs a;
  a.add(dx.ptr()).add(dy.ptr()).add(n);
  LaunchConfig c;
  c.block = {512, 1, 1};
  c.dynamicSharedBytes = n * 4;
  launch(rev, c, a);
  dev.synchronize();
  dy.copyToHost(y.data(), n * 4);
  for (int i = 0; i < n; ++i)
    REQUIRE(y[i] == static_cast<float>(n - 1 - i));

  LaunchConfig empty = c;
  empty.grid = {0, 1, 1};
  REQUIRE_THROWS_WITH(launch(rev, empty, a), Contains("empty launch"));
  LaunchConfig tooWide = c;
  tooWide.block = {2048, 1, 1};
  REQUIRE_THROWS_WITH(launch(rev, tooWide, a), Contains("threads per block"));
  LaunchConfig tooMuch = c;
  tooMuch.dynamicSharedBytes = dev.properties().maxSharedPerBlockOptin + 1024;
  REQUIRE_THROWS_WITH(launch(rev, tooMuch, a), Contains("shared memory"));

  // A __device__ global is readable through Module::global.
  Function bump = m.function("bump");
  auto [ptr, bytes] = m.global("counter");
  REQUIRE(bytes == 4);
  KernelArgs none;
  LaunchConfig one;
  one.grid = {3, 1, 1};
  one.block = {64, 1, 1};
  launch(bump, one, none);
  dev.synchronize();
  int count = 0;
  REQUIRE(Driver::get().cuMemcpyDtoH(&count, ptr, 4) == CUDA_SUCCESS);
  CHECK(count == 192);
}
