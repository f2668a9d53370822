//===- Library.cpp - Standard masks and score modifiers -------------------===//
#include "flashjit/frontend/Library.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

namespace flashjit {

/// Throws if \p e is an integer literal below \p minimum.
static void checkConstantAtLeast(const ExprArg &e, int64_t minimum,
                                 const char *what) {
  if (!isInteger(e.expr().type()))
    throw UserError(fmt::format("{} must be an integer, got {}", what,
                                toString(e.expr().type())),
                    e.loc());
  if (auto *c = llvm::dyn_cast<ConstantExpr>(e.expr().get()))
    if (c->intValue() < minimum)
      throw UserError(
          fmt::format("{} = {} must be >= {}", what, c->intValue(), minimum),
          e.loc());
}

Expr aligned_q_idx(Alignment alignment) {
  if (alignment == Alignment::TopLeft)
    return q_idx;
  return q_idx + (seqlen_k - seqlen_q);
}

Expr causal(Alignment alignment) { return kv_idx <= aligned_q_idx(alignment); }

Expr sliding_window(ExprArg left, ExprArg right, Alignment alignment,
                    bool include_current) {
  checkConstantAtLeast(left, 0, "sliding_window left");
  checkConstantAtLeast(right, 0, "sliding_window right");
  Expr q = aligned_q_idx(alignment);
  auto *r = llvm::dyn_cast<ConstantExpr>(right.expr().get());
  Expr upper =
      r && r->intValue() == 0 ? (kv_idx <= q) : (kv_idx <= q + right.expr());
  if (include_current)
    return kv_idx >= q - left.expr() && upper;
  // Keys left of the current one, or right of it: two bands rather than
  // `window && kv_idx != q`, and no band for a bound that is the constant 0,
  // so interval classification stays exact.
  auto isZero = [](const ExprArg &e) {
    auto *c = llvm::dyn_cast<ConstantExpr>(e.expr().get());
    return c && c->intValue() == 0;
  };
  Expr leftBand = kv_idx >= q - left.expr() && kv_idx <= q - 1;
  Expr rightBand = kv_idx >= q + 1 && kv_idx <= q + right.expr();
  if (isZero(left) && isZero(right))
    return constant(ScalarType::Bool, 0, 0.0f);
  if (isZero(left))
    return rightBand;
  if (isZero(right))
    return leftBand;
  return leftBand || rightBand;
}

Expr prefix_lm(ExprArg prefix_len, Alignment alignment) {
  checkConstantAtLeast(prefix_len, 0, "prefix_lm prefix_len");
  return kv_idx < prefix_len.expr() || causal(alignment);
}

Expr chunked(ExprArg chunk_size) {
  checkConstantAtLeast(chunk_size, 1, "chunked chunk_size");
  return q_idx / chunk_size.expr() == kv_idx / chunk_size.expr();
}

Expr softcap(ExprArg cap) { return cap.expr() * tanh(score / cap.expr()); }

Expr alibi(const Buffer &slopes) {
  if (slopes.elementType() != ScalarType::Float32)
    throw UserError(fmt::format("alibi slopes buffer '{}' must be f32, got {}",
                                slopes.name(), toString(slopes.elementType())));
  return score - slopes[head] * abs(q_idx - kv_idx);
}

Expr relative_bias(const Buffer &table, int max_distance) {
  if (table.elementType() != ScalarType::Float32)
    throw UserError(fmt::format("relative_bias table '{}' must be f32, got {}",
                                table.name(), toString(table.elementType())));
  if (max_distance < 0)
    throw UserError(fmt::format("relative_bias max_distance = {} must be >= 0",
                                max_distance));
  Expr d = min(max(kv_idx - q_idx, -max_distance), max_distance);
  return score + table[d + max_distance];
}

} // namespace flashjit
