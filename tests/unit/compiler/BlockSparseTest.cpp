//===- BlockSparseTest.cpp - Block masks and BSR layouts on the CPU -------===//
//
// Block-sparse kernels (CompileOptions::blockSparse):
//  - the generated block-mask builder equals referenceBlockMask (the mask
//    evaluated at every element) exactly, for document masks over random
//    documents (1-token documents, documents longer than tiles, one
//    document covering everything; the builder reads their ranges), with
//    causal, head- and batch-dependent masks, dense and varlen;
//  - runs with a built mask equal the plain float64 reference (a block mask
//    changes which tiles are visited, never the result), and the visited
//    tiles counted by the kernel are exactly those the mask lists;
//  - user BSR layouts (empty rows, full rows, per head) equal the
//    block-sparse reference, dense and varlen.
// Fresh random inputs every run (FLASHJIT_TEST_SEED replays), outputs
// poisoned with NaN before each run.
//
//===----------------------------------------------------------------------===//
#include "BlockMaskSupport.h"
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace flashjit;
using namespace flashjit::test;
using flashjit::testing::randomBsr;
using flashjit::testing::randomDocs;

namespace {
bool sameMask(const BlockMask &a, const BlockMask &b) {
  return testing::blockMaskDifference(a, b).empty();
}
} // namespace

namespace {

/// Runs \p kernel block-sparse on fresh inputs (outputs poisoned) and
/// compares with \p ref computed by \p reference on the same inputs.
std::string checkDenseRun(
    const CpuKernel &kernel, int64_t batch, int64_t sq, int64_t sk,
    const Arguments &args, const BlockMask &mask, RunStats &stats,
    const std::function<ReferenceOutput(const TensorRef &, const TensorRef &,
                                        const TensorRef &)> &reference,
    std::mt19937 &rng) {
  const AttentionSpec &spec = kernel.spec();
  int64_t hq = spec.headsQ, hkv = spec.headsKV;
  StridedTensor q(spec.dtypeQ, {batch, hq, sq, spec.headDimQK}, true);
  StridedTensor k(spec.dtypeK, {batch, hkv, sk, spec.headDimQK}, false);
  StridedTensor v(spec.dtypeV, {batch, hkv, sk, spec.headDimV}, true);
  StridedTensor o(spec.dtypeO, {batch, hq, sq, spec.headDimV}, false);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  std::fill(o.bytes.begin(), o.bytes.end(), uint8_t{0xFF}); // NaN
  std::vector<float> lse(std::max<int64_t>(batch * hq * sq, 1),
                         std::numeric_limits<float>::quiet_NaN());
  TensorRef lseRef =
      TensorRef::contiguous3(lse.data(), DType::F32, {batch, hq, sq});
  for (int64_t &s : lseRef.strides)
    s = std::max<int64_t>(s, 1);
  stats =
      kernel.runBlockSparse(q.ref, k.ref, v.ref, o.ref, &lseRef, mask, args);
  ReferenceOutput ref = reference(q.ref, k.ref, v.ref);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        std::string e =
            compareRow(ref.lseAt(b, h, i), lse[(b * hq + h) * sq + i],
                       spec.headDimV, spec.dtypeO, &ref.oAt(b, h, i, 0),
                       [&](int64_t d) { return o.at(b, h, i, d); });
        if (!e.empty())
          return "b=" + std::to_string(b) + " h=" + std::to_string(h) +
                 " i=" + std::to_string(i) + ": " + e;
      }
  return {};
}

struct DocVariant {
  std::string name;
  std::function<Expr(Buffer doc)> mask;
  bool perBatch = false; // doc ids per batch: doc[batch * seqlen_q + i]
};

std::vector<DocVariant> docVariants() {
  return {
      {"bs_doc", [](Buffer d) { return d[q_idx] == d[kv_idx]; }},
      {"bs_doc_causal",
       [](Buffer d) {
         return d[q_idx] == d[kv_idx] && causal(Alignment::BottomRight);
       }},
      {"bs_doc_head", // reads head: one row block per query head
       [](Buffer d) {
         return d[q_idx] == d[kv_idx] && (head == 0 || kv_idx <= q_idx);
       }},
      {"bs_doc_batch", // reads batch: one row block per batch
       [](Buffer d) {
         return d[batch * seqlen_q + q_idx] == d[batch * seqlen_q + kv_idx];
       },
       true},
  };
}

} // namespace

TEST_CASE("built block masks are exact, skip tiles and keep results",
          "[compiler][cpu][blockmask]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed << " (replay with FLASHJIT_TEST_SEED=" << seed << ")");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t lens[] = {1, 17, 64, 65, 200, 333};
  int64_t skipped = 0, cases = 0;
  for (const DocVariant &dv : docVariants()) {
    for (int c = 0; c < 3; ++c) {
      AttentionSpec spec;
      spec.variant = Variant(dv.name);
      spec.variant.mask(dv.mask(buffer<int32_t>("doc_id")));
      spec.headDimQK = spec.headDimV = 32;
      spec.headsKV = 1 + c % 2;
      spec.headsQ = spec.headsKV * 2; // GQA
      spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO =
          c == 1 ? DType::F16 : DType::BF16;
      CompileOptions opts;
      opts.blockSparse = true;
      opts.countTiles = true;
      opts.blockM = c == 0 ? 16 : 32;
      opts.blockN = c == 2 ? 64 : 16;
      auto kernel = cachedKernel(spec, opts);
      for (int r = 0; r < 3; ++r) {
        int64_t batch = 1 + rng() % 2;
        int64_t sq = lens[rng() % 6], sk = r == 0 ? sq : lens[rng() % 6];
        if (dv.perBatch)
          sk = sq; // the batch's ids start at batch * seqlen_q
        int64_t n = dv.perBatch ? batch * sq : std::max(sq, sk);
        // Documents longer than tiles (r == 1) let the builder decide
        // whole tiles from the buffer's ranges.
        std::vector<int32_t> doc =
            randomDocs(rng, n, r == 2, r == 1 ? 300 : 90);
        Arguments args;
        args.bind("doc_id", doc.data(), n);
        INFO(dv.name << " B=" << batch << " Sq=" << sq << " Sk=" << sk
                     << " tiles " << opts.blockM << "x" << opts.blockN
                     << (r == 2 ? " one document" : "")
                     << (r == 1 ? " long documents" : ""));

        BlockMask mask = kernel->buildBlockMask(batch, sq, sk, args);
        BlockMask want = referenceBlockMask(spec, opts.blockM, opts.blockN,
                                            batch, sq, sk, args);
        REQUIRE(sameMask(mask, want));
        CHECK(mask.batch == (dv.perBatch ? batch : 1));
        CHECK(mask.heads == (dv.name == "bs_doc_head" ? spec.headsQ : 1));

        RunStats stats;
        REQUIRE(checkDenseRun(
                    *kernel, batch, sq, sk, args, mask, stats,
                    [&](const TensorRef &q, const TensorRef &k,
                        const TensorRef &v) {
                      return referenceAttention(spec, q, k, v, args);
                    },
                    rng) == "");
        // Visited tiles are exactly the listed ones, shared rows counted
        // once per batch and head they serve.
        int64_t share = (batch / mask.batch) * (spec.headsQ / mask.heads);
        REQUIRE(stats.tilesCounted);
        CHECK(stats.tiles.full == mask.numFull() * share);
        CHECK(stats.tiles.partial == mask.numPartial() * share);
        CHECK(stats.tiles.empty == 0);
        int64_t all = batch * spec.headsQ * mask.numQTiles * mask.numKvTiles;
        skipped += all - stats.tiles.full - stats.tiles.partial;
        ++cases;
      }
    }
  }
  CHECK(cases == 36);
  CHECK(skipped > 0); // documents leave tiles out
}

TEST_CASE("BSR layouts match the block-sparse reference",
          "[compiler][cpu][bsr]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed << " (replay with FLASHJIT_TEST_SEED=" << seed << ")");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t lens[] = {1, 31, 64, 100, 257};
  std::function<void(AttentionSpec &)> setups[] = {
      [](AttentionSpec &) {},
      [](AttentionSpec &s) { s.causal = Causal::TopLeft; },
      [](AttentionSpec &s) {
        s.variant.mask(sliding_window(40, 10, Alignment::BottomRight));
        s.variant.scoreMod(softcap(1.5f));
      }};
  for (int vi = 0; vi < 3; ++vi) {
    AttentionSpec spec;
    spec.variant = Variant("bsr_" + std::to_string(vi));
    setups[vi](spec);
    spec.headDimQK = spec.headDimV = 48;
    spec.headsQ = 3;
    spec.headsKV = vi == 1 ? 1 : 3;
    spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
    CompileOptions opts;
    opts.blockSparse = true;
    opts.countTiles = true;
    opts.blockM = 32;
    opts.blockN = vi == 2 ? 16 : 32;
    auto kernel = cachedKernel(spec, opts);
    for (int r = 0; r < 4; ++r) {
      int64_t batch = 1 + r % 2, sq = lens[rng() % 5], sk = lens[rng() % 5];
      int64_t heads = r % 2 ? spec.headsQ : 1;
      BsrLayout layout =
          randomBsr(rng, heads, opts.blockM, opts.blockN, sq, sk);
      BlockMask mask = blockMaskFromBsr(layout, sq, sk);
      INFO(spec.variant.name()
           << " B=" << batch << " Sq=" << sq << " Sk=" << sk
           << " heads=" << heads << " offsets " << toText(layout.rowOffsets)
           << " cols " << toText(layout.colIndices));
      RunStats stats;
      REQUIRE(
          checkDenseRun(
              *kernel, batch, sq, sk, {}, mask, stats,
              [&](const TensorRef &q, const TensorRef &k, const TensorRef &v) {
                return referenceAttention(spec, q, k, v, {}, mask);
              },
              rng) == "");
      // Every listed tile is visited (and classified), nothing else.
      int64_t share = batch * (spec.headsQ / mask.heads);
      CHECK(stats.tiles.full + stats.tiles.partial + stats.tiles.empty ==
            static_cast<int64_t>(layout.colIndices.size()) * share);
    }
  }
}

TEST_CASE("varlen block masks: built per sequence and shared BSR layouts",
          "[compiler][cpu][varlen][blockmask]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed << " (replay with FLASHJIT_TEST_SEED=" << seed << ")");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  AttentionSpec spec;
  spec.variant = Variant("vl_bs_doc");
  Buffer doc = buffer<int32_t>("doc_id"), cu = buffer<int32_t>("cu");
  spec.variant.mask(doc[cu[batch] + q_idx] == doc[cu[batch] + kv_idx]);
  spec.causal = Causal::TopLeft;
  spec.headDimQK = spec.headDimV = 32;
  spec.headsQ = 4;
  spec.headsKV = 2;
  CompileOptions opts;
  opts.varlen = opts.blockSparse = true;
  opts.blockM = 16;
  opts.blockN = 32;
  auto kernel = cachedKernel(spec, opts);
  const int32_t pool[] = {0, 1, 16, 33, 70, 150};
  for (int r = 0; r < 5; ++r) {
    std::vector<int32_t> cuSeq{0};
    for (int64_t b = 0, n = 1 + rng() % 5; b < n; ++b)
      cuSeq.push_back(cuSeq.back() + pool[rng() % 6]);
    std::vector<int32_t> docs = randomDocs(rng, cuSeq.back(), r == 4);
    Arguments args;
    args.bind("doc_id", docs.data(), cuSeq.back())
        .bind("cu", cuSeq.data(), static_cast<int64_t>(cuSeq.size()));
    INFO("cu_seqlens " << toText(cuSeq));
    BlockMask mask = kernel->buildVarlenBlockMask(cuSeq, cuSeq, args);
    REQUIRE(sameMask(
        mask, referenceVarlenBlockMask(spec, 16, 32, cuSeq, cuSeq, args)));
    REQUIRE(checkVarlenRun(*kernel, cuSeq, cuSeq, args, &mask, nullptr, rng) ==
            "");
  }

  // A BSR layout shared by every sequence, tiles local to each.
  AttentionSpec plain;
  plain.variant = Variant("vl_bsr");
  plain.headDimQK = plain.headDimV = 32;
  plain.headsQ = 2;
  auto bsrKernel = cachedKernel(plain, opts);
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> cuQ{0}, cuK{0};
    for (int64_t b = 0, n = 1 + rng() % 4; b < n; ++b) {
      cuQ.push_back(cuQ.back() + pool[rng() % 6]);
      cuK.push_back(cuK.back() + pool[rng() % 6]);
    }
    int64_t maxQ = 0, maxK = 0;
    for (size_t b = 0; b + 1 < cuQ.size(); ++b) {
      maxQ = std::max<int64_t>(maxQ, cuQ[b + 1] - cuQ[b]);
      maxK = std::max<int64_t>(maxK, cuK[b + 1] - cuK[b]);
    }
    BlockMask mask = blockMaskFromBsr(
        randomBsr(rng, r % 2 ? 2 : 1, 16, 32, maxQ, maxK), maxQ, maxK);
    INFO("cu_q " << toText(cuQ) << " cu_k " << toText(cuK));
    REQUIRE(checkVarlenRun(*bsrKernel, cuQ, cuK, {}, &mask, &mask, rng) == "");
  }
}
