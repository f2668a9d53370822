//===- SparseGpuTest.cpp - Block masks, block sparsity, varlen on the GPU -===//
//
// The kernels of sparseKernels() (tests/support/KernelMatrix.h), generated
// ahead of time by gen_matrix_kernels, on the GPU:
//  - the GPU block-mask builder equals referenceBlockMask (the mask evaluated
//    at every element) exactly, for random documents (1-token documents,
//    one document covering everything), dense and varlen;
//  - runs with a built mask equal the plain float64 reference (a block mask
//    changes which tiles are visited, never the result);
//  - user BSR layouts (empty rows, full rows, per head) equal the
//    block-sparse float64 reference;
//  - varlen batches (zero-length sequences, GQA, per-sequence causal
//    alignment, with and without built block masks) equal the varlen float64
//    reference;
//  - NaN and Inf in V at keys a row masks never reach it, block-sparse and
//    varlen (issue 21 section 3; tag [masked] too).
// Fresh random inputs every run; outputs poisoned with NaN before each run.
//
//===----------------------------------------------------------------------===//
#include "BlockMaskSupport.h"
#include "GpuTestSupport.h"
#include "KernelMatrix.h"
#include "TestSeed.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::freshSeed;
using flashjit::test::GpuTensor;

namespace {

std::unique_ptr<GpuAttentionKernel> load(const testing::SparseKernel &k,
                                         Device &dev) {
  auto kernel = test::loadAheadOfTime(k.id, k.spec, dev, /*sparse=*/true);
  REQUIRE(kernel->info().config.varlen == k.varlen);
  REQUIRE(kernel->info().config.blockSparse == k.blockSparse);
  return kernel;
}

/// Host and device copies of a doc_id buffer (or nothing for variants that
/// read no buffer).
struct DocArgs {
  std::vector<int32_t> doc;
  std::unique_ptr<DeviceBuffer> buffer;
  Arguments host, device;
  DocArgs(Device &dev, const AttentionSpec &spec, std::vector<int32_t> d)
      : doc(std::move(d)) {
    for (const ParamDecl &p : spec.variant.params()) {
      host.set(p.name, Scalar::f32(20.0f));
      device.set(p.name, Scalar::f32(20.0f));
    }
    if (spec.variant.buffers().empty())
      return;
    buffer = std::make_unique<DeviceBuffer>(dev, doc.size() * sizeof(int32_t));
    buffer->copyFromHost(doc.data(), doc.size() * sizeof(int32_t));
    host.bind("doc_id", doc.data(), static_cast<int64_t>(doc.size()));
    device.bind("doc_id", static_cast<const int32_t *>(buffer->data()),
                static_cast<int64_t>(doc.size()));
  }
};

/// Downloads and compares a dense-layout GPU output with \p want.
void compareDense(const AttentionSpec &spec, GpuTensor &o, GpuTensor &lse,
                  ReferenceOutput &want, int64_t batch, int64_t sq) {
  o.download();
  lse.download();
  test::compareOutputs(spec, o, lse, want, batch, sq);
}

struct DenseInputs {
  GpuTensor q, k, v, o, lse;
  DenseInputs(Device &dev, const AttentionSpec &s, int64_t batch, int64_t sq,
              int64_t sk, std::mt19937_64 &rng)
      : q(dev, s.dtypeQ, {batch, s.headsQ, sq, s.headDimQK}),
        k(dev, s.dtypeK, {batch, s.headsKV, sk, s.headDimQK}),
        v(dev, s.dtypeV, {batch, s.headsKV, sk, s.headDimV}),
        o(dev, s.dtypeO, {batch, s.headsQ, sq, s.headDimV}),
        lse(dev, DType::F32, {batch, s.headsQ, sq, 1}, 3) {
    q.randomize(rng, 2.0f);
    k.randomize(rng, 2.0f);
    v.randomize(rng);
    o.poison();
    lse.poison();
  }
};

/// A packed varlen tensor [total, heads, dim] (rank 3), or the LSE
/// [heads, total] (rank 2, fp32) when \p dim is 0.
GpuTensor varlenTensor(Device &dev, DType t, int64_t total, int64_t heads,
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

const testing::SparseKernel &sparseKernel(const std::string &id) {
  static std::vector<testing::SparseKernel> all = testing::sparseKernels();
  for (const auto &k : all)
    if (k.id == id)
      return k;
  FAIL("no sparse kernel " << id);
  throw;
}

} // namespace

TEST_CASE("GPU block-mask builder equals the reference and runs match",
          "[gpu][sparse]") {
  Device &dev = Device::get(0);
  for (const char *id : {"bs_doc_d64_bf16_g2", "bs_doc_d128_fp16_g1"}) {
    const testing::SparseKernel &sk = sparseKernel(id);
    auto kernel = load(sk, dev);
    const AttentionSpec &spec = sk.spec;
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    struct Shape {
      int64_t batch, sq, sk;
    };
    int r = 0;
    for (Shape sh : {Shape{2, 300, 517}, Shape{1, 1000, 1000}, Shape{3, 1, 129},
                     Shape{1, 777, 64}}) {
      INFO(id << ", seed " << seed << " (FLASHJIT_TEST_SEED), batch "
              << sh.batch << ", seqlen_q " << sh.sq << ", seqlen_k " << sh.sk);
      DocArgs args(dev, spec,
                   testing::randomDocs(rng, std::max(sh.sq, sh.sk), r++ == 1));
      DeviceBlockMask built =
          kernel->buildBlockMask(sh.batch, sh.sq, sh.sk, args.device);
      BlockMask want = referenceBlockMask(spec, kernel->info().config.blockM(),
                                          kernel->info().config.blockN,
                                          sh.batch, sh.sq, sh.sk, args.host);
      BlockMask got = built.toHost();
      CHECK(testing::blockMaskDifference(got, want) == "");
      INFO("partial tiles " << want.numPartial() << ", full " << want.numFull()
                            << " of " << want.numQTiles * want.numKvTiles);

      DenseInputs in(dev, spec, sh.batch, sh.sq, sh.sk, rng);
      kernel->runBlockSparse(in.q.deviceRef, in.k.deviceRef, in.v.deviceRef,
                             in.o.deviceRef, &in.lse.deviceRef, built,
                             args.device);
      ReferenceOutput ref = referenceAttention(spec, in.q.hostRef, in.k.hostRef,
                                               in.v.hostRef, args.host);
      compareDense(spec, in.o, in.lse, ref, sh.batch, sh.sq);
    }
  }
}

TEST_CASE("GPU block-sparse runs follow user BSR layouts", "[gpu][sparse]") {
  Device &dev = Device::get(0);
  for (const char *id : {"bs_none_d128_bf16_g2", "bs_window_d64_fp16_g3"}) {
    const testing::SparseKernel &sk = sparseKernel(id);
    auto kernel = load(sk, dev);
    const AttentionSpec &spec = sk.spec;
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    int64_t bm = kernel->info().config.blockM(),
            bn = kernel->info().config.blockN;
    struct Shape {
      int64_t batch, sq, sk, heads;
    };
    for (Shape sh : {Shape{2, 513, 700, 1}, Shape{1, 300, 300, 0},
                     Shape{1, 1024, 2048, 1}, Shape{2, 130, 40, 0}}) {
      int64_t heads = sh.heads ? sh.heads : spec.headsQ;
      INFO(id << ", seed " << seed << ", batch " << sh.batch << ", seqlen_q "
              << sh.sq << ", seqlen_k " << sh.sk << ", layout heads " << heads);
      BsrLayout bsr = testing::randomBsr(rng, heads, bm, bn, sh.sq, sh.sk);
      BlockMask mask = blockMaskFromBsr(bsr, sh.sq, sh.sk);
      DeviceBlockMask dmask(mask, dev);
      DenseInputs in(dev, spec, sh.batch, sh.sq, sh.sk, rng);
      DocArgs args(dev, spec, {});
      kernel->runBlockSparse(in.q.deviceRef, in.k.deviceRef, in.v.deviceRef,
                             in.o.deviceRef, &in.lse.deviceRef, dmask,
                             args.device);
      ReferenceOutput ref = referenceAttention(spec, in.q.hostRef, in.k.hostRef,
                                               in.v.hostRef, args.host, mask);
      compareDense(spec, in.o, in.lse, ref, sh.batch, sh.sq);
    }
    // A mask of another tile size, or another seqlen, is refused.
    BsrLayout other = testing::randomBsr(rng, 1, bm, bn * 2, 256, 256);
    DeviceBlockMask wrong(blockMaskFromBsr(other, 256, 256), dev);
    DenseInputs in(dev, spec, 1, 256, 256, rng);
    DocArgs args(dev, spec, {});
    CHECK_THROWS_AS(kernel->runBlockSparse(
                        in.q.deviceRef, in.k.deviceRef, in.v.deviceRef,
                        in.o.deviceRef, &in.lse.deviceRef, wrong, args.device),
                    UserError);
    CHECK_THROWS_AS(kernel->run(in.q.deviceRef, in.k.deviceRef, in.v.deviceRef,
                                in.o.deviceRef, &in.lse.deviceRef, args.device),
                    UserError);
    // A block-sparse module described as dense would launch with the wrong
    // arguments: refused when it is loaded.
    GpuKernelInfo dense = kernel->info();
    dense.config.blockSparse = false;
    std::string base = test::matrixKernelDir() + "/" + sk.id;
    std::ifstream ptxFile(base + ".ptx");
    std::stringstream ptx;
    ptx << ptxFile.rdbuf();
    CHECK_THROWS_WITH(GpuAttentionKernel(spec, dense, ptx.str(), dev),
                      Catch::Contains("does not match its module"));
  }
}

TEST_CASE("GPU varlen runs match the varlen reference", "[gpu][sparse]") {
  Device &dev = Device::get(0);
  for (const char *id : {"vl_causal_br_d64_bf16_g2", "vl_softcap_d128_fp16_g1",
                         "vl_bs_doc_d128_bf16_g2"}) {
    const testing::SparseKernel &sk = sparseKernel(id);
    auto kernel = load(sk, dev);
    const AttentionSpec &spec = sk.spec;
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    for (int r = 0; r < 3; ++r) {
      // Lengths with zeros, 1s, tile multiples and odd ones; q and k differ.
      std::vector<int32_t> cuQ{0}, cuK{0};
      int n = r == 2 ? 1 : 2 + static_cast<int>(rng() % 5);
      for (int b = 0; b < n; ++b) {
        auto len = [&]() -> int32_t {
          switch (rng() % 5) {
          case 0:
            return 0;
          case 1:
            return 1;
          case 2:
            return 128;
          default:
            return static_cast<int32_t>(rng() % 700);
          }
        };
        cuQ.push_back(cuQ.back() + len());
        cuK.push_back(cuK.back() + (r == 1 ? cuQ.back() - cuQ[b] : len()));
      }
      std::ostringstream lens;
      for (size_t b = 0; b + 1 < cuQ.size(); ++b)
        lens << cuQ[b + 1] - cuQ[b] << "/" << cuK[b + 1] - cuK[b] << " ";
      INFO(id << ", seed " << seed << ", sequences (q/k) " << lens.str());
      int64_t tq = cuQ.back(), tk = cuK.back();
      DeviceCuSeqlens cu(cuQ, cuK, dev);
      GpuTensor q =
          varlenTensor(dev, spec.dtypeQ, tq, spec.headsQ, spec.headDimQK);
      GpuTensor k =
          varlenTensor(dev, spec.dtypeK, tk, spec.headsKV, spec.headDimQK);
      GpuTensor v =
          varlenTensor(dev, spec.dtypeV, tk, spec.headsKV, spec.headDimV);
      GpuTensor o =
          varlenTensor(dev, spec.dtypeO, tq, spec.headsQ, spec.headDimV);
      GpuTensor lse = varlenTensor(dev, DType::F32, tq, spec.headsQ, 0);
      q.randomize(rng, 2.0f);
      k.randomize(rng, 2.0f);
      v.randomize(rng);
      o.poison();
      lse.poison();
      // Per-token documents over the packed keys and queries (the mask
      // indexes doc_id with per-sequence positions).
      DocArgs args(dev, spec,
                   testing::randomDocs(rng, std::max<int64_t>(tq, tk), r == 1));
      const BlockMask *hostMask = nullptr;
      BlockMask want;
      DeviceBlockMask built;
      if (sk.blockSparse) {
        built = kernel->buildVarlenBlockMask(cu, args.device);
        want = referenceVarlenBlockMask(spec, kernel->info().config.blockM(),
                                        kernel->info().config.blockN, cuQ, cuK,
                                        args.host);
        CHECK(testing::blockMaskDifference(built.toHost(), want) == "");
        hostMask = &want;
      }
      kernel->runVarlen(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                        &lse.deviceRef, cu, args.device,
                        sk.blockSparse ? &built : nullptr);
      VarlenReferenceOutput ref = referenceVarlenAttention(
          spec, q.hostRef, k.hostRef, v.hostRef, cuQ, cuK, args.host, hostMask);
      o.download();
      lse.download();
      double worstO = 0, worstLse = 0;
      for (int64_t t = 0; t < tq; ++t)
        for (int64_t h = 0; h < spec.headsQ; ++h) {
          double wl = ref.lseAt(h, t);
          bool empty = std::isinf(wl) && wl < 0;
          for (int64_t d = 0; d < spec.headDimV; ++d) {
            float got = o.at(t, h, d);
            double w = ref.oAt(t, h, d);
            if (std::isnan(got) || (empty && got != 0.0f)) {
              FAIL_CHECK("o[" << t << "," << h << "," << d << "] = " << got
                              << ", want " << w);
              return;
            }
            worstO = std::max(worstO, std::fabs(got - w));
          }
          float gl = lse.at(h, t, 0);
          if (empty ? !(std::isinf(gl) && gl < 0) : !std::isfinite(gl)) {
            FAIL_CHECK("lse[" << h << "," << t << "] = " << gl << ", want "
                              << wl);
            return;
          }
          if (!empty)
            worstLse = std::max(worstLse, std::fabs(gl - wl) /
                                              std::max(1.0, std::fabs(wl)));
        }
      INFO("max |O - O_ref| = " << worstO
                                << ", max rel LSE error = " << worstLse);
      CHECK(worstO <= test::tolerance(spec.dtypeO));
      CHECK(worstLse <= 1e-4);
    }
  }
}

namespace {

/// Documents of 37 tokens (causal within each: the doc_id kernels' mask);
/// the key that ends each one is attended by its own row only.
bool endsDocument(int64_t pos) { return pos % 37 == 36; }

/// NaN, +Inf or -Inf by column.
float poisonValue(int64_t d) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  return d % 3 == 0 ? std::numeric_limits<float>::quiet_NaN()
                    : (d % 3 == 1 ? inf : -inf);
}

} // namespace

TEST_CASE("GPU block-sparse and varlen runs keep NaN and Inf at masked keys "
          "out",
          "[gpu][sparse][masked]") {
  // Issue 21 section 3 on the cp.async loops (block-sparse lists, varlen):
  // V of the key that ends each 37-token document is NaN or Inf; every row
  // but that key's own masks it, in partial tiles that hold keys the row
  // attends, so exactly one row per document is poisoned and every other
  // row matches the float64 reference (which skips masked keys).
  Device &dev = Device::get(0);
  uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  const int64_t n = 600, ends = n / 37; // 16 documents end below 600
  std::vector<int32_t> docs(n);
  for (int64_t i = 0; i < n; ++i)
    docs[i] = static_cast<int32_t>(i / 37);
  for (const char *id : {"bs_doc_d64_bf16_g2", "bs_doc_d128_fp16_g1"}) {
    INFO(id << ", seed " << seed << " (FLASHJIT_TEST_SEED)");
    const testing::SparseKernel &sk = sparseKernel(id);
    auto kernel = load(sk, dev);
    const AttentionSpec &spec = sk.spec;
    DocArgs args(dev, spec, docs);
    DeviceBlockMask built = kernel->buildBlockMask(1, n, n, args.device);
    DenseInputs in(dev, spec, 1, n, n, rng);
    const TensorRef &v = in.v.hostRef;
    for (int64_t h = 0; h < spec.headsKV; ++h)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; endsDocument(j) && d < spec.headDimV; ++d)
          storeFromFloat(v.data, v.dtype, v.offset(0, h, j, d), poisonValue(d));
    in.v.device.copyFromHost(in.v.host.data(), in.v.host.size());
    kernel->runBlockSparse(in.q.deviceRef, in.k.deviceRef, in.v.deviceRef,
                           in.o.deviceRef, &in.lse.deviceRef, built,
                           args.device);
    ReferenceOutput ref = referenceAttention(spec, in.q.hostRef, in.k.hostRef,
                                             in.v.hostRef, args.host);
    in.o.download();
    in.lse.download();
    test::AttendedRows rows =
        test::compareAttendedRows(spec, in.o, in.lse, ref, 1, n);
    CHECK(rows.poisoned == ends * spec.headsQ);
    CHECK(rows.clean == (n - ends) * spec.headsQ);
  }
  // Varlen with a built block mask: two sequences of 300 tokens (documents
  // restart at each sequence's position 0).
  const testing::SparseKernel &sk = sparseKernel("vl_bs_doc_d128_bf16_g2");
  INFO(sk.id << ", seed " << seed << " (FLASHJIT_TEST_SEED)");
  auto kernel = load(sk, dev);
  const AttentionSpec &spec = sk.spec;
  std::vector<int32_t> cu{0, 300, 600};
  DeviceCuSeqlens dcu(cu, cu, dev);
  DocArgs args(dev, spec, docs);
  GpuTensor q = varlenTensor(dev, spec.dtypeQ, n, spec.headsQ, spec.headDimQK);
  GpuTensor k = varlenTensor(dev, spec.dtypeK, n, spec.headsKV, spec.headDimQK);
  GpuTensor v = varlenTensor(dev, spec.dtypeV, n, spec.headsKV, spec.headDimV);
  GpuTensor o = varlenTensor(dev, spec.dtypeO, n, spec.headsQ, spec.headDimV);
  GpuTensor lse = varlenTensor(dev, DType::F32, n, spec.headsQ, 0);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  o.poison();
  lse.poison();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < spec.headsKV; ++h)
      for (int64_t d = 0; endsDocument(t % 300) && d < spec.headDimV; ++d)
        storeFromFloat(v.hostRef.data, v.hostRef.dtype,
                       v.hostRef.offset(t, h, d), poisonValue(d));
  v.device.copyFromHost(v.host.data(), v.host.size());
  DeviceBlockMask built = kernel->buildVarlenBlockMask(dcu, args.device);
  BlockMask want =
      referenceVarlenBlockMask(spec, kernel->info().config.blockM(),
                               kernel->info().config.blockN, cu, cu, args.host);
  kernel->runVarlen(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                    &lse.deviceRef, dcu, args.device, &built);
  VarlenReferenceOutput ref = referenceVarlenAttention(
      spec, q.hostRef, k.hostRef, v.hostRef, cu, cu, args.host, &want);
  o.download();
  int64_t clean = 0, poisoned = 0;
  double worst = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < spec.headsQ; ++h) {
      bool finite = true, reached = false;
      for (int64_t d = 0; d < spec.headDimV; ++d) {
        finite = finite && std::isfinite(ref.oAt(t, h, d));
        reached = reached || !std::isfinite(o.at(t, h, d));
      }
      if (!finite) {
        ++poisoned;
        CHECK(reached); // the row attends the value: it reaches the row
        continue;
      }
      ++clean;
      for (int64_t d = 0; d < spec.headDimV; ++d) {
        double e = std::fabs(o.at(t, h, d) - ref.oAt(t, h, d));
        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
      }
    }
  INFO("max |O - O_ref| over clean rows = " << worst);
  CHECK(worst <= test::tolerance(spec.dtypeO));
  CHECK(poisoned == 2 * 8 * spec.headsQ); // 8 documents end in each sequence
  CHECK(clean == (n - 16) * spec.headsQ);
}
