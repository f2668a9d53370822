//===- VarlenTest.cpp - Packed variable-length batches on the CPU ---------===//
//
// Varlen kernels (CompileOptions::varlen, FlashAttention's packed layout)
// against referenceVarlenAttention on random batches of sequences, with
// zero-length and one-token sequences, unequal query and key lengths, GQA,
// per-sequence causal alignment, parameters and a document mask within each
// sequence (doc_id indexed through cu_seqlens bound as a buffer). Inputs are
// fresh random values (seed printed; FLASHJIT_TEST_SEED replays), outputs
// poisoned with NaN, and o has gaps between tokens that must stay poisoned.
//
//===----------------------------------------------------------------------===//
#include "CompilerTestSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/Library.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace flashjit;
using namespace flashjit::test;

namespace {

/// Random sequence lengths: 0, 1, tile edges and odd lengths.
std::vector<int32_t> randomCuSeqlens(std::mt19937 &rng, int64_t batch,
                                     const std::vector<int32_t> *like) {
  const int32_t pool[] = {0, 1, 2, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129};
  std::vector<int32_t> cu{0};
  for (int64_t b = 0; b < batch; ++b) {
    int32_t len = pool[rng() % std::size(pool)];
    // Keys: as long as the queries (self-attention) half the time.
    if (like && rng() % 2)
      len = (*like)[b + 1] - (*like)[b];
    cu.push_back(cu.back() + len);
  }
  return cu;
}

struct VarlenVariant {
  std::string name;
  std::function<void(AttentionSpec &)> setup;
  bool selfAttention = false; // cu_seqlens_k == cu_seqlens_q
  std::function<void(Arguments &, std::vector<int32_t> &data,
                     const std::vector<int32_t> &cuQ, int64_t hq)>
      bind = [](Arguments &, std::vector<int32_t> &,
                const std::vector<int32_t> &, int64_t) {};
};

std::vector<VarlenVariant> varlenVariants() {
  std::vector<VarlenVariant> v;
  v.push_back({"vl_none", [](AttentionSpec &) {}});
  v.push_back({"vl_causal_br",
               [](AttentionSpec &s) { s.causal = Causal::BottomRight; }});
  v.push_back(
      {"vl_causal_tl", [](AttentionSpec &s) { s.causal = Causal::TopLeft; }});
  v.push_back(
      {"vl_window_param",
       [](AttentionSpec &s) {
         s.variant.mask(
             sliding_window(param<int32_t>("left"), 2, Alignment::BottomRight));
         s.variant.scoreMod(softcap(2.0f));
       },
       false,
       [](Arguments &a, std::vector<int32_t> &, const std::vector<int32_t> &,
          int64_t) { a.set("left", Scalar::i32(20)); }});
  v.push_back({"vl_seq_aware", [](AttentionSpec &s) {
                 // Reads batch, head and both seqlens.
                 s.variant.mask(kv_idx < seqlen_k - batch ||
                                q_idx == seqlen_q - 1);
                 s.variant.scoreMod(score + cast<float>(head) * 0.25f);
               }});
  v.push_back(
      {"vl_document",
       [](AttentionSpec &s) {
         // Documents within each packed sequence: doc_id is indexed
         // by packed token, cu_seqlens bound as a buffer too.
         Buffer doc = buffer<int32_t>("doc_id");
         Buffer cu = buffer<int32_t>("cu");
         s.variant.mask(doc[cu[batch] + q_idx] == doc[cu[batch] + kv_idx]);
         s.causal = Causal::TopLeft;
       },
       true,
       [](Arguments &a, std::vector<int32_t> &data,
          const std::vector<int32_t> &cuQ, int64_t) {
         // data = doc ids for every packed token, then cu_seqlens.
         int64_t total = cuQ.back();
         data.assign(total, 0);
         int32_t doc = 0;
         for (int64_t t = 0; t < total; ++t) {
           if (t % 23 == 0 || t % 7 == 3)
             ++doc;
           data[t] = doc;
         }
         data.insert(data.end(), cuQ.begin(), cuQ.end());
         a.bind("doc_id", data.data(), std::max<int64_t>(total, 1));
         a.bind("cu", data.data() + total, static_cast<int64_t>(cuQ.size()));
       }});
  return v;
}

} // namespace

TEST_CASE("varlen kernels match the float64 varlen reference",
          "[compiler][cpu][varlen]") {
  uint64_t seed = freshSeed();
  INFO("seed " << seed << " (replay with FLASHJIT_TEST_SEED=" << seed << ")");
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const DType dtypes[] = {DType::BF16, DType::F16, DType::F32};
  int cases = 0;
  for (const VarlenVariant &vv : varlenVariants()) {
    for (int c = 0; c < 3; ++c) {
      AttentionSpec spec;
      spec.variant = Variant(vv.name);
      vv.setup(spec);
      spec.headDimQK = spec.headDimV = c == 1 ? 40 : 64;
      spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = dtypes[c];
      spec.headsKV = c == 2 ? 1 : 2;
      spec.headsQ = spec.headsKV * (c == 0 ? 2 : c == 1 ? 1 : 3); // GQA
      CompileOptions opts;
      opts.varlen = true;
      opts.blockM = c == 1 ? 16 : 32;
      opts.blockN = c == 1 ? 32 : 16;
      auto kernel = cachedKernel(spec, opts);
      for (int r = 0; r < 4; ++r) {
        int64_t batch = r == 0 ? 1 : 1 + rng() % 6;
        std::vector<int32_t> cuQ = randomCuSeqlens(rng, batch, nullptr);
        std::vector<int32_t> cuK =
            vv.selfAttention ? cuQ : randomCuSeqlens(rng, batch, &cuQ);
        if (r == 1) { // zero-length sequences first, inside and last
          cuQ = {0, 0, 17, 17, 80, 80};
          cuK = vv.selfAttention ? cuQ
                                 : std::vector<int32_t>{0, 5, 5, 40, 40, 40};
        }
        Arguments args;
        std::vector<int32_t> data;
        vv.bind(args, data, cuQ, spec.headsQ);
        INFO(vv.name << " " << toString(spec.dtypeQ) << " Hq=" << spec.headsQ
                     << " Hkv=" << spec.headsKV << " cu_q=" << toText(cuQ)
                     << " cu_k=" << toText(cuK));
        REQUIRE(checkVarlenRun(*kernel, cuQ, cuK, args, nullptr, nullptr,
                               rng) == "");
        ++cases;
      }
    }
  }
  CHECK(cases == 72);
}

TEST_CASE("a varlen batch of only empty sequences writes nothing",
          "[compiler][cpu][varlen]") {
  AttentionSpec spec;
  spec.variant = Variant("vl_empty");
  spec.headDimQK = spec.headDimV = 32;
  CompileOptions opts;
  opts.varlen = true;
  auto kernel = cachedKernel(spec, opts);
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  for (auto [cuQ, cuK] :
       {std::pair<std::vector<int32_t>, std::vector<int32_t>>{{0}, {0}},
        {{0, 0, 0}, {0, 0, 0}},
        {{0, 0, 0}, {0, 7, 9}},
        {{0, 3, 5}, {0, 0, 0}}}) {
    INFO("cu_q=" << toText(cuQ) << " cu_k=" << toText(cuK));
    REQUIRE(checkVarlenRun(*kernel, cuQ, cuK, {}, nullptr, nullptr, rng) == "");
  }
}
