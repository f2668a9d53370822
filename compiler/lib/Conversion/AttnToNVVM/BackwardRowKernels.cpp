//===- BackwardRowKernels.cpp - The backward's row kernels and arguments --===//
//
// Pre: a gpu.module. Post: it holds `<name>_bwd_pre` or `<name>_bwd_post`
// (BackwardKernelBase.h), one warp per query row:
//   _bwd_pre:  D_i = dO_i . O_i (fp32), dQaccum_i = 0
//   _bwd_post: dQ_i = scale * dQaccum_i in the inputs' dtype
// (FlashAttention-2's preprocess and dQ conversion, Dao 2023, Algorithm 2).
// Also the declaration and argument binding every backward kernel shares.
//
//===----------------------------------------------------------------------===//
#include "BackwardKernelBase.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::nvvm {

namespace abi = flashjit::abi::gpu;

gpu::GPUFuncOp BackwardKernelBase::declare(Operation *gpuModule,
                                           StringRef suffix, int threads,
                                           int64_t sharedBytes) {
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToStart(&region.front());
  if (!SymbolTable::lookupSymbolIn(gpuModule, kSharedSymbol))
    LLVM::GlobalOp::create(b, LLVM::LLVMArrayType::get(ops.i8, 0),
                           /*isConstant=*/false, LLVM::Linkage::External,
                           kSharedSymbol, Attribute(), /*alignment=*/1024,
                           /*addrSpace=*/3);
  SmallVector<Type> args = abiTypes(ops, abi::backwardArgTypes(c));
  for (Type ty : em.extraArgumentTypes(b.getContext()))
    args.push_back(ty);
  // The gradient arrays: one per buffer, then one for the parameters.
  args.append(em.numBuffers() + (em.numParams() ? 1 : 0), ops.ptrG);
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

void BackwardKernelBase::bindArguments(gpu::GPUFuncOp fn) {
  ValueRange a = fn.getArguments();
  for (int i = 0; i < abi::kBackwardStridedTensors; ++i) {
    ptr[i] = a[i];
    for (int d = 0; d < 3; ++d)
      st[i][d] = a[abi::kBwdStrides + 3 * i + d];
  }
  dqAccum = a[abi::kBwdDQAccum];
  delta = a[abi::kBwdDelta];
  em.setStatus(a[abi::kBwdStatus]);
  seqlenQ = maxSeqlenQ = a[abi::kBwdSeqlenQ];
  seqlenK = maxSeqlenK = a[abi::kBwdSeqlenK];
  semaphores = a[abi::kBwdSemaphores];
  group = a[abi::kBwdHeadGroup];
  scale = a[abi::kBwdScale];
  scaleLog2 = a[abi::kBwdScaleLog2];
  unsigned next = abi::kBackwardFixedArgs;
  if (c.varlen) {
    cuQ = a[next];
    cuK = a[next + 1];
    next += flashjit::abi::kVarlenArgs;
  }
  if (c.blockSparse) {
    const int n = abi::kBackwardSparseListArgs;
    for (int i = 0; i < n; ++i)
      qLists[i] = a[next + i];
    rowBatchStride = a[next + n];
    rowHeadStride = a[next + n + 1];
    listPitch = a[next + n + 2];
    next += n + abi::kBlockSparseScalarArgs;
  }
  ValueRange extra = a.drop_front(next);
  em.setArguments(extra);
  unsigned np = em.numParams(), nb = em.numBuffers();
  gradArgs.status = a[abi::kBwdStatus];
  for (unsigned i = 0; i < nb; ++i) {
    gradArgs.bufferSizes.push_back(extra[np + 2 * i + 1]);
    gradArgs.bufferGrads.push_back(extra[np + 2 * nb + i]);
  }
  if (np)
    gradArgs.paramGrads = extra[np + 3 * nb];
}

std::pair<Value, Value> BackwardKernelBase::unpack(Value packed) {
  Type h = ops.bf16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  Value v = LLVM::BitcastOp::create(b, VectorType::get({2}, h), packed);
  auto half = [&](int i) {
    Value e = LLVM::ExtractElementOp::create(b, v, ops.ci32(i));
    return arith::ExtFOp::create(b, ops.f32, e).getResult();
  };
  return {half(0), half(1)};
}

namespace {

/// `_bwd_pre` and `_bwd_post`.
class RowKernelBuilder : public BackwardKernelBase {
public:
  using BackwardKernelBase::BackwardKernelBase;
  void build(Operation *gpuModule, bool pre);

private:
  /// Calls \p body for the pairs p = lane + 32 i of a row of \p dim
  /// elements.
  void forPairs(int dim, llvm::function_ref<void(Value)> body);
  void preprocess(Value head, Value wrow);
  void convert(Value head);
  /// The address of pair \p p of this row in dQaccum.
  Value accAddr(Value p) {
    return ops.gepBytes(
        dqAccum, ops.mul(ops.add(accRow, ops.ext64(ops.mul(p, ops.ci32(2)))),
                         ops.ci64(4)));
  }

  Value lane, row, accRow;
};

void RowKernelBuilder::forPairs(int dim, llvm::function_ref<void(Value)> body) {
  const int pairs = dim / 2;
  for (int i = 0; i * 32 < pairs; ++i) {
    Value p = ops.add(lane, ops.ci32(32 * i));
    if ((i + 1) * 32 <= pairs)
      body(p);
    else
      ops.ifThen(ops.cmp(arith::CmpIPredicate::slt, p, ops.ci32(pairs)),
                 [&] { body(p); });
  }
}

void RowKernelBuilder::build(Operation *gpuModule, bool pre) {
  OpBuilder::InsertionGuard guard(b);
  gpu::GPUFuncOp fn = declare(
      gpuModule, pre ? abi::kBackwardPreSuffix : abi::kBackwardPostSuffix,
      abi::kBackwardRowThreads, 0);
  Value tidx = NVVM::ThreadIdXOp::create(b, ops.i32);
  Value w = arith::DivUIOp::create(b, tidx, ops.ci32(32));
  lane = arith::RemUIOp::create(b, tidx, ops.ci32(32));
  row = ops.add(ops.mul(NVVM::BlockIdXOp::create(b, ops.i32),
                        ops.ci32(abi::kBackwardRowsPerCta)),
                w);
  Value head = NVVM::BlockIdYOp::create(b, ops.i32);
  batch = NVVM::BlockIdZOp::create(b, ops.i32);
  Value hq = NVVM::GridDimYOp::create(b, ops.i32);
  {
    OpBuilder::InsertionGuard rg(b);
    locateSequence();
    ops.enterIf(ops.cmp(arith::CmpIPredicate::slt, row, seqlenQ));
    Value wrow = workRow(hq, head, row);
    accRow = ops.mul(wrow, ops.ci64(c.headDimQK));
    if (pre) {
      preprocess(head, wrow);
      // The deterministic mode's counter of the row's query tile: 0.
      Value first =
          ops.land(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)),
                   ops.cmp(arith::CmpIPredicate::eq,
                           arith::RemUIOp::create(b, row, ops.ci32(c.blockN)),
                           ops.ci32(0)));
      Value det = LLVM::ICmpOp::create(b, LLVM::ICmpPredicate::ne, semaphores,
                                       LLVM::ZeroOp::create(b, ops.ptrG));
      ops.ifThen(ops.land(first, det), [&] {
        Value tile = arith::DivUIOp::create(b, row, ops.ci32(c.blockN));
        LLVM::StoreOp::create(b, ops.ci32(0), semaphore(hq, head, tile),
                              /*alignment=*/4);
      });
    } else {
      convert(head);
    }
  }
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

void RowKernelBuilder::preprocess(Value head, Value wrow) {
  Value oRow = offset(TO, batch, head, row);
  Value doRow = offset(TDO, batch, head, row);
  // This lane's partial sum; guarded pairs add to it through scf.if.
  Value sum = ops.cf32(0.0f);
  const int pairs = c.headDimV / 2;
  for (int i = 0; i * 32 < pairs; ++i) {
    Value p = ops.add(lane, ops.ci32(32 * i));
    auto term = [&]() -> Value {
      Value e = ops.ext64(ops.mul(p, ops.ci32(2)));
      Value o = LLVM::LoadOp::create(b, ops.i32, address(TO, ops.add(oRow, e)),
                                     /*alignment=*/4);
      Value d = LLVM::LoadOp::create(
          b, ops.i32, address(TDO, ops.add(doRow, e)), /*alignment=*/4);
      auto [o0, o1] = unpack(o);
      auto [d0, d1] = unpack(d);
      return ops.fadd(sum, ops.fadd(ops.fmul(o0, d0), ops.fmul(o1, d1)));
    };
    if ((i + 1) * 32 <= pairs)
      sum = term();
    else
      sum = ops.guarded(ops.cmp(arith::CmpIPredicate::slt, p, ops.ci32(pairs)),
                        ops.f32, sum, term);
  }
  for (int off = 16; off >= 1; off /= 2)
    sum = ops.fadd(sum, ops.shflXor(sum, off));
  ops.ifThen(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)), [&] {
    LLVM::StoreOp::create(b, sum,
                          ops.gepBytes(delta, ops.mul(wrow, ops.ci64(4))),
                          /*alignment=*/4);
  });
  forPairs(c.headDimQK, [&](Value p) {
    LLVM::StoreOp::create(b, ops.ci64(0), accAddr(p), /*alignment=*/8);
  });
}

void RowKernelBuilder::convert(Value head) {
  Value dqRow = offset(TDQ, batch, head, row);
  forPairs(c.headDimQK, [&](Value p) {
    Value a = accAddr(p);
    Value x0 = LLVM::LoadOp::create(b, ops.f32, a, /*alignment=*/8);
    Value x1 =
        LLVM::LoadOp::create(b, ops.f32, ops.gepBytes(a, 4), /*alignment=*/4);
    Value e = ops.ext64(ops.mul(p, ops.ci32(2)));
    LLVM::StoreOp::create(b, ops.pack(ops.fmul(x0, scale), ops.fmul(x1, scale)),
                          address(TDQ, ops.add(dqRow, e)), /*alignment=*/4);
  });
}

} // namespace

void buildBackwardRowKernel(ImplicitLocOpBuilder &b, Operation *gpuModule,
                            const KernelShape &c, FragmentEmitter &em,
                            bool pre) {
  RowKernelBuilder(b, c, em).build(gpuModule, pre);
}

} // namespace flashjit::nvvm
