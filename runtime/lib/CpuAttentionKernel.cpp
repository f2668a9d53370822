//===- CpuAttentionKernel.cpp - Running generated CPU kernels -------------===//
//
// Checks the caller's tensors and arguments, lays out the kernel's plain
// argument list (KernelAbi.h) and splits the (batch, head, q tile) work items
// over LLVM's thread pool. No MLIR here.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/CpuAttentionKernel.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/KernelAbi.h"

#include <fmt/format.h>
#include <llvm/Support/ThreadPool.h>
#include <llvm/Support/Threading.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace flashjit::runtime {

namespace {

/// One kernel argument; the kernel reads it with its own type, and every
/// union member starts at the union's address.
union Slot {
  void *ptr;
  int64_t i64;
  int32_t i32;
  float f32;
};

Slot ptrSlot(const void *p) {
  Slot s;
  s.ptr = const_cast<void *>(p);
  return s;
}
Slot i64Slot(int64_t v) {
  Slot s;
  s.i64 = v;
  return s;
}
Slot scalarSlot(const Scalar &v) {
  Slot s;
  s.i64 = 0;
  if (v.type == ScalarType::Float32)
    s.f32 = v.floatValue;
  else if (v.type == ScalarType::Int32)
    s.i32 = static_cast<int32_t>(v.intValue);
  else
    s.i64 = v.intValue;
  return s;
}

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

} // namespace

CpuAttentionKernel::CpuAttentionKernel(AttentionSpec spec, CpuKernelInfo info,
                                       CpuKernelFn fn,
                                       std::shared_ptr<void> owner)
    : spec_(std::move(spec)), info_(info), fn_(fn), owner_(std::move(owner)),
      buffers_(sortedByName(spec_.variant.buffers())),
      params_(sortedByName(spec_.variant.params())) {
  if (info_.blockM <= 0 || info_.blockN <= 0)
    throw UserError(fmt::format("CPU kernel block_m = {}, block_n = {} must "
                                "be positive",
                                info_.blockM, info_.blockN));
  if (!fn_)
    throw InternalError("CpuAttentionKernel: null entry point");
}

RunStats CpuAttentionKernel::run(const TensorRef &q, const TensorRef &k,
                                 const TensorRef &v, const TensorRef &o,
                                 const TensorRef *lse, const Arguments &args,
                                 int numThreads) const {
  const AttentionSpec &spec = spec_;
  if (spec.returnLse && !lse)
    throw UserError("lse: this kernel returns LSE (spec.returnLse); pass an "
                    "fp32 tensor [batch, heads_q, seqlen_q]");
  const TensorRef *lseUsed = spec.returnLse ? lse : nullptr;
  AttentionShape sh = checkAttentionTensors(spec, q, k, v, &o, lseUsed);
  args.validateFor(spec.variant);
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (sh.seqlenQ > kMax || sh.seqlenK > kMax || sh.batch > kMax)
    throw UserError(fmt::format("batch, seqlen_q and seqlen_k must fit in "
                                "i32 (the DSL's index type), got {}, {}, {}",
                                sh.batch, sh.seqlenQ, sh.seqlenK));
  if (numThreads < 0)
    throw UserError(fmt::format("numThreads = {} must be >= 0", numThreads));

  RunStats stats;
  stats.tilesCounted = info_.countTiles;
  int64_t nMT = (sh.seqlenQ + info_.blockM - 1) / info_.blockM;
  int64_t items = sh.batch * sh.headsQ * nMT;
  if (items == 0)
    return stats;

  std::vector<int32_t> status(std::max<size_t>(buffers_.size(), 1), 0);
  int64_t counters[3] = {0, 0, 0};
  std::vector<Slot> slots;
  for (const void *p :
       {q.data, k.data, v.data, o.data, lseUsed ? lseUsed->data : nullptr})
    slots.push_back(ptrSlot(p));
  slots.push_back(ptrSlot(status.data()));
  slots.push_back(ptrSlot(counters));
  for (const BufferDecl &d : buffers_) {
    const BufferRef &b = args.buffers.at(d.name);
    slots.push_back(ptrSlot(b.data));
    slots.push_back(i64Slot(b.size));
  }
  for (const ParamDecl &p : params_)
    slots.push_back(scalarSlot(args.params.at(p.name)));
  for (int64_t x : {sh.batch, sh.seqlenQ, sh.seqlenK})
    slots.push_back(i64Slot(x));
  for (const TensorRef *t : {&q, &k, &v, &o})
    for (int i = 0; i < 4; ++i)
      slots.push_back(i64Slot(t->strides[i]));
  for (int i = 0; i < 3; ++i)
    slots.push_back(i64Slot(lseUsed ? lseUsed->strides[i] : 0));
  slots.push_back(i64Slot(0));
  slots.push_back(i64Slot(items));
  if (slots.size() != abi::kLeadingPointers + 2 * buffers_.size() +
                          params_.size() + abi::kTrailingScalars)
    throw InternalError("kernel argument count mismatch");

  auto runRange = [&](int64_t begin, int64_t end) {
    std::vector<Slot> mine = slots;
    mine[mine.size() - 2] = i64Slot(begin);
    mine[mine.size() - 1] = i64Slot(end);
    call(fn_, std::move(mine));
  };
  llvm::DefaultThreadPool &pool = threadPool();
  int64_t threads = numThreads == 0 ? pool.getMaxConcurrency() : numThreads;
  int64_t chunks = std::min<int64_t>(items, threads * 4);
  if (threads <= 1 || chunks <= 1) {
    runRange(0, items);
  } else {
    llvm::ThreadPoolTaskGroup group(pool);
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t begin = items * c / chunks, end = items * (c + 1) / chunks;
      group.async([&runRange, begin, end] { runRange(begin, end); });
    }
    group.wait();
  }

  for (size_t i = 0; i < buffers_.size(); ++i)
    if (status[i])
      throw UserError(fmt::format(
          "buffer '{}' was read outside [0, {}): such reads give 0, so the "
          "outputs of this call are not valid",
          buffers_[i].name, args.buffers.at(buffers_[i].name).size));
  if (info_.countTiles)
    stats.tiles = {counters[2], counters[1], counters[0]};
  return stats;
}

} // namespace flashjit::runtime
