//===- MaskedValues.cpp - NaN/Inf at masked keys stays out ----------------===//
//
// The scheme and why it is exact: MaskedValues.h.
//
//===----------------------------------------------------------------------===//
#include "MaskedValues.h"
#include "SharedTile.h"
#include "Tma.h"
#include "Wgmma.h"
#include "flashjit/compiler/MaskedValueTesting.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <atomic>
#include <limits>
#include <string>

using namespace mlir;

namespace flashjit::nvvm {

namespace {

/// The exponent bits of the 16-bit type: all set means NaN or Inf.
int64_t exponentMask(const KernelOps &ops) {
  return ops.bf16 ? 0x7F80 : 0x7C00;
}

/// Whether the low (\p high false) or high half of the i32 \p w is NaN or
/// Inf.
Value halfNonFinite(KernelOps &ops, Value w, bool high) {
  int64_t m = exponentMask(ops);
  Value mask = ops.ci32(high ? m << 16 : m);
  Value bits = arith::AndIOp::create(ops.b, w, mask);
  return ops.cmp(arith::CmpIPredicate::eq, bits, mask);
}

/// The half of \p w as f32 (IEEE extension: Inf and NaN stay what they
/// are).
Value halfToF32(KernelOps &ops, Value w, bool high) {
  ImplicitLocOpBuilder &b = ops.b;
  Value x = high ? arith::ShRUIOp::create(b, w, ops.ci32(16)).getResult() : w;
  Value h16 = arith::TruncIOp::create(b, b.getI16Type(), x);
  Type ht = ops.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  Value h = arith::BitcastOp::create(b, ht, h16);
  return arith::ExtFOp::create(b, ops.f32, h);
}

Value word(KernelOps &ops, Value v, int k) {
  return LLVM::ExtractElementOp::create(ops.b, v, ops.ci32(k));
}

/// A barrier of the group (no reduction).
void syncGroup(KernelOps &ops, const VoteGroup &grp) {
  if (grp.barrierId == 0) {
    gpu::BarrierOp::create(ops.b);
    return;
  }
  NVVM::BarrierOp::create(ops.b, TypeRange{}, ops.ci32(grp.barrierId),
                          ops.ci32(grp.nthreads), NVVM::BarrierReductionAttr(),
                          Value());
}

/// Calls \p body(address, chunk) for each 16-byte chunk of the tile this
/// thread owns (chunk c = tid + k * nthreads, row c / (dim / 8)), in a
/// run-time loop (small code; the paths that use it are rare or short).
void forEachChunk(
    KernelOps &ops, const VoteGroup &grp, Value smem, int rows, int dim,
    bool swizzled, ValueRange init,
    llvm::function_ref<SmallVector<Value>(Value, Value, ValueRange)> body,
    SmallVectorImpl<Value> &results) {
  ImplicitLocOpBuilder &b = ops.b;
  const int chunksPerRow = dim / 8, total = rows * chunksPerRow;
  const int iters = (total + grp.nthreads - 1) / grp.nthreads;
  auto vt = VectorType::get({4}, ops.i32);
  auto loop = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                 arith::ConstantIndexOp::create(b, iters),
                                 arith::ConstantIndexOp::create(b, 1), init);
  OpBuilder::InsertionGuard g(b);
  // Without loop-carried values the loop and the if come with their
  // terminators.
  if (init.empty())
    b.setInsertionPoint(loop.getBody()->getTerminator());
  else
    b.setInsertionPointToStart(loop.getBody());
  Value it = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  Value cidx = ops.add(grp.tid, ops.mul(it, ops.ci32(grp.nthreads)));
  auto one = [&]() -> SmallVector<Value> {
    Value row = arith::DivUIOp::create(b, cidx, ops.ci32(chunksPerRow));
    Value col = arith::RemUIOp::create(b, cidx, ops.ci32(chunksPerRow));
    Value p = ops.gepBytes(
        smem, ops.ext64(tileOffset(ops, row, col, rows, dim, swizzled)));
    Value v = LLVM::LoadOp::create(b, vt, p, /*alignment=*/16);
    return body(p, v, loop.getRegionIterArgs());
  };
  if (init.empty()) {
    if (total % grp.nthreads == 0)
      one();
    else
      ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, cidx, ops.ci32(total)),
                 [&] { one(); });
  } else if (total % grp.nthreads == 0) {
    scf::YieldOp::create(b, one());
  } else {
    SmallVector<Type> types(init.size(), ops.i32);
    auto inRange = scf::IfOp::create(
        b, types, ops.cmp(arith::CmpIPredicate::slt, cidx, ops.ci32(total)),
        /*withElse=*/true);
    {
      OpBuilder::InsertionGuard ig(b);
      b.setInsertionPointToStart(inRange.thenBlock());
      scf::YieldOp::create(b, one());
      b.setInsertionPointToStart(inRange.elseBlock());
      scf::YieldOp::create(b, loop.getRegionIterArgs());
    }
    scf::YieldOp::create(b, inRange.getResults());
  }
  results.assign(loop.getResults().begin(), loop.getResults().end());
}

/// fma.rn of 16-bit pairs (bf16x2 or f16x2 as \p ops says): \p x * 0 +
/// \p acc, NaN in a lane where x is NaN or Inf (0 * inf) or acc is NaN or
/// Inf, else acc's lane (+0 where it was -0). Pure (ptxas schedules it).
Value fmaZero(KernelOps &ops, Value x, Value acc) {
  std::string text = std::string("fma.rn.") + (ops.bf16 ? "bf16x2" : "f16x2") +
                     " $0, $1, $2, $3;";
  return LLVM::InlineAsmOp::create(
             ops.b, TypeRange{ops.i32}, ValueRange{x, ops.ci32(0), acc}, text,
             "=r,r,r,r", /*has_side_effects=*/false,
             /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(ops.b.getContext(),
                                       LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

/// Whether any element of this thread's 16-byte chunks of the tile is NaN
/// or Inf (no barrier).
Value chunksHaveNonFinite(KernelOps &ops, const VoteGroup &grp, Value smem,
                          int rows, int dim, bool swizzled) {
  // One fma of 16-bit pairs per 32-bit word: x * 0 is NaN exactly where x
  // is NaN or Inf, and NaN stays NaN in the running sum (which starts at
  // +0 and otherwise stays a zero); the words of a chunk pair up first
  // (w1 + w0 * 0 is NaN or Inf iff w0 or w1 holds a NaN or Inf), so the
  // sum's chain is two fmas per chunk.
  SmallVector<Value> acc;
  forEachChunk(
      ops, grp, smem, rows, dim, swizzled, ValueRange{ops.ci32(0)},
      [&](Value, Value v, ValueRange in) -> SmallVector<Value> {
        Value u = fmaZero(ops, word(ops, v, 0), word(ops, v, 1));
        Value x = fmaZero(ops, word(ops, v, 2), word(ops, v, 3));
        return {fmaZero(ops, u, fmaZero(ops, x, in[0]))};
      },
      acc);
  return ops.lor(halfNonFinite(ops, acc[0], false),
                 halfNonFinite(ops, acc[0], true));
}

/// Whether any element of the tile is NaN or Inf (this thread's chunks,
/// then the group's vote).
Value tileHasNonFinite(KernelOps &ops, const VoteGroup &grp, Value smem,
                       int rows, int dim, bool swizzled) {
  return voteOr(ops, grp,
                chunksHaveNonFinite(ops, grp, smem, rows, dim, swizzled));
}

/// Replaces every NaN or Inf element of the tile by +0 in place; each
/// thread rewrites its own chunks (no barrier).
void zeroNonFinite(KernelOps &ops, const VoteGroup &grp, Value smem, int rows,
                   int dim, bool swizzled) {
  ImplicitLocOpBuilder &b = ops.b;
  SmallVector<Value> none;
  forEachChunk(
      ops, grp, smem, rows, dim, swizzled, ValueRange{},
      [&](Value p, Value v, ValueRange) -> SmallVector<Value> {
        Value out = v;
        for (int k = 0; k < 4; ++k) {
          Value w = word(ops, v, k);
          Value keep = ops.ci32(-1);
          keep = ops.sel(halfNonFinite(ops, w, false),
                         arith::AndIOp::create(b, keep, ops.ci32(0xFFFF0000)),
                         keep);
          keep = ops.sel(halfNonFinite(ops, w, true),
                         arith::AndIOp::create(b, keep, ops.ci32(0x0000FFFF)),
                         keep);
          out = LLVM::InsertElementOp::create(
              b, out, arith::AndIOp::create(b, w, keep), ops.ci32(k));
        }
        LLVM::StoreOp::create(b, out, p, /*alignment=*/16);
        return {};
      },
      none);
}

/// The group's rewrite of the tile once every thread has read it raw:
/// barrier, non-finite elements := 0, (fence,) barrier.
void rewriteTile(KernelOps &ops, const VoteGroup &grp, Value sV, int rows,
                 int dim, bool swizzled, bool asyncProxy) {
  syncGroup(ops, grp); // every thread has read the raw tile
  zeroNonFinite(ops, grp, sV, rows, dim, swizzled);
  if (asyncProxy)
    fenceProxyAsync(ops); // the rewritten tile is read by wgmma or TMA
  syncGroup(ops, grp);
}

/// \p o plus the non-finite terms of P V for this thread's O elements: the
/// sum over keys j of the tile with V[j, d] NaN or Inf and P[i, j] != 0 of
/// P[i, j] * V[j, d]; an element with no such term keeps its value exactly.
/// \p pPacked is P as the product takes it: 16-bit pairs, word
/// (mt * 2 + r) * nS + n holding columns 8 n + 2 t, + 1 of row g + 8 r of
/// m16 tile mt (so P stays packed, as in the plain path, and a weight is
/// 0 exactly where the product's is). Every lane of the warp must call it
/// (shuffles).
SmallVector<Value> addNonFiniteTerms(KernelOps &ops, ArrayRef<Value> o,
                                     ArrayRef<Value> pPacked,
                                     const TileShape &sh, Value lane, Value sV,
                                     bool swizzled) {
  ImplicitLocOpBuilder &b = ops.b;
  const int MT = sh.mTiles(), nS = sh.sTiles(), nO = sh.oTiles();
  const int BN = sh.blockN, Dv = sh.headDimV;
  Value t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  Value quad = arith::AndIOp::create(b, lane, ops.ci32(~3));
  SmallVector<Value> init(o);
  // One key j of the tile per iteration (a run-time loop keeps the code
  // small and the registers few: this path runs only for tiles that hold a
  // NaN or Inf).
  auto loop = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                 arith::ConstantIndexOp::create(b, BN),
                                 arith::ConstantIndexOp::create(b, 1), init);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value j = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  SmallVector<Value> x(loop.getRegionIterArgs());
  // P[i, j] of the thread's rows: held by thread t' = (j % 8) / 2 of the
  // row's quad, in its word n = j / 8, half j % 2.
  Value n = arith::DivUIOp::create(b, j, ops.ci32(8));
  Value shift =
      ops.mul(arith::RemUIOp::create(b, j, ops.ci32(2)), ops.ci32(16));
  Value src = arith::OrIOp::create(
      b, quad,
      arith::DivUIOp::create(b, arith::RemUIOp::create(b, j, ops.ci32(8)),
                             ops.ci32(2)));
  Type ht = ops.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  SmallVector<Value> pj(2 * MT);
  for (int rr = 0; rr < 2 * MT; ++rr) {
    Value mine = pPacked[rr * nS];
    for (int k = 1; k < nS; ++k)
      mine = ops.sel(ops.cmp(arith::CmpIPredicate::eq, n, ops.ci32(k)),
                     pPacked[rr * nS + k], mine);
    Value w =
        NVVM::ShflOp::create(b, ops.i32, ops.ci32(-1), mine, src,
                             ops.ci32(0x1f), NVVM::ShflKind::idx, UnitAttr());
    Value h16 = arith::TruncIOp::create(b, b.getI16Type(),
                                        arith::ShRUIOp::create(b, w, shift));
    Value h = arith::BitcastOp::create(b, ht, h16);
    pj[rr] = arith::ExtFOp::create(b, ops.f32, h);
  }
  Value zero = ops.cf32(0.0f);
  for (int jd = 0; jd < nO; ++jd) {
    // V[j, 8 jd + 2 t .. + 1]: one 32-bit word of chunk jd of row j.
    Value off = ops.add(tileOffset(ops, j, ops.ci32(jd), BN, Dv, swizzled),
                        ops.mul(t, ops.ci32(4)));
    Value w = LLVM::LoadOp::create(b, ops.i32, ops.gepBytes(sV, ops.ext64(off)),
                                   /*alignment=*/4);
    for (int e = 0; e < 2; ++e) {
      Value bad = halfNonFinite(ops, w, e == 1);
      Value v = halfToF32(ops, w, e == 1);
      for (int rr = 0; rr < 2 * MT; ++rr) {
        int mt = rr / 2, r = rr % 2;
        int k = (mt * nO + jd) * 4 + 2 * r + e;
        // UNE: a NaN weight counts (it is not 0).
        Value weighted =
            ops.land(bad, arith::CmpFOp::create(b, arith::CmpFPredicate::UNE,
                                                pj[rr], zero));
        x[k] = ops.sel(weighted, ops.fadd(x[k], ops.fmul(pj[rr], v)), x[k]);
      }
    }
  }
  scf::YieldOp::create(b, x);
  return SmallVector<Value>(loop.getResults());
}

/// The 16-bit element (row, col) of a tile of \p rows x \p dim at \p smem
/// (the layout of tileOffset), as f32.
Value loadElement(KernelOps &ops, Value smem, Value row, Value col, int rows,
                  int dim, bool swizzled) {
  ImplicitLocOpBuilder &b = ops.b;
  Value chunk = arith::DivUIOp::create(b, col, ops.ci32(8));
  Value within = arith::RemUIOp::create(b, col, ops.ci32(8));
  Value off = ops.add(tileOffset(ops, row, chunk, rows, dim, swizzled),
                      ops.mul(within, ops.ci32(2)));
  Type ht = ops.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  Value h = LLVM::LoadOp::create(b, ht, ops.gepBytes(smem, ops.ext64(off)),
                                 /*alignment=*/2);
  return arith::ExtFOp::create(b, ops.f32, h);
}

} // namespace

static std::atomic<bool> isolation{true};
static std::atomic<bool> tileVote{false};
static std::atomic<bool> tileEndVote{false};
static std::atomic<bool> backwardTileVote{false};
static std::atomic<bool> publishedVote{false};

bool maskedValueIsolation() { return isolation.load(); }

bool maskedValueTileVote() { return tileVote.load(); }

bool maskedValueTileEndVote() { return tileEndVote.load(); }

bool maskedValueBackwardTileVote() { return backwardTileVote.load(); }

bool maskedValuePublishedVote() { return publishedVote.load(); }

namespace {

/// A tree over \p xs (non-empty): \p fold3 takes three values and
/// \p fold2 two, each giving one, until one is left (n values: about n / 2
/// folds, depth about log3 n).
Value foldTree(ArrayRef<Value> xs,
               llvm::function_ref<Value(Value, Value, Value)> fold3,
               llvm::function_ref<Value(Value, Value)> fold2) {
  SmallVector<Value> level(xs);
  while (level.size() > 1) {
    SmallVector<Value> next;
    size_t i = 0;
    for (; i + 2 < level.size(); i += 3)
      next.push_back(fold3(level[i], level[i + 1], level[i + 2]));
    if (level.size() - i == 2)
      next.push_back(fold2(level[i], level[i + 1]));
    else if (level.size() - i == 1)
      next.push_back(level[i]);
    level = std::move(next);
  }
  return level[0];
}

/// fma.rn of 16-bit pairs: \p x * \p y + \p z (pure).
Value fma16(KernelOps &ops, Value x, Value y, Value z) {
  std::string text = std::string("fma.rn.") + (ops.bf16 ? "bf16x2" : "f16x2") +
                     " $0, $1, $2, $3;";
  return LLVM::InlineAsmOp::create(
             ops.b, TypeRange{ops.i32}, ValueRange{x, y, z}, text, "=r,r,r,r",
             /*has_side_effects=*/false,
             /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(ops.b.getContext(),
                                       LLVM::AsmDialect::AD_ATT),
             ArrayAttr())
      .getResult(0);
}

} // namespace

Value wordsHaveNonFinite(KernelOps &ops, ArrayRef<Value> words) {
  // x * y + z is NaN or Inf in a lane where x, y or z is (Inf * 0 is NaN,
  // Inf * y is Inf or NaN, a NaN or Inf term stays one), else finite or,
  // where x * y overflows, a false alarm: bf16 has f32's range, so only
  // |x y| > 3e38. fp16 (max 65504) folds two words at a time, x * 0 + z
  // (fmaZero), which has no false alarm.
  Value root =
      ops.bf16
          ? foldTree(
                words,
                [&](Value x, Value y, Value z) { return fma16(ops, x, y, z); },
                [&](Value x, Value y) { return fmaZero(ops, x, y); })
          : foldTree(
                words,
                [&](Value x, Value y, Value z) {
                  return fmaZero(ops, x, fmaZero(ops, y, z));
                },
                [&](Value x, Value y) { return fmaZero(ops, x, y); });
  return ops.lor(halfNonFinite(ops, root, false),
                 halfNonFinite(ops, root, true));
}

Value voteOr(KernelOps &ops, const VoteGroup &grp, Value vote) {
  ImplicitLocOpBuilder &b = ops.b;
  Value v32 = arith::ExtUIOp::create(b, ops.i32, vote);
  Value red;
  if (grp.barrierId == 0) {
    red =
        NVVM::BarrierOp::create(b, TypeRange{ops.i32}, Value(), Value(),
                                NVVM::BarrierReductionAttr::get(
                                    b.getContext(), NVVM::BarrierReduction::OR),
                                v32)
            .getResult(0);
  } else {
    // nvvm.barrier takes a reduction only at barrier 0; PTX's bar.red takes
    // any barrier and a thread count.
    red = ops.inlineAsm(ops.i32, {v32},
                        "{\n.reg .pred p, q;\nsetp.ne.u32 p, $1, 0;\n"
                        "bar.red.or.pred q, " +
                            std::to_string(grp.barrierId) + ", " +
                            std::to_string(grp.nthreads) +
                            ", p;\nselp.u32 $0, 1, 0, q;\n}",
                        "=r,r")
              .getResult(0);
  }
  return ops.cmp(arith::CmpIPredicate::ne, red, ops.ci32(0));
}

Value valuesHaveNonFinite(KernelOps &ops, ArrayRef<Value> xs) {
  // IEEE fmas (x * y + z, no fast-math flags): NaN or Inf where a term
  // was, else finite or, where x * y or the sum overflows (|x y| > 3e38),
  // a false alarm.
  Value root = foldTree(
      xs,
      [&](Value x, Value y, Value z) -> Value {
        return math::FmaOp::create(ops.b, x, y, z);
      },
      [&](Value x, Value y) -> Value {
        return arith::AddFOp::create(ops.b, x, y);
      });
  Value mag = math::AbsFOp::create(ops.b, root);
  return arith::CmpFOp::create(
      ops.b, arith::CmpFPredicate::UGE, mag,
      ops.cf32(std::numeric_limits<float>::infinity()));
}

Value chunksHaveNonFiniteIf(KernelOps &ops, Value cond, const VoteGroup &grp,
                            Value smem, int rows, int dim, bool swizzled) {
  return ops.guarded(cond, ops.i1, ops.cb(false), [&] {
    return chunksHaveNonFinite(ops, grp, smem, rows, dim, swizzled);
  });
}

void publishWarpVote(KernelOps &ops, Value bad, Value lane, Value flag,
                     Value token, Value votedBar, bool branchFree) {
  ImplicitLocOpBuilder &b = ops.b;
  Value any = NVVM::VoteSyncOp::create(b, ops.i1, ops.ci32(-1), bad,
                                       NVVM::VoteSyncKind::any);
  if (branchFree) {
    // A branch on the warp's OR only (uniform in the warp); the marks of
    // the warp's lanes are the same token, so any of them may land last.
    ops.ifThen(any, [&] {
      LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::umax, flag, token,
                                LLVM::AtomicOrdering::monotonic);
    });
    mbarrierArriveIf(
        ops, votedBar,
        arith::ExtUIOp::create(
            b, ops.i32, ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0))));
    return;
  }
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)), [&] {
    // An atomic max (warps of the same use may mark the word at once: no
    // data race; marks only grow, so the word holds this use's token iff
    // some warp of this use marked it). Before the arrival (release): a
    // warp that waits for the phase (acquire) reads it.
    ops.ifThen(any, [&] {
      LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::umax, flag, token,
                                LLVM::AtomicOrdering::monotonic);
    });
    mbarrierArrive(ops, votedBar);
  });
}

Value awaitPublishedVote(KernelOps &ops, Value cond, Value flag, Value token,
                         Value votedBar, Value parity) {
  return ops.guarded(cond, ops.i1, ops.cb(false), [&] {
    mbarrierWait(ops, votedBar, parity);
    Value mark = LLVM::LoadOp::create(ops.b, ops.i32, flag, /*alignment=*/4);
    return ops.cmp(arith::CmpIPredicate::eq, mark, token);
  });
}

Value tileHasNonFiniteIf(KernelOps &ops, Value cond, const VoteGroup &grp,
                         Value smem, int rows, int dim, bool swizzled) {
  return ops.guarded(cond, ops.i1, ops.cb(false), [&] {
    return tileHasNonFinite(ops, grp, smem, rows, dim, swizzled);
  });
}

Value barrierVotingIf(KernelOps &ops, Value cond, const VoteGroup &grp,
                      Value smem, int rows, int dim, bool swizzled) {
  auto ifOp = scf::IfOp::create(ops.b, TypeRange{ops.i1}, cond,
                                /*withElse=*/true);
  OpBuilder::InsertionGuard g(ops.b);
  ops.b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(
      ops.b, ValueRange{tileHasNonFinite(ops, grp, smem, rows, dim, swizzled)});
  ops.b.setInsertionPointToStart(ifOp.elseBlock());
  syncGroup(ops, grp);
  scf::YieldOp::create(ops.b, ValueRange{ops.cb(false)});
  return ifOp.getResult(0);
}

SmallVector<Value> isolateNonFiniteV(KernelOps &ops, const TileShape &sh,
                                     ArrayRef<Value> o, ArrayRef<Value> p,
                                     Value poisoned, Value sV, Value lane,
                                     const VoteGroup &grp, bool swizzled,
                                     bool asyncProxy) {
  ImplicitLocOpBuilder &b = ops.b;
  // P packed as the product packs it (the same ops: the product's packing
  // folds into these, and P's f32 registers die here as in the plain path).
  const int MT = sh.mTiles(), nS = sh.sTiles();
  SmallVector<Value> packed;
  for (int rr = 0; rr < 2 * MT; ++rr) {
    int mt = rr / 2, r = rr % 2;
    for (int n = 0; n < nS; ++n)
      packed.push_back(ops.pack(p[(mt * nS + n) * 4 + 2 * r],
                                p[(mt * nS + n) * 4 + 2 * r + 1]));
  }
  SmallVector<Type> types(o.size(), ops.f32);
  // The guarded branch is cold (almost never taken): out of the hot path.
  auto ifOp =
      scf::IfOp::create(b, types, ops.unlikely(poisoned), /*withElse=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  {
    // The non-finite terms first, straight into O (no second set of
    // accumulators).
    SmallVector<Value> withTerms =
        addNonFiniteTerms(ops, o, packed, sh, lane, sV, swizzled);
    rewriteTile(ops, grp, sV, sh.blockN, sh.headDimV, swizzled, asyncProxy);
    scf::YieldOp::create(b, withTerms);
  }
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, o);
  return SmallVector<Value>(ifOp.getResults());
}

void joinRewriteIf(KernelOps &ops, Value poisoned, const TileShape &sh,
                   Value sV, const VoteGroup &grp, bool swizzled,
                   bool asyncProxy) {
  ops.ifThen(poisoned, [&] {
    rewriteTile(ops, grp, sV, sh.blockN, sh.headDimV, swizzled, asyncProxy);
  });
}

SmallVector<Value> dqSkipZero(KernelOps &ops, const BackwardTileShape &sh,
                              Value warp, Value lane, Value sDS, Value sK,
                              bool swizzled) {
  ImplicitLocOpBuilder &b = ops.b;
  const int BM = sh.blockM, BN = sh.blockN, D = sh.headDimQK;
  const int dqCols = sh.dqCols(), nQ = dqCols / 8;
  Value g = arith::DivUIOp::create(b, lane, ops.ci32(4));
  Value t = arith::RemUIOp::create(b, lane, ops.ci32(4));
  Value rg = arith::RemUIOp::create(b, warp, ops.ci32(sh.rowGroups()));
  Value cg = arith::DivUIOp::create(b, warp, ops.ci32(sh.rowGroups()));
  Value zero = ops.cf32(0.0f);
  Value row0 = ops.add(ops.mul(rg, ops.ci32(16)), g);
  Value col0 = ops.add(ops.mul(cg, ops.ci32(dqCols)), ops.mul(t, ops.ci32(2)));
  // One key j per iteration.
  SmallVector<Value> init(nQ * 4, zero);
  auto loop = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                 arith::ConstantIndexOp::create(b, BM),
                                 arith::ConstantIndexOp::create(b, 1), init);
  OpBuilder::InsertionGuard lg(b);
  b.setInsertionPointToStart(loop.getBody());
  Value j = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  SmallVector<Value> dq(loop.getRegionIterArgs());
  for (int r = 0; r < 2; ++r) {
    // dS[row, j] = dS^T[j, row].
    Value ds = loadElement(ops, sDS, j, ops.add(row0, ops.ci32(8 * r)), BM, BN,
                           swizzled);
    Value live = arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, ds, zero);
    for (int jd = 0; jd < nQ; ++jd)
      for (int cc = 0; cc < 2; ++cc) {
        Value k = loadElement(ops, sK, j, ops.add(col0, ops.ci32(jd * 8 + cc)),
                              BM, D, swizzled);
        Value &acc = dq[jd * 4 + 2 * r + cc];
        acc = ops.sel(live, ops.fadd(acc, ops.fmul(ds, k)), acc);
      }
  }
  scf::YieldOp::create(b, dq);
  return SmallVector<Value>(loop.getResults());
}

} // namespace flashjit::nvvm

void flashjit::setMaskedValueIsolationForTesting(bool on) {
  flashjit::nvvm::isolation.store(on);
}

void flashjit::setMaskedValueTileVoteForTesting(bool on) {
  flashjit::nvvm::tileVote.store(on);
}

void flashjit::setMaskedValueTileEndVoteForTesting(bool on) {
  flashjit::nvvm::tileEndVote.store(on);
}

void flashjit::setMaskedValueBackwardTileVoteForTesting(bool on) {
  flashjit::nvvm::backwardTileVote.store(on);
}

void flashjit::setMaskedValuePublishedVoteForTesting(bool on) {
  flashjit::nvvm::publishedVote.store(on);
}
