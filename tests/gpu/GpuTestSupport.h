//===- GpuTestSupport.h - Tensors for [gpu] tests ---------------*- C++ -*-===//
#ifndef FLASHJIT_TESTS_GPU_GPUTESTSUPPORT_H
#define FLASHJIT_TESTS_GPU_GPUTESTSUPPORT_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Types.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/Ptxas.h"

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace flashjit::test {

/// An attention tensor with a host copy and a device copy of one layout:
/// [d0, d1, d2, d3] logical shape, memory order [d0, d2, d1, d3] when
/// \p bshd, \p pad unused elements after each innermost row.
struct GpuTensor {
  std::vector<uint8_t> host;
  runtime::DeviceBuffer device;
  TensorRef hostRef, deviceRef;

  GpuTensor(runtime::Device &dev, DType dtype, std::array<int64_t, 4> shape,
            int rank = 4, bool bshd = false, int64_t pad = 0) {
    int64_t row = shape[3] + pad;
    int64_t n = shape[0] * shape[1] * shape[2] * row;
    host.assign(static_cast<size_t>(n * byteSize(dtype)), 0);
    device = runtime::DeviceBuffer(dev, host.size());
    hostRef.data = host.data();
    hostRef.dtype = dtype;
    hostRef.rank = rank;
    hostRef.shape = shape;
    if (bshd)
      hostRef.strides = {shape[2] * shape[1] * row, row, shape[1] * row, 1};
    else
      hostRef.strides = {shape[1] * shape[2] * row, shape[2] * row, row, 1};
    if (rank == 3) { // [B, H, S] with shape[3] == 1
      hostRef.strides[3] = 1;
    }
    deviceRef = hostRef;
    deviceRef.data = device.data();
  }

  /// Fills every element with a uniform value in [-range, range] and uploads.
  void randomize(std::mt19937_64 &rng, float range = 1.0f) {
    std::uniform_real_distribution<float> u(-range, range);
    for (int64_t a = 0; a < hostRef.shape[0]; ++a)
      for (int64_t b = 0; b < hostRef.shape[1]; ++b)
        for (int64_t c = 0; c < hostRef.shape[2]; ++c)
          for (int64_t d = 0; d < hostRef.shape[3]; ++d)
            storeFromFloat(hostRef.data, hostRef.dtype,
                           hostRef.offset(a, b, c, d), u(rng));
    device.copyFromHost(host.data(), host.size());
  }
  /// Poisons the device copy with NaN (all bits set) before a run.
  void poison() { device.fill(0xFF); }
  void download() { device.copyToHost(host.data(), host.size()); }
  float at(int64_t a, int64_t b, int64_t c, int64_t d = 0) const {
    return loadAsFloat(hostRef.data, hostRef.dtype, hostRef.offset(a, b, c, d));
  }
};

using runtime::Device;
using runtime::DeviceBuffer;

/// The directory of the kernels gen_matrix_kernels writes ahead of time
/// ($FLASHJIT_MATRIX_KERNELS, else the build's).
inline std::string matrixKernelDir() {
  if (const char *env = std::getenv("FLASHJIT_MATRIX_KERNELS"))
    return env;
  return FLASHJIT_MATRIX_KERNELS_DEFAULT;
}

/// Whether the [gpu] tests run the kernel with id \p id:
/// $FLASHJIT_MATRIX_ONLY unset, or one of its comma-separated parts is a
/// substring of \p id (a part ending in `$` must end \p id:
/// "bench_none_d128$" is that id alone, not its `_sync` twin).
inline bool matrixIdSelected(const std::string &id) {
  const char *only = std::getenv("FLASHJIT_MATRIX_ONLY");
  if (!only)
    return true;
  const std::string list = only;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    std::string part = list.substr(start, end - start);
    if (!part.empty() && part.back() == '$') {
      part.pop_back();
      if (id.size() >= part.size() &&
          id.compare(id.size() - part.size(), part.size(), part) == 0)
        return true;
    } else if (id.find(part) != std::string::npos) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

/// Checks that \p kernel (made from \p ptx) keeps its values in registers
/// and shared memory: the driver reports no local memory for it.
/// Warp-specialised kernels (setmaxnreg) are judged by ptxas instead: on the
/// H200 (driver 580, CUDA 13.0) the driver reports 24-496 local bytes for
/// them where `ptxas -v` on the same PTX on the same machine reports no
/// stack frame and no spills (session 9, bench/RESULTS.md).
inline void checkNoLocalMemory(const runtime::GpuAttentionKernel &kernel,
                               const std::string &ptx) {
  int local = kernel.function().localBytes();
  INFO("driver-reported local bytes " << local);
  if (local == 0 || !kernel.info().config.warpSpecialized) {
    CHECK(local == 0);
    return;
  }
  runtime::PtxasReport r = runtime::runPtxas(ptx, kernel.info().config.arch);
  const runtime::PtxasFunctionReport *f = r.find(kernel.info().name);
  REQUIRE(f);
  INFO(r.log);
  CHECK(f->clean());
}

/// checkNoLocalMemory for the matrix kernel \p id (its PTX read from
/// matrixKernelDir()).
inline void checkNoLocalMemory(const runtime::GpuAttentionKernel &kernel,
                               const std::string &dir, const std::string &id) {
  std::ifstream file(dir + "/" + id + ".ptx");
  std::stringstream ptx;
  ptx << file.rdbuf();
  checkNoLocalMemory(kernel, ptx.str());
}

/// The GpuKernelInfo a gen_matrix_kernels .info line holds ("name arch warps
/// rows_per_warp min_blocks_per_sm wgmma block_n varlen block_sparse
/// shared_bytes kind", then "tma" for TMA kernels and "ws" for
/// warp-specialised ones, "decode_stages=N" for decode kernels); sets \p
/// in's failbit on an unknown kind or trailing word.
inline runtime::GpuKernelInfo readKernelInfo(std::istream &in) {
  runtime::GpuKernelInfo info;
  KernelConfig &c = info.config;
  std::string line, kind, flag;
  std::getline(in, line);
  std::istringstream s(line);
  s >> info.name >> c.arch >> c.numWarps >> c.rowsPerWarp >> c.minBlocksPerSM >>
      c.wgmma >> c.blockN >> c.varlen >> c.blockSparse >> info.sharedBytes >>
      kind;
  if (!s || !parseKernelKind(kind, c.kind))
    in.setstate(std::ios::failbit);
  while (s >> flag) {
    if (flag == "tma")
      c.tma = true;
    else if (flag == "ws" && c.tma)
      c.warpSpecialized = true;
    else if (flag == "decode_stages=2" || flag == "decode_stages=3")
      c.decodeStages = flag.back() - '0';
    else
      in.setstate(std::ios::failbit);
  }
  return info;
}

/// A matrix kernel's files: <matrixKernelDir()>/<id>.info (readKernelInfo)
/// and <id>.ptx; REQUIREs both readable and the .info line well formed.
struct MatrixKernelFiles {
  runtime::GpuKernelInfo info;
  std::string ptx;
};
inline MatrixKernelFiles readMatrixKernel(const std::string &id) {
  std::string base = matrixKernelDir() + "/" + id;
  std::ifstream infoFile(base + ".info"), ptxFile(base + ".ptx");
  INFO("kernel files " << base << ".{info,ptx} (make them with "
                       << "gen_matrix_kernels DIR, or set "
                       << "FLASHJIT_MATRIX_KERNELS)");
  REQUIRE(infoFile);
  REQUIRE(ptxFile);
  MatrixKernelFiles f;
  f.info = readKernelInfo(infoFile);
  REQUIRE(infoFile);
  std::stringstream ptx;
  ptx << ptxFile.rdbuf();
  f.ptx = ptx.str();
  return f;
}

/// FLASHJIT_TEST_PROGRESS set: one line on stderr, "[progress <s>] \p
/// what", with the seconds since the first such line, at each kernel load
/// and before and after each launch and float64 reference of the shared
/// helpers. A [gpu] run that stops at its time limit then tells a kernel
/// that does not return (a launch line with no "returned" after it) from a
/// slow float64 reference (session 24 could not tell them apart).
inline void progress(const std::string &what) {
  static const bool on = std::getenv("FLASHJIT_TEST_PROGRESS") != nullptr;
  if (!on)
    return;
  static const auto t0 = std::chrono::steady_clock::now();
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::fprintf(stderr, "[progress %.1f] %s\n", s, what.c_str());
  std::fflush(stderr);
}

/// Loads ahead-of-time kernel \p id of \p spec (readMatrixKernel; \p
/// sparse: kept for the callers, the .info line says it).
inline std::unique_ptr<runtime::GpuAttentionKernel>
loadAheadOfTime(const std::string &id, const AttentionSpec &spec, Device &dev,
                bool sparse = false) {
  (void)sparse;
  progress("load " + id);
  MatrixKernelFiles f = readMatrixKernel(id);
  return std::make_unique<runtime::GpuAttentionKernel>(spec, f.info, f.ptx,
                                                       dev);
}

/// Host and device copies of the parameters and buffers a variant reads.
struct VariantArgs {
  Arguments host, device;
  std::vector<std::unique_ptr<std::vector<int32_t>>> intData;
  std::vector<std::unique_ptr<std::vector<float>>> floatData;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;

  VariantArgs(Device &dev, const AttentionSpec &spec, int64_t sq, int64_t sk) {
    for (const ParamDecl &p : spec.variant.params()) {
      Scalar v = p.type == ScalarType::Float32 ? Scalar::f32(20.0f)
                 : p.type == ScalarType::Int32 ? Scalar::i32(5)
                                               : Scalar::i64(5);
      host.set(p.name, v);
      device.set(p.name, v);
    }
    for (const BufferDecl &b : spec.variant.buffers()) {
      if (b.elementType == ScalarType::Float32) { // per-head slopes
        auto data = std::make_unique<std::vector<float>>();
        // ALiBi slopes per head, or a relative-bias table: at least 64
        // entries so either reads in range.
        for (int h = 0; h < std::max(spec.headsQ, 64); ++h)
          data->push_back(std::exp2(-8.0f * (h + 1) / spec.headsQ));
        bind(dev, b.name, *data);
        floatData.push_back(std::move(data));
      } else { // per-token document ids, documents of 37 tokens
        auto data = std::make_unique<std::vector<int32_t>>();
        for (int64_t i = 0; i < std::max<int64_t>({sq, sk, 1}); ++i)
          data->push_back(static_cast<int32_t>(i / 37));
        bind(dev, b.name, *data);
        intData.push_back(std::move(data));
      }
    }
  }

  template <class T>
  void bind(Device &dev, const std::string &name, const std::vector<T> &v) {
    auto buf = std::make_unique<DeviceBuffer>(dev, v.size() * sizeof(T));
    buf->copyFromHost(v.data(), v.size() * sizeof(T));
    host.bind(name, v.data(), static_cast<int64_t>(v.size()));
    device.bind(name, static_cast<const T *>(buf->data()),
                static_cast<int64_t>(v.size()));
    buffers.push_back(std::move(buf));
  }
};

inline double tolerance(DType t) {
  switch (t) {
  case DType::BF16:
    return 1.6e-2;
  case DType::F16:
    return 2e-3;
  case DType::F32:
    return 2e-4;
  case DType::E4M3: // half a step at 1 (3 mantissa bits); fp8 outputs are
    return 6.25e-2; // refused today
  case DType::E5M2: // 2 mantissa bits
    return 1.25e-1;
  }
  return 0;
}

/// Checks downloaded GPU outputs \p o [batch, heads_q, sq, head_dim_v] and
/// \p lse against \p want: O within tolerance(dtype), LSE within 1e-4
/// relative, rows with no allowed key exactly O = 0 and LSE = -inf, no NaN.
inline void compareOutputs(const AttentionSpec &spec, const GpuTensor &o,
                           const GpuTensor &lse, ReferenceOutput &want,
                           int64_t batch, int64_t sq) {
  const int64_t hq = spec.headsQ;
  const double tol = tolerance(spec.dtypeO);
  double worstO = 0, worstLse = 0;
  int64_t emptyRows = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        double wl = want.lseAt(b, h, i);
        bool empty = std::isinf(wl) && wl < 0;
        emptyRows += empty;
        for (int64_t d = 0; d < spec.headDimV; ++d) {
          float got = o.at(b, h, i, d);
          double w = want.oAt(b, h, i, d);
          if (std::isnan(got) || (empty && got != 0.0f)) {
            FAIL_CHECK("o[" << b << "," << h << "," << i << "," << d
                            << "] = " << got << ", want " << w
                            << (empty ? " (row with no allowed key)" : ""));
            return;
          }
          worstO = std::max(worstO, std::fabs(got - w));
        }
        if (spec.returnLse) {
          float gl = lse.at(b, h, i);
          if (empty ? !(std::isinf(gl) && gl < 0) : !std::isfinite(gl)) {
            FAIL_CHECK("lse[" << b << "," << h << "," << i << "] = " << gl
                              << ", want " << wl);
            return;
          }
          if (!empty)
            worstLse = std::max(worstLse, std::fabs(gl - wl) /
                                              std::max(1.0, std::fabs(wl)));
        }
      }
  INFO("max |O - O_ref| = " << worstO << ", max rel LSE error = " << worstLse
                            << ", empty rows = " << emptyRows);
  CHECK(worstO <= tol);
  CHECK(worstLse <= 1e-4);
}

/// Rows of a masked-values check (compareAttendedRows).
struct AttendedRows {
  int64_t clean = 0;    ///< rows whose reference O and LSE are finite
  int64_t poisoned = 0; ///< rows that attend a NaN or Inf (reference)
};

/// The rule "a row's result depends only on the keys it attends" (README,
/// "Masked keys are isolated") on GPU outputs \p o and \p lse
/// ([batch, heads, sq, *]) computed with NaN or Inf at some keys: \p want
/// is the float64 reference on the same inputs, which skips keys a row does
/// not attend, so a row whose reference is finite must match it (O within
/// tolerance(dtype), LSE within 1e-4 relative; rows with no allowed key
/// exactly O = 0 and LSE = -inf) and a row whose reference is not finite
/// (it attends a NaN or Inf) must have a non-finite O element (the value
/// reaches the row). Returns the counts of both kinds of rows.
inline AttendedRows compareAttendedRows(const AttentionSpec &spec,
                                        const GpuTensor &o,
                                        const GpuTensor &lse,
                                        ReferenceOutput &want, int64_t batch,
                                        int64_t sq) {
  AttendedRows rows;
  const double tol = tolerance(spec.dtypeO);
  double worstO = 0, worstLse = 0;
  int64_t failures = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < spec.headsQ; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        double wl = want.lseAt(b, h, i);
        bool finite = !std::isnan(wl) && !(std::isinf(wl) && wl > 0);
        for (int64_t d = 0; d < spec.headDimV; ++d)
          finite = finite && std::isfinite(want.oAt(b, h, i, d));
        if (!finite) {
          ++rows.poisoned;
          bool reached = false;
          for (int64_t d = 0; d < spec.headDimV; ++d)
            reached = reached || !std::isfinite(o.at(b, h, i, d));
          if (!reached && failures++ < 5)
            FAIL_CHECK("row " << b << "," << h << "," << i
                              << " attends a NaN or Inf but its O is finite");
          continue;
        }
        ++rows.clean;
        bool empty = std::isinf(wl);
        for (int64_t d = 0; d < spec.headDimV; ++d) {
          float got = o.at(b, h, i, d);
          double w = want.oAt(b, h, i, d);
          if (!std::isfinite(got) || (empty && got != 0.0f)) {
            if (failures++ < 5)
              FAIL_CHECK("o[" << b << "," << h << "," << i << "," << d
                              << "] = " << got << ", want " << w
                              << " (the row attends no NaN or Inf)");
            break;
          }
          worstO = std::max(worstO, std::fabs(got - w));
        }
        if (!spec.returnLse)
          continue;
        float gl = lse.at(b, h, i);
        if (empty ? !(std::isinf(gl) && gl < 0) : !std::isfinite(gl)) {
          if (failures++ < 5)
            FAIL_CHECK("lse[" << b << "," << h << "," << i << "] = " << gl
                              << ", want " << wl);
          continue;
        }
        if (!empty)
          worstLse = std::max(worstLse, std::fabs(gl - wl) /
                                            std::max(1.0, std::fabs(wl)));
      }
  INFO("max |O - O_ref| = " << worstO << ", max rel LSE error = " << worstLse
                            << " over " << rows.clean << " clean rows ("
                            << rows.poisoned << " attend a NaN or Inf)");
  CHECK(worstO <= tol);
  CHECK(worstLse <= 1e-4);
  return rows;
}

/// Runs one spec at one shape on the GPU and the CPU and compares.
template <class Run>
void checkShape(Device &dev, Run &&run, const AttentionSpec &spec,
                int64_t batch, int64_t sq, int64_t sk, int layout,
                uint64_t seed) {
  INFO("batch " << batch << ", seqlen_q " << sq << ", seqlen_k " << sk
                << ", layout " << layout);
  std::mt19937_64 rng(seed);
  const int64_t hq = spec.headsQ, hkv = spec.headsKV;
  GpuTensor q(dev, spec.dtypeQ, {batch, hq, sq, spec.headDimQK}, 4,
              layout == 1);
  GpuTensor k(dev, spec.dtypeK, {batch, hkv, sk, spec.headDimQK}, 4, false,
              layout == 2 ? 8 : 0);
  GpuTensor v(dev, spec.dtypeV, {batch, hkv, sk, spec.headDimV}, 4,
              layout == 2);
  GpuTensor o(dev, spec.dtypeO, {batch, hq, sq, spec.headDimV}, 4, layout == 1,
              layout == 2 ? 3 : 0);
  GpuTensor lse(dev, DType::F32, {batch, hq, sq, 1}, 3);
  q.randomize(rng, 2.0f);
  k.randomize(rng, 2.0f);
  v.randomize(rng);
  o.poison();
  lse.poison();
  VariantArgs args(dev, spec, sq, sk);

  const std::string shape = "batch " + std::to_string(batch) + " seqlen_q " +
                            std::to_string(sq) + " seqlen_k " +
                            std::to_string(sk);
  progress("launch " + shape);
  run(q.deviceRef, k.deviceRef, v.deviceRef, o.deviceRef,
      spec.returnLse ? &lse.deviceRef : nullptr, args.device);
  o.download();
  lse.download();
  progress("returned " + shape);
  ReferenceOutput want =
      referenceAttention(spec, q.hostRef, k.hostRef, v.hostRef, args.host);
  progress("reference done " + shape);

  compareOutputs(spec, o, lse, want, batch, sq);
}

/// A run callable for checkShape() from anything with run(q, k, v, o, lse*,
/// args) (NvrtcReference, GpuAttentionKernel).
template <class K> auto runWith(K &kernel) {
  return
      [&kernel](const TensorRef &q, const TensorRef &k, const TensorRef &v,
                const TensorRef &o, const TensorRef *lse,
                const Arguments &args) { kernel.run(q, k, v, o, lse, args); };
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_GPU_GPUTESTSUPPORT_H
