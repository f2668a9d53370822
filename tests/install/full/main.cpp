//===- main.cpp - An application of the installed flashjit::flashjit ------===//
//
// consumer_full: compiles a causal variant for the CPU through the umbrella
// header (loadOrCompileCpu: the kernel cache named by FLASHJIT_CACHE_DIR),
// runs it on small random fp32 inputs with unequal sequence lengths and
// checks O and LSE against a hand-written softmax and against flashjit's
// float64 reference. Exits non-zero on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace flashjit;

int main() {
  const int64_t batch = 2, heads = 2, sq = 37, sk = 53, d = 32;

  Variant v("consumer_causal");
  v.mask(causal(Alignment::BottomRight));
  AttentionSpec spec;
  spec.variant = v;
  spec.headDimQK = spec.headDimV = static_cast<int>(d);
  spec.headsQ = spec.headsKV = static_cast<int>(heads);
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;

  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = normal(rng);
    return x;
  };
  // Q [B, H, Sq, D]; K, V [B, H, Sk, D]; O [B, H, Sq, D]; LSE [B, H, Sq].
  std::vector<float> qs = random(batch * heads * sq * d),
                     ks = random(batch * heads * sk * d),
                     vs = random(batch * heads * sk * d),
                     os(batch * heads * sq * d, NAN),
                     lse(batch * heads * sq, NAN);
  TensorRef q = TensorRef::contiguous(qs.data(), DType::F32,
                                      {batch, heads, sq, d});
  TensorRef k = TensorRef::contiguous(ks.data(), DType::F32,
                                      {batch, heads, sk, d});
  TensorRef vt = TensorRef::contiguous(vs.data(), DType::F32,
                                       {batch, heads, sk, d});
  TensorRef o = TensorRef::contiguous(os.data(), DType::F32,
                                      {batch, heads, sq, d});
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32,
                                       {batch, heads, sq});

  try {
    LoadReport report;
    auto kernel = loadOrCompileCpu(spec, {}, nullptr, &report);
    kernel->run(q, k, vt, o, &l);
    std::printf("kernel served by: %s\n", runtime::toString(report.outcome));
  } catch (const std::exception &e) {
    std::fprintf(stderr, "consumer_full: %s\n", e.what());
    return 1;
  }

  // The larger error; a NaN (an unwritten output) counts as inf.
  auto worse = [](double err, double diff) {
    return std::isnan(diff) ? INFINITY : std::max(err, std::fabs(diff));
  };
  // Hand-written causal softmax (bottom-right: row i sees keys
  // j <= i + sk - sq), in double.
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  double err = 0, lseErr = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t bh = b * heads + h, last = i + sk - sq;
        std::vector<double> s(sk);
        double m = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(qs[(bh * sq + i) * d + c]) * ks[(bh * sk + j) * d + c];
          s[j] = scale * dot;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= last; ++j)
          sum += std::exp(s[j] - m);
        lseErr = worse(lseErr, lse[bh * sq + i] - (m + std::log(sum)));
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= last; ++j)
            acc += std::exp(s[j] - m) / sum * vs[(bh * sk + j) * d + c];
          err = worse(err, os[(bh * sq + i) * d + c] - acc);
        }
      }

  ReferenceOutput ref = referenceAttention(spec, q, k, vt);
  double refErr = 0;
  for (size_t i = 0; i < os.size(); ++i)
    refErr = worse(refErr, os[i] - ref.o[i]);

  const double tol = 1e-4; // fp32 inputs and outputs
  const bool ok = err <= tol && lseErr <= tol && refErr <= tol;
  std::printf("max |O - naive| = %.2e, max |LSE - naive| = %.2e, "
              "max |O - reference| = %.2e: %s\n",
              err, lseErr, refErr, ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
