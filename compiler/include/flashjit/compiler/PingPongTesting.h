//===- PingPongTesting.h - The ping-pong forward, testing only --*- C++ -*-===//
//
// A testing hook, not an API: mma = wgmma.tma.ws.overlap.pingpong (the
// inter-warpgroup ping-pong on the intra-warpgroup overlap, session 24)
// hung on an H100 in its first GPU run, so compileGpu refuses it unless
// this hook is on (gen_matrix_kernels, bench_kernels and the code-
// generation test turn it on to keep building and checking its PTX).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_PINGPONGTESTING_H
#define FLASHJIT_COMPILER_PINGPONGTESTING_H

namespace flashjit {

/// Testing only: whether compileGpu builds mma =
/// wgmma.tma.ws.overlap.pingpong from now on in this process (default
/// false: a UserError saying it hung on the GPU). No cache key holds it.
void setPingPongForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_PINGPONGTESTING_H
