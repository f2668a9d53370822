//===- CompilerTestSupport.h - Helpers for the compiler's tests -*- C++ -*-===//
#ifndef FLASHJIT_TESTS_UNIT_COMPILER_COMPILERTESTSUPPORT_H
#define FLASHJIT_TESTS_UNIT_COMPILER_COMPILERTESTSUPPORT_H

#include "flashjit/compiler/Compiler.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/Tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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
                    std::to_string(opts.countTiles) + "," +
                    std::to_string(opts.varlen) + "," +
                    std::to_string(opts.blockSparse);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  auto k = compileCpu(spec, opts);
  cache.emplace(key, k);
  return k;
}

/// A packed varlen tensor [total, heads, dim] (FlashAttention's layout)
/// whose token stride leaves \p gap unused elements after each token, so
/// that writes outside the tensor's elements can be detected.
struct PackedTensor {
  std::vector<uint8_t> bytes;
  TensorRef ref;

  PackedTensor(DType dtype, int64_t total, int64_t heads, int64_t dim,
               int64_t gap = 0) {
    int64_t tokenStride = heads * dim + gap;
    bytes.assign(std::max<int64_t>(total * tokenStride, 1) * byteSize(dtype),
                 0);
    ref.data = bytes.data();
    ref.dtype = dtype;
    ref.rank = 3;
    ref.shape = {total, heads, dim, 1};
    ref.strides = {std::max<int64_t>(tokenStride, 1), dim, 1, 1};
  }
  /// Random non-zero values in [-1, 1] everywhere (gaps included).
  void randomize(std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int64_t n = static_cast<int64_t>(bytes.size()) / byteSize(ref.dtype);
    for (int64_t i = 0; i < n; ++i) {
      float x = u(rng);
      storeFromFloat(bytes.data(), ref.dtype, i,
                     std::abs(x) < 1e-3f ? 0.5f : x);
    }
  }
  /// Every byte 0xFF: NaN in fp16, bf16 and fp32.
  void poison() { std::fill(bytes.begin(), bytes.end(), uint8_t{0xFF}); }
  float at(int64_t t, int64_t h, int64_t d) const {
    return loadAsFloat(bytes.data(), ref.dtype, ref.offset(t, h, d));
  }
  /// True when every gap element is still poison.
  bool gapsPoisoned() const {
    int64_t es = byteSize(ref.dtype);
    for (int64_t t = 0; t < ref.shape[0]; ++t)
      for (int64_t e = ref.shape[1] * ref.shape[2]; e < ref.strides[0]; ++e)
        for (int64_t x = 0; x < es; ++x)
          if (bytes[(t * ref.strides[0] + e) * es + x] != 0xFF)
            return false;
    return true;
  }
};

/// Compares one output row (O and LSE) with the reference; returns "" or a
/// description of the first mismatch. Empty rows must be exact zeros and
/// -inf; nothing may be NaN.
template <class GetO>
std::string compareRow(double wantLse, float gotLse, int64_t dv, DType dtype,
                       const double *wantO, GetO &&gotO) {
  double atol = dtype == DType::BF16 ? 1e-2 : dtype == DType::F16 ? 2e-3 : 1e-4;
  bool empty = wantLse == -std::numeric_limits<double>::infinity();
  if (empty ? gotLse != -std::numeric_limits<float>::infinity()
            : !(std::abs(gotLse - wantLse) <= 1e-3 + 1e-5 * std::abs(wantLse)))
    return "lse = " + std::to_string(gotLse) + ", expected " +
           std::to_string(wantLse);
  for (int64_t d = 0; d < dv; ++d) {
    float x = gotO(d);
    double w = wantO[d];
    bool ok = empty ? x == 0.0f : std::abs(x - w) <= atol + atol * std::abs(w);
    if (!ok || std::isnan(x))
      return "o[d=" + std::to_string(d) + "] = " + std::to_string(x) +
             ", expected " + std::to_string(w);
  }
  return {};
}

/// Runs \p kernel (varlen) on fresh random packed inputs for \p cuQ / \p cuK
/// (with \p blockMask) with poisoned outputs (o with gaps between tokens)
/// and compares every row with referenceVarlenAttention (with
/// \p refMask); returns "" or the first mismatch. Also fails if a gap of o
/// was written.
inline std::string checkVarlenRun(const CpuKernel &kernel,
                                  const std::vector<int32_t> &cuQ,
                                  const std::vector<int32_t> &cuK,
                                  const Arguments &args,
                                  const BlockMask *blockMask,
                                  const BlockMask *refMask, std::mt19937 &rng) {
  const AttentionSpec &spec = kernel.spec();
  int64_t tq = cuQ.back(), tk = cuK.back();
  PackedTensor q(spec.dtypeQ, tq, spec.headsQ, spec.headDimQK, 3);
  PackedTensor k(spec.dtypeK, tk, spec.headsKV, spec.headDimQK, 1);
  PackedTensor v(spec.dtypeV, tk, spec.headsKV, spec.headDimV);
  PackedTensor o(spec.dtypeO, tq, spec.headsQ, spec.headDimV, 5);
  q.randomize(rng);
  k.randomize(rng);
  v.randomize(rng);
  o.poison();
  std::vector<float> lse(std::max<int64_t>(spec.headsQ * tq, 1),
                         std::numeric_limits<float>::quiet_NaN());
  TensorRef lseRef =
      TensorRef::contiguous2(lse.data(), DType::F32, {spec.headsQ, tq});
  lseRef.strides = {std::max<int64_t>(tq, 1), 1, 1, 1};
  kernel.runVarlen(q.ref, k.ref, v.ref, o.ref, &lseRef, cuQ, cuK, args,
                   blockMask);
  VarlenReferenceOutput ref = referenceVarlenAttention(
      spec, q.ref, k.ref, v.ref, cuQ, cuK, args, refMask);
  for (size_t b = 0; b + 1 < cuQ.size(); ++b)
    for (int64_t t = cuQ[b]; t < cuQ[b + 1]; ++t)
      for (int64_t h = 0; h < spec.headsQ; ++h) {
        std::string e = compareRow(
            ref.lseAt(h, t), lse[h * tq + t], spec.headDimV, spec.dtypeO,
            &ref.oAt(t, h, 0), [&](int64_t d) { return o.at(t, h, d); });
        if (!e.empty())
          return "sequence " + std::to_string(b) + " token " +
                 std::to_string(t - cuQ[b]) + " head " + std::to_string(h) +
                 ": " + e;
      }
  if (!o.gapsPoisoned())
    return "the kernel wrote between the tokens of o";
  return {};
}

/// "[a, b, c]" for messages.
inline std::string toText(const std::vector<int32_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_UNIT_COMPILER_COMPILERTESTSUPPORT_H
