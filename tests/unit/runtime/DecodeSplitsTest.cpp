//===- DecodeSplitsTest.cpp - The decode split-count heuristic ------------===//
#include "flashjit/runtime/DecodeKernel.h"

#include <catch2/catch.hpp>

using flashjit::runtime::decodeNumSplits;

TEST_CASE("decode splits fill the SMs with little wave loss",
          "[runtime][decode]") {
  // H200: 132 SMs, 2 CTAs each = 264 slots; block_n 64.
  // B=8, 8 KV heads: 64 CTAs; 4 splits = 256 CTAs (97% of one wave).
  CHECK(decodeNumSplits(8, 8, 1, 32768, 64, 132) == 4);
  // One sequence: 8 CTAs; 32 splits = 256 (33 would be exact, 32 is the
  // smallest within 5%).
  CHECK(decodeNumSplits(1, 8, 1, 131072, 64, 132) == 32);
  // Enough CTAs already: no split.
  CHECK(decodeNumSplits(64, 8, 1, 4096, 64, 132) == 1);
  // Short sequences: at most one split per 4 key tiles.
  CHECK(decodeNumSplits(1, 1, 1, 64 * 8, 64, 132) == 2);
  CHECK(decodeNumSplits(1, 1, 1, 10, 64, 132) == 1);
  CHECK(decodeNumSplits(1, 1, 1, 0, 64, 132) == 1);
  // Every result is in [1, 256].
  for (int64_t b : {1, 3, 17})
    for (int64_t n : {1, 1000, 1 << 20}) {
      int s = decodeNumSplits(b, 2, 2, n, 64, 132);
      CHECK(s >= 1);
      CHECK(s <= 256);
    }
}
