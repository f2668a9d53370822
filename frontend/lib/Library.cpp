//===- Library.cpp - Standard masks and score modifiers -------------------===//
#include "flashjit/frontend/Library.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

namespace flashjit {

using Loc = std::source_location;

/// Throws if \p e is not an integer, or an integer literal below \p minimum.
static void checkConstantAtLeast(const ExprArg &e, int64_t minimum,
                                 const char *what, Loc loc) {
  if (!isInteger(e.expr().type()))
    throw UserError(fmt::format("{} must be an integer, got {}", what,
                                toString(e.expr().type())),
                    loc);
  if (auto *c = llvm::dyn_cast<ConstantExpr>(e.expr().get()))
    if (c->intValue() < minimum)
      throw UserError(
          fmt::format("{} = {} must be >= {}", what, c->intValue(), minimum),
          loc);
}

static bool isConstant(const ExprArg &e, int64_t value) {
  auto *c = llvm::dyn_cast<ConstantExpr>(e.expr().get());
  return c && isInteger(c->type()) && c->intValue() == value;
}

/// An operand carrying the user's location, so the nodes built from it do.
static ExprArg at(const Expr &e, Loc loc) { return ExprArg(e, loc); }

Expr aligned_q_idx(Alignment alignment, Loc loc) {
  if (alignment == Alignment::TopLeft)
    return q_idx;
  return at(q_idx, loc) + (at(seqlen_k, loc) - seqlen_q);
}

Expr causal(Alignment alignment, Loc loc) {
  return at(kv_idx, loc) <= aligned_q_idx(alignment, loc);
}

Expr sliding_window(ExprArg left, ExprArg right, Alignment alignment,
                    bool include_current, Loc loc) {
  checkConstantAtLeast(left, 0, "sliding_window left", loc);
  checkConstantAtLeast(right, 0, "sliding_window right", loc);
  Expr q = aligned_q_idx(alignment, loc);
  Expr k = kv_idx;
  if (include_current) {
    Expr upper = isConstant(right, 0) ? (at(k, loc) <= q)
                                      : (at(k, loc) <= at(q, loc) + right);
    return at(at(k, loc) >= at(q, loc) - left, loc) && upper;
  }
  // Keys left of the current one, or right of it: two bands rather than
  // `window && kv_idx != q`, and no band for a bound that is the constant 0,
  // so interval classification stays exact.
  Expr leftBand = at(at(k, loc) >= at(q, loc) - left, loc) &&
                  (at(k, loc) <= at(q, loc) - 1);
  Expr rightBand = at(at(k, loc) >= at(q, loc) + 1, loc) &&
                   (at(k, loc) <= at(q, loc) + right);
  if (isConstant(left, 0) && isConstant(right, 0))
    return constant(ScalarType::Bool, 0, 0.0f, loc);
  if (isConstant(left, 0))
    return rightBand;
  if (isConstant(right, 0))
    return leftBand;
  return at(leftBand, loc) || rightBand;
}

Expr prefix_lm(ExprArg prefix_len, Alignment alignment, Loc loc) {
  checkConstantAtLeast(prefix_len, 0, "prefix_lm prefix_len", loc);
  return at(at(kv_idx, loc) < prefix_len, loc) || causal(alignment, loc);
}

Expr chunked(ExprArg chunk_size, Loc loc) {
  checkConstantAtLeast(chunk_size, 1, "chunked chunk_size", loc);
  return at(at(q_idx, loc) / chunk_size, loc) ==
         at(at(kv_idx, loc) / chunk_size, loc);
}

Expr softcap(ExprArg cap, Loc loc) {
  return at(cap.expr(), loc) * tanh(at(at(score, loc) / cap, loc));
}

Expr alibi(const Buffer &slopes, Loc loc) {
  if (slopes.elementType() != ScalarType::Float32)
    throw UserError(fmt::format("alibi slopes buffer '{}' must be f32, got {}",
                                slopes.name(), toString(slopes.elementType())),
                    loc);
  return at(score, loc) -
         at(slopes[at(head, loc)], loc) * abs(at(at(q_idx, loc) - kv_idx, loc));
}

Expr relative_bias(const Buffer &table, int max_distance, Loc loc) {
  if (table.elementType() != ScalarType::Float32)
    throw UserError(fmt::format("relative_bias table '{}' must be f32, got {}",
                                table.name(), toString(table.elementType())),
                    loc);
  if (max_distance < 0)
    throw UserError(fmt::format("relative_bias max_distance = {} must be >= 0",
                                max_distance),
                    loc);
  Expr d = min(at(max(at(at(kv_idx, loc) - q_idx, loc), -max_distance), loc),
               max_distance);
  return at(score, loc) + table[at(at(d, loc) + max_distance, loc)];
}

} // namespace flashjit
