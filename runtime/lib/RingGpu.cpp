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
  ring::GpuGeometry g_;
  ring::GpuKVLayout layout_;
  TensorRef o_;
  const TensorRef *lse_ = nullptr;
  std::vector<TensorRef> qChunks_;
  size_t accOBytes_ = 0, accLseBytes_ = 0;
  // The travelling K/V, the partial state of one pair, and the
  // accumulators of every local query chunk (chunk-major).
  std::unique_ptr<ring::GpuTravelling> kv_;
  std::unique_ptr<StreamBuffer> partO_, partLse_, accO_, accLse_;
  RingStats stats_;
};

void GpuRingRun::checkKernel() const {
  ring::checkRingKernel(kernel_.info().config, KernelKind::Forward,
                        kernel_.spec(), ringSpec_, spec_, "ringAttentionGpu");
}

void GpuRingRun::init(const TensorRef &q, const TensorRef &k,
                      const TensorRef &v, const TensorRef &o,
                      const TensorRef *lse) {
  checkKernel();
  args_.validateFor(spec_.variant);
  args_.validateSinkFor(spec_, false);
  AttentionShape sh = checkAttentionTensors(spec_, q, k, v, &o,
                                            spec_.returnLse ? lse : nullptr);
  if (spec_.returnLse && !lse)
    fail("lse is required: the spec returns LSE");
  g_ = ring::gpuGeometry(spec_, sh, transport_, options_.sharding,
                         "ringAttentionGpu");
  layout_ = {g_, spec_.dtypeK, spec_.dtypeV};
  o_ = o, lse_ = spec_.returnLse ? lse : nullptr;
  for (int64_t i = 0; i < g_.perRank; ++i)
    qChunks_.push_back(sliceDim(q, 2, i * g_.lenQ, g_.lenQ));
  allocate();
  ring::packKV(layout_, kv_->cur(), k, v, stream_);
}

void GpuRingRun::allocate() {
  auto bytes = [](int64_t elems, DType t) {
    return static_cast<size_t>(elems * byteSize(t));
  };
  kv_ = std::make_unique<ring::GpuTravelling>(device_, layout_.bytes(), stream_,
                                              false);
  int64_t rows = g_.batch * g_.headsQ * g_.lenQ; // one query chunk's rows
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

TensorRef GpuRingRun::accO(int64_t i) const {
  return TensorRef::contiguous(
      reinterpret_cast<void *>(accO_->ptr() +
                               static_cast<size_t>(i) * accOBytes_),
      DType::F32, {g_.batch, g_.headsQ, g_.lenQ, g_.dv});
}

TensorRef GpuRingRun::accLse(int64_t i) const {
  return TensorRef::contiguous3(
      reinterpret_cast<void *>(accLse_->ptr() +
                               static_cast<size_t>(i) * accLseBytes_),
      DType::F32, {g_.batch, g_.headsQ, g_.lenQ});
}

void GpuRingRun::computePair(int64_t i, const TensorRef &kj,
                             const TensorRef &vj, const Arguments &chunkArgs) {
  TensorRef o = TensorRef::contiguous(reinterpret_cast<void *>(partO_->ptr()),
                                      spec_.dtypeO,
                                      {g_.batch, g_.headsQ, g_.lenQ, g_.dv});
  TensorRef lse =
      TensorRef::contiguous3(reinterpret_cast<void *>(partLse_->ptr()),
                             DType::F32, {g_.batch, g_.headsQ, g_.lenQ});
  kernel_.run(qChunks_[static_cast<size_t>(i)], kj, vj, o, &lse, chunkArgs,
              stream_);
  TensorRef acc = accO(i), accL = accLse(i);
  ops_.mergeStates(acc, accL, o, lse, acc, accL, nullptr, 0, stream_);
}

void GpuRingRun::finish() {
  const auto *sink =
      spec_.sink ? static_cast<const float *>(args_.sink.data) : nullptr;
  int64_t sinkSize = spec_.sink ? args_.sink.size : 0;
  for (int64_t i = 0; i < g_.perRank; ++i) {
    TensorRef a = accO(i), al = accLse(i);
    TensorRef o = sliceDim(o_, 2, i * g_.lenQ, g_.lenQ);
    TensorRef l = lse_ ? sliceDim(*lse_, 2, i * g_.lenQ, g_.lenQ) : al;
    if (o.numel() > 0)
      ops_.mergeStates(std::span(&a, 1), std::span(&al, 1), o, l, sink,
                       sinkSize, stream_);
  }
}

RingStats GpuRingRun::run() {
  // With overlap, the shift begun before a step's kernels runs on the
  // transport's stream while they compute (RingGpu.h says why the two
  // buffers are race-free); without, it runs before them on stream_.
  if (g_.ranks > 1)
    stats_.overlapped = transport_.overlapShifts(options_.overlap);
  for (int s = 0; s < g_.ranks; ++s) {
    bool last = s == g_.ranks - 1;
    if (!last)
      kv_->start(transport_);
    ring::forEachPair(
        ringSpec_, args_, g_, options_.sharding, s,
        [&](int64_t i, int64_t j, const Arguments &ca) {
          computePair(i, layout_.chunk(kv_->cur(), false, j),
                      layout_.chunk(kv_->cur(), true, j), ca);
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
