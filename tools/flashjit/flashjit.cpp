//===- flashjit.cpp - The flashjit command-line tool ----------------------===//
//
//   flashjit compile --mask 'q_idx >= kv_idx' --head-dim 128 --target sm_90a
//   flashjit inspect --stage ptx|attn|gpu|resources|sass --spec '...'
//   flashjit inspect --stage derivative --score '...'   (no compile)
//   flashjit cache ls|info KEY|clear|prune [--max-bytes N]
//   flashjit bundle --out DIR --spec '...' --spec '...' --target sm_80,sm_90a
//
// GPU and CPU kernels go through the disk cache (FLASHJIT_CACHE_DIR etc., or
// --cache-dir); CPU kernels are compiled in memory when no C compiler
// driver is found to link them. Exit codes: 0 success, 1 a user error (bad
// flag, spec or key), 2 an internal, compiler or driver failure. Errors go to
// stderr.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Ptxas.h"

#include <fmt/format.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/Program.h>
#include <llvm/Support/raw_ostream.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <tuple>

namespace cl = llvm::cl;
namespace fs = llvm::sys::fs;
using namespace flashjit;
using namespace flashjit::runtime;

namespace {

cl::SubCommand compileCmd("compile", "Compile a spec and print where its "
                                     "artifacts are and the time per stage");
cl::SubCommand inspectCmd("inspect",
                          "Print one stage of a spec's kernel (compiling it "
                          "through the cache if needed)");
cl::SubCommand cacheCmd("cache", "Manage the kernel cache: ls, info KEY, "
                                 "clear, prune [--max-bytes N]");
cl::SubCommand bundleCmd("bundle", "Precompile specs into a directory a host "
                                   "application ships (runtime::Bundle)");

// Spec flags: compile and inspect take one spec, bundle several.
cl::list<std::string> specText("spec",
                               cl::desc("The spec in canonical text, e.g. "
                                        "'attention(causal=top_left)'"),
                               cl::sub(compileCmd), cl::sub(inspectCmd),
                               cl::sub(bundleCmd));
cl::opt<std::string>
    maskText("mask", cl::desc("Mask expression (default: true, every key)"),
             cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string>
    scoreText("score", cl::desc("Score modifier expression (default: score)"),
              cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<int> headDim("head-dim",
                     cl::desc("Head dim of Q, K and V (default: 128)"),
                     cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string> dtype("dtype",
                           cl::desc("bf16 | fp16 | fp32 (default: bf16)"),
                           cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<int> headsQ("heads-q", cl::desc("Query heads (default: 1)"),
                    cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<int> headsKV("heads-kv", cl::desc("Key/value heads, GQA (default: 1)"),
                     cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string>
    causal("causal", cl::desc("none | top_left | bottom_right (default: none)"),
           cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string> kernelName("name",
                                cl::desc("Kernel name (default: attention)"),
                                cl::sub(compileCmd), cl::sub(inspectCmd));

cl::list<std::string> targets("target",
                              cl::desc("sm_80 | sm_90a | cpu (default: sm_90a; "
                                       "bundle: a comma-separated list, "
                                       "default sm_80,sm_90a)"),
                              cl::CommaSeparated, cl::sub(compileCmd),
                              cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<int> blockN("block-n", cl::desc("Keys per tile (0: default)"),
                    cl::init(0), cl::sub(compileCmd), cl::sub(inspectCmd),
                    cl::sub(bundleCmd));
cl::opt<int> warps("warps",
                   cl::desc("Warps per CTA (0: default; GPU targets only)"),
                   cl::init(0), cl::sub(compileCmd), cl::sub(inspectCmd),
                   cl::sub(bundleCmd));
cl::opt<int> rowsPerWarp(
    "rows-per-warp",
    cl::desc("Query rows per warp, 16 or 32 (0: default; GPU targets only)"),
    cl::init(0), cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string> mmaFlag(
    "mma",
    cl::desc("default | mma.sync | wgmma: the tensor-core instructions "
             "(default: wgmma on sm_90a where head dims are multiples of "
             "64; GPU targets only)"),
    cl::init("default"), cl::sub(compileCmd), cl::sub(inspectCmd),
    cl::sub(bundleCmd));
cl::opt<bool> varlenFlag(
    "varlen",
    cl::desc("A kernel for packed variable-length sequences (cu_seqlens)"),
    cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<bool> blockSparseFlag(
    "block-sparse",
    cl::desc("A block-sparse kernel (visits the tiles of a block mask) and "
             "its block-mask builder"),
    cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string> kernelFlag(
    "kernel",
    cl::desc("fwd | bwd: the forward or the backward (gradients) kernel; "
             "bwd is CPU only, compiled in memory (not cached or bundled "
             "yet)"),
    cl::init("fwd"), cl::sub(compileCmd), cl::sub(inspectCmd),
    cl::sub(bundleCmd));
cl::opt<std::string> outDir("out",
                            cl::desc("compile: also copy every stage here; "
                                     "bundle: the bundle directory"),
                            cl::sub(compileCmd), cl::sub(bundleCmd));
cl::opt<std::string> cacheDir("cache-dir",
                              cl::desc("Cache directory (default: "
                                       "FLASHJIT_CACHE_DIR, XDG, ~/.cache)"),
                              cl::sub(compileCmd), cl::sub(inspectCmd),
                              cl::sub(cacheCmd), cl::sub(bundleCmd));
cl::opt<bool> noCache("no-cache", cl::desc("Compile without the disk cache"),
                      cl::sub(compileCmd), cl::sub(inspectCmd));
cl::opt<std::string> stage("stage",
                           cl::desc("attn | gpu | ptx | resources | sass "
                                    "(cpu: attn | tiled | llvm | llvm-ir | "
                                    "llvm-ir-opt); derivative (the score "
                                    "modifier's, any target)"),
                           cl::sub(inspectCmd));
cl::list<std::string> cacheArgs(cl::Positional,
                                cl::desc("ls | info KEY | clear | prune"),
                                cl::sub(cacheCmd));
cl::opt<uint64_t> maxBytes("max-bytes",
                           cl::desc("prune: size limit in bytes, > 0 (default: "
                                    "FLASHJIT_CACHE_MAX_BYTES)"),
                           cl::sub(cacheCmd));

/// A user error found by the tool itself (exit 1).
[[noreturn]] void userError(const std::string &message) {
  throw UserError(message);
}

/// The spec named by the flags: --spec, or one built from the field flags.
AttentionSpec specFromFlags() {
  // A flag given with an empty value counts as given (and is then rejected
  // by the check of its value, not by "no spec").
  bool fields = maskText.getNumOccurrences() || scoreText.getNumOccurrences() ||
                headDim.getNumOccurrences() || dtype.getNumOccurrences() ||
                headsQ.getNumOccurrences() || headsKV.getNumOccurrences() ||
                causal.getNumOccurrences() || kernelName.getNumOccurrences();
  if (specText.size() > 1)
    userError("--spec: give one spec (bundle takes several)");
  if (!specText.empty()) {
    if (fields)
      userError("--spec cannot be combined with --mask/--score/--head-dim/"
                "--dtype/--heads-q/--heads-kv/--causal/--name");
    return parseSpec(specText.front());
  }
  if (!fields)
    userError("no spec: give --spec TEXT or at least one of --mask, --score, "
              "--head-dim, --dtype, --heads-q, --heads-kv, --causal, --name");
  // Expressions are parsed on their own first, so a syntax or type error's
  // column refers to the text the user typed.
  auto checkExpr = [](const char *flag, const std::string &text, bool isMask) {
    try {
      Expr e = parseExpr(text);
      if (isMask && e.type() != ScalarType::Bool)
        userError(fmt::format("{}: the mask must be a bool expression, got {}",
                              flag, toString(e.type())));
      if (!isMask && e.type() == ScalarType::Bool)
        userError(fmt::format("{}: the score modifier must be a number, got "
                              "bool",
                              flag));
    } catch (const ParseError &e) {
      userError(fmt::format("{}: {}", flag, e.what()));
    }
  };
  std::vector<std::string> parts;
  if (kernelName.getNumOccurrences()) {
    if (!isIdentifier(kernelName))
      userError(fmt::format("--name '{}' is not an identifier "
                            "([A-Za-z_][A-Za-z0-9_]*)",
                            kernelName.getValue()));
    parts.push_back("name=" + kernelName);
  }
  if (maskText.getNumOccurrences()) {
    checkExpr("--mask", maskText, true);
    parts.push_back("mask=" + maskText);
  }
  if (scoreText.getNumOccurrences()) {
    checkExpr("--score", scoreText, false);
    parts.push_back("score=" + scoreText);
  }
  if (headDim.getNumOccurrences())
    parts.push_back(fmt::format("head_dim_qk={0}, head_dim_v={0}", headDim));
  if (dtype.getNumOccurrences())
    parts.push_back(fmt::format(
        "dtype_q={0}, dtype_k={0}, dtype_v={0}, dtype_o={0}", dtype));
  if (headsQ.getNumOccurrences())
    parts.push_back(fmt::format("heads_q={}", headsQ));
  if (headsKV.getNumOccurrences())
    parts.push_back(fmt::format("heads_kv={}", headsKV));
  if (causal.getNumOccurrences())
    parts.push_back("causal=" + causal);
  return parseSpec(fmt::format("attention({})", fmt::join(parts, ", ")));
}

std::string oneTarget() {
  if (targets.size() > 1)
    userError("--target: give one target");
  std::string t = targets.empty() ? "sm_90a" : targets.front();
  if (t != "sm_80" && t != "sm_90a" && t != "cpu")
    userError(fmt::format("--target '{}' is not one of sm_80, sm_90a, cpu", t));
  return t;
}

CacheConfig cacheConfig() {
  CacheConfig c = CacheConfig::fromEnvironment();
  if (!cacheDir.empty()) {
    c.dir = cacheDir;
    c.enabled = true;
  }
  if (noCache)
    c.enabled = false;
  return c;
}

struct GpuResult {
  KernelArtifacts artifacts;
  CacheKey key;
  CacheOutcome outcome = CacheOutcome::Uncached;
  std::string entryDir;
};

/// The CPU options from the flags; --warps is a GPU flag.
CompileOptions cpuOptions() {
  if (warps.getNumOccurrences())
    userError("--warps is a GPU option (warps per CTA); CPU kernels have no "
              "warps (use --block-n)");
  if (rowsPerWarp != 0)
    userError("--rows-per-warp is a GPU option; CPU kernels have no warps "
              "(use --block-n)");
  if (mmaFlag.getNumOccurrences())
    userError("--mma is a GPU option; CPU kernels have no tensor-core "
              "instructions");
  CompileOptions options;
  options.blockN = blockN;
  options.varlen = varlenFlag;
  options.blockSparse = blockSparseFlag;
  return options;
}

/// A CPU kernel's artifacts through the cache, or nullopt (after a warning)
/// when there is no C compiler driver to link it.
std::optional<GpuResult> cpuThroughCache(const AttentionSpec &spec,
                                         const CompileOptions &options,
                                         DiskCache &cache) {
  std::string why;
  if (!cpuLinkerAvailable(&why)) {
    llvm::errs() << "flashjit: warning: " << why
                 << "; the CPU kernel is compiled in memory and not cached\n";
    return std::nullopt;
  }
  GpuResult r;
  r.key = cpuCacheKey(spec, options);
  r.artifacts = cache.getOrCompile(
      r.key, [&] { return compileCpuArtifacts(spec, options); }, &r.outcome);
  if (r.outcome != CacheOutcome::Uncached)
    r.entryDir = cache.entryDir(r.key.hash());
  return r;
}

/// --mma as a GpuMma.
GpuMma gpuMma() {
  for (GpuMma m : {GpuMma::Default, GpuMma::MmaSync, GpuMma::Wgmma})
    if (mmaFlag == toString(m))
      return m;
  userError(fmt::format("--mma = '{}' is not one of default, mma.sync, "
                        "wgmma",
                        std::string(mmaFlag)));
}

GpuResult gpuThroughCache(const AttentionSpec &spec, const std::string &arch,
                          DiskCache &cache) {
  GpuResult r;
  GpuCompileOptions o;
  o.arch = arch;
  o.blockN = blockN;
  o.numWarps = warps;
  o.rowsPerWarp = rowsPerWarp;
  o.mma = gpuMma();
  o.varlen = varlenFlag;
  o.blockSparse = blockSparseFlag;
  r.key = gpuCacheKey(spec, o); // validates first
  r.artifacts = cache.getOrCompile(
      r.key, [&] { return compileGpuArtifacts(spec, o); }, &r.outcome);
  if (r.outcome != CacheOutcome::Uncached)
    r.entryDir = cache.entryDir(r.key.hash());
  return r;
}

void writeFile(const std::string &p, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(p, ec);
  if (ec)
    userError(fmt::format("cannot write {}: {}", p, ec.message()));
  os << bytes;
}

void makeDir(const std::string &dir, const char *flag) {
  if (std::error_code ec = fs::create_directories(dir))
    userError(fmt::format("{} '{}': cannot create the directory: {}", flag, dir,
                          ec.message()));
}

/// Whether --kernel asks for the backward; a UserError for anything but
/// fwd and bwd, and for bwd on a GPU target (issue 15).
bool wantsBackward(const std::string &target) {
  if (kernelFlag != "fwd" && kernelFlag != "bwd")
    userError(fmt::format("--kernel '{}' is not fwd or bwd",
                          std::string(kernelFlag)));
  if (kernelFlag == "bwd" && target != "cpu")
    userError(fmt::format("--kernel bwd: the GPU backward is not built yet "
                          "(issue 15); use --target cpu, not '{}'",
                          target));
  return kernelFlag == "bwd";
}

int runCompile() {
  AttentionSpec spec = specFromFlags();
  std::string target = oneTarget();
  llvm::outs() << "spec    " << printSpec(spec) << "\n";
  if (wantsBackward(target)) {
    CompileOptions options = cpuOptions();
    if (!outDir.empty()) {
      makeDir(outDir, "--out");
      options.dumpDir = outDir;
    }
    auto kernel = compileCpuBackward(spec, options);
    llvm::outs() << "target  cpu backward (ORC JIT in memory, not cached)\n";
    if (!outDir.empty())
      llvm::outs() << "stages  written to " << outDir << "\n";
    for (const StageTiming &t : kernel->timings())
      llvm::outs() << fmt::format("  {:<24} {:9.3f} ms\n", t.name,
                                  t.seconds * 1e3);
    return 0;
  }
  DiskCache cache(cacheConfig());
  std::optional<GpuResult> result;
  if (target == "cpu") {
    CompileOptions options = cpuOptions();
    result = cpuThroughCache(spec, options, cache);
    if (!result) {
      if (!outDir.empty()) {
        makeDir(outDir, "--out");
        options.dumpDir = outDir;
      }
      auto kernel = compileCpu(spec, options);
      llvm::outs() << "target  cpu (ORC JIT in memory, not cached)\n";
      if (!outDir.empty())
        llvm::outs() << "stages  written to " << outDir << "\n";
      for (const StageTiming &t : kernel->timings())
        llvm::outs() << fmt::format("  {:<24} {:9.3f} ms\n", t.name,
                                    t.seconds * 1e3);
      return 0;
    }
  } else {
    result = gpuThroughCache(spec, target, cache);
  }
  const GpuResult &r = *result;
  llvm::outs() << "target  " << target << "\n";
  llvm::outs() << "key     " << r.key.hash() << "\n";
  llvm::outs() << "cache   " << toString(r.outcome)
               << (r.entryDir.empty() ? "" : " " + r.entryDir) << "\n";
  const KernelArtifacts &a = r.artifacts;
  if (target == "cpu")
    llvm::outs() << fmt::format(
        "kernel  {} block_m={} block_n={} count_tiles={} opt_level={} "
        "cpu={}{}{}\n",
        a.entry, a.blockM, a.blockN, a.countTiles ? 1 : 0, a.optLevel, a.cpu,
        a.varlen ? " varlen" : "", a.blockSparse ? " block_sparse" : "");
  else
    llvm::outs() << fmt::format(
        "kernel  {} mma={} threads={} block_m={} block_n={} shared_bytes={} "
        "registers={} spill_bytes={}{}{}\n",
        a.entry, a.mma, a.threads, a.blockM, a.blockN, a.sharedBytes,
        a.registers, a.spillBytes, a.varlen ? " varlen" : "",
        a.blockSparse ? " block_sparse" : "");
  if (a.spillBytes > 0)
    llvm::errs() << fmt::format("flashjit: warning: the kernel spills {} "
                                "bytes of registers to local memory (see "
                                "`inspect --stage resources`); smaller tiles "
                                "(--block-n, --rows-per-warp 16) or --mma "
                                "mma.sync may avoid it\n",
                                a.spillBytes);
  if (!outDir.empty()) {
    makeDir(outDir, "--out");
    for (const auto &[name, bytes] : a.files)
      writeFile(outDir + "/" + name, bytes);
    writeFile(outDir + "/" + kMetaFile, metaJson(a, r.key));
  }
  for (const auto &[name, bytes] : a.files)
    llvm::outs() << fmt::format(
        "  {:<20} {:>9} bytes  {}\n", name, bytes.size(),
        outDir.empty() ? (r.entryDir.empty() ? std::string("(in memory)")
                                             : r.entryDir + "/" + name)
                       : outDir + "/" + name);
  llvm::outs() << (r.outcome == CacheOutcome::Hit
                       ? "compile time per stage (of the cached compile):\n"
                       : "compile time per stage:\n");
  for (const StageTiming &t : a.stageSeconds)
    llvm::outs() << fmt::format("  {:<24} {:9.3f} ms\n", t.name,
                                t.seconds * 1e3);
  return 0;
}

std::string findCuobjdump() {
  llvm::SmallString<256> next(ptxasPath());
  llvm::sys::path::remove_filename(next);
  llvm::sys::path::append(next, "cuobjdump");
  if (fs::can_execute(next))
    return next.str().str();
  if (auto p = llvm::sys::findProgramByName("cuobjdump"))
    return *p;
  return {};
}

int runInspect() {
  static const std::vector<std::string> gpuStages = {"attn", "gpu", "ptx",
                                                     "resources", "sass"};
  AttentionSpec spec = specFromFlags();
  if (stage == "derivative") { // frontend only: nothing is compiled
    const Expr &mod = spec.variant.scoreExpr();
    llvm::outs() << printDerivative(
        differentiateScoreMod(mod, differentiableParams(mod)));
    return 0;
  }
  std::string target = oneTarget();
  bool backward = wantsBackward(target);
  if (stage.empty())
    userError("--stage is required (attn | gpu | ptx | resources | sass | "
              "derivative)");
  if (target == "cpu") {
    static const std::vector<std::tuple<std::string, Stage, const char *>>
        cpuStages = {{"attn", Stage::Attn, kAttnFile},
                     {"tiled", Stage::Tiled, kTiledFile},
                     {"llvm", Stage::LLVMDialect, kLLVMDialectFile},
                     {"llvm-ir", Stage::LLVMIR, kLLVMIRFile},
                     {"llvm-ir-opt", Stage::LLVMIROpt, kLLVMIROptFile}};
    for (const auto &[name, s, file] : cpuStages)
      if (name == stage && backward) {
        llvm::outs() << compileCpuBackward(spec, cpuOptions())->stageText(s);
        return 0;
      } else if (name == stage) {
        CompileOptions options = cpuOptions();
        DiskCache cache(cacheConfig());
        if (std::optional<GpuResult> r = cpuThroughCache(spec, options, cache))
          if (const std::string *text = r->artifacts.file(file)) {
            llvm::outs() << *text;
            return 0;
          }
        llvm::outs() << compileCpu(spec, options)->stageText(s);
        return 0;
      }
    userError(fmt::format("--stage '{}' is not a CPU stage (attn, tiled, "
                          "llvm, llvm-ir, llvm-ir-opt; derivative for any "
                          "target)",
                          std::string(stage)));
  }
  if (std::find(gpuStages.begin(), gpuStages.end(), stage) == gpuStages.end())
    userError(fmt::format("--stage '{}' is not one of attn, gpu, ptx, "
                          "resources, sass, derivative",
                          std::string(stage)));
  DiskCache cache(cacheConfig());
  GpuResult r = gpuThroughCache(spec, target, cache);
  const KernelArtifacts &a = r.artifacts;
  if (stage == "attn" || stage == "gpu" || stage == "ptx") {
    const std::string *text = a.file(stage == "attn"  ? kAttnFile
                                     : stage == "gpu" ? kGpuFile
                                                      : kPtxFile);
    if (!text)
      throw InternalError(fmt::format("the {} stage is missing", stage));
    llvm::outs() << *text;
    return 0;
  }
  if (stage == "resources") {
    PtxasReport report = runPtxas(*a.file(kPtxFile), target);
    llvm::outs() << fmt::format("kernel {} on {}: threads={} block_m={} "
                                "block_n={} dynamic_shared_bytes={}\n",
                                a.entry, target, a.threads, a.blockM, a.blockN,
                                a.sharedBytes);
    for (const PtxasFunctionReport &f : report.functions)
      llvm::outs() << fmt::format(
          "{}: registers={} stack_frame_bytes={} spill_store_bytes={} "
          "spill_load_bytes={} static_shared_bytes={} barriers={}{}\n",
          f.name, f.registers, f.stackFrameBytes, f.spillStoreBytes,
          f.spillLoadBytes, f.sharedBytes, f.barriers,
          f.clean() ? "" : "  (SPILLS)");
    return 0;
  }
  // sass
  std::string cuobjdump = findCuobjdump();
  if (cuobjdump.empty())
    userError("--stage sass needs cuobjdump (from the CUDA toolkit), which "
              "was found neither next to ptxas nor on PATH");
  const std::string *cubin = a.file(kCubinFile);
  std::string cubinBytes;
  if (!cubin) {
    CubinResult c = ptxToCubin(*a.file(kPtxFile), target);
    cubinBytes.assign(c.cubin.begin(), c.cubin.end());
    cubin = &cubinBytes;
  }
  llvm::SmallString<256> tmp;
  int fd;
  if (fs::createTemporaryFile("flashjit", "cubin", fd, tmp))
    throw InternalError("cannot create a temporary file for cuobjdump");
  {
    llvm::raw_fd_ostream os(fd, true);
    os << *cubin;
  }
  llvm::SmallString<256> outFile;
  fs::createTemporaryFile("flashjit", "sass", outFile);
  std::string err;
  std::optional<llvm::StringRef> redirects[] = {
      std::nullopt, llvm::StringRef(outFile), llvm::StringRef(outFile)};
  int rc = llvm::sys::ExecuteAndWait(cuobjdump, {cuobjdump, "-sass", tmp},
                                     std::nullopt, redirects, 0, 0, &err);
  auto buf = llvm::MemoryBuffer::getFile(outFile);
  std::string text = buf ? (*buf)->getBuffer().str() : "";
  fs::remove(tmp);
  fs::remove(outFile);
  if (rc != 0)
    throw DriverError(
        fmt::format("cuobjdump -sass failed ({}): {}{}", rc, err, text));
  llvm::outs() << text;
  return 0;
}

std::string ageText(int64_t lastUsed) {
  int64_t age = int64_t(std::time(nullptr)) - lastUsed;
  if (age < 120)
    return fmt::format("{}s ago", age);
  if (age < 7200)
    return fmt::format("{}m ago", age / 60);
  if (age < 172800)
    return fmt::format("{}h ago", age / 3600);
  return fmt::format("{}d ago", age / 86400);
}

int runCache() {
  if (cacheArgs.empty())
    userError("cache: give an action: ls, info KEY, clear or prune");
  std::string action = cacheArgs.front();
  size_t want = action == "info" ? 2 : 1;
  if (cacheArgs.size() != want)
    userError(action == "info"
                  ? "cache info: give one KEY (or a prefix)"
                  : fmt::format("cache {}: takes no arguments", action));
  CacheConfig config = cacheConfig();
  config.enabled = true;
  // 0 means "no limit" in FLASHJIT_CACHE_MAX_BYTES; --max-bytes reads it the
  // same way rather than as "remove everything" (that is `cache clear`).
  if (action == "prune" && maxBytes.getNumOccurrences() && maxBytes == 0)
    userError("cache prune: --max-bytes 0 means no limit (as "
              "FLASHJIT_CACHE_MAX_BYTES=0 does), so nothing would be pruned; "
              "give a positive size, or remove every entry with `flashjit "
              "cache clear`");
  if (action == "prune" && !maxBytes.getNumOccurrences() &&
      config.maxBytes == 0)
    userError("cache prune: give --max-bytes N or set "
              "FLASHJIT_CACHE_MAX_BYTES to a positive size (unset or 0 means "
              "no limit)");
  // Looking at a cache must not create it.
  if (!config.dir.empty() && !fs::exists(config.dir)) {
    if (action == "ls")
      llvm::outs() << fmt::format("0 entries, 0 bytes in {} (no such "
                                  "directory)\n",
                                  config.dir);
    else if (action == "info")
      userError(fmt::format("cache info: '{}' matches 0 entries in {} (no "
                            "such directory)",
                            cacheArgs[1], config.dir));
    else if (action == "clear" || action == "prune")
      llvm::outs() << fmt::format("removed 0 entries ({} does not exist)\n",
                                  config.dir);
    else
      userError(fmt::format("cache: unknown action '{}' (ls, info, clear, "
                            "prune)",
                            action));
    return 0;
  }
  DiskCache cache(config);
  if (!cache.usable())
    userError(fmt::format("cache {}: {}", action, cache.whyUnusable()));
  // Directories named like entries that are not flashjit's: never touched,
  // always reported.
  std::vector<runtime::ForeignDir> foreign;
  auto reportForeign = [&] {
    for (const runtime::ForeignDir &f : foreign)
      llvm::errs() << fmt::format("flashjit: left alone {}: not a flashjit "
                                  "cache entry ({})\n",
                                  f.path, f.why);
  };
  if (action == "ls") {
    std::vector<CacheEntryInfo> entries = cache.list(&foreign);
    reportForeign();
    uint64_t total = 0;
    for (const CacheEntryInfo &e : entries) {
      total += e.bytes;
      llvm::outs() << fmt::format(
          "{}  {:>9}  {:>8}  {:<7} {}{}{}  {}\n", e.key.substr(0, 16), e.bytes,
          ageText(e.lastUsed), e.valid ? e.arch : "INVALID", e.entry,
          e.varlen ? " [varlen]" : "", e.blockSparse ? " [block-sparse]" : "",
          e.specText);
    }
    llvm::outs() << fmt::format("{} entries, {} bytes in {}\n", entries.size(),
                                total, cache.dir());
    return 0;
  }
  if (action == "info") {
    std::string prefix = cacheArgs[1];
    std::vector<std::string> matches;
    for (const CacheEntryInfo &e : cache.list())
      if (llvm::StringRef(e.key).starts_with(prefix))
        matches.push_back(e.key);
    if (matches.size() != 1)
      userError(fmt::format("cache info: '{}' matches {} entries in {}", prefix,
                            matches.size(), cache.dir()));
    std::string dir = cache.entryDir(matches.front());
    std::string why;
    bool valid = bool(readEntry(dir, matches.front(), &why));
    llvm::outs() << "entry   " << dir << "\n"
                 << "valid   " << (valid ? "yes" : "no: " + why) << "\n";
    auto meta = llvm::MemoryBuffer::getFile(dir + "/" + kMetaFile);
    if (meta)
      llvm::outs() << (*meta)->getBuffer();
    return valid ? 0 : 2;
  }
  if (action == "clear") {
    size_t n = cache.clear(&foreign);
    reportForeign();
    llvm::outs() << fmt::format("removed {} entries from {}\n", n, cache.dir());
    return 0;
  }
  if (action == "prune") {
    uint64_t limit =
        maxBytes.getNumOccurrences() ? uint64_t(maxBytes) : config.maxBytes;
    size_t n = cache.prune(limit, &foreign);
    reportForeign();
    llvm::outs() << fmt::format("removed {} entries; {} bytes limit\n", n,
                                limit);
    return 0;
  }
  userError(fmt::format("cache: unknown action '{}' (ls, info, clear, prune)",
                        action));
}

int runBundle() {
  if (kernelFlag != "fwd")
    userError(fmt::format("bundle: --kernel '{}': only forward kernels are "
                          "bundled so far (backward kernels compile in "
                          "memory)",
                          std::string(kernelFlag)));
  if (outDir.empty())
    userError("bundle: --out DIR is required");
  if (specText.empty())
    userError("bundle: give at least one --spec");
  std::vector<std::string> archs(targets.begin(), targets.end());
  if (archs.empty())
    archs = {"sm_80", "sm_90a"};
  for (const std::string &t : archs)
    if (t != "sm_80" && t != "sm_90a" && t != "cpu")
      userError(
          fmt::format("bundle: --target '{}' is not sm_80, sm_90a or cpu", t));
  bool wantCpu = llvm::is_contained(archs, "cpu");
  CompileOptions cpuOpts;
  if (wantCpu) {
    std::string why;
    if (!cpuLinkerAvailable(&why))
      userError(fmt::format("bundle --target cpu needs a C compiler driver to "
                            "link kernel.so: {}",
                            why));
    // --warps applies to the GPU targets of a mixed bundle.
    if (archs.size() == 1)
      cpuOpts = cpuOptions();
    cpuOpts.blockN = blockN;
  }
  // Every spec is checked, and every kernel compiled, before the bundle
  // changes: a failing spec leaves the bundle as it was.
  std::vector<AttentionSpec> specs;
  for (size_t i = 0; i < specText.size(); ++i) {
    try {
      specs.push_back(parseSpec(specText[i]));
      for (const std::string &arch : archs) {
        if (arch == "cpu") {
          validateForCpu(specs.back(), cpuOpts);
          continue;
        }
        GpuCompileOptions o;
        o.arch = arch;
        o.blockN = blockN;
        o.numWarps = warps;
        o.mma = gpuMma();
        validateForGpu(specs.back(), o);
      }
    } catch (const UserError &e) {
      userError(fmt::format("bundle: --spec #{} '{}': {}", i + 1, specText[i],
                            e.what()));
    }
  }
  DiskCache cache(cacheConfig());
  std::vector<std::pair<std::string, GpuResult>> results;
  for (const AttentionSpec &spec : specs)
    for (const std::string &arch : archs)
      results.emplace_back(arch, arch == "cpu"
                                     ? *cpuThroughCache(spec, cpuOpts, cache)
                                     : gpuThroughCache(spec, arch, cache));
  for (const auto &[arch, r] : results) {
    Bundle::add(outDir, r.key, r.artifacts);
    llvm::outs() << fmt::format("{} {} {} ({})\n", arch, r.key.hash(),
                                r.artifacts.entry, toString(r.outcome));
  }
  llvm::outs() << fmt::format("bundle {} holds {} kernels\n",
                              std::string(outDir),
                              Bundle::open(outDir).items().size());
  return 0;
}

/// LLVM's parser takes an unknown flag that starts with "-h" (e.g. a
/// compile flag such as --head-dim given to bundle) for --help and exits 0
/// having done nothing: such flags are refused here first, by the
/// subcommand's own option names.
std::optional<std::string> unknownHelpPrefixedFlag(int argc, char **argv) {
  cl::SubCommand *sub = &cl::SubCommand::getTopLevel();
  for (cl::SubCommand *c : {&compileCmd, &inspectCmd, &cacheCmd, &bundleCmd})
    if (argc > 1 && c->getName() == llvm::StringRef(argv[1]))
      sub = c;
  auto &known = cl::getRegisteredOptions(*sub);
  for (int i = sub == &cl::SubCommand::getTopLevel() ? 1 : 2; i < argc; ++i) {
    llvm::StringRef arg(argv[i]);
    if (arg == "--")
      break;
    if (!arg.starts_with("-"))
      continue;
    llvm::StringRef name = arg.ltrim('-').split('=').first;
    auto it = known.find(name);
    if (it != known.end()) {
      // A value in the next argument is not a flag.
      if (!arg.contains('=') &&
          it->second->getValueExpectedFlag() == cl::ValueRequired)
        ++i;
      continue;
    }
    if (name.starts_with("h") && name != "h") // -h is LLVM's --help
      return arg.str();
  }
  return std::nullopt;
}

} // namespace

int main(int argc, char **argv) {
  // `flashjit --help` lists flashjit's subcommands, not the options LLVM's
  // libraries register, and --version names flashjit and its LLVM.
  static cl::OptionCategory noOptions("flashjit");
  cl::HideUnrelatedOptions(noOptions);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "flashjit " << flashjitVersion() << " (commit " << flashjitCommit()
       << ", LLVM " << llvmVersion() << ")\n";
  });
  if (std::optional<std::string> bad = unknownHelpPrefixedFlag(argc, argv)) {
    llvm::errs() << "flashjit: Unknown command line argument '" << *bad
                 << "'.  Try: 'flashjit --help'\n";
    return 1;
  }
  std::string errors;
  llvm::raw_string_ostream errStream(errors);
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "flashjit: compile, inspect, cache and bundle attention kernels\n",
          &errStream)) {
    llvm::errs() << errors;
    return 1;
  }
  try {
    if (compileCmd)
      return runCompile();
    if (inspectCmd)
      return runInspect();
    if (cacheCmd)
      return runCache();
    if (bundleCmd)
      return runBundle();
    llvm::errs() << "flashjit: give a subcommand: compile, inspect, cache, "
                    "bundle (see flashjit --help)\n";
    return 1;
  } catch (const UserError &e) {
    llvm::errs() << "flashjit: error: " << e.message() << "\n";
    return 1;
  } catch (const std::exception &e) {
    llvm::errs() << "flashjit: internal error: " << e.what() << "\n";
    return 2;
  }
}
