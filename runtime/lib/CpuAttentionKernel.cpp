//===- CpuAttentionKernel.cpp - Running generated CPU kernels -------------===//
//
// Checks the caller's tensors and arguments, lays out the kernel's plain
// argument list (KernelAbi.h) and splits the (batch, head, q tile) work items
// over LLVM's thread pool. No MLIR here.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/CpuAttentionKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"
#include "flashjit/runtime/KernelAbi.h"

#include <fmt/format.h>
#include <llvm/Support/ThreadPool.h>
#include <llvm/Support/Threading.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

namespace flashjit::runtime {

namespace {

using abi::i64Slot;
using abi::ptrSlot;
using abi::scalarSlot;
using abi::Slot;

void call(CpuKernelFn fn, std::vector<Slot> slots) {
  std::vector<void *> ptrs(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    ptrs[i] = &slots[i];
  fn(ptrs.data());
}

llvm::DefaultThreadPool &threadPool() {
  static llvm::DefaultThreadPool pool(llvm::hardware_concurrency());
  return pool;
}

template <class Decl> std::vector<Decl> sortedByName(std::vector<Decl> d) {
  std::sort(d.begin(), d.end(),
            [](const Decl &a, const Decl &b) { return a.name < b.name; });
  return d;
}

/// What the host side needs of a kernel.
struct KernelView {
  const AttentionSpec &spec;
  const KernelConfig &info;
  CpuKernelFn fn, builder;
  const std::vector<BufferDecl> &buffers;
  const std::vector<ParamDecl> &params;
};

/// Calls \p fn on the work items [0, items), spread over the thread pool;
/// \p slots lacks the two trailing item bounds.
void runItems(CpuKernelFn fn, const std::vector<Slot> &slots, int64_t items,
              int numThreads) {
  auto runRange = [&](int64_t begin, int64_t end) {
    std::vector<Slot> mine = slots;
    mine.push_back(i64Slot(begin));
    mine.push_back(i64Slot(end));
    call(fn, std::move(mine));
  };
  llvm::DefaultThreadPool &pool = threadPool();
  int64_t threads = numThreads == 0 ? pool.getMaxConcurrency() : numThreads;
  int64_t chunks = std::min<int64_t>(items, threads * 4);
  if (threads <= 1 || chunks <= 1) {
    runRange(0, items);
    return;
  }
  // At most `threads` tasks, each taking chunks in turn: the pool has a
  // thread per core, so one task per chunk would run on more threads than
  // asked for.
  std::atomic<int64_t> next{0};
  llvm::ThreadPoolTaskGroup group(pool);
  for (int64_t w = 0; w < std::min(threads, chunks); ++w)
    group.async([&] {
      for (int64_t c; (c = next.fetch_add(1)) < chunks;)
        runRange(items * c / chunks, items * (c + 1) / chunks);
    });
  group.wait();
}

/// Appends the buffers' (data, size) and the parameters' values.
void pushArguments(const KernelView &K, const Arguments &args,
                   std::vector<Slot> &slots) {
  for (const BufferDecl &d : K.buffers) {
    const BufferRef &b = args.buffers.at(d.name);
    slots.push_back(ptrSlot(b.data));
    slots.push_back(i64Slot(b.size));
  }
  for (const ParamDecl &p : K.params)
    slots.push_back(scalarSlot(args.params.at(p.name)));
}

/// Throws for the first buffer the kernel flagged as read out of range.
void checkStatus(const KernelView &K, const Arguments &args,
                 const std::vector<int32_t> &status, const char *what) {
  for (size_t i = 0; i < K.buffers.size(); ++i)
    if (status[i])
      throw UserError(fmt::format(
          "buffer '{}' was read outside [0, {}){}: such reads give 0, so the "
          "outputs of this call are not valid",
          K.buffers[i].name, args.buffers.at(K.buffers[i].name).size, what));
}

void checkCommon(const KernelView &K, const Arguments &args, int64_t batch,
                 int64_t seqlenQ, int64_t seqlenK, int numThreads) {
  args.validateFor(K.spec.variant);
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (seqlenQ > kMax || seqlenK > kMax || batch > kMax)
    throw UserError(fmt::format("batch, seqlen_q and seqlen_k must fit in "
                                "i32 (the DSL's index type), got {}, {}, {}",
                                batch, seqlenQ, seqlenK));
  if (numThreads < 0)
    throw UserError(fmt::format("numThreads = {} must be >= 0", numThreads));
}

/// One checked attention call: 4-D strides for q, k, v, o (varlen: batch
/// stride 0, token stride in place of the sequence stride) and 3 for lse.
struct AttentionCall {
  const TensorRef *q, *k, *v, *o, *lse;
  std::array<int64_t, 19> strides;
  int64_t batch, seqlenQ, seqlenK;
  const int32_t *cuSeqlensQ = nullptr, *cuSeqlensK = nullptr;
  const BlockMask *blockMask = nullptr;
};

RunStats launch(const KernelView &K, const AttentionCall &c,
                const Arguments &args, int numThreads) {
  args.validateSinkFor(K.spec, /*hostValues=*/true);
  RunStats stats;
  stats.tilesCounted = K.info.countTiles;
  int64_t nMT = (c.seqlenQ + K.info.cpuBlockM - 1) / K.info.cpuBlockM;
  int64_t items = c.batch * K.spec.headsQ * nMT;
  if (items == 0)
    return stats;

  std::vector<int32_t> status(std::max<size_t>(K.buffers.size(), 1), 0);
  int64_t counters[3] = {0, 0, 0};
  std::vector<Slot> slots;
  for (const void *p : {c.q->data, c.k->data, c.v->data, c.o->data,
                        c.lse ? c.lse->data : nullptr})
    slots.push_back(ptrSlot(p));
  slots.push_back(ptrSlot(status.data()));
  slots.push_back(ptrSlot(counters));
  pushArguments(K, args, slots);
  for (int64_t x : {c.batch, c.seqlenQ, c.seqlenK})
    slots.push_back(i64Slot(x));
  for (int64_t s : c.strides)
    slots.push_back(i64Slot(s));
  if (K.info.varlen) {
    slots.push_back(ptrSlot(c.cuSeqlensQ));
    slots.push_back(ptrSlot(c.cuSeqlensK));
  }
  if (K.info.blockSparse) {
    const BlockMask &bm = *c.blockMask;
    for (const std::vector<int32_t> *a :
         {&bm.kvNumBlocks, &bm.kvIndices, &bm.fullKvNumBlocks,
          &bm.fullKvIndices})
      slots.push_back(ptrSlot(a->data()));
    slots.push_back(i64Slot(bm.batch == 1 ? 0 : bm.heads * bm.numQTiles));
    slots.push_back(i64Slot(bm.heads == 1 ? 0 : bm.numQTiles));
    slots.push_back(i64Slot(bm.numKvTiles));
  }
  if (K.spec.sink)
    slots.push_back(ptrSlot(args.sink.data));
  if (slots.size() != abi::kLeadingPointers + 2 * K.buffers.size() +
                          K.params.size() + abi::kTrailingScalars - 2 +
                          (K.info.varlen ? abi::kVarlenArgs : 0) +
                          (K.info.blockSparse ? abi::kBlockSparseArgs : 0) +
                          (K.spec.sink ? abi::kSinkArgs : 0))
    throw InternalError("kernel argument count mismatch");
  runItems(K.fn, slots, items, numThreads);
  checkStatus(K, args, status, "");
  if (K.info.countTiles)
    stats.tiles = {counters[2], counters[1], counters[0]};
  return stats;
}

const TensorRef *checkLse(const AttentionSpec &spec, const TensorRef *lse,
                          const char *shape) {
  if (spec.returnLse && !lse)
    throw UserError(fmt::format("lse: this kernel returns LSE "
                                "(spec.returnLse); pass an fp32 tensor {}",
                                shape));
  return spec.returnLse ? lse : nullptr;
}

RunStats runDense(const KernelView &K, const TensorRef &q, const TensorRef &k,
                  const TensorRef &v, const TensorRef &o, const TensorRef *lse,
                  const Arguments &args, const BlockMask *blockMask,
                  int numThreads) {
  const TensorRef *lseUsed =
      checkLse(K.spec, lse, "[batch, heads_q, seqlen_q]");
  AttentionShape sh = checkAttentionTensors(K.spec, q, k, v, &o, lseUsed);
  checkCommon(K, args, sh.batch, sh.seqlenQ, sh.seqlenK, numThreads);
  args.checkNotOverwrittenBy(o, lseUsed);
  if (blockMask)
    checkBlockMaskFor(*blockMask, K.info.cpuBlockM, K.info.blockN, sh.batch,
                      sh.headsQ, sh.seqlenQ, sh.seqlenK);
  // FP8 inputs: dequantised to f32 on load (the kernel is compiled for
  // fp8ComputeSpec); other inputs are passed through.
  const DequantizedInputs in =
      dequantizeInputs(K.spec, q, k, v, args, sh.batch);
  AttentionCall c{&in.q, &in.k,    &in.v,      &o,        lseUsed,
                  {},    sh.batch, sh.seqlenQ, sh.seqlenK};
  c.blockMask = blockMask;
  size_t n = 0;
  for (const TensorRef *t : {&in.q, &in.k, &in.v, &o})
    for (int i = 0; i < 4; ++i)
      c.strides[n++] = t->strides[i];
  for (int i = 0; i < 3; ++i)
    c.strides[n++] = lseUsed ? lseUsed->strides[i] : 0;
  return launch(K, c, args, numThreads);
}

BlockMask buildMask(const KernelView &K, int64_t batch, int64_t seqlenQ,
                    int64_t seqlenK, std::span<const int32_t> cuSeqlensQ,
                    std::span<const int32_t> cuSeqlensK, const Arguments &args,
                    int numThreads) {
  if (!K.info.blockSparse || !K.builder)
    throw UserError("building a block mask needs a kernel compiled with "
                    "CompileOptions::blockSparse");
  checkCommon(K, args, batch, seqlenQ, seqlenK, numThreads);
  BlockMaskExtent ext = blockMaskExtent(K.spec.effectiveMask(), batch,
                                        K.spec.headsQ, K.info.varlen);
  BlockMask bm;
  bm.blockM = K.info.cpuBlockM;
  bm.blockN = K.info.blockN;
  bm.seqlenQ = seqlenQ;
  bm.seqlenK = seqlenK;
  bm.batch = ext.batch;
  bm.heads = ext.heads;
  bm.numQTiles = (seqlenQ + bm.blockM - 1) / bm.blockM;
  bm.numKvTiles = (seqlenK + bm.blockN - 1) / bm.blockN;
  int64_t rows = bm.batch * bm.heads * bm.numQTiles;
  bm.kvNumBlocks.assign(rows, 0);
  bm.fullKvNumBlocks.assign(rows, 0);
  bm.kvIndices.assign(rows * bm.numKvTiles, 0);
  bm.fullKvIndices.assign(rows * bm.numKvTiles, 0);
  bm.cuSeqlensQ.assign(cuSeqlensQ.begin(), cuSeqlensQ.end());
  bm.cuSeqlensK.assign(cuSeqlensK.begin(), cuSeqlensK.end());
  // With no batch there is no call to serve (and no row to evaluate).
  if (rows == 0 || batch == 0)
    return bm;

  std::vector<int32_t> status(std::max<size_t>(K.buffers.size(), 1), 0);
  std::vector<Slot> slots{ptrSlot(status.data())};
  pushArguments(K, args, slots);
  slots.push_back(i64Slot(seqlenQ));
  slots.push_back(i64Slot(seqlenK));
  if (K.info.varlen) {
    slots.push_back(ptrSlot(cuSeqlensQ.data()));
    slots.push_back(ptrSlot(cuSeqlensK.data()));
  }
  for (std::vector<int32_t> *a :
       {&bm.kvNumBlocks, &bm.kvIndices, &bm.fullKvNumBlocks, &bm.fullKvIndices})
    slots.push_back(ptrSlot(a->data()));
  for (int64_t x : {bm.batch, bm.heads, bm.numQTiles, bm.numKvTiles})
    slots.push_back(i64Slot(x));
  if (slots.size() != abi::kBuilderFixedArgs - 2 + 2 * K.buffers.size() +
                          K.params.size() +
                          (K.info.varlen ? abi::kVarlenArgs : 0))
    throw InternalError("block-mask builder argument count mismatch");
  runItems(K.builder, slots, rows, numThreads);
  checkStatus(K, args, status, " while building the block mask");
  return bm;
}

} // namespace

CpuAttentionKernel::CpuAttentionKernel(AttentionSpec spec, KernelConfig info,
                                       CpuKernelFn fn,
                                       std::shared_ptr<void> owner,
                                       CpuKernelFn blockMaskFn)
    : spec_(std::move(spec)), info_(info), fn_(fn), owner_(std::move(owner)),
      blockMaskFn_(blockMaskFn),
      buffers_(sortedByName(spec_.variant.buffers())),
      params_(sortedByName(spec_.variant.params())) {
  if (info_.cpuBlockM <= 0 || info_.blockN <= 0)
    throw UserError(fmt::format("CPU kernel block_m = {}, block_n = {} must "
                                "be positive",
                                info_.cpuBlockM, info_.blockN));
  if (!fn_)
    throw InternalError("CpuAttentionKernel: null entry point");
  if (info_.blockSparse && !blockMaskFn_)
    throw InternalError("CpuAttentionKernel: block-sparse kernel without a "
                        "block-mask builder");
}

RunStats CpuAttentionKernel::run(const TensorRef &q, const TensorRef &k,
                                 const TensorRef &v, const TensorRef &o,
                                 const TensorRef *lse, const Arguments &args,
                                 int numThreads) const {
  if (info_.varlen)
    throw UserError("run: this kernel was compiled with "
                    "CompileOptions::varlen; call runVarlen");
  if (info_.blockSparse)
    throw UserError("run: this kernel was compiled with "
                    "CompileOptions::blockSparse; call runBlockSparse with a "
                    "BlockMask");
  KernelView K{spec_, info_, fn_, blockMaskFn_, buffers_, params_};
  return runDense(K, q, k, v, o, lse, args, nullptr, numThreads);
}

RunStats CpuAttentionKernel::runBlockSparse(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef *lse, const BlockMask &blockMask,
    const Arguments &args, int numThreads) const {
  if (!info_.blockSparse)
    throw UserError("runBlockSparse: this kernel was compiled without "
                    "CompileOptions::blockSparse");
  if (info_.varlen)
    throw UserError("runBlockSparse: this kernel was compiled with "
                    "CompileOptions::varlen; call runVarlen with the "
                    "BlockMask");
  KernelView K{spec_, info_, fn_, blockMaskFn_, buffers_, params_};
  return runDense(K, q, k, v, o, lse, args, &blockMask, numThreads);
}

RunStats CpuAttentionKernel::runVarlen(
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef *lse,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, const BlockMask *blockMask, int numThreads) const {
  if (!info_.varlen)
    throw UserError("runVarlen: this kernel was compiled without "
                    "CompileOptions::varlen");
  if (info_.blockSparse && !blockMask)
    throw UserError("runVarlen: this kernel was compiled with "
                    "CompileOptions::blockSparse; pass a BlockMask");
  if (!info_.blockSparse && blockMask)
    throw UserError("runVarlen: this kernel was compiled without "
                    "CompileOptions::blockSparse; pass no BlockMask (it would "
                    "be ignored)");
  KernelView K{spec_, info_, fn_, blockMaskFn_, buffers_, params_};
  const TensorRef *lseUsed = checkLse(spec_, lse, "[heads_q, total_q]");
  VarlenShape sh =
      checkVarlenTensors(spec_, q, k, v, cuSeqlensQ, cuSeqlensK, &o, lseUsed);
  checkCommon(K, args, sh.batch, sh.maxSeqlenQ, sh.maxSeqlenK, numThreads);
  args.checkNotOverwrittenBy(o, lseUsed);
  if (info_.blockSparse)
    checkBlockMaskFor(*blockMask, info_.cpuBlockM, info_.blockN, sh.batch,
                      sh.headsQ, sh.maxSeqlenQ, sh.maxSeqlenK, cuSeqlensQ,
                      cuSeqlensK);
  const DequantizedInputs in =
      dequantizeInputs(spec_, q, k, v, args, sh.batch, cuSeqlensQ, cuSeqlensK);
  AttentionCall c{&in.q, &in.k,    &in.v,         &o,           lseUsed,
                  {},    sh.batch, sh.maxSeqlenQ, sh.maxSeqlenK};
  c.cuSeqlensQ = cuSeqlensQ.data();
  c.cuSeqlensK = cuSeqlensK.data();
  c.blockMask = info_.blockSparse ? blockMask : nullptr;
  // [total, heads, dim] as the 4-D strides (0, head, token, dim).
  size_t n = 0;
  for (const TensorRef *t : {&in.q, &in.k, &in.v, &o})
    for (int64_t x : {int64_t{0}, t->strides[1], t->strides[0], t->strides[2]})
      c.strides[n++] = x;
  // lse [heads, total] as (0, head, token).
  for (int64_t x : {int64_t{0}, lseUsed ? lseUsed->strides[0] : 0,
                    lseUsed ? lseUsed->strides[1] : 0})
    c.strides[n++] = x;
  return launch(K, c, args, numThreads);
}

BlockMask CpuAttentionKernel::buildBlockMask(int64_t batch, int64_t seqlenQ,
                                             int64_t seqlenK,
                                             const Arguments &args,
                                             int numThreads) const {
  if (info_.varlen)
    throw UserError("buildBlockMask: this kernel was compiled with "
                    "CompileOptions::varlen; call buildVarlenBlockMask");
  if (batch < 0 || seqlenQ < 0 || seqlenK < 0)
    throw UserError(fmt::format("buildBlockMask: batch = {}, seqlen_q = {}, "
                                "seqlen_k = {} must be >= 0",
                                batch, seqlenQ, seqlenK));
  KernelView K{spec_, info_, fn_, blockMaskFn_, buffers_, params_};
  return buildMask(K, batch, seqlenQ, seqlenK, {}, {}, args, numThreads);
}

BlockMask CpuAttentionKernel::buildVarlenBlockMask(
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args, int numThreads) const {
  if (!info_.varlen)
    throw UserError("buildVarlenBlockMask: this kernel was compiled without "
                    "CompileOptions::varlen; call buildBlockMask");
  if (cuSeqlensQ.size() != cuSeqlensK.size())
    throw UserError(fmt::format("cu_seqlens_q has {} entries but cu_seqlens_k "
                                "has {} (both batch + 1)",
                                cuSeqlensQ.size(), cuSeqlensK.size()));
  int64_t maxQ = checkCuSeqlens("cu_seqlens_q", cuSeqlensQ,
                                cuSeqlensQ.empty() ? 0 : cuSeqlensQ.back());
  int64_t maxK = checkCuSeqlens("cu_seqlens_k", cuSeqlensK,
                                cuSeqlensK.empty() ? 0 : cuSeqlensK.back());
  KernelView K{spec_, info_, fn_, blockMaskFn_, buffers_, params_};
  return buildMask(K, static_cast<int64_t>(cuSeqlensQ.size()) - 1, maxQ, maxK,
                   cuSeqlensQ, cuSeqlensK, args, numThreads);
}

} // namespace flashjit::runtime
