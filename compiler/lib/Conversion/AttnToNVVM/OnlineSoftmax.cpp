//===- OnlineSoftmax.cpp - Online softmax on accumulator fragments --------===//
#include "OnlineSoftmax.h"

#include "mlir/Dialect/Math/IR/Math.h"

#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

static constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SoftmaxRows softmaxStep(KernelOps &ops, MutableArrayRef<Value> st, int mTiles,
                        int sTiles, const SoftmaxRows &old,
                        SmallVectorImpl<Value> &alpha) {
  const int MT = mTiles, nS = sTiles;
  Value zero = ops.cf32(0.0f), minusInf = ops.cf32(kNegInf);
  SoftmaxRows next;
  next.m.resize(2 * MT);
  next.l.resize(2 * MT);
  alpha.assign(2 * MT, Value());
  for (int rr = 0; rr < 2 * MT; ++rr) {
    int mt = rr / 2, r = rr % 2;
    MutableArrayRef<Value> sm(st.data() + mt * nS * 4, nS * 4);
    Value mx = old.m[rr];
    for (int jn = 0; jn < nS; ++jn)
      mx = ops.fmax(mx, ops.fmax(sm[jn * 4 + 2 * r], sm[jn * 4 + 2 * r + 1]));
    mx = ops.fmax(mx, ops.shflXor(mx, 1));
    mx = ops.fmax(mx, ops.shflXor(mx, 2));
    next.m[rr] = mx;
    // With every score so far -inf, subtract 0 instead: exp2(-inf) = 0
    // and no (-inf) - (-inf) = NaN.
    Value mUse = ops.sel(ops.feq(mx, minusInf), zero, mx);
    alpha[rr] = ops.exp2(ops.fsub(old.m[rr], mUse));
    Value sum = zero;
    for (int jn = 0; jn < nS; ++jn)
      for (int i = 2 * r; i < 2 * r + 2; ++i) {
        sm[jn * 4 + i] = ops.exp2(ops.fsub(sm[jn * 4 + i], mUse));
        sum = ops.fadd(sum, sm[jn * 4 + i]);
      }
    next.l[rr] = ops.fadd(ops.fmul(old.l[rr], alpha[rr]), sum);
  }
  return next;
}

void rescaleRows(KernelOps &ops, MutableArrayRef<Value> o, int mTiles,
                 int oTiles, ArrayRef<Value> alpha) {
  for (int mt = 0; mt < mTiles; ++mt)
    for (int jd = 0; jd < oTiles; ++jd)
      for (int i = 0; i < 4; ++i) {
        Value &acc = o[(mt * oTiles + jd) * 4 + i];
        acc = ops.fmul(acc, alpha[2 * mt + i / 2]);
      }
}

SoftmaxFinal softmaxFinish(KernelOps &ops, Value l) {
  SoftmaxFinal f;
  l = ops.fadd(l, ops.shflXor(l, 1));
  l = ops.fadd(l, ops.shflXor(l, 2));
  f.l = l;
  Value zero = ops.cf32(0.0f);
  f.empty = ops.feq(l, zero);
  f.inv =
      ops.sel(f.empty, zero, arith::DivFOp::create(ops.b, ops.cf32(1.0f), l));
  return f;
}

SoftmaxFinal foldSink(KernelOps &ops, Value &m, const SoftmaxFinal &f,
                      Value sinkLog2) {
  Value zero = ops.cf32(0.0f), minusInf = ops.cf32(kNegInf);
  Value mNew = ops.fmax(m, sinkLog2);
  // Guarded exponents: an empty row (m = -inf) keeps nothing of its own, a
  // sink of -inf adds nothing; neither computes (-inf) - (-inf).
  Value keep = ops.sel(f.empty, zero, ops.exp2(ops.fsub(m, mNew)));
  Value add = ops.sel(ops.feq(sinkLog2, minusInf), zero,
                      ops.exp2(ops.fsub(sinkLog2, mNew)));
  SoftmaxFinal g;
  g.l = ops.fadd(ops.fmul(f.l, keep), add);
  g.empty = ops.feq(g.l, zero);
  g.inv = ops.sel(g.empty, zero, arith::DivFOp::create(ops.b, keep, g.l));
  m = mNew;
  return g;
}

Value logSumExp(KernelOps &ops, Value m, const SoftmaxFinal &f) {
  const float ln2 = 0.6931471805599453f;
  Value log2l = math::Log2Op::create(ops.b, f.l);
  return ops.sel(f.empty, ops.cf32(kNegInf),
                 ops.fmul(ops.fadd(m, log2l), ops.cf32(ln2)));
}

} // namespace flashjit::nvvm
