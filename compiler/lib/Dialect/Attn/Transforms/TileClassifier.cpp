//===- TileClassifier.cpp - Run-time tile classification code -------------===//
//
// Abstract interpretation of a mask region, emitted as code. Each rule below
// is the IR twin of the rule of the same name in frontend/lib/TileClass.cpp
// (IntervalEvaluator); keep them in step. Values that are unbounded carry
// garbage lo/hi that no rule reads without first checking `bounded`.
//
// The buffer-range rule (when the caller passes a BufferReader) is the one
// rule that emits a loop: the scan over the elements a read may touch. Its
// bounds come from the index interval only when the rule applies, and make
// an empty loop otherwise, so no garbage index is ever read.
//
//===----------------------------------------------------------------------===//
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/frontend/TileClass.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace flashjit::attn {
namespace {

/// An abstract value. Int: bounded/lo/hi (i1, i64, i64) and the concrete
/// type (i32 or i64). Bool: canFalse/canTrue (i1). Unknown: a float, or an
/// int or bool this code does not model.
struct AVal {
  enum Kind { Int, Bool, Unknown } kind = Unknown;
  Type type;
  Value bounded, lo, hi;
  Value canFalse, canTrue;
};

class Classifier {
public:
  Classifier(OpBuilder &builder, Location loc, const TileBoxValues &box,
             function_ref<Value(Operation *)> paramValue,
             const BufferReader *buffers)
      : b(loc, builder), box(box), paramValue(paramValue), buffers(buffers) {
    i1 = b.getI1Type();
    i64 = b.getI64Type();
    i128 = b.getIntegerType(128);
  }

  TileClassValues run(Region &mask) {
    Block &block = mask.front();
    Value idx[6] = {box.batch, box.head,    box.qLo,
                    box.kvLo,  box.seqlenQ, box.seqlenK};
    Value idxHi[6] = {box.batch, box.head,    box.qHi,
                      box.kvHi,  box.seqlenQ, box.seqlenK};
    for (unsigned i = 0; i < 6; ++i)
      vals[block.getArgument(i)] =
          intRange(block.getArgument(i).getType(), idx[i], idxHi[i]);
    AVal r = evalBlock(block);
    if (r.kind != AVal::Bool)
      return {c1(true), c1(true)};
    return {r.canFalse, r.canTrue};
  }

private:
  ImplicitLocOpBuilder b;
  const TileBoxValues &box;
  function_ref<Value(Operation *)> paramValue;
  const BufferReader *buffers;
  Type i1, i64, i128;
  llvm::DenseMap<Value, AVal> vals;

  // --- small builders -----------------------------------------------------
  Value c1(bool v) { return arith::ConstantOp::create(b, b.getBoolAttr(v)); }
  Value c64(int64_t v) {
    return arith::ConstantOp::create(b, b.getI64IntegerAttr(v));
  }
  Value c128(int64_t v) {
    return arith::ConstantOp::create(
        b, IntegerAttr::get(i128, APInt(128, v, /*isSigned=*/true)));
  }
  Value notV(Value x) { return b.createOrFold<arith::XOrIOp>(x, c1(true)); }
  Value andV(Value x, Value y) { return b.createOrFold<arith::AndIOp>(x, y); }
  Value orV(Value x, Value y) { return b.createOrFold<arith::OrIOp>(x, y); }
  Value sel(Value c, Value x, Value y) {
    return b.createOrFold<arith::SelectOp>(c, x, y);
  }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(p, x, y);
  }
  Value wide(Value x) { return b.createOrFold<arith::ExtSIOp>(i128, x); }
  Value narrow(Value x) { return b.createOrFold<arith::TruncIOp>(i64, x); }
  Value smin(Value x, Value y) { return b.createOrFold<arith::MinSIOp>(x, y); }
  Value smax(Value x, Value y) { return b.createOrFold<arith::MaxSIOp>(x, y); }

  AVal unknown(Type t) {
    AVal v;
    v.type = t;
    if (t.isInteger(1)) {
      v.kind = AVal::Bool;
      v.canFalse = v.canTrue = c1(true);
    } else if (t.isInteger(32) || t.isInteger(64)) {
      v.kind = AVal::Int;
      v.bounded = c1(false);
      v.lo = v.hi = c64(0);
    }
    return v;
  }
  AVal boolean(Value canFalse, Value canTrue) {
    AVal v;
    v.kind = AVal::Bool;
    v.type = i1;
    v.canFalse = canFalse;
    v.canTrue = canTrue;
    return v;
  }
  AVal intRange(Type t, Value lo, Value hi) {
    AVal v;
    v.kind = AVal::Int;
    v.type = t;
    v.bounded = c1(true);
    v.lo = lo;
    v.hi = hi;
    return v;
  }
  /// fit(): [lo, hi] (i128) if inside type t's range, else unbounded.
  AVal fit(Type t, Value inputsBounded, Value lo, Value hi) {
    int64_t tmin = t.isInteger(32) ? INT32_MIN : INT64_MIN;
    int64_t tmax = t.isInteger(32) ? INT32_MAX : INT64_MAX;
    Value ok = andV(cmp(arith::CmpIPredicate::sge, lo, c128(tmin)),
                    cmp(arith::CmpIPredicate::sle, hi, c128(tmax)));
    AVal v = intRange(t, narrow(lo), narrow(hi));
    v.bounded = andV(inputsBounded, ok);
    return v;
  }
  /// truncDiv on i64 values known to fit the type, exact in i128; the
  /// divisor is made safe so the code never traps (its result is unused
  /// when the divisor interval contains 0).
  Value div128(Value x, Value y) {
    Value isM1 = cmp(arith::CmpIPredicate::eq, y, c64(-1));
    Value safe = sel(cmp(arith::CmpIPredicate::eq, y, c64(0)), c64(1), y);
    safe = sel(isM1, c64(1), safe);
    Value q = wide(b.createOrFold<arith::DivSIOp>(x, safe));
    Value neg = b.createOrFold<arith::SubIOp>(c128(0), wide(x));
    return sel(isM1, neg, q);
  }
  Value min4(Value a, Value b2, Value c, Value d) {
    return smin(smin(a, b2), smin(c, d));
  }
  Value max4(Value a, Value b2, Value c, Value d) {
    return smax(smax(a, b2), smax(c, d));
  }

  AVal get(Value v) {
    auto it = vals.find(v);
    if (it != vals.end())
      return it->second;
    return unknown(v.getType()); // defined outside the region
  }

  AVal evalBlock(Block &block) {
    for (Operation &op : block) {
      if (auto y = dyn_cast<YieldOp>(op))
        return get(y.getValue());
      if (auto y = dyn_cast<scf::YieldOp>(op))
        return y.getNumOperands() == 1 ? get(y.getOperand(0))
                                       : unknown(b.getF32Type());
      if (op.getNumResults() == 1)
        vals[op.getResult(0)] = eval(op);
    }
    return unknown(b.getF32Type());
  }

  /// select(): host rule `!c.canFalse ? T : !c.canTrue ? E : join(T, E)`.
  AVal select(Type t, const AVal &c, const AVal &x, const AVal &y) {
    if (c.kind != AVal::Bool || x.kind != y.kind || x.kind == AVal::Unknown)
      return unknown(t);
    Value takeT = notV(c.canFalse), takeE = notV(c.canTrue);
    auto pick = [&](Value tv, Value ev, Value jv) {
      return sel(takeT, tv, sel(takeE, ev, jv));
    };
    if (x.kind == AVal::Bool)
      return boolean(pick(x.canFalse, y.canFalse, orV(x.canFalse, y.canFalse)),
                     pick(x.canTrue, y.canTrue, orV(x.canTrue, y.canTrue)));
    AVal v = intRange(t, pick(x.lo, y.lo, smin(x.lo, y.lo)),
                      pick(x.hi, y.hi, smax(x.hi, y.hi)));
    v.bounded = pick(x.bounded, y.bounded, andV(x.bounded, y.bounded));
    return v;
  }

  AVal compare(arith::CmpIPredicate p, const AVal &x, const AVal &y) {
    using P = arith::CmpIPredicate;
    if (x.kind == AVal::Bool && y.kind == AVal::Bool &&
        (p == P::eq || p == P::ne)) {
      Value canEq =
          orV(andV(x.canTrue, y.canTrue), andV(x.canFalse, y.canFalse));
      Value canNe =
          orV(andV(x.canTrue, y.canFalse), andV(x.canFalse, y.canTrue));
      return p == P::eq ? boolean(canNe, canEq) : boolean(canEq, canNe);
    }
    if (x.kind != AVal::Int || y.kind != AVal::Int)
      return unknown(i1);
    Value f, t;
    switch (p) {
    case P::slt:
      f = cmp(P::sge, x.hi, y.lo);
      t = cmp(P::slt, x.lo, y.hi);
      break;
    case P::sle:
      f = cmp(P::sgt, x.hi, y.lo);
      t = cmp(P::sle, x.lo, y.hi);
      break;
    case P::sgt:
      f = cmp(P::sle, x.lo, y.hi);
      t = cmp(P::sgt, x.hi, y.lo);
      break;
    case P::sge:
      f = cmp(P::slt, x.lo, y.hi);
      t = cmp(P::sge, x.hi, y.lo);
      break;
    case P::eq:
    case P::ne: {
      Value disjoint = orV(cmp(P::slt, x.hi, y.lo), cmp(P::slt, y.hi, x.lo));
      Value same = andV(andV(cmp(P::eq, x.lo, x.hi), cmp(P::eq, y.lo, y.hi)),
                        cmp(P::eq, x.lo, y.lo));
      f = p == P::eq ? notV(same) : notV(disjoint);
      t = p == P::eq ? notV(disjoint) : notV(same);
      break;
    }
    default:
      return unknown(i1);
    }
    Value both = andV(x.bounded, y.bounded);
    return boolean(orV(notV(both), f), orV(notV(both), t));
  }

  /// bufferRange(): host rule `bounded && 0 <= lo && hi < size &&
  /// hi - lo < kBufferRangeScanLimit ? [min, max] of elements lo..hi :
  /// unknown`. The scan runs min/max in the element type (so LLVM can
  /// vectorise it) from the type's extremes.
  AVal bufferRange(BufferLoadOp l, const AVal &x) {
    Type t = l.getType();
    if (!buffers || x.kind != AVal::Int)
      return unknown(t);
    using P = arith::CmpIPredicate;
    Value size = buffers->size(b, b.getLoc(), l);
    Value width = b.createOrFold<arith::SubIOp>(wide(x.hi), wide(x.lo));
    Value scan =
        andV(andV(x.bounded, cmp(P::slt, width, c128(kBufferRangeScanLimit))),
             andV(cmp(P::sge, x.lo, c64(0)), cmp(P::slt, x.hi, size)));
    Value end = sel(scan, b.createOrFold<arith::AddIOp>(x.hi, c64(1)), x.lo);
    auto it = cast<IntegerType>(t);
    Value init[] = {
        arith::ConstantOp::create(
            b, IntegerAttr::get(it, APInt::getSignedMaxValue(it.getWidth()))),
        arith::ConstantOp::create(
            b, IntegerAttr::get(it, APInt::getSignedMinValue(it.getWidth())))};
    auto loop = scf::ForOp::create(b, x.lo, end, c64(1), init);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      Value e = buffers->loadElement(b, b.getLoc(), l, loop.getInductionVar());
      Value lo = smin(loop.getRegionIterArgs()[0], e);
      Value hi = smax(loop.getRegionIterArgs()[1], e);
      scf::YieldOp::create(b, ValueRange{lo, hi});
    }
    Value lo = loop.getResult(0), hi = loop.getResult(1);
    if (t != i64) {
      lo = b.createOrFold<arith::ExtSIOp>(i64, lo);
      hi = b.createOrFold<arith::ExtSIOp>(i64, hi);
    }
    AVal v = intRange(t, lo, hi);
    v.bounded = scan;
    return v;
  }

  AVal eval(Operation &op) {
    Type t = op.getResult(0).getType();
    auto operand = [&](unsigned i) { return get(op.getOperand(i)); };
    using P = arith::CmpIPredicate;

    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto ia = dyn_cast<IntegerAttr>(c.getValue());
      if (!ia)
        return unknown(t);
      if (t.isInteger(1))
        return boolean(c1(ia.getValue().isZero()), c1(!ia.getValue().isZero()));
      int64_t v = ia.getValue().getSExtValue();
      return intRange(t, c64(v), c64(v));
    }
    if (auto p = dyn_cast<ParamOp>(op)) {
      if (!t.isInteger(32) && !t.isInteger(64))
        return unknown(t);
      Value v = paramValue(p);
      if (!v)
        return unknown(t);
      if (v.getType() != i64)
        v = b.createOrFold<arith::ExtSIOp>(i64, v);
      return intRange(t, v, v);
    }
    if (isa<arith::XOrIOp>(op) && t.isInteger(1)) {
      AVal x = operand(0), y = operand(1);
      return boolean(
          orV(andV(x.canFalse, y.canFalse), andV(x.canTrue, y.canTrue)),
          orV(andV(x.canFalse, y.canTrue), andV(x.canTrue, y.canFalse)));
    }
    if (isa<arith::AndIOp>(op) && t.isInteger(1)) {
      AVal x = operand(0), y = operand(1);
      return boolean(orV(x.canFalse, y.canFalse), andV(x.canTrue, y.canTrue));
    }
    if (isa<arith::OrIOp>(op) && t.isInteger(1)) {
      AVal x = operand(0), y = operand(1);
      return boolean(andV(x.canFalse, y.canFalse), orV(x.canTrue, y.canTrue));
    }
    if (auto c = dyn_cast<arith::CmpIOp>(op))
      return compare(c.getPredicate(), operand(0), operand(1));
    if (auto s = dyn_cast<arith::SelectOp>(op))
      return select(t, operand(0), operand(1), operand(2));
    if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      if (ifOp.getNumResults() != 1 || !ifOp.elseBlock())
        return unknown(t);
      AVal c = get(ifOp.getCondition());
      AVal x = evalBlock(*ifOp.thenBlock());
      AVal y = evalBlock(*ifOp.elseBlock());
      return select(t, c, x, y);
    }
    if (!t.isInteger(32) && !t.isInteger(64))
      return unknown(t); // floats, and bools from float comparisons
    if (auto l = dyn_cast<BufferLoadOp>(op))
      return bufferRange(l, operand(0));

    if (isa<arith::ExtUIOp>(op)) { // bool -> int
      AVal x = operand(0);
      if (x.kind != AVal::Bool)
        return unknown(t);
      return intRange(t, sel(x.canFalse, c64(0), c64(1)),
                      sel(x.canTrue, c64(1), c64(0)));
    }
    if (isa<arith::ExtSIOp>(op)) { // i32 -> i64 always fits
      AVal x = operand(0);
      if (x.kind != AVal::Int)
        return unknown(t);
      x.type = t;
      return x;
    }
    if (isa<arith::TruncIOp>(op)) {
      AVal x = operand(0);
      if (x.kind != AVal::Int)
        return unknown(t);
      return fit(t, x.bounded, wide(x.lo), wide(x.hi));
    }
    if (isa<math::AbsIOp>(op)) {
      AVal x = operand(0);
      if (x.kind != AVal::Int)
        return unknown(t);
      Value lo = wide(x.lo), hi = wide(x.hi), zero = c128(0);
      Value nonNeg = cmp(P::sge, lo, zero), nonPos = cmp(P::sle, hi, zero);
      Value negLo = b.createOrFold<arith::SubIOp>(zero, lo);
      Value negHi = b.createOrFold<arith::SubIOp>(zero, hi);
      Value rlo = sel(nonNeg, lo, sel(nonPos, negHi, zero));
      Value rhi = sel(nonNeg, hi, sel(nonPos, negLo, smax(negLo, hi)));
      return fit(t, x.bounded, rlo, rhi);
    }
    if (op.getNumOperands() != 2)
      return unknown(t);
    AVal x = operand(0), y = operand(1);
    if (x.kind != AVal::Int || y.kind != AVal::Int)
      return unknown(t);
    Value both = andV(x.bounded, y.bounded);
    Value xl = wide(x.lo), xh = wide(x.hi), yl = wide(y.lo), yh = wide(y.hi);
    if (isa<arith::AddIOp>(op))
      return fit(t, both, b.createOrFold<arith::AddIOp>(xl, yl),
                 b.createOrFold<arith::AddIOp>(xh, yh));
    if (isa<arith::SubIOp>(op))
      return fit(t, both, b.createOrFold<arith::SubIOp>(xl, yh),
                 b.createOrFold<arith::SubIOp>(xh, yl));
    if (isa<arith::MulIOp>(op)) {
      Value p1 = b.createOrFold<arith::MulIOp>(xl, yl);
      Value p2 = b.createOrFold<arith::MulIOp>(xl, yh);
      Value p3 = b.createOrFold<arith::MulIOp>(xh, yl);
      Value p4 = b.createOrFold<arith::MulIOp>(xh, yh);
      return fit(t, both, min4(p1, p2, p3, p4), max4(p1, p2, p3, p4));
    }
    if (isa<DivOp>(op)) {
      Value hasZero =
          andV(cmp(P::sle, y.lo, c64(0)), cmp(P::sge, y.hi, c64(0)));
      Value q1 = div128(x.lo, y.lo), q2 = div128(x.lo, y.hi);
      Value q3 = div128(x.hi, y.lo), q4 = div128(x.hi, y.hi);
      return fit(t, andV(both, notV(hasZero)), min4(q1, q2, q3, q4),
                 max4(q1, q2, q3, q4));
    }
    if (isa<RemOp>(op)) {
      Value m = y.lo;
      Value valid = andV(
          both, andV(cmp(P::eq, y.lo, y.hi),
                     andV(cmp(P::sgt, m, c64(0)), cmp(P::sge, x.lo, c64(0)))));
      Value safe = sel(cmp(P::sgt, m, c64(0)), m, c64(1));
      Value r1 = b.createOrFold<arith::RemSIOp>(x.lo, safe);
      Value r2 = b.createOrFold<arith::RemSIOp>(x.hi, safe);
      Value width = b.createOrFold<arith::SubIOp>(x.hi, x.lo);
      Value tight = andV(cmp(P::slt, width, m), cmp(P::sle, r1, r2));
      Value mMinus1 = b.createOrFold<arith::SubIOp>(m, c64(1));
      AVal v = intRange(t, sel(tight, r1, c64(0)),
                        sel(tight, r2, smin(mMinus1, x.hi)));
      v.bounded = valid;
      return v;
    }
    if (isa<arith::MinSIOp>(op)) {
      AVal v = intRange(t, smin(x.lo, y.lo), smin(x.hi, y.hi));
      v.bounded = both;
      return v;
    }
    if (isa<arith::MaxSIOp>(op)) {
      AVal v = intRange(t, smax(x.lo, y.lo), smax(x.hi, y.hi));
      v.bounded = both;
      return v;
    }
    return unknown(t);
  }
};

} // namespace

TileClassValues buildTileClassifier(OpBuilder &b, Location loc, Region &mask,
                                    const TileBoxValues &box,
                                    function_ref<Value(Operation *)> paramValue,
                                    const BufferReader *buffers) {
  return Classifier(b, loc, box, paramValue, buffers).run(mask);
}

} // namespace flashjit::attn
