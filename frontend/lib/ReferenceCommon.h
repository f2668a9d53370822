//===- ReferenceCommon.h - Shared parts of the references -------*- C++ -*-===//
//
// What the float64 references (forward and backward) share: the state of
// every key tile of one row of a BlockMask, and the row maximum. Private to
// frontend/lib.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_LIB_REFERENCECOMMON_H
#define FLASHJIT_FRONTEND_LIB_REFERENCECOMMON_H

#include "flashjit/frontend/BlockMask.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace flashjit::detail {

/// Key-tile states: not listed (never visited), listed partial (the mask is
/// evaluated), listed full (every key allowed).
constexpr char kSkip = 0, kMasked = 1, kAllowed = 2;

/// The tile states of row (b, h, m) of \p bm (shared extents reduced to 0).
inline std::vector<char> tileStates(const BlockMask &bm, int64_t b, int64_t h,
                                    int64_t m) {
  std::vector<char> st(bm.numKvTiles, kSkip);
  int64_t r = bm.row(bm.batch == 1 ? 0 : b, bm.heads == 1 ? 0 : h, m);
  for (int32_t i = 0; i < bm.kvNumBlocks[r]; ++i)
    st[bm.kvIndices[r * bm.numKvTiles + i]] = kMasked;
  for (int32_t i = 0; i < bm.fullKvNumBlocks[r]; ++i)
    st[bm.fullKvIndices[r * bm.numKvTiles + i]] = kAllowed;
  return st;
}

/// max(a, b) that propagates NaN, as the kernels' row maximum does
/// (IEEE maximum): a NaN score at an allowed key makes the row's O and LSE
/// NaN (std::max would drop it when it comes second).
inline double nanMax(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
}

} // namespace flashjit::detail

#endif // FLASHJIT_FRONTEND_LIB_REFERENCECOMMON_H
