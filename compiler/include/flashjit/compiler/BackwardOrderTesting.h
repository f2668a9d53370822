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

/// Testing only: whether masked wgmma backward kernels above head dim 64
/// (no block mask), compiled from now on in this process, loop over their
/// visited query-tile range too (default false: the matrix's fp16
/// bottom-right causal and softcap-window kernels at head dim 128 then
/// spill 4-12 bytes with ptxas 13). On: gen_matrix_kernels' `_scan` ids,
/// timed beside the default in `[bwdbench]` (session 23, H100: the
/// window-1024 backward at N = 16384 -20%). No cache key holds it.
void setTileRangeWideBackwardForTesting(bool on);

/// Testing only: whether pipelined wgmma backward kernels above head dim
/// 64, compiled from now on in this process, issue a query tile's S^T and
/// dP^T products before the next tile's loads into the other stage of the
/// ring, and dV += P^T dO before the dS^T stores (default true). Off: the
/// loads and stores come first (the kernels before session 21,
/// byte-identical), the old column of the [.bwdbench] timing
/// (gen_matrix_kernels' `_loadfirst` ids). No cache key holds it.
void setProductsFirstBackwardForTesting(bool on);

/// Testing only: whether those kernels with mask or score-modifier code
/// issue S^T and dP^T before the next tile's loads too (default false:
/// two of the matrix's head-dim-128 kernels spill that way with ptxas 13,
/// and a spill takes the synchronous step). On: gen_matrix_kernels'
/// `_lateload` ids, timed beside the default. No cache key holds it.
void setMaskedLoadsAfterProductsBackwardForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_BACKWARDORDERTESTING_H
