//===- ErrorTestSupport.h - Expecting one exact user error ------*- C++ -*-===//
//
// The tests of tests/error assert three things of every error: the exact
// class thrown (UserError, or ParseError where a column is known; never a
// subclass or a base of the one expected), and substrings of the message
// that name the field and the offending value.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_ERROR_ERRORTESTSUPPORT_H
#define FLASHJIT_TESTS_ERROR_ERRORTESTSUPPORT_H

#include "flashjit/frontend/Error.h"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>
#include <typeinfo>

namespace flashjit::test {

/// Checks that \p f throws exactly \p ErrorT (typeid equality) with a
/// message containing every string of \p needles; returns the message.
template <class ErrorT, class F>
std::string expectExactly(F &&f, std::initializer_list<std::string> needles) {
  std::string message;
  bool threw = false;
  try {
    (void)f();
  } catch (const flashjit::Error &e) {
    threw = true;
    message = e.what();
    INFO("message: " << message);
    CHECK(std::string(typeid(e).name()) == typeid(ErrorT).name());
    for (const std::string &needle : needles) {
      INFO("expected substring: " << needle);
      CHECK(message.find(needle) != std::string::npos);
    }
  }
  INFO("expected a " << typeid(ErrorT).name());
  CHECK(threw);
  return message;
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_ERROR_ERRORTESTSUPPORT_H
