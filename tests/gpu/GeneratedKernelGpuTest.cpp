//===- GeneratedKernelGpuTest.cpp - Generated kernels on the GPU ----------===//
//
// The kernels of the variant matrix (tests/support/KernelMatrix.h),
// generated ahead of time by gen_matrix_kernels (the GPU machine has no
// MLIR), loaded by the runtime alone and run on the GPU: against the float64
// reference on small odd shapes (0, 1, unequal, non-multiples of the tile)
// and strided layouts, and against the NVRTC reference, an independent
// second lowering of the same DSL, at N = 4096. Outputs are poisoned with
// NaN before each run.
//
//===----------------------------------------------------------------------===//
#include "GpuTestSupport.h"
#include "KernelMatrix.h"

#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/NvrtcReference.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;
using flashjit::test::GpuTensor;

namespace {

/// Loads the ahead-of-time kernel \p id.
std::unique_ptr<GpuAttentionKernel> load(const testing::MatrixKernel &k,
                                         Device &dev) {
  return test::loadAheadOfTime(k.id, k.spec, dev);
}

/// FLASHJIT_MATRIX_ONLY restricts the matrix (e.g. for the sanitizers,
/// which are slow; test::matrixIdSelected).
bool selected(const testing::MatrixKernel &k) {
  return test::matrixIdSelected(k.id);
}

/// FLASHJIT_MATRIX_PART=<part>/<parts> (scripts/gpu-check.sh runs the
/// float64 matrix case as several processes): whether the \p index-th
/// matrix kernel is in that part (index % parts == part). Unset: every one.
bool inPart(size_t index) {
  const char *spec = std::getenv("FLASHJIT_MATRIX_PART");
  if (!spec)
    return true;
  unsigned part = 0, parts = 0;
  char tail = 0;
  if (std::sscanf(spec, "%u/%u%c", &part, &parts, &tail) != 2 || parts == 0 ||
      part >= parts)
    FAIL("FLASHJIT_MATRIX_PART = '" << spec
                                    << "' is not <part>/<parts> with "
                                       "part < parts");
  return index % parts == part;
}

/// Loads \p k, checks that it uses no local memory, and runs it against
/// the float64 reference (test::checkShape) on every shape of \p small and
/// on large[\p pick % size] (a large float64 reference takes seconds on one
/// core, so kernels take the large shapes in turn). \p i counts the runs
/// over the case: batch 1 + i % 2, the bottom-right alignment flag i % 2,
/// seed \p seed + i.
void checkSmallAndOneLarge(Device &dev, const testing::MatrixKernel &k,
                           std::span<const std::pair<int64_t, int64_t>> small,
                           std::span<const std::pair<int64_t, int64_t>> large,
                           size_t pick, uint64_t seed, int &i) {
  std::vector<std::pair<int64_t, int64_t>> shapes(small.begin(), small.end());
  shapes.push_back(large[pick % large.size()]);
  auto kernel = load(k, dev);
  test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), k.id);
  for (auto [sq, sk] : shapes) {
    test::checkShape(dev, test::runWith(*kernel), k.spec, 1 + i % 2, sq, sk,
                     i % 2, seed + i);
    ++i;
  }
}

} // namespace

TEST_CASE("generated kernels match the float64 reference on the matrix",
          "[gpu][generated]") {
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {17, 65}, {65, 17}, {130, 77}, {0, 9}, {9, 0}, {257, 300}};
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0;
  size_t index = 0;
  for (const testing::MatrixKernel &k : testing::kernelMatrix()) {
    if (!inPart(index++) || !selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = load(k, dev);
    test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), k.id);
    // Two shapes per kernel, rotating through the list and the layouts.
    for (int r = 0; r < 2; ++r, ++i) {
      auto [sq, sk] = shapes[i % std::size(shapes)];
      test::checkShape(dev, test::runWith(*kernel), k.spec, 1 + i % 2, sq, sk,
                       i % 2, seed + i);
    }
    // VariantArgs sizes every buffer for its reads, so the reads are proven
    // in range and no call waited for the status check.
    CHECK(kernel->bufferCheckSyncs() == 0);
  }
}

TEST_CASE("the masked head-dim-128 defaults match the float64 reference "
          "over many key tiles",
          "[gpu][generated][overlap]") {
  // overlapMaskedKernels(): causal + softcap 30 and causal (on sm_90a the
  // intra-warpgroup overlap by default: S of a tile issued beside the
  // previous tile's P V, a ring of 3 K/V stages reused many times; causal
  // since session 22), a 1024-key window and the document-causal mask (the
  // serial step by default; layouts 0 and 1: layout 2's odd strides are
  // refused). Shapes of 9-13 key tiles: the window's rows past key 1151 skip
  // whole tiles (empty tiles flush the pending product), the document
  // boundaries (VariantArgs) and seqlen_q != seqlen_k give partial and empty
  // tiles.
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> shapes[] = {{1300, 1300}, {1100, 1537}};
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0;
  // overlapVoteKernels(): the overlap by name for masks alone too, on the
  // same shapes (the default result check, and `_pubvote` the published
  // masked-value vote).
  std::vector<testing::MatrixKernel> kernels = testing::overlapMaskedKernels();
  const size_t defaults = kernels.size();
  for (const testing::MatrixKernel &k : testing::overlapVoteKernels()) {
    kernels.push_back(k);
    kernels.push_back({k.id + "_pubvote", k.variant, k.spec});
  }
  for (size_t n = 0; n < kernels.size(); ++n) {
    const testing::MatrixKernel &k = kernels[n];
    if (!selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    // What the default chose (the .info line does not say): the overlap
    // keeps two wgmma groups in flight (wait_group 1).
    test::MatrixKernelFiles files = test::readMatrixKernel(k.id);
    if (files.info.config.arch == "sm_90a")
      CHECK((files.ptx.find("wgmma.wait_group.sync.aligned 1;") !=
             std::string::npos) ==
            (n >= defaults || k.variant == "softcap30_causal" ||
             k.variant == "causal_tl"));
    auto kernel = load(k, dev);
    test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), k.id);
    for (auto [sq, sk] : shapes) {
      test::checkShape(dev, test::runWith(*kernel), k.spec, 1, sq, sk, i % 2,
                       seed + i);
      ++i;
    }
  }
  CHECK(i > 0);
}

TEST_CASE("ping-pong kernels match the float64 reference over odd shapes "
          "and many key tiles",
          "[gpu][generated][pingpong]") {
  // pingPongKernels(): the overlap with the consumer warpgroups taking
  // turns (named barriers 2 and 3) to issue their products. A wrong count
  // of turns hangs the kernel or leaves a barrier part-arrived at when the
  // CTA exits; a wrong order of products gives wrong values. Shapes: single
  // rows and keys, no queries, seqlens that are not multiples of 128, up to
  // 18 key tiles (the ring of 3 stages reused, the window's empty tiles,
  // each flushing the pending product outside the turns), seqlen_q >
  // seqlen_k (bottom-right causal: whole CTAs and whole warpgroups without
  // a key, beside a warpgroup with keys) and seqlen_q < seqlen_k. Every
  // kernel runs the four small shapes and one of the four large ones in
  // turn (the float64 reference of a large one takes seconds on one core:
  // all of them for all twelve kernels took over 100 s on an H100 machine).
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> small[] = {
      {1, 1}, {17, 65}, {0, 9}, {257, 300}};
  const std::pair<int64_t, int64_t> large[] = {
      {1300, 1300}, {1100, 1537}, {1537, 1100}, {1100, 2177}};
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0;
  size_t n = 0;
  for (const testing::MatrixKernel &k : testing::pingPongKernels()) {
    if (!selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    test::MatrixKernelFiles files = test::readMatrixKernel(k.id);
    if (files.info.config.arch == "sm_90a") // the turns are in the kernel
      CHECK(files.ptx.find("bar.arrive") != std::string::npos);
    checkSmallAndOneLarge(dev, k, small, large, n++, seed, i);
  }
  CHECK(i > 0);
}

TEST_CASE("ALiBi forwards (slopes read per row, the distance in f32) match "
          "the float64 reference over many key tiles",
          "[gpu][generated][alibi_factor]") {
  // alibiKernels(): the default ALiBi forwards, which since session 27 read
  // slopes[head] once per row before the key loop and take |q_idx - kv_idx|
  // as float(q_idx - kvLane) per row and tile minus the column's offset
  // (ScoreFactorTesting.h); at head dim 128 with the overlap. Shapes: one
  // row and key, no queries, no keys (no row may read a slope), seqlens
  // that are not multiples of the tiles, seqlen_q != seqlen_k both ways,
  // and one large shape per kernel (tiles entirely above and below the
  // diagonal; 11-25 key tiles, the overlap's ring of 3 stages reused; few
  // rows where the keys are many, so the float64 reference stays within
  // seconds).
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> small[] = {
      {1, 1}, {17, 65}, {0, 9}, {9, 0}, {257, 300}};
  const std::pair<int64_t, int64_t> large[] = {
      {1300, 1300}, {300, 1537}, {1537, 300}};
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0;
  size_t n = 0;
  for (const testing::MatrixKernel &k : testing::alibiKernels()) {
    if (!selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    test::MatrixKernelFiles files = test::readMatrixKernel(k.id);
    if (files.info.config.arch == "sm_90a") {
      // No per-element conversion of the distance.
      CHECK(files.ptx.find("abs.s32") == std::string::npos);
      // The overlap keeps two wgmma groups in flight at head dim 128.
      CHECK((files.ptx.find("wgmma.wait_group.sync.aligned 1;") !=
             std::string::npos) == (k.spec.headDimQK == 128));
    }
    checkSmallAndOneLarge(dev, k, small, large, n++, seed, i);
  }
  CHECK(i > 0);
}

TEST_CASE("buffer reads proven in range skip the status check, a buffer too "
          "short is still reported",
          "[gpu][generated][buffer_bounds]") {
  // README, "Buffer reads": a call whose reads are proven in range before
  // the launch does not wait for the status flags; one whose buffer is one
  // element short waits and throws; a proven call after it neither reports
  // the flag left set nor computes differently.
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  const int64_t sq = 130, sk = 77;
  int tested = 0;
  for (const testing::MatrixKernel &k : testing::kernelMatrix()) {
    if ((k.variant != "alibi" && k.variant != "doc_id" &&
         k.variant != "rel_bias") ||
        k.spec.headDimQK != 64 || k.spec.dtypeQ != DType::BF16 || !selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = load(k, dev);
    test::checkShape(dev, test::runWith(*kernel), k.spec, 2, sq, sk, 0, seed);
    CHECK(kernel->bufferCheckSyncs() == 0);
    // Reads: slopes[head < heads_q], doc_id[q_idx < 130], table[0..32].
    const std::string name = k.spec.variant.buffers().at(0).name;
    const int64_t need = k.variant == "alibi"    ? k.spec.headsQ
                         : k.variant == "doc_id" ? sq
                                                 : 33;
    const AttentionSpec &a = k.spec;
    GpuTensor q(dev, a.dtypeQ, {2, a.headsQ, sq, a.headDimQK}),
        kt(dev, a.dtypeK, {2, a.headsKV, sk, a.headDimQK}),
        v(dev, a.dtypeV, {2, a.headsKV, sk, a.headDimV}),
        o(dev, a.dtypeO, {2, a.headsQ, sq, a.headDimV}),
        lse(dev, DType::F32, {2, a.headsQ, sq, 1}, 3);
    test::VariantArgs va(dev, a, sq, sk);
    Arguments shortArgs = va.device;
    shortArgs.buffers.at(name).size = need - 1;
    CHECK_THROWS_WITH(
        kernel->run(q.deviceRef, kt.deviceRef, v.deviceRef, o.deviceRef,
                    a.returnLse ? &lse.deviceRef : nullptr, shortArgs),
        Catch::Contains("buffer '" + name + "' was read outside [0, " +
                        std::to_string(need - 1) + ")"));
    CHECK(kernel->bufferCheckSyncs() == 1);
    test::checkShape(dev, test::runWith(*kernel), k.spec, 1, sq, sk, 1,
                     seed + 1);
    CHECK(kernel->bufferCheckSyncs() == 1);
    ++tested;
  }
  CHECK(tested == 3);
}

TEST_CASE("kernels compiled with non-default options match the float64 "
          "reference",
          "[gpu][generated]") {
  // mma.sync where sm_90a defaults to wgmma, unequal head dims, and wgmma
  // tiles other than the defaults (KernelMatrix.h, optionKernels()).
  Device &dev = Device::get(0);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 1}, {17, 65}, {65, 17}, {130, 77}, {0, 9}, {257, 300}};
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0;
  for (const testing::OptionKernel &k : testing::optionKernels()) {
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = test::loadAheadOfTime(k.id, k.spec, dev);
    test::checkNoLocalMemory(*kernel, test::matrixKernelDir(), k.id);
    for (auto [sq, sk] : shapes) {
      test::checkShape(dev, test::runWith(*kernel), k.spec, 1 + i % 2, sq, sk,
                       i % 2, seed + i);
      ++i;
    }
    // Warp-specialised kernels: enough key tiles (6 of 128 keys, 11 of 64)
    // for each stage of the K/V ring to be reused, its mbarriers' phases
    // to flip, at least once.
    if (k.mma.rfind("wgmma.tma.ws", 0) == 0) {
      test::checkShape(dev, test::runWith(*kernel), k.spec, 2, 200, 700, i % 2,
                       seed + i);
      ++i;
    }
  }
}

TEST_CASE("generated kernels loaded from a cubin match the float64 reference",
          "[gpu][generated]") {
  // The cache and bundles hand GpuAttentionKernel a cubin (nvJitLink, made
  // on any machine) for the device's architecture. (A truncated cubin cannot
  // be tested: the driver reads the image without its size; the cache's
  // checksums keep damaged ones away.)
  Device &dev = Device::get(0);
  uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  int i = 0;
  for (const testing::MatrixKernel &k : testing::kernelMatrix()) {
    if (k.spec.dtypeQ != DType::BF16 || !selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    test::MatrixKernelFiles files = test::readMatrixKernel(k.id);
    if (files.info.config.arch != dev.properties().arch())
      continue;
    CubinResult cubin = assembleCubin(files.ptx, files.info.config.arch);
    std::string bytes(cubin.cubin.begin(), cubin.cubin.end());
    GpuAttentionKernel fromCubin(k.spec, files.info, files.ptx, dev, bytes);
    CHECK(fromCubin.loadedFromCubin());
    test::checkNoLocalMemory(fromCubin, files.ptx);
    test::checkShape(dev, test::runWith(fromCubin), k.spec, 2, 130, 77, i % 2,
                     seed + i);
    ++i;
  }
  CHECK(i > 0);
}

TEST_CASE("generated kernels match the NVRTC reference at N = 4096",
          "[gpu][generated]") {
  Device &dev = Device::get(0);
  std::mt19937_64 rng(std::random_device{}());
  for (const testing::MatrixKernel &k : testing::kernelMatrix()) {
    if (k.spec.headDimQK != 128 || k.spec.dtypeQ != DType::BF16 || !selected(k))
      continue;
    INFO(k.id << ": " << printSpec(k.spec));
    auto kernel = load(k, dev);
    NvrtcReference ref(k.spec, dev);
    const int64_t n = 4096, hq = k.spec.headsQ, hkv = k.spec.headsKV;
    GpuTensor q(dev, DType::BF16, {1, hq, n, 128}),
        kt(dev, DType::BF16, {1, hkv, n, 128}),
        v(dev, DType::BF16, {1, hkv, n, 128}),
        o(dev, DType::BF16, {1, hq, n, 128}),
        o2(dev, DType::BF16, {1, hq, n, 128}),
        lse(dev, DType::F32, {1, hq, n, 1}, 3),
        lse2(dev, DType::F32, {1, hq, n, 1}, 3);
    q.randomize(rng, 2.0f);
    kt.randomize(rng, 2.0f);
    v.randomize(rng);
    o.poison();
    o2.poison();
    test::VariantArgs args(dev, k.spec, n, n);
    kernel->run(q.deviceRef, kt.deviceRef, v.deviceRef, o.deviceRef,
                &lse.deviceRef, args.device);
    ref.run(q.deviceRef, kt.deviceRef, v.deviceRef, o2.deviceRef,
            &lse2.deviceRef, args.device);
    o.download();
    o2.download();
    lse.download();
    lse2.download();
    double worstO = 0, worstL = 0;
    int64_t nan = 0;
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t r = 0; r < n; ++r) {
        float a = lse.at(0, h, r), b = lse2.at(0, h, r);
        if (std::isinf(b))
          nan += !(std::isinf(a) && a < 0);
        else
          worstL = std::max(worstL, double(std::fabs(a - b)) /
                                        std::max(1.0, double(std::fabs(b))));
        for (int64_t d = 0; d < 128; ++d) {
          float x = o.at(0, h, r, d), y = o2.at(0, h, r, d);
          nan += std::isnan(x);
          worstO = std::max(worstO, double(std::fabs(x - y)));
        }
      }
    INFO("max |O - O_nvrtc| = " << worstO
                                << ", max rel LSE difference = " << worstL);
    CHECK(nan == 0);
    CHECK(worstO <= 2 * test::tolerance(DType::BF16));
    CHECK(worstL <= 1e-4);
  }
}
