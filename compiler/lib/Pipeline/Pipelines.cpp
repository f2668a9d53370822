//===- Pipelines.cpp - Named pass pipelines of the compiler ---------------===//
#include "flashjit/Pipeline/Pipelines.h"

#include "flashjit/Conversion/Passes.h"
#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace flashjit {

void buildAttnToTilesPipeline(OpPassManager &pm, const TileOptions &options) {
  if (options.backward) {
    attn::AttnTileBackwardOptions bwd;
    bwd.blockM = options.blockM;
    bwd.blockN = options.blockN;
    bwd.varlen = options.varlen;
    bwd.blockSparse = options.blockSparse;
    pm.addPass(attn::createAttnTileBackward(bwd));
  }
  if (options.blockSparse && !options.backward) {
    attn::AttnBuildBlockMaskOptions builder;
    builder.blockM = options.blockM;
    builder.blockN = options.blockN;
    builder.varlen = options.varlen;
    pm.addPass(attn::createAttnBuildBlockMask(builder));
  }
  attn::AttnTileOptions tile;
  tile.blockM = options.blockM;
  tile.blockN = options.blockN;
  tile.countTiles = options.countTiles;
  tile.varlen = options.varlen;
  tile.blockSparse = options.blockSparse;
  if (!options.backward)
    pm.addPass(attn::createAttnTile(tile));
  pm.addPass(attn::createAttnExpandScalar());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void buildTilesToLLVMCPUPipeline(OpPassManager &pm) {
  pm.addPass(createConvertAttnToSCF());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void registerFlashjitDialects(DialectRegistry &registry) {
  registry.insert<attn::AttnDialect, func::FuncDialect, arith::ArithDialect,
                  math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                  cf::ControlFlowDialect, LLVM::LLVMDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

namespace {
struct TilePipelineOptions : public PassPipelineOptions<TilePipelineOptions> {
  Option<int64_t> blockM{*this, "block-m", llvm::cl::desc("queries per tile"),
                         llvm::cl::init(64)};
  Option<int64_t> blockN{*this, "block-n", llvm::cl::desc("keys per tile"),
                         llvm::cl::init(64)};
  Option<bool> countTiles{*this, "count-tiles",
                          llvm::cl::desc("count tile classes"),
                          llvm::cl::init(false)};
  Option<bool> varlen{*this, "varlen",
                      llvm::cl::desc("packed variable-length sequences"),
                      llvm::cl::init(false)};
  Option<bool> blockSparse{*this, "block-sparse",
                           llvm::cl::desc("block-sparse kernels and their "
                                          "block-mask builders"),
                           llvm::cl::init(false)};
  Option<bool> backward{*this, "backward",
                        llvm::cl::desc("the backward kernels "
                                       "(attn-tile-backward)"),
                        llvm::cl::init(false)};
  TileOptions get() const {
    return {blockM, blockN, countTiles, varlen, blockSparse, backward};
  }
};
} // namespace

void registerFlashjitPassesAndPipelines() {
  attn::registerAttnPasses();
  registerFlashjitConversionPasses();
  PassPipelineRegistration<TilePipelineOptions>(
      "attn-to-tiles", "attn.attention to the FlashAttention-2 tile program",
      [](OpPassManager &pm, const TilePipelineOptions &o) {
        buildAttnToTilesPipeline(pm, o.get());
      });
  PassPipelineRegistration<>(
      "attn-tiles-to-llvm-cpu", "tile program to the LLVM dialect (CPU)",
      [](OpPassManager &pm) { buildTilesToLLVMCPUPipeline(pm); });
  PassPipelineRegistration<TilePipelineOptions>(
      "attn-to-llvm-cpu", "attn.attention to the LLVM dialect (CPU)",
      [](OpPassManager &pm, const TilePipelineOptions &o) {
        buildAttnToTilesPipeline(pm, o.get());
        buildTilesToLLVMCPUPipeline(pm);
      });
}

} // namespace flashjit
