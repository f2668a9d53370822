//===- BlockMask.cpp - Checking block masks, BSR layouts to block masks ---===//
//
// Every check runs on the host before a kernel reads the arrays, so a bad
// index is a UserError naming the entry, never an out-of-bounds read.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/BlockMask.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

namespace flashjit {
namespace {

[[noreturn]] void fail(const std::string &message) {
  // Errors about run-time input carry no internal source location.
  throw UserError(message, std::source_location());
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void checkTiles(const char *what, int64_t blockM, int64_t blockN,
                int64_t seqlenQ, int64_t seqlenK, int64_t numQTiles,
                int64_t numKvTiles) {
  if (blockM < 1 || blockN < 1)
    fail(fmt::format("{}.block_m = {}, block_n = {}: both must be positive",
                     what, blockM, blockN));
  if (seqlenQ < 0 || seqlenK < 0)
    fail(fmt::format("{}: seqlen_q = {}, seqlen_k = {} must be >= 0", what,
                     seqlenQ, seqlenK));
  if (numQTiles != ceilDiv(seqlenQ, blockM))
    fail(fmt::format("{}.num_q_tiles = {}, expected ceil(seqlen_q {} / "
                     "block_m {}) = {}",
                     what, numQTiles, seqlenQ, blockM,
                     ceilDiv(seqlenQ, blockM)));
  if (numKvTiles != ceilDiv(seqlenK, blockN))
    fail(fmt::format("{}.num_kv_tiles = {}, expected ceil(seqlen_k {} / "
                     "block_n {}) = {}",
                     what, numKvTiles, seqlenK, blockN,
                     ceilDiv(seqlenK, blockN)));
}

void expectSize(const char *field, size_t size, int64_t want) {
  if (static_cast<int64_t>(size) != want)
    fail(fmt::format("block_mask.{} has {} entries, expected {}", field, size,
                     want));
}

} // namespace

BlockMaskExtent blockMaskExtent(const Expr &mask, int64_t batch, int64_t headsQ,
                                bool varlen) {
  BlockMaskExtent e;
  // At least 1, so that an empty batch still has a well-formed mask.
  if (varlen || readsIndex(mask, IndexVar::Batch))
    e.batch = std::max<int64_t>(batch, 1);
  if (readsIndex(mask, IndexVar::Head))
    e.heads = std::max<int64_t>(headsQ, 1);
  return e;
}

int64_t BlockMask::numPartial() const {
  return std::accumulate(kvNumBlocks.begin(), kvNumBlocks.end(), int64_t{0});
}

int64_t BlockMask::numFull() const {
  return std::accumulate(fullKvNumBlocks.begin(), fullKvNumBlocks.end(),
                         int64_t{0});
}

void BlockMask::validate() const {
  checkTiles("block_mask", blockM, blockN, seqlenQ, seqlenK, numQTiles,
             numKvTiles);
  if (batch < 1)
    fail(fmt::format("block_mask.batch = {} must be >= 1", batch));
  if (heads < 1)
    fail(fmt::format("block_mask.heads = {} must be >= 1", heads));
  int64_t rows = batch * heads * numQTiles;
  expectSize("kv_num_blocks", kvNumBlocks.size(), rows);
  expectSize("full_kv_num_blocks", fullKvNumBlocks.size(), rows);
  expectSize("kv_indices", kvIndices.size(), rows * numKvTiles);
  expectSize("full_kv_indices", fullKvIndices.size(), rows * numKvTiles);
  std::vector<char> seen(static_cast<size_t>(numKvTiles));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t m = 0; m < numQTiles; ++m) {
        int64_t r = row(b, h, m);
        std::fill(seen.begin(), seen.end(), 0);
        auto checkList = [&](const char *numName, const char *idxName,
                             const std::vector<int32_t> &nums,
                             const std::vector<int32_t> &idx) {
          int32_t n = nums[r];
          if (n < 0 || n > numKvTiles)
            fail(fmt::format("block_mask.{}[b={}][h={}][row={}] = {} is not "
                             "in [0, num_kv_tiles {}]",
                             numName, b, h, m, n, numKvTiles));
          for (int32_t i = 0; i < n; ++i) {
            int32_t t = idx[r * numKvTiles + i];
            auto where =
                fmt::format("block_mask.{}[b={}][h={}][row={}][{}] = {}",
                            idxName, b, h, m, i, t);
            if (t < 0)
              fail(where + " is negative");
            if (t >= numKvTiles)
              fail(fmt::format("{} >= num_kv_tiles {}", where, numKvTiles));
            if (i > 0 && t <= idx[r * numKvTiles + i - 1])
              fail(fmt::format("{} is not above the previous entry {} (indices "
                               "must be strictly increasing)",
                               where, idx[r * numKvTiles + i - 1]));
            if (seen[t])
              fail(where + " is listed both partial and full");
            seen[t] = 1;
          }
        };
        checkList("kv_num_blocks", "kv_indices", kvNumBlocks, kvIndices);
        checkList("full_kv_num_blocks", "full_kv_indices", fullKvNumBlocks,
                  fullKvIndices);
      }
  if (cuSeqlensQ.size() != cuSeqlensK.size())
    fail(fmt::format("block_mask.cu_seqlens_q has {} entries but "
                     "cu_seqlens_k has {}",
                     cuSeqlensQ.size(), cuSeqlensK.size()));
}

void checkBlockMaskFor(const BlockMask &mask, int64_t blockM, int64_t blockN,
                       int64_t batch, int64_t headsQ, int64_t seqlenQ,
                       int64_t seqlenK, std::span<const int32_t> cuSeqlensQ,
                       std::span<const int32_t> cuSeqlensK) {
  mask.validate();
  checkBlockMaskFits(mask, blockM, blockN, batch, headsQ, seqlenQ, seqlenK,
                     cuSeqlensQ, cuSeqlensK);
}

void checkBlockMaskFits(const BlockMask &mask, int64_t blockM, int64_t blockN,
                        int64_t batch, int64_t headsQ, int64_t seqlenQ,
                        int64_t seqlenK, std::span<const int32_t> cuSeqlensQ,
                        std::span<const int32_t> cuSeqlensK) {
  if (mask.blockM != blockM || mask.blockN != blockN)
    fail(fmt::format("block_mask.block_m, block_n = {}, {}, but the kernel's "
                     "tiles are {} x {}",
                     mask.blockM, mask.blockN, blockM, blockN));
  if (mask.batch != 1 && mask.batch != batch)
    fail(fmt::format("block_mask.batch = {}, expected 1 or the batch {}",
                     mask.batch, batch));
  if (mask.heads != 1 && mask.heads != headsQ)
    fail(fmt::format("block_mask.heads = {}, expected 1 or heads_q {}",
                     mask.heads, headsQ));
  const char *which = cuSeqlensQ.empty() ? "" : " (the largest in the batch)";
  if (mask.seqlenQ != seqlenQ)
    fail(fmt::format("block_mask.seqlen_q = {}, but the call's seqlen_q{} is "
                     "{}",
                     mask.seqlenQ, which, seqlenQ));
  if (mask.seqlenK != seqlenK)
    fail(fmt::format("block_mask.seqlen_k = {}, but the call's seqlen_k{} is "
                     "{}",
                     mask.seqlenK, which, seqlenK));
  if (cuSeqlensQ.empty() && !mask.cuSeqlensQ.empty())
    fail("block_mask was built for a varlen batch (it has cu_seqlens); this "
         "call is not varlen");
  if (!cuSeqlensQ.empty() && !mask.cuSeqlensQ.empty()) {
    auto same = [](const std::vector<int32_t> &a, std::span<const int32_t> b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end());
    };
    for (auto [name, mine, call] :
         {std::tuple{"cu_seqlens_q", &mask.cuSeqlensQ, cuSeqlensQ},
          std::tuple{"cu_seqlens_k", &mask.cuSeqlensK, cuSeqlensK}})
      if (!same(*mine, call)) {
        size_t i = 0;
        while (i < mine->size() && i < call.size() && (*mine)[i] == call[i])
          ++i;
        if (i < mine->size() && i < call.size())
          fail(fmt::format("block_mask.{}[{}] = {}, but the call's {}[{}] = "
                           "{} (the mask was built for other sequences)",
                           name, i, (*mine)[i], name, i, call[i]));
        fail(fmt::format("block_mask.{} has {} entries, the call's {} has {}",
                         name, mine->size(), name, call.size()));
      }
  }
}

BlockMask blockMaskFromBsr(const BsrLayout &layout, int64_t seqlenQ,
                           int64_t seqlenK) {
  checkTiles("bsr", layout.blockM, layout.blockN, seqlenQ, seqlenK,
             layout.numQTiles, layout.numKvTiles);
  if (layout.heads < 1)
    fail(fmt::format("bsr.heads = {} must be >= 1", layout.heads));
  const int64_t rows = layout.heads * layout.numQTiles;
  const auto &off = layout.rowOffsets;
  const auto &col = layout.colIndices;
  if (static_cast<int64_t>(off.size()) != rows + 1)
    fail(fmt::format("row_offsets has {} entries, expected heads {} * "
                     "num_q_tiles {} + 1 = {}",
                     off.size(), layout.heads, layout.numQTiles, rows + 1));
  if (off[0] != 0)
    fail(fmt::format("row_offsets[0] = {}, expected 0", off[0]));
  for (int64_t r = 0; r < rows; ++r)
    if (off[r + 1] < off[r])
      fail(fmt::format("row_offsets[{}] = {} < row_offsets[{}] = {} (offsets "
                       "must not decrease)",
                       r + 1, off[r + 1], r, off[r]));
  if (off[rows] != static_cast<int64_t>(col.size()))
    fail(fmt::format("row_offsets[{}] = {}, but col_indices has {} entries",
                     rows, off[rows], col.size()));

  BlockMask bm;
  bm.blockM = layout.blockM;
  bm.blockN = layout.blockN;
  bm.seqlenQ = seqlenQ;
  bm.seqlenK = seqlenK;
  bm.batch = 1;
  bm.heads = layout.heads;
  bm.numQTiles = layout.numQTiles;
  bm.numKvTiles = layout.numKvTiles;
  bm.kvNumBlocks.assign(rows, 0);
  bm.fullKvNumBlocks.assign(rows, 0);
  bm.kvIndices.assign(rows * layout.numKvTiles, 0);
  bm.fullKvIndices.assign(rows * layout.numKvTiles, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t h = r / layout.numQTiles, m = r % layout.numQTiles;
    for (int32_t e = off[r]; e < off[r + 1]; ++e) {
      int32_t t = col[e];
      auto where = fmt::format("col_indices[h={}][row={}][{}] = {}", h, m,
                               e - off[r], t);
      if (t < 0)
        fail(where + " is negative");
      if (t >= layout.numKvTiles)
        fail(fmt::format("{} >= num_kv_tiles {}", where, layout.numKvTiles));
      if (e > off[r] && t <= col[e - 1])
        fail(fmt::format("{} is not above the previous entry {} (a row's "
                         "indices must be strictly increasing)",
                         where, col[e - 1]));
      bm.kvIndices[r * layout.numKvTiles + (e - off[r])] = t;
    }
    bm.kvNumBlocks[r] = off[r + 1] - off[r];
  }
  return bm;
}

void checkBackwardBlockTiles(const BlockMask &mask, int64_t qTile,
                             int64_t kvTile) {
  constexpr int64_t g = kBackwardKeyGroup;
  if (qTile <= 0 || kvTile <= 0 || kvTile % g != 0 || kvTile > 16 * g)
    fail(fmt::format("backward tiles {} x {} must be positive, with key "
                     "tiles a multiple of {} and at most {} keys",
                     qTile, kvTile, g, 16 * g));
  if (mask.blockN % g != 0)
    fail(fmt::format("block_mask.block_n = {} (keys per mask tile) is not a "
                     "multiple of {}: the backward kernel's tiles ({} query "
                     "rows x {} keys) take their class per {} keys, each "
                     "inside one mask tile ({} x {})",
                     mask.blockN, g, qTile, kvTile, g, mask.blockM,
                     mask.blockN));
  if (mask.blockM % qTile != 0)
    fail(fmt::format("block_mask.block_m = {} (queries per mask tile) is not "
                     "a multiple of the backward kernel's {} query rows per "
                     "tile: each of its tiles ({} x {}) must lie in one mask "
                     "tile's rows ({} x {})",
                     mask.blockM, qTile, qTile, kvTile, mask.blockM,
                     mask.blockN));
}

namespace {
/// The transposed class of one backward tile from the classes (0 unlisted,
/// 1 partial, 2 full) of its key groups' mask tiles: 0, 1 or 2, and the
/// key-group word of a partial one (TransposedBlockMask).
std::pair<int, int32_t> tileClass(const std::vector<int8_t> &cls, int64_t j,
                                  int64_t kvTile, int64_t maskBlockN) {
  bool anyListed = false, allFull = true, mixed = false;
  uint32_t word = 0;
  for (int64_t g = 0; g < kvTile / kBackwardKeyGroup; ++g) {
    int64_t t = (j * kvTile + g * kBackwardKeyGroup) / maskBlockN;
    if (t >= static_cast<int64_t>(cls.size()))
      break; // past the keys: does not count
    int c = cls[t];
    anyListed = anyListed || c != 0;
    allFull = allFull && c == 2;
    mixed = mixed || c != 1;
    if (c == 0)
      word |= 1u << g;
    else if (c == 2)
      word |= 1u << (16 + g);
  }
  if (!anyListed)
    return {0, 0};
  if (allFull)
    return {2, 0};
  return {1, mixed ? static_cast<int32_t>(word) : 0};
}
} // namespace

TransposedBlockMask transposeBlockMask(const BlockMask &mask, int64_t qTile,
                                       int64_t kvTile) {
  checkBackwardBlockTiles(mask, qTile, kvTile);
  TransposedBlockMask t;
  t.qTile = qTile;
  t.kvTile = kvTile;
  t.batch = mask.batch;
  t.heads = mask.heads;
  t.numQTiles = (mask.seqlenQ + qTile - 1) / qTile;
  t.numKvTiles = (mask.seqlenK + kvTile - 1) / kvTile;
  int64_t rows = t.batch * t.heads * t.numKvTiles;
  t.qNumBlocks.assign(rows, 0);
  t.fullQNumBlocks.assign(rows, 0);
  t.qIndices.assign(rows * t.numQTiles, 0);
  t.qKeyGroups.assign(rows * t.numQTiles, 0);
  t.fullQIndices.assign(rows * t.numQTiles, 0);
  const int64_t rq = mask.blockM / qTile;
  // Per mask row: the class of each mask key tile (0 unlisted, 1 partial,
  // 2 full); query tiles i of mask row m are visited in increasing order,
  // so every transposed list comes out increasing.
  std::vector<int8_t> cls(mask.numKvTiles);
  for (int64_t b = 0; b < mask.batch; ++b)
    for (int64_t h = 0; h < mask.heads; ++h)
      for (int64_t m = 0; m < mask.numQTiles; ++m) {
        int64_t row = mask.row(b, h, m);
        std::fill(cls.begin(), cls.end(), 0);
        for (int32_t e = 0; e < mask.kvNumBlocks[row]; ++e)
          cls[mask.kvIndices[row * mask.numKvTiles + e]] = 1;
        for (int32_t e = 0; e < mask.fullKvNumBlocks[row]; ++e)
          cls[mask.fullKvIndices[row * mask.numKvTiles + e]] = 2;
        int64_t iEnd = std::min((m + 1) * rq, t.numQTiles);
        for (int64_t j = 0; j < t.numKvTiles; ++j) {
          auto [c, word] = tileClass(cls, j, kvTile, mask.blockN);
          if (!c)
            continue;
          int64_t trow = (b * t.heads + h) * t.numKvTiles + j;
          std::vector<int32_t> &n = c == 1 ? t.qNumBlocks : t.fullQNumBlocks;
          std::vector<int32_t> &ix = c == 1 ? t.qIndices : t.fullQIndices;
          for (int64_t i = m * rq; i < iEnd; ++i) {
            int64_t at = trow * t.numQTiles + n[trow]++;
            ix[at] = static_cast<int32_t>(i);
            if (c == 1)
              t.qKeyGroups[at] = word;
          }
        }
      }
  return t;
}

} // namespace flashjit
