//===- MmaSync.h - mma.sync m16n8k16 and ldmatrix ----------------*- C++
//-*-===//
//
// The sm_80 instruction family: ldmatrix.x4 loads of 8x8 16-bit fragments
// from shared memory and the warp-wide mma.sync m16n8k16 with fp32
// accumulators (PTX ISA, "Warp-level matrix multiply-accumulate";
// fragment layouts in ../shared/notes/MMA-FRAGMENTS.md). Private to the
// AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_MMASYNC_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_MMASYNC_H

#include "KernelOps.h"

namespace flashjit::nvvm {

/// ldmatrix.sync.aligned.m8n8.x4(.trans).b16 at this lane's shared-memory
/// address \p addr: four i32 registers of packed 16-bit pairs.
llvm::SmallVector<mlir::Value, 4> ldmatrixX4(KernelOps &ops, mlir::Value addr,
                                             bool trans);

/// acc[0..3] += A (4 packed registers) * B (\p b0, \p b1): mma.sync
/// m16n8k16, row.col, bf16 or fp16 operands (ops.bf16), fp32 accumulators.
void mmaM16N8K16(KernelOps &ops, llvm::ArrayRef<mlir::Value> a, mlir::Value b0,
                 mlir::Value b1, llvm::MutableArrayRef<mlir::Value> acc);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_MMASYNC_H
