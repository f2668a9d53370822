//===- GpuCache.cpp - The cached entry point for GPU kernels --------------===//
//
// compileGpuArtifacts (compileGpu, nvJitLink, ptxas -v) and
// loadOrCompileGpu: memory tier -> disk cache -> compile. No MLIR here: a
// hit runs only the runtime.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/GpuCache.h"
#include "flashjit/compiler/Compiler.h"

#include "CachedLoad.h"
#include "GpuKey.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Ptxas.h"

#include <fmt/format.h>
#include <llvm/Support/raw_ostream.h>

#include <chrono>
#include <mutex>
#include <set>

namespace flashjit {

namespace {
/// Prints \p message to stderr once per process and \p what.
void warnOnce(const std::string &what, const std::string &message) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(what).second)
    llvm::errs() << message << "\n";
}
} // namespace

using runtime::CacheOutcome;
using runtime::KernelArtifacts;

std::string gpuTargetFor(const runtime::DeviceProperties &device) {
  if (device.ccMajor == 9 && device.ccMinor == 0)
    return "sm_90a";
  if (device.ccMajor >= 8)
    return "sm_80";
  throw UserError(fmt::format("device '{}' has compute capability {}.{}; "
                              "flashjit's GPU kernels need 8.0 or newer",
                              device.name, device.ccMajor, device.ccMinor));
}

runtime::CacheKey gpuCacheKey(const AttentionSpec &spec,
                              const GpuCompileOptions &options) {
  validateForGpu(spec, options);
  // Forward, backward and decode kernels are cached; the kind is in the key.
  return makeGpuCacheKey(spec, options);
}

namespace {
/// Whether \p o leaves a backward's instructions and tiles to the tile
/// policy (nothing asked for by name): then a wgmma kernel that spills is
/// rebuilt with mma.sync (compileGpuArtifacts).
bool policyBackward(const GpuCompileOptions &o) {
  return o.kind == KernelKind::Backward && o.mma == GpuMma::Default &&
         !o.blockN && !o.numWarps && !o.rowsPerWarp && !o.minBlocksPerSM;
}

/// \p o asking for mma.sync: the backward's fallback.
GpuCompileOptions withMmaSync(GpuCompileOptions o) {
  o.mma = GpuMma::MmaSync;
  return o;
}

/// \p o asking for the wgmma backward's synchronous tile step: its first
/// fallback.
GpuCompileOptions withSyncBackward(GpuCompileOptions o) {
  o.syncBackward = true;
  return o;
}
} // namespace

/// compileGpuArtifacts without the backward's fallback.
static KernelArtifacts
compileGpuArtifactsOnce(const AttentionSpec &spec,
                        const GpuCompileOptions &options) {
  using namespace flashjit::runtime;
  GpuKernelImage image = compileGpu(spec, options);
  KernelArtifacts a;
  a.entry = image.name;
  a.specText = printSpec(spec);
  a.config = image.config;
  a.sharedBytes = image.sharedBytes;
  a.stageSeconds = image.timings;
  a.files[kAttnFile] = image.attnText;
  a.files[kGpuFile] = image.gpuText;
  a.files[kPtxFile] = image.ptx;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point since) {
    return std::chrono::duration<double>(clock::now() - since).count();
  };
  // One assembly (assembleCubin: ptxas whole-program where it exists, else
  // nvJitLink) gives the cubin and
  // the resource report; ptxas -v runs only if that fails or its log lacks
  // the kernel.
  auto start = clock::now();
  bool haveReport = false;
  auto takeReport = [&](const PtxasReport &report) {
    // The backward's resources are those of its main kernel `<name>_bwd`,
    // the decode's those of its split kernel `<name>_decode`.
    std::string entry = options.kind == KernelKind::Backward
                            ? image.name + abi::gpu::kBackwardMainSuffix
                        : options.kind == KernelKind::Decode
                            ? image.name + abi::gpu::kDecodeSuffix
                            : image.name;
    if (const PtxasFunctionReport *f = report.find(entry)) {
      a.registers = f->registers;
      a.spillBytes = f->spillStoreBytes + f->spillLoadBytes;
      haveReport = true;
    }
  };
  // No ptxas for a wgmma kernel: no cubin and no report (the driver JITs
  // the PTX at load, whole-program), rather than nvJitLink's serialised one.
  if (chooseAssembler(image.ptx) == Assembler::DriverJit) {
    llvm::errs() << "flashjit: note: no cubin: the driver will JIT this "
                    "wgmma PTX whole-program (no ptxas executable at "
                 << ptxasPath() << "; FLASHJIT_PTXAS names one)\n";
    return a;
  }
  try {
    CubinResult cubin = assembleCubin(image.ptx, options.arch, 3);
    a.files[kCubinFile].assign(cubin.cubin.begin(), cubin.cubin.end());
    takeReport(parsePtxasReport(cubin.infoLog));
    a.stageSeconds.push_back({cubin.assembler == Assembler::Ptxas
                                  ? "cubin (ptxas)"
                                  : "cubin (nvJitLink)",
                              seconds(start)});
  } catch (const DriverError &e) {
    llvm::errs() << "flashjit: warning: no cubin (the assembler failed; the "
                    "driver will JIT the PTX): "
                 << e.what() << "\n";
  }
  if (!haveReport) {
    start = clock::now();
    try {
      takeReport(runPtxas(image.ptx, options.arch));
      a.stageSeconds.push_back({"ptxas -v", seconds(start)});
    } catch (const DriverError &e) {
      llvm::errs() << "flashjit: warning: no resource report (ptxas "
                      "failed): "
                   << e.what() << "\n";
    }
  }
  return a;
}

/// \p best, or \p next if it spills fewer bytes (ties: \p best, the
/// earlier kernel of the chain); \p what names \p next's kernel, \p keep
/// (may be empty) how to keep \p best's.
static KernelArtifacts lessSpilled(KernelArtifacts best, KernelArtifacts next,
                                   const char *what, const char *keep) {
  if (next.registers == 0 || next.spillBytes >= best.spillBytes)
    return best;
  llvm::errs() << fmt::format(
      "flashjit: note: the {} backward of '{}' spills {} bytes of "
      "registers; using the {} backward ({} bytes{}{})\n",
      best.config.syncBackward ? "synchronous wgmma"
      : best.config.wgmma      ? "wgmma"
                               : "mma.sync",
      best.entry, best.spillBytes, what, next.spillBytes, *keep ? "; " : "",
      keep);
  return next;
}

KernelArtifacts compileGpuArtifacts(const AttentionSpec &spec,
                                    const GpuCompileOptions &options) {
  KernelArtifacts a = compileGpuArtifactsOnce(spec, options);
  // The wgmma backward with mask or score-modifier code above head dim 64
  // takes the pipelined tile step; some varlen masks spill there in
  // ptxas 13 (bottom-right causal 8 bytes, a bottom-right window 100) and
  // take the synchronous step, where the configuration differs
  // (KernelConfig::syncBackward), if it spills less.
  if (options.kind != KernelKind::Backward || a.spillBytes == 0)
    return a;
  if (a.config.wgmma && !a.config.syncBackward &&
      resolveGpuTileConfig(spec, withSyncBackward(options)) != a.config)
    a = lessSpilled(a, compileGpuArtifactsOnce(spec, withSyncBackward(options)),
                    "synchronous wgmma", "");
  // The wgmma backward's policy (TilePolicy.cpp backwardWgmmaApplies) was
  // measured on single score modifiers; composed ones (softcap with ALiBi
  // at head dim 64, bias buffers or a document mask with a bias at 128)
  // spill 72-616 bytes there. Where ptxas reports spills and the policy
  // chose wgmma, the mma.sync kernel is built instead if it spills less
  // (none did in those cases). The key stays the request's: a hit holds
  // any kernel of the chain (gpuEntryMismatch), each a pure function of
  // the spec, this build and its ptxas.
  if (!policyBackward(options) || !a.config.wgmma || a.spillBytes == 0)
    return a;
  return lessSpilled(a, compileGpuArtifactsOnce(spec, withMmaSync(options)),
                     "mma.sync", "--mma wgmma keeps wgmma");
}

std::string gpuEntryMismatch(const AttentionSpec &spec,
                             const GpuCompileOptions &options,
                             const KernelArtifacts &a) {
  KernelConfig want = resolveGpuTileConfig(spec, options);
  // The backward's fallbacks (compileGpuArtifacts), the synchronous wgmma
  // step and mma.sync, are this request's other kernels.
  if (a.config != want && options.kind == KernelKind::Backward && want.wgmma &&
      a.config.syncBackward)
    want = resolveGpuTileConfig(spec, withSyncBackward(options));
  if (a.config != want && policyBackward(options) && want.wgmma &&
      !a.config.wgmma)
    want = resolveGpuTileConfig(spec, withMmaSync(options));
  auto order = [](const KernelConfig &c) {
    return c.syncBackward ? " (synchronous)" : "";
  };
  if (a.config != want)
    return fmt::format("its configuration (warps {}, rows per warp {}, "
                       "block_n {}, {}{}) is not the {}, {}, {}, {}{} this "
                       "request resolves to",
                       a.config.numWarps, a.config.rowsPerWarp, a.config.blockN,
                       a.config.mmaName(), order(a.config), want.numWarps,
                       want.rowsPerWarp, want.blockN, want.mmaName(),
                       order(want));
  if (a.entry != spec.variant.name())
    return fmt::format("its entry is '{}', not '{}'", a.entry,
                       spec.variant.name());
  const std::string *ptx = a.file(runtime::kPtxFile);
  if (!ptx)
    return fmt::format("it has no {}", runtime::kPtxFile);
  return runtime::gpuLaunchConfigMismatch(spec, runtime::gpuKernelInfo(a),
                                          *ptx);
}

KernelArtifacts loadOrCompileGpuArtifacts(const AttentionSpec &spec,
                                          const GpuCompileOptions &options,
                                          runtime::DiskCache *cache,
                                          LoadReport *report) {
  runtime::CacheKey key = gpuCacheKey(spec, options); // validates first
  runtime::DiskCache &disk = cache ? *cache : runtime::defaultCache();
  LoadReport local;
  LoadReport &r = report ? *report : local;
  r = LoadReport();
  r.key = key.hash();
  auto compile = [&] { return compileGpuArtifacts(spec, options); };
  KernelArtifacts a = disk.getOrCompile(key, compile, &r.outcome);
  if (r.outcome != CacheOutcome::Uncached)
    r.entryDir = disk.entryDir(r.key);
  if (r.outcome == CacheOutcome::Hit) {
    // The manifest held its checksums; the configuration must also be the
    // one this request resolves to, and the one the PTX declares.
    if (std::string why = gpuEntryMismatch(spec, options, a); !why.empty()) {
      warnOnce("config:" + r.key,
               fmt::format("flashjit: warning: cache entry {} is invalid "
                           "({}); recompiling it",
                           r.entryDir, why));
      a = compile();
      r.outcome =
          disk.store(key, a) ? CacheOutcome::Compiled : CacheOutcome::Uncached;
    }
  }
  return a;
}

namespace {
/// The kernel of \p spec with \p options (arch set) on \p device through
/// \p tier, the disk cache and a compile; \p make builds the loaded kernel
/// from an entry's info, PTX and cubin (may be null).
template <typename Kernel, typename Make>
std::shared_ptr<const Kernel>
loadGpuKernel(runtime::MemoryTier<Kernel> &tier, const AttentionSpec &spec,
              runtime::Device &device, const GpuCompileOptions &options,
              runtime::DiskCache *cache, LoadReport *report, Make make) {
  runtime::CacheKey key = gpuCacheKey(spec, options); // validates first
  runtime::DiskCache &disk = cache ? *cache : runtime::defaultCache();
  auto load = [&](LoadReport &r) {
    KernelArtifacts a = loadOrCompileGpuArtifacts(spec, options, &disk, &r);
    const std::string *ptx = a.file(runtime::kPtxFile);
    if (!ptx)
      throw InternalError(
          fmt::format("GPU kernel {} has no {}", r.key, runtime::kPtxFile));
    return make(runtime::gpuKernelInfo(a), *ptx, a.file(runtime::kCubinFile));
  };
  return loadThroughMemoryTier(tier, device.context(), disk, key.hash(), report,
                               load);
}
} // namespace

std::shared_ptr<const runtime::GpuAttentionKernel>
loadOrCompileGpu(const AttentionSpec &spec, runtime::Device &device,
                 GpuCompileOptions options, runtime::DiskCache *cache,
                 LoadReport *report) {
  static runtime::MemoryTier<runtime::GpuAttentionKernel> tier;
  options.arch = gpuTargetFor(device.properties());
  return loadGpuKernel(
      tier, spec, device, options, cache, report,
      [&](runtime::GpuKernelInfo info, const std::string &ptx,
          const std::string *cubin) {
        return std::make_shared<const runtime::GpuAttentionKernel>(
            spec, std::move(info), ptx, device,
            cubin ? std::string_view(*cubin) : std::string_view());
      });
}

std::shared_ptr<const runtime::GpuAttentionBackwardKernel>
loadOrCompileGpuBackward(const AttentionSpec &spec, runtime::Device &device,
                         GpuCompileOptions options, runtime::DiskCache *cache,
                         LoadReport *report) {
  static runtime::MemoryTier<runtime::GpuAttentionBackwardKernel> tier;
  options.arch = gpuTargetFor(device.properties());
  options.kind = KernelKind::Backward;
  AttentionSpec bwd = backwardSpec(spec);
  return loadGpuKernel(
      tier, bwd, device, options, cache, report,
      [&](runtime::GpuKernelInfo info, const std::string &ptx,
          const std::string *) {
        return std::make_shared<const runtime::GpuAttentionBackwardKernel>(
            bwd, std::move(info), ptx, device);
      });
}

std::shared_ptr<const runtime::GpuDecodeKernel>
loadOrCompileGpuDecode(const AttentionSpec &spec, runtime::Device &device,
                       GpuCompileOptions options, runtime::DiskCache *cache,
                       LoadReport *report) {
  static runtime::MemoryTier<runtime::GpuDecodeKernel> tier;
  options.arch = gpuTargetFor(device.properties());
  options.kind = KernelKind::Decode;
  return loadGpuKernel(
      tier, spec, device, options, cache, report,
      [&](runtime::GpuKernelInfo info, const std::string &ptx,
          const std::string *) {
        return std::make_shared<const runtime::GpuDecodeKernel>(
            spec, std::move(info), ptx, device);
      });
}

} // namespace flashjit
