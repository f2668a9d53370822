//===- CpuKernel.cpp - Running compiled CPU kernels -----------------------===//
//
// CpuKernel's construction and stage texts (running is the job of
// runtime::CpuAttentionKernel, which it derives from), the CPU option checks
// and the tile classifier's call. No MLIR here.
//
//===----------------------------------------------------------------------===//
#include "CompilerImpl.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/KernelAbi.h"

#include <fmt/format.h>

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
    if (d < 1 || d > kMaxHeadDim)
      throw UserError(
          fmt::format("{} = {} is not supported by the CPU backend ([1, {}])",
                      field, d, kMaxHeadDim));
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

CpuKernel::CpuKernel(runtime::CpuAttentionKernel kernel,
                     std::vector<StageTiming> timings,
                     std::array<std::string, 5> stageTexts)
    : runtime::CpuAttentionKernel(std::move(kernel)),
      timings_(std::move(timings)), stageTexts_(std::move(stageTexts)) {}

const std::string &CpuKernel::stageText(Stage stage) const {
  return stageTexts_.at(static_cast<size_t>(stage));
}

namespace {

using abi::i64Slot;
using abi::ptrSlot;
using abi::scalarSlot;
using abi::Slot;

} // namespace

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
  for (const BufferDecl &d : impl_->buffers) {
    auto it = args.buffers.find(d.name);
    if (it == args.buffers.end() || it->second.elementType != d.elementType)
      throw UserError(fmt::format("buffer '{}' ({}) is missing or has the "
                                  "wrong type",
                                  d.name, toString(d.elementType)));
    slots.push_back(ptrSlot(it->second.data));
    slots.push_back(i64Slot(it->second.size));
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
