//===- CompilerImpl.h - State behind Compiler.h's objects ---------*- C++
//-*-===//
//
// Shared by CpuCompile.cpp (MLIR, builds the objects) and CpuKernel.cpp (no
// MLIR, runs them). The JIT engine is held type-erased so this header needs
// no MLIR include.
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

struct CpuKernel::Impl {
  AttentionSpec spec;
  int blockM = 64;
  int blockN = 64;
  bool countTiles = false;
  std::vector<StageTiming> timings;
  std::array<std::string, 5> texts;
  /// Buffers and parameters in kernel-argument order (sorted by name).
  std::vector<BufferDecl> buffers;
  std::vector<ParamDecl> params;
  std::shared_ptr<void> engine; ///< keeps the JIT-compiled code alive
  PackedFn fn = nullptr;
};

struct TileClassifierKernel::Impl {
  std::vector<ParamDecl> params; ///< sorted by name
  std::shared_ptr<void> engine;
  PackedFn fn = nullptr;
};

/// Parameters and buffers of \p v sorted by name (the kernel's order).
std::vector<ParamDecl> sortedParams(const Variant &v);
std::vector<BufferDecl> sortedBuffers(const Variant &v);

} // namespace flashjit

#endif // FLASHJIT_LIB_COMPILER_COMPILERIMPL_H
