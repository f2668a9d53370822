//===- Driver.h - The CUDA driver API, loaded at run time -------*- C++ -*-===//
//
// flashjit never links libcuda: the driver is opened with dlopen the first
// time a GPU is asked for, so the library (and its CPU path) loads on a
// machine with no NVIDIA driver. There, every GPU call throws DriverError
// saying that the driver could not be loaded and why.
//
// Driver holds the function pointers of the entry points flashjit uses, with
// the types of the CUDA headers (cuda.h is used for types only). Members are
// named like the C functions, so `drv.cuMemAlloc(&p, n)` reads as the C API
// (cuda.h's versioning macros map both to the same `_v2` symbol).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_DRIVER_H
#define FLASHJIT_RUNTIME_DRIVER_H

#include <cuda.h>

#include <memory>
#include <string>

namespace flashjit::runtime {

/// The driver entry points flashjit uses (X-macro: one line per function).
#define FLASHJIT_DRIVER_FUNCTIONS(X)                                           \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetName)                                                           \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDeviceTotalMem)                                                          \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuDevicePrimaryCtxRelease)                                                 \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxSynchronize)                                                          \
  X(cuModuleLoadDataEx)                                                        \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuModuleGetGlobal)                                                         \
  X(cuFuncGetAttribute)                                                        \
  X(cuFuncSetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemPoolCreate)                                                           \
  X(cuMemPoolSetAttribute)                                                     \
  X(cuMemAllocFromPoolAsync)                                                   \
  X(cuMemFreeAsync)                                                            \
  X(cuMemGetInfo)                                                              \
  X(cuMemcpyHtoD)                                                              \
  X(cuMemcpyDtoH)                                                              \
  X(cuPointerGetAttributes)                                                    \
  X(cuMemcpyHtoDAsync)                                                         \
  X(cuMemsetD8)                                                                \
  X(cuMemsetD8Async)                                                           \
  X(cuMemsetD32Async)                                                          \
  X(cuMemcpy2DAsync)                                                           \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamWaitEvent)                                                         \
  X(cuEventCreate)                                                             \
  X(cuEventRecord)                                                             \
  X(cuEventSynchronize)                                                        \
  X(cuEventElapsedTime)                                                        \
  X(cuEventDestroy)                                                            \
  X(cuTensorMapEncodeTiled)

/// The loaded CUDA driver: one function pointer per entry point.
class Driver {
public:
  /// The process-wide driver, loaded on first use: dlopen of
  /// $FLASHJIT_LIBCUDA if set, else "libcuda.so.1", then cuInit(0). Throws
  /// DriverError when the library cannot be opened (no NVIDIA driver), an
  /// entry point is missing, or cuInit fails (e.g. CUDA_ERROR_NO_DEVICE). A
  /// failure is remembered: every later call throws the same message.
  static Driver &get();

  /// True if get() succeeds; otherwise false, with get()'s error message in
  /// \p whyNot when given. Never throws.
  static bool available(std::string *whyNot = nullptr);

  /// Loads a driver library from \p path (dlopen) and calls cuInit(0); for
  /// tests of the loading path. Throws DriverError as get() does.
  static std::unique_ptr<Driver> load(const std::string &path);

  ~Driver();
  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

  /// The driver's CUDA version (cuDriverGetVersion, e.g. 13000).
  int version() const { return version_; }
  /// The path the library was opened from.
  const std::string &path() const { return path_; }

#define FLASHJIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  FLASHJIT_DRIVER_FUNCTIONS(FLASHJIT_DRIVER_MEMBER)
#undef FLASHJIT_DRIVER_MEMBER

  /// cuLaunchKernelEx (launch attributes, e.g. programmatic dependent
  /// launch): null on a driver older than CUDA 11.8, which load() accepts
  /// (launch() then launches plainly).
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;

private:
  Driver() = default;
  void *handle_ = nullptr;
  int version_ = 0;
  std::string path_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_DRIVER_H
