//===- MaskedValuesTest.cpp - Masked keys never reach a row (issue 21, §3) ===//
//
// A row's result depends only on the keys it attends: a NaN or Inf in V at
// a key the row does not attend must not reach it, whether that key shares
// a partially masked tile with allowed keys or sits in a skipped one. The
// two reproductions of issue 21 §3, then random masks, tile sizes and
// shapes with non-finite V (and K) at random keys, checked against the
// float64 reference (which skips masked keys by construction); last the
// backward's rule (dQ of a row from the keys it attends, dK and dV of a key
// from the rows that attend it) against the float64 reference backward.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/ReferenceBackward.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>

using namespace flashjit;
using namespace flashjit::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// Runs \p spec on q, k, v into a fresh O and LSE.
struct Run {
  StridedTensor o;
  std::vector<float> lse;
  Run(const CpuKernel &kernel, const StridedTensor &q, const StridedTensor &k,
      const StridedTensor &v, const Arguments &args = {})
      : o(kernel.spec().dtypeO,
          {q.ref.shape[0], q.ref.shape[1], q.ref.shape[2], v.ref.shape[3]},
          false),
        lse(q.ref.shape[0] * q.ref.shape[1] * q.ref.shape[2], 1.0f) {
    TensorRef l = TensorRef::contiguous3(
        lse.data(), DType::F32,
        {q.ref.shape[0], q.ref.shape[1], q.ref.shape[2]});
    kernel.run(q.ref, k.ref, v.ref, o.ref, &l, args);
  }
  bool rowFinite(int64_t b, int64_t h, int64_t i) const {
    for (int64_t d = 0; d < o.ref.shape[3]; ++d)
      if (!std::isfinite(o.at(b, h, i, d)))
        return false;
    return true;
  }
  bool rowEquals(const Run &other, int64_t b, int64_t h, int64_t i) const {
    for (int64_t d = 0; d < o.ref.shape[3]; ++d)
      if (o.at(b, h, i, d) != other.o.at(b, h, i, d))
        return false;
    return true;
  }
};

void setRow(StridedTensor &t, int64_t b, int64_t h, int64_t i, float x) {
  for (int64_t d = 0; d < t.ref.shape[3]; ++d)
    storeFromFloat(t.bytes.data(), t.ref.dtype, t.ref.offset(b, h, i, d), x);
}

} // namespace

TEST_CASE("issue 21 §3: Inf in V at a masked key of a partial tile",
          "[compiler][cpu][masked]") {
  // attention(name=k0, mask=(kv_idx == 0), head_dim=16, dtype=bf16), N = 2,
  // V[0, 0, 1, :] = inf: both rows once came out NaN.
  AttentionSpec spec;
  spec.variant = Variant("k0").mask(kv_idx == 0);
  spec.headDimQK = spec.headDimV = 16;
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  StridedTensor q(DType::BF16, {1, 1, 2, 16}, false);
  StridedTensor k(DType::BF16, {1, 1, 2, 16}, false);
  StridedTensor v(DType::BF16, {1, 1, 2, 16}, false);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  auto kernel = cachedKernel(spec);
  Run clean(*kernel, q, k, v);
  setRow(v, 0, 0, 1, kInf);
  Run poisoned(*kernel, q, k, v);
  for (int64_t i = 0; i < 2; ++i) {
    INFO("row " << i);
    CHECK(poisoned.rowFinite(0, 0, i));
    CHECK(poisoned.rowEquals(clean, 0, 0, i));
    CHECK(poisoned.lse[i] == clean.lse[i]);
  }
}

TEST_CASE("issue 21 §3: Inf in V past the diagonal of a causal tile",
          "[compiler][cpu][masked]") {
  // Causal, N = 200, D = 64, V[150] = inf: rows 128-149 (the tile of key
  // 150) once came out NaN, rows below 128 (its tile skipped) did not.
  AttentionSpec spec;
  spec.variant = Variant("causal");
  spec.causal = Causal::TopLeft;
  spec.headDimQK = spec.headDimV = 64;
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  StridedTensor q(DType::BF16, {1, 1, 200, 64}, false);
  StridedTensor k(DType::BF16, {1, 1, 200, 64}, false);
  StridedTensor v(DType::BF16, {1, 1, 200, 64}, false);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  auto kernel = cachedKernel(spec);
  Run clean(*kernel, q, k, v);
  setRow(v, 0, 0, 150, kInf);
  Run poisoned(*kernel, q, k, v);
  for (int64_t i = 0; i < 200; ++i) {
    INFO("row " << i);
    if (i < 150) {
      CHECK(poisoned.rowFinite(0, 0, i));
      CHECK(poisoned.rowEquals(clean, 0, 0, i));
    } else {
      CHECK_FALSE(poisoned.rowFinite(0, 0, i)); // it attends key 150
    }
  }
}

TEST_CASE("issue 21 §3: non-finite V at masked keys never reaches a row, "
          "random masks and tiles",
          "[compiler][cpu][masked]") {
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  Buffer doc = buffer<int32_t>("doc");
  std::vector<std::pair<const char *, Expr>> masks = {
      {"causal", causal(Alignment::TopLeft)},
      {"causal_br", causal(Alignment::BottomRight)},
      {"window", sliding_window(13, 3, Alignment::TopLeft)},
      {"prefix", prefix_lm(9)},
      {"stride", (q_idx + kv_idx) % 3 != 1},
      {"first", kv_idx == 0},
      {"doc", doc[q_idx] == doc[kv_idx] && kv_idx <= q_idx},
  };
  std::vector<std::pair<int, int>> tiles = {{0, 0}, {32, 16}, {16, 128}};
  int cases = 0, poisonedRows = 0, cleanRows = 0;
  std::vector<std::string> failures;
  for (size_t mi = 0; mi < masks.size(); ++mi) {
    const auto &[name, mask] = masks[mi];
    for (size_t ti = 0; ti < tiles.size(); ++ti) {
      auto [bm, bn] = tiles[ti];
      { // bf16 and f32 alternate over the (mask, tiles) pairs
        DType dt = (mi + ti) % 2 ? DType::F32 : DType::BF16;
        AttentionSpec spec;
        spec.variant = Variant(name).mask(mask);
        spec.headDimQK = 32;
        spec.headDimV = dt == DType::F32 ? 24 : 16;
        spec.headsQ = 2;
        spec.headsKV = 1;
        spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = dt;
        CompileOptions opts;
        opts.blockM = bm;
        opts.blockN = bn;
        auto kernel = cachedKernel(spec, opts);
        std::uniform_int_distribution<int64_t> len(1, 150);
        int64_t sq = len(rng), sk = len(rng);
        StridedTensor q(dt, {2, 2, sq, 32}, false);
        StridedTensor k(dt, {2, 1, sk, 32}, false);
        StridedTensor v(dt, {2, 1, sk, spec.headDimV}, false);
        q.randomize(rng);
        k.randomize(rng);
        v.randomize(rng);
        // Non-finite values at ~3% of the keys, in V (3 in 4) or K: a whole
        // row or one element.
        const float bad[] = {kInf, -kInf, std::nanf("")};
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t j = 0; j < sk; ++j) {
            if (rng() % 32 != 0)
              continue;
            float x = bad[rng() % 3];
            StridedTensor &t = rng() % 4 ? v : k;
            if (rng() % 2)
              setRow(t, b, 0, j, x);
            else
              storeFromFloat(t.bytes.data(), dt,
                             t.ref.offset(b, 0, j, rng() % t.ref.shape[3]), x);
          }
        std::vector<int32_t> docIds(std::max(sq, sk));
        for (size_t i = 0, d = 0; i < docIds.size(); ++i) {
          if (rng() % 7 == 0)
            ++d;
          docIds[i] = static_cast<int32_t>(d);
        }
        Arguments args;
        if (std::string(name) == "doc")
          args.bind("doc", docIds.data(), static_cast<int64_t>(docIds.size()));
        Run got(*kernel, q, k, v, args);
        ReferenceOutput want =
            referenceAttention(spec, q.ref, k.ref, v.ref, args);
        ++cases;
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t h = 0; h < 2; ++h)
            for (int64_t i = 0; i < sq; ++i) {
              const double *wantO = &want.oAt(b, h, i, 0);
              bool wantFinite =
                  std::all_of(wantO, wantO + spec.headDimV,
                              [](double x) { return std::isfinite(x); });
              std::string where =
                  std::string(name) + " tiles " + std::to_string(bm) + "x" +
                  std::to_string(bn) + " " + std::string(toString(dt)) + " " +
                  std::to_string(sq) + "x" + std::to_string(sk) + " b" +
                  std::to_string(b) + " h" + std::to_string(h) + " row " +
                  std::to_string(i) + ": ";
              float gotLse = got.lse[(b * 2 + h) * sq + i];
              if (!wantFinite) {
                // The row attends a poisoned key: the reference and the
                // kernel both carry it (not necessarily the same pattern).
                ++poisonedRows;
                if (got.rowFinite(b, h, i))
                  failures.push_back(where + "finite, reference is not");
                continue;
              }
              ++cleanRows;
              std::string diff = compareRow(
                  want.lseAt(b, h, i), gotLse, spec.headDimV, dt, wantO,
                  [&](int64_t d) { return got.o.at(b, h, i, d); });
              if (!diff.empty())
                failures.push_back(where + diff);
            }
      }
    }
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i)
    UNSCOPED_INFO(failures[i]);
  INFO(cases << " cases, " << cleanRows << " clean rows, " << poisonedRows
             << " rows attending a poisoned key");
  CHECK(cases == 21);
  CHECK(poisonedRows > 0);
  CHECK(cleanRows > 0);
  REQUIRE(failures.empty());
}

TEST_CASE("issue 21 §3: non-finite K or V at masked pairs never reaches a "
          "gradient, random masks and tiles",
          "[compiler][cpu][masked][backward]") {
  // The backward's rule: dQ of a row depends only on the keys it attends,
  // dK and dV of a key only on the rows that attend it. Every gradient
  // element the float64 reference finds finite must be finite and match;
  // the kernel's forward (isolated itself) gives O and LSE.
  uint64_t seed = freshSeed();
  INFO("FLASHJIT_TEST_SEED=" << seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  Buffer doc = buffer<int32_t>("doc");
  std::vector<std::pair<const char *, Expr>> masks = {
      {"bcausal", causal(Alignment::TopLeft)},
      {"bcausal_br", causal(Alignment::BottomRight)},
      {"bwindow", sliding_window(13, 3, Alignment::TopLeft)},
      {"bstride", (q_idx + kv_idx) % 3 != 1},
      {"bdoc", doc[q_idx] == doc[kv_idx] && kv_idx <= q_idx},
  };
  const std::pair<int, int> tiles[] = {{32, 16}, {16, 64}};
  int cases = 0;
  int64_t finite = 0, poisoned = 0;
  std::vector<std::string> failures;
  for (size_t mi = 0; mi < masks.size(); ++mi) {
    const auto &[name, mask] = masks[mi];
    auto [bm, bn] = tiles[mi % 2];
    DType dt = mi % 2 ? DType::BF16 : DType::F32;
    AttentionSpec spec;
    spec.variant = Variant(name).mask(mask);
    spec.headDimQK = spec.headDimV = 16;
    spec.headsQ = 2;
    spec.headsKV = 1;
    spec.returnLse = true;
    spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = dt;
    CompileOptions opts;
    opts.blockM = bm;
    opts.blockN = bn;
    auto fwd = cachedKernel(spec, opts);
    auto bwd = compileCpuBackward(spec, opts);
    std::uniform_int_distribution<int64_t> len(1, 90);
    int64_t sq = len(rng), sk = len(rng);
    StridedTensor q(dt, {1, 2, sq, 16}, false), k(dt, {1, 1, sk, 16}, false),
        v(dt, {1, 1, sk, 16}, false), o(dt, {1, 2, sq, 16}, false),
        dO(dt, {1, 2, sq, 16}, false), dq(dt, {1, 2, sq, 16}, false),
        dk(dt, {1, 1, sk, 16}, false), dv(dt, {1, 1, sk, 16}, false);
    for (StridedTensor *t : {&q, &k, &v, &dO})
      t->randomize(rng);
    const float bad[] = {kInf, -kInf, std::nanf("")};
    // At least one poisoned key per case (a seed that poisoned none in
    // five cases left nothing to check: CI, 2026-12-07).
    const int64_t forced = static_cast<int64_t>(rng() % sk);
    for (int64_t j = 0; j < sk; ++j)
      if (j == forced || rng() % 25 == 0)
        setRow(rng() % 2 ? v : k, 0, 0, j, bad[rng() % 3]);
    std::vector<int32_t> docIds(std::max(sq, sk));
    for (size_t i = 0, d = 0; i < docIds.size(); ++i) {
      if (rng() % 7 == 0)
        ++d;
      docIds[i] = static_cast<int32_t>(d);
    }
    Arguments args;
    if (std::string(name) == "bdoc")
      args.bind("doc", docIds.data(), static_cast<int64_t>(docIds.size()));
    std::vector<float> lse(2 * sq);
    TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, 2, sq});
    fwd->run(q.ref, k.ref, v.ref, o.ref, &l, args);
    bwd->run(q.ref, k.ref, v.ref, o.ref, l, dO.ref, dq.ref, dk.ref, dv.ref,
             args);
    ReferenceGradients want =
        referenceAttentionBackward(spec, q.ref, k.ref, v.ref, dO.ref, args);
    ++cases;
    const double tol = dt == DType::F32 ? 1e-4 : 2.5e-2;
    auto check = [&](const char *what, const StridedTensor &got, auto refAt) {
      const auto &s = got.ref.shape;
      double scale = 0;
      for (int64_t h = 0; h < s[1]; ++h)
        for (int64_t i = 0; i < s[2]; ++i)
          for (int64_t d = 0; d < s[3]; ++d)
            if (std::isfinite(refAt(h, i, d)))
              scale = std::max(scale, std::abs(refAt(h, i, d)));
      for (int64_t h = 0; h < s[1]; ++h)
        for (int64_t i = 0; i < s[2]; ++i)
          for (int64_t d = 0; d < s[3]; ++d) {
            double r = refAt(h, i, d), g = got.at(0, h, i, d);
            if (!std::isfinite(r)) {
              ++poisoned;
              continue;
            }
            ++finite;
            if (!(std::abs(g - r) <= tol * (1 + scale))) {
              std::ostringstream os;
              os << name << " tiles " << bm << "x" << bn << " " << toString(dt)
                 << " " << sq << "x" << sk << ": " << what << "[h" << h << "]["
                 << i << "][" << d << "] = " << g << ", reference " << r;
              failures.push_back(os.str());
            }
          }
    };
    check("dq", dq, [&](int64_t h, int64_t i, int64_t d) {
      return want.dqAt(0, h, i, d);
    });
    check("dk", dk, [&](int64_t h, int64_t j, int64_t d) {
      return want.dkAt(0, h, j, d);
    });
    check("dv", dv, [&](int64_t h, int64_t j, int64_t d) {
      return want.dvAt(0, h, j, d);
    });
  }
  INFO(cases << " cases, " << finite << " finite reference gradient elements, "
             << poisoned << " non-finite, " << failures.size()
             << " mismatches");
  CHECK(cases == 5);
  CHECK(finite > 0);
  CHECK(poisoned > 0);
  for (size_t i = 0; i < failures.size() && i < 10; ++i)
    UNSCOPED_INFO(failures[i]);
  REQUIRE(failures.empty());
}
