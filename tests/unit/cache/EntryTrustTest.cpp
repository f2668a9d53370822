//===- EntryTrustTest.cpp - Nothing read from disk is trusted -------------===//
//
// Issue 21, section 1: the reproductions of a host program crashing or
// running the wrong kernel after an edit of a cache entry or a bundle, each
// checked to be a miss (cache: recompiled with one warning, the kernel then
// checked against the float64 reference) or a UserError (bundles), never a
// launch with a wrong configuration:
//
// - meta.json edited (block_m 64 -> 32): its own digest fails;
// - meta.json edited and its digest recomputed: the configuration the
//   kernel itself declares (kernel.so's `<entry>_config`, the PTX's
//   `.entry`, `.maxntid`, `.minnctapersm`, shared memory) disagrees;
// - another entry's files copied in and `key` rewritten, another flashjit
//   version or spec recorded: the key inputs no longer hash to the key;
// - the CLI's compile-or-load (loadOrCompileCpuArtifacts) and the library
//   (loadOrCompileCpu) give the same verdict on one entry.
//
//===----------------------------------------------------------------------===//
#include "CacheTestSupport.h"
#include "CpuCheck.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/compiler/GpuCache.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"

#include <catch2/catch.hpp>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::testing::TempDir;
namespace fs = llvm::sys::fs;

namespace {

const char *kCpuSpec = "attention(name=trust_cpu, mask=q_idx >= kv_idx, "
                       "head_dim_qk=32, head_dim_v=32, heads_q=2, heads_kv=1)";

std::string readAll(const std::string &p) {
  auto buf = llvm::MemoryBuffer::getFile(p);
  REQUIRE(buf);
  return (*buf)->getBuffer().str();
}

void writeAll(const std::string &p, const std::string &bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

/// Replaces \p from by \p to in \p text (which must hold it).
std::string edit(std::string text, const std::string &from,
                 const std::string &to) {
  size_t at = text.find(from);
  INFO("looking for " << from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

/// \p meta with its manifest_sha256 recomputed, as someone who knows the
/// format would forge it.
std::string reDigest(std::string meta) {
  std::string field = "\"manifest_sha256\": \"";
  size_t at = meta.find(field);
  REQUIRE(at != std::string::npos);
  at += field.size();
  meta.replace(at, 64, std::string(64, '0'));
  meta.replace(at, 64, sha256Hex(meta));
  return meta;
}

CacheConfig configIn(const std::string &dir) {
  CacheConfig c;
  c.dir = dir;
  return c;
}

uint64_t seed() {
  if (const char *env = std::getenv("FLASHJIT_TEST_SEED"))
    return std::strtoull(env, nullptr, 0);
  return std::random_device()();
}

/// \p kernel against the float64 reference on fresh random inputs.
void checkRuns(const CpuAttentionKernel &kernel) {
  std::string mismatch = flashjit::testing::checkCpuKernel(
      kernel.spec(),
      [&](const auto &q, const auto &k, const auto &v, const auto &o,
          const auto *lse,
          const auto &args) { kernel.run(q, k, v, o, lse, args); },
      seed());
  INFO(mismatch);
  CHECK(mismatch.empty());
}

/// A CPU request through \p cache, as a fresh process would make it.
std::shared_ptr<const CpuKernel>
loadFresh(const AttentionSpec &spec, DiskCache &cache, LoadReport &report) {
  clearCpuMemoryTier();
  return loadOrCompileCpu(spec, {}, &cache, &report);
}

} // namespace

TEST_CASE("an edited CPU cache entry is a miss, never run as recorded",
          "[cache][errors]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir tmp;
  DiskCache cache(configIn(tmp / "cache"));
  AttentionSpec spec = parseSpec(kCpuSpec);
  LoadReport r;
  loadFresh(spec, cache, r);
  REQUIRE(r.outcome == CacheOutcome::Compiled);
  std::string meta = r.entryDir + "/" + kMetaFile;
  std::string original = readAll(meta);
  REQUIRE(original.find("\"cpu_block_m\": 64") != std::string::npos);

  SECTION("block_m 64 -> 32 in meta.json: its own checksum fails") {
    writeAll(meta,
             edit(original, "\"cpu_block_m\": 64", "\"cpu_block_m\": 32"));
    std::string why;
    CHECK(!readEntry(r.entryDir, r.key, &why));
    CHECK_THAT(why, Catch::Contains("manifest_sha256"));
    std::shared_ptr<const CpuKernel> k = loadFresh(spec, cache, r);
    CHECK(r.outcome == CacheOutcome::Compiled);
    CHECK(k->blockM() == 64);
    checkRuns(*k);
    CHECK(readEntry(r.entryDir, r.key)); // replaced by a good entry
  }
  SECTION("the same edit with the digest forged: kernel.so disagrees") {
    // Only the resolved configuration is edited (the key inputs still hash
    // to the key): the object's own `<entry>_config` refuses it.
    std::string forged =
        reDigest(edit(original, "\"cpu_block_m\": 64,\n    \"kind\"",
                      "\"cpu_block_m\": 32,\n    \"kind\""));
    writeAll(meta, forged);
    std::optional<KernelArtifacts> a = readEntry(r.entryDir, r.key);
    REQUIRE(a);
    REQUIRE(a->config.cpuBlockM == 32);
    CHECK_THROWS_WITH(loadCpuKernel(*a),
                      Catch::Contains("declares another than") &&
                          Catch::Contains("block_m 32"));
    // The library and the CLI's path both call it a miss and recompile.
    LoadReport cli;
    KernelArtifacts b = loadOrCompileCpuArtifacts(spec, {}, cache, &cli);
    CHECK(cli.outcome == CacheOutcome::Compiled);
    CHECK(b.config.cpuBlockM == 64);
    writeAll(meta, forged);
    std::shared_ptr<const CpuKernel> k = loadFresh(spec, cache, r);
    CHECK(r.outcome == CacheOutcome::Compiled);
    CHECK(k->blockM() == 64);
    checkRuns(*k);
  }
  SECTION("another flashjit version or spec recorded: not this key") {
    for (auto [from, to] : {std::pair<std::string, std::string>{
                                "\"flashjit\": \"", "\"flashjit\": \"9"},
                            {"q_idx >= kv_idx", "q_idx <= kv_idx"}}) {
      writeAll(meta, reDigest(edit(original, from, to)));
      std::string why;
      CHECK(!readEntry(r.entryDir, r.key, &why));
      CHECK_THAT(why, Catch::Contains("do not hash to its key") ||
                          Catch::Contains("not the one of its key"));
      loadFresh(spec, cache, r);
      CHECK(r.outcome == CacheOutcome::Compiled);
    }
  }
  SECTION("another entry's files copied in, key rewritten") {
    AttentionSpec other = parseSpec(
        "attention(name=trust_cpu, head_dim_qk=32, head_dim_v=32, heads_q=2, "
        "heads_kv=1)");
    LoadReport ro;
    loadFresh(other, cache, ro);
    REQUIRE(ro.outcome == CacheOutcome::Compiled);
    for (const char *f : {kSharedObjectFile, kObjectFile, kAttnFile})
      writeAll(r.entryDir + "/" + f, readAll(ro.entryDir + "/" + f));
    writeAll(meta, reDigest(edit(readAll(ro.entryDir + "/" + kMetaFile), ro.key,
                                 r.key)));
    std::string why;
    CHECK(!readEntry(r.entryDir, r.key, &why));
    CHECK_THAT(why, Catch::Contains("do not hash to its key"));
    std::shared_ptr<const CpuKernel> k = loadFresh(spec, cache, r);
    CHECK(r.outcome == CacheOutcome::Compiled);
    checkRuns(*k); // the causal kernel, not the copied dense one
  }
}

TEST_CASE("an edited CPU bundle is a UserError naming the entry",
          "[cache][errors]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir tmp;
  std::string dir = tmp / "bundle";
  AttentionSpec spec = parseSpec(kCpuSpec);
  CacheKey key = cpuCacheKey(spec);
  Bundle::add(dir, key, compileCpuArtifacts(spec));
  std::string meta = dir + "/" + key.hash() + "/" + kMetaFile;
  std::string original = readAll(meta);
  REQUIRE(Bundle::open(dir).find(key));

  writeAll(meta, edit(original, "\"cpu_block_m\": 64", "\"cpu_block_m\": 32"));
  CHECK_THROWS_WITH(Bundle::open(dir).find(key),
                    Catch::Contains("is broken") &&
                        Catch::Contains("manifest_sha256"));
  // Forged digest and both configurations edited: the key inputs no longer
  // hash to the entry's key.
  std::string forged = original;
  while (forged.find("\"cpu_block_m\": 64") != std::string::npos)
    forged = edit(forged, "\"cpu_block_m\": 64", "\"cpu_block_m\": 32");
  writeAll(meta, reDigest(forged));
  CHECK_THROWS_WITH(Bundle::open(dir).find(key), Catch::Contains("is broken"));
}

TEST_CASE("a GPU launch configuration must match what its PTX declares",
          "[cache][errors]") {
  struct Case {
    const char *spec;
    const char *arch;
    GpuMma mma;
    bool varlen, blockSparse;
  };
  const Case cases[] = {
      {"attention(name=t_sync, causal=top_left, head_dim=64, "
       "score=score * param<f32>(s))",
       "sm_80", GpuMma::Default, false, false},
      {"attention(name=t_wg, head_dim=128, mask=kv_idx < "
       "buffer<i32>(len)[batch])",
       "sm_90a", GpuMma::Default, false, false},
      {"attention(name=t_sparse, causal=top_left, head_dim=64)", "sm_90a",
       GpuMma::MmaSync, true, true},
      // TMA: three by-value tensor maps (.b8[128]) after the fixed ones.
      {"attention(name=t_tma, causal=top_left, head_dim=128)", "sm_90a",
       GpuMma::WgmmaTma, false, false},
  };
  for (const Case &c : cases) {
    INFO(c.spec << " on " << c.arch);
    GpuCompileOptions o;
    o.arch = c.arch;
    o.mma = c.mma;
    o.varlen = c.varlen;
    o.blockSparse = c.blockSparse;
    AttentionSpec spec = parseSpec(c.spec);
    KernelArtifacts a = compileGpuArtifacts(spec, o);
    const std::string &ptx = *a.file(kPtxFile);
    GpuKernelInfo good = gpuKernelInfo(a);
    CHECK(gpuLaunchConfigMismatch(spec, good, ptx).empty());
    CHECK(gpuEntryMismatch(spec, o, a).empty());

    auto refused = [&](const char *what, auto change,
                       const std::string &expect) {
      INFO(what);
      GpuKernelInfo bad = good;
      change(bad);
      std::string why = gpuLaunchConfigMismatch(spec, bad, ptx);
      CHECK_THAT(why, Catch::Contains(expect));
    };
    refused(
        "warps", [](GpuKernelInfo &i) { i.config.numWarps ^= 12; },
        "threads per CTA");
    refused(
        "rows per warp (block_m 64 <-> 128 or 32)",
        [](GpuKernelInfo &i) { i.config.rowsPerWarp ^= 48; }, "shared memory");
    refused(
        "shared memory", [](GpuKernelInfo &i) { i.sharedBytes += 16; },
        "shared memory");
    refused(
        "varlen", [](GpuKernelInfo &i) { i.config.varlen = !i.config.varlen; },
        "parameters");
    refused(
        "block-sparse",
        [](GpuKernelInfo &i) { i.config.blockSparse = !i.config.blockSparse; },
        "parameters");
    refused(
        "tma", [](GpuKernelInfo &i) { i.config.tma = !i.config.tma; },
        "parameters");
    refused(
        "CTAs per SM", [](GpuKernelInfo &i) { i.config.minBlocksPerSM += 1; },
        "minnctapersm");
    refused(
        "target",
        [](GpuKernelInfo &i) {
          i.config.arch = i.config.arch == "sm_80" ? "sm_90a" : "sm_80";
        },
        "does not target");
    refused(
        "entry", [](GpuKernelInfo &i) { i.name += "_x"; }, "defines no entry");
    // The cache's check also knows the tiles the request resolves to.
    KernelArtifacts blockN = a;
    blockN.config.blockN /= 2;
    CHECK_THAT(gpuEntryMismatch(spec, o, blockN),
               Catch::Contains("this request resolves to"));
  }
}

TEST_CASE("a GPU decode launch configuration must match its PTX and tiles",
          "[cache][errors][decode]") {
  // The decode module (`_decode` and `_decode_merge`): a manifest whose
  // shared memory, rows per warp or key tile disagrees with the tiles the
  // split kernel was generated for is refused like the forward's.
  AttentionSpec spec =
      parseSpec("attention(name=t_dec, causal=bottom_right, head_dim=64, "
                "heads_q=6, heads_kv=2, score=softcap(30.0))");
  GpuCompileOptions o;
  o.arch = GENERATE("sm_80", "sm_90a");
  o.kind = KernelKind::Decode;
  INFO("arch " << o.arch);
  KernelArtifacts a = compileGpuArtifacts(spec, o);
  const std::string &ptx = *a.file(kPtxFile);
  GpuKernelInfo good = gpuKernelInfo(a);
  REQUIRE(good.config.kind == KernelKind::Decode);
  CHECK(good.sharedBytes == good.config.sharedBytes(64, 64));
  CHECK(gpuLaunchConfigMismatch(spec, good, ptx).empty());
  CHECK(gpuEntryMismatch(spec, o, a).empty());
  auto refused = [&](const char *what, auto change, const std::string &expect) {
    INFO(what);
    GpuKernelInfo bad = good;
    change(bad);
    CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
               Catch::Contains(expect));
  };
  refused(
      "shared memory + 16", [](GpuKernelInfo &i) { i.sharedBytes += 16; },
      "shared memory");
  refused(
      "shared memory - 1024", [](GpuKernelInfo &i) { i.sharedBytes -= 1024; },
      "shared memory");
  // Same threads, same entries: only the shared memory tells.
  refused(
      "rows per warp 16 -> 32",
      [](GpuKernelInfo &i) { i.config.rowsPerWarp *= 2; }, "shared memory");
  refused(
      "key tile halved", [](GpuKernelInfo &i) { i.config.blockN /= 2; },
      "shared memory");
  refused(
      "warps", [](GpuKernelInfo &i) { i.config.numWarps ^= 12; },
      "threads per CTA");
  refused(
      "CTAs per SM", [](GpuKernelInfo &i) { i.config.minBlocksPerSM += 1; },
      "minnctapersm");
  refused(
      "entry", [](GpuKernelInfo &i) { i.name += "_x"; }, "defines no entry");
}

TEST_CASE("an edited GPU cache entry is a miss in the library and the CLI",
          "[cache][errors]") {
  TempDir tmp;
  DiskCache cache(configIn(tmp / "cache"));
  AttentionSpec spec =
      parseSpec("attention(name=t_gpu, causal=top_left, head_dim=64)");
  GpuCompileOptions o;
  o.arch = "sm_80";
  LoadReport r;
  loadOrCompileGpuArtifacts(spec, o, &cache, &r);
  REQUIRE(r.outcome == CacheOutcome::Compiled);
  loadOrCompileGpuArtifacts(spec, o, &cache, &r);
  REQUIRE(r.outcome == CacheOutcome::Hit);
  std::string meta = r.entryDir + "/" + kMetaFile;
  std::string original = readAll(meta);
  REQUIRE(original.find("\"rows_per_warp\": 32") != std::string::npos);

  SECTION("rows per warp 32 -> 16 (block_m 128 -> 64), digest forged") {
    // The resolved "config" object is the second one in the text (after
    // "compile_seconds"; key_inputs holds the request, all zeros).
    size_t at =
        original.find("\"config\"", original.find("\"compile_seconds\""));
    REQUIRE(at != std::string::npos);
    std::string forged = original.substr(0, at) + edit(original.substr(at),
                                                       "\"rows_per_warp\": 32",
                                                       "\"rows_per_warp\": 16");
    writeAll(meta, reDigest(forged));
    std::optional<KernelArtifacts> a = readEntry(r.entryDir, r.key);
    REQUIRE(a);
    CHECK(a->config.blockM() == 64);
    CHECK_THAT(
        gpuLaunchConfigMismatch(spec, gpuKernelInfo(*a), *a->file(kPtxFile)),
        Catch::Contains("shared memory"));
    KernelArtifacts b = loadOrCompileGpuArtifacts(spec, o, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Compiled);
    CHECK(b.config.blockM() == 128);
    loadOrCompileGpuArtifacts(spec, o, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Hit);
  }
  SECTION("an unforged edit fails the manifest's own checksum") {
    writeAll(meta,
             edit(original, "\"rows_per_warp\": 32", "\"rows_per_warp\": 16"));
    loadOrCompileGpuArtifacts(spec, o, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Compiled);
  }
}
