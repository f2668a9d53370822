//===- BackwardBlockMask.cpp - The block-sparse backward's mask transposer ===//
//
// Pre: a gpu.module (holding the backward kernels of a block-sparse
// variant). Post: it also holds gpu.func @<name>_bwd_mask, which writes the
// BlockMask's lists transposed for the key-tile-outer main kernel
// (abi::gpu::BackwardMaskArg), exactly as flashjit::transposeBlockMask
// does on the host.
//
// One warp per output row (key tile j of the backward's block_m keys, mask
// head h, mask batch b). Backward tile (j, i) lies in mask row m = i /
// q_ratio and spans mask key tiles t0 = j block_m / mask_block_n .. t1 (the
// backward's block-sparse rule, KernelAbi.h); lane l of chunk c takes query
// tile i = 32 c + l, looks each t up in mask row (b, h, m)'s partial and
// full lists (binary search: both are strictly increasing), marks t's 8-key
// groups unlisted or full in the key-group word, and the warp compacts the
// partial and full tiles with ballots, so each output list is increasing.
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
  /// The class of the backward tile whose query rows lie in mask row \p row
  /// and whose keys from \p kStart span mask key tiles \p t0 .. \p t1:
  /// (code << 32) | word (i64; KernelAbi.h's rule).
  Value classifyTile(Value row, Value t0, Value t1, Value kStart,
                     Value maskKvTiles, Value maskBlockN);

  KernelOps ops;
  Value in[4];
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

Value BackwardMaskBuilder::classifyTile(Value row, Value t0, Value t1,
                                        Value kStart, Value maskKvTiles,
                                        Value maskBlockN) {
  Value base = ops.mul(ops.ext64(row), ops.ext64(maskKvTiles));
  Value nPartial = ops.loadI32(in[0], row), nFull = ops.loadI32(in[2], row);
  // Over t: any listed, all full, any not partial (i1), then the word's
  // unlisted and full group bits (i32).
  SmallVector<Value> init{ops.cb(false), ops.cb(true), ops.cb(false),
                          ops.ci32(0), ops.ci32(0)};
  auto tiles = scf::ForOp::create(b, ops.toIndex(t0),
                                  ops.toIndex(ops.add(t1, ops.ci32(1))),
                                  arith::ConstantIndexOp::create(b, 1), init);
  {
    OpBuilder::InsertionGuard tg(b);
    b.setInsertionPointToStart(tiles.getBody());
    ValueRange st = tiles.getRegionIterArgs();
    Value t = arith::IndexCastOp::create(b, ops.i32, tiles.getInductionVar());
    Value partial = contains(in[1], base, nPartial, t);
    Value full = contains(in[3], base, nFull, t);
    Value listed = ops.lor(partial, full);
    // t's 8-key groups of this key tile: [gBeg, gEnd).
    Value lo = arith::MaxSIOp::create(
        b, ops.sub(ops.mul(t, maskBlockN), kStart), ops.ci32(0));
    Value hi = arith::MinSIOp::create(
        b, ops.sub(ops.mul(ops.add(t, ops.ci32(1)), maskBlockN), kStart),
        ops.ci32(c.blockM()));
    auto bit = [&](Value keys) {
      Value g = arith::DivUIOp::create(b, keys, ops.ci32(8));
      return arith::ShLIOp::create(b, ops.ci32(1), g).getResult();
    };
    Value bits = ops.sub(bit(hi), bit(lo));
    Value zero = ops.ci32(0);
    scf::YieldOp::create(
        b,
        ValueRange{ops.lor(st[0], listed), ops.land(st[1], full),
                   ops.lor(st[2], ops.lnot(partial)),
                   arith::OrIOp::create(b, st[3], ops.sel(listed, zero, bits)),
                   arith::OrIOp::create(b, st[4], ops.sel(full, bits, zero))});
  }
  ValueRange r = tiles.getResults();
  Value code =
      ops.sel(r[0], ops.sel(r[1], ops.ci32(2), ops.ci32(1)), ops.ci32(0));
  Value word = arith::OrIOp::create(
      b, r[3], arith::ShLIOp::create(b, r[4], ops.ci32(16)));
  word = ops.sel(
      ops.land(ops.cmp(arith::CmpIPredicate::eq, code, ops.ci32(1)), r[2]),
      word, ops.ci32(0));
  Value code64 = arith::ShLIOp::create(b, ops.ext64(code), ops.ci64(32));
  return arith::OrIOp::create(b, code64,
                              arith::ExtUIOp::create(b, ops.i64, word));
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
  Value out[5];
  for (int i = 0; i < 4; ++i)
    in[i] = a[abi::kBmIn + i];
  for (int i = 0; i < 5; ++i)
    out[i] = a[abi::kBmOut + i];
  Value maskQTiles = a[abi::kBmMaskQTiles],
        maskKvTiles = a[abi::kBmMaskKvTiles], qRatio = a[abi::kBmQRatio],
        maskBlockN = a[abi::kBmMaskBlockN], qTiles = a[abi::kBmQTiles];

  Value lane = NVVM::ThreadIdXOp::create(b, ops.i32);
  Value j = NVVM::BlockIdXOp::create(b, ops.i32);
  Value h = NVVM::BlockIdYOp::create(b, ops.i32);
  Value bt = NVVM::BlockIdZOp::create(b, ops.i32);
  Value rowsBH = ops.add(ops.mul(bt, NVVM::GridDimYOp::create(b, ops.i32)), h);
  Value outRow =
      ops.add(ops.mul(rowsBH, NVVM::GridDimXOp::create(b, ops.i32)), j);
  Value outBase = ops.mul(ops.ext64(outRow), ops.ext64(qTiles));
  Value maskRow0 = ops.mul(rowsBH, maskQTiles);
  // The mask key tiles this key tile spans (none past the mask's keys).
  Value kStart = ops.mul(j, ops.ci32(c.blockM()));
  Value t0 = arith::DivUIOp::create(b, kStart, maskBlockN);
  Value t1 = arith::MinSIOp::create(
      b,
      arith::DivUIOp::create(b, ops.add(kStart, ops.ci32(c.blockM() - 1)),
                             maskBlockN),
      ops.sub(maskKvTiles, ops.ci32(1)));
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
    // (code << 32) | word; code 0: not listed, 1: partial, 2: full.
    Value packed = ops.guarded(inRange, ops.i64, ops.ci64(0), [&] {
      Value row = ops.add(maskRow0, arith::DivUIOp::create(b, i, qRatio));
      return classifyTile(row, t0, t1, kStart, maskKvTiles, maskBlockN);
    });
    Value code = arith::TruncIOp::create(
        b, ops.i32, arith::ShRUIOp::create(b, packed, ops.ci64(32)));
    Value word = arith::TruncIOp::create(b, ops.i32, packed);
    SmallVector<Value, 2> counts;
    for (int kind = 0; kind < 2; ++kind) { // partial, full
      Value want = ops.cmp(arith::CmpIPredicate::eq, code, ops.ci32(1 + kind));
      Value count = chunks.getRegionIterArgs()[kind];
      if (kind == 0) // the words beside the partial indices
        warpAppend(ops, want, word, out[4], outBase, count, ltMask);
      counts.push_back(
          warpAppend(ops, want, i, out[1 + 2 * kind], outBase, count, ltMask));
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
