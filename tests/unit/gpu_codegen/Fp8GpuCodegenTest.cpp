//===- Fp8GpuCodegenTest.cpp - The sm_90a fp8 forward's PTX ---------------===//
//
// Issue 18. Without a GPU: every kernel of fp8Kernels() (the ones the
// [gpu][fp8] tests run) and the CPU test's variants (a score modifier
// reading the head and a runtime parameter, window + softcap) compile for
// sm_90a, declare the launch the runtime checks (gpuLaunchConfigMismatch:
// the descale arguments after the fixed ones), use the fp8 instructions
// (wgmma k32 with the spec's element types, P packed by
// cvt.rn.satfinite.e4m3x2.f32, the V transpose's byte permutes) and
// assemble with ptxas without spills or a stack frame; varlen and
// block-sparse kernels among them, head dims 64 to 256.
//
//===----------------------------------------------------------------------===//
#include "KernelMatrix.h"

#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/compiler/MaskedValueTesting.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Ptxas.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <tuple>
#include <vector>

using namespace flashjit;

namespace {

const char *ptxType(DType t) { return t == DType::E5M2 ? "e5m2" : "e4m3"; }

/// Compiles \p spec for sm_90a with the default options (\p varlen,
/// \p blockSparse) and checks its PTX; \p masked: the spec has a mask, so
/// the kernel isolates masked keys (WgmmaFp8.cpp: the V transpose's
/// barrier votes, bar.red.or; the guarded path decodes fp8 weights and
/// values), else it has neither.
void checkFp8Kernel(const AttentionSpec &spec, bool masked, bool varlen = false,
                    bool blockSparse = false) {
  GpuCompileOptions o;
  o.arch = "sm_90a";
  o.varlen = varlen;
  o.blockSparse = blockSparse;
  GpuKernelImage img = compileGpu(spec, o);
  CHECK(img.config.wgmma);
  CHECK_FALSE(img.config.tma);
  CHECK(img.config.varlen == varlen);
  CHECK(img.config.blockSparse == blockSparse);
  CHECK(img.config.blockN == (spec.headDimV <= 128 ? 128 : 64));
  CHECK(runtime::gpuLaunchConfigMismatch(spec, img.info(), img.ptx) == "");
  std::string s =
      fmt::format("k32.f32.{}.{}", ptxType(spec.dtypeQ), ptxType(spec.dtypeK));
  std::string pv = fmt::format("k32.f32.e4m3.{}", ptxType(spec.dtypeV));
  CHECK(img.ptx.find("m64n" + std::to_string(img.config.blockN) + s) !=
        std::string::npos);
  CHECK(img.ptx.find("m64n" + std::to_string(spec.headDimV) + pv) !=
        std::string::npos);
  CHECK(img.ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
  CHECK(img.ptx.find("prmt.b32") != std::string::npos);
  CHECK(img.ptx.find("k16.f32") == std::string::npos); // no 16-bit product
  CHECK((img.ptx.find("bar.red.or.pred") != std::string::npos) == masked);
  CHECK((img.ptx.find("cvt.rn.f16x2.e4m3x2") != std::string::npos) == masked);
  if (masked)
    CHECK(img.ptx.find(fmt::format("cvt.rn.f16x2.{}x2",
                                   ptxType(spec.dtypeV))) != std::string::npos);
  if (!runtime::ptxasAvailable()) {
    WARN("ptxas not found: PTX not assembled");
    return;
  }
  runtime::PtxasReport r = runtime::runPtxas(img.ptx, "sm_90a");
  const runtime::PtxasFunctionReport *f = r.find(img.name);
  REQUIRE(f);
  INFO(r.log);
  CHECK(f->clean());
  CHECK(f->registers <= 255);
  WARN(img.name << ": " << f->registers << " registers, " << img.sharedBytes
                << " bytes of shared memory");
}

} // namespace

TEST_CASE("fp8 gpu: the sm_90a forward kernels assemble without spills",
          "[gpu_codegen][fp8]") {
  for (const testing::SparseKernel &k : testing::fp8Kernels()) {
    if (!isFp8(k.spec.dtypeQ))
      continue; // the timing pair's bf16 twin
    INFO(k.id);
    // The fp8 kernels with a mask (softcap: causal) isolate masked keys;
    // the timing baseline `_noiso` is built without (as gen_matrix_kernels
    // does) and has neither the vote nor the guarded path.
    const bool noIso = k.id.ends_with("_noiso");
    bool masked = false;
    for (const char *m : {"causal", "window", "doc", "softcap"})
      masked |= k.id.find(m) != std::string::npos;
    if (noIso)
      setMaskedValueIsolationForTesting(false);
    checkFp8Kernel(k.spec, masked && !noIso, k.varlen, k.blockSparse);
    if (noIso)
      setMaskedValueIsolationForTesting(true);
  }
}

TEST_CASE("fp8 gpu: score modifiers reading the head and a parameter, "
          "unequal head dims",
          "[gpu_codegen][fp8]") {
  AttentionSpec spec;
  spec.variant = Variant("f8_score_param");
  spec.variant.scoreMod(score * param<float>("temp") +
                        cast<float>(head) * 0.25f);
  spec.headDimQK = spec.headDimV = 128;
  spec.headsQ = 4;
  spec.headsKV = 2;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = DType::E4M3;
  spec.dtypeO = DType::BF16;
  checkFp8Kernel(spec, /*masked=*/false);
  AttentionSpec w = spec;
  w.variant = Variant("f8_window_softcap");
  w.variant.mask(sliding_window(9, 2, Alignment::BottomRight));
  w.variant.scoreMod(softcap(3.0f));
  w.headDimQK = w.headDimV = 64;
  checkFp8Kernel(w, /*masked=*/true);
  // Unequal head dims on both sides of 128 (64 keys per tile where
  // head_dim_v > 128), varlen and block-sparse.
  AttentionSpec u = w;
  u.headDimV = 256;
  checkFp8Kernel(u, /*masked=*/true, /*varlen=*/true, /*blockSparse=*/true);
  u = spec;
  u.headDimQK = 192;
  u.headDimV = 64;
  checkFp8Kernel(u, /*masked=*/false, /*varlen=*/false, /*blockSparse=*/true);
  u.headDimQK = 256;
  u.headDimV = 128;
  checkFp8Kernel(u, /*masked=*/false);
}

TEST_CASE("fp8 gpu: V transposes whose units are not a multiple of the "
          "threads",
          "[gpu_codegen][fp8]") {
  // WgmmaFp8.cpp's transposeV moves block_n x head_dim_v / 16 units with
  // 256 threads; where that is no multiple of 256 its last round is
  // guarded (unguarded, the 128 threads past 640 units at 128 keys and
  // head_dim_v 80 stored past V^T, past the end of the dynamic shared
  // memory: CUDA_ERROR_ILLEGAL_ADDRESS on an H100). With a mask the guarded
  // round also votes and rewrites its words zeroed (the scan and zero
  // passes): 128 keys at head_dim_v 80 (640 units) and 112 (896), 64 keys
  // at 144 (576, varlen) and 240 (960, block-sparse).
  AttentionSpec spec;
  spec.variant = Variant("f8_causal_odd_dv");
  spec.causal = Causal::TopLeft;
  spec.headsQ = spec.headsKV = 2;
  spec.dtypeQ = DType::E4M3;
  spec.dtypeK = spec.dtypeV = DType::E5M2;
  spec.dtypeO = DType::F16;
  for (auto [qk, v, varlen, sparse] :
       {std::tuple{160, 80, false, false}, std::tuple{96, 112, false, false},
        std::tuple{128, 144, true, false}, std::tuple{64, 240, false, true}}) {
    INFO(qk << " / " << v);
    spec.headDimQK = qk;
    spec.headDimV = v;
    CHECK((v <= 128 ? 128 : 64) * v / 16 % 256 != 0);
    checkFp8Kernel(spec, /*masked=*/true, varlen, sparse);
  }
}
