//===- PaddedHeadDimGpuTest.cpp - Head dims that are not multiples of 16 --===//
//
// Issue 16, section 2. The kernels of paddedKernels() (tests/support/
// KernelMatrix.h: head dims 8, 40, 59, 72, 111, 200, unequal qk / v head
// dims, masks, score modifiers, GQA, varlen and block-sparse), generated
// ahead of time by gen_matrix_kernels, on the GPU against the float64
// reference on fresh random inputs and odd shapes. Q, K and V are
// allocated to their exact size (the last row of the last head ends the
// allocation: a read past the head dim's edge there is out of bounds for
// compute-sanitizer); O's rows have padding elements after the head dim
// that must keep their NaN poison (no store past the edge).
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "KernelMatrix.h"
#include "TestSeed.h"

#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::freshSeed;
using flashjit::test::GpuTensor;

namespace {

/// O's row padding: 2 elements where head_dim_v is even (rows stay 4-byte
/// aligned, as the kernel's 2-element stores need), else 1.
int64_t oPad(const AttentionSpec &spec) { return spec.headDimV % 2 ? 1 : 2; }

/// Fails at the first padding element of \p o [batch, heads, seqlen,
/// head_dim_v \p dv + \p pad] past \p dv that is not the NaN poison any
/// more.
void checkPadding(const GpuTensor &o, int64_t dv, int64_t pad) {
  const TensorRef &r = o.hostRef;
  for (int64_t a = 0; a < r.shape[0]; ++a)
    for (int64_t b = 0; b < r.shape[1]; ++b)
      for (int64_t c = 0; c < r.shape[2]; ++c)
        for (int64_t d = dv; d < dv + pad; ++d) {
          float got = o.at(a, b, c, d);
          if (!std::isnan(got)) {
            FAIL_CHECK("o[" << a << "," << b << "," << c << "," << d
                            << "] (padding past head_dim_v " << dv
                            << ") was written: " << got);
            return;
          }
        }
}

} // namespace

TEST_CASE("GPU forward at head dims that are not multiples of 16 matches the "
          "float64 reference",
          "[gpu][padded]") {
  Device &dev = Device::get(0);
  int runs = 0;
  for (const testing::SparseKernel &pk : testing::paddedKernels()) {
    if (pk.varlen)
      continue;
    const AttentionSpec &spec = pk.spec;
    auto kernel = test::loadAheadOfTime(pk.id, spec, dev, /*sparse=*/true);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    for (int r = 0; r < 2; ++r) {
      int64_t batch = 1 + rng() % 2, sq = 1 + rng() % 300, sk = 1 + rng() % 300;
      bool bshd = r == 1; // [batch, seqlen, heads, head_dim] Q
      INFO(pk.id << ", seed " << seed << ", batch " << batch << ", seqlen_q "
                 << sq << ", seqlen_k " << sk << (bshd ? ", bshd q" : "")
                 << ": " << printSpec(spec));
      GpuTensor q(dev, spec.dtypeQ, {batch, spec.headsQ, sq, spec.headDimQK}, 4,
                  bshd),
          k(dev, spec.dtypeK, {batch, spec.headsKV, sk, spec.headDimQK}),
          v(dev, spec.dtypeV, {batch, spec.headsKV, sk, spec.headDimV}),
          o(dev, spec.dtypeO, {batch, spec.headsQ, sq, spec.headDimV}, 4, false,
            oPad(spec)),
          lse(dev, DType::F32, {batch, spec.headsQ, sq, 1}, 3);
      q.randomize(rng, 2.0f);
      k.randomize(rng, 2.0f);
      v.randomize(rng);
      o.poison();
      lse.poison();
      test::VariantArgs args(dev, spec, sq, sk);
      if (pk.blockSparse) {
        DeviceBlockMask m = kernel->buildBlockMask(batch, sq, sk, args.device);
        kernel->runBlockSparse(q.deviceRef, k.deviceRef, v.deviceRef,
                               o.deviceRef, &lse.deviceRef, m, args.device);
      } else {
        kernel->run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                    &lse.deviceRef, args.device);
      }
      ReferenceOutput want =
          referenceAttention(spec, q.hostRef, k.hostRef, v.hostRef, args.host);
      o.download();
      lse.download();
      test::compareOutputs(spec, o, lse, want, batch, sq);
      checkPadding(o, spec.headDimV, oPad(spec));
      ++runs;
    }
  }
  CHECK(runs == 20);
}

TEST_CASE("GPU varlen forward at a head dim that is not a multiple of 16",
          "[gpu][padded]") {
  Device &dev = Device::get(0);
  for (const testing::SparseKernel &pk : testing::paddedKernels()) {
    if (!pk.varlen)
      continue;
    const AttentionSpec &spec = pk.spec;
    auto kernel = test::loadAheadOfTime(pk.id, spec, dev, /*sparse=*/true);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    std::vector<int32_t> cuQ{0}, cuK{0};
    for (int32_t len : {37, 0, 130, 1, int32_t(1 + rng() % 300)}) {
      cuQ.push_back(cuQ.back() + len);
      cuK.push_back(cuK.back() + int32_t(rng() % 200));
    }
    INFO(pk.id << ", seed " << seed);
    int64_t tq = cuQ.back(), tk = cuK.back();
    DeviceCuSeqlens cu(cuQ, cuK, dev);
    auto packed = [&](DType t, int64_t total, int64_t heads, int64_t dim,
                      int64_t pad) {
      GpuTensor x(dev, t, {total, heads, dim, 1}, 4, false, pad);
      x.hostRef.rank = x.deviceRef.rank = 3;
      return x;
    };
    // [total, heads, dim]: GpuTensor pads the last axis of its 4-d shape,
    // here 1; the rows of O get their padding from a wider head_dim instead.
    GpuTensor q = packed(spec.dtypeQ, tq, spec.headsQ, spec.headDimQK, 0),
              k = packed(spec.dtypeK, tk, spec.headsKV, spec.headDimQK, 0),
              v = packed(spec.dtypeV, tk, spec.headsKV, spec.headDimV, 0),
              o = packed(spec.dtypeO, tq, spec.headsQ,
                         spec.headDimV + oPad(spec), 0);
    o.hostRef.shape[2] = o.deviceRef.shape[2] = spec.headDimV;
    GpuTensor lse(dev, DType::F32, {spec.headsQ, tq, 1, 1}, 4);
    lse.hostRef.rank = lse.deviceRef.rank = 2;
    q.randomize(rng, 2.0f);
    k.randomize(rng, 2.0f);
    v.randomize(rng);
    o.poison();
    lse.poison();
    test::VariantArgs args(dev, spec, tq, tk);
    kernel->runVarlen(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                      &lse.deviceRef, cu, args.device);
    VarlenReferenceOutput want = referenceVarlenAttention(
        spec, q.hostRef, k.hostRef, v.hostRef, cuQ, cuK, args.host);
    o.download();
    lse.download();
    const double tol = test::tolerance(spec.dtypeO);
    double worst = 0;
    for (int64_t t = 0; t < tq; ++t)
      for (int64_t h = 0; h < spec.headsQ; ++h) {
        double wl = want.lseAt(h, t);
        float gl = lse.at(h, t, 0);
        INFO("token " << t << " head " << h);
        if (std::isinf(wl))
          CHECK(gl == float(wl));
        else
          CHECK(std::abs(gl - wl) <= 1e-4 * (1 + std::abs(wl)));
        for (int64_t d = 0; d < spec.headDimV + oPad(spec); ++d) {
          float got = o.at(t, h, d);
          if (d >= spec.headDimV) {
            if (!std::isnan(got)) {
              FAIL_CHECK("o[" << t << "," << h << "," << d
                              << "] (padding) was written: " << got);
              return;
            }
            continue;
          }
          double w = want.oAt(t, h, d);
          if (std::isnan(got)) {
            FAIL_CHECK("o[" << t << "," << h << "," << d << "] = " << got);
            return;
          }
          worst = std::max(worst, std::abs(got - w));
        }
      }
    INFO("max |O - O_ref| = " << worst);
    CHECK(worst <= tol);
  }
}
