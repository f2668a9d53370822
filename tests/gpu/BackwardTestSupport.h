//===- BackwardTestSupport.h - Shared pieces of the [gpu] backward tests --===//
//
// Loading an ahead-of-time backward kernel and checking its dQ, dK and dV
// against the float64 reference backward (relative bounds, NaN and
// structural zeros), for BackwardGpuTest.cpp and RingBackwardGpuTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_GPU_BACKWARDTESTSUPPORT_H
#define FLASHJIT_TESTS_GPU_BACKWARDTESTSUPPORT_H

#include "GpuTestSupport.h"

#include "flashjit/runtime/AttentionKernel.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace flashjit::test::backward {

using runtime::Device;
using runtime::GpuAttentionBackwardKernel;
using runtime::GpuKernelInfo;

/// Loads ahead-of-time backward kernel \p id (<dir>/<id>.ptx and .info, as
/// test::readKernelInfo reads it).
inline std::unique_ptr<GpuAttentionBackwardKernel>
loadBackward(const std::string &id, const AttentionSpec &spec, Device &dev,
             const std::string &dir = matrixKernelDir()) {
  std::string base = dir + "/" + id;
  std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
  INFO("kernel files " << base << ".{info,ptx}");
  REQUIRE(infoFile);
  REQUIRE(ptxFile);
  GpuKernelInfo info = readKernelInfo(infoFile);
  REQUIRE(infoFile);
  REQUIRE(info.config.kind == KernelKind::Backward);
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  return std::make_unique<GpuAttentionBackwardKernel>(spec, info, ptx.str(),
                                                      dev);
}

/// Writes \p value into element (a, b, c, d) of \p t's host copy.
inline void put(GpuTensor &t, int64_t a, int64_t b, int64_t c, int64_t d,
                double value) {
  storeFromFloat(t.hostRef.data, t.hostRef.dtype, t.hostRef.offset(a, b, c, d),
                 static_cast<float>(value));
}
inline void upload(GpuTensor &t) {
  t.device.copyFromHost(t.host.data(), t.host.size());
}

/// Relative error bounds of the gradients: max |got - want| / max |want|
/// and the Frobenius ratio ||got - want|| / ||want||. P and dS enter the
/// tensor cores in the inputs' 16-bit dtype (as in FlashAttention-2), so
/// the bounds follow its unit roundoff: about 3x the worst seen on the
/// H200 (2026-12-01: bf16 5.4e-3 max / 3.2e-3 norm, fp16 7.5e-4 / 3.9e-4).
inline double maxTol(DType t) { return t == DType::BF16 ? 1.5e-2 : 2.5e-3; }
inline double normTol(DType t) { return t == DType::BF16 ? 7.5e-3 : 1.2e-3; }

struct GradCheck {
  double maxErr = 0, maxRef = 0, errSq = 0, refSq = 0;
  int64_t nan = 0, nonZero = 0;
  /// \p structuralZero: the entry belongs to a row with no allowed key
  /// (dQ) or a key no query may see (dK, dV), so it must be exactly 0. (A
  /// row with a single allowed key has dS = 0 in exact arithmetic only: its
  /// reference dQ is 0, the kernel's is rounding noise.)
  void add(float got, double want, bool structuralZero) {
    if (std::isnan(got)) {
      ++nan;
      return;
    }
    if (structuralZero && got != 0.0f)
      ++nonZero;
    double e = std::fabs(got - want);
    maxErr = std::max(maxErr, e);
    maxRef = std::max(maxRef, std::fabs(want));
    errSq += e * e;
    refSq += want * want;
  }
  double relMax() const { return maxRef > 0 ? maxErr / maxRef : maxErr; }
  double relNorm() const {
    return refSq > 0 ? std::sqrt(errSq / refSq) : std::sqrt(errSq);
  }
};

inline void checkGrad(const char *name, const GradCheck &c, DType t) {
  INFO(name << ": max |err| / max |ref| = " << c.relMax()
            << ", ||err|| / ||ref|| = " << c.relNorm() << ", NaN " << c.nan
            << ", nonzero in rows / keys with nothing allowed: " << c.nonZero);
  CHECK(c.nan == 0);
  CHECK(c.nonZero == 0);
  CHECK(c.relMax() <= maxTol(t));
  CHECK(c.relNorm() <= normTol(t));
}

} // namespace flashjit::test::backward

#endif // FLASHJIT_TESTS_GPU_BACKWARDTESTSUPPORT_H
