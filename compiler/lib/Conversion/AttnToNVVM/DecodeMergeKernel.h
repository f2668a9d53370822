//===- DecodeMergeKernel.h - The split-KV decode's merge kernel -*- C++ -*-===//
//
// @<name>_decode_merge: combines the partial O / LSE of a decode call's
// splits exactly through their LSEs (FlashDecodeKernel.cpp has the
// algorithm). Private to this directory.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGEKERNEL_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGEKERNEL_H

#include "flashjit/Conversion/AttnToNVVM/FlashDecodeKernel.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace flashjit::nvvm::detail {

/// Appends @<name>_decode_merge (abi::gpu::mergeArgTypes; one CTA of
/// abi::gpu::kMergeThreads per (query, head_q, batch) row) to \p gpuModule,
/// before its terminator.
void buildDecodeMergeKernel(mlir::ImplicitLocOpBuilder &b,
                            mlir::Operation *gpuModule, const KernelShape &c);

} // namespace flashjit::nvvm::detail

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGEKERNEL_H
