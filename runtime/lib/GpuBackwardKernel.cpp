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

#include "BufferCheck.h"
#include "Check.h"
#include "GpuTensorChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
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
  // Nothing read from disk may launch with a configuration the module does
  // not declare.
  if (std::string why = gpuLaunchConfigMismatch(spec_, info_, ptx);
      !why.empty())
    throw UserError(fmt::format("backward kernel '{}': its launch "
                                "configuration does not match its PTX: {}",
                                info_.name, why));
  module_ = Module::fromPtx(device, ptx);
  pre_ = module_.function(info_.name + abi::gpu::kBackwardPreSuffix);
  main_ = module_.function(info_.name + abi::gpu::kBackwardMainSuffix);
  post_ = module_.function(info_.name + abi::gpu::kBackwardPostSuffix);
  if (info_.config.blockSparse)
    transpose_ = module_.function(info_.name + abi::gpu::kBackwardMaskSuffix);
  main_.setMaxDynamicSharedBytes(info_.sharedBytes);
  size_t buffers = spec_.variant.buffers().size();
  if (buffers)
    status_ = DeviceBuffer(device, buffers * sizeof(int32_t));
  reads_ = BufferReads::of(spec_.variant, /*backward=*/true);
}

/// The launch-level facts of one backward call, dense or varlen.
struct GpuAttentionBackwardKernel::BackwardCall {
  /// q, k, v, o, dO, lse, dq, dk, dv (abi::gpu::BackwardArg order).
  const TensorRef *t[abi::gpu::kBackwardStridedTensors] = {};
  /// (batch, head, seq) element strides of each.
  int64_t strides[abi::gpu::kBackwardStridedTensors][3] = {};
  /// Sequence lengths (varlen: the longest), sequences, heads; query rows
  /// of the fp32 workspaces (batch * seqlen_q, varlen total_q).
  int64_t seqlenQ = 0, seqlenK = 0, batch = 0, headsQ = 0, headsKV = 0;
  int64_t rowsQ = 0;
  const DeviceCuSeqlens *cu = nullptr;
  /// block-sparse: the forward's block mask (checked against the call).
  const DeviceBlockMask *mask = nullptr;
};

namespace {
/// The alignment and contiguity rules of run() and runVarlen().
void checkBackwardLayout(const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, const TensorRef &o,
                         const TensorRef &lse, const TensorRef &dO,
                         const TensorRef &dq, const TensorRef &dk,
                         const TensorRef &dv) {
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
}
} // namespace

DataGradients GpuAttentionBackwardKernel::run(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const Arguments &args, CUstream stream) const {
  return run(q, k, v, o, lse, dO, dq, dk, dv, args, GpuBackwardOptions{},
             stream);
}

DataGradients GpuAttentionBackwardKernel::run(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const Arguments &args, const GpuBackwardOptions &options,
    CUstream stream) const {
  if (info_.config.varlen)
    throw UserError(fmt::format("run: backward kernel '{}' was compiled "
                                "varlen; use runVarlen",
                                info_.name));
  if (info_.config.blockSparse)
    throw UserError(fmt::format("run: backward kernel '{}' was compiled "
                                "block-sparse; use runBlockSparse",
                                info_.name));
  return runDense(q, k, v, o, lse, dO, dq, dk, dv, nullptr, args, options,
                  stream);
}

DataGradients GpuAttentionBackwardKernel::runBlockSparse(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const DeviceBlockMask &blockMask, const Arguments &args,
    const GpuBackwardOptions &options, CUstream stream) const {
  if (!info_.config.blockSparse || info_.config.varlen)
    throw UserError(fmt::format(
        "runBlockSparse: backward kernel '{}' was compiled {}; use {}",
        info_.name, info_.config.varlen ? "varlen" : "without block_sparse",
        info_.config.varlen ? "runVarlen" : "run"));
  return runDense(q, k, v, o, lse, dO, dq, dk, dv, &blockMask, args, options,
                  stream);
}

DataGradients GpuAttentionBackwardKernel::runDense(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const DeviceBlockMask *blockMask, const Arguments &args,
    const GpuBackwardOptions &options, CUstream stream) const {
  // dO has o's shape and dtype; dq, dk, dv those of q, k, v; the outputs
  // dq, dk, dv overlap no input and not each other.
  AttentionShape s =
      checkBackwardTensors(spec_, q, k, v, o, lse, dO, dq, dk, dv);
  args.validateFor(spec_.variant);
  checkBackwardLayout(q, k, v, o, lse, dO, dq, dk, dv);
  BackwardCall c;
  const TensorRef *ts[abi::gpu::kBackwardStridedTensors] = {
      &q, &k, &v, &o, &dO, &lse, &dq, &dk, &dv};
  for (int i = 0; i < abi::gpu::kBackwardStridedTensors; ++i) {
    c.t[i] = ts[i];
    for (int d = 0; d < 3; ++d)
      c.strides[i][d] = ts[i]->strides[d];
  }
  c.seqlenQ = s.seqlenQ;
  c.seqlenK = s.seqlenK;
  c.batch = s.batch;
  c.headsQ = s.headsQ;
  c.headsKV = s.headsKV;
  c.rowsQ = s.batch * s.seqlenQ;
  c.mask = blockMask;
  return launchBackward(c, args, options, stream);
}

DataGradients GpuAttentionBackwardKernel::runVarlen(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const DeviceCuSeqlens &cuSeqlens, const Arguments &args,
    const GpuBackwardOptions &options, CUstream stream) const {
  if (info_.config.blockSparse)
    throw UserError(fmt::format("runVarlen: backward kernel '{}' is "
                                "block-sparse and needs a block mask",
                                info_.name));
  return runPacked(q, k, v, o, lse, dO, dq, dk, dv, cuSeqlens, nullptr, args,
                   options, stream);
}

DataGradients GpuAttentionBackwardKernel::runVarlen(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const DeviceCuSeqlens &cuSeqlens, const DeviceBlockMask &blockMask,
    const Arguments &args, const GpuBackwardOptions &options,
    CUstream stream) const {
  if (!info_.config.blockSparse)
    throw UserError(fmt::format("runVarlen: backward kernel '{}' is not "
                                "block-sparse; pass no block mask",
                                info_.name));
  return runPacked(q, k, v, o, lse, dO, dq, dk, dv, cuSeqlens, &blockMask, args,
                   options, stream);
}

DataGradients GpuAttentionBackwardKernel::runPacked(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const DeviceCuSeqlens &cuSeqlens, const DeviceBlockMask *blockMask,
    const Arguments &args, const GpuBackwardOptions &options,
    CUstream stream) const {
  if (!info_.config.varlen)
    throw UserError(fmt::format("runVarlen: backward kernel '{}' was not "
                                "compiled varlen; use run",
                                info_.name));
  const std::vector<int32_t> &cq = cuSeqlens.hostQ(), &ck = cuSeqlens.hostK();
  // dO has o's shape and dtype; dq, dk, dv those of q, k, v; the outputs
  // dq, dk, dv overlap no input and not each other.
  VarlenShape s = checkVarlenBackwardTensors(spec_, q, k, v, cq, ck, o, lse, dO,
                                             dq, dk, dv);
  args.validateFor(spec_.variant);
  checkBackwardLayout(q, k, v, o, lse, dO, dq, dk, dv);
  BackwardCall c;
  const TensorRef *ts[abi::gpu::kBackwardStridedTensors] = {
      &q, &k, &v, &o, &dO, &lse, &dq, &dk, &dv};
  for (int i = 0; i < abi::gpu::kBackwardStridedTensors; ++i) {
    c.t[i] = ts[i];
    // [total, heads, D]: (batch, head, seq) strides = (unused, [1], [0]);
    // lse [heads, total]: (unused, [0], [1]).
    bool isLse = i == abi::gpu::kBwdLse;
    c.strides[i][1] = ts[i]->strides[isLse ? 0 : 1];
    c.strides[i][2] = ts[i]->strides[isLse ? 1 : 0];
  }
  c.seqlenQ = s.maxSeqlenQ;
  c.seqlenK = s.maxSeqlenK;
  c.batch = s.batch;
  c.headsQ = s.headsQ;
  c.headsKV = s.headsKV;
  c.rowsQ = s.totalQ;
  c.cu = &cuSeqlens;
  c.mask = blockMask;
  return launchBackward(c, args, options, stream);
}

TransposedBlockMask
GpuAttentionBackwardKernel::launchTranspose(const DeviceBlockMask &mask,
                                            CUstream stream) const {
  const KernelConfig &k = info_.config;
  const BlockMask &m = mask.shape();
  // The rule (UserError naming both tile sizes); the extents of the result.
  TransposedBlockMask t;
  checkBackwardBlockTiles(m, k.blockN, k.blockM());
  t.qTile = k.blockN;
  t.kvTile = k.blockM();
  t.batch = m.batch;
  t.heads = m.heads;
  t.numQTiles = (m.seqlenQ + t.qTile - 1) / t.qTile;
  t.numKvTiles = (m.seqlenK + t.kvTile - 1) / t.kvTile;
  int64_t rows = t.batch * t.heads * t.numKvTiles;
  size_t countBytes = static_cast<size_t>(std::max<int64_t>(rows, 1)) * 4;
  size_t indexBytes =
      static_cast<size_t>(std::max<int64_t>(rows * t.numQTiles, 1)) * 4;
  for (int i = 0; i < 5; ++i) {
    size_t want = i % 2 || i == 4 ? indexBytes : countBytes;
    if (qLists_[i].size() < want)
      qLists_[i] = DeviceBuffer(*device_, want);
  }
  if (rows == 0)
    return t;
  constexpr int64_t kMaxGridYZ = 65535;
  if (t.batch > kMaxGridYZ || t.heads > kMaxGridYZ)
    throw UserError(fmt::format("block_mask.batch = {} / heads = {}: at most "
                                "{} (grid y, z)",
                                t.batch, t.heads, kMaxGridYZ));
  KernelArgs a;
  for (CUdeviceptr p : {mask.kvNumBlocks(), mask.kvIndices(),
                        mask.fullKvNumBlocks(), mask.fullKvIndices()})
    a.add(reinterpret_cast<void *>(p));
  for (const DeviceBuffer &l : qLists_)
    a.add(reinterpret_cast<void *>(l.ptr()));
  a.add(static_cast<int32_t>(m.numQTiles))
      .add(static_cast<int32_t>(m.numKvTiles))
      .add(static_cast<int32_t>(m.blockM / t.qTile))
      .add(static_cast<int32_t>(m.blockN))
      .add(static_cast<int32_t>(t.numQTiles));
  checkFixedArgs(a, abi::gpu::backwardMaskArgTypes(), info_.name);
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(t.numKvTiles),
              static_cast<unsigned>(t.heads), static_cast<unsigned>(t.batch)};
  cfg.block = {static_cast<unsigned>(abi::gpu::kBackwardMaskThreads), 1, 1};
  cfg.stream = stream;
  launch(transpose_, cfg, a);
  return t;
}

TransposedBlockMask
GpuAttentionBackwardKernel::transposeOnDevice(const DeviceBlockMask &blockMask,
                                              CUstream stream) const {
  if (!info_.config.blockSparse)
    throw UserError(fmt::format("transposeOnDevice: backward kernel '{}' was "
                                "not compiled block-sparse",
                                info_.name));
  device_->makeCurrent();
  std::lock_guard<std::mutex> lock(mutex_);
  TransposedBlockMask t = launchTranspose(blockMask, stream);
  FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream));
  int64_t rows = t.batch * t.heads * t.numKvTiles;
  std::vector<int32_t> *host[5] = {&t.qNumBlocks, &t.qIndices,
                                   &t.fullQNumBlocks, &t.fullQIndices,
                                   &t.qKeyGroups};
  for (int i = 0; i < 5; ++i) {
    host[i]->assign(i % 2 || i == 4 ? rows * t.numQTiles : rows, 0);
    if (!host[i]->empty())
      qLists_[i].copyToHost(host[i]->data(), host[i]->size() * 4);
  }
  return t;
}

DataGradients GpuAttentionBackwardKernel::launchBackward(
    const BackwardCall &c, const Arguments &args,
    const GpuBackwardOptions &options, CUstream stream) const {
  AttentionShape s;
  s.batch = c.batch;
  s.headsQ = c.headsQ;
  s.headsKV = c.headsKV;
  s.seqlenQ = c.seqlenQ;
  s.seqlenK = c.seqlenK;
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
  if (c.mask) {
    if (options.deterministic)
      throw UserError(fmt::format(
          "deterministic = true: backward kernel '{}' is block-sparse; the "
          "deterministic GPU backward takes dense and varlen kernels (its dQ "
          "turn counts follow the tile classifier, not a block mask's lists)",
          info_.name));
    const BlockMask &m = c.mask->shape();
    checkBackwardBlockTiles(m, info_.config.blockN, info_.config.blockM());
    std::span<const int32_t> cuQ, cuK;
    if (c.cu) {
      cuQ = c.cu->hostQ();
      cuK = c.cu->hostK();
    }
    checkBlockMaskFits(m, m.blockM, m.blockN, s.batch, s.headsQ, s.seqlenQ,
                       s.seqlenK, cuQ, cuK);
  }
  // Only f32 buffers and f32 parameters have gradients (the derivative of
  // an integer is 0, and nothing is added for it): the i32 parameters of a
  // context-parallel spec (cp_q_chunk, ...) keep the deterministic mode.
  const bool hasF32Gradients =
      paramOffset > 0 ||
      std::any_of(params.begin(), params.end(), [](const ParamDecl &p) {
        return p.type == ScalarType::Float32;
      });
  if (options.deterministic && hasF32Gradients)
    throw UserError(fmt::format(
        "deterministic = true: variant '{}' has f32 buffers or parameters "
        "(their gradients are summed by unordered fp32 atomics); the "
        "deterministic GPU backward takes variants without them",
        spec_.variant.name()));
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
  size_t rows = static_cast<size_t>(c.rowsQ * s.headsQ);
  size_t accBytes = rows * static_cast<size_t>(spec_.headDimQK) * 4;
  if (accum_.size() < accBytes)
    accum_ = DeviceBuffer(*device_, accBytes);
  if (delta_.size() < rows * 4)
    delta_ = DeviceBuffer(*device_, rows * 4);
  // Deterministic mode: an i32 turn counter per (batch, head_q, query
  // tile), zeroed by `_bwd_pre`.
  void *turns = nullptr;
  if (options.deterministic) {
    size_t n = static_cast<size_t>(
        s.batch * s.headsQ *
        ((s.seqlenQ + info_.config.blockN - 1) / info_.config.blockN));
    if (turns_.size() < n * 4)
      turns_ = DeviceBuffer(*device_, std::max<size_t>(n * 4, 4));
    turns = reinterpret_cast<void *>(turns_.ptr());
  }
  // Reads and gradient writes proven in range set no flag: no check.
  const bool check = detail::needsStatusCheck(reads_, args, s.headsQ, s.batch,
                                              s.seqlenQ, s.seqlenK, c.cu);
  if (check)
    status_.fill(0);

  KernelArgs a;
  for (const TensorRef *t : c.t)
    a.add(t->data);
  a.add(reinterpret_cast<void *>(accum_.ptr()))
      .add(reinterpret_cast<void *>(delta_.ptr()))
      .add(reinterpret_cast<void *>(status_.ptr()));
  for (const auto &st : c.strides)
    a.add(st[0]).add(st[1]).add(st[2]);
  a.add(static_cast<int32_t>(s.seqlenQ)).add(static_cast<int32_t>(s.seqlenK));
  a.add(static_cast<int32_t>(s.headsQ / s.headsKV));
  float scale = spec_.effectiveScale();
  a.add(scale).add(static_cast<float>(scale * 1.4426950408889634));
  a.add(turns);
  if (c.cu)
    a.add(reinterpret_cast<void *>(c.cu->deviceQ()))
        .add(reinterpret_cast<void *>(c.cu->deviceK()));
  if (c.mask) {
    // The transposed lists (KernelAbi.h): rows (b, h, key tile).
    TransposedBlockMask t = launchTranspose(*c.mask, stream);
    for (const DeviceBuffer &l : qLists_)
      a.add(reinterpret_cast<void *>(l.ptr()));
    a.add(static_cast<int32_t>(t.batch == 1 ? 0 : t.heads * t.numKvTiles));
    a.add(static_cast<int32_t>(t.heads == 1 ? 0 : t.numKvTiles));
    a.add(static_cast<int32_t>(t.numQTiles));
  }
  checkFixedArgs(a, abi::gpu::backwardArgTypes(info_.config), info_.name);
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
  if (check)
    checkSyncs_.fetch_add(1);
  if (check || gradFloats > 0)
    FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream));
  if (check) {
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
