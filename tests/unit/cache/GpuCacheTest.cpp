//===- GpuCacheTest.cpp - GPU kernels through the disk cache, no GPU ------===//
//
// The parts of the cached GPU entry point (GpuCache.h) that need no GPU: a
// cold request generates PTX and a cubin and stores them, a request from a
// fresh cache object is a hit that compiles nothing (no stage dump, same
// bytes), a corrupt cubin is regenerated, and the code-generation target
// follows the device's compute capability. Loading onto a device is
// covered by the [gpu] runs.
//
//===----------------------------------------------------------------------===//
#include "CacheTestSupport.h"

#include "flashjit/compiler/GpuCache.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/runtime/Device.h"

#include <catch2/catch.hpp>
#include <llvm/Support/FileSystem.h>

#include <cstdlib>
#include <fstream>
#include <optional>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::testing::TempDir;
namespace fs = llvm::sys::fs;

namespace {

size_t filesIn(const std::string &dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return n;
}

CacheConfig configIn(const std::string &dir) {
  CacheConfig c;
  c.dir = dir;
  return c;
}

} // namespace

TEST_CASE("a GPU disk hit compiles nothing", "[cache]") {
  TempDir dir, dump;
  const char *old = std::getenv("FLASHJIT_DUMP_DIR");
  std::optional<std::string> saved =
      old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("FLASHJIT_DUMP_DIR", dump.path().c_str(), 1);
  AttentionSpec spec = parseSpec("attention(causal=top_left, head_dim_qk=64, "
                                 "head_dim_v=64)");
  GpuCompileOptions o;
  o.arch = "sm_80";
  LoadReport cold, warm;
  KernelArtifacts a, b;
  {
    DiskCache cache(configIn(dir.path()));
    a = loadOrCompileGpuArtifacts(spec, o, &cache, &cold);
  }
  size_t dumped = filesIn(dump.path());
  {
    DiskCache cache(configIn(dir.path()));
    b = loadOrCompileGpuArtifacts(spec, o, &cache, &warm);
  }
  if (saved)
    ::setenv("FLASHJIT_DUMP_DIR", saved->c_str(), 1);
  else
    ::unsetenv("FLASHJIT_DUMP_DIR");
  CHECK(cold.outcome == CacheOutcome::Compiled);
  CHECK(warm.outcome == CacheOutcome::Hit);
  CHECK(warm.key == cold.key);
  CHECK(warm.entryDir == cold.entryDir);
  CHECK(dumped >= 3); // the compile wrote its stages
  CHECK(filesIn(dump.path()) == dumped);
  CHECK(a.files == b.files);
  REQUIRE(a.file(kPtxFile));
  CHECK(a.file(kPtxFile)->find(".entry") != std::string::npos);
  CHECK(a.entry == b.entry);
  CHECK(a.config.threads() > 0);

  // A corrupt cubin is a miss: regenerated and stored again.
  if (a.file(kCubinFile)) {
    std::string cubin = cold.entryDir + "/" + kCubinFile;
    std::ofstream(cubin, std::ios::binary | std::ios::trunc) << "garbage";
    DiskCache cache(configIn(dir.path()));
    LoadReport again;
    KernelArtifacts c = loadOrCompileGpuArtifacts(spec, o, &cache, &again);
    CHECK(again.outcome == CacheOutcome::Compiled);
    CHECK(c.file(kCubinFile)->size() > 1000);
  }
}

TEST_CASE("the GPU target follows the device", "[cache]") {
  DeviceProperties p;
  p.name = "test";
  p.ccMajor = 9;
  p.ccMinor = 0;
  CHECK(gpuTargetFor(p) == "sm_90a");
  p.ccMajor = 8;
  p.ccMinor = 6;
  CHECK(gpuTargetFor(p) == "sm_80");
  p.ccMajor = 10;
  p.ccMinor = 0;
  CHECK(gpuTargetFor(p) == "sm_80");
  p.ccMajor = 7;
  p.ccMinor = 5;
  CHECK_THROWS_WITH(gpuTargetFor(p), Catch::Contains("7.5"));
}

TEST_CASE("GPU backward kernels are refused by the cache, not keyed as a "
          "forward",
          "[cache]") {
  AttentionSpec spec = parseSpec("attention(head_dim_qk=64, head_dim_v=64)");
  GpuCompileOptions o;
  CHECK_NOTHROW(gpuCacheKey(spec, o));
  o.kind = KernelKind::Backward;
  CHECK_THROWS_AS(gpuCacheKey(spec, o), UserError);
  CHECK_THROWS_WITH(gpuCacheKey(spec, o), Catch::Contains("not cached yet"));
}
