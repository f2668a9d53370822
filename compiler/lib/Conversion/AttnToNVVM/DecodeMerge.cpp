//===- DecodeMerge.cpp - The decode kernel's exact LSE merge --------------===//
//
// Pre: inside the decode kernel's gpu.func, after its main loop (the K/V
// stages free). Post: O and LSE of the CTA's rows written (one split), or
// the partial states counted and, by the group's last CTA, merged.
//
// The last-block pattern (CUDA's threadFenceReduction sample; cooperative
// groups' grid sync uses the same fences): every thread writes its partial
// rows; a barrier; thread 0 runs a release fence (fence.acq_rel.gpu,
// cumulative over the CTA's writes it observed through the barrier), adds 1
// to the group's counter, and the CTA that read num_splits - 1 runs an
// acquire fence and resets the counter; a barrier reduction (bar.red.or)
// tells the CTA.
// The merge then reads the partials written by the group's other CTAs.
//
//===----------------------------------------------------------------------===//
#include "DecodeMerge.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace flashjit::nvvm {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
/// Splits whose partial rows one merge step loads at once.
constexpr int kMergeUnroll = 8;

Value notNull(KernelOps &ops, Value ptr) {
  Value bits = LLVM::PtrToIntOp::create(ops.b, ops.i64, ptr);
  return ops.cmp(arith::CmpIPredicate::ne, bits, ops.ci64(0));
}

/// Butterfly max or sum of \p v over aligned groups of \p lanes (a power of
/// two, at most 32) adjacent lanes; every lane of the warp takes part.
Value groupReduce(KernelOps &ops, Value v, Value lanes, bool max) {
  for (int off = 16; off >= 1; off /= 2) {
    Value other = ops.shflXor(v, off);
    Value r = max ? ops.fmax(v, other) : ops.fadd(v, other);
    v = ops.sel(ops.cmp(arith::CmpIPredicate::ult, ops.ci32(off), lanes), r, v);
  }
  return v;
}

/// \p step(s, acc) folded over s = first, first + stride, ... < end.
Value foldSplits(KernelOps &ops, Value first, Value end, Value stride,
                 Value init, llvm::function_ref<Value(Value, Value)> step) {
  ImplicitLocOpBuilder &b = ops.b;
  auto loop = scf::ForOp::create(b, ops.toIndex(first), ops.toIndex(end),
                                 ops.toIndex(stride), ValueRange{init});
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value s = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  scf::YieldOp::create(b, ValueRange{step(s, loop.getRegionIterArgs()[0])});
  return loop.getResult(0);
}

class LastBlockMerge {
public:
  LastBlockMerge(KernelOps &ops, const SplitMerge &m)
      : ops(ops), b(ops.b), m(m) {}
  void emit();

private:
  Value arrive();
  void rowTotals();
  void mergeColumns();
  /// The partial LSE (log2 units) of split \p s, partial row \p prow.
  Value lseLog2(Value s, Value prow) {
    Value i = ops.add(ops.mul(ops.ext64(s), m.rowsTotal), prow);
    Value p = ops.gepBytes(m.lsePart, ops.mul(i, ops.ci64(4)));
    return ops.fmul(LLVM::LoadOp::create(b, ops.f32, p, 4).getResult(),
                    ops.cf32(kLog2e));
  }
  /// The query head and index of packed row \p pr.
  std::pair<Value, Value> headAndQuery(Value pr) {
    return {ops.add(m.head0, arith::DivUIOp::create(b, pr, m.qLen)),
            arith::RemUIOp::create(b, pr, m.qLen)};
  }

  KernelOps &ops;
  ImplicitLocOpBuilder &b;
  const SplitMerge &m;
};

void LastBlockMerge::emit() {
  Value last = arrive();
  OpBuilder::InsertionGuard g(b);
  ops.enterIf(ops.cmp(arith::CmpIPredicate::ne, last, ops.ci32(0)));
  rowTotals();
  gpu::BarrierOp::create(b); // the rows' totals are in shared memory
  mergeColumns();
}

Value LastBlockMerge::arrive() {
  gpu::BarrierOp::create(b); // every partial row of the CTA is written
  Value counter =
      ops.gepBytes(m.counters, ops.mul(ops.ext64(m.group), ops.ci64(4)));
  Value isLast = ops.guarded(
      ops.cmp(arith::CmpIPredicate::eq, m.tid, ops.ci32(0)), ops.i32,
      ops.ci32(0), [&] {
        // Release the CTA's partials, count this CTA; the last one
        // acquires the others' partials and leaves the counter at 0.
        return ops
            .inlineAsm(ops.i32,
                       ValueRange{counter, ops.sub(m.numSplits, ops.ci32(1))},
                       "{ .reg .pred p; .reg .u32 old;\n"
                       "fence.acq_rel.gpu;\n"
                       "atom.add.relaxed.gpu.global.u32 old, [$1], 1;\n"
                       "setp.eq.u32 p, old, $2;\n"
                       "@p fence.acq_rel.gpu;\n"
                       "@p st.relaxed.gpu.global.u32 [$1], 0;\n"
                       "selp.u32 $0, 1, 0, p; }",
                       "=r,l,r,~{memory}")
            .getResult(0);
      });
  // The barrier's OR of thread 0's answer, to every thread.
  return NVVM::BarrierOp::create(
             b, TypeRange{ops.i32}, Value(), Value(),
             NVVM::BarrierReductionAttr::get(b.getContext(),
                                             NVVM::BarrierReduction::OR),
             isLast)
      .getResult(0);
}

void LastBlockMerge::rowTotals() {
  // L lanes per row (L = min(32, threads / R'), R' the rows rounded up to
  // a power of two): lane k of a row reads splits k, k + L, ...; the
  // row's maximum and sum are butterfly reductions over its L lanes.
  Value one = ops.ci32(1);
  Value rowsPow = ops.sel(
      ops.cmp(arith::CmpIPredicate::ule, m.rows, one), one,
      arith::ShLIOp::create(
          b, one,
          ops.sub(ops.ci32(32),
                  math::CountLeadingZerosOp::create(b, ops.sub(m.rows, one)))));
  Value lanes = arith::MinUIOp::create(
      b, ops.ci32(32),
      arith::DivUIOp::create(b, ops.ci32(m.nthreads), rowsPow));
  Value row = arith::DivUIOp::create(b, m.tid, lanes);
  Value sub = arith::RemUIOp::create(b, m.tid, lanes);
  Value active = ops.cmp(arith::CmpIPredicate::ult, row, m.rows);
  Value pr = ops.add(m.r0, ops.sel(active, row, ops.ci32(0)));
  Value prow = ops.add(m.rowBase, ops.ext64(pr));
  Value end = ops.sel(active, m.numSplits, ops.ci32(0));
  Value mx = foldSplits(
      ops, sub, end, lanes, ops.cf32(kNegInf),
      [&](Value s, Value acc) { return ops.fmax(acc, lseLog2(s, prow)); });
  mx = groupReduce(ops, mx, lanes, /*max=*/true);
  auto [head, query] = headAndQuery(pr);
  SinkLog2 sink;
  if (m.out.sink) {
    sink = loadSinkLog2(ops, m.out.sink, head);
    mx = ops.fmax(mx, sink.value);
  }
  Value mUse = mergeUse(ops, mx);
  Value sum =
      foldSplits(ops, sub, end, lanes, ops.cf32(0.0f), [&](Value s, Value acc) {
        Value live;
        return ops.fadd(acc, splitWeight(ops, lseLog2(s, prow), mUse, live));
      });
  sum = groupReduce(ops, sum, lanes, /*max=*/false);
  if (m.out.sink)
    sum = ops.fadd(sinkTerm(ops, sink, mUse), sum);
  MergedRow r = finishRow(ops, mUse, sum);
  ops.ifThen(
      ops.land(active, ops.cmp(arith::CmpIPredicate::eq, sub, ops.ci32(0))),
      [&] {
        Value at =
            ops.gepBytes(m.scratch, ops.ext64(ops.mul(row, ops.ci32(8))));
        LLVM::StoreOp::create(b, mUse, at, 8);
        LLVM::StoreOp::create(b, r.inv, ops.gepBytes(at, int64_t(4)), 4);
        storeOutputLse(ops, m.out, m.batch, head, query, r.lse);
      });
}

void LastBlockMerge::mergeColumns() {
  // Items (row, 4 columns) over the threads; per item the splits in steps
  // of kMergeUnroll (their loads issued together; indices past the last
  // split read the last one and weigh 0), summed in split order.
  const int quads = m.headDimV / 4;
  Value items = ops.mul(m.rows, ops.ci32(quads));
  auto loop = scf::ForOp::create(b, ops.toIndex(m.tid), ops.toIndex(items),
                                 ops.toIndex(ops.ci32(m.nthreads)));
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  Value item = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
  Value row = arith::DivUIOp::create(b, item, ops.ci32(quads));
  Value col =
      ops.mul(arith::RemUIOp::create(b, item, ops.ci32(quads)), ops.ci32(4));
  Value at = ops.gepBytes(m.scratch, ops.ext64(ops.mul(row, ops.ci32(8))));
  Value mUse = LLVM::LoadOp::create(b, ops.f32, at, 8).getResult();
  Value inv = LLVM::LoadOp::create(b, ops.f32, ops.gepBytes(at, int64_t(4)), 4)
                  .getResult();
  Value pr = ops.add(m.r0, row);
  Value prow = ops.add(m.rowBase, ops.ext64(pr));
  Value lastSplit = ops.sub(m.numSplits, ops.ci32(1));
  Type v4 = VectorType::get({4}, ops.f32);
  SmallVector<Value> zeros(4, ops.cf32(0.0f));
  auto steps =
      scf::ForOp::create(b, ops.toIndex(ops.ci32(0)), ops.toIndex(m.numSplits),
                         ops.toIndex(ops.ci32(kMergeUnroll)), zeros);
  {
    OpBuilder::InsertionGuard sg(b);
    b.setInsertionPointToStart(steps.getBody());
    Value s0 = arith::IndexCastOp::create(b, ops.i32, steps.getInductionVar());
    SmallVector<Value> valid, lse, x;
    for (int u = 0; u < kMergeUnroll; ++u) {
      Value s = ops.add(s0, ops.ci32(u));
      valid.push_back(ops.cmp(arith::CmpIPredicate::slt, s, m.numSplits));
      Value sc = arith::MinSIOp::create(b, s, lastSplit);
      lse.push_back(lseLog2(sc, prow));
      Value i = ops.add(ops.mul(ops.ext64(sc), m.rowsTotal), prow);
      Value p = ops.gepBytes(
          m.oPart,
          ops.mul(ops.add(ops.mul(i, ops.ci64(m.headDimV)), ops.ext64(col)),
                  ops.ci64(4)));
      x.push_back(LLVM::LoadOp::create(b, v4, p, 16).getResult());
    }
    SmallVector<Value> acc(steps.getRegionIterArgs());
    for (int u = 0; u < kMergeUnroll; ++u) {
      Value live;
      Value w = splitWeight(ops, lse[u], mUse, live);
      live = ops.land(live, valid[u]);
      for (int k = 0; k < 4; ++k) {
        Value xk = LLVM::ExtractElementOp::create(b, x[u], ops.ci32(k));
        acc[k] = ops.fadd(acc[k], ops.sel(live, ops.fmul(w, xk), zeros[k]));
      }
    }
    scf::YieldOp::create(b, acc);
  }
  auto [head, query] = headAndQuery(pr);
  for (int k = 0; k < 4; k += 2)
    storeOutputPair(ops, m.out, m.batch, head, query, ops.add(col, ops.ci32(k)),
                    ops.fmul(steps.getResult(k), inv),
                    ops.fmul(steps.getResult(k + 1), inv));
}

} // namespace

SinkLog2 loadSinkLog2(KernelOps &ops, Value sink, Value head) {
  Value at = ops.gepBytes(sink, ops.mul(ops.ext64(head), ops.ci64(4)));
  SinkLog2 s;
  s.value = ops.fmul(LLVM::LoadOp::create(ops.b, ops.f32, at, 4).getResult(),
                     ops.cf32(kLog2e));
  s.live = arith::CmpFOp::create(ops.b, arith::CmpFPredicate::ONE, s.value,
                                 ops.cf32(kNegInf));
  return s;
}

Value mergeUse(KernelOps &ops, Value m) {
  return ops.sel(ops.feq(m, ops.cf32(kNegInf)), ops.cf32(0.0f), m);
}

Value splitWeight(KernelOps &ops, Value lseLog2, Value mUse, Value &live) {
  // UNE: a split whose LSE is NaN (a row that attends a NaN) is live, so
  // the NaN reaches the row (ONE read it as empty: with one split the row
  // came out O = 0, LSE = -inf).
  live = arith::CmpFOp::create(ops.b, arith::CmpFPredicate::UNE, lseLog2,
                               ops.cf32(kNegInf));
  return ops.sel(live, ops.exp2(ops.fsub(lseLog2, mUse)), ops.cf32(0.0f));
}

Value sinkTerm(KernelOps &ops, const SinkLog2 &sink, Value mUse) {
  return ops.sel(sink.live, ops.exp2(ops.fsub(sink.value, mUse)),
                 ops.cf32(0.0f));
}

MergedRow finishRow(KernelOps &ops, Value mUse, Value sum) {
  Value zero = ops.cf32(0.0f);
  Value empty = ops.feq(sum, zero);
  MergedRow r;
  r.mUse = mUse;
  r.inv =
      ops.sel(empty, zero, arith::DivFOp::create(ops.b, ops.cf32(1.0f), sum));
  Value log2l = math::Log2Op::create(ops.b, sum);
  r.lse = ops.sel(empty, ops.cf32(kNegInf),
                  ops.fmul(ops.fadd(mUse, log2l), ops.cf32(kLn2)));
  return r;
}

void storeOutputPair(KernelOps &ops, const DecodeOutputs &out, Value batch,
                     Value head, Value query, Value col, Value x0, Value x1) {
  Value off =
      ops.add(ops.add(ops.mul(ops.ext64(batch), out.oS[0]),
                      ops.mul(ops.ext64(head), out.oS[1])),
              ops.add(ops.mul(ops.ext64(query), out.oS[2]), ops.ext64(col)));
  LLVM::StoreOp::create(ops.b, ops.pack(x0, x1),
                        ops.gepBytes(out.o, ops.mul(off, ops.ci64(2))),
                        /*alignment=*/4);
}

void storeOutputLse(KernelOps &ops, const DecodeOutputs &out, Value batch,
                    Value head, Value query, Value v) {
  if (!out.returnLse)
    return;
  ops.ifThen(notNull(ops, out.lse), [&] {
    Value off = ops.add(ops.add(ops.mul(ops.ext64(batch), out.lS[0]),
                                ops.mul(ops.ext64(head), out.lS[1])),
                        ops.mul(ops.ext64(query), out.lS[2]));
    LLVM::StoreOp::create(ops.b, v,
                          ops.gepBytes(out.lse, ops.mul(off, ops.ci64(4))),
                          /*alignment=*/4);
  });
}

void emitGridDependency(KernelOps &ops, const KernelConfig &c,
                        GridDependency what) {
  if (c.arch != "sm_90a")
    return;
  ops.inlineAsm(Type(), ValueRange{},
                what == GridDependency::Wait
                    ? "griddepcontrol.wait;"
                    : "griddepcontrol.launch_dependents;",
                "~{memory}");
}

void emitLastBlockMerge(KernelOps &ops, const SplitMerge &m) {
  // Null counters: the separate merge kernel merges (the condition is the
  // same for the whole CTA, so the barriers inside are reached by all).
  ops.ifThen(notNull(ops, m.counters), [&] { LastBlockMerge(ops, m).emit(); });
}

} // namespace flashjit::nvvm
