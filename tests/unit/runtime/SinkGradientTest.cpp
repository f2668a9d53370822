//===- SinkGradientTest.cpp - The d sink kernel compiles and assembles ----===//
//
// No GPU needed: GpuSinkGradient's CUDA C (issue 22) compiles with NVRTC
// for sm_80 and sm_90a and ptxas assembles it with no spills and no local
// memory; its entry point has the argument list GpuSinkGradient::run
// passes (18 parameters). The [gpu] test (tests/gpu/SinkGpuTest.cpp) runs
// it against the host formula.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/SinkGradient.h"
#include "flashjit/runtime/Nvrtc.h"
#include "flashjit/runtime/Ptxas.h"

#include <catch2/catch.hpp>

#include <string>

using namespace flashjit::runtime;

TEST_CASE("the d sink kernel compiles with NVRTC and assembles cleanly",
          "[runtime][sink]") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    INFO(arch);
    NvrtcOptions o;
    o.arch = arch;
    NvrtcOutput out = compileCuda(GpuSinkGradient::source(), o);
    std::string entry =
        std::string(".entry ") + GpuSinkGradient::kKernelName + "(";
    size_t at = out.ptx.find(entry);
    REQUIRE(at != std::string::npos);
    std::string sig = out.ptx.substr(at, out.ptx.find(')', at) - at);
    int params = 0;
    for (size_t i = sig.find(".param"); i != std::string::npos;
         i = sig.find(".param", i + 1))
      ++params;
    CHECK(params == 18);
    PtxasReport r = runPtxas(out.ptx, arch);
    const PtxasFunctionReport *f = r.find(GpuSinkGradient::kKernelName);
    REQUIRE(f);
    INFO(r.log);
    CHECK(f->clean());
  }
}
