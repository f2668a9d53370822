//===- Device.h - A GPU, its properties and its primary context -*- C++ -*-===//
//
// flashjit works in each device's primary context (the one the CUDA runtime
// and PyTorch use too), so device pointers and streams made by a host
// application are valid in flashjit's calls and vice versa.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_DEVICE_H
#define FLASHJIT_RUNTIME_DEVICE_H

#include <cuda.h>

#include <cstdint>
#include <string>

namespace flashjit::runtime {

/// What flashjit needs to know about a GPU.
struct DeviceProperties {
  /// Device ordinal (0-based).
  int ordinal = 0;
  /// Marketing name, e.g. "NVIDIA H200".
  std::string name;
  /// Compute capability, e.g. 9.0.
  int ccMajor = 0;
  int ccMinor = 0;
  /// Number of streaming multiprocessors.
  int smCount = 0;
  /// Threads per block limit.
  int maxThreadsPerBlock = 0;
  /// Shared memory per block without opt-in (bytes; 48 KiB).
  int maxSharedPerBlock = 0;
  /// Shared memory per block with opt-in (bytes; 227 KiB on sm_90).
  int maxSharedPerBlockOptin = 0;
  /// Shared memory per SM (bytes).
  int maxSharedPerSM = 0;
  /// Registers per block.
  int maxRegistersPerBlock = 0;
  /// Max grid dims (x, y, z).
  int maxGrid[3] = {0, 0, 0};
  /// Global memory in bytes.
  int64_t totalMemory = 0;

  /// The target name for code generation: "sm_90a" for compute capability
  /// 9.0 (arch-specific features such as wgmma need the `a` target), else
  /// "sm_<major><minor>" (e.g. "sm_80").
  std::string arch() const;
};

/// A GPU and its retained primary context; Thread-safe (get() locks).
class Device {
public:
  /// Number of visible GPUs. Throws DriverError when no driver is loaded
  /// (see Driver::get()).
  static int count();
  /// The process-wide Device for \p ordinal, its primary context retained on
  /// first use. Throws DriverError with no driver, UserError for an ordinal
  /// outside [0, count()).
  static Device &get(int ordinal = 0);
  /// True when a driver is loaded and at least one GPU is visible; otherwise
  /// false with the reason in \p whyNot. Never throws.
  static bool available(std::string *whyNot = nullptr);

  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device();

  /// Makes this device's primary context current on the calling thread.
  void makeCurrent() const;
  /// Waits for all work in the context (cuCtxSynchronize).
  void synchronize() const;
  const DeviceProperties &properties() const { return props_; }
  CUdevice handle() const { return device_; }
  CUcontext context() const { return context_; }

private:
  explicit Device(int ordinal);
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceProperties props_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_DEVICE_H
