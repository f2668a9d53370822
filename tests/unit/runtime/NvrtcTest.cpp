//===- NvrtcTest.cpp - NVRTC, nvJitLink and ptxas wrappers ----------------===//
#include "flashjit/runtime/Nvrtc.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Ptxas.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>

using namespace flashjit;
using namespace flashjit::runtime;
using Catch::Matchers::Contains;

namespace {
const char *kSaxpy = R"(
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
} // namespace

TEST_CASE("NVRTC compiles CUDA C++ to PTX and to a cubin", "[runtime][nvrtc]") {
  REQUIRE(nvrtcVersionNumber() >= 12000);
  for (const char *arch : {"sm_80", "sm_90a"}) {
    NvrtcOptions o;
    o.arch = arch;
    NvrtcOutput ptxOnly = compileCuda(kSaxpy, o);
    REQUIRE_THAT(ptxOnly.ptx, Contains(".entry saxpy"));
    REQUIRE(ptxOnly.cubin.empty());
    o.emitCubin = true;
    NvrtcOutput both = compileCuda(kSaxpy, o);
    REQUIRE(both.cubin.size() > 4);
    REQUIRE(std::string(both.cubin.data() + 1, 3) == "ELF");
  }
}

TEST_CASE("an NVRTC compile error carries the result name and the log",
          "[runtime][nvrtc]") {
  NvrtcOptions o;
  o.arch = "sm_80";
  o.programName = "broken.cu";
  REQUIRE_THROWS_AS(compileCuda("__global__ void f() { undeclared_x = 1; }", o),
                    DriverError);
  REQUIRE_THROWS_WITH(
      compileCuda("__global__ void f() { undeclared_x = 1; }", o),
      Contains("nvrtcCompileProgram") && Contains("NVRTC_ERROR_COMPILATION") &&
          Contains("broken.cu") && Contains("undeclared_x") &&
          Contains("--gpu-architecture"));
  o.arch = "compute_80";
  REQUIRE_THROWS_AS(compileCuda(kSaxpy, o), UserError);
}

TEST_CASE("nvJitLink assembles PTX into a cubin and reports bad PTX",
          "[runtime][nvjitlink]") {
  REQUIRE(nvJitLinkVersion() >= 12000);
  NvrtcOptions o;
  o.arch = "sm_90a";
  std::string ptx = compileCuda(kSaxpy, o).ptx;
  CubinResult c = ptxToCubin(ptx, "sm_90a");
  REQUIRE(std::string(c.cubin.data() + 1, 3) == "ELF");
  CubinResult verbose = ptxToCubin(ptx, "sm_90a", 3, {"-verbose"});
  REQUIRE_THAT(verbose.infoLog, Contains("saxpy"));

  std::string bad = ptx;
  bad.replace(bad.find(".entry saxpy"), 12, ".entry saxpy bogus_token");
  REQUIRE_THROWS_WITH(ptxToCubin(bad, "sm_90a"),
                      Contains("nvJitLink") &&
                          Contains("NVJITLINK_ERROR_PTX_COMPILE") &&
                          Contains("--- log ---") && Contains("bogus_token"));
  REQUIRE_THROWS_AS(ptxToCubin(ptx, "compute_90"), UserError);
}

TEST_CASE("PTX entries are found by name, whole words only", "[runtime]") {
  const char *ptx = ".version 8.0\n"
                    ".visible .entry doc_id(\n"
                    "  .param .u64 a)\n{ ret; }\n"
                    "// .entry doc_id_block_mask( in a comment\n"
                    "\t.entry doc_id_block_mask(\n  .param .u64 b)\n"
                    "{ ret; }\n";
  CHECK(ptxDefinesEntry(ptx, "doc_id"));
  CHECK(ptxDefinesEntry(ptx, "doc_id_block_mask"));
  CHECK_FALSE(ptxDefinesEntry(ptx, "doc"));
  CHECK_FALSE(ptxDefinesEntry(ptx, "id_block_mask"));
  CHECK_FALSE(ptxDefinesEntry(".version 8.0\n// .entry x(\n", "x"));
  CHECK_FALSE(ptxDefinesEntry("", "x"));
}

TEST_CASE("ptxas -v reports are parsed", "[runtime][ptxas]") {
  const char *log = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'g' for 'sm_90a'
ptxas info    : Function properties for g
    400 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 400 bytes cumulative stack size
ptxas info    : Compile time = 19.901 ms
ptxas info    : Compiling entry function 'f' for 'sm_90a'
ptxas info    : Function properties for f
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem
)";
  PtxasReport r = parsePtxasReport(log);
  REQUIRE(r.functions.size() == 2);
  const PtxasFunctionReport *g = r.find("g");
  REQUIRE(g);
  CHECK(g->registers == 32);
  CHECK(g->stackFrameBytes == 400);
  CHECK(g->spillStoreBytes == 8);
  CHECK(g->spillLoadBytes == 12);
  CHECK_FALSE(g->clean());
  const PtxasFunctionReport *f = r.find("f");
  REQUIRE(f);
  CHECK(f->registers == 10);
  CHECK(f->barriers == 1);
  CHECK(f->sharedBytes == 256);
  CHECK(f->clean());
}

TEST_CASE("ptxas assembles NVRTC's PTX for sm_80 and sm_90a",
          "[runtime][ptxas]") {
  for (const char *arch : {"sm_80", "sm_90a"}) {
    NvrtcOptions o;
    o.arch = arch;
    PtxasReport r = runPtxas(compileCuda(kSaxpy, o).ptx, arch);
    const PtxasFunctionReport *f = r.find("saxpy");
    REQUIRE(f);
    CHECK(f->registers > 0);
    CHECK(f->clean());
  }
  REQUIRE_THROWS_WITH(runPtxas("this is not ptx", "sm_90a"),
                      Contains("ptxas") && Contains("failed"));
}

namespace {
/// A kernel with what nvJitLink's separate compilation degrades: setmaxnreg
/// and a wgmma.mma_async (descriptors from the arguments; compiled, never
/// run).
const char *kWgmma = R"(
extern "C" __global__ void __launch_bounds__(384) wg(unsigned long long a,
                                                     unsigned long long b,
                                                     float *out) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;\n"
               "wgmma.commit_group.sync.aligned;\n"
               "wgmma.wait_group.sync.aligned 0;\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "l"(a), "l"(b));
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}
)";

/// Sets an environment variable for one scope, restoring the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char *n, const char *value) : name(n) {
    if (const char *v = std::getenv(n))
      old = v;
    ::setenv(n, value, 1);
  }
  ~ScopedEnv() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};
} // namespace

TEST_CASE("wgmma and setmaxnreg PTX is assembled whole-program by ptxas",
          "[runtime][ptxas]") {
  NvrtcOptions o;
  o.arch = "sm_90a";
  std::string wg = compileCuda(kWgmma, o).ptx;
  std::string plain = compileCuda(kSaxpy, o).ptx;
  REQUIRE(wg.find("wgmma.mma_async") != std::string::npos);
  REQUIRE(ptxasAvailable()); // CI has the toolkit
  CHECK(chooseAssembler(plain) == Assembler::Ptxas);
  REQUIRE(chooseAssembler(wg) == Assembler::Ptxas);

  // Why: nvJitLink assembles its input as a separately compiled unit, where
  // ptxas ignores setmaxnreg (C7504; it also serialises the wgmma chains of
  // generated kernels, C7509: GpuCodegenTest).
  CubinResult viaLink = ptxToCubin(wg, "sm_90a", 3, {"-verbose"});
  CHECK_THAT(viaLink.infoLog, Contains("C7504"));
  CubinResult viaPtxas = assembleCubin(wg, "sm_90a");
  CHECK(viaPtxas.assembler == Assembler::Ptxas);
  REQUIRE(std::string(viaPtxas.cubin.data() + 1, 3) == "ELF");
  CHECK_THAT(viaPtxas.infoLog, Contains("wg"));
  CHECK(viaPtxas.infoLog.find("C7509") == std::string::npos);
  CHECK(viaPtxas.infoLog.find("C7504") == std::string::npos);
  const PtxasFunctionReport *f = parsePtxasReport(viaPtxas.infoLog).find("wg");
  REQUIRE(f);
  CHECK(f->clean());

  SECTION("FLASHJIT_ASSEMBLER picks the assembler") {
    {
      ScopedEnv e("FLASHJIT_ASSEMBLER", "nvjitlink");
      CHECK(chooseAssembler(wg) == Assembler::NvJitLink);
      CHECK(assembleCubin(wg, "sm_90a").assembler == Assembler::NvJitLink);
    }
    {
      ScopedEnv e("FLASHJIT_ASSEMBLER", "ptxas");
      CHECK(chooseAssembler(plain) == Assembler::Ptxas);
      ScopedEnv p("FLASHJIT_PTXAS", "/nonexistent/ptxas");
      REQUIRE_THROWS_WITH(chooseAssembler(plain),
                          Contains("FLASHJIT_ASSEMBLER=ptxas") &&
                              Contains("/nonexistent/ptxas"));
    }
    {
      ScopedEnv e("FLASHJIT_ASSEMBLER", "nvcc");
      REQUIRE_THROWS_AS(chooseAssembler(plain), UserError);
      REQUIRE_THROWS_WITH(chooseAssembler(plain), Contains("'nvcc'"));
    }
    {
      ScopedEnv e("FLASHJIT_ASSEMBLER", "driver");
      CHECK(chooseAssembler(plain) == Assembler::DriverJit);
      // A cubin asked for anyway comes from ptxas where it exists.
      CHECK(assembleCubin(wg, "sm_90a").assembler == Assembler::Ptxas);
    }
    {
      // auto without a ptxas executable: the driver JIT for wgmma PTX (not
      // an error), nvJitLink for the rest.
      ScopedEnv p("FLASHJIT_PTXAS", "/nonexistent/ptxas");
      CHECK(chooseAssembler(wg) == Assembler::DriverJit);
      CHECK(chooseAssembler(plain) == Assembler::NvJitLink);
      CHECK(assembleCubin(wg, "sm_90a").assembler == Assembler::NvJitLink);
    }
  }
}
