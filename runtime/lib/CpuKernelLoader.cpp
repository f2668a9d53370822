//===- CpuKernelLoader.cpp - dlopen a cached or bundled CPU kernel --------===//
//
// A CPU cache entry holds kernel.so, a shared object linked from the
// compiler's PIC object. It is loaded from the verified bytes in memory
// (a memfd, else a temporary file), not from the entry's path, so
// what runs is what the checksums covered even if the entry is replaced
// meanwhile. Before loading, the CPU features the kernel was compiled for
// are compared with the host's: a bundle built on a newer CPU gives a
// UserError naming the missing features instead of SIGILL.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/CpuBackwardKernel.h"
#include "flashjit/runtime/KernelAbi.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

namespace fs = llvm::sys::fs;

namespace flashjit::runtime {

namespace {

bool writeAll(int fd, const std::string &bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0)
      return false;
    done += size_t(n);
  }
  return true;
}

/// dlopen(\p path) unless a library of that name is loaded already: the
/// loader matches names before files, so it would hand out that library.
void *dlopenFresh(const std::string &path, std::string &error) {
  if (void *stale = ::dlopen(path.c_str(), RTLD_NOLOAD | RTLD_LAZY)) {
    ::dlclose(stale);
    error = fmt::format("a library named {} is loaded already", path);
    return nullptr;
  }
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    error = ::dlerror();
  return handle;
}

/// dlopens the shared object \p bytes (RTLD_NOW | RTLD_LOCAL: symbols of
/// different kernels never collide); the result dlcloses it. Returns null
/// with the reason in \p error.
///
/// The loader knows a library by its path, so /proc/self/fd/N names one
/// library only while fd N stays open: the memfd is closed after dlclose,
/// never before (else the next kernel, loaded through the same fd number,
/// would get this one's handle).
std::shared_ptr<void> dlopenBytes(const std::string &bytes,
                                  std::string &error) {
  int fd = ::memfd_create("flashjit-kernel.so", MFD_CLOEXEC);
  if (fd >= 0) {
    if (writeAll(fd, bytes)) {
      if (void *handle =
              dlopenFresh(fmt::format("/proc/self/fd/{}", fd), error))
        return std::shared_ptr<void>(handle, [fd](void *h) {
          ::dlclose(h);
          ::close(fd);
        });
    } else {
      error = "cannot write the shared object to a memfd";
    }
    ::close(fd);
    if (error.find("loaded already") == std::string::npos &&
        error.find("memfd") == std::string::npos)
      return nullptr; // the bytes do not load: a file would not either
    error.clear();
  }
  // No memfd (old kernel, seccomp): a private temporary file with a unique
  // name, removed once loaded.
  llvm::SmallString<256> tmp;
  if (fs::createTemporaryFile("flashjit-kernel-%%%%%%%%%%%%", "so", fd, tmp)) {
    error = "cannot create a temporary file for the shared object";
    return nullptr;
  }
  bool written = writeAll(fd, bytes);
  ::close(fd);
  void *handle = nullptr;
  if (written)
    handle = dlopenFresh(tmp.str().str(), error);
  else
    error = "cannot write the shared object";
  fs::remove(tmp);
  if (!handle)
    return nullptr;
  return std::shared_ptr<void>(handle, [](void *h) { ::dlclose(h); });
}

} // namespace

namespace {

/// The shared object of \p a dlopened after every check that needs no
/// kernel-specific symbol: a CPU kernel of kind \p kind, a kernel.so, the
/// host has the CPU features it was compiled for, it exports the packed
/// entry `<entry><suffix>_packed` of each of \p suffixes (returned in
/// \p fns) and `<entry>_config` equal to the manifest's configuration.
std::shared_ptr<void> openCpuObject(const KernelArtifacts &a, KernelKind kind,
                                    const std::vector<std::string> &suffixes,
                                    std::vector<void *> &fns) {
  if (!a.config.isCpu())
    throw UserError(fmt::format("kernel '{}' is for target '{}', not a CPU "
                                "kernel",
                                a.entry, a.config.arch));
  if (a.config.kind != kind)
    throw UserError(fmt::format("CPU kernel '{}' is a {} kernel, not a {} "
                                "kernel",
                                a.entry, toString(a.config.kind),
                                toString(kind)));
  const std::string *so = a.file(kSharedObjectFile);
  if (!so)
    throw UserError(fmt::format("CPU kernel '{}' has no {} (made without a "
                                "linker?)",
                                a.entry, kSharedObjectFile));
  if (std::string missing =
          missingCpuFeatures(a.cpuFeatures, hostCpu().features);
      !missing.empty())
    throw UserError(fmt::format("CPU kernel '{}' was compiled for CPU '{}' "
                                "with features this host ('{}') lacks: {}",
                                a.entry, a.cpu, hostCpu().name, missing));
  std::string error;
  std::shared_ptr<void> owner = dlopenBytes(*so, error);
  if (!owner)
    throw UserError(
        fmt::format("cannot load CPU kernel '{}': {}", a.entry, error));
  for (const std::string &suffix : suffixes) {
    std::string symbol = a.entry + suffix + abi::kPackedSuffix;
    void *fn = ::dlsym(owner.get(), symbol.c_str());
    if (!fn)
      throw UserError(fmt::format("CPU kernel shared object lacks the entry "
                                  "'{}'",
                                  symbol));
    fns.push_back(fn);
  }
  // The configuration the object itself declares, before anything runs: a
  // manifest that says otherwise (edited, or another entry's) would run the
  // kernel with a wrong argument list, tile grid or kind.
  std::string configSymbol = a.entry + abi::kConfigSuffix;
  const auto *declared =
      static_cast<const int64_t *>(::dlsym(owner.get(), configSymbol.c_str()));
  std::vector<int64_t> expected = abi::cpuConfigWords(a.config);
  if (!declared || !std::equal(expected.begin(), expected.end(), declared))
    throw UserError(fmt::format(
        "CPU kernel '{}': its shared object {} the configuration its "
        "manifest records (kind {}, block_m {}, block_n {}, count_tiles {}, "
        "varlen {}, block_sparse {})",
        a.entry, declared ? "declares another than" : "does not declare",
        toString(a.config.kind), a.config.cpuBlockM, a.config.blockN,
        a.config.countTiles, a.config.varlen, a.config.blockSparse));
  return owner;
}

} // namespace

std::shared_ptr<const CpuAttentionKernel>
loadCpuKernel(const KernelArtifacts &a) {
  std::vector<void *> fns;
  std::shared_ptr<void> owner =
      openCpuObject(a, KernelKind::Forward, {""}, fns);
  AttentionSpec spec = parseSpec(a.specText);
  void *fn = fns[0];
  void *builder = nullptr;
  if (a.config.blockSparse) {
    std::string b = a.entry + abi::kBlockMaskSuffix + abi::kPackedSuffix;
    builder = ::dlsym(owner.get(), b.c_str());
    if (!builder)
      throw UserError(fmt::format("CPU kernel shared object lacks the "
                                  "block-mask builder '{}'",
                                  b));
  }
  return std::make_shared<const CpuAttentionKernel>(
      std::move(spec), a.config, reinterpret_cast<CpuKernelFn>(fn),
      std::move(owner), reinterpret_cast<CpuKernelFn>(builder));
}

std::shared_ptr<const CpuBackwardKernel>
loadCpuBackwardKernel(const KernelArtifacts &a) {
  std::vector<void *> fns;
  std::shared_ptr<void> owner =
      openCpuObject(a, KernelKind::Backward, {"", abi::bwd::kDqSuffix}, fns);
  AttentionSpec spec = parseSpec(a.specText);
  if (!spec.returnLse)
    throw UserError(fmt::format("CPU backward kernel '{}': its spec does not "
                                "return LSE (not a backward spec)",
                                a.entry));
  return std::make_shared<const CpuBackwardKernel>(
      std::move(spec), a.config, reinterpret_cast<CpuKernelFn>(fns[0]),
      reinterpret_cast<CpuKernelFn>(fns[1]), std::move(owner));
}

} // namespace flashjit::runtime
