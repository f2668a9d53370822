//===- GpuArtifacts.h - A GPU compile as cache artifacts ---------*- C++
//-*-===//
//
// The compile callback the CLI and the cache benchmark hand to the kernel
// cache: compileGpu, then nvJitLink (cubin) and ptxas -v (registers, spills).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TOOLS_FLASHJIT_GPUARTIFACTS_H
#define FLASHJIT_TOOLS_FLASHJIT_GPUARTIFACTS_H

#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Ptxas.h"

#include <llvm/Support/raw_ostream.h>

#include <chrono>
#include <string>

namespace flashjit {

/// Generates a GPU kernel and everything the cache stores about it: the
/// artifacts of \p spec on \p arch. A failing nvJitLink or ptxas only
/// leaves out the cubin or the resource report (with a warning); compileGpu
/// throws UserError or CompileError.
inline runtime::KernelArtifacts compileGpuArtifacts(const AttentionSpec &spec,
                                                    const std::string &arch,
                                                    int blockN = 0,
                                                    int warps = 0) {
  using namespace flashjit::runtime;
  GpuCompileOptions options;
  options.arch = arch;
  options.blockN = blockN;
  options.numWarps = warps;
  GpuKernelImage image = compileGpu(spec, options);
  KernelArtifacts a;
  a.entry = image.name;
  a.arch = image.arch;
  a.specText = printSpec(spec);
  a.threads = image.threads;
  a.blockM = image.blockM;
  a.blockN = image.blockN;
  a.sharedBytes = image.sharedBytes;
  for (const StageTiming &t : image.timings)
    a.stageSeconds.push_back({t.name, t.seconds});
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
    CubinResult cubin = ptxToCubin(image.ptx, arch, 3, {"-verbose"});
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
      takeReport(runPtxas(image.ptx, arch));
      a.stageSeconds.push_back({"ptxas -v", seconds(start)});
    } catch (const DriverError &e) {
      llvm::errs() << "flashjit: warning: no resource report (ptxas "
                      "failed): "
                   << e.what() << "\n";
    }
  }
  return a;
}

} // namespace flashjit

#endif // FLASHJIT_TOOLS_FLASHJIT_GPUARTIFACTS_H
