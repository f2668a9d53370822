//===- GpuMain.cpp - Catch2 main of the [gpu] tests -----------------------===//
//
// Without a usable GPU the tests are skipped as a whole, visibly: the reason
// is printed and the exit code is 77 (CTest's SKIP_RETURN_CODE). Listing
// tests (CTest discovery at build time) works everywhere.
//
//===----------------------------------------------------------------------===//
#define CATCH_CONFIG_RUNNER
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/JitLink.h"
#include "flashjit/runtime/Nvrtc.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char **argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    listing |= std::strncmp(argv[i], "--list", 6) == 0 ||
               std::strcmp(argv[i], "-l") == 0 ||
               std::strcmp(argv[i], "-h") == 0 ||
               std::strcmp(argv[i], "--help") == 0;
  if (!listing) {
    using namespace flashjit::runtime;
    std::string why;
    if (!Device::available(&why)) {
      std::printf("SKIPPED: the [gpu] tests need an NVIDIA GPU and driver: "
                  "%s\n",
                  why.c_str());
      return 77;
    }
    const DeviceProperties &p = Device::get(0).properties();
    std::printf("GPU: %s (%s, %d SMs, %d KiB shared/block opt-in), driver "
                "%d, NVRTC %d, nvJitLink %d\n",
                p.name.c_str(), p.arch().c_str(), p.smCount,
                p.maxSharedPerBlockOptin / 1024, Driver::get().version(),
                nvrtcVersionNumber(), nvJitLinkVersion());
  }
  return Catch::Session().run(argc, argv);
}
