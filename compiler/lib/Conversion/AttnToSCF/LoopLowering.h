//===- LoopLowering.h - Helpers of convert-attn-to-scf ---------*- C++ -*-===//
//
// The loop, memory and region helpers every tile-op lowering of
// convert-attn-to-scf uses (AttnToSCF.cpp: the forward's tile ops and the
// pass; AttnToSCFBackward.cpp: the backward's). Private to
// compiler/lib/Conversion/AttnToSCF.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_LIB_CONVERSION_ATTNTOSCF_LOOPLOWERING_H
#define FLASHJIT_LIB_CONVERSION_ATTNTOSCF_LOOPLOWERING_H

#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <limits>

namespace flashjit::attn::loops {

namespace arith = mlir::arith;
namespace LLVM = mlir::LLVM;
namespace memref = mlir::memref;
namespace scf = mlir::scf;
using llvm::cast;
using llvm::function_ref;
using llvm::SmallVector;
using mlir::Block;
using mlir::ImplicitLocOpBuilder;
using mlir::IRMapping;
using mlir::MemRefType;
using mlir::OpBuilder;
using mlir::Operation;
using mlir::Region;
using mlir::Type;
using mlir::TypeRange;
using mlir::Value;
using mlir::ValueRange;

/// Shared helpers for emitting loops at one op's position.
class Lowering {
public:
  explicit Lowering(Operation *op) : b(op->getLoc(), op) {
    f32 = b.getF32Type();
    i64 = b.getI64Type();
    ptrTy = LLVM::LLVMPointerType::get(b.getContext());
    reassoc = arith::FastMathFlagsAttr::get(b.getContext(),
                                            arith::FastMathFlags::reassoc);
  }

  ImplicitLocOpBuilder b;
  Type f32, i64, ptrTy;
  arith::FastMathFlagsAttr reassoc;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value f(float v) {
    return arith::ConstantOp::create(b, b.getF32FloatAttr(v));
  }
  Value toIndex(Value v) {
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  Value toI64(Value v) { return arith::IndexCastOp::create(b, i64, v); }
  Value toI32(Value i64v) {
    return arith::TruncIOp::create(b, b.getI32Type(), i64v);
  }
  Value ninf() { return f(-std::numeric_limits<float>::infinity()); }

  /// for iv in [lb, ub): body(iv).
  void loop(Value lb, Value ub, function_ref<void(Value)> body) {
    auto forOp = scf::ForOp::create(b, lb, ub, idx(1));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(forOp.getBody()->getTerminator());
    body(forOp.getInductionVar());
  }
  /// A reduction loop: returns the final value of `acc = step(iv, acc)`.
  Value reduce(Value lb, Value ub, Value init,
               function_ref<Value(Value, Value)> step) {
    auto forOp = scf::ForOp::create(b, lb, ub, idx(1), ValueRange{init});
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(forOp.getBody());
    Value next =
        step(forOp.getInductionVar(), forOp.getRegionIterArgs().front());
    scf::YieldOp::create(b, next);
    return forOp.getResult(0);
  }
  void ifThen(Value cond, function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    body();
  }
  Value ifElse(Type t, Value cond, function_ref<Value()> thenFn,
               function_ref<Value()> elseFn) {
    auto ifOp = scf::IfOp::create(b, TypeRange{t}, cond, true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, thenFn());
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, elseFn());
    return ifOp.getResult(0);
  }
  int64_t dim(Value memref, unsigned i) {
    return cast<MemRefType>(memref.getType()).getDimSize(i);
  }
  unsigned rank(Value memref) {
    return cast<MemRefType>(memref.getType()).getRank();
  }
  Value load(Value m, ValueRange ivs) {
    return memref::LoadOp::create(b, m, ivs);
  }
  void store(Value v, Value m, ValueRange ivs) {
    memref::StoreOp::create(b, v, m, ivs);
  }

  /// Address of element \p offset (i64) of \p elem type at \p base.
  Value gep(Value base, Type elem, Value offset) {
    return LLVM::GEPOp::create(b, ptrTy, elem, base, ValueRange{offset});
  }
  /// Reads a memory element of type \p elem as f32.
  Value loadGlobal(Value base, Type elem, Value offset) {
    if (elem.isBF16()) { // bits << 16 is the f32 with the same value
      Value bits =
          LLVM::LoadOp::create(b, b.getI16Type(), gep(base, elem, offset));
      Value wide = arith::ExtUIOp::create(b, b.getI32Type(), bits);
      Value sh = arith::ShLIOp::create(
          b, wide, arith::ConstantOp::create(b, b.getI32IntegerAttr(16)));
      return arith::BitcastOp::create(b, f32, sh);
    }
    Value v = LLVM::LoadOp::create(b, elem, gep(base, elem, offset));
    if (elem.isF16())
      return arith::ExtFOp::create(b, f32, v);
    return v;
  }
  /// Writes the f32 \p v as \p elem, rounding to nearest even.
  void storeGlobal(Value v, Value base, Type elem, Value offset) {
    Value p = gep(base, elem, offset);
    if (elem.isBF16()) {
      Type i32 = b.getI32Type();
      auto c32 = [&](int32_t x) {
        return arith::ConstantOp::create(b, b.getI32IntegerAttr(x));
      };
      Value bits = arith::BitcastOp::create(b, i32, v);
      Value lsb = arith::AndIOp::create(
          b, arith::ShRUIOp::create(b, bits, c32(16)), c32(1));
      Value rounded = arith::ShRUIOp::create(
          b,
          arith::AddIOp::create(b, bits,
                                arith::AddIOp::create(b, c32(0x7FFF), lsb)),
          c32(16));
      Value isNan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, v, v);
      Value out = arith::SelectOp::create(b, isNan, c32(0x7FC0), rounded);
      LLVM::StoreOp::create(b, arith::TruncIOp::create(b, b.getI16Type(), out),
                            p);
      return;
    }
    if (elem.isF16())
      v = arith::TruncFOp::create(b, elem, v);
    LLVM::StoreOp::create(b, v, p);
  }

  /// Clones the single block of \p region at the insertion point with its
  /// arguments bound to \p args; returns the yielded value.
  Value inlineRegion(Region &region, ValueRange args) {
    IRMapping map;
    Block &blk = region.front();
    map.map(blk.getArguments(), args);
    for (Operation &op : blk.without_terminator())
      b.clone(op, map);
    return map.lookupOrDefault(cast<YieldOp>(blk.getTerminator()).getValue());
  }
  /// (batch, head, q0 + i, kv0 + j, seqlen_q, seqlen_k) as i32.
  SmallVector<Value> indexArgs(Value batch, Value head, Value q0, Value kv0,
                               Value i, Value j, Value sq, Value sk) {
    return {toI32(batch),
            toI32(head),
            toI32(arith::AddIOp::create(b, q0, toI64(i))),
            toI32(arith::AddIOp::create(b, kv0, toI64(j))),
            toI32(sq),
            toI32(sk)};
  }
};

/// The backward's tile ops (AttnToSCFBackward.cpp); each replaces nothing
/// itself: the pass erases \p op after the call.
void lower(LoadLseOp op);
void lower(RowDotOp op);
void lower(SoftmaxGradOp op);
void lower(ScoreGradOp op);

} // namespace flashjit::attn::loops

#endif // FLASHJIT_LIB_CONVERSION_ATTNTOSCF_LOOPLOWERING_H
