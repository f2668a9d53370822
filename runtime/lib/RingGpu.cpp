//===- RingGpu.cpp - Context-parallel (ring) attention on a GPU -----------===//
//
// The ring schedule of Ring.cpp on device memory (RingGpu.h): R steps; at
// step s rank r holds the K/V chunks of rank (r - s) mod R in `cur`, starts
// the shift of `cur` into `next`, runs the ring kernel of each (local query
// chunk, visiting key chunk) pair whose mask is not empty into a partial
// state and merges it into that query chunk's fp32 accumulator, then swaps
// the buffers. The kernels and merges are enqueued on the caller's stream;
// the shift on the transport's communication stream where it overlaps
// (RingOptions::overlap, RingTransport::overlapShifts), else on the
// caller's stream, one after the other with the kernels.
//
// Buffer layout: K chunks | V chunks (RingGpuSupport.h's GpuKVLayout).
// The accumulators start as the empty state (O = 0, LSE = -inf), so every
// computed pair merges the same way (a merge with the empty state returns
// the other state exactly: its weight is exp(0) = 1) and a query chunk that
// meets no key gets O = 0, LSE = -inf (or the sink's) from the last merge.
//
// Varlen batches (ringAttentionGpuVarlen) run the same schedule on packed
// chunks: chunk j of K/V (and, zigzag, of Q) packs every sequence's part j,
// so one varlen kernel call per chunk pair serves every sequence with its
// own global indices. The all-gather schedule (RingSchedule, chosen as on
// the CPU) copies each visiting chunk to its global place in full K/V
// tensors instead of computing against it, then makes one kernel call per
// local query chunk against the whole key sequence.
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
#include "RingGpuSupport.h"
#include "RingSupport.h"

#include <fmt/format.h>

#include <cstring>
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
  void initVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                  const TensorRef &o, const TensorRef *lse,
                  std::span<const int32_t> cuQ, std::span<const int32_t> cuK);
  RingStats run();

private:
  void checkCommon(const TensorRef &o, const TensorRef *lse, bool varlen);
  void allocate();
  TensorRef accO(int64_t i) const;
  TensorRef accLse(int64_t i) const;
  TensorRef mergeView(const TensorRef &t) const {
    return g_.varlen ? ring::asMergeView(t) : t;
  }
  void computePair(int64_t i, const TensorRef &kj, const TensorRef &vj,
                   const Arguments &chunkArgs, const DeviceCuSeqlens *cu);
  RingStats runRing();
  RingStats runAllGather();
  void gatherChunks(int step, const TensorRef &fullK, const TensorRef &fullV,
                    std::span<const int32_t> cuGlobal);
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
  ring::GpuGeometry g_;
  ring::GpuKVLayout layout_;
  TensorRef o_;
  const TensorRef *lse_ = nullptr;
  std::vector<TensorRef> qChunks_;
  size_t accOBytes_ = 0, accLseBytes_ = 0;
  // The travelling K/V, the partial state of one pair, the accumulators of
  // every local query chunk (chunk-major) and, varlen zigzag, the packed
  // query chunks.
  std::unique_ptr<ring::GpuTravelling> kv_;
  std::unique_ptr<StreamBuffer> partO_, partLse_, accO_, accLse_, qPacked_;
  // Varlen: the cu_seqlens of a query chunk against a key chunk, and
  // against the gathered keys (all-gather).
  std::unique_ptr<DeviceCuSeqlens> cuChunk_, cuFull_;
  RingStats stats_;
};

void GpuRingRun::checkCommon(const TensorRef &o, const TensorRef *lse,
                             bool varlen) {
  ring::checkRingKernel(
      kernel_.info().config, KernelKind::Forward, kernel_.spec(), ringSpec_,
      spec_, varlen ? "ringAttentionGpuVarlen" : "ringAttentionGpu", varlen);
  args_.validateFor(spec_.variant);
  args_.validateSinkFor(spec_, false);
  if (spec_.returnLse && !lse)
    fail("lse is required: the spec returns LSE");
  o_ = o, lse_ = spec_.returnLse ? lse : nullptr;
}

void GpuRingRun::init(const TensorRef &q, const TensorRef &k,
                      const TensorRef &v, const TensorRef &o,
                      const TensorRef *lse) {
  checkCommon(o, lse, false);
  AttentionShape sh = checkAttentionTensors(spec_, q, k, v, &o,
                                            spec_.returnLse ? lse : nullptr);
  g_ = ring::gpuGeometry(spec_, sh, transport_, options_.sharding,
                         "ringAttentionGpu");
  layout_ = {g_, spec_.dtypeK, spec_.dtypeV};
  for (int64_t i = 0; i < g_.perRank; ++i)
    qChunks_.push_back(sliceDim(q, 2, i * g_.lenQ, g_.lenQ));
  allocate();
  ring::packKV(layout_, kv_->cur(), k, v, stream_);
}

void GpuRingRun::initVarlen(const TensorRef &q, const TensorRef &k,
                            const TensorRef &v, const TensorRef &o,
                            const TensorRef *lse, std::span<const int32_t> cuQ,
                            std::span<const int32_t> cuK) {
  checkCommon(o, lse, true);
  VarlenShape sh = checkVarlenTensors(spec_, q, k, v, cuQ, cuK, &o,
                                      spec_.returnLse ? lse : nullptr);
  g_ = ring::gpuVarlenGeometry(spec_, sh, cuQ, cuK, transport_,
                               options_.sharding, "ringAttentionGpuVarlen");
  layout_ = {g_, spec_.dtypeK, spec_.dtypeV};
  cuChunk_ =
      std::make_unique<DeviceCuSeqlens>(g_.cuChunkQ, g_.cuChunkK, device_);
  allocate();
  // Query chunk i packs every sequence's part i (zigzag: a copy;
  // contiguous sharding's one chunk is the caller's q itself).
  if (g_.perRank == 1) {
    qChunks_.push_back(q);
  } else {
    size_t chunkBytes = static_cast<size_t>(g_.lenQ * g_.headsQ * g_.dqk *
                                            byteSize(spec_.dtypeQ));
    qPacked_ = std::make_unique<StreamBuffer>(
        device_, chunkBytes * static_cast<size_t>(g_.perRank), stream_);
    for (int64_t i = 0; i < g_.perRank; ++i) {
      TensorRef c = TensorRef::contiguous3(
          reinterpret_cast<void *>(qPacked_->ptr() +
                                   static_cast<size_t>(i) * chunkBytes),
          spec_.dtypeQ, {g_.lenQ, g_.headsQ, g_.dqk});
      for (size_t b = 0; b < g_.seqQ.size(); ++b)
        ring::copyTokens(q, g_.cuLocalQ[b] + i * g_.seqQ[b], c, g_.cuChunkQ[b],
                         g_.seqQ[b], stream_);
      qChunks_.push_back(c);
    }
  }
  ring::packKV(layout_, kv_->cur(), k, v, stream_);
}

void GpuRingRun::allocate() {
  auto bytes = [](int64_t elems, DType t) {
    return static_cast<size_t>(elems * byteSize(t));
  };
  kv_ = std::make_unique<ring::GpuTravelling>(device_, layout_.bytes(), stream_,
                                              false);
  int64_t rows = g_.tokensQ() * g_.headsQ; // one query chunk's rows
  accOBytes_ = bytes(rows * g_.dv, DType::F32);
  accLseBytes_ = bytes(rows, DType::F32);
  partO_ = std::make_unique<StreamBuffer>(
      device_, bytes(rows * g_.dv, spec_.dtypeO), stream_);
  partLse_ = std::make_unique<StreamBuffer>(device_, accLseBytes_, stream_);
  auto per = static_cast<size_t>(g_.perRank);
  accO_ = std::make_unique<StreamBuffer>(device_, per * accOBytes_, stream_);
  accLse_ =
      std::make_unique<StreamBuffer>(device_, per * accLseBytes_, stream_);
  const Driver &d = Driver::get();
  if (accO_->size() > 0)
    FLASHJIT_CHECK(d.cuMemsetD8Async(accO_->ptr(), 0, accO_->size(), stream_));
  if (accLse_->size() > 0)
    FLASHJIT_CHECK(d.cuMemsetD32Async(accLse_->ptr(), kMinusInfBits,
                                      accLse_->size() / 4, stream_));
}

/// The O of one query chunk at \p ptr: [B, Hq, Lq, Dv] or [Tq, Hq, Dv].
TensorRef chunkO(CUdeviceptr ptr, DType dtype, const ring::GpuGeometry &g) {
  auto *p = reinterpret_cast<void *>(ptr);
  if (g.varlen)
    return TensorRef::contiguous3(p, dtype, {g.lenQ, g.headsQ, g.dv});
  return TensorRef::contiguous(p, dtype, {g.batch, g.headsQ, g.lenQ, g.dv});
}

/// The fp32 LSE of one query chunk at \p ptr: [B, Hq, Lq] or [Hq, Tq].
TensorRef chunkLse(CUdeviceptr ptr, const ring::GpuGeometry &g) {
  auto *p = reinterpret_cast<void *>(ptr);
  if (g.varlen)
    return TensorRef::contiguous2(p, DType::F32, {g.headsQ, g.lenQ});
  return TensorRef::contiguous3(p, DType::F32, {g.batch, g.headsQ, g.lenQ});
}

TensorRef GpuRingRun::accO(int64_t i) const {
  return chunkO(accO_->ptr() + static_cast<size_t>(i) * accOBytes_, DType::F32,
                g_);
}

TensorRef GpuRingRun::accLse(int64_t i) const {
  return chunkLse(accLse_->ptr() + static_cast<size_t>(i) * accLseBytes_, g_);
}

void GpuRingRun::computePair(int64_t i, const TensorRef &kj,
                             const TensorRef &vj, const Arguments &chunkArgs,
                             const DeviceCuSeqlens *cu) {
  TensorRef o = chunkO(partO_->ptr(), spec_.dtypeO, g_);
  TensorRef lse = chunkLse(partLse_->ptr(), g_);
  const TensorRef &q = qChunks_[static_cast<size_t>(i)];
  if (cu)
    kernel_.runVarlen(q, kj, vj, o, &lse, *cu, chunkArgs, nullptr, stream_);
  else
    kernel_.run(q, kj, vj, o, &lse, chunkArgs, stream_);
  TensorRef acc = mergeView(accO(i)), accL = mergeView(accLse(i));
  ops_.mergeStates(acc, accL, mergeView(o), mergeView(lse), acc, accL, nullptr,
                   0, stream_);
}

void GpuRingRun::finish() {
  const auto *sink =
      spec_.sink ? static_cast<const float *>(args_.sink.data) : nullptr;
  int64_t sinkSize = spec_.sink ? args_.sink.size : 0;
  auto merge = [&](const TensorRef &a, const TensorRef &al, const TensorRef &o,
                   const TensorRef &l) {
    if (o.numel() > 0)
      ops_.mergeStates(std::span(&a, 1), std::span(&al, 1), o, l, sink,
                       sinkSize, stream_);
  };
  for (int64_t i = 0; i < g_.perRank; ++i) {
    TensorRef a = accO(i), al = accLse(i);
    if (!g_.varlen) {
      TensorRef o = sliceDim(o_, 2, i * g_.lenQ, g_.lenQ);
      merge(a, al, o, lse_ ? sliceDim(*lse_, 2, i * g_.lenQ, g_.lenQ) : al);
    } else if (g_.perRank == 1) { // the chunk is laid out as o itself
      merge(ring::asMergeView(a), ring::asMergeView(al), ring::asMergeView(o_),
            ring::asMergeView(lse_ ? *lse_ : al));
    } else {
      for (size_t b = 0; b < g_.seqQ.size(); ++b) {
        int64_t n = g_.seqQ[b], at = g_.cuChunkQ[b];
        int64_t start = g_.cuLocalQ[b] + i * n;
        if (n == 0 || g_.headsQ == 0)
          continue;
        TensorRef sl = sliceDim(al, 1, at, n);
        merge(ring::asMergeView(sliceDim(a, 0, at, n)), ring::asMergeView(sl),
              ring::asMergeView(sliceDim(o_, 0, start, n)),
              ring::asMergeView(lse_ ? sliceDim(*lse_, 1, start, n) : sl));
      }
    }
  }
}

RingStats GpuRingRun::run() {
  // With overlap, the shift begun before a step's work runs on the
  // transport's stream while it computes (RingGpu.h says why the two
  // buffers are race-free); without, it runs before it on stream_.
  if (g_.ranks > 1)
    stats_.overlapped = transport_.overlapShifts(options_.overlap);
  RingStats st = ring::useAllGather(options_, spec_, g_.ranks, g_.headsQ,
                                    g_.headsKV, g_.dqk, g_.dv)
                     ? runAllGather()
                     : runRing();
  // The varlen cu_seqlens are the call's device buffers (DeviceCuSeqlens),
  // freed on return: the stream must be done with them.
  if (g_.varlen)
    FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream_));
  return st;
}

RingStats GpuRingRun::runRing() {
  for (int s = 0; s < g_.ranks; ++s) {
    bool last = s == g_.ranks - 1;
    if (!last)
      kv_->start(transport_);
    ring::forEachPair(
        ringSpec_, args_, g_, options_.sharding, s,
        [&](int64_t i, int64_t j, const Arguments &ca) {
          computePair(i, layout_.chunk(kv_->cur(), false, j),
                      layout_.chunk(kv_->cur(), true, j), ca, cuChunk_.get());
        },
        stats_);
    if (!last) {
      kv_->finish(transport_);
      ++stats_.shifts;
    }
  }
  finish();
  return stats_;
}

void GpuRingRun::gatherChunks(int step, const TensorRef &fullK,
                              const TensorRef &fullV,
                              std::span<const int32_t> cuGlobal) {
  int source = (g_.rank - step + g_.ranks) % g_.ranks;
  std::vector<int64_t> theirs = rankChunks(source, g_.ranks, options_.sharding);
  for (int64_t j = 0; j < g_.perRank; ++j)
    for (int isV = 0; isV < 2; ++isV) {
      TensorRef src = layout_.chunk(kv_->cur(), isV != 0, j);
      const TensorRef &full = isV ? fullV : fullK;
      int64_t c = theirs[size_t(j)];
      if (g_.varlen) {
        for (size_t b = 0; b < g_.seqK.size(); ++b)
          ring::copyTokens(src, g_.cuChunkK[b], full,
                           cuGlobal[b] + c * g_.seqK[b], g_.seqK[b], stream_);
        continue;
      }
      // Chunk c of every (batch, head): B * Hkv rows of lenK * D elements.
      auto es = static_cast<size_t>(byteSize(src.dtype));
      size_t row = static_cast<size_t>(g_.lenK * src.shape[3]) * es;
      if (row == 0 || g_.batch * g_.headsKV == 0)
        continue;
      CUDA_MEMCPY2D m;
      std::memset(&m, 0, sizeof m);
      m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      m.srcDevice = reinterpret_cast<CUdeviceptr>(src.data);
      m.srcPitch = row;
      m.dstDevice = reinterpret_cast<CUdeviceptr>(full.data) +
                    static_cast<size_t>(c) * row;
      m.dstPitch = row * static_cast<size_t>(g_.chunks);
      m.WidthInBytes = row;
      m.Height = static_cast<size_t>(g_.batch * g_.headsKV);
      FLASHJIT_CHECK(Driver::get().cuMemcpy2DAsync(&m, stream_));
    }
}

RingStats GpuRingRun::runAllGather() {
  stats_.allGather = true;
  // Every rank's K/V chunks in global order: dense [B, Hkv, S_k, D],
  // varlen [total_k, Hkv, D] packed by the global cu_seqlens.
  std::vector<int32_t> cuGlobal{0};
  std::vector<int64_t> seqKFull;
  for (int64_t len : g_.seqK) {
    cuGlobal.push_back(static_cast<int32_t>(cuGlobal.back() + len * g_.chunks));
    seqKFull.push_back(len * g_.chunks);
  }
  // Uploaded before the first shift: the upload synchronises (DeviceBuffer),
  // which must not wait behind a shift that waits for another rank.
  if (g_.varlen)
    cuFull_ = std::make_unique<DeviceCuSeqlens>(g_.cuChunkQ, cuGlobal, device_);
  int64_t tokens = g_.varlen ? cuGlobal.back() : g_.batch * g_.chunks * g_.lenK;
  StreamBuffer kBuf(device_,
                    static_cast<size_t>(tokens * g_.headsKV * g_.dqk *
                                        byteSize(spec_.dtypeK)),
                    stream_);
  StreamBuffer vBuf(
      device_,
      static_cast<size_t>(tokens * g_.headsKV * g_.dv * byteSize(spec_.dtypeV)),
      stream_);
  auto full = [&](const StreamBuffer &buf, DType dt, int64_t dim) {
    auto *p = reinterpret_cast<void *>(buf.ptr());
    if (g_.varlen)
      return TensorRef::contiguous3(p, dt, {tokens, g_.headsKV, dim});
    return TensorRef::contiguous(
        p, dt, {g_.batch, g_.headsKV, g_.chunks * g_.lenK, dim});
  };
  TensorRef fullK = full(kBuf, spec_.dtypeK, g_.dqk);
  TensorRef fullV = full(vBuf, spec_.dtypeV, g_.dv);
  for (int s = 0; s < g_.ranks; ++s) {
    bool last = s == g_.ranks - 1;
    if (!last)
      kv_->start(transport_);
    gatherChunks(s, fullK, fullV, cuGlobal);
    if (!last) {
      kv_->finish(transport_);
      ++stats_.shifts;
    }
  }
  std::vector<int64_t> mine = rankChunks(g_.rank, g_.ranks, options_.sharding);
  for (int64_t i = 0; i < g_.perRank; ++i) {
    // Query chunk mine[i] against the whole key sequence (key chunk 0 of
    // 1): one call, tiles classified on global indices, no ring merges.
    Arguments ca =
        chunkArguments(ringSpec_, args_, mine[size_t(i)], 0, g_.chunks, 1);
    TileClass c = g_.varlen ? classifyChunkPair(ringSpec_, ca, g_.batch, 0, 0,
                                                g_.seqQ, seqKFull)
                            : classifyChunkPair(ringSpec_, ca, g_.batch,
                                                g_.lenQ, g_.chunks * g_.lenK);
    if (c == TileClass::Empty) {
      ++stats_.pairsSkipped;
      continue;
    }
    computePair(i, fullK, fullV, ca, cuFull_.get());
    ++stats_.pairsComputed;
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

RingStats ringAttentionGpuVarlen(
    const AttentionSpec &spec, const GpuAttentionKernel &kernel,
    const GpuPagedOps &ops, Device &device, RingTransport &transport,
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef *lse,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, const RingOptions &options, CUstream stream) {
  return ring::abortOnError(transport, [&] {
    device.makeCurrent();
    GpuRingRun run(spec, kernel, ops, device, transport, args, options, stream);
    run.initVarlen(q, k, v, o, lse, cuSeqlensQ, cuSeqlensK);
    return run.run();
  });
}

} // namespace flashjit::runtime
