//===- BuildId.h - Build identity and the host CPU --------------*- C++ -*-===//
//
// What identifies the build that made a kernel (flashjit's version and
// commit, LLVM's version, the environment variables that change generated
// code) and the host CPU that CPU kernels are compiled for. Every cache key
// (CacheEntry.h) holds these, so a new build or another CPU never loads a
// stale kernel. Needs no MLIR and no CUDA.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_BUILDID_H
#define FLASHJIT_RUNTIME_BUILDID_H

#include <string>
#include <vector>

namespace flashjit::runtime {

/// flashjit's version ("0.1.0").
const std::string &flashjitVersion();
/// The git commit flashjit was configured from, or "unknown".
const std::string &flashjitCommit();
/// The LLVM version flashjit was built with (LLVM_VERSION_STRING).
const std::string &llvmVersion();
/// Names of the environment variables that change generated code or its
/// artifacts and are therefore part of every key (FLASHJIT_PTXAS,
/// FLASHJIT_DRIVER_JIT, FLASHJIT_CC).
const std::vector<std::string> &cacheRelevantEnvVars();

/// The host CPU as LLVM names it, which CPU kernels are compiled for.
struct HostCpu {
  /// LLVM's CPU name, e.g. "znver4" or "sapphirerapids".
  std::string name;
  /// Target features as "+avx2,+fma,-avx512f,..." sorted by name.
  std::string features;
};
/// The host CPU (llvm::sys::getHostCPUName/getHostCPUFeatures), computed
/// once.
const HostCpu &hostCpu();
/// The features of \p required ("+a,-b,..." form) that are enabled there
/// but missing on \p host (same form), comma-separated; empty when code
/// compiled for \p required runs on \p host.
std::string missingCpuFeatures(const std::string &required,
                               const std::string &host);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_BUILDID_H
