//===- TileAttention.cpp - attn.attention to a FlashAttention-2 program ---===//
//
// Pass `attn-tile`.
//
// Pre:  the module holds attn.attention ops (as MLIRGen builds them), each
//       verified.
// Post: each attn.attention @f is replaced by func.func @f with the kernel
//       ABI of flashjit/compiler/KernelAbi.h, whose body is scf loops over
//       work items and K/V tiles, attn tile ops on memref tiles allocated
//       once at function entry, the run-time tile classification emitted
//       by buildTileClassifier, and the user's regions cloned into
//       attn.mask_select / attn.score_mod with attn.param replaced by the
//       kernel argument and attn.buffer_load by attn.load_elem. No
//       attn.attention, attn.param or attn.buffer_load remains.
//
// Algorithm (FlashAttention-2 forward, one work item = one (batch, head,
// q tile)): m = -inf, l = 0, acc = 0; for each K/V tile that is not empty:
// S = (scale * log2 e) Q K^T (log2 e moves after the score modifier when
// there is one), mask (only on partial tiles; bounds always), m' = max(m,
// rowmax S), P = exp2(S - m'), alpha = exp2(m - m'), l = alpha l + rowsum P,
// acc = alpha acc + P V, m = m'. Then O = acc / l and LSE = (m + log2 l) ln 2,
// with O = 0 and LSE = -inf on rows with l = 0.
//
//===----------------------------------------------------------------------===//
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>

namespace flashjit::attn {
#define GEN_PASS_DEF_ATTNTILE
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace flashjit::attn

using namespace mlir;
using namespace flashjit::attn;

namespace {

constexpr double kLog2e = 1.4426950408889634;

/// Builds the kernel function for one attn.attention op.
class KernelEmitter {
public:
  KernelEmitter(AttentionOp op, int64_t blockM, int64_t blockN, bool count)
      : op(op), bm(blockM), bn(blockN), count(count),
        b(op.getLoc(), op.getContext()) {}

  func::FuncOp emit() {
    MLIRContext *ctx = op.getContext();
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    i64 = b.getI64Type();
    f32 = b.getF32Type();

    // Kernel signature: see KernelAbi.h.
    SmallVector<Type> args(7, ptr);
    numBuffers = op.getBuffers().size();
    numParams = op.getParams().size();
    for (unsigned i = 0; i < numBuffers; ++i)
      args.append({ptr, i64});
    for (NamedAttribute p : op.getParams())
      args.push_back(cast<TypeAttr>(p.getValue()).getValue());
    args.append(3 + 19 + 2, i64);

    b.setInsertionPoint(op);
    auto fn = func::FuncOp::create(b, op.getSymName(),
                                   FunctionType::get(ctx, args, {}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    fnArgs = entry->getArguments();
    unsigned s = 7 + 2 * numBuffers + numParams;
    Value batch = arg(s), sq = arg(s + 1), sk = arg(s + 2);
    auto strides = [&](unsigned first, unsigned n) {
      return fnArgs.slice(s + 3 + first, n);
    };
    ValueRange qs = strides(0, 4), ks = strides(4, 4), vs = strides(8, 4),
               os = strides(12, 4), ls = strides(16, 3);
    Value begin = arg(s + 22), end = arg(s + 23);
    (void)batch; // items already encode the batch

    int64_t dqk = op.getHeadDimQk(), dv = op.getHeadDimV();
    int64_t hq = op.getHeadsQ(), group = hq / op.getHeadsKv();
    // Tiles live on the stack, allocated once (not per loop iteration).
    Value qT = tileAlloca({bm, dqk}), kT = tileAlloca({bn, dqk}),
          vT = tileAlloca({bn, dv});
    Value sT = tileAlloca({bm, bn}), acc = tileAlloca({bm, dv});
    Value m = tileAlloca({bm}), mNew = tileAlloca({bm}), l = tileAlloca({bm}),
          alpha = tileAlloca({bm});
    Value ninf = arith::ConstantOp::create(
        b, b.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
    Value zeroF = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));

    Value nMT = ceilDiv(sq, bm), nKT = ceilDiv(sk, bn);
    auto items = scf::ForOp::create(b, begin, end, c(1));
    b.setInsertionPoint(items.getBody()->getTerminator());
    Value item = items.getInductionVar();
    Value mt = arith::RemSIOp::create(b, item, nMT);
    Value bh = arith::DivSIOp::create(b, item, nMT);
    Value h = arith::RemSIOp::create(b, bh, c(hq));
    Value bb = arith::DivSIOp::create(b, bh, c(hq));
    Value hk = arith::DivSIOp::create(b, h, c(group));
    Value q0 = mul(mt, c(bm));
    Value qRows = arith::MinSIOp::create(b, c(bm), sub(sq, q0));
    Value qOff = add(add(mul(bb, qs[0]), mul(h, qs[1])), mul(q0, qs[2]));
    LoadTileOp::create(b, arg(0), qOff, qRows, qs[2], qs[3], qT,
                       op.getDtypeQAttr());
    FillOp::create(b, zeroF, acc);
    FillOp::create(b, ninf, m);
    FillOp::create(b, zeroF, l);

    auto tiles = scf::ForOp::create(b, c(0), nKT, c(1));
    b.setInsertionPoint(tiles.getBody()->getTerminator());
    Value kt = tiles.getInductionVar();
    Value kv0 = mul(kt, c(bn));
    Value kvRows = arith::MinSIOp::create(b, c(bn), sub(sk, kv0));

    // Run-time tile classification (interval arithmetic over the mask).
    TileBoxValues box{
        bb, h, q0, sub(add(q0, qRows), c(1)), kv0, sub(add(kv0, kvRows), c(1)),
        sq, sk};
    TileClassValues cls = buildTileClassifier(
        b, b.getLoc(), op.getMask(), box,
        [&](Operation *p) { return paramArg(cast<ParamOp>(p).getName()); });
    Value full = notV(cls.canBeFalse);
    Value empty = arith::AndIOp::create(b, cls.canBeFalse, notV(cls.canBeTrue));
    if (count)
      countTile(arg(6), full, empty);

    auto live = scf::IfOp::create(b, notV(empty), /*withElseRegion=*/false);
    b.setInsertionPoint(live.thenBlock()->getTerminator());
    Value kOff = add(add(mul(bb, ks[0]), mul(hk, ks[1])), mul(kv0, ks[2]));
    Value vOff = add(add(mul(bb, vs[0]), mul(hk, vs[1])), mul(kv0, vs[2]));
    LoadTileOp::create(b, arg(1), kOff, kvRows, ks[2], ks[3], kT,
                       op.getDtypeKAttr());
    LoadTileOp::create(b, arg(2), vOff, kvRows, vs[2], vs[3], vT,
                       op.getDtypeVAttr());

    bool identityScore = isIdentityScore();
    double scale = op.getScale().convertToDouble();
    DotOp::create(b, qT, kT, sT, b.getUnitAttr(), UnitAttr(),
                  b.getF32FloatAttr(identityScore ? scale * kLog2e : scale));

    SmallVector<Value, 8> where{q0, kv0, qRows, kvRows, bb, h, sq, sk};
    // Full tiles: bounds only. Partial tiles: the user's mask per element.
    auto isFull = scf::IfOp::create(b, full, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(isFull.thenBlock()->getTerminator());
      auto sel =
          MaskSelectOp::create(b, sT, where[0], where[1], where[2], where[3],
                               where[4], where[5], where[6], where[7]);
      Block *blk = b.createBlock(&sel.getMask(), {},
                                 SmallVector<Type>(6, b.getI32Type()),
                                 SmallVector<Location>(6, b.getLoc()));
      b.setInsertionPointToStart(blk);
      YieldOp::create(b, arith::ConstantOp::create(b, b.getBoolAttr(true)));
      b.setInsertionPoint(isFull.elseBlock()->getTerminator());
      auto part =
          MaskSelectOp::create(b, sT, where[0], where[1], where[2], where[3],
                               where[4], where[5], where[6], where[7]);
      cloneRegion(op.getMask(), part.getMask());
    }
    if (!identityScore) {
      auto mod = ScoreModOp::create(b, sT, where[0], where[1], where[2],
                                    where[3], where[4], where[5], where[6],
                                    where[7], b.getF32FloatAttr(kLog2e));
      cloneRegion(op.getScore(), mod.getMod());
    }
    // Online softmax in the exp2 domain.
    RowMaxOp::create(b, sT, m, mNew);
    Exp2Op::create(b, sT, mNew, sT);
    Exp2Op::create(b, m, mNew, alpha);
    RescaleOp::create(b, l, alpha);
    RowSumOp::create(b, sT, l);
    RescaleOp::create(b, acc, alpha);
    DotOp::create(b, sT, vT, acc, UnitAttr(), b.getUnitAttr(),
                  b.getF32FloatAttr(1.0f));
    memref::CopyOp::create(b, mNew, m);

    b.setInsertionPointAfter(tiles);
    Value oOff = add(add(mul(bb, os[0]), mul(h, os[1])), mul(q0, os[2]));
    StoreTileOp::create(b, acc, l, arg(3), oOff, qRows, os[2], os[3],
                        op.getDtypeOAttr());
    if (op.getReturnLse()) {
      Value lOff = add(add(mul(bb, ls[0]), mul(h, ls[1])), mul(q0, ls[2]));
      StoreLseOp::create(b, m, l, arg(4), lOff, qRows, ls[2]);
    }
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b);
    return fn;
  }

private:
  AttentionOp op;
  int64_t bm, bn;
  bool count;
  ImplicitLocOpBuilder b;
  Type i64, f32;
  unsigned numBuffers = 0, numParams = 0;
  Block::BlockArgListType fnArgs;

  Value arg(unsigned i) { return fnArgs[i]; }
  Value c(int64_t v) {
    return arith::ConstantOp::create(b, b.getI64IntegerAttr(v));
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value notV(Value x) {
    return arith::XOrIOp::create(
        b, x, arith::ConstantOp::create(b, b.getBoolAttr(true)));
  }
  Value ceilDiv(Value x, int64_t d) {
    return arith::DivSIOp::create(b, add(x, c(d - 1)), c(d));
  }
  Value tileAlloca(ArrayRef<int64_t> shape) {
    return memref::AllocaOp::create(b, MemRefType::get(shape, f32),
                                    ValueRange{}, ValueRange{},
                                    b.getI64IntegerAttr(64));
  }

  /// The kernel argument of parameter \p name.
  Value paramArg(StringRef name) {
    unsigned i = 0;
    for (NamedAttribute p : op.getParams()) {
      if (p.getName() == name)
        return arg(7 + 2 * numBuffers + i);
      ++i;
    }
    return Value();
  }

  bool isIdentityScore() {
    Block &blk = op.getScore().front();
    auto y = cast<YieldOp>(blk.getTerminator());
    return y.getValue() == blk.getArgument(0);
  }

  /// counters[full ? 2 : empty ? 0 : 1] += 1 (atomically: items run in
  /// parallel).
  void countTile(Value counters, Value full, Value empty) {
    Value slot = arith::SelectOp::create(
        b, full, c(2), arith::SelectOp::create(b, empty, c(0), c(1)));
    Type ptr = LLVM::LLVMPointerType::get(b.getContext());
    Value p = LLVM::GEPOp::create(b, ptr, i64, counters, ValueRange{slot});
    LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::add, p, c(1),
                              LLVM::AtomicOrdering::monotonic);
  }

  /// Clones \p from into the empty region \p to, replacing attn.param by the
  /// kernel argument and attn.buffer_load by a bounds-checked attn.load_elem.
  void cloneRegion(Region &from, Region &to) {
    IRMapping map;
    from.cloneInto(&to, map);
    SmallVector<Operation *> dead;
    to.walk([&](Operation *inner) {
      if (auto p = dyn_cast<ParamOp>(inner)) {
        p.getResult().replaceAllUsesWith(paramArg(p.getName()));
        dead.push_back(p);
      } else if (auto l = dyn_cast<BufferLoadOp>(inner)) {
        unsigned slot = 0;
        for (NamedAttribute d : op.getBuffers()) {
          if (d.getName() == l.getName())
            break;
          ++slot;
        }
        OpBuilder ib(l);
        auto load = LoadElemOp::create(
            ib, l.getLoc(), l.getType(), arg(7 + 2 * slot), l.getIndex(),
            arg(8 + 2 * slot), arg(5), ib.getI64IntegerAttr(slot));
        l.getResult().replaceAllUsesWith(load.getResult());
        dead.push_back(l);
      }
    });
    for (Operation *d : dead)
      d->erase();
  }
};

struct AttnTilePass : public flashjit::attn::impl::AttnTileBase<AttnTilePass> {
  using AttnTileBase::AttnTileBase;

  void runOnOperation() override {
    if (blockM < 1 || blockN < 1) {
      getOperation().emitError() << "attn-tile: block-m and block-n must be "
                                    "positive";
      return signalPassFailure();
    }
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops) {
      KernelEmitter(op, blockM, blockN, countTiles).emit();
      op.erase();
    }
  }
};

} // namespace
