//===- GpuKey.h - The GPU cache key, without validation ----------*- C++
//-*-===//
//
// gpuCacheKey() (GpuCache.h) validates and then builds the key here; the GPU
// compile driver builds the same key to name the files it dumps to
// FLASHJIT_DUMP_DIR, so dumps and cache entries share one name. Internal to
// the compiler; free of MLIR and CUDA headers.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_GPUKEY_H
#define FLASHJIT_COMPILER_GPUKEY_H

#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/runtime/CacheEntry.h"

namespace flashjit {

/// The disk-cache key of \p spec compiled with \p options (arch, block_n,
/// warps, CTAs per SM, rows per warp, mma, varlen, block-sparse; the build
/// and environment through CacheKey::make). Does not validate.
runtime::CacheKey makeGpuCacheKey(const AttentionSpec &spec,
                                  const GpuCompileOptions &options);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_GPUKEY_H
