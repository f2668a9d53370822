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

TEST_CASE("GPU backward kernels are cached under their own key", "[cache]") {
  TempDir tmp;
  DiskCache cache(configIn(tmp.path()));
  // A variant with a parameter and an f32 buffer: the backward's argument
  // list adds one gradient pointer per buffer and one for the parameters.
  AttentionSpec spec =
      parseSpec("attention(name=t_bwd, causal=top_left, head_dim=64, "
                "score=score * param<f32>(s) + buffer<f32>(bias)[kv_idx])");
  GpuCompileOptions o;
  o.arch = GENERATE("sm_80", "sm_90a");
  INFO("arch " << o.arch);
  runtime::CacheKey fwdKey = gpuCacheKey(spec, o);
  o.kind = KernelKind::Backward;
  runtime::CacheKey bwdKey = gpuCacheKey(spec, o);
  CHECK(fwdKey.hash() != bwdKey.hash());
  CHECK(bwdKey.config.kind == KernelKind::Backward);

  LoadReport r;
  KernelArtifacts a = loadOrCompileGpuArtifacts(spec, o, &cache, &r);
  CHECK(r.outcome == CacheOutcome::Compiled);
  REQUIRE(a.file(kPtxFile));
  CHECK(a.config.kind == KernelKind::Backward);
  CHECK(gpuEntryMismatch(spec, o, a).empty());
  // ptxas's report is the main kernel's (`t_bwd_bwd`): it has registers.
  if (a.file(kCubinFile))
    CHECK(a.registers > 0);
  KernelArtifacts b = loadOrCompileGpuArtifacts(spec, o, &cache, &r);
  CHECK(r.outcome == CacheOutcome::Hit);
  CHECK(*b.file(kPtxFile) == *a.file(kPtxFile));

  // The launch check reads the three entries of the backward module.
  GpuKernelInfo good = gpuKernelInfo(a);
  const std::string &ptx = *a.file(kPtxFile);
  CHECK(gpuLaunchConfigMismatch(spec, good, ptx).empty());
  GpuKernelInfo bad = good;
  bad.config.numWarps ^= 12; // 4 <-> 8
  CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
             Catch::Contains("threads per CTA"));
  bad = good;
  bad.sharedBytes += 16;
  CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
             Catch::Contains("shared memory"));
  // Read as a forward kernel, the module has no entry `t_bwd`.
  bad = good;
  bad.config.kind = KernelKind::Forward;
  CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
             Catch::Contains("defines no entry"));
  // Another variant's argument list (no parameter, no buffer).
  AttentionSpec plain =
      parseSpec("attention(name=t_bwd, causal=top_left, head_dim=64)");
  CHECK_THAT(gpuLaunchConfigMismatch(plain, good, ptx),
             Catch::Contains("parameters"));
}

TEST_CASE("GPU decode kernels are cached under their own key", "[cache]") {
  TempDir tmp;
  // A variant with a parameter and a sink: the decode kernel's argument
  // list carries the sink pointer (its last fixed argument) and the
  // parameter, its merge kernel the sink pointer.
  AttentionSpec spec =
      parseSpec("attention(name=t_dec, causal=bottom_right, head_dim=64, "
                "heads_q=6, heads_kv=2, sink=true, "
                "score=softcap(param<f32>(cap)))");
  GpuCompileOptions o;
  o.arch = GENERATE("sm_80", "sm_90a");
  INFO("arch " << o.arch);
  runtime::CacheKey fwdKey = gpuCacheKey(spec, o);
  o.kind = KernelKind::Backward;
  runtime::CacheKey bwdKey = gpuCacheKey(backwardSpec(spec), o);
  o.kind = KernelKind::Decode;
  runtime::CacheKey decKey = gpuCacheKey(spec, o);
  CHECK(decKey.hash() != fwdKey.hash());
  CHECK(decKey.hash() != bwdKey.hash());
  CHECK(decKey.config.kind == KernelKind::Decode);
  // Its own tiles change the key too.
  GpuCompileOptions tiles = o;
  tiles.blockN = 32;
  CHECK(gpuCacheKey(spec, tiles).hash() != decKey.hash());
  // So does the stage count asked for (the default is not written: 0).
  GpuCompileOptions two = o, three = o;
  two.decodeStages = 2;
  three.decodeStages = 3;
  CHECK(gpuCacheKey(spec, two).hash() != decKey.hash());
  CHECK(gpuCacheKey(spec, two).hash() != gpuCacheKey(spec, three).hash());
  CHECK(decKey.config.decodeStages == 0);

  LoadReport cold, warm;
  KernelArtifacts a, b;
  {
    DiskCache cache(configIn(tmp.path()));
    a = loadOrCompileGpuArtifacts(spec, o, &cache, &cold);
  }
  CHECK(cold.outcome == CacheOutcome::Compiled);
  CHECK(cold.key == decKey.hash());
  REQUIRE(a.file(kPtxFile));
  CHECK(a.config.kind == KernelKind::Decode);
  CHECK(a.entry == "t_dec");
  const std::string &ptx = *a.file(kPtxFile);
  CHECK(ptx.find(".entry t_dec_decode(") != std::string::npos);
  CHECK(ptx.find(".entry t_dec_decode_merge(") != std::string::npos);
  CHECK(gpuEntryMismatch(spec, o, a).empty());
  // ptxas's report is the split kernel's (`t_dec_decode`).
  if (a.file(kCubinFile))
    CHECK(a.registers > 0);
  {
    DiskCache cache(configIn(tmp.path()));
    b = loadOrCompileGpuArtifacts(spec, o, &cache, &warm);
  }
  CHECK(warm.outcome == CacheOutcome::Hit);
  CHECK(warm.entryDir == cold.entryDir);
  CHECK(b.files == a.files);
  // The resolved stage count (2 by default) is in the manifest and read
  // back with it.
  CHECK(a.config.decodeStages == 2);
  CHECK(b.config.decodeStages == 2);
  CHECK(b.config == a.config);

  // The launch check reads both entries of the decode module.
  GpuKernelInfo good = gpuKernelInfo(a);
  CHECK(gpuLaunchConfigMismatch(spec, good, ptx).empty());
  GpuKernelInfo bad = good;
  bad.config.numWarps ^= 12; // 4 <-> 8
  CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
             Catch::Contains("threads per CTA"));
  // Read as a three-stage kernel, its shared memory is not the module's.
  bad = good;
  bad.config.decodeStages = 3;
  CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
             Catch::Contains("shared memory"));
  // Without the sink the kernel's parameters differ.
  AttentionSpec noSink = spec;
  noSink.sink = false;
  CHECK_FALSE(gpuLaunchConfigMismatch(noSink, good, ptx).empty());
  // Read as a forward kernel, the module has no entry `t_dec`.
  bad = good;
  bad.config.kind = KernelKind::Forward;
  CHECK_THAT(gpuLaunchConfigMismatch(spec, bad, ptx),
             Catch::Contains("defines no entry"));

  // A corrupted PTX is a miss (the checksum), recompiled and stored again.
  {
    std::ofstream(cold.entryDir + "/" + kPtxFile,
                  std::ios::binary | std::ios::trunc)
        << "garbage";
    DiskCache cache(configIn(tmp.path()));
    LoadReport again;
    KernelArtifacts c = loadOrCompileGpuArtifacts(spec, o, &cache, &again);
    CHECK(again.outcome == CacheOutcome::Compiled);
    CHECK(*c.file(kPtxFile) == ptx);
  }
  // An entry whose configuration is not the one the request resolves to
  // (another decode kernel stored under this key) is a miss too.
  {
    GpuCompileOptions other = o;
    other.blockN = 32;
    KernelArtifacts wrong = compileGpuArtifacts(spec, other);
    CHECK_THAT(gpuEntryMismatch(spec, o, wrong),
               Catch::Contains("configuration"));
    DiskCache cache(configIn(tmp.path()));
    REQUIRE(cache.store(decKey, wrong));
    LoadReport again;
    KernelArtifacts c = loadOrCompileGpuArtifacts(spec, o, &cache, &again);
    CHECK(again.outcome == CacheOutcome::Compiled);
    CHECK(c.config == a.config);
    CHECK(*c.file(kPtxFile) == ptx);
  }
  // Options the decode kernel does not take are refused by the key.
  GpuCompileOptions varlen = o;
  varlen.varlen = true;
  CHECK_THROWS_WITH(gpuCacheKey(spec, varlen), Catch::Contains("page table"));
  GpuCompileOptions wgmma = o;
  wgmma.mma = GpuMma::Wgmma;
  CHECK_THROWS_WITH(gpuCacheKey(spec, wgmma), Catch::Contains("mma.sync"));
}
