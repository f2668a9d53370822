//===- CudaPrinterTest.cpp - DSL expressions printed as CUDA C++ ----------===//
#include "RuntimeTestSupport.h"

#include "flashjit/frontend/CudaPrinter.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/runtime/Nvrtc.h"

#include <catch2/catch.hpp>

#include <limits>

using namespace flashjit;
using Catch::Matchers::Contains;

TEST_CASE("CUDA printing of leaves literals and operators",
          "[runtime][cudaprinter]") {
  CHECK(printCudaExpr(q_idx >= kv_idx) == "(q_idx >= kv_idx)");
  CHECK(printCudaExpr(q_idx - kv_idx < 5) == "(fj_sub(q_idx, kv_idx) < 5)");
  CHECK(printCudaExpr(30.0f * tanh(score / 30.0f)) ==
        "(30.0f * tanhf((score / 30.0f)))");
  CHECK(printCudaExpr(q_idx / 0) == "fj_div(q_idx, 0)");
  CHECK(printCudaExpr(abs(q_idx - 3)) == "fj_abs(fj_sub(q_idx, 3))");
  CHECK(printCudaExpr(-score) == "(-score)");
  CHECK(printCudaExpr(-q_idx) == "fj_neg(q_idx)");
  CHECK(printCudaExpr(cast<int32_t>(score)) == "fj_f2i(score)");
  CHECK(printCudaExpr(cast<int64_t>(score)) == "fj_f2ll(score)");
  CHECK(printCudaExpr(cast<int32_t>(cast<int64_t>(q_idx))) ==
        "fj_trunc32(((long long)q_idx))");
  CHECK(printCudaExpr(min(score, 1.0f)) == "fj_min(score, 1.0f)");
  CHECK(printCudaExpr(param<float>("cap") * score) == "(p_cap * score)");
  CHECK(printCudaExpr(constant(ScalarType::Int32, INT32_MIN, 0)) ==
        "(-2147483647 - 1)");
  CHECK(printCudaExpr(constant(ScalarType::Int64, -5, 0)) == "(-5LL)");
  CHECK(printCudaExpr(constant(ScalarType::Float32, 0, -0.0f)) == "(-0.0f)");
  CHECK(printCudaExpr(constant(ScalarType::Float32, 0,
                               std::numeric_limits<float>::infinity())) ==
        "__uint_as_float(0x7f800000u)");
  CHECK(printCudaExpr(select(q_idx < 3, 1, 2)) == "((q_idx < 3) ? 1 : 2)");
  CHECK(printCudaExpr(cast<float>(q_idx < 3)) == "((q_idx < 3) ? 1.0f : 0.0f)");

  CudaNames names;
  names.bufferIds = {"slopes", "doc_id"};
  CHECK(printCudaExpr(buffer<int32_t>("doc_id")[q_idx], names) ==
        "fj_load(buf_doc_id, buf_doc_id_size, (long long)(q_idx), 2)");
  names.index = [](IndexVar v) { return "ix_" + std::string(toString(v)); };
  names.score = "s";
  names.paramPrefix = "arg_";
  CHECK(printCudaExpr(param<int32_t>("w") + kv_idx + cast<int32_t>(score),
                      names) == "fj_add(fj_add(arg_w, ix_kv_idx), fj_f2i(s))");
  REQUIRE_THROWS_AS(printCudaExpr(Expr()), InternalError);
}

TEST_CASE("random expressions print to CUDA C++ that NVRTC compiles",
          "[runtime][cudaprinter][nvrtc]") {
  // One translation unit of many kernels: one NVRTC run per batch.
  for (bool allowFloat : {false, true}) {
    test::RandomExprBuilder gen(allowFloat ? 7 : 11, allowFloat);
    std::vector<Expr> exprs;
    for (int n = 0; n < 150; ++n) {
      static const ScalarType types[] = {ScalarType::Bool, ScalarType::Int32,
                                         ScalarType::Int64,
                                         ScalarType::Float32};
      ScalarType t = types[gen.pick(allowFloat ? 4 : 3)];
      exprs.push_back(gen.gen(t, 2 + static_cast<int>(gen.pick(4))));
    }
    runtime::NvrtcOptions o;
    o.arch = "sm_80";
    runtime::NvrtcOutput out;
    REQUIRE_NOTHROW(
        out = runtime::compileCuda(test::expressionKernels(exprs), o));
    CHECK_THAT(out.ptx, Contains(".entry fj_expr_149"));
  }
}
