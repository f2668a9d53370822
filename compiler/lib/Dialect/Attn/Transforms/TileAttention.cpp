//===- TileAttention.cpp - attn.attention to a FlashAttention-2 program ---===//
//
// Pass `attn-tile`.
//
// Pre:  the module holds attn.attention ops (as MLIRGen builds them), each
//       verified.
// Post: each attn.attention @f is replaced by func.func @f with the kernel
//       ABI of flashjit/compiler/KernelAbi.h, whose body is scf loops over
//       work items and K/V tiles, attn tile ops on memref tiles allocated
//       once at function entry, the run-time tile classification emitted
//       by buildTileClassifier, and the user's regions cloned into
//       attn.mask_select / attn.score_mod with attn.param replaced by the
//       kernel argument and attn.buffer_load by attn.load_elem. No
//       attn.attention, attn.param or attn.buffer_load remains.
//
// Algorithm (FlashAttention-2 forward, one work item = one (batch, head,
// q tile)): m = -inf, l = 0, acc = 0; for each K/V tile that is not empty:
// S = (scale * log2 e) Q K^T (log2 e moves after the score modifier when
// there is one), mask (only on partial tiles; bounds always), m' = max(m,
// rowmax S), P = exp2(S - m'), alpha = exp2(m - m'), l = alpha l + rowsum P,
// acc = alpha acc + P V, m = m'. Then O = acc / l and LSE = (m + log2 l) ln 2,
// with O = 0 and LSE = -inf on rows with l = 0. With a sink (the op's
// `sink` attribute) the state starts from the sink's logit instead:
// m = sink[h] log2 e, l = 1 (l = 0 when sink[h] = -inf, no sink), so the
// final LSE includes exp(sink[h]) and a row with no allowed key ends with
// O = 0, LSE = sink[h].
//
// varlen: items cover the longest sequence; item (b, h, q tile) reads
// cu_seqlens_q/k[b], [b + 1] for its sequence's first tokens and lengths,
// does nothing past its own sequence's end, and addresses tokens
// (first token + index) * seq stride (batch strides are unused).
// block-sparse: the K/V loop becomes two loops over the row's lists of the
// block mask: partial tiles (classified as above) and full tiles (no
// classification, no mask code).
//
//===----------------------------------------------------------------------===//
#include "TileScores.h"
#include "flashjit/Dialect/Attn/Transforms/KernelRegions.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/Dialect/Attn/Transforms/TileClassifier.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>

namespace flashjit::attn {
#define GEN_PASS_DEF_ATTNTILE
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"
} // namespace flashjit::attn

using namespace mlir;
using namespace flashjit::attn;

namespace {

/// Builds the kernel function for one attn.attention op.
class KernelEmitter : I64Emitter {
public:
  KernelEmitter(AttentionOp op, int64_t blockM, int64_t blockN, bool count,
                bool varlen, bool blockSparse)
      : I64Emitter(op.getLoc(), op.getContext()), op(op), bm(blockM),
        bn(blockN), count(count), varlen(varlen), blockSparse(blockSparse) {}

  func::FuncOp emit() {
    MLIRContext *ctx = op.getContext();
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    i64 = b.getI64Type();
    f32 = b.getF32Type();

    // Kernel signature: see KernelAbi.h.
    SmallVector<Type> args(7, ptr);
    numBuffers = op.getBuffers().size();
    numParams = op.getParams().size();
    for (unsigned i = 0; i < numBuffers; ++i)
      args.append({ptr, i64});
    for (NamedAttribute p : op.getParams())
      args.push_back(cast<TypeAttr>(p.getValue()).getValue());
    args.append(3 + 19, i64);
    if (varlen)
      args.append(2, ptr);
    if (blockSparse) {
      args.append(4, ptr);
      args.append(3, i64);
    }
    if (op.getSink())
      args.push_back(ptr);
    args.append(2, i64);

    b.setInsertionPoint(op);
    auto fn = func::FuncOp::create(b, op.getSymName(),
                                   FunctionType::get(ctx, args, {}));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    fnArgs = entry->getArguments();
    unsigned s = 7 + 2 * numBuffers + numParams;
    Value maxSq = arg(s + 1), maxSk = arg(s + 2);
    auto strides = [&](unsigned first, unsigned n) {
      return fnArgs.slice(s + 3 + first, n);
    };
    qs = strides(0, 4), ks = strides(4, 4), vs = strides(8, 4),
    os = strides(12, 4), ls = strides(16, 3);
    unsigned next = s + 22;
    Value cuQ, cuK;
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
      bmCap = arg(next + 6);
      next += 7;
    }
    Value sinkPtr;
    if (op.getSink())
      sinkPtr = arg(next++);
    Value begin = arg(next), end = arg(next + 1);

    int64_t dqk = op.getHeadDimQk(), dv = op.getHeadDimV();
    int64_t hq = op.getHeadsQ(), group = hq / op.getHeadsKv();
    // Tiles live on the stack, allocated once (not per loop iteration).
    qT = tileAlloca({bm, dqk}), kT = tileAlloca({bn, dqk}),
    vT = tileAlloca({bn, dv});
    sT = tileAlloca({bm, bn}), acc = tileAlloca({bm, dv});
    m = tileAlloca({bm}), mNew = tileAlloca({bm}), l = tileAlloca({bm}),
    alpha = tileAlloca({bm});
    Value ninf = arith::ConstantOp::create(
        b, b.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
    Value zeroF = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));

    // Items cover the largest sequence; varlen items past their own
    // sequence's end do nothing.
    Value nMT = ceilDiv(maxSq, bm);
    auto items = scf::ForOp::create(b, begin, end, c(1));
    b.setInsertionPoint(items.getBody()->getTerminator());
    Value item = items.getInductionVar();
    mt = arith::RemSIOp::create(b, item, nMT);
    Value bh = arith::DivSIOp::create(b, item, nMT);
    h = arith::RemSIOp::create(b, bh, c(hq));
    bb = arith::DivSIOp::create(b, bh, c(hq));
    hk = arith::DivSIOp::create(b, h, c(group));
    q0 = mul(mt, c(bm));
    if (varlen) {
      // Sequence bb: query tokens [cu_q[bb], cu_q[bb + 1]), keys alike.
      qStart = loadI32(cuQ, bb);
      kStart = loadI32(cuK, bb);
      sq = sub(loadI32(cuQ, add(bb, c(1))), qStart);
      sk = sub(loadI32(cuK, add(bb, c(1))), kStart);
      auto inSeq = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::slt, q0, sq),
          /*withElseRegion=*/false);
      b.setInsertionPoint(inSeq.thenBlock()->getTerminator());
    } else {
      sq = maxSq;
      sk = maxSk;
    }
    nKT = ceilDiv(sk, bn);
    qRows = arith::MinSIOp::create(b, c(bm), sub(sq, q0));
    Value qOff = add(add(seqBase(qs, qStart), mul(h, qs[1])), mul(q0, qs[2]));
    LoadTileOp::create(b, arg(0), qOff, qRows, qs[2], qs[3], qT,
                       op.getDtypeQAttr());
    FillOp::create(b, zeroF, acc);
    initSoftmaxState(sinkPtr, ninf, zeroF);

    if (blockSparse) {
      // Only the listed tiles: partial ones (still classified, so index
      // masks skip or unmask what they can), then full ones (no mask).
      Value row = add(add(mul(bb, bmBatchStride), mul(h, bmHeadStride)), mt);
      for (bool fullList : {false, true}) {
        Value num = loadI32(lists[fullList ? 2 : 0], row);
        auto loop = scf::ForOp::create(b, c(0), num, c(1));
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(loop.getBody()->getTerminator());
        Value kt = loadI32(lists[fullList ? 3 : 1],
                           add(mul(row, bmCap), loop.getInductionVar()));
        // A tile past this sequence's keys (varlen with a shared layout).
        auto inRange = scf::IfOp::create(
            b, arith::CmpIOp::create(b, arith::CmpIPredicate::slt, kt, nKT),
            /*withElseRegion=*/false);
        b.setInsertionPoint(inRange.thenBlock()->getTerminator());
        emitKvTile(kt, /*knownFull=*/fullList);
      }
    } else {
      auto tiles = scf::ForOp::create(b, c(0), nKT, c(1));
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(tiles.getBody()->getTerminator());
      emitKvTile(tiles.getInductionVar(), /*knownFull=*/false);
    }

    Value oOff = add(add(seqBase(os, qStart), mul(h, os[1])), mul(q0, os[2]));
    StoreTileOp::create(b, acc, l, arg(3), oOff, qRows, os[2], os[3],
                        op.getDtypeOAttr());
    if (op.getReturnLse()) {
      Value lOff = add(add(seqBase(ls, qStart), mul(h, ls[1])), mul(q0, ls[2]));
      StoreLseOp::create(b, m, l, arg(4), lOff, qRows, ls[2]);
    }
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b);
    return fn;
  }

  /// The online softmax's starting row state in m and l: empty (m = -inf,
  /// l = 0), or with an attention sink the sink as the first "key": m =
  /// sink log2 e, l = exp2(0) = 1 (the empty state for a sink of -inf).
  void initSoftmaxState(Value sinkPtr, Value ninf, Value zeroF) {
    if (sinkPtr) {
      // The sink is the first "key": m = sink log2 e, l = exp2(0) = 1, or
      // the empty state (m = -inf, l = 0) for a sink of -inf.
      Type ptrTy = LLVM::LLVMPointerType::get(b.getContext());
      Value at = LLVM::GEPOp::create(b, ptrTy, f32, sinkPtr, ValueRange{h});
      Value sink = LLVM::LoadOp::create(b, f32, at);
      Value none =
          arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, sink, ninf);
      Value oneF = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
      Value log2e = arith::ConstantOp::create(
          b, b.getF32FloatAttr(static_cast<float>(kLog2e)));
      FillOp::create(b, arith::MulFOp::create(b, sink, log2e), m);
      FillOp::create(b, arith::SelectOp::create(b, none, zeroF, oneF), l);
    } else {
      FillOp::create(b, ninf, m);
      FillOp::create(b, zeroF, l);
    }
  }

private:
  AttentionOp op;
  int64_t bm, bn;
  bool count, varlen, blockSparse;
  Type i64, f32;
  unsigned numBuffers = 0, numParams = 0;
  Block::BlockArgListType fnArgs;
  ValueRange qs, ks, vs, os, ls;
  // Block-sparse lists: kv_num_blocks, kv_indices, full_kv_num_blocks,
  // full_kv_indices; row strides and the indices' row capacity.
  Value lists[4], bmBatchStride, bmHeadStride, bmCap;
  // Tiles and row vectors.
  Value qT, kT, vT, sT, acc, m, mNew, l, alpha;
  // The current work item: batch, head, K/V head, q tile, its first query
  // and valid rows, the (per-sequence) seqlens and key tile count, and
  // (varlen) the first token of the sequence in the packed tensors.
  Value bb, h, hk, mt, q0, qRows, sq, sk, nKT, qStart, kStart;

  Value arg(unsigned i) { return fnArgs[i]; }
  Value tileAlloca(ArrayRef<int64_t> shape) {
    return memref::AllocaOp::create(b, MemRefType::get(shape, f32),
                                    ValueRange{}, ValueRange{},
                                    b.getI64IntegerAttr(64));
  }
  /// Element \p i of the i32 array at \p base, sign-extended to i64.
  Value loadI32(Value base, Value i) {
    Type ptr = LLVM::LLVMPointerType::get(b.getContext());
    Value p = LLVM::GEPOp::create(b, ptr, b.getI32Type(), base, ValueRange{i});
    return arith::ExtSIOp::create(b, i64,
                                  LLVM::LoadOp::create(b, b.getI32Type(), p));
  }
  /// The offset of the current sequence in a tensor with \p st strides:
  /// batch * st[0], or (varlen) its first token * st[2].
  Value seqBase(ValueRange st, Value start) {
    return varlen ? mul(start, st[2]) : mul(bb, st[0]);
  }

  /// One K/V tile of the current work item: classify (unless the block
  /// mask says it is full), skip if empty, else S = Q K^T, mask, score
  /// modifier (emitMaskedScores, shared with attn-tile-backward) and the
  /// online-softmax update.
  void emitKvTile(Value kt, bool knownFull) {
    Value kv0 = mul(kt, c(bn));
    Value kvRows = arith::MinSIOp::create(b, c(bn), sub(sk, kv0));
    Value full, empty;
    if (knownFull) {
      full = arith::ConstantOp::create(b, b.getBoolAttr(true));
      empty = arith::ConstantOp::create(b, b.getBoolAttr(false));
    } else {
      // Run-time tile classification (interval arithmetic over the mask).
      TileBoxValues box{bb,  h,
                        q0,  sub(add(q0, qRows), c(1)),
                        kv0, sub(add(kv0, kvRows), c(1)),
                        sq,  sk};
      TileClassValues cls = buildTileClassifier(
          b, b.getLoc(), op.getMask(), box,
          [&](Operation *p) { return paramArg(cast<ParamOp>(p).getName()); });
      full = notV(cls.canBeFalse);
      empty = arith::AndIOp::create(b, cls.canBeFalse, notV(cls.canBeTrue));
    }
    if (count)
      countTile(arg(6), full, empty);

    OpBuilder::InsertionGuard guard(b);
    auto live = scf::IfOp::create(b, notV(empty), /*withElseRegion=*/false);
    b.setInsertionPoint(live.thenBlock()->getTerminator());
    Value kOff = add(add(seqBase(ks, kStart), mul(hk, ks[1])), mul(kv0, ks[2]));
    Value vOff = add(add(seqBase(vs, kStart), mul(hk, vs[1])), mul(kv0, vs[2]));
    LoadTileOp::create(b, arg(1), kOff, kvRows, ks[2], ks[3], kT,
                       op.getDtypeKAttr());
    LoadTileOp::create(b, arg(2), vOff, kvRows, vs[2], vs[3], vT,
                       op.getDtypeVAttr());

    emitMaskedScores(b, op, {qT, kT, sT, Value()},
                     {q0, kv0, qRows, kvRows, bb, h, sq, sk}, full, knownFull,
                     [&](Region &from, Region &to) { cloneRegion(from, to); });
    // Online softmax in the exp2 domain.
    RowMaxOp::create(b, sT, m, mNew);
    Exp2Op::create(b, sT, mNew, sT);
    Exp2Op::create(b, m, mNew, alpha);
    RescaleOp::create(b, l, alpha);
    RowSumOp::create(b, sT, l);
    RescaleOp::create(b, acc, alpha);
    // O += P V. In a partial tile P is 0 at masked keys, and a NaN or Inf
    // in V there must not reach the row (0 * inf would be NaN):
    // skip_zero_lhs. A full tile has no masked key (keys past seqlen_k
    // load as 0), so it keeps the unguarded product, which LLVM keeps in
    // registers across keys (the guard costs ~25% of a dense tile).
    auto pv = [&](bool skipZero) {
      DotOp::create(b, sT, vT, acc, /*transpose_rhs=*/UnitAttr(),
                    /*accumulate=*/b.getUnitAttr(), b.getF32FloatAttr(1.0f),
                    /*transpose_lhs=*/UnitAttr(),
                    skipZero ? b.getUnitAttr() : UnitAttr());
    };
    if (knownFull) {
      pv(false);
    } else {
      auto isFull = scf::IfOp::create(b, full, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(isFull.thenBlock()->getTerminator());
      pv(false);
      b.setInsertionPoint(isFull.elseBlock()->getTerminator());
      pv(true);
    }
    memref::CopyOp::create(b, mNew, m);
  }

  /// The kernel argument of parameter \p name.
  Value paramArg(StringRef name) {
    unsigned i = 0;
    for (NamedAttribute p : op.getParams()) {
      if (p.getName() == name)
        return arg(7 + 2 * numBuffers + i);
      ++i;
    }
    return Value();
  }

  /// counters[full ? 2 : empty ? 0 : 1] += 1 (atomically: items run in
  /// parallel).
  void countTile(Value counters, Value full, Value empty) {
    Value slot = arith::SelectOp::create(
        b, full, c(2), arith::SelectOp::create(b, empty, c(0), c(1)));
    Type ptr = LLVM::LLVMPointerType::get(b.getContext());
    Value p = LLVM::GEPOp::create(b, ptr, i64, counters, ValueRange{slot});
    LLVM::AtomicRMWOp::create(b, LLVM::AtomicBinOp::add, p, c(1),
                              LLVM::AtomicOrdering::monotonic);
  }

  /// Clones \p from into the empty region \p to (KernelRegions.h).
  void cloneRegion(Region &from, Region &to) {
    cloneKernelRegion(op, from, to,
                      {[&](StringRef name) { return paramArg(name); },
                       [&](unsigned slot) {
                         return std::pair{arg(7 + 2 * slot), arg(8 + 2 * slot)};
                       },
                       arg(5)});
  }
};

struct AttnTilePass : public flashjit::attn::impl::AttnTileBase<AttnTilePass> {
  using AttnTileBase::AttnTileBase;

  void runOnOperation() override {
    if (blockM < 1 || blockN < 1) {
      getOperation().emitError() << "attn-tile: block-m and block-n must be "
                                    "positive";
      return signalPassFailure();
    }
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops) {
      KernelEmitter(op, blockM, blockN, countTiles, varlen, blockSparse).emit();
      op.erase();
    }
  }
};

} // namespace
