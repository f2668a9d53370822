//===- RingGpuSupport.cpp - Pieces shared by the GPU ring's passes --------===//
//
// RingGpuSupport.h: the geometry checks, the packed K/V layout and the
// travelling buffer pair of the GPU ring forward and backward.
//
//===----------------------------------------------------------------------===//
#include "RingGpuSupport.h"

#include "flashjit/runtime/Driver.h"

#include "Check.h"
#include "RingSupport.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <utility>

namespace flashjit::runtime::ring {

namespace {

/// The ring's place and chunk counts of \p transport's rank.
GpuGeometry ringPlace(const RingTransport &transport, Sharding sharding) {
  GpuGeometry g;
  g.ranks = transport.size();
  g.rank = transport.rank();
  checkRingRank(g.rank, g.ranks);
  g.perRank = sharding == Sharding::Zigzag ? 2 : 1;
  g.chunks = numChunks(g.ranks, sharding);
  return g;
}

/// Throws unless every head dim's rows are a multiple of 16 bytes: the
/// packed K/V chunks and the partial outputs have rows of head_dim
/// elements, which the kernels need 16-byte aligned.
void checkRows(const AttentionSpec &spec, const GpuGeometry &g,
               const char *fn) {
  struct Row {
    const char *name;
    int64_t dim;
    DType dtype;
  };
  for (Row r : {Row{"head_dim_qk", g.dqk, spec.dtypeK},
                Row{"head_dim_v", g.dv, spec.dtypeV}})
    if (r.dim * byteSize(r.dtype) % 16 != 0)
      fail(fmt::format("{} packs rows of {} elements: {} = {} must be a "
                       "multiple of 8 (16-byte rows)",
                       fn, r.name, r.name, r.dim));
}

/// Each sequence's chunk length of the local cu_seqlens \p cu.
std::vector<int64_t> chunkLens(std::span<const int32_t> cu,
                               const GpuGeometry &g, const char *name) {
  std::vector<int64_t> lens;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    int64_t len = cu[b + 1] - cu[b];
    if (len % g.perRank != 0)
      fail(fmt::format("{}: local sequence {} has {} tokens, odd: zigzag "
                       "sharding holds two equal chunks per rank",
                       name, b, len));
    if (len / g.perRank * g.chunks > std::numeric_limits<int32_t>::max())
      fail(fmt::format("{}: sequence {} has {} tokens over the ring, more "
                       "than 2^31 - 1 (indices are i32)",
                       name, b, len / g.perRank * g.chunks));
    lens.push_back(len / g.perRank);
  }
  return lens;
}

} // namespace

GpuGeometry gpuGeometry(const AttentionSpec &spec, const AttentionShape &sh,
                        const RingTransport &transport, Sharding sharding,
                        const char *fn) {
  GpuGeometry g = ringPlace(transport, sharding);
  const std::pair<const char *, int64_t> lens[] = {{"seqlen_q", sh.seqlenQ},
                                                   {"seqlen_k", sh.seqlenK}};
  for (const auto &[name, len] : lens) {
    if (len % g.perRank != 0)
      fail(fmt::format("local {} = {} is odd: zigzag sharding holds two "
                       "equal chunks per rank",
                       name, len));
    if (len / g.perRank * g.chunks > std::numeric_limits<int32_t>::max())
      fail(fmt::format("global {} = {} exceeds 2^31 - 1 (indices are i32)",
                       name, len / g.perRank * g.chunks));
  }
  g.batch = sh.batch, g.headsQ = sh.headsQ, g.headsKV = sh.headsKV;
  g.dqk = sh.headDimQK, g.dv = sh.headDimV;
  checkRows(spec, g, fn);
  g.lenQ = sh.seqlenQ / g.perRank, g.lenK = sh.seqlenK / g.perRank;
  return g;
}

GpuGeometry gpuVarlenGeometry(const AttentionSpec &spec, const VarlenShape &sh,
                              std::span<const int32_t> cuQ,
                              std::span<const int32_t> cuK,
                              const RingTransport &transport, Sharding sharding,
                              const char *fn) {
  GpuGeometry g = ringPlace(transport, sharding);
  g.varlen = true;
  g.batch = sh.batch, g.headsQ = sh.headsQ, g.headsKV = sh.headsKV;
  g.dqk = sh.headDimQK, g.dv = sh.headDimV;
  checkRows(spec, g, fn);
  g.seqQ = chunkLens(cuQ, g, "cu_seqlens_q");
  g.seqK = chunkLens(cuK, g, "cu_seqlens_k");
  g.lenQ = sh.totalQ / g.perRank, g.lenK = sh.totalK / g.perRank;
  g.cuLocalQ.assign(cuQ.begin(), cuQ.end());
  g.cuLocalK.assign(cuK.begin(), cuK.end());
  g.cuChunkQ = {0}, g.cuChunkK = {0};
  for (size_t b = 0; b < g.seqQ.size(); ++b) {
    g.cuChunkQ.push_back(static_cast<int32_t>(g.cuChunkQ.back() + g.seqQ[b]));
    g.cuChunkK.push_back(static_cast<int32_t>(g.cuChunkK.back() + g.seqK[b]));
  }
  return g;
}

void forEachPair(
    const AttentionSpec &ringSpec, const Arguments &args, const GpuGeometry &g,
    Sharding sharding, int step,
    const std::function<void(int64_t, int64_t, const Arguments &)> &compute,
    RingStats &stats) {
  std::vector<int64_t> mine = rankChunks(g.rank, g.ranks, sharding);
  int source = (g.rank - step % g.ranks + g.ranks) % g.ranks;
  std::vector<int64_t> theirs = rankChunks(source, g.ranks, sharding);
  for (int64_t i = 0; i < g.perRank; ++i)
    for (int64_t j = 0; j < g.perRank; ++j) {
      Arguments ca = chunkArguments(ringSpec, args, mine[size_t(i)],
                                    theirs[size_t(j)], g.chunks, g.chunks);
      TileClass c =
          g.varlen
              ? classifyChunkPair(ringSpec, ca, g.batch, 0, 0, g.seqQ, g.seqK)
              : classifyChunkPair(ringSpec, ca, g.batch, g.lenQ, g.lenK);
      if (c == TileClass::Empty) {
        ++stats.pairsSkipped;
        continue;
      }
      compute(i, j, ca);
      ++stats.pairsComputed;
    }
}

size_t GpuKVLayout::kBytes() const {
  return static_cast<size_t>(g.perRank * g.tokensK() * g.headsKV * g.dqk *
                             byteSize(k));
}

size_t GpuKVLayout::vBytes() const {
  return static_cast<size_t>(g.perRank * g.tokensK() * g.headsKV * g.dv *
                             byteSize(v));
}

TensorRef GpuKVLayout::chunk(CUdeviceptr buf, bool isV, int64_t j) const {
  size_t chunkBytes = (isV ? vBytes() : kBytes()) / size_t(g.perRank);
  CUdeviceptr base =
      buf + (isV ? kBytes() : 0) + static_cast<size_t>(j) * chunkBytes;
  if (g.varlen)
    return TensorRef::contiguous3(reinterpret_cast<void *>(base), isV ? v : k,
                                  {g.lenK, g.headsKV, isV ? g.dv : g.dqk});
  return TensorRef::contiguous(
      reinterpret_cast<void *>(base), isV ? v : k,
      {g.batch, g.headsKV, g.lenK, isV ? g.dv : g.dqk});
}

void packKV(const GpuKVLayout &l, CUdeviceptr buf, const TensorRef &k,
            const TensorRef &v, CUstream stream) {
  // One 2-D copy per (chunk, batch, head): lenK rows of head_dim elements
  // (head_dim stride 1, as the kernels require), source rows strides[2]
  // apart, packed in the buffer.
  const Driver &d = Driver::get();
  const GpuGeometry &g = l.g;
  if (g.varlen) { // every sequence's part j packed into chunk j
    for (int64_t j = 0; j < g.perRank; ++j)
      for (int isV = 0; isV < 2; ++isV)
        for (size_t b = 0; b < g.seqK.size(); ++b)
          copyTokens(isV ? v : k, g.cuLocalK[b] + j * g.seqK[b],
                     l.chunk(buf, isV, j), g.cuChunkK[b], g.seqK[b], stream);
    return;
  }
  for (int64_t j = 0; j < g.perRank; ++j)
    for (int isV = 0; isV < 2; ++isV) {
      TensorRef src = sliceDim(isV ? v : k, 2, j * g.lenK, g.lenK);
      TensorRef dst = l.chunk(buf, isV, j);
      auto es = static_cast<size_t>(byteSize(src.dtype));
      if (src.numel() == 0)
        continue;
      if (src.strides[3] != 1)
        fail(fmt::format("{}.strides[3] = {}: the head_dim stride must be 1",
                         isV ? "v" : "k", src.strides[3]));
      for (int64_t b = 0; b < g.batch; ++b)
        for (int64_t h = 0; h < g.headsKV; ++h) {
          CUDA_MEMCPY2D c;
          std::memset(&c, 0, sizeof c);
          c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
          c.srcDevice = reinterpret_cast<CUdeviceptr>(src.data) +
                        static_cast<size_t>(src.offset(b, h, 0, 0)) * es;
          c.srcPitch = static_cast<size_t>(src.strides[2]) * es;
          c.dstDevice = reinterpret_cast<CUdeviceptr>(dst.data) +
                        static_cast<size_t>(dst.offset(b, h, 0, 0)) * es;
          c.dstPitch = static_cast<size_t>(dst.shape[3]) * es;
          c.WidthInBytes = c.dstPitch;
          c.Height = static_cast<size_t>(g.lenK);
          FLASHJIT_CHECK(d.cuMemcpy2DAsync(&c, stream));
        }
    }
}

void copyTokens(const TensorRef &src, int64_t srcRow, const TensorRef &dst,
                int64_t dstRow, int64_t n, CUstream stream) {
  if (n == 0 || src.shape[1] == 0 || src.shape[2] == 0)
    return;
  if (src.strides[2] != 1 || dst.strides[2] != 1)
    fail(fmt::format("the head_dim stride must be 1 (got {})",
                     src.strides[2] != 1 ? src.strides[2] : dst.strides[2]));
  auto es = static_cast<size_t>(byteSize(src.dtype));
  const int64_t heads = src.shape[1], dim = src.shape[2];
  // A token's heads packed in both: one copy of n rows of heads * dim.
  bool packed = src.strides[1] == dim && dst.strides[1] == dim;
  for (int64_t h = 0; h < (packed ? 1 : heads); ++h) {
    CUDA_MEMCPY2D c;
    std::memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = reinterpret_cast<CUdeviceptr>(src.data) +
                  static_cast<size_t>(src.offset(srcRow, h, 0, 0)) * es;
    c.srcPitch = static_cast<size_t>(src.strides[0]) * es;
    c.dstDevice = reinterpret_cast<CUdeviceptr>(dst.data) +
                  static_cast<size_t>(dst.offset(dstRow, h, 0, 0)) * es;
    c.dstPitch = static_cast<size_t>(dst.strides[0]) * es;
    c.WidthInBytes = static_cast<size_t>(packed ? heads * dim : dim) * es;
    c.Height = static_cast<size_t>(n);
    FLASHJIT_CHECK(Driver::get().cuMemcpy2DAsync(&c, stream));
  }
}

void copyLseTokens(const TensorRef &src, int64_t srcCol, const TensorRef &dst,
                   int64_t dstCol, int64_t n, CUstream stream) {
  if (n == 0 || src.shape[0] == 0)
    return;
  if (src.strides[1] != 1 || dst.strides[1] != 1)
    fail(fmt::format("lse.strides[1] = {}: the varlen ring packs LSE rows "
                     "and needs the token stride 1",
                     src.strides[1] != 1 ? src.strides[1] : dst.strides[1]));
  CUDA_MEMCPY2D c;
  std::memset(&c, 0, sizeof c);
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(src.data) +
                static_cast<size_t>(srcCol) * sizeof(float);
  c.srcPitch = static_cast<size_t>(src.strides[0]) * sizeof(float);
  c.dstDevice = reinterpret_cast<CUdeviceptr>(dst.data) +
                static_cast<size_t>(dstCol) * sizeof(float);
  c.dstPitch = static_cast<size_t>(dst.strides[0]) * sizeof(float);
  c.WidthInBytes = static_cast<size_t>(n) * sizeof(float);
  c.Height = static_cast<size_t>(src.shape[0]);
  FLASHJIT_CHECK(Driver::get().cuMemcpy2DAsync(&c, stream));
}

GpuTravelling::GpuTravelling(Device &device, size_t bytes, CUstream stream,
                             bool zero)
    : a_(std::make_unique<StreamBuffer>(device, bytes, stream)),
      b_(std::make_unique<StreamBuffer>(device, bytes, stream)),
      cur_(a_->ptr()), next_(b_->ptr()), bytes_(bytes) {
  if (zero && bytes > 0)
    FLASHJIT_CHECK(Driver::get().cuMemsetD8Async(cur_, 0, bytes, stream));
}

void GpuTravelling::start(RingTransport &t) const {
  t.startShift(reinterpret_cast<const void *>(cur_),
               reinterpret_cast<void *>(next_), bytes_);
}

void GpuTravelling::finish(RingTransport &t) {
  t.waitShift();
  std::swap(cur_, next_);
}

void checkRingKernel(const KernelConfig &config, KernelKind kind,
                     const AttentionSpec &kernelSpec,
                     const AttentionSpec &ringSpec, const AttentionSpec &spec,
                     const char *fn, bool varlen) {
  if (config.varlen != varlen || config.blockSparse || config.kind != kind)
    fail(fmt::format(
        "{} needs a {} {} kernel; '{}' is {}", fn, varlen ? "varlen" : "dense",
        toString(kind), kernelSpec.variant.name(),
        config.blockSparse        ? "block-sparse"
        : config.varlen != varlen ? (config.varlen ? "varlen" : "dense")
                                  : toString(config.kind)));
  if (!structurallyEqual(ringSpec, kernelSpec))
    fail(fmt::format("{}: {} kernel '{}' was not compiled from "
                     "contextParallelSpec(spec, spec.dtypeO) of spec '{}' "
                     "(ring kernels read global indices)",
                     fn, toString(kind), kernelSpec.variant.name(),
                     spec.variant.name()));
}

} // namespace flashjit::runtime::ring
