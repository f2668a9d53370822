//===- DecodeSplitModel.cpp - How many key splits a decode call takes -----===//
//
// decodeNumSplits: the split count with the least modelled time, in
// microseconds, of the split kernel's waves plus the merge run() picks for
// that count (DecodeKernel.h: DecodeSplitShape, DecodeSplitModel).
//
// The model. G = batch x heads_kv x row tiles CTAs per split, tiles = the
// longest sequence's key tiles; with n splits:
//   T(n) = ceil(G n / S) x ceil(tiles / n) x tileBytes / R     (split)
//        + M(n)                                                 (merge)
// S = kCtasPerSm x SMs resident slots (ptxas: 183-245 registers x 128
// threads and 45-102 KiB of shared memory: 2 per SM, for GQA and MQA
// packings alike: one kernel, block_m 64), R = kSlotBytesPerUs (one slot's
// share of the DRAM bandwidth with every slot busy). M(1) = 0 (the kernel
// writes O). For n > 1 the merge decodeFusedMerge picks: fused, the last
// CTA of a group loads 8 splits per step for each of its threads' (row, 4
// columns) items, one dependent round each, M = items x ceil(n / 8) x
// kMergeSplitUs; separate, the merge kernel (one CTA per row, all rows at
// once) walks the n splits one after another in two passes, M =
// kMergeLaunchUs + n x kMergeSplitUs. The pick is the smallest n in
// [1, most] with the least T.
//
// Why: session 16's rule (decodeNumSplitsWaves, kept for the benchmark)
// filled the 2 x SM slots with the least wave loss and ignored the merge.
// That is right while the merge is cheap (GQA 32/8: 4 rows per group, a
// fused merge of 1 item x 4 steps at 32 splits), but MQA 32/1 at B = 1
// has one group whose 32 rows the merge kernel walks serially over every
// split: 244 splits cost more in the merge than they save in the split
// kernel. Session 17's H100 sweep (MQA B = 1, Nk = 128k, separate merge):
// 33 / 66 / 132 / 176 / 244 splits at 120 / 73 / 65 / 79 / 87 us; a fit of
// T = a x split waves + b x n + c gives b = 0.31 us per split (the 66 /
// 132 and 132 / 244 pairs alone: 0.33 and 0.31), hence kMergeSplitUs =
// 0.33; the fused merge's step is taken to cost the same (one round of
// dependent loads; not measured apart). R = 3.2 TB/s / 264 slots = 12 KB/us
// puts one key tile (64 keys, D = 128, bf16: 32 KiB) at 2.73 us, so a split
// costs 0.12 tiles of merge: T(n) ~ 2.73 ceil(2048 / n) + 0.33 n, least at n =
// 128 (16 tiles per CTA; 137 needs 15 but 9 more splits' walk). GQA keeps its
// picks: B = 1 at 32 (33 is one tile less but 5 steps: the merge kernel's
// launch and walk), B = 8 at Nk = 32k 4, B = 64 at Nk = 4k 1 (512 CTAs:
// 2 waves either way).
//
// Session 19: the merge kernel no longer walks the splits serially (groups
// of head_dim_v / 4 threads take slices of a row's splits, 8 splits' loads
// in flight per step: ~ceil(n / 128) + ceil(n / (8 x groups)) load rounds,
// 5 at n = 128, D = 128, instead of n). The separate term above still
// holds the serial kernel's fit: it overstates the merge for the MQA
// picks (fewer splits than the new kernel would justify), and is kept
// until a device sweep ([.decodesplitbench] with both merges,
// [.decodemergebench]) measures the new kernel's launch and per-round
// cost. Replacing n by that round count with today's constants would move
// MQA B = 1, Nk = 128k from 128 to 256 splits (likely right) but also GQA
// B = 8, Nk = 32k from 4 to 103 (a near tie, 349.0 vs 349.9 us modelled,
// not evidence), so a recalibration needs the measured curve and a tie
// margin.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/DecodeKernel.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

} // namespace

double decodeSplitTimeUs(const DecodeSplitShape &s, int64_t numSplits) {
  checkShape(s);
  if (numSplits < 1 || numSplits > (int64_t(1) << 20))
    fail(fmt::format("decodeSplitTimeUs: num_splits = {}, expected 1..2^20",
                     numSplits));
  using M = DecodeSplitModel;
  const int64_t n = numSplits;
  const double ctas =
      double(s.batch) * double(s.headsKV) * double(s.rowTiles) * double(n);
  const double slots = double(M::kCtasPerSm) * s.smCount;
  const int64_t tiles = (s.maxSeqLen + s.blockN - 1) / s.blockN;
  const double perCta = double((tiles + n - 1) / n);
  double t = std::ceil(ctas / slots) * perCta * double(s.tileBytes) /
             M::kSlotBytesPerUs;
  if (n == 1)
    return t;
  if (decodeFusedMerge(n, s.groupRows, s.headDimV, s.threads)) {
    const int64_t items =
        (s.groupRows * ((s.headDimV + 3) / 4) + s.threads - 1) / s.threads;
    return t + double(items * ((n + 7) / 8)) * M::kMergeSplitUs;
  }
  return t + M::kMergeLaunchUs + double(n) * M::kMergeSplitUs;
}

int decodeNumSplits(const DecodeSplitShape &s) {
  checkShape(s);
  if (s.batch == 0)
    return 1;
  int64_t best = 1;
  double bestTime = decodeSplitTimeUs(s, 1);
  for (int64_t n = 2, most = mostSplits(s); n <= most; ++n)
    if (double t = decodeSplitTimeUs(s, n); t < bestTime) {
      best = n;
      bestTime = t;
    }
  return static_cast<int>(best);
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

} // namespace flashjit::runtime
