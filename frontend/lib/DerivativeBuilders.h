//===- DerivativeBuilders.h - Simplifying f32 node constructors -*- C++ -*-===//
//
// Private to frontend/lib: the simplifying constructors of Derivative.cpp
// (literals folded in f32, operators pushed into selects of literals) that
// DerivativeInOutput.cpp builds its output-path values with, so both write
// the same trees.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_LIB_DERIVATIVEBUILDERS_H
#define FLASHJIT_FRONTEND_LIB_DERIVATIVEBUILDERS_H

#include "flashjit/frontend/Expr.h"

#include <optional>
#include <source_location>

namespace flashjit::derivative_detail {

using Loc = std::source_location;

/// The value of an f32 literal, else nullopt.
std::optional<float> literal(const Expr &e);
/// -a, folded.
Expr neg(const Expr &a, Loc loc);
/// a + b, folded.
Expr add(const Expr &a, const Expr &b, Loc loc);
/// a - b, folded.
Expr sub(const Expr &a, const Expr &b, Loc loc);
/// a * b, folded.
Expr mul(const Expr &a, const Expr &b, Loc loc);
/// a / b, folded.
Expr div(const Expr &a, const Expr &b, Loc loc);

} // namespace flashjit::derivative_detail

#endif // FLASHJIT_FRONTEND_LIB_DERIVATIVEBUILDERS_H
