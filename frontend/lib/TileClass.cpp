//===- TileClass.cpp - Classifying mask tiles by interval arithmetic ------===//
//
// Abstract interpretation of the mask over a box of indices: integers become
// closed intervals (or "unbounded" when an operation could wrap), bools
// become the set of values they can take, floats are unknown and so are data
// reads, except under the buffer-range rule (TileClassOptions). Every rule is
// sound: the abstract result contains every concrete result.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/TileClass.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Interpreter.h"

#include "IntervalRange.h"

#include <llvm/Support/Casting.h>

#include <algorithm>
#include <limits>

namespace flashjit {

std::string_view toString(TileClass c) {
  switch (c) {
  case TileClass::Empty:
    return "empty";
  case TileClass::Partial:
    return "partial";
  case TileClass::Full:
    return "full";
  }
  throw InternalError("unknown TileClass");
}

namespace {

/// An abstract value: for integers [lo, hi] when bounded; for bools the
/// values it may take. Floats are never bounded.
struct AValue {
  bool bounded = false;
  __int128 lo = 0, hi = 0;
  bool canFalse = true, canTrue = true;

  static AValue range(__int128 lo, __int128 hi) {
    AValue v;
    v.bounded = true;
    v.lo = lo;
    v.hi = hi;
    return v;
  }
  static AValue boolean(bool canFalse, bool canTrue) {
    AValue v;
    v.canFalse = canFalse;
    v.canTrue = canTrue;
    return v;
  }
  static AValue unknown() { return AValue(); }
};

__int128 typeMin(ScalarType t) {
  return t == ScalarType::Int32 ? std::numeric_limits<int32_t>::min()
                                : std::numeric_limits<int64_t>::min();
}
__int128 typeMax(ScalarType t) {
  return t == ScalarType::Int32 ? std::numeric_limits<int32_t>::max()
                                : std::numeric_limits<int64_t>::max();
}

/// The interval, or unbounded if it leaves the type's range (the concrete
/// operation would wrap).
AValue fit(ScalarType t, __int128 lo, __int128 hi) {
  if (lo < typeMin(t) || hi > typeMax(t))
    return AValue::unknown();
  return AValue::range(lo, hi);
}

__int128 truncDiv(__int128 a, __int128 b) { return a / b; } // C truncation

class IntervalEvaluator {
public:
  IntervalEvaluator(const IndexBox &box, const Arguments &args,
                    const TileClassOptions &options)
      : box_(box), args_(args), options_(options) {}

  AValue eval(const Expr &e) {
    const ExprNode *n = e.get();
    switch (n->kind()) {
    case ExprKind::Constant: {
      auto *c = llvm::cast<ConstantExpr>(n);
      if (c->type() == ScalarType::Bool)
        return AValue::boolean(!c->boolValue(), c->boolValue());
      if (c->type() == ScalarType::Float32)
        return AValue::unknown();
      return AValue::range(c->intValue(), c->intValue());
    }
    case ExprKind::Index:
      return index(llvm::cast<IndexExpr>(n)->var());
    case ExprKind::Score:
      return AValue::unknown();
    case ExprKind::Param: {
      auto *p = llvm::cast<ParamExpr>(n);
      auto it = args_.params.find(p->name());
      if (isInteger(p->type()) && it != args_.params.end() &&
          it->second.type == p->type()) {
        Value v = evaluate(e, EvalPoint{}, args_);
        return AValue::range(v.intValue, v.intValue);
      }
      return AValue::unknown();
    }
    case ExprKind::BufferLoad:
      return bufferRange(llvm::cast<BufferLoadExpr>(n));
    case ExprKind::Unary:
      return unary(llvm::cast<UnaryExpr>(n));
    case ExprKind::Binary:
      return binary(llvm::cast<BinaryExpr>(n));
    case ExprKind::Select: {
      auto *s = llvm::cast<SelectExpr>(n);
      AValue c = eval(s->condition());
      if (!c.canFalse)
        return eval(s->trueValue());
      if (!c.canTrue)
        return eval(s->falseValue());
      return join(n->type(), eval(s->trueValue()), eval(s->falseValue()));
    }
    case ExprKind::Cast: {
      auto *c = llvm::cast<CastExpr>(n);
      ScalarType from = c->operand().type(), to = c->type();
      AValue a = eval(c->operand());
      if (to == ScalarType::Float32 || from == ScalarType::Float32)
        return AValue::unknown();
      if (from == ScalarType::Bool)
        return AValue::range(a.canFalse ? 0 : 1, a.canTrue ? 1 : 0);
      if (!a.bounded)
        return a;
      return fit(to, a.lo, a.hi);
    }
    }
    throw InternalError("unknown ExprKind");
  }

private:
  AValue index(IndexVar var) const {
    switch (var) {
    case IndexVar::Batch:
      return AValue::range(box_.batch.lo, box_.batch.hi);
    case IndexVar::Head:
      return AValue::range(box_.head.lo, box_.head.hi);
    case IndexVar::QIdx:
      return AValue::range(box_.q.lo, box_.q.hi);
    case IndexVar::KvIdx:
      return AValue::range(box_.kv.lo, box_.kv.hi);
    case IndexVar::SeqlenQ:
      return AValue::range(box_.seqlenQ.lo, box_.seqlenQ.hi);
    case IndexVar::SeqlenK:
      return AValue::range(box_.seqlenK.lo, box_.seqlenK.hi);
    }
    throw InternalError("unknown IndexVar");
  }

  /// The buffer-range rule (TileClassOptions::bufferRanges).
  AValue bufferRange(const BufferLoadExpr *n) {
    if (!options_.bufferRanges || !isInteger(n->type()))
      return AValue::unknown();
    auto it = args_.buffers.find(n->name());
    if (it == args_.buffers.end() || it->second.elementType != n->type())
      return AValue::unknown();
    const BufferRef &buf = it->second;
    AValue i = eval(n->index());
    if (!i.bounded || i.lo < 0 || i.hi >= buf.size ||
        i.hi - i.lo >= kBufferRangeScanLimit)
      return AValue::unknown();
    __int128 lo = typeMax(n->type()), hi = typeMin(n->type());
    for (auto k = static_cast<int64_t>(i.lo); k <= i.hi; ++k) {
      int64_t x = n->type() == ScalarType::Int32
                      ? static_cast<const int32_t *>(buf.data)[k]
                      : static_cast<const int64_t *>(buf.data)[k];
      lo = std::min<__int128>(lo, x);
      hi = std::max<__int128>(hi, x);
    }
    return AValue::range(lo, hi);
  }

  static AValue join(ScalarType t, const AValue &a, const AValue &b) {
    if (t == ScalarType::Bool)
      return AValue::boolean(a.canFalse || b.canFalse, a.canTrue || b.canTrue);
    if (!a.bounded || !b.bounded)
      return AValue::unknown();
    return AValue::range(std::min(a.lo, b.lo), std::max(a.hi, b.hi));
  }

  AValue unary(const UnaryExpr *n) {
    AValue a = eval(n->operand());
    ScalarType t = n->type();
    switch (n->op()) {
    case UnaryOp::Not:
      return AValue::boolean(a.canTrue, a.canFalse);
    case UnaryOp::Neg:
      if (t == ScalarType::Float32 || !a.bounded)
        return AValue::unknown();
      return fit(t, -a.hi, -a.lo);
    case UnaryOp::Abs:
      if (t == ScalarType::Float32 || !a.bounded)
        return AValue::unknown();
      if (a.lo >= 0)
        return a;
      if (a.hi <= 0)
        return fit(t, -a.hi, -a.lo);
      return fit(t, 0, std::max(-a.lo, a.hi));
    default:
      return AValue::unknown(); // float functions
    }
  }

  AValue binary(const BinaryExpr *n) {
    BinaryOp op = n->op();
    AValue a = eval(n->lhs()), b = eval(n->rhs());
    if (op == BinaryOp::And)
      return AValue::boolean(a.canFalse || b.canFalse, a.canTrue && b.canTrue);
    if (op == BinaryOp::Or)
      return AValue::boolean(a.canFalse && b.canFalse, a.canTrue || b.canTrue);
    ScalarType operandType = n->lhs().type();
    if (operandType == ScalarType::Bool) { // == or != on bools
      bool canEq = (a.canTrue && b.canTrue) || (a.canFalse && b.canFalse);
      bool canNe = (a.canTrue && b.canFalse) || (a.canFalse && b.canTrue);
      return op == BinaryOp::Eq ? AValue::boolean(canNe, canEq)
                                : AValue::boolean(canEq, canNe);
    }
    if (isComparison(op)) {
      if (operandType == ScalarType::Float32 || !a.bounded || !b.bounded)
        return AValue::boolean(true, true);
      return compare(op, a, b);
    }
    ScalarType t = n->type();
    if (t == ScalarType::Float32 || !a.bounded || !b.bounded)
      return AValue::unknown();
    switch (op) {
    case BinaryOp::Add:
      return fit(t, a.lo + b.lo, a.hi + b.hi);
    case BinaryOp::Sub:
      return fit(t, a.lo - b.hi, a.hi - b.lo);
    case BinaryOp::Mul: {
      __int128 c[] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
      return fit(t, *std::min_element(c, c + 4), *std::max_element(c, c + 4));
    }
    case BinaryOp::Div: {
      if (b.lo <= 0 && b.hi >= 0)
        return AValue::unknown(); // may divide by zero (gives 0) or by -1
      __int128 c[] = {truncDiv(a.lo, b.lo), truncDiv(a.lo, b.hi),
                      truncDiv(a.hi, b.lo), truncDiv(a.hi, b.hi)};
      return fit(t, *std::min_element(c, c + 4), *std::max_element(c, c + 4));
    }
    case BinaryOp::Rem: {
      if (b.lo != b.hi || b.lo <= 0 || a.lo < 0)
        return AValue::unknown();
      __int128 m = b.lo;
      if (a.hi - a.lo < m && a.lo % m <= a.hi % m)
        return AValue::range(a.lo % m, a.hi % m);
      return AValue::range(0, std::min(m - 1, a.hi));
    }
    case BinaryOp::Min:
      return AValue::range(std::min(a.lo, b.lo), std::min(a.hi, b.hi));
    case BinaryOp::Max:
      return AValue::range(std::max(a.lo, b.lo), std::max(a.hi, b.hi));
    default:
      throw InternalError("unexpected binary op in interval evaluation");
    }
  }

  static AValue compare(BinaryOp op, const AValue &a, const AValue &b) {
    switch (op) {
    case BinaryOp::Lt:
      return AValue::boolean(a.hi >= b.lo, a.lo < b.hi);
    case BinaryOp::Le:
      return AValue::boolean(a.hi > b.lo, a.lo <= b.hi);
    case BinaryOp::Gt:
      return AValue::boolean(a.lo <= b.hi, a.hi > b.lo);
    case BinaryOp::Ge:
      return AValue::boolean(a.lo < b.hi, a.hi >= b.lo);
    case BinaryOp::Eq: {
      bool disjoint = a.hi < b.lo || b.hi < a.lo;
      bool sameSingleton = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
      return AValue::boolean(!sameSingleton, !disjoint);
    }
    case BinaryOp::Ne: {
      bool disjoint = a.hi < b.lo || b.hi < a.lo;
      bool sameSingleton = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
      return AValue::boolean(!disjoint, !sameSingleton);
    }
    default:
      throw InternalError("not a comparison");
    }
  }

  const IndexBox &box_;
  const Arguments &args_;
  const TileClassOptions &options_;
};

} // namespace

std::optional<IndexRange> detail::integerRange(const Expr &e,
                                               const IndexBox &box,
                                               const Arguments &args) {
  if (!isInteger(e.type()))
    return std::nullopt;
  AValue v = IntervalEvaluator(box, args, TileClassOptions{}).eval(e);
  if (!v.bounded)
    return std::nullopt;
  return IndexRange{static_cast<int64_t>(v.lo), static_cast<int64_t>(v.hi)};
}

TileClass classifyTile(const Expr &mask, const TileBox &box,
                       const Arguments &args, const TileClassOptions &options) {
  if (mask.type() != ScalarType::Bool)
    throw UserError("classifyTile needs a bool mask");
  if (box.q.lo > box.q.hi || box.kv.lo > box.kv.hi)
    return TileClass::Empty;
  IndexBox leaves{box.batch,
                  box.head,
                  box.q,
                  box.kv,
                  {box.seqlenQ, box.seqlenQ},
                  {box.seqlenK, box.seqlenK}};
  AValue v = IntervalEvaluator(leaves, args, options).eval(mask);
  if (!v.canFalse)
    return TileClass::Full;
  if (!v.canTrue)
    return TileClass::Empty;
  return TileClass::Partial;
}

TileCounts
countTilesBy(int64_t seqlenQ, int64_t seqlenK, int64_t blockM, int64_t blockN,
             const std::function<TileClass(const TileBox &)> &classify) {
  if (blockM < 1 || blockN < 1)
    throw UserError("block_m and block_n must be positive");
  TileCounts counts;
  for (int64_t q0 = 0; q0 < seqlenQ; q0 += blockM) {
    for (int64_t k0 = 0; k0 < seqlenK; k0 += blockN) {
      TileBox box{{0, 0},
                  {0, 0},
                  {q0, std::min(q0 + blockM, seqlenQ) - 1},
                  {k0, std::min(k0 + blockN, seqlenK) - 1},
                  seqlenQ,
                  seqlenK};
      switch (classify(box)) {
      case TileClass::Full:
        ++counts.full;
        break;
      case TileClass::Partial:
        ++counts.partial;
        break;
      case TileClass::Empty:
        ++counts.empty;
        break;
      }
    }
  }
  return counts;
}

TileCounts countTiles(const Expr &mask, int64_t seqlenQ, int64_t seqlenK,
                      int64_t blockM, int64_t blockN, const Arguments &args,
                      const TileClassOptions &options) {
  return countTilesBy(seqlenQ, seqlenK, blockM, blockN, [&](const TileBox &b) {
    return classifyTile(mask, b, args, options);
  });
}

TileCounts bruteForceTileCounts(const Expr &mask, int64_t seqlenQ,
                                int64_t seqlenK, int64_t blockM, int64_t blockN,
                                const Arguments &args) {
  return countTilesBy(seqlenQ, seqlenK, blockM, blockN, [&](const TileBox &b) {
    bool any = false, all = true;
    EvalPoint p{0, 0, 0, 0, seqlenQ, seqlenK, 0.0};
    for (p.qIdx = b.q.lo; p.qIdx <= b.q.hi; ++p.qIdx)
      for (p.kvIdx = b.kv.lo; p.kvIdx <= b.kv.hi; ++p.kvIdx) {
        bool m = evaluate(mask, p, args).asBool();
        any |= m;
        all &= m;
      }
    return all ? TileClass::Full : any ? TileClass::Partial : TileClass::Empty;
  });
}

} // namespace flashjit
