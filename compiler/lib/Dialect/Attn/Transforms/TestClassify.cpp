//===- TestClassify.cpp - Exposes the run-time tile classifier ------------===//
//
// Test pass `attn-test-classify`.
//
// Pre:  the module holds attn.attention ops.
// Post: for each attn.attention @f (left in place) the module also holds
//       func.func @f_classify(batch, head, q_lo, q_hi, kv_lo, kv_hi,
//       seqlen_q, seqlen_k: i64, params... by name) -> i8, returning 0
//       (empty), 1 (partial) or 2 (full) exactly as flashjit::classifyTile
//       does, built by the same buildTileClassifier the kernels use. With
//       buffer-ranges=true it also takes (data: !llvm.ptr, size: i64) per
//       buffer after the parameters and reads them (buffer-range rule).
//
//===----------------------------------------------------------------------===//
#include "flashjit/Dialect/Attn/Transforms/KernelRegions.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace flashjit::attn {
#define GEN_PASS_DEF_ATTNTESTCLASSIFY
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace flashjit::attn

using namespace mlir;
using namespace flashjit::attn;

namespace {

struct AttnTestClassifyPass
    : public flashjit::attn::impl::AttnTestClassifyBase<AttnTestClassifyPass> {
  using AttnTestClassifyBase::AttnTestClassifyBase;

  void runOnOperation() override {
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops)
      emitClassifier(op, bufferRanges);
  }

  static void emitClassifier(AttentionOp op, bool withBuffers) {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    b.setInsertionPointAfter(op);
    Type i64 = b.getI64Type();
    SmallVector<Type> args(8, i64);
    for (NamedAttribute p : op.getParams())
      args.push_back(cast<TypeAttr>(p.getValue()).getValue());
    unsigned bufferBase = args.size();
    if (withBuffers)
      for (unsigned i = 0, e = op.getBuffers().size(); i < e; ++i)
        args.append({LLVM::LLVMPointerType::get(b.getContext()), i64});
    auto fn = func::FuncOp::create(
        b, (op.getSymName() + "_classify").str(),
        FunctionType::get(b.getContext(), args, {b.getI8Type()}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    auto a = [&](unsigned i) { return entry->getArgument(i); };
    TileBoxValues box{a(0), a(1), a(2), a(3), a(4), a(5), a(6), a(7)};
    auto data = [&](BufferLoadOp l, unsigned field) {
      return a(bufferBase + 2 * bufferSlot(op, l.getName()) + field);
    };
    BufferReader reader{
        [&](OpBuilder &, Location, BufferLoadOp l) { return data(l, 1); },
        [&](OpBuilder &ib, Location loc, BufferLoadOp l, Value i) {
          return loadHostElement(ib, loc, l.getType(), data(l, 0), i);
        }};
    TileClassValues cls = buildTileClassifier(
        b, b.getLoc(), op.getMask(), box,
        [&](Operation *p) -> Value {
          unsigned i = 0;
          for (NamedAttribute d : op.getParams()) {
            if (d.getName() == cast<ParamOp>(p).getName())
              return a(8 + i);
            ++i;
          }
          return Value();
        },
        withBuffers ? &reader : nullptr);
    auto i8c = [&](int v) {
      return arith::ConstantOp::create(b, b.getI8IntegerAttr(v)).getResult();
    };
    Value t = arith::ConstantOp::create(b, b.getBoolAttr(true));
    Value full = arith::XOrIOp::create(b, cls.canBeFalse, t);
    Value notTrue = arith::XOrIOp::create(b, cls.canBeTrue, t);
    Value cls8 = arith::SelectOp::create(
        b, full, i8c(2), arith::SelectOp::create(b, notTrue, i8c(0), i8c(1)));
    // An empty box (no queries or no keys) is empty, as on the host.
    Value noBox = arith::OrIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, a(2), a(3)),
        arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, a(4), a(5)));
    func::ReturnOp::create(
        b, ValueRange{arith::SelectOp::create(b, noBox, i8c(0), cls8)});
  }
};

} // namespace
