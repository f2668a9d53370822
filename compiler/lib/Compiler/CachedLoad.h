//===- CachedLoad.h - The memory tier in front of the disk cache -*- C++
//-*-===//
//
// What the compile-or-load entry points of CPU kernels (CpuCache.cpp) and
// GPU kernels (GpuCache.cpp) share: the load report's start and the memory
// tier consulted before the disk cache. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_LIB_COMPILER_CACHEDLOAD_H
#define FLASHJIT_LIB_COMPILER_CACHEDLOAD_H

#include "flashjit/runtime/Cache.h"

#include <memory>
#include <string>

namespace flashjit {

/// The kernel of cache key \p keyHash for device context \p context (nullptr
/// on the CPU): from \p tier, per context, \p disk's directory and key, else
/// made by \p load(LoadReport &), which reads the disk cache or compiles and
/// fills the report's outcome and entry directory. \p report (if given) is
/// cleared and given the key first; a memory hit is reported as Hit with
/// memoryHit set. With FLASHJIT_ALWAYS_COMPILE (the cache's alwaysCompile)
/// the tier is neither read nor written. Exceptions from \p load propagate.
template <class T, class LoadFn>
std::shared_ptr<const T>
loadThroughMemoryTier(runtime::MemoryTier<T> &tier, const void *context,
                      const runtime::DiskCache &disk,
                      const std::string &keyHash, runtime::LoadReport *report,
                      LoadFn &&load) {
  runtime::LoadReport local;
  runtime::LoadReport &r = report ? *report : local;
  r = runtime::LoadReport();
  r.key = keyHash;
  if (disk.config().alwaysCompile)
    return load(r);
  // Two DiskCache objects on one directory share kernels, and a DiskCache
  // made at the address of a destroyed one does not inherit its kernels.
  std::string slot =
      (disk.usable() ? disk.dir() : std::string()) + "\n" + keyHash;
  bool loaded = false;
  std::shared_ptr<const T> kernel = tier.getOrLoad(context, slot, [&] {
    loaded = true;
    return load(r);
  });
  if (!loaded) {
    r.memoryHit = true;
    r.outcome = runtime::CacheOutcome::Hit;
    if (disk.usable())
      r.entryDir = disk.entryDir(r.key);
  }
  return kernel;
}

} // namespace flashjit

#endif // FLASHJIT_LIB_COMPILER_CACHEDLOAD_H
