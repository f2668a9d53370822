//===- GridConstantArgs.cpp - By-value grid-constant kernel arguments -----===//
//
// TMA tensor maps (CUtensorMap, 128 bytes) travel as by-value kernel
// parameters that the kernel reads where they are, in parameter space,
// through their generic address (PTX ISA "Kernel Function Parameters":
// the address of a kernel parameter; CUDA's __grid_constant__). In LLVM IR
// that is a `ptr byval([128 x i8]) align 64` argument with the
// "nvvm.grid_constant" attribute; without it NVPTX copies the parameter to
// local memory, which the TMA unit cannot read. MLIR's NVVM dialect accepts
// nvvm.grid_constant only on the arguments of llvm.func kernels, and
// convert-gpu-to-nvvm drops llvm.byval from gpu.func arguments, so the
// kernel builders name the arguments in a function attribute
// (kGridConstantArgsAttr) that the lowering keeps, and this pass, run on
// the gpu.module right after convert-gpu-to-nvvm, turns it into the three
// argument attributes.
//
//===----------------------------------------------------------------------===//
#include "flashjit/Conversion/GridConstantArgs.h"
#include "flashjit/runtime/KernelAbi.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace flashjit {
namespace {

struct MarkGridConstantArgs
    : public PassWrapper<MarkGridConstantArgs,
                         OperationPass<gpu::GPUModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MarkGridConstantArgs)

  StringRef getArgument() const final { return "flashjit-mark-grid-constants"; }
  StringRef getDescription() const final {
    return "llvm.func kernels: the arguments named by "
           "flashjit.grid_constant_args become by-value grid constants";
  }

  void runOnOperation() final {
    WalkResult r = getOperation().walk([&](LLVM::LLVMFuncOp fn) {
      auto args = fn->getAttrOfType<DenseI32ArrayAttr>(kGridConstantArgsAttr);
      if (!args)
        return WalkResult::advance();
      if (!fn->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName())) {
        fn.emitOpError() << kGridConstantArgsAttr << " on a non-kernel";
        return WalkResult::interrupt();
      }
      Builder b(fn.getContext());
      auto bytes = LLVM::LLVMArrayType::get(
          IntegerType::get(fn.getContext(), 8), abi::gpu::kTensorMapBytes);
      for (int32_t i : args.asArrayRef()) {
        if (i < 0 || i >= int32_t(fn.getNumArguments()) ||
            !isa<LLVM::LLVMPointerType>(fn.getArgument(i).getType())) {
          fn.emitOpError() << kGridConstantArgsAttr << ": argument " << i
                           << " is not a pointer argument";
          return WalkResult::interrupt();
        }
        fn.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(),
                      TypeAttr::get(bytes));
        fn.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                      b.getI64IntegerAttr(kTensorMapAlign));
        fn.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(),
                      b.getUnitAttr());
      }
      fn->removeAttr(kGridConstantArgsAttr);
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<Pass> createMarkGridConstantArgsPass() {
  return std::make_unique<MarkGridConstantArgs>();
}

} // namespace flashjit
