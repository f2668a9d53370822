//===- Cache.cpp - Kernel cache on disk and in memory ---------------------===//
#include "flashjit/runtime/Cache.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Hash.h"
#include "flashjit/runtime/BuildInfo.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/Chrono.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/FormatVariadic.h>
#include <llvm/Support/JSON.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <unistd.h>

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

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

const char *toString(CacheOutcome outcome) {
  switch (outcome) {
  case CacheOutcome::Hit:
    return "hit";
  case CacheOutcome::Compiled:
    return "compiled";
  case CacheOutcome::Uncached:
    return "uncached";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Keys and artifacts
//===----------------------------------------------------------------------===//

CacheKey CacheKey::make(std::string specText, std::string arch, int blockN,
                        int numWarps, int minBlocksPerSM) {
  CacheKey key;
  key.specText = std::move(specText);
  key.arch = std::move(arch);
  key.blockN = blockN;
  key.numWarps = numWarps;
  key.minBlocksPerSM = minBlocksPerSM;
  for (const std::string &name : cacheRelevantEnvVars())
    if (const char *value = std::getenv(name.c_str()))
      key.env.emplace_back(name, value);
  return key;
}

CacheKey CacheKey::makeCpu(std::string specText, int blockM, int blockN,
                           int optLevel, bool countTiles, bool varlen,
                           bool blockSparse) {
  CacheKey key = make(std::move(specText), "cpu", blockN);
  key.blockM = blockM;
  key.optLevel = optLevel;
  key.countTiles = countTiles;
  key.varlen = varlen;
  key.blockSparse = blockSparse;
  key.cpu = hostCpu().name;
  key.cpuFeatures = hostCpu().features;
  return key;
}

std::string CacheKey::canonicalText() const {
  // Every value is written with its length, so no choice of values can make
  // two different keys print the same text.
  std::string out;
  auto field = [&](std::string_view name, std::string_view value) {
    out += fmt::format("{}:{}={}\n", name, value.size(), value);
  };
  field("schema", std::to_string(schema));
  field("flashjit", version);
  field("commit", commit);
  field("llvm", llvm);
  field("arch", arch);
  field("block_n", std::to_string(blockN));
  field("warps", std::to_string(numWarps));
  field("min_blocks_per_sm", std::to_string(minBlocksPerSM));
  field("rows_per_warp", std::to_string(rowsPerWarp));
  field("mma", mma);
  field("block_m", std::to_string(blockM));
  field("opt_level", std::to_string(optLevel));
  field("count_tiles", countTiles ? "1" : "0");
  field("varlen", varlen ? "1" : "0");
  field("block_sparse", blockSparse ? "1" : "0");
  field("cpu", cpu);
  field("cpu_features", cpuFeatures);
  std::vector<std::pair<std::string, std::string>> sorted = env;
  std::sort(sorted.begin(), sorted.end());
  for (const auto &[name, value] : sorted)
    field("env." + name, value);
  field("spec", specText);
  return out;
}

std::string CacheKey::hash() const { return sha256Hex(canonicalText()); }

const std::string *KernelArtifacts::file(const std::string &name) const {
  auto it = files.find(name);
  return it == files.end() ? nullptr : &it->second;
}

namespace {

bool validFileName(llvm::StringRef name) {
  if (name.empty() || name.starts_with(".") || name == kMetaFile)
    return false;
  return llvm::all_of(name, [](char c) {
    return llvm::isAlnum(c) || c == '.' || c == '_' || c == '-';
  });
}

bool validKey(llvm::StringRef key) {
  return key.size() == 64 && llvm::all_of(key, [](char c) {
           return llvm::isDigit(c) || (c >= 'a' && c <= 'f');
         });
}

} // namespace

std::string metaJson(const KernelArtifacts &a, const CacheKey &key) {
  llvm::json::Object files;
  for (const auto &[name, bytes] : a.files)
    files[name] = llvm::json::Object{{"sha256", sha256Hex(bytes)},
                                     {"bytes", int64_t(bytes.size())}};
  llvm::json::Array stages;
  for (const CacheStageTime &t : a.stageSeconds)
    stages.push_back(
        llvm::json::Object{{"stage", t.name}, {"seconds", t.seconds}});
  llvm::json::Object keyObj{{"flashjit", key.version},
                            {"commit", key.commit},
                            {"llvm", key.llvm},
                            {"block_n", key.blockN},
                            {"warps", key.numWarps},
                            {"min_blocks_per_sm", key.minBlocksPerSM},
                            {"rows_per_warp", key.rowsPerWarp},
                            {"mma", key.mma},
                            {"block_m", key.blockM},
                            {"opt_level", key.optLevel},
                            {"count_tiles", key.countTiles},
                            {"varlen", key.varlen},
                            {"block_sparse", key.blockSparse},
                            {"cpu", key.cpu},
                            {"cpu_features", key.cpuFeatures}};
  llvm::json::Object env;
  for (const auto &[name, value] : key.env)
    env[name] = value;
  keyObj["env"] = std::move(env);
  llvm::json::Object meta{{"schema", kCacheVersion},
                          {"key", key.hash()},
                          {"key_inputs", std::move(keyObj)},
                          {"spec", a.specText},
                          {"arch", a.arch},
                          {"entry", a.entry},
                          {"threads", a.threads},
                          {"block_m", a.blockM},
                          {"block_n", a.blockN},
                          {"shared_bytes", a.sharedBytes},
                          {"registers", a.registers},
                          {"spill_bytes", a.spillBytes},
                          {"count_tiles", a.countTiles},
                          {"varlen", a.varlen},
                          {"block_sparse", a.blockSparse},
                          {"mma", a.mma},
                          {"opt_level", a.optLevel},
                          {"cpu", a.cpu},
                          {"cpu_features", a.cpuFeatures},
                          {"compile_seconds", std::move(stages)},
                          {"files", std::move(files)}};
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(meta))).str() +
         "\n";
}

//===----------------------------------------------------------------------===//
// File helpers
//===----------------------------------------------------------------------===//

namespace {

std::optional<std::string> readFile(const llvm::Twine &p) {
  auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return std::nullopt;
  return (*buf)->getBuffer().str();
}

/// Writes \p bytes to \p p through a temporary file in the same directory
/// and an atomic rename. Returns the error, if any.
std::error_code writeFileAtomic(const std::string &p, std::string_view bytes) {
  int fd = -1;
  llvm::SmallString<256> tmp;
  if (std::error_code ec =
          fs::createUniqueFile(p + ".tmp-%%%%%%%%", fd, tmp, fs::OF_None, 0600))
    return ec;
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << bytes;
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      fs::remove(tmp);
      return ec;
    }
  }
  if (std::error_code ec = fs::rename(tmp, p)) {
    fs::remove(tmp);
    return ec;
  }
  return {};
}

/// Empty if \p p (an existing file or directory) belongs to the current user
/// and is not writable by group or others; else why it is refused.
std::string unsafeReason(const std::string &p) {
  fs::file_status st;
  if (std::error_code ec = fs::status(p, st, /*follow=*/false))
    return fmt::format("cannot stat {}: {}", p, ec.message());
  if (st.type() == fs::file_type::symlink_file)
    return fmt::format("{} is a symbolic link", p);
  if (st.getUser() != ::geteuid())
    return fmt::format("{} is owned by uid {}, not by the current user ({})", p,
                       st.getUser(), ::geteuid());
  if (st.permissions() & (fs::group_write | fs::others_write))
    return fmt::format("{} is writable by group or others (mode {:o})", p,
                       unsigned(st.permissions()) & 0777);
  return {};
}

/// A process-wide mutex per lock file: POSIX record locks do not exclude
/// threads of one process from each other.
std::shared_ptr<std::mutex> processMutex(const std::string &lockPath) {
  static std::mutex mapMutex;
  static std::map<std::string, std::shared_ptr<std::mutex>> map;
  std::lock_guard<std::mutex> lock(mapMutex);
  std::shared_ptr<std::mutex> &m = map[lockPath];
  if (!m)
    m = std::make_shared<std::mutex>();
  return m;
}

/// Holds the lock of one key: the process-wide mutex, then the file lock.
} // namespace

/// (Declared in Cache.h for DiskCache::lockEntry.)
class KeyLock {
public:
  /// Blocks up to \p timeout (or only tries once when \p tryOnly).
  KeyLock(const std::string &lockPath, std::chrono::milliseconds timeout,
          bool tryOnly = false)
      : mutex_(processMutex(lockPath)), guard_(*mutex_, std::defer_lock) {
    if (tryOnly) {
      if (!guard_.try_lock())
        return;
    } else {
      guard_.lock();
    }
    if (fs::openFileForWrite(lockPath, fd_, fs::CD_OpenAlways, fs::OF_None,
                             0600)) {
      fd_ = -1;
      return;
    }
    locked_ =
        !fs::tryLockFile(fd_, tryOnly ? std::chrono::milliseconds(0) : timeout);
  }
  ~KeyLock() {
    if (fd_ >= 0) {
      if (locked_)
        fs::unlockFile(fd_);
      ::close(fd_);
    }
  }
  KeyLock(const KeyLock &) = delete;
  KeyLock &operator=(const KeyLock &) = delete;
  bool locked() const { return locked_; }

private:
  std::shared_ptr<std::mutex> mutex_;
  std::unique_lock<std::mutex> guard_;
  int fd_ = -1;
  bool locked_ = false;
};

namespace {

/// Moves \p dir aside (atomically) and deletes it.
void removeEntryDir(const std::string &root, const std::string &dir) {
  llvm::SmallString<256> trash;
  if (fs::createUniqueDirectory(root + "/.trash", trash)) {
    fs::remove_directories(dir);
    return;
  }
  std::string target = (trash + "/e").str();
  if (fs::rename(dir, target))
    fs::remove_directories(dir);
  fs::remove_directories(trash);
}

uint64_t directoryBytes(const std::string &dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    uint64_t size = 0;
    if (!fs::file_size(it->path(), size))
      total += size;
  }
  return total;
}

int64_t lastUsed(const std::string &entryDir) {
  fs::file_status st;
  if (fs::status(entryDir + "/" + kMetaFile, st) && fs::status(entryDir, st))
    return 0;
  return llvm::sys::toTimeT(st.getLastModificationTime());
}

} // namespace

//===----------------------------------------------------------------------===//
// Reading entries
//===----------------------------------------------------------------------===//

std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const std::string &expectedKey,
                                         std::string *whyNot) {
  auto fail = [&](std::string why) -> std::optional<KernelArtifacts> {
    if (whyNot)
      *whyNot = std::move(why);
    return std::nullopt;
  };
  std::string metaPath = entryDir + "/" + kMetaFile;
  std::optional<std::string> text = readFile(metaPath);
  if (!text)
    return fail(fmt::format("{} is missing or unreadable", metaPath));
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(*text);
  if (!parsed)
    return fail(fmt::format("{} is not valid JSON: {}", metaPath,
                            llvm::toString(parsed.takeError())));
  const llvm::json::Object *meta = parsed->getAsObject();
  if (!meta)
    return fail(fmt::format("{} is not a JSON object", metaPath));
  std::optional<int64_t> schema = meta->getInteger("schema");
  if (!schema || *schema != kCacheVersion)
    return fail(fmt::format("{} has schema {} (expected {})", metaPath,
                            schema ? std::to_string(*schema) : "none",
                            kCacheVersion));
  std::optional<llvm::StringRef> key = meta->getString("key");
  if (!key || (!expectedKey.empty() && *key != expectedKey))
    return fail(fmt::format("{} is for key '{}', not '{}'", metaPath,
                            key ? key->str() : "", expectedKey));

  KernelArtifacts a;
  auto str = [&](llvm::StringRef name, std::string &out) {
    std::optional<llvm::StringRef> v = meta->getString(name);
    if (!v)
      return false;
    out = v->str();
    return true;
  };
  auto integer = [&](llvm::StringRef name, int &out) {
    std::optional<int64_t> v = meta->getInteger(name);
    if (!v)
      return false;
    out = int(*v);
    return true;
  };
  if (!str("spec", a.specText) || !str("arch", a.arch) ||
      !str("entry", a.entry) || !integer("threads", a.threads) ||
      !integer("block_m", a.blockM) || !integer("block_n", a.blockN) ||
      !integer("shared_bytes", a.sharedBytes) ||
      !integer("registers", a.registers) ||
      !integer("spill_bytes", a.spillBytes) ||
      !integer("opt_level", a.optLevel) || !str("cpu", a.cpu) ||
      !str("cpu_features", a.cpuFeatures))
    return fail(fmt::format("{} lacks a required field", metaPath));
  std::optional<bool> countTiles = meta->getBoolean("count_tiles");
  if (!countTiles)
    return fail(fmt::format("{} lacks a required field", metaPath));
  a.countTiles = *countTiles;
  // Absent in entries of kernels with neither mode.
  a.varlen = meta->getBoolean("varlen").value_or(false);
  a.blockSparse = meta->getBoolean("block_sparse").value_or(false);
  if (std::optional<llvm::StringRef> mma = meta->getString("mma"))
    a.mma = mma->str();
  if (const llvm::json::Array *stages = meta->getArray("compile_seconds"))
    for (const llvm::json::Value &v : *stages)
      if (const llvm::json::Object *o = v.getAsObject()) {
        CacheStageTime t;
        if (auto name = o->getString("stage"))
          t.name = name->str();
        t.seconds = o->getNumber("seconds").value_or(0.0);
        a.stageSeconds.push_back(std::move(t));
      }
  const llvm::json::Object *files = meta->getObject("files");
  if (!files)
    return fail(fmt::format("{} lists no files", metaPath));
  for (const auto &[nameKey, value] : *files) {
    llvm::StringRef name = nameKey;
    const llvm::json::Object *f = value.getAsObject();
    if (!validFileName(name) || !f)
      return fail(fmt::format("{} lists a bad file '{}'", metaPath, name));
    std::optional<llvm::StringRef> sum = f->getString("sha256");
    std::optional<int64_t> size = f->getInteger("bytes");
    std::string filePath = (entryDir + "/" + name).str();
    std::optional<std::string> bytes = readFile(filePath);
    if (!bytes)
      return fail(fmt::format("{} is missing", filePath));
    if (!sum || !size || int64_t(bytes->size()) != *size ||
        sha256Hex(*bytes) != *sum)
      return fail(fmt::format("{} fails its checksum", filePath));
    a.files[name.str()] = std::move(*bytes);
  }
  return a;
}

//===----------------------------------------------------------------------===//
// Configuration
//===----------------------------------------------------------------------===//

namespace {
bool envFlag(const char *name) {
  const char *v = std::getenv(name);
  if (!v)
    return false;
  llvm::StringRef s(v);
  return !(s.empty() || s == "0" || s.equals_insensitive("false") ||
           s.equals_insensitive("off") || s.equals_insensitive("no"));
}
} // namespace

CacheConfig CacheConfig::fromEnvironment() {
  CacheConfig c;
  if (const char *dir = std::getenv("FLASHJIT_CACHE_DIR"); dir && *dir) {
    c.dir = dir;
  } else if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    c.dir = std::string(xdg) + "/flashjit";
  } else {
    llvm::SmallString<256> home;
    if (path::home_directory(home))
      c.dir = (home + "/.cache/flashjit").str();
  }
  c.enabled = !envFlag("FLASHJIT_DISABLE_CACHE") && !c.dir.empty();
  c.alwaysCompile = envFlag("FLASHJIT_ALWAYS_COMPILE");
  if (const char *max = std::getenv("FLASHJIT_CACHE_MAX_BYTES"); max && *max) {
    unsigned long long v = 0;
    if (llvm::StringRef(max).trim().getAsInteger(10, v))
      throw UserError(fmt::format("FLASHJIT_CACHE_MAX_BYTES='{}' is not a "
                                  "non-negative integer number of bytes",
                                  max));
    c.maxBytes = v;
  }
  return c;
}

//===----------------------------------------------------------------------===//
// DiskCache
//===----------------------------------------------------------------------===//

DiskCache::DiskCache(CacheConfig config) : config_(std::move(config)) {
  if (!config_.enabled) {
    whyUnusable_ = "the cache is disabled";
    return;
  }
  if (config_.dir.empty()) {
    whyUnusable_ = "no cache directory";
    warnOnce("dir", "flashjit: no cache directory (set FLASHJIT_CACHE_DIR); "
                    "kernels are compiled in memory");
    return;
  }
  llvm::SmallString<256> abs(config_.dir);
  fs::make_absolute(abs);
  path::remove_dots(abs, /*remove_dot_dot=*/true);
  config_.dir = abs.str().str();
  if (!fs::exists(config_.dir)) {
    if (std::error_code ec = fs::create_directories(
            config_.dir, /*IgnoreExisting=*/true, fs::owner_all)) {
      whyUnusable_ = fmt::format("cannot create cache directory {}: {}",
                                 config_.dir, ec.message());
      warnOnce("dir", fmt::format("flashjit: {}; kernels are compiled in "
                                  "memory",
                                  whyUnusable_));
      return;
    }
    fs::setPermissions(config_.dir, fs::owner_all);
  }
  if (!fs::is_directory(config_.dir)) {
    whyUnusable_ =
        fmt::format("cache directory {} is not a directory", config_.dir);
    warnOnce("dir", fmt::format("flashjit: {}; kernels are compiled in "
                                "memory",
                                whyUnusable_));
    return;
  }
  if (std::string why = unsafeReason(config_.dir); !why.empty()) {
    whyUnusable_ = fmt::format("refusing cache directory: {}", why);
    warnOnce("dir", fmt::format("flashjit: {} (loading a cached cubin runs "
                                "code); kernels are compiled in memory",
                                whyUnusable_));
    return;
  }
  usable_ = true;
}

void DiskCache::warnOnce(const std::string &what, const std::string &message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (warned_.count(what))
    return;
  warned_[what] = message;
  llvm::errs() << message << "\n";
}

std::vector<std::string> DiskCache::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto &[what, message] : warned_)
    out.push_back(message);
  return out;
}

std::string DiskCache::entryDir(const std::string &keyHash) const {
  return config_.dir + "/" + keyHash;
}

std::optional<KernelArtifacts> DiskCache::load(const CacheKey &key) {
  if (!usable_)
    return std::nullopt;
  std::string hash = key.hash();
  std::string dir = entryDir(hash);
  if (!fs::is_directory(dir))
    return std::nullopt;
  if (std::string why = unsafeReason(dir); !why.empty()) {
    warnOnce("entry:" + hash,
             fmt::format("flashjit: refusing cache entry: {}", why));
    return std::nullopt;
  }
  std::optional<KernelArtifacts> a = readEntry(dir, hash);
  if (!a)
    return std::nullopt;
  // Mark the entry as recently used for LRU pruning (best effort).
  int fd = -1;
  if (!fs::openFileForRead(dir + "/" + kMetaFile, fd)) {
    fs::setLastAccessAndModificationTime(fd, std::chrono::system_clock::now());
    ::close(fd);
  }
  return a;
}

bool DiskCache::storeLocked(const CacheKey &key,
                            const KernelArtifacts &artifacts) {
  for (const auto &[name, bytes] : artifacts.files)
    if (!validFileName(name))
      throw InternalError(
          fmt::format("cache artifact has a bad file name '{}'", name));
  std::string hash = key.hash();
  std::string final = entryDir(hash);
  llvm::SmallString<256> tmp;
  auto failed = [&](const std::string &what, std::error_code ec) {
    if (!tmp.empty())
      fs::remove_directories(tmp);
    warnOnce("write", fmt::format("flashjit: cannot write the kernel cache "
                                  "({} : {}); kernels are compiled in memory",
                                  what, ec.message()));
    return false;
  };
  if (std::error_code ec =
          fs::createUniqueDirectory(config_.dir + "/.tmp-" + hash, tmp))
    return failed(config_.dir, ec);
  fs::setPermissions(tmp, fs::owner_all);
  for (const auto &[name, bytes] : artifacts.files)
    if (std::error_code ec = writeFileAtomic((tmp + "/" + name).str(), bytes))
      return failed((tmp + "/" + name).str(), ec);
  // meta.json last: its presence and checksums define a complete entry.
  if (std::error_code ec = writeFileAtomic((tmp + "/" + kMetaFile).str(),
                                           metaJson(artifacts, key)))
    return failed((tmp + "/" + kMetaFile).str(), ec);
  if (fs::exists(final))
    removeEntryDir(config_.dir, final);
  if (std::error_code ec = fs::rename(tmp, final))
    return failed(final, ec);
  if (config_.maxBytes > 0)
    prune(config_.maxBytes);
  return true;
}

std::unique_ptr<KeyLock> DiskCache::lockEntry(const CacheKey &key) {
  auto lock = std::make_unique<KeyLock>(
      config_.dir + "/" + key.hash() + ".lock",
      std::chrono::milliseconds(int64_t(config_.lockTimeoutSeconds * 1000)));
  if (lock->locked())
    return lock;
  warnOnce("lock", fmt::format("flashjit: cannot lock an entry in the kernel "
                               "cache {}; kernels are compiled in memory",
                               config_.dir));
  return nullptr;
}

bool DiskCache::store(const CacheKey &key, const KernelArtifacts &artifacts) {
  if (!usable_)
    return false;
  std::unique_ptr<KeyLock> lock = lockEntry(key);
  if (!lock)
    return false;
  return storeLocked(key, artifacts);
}

KernelArtifacts
DiskCache::getOrCompile(const CacheKey &key,
                        const std::function<KernelArtifacts()> &compile,
                        CacheOutcome *outcome) {
  auto set = [&](CacheOutcome o) {
    if (outcome)
      *outcome = o;
  };
  if (!usable_) {
    set(CacheOutcome::Uncached);
    return compile();
  }
  if (!config_.alwaysCompile)
    if (std::optional<KernelArtifacts> a = load(key)) {
      set(CacheOutcome::Hit);
      return std::move(*a);
    }
  std::unique_ptr<KeyLock> lock = lockEntry(key);
  if (!lock) {
    set(CacheOutcome::Uncached);
    return compile();
  }
  // Another process may have stored the entry while we waited.
  if (!config_.alwaysCompile)
    if (std::optional<KernelArtifacts> a = load(key)) {
      set(CacheOutcome::Hit);
      return std::move(*a);
    }
  KernelArtifacts a = compile();
  set(storeLocked(key, a) ? CacheOutcome::Compiled : CacheOutcome::Uncached);
  return a;
}

std::vector<CacheEntryInfo> DiskCache::list() const {
  std::vector<CacheEntryInfo> out;
  if (!usable_)
    return out;
  std::error_code ec;
  for (fs::directory_iterator it(config_.dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = path::filename(it->path());
    if (!validKey(name) || !fs::is_directory(it->path()))
      continue;
    CacheEntryInfo info;
    info.key = name.str();
    info.bytes = directoryBytes(it->path());
    info.lastUsed = lastUsed(it->path());
    if (std::optional<KernelArtifacts> a = readEntry(it->path(), info.key)) {
      info.valid = true;
      info.entry = a->entry;
      info.arch = a->arch;
      info.specText = a->specText;
      info.varlen = a->varlen;
      info.blockSparse = a->blockSparse;
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const CacheEntryInfo &a, const CacheEntryInfo &b) {
              return a.lastUsed != b.lastUsed ? a.lastUsed > b.lastUsed
                                              : a.key < b.key;
            });
  return out;
}

size_t DiskCache::clear() {
  size_t removed = 0;
  for (const CacheEntryInfo &e : list()) {
    removeEntryDir(config_.dir, entryDir(e.key));
    fs::remove(entryDir(e.key) + ".lock");
    ++removed;
  }
  return removed;
}

size_t DiskCache::prune(uint64_t maxBytes) {
  std::vector<CacheEntryInfo> entries = list(); // most recent first
  uint64_t total = 0;
  for (const CacheEntryInfo &e : entries)
    total += e.bytes;
  size_t removed = 0;
  for (auto it = entries.rbegin(); it != entries.rend() && total > maxBytes;
       ++it) {
    // Skip entries another thread or process is writing; the lock of the
    // key being stored by this thread is held, so that entry stays.
    KeyLock lock(entryDir(it->key) + ".lock", std::chrono::milliseconds(0),
                 /*tryOnly=*/true);
    if (!lock.locked())
      continue;
    removeEntryDir(config_.dir, entryDir(it->key));
    total -= it->bytes;
    ++removed;
  }
  return removed;
}

DiskCache &defaultCache() {
  static DiskCache cache(CacheConfig::fromEnvironment());
  return cache;
}

//===----------------------------------------------------------------------===//
// Bundles
//===----------------------------------------------------------------------===//

namespace {
constexpr const char *kBundleFile = "bundle.json";

std::vector<Bundle::Item> readBundleIndex(const std::string &dir,
                                          bool mustExist) {
  std::string p = dir + "/" + kBundleFile;
  std::optional<std::string> text = readFile(p);
  if (!text) {
    if (mustExist)
      throw UserError(
          fmt::format("bundle index {} is missing or unreadable", p));
    return {};
  }
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(*text);
  if (!parsed)
    throw UserError(fmt::format("bundle index {} is not valid JSON: {}", p,
                                llvm::toString(parsed.takeError())));
  const llvm::json::Object *root = parsed->getAsObject();
  std::optional<int64_t> schema =
      root ? root->getInteger("schema") : std::nullopt;
  if (!schema || *schema != kCacheVersion)
    throw UserError(fmt::format("bundle index {} has schema {} (this "
                                "flashjit reads {})",
                                p, schema ? std::to_string(*schema) : "none",
                                kCacheVersion));
  std::vector<Bundle::Item> items;
  const llvm::json::Array *kernels = root->getArray("kernels");
  if (!kernels)
    throw UserError(fmt::format("bundle index {} lists no kernels", p));
  for (const llvm::json::Value &v : *kernels) {
    const llvm::json::Object *o = v.getAsObject();
    Bundle::Item item;
    if (!o || !o->getString("spec") || !o->getString("arch") ||
        !o->getString("key") || !validKey(*o->getString("key")))
      throw UserError(fmt::format("bundle index {} has a malformed kernel", p));
    item.specText = o->getString("spec")->str();
    item.arch = o->getString("arch")->str();
    item.key = o->getString("key")->str();
    item.blockN = int(o->getInteger("block_n").value_or(0));
    item.numWarps = int(o->getInteger("warps").value_or(0));
    item.blockM = int(o->getInteger("block_m").value_or(0));
    item.optLevel = int(o->getInteger("opt_level").value_or(0));
    item.countTiles = o->getBoolean("count_tiles").value_or(false);
    if (std::optional<llvm::StringRef> mma = o->getString("mma"))
      item.mma = mma->str();
    items.push_back(std::move(item));
  }
  return items;
}
} // namespace

namespace {
/// Whether two bundle items answer the same request.
bool sameRequest(const Bundle::Item &a, const Bundle::Item &b) {
  auto mma = [](const std::string &m) {
    return m.empty() ? std::string("default") : m;
  };
  return a.specText == b.specText && a.arch == b.arch && a.blockN == b.blockN &&
         a.numWarps == b.numWarps && a.blockM == b.blockM &&
         a.optLevel == b.optLevel && a.countTiles == b.countTiles &&
         mma(a.mma) == mma(b.mma);
}
} // namespace

Bundle Bundle::open(const std::string &dir) {
  Bundle b;
  b.dir_ = dir;
  b.items_ = readBundleIndex(dir, /*mustExist=*/true);
  return b;
}

void Bundle::add(const std::string &dir, const CacheKey &key,
                 const KernelArtifacts &artifacts) {
  if (std::error_code ec = fs::create_directories(dir))
    throw UserError(fmt::format("cannot create bundle directory {}: {}", dir,
                                ec.message()));
  // The bundle is a cache directory without limits plus an index.
  CacheConfig config;
  config.dir = dir;
  DiskCache cache(config);
  if (!cache.usable())
    throw UserError(fmt::format("cannot use bundle directory {}: {}", dir,
                                cache.whyUnusable()));
  if (!cache.store(key, artifacts))
    throw UserError(fmt::format("cannot write bundle directory {}", dir));
  std::vector<Item> items = readBundleIndex(dir, /*mustExist=*/false);
  std::string hash = key.hash();
  Item added{key.specText, key.arch,       key.blockN, key.numWarps, key.blockM,
             key.optLevel, key.countTiles, hash,       key.mma};
  std::erase_if(items, [&](const Item &i) { return sameRequest(i, added); });
  items.push_back(added);
  llvm::json::Array kernels;
  for (const Item &i : items)
    kernels.push_back(llvm::json::Object{{"spec", i.specText},
                                         {"arch", i.arch},
                                         {"block_n", i.blockN},
                                         {"warps", i.numWarps},
                                         {"block_m", i.blockM},
                                         {"opt_level", i.optLevel},
                                         {"count_tiles", i.countTiles},
                                         {"mma", i.mma},
                                         {"key", i.key}});
  llvm::json::Object root{{"schema", kCacheVersion},
                          {"flashjit", flashjitVersion()},
                          {"commit", flashjitCommit()},
                          {"kernels", std::move(kernels)}};
  std::string text =
      llvm::formatv("{0:2}", llvm::json::Value(std::move(root))).str() + "\n";
  if (std::error_code ec = writeFileAtomic(dir + "/" + kBundleFile, text))
    throw UserError(
        fmt::format("cannot write {}/{}: {}", dir, kBundleFile, ec.message()));
}

std::optional<KernelArtifacts> Bundle::find(const std::string &specText,
                                            const std::string &arch, int blockN,
                                            int numWarps) const {
  CacheKey request;
  request.specText = specText;
  request.arch = arch;
  request.blockN = blockN;
  request.numWarps = numWarps;
  return find(request);
}

std::optional<KernelArtifacts> Bundle::find(const CacheKey &request) const {
  Item wanted{
      request.specText, request.arch,     request.blockN,     request.numWarps,
      request.blockM,   request.optLevel, request.countTiles, "",
      request.mma};
  for (const Item &i : items_) {
    if (!sameRequest(i, wanted))
      continue;
    std::string why;
    std::optional<KernelArtifacts> a =
        readEntry(dir_ + "/" + i.key, i.key, &why);
    if (!a)
      throw UserError(fmt::format("bundled kernel {} in {} is broken: {}",
                                  i.key, dir_, why));
    return a;
  }
  return std::nullopt;
}

} // namespace flashjit::runtime
