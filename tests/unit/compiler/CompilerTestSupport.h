//===- CompilerTestSupport.h - Helpers for the compiler's tests -*- C++ -*-===//
#ifndef FLASHJIT_TESTS_UNIT_COMPILER_COMPILERTESTSUPPORT_H
#define FLASHJIT_TESTS_UNIT_COMPILER_COMPILERTESTSUPPORT_H

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Tensor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace flashjit::test {

/// A host tensor [d0, d1, d2, d3] of \p dtype; with \p seqMajor the memory
/// layout is [d0, d2, d1, d3] (heads inside sequence), seen through strides.
struct StridedTensor {
  std::vector<uint8_t> bytes;
  TensorRef ref;

  StridedTensor(DType dtype, std::array<int64_t, 4> shape, bool seqMajor) {
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    bytes.assign(std::max<int64_t>(n, 1) * byteSize(dtype), 0);
    ref = TensorRef::contiguous(bytes.data(), dtype, shape);
    if (seqMajor && n > 0) {
      ref.strides = {shape[1] * shape[2] * shape[3], shape[3],
                     shape[1] * shape[3], 1};
    }
    // An empty tensor has no elements to overlap, but checkAttentionTensors
    // rejects zero strides on dims larger than 1 (reported to the lead).
    if (n == 0)
      for (int64_t &s : ref.strides)
        s = std::max<int64_t>(s, 1);
  }
  /// Fills every element with a random non-zero value in [-1, 1].
  void randomize(std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int64_t n = static_cast<int64_t>(bytes.size()) / byteSize(ref.dtype);
    for (int64_t i = 0; i < n; ++i) {
      float x = u(rng);
      if (std::abs(x) < 1e-3f)
        x = 0.5f;
      storeFromFloat(bytes.data(), ref.dtype, i, x);
    }
  }
  float at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return loadAsFloat(bytes.data(), ref.dtype, ref.offset(a, b, c, d));
  }
};

/// Compiled kernels by spec text and options, shared by every test case of
/// the process (compiling costs ~0.1 s).
inline std::shared_ptr<const CpuKernel>
cachedKernel(const AttentionSpec &spec, const CompileOptions &opts = {}) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const CpuKernel>> cache;
  std::string key = printSpec(spec) + "|" + std::to_string(opts.blockM) + "," +
                    std::to_string(opts.blockN) + "," +
                    std::to_string(opts.countTiles);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  auto k = compileCpu(spec, opts);
  cache.emplace(key, k);
  return k;
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_UNIT_COMPILER_COMPILERTESTSUPPORT_H
