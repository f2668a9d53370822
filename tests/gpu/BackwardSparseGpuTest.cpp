//===- BackwardSparseGpuTest.cpp - The block-sparse GPU backward ---------===//
//
// The block-sparse backward kernels of tests/support/KernelMatrix.h
// (backwardSparseKernels()), generated ahead of time by gen_matrix_kernels,
// run on the GPU with block masks and checked against the float64
// reference backward given the same mask (referenceAttentionBackward /
// referenceVarlenAttentionBackward with a BlockMask): document masks and a
// sliding window with the masks built from the mask (referenceBlockMask:
// partial and full tiles), dense and causal kernels with random BSR layouts
// (shared and per head), odd sequence lengths, GQA, mask tiles equal to the
// backward's and twice / four times them. O and LSE come from the float64
// forward with the same mask. dQ, dK, dV are poisoned with NaN before each
// run; rows with no allowed key and keys no query sees must come out
// exactly 0. The device transposition equals its host twin
// (transposeBlockMask) on the used entries, and the mode errors are
// checked.
//
//===----------------------------------------------------------------------===//
#include "BackwardTestSupport.h"
#include "BlockMaskSupport.h"
#include "GpuTestSupport.h"
#include "KernelMatrix.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;

namespace {

std::unique_ptr<GpuAttentionBackwardKernel>
loadSparseBackward(const testing::MatrixKernel &k, Device &dev) {
  std::string base = test::matrixKernelDir() + "/" + k.id;
  std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
  INFO("kernel files " << base << ".{info,ptx}");
  REQUIRE(infoFile);
  REQUIRE(ptxFile);
  GpuKernelInfo info = test::readKernelInfo(infoFile);
  REQUIRE(info.config.kind == KernelKind::Backward);
  REQUIRE(info.config.blockSparse);
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  return std::make_unique<GpuAttentionBackwardKernel>(k.spec, info, ptx.str(),
                                                      dev);
}

using test::backward::put;

/// The mask of a call: built from the variant's mask (document, window:
/// partial and full tiles), or a random BSR layout (dense and causal
/// variants; per head when \p perHead).
BlockMask makeMask(std::mt19937_64 &rng, const testing::MatrixKernel &k,
                   int64_t bm, int64_t bn, int64_t batch, int64_t sq,
                   int64_t sk, bool perHead, const Arguments &hostArgs) {
  if (k.variant == "none" || k.variant == "causal_br")
    return blockMaskFromBsr(
        testing::randomBsr(rng, perHead ? k.spec.headsQ : 1, bm, bn, sq, sk),
        sq, sk);
  return referenceBlockMask(k.spec, bm, bn, batch, sq, sk, hostArgs);
}

/// One block-sparse backward call against the float64 reference with the
/// same block mask.
void checkSparseBackward(Device &dev, const GpuAttentionBackwardKernel &kernel,
                         const testing::MatrixKernel &mk, int64_t batch,
                         int64_t sq, int64_t sk, int64_t bm, int64_t bn,
                         bool perHead, uint64_t seed) {
  const AttentionSpec &spec = mk.spec;
  INFO("batch " << batch << ", seqlen_q " << sq << ", seqlen_k " << sk
                << ", mask tiles " << bm << " x " << bn << ", per head "
                << perHead << ", seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dvv = spec.headDimV;
  const DType dt = spec.dtypeQ;
  GpuTensor q(dev, dt, {batch, hq, sq, dqk}, 4),
      k(dev, dt, {batch, hkv, sk, dqk}, 4),
      v(dev, dt, {batch, hkv, sk, dvv}, 4), o(dev, dt, {batch, hq, sq, dvv}, 4),
      dO(dev, dt, {batch, hq, sq, dvv}, 4),
      lse(dev, DType::F32, {batch, hq, sq, 1}, 3),
      dq(dev, dt, {batch, hq, sq, dqk}, 4),
      dk(dev, dt, {batch, hkv, sk, dqk}, 4),
      dv(dev, dt, {batch, hkv, sk, dvv}, 4);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  dO.randomize(rng);
  test::VariantArgs args(dev, spec, sq, sk);
  BlockMask mask = makeMask(rng, mk, bm, bn, batch, sq, sk, perHead, args.host);
  AttentionSpec fwd = spec;
  fwd.returnLse = true;
  ReferenceOutput ref =
      referenceAttention(fwd, q.hostRef, k.hostRef, v.hostRef, args.host, mask);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        put(lse, b, h, i, 0, ref.lseAt(b, h, i));
        for (int64_t d = 0; d < dvv; ++d)
          put(o, b, h, i, d, ref.oAt(b, h, i, d));
      }
  o.device.copyFromHost(o.host.data(), o.host.size());
  lse.device.copyFromHost(lse.host.data(), lse.host.size());
  dq.poison();
  dk.poison();
  dv.poison();
  DeviceBlockMask dmask(mask, dev);
  DataGradients got =
      kernel.runBlockSparse(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                            lse.deviceRef, dO.deviceRef, dq.deviceRef,
                            dk.deviceRef, dv.deviceRef, dmask, args.device);
  (void)got;
  dq.download();
  dk.download();
  dv.download();
  ReferenceGradients want = referenceAttentionBackward(
      spec, q.hostRef, k.hostRef, v.hostRef, dO.hostRef, args.host, {}, &mask);
  test::backward::GradCheck cq, ck, cv;
  int64_t emptyRows = 0, unseenKeys = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        bool empty = std::isinf(ref.lseAt(b, h, i));
        emptyRows += empty;
        for (int64_t d = 0; d < dqk; ++d)
          cq.add(dq.at(b, h, i, d), want.dqAt(b, h, i, d), empty);
      }
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t j = 0; j < sk; ++j) {
        bool unseen = true;
        for (int64_t d = 0; d < dvv; ++d)
          unseen = unseen && want.dvAt(b, h, j, d) == 0.0;
        unseenKeys += unseen;
        for (int64_t d = 0; d < dqk; ++d)
          ck.add(dk.at(b, h, j, d), want.dkAt(b, h, j, d), unseen);
        for (int64_t d = 0; d < dvv; ++d)
          cv.add(dv.at(b, h, j, d), want.dvAt(b, h, j, d), unseen);
      }
  }
  std::printf("  %-34s b%lld sq%-4lld sk%-4lld tiles %lldx%lld: dQ %.2e/%.2e "
              " dK %.2e/%.2e  dV %.2e/%.2e, %lld partial + %lld full tiles, "
              "%lld empty rows, %lld unseen keys\n",
              kernel.info().name.c_str(), (long long)batch, (long long)sq,
              (long long)sk, (long long)bm, (long long)bn, cq.relMax(),
              cq.relNorm(), ck.relMax(), ck.relNorm(), cv.relMax(),
              cv.relNorm(), (long long)mask.numPartial(),
              (long long)mask.numFull(), (long long)emptyRows,
              (long long)unseenKeys);
  test::backward::checkGrad("dQ", cq, dt);
  test::backward::checkGrad("dK", ck, dt);
  test::backward::checkGrad("dV", cv, dt);
}

/// A packed varlen tensor [total, heads, dim], or LSE [heads, total].
GpuTensor packed(Device &dev, DType t, int64_t total, int64_t heads,
                 int64_t dim) {
  if (dim == 0) {
    GpuTensor x(dev, t, {heads, total, 1, 1}, 4);
    x.hostRef.rank = x.deviceRef.rank = 2;
    return x;
  }
  GpuTensor x(dev, t, {total, heads, dim, 1}, 4);
  x.hostRef.rank = x.deviceRef.rank = 3;
  return x;
}

/// One varlen block-sparse backward call (a mask built per sequence).
void checkSparseVarlenBackward(Device &dev,
                               const GpuAttentionBackwardKernel &kernel,
                               const AttentionSpec &spec,
                               const std::vector<int32_t> &cuQ,
                               const std::vector<int32_t> &cuK, int64_t bm,
                               int64_t bn, uint64_t seed) {
  INFO("seed " << seed << ", mask tiles " << bm << " x " << bn);
  std::mt19937_64 rng(seed);
  const int64_t tq = cuQ.back(), tk = cuK.back();
  int64_t maxQ = 0, maxK = 0;
  for (size_t b = 0; b + 1 < cuQ.size(); ++b) {
    maxQ = std::max<int64_t>(maxQ, cuQ[b + 1] - cuQ[b]);
    maxK = std::max<int64_t>(maxK, cuK[b + 1] - cuK[b]);
  }
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  const int64_t dqk = spec.headDimQK, dvv = spec.headDimV;
  const DType dt = spec.dtypeQ;
  GpuTensor q = packed(dev, dt, tq, hq, dqk), k = packed(dev, dt, tk, hkv, dqk),
            v = packed(dev, dt, tk, hkv, dvv), o = packed(dev, dt, tq, hq, dvv),
            dO = packed(dev, dt, tq, hq, dvv),
            lse = packed(dev, DType::F32, tq, hq, 0),
            dq = packed(dev, dt, tq, hq, dqk),
            dk = packed(dev, dt, tk, hkv, dqk),
            dv = packed(dev, dt, tk, hkv, dvv);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  dO.randomize(rng);
  test::VariantArgs args(dev, spec, std::max<int64_t>(maxQ, 1),
                         std::max<int64_t>(maxK, 1));
  BlockMask mask = referenceVarlenBlockMask(spec, bm, bn, cuQ, cuK, args.host);
  AttentionSpec fwd = spec;
  fwd.returnLse = true;
  VarlenReferenceOutput ref = referenceVarlenAttention(
      fwd, q.hostRef, k.hostRef, v.hostRef, cuQ, cuK, args.host, &mask);
  for (int64_t t = 0; t < tq; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      storeFromFloat(lse.hostRef.data, DType::F32, lse.hostRef.offset(h, t, 0),
                     static_cast<float>(ref.lseAt(h, t)));
      for (int64_t d = 0; d < dvv; ++d)
        storeFromFloat(o.hostRef.data, dt, o.hostRef.offset(t, h, d),
                       static_cast<float>(ref.oAt(t, h, d)));
    }
  o.device.copyFromHost(o.host.data(), o.host.size());
  lse.device.copyFromHost(lse.host.data(), lse.host.size());
  dq.poison();
  dk.poison();
  dv.poison();
  DeviceCuSeqlens cu(cuQ, cuK, dev);
  DeviceBlockMask dmask(mask, dev);
  kernel.runVarlen(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                   lse.deviceRef, dO.deviceRef, dq.deviceRef, dk.deviceRef,
                   dv.deviceRef, cu, dmask, args.device);
  dq.download();
  dk.download();
  dv.download();
  VarlenReferenceGradients want = referenceVarlenAttentionBackward(
      spec, q.hostRef, k.hostRef, v.hostRef, dO.hostRef, cuQ, cuK, args.host,
      {}, &mask);
  test::backward::GradCheck cq, ck, cv;
  for (int64_t t = 0; t < tq; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      bool empty = std::isinf(ref.lseAt(h, t));
      for (int64_t d = 0; d < dqk; ++d)
        cq.add(dq.at(t, h, d), want.dqAt(t, h, d), empty);
    }
  for (int64_t t = 0; t < tk; ++t)
    for (int64_t h = 0; h < hkv; ++h) {
      bool unseen = true;
      for (int64_t d = 0; d < dvv; ++d)
        unseen = unseen && want.dvAt(t, h, d) == 0.0;
      for (int64_t d = 0; d < dqk; ++d)
        ck.add(dk.at(t, h, d), want.dkAt(t, h, d), unseen);
      for (int64_t d = 0; d < dvv; ++d)
        cv.add(dv.at(t, h, d), want.dvAt(t, h, d), unseen);
    }
  std::printf("  %-34s varlen %lld sequences, tiles %lldx%lld: dQ %.2e/%.2e  "
              "dK %.2e/%.2e  dV %.2e/%.2e\n",
              kernel.info().name.c_str(), (long long)(cuQ.size() - 1),
              (long long)bm, (long long)bn, cq.relMax(), cq.relNorm(),
              ck.relMax(), ck.relNorm(), cv.relMax(), cv.relNorm());
  test::backward::checkGrad("dQ", cq, dt);
  test::backward::checkGrad("dK", ck, dt);
  test::backward::checkGrad("dV", cv, dt);
}

bool isVarlen(const testing::MatrixKernel &k) {
  return k.id.rfind("bwdbsvl_", 0) == 0;
}

} // namespace

TEST_CASE("block-sparse backward kernels match the float64 reference "
          "backward with the same block mask",
          "[gpu][backward][block-sparse]") {
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {65, 17}, {130, 77}, {257, 300}, {200, 200}, {0, 9}, {9, 0}};
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0, checked = 0;
  for (const testing::MatrixKernel &k : testing::backwardSparseKernels()) {
    if (isVarlen(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = loadSparseBackward(k, dev);
    CHECK(kernel->function().localBytes() == 0);
    const int64_t bwdQ = kernel->info().config.blockN,
                  bwdK = kernel->info().config.blockM();
    // Mask tiles: the backward's own, then unions of 2 and 4 of them (the
    // forward's usual 128-row tiles).
    const std::pair<int64_t, int64_t> tiles[] = {
        {bwdQ, bwdK}, {2 * bwdQ, 2 * bwdK}, {128, bwdK}, {4 * bwdQ, bwdK}};
    for (int r = 0; r < 4; ++r, ++i) {
      auto [sq, sk] = shapes[i % std::size(shapes)];
      auto [bm, bn] = tiles[r];
      checkSparseBackward(dev, *kernel, k, 1 + i % 2, sq, sk, bm, bn, i % 2,
                          seed + i);
      ++checked;
    }
  }
  CHECK(checked == 20);
}

TEST_CASE("varlen block-sparse backward kernels match the float64 varlen "
          "reference with the same block mask",
          "[gpu][backward][block-sparse]") {
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  int checked = 0;
  for (const testing::MatrixKernel &k : testing::backwardSparseKernels()) {
    if (!isVarlen(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec) << ", seed " << seed);
    auto kernel = loadSparseBackward(k, dev);
    REQUIRE(kernel->info().config.varlen);
    const int64_t bwdQ = kernel->info().config.blockN,
                  bwdK = kernel->info().config.blockM();
    // An empty sequence first and last, query-only and key-only ones, odd
    // lengths.
    std::vector<int32_t> lq{0, 17, 1, 0, 130, 65, 200, 0},
        lk{0, 33, 1, 9, 77, 65, 260, 0};
    std::vector<int32_t> cuQ{0}, cuK{0};
    for (size_t b = 0; b < lq.size(); ++b) {
      cuQ.push_back(cuQ.back() + lq[b]);
      cuK.push_back(cuK.back() + lk[b]);
    }
    checkSparseVarlenBackward(dev, *kernel, k.spec, cuQ, cuK, bwdQ, bwdK, seed);
    checkSparseVarlenBackward(dev, *kernel, k.spec, cuQ, cuK, 128, 2 * bwdK,
                              seed + 1);
    checked += 2;
  }
  CHECK(checked == 2);
}

TEST_CASE("the device transposition of a block mask equals its host twin",
          "[gpu][backward][block-sparse]") {
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const testing::MatrixKernel k = testing::backwardSparseKernels().at(0);
  auto kernel = loadSparseBackward(k, dev);
  const int64_t bwdQ = kernel->info().config.blockN,
                bwdK = kernel->info().config.blockM();
  int checked = 0;
  for (int64_t rq : {1, 2, 4})
    for (int64_t rk : {1, 2}) {
      int64_t sq = 1 + rng() % 900, sk = 1 + rng() % 900;
      INFO("ratios " << rq << ", " << rk << ", seqlens " << sq << " x " << sk);
      BlockMask mask = blockMaskFromBsr(
          testing::randomBsr(rng, k.spec.headsQ, rq * bwdQ, rk * bwdK, sq, sk),
          sq, sk);
      // Some tiles full too (a BSR layout lists partial ones only).
      test::VariantArgs args(dev, k.spec, sq, sk);
      BlockMask built = referenceBlockMask(k.spec, rq * bwdQ, rk * bwdK, 1, sq,
                                           sk, args.host);
      for (const BlockMask *m : {&mask, &built}) {
        DeviceBlockMask dm(*m, dev);
        TransposedBlockMask got = kernel->transposeOnDevice(dm);
        TransposedBlockMask want = transposeBlockMask(*m, bwdQ, bwdK);
        REQUIRE(got.numQTiles == want.numQTiles);
        REQUIRE(got.numKvTiles == want.numKvTiles);
        REQUIRE(got.qNumBlocks == want.qNumBlocks);
        REQUIRE(got.fullQNumBlocks == want.fullQNumBlocks);
        for (size_t r = 0; r < want.qNumBlocks.size(); ++r)
          for (int64_t e = 0; e < want.numQTiles; ++e) {
            size_t at = r * want.numQTiles + e;
            if (e < want.qNumBlocks[r])
              REQUIRE(got.qIndices[at] == want.qIndices[at]);
            if (e < want.fullQNumBlocks[r])
              REQUIRE(got.fullQIndices[at] == want.fullQIndices[at]);
          }
        ++checked;
      }
    }
  CHECK(checked == 12);
}

TEST_CASE("the block-sparse GPU backward refuses what it does not take",
          "[gpu][backward][block-sparse]") {
  Device &dev = Device::get(0);
  const testing::MatrixKernel k = testing::backwardSparseKernels().at(2);
  REQUIRE(k.variant == "none");
  auto kernel = loadSparseBackward(k, dev);
  const int64_t sq = 100, sk = 120, bwdK = kernel->info().config.blockM();
  const DType dt = k.spec.dtypeQ;
  const int64_t h = k.spec.headsQ, d = k.spec.headDimQK;
  GpuTensor q(dev, dt, {1, h, sq, d}, 4), kk(dev, dt, {1, h, sk, d}, 4),
      v(dev, dt, {1, h, sk, d}, 4), o(dev, dt, {1, h, sq, d}, 4),
      dO(dev, dt, {1, h, sq, d}, 4), lse(dev, DType::F32, {1, h, sq, 1}, 3),
      dq(dev, dt, {1, h, sq, d}, 4), dk(dev, dt, {1, h, sk, d}, 4),
      dv(dev, dt, {1, h, sk, d}, 4);
  std::mt19937_64 rng(3);
  auto call = [&](const DeviceBlockMask &m, GpuBackwardOptions opt = {}) {
    kernel->runBlockSparse(q.deviceRef, kk.deviceRef, v.deviceRef, o.deviceRef,
                           lse.deviceRef, dO.deviceRef, dq.deviceRef,
                           dk.deviceRef, dv.deviceRef, m, {}, opt);
  };
  // Mask tiles narrower than the backward's keys per CTA: both values named.
  DeviceBlockMask narrow(
      blockMaskFromBsr(testing::randomBsr(rng, 1, 128, bwdK / 2, sq, sk), sq,
                       sk),
      dev);
  CHECK_THROWS_WITH(
      call(narrow),
      Catch::Contains("block_mask.block_n = " + std::to_string(bwdK / 2)) &&
          Catch::Contains(std::to_string(bwdK) + " keys per "
                                                 "tile"));
  DeviceBlockMask ok(
      blockMaskFromBsr(testing::randomBsr(rng, 1, 128, bwdK, sq, sk), sq, sk),
      dev);
  GpuBackwardOptions det;
  det.deterministic = true;
  CHECK_THROWS_WITH(call(ok, det), Catch::Contains("is block-sparse"));
  // Another call's sequence lengths.
  DeviceBlockMask other(
      blockMaskFromBsr(testing::randomBsr(rng, 1, 128, bwdK, sq + 64, sk),
                       sq + 64, sk),
      dev);
  CHECK_THROWS_WITH(call(other), Catch::Contains("block_mask.seqlen_q"));
  // A dense call of a block-sparse kernel.
  CHECK_THROWS_WITH(kernel->run(q.deviceRef, kk.deviceRef, v.deviceRef,
                                o.deviceRef, lse.deviceRef, dO.deviceRef,
                                dq.deviceRef, dk.deviceRef, dv.deviceRef),
                    Catch::Contains("use runBlockSparse"));
}
