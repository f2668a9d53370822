//===- CpuBackendTest.cpp - CPU kernels vs the float64 reference ----------===//
//
// The CPU backend (attn dialect -> tiles -> loops -> LLVM -> ORC JIT) is
// compared with flashjit::referenceAttention on a sampled matrix of more than
// 2,000 cases: 14 variants x 6 (head dim, dtype, GQA ratio) configurations x
// 24 (seqlen_q, seqlen_k) pairs from {0, 1, 17, 63, 64, 65, 127, 128, 129,
// 300, 1000}, random non-zero inputs, contiguous and [B, S, H, D] strides.
//
// Tolerances (O stored in the input dtype, LSE in fp32; compute in fp32):
//   bf16: |O - ref| <= 1e-2 + 1e-2 |ref|     (bf16 has an 8-bit mantissa)
//   fp16: |O - ref| <= 2e-3 + 2e-3 |ref|
//   LSE:  |LSE - ref| <= 1e-3 + 1e-5 |ref|
// Rows with no allowed key must give O = 0 and LSE = -inf exactly; no NaN.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"

#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

using namespace flashjit;
using flashjit::test::cachedKernel;
using flashjit::test::StridedTensor;

namespace {

/// Data a case binds to its variant's buffers.
struct CaseData {
  std::vector<float> slopes, table;
  std::vector<int32_t> docId;
};

struct VariantCase {
  std::string name;
  std::function<void(AttentionSpec &)> setup;
  std::function<void(Arguments &, CaseData &, int64_t hq, int64_t sq,
                     int64_t sk)>
      bind = [](Arguments &, CaseData &, int64_t, int64_t, int64_t) {};
};

std::vector<VariantCase> variants() {
  std::vector<VariantCase> v;
  v.push_back({"none", [](AttentionSpec &) {}});
  v.push_back({"causal_top_left",
               [](AttentionSpec &s) { s.causal = Causal::TopLeft; }});
  v.push_back({"causal_bottom_right",
               [](AttentionSpec &s) { s.causal = Causal::BottomRight; }});
  v.push_back({"window_left", [](AttentionSpec &s) {
                 s.variant.mask(sliding_window(40, 0, Alignment::TopLeft));
               }});
  v.push_back({"window_left_right", [](AttentionSpec &s) {
                 s.variant.mask(sliding_window(70, 9, Alignment::TopLeft));
               }});
  v.push_back({"window_bottom_right", [](AttentionSpec &s) {
                 s.variant.mask(
                     sliding_window(100, 0, Alignment::BottomRight, false));
               }});
  v.push_back({"window_param_bottom_right",
               [](AttentionSpec &s) {
                 s.variant.mask(sliding_window(param<int32_t>("left"), 3,
                                               Alignment::BottomRight));
               },
               [](Arguments &a, CaseData &, int64_t, int64_t, int64_t) {
                 a.set("left", Scalar::i32(33));
               }});
  v.push_back(
      {"prefix_lm", [](AttentionSpec &s) { s.variant.mask(prefix_lm(37)); }});
  v.push_back({"chunked_causal", [](AttentionSpec &s) {
                 s.variant.mask(chunked(50) && causal(Alignment::TopLeft));
               }});
  v.push_back({"softcap", [](AttentionSpec &s) {
                 s.variant.scoreMod(softcap(0.75f));
                 s.scale = 1.5f;
               }});
  v.push_back({"alibi",
               [](AttentionSpec &s) {
                 s.variant.scoreMod(alibi(buffer<float>("slopes")));
                 s.causal = Causal::BottomRight;
               },
               [](Arguments &a, CaseData &d, int64_t hq, int64_t, int64_t) {
                 d.slopes.resize(hq);
                 for (int64_t h = 0; h < hq; ++h)
                   d.slopes[h] = std::exp2(-8.0f * (h + 1) / hq);
                 a.bind("slopes", d.slopes.data(), hq);
               }});
  v.push_back({"relative_bias",
               [](AttentionSpec &s) {
                 s.variant.scoreMod(relative_bias(buffer<float>("rel"), 16));
               },
               [](Arguments &a, CaseData &d, int64_t, int64_t, int64_t) {
                 d.table.resize(33);
                 for (int i = 0; i < 33; ++i)
                   d.table[i] = 0.1f * ((i * 7) % 11) - 0.5f;
                 a.bind("rel", d.table.data(), 33);
               }});
  v.push_back({"softcap_window",
               [](AttentionSpec &s) {
                 s.variant.mask(sliding_window(64, 0, Alignment::TopLeft));
                 s.variant.scoreMod(softcap(param<float>("cap")));
                 s.scale = 2.0f;
               },
               [](Arguments &a, CaseData &, int64_t, int64_t, int64_t) {
                 a.set("cap", Scalar::f32(1.25f));
               }});
  v.push_back({"document",
               [](AttentionSpec &s) {
                 Buffer doc = buffer<int32_t>("doc_id");
                 s.variant.mask(doc[q_idx] == doc[kv_idx]);
                 s.causal = Causal::TopLeft;
               },
               [](Arguments &a, CaseData &d, int64_t, int64_t sq, int64_t sk) {
                 int64_t n = std::max(sq, sk);
                 d.docId.resize(std::max<int64_t>(n, 1));
                 for (int64_t i = 0; i < n; ++i) // documents of 1..90 tokens
                   d.docId[i] = static_cast<int32_t>((i * i) / 1500 + i / 90);
                 a.bind("doc_id", d.docId.data(), n);
               }});
  return v;
}

/// Where the matrix's time goes (seconds).
struct Clock {
  double compile = 0, kernel = 0, reference = 0;
};
Clock clockTotals; // summed over worker threads
std::mutex clockMutex;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

/// Runs one case; returns an empty string on success.
std::string runCase(const VariantCase &vc, int headDim, DType dtype, int ratio,
                    int64_t batch, int64_t hkv, int64_t sq, int64_t sk,
                    bool seqMajor, std::mt19937 &rng) {
  AttentionSpec spec;
  spec.variant = Variant(vc.name);
  vc.setup(spec);
  spec.headDimQK = spec.headDimV = headDim;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = dtype;
  spec.headsKV = static_cast<int>(hkv);
  spec.headsQ = static_cast<int>(hkv * ratio);
  int64_t hq = spec.headsQ;

  StridedTensor q(dtype, {batch, hq, sq, headDim}, seqMajor);
  StridedTensor k(dtype, {batch, hkv, sk, headDim}, seqMajor);
  StridedTensor v(dtype, {batch, hkv, sk, headDim}, seqMajor);
  StridedTensor o(dtype, {batch, hq, sq, headDim}, seqMajor);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  std::vector<float> lse(std::max<int64_t>(batch * hq * sq, 1), 12345.0f);
  TensorRef lseRef =
      TensorRef::contiguous3(lse.data(), DType::F32, {batch, hq, sq});
  if (sq == 0) // see StridedTensor: zero strides of empty tensors
    for (int64_t &s : lseRef.strides)
      s = std::max<int64_t>(s, 1);
  Arguments args;
  CaseData data;
  vc.bind(args, data, hq, sq, sk);

  auto t0 = std::chrono::steady_clock::now();
  auto kernel = cachedKernel(spec);
  double compileS = since(t0);
  t0 = std::chrono::steady_clock::now();
  kernel->run(q.ref, k.ref, v.ref, o.ref, &lseRef, args);
  double kernelS = since(t0);
  t0 = std::chrono::steady_clock::now();
  ReferenceOutput ref = referenceAttention(spec, q.ref, k.ref, v.ref, args);
  {
    std::lock_guard<std::mutex> lock(clockMutex);
    clockTotals.compile += compileS;
    clockTotals.kernel += kernelS;
    clockTotals.reference += since(t0);
  }

  double atol = dtype == DType::BF16 ? 1e-2 : 2e-3;
  std::ostringstream err;
  auto where = [&] {
    return vc.name + " d=" + std::to_string(headDim) + " " +
           std::string(toString(dtype)) + " Hq=" + std::to_string(hq) +
           " Hkv=" + std::to_string(hkv) + " B=" + std::to_string(batch) +
           " Sq=" + std::to_string(sq) + " Sk=" + std::to_string(sk) +
           (seqMajor ? " [B,S,H,D]" : "") + ": ";
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        double want = ref.lseAt(b, h, i);
        float got = lse[(b * hq + h) * sq + i];
        bool empty = want == -std::numeric_limits<double>::infinity();
        if (empty ? got != -std::numeric_limits<float>::infinity()
                  : !(std::abs(got - want) <= 1e-3 + 1e-5 * std::abs(want)))
          return where() + "lse[" + std::to_string(b) + "," +
                 std::to_string(h) + "," + std::to_string(i) +
                 "] = " + std::to_string(got) + ", expected " +
                 std::to_string(want);
        for (int64_t d = 0; d < headDim; ++d) {
          float x = o.at(b, h, i, d);
          double w = ref.oAt(b, h, i, d);
          bool ok =
              empty ? x == 0.0f : std::abs(x - w) <= atol + atol * std::abs(w);
          if (!ok || std::isnan(x))
            return where() + "o[" + std::to_string(b) + "," +
                   std::to_string(h) + "," + std::to_string(i) + "," +
                   std::to_string(d) + "] = " + std::to_string(x) +
                   ", expected " + std::to_string(w);
        }
      }
  return {};
}

} // namespace

TEST_CASE("CPU backend matches the float64 reference on the variant matrix",
          "[compiler][cpu]") {
  const int64_t lens[] = {0, 1, 17, 63, 64, 65, 127, 128, 129, 300, 1000};
  const int dims[] = {32, 64, 96, 128, 256};
  const int ratios[] = {1, 2, 3, 8};
  std::mt19937 rng(20240607);
  std::vector<VariantCase> vs = variants();
  struct Case {
    size_t variant;
    int headDim, ratio;
    DType dtype;
    int64_t batch, hkv, sq, sk;
    bool seqMajor;
    uint32_t seed;
  };
  std::vector<Case> plan;
  int64_t bigCases = 0;
  for (size_t vi = 0; vi < vs.size(); ++vi) {
    for (int c = 0; c < 6; ++c) {
      int headDim = dims[(vi + c) % 5];
      DType dtype = (vi + c) % 2 ? DType::F16 : DType::BF16;
      int ratio = ratios[(vi * 3 + c) % 4];
      for (int p = 0; p < 24; ++p) {
        int64_t sq = lens[rng() % 11], sk = lens[rng() % 11];
        // Keep the float64 reference affordable: long-by-long pairs are
        // rare and always single-head-group, single-batch.
        bool big = sq * sk > 40000;
        if (big && (bigCases >= 40 || headDim > 128)) {
          sq = lens[rng() % 9];
          big = false;
        }
        bigCases += big;
        if (p == 0) // always one pair with more queries than keys
          sq = 300, sk = 65;
        int64_t batch = !big && p % 5 == 1 ? 2 : 1;
        int64_t hkv = !big && ratio <= 2 && p % 3 == 2 ? 2 : 1;
        plan.push_back({vi, headDim, ratio, dtype, batch, hkv, sq, sk,
                        p % 2 == 1, static_cast<uint32_t>(rng())});
      }
    }
  }
  // Cases run on every core (the float64 reference dominates); each has its
  // own seed, so results do not depend on the schedule.
  std::vector<std::string> results(plan.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < plan.size();) {
      const Case &c = plan[i];
      std::mt19937 caseRng(c.seed);
      results[i] = runCase(vs[c.variant], c.headDim, c.dtype, c.ratio, c.batch,
                           c.hkv, c.sq, c.sk, c.seqMajor, caseRng);
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back(worker);
  for (std::thread &t : threads)
    t.join();
  std::vector<std::string> failures;
  for (const std::string &r : results)
    if (!r.empty())
      failures.push_back(r);
  int64_t cases = static_cast<int64_t>(plan.size());
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  WARN(cases << " cases (" << bigCases
             << " with seqlen_q * seqlen_k > 40000) in " << secs
             << " s (compile " << clockTotals.compile << " s, kernels "
             << clockTotals.kernel << " s, reference " << clockTotals.reference
             << " s), " << failures.size() << " failed");
  for (size_t i = 0; i < failures.size() && i < 10; ++i)
    UNSCOPED_INFO(failures[i]);
  CHECK(cases >= 2000);
  REQUIRE(failures.empty());
}

TEST_CASE("rows with no allowed key give O = 0 and LSE = -inf exactly",
          "[compiler][cpu]") {
  // Bottom-right causal with more queries than keys: the first
  // seqlen_q - seqlen_k rows see nothing, whole rows of tiles are empty.
  for (auto [sq, sk] :
       {std::pair<int64_t, int64_t>{300, 17}, {129, 0}, {200, 64}}) {
    AttentionSpec spec;
    spec.variant = Variant("br");
    spec.causal = Causal::BottomRight;
    spec.headDimQK = spec.headDimV = 64;
    std::mt19937 rng(7);
    StridedTensor q(DType::BF16, {1, 1, sq, 64}, false);
    StridedTensor k(DType::BF16, {1, 1, sk, 64}, false);
    StridedTensor v(DType::BF16, {1, 1, sk, 64}, false);
    StridedTensor o(DType::BF16, {1, 1, sq, 64}, false);
    q.randomize(rng);
    k.randomize(rng);
    v.randomize(rng);
    o.randomize(rng); // garbage that must be overwritten
    std::vector<float> lse(sq, 1.0f);
    TensorRef lseRef =
        TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, sq});
    cachedKernel(spec)->run(q.ref, k.ref, v.ref, o.ref, &lseRef);
    for (int64_t i = 0; i < sq - sk; ++i) {
      INFO("row " << i << " of " << sq << "x" << sk);
      REQUIRE(lse[i] == -std::numeric_limits<float>::infinity());
      for (int64_t d = 0; d < 64; ++d)
        REQUIRE(o.at(0, 0, i, d) == 0.0f);
    }
    for (int64_t i = std::max<int64_t>(sq - sk, 0); i < sq; ++i)
      REQUIRE(std::isfinite(lse[i]));
  }
}

TEST_CASE("a mask that allows nothing gives zeros and -inf, no NaN",
          "[compiler][cpu]") {
  AttentionSpec spec;
  spec.variant = Variant("nothing").mask(q_idx < 0);
  spec.headDimQK = spec.headDimV = 32;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F16;
  std::mt19937 rng(3);
  StridedTensor q(DType::F16, {1, 2, 70, 32}, true);
  StridedTensor k(DType::F16, {1, 1, 90, 32}, true);
  StridedTensor v(DType::F16, {1, 1, 90, 32}, true);
  StridedTensor o(DType::F16, {1, 2, 70, 32}, true);
  spec.headsQ = 2;
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  o.randomize(rng);
  std::vector<float> lse(140, 0.0f);
  TensorRef lseRef = TensorRef::contiguous3(lse.data(), DType::F32, {1, 2, 70});
  cachedKernel(spec)->run(q.ref, k.ref, v.ref, o.ref, &lseRef);
  for (float x : lse)
    REQUIRE(x == -std::numeric_limits<float>::infinity());
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 70; ++i)
      for (int64_t d = 0; d < 32; ++d)
        REQUIRE(o.at(0, h, i, d) == 0.0f);
}
