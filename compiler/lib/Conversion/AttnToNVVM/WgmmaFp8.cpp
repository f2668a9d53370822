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
// Masked keys (MaskedValues.h's rule and scheme, in fp8 bytes): the
// transpose loads every byte of the stage's V, so with a mask its threads
// also scan what they moved (per 32-bit word an and, an add and an or:
// bit 7 of each byte of (w & M) + A is set iff the byte is NaN or Inf, M,
// A = 0x7f, 0x01 for e4m3 (NaN: S.1111.111; no Inf), 0x7c, 0x04 for e5m2
// (exponent 11111: Inf or NaN)), and the barrier after the transpose,
// which the kernel has anyway, ORs the votes (bar.red.or): no barrier and
// no shared-memory read of its own, where the 16-bit kernels' in-tile
// vote costs a barrier. In a partial tile where it found one (rare), the
// guarded path: each thread adds to its O the terms P8 * V8 of the keys
// whose V8 is not finite and whose e4m3 weight P8 (as the product takes
// it) is not 0, from the stage's raw V; then the transpose runs again
// with the non-finite bytes zeroed (each thread rewrites the words it
// wrote), a fence and a barrier, and the plain product runs on it. Exact
// as the 16-bit scheme: the dequantised V is V8 * v_descale, applied to O
// in the epilogue, so a finite descale keeps finite values finite and
// non-finite ones non-finite.
//
//===----------------------------------------------------------------------===//
#include "MaskedValues.h"
#include "MmaStrategy.h"
#include "SharedTile.h"
#include "Wgmma.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

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
    transposeV(ops.gepBytes(sV0, off), /*scan=*/false, /*zero=*/false);
    fenceProxyAsync(ops);
    gpu::BarrierOp::create(ops.b);
  }

  Value selectStageVoting(Value off) override {
    stageOff = off;
    Value acc = transposeV(ops.gepBytes(sV0, off), /*scan=*/true,
                           /*zero=*/false);
    fenceProxyAsync(ops);
    Value bad =
        ops.cmp(arith::CmpIPredicate::ne,
                ops.land(acc, ops.ci32(int32_t(0x80808080u))), ops.ci32(0));
    return voteOr(ops, VoteGroup{tid, nthreads, 0}, bad);
  }

  SmallVector<Value> isolateNonFiniteV(ArrayRef<Value> o, ArrayRef<Value> p,
                                       Value poisoned, Value lane) override {
    ImplicitLocOpBuilder &b = ops.b;
    // P packed once, before the branch, for it and accumulatePV (which
    // takes these registers for the same \p p): P's f32 registers die here
    // as in the plain path, so the branch holds O and the packed P only.
    packedFrom.assign(p.begin(), p.end());
    packed = packP8(p);
    SmallVector<Type> types(o.size(), ops.f32);
    auto ifOp =
        scf::IfOp::create(b, types, ops.unlikely(poisoned), /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    {
      SmallVector<Value> withTerms = addNonFiniteTerms(o, packed, lane);
      // Each thread rewrites the words of V^T it wrote (no other thread's):
      // only the product, after the barrier, reads them.
      transposeV(ops.gepBytes(sV0, stageOff), /*scan=*/false, /*zero=*/true);
      fenceProxyAsync(ops);
      gpu::BarrierOp::create(b);
      scf::YieldOp::create(b, withTerms);
    }
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, o);
    return SmallVector<Value>(ifOp.getResults());
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
    SmallVector<Value> pRegs =
        llvm::equal(st, packedFrom) ? packed : packP8(st);
    SmallVector<Value> vD;
    for (int kk = 0; kk < sh.blockN / 32; ++kk)
      vD.push_back(ops.add(descVt, ops.ci64(kStep(kk, sh.headDimV))));
    return fp8Chain(ops, o, sh.headDimV, {}, pRegs, vD, "e4m3", typeV);
  }

private:
  /// P (\p st, the layout of S) as the product's A registers: word
  /// 2 (16-key group) + r holds row g + 8 r at keys 2t, 2t + 1, 2t + 8,
  /// 2t + 9 of the group, lowest byte first.
  SmallVector<Value> packP8(ArrayRef<Value> st) {
    SmallVector<Value> pRegs;
    for (int kk = 0; kk < sh.blockN / 32; ++kk) {
      // n8 tiles 4 kk .. 4 kk + 3 hold keys 32 kk .. 32 kk + 31.
      for (int half = 0; half < 2; ++half) {
        int n0 = 4 * kk + 2 * half, n1 = n0 + 1;
        for (int r = 0; r < 2; ++r) // rows g, g + 8
          pRegs.push_back(pack4(st[n0 * 4 + 2 * r], st[n0 * 4 + 2 * r + 1],
                                st[n1 * 4 + 2 * r], st[n1 * 4 + 2 * r + 1]));
      }
    }
    return pRegs;
  }

  /// The byte masks of the non-finite test of V's type (file comment):
  /// bit 7 of a byte of (w & M) + A is set iff that byte of w is NaN/Inf.
  std::pair<int32_t, int32_t> nonFiniteMask() const {
    return typeV == "e5m2"
               ? std::pair<int32_t, int32_t>(0x7c7c7c7c, 0x04040404)
               : std::pair<int32_t, int32_t>(0x7f7f7f7f, 0x01010101);
  }

  /// (w & M) + A per byte of the i32 \p w (no carry between bytes).
  Value nonFiniteBits(Value w) {
    auto [m, a] = nonFiniteMask();
    return ops.add(ops.land(w, ops.ci32(m)), ops.ci32(a));
  }

  /// The fp8 byte in the low 8 bits of the i32 \p w (PTX type \p type) as
  /// f32 (NaN and Inf stay what they are).
  Value fp8ToF32(Value w, const std::string &type) {
    return ops
        .inlineAsm(ops.f32, {w},
                   "{\n.reg .b16 a, lo, hi;\n.reg .b32 h;\n"
                   "cvt.u16.u32 a, $1;\n"
                   "cvt.rn.f16x2." +
                       type +
                       "x2 h, a;\n"
                       "mov.b32 {lo, hi}, h;\ncvt.f32.f16 $0, lo;\n}",
                   "=f,r")
        .getResult(0);
  }

  /// \p o plus, for this thread's O elements (i, d), the terms P8[i, j] *
  /// V8[j, d] over the keys j of the stage with V8[j, d] NaN or Inf and
  /// P8[i, j] != 0 (\p pRegs: packP8's); an element with no such term
  /// keeps its value exactly. A run-time loop over the keys (rare path);
  /// every lane of the warp must call it (shuffles).
  SmallVector<Value> addNonFiniteTerms(ArrayRef<Value> o, ArrayRef<Value> pRegs,
                                       Value lane) {
    ImplicitLocOpBuilder &b = ops.b;
    const int nO = sh.oTiles(), BN = sh.blockN, Dv = sh.headDimV;
    Value sV = ops.gepBytes(sV0, stageOff);
    Value t = arith::RemUIOp::create(b, lane, ops.ci32(4));
    Value quad = arith::AndIOp::create(b, lane, ops.ci32(~3));
    SmallVector<Value> init(o);
    auto loop = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                   arith::ConstantIndexOp::create(b, BN),
                                   arith::ConstantIndexOp::create(b, 1), init);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
    SmallVector<Value> x(loop.getRegionIterArgs());
    // P8[i, j]: held by thread (j % 8) / 2 of the row's quad, in its word
    // 2 (j / 16) + r, byte 2 ((j / 8) % 2) + j % 2.
    Value grp = arith::DivUIOp::create(b, j, ops.ci32(16));
    Value byte =
        ops.add(ops.mul(ops.land(arith::ShRUIOp::create(b, j, ops.ci32(3)),
                                 ops.ci32(1)),
                        ops.ci32(2)),
                ops.land(j, ops.ci32(1)));
    Value src = arith::OrIOp::create(
        b, quad,
        ops.land(arith::ShRUIOp::create(b, j, ops.ci32(1)), ops.ci32(3)));
    Value weighted[2], pj[2];
    for (int r = 0; r < 2; ++r) {
      Value mine = pRegs[r];
      for (int k = 1; k < BN / 16; ++k)
        mine = ops.sel(ops.cmp(arith::CmpIPredicate::eq, grp, ops.ci32(k)),
                       pRegs[2 * k + r], mine);
      Value w =
          NVVM::ShflOp::create(b, ops.i32, ops.ci32(-1), mine, src,
                               ops.ci32(0x1f), NVVM::ShflKind::idx, UnitAttr());
      Value pb =
          ops.land(arith::ShRUIOp::create(b, w, ops.mul(byte, ops.ci32(8))),
                   ops.ci32(0xff));
      // A NaN weight (0x7f) counts: it is not 0.
      weighted[r] = ops.cmp(arith::CmpIPredicate::ne,
                            ops.land(pb, ops.ci32(0x7f)), ops.ci32(0));
      pj[r] = fp8ToF32(pb, "e4m3");
    }
    for (int jd = 0; jd < nO; ++jd) {
      // V8[j, 8 jd + 2 t .. + 1]: two bytes of the stage's row j.
      Value col = ops.add(ops.ci32(8 * jd), ops.mul(t, ops.ci32(2)));
      Value off = ops.add(
          tileOffset(ops, j, arith::DivUIOp::create(b, col, ops.ci32(16)), BN,
                     Dv / 2, /*swizzled=*/true),
          arith::RemUIOp::create(b, col, ops.ci32(16)));
      Value h = arith::ExtUIOp::create(
          b, ops.i32,
          LLVM::LoadOp::create(b, b.getI16Type(),
                               ops.gepBytes(sV, ops.ext64(off)),
                               /*alignment=*/2));
      for (int e = 0; e < 2; ++e) {
        Value v8 =
            e ? arith::ShRUIOp::create(b, h, ops.ci32(8)).getResult() : h;
        Value bad =
            ops.cmp(arith::CmpIPredicate::ne,
                    ops.land(nonFiniteBits(ops.land(v8, ops.ci32(0xff))),
                             ops.ci32(0x80)),
                    ops.ci32(0));
        Value v = fp8ToF32(v8, typeV);
        for (int r = 0; r < 2; ++r) {
          int k = jd * 4 + 2 * r + e;
          x[k] = ops.sel(ops.land(bad, weighted[r]),
                         ops.fadd(x[k], ops.fmul(pj[r], v)), x[k]);
        }
      }
    }
    scf::YieldOp::create(b, x);
    return SmallVector<Value>(loop.getResults());
  }

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
  ///
  /// \p scan: returns the OR over the words moved of nonFiniteBits (bit 7
  /// of a byte set iff some moved byte was NaN or Inf), else null. \p zero:
  /// non-finite bytes are stored as 0.
  ///
  /// block_n x head_dim_v / 16 units need not be a multiple of the
  /// threads (128 keys at head_dim_v 80: 640 units, 256 threads): the last
  /// round runs only where u < units (past it, h would reach block_n / 16:
  /// keys past the stage's V and stores past V^T, i.e. past the end of
  /// the dynamic shared memory).
  Value transposeV(Value sV, bool scan, bool zero) {
    ImplicitLocOpBuilder &b = ops.b;
    const int units = sh.blockN / 4 * (sh.headDimV / 4);
    Value acc;
    for (int it = 0; it * nthreads < units; ++it) {
      Value u = ops.add(tid, ops.ci32(it * nthreads));
      if ((it + 1) * nthreads <= units) {
        acc = transposeUnit(sV, u, scan, zero, acc);
        continue;
      }
      Value inRange = ops.cmp(arith::CmpIPredicate::ult, u, ops.ci32(units));
      SmallVector<Type> types;
      if (scan) {
        types.push_back(ops.i32);
        if (!acc)
          acc = ops.ci32(0); // bit 7 clear: no vote
      }
      auto ifOp = scf::IfOp::create(b, types, inRange, /*withElse=*/scan);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value inner = transposeUnit(sV, u, scan, zero, acc);
      if (scan) {
        scf::YieldOp::create(b, inner);
        b.setInsertionPointToStart(ifOp.elseBlock());
        scf::YieldOp::create(b, acc);
        acc = ifOp.getResult(0);
      }
    }
    return acc;
  }

  /// transposeV's unit \p u (< units); where \p scan, \p acc (null at
  /// the first) ORed with the nonFiniteBits of the words it moves.
  Value transposeUnit(Value sV, Value u, bool scan, bool zero, Value acc) {
    ImplicitLocOpBuilder &b = ops.b;
    const int groups = sh.headDimV / 4;
    const int eHigh = groups / 4; // values of e >> 2
    Value r = arith::ShRUIOp::create(b, u, ops.ci32(5));
    Value e = ops.add(
        ops.land(u, ops.ci32(3)),
        ops.mul(arith::RemUIOp::create(b, r, ops.ci32(eHigh)), ops.ci32(4)));
    Value h = ops.add(
        ops.land(arith::ShRUIOp::create(b, u, ops.ci32(2)), ops.ci32(1)),
        ops.mul(arith::DivUIOp::create(b, r, ops.ci32(eHigh)), ops.ci32(2)));
    Value t = ops.land(arith::ShRUIOp::create(b, u, ops.ci32(3)), ops.ci32(3));
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
      Value w =
          LLVM::LoadOp::create(b, ops.i32, ops.gepBytes(sV, ops.ext64(off)),
                               /*alignment=*/4);
      if (scan)
        acc = acc ? arith::OrIOp::create(b, acc, nonFiniteBits(w)).getResult()
                  : nonFiniteBits(w);
      if (zero) {
        // Bit 7 of each non-finite byte, widened to the byte.
        Value f = ops.land(nonFiniteBits(w), ops.ci32(int32_t(0x80808080u)));
        Value m = arith::OrIOp::create(
            b, f, ops.sub(f, arith::ShRUIOp::create(b, f, ops.ci32(7))));
        w = ops.land(w, arith::XOrIOp::create(b, m, ops.ci32(-1)));
      }
      in.push_back(w);
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
    return acc;
  }

  KernelOps &ops;
  TileShape sh;
  Value warp, tid;
  int nthreads;
  Value sVt, sV0;
  std::string typeQ, typeK, typeV;
  Value descQ, descK0, descVt, stageOff;
  /// isolateNonFiniteV's packP8(packedFrom), for accumulatePV.
  SmallVector<Value> packedFrom, packed;
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
