//===- KernelRegions.h - The user's regions inside generated kernels -*- C++
//-*-//
//
// attn-tile (the attention kernel) and attn-build-block-mask (the block-mask
// builder) both clone the mask and score regions of an attn.attention into
// their functions, with each attn.param replaced by the kernel argument that
// carries it and each attn.buffer_load by a bounds-checked attn.load_elem
// on the buffer's (data, size) arguments that reports to `status`.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_DIALECT_ATTN_TRANSFORMS_KERNELREGIONS_H
#define FLASHJIT_DIALECT_ATTN_TRANSFORMS_KERNELREGIONS_H

#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Region.h"

#include <utility>

namespace flashjit::attn {

/// The function arguments the cloned regions read.
struct KernelRegionArgs {
  /// The value of parameter \p name (null if \p op declares none).
  llvm::function_ref<mlir::Value(llvm::StringRef name)> param;
  /// (data pointer, i64 size) of the buffer with index \p slot in \p op's
  /// sorted `buffers`.
  llvm::function_ref<std::pair<mlir::Value, mlir::Value>(unsigned slot)> buffer;
  /// The i32 status array the out-of-range flags go to.
  mlir::Value status;
};

/// Clones \p from (a region of \p op) into the empty region \p to, with
/// attn.param and attn.buffer_load replaced as stated above.
void cloneKernelRegion(AttentionOp op, mlir::Region &from, mlir::Region &to,
                       const KernelRegionArgs &args);

/// The index of buffer \p name in \p op's sorted `buffers` (the slot that
/// KernelRegionArgs::buffer takes).
unsigned bufferSlot(AttentionOp op, llvm::StringRef name);

/// Element \p index (i64, known to be in range) of type \p type of the host
/// buffer at \p data (!llvm.ptr): a plain load, no bounds check, no status.
/// The CPU builders' BufferReader::loadElement (TileClassifier.h).
mlir::Value loadHostElement(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Type type, mlir::Value data,
                            mlir::Value index);

/// The builder of a generated kernel function and the i64 arithmetic both
/// emitters (attn-tile, attn-build-block-mask) write their index code with.
class I64Emitter {
protected:
  I64Emitter(mlir::Location loc, mlir::MLIRContext *ctx) : b(loc, ctx) {}

  mlir::Value c(int64_t v) {
    return mlir::arith::ConstantOp::create(b, b.getI64IntegerAttr(v));
  }
  mlir::Value add(mlir::Value x, mlir::Value y) {
    return mlir::arith::AddIOp::create(b, x, y);
  }
  mlir::Value sub(mlir::Value x, mlir::Value y) {
    return mlir::arith::SubIOp::create(b, x, y);
  }
  mlir::Value mul(mlir::Value x, mlir::Value y) {
    return mlir::arith::MulIOp::create(b, x, y);
  }
  /// Logical not of an i1.
  mlir::Value notV(mlir::Value x) {
    return mlir::arith::XOrIOp::create(
        b, x, mlir::arith::ConstantOp::create(b, b.getBoolAttr(true)));
  }
  /// ceil(x / d) for x >= 0.
  mlir::Value ceilDiv(mlir::Value x, int64_t d) {
    return mlir::arith::DivSIOp::create(b, add(x, c(d - 1)), c(d));
  }

  mlir::ImplicitLocOpBuilder b;
};

} // namespace flashjit::attn

#endif // FLASHJIT_DIALECT_ATTN_TRANSFORMS_KERNELREGIONS_H
