//===- FlashBackwardKernel.h - FlashAttention-2 GPU backward kernels -*- C++
//-*-===//
//
// Builds the three GPU backward kernels of a variant (FlashAttention-2,
// Dao 2023, Algorithm 2: gradients by recomputation from the LSE) as
// gpu.funcs inside a gpu.module, from the pieces the forward is built from
// (KernelOps, SharedTile, MmaSync, VariantTile through the same
// FragmentEmitter), so the backward never evaluates a mask differently from
// the forward. mma.sync m16n8k16 and ldmatrix only: the same kernels run on
// sm_80 and sm_90a. Internal to the compiler (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_FLASHBACKWARDKERNEL_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_FLASHBACKWARDKERNEL_H

#include "flashjit/Conversion/AttnToNVVM/FlashForwardKernel.h"

namespace flashjit::nvvm {

/// Adds `<config.name>_bwd_pre`, `<config.name>_bwd` and
/// `<config.name>_bwd_post` (abi::gpu::BackwardArg in runtime/KernelAbi.h:
/// arguments, grids, what each computes) to \p gpuModule. \p config has
/// kind Backward: blockM() keys per CTA (16 per warp), blockN query rows per
/// inner tile, with blockN / 16 dividing numWarps and head_dim_qk a multiple
/// of 16 * numWarps / (blockN / 16). The variant must have no score modifier
/// (its derivative needs the backward op's score_grad region). With
/// varlen the kernels take cu_seqlens (as the forward's) and work per
/// sequence. With blockSparse they take the transposed block mask
/// (abi::gpu::backwardArgTypes; `<name>_bwd_mask` writes it, built
/// separately by buildBackwardBlockMaskKernel) and the main kernel visits
/// only the listed query tiles: partial ones as below, full ones with no
/// mask code. All three support the deterministic mode at run time (a
/// non-null semaphores argument: dQ added in a fixed key-tile order;
/// KernelAbi.h), except block-sparse kernels.
///
/// Per (query head of the kv head's group, query tile that the mask's
/// interval classification does not find empty), each warp of the main
/// kernel owns 16 keys and computes
///   S^T = K Q^T,  P^T = exp2(score * log2e - LSE * log2e) (0 where masked)
///   dV += P^T dO,  dP^T = V dO^T,  dS^T = P^T * (dP^T - D)
///   dK += scale * dS^T Q
/// and, after dS^T goes through shared memory, dQaccum += dS K
/// (fp32 atomics). Tiles the classifier finds full run no mask code.
void buildFlashBackwardKernels(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Operation *gpuModule,
                               const KernelShape &config,
                               FragmentEmitter &emitter);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_FLASHBACKWARDKERNEL_H
