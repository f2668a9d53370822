//===- Driver.cpp - Loading libcuda with dlopen ---------------------------===//
//
// The library is opened with RTLD_LOCAL so its symbols never interpose on the
// host's, and each entry point is looked up under the versioned name cuda.h
// maps it to (cuMemAlloc -> cuMemAlloc_v2): stringizing the macro-expanded
// name gives exactly the ABI the header's prototypes describe.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/Driver.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace flashjit::runtime {

namespace detail {
/// cuGetErrorName of the first driver that loaded (used by resultName()).
std::atomic<decltype(&::cuGetErrorName)> gErrorName{nullptr};
} // namespace detail

#define FLASHJIT_STR(x) #x
#define FLASHJIT_XSTR(x) FLASHJIT_STR(x)

std::unique_ptr<Driver> Driver::load(const std::string &path) {
  std::unique_ptr<Driver> d(new Driver());
  d->path_ = path;
  d->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d->handle_) {
    const char *why = dlerror();
    throw DriverError(fmt::format(
        "CUDA driver not available: dlopen(\"{}\") failed: {}. flashjit's GPU "
        "path needs an NVIDIA driver (libcuda.so.1); the CPU path works "
        "without one. Set FLASHJIT_LIBCUDA to the library's path if it is "
        "installed somewhere the loader does not look.",
        path, why ? why : "unknown error"));
  }
#define FLASHJIT_LOAD_SYMBOL(name)                                             \
  d->name = reinterpret_cast<decltype(d->name)>(                               \
      dlsym(d->handle_, FLASHJIT_XSTR(name)));                                 \
  if (!d->name)                                                                \
    throw DriverError(                                                         \
        fmt::format("CUDA driver at \"{}\" has no entry point {} (driver too " \
                    "old for CUDA {}.{} headers?)",                            \
                    path, FLASHJIT_XSTR(name), CUDA_VERSION / 1000,            \
                    CUDA_VERSION % 1000 / 10));
  FLASHJIT_DRIVER_FUNCTIONS(FLASHJIT_LOAD_SYMBOL)
#undef FLASHJIT_LOAD_SYMBOL
  // Optional: a driver without it still runs every kernel (plain launches).
  d->cuLaunchKernelEx = reinterpret_cast<decltype(d->cuLaunchKernelEx)>(
      dlsym(d->handle_, FLASHJIT_XSTR(cuLaunchKernelEx)));

  decltype(&::cuGetErrorName) expected = nullptr;
  detail::gErrorName.compare_exchange_strong(expected, d->cuGetErrorName);

  CUresult r = d->cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = nullptr, *text = nullptr;
    if (d->cuGetErrorName(r, &name) != CUDA_SUCCESS)
      name = nullptr;
    if (d->cuGetErrorString(r, &text) != CUDA_SUCCESS)
      text = nullptr;
    std::string hint;
    if (r == CUDA_ERROR_NO_DEVICE)
      hint = ": no CUDA-capable GPU is visible";
    else if (r == CUDA_ERROR_STUB_LIBRARY)
      hint = ": this is the toolkit's stub library, not an NVIDIA driver";
    throw DriverError(fmt::format(
        "CUDA driver at \"{}\" loaded but cuInit failed: {}{}{}", path,
        name ? std::string(name) : fmt::format("CUresult {}", int(r)),
        text ? fmt::format(" ({})", text) : std::string(), hint));
  }
  FLASHJIT_CHECK(d->cuDriverGetVersion(&d->version_));
  return d;
}

Driver::~Driver() {
  // The process-wide driver lives until exit; dlclose would race with other
  // static destructors that still hold CUDA handles, so the handle is kept.
}

namespace {
struct GlobalDriver {
  std::unique_ptr<Driver> driver;
  std::string error;
};

GlobalDriver &globalDriver() {
  static GlobalDriver g = [] {
    GlobalDriver out;
    const char *env = std::getenv("FLASHJIT_LIBCUDA");
    std::string path = env && *env ? env : "libcuda.so.1";
    try {
      out.driver = Driver::load(path);
    } catch (const Error &e) {
      out.error = e.what();
    }
    return out;
  }();
  return g;
}
} // namespace

Driver &Driver::get() {
  GlobalDriver &g = globalDriver();
  if (!g.driver)
    throw DriverError(g.error);
  return *g.driver;
}

bool Driver::available(std::string *whyNot) {
  GlobalDriver &g = globalDriver();
  if (!g.driver && whyNot)
    *whyNot = g.error;
  return static_cast<bool>(g.driver);
}

} // namespace flashjit::runtime
