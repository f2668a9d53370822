//===- Tensor.cpp - Checking attention tensors against a spec -------------===//
#include "flashjit/frontend/Tensor.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Variant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace flashjit {

TensorRef TensorRef::contiguous(void *data, DType dtype,
                                std::array<int64_t, 4> shape) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.rank = 4;
  t.shape = shape;
  t.strides = {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3],
               1};
  return t;
}

TensorRef TensorRef::contiguous3(void *data, DType dtype,
                                 std::array<int64_t, 3> shape) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.rank = 3;
  t.shape = {shape[0], shape[1], shape[2], 1};
  t.strides = {shape[1] * shape[2], shape[2], 1, 1};
  return t;
}

TensorRef TensorRef::contiguous2(void *data, DType dtype,
                                 std::array<int64_t, 2> shape) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.rank = 2;
  t.shape = {shape[0], shape[1], 1, 1};
  t.strides = {shape[1], 1, 1, 1};
  return t;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= shape[i];
  return n;
}

namespace {
void checkTensor(const char *name, const TensorRef &t, int rank,
                 bool isOutput) {
  if (t.rank != rank)
    throw UserError(
        fmt::format("{}.rank = {}, expected {}", name, t.rank, rank),
        std::source_location());
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0)
      throw UserError(
          fmt::format("{}.shape[{}] = {} is negative", name, i, t.shape[i]),
          std::source_location());
    if (t.strides[i] < 0)
      throw UserError(fmt::format("{}.strides[{}] = {} is negative (negative "
                                  "strides are not supported)",
                                  name, i, t.strides[i]),
                      std::source_location());
  }
  if (isOutput)
    checkNoSelfOverlap(name, t);
  // The farthest element, in bytes, must be addressable without wrapping:
  // strides near 2^63 would otherwise read before the buffer.
  if (t.numel() > 0) {
    int64_t far = 0;
    bool overflow = false;
    for (int i = 0; i < rank && !overflow; ++i) {
      int64_t step = 0;
      overflow = __builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &step) ||
                 __builtin_add_overflow(far, step, &far);
    }
    overflow = overflow ||
               __builtin_mul_overflow(far, int64_t(byteSize(t.dtype)), &far);
    if (overflow)
      throw UserError(
          fmt::format(
              "{}.strides = [{}] with shape [{}]: the last element's "
              "byte offset overflows 64 bits",
              name,
              fmt::join(t.strides.begin(), t.strides.begin() + rank, ", "),
              fmt::join(t.shape.begin(), t.shape.begin() + rank, ", ")),
          std::source_location());
  }
  if (t.numel() > 0 && !t.data)
    throw UserError(fmt::format("{}.data is null but {} has {} elements", name,
                                name, t.numel()),
                    std::source_location());
}

/// O and LSE must not share memory with Q, K, V or each other.
void expectNoAliasing(const TensorRef &q, const TensorRef &k,
                      const TensorRef &v, const TensorRef *o,
                      const TensorRef *lse) {
  std::vector<MemoryRegion> outs;
  if (o)
    outs.push_back(memoryOf("o", *o));
  if (lse)
    outs.push_back(memoryOf("lse", *lse));
  const MemoryRegion ins[] = {memoryOf("q", q), memoryOf("k", k),
                              memoryOf("v", v)};
  checkOutputsDisjoint(outs, ins);
}

/// Checks \p t named \p name against \p like (named \p likeName): rank,
/// shape and dtype \p dtype equal, and checkTensor's rules (an output's
/// strides never 0 on a dim larger than 1).
void expectLike(const char *name, const TensorRef &t, const char *likeName,
                const TensorRef &like, DType dtype, bool isOutput) {
  if (t.rank != like.rank)
    throw UserError(fmt::format("{}.rank = {}, expected {} (as {})", name,
                                t.rank, like.rank, likeName),
                    std::source_location());
  checkTensor(name, t, like.rank, isOutput);
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] != like.shape[i])
      throw UserError(fmt::format("{}.shape[{}] = {}, expected {} (as {})",
                                  name, i, t.shape[i], like.shape[i], likeName),
                      std::source_location());
  if (t.dtype != dtype)
    throw UserError(fmt::format("{}.dtype = {}, expected {} (as {})", name,
                                toString(t.dtype), toString(dtype), likeName),
                    std::source_location());
}

/// dO, dq, dk, dv against o, q, k, v, and the backward's aliasing rule: the
/// outputs dq, dk, dv overlap no input and not each other.
void expectBackwardGradients(const AttentionSpec &spec, const TensorRef &q,
                             const TensorRef &k, const TensorRef &v,
                             const TensorRef &o, const TensorRef &lse,
                             const TensorRef &dO, const TensorRef &dq,
                             const TensorRef &dk, const TensorRef &dv) {
  expectLike("dO", dO, "o", o, spec.dtypeO, false);
  expectLike("dq", dq, "q", q, spec.dtypeQ, true);
  expectLike("dk", dk, "k", k, spec.dtypeK, true);
  expectLike("dv", dv, "v", v, spec.dtypeV, true);
  const MemoryRegion outs[] = {memoryOf("dq", dq), memoryOf("dk", dk),
                               memoryOf("dv", dv)};
  const MemoryRegion ins[] = {memoryOf("q", q),     memoryOf("k", k),
                              memoryOf("v", v),     memoryOf("o", o),
                              memoryOf("lse", lse), memoryOf("dO", dO)};
  checkOutputsDisjoint(outs, ins);
}

void expectDim(const char *name, const TensorRef &t, int dim, int64_t want,
               const char *what) {
  if (t.shape[dim] != want)
    throw UserError(fmt::format("{}.shape[{}] = {}, expected {} ({})", name,
                                dim, t.shape[dim], want, what),
                    std::source_location());
}

void expectDType(const char *name, const TensorRef &t, DType want) {
  if (t.dtype != want)
    throw UserError(fmt::format("{}.dtype = {}, but the spec says {}", name,
                                toString(t.dtype), toString(want)),
                    std::source_location());
}

/// checkAttentionTensors without the aliasing rule; o and lse are checked
/// as outputs when \p outputs (the forward), as inputs otherwise.
AttentionShape checkAttentionShapes(const AttentionSpec &spec,
                                    const TensorRef &q, const TensorRef &k,
                                    const TensorRef &v, const TensorRef *o,
                                    const TensorRef *lse, bool outputs) {
  spec.validate();
  checkTensor("q", q, 4, false);
  checkTensor("k", k, 4, false);
  checkTensor("v", v, 4, false);
  expectDType("q", q, spec.dtypeQ);
  expectDType("k", k, spec.dtypeK);
  expectDType("v", v, spec.dtypeV);
  AttentionShape s;
  s.batch = q.shape[0];
  s.headsQ = q.shape[1];
  s.seqlenQ = q.shape[2];
  s.headDimQK = q.shape[3];
  s.headsKV = k.shape[1];
  s.seqlenK = k.shape[2];
  s.headDimV = v.shape[3];
  expectDim("q", q, 1, spec.headsQ, "heads_q of the spec");
  expectDim("q", q, 3, spec.headDimQK, "head_dim_qk of the spec");
  expectDim("k", k, 0, s.batch, "batch of q");
  expectDim("k", k, 1, spec.headsKV, "heads_kv of the spec");
  expectDim("k", k, 3, spec.headDimQK, "head_dim_qk of the spec");
  expectDim("v", v, 0, s.batch, "batch of q");
  expectDim("v", v, 1, spec.headsKV, "heads_kv of the spec");
  expectDim("v", v, 2, s.seqlenK, "seqlen_k of k");
  expectDim("v", v, 3, spec.headDimV, "head_dim_v of the spec");
  if (o) {
    checkTensor("o", *o, 4, outputs);
    expectDType("o", *o, spec.dtypeO);
    expectDim("o", *o, 0, s.batch, "batch of q");
    expectDim("o", *o, 1, s.headsQ, "heads_q");
    expectDim("o", *o, 2, s.seqlenQ, "seqlen_q of q");
    expectDim("o", *o, 3, spec.headDimV, "head_dim_v of the spec");
  }
  if (lse) {
    checkTensor("lse", *lse, 3, outputs);
    if (lse->dtype != DType::F32)
      throw UserError(
          fmt::format("lse.dtype = {}, expected fp32", toString(lse->dtype)),
          std::source_location());
    expectDim("lse", *lse, 0, s.batch, "batch of q");
    expectDim("lse", *lse, 1, s.headsQ, "heads_q");
    expectDim("lse", *lse, 2, s.seqlenQ, "seqlen_q of q");
  }
  return s;
}
} // namespace

AttentionShape checkAttentionTensors(const AttentionSpec &spec,
                                     const TensorRef &q, const TensorRef &k,
                                     const TensorRef &v, const TensorRef *o,
                                     const TensorRef *lse) {
  AttentionShape s = checkAttentionShapes(spec, q, k, v, o, lse, true);
  expectNoAliasing(q, k, v, o, lse);
  return s;
}

int64_t checkCuSeqlens(const char *name, std::span<const int32_t> cu,
                       int64_t total) {
  auto fail = [](const std::string &m) {
    throw UserError(m, std::source_location());
  };
  if (cu.empty())
    fail(fmt::format("{} is empty: it needs batch + 1 entries (at least {}[0] "
                     "= 0)",
                     name, name));
  if (cu[0] != 0)
    fail(fmt::format("{}[0] = {}, expected 0", name, cu[0]));
  int64_t longest = 0;
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      fail(fmt::format("{}[{}] = {} < {}[{}] = {} (cu_seqlens must not "
                       "decrease)",
                       name, i, cu[i], name, i - 1, cu[i - 1]));
    longest = std::max<int64_t>(longest, cu[i] - cu[i - 1]);
  }
  if (cu.back() != total)
    fail(fmt::format("{}[{}] = {}, but the packed tensor holds {} tokens", name,
                     cu.size() - 1, cu.back(), total));
  return longest;
}

namespace {
/// checkVarlenTensors without the aliasing rule (see checkAttentionShapes).
VarlenShape checkVarlenShapes(const AttentionSpec &spec, const TensorRef &q,
                              const TensorRef &k, const TensorRef &v,
                              std::span<const int32_t> cuSeqlensQ,
                              std::span<const int32_t> cuSeqlensK,
                              const TensorRef *o, const TensorRef *lse,
                              bool outputs) {
  spec.validate();
  checkTensor("q", q, 3, false);
  checkTensor("k", k, 3, false);
  checkTensor("v", v, 3, false);
  expectDType("q", q, spec.dtypeQ);
  expectDType("k", k, spec.dtypeK);
  expectDType("v", v, spec.dtypeV);
  VarlenShape s;
  s.totalQ = q.shape[0];
  s.headsQ = q.shape[1];
  s.headDimQK = q.shape[2];
  s.totalK = k.shape[0];
  s.headsKV = k.shape[1];
  s.headDimV = v.shape[2];
  expectDim("q", q, 1, spec.headsQ, "heads_q of the spec");
  expectDim("q", q, 2, spec.headDimQK, "head_dim_qk of the spec");
  expectDim("k", k, 1, spec.headsKV, "heads_kv of the spec");
  expectDim("k", k, 2, spec.headDimQK, "head_dim_qk of the spec");
  expectDim("v", v, 0, s.totalK, "total_k of k");
  expectDim("v", v, 1, spec.headsKV, "heads_kv of the spec");
  expectDim("v", v, 2, spec.headDimV, "head_dim_v of the spec");
  if (cuSeqlensQ.size() != cuSeqlensK.size())
    throw UserError(fmt::format("cu_seqlens_q has {} entries but cu_seqlens_k "
                                "has {} (both batch + 1)",
                                cuSeqlensQ.size(), cuSeqlensK.size()),
                    std::source_location());
  s.maxSeqlenQ = checkCuSeqlens("cu_seqlens_q", cuSeqlensQ, s.totalQ);
  s.maxSeqlenK = checkCuSeqlens("cu_seqlens_k", cuSeqlensK, s.totalK);
  s.batch = static_cast<int64_t>(cuSeqlensQ.size()) - 1;
  if (o) {
    checkTensor("o", *o, 3, outputs);
    expectDType("o", *o, spec.dtypeO);
    expectDim("o", *o, 0, s.totalQ, "total_q of q");
    expectDim("o", *o, 1, s.headsQ, "heads_q");
    expectDim("o", *o, 2, spec.headDimV, "head_dim_v of the spec");
  }
  if (lse) {
    checkTensor("lse", *lse, 2, outputs);
    if (lse->dtype != DType::F32)
      throw UserError(
          fmt::format("lse.dtype = {}, expected fp32", toString(lse->dtype)),
          std::source_location());
    expectDim("lse", *lse, 0, s.headsQ, "heads_q");
    expectDim("lse", *lse, 1, s.totalQ, "total_q of q");
  }
  return s;
}

} // namespace

VarlenShape checkVarlenTensors(const AttentionSpec &spec, const TensorRef &q,
                               const TensorRef &k, const TensorRef &v,
                               std::span<const int32_t> cuSeqlensQ,
                               std::span<const int32_t> cuSeqlensK,
                               const TensorRef *o, const TensorRef *lse) {
  VarlenShape s =
      checkVarlenShapes(spec, q, k, v, cuSeqlensQ, cuSeqlensK, o, lse, true);
  expectNoAliasing(q, k, v, o, lse);
  return s;
}

PagedShape checkPagedTensors(const AttentionSpec &spec, const TensorRef &q,
                             const TensorRef &kCache, const TensorRef &vCache) {
  spec.validate();
  checkTensor("q", q, 4, false);
  checkTensor("k_cache", kCache, 4, false);
  checkTensor("v_cache", vCache, 4, false);
  expectDType("q", q, spec.dtypeQ);
  expectDType("k_cache", kCache, spec.dtypeK);
  expectDType("v_cache", vCache, spec.dtypeV);
  PagedShape s;
  s.batch = q.shape[0];
  s.headsQ = q.shape[1];
  s.qLen = q.shape[2];
  s.headDimQK = q.shape[3];
  s.numPages = kCache.shape[0];
  s.headsKV = kCache.shape[1];
  s.pageSize = kCache.shape[2];
  s.headDimV = vCache.shape[3];
  expectDim("q", q, 1, spec.headsQ, "heads_q of the spec");
  expectDim("q", q, 3, spec.headDimQK, "head_dim_qk of the spec");
  expectDim("k_cache", kCache, 1, spec.headsKV, "heads_kv of the spec");
  expectDim("k_cache", kCache, 3, spec.headDimQK, "head_dim_qk of the spec");
  expectDim("v_cache", vCache, 0, s.numPages, "num_pages of k_cache");
  expectDim("v_cache", vCache, 1, spec.headsKV, "heads_kv of the spec");
  expectDim("v_cache", vCache, 2, s.pageSize, "page_size of k_cache");
  expectDim("v_cache", vCache, 3, spec.headDimV, "head_dim_v of the spec");
  checkPageSize(s.pageSize);
  checkNumPages("k_cache", s.numPages);
  return s;
}

void checkPagedOutputs(const TensorRef &q, const TensorRef &kCache,
                       const TensorRef &vCache, const TensorRef &o,
                       const TensorRef *lse,
                       std::span<const MemoryRegion> tableArrays) {
  checkTensor("o", o, 4, true);
  if (lse)
    checkTensor("lse", *lse, 3, true);
  std::vector<MemoryRegion> outs = {memoryOf("o", o)};
  if (lse)
    outs.push_back(memoryOf("lse", *lse));
  std::vector<MemoryRegion> ins = {memoryOf("q", q),
                                   memoryOf("k_cache", kCache),
                                   memoryOf("v_cache", vCache)};
  ins.insert(ins.end(), tableArrays.begin(), tableArrays.end());
  checkOutputsDisjoint(outs, ins);
}

MemoryRegion memoryOf(std::string name, const TensorRef &t) {
  MemoryRegion r{std::move(name), 0, 0};
  if (t.numel() == 0 || !t.data)
    return r;
  // Saturating: a view whose last element's offset overflows (refused
  // elsewhere) reaches the end of the address space here.
  uint64_t far = 0;
  bool overflow = false;
  for (int i = 0; i < t.rank && !overflow; ++i) {
    uint64_t step = 0;
    overflow = t.shape[i] < 1 || t.strides[i] < 0 ||
               __builtin_mul_overflow(uint64_t(t.shape[i] - 1),
                                      uint64_t(t.strides[i]), &step) ||
               __builtin_add_overflow(far, step, &far);
  }
  uint64_t bytes = 0;
  overflow = overflow || __builtin_add_overflow(far, 1, &far) ||
             __builtin_mul_overflow(far, uint64_t(byteSize(t.dtype)), &bytes);
  r.begin = reinterpret_cast<uintptr_t>(t.data);
  if (overflow || __builtin_add_overflow(r.begin, bytes, &r.end))
    r.end = std::numeric_limits<uintptr_t>::max();
  return r;
}

MemoryRegion memoryOf(std::string name, const void *data, uint64_t bytes) {
  MemoryRegion r{std::move(name), 0, 0};
  if (!data || bytes == 0)
    return r;
  r.begin = reinterpret_cast<uintptr_t>(data);
  if (__builtin_add_overflow(r.begin, bytes, &r.end))
    r.end = std::numeric_limits<uintptr_t>::max();
  return r;
}

void checkOutputsDisjoint(std::span<const MemoryRegion> outputs,
                          std::span<const MemoryRegion> inputs) {
  auto expect = [](const MemoryRegion &out, const MemoryRegion &other) {
    if (out.begin == out.end || other.begin == other.end ||
        out.end <= other.begin || other.end <= out.begin)
      return;
    throw UserError(fmt::format("{} overlaps {} in memory ({} spans bytes "
                                "[{:#x}, {:#x}), {} [{:#x}, {:#x})): outputs "
                                "must not alias inputs or each other",
                                out.name, other.name, out.name, out.begin,
                                out.end, other.name, other.begin, other.end),
                    std::source_location());
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      expect(outputs[i], outputs[j]);
    for (const MemoryRegion &in : inputs)
      expect(outputs[i], in);
  }
}

void checkNoSelfOverlap(const char *name, const TensorRef &t) {
  // An output with no elements cannot overlap (contiguous strides of an
  // empty tensor are 0).
  if (t.numel() == 0)
    return;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] > 1 && t.strides[i] == 0)
      throw UserError(fmt::format("{}.strides[{}] = 0 on a dim of size {}: "
                                  "output elements would overlap",
                                  name, i, t.shape[i]),
                      std::source_location());
}

AttentionShape checkBackwardTensors(const AttentionSpec &spec,
                                    const TensorRef &q, const TensorRef &k,
                                    const TensorRef &v, const TensorRef &o,
                                    const TensorRef &lse, const TensorRef &dO,
                                    const TensorRef &dq, const TensorRef &dk,
                                    const TensorRef &dv) {
  AttentionShape s = checkAttentionShapes(spec, q, k, v, &o, &lse, false);
  expectBackwardGradients(spec, q, k, v, o, lse, dO, dq, dk, dv);
  return s;
}

VarlenShape checkVarlenBackwardTensors(
    const AttentionSpec &spec, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, std::span<const int32_t> cuSeqlensQ,
    std::span<const int32_t> cuSeqlensK, const TensorRef &o,
    const TensorRef &lse, const TensorRef &dO, const TensorRef &dq,
    const TensorRef &dk, const TensorRef &dv) {
  VarlenShape s =
      checkVarlenShapes(spec, q, k, v, cuSeqlensQ, cuSeqlensK, &o, &lse, false);
  expectBackwardGradients(spec, q, k, v, o, lse, dO, dq, dk, dv);
  return s;
}

} // namespace flashjit
