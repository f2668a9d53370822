//===- Derivative.cpp - Symbolic derivative of a score modifier -----------===//
//
// Forward-mode differentiation of one variable at a time over the immutable
// expression tree. A null Expr stands for a symbolic zero (the subtree does
// not read the variable); every other derivative node is built through the
// small simplifying constructors below, which fold literals in f32 and push
// operators into selects of literals. Derivatives are memoised per node, so
// a subtree shared in the modifier is differentiated once and its derivative
// shared too. The rules and conventions are listed in Derivative.h.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Derivative.h"

#include "DerivativeBuilders.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <optional>
#include <unordered_map>

namespace flashjit::derivative_detail {

//===----------------------------------------------------------------------===//
// Simplifying constructors of f32 derivative nodes (DerivativeBuilders.h
// declares those the output-path rewrite uses too)
//===----------------------------------------------------------------------===//

Expr lit(float v, Loc loc) { return constant(ScalarType::Float32, 0, v, loc); }

/// The value of an f32 literal.
std::optional<float> literal(const Expr &e) {
  if (auto *c = llvm::dyn_cast<ConstantExpr>(e.get()))
    if (c->type() == ScalarType::Float32)
      return c->floatValue();
  return std::nullopt;
}

bool isLiteral(const Expr &e, float v) {
  std::optional<float> x = literal(e);
  return x && *x == v;
}

/// True for an f32 literal or a select (of selects...) of f32 literals.
bool isLiteralTree(const Expr &e) {
  if (literal(e))
    return true;
  auto *s = llvm::dyn_cast<SelectExpr>(e.get());
  return s && isLiteralTree(s->trueValue()) && isLiteralTree(s->falseValue());
}

Expr sel(const Expr &c, const Expr &a, const Expr &b, Loc loc);

/// \p e (a literal tree) with \p f applied to every literal: an operator
/// pushed through selects into their branches. Null if \p f gives nullopt
/// (an inexact fold) for some literal.
Expr mapLiterals(const Expr &e,
                 const std::function<std::optional<float>(float)> &f, Loc loc) {
  if (std::optional<float> x = literal(e)) {
    std::optional<float> y = f(*x);
    return y ? lit(*y, loc) : Expr();
  }
  auto *s = llvm::cast<SelectExpr>(e.get());
  Expr a = mapLiterals(s->trueValue(), f, loc);
  Expr b = a.isNull() ? Expr() : mapLiterals(s->falseValue(), f, loc);
  return b.isNull() ? Expr() : sel(s->condition(), a, b, loc);
}

/// x op y in f32 where that is the exact result (checked against double,
/// in which + - * of two floats are exact and / is correctly rounded): a
/// folded literal then has one value in a kernel, which computes in f32,
/// and in the interpreter, which computes in double (1 / 30 stays a
/// division). A NaN result is kept when double gives NaN too.
std::optional<float> foldExact(BinaryOp op, float x, float y) {
  float r;
  double e;
  switch (op) {
  case BinaryOp::Add:
    r = x + y, e = double(x) + double(y);
    break;
  case BinaryOp::Sub:
    r = x - y, e = double(x) - double(y);
    break;
  case BinaryOp::Mul:
    r = x * y, e = double(x) * double(y);
    break;
  case BinaryOp::Div:
    r = x / y, e = double(x) / double(y);
    break;
  default:
    throw InternalError("foldExact: not an arithmetic op");
  }
  if (double(r) == e || (std::isnan(r) && std::isnan(e)))
    return r;
  return std::nullopt;
}

/// a op b for + - * /, with exact literal folding and pushing into selects
/// of literals; the identities of Derivative.h's header are applied by the
/// callers.
Expr arith(BinaryOp op, const Expr &a, const Expr &b, Loc loc) {
  std::optional<float> x = literal(a), y = literal(b);
  if (x && y)
    if (std::optional<float> r = foldExact(op, *x, *y))
      return lit(*r, loc);
  Expr pushed;
  if (y && !x && isLiteralTree(a))
    pushed = mapLiterals(
        a, [&](float v) { return foldExact(op, v, *y); }, loc);
  else if (x && !y && isLiteralTree(b))
    pushed = mapLiterals(
        b, [&](float v) { return foldExact(op, *x, v); }, loc);
  if (!pushed.isNull())
    return pushed;
  return makeBinary(op, a, b, loc);
}

Expr neg(const Expr &a, Loc loc) {
  if (std::optional<float> x = literal(a))
    return lit(-*x, loc);
  if (isLiteralTree(a))
    return mapLiterals(
        a, [](float v) { return std::optional<float>(-v); }, loc);
  if (auto *u = llvm::dyn_cast<UnaryExpr>(a.get()))
    if (u->op() == UnaryOp::Neg)
      return u->operand();
  return makeUnary(UnaryOp::Neg, a, loc);
}

Expr add(const Expr &a, const Expr &b, Loc loc) {
  if (isLiteral(a, 0.0f))
    return b;
  if (isLiteral(b, 0.0f))
    return a;
  return arith(BinaryOp::Add, a, b, loc);
}

Expr sub(const Expr &a, const Expr &b, Loc loc) {
  if (isLiteral(b, 0.0f))
    return a;
  if (isLiteral(a, 0.0f) && !literal(b))
    return neg(b, loc);
  return arith(BinaryOp::Sub, a, b, loc);
}

Expr div(const Expr &a, const Expr &b, Loc loc);

Expr mul(const Expr &a, const Expr &b, Loc loc) {
  if (isLiteral(a, 1.0f))
    return b;
  if (isLiteral(b, 1.0f))
    return a;
  if (isLiteral(a, -1.0f))
    return neg(b, loc);
  if (isLiteral(b, -1.0f))
    return neg(a, loc);
  // x * (1 / y) -> x / y: the same special values, one rounding fewer.
  if (auto *q = llvm::dyn_cast<BinaryExpr>(b.get());
      q && q->op() == BinaryOp::Div && isLiteral(q->lhs(), 1.0f))
    return div(a, q->rhs(), loc);
  return arith(BinaryOp::Mul, a, b, loc);
}

Expr div(const Expr &a, const Expr &b, Loc loc) {
  if (isLiteral(b, 1.0f))
    return a;
  return arith(BinaryOp::Div, a, b, loc);
}

Expr sel(const Expr &c, const Expr &a, const Expr &b, Loc loc) {
  if (auto *k = llvm::dyn_cast<ConstantExpr>(c.get()))
    return k->boolValue() ? a : b;
  if (structurallyEqual(a, b))
    return a;
  return select(ExprArg(c, loc), ExprArg(a, loc), ExprArg(b, loc));
}

Expr cmp(BinaryOp op, const Expr &a, const Expr &b, Loc loc) {
  return makeBinary(op, a, b, loc);
}

//===----------------------------------------------------------------------===//
// Symbolic zeros: a null Expr
//===----------------------------------------------------------------------===//

Expr zAdd(const Expr &a, const Expr &b, Loc loc) {
  if (a.isNull())
    return b;
  if (b.isNull())
    return a;
  return add(a, b, loc);
}

Expr zSub(const Expr &a, const Expr &b, Loc loc) {
  if (b.isNull())
    return a;
  if (a.isNull())
    return neg(b, loc);
  return sub(a, b, loc);
}

/// \p d (a derivative, maybe a symbolic zero) times the forward value \p f.
Expr zMul(const Expr &d, const Expr &f, Loc loc) {
  return d.isNull() ? Expr() : mul(d, f, loc);
}

Expr zSel(const Expr &c, const Expr &a, const Expr &b, Loc loc) {
  if (a.isNull() && b.isNull())
    return Expr();
  return sel(c, a.isNull() ? lit(0.0f, loc) : a,
             b.isNull() ? lit(0.0f, loc) : b, loc);
}

} // namespace flashjit::derivative_detail

namespace flashjit {
namespace {

using namespace derivative_detail;

//===----------------------------------------------------------------------===//
// Which nodes a variable reaches
//===----------------------------------------------------------------------===//

std::string describe(const DiffVar &var) {
  switch (var.kind) {
  case DiffVar::Kind::Score:
    return "score";
  case DiffVar::Kind::Param:
    return fmt::format("parameter '{}'", var.param);
  case DiffVar::Kind::BufferRead:
    return fmt::format(
        "buffer '{}'",
        llvm::cast<BufferLoadExpr>(var.bufferRead.get())->name());
  }
  throw InternalError("unknown DiffVar kind");
}

/// True if \p n is a leaf standing for \p var (a buffer of the same name
/// counts for the cast check, which is conservative per buffer).
bool isVarLeaf(const ExprNode *n, const DiffVar &var, bool anyReadOfBuffer) {
  switch (var.kind) {
  case DiffVar::Kind::Score:
    return llvm::isa<ScoreExpr>(n);
  case DiffVar::Kind::Param: {
    auto *p = llvm::dyn_cast<ParamExpr>(n);
    return p && p->type() == ScalarType::Float32 && p->name() == var.param;
  }
  case DiffVar::Kind::BufferRead: {
    auto *l = llvm::dyn_cast<BufferLoadExpr>(n);
    auto *v = llvm::cast<BufferLoadExpr>(var.bufferRead.get());
    if (!l || l->type() != ScalarType::Float32 || l->name() != v->name())
      return false;
    return anyReadOfBuffer || structurallyEqual(l->index(), v->index());
  }
  }
  return false;
}

/// Throws UserError at the first cast to an integer of a value that depends
/// on \p var: such a modifier is a step function of the variable.
void checkDifferentiable(const Expr &root, const DiffVar &var) {
  std::unordered_map<const ExprNode *, bool> memo;
  std::function<bool(const Expr &)> depends = [&](const Expr &e) -> bool {
    auto it = memo.find(e.get());
    if (it != memo.end())
      return it->second;
    bool d = isVarLeaf(e.get(), var, true);
    for (const Expr &op : e->operands())
      d = depends(op) || d; // visit every operand: the check covers them all
    if (d && llvm::isa<CastExpr>(e.get()) && isInteger(e.type()) &&
        llvm::cast<CastExpr>(e.get())->operand().type() == ScalarType::Float32)
      throw UserError(
          fmt::format("the score modifier is not differentiable: it casts a "
                      "value that depends on {} to {} (a step function, whose "
                      "derivative is zero or undefined); compare and select "
                      "instead",
                      describe(var), toString(e.type())),
          e->loc());
    memo[e.get()] = d;
    return d;
  };
  depends(root);
}

//===----------------------------------------------------------------------===//
// The rules
//===----------------------------------------------------------------------===//

class Differentiator {
public:
  explicit Differentiator(const DiffVar &var) : var_(var) {}

  /// d e / d var, or null for a symbolic zero.
  Expr d(const Expr &e) {
    auto it = memo_.find(e.get());
    if (it != memo_.end())
      return it->second;
    Expr r = rule(e);
    memo_.emplace(e.get(), r);
    return r;
  }

private:
  Expr rule(const Expr &e) {
    const ExprNode *n = e.get();
    const Loc loc = n->loc();
    // Integers and bools are piecewise constant in every f32 variable (a
    // dependence through a cast was refused by checkDifferentiable).
    if (n->type() != ScalarType::Float32)
      return Expr();
    if (isVarLeaf(n, var_, false))
      return lit(1.0f, loc);
    switch (n->kind()) {
    case ExprKind::Constant:
    case ExprKind::Index:
    case ExprKind::Score:
    case ExprKind::Param:
    case ExprKind::BufferLoad:
    case ExprKind::Cast: // from an integer or bool: piecewise constant
      return Expr();
    case ExprKind::Unary:
      return unary(e, llvm::cast<UnaryExpr>(n), loc);
    case ExprKind::Binary:
      return binary(e, llvm::cast<BinaryExpr>(n), loc);
    case ExprKind::Select: {
      auto *s = llvm::cast<SelectExpr>(n);
      return zSel(s->condition(), d(s->trueValue()), d(s->falseValue()), loc);
    }
    }
    throw InternalError("unknown ExprKind");
  }

  Expr unary(const Expr &e, const UnaryExpr *u, Loc loc) {
    const Expr &a = u->operand();
    Expr da = d(a);
    if (da.isNull())
      return Expr();
    switch (u->op()) {
    case UnaryOp::Neg:
      return neg(da, loc);
    case UnaryOp::Exp:
      return mul(e, da, loc);
    case UnaryOp::Exp2:
      return mul(mul(e, lit(std::numbers::ln2_v<float>, loc), loc), da, loc);
    case UnaryOp::Log:
      return div(da, a, loc);
    case UnaryOp::Tanh:
      return mul(sub(lit(1.0f, loc), mul(e, e, loc), loc), da, loc);
    case UnaryOp::Sigmoid:
      return mul(mul(e, sub(lit(1.0f, loc), e, loc), loc), da, loc);
    case UnaryOp::Sqrt:
      return sel(cmp(BinaryOp::Eq, a, lit(0.0f, loc), loc), lit(0.0f, loc),
                 div(da, mul(lit(2.0f, loc), e, loc), loc), loc);
    case UnaryOp::Abs: {
      Expr zero = lit(0.0f, loc);
      Expr pos = cmp(BinaryOp::Gt, a, zero, loc);
      Expr negative = cmp(BinaryOp::Lt, a, zero, loc);
      // A literal da: its two branches fold into literals.
      if (llvm::isa<ConstantExpr>(da.get()))
        return sel(pos, da, sel(negative, neg(da, loc), zero, loc), loc);
      // Else sign(a) * da, exactly 0 where a is 0 or NaN (whatever da is),
      // with da once: as two branches, each nested abs doubled the printed
      // derivative (and the backward spec's text, its cache key and the
      // compile).
      Expr sign = sel(pos, lit(1.0f, loc),
                      sel(negative, lit(-1.0f, loc), zero, loc), loc);
      return sel(cmp(BinaryOp::Eq, sign, zero, loc), zero, mul(sign, da, loc),
                 loc);
    }
    case UnaryOp::Not:
      break;
    }
    throw InternalError("unary op without a derivative rule");
  }

  Expr binary(const Expr &e, const BinaryExpr *b, Loc loc) {
    const Expr &x = b->lhs(), &y = b->rhs();
    Expr dx = d(x), dy = d(y);
    if (dx.isNull() && dy.isNull())
      return Expr();
    switch (b->op()) {
    case BinaryOp::Add:
      return zAdd(dx, dy, loc);
    case BinaryOp::Sub:
      return zSub(dx, dy, loc);
    case BinaryOp::Mul:
      return zAdd(zMul(dx, y, loc), dy.isNull() ? Expr() : mul(x, dy, loc),
                  loc);
    case BinaryOp::Div:
      // d(x / y) = (dx - e * dy) / y, reusing e = x / y.
      return div(zSub(dx, zMul(dy, e, loc), loc), y, loc);
    case BinaryOp::Min:
      return zSel(cmp(BinaryOp::Lt, y, x, loc), dy, dx, loc);
    case BinaryOp::Max:
      return zSel(cmp(BinaryOp::Gt, y, x, loc), dy, dx, loc);
    default:
      break;
    }
    throw InternalError("binary op without a derivative rule");
  }

  const DiffVar &var_;
  std::unordered_map<const ExprNode *, Expr> memo_;
};

/// Every f32 buffer read of \p e, structurally distinct, in depth-first
/// order; and the names of its f32 parameters.
void collectLeaves(const Expr &e, std::vector<Expr> &reads,
                   std::vector<std::string> &params) {
  if (auto *l = llvm::dyn_cast<BufferLoadExpr>(e.get());
      l && l->type() == ScalarType::Float32) {
    bool seen = false;
    for (const Expr &r : reads)
      seen = seen || structurallyEqual(r, e);
    if (!seen)
      reads.push_back(e);
  }
  if (auto *p = llvm::dyn_cast<ParamExpr>(e.get());
      p && p->type() == ScalarType::Float32 &&
      std::find(params.begin(), params.end(), p->name()) == params.end())
    params.push_back(p->name());
  for (const Expr &op : e->operands())
    collectLeaves(op, reads, params);
}

Expr orZero(const Expr &d) {
  return d.isNull() ? constant(ScalarType::Float32, 0, 0.0f) : d;
}

void checkVar(const DiffVar &var) {
  if (var.kind != DiffVar::Kind::BufferRead)
    return;
  auto *l = var.bufferRead.isNull()
                ? nullptr
                : llvm::dyn_cast<BufferLoadExpr>(var.bufferRead.get());
  if (!l || l->type() != ScalarType::Float32)
    throw UserError("a derivative with respect to a buffer read needs an f32 "
                    "buffer read (buffer<float>(name)[index])");
}

void checkF32(const Expr &e) {
  if (e.isNull())
    throw UserError("differentiate: the expression is empty");
  if (e.type() != ScalarType::Float32)
    throw UserError(fmt::format("differentiate: the expression is {}, not "
                                "f32",
                                toString(e.type())),
                    e->loc());
}

} // namespace

Expr differentiate(const Expr &e, const DiffVar &var) {
  checkF32(e);
  checkVar(var);
  checkDifferentiable(e, var);
  return orZero(Differentiator(var).d(e));
}

ScoreModDerivative
differentiateScoreMod(const Expr &scoreMod,
                      const std::vector<std::string> &params) {
  checkF32(scoreMod);
  std::vector<Expr> reads;
  std::vector<std::string> f32Params;
  collectLeaves(scoreMod, reads, f32Params);
  for (const std::string &p : params)
    if (std::find(f32Params.begin(), f32Params.end(), p) == f32Params.end())
      throw UserError(fmt::format("cannot differentiate with respect to "
                                  "parameter '{}': the score modifier reads "
                                  "no f32 parameter of that name",
                                  p));

  ScoreModDerivative out;
  DiffVar s = DiffVar::score();
  checkDifferentiable(scoreMod, s);
  out.score = orZero(Differentiator(s).d(scoreMod));
  for (const Expr &r : reads) {
    DiffVar v = DiffVar::read(r);
    checkDifferentiable(scoreMod, v);
    Expr dr = Differentiator(v).d(scoreMod);
    if (dr.isNull())
      continue; // e.g. a buffer read only in a select condition
    auto *l = llvm::cast<BufferLoadExpr>(r.get());
    out.buffers.push_back({l->name(), l->index(), dr});
  }
  for (const std::string &p : params) {
    DiffVar v = DiffVar::paramNamed(p);
    checkDifferentiable(scoreMod, v);
    out.params.push_back({p, orZero(Differentiator(v).d(scoreMod))});
  }
  return out;
}

std::vector<std::string> differentiableParams(const Expr &scoreMod) {
  std::vector<Expr> reads;
  std::vector<std::string> params;
  collectLeaves(scoreMod, reads, params);
  std::sort(params.begin(), params.end());
  return params;
}

std::string printDerivative(const ScoreModDerivative &d) {
  std::string out = fmt::format("d score'/d score = {}\n", printExpr(d.score));
  for (const BufferDerivative &b : d.buffers)
    out += fmt::format("d score'/d buffer<f32>({})[{}] = {}\n", b.buffer,
                       printExpr(b.index), printExpr(b.derivative));
  for (const ParamDerivative &p : d.params)
    out += fmt::format("d score'/d param<f32>({}) = {}\n", p.param,
                       printExpr(p.derivative));
  return out;
}

} // namespace flashjit
