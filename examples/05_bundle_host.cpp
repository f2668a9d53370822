//===- 05_bundle_host.cpp - Shipping precompiled kernels ------------------===//
//
// What it teaches: the deployment path. At build time, `flashjit bundle`
// compiles the specs an application needs into a directory:
//
//   flashjit bundle --out kernels --target cpu --spec
//     'attention(causal=bottom_right, head_dim=64, heads_q=8, heads_kv=2)'
//
// At run time, the application links the runtime-only library
// (flashjit::runtime: no compiler, no MLIR), opens the bundle, finds
// the kernel by its spec and runs it. A missing kernel is an error here, not
// a compile. The result is checked against the float64 reference (part of
// the runtime flavour too); exits 1 on a mismatch or a missing kernel.
//
// Usage: 05_bundle_host BUNDLE_DIR
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/runtime/Bundle.h"
#include "flashjit/runtime/CpuAttentionKernel.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

using namespace flashjit;

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BUNDLE_DIR\n", argv[0]);
    return 2;
  }
  try {
    // The spec as the application writes it; the bundle is searched by its
    // canonical text, so spacing and field order do not matter.
    AttentionSpec spec = parseSpec(
        "attention(head_dim=64, heads_q=8, heads_kv=2, causal=bottom_right)");
    runtime::CacheKey request;
    request.specText = printSpec(spec);
    // With `flashjit bundle`'s default CPU options.
    request.config.arch = "cpu";
    request.config.cpuBlockM = request.config.blockN =
        runtime::kDefaultCpuBlock;
    request.config.optLevel = runtime::kDefaultCpuOptLevel;
    runtime::Bundle bundle = runtime::Bundle::open(argv[1]);
    std::optional<runtime::KernelArtifacts> artifacts = bundle.find(request);
    if (!artifacts) {
      std::fprintf(stderr, "no CPU kernel for %s in %s (%zu kernels)\n",
                   request.specText.c_str(), argv[1], bundle.items().size());
      return 1;
    }
    auto kernel = runtime::loadCpuKernel(*artifacts); // dlopens kernel.so
    std::printf("loaded %s from %s (built for %s)\n", artifacts->entry.c_str(),
                argv[1], artifacts->cpu.c_str());

    const int64_t batch = 1, headsQ = 8, headsKV = 2, seqlenQ = 33,
                  seqlenK = 120, dim = 64;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto random = [&](int64_t n) {
      std::vector<uint16_t> x(n);
      for (uint16_t &e : x)
        e = floatToBf16(u(rng));
      return x;
    };
    std::vector<uint16_t> qs = random(batch * headsQ * seqlenQ * dim),
                          ks = random(batch * headsKV * seqlenK * dim),
                          vs = random(batch * headsKV * seqlenK * dim),
                          os(qs.size(), 0xFFFF); // NaN until written
    std::vector<float> lses(batch * headsQ * seqlenQ, NAN);
    TensorRef q = TensorRef::contiguous(qs.data(), DType::BF16,
                                        {batch, headsQ, seqlenQ, dim});
    TensorRef k = TensorRef::contiguous(ks.data(), DType::BF16,
                                        {batch, headsKV, seqlenK, dim});
    TensorRef v = TensorRef::contiguous(vs.data(), DType::BF16,
                                        {batch, headsKV, seqlenK, dim});
    TensorRef o = TensorRef::contiguous(os.data(), DType::BF16,
                                        {batch, headsQ, seqlenQ, dim});
    TensorRef lse = TensorRef::contiguous3(lses.data(), DType::F32,
                                           {batch, headsQ, seqlenQ});
    kernel->run(q, k, v, o, &lse);

    ReferenceOutput ref = referenceAttention(spec, q, k, v);
    double err = 0;
    bool ok = true;
    for (size_t i = 0; i < os.size(); ++i) {
      double got = bf16ToFloat(os[i]), diff = std::fabs(got - ref.o[i]);
      ok &= diff <= 1e-2 * (1 + std::fabs(ref.o[i])); // bf16 output
      err = std::isnan(diff) ? INFINITY : std::max(err, diff);
    }
    double errLse = 0;
    for (size_t i = 0; i < lses.size(); ++i) {
      double diff = std::fabs(lses[i] - ref.lse[i]);
      ok &= diff <= 1e-3;
      errLse = std::isnan(diff) ? INFINITY : std::max(errLse, diff);
    }
    ok &= std::isfinite(err) && std::isfinite(errLse);
    std::printf("max |O - ref| = %.2e (bf16), max |LSE - ref| = %.2e: %s\n",
                err, errLse, ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
