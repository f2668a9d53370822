//===- ReferenceKernelTest.cpp - The NVRTC reference's generated source ---===//
//
// Without a GPU: the reference kernel of each covered variant compiles with
// NVRTC for sm_80 and sm_90a and assembles with ptxas with no spills and no
// stack frame.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestSupport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Nvrtc.h"
#include "flashjit/runtime/NvrtcReference.h"
#include "flashjit/runtime/Ptxas.h"

#include <catch2/catch.hpp>

using namespace flashjit;
using namespace flashjit::runtime;
using Catch::Matchers::Contains;

TEST_CASE("reference kernel source names the variant and its expressions",
          "[runtime][reference]") {
  AttentionSpec s;
  Variant v("doc");
  Buffer doc = buffer<int32_t>("doc_id");
  v.mask(doc[q_idx] == doc[kv_idx]);
  v.scoreMod(softcap(param<float>("cap")));
  s.variant = v;
  s.causal = Causal::BottomRight;
  ReferenceKernelSource k = generateReferenceKernel(s);
  CHECK(k.kernelName == "fj_reference_doc");
  CHECK(k.threadsPerBlock == 32 * k.rowsPerBlock);
  CHECK(k.dynamicSharedBytes ==
        4 * (k.rowsPerBlock * 128 + k.keysPerTile * 129 + k.keysPerTile * 128));
  CHECK_THAT(k.source, Contains("extern \"C\" __global__"));
  CHECK_THAT(k.source, Contains("const float p_cap"));
  CHECK_THAT(k.source,
             Contains("const int *__restrict__ buf_doc_id, const long long "
                      "buf_doc_id_size"));
  CHECK_THAT(k.source, Contains("fj_load(buf_doc_id, buf_doc_id_size, (long "
                                "long)(q_idx), 1)"));
  CHECK_THAT(k.source, Contains("__nv_bfloat16"));
}

TEST_CASE("reference kernel rejects what it cannot run",
          "[runtime][reference]") {
  AttentionSpec s;
  s.headDimQK = s.headDimV = 1024;
  REQUIRE_THROWS_WITH(generateReferenceKernel(s),
                      Contains("head_dim_qk = 1024") && Contains("512"));
  s.headDimQK = s.headDimV = 64;
  s.headsQ = 3;
  s.headsKV = 2;
  REQUIRE_THROWS_AS(generateReferenceKernel(s), UserError);
}

TEST_CASE("reference kernels compile with NVRTC and pass ptxas for sm_80 and "
          "sm_90a",
          "[runtime][reference][ptxas]") {
  for (const test::NamedSpec &named : test::referenceVariants()) {
    ReferenceKernelSource k = generateReferenceKernel(named.spec);
    for (const char *arch : {"sm_80", "sm_90a"}) {
      INFO(named.label << " for " << arch);
      NvrtcOptions o;
      o.arch = arch;
      o.programName = k.kernelName + ".cu";
      NvrtcOutput out = compileCuda(k.source, o);
      PtxasReport r = runPtxas(out.ptx, arch);
      const PtxasFunctionReport *f = r.find(k.kernelName);
      REQUIRE(f);
      INFO(r.log);
      CHECK(f->clean());
      CHECK(f->registers <= 255);
      CHECK(f->sharedBytes == 0); // all shared memory is dynamic
    }
  }
}
