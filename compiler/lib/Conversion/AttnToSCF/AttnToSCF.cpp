//===- AttnToSCF.cpp - attn tile ops to scalar loops (CPU) ----------------===//
//
// Pass `convert-attn-to-scf`.
//
// Pre:  attn tile ops (attn-tile's output) on static f32 memref tiles;
//       attn-expand-scalar has run (regions hold only arith/math/scf/llvm).
// Post: no attn op remains. Each tile op is scf.for loops over memref
//       load/store and arith/math; global memory is read and written with
//       llvm.getelementptr + llvm.load/llvm.store on the kernel's plain
//       pointers (bf16 converted with integer ops, so no soft-float library
//       call is needed; f16 through arith.extf/truncf). Mask and score
//       regions are inlined into the element loops; the mask runs only on
//       in-bounds elements, the score modifier only on allowed ones, so
//       buffer reads happen exactly where the reference performs them.
//       Reductions carry `reassoc` so LLVM may vectorise them. The
//       backward's tile ops (attn.load_lse, attn.row_dot,
//       attn.softmax_grad, attn.score_grad, attn.dot transpose_lhs) lower
//       the same way (AttnToSCFBackward.cpp); attn.score_grad inlines its
//       region only on elements with a nonzero dS'.
//
//===----------------------------------------------------------------------===//
#include "LoopLowering.h"
#include "flashjit/Conversion/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

namespace flashjit {
#define GEN_PASS_DEF_CONVERTATTNTOSCF
#include "flashjit/Conversion/Passes.h.inc"
} // namespace flashjit

using namespace mlir;
using namespace flashjit::attn;

namespace {

using loops::lower;
using loops::Lowering;

void lower(FillOp op) {
  Lowering L(op);
  Value dst = op.getDst();
  if (L.rank(dst) == 1) {
    L.loop(L.idx(0), L.idx(L.dim(dst, 0)),
           [&](Value i) { L.store(op.getValue(), dst, i); });
    return;
  }
  L.loop(L.idx(0), L.idx(L.dim(dst, 0)), [&](Value i) {
    L.loop(L.idx(0), L.idx(L.dim(dst, 1)), [&](Value j) {
      L.store(op.getValue(), dst, {i, j});
    });
  });
}

void lower(LoadTileOp op) {
  Lowering L(op);
  Value dst = op.getDst();
  Value rows = L.toIndex(op.getRows());
  L.loop(L.idx(0), L.idx(L.dim(dst, 0)), [&](Value i) {
    Value valid =
        arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, i, rows);
    auto ifOp = scf::IfOp::create(L.b, valid, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(L.b);
    L.b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    Value rowOff = arith::AddIOp::create(
        L.b, op.getOffset(),
        arith::MulIOp::create(L.b, L.toI64(i), op.getRowStride()));
    L.loop(L.idx(0), L.idx(L.dim(dst, 1)), [&](Value j) {
      Value off = arith::AddIOp::create(
          L.b, rowOff,
          arith::MulIOp::create(L.b, L.toI64(j), op.getColStride()));
      L.store(L.loadGlobal(op.getBase(), op.getElemType(), off), dst, {i, j});
    });
    L.b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    Value zero = L.f(0.0f);
    L.loop(L.idx(0), L.idx(L.dim(dst, 1)), [&](Value j) {
      L.store(zero, dst, {i, j});
    });
  });
}

void lower(DotOp op) {
  Lowering L(op);
  Value lhs = op.getLhs(), rhs = op.getRhs(), acc = op.getAcc();
  int64_t m = L.dim(lhs, 0), k = L.dim(lhs, 1);
  int64_t n = L.dim(acc, 1);
  Value scale = L.f(op.getScale().convertToFloat());
  if (op.getTransposeLhs()) {
    // acc[i][j] (+)= scale * sum_k lhs[k][i] * rhs[k][j] (rhs not
    // transposed: the backward's P^T dO and dS^T Q), k outer and j
    // innermost so the loop over the contiguous acc and rhs rows
    // vectorises.
    int64_t kk = L.dim(lhs, 0), mm = L.dim(lhs, 1);
    if (!op.getAccumulate()) {
      Value zero = L.f(0.0f);
      L.loop(L.idx(0), L.idx(mm), [&](Value i) {
        L.loop(L.idx(0), L.idx(n), [&](Value j) {
          L.store(zero, acc, {i, j});
        });
      });
    }
    L.loop(L.idx(0), L.idx(kk), [&](Value r) {
      L.loop(L.idx(0), L.idx(mm), [&](Value i) {
        Value a = arith::MulFOp::create(L.b, L.load(lhs, {r, i}), scale);
        L.loop(L.idx(0), L.idx(n), [&](Value j) {
          Value p = arith::MulFOp::create(L.b, a, L.load(rhs, {r, j}));
          L.store(arith::AddFOp::create(L.b, L.load(acc, {i, j}), p), acc,
                  {i, j});
        });
      });
    });
    return;
  }
  if (op.getTransposeRhs()) {
    // acc[i][j] (+)= scale * sum_k lhs[i][k] * rhs[j][k]
    L.loop(L.idx(0), L.idx(m), [&](Value i) {
      L.loop(L.idx(0), L.idx(n), [&](Value j) {
        Value sum =
            L.reduce(L.idx(0), L.idx(k), L.f(0.0f), [&](Value kk, Value s) {
              Value p = arith::MulFOp::create(L.b, L.load(lhs, {i, kk}),
                                              L.load(rhs, {j, kk}), L.reassoc);
              return arith::AddFOp::create(L.b, s, p, L.reassoc);
            });
        Value v = arith::MulFOp::create(L.b, sum, scale);
        if (op.getAccumulate())
          v = arith::AddFOp::create(L.b, L.load(acc, {i, j}), v);
        L.store(v, acc, {i, j});
      });
    });
    return;
  }
  // acc[i][j] (+)= scale * sum_k lhs[i][k] * rhs[k][j], j innermost so the
  // loop over the contiguous acc and rhs rows vectorises.
  if (!op.getAccumulate()) {
    Value zero = L.f(0.0f);
    L.loop(L.idx(0), L.idx(m), [&](Value i) {
      L.loop(L.idx(0), L.idx(n), [&](Value j) { L.store(zero, acc, {i, j}); });
    });
  }
  // With skip_zero_lhs a zero lhs element (P at a masked key) skips its rhs
  // row: one compare per (i, k), and the row's 0 * inf never happens. UNE is
  // true for NaN, so a NaN in lhs still reaches acc.
  L.loop(L.idx(0), L.idx(m), [&](Value i) {
    L.loop(L.idx(0), L.idx(k), [&](Value kk) {
      Value x = L.load(lhs, {i, kk});
      auto axpy = [&] {
        Value a = arith::MulFOp::create(L.b, x, scale);
        L.loop(L.idx(0), L.idx(n), [&](Value j) {
          Value p = arith::MulFOp::create(L.b, a, L.load(rhs, {kk, j}));
          L.store(arith::AddFOp::create(L.b, L.load(acc, {i, j}), p), acc,
                  {i, j});
        });
      };
      if (!op.getSkipZeroLhs())
        return axpy();
      L.ifThen(
          arith::CmpFOp::create(L.b, arith::CmpFPredicate::UNE, x, L.f(0.0f)),
          axpy);
    });
  });
}

bool yieldsConstantTrue(Region &r) {
  Value v = cast<YieldOp>(r.front().getTerminator()).getValue();
  auto c = v.getDefiningOp<arith::ConstantOp>();
  auto ia = c ? dyn_cast<IntegerAttr>(c.getValue()) : IntegerAttr();
  return ia && ia.getValue().isOne();
}

void lower(MaskSelectOp op) {
  Lowering L(op);
  Value s = op.getScores();
  int64_t bm = L.dim(s, 0), bn = L.dim(s, 1);
  Value rows = L.toIndex(op.getRows()), cols = L.toIndex(op.getCols());
  Value ninf = L.ninf();
  if (yieldsConstantTrue(op.getMask())) {
    // Full tile: no per-element mask; -inf past the sequence ends only.
    L.loop(L.idx(0), L.idx(bm), [&](Value i) {
      Value inRow =
          arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, i, rows);
      Value start = arith::SelectOp::create(L.b, inRow, cols, L.idx(0));
      L.loop(start, L.idx(bn), [&](Value j) { L.store(ninf, s, {i, j}); });
    });
    return;
  }
  L.loop(L.idx(0), L.idx(bm), [&](Value i) {
    L.loop(L.idx(0), L.idx(bn), [&](Value j) {
      Value valid = arith::AndIOp::create(
          L.b, arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, i, rows),
          arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, j, cols));
      Value allowed = L.ifElse(
          L.b.getI1Type(), valid,
          [&] {
            return L.inlineRegion(
                op.getMask(), L.indexArgs(op.getBatch(), op.getHead(),
                                          op.getQ0(), op.getKv0(), i, j,
                                          op.getSeqlenQ(), op.getSeqlenK()));
          },
          [&] {
            return Value(
                arith::ConstantOp::create(L.b, L.b.getBoolAttr(false)));
          });
      Value old = L.load(s, {i, j});
      L.store(arith::SelectOp::create(L.b, allowed, old, ninf), s, {i, j});
    });
  });
}

void lower(MaskReduceOp op) {
  // Rows until the answer is known (some element allowed and some not);
  // every column of a row, so the inner loop stays simple.
  Lowering L(op);
  Type i1 = L.b.getI1Type(), idxTy = L.b.getIndexType();
  Value rows = L.toIndex(op.getRows()), cols = L.toIndex(op.getCols());
  Value t = arith::ConstantOp::create(L.b, L.b.getBoolAttr(true));
  Value f = arith::ConstantOp::create(L.b, L.b.getBoolAttr(false));
  auto w = scf::WhileOp::create(L.b, TypeRange{idxTy, i1, i1},
                                ValueRange{L.idx(0), f, t});
  {
    OpBuilder::InsertionGuard g(L.b);
    Block *before = L.b.createBlock(&w.getBefore(), {}, {idxTy, i1, i1},
                                    {op.getLoc(), op.getLoc(), op.getLoc()});
    Value i = before->getArgument(0), any = before->getArgument(1),
          all = before->getArgument(2);
    Value decided =
        arith::AndIOp::create(L.b, any, arith::XOrIOp::create(L.b, all, t));
    Value go = arith::AndIOp::create(
        L.b, arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, i, rows),
        arith::XOrIOp::create(L.b, decided, t));
    scf::ConditionOp::create(L.b, go, before->getArguments());
    Block *after = L.b.createBlock(&w.getAfter(), {}, {idxTy, i1, i1},
                                   {op.getLoc(), op.getLoc(), op.getLoc()});
    i = after->getArgument(0);
    auto cols_ = scf::ForOp::create(
        L.b, L.idx(0), cols, L.idx(1),
        ValueRange{after->getArgument(1), after->getArgument(2)});
    {
      OpBuilder::InsertionGuard g2(L.b);
      L.b.setInsertionPointToStart(cols_.getBody());
      Value m = L.inlineRegion(
          op.getMask(), L.indexArgs(op.getBatch(), op.getHead(), op.getQ0(),
                                    op.getKv0(), i, cols_.getInductionVar(),
                                    op.getSeqlenQ(), op.getSeqlenK()));
      scf::YieldOp::create(
          L.b,
          ValueRange{
              arith::OrIOp::create(L.b, cols_.getRegionIterArgs()[0], m),
              arith::AndIOp::create(L.b, cols_.getRegionIterArgs()[1], m)});
    }
    scf::YieldOp::create(L.b,
                         ValueRange{arith::AddIOp::create(L.b, i, L.idx(1)),
                                    cols_.getResult(0), cols_.getResult(1)});
  }
  op.getAny().replaceAllUsesWith(w.getResult(1));
  op.getAll().replaceAllUsesWith(w.getResult(2));
}

void lower(ScoreModOp op) {
  Lowering L(op);
  Value s = op.getScores();
  Value rows = L.toIndex(op.getRows()), cols = L.toIndex(op.getCols());
  Value post = L.f(op.getPostScale().convertToFloat());
  Value ninf = L.ninf();
  L.loop(L.idx(0), rows, [&](Value i) {
    L.loop(L.idx(0), cols, [&](Value j) {
      Value x = L.load(s, {i, j});
      Value live =
          arith::CmpFOp::create(L.b, arith::CmpFPredicate::ONE, x, ninf);
      L.ifThen(live, [&] {
        SmallVector<Value> args{x};
        args.append(L.indexArgs(op.getBatch(), op.getHead(), op.getQ0(),
                                op.getKv0(), i, j, op.getSeqlenQ(),
                                op.getSeqlenK()));
        Value y = L.inlineRegion(op.getMod(), args);
        L.store(arith::MulFOp::create(L.b, y, post), s, {i, j});
      });
    });
  });
}

void lower(RowMaxOp op) {
  Lowering L(op);
  Value s = op.getScores();
  L.loop(L.idx(0), L.idx(L.dim(s, 0)), [&](Value i) {
    Value mx = L.reduce(L.idx(0), L.idx(L.dim(s, 1)), L.load(op.getInit(), i),
                        [&](Value j, Value acc) {
                          return arith::MaximumFOp::create(
                              L.b, acc, L.load(s, {i, j}), L.reassoc);
                        });
    L.store(mx, op.getOut(), i);
  });
}

void lower(Exp2Op op) {
  Lowering L(op);
  Value in = op.getIn(), out = op.getOut();
  Value ninf = L.ninf(), zero = L.f(0.0f);
  L.loop(L.idx(0), L.idx(L.dim(in, 0)), [&](Value i) {
    Value mi = L.load(op.getMax(), i);
    Value dead =
        arith::CmpFOp::create(L.b, arith::CmpFPredicate::OEQ, mi, ninf);
    auto one = [&](ValueRange ivs) {
      Value e = math::Exp2Op::create(
          L.b, arith::SubFOp::create(L.b, L.load(in, ivs), mi));
      L.store(arith::SelectOp::create(L.b, dead, zero, e), out, ivs);
    };
    if (L.rank(in) == 1)
      one(i);
    else
      L.loop(L.idx(0), L.idx(L.dim(in, 1)), [&](Value j) { one({i, j}); });
  });
}

void lower(RescaleOp op) {
  Lowering L(op);
  Value x = op.getX();
  L.loop(L.idx(0), L.idx(L.dim(x, 0)), [&](Value i) {
    Value fi = L.load(op.getFactor(), i);
    auto one = [&](ValueRange ivs) {
      L.store(arith::MulFOp::create(L.b, L.load(x, ivs), fi), x, ivs);
    };
    if (L.rank(x) == 1)
      one(i);
    else
      L.loop(L.idx(0), L.idx(L.dim(x, 1)), [&](Value j) { one({i, j}); });
  });
}

void lower(RowSumOp op) {
  Lowering L(op);
  Value in = op.getIn();
  L.loop(L.idx(0), L.idx(L.dim(in, 0)), [&](Value i) {
    Value sum = L.reduce(
        L.idx(0), L.idx(L.dim(in, 1)), L.f(0.0f), [&](Value j, Value acc) {
          return arith::AddFOp::create(L.b, acc, L.load(in, {i, j}), L.reassoc);
        });
    L.store(arith::AddFOp::create(L.b, L.load(op.getAcc(), i), sum),
            op.getAcc(), i);
  });
}

void lower(StoreTileOp op) {
  Lowering L(op);
  Value acc = op.getAcc();
  Value zero = L.f(0.0f), one = L.f(1.0f);
  L.loop(L.idx(0), L.toIndex(op.getRows()), [&](Value i) {
    Value li = L.load(op.getSum(), i);
    Value empty =
        arith::CmpFOp::create(L.b, arith::CmpFPredicate::OEQ, li, zero);
    Value inv = arith::SelectOp::create(L.b, empty, zero,
                                        arith::DivFOp::create(L.b, one, li));
    Value rowOff = arith::AddIOp::create(
        L.b, op.getOffset(),
        arith::MulIOp::create(L.b, L.toI64(i), op.getRowStride()));
    L.loop(L.idx(0), L.idx(L.dim(acc, 1)), [&](Value j) {
      Value v = arith::MulFOp::create(L.b, L.load(acc, {i, j}), inv);
      Value off = arith::AddIOp::create(
          L.b, rowOff,
          arith::MulIOp::create(L.b, L.toI64(j), op.getColStride()));
      L.storeGlobal(v, op.getBase(), op.getElemType(), off);
    });
  });
}

void lower(StoreLseOp op) {
  Lowering L(op);
  Value zero = L.f(0.0f), ninf = L.ninf(), ln2 = L.f(std::log(2.0f));
  L.loop(L.idx(0), L.toIndex(op.getRows()), [&](Value i) {
    Value li = L.load(op.getSum(), i);
    Value empty =
        arith::CmpFOp::create(L.b, arith::CmpFPredicate::OEQ, li, zero);
    Value lse = arith::MulFOp::create(
        L.b,
        arith::AddFOp::create(L.b, L.load(op.getMax(), i),
                              math::Log2Op::create(L.b, li)),
        ln2);
    Value off = arith::AddIOp::create(
        L.b, op.getOffset(),
        arith::MulIOp::create(L.b, L.toI64(i), op.getRowStride()));
    L.storeGlobal(arith::SelectOp::create(L.b, empty, ninf, lse), op.getBase(),
                  L.f32, off);
  });
}

struct ConvertAttnToSCFPass
    : public flashjit::impl::ConvertAttnToSCFBase<ConvertAttnToSCFPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      if (isa<FillOp, LoadTileOp, DotOp, MaskSelectOp, MaskReduceOp, ScoreModOp,
              RowMaxOp, Exp2Op, RescaleOp, RowSumOp, StoreTileOp, StoreLseOp,
              LoadLseOp, RowDotOp, SoftmaxGradOp, ScoreGradOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      llvm::TypeSwitch<Operation *>(op)
          .Case<FillOp, LoadTileOp, DotOp, MaskSelectOp, MaskReduceOp,
                ScoreModOp, RowMaxOp, Exp2Op, RescaleOp, RowSumOp, StoreTileOp,
                StoreLseOp, LoadLseOp, RowDotOp, SoftmaxGradOp, ScoreGradOp>(
              [](auto o) { lower(o); });
      op->erase();
    }
    WalkResult r = getOperation()->walk([&](Operation *op) {
      if (isa<AttnDialect>(op->getDialect())) {
        op->emitOpError() << "is not lowered by convert-attn-to-scf (run "
                             "attn-tile and attn-expand-scalar first)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
