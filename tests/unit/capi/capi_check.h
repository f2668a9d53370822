/*===- capi_check.h - CHECK for the C API tests ---------------------------===//
 *
 * CHECK(cond) counts a check and, when cond is false, a failure, printing the
 * condition and flashjit_last_error(); CHECK_SUMMARY() prints the counts and
 * is the exit status (0 iff nothing failed).
 *
 *===----------------------------------------------------------------------===*/
#ifndef FLASHJIT_TESTS_CAPI_CHECK_H
#define FLASHJIT_TESTS_CAPI_CHECK_H

#include "flashjit-c/flashjit.h"

#include <stdio.h>

static int failures = 0, checks = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    ++checks;                                                                  \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__,   \
              __LINE__, #cond, flashjit_last_error());                         \
    }                                                                          \
  } while (0)

#define CHECK_SUMMARY()                                                        \
  (printf("%d passed, %d failed\n", checks - failures, failures),              \
   failures ? 1 : 0)

#endif /* FLASHJIT_TESTS_CAPI_CHECK_H */
