//===- Expr.cpp - Building and type-checking DSL expressions --------------===//
//
// Every node is built through makeUnary/makeBinary/select/cast, which apply
// the type rules stated in Expr.h and throw UserError at the user's location.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Expr.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>

namespace flashjit {

ScalarType Expr::type() const { return node_->type(); }
ExprKind Expr::kind() const { return node_->kind(); }

std::string_view toString(IndexVar var) {
  switch (var) {
  case IndexVar::Batch:
    return "batch";
  case IndexVar::Head:
    return "head";
  case IndexVar::QIdx:
    return "q_idx";
  case IndexVar::KvIdx:
    return "kv_idx";
  case IndexVar::SeqlenQ:
    return "seqlen_q";
  case IndexVar::SeqlenK:
    return "seqlen_k";
  }
  throw InternalError("unknown IndexVar");
}

std::string_view toString(UnaryOp op) {
  switch (op) {
  case UnaryOp::Neg:
    return "-";
  case UnaryOp::Not:
    return "!";
  case UnaryOp::Abs:
    return "abs";
  case UnaryOp::Exp:
    return "exp";
  case UnaryOp::Exp2:
    return "exp2";
  case UnaryOp::Log:
    return "log";
  case UnaryOp::Tanh:
    return "tanh";
  case UnaryOp::Sigmoid:
    return "sigmoid";
  case UnaryOp::Sqrt:
    return "sqrt";
  }
  throw InternalError("unknown UnaryOp");
}

std::string_view toString(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add:
    return "+";
  case BinaryOp::Sub:
    return "-";
  case BinaryOp::Mul:
    return "*";
  case BinaryOp::Div:
    return "/";
  case BinaryOp::Rem:
    return "%";
  case BinaryOp::Min:
    return "min";
  case BinaryOp::Max:
    return "max";
  case BinaryOp::Eq:
    return "==";
  case BinaryOp::Ne:
    return "!=";
  case BinaryOp::Lt:
    return "<";
  case BinaryOp::Le:
    return "<=";
  case BinaryOp::Gt:
    return ">";
  case BinaryOp::Ge:
    return ">=";
  case BinaryOp::And:
    return "&&";
  case BinaryOp::Or:
    return "||";
  }
  throw InternalError("unknown BinaryOp");
}

bool isFunctionLike(BinaryOp op) {
  return op == BinaryOp::Min || op == BinaryOp::Max;
}

bool isComparison(BinaryOp op) {
  switch (op) {
  case BinaryOp::Eq:
  case BinaryOp::Ne:
  case BinaryOp::Lt:
  case BinaryOp::Le:
  case BinaryOp::Gt:
  case BinaryOp::Ge:
    return true;
  default:
    return false;
  }
}

bool isIdentifier(std::string_view name) {
  if (name.empty())
    return false;
  auto alpha = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (!alpha(name[0]))
    return false;
  for (char c : name)
    if (!alpha(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Leaves and literals
//===----------------------------------------------------------------------===//

static Expr makeIndex(IndexVar var) {
  return Expr(std::make_shared<IndexExpr>(var, std::source_location()));
}

const Expr batch = makeIndex(IndexVar::Batch);
const Expr head = makeIndex(IndexVar::Head);
const Expr q_idx = makeIndex(IndexVar::QIdx);
const Expr kv_idx = makeIndex(IndexVar::KvIdx);
const Expr seqlen_q = makeIndex(IndexVar::SeqlenQ);
const Expr seqlen_k = makeIndex(IndexVar::SeqlenK);
const Expr score = Expr(std::make_shared<ScoreExpr>(std::source_location()));

Expr constant(ScalarType type, int64_t intValue, float floatValue,
              std::source_location loc) {
  switch (type) {
  case ScalarType::Bool:
    return Expr(std::make_shared<ConstantExpr>(type, intValue != 0, 0.0f, loc));
  case ScalarType::Int32:
    return Expr(std::make_shared<ConstantExpr>(
        type, static_cast<int32_t>(intValue), 0.0f, loc));
  case ScalarType::Int64:
    return Expr(std::make_shared<ConstantExpr>(type, intValue, 0.0f, loc));
  case ScalarType::Float32:
    // One NaN per sign, so equal text means equal trees.
    if (std::isnan(floatValue))
      floatValue =
          std::copysign(std::numeric_limits<float>::quiet_NaN(), floatValue);
    return Expr(std::make_shared<ConstantExpr>(type, 0, floatValue, loc));
  }
  throw InternalError("unknown ScalarType");
}

ExprArg::ExprArg(Expr e, std::source_location loc)
    : expr_(std::move(e)), loc_(loc) {
  if (expr_.isNull())
    throw UserError("use of an empty (default-constructed) expression", loc);
}

ExprArg::ExprArg(bool value, std::source_location loc)
    : expr_(constant(ScalarType::Bool, value, 0.0f, loc)), loc_(loc) {}

ExprArg ExprArg::fromInteger(int64_t value, bool isI32, bool overflow,
                             std::source_location loc) {
  if (overflow)
    throw UserError("unsigned integer literal does not fit in i64", loc);
  return ExprArg(
      constant(isI32 ? ScalarType::Int32 : ScalarType::Int64, value, 0.0f, loc),
      loc, 0);
}

ExprArg ExprArg::fromFloat(float value, std::source_location loc) {
  return ExprArg(constant(ScalarType::Float32, 0, value, loc), loc, 0);
}

static void checkName(std::string_view what, std::string_view name,
                      ScalarType type, std::source_location loc) {
  if (!isIdentifier(name))
    throw UserError(fmt::format("{} name '{}' is not an identifier "
                                "([A-Za-z_][A-Za-z0-9_]*)",
                                what, name),
                    loc);
  if (type == ScalarType::Bool)
    throw UserError(
        fmt::format("{} '{}' has type bool; use i32, i64 or f32", what, name),
        loc);
}

Expr param(std::string_view name, ScalarType type, std::source_location loc) {
  checkName("parameter", name, type, loc);
  return Expr(std::make_shared<ParamExpr>(std::string(name), type, loc));
}

Buffer::Buffer(std::string_view name, ScalarType elementType,
               std::source_location loc)
    : name_(name), elementType_(elementType) {
  checkName("buffer", name, elementType, loc);
}

Expr Buffer::operator[](ExprArg index) const {
  if (!isInteger(index.expr().type()))
    throw UserError(fmt::format("buffer '{}' indexed by a {} expression; "
                                "indices must be i32 or i64",
                                name_, toString(index.expr().type())),
                    index.loc());
  return Expr(std::make_shared<BufferLoadExpr>(name_, elementType_,
                                               index.expr(), index.loc()));
}

//===----------------------------------------------------------------------===//
// Type rules
//===----------------------------------------------------------------------===//

/// Converts \p e to \p type: literals in place, other nodes through a cast.
static Expr promote(const Expr &e, ScalarType type, std::source_location loc) {
  if (e.type() == type)
    return e;
  if (auto *c = llvm::dyn_cast<ConstantExpr>(e.get())) {
    if (type == ScalarType::Float32 && isInteger(c->type()))
      return constant(type, 0, static_cast<float>(c->intValue()), c->loc());
    if (type == ScalarType::Int64 && c->type() == ScalarType::Int32)
      return constant(type, c->intValue(), 0.0f, c->loc());
  }
  return Expr(std::make_shared<CastExpr>(type, e, loc));
}

static int rank(ScalarType t) {
  switch (t) {
  case ScalarType::Bool:
    return 0;
  case ScalarType::Int32:
    return 1;
  case ScalarType::Int64:
    return 2;
  case ScalarType::Float32:
    return 3;
  }
  return 0;
}

static ScalarType commonType(ScalarType a, ScalarType b) {
  return rank(a) >= rank(b) ? a : b;
}

static std::string describe(std::string_view op) {
  return fmt::format("'{}'", op);
}

Expr makeUnary(UnaryOp op, const Expr &a, std::source_location loc) {
  ScalarType t = a.type();
  switch (op) {
  case UnaryOp::Not:
    if (t != ScalarType::Bool)
      throw UserError(
          fmt::format("operator '!' takes a bool, got {}", toString(t)), loc);
    return Expr(std::make_shared<UnaryExpr>(op, t, a, loc));
  case UnaryOp::Neg:
  case UnaryOp::Abs:
    if (!isNumeric(t))
      throw UserError(
          fmt::format("{} takes a number, got bool", describe(toString(op))),
          loc);
    return Expr(std::make_shared<UnaryExpr>(op, t, a, loc));
  case UnaryOp::Exp:
  case UnaryOp::Exp2:
  case UnaryOp::Log:
  case UnaryOp::Tanh:
  case UnaryOp::Sigmoid:
  case UnaryOp::Sqrt:
    if (!isNumeric(t))
      throw UserError(
          fmt::format("{} takes a number, got bool", describe(toString(op))),
          loc);
    return Expr(std::make_shared<UnaryExpr>(
        op, ScalarType::Float32, promote(a, ScalarType::Float32, loc), loc));
  }
  throw InternalError("unknown UnaryOp");
}

Expr makeBinary(BinaryOp op, const Expr &a, const Expr &b,
                std::source_location loc) {
  ScalarType ta = a.type(), tb = b.type();
  std::string name = describe(toString(op));
  auto fail = [&](const std::string &what) -> Expr {
    throw UserError(fmt::format("{} {}, got {} and {}", name, what,
                                toString(ta), toString(tb)),
                    loc);
  };
  switch (op) {
  case BinaryOp::And:
  case BinaryOp::Or:
    if (ta != ScalarType::Bool || tb != ScalarType::Bool)
      return fail("takes two bools");
    return Expr(std::make_shared<BinaryExpr>(op, ScalarType::Bool, a, b, loc));
  case BinaryOp::Eq:
  case BinaryOp::Ne:
    if (ta == ScalarType::Bool && tb == ScalarType::Bool)
      return Expr(
          std::make_shared<BinaryExpr>(op, ScalarType::Bool, a, b, loc));
    [[fallthrough]];
  case BinaryOp::Lt:
  case BinaryOp::Le:
  case BinaryOp::Gt:
  case BinaryOp::Ge: {
    if (!isNumeric(ta) || !isNumeric(tb))
      return fail(op == BinaryOp::Eq || op == BinaryOp::Ne
                      ? "compares two numbers or two bools"
                      : "compares two numbers, not bools");
    ScalarType t = commonType(ta, tb);
    return Expr(std::make_shared<BinaryExpr>(
        op, ScalarType::Bool, promote(a, t, loc), promote(b, t, loc), loc));
  }
  case BinaryOp::Rem:
    if (!isInteger(ta) || !isInteger(tb))
      return fail("takes two integers");
    [[fallthrough]];
  case BinaryOp::Add:
  case BinaryOp::Sub:
  case BinaryOp::Mul:
  case BinaryOp::Div:
  case BinaryOp::Min:
  case BinaryOp::Max: {
    if (!isNumeric(ta) || !isNumeric(tb))
      return fail("takes two numbers, not bools");
    ScalarType t = commonType(ta, tb);
    return Expr(std::make_shared<BinaryExpr>(op, t, promote(a, t, loc),
                                             promote(b, t, loc), loc));
  }
  }
  throw InternalError("unknown BinaryOp");
}

Expr operator+(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Add, a.expr(), b.expr(), a.loc());
}
Expr operator-(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Sub, a.expr(), b.expr(), a.loc());
}
Expr operator*(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Mul, a.expr(), b.expr(), a.loc());
}
Expr operator/(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Div, a.expr(), b.expr(), a.loc());
}
Expr operator%(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Rem, a.expr(), b.expr(), a.loc());
}
Expr operator==(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Eq, a.expr(), b.expr(), a.loc());
}
Expr operator!=(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Ne, a.expr(), b.expr(), a.loc());
}
Expr operator<(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Lt, a.expr(), b.expr(), a.loc());
}
Expr operator<=(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Le, a.expr(), b.expr(), a.loc());
}
Expr operator>(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Gt, a.expr(), b.expr(), a.loc());
}
Expr operator>=(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Ge, a.expr(), b.expr(), a.loc());
}
Expr operator&&(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::And, a.expr(), b.expr(), a.loc());
}
Expr operator||(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Or, a.expr(), b.expr(), a.loc());
}
Expr operator-(ExprArg a) { return makeUnary(UnaryOp::Neg, a.expr(), a.loc()); }
Expr operator!(ExprArg a) { return makeUnary(UnaryOp::Not, a.expr(), a.loc()); }

Expr min(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Min, a.expr(), b.expr(), a.loc());
}
Expr max(ExprArg a, ExprArg b) {
  return makeBinary(BinaryOp::Max, a.expr(), b.expr(), a.loc());
}
Expr abs(ExprArg a) { return makeUnary(UnaryOp::Abs, a.expr(), a.loc()); }
Expr exp(ExprArg a) { return makeUnary(UnaryOp::Exp, a.expr(), a.loc()); }
Expr exp2(ExprArg a) { return makeUnary(UnaryOp::Exp2, a.expr(), a.loc()); }
Expr log(ExprArg a) { return makeUnary(UnaryOp::Log, a.expr(), a.loc()); }
Expr tanh(ExprArg a) { return makeUnary(UnaryOp::Tanh, a.expr(), a.loc()); }
Expr sigmoid(ExprArg a) {
  return makeUnary(UnaryOp::Sigmoid, a.expr(), a.loc());
}
Expr sqrt(ExprArg a) { return makeUnary(UnaryOp::Sqrt, a.expr(), a.loc()); }

Expr select(ExprArg cond, ExprArg a, ExprArg b) {
  if (cond.expr().type() != ScalarType::Bool)
    throw UserError(fmt::format("select's condition must be bool, got {}",
                                toString(cond.expr().type())),
                    cond.loc());
  ScalarType ta = a.expr().type(), tb = b.expr().type();
  if ((ta == ScalarType::Bool) != (tb == ScalarType::Bool))
    throw UserError(fmt::format("select's values must both be bools or both "
                                "numbers, got {} and {}",
                                toString(ta), toString(tb)),
                    cond.loc());
  ScalarType t = commonType(ta, tb);
  return Expr(std::make_shared<SelectExpr>(
      t, cond.expr(), promote(a.expr(), t, cond.loc()),
      promote(b.expr(), t, cond.loc()), cond.loc()));
}

Expr cast(ScalarType type, ExprArg a) {
  if (type == ScalarType::Bool)
    throw UserError("cast to bool is not allowed; compare with 0 instead",
                    a.loc());
  if (a.expr().type() == type)
    return a.expr();
  return Expr(std::make_shared<CastExpr>(type, a.expr(), a.loc()));
}

//===----------------------------------------------------------------------===//
// Queries
//===----------------------------------------------------------------------===//

bool structurallyEqual(const Expr &a, const Expr &b) {
  if (a.get() == b.get())
    return true;
  if (a.isNull() || b.isNull())
    return false;
  if (a.kind() != b.kind() || a.type() != b.type())
    return false;
  switch (a.kind()) {
  case ExprKind::Constant: {
    auto *ca = llvm::cast<ConstantExpr>(a.get());
    auto *cb = llvm::cast<ConstantExpr>(b.get());
    if (ca->type() == ScalarType::Float32)
      return std::bit_cast<uint32_t>(ca->floatValue()) ==
             std::bit_cast<uint32_t>(cb->floatValue());
    return ca->intValue() == cb->intValue();
  }
  case ExprKind::Index:
    return llvm::cast<IndexExpr>(a.get())->var() ==
           llvm::cast<IndexExpr>(b.get())->var();
  case ExprKind::Score:
    return true;
  case ExprKind::Param:
    return llvm::cast<ParamExpr>(a.get())->name() ==
           llvm::cast<ParamExpr>(b.get())->name();
  case ExprKind::BufferLoad:
    if (llvm::cast<BufferLoadExpr>(a.get())->name() !=
        llvm::cast<BufferLoadExpr>(b.get())->name())
      return false;
    break;
  case ExprKind::Unary:
    if (llvm::cast<UnaryExpr>(a.get())->op() !=
        llvm::cast<UnaryExpr>(b.get())->op())
      return false;
    break;
  case ExprKind::Binary:
    if (llvm::cast<BinaryExpr>(a.get())->op() !=
        llvm::cast<BinaryExpr>(b.get())->op())
      return false;
    break;
  case ExprKind::Select:
  case ExprKind::Cast:
    break;
  }
  const auto &oa = a->operands(), &ob = b->operands();
  if (oa.size() != ob.size())
    return false;
  for (size_t i = 0; i < oa.size(); ++i)
    if (!structurallyEqual(oa[i], ob[i]))
      return false;
  return true;
}

static bool anyNode(const Expr &e,
                    const std::function<bool(const ExprNode *)> &pred) {
  if (pred(e.get()))
    return true;
  for (const Expr &op : e->operands())
    if (anyNode(op, pred))
      return true;
  return false;
}

bool readsScore(const Expr &e) {
  return anyNode(e, [](const ExprNode *n) { return llvm::isa<ScoreExpr>(n); });
}

bool readsData(const Expr &e) {
  return anyNode(e, [](const ExprNode *n) {
    return llvm::isa<ParamExpr>(n) || llvm::isa<BufferLoadExpr>(n);
  });
}

bool readsBuffer(const Expr &e) {
  return anyNode(
      e, [](const ExprNode *n) { return llvm::isa<BufferLoadExpr>(n); });
}

bool readsIndex(const Expr &e, IndexVar var) {
  return anyNode(e, [var](const ExprNode *n) {
    auto *i = llvm::dyn_cast<IndexExpr>(n);
    return i && i->var() == var;
  });
}

} // namespace flashjit
