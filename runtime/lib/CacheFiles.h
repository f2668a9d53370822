//===- CacheFiles.h - File helpers of the kernel cache ----------*- C++ -*-===//
//
// Private to the runtime: the file operations that the disk cache
// (Cache.cpp), its entries (CacheEntry.cpp) and bundles (Bundle.cpp) share.
// Writes go through a temporary file and an atomic rename, so a reader never
// sees half a file; a per-key lock makes concurrent writers produce one
// entry.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_CACHEFILES_H
#define FLASHJIT_RUNTIME_LIB_CACHEFILES_H

#include "flashjit/runtime/KernelAbi.h"

#include <llvm/ADT/StringRef.h>
#include <llvm/ADT/Twine.h>
#include <llvm/Support/JSON.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace flashjit::runtime {

namespace detail {

/// Whether \p name may name an artifact file: [A-Za-z0-9._-], not empty,
/// not starting with '.', not meta.json.
bool validFileName(llvm::StringRef name);

/// Whether \p key is a key hash: 64 lower-case hex digits.
bool validKey(llvm::StringRef key);

/// The bytes of file \p p, or nullopt if it cannot be read.
std::optional<std::string> readFile(const llvm::Twine &p);

/// Writes \p bytes to \p p through a temporary file in the same directory
/// and an atomic rename. Returns the error, if any.
std::error_code writeFileAtomic(const std::string &p, std::string_view bytes);

/// The one writer of a KernelConfig: a JSON object with every field
/// (arch, kind, block_n, warps, rows_per_warp, min_blocks_per_sm, wgmma,
/// varlen, block_sparse, cpu_block_m, count_tiles, opt_level). Keys,
/// manifests and bundle indexes all store configurations through it.
llvm::json::Object configToJson(const KernelConfig &config);

/// The one reader, configToJson's inverse: nullopt (with the reason in
/// \p why) unless \p value is an object with exactly those fields, each of
/// its type, and a known kind.
std::optional<KernelConfig> configFromJson(const llvm::json::Value *value,
                                           std::string &why);

} // namespace detail

/// Holds the lock of one key: the process-wide mutex, then the file lock.
/// (Declared in Cache.h for DiskCache::lockEntry.)
class KeyLock {
public:
  /// Blocks up to \p timeout (or only tries once when \p tryOnly).
  KeyLock(const std::string &lockPath, std::chrono::milliseconds timeout,
          bool tryOnly = false);
  ~KeyLock();
  KeyLock(const KeyLock &) = delete;
  KeyLock &operator=(const KeyLock &) = delete;
  /// Whether the lock is held.
  bool locked() const { return locked_; }

private:
  std::shared_ptr<std::mutex> mutex_;
  std::unique_lock<std::mutex> guard_;
  int fd_ = -1;
  bool locked_ = false;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_LIB_CACHEFILES_H
