//===- AttnToSCFBackward.cpp - backward tile ops to scalar loops (CPU) ----===//
//
// Part of pass `convert-attn-to-scf` (AttnToSCF.cpp states its pre- and
// post-conditions): the lowerings of the backward's tile ops
// attn.load_lse, attn.row_dot, attn.softmax_grad and attn.score_grad.
//
//===----------------------------------------------------------------------===//
#include "LoopLowering.h"

using namespace mlir;

namespace flashjit::attn::loops {

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

} // namespace flashjit::attn::loops
