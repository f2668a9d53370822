//===- Parser.h - Reading expressions and specs from text --------*- C++
//-*-===//
//
// Parses the canonical text (Printer.h) and the friendlier text a user types
// on the command line: C precedence, optional parentheses, untyped literals
// (`30` is i32, `30.0` f32, promoted as in the C++ DSL). The same type rules
// as the C++ operators apply, so `q_idx + true` is rejected here too.
// The helpers of Library.h are accepted as sugar (`causal(top_left)`,
// `softcap(30.0)`, `sliding_window(128, 0, bottom_right)`, ...): each expands
// to the tree the C++ helper builds, so the printed text and the hash are the
// same whichever way the variant was written.
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
/// error, an unknown identifier, or a library helper called with the wrong
/// number or kind of arguments (the column of the argument at fault), and
/// UserError for a type error.
Expr parseExpr(std::string_view text);

/// Parses a spec in the form printSpec() writes. Fields may come in any order
/// and may be left out (defaults as in AttentionSpec); an unknown or repeated
/// field is a ParseError. The result is validated (UserError).
AttentionSpec parseSpec(std::string_view text);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_PARSER_H
