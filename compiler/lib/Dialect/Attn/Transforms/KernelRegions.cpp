//===- KernelRegions.cpp - The user's regions inside generated kernels ----===//
#include "flashjit/Dialect/Attn/Transforms/KernelRegions.h"

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
      unsigned slot = 0;
      for (NamedAttribute d : op.getBuffers()) {
        if (d.getName() == l.getName())
          break;
        ++slot;
      }
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

} // namespace flashjit::attn
