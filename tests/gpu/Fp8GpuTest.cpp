//===- Fp8GpuTest.cpp - The fp8 forward on sm_90a -------------------------===//
//
// Issue 18. The kernels of fp8Kernels() (tests/support/KernelMatrix.h),
// generated ahead of time by gen_matrix_kernels for sm_90a, on the GPU
// against the float64 reference computed from the dequantised inputs (the
// reference applies the same descales): dense, causal (both alignments), a
// window, softcap, a document mask, ALiBi; e4m3 and e5m2 K/V, bf16 and
// fp16 O, GQA, head dims 64, 128, 192 and 256, odd shapes (seqlens not
// multiples of the tiles), per-block, per-tensor and absent descales (the
// kernel's null pointers: factor 1); block-sparse kernels with block masks
// built on the GPU (document masks, causal), varlen kernels (empty and
// 1-token sequences, odd lengths, per-sequence descales), varlen with
// built block masks.
//
// Tolerance: the kernel quantises P to e4m3 for O += P V (relative error
// at most 2^-4 per element, round to nearest), the rest is fp32 and the
// bf16 / fp16 rounding of O. With V in [-1, 1]: max |O - O_ref| <= 6e-2
// and the RMS of O - O_ref over the call <= 1.2e-2 (FlashAttention-3
// reports an fp8 RMSE of 9.1e-3 on its inputs), LSE within 2e-3 relative
// (P's quantisation does not enter it, but Hopper's fp8 MMA accumulates S
// with reduced precision: DeepSeek-V3's report measured about 14 bits on
// the H800; at D = 128 with |q|, |k| <= 2 that is up to ~1e-3 in a score).
//
// A hidden [.fp8bench] case times fp8 against the bf16 default kernel of
// the same dense shape (D = 128 and 256), the causal fp8 kernel against
// itself built without masked-key isolation, and the fp8 varlen kernel.
//
//===----------------------------------------------------------------------===//
#include "BlockMaskSupport.h"
#include "GpuTestSupport.h"
#include "KernelMatrix.h"
#include "TestSeed.h"

#include "flashjit/frontend/Fp8.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Launch.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::freshSeed;
using flashjit::test::GpuTensor;

namespace {

const testing::SparseKernel &fp8Kernel(const std::string &id) {
  static std::vector<testing::SparseKernel> all = testing::fp8Kernels();
  for (const auto &k : all)
    if (k.id == id)
      return k;
  FAIL("no fp8 kernel " << id);
  throw;
}

/// How a call's inputs are scaled.
enum class Scaling { PerBlock, PerTensor, None };

/// One fp8 input: its codes in a GpuTensor (host and device) and its
/// descales (host and device; none with Scaling::None).
struct Fp8Input {
  GpuTensor t;
  std::vector<float> descale;
  DeviceBuffer deviceDescale;

  /// Uniform values in [-range, range] of shape \p shape, quantised to
  /// \p dtype (\p group heads per descale block). With \p cu (varlen) the
  /// tensor is [total, heads, dim] (\p shape {total, heads, dim, 1}) and a
  /// block is one sequence's \p group heads.
  Fp8Input(Device &dev, DType dtype, std::array<int64_t, 4> shape,
           Scaling scaling, int64_t group, float range, std::mt19937_64 &rng,
           std::span<const int32_t> cu = {})
      : t(dev, dtype, shape) {
    if (!cu.empty())
      t.hostRef.rank = t.deviceRef.rank = 3;
    if (scaling == Scaling::None) {
      t.randomize(rng, range); // codes of the values, descale 1
      return;
    }
    std::vector<float> x(size_t(shape[0] * shape[1] * shape[2] * shape[3]));
    std::uniform_real_distribution<float> u(-range, range);
    for (float &v : x)
      v = u(rng);
    TensorRef ref;
    ref.data = x.data();
    ref.dtype = DType::F32;
    ref.rank = cu.empty() ? 4 : 3;
    ref.shape = shape;
    ref.strides = {shape[1] * shape[2] * shape[3], shape[2] * shape[3],
                   shape[3], 1};
    Fp8Tensor q =
        quantizeFp8(ref, dtype,
                    scaling == Scaling::PerBlock ? Fp8Scaling::PerBlock
                                                 : Fp8Scaling::PerTensor,
                    group, cu);
    // quantizeFp8 keeps one code for an empty tensor (a varlen K or V
    // whose sequences are all empty), so that its data() is valid.
    REQUIRE(q.data.size() == std::max<size_t>(t.host.size(), 1));
    if (!t.host.empty()) {
      std::memcpy(t.host.data(), q.data.data(), t.host.size());
      t.device.copyFromHost(t.host.data(), t.host.size());
    }
    descale = q.descale;
    deviceDescale = DeviceBuffer(dev, descale.size() * sizeof(float));
    deviceDescale.copyFromHost(descale.data(), descale.size() * sizeof(float));
  }
  const float *device() const {
    return static_cast<const float *>(deviceDescale.data());
  }
};

/// Binds the descales of \p q, \p k, \p v (where they have any) to the host
/// and device arguments.
void bindDescales(test::VariantArgs &a, const Fp8Input &q, const Fp8Input &k,
                  const Fp8Input &v) {
  if (q.descale.empty())
    return;
  auto n = [](const Fp8Input &x) { return int64_t(x.descale.size()); };
  a.host.bindQDescale(q.descale.data(), n(q))
      .bindKDescale(k.descale.data(), n(k))
      .bindVDescale(v.descale.data(), n(v));
  a.device.bindQDescale(q.device(), n(q))
      .bindKDescale(k.device(), n(k))
      .bindVDescale(v.device(), n(v));
}

/// The errors of one call against the float64 reference: max |O - O_ref|
/// and the RMS of O - O_ref, the largest relative LSE error, and bad values
/// (NaN; rows with no allowed key: O must be 0 exactly and LSE -inf).
struct Fp8Errors {
  double worst = 0, sum2 = 0, worstLse = 0;
  int64_t count = 0, bad = 0;

  /// One row of \p dv values: got(d), want(d), LSE got / want.
  template <class Got, class Want>
  void row(int64_t dv, Got got, Want want, float gl, double wl) {
    bool empty = std::isinf(wl) && wl < 0;
    for (int64_t d = 0; d < dv; ++d) {
      float x = got(d);
      double e = std::fabs(x - want(d));
      if (std::isnan(x) || (empty && x != 0.0f)) {
        ++bad;
        continue;
      }
      worst = std::max(worst, e);
      sum2 += e * e;
      ++count;
    }
    if (empty ? !(std::isinf(gl) && gl < 0) : !std::isfinite(gl))
      ++bad;
    else if (!empty)
      worstLse =
          std::max(worstLse, std::fabs(gl - wl) / std::max(1.0, std::fabs(wl)));
  }

  /// The tolerance of the file comment.
  void check() const {
    double rms = count ? std::sqrt(sum2 / double(count)) : 0;
    INFO("max |O - O_ref| = " << worst << ", RMS " << rms
                              << ", max rel LSE error " << worstLse << ", "
                              << bad << " bad values");
    CHECK(bad == 0);
    CHECK(worst <= 6e-2);
    CHECK(rms <= 1.2e-2);
    CHECK(worstLse <= 2e-3);
  }
};

/// compares a dense-layout call (Fp8Errors).
void compareFp8(const AttentionSpec &spec, const GpuTensor &o,
                const GpuTensor &lse, ReferenceOutput &want, int64_t batch,
                int64_t sq) {
  Fp8Errors e;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < spec.headsQ; ++h)
      for (int64_t i = 0; i < sq; ++i)
        e.row(
            spec.headDimV, [&](int64_t d) { return o.at(b, h, i, d); },
            [&](int64_t d) { return want.oAt(b, h, i, d); }, lse.at(b, h, i),
            want.lseAt(b, h, i));
  e.check();
}

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

/// Replaces the doc_id buffer of \p a (specs that read one) by \p docs.
void bindDocs(Device &dev, const AttentionSpec &spec, test::VariantArgs &a,
              std::vector<int32_t> docs) {
  for (const BufferDecl &b : spec.variant.buffers())
    if (b.elementType == ScalarType::Int32) {
      a.intData.push_back(
          std::make_unique<std::vector<int32_t>>(std::move(docs)));
      a.bind(dev, b.name, *a.intData.back());
      return;
    }
}

/// Whether \p dev runs the fp8 kernels (sm_90a wgmma); elsewhere WARNs
/// that the case is skipped and returns false.
bool fp8Capable(Device &dev) {
  if (dev.properties().arch() == "sm_90a")
    return true;
  WARN("fp8 kernels need sm_90a; skipped on " << dev.properties().arch());
  return false;
}

} // namespace

TEST_CASE("GPU fp8 forward matches the float64 reference on the "
          "dequantised inputs",
          "[gpu][fp8]") {
  Device &dev = Device::get(0);
  if (!fp8Capable(dev))
    return;
  int idx = 0;
  for (const testing::SparseKernel &fk : testing::fp8Kernels()) {
    if (fk.id.find("bench") != std::string::npos || fk.varlen ||
        fk.blockSparse || !test::matrixIdSelected(fk.id))
      continue; // the timing kernels; varlen and block-sparse: below
    const AttentionSpec &spec = fk.spec;
    auto kernel = test::loadAheadOfTime(fk.id, spec, dev, /*sparse=*/true);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    const int64_t group = spec.headsQ / spec.headsKV;
    for (int r = 0; r < 3; ++r, ++idx) {
      Scaling sc = Scaling((idx + r) % 3);
      int64_t batch = 1 + rng() % 2, sq = 1 + rng() % 300,
              skv = 1 + rng() % 300;
      INFO(fk.id << ", seed " << seed << ", batch " << batch << ", seqlen_q "
                 << sq << ", seqlen_k " << skv << ", scaling " << int(sc)
                 << ": " << printSpec(spec));
      Fp8Input q(dev, spec.dtypeQ, {batch, spec.headsQ, sq, spec.headDimQK}, sc,
                 group, 2.0f, rng),
          k(dev, spec.dtypeK, {batch, spec.headsKV, skv, spec.headDimQK}, sc, 1,
            2.0f, rng),
          v(dev, spec.dtypeV, {batch, spec.headsKV, skv, spec.headDimV}, sc, 1,
            1.0f, rng);
      GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, sq, spec.headDimV}),
          lse(dev, DType::F32, {batch, spec.headsQ, sq, 1}, 3);
      o.poison();
      lse.poison();
      test::VariantArgs args(dev, spec, sq, skv);
      bindDescales(args, q, k, v);
      kernel->run(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef, o.deviceRef,
                  &lse.deviceRef, args.device);
      ReferenceOutput want = referenceAttention(spec, q.t.hostRef, k.t.hostRef,
                                                v.t.hostRef, args.host);
      o.download();
      lse.download();
      compareFp8(spec, o, lse, want, batch, sq);
    }
    test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), fk.id);
  }
}

TEST_CASE("GPU fp8 block-sparse forward with built block masks and user "
          "layouts matches the float64 reference",
          "[gpu][fp8][sparse]") {
  // The fp8Kernels() ids fp8_bs_* (not varlen): a document mask (random
  // documents, 1-token ones and one covering everything) and causal, each
  // block mask built on the GPU (equal to referenceBlockMask) and run; a
  // block mask changes which tiles are visited, never the result, so the
  // oracle is the plain float64 reference on the dequantised inputs. Then
  // user BSR layouts against the block-sparse reference.
  Device &dev = Device::get(0);
  if (!fp8Capable(dev))
    return;
  int idx = 0;
  for (const testing::SparseKernel &fk : testing::fp8Kernels()) {
    if (!fk.blockSparse || fk.varlen || !test::matrixIdSelected(fk.id))
      continue;
    const AttentionSpec &spec = fk.spec;
    auto kernel = test::loadAheadOfTime(fk.id, spec, dev, /*sparse=*/true);
    REQUIRE(kernel->info().config.blockSparse);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    const int64_t group = spec.headsQ / spec.headsKV;
    struct Shape {
      int64_t batch, sq, sk;
    };
    int r = 0;
    for (Shape sh : {Shape{2, 300, 517}, Shape{1, 777, 64}, Shape{3, 1, 129},
                     Shape{1, 1000, 1000}}) {
      Scaling sc = Scaling((idx + r) % 3);
      INFO(fk.id << ", seed " << seed << " (FLASHJIT_TEST_SEED), batch "
                 << sh.batch << ", seqlen_q " << sh.sq << ", seqlen_k " << sh.sk
                 << ", scaling " << int(sc) << ": " << printSpec(spec));
      test::VariantArgs args(dev, spec, sh.sq, sh.sk);
      bindDocs(dev, spec, args,
               testing::randomDocs(rng, std::max(sh.sq, sh.sk), r == 3));
      ++r;
      DeviceBlockMask built =
          kernel->buildBlockMask(sh.batch, sh.sq, sh.sk, args.device);
      BlockMask wantMask = referenceBlockMask(
          spec, kernel->info().config.blockM(), kernel->info().config.blockN,
          sh.batch, sh.sq, sh.sk, args.host);
      CHECK(testing::blockMaskDifference(built.toHost(), wantMask) == "");
      Fp8Input q(dev, spec.dtypeQ,
                 {sh.batch, spec.headsQ, sh.sq, spec.headDimQK}, sc, group,
                 2.0f, rng),
          k(dev, spec.dtypeK, {sh.batch, spec.headsKV, sh.sk, spec.headDimQK},
            sc, 1, 2.0f, rng),
          v(dev, spec.dtypeV, {sh.batch, spec.headsKV, sh.sk, spec.headDimV},
            sc, 1, 1.0f, rng);
      GpuTensor o(dev, spec.dtypeO,
                  {sh.batch, spec.headsQ, sh.sq, spec.headDimV}),
          lse(dev, DType::F32, {sh.batch, spec.headsQ, sh.sq, 1}, 3);
      o.poison();
      lse.poison();
      bindDescales(args, q, k, v);
      kernel->runBlockSparse(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef,
                             o.deviceRef, &lse.deviceRef, built, args.device);
      ReferenceOutput want = referenceAttention(spec, q.t.hostRef, k.t.hostRef,
                                                v.t.hostRef, args.host);
      o.download();
      lse.download();
      compareFp8(spec, o, lse, want, sh.batch, sh.sq);
    }
    // A user BSR layout (empty rows, full rows, per head or shared): the
    // block-sparse float64 reference with the same mask.
    const int64_t bm = kernel->info().config.blockM(),
                  bn = kernel->info().config.blockN;
    for (int64_t heads : {int64_t(1), int64_t(spec.headsQ)}) {
      const int64_t batch = 2, sq = 513, sk = 700;
      Scaling sc = Scaling((idx + heads) % 3);
      INFO(fk.id << ", seed " << seed << ", BSR layout of " << heads
                 << " heads, batch 2, seqlen_q 513, seqlen_k 700, scaling "
                 << int(sc));
      BsrLayout bsr = testing::randomBsr(rng, heads, bm, bn, sq, sk);
      BlockMask mask = blockMaskFromBsr(bsr, sq, sk);
      DeviceBlockMask dmask(mask, dev);
      test::VariantArgs args(dev, spec, sq, sk);
      Fp8Input q(dev, spec.dtypeQ, {batch, spec.headsQ, sq, spec.headDimQK}, sc,
                 group, 2.0f, rng),
          k(dev, spec.dtypeK, {batch, spec.headsKV, sk, spec.headDimQK}, sc, 1,
            2.0f, rng),
          v(dev, spec.dtypeV, {batch, spec.headsKV, sk, spec.headDimV}, sc, 1,
            1.0f, rng);
      GpuTensor o(dev, spec.dtypeO, {batch, spec.headsQ, sq, spec.headDimV}),
          lse(dev, DType::F32, {batch, spec.headsQ, sq, 1}, 3);
      o.poison();
      lse.poison();
      bindDescales(args, q, k, v);
      kernel->runBlockSparse(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef,
                             o.deviceRef, &lse.deviceRef, dmask, args.device);
      ReferenceOutput want = referenceAttention(spec, q.t.hostRef, k.t.hostRef,
                                                v.t.hostRef, args.host, mask);
      o.download();
      lse.download();
      compareFp8(spec, o, lse, want, batch, sq);
    }
    ++idx;
    test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), fk.id);
  }
}

TEST_CASE("GPU fp8 varlen forward matches the float64 varlen reference",
          "[gpu][fp8][sparse]") {
  // The fp8Kernels() ids fp8_vl_* (fp8_vl_bs_*: with block masks built on
  // the GPU): packed batches with empty sequences, 1-token ones, tile
  // multiples and odd lengths, q and k lengths differing; descales per
  // sequence and kv head (quantizeFp8 over cu_seqlens), per tensor, or
  // none; the float64 varlen reference on the dequantised inputs.
  Device &dev = Device::get(0);
  if (!fp8Capable(dev))
    return;
  int idx = 0;
  for (const testing::SparseKernel &fk : testing::fp8Kernels()) {
    if (!fk.varlen || fk.id.find("bench") != std::string::npos ||
        !test::matrixIdSelected(fk.id))
      continue;
    const AttentionSpec &spec = fk.spec;
    auto kernel = test::loadAheadOfTime(fk.id, spec, dev, /*sparse=*/true);
    REQUIRE(kernel->info().config.varlen);
    REQUIRE(kernel->info().config.blockSparse == fk.blockSparse);
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    const int64_t group = spec.headsQ / spec.headsKV;
    for (int r = 0; r < 3; ++r) {
      Scaling sc = Scaling((idx + r) % 3);
      // Lengths with zeros, 1s, tile multiples and odd ones; round 0 has
      // an empty second sequence, round 1 equal q and k lengths, round 2
      // one sequence.
      std::vector<int32_t> cuQ{0}, cuK{0};
      int n = r == 2 ? 1 : 3 + static_cast<int>(rng() % 4);
      for (int b = 0; b < n; ++b) {
        auto len = [&]() -> int32_t {
          if (r == 0 && b == 1)
            return 0;
          switch (rng() % 5) {
          case 0:
            return 0;
          case 1:
            return 1;
          case 2:
            return 128;
          default:
            return static_cast<int32_t>(1 + rng() % 500);
          }
        };
        cuQ.push_back(cuQ.back() + len());
        cuK.push_back(cuK.back() + (r == 1 ? cuQ.back() - cuQ[b] : len()));
      }
      std::ostringstream lens;
      for (size_t b = 0; b + 1 < cuQ.size(); ++b)
        lens << cuQ[b + 1] - cuQ[b] << "/" << cuK[b + 1] - cuK[b] << " ";
      INFO(fk.id << ", seed " << seed << " (FLASHJIT_TEST_SEED), sequences "
                 << "(q/k) " << lens.str() << ", scaling " << int(sc) << ": "
                 << printSpec(spec));
      const int64_t tq = cuQ.back(), tk = cuK.back();
      DeviceCuSeqlens cu(cuQ, cuK, dev);
      Fp8Input q(dev, spec.dtypeQ, {tq, spec.headsQ, spec.headDimQK, 1}, sc,
                 group, 2.0f, rng, cuQ),
          k(dev, spec.dtypeK, {tk, spec.headsKV, spec.headDimQK, 1}, sc, 1,
            2.0f, rng, cuK),
          v(dev, spec.dtypeV, {tk, spec.headsKV, spec.headDimV, 1}, sc, 1, 1.0f,
            rng, cuK);
      GpuTensor o =
          varlenTensor(dev, spec.dtypeO, tq, spec.headsQ, spec.headDimV);
      GpuTensor lse = varlenTensor(dev, DType::F32, tq, spec.headsQ, 0);
      o.poison();
      lse.poison();
      test::VariantArgs args(dev, spec, tq, tk);
      // Per-token documents over the packed tokens (the mask indexes
      // doc_id with per-sequence positions).
      bindDocs(dev, spec, args,
               testing::randomDocs(rng, std::max<int64_t>(tq, tk), r == 1));
      bindDescales(args, q, k, v);
      const BlockMask *hostMask = nullptr;
      BlockMask wantMask;
      DeviceBlockMask built;
      if (fk.blockSparse) {
        built = kernel->buildVarlenBlockMask(cu, args.device);
        wantMask = referenceVarlenBlockMask(
            spec, kernel->info().config.blockM(), kernel->info().config.blockN,
            cuQ, cuK, args.host);
        CHECK(testing::blockMaskDifference(built.toHost(), wantMask) == "");
        hostMask = &wantMask;
      }
      kernel->runVarlen(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef,
                        o.deviceRef, &lse.deviceRef, cu, args.device,
                        fk.blockSparse ? &built : nullptr);
      VarlenReferenceOutput want =
          referenceVarlenAttention(spec, q.t.hostRef, k.t.hostRef, v.t.hostRef,
                                   cuQ, cuK, args.host, hostMask);
      o.download();
      lse.download();
      Fp8Errors e;
      for (int64_t t = 0; t < tq; ++t)
        for (int64_t h = 0; h < spec.headsQ; ++h)
          e.row(
              spec.headDimV, [&](int64_t d) { return o.at(t, h, d); },
              [&](int64_t d) { return want.oAt(t, h, d); }, lse.at(h, t, 0),
              want.lseAt(h, t));
      e.check();
    }
    ++idx;
    test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), fk.id);
  }
}

TEST_CASE("GPU fp8 forward timing against bf16", "[.fp8bench]") {
  // Dense D = 128 (16 heads) and D = 256 (8 heads), batch 32768 / N: the
  // fp8 kernel (unit descales bound per tensor) and the bf16 default kernel
  // of the same shape; then (D = 128) the fp8 varlen kernel on the same
  // tokens packed as 32768 / N sequences of N. Median of 30 runs after 5
  // warm-up (CUDA events). FLASHJIT_MATRIX_ONLY picks rows by the fp8
  // kernel's id (fp8_bench_e4m3_d128, fp8_bench_e4m3_d256,
  // fp8_bench_causal_e4m3_d128, fp8_bench_vl_e4m3_d128).
  Device &dev = Device::get(0);
  std::mt19937_64 rng(1);
  float one = 1.0f;
  DeviceBuffer d(dev, sizeof(float));
  d.copyFromHost(&one, sizeof(float));
  const float *dp = static_cast<const float *>(d.data());
  Arguments fa;
  fa.bindQDescale(dp, 1).bindKDescale(dp, 1).bindVDescale(dp, 1);
  auto median = [&](auto &&call) {
    for (int i = 0; i < 5; ++i)
      call();
    dev.synchronize();
    EventTimer timer(dev);
    std::vector<double> ms;
    for (int i = 0; i < 30; ++i) {
      timer.start();
      call();
      ms.push_back(timer.stopMs());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  for (int dim : {128, 256}) {
    const std::string tail = "_d" + std::to_string(dim);
    if (!test::matrixIdSelected("fp8_bench_e4m3" + tail))
      continue;
    const testing::SparseKernel &f8 = fp8Kernel("fp8_bench_e4m3" + tail);
    const testing::SparseKernel &b16 = fp8Kernel("fp8_bench_bf16" + tail);
    auto a = test::loadAheadOfTime(f8.id, f8.spec, dev, true);
    auto b = test::loadAheadOfTime(b16.id, b16.spec, dev, true);
    const int64_t heads = f8.spec.headsQ;
    for (int64_t n : {4096, 16384}) {
      int64_t batch = 32768 / n;
      auto run = [&](GpuAttentionKernel &kern, const AttentionSpec &spec,
                     const Arguments &ar) {
        GpuTensor q(dev, spec.dtypeQ, {batch, heads, n, dim}),
            k(dev, spec.dtypeK, {batch, heads, n, dim}),
            v(dev, spec.dtypeV, {batch, heads, n, dim}),
            o(dev, spec.dtypeO, {batch, heads, n, dim}),
            l(dev, DType::F32, {batch, heads, n, 1}, 3);
        q.randomize(rng);
        k.randomize(rng);
        v.randomize(rng);
        return median([&] {
          kern.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                   &l.deviceRef, ar);
        });
      };
      double t8 = run(*a, f8.spec, fa), t16 = run(*b, b16.spec, Arguments{});
      double flops = 4.0 * batch * heads * double(n) * n * dim;
      WARN("dense D=" << dim << " N=" << n << ": bf16 " << t16 << " ms ("
                      << flops / t16 / 1e9 << " TF/s), fp8 e4m3 " << t8
                      << " ms (" << flops / t8 / 1e9 << " TF/s), speedup "
                      << t16 / t8);
    }
  }
  // Masked-key isolation (WgmmaFp8.cpp): causal D = 128, the kernel
  // against the same kernel built without isolation, on clean inputs.
  if (test::matrixIdSelected("fp8_bench_causal_e4m3_d128")) {
    const testing::SparseKernel &iso = fp8Kernel("fp8_bench_causal_e4m3_d128");
    const testing::SparseKernel &base =
        fp8Kernel("fp8_bench_causal_e4m3_d128_noiso");
    auto ki = test::loadAheadOfTime(iso.id, iso.spec, dev, true);
    auto kb = test::loadAheadOfTime(base.id, base.spec, dev, true);
    const int64_t heads = iso.spec.headsQ, dim = 128;
    for (int64_t n : {4096, 16384}) {
      int64_t batch = 32768 / n;
      GpuTensor q(dev, iso.spec.dtypeQ, {batch, heads, n, dim}),
          k(dev, iso.spec.dtypeK, {batch, heads, n, dim}),
          v(dev, iso.spec.dtypeV, {batch, heads, n, dim}),
          o(dev, iso.spec.dtypeO, {batch, heads, n, dim}),
          l(dev, DType::F32, {batch, heads, n, 1}, 3);
      q.randomize(rng);
      k.randomize(rng);
      v.randomize(rng);
      auto time = [&](GpuAttentionKernel &kern) {
        return median([&] {
          kern.run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                   &l.deviceRef, fa);
        });
      };
      // Alternated twice: the order does not favour either.
      double tb = time(*kb), ti = time(*ki);
      tb = std::min(tb, time(*kb));
      ti = std::min(ti, time(*ki));
      double flops = 2.0 * batch * heads * double(n) * n * dim; // causal
      WARN("causal D=128 N=" << n << ": fp8 e4m3 without isolation " << tb
                             << " ms (" << flops / tb / 1e9 << " TF/s), with "
                             << ti << " ms (" << flops / ti / 1e9
                             << " TF/s), cost " << (ti / tb - 1) * 100 << "%");
    }
  }
  if (!test::matrixIdSelected("fp8_bench_vl_e4m3_d128"))
    return;
  const testing::SparseKernel &vl = fp8Kernel("fp8_bench_vl_e4m3_d128");
  auto kv = test::loadAheadOfTime(vl.id, vl.spec, dev, true);
  const int64_t heads = vl.spec.headsQ, dim = 128;
  for (int64_t n : {4096, 16384}) {
    int64_t seqs = 32768 / n, total = 32768;
    std::vector<int32_t> cuv{0};
    for (int64_t s = 0; s < seqs; ++s)
      cuv.push_back(static_cast<int32_t>(cuv.back() + n));
    DeviceCuSeqlens cu(cuv, cuv, dev);
    GpuTensor q = varlenTensor(dev, vl.spec.dtypeQ, total, heads, dim),
              k = varlenTensor(dev, vl.spec.dtypeK, total, heads, dim),
              v = varlenTensor(dev, vl.spec.dtypeV, total, heads, dim),
              o = varlenTensor(dev, vl.spec.dtypeO, total, heads, dim),
              l = varlenTensor(dev, DType::F32, total, heads, 0);
    q.randomize(rng);
    k.randomize(rng);
    v.randomize(rng);
    double t = median([&] {
      kv->runVarlen(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
                    &l.deviceRef, cu, fa);
    });
    double flops = 4.0 * seqs * heads * double(n) * n * dim;
    WARN("varlen D=128, " << seqs << " sequences of N=" << n << ": fp8 e4m3 "
                          << t << " ms (" << flops / t / 1e9 << " TF/s)");
  }
}

namespace {

/// The poison byte written at V code (key j, column d) of type \p t: NaN
/// (both signs) for e4m3, which has no Inf; +Inf, -Inf or NaN for e5m2.
uint8_t poisonByte(DType t, int64_t j, int64_t d) {
  if (t == DType::E5M2)
    return (j + d) % 3 == 0 ? 0x7c : (j + d) % 3 == 1 ? 0xfc : 0x7f;
  return (j + d) % 2 ? 0x7f : 0xff;
}

/// One poisoned row against the clean run and the float64 reference on the
/// poisoned inputs (which skips keys a row does not attend): an O element
/// is NaN or Inf exactly where the reference's is, a finite one equals the
/// clean run's (the same kernel on the unpoisoned V), and LSE equals the
/// clean run's bit for bit (V never enters it).
struct PoisonCheck {
  int64_t mismatched = 0, differing = 0, lseDiffering = 0;
  int64_t cleanRows = 0, poisonedRows = 0;

  template <class Got, class Clean, class Want>
  void row(int64_t dv, Got got, Clean clean, Want want, float gl, float cl) {
    bool poisoned = false;
    for (int64_t d = 0; d < dv; ++d) {
      bool wantFinite = std::isfinite(want(d));
      poisoned |= !wantFinite;
      if (std::isfinite(got(d)) != wantFinite)
        ++mismatched;
      else if (wantFinite && got(d) != clean(d))
        ++differing;
    }
    if (std::memcmp(&gl, &cl, sizeof gl) != 0)
      ++lseDiffering;
    ++(poisoned ? poisonedRows : cleanRows);
  }

  void check() const {
    INFO(cleanRows << " clean rows, " << poisonedRows << " poisoned rows");
    CHECK(mismatched == 0);
    CHECK(differing == 0);
    CHECK(lseDiffering == 0);
    CHECK(cleanRows > 0);
  }
};

/// Writes poisonByte into V (host codes of \p v, [B, H, S, D] or varlen
/// [total, H, D, 1]) at the keys \p poisonedKey says (a key index of the
/// batch or packed tensor), every head and column, then uploads it.
template <class Pred> void poisonV(GpuTensor &v, bool varlen, Pred poisoned) {
  const TensorRef &r = v.hostRef;
  const int64_t nb = varlen ? 1 : r.shape[0], nh = r.shape[1];
  const int64_t nk = varlen ? r.shape[0] : r.shape[2];
  const int64_t dv = varlen ? r.shape[2] : r.shape[3];
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t j = 0; j < nk; ++j)
        if (poisoned(j))
          for (int64_t d = 0; d < dv; ++d)
            v.host[size_t(varlen ? r.offset(j, h, d, 0)
                                 : r.offset(b, h, j, d))] =
                poisonByte(r.dtype, j, d);
  v.device.copyFromHost(v.host.data(), v.host.size());
}

/// The fp8 kernels with a mask (causal, window, document, softcap (causal);
/// dense, varlen, block-sparse): the ones that isolate masked keys.
bool maskedFp8(const testing::SparseKernel &fk) {
  if (fk.id.find("bench") != std::string::npos)
    return false;
  for (const char *m : {"causal", "window", "doc", "softcap"})
    if (fk.id.find(m) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("GPU fp8 forward: NaN and Inf at keys a row does not attend never "
          "reach it",
          "[gpu][fp8][masked]") {
  // Issue 21 section 3 on the fp8 kernels (WgmmaFp8.cpp: the vote in the V
  // transpose, the guarded P V). Layouts: N = 201 with key 150 poisoned
  // (causal rows 128..149 share its key tile without attending it), N =
  // 600 with keys 590.. poisoned (a late tile, after many stage uses),
  // seqlen_q 77 < seqlen_k 201 with keys 100.. poisoned; varlen: the same
  // per sequence in one packed batch (lengths 201, 0, 600, 77). Dense,
  // block-sparse (block masks built on the GPU) and varlen kernels. Q in
  // [-0.5, 0.5]: no attended weight quantises to 0 in e4m3 (P times 256
  // below 2^-10, a score 12.5 below the row's running maximum), where the
  // kernel, like a weight of exactly 0, skips the key (README, FP8).
  Device &dev = Device::get(0);
  if (!fp8Capable(dev))
    return;
  int kernels = 0;
  for (const testing::SparseKernel &fk : testing::fp8Kernels()) {
    if (!maskedFp8(fk) || !test::matrixIdSelected(fk.id))
      continue;
    const AttentionSpec &spec = fk.spec;
    auto kernel = test::loadAheadOfTime(fk.id, spec, dev, /*sparse=*/true);
    ++kernels;
    uint64_t seed = freshSeed();
    std::mt19937_64 rng(seed);
    const int64_t group = spec.headsQ / spec.headsKV;
    PoisonCheck pc;
    if (!fk.varlen) {
      struct Layout {
        int64_t sq, sk, from, to; // keys from..to - 1 poisoned
      };
      int r = 0;
      for (Layout l : {Layout{201, 201, 150, 151}, Layout{600, 600, 590, 600},
                       Layout{77, 201, 100, 201}}) {
        Scaling sc = Scaling(r++ % 3);
        const int64_t batch = 2;
        INFO(fk.id << ", seed " << seed << " (FLASHJIT_TEST_SEED), seqlen_q "
                   << l.sq << ", seqlen_k " << l.sk << ", V of keys " << l.from
                   << ".." << l.to - 1 << " poisoned, scaling " << int(sc)
                   << ": " << printSpec(spec));
        test::VariantArgs args(dev, spec, l.sq, l.sk);
        bindDocs(dev, spec, args,
                 testing::randomDocs(rng, std::max(l.sq, l.sk), false));
        Fp8Input q(dev, spec.dtypeQ, {batch, spec.headsQ, l.sq, spec.headDimQK},
                   sc, group, 0.5f, rng),
            k(dev, spec.dtypeK, {batch, spec.headsKV, l.sk, spec.headDimQK}, sc,
              1, 2.0f, rng),
            v(dev, spec.dtypeV, {batch, spec.headsKV, l.sk, spec.headDimV}, sc,
              1, 1.0f, rng);
        bindDescales(args, q, k, v);
        DeviceBlockMask built;
        if (fk.blockSparse)
          built = kernel->buildBlockMask(batch, l.sq, l.sk, args.device);
        auto call = [&](GpuTensor &o, GpuTensor &lse) {
          o.poison();
          lse.poison();
          if (fk.blockSparse)
            kernel->runBlockSparse(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef,
                                   o.deviceRef, &lse.deviceRef, built,
                                   args.device);
          else
            kernel->run(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef,
                        o.deviceRef, &lse.deviceRef, args.device);
          o.download();
          lse.download();
        };
        GpuTensor oc(dev, spec.dtypeO,
                     {batch, spec.headsQ, l.sq, spec.headDimV}),
            lc(dev, DType::F32, {batch, spec.headsQ, l.sq, 1}, 3),
            o(dev, spec.dtypeO, {batch, spec.headsQ, l.sq, spec.headDimV}),
            lse(dev, DType::F32, {batch, spec.headsQ, l.sq, 1}, 3);
        call(oc, lc);
        poisonV(v.t, false, [&](int64_t j) { return j >= l.from && j < l.to; });
        call(o, lse);
        ReferenceOutput want = referenceAttention(
            spec, q.t.hostRef, k.t.hostRef, v.t.hostRef, args.host);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < spec.headsQ; ++h)
            for (int64_t i = 0; i < l.sq; ++i)
              pc.row(
                  spec.headDimV, [&](int64_t d) { return o.at(b, h, i, d); },
                  [&](int64_t d) { return oc.at(b, h, i, d); },
                  [&](int64_t d) { return want.oAt(b, h, i, d); },
                  lse.at(b, h, i), lc.at(b, h, i));
      }
    } else {
      const std::vector<int32_t> cuQ{0, 201, 201, 801, 878},
          cuK{0, 201, 201, 801, 878};
      // Sequence 0: key 150; sequence 2: keys 590..; sequence 3: none.
      auto poisoned = [](int64_t j) {
        return j == 150 || (j >= 201 + 590 && j < 801);
      };
      INFO(fk.id << ", seed " << seed << " (FLASHJIT_TEST_SEED), sequences "
                 << "201, 0, 600, 77: V of keys 150 and 590.. of the 600 "
                 << "poisoned: " << printSpec(spec));
      const int64_t tq = cuQ.back(), tk = cuK.back();
      DeviceCuSeqlens cu(cuQ, cuK, dev);
      Fp8Input q(dev, spec.dtypeQ, {tq, spec.headsQ, spec.headDimQK, 1},
                 Scaling::PerBlock, group, 0.5f, rng, cuQ),
          k(dev, spec.dtypeK, {tk, spec.headsKV, spec.headDimQK, 1},
            Scaling::PerBlock, 1, 2.0f, rng, cuK),
          v(dev, spec.dtypeV, {tk, spec.headsKV, spec.headDimV, 1},
            Scaling::PerBlock, 1, 1.0f, rng, cuK);
      test::VariantArgs args(dev, spec, tq, tk);
      bindDocs(dev, spec, args, testing::randomDocs(rng, tq, false));
      bindDescales(args, q, k, v);
      BlockMask wantMask;
      DeviceBlockMask built;
      if (fk.blockSparse) {
        built = kernel->buildVarlenBlockMask(cu, args.device);
        wantMask = referenceVarlenBlockMask(
            spec, kernel->info().config.blockM(), kernel->info().config.blockN,
            cuQ, cuK, args.host);
      }
      auto call = [&](GpuTensor &o, GpuTensor &lse) {
        o.poison();
        lse.poison();
        kernel->runVarlen(q.t.deviceRef, k.t.deviceRef, v.t.deviceRef,
                          o.deviceRef, &lse.deviceRef, cu, args.device,
                          fk.blockSparse ? &built : nullptr);
        o.download();
        lse.download();
      };
      GpuTensor oc = varlenTensor(dev, spec.dtypeO, tq, spec.headsQ,
                                  spec.headDimV),
                lc = varlenTensor(dev, DType::F32, tq, spec.headsQ, 0),
                o = varlenTensor(dev, spec.dtypeO, tq, spec.headsQ,
                                 spec.headDimV),
                lse = varlenTensor(dev, DType::F32, tq, spec.headsQ, 0);
      call(oc, lc);
      poisonV(v.t, true, poisoned);
      call(o, lse);
      VarlenReferenceOutput want = referenceVarlenAttention(
          spec, q.t.hostRef, k.t.hostRef, v.t.hostRef, cuQ, cuK, args.host,
          fk.blockSparse ? &wantMask : nullptr);
      for (int64_t t = 0; t < tq; ++t)
        for (int64_t h = 0; h < spec.headsQ; ++h)
          pc.row(
              spec.headDimV, [&](int64_t d) { return o.at(t, h, d); },
              [&](int64_t d) { return oc.at(t, h, d); },
              [&](int64_t d) { return want.oAt(t, h, d); }, lse.at(h, t, 0),
              lc.at(h, t, 0));
    }
    INFO(fk.id << ", seed " << seed);
    pc.check();
    // Every layout poisons keys some rows attend (the last rows of the
    // N = 201 and 600 causal layouts, the document holding key 150): NaN
    // rows are asserted, not only clean ones.
    CHECK(pc.poisonedRows > 0);
  }
  CHECK(kernels > 0);
}
