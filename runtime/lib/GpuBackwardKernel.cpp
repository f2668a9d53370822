//===- GpuBackwardKernel.cpp - Running the generated GPU backward ---------===//
//
// GpuAttentionBackwardKernel (flashjit/runtime/AttentionKernel.h): checks
// the caller's tensors and launches the three backward kernels (pre, main,
// post) of one spec. The forward launcher is in AttentionKernel.cpp.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/AttentionKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Launch.h"

#include "Check.h"
#include "GpuTensorChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace flashjit::runtime {

using detail::checkFixedArgs;
using detail::requireAligned;
using detail::requireUnitInner;

GpuAttentionBackwardKernel::GpuAttentionBackwardKernel(AttentionSpec spec,
                                                       GpuKernelInfo info,
                                                       std::string_view ptx,
                                                       Device &device)
    : spec_(std::move(spec)), info_(std::move(info)), device_(&device) {
  std::string arch = device.properties().arch();
  if (!info_.config.arch.empty() && info_.config.arch != arch &&
      !(info_.config.arch == "sm_80" && arch >= std::string("sm_80")))
    throw UserError(fmt::format("kernel '{}' was generated for {}, but the "
                                "device is {}",
                                info_.name, info_.config.arch, arch));
  if (info_.config.blockM() <= 0 || info_.config.blockN <= 0)
    throw UserError(fmt::format("backward kernel '{}': GpuKernelInfo blockM "
                                "= {} (keys per CTA) and blockN = {} (query "
                                "rows per tile) must be positive",
                                info_.name, info_.config.blockM(),
                                info_.config.blockN));
  module_ = Module::fromPtx(device, ptx);
  pre_ = module_.function(info_.name + abi::gpu::kBackwardPreSuffix);
  main_ = module_.function(info_.name + abi::gpu::kBackwardMainSuffix);
  post_ = module_.function(info_.name + abi::gpu::kBackwardPostSuffix);
  main_.setMaxDynamicSharedBytes(info_.sharedBytes);
  size_t buffers = spec_.variant.buffers().size();
  if (buffers)
    status_ = DeviceBuffer(device, buffers * sizeof(int32_t));
}

DataGradients GpuAttentionBackwardKernel::run(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const Arguments &args, CUstream stream) const {
  AttentionShape s = checkAttentionTensors(spec_, q, k, v, &o, &lse);
  // dO has o's shape and dtype; dq, dk, dv those of q, k, v.
  AttentionShape sg = checkAttentionTensors(spec_, q, k, v, &dO);
  AttentionShape sd = checkAttentionTensors(spec_, dq, dk, dv);
  if (sd.batch != s.batch || sd.seqlenQ != s.seqlenQ || sd.seqlenK != s.seqlenK)
    throw UserError(fmt::format(
        "dq/dk/dv have batch {}, seqlen_q {}, seqlen_k {}; q/k/v have {}, {}, "
        "{}",
        sd.batch, sd.seqlenQ, sd.seqlenK, s.batch, s.seqlenQ, s.seqlenK));
  (void)sg;
  args.validateFor(spec_.variant);
  for (auto [name, t] :
       {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v},
        std::pair{"o", &o}, std::pair{"dO", &dO}, std::pair{"dq", &dq},
        std::pair{"dk", &dk}, std::pair{"dv", &dv}})
    requireUnitInner(name, *t);
  requireAligned("q", q, 16, 8);
  requireAligned("k", k, 16, 8);
  requireAligned("v", v, 16, 8);
  requireAligned("dO", dO, 16, 8);
  requireAligned("o", o, 4, 2);
  requireAligned("dq", dq, 4, 2);
  requireAligned("dk", dk, 4, 2);
  requireAligned("dv", dv, 4, 2);
  requireAligned("lse", lse, 4, 1);
  constexpr int64_t kMaxGridYZ = 65535;
  if (s.batch > kMaxGridYZ || s.headsQ > kMaxGridYZ)
    throw UserError(fmt::format("batch = {} / heads_q = {}: at most {} (grid "
                                "y, z)",
                                s.batch, s.headsQ, kMaxGridYZ));
  if (s.seqlenQ > std::numeric_limits<int32_t>::max() ||
      s.seqlenK > std::numeric_limits<int32_t>::max())
    throw UserError(fmt::format("seqlen_q = {} / seqlen_k = {}: at most "
                                "2^31 - 1 positions",
                                s.seqlenQ, s.seqlenK));
  // The gradient arrays: every f32 buffer (its size), then one float per
  // parameter (sorted by name, as the kernel arguments).
  const std::vector<BufferDecl> buffers = spec_.variant.buffers();
  const std::vector<ParamDecl> params = spec_.variant.params();
  std::vector<int64_t> gradOffset;
  int64_t gradFloats = 0;
  for (const BufferDecl &b : buffers) {
    gradOffset.push_back(gradFloats);
    if (b.elementType == ScalarType::Float32)
      gradFloats += args.buffers.at(b.name).size;
  }
  const int64_t paramOffset = gradFloats;
  gradFloats += static_cast<int64_t>(params.size());
  DataGradients out;
  auto collect = [&](const std::vector<float> &host) {
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].elementType == ScalarType::Float32) {
        auto from = host.begin() + gradOffset[i];
        out.dBuffers[buffers[i].name].assign(
            from, from + args.buffers.at(buffers[i].name).size);
      }
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].type == ScalarType::Float32)
        out.dParams[params[i].name] = host[paramOffset + int64_t(i)];
  };
  if (s.batch == 0 || s.headsQ == 0) {
    collect(std::vector<float>(gradFloats, 0.0f));
    return out;
  }

  device_->makeCurrent();
  std::lock_guard<std::mutex> lock(mutex_);
  if (gradFloats > 0) {
    size_t bytes = static_cast<size_t>(gradFloats) * 4;
    if (grads_.size() < bytes)
      grads_ = DeviceBuffer(*device_, bytes);
    grads_.fill(0);
  }
  size_t rows = static_cast<size_t>(s.batch * s.headsQ * s.seqlenQ);
  size_t accBytes = rows * static_cast<size_t>(spec_.headDimQK) * 4;
  if (accum_.size() < accBytes)
    accum_ = DeviceBuffer(*device_, accBytes);
  if (delta_.size() < rows * 4)
    delta_ = DeviceBuffer(*device_, rows * 4);
  bool hasBuffers = !spec_.variant.buffers().empty();
  if (hasBuffers)
    status_.fill(0);

  KernelArgs a;
  const TensorRef *ts[abi::gpu::kBackwardStridedTensors] = {
      &q, &k, &v, &o, &dO, &lse, &dq, &dk, &dv};
  for (const TensorRef *t : ts)
    a.add(t->data);
  a.add(reinterpret_cast<void *>(accum_.ptr()))
      .add(reinterpret_cast<void *>(delta_.ptr()))
      .add(reinterpret_cast<void *>(status_.ptr()));
  for (const TensorRef *t : ts)
    a.add(t->strides[0]).add(t->strides[1]).add(t->strides[2]);
  a.add(static_cast<int32_t>(s.seqlenQ)).add(static_cast<int32_t>(s.seqlenK));
  a.add(static_cast<int32_t>(s.headsQ / s.headsKV));
  float scale = spec_.effectiveScale();
  a.add(scale).add(static_cast<float>(scale * 1.4426950408889634));
  checkFixedArgs(a, abi::gpu::backwardArgTypes(), info_.name);
  // addVariantArgs of the forward, for this spec.
  for (const ParamDecl &p : spec_.variant.params()) {
    const Scalar &val = args.params.at(p.name);
    if (p.type == ScalarType::Int32)
      a.add(static_cast<int32_t>(val.intValue));
    else if (p.type == ScalarType::Int64)
      a.add(static_cast<int64_t>(val.intValue));
    else
      a.add(val.floatValue);
  }
  for (const BufferDecl &b : buffers) {
    const BufferRef &ref = args.buffers.at(b.name);
    a.add(ref.data).add(static_cast<int64_t>(ref.size));
  }
  // The gradient arrays (KernelAbi.h): per buffer (null unless f32), then
  // the parameters' when there are any.
  auto gradPtr = [&](int64_t at) -> void * {
    return reinterpret_cast<void *>(grads_.ptr() + static_cast<size_t>(at) * 4);
  };
  for (size_t i = 0; i < buffers.size(); ++i)
    a.add(buffers[i].elementType == ScalarType::Float32 ? gradPtr(gradOffset[i])
                                                        : nullptr);
  if (!params.empty())
    a.add(gradPtr(paramOffset));

  LaunchConfig rowCfg;
  rowCfg.grid = {
      static_cast<unsigned>((s.seqlenQ + abi::gpu::kBackwardRowsPerCta - 1) /
                            abi::gpu::kBackwardRowsPerCta),
      static_cast<unsigned>(s.headsQ), static_cast<unsigned>(s.batch)};
  rowCfg.block = {static_cast<unsigned>(abi::gpu::kBackwardRowThreads), 1, 1};
  rowCfg.stream = stream;
  if (s.seqlenQ > 0)
    launch(pre_, rowCfg, a);
  if (s.seqlenK > 0) {
    LaunchConfig cfg;
    cfg.grid = {static_cast<unsigned>((s.seqlenK + info_.config.blockM() - 1) /
                                      info_.config.blockM()),
                static_cast<unsigned>(s.headsKV),
                static_cast<unsigned>(s.batch)};
    cfg.block = {static_cast<unsigned>(info_.config.threads()), 1, 1};
    cfg.dynamicSharedBytes = static_cast<unsigned>(info_.sharedBytes);
    cfg.stream = stream;
    launch(main_, cfg, a);
  }
  if (s.seqlenQ > 0)
    launch(post_, rowCfg, a);
  if (hasBuffers || gradFloats > 0)
    FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream));
  if (hasBuffers) {
    std::vector<int32_t> flags(buffers.size());
    status_.copyToHost(flags.data(), flags.size() * sizeof(int32_t));
    for (size_t i = 0; i < buffers.size(); ++i)
      if (flags[i])
        throw UserError(fmt::format("buffer '{}' was read (or its gradient "
                                    "written) outside [0, {}); the gradients "
                                    "of this run are unspecified",
                                    buffers[i].name,
                                    args.buffers.at(buffers[i].name).size));
  }
  std::vector<float> host(static_cast<size_t>(gradFloats));
  if (gradFloats > 0)
    grads_.copyToHost(host.data(), host.size() * 4);
  collect(host);
  return out;
}

} // namespace flashjit::runtime
