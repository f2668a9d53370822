//===- BackwardOrderTesting.h - Block-sparse backward prefetch --*- C++ -*-===//
//
// A testing hook, not an API: the [.bwdsparsebench] timing (tests/gpu)
// compares the block-sparse wgmma backward's listed-tile prefetching with
// the kernels without it, so it needs kernels built both ways. Kept out of
// GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
#define FLASHJIT_COMPILER_BACKWARDORDERTESTING_H

namespace flashjit {

/// Testing only: whether block-sparse wgmma backward kernels compiled from
/// now on in this process (not the split kernel above head dim 128) load
/// the next listed query tile's Q, dO, LSE and D into the other stage of
/// the query-tile ring while the current tile computes (default true).
/// Off: each listed tile is loaded when it is visited (session 16's
/// kernels, byte-identical), the old column of the [.bwdsparsebench]
/// timing (gen_matrix_kernels' `_nopf` ids). No cache key holds it.
void setListedPrefetchBackwardForTesting(bool on);

/// Testing only: whether masked wgmma backward kernels up to head dim 64
/// without a block mask, compiled from now on in this process, loop over
/// the query tiles from the first to the last their tile classifier does
/// not find empty, found by a scan before the loop (default true). Off:
/// the loop steps through every query tile, skipping the empty ones (the
/// kernels before session 20, byte-identical), the old column of the
/// [.bwdbench] timing (gen_matrix_kernels' `_noscan` ids). No cache key
/// holds it.
void setTileRangeBackwardForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
