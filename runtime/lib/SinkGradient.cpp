//===- SinkGradient.cpp - d sink of the attention backward on the GPU -----===//
#include "flashjit/runtime/SinkGradient.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Nvrtc.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace flashjit::runtime {

namespace {

// One CTA per query head h; thread t takes rows r = t, t + 256, ... of the
// flattened (batch, row) range, in order, and accumulates in double; the
// 256 partial sums are added by a fixed tree. Element types: 0 fp16,
// 1 bf16, 2 fp32.
constexpr const char *kSource = R"cuda(
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float fjLoad(const void *p, long long i, int t) {
  if (t == 0)
    return __half2float(static_cast<const __half *>(p)[i]);
  if (t == 1)
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  return static_cast<const float *>(p)[i];
}

extern "C" __global__ void __launch_bounds__(256)
flashjit_sink_grad(const void *o, const void *dO, const float *lse,
                   const float *sink, float *dSink, long long batch,
                   long long rows, long long dv, long long os0, long long os1,
                   long long os2, long long ds0, long long ds1, long long ds2,
                   long long ls0, long long ls1, long long ls2, int dtype) {
  __shared__ double part[256];
  const long long h = blockIdx.x;
  const float s = sink[h];
  double acc = 0.0;
  if (s != -__int_as_float(0x7f800000)) {
    for (long long r = threadIdx.x; r < batch * rows; r += 256) {
      const long long b = r / rows, i = r % rows;
      const long long oAt = b * os0 + h * os1 + i * os2;
      const long long dAt = b * ds0 + h * ds1 + i * ds2;
      double d = 0.0;
      for (long long e = 0; e < dv; ++e)
        d += double(fjLoad(o, oAt + e, dtype)) *
             double(fjLoad(dO, dAt + e, dtype));
      const float l = lse[b * ls0 + h * ls1 + i * ls2];
      acc -= exp(double(s) - double(l)) * d;
    }
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    dSink[h] = float(part[0]);
}
)cuda";

int dtypeCode(DType t) {
  if (isFp8(t)) // fp8 is an input-only type of the forward
    throw UserError(fmt::format("dtype = {}: the sink gradient takes fp16, "
                                "bf16 or fp32 tensors",
                                toString(t)));
  return t == DType::F16 ? 0 : t == DType::BF16 ? 1 : 2;
}

} // namespace

std::string_view GpuSinkGradient::source() { return kSource; }

GpuSinkGradient::GpuSinkGradient(Device &device) : device_(&device) {
  NvrtcOptions opts;
  opts.arch = device.properties().arch();
  opts.programName = std::string(kKernelName) + ".cu";
  std::string ptx = compileCuda(kSource, opts).ptx;
  module_ = Module::fromPtx(device, ptx);
  function_ = module_.function(kKernelName);
}

void GpuSinkGradient::run(const AttentionSpec &spec, const TensorRef &o,
                          const TensorRef &dO, const TensorRef &lse,
                          const Arguments &args, float *dSink,
                          CUstream stream) const {
  if (!spec.sink)
    throw UserError(fmt::format("GpuSinkGradient: spec '{}' has no sink",
                                spec.variant.name()));
  args.validateSinkFor(spec, /*hostValues=*/false);
  if (!dSink)
    throw UserError("GpuSinkGradient: dSink is null");
  // Dense [B, Hq, Sq, Dv] / [B, Hq, Sq], or varlen [total, Hq, Dv] /
  // [Hq, total] seen as batch 1.
  const bool varlen = o.rank == 3;
  if (o.rank != (varlen ? 3 : 4) || dO.rank != o.rank || lse.rank != o.rank - 1)
    throw UserError(fmt::format("GpuSinkGradient: o.rank = {}, dO.rank = {}, "
                                "lse.rank = {}: expected 4, 4, 3 (varlen 3, "
                                "3, 2)",
                                o.rank, dO.rank, lse.rank));
  const int hAxis = 1, dAxis = varlen ? 2 : 3;
  for (const auto &[name, t] :
       {std::pair<const char *, const TensorRef *>{"o", &o}, {"dO", &dO}}) {
    if (t->dtype != spec.dtypeO)
      throw UserError(fmt::format("GpuSinkGradient: {}.dtype = {}, expected "
                                  "{} (dtype_o)",
                                  name, toString(t->dtype),
                                  toString(spec.dtypeO)));
    if (t->shape[hAxis] != spec.headsQ || t->shape[dAxis] != spec.headDimV ||
        t->strides[dAxis] != 1)
      throw UserError(fmt::format("GpuSinkGradient: {} must have heads_q = {} "
                                  "heads, head_dim_v = {} and head_dim "
                                  "stride 1",
                                  name, spec.headsQ, spec.headDimV));
  }
  if (lse.dtype != DType::F32)
    throw UserError("GpuSinkGradient: lse must be fp32");
  const int64_t batch = varlen ? 1 : o.shape[0];
  const int64_t rows = varlen ? o.shape[0] : o.shape[2];
  if (dO.shape != o.shape ||
      (varlen ? lse.shape[0] != spec.headsQ || lse.shape[1] != rows
              : lse.shape[0] != batch || lse.shape[1] != spec.headsQ ||
                    lse.shape[2] != rows))
    throw UserError("GpuSinkGradient: dO must have o's shape and lse "
                    "[batch, heads_q, seqlen_q] (varlen [heads_q, total_q])");
  // Strides (batch, head, row) of each tensor.
  int64_t os[3], ds[3], ls[3];
  if (varlen) {
    os[0] = 0, os[1] = o.strides[1], os[2] = o.strides[0];
    ds[0] = 0, ds[1] = dO.strides[1], ds[2] = dO.strides[0];
    ls[0] = 0, ls[1] = lse.strides[0], ls[2] = lse.strides[1];
  } else {
    for (int i = 0; i < 3; ++i) {
      os[i] = o.strides[i];
      ds[i] = dO.strides[i];
      ls[i] = lse.strides[i];
    }
  }
  device_->makeCurrent();
  KernelArgs a;
  a.add(o.data).add(dO.data).add(lse.data).add(args.sink.data);
  a.add(static_cast<void *>(dSink));
  a.add(batch).add(rows).add(int64_t(spec.headDimV));
  for (const int64_t *s : {os, ds, ls})
    a.add(s[0]).add(s[1]).add(s[2]);
  a.add(static_cast<int32_t>(dtypeCode(spec.dtypeO)));
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(spec.headsQ), 1, 1};
  cfg.block = {kThreads, 1, 1};
  cfg.stream = stream;
  launch(function_, cfg, a);
}

} // namespace flashjit::runtime
