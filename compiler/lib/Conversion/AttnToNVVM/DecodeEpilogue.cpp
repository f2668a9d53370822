//===- DecodeEpilogue.cpp - The decode kernel's outputs -------------------===//
//
// DecodeKernelBuilder's epilogue: with one split the CTA's own state merged
// and written as O and LSE; with several the partial rows, then (fused) the
// last CTA of the group merges them, or the merge kernel does.
//
//===----------------------------------------------------------------------===//
#include "DecodeKernelBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace flashjit::nvvm::detail {

namespace abi = flashjit::abi::gpu;

namespace {
constexpr float kLog2e = 1.4426950408889634f;
} // namespace

void DecodeKernelBuilder::epilogue(ValueRange fin) {
  Value rowsTotal = ops.mul(ops.mul(ops.ext64(batchCount), ops.ext64(headsQ)),
                            ops.ext64(qLen));
  SmallVector<SoftmaxFinal, 2> f;
  SmallVector<Value, 2> lse;
  for (int r = 0; r < 2; ++r) {
    f.push_back(softmaxFinish(ops, fin[nAcc + 2 + r]));
    lse.push_back(logSumExp(ops, fin[nAcc + r], f.back()));
  }
  ifElse(
      b, ops.cmp(arith::CmpIPredicate::eq, numSplits, ops.ci32(1)),
      [&] { storeFinal(fin, f, lse); },
      [&] {
        storePartials(fin, f, lse, rowsTotal);
        emitLastBlockMerge(ops, splitMerge(rowsTotal));
      });
}

void DecodeKernelBuilder::storeFinal(ValueRange fin, ArrayRef<SoftmaxFinal> f,
                                     ArrayRef<Value> lse) {
  for (int r = 0; r < 2; ++r) {
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, rowIdx[r], rows));
    Value h = r == 0 ? at.head0[0] : at.head1[0];
    Value qi = r == 0 ? at.qRow0[0] : at.qRow1[0];
    // The merge of one split (DecodeMerge.h), the sink included.
    Value l2 = ops.fmul(lse[r], ops.cf32(kLog2e));
    Value m = l2;
    SinkLog2 sink;
    if (c.sink) {
      sink = loadSinkLog2(ops, out.sink, h);
      m = ops.fmax(m, sink.value);
    }
    Value mUse = mergeUse(ops, m), live;
    Value w = splitWeight(ops, l2, mUse, live);
    Value sum = c.sink ? ops.fadd(sinkTerm(ops, sink, mUse), w) : w;
    MergedRow row = finishRow(ops, mUse, sum);
    auto final = [&](Value acc) {
      Value x = ops.fmul(acc, f[r].inv); // the partial O
      return ops.fmul(ops.sel(live, ops.fmul(w, x), ops.cf32(0.0f)), row.inv);
    };
    for (int jd = 0; jd < sh.oTiles(); ++jd) {
      int a0 = jd * 4 + 2 * r;
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      storeOutputPair(ops, out, batch, h, qi, col, final(fin[a0]),
                      final(fin[a0 + 1]));
    }
    ops.enterIf(ops.cmp(arith::CmpIPredicate::eq, t, ops.ci32(0)));
    storeOutputLse(ops, out, batch, h, qi, row.lse);
  }
}

void DecodeKernelBuilder::storePartials(ValueRange fin,
                                        ArrayRef<SoftmaxFinal> f,
                                        ArrayRef<Value> lse, Value rowsTotal) {
  const int nO = sh.oTiles(), Dv = c.headDimV;
  for (int r = 0; r < 2; ++r) {
    OpBuilder::InsertionGuard rg(b);
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, rowIdx[r], rows));
    Value h = r == 0 ? at.head0[0] : at.head1[0];
    Value qi = r == 0 ? at.qRow0[0] : at.qRow1[0];
    // Partial row (split, batch, head, query), contiguous.
    Value part = ops.add(
        ops.mul(ops.ext64(split), rowsTotal),
        ops.add(ops.mul(ops.add(ops.mul(ops.ext64(batch), ops.ext64(headsQ)),
                                ops.ext64(h)),
                        ops.ext64(qLen)),
                ops.ext64(qi)));
    Value rowBase = ops.gepBytes(oPart, ops.mul(part, ops.ci64(4 * Dv)));
    for (int jd = 0; jd < nO; ++jd) {
      int a0 = jd * 4 + 2 * r;
      Value col = ops.add(ops.mul(t, ops.ci32(2)), ops.ci32(jd * 8));
      Value p = ops.gepBytes(rowBase, ops.ext64(ops.mul(col, ops.ci32(4))));
      LLVM::StoreOp::create(b, ops.fmul(fin[a0], f[r].inv), p,
                            /*alignment=*/4);
      LLVM::StoreOp::create(b, ops.fmul(fin[a0 + 1], f[r].inv),
                            ops.gepBytes(p, int64_t(4)), /*alignment=*/4);
    }
    ops.enterIf(ops.cmp(arith::CmpIPredicate::eq, t, ops.ci32(0)));
    LLVM::StoreOp::create(b, lse[r],
                          ops.gepBytes(lsePart, ops.mul(part, ops.ci64(4))),
                          /*alignment=*/4);
  }
}

SplitMerge DecodeKernelBuilder::splitMerge(Value rowsTotal) {
  SplitMerge m;
  m.out = out;
  m.tid = tid;
  m.nthreads = nthreads;
  m.headDimV = c.headDimV;
  m.oPart = oPart;
  m.lsePart = lsePart;
  m.counters = counters;
  m.numSplits = numSplits;
  // Group (batch, kv head, row tile): the CTAs of its splits share it.
  Value headsKV = NVVM::GridDimYOp::create(b, ops.i32);
  m.group = ops.add(ops.mul(ops.add(ops.mul(batch, headsKV), headKV), rowTiles),
                    rowTile);
  m.rowsTotal = rowsTotal;
  m.head0 = ops.mul(headKV, group);
  m.rowBase = ops.mul(
      ops.add(ops.mul(ops.ext64(batch), ops.ext64(headsQ)), ops.ext64(m.head0)),
      ops.ext64(qLen));
  m.r0 = r0;
  m.rows = ops.add(ops.sub(rLast, r0), ops.ci32(1));
  m.batch = batch;
  m.qLen = qLen;
  m.scratch = sK; // the K/V stages are free after the main loop
  return m;
}

} // namespace flashjit::nvvm::detail
