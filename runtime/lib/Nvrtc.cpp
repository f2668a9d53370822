//===- Nvrtc.cpp - CUDA C++ to PTX/cubin with NVRTC -----------------------===//
#include "flashjit/runtime/Nvrtc.h"

#include "Check.h"
#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <cstdlib>

namespace flashjit::runtime {

std::string cudaIncludeDir() {
  const char *env = std::getenv("FLASHJIT_CUDA_INCLUDE");
  if (env && *env)
    return env;
  return FLASHJIT_CUDA_INCLUDE_DIR;
}

int nvrtcVersionNumber() {
  int major = 0, minor = 0;
  FLASHJIT_CHECK(nvrtcVersion(&major, &minor));
  return major * 1000 + minor * 10;
}

namespace {
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p)
      (void)nvrtcDestroyProgram(&p);
  }
  std::string log() const {
    size_t n = 0;
    if (nvrtcGetProgramLogSize(p, &n) != NVRTC_SUCCESS || n <= 1)
      return {};
    std::string s(n, '\0');
    if (nvrtcGetProgramLog(p, s.data()) != NVRTC_SUCCESS)
      return {};
    s.resize(n - 1);
    return s;
  }
};

bool validArch(std::string_view arch) {
  if (arch.size() < 5 || arch.substr(0, 3) != "sm_")
    return false;
  size_t i = 3;
  while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9')
    ++i;
  return i > 3 && (i == arch.size() || (i + 1 == arch.size() &&
                                        (arch[i] == 'a' || arch[i] == 'f')));
}
} // namespace

NvrtcOutput compileCuda(std::string_view source, const NvrtcOptions &o) {
  if (!validArch(o.arch))
    throw UserError(fmt::format("NVRTC arch '{}' is not of the form sm_XX or "
                                "sm_XXa",
                                o.arch),
                    std::source_location());
  std::vector<std::string> opts;
  std::string target = o.arch;
  if (!o.emitCubin)
    target.replace(0, 2, "compute");
  opts.push_back("--gpu-architecture=" + target);
  opts.push_back("--std=c++17");
  opts.push_back("-default-device");
  opts.push_back("-I" + cudaIncludeDir());
  if (o.fastMath)
    opts.push_back("--use_fast_math");
  if (o.lineInfo)
    opts.push_back("-lineinfo");
  opts.insert(opts.end(), o.extraOptions.begin(), o.extraOptions.end());
  std::vector<const char *> argv;
  for (const std::string &s : opts)
    argv.push_back(s.c_str());

  std::string text(source);
  Program prog;
  FLASHJIT_CHECK(nvrtcCreateProgram(
      &prog.p, text.c_str(), o.programName.c_str(), 0, nullptr, nullptr));
  FLASHJIT_CHECK(
      nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data()),
      [&] {
        return fmt::format("options: {}\n{}", fmt::join(opts, " "), prog.log());
      });
  NvrtcOutput out;
  out.log = prog.log();
  size_t n = 0;
  FLASHJIT_CHECK(nvrtcGetPTXSize(prog.p, &n));
  out.ptx.assign(n, '\0');
  FLASHJIT_CHECK(nvrtcGetPTX(prog.p, out.ptx.data()));
  while (!out.ptx.empty() && out.ptx.back() == '\0')
    out.ptx.pop_back();
  if (o.emitCubin) {
    FLASHJIT_CHECK(nvrtcGetCUBINSize(prog.p, &n));
    out.cubin.resize(n);
    FLASHJIT_CHECK(nvrtcGetCUBIN(prog.p, out.cubin.data()));
  }
  return out;
}

} // namespace flashjit::runtime
