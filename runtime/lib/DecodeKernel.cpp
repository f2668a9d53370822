//===- DecodeKernel.cpp - Split-KV decoding over paged KV caches ----------===//
#include "flashjit/runtime/DecodeKernel.h"

#include "flashjit/frontend/DecodeSplits.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/DecodeMergeAbi.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Launch.h"

#include "BufferCheck.h"
#include "Check.h"

#include <fmt/format.h>
#include <llvm/Support/Casting.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

namespace flashjit::runtime {

namespace {

[[noreturn]] void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

DeviceBuffer upload(Device &device, const std::vector<int32_t> &v) {
  DeviceBuffer buf(device, std::max<size_t>(v.size(), 1) * sizeof(int32_t));
  if (!v.empty())
    buf.copyFromHost(v.data(), v.size() * sizeof(int32_t));
  return buf;
}

void requireUnitInner(const char *name, const TensorRef &t) {
  if (t.shape[3] > 1 && t.strides[3] != 1)
    fail(fmt::format("{}.strides[3] = {}: the GPU kernel needs head_dim "
                     "contiguous (stride 1)",
                     name, t.strides[3]));
}

void requireAligned(const char *name, const TensorRef &t, int bytes,
                    int strideElems) {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes)
    fail(fmt::format("{}.data = {} is not {}-byte aligned (the GPU kernel "
                     "loads {}-byte vectors)",
                     name, t.data, bytes, bytes));
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.shape[i] > 1 && t.strides[i] % strideElems)
      fail(fmt::format("{}.strides[{}] = {} is not a multiple of {} elements "
                       "(rows must stay {}-byte aligned)",
                       name, i, t.strides[i], strideElems, bytes));
}

/// Whether the body of entry \p name in \p ptx holds a
/// `griddepcontrol.wait` (the body ends at the first '}' in column 0).
bool entryWaitsOnGrid(std::string_view ptx, const std::string &name) {
  const size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string_view::npos)
    return false;
  const size_t open = ptx.find("\n{", at);
  const size_t close = ptx.find("\n}", open);
  if (open == std::string_view::npos || close == std::string_view::npos)
    return false;
  return ptx.substr(open, close - open).find("griddepcontrol.wait") !=
         std::string_view::npos;
}

} // namespace

DevicePageTable::DevicePageTable(const PageList &pages, Device &device)
    : seqLens_(pages.seqLens), pageSize_(pages.pageSize),
      numPages_(pages.numPages), maxSeqLen_(pages.maxSeqLen()) {
  std::vector<int32_t> ids(pages.pages.begin(), pages.pages.end()), start, lens;
  if (static_cast<int64_t>(pages.pageStart.size()) != pages.batch())
    fail(fmt::format("the page list has {} page starts for {} sequences",
                     pages.pageStart.size(), pages.batch()));
  for (int64_t b = 0; b < pages.batch(); ++b) {
    const int64_t used =
        pages.pageSize > 0
            ? (pages.seqLens[b] + pages.pageSize - 1) / pages.pageSize
            : 0;
    for (int64_t p = 0; p < used; ++p) {
      const int64_t at = pages.pageStart[b] + p;
      if (at < 0 || at >= static_cast<int64_t>(ids.size()))
        fail(fmt::format("sequence {}: page entry {} outside the {} page ids "
                         "of the table",
                         b, at, ids.size()));
      if (ids[at] < 0 || ids[at] >= pages.numPages)
        fail(fmt::format("page id {} of sequence {} (entry {}) outside [0, "
                         "{}) (num_pages)",
                         ids[at], b, at, pages.numPages));
    }
    if (pages.pageStart[b] > std::numeric_limits<int32_t>::max() ||
        pages.seqLens[b] > std::numeric_limits<int32_t>::max())
      fail(fmt::format("page table entry {}: start {} / length {} beyond "
                       "int32",
                       b, pages.pageStart[b], pages.seqLens[b]));
    start.push_back(static_cast<int32_t>(pages.pageStart[b]));
    lens.push_back(static_cast<int32_t>(pages.seqLens[b]));
  }
  pages_ = upload(device, ids);
  start_ = upload(device, start);
  lens_ = upload(device, lens);
  hostPages_ = std::move(ids);
  hostStart_ = pages.pageStart;
}

std::vector<MemoryRegion> DevicePageTable::memory() const {
  auto region = [](const char *name, const DeviceBuffer &b) {
    return memoryOf(name, reinterpret_cast<const void *>(b.ptr()), b.size());
  };
  return {region("the page table's page ids", pages_),
          region("the page table's page starts", start_),
          region("the page table's sequence lengths", lens_)};
}

PageList DevicePageTable::hostList() const {
  PageList l;
  l.pageSize = pageSize_;
  l.numPages = numPages_;
  l.pageStart = hostStart_;
  l.seqLens = seqLens_;
  l.pages = hostPages_;
  return l;
}

DevicePageTable DevicePageTable::contiguous(std::span<const int32_t> seqLens,
                                            int64_t capacity, Device &device) {
  if (capacity < 0 || capacity > (int64_t(1) << 30))
    fail(fmt::format("capacity = {}, expected 0..2^30 tokens", capacity));
  DevicePageTable t;
  t.contiguous_ = true;
  t.pageSize_ = capacity;
  t.numPages_ = static_cast<int64_t>(seqLens.size());
  std::vector<int32_t> ids, lens(seqLens.begin(), seqLens.end());
  for (size_t b = 0; b < seqLens.size(); ++b) {
    if (seqLens[b] < 0 || seqLens[b] > capacity)
      fail(fmt::format("seq_lens[{}] = {}, expected 0..capacity = {}", b,
                       seqLens[b], capacity));
    ids.push_back(static_cast<int32_t>(b));
    t.seqLens_.push_back(seqLens[b]);
    t.maxSeqLen_ = std::max<int64_t>(t.maxSeqLen_, seqLens[b]);
  }
  t.pages_ = upload(device, ids);
  t.start_ = upload(device, ids);
  t.lens_ = upload(device, lens);
  return t;
}

DecodeWorkspaceLayout decodeWorkspaceLayout(int64_t rows, int64_t numSplits,
                                            int64_t headDimV, size_t numBuffers,
                                            int64_t groups) {
  if (rows < 0 || groups < 0 || numSplits < 1 || headDimV < 1)
    fail(fmt::format("decode workspace: rows = {}, groups = {}, num_splits = "
                     "{}, head_dim_v = {} (expected rows, groups >= 0, the "
                     "others >= 1)",
                     rows, groups, numSplits, headDimV));
  constexpr size_t kAlign = 256;
  constexpr size_t kMax = std::numeric_limits<size_t>::max() / 2;
  // Every product below stays under 2^63 when these hold.
  if (size_t(rows) > (size_t(1) << 40) || size_t(groups) > (size_t(1) << 40) ||
      size_t(numSplits) > (1u << 20) || size_t(headDimV) > (1u << 20) ||
      numBuffers > (1u << 20))
    fail(fmt::format("decode workspace: rows = {}, groups = {}, num_splits = "
                     "{}, head_dim_v = {}, {} buffers: too large",
                     rows, groups, numSplits, headDimV, numBuffers));
  auto mulChecked = [&](size_t a, size_t b) {
    if (a && b > kMax / a)
      fail(fmt::format("decode workspace of {} rows x {} splits x head_dim_v "
                       "{} overflows",
                       rows, numSplits, headDimV));
    return a * b;
  };
  auto roundUp = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  DecodeWorkspaceLayout l;
  // One split: the kernel writes O and LSE, no partial state, no counter.
  const size_t parts = numSplits > 1 ? size_t(numSplits) : 0;
  const size_t oBytes =
      mulChecked(mulChecked(parts, size_t(rows)), size_t(headDimV) * 4);
  // The partial LSEs and the merge kernel's scratch LSE [rows].
  const size_t lseBytes = parts ? mulChecked(parts + 1, size_t(rows) * 4) : 0;
  const size_t counterBytes = parts ? size_t(groups) * sizeof(int32_t) : 0;
  l.oPart = 0;
  l.lsePart = roundUp(oBytes);
  l.status = l.lsePart + roundUp(lseBytes);
  l.counters = l.status + roundUp(numBuffers * sizeof(int32_t));
  l.bytes = l.counters + roundUp(counterBytes);
  if (l.bytes > kMax)
    fail(fmt::format("decode workspace of {} bytes overflows", l.bytes));
  return l;
}

GpuDecodeKernel::GpuDecodeKernel(AttentionSpec spec, GpuKernelInfo info,
                                 std::string_view ptx, Device &device)
    : spec_(std::move(spec)), info_(std::move(info)), device_(&device) {
  std::string arch = device.properties().arch();
  if (!info_.config.arch.empty() && info_.config.arch != arch &&
      !(info_.config.arch == "sm_80" && arch >= std::string("sm_80")))
    fail(fmt::format("kernel '{}' was generated for {}, but the device is {}",
                     info_.name, info_.config.arch, arch));
  if (info_.config.blockM() <= 0 || info_.config.blockN <= 0 ||
      info_.config.threads() <= 0)
    fail(fmt::format("decode kernel '{}': GpuKernelInfo blockM = {}, blockN "
                     "= {} and threads = {} must be positive",
                     info_.name, info_.config.blockM(), info_.config.blockN,
                     info_.config.threads()));
  if (info_.config.kind != KernelKind::Decode)
    fail(fmt::format("kernel '{}' has kind '{}'; GpuDecodeKernel runs "
                     "'decode' kernels (GpuCompileOptions::kind)",
                     info_.name, toString(info_.config.kind)));
  if (std::string why = gpuLaunchConfigMismatch(spec_, info_, ptx);
      !why.empty())
    fail(fmt::format("decode kernel '{}': its launch configuration does not "
                     "match its module: {}",
                     info_.name, why));
  module_ = Module::fromPtx(device, ptx);
  decode_ = module_.function(info_.name + abi::gpu::kDecodeSuffix);
  merge_ = module_.function(info_.name + abi::gpu::kDecodeMergeSuffix);
  mergeSerial_ =
      module_.function(info_.name + abi::gpu::kDecodeMergeSerialSuffix);
  decode_.setMaxDynamicSharedBytes(info_.sharedBytes);
  reads_ = BufferReads::of(spec_.variant);
  // Only a module whose merge entries both wait on the grid dependency may
  // have its merge launched programmatically (a bundle from before the
  // waits, or an sm_80 module run on sm_90, launches plainly).
  mergeWaits_ =
      entryWaitsOnGrid(ptx, info_.name + abi::gpu::kDecodeMergeSuffix) &&
      entryWaitsOnGrid(ptx, info_.name + abi::gpu::kDecodeMergeSerialSuffix);
  launchAvailable_ = programmaticLaunchAvailable(device);
  const char *env = std::getenv("FLASHJIT_DECODE_PDL");
  programmaticMerge_.store(!(env && std::string_view(env) == "0"));
}

DecodeSplitShape GpuDecodeKernel::splitShape(int64_t batch, int64_t qLen,
                                             int64_t maxSeqLen) const {
  const int64_t rows = int64_t(spec_.headsQ / spec_.headsKV) * qLen;
  const int64_t blockN = info_.config.blockN;
  DecodeSplitShape shape;
  shape.batch = batch;
  shape.headsKV = spec_.headsKV;
  shape.rowTiles = (rows + info_.config.blockM() - 1) / info_.config.blockM();
  shape.groupRows = std::clamp<int64_t>(rows, 1, info_.config.blockM());
  shape.maxSeqLen = std::max<int64_t>(maxSeqLen, 0);
  shape.blockN = int(blockN);
  shape.tileBytes = blockN * (spec_.headDimQK * byteSize(spec_.dtypeK) +
                              spec_.headDimV * byteSize(spec_.dtypeV));
  shape.headDimV = spec_.headDimV;
  shape.threads = info_.config.threads();
  shape.smCount = device_->properties().smCount;
  return shape;
}

int GpuDecodeKernel::defaultNumSplits(int64_t batch, int64_t qLen,
                                      int64_t maxSeqLen,
                                      const Arguments &args) const {
  if (batch < 1 || qLen < 1)
    return 1;
  const int64_t blockN = info_.config.blockN;
  DecodeSplitShape shape = splitShape(batch, qLen, maxSeqLen);
  const int full = decodeNumSplits(shape);
  // The visible range has fewer tiles to split, so it matters only for a
  // count above 1, and only a mask beyond bottom-right causal narrows it
  // (the last row sees every key): the search (2 x bit_width tiles
  // classifications, ~5-10 us on the host) runs only then, with every row
  // of the call in one box (the longest sequence stands for all).
  const Expr &mask = spec_.variant.maskExpr();
  auto *k = llvm::dyn_cast<ConstantExpr>(mask.get());
  const bool plain = k && k->boolValue() && spec_.causal != Causal::TopLeft;
  if (full == 1 || plain || maxSeqLen < 1)
    return full;
  const int64_t visible =
      decodeVisibleKeyTiles(spec_, args, {0, batch - 1}, {0, spec_.headsQ - 1},
                            {0, qLen - 1}, qLen, maxSeqLen, blockN)
          .count();
  shape.maxSeqLen = std::min(maxSeqLen, visible * blockN);
  return decodeNumSplits(shape);
}

bool GpuDecodeKernel::fusesMerge(int64_t qLen, int numSplits) const {
  const int64_t rows = int64_t(spec_.headsQ / spec_.headsKV) * qLen;
  return decodeFusedMerge(numSplits,
                          std::min<int64_t>(rows, info_.config.blockM()),
                          spec_.headDimV, info_.config.threads());
}

void GpuDecodeKernel::launchMerge(CUdeviceptr oPart, CUdeviceptr lsePart,
                                  int64_t batch, int64_t headsQ, int64_t qLen,
                                  int splits, const TensorRef &o,
                                  const TensorRef *lse, const Arguments &args,
                                  CUstream stream) const {
  // The merge kernel writes a scratch LSE (after the partial LSEs) when the
  // caller wants none.
  const size_t rows = size_t(batch * headsQ * qLen);
  KernelArgs m;
  m.add(reinterpret_cast<void *>(oPart))
      .add(reinterpret_cast<void *>(lsePart))
      .add(o.data)
      .add(lse ? lse->data
               : reinterpret_cast<void *>(lsePart + size_t(splits) * rows * 4));
  m.add(o.strides[0]).add(o.strides[1]).add(o.strides[2]);
  const int64_t scratch[3] = {headsQ * qLen, qLen, 1};
  for (int i = 0; i < 3; ++i)
    m.add(lse ? lse->strides[i] : scratch[i]);
  m.add(static_cast<int32_t>(splits));
  if (spec_.sink)
    m.add(const_cast<void *>(args.sink.data));
  LaunchConfig mc;
  mc.grid = {static_cast<unsigned>(qLen), static_cast<unsigned>(headsQ),
             static_cast<unsigned>(batch)};
  mc.block = {static_cast<unsigned>(abi::gpu::kMergeThreads), 1, 1};
  mc.stream = stream;
  mc.programmaticDependency = programmaticMerge();
  const bool serial =
      decodeSerialMerge(splits, int64_t(rows), device_->properties().smCount);
  launch(serial ? mergeSerial_ : merge_, mc, m);
}

void GpuDecodeKernel::run(const TensorRef &q, const TensorRef &kCache,
                          const TensorRef &vCache, const DevicePageTable &table,
                          const TensorRef &o, const TensorRef *lse,
                          const Arguments &args, int numSplits, CUstream stream,
                          DecodeMerge merge) const {
  // Shapes: the paged check, or (contiguous) the same fields by hand.
  PagedShape s;
  if (table.isContiguous()) {
    TensorRef kp = kCache, vp = vCache;
    // Checked as a cache of one "page" per sequence, page_size 1 stand-in
    // for the capacity (checkPageSize would refuse it).
    kp.shape[2] = vp.shape[2] = 1;
    s = checkPagedTensors(spec_, q, kp, vp);
    if (kCache.shape[2] != table.pageSize() ||
        vCache.shape[2] != table.pageSize())
      fail(fmt::format("k.shape[2] = {} / v.shape[2] = {}, expected the "
                       "table's capacity {}",
                       kCache.shape[2], vCache.shape[2], table.pageSize()));
    s.pageSize = table.pageSize();
  } else {
    s = checkPagedTensors(spec_, q, kCache, vCache);
  }
  if (table.batch() != s.batch)
    fail(fmt::format("the page table has {} sequences, q.shape[0] = {}",
                     table.batch(), s.batch));
  if (s.numPages != table.numPages())
    fail(fmt::format("k_cache.shape[0] = {} pages, the page table was "
                     "validated for {}",
                     s.numPages, table.numPages()));
  if (!table.isContiguous() && s.pageSize != table.pageSize())
    fail(fmt::format("k_cache.shape[2] = {} (page_size), the page table's is "
                     "{}",
                     s.pageSize, table.pageSize()));
  if (s.qLen < 1 || s.qLen > kMaxQLen)
    fail(fmt::format("q.shape[2] = {} (q_len), expected 1..{}", s.qLen,
                     kMaxQLen));
  // o and lse: [batch, heads_q, q_len, ...].
  if (o.rank != 4 || o.shape[0] != s.batch || o.shape[1] != s.headsQ ||
      o.shape[2] != s.qLen || o.shape[3] != s.headDimV)
    fail(fmt::format("o.shape = [{}, {}, {}, {}], expected [{}, {}, {}, {}]",
                     o.shape[0], o.shape[1], o.shape[2], o.shape[3], s.batch,
                     s.headsQ, s.qLen, s.headDimV));
  if (o.dtype != spec_.dtypeO)
    fail(fmt::format("o.dtype = {}, but the spec says {}", toString(o.dtype),
                     toString(spec_.dtypeO)));
  const bool writeLse = spec_.returnLse && lse;
  if (writeLse) {
    if (lse->rank != 3 || lse->dtype != DType::F32 ||
        lse->shape[0] != s.batch || lse->shape[1] != s.headsQ ||
        lse->shape[2] != s.qLen)
      fail(fmt::format("lse: rank {}, dtype {}, shape [{}, {}, {}]; expected "
                       "fp32 [{}, {}, {}]",
                       lse->rank, toString(lse->dtype), lse->shape[0],
                       lse->shape[1], lse->shape[2], s.batch, s.headsQ,
                       s.qLen));
    requireAligned("lse", *lse, 4, 1);
  }
  // The aliasing rule of every entry point (as the C API and Python check):
  // o and lse overlap no input, not each other and not the table.
  checkPagedOutputs(q, kCache, vCache, o, writeLse ? lse : nullptr,
                    table.memory());
  args.validateFor(spec_.variant);
  // The sink is device memory: its presence and length are checked here.
  args.validateSinkFor(spec_, /*hostValues=*/false);
  if (spec_.sink && reinterpret_cast<uintptr_t>(args.sink.data) % 4)
    fail(fmt::format("sink.data = {} is not 4-byte aligned (fp32 device "
                     "memory)",
                     args.sink.data));
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k_cache", &kCache},
                         std::pair{"v_cache", &vCache}, std::pair{"o", &o}})
    requireUnitInner(name, *t);
  requireAligned("q", q, 16, 8);
  requireAligned("k_cache", kCache, 16, 8);
  requireAligned("v_cache", vCache, 16, 8);
  requireAligned("o", o, 4, 2);
  if (s.batch > 65535 || s.headsKV > 65535)
    fail(fmt::format("batch = {} / heads_kv = {}: at most 65535 (grid z, y)",
                     s.batch, s.headsKV));
  if (numSplits < 0 || numSplits > 1024)
    fail(fmt::format("num_splits = {}, expected 0 (automatic) or 1..1024",
                     numSplits));
  if (s.batch == 0 || s.headsQ == 0)
    return;

  const int64_t group = s.headsQ / s.headsKV;
  const int64_t rowTiles =
      (group * s.qLen + info_.config.blockM() - 1) / info_.config.blockM();
  const int splits =
      numSplits ? numSplits
                : defaultNumSplits(s.batch, s.qLen, table.maxSeqLen(), args);
  if (splits * rowTiles > std::numeric_limits<int32_t>::max())
    fail(fmt::format("num_splits = {} x {} row tiles overflows the grid",
                     splits, rowTiles));
  const int pageShift =
      table.isContiguous()
          ? 30
          : std::countr_zero(static_cast<uint64_t>(table.pageSize()));

  // This call's own workspace, ordered on its stream: calls on other
  // streams (or threads) never share it.
  const std::vector<BufferDecl> &buffers = spec_.variant.buffers();
  const bool hasBuffers = !buffers.empty();
  const size_t rows = static_cast<size_t>(s.batch * s.headsQ * s.qLen);
  // Who merges several splits (DecodeMerge): the fused merge needs a
  // counter per (batch, kv head, row tile) group, zeroed before the launch.
  const bool fused =
      splits > 1 &&
      (merge == DecodeMerge::Fused ||
       (merge == DecodeMerge::Auto && fusesMerge(s.qLen, splits)));
  const int64_t groups = fused ? s.batch * s.headsKV * rowTiles : 0;
  const DecodeWorkspaceLayout ws = decodeWorkspaceLayout(
      int64_t(rows), splits, s.headDimV, buffers.size(), groups);
  device_->makeCurrent();
  StreamBuffer work(*device_, ws.bytes, stream);
  auto part = [&](size_t offset, size_t end) {
    return reinterpret_cast<void *>(end > offset ? work.ptr() + offset : 0);
  };
  const CUdeviceptr status = work.ptr() + ws.status;
  // The flags are cleared and checked (a synchronisation) only when some
  // read is not proven in range for this call (BufferCheck.h).
  const bool check =
      hasBuffers &&
      detail::needsStatusCheck(
          reads_, detail::decodePositions(s.headsQ, s.qLen, table.seqLens()),
          args);
  if (check)
    FLASHJIT_CHECK(Driver::get().cuMemsetD8Async(
        status, 0, buffers.size() * sizeof(int32_t), stream));
  // The arrival counters start at 0 (the last CTA of a group also leaves
  // its counter at 0, but pool memory may hold anything).
  if (fused)
    FLASHJIT_CHECK(Driver::get().cuMemsetD8Async(
        work.ptr() + ws.counters, 0, size_t(groups) * sizeof(int32_t), stream));

  KernelArgs a;
  a.add(q.data).add(kCache.data).add(vCache.data);
  a.add(part(ws.oPart, ws.lsePart))
      .add(part(ws.lsePart, ws.status))
      .add(reinterpret_cast<void *>(hasBuffers ? status : 0))
      .add(reinterpret_cast<void *>(table.pages()))
      .add(reinterpret_cast<void *>(table.pageStart()))
      .add(reinterpret_cast<void *>(table.deviceSeqLens()));
  a.add(o.data)
      .add(writeLse ? lse->data : nullptr)
      .add(part(ws.counters, ws.bytes));
  for (const TensorRef *t : {&q, &kCache, &vCache, &o})
    a.add(t->strides[0]).add(t->strides[1]).add(t->strides[2]);
  for (int i = 0; i < 3; ++i)
    a.add(writeLse ? lse->strides[i] : int64_t(0));
  a.add(static_cast<int32_t>(s.qLen))
      .add(static_cast<int32_t>(group))
      .add(static_cast<int32_t>(pageShift))
      .add(static_cast<int32_t>(splits))
      .add(static_cast<int32_t>(rowTiles))
      .add(static_cast<int32_t>(s.batch))
      .add(static_cast<int32_t>(s.headsQ));
  float scale = spec_.effectiveScale();
  a.add(scale).add(static_cast<float>(scale * 1.4426950408889634));
  if (spec_.sink)
    a.add(const_cast<void *>(args.sink.data));
  if (a.size() != abi::gpu::decodeArgTypes(spec_.sink).size())
    throw InternalError(fmt::format(
        "decode kernel '{}': {} fixed arguments, "
        "the ABI has {}",
        info_.name, a.size(), abi::gpu::decodeArgTypes(spec_.sink).size()));
  for (const ParamDecl &p : spec_.variant.params()) {
    const Scalar &val = args.params.at(p.name);
    if (p.type == ScalarType::Int32)
      a.add(static_cast<int32_t>(val.intValue));
    else if (p.type == ScalarType::Int64)
      a.add(static_cast<int64_t>(val.intValue));
    else
      a.add(val.floatValue);
  }
  for (const BufferDecl &b : spec_.variant.buffers()) {
    const BufferRef &ref = args.buffers.at(b.name);
    a.add(ref.data).add(static_cast<int64_t>(ref.size));
  }
  LaunchConfig cfg;
  cfg.grid = {static_cast<unsigned>(splits * rowTiles),
              static_cast<unsigned>(s.headsKV), static_cast<unsigned>(s.batch)};
  cfg.block = {static_cast<unsigned>(info_.config.threads()), 1, 1};
  cfg.dynamicSharedBytes = static_cast<unsigned>(info_.sharedBytes);
  cfg.stream = stream;
  launch(decode_, cfg, a);

  if (splits > 1 && !fused)
    launchMerge(work.ptr() + ws.oPart, work.ptr() + ws.lsePart, s.batch,
                s.headsQ, s.qLen, splits, o, writeLse ? lse : nullptr, args,
                stream);

  if (check) {
    checkSyncs_.fetch_add(1);
    FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream));
    std::vector<int32_t> flags(buffers.size());
    copyDeviceToHost(*device_, flags.data(),
                     reinterpret_cast<const void *>(status),
                     flags.size() * sizeof(int32_t));
    for (size_t i = 0; i < buffers.size(); ++i)
      if (flags[i])
        fail(fmt::format("buffer '{}' was read outside [0, {}); the output "
                         "of this run is unspecified",
                         buffers[i].name,
                         args.buffers.at(buffers[i].name).size));
  }
}

} // namespace flashjit::runtime
