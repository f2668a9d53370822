//===- Device.cpp - Device properties and primary contexts ----------------===//
#include "flashjit/runtime/Device.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Driver.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

namespace flashjit::runtime {

std::string DeviceProperties::arch() const {
  if (ccMajor == 9 && ccMinor == 0)
    return "sm_90a";
  return fmt::format("sm_{}{}", ccMajor, ccMinor);
}

int Device::count() {
  Driver &d = Driver::get();
  int n = 0;
  FLASHJIT_CHECK(d.cuDeviceGetCount(&n));
  return n;
}

bool Device::available(std::string *whyNot) {
  if (!Driver::available(whyNot))
    return false;
  try {
    if (count() > 0)
      return true;
    if (whyNot)
      *whyNot = "the CUDA driver is loaded but sees no GPU";
  } catch (const Error &e) {
    if (whyNot)
      *whyNot = e.what();
  }
  return false;
}

Device &Device::get(int ordinal) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<Device>> devices;
  int n = count();
  if (ordinal < 0 || ordinal >= n)
    throw UserError(
        fmt::format("device ordinal {} is outside [0, {})", ordinal, n),
        std::source_location());
  std::lock_guard<std::mutex> lock(mutex);
  if (devices.size() < static_cast<size_t>(n))
    devices.resize(n);
  if (!devices[ordinal])
    devices[ordinal].reset(new Device(ordinal));
  devices[ordinal]->makeCurrent();
  return *devices[ordinal];
}

Device::Device(int ordinal) {
  Driver &d = Driver::get();
  FLASHJIT_CHECK(d.cuDeviceGet(&device_, ordinal));
  FLASHJIT_CHECK(d.cuDevicePrimaryCtxRetain(&context_, device_));
  props_.ordinal = ordinal;
  char name[256] = {};
  FLASHJIT_CHECK(d.cuDeviceGetName(name, sizeof(name) - 1, device_));
  props_.name = name;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    FLASHJIT_CHECK(d.cuDeviceGetAttribute(&v, a, device_));
    return v;
  };
  props_.ccMajor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  props_.ccMinor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  props_.smCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  props_.maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  props_.maxSharedPerBlock =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  props_.maxSharedPerBlockOptin =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  props_.maxSharedPerSM =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  props_.maxRegistersPerBlock =
      attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  props_.maxGrid[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  props_.maxGrid[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  props_.maxGrid[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  size_t total = 0;
  FLASHJIT_CHECK(d.cuDeviceTotalMem(&total, device_));
  props_.totalMemory = static_cast<int64_t>(total);
}

Device::~Device() {
  // Process-wide devices live until exit; releasing the primary context from
  // a static destructor could run after the driver has shut down.
}

void Device::makeCurrent() const {
  FLASHJIT_CHECK(Driver::get().cuCtxSetCurrent(context_));
}

void Device::synchronize() const {
  makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuCtxSynchronize());
}

} // namespace flashjit::runtime
