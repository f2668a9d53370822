//===- CpuCompile.cpp - AttentionSpec to a JIT-compiled CPU kernel --------===//
//
// The driver of the CPU backend: validate (UserError, before MLIR), MLIRGen,
// the attn-to-tiles and tiles-to-LLVM pipelines, translation to LLVM IR,
// LLVM optimisation and ORC JIT code generation through
// mlir::ExecutionEngine, timing each step and keeping each stage's text.
// Pass failures become CompileError carrying the diagnostics.
//
//===----------------------------------------------------------------------===//
#include "CompileSupport.h"
#include "CompilerImpl.h"

#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/FrontendToMLIR/MLIRGen.h"
#include "flashjit/Pipeline/Pipelines.h"
#include "flashjit/frontend/Error.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>

using namespace mlir;

namespace flashjit {
namespace {

/// Set when the process exits. A JIT engine destroyed during static
/// destruction (a kernel held in a static) would touch LLVM's function-local
/// statics after they were destroyed (seen as crashes and exit(1) at exit),
/// so engines still alive then are leaked instead; the OS reclaims them.
std::atomic<bool> processExiting{false};

void initLLVMOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // Registered before any engine exists, so it runs before the
    // destructor of any static that holds one.
    std::atexit([] { processExiting = true; });
  });
}

std::string printModule(const llvm::Module &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

std::unique_ptr<MLIRContext> makeContext() {
  DialectRegistry registry;
  registerFlashjitDialects(registry);
  auto ctx =
      std::make_unique<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  return ctx;
}

/// JIT-compiles an LLVM-dialect module; returns the engine and the packed
/// entry point of \p symbol. Optionally records the LLVM IR before and after
/// optimisation and the time spent.
std::pair<std::shared_ptr<void>, PackedFn>
jit(ModuleOp module, const std::string &symbol, int optLevel,
    std::string *irText, std::string *optText,
    std::vector<StageTiming> *timings) {
  initLLVMOnce();
  auto tmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!tmb)
    throw CompileError("cannot detect the host target: " +
                       llvm::toString(tmb.takeError()));
  auto tm = tmb->createTargetMachine();
  if (!tm)
    throw CompileError("cannot create the host target machine: " +
                       llvm::toString(tm.takeError()));
  double translateS = 0, optS = 0;
  auto builder = [&](Operation *op,
                     llvm::LLVMContext &lc) -> std::unique_ptr<llvm::Module> {
    StopWatch w;
    auto m = translateModuleToLLVMIR(op, lc, symbol);
    if (m && irText)
      *irText = printModule(*m);
    translateS = w.lap();
    return m;
  };
  auto optimize = makeOptimizingTransformer(optLevel, 0, tm->get());
  auto transformer = [&](llvm::Module *m) -> llvm::Error {
    StopWatch w;
    if (llvm::Error e = optimize(m))
      return e;
    if (optText)
      *optText = printModule(*m);
    optS = w.lap();
    return llvm::Error::success();
  };
  ExecutionEngineOptions eo;
  eo.llvmModuleBuilder = builder;
  eo.transformer = transformer;
  eo.jitCodeGenOptLevel = optLevel >= 2 ? llvm::CodeGenOptLevel::Default
                                        : llvm::CodeGenOptLevel::Less;
  eo.enableGDBNotificationListener = false;
  eo.enablePerfNotificationListener = false;
  StopWatch w;
  auto engine = ExecutionEngine::create(module, eo);
  if (!engine)
    throw CompileError("cannot create the JIT: " +
                       llvm::toString(engine.takeError()));
  std::shared_ptr<ExecutionEngine> held(engine->release(),
                                        [](ExecutionEngine *e) {
                                          if (!processExiting)
                                            delete e;
                                        });
  double createS = w.lap();
  auto fn = held->lookupPacked(symbol);
  if (!fn)
    throw CompileError("JIT lookup of '" + symbol +
                       "' failed: " + llvm::toString(fn.takeError()));
  double lookupS = w.lap();
  if (timings) {
    timings->push_back({"translate-to-llvm-ir", translateS});
    timings->push_back({"llvm-opt", optS});
    timings->push_back({"jit-codegen", std::max(0.0, createS - translateS) +
                                           std::max(0.0, lookupS - optS)});
  }
  return {std::static_pointer_cast<void>(held), *fn};
}

} // namespace

std::shared_ptr<const CpuKernel> compileCpu(const AttentionSpec &spec,
                                            const CompileOptions &options) {
  validateForCpu(spec, options); // every UserError before MLIR/LLVM
  StopWatch total, w;
  auto impl = std::make_unique<CpuKernel::Impl>();
  impl->spec = spec;
  impl->blockM = options.blockM ? options.blockM : 64;
  impl->blockN = options.blockN ? options.blockN : 64;
  impl->countTiles = options.countTiles;
  impl->params = sortedParams(spec.variant);
  impl->buffers = sortedBuffers(spec.variant);
  auto &texts = impl->texts;
  auto &timings = impl->timings;

  std::unique_ptr<MLIRContext> ctx = makeContext();
  DiagnosticCapture diag(ctx.get());
  timings.push_back({"mlir-context", w.lap()});
  OwningOpRef<ModuleOp> module = mlirGen(*ctx, spec);
  if (!module)
    throw CompileError("MLIRGen produced invalid IR:\n" + diag.text());
  texts[0] = printOp(*module, /*withLocations=*/true);
  timings.push_back({"mlirgen", w.lap()});

  // The JIT symbol gets a prefix so a variant named like a libm function
  // (exp2, tanhf) cannot collide with what the kernel calls.
  std::string symbol = "flashjit_" + spec.variant.name();
  module->walk([&](attn::AttentionOp op) { op.setSymName(symbol); });
  runPipeline(*ctx, *module, "attn-to-tiles", diag, [&](OpPassManager &pm) {
    buildAttnToTilesPipeline(pm,
                             {impl->blockM, impl->blockN, options.countTiles});
  });
  texts[1] = printOp(*module, false);
  timings.push_back({"attn-to-tiles", w.lap()});
  runPipeline(*ctx, *module, "tiles-to-llvm-cpu", diag,
              [&](OpPassManager &pm) { buildTilesToLLVMCPUPipeline(pm); });
  texts[2] = printOp(*module, false);
  timings.push_back({"tiles-to-llvm-dialect", w.lap()});

  auto [engine, fn] =
      jit(*module, symbol, options.optLevel, &texts[3], &texts[4], &timings);
  impl->engine = std::move(engine);
  impl->fn = fn;
  w.lap();
  std::string dir = options.dumpDir;
  if (dir.empty())
    if (const char *env = std::getenv("FLASHJIT_DUMP_DIR"))
      dir = env;
  if (!dir.empty())
    dumpFiles(dir, spec.variant.name(),
              {{".attn.mlir", texts[0]},
               {".tiled.mlir", texts[1]},
               {".llvm.mlir", texts[2]},
               {".ll", texts[3]},
               {".opt.ll", texts[4]}});
  timings.push_back({"total", total.lap()});
  return std::make_shared<const CpuKernel>(std::move(impl));
}

std::shared_ptr<const TileClassifierKernel>
compileTileClassifier(const AttentionSpec &spec) {
  spec.validate();
  auto impl = std::make_unique<TileClassifierKernel::Impl>();
  impl->params = sortedParams(spec.variant);
  std::unique_ptr<MLIRContext> ctx = makeContext();
  DiagnosticCapture diag(ctx.get());
  OwningOpRef<ModuleOp> module = mlirGen(*ctx, spec);
  if (!module)
    throw CompileError("MLIRGen produced invalid IR:\n" + diag.text());
  std::string symbol = "flashjit_" + spec.variant.name();
  module->walk([&](attn::AttentionOp op) { op.setSymName(symbol); });
  runPipeline(*ctx, *module, "attn-test-classify", diag, [](OpPassManager &pm) {
    pm.addPass(attn::createAttnTestClassify());
  });
  module->walk([](attn::AttentionOp op) { op.erase(); });
  runPipeline(*ctx, *module, "tiles-to-llvm-cpu", diag,
              [&](OpPassManager &pm) { buildTilesToLLVMCPUPipeline(pm); });
  auto [engine, fn] =
      jit(*module, symbol + "_classify", 2, nullptr, nullptr, nullptr);
  impl->engine = std::move(engine);
  impl->fn = fn;
  return std::make_shared<const TileClassifierKernel>(std::move(impl));
}

} // namespace flashjit
