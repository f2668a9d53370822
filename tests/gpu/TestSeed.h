//===- TestSeed.h - Random seeds of the GPU tests ---------------*- C++ -*-===//
//
// One fresh seed per test run, or FLASHJIT_TEST_SEED to replay a failure.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_GPU_TESTSEED_H
#define FLASHJIT_TESTS_GPU_TESTSEED_H

#include <cstdint>
#include <cstdlib>
#include <random>

namespace flashjit::test {

/// A fresh random seed, or the decimal value of FLASHJIT_TEST_SEED when it is
/// set (tests print their seed, so a failure can be run again).
inline uint64_t freshSeed() {
  if (const char *s = std::getenv("FLASHJIT_TEST_SEED"))
    return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

} // namespace flashjit::test

#endif
