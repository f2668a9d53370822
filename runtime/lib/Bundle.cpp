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
    std::string why;
    std::optional<KernelConfig> config =
        o ? detail::configFromJson(o->get("config"), why) : std::nullopt;
    if (!o || !o->getString("spec") || !config || !o->getString("key") ||
        !validKey(*o->getString("key")))
      throw UserError(
          fmt::format("bundle index {} has a malformed kernel{}", p,
                      why.empty() ? std::string() : " (" + why + ")"));
    item.specText = o->getString("spec")->str();
    item.config = std::move(*config);
    item.key = o->getString("key")->str();
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
  return a.specText == b.specText && a.config == b.config &&
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
  Item added{key.specText, key.config, key.mma, hash};
  std::erase_if(items, [&](const Item &i) { return sameRequest(i, added); });
  items.push_back(added);
  llvm::json::Array kernels;
  for (const Item &i : items)
    kernels.push_back(
        llvm::json::Object{{"spec", i.specText},
                           {"config", detail::configToJson(i.config)},
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
  request.config.arch = arch;
  request.config.blockN = blockN;
  request.config.numWarps = numWarps;
  request.mma = arch == "cpu" ? "" : "default";
  return find(request);
}

std::optional<KernelArtifacts> Bundle::find(const CacheKey &request) const {
  Item wanted{request.specText, request.config, request.mma, ""};
  for (const Item &i : items_) {
    if (!sameRequest(i, wanted))
      continue;
    std::string why;
    CacheKey recorded;
    std::optional<KernelArtifacts> a =
        readEntry(dir_ + "/" + i.key, i.key, &why, &recorded);
    if (!a)
      throw UserError(fmt::format("bundled kernel {} in {} is broken: {}",
                                  i.key, dir_, why));
    // The entry must answer the request the index maps to it: a copied or
    // swapped entry would launch another kernel.
    Item inEntry{recorded.specText, recorded.config, recorded.mma, i.key};
    if (!sameRequest(inEntry, wanted))
      throw UserError(fmt::format(
          "bundled kernel {} in {} is broken: its manifest records another "
          "request (spec, target, kind or configuration) than bundle.json",
          i.key, dir_));
    if (std::string bad = configMismatch(recorded, *a); !bad.empty())
      throw UserError(fmt::format("bundled kernel {} in {} is broken: {}",
                                  i.key, dir_, bad));
    return a;
  }
  return std::nullopt;
}

} // namespace flashjit::runtime
