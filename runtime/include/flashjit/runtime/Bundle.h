//===- Bundle.h - Directories of precompiled kernels ------------*- C++ -*-===//
//
// A bundle is a directory of cache entries (CacheEntry.h) plus bundle.json,
// an index from the request (spec text, target, tile configuration) to the
// entry. Host applications ship bundles so that their users compile
// nothing; loading one needs only the runtime (no compiler, no MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_BUNDLE_H
#define FLASHJIT_RUNTIME_BUNDLE_H

#include "flashjit/runtime/CacheEntry.h"

#include <optional>
#include <string>
#include <vector>

namespace flashjit::runtime {

/// A directory of precompiled kernels a host application ships: entries as
/// in the disk cache plus bundle.json mapping (spec text, requested
/// KernelConfig, mma) to entries. Built by `flashjit bundle`; loading needs
/// only this library.
class Bundle {
public:
  /// One kernel of the bundle: the request it answers and its entry.
  struct Item {
    /// Canonical spec text.
    std::string specText;
    /// The configuration as requested (CacheKey::config): target
    /// (config.arch), kind, tiles (GPU: 0 = the tile policy's) and modes.
    KernelConfig config;
    /// GPU only: the tensor-core instructions asked for (CacheKey::mma;
    /// empty and "default" are the same request).
    std::string mma;
    /// The entry's directory name (its key at build time).
    std::string key;
  };

  /// Opens the bundle in \p dir. Throws UserError naming the file if
  /// bundle.json is missing, unreadable or of another schema version.
  static Bundle open(const std::string &dir);
  /// Creates (or extends) a bundle in \p dir and adds \p artifacts under
  /// \p key. Throws UserError if the directory cannot be written.
  static void add(const std::string &dir, const CacheKey &key,
                  const KernelArtifacts &artifacts);

  /// The bundled kernels.
  const std::vector<Item> &items() const { return items_; }
  /// The verified artifacts of the kernel for \p specText on \p arch with
  /// the requested tile configuration, or nullopt if the bundle has none.
  /// Throws UserError if the bundled entry fails verification (a checksum,
  /// the manifest's own digest) or records another request than the index
  /// says (spec, target, kind, configuration).
  std::optional<KernelArtifacts> find(const std::string &specText,
                                      const std::string &arch, int blockN = 0,
                                      int numWarps = 0) const;
  /// The same for the kernel \p request describes: spec, target, kind,
  /// requested configuration (CPU: block_m, block_n, opt level, tile
  /// counting, modes) and mma; the
  /// build, host CPU and environment fields are not compared (a CPU kernel
  /// built on another host is checked when it is loaded:
  /// loadCpuKernel()).
  std::optional<KernelArtifacts> find(const CacheKey &request) const;

private:
  std::string dir_;
  std::vector<Item> items_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_BUNDLE_H
