//===- DecodeSplits.h - The key tiles a decode call's splits cover -*- C++
//-*-===//
//
// Split-KV decoding (issue 17) over the keys a row can see: a sliding-window
// row (window w, query length L) sees only the keys in about
// [seqlen_k - L - w, seqlen_k), so the splits of a (sequence, KV head, row
// tile) group divide the tiles that may hold such a key, not the whole
// sequence. Which tiles: the leading and trailing runs of key tiles that the
// mask is Empty on for every row of the group, found by binary search with
// tile classification (TileClass.h) over the boxes [0, k) and [k, seqlen_k).
// A run is only ever taken as empty where the classifier said so for the
// whole run, so no visible key is dropped for any mask; for masks whose
// visible keys form one interval (causal, sliding windows, chunked) and
// which classify exactly, the range is tight to the tile.
//
// This is the host twin of the GPU decode kernel's split plan
// (FlashDecodeKernel.cpp emits the same search and division): the runtime
// picks the number of splits from it and the CPU decode gathers only these
// keys.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_DECODESPLITS_H
#define FLASHJIT_FRONTEND_DECODESPLITS_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/TileClass.h"
#include "flashjit/frontend/Variant.h"

#include <cstdint>
#include <functional>

namespace flashjit {

/// Key tiles [first, last] of block_n keys each (tile j: keys
/// [j * block_n, (j + 1) * block_n)); none when last < first.
struct KeyTiles {
  int64_t first = 0;
  int64_t last = -1;
  /// The number of tiles, 0 when none.
  int64_t count() const { return last >= first ? last - first + 1 : 0; }
  bool operator==(const KeyTiles &) const = default;
};

/// Whether some row of the group may see a key in [kvLo, kvHi] (closed;
/// 0 <= kvLo <= kvHi < seqlen_k): false only when that is proven.
using KeysMayBeVisible = std::function<bool(int64_t kvLo, int64_t kvHi)>;

/// The key tiles of a sequence of \p seqLenK keys that may hold a visible
/// key: tiles 0..ceil(seqLenK / blockN) - 1 less the longest leading and
/// trailing runs that \p visible proved empty, found by binary search
/// (bit_width(tiles) calls for each end; exactly the GPU kernel's search).
/// Throws UserError for blockN < 1 or seqLenK < 0.
KeyTiles visibleKeyTiles(const KeysMayBeVisible &visible, int64_t seqLenK,
                         int64_t blockN);

/// visibleKeyTiles for the rows of \p spec (its effective mask, causal
/// included) in the box: batch [batchLo, batchHi], query heads [headLo,
/// headHi], queries [qLo, qHi] of a call with \p qLen queries per sequence,
/// each sequence \p seqLenK keys long; \p args' parameters are exact
/// (classifyTile). Without a mask every tile. Throws UserError as
/// visibleKeyTiles, or for an empty or negative box.
KeyTiles decodeVisibleKeyTiles(const AttentionSpec &spec, const Arguments &args,
                               IndexRange batch, IndexRange heads,
                               IndexRange queries, int64_t qLen,
                               int64_t seqLenK, int64_t blockN);

/// The tiles split \p split of \p numSplits takes of \p visible:
/// ceil(count / numSplits) tiles each from visible.first on, the last
/// splits short or empty (the GPU kernel's division). Throws UserError
/// unless 0 <= split < numSplits.
KeyTiles decodeSplitTiles(const KeyTiles &visible, int64_t numSplits,
                          int64_t split);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_DECODESPLITS_H
