//===- GridConstantArgs.h - By-value grid-constant kernel arguments -*- C++
//-*-===//
//
// TMA tensor maps travel as by-value kernel parameters read in place
// (nvvm.grid_constant), which MLIR's NVVM dialect accepts only on llvm.func
// kernels: the kernel builders name those arguments in a function attribute
// and flashjit-mark-grid-constants, run after convert-gpu-to-nvvm, marks
// them (GridConstantArgs.cpp). Compiler-internal (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_GRIDCONSTANTARGS_H
#define FLASHJIT_CONVERSION_GRIDCONSTANTARGS_H

#include "mlir/Pass/Pass.h"

#include "llvm/ADT/StringRef.h"

#include <memory>

namespace flashjit {

/// Function attribute (DenseI32ArrayAttr) of a GPU kernel: the indices of
/// its by-value tensor-map arguments (abi::gpu::ArgType::TensorMap), which
/// createMarkGridConstantArgsPass() turns into llvm.byval, llvm.align and
/// nvvm.grid_constant argument attributes after convert-gpu-to-nvvm.
inline constexpr llvm::StringLiteral kGridConstantArgsAttr =
    "flashjit.grid_constant_args";

/// Alignment of a by-value CUtensorMap parameter, in bytes (cuda.h:
/// CUtensorMap is 64-byte aligned; cp.async.bulk.tensor requires it).
inline constexpr int kTensorMapAlign = 64;

/// On a gpu.module after convert-gpu-to-nvvm: each llvm.func kernel's
/// arguments named by kGridConstantArgsAttr become
/// `!llvm.ptr {llvm.byval = !llvm.array<128 x i8>, llvm.align = 64,
/// nvvm.grid_constant}` (the kernel reads the CUtensorMap in parameter
/// space through its generic address); the function attribute is removed.
/// Fails on a non-kernel or an index that is not a pointer argument.
std::unique_ptr<mlir::Pass> createMarkGridConstantArgsPass();

} // namespace flashjit

#endif // FLASHJIT_CONVERSION_GRIDCONSTANTARGS_H
