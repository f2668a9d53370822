//===- Memory.cpp - Device memory owned by RAII handles -------------------===//
#include "flashjit/runtime/Memory.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <utility>

namespace flashjit::runtime {

DeviceBuffer::DeviceBuffer(Device &device, size_t bytes)
    : device_(&device), bytes_(bytes) {
  if (bytes == 0)
    return;
  device.makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuMemAlloc(&ptr_, bytes),
                 fmt::format("allocating {} bytes", bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) {
    // Never throw from a destructor: a failing free is ignored.
    device_->makeCurrent();
    (void)Driver::get().cuMemFree(ptr_);
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : device_(other.device_), ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    DeviceBuffer tmp(std::move(*this));
    device_ = other.device_;
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {

/// The workspace pool of \p device (StreamBuffer), made on first use and
/// kept for the process's lifetime (like the primary context).
CUmemoryPool workspacePool(Device &device) {
  static std::mutex mu;
  static std::map<int, CUmemoryPool> pools;
  const int ordinal = device.properties().ordinal;
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(ordinal);
  if (it != pools.end())
    return it->second;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = ordinal;
  CUmemoryPool pool = nullptr;
  device.makeCurrent();
  FLASHJIT_CHECK(
      Driver::get().cuMemPoolCreate(&pool, &props),
      fmt::format("creating the workspace pool of device {}", ordinal));
  // Freed workspaces stay in the pool up to this size instead of going back
  // to the driver at every synchronisation.
  cuuint64_t keep = cuuint64_t(256) << 20;
  FLASHJIT_CHECK(Driver::get().cuMemPoolSetAttribute(
      pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  pools.emplace(ordinal, pool);
  return pool;
}

} // namespace

StreamBuffer::StreamBuffer(Device &device, size_t bytes, CUstream stream)
    : device_(&device), stream_(stream), bytes_(bytes) {
  if (bytes == 0)
    return;
  CUmemoryPool pool = workspacePool(device);
  device.makeCurrent();
  FLASHJIT_CHECK(
      Driver::get().cuMemAllocFromPoolAsync(&ptr_, bytes, pool, stream),
      fmt::format("allocating a {}-byte workspace on a stream", bytes));
}

StreamBuffer::~StreamBuffer() {
  if (ptr_) {
    // Never throw from a destructor: a failing free is ignored.
    device_->makeCurrent();
    (void)Driver::get().cuMemFreeAsync(ptr_, stream_);
  }
}

static void checkSize(size_t want, size_t have, const char *what) {
  if (want > have)
    throw UserError(fmt::format("{} of {} bytes into a device buffer of {} "
                                "bytes",
                                what, want, have),
                    std::source_location());
}

void DeviceBuffer::copyFromHost(const void *src, size_t bytes) {
  checkSize(bytes, bytes_, "copy");
  if (bytes == 0)
    return;
  device_->makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuMemcpyHtoD(ptr_, src, bytes));
}

void copyHostToDevice(Device &device, void *dst, const void *src,
                      size_t bytes) {
  if (bytes == 0)
    return;
  if (!dst || !src)
    throw UserError(fmt::format("copyHostToDevice: dst = {}, src = {} with "
                                "{} bytes",
                                dst, src, bytes));
  device.makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst),
                                            src, bytes));
}

void copyDeviceToHost(Device &device, void *dst, const void *src,
                      size_t bytes) {
  if (bytes == 0)
    return;
  if (!dst || !src)
    throw UserError(fmt::format("copyDeviceToHost: dst = {}, src = {} with "
                                "{} bytes",
                                dst, src, bytes));
  device.makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuMemcpyDtoH(
      dst, reinterpret_cast<CUdeviceptr>(src), bytes));
}

void DeviceBuffer::copyToHost(void *dst, size_t bytes) const {
  checkSize(bytes, bytes_, "copy");
  if (bytes == 0)
    return;
  device_->makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuMemcpyDtoH(dst, ptr_, bytes));
}

void DeviceBuffer::fill(uint8_t value) {
  if (bytes_ == 0)
    return;
  device_->makeCurrent();
  FLASHJIT_CHECK(Driver::get().cuMemsetD8(ptr_, value, bytes_));
}

} // namespace flashjit::runtime
