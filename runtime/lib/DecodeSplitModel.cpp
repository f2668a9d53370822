//===- DecodeSplitModel.cpp - How many key splits a decode call takes -----===//
//
// decodeNumSplits: the fewest splits within kTieMargin of the least
// modelled time, in microseconds, of the split kernel's waves plus the
// merge run() picks for that count (DecodeKernel.h: DecodeSplitShape,
// DecodeSplitModel).
//
// The model. G = batch x heads_kv x row tiles CTAs per split, S SMs,
// tiles = the longest sequence's key tiles, B = one tile's K + V bytes;
// with n splits each CTA streams t = ceil(tiles / n) + kCtaFixedTiles
// tiles' worth. The G n CTAs run in waves of up to kCtasPerSm x S: a wave
// with more than S CTAs costs kCtasPerSm x t x B / kSmBytesPerUs (its
// busiest SMs hold two CTAs, the device streams at its bandwidth), one
// with at most S costs t x B / kCtaBytesPerUs (one CTA per SM, below the
// device's bandwidth). M(1) = 0 (the kernel writes O). For n > 1 the
// merge run() picks: fused (decodeFusedMerge), the last CTA of a group
// loads 8 splits per step for each of its threads' (row, 4 columns) items,
// M = items x ceil(n / 8) x kFusedStepUs; the merge kernel over R = G x
// group rows rows, M = kMergeLaunchUs + max(walk, R x n x (Dv + 1) x 4 /
// (S x kSmBytesPerUs)) (the partials' bytes), walk = kMergeRoundUs x
// (ceil(n / 128) + ceil(n / (8 x groups))) for the parallel kernel (its
// groups = 128 / (Dv / 4) take 8 splits per load round), kSerialMergeSplitUs
// x n for the serial twin decodeSerialMerge takes at <= 8 splits over
// many rows.
//
// The fit (session 19, H100, bf16, D = 128, [.decodesplitbench] and
// [.decodemergebench]). The merge alone at 32 rows: 4.4-4.7 us for 4-128
// splits, 5.9 at 244 (10 rounds), hence ~4.0 + 0.2 per round; at 2048
// rows it is the partials' bytes at ~3 TB/s (128 splits: 135 MB, 48 us);
// the serial walk ~0.125 us per split at 32-256 rows. The split kernel:
// every sweep row is ~11-30 us above a pure streaming time (the flush's
// dirty L2 lines, the launch: the same for every count of a shape, so
// it is left out); beyond it GQA B = 8 Nk = 32k streams 1.07 GB at 2
// CTAs per SM (4 splits) at 3.0-3.1 TB/s = 23.5 KB/us per SM, and at one
// CTA per SM (2 splits) 2% slower; MQA B = 1 Nk = 128k at 64 splits (one
// CTA on 64 SMs, 32 tiles) ~22 KB/us per CTA, well below the device's
// bandwidth, so a lone CTA's rate is its own, not a share; 128 splits
// (16 tiles, one per SM) beat 244 (9 tiles, two per SM) by 5 us, which
// only a fixed cost per CTA explains: 2.2 tiles (a 2-CTA SM streams 2 x
// (9 + 2.2) tiles against 16 + 2.2). Session 17's model (one rate per
// slot, so one CTA per SM at half speed; a merge of 6 + 0.33 n us, the
// serial kernel's) is replaced: with the parallel merge it would move
// MQA B = 1 128k to 244 splits, which the sweep measured 11% slower.
// Picks on the sweep's shapes (H100, 132 SMs), measured best in brackets:
// GQA 32/8 B = 1 Nk = 32k 16 (16: 2.03 TB/s), 128k 32 (16-33 within 2%),
// B = 8 32k 4 (4: 2.85), B = 64 4k 1 (1: 2.90); MQA 32/1 B = 1 32k 128
// (122-132: 0.74), 128k 128 (128: 1.49), B = 8 32k 16 (16: 2.00), B = 64
// 4k 2 (2: 1.92, serial merge 1.98). The tie margin keeps near ties on the
// fewer splits (GQA B = 8's 2 and 4 are 2.5% apart in the model).
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/DecodeKernel.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace flashjit::runtime {

namespace {

[[noreturn]] void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

void checkShape(const DecodeSplitShape &s) {
  auto atLeast = [](const char *name, int64_t v, int64_t least) {
    if (v < least)
      fail(fmt::format("decode split shape: {} = {}, expected >= {}", name, v,
                       least));
  };
  atLeast("batch", s.batch, 0);
  atLeast("heads_kv", s.headsKV, 1);
  atLeast("row_tiles", s.rowTiles, 1);
  atLeast("group_rows", s.groupRows, 1);
  atLeast("max_seq_len", s.maxSeqLen, 0);
  atLeast("block_n", s.blockN, 1);
  atLeast("tile_bytes", s.tileBytes, 1);
  atLeast("head_dim_v", s.headDimV, 1);
  atLeast("threads", s.threads, 1);
  atLeast("sm_count", s.smCount, 1);
  // Far above any real call; keeps the products in range.
  constexpr int64_t kBig = int64_t(1) << 31;
  for (auto [name, v] :
       {std::pair{"batch", s.batch}, std::pair{"heads_kv", s.headsKV},
        std::pair{"row_tiles", s.rowTiles},
        std::pair{"group_rows", s.groupRows},
        std::pair{"max_seq_len", s.maxSeqLen},
        std::pair{"tile_bytes", s.tileBytes},
        std::pair{"head_dim_v", s.headDimV}})
    if (v > kBig)
      fail(fmt::format("decode split shape: {} = {}, expected <= 2^31", name,
                       v));
}

int64_t mostSplits(const DecodeSplitShape &s) {
  const int64_t tiles = (s.maxSeqLen + s.blockN - 1) / s.blockN;
  return std::clamp<int64_t>(
      tiles / DecodeSplitModel::kMinTilesPerSplit, 1,
      std::min<int64_t>(DecodeSplitModel::kMaxSplits, 65535 / s.rowTiles));
}

/// The split kernel's waves (DecodeSplitModel.cpp's formula).
double splitKernelUs(const DecodeSplitShape &s, int64_t n) {
  using M = DecodeSplitModel;
  const int64_t tiles = (s.maxSeqLen + s.blockN - 1) / s.blockN;
  const double perCta =
      (double((tiles + n - 1) / n) + M::kCtaFixedTiles) * double(s.tileBytes);
  const double ctas =
      double(s.batch) * double(s.headsKV) * double(s.rowTiles) * double(n);
  const double sms = double(s.smCount), wave = M::kCtasPerSm * sms;
  const double full = std::floor(ctas / wave), rest = ctas - full * wave;
  const double busy = M::kCtasPerSm * perCta / M::kSmBytesPerUs;
  double t = full * busy;
  if (rest > sms)
    t += busy;
  else if (rest > 0)
    t += perCta / M::kCtaBytesPerUs;
  return t;
}

/// The merge kernel's time for n splits (DecodeSplitModel.cpp's formula).
double mergeKernelUs(const DecodeSplitShape &s, int64_t n) {
  using M = DecodeSplitModel;
  const double rows = double(s.batch) * double(s.headsKV) * double(s.rowTiles) *
                      double(s.groupRows);
  const double bytes = rows * double(n) * double(s.headDimV + 1) * 4.0 /
                       (double(s.smCount) * M::kSmBytesPerUs);
  double walk = 0.0;
  const int64_t rowCount = int64_t(std::clamp(rows, 1.0, 1e18));
  if (decodeSerialMerge(n, rowCount, s.smCount)) {
    walk = M::kSerialMergeSplitUs * double(n);
  } else {
    const int64_t groups =
        std::max<int64_t>(1, 128 / std::max<int64_t>(1, s.headDimV / 4));
    walk = M::kMergeRoundUs *
           double((n + 127) / 128 + (n + 8 * groups - 1) / (8 * groups));
  }
  return M::kMergeLaunchUs + std::max(walk, bytes);
}

} // namespace

double decodeSplitTimeUs(const DecodeSplitShape &s, int64_t numSplits) {
  checkShape(s);
  if (numSplits < 1 || numSplits > (int64_t(1) << 20))
    fail(fmt::format("decodeSplitTimeUs: num_splits = {}, expected 1..2^20",
                     numSplits));
  const int64_t n = numSplits;
  const double t = splitKernelUs(s, n);
  if (n == 1)
    return t;
  if (decodeFusedMerge(n, s.groupRows, s.headDimV, s.threads)) {
    const int64_t items =
        (s.groupRows * ((s.headDimV + 3) / 4) + s.threads - 1) / s.threads;
    return t + double(items * ((n + 7) / 8)) * DecodeSplitModel::kFusedStepUs;
  }
  return t + mergeKernelUs(s, n);
}

int decodeNumSplits(const DecodeSplitShape &s) {
  checkShape(s);
  if (s.batch == 0)
    return 1;
  const int64_t most = mostSplits(s);
  std::vector<double> times;
  for (int64_t n = 1; n <= most; ++n)
    times.push_back(decodeSplitTimeUs(s, n));
  const double least = *std::min_element(times.begin(), times.end());
  int64_t n = 1;
  while (times[size_t(n - 1)] > least * (1.0 + DecodeSplitModel::kTieMargin))
    ++n;
  return static_cast<int>(n);
}

int decodeNumSplitsWaves(int64_t batch, int64_t headsKV, int64_t rowTiles,
                         int64_t maxSeqLen, int blockN, int smCount) {
  const int64_t ctas = batch * headsKV * rowTiles;
  const int64_t tiles = (maxSeqLen + blockN - 1) / blockN;
  const int64_t slots = 2 * int64_t(std::max(smCount, 1));
  const int64_t most = std::clamp<int64_t>(
      tiles / 4, 1,
      std::min<int64_t>(256, 65535 / std::max<int64_t>(rowTiles, 1)));
  if (ctas <= 0 || ctas >= slots)
    return 1;
  auto efficiency = [&](int64_t n) {
    const double waves = double(ctas * n) / double(slots);
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int64_t n = 1; n <= most; ++n)
    best = std::max(best, efficiency(n));
  for (int64_t n = 1; n <= most; ++n)
    if (efficiency(n) >= 0.95 * best)
      return static_cast<int>(n);
  return 1;
}

bool decodeFusedMerge(int64_t numSplits, int64_t groupRows, int64_t headDimV,
                      int threads) {
  if (numSplits < 1 || groupRows < 1 || headDimV < 1 || threads < 1)
    fail(fmt::format("decodeFusedMerge: num_splits = {}, group rows = {}, "
                     "head_dim_v = {}, threads = {} (expected >= 1)",
                     numSplits, groupRows, headDimV, threads));
  // Far above any call run() takes; keeps the products below in range.
  constexpr int64_t kBig = int64_t(1) << 20;
  if (numSplits > kBig || groupRows > kBig || headDimV > kBig)
    return false;
  // DecodeMerge.cpp: (row, 4 columns) items over the threads, 8 splits'
  // loads per step.
  const int64_t items =
      (groupRows * ((headDimV + 3) / 4) + threads - 1) / threads;
  const int64_t steps = (numSplits + 7) / 8;
  return items * steps <= kFusedMergeSteps;
}

bool decodeSerialMerge(int64_t numSplits, int64_t rows, int smCount) {
  if (numSplits < 1 || rows < 1 || smCount < 1)
    fail(fmt::format("decodeSerialMerge: num_splits = {}, rows = {}, "
                     "sm_count = {} (expected >= 1)",
                     numSplits, rows, smCount));
  return numSplits <= kSerialMergeMaxSplits &&
         rows > kParallelMergeCtasPerSm * int64_t(smCount);
}

} // namespace flashjit::runtime
