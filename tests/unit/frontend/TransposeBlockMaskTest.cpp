//===- TransposeBlockMaskTest.cpp - The backward's transposed block mask --===//
//
// transposeBlockMask (the host twin of the GPU backward's `_bwd_mask`
// kernel) against a direct computation: on random block masks (random
// partial / full / unlisted classes per tile, shared and per-head /
// per-batch extents, odd sequence lengths, tile ratios 1, 2 and 4 in each
// direction), every backward tile must carry the class of the mask tile
// that holds it -- checked element by element through a set lookup of the
// mask's own lists -- and every transposed list must be strictly
// increasing. The tile rule's UserErrors name both values.
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

} // namespace

TEST_CASE("transposeBlockMask gives each backward tile its mask tile's class",
          "[blockmask][backward]") {
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int cases = 0;
  int64_t listedTiles = 0;
  for (int64_t rq : {1, 2, 4})
    for (int64_t rk : {1, 2, 4})
      for (int rep = 0; rep < 3; ++rep) {
        const int64_t qTile = 16 << (rng() % 3), kvTile = 64;
        const int64_t bm = qTile * rq, bn = kvTile * rk;
        const int64_t batch = 1 + rng() % 2, heads = 1 + rng() % 3;
        const int64_t sq = rng() % 5 == 0 ? 0 : 1 + rng() % 700;
        const int64_t sk = rng() % 5 == 0 ? 0 : 1 + rng() % 700;
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
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = 0; j < t.numKvTiles; ++j) {
              int64_t row = (b * heads + h) * t.numKvTiles + j;
              std::vector<int> got(t.numQTiles, 0);
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
                  ++listedTiles;
                }
              }
              // Every element of backward tile (i, j) lies in mask tile
              // (q / bm, k / bn): its class must be the backward tile's.
              for (int64_t i = 0; i < t.numQTiles; ++i)
                for (int64_t q = i * qTile; q < std::min(sq, (i + 1) * qTile);
                     q += 7)
                  for (int64_t k = j * kvTile;
                       k < std::min(sk, (j + 1) * kvTile); k += 5) {
                    INFO("b " << b << " h " << h << " q " << q << " k " << k);
                    REQUIRE(got[i] == maskClass(mask, b, h, q / bm, k / bn));
                  }
            }
        ++cases;
      }
  CHECK(cases == 27);
  CHECK(listedTiles > 0);
}

TEST_CASE("the backward's block-sparse tile rule names both values",
          "[blockmask][backward]") {
  std::mt19937_64 rng(5);
  BlockMask keys32 = randomMask(rng, 128, 32, 1, 1, 300, 300);
  CHECK_THROWS_AS(transposeBlockMask(keys32, 32, 64), UserError);
  CHECK_THROWS_WITH(
      checkBackwardBlockTiles(keys32, 32, 64),
      Catch::Contains("block_mask.block_n = 32 (keys per mask tile) is not a "
                      "multiple of the backward kernel's 64 keys per tile"));
  BlockMask rows48 = randomMask(rng, 48, 64, 1, 1, 300, 300);
  CHECK_THROWS_WITH(
      checkBackwardBlockTiles(rows48, 32, 64),
      Catch::Contains("block_mask.block_m = 48 (queries per mask tile) is not "
                      "a multiple of the backward kernel's 32 query rows"));
  CHECK_THROWS_WITH(checkBackwardBlockTiles(rows48, 0, 64),
                    Catch::Contains("must be positive"));
  CHECK_NOTHROW(checkBackwardBlockTiles(rows48, 16, 64));
}
