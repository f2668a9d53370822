//===- MaskedValueTesting.h - Kernels without isolation ---------*- C++ -*-===//
//
// A testing hook, not an API: the [.maskbench] timing (tests/gpu) compares
// the GPU kernels with and without the isolation of masked keys (README,
// "Masked keys are isolated"; issue 21 section 3), so it needs kernels
// built without it. Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_MASKEDVALUETESTING_H
#define FLASHJIT_COMPILER_MASKEDVALUETESTING_H

namespace flashjit {

/// Testing only: whether GPU kernels compiled from now on in this process
/// isolate masked keys (default true). Off, a NaN or Inf in K or V at a
/// masked key may reach a row, as before issue 21 section 3; the PTX is
/// then that of the unguarded kernels. No cache key holds it: only
/// tools that write kernels without a cache (gen_matrix_kernels
/// mask-bench-base) may turn it off.
void setMaskedValueIsolationForTesting(bool on);

/// Testing only: whether GPU forward kernels compiled from now on in this
/// process take the masked-value vote inside each partial tile, with a
/// barrier of its own (session 15's placement, the [.maskbench] "old"
/// column; default false: TMA kernels fold it into the barriers they have,
/// MaskedValues.h). The rule and the results are the same either way; only
/// the timing differs. No cache key holds it: only tools that write
/// kernels without a cache (gen_matrix_kernels mask-bench-old) may set it.
void setMaskedValueTileVoteForTesting(bool on);

/// Testing only: whether TMA forward kernels without warp specialisation
/// compiled from now on take the vote on the next tile at the barrier that
/// closes each tile (default false: they vote inside the tile, which
/// measured 4-8 points cheaper at head dim 64 on an H100, session 16).
/// Same rule and results; no cache key holds it.
void setMaskedValueTileEndVoteForTesting(bool on);

/// Testing only: whether warp-specialised GPU forward kernels compiled from
/// now on publish the masked-value vote in each partial tile (sessions
/// 18-23's placement: each consumer warp's share through a per-stage word
/// and mbarrier; the [.maskbench] "published" column). Default false: they
/// run the row block with no vote, check their O for a NaN or Inf and only
/// then run it again with the vote (MaskedValues.h). Same rule and
/// results; no cache key holds it.
void setMaskedValuePublishedVoteForTesting(bool on);

/// Testing only: whether GPU backward kernels compiled from now on in this
/// process isolate masked keys as before session 17 (the [.maskbench]
/// "old" column; default false). On, the pipelined wgmma backward at head
/// dim 64 zeroes dS' where P is 0 in every partial tile and votes on its K
/// tile at the dS^T barrier of every partial tile; off, it checks its own
/// dS^T and dQ fragments for a NaN or Inf and takes those paths only where
/// one holds (MaskedValues.h, "Backward"). The rule and the results are the
/// same either way; only the timing differs. No cache key holds it: only
/// tools that write kernels without a cache (gen_matrix_kernels
/// mask-bench-old) may set it.
void setMaskedValueBackwardTileVoteForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_MASKEDVALUETESTING_H
