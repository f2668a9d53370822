//===- CacheTest.cpp - The kernel cache on disk and in memory -------------===//
//
// Keys, store/load round trips, every corruption case, permissions, LRU
// pruning, the environment knobs, an unwritable cache, concurrent stores by
// 8 processes and by 8 threads, the in-memory tier and bundles. Kernels are
// fake artifacts (CacheTestSupport.h): the cache never looks inside them.
//
//===----------------------------------------------------------------------===//
#include "CacheTestSupport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Hash.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"

#include <catch2/catch.hpp>
#include <llvm/Support/Chrono.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::testing::fakeArtifacts;
using flashjit::testing::TempDir;
namespace fs = llvm::sys::fs;
using flashjit::testing::ScopedEnv;

namespace {

const std::string kSpec = "attention(head_dim_qk=128, head_dim_v=128)";

CacheConfig configIn(const std::string &dir) {
  CacheConfig c;
  c.dir = dir;
  return c;
}

std::string readAll(const std::string &p) {
  auto buf = llvm::MemoryBuffer::getFile(p, false, false);
  REQUIRE(buf);
  return (*buf)->getBuffer().str();
}

void writeAll(const std::string &p, const std::string &bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

unsigned mode(const std::string &p) {
  fs::file_status st;
  REQUIRE(!fs::status(p, st));
  return unsigned(st.permissions()) & 0777;
}

/// Runs \p argv to completion; returns its exit status (-1 on a signal).
int runProcess(const std::vector<std::string> &argv, pid_t *pidOut = nullptr) {
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  REQUIRE(::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(),
                        environ) == 0);
  if (pidOut) {
    *pidOut = pid;
    return 0;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

KernelArtifacts compileCounted(std::atomic<int> &count,
                               const std::string &tag = "c") {
  ++count;
  return fakeArtifacts(kSpec, tag + std::to_string(count.load()));
}

} // namespace

TEST_CASE("every key component changes the key", "[cache]") {
  CacheKey base = CacheKey::make(kSpec, "sm_90a", 64, 8);
  base.env.clear();
  CHECK(base.hash().size() == 64);
  CHECK(base.hash() == CacheKey(base).hash());
  CHECK(base.version == flashjitVersion());
  CHECK(base.commit == flashjitCommit());
  CHECK(!base.commit.empty());
  CHECK(base.llvm == llvmVersion());
  CHECK(base.schema == kCacheVersion);

  std::vector<std::pair<std::string, CacheKey>> variants;
  auto vary = [&](std::string what, auto change) {
    CacheKey k = base;
    change(k);
    variants.emplace_back(std::move(what), std::move(k));
  };
  vary("spec", [](CacheKey &k) { k.specText += " "; });
  vary("arch", [](CacheKey &k) { k.config.arch = "sm_80"; });
  vary("block_n", [](CacheKey &k) { k.config.blockN = 32; });
  vary("warps", [](CacheKey &k) { k.config.numWarps = 4; });
  vary("min_blocks_per_sm", [](CacheKey &k) { k.config.minBlocksPerSM = 2; });
  vary("rows_per_warp", [](CacheKey &k) { k.config.rowsPerWarp = 32; });
  vary("mma", [](CacheKey &k) { k.mma = "wgmma"; });
  vary("block_m", [](CacheKey &k) { k.config.cpuBlockM = 32; });
  vary("opt_level", [](CacheKey &k) { k.config.optLevel = 3; });
  vary("count_tiles", [](CacheKey &k) { k.config.countTiles = true; });
  vary("varlen", [](CacheKey &k) { k.config.varlen = true; });
  vary("block_sparse", [](CacheKey &k) { k.config.blockSparse = true; });
  vary("cpu", [](CacheKey &k) { k.cpu = "znver4"; });
  vary("cpu_features", [](CacheKey &k) { k.cpuFeatures = "+avx2"; });
  vary("version", [](CacheKey &k) { k.version = "0.1.1"; });
  vary("commit", [](CacheKey &k) { k.commit = "0123abcd"; });
  vary("llvm", [](CacheKey &k) { k.llvm = "23.0.0"; });
  vary("schema", [](CacheKey &k) { k.schema = kCacheVersion + 1; });
  vary("env", [](CacheKey &k) { k.env.emplace_back("FLASHJIT_PTXAS", "x"); });
  vary("env value",
       [](CacheKey &k) { k.env.emplace_back("FLASHJIT_PTXAS", "y"); });
  // Field boundaries cannot be forged by moving text between fields.
  vary("arch/spec boundary", [](CacheKey &k) { k.config.arch += "\nspec:0="; });

  std::set<std::string> hashes = {base.hash()};
  for (const auto &[what, k] : variants) {
    INFO("changed: " << what);
    CHECK(hashes.insert(k.hash()).second);
  }

  SECTION("environment variables are read and their order is irrelevant") {
    ScopedEnv a("FLASHJIT_PTXAS", "/opt/ptxas");
    ScopedEnv b("FLASHJIT_DRIVER_JIT", "1");
    CacheKey k = CacheKey::make(kSpec, "sm_90a", 64, 8);
    CHECK(k.env.size() == 2);
    CHECK(k.hash() != base.hash());
    CacheKey reversed = k;
    std::reverse(reversed.env.begin(), reversed.env.end());
    CHECK(reversed.hash() == k.hash());
  }
  SECTION("an unrelated environment variable does not change the key") {
    ScopedEnv a("FLASHJIT_UNRELATED_TEST_VAR", "1");
    ScopedEnv b("FLASHJIT_PTXAS", nullptr);
    ScopedEnv c("FLASHJIT_DRIVER_JIT", nullptr);
    CHECK(CacheKey::make(kSpec, "sm_90a", 64, 8).hash() == base.hash());
  }
}

TEST_CASE("a stored entry loads back with every field and file", "[cache]") {
  TempDir tmp;
  DiskCache cache(configIn(tmp / "cache"));
  REQUIRE(cache.usable());
  CHECK(mode(cache.dir()) == 0700);
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  CHECK(!cache.load(key));

  KernelArtifacts a = fakeArtifacts(kSpec, "one");
  a.files[kCubinFile] = std::string("\x7f"
                                    "ELF\0\1\2",
                                    7);
  REQUIRE(cache.store(key, a));

  std::string dir = cache.entryDir(key.hash());
  CHECK(mode(dir) == 0700);
  for (const char *f : {kAttnFile, kGpuFile, kPtxFile, kCubinFile, kMetaFile})
    CHECK(fs::exists(dir + "/" + f));
  std::string meta = readAll(dir + "/" + kMetaFile);
  CHECK(meta.find(sha256Hex(*a.file(kPtxFile))) != std::string::npos);
  CHECK(meta.find("\"registers\": 168") != std::string::npos);

  std::optional<KernelArtifacts> b = cache.load(key);
  REQUIRE(b);
  CHECK(b->entry == a.entry);
  CHECK(b->config == a.config);
  CHECK(b->specText == a.specText);
  CHECK(b->sharedBytes == a.sharedBytes);
  CHECK(b->registers == a.registers);
  CHECK(b->spillBytes == a.spillBytes);
  REQUIRE(b->stageSeconds.size() == 3);
  CHECK(b->stageSeconds[1].name == "gpu");
  CHECK(b->stageSeconds[1].seconds == Approx(0.02));
  CHECK(b->files == a.files);

  // No temporary files or directories are left behind.
  std::error_code ec;
  for (fs::directory_iterator it(cache.dir(), ec), end; !ec && it != end;
       it.increment(ec))
    CHECK(llvm::StringRef(it->path()).find(".tmp-") == llvm::StringRef::npos);

  SECTION("list and clear") {
    std::vector<CacheEntryInfo> entries = cache.list();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].key == key.hash());
    CHECK(entries[0].valid);
    CHECK(entries[0].entry == a.entry);
    CHECK(entries[0].bytes > 4096);
    CHECK(cache.clear() == 1);
    CHECK(cache.list().empty());
    CHECK(!cache.load(key));
  }
}

TEST_CASE("a TMA configuration survives the manifest", "[cache]") {
  // meta.json names "tma" only where it is set: the manifests of cp.async
  // kernels are what they were before TMA existed.
  for (bool tma : {false, true}) {
    INFO("tma " << tma);
    TempDir tmp;
    DiskCache cache(configIn(tmp / "cache"));
    REQUIRE(cache.usable());
    CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
    KernelArtifacts a = fakeArtifacts(kSpec, "one");
    a.config.wgmma = true;
    a.config.tma = tma;
    REQUIRE(cache.store(key, a));
    std::string meta = readAll(cache.entryDir(key.hash()) + "/" + kMetaFile);
    CHECK((meta.find("\"tma\": true") != std::string::npos) == tma);
    CHECK((meta.find("\"tma\"") != std::string::npos) == tma);
    std::optional<KernelArtifacts> b = cache.load(key);
    REQUIRE(b);
    CHECK(b->config.tma == tma);
    CHECK(b->config == a.config);
  }
}

TEST_CASE("the backward's synchronous order survives the manifest and is "
          "refused on other kernels",
          "[cache]") {
  // meta.json names "sync_backward" only where it is set; a forward entry
  // (or a hand-edited one) claiming it is invalid, not silently loaded.
  for (bool sync : {false, true}) {
    INFO("sync " << sync);
    TempDir tmp;
    DiskCache cache(configIn(tmp / "cache"));
    REQUIRE(cache.usable());
    CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
    KernelArtifacts a = fakeArtifacts(kSpec, "one");
    a.config.kind = KernelKind::Backward;
    a.config.wgmma = true;
    a.config.syncBackward = sync;
    REQUIRE(cache.store(key, a));
    std::string meta = readAll(cache.entryDir(key.hash()) + "/" + kMetaFile);
    CHECK((meta.find("\"sync_backward\": true") != std::string::npos) == sync);
    CHECK((meta.find("\"sync_backward\"") != std::string::npos) == sync);
    std::optional<KernelArtifacts> b = cache.load(key);
    REQUIRE(b);
    CHECK(b->config.syncBackward == sync);
    CHECK(b->config == a.config);
  }
  TempDir tmp;
  DiskCache cache(configIn(tmp / "cache"));
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  KernelArtifacts fwd = fakeArtifacts(kSpec, "one");
  fwd.config.wgmma = true;
  fwd.config.syncBackward = true; // a forward kernel has no tile order
  REQUIRE(cache.store(key, fwd));
  CHECK_FALSE(cache.load(key));
}

TEST_CASE("getOrCompile compiles on a miss and loads on a hit", "[cache]") {
  TempDir tmp;
  DiskCache cache(configIn(tmp.path()));
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  std::atomic<int> compiles = 0;
  CacheOutcome outcome;
  KernelArtifacts first = cache.getOrCompile(
      key, [&] { return compileCounted(compiles); }, &outcome);
  CHECK(outcome == CacheOutcome::Compiled);
  KernelArtifacts second = cache.getOrCompile(
      key, [&] { return compileCounted(compiles); }, &outcome);
  CHECK(outcome == CacheOutcome::Hit);
  CHECK(compiles == 1);
  CHECK(second.files == first.files);

  SECTION("another key is a miss") {
    CacheKey other = CacheKey::make(kSpec, "sm_80", 64, 8);
    cache.getOrCompile(
        other, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Compiled);
    CHECK(compiles == 2);
  }
  SECTION("always-compile recompiles and replaces the entry") {
    CacheConfig c = configIn(tmp.path());
    c.alwaysCompile = true;
    DiskCache always(c);
    KernelArtifacts third = always.getOrCompile(
        key, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Compiled);
    CHECK(compiles == 2);
    CHECK(cache.load(key)->files == third.files);
  }
  SECTION("a failing compile stores nothing and propagates") {
    CacheKey other = CacheKey::make(kSpec, "sm_80", 64, 8);
    CHECK_THROWS_AS(cache.getOrCompile(other,
                                       []() -> KernelArtifacts {
                                         throw UserError("bad head dim");
                                       }),
                    UserError);
    CHECK(!cache.load(other));
    CHECK(cache.list().size() == 1);
  }
  SECTION("a disabled cache compiles every time and writes nothing") {
    CacheConfig c = configIn(tmp / "disabled");
    c.enabled = false;
    DiskCache off(c);
    CHECK(!off.usable());
    off.getOrCompile(
        key, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Uncached);
    CHECK(!fs::exists(tmp / "disabled"));
  }
}

TEST_CASE("a corrupt entry is a miss that is recompiled and replaced",
          "[cache]") {
  TempDir tmp;
  DiskCache cache(configIn(tmp.path()));
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  REQUIRE(cache.store(key, fakeArtifacts(kSpec, "good")));
  std::string dir = cache.entryDir(key.hash());
  std::string meta = dir + "/" + kMetaFile;
  std::string ptx = dir + "/" + kPtxFile;

  SECTION("truncated artifact") {
    std::string bytes = readAll(ptx);
    writeAll(ptx, bytes.substr(0, bytes.size() / 2));
  }
  SECTION("artifact with one byte changed (same size)") {
    std::string bytes = readAll(ptx);
    bytes[bytes.size() - 1] ^= 1;
    writeAll(ptx, bytes);
  }
  SECTION("missing artifact") { fs::remove(ptx); }
  SECTION("missing meta.json (an entry whose writer died)") {
    fs::remove(meta);
  }
  SECTION("truncated meta.json") {
    std::string bytes = readAll(meta);
    writeAll(meta, bytes.substr(0, bytes.size() / 2));
  }
  SECTION("garbage meta.json") { writeAll(meta, "\x01\x02garbage\xff"); }
  SECTION("meta.json not an object") { writeAll(meta, "[1, 2, 3]"); }
  SECTION("wrong schema version") {
    std::string bytes = readAll(meta);
    std::string from = "\"schema\": " + std::to_string(kCacheVersion);
    size_t at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    bytes.replace(at, from.size(),
                  "\"schema\": " + std::to_string(kCacheVersion + 1));
    writeAll(meta, bytes);
  }
  SECTION("meta.json of another key") {
    std::string bytes = readAll(meta);
    size_t at = bytes.find(key.hash());
    REQUIRE(at != std::string::npos);
    bytes[at] = bytes[at] == 'a' ? 'b' : 'a';
    writeAll(meta, bytes);
  }
  SECTION("meta.json lacking a field") {
    std::string bytes = readAll(meta);
    size_t at = bytes.find("\"entry\"");
    REQUIRE(at != std::string::npos);
    bytes.replace(at, 7, "\"entrx\"");
    writeAll(meta, bytes);
  }
  SECTION("meta.json naming a file outside the entry") {
    std::string bytes = readAll(meta);
    size_t at = bytes.find("\"kernel.ptx\"");
    REQUIRE(at != std::string::npos);
    bytes.replace(at, 12, "\"../x.ptx\"");
    writeAll(meta, bytes);
  }

  std::string why;
  CHECK(!readEntry(dir, key.hash(), &why));
  CHECK(!why.empty());
  CHECK(!cache.load(key));
  // Not silently: one warning, one line, naming the entry and the problem.
  CHECK(!cache.load(key));
  std::replace(why.begin(), why.end(), '\n', ' ');
  REQUIRE(cache.warnings().size() == 1);
  const std::string warning = cache.warnings().front();
  CHECK(warning.find(key.hash()) != std::string::npos);
  CHECK(warning.find(why) != std::string::npos);
  CHECK(warning.find('\n') == std::string::npos);
  CacheOutcome outcome;
  KernelArtifacts fresh = cache.getOrCompile(
      key, [] { return fakeArtifacts(kSpec, "fresh"); }, &outcome);
  CHECK(outcome == CacheOutcome::Compiled);
  std::optional<KernelArtifacts> loaded = cache.load(key);
  REQUIRE(loaded);
  CHECK(loaded->files == fresh.files);
  CHECK(cache.list().size() == 1);
}

TEST_CASE("unsafe directories and entries are refused with one warning",
          "[cache]") {
  TempDir tmp;
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  std::atomic<int> compiles = 0;
  CacheOutcome outcome;

  SECTION("a cache directory writable by group or others") {
    for (fs::perms p : {fs::perms(0770), fs::perms(0707), fs::perms(0777)}) {
      std::string dir = tmp / ("shared" + std::to_string(unsigned(p)));
      REQUIRE(!fs::create_directory(dir));
      REQUIRE(!fs::setPermissions(dir, p));
      DiskCache cache(configIn(dir));
      CHECK(!cache.usable());
      CHECK(cache.whyUnusable().find("writable by group or others") !=
            std::string::npos);
      CHECK(cache.warnings().size() == 1);
      cache.getOrCompile(
          key, [&] { return compileCounted(compiles); }, &outcome);
      CHECK(outcome == CacheOutcome::Uncached);
      CHECK(cache.list().empty());
    }
  }
  SECTION("an entry writable by others is not loaded, then replaced") {
    DiskCache cache(configIn(tmp.path()));
    REQUIRE(cache.store(key, fakeArtifacts(kSpec, "planted")));
    std::string dir = cache.entryDir(key.hash());
    REQUIRE(!fs::setPermissions(dir, fs::perms(0777)));
    CHECK(!cache.load(key));
    CHECK(!cache.load(key));
    CHECK(cache.warnings().size() == 1);
    KernelArtifacts a = cache.getOrCompile(
        key, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Compiled);
    CHECK(mode(dir) == 0700);
    CHECK(cache.load(key)->files == a.files);
  }
  SECTION("a directory or entry owned by another user") {
    if (::geteuid() != 0) {
      WARN("not root: cannot chown to another user; ownership case skipped");
      return;
    }
    std::string dir = tmp / "foreign";
    REQUIRE(!fs::create_directory(dir, true, fs::owner_all));
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    DiskCache foreign(configIn(dir));
    CHECK(!foreign.usable());
    CHECK(foreign.whyUnusable().find("owned by uid 65534") !=
          std::string::npos);

    DiskCache cache(configIn(tmp / "mine"));
    REQUIRE(cache.store(key, fakeArtifacts(kSpec, "planted")));
    std::string entry = cache.entryDir(key.hash());
    REQUIRE(::chown(entry.c_str(), 65534, 65534) == 0);
    CHECK(!cache.load(key));
    CHECK(cache.warnings().size() == 1);
  }
  SECTION("a cache directory that is a symbolic link is resolved") {
    // Once turned caching off (~/.cache pointing to scratch space is common).
    std::string real = tmp / "scratch";
    REQUIRE(!fs::create_directory(real, true, fs::owner_all));
    REQUIRE(!fs::create_link(real, tmp / "link"));
    DiskCache cache(configIn(tmp / "link"));
    CHECK(cache.usable());
    CHECK(cache.warnings().empty());
    llvm::SmallString<256> resolved;
    REQUIRE(!fs::real_path(real, resolved));
    CHECK(cache.dir() == resolved.str());
    KernelArtifacts a = cache.getOrCompile(
        key, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Compiled);
    CHECK(fs::exists(real + "/" + key.hash() + "/" + kMetaFile));
    DiskCache again(configIn(tmp / "link"));
    CHECK(again.load(key)->files == a.files);
    // The directory it points to passes the same checks as any other.
    std::string shared = tmp / "shared";
    REQUIRE(!fs::create_directory(shared));
    REQUIRE(!fs::setPermissions(shared, fs::perms(0777)));
    REQUIRE(!fs::create_link(shared, tmp / "link2"));
    DiskCache refused(configIn(tmp / "link2"));
    CHECK(!refused.usable());
    CHECK(refused.whyUnusable().find("writable by group or others") !=
          std::string::npos);
    CHECK(refused.whyUnusable().find("shared") != std::string::npos);
  }
  SECTION("a symbolic link as the entry") {
    DiskCache cache(configIn(tmp / "c"));
    CacheKey other = CacheKey::make(kSpec, "sm_80", 64, 8);
    REQUIRE(cache.store(other, fakeArtifacts(kSpec, "elsewhere")));
    REQUIRE(!fs::create_link(cache.entryDir(other.hash()),
                             cache.entryDir(key.hash())));
    CHECK(!cache.load(key));
  }
}

TEST_CASE("an unwritable cache compiles in memory with one warning",
          "[cache]") {
  TempDir tmp;
  std::string dir = tmp / "cache";
  DiskCache cache(configIn(dir));
  REQUIRE(cache.usable());
  // The directory disappears and a file takes its place (works as root too,
  // where mode bits would not stop a write).
  REQUIRE(!fs::remove_directories(dir));
  writeAll(dir, "not a directory");
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  std::atomic<int> compiles = 0;
  CacheOutcome outcome;
  for (int i = 0; i < 3; ++i) {
    KernelArtifacts a = cache.getOrCompile(
        key, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Uncached);
    CHECK(a.file(kPtxFile));
  }
  CHECK(compiles == 3);
  CHECK(!cache.store(key, fakeArtifacts(kSpec, "x")));
  CHECK(cache.warnings().size() == 1);

  SECTION("a cache directory that cannot be created") {
    DiskCache nested(configIn(dir + "/sub"));
    CHECK(!nested.usable());
    CHECK(nested.warnings().size() == 1);
    nested.getOrCompile(
        key, [&] { return compileCounted(compiles); }, &outcome);
    CHECK(outcome == CacheOutcome::Uncached);
  }
}

TEST_CASE("pruning removes the least recently used entries", "[cache]") {
  TempDir tmp;
  DiskCache cache(configIn(tmp.path()));
  std::vector<CacheKey> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back(CacheKey::make(kSpec, "sm_90a", 16 * (i + 1), 8));
    REQUIRE(cache.store(keys.back(), fakeArtifacts(kSpec, std::to_string(i))));
    // Entry i was last used at t0 + i hours.
    int fd;
    REQUIRE(!fs::openFileForRead(
        cache.entryDir(keys.back().hash()) + "/" + kMetaFile, fd));
    fs::setLastAccessAndModificationTime(
        fd, llvm::sys::toTimePoint(1700000000 + 3600 * i));
    ::close(fd);
  }
  uint64_t entryBytes = cache.list().front().bytes;
  // A hit makes the oldest entry the most recent.
  REQUIRE(cache.load(keys[0]));
  CHECK(cache.list().front().key == keys[0].hash());

  CHECK(cache.prune(3 * entryBytes + entryBytes / 2) == 2);
  std::set<std::string> left;
  for (const CacheEntryInfo &e : cache.list())
    left.insert(e.key);
  CHECK(left ==
        std::set<std::string>{keys[0].hash(), keys[3].hash(), keys[4].hash()});
  CHECK(cache.prune(1 << 30) == 0);

  SECTION("a size limit prunes on every store") {
    CacheConfig c = configIn(tmp.path());
    c.maxBytes = 2 * entryBytes + entryBytes / 2;
    DiskCache limited(c);
    CacheKey fresh = CacheKey::make(kSpec, "sm_80", 64, 8);
    REQUIRE(limited.store(fresh, fakeArtifacts(kSpec, "fresh")));
    left.clear();
    for (const CacheEntryInfo &e : limited.list())
      left.insert(e.key);
    CHECK(left == std::set<std::string>{keys[0].hash(), fresh.hash()});
  }
}

TEST_CASE("pruning and clearing remove flashjit entries only", "[cache]") {
  // `cache prune` once deleted any 64-hex-named directory, whatever it held.
  TempDir tmp;
  DiskCache cache(configIn(tmp.path()));
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  REQUIRE(cache.store(key, fakeArtifacts(kSpec, "mine")));
  std::string entry = cache.entryDir(key.hash());
  // Named like entries, but someone else's.
  auto dirNamed = [&](char c) {
    std::string d = tmp / std::string(64, c);
    REQUIRE(!fs::create_directory(d, true, fs::owner_all));
    return d;
  };
  std::string data = dirNamed('a');
  writeAll(data + "/results.csv", "precious");
  std::string otherJson = dirNamed('b');
  writeAll(otherJson + "/" + kMetaFile, "{\"name\": \"not flashjit\"}");
  std::string otherKey = dirNamed('c'); // a manifest copied from elsewhere
  writeAll(otherKey + "/" + kMetaFile, readAll(entry + "/" + kMetaFile));
  std::string nested = dirNamed('d'); // a manifest, and a subdirectory
  std::string manifest = readAll(entry + "/" + kMetaFile);
  size_t at = manifest.find(key.hash());
  REQUIRE(at != std::string::npos);
  manifest.replace(at, 64, std::string(64, 'd'));
  writeAll(nested + "/" + kMetaFile, manifest);
  REQUIRE(!fs::create_directory(nested + "/keep"));
  const std::vector<std::string> foreignDirs = {data, otherJson, otherKey,
                                                nested};

  std::vector<ForeignDir> foreign;
  CHECK(cache.list(&foreign).size() == 1);
  REQUIRE(foreign.size() == 4);
  CHECK(foreign[0].path == data);
  CHECK(foreign[0].why == "no meta.json");
  CHECK(foreign[1].why == "meta.json is not a flashjit manifest for this key");
  CHECK(foreign[2].why == "meta.json is not a flashjit manifest for this key");
  CHECK(foreign[3].why == "it holds keep, which is not a regular file");

  SECTION("prune") {
    foreign.clear();
    CHECK(cache.prune(0, &foreign) == 1);
    CHECK(foreign.size() == 4);
  }
  SECTION("clear") {
    foreign.clear();
    CHECK(cache.clear(&foreign) == 1);
    CHECK(foreign.size() == 4);
  }
  CHECK(!fs::exists(entry));
  for (const std::string &d : foreignDirs)
    CHECK(fs::exists(d));
  CHECK(readAll(data + "/results.csv") == "precious");
  // A corrupt entry still has its manifest: it is flashjit's to remove.
  REQUIRE(cache.store(key, fakeArtifacts(kSpec, "again")));
  writeAll(entry + "/" + kPtxFile, "tampered");
  CHECK(cache.list().size() == 1);
  CHECK(!cache.list().front().valid);
  CHECK(cache.prune(0) == 1);
}

TEST_CASE("configuration comes from the environment", "[cache]") {
  TempDir tmp;
  ScopedEnv noMax("FLASHJIT_CACHE_MAX_BYTES", nullptr);
  ScopedEnv noDisable("FLASHJIT_DISABLE_CACHE", nullptr);
  ScopedEnv noAlways("FLASHJIT_ALWAYS_COMPILE", nullptr);
  SECTION("FLASHJIT_CACHE_DIR wins") {
    ScopedEnv d("FLASHJIT_CACHE_DIR", (tmp / "explicit").c_str());
    ScopedEnv x("XDG_CACHE_HOME", (tmp / "xdg").c_str());
    CacheConfig c = CacheConfig::fromEnvironment();
    CHECK(c.dir == tmp / "explicit");
    CHECK(c.enabled);
    CHECK(!c.alwaysCompile);
    CHECK(c.maxBytes == 0);
  }
  SECTION("then $XDG_CACHE_HOME/flashjit, created 0700") {
    ScopedEnv d("FLASHJIT_CACHE_DIR", nullptr);
    ScopedEnv x("XDG_CACHE_HOME", (tmp / "xdg").c_str());
    CacheConfig c = CacheConfig::fromEnvironment();
    CHECK(c.dir == tmp / "xdg/flashjit");
    DiskCache cache(c);
    CHECK(cache.usable());
    CHECK(mode(c.dir) == 0700);
  }
  SECTION("then ~/.cache/flashjit") {
    ScopedEnv d("FLASHJIT_CACHE_DIR", nullptr);
    ScopedEnv x("XDG_CACHE_HOME", nullptr);
    ScopedEnv h("HOME", tmp.path().c_str());
    CHECK(CacheConfig::fromEnvironment().dir == tmp / ".cache/flashjit");
  }
  SECTION("knobs") {
    ScopedEnv d("FLASHJIT_CACHE_DIR", tmp.path().c_str());
    ScopedEnv off("FLASHJIT_DISABLE_CACHE", "1");
    ScopedEnv always("FLASHJIT_ALWAYS_COMPILE", "true");
    ScopedEnv max("FLASHJIT_CACHE_MAX_BYTES", "1048576");
    CacheConfig c = CacheConfig::fromEnvironment();
    CHECK(!c.enabled);
    CHECK(c.alwaysCompile);
    CHECK(c.maxBytes == 1048576);
  }
  SECTION("a disabling value of 0 leaves the cache on") {
    ScopedEnv d("FLASHJIT_CACHE_DIR", tmp.path().c_str());
    ScopedEnv off("FLASHJIT_DISABLE_CACHE", "0");
    CHECK(CacheConfig::fromEnvironment().enabled);
  }
  SECTION("a size limit of 0 means no limit") {
    // As `flashjit cache prune` reads it (it refuses --max-bytes 0).
    ScopedEnv max("FLASHJIT_CACHE_MAX_BYTES", "0");
    CacheConfig c = CacheConfig::fromEnvironment();
    CHECK(c.maxBytes == 0);
    c.dir = tmp / "unlimited";
    DiskCache cache(c);
    for (int i = 0; i < 3; ++i)
      REQUIRE(cache.store(CacheKey::make(kSpec, "sm_90a", 16 * (i + 1), 8),
                          fakeArtifacts(kSpec, std::to_string(i))));
    CHECK(cache.list().size() == 3);
  }
  SECTION("a bad size limit is a UserError naming the variable") {
    ScopedEnv max("FLASHJIT_CACHE_MAX_BYTES", "10GB");
    CHECK_THROWS_WITH(CacheConfig::fromEnvironment(),
                      Catch::Contains("FLASHJIT_CACHE_MAX_BYTES='10GB'"));
  }
}

TEST_CASE("8 processes storing one key make one entry with one compile",
          "[cache]") {
  TempDir tmp;
  std::string dir = tmp / "cache";
  std::vector<pid_t> pids(8);
  for (int i = 0; i < 8; ++i)
    runProcess({FLASHJIT_CACHE_STORE_HELPER, dir, kSpec,
                tmp / ("out" + std::to_string(i))},
               &pids[i]);
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  DiskCache cache(configIn(dir));
  std::vector<CacheEntryInfo> entries = cache.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].valid);
  // Exactly one process compiled; every process got the same bytes.
  std::string log = readAll(dir + "/compiles.log");
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  std::string stored =
      *cache.load(CacheKey::make(kSpec, "sm_90a", 64, 8))->file(kPtxFile);
  CHECK(stored.find("pid " + log.substr(0, log.size() - 1)) !=
        std::string::npos);
  for (int i = 0; i < 8; ++i)
    CHECK(readAll(tmp / ("out" + std::to_string(i))) == stored);
}

TEST_CASE("8 threads with separate caches storing one key compile once",
          "[cache]") {
  TempDir tmp;
  CacheKey key = CacheKey::make(kSpec, "sm_90a", 64, 8);
  std::atomic<int> compiles = 0;
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      DiskCache cache(configIn(tmp.path()));
      got[i] = *cache
                    .getOrCompile(key,
                                  [&] {
                                    std::this_thread::sleep_for(
                                        std::chrono::milliseconds(50));
                                    return compileCounted(compiles);
                                  })
                    .file(kPtxFile);
    });
  for (std::thread &t : threads)
    t.join();
  CHECK(compiles == 1);
  for (const std::string &g : got)
    CHECK(g == got[0]);
  CHECK(DiskCache(configIn(tmp.path())).list().size() == 1);
}

TEST_CASE("the memory tier loads once per context and key", "[cache]") {
  MemoryTier<std::string> tier;
  std::atomic<int> loads = 0;
  auto load = [&] {
    ++loads;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::make_shared<const std::string>("kernel");
  };
  int ctxA = 0, ctxB = 0;
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const std::string>> got(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { got[i] = tier.getOrLoad(&ctxA, "k", load); });
  for (std::thread &t : threads)
    t.join();
  CHECK(loads == 1);
  for (const auto &g : got)
    CHECK(g.get() == got[0].get());
  CHECK(tier.find(&ctxA, "k") == got[0]);
  CHECK(tier.find(&ctxB, "k") == nullptr);
  tier.getOrLoad(&ctxB, "k", load);
  CHECK(loads == 2);
  CHECK_THROWS_AS(tier.getOrLoad(&ctxA, "bad",
                                 []() -> std::shared_ptr<const std::string> {
                                   throw DriverError("load failed");
                                 }),
                  DriverError);
  CHECK(tier.find(&ctxA, "bad") == nullptr);
  tier.getOrLoad(&ctxA, "bad", load);
  CHECK(loads == 3);
  tier.eraseContext(&ctxA);
  CHECK(tier.find(&ctxA, "k") == nullptr);
  CHECK(tier.find(&ctxB, "k") != nullptr);
}

TEST_CASE("bundles index precompiled entries by spec and target", "[cache]") {
  TempDir tmp;
  std::string dir = tmp / "bundle";
  std::string causal = printSpec(parseSpec("attention(causal=top_left)"));
  std::string plain = printSpec(parseSpec("attention()"));
  Bundle::add(dir, CacheKey::make(causal, "sm_90a"),
              fakeArtifacts(causal, "causal 90"));
  Bundle::add(dir, CacheKey::make(causal, "sm_80"),
              fakeArtifacts(causal, "causal 80", "sm_80"));
  Bundle::add(dir, CacheKey::make(plain, "sm_90a"),
              fakeArtifacts(plain, "plain 90"));
  // Adding a kernel again replaces it.
  Bundle::add(dir, CacheKey::make(plain, "sm_90a"),
              fakeArtifacts(plain, "plain 90 again"));

  Bundle bundle = Bundle::open(dir);
  CHECK(bundle.items().size() == 3);
  std::optional<KernelArtifacts> a = bundle.find(causal, "sm_80");
  REQUIRE(a);
  CHECK(a->file(kPtxFile)->find("causal 80") != std::string::npos);
  a = bundle.find(plain, "sm_90a");
  REQUIRE(a);
  CHECK(a->file(kPtxFile)->find("plain 90 again") != std::string::npos);
  CHECK(!bundle.find(plain, "sm_80"));
  CHECK(!bundle.find(causal, "sm_90a", 32));

  SECTION("kernels asked for with other tensor-core instructions coexist") {
    CacheKey sync = CacheKey::make(plain, "sm_90a");
    sync.mma = "mma.sync";
    Bundle::add(dir, sync, fakeArtifacts(plain, "plain 90 mma.sync"));
    CacheKey dflt = CacheKey::make(plain, "sm_90a");
    dflt.mma = "default";
    Bundle::add(dir, dflt, fakeArtifacts(plain, "plain 90 default"));
    Bundle b2 = Bundle::open(dir);
    CHECK(b2.items().size() == 4); // "default" replaced the unnamed request
    std::optional<KernelArtifacts> d = b2.find(plain, "sm_90a");
    REQUIRE(d);
    CHECK(d->file(kPtxFile)->find("plain 90 default") != std::string::npos);
    std::optional<KernelArtifacts> s = b2.find(sync);
    REQUIRE(s);
    CHECK(s->file(kPtxFile)->find("plain 90 mma.sync") != std::string::npos);
  }

  SECTION("a binary linking only the runtime loads it") {
    CHECK(runProcess({FLASHJIT_BUNDLE_LOADER, dir, "attention(causal=top_left)",
                      "sm_80"}) == 0);
    CHECK(runProcess({FLASHJIT_BUNDLE_LOADER, dir,
                      "attention(head_dim_qk=64, "
                      "head_dim_v=64)",
                      "sm_80"}) == 1);
  }
  SECTION("a corrupt bundled entry is an error, never loaded") {
    std::string ptx =
        dir + "/" + CacheKey::make(causal, "sm_80").hash() + "/" + kPtxFile;
    writeAll(ptx, "tampered");
    CHECK_THROWS_WITH(bundle.find(causal, "sm_80"),
                      Catch::Contains("fails its checksum"));
  }
  SECTION("a missing or foreign index is a UserError naming the file") {
    CHECK_THROWS_WITH(Bundle::open(tmp / "nothing"),
                      Catch::Contains("bundle.json"));
    writeAll(dir + "/bundle.json", "{\"schema\": 999, \"kernels\": []}");
    CHECK_THROWS_WITH(Bundle::open(dir), Catch::Contains("schema 999"));
  }
}
