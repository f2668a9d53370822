//===- bench_block_mask_cpu.cpp - Block-mask build time vs attention ------===//
//
// Times, on the CPU backend, the generated block-mask builder of a causal
// document mask against the block-sparse attention it serves, and the same
// attention without a block mask (every tile classified at run time; the
// data-dependent ones all come out partial).
//
//   bench_block_mask_cpu [N] [doc_len] [heads] [head_dim] [threads]
//
// Defaults: N = 4096 tokens, documents of ~512 tokens (random lengths in
// [doc_len / 2, 3 doc_len / 2]), 4 query heads and 4 K/V heads, head_dim 64,
// bf16, all cores. Prints milliseconds (best of 3) and the build/attention
// ratio.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Library.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

using namespace flashjit;

namespace {

double bestMs(const std::function<void()> &f) {
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
  }
  return best;
}

int64_t argOr(int argc, char **argv, int i, int64_t fallback) {
  if (argc <= i)
    return fallback;
  char *end = nullptr;
  long long v = std::strtoll(argv[i], &end, 10);
  if (!end || *end || v <= 0) {
    std::fprintf(stderr, "argument %d ('%s') must be a positive integer\n", i,
                 argv[i]);
    std::exit(1);
  }
  return v;
}

} // namespace

int main(int argc, char **argv) {
  const int64_t n = argOr(argc, argv, 1, 4096);
  const int64_t docLen = argOr(argc, argv, 2, 512);
  const int64_t heads = argOr(argc, argv, 3, 4);
  const int64_t dim = argOr(argc, argv, 4, 64);
  const int threads = static_cast<int>(argOr(argc, argv, 5, 0) % 1024);

  AttentionSpec spec;
  spec.variant = Variant("doc_causal");
  Buffer doc = buffer<int32_t>("doc_id");
  spec.variant.mask(doc[q_idx] == doc[kv_idx]);
  spec.causal = Causal::TopLeft;
  spec.headDimQK = spec.headDimV = static_cast<int>(dim);
  spec.headsQ = spec.headsKV = static_cast<int>(heads);
  CompileOptions sparseOpts;
  sparseOpts.blockSparse = true;
  auto sparse = compileCpu(spec, sparseOpts);
  auto dense = compileCpu(spec);

  std::mt19937 rng(1);
  std::vector<int32_t> ids(n);
  for (int64_t t = 0, id = 0; t < n; ++id) {
    int64_t len = docLen / 2 + static_cast<int64_t>(rng() % (docLen + 1));
    for (int64_t e = std::min(n, t + len); t < e; ++t)
      ids[t] = static_cast<int32_t>(id);
  }
  Arguments args;
  args.bind("doc_id", ids.data(), n);

  std::vector<uint16_t> q(n * heads * dim), k(q.size()), v(q.size()),
      o(q.size());
  for (auto *t : {&q, &k, &v})
    for (uint16_t &x : *t) // bf16 values in [-1, 1)
      x = static_cast<uint16_t>(0x3c00 + (rng() % 0x300)) |
          static_cast<uint16_t>((rng() & 1) << 15);
  std::vector<float> lse(heads * n);
  auto ref = [&](std::vector<uint16_t> &t) {
    return TensorRef::contiguous(t.data(), DType::BF16, {1, heads, n, dim});
  };
  TensorRef lseRef =
      TensorRef::contiguous3(lse.data(), DType::F32, {1, heads, n});

  BlockMask mask;
  double buildMs =
      bestMs([&] { mask = sparse->buildBlockMask(1, n, n, args, threads); });
  double sparseMs = bestMs([&] {
    sparse->runBlockSparse(ref(q), ref(k), ref(v), ref(o), &lseRef, mask, args,
                           threads);
  });
  double denseMs = bestMs([&] {
    dense->run(ref(q), ref(k), ref(v), ref(o), &lseRef, args, threads);
  });
  int64_t tiles = mask.numQTiles * mask.numKvTiles;
  std::printf("N=%lld docs~%lld heads=%lld d=%lld tiles %lldx%lld: "
              "%lld full, %lld partial of %lld (x%lld heads)\n",
              static_cast<long long>(n), static_cast<long long>(docLen),
              static_cast<long long>(heads), static_cast<long long>(dim),
              static_cast<long long>(sparse->blockM()),
              static_cast<long long>(sparse->blockN()),
              static_cast<long long>(mask.numFull()),
              static_cast<long long>(mask.numPartial()),
              static_cast<long long>(tiles), static_cast<long long>(heads));
  std::printf("build block mask %.2f ms | block-sparse attention %.2f ms | "
              "build / attention = %.2f%% | attention without block mask "
              "%.2f ms\n",
              buildMs, sparseMs, 100.0 * buildMs / sparseMs, denseMs);
  return 0;
}
