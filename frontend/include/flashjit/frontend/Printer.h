//===- Printer.h - Canonical text of expressions and specs -------*- C++
//-*-===//
//
// One text form per tree: binary operators fully parenthesised, functions
// spelled as in the DSL, literals typed (`5` i32, `5L` i64, `5.0` f32,
// `true`), parameters `param<f32>(cap)`, buffers `buffer<i32>(doc_id)[q_idx]`.
// parseExpr(printExpr(e)) is structurally equal to e for every tree, so the
// text is the cache key and what the CLI accepts.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_PRINTER_H
#define FLASHJIT_FRONTEND_PRINTER_H

#include "flashjit/frontend/Expr.h"
#include "flashjit/frontend/Variant.h"

#include <string>

namespace flashjit {

/// Canonical text of an expression, e.g. `((q_idx >= kv_idx) && ...)`.
std::string printExpr(const Expr &e);

/// Canonical text of a spec: `attention(name=..., mask=..., score=...,
/// head_dim_qk=128, head_dim_v=128, dtype_q=bf16, dtype_k=bf16,
/// dtype_v=bf16, dtype_o=bf16, heads_q=1, heads_kv=1, causal=none,
/// scale=default, lse=true)`, every field in this order, then `, sink=true`
/// for a spec with an attention sink (omitted otherwise, so specs without
/// one keep their text and cache keys).
std::string printSpec(const AttentionSpec &spec);

/// Shortest decimal text that reads back as exactly \p value, always with a
/// '.', an exponent, or spelled inf / -inf / nan, so it reads back as f32.
std::string printFloat(float value);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_PRINTER_H
