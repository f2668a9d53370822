//===- Compiler.h - Compiling attention specs to kernels -------*- C++ -*-===//
//
// The public entry point of the compiler, free of MLIR and LLVM headers:
// include it anywhere. compileCpu() turns an AttentionSpec into a
// FlashAttention-2 kernel for the host CPU (attn dialect -> tile program ->
// loops -> LLVM -> ORC JIT) and returns an object that runs it on strided
// tensors, reports the time each stage took and keeps each stage's text.
//
// loadOrCompileCpu() is the cached entry point a host application calls:
// memory tier, then the disk cache (runtime/Cache.h), then a compile into a
// relocatable object linked into kernel.so by the system C compiler driver
// (FLASHJIT_CC, else cc), stored in the cache. A disk hit dlopens kernel.so:
// no MLIR, no LLVM code generation, so the second run of an application
// compiles nothing. Without a C compiler driver it warns once and compiles
// in memory with ORC (nothing cached).
//
// Supported on the CPU: head dims 1..512, fp16/bf16/fp32 tensors (computed
// in fp32), block_m and block_n in {16, 32, 64, 128}. Anything else is a
// UserError raised before MLIR or LLVM is touched, so no LLVM fatal error
// can reach the host application.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_COMPILER_H
#define FLASHJIT_COMPILER_COMPILER_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/TileClass.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/CpuBackwardKernel.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flashjit {

/// Where the generated kernel runs (GPU kernels have their own options,
/// GpuCompileOptions in GpuCompiler.h).
enum class Target : uint8_t {
  CPU ///< the host CPU
};

/// How to compile one spec.
struct CompileOptions {
  /// The target; only Target::CPU exists.
  Target target = Target::CPU;
  /// Queries per tile; 0 picks the target's default (CPU: 64).
  int blockM = 0;
  /// Keys per tile; 0 picks the target's default (CPU: 64).
  int blockN = 0;
  /// Directory that receives one file per stage (<name>.<key>.attn.mlir,
  /// .tiled.mlir, .llvm.mlir, .ll, .opt.ll; <key> is cpuCacheKey's hash, so
  /// compiles never overwrite each other); empty means $FLASHJIT_DUMP_DIR
  /// if set, else no files.
  std::string dumpDir;
  /// Instrument the kernel to count full/partial/empty tiles (RunStats).
  bool countTiles = false;
  /// LLVM optimisation level, 0..3.
  int optLevel = runtime::kDefaultCpuOptLevel;
  /// Packed variable-length batches (FlashAttention's varlen layout, see
  /// checkVarlenTensors): the kernel runs through CpuKernel::runVarlen only.
  bool varlen = false;
  /// Block-sparse kernel: every run takes a BlockMask and visits only the
  /// tiles it lists (runBlockSparse, or runVarlen with a mask); the kernel
  /// also builds block masks of its own mask (buildBlockMask).
  bool blockSparse = false;
};

/// The compilation stages whose output can be inspected.
enum class Stage : uint8_t {
  Attn,        ///< attn.attention with the user's regions (with locations)
  Tiled,       ///< the FlashAttention-2 tile program
  LLVMDialect, ///< after lowering to the LLVM dialect
  LLVMIR,      ///< LLVM IR before optimisation
  LLVMIROpt    ///< LLVM IR after optimisation
};
/// "attn", "tiled", "llvm-dialect", "llvm-ir", "llvm-ir-opt".
std::string_view toString(Stage stage);

/// Wall time of one compilation step (the runtime's type: meta.json records
/// the same timings).
using runtime::StageTiming;

/// How loadOrCompileCpu() and loadOrCompileGpu() served a request (the
/// runtime's type).
using runtime::LoadReport;

/// A compiled CPU kernel: the runtime's kernel, whose run(), runBlockSparse(),
/// runVarlen(), buildBlockMask() and buildVarlenBlockMask() it inherits (see
/// runtime::CpuAttentionKernel for shapes and errors), plus what the compile
/// that made it recorded: the time and the text of each stage. Thread-safe:
/// runs may be concurrent.
class CpuKernel : public runtime::CpuAttentionKernel {
public:
  /// \p kernel with the stage times and texts of the compile that made it
  /// (\p stageTexts in Stage order).
  CpuKernel(runtime::CpuAttentionKernel kernel,
            std::vector<StageTiming> timings,
            std::array<std::string, 5> stageTexts);
  CpuKernel(const CpuKernel &) = delete;
  CpuKernel &operator=(const CpuKernel &) = delete;

  /// Queries per tile it was compiled with.
  int blockM() const { return config().cpuBlockM; }
  /// Keys per tile it was compiled with.
  int blockN() const { return config().blockN; }
  /// Whether it was compiled with CompileOptions::varlen.
  bool varlen() const { return config().varlen; }
  /// Whether it was compiled with CompileOptions::blockSparse.
  bool blockSparse() const { return config().blockSparse; }

  /// Time per compilation step, in order, with a final "total" (for a
  /// kernel loaded from the cache: the times of the compile that made it).
  const std::vector<StageTiming> &timings() const { return timings_; }
  /// The text of one stage (empty if the cache entry lacks it).
  const std::string &stageText(Stage stage) const;
  /// The runtime object that runs the kernel: this object.
  const runtime::CpuAttentionKernel &runtimeKernel() const { return *this; }

  /// A kernel from compileCpuArtifacts' files (a cache entry or a bundle)
  /// without MLIR or code generation: runtime::loadCpuKernel plus the stage
  /// texts and compile times the artifacts hold. Throws UserError like
  /// runtime::loadCpuKernel.
  static std::shared_ptr<const CpuKernel>
  load(const runtime::KernelArtifacts &artifacts);
  /// \p kernel (loaded from \p artifacts) with their stage texts and times.
  static std::shared_ptr<const CpuKernel>
  fromRuntime(const runtime::CpuAttentionKernel &kernel,
              const runtime::KernelArtifacts &artifacts);

private:
  std::vector<StageTiming> timings_;
  std::array<std::string, 5> stageTexts_;
};

/// Checks that the CPU backend supports \p spec and \p options (after
/// spec.validate()); throws UserError naming the field otherwise.
void validateForCpu(const AttentionSpec &spec, const CompileOptions &options);

/// Compiles \p spec for the host CPU (thread-safe). Throws UserError
/// (unsupported spec or option) or CompileError (a pass failed: the message
/// holds the diagnostics).
std::shared_ptr<const CpuKernel> compileCpu(const AttentionSpec &spec,
                                            const CompileOptions &options = {});

/// The tile sizes \p options resolve to on the CPU (0 picks 64).
int cpuBlockM(const CompileOptions &options);
int cpuBlockN(const CompileOptions &options);

/// The kernel configuration \p options resolve to on the CPU: arch "cpu",
/// cpuBlockM, blockN, countTiles, varlen, blockSparse and optLevel (the
/// record cache keys, manifests and CpuAttentionKernel hold).
KernelConfig cpuKernelConfig(const CompileOptions &options);

/// The disk-cache key of \p spec compiled with \p options on this host:
/// spec text, resolved block_m/block_n, opt level, count-tiles, varlen,
/// block-sparse, host CPU name and features, build and FLASHJIT_CC
/// (CacheKey::makeCpu). Throws UserError like validateForCpu.
runtime::CacheKey cpuCacheKey(const AttentionSpec &spec,
                              const CompileOptions &options = {});

/// Whether CPU kernels can be linked into a loadable kernel.so: a C compiler
/// driver is found ($FLASHJIT_CC, else `cc` on PATH). If not, \p why says
/// what was looked for.
bool cpuLinkerAvailable(std::string *why = nullptr);

/// Compiles \p spec for the host CPU into the files a cache entry or a
/// bundle holds: kernel.o (relocatable PIC object for the host CPU and
/// features), kernel.so (linked with `$FLASHJIT_CC -shared`, -lm when the
/// code calls libm), every stage's text (kernel.attn.mlir ... kernel.opt.ll)
/// and the facts meta.json records (entry symbol, block_m, block_n,
/// count-tiles, opt level, CPU). Writes the stages to options.dumpDir /
/// FLASHJIT_DUMP_DIR like compileCpu. Throws UserError (unsupported spec or
/// option) or CompileError (a pass failed, no C compiler driver, or the link
/// failed: the message holds its output).
runtime::KernelArtifacts
compileCpuArtifacts(const AttentionSpec &spec,
                    const CompileOptions &options = {});

/// What code generation made of one function of a CPU kernel, read from
/// LLVM's verbose assembly (the CPU's analogue of `ptxas -v`).
struct CpuFunctionResources {
  std::string name;
  /// Machine instructions in the function's text.
  int64_t instructions = 0;
  /// Register spills to the stack and reloads from it (the code
  /// generator's "Spill" / "Reload" annotations, folded ones included).
  int64_t spillStores = 0;
  int64_t spillLoads = 0;
  /// The stack frame the prologue reserves (`sub $N, %rsp`; 0 if none).
  int64_t stackFrameBytes = 0;
};

/// A CPU kernel's host assembly and the resources of its functions.
struct CpuAssembly {
  /// AT&T-syntax assembly with LLVM's annotations.
  std::string text;
  std::vector<CpuFunctionResources> functions;
};

/// The host assembly of a CPU kernel: \p optimizedIR (its kernel.opt.ll,
/// Stage::LLVMIROpt) generated again through LLVM's TargetMachine for the
/// host CPU and features at \p optLevel, as kernel.o was. The IR's trip
/// through text can move a few instructions: for a causal head_dim 64
/// kernel, 1372 instructions here against 1370 in kernel.o (objdump). Throws
/// CompileError when the IR does not parse or the host cannot emit
/// assembly.
CpuAssembly cpuAssembly(const std::string &optimizedIR, int optLevel);

/// The kernel of \p spec compiled with \p options, from the cheapest
/// source: this process's memory tier (per cache directory and key), the
/// disk cache
/// \p cache (nullptr: runtime::defaultCache(), configured by
/// FLASHJIT_CACHE_DIR, FLASHJIT_DISABLE_CACHE, FLASHJIT_ALWAYS_COMPILE,
/// FLASHJIT_CACHE_MAX_BYTES), else compileCpuArtifacts() and a store. A
/// corrupt entry (any checksum, a kernel.so that does not load) is
/// recompiled and replaced. With FLASHJIT_ALWAYS_COMPILE both tiers are
/// skipped (the entry is still written). A disabled, read-only or full cache
/// or a missing C compiler driver gives one warning on stderr and an
/// in-memory compile; a hit writes nothing to FLASHJIT_DUMP_DIR. Fills
/// \p report if given. Throws UserError or CompileError, like compileCpu.
/// Thread-safe: concurrent requests for a key compile it once, share it.
std::shared_ptr<const CpuKernel>
loadOrCompileCpu(const AttentionSpec &spec, const CompileOptions &options = {},
                 runtime::DiskCache *cache = nullptr,
                 LoadReport *report = nullptr);

/// The artifacts of \p spec with \p options through the disk cache \p cache
/// (usable; a C compiler driver present: cpuLinkerAvailable), with the same
/// verdict as loadOrCompileCpu: a hit whose kernel.so does not load here or
/// declares another configuration than its manifest is recompiled and
/// replaced (one warning). What `flashjit compile --target cpu` runs.
/// Throws like compileCpuArtifacts.
runtime::KernelArtifacts loadOrCompileCpuArtifacts(
    const AttentionSpec &spec, const CompileOptions &options,
    runtime::DiskCache &cache, LoadReport *report = nullptr);

/// Forgets the kernels loadOrCompileCpu() and loadOrCompileCpuBackward()
/// keep in memory, so the next request reads the disk cache (tests,
/// benchmarks). Kernels already returned stay valid. Thread-safe, even
/// during loadOrCompileCpu().
void clearCpuMemoryTier();

/// A compiled CPU backward kernel (gradients; runtime::CpuBackwardKernel
/// states the semantics, shapes and errors of its run(), runBlockSparse()
/// and runVarlen()) plus the time and text of each compilation stage (the
/// Tiled stage holds both kernels: @<name> for dK/dV, @<name>_dq for dQ and
/// the buffer and parameter gradients).
class CpuBackward : public runtime::CpuBackwardKernel {
public:
  CpuBackward(runtime::CpuBackwardKernel kernel,
              std::vector<StageTiming> timings,
              std::array<std::string, 5> stageTexts)
      : runtime::CpuBackwardKernel(std::move(kernel)),
        timings_(std::move(timings)), stageTexts_(std::move(stageTexts)) {}
  CpuBackward(const CpuBackward &) = delete;
  CpuBackward &operator=(const CpuBackward &) = delete;
  /// Time per compilation step, with a final "total".
  const std::vector<StageTiming> &timings() const { return timings_; }
  /// The text of one stage.
  const std::string &stageText(Stage stage) const {
    return stageTexts_[static_cast<size_t>(stage)];
  }

private:
  std::vector<StageTiming> timings_;
  std::array<std::string, 5> stageTexts_;
};

/// The spec a backward kernel of \p spec is compiled for: \p spec with
/// returnLse set (the backward reads the forward's LSE, so the forward of
/// a training call must return it; the flag does not change the
/// gradients, so it does not split backward cache keys).
AttentionSpec backwardSpec(const AttentionSpec &spec);

/// Compiles the backward of \p spec for the host CPU (in memory, ORC JIT):
/// the attn.attention with its score_grad region (MLIRGen,
/// KernelKind::Backward) through attn-tile-backward and the CPU pipeline.
/// options.varlen and options.blockSparse select the call form as for the
/// forward (a block-sparse backward takes the forward's BlockMask, so its
/// tiles must equal the forward's: use the same blockM/blockN). Throws
/// UserError as validateForCpu, for options.countTiles, and at the user's
/// line for a score modifier that cannot be differentiated
/// (frontend/Derivative.h); CompileError if a pass fails.
std::shared_ptr<const CpuBackward>
compileCpuBackward(const AttentionSpec &spec,
                   const CompileOptions &options = {});

/// The backward of \p spec through the same tiers as loadOrCompileCpu: the
/// memory tier (per cache directory and key), then \p cache (default:
/// runtime::defaultCache()) under cpuBackwardCacheKey, else
/// compileCpuBackwardArtifacts() and a store. A disk hit runs no MLIR: its
/// kernel.so is loaded by runtime::loadCpuBackwardKernel, and one that does
/// not load here (edited, another CPU) is recompiled and replaced with one
/// warning. Without a C compiler driver, or with the cache disabled, it
/// compiles in memory (compileCpuBackward) and reports Uncached. \p report,
/// if given, says which tier served the kernel. Throws as
/// compileCpuBackward (UserError before any tier is consulted).
std::shared_ptr<const CpuBackward> loadOrCompileCpuBackward(
    const AttentionSpec &spec, const CompileOptions &options = {},
    runtime::DiskCache *cache = nullptr, LoadReport *report = nullptr);

/// The disk-cache key of the backward of \p spec: cpuCacheKey of
/// backwardSpec(spec) with config.kind = KernelKind::Backward, so the
/// forward and the backward of one spec never share an entry. Throws
/// UserError like compileCpuBackward (unsupported spec or option, a score
/// modifier that cannot be differentiated).
runtime::CacheKey cpuBackwardCacheKey(const AttentionSpec &spec,
                                      const CompileOptions &options = {});

/// Compiles the backward of \p spec into the files of a cache entry or a
/// bundle, as compileCpuArtifacts does for the forward: kernel.so exports
/// the packed entries `<entry>_packed` (dK/dV) and `<entry>_dq_packed` (dQ
/// and the buffer/parameter gradients, abi::bwd) and `<entry>_config`
/// (KernelKind::Backward); the artifacts' config.kind is Backward and their
/// spec is backwardSpec(spec). Throws like compileCpuBackward, and
/// CompileError when no C compiler driver is found or the link fails.
runtime::KernelArtifacts
compileCpuBackwardArtifacts(const AttentionSpec &spec,
                            const CompileOptions &options = {});

/// loadOrCompileCpuBackward's disk tier without the memory tier: the
/// artifacts of the backward of \p spec from \p cache, else compiled and
/// stored (what `flashjit bundle --kernel bwd` bundles). A hit is checked by
/// loading it (runtime::loadCpuBackwardKernel); one that does not load is
/// recompiled and replaced. Throws like compileCpuBackwardArtifacts.
runtime::KernelArtifacts loadOrCompileCpuBackwardArtifacts(
    const AttentionSpec &spec, const CompileOptions &options,
    runtime::DiskCache &cache, LoadReport *report = nullptr);

/// The fused forward and backward of one dense call, for tests and simple
/// training loops: runs loadOrCompileCpu(backwardSpec(spec)) into \p o and
/// \p lse (fp32 [B, Hq, Sq]), then the backward
/// (loadOrCompileCpuBackward with the default cache) into \p dq, \p dk, \p dv,
/// and returns the buffer and parameter gradients. Shapes and errors as
/// CpuAttentionKernel::run and CpuBackwardKernel::run; options.varlen and
/// options.blockSparse must be off (UserError).
DataGradients forwardBackwardCpu(const AttentionSpec &spec, const TensorRef &q,
                                 const TensorRef &k, const TensorRef &v,
                                 const TensorRef &dO, const TensorRef &o,
                                 const TensorRef &lse, const TensorRef &dq,
                                 const TensorRef &dk, const TensorRef &dv,
                                 const Arguments &args = {},
                                 const CompileOptions &options = {});

/// The run-time tile classifier of a spec's mask, JIT-compiled on its own:
/// the very code kernels run to classify tiles, exposed so tests can compare
/// it with flashjit::classifyTile on many boxes without running attention.
class TileClassifierKernel {
public:
  /// The JIT-compiled classifier and its parameter order (CompilerImpl.h).
  struct Impl;
  /// Made by compileTileClassifier().
  explicit TileClassifierKernel(std::unique_ptr<Impl> impl);
  /// Releases the JIT engine.
  ~TileClassifierKernel();
  /// The class of \p box; parameters come from \p args (all required), and
  /// so do the buffers when compiled with the buffer-range rule.
  TileClass classify(const TileBox &box, const Arguments &args = {}) const;
  /// Counts over a seqlen_q x seqlen_k problem, like flashjit::countTiles.
  TileCounts count(int64_t seqlenQ, int64_t seqlenK, int64_t blockM,
                   int64_t blockN, const Arguments &args = {}) const;

private:
  std::unique_ptr<Impl> impl_;
};

/// JIT-compiles the tile classifier of spec.effectiveMask(); with
/// options.bufferRanges, the one the block-mask builder runs (it reads the
/// buffers: the buffer-range rule), otherwise the one attention kernels run.
std::shared_ptr<const TileClassifierKernel>
compileTileClassifier(const AttentionSpec &spec,
                      const TileClassOptions &options = {});

} // namespace flashjit

#endif // FLASHJIT_COMPILER_COMPILER_H
