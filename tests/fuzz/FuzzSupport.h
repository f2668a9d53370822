//===- FuzzSupport.h - Shared checks of the fuzz targets ---------*- C++
//-*-===//
//
// A fuzz target reports a finding by aborting (libFuzzer then saves the
// input as crash-*): an exception other than UserError, a broken round trip,
// an unbounded error message. Used by the libFuzzer builds (clang,
// -fsanitize=fuzzer) and by the corpus replay built with the project's own
// compiler (FuzzReplayMain.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_FUZZ_FUZZSUPPORT_H
#define FLASHJIT_TESTS_FUZZ_FUZZSUPPORT_H

#include "flashjit/frontend/Error.h"

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace flashjit::fuzz {

/// The longest error message allowed for any input: messages quote at most
/// kExcerptChars (200) bytes of the input per quoted piece (README,
/// Semantics 10); a parse error shows the excerpt and a caret line under it.
inline constexpr size_t kMaxMessageBytes = 2048;

/// Prints \p what (and \p detail) and aborts: the fuzzer's finding.
[[noreturn]] inline void fail(std::string_view what,
                              std::string_view detail = {}) {
  std::fprintf(stderr, "fuzz finding: %.*s\n%.*s\n",
               static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

/// Checks that a rejected input got a bounded, non-empty message.
inline void checkMessage(std::string_view message) {
  if (message.empty())
    fail("an error with an empty message");
  if (message.size() > kMaxMessageBytes)
    fail("an error message longer than kMaxMessageBytes",
         message.substr(0, 400));
}

} // namespace flashjit::fuzz

#endif // FLASHJIT_TESTS_FUZZ_FUZZSUPPORT_H
