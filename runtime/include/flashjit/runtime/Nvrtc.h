//===- Nvrtc.h - CUDA C++ to PTX/cubin with NVRTC ---------------*- C++ -*-===//
//
// NVRTC compiles CUDA C++ in process, without a GPU or driver: the naive
// reference kernels (NvrtcReference.h) and the CUDA printer's tests use it.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_NVRTC_H
#define FLASHJIT_RUNTIME_NVRTC_H

#include <string>
#include <string_view>
#include <vector>

namespace flashjit::runtime {

/// Options of one NVRTC compilation.
struct NvrtcOptions {
  /// Target, "sm_80" or "sm_90a" (arch-specific targets keep their `a`).
  std::string arch = "sm_90a";
  /// Also produce a cubin (--gpu-architecture=sm_XX); otherwise PTX only
  /// (--gpu-architecture=compute_XX).
  bool emitCubin = false;
  /// --use_fast_math (approximate exp/log/div; off for references).
  bool fastMath = false;
  /// -lineinfo, so profilers and compute-sanitizer point at source lines.
  bool lineInfo = true;
  /// Passed through after the options above (e.g. "-DFOO=1").
  std::vector<std::string> extraOptions;
  /// The file name NVRTC reports in diagnostics.
  std::string programName = "flashjit.cu";
};

/// What NVRTC produced.
struct NvrtcOutput {
  /// PTX text (without the trailing NUL).
  std::string ptx;
  /// The cubin when NvrtcOptions::emitCubin was set, else empty.
  std::vector<char> cubin;
  /// NVRTC's log (warnings), possibly empty.
  std::string log;
};

/// Compiles \p source. Throws DriverError carrying NVRTC's log and the
/// options on a compile error (NVRTC_ERROR_COMPILATION) or any other NVRTC
/// failure; UserError for an arch not of the form sm_XX[a].
NvrtcOutput compileCuda(std::string_view source, const NvrtcOptions &options);

/// NVRTC's version as major * 1000 + minor * 10 (e.g. 13000).
int nvrtcVersionNumber();

/// The directory holding cuda_fp16.h / cuda_bf16.h given to NVRTC with -I:
/// $FLASHJIT_CUDA_INCLUDE if set, else the toolkit include directory found
/// at build time.
std::string cudaIncludeDir();

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_NVRTC_H
