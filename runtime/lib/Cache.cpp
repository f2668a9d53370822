//===- Cache.cpp - The kernel cache on disk -------------------------------===//
//
// DiskCache: configuration from the environment, the checks on the cache
// directory and its entries (owner, mode), load / store / getOrCompile under
// the per-key lock, and listing, clearing and LRU pruning of entries.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/Cache.h"

#include "CacheFiles.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/Chrono.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/JSON.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <unistd.h>

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

namespace flashjit::runtime {

using detail::validFileName;
using detail::validKey;
using detail::writeFileAtomic;

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

namespace {

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

/// Empty if \p dir (named \p key) is a flashjit cache entry, else why not.
/// An entry is recognised by its manifest alone: meta.json, a JSON object
/// with an integer "schema" and the entry's own name as "key", and nothing
/// but regular files beside it. The manifest may fail every other check (a
/// corrupt or older entry is still flashjit's to replace or prune); a
/// directory without one is someone else's and is never deleted.
std::string notAnEntry(const std::string &dir, llvm::StringRef key) {
  std::optional<std::string> text =
      detail::readFile(dir + "/" + std::string(kMetaFile));
  if (!text)
    return "no meta.json";
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(*text);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return "meta.json is not JSON";
  }
  const llvm::json::Object *meta = parsed->getAsObject();
  if (!meta || !meta->getInteger("schema") || meta->getString("key") != key)
    return "meta.json is not a flashjit manifest for this key";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    fs::file_status st;
    if (fs::status(it->path(), st, /*follow=*/false) ||
        st.type() != fs::file_type::regular_file)
      return fmt::format("it holds {}, which is not a regular file",
                         path::filename(it->path()).str());
  }
  if (ec)
    return fmt::format("cannot list it: {}", ec.message());
  return {};
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
  // A cache directory that is a symbolic link (~/.cache pointing to scratch
  // space) is resolved once: the owner and mode checks below, and every
  // later use, apply to the directory it points to, so the link cannot be
  // swapped under a running process. (Entries must still not be links.)
  if (fs::is_symlink_file(config_.dir)) {
    llvm::SmallString<256> real;
    if (!fs::real_path(config_.dir, real))
      config_.dir = real.str().str();
  }
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
  std::string why;
  std::optional<KernelArtifacts> a = readEntry(dir, hash, &why);
  if (!a) {
    // It is recompiled and replaced; say so once, on one line, so a disk
    // that corrupts files (or a tampered entry) does not go unnoticed.
    std::replace(why.begin(), why.end(), '\n', ' ');
    warnOnce("corrupt:" + hash,
             fmt::format("flashjit: warning: cache entry {} is invalid ({}); "
                         "recompiling it",
                         hash, why));
    return std::nullopt;
  }
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

std::vector<CacheEntryInfo>
DiskCache::list(std::vector<ForeignDir> *foreign) const {
  std::vector<CacheEntryInfo> out;
  if (!usable_)
    return out;
  std::error_code ec;
  for (fs::directory_iterator it(config_.dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = path::filename(it->path());
    if (!validKey(name) || !fs::is_directory(it->path()))
      continue;
    if (std::string why = notAnEntry(it->path(), name); !why.empty()) {
      if (foreign)
        foreign->push_back({it->path(), why});
      continue;
    }
    CacheEntryInfo info;
    info.key = name.str();
    info.bytes = directoryBytes(it->path());
    info.lastUsed = lastUsed(it->path());
    if (std::optional<KernelArtifacts> a = readEntry(it->path(), info.key)) {
      info.valid = true;
      info.entry = a->entry;
      info.arch = a->config.arch;
      info.specText = a->specText;
      info.varlen = a->config.varlen;
      info.blockSparse = a->config.blockSparse;
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const CacheEntryInfo &a, const CacheEntryInfo &b) {
              return a.lastUsed != b.lastUsed ? a.lastUsed > b.lastUsed
                                              : a.key < b.key;
            });
  if (foreign)
    std::sort(foreign->begin(), foreign->end(),
              [](const ForeignDir &a, const ForeignDir &b) {
                return a.path < b.path;
              });
  return out;
}

size_t DiskCache::clear(std::vector<ForeignDir> *foreign) {
  size_t removed = 0;
  for (const CacheEntryInfo &e : list(foreign)) {
    removeEntryDir(config_.dir, entryDir(e.key));
    fs::remove(entryDir(e.key) + ".lock");
    ++removed;
  }
  return removed;
}

size_t DiskCache::prune(uint64_t maxBytes, std::vector<ForeignDir> *foreign) {
  std::vector<CacheEntryInfo> entries = list(foreign); // most recent first
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

} // namespace flashjit::runtime
