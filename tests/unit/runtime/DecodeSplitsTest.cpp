//===- DecodeSplitsTest.cpp - Decode split counts and workspaces ----------===//
#include "flashjit/runtime/DecodeKernel.h"

#include <catch2/catch.hpp>

#include <random>

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

TEST_CASE("a decode call's workspace parts are aligned, disjoint and sized",
          "[runtime][decode]") {
  using flashjit::runtime::decodeWorkspaceLayout;
  using flashjit::runtime::DecodeWorkspaceLayout;
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> rowsD(1, 5000), splitsD(1, 300),
      dimD(1, 300);
  std::uniform_int_distribution<size_t> bufD(0, 5);
  for (int i = 0; i < 200; ++i) {
    const int64_t rows = rowsD(rng), splits = splitsD(rng), dv = dimD(rng);
    const size_t buffers = bufD(rng);
    INFO("rows " << rows << " splits " << splits << " head_dim_v " << dv
                 << " buffers " << buffers);
    DecodeWorkspaceLayout l = decodeWorkspaceLayout(rows, splits, dv, buffers);
    // The kernels' indexing: partial O [splits, rows, dv] fp32, partial LSE
    // [splits, rows] then the scratch LSE [rows], one i32 flag per buffer.
    const size_t oBytes = size_t(splits * rows * dv) * 4;
    const size_t lseBytes = size_t((splits + 1) * rows) * 4;
    CHECK(l.oPart % 256 == 0);
    CHECK(l.lsePart % 256 == 0);
    CHECK(l.status % 256 == 0);
    CHECK(l.bytes % 256 == 0);
    CHECK(l.oPart + oBytes <= l.lsePart);
    CHECK(l.lsePart + lseBytes <= l.status);
    CHECK(l.status + buffers * 4 <= l.bytes);
    // No more than alignment slack per part.
    CHECK(l.bytes < oBytes + lseBytes + buffers * 4 + 3 * 256);
  }
  // The smallest call: one row, one split, no buffer.
  DecodeWorkspaceLayout one = decodeWorkspaceLayout(1, 1, 1, 0);
  CHECK(one.lsePart == 256);
  CHECK(one.status == 512);
  CHECK(one.bytes == 512);
  // Bad counts and overflow name the values.
  CHECK_THROWS_WITH(decodeWorkspaceLayout(4, 0, 128, 0),
                    Catch::Contains("num_splits = 0"));
  CHECK_THROWS_WITH(decodeWorkspaceLayout(-1, 2, 128, 0),
                    Catch::Contains("rows = -1"));
  CHECK_THROWS_WITH(
      decodeWorkspaceLayout(int64_t(1) << 40, 1 << 20, 1 << 20, 0),
      Catch::Contains("overflows"));
  CHECK_THROWS_WITH(decodeWorkspaceLayout(int64_t(1) << 50, 1, 1, 0),
                    Catch::Contains("too large"));
}
