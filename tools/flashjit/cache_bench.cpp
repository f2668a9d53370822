//===- cache_bench.cpp - Cold compile vs disk hit vs memory hit -----------===//
//
// flashjit-cache-bench [--arch sm_90a|sm_80|cpu] [--cold N] [--warm N]
//                      [--memory N]
//
// For a few variants, the medians of: a cold compile through the cache
// (GPU: compileGpu + nvJitLink + ptxas -v + store; CPU: compileCpuArtifacts,
// i.e. MLIR + LLVM + object + cc -shared, + store; FLASHJIT_ALWAYS_COMPILE
// semantics), a warm disk hit (key + load + checksum verification, a fresh
// DiskCache each time; CPU: loadOrCompileCpu with an empty memory tier, so
// the kernel.so is also dlopened and ready to run) and a memory hit
// (MemoryTier lookup, with and without computing the key from the spec). A
// benchmark, not a test; needs no GPU.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"

#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/FileSystem.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

namespace cl = llvm::cl;
using namespace flashjit;
using namespace flashjit::runtime;

namespace {
cl::opt<std::string> arch("arch", cl::desc("sm_80 | sm_90a | cpu"),
                          cl::init("sm_90a"));
cl::opt<int> coldRuns("cold", cl::desc("Cold compiles per variant"),
                      cl::init(5));
cl::opt<int> warmRuns("warm", cl::desc("Disk hits per variant"), cl::init(200));
cl::opt<int> memoryRuns("memory", cl::desc("Memory hits per variant"),
                        cl::init(100000));

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class F> double timeOnce(F &&f) {
  auto start = clock_type::now();
  f();
  return std::chrono::duration<double>(clock_type::now() - start).count();
}
} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "kernel cache benchmark\n");
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"causal", "attention(name=causal, causal=bottom_right)"},
      {"sliding_window_softcap",
       "attention(name=swa_softcap, mask=q_idx >= kv_idx && q_idx - kv_idx < "
       "1024, score=30.0 * tanh(score / 30.0))"},
      {"plain_d64", "attention(name=plain64, head_dim_qk=64, head_dim_v=64)"},
  };
  llvm::SmallString<256> dir;
  if (llvm::sys::fs::createUniqueDirectory("flashjit-cache-bench", dir)) {
    std::cerr << "cannot create a temporary directory\n";
    return 2;
  }
  try {
    fmt::print("arch {}; medians over {} cold / {} disk / {} memory runs\n",
               std::string(arch), int(coldRuns), int(warmRuns),
               int(memoryRuns));
    fmt::print("{:<24} {:>14} {:>12} {:>12} {:>14} {:>16}\n", "variant",
               "cold (ms)", "compile", "disk hit", "memory hit", "mem hit+key");
    fmt::print("{:<24} {:>14} {:>12} {:>12} {:>14} {:>16}\n", "", "", "(ms)",
               "(ms)", "(us)", "(us)");
    for (const auto &[label, text] : variants) {
      AttentionSpec spec = parseSpec(text);
      std::string specText = printSpec(spec);
      const bool cpu = arch == "cpu";
      auto makeKey = [&] {
        return cpu ? cpuCacheKey(spec) : CacheKey::make(printSpec(spec), arch);
      };
      CacheKey key = makeKey();

      CacheConfig always;
      always.dir = dir.str().str();
      always.alwaysCompile = true;
      DiskCache coldCache(always);
      std::vector<double> cold, gen;
      for (int i = 0; i < coldRuns; ++i)
        cold.push_back(timeOnce([&] {
          coldCache.getOrCompile(key, [&] {
            KernelArtifacts a;
            gen.push_back(timeOnce([&] {
              if (cpu) {
                a = compileCpuArtifacts(spec);
                return;
              }
              GpuCompileOptions o;
              o.arch = arch;
              a = compileGpuArtifacts(spec, o);
            }));
            return a;
          });
        }));

      std::vector<double> warm;
      CacheConfig normal;
      normal.dir = dir.str().str();
      for (int i = 0; i < warmRuns; ++i)
        warm.push_back(timeOnce([&] {
          DiskCache cache(normal);
          if (cpu) {
            clearCpuMemoryTier();
            LoadReport r;
            loadOrCompileCpu(spec, {}, &cache, &r);
            if (r.outcome != CacheOutcome::Hit)
              throw InternalError("benchmark: expected a disk hit");
            return;
          }
          CacheKey k = makeKey();
          std::optional<KernelArtifacts> a = cache.load(k);
          if (!a)
            throw InternalError("benchmark: expected a disk hit");
        }));

      MemoryTier<KernelArtifacts> tier;
      int context = 0;
      std::string hash = key.hash();
      tier.getOrLoad(&context, hash, [&] {
        return std::make_shared<const KernelArtifacts>(
            *DiskCache(normal).load(key));
      });
      auto none = []() -> std::shared_ptr<const KernelArtifacts> {
        throw InternalError("benchmark: expected a memory hit");
      };
      std::vector<double> mem, memKey;
      const int batch = 100;
      for (int i = 0; i < memoryRuns / batch; ++i) {
        mem.push_back(timeOnce([&] {
                        for (int j = 0; j < batch; ++j)
                          tier.getOrLoad(&context, hash, none);
                      }) /
                      batch);
        memKey.push_back(timeOnce([&] {
                           for (int j = 0; j < batch; ++j)
                             tier.getOrLoad(&context, makeKey().hash(), none);
                         }) /
                         batch);
      }
      fmt::print("{:<24} {:>14.1f} {:>12.1f} {:>12.3f} {:>14.3f} {:>16.3f}\n",
                 label, median(cold) * 1e3, median(gen) * 1e3,
                 median(warm) * 1e3, median(mem) * 1e6, median(memKey) * 1e6);
    }
  } catch (const std::exception &e) {
    std::cerr << "flashjit-cache-bench: " << e.what() << "\n";
    llvm::sys::fs::remove_directories(dir);
    return 2;
  }
  llvm::sys::fs::remove_directories(dir);
  return 0;
}
