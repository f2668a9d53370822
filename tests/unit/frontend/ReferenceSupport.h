//===- ReferenceSupport.h - Tensors and a naive oracle for reference tests ===//
//
// HostTensor owns the bytes of one attention tensor in any dtype and layout;
// naiveAttention is this suite's own straight-from-the-definition attention
// (double, two passes, no tiling), written independently of the frontend, to
// check referenceAttention against.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_UNIT_FRONTEND_REFERENCESUPPORT_H
#define FLASHJIT_TESTS_UNIT_FRONTEND_REFERENCESUPPORT_H

#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Types.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace flashjit::test {

/// A 4-D tensor [d0, d1, d2, d3] in host memory. With \p bshd the memory
/// order is [d0, d2, d1, d3] (the [B, S, H, D] layout); \p pad adds unused
/// elements after each innermost row (a slice of a wider tensor).
struct HostTensor {
  std::vector<uint32_t> storage;
  TensorRef ref;

  HostTensor(DType dtype, std::array<int64_t, 4> shape, bool bshd = false,
             int64_t pad = 0) {
    int64_t row = shape[3] + pad;
    int64_t n = shape[0] * shape[1] * shape[2] * row;
    storage.assign(static_cast<size_t>(n + 1), 0u);
    ref.data = storage.data();
    ref.dtype = dtype;
    ref.rank = 4;
    ref.shape = shape;
    if (bshd)
      ref.strides = {shape[2] * shape[1] * row, row, shape[1] * row, 1};
    else
      ref.strides = {shape[1] * shape[2] * row, shape[2] * row, row, 1};
  }
  HostTensor(const HostTensor &) = delete;

  void set(int64_t a, int64_t b, int64_t c, int64_t d, float value) {
    storeFromFloat(ref.data, ref.dtype, ref.offset(a, b, c, d), value);
  }
  /// The element as stored (after rounding to the dtype).
  double get(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return loadAsFloat(ref.data, ref.dtype, ref.offset(a, b, c, d));
  }
  template <class F> void fill(F &&f) {
    for (int64_t a = 0; a < ref.shape[0]; ++a)
      for (int64_t b = 0; b < ref.shape[1]; ++b)
        for (int64_t c = 0; c < ref.shape[2]; ++c)
          for (int64_t d = 0; d < ref.shape[3]; ++d)
            set(a, b, c, d, f(a, b, c, d));
  }
};

/// Outputs of naiveAttention, laid out like ReferenceOutput.
struct NaiveOutput {
  std::vector<double> o, lse;
};

using NaiveMask =
    std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;
using NaiveScore =
    std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)>;

/// Attention from the definition: s = scale * q.k, s' = mod(s), softmax over
/// allowed keys with finite s', LSE = log sum exp(s'); a row with no such key
/// gives O = 0 and LSE = -inf. Query head h reads K/V head h / (Hq / Hkv).
inline NaiveOutput naiveAttention(const HostTensor &q, const HostTensor &k,
                                  const HostTensor &v, double scale,
                                  const NaiveMask &allowed,
                                  const NaiveScore &mod) {
  const int64_t B = q.ref.shape[0], Hq = q.ref.shape[1], Sq = q.ref.shape[2],
                D = q.ref.shape[3], Hkv = k.ref.shape[1], Sk = k.ref.shape[2],
                Dv = v.ref.shape[3];
  NaiveOutput out;
  out.o.assign(static_cast<size_t>(B * Hq * Sq * Dv), 0.0);
  out.lse.assign(static_cast<size_t>(B * Hq * Sq),
                 -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> s(static_cast<size_t>(Sk));
        std::vector<bool> use(static_cast<size_t>(Sk), false);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          if (!allowed(b, h, i, j))
            continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q.get(b, h, i, d) * k.get(b, g, j, d);
          s[j] = mod(scale * dot, b, h, i, j);
          if (s[j] == -std::numeric_limits<double>::infinity())
            continue;
          use[j] = true;
          m = std::max(m, s[j]);
        }
        if (m == -std::numeric_limits<double>::infinity())
          continue;
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j)
          if (use[j])
            sum += std::exp(s[j] - m);
        const size_t row = static_cast<size_t>((b * Hq + h) * Sq + i);
        out.lse[row] = m + std::log(sum);
        for (int64_t j = 0; j < Sk; ++j)
          if (use[j])
            for (int64_t d = 0; d < Dv; ++d)
              out.o[row * Dv + d] +=
                  std::exp(s[j] - m) / sum * v.get(b, g, j, d);
      }
    }
  return out;
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_UNIT_FRONTEND_REFERENCESUPPORT_H
