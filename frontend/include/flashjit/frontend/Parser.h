//===- Parser.h - Reading expressions and specs from text --------*- C++
//-*-===//
//
// Parses the canonical text (Printer.h) and the friendlier text a user types
// on the command line: C precedence, optional parentheses, untyped literals
// (`30` is i32, `30.0` f32, promoted as in the C++ DSL). The same type rules
// as the C++ operators apply, so `q_idx + true` is rejected here too.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_PARSER_H
#define FLASHJIT_FRONTEND_PARSER_H

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Variant.h"

#include <string_view>

namespace flashjit {

/// Parses one expression. Throws ParseError (with the column) for a syntax
/// error or an unknown identifier, and UserError for a type error.
Expr parseExpr(std::string_view text);

/// Parses a spec in the form printSpec() writes. Fields may come in any order
/// and may be left out (defaults as in AttentionSpec); an unknown or repeated
/// field is a ParseError. The result is validated (UserError).
AttentionSpec parseSpec(std::string_view text);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_PARSER_H
