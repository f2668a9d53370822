//===- RingBackwardGpu.cpp - The ring's backward on a GPU -----------------===//
//
// ringAttentionBackwardGpu (RingGpu.h): RingBackward.cpp's schedule on
// device memory. Two buffers travel: the K/V chunks (shifted while the
// step computes, as in the forward) and the fp32 dK/dV accumulators of
// those chunks (shifted after the step has added to them). At step s rank
// r holds both for rank (r - s) mod R; after the R-th dK/dV shift each
// rank holds its own again. Both are laid out as RingGpuSupport.h's
// GpuKVLayout (dK chunks | dV chunks in fp32). Unlike the CPU ring the
// buffers carry no header: every rank must pass equal shapes.
//
// Every pair's partial dQ, dK and dV are the backward kernel's 16-bit
// outputs, added to the fp32 accumulators by GpuPagedOps::accumulate (the
// CPU ring rounds its partials to the inputs' dtype too): each kernel call
// and addition is enqueued on the caller's stream in one fixed order.
//
// Varlen batches (ringAttentionBackwardGpuVarlen) run the same schedule on
// packed chunks, as the forward: chunk j of K/V and of dK/dV packs every
// sequence's part j, and under zigzag the query side (q, o, dO, lse) is
// packed per chunk too; the gradients go back per sequence at the end.
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

/// One rank's call.
class GpuRingBackwardRun {
public:
  GpuRingBackwardRun(const AttentionSpec &spec,
                     const GpuAttentionBackwardKernel &kernel,
                     const GpuPagedOps &ops, Device &device,
                     RingTransport &transport, const Arguments &args,
                     const RingOptions &options,
                     const GpuBackwardOptions &backward, CUstream stream)
      : spec_(spec), ringSpec_(contextParallelSpec(spec, spec.dtypeO)),
        kernel_(kernel), ops_(ops), device_(device), transport_(transport),
        args_(args), options_(options), backward_(backward), stream_(stream) {}

  void init(const TensorRef &q, const TensorRef &k, const TensorRef &v,
            const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
            const TensorRef &dq, const TensorRef &dk, const TensorRef &dv);
  void initVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                  const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
                  const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                  std::span<const int32_t> cuQ, std::span<const int32_t> cuK);
  DataGradients run();
  const RingStats &stats() const { return stats_; }

private:
  void checkKernel(bool varlen) const;
  void allocate();
  void packQuerySide(const TensorRef &q, const TensorRef &o,
                     const TensorRef &dO, const TensorRef &lse);
  TensorRef part(const StreamBuffer &buf, DType dtype, int64_t heads,
                 int64_t len, int64_t dim) const;
  void store(const TensorRef &acc, const TensorRef &out, int64_t i,
             bool keys) const;
  TensorRef dqAcc(int64_t i) const;
  void computePair(int64_t i, int64_t j, const Arguments &chunkArgs);
  void finish();

  const AttentionSpec &spec_;
  AttentionSpec ringSpec_;
  const GpuAttentionBackwardKernel &kernel_;
  const GpuPagedOps &ops_;
  Device &device_;
  RingTransport &transport_;
  const Arguments &args_;
  RingOptions options_;
  GpuBackwardOptions backward_;
  CUstream stream_;
  ring::GpuGeometry g_;
  ring::GpuKVLayout kvLayout_, dkvLayout_;
  TensorRef dq_, dk_, dv_;
  // Per local query chunk: views of q, o, dO and lse.
  std::vector<TensorRef> qC_, oC_, dOC_, lseC_;
  std::unique_ptr<ring::GpuTravelling> kv_, dkv_;
  // One pair's 16-bit gradients and the fp32 dQ accumulators (one per
  // local query chunk, chunk-major).
  std::unique_ptr<StreamBuffer> partDq_, partDk_, partDv_, dqAcc_;
  // Varlen zigzag: the packed query-side chunks (q, o, dO, lse per chunk);
  // varlen: the cu_seqlens of a query chunk against a key chunk.
  std::unique_ptr<StreamBuffer> qSide_;
  std::unique_ptr<DeviceCuSeqlens> cuChunk_;
  size_t dqAccBytes_ = 0;
  DataGradients grads_;
  RingStats stats_;
};

void GpuRingBackwardRun::checkKernel(bool varlen) const {
  ring::checkRingKernel(kernel_.info().config, KernelKind::Backward,
                        kernel_.spec(), ringSpec_, spec_,
                        varlen ? "ringAttentionBackwardGpuVarlen"
                               : "ringAttentionBackwardGpu",
                        varlen);
  if (spec_.sink)
    fail("ringAttentionBackwardGpu: spec.sink is not supported yet (dQ, "
         "dK and dV need nothing new; d sink is GpuSinkGradient's on each "
         "rank's o, dO and lse, summed over the ranks)");
}

void GpuRingBackwardRun::init(const TensorRef &q, const TensorRef &k,
                              const TensorRef &v, const TensorRef &o,
                              const TensorRef &lse, const TensorRef &dO,
                              const TensorRef &dq, const TensorRef &dk,
                              const TensorRef &dv) {
  checkKernel(false);
  args_.validateFor(spec_.variant);
  AttentionShape sh =
      checkBackwardTensors(spec_, q, k, v, o, lse, dO, dq, dk, dv);
  g_ = ring::gpuGeometry(spec_, sh, transport_, options_.sharding,
                         "ringAttentionBackwardGpu");
  kvLayout_ = {g_, spec_.dtypeK, spec_.dtypeV};
  dkvLayout_ = {g_, DType::F32, DType::F32};
  dq_ = dq, dk_ = dk, dv_ = dv;
  for (int64_t i = 0; i < g_.perRank; ++i) {
    qC_.push_back(sliceDim(q, 2, i * g_.lenQ, g_.lenQ));
    oC_.push_back(sliceDim(o, 2, i * g_.lenQ, g_.lenQ));
    dOC_.push_back(sliceDim(dO, 2, i * g_.lenQ, g_.lenQ));
    lseC_.push_back(sliceDim(lse, 2, i * g_.lenQ, g_.lenQ));
  }
  allocate();
  ring::packKV(kvLayout_, kv_->cur(), k, v, stream_);
}

void GpuRingBackwardRun::initVarlen(const TensorRef &q, const TensorRef &k,
                                    const TensorRef &v, const TensorRef &o,
                                    const TensorRef &lse, const TensorRef &dO,
                                    const TensorRef &dq, const TensorRef &dk,
                                    const TensorRef &dv,
                                    std::span<const int32_t> cuQ,
                                    std::span<const int32_t> cuK) {
  checkKernel(true);
  args_.validateFor(spec_.variant);
  VarlenShape sh = checkVarlenBackwardTensors(spec_, q, k, v, cuQ, cuK, o, lse,
                                              dO, dq, dk, dv);
  g_ = ring::gpuVarlenGeometry(spec_, sh, cuQ, cuK, transport_,
                               options_.sharding,
                               "ringAttentionBackwardGpuVarlen");
  kvLayout_ = {g_, spec_.dtypeK, spec_.dtypeV};
  dkvLayout_ = {g_, DType::F32, DType::F32};
  dq_ = dq, dk_ = dk, dv_ = dv;
  cuChunk_ =
      std::make_unique<DeviceCuSeqlens>(g_.cuChunkQ, g_.cuChunkK, device_);
  allocate();
  packQuerySide(q, o, dO, lse);
  ring::packKV(kvLayout_, kv_->cur(), k, v, stream_);
}

void GpuRingBackwardRun::packQuerySide(const TensorRef &q, const TensorRef &o,
                                       const TensorRef &dO,
                                       const TensorRef &lse) {
  if (g_.perRank == 1) { // the one chunk is laid out as the caller's tensors
    qC_ = {q}, oC_ = {o}, dOC_ = {dO}, lseC_ = {lse};
    return;
  }
  // Chunk i packs every sequence's part i: q, o, dO [Tq, Hq, D] and lse
  // [Hq, Tq], one after the other per chunk.
  const int64_t t = g_.lenQ, h = g_.headsQ;
  auto bytes = [&](int64_t dim, DType dt) {
    return static_cast<size_t>(t * h * dim * byteSize(dt));
  };
  size_t bq = bytes(g_.dqk, spec_.dtypeQ), bo = bytes(g_.dv, spec_.dtypeO);
  // Each chunk's part starts 256-byte aligned (the kernels need 16-byte
  // aligned rows; the LSE's size is any multiple of 4).
  size_t bl = bytes(1, DType::F32), per = (bq + 2 * bo + bl + 255) / 256 * 256;
  qSide_ = std::make_unique<StreamBuffer>(
      device_, per * static_cast<size_t>(g_.perRank), stream_);
  for (int64_t i = 0; i < g_.perRank; ++i) {
    CUdeviceptr base = qSide_->ptr() + static_cast<size_t>(i) * per;
    auto at = [](CUdeviceptr p) { return reinterpret_cast<void *>(p); };
    qC_.push_back(
        TensorRef::contiguous3(at(base), spec_.dtypeQ, {t, h, g_.dqk}));
    oC_.push_back(
        TensorRef::contiguous3(at(base + bq), spec_.dtypeO, {t, h, g_.dv}));
    dOC_.push_back(TensorRef::contiguous3(at(base + bq + bo), spec_.dtypeO,
                                          {t, h, g_.dv}));
    lseC_.push_back(
        TensorRef::contiguous2(at(base + bq + 2 * bo), DType::F32, {h, t}));
    for (size_t b = 0; b < g_.seqQ.size(); ++b) {
      int64_t n = g_.seqQ[b], from = g_.cuLocalQ[b] + i * n;
      ring::copyTokens(q, from, qC_.back(), g_.cuChunkQ[b], n, stream_);
      ring::copyTokens(o, from, oC_.back(), g_.cuChunkQ[b], n, stream_);
      ring::copyTokens(dO, from, dOC_.back(), g_.cuChunkQ[b], n, stream_);
      ring::copyLseTokens(lse, from, lseC_.back(), g_.cuChunkQ[b], n, stream_);
    }
  }
}

void GpuRingBackwardRun::allocate() {
  auto bytes = [](int64_t elems, DType t) {
    return static_cast<size_t>(elems * byteSize(t));
  };
  kv_ = std::make_unique<ring::GpuTravelling>(device_, kvLayout_.bytes(),
                                              stream_, false);
  dkv_ = std::make_unique<ring::GpuTravelling>(device_, dkvLayout_.bytes(),
                                               stream_, true);
  int64_t rowsQ = g_.tokensQ() * g_.headsQ;
  int64_t rowsK = g_.tokensK() * g_.headsKV;
  partDq_ = std::make_unique<StreamBuffer>(
      device_, bytes(rowsQ * g_.dqk, spec_.dtypeQ), stream_);
  partDk_ = std::make_unique<StreamBuffer>(
      device_, bytes(rowsK * g_.dqk, spec_.dtypeK), stream_);
  partDv_ = std::make_unique<StreamBuffer>(
      device_, bytes(rowsK * g_.dv, spec_.dtypeV), stream_);
  dqAccBytes_ = bytes(rowsQ * g_.dqk, DType::F32);
  dqAcc_ = std::make_unique<StreamBuffer>(
      device_, static_cast<size_t>(g_.perRank) * dqAccBytes_, stream_);
  if (dqAcc_->size() > 0)
    FLASHJIT_CHECK(Driver::get().cuMemsetD8Async(dqAcc_->ptr(), 0,
                                                 dqAcc_->size(), stream_));
}

TensorRef GpuRingBackwardRun::part(const StreamBuffer &buf, DType dtype,
                                   int64_t heads, int64_t len,
                                   int64_t dim) const {
  if (g_.varlen)
    return TensorRef::contiguous3(reinterpret_cast<void *>(buf.ptr()), dtype,
                                  {len, heads, dim});
  return TensorRef::contiguous(reinterpret_cast<void *>(buf.ptr()), dtype,
                               {g_.batch, heads, len, dim});
}

TensorRef GpuRingBackwardRun::dqAcc(int64_t i) const {
  auto *p = reinterpret_cast<void *>(dqAcc_->ptr() +
                                     static_cast<size_t>(i) * dqAccBytes_);
  if (g_.varlen)
    return TensorRef::contiguous3(p, DType::F32, {g_.lenQ, g_.headsQ, g_.dqk});
  return TensorRef::contiguous(p, DType::F32,
                               {g_.batch, g_.headsQ, g_.lenQ, g_.dqk});
}

void GpuRingBackwardRun::computePair(int64_t i, int64_t j,
                                     const Arguments &chunkArgs) {
  auto si = static_cast<size_t>(i);
  TensorRef pdq = part(*partDq_, spec_.dtypeQ, g_.headsQ, g_.lenQ, g_.dqk);
  TensorRef pdk = part(*partDk_, spec_.dtypeK, g_.headsKV, g_.lenK, g_.dqk);
  TensorRef pdv = part(*partDv_, spec_.dtypeV, g_.headsKV, g_.lenK, g_.dv);
  TensorRef kj = kvLayout_.chunk(kv_->cur(), false, j);
  TensorRef vj = kvLayout_.chunk(kv_->cur(), true, j);
  DataGradients g =
      cuChunk_ ? kernel_.runVarlen(qC_[si], kj, vj, oC_[si], lseC_[si],
                                   dOC_[si], pdq, pdk, pdv, *cuChunk_,
                                   chunkArgs, backward_, stream_)
               : kernel_.run(qC_[si], kj, vj, oC_[si], lseC_[si], dOC_[si], pdq,
                             pdk, pdv, chunkArgs, backward_, stream_);
  ops_.accumulate(pdq, dqAcc(i), true, stream_);
  ops_.accumulate(pdk, dkvLayout_.chunk(dkv_->cur(), false, j), true, stream_);
  ops_.accumulate(pdv, dkvLayout_.chunk(dkv_->cur(), true, j), true, stream_);
  for (auto &[name, d] : g.dBuffers) {
    std::vector<float> &acc = grads_.dBuffers[name];
    acc.resize(d.size(), 0.0f);
    for (size_t x = 0; x < d.size(); ++x)
      acc[x] += d[x];
  }
  for (auto &[name, d] : g.dParams)
    grads_.dParams[name] += d;
}

void GpuRingBackwardRun::store(const TensorRef &acc, const TensorRef &out,
                               int64_t i, bool keys) const {
  int64_t len = keys ? g_.lenK : g_.lenQ;
  if (!g_.varlen) {
    ops_.accumulate(acc, sliceDim(out, 2, i * len, len), false, stream_);
    return;
  }
  if (g_.perRank == 1) { // the chunk is laid out as out itself
    if (acc.numel() > 0)
      ops_.accumulate(acc, out, false, stream_);
    return;
  }
  const std::vector<int64_t> &seq = keys ? g_.seqK : g_.seqQ;
  const std::vector<int32_t> &cuL = keys ? g_.cuLocalK : g_.cuLocalQ;
  const std::vector<int32_t> &cuC = keys ? g_.cuChunkK : g_.cuChunkQ;
  for (size_t b = 0; b < seq.size(); ++b)
    if (seq[b] > 0 && acc.shape[1] > 0)
      ops_.accumulate(sliceDim(acc, 0, cuC[b], seq[b]),
                      sliceDim(out, 0, cuL[b] + i * seq[b], seq[b]), false,
                      stream_);
}

void GpuRingBackwardRun::finish() {
  for (int64_t i = 0; i < g_.perRank; ++i) {
    store(dqAcc(i), dq_, i, false);
    store(dkvLayout_.chunk(dkv_->cur(), false, i), dk_, i, true);
    store(dkvLayout_.chunk(dkv_->cur(), true, i), dv_, i, true);
  }
}

DataGradients GpuRingBackwardRun::run() {
  // With overlap the K/V shift runs while the step computes; the dK/dV
  // shift needs the step's additions and the next step's too need it, so
  // it overlaps nothing (it only runs on the transport's stream).
  if (g_.ranks > 1)
    stats_.overlapped = transport_.overlapShifts(options_.overlap);
  for (int s = 0; s < g_.ranks; ++s) {
    bool last = s == g_.ranks - 1;
    if (!last)
      kv_->start(transport_);
    ring::forEachPair(
        ringSpec_, args_, g_, options_.sharding, s,
        [&](int64_t i, int64_t j, const Arguments &ca) {
          computePair(i, j, ca);
        },
        stats_);
    if (!last) {
      kv_->finish(transport_);
      ++stats_.shifts;
    }
    // dK/dV move on after this step's additions; the last shift brings
    // them home (one rank: nothing to move).
    if (g_.ranks > 1) {
      dkv_->start(transport_);
      dkv_->finish(transport_);
      ++stats_.shifts;
    }
  }
  finish();
  // The varlen cu_seqlens are the call's device buffers (DeviceCuSeqlens),
  // freed on return: the stream must be done with them.
  if (cuChunk_)
    FLASHJIT_CHECK(Driver::get().cuStreamSynchronize(stream_));
  return grads_;
}

} // namespace

DataGradients ringAttentionBackwardGpuVarlen(
    const AttentionSpec &spec, const GpuAttentionBackwardKernel &kernel,
    const GpuPagedOps &ops, Device &device, RingTransport &transport,
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, const RingOptions &options,
    const GpuBackwardOptions &backward, CUstream stream, RingStats *stats) {
  return ring::abortOnError(transport, [&] {
    device.makeCurrent();
    GpuRingBackwardRun run(spec, kernel, ops, device, transport, args, options,
                           backward, stream);
    run.initVarlen(q, k, v, o, lse, dO, dq, dk, dv, cuSeqlensQ, cuSeqlensK);
    DataGradients g = run.run();
    if (stats)
      *stats = run.stats();
    return g;
  });
}

DataGradients ringAttentionBackwardGpu(
    const AttentionSpec &spec, const GpuAttentionBackwardKernel &kernel,
    const GpuPagedOps &ops, Device &device, RingTransport &transport,
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const Arguments &args, const RingOptions &options,
    const GpuBackwardOptions &backward, CUstream stream, RingStats *stats) {
  return ring::abortOnError(transport, [&] {
    device.makeCurrent();
    GpuRingBackwardRun run(spec, kernel, ops, device, transport, args, options,
                           backward, stream);
    run.init(q, k, v, o, lse, dO, dq, dk, dv);
    DataGradients g = run.run();
    if (stats)
      *stats = run.stats();
    return g;
  });
}

} // namespace flashjit::runtime
