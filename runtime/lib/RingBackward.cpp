//===- RingBackward.cpp - The ring's backward on the CPU ------------------===//
//
// ringAttentionBackwardCpu and ringAttentionBackwardCpuVarlen (Ring.h). Two
// buffers travel: the K/V chunks (shifted while the step computes, as in
// the forward) and the fp32 dK/dV accumulators of those chunks (shifted
// after the step has added to them). At step s rank r holds both for rank
// (r - s) mod R; after the R-th dK/dV shift each rank holds its own again.
// Both buffers carry a ring header naming their owner, checked at every
// step and at the end.
//
// Every tensor is handled per local chunk: dense chunks are views along
// the seqlen dim; varlen chunks are packed copies of every sequence's part
// (K/V and dK/dV chunk-major in the travelling buffers, as in the forward).
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

/// The CPU ring's buffers are host memory: buffer masks may decide a
/// chunk pair (classifyChunkPair).
constexpr TileClassOptions kHostBuffers{.bufferRanges = true};

using ring::fail;

/// Calls \p fn(offset of the element in \p t, row-major linear index) for
/// every element of \p t.
template <class F> void forEach(const TensorRef &t, F &&fn) {
  std::array<int64_t, 4> n{1, 1, 1, 1};
  for (int d = 0; d < t.rank; ++d)
    n[d] = t.shape[d];
  int64_t lin = 0;
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c)
        for (int64_t e = 0; e < n[3]; ++e)
          fn(t.offset(a, b, c, e), lin++);
}

/// dst = src element by element (equal shapes), converting the dtype.
void convertInto(const TensorRef &src, const TensorRef &dst) {
  std::vector<int64_t> srcOff;
  srcOff.reserve(static_cast<size_t>(src.numel()));
  forEach(src, [&](int64_t off, int64_t) { srcOff.push_back(off); });
  forEach(dst, [&](int64_t off, int64_t i) {
    storeFromFloat(dst.data, dst.dtype, off,
                   loadAsFloat(src.data, src.dtype, srcOff[size_t(i)]));
  });
}

/// A contiguous tensor of \p shape like \p like's rank, over \p store.
TensorRef contiguousLike(const TensorRef &like, DType dtype,
                         std::vector<char> &store) {
  TensorRef t = like;
  t.dtype = dtype;
  int64_t n = 1;
  for (int d = like.rank - 1; d >= 0; --d)
    t.strides[d] = n, n *= like.shape[d];
  store.assign(static_cast<size_t>(std::max<int64_t>(n, 1) * byteSize(dtype)),
               0);
  t.data = store.data();
  return t;
}

/// acc (fp32, contiguous in \p src's shape) += src (any dtype, strides).
void addInto(const TensorRef &src, float *acc) {
  forEach(src, [&](int64_t off, int64_t i) {
    acc[i] += loadAsFloat(src.data, src.dtype, off);
  });
}

/// The geometry of one rank's call, dense or varlen.
struct Geometry {
  bool varlen = false;
  int64_t perRank = 1, batch = 0, hq = 0, hkv = 0, dqk = 0, dv = 0;
  int64_t lenQ = 0, lenK = 0;      // dense: chunk lengths; varlen: chunk totals
  std::vector<int64_t> seqQ, seqK; // varlen: each sequence's chunk lengths
  std::vector<int32_t> cuLocalQ, cuLocalK, cuChunkQ, cuChunkK;
};

class RingBackwardRun {
public:
  RingBackwardRun(const AttentionSpec &spec, const CpuBackwardKernel &kernel,
                  RingTransport &transport, const Arguments &args,
                  const RingOptions &options)
      : spec_(spec), ringSpec_(contextParallelSpec(spec, DType::F32)),
        kernel_(kernel), t_(transport), args_(args), options_(options) {}

  void checkKernel(bool varlen);
  void initDense(const AttentionShape &sh);
  void initVarlen(const VarlenShape &sh, std::span<const int32_t> cuQ,
                  std::span<const int32_t> cuK);
  void setTensors(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                  const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
                  const TensorRef &dq, const TensorRef &dk,
                  const TensorRef &dv);
  DataGradients run();
  RingStats stats() const { return stats_; }

private:
  /// Query-side chunk i of \p t (token dim \p dim) as a \p dtype tensor: a
  /// view (dense, same dtype) or a packed copy into \p store.
  TensorRef gatherQ(const TensorRef &t, int dim, int64_t i, DType dtype,
                    std::vector<char> &store);
  /// Writes fp32 \p acc, chunk-shaped, into chunk i of \p t (token dim
  /// \p dim), on the query side or (\p keys) the key side.
  void scatter(const TensorRef &acc, const TensorRef &t, int dim, int64_t i,
               bool keys);
  TensorRef kvChunkShape(DType dtype, int64_t dim, void *data) const;
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
  int64_t chunks_ = 1;
  Geometry g_;
  uint64_t layout_ = 0;
  TensorRef o_, lse_, dO_, dqOut_, dkOut_, dvOut_;
  // Per local query chunk: q, o and dO (fp32), lse and the dQ accumulator.
  std::vector<TensorRef> qC_, oC_, dOC_, lseC_, dqAccC_;
  std::vector<std::vector<char>> stores_;
  // kv: header | K chunks | V chunks (inputs' dtypes); dkv: header | dK
  // chunks | dV chunks (fp32).
  std::vector<char> kv_, kvNext_, dkv_, dkvNext_;
  size_t kChunkBytes_ = 0, vChunkBytes_ = 0;
  DataGradients grads_;
  RingStats stats_;
};

void RingBackwardRun::checkKernel(bool varlen) {
  if (!structurallyEqual(ringSpec_, kernel_.spec()))
    fail(fmt::format("backward kernel '{}' was not compiled from "
                     "contextParallelSpec(spec) of spec '{}'",
                     kernel_.spec().variant.name(), spec_.variant.name()));
  if (kernel_.config().blockSparse || kernel_.config().varlen != varlen)
    fail(varlen ? "ringAttentionBackwardCpuVarlen needs a backward kernel "
                  "compiled with CompileOptions::varlen (not blockSparse)"
                : "ringAttentionBackwardCpu needs a dense backward kernel "
                  "(compiled without varlen or blockSparse)");
  args_.validateFor(spec_.variant);
  args_.validateSinkFor(spec_, true);
  ranks_ = t_.size(), rank_ = t_.rank();
  checkRingRank(rank_, ranks_);
  g_.perRank = options_.sharding == Sharding::Zigzag ? 2 : 1;
  chunks_ = numChunks(ranks_, options_.sharding);
}

void RingBackwardRun::initDense(const AttentionShape &sh) {
  if (sh.seqlenQ % g_.perRank || sh.seqlenK % g_.perRank)
    fail(fmt::format("local seqlen_q = {}, seqlen_k = {}: zigzag sharding "
                     "holds two equal chunks per rank (even lengths)",
                     sh.seqlenQ, sh.seqlenK));
  g_.batch = sh.batch, g_.hq = sh.headsQ, g_.hkv = sh.headsKV;
  g_.dqk = sh.headDimQK, g_.dv = sh.headDimV;
  g_.lenQ = sh.seqlenQ / g_.perRank, g_.lenK = sh.seqlenK / g_.perRank;
  ring::Fnv f;
  for (int64_t x : {int64_t(2), g_.batch, g_.hq, g_.hkv, g_.dqk, g_.dv, g_.lenQ,
                    g_.lenK, g_.perRank, int64_t(ranks_)})
    f.add(x);
  layout_ = f.h;
}

void RingBackwardRun::initVarlen(const VarlenShape &sh,
                                 std::span<const int32_t> cuQ,
                                 std::span<const int32_t> cuK) {
  g_.varlen = true;
  g_.batch = sh.batch, g_.hq = sh.headsQ, g_.hkv = sh.headsKV;
  g_.dqk = sh.headDimQK, g_.dv = sh.headDimV;
  g_.cuLocalQ.assign(cuQ.begin(), cuQ.end());
  g_.cuLocalK.assign(cuK.begin(), cuK.end());
  g_.cuChunkQ = {0}, g_.cuChunkK = {0};
  ring::Fnv f;
  f.add(3);
  for (size_t b = 0; b + 1 < cuQ.size(); ++b) {
    int64_t lq = cuQ[b + 1] - cuQ[b], lk = cuK[b + 1] - cuK[b];
    if (lq % g_.perRank || lk % g_.perRank)
      fail(fmt::format("local sequence {} has {} query and {} key tokens: "
                       "zigzag sharding holds two equal chunks per rank "
                       "(even lengths)",
                       b, lq, lk));
    g_.seqQ.push_back(lq / g_.perRank);
    g_.seqK.push_back(lk / g_.perRank);
    g_.cuChunkQ.push_back(int32_t(g_.cuChunkQ.back() + lq / g_.perRank));
    g_.cuChunkK.push_back(int32_t(g_.cuChunkK.back() + lk / g_.perRank));
    f.add(lq), f.add(lk);
  }
  g_.lenQ = g_.cuChunkQ.back(), g_.lenK = g_.cuChunkK.back();
  for (int64_t x :
       {g_.batch, g_.hq, g_.hkv, g_.dqk, g_.dv, g_.perRank, int64_t(ranks_)})
    f.add(x);
  layout_ = f.h;
}

TensorRef RingBackwardRun::gatherQ(const TensorRef &t, int dim, int64_t i,
                                   DType dtype, std::vector<char> &store) {
  if (!g_.varlen) {
    TensorRef view = sliceDim(t, dim, i * g_.lenQ, g_.lenQ);
    if (dtype == t.dtype)
      return view;
    TensorRef out = contiguousLike(view, dtype, store);
    convertInto(view, out);
    return out;
  }
  TensorRef shape = sliceDim(t, dim, 0, 0);
  shape.shape[dim] = g_.lenQ;
  TensorRef out = contiguousLike(shape, dtype, store);
  for (size_t b = 0; b < g_.seqQ.size(); ++b) {
    int64_t n = g_.seqQ[b];
    convertInto(sliceDim(t, dim, g_.cuLocalQ[b] + i * n, n),
                sliceDim(out, dim, g_.cuChunkQ[b], n));
  }
  return out;
}

void RingBackwardRun::scatter(const TensorRef &acc, const TensorRef &t, int dim,
                              int64_t i, bool keys) {
  int64_t len = keys ? g_.lenK : g_.lenQ;
  if (!g_.varlen) {
    convertInto(acc, sliceDim(t, dim, i * len, len));
    return;
  }
  const std::vector<int64_t> &seq = keys ? g_.seqK : g_.seqQ;
  const std::vector<int32_t> &cuL = keys ? g_.cuLocalK : g_.cuLocalQ;
  const std::vector<int32_t> &cuC = keys ? g_.cuChunkK : g_.cuChunkQ;
  for (size_t b = 0; b < seq.size(); ++b)
    convertInto(sliceDim(acc, dim, cuC[b], seq[b]),
                sliceDim(t, dim, cuL[b] + i * seq[b], seq[b]));
}

void RingBackwardRun::setTensors(const TensorRef &q, const TensorRef &k,
                                 const TensorRef &v, const TensorRef &o,
                                 const TensorRef &lse, const TensorRef &dO,
                                 const TensorRef &dq, const TensorRef &dk,
                                 const TensorRef &dv) {
  o_ = o, lse_ = lse, dO_ = dO, dqOut_ = dq, dkOut_ = dk, dvOut_ = dv;
  int seq = g_.varlen ? 0 : 2, lseSeq = g_.varlen ? 1 : 2;
  stores_.resize(static_cast<size_t>(5 * g_.perRank));
  for (int64_t i = 0; i < g_.perRank; ++i) {
    auto store = [&](int which) -> std::vector<char> & {
      return stores_[static_cast<size_t>(5 * i + which)];
    };
    qC_.push_back(gatherQ(q, seq, i, q.dtype, store(0)));
    oC_.push_back(gatherQ(o, seq, i, DType::F32, store(1)));
    dOC_.push_back(gatherQ(dO, seq, i, DType::F32, store(2)));
    lseC_.push_back(gatherQ(lse, lseSeq, i, DType::F32, store(3)));
    TensorRef shape = sliceDim(q, seq, 0, 0);
    shape.shape[seq] = g_.lenQ;
    dqAccC_.push_back(contiguousLike(shape, DType::F32, store(4)));
  }
  int64_t tokens = (g_.varlen ? 1 : g_.batch) * g_.lenK * g_.hkv;
  kChunkBytes_ = size_t(tokens * g_.dqk * byteSize(spec_.dtypeK));
  vChunkBytes_ = size_t(tokens * g_.dv * byteSize(spec_.dtypeV));
  kv_.assign(sizeof(ring::Header) +
                 size_t(g_.perRank) * (kChunkBytes_ + vChunkBytes_),
             0);
  kvNext_.assign(kv_.size(), 0);
  dkv_.assign(sizeof(ring::Header) +
                  size_t(g_.perRank * tokens * (g_.dqk + g_.dv) * 4),
              0);
  dkvNext_.assign(dkv_.size(), 0);
  ring::writeHeader(kv_, rank_, ranks_, layout_);
  ring::writeHeader(dkv_, rank_, ranks_, layout_);
  for (int64_t j = 0; j < g_.perRank; ++j)
    for (int which = 0; which < 2; ++which) {
      const TensorRef &src = which ? v : k;
      TensorRef dst = chunk(kv_, which, j);
      if (!g_.varlen) {
        copyTensor(sliceDim(src, 2, j * g_.lenK, g_.lenK), dst);
        continue;
      }
      for (size_t b = 0; b < g_.seqK.size(); ++b)
        copyTensor(
            sliceDim(src, 0, g_.cuLocalK[b] + j * g_.seqK[b], g_.seqK[b]),
            sliceDim(dst, 0, g_.cuChunkK[b], g_.seqK[b]));
    }
}

TensorRef RingBackwardRun::kvChunkShape(DType dtype, int64_t dim,
                                        void *data) const {
  if (g_.varlen)
    return TensorRef::contiguous3(data, dtype, {g_.lenK, g_.hkv, dim});
  return TensorRef::contiguous(data, dtype, {g_.batch, g_.hkv, g_.lenK, dim});
}

/// Chunk \p j of the K (which 0), V (1), dK (2) or dV (3) part of \p buf.
TensorRef RingBackwardRun::chunk(std::vector<char> &buf, int which,
                                 int64_t j) const {
  char *base = buf.data() + sizeof(ring::Header);
  int64_t dim = which % 2 ? g_.dv : g_.dqk;
  if (which < 2) {
    base += which ? g_.perRank * kChunkBytes_ : 0;
    base += j * (which ? vChunkBytes_ : kChunkBytes_);
    return kvChunkShape(which ? spec_.dtypeV : spec_.dtypeK, dim, base);
  }
  int64_t tokens = (g_.varlen ? 1 : g_.batch) * g_.hkv * g_.lenK;
  base += (which == 3 ? g_.perRank * tokens * g_.dqk : 0) * 4;
  base += j * tokens * dim * 4;
  return kvChunkShape(DType::F32, dim, base);
}

void RingBackwardRun::computePair(int64_t i, int64_t j,
                                  const Arguments &chunkArgs) {
  auto si = static_cast<size_t>(i);
  std::vector<char> sq, sk, sv;
  TensorRef dqP = contiguousLike(dqAccC_[si], spec_.dtypeQ, sq);
  TensorRef dkP = contiguousLike(chunk(dkv_, 2, j), spec_.dtypeK, sk);
  TensorRef dvP = contiguousLike(chunk(dkv_, 3, j), spec_.dtypeV, sv);
  TensorRef kj = chunk(kv_, 0, j), vj = chunk(kv_, 1, j);
  DataGradients g =
      g_.varlen
          ? kernel_.runVarlen(qC_[si], kj, vj, oC_[si], lseC_[si], dOC_[si],
                              dqP, dkP, dvP, g_.cuChunkQ, g_.cuChunkK,
                              chunkArgs, nullptr, options_.numThreads)
          : kernel_.run(qC_[si], kj, vj, oC_[si], lseC_[si], dOC_[si], dqP, dkP,
                        dvP, chunkArgs, options_.numThreads);
  addInto(dqP, static_cast<float *>(dqAccC_[si].data));
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
  // D = dO . O (the CPU backward's sinkGradient, on this rank's rows), over
  // the fp32 chunk copies: dense [B, H, L, D], varlen [T, H, D].
  const auto *sink = static_cast<const float *>(args_.sink.data);
  std::vector<double> ds(static_cast<size_t>(g_.hq), 0.0);
  int64_t outer = g_.varlen ? 1 : g_.batch;
  for (size_t i = 0; i < oC_.size(); ++i)
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t h = 0; h < g_.hq; ++h) {
        if (sink[h] == -std::numeric_limits<float>::infinity())
          continue;
        for (int64_t r = 0; r < g_.lenQ; ++r) {
          auto at = [&](const TensorRef &t, int64_t e) {
            int64_t off = g_.varlen ? t.offset(r, h, e) : t.offset(b, h, r, e);
            return double(static_cast<const float *>(t.data)[off]);
          };
          double d = 0;
          for (int64_t e = 0; e < g_.dv; ++e)
            d += at(oC_[i], e) * at(dOC_[i], e);
          int64_t lo =
              g_.varlen ? lseC_[i].offset(h, r, 0) : lseC_[i].offset(b, h, r);
          double l = static_cast<const float *>(lseC_[i].data)[lo];
          ds[size_t(h)] -= std::exp(double(sink[h]) - l) * d;
        }
      }
  grads_.dSink.assign(ds.begin(), ds.end());
}

void RingBackwardRun::finish() {
  int seq = g_.varlen ? 0 : 2;
  for (int64_t i = 0; i < g_.perRank; ++i) {
    scatter(dqAccC_[size_t(i)], dqOut_, seq, i, false);
    scatter(chunk(dkv_, 2, i), dkOut_, seq, i, true);
    scatter(chunk(dkv_, 3, i), dvOut_, seq, i, true);
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
    for (int64_t i = 0; i < g_.perRank; ++i)
      for (int64_t j = 0; j < g_.perRank; ++j) {
        Arguments ca = chunkArguments(ringSpec_, args_, mine[size_t(i)],
                                      theirs[size_t(j)], chunks_, chunks_);
        TileClass c = g_.varlen
                          ? classifyChunkPair(ringSpec_, ca, g_.batch, 0, 0,
                                              g_.seqQ, g_.seqK, kHostBuffers)
                          : classifyChunkPair(ringSpec_, ca, g_.batch, g_.lenQ,
                                              g_.lenK, {}, {}, kHostBuffers);
        if (c == TileClass::Empty) {
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
  return ring::abortOnError(transport, [&] {
    RingBackwardRun run(spec, kernel, transport, args, options);
    run.checkKernel(false);
    run.initDense(checkBackwardTensors(spec, q, k, v, o, lse, dO, dq, dk, dv));
    run.setTensors(q, k, v, o, lse, dO, dq, dk, dv);
    DataGradients g = run.run();
    if (stats)
      *stats = run.stats();
    return g;
  });
}

DataGradients ringAttentionBackwardCpuVarlen(
    const AttentionSpec &spec, const CpuBackwardKernel &kernel,
    RingTransport &transport, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &o, const TensorRef &lse,
    const TensorRef &dO, const TensorRef &dq, const TensorRef &dk,
    const TensorRef &dv, std::span<const int32_t> cuSeqlensQ,
    std::span<const int32_t> cuSeqlensK, const Arguments &args,
    const RingOptions &options, RingStats *stats) {
  return ring::abortOnError(transport, [&] {
    RingBackwardRun run(spec, kernel, transport, args, options);
    run.checkKernel(true);
    run.initVarlen(checkVarlenBackwardTensors(spec, q, k, v, cuSeqlensQ,
                                              cuSeqlensK, o, lse, dO, dq, dk,
                                              dv),
                   cuSeqlensQ, cuSeqlensK);
    run.setTensors(q, k, v, o, lse, dO, dq, dk, dv);
    DataGradients g = run.run();
    if (stats)
      *stats = run.stats();
    return g;
  });
}

} // namespace flashjit::runtime
