//===- AttentionKernel.cpp - Running generated attention kernels ----------===//
#include "flashjit/runtime/AttentionKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Cache.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Fp8Abi.h"
#include "flashjit/runtime/HeadDim.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Launch.h"
#include "flashjit/runtime/Ptxas.h"

#include "BufferCheck.h"
#include "Check.h"
#include "GpuTensorChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace flashjit::runtime {

using detail::addFp8DescaleArgs;
using detail::checkFixedArgs;
using detail::requireAligned;
using detail::requireFp8Aligned;
using detail::requireUnitInner;

GpuKernelInfo gpuKernelInfo(const KernelArtifacts &a) {
  return GpuKernelInfo{a.entry, a.config, a.sharedBytes};
}

GpuAttentionKernel::GpuAttentionKernel(AttentionSpec spec, GpuKernelInfo info,
                                       std::string_view ptx, Device &device,
                                       std::string_view cubin)
    : spec_(std::move(spec)), info_(std::move(info)), device_(&device) {
  const KernelConfig &c = info_.config;
  std::string arch = device.properties().arch();
  if (!c.arch.empty() && c.arch != arch &&
      !(c.arch == "sm_80" && arch >= std::string("sm_80")))
    throw UserError(fmt::format("kernel '{}' was generated for {}, but the "
                                "device is {}",
                                info_.name, c.arch, arch));
  // Nothing read from disk may launch with a configuration the module does
  // not declare (a wrong grid, block or argument list corrupts memory).
  if (std::string why = gpuLaunchConfigMismatch(spec_, info_, ptx);
      !why.empty())
    throw UserError(fmt::format("kernel '{}': its launch configuration does "
                                "not match its module: {}",
                                info_.name, why));
  bool loaded = false;
  if (!cubin.empty() && c.arch == arch) {
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
  // The loaded function (from the cubin, which may differ from the PTX)
  // must take the configured CTA.
  if (function_.maxThreadsPerBlock() < c.threads())
    throw UserError(fmt::format("kernel '{}' runs at most {} threads per CTA "
                                "but its configuration launches {}",
                                info_.name, function_.maxThreadsPerBlock(),
                                c.threads()));
  function_.setMaxDynamicSharedBytes(info_.sharedBytes);
  if (c.blockSparse)
    builder_ = module_.function(info_.name + "_block_mask");
  size_t buffers = spec_.variant.buffers().size();
  if (buffers)
    status_ = DeviceBuffer(device, buffers * sizeof(int32_t));
  reads_ = BufferReads::of(spec_.variant);
}

namespace detail {
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

/// The head_dim axis (the last: 3 dense, 2 varlen) must be contiguous.
void requireUnitInner(const char *name, const TensorRef &t) {
  int d = t.rank - 1;
  if (t.shape[d] > 1 && t.strides[d] != 1)
    throw UserError(fmt::format("{}.strides[{}] = {}: the GPU kernel needs "
                                "head_dim contiguous (stride 1)",
                                name, d, t.strides[d]));
}
} // namespace detail

/// The launch-level facts of one forward call, whatever its layout.
struct GpuAttentionKernel::ForwardCall {
  const TensorRef *q, *k, *v, *o, *lse;
  /// (batch, head, seq) element strides of q, k, v, o and lse.
  int64_t strides[5][3] = {};
  /// Sequence lengths (varlen: the largest), sequences, heads.
  int64_t seqlenQ = 0, seqlenK = 0, batch = 0, headsQ = 0, headsKV = 0;
  const DeviceCuSeqlens *cu = nullptr;
  const DeviceBlockMask *mask = nullptr;
};

namespace {
/// The TMA tensor map (abi::gpu::kTensorMapArgs) of the 16-bit tensor
/// \p name [batch, heads, seqlen, head_dim] at \p data with (batch, head,
/// seq) element strides \p strides: boxes of 64 head_dim elements x
/// \p boxRows rows, 128-byte swizzle, rows past seqlen zero-filled.
/// checkGpuTensors has checked the 16-byte alignment of the base and of
/// every stride of an extent above 1 (TMA's rules); a dimension of extent 1
/// is never stepped and gets the stride of a contiguous layout.
CUtensorMap tensorMap(const char *name, const void *data, bool bf16,
                      int64_t batch, int64_t heads, int64_t seqlen,
                      int64_t headDim, const int64_t strides[3], int boxRows) {
  cuuint64_t dims[4] = {cuuint64_t(headDim),
                        cuuint64_t(std::max<int64_t>(seqlen, 1)),
                        cuuint64_t(heads), cuuint64_t(batch)};
  const int64_t elems[3] = {strides[2], strides[1], strides[0]};
  cuuint64_t byteStrides[3];
  int64_t span = headDim * 2; // bytes of one step of the dimension below
  for (int i = 0; i < 3; ++i) {
    int64_t s = dims[i + 1] > 1 ? elems[i] * 2 : (span + 15) / 16 * 16;
    byteStrides[i] = cuuint64_t(s);
    span = s * int64_t(dims[i + 1]);
  }
  cuuint32_t box[4] = {64, cuuint32_t(boxRows), 1, 1};
  cuuint32_t elementStrides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  CUresult r = Driver::get().cuTensorMapEncodeTiled(
      &map,
      bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      4, const_cast<void *>(data), dims, byteStrides, box, elementStrides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw UserError(fmt::format(
        "{}: cuTensorMapEncodeTiled refused the tensor (dims {}x{}x{}x{}, "
        "byte strides {}/{}/{}): {}; a TMA kernel (mma = wgmma.tma) needs "
        "16-byte-aligned strides below 2^40 (mma = wgmma loads any layout)",
        name, batch, heads, seqlen, headDim, byteStrides[2], byteStrides[1],
        byteStrides[0], detail::resultName(r)));
  return map;
}
} // namespace

void GpuAttentionKernel::checkGpuTensors(const TensorRef &q, const TensorRef &k,
                                         const TensorRef &v, const TensorRef &o,
                                         const TensorRef *lse) const {
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k", &k},
                         std::pair{"v", &v}, std::pair{"o", &o}})
    requireUnitInner(name, *t);
  // Rows of head dims that 8 does not divide are loaded in smaller pieces
  // (headDimVectorElems) and O stored in single elements where odd.
  const int vqk = headDimVectorElems(spec_.headDimQK),
            vv = headDimVectorElems(spec_.headDimV);
  if (isFp8(spec_.dtypeQ)) {
    requireFp8Aligned(q, k, v);
  } else {
    requireAligned("q", q, 2 * vqk, vqk);
    requireAligned("k", k, 2 * vqk, vqk);
    requireAligned("v", v, 2 * vv, vv);
  }
  if (spec_.headDimV % 2)
    requireAligned("o", o, 2, 1);
  else
    requireAligned("o", o, 4, 2);
  if (spec_.returnLse)
    requireAligned("lse", *lse, 4, 1);
}

void GpuAttentionKernel::run(const TensorRef &q, const TensorRef &k,
                             const TensorRef &v, const TensorRef &o,
                             const TensorRef *lse, const Arguments &args,
                             CUstream stream) const {
  requireMode("run", false, false);
  runDense(q, k, v, o, lse, nullptr, args, stream);
}

void GpuAttentionKernel::runBlockSparse(const TensorRef &q, const TensorRef &k,
                                        const TensorRef &v, const TensorRef &o,
                                        const TensorRef *lse,
                                        const DeviceBlockMask &blockMask,
                                        const Arguments &args,
                                        CUstream stream) const {
  requireMode("runBlockSparse", false, true);
  runDense(q, k, v, o, lse, &blockMask, args, stream);
}

void GpuAttentionKernel::requireMode(const char *entry, bool varlen,
                                     bool blockSparse) const {
  if (info_.config.varlen == varlen && info_.config.blockSparse == blockSparse)
    return;
  const char *mode = info_.config.varlen        ? "varlen"
                     : info_.config.blockSparse ? "block-sparse"
                                                : "dense";
  const char *use = info_.config.varlen        ? "runVarlen"
                    : info_.config.blockSparse ? "runBlockSparse"
                                               : "run";
  throw UserError(fmt::format("{}: kernel '{}' was compiled {}; use {}", entry,
                              info_.name, mode, use));
}

void GpuAttentionKernel::runDense(const TensorRef &q, const TensorRef &k,
                                  const TensorRef &v, const TensorRef &o,
                                  const TensorRef *lse,
                                  const DeviceBlockMask *mask,
                                  const Arguments &args,
                                  CUstream stream) const {
  if (spec_.returnLse && !lse)
    throw UserError("lse is required: the spec returns LSE (lse=true)");
  AttentionShape s = checkAttentionTensors(spec_, q, k, v, &o,
                                           spec_.returnLse ? lse : nullptr);
  args.validateFor(spec_.variant);
  args.checkNotOverwrittenBy(o, spec_.returnLse ? lse : nullptr);
  checkGpuTensors(q, k, v, o, lse);
  if (mask)
    checkBlockMaskFits(mask->shape(), info_.config.blockM(),
                       info_.config.blockN, s.batch, s.headsQ, s.seqlenQ,
                       s.seqlenK);
  ForwardCall c{&q, &k, &v, &o, spec_.returnLse ? lse : nullptr};
  const TensorRef *ts[4] = {&q, &k, &v, &o};
  for (int i = 0; i < 4; ++i)
    for (int d = 0; d < 3; ++d)
      c.strides[i][d] = ts[i]->strides[d];
  if (spec_.returnLse)
    for (int d = 0; d < 3; ++d)
      c.strides[4][d] = lse->strides[d];
  c.seqlenQ = s.seqlenQ;
  c.seqlenK = s.seqlenK;
  c.batch = s.batch;
  c.headsQ = s.headsQ;
  c.headsKV = s.headsKV;
  c.mask = mask;
  launchForward(c, args, stream);
}

void GpuAttentionKernel::runVarlen(const TensorRef &q, const TensorRef &k,
                                   const TensorRef &v, const TensorRef &o,
                                   const TensorRef *lse,
                                   const DeviceCuSeqlens &cuSeqlens,
                                   const Arguments &args,
                                   const DeviceBlockMask *blockMask,
                                   CUstream stream) const {
  requireMode("runVarlen", true, info_.config.blockSparse);
  if (spec_.returnLse && !lse)
    throw UserError("lse is required: the spec returns LSE (lse=true)");
  if (info_.config.blockSparse && !blockMask)
    throw UserError(fmt::format("runVarlen: kernel '{}' is block-sparse and "
                                "needs a block mask",
                                info_.name));
  if (!info_.config.blockSparse && blockMask)
    throw UserError(fmt::format("runVarlen: kernel '{}' is not block-sparse; "
                                "pass no block mask",
                                info_.name));
  VarlenShape s =
      checkVarlenTensors(spec_, q, k, v, cuSeqlens.hostQ(), cuSeqlens.hostK(),
                         &o, spec_.returnLse ? lse : nullptr);
  args.validateFor(spec_.variant);
  args.checkNotOverwrittenBy(o, spec_.returnLse ? lse : nullptr);
  checkGpuTensors(q, k, v, o, lse);
  if (blockMask)
    checkBlockMaskFits(blockMask->shape(), info_.config.blockM(),
                       info_.config.blockN, s.batch, s.headsQ, s.maxSeqlenQ,
                       s.maxSeqlenK, cuSeqlens.hostQ(), cuSeqlens.hostK());
  ForwardCall c{&q, &k, &v, &o, spec_.returnLse ? lse : nullptr};
  // [total, heads, D]: (batch, head, seq) strides = (unused, [1], [0]).
  const TensorRef *ts[4] = {&q, &k, &v, &o};
  for (int i = 0; i < 4; ++i) {
    c.strides[i][1] = ts[i]->strides[1];
    c.strides[i][2] = ts[i]->strides[0];
  }
  if (spec_.returnLse) { // [heads, total]
    c.strides[4][1] = lse->strides[0];
    c.strides[4][2] = lse->strides[1];
  }
  c.seqlenQ = s.maxSeqlenQ;
  c.seqlenK = s.maxSeqlenK;
  c.batch = s.batch;
  c.headsQ = s.headsQ;
  c.headsKV = s.headsKV;
  c.cu = &cuSeqlens;
  c.mask = blockMask;
  launchForward(c, args, stream);
}

void detail::checkFixedArgs(const KernelArgs &a,
                            const std::vector<abi::gpu::ArgType> &abiTypes,
                            const std::string &kernel) {
  if (a.size() != abiTypes.size())
    throw InternalError(fmt::format("kernel '{}': the launcher passes {} "
                                    "fixed arguments, the ABI has {}",
                                    kernel, a.size(), abiTypes.size()));
}

void GpuAttentionKernel::addVariantArgs(KernelArgs &a,
                                        const Arguments &args) const {
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
  for (const BufferDecl &b : spec_.variant.buffers()) {
    const BufferRef &ref = args.buffers.at(b.name);
    a.add(ref.data).add(static_cast<int64_t>(ref.size));
  }
}

void GpuAttentionKernel::checkStatus(const Arguments &args,
                                     CUstream stream) const {
  std::vector<BufferDecl> buffers = spec_.variant.buffers();
  if (buffers.empty())
    return;
  checkSyncs_.fetch_add(1);
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

void GpuAttentionKernel::launchForward(const ForwardCall &c,
                                       const Arguments &args,
                                       CUstream stream) const {
  // The sink is device memory: its length and presence are checked, its
  // values are not (that would need a synchronising copy).
  args.validateSinkFor(spec_, /*hostValues=*/false);
  if (spec_.sink && reinterpret_cast<uintptr_t>(args.sink.data) % 4)
    throw UserError("sink must be 4-byte aligned (fp32 device memory)");
  constexpr int64_t kMaxGridYZ = 65535;
  if (c.batch > kMaxGridYZ)
    throw UserError(
        fmt::format("batch = {} exceeds {} (grid z)", c.batch, kMaxGridYZ));
  if (c.headsQ > kMaxGridYZ)
    throw UserError(
        fmt::format("heads_q = {} exceeds {} (grid y)", c.headsQ, kMaxGridYZ));
  if (c.seqlenQ > std::numeric_limits<int32_t>::max() ||
      c.seqlenK > std::numeric_limits<int32_t>::max())
    throw UserError(fmt::format("seqlen_q = {} / seqlen_k = {}: at most "
                                "2^31 - 1 positions",
                                c.seqlenQ, c.seqlenK));
  if (c.batch == 0 || c.seqlenQ == 0 || c.headsQ == 0)
    return; // nothing to write

  device_->makeCurrent();
  // The status flags are checked (a synchronisation) only when some buffer
  // read is not proven in range for this call (BufferCheck.h).
  const bool check = detail::needsStatusCheck(reads_, args, c.headsQ, c.batch,
                                              c.seqlenQ, c.seqlenK, c.cu);
  std::unique_lock<std::mutex> lock(statusMutex_, std::defer_lock);
  if (check) {
    lock.lock(); // the status flags are shared by concurrent runs
    status_.fill(0);
  }

  KernelArgs a;
  a.add(c.q->data).add(c.k->data).add(c.v->data).add(c.o->data);
  a.add(c.lse ? c.lse->data : nullptr);
  a.add(reinterpret_cast<void *>(status_.ptr()));
  for (int i = 0; i < 5; ++i)
    a.add(c.strides[i][0]).add(c.strides[i][1]).add(c.strides[i][2]);
  a.add(static_cast<int32_t>(c.seqlenQ)).add(static_cast<int32_t>(c.seqlenK));
  a.add(static_cast<int32_t>(c.headsQ / c.headsKV));
  float scale = spec_.effectiveScale();
  a.add(scale).add(static_cast<float>(scale * 1.4426950408889634));
  if (info_.config.varlen)
    a.add(reinterpret_cast<void *>(c.cu->deviceQ()))
        .add(reinterpret_cast<void *>(c.cu->deviceK()));
  if (info_.config.blockSparse) {
    const BlockMask &m = c.mask->shape();
    a.add(reinterpret_cast<void *>(c.mask->kvNumBlocks()))
        .add(reinterpret_cast<void *>(c.mask->kvIndices()))
        .add(reinterpret_cast<void *>(c.mask->fullKvNumBlocks()))
        .add(reinterpret_cast<void *>(c.mask->fullKvIndices()));
    a.add(static_cast<int32_t>(m.batch == 1 ? 0 : m.heads * m.numQTiles));
    a.add(static_cast<int32_t>(m.heads == 1 ? 0 : m.numQTiles));
    a.add(static_cast<int32_t>(m.numKvTiles));
  }
  if (spec_.sink)
    a.add(const_cast<void *>(args.sink.data));
  if (info_.config.tma) {
    const KernelConfig &k = info_.config;
    bool bf16 = spec_.dtypeQ == DType::BF16;
    a.add(tensorMap("q", c.q->data, bf16, c.batch, c.headsQ, c.seqlenQ,
                    spec_.headDimQK, c.strides[0], k.blockM()));
    a.add(tensorMap("k", c.k->data, bf16, c.batch, c.headsKV, c.seqlenK,
                    spec_.headDimQK, c.strides[1], k.blockN));
    a.add(tensorMap("v", c.v->data, bf16, c.batch, c.headsKV, c.seqlenK,
                    spec_.headDimV, c.strides[2], k.blockN));
  }
  std::vector<abi::gpu::ArgType> fixed =
      abi::gpu::forwardArgTypes(info_.config.varlen, info_.config.blockSparse,
                                spec_.sink, info_.config.tma);
  if (isFp8(spec_.dtypeQ)) {
    addFp8DescaleArgs(a, spec_, args, c.batch, c.headsKV);
    for (abi::gpu::ArgType t : abi::gpu::fp8DescaleArgTypes())
      fixed.push_back(t);
  }
  checkFixedArgs(a, fixed, info_.name);
  addVariantArgs(a, args);

  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>((c.seqlenQ + info_.config.blockM() - 1) /
                                    info_.config.blockM()),
              static_cast<unsigned>(c.headsQ), static_cast<unsigned>(c.batch)};
  cfg.block = {static_cast<unsigned>(info_.config.threads()), 1, 1};
  cfg.dynamicSharedBytes = static_cast<unsigned>(info_.sharedBytes);
  cfg.stream = stream;
  launch(function_, cfg, a);
  if (check)
    checkStatus(args, stream);
}

} // namespace flashjit::runtime
