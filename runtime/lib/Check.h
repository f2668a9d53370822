//===- Check.h - The one checking macro for CUDA API calls ------*- C++ -*-===//
//
// Every call into the CUDA driver, NVRTC or nvJitLink goes through
// FLASHJIT_CHECK. A failure throws flashjit::DriverError whose message names
// the call, the result code (cuGetErrorName / nvrtcGetErrorString / the
// nvJitLink enum name), the source line, and the compiler or JIT log when the
// caller passes one (a string or a callable returning the log, run only on
// failure). Never exit(): a library must not end its host's process.
//
//   FLASHJIT_CHECK(d.cuModuleGetFunction(&f, mod, name.c_str()));
//   FLASHJIT_CHECK(nvrtcCompileProgram(p, n, opts), [&] { return log(p); });
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_CHECK_H
#define FLASHJIT_RUNTIME_LIB_CHECK_H

#include <cuda.h>
#include <nvJitLink.h>
#include <nvrtc.h>

#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

namespace flashjit::runtime::detail {

/// Name of a driver result ("CUDA_ERROR_OUT_OF_MEMORY"), through the loaded
/// driver's cuGetErrorName when available.
std::string resultName(CUresult r);
/// NVRTC's name of the result ("NVRTC_ERROR_COMPILATION").
std::string resultName(nvrtcResult r);
/// The enum's name ("NVJITLINK_ERROR_PTX_COMPILE").
std::string resultName(nvJitLinkResult r);

/// Throws DriverError for a failed call; \p log may be empty.
[[noreturn]] void fail(std::string_view call, std::string_view result,
                       std::string_view log, const char *file, int line);

/// A log supplied to FLASHJIT_CHECK: nothing, a string, or a callable that
/// returns the log (called only on failure).
class LogFn {
public:
  LogFn() = default;
  LogFn(std::string text) : fn_([t = std::move(text)] { return t; }) {}
  LogFn(const char *text) : LogFn(std::string(text)) {}
  template <class F>
  requires std::is_invocable_r_v<std::string, F> LogFn(F f)
      : fn_(std::move(f)) {}
  explicit operator bool() const { return static_cast<bool>(fn_); }
  std::string operator()() const { return fn_(); }

private:
  std::function<std::string()> fn_;
};

template <class Result, class Success>
inline void checkImpl(Result r, Success ok, const char *call, const char *file,
                      int line, const LogFn &log) {
  if (r == ok)
    return;
  fail(call, resultName(r), log ? log() : std::string(), file, line);
}

inline void check(CUresult r, const char *call, const char *file, int line,
                  const LogFn &log = {}) {
  checkImpl(r, CUDA_SUCCESS, call, file, line, log);
}
inline void check(nvrtcResult r, const char *call, const char *file, int line,
                  const LogFn &log = {}) {
  checkImpl(r, NVRTC_SUCCESS, call, file, line, log);
}
inline void check(nvJitLinkResult r, const char *call, const char *file,
                  int line, const LogFn &log = {}) {
  checkImpl(r, NVJITLINK_SUCCESS, call, file, line, log);
}

} // namespace flashjit::runtime::detail

/// Checks the result of a CUDA driver, NVRTC or nvJitLink call; the optional
/// second argument is the log (string or callable) attached on failure.
#define FLASHJIT_CHECK(call, ...)                                              \
  ::flashjit::runtime::detail::check((call), #call, __FILE__,                  \
                                     __LINE__ __VA_OPT__(, ) __VA_ARGS__)

#endif // FLASHJIT_RUNTIME_LIB_CHECK_H
