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
//   a cubin runs code).
// - In memory: MemoryTier maps (device context, key) to a loaded kernel.
//
// The runtime links no compiler: the caller passes the compile step as a
// callback, so a hit never loads MLIR. Bundles (directories of precompiled
// entries a host application ships) load through the same code.
//
// Environment: FLASHJIT_CACHE_DIR, FLASHJIT_DISABLE_CACHE,
// FLASHJIT_ALWAYS_COMPILE, FLASHJIT_CACHE_MAX_BYTES (see CacheConfig).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_CACHE_H
#define FLASHJIT_RUNTIME_CACHE_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashjit::runtime {

/// Schema version of cache entries and bundles; bumped whenever the layout
/// or meta.json changes. Entries of another version are misses.
/// 2: CPU entries (kernel.o, kernel.so) and the CPU key fields.
inline constexpr int kCacheVersion = 2;

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

/// Everything that determines a cache entry's content.
struct CacheKey {
  /// Canonical spec text (printSpec).
  std::string specText;
  /// Target: "sm_80", "sm_90a" or "cpu".
  std::string arch;
  /// Keys per tile, warps per CTA and CTAs per SM as requested (0: backend
  /// default).
  int blockN = 0;
  int numWarps = 0;
  int minBlocksPerSM = 0;
  /// GPU query rows per warp as requested (0: backend default).
  int rowsPerWarp = 0;
  /// GPU tensor-core instructions as requested: "default", "mma.sync" or
  /// "wgmma" (flashjit::toString(GpuMma)); empty for CPU keys.
  std::string mma;
  /// CPU only: queries per tile, LLVM opt level (0..3), whether the kernel
  /// counts tiles, and the host CPU name and features (see hostCpu()).
  int blockM = 0;
  int optLevel = 0;
  bool countTiles = false;
  /// Packed varlen and block-sparse kernels (different ABIs), CPU and GPU.
  bool varlen = false;
  bool blockSparse = false;
  std::string cpu;
  std::string cpuFeatures;
  std::string version = flashjitVersion();
  std::string commit = flashjitCommit();
  std::string llvm = llvmVersion();
  int schema = kCacheVersion;
  /// Cache-relevant environment variables (name, value; unset ones absent).
  std::vector<std::pair<std::string, std::string>> env;

  /// A key for the current build and process environment.
  static CacheKey make(std::string specText, std::string arch, int blockN = 0,
                       int numWarps = 0, int minBlocksPerSM = 0);
  /// A CPU key ("cpu") for this host, build and environment: \p blockM and
  /// \p blockN are the tile sizes the kernel is compiled with, \p optLevel
  /// LLVM's level (0..3); \p varlen and \p blockSparse the kernel's modes.
  static CacheKey makeCpu(std::string specText, int blockM, int blockN,
                          int optLevel, bool countTiles, bool varlen = false,
                          bool blockSparse = false);
  /// The text that is hashed: one "field=value" line per component.
  std::string canonicalText() const;
  /// Lower-case hex SHA-256 of canonicalText() (64 characters).
  std::string hash() const;
};

/// Wall time of one compile stage, in seconds.
struct CacheStageTime {
  std::string name;
  double seconds = 0.0;
};

/// A compiled kernel: its files and launch facts (what meta.json records).
struct KernelArtifacts {
  /// The kernel's entry symbol.
  std::string entry;
  /// Target, e.g. "sm_90a".
  std::string arch;
  /// Canonical spec text.
  std::string specText;
  /// Threads per CTA, query rows per CTA, keys per tile.
  int threads = 0;
  int blockM = 0;
  int blockN = 0;
  /// Dynamic shared memory per CTA in bytes.
  int sharedBytes = 0;
  /// Registers per thread and spill bytes (stores + loads) from the ptxas
  /// report; -1 when unknown.
  int registers = -1;
  int spillBytes = -1;
  /// CPU only: whether the kernel counts tiles, its LLVM opt level, and the
  /// CPU name and features it was compiled for (hostCpu() there).
  bool countTiles = false;
  int optLevel = 0;
  /// A packed varlen kernel; a block-sparse kernel (CPU: kernel.so then
  /// also has the builder `<entry>_block_mask_packed`; GPU: the PTX has
  /// `<entry>_block_mask`).
  bool varlen = false;
  bool blockSparse = false;
  /// GPU only: the tensor-core instructions the kernel uses, "mma.sync" or
  /// "wgmma" (empty for CPU kernels).
  std::string mma;
  std::string cpu;
  std::string cpuFeatures;
  /// Compile time per stage, in order.
  std::vector<CacheStageTime> stageSeconds;
  /// File name (e.g. "kernel.ptx") -> bytes. Names are plain file names
  /// ([A-Za-z0-9._-], not starting with '.'), never "meta.json".
  std::map<std::string, std::string> files;

  /// The bytes of file \p name, or nullptr.
  const std::string *file(const std::string &name) const;
};

/// Standard artifact file names.
inline constexpr const char *kAttnFile = "kernel.attn.mlir";
inline constexpr const char *kGpuFile = "kernel.gpu.mlir";
inline constexpr const char *kPtxFile = "kernel.ptx";
inline constexpr const char *kCubinFile = "kernel.cubin";
/// CPU stages: the tile program, the LLVM dialect, LLVM IR before and after
/// optimisation, the relocatable PIC object and the shared object linked
/// from it (what the runtime loads).
inline constexpr const char *kTiledFile = "kernel.tiled.mlir";
inline constexpr const char *kLLVMDialectFile = "kernel.llvm.mlir";
inline constexpr const char *kLLVMIRFile = "kernel.ll";
inline constexpr const char *kLLVMIROptFile = "kernel.opt.ll";
inline constexpr const char *kObjectFile = "kernel.o";
inline constexpr const char *kSharedObjectFile = "kernel.so";
inline constexpr const char *kMetaFile = "meta.json";

/// Serialises \p a (without file contents, with their checksums) as
/// meta.json text for \p key.
std::string metaJson(const KernelArtifacts &a, const CacheKey &key);

/// How the disk cache behaves.
struct CacheConfig {
  /// The cache directory; created mode 0700 if missing.
  std::string dir;
  /// False: never read or write the disk (FLASHJIT_DISABLE_CACHE=1).
  bool enabled = true;
  /// True: compile on every request and overwrite the entry
  /// (FLASHJIT_ALWAYS_COMPILE=1).
  bool alwaysCompile = false;
  /// Size limit in bytes, 0 for none; least recently used entries are pruned
  /// after a store (FLASHJIT_CACHE_MAX_BYTES).
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

/// One entry as listed by DiskCache::list().
struct CacheEntryInfo {
  /// The key (directory name).
  std::string key;
  /// Total size of the entry's files in bytes.
  uint64_t bytes = 0;
  /// Last use (meta.json's modification time), seconds since the epoch.
  int64_t lastUsed = 0;
  /// Entry symbol, target and spec from meta.json (empty if unreadable).
  std::string entry, arch, specText;
  /// The kernel's modes (KernelArtifacts::varlen / blockSparse).
  bool varlen = false;
  bool blockSparse = false;
  /// False when the entry fails verification (it would be a miss).
  bool valid = false;
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

/// A held lock on one cache entry (Cache.cpp).
class KeyLock;

/// The on-disk cache (see the file comment). Thread-safe.
class DiskCache : public KernelCache {
public:
  /// A cache in config.dir. Never throws: a directory that cannot be
  /// created or is refused turns the cache off with one warning on stderr.
  explicit DiskCache(CacheConfig config);

  std::optional<KernelArtifacts> load(const CacheKey &key) override;
  bool store(const CacheKey &key, const KernelArtifacts &artifacts) override;
  KernelArtifacts getOrCompile(const CacheKey &key,
                               const std::function<KernelArtifacts()> &compile,
                               CacheOutcome *outcome = nullptr) override;

  /// The cache directory.
  const std::string &dir() const { return config_.dir; }
  const CacheConfig &config() const { return config_; }
  /// False when the directory is missing/refused or the cache is disabled.
  bool usable() const { return usable_; }
  /// Why the cache is not usable (empty when it is).
  const std::string &whyUnusable() const { return whyUnusable_; }
  /// Every entry directory, most recently used first.
  std::vector<CacheEntryInfo> list() const;
  /// The directory of \p key's entry (whether or not it exists).
  std::string entryDir(const std::string &keyHash) const;
  /// Removes every entry; returns how many were removed.
  size_t clear();
  /// Removes least recently used entries until the total size is at most
  /// \p maxBytes; returns how many were removed. Entries locked by another
  /// process are skipped.
  size_t prune(uint64_t maxBytes);
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

/// Reads and verifies the entry in directory \p entryDir: meta.json parses,
/// its schema is kCacheVersion, its key is \p expectedKey (when not empty)
/// and every file matches its checksum. Returns nullopt with the reason in
/// \p whyNot otherwise. Never throws.
std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const std::string &expectedKey,
                                         std::string *whyNot = nullptr);

/// A directory of precompiled kernels a host application ships: entries as
/// in the disk cache plus bundle.json mapping (spec text, target, block_n,
/// warps, mma) to entries. Built by `flashjit bundle`; loading needs only this
/// library.
class Bundle {
public:
  /// One kernel of the bundle.
  struct Item {
    std::string specText, arch;
    int blockN = 0, numWarps = 0;
    /// CPU only (see CacheKey).
    int blockM = 0, optLevel = 0;
    bool countTiles = false;
    /// The entry's directory name (its key at build time).
    std::string key;
    /// GPU only: the tensor-core instructions asked for (CacheKey::mma;
    /// empty and "default" are the same request).
    std::string mma;
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
  /// Throws UserError if the bundled entry fails verification.
  std::optional<KernelArtifacts> find(const std::string &specText,
                                      const std::string &arch, int blockN = 0,
                                      int numWarps = 0) const;
  /// The same for the kernel \p request describes: spec, target, tile
  /// configuration and (CPU) block_m, opt level and tile counting; the
  /// build, host CPU and environment fields are not compared (a CPU kernel
  /// built on another host is checked when it is loaded:
  /// loadCpuKernel()).
  std::optional<KernelArtifacts> find(const CacheKey &request) const;

private:
  std::string dir_;
  std::vector<Item> items_;
};

/// The in-memory tier: (device context, key) -> loaded kernel of type T
/// (e.g. GpuAttentionKernel). Thread-safe; a kernel is loaded once per
/// context and key even under concurrent requests.
template <class T> class MemoryTier {
public:
  /// The kernel for (\p context, \p key), made by \p load on first request.
  /// Exceptions from \p load propagate and nothing is remembered.
  std::shared_ptr<const T>
  getOrLoad(const void *context, const std::string &key,
            const std::function<std::shared_ptr<const T>()> &load) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::shared_ptr<Slot> &s = slots_[{context, key}];
      if (!s)
        s = std::make_shared<Slot>();
      slot = s;
    }
    std::lock_guard<std::mutex> lock(slot->mutex);
    if (!slot->value)
      slot->value = load();
    return slot->value;
  }
  /// The kernel if loaded, else nullptr.
  std::shared_ptr<const T> find(const void *context,
                                const std::string &key) const {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = slots_.find({context, key});
      if (it == slots_.end())
        return nullptr;
      slot = it->second;
    }
    std::lock_guard<std::mutex> lock(slot->mutex);
    return slot->value;
  }
  /// Forgets every kernel of \p context (e.g. before it is destroyed).
  void eraseContext(const void *context) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(slots_,
                  [&](const auto &kv) { return kv.first.first == context; });
  }
  /// Number of (context, key) slots.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_.size();
  }

private:
  struct Slot {
    std::mutex mutex;
    std::shared_ptr<const T> value;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<const void *, std::string>, std::shared_ptr<Slot>> slots_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_CACHE_H
