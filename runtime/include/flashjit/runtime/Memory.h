//===- Memory.h - Device memory owned by RAII handles -----------*- C++ -*-===//
#ifndef FLASHJIT_RUNTIME_MEMORY_H
#define FLASHJIT_RUNTIME_MEMORY_H

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace flashjit::runtime {

class Device;

/// Device memory (cuMemAlloc) in a device's primary context, freed by the
/// destructor. Move-only. Every method makes the context current and throws
/// DriverError on a driver failure (the message names the CUresult).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  /// Allocates \p bytes on \p device (nothing for 0 bytes: ptr() is 0).
  DeviceBuffer(Device &device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  /// The device address (0 when empty).
  CUdeviceptr ptr() const { return ptr_; }
  /// The address as a pointer, for TensorRef::data / BufferRef::data.
  void *data() const { return reinterpret_cast<void *>(ptr_); }
  size_t size() const { return bytes_; }

  /// Copies \p bytes from host memory to the start of the buffer
  /// (synchronous). Throws UserError if \p bytes exceeds size().
  void copyFromHost(const void *src, size_t bytes);
  /// Copies \p bytes from the start of the buffer to host memory
  /// (synchronous). Throws UserError if \p bytes exceeds size().
  void copyToHost(void *dst, size_t bytes) const;
  /// Sets every byte to \p value (synchronous), e.g. 0xFF to poison fp32 or
  /// fp16/bf16 outputs with NaN.
  void fill(uint8_t value);

private:
  Device *device_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Device memory ordered on a stream: allocated with
/// cuMemAllocFromPoolAsync on \p stream from the device's workspace pool
/// (one per device, made on first use, keeping up to 256 MiB of freed
/// memory for reuse instead of returning it at each synchronisation) and
/// freed with cuMemFreeAsync on the same stream by the destructor. Work
/// enqueued on that stream after the constructor may use it, and the host
/// after synchronising the stream; work of other streams must not (the
/// driver may hand the same memory to another stream's allocation once this
/// one's free has run there). Two allocations that are live at once on
/// different streams never overlap, so per-call workspaces made this way
/// let calls on different streams run concurrently. Also valid inside CUDA
/// graph capture (a memory node). Not copyable or movable. Throws
/// DriverError if the pool cannot be made or the allocation fails.
class StreamBuffer {
public:
  /// Allocates \p bytes (nothing for 0: ptr() is 0) on \p stream of
  /// \p device (nullptr: the legacy default stream).
  StreamBuffer(Device &device, size_t bytes, CUstream stream);
  ~StreamBuffer();
  StreamBuffer(const StreamBuffer &) = delete;
  StreamBuffer &operator=(const StreamBuffer &) = delete;

  /// The device address (0 when empty).
  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return bytes_; }

private:
  Device *device_;
  CUstream stream_;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Copies \p bytes from host memory \p src to device memory \p dst of
/// \p device (synchronous; for small results such as gradient vectors
/// written into a caller's device array). Throws UserError for a null
/// pointer with \p bytes > 0, DriverError if the copy fails (e.g. \p dst
/// is not device memory of \p device's context).
void copyHostToDevice(Device &device, void *dst, const void *src, size_t bytes);

/// Copies \p bytes from device memory \p src of \p device to host memory
/// \p dst (synchronous). Throws like copyHostToDevice.
void copyDeviceToHost(Device &device, void *dst, const void *src, size_t bytes);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_MEMORY_H
