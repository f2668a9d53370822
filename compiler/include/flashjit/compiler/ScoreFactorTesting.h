//===- ScoreFactorTesting.h - Forward score row factors ---------*- C++ -*-===//
//
// A testing hook, not an API: the forward benchmark (bench_kernels, label
// "rowfactor") and the [gpu] test `ALiBi forward with hoisted slopes`
// time and check the forward kernels with the score modifier's row-only
// part (ALiBi's slopes[head]) evaluated once per row before the key loop,
// beside the default, which evaluates it per element (a guarded global
// load and an out-of-range check per score), and with ALiBi's distance
// |q_idx - kv_idx| in f32 from one conversion per row and tile (label
// "floatdist"). Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_SCOREFACTORTESTING_H
#define FLASHJIT_COMPILER_SCOREFACTORTESTING_H

namespace flashjit {

/// Testing only: whether GPU forward kernels compiled from now on in this
/// process evaluate the row-only part of a score modifier without a mask
/// and without a block list (the parts depending on neither the score nor kv_idx: ALiBi's
/// slopes[head]) once per row of the thread before the key loop (default
/// false: per element). Rows are read only where q_idx < seqlen_q and
/// seqlen_k > 0, so the same buffer elements are read as per element. No
/// cache key holds it: only tools that write kernels without a cache
/// (bench_kernels' label "rowfactor") and tests that compile without one
/// may turn it on.
void setForwardScoreRowFactorsForTesting(bool on);

/// Testing only: whether GPU forward kernels compiled from now on in this
/// process give a score modifier's sitofp(q_idx - kv_idx) (either order,
/// and under abs) as one float(q_idx - kv_idx) per row and key tile minus
/// the column's offset per element (exact where |q_idx - kv_idx| + 256 <
/// 2^24, as the per-element conversion), instead of an integer
/// subtraction, abs and conversion per element (default false; label
/// "floatdist" turns on both hooks). No cache key holds it.
void setForwardScoreFloatDistanceForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_SCOREFACTORTESTING_H
