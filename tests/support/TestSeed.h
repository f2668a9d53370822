//===- TestSeed.h - Random seeds of the tests -------------------*- C++ -*-===//
//
// One fresh seed per call, or FLASHJIT_TEST_SEED to replay a failure: the
// frontend unit tests (through TestSupport.h) and the GPU tests.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_SUPPORT_TESTSEED_H
#define FLASHJIT_TESTS_SUPPORT_TESTSEED_H

#include <cstdint>
#include <cstdlib>
#include <random>

namespace flashjit::test {

/// A 64-bit seed drawn fresh from std::random_device for every call, unless
/// the environment variable FLASHJIT_TEST_SEED fixes it (decimal, or 0x hex;
/// tests print their seed, so a failure can be run again).
inline uint64_t freshSeed() {
  if (const char *env = std::getenv("FLASHJIT_TEST_SEED"))
    return std::strtoull(env, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

} // namespace flashjit::test

#endif
