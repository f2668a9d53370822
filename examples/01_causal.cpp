//===- 01_causal.cpp - Causal attention with grouped-query heads ----------===//
//
// What it teaches: the smallest complete program. An AttentionSpec with the
// built-in causal mask and GQA (8 query heads share 2 key/value heads), one
// call that compiles it for the CPU or loads it from the kernel cache, a run
// on fp32 tensors [batch, heads, seqlen, head_dim], and a check against
// flashjit's float64 reference. Exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace flashjit;

int main() {
  const int64_t batch = 2, headsQ = 8, headsKV = 2, seqlen = 200, dim = 64;

  AttentionSpec spec;
  spec.causal = Causal::BottomRight; // key j <= query i (+ seqlen_k - seqlen_q)
  spec.headsQ = headsQ;
  spec.headsKV = headsKV;
  spec.headDimQK = spec.headDimV = dim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  std::printf("spec: %s\n", printSpec(spec).c_str());

  // Random inputs; O and LSE start as NaN so an unwritten output shows.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = u(rng);
    return x;
  };
  std::vector<float> qs = random(batch * headsQ * seqlen * dim),
                     ks = random(batch * headsKV * seqlen * dim),
                     vs = random(batch * headsKV * seqlen * dim),
                     os(qs.size(), NAN), lses(batch * headsQ * seqlen, NAN);
  TensorRef q = TensorRef::contiguous(qs.data(), DType::F32,
                                      {batch, headsQ, seqlen, dim});
  TensorRef k = TensorRef::contiguous(ks.data(), DType::F32,
                                      {batch, headsKV, seqlen, dim});
  TensorRef v = TensorRef::contiguous(vs.data(), DType::F32,
                                      {batch, headsKV, seqlen, dim});
  TensorRef o = TensorRef::contiguous(os.data(), DType::F32,
                                      {batch, headsQ, seqlen, dim});
  TensorRef lse =
      TensorRef::contiguous3(lses.data(), DType::F32, {batch, headsQ, seqlen});

  // Compiled on the first run of the program, a disk-cache hit after that.
  LoadReport report;
  auto kernel = loadOrCompileCpu(spec, {}, nullptr, &report);
  kernel->run(q, k, v, o, &lse);

  ReferenceOutput ref = referenceAttention(spec, q, k, v);
  double errO = 0, errLse = 0;
  for (size_t i = 0; i < os.size(); ++i)
    errO = std::isnan(os[i]) ? INFINITY
                             : std::max(errO, std::fabs(os[i] - ref.o[i]));
  for (size_t i = 0; i < lses.size(); ++i)
    errLse = std::isnan(lses[i])
                 ? INFINITY
                 : std::max(errLse, std::fabs(lses[i] - ref.lse[i]));
  const bool ok = errO <= 1e-4 && errLse <= 1e-4;
  std::printf("cpu kernel (cache: %s): max |O - ref| = %.2e, max |LSE - ref| "
              "= %.2e: %s\n",
              runtime::toString(report.outcome), errO, errLse,
              ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
