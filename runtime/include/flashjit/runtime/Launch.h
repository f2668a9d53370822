//===- Launch.h - Launching kernels on a stream -----------------*- C++ -*-===//
//
//   KernelArgs args;
//   args.add(q).add(k).add(n);             // copies of each argument
//   launch(fn, {.grid = {blocks, 1, 1}, .block = {128, 1, 1},
//               .dynamicSharedBytes = 96 * 1024, .stream = s}, args);
//
// launch() checks the configuration against the device and the kernel before
// the driver sees it, and raises the kernel's dynamic shared memory limit when
// more than the default 48 KiB is asked for.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LAUNCH_H
#define FLASHJIT_RUNTIME_LAUNCH_H

#include "flashjit/runtime/Module.h"

#include <cuda.h>

#include <array>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace flashjit::runtime {

class Device;

/// Grid, block, dynamic shared memory and stream of one launch.
struct LaunchConfig {
  /// Blocks in x, y, z; each at least 1 and within the device's limits.
  std::array<unsigned, 3> grid{1, 1, 1};
  /// Threads per block in x, y, z; the product at most the kernel's limit.
  std::array<unsigned, 3> block{1, 1, 1};
  /// Dynamic shared memory in bytes.
  unsigned dynamicSharedBytes = 0;
  /// The stream (nullptr: the context's default stream).
  CUstream stream = nullptr;
  /// Programmatic dependent launch (compute capability 9.0+): the kernel
  /// may start before the previous kernel on the stream has finished
  /// (cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
  /// SERIALIZATION), once every CTA of that kernel has issued
  /// `griddepcontrol.launch_dependents` or exited. The kernel must then
  /// execute `griddepcontrol.wait` (which waits for the previous kernel's
  /// completion and memory) before it touches anything that kernel writes,
  /// and every thread must reach it. Where programmaticLaunchAvailable()
  /// is false, a plain launch (the stricter order).
  bool programmaticDependency = false;
};

/// Whether launches on \p device can be programmatic dependent launches:
/// compute capability 9.0 or above and a CUDA 12.3 or later driver (its
/// stream capture keeps the dependency as a programmatic graph edge).
bool programmaticLaunchAvailable(const Device &device);

/// A kernel's argument list: each add() stores a copy of a trivially
/// copyable value (pointer, integer, float, or a struct laid out as the
/// kernel declares it) and data() gives the void** cuLaunchKernel takes.
class KernelArgs {
public:
  template <class T> KernelArgs &add(const T &value) {
    static_assert(std::is_trivially_copyable_v<T>,
                  "kernel arguments must be trivially copyable");
    auto storage = std::make_unique<std::max_align_t[]>(
        (sizeof(T) + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    std::memcpy(storage.get(), &value, sizeof(T));
    pointers_.push_back(storage.get());
    storage_.push_back(std::move(storage));
    return *this;
  }
  /// Pointers to the stored arguments, in order.
  void **data() { return pointers_.data(); }
  size_t size() const { return pointers_.size(); }

private:
  std::vector<std::unique_ptr<std::max_align_t[]>> storage_;
  std::vector<void *> pointers_;
};

/// Launches \p fn asynchronously on config.stream. Throws UserError for an
/// empty grid or block, a grid beyond the device's limits, too many threads
/// or too much shared memory for the kernel, and DriverError when the driver
/// rejects the launch (the message names the kernel and the configuration).
void launch(const Function &fn, const LaunchConfig &config, KernelArgs &args);

/// A stream of a device (cuStreamCreate, non-blocking), destroyed by the
/// destructor. Move-only.
class Stream {
public:
  explicit Stream(Device &device);
  ~Stream();
  Stream(Stream &&other) noexcept;
  Stream &operator=(Stream &&) = delete;
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  CUstream handle() const { return stream_; }
  /// Waits for the stream's work; throws DriverError for a failed kernel.
  void synchronize() const;

private:
  Device *device_;
  CUstream stream_ = nullptr;
};

/// Times GPU work on a stream with two CUDA events.
class EventTimer {
public:
  explicit EventTimer(Device &device);
  ~EventTimer();
  EventTimer(const EventTimer &) = delete;
  EventTimer &operator=(const EventTimer &) = delete;
  /// Records the start event on \p stream.
  void start(CUstream stream = nullptr);
  /// Records the stop event on \p stream, waits for it, and returns the
  /// milliseconds since start().
  float stopMs(CUstream stream = nullptr);

private:
  Device *device_;
  CUevent start_ = nullptr, stop_ = nullptr;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_LAUNCH_H
