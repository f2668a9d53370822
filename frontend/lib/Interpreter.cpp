//===- Interpreter.cpp - Evaluating an expression at one point ------------===//
//
// The executable specification of the DSL's semantics; every backend must
// agree with it. Integer arithmetic is done on unsigned 64-bit values and
// truncated, which gives two's-complement wrapping without undefined
// behaviour.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Interpreter.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <cmath>
#include <limits>

namespace flashjit {

namespace {

int64_t wrap(ScalarType t, uint64_t bits) {
  if (t == ScalarType::Int32)
    return static_cast<int32_t>(static_cast<uint32_t>(bits));
  return static_cast<int64_t>(bits);
}

Value makeInt(ScalarType t, uint64_t bits) { return {t, wrap(t, bits), 0.0}; }
Value makeBool(bool b) { return {ScalarType::Bool, b ? 1 : 0, 0.0}; }
Value makeFloat(double f) { return {ScalarType::Float32, 0, f}; }

int64_t minOf(ScalarType t) {
  return t == ScalarType::Int32 ? std::numeric_limits<int32_t>::min()
                                : std::numeric_limits<int64_t>::min();
}

double floatMinMax(double a, double b, bool isMin) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  if (a == b) // +0 vs -0: min is -0, max is +0
    return (std::signbit(a) == isMin) ? a : b;
  return (a < b) == isMin ? a : b;
}

int64_t saturate(double f, ScalarType t) {
  if (std::isnan(f))
    return 0;
  double lo = t == ScalarType::Int32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = t == ScalarType::Int32 ? 2147483647.0 : 9223372036854775807.0;
  double tr = std::trunc(f);
  if (tr <= lo)
    return minOf(t);
  if (tr >= hi)
    return t == ScalarType::Int32 ? std::numeric_limits<int32_t>::max()
                                  : std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(tr);
}

class Evaluator {
public:
  Evaluator(const EvalPoint &p, const Arguments &args) : p_(p), args_(args) {}

  Value eval(const Expr &e) {
    const ExprNode *n = e.get();
    switch (n->kind()) {
    case ExprKind::Constant: {
      auto *c = llvm::cast<ConstantExpr>(n);
      if (c->type() == ScalarType::Float32)
        return makeFloat(c->floatValue());
      return {c->type(), c->intValue(), 0.0};
    }
    case ExprKind::Index:
      return makeInt(ScalarType::Int32,
                     static_cast<uint64_t>(index(llvm::cast<IndexExpr>(n))));
    case ExprKind::Score:
      return makeFloat(p_.score);
    case ExprKind::Param:
      return param(llvm::cast<ParamExpr>(n));
    case ExprKind::BufferLoad:
      return load(llvm::cast<BufferLoadExpr>(n));
    case ExprKind::Unary:
      return unary(llvm::cast<UnaryExpr>(n));
    case ExprKind::Binary:
      return binary(llvm::cast<BinaryExpr>(n));
    case ExprKind::Select: {
      auto *s = llvm::cast<SelectExpr>(n);
      return eval(s->condition()).asBool() ? eval(s->trueValue())
                                           : eval(s->falseValue());
    }
    case ExprKind::Cast:
      return castTo(n->type(), eval(llvm::cast<CastExpr>(n)->operand()));
    }
    throw InternalError("unknown ExprKind");
  }

private:
  int64_t index(const IndexExpr *n) const {
    switch (n->var()) {
    case IndexVar::Batch:
      return p_.batch;
    case IndexVar::Head:
      return p_.head;
    case IndexVar::QIdx:
      return p_.qIdx;
    case IndexVar::KvIdx:
      return p_.kvIdx;
    case IndexVar::SeqlenQ:
      return p_.seqlenQ;
    case IndexVar::SeqlenK:
      return p_.seqlenK;
    }
    throw InternalError("unknown IndexVar");
  }

  Value param(const ParamExpr *n) const {
    auto it = args_.params.find(n->name());
    if (it == args_.params.end())
      throw UserError(
          fmt::format("no value given for parameter '{}'", n->name()));
    const Scalar &s = it->second;
    if (s.type != n->type())
      throw UserError(fmt::format("parameter '{}' is {} but was given a {} "
                                  "value",
                                  n->name(), toString(n->type()),
                                  toString(s.type)));
    if (s.type == ScalarType::Float32)
      return makeFloat(s.floatValue);
    return makeInt(s.type, static_cast<uint64_t>(s.intValue));
  }

  Value load(const BufferLoadExpr *n) {
    auto it = args_.buffers.find(n->name());
    if (it == args_.buffers.end())
      throw UserError(fmt::format("no data bound to buffer '{}'", n->name()));
    const BufferRef &b = it->second;
    if (b.elementType != n->type())
      throw UserError(fmt::format("buffer '{}' is {} but was given {} data",
                                  n->name(), toString(n->type()),
                                  toString(b.elementType)));
    int64_t i = eval(n->index()).intValue;
    if (i < 0 || i >= b.size)
      throw UserError(fmt::format("buffer '{}' read at index {}, outside "
                                  "[0, {})",
                                  n->name(), i, b.size));
    switch (b.elementType) {
    case ScalarType::Int32:
      return makeInt(
          ScalarType::Int32,
          static_cast<uint64_t>(static_cast<const int32_t *>(b.data)[i]));
    case ScalarType::Int64:
      return makeInt(
          ScalarType::Int64,
          static_cast<uint64_t>(static_cast<const int64_t *>(b.data)[i]));
    case ScalarType::Float32:
      return makeFloat(static_cast<const float *>(b.data)[i]);
    case ScalarType::Bool:
      break;
    }
    throw InternalError("bool buffer");
  }

  Value unary(const UnaryExpr *n) {
    Value a = eval(n->operand());
    ScalarType t = n->type();
    switch (n->op()) {
    case UnaryOp::Not:
      return makeBool(!a.asBool());
    case UnaryOp::Neg:
      if (t == ScalarType::Float32)
        return makeFloat(-a.floatValue);
      return makeInt(t, 0 - static_cast<uint64_t>(a.intValue));
    case UnaryOp::Abs:
      if (t == ScalarType::Float32)
        return makeFloat(std::fabs(a.floatValue));
      return makeInt(t, a.intValue < 0 ? 0 - static_cast<uint64_t>(a.intValue)
                                       : static_cast<uint64_t>(a.intValue));
    case UnaryOp::Exp:
      return makeFloat(std::exp(a.floatValue));
    case UnaryOp::Exp2:
      return makeFloat(std::exp2(a.floatValue));
    case UnaryOp::Log:
      return makeFloat(std::log(a.floatValue));
    case UnaryOp::Tanh:
      return makeFloat(std::tanh(a.floatValue));
    case UnaryOp::Sigmoid:
      return makeFloat(1.0 / (1.0 + std::exp(-a.floatValue)));
    case UnaryOp::Sqrt:
      return makeFloat(std::sqrt(a.floatValue));
    }
    throw InternalError("unknown UnaryOp");
  }

  Value binary(const BinaryExpr *n) {
    BinaryOp op = n->op();
    if (op == BinaryOp::And) // no short circuit needed: no side effects,
      return makeBool(eval(n->lhs()).asBool() && eval(n->rhs()).asBool());
    if (op == BinaryOp::Or) // but it spares out-of-range reads a guard skips
      return makeBool(eval(n->lhs()).asBool() || eval(n->rhs()).asBool());
    Value a = eval(n->lhs()), b = eval(n->rhs());
    ScalarType t = n->lhs().type(); // both operands have one type
    if (t == ScalarType::Float32) {
      double x = a.floatValue, y = b.floatValue;
      switch (op) {
      case BinaryOp::Add:
        return makeFloat(x + y);
      case BinaryOp::Sub:
        return makeFloat(x - y);
      case BinaryOp::Mul:
        return makeFloat(x * y);
      case BinaryOp::Div:
        return makeFloat(x / y);
      case BinaryOp::Min:
        return makeFloat(floatMinMax(x, y, true));
      case BinaryOp::Max:
        return makeFloat(floatMinMax(x, y, false));
      case BinaryOp::Eq:
        return makeBool(x == y);
      case BinaryOp::Ne:
        return makeBool(x != y);
      case BinaryOp::Lt:
        return makeBool(x < y);
      case BinaryOp::Le:
        return makeBool(x <= y);
      case BinaryOp::Gt:
        return makeBool(x > y);
      case BinaryOp::Ge:
        return makeBool(x >= y);
      default:
        throw InternalError("bad f32 binary op");
      }
    }
    int64_t x = a.intValue, y = b.intValue;
    uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
    switch (op) {
    case BinaryOp::Add:
      return makeInt(t, ux + uy);
    case BinaryOp::Sub:
      return makeInt(t, ux - uy);
    case BinaryOp::Mul:
      return makeInt(t, ux * uy);
    case BinaryOp::Div:
      if (y == 0)
        return makeInt(t, 0);
      if (y == -1)
        return makeInt(t, 0 - ux);
      return makeInt(t, static_cast<uint64_t>(x / y));
    case BinaryOp::Rem:
      if (y == 0 || y == -1)
        return makeInt(t, 0);
      return makeInt(t, static_cast<uint64_t>(x % y));
    case BinaryOp::Min:
      return makeInt(t, static_cast<uint64_t>(x < y ? x : y));
    case BinaryOp::Max:
      return makeInt(t, static_cast<uint64_t>(x > y ? x : y));
    case BinaryOp::Eq:
      return makeBool(x == y);
    case BinaryOp::Ne:
      return makeBool(x != y);
    case BinaryOp::Lt:
      return makeBool(x < y);
    case BinaryOp::Le:
      return makeBool(x <= y);
    case BinaryOp::Gt:
      return makeBool(x > y);
    case BinaryOp::Ge:
      return makeBool(x >= y);
    default:
      throw InternalError("bad integer binary op");
    }
  }

  static Value castTo(ScalarType to, const Value &v) {
    if (to == ScalarType::Float32) {
      if (v.type == ScalarType::Float32)
        return v;
      // The DSL's floats are f32: the converted value is rounded to float.
      return makeFloat(static_cast<float>(v.intValue));
    }
    if (v.type == ScalarType::Float32)
      return makeInt(to, static_cast<uint64_t>(saturate(v.floatValue, to)));
    return makeInt(to, static_cast<uint64_t>(v.intValue));
  }

  const EvalPoint &p_;
  const Arguments &args_;
};

} // namespace

Value evaluate(const Expr &e, const EvalPoint &point, const Arguments &args) {
  return Evaluator(point, args).eval(e);
}

} // namespace flashjit
