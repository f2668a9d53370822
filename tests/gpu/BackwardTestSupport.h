//===- BackwardTestSupport.h - Shared pieces of the [gpu] backward tests --===//
//
// Loading an ahead-of-time backward kernel and checking dQ, dK and dV
// against the float64 reference backward (relative bounds, NaN and
// structural zeros), for BackwardGpuTest.cpp and RingBackwardGpuTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_GPU_BACKWARDTESTSUPPORT_H
#define FLASHJIT_TESTS_GPU_BACKWARDTESTSUPPORT_H

#include "GpuTestSupport.h"

#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/ReferenceBackward.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
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

/// dQ, dK and dV of one dense call (downloaded) against the reference
/// backward: rows whose reference LSE (\p ref) is -inf have no allowed key
/// (their dQ must be exactly 0); keys whose reference dV is all zero are
/// seen by no query of their group (dK and dV exactly 0: dV_j = sum_i P_ij
/// dO_i with random dO is 0 only then).
struct DenseGradChecks {
  GradCheck q, k, v;
  int64_t emptyRows = 0, unseenKeys = 0;
};

inline DenseGradChecks compareDenseGradients(const GpuTensor &dq,
                                             const GpuTensor &dk,
                                             const GpuTensor &dv,
                                             ReferenceGradients &want,
                                             ReferenceOutput &ref) {
  const std::array<int64_t, 4> &qs = dq.hostRef.shape, &ks = dk.hostRef.shape;
  const int64_t dvv = dv.hostRef.shape[3];
  DenseGradChecks c;
  for (int64_t b = 0; b < qs[0]; ++b) {
    for (int64_t h = 0; h < qs[1]; ++h)
      for (int64_t i = 0; i < qs[2]; ++i) {
        bool empty = std::isinf(ref.lseAt(b, h, i));
        c.emptyRows += empty;
        for (int64_t d = 0; d < qs[3]; ++d)
          c.q.add(dq.at(b, h, i, d), want.dqAt(b, h, i, d), empty);
      }
    for (int64_t h = 0; h < ks[1]; ++h)
      for (int64_t j = 0; j < ks[2]; ++j) {
        bool unseen = true;
        for (int64_t d = 0; d < dvv; ++d)
          unseen = unseen && want.dvAt(b, h, j, d) == 0.0;
        c.unseenKeys += unseen;
        for (int64_t d = 0; d < ks[3]; ++d)
          c.k.add(dk.at(b, h, j, d), want.dkAt(b, h, j, d), unseen);
        for (int64_t d = 0; d < dvv; ++d)
          c.v.add(dv.at(b, h, j, d), want.dvAt(b, h, j, d), unseen);
      }
  }
  return c;
}

} // namespace flashjit::test::backward

#endif // FLASHJIT_TESTS_GPU_BACKWARDTESTSUPPORT_H
