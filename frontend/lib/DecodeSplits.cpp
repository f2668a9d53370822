//===- DecodeSplits.cpp - The key tiles a decode call's splits cover ------===//
//
// Two binary searches per group: the longest leading run of key tiles the
// classifier proves empty (boxes [0, mid tiles)), then the longest trailing
// run (boxes [last mid tiles, seqlen_k)). Each search keeps lo = a run length
// proven empty (a box classified Empty, or 0) and hi = the longest run not
// yet excluded; bit_width(tiles) steps bring hi down to lo, so the result
// rests on a box the classifier itself called empty, whatever its answers
// elsewhere.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/DecodeSplits.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <algorithm>
#include <bit>

namespace flashjit {
namespace {

[[noreturn]] void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

/// The longest run of up to \p limit tiles that \p emptyRun(n) proves empty
/// (n tiles, 1 <= n <= limit), by \p steps halvings.
int64_t longestEmptyRun(int64_t limit, int steps,
                        const std::function<bool(int64_t)> &emptyRun) {
  int64_t lo = 0, hi = limit;
  for (int i = 0; i < steps; ++i) {
    if (lo >= hi)
      break;
    const int64_t mid = (lo + hi + 1) / 2;
    if (emptyRun(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

} // namespace

KeyTiles visibleKeyTiles(const KeysMayBeVisible &visible, int64_t seqLenK,
                         int64_t blockN) {
  if (blockN < 1)
    fail(fmt::format("block_n = {}, expected >= 1", blockN));
  if (seqLenK < 0)
    fail(fmt::format("seqlen_k = {} is negative", seqLenK));
  const int64_t tiles = (seqLenK + blockN - 1) / blockN;
  const int steps = std::bit_width(static_cast<uint64_t>(tiles));
  const int64_t lead = longestEmptyRun(tiles, steps, [&](int64_t n) {
    return !visible(0, std::min(n * blockN, seqLenK) - 1);
  });
  const int64_t trail = longestEmptyRun(tiles - lead, steps, [&](int64_t n) {
    return !visible((tiles - n) * blockN, seqLenK - 1);
  });
  return {lead, tiles - 1 - trail};
}

KeyTiles decodeVisibleKeyTiles(const AttentionSpec &spec, const Arguments &args,
                               IndexRange batch, IndexRange heads,
                               IndexRange queries, int64_t qLen,
                               int64_t seqLenK, int64_t blockN) {
  for (auto [name, r] : {std::pair{"batch", batch}, std::pair{"heads", heads},
                         std::pair{"queries", queries}})
    if (r.lo < 0 || r.hi < r.lo)
      fail(fmt::format("decode key tiles: {} [{}, {}] is empty or negative",
                       name, r.lo, r.hi));
  if (queries.hi >= qLen)
    fail(fmt::format("decode key tiles: queries [{}, {}] outside q_len = {}",
                     queries.lo, queries.hi, qLen));
  const Expr mask = spec.effectiveMask();
  auto *k = llvm::dyn_cast<ConstantExpr>(mask.get());
  const bool none = k && k->boolValue();
  TileBox box{batch, heads, queries, {}, qLen, seqLenK};
  return visibleKeyTiles(
      [&](int64_t lo, int64_t hi) {
        if (none)
          return true;
        box.kv = {lo, hi};
        return classifyTile(mask, box, args) != TileClass::Empty;
      },
      seqLenK, blockN);
}

KeyTiles decodeSplitTiles(const KeyTiles &visible, int64_t numSplits,
                          int64_t split) {
  if (numSplits < 1 || split < 0 || split >= numSplits)
    fail(fmt::format("decode split {} of num_splits = {}: expected 0 <= split "
                     "< num_splits",
                     split, numSplits));
  const int64_t count = visible.count();
  const int64_t per = (count + numSplits - 1) / numSplits;
  const int64_t begin = visible.first + split * per;
  return {begin, std::min(visible.first + count, begin + per) - 1};
}

} // namespace flashjit
