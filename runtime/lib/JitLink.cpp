//===- JitLink.cpp - PTX to cubin with nvJitLink --------------------------===//
#include "flashjit/runtime/JitLink.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

namespace flashjit::runtime {

namespace {
/// Owns an nvJitLinkHandle.
struct LinkHandle {
  nvJitLinkHandle h = nullptr;
  ~LinkHandle() {
    if (h)
      (void)nvJitLinkDestroy(&h);
  }
  std::string errorLog() const {
    size_t n = 0;
    if (nvJitLinkGetErrorLogSize(h, &n) != NVJITLINK_SUCCESS || n <= 1)
      return {};
    std::string s(n, '\0');
    if (nvJitLinkGetErrorLog(h, s.data()) != NVJITLINK_SUCCESS)
      return {};
    s.resize(n - 1);
    return s;
  }
  std::string infoLog() const {
    size_t n = 0;
    if (nvJitLinkGetInfoLogSize(h, &n) != NVJITLINK_SUCCESS || n <= 1)
      return {};
    std::string s(n, '\0');
    if (nvJitLinkGetInfoLog(h, s.data()) != NVJITLINK_SUCCESS)
      return {};
    s.resize(n - 1);
    return s;
  }
};
} // namespace

CubinResult ptxToCubin(std::string_view ptx, std::string_view arch,
                       int optLevel,
                       const std::vector<std::string> &extraOptions) {
  if (arch.substr(0, 3) != "sm_")
    throw UserError(fmt::format("arch '{}' is not of the form sm_XX", arch),
                    std::source_location());
  std::vector<std::string> opts = {fmt::format("-arch={}", arch),
                                   fmt::format("-O{}", optLevel)};
  opts.insert(opts.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char *> argv;
  for (const std::string &o : opts)
    argv.push_back(o.c_str());

  LinkHandle link;
  FLASHJIT_CHECK(
      nvJitLinkCreate(&link.h, static_cast<uint32_t>(argv.size()), argv.data()),
      fmt::format("options: {}", fmt::join(opts, " ")));
  auto log = [&] { return link.errorLog() + link.infoLog(); };
  // nvJitLink reads the PTX as a NUL-terminated string.
  std::string text(ptx);
  FLASHJIT_CHECK(nvJitLinkAddData(link.h, NVJITLINK_INPUT_PTX, text.c_str(),
                                  text.size() + 1, "flashjit.ptx"),
                 log);
  FLASHJIT_CHECK(nvJitLinkComplete(link.h), log);
  size_t size = 0;
  FLASHJIT_CHECK(nvJitLinkGetLinkedCubinSize(link.h, &size), log);
  CubinResult out;
  out.cubin.resize(size);
  FLASHJIT_CHECK(nvJitLinkGetLinkedCubin(link.h, out.cubin.data()), log);
  out.infoLog = link.infoLog();
  return out;
}

int nvJitLinkVersion() {
  unsigned major = 0, minor = 0;
  FLASHJIT_CHECK(::nvJitLinkVersion(&major, &minor));
  return static_cast<int>(major * 1000 + minor * 10);
}

} // namespace flashjit::runtime
