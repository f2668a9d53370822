//===- WgmmaFp8.cpp - The fp8 forward's wgmma products (sm_90a) -----------===//
//
// The products of the fp8 forward kernel (MmaStrategy.h:
// createWgmmaFp8Forward; issue 18). fp8 wgmma (m64nNk32, .e4m3 / .e5m2)
// reads both shared-memory operands K-major only (PTX ISA, wgmma: the
// transpose immediates exist for 16-bit types only), so:
//   S = Q K^T   Q [block_m, D] and K [block_n, D] are K-major as loaded
//               (one byte per element, 128-byte swizzled rows);
//   O += P V    P from registers (the A operand: thread (g, t) of a warp
//               holds, per k32 step, rows g and g + 8 at k = 4t..4t+3 and
//               16+4t..16+4t+3, four e4m3 bytes per register, lowest k in
//               the lowest byte), V^T [Dv, block_n] K-major in shared
//               memory, written here from the stage's V.
// The accumulator of S gives thread t the columns 2t, 2t + 1, 8 + 2t,
// 9 + 2t of each 16 keys; the sum over keys in P V takes any order of the
// keys that P and V^T share, so V^T's byte 4t + i of each 16 keys holds
// key 2t + (i & 1) + 8 (i >> 1): P packs from the accumulator with no
// shuffle. P is quantised times 256 (P <= 1, so at most 256 < 448, e4m3's
// largest; FlashAttention-3 shifts the exponent by 8 for the same reason:
// P then uses e4m3's normal range); the epilogue divides by 256.
//
//===----------------------------------------------------------------------===//
#include "MmaStrategy.h"
#include "SharedTile.h"
#include "Wgmma.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <string>

using namespace mlir;

namespace flashjit::nvvm {
namespace {

/// One warpgroup's chain of wgmma m64nNk32 steps (\p ta x \p tb operands,
/// f32 accumulators) in one asm block, as wgmmaChain: A_s is the descriptor
/// \p aDesc[s] or 4 registers (\p aRegs[4 s..]); B_s is the K-major
/// descriptor \p bDesc[s] (fp8 operands have no transpose).
SmallVector<Value> fp8Chain(KernelOps &ops, ArrayRef<Value> acc, int n,
                            ArrayRef<Value> aDesc, ArrayRef<Value> aRegs,
                            ArrayRef<Value> bDesc, const std::string &ta,
                            const std::string &tb) {
  return wgmmaChainOf(ops, acc, n, aDesc, aRegs, bDesc,
                      "k32.f32." + ta + "." + tb, "");
}

class WgmmaFp8Forward : public ForwardMma {
public:
  WgmmaFp8Forward(KernelOps &ops, const TileShape &shape, Value warp, Value tid,
                  int nthreads, Value sVt, std::string typeQ, std::string typeK,
                  std::string typeV)
      : ops(ops), sh(shape), warp(warp), tid(tid), nthreads(nthreads), sVt(sVt),
        typeQ(std::move(typeQ)), typeK(std::move(typeK)),
        typeV(std::move(typeV)) {}

  bool swizzled() const override { return true; }

  // Q, K and V^T are K-major tiles of 128-byte rows (8-row groups 1024
  // bytes apart); a warpgroup's 64 rows of Q start 64 * 128 bytes apart.
  void prepare(Value sQ, Value sK, Value sV) override {
    ImplicitLocOpBuilder &b = ops.b;
    Value wgRows =
        ops.mul(arith::DivUIOp::create(b, warp, ops.ci32(4)), ops.ci32(64));
    Value qAddr = LLVM::PtrToIntOp::create(b, ops.i64, sQ);
    descQ = wgmmaDescriptor(
        ops, ops.add(qAddr, ops.ext64(ops.mul(wgRows, ops.ci32(128)))), 16,
        1024);
    descK0 = wgmmaDescriptor(
        ops, LLVM::PtrToIntOp::create(b, ops.i64, sK).getResult(), 16, 1024);
    descVt = wgmmaDescriptor(
        ops, LLVM::PtrToIntOp::create(b, ops.i64, sVt).getResult(), 16, 1024);
    sV0 = sV;
  }

  void publishStage() override {
    fenceProxyAsync(ops); // Q and this stage's K are read by wgmma
  }

  // Called after the barrier that publishes the stage: V^T of it, then a
  // barrier (the previous tile's P V finished before the loop's closing
  // barrier, so V^T is free).
  void selectStage(Value off) override {
    stageOff = off;
    transposeV(ops.gepBytes(sV0, off));
    fenceProxyAsync(ops);
    gpu::BarrierOp::create(ops.b);
  }

  SmallVector<Value> computeS() override {
    Value dK =
        ops.add(descK0, arith::ShRUIOp::create(ops.b, stageOff, ops.ci64(4)));
    SmallVector<Value> aD, bD;
    for (int kk = 0; kk < sh.headDimQK / 32; ++kk) {
      aD.push_back(ops.add(descQ, ops.ci64(kStep(kk, sh.blockM))));
      bD.push_back(ops.add(dK, ops.ci64(kStep(kk, sh.blockN))));
    }
    return fp8Chain(ops, {}, sh.blockN, aD, {}, bD, typeQ, typeK);
  }

  SmallVector<Value> accumulatePV(ArrayRef<Value> o,
                                  ArrayRef<Value> st) override {
    SmallVector<Value> pRegs, vD;
    for (int kk = 0; kk < sh.blockN / 32; ++kk) {
      // n8 tiles 4 kk .. 4 kk + 3 hold keys 32 kk .. 32 kk + 31.
      for (int half = 0; half < 2; ++half) {
        int n0 = 4 * kk + 2 * half, n1 = n0 + 1;
        for (int r = 0; r < 2; ++r) // rows g, g + 8
          pRegs.push_back(pack4(st[n0 * 4 + 2 * r], st[n0 * 4 + 2 * r + 1],
                                st[n1 * 4 + 2 * r], st[n1 * 4 + 2 * r + 1]));
      }
      vD.push_back(ops.add(descVt, ops.ci64(kStep(kk, sh.headDimV))));
    }
    return fp8Chain(ops, o, sh.headDimV, {}, pRegs, vD, "e4m3", typeV);
  }

private:
  /// Descriptor offset (16-byte units) of k32 step \p kk of a K-major fp8
  /// tile of \p rows rows (column blocks of 128 bytes).
  static int64_t kStep(int kk, int rows) {
    return (int64_t(kk / 4) * rows * 128 + (kk % 4) * 32) >> 4;
  }

  /// 256 x (x0, x1, x2, x3) as e4m3 bytes of one register, x0 lowest
  /// (cvt.rn.satfinite: round to nearest even).
  Value pack4(Value x0, Value x1, Value x2, Value x3) {
    Value k = ops.cf32(256.0f);
    return ops
        .inlineAsm(ops.i32,
                   {ops.fmul(x0, k), ops.fmul(x1, k), ops.fmul(x2, k),
                    ops.fmul(x3, k)},
                   "{\n.reg .b16 lo, hi;\n"
                   "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
                   "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
                   "mov.b32 $0, {lo, hi};\n}",
                   "=r,f,f,f,f")
        .getResult(0);
  }

  /// V^T of the stage at \p sV (a swizzled tile of block_n rows of head_dim_v
  /// bytes) into sVt, in P's key order (file comment). Each unit moves the
  /// 4 x 4 bytes of keys 16 h + 2 t + {0, 1, 8, 9} x columns 4 e..4 e + 3:
  /// four 32-bit loads, eight byte permutes, four 32-bit stores. A warp's
  /// lanes take bits 0-1 of e, bit 0 of h and t (a search over the lane
  /// bits: 16 shared-memory wavefronts for the eight accesses at head dim
  /// 128, against 68 with the lanes over e alone).
  void transposeV(Value sV) {
    ImplicitLocOpBuilder &b = ops.b;
    const int groups = sh.headDimV / 4, units = sh.blockN / 4 * groups;
    const int eHigh = groups / 4; // values of e >> 2
    for (int it = 0; it * nthreads < units; ++it) {
      Value u = ops.add(tid, ops.ci32(it * nthreads));
      Value r = arith::ShRUIOp::create(b, u, ops.ci32(5));
      Value e = ops.add(
          ops.land(u, ops.ci32(3)),
          ops.mul(arith::RemUIOp::create(b, r, ops.ci32(eHigh)), ops.ci32(4)));
      Value h = ops.add(
          ops.land(arith::ShRUIOp::create(b, u, ops.ci32(2)), ops.ci32(1)),
          ops.mul(arith::DivUIOp::create(b, r, ops.ci32(eHigh)), ops.ci32(2)));
      Value t =
          ops.land(arith::ShRUIOp::create(b, u, ops.ci32(3)), ops.ci32(3));
      Value t2 = ops.mul(t, ops.ci32(4)); // V^T's byte in the 16 keys
      Value key0 = ops.add(ops.mul(h, ops.ci32(16)), ops.mul(t, ops.ci32(2)));
      Value col = ops.mul(e, ops.ci32(4));
      Value chunk = arith::DivUIOp::create(b, col, ops.ci32(16));
      Value within = arith::RemUIOp::create(b, col, ops.ci32(16));
      SmallVector<Value> in;
      for (int k : {0, 1, 8, 9}) {
        Value key = ops.add(key0, ops.ci32(k));
        Value off = ops.add(tileOffset(ops, key, chunk, sh.blockN,
                                       sh.headDimV / 2, /*swizzled=*/true),
                            within);
        in.push_back(LLVM::LoadOp::create(b, ops.i32,
                                          ops.gepBytes(sV, ops.ext64(off)),
                                          /*alignment=*/4));
      }
      SmallVector<Type> fields(4, ops.i32);
      auto perm = ops.inlineAsm(
          LLVM::LLVMStructType::getLiteral(b.getContext(), fields), in,
          "{\n.reg .b32 x01, y01, x23, y23;\n"
          "prmt.b32 x01, $4, $5, 0x5140;\nprmt.b32 y01, $4, $5, 0x7362;\n"
          "prmt.b32 x23, $6, $7, 0x5140;\nprmt.b32 y23, $6, $7, 0x7362;\n"
          "prmt.b32 $0, x01, x23, 0x5410;\nprmt.b32 $1, x01, x23, 0x7632;\n"
          "prmt.b32 $2, y01, y23, 0x5410;\nprmt.b32 $3, y01, y23, 0x7632;\n}",
          "=r,=r,=r,=r,r,r,r,r");
      for (int j = 0; j < 4; ++j) {
        Value d = ops.add(col, ops.ci32(j));
        Value off = ops.add(tileOffset(ops, d, h, sh.headDimV, sh.blockN / 2,
                                       /*swizzled=*/true),
                            t2);
        LLVM::StoreOp::create(
            b, LLVM::ExtractValueOp::create(b, perm.getResult(0), j),
            ops.gepBytes(sVt, ops.ext64(off)), /*alignment=*/4);
      }
    }
  }

  KernelOps &ops;
  TileShape sh;
  Value warp, tid;
  int nthreads;
  Value sVt, sV0;
  std::string typeQ, typeK, typeV;
  Value descQ, descK0, descVt, stageOff;
};

} // namespace

std::unique_ptr<ForwardMma>
createWgmmaFp8Forward(KernelOps &ops, const TileShape &shape, Value warp,
                      Value tid, int nthreads, Value sVt,
                      const std::string &typeQ, const std::string &typeK,
                      const std::string &typeV) {
  return std::make_unique<WgmmaFp8Forward>(ops, shape, warp, tid, nthreads, sVt,
                                           typeQ, typeK, typeV);
}

} // namespace flashjit::nvvm
