//===- BackwardWgmmaSplit.cpp - wgmma backward above head dim 128 ---------===//
//
// BackwardMma.h on sm_90a wgmma.mma_async for head dims above 128, where
// one warpgroup's dK and dV of 64 keys (D / 2 + Dv / 2 f32 per thread)
// leave no registers for the rest. Both warpgroups share the CTA's 64 keys
// and split the work instead (warpgroup wg = warp / 4, its warp w % 4
// holding keys 16 (w % 4)..):
//   S^T  = K Q^T    A = K (K-major, 64 keys), B = Q rows 32 wg.. K-major
//                   (m64n32: this warpgroup's half of the query tile)
//   dP^T = V dO^T   A = V, B = dO rows 32 wg.. (as above)
//   dV  += P^T dO   A = P^T from shared memory (K-major: each warpgroup
//                   stored its 32 query columns), B = dO MN-major from
//                   column Dv / 2 wg (m64n(Dv / 2))
//   dK  += dS^T Q   A = dS^T from shared memory, B = Q MN-major from
//                   column D / 2 wg
//   dQ   = dS K     as BackwardWgmma.cpp: M = the 64 queries, N = D / 2
//                   per warpgroup, A = dS read MN-major from dS^T.
// So each thread holds 64 + 64 accumulators of dK and dV at D = 256 (the
// unsplit kernel would need 256), S^T and dP^T 16 each. P^T and dS^T cross
// the warpgroups through shared memory: accumulateDV / accumulateDK store
// this warp's part, publish it (fence.proxy.async) and wait at a CTA
// barrier before the product; storeDS has nothing left to do. P^T lies in
// the second query-tile stage, which the synchronous tile step leaves
// unused. Shared tiles are 128-byte swizzled (SharedTile.h); descriptor
// steps as in BackwardWgmma.cpp. Column halves start on a 64-element
// block, so head dims are multiples of 128.
//
//===----------------------------------------------------------------------===//
#include "BackwardMma.h"
#include "SharedTile.h"
#include "Wgmma.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;

namespace flashjit::nvvm {

namespace {

class WgmmaSplitBackward : public BackwardMma {
public:
  WgmmaSplitBackward(KernelOps &ops, const BackwardTileShape &sh, Value warp,
                     Value lane)
      : ops(ops), b(ops.b), sh(sh), warp(warp), lane(lane) {}

  bool swizzled() const override { return true; }

  void prepare(Value sK, Value sV, Value sQ, Value sDO, Value sDS) override;

  void publish() override { fenceProxyAsync(ops); }

  SmallVector<Value> computeS() override {
    return keyMajor(descK, descQ, sh.headDimQK);
  }

  SmallVector<Value> computeDP() override {
    return keyMajor(descV, descDO, sh.headDimV);
  }

  SmallVector<Value> accumulateDV(ArrayRef<Value> dv,
                                  ArrayRef<Value> p) override {
    share(sP, p);
    return accumulateT(dv, descP, descDOn, sh.headDimV / 2);
  }

  SmallVector<Value> accumulateDK(ArrayRef<Value> dk,
                                  ArrayRef<Value> ds) override {
    share(sDS, ds);
    return accumulateT(dk, descDS, descQn, sh.headDimQK / 2);
  }

  // accumulateDK stored dS^T already.
  void storeDS(ArrayRef<Value>) override {}

  SmallVector<Value> computeDQ() override {
    SmallVector<int64_t> steps;
    for (int kk = 0; kk < sh.blockM / 16; ++kk)
      steps.push_back(mnStep(kk));
    return wgmmaChainOffsets(ops, {}, sh.dqCols(), descDSt, steps, {}, descKn,
                             steps, /*transB=*/true, /*transA=*/true);
  }

private:
  /// Descriptor offset (16-byte units) of k16 step \p kk of a K-major tile
  /// of \p rows rows.
  static int64_t kStep(int kk, int rows) {
    return (int64_t(kk / 4) * rows * 128 + (kk % 4) * 32) >> 4;
  }
  /// Descriptor offset of k16 step \p kk of an MN-major tile.
  static int64_t mnStep(int kk) { return (int64_t(kk) * 2048) >> 4; }

  /// This warpgroup's X Y^T: X [64 keys x dim] and Y this warpgroup's 32
  /// query rows [32 x dim], both K-major (m64n32).
  SmallVector<Value> keyMajor(Value descX, Value descY, int dim) {
    SmallVector<int64_t> aSteps, bSteps;
    for (int kk = 0; kk < dim / 16; ++kk) {
      aSteps.push_back(kStep(kk, sh.blockM));
      bSteps.push_back(kStep(kk, sh.blockN));
    }
    return wgmmaChainOffsets(ops, {}, sh.blockN / 2, descX, aSteps, {}, descY,
                             bSteps, /*transB=*/false, /*transA=*/false);
  }
  /// \p in + X^T Y: X^T [64 keys x blockN] K-major in shared memory, Y this
  /// warpgroup's \p cols columns of an MN-major [blockN x dim] tile.
  SmallVector<Value> accumulateT(ArrayRef<Value> in, Value descXt, Value descY,
                                 int cols) {
    SmallVector<int64_t> aSteps, bSteps;
    for (int kk = 0; kk < sh.blockN / 16; ++kk) {
      aSteps.push_back(kStep(kk, sh.blockM));
      bSteps.push_back(mnStep(kk));
    }
    return wgmmaChainOffsets(ops, in, cols, descXt, aSteps, {}, descY, bSteps,
                             /*transB=*/true, /*transA=*/false);
  }
  /// Writes this warp's part of \p x (16-bit; layout of S^T: keys
  /// 16 (w % 4) + g (+ 8), queries 32 wg + 8 jn + 2 t, + 1) into the
  /// [blockM x blockN] tile at \p tile, publishes it to the products and
  /// waits for the CTA (both warpgroups' halves).
  void share(Value tile, ArrayRef<Value> x) {
    Value g = arith::DivUIOp::create(b, lane, ops.ci32(4));
    Value t4 =
        ops.mul(arith::RemUIOp::create(b, lane, ops.ci32(4)), ops.ci32(4));
    Value chunk0 = ops.mul(wg, ops.ci32(sh.sTiles()));
    for (int r = 0; r < 2; ++r) {
      Value row =
          ops.add(ops.add(ops.mul(keyWarp, ops.ci32(16)), g), ops.ci32(8 * r));
      for (int jn = 0; jn < sh.sTiles(); ++jn) {
        Value off = ops.add(tileOffset(ops, row, ops.add(chunk0, ops.ci32(jn)),
                                       sh.blockM, sh.blockN, /*swizzled=*/true),
                            t4);
        LLVM::StoreOp::create(
            b, ops.pack(x[jn * 4 + 2 * r], x[jn * 4 + 2 * r + 1]),
            ops.gepBytes(tile, ops.ext64(off)), /*alignment=*/4);
      }
    }
    publish();
    gpu::BarrierOp::create(b);
  }

  KernelOps &ops;
  ImplicitLocOpBuilder &b;
  BackwardTileShape sh;
  Value warp, lane, wg, keyWarp, sP, sDS;
  Value descK, descV, descQ, descDO, descP, descDS, descQn, descDOn, descDSt,
      descKn;
};

void WgmmaSplitBackward::prepare(Value sK, Value sV, Value sQ, Value sDO,
                                 Value sDSIn) {
  sDS = sDSIn;
  const int64_t M = sh.blockM, N = sh.blockN;
  // The second query-tile stage (KernelConfig::sharedBytes: two stages).
  sP = ops.gepBytes(sQ, int64_t(2) * N * (sh.headDimQK + sh.headDimV));
  wg = arith::DivUIOp::create(b, warp, ops.ci32(4));
  keyWarp = arith::RemUIOp::create(b, warp, ops.ci32(4));
  auto addr = [&](Value p, Value byteOff) {
    return ops.add(LLVM::PtrToIntOp::create(b, ops.i64, p).getResult(),
                   ops.ext64(byteOff));
  };
  Value zero = ops.ci32(0);
  // This warpgroup's 32 query rows (8-row groups 1024 bytes apart).
  Value qRows = ops.mul(wg, ops.ci32(int(N) / 2 * 128));
  descK = wgmmaDescriptor(ops, addr(sK, zero), 16, 1024);
  descV = wgmmaDescriptor(ops, addr(sV, zero), 16, 1024);
  descQ = wgmmaDescriptor(ops, addr(sQ, qRows), 16, 1024);
  descDO = wgmmaDescriptor(ops, addr(sDO, qRows), 16, 1024);
  descP = wgmmaDescriptor(ops, addr(sP, zero), 16, 1024);
  descDS = wgmmaDescriptor(ops, addr(sDS, zero), 16, 1024);
  descDSt = wgmmaDescriptor(ops, addr(sDS, zero), M * 128, 1024);
  // Column half wg of a [rows x dim] tile: its first 64-element block.
  auto half = [&](int dim, int64_t rows) {
    return ops.mul(wg, ops.ci32(int(dim / 2 / 64 * rows * 128)));
  };
  descQn = wgmmaDescriptor(ops, addr(sQ, half(sh.headDimQK, N)), N * 128, 1024);
  descDOn =
      wgmmaDescriptor(ops, addr(sDO, half(sh.headDimV, N)), N * 128, 1024);
  descKn = wgmmaDescriptor(ops, addr(sK, half(sh.headDimQK, M)), M * 128, 1024);
}

} // namespace

std::unique_ptr<BackwardMma>
createWgmmaSplitBackward(KernelOps &ops, const BackwardTileShape &sh,
                         Value warp, Value lane) {
  return std::make_unique<WgmmaSplitBackward>(ops, sh, warp, lane);
}

} // namespace flashjit::nvvm
