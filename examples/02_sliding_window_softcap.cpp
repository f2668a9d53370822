//===- 02_sliding_window_softcap.cpp - A mask and a score modifier --------===//
//
// What it teaches: a variant written in the DSL (Gemma 2's local layers): a
// sliding-window mask from the library and a tanh soft-cap whose cap is a
// run-time parameter, so changing it never recompiles. The same variant is
// also written as text, as the CLI, the C API and Python take it: both give
// one canonical text, hence one cache key. The query block is the last 96
// positions of 300 keys (bottom-right alignment, as in chunked prefill).
// Checked against the float64 reference for two caps; exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace flashjit;

int main() {
  const int64_t heads = 4, seqlenQ = 96, seqlenK = 300, dim = 64;

  // Query i sees key j when i' - 128 <= j <= i', i' = i + seqlen_k - seqlen_q.
  Variant variant("local_softcap");
  variant.mask(sliding_window(128, 0, Alignment::BottomRight));
  variant.scoreMod(softcap(param<float>("cap")));
  AttentionSpec spec;
  spec.variant = variant;
  spec.headsQ = spec.headsKV = heads;
  spec.headDimQK = spec.headDimV = dim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  spec.returnLse = false; // O only: the kernel writes no LSE

  AttentionSpec fromText =
      parseSpec("attention(name=local_softcap, mask=sliding_window(128, 0, "
                "bottom_right), score=softcap(param<f32>(cap)), head_dim=64, "
                "heads_q=4, heads_kv=4, dtype=fp32, lse=false)");
  std::printf("spec: %s\n", printSpec(spec).c_str());
  if (printSpec(fromText) != printSpec(spec)) { // the cache key's input
    std::printf("the text spec differs: %s\n", printSpec(fromText).c_str());
    return 1;
  }

  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 2.0f); // large scores: capped
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = normal(rng);
    return x;
  };
  std::vector<float> qs = random(heads * seqlenQ * dim),
                     ks = random(heads * seqlenK * dim),
                     vs = random(heads * seqlenK * dim), os(qs.size(), NAN);
  TensorRef q =
      TensorRef::contiguous(qs.data(), DType::F32, {1, heads, seqlenQ, dim});
  TensorRef k =
      TensorRef::contiguous(ks.data(), DType::F32, {1, heads, seqlenK, dim});
  TensorRef v =
      TensorRef::contiguous(vs.data(), DType::F32, {1, heads, seqlenK, dim});
  TensorRef o =
      TensorRef::contiguous(os.data(), DType::F32, {1, heads, seqlenQ, dim});

  auto kernel = loadOrCompileCpu(spec);
  bool ok = true;
  for (float cap : {50.0f, 5.0f}) { // one kernel, two parameter values
    Arguments args;
    args.set("cap", Scalar::f32(cap));
    kernel->run(q, k, v, o, nullptr, args);
    ReferenceOutput ref = referenceAttention(spec, q, k, v, args);
    double err = 0;
    for (size_t i = 0; i < os.size(); ++i)
      err = std::isnan(os[i]) ? INFINITY
                              : std::max(err, std::fabs(os[i] - ref.o[i]));
    ok &= err <= 1e-4;
    std::printf("cap %4.1f: max |O - ref| = %.2e: %s\n", cap, err,
                err <= 1e-4 ? "OK" : "MISMATCH");
  }
  return ok ? 0 : 1;
}
