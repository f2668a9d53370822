//===- quickstart.cpp - A sliding-window + soft-cap attention variant -----===//
//
// What it teaches: writing an attention variant in the C++ DSL (a causal
// sliding-window mask and a tanh soft-cap score modifier), compiling it with
// flashjit, running it, and checking it against the float64 reference.
//
// Run: scripts/demo.sh                       (N = 4096)
//      ./build/ci/examples/quickstart --small (N = 300, seconds)
//
// The kernel runs on the host CPU (MLIR -> LLVM -> a kernel.so kept in the
// kernel cache, so a second run compiles nothing). The same spec is
// also compiled for the GPU (PTX for the GPU present, sm_90a without one,
// written to the working directory so you can read it); on a machine with an
// NVIDIA GPU it runs there too, timed with CUDA events. Exits non-zero if any
// output is off by more than the bf16 tolerance (2e-2).
// On a GPU machine without LLVM: scripts/gpu-static.sh (a static build).
//
//===----------------------------------------------------------------------===//
#include "flashjit/flashjit.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

using namespace flashjit;

namespace {
double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

/// Max |O - O_ref| over a bf16 [1, H, N, D] output.
double maxError(const std::vector<uint16_t> &o, const ReferenceOutput &ref) {
  double err = 0;
  for (size_t i = 0; i < o.size(); ++i)
    err = std::max(err, std::fabs(bf16ToFloat(o[i]) - ref.o[i]));
  return err;
}

/// Max |LSE - LSE_ref| over [1, H, N] (every row here sees itself, so every
/// reference LSE is finite).
double maxLseError(const std::vector<float> &lse, const ReferenceOutput &ref) {
  double err = 0;
  for (size_t i = 0; i < lse.size(); ++i)
    err = std::max(err, std::fabs(lse[i] - ref.lse[i]));
  return err;
}
} // namespace

int main(int argc, char **argv) {
  bool small = argc == 2 && std::strcmp(argv[1], "--small") == 0;
  if (argc > 2 || (argc == 2 && !small)) {
    std::fprintf(stderr, "usage: %s [--small]\n", argv[0]);
    return 2;
  }
  const int64_t n = small ? 300 : 4096, heads = 4, headDim = 64;
  const int window = 256;

  // Each query sees itself and the 256 keys before it; scores are capped
  // smoothly at +-30 (Gemma 2's soft-cap). Both are plain DSL expressions.
  Variant v("swa_softcap");
  v.mask(sliding_window(window, 0, Alignment::TopLeft));
  v.scoreMod(softcap(30.0f));

  AttentionSpec spec;
  spec.variant = v;
  spec.headDimQK = spec.headDimV = headDim;
  spec.headsQ = spec.headsKV = heads;
  spec.dtypeQ = spec.dtypeK = spec.dtypeV = spec.dtypeO = DType::BF16;
  std::printf("spec: %s\n", printSpec(spec).c_str());
  std::printf("problem: batch 1, %lld heads, N = %lld, head_dim %lld, bf16\n",
              static_cast<long long>(heads), static_cast<long long>(n),
              static_cast<long long>(headDim));

  // q, k, v: [batch=1, heads, n, head_dim] bf16, random normal entries.
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::array<int64_t, 4> shape{1, heads, n, headDim};
  auto randomTensor = [&](std::vector<uint16_t> &storage) {
    storage.resize(heads * n * headDim);
    for (auto &x : storage)
      x = floatToBf16(normal(rng));
    return TensorRef::contiguous(storage.data(), DType::BF16, shape);
  };
  std::vector<uint16_t> qs, ks, vs, os(heads * n * headDim);
  std::vector<float> lse(heads * n);
  TensorRef q = randomTensor(qs), k = randomTensor(ks), vt = randomTensor(vs);
  TensorRef o = TensorRef::contiguous(os.data(), DType::BF16, shape);
  TensorRef l = TensorRef::contiguous3(lse.data(), DType::F32, {1, heads, n});

  // The oracle: float64, straight from the definition.
  auto t0 = std::chrono::steady_clock::now();
  ReferenceOutput ref = referenceAttention(spec, q, k, vt);
  std::printf("float64 reference: %.2f s\n", seconds(t0));

  // FLOPs over the allowed (q, k) pairs only.
  double pairs = 0;
  for (int64_t i = 0; i < n; ++i)
    pairs += std::min<int64_t>(i + 1, window + 1);
  const double flops = 4.0 * heads * pairs * headDim;
  const double tol = 2e-2;    // bf16 output
  const double lseTol = 1e-3; // fp32 LSE
  bool ok = true;

  // CPU: load the kernel (compiled and stored in the kernel cache on the
  // first run of this program, a ~1 ms disk hit after that) and run it.
  t0 = std::chrono::steady_clock::now();
  LoadReport report;
  JitKernel cpuKernel = loadOrCompile(spec, JitTarget::CPU, {}, &report);
  const CpuKernel *cpu = cpuKernel.cpu().get();
  double compileS = seconds(t0);
  cpu->run(q, k, vt, o, &l); // warm-up
  t0 = std::chrono::steady_clock::now();
  cpu->run(q, k, vt, o, &l);
  double runS = seconds(t0);
  double err = maxError(os, ref), lerr = maxLseError(lse, ref);
  ok &= err <= tol && lerr <= lseTol;
  std::printf("cpu:  load %.1f ms (cache: %s), run %.1f ms (%.1f GFLOP/s), "
              "max |O - O_ref| = %.2e, max |LSE - LSE_ref| = %.2e %s\n",
              compileS * 1e3, runtime::toString(report.outcome), runS * 1e3,
              flops / runS / 1e9, err, lerr,
              err <= tol && lerr <= lseTol ? "ok" : "TOO LARGE");

  // GPU: the same spec as PTX (readable) for the GPU present (sm_90a when
  // there is none), run there when there is one. compileGpu generates code
  // only; loadOrCompile(spec, JitTarget::GPU) is the cached entry point,
  // as for the CPU.
  std::string why;
  const bool haveGpu = runtime::Device::available(&why);
  GpuCompileOptions gpuOptions; // sm_90a
  if (haveGpu && runtime::Device::get(0).properties().ccMajor < 9)
    gpuOptions.arch = "sm_80";
  GpuKernelImage img = compileGpu(spec, gpuOptions);
  const std::string ptxPath =
      std::filesystem::absolute("swa_softcap." + img.config.arch + ".ptx")
          .string();
  std::ofstream(ptxPath) << img.ptx;
  std::printf("gpu:  PTX for %s in %.0f ms: %s (%zu bytes; also `flashjit "
              "inspect --stage ptx`)\n",
              img.config.arch.c_str(), img.timings.back().seconds * 1e3,
              ptxPath.c_str(), img.ptx.size());
  if (!haveGpu) {
    std::printf("gpu:  not run (%s)\n", why.c_str());
  } else {
    runtime::Device &dev = runtime::Device::get(0);
    LoadReport gpuReport;
    JitOptions jit;
    jit.device = &dev;
    std::shared_ptr<const runtime::GpuAttentionKernel> kernel =
        loadOrCompile(spec, JitTarget::GPU, jit, &gpuReport).gpu();
    size_t bytes = qs.size() * 2;
    runtime::DeviceBuffer dq(dev, bytes), dk(dev, bytes), dv(dev, bytes),
        dout(dev, bytes), dl(dev, lse.size() * 4);
    dq.copyFromHost(qs.data(), bytes);
    dk.copyFromHost(ks.data(), bytes);
    dv.copyFromHost(vs.data(), bytes);
    dout.fill(0xFF); // NaN: unwritten outputs cannot pass
    TensorRef gq = q, gk = k, gv = vt, go = o, gl = l;
    gq.data = dq.data();
    gk.data = dk.data();
    gv.data = dv.data();
    go.data = dout.data();
    gl.data = dl.data();
    kernel->run(gq, gk, gv, go, &gl, {}); // warm-up
    dev.synchronize();
    runtime::EventTimer timer(dev);
    const int reps = 20;
    timer.start();
    for (int r = 0; r < reps; ++r)
      kernel->run(gq, gk, gv, go, &gl, {});
    double gpuS = timer.stopMs() * 1e-3 / reps;
    dout.copyToHost(os.data(), bytes);
    dl.copyToHost(lse.data(), lse.size() * 4);
    double gerr = maxError(os, ref), glerr = maxLseError(lse, ref);
    bool gok = gerr <= tol && glerr <= lseTol;
    ok &= gok;
    std::printf("gpu:  %s (cache: %s), %.3f ms (%.1f TFLOP/s), max |O - O_ref| "
                "= %.2e, max |LSE - LSE_ref| = %.2e %s\n",
                dev.properties().name.c_str(),
                runtime::toString(gpuReport.outcome), gpuS * 1e3,
                flops / gpuS / 1e12, gerr, glerr, gok ? "ok" : "TOO LARGE");
  }
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
