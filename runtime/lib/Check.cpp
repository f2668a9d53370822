//===- Check.cpp - Turning CUDA API failures into DriverError -------------===//
#include "Check.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <atomic>

namespace flashjit::runtime::detail {

extern std::atomic<decltype(&::cuGetErrorName)> gErrorName;

std::string resultName(CUresult r) {
  const char *name = nullptr;
  if (auto fn = gErrorName.load(); fn && fn(r, &name) == CUDA_SUCCESS && name)
    return name;
  return fmt::format("CUresult {}", static_cast<int>(r));
}

std::string resultName(nvrtcResult r) { return nvrtcGetErrorString(r); }

std::string resultName(nvJitLinkResult r) {
  switch (r) {
#define FLASHJIT_CASE(x)                                                       \
  case x:                                                                      \
    return #x;
    FLASHJIT_CASE(NVJITLINK_SUCCESS)
    FLASHJIT_CASE(NVJITLINK_ERROR_UNRECOGNIZED_OPTION)
    FLASHJIT_CASE(NVJITLINK_ERROR_MISSING_ARCH)
    FLASHJIT_CASE(NVJITLINK_ERROR_INVALID_INPUT)
    FLASHJIT_CASE(NVJITLINK_ERROR_PTX_COMPILE)
    FLASHJIT_CASE(NVJITLINK_ERROR_NVVM_COMPILE)
    FLASHJIT_CASE(NVJITLINK_ERROR_INTERNAL)
    FLASHJIT_CASE(NVJITLINK_ERROR_THREADPOOL)
    FLASHJIT_CASE(NVJITLINK_ERROR_UNRECOGNIZED_INPUT)
    FLASHJIT_CASE(NVJITLINK_ERROR_FINALIZE)
    FLASHJIT_CASE(NVJITLINK_ERROR_NULL_INPUT)
    FLASHJIT_CASE(NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS)
    FLASHJIT_CASE(NVJITLINK_ERROR_INCORRECT_INPUT_TYPE)
    FLASHJIT_CASE(NVJITLINK_ERROR_ARCH_MISMATCH)
    FLASHJIT_CASE(NVJITLINK_ERROR_OUTDATED_LIBRARY)
    FLASHJIT_CASE(NVJITLINK_ERROR_MISSING_FATBIN)
    FLASHJIT_CASE(NVJITLINK_ERROR_UNRECOGNIZED_ARCH)
    FLASHJIT_CASE(NVJITLINK_ERROR_UNSUPPORTED_ARCH)
    FLASHJIT_CASE(NVJITLINK_ERROR_LTO_NOT_ENABLED)
#undef FLASHJIT_CASE
  default:
    return fmt::format("nvJitLinkResult {}", static_cast<int>(r));
  }
}

void fail(std::string_view call, std::string_view result, std::string_view log,
          const char *file, int line) {
  std::string msg =
      fmt::format("{} failed: {} ({}:{})", call, result, file, line);
  if (!log.empty())
    msg += fmt::format("\n--- log ---\n{}", log);
  throw DriverError(msg);
}

} // namespace flashjit::runtime::detail
