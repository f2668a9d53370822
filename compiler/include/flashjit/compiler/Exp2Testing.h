//===- Exp2Testing.h - Softmax exponentials without ftz ---------*- C++ -*-===//
//
// A testing hook, not an API: the [.bwdbench] timing (tests/gpu, the
// `_noftz` ids) and the forward benchmark (bench_kernels, label "noftz")
// time the GPU kernels with the softmax's exponentials in their old form,
// PTX `ex2.approx.f32`, beside the default `ex2.approx.ftz.f32`, so they
// need kernels built both ways. Kept out of GpuCompiler.h on purpose.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_EXP2TESTING_H
#define FLASHJIT_COMPILER_EXP2TESTING_H

namespace flashjit {

/// Testing only: whether GPU kernels compiled from now on in this process
/// take their softmax exponentials (the forward's online softmax, the
/// backward's P = exp2(s - LSE), the decode kernel and its merge) as
/// `ex2.approx.ftz.f32` (default true; bf16 kernels only, fp16 ones keep
/// the plain form for now: KernelOps.cpp) or, off, as `math.exp2`, which
/// lowers to `ex2.approx.f32` (the kernels before session 18,
/// byte-identical). The results differ only where an exponential's input
/// or result is subnormal (KernelOps.cpp). No cache key holds it: only
/// tools that write kernels without a cache (gen_matrix_kernels' `_noftz`
/// ids, gen_decode_kernels, bench_kernels' label "noftz") may turn it off.
void setSoftmaxExp2FtzForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_EXP2TESTING_H
