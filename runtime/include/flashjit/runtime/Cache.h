//===- Cache.h - Kernel cache on disk and in memory -------------*- C++ -*-===//
//
// Compiled kernels are cached in two tiers:
//
// - On disk: an entry is the directory <cache dir>/<key>/ holding one file
//   per stage (GPU: kernel.attn.mlir, kernel.gpu.mlir, kernel.ptx,
//   kernel.cubin; CPU: kernel.attn.mlir, kernel.tiled.mlir,
//   kernel.llvm.mlir, kernel.ll, kernel.opt.ll, kernel.o and the loadable
//   kernel.so) and meta.json, written last, with the launch facts, the
//   compile time per stage and the SHA-256 of every artifact. The key is the
//   SHA-256 of CacheKey::canonicalText(): spec text, target, tile
//   configuration, (CPU) host CPU name and features, opt level and
//   tile counting, flashjit version and commit, LLVM version, kCacheVersion
//   and the cache-relevant environment variables. An entry is built in a
//   temporary directory and renamed into place under a per-key file lock, so
//   concurrent processes produce one entry and never read half of one. A
//   load checks meta.json, the schema version and every checksum; an entry
//   failing any check is a miss and is replaced. Directories or entries
//   owned by another user or writable by group or others are refused (loading
//   a cubin runs code); a cache directory that is a symbolic link is
//   resolved first and its target checked, an entry that is one is refused.
// - In memory: MemoryTier maps (device context, key) to a loaded kernel.
//
// The runtime links no compiler: the caller passes the compile step as a
// callback, so a hit never loads MLIR. Bundles (directories of precompiled
// entries a host application ships) load through the same code.
//
// The pieces: BuildId.h (build identity, host CPU), CacheEntry.h (key,
// artifacts, meta.json), this file (the disk cache), Bundle.h and
// MemoryTier.h. Including Cache.h includes them all.
//
// Environment: FLASHJIT_CACHE_DIR, FLASHJIT_DISABLE_CACHE,
// FLASHJIT_ALWAYS_COMPILE, FLASHJIT_CACHE_MAX_BYTES (see CacheConfig).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_CACHE_H
#define FLASHJIT_RUNTIME_CACHE_H

#include "flashjit/runtime/BuildId.h"
#include "flashjit/runtime/Bundle.h"
#include "flashjit/runtime/CacheEntry.h"
#include "flashjit/runtime/MemoryTier.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace flashjit::runtime {

/// How the disk cache behaves.
struct CacheConfig {
  /// The cache directory; created mode 0700 if missing.
  std::string dir;
  /// False: never read or write the disk (FLASHJIT_DISABLE_CACHE=1).
  bool enabled = true;
  /// True: compile on every request and overwrite the entry
  /// (FLASHJIT_ALWAYS_COMPILE=1).
  bool alwaysCompile = false;
  /// Size limit in bytes, 0 for none (FLASHJIT_CACHE_MAX_BYTES unset, empty
  /// or 0; `flashjit cache prune` reads 0 the same way and refuses
  /// --max-bytes 0); least recently used entries are pruned after a store.
  uint64_t maxBytes = 0;
  /// How long to wait for another process's lock on a key, in seconds,
  /// before compiling in memory.
  double lockTimeoutSeconds = 600;

  /// The configuration from the environment: FLASHJIT_CACHE_DIR, else
  /// $XDG_CACHE_HOME/flashjit, else $HOME/.cache/flashjit. Throws UserError
  /// for a FLASHJIT_CACHE_MAX_BYTES that is not a non-negative integer.
  static CacheConfig fromEnvironment();
};

/// How a request was served.
enum class CacheOutcome : uint8_t {
  Hit,      ///< loaded from the disk cache
  Compiled, ///< compiled and stored
  Uncached  ///< compiled, not stored (disabled, refused or unwritable)
};
/// "hit" / "compiled" / "uncached".
const char *toString(CacheOutcome outcome);

/// How a compile-or-load request (loadOrCompileCpu, loadOrCompileGpu,
/// loadOrCompileGpuArtifacts) was served.
struct LoadReport {
  /// Hit (disk or memory), Compiled (and stored) or Uncached (compiled, not
  /// stored).
  CacheOutcome outcome = CacheOutcome::Uncached;
  /// True when the memory tier had the kernel (outcome is then Hit).
  bool memoryHit = false;
  /// The cache key (hex SHA-256).
  std::string key;
  /// The entry's directory (empty when nothing is on disk).
  std::string entryDir;
};

/// One entry as listed by DiskCache::list().
struct CacheEntryInfo {
  /// The key (directory name).
  std::string key;
  /// Total size of the entry's files in bytes.
  uint64_t bytes = 0;
  /// Last use (meta.json's modification time), seconds since the epoch.
  int64_t lastUsed = 0;
  /// Entry symbol from meta.json (empty if unreadable).
  std::string entry;
  /// Target from meta.json (empty if unreadable).
  std::string arch;
  /// Spec text from meta.json (empty if unreadable).
  std::string specText;
  /// A varlen kernel (KernelArtifacts::varlen).
  bool varlen = false;
  /// A block-sparse kernel (KernelArtifacts::blockSparse).
  bool blockSparse = false;
  /// False when the entry fails verification (it would be a miss).
  bool valid = false;
};

/// A directory in the cache directory named like an entry (64 hex digits)
/// that is not a flashjit entry: no flashjit manifest (meta.json with an
/// integer "schema" and its own name as "key"), or something other than
/// regular files in it. list(), clear() and prune() leave it alone.
struct ForeignDir {
  /// The directory.
  std::string path;
  /// Why it is not an entry.
  std::string why;
};

/// The kernel cache interface; tests and tools use DiskCache on temporary
/// directories.
class KernelCache {
public:
  virtual ~KernelCache() = default;
  /// The artifacts stored under \p key, or nullopt for a miss (absent,
  /// corrupt, wrong version, refused). Never throws for a bad entry.
  virtual std::optional<KernelArtifacts> load(const CacheKey &key) = 0;
  /// Stores \p artifacts under \p key (replacing any entry). Returns false
  /// (after one warning per cache) when the disk cannot be written.
  virtual bool store(const CacheKey &key, const KernelArtifacts &artifacts) = 0;
  /// The artifacts of \p key: loaded, else made by \p compile and stored.
  /// Concurrent callers of one key (in any process) compile once. Exceptions
  /// from \p compile propagate; nothing is stored then.
  virtual KernelArtifacts
  getOrCompile(const CacheKey &key,
               const std::function<KernelArtifacts()> &compile,
               CacheOutcome *outcome = nullptr) = 0;
};

/// A held lock on one cache entry (lib/CacheFiles.h).
class KeyLock;

/// The on-disk cache (see the file comment). Thread-safe.
class DiskCache : public KernelCache {
public:
  /// A cache in config.dir. Never throws: a directory that cannot be
  /// created or is refused turns the cache off with one warning on stderr.
  explicit DiskCache(CacheConfig config);

  /// See KernelCache::load; a hit marks the entry as recently used. An entry
  /// that fails verification is a miss with one warning per key (stderr, one
  /// line naming the key and what was wrong).
  std::optional<KernelArtifacts> load(const CacheKey &key) override;
  /// See KernelCache::store; prunes to config().maxBytes afterwards.
  bool store(const CacheKey &key, const KernelArtifacts &artifacts) override;
  /// See KernelCache::getOrCompile: load, else take the key's lock, load
  /// again (another process may have stored it), else compile and store.
  KernelArtifacts getOrCompile(const CacheKey &key,
                               const std::function<KernelArtifacts()> &compile,
                               CacheOutcome *outcome = nullptr) override;

  /// The cache directory (absolute; a symbolic link given as the cache
  /// directory is resolved to the directory it points to).
  const std::string &dir() const { return config_.dir; }
  /// The configuration it was made with (dir made absolute).
  const CacheConfig &config() const { return config_; }
  /// False when the directory is missing/refused or the cache is disabled.
  bool usable() const { return usable_; }
  /// Why the cache is not usable (empty when it is).
  const std::string &whyUnusable() const { return whyUnusable_; }
  /// Every entry directory (valid or not), most recently used first. An
  /// entry is recognised by its manifest (ForeignDir); directories named
  /// like entries that are not are skipped, and listed in \p foreign.
  std::vector<CacheEntryInfo>
  list(std::vector<ForeignDir> *foreign = nullptr) const;
  /// The directory of \p key's entry (whether or not it exists).
  std::string entryDir(const std::string &keyHash) const;
  /// Removes every entry; returns how many were removed. Directories that
  /// are not entries stay (listed in \p foreign).
  size_t clear(std::vector<ForeignDir> *foreign = nullptr);
  /// Removes least recently used entries until the total size of the
  /// entries is at most \p maxBytes; returns how many were removed. Entries
  /// locked by another process are skipped; directories that are not
  /// entries stay (listed in \p foreign). Here 0 is a limit of 0 bytes
  /// (every unlocked entry goes), not "no limit" as in CacheConfig.
  size_t prune(uint64_t maxBytes, std::vector<ForeignDir> *foreign = nullptr);
  /// Warnings printed so far (each also went to stderr once).
  std::vector<std::string> warnings() const;

private:
  bool storeLocked(const CacheKey &key, const KernelArtifacts &artifacts);
  /// Takes the entry's lock, or warns once and returns null.
  std::unique_ptr<KeyLock> lockEntry(const CacheKey &key);
  void warnOnce(const std::string &what, const std::string &message);

  CacheConfig config_;
  bool usable_ = false;
  std::string whyUnusable_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> warned_;
};

/// The process's default cache, per CacheConfig::fromEnvironment() (made
/// on first use).
DiskCache &defaultCache();

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_CACHE_H
