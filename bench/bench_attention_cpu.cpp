//===- bench_attention_cpu.cpp - CPU backend forward times per variant ----===//
//
// Times the CPU backend's forward kernel on the benchmark's variants: dense,
// causal, the quickstart's causal sliding window (256 keys) with a tanh
// soft-cap, and a causal document mask (documents of ~512 tokens), bf16,
// at head_dim 64 and 128. Used to price a change of the generated CPU code
// (issue 21, §3: skipping P = 0 in O += P V) by running it against two
// builds of the compiler library.
//
//   bench_attention_cpu [N] [heads] [threads] [repeats]
//
// Defaults: N = 2048, 4 heads, 1 thread (steadier on a shared machine),
// best of 5. Prints one line per case: variant, head_dim, milliseconds of
// wall time and of process CPU time (best of each).
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Library.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

using namespace flashjit;

namespace {

/// CPU time of the process in milliseconds (all threads): steadier than
/// wall time on a loaded machine.
double cpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
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
  const int64_t n = argOr(argc, argv, 1, 2048);
  const int64_t heads = argOr(argc, argv, 2, 4);
  const int threads = static_cast<int>(argOr(argc, argv, 3, 1));
  const int repeats = static_cast<int>(argOr(argc, argv, 4, 5));

  Buffer doc = buffer<int32_t>("doc_id");
  struct Case {
    const char *name;
    Expr mask;
    Expr score;
    Causal causal;
  };
  std::vector<Case> cases = {
      {"dense", Expr(), Expr(), Causal::None},
      {"causal", Expr(), Expr(), Causal::TopLeft},
      {"swa256_softcap", sliding_window(255, 0, Alignment::TopLeft),
       softcap(30.0f), Causal::None},
      {"doc_causal", doc[q_idx] == doc[kv_idx], Expr(), Causal::TopLeft},
  };
  std::mt19937 rng(1);
  std::vector<int32_t> ids(n);
  for (int64_t t = 0, id = 0; t < n; ++id) {
    int64_t len = 256 + static_cast<int64_t>(rng() % 513);
    for (int64_t e = std::min(n, t + len); t < e; ++t)
      ids[t] = static_cast<int32_t>(id);
  }
  Arguments args;
  args.bind("doc_id", ids.data(), n);

  for (int dim : {64, 128}) {
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
    for (const Case &c : cases) {
      AttentionSpec spec;
      spec.variant = Variant(c.name);
      if (!c.mask.isNull())
        spec.variant.mask(c.mask);
      if (!c.score.isNull())
        spec.variant.scoreMod(c.score);
      spec.causal = c.causal;
      spec.headDimQK = spec.headDimV = dim;
      spec.headsQ = spec.headsKV = static_cast<int>(heads);
      auto kernel = compileCpu(spec);
      Arguments a;
      if (std::string(c.name) == "doc_causal")
        a = args;
      double best = 1e30, bestCpu = 1e30;
      for (int r = 0; r < repeats; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        double c0 = cpuMs();
        kernel->run(ref(q), ref(k), ref(v), ref(o), &lseRef, a, threads);
        bestCpu = std::min(bestCpu, cpuMs() - c0);
        best = std::min(best, std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count());
      }
      std::printf("%-16s d=%-4d %9.2f ms wall %9.2f ms cpu\n", c.name, dim,
                  best, bestCpu);
      std::fflush(stdout);
    }
  }
  return 0;
}
