//===- CpuBackward.cpp - Cached CPU backward kernels and the fused call ---===//
//
// loadOrCompileCpuBackward: memory tier -> disk cache -> compile, as
// loadOrCompileCpu does for the forward (CpuCache.cpp), under the backward's
// own key (cpuBackwardCacheKey: kind "backward"). forwardBackwardCpu: the
// forward through loadOrCompileCpu (with LSE), then the backward.
//
//===----------------------------------------------------------------------===//
#include "CachedLoad.h"
#include "CompilerImpl.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>
#include <llvm/Support/raw_ostream.h>

#include <array>
#include <mutex>
#include <set>

namespace flashjit {

using runtime::CacheOutcome;
using runtime::KernelArtifacts;

runtime::CacheKey cpuBackwardCacheKey(const AttentionSpec &spec,
                                      const CompileOptions &options) {
  AttentionSpec s = backwardSpec(spec);
  validateBackwardForCpu(s, options);
  KernelConfig config = cpuKernelConfig(options);
  config.kind = KernelKind::Backward;
  return runtime::CacheKey::makeCpu(printSpec(s), config);
}

namespace {

/// Prints \p message to stderr once per process and \p what.
void warnOnce(const std::string &what, const std::string &message) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(what).second)
    llvm::errs() << message << "\n";
}

/// The memory tier of CPU backward kernels, per (cache directory, key).
runtime::MemoryTier<CpuBackward> &memoryTier() {
  static runtime::MemoryTier<CpuBackward> tier;
  return tier;
}

/// A CpuBackward from a loaded kernel and its artifacts' stage texts.
std::shared_ptr<const CpuBackward>
fromRuntime(const runtime::CpuBackwardKernel &kernel,
            const KernelArtifacts &artifacts) {
  const char *files[] = {runtime::kAttnFile, runtime::kTiledFile,
                         runtime::kLLVMDialectFile, runtime::kLLVMIRFile,
                         runtime::kLLVMIROptFile};
  std::array<std::string, 5> texts;
  for (size_t i = 0; i < texts.size(); ++i)
    if (const std::string *text = artifacts.file(files[i]))
      texts[i] = *text;
  std::vector<StageTiming> timings;
  for (const auto &[name, seconds] : artifacts.stageSeconds)
    timings.push_back({name, seconds});
  return std::make_shared<const CpuBackward>(kernel, std::move(timings),
                                             std::move(texts));
}

/// Disk cache -> compile through \p cache (usable, a linker found). A hit
/// whose kernel does not load here is recompiled and replaced with one
/// warning.
std::pair<KernelArtifacts, std::shared_ptr<const runtime::CpuBackwardKernel>>
loadOrCompileEntry(const AttentionSpec &spec, const CompileOptions &options,
                   runtime::DiskCache &cache, const runtime::CacheKey &key,
                   LoadReport &report) {
  KernelArtifacts a = cache.getOrCompile(
      key, [&] { return compileCpuBackwardArtifacts(spec, options); },
      &report.outcome);
  if (report.outcome != CacheOutcome::Uncached)
    report.entryDir = cache.entryDir(report.key);
  if (report.outcome != CacheOutcome::Hit)
    return {a, runtime::loadCpuBackwardKernel(a)};
  try {
    if (a.config != key.config)
      throw UserError("its manifest records another configuration than the "
                      "request's");
    return {a, runtime::loadCpuBackwardKernel(a)};
  } catch (const UserError &e) {
    warnOnce("load:" + report.key,
             fmt::format("flashjit: warning: cached CPU backward kernel {} "
                         "does not load ({}); recompiling it",
                         report.entryDir, e.message()));
    a = compileCpuBackwardArtifacts(spec, options);
    report.outcome =
        cache.store(key, a) ? CacheOutcome::Compiled : CacheOutcome::Uncached;
    return {a, runtime::loadCpuBackwardKernel(a)};
  }
}

} // namespace

void clearCpuBackwardMemoryTier() { memoryTier().eraseContext(nullptr); }

KernelArtifacts loadOrCompileCpuBackwardArtifacts(const AttentionSpec &spec,
                                                  const CompileOptions &options,
                                                  runtime::DiskCache &cache,
                                                  LoadReport *report) {
  runtime::CacheKey key = cpuBackwardCacheKey(spec, options); // validates
  LoadReport local;
  LoadReport &r = report ? *report : local;
  r = LoadReport();
  r.key = key.hash();
  return loadOrCompileEntry(spec, options, cache, key, r).first;
}

std::shared_ptr<const CpuBackward>
loadOrCompileCpuBackward(const AttentionSpec &spec,
                         const CompileOptions &options,
                         runtime::DiskCache *cache, LoadReport *report) {
  runtime::CacheKey key = cpuBackwardCacheKey(spec, options); // validates
  runtime::DiskCache &disk = cache ? *cache : runtime::defaultCache();
  return loadThroughMemoryTier(
      memoryTier(), /*context=*/nullptr, disk, key.hash(), report,
      [&](LoadReport &r) -> std::shared_ptr<const CpuBackward> {
        std::string why;
        if (!cpuLinkerAvailable(&why) || !disk.usable()) {
          // No kernel.so can be made or kept (the forward warned, or the
          // cache did): the in-memory compile.
          r.outcome = CacheOutcome::Uncached;
          return compileCpuBackward(spec, options);
        }
        auto [a, kernel] = loadOrCompileEntry(spec, options, disk, key, r);
        return fromRuntime(*kernel, a);
      });
}

DataGradients forwardBackwardCpu(const AttentionSpec &spec, const TensorRef &q,
                                 const TensorRef &k, const TensorRef &v,
                                 const TensorRef &dO, const TensorRef &o,
                                 const TensorRef &lse, const TensorRef &dq,
                                 const TensorRef &dk, const TensorRef &dv,
                                 const Arguments &args,
                                 const CompileOptions &options) {
  if (options.varlen || options.blockSparse)
    throw UserError("forwardBackwardCpu runs dense calls only; compile the "
                    "varlen or block-sparse forward and backward "
                    "(compileCpuBackward) and run them yourself");
  auto fwd = loadOrCompileCpu(backwardSpec(spec), options);
  fwd->run(q, k, v, o, &lse, args);
  return loadOrCompileCpuBackward(spec, options)
      ->run(q, k, v, o, lse, dO, dq, dk, dv, args);
}

} // namespace flashjit
