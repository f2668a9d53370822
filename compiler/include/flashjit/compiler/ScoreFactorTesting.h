//===- ScoreFactorTesting.h - Forward score row factors ---------*- C++ -*-===//
//
// A testing hook, not an API. Since session 27 the GPU forward evaluates a
// score modifier's row-only part (ALiBi's slopes[head]) once per row before
// the key loop, where the kernel has no mask and no block list, and gives
// a score modifier's distance sitofp(q_idx - kv_idx) as one f32 conversion
// per row and key tile (bench/RESULTS.md, session 27: ALiBi at D = 128 went
// from 0.53x to 0.87x of dense). These switches turn either back off, so
// the benchmark (bench_kernels, label "perelem") can time the per-element
// form beside the default. Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_SCOREFACTORTESTING_H
#define FLASHJIT_COMPILER_SCOREFACTORTESTING_H

namespace flashjit {

/// Testing only: whether GPU forward kernels compiled from now on in this
/// process evaluate the row-only part of a score modifier (the parts
/// depending on neither the score nor kv_idx: ALiBi's slopes[head]) once
/// per row of the thread before the key loop, in kernels without a mask
/// and without a block list (default true; false: per element, a guarded
/// buffer read and out-of-range check per score). Rows are read only where
/// q_idx < seqlen_q and seqlen_k > 0, so the same buffer elements are read
/// as per element. No cache key holds it: only tools that write kernels
/// without a cache (bench_kernels' label "perelem") and tests that compile
/// without one may turn it off. The tile policy assumes it is on (a kernel
/// whose score modifier reads buffers per row only takes the overlap).
void setForwardScoreRowFactorsForTesting(bool on);

/// Testing only: whether GPU forward kernels compiled from now on in this
/// process give a score modifier's sitofp(q_idx - kv_idx) (either order,
/// and under abs) as one float(q_idx - kv_idx) per row and key tile minus
/// the column's constant offset per element (default true), instead of an
/// integer subtraction, abs and conversion per element. Both are exact,
/// and equal bit for bit, where |q_idx - kv_idx| + 256 < 2^24 (f32's
/// 24-bit significand); beyond that both round. No cache key holds it.
void setForwardScoreFloatDistanceForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_SCOREFACTORTESTING_H
