//===- main.cpp - A runtime-only application of the installed flashjit ----===//
//
// consumer_runtime BUNDLE_DIR SPEC: opens a bundle made by the installed
// `flashjit bundle --target cpu`, loads SPEC's CPU kernel (dlopens its
// kernel.so: no compiler, no MLIR in this process), runs it on small random
// inputs and checks O and LSE against flashjit's float64 reference. Links
// flashjit::runtime only (its headers need the CUDA toolkit's: Device.h).
// Exits non-zero when the kernel is missing or a result is off.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/runtime/Bundle.h"
#include "flashjit/runtime/CpuAttentionKernel.h"
#include "flashjit/runtime/Device.h" // <cuda.h>: the CUDA headers are found

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer_runtime BUNDLE_DIR SPEC\n");
    return 2;
  }
  try {
    // The spec as the application spells it, canonicalised like the bundle.
    AttentionSpec spec = parseSpec(argv[2]);
    runtime::CacheKey request;
    request.specText = printSpec(spec);
    request.config.arch = "cpu";
    request.config.cpuBlockM = request.config.blockN =
        runtime::kDefaultCpuBlock;
    request.config.optLevel = runtime::kDefaultCpuOptLevel;
    runtime::Bundle bundle = runtime::Bundle::open(argv[1]);
    std::optional<runtime::KernelArtifacts> artifacts = bundle.find(request);
    if (!artifacts) {
      std::fprintf(stderr, "consumer_runtime: no CPU kernel for %s in %s\n",
                   request.specText.c_str(), argv[1]);
      return 1;
    }
    auto kernel = runtime::loadCpuKernel(*artifacts);
    // The GPU side of the runtime links too (libcuda is dlopened, if any).
    std::string why;
    std::printf("GPU: %s\n", runtime::Device::available(&why)
                                 ? "available"
                                 : ("none (" + why + ")").c_str());

    const int64_t batch = 1, hq = spec.headsQ, hk = spec.headsKV, sq = 45,
                  sk = 45, d = spec.headDimQK;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto random = [&](int64_t n) {
      std::vector<float> x(n);
      for (float &e : x)
        e = normal(rng);
      return x;
    };
    // Q [B, Hq, Sq, D]; K, V [B, Hkv, Sk, D]; O [B, Hq, Sq, D]; LSE [B, Hq,
    // Sq].
    std::vector<float> qs = random(batch * hq * sq * d),
                       ks = random(batch * hk * sk * d),
                       vs = random(batch * hk * sk * d),
                       os(batch * hq * sq * d, NAN), lse(batch * hq * sq, NAN);
    TensorRef q =
        TensorRef::contiguous(qs.data(), DType::F32, {batch, hq, sq, d});
    TensorRef k =
        TensorRef::contiguous(ks.data(), DType::F32, {batch, hk, sk, d});
    TensorRef v =
        TensorRef::contiguous(vs.data(), DType::F32, {batch, hk, sk, d});
    TensorRef o =
        TensorRef::contiguous(os.data(), DType::F32, {batch, hq, sq, d});
    TensorRef l =
        TensorRef::contiguous3(lse.data(), DType::F32, {batch, hq, sq});
    kernel->run(q, k, v, o, &l);

    ReferenceOutput ref = referenceAttention(spec, q, k, v);
    // The largest difference; a NaN (an unwritten output) counts as inf.
    auto maxDiff = [](const std::vector<float> &got,
                      const std::vector<double> &want) {
      double m = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        double diff = std::fabs(got[i] - want[i]);
        m = std::isnan(diff) ? INFINITY : std::max(m, diff);
      }
      return m;
    };
    const double err = maxDiff(os, ref.o), lseErr = maxDiff(lse, ref.lse);
    const bool ok = err <= 1e-4 && lseErr <= 1e-4;
    std::printf("%s: max |O - reference| = %.2e, max |LSE - reference| = "
                "%.2e: %s\n",
                request.specText.c_str(), err, lseErr, ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "consumer_runtime: %s\n", e.what());
    return 1;
  }
}
