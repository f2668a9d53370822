//===- Launch.cpp - Launching kernels on a stream -------------------------===//
#include "flashjit/runtime/Launch.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"

#include <fmt/format.h>

#include <utility>

namespace flashjit::runtime {

void launch(const Function &fn, const LaunchConfig &c, KernelArgs &args) {
  Device &device = fn.device();
  const DeviceProperties &p = device.properties();
  auto describe = [&] {
    return fmt::format("kernel {}: grid ({}, {}, {}), block ({}, {}, {}), {} "
                       "bytes of dynamic shared memory",
                       fn.name(), c.grid[0], c.grid[1], c.grid[2], c.block[0],
                       c.block[1], c.block[2], c.dynamicSharedBytes);
  };
  for (int i = 0; i < 3; ++i) {
    if (c.grid[i] == 0 || c.block[i] == 0)
      throw UserError(fmt::format("{}: empty launch (skip the launch when "
                                  "there is no work)",
                                  describe()),
                      std::source_location());
    if (c.grid[i] > static_cast<unsigned>(p.maxGrid[i]))
      throw UserError(fmt::format("{}: grid dim {} exceeds {}'s limit {}",
                                  describe(), i, p.name, p.maxGrid[i]),
                      std::source_location());
  }
  unsigned threads = c.block[0] * c.block[1] * c.block[2];
  if (threads > static_cast<unsigned>(fn.maxThreadsPerBlock()))
    throw UserError(fmt::format("{}: {} threads per block, the kernel allows "
                                "at most {}",
                                describe(), threads, fn.maxThreadsPerBlock()),
                    std::source_location());
  device.makeCurrent();
  // The default limit on dynamic shared memory is 48 KiB; more needs opt-in.
  if (c.dynamicSharedBytes > 48 * 1024)
    fn.setMaxDynamicSharedBytes(static_cast<int>(c.dynamicSharedBytes));
  Driver &drv = Driver::get();
  if (c.programmaticDependency && programmaticLaunchAvailable(device)) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig lc{};
    lc.gridDimX = c.grid[0];
    lc.gridDimY = c.grid[1];
    lc.gridDimZ = c.grid[2];
    lc.blockDimX = c.block[0];
    lc.blockDimY = c.block[1];
    lc.blockDimZ = c.block[2];
    lc.sharedMemBytes = c.dynamicSharedBytes;
    lc.hStream = c.stream;
    lc.attrs = &attr;
    lc.numAttrs = 1;
    FLASHJIT_CHECK(
        drv.cuLaunchKernelEx(&lc, fn.handle(), args.data(), nullptr),
        [&] { return describe() + ", programmatic dependent launch"; });
    return;
  }
  FLASHJIT_CHECK(drv.cuLaunchKernel(fn.handle(), c.grid[0], c.grid[1],
                                    c.grid[2], c.block[0], c.block[1],
                                    c.block[2], c.dynamicSharedBytes, c.stream,
                                    args.data(), nullptr),
                 describe);
}

bool programmaticLaunchAvailable(const Device &device) {
  // Programmatic stream serialization came with CUDA 12.0; 12.3 drivers
  // also keep it in stream-captured graphs (programmatic edges), which
  // host applications capture decoding into: ask for 12.3.
  const Driver &drv = Driver::get();
  return device.properties().ccMajor >= 9 && drv.version() >= 12030 &&
         drv.cuLaunchKernelEx != nullptr;
}

Stream::Stream(Device &device) : device_(&device) {
  device.makeCurrent();
  FLASHJIT_CHECK(
      Driver::get().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}

Stream::~Stream() {
  if (stream_) {
    device_->makeCurrent();
    (void)Driver::get().cuStreamDestroy(stream_);
  }
}

Stream::Stream(Stream &&other) noexcept
    : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}

void Stream::synchronize() const {
  device_->makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream_));
}

EventTimer::EventTimer(Device &device) : device_(&device) {
  device.makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuEventCreate(&start_, CU_EVENT_DEFAULT));
  FLASHJIT_CHECK(Driver::get().cuEventCreate(&stop_, CU_EVENT_DEFAULT));
}

EventTimer::~EventTimer() {
  device_->makeCurrent();
  (void)Driver::get().cuEventDestroy(start_);
  (void)Driver::get().cuEventDestroy(stop_);
}

void EventTimer::start(CUstream stream) {
  device_->makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuEventRecord(start_, stream));
}

float EventTimer::stopMs(CUstream stream) {
  device_->makeCurrent();
  Driver &d = Driver::get();
  FLASHJIT_CHECK(d.cuEventRecord(stop_, stream));
  FLASHJIT_CHECK(d.cuEventSynchronize(stop_));
  float ms = 0;
  FLASHJIT_CHECK(d.cuEventElapsedTime(&ms, start_, stop_));
  return ms;
}

} // namespace flashjit::runtime
