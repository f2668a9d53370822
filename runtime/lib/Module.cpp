//===- Module.cpp - Loading PTX and cubins, looking up kernels ------------===//
#include "flashjit/runtime/Module.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Ptxas.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace flashjit::runtime {

std::string_view toString(LoadPath path) {
  switch (path) {
  case LoadPath::Cubin:
    return "cubin";
  case LoadPath::NvJitLink:
    return "nvjitlink";
  case LoadPath::DriverJit:
    return "driver-jit";
  case LoadPath::Ptxas:
    return "ptxas";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// Function
//===----------------------------------------------------------------------===//

int Function::attribute(CUfunction_attribute a) const {
  int v = 0;
  FLASHJIT_CHECK(Driver::get().cuFuncGetAttribute(&v, a, handle_),
                 fmt::format("kernel {}", name_));
  return v;
}

int Function::numRegisters() const {
  return attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
}
int Function::localBytes() const {
  return attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
}
int Function::staticSharedBytes() const {
  return attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
}
int Function::maxThreadsPerBlock() const {
  return attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
}

void Function::setMaxDynamicSharedBytes(int bytes) const {
  const DeviceProperties &p = device_->properties();
  int total = staticSharedBytes() + bytes;
  if (bytes < 0 || total > p.maxSharedPerBlockOptin)
    throw UserError(fmt::format("kernel {} asks for {} bytes of dynamic "
                                "shared memory ({} in all with static); {} "
                                "allows at most {} per block",
                                name_, bytes, total, p.name,
                                p.maxSharedPerBlockOptin),
                    std::source_location());
  FLASHJIT_CHECK(
      Driver::get().cuFuncSetAttribute(
          handle_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
      fmt::format("kernel {}, {} bytes", name_, bytes));
}

//===----------------------------------------------------------------------===//
// Module
//===----------------------------------------------------------------------===//

Module::~Module() {
  if (module_) {
    device_->makeCurrent();
    (void)Driver::get().cuModuleUnload(module_); // never throw here
  }
}

Module::Module(Module &&other) noexcept
    : device_(other.device_), module_(std::exchange(other.module_, nullptr)),
      path_(other.path_), log_(std::move(other.log_)) {}

Module &Module::operator=(Module &&other) noexcept {
  if (this != &other) {
    Module tmp(std::move(*this));
    device_ = other.device_;
    module_ = std::exchange(other.module_, nullptr);
    path_ = other.path_;
    log_ = std::move(other.log_);
  }
  return *this;
}

Module Module::fromCubin(Device &device, const void *image, size_t size) {
  if (size < 4 || std::memcmp(image,
                              "\x7f"
                              "ELF",
                              4) != 0)
    throw UserError("Module::fromCubin: the image is not an ELF cubin",
                    std::source_location());
  device.makeCurrent();
  Module m;
  m.device_ = &device;
  m.path_ = LoadPath::Cubin;
  FLASHJIT_CHECK(
      Driver::get().cuModuleLoadDataEx(&m.module_, image, 0, nullptr, nullptr),
      fmt::format("cubin of {} bytes on {} ({})", size,
                  device.properties().name, device.properties().arch()));
  return m;
}

namespace {
/// The driver JIT with info and error log buffers. Returns the CUresult and
/// fills \p module and \p log.
CUresult driverJit(std::string_view ptx, int optLevel, CUmodule &module,
                   std::string &infoLog, std::string &errorLog) {
  constexpr size_t kLogSize = 64 * 1024;
  std::vector<char> info(kLogSize, '\0'), error(kLogSize, '\0');
  CUjit_option keys[] = {
      CU_JIT_INFO_LOG_BUFFER,  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_LOG_VERBOSE,      CU_JIT_OPTIMIZATION_LEVEL};
  void *values[] = {info.data(),
                    reinterpret_cast<void *>(kLogSize - 1),
                    error.data(),
                    reinterpret_cast<void *>(kLogSize - 1),
                    reinterpret_cast<void *>(1),
                    reinterpret_cast<void *>(static_cast<intptr_t>(optLevel))};
  std::string text(ptx); // the driver reads a NUL-terminated image
  CUresult r = Driver::get().cuModuleLoadDataEx(
      &module, text.c_str(), sizeof(keys) / sizeof(keys[0]), keys, values);
  infoLog = info.data();
  errorLog = error.data();
  return r;
}
} // namespace

Module Module::fromPtx(Device &device, std::string_view ptx,
                       const PtxLoadOptions &options) {
  device.makeCurrent();
  Module m;
  m.device_ = &device;
  const std::string arch = device.properties().arch();
  const char *env = std::getenv("FLASHJIT_DRIVER_JIT");
  bool forceJit = options.forceDriverJit || (env && std::string(env) == "1");

  const char *logEnv = std::getenv("FLASHJIT_ASSEMBLER_LOG");
  auto report = [&](const Module &loaded) {
    if (logEnv && std::string_view(logEnv) == "1")
      fmt::print(stderr, "flashjit: PTX loaded through {}\n{}\n",
                 toString(loaded.path_), loaded.log_);
  };
  auto name = [](Assembler a) {
    return a == Assembler::NvJitLink ? std::string_view("nvJitLink")
                                     : toString(a);
  };
  std::string why;                            // why no assembled cubin was used
  Assembler assembler = chooseAssembler(ptx); // UserError: the variable
  if (assembler == Assembler::DriverJit && !forceJit) {
    forceJit = true;
    why = ptxasAvailable()
              ? "FLASHJIT_ASSEMBLER=driver"
              : "no ptxas for wgmma/setmaxnreg PTX: the driver JIT assembles "
                "it whole-program (nvJitLink would serialise its wgmma)";
  }
  if (!forceJit) {
    try {
      CubinResult c = assembleCubin(ptx, arch, options.optLevel);
      CUresult r = Driver::get().cuModuleLoadDataEx(&m.module_, c.cubin.data(),
                                                    0, nullptr, nullptr);
      if (r == CUDA_SUCCESS) {
        m.path_ = c.assembler == Assembler::Ptxas ? LoadPath::Ptxas
                                                  : LoadPath::NvJitLink;
        m.log_ = c.infoLog;
        report(m);
        return m;
      }
      why = fmt::format("the {} cubin for {} did not load: {}", name(assembler),
                        arch, detail::resultName(r));
    } catch (const DriverError &e) {
      why = fmt::format("{} failed: {}", name(assembler), e.what());
    }
  } else if (why.empty()) {
    why = "driver JIT forced";
  }

  std::string info, error;
  CUresult r = driverJit(ptx, options.optLevel, m.module_, info, error);
  if (r != CUDA_SUCCESS)
    detail::fail("cuModuleLoadDataEx(<ptx>) [driver JIT]",
                 detail::resultName(r),
                 fmt::format("{}\n--- driver JIT error log ---\n{}\n--- "
                             "driver JIT info log ---\n{}",
                             why, error, info),
                 __FILE__, __LINE__);
  m.path_ = LoadPath::DriverJit;
  m.log_ = fmt::format("driver JIT fallback ({})\n{}", why, info);
  report(m);
  return m;
}

Function Module::function(const std::string &name) const {
  device_->makeCurrent();
  CUfunction f = nullptr;
  FLASHJIT_CHECK(Driver::get().cuModuleGetFunction(&f, module_, name.c_str()),
                 fmt::format("no kernel named '{}' in the module", name));
  return Function(*device_, f, name);
}

std::pair<CUdeviceptr, size_t> Module::global(const std::string &name) const {
  device_->makeCurrent();
  CUdeviceptr p = 0;
  size_t bytes = 0;
  FLASHJIT_CHECK(
      Driver::get().cuModuleGetGlobal(&p, &bytes, module_, name.c_str()),
      fmt::format("no __device__ global named '{}' in the module", name));
  return {p, bytes};
}

} // namespace flashjit::runtime
