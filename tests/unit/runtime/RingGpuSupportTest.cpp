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
