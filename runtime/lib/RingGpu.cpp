//===- RingGpu.cpp - Context-parallel (ring) attention on a GPU -----------===//
//
// The ring schedule of Ring.cpp on device memory (RingGpu.h): R steps; at
// step s rank r holds the K/V chunks of rank (r - s) mod R in `cur`, starts
// the shift of `cur` into `next`, runs the ring kernel of each (local query
// chunk, visiting key chunk) pair whose mask is not empty into a partial
// state and merges it into that query chunk's fp32 accumulator, then swaps
// the buffers. Everything is enqueued on the caller's stream, so the shift
// and the kernels run one after the other (no overlap yet).
//
// Buffer layout: K chunks | V chunks, chunk j of K one contiguous
// [B, Hkv, Lk, Dqk] tensor (Ring.cpp's dense layout, without its header).
// The accumulators start as the empty state (O = 0, LSE = -inf), so every
// computed pair merges the same way (a merge with the empty state returns
// the other state exactly: its weight is exp(0) = 1) and a query chunk that
// meets no key gets O = 0, LSE = -inf (or the sink's) from the last merge.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/RingGpu.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/PagedOps.h"

#include "Check.h"
#include "RingSupport.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <memory>

namespace flashjit::runtime {
namespace {

using ring::fail;

/// fp32 -inf's bits (the empty state's LSE).
constexpr unsigned kMinusInfBits = 0xff800000u;

/// One rank's call.
class GpuRingRun {
public:
  GpuRingRun(const AttentionSpec &spec, const GpuAttentionKernel &kernel,
             const GpuPagedOps &ops, Device &device, RingTransport &transport,
             const Arguments &args, const RingOptions &options, CUstream stream)
      : spec_(spec), ringSpec_(contextParallelSpec(spec, spec.dtypeO)),
        kernel_(kernel), ops_(ops), device_(device), transport_(transport),
        args_(args), options_(options), stream_(stream) {}

  void init(const TensorRef &q, const TensorRef &k, const TensorRef &v,
            const TensorRef &o, const TensorRef *lse);
  RingStats run();

private:
  void checkKernel() const;
  void allocate();
  void packKV(const TensorRef &k, const TensorRef &v);
  TensorRef kvChunk(CUdeviceptr buf, bool isV, int64_t j) const;
  TensorRef accO(int64_t i) const;
  TensorRef accLse(int64_t i) const;
  void computePair(int64_t i, const TensorRef &kj, const TensorRef &vj,
                   const Arguments &chunkArgs);
  void finish();

  const AttentionSpec &spec_;
  AttentionSpec ringSpec_;
  const GpuAttentionKernel &kernel_;
  const GpuPagedOps &ops_;
  Device &device_;
  RingTransport &transport_;
  const Arguments &args_;
  RingOptions options_;
  CUstream stream_;
  int rank_ = 0, ranks_ = 1;
  int64_t perRank_ = 1, chunks_ = 1;
  int64_t batch_ = 0, headsQ_ = 0, headsKV_ = 0, dqk_ = 0, dv_ = 0;
  int64_t lenQ_ = 0, lenK_ = 0; // chunk lengths
  TensorRef o_;
  const TensorRef *lse_ = nullptr;
  std::vector<TensorRef> qChunks_;
  size_t kBytes_ = 0, vBytes_ = 0, accOBytes_ = 0, accLseBytes_ = 0;
  // Two K/V buffers, the partial state of one pair, and the accumulators
  // of every local query chunk (chunk-major).
  std::unique_ptr<StreamBuffer> kv_[2], partO_, partLse_, accO_, accLse_;
  CUdeviceptr cur_ = 0, next_ = 0;
  RingStats stats_;
};

void GpuRingRun::checkKernel() const {
  const KernelConfig &c = kernel_.info().config;
  if (c.varlen || c.blockSparse || c.kind != KernelKind::Forward)
    fail(fmt::format("ringAttentionGpu needs a dense forward kernel; '{}' is "
                     "{}",
                     kernel_.spec().variant.name(),
                     c.varlen        ? "varlen"
                     : c.blockSparse ? "block-sparse"
                                     : toString(c.kind)));
  if (!structurallyEqual(ringSpec_, kernel_.spec()))
    fail(fmt::format("kernel '{}' was not compiled from "
                     "contextParallelSpec(spec, spec.dtypeO) of spec '{}' "
                     "(ring kernels read global indices and return LSE)",
                     kernel_.spec().variant.name(), spec_.variant.name()));
}

void GpuRingRun::init(const TensorRef &q, const TensorRef &k,
                      const TensorRef &v, const TensorRef &o,
                      const TensorRef *lse) {
  checkKernel();
  args_.validateFor(spec_.variant);
  args_.validateSinkFor(spec_, false);
  ranks_ = transport_.size();
  rank_ = transport_.rank();
  checkRingRank(rank_, ranks_);
  perRank_ = options_.sharding == Sharding::Zigzag ? 2 : 1;
  chunks_ = numChunks(ranks_, options_.sharding);
  AttentionShape sh = checkAttentionTensors(spec_, q, k, v, &o,
                                            spec_.returnLse ? lse : nullptr);
  if (spec_.returnLse && !lse)
    fail("lse is required: the spec returns LSE");
  const std::pair<const char *, int64_t> lens[] = {{"seqlen_q", sh.seqlenQ},
                                                   {"seqlen_k", sh.seqlenK}};
  for (const auto &[name, len] : lens) {
    if (len % perRank_ != 0)
      fail(fmt::format("local {} = {} is odd: zigzag sharding holds two "
                       "equal chunks per rank",
                       name, len));
    if (len / perRank_ * chunks_ > std::numeric_limits<int32_t>::max())
      fail(fmt::format("global {} = {} exceeds 2^31 - 1 (indices are i32)",
                       name, len / perRank_ * chunks_));
  }
  batch_ = sh.batch, headsQ_ = sh.headsQ, headsKV_ = sh.headsKV;
  dqk_ = sh.headDimQK, dv_ = sh.headDimV;
  // The packed K/V chunks and the partial O have rows of head_dim
  // elements, which the kernels need 16-byte aligned.
  struct Row {
    const char *name;
    int64_t dim;
    DType dtype;
  };
  for (Row r : {Row{"head_dim_qk", dqk_, spec_.dtypeK},
                Row{"head_dim_v", dv_, spec_.dtypeV}})
    if (r.dim * byteSize(r.dtype) % 16 != 0)
      fail(fmt::format("ringAttentionGpu packs rows of {} elements: {} = "
                       "{} must be a multiple of 8 (16-byte rows)",
                       r.name, r.name, r.dim));
  lenQ_ = sh.seqlenQ / perRank_, lenK_ = sh.seqlenK / perRank_;
  o_ = o, lse_ = spec_.returnLse ? lse : nullptr;
  for (int64_t i = 0; i < perRank_; ++i)
    qChunks_.push_back(sliceDim(q, 2, i * lenQ_, lenQ_));
  allocate();
  packKV(k, v);
}

void GpuRingRun::allocate() {
  auto bytes = [](int64_t elems, DType t) {
    return static_cast<size_t>(elems * byteSize(t));
  };
  int64_t tokensK = perRank_ * batch_ * lenK_;
  kBytes_ = bytes(tokensK * headsKV_ * dqk_, spec_.dtypeK);
  vBytes_ = bytes(tokensK * headsKV_ * dv_, spec_.dtypeV);
  int64_t rows = batch_ * headsQ_ * lenQ_; // one query chunk's rows
  accOBytes_ = bytes(rows * dv_, DType::F32);
  accLseBytes_ = bytes(rows, DType::F32);
  for (auto &b : kv_)
    b = std::make_unique<StreamBuffer>(device_, kBytes_ + vBytes_, stream_);
  partO_ = std::make_unique<StreamBuffer>(
      device_, bytes(rows * dv_, spec_.dtypeO), stream_);
  partLse_ = std::make_unique<StreamBuffer>(device_, accLseBytes_, stream_);
  auto per = static_cast<size_t>(perRank_);
  accO_ = std::make_unique<StreamBuffer>(device_, per * accOBytes_, stream_);
  accLse_ =
      std::make_unique<StreamBuffer>(device_, per * accLseBytes_, stream_);
  const Driver &d = Driver::get();
  if (accO_->size() > 0)
    FLASHJIT_CHECK(d.cuMemsetD8Async(accO_->ptr(), 0, accO_->size(), stream_));
  if (accLse_->size() > 0)
    FLASHJIT_CHECK(d.cuMemsetD32Async(accLse_->ptr(), kMinusInfBits,
                                      accLse_->size() / 4, stream_));
  cur_ = kv_[0]->ptr(), next_ = kv_[1]->ptr();
}

TensorRef GpuRingRun::kvChunk(CUdeviceptr buf, bool isV, int64_t j) const {
  DType dt = isV ? spec_.dtypeV : spec_.dtypeK;
  int64_t dim = isV ? dv_ : dqk_;
  size_t chunkBytes = (isV ? vBytes_ : kBytes_) / static_cast<size_t>(perRank_);
  CUdeviceptr base =
      buf + (isV ? kBytes_ : 0) + static_cast<size_t>(j) * chunkBytes;
  return TensorRef::contiguous(reinterpret_cast<void *>(base), dt,
                               {batch_, headsKV_, lenK_, dim});
}

void GpuRingRun::packKV(const TensorRef &k, const TensorRef &v) {
  // One 2-D copy per (chunk, batch, head): lenK rows of head_dim elements
  // (head_dim stride 1, as the kernels require), source rows strides[2]
  // apart, packed in the buffer.
  const Driver &d = Driver::get();
  for (int64_t j = 0; j < perRank_; ++j)
    for (int isV = 0; isV < 2; ++isV) {
      TensorRef src = sliceDim(isV ? v : k, 2, j * lenK_, lenK_);
      TensorRef dst = kvChunk(cur_, isV, j);
      auto es = static_cast<size_t>(byteSize(src.dtype));
      if (src.numel() == 0)
        continue;
      if (src.strides[3] != 1)
        fail(fmt::format("{}.strides[3] = {}: the head_dim stride must be 1",
                         isV ? "v" : "k", src.strides[3]));
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t h = 0; h < headsKV_; ++h) {
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
          c.Height = static_cast<size_t>(lenK_);
          FLASHJIT_CHECK(d.cuMemcpy2DAsync(&c, stream_));
        }
    }
}

TensorRef GpuRingRun::accO(int64_t i) const {
  return TensorRef::contiguous(
      reinterpret_cast<void *>(accO_->ptr() +
                               static_cast<size_t>(i) * accOBytes_),
      DType::F32, {batch_, headsQ_, lenQ_, dv_});
}

TensorRef GpuRingRun::accLse(int64_t i) const {
  return TensorRef::contiguous3(
      reinterpret_cast<void *>(accLse_->ptr() +
                               static_cast<size_t>(i) * accLseBytes_),
      DType::F32, {batch_, headsQ_, lenQ_});
}

void GpuRingRun::computePair(int64_t i, const TensorRef &kj,
                             const TensorRef &vj, const Arguments &chunkArgs) {
  TensorRef o =
      TensorRef::contiguous(reinterpret_cast<void *>(partO_->ptr()),
                            spec_.dtypeO, {batch_, headsQ_, lenQ_, dv_});
  TensorRef lse =
      TensorRef::contiguous3(reinterpret_cast<void *>(partLse_->ptr()),
                             DType::F32, {batch_, headsQ_, lenQ_});
  kernel_.run(qChunks_[static_cast<size_t>(i)], kj, vj, o, &lse, chunkArgs,
              stream_);
  TensorRef acc = accO(i), accL = accLse(i);
  ops_.mergeStates(acc, accL, o, lse, acc, accL, nullptr, 0, stream_);
  ++stats_.pairsComputed;
}

void GpuRingRun::finish() {
  const auto *sink =
      spec_.sink ? static_cast<const float *>(args_.sink.data) : nullptr;
  int64_t sinkSize = spec_.sink ? args_.sink.size : 0;
  for (int64_t i = 0; i < perRank_; ++i) {
    TensorRef a = accO(i), al = accLse(i);
    TensorRef o = sliceDim(o_, 2, i * lenQ_, lenQ_);
    TensorRef l = lse_ ? sliceDim(*lse_, 2, i * lenQ_, lenQ_) : al;
    if (o.numel() > 0)
      ops_.mergeStates(std::span(&a, 1), std::span(&al, 1), o, l, sink,
                       sinkSize, stream_);
  }
}

RingStats GpuRingRun::run() {
  std::vector<int64_t> mine = rankChunks(rank_, ranks_, options_.sharding);
  for (int s = 0; s < ranks_; ++s) {
    bool last = s == ranks_ - 1;
    if (!last)
      transport_.startShift(reinterpret_cast<const void *>(cur_),
                            reinterpret_cast<void *>(next_), kBytes_ + vBytes_);
    int source = (rank_ - s + ranks_) % ranks_;
    std::vector<int64_t> theirs = rankChunks(source, ranks_, options_.sharding);
    for (int64_t i = 0; i < perRank_; ++i)
      for (int64_t j = 0; j < perRank_; ++j) {
        Arguments ca = chunkArguments(ringSpec_, args_, mine[size_t(i)],
                                      theirs[size_t(j)], chunks_, chunks_);
        if (classifyChunkPair(ringSpec_, ca, batch_, lenQ_, lenK_) ==
            TileClass::Empty) {
          ++stats_.pairsSkipped;
          continue;
        }
        computePair(i, kvChunk(cur_, false, j), kvChunk(cur_, true, j), ca);
      }
    if (!last) {
      transport_.waitShift();
      std::swap(cur_, next_);
      ++stats_.shifts;
    }
  }
  finish();
  return stats_;
}

} // namespace

RingStats ringAttentionGpu(const AttentionSpec &spec,
                           const GpuAttentionKernel &kernel,
                           const GpuPagedOps &ops, Device &device,
                           RingTransport &transport, const TensorRef &q,
                           const TensorRef &k, const TensorRef &v,
                           const TensorRef &o, const TensorRef *lse,
                           const Arguments &args, const RingOptions &options,
                           CUstream stream) {
  return ring::abortOnError(transport, [&] {
    device.makeCurrent();
    GpuRingRun run(spec, kernel, ops, device, transport, args, options, stream);
    run.init(q, k, v, o, lse);
    return run.run();
  });
}

} // namespace flashjit::runtime
