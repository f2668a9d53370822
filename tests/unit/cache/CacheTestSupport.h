//===- CacheTestSupport.h - Temporary dirs and fake kernels ---*- C++ -*-===//
#ifndef FLASHJIT_TESTS_CACHE_CACHETESTSUPPORT_H
#define FLASHJIT_TESTS_CACHE_CACHETESTSUPPORT_H

#include "flashjit/runtime/Cache.h"

#include <llvm/ADT/SmallString.h>
#include <llvm/Support/FileSystem.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace flashjit::testing {

/// A fresh directory under the system temporary directory, removed (with
/// its contents) by the destructor.
class TempDir {
public:
  TempDir() {
    llvm::SmallString<256> p;
    if (llvm::sys::fs::createUniqueDirectory("flashjit-cache-test", p))
      throw std::runtime_error("cannot create a temporary directory");
    path_ = p.str().str();
  }
  ~TempDir() {
    // Restore write permission on anything a test made read-only.
    llvm::sys::fs::setPermissions(path_, llvm::sys::fs::all_all);
    llvm::sys::fs::remove_directories(path_);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }

private:
  std::string path_;
};

/// Artifacts as the GPU compiler would make them, with \p tag in every file
/// so different compiles give different bytes.
inline runtime::KernelArtifacts
fakeArtifacts(const std::string &spec, const std::string &tag,
              const std::string &arch = "sm_90a") {
  runtime::KernelArtifacts a;
  a.entry = "flashjit_attention";
  a.specText = spec;
  a.config.arch = arch;
  a.config.numWarps = 4;
  a.config.rowsPerWarp = 16;
  a.config.blockN = 64;
  a.config.minBlocksPerSM = 1;
  a.sharedBytes = 49152;
  a.registers = 168;
  a.spillBytes = 0;
  a.stageSeconds = {{"attn", 0.01}, {"gpu", 0.02}, {"ptx", 0.03}};
  a.files[runtime::kAttnFile] = "attn.attention // " + tag + "\n";
  a.files[runtime::kGpuFile] = "gpu.module // " + tag + "\n";
  a.files[runtime::kPtxFile] =
      ".version 8.0\n.target sm_90a\n// " + tag + "\n" + std::string(4096, 'x');
  return a;
}

/// Sets an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_CACHE_CACHETESTSUPPORT_H
