//===- TileScores.cpp - Masked, modified scores of one tile pair ----------===//
//
// See TileScores.h. The op order below is the order both kernels emitted
// before this was shared; the generated IR and PTX depend on it.
//
//===----------------------------------------------------------------------===//
#include "TileScores.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::attn {

bool isIdentityScore(AttentionOp op) {
  Block &blk = op.getScore().front();
  auto y = cast<YieldOp>(blk.getTerminator());
  return y.getValue() == blk.getArgument(0);
}

void emitMaskedScores(
    ImplicitLocOpBuilder &b, AttentionOp op, const ScoreTiles &tiles,
    const TilePairWhere &where, Value full, bool knownFull,
    function_ref<void(Region &from, Region &to)> cloneRegion) {
  bool identityScore = isIdentityScore(op);
  double scale = op.getScale().convertToDouble();
  DotOp::create(b, tiles.q, tiles.k, tiles.s, /*transpose_rhs=*/b.getUnitAttr(),
                /*accumulate=*/UnitAttr(),
                b.getF32FloatAttr(identityScore ? scale * kLog2e : scale),
                /*transpose_lhs=*/UnitAttr());
  if (tiles.raw && !identityScore)
    memref::CopyOp::create(b, tiles.s, tiles.raw);

  auto maskSelect = [&]() {
    return MaskSelectOp::create(b, tiles.s, where.q0, where.kv0, where.qRows,
                                where.kvRows, where.batch, where.head,
                                where.seqlenQ, where.seqlenK);
  };
  // A full tile: bounds only (the region yields true).
  auto boundsOnly = [&]() {
    auto sel = maskSelect();
    OpBuilder::InsertionGuard g(b);
    Block *blk =
        b.createBlock(&sel.getMask(), {}, SmallVector<Type>(6, b.getI32Type()),
                      SmallVector<Location>(6, b.getLoc()));
    b.setInsertionPointToStart(blk);
    YieldOp::create(b, arith::ConstantOp::create(b, b.getBoolAttr(true)));
  };
  if (knownFull) {
    boundsOnly();
  } else {
    // Full tiles: bounds only. Partial tiles: the user's mask per element.
    auto isFull = scf::IfOp::create(b, full, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(isFull.thenBlock()->getTerminator());
    boundsOnly();
    b.setInsertionPoint(isFull.elseBlock()->getTerminator());
    cloneRegion(op.getMask(), maskSelect().getMask());
  }
  if (!identityScore) {
    auto mod = ScoreModOp::create(
        b, tiles.s, where.q0, where.kv0, where.qRows, where.kvRows, where.batch,
        where.head, where.seqlenQ, where.seqlenK, b.getF32FloatAttr(kLog2e));
    cloneRegion(op.getScore(), mod.getMod());
  }
}

} // namespace flashjit::attn
