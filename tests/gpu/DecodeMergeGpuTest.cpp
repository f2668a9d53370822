//===- DecodeMergeGpuTest.cpp - The split-KV merge kernel on the GPU ------===//
//
// `<name>_decode_merge` (the parallel merge of session 19 and, for the
// `_serialmerge` ids, the serial walk before it) launched directly over
// partial states written here, against a float64 merge of the same
// partials: 1, 3, 33, 128 and 244 splits, rows with every split empty
// (LSE -inf, O NaN: O = 0 and LSE = -inf, or the sink), rows with one live
// split (the last), every third split empty, LSEs spread over [-30, 30];
// empty splits' partial O rows are NaN, which must never reach O. Kernels:
// bf16 D = 128 (MQA 32/1, with and without a sink), fp16 D = 64 (with and
// without a sink).
//
//===----------------------------------------------------------------------===//
#include "DecodeKernels.h"
#include "GpuTestSupport.h"

#include "flashjit/runtime/DecodeKernel.h"
#include "flashjit/runtime/DecodeMergeAbi.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/Module.h"

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <utility>

using namespace flashjit;
using namespace flashjit::runtime;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string mergeKernelDir() {
  if (const char *env = std::getenv("FLASHJIT_DECODE_KERNELS"))
    return env;
  return test::matrixKernelDir() + "/decode";
}

/// Partial states of \p splits splits for \p rows rows of \p dv columns, in
/// the split kernel's layout (decodeWorkspaceLayout: LSE [split][row], O
/// [split][row][dv], f32, natural-log LSEs).
struct Partials {
  int splits;
  int64_t rows, dv;
  std::vector<float> lse, o;
  Partials(int splits, int64_t rows, int64_t dv, std::mt19937_64 &rng)
      : splits(splits), rows(rows), dv(dv), lse(size_t(splits * rows)),
        o(size_t(splits * rows * dv)) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int s = 0; s < splits; ++s) {
        // Row kinds: 0 every split empty, 1 only the last split live, 2
        // every third split empty, 3 LSEs in [-30, 30], 4 in [-3, 3].
        const int kind = int(r % 5);
        const bool empty = kind == 0 || (kind == 1 && s != splits - 1) ||
                           (kind == 2 && s % 3 == 1);
        lse[size_t(s * rows + r)] =
            empty ? -INFINITY : u(rng) * (kind == 3 ? 30.0f : 3.0f);
        for (int64_t d = 0; d < dv; ++d)
          o[size_t((s * rows + r) * dv + d)] = empty ? NAN : 2.0f * u(rng);
      }
  }
  /// The float64 merge of row \p r with the sink \p sink (-inf: none):
  /// LSE and O (O = 0 where no term is live).
  std::pair<double, std::vector<double>> merge(int64_t r, double sink) const {
    double m = sink;
    for (int s = 0; s < splits; ++s)
      m = std::max(m, double(lse[size_t(s * rows + r)]));
    std::vector<double> out(size_t(dv), 0.0);
    if (m == -kInf)
      return {-kInf, out};
    double sum = sink == -kInf ? 0.0 : std::exp(sink - m);
    for (int s = 0; s < splits; ++s) {
      const double l = lse[size_t(s * rows + r)];
      if (l == -kInf)
        continue;
      const double w = std::exp(l - m);
      sum += w;
      for (int64_t d = 0; d < dv; ++d)
        out[size_t(d)] += w * o[size_t((s * rows + r) * dv + d)];
    }
    for (double &x : out)
      x /= sum;
    return {m + std::log(sum), out};
  }
};

/// The merge kernel of decode kernel \p id (gen_decode_kernels' files).
struct MergeKernel {
  testing::DecodeKernel k;
  Module module;
  Function fn;
  /// Entry `<name><suffix>`: the merge kernel, or its serial twin with
  /// abi::gpu::kDecodeMergeSerialSuffix.
  MergeKernel(Device &dev, const std::string &id,
              const char *suffix = abi::gpu::kDecodeMergeSuffix) {
    for (const testing::DecodeKernel &c : testing::decodeKernels())
      if (c.id == id)
        k = c;
    REQUIRE(k.id == id);
    const std::string base = mergeKernelDir() + "/" + k.id;
    std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
    INFO(k.id << ": kernel files " << base
              << ".{info,ptx} (gen_decode_kernels DIR)");
    REQUIRE(infoFile);
    REQUIRE(ptxFile);
    GpuKernelInfo info = test::readKernelInfo(infoFile);
    std::stringstream ptx;
    ptx << ptxFile.rdbuf();
    module = Module::fromPtx(dev, ptx.str());
    fn = module.function(info.name + suffix);
  }
  /// Launches the merge of \p splits splits' partials into O and LSE
  /// [batch, heads_q, q_len(, dv)] (run()'s launchMerge: one CTA per row).
  /// \p programmatic: as run() launches it after the split kernel on
  /// sm_90 (LaunchConfig::programmaticDependency; after a copy, as here,
  /// it has nothing to overlap, but its griddepcontrol.wait runs).
  void launchOn(CUdeviceptr oPart, CUdeviceptr lsePart, int splits,
                const TensorRef &o, const TensorRef &lse, void *sink,
                bool programmatic = false) const {
    KernelArgs a;
    a.add(reinterpret_cast<void *>(oPart))
        .add(reinterpret_cast<void *>(lsePart))
        .add(o.data)
        .add(lse.data);
    for (int i = 0; i < 3; ++i)
      a.add(o.strides[i]);
    for (int i = 0; i < 3; ++i)
      a.add(lse.strides[i]);
    a.add(static_cast<int32_t>(splits));
    if (k.spec.sink)
      a.add(sink);
    LaunchConfig cfg;
    cfg.grid = {unsigned(o.shape[2]), unsigned(o.shape[1]),
                unsigned(o.shape[0])};
    cfg.block = {unsigned(abi::gpu::kMergeThreads), 1, 1};
    cfg.programmaticDependency = programmatic;
    launch(fn, cfg, a);
  }
};

} // namespace

TEST_CASE("decode merge kernel: many splits, empty ones and NaN in unused "
          "partials against a float64 merge",
          "[gpu][decode][merge]") {
  Device &dev = Device::get(0);
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // The merge entries, and the serial twins run() takes for few splits
  // over many rows (runtime::decodeSerialMerge; here at every count).
  const char *twin = abi::gpu::kDecodeMergeSerialSuffix;
  for (auto [id, suffix] :
       std::initializer_list<std::pair<const char *, const char *>>{
           {"dec_dense_mqa32", abi::gpu::kDecodeMergeSuffix},
           {"dec_dense_mqa32_serialmerge", abi::gpu::kDecodeMergeSuffix},
           {"dec_sink_g4", abi::gpu::kDecodeMergeSuffix},
           {"dec_causal_mha_d64_f16", abi::gpu::kDecodeMergeSuffix},
           {"dec_sink_causal_g3_d64_f16", abi::gpu::kDecodeMergeSuffix},
           {"dec_dense_mqa32", twin},
           {"dec_sink_g4", twin},
           {"dec_sink_causal_g3_d64_f16", twin}}) {
    MergeKernel mk(dev, id, suffix);
    const AttentionSpec &spec = mk.k.spec;
    INFO(mk.k.id << suffix);
    const int64_t batch = 2, heads = spec.headsQ, qLen = 3, dv = spec.headDimV,
                  rows = batch * heads * qLen;
    std::vector<float> sink;
    std::uniform_real_distribution<float> us(-2.0f, 3.0f);
    for (int64_t h = 0; h < heads; ++h)
      sink.push_back(!spec.sink || h == 1 ? -INFINITY : us(rng));
    DeviceBuffer sinkDev(dev, sink.size() * 4);
    sinkDev.copyFromHost(sink.data(), sink.size() * 4);
    for (int splits : {1, 3, 33, 128, 244}) {
      INFO(splits << " splits");
      Partials p(splits, rows, dv, rng);
      DeviceBuffer oPart(dev, p.o.size() * 4), lsePart(dev, p.lse.size() * 4);
      oPart.copyFromHost(p.o.data(), p.o.size() * 4);
      lsePart.copyFromHost(p.lse.data(), p.lse.size() * 4);
      // O [batch, heads, q_len, dv] (16-bit), LSE [batch, heads, q_len]:
      // NaN (all bits set) before the launch.
      test::GpuTensor o(dev, spec.dtypeO, {batch, heads, qLen, dv});
      test::GpuTensor lse(dev, DType::F32, {batch, heads, qLen, 1}, 3);
      o.poison();
      lse.poison();
      // Odd counts through the programmatic launch run() uses on sm_90.
      mk.launchOn(oPart.ptr(), lsePart.ptr(), splits, o.deviceRef,
                  lse.deviceRef, sinkDev.data(), splits % 2 == 1);
      REQUIRE(Driver::get().cuCtxSynchronize() == CUDA_SUCCESS);
      o.download();
      lse.download();
      // 16-bit rounding of |O| <= 2 (bf16 8 bits, fp16 11), the
      // exponentials' approximations (ex2.approx, lg2.approx) in the LSE.
      const double tolO = spec.dtypeO == DType::BF16 ? 1.6e-2 : 3e-3;
      int64_t bad = 0, nonFinite = 0;
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t q = 0; q < qLen; ++q) {
            const int64_t r = (b * heads + h) * qLen + q;
            auto [wantL, wantO] = p.merge(r, sink[size_t(h)]);
            const double gotL = lse.at(b, h, q);
            bad += wantL == -kInf ? gotL != -kInf
                                  : !(std::fabs(gotL - wantL) <=
                                      1e-4 * (1 + std::fabs(wantL)));
            for (int64_t d = 0; d < dv; ++d) {
              const double got = o.at(b, h, q, d);
              nonFinite += !std::isfinite(got);
              bad += !(std::fabs(got - wantO[size_t(d)]) <= tolO);
            }
            if (r % 5 == 0 && sink[size_t(h)] == -INFINITY) {
              // Every split empty, no sink: O = 0, LSE = -inf exactly.
              CHECK(gotL == -INFINITY);
              CHECK(o.at(b, h, q, dv - 1) == 0.0f);
            }
          }
      CHECK(nonFinite == 0);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("decode merge kernel: parallel beside serial",
          "[.decodemergebench]") {
  // The merge kernel alone (bf16, D = 128, MQA 32/1 q_len 1: rows = 32 x
  // B) over partials that are all live, as run() launches it after the
  // split kernel (which leaves the partials in the L2): microseconds per
  // launch, 50 launches back to back between CUDA events, the default
  // (`dec_dense_mqa32`, groups of threads over the splits) beside the
  // serial walk (`dec_dense_mqa32_serialmerge`, before session 19), and
  // the default module's serial twin (`_decode_merge_serial`, the same
  // walk) with the kernel run() launches (decodeSerialMerge); `pdl`: the
  // default kernel again, each launch a programmatic dependent of the one
  // before (as run() launches it after the split kernel on sm_90; here the
  // merge before never triggers, so this times the launch path's own cost,
  // not an overlap: [.decodesplitbench]'s `plain` column times that).
  Device &dev = Device::get(0);
  std::mt19937_64 rng(19);
  MergeKernel parallel(dev, "dec_dense_mqa32"),
      serial(dev, "dec_dense_mqa32_serialmerge"),
      twin(dev, "dec_dense_mqa32", abi::gpu::kDecodeMergeSerialSuffix);
  const int64_t heads = 32, dv = 128;
  const int sms = dev.properties().smCount;
  for (int64_t batch : {1, 8, 64})
    for (int splits : {2, 4, 8, 16, 33, 64, 128, 244}) {
      const int64_t rows = batch * heads;
      Partials p(splits, rows, dv, rng);
      for (float &l : p.lse) // every split live
        l = std::isinf(l) ? 0.5f : l;
      for (float &x : p.o)
        x = std::isnan(x) ? 0.25f : x;
      DeviceBuffer oPart(dev, p.o.size() * 4), lsePart(dev, p.lse.size() * 4);
      oPart.copyFromHost(p.o.data(), p.o.size() * 4);
      lsePart.copyFromHost(p.lse.data(), p.lse.size() * 4);
      test::GpuTensor o(dev, DType::BF16, {batch, heads, 1, dv});
      test::GpuTensor lse(dev, DType::F32, {batch, heads, 1, 1}, 3);
      double us[4];
      for (int which = 0; which < 4; ++which) {
        const MergeKernel &mk = which == 1   ? serial
                                : which == 2 ? twin
                                             : parallel;
        auto once = [&] {
          mk.launchOn(oPart.ptr(), lsePart.ptr(), splits, o.deviceRef,
                      lse.deviceRef, nullptr, which == 3);
        };
        once(); // warm-up
        EventTimer timer(dev);
        const int reps = 50;
        timer.start();
        for (int r = 0; r < reps; ++r)
          once();
        us[which] = 1e3 * timer.stopMs() / reps;
      }
      std::printf("DECODEMERGE rows=%-5lld splits=%-3d parallel %7.2f us  "
                  "serial %7.2f us  (x%.1f)  twin %7.2f us  run=%s  "
                  "pdl %7.2f us\n",
                  (long long)rows, splits, us[0], us[1], us[1] / us[0], us[2],
                  runtime::decodeSerialMerge(splits, rows, sms) ? "twin"
                                                                : "parallel",
                  us[3]);
    }
}
