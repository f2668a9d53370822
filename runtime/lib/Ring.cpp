//===- Ring.cpp - Context-parallel (ring) attention on the CPU ------------===//
//
// The ring schedule (Ring.h): R steps; at step s rank r holds the key/value
// chunks of rank (r - s) mod R in its current buffer, computes each of its
// query chunks against each of those key chunks whose mask is not empty
// (classifyChunkPair on global indices), and merges the partial state into
// its accumulator (mergeStates, exact through the LSEs), while the buffer
// travels on to rank r + 1. The buffer carries a header (source rank, ring
// size, a hash of the layout every rank must share) so that a rank given
// differently shaped tensors is named instead of computing garbage.
//
// Buffer layout: header | K chunks | V chunks, chunk-major: chunk j of K is
// one contiguous tensor, [B, Hkv, Lk, Dqk] (dense) or [Tk_j, Hkv, Dqk]
// (varlen, every sequence's part j packed), so a kernel reads it without a
// copy. The accumulators are fp32, one per local query chunk, in the same
// chunk-major form; the last merge writes them (with the sink) into the
// caller's O and LSE in their dtype.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/Ring.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/runtime/CpuAttentionKernel.h"

#include "RingSupport.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace flashjit::runtime {
namespace {

/// The CPU ring's buffers are host memory: buffer masks may decide a
/// chunk pair (classifyChunkPair).
constexpr TileClassOptions kHostBuffers{.bufferRanges = true};

using ring::fail;
using ring::Fnv;
using ring::Header;

/// One rank's call: the tensors, the chunk geometry and the accumulators.
class RingRun {
public:
  RingRun(const AttentionSpec &spec, const CpuAttentionKernel &kernel,
          RingTransport &transport, const Arguments &args,
          const RingOptions &options)
      : spec_(spec), ringSpec_(contextParallelSpec(spec, DType::F32)),
        kernel_(kernel), transport_(transport), args_(args), options_(options) {
  }

  void initDense(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                 const TensorRef &o, const TensorRef *lse);
  void initVarlen(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                  const TensorRef &o, const TensorRef *lse,
                  std::span<const int32_t> cuQ, std::span<const int32_t> cuK);
  RingStats run();
  RingStats runAllGather();

private:
  void checkCommon();
  void setChunks(int64_t localQ, int64_t localK, bool varlen);
  std::vector<int64_t> chunkLens(std::span<const int32_t> cu, const char *);
  void packKV(const TensorRef &k, const TensorRef &v);
  TensorRef kvChunk(std::vector<char> &buf, bool isV, int64_t j) const;
  TensorRef accO(int64_t i);
  TensorRef accLse(int64_t i);
  void computePair(int64_t i, const TensorRef &kj, const TensorRef &vj,
                   const Arguments &chunkArgs, std::span<const int32_t> cuK);
  void checkHeader(const std::vector<char> &buf, int source) const;
  void finish();

  const AttentionSpec &spec_;
  AttentionSpec ringSpec_;
  const CpuAttentionKernel &kernel_;
  RingTransport &transport_;
  const Arguments &args_;
  RingOptions options_;
  int rank_ = 0, ranks_ = 1;
  bool varlen_ = false;
  int64_t perRank_ = 1, chunks_ = 1;
  // Dense: batch, heads and per-chunk lengths. Varlen: per-sequence chunk
  // lengths and the chunk's cu_seqlens.
  int64_t batch_ = 0, headsQ_ = 0, headsKV_ = 0, dqk_ = 0, dv_ = 0;
  int64_t lenQ_ = 0, lenK_ = 0; // chunk lengths (dense) or chunk totals
  std::vector<int64_t> seqQ_, seqK_;
  std::vector<int32_t> cuChunkQ_, cuChunkK_, cuLocalQ_, cuLocalK_;
  TensorRef q_, o_;
  const TensorRef *lse_ = nullptr;
  std::vector<TensorRef> qChunks_;
  std::vector<std::vector<char>> qGathered_;
  std::vector<char> cur_, next_;
  size_t kBytes_ = 0, vBytes_ = 0;
  uint64_t layout_ = 0;
  std::vector<std::vector<float>> accO_, accLse_;
  std::vector<bool> hasState_;
  RingStats stats_;
};

void RingRun::checkCommon() {
  if (!structurallyEqual(ringSpec_, kernel_.spec()))
    fail(fmt::format("kernel '{}' was not compiled from "
                     "contextParallelSpec(spec) of spec '{}' (ring kernels "
                     "read global indices and write fp32 partial states)",
                     kernel_.spec().variant.name(), spec_.variant.name()));
  args_.validateFor(spec_.variant);
  args_.validateSinkFor(spec_, true);
  ranks_ = transport_.size();
  rank_ = transport_.rank();
  checkRingRank(rank_, ranks_);
  perRank_ = options_.sharding == Sharding::Zigzag ? 2 : 1;
  chunks_ = numChunks(ranks_, options_.sharding);
}

void RingRun::setChunks(int64_t localQ, int64_t localK, bool varlen) {
  if (varlen != kernel_.config().varlen)
    fail(varlen ? "ringAttentionCpuVarlen needs a kernel compiled with "
                  "CompileOptions::varlen"
                : "ringAttentionCpu needs a dense kernel (this one was "
                  "compiled with CompileOptions::varlen: "
                  "ringAttentionCpuVarlen)");
  varlen_ = varlen;
  const std::pair<const char *, int64_t> lens[] = {{"seqlen_q", localQ},
                                                   {"seqlen_k", localK}};
  for (const auto &[name, len] : lens)
    if (len % perRank_ != 0)
      fail(fmt::format("local {} = {} is odd: zigzag sharding holds two "
                       "equal chunks per rank",
                       name, len));
  int64_t globalQ = localQ / perRank_ * chunks_;
  int64_t globalK = localK / perRank_ * chunks_;
  if (std::max(globalQ, globalK) > std::numeric_limits<int32_t>::max())
    fail(fmt::format("global seqlen {} exceeds 2^31 - 1 (indices are i32)",
                     std::max(globalQ, globalK)));
}

void RingRun::initDense(const TensorRef &q, const TensorRef &k,
                        const TensorRef &v, const TensorRef &o,
                        const TensorRef *lse) {
  checkCommon();
  AttentionShape sh = checkAttentionTensors(spec_, q, k, v, &o,
                                            spec_.returnLse ? lse : nullptr);
  if (spec_.returnLse && !lse)
    fail("lse is required: the spec returns LSE");
  setChunks(sh.seqlenQ, sh.seqlenK, false);
  batch_ = sh.batch, headsQ_ = sh.headsQ, headsKV_ = sh.headsKV;
  dqk_ = sh.headDimQK, dv_ = sh.headDimV;
  lenQ_ = sh.seqlenQ / perRank_, lenK_ = sh.seqlenK / perRank_;
  q_ = q, o_ = o, lse_ = spec_.returnLse ? lse : nullptr;
  for (int64_t i = 0; i < perRank_; ++i)
    qChunks_.push_back(sliceDim(q, 2, i * lenQ_, lenQ_));
  Fnv f;
  for (int64_t x : {int64_t(0), batch_, headsQ_, headsKV_, dqk_, dv_, lenQ_,
                    lenK_, perRank_, int64_t(ranks_)})
    f.add(x);
  layout_ = f.h;
  packKV(k, v);
}

std::vector<int64_t> RingRun::chunkLens(std::span<const int32_t> cu,
                                        const char *name) {
  std::vector<int64_t> lens;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    int64_t len = cu[b + 1] - cu[b];
    if (len % perRank_ != 0)
      fail(fmt::format("{}: local sequence {} has {} tokens, odd: zigzag "
                       "sharding holds two equal chunks per rank",
                       name, b, len));
    if (len / perRank_ * chunks_ > std::numeric_limits<int32_t>::max())
      fail(fmt::format("{}: sequence {} has {} tokens over the ring, more "
                       "than 2^31 - 1 (indices are i32)",
                       name, b, len / perRank_ * chunks_));
    lens.push_back(len / perRank_);
  }
  return lens;
}

void RingRun::initVarlen(const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, const TensorRef &o,
                         const TensorRef *lse, std::span<const int32_t> cuQ,
                         std::span<const int32_t> cuK) {
  checkCommon();
  VarlenShape sh = checkVarlenTensors(spec_, q, k, v, cuQ, cuK, &o,
                                      spec_.returnLse ? lse : nullptr);
  if (spec_.returnLse && !lse)
    fail("lse is required: the spec returns LSE");
  setChunks(0, 0, true);
  seqQ_ = chunkLens(cuQ, "cu_seqlens_q");
  seqK_ = chunkLens(cuK, "cu_seqlens_k");
  batch_ = sh.batch, headsQ_ = sh.headsQ, headsKV_ = sh.headsKV;
  dqk_ = sh.headDimQK, dv_ = sh.headDimV;
  lenQ_ = sh.totalQ / perRank_, lenK_ = sh.totalK / perRank_;
  cuLocalQ_.assign(cuQ.begin(), cuQ.end());
  cuLocalK_.assign(cuK.begin(), cuK.end());
  cuChunkQ_ = {0}, cuChunkK_ = {0};
  for (size_t b = 0; b < seqQ_.size(); ++b) {
    cuChunkQ_.push_back(static_cast<int32_t>(cuChunkQ_.back() + seqQ_[b]));
    cuChunkK_.push_back(static_cast<int32_t>(cuChunkK_.back() + seqK_[b]));
  }
  q_ = q, o_ = o, lse_ = spec_.returnLse ? lse : nullptr;
  // Local query chunk i, every sequence's part i packed (a copy for zigzag;
  // contiguous sharding has one chunk: the caller's q itself).
  for (int64_t i = 0; i < perRank_; ++i) {
    if (perRank_ == 1) {
      qChunks_.push_back(q);
      continue;
    }
    qGathered_.emplace_back(
        static_cast<size_t>(lenQ_ * headsQ_ * dqk_ * byteSize(q.dtype)));
    TensorRef g = TensorRef::contiguous3(qGathered_.back().data(), q.dtype,
                                         {lenQ_, headsQ_, dqk_});
    for (size_t b = 0; b < seqQ_.size(); ++b)
      copyTensor(sliceDim(q, 0, cuQ[b] + i * seqQ_[b], seqQ_[b]),
                 sliceDim(g, 0, cuChunkQ_[b], seqQ_[b]));
    qChunks_.push_back(g);
  }
  Fnv f;
  for (int64_t x : {int64_t(1), batch_, headsQ_, headsKV_, dqk_, dv_, perRank_,
                    int64_t(ranks_)})
    f.add(x);
  for (int32_t c : cuQ)
    f.add(c);
  for (int32_t c : cuK)
    f.add(c);
  layout_ = f.h;
  packKV(k, v);
}

TensorRef RingRun::kvChunk(std::vector<char> &buf, bool isV, int64_t j) const {
  DType dt = isV ? spec_.dtypeV : spec_.dtypeK;
  int64_t dim = isV ? dv_ : dqk_;
  size_t chunkBytes = (isV ? vBytes_ : kBytes_) / static_cast<size_t>(perRank_);
  char *base = buf.data() + sizeof(Header) + (isV ? kBytes_ : 0) +
               static_cast<size_t>(j) * chunkBytes;
  if (varlen_)
    return TensorRef::contiguous3(base, dt, {lenK_, headsKV_, dim});
  return TensorRef::contiguous(base, dt, {batch_, headsKV_, lenK_, dim});
}

void RingRun::packKV(const TensorRef &k, const TensorRef &v) {
  int64_t tokens = varlen_ ? lenK_ : batch_ * lenK_;
  kBytes_ = static_cast<size_t>(perRank_ * tokens * headsKV_ * dqk_ *
                                byteSize(spec_.dtypeK));
  vBytes_ = static_cast<size_t>(perRank_ * tokens * headsKV_ * dv_ *
                                byteSize(spec_.dtypeV));
  cur_.assign(sizeof(Header) + kBytes_ + vBytes_, 0);
  next_.assign(cur_.size(), 0);
  ring::writeHeader(cur_, rank_, ranks_, layout_);
  for (int64_t j = 0; j < perRank_; ++j)
    for (int isV = 0; isV < 2; ++isV) {
      const TensorRef &src = isV ? v : k;
      TensorRef dst = kvChunk(cur_, isV, j);
      if (!varlen_) {
        copyTensor(sliceDim(src, 2, j * lenK_, lenK_), dst);
        continue;
      }
      for (size_t b = 0; b < seqK_.size(); ++b)
        copyTensor(sliceDim(src, 0, cuLocalK_[b] + j * seqK_[b], seqK_[b]),
                   sliceDim(dst, 0, cuChunkK_[b], seqK_[b]));
    }
}

TensorRef RingRun::accO(int64_t i) {
  float *p = accO_[static_cast<size_t>(i)].data();
  if (varlen_)
    return TensorRef::contiguous3(p, DType::F32, {lenQ_, headsQ_, dv_});
  return TensorRef::contiguous(p, DType::F32, {batch_, headsQ_, lenQ_, dv_});
}

TensorRef RingRun::accLse(int64_t i) {
  float *p = accLse_[static_cast<size_t>(i)].data();
  if (varlen_)
    return TensorRef::contiguous2(p, DType::F32, {headsQ_, lenQ_});
  return TensorRef::contiguous3(p, DType::F32, {batch_, headsQ_, lenQ_});
}

using ring::asMergeView;

TensorRef mergeView(const TensorRef &t, bool varlen) {
  return varlen ? asMergeView(t) : t;
}

void RingRun::computePair(int64_t i, const TensorRef &kj, const TensorRef &vj,
                          const Arguments &chunkArgs,
                          std::span<const int32_t> cuK) {
  auto si = static_cast<size_t>(i);
  TensorRef o = accO(i), lse = accLse(i);
  std::vector<float> partO, partLse;
  if (hasState_[si]) {
    partO.resize(accO_[si].size());
    partLse.resize(accLse_[si].size());
    o.data = partO.data();
    lse.data = partLse.data();
  }
  if (varlen_)
    kernel_.runVarlen(qChunks_[si], kj, vj, o, &lse, cuChunkQ_, cuK, chunkArgs,
                      nullptr, options_.numThreads);
  else
    kernel_.run(qChunks_[si], kj, vj, o, &lse, chunkArgs, options_.numThreads);
  if (hasState_[si]) {
    TensorRef acc = mergeView(accO(i), varlen_);
    TensorRef accL = mergeView(accLse(i), varlen_);
    mergeStates(acc, accL, mergeView(o, varlen_), mergeView(lse, varlen_), acc,
                accL);
  }
  hasState_[si] = true;
  ++stats_.pairsComputed;
}

void RingRun::checkHeader(const std::vector<char> &buf, int source) const {
  ring::checkHeader(buf, rank_, source, ranks_, layout_, "K/V");
}

void RingRun::finish() {
  std::span<const float> sink;
  if (spec_.sink)
    sink = {static_cast<const float *>(args_.sink.data),
            static_cast<size_t>(args_.sink.size)};
  for (int64_t i = 0; i < perRank_; ++i) {
    TensorRef a = accO(i), al = accLse(i);
    if (!varlen_) {
      TensorRef o = sliceDim(o_, 2, i * lenQ_, lenQ_);
      TensorRef l = al;
      if (lse_)
        l = sliceDim(*lse_, 2, i * lenQ_, lenQ_);
      if (o.numel() > 0)
        mergeStates(std::span(&a, 1), std::span(&al, 1), o, l, sink);
      continue;
    }
    for (size_t b = 0; b < seqQ_.size(); ++b) {
      int64_t n = seqQ_[b];
      if (n == 0 || headsQ_ == 0)
        continue;
      TensorRef sa = asMergeView(sliceDim(a, 0, cuChunkQ_[b], n));
      TensorRef sl = asMergeView(sliceDim(al, 1, cuChunkQ_[b], n));
      int64_t start = cuLocalQ_[b] + i * n;
      TensorRef so = asMergeView(sliceDim(o_, 0, start, n));
      TensorRef sol = sl;
      if (lse_)
        sol = asMergeView(sliceDim(*lse_, 1, start, n));
      mergeStates(std::span(&sa, 1), std::span(&sl, 1), so, sol, sink);
    }
  }
}

RingStats RingRun::run() {
  size_t accElems =
      static_cast<size_t>((varlen_ ? lenQ_ : batch_ * lenQ_) * headsQ_);
  for (int64_t i = 0; i < perRank_; ++i) {
    accO_.emplace_back(accElems * static_cast<size_t>(dv_), 0.0f);
    accLse_.emplace_back(accElems, -std::numeric_limits<float>::infinity());
  }
  hasState_.assign(static_cast<size_t>(perRank_), false);
  if (ring::useAllGather(options_, spec_, ranks_, headsQ_, headsKV_, dqk_, dv_))
    return runAllGather();
  std::vector<int64_t> mine = rankChunks(rank_, ranks_, options_.sharding);
  for (int s = 0; s < ranks_; ++s) {
    bool last = s == ranks_ - 1;
    if (!last)
      transport_.startShift(cur_.data(), next_.data(), cur_.size());
    int source = (rank_ - s + ranks_) % ranks_;
    checkHeader(cur_, source);
    std::vector<int64_t> theirs = rankChunks(source, ranks_, options_.sharding);
    for (int64_t i = 0; i < perRank_; ++i)
      for (int64_t j = 0; j < perRank_; ++j) {
        Arguments ca = chunkArguments(ringSpec_, args_, mine[size_t(i)],
                                      theirs[size_t(j)], chunks_, chunks_);
        TileClass c = varlen_ ? classifyChunkPair(ringSpec_, ca, batch_, 0, 0,
                                                  seqQ_, seqK_, kHostBuffers)
                              : classifyChunkPair(ringSpec_, ca, batch_, lenQ_,
                                                  lenK_, {}, {}, kHostBuffers);
        if (c == TileClass::Empty) {
          ++stats_.pairsSkipped;
          continue;
        }
        computePair(i, kvChunk(cur_, false, j), kvChunk(cur_, true, j), ca,
                    cuChunkK_);
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

RingStats RingRun::runAllGather() {
  stats_.allGather = true;
  // Every rank's K/V chunks in global order: dense [B, Hkv, S_k, D],
  // varlen [total_k, Hkv, D] packed by the global cu_seqlens.
  std::vector<int32_t> cuGlobal{0};
  for (int64_t len : seqK_)
    cuGlobal.push_back(static_cast<int32_t>(cuGlobal.back() + len * chunks_));
  std::vector<char> store[2];
  TensorRef full[2];
  for (int isV = 0; isV < 2; ++isV) {
    int64_t dim = isV ? dv_ : dqk_;
    DType dt = isV ? spec_.dtypeV : spec_.dtypeK;
    int64_t elems =
        (varlen_ ? cuGlobal.back() : batch_ * chunks_ * lenK_) * headsKV_ * dim;
    store[isV].assign(
        static_cast<size_t>(std::max<int64_t>(elems, 1) * byteSize(dt)), 0);
    full[isV] =
        varlen_
            ? TensorRef::contiguous3(store[isV].data(), dt,
                                     {cuGlobal.back(), headsKV_, dim})
            : TensorRef::contiguous(store[isV].data(), dt,
                                    {batch_, headsKV_, chunks_ * lenK_, dim});
  }
  for (int s = 0; s < ranks_; ++s) {
    bool last = s == ranks_ - 1;
    if (!last)
      transport_.startShift(cur_.data(), next_.data(), cur_.size());
    int source = (rank_ - s + ranks_) % ranks_;
    checkHeader(cur_, source);
    std::vector<int64_t> theirs = rankChunks(source, ranks_, options_.sharding);
    for (int64_t j = 0; j < perRank_; ++j)
      for (int isV = 0; isV < 2; ++isV) {
        TensorRef src = kvChunk(cur_, isV, j);
        int64_t c = theirs[size_t(j)];
        if (!varlen_) {
          copyTensor(src, sliceDim(full[isV], 2, c * lenK_, lenK_));
          continue;
        }
        for (size_t b = 0; b < seqK_.size(); ++b)
          copyTensor(
              sliceDim(src, 0, cuChunkK_[b], seqK_[b]),
              sliceDim(full[isV], 0, cuGlobal[b] + c * seqK_[b], seqK_[b]));
      }
    if (!last) {
      transport_.waitShift();
      std::swap(cur_, next_);
      ++stats_.shifts;
    }
  }
  std::vector<int64_t> mine = rankChunks(rank_, ranks_, options_.sharding);
  std::vector<int64_t> seqKFull;
  for (int64_t len : seqK_)
    seqKFull.push_back(len * chunks_);
  for (int64_t i = 0; i < perRank_; ++i) {
    // Query chunk mine[i] of chunks_ against the whole key sequence (key
    // chunk 0 of 1): one call, the kernel's tiles classified on global
    // indices, no merge.
    Arguments ca =
        chunkArguments(ringSpec_, args_, mine[size_t(i)], 0, chunks_, 1);
    TileClass c =
        varlen_ ? classifyChunkPair(ringSpec_, ca, batch_, 0, 0, seqQ_,
                                    seqKFull, kHostBuffers)
                : classifyChunkPair(ringSpec_, ca, batch_, lenQ_,
                                    chunks_ * lenK_, {}, {}, kHostBuffers);
    if (c == TileClass::Empty) {
      ++stats_.pairsSkipped;
      continue;
    }
    computePair(i, full[0], full[1], ca, cuGlobal);
  }
  finish();
  return stats_;
}

} // namespace

RingStats ringAttentionCpu(const AttentionSpec &spec,
                           const CpuAttentionKernel &kernel,
                           RingTransport &transport, const TensorRef &q,
                           const TensorRef &k, const TensorRef &v,
                           const TensorRef &o, const TensorRef *lse,
                           const Arguments &args, const RingOptions &options) {
  return ring::abortOnError(transport, [&] {
    RingRun run(spec, kernel, transport, args, options);
    run.initDense(q, k, v, o, lse);
    return run.run();
  });
}

RingStats ringAttentionCpuVarlen(
    const AttentionSpec &spec, const CpuAttentionKernel &kernel,
    RingTransport &transport, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &o, const TensorRef *lse,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, const RingOptions &options) {
  return ring::abortOnError(transport, [&] {
    RingRun run(spec, kernel, transport, args, options);
    run.initVarlen(q, k, v, o, lse, cuSeqlensQ, cuSeqlensK);
    return run.run();
  });
}

} // namespace flashjit::runtime
