//===- BackwardMmaSync.cpp - The backward's products with mma.sync --------===//
//
// BackwardMma.h on mma.sync m16n8k16: every operand is an ldmatrix fragment
// of a padded shared tile (rows of dim + kPad elements) except P^T and dS^T,
// whose C fragments of two n8 tiles are the A fragment of one k16 slice
// (MMA-FRAGMENTS.md). dS (A of dQ = dS K) is read from dS^T with the
// transposing ldmatrix.
//
//===----------------------------------------------------------------------===//
#include "BackwardMma.h"
#include "MmaSync.h"
#include "SharedTile.h"

using namespace mlir;

namespace flashjit::nvvm {

namespace {

class MmaSyncBackward : public BackwardMma {
public:
  MmaSyncBackward(KernelOps &ops, const BackwardTileShape &sh, Value warp,
                  Value lane)
      : ops(ops), b(ops.b), sh(sh), warp(warp), lane(lane) {}

  bool swizzled() const override { return false; }

  void prepare(Value sK, Value sV, Value sQ, Value sDO, Value sDS) override;

  SmallVector<Value> computeS() override {
    const int D = sh.headDimQK;
    SmallVector<Value> s(sh.sTiles() * 4, ops.cf32(0.0f));
    for (int kk = 0; kk < D / 16; ++kk) {
      auto a = ldmatrixX4(ops, ops.gepBytes(aK, int64_t(2) * kk * 16), false);
      mmaRow(
          a,
          [&](int jn) {
            return ops.gepBytes(bQt,
                                2 * (int64_t(jn) * 8 * (D + kPad) + kk * 16));
          },
          false, s, sh.sTiles());
    }
    return s;
  }

  SmallVector<Value> computeDP() override {
    const int Dv = sh.headDimV;
    SmallVector<Value> dp(sh.sTiles() * 4, ops.cf32(0.0f));
    for (int kk = 0; kk < Dv / 16; ++kk) {
      auto a = ldmatrixX4(ops, ops.gepBytes(aV, int64_t(2) * kk * 16), false);
      mmaRow(
          a,
          [&](int jn) {
            return ops.gepBytes(bDOt,
                                2 * (int64_t(jn) * 8 * (Dv + kPad) + kk * 16));
          },
          false, dp, sh.sTiles());
    }
    return dp;
  }

  SmallVector<Value> accumulateDV(ArrayRef<Value> dvIn,
                                  ArrayRef<Value> p) override {
    return accumulateT(dvIn, p, bDOn, sh.headDimV);
  }

  SmallVector<Value> accumulateDK(ArrayRef<Value> dkIn,
                                  ArrayRef<Value> ds) override {
    return accumulateT(dkIn, ds, bQn, sh.headDimQK);
  }

  void storeDS(ArrayRef<Value> ds) override {
    for (int jn = 0; jn < sh.sTiles(); ++jn)
      for (int r = 0; r < 2; ++r) {
        Value row =
            ops.add(ops.add(ops.mul(warp, ops.ci32(16)), g), ops.ci32(8 * r));
        Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jn * 8));
        Value off =
            ops.mul(ops.add(ops.mul(row, ops.ci32(sh.blockN + kPad)), col),
                    ops.ci32(2));
        LLVM::StoreOp::create(
            b, ops.pack(ds[jn * 4 + 2 * r], ds[jn * 4 + 2 * r + 1]),
            ops.gepBytes(sDS, ops.ext64(off)), /*alignment=*/4);
      }
  }

  SmallVector<Value> computeDQ() override {
    const int D = sh.headDimQK, BN = sh.blockN;
    const int nQ = sh.dqCols() / 8;
    SmallVector<Value> dq(nQ * 4, ops.cf32(0.0f));
    for (int kk = 0; kk < sh.blockM / 16; ++kk) {
      auto a = ldmatrixX4(
          ops, ops.gepBytes(aDS, int64_t(2) * kk * 16 * (BN + kPad)), true);
      mmaRow(
          a,
          [&](int jd) {
            return ops.gepBytes(bKn,
                                2 * (int64_t(kk) * 16 * (D + kPad) + jd * 8));
          },
          true, dq, nQ);
    }
    return dq;
  }

private:
  /// acc[tile n8 pair] += a * (x4 B fragment at \p bAddr) over \p nTiles.
  void mmaRow(ArrayRef<Value> a, llvm::function_ref<Value(int)> bAddr,
              bool trans, MutableArrayRef<Value> acc, int nTiles) {
    for (int jn = 0; jn < nTiles; jn += 2) {
      auto bf = ldmatrixX4(ops, bAddr(jn), trans);
      mmaM16N8K16(ops, a, bf[0], bf[1], acc.slice(jn * 4, 4));
      mmaM16N8K16(ops, a, bf[2], bf[3], acc.slice((jn + 1) * 4, 4));
    }
  }
  /// The A fragment of k16 step \p kk of a C-layout tile (two n8 tiles).
  SmallVector<Value, 4> packA(ArrayRef<Value> x, int kk) {
    int n0 = 2 * kk, n1 = 2 * kk + 1;
    return {ops.pack(x[n0 * 4 + 0], x[n0 * 4 + 1]),
            ops.pack(x[n0 * 4 + 2], x[n0 * 4 + 3]),
            ops.pack(x[n1 * 4 + 0], x[n1 * 4 + 1]),
            ops.pack(x[n1 * 4 + 2], x[n1 * 4 + 3])};
  }
  /// \p in + X^T Y with X^T in registers (layout of S^T) and Y the
  /// [blockN x dim] tile at lane address \p bY (transposing ldmatrix).
  SmallVector<Value> accumulateT(ArrayRef<Value> in, ArrayRef<Value> x,
                                 Value bY, int dim) {
    SmallVector<Value> acc(in.begin(), in.end());
    for (int kk = 0; kk < sh.blockN / 16; ++kk)
      mmaRow(
          packA(x, kk),
          [&](int jd) {
            return ops.gepBytes(bY,
                                2 * (int64_t(kk) * 16 * (dim + kPad) + jd * 8));
          },
          true, acc, dim / 8);
    return acc;
  }

  KernelOps &ops;
  ImplicitLocOpBuilder &b;
  BackwardTileShape sh;
  Value warp, lane, g, t, sDS;
  Value aK, aV, bQt, bDOt, bQn, bDOn, aDS, bKn;
};

void MmaSyncBackward::prepare(Value sK, Value sV, Value sQ, Value sDO,
                              Value sDSIn) {
  const int P = kPad, D = sh.headDimQK, Dv = sh.headDimV, BN = sh.blockN;
  sDS = sDSIn;
  g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  // Per-lane ldmatrix addresses (MMA-FRAGMENTS.md): A fragments of a
  // row-major [M x K] tile; B fragments of an [N x K] tile (non-transposed)
  // or a [K x N] tile (transposed). dS (A of dQ = dS K) is read from dS^T,
  // a [K x M] tile, with the transposing ldmatrix.
  Value l16 = arith::RemUIOp::create(b, lane, ops.ci32(16));
  Value l8 = arith::RemUIOp::create(b, lane, ops.ci32(8));
  Value hi16 = arith::DivUIOp::create(b, lane, ops.ci32(16));
  Value mid8 = arith::RemUIOp::create(
      b, arith::DivUIOp::create(b, lane, ops.ci32(8)), ops.ci32(2));
  auto at = [&](Value base, Value row, Value col, int ld) {
    return ops.gepBytes(
        base, ops.ext64(ops.mul(ops.add(ops.mul(row, ops.ci32(ld + P)), col),
                                ops.ci32(2))));
  };
  Value w16 = ops.mul(warp, ops.ci32(16));
  Value aRow = ops.add(w16, l16), aCol = ops.mul(hi16, ops.ci32(8));
  Value ntRow = ops.add(ops.mul(hi16, ops.ci32(8)), l8),
        ntCol = ops.mul(mid8, ops.ci32(8));
  Value tRow = ops.add(l8, ops.mul(mid8, ops.ci32(8))),
        tCol = ops.mul(hi16, ops.ci32(8));
  aK = at(sK, aRow, aCol, D);
  aV = at(sV, aRow, aCol, Dv);
  bQt = at(sQ, ntRow, ntCol, D);
  bDOt = at(sDO, ntRow, ntCol, Dv);
  bQn = at(sQ, tRow, tCol, D);
  bDOn = at(sDO, tRow, tCol, Dv);
  Value rg = arith::RemUIOp::create(b, warp, ops.ci32(sh.rowGroups()));
  Value cg = arith::DivUIOp::create(b, warp, ops.ci32(sh.rowGroups()));
  aDS = at(sDS, ntRow, ops.add(ops.mul(rg, ops.ci32(16)), ntCol), BN);
  bKn = at(sK, tRow, ops.add(tCol, ops.mul(cg, ops.ci32(sh.dqCols()))), D);
}

} // namespace

std::unique_ptr<BackwardMma> createMmaSyncBackward(KernelOps &ops,
                                                   const BackwardTileShape &sh,
                                                   Value warp, Value lane) {
  return std::make_unique<MmaSyncBackward>(ops, sh, warp, lane);
}

} // namespace flashjit::nvvm
