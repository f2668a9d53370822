//===- DecodeMergeKernel.cpp - The split-KV decode's merge kernel ---------===//
//
// See DecodeMergeKernel.h.
//
//===----------------------------------------------------------------------===//
#include "DecodeMergeKernel.h"

#include "KernelOps.h"
#include "MaskedValues.h"
#include "MmaStrategy.h"
#include "OnlineSoftmax.h"
#include "SharedTile.h"
#include "VariantTile.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>
using namespace mlir;

namespace flashjit::nvvm::detail {

namespace abi = flashjit::abi::gpu;

static constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static constexpr float kLog2e = 1.4426950408889634f;

/// The merge kernel: one CTA per (query, head_q, batch) row.
void buildDecodeMergeKernel(ImplicitLocOpBuilder &b, Operation *gpuModule,
                            const KernelShape &c) {
  KernelOps ops(b, c.bf16);
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToEnd(&region.front());
  // The gpu.module's terminator, if any, stays last.
  if (!region.front().empty() &&
      region.front().back().hasTrait<OpTrait::IsTerminator>())
    b.setInsertionPoint(&region.front().back());
  SmallVector<Type> args = abiTypes(ops, abi::mergeArgTypes(c.sink));
  auto fn = gpu::GPUFuncOp::create(b, c.name + abi::kDecodeMergeSuffix,
                                   b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({abi::kMergeThreads, 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  ValueRange a = fn.getArguments();
  Value oPart = a[abi::kMrgOPart], lsePart = a[abi::kMrgLsePart];
  Value o = a[abi::kMrgO], lse = a[abi::kMrgLse];
  Value oS[3], lS[3];
  for (int i = 0; i < 3; ++i) {
    oS[i] = a[abi::kMrgOStrides + i];
    lS[i] = a[abi::kMrgLseStrides + i];
  }
  Value numSplits = a[abi::kMrgNumSplits];
  const int Dv = c.headDimV;

  Value tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  Value qi = NVVM::BlockIdXOp::create(b, ops.i32);
  Value h = NVVM::BlockIdYOp::create(b, ops.i32);
  Value bt = NVVM::BlockIdZOp::create(b, ops.i32);
  Value qLen = NVVM::GridDimXOp::create(b, ops.i32);
  Value heads = NVVM::GridDimYOp::create(b, ops.i32);
  Value batches = NVVM::GridDimZOp::create(b, ops.i32);
  Value row = ops.add(
      ops.mul(ops.add(ops.mul(ops.ext64(bt), ops.ext64(heads)), ops.ext64(h)),
              ops.ext64(qLen)),
      ops.ext64(qi));
  Value rowsTotal =
      ops.mul(ops.mul(ops.ext64(batches), ops.ext64(heads)), ops.ext64(qLen));
  Value zero = ops.cf32(0.0f), minusInf = ops.cf32(kNegInf);
  Value c0 = arith::ConstantIndexOp::create(b, 0);
  Value c1 = arith::ConstantIndexOp::create(b, 1);
  Value ns = ops.toIndex(numSplits);
  auto lseOf = [&](Value s) { // log2 units; -inf for an empty split
    Value i = ops.add(ops.mul(ops.ext64(s), rowsTotal), row);
    Value p = ops.gepBytes(lsePart, ops.mul(i, ops.ci64(4)));
    return ops.fmul(LLVM::LoadOp::create(b, ops.f32, p, 4).getResult(),
                    ops.cf32(kLog2e));
  };
  // Pass 1: the largest partial LSE.
  auto maxLoop = scf::ForOp::create(b, c0, ns, c1, ValueRange{minusInf});
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(maxLoop.getBody());
    Value s = arith::IndexCastOp::create(b, ops.i32, maxLoop.getInductionVar());
    scf::YieldOp::create(
        b, ValueRange{ops.fmax(maxLoop.getRegionIterArgs()[0], lseOf(s))});
  }
  Value m = maxLoop.getResult(0);
  // The attention sink of this head (log2 units) joins the maximum and the
  // sum once, here; a sink of -inf adds nothing.
  Value sinkLog2, sinkLive;
  if (c.sink) {
    Value at =
        ops.gepBytes(a[abi::kMrgSink], ops.mul(ops.ext64(h), ops.ci64(4)));
    sinkLog2 = ops.fmul(LLVM::LoadOp::create(b, ops.f32, at, 4).getResult(),
                        ops.cf32(kLog2e));
    sinkLive =
        arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, sinkLog2, minusInf);
    m = ops.fmax(m, sinkLog2);
  }
  Value mUse = ops.sel(ops.feq(m, minusInf), zero, m);
  Value sum0 = zero;
  if (c.sink)
    sum0 = ops.sel(sinkLive, ops.exp2(ops.fsub(sinkLog2, mUse)), zero);
  // Pass 2: weights exp2(lse_s - m) (0 for empty splits, whose O is not
  // used) and this thread's two columns.
  const int pairs = Dv / 2;
  Value col = ops.mul(tid, ops.ci32(2));
  Value active = ops.cmp(arith::CmpIPredicate::slt, tid, ops.ci32(pairs));
  Value colc = ops.sel(active, col, ops.ci32(0));
  auto sumLoop =
      scf::ForOp::create(b, c0, ns, c1, ValueRange{sum0, zero, zero});
  {
    OpBuilder::InsertionGuard lg(b);
    b.setInsertionPointToStart(sumLoop.getBody());
    Value s = arith::IndexCastOp::create(b, ops.i32, sumLoop.getInductionVar());
    Value l = lseOf(s);
    // UNE: a split whose LSE is NaN (a row that attends a NaN) is live,
    // so the NaN reaches the row (ONE read it as empty: with one split
    // the row came out O = 0, LSE = -inf).
    Value live =
        arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, l, minusInf);
    Value w = ops.sel(live, ops.exp2(ops.fsub(l, mUse)), zero);
    Value i = ops.add(ops.mul(ops.ext64(s), rowsTotal), row);
    Value p = ops.gepBytes(
        oPart, ops.mul(ops.add(ops.mul(i, ops.ci64(Dv)), ops.ext64(colc)),
                       ops.ci64(4)));
    Value x0 = LLVM::LoadOp::create(b, ops.f32, p, 4).getResult();
    Value x1 = LLVM::LoadOp::create(b, ops.f32, ops.gepBytes(p, int64_t(4)), 4)
                   .getResult();
    ValueRange acc = sumLoop.getRegionIterArgs();
    scf::YieldOp::create(
        b, ValueRange{ops.fadd(acc[0], w),
                      ops.fadd(acc[1], ops.sel(live, ops.fmul(w, x0), zero)),
                      ops.fadd(acc[2], ops.sel(live, ops.fmul(w, x1), zero))});
  }
  Value sum = sumLoop.getResult(0);
  Value empty = ops.feq(sum, zero);
  Value inv =
      ops.sel(empty, zero, arith::DivFOp::create(b, ops.cf32(1.0f), sum));
  ops.ifThen(active, [&] {
    Value off = ops.add(
        ops.add(ops.mul(ops.ext64(bt), oS[0]), ops.mul(ops.ext64(h), oS[1])),
        ops.add(ops.mul(ops.ext64(qi), oS[2]), ops.ext64(col)));
    Value v = ops.pack(ops.fmul(sumLoop.getResult(1), inv),
                       ops.fmul(sumLoop.getResult(2), inv));
    LLVM::StoreOp::create(b, v, ops.gepBytes(o, ops.mul(off, ops.ci64(2))),
                          /*alignment=*/4);
  });
  if (c.returnLse)
    ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)), [&] {
      const float ln2 = 0.6931471805599453f;
      Value log2l = math::Log2Op::create(b, sum);
      Value v = ops.sel(empty, minusInf,
                        ops.fmul(ops.fadd(mUse, log2l), ops.cf32(ln2)));
      Value off = ops.add(
          ops.add(ops.mul(ops.ext64(bt), lS[0]), ops.mul(ops.ext64(h), lS[1])),
          ops.mul(ops.ext64(qi), lS[2]));
      LLVM::StoreOp::create(b, v, ops.gepBytes(lse, ops.mul(off, ops.ci64(4))),
                            /*alignment=*/4);
    });
  gpu::ReturnOp::create(b);
}

} // namespace flashjit::nvvm::detail
