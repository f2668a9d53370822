//===- TestSupport.h - Shared helpers of the frontend unit tests -*- C++
//-*-===//
//
// Fresh random seeds (printed on failure, overridable with FLASHJIT_TEST_SEED
// to replay one), an expectation that a callable throws UserError at a given
// line of the test, and small tensor builders for the reference tests.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_UNIT_FRONTEND_TESTSUPPORT_H
#define FLASHJIT_TESTS_UNIT_FRONTEND_TESTSUPPORT_H

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Expr.h"

#include "../../support/TestSeed.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>

namespace flashjit::test {

/// The message and location of the UserError \p f throws, checked against
/// \p line (the test's own line that built the bad expression) and every
/// substring in \p needles. Fails if \p f throws nothing or something else.
template <class F>
void expectUserErrorAt(F &&f, unsigned line,
                       std::initializer_list<const char *> needles = {}) {
  INFO("expected a UserError located at test line " << line);
  bool threw = false;
  try {
    (void)f();
  } catch (const flashjit::UserError &e) {
    threw = true;
    INFO("message: " << e.what());
    CHECK(e.location().line() == line);
    CHECK(!e.message().empty());
    for (const char *needle : needles) {
      INFO("expected substring: " << needle);
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  }
  CHECK(threw);
}

/// Checks that \p f throws UserError whose message contains every needle.
template <class F>
void expectUserError(F &&f, std::initializer_list<const char *> needles = {}) {
  bool threw = false;
  try {
    (void)f();
  } catch (const flashjit::UserError &e) {
    threw = true;
    INFO("message: " << e.what());
    for (const char *needle : needles) {
      INFO("expected substring: " << needle);
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  }
  CHECK(threw);
}

/// Uniform double in [lo, hi).
inline double uniform(std::mt19937_64 &rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

/// Uniform integer in [lo, hi].
inline int64_t uniformInt(std::mt19937_64 &rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

/// A float in [-2, -0.25] U [0.25, 2]: random, never zero.
inline float nonZero(std::mt19937_64 &rng) {
  float m = static_cast<float>(uniform(rng, 0.25, 2.0));
  return uniformInt(rng, 0, 1) ? m : -m;
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_UNIT_FRONTEND_TESTSUPPORT_H
