//===- DerivativeInOutput.cpp - Derivatives in the modifier's output ----===//
//-===//
//
// derivativeInOutput (Derivative.h): the modifier's output path, from its
// root down through the steps that can be inverted (a term or a nonzero
// finite literal factor that does not read the score, negation), gives each
// node on it as an expression of the output s'; a derivative whose every
// read of the score goes through such a node is rewritten in s'.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Derivative.h"

#include "DerivativeBuilders.h"

#include <llvm/Support/Casting.h>

#include <cmath>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flashjit {
namespace {

using namespace derivative_detail;

/// The nodes of \p mod's output path (Derivative.h: derivativeInOutput),
/// each with its value as an expression of the output (the `score` leaf).
std::vector<std::pair<Expr, Expr>> outputPath(const Expr &mod) {
  std::vector<std::pair<Expr, Expr>> path;
  Expr node = mod, value = score;
  auto nonzeroLiteral = [](const Expr &e) {
    std::optional<float> x = literal(e);
    return x && *x != 0.0f && std::isfinite(*x);
  };
  while (true) {
    path.push_back({node, value});
    Loc loc = node->loc();
    if (auto *u = llvm::dyn_cast<UnaryExpr>(node.get());
        u && u->op() == UnaryOp::Neg) {
      node = u->operand(), value = neg(value, loc);
      continue;
    }
    auto *b = llvm::dyn_cast<BinaryExpr>(node.get());
    if (!b || readsScore(b->lhs()) == readsScore(b->rhs()))
      break;
    bool left = readsScore(b->lhs());
    const Expr &x = left ? b->lhs() : b->rhs();
    const Expr &a = left ? b->rhs() : b->lhs();
    if (b->op() == BinaryOp::Add)
      value = sub(value, a, loc);
    else if (b->op() == BinaryOp::Sub)
      value = left ? add(value, a, loc) : sub(a, value, loc);
    else if (b->op() == BinaryOp::Mul && nonzeroLiteral(a))
      value = div(value, a, loc);
    else if (b->op() == BinaryOp::Div && left && nonzeroLiteral(a))
      value = mul(value, a, loc);
    else
      break;
    node = x;
  }
  return path;
}

/// \p e with every node of \p path replaced by its value; null if \p e
/// reads the score elsewhere.
Expr replacePath(const Expr &e, const std::vector<std::pair<Expr, Expr>> &path,
                 std::unordered_map<const ExprNode *, Expr> &memo) {
  if (!readsScore(e))
    return e;
  if (auto it = memo.find(e.get()); it != memo.end())
    return it->second;
  Expr out;
  for (const auto &[node, value] : path)
    if (out.isNull() && structurallyEqual(node, e))
      out = value;
  if (out.isNull() && !llvm::isa<ScoreExpr>(e.get())) {
    std::vector<Expr> ops;
    for (const Expr &op : e->operands()) {
      ops.push_back(replacePath(op, path, memo));
      if (ops.back().isNull())
        return memo[e.get()] = Expr();
    }
    Loc loc = e->loc();
    if (auto *u = llvm::dyn_cast<UnaryExpr>(e.get()))
      out = makeUnary(u->op(), ops[0], loc);
    else if (auto *b = llvm::dyn_cast<BinaryExpr>(e.get()))
      out = makeBinary(b->op(), ops[0], ops[1], loc);
    else if (llvm::isa<SelectExpr>(e.get()))
      out = select(ExprArg(ops[0], loc), ExprArg(ops[1], loc),
                   ExprArg(ops[2], loc));
    else if (auto *c = llvm::dyn_cast<CastExpr>(e.get()))
      out = cast(c->type(), ExprArg(ops[0], loc));
    // A buffer index never reads the score (checkDifferentiable).
  }
  return memo[e.get()] = out;
}

} // namespace

std::optional<ScoreModDerivative>
derivativeInOutput(const ScoreModDerivative &d, const Expr &scoreMod) {
  std::vector<std::pair<Expr, Expr>> path = outputPath(scoreMod);
  std::unordered_map<const ExprNode *, Expr> memo;
  ScoreModDerivative out = d;
  auto rewrite = [&](Expr &e) {
    e = replacePath(e, path, memo);
    return !e.isNull();
  };
  if (!rewrite(out.score))
    return std::nullopt;
  for (BufferDerivative &b : out.buffers)
    if (!rewrite(b.derivative))
      return std::nullopt;
  for (ParamDerivative &p : out.params)
    if (!rewrite(p.derivative))
      return std::nullopt;
  return out;
}

} // namespace flashjit
