//===- ConcurrencyTest.cpp - Many threads through loadOrCompileCpu --------===//
//
// Issue 21, §4: a serving host calls flashjit from many threads at once.
// 16 threads request, load and run the same and different specs through
// the compile-or-load API (loadOrCompileCpu) on a private cache directory,
// and every result is checked against the float64 reference:
// - phase 1, cold cache: exactly one compile per key (LoadReport), every
//   thread gets the one kernel object of its key (no torn memory-tier
//   entry), half the threads share a DiskCache object and half make their
//   own on the same directory (the disk cache's file locks between them);
// - phase 2, memory tier cleared, and cleared again and again by a 17th
//   thread while the others load: no compile at all (disk or memory hits).
// The test finishing is the check that nothing deadlocks (CTest timeout).
// Built on its own (flashjit_concurrency_tests) so the `tsan` preset runs
// it under ThreadSanitizer without building every test.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"
#include "flashjit/runtime/Cache.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace flashjit;
using namespace flashjit::test;

namespace {

/// A fresh private directory, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "flashjit-conc-XXXXXX")
            .string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// The specs the threads share: different masks, dtypes and head dims.
std::vector<AttentionSpec> specs() {
  Buffer doc = buffer<int32_t>("doc");
  std::vector<AttentionSpec> out(4);
  out[0].variant = Variant("conc_causal");
  out[0].causal = Causal::TopLeft;
  out[0].headDimQK = out[0].headDimV = 32;
  out[1].variant =
      Variant("conc_window").mask(sliding_window(7, 2, Alignment::TopLeft));
  out[1].headDimQK = out[1].headDimV = 16;
  out[1].dtypeQ = out[1].dtypeK = out[1].dtypeV = out[1].dtypeO = DType::F32;
  out[2].variant = Variant("conc_softcap").scoreMod(softcap(20.0f));
  out[2].headDimQK = 64;
  out[2].headDimV = 32;
  out[2].headsQ = 2;
  out[2].dtypeQ = out[2].dtypeK = out[2].dtypeV = out[2].dtypeO = DType::F16;
  out[3].variant =
      Variant("conc_doc").mask(doc[q_idx] == doc[kv_idx] && kv_idx <= q_idx);
  out[3].headDimQK = out[3].headDimV = 32;
  return out;
}

/// Runs \p kernel on fresh random inputs of \p spec and compares every row
/// with the float64 reference; "" or the first mismatch.
std::string runAndCheck(const CpuKernel &kernel, const AttentionSpec &spec,
                        uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t sq = 1 + rng() % 70, sk = 1 + rng() % 70;
  int64_t hq = spec.headsQ, hk = spec.headsKV;
  StridedTensor q(spec.dtypeQ, {1, hq, sq, spec.headDimQK}, false);
  StridedTensor k(spec.dtypeK, {1, hk, sk, spec.headDimQK}, false);
  StridedTensor v(spec.dtypeV, {1, hk, sk, spec.headDimV}, false);
  StridedTensor o(spec.dtypeO, {1, hq, sq, spec.headDimV}, false);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  std::vector<float> lse(hq * sq);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, hq, sq});
  std::vector<int32_t> doc(std::max(sq, sk));
  for (size_t i = 0; i < doc.size(); ++i)
    doc[i] = static_cast<int32_t>(i / 9);
  Arguments args;
  if (!spec.variant.buffers().empty())
    args.bind("doc", doc.data(), static_cast<int64_t>(doc.size()));
  kernel.run(q.ref, k.ref, v.ref, o.ref, &l, args, /*numThreads=*/1);
  ReferenceOutput want = referenceAttention(spec, q.ref, k.ref, v.ref, args);
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      std::string d = compareRow(
          want.lseAt(0, h, i), lse[h * sq + i], spec.headDimV, spec.dtypeO,
          &want.oAt(0, h, i, 0), [&](int64_t x) { return o.at(0, h, i, x); });
      if (!d.empty())
        return spec.variant.name() + " row " + std::to_string(i) + ": " + d;
    }
  return {};
}

/// What the threads saw, per spec index.
struct Tally {
  std::mutex mu;
  std::map<int, std::set<const CpuKernel *>> kernels;
  std::map<int, int> compiled, diskHits, memoryHits, other;
  std::vector<std::string> failures;
};

void request(int s, const AttentionSpec &spec, runtime::DiskCache &cache,
             uint32_t seed, Tally &tally) {
  LoadReport report;
  std::shared_ptr<const CpuKernel> kernel;
  std::string failure;
  try {
    kernel = loadOrCompileCpu(spec, {}, &cache, &report);
    failure = runAndCheck(*kernel, spec, seed);
  } catch (const std::exception &e) {
    failure = spec.variant.name() + ": " + e.what();
  }
  std::lock_guard<std::mutex> lock(tally.mu);
  if (!failure.empty()) {
    tally.failures.push_back(failure);
    return;
  }
  tally.kernels[s].insert(kernel.get());
  if (report.outcome == runtime::CacheOutcome::Compiled)
    ++tally.compiled[s];
  else if (report.outcome == runtime::CacheOutcome::Hit && report.memoryHit)
    ++tally.memoryHits[s];
  else if (report.outcome == runtime::CacheOutcome::Hit)
    ++tally.diskHits[s];
  else
    ++tally.other[s];
}

} // namespace

TEST_CASE("16 threads compile, load and run specs through loadOrCompileCpu",
          "[compiler][cpu][concurrency]") {
  std::string why;
  if (!cpuLinkerAvailable(&why)) {
    WARN("no C compiler driver, kernels are not cached: " << why);
    return;
  }
  constexpr int kThreads = 16, kRounds = 3;
  const std::vector<AttentionSpec> all = specs();
  const int n = static_cast<int>(all.size());
  uint32_t seed = static_cast<uint32_t>(freshSeed());
  INFO("FLASHJIT_TEST_SEED=" << seed);
  TempDir tmp;
  runtime::CacheConfig config;
  config.dir = tmp.path + "/cache";
  runtime::DiskCache shared(config);
  REQUIRE(shared.usable());
  clearCpuMemoryTier();

  // Phase 1: a cold cache. Thread t asks for spec (t + r) % n in round r, so
  // every spec is first requested by 4 threads at once.
  Tally cold;
  {
    std::vector<std::thread> threads;
    std::atomic<int> ready = 0;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        std::unique_ptr<runtime::DiskCache> own;
        if (t % 2)
          own = std::make_unique<runtime::DiskCache>(config);
        runtime::DiskCache &cache = own ? *own : shared;
        ++ready;
        while (ready < kThreads) // start together
          std::this_thread::yield();
        for (int r = 0; r < kRounds; ++r)
          request((t + r) % n, all[(t + r) % n], cache, seed + 1000 * t + r,
                  cold);
      });
    for (std::thread &t : threads)
      t.join();
  }
  for (size_t i = 0; i < cold.failures.size() && i < 10; ++i)
    UNSCOPED_INFO(cold.failures[i]);
  REQUIRE(cold.failures.empty());
  for (int s = 0; s < n; ++s) {
    INFO("spec " << all[s].variant.name());
    CHECK(cold.compiled[s] == 1);
    CHECK(cold.diskHits[s] == 0); // the memory tier served every other one
    CHECK(cold.memoryHits[s] == kThreads * kRounds / n - 1);
    CHECK(cold.other[s] == 0);
    CHECK(cold.kernels[s].size() == 1);
  }
  CHECK(shared.list().size() == static_cast<size_t>(n));

  // Phase 2: the memory tier cleared, and cleared again while the threads
  // load: every request is a hit, from disk or memory; nothing compiles.
  clearCpuMemoryTier();
  Tally warm;
  {
    std::atomic<bool> done = false;
    std::thread clearer([&] {
      while (!done) {
        clearCpuMemoryTier();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        std::unique_ptr<runtime::DiskCache> own;
        if (t % 2)
          own = std::make_unique<runtime::DiskCache>(config);
        runtime::DiskCache &cache = own ? *own : shared;
        for (int r = 0; r < kRounds; ++r)
          request((t + r) % n, all[(t + r) % n], cache,
                  seed + 7777 + 1000 * t + r, warm);
      });
    for (std::thread &t : threads)
      t.join();
    done = true;
    clearer.join();
  }
  for (size_t i = 0; i < warm.failures.size() && i < 10; ++i)
    UNSCOPED_INFO(warm.failures[i]);
  REQUIRE(warm.failures.empty());
  for (int s = 0; s < n; ++s) {
    INFO("spec " << all[s].variant.name());
    CHECK(warm.compiled[s] == 0);
    CHECK(warm.other[s] == 0);
    CHECK(warm.diskHits[s] >= 1);
    CHECK(warm.diskHits[s] + warm.memoryHits[s] == kThreads * kRounds / n);
  }
  CHECK(shared.list().size() == static_cast<size_t>(n));
}
