//===- MmaSync.cpp - mma.sync m16n8k16 and ldmatrix -----------------------===//
//
// The primitives of MmaSync.h and the forward kernel's mma.sync products
// (MmaStrategy.h): each warp owns RW = 16 or 32 query rows (MT m16 tiles
// that share every K and V fragment loaded from shared memory); P stays in
// registers (the C-fragment layout of two n8 tiles is the A-fragment layout
// of one k16 slice).
//
//===----------------------------------------------------------------------===//
#include "MmaSync.h"
#include "MmaStrategy.h"
#include "SharedTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace flashjit::nvvm {

SmallVector<Value, 4> ldmatrixX4(KernelOps &ops, Value addr, bool trans) {
  ImplicitLocOpBuilder &b = ops.b;
  auto st = LLVM::LLVMStructType::getLiteral(
      b.getContext(), {ops.i32, ops.i32, ops.i32, ops.i32});
  Value r = NVVM::LdMatrixOp::create(
      b, st, addr, 4u, trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
      NVVM::LdStMatrixShapeAttr::get(b.getContext(), 8, 8),
      NVVM::LdStMatrixEltType::B16);
  SmallVector<Value, 4> out;
  for (int64_t i = 0; i < 4; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, r, i));
  return out;
}

/// \p packed as an mma operand: i32 for bf16, vector<2xf16> for fp16.
static Value asOperand(KernelOps &ops, Value packed) {
  if (ops.bf16)
    return packed;
  return LLVM::BitcastOp::create(
      ops.b, VectorType::get({2}, ops.b.getF16Type()), packed);
}

void mmaM16N8K16(KernelOps &ops, ArrayRef<Value> a, Value b0, Value b1,
                 MutableArrayRef<Value> acc) {
  ImplicitLocOpBuilder &b = ops.b;
  auto st = LLVM::LLVMStructType::getLiteral(
      b.getContext(), {ops.f32, ops.f32, ops.f32, ops.f32});
  SmallVector<Value> av, bv;
  for (Value x : a)
    av.push_back(asOperand(ops, x));
  bv.push_back(asOperand(ops, b0));
  bv.push_back(asOperand(ops, b1));
  NVVM::MMATypes t = ops.bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  Value d = NVVM::MmaOp::create(
      b, st, av, bv, ValueRange(acc), ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt, std::array<NVVM::MMATypes, 2>{t, t},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  for (int64_t i = 0; i < 4; ++i)
    acc[i] = LLVM::ExtractValueOp::create(b, d, i);
}

namespace {

class MmaSyncForward : public ForwardMma {
public:
  MmaSyncForward(KernelOps &ops, const TileShape &shape, Value warp, Value lane)
      : ops(ops), sh(shape), warp(warp), lane(lane) {}

  bool swizzled() const override { return false; }

  void prepare(Value sQ, Value sK, Value sV) override {
    // Per-lane ldmatrix addresses (see MMA-FRAGMENTS.md).
    ImplicitLocOpBuilder &b = ops.b;
    const int D = sh.headDimQK, Dv = sh.headDimV;
    Value l16 = arith::RemUIOp::create(b, lane, ops.ci32(16));
    Value l8 = arith::RemUIOp::create(b, lane, ops.ci32(8));
    Value hi16 = arith::DivUIOp::create(b, lane, ops.ci32(16));
    Value mid8 = arith::RemUIOp::create(
        b, arith::DivUIOp::create(b, lane, ops.ci32(8)), ops.ci32(2));
    Value qLane =
        ops.add(ops.mul(ops.add(ops.mul(warp, ops.ci32(sh.rowsPerWarp)), l16),
                        ops.ci32(D + kPad)),
                ops.mul(hi16, ops.ci32(8)));
    aQ = ops.gepBytes(sQ, ops.ext64(ops.mul(qLane, ops.ci32(2))));
    Value kLane = ops.add(
        ops.mul(ops.add(ops.mul(hi16, ops.ci32(8)), l8), ops.ci32(D + kPad)),
        ops.mul(mid8, ops.ci32(8)));
    aK = ops.gepBytes(sK, ops.ext64(ops.mul(kLane, ops.ci32(2))));
    Value vLane = ops.add(
        ops.mul(ops.add(l8, ops.mul(mid8, ops.ci32(8))), ops.ci32(Dv + kPad)),
        ops.mul(hi16, ops.ci32(8)));
    aV = ops.gepBytes(sV, ops.ext64(ops.mul(vLane, ops.ci32(2))));
  }

  void loadQ() override {
    if (!qInRegisters())
      return;
    for (int mt = 0; mt < sh.mTiles(); ++mt)
      for (int kk = 0; kk < sh.qkSteps(); ++kk)
        qFrag.push_back(loadQFrag(mt, kk));
  }

  void selectStage(Value stageOff) override {
    aKs = ops.gepBytes(aK, stageOff);
    aVs = ops.gepBytes(aV, stageOff);
  }

  SmallVector<Value> computeS() override {
    const int D = sh.headDimQK, MT = sh.mTiles(), nS = sh.sTiles();
    const int kQ = sh.qkSteps();
    SmallVector<Value> s(MT * nS * 4, ops.cf32(0.0f));
    for (int kk = 0; kk < kQ; ++kk) {
      SmallVector<SmallVector<Value, 4>, 2> af;
      for (int mt = 0; mt < MT; ++mt)
        af.push_back(qInRegisters() ? qFrag[mt * kQ + kk] : loadQFrag(mt, kk));
      // Each K fragment feeds the MT m16 tiles.
      for (int jn = 0; jn < nS; jn += 2) {
        auto bf = ldmatrixX4(
            ops,
            ops.gepBytes(aKs, 2 * (int64_t(jn) * 8 * (D + kPad) + kk * 16)),
            false);
        for (int mt = 0; mt < MT; ++mt) {
          MutableArrayRef<Value> sm(s.data() + mt * nS * 4, nS * 4);
          mmaM16N8K16(ops, af[mt], bf[0], bf[1], sm.slice(jn * 4, 4));
          mmaM16N8K16(ops, af[mt], bf[2], bf[3], sm.slice((jn + 1) * 4, 4));
        }
      }
    }
    return s;
  }

  SmallVector<Value> accumulatePV(ArrayRef<Value> oIn,
                                  ArrayRef<Value> st) override {
    const int Dv = sh.headDimV, MT = sh.mTiles(), nS = sh.sTiles();
    const int nO = sh.oTiles();
    SmallVector<Value> o(oIn);
    for (int kk = 0; kk < sh.pvSteps(); ++kk) {
      int n0 = 2 * kk, n1 = 2 * kk + 1;
      SmallVector<SmallVector<Value, 4>, 2> pa;
      for (int mt = 0; mt < MT; ++mt) {
        ArrayRef<Value> sm(st.data() + mt * nS * 4, nS * 4);
        pa.push_back({ops.pack(sm[n0 * 4 + 0], sm[n0 * 4 + 1]),
                      ops.pack(sm[n0 * 4 + 2], sm[n0 * 4 + 3]),
                      ops.pack(sm[n1 * 4 + 0], sm[n1 * 4 + 1]),
                      ops.pack(sm[n1 * 4 + 2], sm[n1 * 4 + 3])});
      }
      // Each V fragment feeds the MT m16 tiles.
      for (int jd = 0; jd < nO; jd += 2) {
        auto bf = ldmatrixX4(
            ops,
            ops.gepBytes(aVs, 2 * (int64_t(kk) * 16 * (Dv + kPad) + jd * 8)),
            true);
        for (int mt = 0; mt < MT; ++mt) {
          MutableArrayRef<Value> om(o.data() + mt * nO * 4, nO * 4);
          mmaM16N8K16(ops, pa[mt], bf[0], bf[1], om.slice(jd * 4, 4));
          mmaM16N8K16(ops, pa[mt], bf[2], bf[3], om.slice((jd + 1) * 4, 4));
        }
      }
    }
    return o;
  }

private:
  /// Q fragments stay in registers while they fit beside the accumulators.
  bool qInRegisters() const { return sh.headDimQK * sh.mTiles() <= 128; }
  SmallVector<Value, 4> loadQFrag(int mt, int kk) {
    const int D = sh.headDimQK;
    return ldmatrixX4(
        ops, ops.gepBytes(aQ, 2 * (int64_t(mt) * 16 * (D + kPad) + kk * 16)),
        false);
  }

  KernelOps &ops;
  TileShape sh;
  Value warp, lane;
  Value aQ, aK, aV, aKs, aVs;
  SmallVector<SmallVector<Value, 4>> qFrag; // [mt * kQ + kk]
};

} // namespace

std::unique_ptr<ForwardMma> createMmaSyncForward(KernelOps &ops,
                                                 const TileShape &shape,
                                                 Value warp, Value lane) {
  return std::make_unique<MmaSyncForward>(ops, shape, warp, lane);
}

} // namespace flashjit::nvvm
