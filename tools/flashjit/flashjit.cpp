//===- flashjit.cpp - The flashjit command-line tool ----------------------===//
//
//   flashjit compile --mask 'q_idx >= kv_idx' --head-dim 128 --target sm_90a
//   flashjit inspect --stage ptx|attn|gpu|resources|sass --spec '...'
//   flashjit inspect --stage derivative --score '...'   (no compile)
//   flashjit cache ls|info KEY|clear|prune [--max-bytes N]
//   flashjit bundle --out DIR --spec '...' --spec '...' --target sm_80,sm_90a
//   flashjit run --causal top_left --head-dim 64 --seqlen-q 4096 --device cpu
//
// GPU and CPU kernels go through the disk cache (FLASHJIT_CACHE_DIR etc., or
// --cache-dir); CPU kernels are compiled in memory when no C compiler
// driver is found to link them. Exit codes: 0 success, 1 a user error (bad
// flag, spec or key), 2 an internal, compiler or driver failure, 3 `run`'s
// output did not match the reference. Errors go to
// stderr.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/runtime/BuildId.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuDecode.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Memory.h"
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

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
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
cl::SubCommand runCmd(
    "run",
    "Compile (or load from the cache) a spec, run it on random inputs of a "
    "given shape on the CPU or the GPU, check it against the float64 "
    "reference and print the median time and TF/s. FLOPs are counted as "
    "FlashAttention's benchmarks count them: 2 * batch * heads_q * seqlen_q "
    "* seqlen_k * (head_dim_qk + head_dim_v), halved when the spec's causal "
    "field is top_left or bottom_right (a causal or sparse --mask is not "
    "discounted). Exit 3 when the output does not match the reference");

// Spec flags: compile and inspect take one spec, bundle several.
cl::list<std::string> specText("spec",
                               cl::desc("The spec in canonical text, e.g. "
                                        "'attention(causal=top_left)'"),
                               cl::sub(compileCmd), cl::sub(runCmd),
                               cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<std::string>
    maskText("mask", cl::desc("Mask expression (default: true, every key)"),
             cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<std::string>
    scoreText("score", cl::desc("Score modifier expression (default: score)"),
              cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<int> headDim("head-dim",
                     cl::desc("Head dim of Q, K and V (default: 128)"),
                     cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<std::string> dtype("dtype",
                           cl::desc("bf16 | fp16 | fp32 (default: bf16)"),
                           cl::sub(compileCmd), cl::sub(runCmd),
                           cl::sub(inspectCmd));
cl::opt<int> headsQ("heads-q", cl::desc("Query heads (default: 1)"),
                    cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<int> headsKV("heads-kv", cl::desc("Key/value heads, GQA (default: 1)"),
                     cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<std::string>
    causal("causal", cl::desc("none | top_left | bottom_right (default: none)"),
           cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<bool> sinkFlag(
    "sink",
    cl::desc("The spec has an attention sink: a per-query-head fp32 logit in "
             "the softmax denominator (run: random values in [-2, 2] from "
             "--seed)"),
    cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<std::string> kernelName("name",
                                cl::desc("Kernel name (default: attention)"),
                                cl::sub(compileCmd), cl::sub(runCmd),
                                cl::sub(inspectCmd));

cl::list<std::string> targets("target",
                              cl::desc("sm_80 | sm_90a | cpu (default: sm_90a; "
                                       "bundle: a comma-separated list, "
                                       "default sm_80,sm_90a)"),
                              cl::CommaSeparated, cl::sub(compileCmd),
                              cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<int> blockN("block-n", cl::desc("Keys per tile (0: default)"),
                    cl::init(0), cl::sub(compileCmd), cl::sub(runCmd),
                    cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<int> warps("warps",
                   cl::desc("Warps per CTA (0: default; GPU targets only)"),
                   cl::init(0), cl::sub(compileCmd), cl::sub(runCmd),
                   cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<int> rowsPerWarp(
    "rows-per-warp",
    cl::desc("Query rows per warp, 16 or 32 (0: default; GPU targets only)"),
    cl::init(0), cl::sub(compileCmd), cl::sub(runCmd), cl::sub(inspectCmd));
cl::opt<std::string> mmaFlag(
    "mma",
    cl::desc("default | mma.sync | wgmma | wgmma.tma | wgmma.tma.ws | "
             "wgmma.tma.ws.overlap | wgmma.tma.ws.overlap.pingpong: the "
             "tensor-core instructions (default: "
             "wgmma on sm_90a where head dims are multiples of 64, with TMA "
             "loads in dense kernels, warp-specialised above head dim 64 = "
             "wgmma.tma.ws, = wgmma.tma.ws.overlap at head dim 128 without "
             "buffer reads in the key loop or a mask alone (--causal alone "
             "and ALiBi without a mask take it); wgmma.tma.ws: "
             "the serial tile step; "
             "wgmma.tma.ws.overlap: with the softmax overlapped with the "
             "products (head dims up to 128); "
             "wgmma.tma.ws.overlap.pingpong: the overlap with the two "
             "consumer warpgroups taking turns to issue their products; at "
             "head dim 64 these build two consumer warpgroups; wgmma.tma: "
             "TMA without warp specialisation; wgmma: cp.async loads; GPU "
             "targets only)"),
    cl::init("default"), cl::sub(compileCmd), cl::sub(runCmd),
    cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<bool> varlenFlag(
    "varlen",
    cl::desc("A kernel for packed variable-length sequences (cu_seqlens); "
             "bundle: the forward and backward kernels of the bundle"),
    cl::sub(compileCmd), cl::sub(inspectCmd), cl::sub(bundleCmd));
cl::opt<bool> blockSparseFlag(
    "block-sparse",
    cl::desc("A block-sparse kernel (visits the tiles of a block mask) and "
             "its block-mask builder; run: the block mask of the spec's "
             "mask is built (timed apart) and the kernel visits its tiles; "
             "bundle: the forward and backward kernels of the bundle"),
    cl::sub(compileCmd), cl::sub(inspectCmd), cl::sub(runCmd),
    cl::sub(bundleCmd));
cl::opt<std::string> kernelFlag(
    "kernel",
    cl::desc("fwd | bwd | decode: the forward or the backward (gradients) "
             "kernel (CPU compile/inspect of bwd: in memory, not cached; GPU "
             "bwd and bundles: cached; bundle also takes fwd,bwd; the GPU bwd "
             "takes the tile flags only with --kernel bwd alone); decode: "
             "compile or bundle the GPU split-KV decode kernels (cached; "
             "bundle also takes fwd,decode, fwd,bwd,decode), run paged "
             "decoding on the CPU or the GPU (--paged, --page-size, "
             "--num-splits)"),
    cl::init("fwd"), cl::sub(compileCmd), cl::sub(inspectCmd),
    cl::sub(bundleCmd), cl::sub(runCmd));
cl::opt<std::string> outDir("out",
                            cl::desc("compile: also copy every stage here; "
                                     "bundle: the bundle directory"),
                            cl::sub(compileCmd), cl::sub(bundleCmd));
cl::opt<std::string> cacheDir("cache-dir",
                              cl::desc("Cache directory (default: "
                                       "FLASHJIT_CACHE_DIR, XDG, ~/.cache)"),
                              cl::sub(compileCmd), cl::sub(runCmd),
                              cl::sub(inspectCmd), cl::sub(cacheCmd),
                              cl::sub(bundleCmd));
cl::opt<bool> noCache("no-cache", cl::desc("Compile without the disk cache"),
                      cl::sub(compileCmd), cl::sub(runCmd),
                      cl::sub(inspectCmd));
cl::opt<std::string> stage("stage",
                           cl::desc("attn | gpu | ptx | resources | sass "
                                    "(cpu: attn | tiled | llvm | llvm-ir | "
                                    "llvm-ir-opt | asm | resources); "
                                    "derivative (the score modifier's, any "
                                    "target)"),
                           cl::sub(inspectCmd));
cl::list<std::string> cacheArgs(cl::Positional,
                                cl::desc("ls | info KEY | clear | prune"),
                                cl::sub(cacheCmd));
cl::opt<uint64_t> maxBytes("max-bytes",
                           cl::desc("prune: size limit in bytes, > 0 (default: "
                                    "FLASHJIT_CACHE_MAX_BYTES)"),
                           cl::sub(cacheCmd));

// `run`: the problem shape (heads, head dims and dtypes come from the spec),
// where it runs, and how it is timed and checked.
cl::opt<std::string> runDevice("device",
                               cl::desc("cpu | gpu: where to run (default: "
                                        "cpu; gpu is device 0, compiled for "
                                        "its architecture)"),
                               cl::init("cpu"), cl::sub(runCmd));
cl::opt<int64_t> runBatch("batch", cl::desc("Batch size (default: 1)"),
                          cl::init(1), cl::sub(runCmd));
cl::opt<int64_t> runSeqlenQ("seqlen-q",
                            cl::desc("Query sequence length (default: 1024)"),
                            cl::init(1024), cl::sub(runCmd));
cl::opt<int64_t>
    runSeqlenK("seqlen-k",
               cl::desc("Key sequence length (default: --seqlen-q)"),
               cl::init(0), cl::sub(runCmd));
cl::opt<int> runReps("reps",
                     cl::desc("Timed runs; the median is reported "
                              "(default: 10)"),
                     cl::init(10), cl::sub(runCmd));
cl::opt<int> runWarmup("warmup",
                       cl::desc("Untimed runs before timing (default: 2)"),
                       cl::init(2), cl::sub(runCmd));
cl::opt<int64_t> runCheckRows(
    "check-rows",
    cl::desc("Query rows checked against the float64 reference: every row "
             "when batch * heads_q * seqlen_q is at most this, else this "
             "many sampled rows (the first and last included); 0 checks "
             "nothing (default: 256)"),
    cl::init(256), cl::sub(runCmd));
cl::opt<double>
    runTol("tolerance",
           cl::desc("Allowed |O - ref| / (1 + |ref|) (default: 2e-2 for a bf16 "
                    "output, 4e-3 fp16, 4e-4 fp32)"),
           cl::sub(runCmd));
cl::opt<uint64_t> runSeed("seed",
                          cl::desc("Seed of the random inputs and sampled "
                                   "rows (default: random, printed)"),
                          cl::sub(runCmd));
cl::opt<int> runThreads("threads",
                        cl::desc("CPU threads (default: 0, every core)"),
                        cl::init(0), cl::sub(runCmd));
cl::opt<std::string> runSeqlensQ(
    "seqlens-q",
    cl::desc("L1,L2,...: a varlen run (packed sequences, cu_seqlens) with "
             "these query lengths (0 allowed); replaces --batch/--seqlen-q"),
    cl::sub(runCmd));
cl::opt<std::string>
    runSeqlensK("seqlens-k",
                cl::desc("The key lengths of a varlen run (default: "
                         "--seqlens-q)"),
                cl::sub(runCmd));
cl::list<std::string> runBuffers(
    "buffer",
    cl::desc("NAME=V1,V2,... or NAME=@FILE (raw little-endian values of the "
             "buffer's element type, as numpy's tofile writes them) for a "
             "buffer<...>(NAME) of the variant (repeatable; every buffer "
             "needs one)"),
    cl::sub(runCmd));
cl::opt<std::string>
    runPaged("paged",
             cl::desc("run --kernel decode: the page table, csr (FlashInfer) "
                      "or block-table (vLLM) (default: csr)"),
             cl::init("csr"), cl::sub(runCmd));
cl::opt<int64_t>
    runPageSize("page-size",
                cl::desc("run --kernel decode: tokens per page, a power of "
                         "two in 1..256 (default: 16)"),
                cl::init(16), cl::sub(runCmd));
cl::opt<int> runNumSplits(
    "num-splits",
    cl::desc("run --kernel decode --device gpu: key splits per sequence "
             "(0: the heuristic, runtime::decodeNumSplits; 1..1024 forces "
             "it) (default: 0)"),
    cl::init(0), cl::sub(runCmd));
cl::list<std::string>
    runParams("param",
              cl::desc("NAME=VALUE for a param<...>(NAME) of the variant "
                       "(repeatable; every parameter needs one)"),
              cl::sub(runCmd));

/// A user error found by the tool itself (exit 1).
[[noreturn]] void userError(const std::string &message) {
  throw UserError(message);
}

/// A UserError about the value \p text of \p flag: a ParseError's message
/// shows the text under a caret; any other quotes the text.
[[noreturn]] void flagError(const char *flag, const std::string &text,
                            const UserError &e) {
  if (dynamic_cast<const ParseError *>(&e))
    userError(fmt::format("{}: {}", flag, e.message()));
  userError(fmt::format("{} '{}': {}", flag, excerpt(text), e.message()));
}

/// The spec named by the flags: --spec, or one built from the field flags.
AttentionSpec specFromFlags() {
  // A flag given with an empty value counts as given (and is then rejected
  // by the check of its value, not by "no spec").
  bool fields = maskText.getNumOccurrences() || scoreText.getNumOccurrences() ||
                headDim.getNumOccurrences() || dtype.getNumOccurrences() ||
                headsQ.getNumOccurrences() || headsKV.getNumOccurrences() ||
                causal.getNumOccurrences() || kernelName.getNumOccurrences() ||
                sinkFlag.getNumOccurrences();
  if (specText.size() > 1)
    userError("--spec: give one spec (bundle takes several)");
  if (!specText.empty()) {
    if (fields)
      userError("--spec cannot be combined with --mask/--score/--head-dim/"
                "--dtype/--heads-q/--heads-kv/--causal/--name/--sink (write "
                "sink=true in the spec)");
    try {
      return parseSpec(specText.front());
    } catch (const UserError &e) {
      flagError("--spec", specText.front(), e);
    }
  }
  if (!fields)
    userError("no spec: give --spec TEXT or at least one of --mask, --score, "
              "--head-dim, --dtype, --heads-q, --heads-kv, --causal, --name");
  // Every flag is checked on its own and sets its own field: no flag's text
  // is pasted into spec text, so `--causal 'top_left, heads_q=4'` is an
  // unknown causal mode, not a second field. Messages quote what was typed.
  AttentionSpec spec;
  auto quoted = [](const std::string &text) {
    return fmt::format("'{}'", excerpt(text));
  };
  auto flagExpr = [&](const char *flag, const std::string &text) {
    try {
      return parseExpr(text);
    } catch (const UserError &e) {
      flagError(flag, text, e);
    }
  };
  std::string name = "attention";
  if (kernelName.getNumOccurrences()) {
    if (!isIdentifier(kernelName))
      userError(fmt::format("--name {} is not an identifier "
                            "([A-Za-z_][A-Za-z0-9_]*)",
                            quoted(kernelName)));
    name = kernelName;
  }
  Variant variant(name, {});
  if (maskText.getNumOccurrences()) {
    Expr e = flagExpr("--mask", maskText);
    if (e.type() != ScalarType::Bool)
      userError(fmt::format("--mask {}: the mask must be a bool expression, "
                            "got {}",
                            quoted(maskText), toString(e.type())));
    try {
      variant.mask(ExprArg(e, {}));
    } catch (const UserError &err) {
      userError(fmt::format("--mask {}: {}", quoted(maskText), err.message()));
    }
  }
  if (scoreText.getNumOccurrences()) {
    Expr e = flagExpr("--score", scoreText);
    if (e.type() == ScalarType::Bool)
      userError(fmt::format("--score {}: the score modifier must be a number, "
                            "got bool",
                            quoted(scoreText)));
    try {
      variant.scoreMod(ExprArg(e, {}));
    } catch (const UserError &err) {
      userError(
          fmt::format("--score {}: {}", quoted(scoreText), err.message()));
    }
  }
  spec.variant = variant;
  if (headDim.getNumOccurrences()) {
    if (headDim < 1 || headDim > kMaxHeadDim)
      userError(fmt::format("--head-dim {} is out of range [1, {}] (the CPU "
                            "backend's limit; GPU targets take up to {})",
                            int(headDim), kMaxHeadDim, kMaxGpuHeadDim));
    spec.headDimQK = spec.headDimV = headDim;
  }
  if (dtype.getNumOccurrences()) {
    std::optional<DType> d = parseDType(dtype);
    if (!d)
      userError(fmt::format("--dtype {} is not one of bf16, fp16, fp32, "
                            "e4m3, e5m2",
                            quoted(dtype)));
    // As the spec text's dtype=: fp8 is for Q, K, V; O is then bf16.
    spec.dtypeQ = spec.dtypeK = spec.dtypeV = *d;
    spec.dtypeO = isFp8(*d) ? DType::BF16 : *d;
  }
  if (headsQ.getNumOccurrences()) {
    if (headsQ < 1)
      userError(fmt::format("--heads-q {} must be positive", int(headsQ)));
    spec.headsQ = headsQ;
  }
  if (headsKV.getNumOccurrences()) {
    if (headsKV < 1)
      userError(fmt::format("--heads-kv {} must be positive", int(headsKV)));
    spec.headsKV = headsKV;
  }
  if (spec.headsQ % spec.headsKV != 0)
    userError(fmt::format("--heads-kv {} must divide --heads-q {} (GQA)",
                          spec.headsKV, spec.headsQ));
  if (causal.getNumOccurrences()) {
    std::optional<Causal> c;
    for (Causal m : {Causal::None, Causal::TopLeft, Causal::BottomRight})
      if (causal == toString(m))
        c = m;
    if (!c)
      userError(fmt::format("--causal {} is not one of none, top_left, "
                            "bottom_right",
                            quoted(causal)));
    spec.causal = *c;
  }
  spec.sink = sinkFlag;
  spec.validate();
  return spec;
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

/// --block-n on its own: 0 (the default) or a tile size the target has.
void checkBlockN(bool cpu) {
  int n = blockN;
  bool ok = cpu ? (n == 0 || n == 16 || n == 32 || n == 64 || n == 128)
                : (n == 0 || (n >= 16 && n <= 128 && n % 16 == 0));
  if (!ok)
    userError(fmt::format("--block-n {} is not {}", n,
                          cpu ? "0 (the default), 16, 32, 64 or 128 (CPU)"
                              : "0 (the default) or a multiple of 16 in "
                                "[16, 128] (GPU)"));
}

/// The GPU flags on their own: --block-n, --warps, --rows-per-warp, --mma.
void checkGpuFlags() {
  checkBlockN(/*cpu=*/false);
  if (warps != 0 && warps != 4 && warps != 8 && warps != 12)
    userError(fmt::format("--warps {} is not 0 (the default), 4 or 8 (12: "
                          "--mma wgmma.tma.ws)",
                          int(warps)));
  if (rowsPerWarp != 0 && rowsPerWarp != 16 && rowsPerWarp != 32)
    userError(fmt::format("--rows-per-warp {} is not 0 (the default), 16 or "
                          "32",
                          int(rowsPerWarp)));
}

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
  checkBlockN(/*cpu=*/true);
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
  // The library's own verdict on a hit (the kernel.so loads and declares
  // the manifest's configuration), so the CLI and loadOrCompileCpu agree.
  LoadReport report;
  r.artifacts = loadOrCompileCpuArtifacts(spec, options, cache, &report);
  r.outcome = report.outcome;
  r.entryDir = report.entryDir;
  return r;
}

/// --mma as a GpuMma.
GpuMma gpuMma() {
  checkGpuFlags();
  for (GpuMma m : {GpuMma::Default, GpuMma::MmaSync, GpuMma::Wgmma,
                   GpuMma::WgmmaTma, GpuMma::WgmmaTmaWs,
                   GpuMma::WgmmaTmaWsOverlap, GpuMma::WgmmaTmaWsPingPong})
    if (mmaFlag == toString(m))
      return m;
  userError(fmt::format("--mma '{}' is not one of default, mma.sync, wgmma, "
                        "wgmma.tma, wgmma.tma.ws, wgmma.tma.ws.overlap, "
                        "wgmma.tma.ws.overlap.pingpong",
                        excerpt(mmaFlag)));
}

/// The GPU kernel of \p spec (\p kind forward or backward) through the
/// disk cache. The tile flags apply to the forward, and to the backward
/// when it is the only kernel asked for (`--kernel bwd`); otherwise the
/// backward takes its own tile rule.
/// The GPU compile options of one kind of kernel for \p arch from the
/// command line's flags (the bundle's checks before it compiles and the
/// compile itself use the same).
GpuCompileOptions gpuKindOptions(const std::string &arch, KernelKind kind) {
  GpuCompileOptions o;
  o.arch = arch;
  o.kind = kind;
  // The decode kernels take mma.sync and a page table only: in a bundle of
  // several kinds the forward's --mma, --varlen and --block-sparse are not
  // theirs; asked for with --kernel decode alone they are refused.
  const bool forwardFlagsOnly =
      kind == KernelKind::Decode && kernelFlag != "decode";
  o.mma = forwardFlagsOnly ? GpuMma::Default : gpuMma();
  o.varlen = !forwardFlagsOnly && varlenFlag;
  o.blockSparse = !forwardFlagsOnly && blockSparseFlag;
  // Tile flags apply to the forward, and to the backward or the decode
  // when --kernel names it alone.
  if (kind == KernelKind::Forward || kernelFlag == "bwd" ||
      kernelFlag == "decode") {
    o.blockN = blockN;
    o.numWarps = warps;
    o.rowsPerWarp = rowsPerWarp;
  }
  return o;
}

GpuResult gpuThroughCache(const AttentionSpec &spec, const std::string &arch,
                          DiskCache &cache,
                          KernelKind kind = KernelKind::Forward) {
  GpuResult r;
  GpuCompileOptions o = gpuKindOptions(arch, kind);
  AttentionSpec s = kind == KernelKind::Backward ? backwardSpec(spec) : spec;
  r.key = gpuCacheKey(s, o); // validates first
  // The library's own verdict on a hit (configuration and PTX checked), so
  // the CLI and loadOrCompileGpu agree.
  LoadReport report;
  r.artifacts = loadOrCompileGpuArtifacts(s, o, &cache, &report);
  r.outcome = report.outcome;
  r.entryDir = report.entryDir;
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
/// fwd and bwd.
bool wantsBackward() {
  if (kernelFlag != "fwd" && kernelFlag != "bwd")
    userError(fmt::format("--kernel '{}' is not fwd or bwd (compile, run "
                          "and bundle also take decode)",
                          excerpt(kernelFlag)));
  return kernelFlag == "bwd";
}

/// The flags that may remove a GPU kernel's spills, from what the kernel
/// \p c is (never what it already uses), with the options each compiles
/// with: the command line's \p base with those flags added.
std::vector<std::pair<std::string, GpuCompileOptions>>
spillCandidates(const GpuCompileOptions &base, const KernelConfig &c) {
  std::vector<std::pair<std::string, GpuCompileOptions>> out;
  auto add = [&](std::string flags, auto edit) {
    GpuCompileOptions o = base;
    edit(o);
    out.emplace_back(std::move(flags), o);
  };
  if (c.warpSpecialized)
    add("--mma wgmma.tma",
        [](GpuCompileOptions &o) { o.mma = GpuMma::WgmmaTma; });
  if (c.wgmma)
    add("--mma mma.sync",
        [](GpuCompileOptions &o) { o.mma = GpuMma::MmaSync; });
  if (c.rowsPerWarp == 32)
    add("--rows-per-warp 16", [](GpuCompileOptions &o) { o.rowsPerWarp = 16; });
  if (c.blockN > 16)
    add(fmt::format("--block-n {}", c.blockN / 2),
        [&](GpuCompileOptions &o) { o.blockN = c.blockN / 2; });
  if (!c.wgmma && c.numWarps == 4 && c.rowsPerWarp == 32)
    add("--warps 8 --rows-per-warp 16", [](GpuCompileOptions &o) {
      o.numWarps = 8;
      o.rowsPerWarp = 16;
    });
  return out;
}

/// The warning for a GPU kernel \p a of \p spec that spills: the flags
/// that remove the spills, each checked (validateForGpu, then compiled and
/// assembled without the cache: ptxas's report has no spills), or that
/// none of those tried does. A hint once named a refused flag (--block-n 32
/// for the wgmma backward) or one that still spilled.
void warnSpills(const AttentionSpec &spec, const std::string &arch,
                KernelKind kind, const KernelArtifacts &a) {
  AttentionSpec s = kind == KernelKind::Backward ? backwardSpec(spec) : spec;
  std::vector<std::string> works, tried;
  for (const auto &[flags, o] :
       spillCandidates(gpuKindOptions(arch, kind), a.config)) {
    try {
      validateForGpu(s, o);
      KernelArtifacts t = compileGpuArtifacts(s, o);
      tried.push_back(flags);
      if (t.registers > 0 && t.spillBytes == 0)
        works.push_back(flags);
    } catch (const Error &) {
      // Refused for this spec: not advice.
    }
  }
  std::string advice =
      !works.empty()
          ? fmt::format("; {} assemble{} without spills (checked)",
                        fmt::join(works, ", or "), works.size() == 1 ? "s" : "")
      : !tried.empty()
          ? fmt::format("; {} also spill{}", fmt::join(tried, ", "),
                        tried.size() == 1 ? "s" : "")
          : "";
  llvm::errs() << fmt::format(
      "flashjit: warning: the kernel spills {} bytes of registers to local "
      "memory (see `inspect --stage resources`){}\n",
      a.spillBytes, advice);
}

int compileDecode();

int runCompile() {
  if (kernelFlag == "decode")
    return compileDecode();
  AttentionSpec spec = specFromFlags();
  std::string target = oneTarget();
  llvm::outs() << "spec    " << printSpec(spec) << "\n";
  bool backward = wantsBackward();
  if (backward && target == "cpu") {
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
    result =
        gpuThroughCache(spec, target, cache,
                        backward ? KernelKind::Backward : KernelKind::Forward);
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
        a.entry, a.config.blockM(), a.config.blockN,
        a.config.countTiles ? 1 : 0, a.config.optLevel, a.cpu,
        a.config.varlen ? " varlen" : "",
        a.config.blockSparse ? " block_sparse" : "");
  else
    llvm::outs() << fmt::format(
        "kernel  {} mma={} threads={} block_m={} block_n={} shared_bytes={} "
        "registers={} spill_bytes={}{}{}{}\n",
        a.entry,
        // The overlap and the ping-pong by their --mma names (nu26: both
        // printed as wgmma.tma.ws, so a user could not see what was built).
        std::string(a.config.mmaName()) +
            (a.config.pingPong         ? ".overlap.pingpong"
             : a.config.overlapSoftmax ? ".overlap"
                                       : ""),
        a.config.threads(), a.config.blockM(), a.config.blockN, a.sharedBytes,
        a.registers, a.spillBytes, a.config.varlen ? " varlen" : "",
        a.config.blockSparse ? " block_sparse" : "",
        a.config.syncBackward ? " sync_backward" : "");
  if (a.spillBytes > 0)
    warnSpills(spec, target,
               backward ? KernelKind::Backward : KernelKind::Forward, a);
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
  bool backward = wantsBackward();
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
    if (stage == "asm" || stage == "resources") {
      // The optimised IR (from the cache entry, else a compile), generated
      // again into host assembly.
      CompileOptions options = cpuOptions();
      DiskCache cache(cacheConfig());
      std::string ir;
      if (backward) {
        ir = compileCpuBackward(spec, options)->stageText(Stage::LLVMIROpt);
      } else {
        if (std::optional<GpuResult> r = cpuThroughCache(spec, options, cache))
          if (const std::string *text = r->artifacts.file(kLLVMIROptFile))
            ir = *text;
        if (ir.empty())
          ir = compileCpu(spec, options)->stageText(Stage::LLVMIROpt);
      }
      CpuAssembly a = cpuAssembly(ir, options.optLevel);
      std::string summary = fmt::format(
          "# {}{} on the host cpu ({}), block_m={} block_n={} opt_level={}\n",
          spec.variant.name(), backward ? " (backward)" : "", hostCpu().name,
          cpuBlockM(options), cpuBlockN(options), options.optLevel);
      for (const CpuFunctionResources &f : a.functions)
        summary += fmt::format(
            "# {}: instructions={} stack_frame_bytes={} spill_stores={} "
            "spill_loads={}\n",
            f.name, f.instructions, f.stackFrameBytes, f.spillStores,
            f.spillLoads);
      llvm::outs() << summary;
      if (stage == "asm")
        llvm::outs() << a.text;
      return 0;
    }
    userError(fmt::format("--stage '{}' is not a CPU stage (attn, tiled, "
                          "llvm, llvm-ir, llvm-ir-opt, asm, resources; "
                          "derivative for any target)",
                          std::string(stage)));
  }
  if (std::find(gpuStages.begin(), gpuStages.end(), stage) == gpuStages.end())
    userError(fmt::format("--stage '{}' is not one of attn, gpu, ptx, "
                          "resources, sass, derivative",
                          std::string(stage)));
  DiskCache cache(cacheConfig());
  GpuResult r =
      gpuThroughCache(spec, target, cache,
                      backward ? KernelKind::Backward : KernelKind::Forward);
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
                                a.entry, target, a.config.threads(),
                                a.config.blockM(), a.config.blockN,
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

/// The backward of \p spec through \p cache as a GpuResult (bundle --kernel
/// bwd; the caller checked that a linker is available).
GpuResult cpuBackwardThroughCache(const AttentionSpec &spec,
                                  const CompileOptions &options,
                                  DiskCache &cache) {
  GpuResult r;
  r.key = cpuBackwardCacheKey(spec, options);
  LoadReport report;
  r.artifacts =
      loadOrCompileCpuBackwardArtifacts(spec, options, cache, &report);
  r.outcome = report.outcome;
  r.entryDir = report.entryDir;
  return r;
}

int runBundle() {
  // --kernel: a comma list of fwd, bwd and decode (any order).
  bool wantFwd = false, wantBwd = false, wantDecode = false;
  llvm::SmallVector<llvm::StringRef> kinds;
  llvm::StringRef(kernelFlag).split(kinds, ',');
  for (llvm::StringRef k : kinds) {
    if (k == "fwd")
      wantFwd = true;
    else if (k == "bwd")
      wantBwd = true;
    else if (k == "decode")
      wantDecode = true;
    else
      userError(fmt::format("bundle: --kernel '{}': give a comma list of "
                            "fwd, bwd and decode (e.g. fwd,bwd or fwd,decode)",
                            std::string(kernelFlag)));
  }
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
  // The CPU decodes with the varlen forward kernel (runtime::cpuPagedDecode);
  // the split-KV decode kernels are GPU kernels.
  if (wantDecode && wantCpu)
    userError("bundle: --kernel decode is for GPU targets (sm_80, sm_90a); "
              "the CPU decodes with the varlen forward kernel, which a CPU "
              "bundle does not hold yet");
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
          if (wantBwd)
            (void)cpuBackwardCacheKey(specs.back(), cpuOpts);
          continue;
        }
        // The options the compile below uses (tile flags included where
        // they apply).
        validateForGpu(specs.back(), gpuKindOptions(arch, KernelKind::Forward));
        if (wantBwd)
          validateForGpu(backwardSpec(specs.back()),
                         gpuKindOptions(arch, KernelKind::Backward));
        if (wantDecode)
          validateForGpu(specs.back(),
                         gpuKindOptions(arch, KernelKind::Decode));
      }
    } catch (const UserError &e) {
      userError(fmt::format("bundle: --spec #{} '{}': {}", i + 1, specText[i],
                            e.what()));
    }
  }
  DiskCache cache(cacheConfig());
  std::vector<std::pair<std::string, GpuResult>> results;
  for (const AttentionSpec &spec : specs)
    for (const std::string &arch : archs) {
      if (wantFwd)
        results.emplace_back(arch, arch == "cpu"
                                       ? *cpuThroughCache(spec, cpuOpts, cache)
                                       : gpuThroughCache(spec, arch, cache));
      if (wantBwd)
        results.emplace_back(
            arch, arch == "cpu" ? cpuBackwardThroughCache(spec, cpuOpts, cache)
                                : gpuThroughCache(spec, arch, cache,
                                                  KernelKind::Backward));
      if (wantDecode)
        results.emplace_back(
            arch, gpuThroughCache(spec, arch, cache, KernelKind::Decode));
    }
  for (const auto &[arch, r] : results) {
    Bundle::add(outDir, r.key, r.artifacts);
    llvm::outs() << fmt::format("{} {} {} {} ({})\n", arch,
                                toString(r.key.config.kind), r.key.hash(),
                                r.artifacts.entry, toString(r.outcome));
  }
  size_t items = Bundle::open(outDir).items().size();
  llvm::outs() << fmt::format("bundle {} holds {} kernel{}\n",
                              std::string(outDir), items,
                              items == 1 ? "" : "s");
  return 0;
}

/// The bytes of one --buffer value of element type \p type: a comma list
/// (each value parsed as that type) or @FILE (raw values; the size must be
/// a multiple of the element size). UserError quoting \p text otherwise.
std::vector<uint8_t> parseBufferValues(const std::string &text,
                                       llvm::StringRef value, ScalarType type) {
  const size_t elem = type == ScalarType::Int64 ? 8 : 4;
  std::vector<uint8_t> bytes;
  if (value.starts_with("@")) {
    std::string path = value.drop_front().str();
    auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
    if (!file)
      userError(fmt::format("--buffer '{}': cannot read '{}': {}",
                            excerpt(text), excerpt(path),
                            file.getError().message()));
    llvm::StringRef data = (*file)->getBuffer();
    if (data.size() % elem)
      userError(fmt::format("--buffer '{}': '{}' has {} bytes, not a "
                            "multiple of {} ({} elements)",
                            excerpt(text), excerpt(path), data.size(), elem,
                            toString(type)));
    bytes.assign(data.bytes_begin(), data.bytes_end());
    return bytes;
  }
  llvm::SmallVector<llvm::StringRef> items;
  value.split(items, ',');
  for (llvm::StringRef item : items) {
    std::string v = item.trim().str();
    uint8_t raw[8];
    if (type == ScalarType::Float32) {
      char *end = nullptr;
      float f = std::strtof(v.c_str(), &end);
      if (v.empty() || *end != '\0' || std::isnan(f) ||
          (std::isinf(f) && !llvm::StringRef(v).contains_insensitive("inf")))
        userError(fmt::format("--buffer '{}': '{}' is not an f32",
                              excerpt(text), excerpt(v)));
      std::memcpy(raw, &f, 4);
    } else {
      int64_t n = 0;
      if (llvm::StringRef(v).getAsInteger(10, n) ||
          (type == ScalarType::Int32 && (n < INT32_MIN || n > INT32_MAX)))
        userError(fmt::format("--buffer '{}': '{}' is not an {} integer",
                              excerpt(text), excerpt(v), toString(type)));
      int32_t n32 = static_cast<int32_t>(n);
      std::memcpy(raw,
                  type == ScalarType::Int32 ? static_cast<void *>(&n32)
                                            : static_cast<void *>(&n),
                  elem);
    }
    bytes.insert(bytes.end(), raw, raw + elem);
  }
  return bytes;
}

/// The buffers of `run` by name (host bytes; kept alive for the run).
using RunBuffers = std::map<std::string, std::vector<uint8_t>>;

/// One --buffer per buffer of the variant, parsed by its element type.
RunBuffers runBufferValues(const AttentionSpec &spec) {
  std::vector<BufferDecl> buffers = spec.variant.buffers();
  RunBuffers out;
  for (const std::string &text : runBuffers) {
    auto [name, value] = llvm::StringRef(text).split('=');
    auto it = llvm::find_if(
        buffers, [&](const BufferDecl &b) { return b.name == name; });
    if (!llvm::StringRef(text).contains('=') || it == buffers.end()) {
      std::vector<std::string> names;
      for (const BufferDecl &b : buffers)
        names.push_back(
            fmt::format("{} ({})", b.name, toString(b.elementType)));
      userError(fmt::format(
          "--buffer '{}': {}; the variant's buffers: {}", excerpt(text),
          llvm::StringRef(text).contains('=') ? "no such buffer"
                                              : "expected NAME=VALUES",
          names.empty() ? std::string("none")
                        : fmt::format("{}", fmt::join(names, ", "))));
    }
    if (out.count(name.str()))
      userError(fmt::format("--buffer '{}': {} given twice", excerpt(text),
                            name.str()));
    out[name.str()] = parseBufferValues(text, value, it->elementType);
  }
  for (const BufferDecl &b : buffers)
    if (!out.count(b.name))
      userError(fmt::format("run: the variant reads buffer<{}>({}): give "
                            "--buffer {}=V1,V2,... or --buffer {}=@FILE",
                            toString(b.elementType), b.name, b.name, b.name));
  return out;
}

/// Binds \p values (host or device copies of `run`'s buffers, by name) to
/// \p args with the variant's element types.
void bindRunBuffers(const AttentionSpec &spec, Arguments &args,
                    const std::map<std::string, const void *> &data,
                    const RunBuffers &values) {
  for (const BufferDecl &b : spec.variant.buffers()) {
    const size_t elem = b.elementType == ScalarType::Int64 ? 8 : 4;
    args.buffers[b.name] = {data.at(b.name), b.elementType,
                            int64_t(values.at(b.name).size() / elem)};
  }
}

/// The run-time arguments of `run`: one --param per parameter of the
/// variant, parsed by its type (buffers: runBufferValues).
Arguments runArguments(const AttentionSpec &spec) {
  std::vector<ParamDecl> params = spec.variant.params();
  Arguments args;
  std::vector<std::string> given;
  for (const std::string &text : runParams) {
    auto [name, value] = llvm::StringRef(text).split('=');
    auto it = llvm::find_if(params,
                            [&](const ParamDecl &p) { return p.name == name; });
    if (!llvm::StringRef(text).contains('=') || it == params.end()) {
      std::vector<std::string> names;
      for (const ParamDecl &p : params)
        names.push_back(fmt::format("{} ({})", p.name, toString(p.type)));
      userError(fmt::format(
          "--param '{}': {}; the variant's parameters: {}", excerpt(text),
          llvm::StringRef(text).contains('=') ? "no such parameter"
                                              : "expected NAME=VALUE",
          names.empty() ? std::string("none")
                        : fmt::format("{}", fmt::join(names, ", "))));
    }
    if (llvm::is_contained(given, name.str()))
      userError(fmt::format("--param '{}': {} given twice", excerpt(text),
                            name.str()));
    given.push_back(name.str());
    std::string v = value.str();
    if (it->type == ScalarType::Float32) {
      char *end = nullptr;
      float f = std::strtof(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(f))
        userError(fmt::format("--param '{}': '{}' is not a finite f32",
                              excerpt(text), excerpt(v)));
      args.set(it->name, Scalar::f32(f));
    } else {
      int64_t n = 0;
      if (value.getAsInteger(10, n) ||
          (it->type == ScalarType::Int32 && (n < INT32_MIN || n > INT32_MAX)))
        userError(fmt::format("--param '{}': '{}' is not an {} integer",
                              excerpt(text), excerpt(v), toString(it->type)));
      args.set(it->name, it->type == ScalarType::Int32
                             ? Scalar::i32(static_cast<int32_t>(n))
                             : Scalar::i64(n));
    }
  }
  for (const ParamDecl &p : params)
    if (!llvm::is_contained(given, p.name))
      userError(fmt::format("run: the variant reads param<{}>({}): give "
                            "--param {}=VALUE",
                            toString(p.type), p.name, p.name));
  return args;
}

/// Host tensors of `run`: contiguous (rank 3 or 4), random entries uniform
/// in [-1, 1], or NaN without \p rng.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorRef ref;
  HostTensor(DType dtype, std::vector<int64_t> shape, std::mt19937_64 *rng) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    bytes.assign(n * byteSize(dtype), 0xFF); // NaN until written
    if (rng) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i)
        storeFromFloat(bytes.data(), dtype, i, u(*rng));
    }
    ref = shape.size() == 3
              ? TensorRef::contiguous3(bytes.data(), dtype,
                                       {shape[0], shape[1], shape[2]})
              : TensorRef::contiguous(bytes.data(), dtype,
                                      {shape[0], shape[1], shape[2], shape[3]});
  }
};

/// The median of \p v (not empty).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The tolerance of `run`'s check on O: |O - ref| <= tol * (1 + |ref|).
double runTolerance(DType dtypeO) {
  return dtypeO == DType::BF16 ? 2e-2 : dtypeO == DType::F16 ? 4e-3 : 4e-4;
}

/// `compile --kernel decode`: the GPU split-KV decode kernels
/// (`<name>_decode`, `<name>_decode_merge`, `<name>_decode_merge_serial`)
/// of the spec for a GPU target,
/// through the disk cache (kind decode; --no-cache: in memory), with
/// ptxas's resource report.
int compileDecode() {
  AttentionSpec spec = specFromFlags();
  std::string target = oneTarget();
  if (target == "cpu")
    userError("--kernel decode --target cpu: the CPU decodes with the "
              "varlen forward kernel (compile --varlen; run --kernel "
              "decode)");
  auto t0 = std::chrono::steady_clock::now();
  DiskCache cache(cacheConfig());
  GpuResult res = gpuThroughCache(spec, target, cache, KernelKind::Decode);
  const double ms =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count() *
      1e3;
  const KernelArtifacts &a = res.artifacts;
  const std::string &ptx = *a.file(kPtxFile);
  llvm::outs() << "spec    " << printSpec(spec) << "\n";
  llvm::outs() << fmt::format(
      "target  {} decode, ready in {:.1f} ms\n"
      "key     {}\n"
      "cache   {}{}\n"
      "entries {}_decode {}_decode_merge {}_decode_merge_serial\n"
      "tiles   block_m={} (packed query rows) block_n={} threads={} "
      "shared={} bytes\n",
      target, ms, res.key.hash(), toString(res.outcome),
      res.entryDir.empty() ? "" : " " + res.entryDir, a.entry, a.entry, a.entry,
      a.config.blockM(), a.config.blockN, a.config.threads(), a.sharedBytes);
  runtime::PtxasReport r = runtime::runPtxas(ptx, target);
  for (const char *suffix :
       {"_decode", "_decode_merge", "_decode_merge_serial"})
    if (const runtime::PtxasFunctionReport *f = r.find(a.entry + suffix))
      llvm::outs() << fmt::format("ptxas   {}{}: {} registers, {} bytes "
                                  "spilled\n",
                                  a.entry, suffix, f->registers,
                                  f->spillStoreBytes);
  if (!outDir.empty()) {
    makeDir(outDir, "--out");
    std::string path = outDir + "/" + a.entry + ".decode.ptx";
    std::ofstream(path) << ptx;
    llvm::outs() << "ptx     written to " << path << "\n";
  }
  return 0;
}

/// `run --kernel decode --device gpu`: the split-KV decode kernels of
/// \p spec (loadOrCompileGpuDecode through the cache) on device 0 with
/// \p q and the paged caches \p kc, \p vc uploaded and \p pages as a
/// DevicePageTable; --warmup untimed and --reps timed calls (CUDA events,
/// --num-splits); o and lse copied back. Returns the timed seconds.
std::vector<double> decodeOnGpu(const AttentionSpec &spec, const HostTensor &q,
                                const HostTensor &kc, const HostTensor &vc,
                                const PageList &pages, HostTensor &o,
                                std::vector<float> &lse, const Arguments &args,
                                const RunBuffers &buffers,
                                const std::vector<float> &sink) {
  std::string why;
  if (!runtime::Device::available(&why))
    userError(fmt::format("--device gpu: no GPU to run on ({})", why));
  runtime::Device &dev = runtime::Device::get(0);
  DiskCache cache(cacheConfig());
  LoadReport report;
  auto t0 = std::chrono::steady_clock::now();
  auto kernel = loadOrCompileGpuDecode(spec, dev, {}, &cache, &report);
  llvm::outs() << fmt::format(
      "kernel   decode on {} ({}), {} in {:.1f} ms; {} key splits\n",
      dev.properties().name, gpuTargetFor(dev.properties()),
      toString(report.outcome),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count() *
          1e3,
      runNumSplits ? int(runNumSplits)
                   : kernel->defaultNumSplits(pages.batch(), q.ref.shape[2],
                                              pages.maxSeqLen()));
  std::vector<std::unique_ptr<runtime::DeviceBuffer>> keep;
  auto upload = [&](const void *data, size_t bytes) {
    keep.push_back(std::make_unique<runtime::DeviceBuffer>(dev, bytes));
    keep.back()->copyFromHost(data, bytes);
    return keep.back()->data();
  };
  auto onDevice = [&](const HostTensor &h) {
    TensorRef r = h.ref;
    r.data = upload(h.bytes.data(), h.bytes.size());
    return r;
  };
  TensorRef gq = onDevice(q), gk = onDevice(kc), gv = onDevice(vc),
            go = onDevice(o);
  runtime::DeviceBuffer dl(dev, std::max<size_t>(lse.size(), 1) * 4);
  dl.fill(0xFF); // NaN: a row the kernels miss fails the check
  TensorRef gl = TensorRef::contiguous3(
      dl.data(), DType::F32, {o.ref.shape[0], o.ref.shape[1], o.ref.shape[2]});
  Arguments gargs = args;
  std::map<std::string, const void *> bufferData;
  for (const auto &[name, bytes] : buffers)
    bufferData[name] = upload(bytes.data(), bytes.size());
  bindRunBuffers(spec, gargs, bufferData, buffers);
  if (spec.sink)
    gargs.bindSink(static_cast<const float *>(
                       upload(sink.data(), sink.size() * sizeof(float))),
                   int64_t(sink.size()));
  runtime::DevicePageTable table(pages, dev);
  auto once = [&] {
    kernel->run(gq, gk, gv, table, go, spec.returnLse ? &gl : nullptr, gargs,
                runNumSplits);
  };
  for (int i = 0; i < runWarmup; ++i)
    once();
  dev.synchronize();
  runtime::EventTimer timer(dev);
  std::vector<double> seconds;
  for (int i = 0; i < runReps; ++i) {
    timer.start();
    once();
    seconds.push_back(timer.stopMs() * 1e-3);
  }
  dev.synchronize();
  runtime::copyDeviceToHost(dev, o.bytes.data(), go.data, o.bytes.size());
  dl.copyToHost(lse.data(), lse.size() * sizeof(float));
  return seconds;
}

/// `run --kernel decode`: paged decoding on the CPU (runtime::cpuPagedDecode
/// with the spec's varlen kernel, through the cache) on a random paged
/// cache: --batch sequences of --seqlen-k tokens less a few per sequence
/// (7 b mod --seqlen-k / 2 + 1), --seqlen-q new query tokens each (1..64),
/// pages of --page-size tokens in random order, unused slots NaN, the table
/// as --paged csr|block-table; checked against the float64 paged reference
/// on every row (exit 3 on a mismatch).
int runDecode() {
  AttentionSpec spec = specFromFlags();
  if (runDevice != "cpu" && runDevice != "gpu")
    userError(
        fmt::format("--device '{}' is not cpu or gpu", excerpt(runDevice)));
  const bool gpu = runDevice == "gpu";
  if (runNumSplits.getNumOccurrences() && !gpu)
    userError("--num-splits is a GPU option (run --kernel decode --device "
              "gpu)");
  // Forward-only flags: decoding reads a paged cache, one q_len for all.
  for (const cl::Option *f : std::initializer_list<const cl::Option *>{
           &runSeqlensQ, &runSeqlensK, &blockSparseFlag})
    if (f->getNumOccurrences())
      userError(fmt::format("--{} does not apply to run --kernel decode (a "
                            "paged cache: --batch, --seqlen-q as q_len, "
                            "--seqlen-k, --paged, --page-size)",
                            f->ArgStr.str()));
  if (runNumSplits < 0 || runNumSplits > 1024)
    userError(fmt::format("--num-splits {} is out of range [0, 1024] (0: "
                          "automatic)",
                          int(runNumSplits)));
  if (runCheckRows < 0)
    userError(
        fmt::format("--check-rows {} must be >= 0", int64_t(runCheckRows)));
  if (runPaged != "csr" && runPaged != "block-table")
    userError(fmt::format("--paged '{}' is not csr or block-table",
                          excerpt(runPaged)));
  checkPageSize(runPageSize);
  const int64_t b = runBatch, qLen = runSeqlenQ,
                sk =
                    runSeqlenK.getNumOccurrences() ? int64_t(runSeqlenK) : 1024,
                ps = runPageSize;
  if (b < 1 || b > 4096)
    userError(fmt::format("--batch {} is out of range [1, 4096]", b));
  if (qLen < 1 || qLen > 64)
    userError(
        fmt::format("--seqlen-q {} (q_len) is out of range [1, 64]", qLen));
  if (sk < 1 || sk > (int64_t(1) << 22))
    userError(fmt::format("--seqlen-k {} is out of range [1, 2^22]", sk));
  if (runReps < 1 || runReps > 100000)
    userError(
        fmt::format("--reps {} is out of range [1, 100000]", int(runReps)));
  Arguments args = runArguments(spec);
  // --buffer values, bound on the host (the CPU kernel and the reference;
  // decodeOnGpu binds device copies).
  const RunBuffers buffers = runBufferValues(spec);
  std::map<std::string, const void *> hostBuffers;
  for (const auto &[name, bytes] : buffers)
    hostBuffers[name] = bytes.data();
  bindRunBuffers(spec, args, hostBuffers, buffers);
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
        .count();
  };
  const uint64_t seed = runSeed.getNumOccurrences()
                            ? uint64_t(runSeed)
                            : std::random_device{}() * 0x100000001ull;
  std::mt19937_64 rng(seed);
  const int64_t hq = spec.headsQ, hk = spec.headsKV;
  std::vector<int32_t> lens, indptr{0}, indices, last, table;
  int64_t numPages = 0, maxPages = 0;
  for (int64_t i = 0; i < b; ++i) {
    lens.push_back(
        static_cast<int32_t>(sk - (7 * i) % std::max<int64_t>(1, sk / 2)));
    numPages += (lens.back() + ps - 1) / ps;
    maxPages = std::max<int64_t>(maxPages, (lens.back() + ps - 1) / ps);
  }
  numPages += 1; // one page nobody uses
  std::vector<int32_t> perm(static_cast<size_t>(numPages));
  for (int64_t p = 0; p < numPages; ++p)
    perm[p] = static_cast<int32_t>(p);
  std::shuffle(perm.begin(), perm.end(), rng);
  size_t next = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t used = (lens[i] + ps - 1) / ps;
    for (int64_t p = 0; p < maxPages; ++p)
      table.push_back(p < used ? perm[next + p] : -1);
    for (int64_t p = 0; p < used; ++p)
      indices.push_back(perm[next + p]);
    next += used;
    indptr.push_back(static_cast<int32_t>(indices.size()));
    last.push_back(static_cast<int32_t>((lens[i] - 1) % ps + 1));
  }
  PageList pages =
      runPaged == "csr"
          ? checkPagedCsr({indptr, indices, last}, b, numPages, ps)
          : checkBlockTable({table, maxPages, lens}, b, numPages, ps);
  HostTensor q(spec.dtypeQ, {b, hq, qLen, spec.headDimQK}, &rng),
      kc(spec.dtypeK, {numPages, hk, ps, spec.headDimQK}, nullptr),
      vc(spec.dtypeV, {numPages, hk, ps, spec.headDimV}, nullptr),
      o(spec.dtypeO, {b, hq, qLen, spec.headDimV}, nullptr);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < lens[i]; ++j)
      for (int64_t h = 0; h < hk; ++h) {
        const int32_t page = pages.pageOf(i, j);
        for (int64_t d = 0; d < spec.headDimQK; ++d)
          storeFromFloat(kc.bytes.data(), spec.dtypeK,
                         kc.ref.offset(page, h, j % ps, d), u(rng));
        for (int64_t d = 0; d < spec.headDimV; ++d)
          storeFromFloat(vc.bytes.data(), spec.dtypeV,
                         vc.ref.offset(page, h, j % ps, d), u(rng));
      }
  std::vector<float> lse(b * hq * qLen, std::nanf(""));
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {b, hq, qLen});
  std::vector<float> sink;
  if (spec.sink) {
    std::uniform_real_distribution<float> us(-2.0f, 2.0f);
    for (int64_t h = 0; h < hq; ++h)
      sink.push_back(us(rng));
    args.bindSink(sink.data(), hq);
  }
  llvm::outs() << "spec     " << printSpec(spec) << "\n";
  llvm::outs() << fmt::format(
      "shape    batch={} heads_q={} heads_kv={} q_len={} seq_lens={}..{} "
      "page_size={} pages={} table={} (seed {})\n",
      b, hq, hk, qLen, *std::min_element(lens.begin(), lens.end()),
      *std::max_element(lens.begin(), lens.end()), ps, numPages,
      std::string(runPaged), seed);
  std::vector<double> seconds;
  if (gpu) {
    seconds = decodeOnGpu(spec, q, kc, vc, pages, o, lse, args, buffers, sink);
  } else {
    CompileOptions options = cpuOptions();
    options.varlen = true;
    auto t0 = std::chrono::steady_clock::now();
    auto kernel = loadOrCompileCpu(spec, options);
    llvm::outs() << fmt::format("kernel   cpu varlen, ready in {:.1f} ms\n",
                                since(t0) * 1e3);
    for (int r = 0; r < runWarmup + runReps; ++r) {
      auto s0 = std::chrono::steady_clock::now();
      runtime::cpuPagedDecode(*kernel, q.ref, kc.ref, vc.ref, pages, o.ref,
                              spec.returnLse ? &l : nullptr, args, runThreads);
      if (r >= runWarmup)
        seconds.push_back(since(s0));
    }
  }
  const double med = median(seconds);
  int64_t keys = 0;
  for (int32_t n : lens)
    keys += n;
  const double kvBytes = double(keys) * double(hk) *
                         double(spec.headDimQK * byteSize(spec.dtypeK) +
                                spec.headDimV * byteSize(spec.dtypeV));
  llvm::outs() << fmt::format("time     {:.4f} ms (median of {} runs), {:.3f} "
                              "GB/s of K + V\n",
                              med * 1e3, seconds.size(), kvBytes / med / 1e9);
  if (runCheckRows == 0) {
    llvm::outs() << "check    skipped (--check-rows 0)\n";
    return 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  // The sequences checked: all when their rows fit --check-rows, else the
  // first, the last and random others until --check-rows rows are covered.
  const int64_t rowsPerSeq = hq * qLen;
  std::vector<int64_t> checked;
  if (b * rowsPerSeq <= runCheckRows) {
    for (int64_t i = 0; i < b; ++i)
      checked.push_back(i);
  } else {
    std::vector<int64_t> order;
    for (int64_t i = 1; i + 1 < b; ++i)
      order.push_back(i);
    std::shuffle(order.begin(), order.end(), rng);
    checked = {0};
    if (b > 1)
      checked.push_back(b - 1);
    for (size_t i = 0;
         i < order.size() &&
         int64_t(checked.size()) * rowsPerSeq < int64_t(runCheckRows);
         ++i)
      checked.push_back(order[i]);
    std::sort(checked.begin(), checked.end());
  }
  const double tol =
      runTol.getNumOccurrences() ? double(runTol) : runTolerance(spec.dtypeO);
  double worstO = 0, worstLse = 0;
  std::string firstBad;
  for (int64_t i : checked) {
    // The float64 paged reference of sequence i alone (a batch of one).
    PageList one = pages;
    one.pageStart = {pages.pageStart[i]};
    one.seqLens = {pages.seqLens[i]};
    TensorRef qi = q.ref;
    qi.data = static_cast<uint8_t *>(q.ref.data) +
              i * q.ref.strides[0] * byteSize(spec.dtypeQ);
    qi.shape[0] = 1;
    ReferenceOutput want =
        referencePagedAttention(spec, qi, kc.ref, vc.ref, one, args);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t r = 0; r < qLen; ++r) {
        for (int64_t d = 0; d < spec.headDimV; ++d) {
          const double x = loadAsFloat(o.bytes.data(), spec.dtypeO,
                                       o.ref.offset(i, h, r, d));
          const double w = want.oAt(0, h, r, d), err = std::abs(x - w);
          if (!(err <= tol * (1 + std::abs(w))) &&
              !(std::isnan(x) && std::isnan(w)) && firstBad.empty())
            firstBad = fmt::format("o[{},{},{},{}] = {}, reference {}", i, h, r,
                                   d, x, w);
          if (!std::isnan(err))
            worstO = std::max(worstO, err);
        }
        if (spec.returnLse) {
          const double x = lse[(i * hq + h) * qLen + r],
                       w = want.lseAt(0, h, r);
          if (std::isnan(w)   ? !std::isnan(x)
              : std::isinf(w) ? x != w
                              : !(std::abs(x - w) <= 1e-3 + 1e-4 * std::abs(w)))
            if (firstBad.empty())
              firstBad = fmt::format("lse[{},{},{}] = {}, reference {}", i, h,
                                     r, x, w);
          if (std::isfinite(w))
            worstLse = std::max(worstLse, std::abs(x - w));
        }
      }
  }
  llvm::outs() << fmt::format(
      "check    {} of {} rows ({} of {} sequences) against the float64 paged "
      "reference ({:.1f} s): max |O - ref| = {:.3e}{}: {}\n",
      int64_t(checked.size()) * rowsPerSeq, b * rowsPerSeq, checked.size(), b,
      since(t0), worstO,
      spec.returnLse ? fmt::format(", max |LSE - ref| = {:.3e}", worstLse)
                     : std::string(),
      firstBad.empty() ? "ok" : "MISMATCH");
  if (!firstBad.empty()) {
    llvm::errs() << "flashjit: error: the output does not match the "
                    "reference: "
                 << firstBad << " (seed " << seed << ")\n";
    return 3;
  }
  return 0;
}

/// `run --block-sparse`: the block mask's size and build time.
void printBlockMask(const BlockMask &m, double seconds) {
  llvm::outs() << fmt::format(
      "mask     block mask of {}x{} tiles (batch {}, heads {}): {} partial + "
      "{} full listed of {}, built in {:.2f} ms\n",
      m.blockM, m.blockN, m.batch, m.heads, m.numPartial(), m.numFull(),
      m.batch * m.heads * m.numQTiles * m.numKvTiles, seconds * 1e3);
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

/// A comma list of sequence lengths (--seqlens-q/--seqlens-k), each in
/// [0, 2^24].
std::vector<int64_t> parseSeqlens(const char *flag, const std::string &text) {
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(text).split(items, ',');
  std::vector<int64_t> out;
  for (llvm::StringRef item : items) {
    int64_t n = 0;
    if (item.trim().getAsInteger(10, n) || n < 0 || n > (int64_t(1) << 24))
      userError(fmt::format("{} '{}': '{}' is not a length in [0, 2^24]", flag,
                            excerpt(text), excerpt(item.str())));
    out.push_back(n);
  }
  if (out.size() > 65535)
    userError(fmt::format("{}: {} sequences, at most 65535", flag, out.size()));
  return out;
}

/// `run`'s problem: the call's shape (dense: [batch, heads, seqlen,
/// head_dim]; varlen: packed [total, heads, head_dim] with cu_seqlens),
/// its random host tensors, arguments and sink.
struct RunProblem {
  AttentionSpec spec;
  bool varlen = false;
  /// Per sequence (dense: batch copies of seqlen_q / seqlen_k).
  std::vector<int64_t> lensQ, lensK;
  /// Varlen: prefix sums of lensQ / lensK.
  std::vector<int32_t> cuQ, cuK;
  int64_t totalQ = 0, totalK = 0; // tokens over all sequences
  uint64_t seed = 0;
  std::mt19937_64 rng;
  std::optional<HostTensor> q, k, v, o;
  std::vector<float> lse;
  TensorRef lseRef;
  Arguments args;
  RunBuffers buffers;
  std::vector<float> sink;

  int64_t batch() const { return int64_t(lensQ.size()); }
  const TensorRef *lsePtr() const { return spec.returnLse ? &lseRef : nullptr; }
  /// FlashAttention's count: 2 * heads_q * seqlen_q * seqlen_k *
  /// (head_dim_qk + head_dim_v) per sequence, halved for a causal spec.
  double flops() const {
    double f = 0;
    for (int64_t b = 0; b < batch(); ++b)
      f += 2.0 * double(spec.headsQ) * double(lensQ[b]) * double(lensK[b]) *
           double(spec.headDimQK + spec.headDimV);
    return spec.causal == Causal::None ? f : f / 2;
  }
};

/// Checks `run`'s flags and builds its problem.
RunProblem makeRunProblem(AttentionSpec spec, bool gpu) {
  RunProblem p;
  p.spec = std::move(spec);
  auto positive = [](const char *flag, int64_t v, int64_t max) {
    if (v < 1 || v > max)
      userError(fmt::format("{} {} is out of range [1, {}]", flag, v, max));
  };
  positive("--reps", runReps, 100000);
  if (runWarmup < 0 || runWarmup > 100000)
    userError(
        fmt::format("--warmup {} is out of range [0, 100000]", int(runWarmup)));
  if (runCheckRows < 0)
    userError(
        fmt::format("--check-rows {} must be >= 0", int64_t(runCheckRows)));
  if (runTol.getNumOccurrences() && !(runTol > 0 && runTol < 1e6))
    userError(fmt::format("--tolerance {} must be positive", double(runTol)));
  if (runThreads < 0)
    userError(fmt::format("--threads {} must be >= 0", int(runThreads)));
  if (gpu && runThreads.getNumOccurrences())
    userError("--threads is a CPU option");
  p.varlen = runSeqlensQ.getNumOccurrences() > 0;
  if (p.varlen) {
    for (auto [flag, given] :
         {std::pair{"--batch", runBatch.getNumOccurrences()},
          std::pair{"--seqlen-q", runSeqlenQ.getNumOccurrences()},
          std::pair{"--seqlen-k", runSeqlenK.getNumOccurrences()}})
      if (given)
        userError(fmt::format("{} cannot be combined with --seqlens-q (the "
                              "packed batch is the list)",
                              flag));
    p.lensQ = parseSeqlens("--seqlens-q", runSeqlensQ);
    p.lensK = runSeqlensK.getNumOccurrences()
                  ? parseSeqlens("--seqlens-k", runSeqlensK)
                  : p.lensQ;
    if (p.lensK.size() != p.lensQ.size())
      userError(fmt::format("--seqlens-k has {} lengths, --seqlens-q {}",
                            p.lensK.size(), p.lensQ.size()));
    p.cuQ.push_back(0);
    p.cuK.push_back(0);
    for (size_t b = 0; b < p.lensQ.size(); ++b) {
      if (p.cuQ.back() + p.lensQ[b] > INT32_MAX ||
          p.cuK.back() + p.lensK[b] > INT32_MAX)
        userError("--seqlens-q/--seqlens-k: more than 2^31 - 1 tokens");
      p.cuQ.push_back(int32_t(p.cuQ.back() + p.lensQ[b]));
      p.cuK.push_back(int32_t(p.cuK.back() + p.lensK[b]));
    }
    p.totalQ = p.cuQ.back();
    p.totalK = p.cuK.back();
  } else {
    if (runSeqlensK.getNumOccurrences())
      userError("--seqlens-k needs --seqlens-q");
    const int64_t sk =
        runSeqlenK.getNumOccurrences() ? int64_t(runSeqlenK) : runSeqlenQ;
    positive("--batch", runBatch, 1 << 20);
    positive("--seqlen-q", runSeqlenQ, int64_t(1) << 24);
    positive("--seqlen-k", sk, int64_t(1) << 24);
    p.lensQ.assign(runBatch, runSeqlenQ);
    p.lensK.assign(runBatch, sk);
    p.totalQ = runBatch * runSeqlenQ;
    p.totalK = runBatch * sk;
  }
  const AttentionSpec &s = p.spec;
  p.args = runArguments(s);
  p.buffers = runBufferValues(s);
  std::map<std::string, const void *> host;
  for (const auto &[name, bytes] : p.buffers)
    host[name] = bytes.data();
  bindRunBuffers(s, p.args, host, p.buffers);
  p.seed = runSeed.getNumOccurrences()
               ? uint64_t(runSeed)
               : std::random_device{}() * 0x100000001ull;
  p.rng.seed(p.seed);
  const int64_t hq = s.headsQ, hkv = s.headsKV;
  auto shape = [&](int64_t heads, int64_t total, int64_t seqlen,
                   int64_t dim) -> std::vector<int64_t> {
    if (p.varlen)
      return {total, heads, dim};
    return {p.batch(), heads, seqlen, dim};
  };
  const int64_t sq = p.lensQ.empty() ? 0 : p.lensQ[0];
  const int64_t sk = p.lensK.empty() ? 0 : p.lensK[0];
  // The host tensors of a call too large for this machine's memory are the
  // flags' doing: a UserError naming the sizes, not an internal error.
  const double bytes = double(p.totalQ) * double(hq) *
                           (double(s.headDimQK) * byteSize(s.dtypeQ) +
                            double(s.headDimV) * byteSize(s.dtypeO) + 4.0) +
                       double(p.totalK) * double(hkv) *
                           (double(s.headDimQK) * byteSize(s.dtypeK) +
                            double(s.headDimV) * byteSize(s.dtypeV));
  try {
    p.q.emplace(s.dtypeQ, shape(hq, p.totalQ, sq, s.headDimQK), &p.rng);
    p.k.emplace(s.dtypeK, shape(hkv, p.totalK, sk, s.headDimQK), &p.rng);
    p.v.emplace(s.dtypeV, shape(hkv, p.totalK, sk, s.headDimV), &p.rng);
    p.o.emplace(s.dtypeO, shape(hq, p.totalQ, sq, s.headDimV), nullptr);
    p.lse.assign(hq * p.totalQ, std::nanf(""));
  } catch (const std::bad_alloc &) {
    userError(fmt::format(
        "run: the host tensors of this call (q, k, v, o and lse: {} query "
        "and {} key tokens, heads {}/{}, head dims {}/{}; {:.3g} GB) do not "
        "fit in this machine's memory: give a smaller --batch, --seqlen-q, "
        "--seqlen-k or --seqlens-q",
        p.totalQ, p.totalK, hq, hkv, s.headDimQK, s.headDimV, bytes / 1e9));
  } catch (const std::length_error &) {
    userError(fmt::format("run: the host tensors of this call ({:.3g} GB) "
                          "are larger than a vector can hold",
                          bytes / 1e9));
  }
  p.lseRef = p.varlen ? TensorRef::contiguous2(p.lse.data(), DType::F32,
                                               {hq, p.totalQ})
                      : TensorRef::contiguous3(p.lse.data(), DType::F32,
                                               {p.batch(), hq, sq});
  // The attention sink: one random logit per query head.
  if (s.sink) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int64_t h = 0; h < hq; ++h)
      p.sink.push_back(u(p.rng));
    p.args.bindSink(p.sink.data(), hq);
  }
  return p;
}

/// Compiles (or loads) \p p's kernel for the CPU and times it.
std::vector<double> timeOnCpu(RunProblem &p, DiskCache &cache) {
  CompileOptions options = cpuOptions();
  options.varlen = p.varlen;
  LoadReport report;
  auto t0 = std::chrono::steady_clock::now();
  auto kernel = loadOrCompileCpu(p.spec, options, &cache, &report);
  llvm::outs() << fmt::format("kernel   cpu block_m={} block_n={}, {} in "
                              "{:.1f} ms\n",
                              kernel->config().blockM(),
                              kernel->config().blockN, toString(report.outcome),
                              secondsSince(t0) * 1e3);
  std::optional<BlockMask> mask;
  if (blockSparseFlag) {
    auto t = std::chrono::steady_clock::now();
    mask = p.varlen
               ? kernel->buildVarlenBlockMask(p.cuQ, p.cuK, p.args, runThreads)
               : kernel->buildBlockMask(p.batch(), p.lensQ[0], p.lensK[0],
                                        p.args, runThreads);
    printBlockMask(*mask, secondsSince(t));
  }
  const TensorRef &q = p.q->ref, &k = p.k->ref, &v = p.v->ref, &o = p.o->ref;
  auto once = [&] {
    if (p.varlen)
      kernel->runVarlen(q, k, v, o, p.lsePtr(), p.cuQ, p.cuK, p.args,
                        mask ? &*mask : nullptr, runThreads);
    else if (mask)
      kernel->runBlockSparse(q, k, v, o, p.lsePtr(), *mask, p.args, runThreads);
    else
      kernel->run(q, k, v, o, p.lsePtr(), p.args, runThreads);
  };
  for (int i = 0; i < runWarmup; ++i)
    once();
  std::vector<double> seconds;
  for (int i = 0; i < runReps; ++i) {
    auto t = std::chrono::steady_clock::now();
    once();
    seconds.push_back(secondsSince(t));
  }
  return seconds;
}

/// Compiles (or loads) \p p's kernel for GPU 0, times it with CUDA events
/// and copies O and LSE back into \p p.
std::vector<double> timeOnGpu(RunProblem &p, DiskCache &cache) {
  std::string why;
  if (!runtime::Device::available(&why))
    userError(fmt::format("--device gpu: no GPU to run on ({})", why));
  runtime::Device &dev = runtime::Device::get(0);
  GpuCompileOptions options;
  options.blockN = blockN;
  options.numWarps = warps;
  options.rowsPerWarp = rowsPerWarp;
  options.mma = gpuMma();
  options.blockSparse = blockSparseFlag;
  options.varlen = p.varlen;
  LoadReport report;
  auto t0 = std::chrono::steady_clock::now();
  auto kernel = loadOrCompileGpu(p.spec, dev, options, &cache, &report);
  llvm::outs() << fmt::format("kernel   on {} ({}), {} in {:.1f} ms\n",
                              dev.properties().name,
                              gpuTargetFor(dev.properties()),
                              toString(report.outcome), secondsSince(t0) * 1e3);
  std::vector<std::unique_ptr<runtime::DeviceBuffer>> keep;
  auto upload = [&](const void *data, size_t bytes) {
    keep.push_back(std::make_unique<runtime::DeviceBuffer>(dev, bytes));
    keep.back()->copyFromHost(data, bytes);
    return keep.back()->data();
  };
  auto onDevice = [&](const HostTensor &h) {
    TensorRef r = h.ref;
    r.data = upload(h.bytes.data(), h.bytes.size());
    return r;
  };
  TensorRef gq = onDevice(*p.q), gk = onDevice(*p.k), gv = onDevice(*p.v),
            go = onDevice(*p.o), gl = p.lseRef;
  runtime::DeviceBuffer dl(dev, p.lse.size() * sizeof(float));
  dl.fill(0xFF);
  gl.data = dl.data();
  const TensorRef *glPtr = p.spec.returnLse ? &gl : nullptr;
  Arguments gargs = p.args;
  std::map<std::string, const void *> bufferData;
  for (const auto &[name, bytes] : p.buffers)
    bufferData[name] = upload(bytes.data(), bytes.size());
  bindRunBuffers(p.spec, gargs, bufferData, p.buffers);
  if (p.spec.sink)
    gargs.bindSink(static_cast<const float *>(
                       upload(p.sink.data(), p.sink.size() * sizeof(float))),
                   int64_t(p.sink.size()));
  std::optional<runtime::DeviceCuSeqlens> cu;
  if (p.varlen)
    cu.emplace(p.cuQ, p.cuK, dev);
  std::optional<runtime::DeviceBlockMask> mask;
  if (blockSparseFlag) {
    dev.synchronize();
    auto t = std::chrono::steady_clock::now();
    mask = p.varlen ? kernel->buildVarlenBlockMask(*cu, gargs)
                    : kernel->buildBlockMask(p.batch(), p.lensQ[0], p.lensK[0],
                                             gargs);
    dev.synchronize();
    // The tile lists stay on the device: the shape only.
    const BlockMask &m = mask->shape();
    llvm::outs() << fmt::format(
        "mask     block mask of {}x{} tiles (batch {}, heads {}, {} x {} "
        "tiles each, lists on the GPU), built in {:.2f} ms\n",
        m.blockM, m.blockN, m.batch, m.heads, m.numQTiles, m.numKvTiles,
        secondsSince(t) * 1e3);
  }
  auto once = [&] {
    if (p.varlen)
      kernel->runVarlen(gq, gk, gv, go, glPtr, *cu, gargs,
                        mask ? &*mask : nullptr);
    else if (mask)
      kernel->runBlockSparse(gq, gk, gv, go, glPtr, *mask, gargs);
    else
      kernel->run(gq, gk, gv, go, glPtr, gargs);
  };
  for (int i = 0; i < runWarmup; ++i)
    once();
  dev.synchronize();
  runtime::EventTimer timer(dev);
  std::vector<double> seconds;
  for (int i = 0; i < runReps; ++i) {
    timer.start();
    once();
    seconds.push_back(timer.stopMs() * 1e-3);
  }
  runtime::copyDeviceToHost(dev, p.o->bytes.data(), go.data, p.o->bytes.size());
  dl.copyToHost(p.lse.data(), p.lse.size() * sizeof(float));
  return seconds;
}

/// One checked query row of `run`: where it is (sequence b, head h, row i
/// of the sequence, packed token t for varlen) and its reference.
struct CheckedRow {
  RowIndex row;
  int64_t token = 0;
};

/// The rows `run` checks: all, or --check-rows sampled with the first and
/// last.
std::vector<CheckedRow> sampleRows(RunProblem &p) {
  const int64_t hq = p.spec.headsQ, total = hq * p.totalQ;
  auto rowOf = [&](int64_t r) {
    int64_t t = r / hq, h = r % hq;
    if (!p.varlen)
      return CheckedRow{{t / p.lensQ[0], h, t % p.lensQ[0]}, t};
    int64_t b = std::upper_bound(p.cuQ.begin(), p.cuQ.end(), int32_t(t)) -
                p.cuQ.begin() - 1;
    return CheckedRow{{b, h, t - p.cuQ[b]}, t};
  };
  std::vector<CheckedRow> rows;
  if (total <= runCheckRows) {
    for (int64_t r = 0; r < total; ++r)
      rows.push_back(rowOf(r));
  } else if (total > 0) {
    std::uniform_int_distribution<int64_t> u(1, total - 2);
    rows.push_back(rowOf(0));
    rows.push_back(rowOf(total - 1));
    while (int64_t(rows.size()) < runCheckRows)
      rows.push_back(rowOf(u(p.rng)));
  }
  return rows;
}

/// The float64 reference of \p rows. Varlen: per sequence, through views of
/// the packed tensors as [batch, heads, seqlen_b, head_dim] with batch
/// stride 0, so masks and score modifiers see that sequence's batch index
/// and lengths.
std::vector<ReferenceRow> referenceRows(const RunProblem &p,
                                        const std::vector<CheckedRow> &rows) {
  std::vector<ReferenceRow> want;
  if (!p.varlen) {
    std::vector<RowIndex> idx;
    for (const CheckedRow &r : rows)
      idx.push_back(r.row);
    return referenceAttentionRows(p.spec, p.q->ref, p.k->ref, p.v->ref, idx,
                                  p.args);
  }
  auto view = [&](const HostTensor &h, int64_t start, int64_t len) {
    TensorRef r = h.ref; // [total, heads, dim]
    int64_t elem = byteSize(r.dtype);
    r.data =
        const_cast<uint8_t *>(h.bytes.data()) + start * r.strides[0] * elem;
    r.rank = 4;
    r.shape = {p.batch(), h.ref.shape[1], len, h.ref.shape[2]};
    r.strides = {0, h.ref.strides[1], h.ref.strides[0], 1};
    return r;
  };
  for (int64_t b = 0; b < p.batch(); ++b) {
    std::vector<RowIndex> idx;
    for (const CheckedRow &r : rows)
      if (r.row.batch == b)
        idx.push_back(r.row);
    if (idx.empty())
      continue;
    std::vector<ReferenceRow> part =
        referenceAttentionRows(p.spec, view(*p.q, p.cuQ[b], p.lensQ[b]),
                               view(*p.k, p.cuK[b], p.lensK[b]),
                               view(*p.v, p.cuK[b], p.lensK[b]), idx, p.args);
    want.insert(want.end(), part.begin(), part.end());
  }
  return want;
}

/// Compares \p p's O and LSE with the reference on sampled rows; prints
/// the check line. Returns 0, or 3 on a mismatch (after printing it).
int checkRun(RunProblem &p) {
  const AttentionSpec &s = p.spec;
  const int64_t hq = s.headsQ;
  std::vector<CheckedRow> rows = sampleRows(p);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<ReferenceRow> want = referenceRows(p, rows);
  // Varlen references come grouped by sequence: find each row's token.
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> tokenOf;
  for (const CheckedRow &r : rows)
    tokenOf[{r.row.batch, r.row.head, r.row.qIdx}] = r.token;
  const double tol =
      runTol.getNumOccurrences() ? double(runTol) : runTolerance(s.dtypeO);
  double worstO = 0, worstLse = 0;
  std::string firstBad;
  const double inf = std::numeric_limits<double>::infinity();
  const TensorRef &o = p.o->ref;
  for (const ReferenceRow &w : want) {
    auto [bi, h, i] = w.row;
    int64_t t = tokenOf.at({bi, h, i});
    // A row with no allowed key: O = 0 exactly (its LSE is -inf, or the
    // head's sink).
    bool empty = w.lse == -inf || (s.sink && w.lse == double(p.sink[h]));
    auto bad = [&](const std::string &what) {
      if (firstBad.empty())
        firstBad = what;
    };
    for (int64_t d = 0; d < s.headDimV; ++d) {
      int64_t at = p.varlen ? t * o.strides[0] + h * o.strides[1] + d
                            : o.offset(bi, h, i, d);
      double x = loadAsFloat(p.o->bytes.data(), s.dtypeO, at);
      double err = std::abs(x - w.o[d]);
      // NaN where the reference is NaN too (a score modifier such as
      // log(score) at negative scores) is the right answer.
      if (std::isnan(x) && std::isnan(w.o[d]))
        continue;
      if (std::isnan(x) ||
          (empty ? x != 0.0 : err > tol * (1 + std::abs(w.o[d]))))
        bad(fmt::format("o[{},{},{},{}] = {}, reference {}", bi, h, i, d, x,
                        w.o[d]));
      if (!std::isnan(err))
        worstO = std::max(worstO, err);
    }
    if (s.returnLse) {
      double x = p.varlen ? p.lse[h * p.totalQ + t]
                          : p.lse[(bi * hq + h) * p.lensQ[0] + i];
      if (std::isnan(w.lse) ? !std::isnan(x)
          : w.lse == -inf
              ? x != -inf
              : !(std::abs(x - w.lse) <= 1e-3 + 1e-4 * std::abs(w.lse)))
        bad(fmt::format("lse[{},{},{}] = {}, reference {}", bi, h, i, x,
                        w.lse));
      if (!empty && std::isfinite(x))
        worstLse = std::max(worstLse, std::abs(x - w.lse));
    }
  }
  llvm::outs() << fmt::format(
      "check    {} of {} rows against the float64 reference ({:.1f} s): "
      "max |O - ref| = {:.3e} (tolerance {:.1e} * (1 + |ref|)){}: {}\n",
      rows.size(), hq * p.totalQ, secondsSince(t0), worstO, tol,
      s.returnLse ? fmt::format(", max |LSE - ref| = {:.3e}", worstLse)
                  : std::string(),
      firstBad.empty() ? "ok" : "MISMATCH");
  if (!firstBad.empty()) {
    llvm::errs() << "flashjit: error: the output does not match the "
                    "reference: "
                 << firstBad << " (seed " << p.seed << ")\n";
    return 3;
  }
  return 0;
}

int runRun() {
  if (kernelFlag == "decode")
    return runDecode();
  if (kernelFlag != "fwd")
    userError(fmt::format("run: --kernel '{}' is not fwd or decode (run times "
                          "forward kernels and paged decoding)",
                          excerpt(kernelFlag)));
  // Decode-only flags: a forward run reads no paged cache.
  for (const cl::Option *f : std::initializer_list<const cl::Option *>{
           &runPaged, &runPageSize, &runNumSplits})
    if (f->getNumOccurrences())
      userError(fmt::format("--{} applies to run --kernel decode only",
                            f->ArgStr.str()));
  AttentionSpec spec = specFromFlags();
  if (runDevice != "cpu" && runDevice != "gpu")
    userError(
        fmt::format("--device '{}' is not cpu or gpu", excerpt(runDevice)));
  const bool gpu = runDevice == "gpu";
  RunProblem p = makeRunProblem(std::move(spec), gpu);
  const AttentionSpec &s = p.spec;
  llvm::outs() << "spec     " << printSpec(s) << "\n";
  std::string seqlens =
      p.varlen ? fmt::format("varlen seqlens_q={} seqlens_k={}",
                             fmt::join(p.lensQ, ","), fmt::join(p.lensK, ","))
               : fmt::format("batch={} seqlen_q={} seqlen_k={}", p.batch(),
                             p.lensQ[0], p.lensK[0]);
  llvm::outs() << fmt::format(
      "shape    {} heads_q={} heads_kv={} head_dim_qk={} head_dim_v={} dtype "
      "q/k/v/o={}/{}/{}/{} (seed {})\n",
      seqlens, s.headsQ, s.headsKV, s.headDimQK, s.headDimV, toString(s.dtypeQ),
      toString(s.dtypeK), toString(s.dtypeV), toString(s.dtypeO), p.seed);
  DiskCache cache(cacheConfig());
  std::vector<double> seconds = gpu ? timeOnGpu(p, cache) : timeOnCpu(p, cache);
  const double med = median(seconds), flops = p.flops();
  llvm::outs() << fmt::format(
      "time     {:.4f} ms (median of {} runs after {} warm-up; min {:.4f}, "
      "max {:.4f})\n",
      med * 1e3, seconds.size(), int(runWarmup),
      *std::min_element(seconds.begin(), seconds.end()) * 1e3,
      *std::max_element(seconds.begin(), seconds.end()) * 1e3);
  llvm::outs() << fmt::format(
      "perf     {:.4f} TF/s ({:.4g} GFLOP{})\n", flops / med / 1e12,
      flops / 1e9, s.causal == Causal::None ? "" : ", halved for causal");
  if (runCheckRows == 0) {
    llvm::outs() << "check    skipped (--check-rows 0)\n";
    return 0;
  }
  return checkRun(p);
}

/// LLVM's parser takes an unknown flag that starts with "-h" (e.g. a
/// compile flag such as --head-dim given to bundle) for --help and exits 0
/// having done nothing: such flags are refused here first, by the
/// subcommand's own option names.
std::optional<std::string> unknownHelpPrefixedFlag(int argc, char **argv) {
  cl::SubCommand *sub = &cl::SubCommand::getTopLevel();
  for (cl::SubCommand *c :
       {&compileCmd, &inspectCmd, &cacheCmd, &bundleCmd, &runCmd})
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
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "flashjit: compile, inspect, run, cache and "
                                   "bundle attention kernels\n",
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
    if (runCmd)
      return runRun();
    llvm::errs() << "flashjit: give a subcommand: compile, inspect, run, "
                    "cache, bundle (see flashjit --help)\n";
    return 1;
  } catch (const UserError &e) {
    llvm::errs() << "flashjit: error: " << e.message() << "\n";
    return 1;
  } catch (const std::exception &e) {
    llvm::errs() << "flashjit: internal error: " << e.what() << "\n";
    return 2;
  }
}
