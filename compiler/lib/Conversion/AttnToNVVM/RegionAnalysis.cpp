//===- RegionAnalysis.cpp - What the ops of an attn region read ----------===//
//
// RegionAnalysis.h: argument dependences, buffer reads and the index
// distance of the attn mask and score regions.
//
//===----------------------------------------------------------------------===//
#include "RegionAnalysis.h"

#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace flashjit::nvvm {

DenseMap<Operation *, unsigned>
argumentDependences(Block &body,
                    ArrayRef<std::pair<unsigned, unsigned>> seeds) {
  DenseMap<Value, unsigned> valueDep;
  for (auto [arg, bit] : seeds)
    valueDep[body.getArgument(arg)] |= bit;
  DenseMap<Operation *, unsigned> out;
  for (Operation &o : body.without_terminator()) {
    unsigned d = 0;
    o.walk([&](Operation *n) {
      for (Value x : n->getOperands())
        d |= valueDep.lookup(x);
    });
    out[&o] = d;
    for (Value r : o.getResults())
      valueDep[r] = d;
  }
  return out;
}

bool readsBuffers(Operation &o) {
  return o.walk([](attn::BufferLoadOp) { return WalkResult::interrupt(); })
      .wasInterrupted();
}

bool readsBuffers(Region &r) {
  return r.walk([](attn::BufferLoadOp) { return WalkResult::interrupt(); })
      .wasInterrupted();
}

Value floatIndexDistance(ImplicitLocOpBuilder &b, Operation &o, Value distF,
                         Value q, Value kv) {
  auto cvt = dyn_cast<arith::SIToFPOp>(o);
  if (!distF || !cvt || !cvt.getType().isF32())
    return Value();
  Value x = cvt.getIn();
  bool abs = false;
  if (auto a = x.getDefiningOp<math::AbsIOp>()) {
    abs = true;
    x = a.getOperand();
  }
  auto sub = x.getDefiningOp<arith::SubIOp>();
  if (!sub)
    return Value();
  bool qkv = sub.getLhs() == q && sub.getRhs() == kv;
  bool kvq = sub.getLhs() == kv && sub.getRhs() == q;
  if (!qkv && !kvq)
    return Value();
  if (abs)
    return math::AbsFOp::create(b, distF);
  return qkv ? distF : arith::NegFOp::create(b, distF).getResult();
}

} // namespace flashjit::nvvm
