//===- PagedOps.cpp - State merging and paged-cache appends on the GPU ----===//
#include "flashjit/runtime/PagedOps.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Nvrtc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>

namespace flashjit::runtime {

namespace {

// Merge: one warp per (batch, head, row); every lane reads the n LSEs, then
// lane l takes columns l, l + 32, ...; the LSE is written after a warp sync,
// so an output that is one of the inputs is read whole before it is
// written. Append: one CTA per (new token, kv head, sequence), threads over
// the head dim, copying elements bit for bit. Element types: 0 fp16,
// 1 bf16, 2 fp32 (bytes 2, 2, 4). Accumulate: a grid-stride loop over the
// elements in row-major order, each one read, added in fp32 and stored.
constexpr const char *kSource = R"cuda(
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define FJ_MAX_STATES 32

struct FjState {
  const void *o;
  const float *lse;
  long long os[4];
  long long ls[3];
  int dtype;
};

struct FjStates {
  FjState s[FJ_MAX_STATES];
};

__device__ __forceinline__ double fjLoad(const void *p, long long i, int t) {
  if (t == 0)
    return __half2float(static_cast<const __half *>(p)[i]);
  if (t == 1)
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  return static_cast<const float *>(p)[i];
}

__device__ __forceinline__ void fjStore(void *p, long long i, int t,
                                        double v) {
  if (t == 0)
    static_cast<__half *>(p)[i] = __float2half_rn(float(v));
  else if (t == 1)
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(float(v));
  else
    static_cast<float *>(p)[i] = float(v);
}

extern "C" __global__ void __launch_bounds__(128)
flashjit_merge_states(const FjStates states, int n, void *o, float *lse,
                      const float *sink, long long o0, long long o1,
                      long long o2, long long o3, long long l0, long long l1,
                      long long l2, int odtype, long long batch,
                      long long heads, long long rows, long long dim) {
  const long long r = (long long)blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= batch * heads * rows)
    return;
  const long long b = r / (heads * rows), h = (r / rows) % heads,
                  i = r % rows;
  const double inf = __longlong_as_double(0x7ff0000000000000LL);
  const double sk = sink ? double(sink[h]) : -inf;
  double m = sk;
  bool nan = sk != sk || sk == inf;
  for (int s = 0; s < n; ++s) {
    const FjState &st = states.s[s];
    const double w = st.lse[b * st.ls[0] + h * st.ls[1] + i * st.ls[2]];
    if (w != w || w == inf)
      nan = true;
    else
      m = fmax(m, w);
  }
  double l = -inf;
  if (nan) {
    l = __longlong_as_double(0x7ff8000000000000LL);
  } else if (m != -inf) {
    double sum = sk == -inf ? 0.0 : exp(sk - m);
    for (int s = 0; s < n; ++s) {
      const FjState &st = states.s[s];
      const double w = st.lse[b * st.ls[0] + h * st.ls[1] + i * st.ls[2]];
      if (w != -inf)
        sum += exp(w - m);
    }
    l = m + log(sum);
  }
  for (long long d = lane; d < dim; d += 32) {
    double acc = 0.0;
    if (nan) {
      acc = l;
    } else if (l != -inf) {
      for (int s = 0; s < n; ++s) {
        const FjState &st = states.s[s];
        const double w = st.lse[b * st.ls[0] + h * st.ls[1] + i * st.ls[2]];
        if (w == -inf)
          continue; // no weight; O is not read (it may be garbage)
        acc += exp(w - l) * fjLoad(st.o,
                                   b * st.os[0] + h * st.os[1] +
                                       i * st.os[2] + d * st.os[3],
                                   st.dtype);
      }
    }
    fjStore(o, b * o0 + h * o1 + i * o2 + d * o3, odtype, acc);
  }
  __syncwarp();
  if (lane == 0)
    lse[b * l0 + h * l1 + i * l2] = float(l);
}

extern "C" __global__ void __launch_bounds__(256)
flashjit_accumulate(const void *src, int stype, long long s0, long long s1,
                    long long s2, long long s3, void *dst, int dtype,
                    long long d0, long long d1, long long d2, long long d3,
                    int add, long long n0, long long n1, long long n2,
                    long long n3) {
  const long long n = n0 * n1 * n2 * n3;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (long long)gridDim.x * blockDim.x) {
    const long long a = e / (n1 * n2 * n3), b = (e / (n2 * n3)) % n1,
                    c = (e / n3) % n2, d = e % n3;
    const long long so = a * s0 + b * s1 + c * s2 + d * s3;
    const long long dof = a * d0 + b * d1 + c * d2 + d * d3;
    float v = float(fjLoad(src, so, stype));
    if (add)
      v = float(fjLoad(dst, dof, dtype)) + v; // one fp32 addition
    fjStore(dst, dof, dtype, v);
  }
}

extern "C" __global__ void __launch_bounds__(128)
flashjit_paged_append(const char *kNew, const char *vNew, char *kCache,
                      char *vCache, const int *pages, const int *pageStart,
                      const int *seqLens, long long kn0, long long kn1,
                      long long kn2, long long kn3, long long vn0,
                      long long vn1, long long vn2, long long vn3,
                      long long kc0, long long kc1, long long kc2,
                      long long kc3, long long vc0, long long vc1,
                      long long vc2, long long vc3, long long dk,
                      long long dv, int kBytes, int vBytes, int pageShift,
                      int numPages) {
  const long long i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const long long nNew = gridDim.x;
  const long long pos = seqLens[b] - nNew + i;
  if (pos < 0)
    return;
  const long long entry = pos >> pageShift;
  const int page = pages[pageStart[b] + entry];
  if (page < 0 || page >= numPages)
    return; // checked on the host; never written out of range
  const long long slot = pos - (entry << pageShift);
  for (long long d = threadIdx.x; d < dk; d += blockDim.x) {
    const char *src = kNew + (b * kn0 + h * kn1 + i * kn2 + d * kn3) * kBytes;
    char *dst = kCache + (page * kc0 + h * kc1 + slot * kc2 + d * kc3) * kBytes;
    if (kBytes == 2)
      *reinterpret_cast<unsigned short *>(dst) =
          *reinterpret_cast<const unsigned short *>(src);
    else
      *reinterpret_cast<unsigned *>(dst) =
          *reinterpret_cast<const unsigned *>(src);
  }
  for (long long d = threadIdx.x; d < dv; d += blockDim.x) {
    const char *src = vNew + (b * vn0 + h * vn1 + i * vn2 + d * vn3) * vBytes;
    char *dst = vCache + (page * vc0 + h * vc1 + slot * vc2 + d * vc3) * vBytes;
    if (vBytes == 2)
      *reinterpret_cast<unsigned short *>(dst) =
          *reinterpret_cast<const unsigned short *>(src);
    else
      *reinterpret_cast<unsigned *>(dst) =
          *reinterpret_cast<const unsigned *>(src);
  }
}
)cuda";

int dtypeCode(DType t) {
  if (isFp8(t)) // the kernels' element switch knows 16/32-bit types only
    throw UserError(fmt::format("dtype = {}: the GPU paged-cache operations "
                                "take fp16, bf16 or fp32 tensors",
                                toString(t)));
  return t == DType::F16 ? 0 : t == DType::BF16 ? 1 : 2;
}

/// The kernel's FjState / FjStates, laid out as in kSource.
struct State {
  const void *o;
  const float *lse;
  long long os[4];
  long long ls[3];
  int dtype;
};
struct States {
  State s[GpuPagedOps::kMaxStates];
};

} // namespace

std::string_view GpuPagedOps::source() { return kSource; }

GpuPagedOps::GpuPagedOps(Device &device) : device_(&device) {
  NvrtcOptions opts;
  opts.arch = device.properties().arch();
  opts.programName = "flashjit_paged_ops.cu";
  std::string ptx = compileCuda(kSource, opts).ptx;
  module_ = Module::fromPtx(device, ptx);
  merge_ = module_.function(kMergeName);
  append_ = module_.function(kAppendName);
  accumulate_ = module_.function(kAccumulateName);
}

void GpuPagedOps::accumulate(const TensorRef &src, const TensorRef &dst,
                             bool add, CUstream stream) const {
  if (src.rank < 1 || src.rank > 4)
    throw UserError(
        fmt::format("accumulate: rank {} outside [1, 4]", src.rank));
  auto dims = [](const TensorRef &t) {
    return std::span(t.shape.data(), size_t(std::clamp(t.rank, 0, 4)));
  };
  if (src.rank != dst.rank || !std::ranges::equal(dims(src), dims(dst)))
    throw UserError(fmt::format("accumulate: src is [{}] but dst [{}] "
                                "(equal shapes required)",
                                fmt::join(dims(src), ", "),
                                fmt::join(dims(dst), ", ")));
  std::array<int64_t, 4> n{1, 1, 1, 1}, ss{0, 0, 0, 0}, ds{0, 0, 0, 0};
  for (int d = 0; d < src.rank; ++d) {
    int at = 4 - src.rank + d; // leading dims of size 1
    n[size_t(at)] = src.shape[size_t(d)];
    ss[size_t(at)] = src.strides[size_t(d)];
    ds[size_t(at)] = dst.strides[size_t(d)];
  }
  const int64_t total = n[0] * n[1] * n[2] * n[3];
  if (total == 0)
    return;
  device_->makeCurrent();
  KernelArgs a;
  a.add(src.data).add(static_cast<int32_t>(dtypeCode(src.dtype)));
  for (int64_t x : ss)
    a.add(static_cast<long long>(x));
  a.add(dst.data).add(static_cast<int32_t>(dtypeCode(dst.dtype)));
  for (int64_t x : ds)
    a.add(static_cast<long long>(x));
  a.add(static_cast<int32_t>(add));
  for (int64_t x : n)
    a.add(static_cast<long long>(x));
  LaunchConfig cfg;
  cfg.grid = {
      static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65536)), 1,
      1};
  cfg.block = {256, 1, 1};
  cfg.stream = stream;
  launch(accumulate_, cfg, a);
}

void GpuPagedOps::mergeStates(const TensorRef &oA, const TensorRef &lseA,
                              const TensorRef &oB, const TensorRef &lseB,
                              const TensorRef &o, const TensorRef &lse,
                              const float *sink, int64_t sinkSize,
                              CUstream stream) const {
  const TensorRef os[] = {oA, oB}, lses[] = {lseA, lseB};
  mergeStates(os, lses, o, lse, sink, sinkSize, stream);
}

void GpuPagedOps::mergeStates(std::span<const TensorRef> os,
                              std::span<const TensorRef> lses,
                              const TensorRef &o, const TensorRef &lse,
                              const float *sink, int64_t sinkSize,
                              CUstream stream) const {
  checkMergeStates(os, lses, o, lse);
  if (os.size() > size_t(kMaxStates))
    throw UserError(fmt::format("merge_states: {} states, the GPU merge takes "
                                "at most {} per call (merge the rest into the "
                                "result)",
                                os.size(), kMaxStates));
  const std::array<int64_t, 4> shape = os[0].shape;
  if (sink ? sinkSize != shape[1] : sinkSize != 0)
    throw UserError(fmt::format("merge_states: sink has {} entries{}, "
                                "expected heads = {}",
                                sinkSize, sink ? "" : " but a null pointer",
                                shape[1]));
  if (reinterpret_cast<uintptr_t>(sink) % 4)
    throw UserError(fmt::format("merge_states: sink = {} is not 4-byte "
                                "aligned (fp32 device memory)",
                                static_cast<const void *>(sink)));
  const int64_t rows = shape[0] * shape[1] * shape[2];
  if (rows == 0)
    return;
  States st{};
  for (size_t i = 0; i < os.size(); ++i) {
    st.s[i].o = os[i].data;
    st.s[i].lse = static_cast<const float *>(lses[i].data);
    for (int d = 0; d < 4; ++d)
      st.s[i].os[d] = os[i].strides[d];
    for (int d = 0; d < 3; ++d)
      st.s[i].ls[d] = lses[i].strides[d];
    st.s[i].dtype = dtypeCode(os[i].dtype);
  }
  if ((rows + 3) / 4 > 0x7fffffff)
    throw UserError(fmt::format("merge_states: {} rows exceed the grid", rows));
  device_->makeCurrent();
  KernelArgs a;
  a.add(st).add(static_cast<int32_t>(os.size()));
  a.add(o.data).add(lse.data).add(static_cast<const void *>(sink));
  for (int d = 0; d < 4; ++d)
    a.add(static_cast<long long>(o.strides[d]));
  for (int d = 0; d < 3; ++d)
    a.add(static_cast<long long>(lse.strides[d]));
  a.add(static_cast<int32_t>(dtypeCode(o.dtype)));
  for (int d = 0; d < 4; ++d)
    a.add(static_cast<long long>(shape[d]));
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>((rows + 3) / 4), 1, 1};
  cfg.block = {128, 1, 1};
  cfg.stream = stream;
  launch(merge_, cfg, a);
}

void GpuPagedOps::append(const TensorRef &kNew, const TensorRef &vNew,
                         const TensorRef &kCache, const TensorRef &vCache,
                         const DevicePageTable &table, CUstream stream) const {
  if (table.isContiguous())
    throw UserError("append: the page table is contiguous "
                    "(DevicePageTable::contiguous); the append helper writes "
                    "into a paged cache (copy into a contiguous cache "
                    "directly)");
  const int64_t nNew =
      checkPagedAppend(kNew, vNew, kCache, vCache, table.hostList());
  const int64_t batch = kNew.shape[0], hk = kNew.shape[1];
  if (nNew == 0 || batch == 0 || hk == 0)
    return;
  if (nNew > 0x7fffffff || hk > 65535 || batch > 65535)
    throw UserError(fmt::format("append: n_new = {}, heads_kv = {}, batch = "
                                "{}: at most 2^31 - 1, 65535, 65535 (grid)",
                                nNew, hk, batch));
  device_->makeCurrent();
  KernelArgs a;
  a.add(kNew.data).add(vNew.data).add(kCache.data).add(vCache.data);
  a.add(reinterpret_cast<void *>(table.pages()))
      .add(reinterpret_cast<void *>(table.pageStart()))
      .add(reinterpret_cast<void *>(table.deviceSeqLens()));
  for (const TensorRef *t : {&kNew, &vNew, &kCache, &vCache})
    for (int d = 0; d < 4; ++d)
      a.add(static_cast<long long>(t->strides[d]));
  a.add(static_cast<long long>(kNew.shape[3]))
      .add(static_cast<long long>(vNew.shape[3]));
  a.add(static_cast<int32_t>(byteSize(kNew.dtype)))
      .add(static_cast<int32_t>(byteSize(vNew.dtype)))
      .add(static_cast<int32_t>(
          std::countr_zero(static_cast<uint64_t>(table.pageSize()))))
      .add(static_cast<int32_t>(table.numPages()));
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(nNew), static_cast<unsigned>(hk),
              static_cast<unsigned>(batch)};
  cfg.block = {128, 1, 1};
  cfg.stream = stream;
  launch(append_, cfg, a);
}

} // namespace flashjit::runtime
