//===- BuildId.cpp - Build identity and the host CPU ----------------------===//
//
// The parts of a cache key that describe the build (flashjit version and
// commit, LLVM version, cache-relevant environment variables) and the host
// CPU that CPU kernels are compiled for.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/BuildId.h"

#include "flashjit/runtime/BuildInfo.h"

#include <llvm/ADT/SmallVector.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>

namespace flashjit::runtime {

const std::string &flashjitVersion() {
  static const std::string v = FLASHJIT_VERSION_STRING;
  return v;
}
const std::string &flashjitCommit() {
  static const std::string v = FLASHJIT_GIT_COMMIT;
  return v;
}
const std::string &llvmVersion() {
  static const std::string v = LLVM_VERSION_STRING;
  return v;
}
const std::vector<std::string> &cacheRelevantEnvVars() {
  static const std::vector<std::string> v = {
      "FLASHJIT_CC", "FLASHJIT_DRIVER_JIT", "FLASHJIT_PTXAS"};
  return v;
}

const HostCpu &hostCpu() {
  static const HostCpu cpu = [] {
    HostCpu c;
    c.name = llvm::sys::getHostCPUName().str();
    std::vector<std::string> features;
    for (const auto &f : llvm::sys::getHostCPUFeatures())
      features.push_back((f.second ? "+" : "-") + f.first().str());
    std::sort(features.begin(), features.end(),
              [](const std::string &a, const std::string &b) {
                return llvm::StringRef(a).drop_front() <
                       llvm::StringRef(b).drop_front();
              });
    c.features = llvm::join(features, ",");
    return c;
  }();
  return cpu;
}

std::string missingCpuFeatures(const std::string &required,
                               const std::string &host) {
  llvm::SmallVector<llvm::StringRef> have, need;
  llvm::StringRef(host).split(have, ',', -1, /*KeepEmpty=*/false);
  llvm::StringRef(required).split(need, ',', -1, /*KeepEmpty=*/false);
  std::vector<std::string> missing;
  for (llvm::StringRef f : need)
    if (f.starts_with("+") && !llvm::is_contained(have, f))
      missing.push_back(f.drop_front().str());
  return llvm::join(missing, ",");
}

} // namespace flashjit::runtime
