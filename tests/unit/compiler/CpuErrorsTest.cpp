//===- CpuErrorsTest.cpp - User errors of the CPU backend -----------------===//
//
// Every unsupported option is a UserError raised before MLIR or LLVM runs;
// bad tensors and arguments are UserErrors at run(); an out-of-range buffer
// read is reported after the run instead of crashing.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"

#include <catch2/catch.hpp>

#include <fstream>

using namespace flashjit;
using flashjit::test::cachedKernel;
using flashjit::test::StridedTensor;

namespace {
AttentionSpec smallSpec() {
  AttentionSpec s;
  s.variant = Variant("small");
  s.headDimQK = s.headDimV = 32;
  s.causal = Causal::TopLeft;
  return s;
}
} // namespace

TEST_CASE("unsupported options are UserErrors before any MLIR call",
          "[compiler][errors]") {
  AttentionSpec s = smallSpec();
  s.headDimQK = s.headDimV = 600;
  CHECK_THROWS_AS(compileCpu(s), UserError);
  CHECK_THROWS_WITH(compileCpu(s), Catch::Contains("head_dim_qk = 600"));
  s = smallSpec();
  s.headDimV = 0;
  CHECK_THROWS_AS(compileCpu(s), UserError);
  s = smallSpec();
  s.headsQ = 3;
  s.headsKV = 2;
  CHECK_THROWS_AS(compileCpu(s), UserError);
  CompileOptions o;
  o.blockM = 48;
  CHECK_THROWS_WITH(compileCpu(smallSpec(), o), Catch::Contains("blockM = 48"));
  o = {};
  o.blockN = -1;
  CHECK_THROWS_AS(compileCpu(smallSpec(), o), UserError);
  o = {};
  o.optLevel = 7;
  CHECK_THROWS_AS(compileCpu(smallSpec(), o), UserError);
}

TEST_CASE("bad tensors and arguments are UserErrors at run",
          "[compiler][errors]") {
  auto k = cachedKernel(smallSpec());
  StridedTensor q(DType::BF16, {1, 1, 10, 32}, false);
  StridedTensor kk(DType::BF16, {1, 1, 12, 32}, false);
  StridedTensor v(DType::BF16, {1, 1, 12, 32}, false);
  StridedTensor o(DType::BF16, {1, 1, 10, 32}, false);
  std::vector<float> lse(10);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, 10});
  CHECK_NOTHROW(k->run(q.ref, kk.ref, v.ref, o.ref, &l));
  CHECK_THROWS_WITH(k->run(q.ref, kk.ref, v.ref, o.ref, nullptr),
                    Catch::Contains("lse"));
  StridedTensor wrongDim(DType::BF16, {1, 1, 12, 64}, false);
  CHECK_THROWS_AS(k->run(q.ref, wrongDim.ref, v.ref, o.ref, &l), UserError);
  StridedTensor wrongType(DType::F16, {1, 1, 12, 32}, false);
  CHECK_THROWS_AS(k->run(q.ref, kk.ref, wrongType.ref, o.ref, &l), UserError);
  CHECK_THROWS_AS(k->run(q.ref, kk.ref, v.ref, o.ref, &l, {}, -2), UserError);

  AttentionSpec withParam = smallSpec();
  withParam.variant.scoreMod(softcap(param<float>("cap")));
  auto kp = cachedKernel(withParam);
  CHECK_THROWS_AS(kp->run(q.ref, kk.ref, v.ref, o.ref, &l), UserError);
  Arguments wrong;
  wrong.set("cap", Scalar::i32(3));
  CHECK_THROWS_AS(kp->run(q.ref, kk.ref, v.ref, o.ref, &l, wrong), UserError);
}

TEST_CASE("buffer reads out of range give 0 and are reported after the run",
          "[compiler][errors]") {
  AttentionSpec s = smallSpec();
  Buffer doc = buffer<int32_t>("doc");
  s.variant.mask(doc[q_idx] == doc[kv_idx]);
  auto k = cachedKernel(s);
  StridedTensor q(DType::BF16, {1, 1, 40, 32}, false);
  StridedTensor kk(DType::BF16, {1, 1, 40, 32}, false);
  StridedTensor v(DType::BF16, {1, 1, 40, 32}, false);
  StridedTensor o(DType::BF16, {1, 1, 40, 32}, false);
  std::vector<float> lse(40);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, 40});
  std::vector<int32_t> ids(40, 0);
  Arguments ok;
  ok.bind("doc", ids.data(), 40);
  CHECK_NOTHROW(k->run(q.ref, kk.ref, v.ref, o.ref, &l, ok));
  Arguments tooShort;
  tooShort.bind("doc", ids.data(), 25);
  CHECK_THROWS_WITH(k->run(q.ref, kk.ref, v.ref, o.ref, &l, tooShort),
                    Catch::Contains("buffer 'doc' was read outside [0, 25)"));
}

TEST_CASE("every stage's text and timing is available", "[compiler]") {
  auto k = cachedKernel(smallSpec());
  CHECK(k->stageText(Stage::Attn).find("attn.attention @small") !=
        std::string::npos);
  CHECK(k->stageText(Stage::Tiled).find("attn.mask_select") !=
        std::string::npos);
  CHECK(k->stageText(Stage::LLVMDialect).find("llvm.func") !=
        std::string::npos);
  CHECK(k->stageText(Stage::LLVMIR).find("define") != std::string::npos);
  CHECK(k->stageText(Stage::LLVMIROpt).find("define") != std::string::npos);
  REQUIRE_FALSE(k->timings().empty());
  CHECK(k->timings().back().name == "total");
}

TEST_CASE("every stage is written to the dump directory", "[compiler]") {
  std::string dir = "flashjit_dump_test_dir";
  CompileOptions o;
  o.dumpDir = dir;
  AttentionSpec s = smallSpec();
  s.variant = Variant("dumped");
  s.causal = Causal::BottomRight;
  compileCpu(s, o);
  // Named <variant>.<cache key>.<stage>, so compiles never overwrite each
  // other.
  const std::string base = dir + "/dumped." + cpuCacheKey(s, o).hash();
  for (const char *ext :
       {".attn.mlir", ".tiled.mlir", ".llvm.mlir", ".ll", ".opt.ll"}) {
    std::ifstream f(base + ext);
    INFO(ext);
    REQUIRE(f.good());
    std::string first;
    std::getline(f, first);
    CHECK_FALSE(first.empty());
  }
}
