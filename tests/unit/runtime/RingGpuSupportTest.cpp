//===- RingGpuSupportTest.cpp - The GPU ring's host bookkeeping -----------===//
//
// No GPU needed: the host half the GPU ring forward and backward share
// (runtime/lib/RingGpuSupport.h): one rank's geometry and its errors, the
// layout of the packed K/V (and fp32 dK/dV) chunks in a travelling buffer,
// and the pair schedule (which chunk pairs each step computes, with which
// chunk parameters; buffer masks skip nothing: their values are device
// memory), checked against counts derived by hand.
//
//===----------------------------------------------------------------------===//
#include "RingGpuSupport.h"
#include "RingSupport.h"

#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Library.h"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;

namespace {

/// A rank of a ring that never shifts (the geometry only asks rank/size).
class FixedRank final : public RingTransport {
public:
  FixedRank(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void startShift(const void *, void *, size_t) override {
    throw std::logic_error("no shifts here");
  }
  void waitShift() override { throw std::logic_error("no shifts here"); }

private:
  int rank_, size_;
};

AttentionSpec spec(int d, DType t = DType::BF16) {
  AttentionSpec s;
  s.variant = Variant("plain");
  s.headDimQK = s.headDimV = d;
  s.headsQ = 4, s.headsKV = 2;
  s.dtypeQ = s.dtypeK = s.dtypeV = s.dtypeO = t;
  return s;
}

AttentionShape shape(int64_t len, int64_t d = 64) {
  return AttentionShape{2, 4, 2, len, len, d, d};
}

} // namespace

TEST_CASE("GPU ring geometry: chunk lengths, and the errors naming the "
          "field",
          "[ring][runtime]") {
  FixedRank r1of2(1, 2);
  ring::GpuGeometry g =
      ring::gpuGeometry(spec(64), shape(74), r1of2, Sharding::Zigzag, "fn");
  CHECK(g.rank == 1);
  CHECK(g.ranks == 2);
  CHECK(g.perRank == 2);
  CHECK(g.chunks == 4);
  CHECK(g.lenQ == 37);
  CHECK(g.lenK == 37);
  g = ring::gpuGeometry(spec(64), shape(75), r1of2, Sharding::Contiguous, "fn");
  CHECK(g.perRank == 1);
  CHECK(g.chunks == 2);
  CHECK(g.lenQ == 75);
  CHECK_THROWS_WITH(
      ring::gpuGeometry(spec(64), shape(75), r1of2, Sharding::Zigzag, "fn"),
      Catch::Contains("local seqlen_q = 75 is odd"));
  CHECK_THROWS_WITH(ring::gpuGeometry(spec(60), shape(74, 60), r1of2,
                                      Sharding::Zigzag, "ringFn"),
                    Catch::Contains("ringFn packs rows of head_dim_qk "
                                    "elements: head_dim_qk = 60 must be a "
                                    "multiple of 8"));
  FixedRank bad(2, 2);
  CHECK_THROWS_AS(
      ring::gpuGeometry(spec(64), shape(74), bad, Sharding::Zigzag, "fn"),
      UserError);
  FixedRank many(0, 1000);
  CHECK_THROWS_WITH(ring::gpuGeometry(spec(64), shape(int64_t(1) << 22), many,
                                      Sharding::Contiguous, "fn"),
                    Catch::Contains("exceeds 2^31 - 1"));
}

TEST_CASE("GPU ring K/V layout: K chunks then V chunks, each contiguous, "
          "tiling the buffer",
          "[ring][runtime]") {
  FixedRank r0(0, 3);
  ring::GpuGeometry g =
      ring::gpuGeometry(spec(64), shape(74), r0, Sharding::Zigzag, "fn");
  for (auto [k, v] : {std::pair{DType::BF16, DType::BF16},
                      std::pair{DType::F32, DType::F32}}) {
    ring::GpuKVLayout l{g, k, v};
    const size_t es = byteSize(k);
    const size_t chunkK = size_t(2 * 2 * 37 * 64) * es; // B Hkv Lk D
    CHECK(l.kBytes() == 2 * chunkK);
    CHECK(l.vBytes() == 2 * chunkK);
    CHECK(l.bytes() == 4 * chunkK);
    const CUdeviceptr base = 4096;
    size_t expect = 0;
    for (int isV = 0; isV < 2; ++isV)
      for (int64_t j = 0; j < 2; ++j) {
        INFO("isV " << isV << ", chunk " << j);
        TensorRef t = l.chunk(base, isV, j);
        CHECK(reinterpret_cast<CUdeviceptr>(t.data) == base + expect);
        CHECK(t.dtype == (isV ? v : k));
        CHECK(t.shape == std::array<int64_t, 4>{2, 2, 37, 64});
        CHECK(t.strides == std::array<int64_t, 4>{2 * 37 * 64, 37 * 64, 64, 1});
        // 16-byte aligned rows, as the kernels need.
        CHECK((reinterpret_cast<CUdeviceptr>(t.data) - base) % 16 == 0);
        expect += size_t(t.numel()) * es;
      }
    CHECK(expect == l.bytes());
  }
}

TEST_CASE("GPU ring schedule: causal pairs skipped on global indices, buffer "
          "masks never, chunk parameters of each pair",
          "[ring][runtime]") {
  AttentionSpec causal = spec(64);
  causal.causal = Causal::TopLeft;
  AttentionSpec doc = spec(64);
  auto d = buffer<int32_t>("doc");
  doc.variant = Variant("doc").mask(d[q_idx] == d[kv_idx]);
  for (int ranks : {1, 2, 3, 4})
    for (Sharding sh : {Sharding::Contiguous, Sharding::Zigzag}) {
      std::vector<int32_t> docIds(size_t(4 * ranks * 8), 0);
      for (size_t t = 0; t < docIds.size(); ++t)
        docIds[t] = int32_t(t / 8); // one document per chunk
      for (int r = 0; r < ranks; ++r) {
        INFO(ranks << " ranks, rank " << r << ", " << toString(sh));
        FixedRank t(r, ranks);
        ring::GpuGeometry g = ring::gpuGeometry(
            causal, shape(sh == Sharding::Zigzag ? 16 : 8), t, sh, "fn");
        AttentionSpec ringCausal = contextParallelSpec(causal, DType::BF16);
        AttentionSpec ringDoc = contextParallelSpec(doc, DType::BF16);
        Arguments docArgs;
        docArgs.bind("doc", docIds.data(), int64_t(docIds.size()));
        RingStats sc, sd;
        std::vector<int64_t> mine = rankChunks(r, ranks, sh);
        for (int s = 0; s < ranks; ++s) {
          std::vector<int64_t> theirs =
              rankChunks((r - s + ranks) % ranks, ranks, sh);
          int64_t last = -1;
          ring::forEachPair(
              ringCausal, {}, g, sh, s,
              [&](int64_t i, int64_t j, const Arguments &ca) {
                CHECK(i * g.perRank + j > last); // i major, in order
                last = i * g.perRank + j;
                CHECK(ca.params.at(std::string(kCpQChunkParam)).intValue ==
                      mine[size_t(i)]);
                CHECK(ca.params.at(std::string(kCpKvChunkParam)).intValue ==
                      theirs[size_t(j)]);
                // Never an empty pair: some key at or before some query.
                CHECK(theirs[size_t(j)] <= mine[size_t(i)]);
              },
              sc);
          ring::forEachPair(
              ringDoc, docArgs, g, sh, s,
              [](int64_t, int64_t, const Arguments &) {}, sd);
        }
        // Causal: zigzag computes 2R + 1 of 4R pairs on every rank,
        // contiguous r + 1 of R.
        CHECK(sc.pairsComputed ==
              (sh == Sharding::Zigzag ? 2 * ranks + 1 : r + 1));
        CHECK(sc.pairsComputed + sc.pairsSkipped ==
              ranks * g.perRank * g.perRank);
        // A document mask reads device memory on the GPU: nothing skipped.
        CHECK(sd.pairsComputed == ranks * g.perRank * g.perRank);
        CHECK(sd.pairsSkipped == 0);
      }
    }
}

namespace {

VarlenShape varlenShape(int64_t totalQ, int64_t totalK, int64_t d = 64) {
  VarlenShape s;
  s.batch = 4, s.headsQ = 4, s.headsKV = 2;
  s.totalQ = totalQ, s.totalK = totalK;
  s.headDimQK = s.headDimV = d;
  return s;
}

} // namespace

TEST_CASE("GPU varlen ring geometry and layout: per-sequence chunk lengths, "
          "chunk cu_seqlens, packed chunks, and the errors",
          "[ring][runtime][varlen]") {
  // Local sequences of 74, 0, 10 and 122 tokens: zigzag chunks of 37, 0, 5
  // and 61 (the [gpu][ring][varlen] tests' geometry at 3 ranks).
  std::vector<int32_t> cu{0, 74, 74, 84, 206};
  FixedRank r1of3(1, 3);
  ring::GpuGeometry g = ring::gpuVarlenGeometry(
      spec(64), varlenShape(206, 206), cu, cu, r1of3, Sharding::Zigzag, "fn");
  CHECK(g.varlen);
  CHECK(g.perRank == 2);
  CHECK(g.chunks == 6);
  CHECK(g.batch == 4);
  CHECK(g.lenQ == 103);
  CHECK(g.lenK == 103);
  CHECK(g.tokensQ() == 103);
  CHECK(g.seqQ == std::vector<int64_t>{37, 0, 5, 61});
  CHECK(g.cuChunkQ == std::vector<int32_t>{0, 37, 37, 42, 103});
  CHECK(g.cuChunkK == g.cuChunkQ);
  CHECK(g.cuLocalQ == cu);
  // Packed chunks: [103, Hkv, 64], K chunks then V chunks, 16-byte rows.
  ring::GpuKVLayout l{g, DType::BF16, DType::BF16};
  const size_t chunk = size_t(103 * 2 * 64) * 2;
  CHECK(l.kBytes() == 2 * chunk);
  CHECK(l.bytes() == 4 * chunk);
  const CUdeviceptr base = 4096;
  for (int isV = 0; isV < 2; ++isV)
    for (int64_t j = 0; j < 2; ++j) {
      TensorRef t = l.chunk(base, isV, j);
      CHECK(t.rank == 3);
      CHECK(reinterpret_cast<CUdeviceptr>(t.data) ==
            base + size_t(2 * isV + j) * chunk);
      CHECK(t.shape[0] == 103);
      CHECK(t.shape[1] == 2);
      CHECK(t.shape[2] == 64);
      CHECK(t.strides[0] == 128);
      CHECK(t.strides[1] == 64);
      CHECK(t.strides[2] == 1);
    }
  // Contiguous: the local lengths are the chunk lengths.
  g = ring::gpuVarlenGeometry(spec(64), varlenShape(206, 206), cu, cu, r1of3,
                              Sharding::Contiguous, "fn");
  CHECK(g.perRank == 1);
  CHECK(g.seqQ == std::vector<int64_t>{74, 0, 10, 122});
  CHECK(g.lenQ == 206);
  std::vector<int32_t> odd{0, 74, 75, 84, 206};
  CHECK_THROWS_WITH(ring::gpuVarlenGeometry(spec(64), varlenShape(206, 206),
                                            odd, cu, r1of3, Sharding::Zigzag,
                                            "fn"),
                    Catch::Contains("cu_seqlens_q: local sequence 1 has 1 "
                                    "tokens, odd"));
  CHECK_THROWS_WITH(ring::gpuVarlenGeometry(spec(60), varlenShape(206, 206, 60),
                                            cu, cu, r1of3, Sharding::Zigzag,
                                            "ringFnVarlen"),
                    Catch::Contains("ringFnVarlen packs rows of head_dim_qk"));
}

TEST_CASE("GPU varlen ring schedule: a causal pair is skipped only when it "
          "is empty for every sequence, an empty sequence never keeps one",
          "[ring][runtime][varlen]") {
  AttentionSpec causal = spec(64);
  causal.causal = Causal::TopLeft;
  AttentionSpec ringCausal = contextParallelSpec(causal, DType::BF16);
  for (int ranks : {1, 2, 3, 4})
    for (Sharding sh : {Sharding::Contiguous, Sharding::Zigzag}) {
      int64_t per = sh == Sharding::Zigzag ? 2 : 1;
      // Local sequences of 37, 0, 5 and 61 tokens per chunk.
      std::vector<int32_t> cu{0};
      for (int64_t m : {37, 0, 5, 61})
        cu.push_back(int32_t(cu.back() + m * per));
      for (int r = 0; r < ranks; ++r) {
        INFO(ranks << " ranks, rank " << r << ", " << toString(sh));
        FixedRank t(r, ranks);
        ring::GpuGeometry g = ring::gpuVarlenGeometry(
            causal, varlenShape(cu.back(), cu.back()), cu, cu, t, sh, "fn");
        RingStats st;
        std::vector<int64_t> mine = rankChunks(r, ranks, sh);
        for (int s = 0; s < ranks; ++s) {
          std::vector<int64_t> theirs =
              rankChunks((r - s + ranks) % ranks, ranks, sh);
          ring::forEachPair(
              ringCausal, {}, g, sh, s,
              [&](int64_t i, int64_t j, const Arguments &) {
                CHECK(theirs[size_t(j)] <= mine[size_t(i)]);
              },
              st);
        }
        CHECK(st.pairsComputed ==
              (sh == Sharding::Zigzag ? 2 * ranks + 1 : r + 1));
        CHECK(st.pairsComputed + st.pairsSkipped == ranks * per * per);
      }
    }
}

TEST_CASE("RingSchedule::Auto: all-gather while the K/V of all ranks take no "
          "more bytes per token than the rank's Q and O",
          "[ring][runtime]") {
  AttentionSpec s = spec(64); // Hq 4, Hkv 2, bf16
  RingOptions autoOpts, ringOpts, gatherOpts;
  ringOpts.schedule = RingSchedule::Ring;
  gatherOpts.schedule = RingSchedule::AllGather;
  // K/V of R ranks: R * 2 heads * (128 + 128) bytes; Q and O: 4 * 256.
  CHECK(ring::useAllGather(autoOpts, s, 1, 4, 2, 64, 64));
  CHECK(ring::useAllGather(autoOpts, s, 2, 4, 2, 64, 64));
  CHECK_FALSE(ring::useAllGather(autoOpts, s, 3, 4, 2, 64, 64));
  CHECK_FALSE(ring::useAllGather(autoOpts, s, 2, 2, 2, 64, 64));
  CHECK(ring::useAllGather(autoOpts, s, 8, 32, 4, 64, 64)); // GQA 8
  CHECK_FALSE(ring::useAllGather(ringOpts, s, 1, 4, 2, 64, 64));
  CHECK(ring::useAllGather(gatherOpts, s, 8, 2, 2, 64, 64));
}
