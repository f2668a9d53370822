//===- CpuBackwardCacheTest.cpp - CPU backward kernels on disk ------------===//
//
// loadOrCompileCpuBackward through the disk cache: a miss compiles and
// stores kernel.so with both packed entries, a reload in a fresh cache
// object with an empty memory tier (as a second process) compiles nothing
// and gives the same gradients, both checked against the float64 reference
// backward; forward and backward keys of one spec differ; edited or
// mismatched entries are refused by runtime::loadCpuBackwardKernel (and a
// backward entry by loadCpuKernel); a bundle holds forward and backward
// items of one spec, each found by its own key.
//
//===----------------------------------------------------------------------===//
#include "CacheTestSupport.h"

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/Bundle.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuBackwardKernel.h"

#include <catch2/catch.hpp>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::testing::TempDir;
namespace fs = llvm::sys::fs;

namespace {

// Softcap with a sliding-window mask and GQA: the gradient of the
// parameter `cap` comes back too. Odd head dimensions and sequence lengths.
const char *kSpecText =
    "attention(name=bwd_cap, mask=q_idx >= kv_idx && q_idx - kv_idx < 40, "
    "score=param<f32>(cap) * tanh(score / param<f32>(cap)), head_dim_qk=24, "
    "head_dim_v=40, heads_q=4, heads_kv=2, dtype=f32)";

uint64_t seed() {
  if (const char *env = std::getenv("FLASHJIT_TEST_SEED"))
    return std::strtoull(env, nullptr, 0);
  return std::random_device()();
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

/// Flips one byte in the middle of \p path.
void corrupt(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  REQUIRE(buf);
  std::string bytes = (*buf)->getBuffer().str();
  REQUIRE(bytes.size() > 16);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// One dense f32 call of the spec's forward and backward on fresh random
/// inputs (batch 2, seqlen_q 37, seqlen_k 53).
struct Call {
  AttentionSpec spec;
  int64_t b = 2, sq = 37, sk = 53;
  std::vector<float> q, k, v, o, lse, dO;
  Arguments args;

  Call(const AttentionSpec &s, uint64_t seed) : spec(s) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto fill = [&](std::vector<float> &x, int64_t n) {
      x.resize(size_t(n));
      for (float &e : x)
        e = u(rng);
    };
    fill(q, b * s.headsQ * sq * s.headDimQK);
    fill(k, b * s.headsKV * sk * s.headDimQK);
    fill(v, b * s.headsKV * sk * s.headDimV);
    fill(dO, b * s.headsQ * sq * s.headDimV);
    o.assign(size_t(b * s.headsQ * sq * s.headDimV), 0.f);
    lse.assign(size_t(b * s.headsQ * sq), 0.f);
    args.set("cap", Scalar::f32(2.0 + u(rng)));
  }
  TensorRef ref4(std::vector<float> &x, int64_t h, int64_t s, int64_t d) {
    return TensorRef::contiguous(x.data(), DType::F32, {b, h, s, d});
  }
  TensorRef qRef() { return ref4(q, spec.headsQ, sq, spec.headDimQK); }
  TensorRef kRef() { return ref4(k, spec.headsKV, sk, spec.headDimQK); }
  TensorRef vRef() { return ref4(v, spec.headsKV, sk, spec.headDimV); }
  TensorRef oRef() { return ref4(o, spec.headsQ, sq, spec.headDimV); }
  TensorRef dORef() { return ref4(dO, spec.headsQ, sq, spec.headDimV); }
  TensorRef lseRef() {
    return TensorRef::contiguous3(lse.data(), DType::F32, {b, spec.headsQ, sq});
  }
};

/// The gradients of one backward run: dQ, dK, dV and dcap.
struct Grads {
  std::vector<float> dq, dk, dv;
  float dcap = 0;
};

/// Runs the forward (compiled in memory once per spec, with LSE) then
/// \p bwd on \p c.
Grads runBackward(Call &c, const CpuBackwardKernel &bwd) {
  static std::map<std::string, std::shared_ptr<const CpuKernel>> forwards;
  std::shared_ptr<const CpuKernel> &fwd = forwards[printSpec(c.spec)];
  if (!fwd)
    fwd = compileCpu(backwardSpec(c.spec));
  TensorRef lse = c.lseRef();
  fwd->run(c.qRef(), c.kRef(), c.vRef(), c.oRef(), &lse, c.args);
  Grads g;
  g.dq.assign(c.q.size(), NAN);
  g.dk.assign(c.k.size(), NAN);
  g.dv.assign(c.v.size(), NAN);
  DataGradients d =
      bwd.run(c.qRef(), c.kRef(), c.vRef(), c.oRef(), lse, c.dORef(),
              c.ref4(g.dq, c.spec.headsQ, c.sq, c.spec.headDimQK),
              c.ref4(g.dk, c.spec.headsKV, c.sk, c.spec.headDimQK),
              c.ref4(g.dv, c.spec.headsKV, c.sk, c.spec.headDimV), c.args);
  REQUIRE(d.dParams.count("cap"));
  g.dcap = d.dParams.at("cap");
  return g;
}

/// "" when \p g matches the float64 reference backward of \p c within
/// fp32 tolerance (relative to the largest reference value), else the
/// first mismatch.
std::string checkAgainstReference(Call &c, const Grads &g) {
  ReferenceGradients r = referenceAttentionBackward(
      c.spec, c.qRef(), c.kRef(), c.vRef(), c.dORef(), c.args, {"cap"});
  auto cmp = [](const char *what, const std::vector<float> &got,
                const std::vector<double> &want) -> std::string {
    if (got.size() != want.size())
      return std::string(what) + ": size differs";
    double scale = 0;
    for (double w : want)
      scale = std::max(scale, std::abs(w));
    double tol = 1e-4 * (1 + scale);
    for (size_t i = 0; i < got.size(); ++i)
      if (!std::isfinite(got[i]) || std::abs(got[i] - want[i]) > tol) {
        std::ostringstream os;
        os << what << "[" << i << "] = " << got[i] << ", expected " << want[i]
           << " (tolerance " << tol << ")";
        return os.str();
      }
    return {};
  };
  std::string e = cmp("dq", g.dq, r.dq);
  if (e.empty())
    e = cmp("dk", g.dk, r.dk);
  if (e.empty())
    e = cmp("dv", g.dv, r.dv);
  if (e.empty())
    e = cmp("dcap", {g.dcap}, {r.dParams.at("cap")});
  return e;
}

/// Checks \p bwd against the reference on fresh inputs; returns the
/// gradients (for bitwise comparisons between loads of one object).
Grads checkBackward(const CpuBackwardKernel &bwd, uint64_t s) {
  Call c(bwd.spec(), s);
  Grads g = runBackward(c, bwd);
  std::string e = checkAgainstReference(c, g);
  INFO("seed " << s << ": " << e);
  CHECK(e.empty());
  return g;
}

} // namespace

TEST_CASE("a CPU backward disk hit loads both entries and matches the "
          "reference",
          "[cache][backward]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir dir;
  AttentionSpec spec = parseSpec(kSpecText);
  clearCpuMemoryTier();

  LoadReport cold;
  std::shared_ptr<const CpuBackward> compiled;
  {
    DiskCache cache(configIn(dir.path()));
    compiled = loadOrCompileCpuBackward(spec, {}, &cache, &cold);
  }
  CHECK(cold.outcome == CacheOutcome::Compiled);
  REQUIRE(!cold.entryDir.empty());
  for (const char *f : {kObjectFile, kSharedObjectFile, kMetaFile})
    CHECK(fs::exists(cold.entryDir + "/" + f));
  CHECK(compiled->config().kind == KernelKind::Backward);
  CHECK(compiled->stageText(Stage::Tiled).find("_dq") != std::string::npos);
  uint64_t s = seed();
  Grads first = checkBackward(*compiled, s);

  // A fresh cache object and an empty memory tier: as a second process.
  clearCpuMemoryTier();
  LoadReport warm;
  std::shared_ptr<const CpuBackward> loaded;
  {
    DiskCache cache(configIn(dir.path()));
    loaded = loadOrCompileCpuBackward(spec, {}, &cache, &warm);
  }
  CHECK(warm.outcome == CacheOutcome::Hit);
  CHECK(!warm.memoryHit);
  CHECK(warm.key == cold.key);
  CHECK(loaded.get() != compiled.get());
  CHECK(loaded->stageText(Stage::Attn) == compiled->stageText(Stage::Attn));
  REQUIRE(!loaded->timings().empty());
  CHECK(loaded->timings().back().name == "total");
  Grads again = checkBackward(*loaded, s);
  // The same object code on the same inputs: the same bits.
  CHECK(again.dq == first.dq);
  CHECK(again.dk == first.dk);
  CHECK(again.dv == first.dv);
  CHECK(again.dcap == first.dcap);
  checkBackward(*loaded, seed() + 1); // and right on other inputs

  // The memory tier answers the same cache directory with the same object.
  DiskCache cache(configIn(dir.path()));
  LoadReport memory;
  CHECK(loadOrCompileCpuBackward(spec, {}, &cache, &memory) == loaded);
  CHECK(memory.memoryHit);

  // The forward of the same spec (which the backward's spec is: LSE on)
  // has its own entry beside the backward's.
  LoadReport fwd;
  loadOrCompileCpu(backwardSpec(spec), {}, &cache, &fwd);
  CHECK(fwd.outcome == CacheOutcome::Compiled);
  CHECK(fwd.key != cold.key);
  CHECK(filesIn(dir.path()) == 4); // two entries and their lock files
  CHECK(fs::is_directory(dir.path() + "/" + fwd.key));
  CHECK(fs::is_directory(dir.path() + "/" + cold.key));
}

TEST_CASE("forward and backward keys of one spec never collide",
          "[cache][backward]") {
  AttentionSpec spec = parseSpec(kSpecText);
  for (bool lse : {false, true}) {
    AttentionSpec s = spec;
    s.returnLse = lse;
    CompileOptions o;
    o.blockM = 16;
    o.blockN = 32;
    CacheKey fwd = cpuCacheKey(backwardSpec(s), o);
    CacheKey bwd = cpuBackwardCacheKey(s, o);
    CHECK(fwd.hash() != bwd.hash());
    CHECK(bwd.config.kind == KernelKind::Backward);
    CHECK(fwd.config.kind == KernelKind::Forward);
    // Only the kind differs: the key tells them apart by kind alone.
    CacheKey relabelled = bwd;
    relabelled.config.kind = KernelKind::Forward;
    CHECK(relabelled.hash() == fwd.hash());
  }
  // returnLse does not split backward keys (the backward always reads LSE).
  AttentionSpec noLse = spec;
  noLse.returnLse = false;
  AttentionSpec withLse = spec;
  withLse.returnLse = true;
  CHECK(cpuBackwardCacheKey(noLse).hash() ==
        cpuBackwardCacheKey(withLse).hash());
  // Backward-only errors come from the key, before any tier.
  CompileOptions counting;
  counting.countTiles = true;
  CHECK_THROWS_AS(cpuBackwardCacheKey(spec, counting), UserError);
}

TEST_CASE("edited or mismatched CPU backward entries are refused",
          "[cache][backward]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  AttentionSpec spec = parseSpec(kSpecText);
  KernelArtifacts bwd = compileCpuBackwardArtifacts(spec);
  KernelArtifacts fwd = compileCpuArtifacts(backwardSpec(spec));
  REQUIRE(bwd.config.kind == KernelKind::Backward);
  CHECK(loadCpuBackwardKernel(bwd)->config() == bwd.config);

  // Each loader refuses the other kind.
  CHECK_THROWS_WITH(loadCpuKernel(bwd),
                    Catch::Contains("a backward kernel, not a forward"));
  CHECK_THROWS_WITH(loadCpuBackwardKernel(fwd),
                    Catch::Contains("a forward kernel, not a backward"));

  // A manifest relabelled as the other kind: the object's own
  // configuration export says otherwise.
  KernelArtifacts relabelled = bwd;
  relabelled.config.kind = KernelKind::Forward;
  CHECK_THROWS_WITH(loadCpuKernel(relabelled),
                    Catch::Contains("declares another than"));
  // Another tile configuration than the object's.
  KernelArtifacts tiles = bwd;
  tiles.config.cpuBlockM *= 2;
  CHECK_THROWS_WITH(loadCpuBackwardKernel(tiles),
                    Catch::Contains("declares another than"));
  // The forward's object under a backward manifest naming the forward's
  // entry: it has no dQ entry.
  KernelArtifacts swapped = bwd;
  swapped.entry = fwd.entry;
  swapped.files[kSharedObjectFile] = *fwd.file(kSharedObjectFile);
  CHECK_THROWS_WITH(loadCpuBackwardKernel(swapped),
                    Catch::Contains(fwd.entry + "_dq_packed"));
  // ... and under the backward's entry name: no entry at all.
  swapped.entry = bwd.entry;
  CHECK_THROWS_WITH(loadCpuBackwardKernel(swapped),
                    Catch::Contains("lacks the entry"));
  // Another entry name.
  KernelArtifacts renamed = bwd;
  renamed.entry += "_x";
  CHECK_THROWS_WITH(loadCpuBackwardKernel(renamed),
                    Catch::Contains("lacks the entry"));
  // A spec that does not read LSE is not a backward spec.
  KernelArtifacts noLse = bwd;
  AttentionSpec plain = spec;
  plain.returnLse = false;
  noLse.specText = printSpec(plain);
  CHECK_THROWS_WITH(loadCpuBackwardKernel(noLse),
                    Catch::Contains("does not return LSE"));
  // Not a CPU kernel; no kernel.so.
  KernelArtifacts gpu = bwd;
  gpu.config.arch = "sm_80";
  CHECK_THROWS_AS(loadCpuBackwardKernel(gpu), UserError);
  KernelArtifacts noSo = bwd;
  noSo.files.erase(kSharedObjectFile);
  CHECK_THROWS_WITH(loadCpuBackwardKernel(noSo),
                    Catch::Contains(kSharedObjectFile));

  // A corrupted kernel.so on disk fails its checksum: recompiled, right.
  TempDir dir;
  clearCpuMemoryTier();
  LoadReport first;
  {
    DiskCache cache(configIn(dir.path()));
    loadOrCompileCpuBackward(spec, {}, &cache, &first);
  }
  REQUIRE(first.outcome == CacheOutcome::Compiled);
  corrupt(first.entryDir + "/" + kSharedObjectFile);
  clearCpuMemoryTier();
  DiskCache cache(configIn(dir.path()));
  LoadReport again;
  std::shared_ptr<const CpuBackward> k =
      loadOrCompileCpuBackward(spec, {}, &cache, &again);
  CHECK(again.outcome == CacheOutcome::Compiled);
  CHECK(again.key == first.key);
  CHECK(readEntry(again.entryDir, again.key).has_value());
  checkBackward(*k, seed());
}

TEST_CASE("a CPU bundle holds the forward and the backward of a spec",
          "[cache][backward]") {
  if (!cpuLinkerAvailable()) {
    WARN("no C compiler driver to link CPU kernels; skipped");
    return;
  }
  TempDir dir;
  AttentionSpec spec = parseSpec(kSpecText);
  CompileOptions o;
  o.blockM = 16;
  CacheKey bwdKey = cpuBackwardCacheKey(spec, o);
  Bundle::add(dir.path(), bwdKey, compileCpuBackwardArtifacts(spec, o));
  {
    // The forward's key finds nothing in a bundle of the backward only.
    Bundle b = Bundle::open(dir.path());
    REQUIRE(b.items().size() == 1);
    CHECK(b.items()[0].config.kind == KernelKind::Backward);
    CHECK(!b.find(cpuCacheKey(backwardSpec(spec), o)));
  }
  CacheKey fwdKey = cpuCacheKey(backwardSpec(spec), o);
  Bundle::add(dir.path(), fwdKey, compileCpuArtifacts(backwardSpec(spec), o));
  Bundle b = Bundle::open(dir.path());
  REQUIRE(b.items().size() == 2);
  std::optional<KernelArtifacts> a = b.find(bwdKey);
  REQUIRE(a);
  CHECK(a->config.kind == KernelKind::Backward);
  std::shared_ptr<const CpuBackwardKernel> k = loadCpuBackwardKernel(*a);
  CHECK(k->config().cpuBlockM == 16);
  checkBackward(*k, seed());
  std::optional<KernelArtifacts> f = b.find(fwdKey);
  REQUIRE(f);
  CHECK(f->config.kind == KernelKind::Forward);
  CHECK_NOTHROW(loadCpuKernel(*f));
  // Another tile configuration is another request.
  CacheKey other = bwdKey;
  other.config.cpuBlockM = 32;
  CHECK(!b.find(other));
}
