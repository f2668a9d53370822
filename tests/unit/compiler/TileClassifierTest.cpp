//===- TileClassifierTest.cpp - Generated tile classes vs the host spec ---===//
//
// The interval arithmetic the compiler emits into kernels must classify
// every tile exactly as flashjit::classifyTile does: checked on the
// JIT-compiled classifier over many shapes and tile sizes (and, for the
// standard index-only masks, against brute force), and on instrumented
// kernels that count the classes they actually see. The block-mask
// builder's classifier (the buffer-range rule: it reads the buffers) is
// compared with classifyTile under TileClassOptions::bufferRanges over
// random documents, 1-token documents, one document covering everything,
// unsorted and extreme values, indices that leave the buffer and index
// intervals at and over kBufferRangeScanLimit.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"

#include "flashjit/frontend/Library.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <random>

using namespace flashjit;
using flashjit::test::cachedKernel;
using flashjit::test::StridedTensor;

namespace {

struct MaskCase {
  const char *name;
  Expr mask;
  bool exact; ///< countTiles == bruteForceTileCounts is expected
  Arguments args;
};

std::vector<MaskCase> masks() {
  Arguments win;
  win.set("w", Scalar::i32(20));
  Arguments big;
  big.set("n", Scalar::i64(3000000000LL));
  Buffer doc = buffer<int32_t>("doc");
  return {
      {"causal_tl", causal(Alignment::TopLeft), true, {}},
      {"causal_br", causal(Alignment::BottomRight), true, {}},
      {"window", sliding_window(30, 0, Alignment::TopLeft), true, {}},
      {"window_lr", sliding_window(11, 7, Alignment::BottomRight), true, {}},
      {"window_excl",
       sliding_window(9, 2, Alignment::TopLeft, false),
       false,
       {}},
      {"window_param",
       sliding_window(param<int32_t>("w"), 0, Alignment::BottomRight), true,
       win},
      {"prefix", prefix_lm(13, Alignment::BottomRight), true, {}},
      {"chunked", chunked(24), true, {}},
      {"chunked_causal", chunked(16) && causal(Alignment::TopLeft), true, {}},
      {"doc_causal",
       doc[q_idx] == doc[kv_idx] && causal(Alignment::TopLeft),
       false,
       {}},
      {"arith", abs(q_idx - 2 * kv_idx) < 30 || q_idx % 7 == 3, false, {}},
      {"division",
       (q_idx - kv_idx) / (kv_idx - 5) > 2 ||
           max(q_idx, seqlen_k - kv_idx) / 4 == 3,
       false,
       {}},
      {"select",
       select(q_idx > 50, kv_idx < 10, kv_idx >= q_idx - 3),
       false,
       {}},
      {"wide",
       cast<int64_t>(q_idx) * 3000000000LL + kv_idx >
           param<int64_t>("n") - min(kv_idx, 5),
       false, big},
      {"neg_not", !(-q_idx > -kv_idx) && head == 0, false, {}},
  };
}

} // namespace

TEST_CASE("the generated classifier agrees with classifyTile",
          "[compiler][tiles]") {
  const int64_t lens[] = {0, 1, 5, 17, 64, 100};
  const int64_t blocks[] = {1, 3, 16, 64};
  for (const MaskCase &m : masks()) {
    AttentionSpec spec;
    spec.variant = Variant(m.name).mask(m.mask);
    auto cls = compileTileClassifier(spec);
    for (int64_t sq : lens)
      for (int64_t sk : lens)
        for (int64_t bm : blocks)
          for (int64_t bn : blocks) {
            if ((sq / bm) * (sk / bn) > 2000)
              continue; // keep the host's interpreter quick
            INFO(m.name << " " << sq << "x" << sk << " tiles " << bm << "x"
                        << bn);
            TileCounts want = countTiles(m.mask, sq, sk, bm, bn, m.args);
            REQUIRE(cls->count(sq, sk, bm, bn, m.args) == want);
            if (m.exact && bm * bn <= 256)
              REQUIRE(bruteForceTileCounts(m.mask, sq, sk, bm, bn, m.args) ==
                      want);
          }
    // Other heads and batches: the box's batch/head values reach the mask.
    for (int64_t h = 0; h < 3; ++h) {
      TileBox box{{h, h}, {h, h}, {10, 40}, {5, 9}, 100, 64};
      REQUIRE(cls->classify(box, m.args) == classifyTile(m.mask, box, m.args));
    }
  }
}

TEST_CASE("instrumented kernels see the tile classes countTiles predicts",
          "[compiler][tiles]") {
  struct Shape {
    int64_t sq, sk;
  };
  for (Expr mask : {causal(Alignment::TopLeft), causal(Alignment::BottomRight),
                    sliding_window(100, 0, Alignment::TopLeft),
                    chunked(64) && causal(Alignment::TopLeft)})
    for (int bm : {16, 64})
      for (Shape s : {Shape{300, 300}, Shape{129, 1000}, Shape{1000, 65}}) {
        AttentionSpec spec;
        spec.variant = Variant("counted").mask(mask);
        spec.headDimQK = spec.headDimV = 32;
        CompileOptions opts;
        opts.countTiles = true;
        opts.blockM = bm;
        opts.blockN = 32;
        auto k = cachedKernel(spec, opts);
        StridedTensor q(DType::BF16, {1, 1, s.sq, 32}, false);
        StridedTensor kk(DType::BF16, {1, 1, s.sk, 32}, false);
        StridedTensor v(DType::BF16, {1, 1, s.sk, 32}, false);
        StridedTensor o(DType::BF16, {1, 1, s.sq, 32}, false);
        std::vector<float> lse(s.sq);
        TensorRef l =
            TensorRef::contiguous3(lse.data(), DType::F32, {1, 1, s.sq});
        RunStats st = k->run(q.ref, kk.ref, v.ref, o.ref, &l);
        REQUIRE(st.tilesCounted);
        REQUIRE(st.tiles ==
                countTiles(spec.effectiveMask(), s.sq, s.sk, bm, 32));
      }
}

TEST_CASE("tile classes at N = 4096 with the default 64 x 64 tiles",
          "[compiler][tiles][report]") {
  for (auto [name, mask] :
       {std::pair<const char *, Expr>{"causal", causal(Alignment::TopLeft)},
        {"sliding_window_1024", sliding_window(1024, 0, Alignment::TopLeft)}}) {
    AttentionSpec spec;
    spec.variant = Variant("counted").mask(mask);
    spec.headDimQK = spec.headDimV = 32;
    auto cls = compileTileClassifier(spec);
    TileCounts c = cls->count(4096, 4096, 64, 64);
    REQUIRE(c == countTiles(mask, 4096, 4096, 64, 64));
    WARN(name << " N=4096, 64x64 tiles: full " << c.full << ", partial "
              << c.partial << ", empty " << c.empty);
  }
}

namespace {

/// Buffer contents for the buffer-range cases (\p kind 0-4): consecutive
/// document ids of random lengths (1-token ones frequent), 1-token documents
/// only, one document covering everything, random unsorted values, and
/// values near the limits of the type.
template <typename T>
std::vector<T> bufferContents(std::mt19937 &rng, int64_t n, int kind) {
  std::vector<T> v(static_cast<size_t>(std::max<int64_t>(n, 1)));
  T id = static_cast<T>(static_cast<int>(rng() % 11) - 5);
  for (size_t t = 0; t < v.size();) {
    size_t len = kind == 1 ? 1 : kind == 2 ? v.size() : 1 + rng() % 20;
    if (kind == 0 && rng() % 3 == 0)
      len = 1;
    for (size_t e = std::min(v.size(), t + len); t < e; ++t)
      v[t] = id;
    ++id;
  }
  if (kind == 3)
    for (T &x : v)
      x = static_cast<T>(static_cast<int64_t>(rng() % 2001) - 1000);
  if (kind == 4)
    for (T &x : v)
      x = rng() % 2 ? std::numeric_limits<T>::max() - static_cast<T>(rng() % 3)
                    : std::numeric_limits<T>::min() + static_cast<T>(rng() % 3);
  return v;
}

} // namespace

TEST_CASE("the block-mask classifier agrees with classifyTile under the "
          "buffer-range rule",
          "[compiler][tiles][blockmask]") {
  uint64_t seed = test::freshSeed();
  INFO("seed " << seed << " (replay with FLASHJIT_TEST_SEED=" << seed << ")");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const TileClassOptions ranges{.bufferRanges = true};
  Buffer d = buffer<int32_t>("doc");
  Buffer w = buffer<int64_t>("w");
  struct BufferMask {
    const char *name;
    Expr mask;
  };
  const std::vector<BufferMask> masks = {
      {"doc", d[q_idx] == d[kv_idx]},
      {"doc_causal", d[q_idx] == d[kv_idx] && causal(Alignment::BottomRight)},
      {"doc_ne_or", d[q_idx] != d[kv_idx] || kv_idx < 3},
      // Reads past the end (q_idx + 5) and before the start (kv_idx - 2).
      {"shifted", d[q_idx + 5] == d[kv_idx - 2]},
      {"nested", d[abs(d[q_idx]) % 7] <= d[kv_idx]},
      {"two_d", d[q_idx * seqlen_k + kv_idx] > 0},
      {"wide", w[kv_idx] - w[q_idx] >= 0 || w[q_idx] == 7},
      {"select",
       select(q_idx < 20, d[kv_idx], d[q_idx] + 1) > cast<int32_t>(w[q_idx])},
  };
  const int64_t lens[] = {1, 5, 17, 64, 100};
  const int64_t blocks[] = {1, 3, 16, 64};
  for (const BufferMask &m : masks) {
    AttentionSpec spec;
    spec.variant = Variant(std::string("bufrange_") + m.name).mask(m.mask);
    auto cls = compileTileClassifier(spec, ranges);
    auto plain = compileTileClassifier(spec);
    for (int kind = 0; kind < 5; ++kind) {
      int64_t sq = lens[rng() % 5], sk = lens[rng() % 5];
      // Buffers shorter than the sequence (reads leave them), long enough,
      // or long enough for 2-D indices.
      int64_t n = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % sq)
                  : m.name == std::string("two_d") ? sq * sk
                                                   : std::max(sq, sk);
      std::vector<int32_t> doc = bufferContents<int32_t>(rng, n, kind);
      std::vector<int64_t> wide = bufferContents<int64_t>(rng, n, kind);
      Arguments args;
      args.bind("doc", doc.data(), n).bind("w", wide.data(), n);
      for (int64_t bm : blocks)
        for (int64_t bn : blocks) {
          INFO(m.name << " kind " << kind << " buffer " << n << " " << sq << "x"
                      << sk << " tiles " << bm << "x" << bn);
          TileCounts want = countTiles(m.mask, sq, sk, bm, bn, args, ranges);
          REQUIRE(cls->count(sq, sk, bm, bn, args) == want);
          // The attention kernels' classifier never reads the buffers.
          REQUIRE(plain->count(sq, sk, bm, bn, args) ==
                  countTiles(m.mask, sq, sk, bm, bn, args));
        }
    }
  }
  // Index intervals at and over the scan limit, in and out of range.
  AttentionSpec spec;
  const Expr docMask = d[q_idx] == d[kv_idx];
  spec.variant = Variant("bufrange_limit").mask(docMask);
  auto cls = compileTileClassifier(spec, ranges);
  const int64_t n = 3 * kBufferRangeScanLimit;
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<int32_t> doc = bufferContents<int32_t>(rng, n, kind);
    Arguments args;
    args.bind("doc", doc.data(), n);
    for (int64_t len : {kBufferRangeScanLimit - 1, kBufferRangeScanLimit,
                        kBufferRangeScanLimit + 1})
      for (int64_t lo :
           {int64_t{0}, int64_t{7}, n - len, n - len + 1, int64_t{-1}})
        for (int64_t kvLen : {int64_t{1}, int64_t{64}}) {
          TileBox box{{0, 0}, {0, 0}, {lo, lo + len - 1}, {n - kvLen, n - 1},
                      n,      n};
          INFO("kind " << kind << " q [" << box.q.lo << ", " << box.q.hi
                       << "]");
          REQUIRE(cls->classify(box, args) ==
                  classifyTile(docMask, box, args, ranges));
        }
    // One document: every tile within the limit is full.
    if (kind == 2) {
      TileBox box{{0, 0},  {0, 0}, {5, 5 + kBufferRangeScanLimit - 1},
                  {0, 63}, n,      n};
      CHECK(cls->classify(box, args) == TileClass::Full);
    }
  }
  CHECK_THROWS_AS(cls->classify(TileBox{}, Arguments{}), UserError);
  Arguments wrongType;
  std::vector<int64_t> some64(4, 1);
  wrongType.bind("doc", some64.data(), 4);
  CHECK_THROWS_AS(cls->classify(TileBox{}, wrongType), UserError);
}
