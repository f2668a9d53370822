//===- 04_varlen.cpp - A packed batch of variable-length sequences --------===//
//
// What it teaches: FlashAttention's varlen layout. Three sequences of
// different lengths are packed back to back, q [total_q, heads, head_dim];
// cu_seqlens (cumulative lengths, batch + 1 entries) say where each one
// starts. The kernel, compiled with CompileOptions::varlen, attends each
// sequence on its own: its mask sees q_idx and kv_idx counted from the
// sequence's first token and that sequence's seqlen_q / seqlen_k, so
// bottom-right causal alignment applies per sequence (here the queries are
// the last tokens of each sequence's keys, as in chunked prefill). Checked
// against the float64 varlen reference; exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace flashjit;

int main() {
  const int64_t headsQ = 4, headsKV = 2, dim = 64;
  // Sequence lengths: queries 17, 100, 1; keys 40, 100, 250.
  const std::vector<int32_t> cuQ{0, 17, 117, 118}, cuK{0, 40, 140, 390};
  const int64_t totalQ = cuQ.back(), totalK = cuK.back();

  AttentionSpec spec;
  spec.causal = Causal::BottomRight;
  spec.headsQ = headsQ;
  spec.headsKV = headsKV;
  spec.headDimQK = spec.headDimV = dim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  std::printf("spec: %s\n", printSpec(spec).c_str());

  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = u(rng);
    return x;
  };
  std::vector<float> qs = random(totalQ * headsQ * dim),
                     ks = random(totalK * headsKV * dim),
                     vs = random(totalK * headsKV * dim), os(qs.size(), NAN),
                     lses(headsQ * totalQ, NAN);
  TensorRef q =
      TensorRef::contiguous3(qs.data(), DType::F32, {totalQ, headsQ, dim});
  TensorRef k =
      TensorRef::contiguous3(ks.data(), DType::F32, {totalK, headsKV, dim});
  TensorRef v =
      TensorRef::contiguous3(vs.data(), DType::F32, {totalK, headsKV, dim});
  TensorRef o =
      TensorRef::contiguous3(os.data(), DType::F32, {totalQ, headsQ, dim});
  // LSE [heads_q, total_q], FlashAttention's varlen layout.
  TensorRef lse =
      TensorRef::contiguous2(lses.data(), DType::F32, {headsQ, totalQ});

  CompileOptions options;
  options.varlen = true;
  auto kernel = loadOrCompileCpu(spec, options);
  kernel->runVarlen(q, k, v, o, &lse, cuQ, cuK);

  VarlenReferenceOutput ref = referenceVarlenAttention(spec, q, k, v, cuQ, cuK);
  double errO = 0, errLse = 0;
  for (size_t i = 0; i < os.size(); ++i)
    errO = std::isnan(os[i]) ? INFINITY
                             : std::max(errO, std::fabs(os[i] - ref.o[i]));
  for (size_t i = 0; i < lses.size(); ++i)
    errLse = std::isnan(lses[i])
                 ? INFINITY
                 : std::max(errLse, std::fabs(lses[i] - ref.lse[i]));
  const bool ok = errO <= 1e-4 && errLse <= 1e-4;
  std::printf("3 sequences, %lld query and %lld key tokens: max |O - ref| = "
              "%.2e, max |LSE - ref| = %.2e: %s\n",
              (long long)totalQ, (long long)totalK, errO, errLse,
              ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
