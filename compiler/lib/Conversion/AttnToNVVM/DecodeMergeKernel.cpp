//===- DecodeMergeKernel.cpp - The split-KV decode's merge kernel ---------===//
//
// See DecodeMergeKernel.h.
//
//===----------------------------------------------------------------------===//
#include "DecodeMergeKernel.h"

#include "DecodeMerge.h"
#include "flashjit/compiler/DecodeMergeTesting.h"
#include "flashjit/runtime/DecodeMergeAbi.h"

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

#include <atomic>
#include <limits>
using namespace mlir;

namespace flashjit::nvvm::detail {

namespace abi = flashjit::abi::gpu;

static constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static constexpr float kLog2e = 1.4426950408889634f;

/// The serial merge (sessions 16-18, setDecodeSerialMergeForTesting): the
/// CTA's threads take two columns each and walk all splits in order, twice
/// (the maximum, then the weighted sums).
static void buildSerialMerge(ImplicitLocOpBuilder &b, KernelOps &ops,
                             gpu::GPUFuncOp fn, const KernelShape &c) {
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
  // The split kernel's partial states are complete and visible past here.
  emitGridDependency(ops, c, GridDependency::Wait);
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

namespace {

/// The parallel merge's work split at head_dim_v \p dv: each of `groups`
/// groups of `quads` (dv / 4) adjacent threads owns one 16-byte column
/// quad per thread and takes the splits g, g + groups, ... (kUnroll of
/// them per step, their loads issued together).
struct MergeSplit {
  static constexpr int kUnroll = 8;
  int quads, groups;
  explicit MergeSplit(int dv)
      : quads(dv / 4), groups(abi::kMergeThreads / (dv / 4)) {}
  /// Shared memory: the groups' column sums [groups][dv] f32, their weight
  /// sums [groups], the warps' maxima [warps] (bytes, offsets).
  int sumsAt(int dv) const { return groups * dv * 4; }
  int maxAt(int dv) const { return sumsAt(dv) + groups * 4; }
  int bytes(int dv) const { return maxAt(dv) + abi::kMergeThreads / 32 * 4; }
};

class ParallelMerge {
public:
  ParallelMerge(ImplicitLocOpBuilder &b, KernelOps &ops, gpu::GPUFuncOp fn,
                const KernelShape &c, Value smem)
      : b(b), ops(ops), c(c), split(c.headDimV), smem(smem) {
    ValueRange a = fn.getArguments();
    oPart = a[abi::kMrgOPart];
    lsePart = a[abi::kMrgLsePart];
    out.o = a[abi::kMrgO];
    out.lse = a[abi::kMrgLse];
    for (int i = 0; i < 3; ++i) {
      out.oS[i] = a[abi::kMrgOStrides + i];
      out.lS[i] = a[abi::kMrgLseStrides + i];
    }
    if (c.sink)
      out.sink = a[abi::kMrgSink];
    out.returnLse = c.returnLse;
    numSplits = a[abi::kMrgNumSplits];
  }
  void emit();

private:
  Value rowMax();
  void groupSums(Value mUse);
  void combine(Value mUse, const SinkLog2 &sink);
  /// The partial LSE (log2 units) of split \p s of this CTA's row.
  Value lseLog2(Value s) {
    Value i = ops.add(ops.mul(ops.ext64(s), rowsTotal), row);
    Value p = ops.gepBytes(lsePart, ops.mul(i, ops.ci64(4)));
    return ops.fmul(LLVM::LoadOp::create(b, ops.f32, p, 4).getResult(),
                    ops.cf32(kLog2e));
  }
  Value shared(Value byteOffset) {
    return ops.gepBytes(smem, ops.ext64(byteOffset));
  }
  /// scf.for over s = first, first + stride, ... < end with \p init
  /// carried; \p body(s, carried) yields the next values.
  SmallVector<Value>
  forSplits(Value first, Value end, Value stride, ValueRange init,
            llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto loop = scf::ForOp::create(b, ops.toIndex(first), ops.toIndex(end),
                                   ops.toIndex(stride), init);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value s = arith::IndexCastOp::create(b, ops.i32, loop.getInductionVar());
    scf::YieldOp::create(b, body(s, loop.getRegionIterArgs()));
    return SmallVector<Value>(loop.getResults());
  }

  ImplicitLocOpBuilder &b;
  KernelOps &ops;
  const KernelShape &c;
  MergeSplit split;
  Value smem, oPart, lsePart, numSplits;
  DecodeOutputs out;
  Value tid, qi, h, bt, row, rowsTotal;
};

void ParallelMerge::emit() {
  tid = NVVM::ThreadIdXOp::create(b, ops.i32);
  qi = NVVM::BlockIdXOp::create(b, ops.i32);
  h = NVVM::BlockIdYOp::create(b, ops.i32);
  bt = NVVM::BlockIdZOp::create(b, ops.i32);
  Value qLen = NVVM::GridDimXOp::create(b, ops.i32);
  Value heads = NVVM::GridDimYOp::create(b, ops.i32);
  Value batches = NVVM::GridDimZOp::create(b, ops.i32);
  row = ops.add(
      ops.mul(ops.add(ops.mul(ops.ext64(bt), ops.ext64(heads)), ops.ext64(h)),
              ops.ext64(qLen)),
      ops.ext64(qi));
  rowsTotal =
      ops.mul(ops.mul(ops.ext64(batches), ops.ext64(heads)), ops.ext64(qLen));
  // The split kernel's partial states are complete and visible past here.
  emitGridDependency(ops, c, GridDependency::Wait);
  Value m = rowMax();
  SinkLog2 sink;
  if (c.sink) {
    sink = loadSinkLog2(ops, out.sink, h);
    m = ops.fmax(m, sink.value);
  }
  Value mUse = mergeUse(ops, m);
  groupSums(mUse);
  gpu::BarrierOp::create(b); // the groups' sums are in shared memory
  combine(mUse, sink);
  gpu::ReturnOp::create(b);
}

Value ParallelMerge::rowMax() {
  // Thread t: splits t, t + threads, ...; then the warp's butterfly and
  // the warps' maxima through shared memory.
  const int warps = abi::kMergeThreads / 32;
  Value mx =
      forSplits(tid, numSplits, ops.ci32(abi::kMergeThreads),
                ValueRange{ops.cf32(kNegInf)}, [&](Value s, ValueRange acc) {
                  return SmallVector<Value>{ops.fmax(acc[0], lseLog2(s))};
                })[0];
  for (int off = 16; off >= 1; off /= 2)
    mx = ops.fmax(mx, ops.shflXor(mx, off));
  Value warp = arith::DivUIOp::create(b, tid, ops.ci32(32));
  Value lane = arith::RemUIOp::create(b, tid, ops.ci32(32));
  const int maxAt = split.maxAt(c.headDimV);
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)), [&] {
    LLVM::StoreOp::create(
        b, mx, shared(ops.add(ops.ci32(maxAt), ops.mul(warp, ops.ci32(4)))), 4);
  });
  gpu::BarrierOp::create(b);
  Value m = LLVM::LoadOp::create(b, ops.f32, shared(ops.ci32(maxAt)), 4);
  for (int w = 1; w < warps; ++w)
    m = ops.fmax(
        m, LLVM::LoadOp::create(b, ops.f32, shared(ops.ci32(maxAt + 4 * w)), 4)
               .getResult());
  return m;
}

void ParallelMerge::groupSums(Value mUse) {
  // Group g folds its splits kUnroll at a time (indices past the last
  // split read the last one and weigh 0), then writes its 4 column sums
  // per thread and (its first thread) its weight sum.
  const int dv = c.headDimV, unroll = MergeSplit::kUnroll;
  Value quads = ops.ci32(split.quads);
  Value g = arith::DivUIOp::create(b, tid, quads);
  Value quad = arith::RemUIOp::create(b, tid, quads);
  Value active = ops.cmp(arith::CmpIPredicate::ult, g, ops.ci32(split.groups));
  Value col = ops.mul(quad, ops.ci32(4));
  Value lastSplit = ops.sub(numSplits, ops.ci32(1));
  Type v4 = VectorType::get({4}, ops.f32);
  Value zero = ops.cf32(0.0f);
  SmallVector<Value> init(5, zero); // weight sum, 4 column sums
  SmallVector<Value> acc = forSplits(
      ops.sel(active, g, numSplits), numSplits, ops.ci32(split.groups * unroll),
      init, [&](Value s0, ValueRange carried) {
        SmallVector<Value> valid, lse, x;
        for (int u = 0; u < unroll; ++u) {
          Value s = ops.add(s0, ops.ci32(split.groups * u));
          valid.push_back(ops.cmp(arith::CmpIPredicate::slt, s, numSplits));
          Value sc = arith::MinSIOp::create(b, s, lastSplit);
          lse.push_back(lseLog2(sc));
          Value i = ops.add(ops.mul(ops.ext64(sc), rowsTotal), row);
          Value p = ops.gepBytes(
              oPart, ops.mul(ops.add(ops.mul(i, ops.ci64(dv)), ops.ext64(col)),
                             ops.ci64(4)));
          x.push_back(LLVM::LoadOp::create(b, v4, p, 16).getResult());
        }
        SmallVector<Value> next(carried);
        for (int u = 0; u < unroll; ++u) {
          Value live;
          Value w = splitWeight(ops, lse[u], mUse, live);
          live = ops.land(live, valid[u]);
          next[0] = ops.fadd(next[0], ops.sel(valid[u], w, zero));
          for (int k = 0; k < 4; ++k) {
            Value xk = LLVM::ExtractElementOp::create(b, x[u], ops.ci32(k));
            next[1 + k] =
                ops.fadd(next[1 + k], ops.sel(live, ops.fmul(w, xk), zero));
          }
        }
        return next;
      });
  ops.ifThen(active, [&] {
    Value v = LLVM::UndefOp::create(b, v4);
    for (int k = 0; k < 4; ++k)
      v = LLVM::InsertElementOp::create(b, v, acc[1 + k], ops.ci32(k));
    Value at = ops.mul(ops.add(ops.mul(g, ops.ci32(dv)), col), ops.ci32(4));
    LLVM::StoreOp::create(b, v, shared(at), 16);
    ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, quad, ops.ci32(0)), [&] {
      Value sumAt =
          ops.add(ops.ci32(split.sumsAt(dv)), ops.mul(g, ops.ci32(4)));
      LLVM::StoreOp::create(b, acc[0], shared(sumAt), 4);
    });
  });
}

void ParallelMerge::combine(Value mUse, const SinkLog2 &sink) {
  // Every thread sums the groups' weights (in group order); thread t
  // writes columns 2t, 2t + 1 (the groups' column sums in group order).
  const int dv = c.headDimV;
  Value sum = c.sink ? sinkTerm(ops, sink, mUse) : ops.cf32(0.0f);
  for (int g = 0; g < split.groups; ++g)
    sum = ops.fadd(
        sum, LLVM::LoadOp::create(b, ops.f32,
                                  shared(ops.ci32(split.sumsAt(dv) + 4 * g)), 4)
                 .getResult());
  MergedRow r = finishRow(ops, mUse, sum);
  Value active = ops.cmp(arith::CmpIPredicate::slt, tid, ops.ci32(dv / 2));
  ops.ifThen(active, [&] {
    Type v2 = VectorType::get({2}, ops.f32);
    Value col = ops.mul(tid, ops.ci32(2));
    Value x[2] = {ops.cf32(0.0f), ops.cf32(0.0f)};
    for (int g = 0; g < split.groups; ++g) {
      Value at = ops.mul(ops.add(ops.ci32(g * dv), col), ops.ci32(4));
      Value v = LLVM::LoadOp::create(b, v2, shared(at), 8);
      for (int k = 0; k < 2; ++k)
        x[k] =
            ops.fadd(x[k], LLVM::ExtractElementOp::create(b, v, ops.ci32(k)));
    }
    storeOutputPair(ops, out, bt, h, qi, col, ops.fmul(x[0], r.inv),
                    ops.fmul(x[1], r.inv));
  });
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, tid, ops.ci32(0)),
             [&] { storeOutputLse(ops, out, bt, h, qi, r.lse); });
}

} // namespace

/// setDecodeSerialMergeForTesting's switch.
static std::atomic<bool> serialMerge{false};

/// Appends one merge entry \p name to \p gpuModule (before its
/// terminator): the parallel kernel when \p parallel, else the serial one.
static void buildMergeEntry(ImplicitLocOpBuilder &b, Operation *gpuModule,
                            const KernelShape &c, const std::string &name,
                            bool parallel) {
  KernelOps ops(b, c.bf16);
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToEnd(&region.front());
  // The gpu.module's terminator, if any, stays last.
  if (!region.front().empty() &&
      region.front().back().hasTrait<OpTrait::IsTerminator>())
    b.setInsertionPoint(&region.front().back());
  if (parallel) // its shared memory (static: the launch passes none)
    LLVM::GlobalOp::create(
        b,
        LLVM::LLVMArrayType::get(ops.i8,
                                 MergeSplit(c.headDimV).bytes(c.headDimV)),
        /*isConstant=*/false, LLVM::Linkage::Internal, name + "_smem",
        Attribute(), /*alignment=*/16, /*addrSpace=*/3);
  SmallVector<Type> args = abiTypes(ops, abi::mergeArgTypes(c.sink));
  auto fn = gpu::GPUFuncOp::create(b, name, b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({abi::kMergeThreads, 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());
  if (!parallel) {
    buildSerialMerge(b, ops, fn, c);
    return;
  }
  // At least 4 CTAs per SM (<= 128 registers): without it ptxas aims at
  // 16 (32 registers) and issues each split's loads only after the
  // previous split's arithmetic (one memory latency per split, the serial
  // kernel's cost); with it a step's kUnroll loads are all in flight.
  fn->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(), b.getI32IntegerAttr(4));
  Value smem = LLVM::AddressOfOp::create(b, ops.ptrS, name + "_smem");
  ParallelMerge(b, ops, fn, c, smem).emit();
}

void buildDecodeMergeKernel(ImplicitLocOpBuilder &b, Operation *gpuModule,
                            const KernelShape &c) {
  // The parallel merge takes 16-byte column quads: head_dim_v a multiple
  // of 4 with at least one group of dv / 4 threads (dv <= 4 x threads).
  const bool parallel = !serialMerge.load() && c.headDimV % 4 == 0 &&
                        c.headDimV <= 4 * abi::kMergeThreads;
  buildMergeEntry(b, gpuModule, c, c.name + abi::kDecodeMergeSuffix, parallel);
  // The serial walk for few splits over many rows (runtime's
  // decodeSerialMerge): 32 registers let 16 CTAs share an SM where the
  // parallel kernel's 75 fit 6, so 2048 rows take one wave, not three.
  buildMergeEntry(b, gpuModule, c, c.name + abi::kDecodeMergeSerialSuffix,
                  /*parallel=*/false);
}

} // namespace flashjit::nvvm::detail

void flashjit::setDecodeSerialMergeForTesting(bool on) {
  flashjit::nvvm::detail::serialMerge.store(on);
}
