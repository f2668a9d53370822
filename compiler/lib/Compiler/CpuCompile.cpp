//===- CpuCompile.cpp - AttentionSpec to a JIT-compiled CPU kernel --------===//
//
// The driver of the CPU backend: validate (UserError, before MLIR), MLIRGen,
// the attn-to-tiles and tiles-to-LLVM pipelines, translation to LLVM IR,
// LLVM optimisation, then either ORC JIT code generation through
// mlir::ExecutionEngine (compileCpu: in memory) or a PIC object for the host
// CPU linked into kernel.so (compileCpuArtifacts: for the disk cache and
// bundles), timing each step and keeping each stage's text. Pass failures
// become CompileError carrying the diagnostics.
//
//===----------------------------------------------------------------------===//
#include "CompileSupport.h"
#include "CompilerImpl.h"
#include "CpuObject.h"

#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/Dialect/Attn/Transforms/Passes.h"
#include "flashjit/FrontendToMLIR/MLIRGen.h"
#include "flashjit/Pipeline/Pipelines.h"
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/KernelAbi.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string_view>

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
    std::vector<StageTiming> *timings,
    const std::vector<std::pair<std::string, PackedFn *>> &extra = {}) {
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
  for (auto &[name, out] : extra) {
    auto f = held->lookupPacked(name);
    if (!f)
      throw CompileError("JIT lookup of '" + name +
                         "' failed: " + llvm::toString(f.takeError()));
    *out = *f;
  }
  double lookupS = w.lap();
  if (timings) {
    timings->push_back({"translate-to-llvm-ir", translateS});
    timings->push_back({"llvm-opt", optS});
    timings->push_back({"jit-codegen", std::max(0.0, createS - translateS) +
                                           std::max(0.0, lookupS - optS)});
  }
  return {std::static_pointer_cast<void>(held), *fn};
}

/// A spec lowered to the LLVM dialect. Members are destroyed in reverse
/// order: the module and the diagnostic handler before their context.
struct Lowered {
  std::unique_ptr<MLIRContext> ctx;
  std::unique_ptr<DiagnosticCapture> diag;
  OwningOpRef<ModuleOp> module;
  /// The kernel's symbol: the variant's name with a prefix, so a variant
  /// named like a libm function (exp2, tanhf) cannot collide with what the
  /// kernel calls.
  std::string symbol;
};

/// MLIRGen and the MLIR pipelines; records texts[0..2] and their times.
Lowered lowerToLLVMDialect(const AttentionSpec &spec, const TileOptions &tile,
                           std::array<std::string, 5> &texts,
                           std::vector<StageTiming> &timings, StopWatch &w) {
  Lowered l;
  l.ctx = makeContext();
  l.diag = std::make_unique<DiagnosticCapture>(l.ctx.get());
  timings.push_back({"mlir-context", w.lap()});
  // FP8 specs compile the f32 kernel: the runtime dequantises fp8 inputs
  // on load (CpuAttentionKernel, Fp8.h).
  l.module =
      mlirGen(*l.ctx, fp8ComputeSpec(spec),
              tile.backward ? KernelKind::Backward : KernelKind::Forward);
  if (!l.module)
    throw CompileError("MLIRGen produced invalid IR:\n" + l.diag->text());
  texts[0] = printOp(*l.module, /*withLocations=*/true);
  timings.push_back({"mlirgen", w.lap()});

  l.symbol = "flashjit_" + spec.variant.name() + (tile.backward ? "_bwd" : "");
  l.module->walk([&](attn::AttentionOp op) { op.setSymName(l.symbol); });
  runPipeline(*l.ctx, *l.module, "attn-to-tiles", *l.diag,
              [&](OpPassManager &pm) { buildAttnToTilesPipeline(pm, tile); });
  texts[1] = printOp(*l.module, false);
  timings.push_back({"attn-to-tiles", w.lap()});
  runPipeline(*l.ctx, *l.module, "tiles-to-llvm-cpu", *l.diag,
              [&](OpPassManager &pm) { buildTilesToLLVMCPUPipeline(pm); });
  texts[2] = printOp(*l.module, false);
  timings.push_back({"tiles-to-llvm-dialect", w.lap()});
  return l;
}

/// Writes the stages to options.dumpDir, else $FLASHJIT_DUMP_DIR, if any,
/// as <variant name><suffix>.<cache key>.<stage>: two compiles of different
/// specs or options never overwrite each other's files (\p suffix "_bwd"
/// keeps a backward's files apart from its forward's).
void dumpStages(const AttentionSpec &spec, const CompileOptions &options,
                const std::array<std::string, 5> &texts,
                std::string_view suffix = "") {
  std::string dir = options.dumpDir;
  if (dir.empty())
    if (const char *env = std::getenv("FLASHJIT_DUMP_DIR"))
      dir = env;
  if (!dir.empty())
    dumpFiles(dir,
              fmt::format("{}{}.{}", spec.variant.name(), suffix,
                          cpuCacheKey(spec, options).hash()),
              {{".attn.mlir", texts[0]},
               {".tiled.mlir", texts[1]},
               {".llvm.mlir", texts[2]},
               {".ll", texts[3]},
               {".opt.ll", texts[4]}});
}

} // namespace

int cpuBlockM(const CompileOptions &options) {
  return options.blockM ? options.blockM : runtime::kDefaultCpuBlock;
}
int cpuBlockN(const CompileOptions &options) {
  return options.blockN ? options.blockN : runtime::kDefaultCpuBlock;
}

KernelConfig cpuKernelConfig(const CompileOptions &options) {
  KernelConfig c;
  c.arch = "cpu";
  c.cpuBlockM = cpuBlockM(options);
  c.blockN = cpuBlockN(options);
  c.countTiles = options.countTiles;
  c.varlen = options.varlen;
  c.blockSparse = options.blockSparse;
  c.optLevel = options.optLevel;
  return c;
}

std::shared_ptr<const CpuKernel> compileCpu(const AttentionSpec &spec,
                                            const CompileOptions &options) {
  validateForCpu(spec, options); // every UserError before MLIR/LLVM
  StopWatch total, w;
  std::array<std::string, 5> texts;
  std::vector<StageTiming> timings;
  KernelConfig info = cpuKernelConfig(options);
  Lowered l = lowerToLLVMDialect(spec,
                                 {info.cpuBlockM, info.blockN, info.countTiles,
                                  info.varlen, info.blockSparse},
                                 texts, timings, w);
  PackedFn builder = nullptr;
  std::vector<std::pair<std::string, PackedFn *>> extra;
  if (options.blockSparse)
    extra.push_back({l.symbol + abi::kBlockMaskSuffix, &builder});
  auto [engine, fn] = jit(*l.module, l.symbol, options.optLevel, &texts[3],
                          &texts[4], &timings, extra);
  runtime::CpuAttentionKernel kernel(spec, info, fn, std::move(engine),
                                     builder);
  w.lap();
  dumpStages(spec, options, texts);
  timings.push_back({"total", total.lap()});
  return std::make_shared<const CpuKernel>(
      std::move(kernel), std::move(timings), std::move(texts));
}

AttentionSpec backwardSpec(const AttentionSpec &spec) {
  AttentionSpec s = spec;
  s.returnLse = true; // the backward reads LSE whatever the forward returns
  return s;
}

/// Every UserError of a backward compile, before MLIR: the forward's checks
/// and the score modifier's differentiability (at the user's line).
void validateBackwardForCpu(const AttentionSpec &spec,
                            const CompileOptions &options) {
  validateForCpu(spec, options);
  rejectFp8(spec, "the backward");
  if (options.countTiles)
    throw UserError("CompileOptions::countTiles is not supported by the "
                    "backward kernels");
  const Expr &mod = spec.variant.scoreExpr();
  (void)differentiateScoreMod(mod, differentiableParams(mod));
}

std::shared_ptr<const CpuBackward>
compileCpuBackward(const AttentionSpec &specIn, const CompileOptions &options) {
  AttentionSpec spec = backwardSpec(specIn);
  validateBackwardForCpu(spec, options);
  StopWatch total, w;
  std::array<std::string, 5> texts;
  std::vector<StageTiming> timings;
  KernelConfig config = cpuKernelConfig(options);
  config.kind = KernelKind::Backward;
  TileOptions tile{config.cpuBlockM, config.blockN,      false,
                   config.varlen,    config.blockSparse, /*backward=*/true};
  Lowered l = lowerToLLVMDialect(spec, tile, texts, timings, w);
  PackedFn dq = nullptr;
  auto [engine, fn] =
      jit(*l.module, l.symbol, options.optLevel, &texts[3], &texts[4], &timings,
          {{l.symbol + abi::bwd::kDqSuffix, &dq}});
  runtime::CpuBackwardKernel kernel(spec, config, fn, dq, std::move(engine));
  w.lap();
  dumpStages(spec, options, texts, "_bwd");
  timings.push_back({"total", total.lap()});
  return std::make_shared<const CpuBackward>(
      std::move(kernel), std::move(timings), std::move(texts));
}

/// compileCpuArtifacts and compileCpuBackwardArtifacts: \p spec (the
/// backward's backwardSpec) lowered with \p tile, its packed entries
/// \p symbols (suffixes of the kernel's symbol; "" is the symbol itself) and
/// the `<symbol>_config` export of \p config, as an object and kernel.so.
static runtime::KernelArtifacts
compileCpuObject(const AttentionSpec &spec, const CompileOptions &options,
                 const KernelConfig &config, const TileOptions &tile,
                 const std::vector<std::string> &suffixes,
                 const char *dumpSuffix) {
  std::string why;
  std::string cc = findCCompiler(&why);
  if (cc.empty())
    throw CompileError("cannot link a CPU kernel into a shared object: " + why);
  StopWatch total, w;
  std::array<std::string, 5> texts;
  std::vector<StageTiming> timings;
  Lowered l = lowerToLLVMDialect(spec, tile, texts, timings, w);

  initLLVMOnce();
  std::unique_ptr<llvm::TargetMachine> tm =
      createHostTargetMachine(options.optLevel);
  llvm::LLVMContext lc;
  std::unique_ptr<llvm::Module> m =
      translateModuleToLLVMIR(*l.module, lc, l.symbol);
  if (!m)
    throw CompileError("translation to LLVM IR failed:\n" + l.diag->text());
  texts[3] = printModule(*m);
  m->setDataLayout(tm->createDataLayout());
  m->setTargetTriple(tm->getTargetTriple());
  for (const std::string &suffix : suffixes)
    addPackedEntry(*m, l.symbol + suffix);
  addConfigSymbol(*m, l.symbol, config);
  timings.push_back({"translate-to-llvm-ir", w.lap()});
  if (llvm::Error e =
          makeOptimizingTransformer(options.optLevel, 0, tm.get())(m.get()))
    throw CompileError("LLVM optimisation failed: " +
                       llvm::toString(std::move(e)));
  texts[4] = printModule(*m);
  timings.push_back({"llvm-opt", w.lap()});
  std::string object = emitObject(*m, *tm);
  timings.push_back({"codegen-object", w.lap()});
  std::string so =
      linkSharedObject(cc, object, referencesUndefinedSymbols(object));
  timings.push_back({"link-shared-object", w.lap()});
  dumpStages(spec, options, texts, dumpSuffix);
  timings.push_back({"total", total.lap()});

  runtime::KernelArtifacts a;
  a.entry = l.symbol;
  a.specText = printSpec(spec);
  a.config = config;
  a.cpu = runtime::hostCpu().name;
  a.cpuFeatures = runtime::hostCpu().features;
  for (const StageTiming &t : timings)
    a.stageSeconds.push_back({t.name, t.seconds});
  a.files[runtime::kAttnFile] = std::move(texts[0]);
  a.files[runtime::kTiledFile] = std::move(texts[1]);
  a.files[runtime::kLLVMDialectFile] = std::move(texts[2]);
  a.files[runtime::kLLVMIRFile] = std::move(texts[3]);
  a.files[runtime::kLLVMIROptFile] = std::move(texts[4]);
  a.files[runtime::kObjectFile] = std::move(object);
  a.files[runtime::kSharedObjectFile] = std::move(so);
  return a;
}

runtime::KernelArtifacts compileCpuArtifacts(const AttentionSpec &spec,
                                             const CompileOptions &options) {
  validateForCpu(spec, options); // every UserError before MLIR/LLVM
  KernelConfig config = cpuKernelConfig(options);
  std::vector<std::string> suffixes = {""};
  if (options.blockSparse)
    suffixes.push_back(abi::kBlockMaskSuffix);
  return compileCpuObject(spec, options, config,
                          {config.cpuBlockM, config.blockN, config.countTiles,
                           config.varlen, config.blockSparse},
                          suffixes, "");
}

runtime::KernelArtifacts
compileCpuBackwardArtifacts(const AttentionSpec &specIn,
                            const CompileOptions &options) {
  AttentionSpec spec = backwardSpec(specIn);
  validateBackwardForCpu(spec, options); // every UserError before MLIR/LLVM
  KernelConfig config = cpuKernelConfig(options);
  config.kind = KernelKind::Backward;
  return compileCpuObject(spec, options, config,
                          {config.cpuBlockM, config.blockN, false,
                           config.varlen, config.blockSparse,
                           /*backward=*/true},
                          {"", abi::bwd::kDqSuffix}, "_bwd");
}

std::shared_ptr<const TileClassifierKernel>
compileTileClassifier(const AttentionSpec &spec,
                      const TileClassOptions &options) {
  spec.validate();
  auto impl = std::make_unique<TileClassifierKernel::Impl>();
  impl->params = sortedParams(spec.variant);
  if (options.bufferRanges)
    impl->buffers = sortedBuffers(spec.variant);
  std::unique_ptr<MLIRContext> ctx = makeContext();
  DiagnosticCapture diag(ctx.get());
  OwningOpRef<ModuleOp> module = mlirGen(*ctx, fp8ComputeSpec(spec));
  if (!module)
    throw CompileError("MLIRGen produced invalid IR:\n" + diag.text());
  std::string symbol = "flashjit_" + spec.variant.name();
  module->walk([&](attn::AttentionOp op) { op.setSymName(symbol); });
  runPipeline(*ctx, *module, "attn-test-classify", diag,
              [&](OpPassManager &pm) {
                attn::AttnTestClassifyOptions o;
                o.bufferRanges = options.bufferRanges;
                pm.addPass(attn::createAttnTestClassify(o));
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

CpuAssembly cpuAssembly(const std::string &optimizedIR, int optLevel) {
  initLLVMOnce();
  llvm::LLVMContext lc;
  llvm::SMDiagnostic err;
  std::unique_ptr<llvm::Module> m =
      llvm::parseAssemblyString(optimizedIR, err, lc);
  if (!m)
    throw CompileError(fmt::format("the kernel's LLVM IR does not parse: "
                                   "line {}: {}",
                                   err.getLineNo(), err.getMessage().str()));
  std::unique_ptr<llvm::TargetMachine> tm = createHostTargetMachine(optLevel);
  tm->Options.MCOptions.AsmVerbose = true; // annotates spills and reloads
  m->setDataLayout(tm->createDataLayout());
  m->setTargetTriple(tm->getTargetTriple());
  llvm::SmallString<0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr,
                              llvm::CodeGenFileType::AssemblyFile))
    throw CompileError("the host target cannot emit assembly");
  pm.run(*m);

  CpuAssembly out;
  out.text = bytes.str().str();
  // Functions start at their label after `.type NAME,@function` and end at
  // `.Lfunc_end`; within them, count instructions, annotated spills and
  // reloads, and the first `subq $N, %rsp`.
  llvm::StringRef text(out.text);
  std::vector<std::string> functionNames;
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n');
  for (llvm::StringRef line : lines) {
    llvm::StringRef t = line.trim();
    if (t.consume_front(".type") && t.trim().ends_with("@function"))
      functionNames.push_back(t.trim().split(',').first.trim().str());
  }
  CpuFunctionResources *current = nullptr;
  for (llvm::StringRef line : lines) {
    llvm::StringRef t = line.trim();
    llvm::StringRef head = t.split('#').first.trim(); // `name: # comment`
    if (!line.starts_with("\t") && !line.starts_with(" ") &&
        head.ends_with(":")) {
      std::string label = head.drop_back().str();
      if (llvm::is_contained(functionNames, label)) {
        out.functions.push_back({label, 0, 0, 0, 0});
        current = &out.functions.back();
      } else if (llvm::StringRef(label).starts_with(".Lfunc_end")) {
        current = nullptr;
      }
      continue;
    }
    if (!current || t.empty() || t.starts_with(".") || t.starts_with("#"))
      continue;
    ++current->instructions;
    auto [code, comment] = t.split('#');
    if (comment.contains("Spill"))
      ++current->spillStores;
    if (comment.contains("Reload"))
      ++current->spillLoads;
    llvm::StringRef rest = code.trim();
    if (current->stackFrameBytes == 0 && rest.consume_front("subq")) {
      rest = rest.trim();
      auto [value, reg] = rest.split(',');
      int64_t n = 0;
      if (value.consume_front("$") && reg.trim() == "%rsp" &&
          !value.trim().getAsInteger(0, n))
        current->stackFrameBytes = n;
    }
  }
  return out;
}

} // namespace flashjit
