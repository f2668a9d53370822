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
/// before its terminator. The CTA's threads form 128 / (head_dim_v / 4)
/// groups of head_dim_v / 4 (a 16-byte column quad each); group g folds
/// splits g, g + groups, ... (8 per step, their loads in flight together)
/// into a weight sum and 4 column sums, after a first pass that takes the
/// row's maximum LSE over all threads; the groups' sums meet in static
/// shared memory (DecodeMerge.h has the formula). Under
/// setDecodeSerialMergeForTesting (or a head_dim_v above 512) it is the
/// serial kernel of sessions 16-18 instead: every thread walks all splits
/// for its two columns. Then appends @<name>_decode_merge_serial (same
/// arguments and launch), always the serial kernel: the runtime takes it
/// for few splits over many rows (runtime::decodeSerialMerge).
void buildDecodeMergeKernel(mlir::ImplicitLocOpBuilder &b,
                            mlir::Operation *gpuModule, const KernelShape &c);

} // namespace flashjit::nvvm::detail

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_DECODEMERGEKERNEL_H
