//===- Bundle.cpp - Directories of precompiled kernels --------------------===//
//
// bundle.json read and written, and the lookup of a request among the
// bundled entries (each verified like a cache entry when it is found).
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/Bundle.h"

#include "CacheFiles.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Cache.h"

#include <fmt/format.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/FormatVariadic.h>
#include <llvm/Support/JSON.h>

#include <system_error>

namespace fs = llvm::sys::fs;

namespace flashjit::runtime {

using detail::readFile;
using detail::validKey;
using detail::writeFileAtomic;

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
