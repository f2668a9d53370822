//===- CpuCacheTest.cpp - CPU kernels through the disk cache --------------===//
//
// loadOrCompileCpu on temporary cache directories: a cold request compiles
// and stores kernel.o/kernel.so, a request from a fresh cache object (as in a
// second process) is a disk hit that compiles nothing (no stage dump, no new
// entry, much faster), a corrupt kernel.so or kernel.o is recompiled, every
// CPU key component changes the key, a kernel built for CPU features this
// host lacks is refused, and a read-only cache or a missing C compiler driver
// gives one warning and an in-memory compile. Every kernel is checked
// against the float64 reference on fresh random inputs.
//
//===----------------------------------------------------------------------===//
#include "CacheTestSupport.h"
#include "CpuCheck.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"

#include <catch2/catch.hpp>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <set>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::testing::ScopedEnv;
using flashjit::testing::TempDir;
namespace fs = llvm::sys::fs;

namespace {

const char *kSpecText =
    "attention(name=swa_cap, mask=q_idx >= kv_idx && q_idx - kv_idx < 40, "
    "score=param<f32>(cap) * tanh(score / param<f32>(cap)), head_dim_qk=64, "
    "head_dim_v=64, heads_q=4, heads_kv=2)";

uint64_t seed() {
  if (const char *env = std::getenv("FLASHJIT_TEST_SEED"))
    return std::strtoull(env, nullptr, 0);
  return std::random_device()();
}

/// Checks \p kernel against the reference on fresh inputs.
void checkKernel(const CpuKernel &kernel) {
  std::string mismatch = flashjit::testing::checkCpuKernel(
      kernel.spec(),
      [&](const auto &q, const auto &k, const auto &v, const auto &o,
          const auto *lse,
          const auto &args) { kernel.run(q, k, v, o, lse, args); },
      seed());
  INFO(mismatch);
  CHECK(mismatch.empty());
}

CacheConfig configIn(const std::string &dir) {
  CacheConfig c;
  c.dir = dir;
  return c;
}

size_t filesIn(const std::string &dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return n;
}

double secondsOf(const std::function<void()> &f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

/// Flips one byte in the middle of \p path.
void corrupt(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  REQUIRE(buf);
  std::string bytes = (*buf)->getBuffer().str();
  REQUIRE(bytes.size() > 16);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

} // namespace

TEST_CASE("a CPU disk hit compiles nothing and runs correctly", "[cache]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir dir, dump;
  ScopedEnv dumpEnv("FLASHJIT_DUMP_DIR", dump.path().c_str());
  AttentionSpec spec = parseSpec(kSpecText);
  clearCpuMemoryTier();

  LoadReport cold;
  std::shared_ptr<const CpuKernel> compiled;
  double coldS = secondsOf([&] {
    DiskCache cache(configIn(dir.path()));
    compiled = loadOrCompileCpu(spec, {}, &cache, &cold);
  });
  CHECK(cold.outcome == CacheOutcome::Compiled);
  CHECK(!cold.memoryHit);
  REQUIRE(!cold.entryDir.empty());
  for (const char *f :
       {kObjectFile, kSharedObjectFile, kAttnFile, kTiledFile, kLLVMDialectFile,
        kLLVMIRFile, kLLVMIROptFile, kMetaFile})
    CHECK(fs::exists(cold.entryDir + "/" + f));
  CHECK(compiled->stageText(Stage::LLVMIROpt).find("define") !=
        std::string::npos);
  checkKernel(*compiled);
  size_t dumped = filesIn(dump.path());
  CHECK(dumped == 5); // the compile wrote its stages

  // A fresh cache object and an empty memory tier: as a second process.
  clearCpuMemoryTier();
  LoadReport warm;
  std::shared_ptr<const CpuKernel> loaded;
  double warmS = secondsOf([&] {
    DiskCache cache(configIn(dir.path()));
    loaded = loadOrCompileCpu(spec, {}, &cache, &warm);
  });
  CHECK(warm.outcome == CacheOutcome::Hit);
  CHECK(!warm.memoryHit);
  CHECK(warm.key == cold.key);
  CHECK(filesIn(dump.path()) == dumped); // nothing compiled, nothing dumped
  CHECK(filesIn(dir.path()) == 2);       // one entry and its lock file
  CHECK(loaded->stageText(Stage::Attn) == compiled->stageText(Stage::Attn));
  REQUIRE(!loaded->timings().empty());
  CHECK(loaded->timings().back().name == "total");
  checkKernel(*loaded);
  WARN("CPU kernel: cold compile " << coldS * 1e3 << " ms, disk hit "
                                   << warmS * 1e3 << " ms");
  CHECK(warmS * 5 < coldS);

  // The same cache again: the memory tier answers with the same object.
  DiskCache cache(configIn(dir.path()));
  LoadReport memory;
  CHECK(loadOrCompileCpu(spec, {}, &cache, &memory) == loaded);
  CHECK(memory.memoryHit);
  CHECK(memory.outcome == CacheOutcome::Hit);
}

TEST_CASE("a corrupt kernel.so or kernel.o in a CPU entry is recompiled",
          "[cache]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir dir;
  AttentionSpec spec = parseSpec(kSpecText);
  for (const char *file : {kSharedObjectFile, kObjectFile}) {
    INFO("corrupted: " << file);
    clearCpuMemoryTier();
    LoadReport first;
    {
      DiskCache cache(configIn(dir.path()));
      loadOrCompileCpu(spec, {}, &cache, &first);
    }
    REQUIRE(first.outcome != CacheOutcome::Uncached);
    corrupt(first.entryDir + "/" + file);
    clearCpuMemoryTier();
    DiskCache cache(configIn(dir.path()));
    LoadReport again;
    std::shared_ptr<const CpuKernel> k =
        loadOrCompileCpu(spec, {}, &cache, &again);
    CHECK(again.outcome == CacheOutcome::Compiled);
    CHECK(again.key == first.key);
    checkKernel(*k);
    // The replaced entry is whole again.
    CHECK(readEntry(again.entryDir, again.key).has_value());
  }
}

TEST_CASE("every CPU key component changes the key", "[cache]") {
  AttentionSpec spec = parseSpec(kSpecText);
  CacheKey base = cpuCacheKey(spec);
  CHECK(base.config.arch == "cpu");
  CHECK(base.config.cpuBlockM == 64);
  CHECK(base.config.blockN == 64);
  CHECK(base.config.optLevel == 2);
  CHECK(base.cpu == hostCpu().name);
  CHECK(base.cpuFeatures == hostCpu().features);
  CHECK(!base.cpuFeatures.empty());
  // Defaults resolve: 0 and 64 are one kernel.
  CompileOptions explicit64;
  explicit64.blockM = explicit64.blockN = 64;
  CHECK(cpuCacheKey(spec, explicit64).hash() == base.hash());

  std::set<std::string> hashes = {base.hash()};
  auto distinct = [&](const std::string &what, const CacheKey &k) {
    INFO("changed: " << what);
    CHECK(hashes.insert(k.hash()).second);
  };
  CompileOptions o;
  o.blockM = 32;
  distinct("block_m", cpuCacheKey(spec, o));
  o = {};
  o.blockN = 128;
  distinct("block_n", cpuCacheKey(spec, o));
  o = {};
  o.optLevel = 3;
  distinct("opt_level", cpuCacheKey(spec, o));
  o = {};
  o.countTiles = true;
  distinct("count_tiles", cpuCacheKey(spec, o));
  o = {};
  o.varlen = true;
  distinct("varlen", cpuCacheKey(spec, o));
  o = {};
  o.blockSparse = true;
  distinct("block_sparse", cpuCacheKey(spec, o));
  AttentionSpec other = spec;
  other.headDimV = 32;
  distinct("spec", cpuCacheKey(other));
  CacheKey k = base;
  k.cpu = "some-other-cpu";
  distinct("cpu", k);
  k = base;
  k.cpuFeatures += ",+made-up-feature";
  distinct("cpu features", k);
  {
    ScopedEnv cc("FLASHJIT_CC", "/usr/bin/cc");
    distinct("FLASHJIT_CC", cpuCacheKey(spec));
  }

  SECTION("a different option is a miss on disk") {
    if (!cpuLinkerAvailable()) {
      WARN("no C compiler driver to link CPU kernels; skipped");
      return;
    }
    TempDir dir;
    clearCpuMemoryTier();
    DiskCache cache(configIn(dir.path()));
    LoadReport r;
    loadOrCompileCpu(spec, {}, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Compiled);
    o = {};
    o.blockN = 32;
    o.countTiles = true;
    std::shared_ptr<const CpuKernel> k2 = loadOrCompileCpu(spec, o, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Compiled);
    CHECK(k2->blockN() == 32);
    checkKernel(*k2);
    CHECK(cache.list().size() == 2);
  }
}

TEST_CASE("a CPU kernel for features this host lacks is refused", "[cache]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  AttentionSpec spec = parseSpec(kSpecText);
  KernelArtifacts a = compileCpuArtifacts(spec);
  CHECK(a.config.arch == "cpu");
  CHECK(a.entry == "flashjit_swa_cap");
  REQUIRE(a.file(kSharedObjectFile));
  REQUIRE(a.file(kObjectFile));
  checkKernel(*CpuKernel::load(a));

  KernelArtifacts future = a;
  future.cpuFeatures += ",+flashjit-test-feature";
  CHECK_THROWS_WITH(loadCpuKernel(future),
                    Catch::Contains("flashjit-test-feature") &&
                        Catch::Contains("lacks"));
  KernelArtifacts gpu = a;
  gpu.config.arch = "sm_90a";
  CHECK_THROWS_AS(loadCpuKernel(gpu), UserError);
  KernelArtifacts noSo = a;
  noSo.files.erase(kSharedObjectFile);
  CHECK_THROWS_WITH(loadCpuKernel(noSo), Catch::Contains("kernel.so"));
  KernelArtifacts garbage = a;
  garbage.files[kSharedObjectFile] = "not an ELF file";
  CHECK_THROWS_WITH(loadCpuKernel(garbage), Catch::Contains("cannot load"));
}

TEST_CASE("a read-only cache or no C compiler compiles CPU kernels in memory",
          "[cache]") {
  AttentionSpec spec = parseSpec(kSpecText);
  TempDir dir;
  clearCpuMemoryTier();

  SECTION("an unwritable cache directory") {
    if (!cpuLinkerAvailable()) {
      WARN("no C compiler driver to link CPU kernels; skipped");
      return;
    }
    DiskCache cache(configIn(dir.path()));
    REQUIRE(cache.usable());
    // The entry's lock file cannot be created (a directory is in its way):
    // this fails for root too, unlike a read-only mode.
    std::string lock = cache.entryDir(cpuCacheKey(spec).hash()) + ".lock";
    REQUIRE(!fs::create_directory(lock));
    LoadReport r;
    std::shared_ptr<const CpuKernel> k = loadOrCompileCpu(spec, {}, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Uncached);
    CHECK(cache.warnings().size() == 1);
    CHECK(cache.list().empty());
    checkKernel(*k);
  }
  SECTION("disabled cache") {
    CacheConfig c = configIn(dir.path());
    c.enabled = false;
    DiskCache cache(c);
    LoadReport r;
    std::shared_ptr<const CpuKernel> k = loadOrCompileCpu(spec, {}, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Uncached);
    CHECK(filesIn(dir.path()) == 0);
    checkKernel(*k);
  }
  SECTION("no C compiler driver") {
    ScopedEnv cc("FLASHJIT_CC", "/nonexistent/flashjit-cc");
    std::string why;
    CHECK(!cpuLinkerAvailable(&why));
    CHECK(why.find("FLASHJIT_CC") != std::string::npos);
    DiskCache cache(configIn(dir.path()));
    LoadReport r;
    std::shared_ptr<const CpuKernel> k = loadOrCompileCpu(spec, {}, &cache, &r);
    CHECK(r.outcome == CacheOutcome::Uncached);
    CHECK(filesIn(dir.path()) == 0);
    checkKernel(*k);
    CHECK_THROWS_WITH(compileCpuArtifacts(spec),
                      Catch::Contains("FLASHJIT_CC"));
  }
}

TEST_CASE("a CPU bundle holds the kernel with its options", "[cache]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir dir;
  AttentionSpec spec = parseSpec(kSpecText);
  CompileOptions o;
  o.blockM = 32;
  o.countTiles = true;
  Bundle::add(dir.path(), cpuCacheKey(spec, o), compileCpuArtifacts(spec, o));
  Bundle b = Bundle::open(dir.path());
  REQUIRE(b.items().size() == 1);
  CHECK(b.items()[0].config.cpuBlockM == 32);
  CHECK(b.items()[0].config.countTiles);
  CacheKey request = cpuCacheKey(spec, o);
  std::optional<KernelArtifacts> a = b.find(request);
  REQUIRE(a);
  std::shared_ptr<const CpuAttentionKernel> k = loadCpuKernel(*a);
  CHECK(k->config().cpuBlockM == 32);
  CHECK(k->config().countTiles);
  request.config.countTiles = false;
  CHECK(!b.find(request));
  std::string mismatch = flashjit::testing::checkCpuKernel(
      spec,
      [&](const auto &q, const auto &kk, const auto &v, const auto &out,
          const auto *lse, const auto &args) {
        RunStats st = k->run(q, kk, v, out, lse, args);
        CHECK(st.tilesCounted);
        CHECK(st.tiles.full + st.tiles.partial + st.tiles.empty > 0);
      },
      seed());
  INFO(mismatch);
  CHECK(mismatch.empty());
}

TEST_CASE("CPU kernels loaded one after another stay distinct", "[cache]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  // Two kernels with different specs (and entry symbols), loaded while the
  // other lives and after it is gone: each must run its own code.
  AttentionSpec a = parseSpec(kSpecText);
  AttentionSpec b = parseSpec("attention(causal=bottom_right, head_dim_qk=32, "
                              "head_dim_v=48, heads_q=3, heads_kv=1)");
  KernelArtifacts aa = compileCpuArtifacts(a), ba = compileCpuArtifacts(b);
  for (int round = 0; round < 3; ++round) {
    std::shared_ptr<const CpuKernel> ka = CpuKernel::load(aa);
    std::shared_ptr<const CpuKernel> kb = CpuKernel::load(ba);
    CHECK(ka->spec().headDimV == 64);
    CHECK(kb->spec().headDimV == 48);
    checkKernel(*kb);
    checkKernel(*ka);
    ka.reset();
    checkKernel(*CpuKernel::load(ba));
    checkKernel(*kb);
  }
}
