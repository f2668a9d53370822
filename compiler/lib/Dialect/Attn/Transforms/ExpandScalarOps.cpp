//===- ExpandScalarOps.cpp - The DSL's scalar ops to standard ops ---------===//
//
// Pass `attn-expand-scalar`.
//
// Pre:  attn.div, attn.rem, attn.fptosi_sat and attn.load_elem anywhere
//       (typically inside attn.mask_select / attn.score_mod regions).
// Post: none of them remain; they are arith/scf/llvm ops with the DSL's
//       semantics (the interpreter, frontend/lib/Interpreter.cpp, is the
//       specification):
//         x / 0 = 0, MIN / -1 = MIN (wraps), x % 0 = x % -1 = 0;
//         f32 -> int truncates, saturates, NaN -> 0;
//         a buffer read outside [0, size) loads nothing, gives 0 and sets
//         the buffer's status flag (the host then reports a UserError).
//
//===----------------------------------------------------------------------===//
#include "flashjit/Dialect/Attn/Transforms/Passes.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>

namespace flashjit::attn {
#define GEN_PASS_DEF_ATTNEXPANDSCALAR
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace flashjit::attn

using namespace mlir;
using namespace flashjit::attn;

namespace {

Value intConst(ImplicitLocOpBuilder &b, Type t, int64_t v) {
  return arith::ConstantOp::create(b, b.getIntegerAttr(t, v));
}

Value expandDivRem(ImplicitLocOpBuilder &b, Value x, Value y, bool isDiv) {
  Type t = x.getType();
  Value zero = intConst(b, t, 0), one = intConst(b, t, 1);
  Value isZero = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, y, zero);
  Value isM1 =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, y, intConst(b, t, -1));
  Value special = arith::OrIOp::create(b, isZero, isM1);
  Value safe = arith::SelectOp::create(b, special, one, y);
  if (!isDiv) {
    Value r = arith::RemSIOp::create(b, x, safe);
    return arith::SelectOp::create(b, special, zero, r);
  }
  Value q = arith::DivSIOp::create(b, x, safe);
  Value neg = arith::SubIOp::create(b, zero, x); // wraps for MIN
  return arith::SelectOp::create(b, isZero, zero,
                                 arith::SelectOp::create(b, isM1, neg, q));
}

Value expandFPToSISat(ImplicitLocOpBuilder &b, Value x, Type t) {
  unsigned bits = t.getIntOrFloatBitWidth();
  float limit = std::ldexp(1.0f, bits - 1); // 2^31 or 2^63, exact in f32
  Value hiF = arith::ConstantOp::create(b, b.getF32FloatAttr(limit));
  Value loF = arith::ConstantOp::create(b, b.getF32FloatAttr(-limit));
  Value maxI = arith::ConstantOp::create(
      b, b.getIntegerAttr(t, APInt::getSignedMaxValue(bits)));
  Value minI = arith::ConstantOp::create(
      b, b.getIntegerAttr(t, APInt::getSignedMinValue(bits)));
  // Clamp first so fptosi never sees an out-of-range value (poison).
  Value inRange = arith::AndIOp::create(
      b, arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, x, hiF),
      arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, x, loF));
  Value safe = arith::SelectOp::create(
      b, inRange, x, arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f)));
  Value conv = arith::FPToSIOp::create(b, t, safe);
  Value isNan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, x, x);
  Value big = arith::CmpFOp::create(b, arith::CmpFPredicate::OGE, x, hiF);
  Value r = arith::SelectOp::create(
      b, inRange, conv, arith::SelectOp::create(b, big, maxI, minI));
  return arith::SelectOp::create(b, isNan, intConst(b, t, 0), r);
}

Value expandLoadElem(ImplicitLocOpBuilder &b, LoadElemOp op) {
  Type i64 = b.getI64Type();
  Type ptr = LLVM::LLVMPointerType::get(b.getContext());
  Value idx = op.getIndex();
  if (idx.getType() != i64)
    idx = arith::ExtSIOp::create(b, i64, idx);
  Value inRange = arith::AndIOp::create(
      b,
      arith::CmpIOp::create(b, arith::CmpIPredicate::sge, idx,
                            intConst(b, i64, 0)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::slt, idx, op.getSize()));
  Type t = op.getType();
  auto ifOp = scf::IfOp::create(b, TypeRange{t}, inRange, true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value p = LLVM::GEPOp::create(b, ptr, t, op.getBase(), ValueRange{idx});
    scf::YieldOp::create(b, ValueRange{LLVM::LoadOp::create(b, t, p)});
    b.setInsertionPointToStart(ifOp.elseBlock());
    Type i32 = b.getI32Type();
    Value flag =
        LLVM::GEPOp::create(b, ptr, i32, op.getStatus(),
                            ValueRange{intConst(b, i64, op.getSlot())});
    LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::_or, flag,
                              intConst(b, i32, 1),
                              LLVM::AtomicOrdering::monotonic);
    Value zero =
        t.isF32() ? Value(arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f)))
                  : intConst(b, t, 0);
    scf::YieldOp::create(b, ValueRange{zero});
  }
  return ifOp.getResult(0);
}

struct AttnExpandScalarPass
    : public flashjit::attn::impl::AttnExpandScalarBase<AttnExpandScalarPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      if (isa<DivOp, RemOp, FPToSISatOp, LoadElemOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      ImplicitLocOpBuilder b(op->getLoc(), op);
      Value r;
      if (auto d = dyn_cast<DivOp>(op))
        r = expandDivRem(b, d.getLhs(), d.getRhs(), true);
      else if (auto m = dyn_cast<RemOp>(op))
        r = expandDivRem(b, m.getLhs(), m.getRhs(), false);
      else if (auto c = dyn_cast<FPToSISatOp>(op))
        r = expandFPToSISat(b, c.getIn(), c.getType());
      else
        r = expandLoadElem(b, cast<LoadElemOp>(op));
      op->getResult(0).replaceAllUsesWith(r);
      op->erase();
    }
  }
};

} // namespace
