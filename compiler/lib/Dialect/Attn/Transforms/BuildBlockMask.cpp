//===- BuildBlockMask.cpp - The block-mask builder of an attention kernel -===//
//
// Pass `attn-build-block-mask`.
//
// Pre:  the module holds verified attn.attention ops.
// Post: each attn.attention @f is left in place and the module also holds
//       func.func @f_block_mask with the builder ABI of
//       flashjit/compiler/KernelAbi.h. Its body is one scf.for over block-
//       mask rows (batch, head, q tile) and, per row, one scf.for over the
//       row's key tiles that classifies each tile (interval arithmetic by
//       buildTileClassifier, with the buffer-range rule reading the
//       buffers; attn.mask_reduce over the tile's elements where that
//       cannot decide, e.g. a tile that straddles documents) and appends
//       partial and full tiles to their lists. The mask region is cloned
//       with attn.param and attn.buffer_load replaced as in attn-tile.
//
// The classification is exact: a tile is full when the mask holds at every
// element of the tile clipped to the sequence, empty when it holds at none
// (flashjit::referenceBlockMask is the specification).
//
//===----------------------------------------------------------------------===//
#include "flashjit/Dialect/Attn/Transforms/KernelRegions.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace flashjit::attn {
#define GEN_PASS_DEF_ATTNBUILDBLOCKMASK
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace flashjit::attn

using namespace mlir;
using namespace flashjit::attn;

namespace {

class BuilderEmitter : I64Emitter {
public:
  BuilderEmitter(AttentionOp op, int64_t blockM, int64_t blockN, bool varlen)
      : I64Emitter(op.getLoc(), op.getContext()), op(op), bm(blockM),
        bn(blockN), varlen(varlen) {}

  void emit() {
    MLIRContext *ctx = op.getContext();
    ptr = LLVM::LLVMPointerType::get(ctx);
    i64 = b.getI64Type();
    unsigned numBuffers = op.getBuffers().size();
    SmallVector<Type> args{ptr};
    for (unsigned i = 0; i < numBuffers; ++i)
      args.append({ptr, i64});
    for (NamedAttribute p : op.getParams())
      args.push_back(cast<TypeAttr>(p.getValue()).getValue());
    args.append(2, i64);
    if (varlen)
      args.append(2, ptr);
    args.append(4, ptr);
    args.append(4 + 2, i64);

    b.setInsertionPointAfter(op);
    auto fn = func::FuncOp::create(b, (op.getSymName() + "_block_mask").str(),
                                   FunctionType::get(ctx, args, {}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    fnArgs = entry->getArguments();
    paramBase = 1 + 2 * numBuffers;
    unsigned s = paramBase + op.getParams().size();
    Value sqAll = arg(s), skAll = arg(s + 1);
    s += 2;
    Value cuQ, cuK;
    if (varlen) {
      cuQ = arg(s);
      cuK = arg(s + 1);
      s += 2;
    }
    Value numIdx = arg(s), idx = arg(s + 1), fullNum = arg(s + 2),
          fullIdx = arg(s + 3);
    Value maskHeads = arg(s + 5), nQ = arg(s + 6), cap = arg(s + 7);
    Value begin = arg(s + 8), end = arg(s + 9);

    auto rows = scf::ForOp::create(b, begin, end, c(1));
    b.setInsertionPoint(rows.getBody()->getTerminator());
    Value r = rows.getInductionVar();
    Value mt = arith::RemSIOp::create(b, r, nQ);
    Value bh = arith::DivSIOp::create(b, r, nQ);
    Value h = arith::RemSIOp::create(b, bh, maskHeads);
    Value bb = arith::DivSIOp::create(b, bh, maskHeads);
    Value sq = sqAll, sk = skAll;
    if (varlen) {
      sq = sub(loadI32(cuQ, add(bb, c(1))), loadI32(cuQ, bb));
      sk = sub(loadI32(cuK, add(bb, c(1))), loadI32(cuK, bb));
    }
    Value q0 = mul(mt, c(bm));
    Value qRows = arith::MinSIOp::create(b, c(bm), sub(sq, q0));
    // Rows past this sequence's queries (varlen) list nothing.
    Value nKT = arith::SelectOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::slt, q0, sq),
        ceilDiv(sk, bn), c(0));

    Value rowBase = mul(r, cap);
    auto tiles = scf::ForOp::create(b, c(0), nKT, c(1), ValueRange{c(0), c(0)});
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(tiles.getBody());
      Value kt = tiles.getInductionVar();
      Value np = tiles.getRegionIterArgs()[0],
            nf = tiles.getRegionIterArgs()[1];
      Value kv0 = mul(kt, c(bn));
      Value kvRows = arith::MinSIOp::create(b, c(bn), sub(sk, kv0));
      TileBoxValues box{bb,  h,
                        q0,  sub(add(q0, qRows), c(1)),
                        kv0, sub(add(kv0, kvRows), c(1)),
                        sq,  sk};
      // Buffer reads whose index covers a short in-range interval (a
      // document id over the tile) become the range of the elements read.
      BufferReader reader{
          [&](OpBuilder &, Location, BufferLoadOp l) {
            return arg(2 + 2 * bufferSlot(op, l.getName()));
          },
          [&](OpBuilder &ib, Location loc, BufferLoadOp l, Value i) {
            return loadHostElement(ib, loc, l.getType(),
                                   arg(1 + 2 * bufferSlot(op, l.getName())), i);
          }};
      TileClassValues cls = buildTileClassifier(
          b, b.getLoc(), op.getMask(), box,
          [&](Operation *p) { return paramArg(cast<ParamOp>(p).getName()); },
          &reader);
      // Undecided by intervals: evaluate every element.
      Value undecided = arith::AndIOp::create(b, cls.canBeFalse, cls.canBeTrue);
      Type i1 = b.getI1Type();
      auto exact = scf::IfOp::create(b, TypeRange{i1, i1}, undecided, true);
      {
        OpBuilder::InsertionGuard g2(b);
        b.setInsertionPointToStart(exact.thenBlock());
        auto red =
            MaskReduceOp::create(b, q0, kv0, qRows, kvRows, bb, h, sq, sk);
        cloneKernelRegion(
            op, op.getMask(), red.getMask(),
            {[&](StringRef name) { return paramArg(name); },
             [&](unsigned slot) {
               return std::pair{arg(1 + 2 * slot), arg(2 + 2 * slot)};
             },
             arg(0)});
        scf::YieldOp::create(b, ValueRange{red.getAny(), red.getAll()});
        b.setInsertionPointToStart(exact.elseBlock());
        scf::YieldOp::create(b,
                             ValueRange{cls.canBeTrue, notV(cls.canBeFalse)});
      }
      Value any = exact.getResult(0), all = exact.getResult(1);
      Value partial = arith::AndIOp::create(b, any, notV(all));
      appendIf(partial, idx, add(rowBase, np), kt);
      appendIf(all, fullIdx, add(rowBase, nf), kt);
      scf::YieldOp::create(
          b, ValueRange{add(np, arith::ExtUIOp::create(b, i64, partial)),
                        add(nf, arith::ExtUIOp::create(b, i64, all))});
    }
    storeI32(tiles.getResult(0), numIdx, r);
    storeI32(tiles.getResult(1), fullNum, r);
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b);
  }

private:
  AttentionOp op;
  int64_t bm, bn;
  bool varlen;
  Type ptr, i64;
  Block::BlockArgListType fnArgs;
  unsigned paramBase = 0;

  Value arg(unsigned i) { return fnArgs[i]; }
  Value gepI32(Value base, Value i) {
    return LLVM::GEPOp::create(b, ptr, b.getI32Type(), base, ValueRange{i});
  }
  Value loadI32(Value base, Value i) {
    return arith::ExtSIOp::create(
        b, i64, LLVM::LoadOp::create(b, b.getI32Type(), gepI32(base, i)));
  }
  void storeI32(Value v, Value base, Value i) {
    LLVM::StoreOp::create(b, arith::TruncIOp::create(b, b.getI32Type(), v),
                          gepI32(base, i));
  }
  /// if (cond) base[i] = v.
  void appendIf(Value cond, Value base, Value i, Value v) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    storeI32(v, base, i);
  }
  Value paramArg(StringRef name) {
    unsigned i = 0;
    for (NamedAttribute p : op.getParams()) {
      if (p.getName() == name)
        return arg(paramBase + i);
      ++i;
    }
    return Value();
  }
};

struct AttnBuildBlockMaskPass
    : public flashjit::attn::impl::AttnBuildBlockMaskBase<
          AttnBuildBlockMaskPass> {
  using AttnBuildBlockMaskBase::AttnBuildBlockMaskBase;

  void runOnOperation() override {
    if (blockM < 1 || blockN < 1) {
      getOperation().emitError() << "attn-build-block-mask: block-m and "
                                    "block-n must be positive";
      return signalPassFailure();
    }
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops)
      BuilderEmitter(op, blockM, blockN, varlen).emit();
  }
};

} // namespace
