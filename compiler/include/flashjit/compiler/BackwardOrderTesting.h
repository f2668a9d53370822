//===- BackwardOrderTesting.h - The synchronous backward step ---*- C++ -*-===//
//
// A testing hook, not an API: the [.bwdbench] timing (tests/gpu) compares
// the wgmma backward's pipelined tile step with the synchronous one it
// replaced for masked kernels at head dims above 64, so it needs kernels
// built in the old order. Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
#define FLASHJIT_COMPILER_BACKWARDORDERTESTING_H

namespace flashjit {

/// Testing only: whether wgmma backward kernels compiled from now on in
/// this process may use the pipelined (asynchronous) tile step (default
/// true). Off, every backward main kernel takes the synchronous step (the
/// products in program order, one query-tile stage, no prefetch); the
/// kernels' arguments and shared memory are unchanged. No cache key holds
/// it: only tools that write kernels without a cache (gen_matrix_kernels'
/// `_sync` timing kernels) may turn it off.
void setPipelinedBackwardForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
