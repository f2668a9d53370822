//===- Tma.h - TMA bulk tensor copies and mbarriers -------------*- C++ -*-===//
//
// The sm_90 asynchronous copy family: mbarrier objects in shared memory
// (init, arrive with an expected transaction byte count, wait on a phase's
// parity) and cp.async.bulk.tensor loads (TMA) from global memory into
// shared memory through a tensor map, completing on an mbarrier (PTX ISA,
// "Parallel Synchronization and Communication Instructions: mbarrier" and
// "Data Movement and Conversion Instructions: cp.async.bulk.tensor"). A
// tensor map with the 128-byte swizzle writes the layout of SharedTile.h's
// swizzled tiles, one 64-element column block per copy. Inline PTX, like
// Wgmma.h, so what ptxas sees is exactly what is written here. Private to
// the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_TMA_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_TMA_H

#include "KernelOps.h"

namespace flashjit::nvvm {

/// mbarrier.init of the 8-byte barrier at shared address \p bar (an
/// !llvm.ptr<3>) with \p count expected arrivals; then the fences that make
/// the initialised barrier visible to the async proxy (the TMA unit). The
/// caller runs it in one thread and then synchronises the CTA.
void mbarrierInit(KernelOps &ops, mlir::Value bar, int count);

/// mbarrier.arrive.expect_tx: one arrival at \p bar that also expects
/// \p bytes (i32 constant) of TMA transactions in the current phase.
void mbarrierArriveExpectTx(KernelOps &ops, mlir::Value bar, int64_t bytes);

/// mbarrier.arrive: one arrival of the calling thread at \p bar.
void mbarrierArrive(KernelOps &ops, mlir::Value bar);

/// mbarrierArrive where \p flag (i32) is not 0, as one predicated
/// instruction (no branch: code around it stays convergent for ptxas).
void mbarrierArriveIf(KernelOps &ops, mlir::Value bar, mlir::Value flag);

/// Spins on mbarrier.try_wait.parity until the phase of \p bar with parity
/// \p parity (i32, 0 or 1) has completed; the data its transactions wrote
/// is visible to the calling thread after.
void mbarrierWait(KernelOps &ops, mlir::Value bar, mlir::Value parity);

/// cp.async.bulk.tensor.4d (tile mode) of the box at coordinates \p coords
/// (4 x i32, innermost first) of the tensor map at generic address
/// \p tensorMap (a kernel parameter: !llvm.ptr) into shared memory at
/// \p dst (!llvm.ptr<3>, 128-byte aligned, 1024 for the 128-byte swizzle),
/// completing its bytes on \p bar. Out-of-range elements are zero-filled
/// and counted as transferred.
void tmaLoad4d(KernelOps &ops, mlir::Value dst, mlir::Value tensorMap,
               mlir::ArrayRef<mlir::Value> coords, mlir::Value bar);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_TMA_H
