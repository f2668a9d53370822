//===- SharedTile.cpp - Tiles of 16-bit elements in shared memory ---------===//
#include "SharedTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::nvvm {

Value tileOffset(KernelOps &ops, Value row, Value col, int rows, int dim,
                 bool swizzled) {
  ImplicitLocOpBuilder &b = ops.b;
  if (!swizzled)
    return ops.mul(
        ops.add(ops.mul(row, ops.ci32(dim + kPad)), ops.mul(col, ops.ci32(8))),
        ops.ci32(2));
  Value block = arith::DivUIOp::create(b, col, ops.ci32(8));
  Value chunk =
      arith::XOrIOp::create(b, arith::RemUIOp::create(b, col, ops.ci32(8)),
                            arith::RemUIOp::create(b, row, ops.ci32(8)));
  return ops.add(ops.add(ops.mul(block, ops.ci32(rows * 128)),
                         ops.mul(row, ops.ci32(128))),
                 ops.mul(chunk, ops.ci32(16)));
}

void loadTileAsync(KernelOps &ops, Value tid, int nthreads, Value smem,
                   Value gBase, Value stride, Value row0, Value seqlen,
                   int rows, int dim, bool swizzled) {
  ImplicitLocOpBuilder &b = ops.b;
  int chunksPerRow = dim / 8;
  int total = rows * chunksPerRow;
  for (int it = 0; it * nthreads < total; ++it) {
    auto emitOne = [&]() {
      Value cidx = ops.add(tid, ops.ci32(it * nthreads));
      Value row = arith::DivUIOp::create(b, cidx, ops.ci32(chunksPerRow));
      Value col = arith::RemUIOp::create(b, cidx, ops.ci32(chunksPerRow));
      Value grow = ops.add(row0, row);
      Value valid = ops.cmp(arith::CmpIPredicate::slt, grow, seqlen);
      Value srow = ops.sel(valid, grow, ops.ci32(0)); // not read: size 0
      Value goff = ops.add(ops.mul(ops.ext64(srow), stride),
                           ops.ext64(ops.mul(col, ops.ci32(8))));
      Value src = ops.gepBytes(gBase, ops.mul(goff, ops.ci64(2)));
      Value dst = ops.gepBytes(
          smem, ops.ext64(tileOffset(ops, row, col, rows, dim, swizzled)));
      Value size = ops.sel(valid, ops.ci32(16), ops.ci32(0));
      NVVM::CpAsyncOp::create(
          b, dst, src, b.getI32IntegerAttr(16),
          NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                               NVVM::LoadCacheModifierKind::CG),
          size);
    };
    if ((it + 1) * nthreads <= total) {
      emitOne();
    } else {
      Value inRange =
          ops.cmp(arith::CmpIPredicate::ult,
                  ops.add(tid, ops.ci32(it * nthreads)), ops.ci32(total));
      ops.ifThen(inRange, emitOne);
    }
  }
}

} // namespace flashjit::nvvm
