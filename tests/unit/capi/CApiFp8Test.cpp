//===- CApiFp8Test.cpp - fp8 tensors and descales through the C API -------===//
//
// Issue 18's foundation through the C API: FLASHJIT_E4M3 / FLASHJIT_E5M2
// tensors and the reserved descale arguments (FLASHJIT_Q_DESCALE, ...) on
// the CPU target, checked against the float64 reference given the same
// fp8 inputs and descales (|o - r| <= 1e-4 (1 + |r|), fp32 O); a descale of
// the wrong kind or length is FLASHJIT_USER_ERROR naming it; an fp8 spec on
// sm_80 is FLASHJIT_USER_ERROR ("fp8 needs sm_90a wgmma").
//
//===----------------------------------------------------------------------===//
#include "flashjit-c/flashjit.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Reference.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;

namespace {

const char *kSpec = "attention(name=capi_fp8, mask=true, score=score, "
                    "causal=bottom_right, head_dim=16, dtype_q=e4m3, "
                    "dtype_k=e4m3, dtype_v=e5m2, dtype_o=fp32, heads_q=4, "
                    "heads_kv=2)";

flashjit_tensor ctensor(const TensorRef &r, flashjit_dtype dtype) {
  flashjit_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = r.data;
  t.dtype = dtype;
  t.rank = r.rank;
  for (int i = 0; i < r.rank; ++i) {
    t.shape[i] = r.shape[i];
    t.strides[i] = r.strides[i];
  }
  return t;
}

flashjit_arg descale(const char *name, const Fp8Tensor &t) {
  flashjit_arg a;
  std::memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = FLASHJIT_ARG_BUFFER_F32;
  a.data = t.descale.data();
  a.size = static_cast<int64_t>(t.descale.size());
  return a;
}

} // namespace

TEST_CASE("capi fp8: e4m3/e5m2 tensors with per-block descales",
          "[capi][fp8]") {
  flashjit_kernel *kernel = nullptr;
  REQUIRE(flashjit_compile(kSpec, "cpu", &kernel) == FLASHJIT_OK);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 2.0f);
  const int64_t b = 2, sq = 9, sk = 14;
  auto random = [&](std::array<int64_t, 4> sh, std::vector<float> &x) {
    x.resize(sh[0] * sh[1] * sh[2] * sh[3]);
    for (float &e : x)
      e = g(rng);
    return TensorRef::contiguous(x.data(), DType::F32, sh);
  };
  std::vector<float> qf, kf, vf;
  Fp8Tensor q8 = quantizeFp8(random({b, 4, sq, 16}, qf), DType::E4M3,
                             Fp8Scaling::PerBlock, 2);
  Fp8Tensor k8 = quantizeFp8(random({b, 2, sk, 16}, kf), DType::E4M3,
                             Fp8Scaling::PerBlock);
  Fp8Tensor v8 = quantizeFp8(random({b, 2, sk, 16}, vf), DType::E5M2,
                             Fp8Scaling::PerTensor);
  std::vector<float> o(b * 4 * sq * 16, std::nanf("")), lse(b * 4 * sq);
  flashjit_tensor tq = ctensor(q8.ref, FLASHJIT_E4M3),
                  tk = ctensor(k8.ref, FLASHJIT_E4M3),
                  tv = ctensor(v8.ref, FLASHJIT_E5M2),
                  to = ctensor(TensorRef::contiguous(o.data(), DType::F32,
                                                     {b, 4, sq, 16}),
                               FLASHJIT_FP32),
                  tl = ctensor(TensorRef::contiguous3(lse.data(), DType::F32,
                                                      {b, 4, sq}),
                               FLASHJIT_FP32);
  flashjit_arg args[3] = {descale(FLASHJIT_Q_DESCALE, q8),
                          descale(FLASHJIT_K_DESCALE, k8),
                          descale(FLASHJIT_V_DESCALE, v8)};
  REQUIRE(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, args, 3, nullptr) ==
          FLASHJIT_OK);
  Arguments ra;
  ra.qDescale = q8.descaleRef();
  ra.kDescale = k8.descaleRef();
  ra.vDescale = v8.descaleRef();
  ReferenceOutput ref =
      referenceAttention(parseSpec(kSpec), q8.ref, k8.ref, v8.ref, ra);
  for (size_t i = 0; i < o.size(); ++i)
    REQUIRE(std::fabs(o[i] - ref.o[i]) <= 1e-4 * (1 + std::fabs(ref.o[i])));
  for (size_t i = 0; i < lse.size(); ++i)
    REQUIRE(std::fabs(lse[i] - ref.lse[i]) <=
            1e-4 * (1 + std::fabs(ref.lse[i])));

  // Without the descales the output differs (they are not ignored).
  std::vector<float> o2(o.size());
  flashjit_tensor to2 =
      ctensor(TensorRef::contiguous(o2.data(), DType::F32, {b, 4, sq, 16}),
              FLASHJIT_FP32);
  REQUIRE(flashjit_run(kernel, &tq, &tk, &tv, &to2, &tl, nullptr, 0, nullptr) ==
          FLASHJIT_OK);
  double diff = 0;
  for (size_t i = 0; i < o.size(); ++i)
    diff = std::max(diff, double(std::fabs(o[i] - o2[i])));
  CHECK(diff > 1e-2);

  // A descale of the wrong kind, and one of the wrong length.
  args[1].kind = FLASHJIT_ARG_I32;
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, args, 3, nullptr) ==
        FLASHJIT_USER_ERROR);
  CHECK(std::string(flashjit_last_error()).find("@k_descale") !=
        std::string::npos);
  args[1] = descale(FLASHJIT_K_DESCALE, k8);
  args[1].size = 3;
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, args, 3, nullptr) ==
        FLASHJIT_USER_ERROR);
  CHECK(std::string(flashjit_last_error()).find("k_descale has 3") !=
        std::string::npos);
  flashjit_kernel_destroy(kernel);

  flashjit_kernel *gpu = nullptr;
  CHECK(flashjit_compile(kSpec, "sm_80", &gpu) == FLASHJIT_USER_ERROR);
  CHECK(std::string(flashjit_last_error()).find("fp8 needs sm_90a wgmma") !=
        std::string::npos);
}
