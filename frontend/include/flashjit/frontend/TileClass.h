//===- TileClass.h - Classifying mask tiles by interval arithmetic -*- C++ -*-//
//
// For a block of queries x a block of keys, a mask is all-true (Full: no
// per-element mask code needs to run), all-false (Empty: the key tile is
// never loaded) or mixed (Partial). classifyTile() decides this by
// evaluating the mask over intervals (Moore, "Interval Analysis", 1966): each
// index leaf ranges over the tile, so the answer is sound for any mask, and
// exact for masks that compare independent functions of q_idx and kv_idx:
// causal in both alignments, sliding windows (with or without the current
// token), prefix-LM and chunked, and conjunctions of causal, sliding windows
// and prefix-LM. A conjunction with chunked is exact when the chunk size is
// a multiple of both tile sizes (every tile then lies in one chunk);
// otherwise each conjunct is judged on its own and a tile that neither
// conjunct empties alone may come out Partial though it is empty (sound,
// only slower). Masks that read floats come out Partial, and so do masks
// that read buffers unless the optional buffer-range rule is on
// (TileClassOptions::bufferRanges): a read of an integer buffer at an index
// interval of at most kBufferRangeScanLimit indices, all inside the buffer,
// then ranges over the minimum and maximum of those elements. Document
// masks (`doc[q_idx] == doc[kv_idx]` over consecutive document ids) are
// exact under it.
//
// The compiler emits the same interval arithmetic as code, so the kernel
// classifies tiles at run time from the real sequence lengths; this host
// version is the specification it is tested against.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_TILECLASS_H
#define FLASHJIT_FRONTEND_TILECLASS_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Expr.h"

#include <cstdint>
#include <functional>

namespace flashjit {

/// What a tile of the mask holds.
enum class TileClass : uint8_t { Empty, Partial, Full };
/// "empty" / "partial" / "full".
std::string_view toString(TileClass c);

/// A closed integer interval [lo, hi].
struct IndexRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

/// The index ranges of one tile; seqlens are exact per call.
struct TileBox {
  IndexRange batch;
  IndexRange head;
  IndexRange q;
  IndexRange kv;
  int64_t seqlenQ = 0;
  int64_t seqlenK = 0;
};

/// The ranges of all six index leaves (a TileBox whose seqlens may vary
/// too: a varlen or decode call's sequences of several lengths).
struct IndexBox {
  IndexRange batch;
  IndexRange head;
  IndexRange q;
  IndexRange kv;
  IndexRange seqlenQ;
  IndexRange seqlenK;
};

/// The most indices the buffer-range rule reads for one buffer read of one
/// tile. 1024 covers a q or kv tile side (at most 128 in every kernel) with
/// room to spare, and bounds the scan at a quarter of the elements of a
/// 64 x 64 tile (the element evaluation it replaces): a 2-D index such as
/// `q_idx * seqlen_k + kv_idx` spans about block_m * seqlen_k indices, so
/// it is scanned only for seqlen_k <= 1024 / block_m (16 keys for 64-row
/// tiles) and stays unknown otherwise.
inline constexpr int64_t kBufferRangeScanLimit = 1024;

/// Options of classifyTile().
struct TileClassOptions {
  /// The buffer-range rule: a read of an integer buffer bound in the
  /// Arguments (with the element type the mask reads) whose index is a
  /// bounded interval [lo, hi] with 0 <= lo, hi < size and
  /// hi - lo + 1 <= kBufferRangeScanLimit is the interval [min, max] of
  /// elements lo..hi. Any other buffer read stays unknown; so does one that
  /// may leave the buffer, so that a tile depending on it is evaluated per
  /// element and its out-of-range reads are reported.
  bool bufferRanges = false;
};

/// Classifies \p mask (bool) over \p box. Parameters found in \p args are
/// treated as their exact values, others (and floats) as unknown; buffers
/// are unknown unless \p options enables the buffer-range rule.
/// Never returns Full or Empty unless every point of the box agrees.
TileClass classifyTile(const Expr &mask, const TileBox &box,
                       const Arguments &args = {},
                       const TileClassOptions &options = {});

/// Tile counts over a whole seqlen_q x seqlen_k problem.
struct TileCounts {
  int64_t full = 0;
  int64_t partial = 0;
  int64_t empty = 0;
  bool operator==(const TileCounts &) const = default;
};

/// Counts tiles of block_m queries x block_n keys (edge tiles clipped to the
/// sequence; batch 0, head 0), classifying each box with \p classify.
/// Throws UserError unless block_m and block_n are positive.
TileCounts
countTilesBy(int64_t seqlenQ, int64_t seqlenK, int64_t blockM, int64_t blockN,
             const std::function<TileClass(const TileBox &)> &classify);

/// countTilesBy() with classifyTile().
TileCounts countTiles(const Expr &mask, int64_t seqlenQ, int64_t seqlenK,
                      int64_t blockM, int64_t blockN,
                      const Arguments &args = {},
                      const TileClassOptions &options = {});

/// The same counts by evaluating the mask at every element (the oracle).
TileCounts bruteForceTileCounts(const Expr &mask, int64_t seqlenQ,
                                int64_t seqlenK, int64_t blockM, int64_t blockN,
                                const Arguments &args = {});

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_TILECLASS_H
