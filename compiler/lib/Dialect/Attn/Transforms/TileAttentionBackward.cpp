//===- TileAttentionBackward.cpp - attn.attention to the backward tiles ---===//
//
// Pass `attn-tile-backward`.
//
// Pre:  the module holds attn.attention ops with a score_grad region (as
//       MLIRGen builds them for KernelKind::Backward), each verified.
// Post: each such attn.attention @f is replaced by two func.func with the
//       backward ABI of flashjit/runtime/KernelAbi.h (abi::bwd):
//         @f     the dK/dV kernel, one work item = one (batch, K/V head,
//                K/V tile), K/V tile outer, every query head of the K/V
//                head's group and every q tile inner;
//         @f_dq  the dQ kernel, one work item = one (batch, query head, q
//                tile), K/V tiles inner; it alone accumulates the buffer
//                and parameter gradients (the score_grad region's
//                attn.buffer_grad / attn.param_grad, lowered here to plain
//                loads and stores on the gradient pointers the host gives
//                each range of items).
//       The user's regions are cloned as in attn-tile (the mask into
//       attn.mask_select, the modifier into attn.score_mod, score_grad into
//       attn.score_grad). No attn.attention, attn.param, attn.buffer_load,
//       attn.buffer_grad or attn.param_grad remains.
//
// Algorithm (FlashAttention-2 paper, Algorithm 2, with P recomputed from
// the forward's LSE), for one (q tile, K/V tile) pair that the run-time
// classifier (or the block mask) does not find empty:
//   S   = scale * Q K^T                         (raw scores, kept for
//                                                score_grad)
//   S'  = log2(e) * score_mod(mask(S))          (-inf where masked)
//   P   = exp2(S' - log2(e) LSE)                (0 where masked, and on rows
//                                                with LSE = -inf)
//   dP  = dO V^T;  dS' = P * (dP - D), D = rowsum(dO * O)  (0 where P = 0)
//   dS  = score_grad(dS', S)                    (dS' * d s'/d s; identity
//                                                modifiers skip it)
//   dK/dV kernel: dV += P^T dO, dK += scale dS^T Q
//   dQ kernel:    dQ += scale dS K
// Each output element is accumulated by exactly one work item in a fixed
// order (dK/dV per K/V tile, dQ per q tile), so the kernels are
// deterministic; no atomics. dQ, dK and dV are stored once, after their
// loops, in the inputs' dtypes (rows with nothing to add store zeros).
//
// varlen and block-sparse as attn-tile: items cover the longest sequence
// and skip what is past their own; the dQ kernel visits the block mask's
// per-q-tile lists, the dK/dV kernel the transposed per-K/V-tile lists of
// q tiles (built by the host from the BlockMask).
//
//===----------------------------------------------------------------------===//
#include "TileScores.h"
#include "flashjit/Dialect/Attn/Transforms/KernelRegions.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>
#include <limits>

namespace flashjit::attn {
#define GEN_PASS_DEF_ATTNTILEBACKWARD
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace flashjit::attn

using namespace mlir;
using namespace flashjit::attn;

namespace {

/// Builds one of the two backward kernels of one attn.attention op.
class BackwardEmitter : I64Emitter {
public:
  BackwardEmitter(AttentionOp op, int64_t blockM, int64_t blockN, bool varlen,
                  bool blockSparse, bool dqKernel)
      : I64Emitter(op.getLoc(), op.getContext()), op(op), bm(blockM),
        bn(blockN), varlen(varlen), blockSparse(blockSparse),
        dqKernel(dqKernel) {}

  func::FuncOp emit(StringRef name) {
    MLIRContext *ctx = op.getContext();
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    i64 = b.getI64Type();
    f32 = b.getF32Type();

    // Kernel signature: see KernelAbi.h (abi::bwd).
    SmallVector<Type> args(11, ptr);
    numBuffers = op.getBuffers().size();
    for (unsigned i = 0; i < numBuffers; ++i)
      args.append({ptr, i64, ptr});
    for (NamedAttribute p : op.getParams())
      args.push_back(cast<TypeAttr>(p.getValue()).getValue());
    args.append(3 + 35, i64);
    if (varlen)
      args.append(2, ptr);
    if (blockSparse) {
      args.append(4, ptr);
      args.append(3, i64);
    }
    args.append(2, i64);

    b.setInsertionPoint(op);
    auto fn = func::FuncOp::create(b, name, FunctionType::get(ctx, args, {}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    fnArgs = entry->getArguments();
    unsigned s = 11 + 3 * numBuffers + op.getParams().size();
    Value maxSq = arg(s + 1), maxSk = arg(s + 2);
    auto strides = [&](unsigned first, unsigned n) {
      return fnArgs.slice(s + 3 + first, n);
    };
    qs = strides(0, 4), ks = strides(4, 4), vs = strides(8, 4),
    os = strides(12, 4), ls = strides(16, 3), dos = strides(19, 4),
    dqs = strides(23, 4), dks = strides(27, 4), dvs = strides(31, 4);
    unsigned next = s + 38;
    if (varlen) {
      cuQ = arg(next);
      cuK = arg(next + 1);
      next += 2;
    }
    if (blockSparse) {
      for (int i = 0; i < 4; ++i)
        lists[i] = arg(next + i);
      bmBatchStride = arg(next + 4);
      bmHeadStride = arg(next + 5);
      bmPitch = arg(next + 6);
      next += 7;
    }
    Value begin = arg(next), end = arg(next + 1);

    int64_t dqk = op.getHeadDimQk(), dv = op.getHeadDimV();
    hq = op.getHeadsQ();
    hkv = op.getHeadsKv();
    group = hq / hkv;
    identityScore = isIdentityScore(op);
    trivialGrad = isTrivialScoreGrad();
    // Tiles live on the stack, allocated once.
    qT = tileAlloca({bm, dqk}), kT = tileAlloca({bn, dqk}),
    vT = tileAlloca({bn, dv}), oT = tileAlloca({bm, dv}),
    doT = tileAlloca({bm, dv});
    sT = tileAlloca({bm, bn}), dpT = tileAlloca({bm, bn});
    if (!identityScore)
      sRaw = tileAlloca({bm, bn});
    lse2 = tileAlloca({bm}), dRow = tileAlloca({bm});
    if (dqKernel) {
      dqAcc = tileAlloca({bm, dqk});
      onesM = tileAlloca({bm});
    } else {
      dkAcc = tileAlloca({bn, dqk}), dvAcc = tileAlloca({bn, dv});
      onesN = tileAlloca({bn});
    }
    zeroF = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
    Value oneF = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    FillOp::create(b, oneF, dqKernel ? onesM : onesN);

    auto items = scf::ForOp::create(b, begin, end, c(1));
    b.setInsertionPoint(items.getBody()->getTerminator());
    if (dqKernel)
      emitDqItem(items.getInductionVar(), maxSq, maxSk);
    else
      emitDkDvItem(items.getInductionVar(), maxSq, maxSk);
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b);
    return fn;
  }

private:
  AttentionOp op;
  int64_t bm, bn;
  bool varlen, blockSparse, dqKernel;
  bool identityScore = false, trivialGrad = false;
  int64_t hq = 1, hkv = 1, group = 1;
  Type i64, f32;
  unsigned numBuffers = 0;
  Block::BlockArgListType fnArgs;
  ValueRange qs, ks, vs, os, ls, dos, dqs, dks, dvs;
  Value cuQ, cuK;
  // Block-sparse lists (dQ kernel: the BlockMask's per-q-tile lists; dK/dV
  // kernel: the transposed per-K/V-tile lists of q tiles), row strides and
  // the lists' row pitch.
  Value lists[4], bmBatchStride, bmHeadStride, bmPitch;
  // Tiles and row vectors.
  Value qT, kT, vT, oT, doT, sT, dpT, sRaw, lse2, dRow, dqAcc, dkAcc, dvAcc,
      onesM, onesN, zeroF;
  // The current (q tile, K/V tile) pair: batch, query head, K/V head, q and
  // K/V tile indices, first rows and valid rows, the (per-sequence)
  // seqlens and, varlen, the first tokens of the sequence.
  Value bb, h, hk, mt, q0, qRows, kv0, kvRows, sq, sk, qStart, kStart;

  Value arg(unsigned i) { return fnArgs[i]; }
  Value tileAlloca(ArrayRef<int64_t> shape) {
    return memref::AllocaOp::create(b, MemRefType::get(shape, f32),
                                    ValueRange{}, ValueRange{},
                                    b.getI64IntegerAttr(64));
  }
  Value loadI32(Value base, Value i) {
    Type ptr = LLVM::LLVMPointerType::get(b.getContext());
    Value p = LLVM::GEPOp::create(b, ptr, b.getI32Type(), base, ValueRange{i});
    return arith::ExtSIOp::create(b, i64,
                                  LLVM::LoadOp::create(b, b.getI32Type(), p));
  }
  Value seqBase(ValueRange st, Value start) {
    return varlen ? mul(start, st[2]) : mul(bb, st[0]);
  }
  Value lt(Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::slt, x, y);
  }
  /// Opens `if (cond)` and moves the insertion point into it.
  void enterIf(Value cond) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  }
  /// Opens `for iv in [lo, hi)` and moves the insertion point into it.
  Value enterFor(Value lo, Value hi) {
    auto loop = scf::ForOp::create(b, lo, hi, c(1));
    b.setInsertionPoint(loop.getBody()->getTerminator());
    return loop.getInductionVar();
  }

  /// Sequence bounds of batch bb: sq, sk and (varlen) the first tokens.
  void bindSequence(Value maxSq, Value maxSk) {
    if (varlen) {
      qStart = loadI32(cuQ, bb);
      kStart = loadI32(cuK, bb);
      sq = sub(loadI32(cuQ, add(bb, c(1))), qStart);
      sk = sub(loadI32(cuK, add(bb, c(1))), kStart);
    } else {
      sq = maxSq;
      sk = maxSk;
    }
  }

  /// Loads the Q, dO and O tiles and the LSE of q tile mt of head h and
  /// computes D = rowsum(dO * O).
  void loadQSide() {
    q0 = mul(mt, c(bm));
    qRows = arith::MinSIOp::create(b, c(bm), sub(sq, q0));
    auto off = [&](ValueRange st) {
      return add(add(seqBase(st, qStart), mul(h, st[1])), mul(q0, st[2]));
    };
    LoadTileOp::create(b, arg(0), off(qs), qRows, qs[2], qs[3], qT,
                       op.getDtypeQAttr());
    LoadTileOp::create(b, arg(5), off(dos), qRows, dos[2], dos[3], doT,
                       op.getDtypeOAttr());
    LoadTileOp::create(b, arg(3), off(os), qRows, os[2], os[3], oT,
                       op.getDtypeOAttr());
    Value lOff = add(add(seqBase(ls, qStart), mul(h, ls[1])), mul(q0, ls[2]));
    LoadLseOp::create(b, arg(4), lOff, qRows, ls[2], lse2);
    RowDotOp::create(b, doT, oT, dRow);
  }

  /// Loads the K and V tiles of K/V tile kt of head hk.
  void loadKvSide(Value kt) {
    kv0 = mul(kt, c(bn));
    kvRows = arith::MinSIOp::create(b, c(bn), sub(sk, kv0));
    auto off = [&](ValueRange st) {
      return add(add(seqBase(st, kStart), mul(hk, st[1])), mul(kv0, st[2]));
    };
    LoadTileOp::create(b, arg(1), off(ks), kvRows, ks[2], ks[3], kT,
                       op.getDtypeKAttr());
    LoadTileOp::create(b, arg(2), off(vs), kvRows, vs[2], vs[3], vT,
                       op.getDtypeVAttr());
  }

  /// The run-time class of the current pair: (full, empty).
  std::pair<Value, Value> classify(Value q0v, Value qRowsV, Value kv0v,
                                   Value kvRowsV) {
    TileBoxValues box{bb,   h,
                      q0v,  sub(add(q0v, qRowsV), c(1)),
                      kv0v, sub(add(kv0v, kvRowsV), c(1)),
                      sq,   sk};
    TileClassValues cls = buildTileClassifier(
        b, b.getLoc(), op.getMask(), box,
        [&](Operation *p) { return paramArg(cast<ParamOp>(p).getName()); });
    Value full = notV(cls.canBeFalse);
    Value empty = arith::AndIOp::create(b, cls.canBeFalse, notV(cls.canBeTrue));
    return {full, empty};
  }

  /// dQ kernel: item (b, h, q tile).
  void emitDqItem(Value item, Value maxSq, Value maxSk) {
    Value nMT = ceilDiv(maxSq, bm);
    mt = arith::RemSIOp::create(b, item, nMT);
    Value bh = arith::DivSIOp::create(b, item, nMT);
    h = arith::RemSIOp::create(b, bh, c(hq));
    bb = arith::DivSIOp::create(b, bh, c(hq));
    hk = arith::DivSIOp::create(b, h, c(group));
    bindSequence(maxSq, maxSk);
    if (varlen)
      enterIf(lt(mul(mt, c(bm)), sq));
    loadQSide();
    FillOp::create(b, zeroF, dqAcc);
    Value nKT = ceilDiv(sk, bn);
    auto pair = [&](Value kt, bool knownFull) {
      Value kv0v = mul(kt, c(bn));
      Value kvRowsV = arith::MinSIOp::create(b, c(bn), sub(sk, kv0v));
      Value full = arith::ConstantOp::create(b, b.getBoolAttr(true));
      if (!knownFull) {
        auto [f, empty] = classify(q0, qRows, kv0v, kvRowsV);
        full = f;
        enterIf(notV(empty));
      }
      loadKvSide(kt);
      emitPair(full, knownFull);
    };
    if (blockSparse) {
      Value row = add(add(mul(bb, bmBatchStride), mul(h, bmHeadStride)), mt);
      for (bool fullList : {false, true}) {
        OpBuilder::InsertionGuard g(b);
        Value num = loadI32(lists[fullList ? 2 : 0], row);
        Value i = enterFor(c(0), num);
        Value kt = loadI32(lists[fullList ? 3 : 1], add(mul(row, bmPitch), i));
        enterIf(lt(kt, nKT));
        pair(kt, fullList);
      }
    } else {
      OpBuilder::InsertionGuard g(b);
      pair(enterFor(c(0), nKT), false);
    }
    Value off = add(add(seqBase(dqs, qStart), mul(h, dqs[1])), mul(q0, dqs[2]));
    StoreTileOp::create(b, dqAcc, onesM, arg(6), off, qRows, dqs[2], dqs[3],
                        op.getDtypeQAttr());
  }

  /// dK/dV kernel: item (b, K/V head, K/V tile).
  void emitDkDvItem(Value item, Value maxSq, Value maxSk) {
    Value nNT = ceilDiv(maxSk, bn);
    Value nt = arith::RemSIOp::create(b, item, nNT);
    Value bh = arith::DivSIOp::create(b, item, nNT);
    hk = arith::RemSIOp::create(b, bh, c(hkv));
    bb = arith::DivSIOp::create(b, bh, c(hkv));
    bindSequence(maxSq, maxSk);
    if (varlen)
      enterIf(lt(mul(nt, c(bn)), sk));
    loadKvSide(nt);
    FillOp::create(b, zeroF, dkAcc);
    FillOp::create(b, zeroF, dvAcc);
    Value nMT = ceilDiv(sq, bm);
    {
      OpBuilder::InsertionGuard g(b);
      Value gi = enterFor(c(0), c(group));
      h = add(mul(hk, c(group)), gi);
      auto pair = [&](Value qt, bool knownFull) {
        Value q0v = mul(qt, c(bm));
        Value qRowsV = arith::MinSIOp::create(b, c(bm), sub(sq, q0v));
        Value full = arith::ConstantOp::create(b, b.getBoolAttr(true));
        if (!knownFull) {
          auto [f, empty] = classify(q0v, qRowsV, kv0, kvRows);
          full = f;
          enterIf(notV(empty));
        }
        mt = qt;
        loadQSide();
        emitPair(full, knownFull);
      };
      if (blockSparse) {
        Value row = add(add(mul(bb, bmBatchStride), mul(h, bmHeadStride)), nt);
        for (bool fullList : {false, true}) {
          OpBuilder::InsertionGuard g2(b);
          Value num = loadI32(lists[fullList ? 2 : 0], row);
          Value i = enterFor(c(0), num);
          Value qt =
              loadI32(lists[fullList ? 3 : 1], add(mul(row, bmPitch), i));
          enterIf(lt(qt, nMT));
          pair(qt, fullList);
        }
      } else {
        OpBuilder::InsertionGuard g2(b);
        pair(enterFor(c(0), nMT), false);
      }
    }
    auto off = [&](ValueRange st) {
      return add(add(seqBase(st, kStart), mul(hk, st[1])), mul(kv0, st[2]));
    };
    StoreTileOp::create(b, dkAcc, onesN, arg(7), off(dks), kvRows, dks[2],
                        dks[3], op.getDtypeKAttr());
    StoreTileOp::create(b, dvAcc, onesN, arg(8), off(dvs), kvRows, dvs[2],
                        dvs[3], op.getDtypeVAttr());
  }

  /// One (q tile, K/V tile) pair whose tiles are loaded (header comment);
  /// S, the mask and the score modifier as the forward evaluates them
  /// (emitMaskedScores).
  void emitPair(Value full, bool knownFull) {
    double scale = op.getScale().convertToDouble();
    TilePairWhere where{q0, kv0, qRows, kvRows, bb, h, sq, sk};
    emitMaskedScores(b, op, {qT, kT, sT, sRaw}, where, full, knownFull,
                     [&](Region &from, Region &to) { cloneRegion(from, to); });
    // P = exp2(S' - log2(e) LSE), exactly 0 at masked pairs even where LSE
    // is NaN; dS' = P * (dO V^T - D).
    Exp2Op::create(b, sT, lse2, sT, /*zero_masked=*/b.getUnitAttr());
    DotOp::create(b, doT, vT, dpT, b.getUnitAttr(), UnitAttr(),
                  b.getF32FloatAttr(1.0f), UnitAttr());
    SoftmaxGradOp::create(b, sT, dpT, dRow, dpT);
    // The products weighted by P or dS: both are exactly 0 at masked pairs,
    // so in a partial tile skip_zero_lhs keeps a NaN or Inf in K, V, Q or dO
    // at a pair the mask removes out of the gradients (0 * inf would be
    // NaN), as the forward's O += P V; full tiles keep the plain product.
    auto dot = [&](Value lhs, Value rhs, Value acc, double s, bool tl) {
      auto emit = [&](bool skip) {
        DotOp::create(b, lhs, rhs, acc, /*transpose_rhs=*/UnitAttr(),
                      /*accumulate=*/b.getUnitAttr(), b.getF32FloatAttr(s),
                      tl ? b.getUnitAttr() : UnitAttr(),
                      skip ? b.getUnitAttr() : UnitAttr());
      };
      if (knownFull)
        return emit(false);
      auto isFull = scf::IfOp::create(b, full, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(isFull.thenBlock()->getTerminator());
      emit(false);
      b.setInsertionPoint(isFull.elseBlock()->getTerminator());
      emit(true);
    };
    if (!dqKernel)
      dot(sT, doT, dvAcc, 1.0, /*transpose_lhs=*/true);
    if (!trivialGrad) {
      auto g = ScoreGradOp::create(
          b, dpT, sRaw ? sRaw : sT, where.q0, where.kv0, where.qRows,
          where.kvRows, where.batch, where.head, where.seqlenQ, where.seqlenK);
      cloneRegion(op.getScoreGrad(), g.getBody());
      lowerDataGrads(g.getBody());
    }
    if (dqKernel)
      dot(dpT, kT, dqAcc, scale, /*transpose_lhs=*/false);
    else
      dot(dpT, qT, dkAcc, scale, /*transpose_lhs=*/true);
  }

  /// The kernel argument of parameter \p name.
  Value paramArg(StringRef name) {
    unsigned i = 0;
    for (NamedAttribute p : op.getParams()) {
      if (p.getName() == name)
        return arg(11 + 3 * numBuffers + i);
      ++i;
    }
    return Value();
  }
  unsigned paramSlot(StringRef name) {
    unsigned i = 0;
    for (NamedAttribute p : op.getParams()) {
      if (p.getName() == name)
        break;
      ++i;
    }
    return i;
  }

  /// score_grad yields d_score and does nothing else.
  bool isTrivialScoreGrad() {
    Block &blk = op.getScoreGrad().front();
    auto y = cast<YieldOp>(blk.getTerminator());
    return y.getValue() == blk.getArgument(0) &&
           &blk.front() == y.getOperation();
  }

  void cloneRegion(Region &from, Region &to) {
    cloneKernelRegion(
        op, from, to,
        {[&](StringRef name) { return paramArg(name); },
         [&](unsigned slot) {
           return std::pair{arg(11 + 3 * slot), arg(12 + 3 * slot)};
         },
         arg(9)});
  }

  /// attn.buffer_grad / attn.param_grad in \p region: the dQ kernel adds
  /// a nonzero value into the gradient arrays (dBuffer[idx] at the
  /// buffer's grad pointer, bounds-checked like a read: out of range adds
  /// nothing and flags status[slot]; dParam at param_grads[slot]); the
  /// dK/dV kernel drops them (each gradient is accumulated once).
  void lowerDataGrads(Region &region) {
    SmallVector<Operation *> dead;
    region.walk([&](Operation *inner) {
      if (isa<BufferGradOp, ParamGradOp>(inner))
        dead.push_back(inner);
    });
    Type ptr = LLVM::LLVMPointerType::get(b.getContext());
    for (Operation *d : dead) {
      if (dqKernel) {
        ImplicitLocOpBuilder ib(d->getLoc(), d);
        auto addAt = [&](Value base, Value index, Value v) {
          Value p = LLVM::GEPOp::create(ib, ptr, f32, base, ValueRange{index});
          Value old = LLVM::LoadOp::create(ib, f32, p);
          LLVM::StoreOp::create(ib, arith::AddFOp::create(ib, old, v), p);
        };
        if (auto g = dyn_cast<BufferGradOp>(d)) {
          unsigned slot = bufferSlot(op, g.getName());
          Value v = g.getValue();
          Value nz = arith::CmpFOp::create(
              ib, arith::CmpFPredicate::UNE, v,
              arith::ConstantOp::create(ib, ib.getF32FloatAttr(0.0f)));
          auto ifNz = scf::IfOp::create(ib, nz, /*withElseRegion=*/false);
          ib.setInsertionPoint(ifNz.thenBlock()->getTerminator());
          Value idx = g.getIndex();
          if (!idx.getType().isInteger(64))
            idx = arith::ExtSIOp::create(ib, ib.getI64Type(), idx);
          Value size = arg(12 + 3 * slot);
          Value zero = arith::ConstantOp::create(ib, ib.getI64IntegerAttr(0));
          Value in = arith::AndIOp::create(
              ib,
              arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, idx, zero),
              arith::CmpIOp::create(ib, arith::CmpIPredicate::slt, idx, size));
          auto ifIn = scf::IfOp::create(ib, in, /*withElseRegion=*/true);
          ib.setInsertionPoint(ifIn.thenBlock()->getTerminator());
          addAt(arg(13 + 3 * slot), idx, v);
          ib.setInsertionPoint(ifIn.elseBlock()->getTerminator());
          Value st = LLVM::GEPOp::create(ib, ptr, ib.getI32Type(), arg(9),
                                         ValueRange{arith::ConstantOp::create(
                                             ib, ib.getI64IntegerAttr(slot))});
          LLVM::StoreOp::create(
              ib, arith::ConstantOp::create(ib, ib.getI32IntegerAttr(1)), st);
        } else {
          auto pg = cast<ParamGradOp>(d);
          addAt(arg(10),
                arith::ConstantOp::create(
                    ib, ib.getI64IntegerAttr(paramSlot(pg.getName()))),
                pg.getValue());
        }
      }
      d->erase();
    }
  }
};

struct AttnTileBackwardPass
    : public flashjit::attn::impl::AttnTileBackwardBase<AttnTileBackwardPass> {
  using AttnTileBackwardBase::AttnTileBackwardBase;

  void runOnOperation() override {
    if (blockM < 1 || blockN < 1) {
      getOperation().emitError() << "attn-tile-backward: block-m and block-n "
                                    "must be positive";
      return signalPassFailure();
    }
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops) {
      if (!op.hasScoreGrad()) {
        op.emitOpError() << "has no score_grad region: attn-tile-backward "
                            "needs a backward kernel (MLIRGen with "
                            "KernelKind::Backward)";
        return signalPassFailure();
      }
      if (op.getScoreGradOfOutput()) {
        op.emitOpError() << "has score_grad_of_output: the CPU backward "
                            "passes score_grad the raw score (MLIRGen "
                            "without gradOfOutput)";
        return signalPassFailure();
      }
      std::string name = op.getSymName().str();
      BackwardEmitter(op, blockM, blockN, varlen, blockSparse, false)
          .emit(name);
      BackwardEmitter(op, blockM, blockN, varlen, blockSparse, true)
          .emit(name + "_dq");
      op.erase();
    }
  }
};

} // namespace
