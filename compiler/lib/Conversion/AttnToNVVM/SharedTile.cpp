//===- SharedTile.cpp - Tiles of 16-bit elements in shared memory ---------===//
#include "SharedTile.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "flashjit/runtime/HeadDim.h"

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

/// loadTileAsync of a padded tile: pieces of vec = headDimVectorElems(cols)
/// elements, those at or past column \p cols or row \p seqlen zero-filled.
static void loadPaddedTile(KernelOps &ops, Value tid, int nthreads, Value smem,
                           Value gBase, Value stride, Value row0, Value seqlen,
                           int rows, int dim, bool swizzled, int cols) {
  ImplicitLocOpBuilder &b = ops.b;
  const int vec = headDimVectorElems(cols);
  const int piecesPerRow = dim / vec, piecesPerChunk = 8 / vec;
  const int total = rows * piecesPerRow;
  for (int it = 0; it * nthreads < total; ++it) {
    auto emitOne = [&]() {
      Value pidx = ops.add(tid, ops.ci32(it * nthreads));
      Value row = arith::DivUIOp::create(b, pidx, ops.ci32(piecesPerRow));
      Value piece = arith::RemUIOp::create(b, pidx, ops.ci32(piecesPerRow));
      Value chunk = arith::DivUIOp::create(b, piece, ops.ci32(piecesPerChunk));
      Value within = arith::RemUIOp::create(b, piece, ops.ci32(piecesPerChunk));
      Value col = ops.mul(piece, ops.ci32(vec));
      Value grow = ops.add(row0, row);
      Value valid =
          ops.land(ops.cmp(arith::CmpIPredicate::slt, grow, seqlen),
                   ops.cmp(arith::CmpIPredicate::slt, col, ops.ci32(cols)));
      // Not read where invalid: the address stays at the tile's base.
      Value goff = ops.sel(
          valid, ops.add(ops.mul(ops.ext64(grow), stride), ops.ext64(col)),
          ops.ci64(0));
      Value src = ops.gepBytes(gBase, ops.mul(goff, ops.ci64(2)));
      Value dst = ops.gepBytes(
          smem,
          ops.ext64(ops.add(tileOffset(ops, row, chunk, rows, dim, swizzled),
                            ops.mul(within, ops.ci32(2 * vec)))));
      if (vec == 1) {
        // No 2-byte cp.async: a plain load (zero where invalid) and its
        // store in one asm block, so that the compiler keeps each load
        // beside its store (hoisting all of them spilled at 255 registers).
        ops.inlineAsm(Type(),
                      {arith::ExtUIOp::create(b, ops.i32, valid),
                       LLVM::PtrToIntOp::create(b, b.getI64Type(), src),
                       LLVM::PtrToIntOp::create(b, ops.i32, dst)},
                      "{\n.reg .pred p;\n.reg .b16 t;\nsetp.ne.u32 p, $0, 0;\n"
                      "mov.b16 t, 0;\n@p ld.global.b16 t, [$1];\n"
                      "st.shared.b16 [$2], t;\n}",
                      "r,l,r");
        return;
      }
      Value size = ops.sel(valid, ops.ci32(2 * vec), ops.ci32(0));
      NVVM::CpAsyncOp::create(
          b, dst, src, b.getI32IntegerAttr(2 * vec),
          NVVM::LoadCacheModifierKindAttr::get(
              b.getContext(), vec == 8 ? NVVM::LoadCacheModifierKind::CG
                                       : NVVM::LoadCacheModifierKind::CA),
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

void loadTileAsync(KernelOps &ops, Value tid, int nthreads, Value smem,
                   Value gBase, Value stride, Value row0, Value seqlen,
                   int rows, int dim, bool swizzled, int cols) {
  if (cols && cols != dim)
    return loadPaddedTile(ops, tid, nthreads, smem, gBase, stride, row0, seqlen,
                          rows, dim, swizzled, cols);
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

void loadFp8TileAsync(KernelOps &ops, Value tid, int nthreads, Value smem,
                      Value gBase, Value stride, Value row0, Value seqlen,
                      int rows, int dimBytes) {
  ImplicitLocOpBuilder &b = ops.b;
  const int chunksPerRow = dimBytes / 16, total = rows * chunksPerRow;
  for (int it = 0; it * nthreads < total; ++it) {
    auto emitOne = [&]() {
      Value cidx = ops.add(tid, ops.ci32(it * nthreads));
      Value row = arith::DivUIOp::create(b, cidx, ops.ci32(chunksPerRow));
      Value col = arith::RemUIOp::create(b, cidx, ops.ci32(chunksPerRow));
      Value grow = ops.add(row0, row);
      Value valid = ops.cmp(arith::CmpIPredicate::slt, grow, seqlen);
      Value srow = ops.sel(valid, grow, ops.ci32(0)); // not read: size 0
      Value src =
          ops.gepBytes(gBase, ops.add(ops.mul(ops.ext64(srow), stride),
                                      ops.ext64(ops.mul(col, ops.ci32(16)))));
      Value dst = ops.gepBytes(
          smem, ops.ext64(tileOffset(ops, row, col, rows, dimBytes / 2,
                                     /*swizzled=*/true)));
      Value size = ops.sel(valid, ops.ci32(16), ops.ci32(0));
      NVVM::CpAsyncOp::create(
          b, dst, src, b.getI32IntegerAttr(16),
          NVVM::LoadCacheModifierKindAttr::get(b.getContext(),
                                               NVVM::LoadCacheModifierKind::CG),
          size);
    };
    if ((it + 1) * nthreads <= total)
      emitOne();
    else
      ops.ifThen(ops.cmp(arith::CmpIPredicate::ult,
                         ops.add(tid, ops.ci32(it * nthreads)),
                         ops.ci32(total)),
                 emitOne);
  }
}

} // namespace flashjit::nvvm
