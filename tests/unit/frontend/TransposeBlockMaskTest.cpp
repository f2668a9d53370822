//===- TransposeBlockMaskTest.cpp - The backward's transposed block mask --===//
//
// transposeBlockMask (the host twin of the GPU backward's `_bwd_mask`
// kernel) against a brute-force per-element oracle: on random block masks
// (random partial / full / unlisted classes per tile, shared and per-head /
// per-batch extents, odd sequence lengths, mask key tiles inside, equal to,
// unions of and unaligned with the backward's, query ratios 1..3), every
// backward tile must be unlisted / full / partial exactly as the classes of
// its elements' mask tiles (set lookups in the mask's own lists) say, its
// key-group word must mark exactly the elements of unlisted and full mask
// tiles, and every transposed list must be strictly increasing. The tile
// rule's UserErrors name both tile shapes.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Error.h"

#include <catch2/catch.hpp>

#include <random>
#include <set>

using namespace flashjit;

namespace {

/// A random valid BlockMask: each tile unlisted, partial or full.
BlockMask randomMask(std::mt19937_64 &rng, int64_t bm, int64_t bn,
                     int64_t batch, int64_t heads, int64_t sq, int64_t sk) {
  BlockMask m;
  m.blockM = bm;
  m.blockN = bn;
  m.seqlenQ = sq;
  m.seqlenK = sk;
  m.batch = batch;
  m.heads = heads;
  m.numQTiles = (sq + bm - 1) / bm;
  m.numKvTiles = (sk + bn - 1) / bn;
  int64_t rows = batch * heads * m.numQTiles;
  m.kvNumBlocks.assign(rows, 0);
  m.fullKvNumBlocks.assign(rows, 0);
  m.kvIndices.assign(rows * m.numKvTiles, -7); // unused tails: junk
  m.fullKvIndices.assign(rows * m.numKvTiles, -7);
  for (int64_t r = 0; r < rows; ++r) {
    int density = static_cast<int>(rng() % 4); // rows empty, sparse, dense
    for (int32_t t = 0; t < m.numKvTiles; ++t) {
      int c = density == 0 ? 0 : static_cast<int>(rng() % (density + 1));
      if (c == 1)
        m.kvIndices[r * m.numKvTiles + m.kvNumBlocks[r]++] = t;
      else if (c >= 2)
        m.fullKvIndices[r * m.numKvTiles + m.fullKvNumBlocks[r]++] = t;
    }
  }
  m.validate();
  return m;
}

/// 0 unlisted, 1 partial, 2 full: mask tile (m, t) of (b, h), by set lookup.
int maskClass(const BlockMask &mask, int64_t b, int64_t h, int64_t m,
              int64_t t) {
  int64_t row = mask.row(b, h, m);
  auto listed = [&](const std::vector<int32_t> &n,
                    const std::vector<int32_t> &ix) {
    std::set<int32_t> s(ix.begin() + row * mask.numKvTiles,
                        ix.begin() + row * mask.numKvTiles + n[row]);
    return s.count(static_cast<int32_t>(t)) > 0;
  };
  if (listed(mask.kvNumBlocks, mask.kvIndices))
    return 1;
  return listed(mask.fullKvNumBlocks, mask.fullKvIndices) ? 2 : 0;
}

/// maskClass of every mask tile, [batch, heads, numQTiles, numKvTiles].
std::vector<int> maskClasses(const BlockMask &mask) {
  std::vector<int> out;
  for (int64_t b = 0; b < mask.batch; ++b)
    for (int64_t h = 0; h < mask.heads; ++h)
      for (int64_t m = 0; m < mask.numQTiles; ++m)
        for (int64_t t = 0; t < mask.numKvTiles; ++t)
          out.push_back(maskClass(mask, b, h, m, t));
  return out;
}

/// Checks transposed row (b, h, j) of \p t against \p mask element by
/// element: a tile is unlisted iff every in-range element's mask tile is,
/// full iff every one is listed full, and in a partial tile the key-group
/// word marks exactly the elements of unlisted and full mask tiles.
void checkRow(const BlockMask &mask, const std::vector<int> &classes0,
              const TransposedBlockMask &t, int64_t b, int64_t h, int64_t j,
              int64_t &listedTiles, int64_t &mixed) {
  // The class of element (q, k): its mask tile's.
  auto classAt = [&](int64_t q, int64_t k) {
    return classes0[mask.row(b, h, q / mask.blockM) * mask.numKvTiles +
                    k / mask.blockN];
  };
  const int64_t qTile = t.qTile, kvTile = t.kvTile;
  const int64_t sq = mask.seqlenQ, sk = mask.seqlenK;
  int64_t row = (b * t.heads + h) * t.numKvTiles + j;
  std::vector<int> got(t.numQTiles, 0);
  std::vector<uint32_t> word(t.numQTiles, 0);
  for (int kind = 1; kind <= 2; ++kind) {
    const auto &n = kind == 1 ? t.qNumBlocks : t.fullQNumBlocks;
    const auto &ix = kind == 1 ? t.qIndices : t.fullQIndices;
    REQUIRE(n[row] >= 0);
    REQUIRE(n[row] <= t.numQTiles);
    for (int32_t e = 0; e < n[row]; ++e) {
      int32_t i = ix[row * t.numQTiles + e];
      REQUIRE(i >= 0);
      REQUIRE(i < t.numQTiles);
      if (e > 0)
        REQUIRE(i > ix[row * t.numQTiles + e - 1]);
      REQUIRE(got[i] == 0); // never in both lists
      got[i] = kind;
      if (kind == 1)
        word[i] = static_cast<uint32_t>(t.qKeyGroups[row * t.numQTiles + e]);
      ++listedTiles;
    }
  }
  for (int64_t i = 0; i < t.numQTiles; ++i) {
    std::set<int> classes;
    for (int64_t q = i * qTile; q < std::min(sq, (i + 1) * qTile); ++q)
      for (int64_t k = j * kvTile; k < std::min(sk, (j + 1) * kvTile); ++k)
        classes.insert(classAt(q, k));
    INFO("b " << b << " h " << h << " query tile " << i << " key tile " << j
              << " word " << word[i]);
    int want = classes.empty() || classes == std::set<int>{0} ? 0
               : classes == std::set<int>{2}                  ? 2
                                                              : 1;
    REQUIRE(got[i] == want);
    if (want != 1)
      continue;
    mixed += word[i] != 0;
    for (int64_t q = i * qTile; q < std::min(sq, (i + 1) * qTile); q += 3)
      for (int64_t k = j * kvTile; k < std::min(sk, (j + 1) * kvTile); ++k) {
        int c = classAt(q, k);
        int64_t g = (k - j * kvTile) / kBackwardKeyGroup;
        INFO("q " << q << " k " << k << " class " << c);
        REQUIRE(((word[i] >> g) & 1) == (c == 0 ? 1u : 0u));
        REQUIRE(((word[i] >> (16 + g)) & 1) == (c == 2 ? 1u : 0u));
      }
  }
}

} // namespace

TEST_CASE("transposeBlockMask classes each backward tile by the mask tiles "
          "it overlaps",
          "[blockmask][backward]") {
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int cases = 0;
  int64_t listedTiles = 0, mixed = 0;
  // Mask key tiles: inside the backward's (8 .. 64), odd multiples of 8
  // that neither divide nor are divided by it (24, 40, 200), equal, and
  // unions of 2 and 3 of them.
  for (int64_t bn : {8, 24, 40, 64, 128, 192, 200, 256, 384})
    for (int64_t rq : {1, 2, 3})
      for (int rep = 0; rep < 2; ++rep) {
        const int64_t qTile = 16 << (rng() % 3), kvTile = 64 << (rng() % 2);
        const int64_t bm = qTile * rq;
        const int64_t batch = 1 + rng() % 2, heads = 1 + rng() % 3;
        const int64_t sq = rng() % 7 == 0 ? 0 : 1 + rng() % 400;
        const int64_t sk = rng() % 7 == 0 ? 0 : 1 + rng() % 700;
        INFO("mask tiles " << bm << " x " << bn << ", backward " << qTile
                           << " x " << kvTile << ", batch " << batch
                           << ", heads " << heads << ", seqlens " << sq << " x "
                           << sk);
        BlockMask mask = randomMask(rng, bm, bn, batch, heads, sq, sk);
        TransposedBlockMask t = transposeBlockMask(mask, qTile, kvTile);
        REQUIRE(t.qTile == qTile);
        REQUIRE(t.kvTile == kvTile);
        REQUIRE(t.batch == batch);
        REQUIRE(t.heads == heads);
        REQUIRE(t.numQTiles == (sq + qTile - 1) / qTile);
        REQUIRE(t.numKvTiles == (sk + kvTile - 1) / kvTile);
        const int64_t rows = batch * heads * t.numKvTiles;
        REQUIRE(t.qNumBlocks.size() == size_t(rows));
        REQUIRE(t.qIndices.size() == size_t(rows * t.numQTiles));
        REQUIRE(t.qKeyGroups.size() == size_t(rows * t.numQTiles));
        const std::vector<int> classes = maskClasses(mask);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = 0; j < t.numKvTiles; ++j)
              checkRow(mask, classes, t, b, h, j, listedTiles, mixed);
        ++cases;
      }
  CHECK(cases == 54);
  CHECK(listedTiles > 0);
  CHECK(mixed > 0);
}

TEST_CASE("the backward's block-sparse tile rule names both tile shapes",
          "[blockmask][backward]") {
  std::mt19937_64 rng(5);
  BlockMask keys20 = randomMask(rng, 128, 20, 1, 1, 300, 300);
  CHECK_THROWS_AS(transposeBlockMask(keys20, 32, 64), UserError);
  CHECK_THROWS_WITH(
      checkBackwardBlockTiles(keys20, 32, 64),
      Catch::Contains("block_mask.block_n = 20 (keys per mask tile) is not a "
                      "multiple of 8: the backward kernel's tiles (32 query "
                      "rows x 64 keys)") &&
          Catch::Contains("(128 x 20)"));
  BlockMask rows48 = randomMask(rng, 48, 64, 1, 1, 300, 300);
  CHECK_THROWS_WITH(
      checkBackwardBlockTiles(rows48, 32, 64),
      Catch::Contains("block_mask.block_m = 48 (queries per mask tile) is not "
                      "a multiple of the backward kernel's 32 query rows") &&
          Catch::Contains("(32 x 64)") && Catch::Contains("(48 x 64)"));
  CHECK_THROWS_WITH(checkBackwardBlockTiles(rows48, 0, 64),
                    Catch::Contains("must be positive"));
  CHECK_THROWS_WITH(checkBackwardBlockTiles(rows48, 16, 256),
                    Catch::Contains("at most 128 keys"));
  CHECK_NOTHROW(checkBackwardBlockTiles(rows48, 16, 64));
  BlockMask keys32 = randomMask(rng, 128, 32, 1, 1, 300, 300);
  CHECK_NOTHROW(checkBackwardBlockTiles(keys32, 64, 128)); // D = 256's tiles
}
