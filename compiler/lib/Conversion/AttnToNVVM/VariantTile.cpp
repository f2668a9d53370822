//===- VariantTile.cpp - The variant on a tile of scores ------------------===//
#include "VariantTile.h"

#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

/// Whether element (qi, kvi) is allowed: in range and (with a mask) the
/// mask holds; the mask is evaluated under a guard where it reads buffers.
static Value allowed(KernelOps &ops, FragmentEmitter &em,
                     const IndexValues &idx, Value rowOk) {
  Value ok = ops.land(
      rowOk, ops.cmp(arith::CmpIPredicate::slt, idx.kvIdx, idx.seqlenK));
  if (!em.hasMask())
    return ok;
  if (em.maskElementReadsBuffers())
    return ops.guarded(ok, ops.i1, ops.cb(false),
                       [&] { return em.emitMask(ops.b, ops.b.getLoc(), idx); });
  return ops.land(ok, em.emitMask(ops.b, ops.b.getLoc(), idx));
}

/// The score of one element in log2 units (-inf where \p masked and not
/// allowed); \p acc = q.k.
/// \p rowOff, \p rowFull (null or i1; KeyRowCoords): the key row's class
/// where a block-sparse backward tile spans several mask tiles.
static Value elementScore(KernelOps &ops, FragmentEmitter &em,
                          const IndexValues &idx, Value acc, Value scale,
                          Value scaleLog2, bool masked, Value zero,
                          Value minusInf, Value rowOff = Value(),
                          Value rowFull = Value()) {
  const float log2e = 1.4426950408889634f;
  Value rowOk = ops.cmp(arith::CmpIPredicate::slt, idx.qIdx, idx.seqlenQ);
  // A full tile: every in-range element is allowed.
  Value ok = masked ? allowed(ops, em, idx, rowOk) : rowOk;
  if (masked && rowOff) {
    Value inRange = ops.land(
        rowOk, ops.cmp(arith::CmpIPredicate::slt, idx.kvIdx, idx.seqlenK));
    ok = ops.land(ops.lnot(rowOff), ops.lor(ok, ops.land(rowFull, inRange)));
  }
  Value v;
  if (em.hasScoreMod()) {
    auto mod = [&] {
      return em.emitScore(ops.b, ops.b.getLoc(), idx, ops.fmul(acc, scale));
    };
    v = em.scoreElementReadsBuffers() ? ops.guarded(ok, ops.f32, zero, mod)
                                      : mod();
    v = ops.fmul(v, ops.cf32(log2e));
  } else {
    v = ops.fmul(acc, scaleLog2);
  }
  if (masked)
    v = ops.sel(ok, v, minusInf);
  return v;
}

SmallVector<Value> variantScores(KernelOps &ops, FragmentEmitter &em,
                                 ArrayRef<Value> s, const FragmentCoords &at,
                                 int mTiles, int sTiles, Value scale,
                                 Value scaleLog2, bool masked) {
  const int MT = mTiles, nS = sTiles;
  Value zero = ops.cf32(0.0f);
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> out;
  // Key index of column (jn, c) of this thread's fragments; with a mask, its
  // row- and column-only parts are emitted once per row / column.
  SmallVector<Value> kvCols;
  for (int jn = 0; jn < nS; ++jn)
    for (int cc = 0; cc < 2; ++cc)
      kvCols.push_back(ops.add(at.kvLane, ops.ci32(jn * 8 + cc)));
  bool factored = masked && em.hasMask();
  if (factored) {
    SmallVector<Value> rows;
    for (int mt = 0; mt < MT; ++mt)
      rows.append({at.qRow0[mt], at.qRow1[mt]});
    em.beginMaskFactors(
        ops.b, ops.b.getLoc(),
        {at.batch, at.head, Value(), Value(), at.seqlenQ, at.seqlenK}, rows,
        kvCols);
  }
  // float(q_idx - kvLane) per row (exact below 2^24), minus the column's
  // offset per element.
  SmallVector<Value> rowDist;
  if (at.floatDistance && em.hasScoreMod())
    for (int mt = 0; mt < MT; ++mt)
      for (Value q : {at.qRow0[mt], at.qRow1[mt]})
        rowDist.push_back(
            arith::SIToFPOp::create(ops.b, ops.f32, ops.sub(q, at.kvLane)));
  for (int mt = 0; mt < MT; ++mt)
    for (int jn = 0; jn < nS; ++jn)
      for (int i = 0; i < 4; ++i) {
        Value acc = s[(mt * nS + jn) * 4 + i];
        Value qi = i < 2 ? at.qRow0[mt] : at.qRow1[mt];
        Value kvi = kvCols[jn * 2 + (i & 1)];
        IndexValues idx{at.batch, at.head, qi, kvi, at.seqlenQ, at.seqlenK};
        if (!rowDist.empty())
          idx.distF = ops.fsub(rowDist[mt * 2 + i / 2],
                               ops.cf32(float(jn * 8 + (i & 1))));
        out.push_back(elementScore(ops, em, idx, acc, scale, scaleLog2, masked,
                                   zero, minusInf));
      }
  if (factored)
    em.endMaskFactors();
  return out;
}

SmallVector<Value> variantScoresKeyRows(KernelOps &ops, FragmentEmitter &em,
                                        ArrayRef<Value> s,
                                        const KeyRowCoords &at, int sTiles,
                                        Value scale, Value scaleLog2,
                                        bool masked) {
  const int nS = sTiles;
  Value zero = ops.cf32(0.0f);
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> qCols;
  for (int jn = 0; jn < nS; ++jn)
    for (int cc = 0; cc < 2; ++cc)
      qCols.push_back(ops.add(at.qLane, ops.ci32(jn * 8 + cc)));
  bool factored = masked && em.hasMask();
  if (factored)
    em.beginMaskFactors(
        ops.b, ops.b.getLoc(),
        {at.batch, at.head, Value(), Value(), at.seqlenQ, at.seqlenK}, qCols,
        {at.kvRow0, at.kvRow1});
  SmallVector<Value> out;
  for (int jn = 0; jn < nS; ++jn)
    for (int i = 0; i < 4; ++i) {
      Value kvi = i < 2 ? at.kvRow0 : at.kvRow1;
      Value qi = qCols[jn * 2 + (i & 1)];
      IndexValues idx{at.batch, at.head, qi, kvi, at.seqlenQ, at.seqlenK};
      out.push_back(elementScore(
          ops, em, idx, s[jn * 4 + i], scale, scaleLog2, masked, zero, minusInf,
          i < 2 ? at.rowOff0 : at.rowOff1, i < 2 ? at.rowFull0 : at.rowFull1));
    }
  if (factored)
    em.endMaskFactors();
  return out;
}

SmallVector<Value> variantScoresPacked(KernelOps &ops, FragmentEmitter &em,
                                       ArrayRef<Value> s,
                                       const PackedRowCoords &at, int mTiles,
                                       int sTiles, Value scale, Value scaleLog2,
                                       bool masked) {
  Value zero = ops.cf32(0.0f);
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> kvCols;
  for (int jn = 0; jn < sTiles; ++jn)
    for (int cc = 0; cc < 2; ++cc)
      kvCols.push_back(ops.add(at.kvLane, ops.ci32(jn * 8 + cc)));
  // A full tile: every element of an in-range row is allowed, so the score
  // modifier's row-only part (ALiBi's slopes[head]) is evaluated once per
  // row, reading what per-element evaluation would read.
  bool factored = !masked && em.hasScoreMod();
  if (factored) {
    SmallVector<Value> heads, rows;
    for (int mt = 0; mt < mTiles; ++mt) {
      heads.append({at.head0[mt], at.head1[mt]});
      rows.append({at.qRow0[mt], at.qRow1[mt]});
    }
    em.beginScoreRowFactors(
        ops.b, ops.b.getLoc(),
        {at.batch, Value(), Value(), Value(), at.seqlenQ, at.seqlenK}, heads,
        rows);
  }
  SmallVector<Value> out;
  for (int mt = 0; mt < mTiles; ++mt)
    for (int jn = 0; jn < sTiles; ++jn)
      for (int i = 0; i < 4; ++i) {
        Value qi = i < 2 ? at.qRow0[mt] : at.qRow1[mt];
        Value hi = i < 2 ? at.head0[mt] : at.head1[mt];
        IndexValues idx{at.batch,   hi,        qi, kvCols[jn * 2 + (i & 1)],
                        at.seqlenQ, at.seqlenK};
        out.push_back(elementScore(ops, em, idx, s[(mt * sTiles + jn) * 4 + i],
                                   scale, scaleLog2, masked, zero, minusInf));
      }
  if (factored)
    em.endScoreRowFactors();
  return out;
}

} // namespace flashjit::nvvm
