//===- Tma.cpp - TMA bulk tensor copies and mbarriers ---------------------===//
#include "Tma.h"

using namespace mlir;

namespace flashjit::nvvm {

/// The 32-bit shared-window address of \p p (!llvm.ptr<3>), the form the
/// .shared::cta operands of mbarrier and cp.async.bulk take.
static Value sharedAddr(KernelOps &ops, Value p) {
  return LLVM::PtrToIntOp::create(ops.b, ops.i32, p);
}

void mbarrierInit(KernelOps &ops, Value bar, int count) {
  ops.inlineAsm(Type(), {sharedAddr(ops, bar), ops.ci32(count)},
                "mbarrier.init.shared::cta.b64 [$0], $1;\n"
                "fence.mbarrier_init.release.cluster;\n"
                "fence.proxy.async.shared::cta;",
                "r,r");
}

void mbarrierArriveExpectTx(KernelOps &ops, Value bar, int64_t bytes) {
  ops.inlineAsm(Type(), {sharedAddr(ops, bar), ops.ci32(bytes)},
                "{\n.reg .b64 state;\n"
                "mbarrier.arrive.expect_tx.shared::cta.b64 state, [$0], $1;\n}",
                "r,r");
}

void mbarrierArrive(KernelOps &ops, Value bar) {
  ops.inlineAsm(Type(), {sharedAddr(ops, bar)},
                "{\n.reg .b64 state;\n"
                "mbarrier.arrive.shared::cta.b64 state, [$0];\n}",
                "r");
}

void mbarrierArriveIf(KernelOps &ops, Value bar, Value flag) {
  ops.inlineAsm(Type(), {sharedAddr(ops, bar), flag},
                "{\n.reg .pred p;\n.reg .b64 state;\n"
                "setp.ne.u32 p, $1, 0;\n"
                "@p mbarrier.arrive.shared::cta.b64 state, [$0];\n}",
                "r,r");
}

void mbarrierWait(KernelOps &ops, Value bar, Value parity) {
  // Labels inside a { } block are local to it, so the block can appear
  // any number of times in a kernel.
  ops.inlineAsm(Type(), {sharedAddr(ops, bar), parity},
                "{\n.reg .pred done;\n"
                "wait_again:\n"
                "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
                "@!done bra wait_again;\n}",
                "r,r");
}

void tmaLoad4d(KernelOps &ops, Value dst, Value tensorMap,
               ArrayRef<Value> coords, Value bar) {
  assert(coords.size() == 4 && "a 4-d box");
  SmallVector<Value> operands{sharedAddr(ops, dst), tensorMap};
  operands.append(coords.begin(), coords.end());
  operands.push_back(sharedAddr(ops, bar));
  ops.inlineAsm(Type(), operands,
                "cp.async.bulk.tensor.4d.shared::cluster.global.tile."
                "mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], "
                "[$6];",
                "r,l,r,r,r,r,r");
}

} // namespace flashjit::nvvm
