//===- CpuCheck.h - A CPU kernel vs the float64 reference --------*- C++
//-*-===//
//
// Runs a CPU kernel (through any callable) on fresh random inputs of an odd
// shape and compares O and LSE with flashjit::referenceAttention, with the
// CPU backend's tolerances (tests/unit/compiler/CpuBackendTest.cpp): bf16
// |O - ref| <= 1e-2 + 1e-2 |ref|, fp16 2e-3, fp32 1e-4; LSE 1e-3 + 1e-5
// |ref|; rows with no allowed key exactly O = 0, LSE = -inf. Needs only the
// frontend, so runtime-only binaries use it too.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_CACHE_CPUCHECK_H
#define FLASHJIT_TESTS_CACHE_CPUCHECK_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace flashjit::testing {

/// Runs q, k, v -> o, lse with the kernel under test.
using CpuRunFn = std::function<void(const TensorRef &q, const TensorRef &k,
                                    const TensorRef &v, const TensorRef &o,
                                    const TensorRef *lse, const Arguments &)>;

/// Checks \p run for \p spec (no buffers; parameters get random values) on
/// inputs drawn from \p seed: batch 2, seqlen_q 77, seqlen_k 93, the spec's
/// heads, head dims and dtypes. Returns "" if every element is within
/// tolerance, else the first mismatch. \p maxError receives max |O - ref|.
inline std::string checkCpuKernel(const AttentionSpec &spec,
                                  const CpuRunFn &run, uint64_t seed,
                                  double *maxError = nullptr) {
  std::mt19937_64 rng(seed);
  const int64_t b = 2, sq = 77, sk = 93, hq = spec.headsQ, hkv = spec.headsKV;
  auto make = [&](DType dtype, std::array<int64_t, 4> shape,
                  std::vector<uint8_t> &bytes, bool fill) {
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    bytes.assign(n * byteSize(dtype), 0);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    if (fill)
      for (int64_t i = 0; i < n; ++i) {
        float x = u(rng);
        storeFromFloat(bytes.data(), dtype, i, std::abs(x) < 1e-3f ? 0.5f : x);
      }
    return TensorRef::contiguous(bytes.data(), dtype, shape);
  };
  std::vector<uint8_t> qb, kb, vb, ob;
  TensorRef q = make(spec.dtypeQ, {b, hq, sq, spec.headDimQK}, qb, true);
  TensorRef k = make(spec.dtypeK, {b, hkv, sk, spec.headDimQK}, kb, true);
  TensorRef v = make(spec.dtypeV, {b, hkv, sk, spec.headDimV}, vb, true);
  TensorRef o = make(spec.dtypeO, {b, hq, sq, spec.headDimV}, ob, false);
  std::vector<float> lse(b * hq * sq, 0.0f);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {b, hq, sq});
  Arguments args;
  for (const ParamDecl &p : spec.variant.params()) {
    std::uniform_int_distribution<int> u(5, 50);
    if (p.type == ScalarType::Float32)
      args.set(p.name, Scalar::f32(float(u(rng))));
    else if (p.type == ScalarType::Int32)
      args.set(p.name, Scalar::i32(u(rng)));
    else
      args.set(p.name, Scalar::i64(u(rng)));
  }
  run(q, k, v, o, &l, args);
  ReferenceOutput ref = referenceAttention(spec, q, k, v, args);
  double atol = spec.dtypeO == DType::BF16  ? 1e-2
                : spec.dtypeO == DType::F16 ? 2e-3
                                            : 1e-4;
  double worst = 0;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        double want = ref.lseAt(bi, h, i);
        float got = lse[(bi * hq + h) * sq + i];
        bool empty = want == -inf;
        if (spec.returnLse &&
            (empty ? got != -inf
                   : !(std::abs(got - want) <= 1e-3 + 1e-5 * std::abs(want))))
          return fmt::format("lse[{},{},{}] = {}, expected {} (seed {})", bi, h,
                             i, got, want, seed);
        for (int64_t d = 0; d < spec.headDimV; ++d) {
          float x = loadAsFloat(ob.data(), o.dtype, o.offset(bi, h, i, d));
          double w = ref.oAt(bi, h, i, d);
          worst = std::max(worst, std::abs(x - w));
          bool ok =
              empty ? x == 0.0f : std::abs(x - w) <= atol + atol * std::abs(w);
          if (!ok || std::isnan(x))
            return fmt::format("o[{},{},{},{}] = {}, expected {} (seed {})", bi,
                               h, i, d, x, w, seed);
        }
      }
  if (maxError)
    *maxError = worst;
  return {};
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_CACHE_CPUCHECK_H
