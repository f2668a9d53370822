//===- PagedOpsTest.cpp - The merge and append kernels compile cleanly ----===//
//
// No GPU needed: GpuPagedOps' CUDA C (issue 17: merge_states with an
// optional sink, the paged append) and the ring backward's accumulation
// (issue 20) compile with NVRTC for sm_80 and sm_90a and ptxas assembles
// the entries with no spills; they take the argument counts GpuPagedOps
// passes (merge 17, append 29, accumulate 17). The [gpu] tests
// (tests/gpu/DecodeGpuTest.cpp) run merge and append against the host
// versions, tests/gpu/RingBackwardGpuTest.cpp the accumulation inside the
// ring backward.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/PagedOps.h"
#include "flashjit/runtime/Nvrtc.h"
#include "flashjit/runtime/Ptxas.h"

#include <catch2/catch.hpp>

#include <string>

using namespace flashjit::runtime;

TEST_CASE("the merge, append and accumulate kernels compile with NVRTC and "
          "assemble cleanly",
          "[runtime][paged]") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    INFO(arch);
    NvrtcOptions o;
    o.arch = arch;
    NvrtcOutput out = compileCuda(GpuPagedOps::source(), o);
    PtxasReport r = runPtxas(out.ptx, arch);
    INFO(r.log);
    for (auto [name, want] : {std::pair{GpuPagedOps::kMergeName, 17},
                              std::pair{GpuPagedOps::kAppendName, 29},
                              std::pair{GpuPagedOps::kAccumulateName, 17}}) {
      INFO(name);
      std::string entry = std::string(".entry ") + name + "(";
      size_t at = out.ptx.find(entry);
      REQUIRE(at != std::string::npos);
      std::string sig = out.ptx.substr(at, out.ptx.find(')', at) - at);
      int params = 0;
      for (size_t i = sig.find(".param"); i != std::string::npos;
           i = sig.find(".param", i + 1))
        ++params;
      CHECK(params == want);
      const PtxasFunctionReport *f = r.find(name);
      REQUIRE(f);
      CHECK(f->clean());
    }
  }
}
