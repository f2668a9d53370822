//===- CpuKernel.cpp - Running compiled CPU kernels -----------------------===//
//
// Checks the caller's tensors and arguments, lays out the kernel's plain
// argument list (KernelAbi.h) and splits the (batch, head, q tile) work items
// over LLVM's thread pool. No MLIR here.
//
//===----------------------------------------------------------------------===//
#include "CompilerImpl.h"

#include "flashjit/compiler/KernelAbi.h"
#include "flashjit/frontend/Error.h"

#include <fmt/format.h>
#include <llvm/Support/ThreadPool.h>
#include <llvm/Support/Threading.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace flashjit {

std::string_view toString(Stage stage) {
  switch (stage) {
  case Stage::Attn:
    return "attn";
  case Stage::Tiled:
    return "tiled";
  case Stage::LLVMDialect:
    return "llvm-dialect";
  case Stage::LLVMIR:
    return "llvm-ir";
  case Stage::LLVMIROpt:
    return "llvm-ir-opt";
  }
  throw InternalError("unknown Stage");
}

std::vector<ParamDecl> sortedParams(const Variant &v) {
  std::vector<ParamDecl> p = v.params();
  std::sort(p.begin(), p.end(), [](const ParamDecl &a, const ParamDecl &b) {
    return a.name < b.name;
  });
  return p;
}

std::vector<BufferDecl> sortedBuffers(const Variant &v) {
  std::vector<BufferDecl> d = v.buffers();
  std::sort(d.begin(), d.end(), [](const BufferDecl &a, const BufferDecl &b) {
    return a.name < b.name;
  });
  return d;
}

void validateForCpu(const AttentionSpec &spec, const CompileOptions &options) {
  spec.validate();
  if (options.target != Target::CPU)
    throw UserError("CompileOptions.target: only the CPU target exists");
  auto checkDim = [](const char *field, int d) {
    if (d < 1 || d > 512)
      throw UserError(fmt::format(
          "{} = {} is not supported by the CPU backend (1..512)", field, d));
  };
  checkDim("head_dim_qk", spec.headDimQK);
  checkDim("head_dim_v", spec.headDimV);
  auto checkBlock = [](const char *field, int b) {
    if (b != 0 && b != 16 && b != 32 && b != 64 && b != 128)
      throw UserError(fmt::format(
          "CompileOptions.{} = {} is not supported (0 for the default, or "
          "16, 32, 64, 128)",
          field, b));
  };
  checkBlock("blockM", options.blockM);
  checkBlock("blockN", options.blockN);
  if (options.optLevel < 0 || options.optLevel > 3)
    throw UserError(fmt::format("CompileOptions.optLevel = {} must be 0..3",
                                options.optLevel));
}

CpuKernel::CpuKernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuKernel::~CpuKernel() = default;
const AttentionSpec &CpuKernel::spec() const { return impl_->spec; }
int CpuKernel::blockM() const { return impl_->blockM; }
int CpuKernel::blockN() const { return impl_->blockN; }
const std::vector<StageTiming> &CpuKernel::timings() const {
  return impl_->timings;
}
const std::string &CpuKernel::stageText(Stage stage) const {
  return impl_->texts.at(static_cast<size_t>(stage));
}

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

void call(PackedFn fn, std::vector<Slot> slots) {
  std::vector<void *> ptrs(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    ptrs[i] = &slots[i];
  fn(ptrs.data());
}

llvm::DefaultThreadPool &threadPool() {
  static llvm::DefaultThreadPool pool(llvm::hardware_concurrency());
  return pool;
}

} // namespace

RunStats CpuKernel::run(const TensorRef &q, const TensorRef &k,
                        const TensorRef &v, const TensorRef &o,
                        const TensorRef *lse, const Arguments &args,
                        int numThreads) const {
  const Impl &I = *impl_;
  const AttentionSpec &spec = I.spec;
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
  stats.tilesCounted = I.countTiles;
  int64_t nMT = (sh.seqlenQ + I.blockM - 1) / I.blockM;
  int64_t items = sh.batch * sh.headsQ * nMT;
  if (items == 0)
    return stats;

  std::vector<int32_t> status(std::max<size_t>(I.buffers.size(), 1), 0);
  int64_t counters[3] = {0, 0, 0};
  std::vector<Slot> slots;
  for (const void *p :
       {q.data, k.data, v.data, o.data, lseUsed ? lseUsed->data : nullptr})
    slots.push_back(ptrSlot(p));
  slots.push_back(ptrSlot(status.data()));
  slots.push_back(ptrSlot(counters));
  for (const BufferDecl &d : I.buffers) {
    const BufferRef &b = args.buffers.at(d.name);
    slots.push_back(ptrSlot(b.data));
    slots.push_back(i64Slot(b.size));
  }
  for (const ParamDecl &p : I.params)
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
  if (slots.size() != abi::kLeadingPointers + 2 * I.buffers.size() +
                          I.params.size() + abi::kTrailingScalars)
    throw InternalError("kernel argument count mismatch");

  auto runRange = [&](int64_t begin, int64_t end) {
    std::vector<Slot> mine = slots;
    mine[mine.size() - 2] = i64Slot(begin);
    mine[mine.size() - 1] = i64Slot(end);
    call(I.fn, std::move(mine));
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

  for (size_t i = 0; i < I.buffers.size(); ++i)
    if (status[i])
      throw UserError(fmt::format(
          "buffer '{}' was read outside [0, {}): such reads give 0, so the "
          "outputs of this call are not valid",
          I.buffers[i].name, args.buffers.at(I.buffers[i].name).size));
  if (I.countTiles)
    stats.tiles = {counters[2], counters[1], counters[0]};
  return stats;
}

TileClassifierKernel::TileClassifierKernel(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
TileClassifierKernel::~TileClassifierKernel() = default;

TileClass TileClassifierKernel::classify(const TileBox &box,
                                         const Arguments &args) const {
  std::vector<Slot> slots;
  for (int64_t x : {box.batch.lo, box.head.lo, box.q.lo, box.q.hi, box.kv.lo,
                    box.kv.hi, box.seqlenQ, box.seqlenK})
    slots.push_back(i64Slot(x));
  for (const ParamDecl &p : impl_->params) {
    auto it = args.params.find(p.name);
    if (it == args.params.end() || it->second.type != p.type)
      throw UserError(fmt::format("parameter '{}' ({}) is missing or has "
                                  "the wrong type",
                                  p.name, toString(p.type)));
    slots.push_back(scalarSlot(it->second));
  }
  if (box.batch.lo != box.batch.hi || box.head.lo != box.head.hi)
    throw UserError("TileClassifierKernel: batch and head ranges must be "
                    "single values (kernels classify per batch and head)");
  Slot result = i64Slot(0);
  std::vector<void *> ptrs;
  for (Slot &s : slots)
    ptrs.push_back(&s);
  ptrs.push_back(&result);
  impl_->fn(ptrs.data());
  return static_cast<TileClass>(static_cast<int8_t>(result.i64 & 0xff));
}

TileCounts TileClassifierKernel::count(int64_t seqlenQ, int64_t seqlenK,
                                       int64_t blockM, int64_t blockN,
                                       const Arguments &args) const {
  return countTilesBy(seqlenQ, seqlenK, blockM, blockN,
                      [&](const TileBox &box) { return classify(box, args); });
}

} // namespace flashjit
