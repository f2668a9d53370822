//===- BundleLoader.cpp - Loads a bundle with the runtime only ------------===//
//
// bundle_loader DIR SPEC ARCH: opens the bundle in DIR and finds SPEC's
// kernel for ARCH. A GPU kernel: prints its entry symbol, launch facts and
// PTX size. A CPU kernel ("cpu", compiled with the default options): also
// dlopens its kernel.so, runs it on fresh random inputs and compares O and
// LSE with the float64 reference ("cpu-run-ok" on success;
// FLASHJIT_TEST_SEED replays a seed). Links flashjit_runtime_core and
// flashjit_frontend only: no compiler, no MLIR, no CUDA (a CTest checks its
// NEEDED entries). Exit 0 found (and correct), 1 not found, bad bundle or
// wrong results.
//
//===----------------------------------------------------------------------===//
#include "CpuCheck.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/CpuAttentionKernel.h"

#include <cstdlib>
#include <iostream>
#include <random>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::cerr << "usage: bundle_loader DIR SPEC ARCH\n";
    return 1;
  }
  try {
    using namespace flashjit::runtime;
    Bundle bundle = Bundle::open(argv[1]);
    // The spec is canonicalised by the frontend's parser, as a host
    // application would build it.
    flashjit::AttentionSpec parsed = flashjit::parseSpec(argv[2]);
    std::string spec = flashjit::printSpec(parsed);
    std::string arch = argv[3];
    CacheKey request;
    request.specText = spec;
    request.config.arch = arch;
    request.mma = arch == "cpu" ? "" : "default";
    if (arch == "cpu") { // what `flashjit bundle --target cpu` builds
      request.config.cpuBlockM = request.config.blockN = kDefaultCpuBlock;
      request.config.optLevel = kDefaultCpuOptLevel;
    }
    std::optional<KernelArtifacts> a = bundle.find(request);
    if (!a) {
      std::cerr << "bundle_loader: no kernel for this spec and " << arch
                << " in " << argv[1] << " (" << bundle.items().size()
                << " kernels)\n";
      return 1;
    }
    if (arch != "cpu") {
      const std::string *ptx = a->file(kPtxFile);
      std::cout << "entry=" << a->entry << " arch=" << a->config.arch
                << " threads=" << a->config.threads()
                << " block_m=" << a->config.blockM()
                << " shared_bytes=" << a->sharedBytes
                << " ptx_bytes=" << (ptx ? ptx->size() : 0) << "\n";
      return 0;
    }
    std::shared_ptr<const CpuAttentionKernel> kernel = loadCpuKernel(*a);
    uint64_t seed = std::random_device()();
    if (const char *env = std::getenv("FLASHJIT_TEST_SEED"))
      seed = std::strtoull(env, nullptr, 0);
    double maxError = 0;
    std::string mismatch = flashjit::testing::checkCpuKernel(
        parsed,
        [&](const auto &q, const auto &k, const auto &v, const auto &o,
            const auto *lse,
            const auto &args) { kernel->run(q, k, v, o, lse, args); },
        seed, &maxError);
    std::cout << "entry=" << a->entry
              << " arch=cpu block_m=" << a->config.blockM()
              << " block_n=" << a->config.blockN << " cpu=" << a->cpu
              << " so_bytes=" << a->file(kSharedObjectFile)->size()
              << " seed=" << seed << " max_abs_error=" << maxError << "\n";
    if (!mismatch.empty()) {
      std::cerr << "bundle_loader: wrong result: " << mismatch << "\n";
      return 1;
    }
    std::cout << "cpu-run-ok\n";
    return 0;
  } catch (const flashjit::Error &e) {
    std::cerr << "bundle_loader: " << e.what() << "\n";
    return 1;
  }
}
