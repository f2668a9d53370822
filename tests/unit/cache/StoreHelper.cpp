//===- StoreHelper.cpp - One process of the concurrent-store test ---------===//
//
// cache_store_helper DIR SPEC OUT: asks the cache in DIR for SPEC's key with
// a compile step that takes 200 ms, appends a line to DIR/compiles.log each
// time it really compiles, and writes the PTX it got (stored or loaded) to
// OUT. Links flashjit_runtime only. Exit 0 on success, 2 on an exception.
//
//===----------------------------------------------------------------------===//
#include "CacheTestSupport.h"

#include "flashjit/runtime/Cache.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::cerr << "usage: cache_store_helper DIR SPEC OUT\n";
    return 1;
  }
  try {
    using namespace flashjit::runtime;
    CacheConfig config;
    config.dir = argv[1];
    DiskCache cache(config);
    CacheKey key = CacheKey::make(argv[2], "sm_90a", 64, 8);
    CacheOutcome outcome;
    KernelArtifacts a = cache.getOrCompile(
        key,
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          std::ofstream(std::string(argv[1]) + "/compiles.log", std::ios::app)
              << ::getpid() << "\n";
          return flashjit::testing::fakeArtifacts(
              argv[2], "pid " + std::to_string(::getpid()));
        },
        &outcome);
    std::ofstream(argv[3], std::ios::binary) << *a.file(kPtxFile);
    std::cout << toString(outcome) << "\n";
    return 0;
  } catch (const std::exception &e) {
    std::cerr << "cache_store_helper: " << e.what() << "\n";
    return 2;
  }
}
