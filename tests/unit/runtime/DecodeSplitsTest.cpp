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
      dimD(1, 300), groupsD(0, 3000);
  std::uniform_int_distribution<size_t> bufD(0, 5);
  for (int i = 0; i < 200; ++i) {
    const int64_t rows = rowsD(rng), dv = dimD(rng), groups = groupsD(rng);
    const int64_t splits = i % 4 == 0 ? 1 : splitsD(rng);
    const size_t buffers = bufD(rng);
    INFO("rows " << rows << " splits " << splits << " head_dim_v " << dv
                 << " buffers " << buffers << " groups " << groups);
    DecodeWorkspaceLayout l =
        decodeWorkspaceLayout(rows, splits, dv, buffers, groups);
    // The kernel's indexing: partial O [splits, rows, dv] fp32, partial
    // LSE [splits, rows] then the merge kernel's scratch LSE [rows], one
    // i32 flag per buffer, one i32 counter per group (a fused merge); with
    // one split no partial state and no counter.
    const int64_t parts = splits > 1 ? splits : 0;
    const size_t oBytes = size_t(parts * rows * dv) * 4;
    const size_t lseBytes = parts ? size_t((parts + 1) * rows) * 4 : 0;
    const size_t counterBytes = parts ? size_t(groups) * 4 : 0;
    CHECK(l.oPart % 256 == 0);
    CHECK(l.lsePart % 256 == 0);
    CHECK(l.status % 256 == 0);
    CHECK(l.counters % 256 == 0);
    CHECK(l.bytes % 256 == 0);
    CHECK(l.oPart + oBytes <= l.lsePart);
    CHECK(l.lsePart + lseBytes <= l.status);
    CHECK(l.status + buffers * 4 <= l.counters);
    CHECK(l.counters + counterBytes <= l.bytes);
    // No more than alignment slack per part.
    CHECK(l.bytes < oBytes + lseBytes + buffers * 4 + counterBytes + 4 * 256);
  }
  // The smallest calls: one row and one split, no buffer: nothing to
  // allocate; two splits: partial O, LSE and the counter.
  DecodeWorkspaceLayout one = decodeWorkspaceLayout(1, 1, 1, 0, 1);
  CHECK(one.bytes == 0);
  DecodeWorkspaceLayout two = decodeWorkspaceLayout(1, 2, 1, 0, 1);
  CHECK(two.lsePart == 256);
  CHECK(two.status == 512);
  CHECK(two.counters == 512);
  CHECK(two.bytes == 768);
  // Bad counts and overflow name the values.
  CHECK_THROWS_WITH(decodeWorkspaceLayout(4, 0, 128, 0),
                    Catch::Contains("num_splits = 0"));
  CHECK_THROWS_WITH(decodeWorkspaceLayout(-1, 2, 128, 0),
                    Catch::Contains("rows = -1"));
  CHECK_THROWS_WITH(decodeWorkspaceLayout(4, 2, 128, 0, -3),
                    Catch::Contains("groups = -3"));
  CHECK_THROWS_WITH(
      decodeWorkspaceLayout(int64_t(1) << 40, 1 << 20, 1 << 20, 0),
      Catch::Contains("overflows"));
  CHECK_THROWS_WITH(decodeWorkspaceLayout(int64_t(1) << 50, 1, 1, 0),
                    Catch::Contains("too large"));
}

TEST_CASE("the decode merge is fused only when one CTA's merge is small",
          "[runtime][decode]") {
  using flashjit::runtime::decodeFusedMerge;
  // The H200 shapes (D = 128, 128 threads) and the splits decodeNumSplits
  // picks there; session 14's measurements in decodeFusedMerge's comment.
  // GQA 32/8, q_len 1 (4 rows, 1 item per thread): B = 8 (4 splits, one
  // step) and B = 1 (32 splits, 4 steps) fuse.
  CHECK(decodeFusedMerge(4, 4, 128, 128));
  CHECK(decodeFusedMerge(32, 4, 128, 128));
  CHECK_FALSE(decodeFusedMerge(33, 4, 128, 128)); // 5 steps
  // MQA 32/1 (32 rows, 8 items per thread): B = 64 (4 splits), B = 8 (32)
  // and B = 1 (244, session 13's 0.78 -> 0.41 TB/s) take the merge kernel.
  CHECK_FALSE(decodeFusedMerge(4, 32, 128, 128));
  CHECK_FALSE(decodeFusedMerge(32, 32, 128, 128));
  CHECK_FALSE(decodeFusedMerge(244, 32, 128, 128));
  // GQA q_len 4 (16 rows: 4 items, one step) fuses, q_len 16 (64 rows)
  // does not.
  CHECK(decodeFusedMerge(4, 16, 128, 128));
  CHECK_FALSE(decodeFusedMerge(4, 64, 128, 128));
  // More threads, fewer items each; head_dim_v 64 halves them.
  CHECK(decodeFusedMerge(8, 32, 128, 1024));
  CHECK(decodeFusedMerge(8, 32, 64, 256));
  CHECK(decodeFusedMerge(16, 32, 64, 256));
  CHECK_FALSE(decodeFusedMerge(17, 32, 64, 256));
  // Huge factors do not overflow into a "small" product.
  CHECK_FALSE(decodeFusedMerge(int64_t(1) << 40, 1, 1, 128));
  CHECK_FALSE(decodeFusedMerge(1, int64_t(1) << 40, int64_t(1) << 40, 128));
  CHECK_THROWS_WITH(decodeFusedMerge(0, 4, 128, 128),
                    Catch::Contains("num_splits = 0"));
  CHECK_THROWS_WITH(decodeFusedMerge(4, -1, 128, 128),
                    Catch::Contains("group rows = -1"));
  CHECK_THROWS_WITH(decodeFusedMerge(4, 4, 128, 0),
                    Catch::Contains("threads = 0"));
}
