//===- PingPongTesting.h - The ping-pong forward, testing only --*- C++ -*-===//
//
// A testing hook, not an API: mma = wgmma.tma.ws.overlap.pingpong (the
// inter-warpgroup ping-pong on the intra-warpgroup overlap, session 24)
// did not finish its test in its first GPU run (an H100, session 24: a
// hang or a slow test, not yet told apart), so compileGpu refuses it unless
// this hook is on (gen_matrix_kernels, bench_kernels and the code-
// generation test turn it on to keep building and checking its PTX).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_PINGPONGTESTING_H
#define FLASHJIT_COMPILER_PINGPONGTESTING_H

namespace flashjit {

/// Testing only: whether compileGpu builds mma =
/// wgmma.tma.ws.overlap.pingpong from now on in this process (default
/// false: a UserError saying why). No cache key holds it.
void setPingPongForTesting(bool on);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_PINGPONGTESTING_H
