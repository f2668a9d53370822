//===- Derivative.h - Symbolic derivative of a score modifier ----*- C++
//-*-===//
//
// The backward pass (FlashAttention-2 paper, Algorithm 2, line 14:
// dS = P * (dP - D)) needs the derivative of the score modifier
// s' = score_mod(s, batch, head, q_idx, kv_idx): with dS' the gradient of
// the modified score,
//
//   dS           = dS' * d s'/d score
//   dBuffer[idx] += dS' * d s'/d buffer[idx]   (each f32 buffer read)
//   dParam       += dS' * d s'/d param         (each f32 parameter asked for)
//
// summed over every allowed (q_idx, kv_idx) of every (batch, head). This file
// derives those derivatives symbolically from the expression tree, as new
// expression trees over the same leaves (score, indices, parameters,
// buffers), printable in the canonical text so a user can read what the
// backward kernel computes.
//
// Rules (forward-mode, one variable at a time; a and b are operands, e is
// the node itself, da and db their derivatives):
//   a + b, a - b       da + db, da - db
//   a * b              da * b + a * db
//   a / b              (da - e * db) / b
//   -a                 -da
//   exp(a), exp2(a)    e * da, e * ln 2 * da
//   log(a)             da / a
//   tanh(a)            (1 - e * e) * da          (softcap's 1 - tanh^2)
//   sigmoid(a)         e * (1 - e) * da
//   sqrt(a)            select(a == 0, 0, da / (2 * e))
//   abs(a)             select(a > 0, da, select(a < 0, -da, 0))
//   min(a, b)          select(b < a, db, da)     (a tie picks a)
//   max(a, b)          select(b > a, db, da)     (a tie picks a)
//   select(c, a, b)    select(c, da, db)         (the condition is not
//                                                 differentiated)
//   cast<f32>(x)       0 for an integer or bool x (piecewise constant)
//   score, leaf        1 for the variable itself, 0 for every other leaf
// A subtree that does not read the variable has a *symbolic zero*
// derivative, which drops the whole term it would multiply (as JAX's
// symbolic zeros do): the term is exactly zero even where its other factor
// is inf or NaN, because that factor multiplies a constant.
//
// Conventions where the derivative is undefined (documented in README.md):
//   abs'(0) = 0 (PyTorch's sign(0) = 0); sqrt'(0) = 0 (the one-sided limit
//   is +inf, which would turn dQ and dK into NaN through inf * 0; 0 keeps
//   every gradient finite); min/max ties take the first operand's
//   derivative; a select takes its chosen branch's derivative, also at the
//   point where the condition flips; cast<f32>(bool) and cast<f32>(int) have
//   derivative 0.
//
// Not differentiable (UserError at the user's line, never a wrong
// gradient): a cast to i32 or i64 of a value that depends on a variable
// being differentiated (score, any f32 buffer, any f32 parameter asked for),
// in the value, in a select condition or in a buffer index: it makes the
// modifier a step function of that variable (floor, integer arithmetic on
// the score). Compare and select instead where a step is wanted.
//
// Simplification (applied as nodes are built; exact in IEEE f32 unless
// noted):
//  - constant folding of f32 operators on literals where the f32 result
//    is exact (2 * 3 -> 6, but 1 / 30 stays), so a kernel computing in f32
//    and the interpreter computing in double agree on every literal;
//  - x * 1 -> x, 1 * x -> x, x / 1 -> x, x - 0 -> x, x + 0 -> x (only the
//    sign of a zero result can differ), -(-x) -> x, x * -1 -> -x,
//    x * (1 / y) -> x / y (the same special values, one rounding fewer);
//  - x * 0 is never folded for a non-literal x (inf * 0 is NaN); only
//    symbolic zeros (above) vanish;
//  - select(c, x, x) -> x, select(true/false, a, b) -> a/b, and an operator
//    applied to a select of literals is pushed into both branches and folded
//    (select(c, 1, -1) * 2 -> select(c, 2, -2));
//  - shared subexpressions are reused: the derivative refers to the forward
//    nodes (exp's e, tanh's e) themselves, and a subtree shared in the
//    modifier is differentiated once (nodes are reference-counted).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_DERIVATIVE_H
#define FLASHJIT_FRONTEND_DERIVATIVE_H

#include "flashjit/frontend/Expr.h"

#include <optional>
#include <string>
#include <vector>

namespace flashjit {

/// What an expression is differentiated with respect to: the score, one f32
/// parameter, or one read of an f32 buffer (a BufferLoadExpr; every read
/// structurally equal to it is the same variable, reads at other index
/// expressions are other variables).
struct DiffVar {
  enum class Kind : uint8_t { Score, Param, BufferRead };
  Kind kind = Kind::Score;
  /// The parameter's name (Kind::Param).
  std::string param;
  /// The buffer read (Kind::BufferRead): an f32 BufferLoadExpr.
  Expr bufferRead;

  /// d/d score.
  static DiffVar score() { return {}; }
  /// d/d param<f32>(name).
  static DiffVar paramNamed(std::string name) {
    return {Kind::Param, std::move(name), Expr()};
  }
  /// d/d buffer[index] for the read \p load (an f32 BufferLoadExpr).
  static DiffVar read(Expr load) { return {Kind::BufferRead, {}, load}; }
};

/// The derivative of the f32 expression \p e with respect to \p var, as a new
/// simplified f32 expression (the literal 0.0 where \p e does not depend on
/// \p var). Rules, conventions and simplifications are in this file's
/// header. Throws UserError at the offending node's source location when
/// \p e casts a value depending on \p var to an integer; UserError when
/// \p e is not f32, or \p var names a buffer read that is not an f32
/// BufferLoadExpr.
Expr differentiate(const Expr &e, const DiffVar &var);

/// d s'/d buffer[index] for one read of an f32 buffer: the backward
/// accumulates dBuffer[index] += dS' * derivative at every allowed
/// (batch, head, q_idx, kv_idx).
struct BufferDerivative {
  /// The buffer's name.
  std::string buffer;
  /// The i32/i64 index expression of the read (from the modifier itself).
  Expr index;
  /// d s'/d buffer[index] (f32), never identically zero.
  Expr derivative;
};

/// d s'/d param for one f32 runtime parameter: the backward accumulates
/// dParam += dS' * derivative over every allowed element.
struct ParamDerivative {
  /// The parameter's name.
  std::string param;
  /// d s'/d param (f32); the literal 0.0 if the modifier does not depend on
  /// it.
  Expr derivative;
};

/// Every derivative of a score modifier the backward pass needs.
struct ScoreModDerivative {
  /// d s'/d score (f32).
  Expr score;
  /// One term per distinct read of an f32 buffer whose derivative is not
  /// identically zero, in the order the reads first appear (depth-first,
  /// operands left to right).
  std::vector<BufferDerivative> buffers;
  /// One term per parameter asked for, in the order asked.
  std::vector<ParamDerivative> params;
};

/// Differentiates the score modifier \p scoreMod (f32, as
/// Variant::scoreExpr()) with respect to the score, every read of every f32
/// buffer it reads, and the f32 parameters named in \p params. Throws
/// UserError at the user's line for a modifier that is not differentiable
/// (see this file's header), and UserError naming the parameter when one in
/// \p params is not an f32 parameter the modifier reads.
ScoreModDerivative
differentiateScoreMod(const Expr &scoreMod,
                      const std::vector<std::string> &params = {});

/// \p d (differentiateScoreMod(\p scoreMod, ...)) written in the modifier's
/// output s' instead of its input: in the result the leaf `score` stands for
/// s' = scoreMod(score, ...). The GPU backward recovers s' from P and the
/// row's LSE after the dP product (s' * log2 e = log2 P + LSE * log2 e), so
/// the raw score need not stay live there.
///
/// The rewrite walks down from the modifier's root while the node's value
/// is an invertible function of its parent's: x + a, a + x, x - a, a - x
/// and -x (any a not reading the score), x * c, c * x and x / c (c a
/// nonzero finite f32 literal); each such node's value becomes an
/// expression of s' (softcap c * tanh(score / c): tanh(score / c) = s' / c).
/// Every occurrence of one of those nodes in a derivative (structurally) is
/// replaced by it; where a derivative still reads `score` outside them
/// (d s'/d cap of a parameter cap, exp(score * score)'s derivative) the
/// rewrite does not apply and the result is nullopt. Derivatives not reading
/// the score come back unchanged. Rounding: s' / c and s' - a round once
/// more than the forward node (an a much larger than the node loses its low
/// bits).
///   tanh     1 - e * e        -> 1 - (s' / c)^2   (softcap)
///   exp      e                -> s'               (exp(score))
///   sigmoid  e * (1 - e)      -> s' * (1 - s')
std::optional<ScoreModDerivative>
derivativeInOutput(const ScoreModDerivative &d, const Expr &scoreMod);

/// The f32 parameters \p scoreMod reads (those differentiateScoreMod accepts
/// in its \p params), sorted by name.
std::vector<std::string> differentiableParams(const Expr &scoreMod);

/// Canonical text of every derivative, one per line:
///   d score'/d score = <expr>
///   d score'/d buffer<f32>(slope)[head] = <expr>
///   d score'/d param<f32>(cap) = <expr>
/// with each <expr> in printExpr's form (so parseExpr reads it back).
std::string printDerivative(const ScoreModDerivative &d);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_DERIVATIVE_H
