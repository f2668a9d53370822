//===- CpuCache.cpp - The cached entry point for CPU kernels --------------===//
//
// loadOrCompileCpu: memory tier -> disk cache -> compileCpuArtifacts, and
// CpuKernel objects made from cached artifacts. No MLIR here: a hit runs
// only the runtime's loader.
//
//===----------------------------------------------------------------------===//
#include "CachedLoad.h"
#include "CompilerImpl.h"
#include "CpuObject.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>
#include <llvm/Support/raw_ostream.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <set>

namespace flashjit {

using runtime::CacheOutcome;
using runtime::KernelArtifacts;

runtime::CacheKey cpuCacheKey(const AttentionSpec &spec,
                              const CompileOptions &options) {
  validateForCpu(spec, options);
  return runtime::CacheKey::makeCpu(printSpec(spec), cpuKernelConfig(options));
}

bool cpuLinkerAvailable(std::string *why) {
  return !findCCompiler(why).empty();
}

std::shared_ptr<const CpuKernel>
CpuKernel::load(const runtime::KernelArtifacts &artifacts) {
  return fromRuntime(*runtime::loadCpuKernel(artifacts), artifacts);
}

std::shared_ptr<const CpuKernel>
CpuKernel::fromRuntime(const runtime::CpuAttentionKernel &kernel,
                       const runtime::KernelArtifacts &artifacts) {
  const char *files[] = {runtime::kAttnFile, runtime::kTiledFile,
                         runtime::kLLVMDialectFile, runtime::kLLVMIRFile,
                         runtime::kLLVMIROptFile};
  std::array<std::string, 5> texts;
  for (size_t i = 0; i < texts.size(); ++i)
    if (const std::string *text = artifacts.file(files[i]))
      texts[i] = *text;
  return std::make_shared<const CpuKernel>(kernel, artifacts.stageSeconds,
                                           std::move(texts));
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

/// The memory tier of CPU kernels, per (cache directory, key): see
/// loadThroughMemoryTier.
runtime::MemoryTier<CpuKernel> &memoryTier() {
  static runtime::MemoryTier<CpuKernel> tier;
  return tier;
}

/// Disk cache -> compile through \p cache (usable, a linker found): the
/// artifacts and the runtime kernel loaded from them. A hit whose kernel does
/// not load here (another CPU, a kernel.so declaring another configuration
/// than its manifest) is recompiled and replaced with one warning.
std::pair<KernelArtifacts, std::shared_ptr<const runtime::CpuAttentionKernel>>
loadOrCompileEntry(const AttentionSpec &spec, const CompileOptions &options,
                   runtime::DiskCache &cache, const runtime::CacheKey &key,
                   LoadReport &report) {
  KernelArtifacts a = cache.getOrCompile(
      key, [&] { return compileCpuArtifacts(spec, options); }, &report.outcome);
  if (report.outcome != CacheOutcome::Uncached)
    report.entryDir = cache.entryDir(report.key);
  if (report.outcome != CacheOutcome::Hit)
    return {a, runtime::loadCpuKernel(a)};
  try {
    if (a.config != key.config)
      throw UserError("its manifest records another configuration than the "
                      "request's");
    return {a, runtime::loadCpuKernel(a)};
  } catch (const UserError &e) {
    warnOnce("load:" + report.key,
             fmt::format("flashjit: warning: cached CPU kernel {} does not "
                         "load ({}); recompiling it",
                         report.entryDir, e.message()));
    a = compileCpuArtifacts(spec, options);
    report.outcome =
        cache.store(key, a) ? CacheOutcome::Compiled : CacheOutcome::Uncached;
    return {a, runtime::loadCpuKernel(a)};
  }
}

/// Disk cache -> compile, for a kernel not in the memory tier.
std::shared_ptr<const CpuKernel>
loadOrCompileUncached(const AttentionSpec &spec, const CompileOptions &options,
                      runtime::DiskCache &cache, const runtime::CacheKey &key,
                      LoadReport &report) {
  std::string why;
  if (!cpuLinkerAvailable(&why)) {
    warnOnce("linker", fmt::format("flashjit: warning: {}; CPU kernels are "
                                   "compiled in memory and not cached",
                                   why));
    report.outcome = CacheOutcome::Uncached;
    return compileCpu(spec, options);
  }
  if (!cache.usable()) {
    // Disabled or refused (the cache warned already): no .so needed.
    report.outcome = CacheOutcome::Uncached;
    return compileCpu(spec, options);
  }
  auto [a, kernel] = loadOrCompileEntry(spec, options, cache, key, report);
  return CpuKernel::fromRuntime(*kernel, a);
}

} // namespace

void clearCpuMemoryTier() {
  memoryTier().eraseContext(nullptr);
  clearCpuBackwardMemoryTier();
}

KernelArtifacts loadOrCompileCpuArtifacts(const AttentionSpec &spec,
                                          const CompileOptions &options,
                                          runtime::DiskCache &cache,
                                          LoadReport *report) {
  runtime::CacheKey key = cpuCacheKey(spec, options); // validates first
  LoadReport local;
  LoadReport &r = report ? *report : local;
  r = LoadReport();
  r.key = key.hash();
  return loadOrCompileEntry(spec, options, cache, key, r).first;
}

std::shared_ptr<const CpuKernel> loadOrCompileCpu(const AttentionSpec &spec,
                                                  const CompileOptions &options,
                                                  runtime::DiskCache *cache,
                                                  LoadReport *report) {
  runtime::CacheKey key = cpuCacheKey(spec, options); // validates first
  runtime::DiskCache &disk = cache ? *cache : runtime::defaultCache();
  return loadThroughMemoryTier(memoryTier(), /*context=*/nullptr, disk,
                               key.hash(), report, [&](LoadReport &r) {
                                 return loadOrCompileUncached(spec, options,
                                                              disk, key, r);
                               });
}

} // namespace flashjit
