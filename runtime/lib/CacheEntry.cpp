//===- CacheEntry.cpp - Cache keys, manifests and atomic files ------------===//
//
// CacheKey's canonical text and hash, meta.json written and read back with
// every checksum verified, and the file helpers of CacheFiles.h (atomic
// writes, per-key locks) that the disk cache and bundles share.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/CacheEntry.h"

#include "CacheFiles.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Hash.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/FormatVariadic.h>
#include <llvm/Support/JSON.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unistd.h>

namespace fs = llvm::sys::fs;

namespace flashjit::runtime {

using detail::readFile;
using detail::validFileName;

//===----------------------------------------------------------------------===//
// File helpers
//===----------------------------------------------------------------------===//

bool detail::validFileName(llvm::StringRef name) {
  if (name.empty() || name.starts_with(".") || name == kMetaFile)
    return false;
  return llvm::all_of(name, [](char c) {
    return llvm::isAlnum(c) || c == '.' || c == '_' || c == '-';
  });
}

bool detail::validKey(llvm::StringRef key) {
  return key.size() == 64 && llvm::all_of(key, [](char c) {
           return llvm::isDigit(c) || (c >= 'a' && c <= 'f');
         });
}

std::optional<std::string> detail::readFile(const llvm::Twine &p) {
  auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return std::nullopt;
  return (*buf)->getBuffer().str();
}

std::error_code detail::writeFileAtomic(const std::string &p,
                                        std::string_view bytes) {
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

namespace {

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

} // namespace

KeyLock::KeyLock(const std::string &lockPath, std::chrono::milliseconds timeout,
                 bool tryOnly)
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

KeyLock::~KeyLock() {
  if (fd_ >= 0) {
    if (locked_)
      fs::unlockFile(fd_);
    ::close(fd_);
  }
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

//===----------------------------------------------------------------------===//
// The manifest (meta.json)
//===----------------------------------------------------------------------===//

std::string metaJson(const KernelArtifacts &a, const CacheKey &key) {
  llvm::json::Object files;
  for (const auto &[name, bytes] : a.files)
    files[name] = llvm::json::Object{{"sha256", sha256Hex(bytes)},
                                     {"bytes", int64_t(bytes.size())}};
  llvm::json::Array stages;
  for (const StageTiming &t : a.stageSeconds)
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
        StageTiming t;
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

} // namespace flashjit::runtime
