//===- CacheEntry.cpp - Cache keys, manifests and atomic files ------------===//
//
// CacheKey's canonical text and hash, and meta.json written and read back
// with every checksum verified (the file helpers: CacheFiles.cpp).
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
// The configuration record in JSON
//===----------------------------------------------------------------------===//

llvm::json::Object detail::configToJson(const KernelConfig &c) {
  llvm::json::Object o{{"arch", c.arch},
                       {"kind", toString(c.kind)},
                       {"block_n", c.blockN},
                       {"warps", c.numWarps},
                       {"rows_per_warp", c.rowsPerWarp},
                       {"min_blocks_per_sm", c.minBlocksPerSM},
                       {"wgmma", c.wgmma},
                       {"varlen", c.varlen},
                       {"block_sparse", c.blockSparse},
                       {"cpu_block_m", c.cpuBlockM},
                       {"count_tiles", c.countTiles},
                       {"opt_level", c.optLevel}};
  // Only where set: the manifests of every other kernel stay as they were.
  if (c.tma)
    o["tma"] = true;
  if (c.warpSpecialized)
    o["warp_specialized"] = true;
  if (c.overlapSoftmax)
    o["overlap_softmax"] = true;
  if (c.pingPong)
    o["ping_pong"] = true;
  if (c.decodeStages)
    o["decode_stages"] = c.decodeStages;
  if (c.syncBackward)
    o["sync_backward"] = true;
  return o;
}

std::optional<KernelConfig>
detail::configFromJson(const llvm::json::Value *value, std::string &why) {
  const llvm::json::Object *o = value ? value->getAsObject() : nullptr;
  if (!o) {
    why = "no \"config\" object";
    return std::nullopt;
  }
  KernelConfig c;
  std::optional<llvm::StringRef> arch = o->getString("arch");
  std::optional<llvm::StringRef> kind = o->getString("kind");
  if (!arch || !kind || !parseKernelKind(*kind, c.kind)) {
    why = "config has no valid \"arch\" or \"kind\"";
    return std::nullopt;
  }
  c.arch = arch->str();
  const std::pair<const char *, int *> ints[] = {
      {"block_n", &c.blockN},
      {"warps", &c.numWarps},
      {"rows_per_warp", &c.rowsPerWarp},
      {"min_blocks_per_sm", &c.minBlocksPerSM},
      {"cpu_block_m", &c.cpuBlockM},
      {"opt_level", &c.optLevel}};
  for (auto [name, out] : ints) {
    std::optional<int64_t> v = o->getInteger(name);
    if (!v || *v < 0 || *v > 1024) {
      why = fmt::format("config field \"{}\" is missing or out of range", name);
      return std::nullopt;
    }
    *out = int(*v);
  }
  const std::pair<const char *, bool *> flags[] = {
      {"wgmma", &c.wgmma},
      {"varlen", &c.varlen},
      {"block_sparse", &c.blockSparse},
      {"count_tiles", &c.countTiles}};
  for (auto [name, out] : flags) {
    std::optional<bool> v = o->getBoolean(name);
    if (!v) {
      why = fmt::format("config field \"{}\" is missing", name);
      return std::nullopt;
    }
    *out = *v;
  }
  // Fields written only where set, each true only on the kernels it
  // applies to (\p allowed, read after the fields before it).
  size_t optional = 0;
  auto optionalFlag = [&](const char *name, bool &out, bool allowed,
                          const char *kernels) {
    const llvm::json::Value *v = o->get(name);
    if (!v)
      return true;
    std::optional<bool> b = v->getAsBoolean();
    if (!b || !*b || !allowed) {
      why =
          fmt::format("config field \"{}\" is not true on a {}", name, kernels);
      return false;
    }
    out = true;
    ++optional;
    return true;
  };
  // A request's (key_inputs) sync_backward has no wgmma set: backward is all.
  if (!optionalFlag("tma", c.tma, c.wgmma, "wgmma kernel") ||
      !optionalFlag("warp_specialized", c.warpSpecialized, c.tma,
                    "tma kernel") ||
      !optionalFlag("overlap_softmax", c.overlapSoftmax, c.warpSpecialized,
                    "warp-specialised kernel") ||
      !optionalFlag("ping_pong", c.pingPong, c.overlapSoftmax,
                    "kernel with overlap_softmax") ||
      !optionalFlag("sync_backward", c.syncBackward,
                    c.kind == KernelKind::Backward, "backward kernel"))
    return std::nullopt;
  if (const llvm::json::Value *ds = o->get("decode_stages")) {
    std::optional<int64_t> v = ds->getAsInteger();
    if (!v || (*v != 2 && *v != 3) || c.kind != KernelKind::Decode) {
      why = "config field \"decode_stages\" is not 2 or 3 on a decode "
            "kernel";
      return std::nullopt;
    }
    c.decodeStages = int(*v);
    ++optional;
  }
  if (o->size() != 2 + std::size(ints) + std::size(flags) + optional) {
    why = "config has unknown fields";
    return std::nullopt;
  }
  return c;
}

//===----------------------------------------------------------------------===//
// Keys and artifacts
//===----------------------------------------------------------------------===//

CacheKey CacheKey::make(std::string specText, KernelConfig requested,
                        std::string mma) {
  CacheKey key;
  key.specText = std::move(specText);
  key.config = std::move(requested);
  key.mma = std::move(mma);
  for (const std::string &name : cacheRelevantEnvVars())
    if (const char *value = std::getenv(name.c_str()))
      key.env.emplace_back(name, value);
  return key;
}

CacheKey CacheKey::make(std::string specText, std::string arch, int blockN,
                        int numWarps, int minBlocksPerSM) {
  KernelConfig requested;
  requested.arch = std::move(arch);
  requested.blockN = blockN;
  requested.numWarps = numWarps;
  requested.minBlocksPerSM = minBlocksPerSM;
  return make(std::move(specText), std::move(requested));
}

CacheKey CacheKey::makeCpu(std::string specText, KernelConfig config) {
  config.arch = "cpu";
  CacheKey key = make(std::move(specText), std::move(config), "");
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
  // Sorted keys, no spaces: one text per configuration.
  field("config",
        llvm::formatv("{0}", llvm::json::Value(detail::configToJson(config)))
            .str());
  field("mma", mma);
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

std::string configMismatch(const CacheKey &key, const KernelArtifacts &a) {
  const KernelConfig &want = key.config, &got = a.config;
  auto differs = [&](const char *field, auto w, auto g) {
    return fmt::format("the entry's {} is {}, the request's {}", field, g, w);
  };
  if (want.arch != got.arch)
    return differs("target", want.arch, got.arch);
  if (want.kind != got.kind)
    return differs("kernel kind", toString(want.kind), toString(got.kind));
  if (want.varlen != got.varlen || want.blockSparse != got.blockSparse)
    return "the entry's modes (varlen, block-sparse) are not the request's";
  if (want.isCpu())
    return want == got ? std::string()
                       : std::string("the entry's CPU configuration is not "
                                     "the request's");
  const std::pair<const char *, std::pair<int, int>> tiles[] = {
      {"block_n", {want.blockN, got.blockN}},
      {"warps", {want.numWarps, got.numWarps}},
      {"rows_per_warp", {want.rowsPerWarp, got.rowsPerWarp}},
      {"min_blocks_per_sm", {want.minBlocksPerSM, got.minBlocksPerSM}}};
  for (auto [name, v] : tiles) {
    if (v.second <= 0)
      return fmt::format("the entry's {} is 0", name);
    if (v.first != 0 && v.first != v.second)
      return differs(name, v.first, v.second);
  }
  if (want.decodeStages != 0 && want.decodeStages != got.decodeStages)
    return differs("decode_stages", want.decodeStages, got.decodeStages);
  // wgmma.tma(.ws) falls back to wgmma (varlen, block-sparse) and to
  // wgmma.tma (tiles without two consumer warpgroups): the resolved
  // configuration, which the compiler compares whole, says which.
  const char *gotMma = got.mmaName();
  if ((key.mma.rfind("wgmma", 0) == 0 && !got.wgmma) ||
      (key.mma == "wgmma" && got.tma) || (key.mma == "mma.sync" && got.wgmma))
    return differs("mma", key.mma, gotMma);
  return {};
}

//===----------------------------------------------------------------------===//
// The manifest (meta.json)
//===----------------------------------------------------------------------===//

namespace {

constexpr llvm::StringLiteral kDigestField = "\"manifest_sha256\": \"";

/// The SHA-256 of manifest \p text with its digest value read as 64 zeros,
/// and where that value starts; nullopt if the text has not exactly one
/// digest field.
std::optional<std::pair<std::string, size_t>> manifestDigest(std::string text) {
  size_t at = text.find(kDigestField.data());
  if (at == std::string::npos ||
      text.find(kDigestField.data(), at + 1) != std::string::npos)
    return std::nullopt;
  at += kDigestField.size();
  if (at + 64 > text.size())
    return std::nullopt;
  text.replace(at, 64, std::string(64, '0'));
  return std::pair{sha256Hex(text), at};
}

llvm::json::Object keyInputsJson(const CacheKey &key) {
  llvm::json::Object env;
  for (const auto &[name, value] : key.env)
    env[name] = value;
  return llvm::json::Object{{"flashjit", key.version},
                            {"commit", key.commit},
                            {"llvm", key.llvm},
                            {"spec", key.specText},
                            {"config", detail::configToJson(key.config)},
                            {"mma", key.mma},
                            {"cpu", key.cpu},
                            {"cpu_features", key.cpuFeatures},
                            {"env", std::move(env)}};
}

/// The key meta.json's "key_inputs" describe (schema \p schema), or
/// nullopt with the reason in \p why.
std::optional<CacheKey> keyFromJson(const llvm::json::Object *o, int schema,
                                    std::string &why) {
  if (!o) {
    why = "no \"key_inputs\" object";
    return std::nullopt;
  }
  CacheKey key;
  key.schema = schema;
  std::pair<const char *, std::string *> strings[] = {
      {"flashjit", &key.version},
      {"commit", &key.commit},
      {"llvm", &key.llvm},
      {"spec", &key.specText},
      {"mma", &key.mma},
      {"cpu", &key.cpu},
      {"cpu_features", &key.cpuFeatures}};
  for (auto [name, out] : strings) {
    std::optional<llvm::StringRef> v = o->getString(name);
    if (!v) {
      why = fmt::format("key_inputs lacks \"{}\"", name);
      return std::nullopt;
    }
    *out = v->str();
  }
  std::optional<KernelConfig> config =
      detail::configFromJson(o->get("config"), why);
  if (!config)
    return std::nullopt;
  key.config = std::move(*config);
  key.env.clear();
  if (const llvm::json::Object *env = o->getObject("env"))
    for (const auto &[name, value] : *env)
      if (std::optional<llvm::StringRef> v = value.getAsString())
        key.env.emplace_back(name.str(), v->str());
  return key;
}

} // namespace

std::string metaJson(const KernelArtifacts &a, const CacheKey &key) {
  llvm::json::Object files;
  for (const auto &[name, bytes] : a.files)
    files[name] = llvm::json::Object{{"sha256", sha256Hex(bytes)},
                                     {"bytes", int64_t(bytes.size())}};
  llvm::json::Array stages;
  for (const StageTiming &t : a.stageSeconds)
    stages.push_back(
        llvm::json::Object{{"stage", t.name}, {"seconds", t.seconds}});
  llvm::json::Object meta{{"schema", kCacheVersion},
                          {"key", key.hash()},
                          {"key_inputs", keyInputsJson(key)},
                          {"spec", a.specText},
                          {"entry", a.entry},
                          {"config", detail::configToJson(a.config)},
                          {"shared_bytes", a.sharedBytes},
                          {"registers", a.registers},
                          {"spill_bytes", a.spillBytes},
                          {"cpu", a.cpu},
                          {"cpu_features", a.cpuFeatures},
                          {"compile_seconds", std::move(stages)},
                          {"files", std::move(files)},
                          {"manifest_sha256", std::string(64, '0')}};
  std::string text =
      llvm::formatv("{0:2}", llvm::json::Value(std::move(meta))).str() + "\n";
  std::optional<std::pair<std::string, size_t>> digest = manifestDigest(text);
  if (!digest)
    throw InternalError("meta.json text without exactly one digest field");
  text.replace(digest->second, 64, digest->first);
  return text;
}

namespace {

/// readEntry's manifest part: schema, digest, key, fields of \p meta,
/// parsed from \p text (read from \p metaPath).
std::optional<KernelArtifacts>
readManifest(const std::string &metaPath, const std::string &text,
             const llvm::json::Object *meta, const std::string &expectedKey,
             std::string &why, CacheKey *keyInputs) {
  if (!meta) {
    why = fmt::format("{} is not a JSON object", metaPath);
    return std::nullopt;
  }
  std::optional<int64_t> schema = meta->getInteger("schema");
  if (!schema || *schema != kCacheVersion) {
    why = fmt::format("{} has schema {} (expected {})", metaPath,
                      schema ? std::to_string(*schema) : "none", kCacheVersion);
    return std::nullopt;
  }
  std::optional<std::pair<std::string, size_t>> digest = manifestDigest(text);
  std::optional<llvm::StringRef> recorded = meta->getString("manifest_sha256");
  if (!digest || !recorded || *recorded != digest->first) {
    why = fmt::format("{} fails its own checksum (manifest_sha256): it was "
                      "edited or damaged",
                      metaPath);
    return std::nullopt;
  }
  std::optional<llvm::StringRef> key = meta->getString("key");
  if (!key || (!expectedKey.empty() && *key != expectedKey)) {
    why = fmt::format("{} is for key '{}', not '{}'", metaPath,
                      key ? key->str() : "", expectedKey);
    return std::nullopt;
  }
  std::optional<CacheKey> inputs =
      keyFromJson(meta->getObject("key_inputs"), int(*schema), why);
  if (!inputs) {
    why = fmt::format("{}: {}", metaPath, why);
    return std::nullopt;
  }
  if (inputs->hash() != *key) {
    why = fmt::format("{}: its key inputs do not hash to its key", metaPath);
    return std::nullopt;
  }
  KernelArtifacts a;
  std::optional<KernelConfig> config =
      detail::configFromJson(meta->get("config"), why);
  if (!config) {
    why = fmt::format("{}: {}", metaPath, why);
    return std::nullopt;
  }
  a.config = std::move(*config);
  auto str = [&](llvm::StringRef name, std::string &out) {
    std::optional<llvm::StringRef> v = meta->getString(name);
    if (v)
      out = v->str();
    return v.has_value();
  };
  auto integer = [&](llvm::StringRef name, int &out) {
    std::optional<int64_t> v = meta->getInteger(name);
    if (v)
      out = int(*v);
    return v.has_value();
  };
  if (!str("spec", a.specText) || !str("entry", a.entry) ||
      !integer("shared_bytes", a.sharedBytes) ||
      !integer("registers", a.registers) ||
      !integer("spill_bytes", a.spillBytes) || !str("cpu", a.cpu) ||
      !str("cpu_features", a.cpuFeatures)) {
    why = fmt::format("{} lacks a required field", metaPath);
    return std::nullopt;
  }
  if (a.specText != inputs->specText) {
    why = fmt::format("{}: its spec is not the one of its key", metaPath);
    return std::nullopt;
  }
  if (keyInputs)
    *keyInputs = *inputs;
  if (const llvm::json::Array *stages = meta->getArray("compile_seconds"))
    for (const llvm::json::Value &v : *stages)
      if (const llvm::json::Object *o = v.getAsObject()) {
        StageTiming t;
        if (auto name = o->getString("stage"))
          t.name = name->str();
        t.seconds = o->getNumber("seconds").value_or(0.0);
        a.stageSeconds.push_back(std::move(t));
      }
  return a;
}

} // namespace

std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const std::string &expectedKey,
                                         std::string *whyNot,
                                         CacheKey *keyInputs) {
  std::string why;
  auto fail = [&](std::string reason) -> std::optional<KernelArtifacts> {
    if (whyNot)
      *whyNot = std::move(reason);
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
  std::optional<KernelArtifacts> a =
      readManifest(metaPath, *text, meta, expectedKey, why, keyInputs);
  if (!a)
    return fail(why);
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
    a->files[name.str()] = std::move(*bytes);
  }
  return a;
}

std::optional<KernelArtifacts> readEntry(const std::string &entryDir,
                                         const CacheKey &expected,
                                         std::string *whyNot) {
  // The key inputs the manifest records hash to its key, which must be the
  // request's: any difference in spec, target, kind, configuration, build,
  // host CPU or environment fails there.
  return readEntry(entryDir, expected.hash(), whyNot);
}

} // namespace flashjit::runtime
