//===- NewUser26ErrorTest.cpp - Session 26 new-user findings -----------===//
//
// Reproductions of the session 26 new-user report (nu26), each with a
// positive control checked against an independent computation:
//  - quantizeFp8 of a block of tiny finite values (below about 5e-36) gave
//    a descale of 0 (amax / 448 underflowed f32) and NaN codes (0 / 0);
//  - the forward (flashjit_run, C++ run) accepted a bound buffer, the sink
//    or a descale lying in O's or LSE's memory: the kernel read the buffer
//    while it wrote O, so later rows saw a changed score (the backward has
//    refused the same since session 10).
//
//===----------------------------------------------------------------------===//
#include "ErrorTestSupport.h"

#include "flashjit-c/flashjit.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Types.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;

TEST_CASE("nu26: quantizeFp8 of tiny finite values gives finite codes and a "
          "positive descale",
          "[error][fp8]") {
  // [1, 2, 3, 8]: head 0 holds subnormal f32 values (amax 8e-43: amax /
  // 448 rounds to 1.4e-45 below the exact quotient, so x / descale passed
  // 448), head 1 values near 1e-38; both far below e4m3's range.
  std::vector<float> x(2 * 3 * 8);
  std::mt19937 rng(26);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = u(rng) * (i < 24 ? 8e-43f : 1e-38f);
  x[5] = 8e-43f; // head 0's amax
  x[6] = 0.0f;   // an exact zero: 0 / 0 was NaN
  TensorRef ref = TensorRef::contiguous(x.data(), DType::F32, {1, 2, 3, 8});
  for (DType fmt : {DType::E4M3, DType::E5M2})
    for (Fp8Scaling sc : {Fp8Scaling::PerTensor, Fp8Scaling::PerBlock}) {
      INFO(toString(fmt) << (sc == Fp8Scaling::PerBlock ? " per block"
                                                        : " per tensor"));
      Fp8Tensor q = quantizeFp8(ref, fmt, sc);
      for (float d : q.descale) {
        CHECK(d >= std::numeric_limits<float>::min());
        CHECK(std::isfinite(d));
      }
      DequantizedTensor back =
          dequantizeFp8(q.ref, q.descaleRef(), /*headsKV=*/2);
      for (size_t i = 0; i < x.size(); ++i) {
        INFO("element " << i << " = " << x[i]);
        REQUIRE(std::isfinite(back.data[i]));
        // Half a step of the format at the descale: at most 2^-4 (e4m3) /
        // 2^-3 (e5m2) of the largest value (fp8_max * descale), so within
        // one descale of the value here.
        CHECK(std::fabs(double(back.data[i]) - double(x[i])) <=
              double(q.descale[sc == Fp8Scaling::PerBlock ? i / 24 : 0]));
      }
      CHECK(back.data[6] == 0.0f);
    }
  // Positive control: ordinary values keep descale = amax / fp8_max.
  std::vector<float> y = {1.0f, -448.0f, 3.0f, 0.5f};
  Fp8Tensor n =
      quantizeFp8(TensorRef::contiguous(y.data(), DType::F32, {1, 1, 1, 4}),
                  DType::E4M3, Fp8Scaling::PerTensor);
  CHECK(n.descale[0] == 1.0f);
}

namespace {

flashjit_tensor tensor(void *data, flashjit_dtype dtype,
                       std::initializer_list<int64_t> shape) {
  flashjit_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.rank = int(shape.size());
  int i = 0;
  for (int64_t s : shape)
    t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

void expectRefused(flashjit_status status,
                   std::initializer_list<std::string> needles) {
  std::string message = flashjit_last_error();
  INFO("message: " << message);
  CHECK(status == FLASHJIT_USER_ERROR);
  for (const std::string &needle : needles) {
    INFO("expected substring: " << needle);
    CHECK(message.find(needle) != std::string::npos);
  }
}

flashjit_kernel *compileCpu(const char *spec) {
  setenv("FLASHJIT_DISABLE_CACHE", "1", 1);
  flashjit_kernel *kernel = nullptr;
  flashjit_status status = flashjit_compile(spec, "cpu", &kernel);
  INFO(spec << ": " << flashjit_last_error());
  REQUIRE(status == FLASHJIT_OK);
  return kernel;
}

} // namespace

TEST_CASE("nu26: the forward refuses a buffer, sink or descale in O's or "
          "LSE's memory",
          "[error][aliasing]") {
  constexpr int64_t S = 37, D = 16;
  std::mt19937 rng(2026);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(S * D), k(S * D), v(S * D), bias(S);
  for (auto *x : {&q, &k, &v, &bias})
    for (float &e : *x)
      e = u(rng);
  flashjit_kernel *kernel =
      compileCpu("attention(head_dim=16, dtype=fp32, "
                 "score=(score - buffer<f32>(bias)[kv_idx]))");
  // O and LSE in one allocation, so that a buffer can lie inside them.
  std::vector<float> out(S * D + S, -7.0f);
  flashjit_tensor tq = tensor(q.data(), FLASHJIT_FP32, {1, 1, S, D}),
                  tk = tensor(k.data(), FLASHJIT_FP32, {1, 1, S, D}),
                  tv = tensor(v.data(), FLASHJIT_FP32, {1, 1, S, D}),
                  to = tensor(out.data(), FLASHJIT_FP32, {1, 1, S, D}),
                  tl = tensor(out.data() + S * D, FLASHJIT_FP32, {1, 1, S});
  auto arg = [](const float *data, int64_t n) {
    flashjit_arg a{};
    a.name = "bias";
    a.kind = FLASHJIT_ARG_BUFFER_F32;
    a.data = data;
    a.size = n;
    return a;
  };
  SECTION("a bound buffer over O or LSE: refused, nothing written") {
    for (const float *at : {out.data(), out.data() + 5 * D, out.data() + S * D,
                            out.data() + S * D - 3}) {
      std::vector<float> before = out;
      flashjit_arg a = arg(at, S);
      expectRefused(
          flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, &a, 1, nullptr),
          {"buffer 'bias'", "overlaps", "outputs must not alias"});
      CHECK(out == before);
    }
  }
  SECTION("the sink over LSE: refused") {
    flashjit_kernel *sinkKernel =
        compileCpu("attention(head_dim=16, dtype=fp32, sink=true, "
                   "score=(score - buffer<f32>(bias)[kv_idx]))");
    flashjit_arg a[2] = {arg(bias.data(), S), {}};
    a[1].name = FLASHJIT_SINK;
    a[1].kind = FLASHJIT_ARG_BUFFER_F32;
    a[1].data = out.data() + S * D;
    a[1].size = 1;
    expectRefused(
        flashjit_run(sinkKernel, &tq, &tk, &tv, &to, &tl, a, 2, nullptr),
        {"sink", "lse", "overlaps"});
    flashjit_kernel_destroy(sinkKernel);
  }
  SECTION("a descale over O: refused") {
    flashjit_kernel *fp8 =
        compileCpu("attention(head_dim=16, dtype_q=e4m3, dtype_k=e4m3, "
                   "dtype_v=e4m3, dtype_o=fp32, lse=false)");
    std::vector<uint8_t> c(S * D, 0x30); // 1.0 in e4m3
    flashjit_tensor cq = tensor(c.data(), FLASHJIT_E4M3, {1, 1, S, D});
    flashjit_arg a{};
    a.name = FLASHJIT_V_DESCALE;
    a.kind = FLASHJIT_ARG_BUFFER_F32;
    a.data = out.data() + 2;
    a.size = 1;
    expectRefused(
        flashjit_run(fp8, &cq, &cq, &cq, &to, nullptr, &a, 1, nullptr),
        {"v_descale", "o overlaps", "outputs must not alias"});
    flashjit_kernel_destroy(fp8);
  }
  SECTION("positive control: a buffer of its own runs, checked in double") {
    flashjit_arg a = arg(bias.data(), S);
    flashjit_status status =
        flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, &a, 1, nullptr);
    INFO(flashjit_last_error());
    REQUIRE(status == FLASHJIT_OK);
    const double scale = double(1.0f / std::sqrt(16.0f));
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> s(S);
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += double(q[i * D + d]) * double(k[j * D + d]);
        s[j] = scale * dot - double(bias[j]);
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (double &e : s)
        l += (e = std::exp(e - m));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t j = 0; j < S; ++j)
          o += s[j] * double(v[j * D + d]);
        CHECK(std::fabs(out[i * D + d] - o / l) <= 1e-4);
      }
      CHECK(std::fabs(out[S * D + i] - (m + std::log(l))) <= 1e-4);
    }
  }
  flashjit_kernel_destroy(kernel);
}
