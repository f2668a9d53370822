//===- FlashDecodeKernel.h - Split-KV decode over a paged KV cache -*- C++
//-*-===//
//
// Builds the GPU decode kernels (KernelKind::Decode): the split-KV
// ("flash-decoding") kernel over a paged KV cache, which can also merge its
// partial states through their LSEs (one launch per call), and the kernel
// that merges them in a second launch. Internal to the compiler (includes
// MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_FLASHDECODEKERNEL_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_FLASHDECODEKERNEL_H

#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

namespace flashjit::nvvm {

/// Adds `gpu.func @<name>_decode` and `gpu.func @<name>_decode_merge` to
/// \p gpuModule (arguments, grids, workspaces and the merge:
/// abi::gpu::DecodeArg and abi::gpu::MergeArg in runtime/KernelAbi.h; the
/// decode kernel takes the variant's parameters and buffers after its fixed
/// arguments). With one key split a CTA writes O and LSE; with several,
/// the last CTA of a (batch, kv head, row tile) group merges (DecodeMerge.h)
/// or, with null counters, the merge kernel does (DecodeMergeKernel.h).
/// mma.sync with rows-per-warp 16: config.blockM() packed query rows per
/// CTA, config.blockN keys per tile, config.decodeStages cp.async K/V
/// stages (2, or 3 with Q's tile on the third) gathered through the page
/// table; warps whose rows are all padding only load. The
/// variant is evaluated per element by variantScoresPacked (VariantTile.h),
/// exactly as the forward kernel evaluates it, with seqlen_q = q_len and
/// seqlen_k the sequence's length. Keys at or past a sequence's length are
/// never read.
void buildFlashDecodeKernels(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Operation *gpuModule,
                             const KernelShape &config,
                             FragmentEmitter &emitter);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_FLASHDECODEKERNEL_H
