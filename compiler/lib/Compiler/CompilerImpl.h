//===- CompilerImpl.h - State behind Compiler.h's objects ---------*- C++
//-*-===//
//
// The tile classifier's state and the sorted parameter and buffer lists,
// shared by CpuCompile.cpp (MLIR, builds the objects), CpuKernel.cpp and
// CpuCache.cpp (no MLIR). The JIT engine is held type-erased so this header
// needs no MLIR include.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_LIB_COMPILER_COMPILERIMPL_H
#define FLASHJIT_LIB_COMPILER_COMPILERIMPL_H

#include "flashjit/compiler/Compiler.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace flashjit {

/// A packed kernel entry point: each element of the array points at one
/// argument (and, for functions with a result, the last one at the result).
using PackedFn = void (*)(void **);

struct TileClassifierKernel::Impl {
  std::vector<ParamDecl> params; ///< sorted by name
  /// Sorted by name; empty unless compiled with the buffer-range rule.
  std::vector<BufferDecl> buffers;
  std::shared_ptr<void> engine;
  PackedFn fn = nullptr;
};

/// Parameters and buffers of \p v sorted by name (the kernel's order).
std::vector<ParamDecl> sortedParams(const Variant &v);
std::vector<BufferDecl> sortedBuffers(const Variant &v);

/// Every UserError of a backward compile of \p spec (a backwardSpec), before
/// MLIR: validateForCpu, options.countTiles, and the score modifier's
/// differentiability (at the user's line).
void validateBackwardForCpu(const AttentionSpec &spec,
                            const CompileOptions &options);

/// Forgets the backward kernels of loadOrCompileCpuBackward's memory tier
/// (part of clearCpuMemoryTier).
void clearCpuBackwardMemoryTier();

} // namespace flashjit

#endif // FLASHJIT_LIB_COMPILER_COMPILERIMPL_H
