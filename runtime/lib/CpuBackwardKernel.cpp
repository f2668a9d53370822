//===- CpuBackwardKernel.cpp - Running generated CPU backward kernels -----===//
//
// Checks the caller's tensors, lays out the backward argument list
// (KernelAbi.h, abi::bwd), transposes block masks for the K/V-outer kernel,
// runs both kernels over LLVM's thread pool and reduces the buffer and
// parameter gradients of fixed item ranges in order. No MLIR here.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/CpuBackwardKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Types.h"
#include "flashjit/runtime/KernelAbi.h"

#include <fmt/format.h>
#include <llvm/Support/ThreadPool.h>
#include <llvm/Support/Threading.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

namespace flashjit::runtime {

namespace {

using abi::i64Slot;
using abi::ptrSlot;
using abi::scalarSlot;
using abi::Slot;

/// Partial sums of the buffer and parameter gradients: at most this many
/// item ranges, and at most kMaxScratchFloats floats over all of them.
constexpr int64_t kMaxGradRanges = 64;
constexpr int64_t kMaxScratchFloats = int64_t{1} << 26;

llvm::DefaultThreadPool &threadPool() {
  static llvm::DefaultThreadPool pool(llvm::hardware_concurrency());
  return pool;
}

void call(CpuKernelFn fn, std::vector<Slot> slots, int64_t begin, int64_t end) {
  slots.push_back(i64Slot(begin));
  slots.push_back(i64Slot(end));
  std::vector<void *> ptrs(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    ptrs[i] = &slots[i];
  fn(ptrs.data());
}

/// Runs \p ranges item ranges (range r = items [items * r / ranges,
/// items * (r + 1) / ranges)) over the pool; \p slotsFor gives the
/// arguments of range r (without the item bounds).
void runRanges(CpuKernelFn fn, int64_t items, int64_t ranges, int numThreads,
               const std::function<std::vector<Slot>(int64_t)> &slotsFor) {
  llvm::DefaultThreadPool &pool = threadPool();
  int64_t threads = numThreads == 0 ? pool.getMaxConcurrency() : numThreads;
  auto one = [&](int64_t r) {
    call(fn, slotsFor(r), items * r / ranges, items * (r + 1) / ranges);
  };
  if (threads <= 1 || ranges <= 1) {
    for (int64_t r = 0; r < ranges; ++r)
      one(r);
    return;
  }
  llvm::ThreadPoolTaskGroup group(pool);
  for (int64_t r = 0; r < ranges; ++r)
    group.async([&one, r] { one(r); });
  group.wait();
}

template <class Decl> std::vector<Decl> sortedByName(std::vector<Decl> d) {
  std::sort(d.begin(), d.end(),
            [](const Decl &a, const Decl &b) { return a.name < b.name; });
  return d;
}

/// The BlockMask's lists transposed for the K/V-outer kernel: row (b', h',
/// kv tile) lists the q tiles (partial, then full) in increasing order.
struct TransposedMask {
  std::vector<int32_t> num, idx, fullNum, fullIdx;
};

TransposedMask transpose(const BlockMask &bm) {
  TransposedMask t;
  int64_t rows = bm.batch * bm.heads * bm.numKvTiles;
  t.num.assign(rows, 0);
  t.fullNum.assign(rows, 0);
  t.idx.assign(std::max<int64_t>(rows * bm.numQTiles, 1), 0);
  t.fullIdx.assign(std::max<int64_t>(rows * bm.numQTiles, 1), 0);
  for (int64_t b = 0; b < bm.batch; ++b)
    for (int64_t h = 0; h < bm.heads; ++h)
      for (int64_t m = 0; m < bm.numQTiles; ++m) {
        int64_t row = bm.row(b, h, m);
        auto add = [&](const std::vector<int32_t> &n,
                       const std::vector<int32_t> &ix, std::vector<int32_t> &tn,
                       std::vector<int32_t> &tix) {
          for (int32_t e = 0; e < n[row]; ++e) {
            int64_t kt = ix[row * bm.numKvTiles + e];
            if (kt < 0 || kt >= bm.numKvTiles)
              continue; // checkBlockMaskFor rejects these
            int64_t trow = (b * bm.heads + h) * bm.numKvTiles + kt;
            tix[trow * bm.numQTiles + tn[trow]++] = static_cast<int32_t>(m);
          }
        };
        add(bm.kvNumBlocks, bm.kvIndices, t.num, t.idx);
        add(bm.fullKvNumBlocks, bm.fullKvIndices, t.fullNum, t.fullIdx);
      }
  return t;
}

/// One checked backward call.
struct BackwardCall {
  const TensorRef *q, *k, *v, *o, *lse, *dO, *dq, *dk, *dv;
  /// q, k, v, o [4], lse [3], dO, dq, dk, dv [4]: 35 strides.
  std::array<int64_t, 35> strides;
  int64_t batch, seqlenQ, seqlenK;
  const int32_t *cuSeqlensQ = nullptr, *cuSeqlensK = nullptr;
  const BlockMask *blockMask = nullptr;
};

struct View {
  const AttentionSpec &spec;
  const KernelConfig &config;
  CpuKernelFn dkdv, dq;
  const std::vector<BufferDecl> &buffers;
  const std::vector<ParamDecl> &params;
};

/// d sink[h] = -sum over batch and rows i of exp(sink[h] - LSE_i) * D_i,
/// D_i = dO_i . O_i, from the forward's O and LSE (which includes the sink),
/// summed in double in a fixed order (deterministic). A sink of -inf has
/// gradient 0. O(rows * head_dim_v): no kernel needed.
std::vector<float> sinkGradient(const View &K, const BackwardCall &c,
                                const Arguments &args) {
  const float *sink = static_cast<const float *>(args.sink.data);
  const auto &st = c.strides; // q k v o [4], lse [3], dO dq dk dv [4]
  const int64_t dv = K.spec.headDimV;
  std::vector<float> out(K.spec.headsQ, 0.0f);
  for (int64_t h = 0; h < K.spec.headsQ; ++h) {
    if (sink[h] == -std::numeric_limits<float>::infinity())
      continue;
    double sum = 0.0;
    for (int64_t b = 0; b < c.batch; ++b) {
      // Varlen: the sequence's rows start at token cu_seqlens_q[b] (batch
      // strides are 0); dense: at batch b.
      int64_t first = c.cuSeqlensQ ? c.cuSeqlensQ[b] : 0;
      int64_t rows =
          c.cuSeqlensQ ? c.cuSeqlensQ[b + 1] - c.cuSeqlensQ[b] : c.seqlenQ;
      for (int64_t i = first; i < first + rows; ++i) {
        int64_t oAt = b * st[12] + h * st[13] + i * st[14];
        int64_t dAt = b * st[19] + h * st[20] + i * st[21];
        double d = 0.0;
        for (int64_t e = 0; e < dv; ++e)
          d += double(loadAsFloat(c.o->data, c.o->dtype, oAt + e * st[15])) *
               double(loadAsFloat(c.dO->data, c.dO->dtype, dAt + e * st[22]));
        double lse = loadAsFloat(c.lse->data, c.lse->dtype,
                                 b * st[16] + h * st[17] + i * st[18]);
        sum -= std::exp(double(sink[h]) - lse) * d;
      }
    }
    out[h] = static_cast<float>(sum);
  }
  return out;
}

DataGradients launch(const View &K, const BackwardCall &c,
                     const Arguments &args, int numThreads) {
  args.validateFor(K.spec.variant);
  args.validateSinkFor(K.spec, /*hostValues=*/true);
  if (numThreads < 0)
    throw UserError(fmt::format("numThreads = {} must be >= 0", numThreads));
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (c.seqlenQ > kMax || c.seqlenK > kMax || c.batch > kMax)
    throw UserError(fmt::format("batch, seqlen_q and seqlen_k must fit in "
                                "i32 (the DSL's index type), got {}, {}, {}",
                                c.batch, c.seqlenQ, c.seqlenK));
  // Gradient layout: every f32 buffer, then one float per parameter.
  int64_t gradFloats = 0;
  std::vector<int64_t> bufOffset;
  for (const BufferDecl &d : K.buffers) {
    bufOffset.push_back(gradFloats);
    if (d.elementType == ScalarType::Float32)
      gradFloats += args.buffers.at(d.name).size;
  }
  int64_t paramOffset = gradFloats;
  gradFloats += static_cast<int64_t>(K.params.size());

  int64_t nMT = (c.seqlenQ + K.config.blockM() - 1) / K.config.blockM();
  int64_t nNT = (c.seqlenK + K.config.blockN - 1) / K.config.blockN;
  int64_t qItems = c.batch * K.spec.headsQ * nMT;
  int64_t kvItems = c.batch * K.spec.headsKV * nNT;
  // Fixed ranges of dQ items, each with zeroed gradient arrays; the count
  // depends on the problem only, never on the thread count.
  int64_t ranges = std::max<int64_t>(
      1, std::min({qItems, kMaxGradRanges,
                   kMaxScratchFloats / std::max<int64_t>(gradFloats, 1)}));
  std::vector<float> scratch(ranges * std::max<int64_t>(gradFloats, 1), 0.0f);
  std::vector<int32_t> status(std::max<size_t>(K.buffers.size(), 1), 0);

  TransposedMask tmask;
  if (K.config.blockSparse)
    tmask = transpose(*c.blockMask);

  auto slots = [&](bool dqKernel, float *grads) {
    std::vector<Slot> s;
    for (const TensorRef *t :
         {c.q, c.k, c.v, c.o, c.lse, c.dO, c.dq, c.dk, c.dv})
      s.push_back(ptrSlot(t->data));
    s.push_back(ptrSlot(status.data()));
    s.push_back(ptrSlot(grads + paramOffset));
    for (size_t i = 0; i < K.buffers.size(); ++i) {
      const BufferRef &b = args.buffers.at(K.buffers[i].name);
      s.push_back(ptrSlot(b.data));
      s.push_back(i64Slot(b.size));
      s.push_back(ptrSlot(grads + bufOffset[i]));
    }
    for (const ParamDecl &p : K.params)
      s.push_back(scalarSlot(args.params.at(p.name)));
    for (int64_t x : {c.batch, c.seqlenQ, c.seqlenK})
      s.push_back(i64Slot(x));
    for (int64_t x : c.strides)
      s.push_back(i64Slot(x));
    if (K.config.varlen) {
      s.push_back(ptrSlot(c.cuSeqlensQ));
      s.push_back(ptrSlot(c.cuSeqlensK));
    }
    if (K.config.blockSparse) {
      const BlockMask &bm = *c.blockMask;
      if (dqKernel) {
        for (const std::vector<int32_t> *a :
             {&bm.kvNumBlocks, &bm.kvIndices, &bm.fullKvNumBlocks,
              &bm.fullKvIndices})
          s.push_back(ptrSlot(a->data()));
        s.push_back(i64Slot(bm.batch == 1 ? 0 : bm.heads * bm.numQTiles));
        s.push_back(i64Slot(bm.heads == 1 ? 0 : bm.numQTiles));
        s.push_back(i64Slot(bm.numKvTiles));
      } else {
        for (const std::vector<int32_t> *a :
             {&tmask.num, &tmask.idx, &tmask.fullNum, &tmask.fullIdx})
          s.push_back(ptrSlot(a->data()));
        s.push_back(i64Slot(bm.batch == 1 ? 0 : bm.heads * bm.numKvTiles));
        s.push_back(i64Slot(bm.heads == 1 ? 0 : bm.numKvTiles));
        s.push_back(i64Slot(bm.numQTiles));
      }
    }
    size_t want = abi::bwd::kLeadingPointers +
                  abi::bwd::kPerBuffer * K.buffers.size() + K.params.size() +
                  abi::bwd::kTrailingScalars - 2 +
                  (K.config.varlen ? abi::kVarlenArgs : 0) +
                  (K.config.blockSparse ? abi::kBlockSparseArgs : 0);
    if (s.size() != want)
      throw InternalError("backward kernel argument count mismatch");
    return s;
  };

  DataGradients out;
  if (kvItems > 0) {
    std::vector<Slot> s = slots(false, scratch.data());
    llvm::DefaultThreadPool &pool = threadPool();
    int64_t threads = numThreads == 0 ? pool.getMaxConcurrency() : numThreads;
    int64_t chunks = std::max<int64_t>(1, std::min(kvItems, threads * 4));
    if (threads <= 1)
      chunks = 1;
    runRanges(K.dkdv, kvItems, chunks, numThreads, [&](int64_t) { return s; });
  }
  if (qItems > 0) {
    int64_t stride = std::max<int64_t>(gradFloats, 1);
    runRanges(K.dq, qItems, ranges, numThreads, [&](int64_t r) {
      return slots(true, scratch.data() + r * stride);
    });
  }
  for (size_t i = 0; i < K.buffers.size(); ++i)
    if (status[i])
      throw UserError(fmt::format(
          "buffer '{}' was read outside [0, {}) in the backward: such reads "
          "give 0, so the gradients of this call are not valid",
          K.buffers[i].name, args.buffers.at(K.buffers[i].name).size));

  // Partial sums added in range order (deterministic), in double.
  auto reduce = [&](int64_t at) {
    double sum = 0.0;
    for (int64_t r = 0; r < ranges; ++r)
      sum += scratch[r * std::max<int64_t>(gradFloats, 1) + at];
    return static_cast<float>(sum);
  };
  for (size_t i = 0; i < K.buffers.size(); ++i) {
    if (K.buffers[i].elementType != ScalarType::Float32)
      continue;
    int64_t n = args.buffers.at(K.buffers[i].name).size;
    std::vector<float> g(n);
    for (int64_t e = 0; e < n; ++e)
      g[e] = reduce(bufOffset[i] + e);
    out.dBuffers[K.buffers[i].name] = std::move(g);
  }
  for (size_t i = 0; i < K.params.size(); ++i)
    if (K.params[i].type == ScalarType::Float32)
      out.dParams[K.params[i].name] = reduce(paramOffset + int64_t(i));
  if (K.spec.sink)
    out.dSink = sinkGradient(K, c, args);
  return out;
}

} // namespace

CpuBackwardKernel::CpuBackwardKernel(AttentionSpec spec, KernelConfig config,
                                     CpuKernelFn dkdvFn, CpuKernelFn dqFn,
                                     std::shared_ptr<void> owner)
    : spec_(std::move(spec)), config_(std::move(config)), dkdv_(dkdvFn),
      dq_(dqFn), owner_(std::move(owner)),
      buffers_(sortedByName(spec_.variant.buffers())),
      params_(sortedByName(spec_.variant.params())) {
  if (config_.blockM() <= 0 || config_.blockN <= 0)
    throw UserError(fmt::format("CPU kernel block_m = {}, block_n = {} must "
                                "be positive",
                                config_.blockM(), config_.blockN));
  if (!dkdv_ || !dq_)
    throw InternalError("CpuBackwardKernel: null entry point");
}

namespace {

DataGradients runDense(const View &K, const TensorRef &q, const TensorRef &k,
                       const TensorRef &v, const TensorRef &o,
                       const TensorRef &lse, const TensorRef &dO,
                       const TensorRef &dq, const TensorRef &dk,
                       const TensorRef &dv, const BlockMask *blockMask,
                       const Arguments &args, int numThreads) {
  AttentionShape sh =
      checkBackwardTensors(K.spec, q, k, v, o, lse, dO, dq, dk, dv);
  if (blockMask)
    checkBlockMaskFor(*blockMask, K.config.blockM(), K.config.blockN, sh.batch,
                      sh.headsQ, sh.seqlenQ, sh.seqlenK);
  BackwardCall c{&q,  &k,  &v, &o,       &lse,       &dO,       &dq,
                 &dk, &dv, {}, sh.batch, sh.seqlenQ, sh.seqlenK};
  c.blockMask = blockMask;
  size_t n = 0;
  for (const TensorRef *t : {&q, &k, &v, &o})
    for (int i = 0; i < 4; ++i)
      c.strides[n++] = t->strides[i];
  for (int i = 0; i < 3; ++i)
    c.strides[n++] = lse.strides[i];
  for (const TensorRef *t : {&dO, &dq, &dk, &dv})
    for (int i = 0; i < 4; ++i)
      c.strides[n++] = t->strides[i];
  return launch(K, c, args, numThreads);
}

} // namespace

DataGradients CpuBackwardKernel::run(const TensorRef &q, const TensorRef &k,
                                     const TensorRef &v, const TensorRef &o,
                                     const TensorRef &lse, const TensorRef &dO,
                                     const TensorRef &dq, const TensorRef &dk,
                                     const TensorRef &dv, const Arguments &args,
                                     int numThreads) const {
  if (config_.varlen)
    throw UserError("run: this backward kernel was compiled with "
                    "CompileOptions::varlen; call runVarlen");
  if (config_.blockSparse)
    throw UserError("run: this backward kernel was compiled with "
                    "CompileOptions::blockSparse; call runBlockSparse with "
                    "the forward's BlockMask");
  View K{spec_, config_, dkdv_, dq_, buffers_, params_};
  return runDense(K, q, k, v, o, lse, dO, dq, dk, dv, nullptr, args,
                  numThreads);
}

DataGradients CpuBackwardKernel::runBlockSparse(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const BlockMask &blockMask, const Arguments &args, int numThreads) const {
  if (!config_.blockSparse)
    throw UserError("runBlockSparse: this backward kernel was compiled "
                    "without CompileOptions::blockSparse");
  if (config_.varlen)
    throw UserError("runBlockSparse: this backward kernel was compiled with "
                    "CompileOptions::varlen; call runVarlen with the "
                    "BlockMask");
  View K{spec_, config_, dkdv_, dq_, buffers_, params_};
  return runDense(K, q, k, v, o, lse, dO, dq, dk, dv, &blockMask, args,
                  numThreads);
}

DataGradients CpuBackwardKernel::runVarlen(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, const BlockMask *blockMask, int numThreads) const {
  if (!config_.varlen)
    throw UserError("runVarlen: this backward kernel was compiled without "
                    "CompileOptions::varlen");
  if (config_.blockSparse && !blockMask)
    throw UserError("runVarlen: this backward kernel was compiled with "
                    "CompileOptions::blockSparse; pass the forward's "
                    "BlockMask");
  if (!config_.blockSparse && blockMask)
    throw UserError("runVarlen: this backward kernel was compiled without "
                    "CompileOptions::blockSparse; pass no BlockMask (it would "
                    "be ignored)");
  View K{spec_, config_, dkdv_, dq_, buffers_, params_};
  VarlenShape sh = checkVarlenBackwardTensors(
      spec_, q, k, v, cuSeqlensQ, cuSeqlensK, o, lse, dO, dq, dk, dv);
  if (config_.blockSparse)
    checkBlockMaskFor(*blockMask, config_.blockM(), config_.blockN, sh.batch,
                      sh.headsQ, sh.maxSeqlenQ, sh.maxSeqlenK, cuSeqlensQ,
                      cuSeqlensK);
  BackwardCall c{&q,  &k,  &v, &o,       &lse,          &dO,          &dq,
                 &dk, &dv, {}, sh.batch, sh.maxSeqlenQ, sh.maxSeqlenK};
  c.cuSeqlensQ = cuSeqlensQ.data();
  c.cuSeqlensK = cuSeqlensK.data();
  c.blockMask = config_.blockSparse ? blockMask : nullptr;
  // [total, heads, dim] as the 4-D strides (0, head, token, dim).
  size_t n = 0;
  auto push3 = [&](const TensorRef *t) {
    for (int64_t x : {int64_t{0}, t->strides[1], t->strides[0], t->strides[2]})
      c.strides[n++] = x;
  };
  for (const TensorRef *t : {&q, &k, &v, &o})
    push3(t);
  for (int64_t x : {int64_t{0}, lse.strides[0], lse.strides[1]})
    c.strides[n++] = x;
  for (const TensorRef *t : {&dO, &dq, &dk, &dv})
    push3(t);
  return launch(K, c, args, numThreads);
}

} // namespace flashjit::runtime
