//===- Interpreter.h - Evaluating an expression at one point -----*- C++
//-*-===//
//
// A direct evaluator of the expression tree, used by the float64 reference
// and as the oracle of property tests (compiled mask == interpreter at every
// (q_idx, kv_idx)). Integers follow the DSL rules exactly (wrapping i32/i64,
// division by zero gives 0); f32 arithmetic is evaluated in double (the
// oracle is more precise than any f32 kernel, so float results agree to
// float tolerance, not bit for bit), while integer -> f32 casts round to
// float exactly as kernels do.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_INTERPRETER_H
#define FLASHJIT_FRONTEND_INTERPRETER_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Expr.h"

namespace flashjit {

/// The value of an expression: bool and integers in intValue, f32 in
/// floatValue (held in double).
struct Value {
  ScalarType type = ScalarType::Int32;
  int64_t intValue = 0;
  double floatValue = 0.0;
  bool asBool() const { return intValue != 0; }
};

/// The point at which an expression is evaluated.
struct EvalPoint {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t qIdx = 0;
  int64_t kvIdx = 0;
  int64_t seqlenQ = 0;
  int64_t seqlenK = 0;
  double score = 0.0;
};

/// Evaluates \p e at \p point. Throws UserError for a parameter or buffer
/// missing from \p args, or a buffer index out of [0, size).
Value evaluate(const Expr &e, const EvalPoint &point, const Arguments &args);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_INTERPRETER_H
