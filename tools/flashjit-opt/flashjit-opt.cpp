//===- flashjit-opt.cpp - mlir-opt with the attn dialect and passes -------===//
//
// Runs any flashjit or upstream pass (and the named pipelines attn-to-tiles,
// attn-tiles-to-llvm-cpu, attn-to-llvm-cpu) on an MLIR file; the driver of
// the lit tests in tests/lit.
//
//===----------------------------------------------------------------------===//
#include "flashjit/Pipeline/GpuPipelines.h"
#include "flashjit/Pipeline/Pipelines.h"

#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  flashjit::registerFlashjitDialects(registry);
  flashjit::registerGpuDialects(registry);
  flashjit::registerFlashjitPassesAndPipelines();
  flashjit::registerGpuPipelines();
  mlir::registerTransformsPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "flashjit optimizer driver\n", registry));
}
