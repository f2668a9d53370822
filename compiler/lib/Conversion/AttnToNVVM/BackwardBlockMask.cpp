//===- BackwardBlockMask.cpp - The block-sparse backward's mask transposer ===//
//
// Pre: a gpu.module (holding the backward kernels of a block-sparse
// variant). Post: it also holds gpu.func @<name>_bwd_mask, which writes the
// BlockMask's lists transposed for the key-tile-outer main kernel
// (abi::gpu::BackwardMaskArg), exactly as flashjit::transposeBlockMask
// does on the host.
//
// One warp per output row (key tile j of the backward's block_m keys, mask
// head h, mask batch b). Backward tile (j, i) lies in mask tile (m, t) =
// (i / q_ratio, j / kv_ratio) (the backward's block-sparse rule,
// KernelAbi.h); lane l of chunk c takes query tile i = 32 c + l, looks t up
// in mask row (b, h, m)'s partial and full lists (binary search: both are
// strictly increasing) and the warp compacts the hits with ballots, so each
// output list is increasing.
//
//===----------------------------------------------------------------------===//
#include "BackwardBlockMask.h"

#include "KernelOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::nvvm {
namespace {

namespace abi = flashjit::abi::gpu;

class BackwardMaskBuilder {
public:
  BackwardMaskBuilder(ImplicitLocOpBuilder &b, const KernelShape &c)
      : ops(b, c.bf16), b(b), c(c) {}

  void build(Operation *gpuModule);

private:
  /// Whether \p key is among the \p n increasing i32 entries of \p list
  /// starting at element \p base (i64).
  Value contains(Value list, Value base, Value n, Value key);

  KernelOps ops;
  ImplicitLocOpBuilder &b;
  const KernelShape &c;
};

Value BackwardMaskBuilder::contains(Value list, Value base, Value n,
                                    Value key) {
  auto at = [&](Value i) {
    Value p = LLVM::GEPOp::create(b, ops.ptrG, ops.i32, list,
                                  ValueRange{ops.add(base, ops.ext64(i))});
    return LLVM::LoadOp::create(b, ops.i32, p, /*alignment=*/4).getResult();
  };
  // lo = the first position whose entry is >= key.
  auto w = scf::WhileOp::create(
      b, TypeRange{ops.i32, ops.i32}, ValueRange{ops.ci32(0), n},
      [&](OpBuilder &nb, Location, ValueRange a) {
        OpBuilder::InsertionGuard wg(b);
        b.setInsertionPointToEnd(nb.getInsertionBlock());
        scf::ConditionOp::create(
            b, ops.cmp(arith::CmpIPredicate::slt, a[0], a[1]), a);
      },
      [&](OpBuilder &nb, Location, ValueRange a) {
        OpBuilder::InsertionGuard wg(b);
        b.setInsertionPointToEnd(nb.getInsertionBlock());
        Value mid = arith::ShRUIOp::create(b, ops.add(a[0], a[1]), ops.ci32(1));
        Value less = ops.cmp(arith::CmpIPredicate::slt, at(mid), key);
        scf::YieldOp::create(
            b, ValueRange{ops.sel(less, ops.add(mid, ops.ci32(1)), a[0]),
                          ops.sel(less, a[1], mid)});
      });
  Value lo = w.getResult(0);
  return ops.guarded(
      ops.cmp(arith::CmpIPredicate::slt, lo, n), ops.i1, ops.cb(false),
      [&] { return ops.cmp(arith::CmpIPredicate::eq, at(lo), key); });
}

void BackwardMaskBuilder::build(Operation *gpuModule) {
  OpBuilder::InsertionGuard guard(b);
  Region &region = gpuModule->getRegion(0);
  b.setInsertionPointToEnd(&region.front());
  SmallVector<Type> args = abiTypes(ops, abi::backwardMaskArgTypes());
  auto fn = gpu::GPUFuncOp::create(b, c.name + abi::kBackwardMaskSuffix,
                                   b.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  fn.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({abi::kBackwardMaskThreads, 1, 1}));
  b.setInsertionPointToStart(&fn.getBody().front());

  ValueRange a = fn.getArguments();
  Value in[4], out[4];
  for (int i = 0; i < 4; ++i) {
    in[i] = a[abi::kBmIn + i];
    out[i] = a[abi::kBmOut + i];
  }
  Value maskQTiles = a[abi::kBmMaskQTiles],
        maskKvTiles = a[abi::kBmMaskKvTiles], qRatio = a[abi::kBmQRatio],
        kvRatio = a[abi::kBmKvRatio], qTiles = a[abi::kBmQTiles];

  Value lane = NVVM::ThreadIdXOp::create(b, ops.i32);
  Value j = NVVM::BlockIdXOp::create(b, ops.i32);
  Value h = NVVM::BlockIdYOp::create(b, ops.i32);
  Value bt = NVVM::BlockIdZOp::create(b, ops.i32);
  Value rowsBH = ops.add(ops.mul(bt, NVVM::GridDimYOp::create(b, ops.i32)), h);
  Value outRow =
      ops.add(ops.mul(rowsBH, NVVM::GridDimXOp::create(b, ops.i32)), j);
  Value outBase = ops.mul(ops.ext64(outRow), ops.ext64(qTiles));
  Value maskRow0 = ops.mul(rowsBH, maskQTiles);
  Value t = arith::DivUIOp::create(b, j, kvRatio);
  Value ltMask = NVVM::LaneMaskLtOp::create(b, ops.i32);
  Value one = arith::ConstantIndexOp::create(b, 1);
  Value nChunks =
      arith::DivUIOp::create(b, ops.add(qTiles, ops.ci32(31)), ops.ci32(32));
  auto chunks = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                   ops.toIndex(nChunks), one,
                                   ValueRange{ops.ci32(0), ops.ci32(0)});
  {
    OpBuilder::InsertionGuard cg(b);
    b.setInsertionPointToStart(chunks.getBody());
    Value ch = arith::IndexCastOp::create(b, ops.i32, chunks.getInductionVar());
    Value i = ops.add(ops.mul(ch, ops.ci32(32)), lane);
    Value inRange = ops.cmp(arith::CmpIPredicate::slt, i, qTiles);
    // 0: not listed, 1: listed partial, 2: listed full.
    Value code = ops.guarded(inRange, ops.i32, ops.ci32(0), [&] {
      Value row = ops.add(maskRow0, arith::DivUIOp::create(b, i, qRatio));
      Value base = ops.mul(ops.ext64(row), ops.ext64(maskKvTiles));
      Value partial = contains(in[1], base, ops.loadI32(in[0], row), t);
      Value full = contains(in[3], base, ops.loadI32(in[2], row), t);
      return ops.sel(partial, ops.ci32(1),
                     ops.sel(full, ops.ci32(2), ops.ci32(0)));
    });
    SmallVector<Value, 2> counts;
    for (int kind = 0; kind < 2; ++kind) { // partial, full
      Value want = ops.cmp(arith::CmpIPredicate::eq, code, ops.ci32(1 + kind));
      counts.push_back(warpAppend(ops, want, i, out[1 + 2 * kind], outBase,
                                  chunks.getRegionIterArgs()[kind], ltMask));
    }
    scf::YieldOp::create(b, counts);
  }
  ops.enterIf(ops.cmp(arith::CmpIPredicate::eq, lane, ops.ci32(0)));
  for (int kind = 0; kind < 2; ++kind) {
    Value p = LLVM::GEPOp::create(b, ops.ptrG, ops.i32, out[2 * kind],
                                  ValueRange{ops.ext64(outRow)});
    LLVM::StoreOp::create(b, chunks.getResult(kind), p, 4);
  }
  b.setInsertionPointToEnd(&fn.getBody().front());
  gpu::ReturnOp::create(b);
}

} // namespace

void buildBackwardBlockMaskKernel(OpBuilder &builder, Location loc,
                                  Operation *gpuModule,
                                  const KernelShape &config) {
  ImplicitLocOpBuilder b(loc, builder);
  BackwardMaskBuilder(b, config).build(gpuModule);
}

} // namespace flashjit::nvvm
