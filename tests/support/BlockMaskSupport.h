//===- BlockMaskSupport.h - Block masks and documents for tests -*- C++ -*-===//
//
// Shared by the CPU block-sparse tests and the [gpu] ones: random document
// ids, random block-sparse layouts, and block-mask equality over the used
// entries only.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_SUPPORT_BLOCKMASKSUPPORT_H
#define FLASHJIT_TESTS_SUPPORT_BLOCKMASKSUPPORT_H

#include "flashjit/frontend/BlockMask.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace flashjit::testing {

/// Random documents over \p n tokens: mostly short ones (1-token documents
/// included, others up to \p maxLen tokens), or (\p whole) one document
/// covering everything.
template <class Rng>
std::vector<int32_t> randomDocs(Rng &rng, int64_t n, bool whole,
                                int64_t maxLen = 90) {
  std::vector<int32_t> doc(std::max<int64_t>(n, 1), 0);
  int32_t id = 0;
  for (int64_t t = 0; t < n && !whole;) {
    int64_t len = rng() % 3 == 0 ? 1 : 1 + rng() % (rng() % 2 ? 8 : maxLen);
    for (int64_t e = t + len; t < e && t < n; ++t)
      doc[t] = id;
    ++id;
  }
  return doc;
}

/// "" when \p a and \p b are the same block mask (only the used part of each
/// row of indices is compared), else the first difference.
inline std::string blockMaskDifference(const BlockMask &a, const BlockMask &b) {
  std::ostringstream d;
  auto field = [&](const char *name, auto x, auto y) {
    if (x != y && d.str().empty())
      d << name << ": " << x << " vs " << y;
  };
  field("block_m", a.blockM, b.blockM);
  field("block_n", a.blockN, b.blockN);
  field("seqlen_q", a.seqlenQ, b.seqlenQ);
  field("seqlen_k", a.seqlenK, b.seqlenK);
  field("batch", a.batch, b.batch);
  field("heads", a.heads, b.heads);
  field("num_q_tiles", a.numQTiles, b.numQTiles);
  field("num_kv_tiles", a.numKvTiles, b.numKvTiles);
  field("cu_seqlens_q", a.cuSeqlensQ.size(), b.cuSeqlensQ.size());
  if (!d.str().empty())
    return d.str();
  if (a.cuSeqlensQ != b.cuSeqlensQ || a.cuSeqlensK != b.cuSeqlensK)
    return "cu_seqlens differ";
  for (size_t r = 0; r < a.kvNumBlocks.size(); ++r) {
    field("kv_num_blocks[row]", a.kvNumBlocks[r], b.kvNumBlocks[r]);
    field("full_kv_num_blocks[row]", a.fullKvNumBlocks[r],
          b.fullKvNumBlocks[r]);
    for (int64_t i = 0; d.str().empty() && i < a.numKvTiles; ++i) {
      size_t e = r * a.numKvTiles + i;
      if (i < a.kvNumBlocks[r])
        field("kv_indices[row][i]", a.kvIndices[e], b.kvIndices[e]);
      if (i < a.fullKvNumBlocks[r])
        field("full_kv_indices[row][i]", a.fullKvIndices[e],
              b.fullKvIndices[e]);
    }
    if (!d.str().empty()) {
      d << " (row " << r << ")";
      return d.str();
    }
  }
  return "";
}

/// A random BSR layout over \p heads x ceil(sq / bm) rows: each row empty,
/// full or a random 40% of the key tiles.
template <class Rng>
BsrLayout randomBsr(Rng &rng, int64_t heads, int64_t bm, int64_t bn, int64_t sq,
                    int64_t sk) {
  BsrLayout l;
  l.blockM = bm;
  l.blockN = bn;
  l.heads = heads;
  l.numQTiles = (sq + bm - 1) / bm;
  l.numKvTiles = (sk + bn - 1) / bn;
  l.rowOffsets = {0};
  for (int64_t r = 0; r < heads * l.numQTiles; ++r) {
    int kind = rng() % 4; // 0 empty, 1 full, else random
    for (int32_t t = 0; t < l.numKvTiles; ++t)
      if (kind == 1 || (kind >= 2 && rng() % 5 < 2))
        l.colIndices.push_back(t);
    l.rowOffsets.push_back(static_cast<int32_t>(l.colIndices.size()));
  }
  return l;
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_SUPPORT_BLOCKMASKSUPPORT_H
