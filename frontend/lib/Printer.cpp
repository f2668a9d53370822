//===- Printer.cpp - Canonical text of expressions and specs --------------===//
#include "flashjit/frontend/Printer.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <charconv>
#include <cmath>

namespace flashjit {

std::string printFloat(float value) {
  if (std::isnan(value))
    return std::signbit(value) ? "-nan" : "nan";
  if (std::isinf(value))
    return value < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc())
    throw InternalError("to_chars failed on a float");
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

static void print(const Expr &e, std::string &out) {
  const ExprNode *n = e.get();
  switch (n->kind()) {
  case ExprKind::Constant: {
    auto *c = llvm::cast<ConstantExpr>(n);
    switch (c->type()) {
    case ScalarType::Bool:
      out += c->boolValue() ? "true" : "false";
      return;
    case ScalarType::Int32:
      out += std::to_string(c->intValue());
      return;
    case ScalarType::Int64:
      out += std::to_string(c->intValue());
      out += 'L';
      return;
    case ScalarType::Float32:
      out += printFloat(c->floatValue());
      return;
    }
    return;
  }
  case ExprKind::Index:
    out += toString(llvm::cast<IndexExpr>(n)->var());
    return;
  case ExprKind::Score:
    out += "score";
    return;
  case ExprKind::Param: {
    auto *p = llvm::cast<ParamExpr>(n);
    out += fmt::format("param<{}>({})", toString(p->type()), p->name());
    return;
  }
  case ExprKind::BufferLoad: {
    auto *b = llvm::cast<BufferLoadExpr>(n);
    out += fmt::format("buffer<{}>({})[", toString(b->type()), b->name());
    print(b->index(), out);
    out += ']';
    return;
  }
  case ExprKind::Unary: {
    auto *u = llvm::cast<UnaryExpr>(n);
    out += toString(u->op());
    out += '(';
    print(u->operand(), out);
    out += ')';
    return;
  }
  case ExprKind::Binary: {
    auto *b = llvm::cast<BinaryExpr>(n);
    if (isFunctionLike(b->op())) {
      out += toString(b->op());
      out += '(';
      print(b->lhs(), out);
      out += ", ";
      print(b->rhs(), out);
      out += ')';
      return;
    }
    out += '(';
    print(b->lhs(), out);
    out += ' ';
    out += toString(b->op());
    out += ' ';
    print(b->rhs(), out);
    out += ')';
    return;
  }
  case ExprKind::Select: {
    auto *s = llvm::cast<SelectExpr>(n);
    out += "select(";
    print(s->condition(), out);
    out += ", ";
    print(s->trueValue(), out);
    out += ", ";
    print(s->falseValue(), out);
    out += ')';
    return;
  }
  case ExprKind::Cast: {
    auto *c = llvm::cast<CastExpr>(n);
    out += fmt::format("cast<{}>(", toString(c->type()));
    print(c->operand(), out);
    out += ')';
    return;
  }
  }
}

std::string printExpr(const Expr &e) {
  if (e.isNull())
    throw InternalError("printExpr of a null expression");
  std::string out;
  print(e, out);
  return out;
}

std::string printSpec(const AttentionSpec &s) {
  // `sink=true` only when set: specs without a sink keep the text (and the
  // cache keys) they always had.
  return fmt::format(
      "attention(name={}, mask={}, score={}, head_dim_qk={}, head_dim_v={}, "
      "dtype_q={}, dtype_k={}, dtype_v={}, dtype_o={}, heads_q={}, "
      "heads_kv={}, causal={}, scale={}, lse={}{})",
      s.variant.name(), printExpr(s.variant.maskExpr()),
      printExpr(s.variant.scoreExpr()), s.headDimQK, s.headDimV,
      toString(s.dtypeQ), toString(s.dtypeK), toString(s.dtypeV),
      toString(s.dtypeO), s.headsQ, s.headsKV, toString(s.causal),
      s.scale ? printFloat(*s.scale) : std::string("default"),
      s.returnLse ? "true" : "false", s.sink ? ", sink=true" : "");
}

} // namespace flashjit
