//===- BundleLoader.cpp - Loads a bundle with the runtime only ------------===//
//
// bundle_loader DIR SPEC ARCH: opens the bundle in DIR, finds SPEC's kernel
// for ARCH and prints its entry symbol, launch facts and PTX size. Links
// flashjit_runtime and flashjit_frontend only, never the compiler (a
// CTest checks its NEEDED entries). Exit 0 found, 1 not found or bad bundle.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Parser.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Cache.h"

#include <iostream>

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
    std::string spec = flashjit::printSpec(flashjit::parseSpec(argv[2]));
    std::optional<KernelArtifacts> a = bundle.find(spec, argv[3]);
    if (!a) {
      std::cerr << "bundle_loader: no kernel for this spec and " << argv[3]
                << " in " << argv[1] << " (" << bundle.items().size()
                << " kernels)\n";
      return 1;
    }
    const std::string *ptx = a->file(kPtxFile);
    std::cout << "entry=" << a->entry << " arch=" << a->arch
              << " threads=" << a->threads << " block_m=" << a->blockM
              << " shared_bytes=" << a->sharedBytes
              << " ptx_bytes=" << (ptx ? ptx->size() : 0) << "\n";
    return 0;
  } catch (const flashjit::Error &e) {
    std::cerr << "bundle_loader: " << e.what() << "\n";
    return 1;
  }
}
