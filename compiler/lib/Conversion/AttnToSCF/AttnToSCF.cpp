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
//       the same way; attn.score_grad inlines its region only on elements
//       with a nonzero dS'.
//
//===----------------------------------------------------------------------===//
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

void lower(LoadLseOp op) {
  Lowering L(op);
  Value out = op.getOut();
  Value rows = L.toIndex(op.getRows());
  Value log2e = L.f(1.4426950408889634f), ninf = L.ninf();
  L.loop(L.idx(0), L.idx(L.dim(out, 0)), [&](Value i) {
    Value valid =
        arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, i, rows);
    Value v = L.ifElse(
        L.f32, valid,
        [&] {
          Value off = arith::AddIOp::create(
              L.b, op.getOffset(),
              arith::MulIOp::create(L.b, L.toI64(i), op.getRowStride()));
          return Value(arith::MulFOp::create(
              L.b, L.loadGlobal(op.getBase(), L.f32, off), log2e));
        },
        [&] { return ninf; });
    L.store(v, out, i);
  });
}

void lower(RowDotOp op) {
  Lowering L(op);
  Value a = op.getLhs(), c = op.getRhs();
  L.loop(L.idx(0), L.idx(L.dim(a, 0)), [&](Value i) {
    Value sum = L.reduce(
        L.idx(0), L.idx(L.dim(a, 1)), L.f(0.0f), [&](Value j, Value acc) {
          Value p = arith::MulFOp::create(L.b, L.load(a, {i, j}),
                                          L.load(c, {i, j}), L.reassoc);
          return arith::AddFOp::create(L.b, acc, p, L.reassoc);
        });
    L.store(sum, op.getOut(), i);
  });
}

void lower(SoftmaxGradOp op) {
  Lowering L(op);
  Value p = op.getP(), zero = L.f(0.0f);
  L.loop(L.idx(0), L.idx(L.dim(p, 0)), [&](Value i) {
    Value di = L.load(op.getD(), i);
    L.loop(L.idx(0), L.idx(L.dim(p, 1)), [&](Value j) {
      Value pij = L.load(p, {i, j});
      Value g = arith::MulFOp::create(
          L.b, pij, arith::SubFOp::create(L.b, L.load(op.getDp(), {i, j}), di));
      Value dead =
          arith::CmpFOp::create(L.b, arith::CmpFPredicate::OEQ, pij, zero);
      L.store(arith::SelectOp::create(L.b, dead, zero, g), op.getOut(), {i, j});
    });
  });
}

void lower(ScoreGradOp op) {
  Lowering L(op);
  Value g = op.getGrad(), s = op.getScores();
  Value rows = L.toIndex(op.getRows()), cols = L.toIndex(op.getCols());
  Value zero = L.f(0.0f);
  L.loop(L.idx(0), L.idx(L.dim(g, 0)), [&](Value i) {
    L.loop(L.idx(0), L.idx(L.dim(g, 1)), [&](Value j) {
      Value x = L.load(g, {i, j});
      Value live = arith::AndIOp::create(
          L.b,
          arith::AndIOp::create(
              L.b,
              arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, i, rows),
              arith::CmpIOp::create(L.b, arith::CmpIPredicate::slt, j, cols)),
          arith::CmpFOp::create(L.b, arith::CmpFPredicate::UNE, x, zero));
      Value y = L.ifElse(
          L.f32, live,
          [&] {
            SmallVector<Value> args{x, L.load(s, {i, j})};
            args.append(L.indexArgs(op.getBatch(), op.getHead(), op.getQ0(),
                                    op.getKv0(), i, j, op.getSeqlenQ(),
                                    op.getSeqlenK()));
            return L.inlineRegion(op.getBody(), args);
          },
          [&] { return zero; });
      L.store(y, g, {i, j});
    });
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
