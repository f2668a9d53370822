//===- AttentionKernel.cpp - Running generated attention kernels ----------===//
#include "flashjit/runtime/AttentionKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Launch.h"

#include "Check.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace flashjit::runtime {

GpuAttentionKernel::GpuAttentionKernel(AttentionSpec spec, GpuKernelInfo info,
                                       std::string_view ptx, Device &device,
                                       std::string_view cubin)
    : spec_(std::move(spec)), info_(std::move(info)), device_(&device) {
  std::string arch = device.properties().arch();
  if (!info_.arch.empty() && info_.arch != arch &&
      !(info_.arch == "sm_80" && arch >= std::string("sm_80")))
    throw UserError(fmt::format("kernel '{}' was generated for {}, but the "
                                "device is {}",
                                info_.name, info_.arch, arch));
  bool loaded = false;
  if (!cubin.empty() && info_.arch == arch) {
    try {
      module_ = Module::fromCubin(device, cubin.data(), cubin.size());
      loaded = true;
    } catch (const DriverError &) {
      // A cubin the driver refuses (another toolkit, damaged): use the PTX.
    }
  }
  fromCubin_ = loaded;
  if (!loaded)
    module_ = Module::fromPtx(device, ptx);
  function_ = module_.function(info_.name);
  function_.setMaxDynamicSharedBytes(info_.sharedBytes);
  size_t buffers = spec_.variant.buffers().size();
  if (buffers)
    status_ = DeviceBuffer(device, buffers * sizeof(int32_t));
}

namespace {
void requireAligned(const char *name, const TensorRef &t, int bytes,
                    int strideElems) {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes)
    throw UserError(fmt::format("{}.data = {} is not {}-byte aligned (the "
                                "GPU kernel loads {}-byte vectors)",
                                name, t.data, bytes, bytes));
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.shape[i] > 1 && t.strides[i] % strideElems)
      throw UserError(fmt::format("{}.strides[{}] = {} is not a multiple of "
                                  "{} elements (rows must stay {}-byte "
                                  "aligned)",
                                  name, i, t.strides[i], strideElems, bytes));
}

void requireUnitInner(const char *name, const TensorRef &t) {
  if (t.shape[3] > 1 && t.strides[3] != 1)
    throw UserError(fmt::format("{}.strides[3] = {}: the GPU kernel needs "
                                "head_dim contiguous (stride 1)",
                                name, t.strides[3]));
}
} // namespace

void GpuAttentionKernel::run(const TensorRef &q, const TensorRef &k,
                             const TensorRef &v, const TensorRef &o,
                             const TensorRef *lse, const Arguments &args,
                             CUstream stream) const {
  if (spec_.returnLse && !lse)
    throw UserError("lse is required: the spec returns LSE (lse=true)");
  AttentionShape s = checkAttentionTensors(spec_, q, k, v, &o,
                                           spec_.returnLse ? lse : nullptr);
  args.validateFor(spec_.variant);
  requireUnitInner("q", q);
  requireUnitInner("k", k);
  requireUnitInner("v", v);
  requireUnitInner("o", o);
  requireAligned("q", q, 16, 8);
  requireAligned("k", k, 16, 8);
  requireAligned("v", v, 16, 8);
  requireAligned("o", o, 4, 2);
  if (spec_.returnLse)
    requireAligned("lse", *lse, 4, 1);
  constexpr int64_t kMaxGridYZ = 65535;
  if (s.batch > kMaxGridYZ)
    throw UserError(
        fmt::format("batch = {} exceeds {} (grid z)", s.batch, kMaxGridYZ));
  if (s.headsQ > kMaxGridYZ)
    throw UserError(
        fmt::format("heads_q = {} exceeds {} (grid y)", s.headsQ, kMaxGridYZ));
  if (s.seqlenQ > std::numeric_limits<int32_t>::max() ||
      s.seqlenK > std::numeric_limits<int32_t>::max())
    throw UserError(fmt::format("seqlen_q = {} / seqlen_k = {}: at most "
                                "2^31 - 1 positions",
                                s.seqlenQ, s.seqlenK));
  if (s.batch == 0 || s.seqlenQ == 0 || s.headsQ == 0)
    return; // nothing to write

  device_->makeCurrent();
  std::unique_lock<std::mutex> lock(statusMutex_, std::defer_lock);
  std::vector<BufferDecl> buffers = spec_.variant.buffers();
  if (!buffers.empty()) {
    lock.lock(); // the status flags are shared by concurrent runs
    status_.fill(0);
  }

  KernelArgs a;
  a.add(q.data).add(k.data).add(v.data).add(o.data);
  a.add(spec_.returnLse ? lse->data : nullptr);
  a.add(reinterpret_cast<void *>(status_.ptr()));
  for (const TensorRef *t : {&q, &k, &v, &o})
    a.add(t->strides[0]).add(t->strides[1]).add(t->strides[2]);
  if (spec_.returnLse)
    a.add(lse->strides[0]).add(lse->strides[1]).add(lse->strides[2]);
  else
    a.add(int64_t(0)).add(int64_t(0)).add(int64_t(0));
  a.add(static_cast<int32_t>(s.seqlenQ)).add(static_cast<int32_t>(s.seqlenK));
  a.add(static_cast<int32_t>(s.headsQ / s.headsKV));
  float scale = spec_.effectiveScale();
  a.add(scale).add(static_cast<float>(scale * 1.4426950408889634));
  for (const ParamDecl &p : spec_.variant.params()) {
    const Scalar &val = args.params.at(p.name);
    switch (p.type) {
    case ScalarType::Int32:
      a.add(static_cast<int32_t>(val.intValue));
      break;
    case ScalarType::Int64:
      a.add(static_cast<int64_t>(val.intValue));
      break;
    default:
      a.add(val.floatValue);
      break;
    }
  }
  for (const BufferDecl &b : buffers) {
    const BufferRef &ref = args.buffers.at(b.name);
    a.add(ref.data).add(static_cast<int64_t>(ref.size));
  }

  LaunchConfig cfg;
  cfg.grid = {
      static_cast<unsigned>((s.seqlenQ + info_.blockM - 1) / info_.blockM),
      static_cast<unsigned>(s.headsQ), static_cast<unsigned>(s.batch)};
  cfg.block = {static_cast<unsigned>(info_.threads), 1, 1};
  cfg.dynamicSharedBytes = static_cast<unsigned>(info_.sharedBytes);
  cfg.stream = stream;
  launch(function_, cfg, a);

  if (!buffers.empty()) {
    FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream));
    std::vector<int32_t> flags(buffers.size());
    status_.copyToHost(flags.data(), flags.size() * sizeof(int32_t));
    for (size_t i = 0; i < buffers.size(); ++i)
      if (flags[i])
        throw UserError(fmt::format("buffer '{}' was read outside [0, {}); "
                                    "the outputs of this run are unspecified",
                                    buffers[i].name,
                                    args.buffers.at(buffers[i].name).size));
  }
}

} // namespace flashjit::runtime
