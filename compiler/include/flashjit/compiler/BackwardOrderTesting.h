//===- BackwardOrderTesting.h - The pipelined masked backward ---*- C++ -*-===//
//
// A testing hook, not an API: the [.bwdbench] timing (tests/gpu) compares
// the wgmma backward's synchronous tile step, which masked and
// score-modifier kernels take above head dim 64, with the pipelined step
// (asyncTileStep) built for them anyway, so it needs kernels built that
// way; the block-sparse timing likewise compares listed-tile prefetching
// with the kernels without it. Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
#define FLASHJIT_COMPILER_BACKWARDORDERTESTING_H

namespace flashjit {

/// Testing only: whether wgmma backward kernels compiled from now on in
/// this process with mask or score-modifier code at head dims above 64
/// take the pipelined (asynchronous) tile step (default false: the
/// synchronous one). Never for a score modifier that reads buffers or has
/// buffer or parameter gradients; a mask that reads buffers then issues
/// dP^T once P^T is made. The kernels' arguments and shared memory are
/// unchanged; some of these kernels spill (ptxas 13 at D = 128: bottom-
/// right and varlen windows, varlen bottom-right causal, varlen document
/// masks). No cache key holds it: only tools that write kernels without a
/// cache (gen_matrix_kernels' `_pipe` timing kernels, the codegen test)
/// may turn it on.
void setMaskedPipelinedBackwardForTesting(bool on);

/// Testing only: whether block-sparse wgmma backward kernels compiled from
/// now on in this process (not the split kernel above head dim 128) load
/// the next listed query tile's Q, dO, LSE and D into the other stage of
/// the query-tile ring while the current tile computes (default true).
/// Off: each listed tile is loaded when it is visited (session 16's
/// kernels, byte-identical), the old column of the [.bwdsparsebench]
/// timing (gen_matrix_kernels' `_nopf` ids). No cache key holds it.
void setListedPrefetchBackwardForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
