//===- BackwardWgmma.cpp - The backward's products with wgmma -------------===//
//
// BackwardMma.h on sm_90a wgmma.mma_async: two warpgroups of 64 keys each
// (warp w holds keys 16 w.., the accumulator of m64nN being per warp the
// C-fragment layout of N / 8 mma.sync n8 tiles), query tiles of 64 rows.
// Every shared tile is 128-byte swizzled (SharedTile.h: 64-element column
// blocks of rows x 128 bytes) and read through descriptors (Wgmma.h):
//   S^T  = K Q^T    A = K (K-major, this warpgroup's 64 rows), B = Q K-major
//   dP^T = V dO^T   A = V, B = dO (as above)
//   dV  += P^T dO   A = P^T in registers, B = dO MN-major
//   dK  += dS^T Q   A = dS^T in registers, B = Q MN-major
//   dQ   = dS K     M = the 64 queries, N = D / 2 per warpgroup; A = dS
//                   read MN-major from the dS^T tile (imm-trans-a),
//                   B = K MN-major from column D / 2 * warpgroup.
// K-major descriptors: 8-row groups 1024 bytes apart, k16 step kk at
// (kk / 4) * rows * 128 + (kk % 4) * 32 bytes. MN-major: 64-element blocks
// rows * 128 bytes apart (LBO), 8 k rows 1024 bytes apart (SBO), k16 step
// kk at kk * 2048 bytes. The Q / dO descriptors move with selectStage (the
// kernel's two-stage query-tile ring); issue* / wait are the asynchronous
// products (Wgmma.h: wgmmaIssueOffsets, wgmmaWait).
//
//===----------------------------------------------------------------------===//
#include "BackwardMma.h"
#include "SharedTile.h"
#include "Wgmma.h"

using namespace mlir;

namespace flashjit::nvvm {

namespace {

class WgmmaBackward : public BackwardMma {
public:
  WgmmaBackward(KernelOps &ops, const BackwardTileShape &sh, Value warp,
                Value lane)
      : ops(ops), b(ops.b), sh(sh), warp(warp), lane(lane) {}

  bool swizzled() const override { return true; }

  void prepare(Value sK, Value sV, Value sQ, Value sDO, Value sDS) override;

  void publish() override { fenceProxyAsync(ops); }

  SmallVector<Value> computeS() override {
    return keyMajor(descK, staged(descQ), sh.headDimQK, /*wait=*/true);
  }

  SmallVector<Value> computeDP() override {
    return keyMajor(descV, staged(descDO), sh.headDimV, /*wait=*/true);
  }

  SmallVector<Value> accumulateDV(ArrayRef<Value> dv,
                                  ArrayRef<Value> p) override {
    return accumulateT(dv, packA(p), staged(descDOn), sh.headDimV,
                       /*wait=*/true);
  }

  SmallVector<Value> accumulateDK(ArrayRef<Value> dk,
                                  ArrayRef<Value> ds) override {
    return accumulateT(dk, packA(ds), staged(descQn), sh.headDimQK,
                       /*wait=*/true);
  }

  bool asyncProducts() const override { return true; }

  void selectStage(Value stageBytes) override {
    stageDesc = arith::ShRUIOp::create(b, stageBytes, ops.ci64(4));
  }

  // The asynchronous products address V, dO and the MN-major views from
  // the K and Q descriptors plus constant offsets (vOff, dOOff, mnLbo: the
  // tiles lie a fixed distance apart and differ in LBO only), so only
  // four descriptors stay live through the loop (registers: the D = 128
  // masked kernels spilled with eight).
  SmallVector<Value> issueS() override {
    return keyMajor(descK, staged(descQ), sh.headDimQK, /*wait=*/false);
  }

  SmallVector<Value> issueDP() override {
    return keyMajor(descK, staged(descQ), sh.headDimV, /*wait=*/false, vOff(),
                    dOOff());
  }

  // Step kk of P^T dO / dS^T Q takes the n8 tiles 2 kk and 2 kk + 1 of the
  // S^T layout, rows g then g + 8 of each.
  SmallVector<Value> packA(ArrayRef<Value> x) override {
    SmallVector<Value> regs;
    for (int kk = 0; kk < sh.blockN / 16; ++kk) {
      int n0 = 2 * kk, n1 = 2 * kk + 1;
      regs.append({ops.pack(x[n0 * 4 + 0], x[n0 * 4 + 1]),
                   ops.pack(x[n0 * 4 + 2], x[n0 * 4 + 3]),
                   ops.pack(x[n1 * 4 + 0], x[n1 * 4 + 1]),
                   ops.pack(x[n1 * 4 + 2], x[n1 * 4 + 3])});
    }
    return regs;
  }

  SmallVector<Value> issueDV(ArrayRef<Value> dv,
                             ArrayRef<Value> pPacked) override {
    return accumulateT(dv, pPacked, staged(descQ), sh.headDimV,
                       /*wait=*/false, dOOff() + mnLbo());
  }

  SmallVector<Value> issueDK(ArrayRef<Value> dk,
                             ArrayRef<Value> dsPacked) override {
    return accumulateT(dk, dsPacked, staged(descQ), sh.headDimQK,
                       /*wait=*/false, mnLbo());
  }

  SmallVector<Value> issueDQ() override { return productDQ(/*wait=*/false); }

  SmallVector<Value> wait(ArrayRef<Value> acc, int pending,
                          ArrayRef<Value> keep) override {
    return wgmmaWait(ops, acc, pending, keep);
  }

  void storeDS(ArrayRef<Value> ds) override {
    storeWords([&](int r, int jn) {
      return ops.pack(ds[jn * 4 + 2 * r], ds[jn * 4 + 2 * r + 1]);
    });
  }

  // packA's word 2 jn + r holds elements jn * 4 + 2 r, + 1 (see packA).
  void storeDSPacked(ArrayRef<Value> dsPacked) override {
    storeWords([&](int r, int jn) { return dsPacked[2 * jn + r]; });
  }

  SmallVector<Value> computeDQ() override { return productDQ(/*wait=*/true); }

private:
  /// Stores \p word(r, jn) (packed 16-bit pair) at key row 16 w + g (+ 8
  /// for \p r 1) of the [blockM x blockN] dS^T tile, queries 8 jn + 2 t,
  /// 2 t + 1: chunk jn of the row, 4 bytes at 4 t.
  void storeWords(llvm::function_ref<Value(int, int)> word) {
    Value g = arith::DivUIOp::create(b, lane, ops.ci32(4));
    Value t4 =
        ops.mul(arith::RemUIOp::create(b, lane, ops.ci32(4)), ops.ci32(4));
    for (int r = 0; r < 2; ++r) {
      Value row =
          ops.add(ops.add(ops.mul(warp, ops.ci32(16)), g), ops.ci32(8 * r));
      for (int jn = 0; jn < sh.sTiles(); ++jn) {
        Value off = ops.add(tileOffset(ops, row, ops.ci32(jn), sh.blockM,
                                       sh.blockN, /*swizzled=*/true),
                            t4);
        LLVM::StoreOp::create(b, word(r, jn),
                              ops.gepBytes(sDSp, ops.ext64(off)),
                              /*alignment=*/4);
      }
    }
  }

  /// Descriptor offset (16-byte units) of k16 step \p kk of a K-major tile
  /// of \p rows rows.
  static int64_t kStep(int kk, int rows) {
    return (int64_t(kk / 4) * rows * 128 + (kk % 4) * 32) >> 4;
  }
  /// Descriptor offset of k16 step \p kk of an MN-major tile.
  static int64_t mnStep(int kk) { return (int64_t(kk) * 2048) >> 4; }

  /// Descriptor offsets: V from K (sV = sK + blockM * D * 2 bytes), dO
  /// from Q (sDO = sQ + blockN * D * 2 bytes), and the MN-major view of a
  /// query-tile operand from its K-major one (LBO blockN * 128 bytes
  /// instead of 16: wgmmaDescriptor's bits 16-29).
  int64_t vOff() const { return (int64_t(2) * sh.blockM * sh.headDimQK) >> 4; }
  int64_t dOOff() const { return (int64_t(2) * sh.blockN * sh.headDimQK) >> 4; }
  int64_t mnLbo() const {
    return ((int64_t(sh.blockN) * 128 >> 4) - (16 >> 4)) << 16;
  }
  /// \p desc in the selected stage of the query-tile ring.
  Value staged(Value desc) {
    return stageDesc ? ops.add(desc, stageDesc) : desc;
  }
  /// wgmmaChainOffsets, or wgmmaIssueOffsets unless \p wait.
  SmallVector<Value> chain(ArrayRef<Value> acc, int n, Value aBase,
                           ArrayRef<int64_t> aSteps, ArrayRef<Value> aRegs,
                           Value bBase, ArrayRef<int64_t> bSteps, bool transB,
                           bool transA, bool wait) {
    return wait ? wgmmaChainOffsets(ops, acc, n, aBase, aSteps, aRegs, bBase,
                                    bSteps, transB, transA)
                : wgmmaIssueOffsets(ops, acc, n, aBase, aSteps, aRegs, bBase,
                                    bSteps, transB, transA);
  }
  /// dQ = dS K (this warpgroup's D / 2 columns).
  SmallVector<Value> productDQ(bool wait) {
    SmallVector<int64_t> steps;
    for (int kk = 0; kk < sh.blockM / 16; ++kk)
      steps.push_back(mnStep(kk));
    return chain({}, sh.dqCols(), descDSt, steps, {}, descKn, steps,
                 /*transB=*/true, /*transA=*/true, wait);
  }
  /// This warpgroup's X Y^T with X [blockM x dim] and Y [blockN x dim]
  /// both K-major.
  /// \p aOff / \p bOff: constant descriptor offsets added to every step.
  SmallVector<Value> keyMajor(Value descX, Value descY, int dim, bool wait,
                              int64_t aOff = 0, int64_t bOff = 0) {
    SmallVector<int64_t> aSteps, bSteps;
    for (int kk = 0; kk < dim / 16; ++kk) {
      aSteps.push_back(aOff + kStep(kk, sh.blockM));
      bSteps.push_back(bOff + kStep(kk, sh.blockN));
    }
    return chain({}, sh.blockN, descX, aSteps, {}, descY, bSteps,
                 /*transB=*/false, /*transA=*/false, wait);
  }
  /// \p in + X^T Y with X^T in registers (\p regs = packA(X^T)) and Y the
  /// MN-major [blockN x dim] tile of descriptor \p descY.
  SmallVector<Value> accumulateT(ArrayRef<Value> in, ArrayRef<Value> regs,
                                 Value descY, int dim, bool wait,
                                 int64_t bOff = 0) {
    SmallVector<int64_t> steps;
    for (int kk = 0; kk < sh.blockN / 16; ++kk)
      steps.push_back(bOff + mnStep(kk));
    return chain(in, dim, Value(), {}, regs, descY, steps, /*transB=*/true,
                 /*transA=*/false, wait);
  }

  KernelOps &ops;
  ImplicitLocOpBuilder &b;
  BackwardTileShape sh;
  Value warp, lane, sDSp;
  Value descK, descV, descQ, descDO, descQn, descDOn, descDSt, descKn;
  /// The selected query-tile stage in descriptor units (null: stage 0).
  Value stageDesc;
};

void WgmmaBackward::prepare(Value sK, Value sV, Value sQ, Value sDO,
                            Value sDS) {
  sDSp = sDS;
  auto addr = [&](Value p) {
    return LLVM::PtrToIntOp::create(b, ops.i64, p).getResult();
  };
  Value wg = arith::DivUIOp::create(b, warp, ops.ci32(4));
  // This warpgroup's 64 key rows of K and V (8-row groups 1024 bytes apart).
  Value wgRows = ops.ext64(ops.mul(wg, ops.ci32(64 * 128)));
  const int64_t M = sh.blockM, N = sh.blockN;
  descK = wgmmaDescriptor(ops, ops.add(addr(sK), wgRows), 16, 1024);
  descV = wgmmaDescriptor(ops, ops.add(addr(sV), wgRows), 16, 1024);
  descQ = wgmmaDescriptor(ops, addr(sQ), 16, 1024);
  descDO = wgmmaDescriptor(ops, addr(sDO), 16, 1024);
  descQn = wgmmaDescriptor(ops, addr(sQ), N * 128, 1024);
  descDOn = wgmmaDescriptor(ops, addr(sDO), N * 128, 1024);
  descDSt = wgmmaDescriptor(ops, addr(sDS), M * 128, 1024);
  // dQ's columns D / 2 * wg..: their 64-element block, then 2 bytes per
  // column inside it (the swizzle applies to the address).
  Value col = ops.mul(wg, ops.ci32(sh.dqCols()));
  Value colOff = ops.add(
      ops.mul(arith::DivUIOp::create(b, col, ops.ci32(64)),
              ops.ci32(int(M) * 128)),
      ops.mul(arith::RemUIOp::create(b, col, ops.ci32(64)), ops.ci32(2)));
  descKn =
      wgmmaDescriptor(ops, ops.add(addr(sK), ops.ext64(colOff)), M * 128, 1024);
}

} // namespace

// The asynchronous products exist only for wgmma.
void BackwardMma::selectStage(Value) {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::issueS() {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::issueDP() {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::packA(ArrayRef<Value>) {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::issueDV(ArrayRef<Value>, ArrayRef<Value>) {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::issueDK(ArrayRef<Value>, ArrayRef<Value>) {
  llvm_unreachable("asynchronous products are wgmma's");
}
void BackwardMma::storeDSPacked(ArrayRef<Value>) {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::issueDQ() {
  llvm_unreachable("asynchronous products are wgmma's");
}
SmallVector<Value> BackwardMma::wait(ArrayRef<Value>, int, ArrayRef<Value>) {
  llvm_unreachable("asynchronous products are wgmma's");
}

std::unique_ptr<BackwardMma> createWgmmaBackward(KernelOps &ops,
                                                 const BackwardTileShape &sh,
                                                 Value warp, Value lane) {
  return std::make_unique<WgmmaBackward>(ops, sh, warp, lane);
}

} // namespace flashjit::nvvm
