//===- TileClassTest.cpp - Interval classification of mask tiles ----------===//
//
// For index-only masks (causal in both alignments, sliding windows, prefix-LM,
// chunked, and their same-alignment conjunctions) classifyTile is exact: each
// tile's class equals what evaluating the mask at every element says, and
// countTiles equals bruteForceTileCounts, over many small shapes (seqlens
// 0..70, block sizes including non-powers of two). For masks that read
// buffers, floats or unknown parameters it is sound: Full or Empty only when
// every element agrees. With the buffer-range rule, document masks over
// consecutive ids are exact, other buffer masks sound, and reads that may
// leave the buffer or span more than kBufferRangeScanLimit indices unknown.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "flashjit/frontend/Interpreter.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/TileClass.h"

#include <catch2/catch.hpp>

#include <numeric>
#include <random>
#include <vector>

using namespace flashjit;
using flashjit::test::freshSeed;
using flashjit::test::uniformInt;

namespace {

struct Brute {
  bool anyTrue = false, anyFalse = false;
  TileClass cls() const {
    return anyTrue ? (anyFalse ? TileClass::Partial : TileClass::Full)
                   : TileClass::Empty;
  }
};

/// Evaluates \p mask at every element of the tile (this suite's own oracle).
Brute bruteTile(const Expr &mask, const TileBox &box, const Arguments &args) {
  Brute r;
  for (int64_t i = box.q.lo; i <= box.q.hi; ++i)
    for (int64_t j = box.kv.lo; j <= box.kv.hi; ++j) {
      EvalPoint p;
      p.batch = box.batch.lo;
      p.head = box.head.lo;
      p.qIdx = i;
      p.kvIdx = j;
      p.seqlenQ = box.seqlenQ;
      p.seqlenK = box.seqlenK;
      (evaluate(mask, p, args).asBool() ? r.anyTrue : r.anyFalse) = true;
    }
  return r;
}

TileBox tileBox(int64_t qi, int64_t kj, int64_t bm, int64_t bn, int64_t sq,
                int64_t sk) {
  TileBox box;
  box.q = {qi * bm, std::min(sq, (qi + 1) * bm) - 1};
  box.kv = {kj * bn, std::min(sk, (kj + 1) * bn) - 1};
  box.seqlenQ = sq;
  box.seqlenK = sk;
  return box;
}

/// Per tile: classifyTile must equal the element-wise class (\p exact) or at
/// least never claim Full/Empty wrongly (sound). Returns the counts.
TileCounts checkTiles(const Expr &mask, int64_t sq, int64_t sk, int64_t bm,
                      int64_t bn, bool exact, const Arguments &classifyArgs,
                      const std::vector<Arguments> &evalArgs,
                      const TileClassOptions &options = {}) {
  TileCounts counts;
  int64_t wrong = 0;
  for (int64_t qi = 0; qi * bm < sq; ++qi)
    for (int64_t kj = 0; kj * bn < sk; ++kj) {
      TileBox box = tileBox(qi, kj, bm, bn, sq, sk);
      TileClass got = classifyTile(mask, box, classifyArgs, options);
      Brute all;
      for (const Arguments &a : evalArgs) {
        Brute b = bruteTile(mask, box, a);
        all.anyTrue |= b.anyTrue;
        all.anyFalse |= b.anyFalse;
      }
      bool ok = exact ? got == all.cls()
                      : (got == TileClass::Partial || got == all.cls());
      if (!ok && ++wrong <= 3)
        UNSCOPED_INFO("tile q=[" << box.q.lo << "," << box.q.hi << "] kv=["
                                 << box.kv.lo << "," << box.kv.hi
                                 << "]: classified " << toString(got)
                                 << ", elements say " << toString(all.cls()));
      (got == TileClass::Full    ? counts.full
       : got == TileClass::Empty ? counts.empty
                                 : counts.partial)++;
    }
  CHECK(wrong == 0);
  return counts;
}

const int64_t kBlocks[][2] = {{1, 1},   {16, 16}, {7, 5},  {3, 13},
                              {64, 64}, {48, 80}, {10, 1}, {128, 32}};

struct NamedMask {
  std::string name;
  Expr mask;
};

/// Families of index-only masks the header promises exact classification
/// for. They are tested separately so that a broken promise names its family.
enum class Family { Basic, NoCurrent };

/// Random masks of one family, in both alignments.
std::vector<NamedMask> exactMasks(std::mt19937_64 &rng, Family family) {
  std::vector<NamedMask> masks;
  for (Alignment a : {Alignment::TopLeft, Alignment::BottomRight}) {
    std::string al(toString(a));
    int left = static_cast<int>(uniformInt(rng, 0, 40));
    int right = static_cast<int>(uniformInt(rng, 0, 20));
    int prefix = static_cast<int>(uniformInt(rng, 0, 30));
    std::string lr = std::to_string(left) + ", " + std::to_string(right);
    switch (family) {
    case Family::Basic:
      masks.push_back({"causal " + al, causal(a)});
      masks.push_back(
          {"sliding_window(" + lr + ") " + al, sliding_window(left, right, a)});
      masks.push_back({"sliding_window(" + std::to_string(left) + ", 0) " + al,
                       sliding_window(left, 0, a)});
      masks.push_back({"prefix_lm(" + std::to_string(prefix) + ") " + al,
                       prefix_lm(prefix, a)});
      masks.push_back({"sliding_window(" + lr + ") && causal " + al,
                       sliding_window(left, right, a) && causal(a)});
      masks.push_back({"sliding_window(" + lr + ") && prefix_lm " + al,
                       sliding_window(left, right, a) && prefix_lm(prefix, a)});
      break;
    case Family::NoCurrent:
      masks.push_back({"sliding_window(" + lr + ", no current) " + al,
                       sliding_window(left, right, a, false)});
      masks.push_back(
          {"sliding_window(0, " + std::to_string(right) + ", no current) " + al,
           sliding_window(0, right, a, false)});
      break;
    }
  }
  if (family == Family::Basic) {
    int chunk = static_cast<int>(uniformInt(rng, 1, 24));
    masks.push_back({"chunked(" + std::to_string(chunk) + ")", chunked(chunk)});
    masks.push_back({"chunked(" + std::to_string(chunk) + ") && causal TL",
                     chunked(chunk) && causal(Alignment::TopLeft)});
    masks.push_back({"true", constant(ScalarType::Bool, 1, 0.0f)});
    masks.push_back({"false", constant(ScalarType::Bool, 0, 0.0f)});
  }
  return masks;
}

/// Checks one family: tiles of many block shapes, arbitrary (unaligned)
/// boxes, and countTiles == bruteForceTileCounts.
void checkFamilyExact(Family family) {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (const NamedMask &m : exactMasks(rng, family)) {
    INFO(m.name << ": " << printExpr(m.mask));
    // Block-aligned tiles.
    for (int t = 0; t < 6; ++t) {
      int64_t sq = uniformInt(rng, 0, 70), sk = uniformInt(rng, 0, 70);
      const auto &blk = kBlocks[rng() % std::size(kBlocks)];
      INFO("sq=" << sq << " sk=" << sk << " block " << blk[0] << "x" << blk[1]);
      TileCounts per =
          checkTiles(m.mask, sq, sk, blk[0], blk[1], true, {}, {Arguments{}});
      CHECK(countTiles(m.mask, sq, sk, blk[0], blk[1]) == per);
      CHECK(bruteForceTileCounts(m.mask, sq, sk, blk[0], blk[1]) == per);
    }
    // Arbitrary boxes.
    int64_t wrong = 0;
    for (int t = 0; t < 300; ++t) {
      TileBox box;
      box.seqlenQ = uniformInt(rng, 1, 70);
      box.seqlenK = uniformInt(rng, 1, 70);
      box.q.lo = uniformInt(rng, 0, box.seqlenQ - 1);
      box.q.hi = uniformInt(rng, box.q.lo, box.seqlenQ - 1);
      box.kv.lo = uniformInt(rng, 0, box.seqlenK - 1);
      box.kv.hi = uniformInt(rng, box.kv.lo, box.seqlenK - 1);
      TileClass got = classifyTile(m.mask, box);
      TileClass want = bruteTile(m.mask, box, {}).cls();
      if (got != want && ++wrong <= 3)
        UNSCOPED_INFO("box q=[" << box.q.lo << "," << box.q.hi << "] kv=["
                                << box.kv.lo << "," << box.kv.hi << "] seqlens "
                                << box.seqlenQ << "x" << box.seqlenK
                                << ": classified " << toString(got)
                                << ", elements say " << toString(want));
    }
    CHECK(wrong == 0);
  }
}

} // namespace

TEST_CASE("tiles: spellings and simple boxes", "[frontend][tiles]") {
  CHECK(toString(TileClass::Empty) == "empty");
  CHECK(toString(TileClass::Partial) == "partial");
  CHECK(toString(TileClass::Full) == "full");
  Expr c = causal(Alignment::TopLeft);
  TileBox below = tileBox(1, 0, 16, 16, 64, 64); // q 16..31, kv 0..15
  TileBox diag = tileBox(1, 1, 16, 16, 64, 64);
  TileBox above = tileBox(0, 1, 16, 16, 64, 64);
  CHECK(classifyTile(c, below) == TileClass::Full);
  CHECK(classifyTile(c, diag) == TileClass::Partial);
  CHECK(classifyTile(c, above) == TileClass::Empty);
  // Bottom-right with seqlen_k = seqlen_q + 16 shifts the diagonal a tile.
  TileBox shifted = tileBox(0, 1, 16, 16, 64, 80);
  CHECK(classifyTile(causal(Alignment::BottomRight), shifted) ==
        TileClass::Partial);
  CHECK(classifyTile(causal(Alignment::BottomRight),
                     tileBox(0, 0, 16, 16, 64, 80)) == TileClass::Full);
  CHECK(classifyTile(causal(Alignment::BottomRight),
                     tileBox(0, 2, 16, 16, 64, 80)) == TileClass::Empty);
  // Counts over a whole problem: 4 x 4 tiles of a causal 64 x 64.
  TileCounts tc = countTiles(c, 64, 64, 16, 16);
  CHECK(tc == TileCounts{6, 4, 6});
  CHECK(countTiles(c, 0, 64, 16, 16) == TileCounts{0, 0, 0});
  CHECK(countTiles(c, 64, 0, 16, 16) == TileCounts{0, 0, 0});
  CHECK(bruteForceTileCounts(c, 64, 64, 16, 16) == TileCounts{6, 4, 6});
  // Edge tiles are clipped: 20 x 20 in 16 x 16 blocks.
  CHECK(bruteForceTileCounts(c, 20, 20, 16, 16) == TileCounts{1, 2, 1});
}

TEST_CASE("tiles: causal, sliding windows, prefix-LM, chunked are exact",
          "[frontend][tiles][property]") {
  checkFamilyExact(Family::Basic);
}

TEST_CASE("tiles: chunked && causal is exact when chunks hold whole tiles",
          "[frontend][tiles][property]") {
  // TileClass.h: a conjunction with chunked is exact when the chunk size is
  // a multiple of both tile sizes, and sound otherwise.
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (Alignment a : {Alignment::TopLeft, Alignment::BottomRight}) {
    for (int t = 0; t < 40; ++t) {
      int64_t bm = uniformInt(rng, 1, 12), bn = uniformInt(rng, 1, 16);
      int64_t chunk = std::lcm(bm, bn) * uniformInt(rng, 1, 3);
      int64_t sq = uniformInt(rng, 0, 70), sk = uniformInt(rng, 0, 70);
      Expr m = chunked(chunk) && causal(a);
      INFO(printExpr(m) << " sq=" << sq << " sk=" << sk << " block " << bm
                        << "x" << bn);
      TileCounts per = checkTiles(m, sq, sk, bm, bn, true, {}, {Arguments{}});
      CHECK(bruteForceTileCounts(m, sq, sk, bm, bn) == per);
      CHECK(countTiles(m, sq, sk, bm, bn) == per);
    }
    // Unaligned chunks: never a wrong Full or Empty.
    for (int t = 0; t < 40; ++t) {
      int64_t bm = uniformInt(rng, 2, 20), bn = uniformInt(rng, 1, 16);
      int64_t chunk = uniformInt(rng, 1, 24);
      int64_t sq = uniformInt(rng, 0, 70), sk = uniformInt(rng, 0, 70);
      Expr m = chunked(chunk) && causal(a);
      INFO(printExpr(m) << " sq=" << sq << " sk=" << sk << " block " << bm
                        << "x" << bn);
      checkTiles(m, sq, sk, bm, bn, false, {}, {Arguments{}});
    }
  }
  // The case that is not exact: 50 queries, 1 key, bottom-right, chunk 14.
  // Only (49, 0) is causal and 49 / 14 != 0 / 14, so the tile is empty;
  // each conjunct alone allows part of it, so it is judged Partial (sound).
  TileBox box;
  box.q = {0, 49};
  box.kv = {0, 0};
  box.seqlenQ = 50;
  box.seqlenK = 1;
  Expr m = chunked(14) && causal(Alignment::BottomRight);
  CHECK(bruteTile(m, box, {}).cls() == TileClass::Empty);
  CHECK(classifyTile(m, box) == TileClass::Partial);
  // With the tile inside one chunk it is exact again.
  box.q = {42, 49};
  CHECK(classifyTile(m, box) == TileClass::Empty);
}

TEST_CASE("tiles: sliding windows without the current token are exact",
          "[frontend][tiles][property]") {
  checkFamilyExact(Family::NoCurrent);
  // Query 12 with window (0, 2) and no current token sees keys 13 and 14
  // only, so keys [0, 12] are Empty for it.
  TileBox box;
  box.q = {12, 12};
  box.kv = {0, 12};
  box.seqlenQ = 13;
  box.seqlenK = 18;
  CHECK(classifyTile(sliding_window(0, 2, Alignment::TopLeft, false), box) ==
        TileClass::Empty);
  // Window (1, 0) without the current token: query 12 sees key 11 only.
  box.kv = {12, 20};
  CHECK(classifyTile(sliding_window(1, 0, Alignment::TopLeft, false), box) ==
        TileClass::Empty);
}

TEST_CASE("tiles: countTiles equals bruteForceTileCounts over many shapes",
          "[frontend][tiles][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {0, 0}, {0, 5}, {5, 0}, {1, 1}, {1, 70}, {70, 1}, {70, 70}, {33, 64}};
  for (int i = 0; i < 16; ++i)
    shapes.push_back({uniformInt(rng, 0, 70), uniformInt(rng, 0, 70)});
  int64_t compared = 0;
  // The other families have their own tests (with counts) above.
  for (const NamedMask &m : exactMasks(rng, Family::Basic)) {
    INFO(m.name << ": " << printExpr(m.mask));
    for (auto [sq, sk] : shapes) {
      const auto &blk = kBlocks[rng() % std::size(kBlocks)];
      INFO("sq=" << sq << " sk=" << sk << " block " << blk[0] << "x" << blk[1]);
      TileCounts fast = countTiles(m.mask, sq, sk, blk[0], blk[1]);
      TileCounts brute = bruteForceTileCounts(m.mask, sq, sk, blk[0], blk[1]);
      CHECK(fast == brute);
      int64_t tiles =
          ((sq + blk[0] - 1) / blk[0]) * ((sk + blk[1] - 1) / blk[1]);
      CHECK(brute.full + brute.partial + brute.empty == tiles);
      ++compared;
    }
  }
  CHECK(compared > 300);
}

TEST_CASE("tiles: parameters given in args are exact values",
          "[frontend][tiles]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  Expr m = sliding_window(param<int32_t>("left"), param<int32_t>("right"),
                          Alignment::BottomRight);
  for (int t = 0; t < 10; ++t) {
    int32_t left = static_cast<int32_t>(uniformInt(rng, 0, 30));
    int32_t right = static_cast<int32_t>(uniformInt(rng, 0, 10));
    Arguments args;
    args.set("left", Scalar::i32(left)).set("right", Scalar::i32(right));
    int64_t sq = uniformInt(rng, 1, 70), sk = uniformInt(rng, 1, 70);
    INFO("left=" << left << " right=" << right << " sq=" << sq << " sk=" << sk);
    TileCounts per = checkTiles(m, sq, sk, 8, 8, true, args, {args});
    CHECK(countTiles(m, sq, sk, 8, 8, args) == per);
    CHECK(bruteForceTileCounts(m, sq, sk, 8, 8, args) == per);
  }
}

TEST_CASE("tiles: data-dependent masks are classified soundly",
          "[frontend][tiles][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t n = 70;
  // Documents of random lengths.
  std::vector<int32_t> doc(n);
  int32_t id = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (rng() % 9 == 0)
      ++id;
    doc[static_cast<size_t>(i)] = id;
  }
  Arguments args;
  args.bind("doc", doc.data(), n);
  Buffer d = buffer<int32_t>("doc");
  const std::vector<NamedMask> masks = {
      {"doc", d[q_idx] == d[kv_idx]},
      {"doc && causal", d[q_idx] == d[kv_idx] && causal(Alignment::TopLeft)},
      {"doc || prefix", d[q_idx] == d[kv_idx] || kv_idx < 4},
      {"doc && never", d[q_idx] == d[kv_idx] && kv_idx < 0},
      {"float", cast<float>(q_idx) * 0.5f >= cast<float>(kv_idx)},
      {"float sqrt", sqrt(q_idx) >= sqrt(kv_idx)},
  };
  for (const NamedMask &m : masks) {
    INFO(m.name);
    for (int t = 0; t < 5; ++t) {
      int64_t sq = uniformInt(rng, 1, n), sk = uniformInt(rng, 1, n);
      const auto &blk = kBlocks[rng() % std::size(kBlocks)];
      INFO("sq=" << sq << " sk=" << sk << " block " << blk[0] << "x" << blk[1]);
      TileCounts per =
          checkTiles(m.mask, sq, sk, blk[0], blk[1], false, args, {args});
      CHECK(countTiles(m.mask, sq, sk, blk[0], blk[1], args) == per);
      TileCounts brute =
          bruteForceTileCounts(m.mask, sq, sk, blk[0], blk[1], args);
      // Disagreement only in the Partial direction.
      CHECK(per.full <= brute.full);
      CHECK(per.empty <= brute.empty);
      CHECK(per.partial >= brute.partial);
    }
  }
}

TEST_CASE("tiles: unknown parameters are classified for every value",
          "[frontend][tiles]") {
  // No value for "w" is given, so Full/Empty must hold for all of them.
  Expr m = causal(Alignment::TopLeft) && q_idx - kv_idx < param<int32_t>("w");
  std::vector<Arguments> values;
  for (int32_t w : {-5, 0, 1, 3, 17, 64, 1000, INT32_MAX}) {
    Arguments a;
    a.set("w", Scalar::i32(w));
    values.push_back(a);
  }
  for (auto [bm, bn] : {std::pair{8, 8}, std::pair{5, 11}, std::pair{1, 1}}) {
    INFO("block " << bm << "x" << bn);
    TileCounts c = checkTiles(m, 40, 40, bm, bn, false, {}, values);
    // Tiles strictly above the diagonal are Empty whatever w is.
    CHECK(c.empty > 0);
  }
}

namespace {

/// Document ids 0, 1, 2, ... over \p n tokens: random lengths in
/// [1, maxLen], 1-token documents frequent, the first id random.
std::vector<int32_t> consecutiveDocs(std::mt19937_64 &rng, int64_t n,
                                     int64_t maxLen) {
  std::vector<int32_t> doc(static_cast<size_t>(n));
  int32_t id = static_cast<int32_t>(uniformInt(rng, -5, 5));
  for (int64_t t = 0; t < n; ++id) {
    int64_t len = uniformInt(rng, 0, 2) == 0 ? 1 : uniformInt(rng, 1, maxLen);
    for (int64_t e = std::min(n, t + len); t < e; ++t)
      doc[static_cast<size_t>(t)] = id;
  }
  return doc;
}

} // namespace

TEST_CASE("tiles: the buffer-range rule is exact for document masks",
          "[frontend][tiles][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const TileClassOptions ranges{.bufferRanges = true};
  Buffer d = buffer<int32_t>("doc");
  const Expr mask = d[q_idx] == d[kv_idx];
  int64_t decided = 0;
  for (int t = 0; t < 24; ++t) {
    int64_t n = uniformInt(rng, 1, 90);
    int64_t maxLen = uniformInt(rng, 1, 40);
    std::vector<int32_t> doc = consecutiveDocs(rng, n, maxLen);
    if (t % 6 == 5) // one document covering everything
      doc.assign(doc.size(), static_cast<int32_t>(uniformInt(rng, -9, 9)));
    Arguments args;
    args.bind("doc", doc.data(), n);
    int64_t sq = uniformInt(rng, 1, n), sk = uniformInt(rng, 1, n);
    const auto &blk = kBlocks[rng() % std::size(kBlocks)];
    INFO("n=" << n << " docs<=" << maxLen << " sq=" << sq << " sk=" << sk
              << " block " << blk[0] << "x" << blk[1]);
    TileCounts c =
        checkTiles(mask, sq, sk, blk[0], blk[1], true, args, {args}, ranges);
    CHECK(countTiles(mask, sq, sk, blk[0], blk[1], args, ranges) == c);
    CHECK(bruteForceTileCounts(mask, sq, sk, blk[0], blk[1], args) == c);
    // Off by default: the same Arguments classify every tile Partial.
    CHECK(countTiles(mask, sq, sk, blk[0], blk[1], args).partial ==
          c.full + c.partial + c.empty);
    decided += c.full + c.empty;
  }
  CHECK(decided > 0);
}

TEST_CASE("tiles: the buffer-range rule is sound for other buffer masks",
          "[frontend][tiles][property]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const TileClassOptions ranges{.bufferRanges = true};
  const int64_t n = 70;
  std::vector<int32_t> doc = consecutiveDocs(rng, n, 20);
  std::vector<int64_t> wide(n);
  for (int64_t &x : wide) // random, unsorted, some near the i64 limits
    x = uniformInt(rng, 0, 3) == 0 ? INT64_MAX - uniformInt(rng, 0, 3)
                                   : uniformInt(rng, -1000, 1000);
  Arguments args;
  args.bind("doc", doc.data(), n).bind("w", wide.data(), n);
  Buffer d = buffer<int32_t>("doc");
  Buffer w = buffer<int64_t>("w");
  const std::vector<NamedMask> masks = {
      {"doc && causal", d[q_idx] == d[kv_idx] && causal(Alignment::TopLeft)},
      {"doc || prefix", d[q_idx] == d[kv_idx] || kv_idx < 4},
      {"doc != ", d[q_idx] != d[kv_idx]},
      {"nested", d[abs(d[q_idx]) % 7] <= d[kv_idx]},
      {"wide", w[q_idx] < w[kv_idx]},
      {"wide sum", w[kv_idx] + w[q_idx] > 0},
      {"2-D", d[(q_idx * seqlen_k + kv_idx) % 70] >= 3},
  };
  for (const NamedMask &m : masks) {
    INFO(m.name);
    for (int t = 0; t < 6; ++t) {
      int64_t sq = uniformInt(rng, 1, n), sk = uniformInt(rng, 1, n);
      const auto &blk = kBlocks[rng() % std::size(kBlocks)];
      INFO("sq=" << sq << " sk=" << sk << " block " << blk[0] << "x" << blk[1]);
      TileCounts c = checkTiles(m.mask, sq, sk, blk[0], blk[1], false, args,
                                {args}, ranges);
      CHECK(countTiles(m.mask, sq, sk, blk[0], blk[1], args, ranges) == c);
    }
  }
}

TEST_CASE("tiles: buffer reads that may leave the buffer or span too many "
          "indices stay unknown",
          "[frontend][tiles]") {
  const TileClassOptions ranges{.bufferRanges = true};
  std::vector<int32_t> ones(2 * kBufferRangeScanLimit + 8, 1);
  const auto size = static_cast<int64_t>(ones.size());
  Arguments args;
  args.bind("b", ones.data(), size);
  Buffer buf = buffer<int32_t>("b");
  Expr isOne = buf[q_idx] == 1;
  auto cls = [&](const Expr &m, int64_t qLo, int64_t qHi, const Arguments &a) {
    TileBox box{{0, 0}, {0, 0}, {qLo, qHi}, {0, 0}, size, size};
    return classifyTile(m, box, a, ranges);
  };
  // Exactly the limit is read; one index more is not.
  CHECK(cls(isOne, 0, kBufferRangeScanLimit - 1, args) == TileClass::Full);
  CHECK(cls(isOne, 5, kBufferRangeScanLimit + 5, args) == TileClass::Partial);
  // The last element is read; one past it (or before the first) is not.
  CHECK(cls(isOne, size - 64, size - 1, args) == TileClass::Full);
  CHECK(cls(buf[q_idx + 1] == 1, size - 64, size - 1, args) ==
        TileClass::Partial);
  CHECK(cls(buf[q_idx - 1] == 1, 0, 63, args) == TileClass::Partial);
  CHECK(cls(buf[q_idx - 1] == 1, 1, 64, args) == TileClass::Full);
  // A wide index, an unbounded one (it could wrap), a float buffer, a
  // missing buffer or one of another element type stays unknown.
  Expr far = buf[q_idx * 1000000000] == 1;
  CHECK(cls(far, 0, 0, args) == TileClass::Full);
  CHECK(cls(far, 0, 1, args) == TileClass::Partial);
  CHECK(cls(far, 0, 3, args) == TileClass::Partial);
  std::vector<float> f(16, 1.0f);
  Arguments withFloat = args;
  withFloat.bind("f", f.data(), 16);
  CHECK(cls(buffer<float>("f")[q_idx] == 1.0f, 0, 3, withFloat) ==
        TileClass::Partial);
  CHECK(cls(isOne, 0, 3, Arguments{}) == TileClass::Partial);
  std::vector<int64_t> ones64(16, 1);
  Arguments wrongType;
  wrongType.bind("b", ones64.data(), 16);
  CHECK(cls(isOne, 0, 3, wrongType) == TileClass::Partial);
  // A 2-D index over 64 query rows and all seqlen_k keys spans
  // 64 * seqlen_k indices: read for seqlen_k = 16 (1024), not for 17.
  Expr twoD = buf[q_idx * seqlen_k + kv_idx] == 1;
  for (int64_t sk : {16, 17}) {
    TileBox box{{0, 0}, {0, 0}, {0, 63}, {0, sk - 1}, 64, sk};
    CHECK(classifyTile(twoD, box, args, ranges) ==
          (sk == 16 ? TileClass::Full : TileClass::Partial));
  }
}
