//===- BackwardBlockMask.h - The block-sparse backward's mask transposer -===//
//
// The GPU backward's main kernel runs key tiles outer and query tiles
// inner, so a block-sparse backward needs the forward's BlockMask
// transposed: per key tile, the query tiles to visit. The kernel built here
// writes those lists on the device from the BlockMask the user passes to
// the forward. Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDBLOCKMASK_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDBLOCKMASK_H

#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

namespace flashjit::nvvm {

/// Adds `<config.name>_bwd_mask` (abi::gpu::BackwardMaskArg in
/// runtime/KernelAbi.h: arguments, grid, the tile rule) to \p gpuModule:
/// one warp per (key tile of config.blockM() keys, mask head, mask batch)
/// finds, for each query tile of config.blockN rows, its mask tile in the
/// mask row's partial and full lists (binary search; the lists are
/// increasing) and compacts the hits with ballots, in increasing order.
/// It reads no variant code: a tile's class is the mask's, never
/// re-evaluated. Host twin: flashjit::transposeBlockMask.
void buildBackwardBlockMaskKernel(mlir::OpBuilder &b, mlir::Location loc,
                                  mlir::Operation *gpuModule,
                                  const KernelShape &config);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_BACKWARDBLOCKMASK_H
