//===- RingBackward.cpp - The ring's backward on the CPU ------------------===//
//
// ringAttentionBackwardCpu (Ring.h). Two buffers travel: the K/V chunks
// (shifted while the step computes, as in the forward) and the fp32 dK/dV
// accumulators of those chunks (shifted after the step has added to them).
// At step s rank r holds both for rank (r - s) mod R; after the R-th dK/dV
// shift each rank holds its own again. Both buffers carry a ring header
// naming their owner, checked at every step and at the end.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/CpuBackwardKernel.h"
#include "flashjit/runtime/Ring.h"

#include "RingSupport.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace flashjit::runtime {
namespace {

using ring::fail;

/// Converts \p src into a new fp32 tensor of the same shape (contiguous).
TensorRef toF32(const TensorRef &src, std::vector<float> &store) {
  store.assign(static_cast<size_t>(std::max<int64_t>(src.numel(), 1)), 0.0f);
  TensorRef dst = src;
  dst.dtype = DType::F32;
  dst.data = store.data();
  int64_t s = 1;
  for (int d = src.rank - 1; d >= 0; --d)
    dst.strides[d] = s, s *= src.shape[d];
  std::array<int64_t, 4> n{1, 1, 1, 1};
  for (int d = 0; d < src.rank; ++d)
    n[d] = src.shape[d];
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c)
        for (int64_t e = 0; e < n[3]; ++e)
          store[size_t(dst.offset(a, b, c, e))] =
              loadAsFloat(src.data, src.dtype, src.offset(a, b, c, e));
  return dst;
}

/// acc (fp32, contiguous in \p src's shape) += src (any dtype, strides).
void addInto(const TensorRef &src, float *acc) {
  int64_t n = src.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t d3 = i % src.shape[3], r = i / src.shape[3];
    int64_t d2 = r % src.shape[2], r2 = r / src.shape[2];
    int64_t d1 = r2 % src.shape[1], d0 = r2 / src.shape[1];
    acc[i] += loadAsFloat(src.data, src.dtype, src.offset(d0, d1, d2, d3));
  }
}

/// dst (any dtype, strides) = acc (fp32, contiguous in dst's shape).
void storeFrom(const float *acc, const TensorRef &dst) {
  int64_t n = dst.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t d3 = i % dst.shape[3], r = i / dst.shape[3];
    int64_t d2 = r % dst.shape[2], r2 = r / dst.shape[2];
    int64_t d1 = r2 % dst.shape[1], d0 = r2 / dst.shape[1];
    storeFromFloat(dst.data, dst.dtype, dst.offset(d0, d1, d2, d3), acc[i]);
  }
}

class RingBackwardRun {
public:
  RingBackwardRun(const AttentionSpec &spec, const CpuBackwardKernel &kernel,
                  RingTransport &transport, const Arguments &args,
                  const RingOptions &options)
      : spec_(spec), ringSpec_(contextParallelSpec(spec, DType::F32)),
        kernel_(kernel), t_(transport), args_(args), options_(options) {}

  void init(const TensorRef &q, const TensorRef &k, const TensorRef &v,
            const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
            const TensorRef &dq, const TensorRef &dk, const TensorRef &dv);
  DataGradients run();
  RingStats stats() const { return stats_; }

private:
  TensorRef chunk(std::vector<char> &buf, int which, int64_t j) const;
  void computePair(int64_t i, int64_t j, const Arguments &chunkArgs);
  void shift(std::vector<char> &cur, std::vector<char> &next);
  void finish();
  void addSinkGradient();

  const AttentionSpec &spec_;
  AttentionSpec ringSpec_;
  const CpuBackwardKernel &kernel_;
  RingTransport &t_;
  const Arguments &args_;
  RingOptions options_;
  int rank_ = 0, ranks_ = 1;
  int64_t perRank_ = 1, chunks_ = 1, batch_ = 0, hq_ = 0, hkv_ = 0;
  int64_t dqk_ = 0, dv_ = 0, lenQ_ = 0, lenK_ = 0;
  uint64_t layout_ = 0;
  TensorRef q_, k_, v_, o_, lse_, dO_, dqOut_, dkOut_, dvOut_;
  std::vector<float> o32Store_, dO32Store_;
  TensorRef o32_, dO32_;
  std::vector<float> dqAcc_;
  // kv: header | K chunks | V chunks (inputs' dtypes); dkv: header | dK
  // chunks | dV chunks (fp32).
  std::vector<char> kv_, kvNext_, dkv_, dkvNext_;
  size_t kChunkBytes_ = 0, vChunkBytes_ = 0;
  DataGradients grads_;
  RingStats stats_;
};

void RingBackwardRun::init(const TensorRef &q, const TensorRef &k,
                           const TensorRef &v, const TensorRef &o,
                           const TensorRef &lse, const TensorRef &dO,
                           const TensorRef &dq, const TensorRef &dk,
                           const TensorRef &dv) {
  if (!structurallyEqual(ringSpec_, kernel_.spec()))
    fail(fmt::format("backward kernel '{}' was not compiled from "
                     "contextParallelSpec(spec) of spec '{}'",
                     kernel_.spec().variant.name(), spec_.variant.name()));
  if (kernel_.config().varlen || kernel_.config().blockSparse)
    fail("ringAttentionBackwardCpu needs a dense backward kernel (compiled "
         "without varlen or blockSparse)");
  AttentionShape sh =
      checkBackwardTensors(spec_, q, k, v, o, lse, dO, dq, dk, dv);
  args_.validateFor(spec_.variant);
  args_.validateSinkFor(spec_, true);
  ranks_ = t_.size(), rank_ = t_.rank();
  checkRingRank(rank_, ranks_);
  perRank_ = options_.sharding == Sharding::Zigzag ? 2 : 1;
  chunks_ = numChunks(ranks_, options_.sharding);
  if (sh.seqlenQ % perRank_ || sh.seqlenK % perRank_)
    fail(fmt::format("local seqlen_q = {}, seqlen_k = {}: zigzag sharding "
                     "holds two equal chunks per rank (even lengths)",
                     sh.seqlenQ, sh.seqlenK));
  batch_ = sh.batch, hq_ = sh.headsQ, hkv_ = sh.headsKV;
  dqk_ = sh.headDimQK, dv_ = sh.headDimV;
  lenQ_ = sh.seqlenQ / perRank_, lenK_ = sh.seqlenK / perRank_;
  q_ = q, k_ = k, v_ = v, o_ = o, lse_ = lse, dO_ = dO;
  dqOut_ = dq, dkOut_ = dk, dvOut_ = dv;
  o32_ = toF32(o, o32Store_);
  dO32_ = toF32(dO, dO32Store_);
  ring::Fnv f;
  for (int64_t x : {int64_t(2), batch_, hq_, hkv_, dqk_, dv_, lenQ_, lenK_,
                    perRank_, int64_t(ranks_)})
    f.add(x);
  layout_ = f.h;
  dqAcc_.assign(static_cast<size_t>(q.numel()), 0.0f);
  int64_t tokens = batch_ * lenK_ * hkv_;
  kChunkBytes_ = static_cast<size_t>(tokens * dqk_ * byteSize(spec_.dtypeK));
  vChunkBytes_ = static_cast<size_t>(tokens * dv_ * byteSize(spec_.dtypeV));
  size_t perChunk = kChunkBytes_ + vChunkBytes_;
  kv_.assign(sizeof(ring::Header) + perRank_ * perChunk, 0);
  kvNext_.assign(kv_.size(), 0);
  dkv_.assign(sizeof(ring::Header) + perRank_ * tokens * (dqk_ + dv_) * 4, 0);
  dkvNext_.assign(dkv_.size(), 0);
  ring::writeHeader(kv_, rank_, ranks_, layout_);
  ring::writeHeader(dkv_, rank_, ranks_, layout_);
  for (int64_t j = 0; j < perRank_; ++j) {
    copyTensor(sliceDim(k, 2, j * lenK_, lenK_), chunk(kv_, 0, j));
    copyTensor(sliceDim(v, 2, j * lenK_, lenK_), chunk(kv_, 1, j));
  }
}

/// Chunk \p j of the K (which 0), V (1), dK (2) or dV (3) part of \p buf.
TensorRef RingBackwardRun::chunk(std::vector<char> &buf, int which,
                                 int64_t j) const {
  char *base = buf.data() + sizeof(ring::Header);
  int64_t dim = which % 2 ? dv_ : dqk_;
  if (which < 2) {
    base += which ? perRank_ * kChunkBytes_ : 0;
    base += j * (which ? vChunkBytes_ : kChunkBytes_);
    return TensorRef::contiguous(base, which ? spec_.dtypeV : spec_.dtypeK,
                                 {batch_, hkv_, lenK_, dim});
  }
  int64_t tokens = batch_ * hkv_ * lenK_;
  base += (which == 3 ? perRank_ * tokens * dqk_ : 0) * 4;
  base += j * tokens * dim * 4;
  return TensorRef::contiguous(base, DType::F32, {batch_, hkv_, lenK_, dim});
}

void RingBackwardRun::computePair(int64_t i, int64_t j,
                                  const Arguments &chunkArgs) {
  std::vector<char> pq(size_t(batch_ * hq_ * lenQ_ * dqk_ * 4)),
      pk(size_t(batch_ * hkv_ * lenK_ * dqk_ * 4)),
      pv(size_t(batch_ * hkv_ * lenK_ * dv_ * 4));
  TensorRef dqP = TensorRef::contiguous(pq.data(), spec_.dtypeQ,
                                        {batch_, hq_, lenQ_, dqk_});
  TensorRef dkP = TensorRef::contiguous(pk.data(), spec_.dtypeK,
                                        {batch_, hkv_, lenK_, dqk_});
  TensorRef dvP = TensorRef::contiguous(pv.data(), spec_.dtypeV,
                                        {batch_, hkv_, lenK_, dv_});
  DataGradients g = kernel_.run(
      sliceDim(q_, 2, i * lenQ_, lenQ_), chunk(kv_, 0, j), chunk(kv_, 1, j),
      sliceDim(o32_, 2, i * lenQ_, lenQ_), sliceDim(lse_, 2, i * lenQ_, lenQ_),
      sliceDim(dO32_, 2, i * lenQ_, lenQ_), dqP, dkP, dvP, chunkArgs,
      options_.numThreads);
  // dQ of local chunk i: [B, Hq, lenQ, D] rows i * lenQ.. of the
  // contiguous [B, Hq, Sq, D] accumulator, added row block by row block.
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t h = 0; h < hq_; ++h) {
      TensorRef rows = sliceDim(sliceDim(dqP, 0, b, 1), 1, h, 1);
      addInto(rows, dqAcc_.data() +
                        ((b * hq_ + h) * lenQ_ * perRank_ + i * lenQ_) * dqk_);
    }
  addInto(dkP, static_cast<float *>(chunk(dkv_, 2, j).data));
  addInto(dvP, static_cast<float *>(chunk(dkv_, 3, j).data));
  for (auto &[name, d] : g.dBuffers) {
    std::vector<float> &acc = grads_.dBuffers[name];
    acc.resize(d.size(), 0.0f);
    for (size_t x = 0; x < d.size(); ++x)
      acc[x] += d[x];
  }
  for (auto &[name, d] : g.dParams)
    grads_.dParams[name] += d;
  ++stats_.pairsComputed;
}

void RingBackwardRun::shift(std::vector<char> &cur, std::vector<char> &next) {
  t_.startShift(cur.data(), next.data(), cur.size());
  t_.waitShift();
  std::swap(cur, next);
  ++stats_.shifts;
}

void RingBackwardRun::addSinkGradient() {
  // d sink[h] = -sum over the rank's rows of exp(sink[h] - LSE) * D,
  // D = dO . O (the CPU backward's sinkGradient, on this rank's rows).
  const auto *sink = static_cast<const float *>(args_.sink.data);
  std::vector<double> ds(static_cast<size_t>(hq_), 0.0);
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t h = 0; h < hq_; ++h) {
      if (sink[h] == -std::numeric_limits<float>::infinity())
        continue;
      for (int64_t r = 0; r < lenQ_ * perRank_; ++r) {
        double d = 0;
        for (int64_t e = 0; e < dv_; ++e)
          d += double(loadAsFloat(o32_.data, DType::F32,
                                  o32_.offset(b, h, r, e))) *
               loadAsFloat(dO32_.data, DType::F32, dO32_.offset(b, h, r, e));
        double l = loadAsFloat(lse_.data, DType::F32, lse_.offset(b, h, r));
        ds[size_t(h)] -= std::exp(double(sink[h]) - l) * d;
      }
    }
  grads_.dSink.assign(ds.begin(), ds.end());
}

void RingBackwardRun::finish() {
  storeFrom(dqAcc_.data(), dqOut_);
  for (int64_t j = 0; j < perRank_; ++j) {
    storeFrom(static_cast<float *>(chunk(dkv_, 2, j).data),
              sliceDim(dkOut_, 2, j * lenK_, lenK_));
    storeFrom(static_cast<float *>(chunk(dkv_, 3, j).data),
              sliceDim(dvOut_, 2, j * lenK_, lenK_));
  }
  if (spec_.sink)
    addSinkGradient();
}

DataGradients RingBackwardRun::run() {
  std::vector<int64_t> mine = rankChunks(rank_, ranks_, options_.sharding);
  for (int s = 0; s < ranks_; ++s) {
    bool last = s == ranks_ - 1;
    if (!last)
      t_.startShift(kv_.data(), kvNext_.data(), kv_.size());
    int source = (rank_ - s + ranks_) % ranks_;
    ring::checkHeader(kv_, rank_, source, ranks_, layout_, "K/V");
    ring::checkHeader(dkv_, rank_, source, ranks_, layout_, "dK/dV");
    std::vector<int64_t> theirs = rankChunks(source, ranks_, options_.sharding);
    for (int64_t i = 0; i < perRank_; ++i)
      for (int64_t j = 0; j < perRank_; ++j) {
        Arguments ca = chunkArguments(ringSpec_, args_, mine[size_t(i)],
                                      theirs[size_t(j)], chunks_);
        if (classifyChunkPair(ringSpec_, ca, batch_, lenQ_, lenK_) ==
            TileClass::Empty) {
          ++stats_.pairsSkipped;
          continue;
        }
        computePair(i, j, ca);
      }
    if (!last) {
      t_.waitShift();
      std::swap(kv_, kvNext_);
      ++stats_.shifts;
    }
    // dK/dV move on after this step's additions; the last shift brings
    // them home (one rank: nothing to move).
    if (ranks_ > 1)
      shift(dkv_, dkvNext_);
  }
  ring::checkHeader(dkv_, rank_, rank_, ranks_, layout_, "dK/dV");
  finish();
  return grads_;
}

} // namespace

DataGradients ringAttentionBackwardCpu(
    const AttentionSpec &spec, const CpuBackwardKernel &kernel,
    RingTransport &transport, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &o, const TensorRef &lse,
    const TensorRef &dO, const TensorRef &dq, const TensorRef &dk,
    const TensorRef &dv, const Arguments &args, const RingOptions &options,
    RingStats *stats) {
  try {
    RingBackwardRun run(spec, kernel, transport, args, options);
    run.init(q, k, v, o, lse, dO, dq, dk, dv);
    DataGradients g = run.run();
    if (stats)
      *stats = run.stats();
    return g;
  } catch (const std::exception &e) {
    transport.abort(e.what());
    throw;
  }
}

} // namespace flashjit::runtime
