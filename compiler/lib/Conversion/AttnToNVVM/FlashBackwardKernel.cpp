//===- FlashBackwardKernel.cpp - FlashAttention-2 GPU backward kernels ----===//
//
// Pre: a gpu.module. Post: it holds the three backward kernels of
// FlashBackwardKernel.h, built from nvvm, llvm, arith and scf ops.
//
// The algorithm is FlashAttention-2's backward pass (Dao 2023, Algorithm
// 2), in its simplest mma.sync form:
//   _bwd_pre:  D_i = dO_i . O_i (fp32), dQaccum_i = 0        (warp per row)
//   _bwd:      one CTA per (key tile, kv head, batch); K and V of its keys
//              stay in shared memory; for each query head of the group and
//              each query tile the classifier does not find empty:
//                S^T = K Q^T                      (rows: keys, 16 per warp)
//                P^T = exp2(t - LSE log2 e)       (t: VariantTile, the
//                                                  forward's per-element code)
//                dV += P^T dO;  dP^T = V dO^T;  dS^T = P^T (dP^T - D)
//                dK += dS^T Q
//                dS^T -> shared memory; dQaccum += dS K (fp32 atomics)
//              then dK * scale and dV are written in the inputs' dtype.
//   _bwd_post: dQ = scale * dQaccum in the inputs' dtype  (warp per row)
// Fragment layouts: ../shared/notes/MMA-FRAGMENTS.md; the C fragment of two
// n8 tiles is the A fragment of one k16 slice (P^T and dS^T stay in
// registers for dV and dK). Arguments: abi::gpu::backwardArgTypes
// (runtime/KernelAbi.h).
//
//===----------------------------------------------------------------------===//
#include "flashjit/Conversion/AttnToNVVM/FlashBackwardKernel.h"

#include "KernelOps.h"
#include "MmaSync.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

namespace abi = flashjit::abi::gpu;

namespace {

/// Tensors with pointer and strides (abi::gpu::BackwardArg order).
enum Tensor : int { TQ = 0, TK, TV, TO, TDO, TLse, TDQ, TDK, TDV };

class BackwardBuilder {
public:
  BackwardBuilder(ImplicitLocOpBuilder &b, const KernelShape &c,
                  FragmentEmitter &em)
      : ops(b, c.bf16), b(b), c(c), em(em) {}

  void build(Operation *gpuModule) {
    rowKernel(gpuModule, /*pre=*/true);
    mainKernel(gpuModule);
    rowKernel(gpuModule, /*pre=*/false);
  }

private:
  gpu::GPUFuncOp declare(Operation *gpuModule, StringRef suffix, int threads,
                         int64_t sharedBytes);
  void bindArguments(gpu::GPUFuncOp fn);
  void rowKernel(Operation *gpuModule, bool pre);
  void mainKernel(Operation *gpuModule);
  /// One non-empty query tile at \p q0 of query head \p head.
  SmallVector<Value> tileStep(ValueRange state, Value head, Value q0,
                              Value needsMask);
  void storeRows(int tensor, Value headIdx, ArrayRef<Value> acc, int dim,
                 Value factor);

  /// Element offset (i64) of row \p row of (batch, head) in tensor \p t.
  Value offset(int t, Value bt, Value h, Value row) {
    return ops.add(ops.add(ops.mul(ops.ext64(bt), st[t][0]),
                           ops.mul(ops.ext64(h), st[t][1])),
                   ops.mul(ops.ext64(row), st[t][2]));
  }
  /// Byte address of element \p elem of tensor \p t (16-bit elements, or
  /// \p bytes per element).
  Value address(int t, Value elem, int64_t bytes = 2) {
    return ops.gepBytes(ptr[t], ops.mul(elem, ops.ci64(bytes)));
  }
  /// Linear row of (batch, head, row) in the fp32 workspaces.
  Value workRow(Value headsQ, Value h, Value row) {
    return ops.ext64(
        ops.add(ops.mul(ops.add(ops.mul(batch, headsQ), h), seqlenQ), row));
  }
  /// Two f32 from an i32 of two 16-bit floats (lo first).
  std::pair<Value, Value> unpack(Value packed);
  Value loadShared(Type ty, Value base, Value byteOff) {
    return LLVM::LoadOp::create(b, ty, ops.gepBytes(base, ops.ext64(byteOff)),
                                /*alignment=*/4);
  }
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

  KernelOps ops;
  ImplicitLocOpBuilder &b;
  const KernelShape &c;
  FragmentEmitter &em;

  // Arguments.
  Value ptr[abi::kBackwardStridedTensors], dqAccum, delta;
  Value st[abi::kBackwardStridedTensors][3];
  Value seqlenQ, seqlenK, group, scale, scaleLog2;
  // The main kernel's indices, shared tiles and lane addresses.
  Value tid, warp, lane, g, t, batch, headKV, headsQ, k0, kvRow[2];
  Value sQ, sDO, sDS, sLse, sDelta;
  Value aK, aV, bQt, bDOt, bQn, bDOn, aDS, bKn;
  int rowGroups = 0, colGroups = 0, dqCols = 0;
};

gpu::GPUFuncOp BackwardBuilder::declare(Operation *gpuModule, StringRef suffix,
                                        int threads, int64_t sharedBytes) {
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToStart(&region.front());
  if (!SymbolTable::lookupSymbolIn(gpuModule, kSharedSymbol))
    LLVM::GlobalOp::create(b, LLVM::LLVMArrayType::get(ops.i8, 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           kSharedSymbol, Attribute(), /*alignment=*/1024,
                           /*addrSpace=*/3);
  SmallVector<Type> args = abiTypes(ops, abi::backwardArgTypes());
  for (Type ty : em.extraArgumentTypes(b.getContext()))
    args.push_back(ty);
  auto fn = gpu::GPUFuncOp::create(b, c.name + suffix.str(),
                                   b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({threads, 1, 1}));
  fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
              b.getI32IntegerAttr(c.minBlocksPerSM));
  fn->setAttr("flashjit.shared_bytes", b.getI64IntegerAttr(sharedBytes));
  b.setInsertionPointToStart(&fn.getBody().front());
  bindArguments(fn);
  return fn;
}

void BackwardBuilder::bindArguments(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  for (int i = 0; i < abi::kBackwardStridedTensors; ++i) {
    ptr[i] = a[i];
    for (int d = 0; d < 3; ++d)
      st[i][d] = a[abi::kBwdStrides + 3 * i + d];
  }
  dqAccum = a[abi::kBwdDQAccum];
  delta = a[abi::kBwdDelta];
  em.setStatus(a[abi::kBwdStatus]);
  seqlenQ = a[abi::kBwdSeqlenQ];
  seqlenK = a[abi::kBwdSeqlenK];
  group = a[abi::kBwdHeadGroup];
  scale = a[abi::kBwdScale];
  scaleLog2 = a[abi::kBwdScaleLog2];
  em.setArguments(a.drop_front(abi::kBackwardFixedArgs));
}

std::pair<Value, Value> BackwardBuilder::unpack(Value packed) {
  Type h = ops.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  Value v = LLVM::BitcastOp::create(b, VectorType::get({2}, h), packed);
  auto half = [&](int i) {
    Value e = LLVM::ExtractElementOp::create(b, v, ops.ci32(i));
    return arith::ExtFOp::create(b, ops.f32, e).getResult();
  };
  return {half(0), half(1)};
}

void BackwardBuilder::rowKernel(Operation *gpuModule, bool pre) {
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp fn = declare(
      gpuModule, pre ? abi::kBackwardPreSuffix : abi::kBackwardPostSuffix,
      abi::kBackwardRowThreads, 0);
  Value tidx = NVVM::ThreadIdXOp::create(b, ops.i32);
  Value w = arith::DivUIOp::create(b, tidx, ops.ci32(32));
  Value ln = arith::RemUIOp::create(b, tidx, ops.ci32(32));
  Value row = ops.add(ops.mul(NVVM::BlockIdXOp::create(b, ops.i32),
                              ops.ci32(abi::kBackwardRowsPerCta)),
                      w);
  Value head = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  Value hq = NVVM::GridDimYOp::create(b, ops.i32);
  {
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ));
    Value wrow = workRow(hq, head, row);
    // Pairs of elements p = lane + 32 i of a row of `dim` elements.
    auto forPairs = [&](int dim, llvm::function_ref<void(Value)> body) {
      const int pairs = dim / 2;
      for (int i = 0; i * 32 < pairs; ++i) {
        Value p = ops.add(ln, ops.ci32(32 * i));
        if ((i + 1) * 32 <= pairs)
          body(p);
        else
          ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, p, ops.ci32(pairs)),
                     [&] { body(p); });
      }
    };
    Value accRow = ops.mul(wrow, ops.ci64(c.headDimQK));
    auto accAddr = [&](Value p) {
      return ops.gepBytes(
          dqAccum, ops.mul(ops.add(accRow, ops.ext64(ops.mul(p, ops.ci32(2)))),
                           ops.ci64(4)));
    };
    if (pre) {
      Value oRow = offset(TO, batch, head, row);
      Value doRow = offset(TDO, batch, head, row);
      // This lane's partial sum, kept in a one-element local variable so
      // guarded pairs can add to it.
      Value sum = ops.cf32(0.0f);
      const int pairs = c.headDimV / 2;
      for (int i = 0; i * 32 < pairs; ++i) {
        Value p = ops.add(ln, ops.ci32(32 * i));
        auto term = [&]() -> Value {
          Value e = ops.ext64(ops.mul(p, ops.ci32(2)));
          Value o = LLVM::LoadOp::create(
              b, ops.i32, address(TO, ops.add(oRow, e)), /*alignment=*/4);
          Value d = LLVM::LoadOp::create(
              b, ops.i32, address(TDO, ops.add(doRow, e)), /*alignment=*/4);
          auto [o0, o1] = unpack(o);
          auto [d0, d1] = unpack(d);
          return ops.fadd(sum, ops.fadd(ops.fmul(o0, d0), ops.fmul(o1, d1)));
        };
        if ((i + 1) * 32 <= pairs)
          sum = term();
        else
          sum = ops.guarded(
              ops.cmp(arith::CmpIPredicate::slt, p, ops.ci32(pairs)), ops.f32,
              sum, term);
      }
      for (int off = 16; off >= 1; off /= 2)
        sum = ops.fadd(sum, ops.shflXor(sum, off));
      ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, ln, ops.ci32(0)), [&] {
        LLVM::StoreOp::create(b, sum,
                              ops.gepBytes(delta, ops.mul(wrow, ops.ci64(4))),
                              /*alignment=*/4);
      });
      forPairs(c.headDimQK, [&](Value p) {
        LLVM::StoreOp::create(b, ops.ci64(0), accAddr(p), /*alignment=*/8);
      });
    } else {
      Value dqRow = offset(TDQ, batch, head, row);
      forPairs(c.headDimQK, [&](Value p) {
        Value a = accAddr(p);
        Value x0 = LLVM::LoadOp::create(b, ops.f32, a, /*alignment=*/8);
        Value x1 = LLVM::LoadOp::create(b, ops.f32, ops.gepBytes(a, 4),
                                        /*alignment=*/4);
        Value e = ops.ext64(ops.mul(p, ops.ci32(2)));
        LLVM::StoreOp::create(
            b, ops.pack(ops.fmul(x0, scale), ops.fmul(x1, scale)),
            address(TDQ, ops.add(dqRow, e)), /*alignment=*/4);
      });
    }
  }
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

void BackwardBuilder::mainKernel(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  const int W = c.numWarps, BM = c.blockM(), BN = c.blockN;
  const int D = c.headDimQK, Dv = c.headDimV, P = kPad;
  gpu::GPUFuncOp fn = declare(gpuModule, abi::kBackwardMainSuffix, 32 * W,
                              c.KernelConfig::sharedBytes(D, Dv));
  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  warp = arith::DivUIOp::create(b, tid, ops.ci32(32));
  lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  Value kTile = NVVM::BlockIdXOp::create(b, ops.i32);
  headKV = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  headsQ = ops.mul(NVVM::GridDimYOp::create(b, ops.i32), group);
  k0 = ops.mul(kTile, ops.ci32(BM));
  kvRow[0] = ops.add(ops.add(k0, ops.mul(warp, ops.ci32(16))), g);
  kvRow[1] = ops.add(kvRow[0], ops.ci32(8));

  // [K | V | Q | dO | dS^T | LSE | D]
  Value sK = ops.sharedBase();
  Value sV = ops.gepBytes(sK, int64_t(2) * BM * (D + P));
  sQ = ops.gepBytes(sV, int64_t(2) * BM * (Dv + P));
  sDO = ops.gepBytes(sQ, int64_t(2) * BN * (D + P));
  sDS = ops.gepBytes(sDO, int64_t(2) * BN * (Dv + P));
  sLse = ops.gepBytes(sDS, int64_t(2) * BM * (BN + P));
  sDelta = ops.gepBytes(sLse, int64_t(4) * BN);

  // K and V of this CTA's keys: loaded once.
  const int nthreads = 32 * W;
  Value zero32 = ops.ci32(0);
  auto tensorBase = [&](int tn, Value h) {
    return address(tn, offset(tn, batch, h, zero32));
  };
  loadTileAsync(ops, tid, nthreads, sK, tensorBase(TK, headKV), st[TK][2], k0,
                seqlenK, BM, D, /*swizzled=*/false);
  loadTileAsync(ops, tid, nthreads, sV, tensorBase(TV, headKV), st[TV][2], k0,
                seqlenK, BM, Dv, /*swizzled=*/false);
  NVVM::CpAsyncCommitGroupOp::create(b);

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
  rowGroups = BN / 16;
  colGroups = W / rowGroups;
  dqCols = D / colGroups;
  Value rg = arith::RemUIOp::create(b, warp, ops.ci32(rowGroups));
  Value cg = arith::DivUIOp::create(b, warp, ops.ci32(rowGroups));
  aDS = at(sDS, ntRow, ops.add(ops.mul(rg, ops.ci32(16)), ntCol), BN);
  bKn = at(sK, tRow, ops.add(tCol, ops.mul(cg, ops.ci32(dqCols))), D);

  Value kLast =
      ops.sub(arith::MinSIOp::create(b, ops.add(k0, ops.ci32(BM)), seqlenK),
              ops.ci32(1));
  Value kPastEnd =
      ops.cmp(arith::CmpIPredicate::sgt, ops.add(k0, ops.ci32(BM)), seqlenK);
  Value numQ = arith::DivUIOp::create(b, ops.add(seqlenQ, ops.ci32(BN - 1)),
                                      ops.ci32(BN));
  const int nK = D / 8 * 4, nV = Dv / 8 * 4;
  SmallVector<Value> init(nK + nV, ops.cf32(0.0f));
  Value zeroIdx = arith::ConstantIndexOp::create(b, 0);
  Value one = arith::ConstantIndexOp::create(b, 1);

  // Query heads of this kv head's group, then query tiles.
  auto heads = scf::ForOp::create(b, zeroIdx, ops.toIndex(group), one, init);
  {
    OpBuilder::InsertionGuard hg(b);
    b.setInsertionPointToStart(heads.getBody());
    Value head = ops.add(
        ops.mul(headKV, group),
        arith::IndexCastOp::create(b, ops.i32, heads.getInductionVar()));
    auto tiles = scf::ForOp::create(b, zeroIdx, ops.toIndex(numQ), one,
                                    heads.getRegionIterArgs());
    {
      OpBuilder::InsertionGuard tg(b);
      b.setInsertionPointToStart(tiles.getBody());
      Value q0 = ops.mul(
          arith::IndexCastOp::create(b, ops.i32, tiles.getInductionVar()),
          ops.ci32(BN));
      Value qLast =
          ops.sub(arith::MinSIOp::create(b, ops.add(q0, ops.ci32(BN)), seqlenQ),
                  ops.ci32(1));
      Value mayBeFalse = ops.cb(false), mayBeTrue = ops.cb(true);
      if (em.hasMask()) {
        IndexValues lo{batch, head, q0, k0, seqlenQ, seqlenK};
        IndexValues hi{batch, head, qLast, kLast, seqlenQ, seqlenK};
        std::tie(mayBeFalse, mayBeTrue) =
            em.emitClassify(b, b.getLoc(), lo, hi);
      }
      Value qPastEnd = ops.cmp(arith::CmpIPredicate::sgt,
                               ops.add(q0, ops.ci32(BN)), seqlenQ);
      Value needsMask = ops.lor(mayBeFalse, ops.lor(kPastEnd, qPastEnd));
      ValueRange state = tiles.getRegionIterArgs();
      SmallVector<Type> types(init.size(), ops.f32);
      auto tileIf = scf::IfOp::create(b, types, mayBeTrue, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard ig(b);
        b.setInsertionPointToStart(tileIf.elseBlock()); // empty: skipped
        scf::YieldOp::create(b, state);
        b.setInsertionPointToStart(tileIf.thenBlock());
        scf::YieldOp::create(b, tileStep(state, head, q0, needsMask));
      }
      scf::YieldOp::create(b, tileIf.getResults());
    }
    scf::YieldOp::create(b, tiles.getResults());
  }
  // K and V are waited for by the first tile; with none, here.
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  SmallVector<Value> fin(heads.getResults());
  storeRows(TDK, headKV, ArrayRef<Value>(fin).take_front(nK), D, scale);
  storeRows(TDV, headKV, ArrayRef<Value>(fin).drop_front(nK), Dv, Value());
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

SmallVector<Value> BackwardBuilder::tileStep(ValueRange state, Value head,
                                             Value q0, Value needsMask) {
  const int BM = c.blockM(), BN = c.blockN, D = c.headDimQK, Dv = c.headDimV,
            P = kPad;
  const int nS = BN / 8, nK = D / 8 * 4;
  const float log2e = 1.4426950408889634f;
  Value zero32 = ops.ci32(0);
  // Q and dO of the tile (cp.async), LSE (log2 units) and D of its rows.
  loadTileAsync(ops, tid, 32 * c.numWarps, sQ,
                address(TQ, offset(TQ, batch, head, zero32)), st[TQ][2], q0,
                seqlenQ, BN, D, /*swizzled=*/false);
  loadTileAsync(ops, tid, 32 * c.numWarps, sDO,
                address(TDO, offset(TDO, batch, head, zero32)), st[TDO][2], q0,
                seqlenQ, BN, Dv, /*swizzled=*/false);
  NVVM::CpAsyncCommitGroupOp::create(b);
  ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, tid, ops.ci32(BN)), [&] {
    Value row = ops.add(q0, tid);
    Value ok = ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ);
    Value lse = ops.guarded(ok, ops.f32, ops.cf32(0.0f), [&]() -> Value {
      return LLVM::LoadOp::create(
          b, ops.f32, address(TLse, offset(TLse, batch, head, row), 4),
          /*alignment=*/4);
    });
    Value dl = ops.guarded(ok, ops.f32, ops.cf32(0.0f), [&]() -> Value {
      return LLVM::LoadOp::create(
          b, ops.f32,
          ops.gepBytes(delta, ops.mul(workRow(headsQ, head, row), ops.ci64(4))),
          /*alignment=*/4);
    });
    Value off = ops.ext64(ops.mul(tid, ops.ci32(4)));
    LLVM::StoreOp::create(b, ops.fmul(lse, ops.cf32(log2e)),
                          ops.gepBytes(sLse, off), /*alignment=*/4);
    LLVM::StoreOp::create(b, dl, ops.gepBytes(sDelta, off), /*alignment=*/4);
  });
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  gpu::BarrierOp::create(b);

  // S^T = K Q^T (this warp's 16 keys x BN queries).
  SmallVector<Value> s(nS * 4, ops.cf32(0.0f));
  for (int kk = 0; kk < D / 16; ++kk) {
    auto a = ldmatrixX4(ops, ops.gepBytes(aK, int64_t(2) * kk * 16), false);
    mmaRow(
        a,
        [&](int jn) {
          return ops.gepBytes(bQt, 2 * (int64_t(jn) * 8 * (D + P) + kk * 16));
        },
        false, s, nS);
  }
  // Scores in log2 units, masked where the tile needs it.
  KeyRowCoords coords{batch,
                      head,
                      seqlenQ,
                      seqlenK,
                      kvRow[0],
                      kvRow[1],
                      ops.add(q0, ops.mul(t, ops.ci32(2)))};
  SmallVector<Type> sTypes(nS * 4, ops.f32);
  auto maskIf = scf::IfOp::create(b, sTypes, needsMask, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard mg(b);
    for (bool masked : {true, false}) {
      b.setInsertionPointToStart(masked ? maskIf.thenBlock()
                                        : maskIf.elseBlock());
      scf::YieldOp::create(b, variantScoresKeyRows(ops, em, s, coords, nS,
                                                   scale, scaleLog2, masked));
    }
  }
  // P^T = exp2(t - LSE log2 e), exactly 0 where masked (also for rows with
  // LSE = -inf, which have no allowed key).
  Value minusInf = ops.cf32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> colLse, colDelta;
  for (int jn = 0; jn < nS; ++jn)
    for (int cc = 0; cc < 2; ++cc) {
      Value off = ops.mul(
          ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jn * 8 + cc)), ops.ci32(4));
      colLse.push_back(loadShared(ops.f32, sLse, off));
      colDelta.push_back(loadShared(ops.f32, sDelta, off));
    }
  SmallVector<Value> p;
  for (int jn = 0; jn < nS; ++jn)
    for (int i = 0; i < 4; ++i) {
      Value v = maskIf.getResult(jn * 4 + i);
      Value e = ops.exp2(ops.fsub(v, colLse[jn * 2 + (i & 1)]));
      p.push_back(ops.sel(ops.feq(v, minusInf), ops.cf32(0.0f), e));
    }

  SmallVector<Value> dk(state.begin(), state.begin() + nK);
  SmallVector<Value> dv(state.begin() + nK, state.end());
  // dV += P^T dO.
  for (int kk = 0; kk < BN / 16; ++kk)
    mmaRow(
        packA(p, kk),
        [&](int jd) {
          return ops.gepBytes(bDOn, 2 * (int64_t(kk) * 16 * (Dv + P) + jd * 8));
        },
        true, dv, Dv / 8);
  // dP^T = V dO^T.
  SmallVector<Value> dp(nS * 4, ops.cf32(0.0f));
  for (int kk = 0; kk < Dv / 16; ++kk) {
    auto a = ldmatrixX4(ops, ops.gepBytes(aV, int64_t(2) * kk * 16), false);
    mmaRow(
        a,
        [&](int jn) {
          return ops.gepBytes(bDOt, 2 * (int64_t(jn) * 8 * (Dv + P) + kk * 16));
        },
        false, dp, nS);
  }
  // dS^T = P^T (dP^T - D).
  SmallVector<Value> ds;
  for (int jn = 0; jn < nS; ++jn)
    for (int i = 0; i < 4; ++i) {
      int e = jn * 4 + i;
      ds.push_back(ops.fmul(p[e], ops.fsub(dp[e], colDelta[jn * 2 + (i & 1)])));
    }
  // dK += dS^T Q (scaled at the end).
  for (int kk = 0; kk < BN / 16; ++kk)
    mmaRow(
        packA(ds, kk),
        [&](int jd) {
          return ops.gepBytes(bQn, 2 * (int64_t(kk) * 16 * (D + P) + jd * 8));
        },
        true, dk, D / 8);
  // dS^T into shared memory, then dQaccum += dS K.
  for (int jn = 0; jn < nS; ++jn)
    for (int r = 0; r < 2; ++r) {
      Value row =
          ops.add(ops.add(ops.mul(warp, ops.ci32(16)), g), ops.ci32(8 * r));
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jn * 8));
      Value off =
          ops.mul(ops.add(ops.mul(row, ops.ci32(BN + P)), col), ops.ci32(2));
      LLVM::StoreOp::create(
          b, ops.pack(ds[jn * 4 + 2 * r], ds[jn * 4 + 2 * r + 1]),
          ops.gepBytes(sDS, ops.ext64(off)), /*alignment=*/4);
    }
  gpu::BarrierOp::create(b);
  const int nQ = dqCols / 8;
  SmallVector<Value> dq(nQ * 4, ops.cf32(0.0f));
  for (int kk = 0; kk < BM / 16; ++kk) {
    auto a = ldmatrixX4(ops, ops.gepBytes(aDS, int64_t(2) * kk * 16 * (BN + P)),
                        true);
    mmaRow(
        a,
        [&](int jd) {
          return ops.gepBytes(bKn, 2 * (int64_t(kk) * 16 * (D + P) + jd * 8));
        },
        true, dq, nQ);
  }
  Value rg = arith::RemUIOp::create(b, warp, ops.ci32(rowGroups));
  Value cg = arith::DivUIOp::create(b, warp, ops.ci32(rowGroups));
  for (int r = 0; r < 2; ++r) {
    Value row = ops.add(ops.add(q0, ops.add(ops.mul(rg, ops.ci32(16)), g)),
                        ops.ci32(8 * r));
    ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ), [&] {
      Value base = ops.mul(workRow(headsQ, head, row), ops.ci64(D));
      for (int jd = 0; jd < nQ; ++jd)
        for (int cc = 0; cc < 2; ++cc) {
          Value col = ops.add(
              ops.add(ops.mul(cg, ops.ci32(dqCols)), ops.mul(t, ops.ci32(2))),
              ops.ci32(jd * 8 + cc));
          Value addr = ops.gepBytes(
              dqAccum, ops.mul(ops.add(base, ops.ext64(col)), ops.ci64(4)));
          LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::fadd, addr,
                                    dq[jd * 4 + 2 * r + cc],
                                    LLVM::AtomicOrdering::monotonic);
        }
    });
  }
  // Q, dO, dS^T, LSE and D are free for the next tile.
  gpu::BarrierOp::create(b);
  SmallVector<Value> out(dk);
  out.append(dv);
  return out;
}

void BackwardBuilder::storeRows(int tensor, Value headIdx, ArrayRef<Value> acc,
                                int dim, Value factor) {
  for (int r = 0; r < 2; ++r) {
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, kvRow[r], seqlenK));
    Value rowOff = offset(tensor, batch, headIdx, kvRow[r]);
    for (int jd = 0; jd < dim / 8; ++jd) {
      Value x0 = acc[jd * 4 + 2 * r], x1 = acc[jd * 4 + 2 * r + 1];
      if (factor) {
        x0 = ops.fmul(x0, factor);
        x1 = ops.fmul(x1, factor);
      }
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      LLVM::StoreOp::create(b, ops.pack(x0, x1),
                            address(tensor, ops.add(rowOff, ops.ext64(col))),
                            /*alignment=*/4);
    }
  }
}

} // namespace

void buildFlashBackwardKernels(OpBuilder &builder, Location loc,
                               Operation *gpuModule, const KernelShape &config,
                               FragmentEmitter &emitter) {
  ImplicitLocOpBuilder b(loc, builder);
  BackwardBuilder(b, config, emitter).build(gpuModule);
}

} // namespace flashjit::nvvm
