//===- KernelRegions.cpp - The user's regions inside generated kernels ----===//
#include "flashjit/Dialect/Attn/Transforms/KernelRegions.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;

namespace flashjit::attn {

void cloneKernelRegion(AttentionOp op, Region &from, Region &to,
                       const KernelRegionArgs &args) {
  IRMapping map;
  from.cloneInto(&to, map);
  SmallVector<Operation *> dead;
  to.walk([&](Operation *inner) {
    if (auto p = dyn_cast<ParamOp>(inner)) {
      p.getResult().replaceAllUsesWith(args.param(p.getName()));
      dead.push_back(p);
    } else if (auto l = dyn_cast<BufferLoadOp>(inner)) {
      unsigned slot = bufferSlot(op, l.getName());
      auto [data, size] = args.buffer(slot);
      OpBuilder ib(l);
      auto load =
          LoadElemOp::create(ib, l.getLoc(), l.getType(), data, l.getIndex(),
                             size, args.status, ib.getI64IntegerAttr(slot));
      l.getResult().replaceAllUsesWith(load.getResult());
      dead.push_back(l);
    }
  });
  for (Operation *d : dead)
    d->erase();
}

unsigned bufferSlot(AttentionOp op, StringRef name) {
  unsigned slot = 0;
  for (NamedAttribute d : op.getBuffers()) {
    if (d.getName() == name)
      break;
    ++slot;
  }
  return slot;
}

Value loadHostElement(OpBuilder &b, Location loc, Type type, Value data,
                      Value index) {
  Type ptr = LLVM::LLVMPointerType::get(b.getContext());
  Value p = LLVM::GEPOp::create(b, loc, ptr, type, data, ValueRange{index});
  return LLVM::LoadOp::create(b, loc, type, p);
}

} // namespace flashjit::attn
