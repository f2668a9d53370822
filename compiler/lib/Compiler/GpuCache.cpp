//===- GpuCache.cpp - The cached entry point for GPU kernels --------------===//
//
// compileGpuArtifacts (compileGpu, nvJitLink, ptxas -v) and
// loadOrCompileGpu: memory tier -> disk cache -> compile. No MLIR here: a
// hit runs only the runtime.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/GpuCache.h"

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

namespace flashjit {

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
  // The key has no kernel kind yet: a backward entry would collide with
  // the forward's.
  if (options.kind != KernelKind::Forward)
    throw UserError("the GPU backward kernels are not cached yet (the cache "
                    "key has no kernel kind): compile them with compileGpu "
                    "and load them with runtime::GpuAttentionBackwardKernel");
  return makeGpuCacheKey(spec, options);
}

KernelArtifacts compileGpuArtifacts(const AttentionSpec &spec,
                                    const GpuCompileOptions &options) {
  using namespace flashjit::runtime;
  GpuKernelImage image = compileGpu(spec, options);
  KernelArtifacts a;
  a.entry = image.name;
  a.arch = image.arch;
  a.specText = printSpec(spec);
  a.threads = image.threads;
  a.blockM = image.blockM;
  a.blockN = image.blockN;
  a.sharedBytes = image.sharedBytes;
  a.varlen = image.varlen;
  a.blockSparse = image.blockSparse;
  a.mma = image.tma ? "wgmma.tma" : image.wgmma ? "wgmma" : "mma.sync";
  a.stageSeconds = image.timings;
  a.files[kAttnFile] = image.attnText;
  a.files[kGpuFile] = image.gpuText;
  a.files[kPtxFile] = image.ptx;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point since) {
    return std::chrono::duration<double>(clock::now() - since).count();
  };
  // One assembly gives the cubin and (with -verbose) the resource report;
  // ptxas -v runs only if nvJitLink fails or its log lacks the kernel.
  auto start = clock::now();
  bool haveReport = false;
  auto takeReport = [&](const PtxasReport &report) {
    if (const PtxasFunctionReport *f = report.find(image.name)) {
      a.registers = f->registers;
      a.spillBytes = f->spillStoreBytes + f->spillLoadBytes;
      haveReport = true;
    }
  };
  try {
    CubinResult cubin = ptxToCubin(image.ptx, options.arch, 3, {"-verbose"});
    a.files[kCubinFile].assign(cubin.cubin.begin(), cubin.cubin.end());
    takeReport(parsePtxasReport(cubin.infoLog));
    a.stageSeconds.push_back({"cubin (nvJitLink)", seconds(start)});
  } catch (const DriverError &e) {
    llvm::errs() << "flashjit: warning: no cubin (nvJitLink failed; the "
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
  KernelArtifacts a = disk.getOrCompile(
      key, [&] { return compileGpuArtifacts(spec, options); }, &r.outcome);
  if (r.outcome != CacheOutcome::Uncached)
    r.entryDir = disk.entryDir(r.key);
  return a;
}

namespace {
runtime::MemoryTier<runtime::GpuAttentionKernel> &memoryTier() {
  static runtime::MemoryTier<runtime::GpuAttentionKernel> tier;
  return tier;
}
} // namespace

std::shared_ptr<const runtime::GpuAttentionKernel>
loadOrCompileGpu(const AttentionSpec &spec, runtime::Device &device,
                 GpuCompileOptions options, runtime::DiskCache *cache,
                 LoadReport *report) {
  options.arch = gpuTargetFor(device.properties());
  runtime::CacheKey key = gpuCacheKey(spec, options); // validates first
  runtime::DiskCache &disk = cache ? *cache : runtime::defaultCache();
  auto load = [&](LoadReport &r) {
    KernelArtifacts a = loadOrCompileGpuArtifacts(spec, options, &disk, &r);
    const std::string *ptx = a.file(runtime::kPtxFile);
    if (!ptx)
      throw InternalError(
          fmt::format("GPU kernel {} has no {}", r.key, runtime::kPtxFile));
    const std::string *cubin = a.file(runtime::kCubinFile);
    return std::make_shared<const runtime::GpuAttentionKernel>(
        spec, runtime::gpuKernelInfo(a), *ptx, device,
        cubin ? std::string_view(*cubin) : std::string_view());
  };
  return loadThroughMemoryTier(memoryTier(), device.context(), disk, key.hash(),
                               report, load);
}

} // namespace flashjit
