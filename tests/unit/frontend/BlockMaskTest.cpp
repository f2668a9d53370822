//===- BlockMaskTest.cpp - Block masks, BSR layouts, varlen oracles -------===//
//
// The data structures of issue 7 and their oracles, from the frontend's
// public headers:
//  - every UserError of BlockMask::validate, checkBlockMaskFor,
//    blockMaskFromBsr, checkCuSeqlens and checkVarlenTensors, with the
//    entry it names;
//  - referenceBlockMask against bruteForceTileCounts (classes per tile) and
//    its extents;
//  - referenceAttention with a block mask and referenceVarlenAttention
//    against this suite's own naiveAttention (ReferenceSupport.h), written
//    without the frontend's reference code.
//
//===----------------------------------------------------------------------===//
#include "ReferenceSupport.h"
#include "TestSupport.h"

#include "flashjit/frontend/BlockMask.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/TileClass.h"

#include <catch2/catch.hpp>

using namespace flashjit;
using namespace flashjit::test;

namespace {

/// Tiles 2 x 2 over a 5 x 6 problem: 3 q tiles, 3 kv tiles, one head.
BlockMask smallMask() {
  BlockMask m;
  m.blockM = m.blockN = 2;
  m.seqlenQ = 5;
  m.seqlenK = 6;
  m.numQTiles = m.numKvTiles = 3;
  m.kvNumBlocks = {1, 2, 0};
  m.kvIndices = {0, 0, 0, 0, 2, 0, 0, 0, 0};
  m.fullKvNumBlocks = {0, 1, 3};
  m.fullKvIndices = {0, 0, 0, 1, 0, 0, 0, 1, 2};
  return m;
}

BsrLayout smallBsr() {
  BsrLayout l;
  l.blockM = l.blockN = 2;
  l.heads = 2;
  l.numQTiles = 3;
  l.numKvTiles = 3;
  l.rowOffsets = {0, 1, 1, 3, 4, 4, 6};
  l.colIndices = {2, 0, 1, 1, 0, 2};
  return l;
}

} // namespace

TEST_CASE("BlockMask::validate names the bad field or entry",
          "[frontend][blockmask]") {
  smallMask().validate();
  auto bad = [](auto edit, std::initializer_list<const char *> needles) {
    BlockMask m = smallMask();
    edit(m);
    expectUserError([&] { m.validate(); }, needles);
  };
  bad([](BlockMask &m) { m.blockN = 0; }, {"block_n = 0"});
  bad([](BlockMask &m) { m.numQTiles = 2; },
      {"num_q_tiles = 2", "ceil(seqlen_q 5 / block_m 2) = 3"});
  bad([](BlockMask &m) { m.numKvTiles = 4; }, {"num_kv_tiles = 4"});
  bad([](BlockMask &m) { m.seqlenK = -1; }, {"seqlen_k = -1"});
  bad([](BlockMask &m) { m.batch = 0; }, {"block_mask.batch = 0"});
  bad([](BlockMask &m) { m.heads = -2; }, {"block_mask.heads = -2"});
  bad([](BlockMask &m) { m.kvNumBlocks.pop_back(); },
      {"block_mask.kv_num_blocks has 2 entries, expected 3"});
  bad([](BlockMask &m) { m.fullKvIndices.push_back(0); },
      {"block_mask.full_kv_indices has 10 entries, expected 9"});
  bad([](BlockMask &m) { m.kvNumBlocks[2] = 4; },
      {"block_mask.kv_num_blocks[b=0][h=0][row=2] = 4 is not in [0, "
       "num_kv_tiles 3]"});
  bad([](BlockMask &m) { m.kvIndices[3] = 3; },
      {"block_mask.kv_indices[b=0][h=0][row=1][0] = 3 >= num_kv_tiles 3"});
  bad([](BlockMask &m) { m.kvIndices[3] = -1; },
      {"block_mask.kv_indices[b=0][h=0][row=1][0] = -1 is negative"});
  bad([](BlockMask &m) { m.fullKvIndices[7] = 0; },
      {"block_mask.full_kv_indices[b=0][h=0][row=2][1] = 0 is not above "
       "the previous entry 0"});
  bad([](BlockMask &m) { m.fullKvIndices[3] = 2; },
      {"block_mask.full_kv_indices[b=0][h=0][row=1][0] = 2 is listed both "
       "partial and full"});
  bad(
      [](BlockMask &m) {
        m.cuSeqlensQ = {0, 5};
      },
      {"cu_seqlens_q has 2 entries but cu_seqlens_k has 0"});
  BlockMask m = smallMask();
  CHECK(m.numPartial() == 3);
  CHECK(m.numFull() == 4);
}

TEST_CASE("checkBlockMaskFor checks a mask against a call",
          "[frontend][blockmask]") {
  BlockMask m = smallMask();
  checkBlockMaskFor(m, 2, 2, 4, 8, 5, 6); // shared by batch and heads
  expectUserError([&] { checkBlockMaskFor(m, 2, 4, 1, 1, 5, 6); },
                  {"block_mask.block_m, block_n = 2, 2", "tiles are 2 x 4"});
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 1, 1, 4, 6); },
                  {"block_mask.seqlen_q = 5, but the call's seqlen_q is 4"});
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 1, 1, 5, 7); },
                  {"block_mask.seqlen_k = 6"});
  std::vector<int32_t> cu{0, 5}, cuK{0, 6};
  checkBlockMaskFor(m, 2, 2, 1, 1, 5, 6, cu, cuK); // shared layout: accepted
  m.cuSeqlensQ = {0, 5};
  m.cuSeqlensK = {0, 6};
  checkBlockMaskFor(m, 2, 2, 1, 1, 5, 6, cu, cuK);
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 1, 1, 5, 6); },
                  {"built for a varlen batch"});
  std::vector<int32_t> cu2{0, 5, 5};
  std::vector<int32_t> cuK2{0, 6, 9};
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 2, 1, 5, 6, cu2, cuK2); },
                  {"block_mask.cu_seqlens_q has 2 entries, the call's "
                   "cu_seqlens_q has 3"});
  std::vector<int32_t> cuK3{0, 4};
  m.seqlenK = 6;
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 1, 1, 5, 6, cu, cuK3); },
                  {"block_mask.cu_seqlens_k[1] = 6, but the call's "
                   "cu_seqlens_k[1] = 4"});
  m = smallMask();
  m.batch = 2;
  for (auto *v :
       {&m.kvNumBlocks, &m.fullKvNumBlocks, &m.kvIndices, &m.fullKvIndices}) {
    std::vector<int32_t> copy = *v;
    v->insert(v->end(), copy.begin(), copy.end());
  }
  checkBlockMaskFor(m, 2, 2, 2, 1, 5, 6);
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 3, 1, 5, 6); },
                  {"block_mask.batch = 2, expected 1 or the batch 3"});
  m = smallMask();
  m.heads = 2;
  for (auto *v :
       {&m.kvNumBlocks, &m.fullKvNumBlocks, &m.kvIndices, &m.fullKvIndices}) {
    std::vector<int32_t> copy = *v;
    v->insert(v->end(), copy.begin(), copy.end());
  }
  expectUserError([&] { checkBlockMaskFor(m, 2, 2, 1, 4, 5, 6); },
                  {"block_mask.heads = 2, expected 1 or heads_q 4"});
}

TEST_CASE("BSR layouts become block masks of partial tiles",
          "[frontend][blockmask][bsr]") {
  BlockMask m = blockMaskFromBsr(smallBsr(), 5, 6);
  CHECK(m.heads == 2);
  CHECK(m.batch == 1);
  CHECK(m.kvNumBlocks == std::vector<int32_t>{1, 0, 2, 1, 0, 2});
  CHECK(m.fullKvNumBlocks == std::vector<int32_t>(6, 0));
  CHECK(m.kvIndices[0] == 2);
  CHECK(m.kvIndices[2 * 3] == 0);
  CHECK(m.kvIndices[2 * 3 + 1] == 1);
  CHECK(m.kvIndices[5 * 3 + 1] == 2);
  m.validate();

  auto bad = [](auto edit, int64_t sq, int64_t sk,
                std::initializer_list<const char *> needles) {
    BsrLayout l = smallBsr();
    edit(l);
    expectUserError([&] { blockMaskFromBsr(l, sq, sk); }, needles);
  };
  auto none = [](BsrLayout &) {};
  bad(none, 7, 6,
      {"bsr.num_q_tiles = 3, expected ceil(seqlen_q 7 / block_m "
       "2) = 4"});
  bad(none, 5, 2, {"bsr.num_kv_tiles = 3"});
  bad([](BsrLayout &l) { l.blockM = 0; }, 5, 6, {"bsr.block_m = 0"});
  bad([](BsrLayout &l) { l.heads = 0; }, 5, 6, {"bsr.heads = 0"});
  bad([](BsrLayout &l) { l.rowOffsets.pop_back(); }, 5, 6,
      {"row_offsets has 6 entries, expected heads 2 * num_q_tiles 3 + 1 = 7"});
  bad([](BsrLayout &l) { l.rowOffsets[0] = 1; }, 5, 6,
      {"row_offsets[0] = 1, expected 0"});
  bad([](BsrLayout &l) { l.rowOffsets[2] = 0; }, 5, 6,
      {"row_offsets[2] = 0 < row_offsets[1] = 1"});
  bad([](BsrLayout &l) { l.colIndices.push_back(0); }, 5, 6,
      {"row_offsets[6] = 6, but col_indices has 7 entries"});
  bad([](BsrLayout &l) { l.colIndices[5] = 17; }, 5, 6,
      {"col_indices[h=1][row=2][1] = 17 >= num_kv_tiles 3"});
  bad([](BsrLayout &l) { l.colIndices[3] = -4; }, 5, 6,
      {"col_indices[h=1][row=0][0] = -4 is negative"});
  bad([](BsrLayout &l) { l.colIndices[2] = 0; }, 5, 6,
      {"col_indices[h=0][row=2][1] = 0 is not above the previous entry 0"});
}

TEST_CASE("cu_seqlens and packed tensors are checked entry by entry",
          "[frontend][varlen]") {
  std::vector<int32_t> cu{0, 3, 3, 10};
  CHECK(checkCuSeqlens("cu_seqlens_q", cu, 10) == 7);
  std::vector<int32_t> one{0};
  CHECK(checkCuSeqlens("cu_seqlens_k", one, 0) == 0);
  expectUserError([] { checkCuSeqlens("cu_seqlens_q", {}, 0); },
                  {"cu_seqlens_q is empty"});
  std::vector<int32_t> a{2, 3};
  expectUserError([&] { checkCuSeqlens("cu_seqlens_k", a, 3); },
                  {"cu_seqlens_k[0] = 2, expected 0"});
  std::vector<int32_t> b{0, 4, 3};
  expectUserError([&] { checkCuSeqlens("cu_seqlens_q", b, 3); },
                  {"cu_seqlens_q[2] = 3 < cu_seqlens_q[1] = 4"});
  expectUserError([&] { checkCuSeqlens("cu_seqlens_q", cu, 11); },
                  {"cu_seqlens_q[3] = 10, but the packed tensor holds 11 "
                   "tokens"});

  AttentionSpec spec;
  spec.headDimQK = 8;
  spec.headDimV = 4;
  spec.headsQ = 2;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  // Inputs share one buffer; outputs have their own (they must not alias).
  std::vector<float> buf(1000), obuf(1000), lbuf(1000);
  auto t3 = [&](int64_t a0, int64_t a1, int64_t a2, float *data = nullptr) {
    TensorRef t = TensorRef::contiguous3(data ? data : buf.data(), DType::F32,
                                         {a0, a1, a2});
    return t;
  };
  TensorRef q = t3(10, 2, 8), k = t3(6, 1, 8), v = t3(6, 1, 4),
            o = t3(10, 2, 4, obuf.data());
  TensorRef lse = TensorRef::contiguous2(lbuf.data(), DType::F32, {2, 10});
  std::vector<int32_t> cuK{0, 1, 1, 6};
  VarlenShape s = checkVarlenTensors(spec, q, k, v, cu, cuK, &o, &lse);
  CHECK(s.batch == 3);
  CHECK(s.maxSeqlenQ == 7);
  CHECK(s.maxSeqlenK == 5);
  CHECK(s.totalK == 6);
  TensorRef v2 = t3(5, 1, 4);
  expectUserError([&] { checkVarlenTensors(spec, q, k, v2, cu, cuK); },
                  {"v.shape[0] = 5, expected 6 (total_k of k)"});
  TensorRef o2 = t3(10, 2, 8, obuf.data());
  expectUserError([&] { checkVarlenTensors(spec, q, k, v, cu, cuK, &o2); },
                  {"o.shape[2] = 8, expected 4"});
  TensorRef lse2 = TensorRef::contiguous2(lbuf.data(), DType::F32, {2, 9});
  TensorRef lo = TensorRef::contiguous2(obuf.data(), DType::F32, {2, 10});
  expectUserError([&] { checkVarlenTensors(spec, q, k, v, cu, cuK, &o, &lo); },
                  {"lse overlaps o"});
  TensorRef oq = t3(10, 2, 4);
  expectUserError([&] { checkVarlenTensors(spec, q, k, v, cu, cuK, &oq); },
                  {"o overlaps q"});
  expectUserError(
      [&] { checkVarlenTensors(spec, q, k, v, cu, cuK, &o, &lse2); },
      {"lse.shape[1] = 9, expected 10"});
  TensorRef k2 = t3(6, 2, 8);
  expectUserError([&] { checkVarlenTensors(spec, q, k2, v, cu, cuK); },
                  {"k.shape[1] = 2, expected 1"});
}

TEST_CASE("referenceBlockMask classifies like the brute-force tile counts",
          "[frontend][blockmask]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int r = 0; r < 20; ++r) {
    int64_t sq = uniformInt(rng, 0, 70), sk = uniformInt(rng, 0, 70);
    int64_t bm = uniformInt(rng, 1, 9), bn = uniformInt(rng, 1, 9);
    std::vector<int32_t> doc(std::max<int64_t>(std::max(sq, sk), 1));
    for (size_t i = 1; i < doc.size(); ++i)
      doc[i] = doc[i - 1] + (uniformInt(rng, 0, 5) == 0);
    Arguments args;
    args.bind("doc_id", doc.data(), static_cast<int64_t>(doc.size()));
    AttentionSpec spec;
    Buffer d = buffer<int32_t>("doc_id");
    spec.variant.mask(d[q_idx] == d[kv_idx]);
    spec.causal = r % 2 ? Causal::BottomRight : Causal::None;
    spec.headsQ = 3;
    INFO("sq " << sq << " sk " << sk << " tiles " << bm << "x" << bn);
    BlockMask m = referenceBlockMask(spec, bm, bn, 2, sq, sk, args);
    m.validate();
    CHECK(m.batch == 1);
    CHECK(m.heads == 1);
    TileCounts want =
        bruteForceTileCounts(spec.effectiveMask(), sq, sk, bm, bn, args);
    CHECK(m.numFull() == want.full);
    CHECK(m.numPartial() == want.partial);
    CHECK(m.numQTiles * m.numKvTiles - m.numFull() - m.numPartial() ==
          want.empty);
  }
  AttentionSpec plain;
  expectUserError([&] { referenceBlockMask(plain, 0, 4, 1, 9, 9); },
                  {"block_m and block_n must be positive"});
  expectUserError([&] { referenceBlockMask(plain, 4, 4, 1, -1, 9); },
                  {"seqlen_q and seqlen_k must be >= 0"});
  std::vector<int32_t> cu2{0, 3}, cu3{0, 3, 5};
  expectUserError([&] { referenceVarlenBlockMask(plain, 4, 4, cu2, cu3); },
                  {"cu_seqlens_q and cu_seqlens_k differ in length"});
  std::vector<int32_t> bad{0, 3, 2};
  expectUserError([&] { referenceVarlenBlockMask(plain, 4, 4, bad, cu3); },
                  {"cu_seqlens_q[2] = 2 < cu_seqlens_q[1] = 3"});
  BlockMask vm = referenceVarlenBlockMask(plain, 4, 4, cu3, cu3);
  CHECK(vm.batch == 2);
  CHECK(vm.seqlenQ == 3);
  CHECK(vm.cuSeqlensQ == cu3);
  CHECK(vm.numFull() == 2); // one (clipped) full tile per sequence
  AttentionSpec perHead;
  perHead.headsQ = 3;
  perHead.variant.mask(kv_idx <= q_idx + head);
  BlockMask m = referenceBlockMask(perHead, 4, 4, 2, 9, 9);
  CHECK(m.heads == 3);
  CHECK(m.batch == 1);
  AttentionSpec perBatch;
  perBatch.variant.mask(kv_idx <= q_idx + batch);
  CHECK(referenceBlockMask(perBatch, 4, 4, 2, 9, 9).batch == 2);
  CHECK(referenceBlockMask(perBatch, 4, 4, 0, 9, 9).batch == 1);
}

TEST_CASE("block-sparse and varlen references match a naive oracle",
          "[frontend][reference][blockmask][varlen]") {
  const uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  AttentionSpec spec;
  spec.variant.mask(kv_idx <= q_idx + 3);
  spec.variant.scoreMod(score * 0.5f);
  spec.headDimQK = 8;
  spec.headDimV = 5;
  spec.headsQ = 4;
  spec.headsKV = 2;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::F32;
  const double scale = spec.effectiveScale();

  // Block-sparse: a per-head BSR layout plus hand-made full tiles.
  const int64_t sq = 11, sk = 13, bm = 4, bn = 3;
  BsrLayout l;
  l.blockM = bm;
  l.blockN = bn;
  l.heads = 4;
  l.numQTiles = 3;
  l.numKvTiles = 5;
  l.rowOffsets = {0};
  for (int64_t r = 0; r < 12; ++r) {
    for (int32_t t = 0; t < 5; ++t)
      if (uniformInt(rng, 0, 2) == 0)
        l.colIndices.push_back(t);
    l.rowOffsets.push_back(static_cast<int32_t>(l.colIndices.size()));
  }
  BlockMask mask = blockMaskFromBsr(l, sq, sk);
  // Row (h=1, m=2): tile 4 full (the mask is then not evaluated).
  int64_t row = mask.row(0, 1, 2);
  for (int32_t i = 0; i < mask.kvNumBlocks[row]; ++i)
    if (mask.kvIndices[row * 5 + i] == 4) // drop it from the partial list
      mask.kvIndices[row * 5 + i] =
          mask.kvIndices[row * 5 + --mask.kvNumBlocks[row]];
  std::sort(mask.kvIndices.begin() + row * 5,
            mask.kvIndices.begin() + row * 5 + mask.kvNumBlocks[row]);
  mask.fullKvNumBlocks[row] = 1;
  mask.fullKvIndices[row * 5] = 4;

  HostTensor q(DType::F32, {2, 4, sq, 8}, true), k(DType::F32, {2, 2, sk, 8}),
      v(DType::F32, {2, 2, sk, 5}, false, 2);
  q.fill([&](auto...) { return nonZero(rng); });
  k.fill([&](auto...) { return nonZero(rng); });
  v.fill([&](auto...) { return nonZero(rng); });
  ReferenceOutput got = referenceAttention(spec, q.ref, k.ref, v.ref, {}, mask);
  NaiveOutput want = naiveAttention(
      q, k, v, scale,
      [&](int64_t, int64_t h, int64_t i, int64_t j) {
        int64_t r = mask.row(0, h, i / bm);
        for (int32_t e = 0; e < mask.fullKvNumBlocks[r]; ++e)
          if (mask.fullKvIndices[r * 5 + e] == j / bn)
            return true;
        for (int32_t e = 0; e < mask.kvNumBlocks[r]; ++e)
          if (mask.kvIndices[r * 5 + e] == j / bn)
            return j <= i + 3;
        return false;
      },
      [](double s, int64_t, int64_t, int64_t, int64_t) { return s * 0.5; });
  for (size_t i = 0; i < want.lse.size(); ++i)
    CHECK((got.lse[i] == want.lse[i] ||
           std::abs(got.lse[i] - want.lse[i]) < 1e-12));
  for (size_t i = 0; i < want.o.size(); ++i)
    CHECK(std::abs(got.o[i] - want.o[i]) < 1e-12);

  // Varlen: each sequence is a batch of one of the naive oracle, with
  // q_idx/kv_idx from the sequence's start (per-sequence alignment).
  std::vector<int32_t> cuQ{0, 5, 5, 12}, cuK{0, 2, 9, 15};
  HostTensor pq(DType::F32, {1, 12, 4, 8}), pk(DType::F32, {1, 15, 2, 8}),
      pv(DType::F32, {1, 15, 2, 5});
  pq.fill([&](auto...) { return nonZero(rng); });
  pk.fill([&](auto...) { return nonZero(rng); });
  pv.fill([&](auto...) { return nonZero(rng); });
  auto view3 = [](const HostTensor &t) { // [1, T, H, D] as [T, H, D]
    TensorRef r = t.ref;
    r.rank = 3;
    r.shape = {t.ref.shape[1], t.ref.shape[2], t.ref.shape[3], 1};
    r.strides = {t.ref.strides[1], t.ref.strides[2], t.ref.strides[3], 1};
    return r;
  };
  spec.causal = Causal::BottomRight;
  VarlenReferenceOutput vout =
      referenceVarlenAttention(spec, view3(pq), view3(pk), view3(pv), cuQ, cuK);
  for (size_t b = 0; b + 1 < cuQ.size(); ++b) {
    int64_t n = cuQ[b + 1] - cuQ[b], m = cuK[b + 1] - cuK[b];
    HostTensor sq1(DType::F32, {1, 4, n, 8}), sk1(DType::F32, {1, 2, m, 8}),
        sv1(DType::F32, {1, 2, m, 5});
    sq1.fill([&](int64_t, int64_t h, int64_t i, int64_t d) {
      return static_cast<float>(pq.get(0, cuQ[b] + i, h, d));
    });
    sk1.fill([&](int64_t, int64_t h, int64_t j, int64_t d) {
      return static_cast<float>(pk.get(0, cuK[b] + j, h, d));
    });
    sv1.fill([&](int64_t, int64_t h, int64_t j, int64_t d) {
      return static_cast<float>(pv.get(0, cuK[b] + j, h, d));
    });
    NaiveOutput w = naiveAttention(
        sq1, sk1, sv1, scale,
        [&](int64_t, int64_t, int64_t i, int64_t j) {
          return j <= i + 3 && j <= i + m - n; // mask && bottom-right
        },
        [](double s, int64_t, int64_t, int64_t, int64_t) { return s * 0.5; });
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < n; ++i) {
        INFO("sequence " << b << " head " << h << " row " << i);
        double wl = w.lse[h * n + i];
        double gl = vout.lseAt(h, cuQ[b] + i);
        CHECK((gl == wl || std::abs(gl - wl) < 1e-12));
        for (int64_t d = 0; d < 5; ++d)
          CHECK(std::abs(vout.oAt(cuQ[b] + i, h, d) -
                         w.o[(h * n + i) * 5 + d]) < 1e-12);
      }
  }
}
