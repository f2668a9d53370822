//===- 07_decode.cpp - Decoding against a paged KV cache ------------------===//
//
// What it teaches: serving. K and V live in pages of 16 tokens; a vLLM
// block table lists each sequence's pages (in any order). The prompt of
// each sequence is written into its pages with appendPagedKV, then one
// decode step: the new token's K/V are appended (the table's lengths
// raised first), and q_len = 1 query per sequence attends its whole cache
// with runtime::cpuPagedDecode (a CPU kernel compiled with varlen; causal
// bottom-right, the decode convention) with an attention sink per head.
// Checked against the float64 paged reference; exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace flashjit;

int main() {
  const int64_t headsQ = 8, headsKV = 2, dim = 64, pageSize = 16;
  const int64_t batch = 3, numPages = 24, maxPages = 8;
  std::vector<int32_t> prompt{37, 100, 5};

  AttentionSpec spec;
  spec.causal = Causal::BottomRight;
  spec.sink = true;
  spec.headsQ = headsQ;
  spec.headsKV = headsKV;
  spec.headDimQK = spec.headDimV = dim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  std::printf("spec: %s\n", printSpec(spec).c_str());

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = u(rng);
    return x;
  };
  // The caches [num_pages, heads_kv, page_size, dim], NaN where unused.
  std::vector<float> kc(numPages * headsKV * pageSize * dim, NAN),
      vc(kc.size(), NAN);
  TensorRef kCache = TensorRef::contiguous(kc.data(), DType::F32,
                                           {numPages, headsKV, pageSize, dim});
  TensorRef vCache = TensorRef::contiguous(vc.data(), DType::F32,
                                           {numPages, headsKV, pageSize, dim});
  // Pages handed out in a scrambled order.
  std::vector<int32_t> table(batch * maxPages, -1);
  int32_t next = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t p = 0; p < maxPages && next < numPages; ++p)
      table[b * maxPages + p] = (next++ * 7) % numPages;

  // Prefill: each prompt into its own pages (a one-sequence table view).
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> k = random(headsKV * prompt[b] * dim),
                       v = random(headsKV * prompt[b] * dim);
    const int32_t len[] = {prompt[b]};
    PageList one = checkBlockTable(
        {std::span(table).subspan(b * maxPages, maxPages), maxPages, len}, 1,
        numPages, pageSize);
    appendPagedKV(TensorRef::contiguous(k.data(), DType::F32,
                                        {1, headsKV, prompt[b], dim}),
                  TensorRef::contiguous(v.data(), DType::F32,
                                        {1, headsKV, prompt[b], dim}),
                  kCache, vCache, one);
  }
  // One decode step: lengths + 1, the new tokens' K/V, then attention.
  std::vector<int32_t> seqLens(prompt);
  for (int32_t &n : seqLens)
    ++n;
  PageList pages =
      checkBlockTable({table, maxPages, seqLens}, batch, numPages, pageSize);
  std::vector<float> kn = random(batch * headsKV * dim),
                     vn = random(batch * headsKV * dim);
  appendPagedKV(
      TensorRef::contiguous(kn.data(), DType::F32, {batch, headsKV, 1, dim}),
      TensorRef::contiguous(vn.data(), DType::F32, {batch, headsKV, 1, dim}),
      kCache, vCache, pages);

  std::vector<float> qs = random(batch * headsQ * dim),
                     os(batch * headsQ * dim, NAN), lses(batch * headsQ, NAN),
                     sink = random(headsQ);
  TensorRef q =
      TensorRef::contiguous(qs.data(), DType::F32, {batch, headsQ, 1, dim});
  TensorRef o =
      TensorRef::contiguous(os.data(), DType::F32, {batch, headsQ, 1, dim});
  TensorRef lse =
      TensorRef::contiguous3(lses.data(), DType::F32, {batch, headsQ, 1});
  Arguments args;
  args.bindSink(sink.data(), headsQ);
  CompileOptions options;
  options.varlen = true;
  auto kernel = loadOrCompileCpu(spec, options);
  runtime::cpuPagedDecode(*kernel, q, kCache, vCache, pages, o, &lse, args);

  ReferenceOutput ref =
      referencePagedAttention(spec, q, kCache, vCache, pages, args);
  double errO = 0, errLse = 0;
  for (size_t i = 0; i < os.size(); ++i)
    errO = std::isnan(os[i]) ? INFINITY
                             : std::max(errO, std::fabs(os[i] - ref.o[i]));
  for (size_t i = 0; i < lses.size(); ++i)
    errLse = std::isnan(lses[i])
                 ? INFINITY
                 : std::max(errLse, std::fabs(lses[i] - ref.lse[i]));
  const bool ok = errO <= 1e-4 && errLse <= 1e-4;
  std::printf("decode step of %lld sequences (%d, %d, %d keys) over pages of "
              "%lld tokens: max |O - ref| = %.2e, max |LSE - ref| = %.2e: %s\n",
              (long long)batch, seqLens[0], seqLens[1], seqLens[2],
              (long long)pageSize, errO, errLse, ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
