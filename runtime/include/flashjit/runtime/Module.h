//===- Module.h - Loaded GPU code and its kernels ---------------*- C++ -*-===//
//
// A Module is a CUmodule in a device's primary context. PTX becomes a cubin
// through assembleCubin (-arch=<device arch> -O3: the toolkit's ptxas for
// wgmma / setmaxnreg kernels where it exists, else nvJitLink; see
// JitLink.h), with the driver's own JIT (cuModuleLoadDataEx with info/error
// log buffers) as the fallback when that fails or its cubin does not load; a
// failure of both throws a DriverError carrying both logs.
// FLASHJIT_ASSEMBLER_LOG=1 prints each PTX load's path and log to stderr.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_MODULE_H
#define FLASHJIT_RUNTIME_MODULE_H

#include <cuda.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace flashjit::runtime {

class Device;

/// How a module's code reached the GPU.
enum class LoadPath : uint8_t { Cubin, NvJitLink, DriverJit, Ptxas };
/// "cubin" / "nvjitlink" / "driver-jit" / "ptxas".
std::string_view toString(LoadPath path);

/// Options for Module::fromPtx.
struct PtxLoadOptions {
  /// Skip nvJitLink and JIT the PTX in the driver (also forced by the
  /// environment variable FLASHJIT_DRIVER_JIT=1).
  bool forceDriverJit = false;
  /// Optimisation level given to ptxas (nvJitLink -O /
  /// CU_JIT_OPTIMIZATION_LEVEL).
  int optLevel = 3;
};

/// A kernel of a loaded module. Cheap to copy; valid while its Module lives.
class Function {
public:
  Function() = default;
  Function(Device &device, CUfunction handle, std::string name)
      : device_(&device), handle_(handle), name_(std::move(name)) {}

  CUfunction handle() const { return handle_; }
  Device &device() const { return *device_; }
  /// The kernel's symbol name.
  const std::string &name() const { return name_; }
  /// Registers per thread (CU_FUNC_ATTRIBUTE_NUM_REGS).
  int numRegisters() const;
  /// Local memory per thread in bytes (spills and stack arrays).
  int localBytes() const;
  /// Statically declared shared memory in bytes.
  int staticSharedBytes() const;
  /// The most threads per block this kernel can be launched with.
  int maxThreadsPerBlock() const;
  /// Raises CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to \p bytes (needed
  /// above 48 KiB). Throws UserError if static + dynamic shared memory would
  /// exceed the device's opt-in limit, DriverError if the driver refuses.
  void setMaxDynamicSharedBytes(int bytes) const;

private:
  int attribute(CUfunction_attribute a) const;
  Device *device_ = nullptr;
  CUfunction handle_ = nullptr;
  std::string name_;
};

/// A loaded module; unloaded by the destructor. Move-only.
class Module {
public:
  /// Loads a cubin (ELF) image of \p size bytes. Throws DriverError (e.g.
  /// CUDA_ERROR_NO_BINARY_FOR_GPU for a cubin of another arch). The image
  /// must be complete: the driver parses it without its size, so a
  /// truncated cubin can crash the process (the cache verifies checksums).
  static Module fromCubin(Device &device, const void *image, size_t size);
  /// Loads PTX text: assembleCubin (ptxas or nvJitLink) to a cubin for the
  /// device's arch, else the driver JIT (see file comment). Throws DriverError
  /// with the logs.
  static Module fromPtx(Device &device, std::string_view ptx,
                        const PtxLoadOptions &options = {});

  Module() = default;
  ~Module();
  Module(Module &&other) noexcept;
  Module &operator=(Module &&other) noexcept;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  /// The kernel named \p name (its extern "C" symbol). Throws DriverError
  /// naming the symbol if the module has none (CUDA_ERROR_NOT_FOUND).
  Function function(const std::string &name) const;
  /// Address and size in bytes of the __device__ global \p name. Throws
  /// DriverError naming the symbol if absent.
  std::pair<CUdeviceptr, size_t> global(const std::string &name) const;

  CUmodule handle() const { return module_; }
  /// Which path loaded the code.
  LoadPath path() const { return path_; }
  /// The assembler/JIT info log (may be empty), plus a note of why the
  /// driver JIT fallback was taken, if it was.
  const std::string &log() const { return log_; }

private:
  Device *device_ = nullptr;
  CUmodule module_ = nullptr;
  LoadPath path_ = LoadPath::Cubin;
  std::string log_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_MODULE_H
