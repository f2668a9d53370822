//===- CpuDecode.cpp - Paged decoding on the CPU --------------------------===//
//
// Gathers every sequence's tokens out of its pages into packed varlen
// tensors (in the caches' dtypes, bit for bit; of a sliding window only the
// keys its rows may see, the rest left 0), runs the varlen CPU kernel once,
// and scatters O and LSE back to [batch, heads_q, q_len, ...].
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/CpuDecode.h"

#include "flashjit/frontend/DecodeSplits.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Fp8.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <vector>

namespace flashjit::runtime {

namespace {

[[noreturn]] void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

/// A packed [tokens, heads, dim] tensor over \p bytes.
TensorRef packed(std::vector<char> &bytes, DType dtype, int64_t tokens,
                 int64_t heads, int64_t dim) {
  bytes.resize(static_cast<size_t>(
      std::max<int64_t>(tokens * heads * dim * byteSize(dtype), 1)));
  TensorRef r;
  r.data = bytes.data();
  r.dtype = dtype;
  r.rank = 3;
  r.shape = {tokens, heads, dim, 1};
  r.strides = {heads * dim, dim, 1, 1};
  return r;
}

} // namespace

void cpuPagedDecode(const CpuAttentionKernel &kernel, const TensorRef &q,
                    const TensorRef &kCache, const TensorRef &vCache,
                    const PageList &pages, const TensorRef &o,
                    const TensorRef *lse, const Arguments &args,
                    int numThreads) {
  const AttentionSpec &spec = kernel.spec();
  rejectFp8(spec, "paged decoding");
  if (!kernel.config().varlen || kernel.config().blockSparse)
    fail(fmt::format("cpuPagedDecode: kernel '{}' was compiled with varlen = "
                     "{}, block_sparse = {}; paged decoding needs varlen = "
                     "true, block_sparse = false",
                     spec.variant.name(), kernel.config().varlen,
                     kernel.config().blockSparse));
  const PagedShape s = checkPagedTensors(spec, q, kCache, vCache);
  if (pages.batch() != s.batch)
    fail(fmt::format("the page table has {} sequences, q.shape[0] = {}",
                     pages.batch(), s.batch));
  if (pages.pageSize != s.pageSize)
    fail(fmt::format("the page table's page_size = {}, k_cache.shape[2] = {}",
                     pages.pageSize, s.pageSize));
  if (pages.numPages != s.numPages)
    fail(fmt::format("the page table's num_pages = {}, k_cache.shape[0] = {}",
                     pages.numPages, s.numPages));
  if (static_cast<int64_t>(pages.pageStart.size()) != s.batch)
    fail(fmt::format("the page table has {} page starts for {} sequences",
                     pages.pageStart.size(), s.batch));
  if (o.rank != 4 || o.shape[0] != s.batch || o.shape[1] != s.headsQ ||
      o.shape[2] != s.qLen || o.shape[3] != s.headDimV)
    fail(fmt::format("o.shape = [{}, {}, {}, {}], expected [{}, {}, {}, {}]",
                     o.shape[0], o.shape[1], o.shape[2], o.shape[3], s.batch,
                     s.headsQ, s.qLen, s.headDimV));
  if (o.dtype != spec.dtypeO)
    fail(fmt::format("o.dtype = {}, but the spec says {}", toString(o.dtype),
                     toString(spec.dtypeO)));
  const bool writeLse = spec.returnLse && lse;
  if (writeLse &&
      (lse->rank != 3 || lse->dtype != DType::F32 || lse->shape[0] != s.batch ||
       lse->shape[1] != s.headsQ || lse->shape[2] != s.qLen))
    fail(fmt::format("lse: rank {}, dtype {}, shape [{}, {}, {}]; expected "
                     "fp32 [{}, {}, {}]",
                     lse->rank, toString(lse->dtype), lse->shape[0],
                     lse->shape[1], lse->shape[2], s.batch, s.headsQ, s.qLen));
  const MemoryRegion table[] = {memoryOf("the page table's page ids",
                                         pages.pages.data(),
                                         pages.pages.size_bytes())};
  checkPagedOutputs(q, kCache, vCache, o, writeLse ? lse : nullptr, table);
  int64_t totalK = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = pages.seqLens[b];
    if (len < 0)
      fail(fmt::format("seq_lens[{}] = {} is negative", b, len));
    const int64_t used = (len + pages.pageSize - 1) / pages.pageSize;
    for (int64_t p = 0; p < used; ++p) {
      const int64_t at = pages.pageStart[b] + p;
      if (at < 0 || at >= static_cast<int64_t>(pages.pages.size()))
        fail(fmt::format("sequence {}: page entry {} outside the {} page ids "
                         "of the table",
                         b, at, pages.pages.size()));
      const int32_t id = pages.pages[static_cast<size_t>(at)];
      if (id < 0 || id >= s.numPages)
        fail(fmt::format("page id {} of sequence {} (entry {}) outside [0, "
                         "{})",
                         id, b, at, s.numPages));
    }
    totalK += len;
  }
  const int64_t totalQ = s.batch * s.qLen;
  if (totalK > std::numeric_limits<int32_t>::max() ||
      totalQ > std::numeric_limits<int32_t>::max())
    fail(fmt::format("cpuPagedDecode packs at most 2^31 - 1 tokens (total "
                     "keys {}, queries {})",
                     totalK, totalQ));
  if (s.batch == 0 || s.headsQ == 0)
    return;
  if (spec.returnLse && !lse)
    fail(fmt::format("lse is NULL: kernel '{}' returns LSE (spec.returnLse); "
                     "pass an fp32 tensor [batch, heads_q, q_len] = [{}, {}, "
                     "{}]",
                     spec.variant.name(), s.batch, s.headsQ, s.qLen));

  const int64_t hq = s.headsQ, hk = s.headsKV;
  std::vector<char> qb, kb, vb, ob, lb;
  TensorRef qp = packed(qb, q.dtype, totalQ, hq, s.headDimQK),
            kp = packed(kb, kCache.dtype, totalK, hk, s.headDimQK),
            vp = packed(vb, vCache.dtype, totalK, hk, s.headDimV),
            op = packed(ob, spec.dtypeO, totalQ, hq, s.headDimV);
  lb.resize(static_cast<size_t>(std::max<int64_t>(hq * totalQ, 1)) * 4);
  TensorRef lp;
  lp.data = lb.data();
  lp.dtype = DType::F32;
  lp.rank = 2;
  lp.shape = {hq, totalQ, 1, 1};
  lp.strides = {totalQ, 1, 1, 1};
  auto copy = [](const TensorRef &src, int64_t at, const TensorRef &dst,
                 int64_t to) {
    const int size = byteSize(src.dtype);
    std::memcpy(static_cast<char *>(dst.data) + to * size,
                static_cast<const char *>(src.data) + at * size,
                static_cast<size_t>(size));
  };
  std::vector<int32_t> cuQ{0}, cuK{0};
  int64_t t = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.qLen; ++i)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t d = 0; d < s.headDimQK; ++d)
          copy(q, q.offset(b, h, i, d), qp,
               ((b * s.qLen + i) * hq + h) * s.headDimQK + d);
    // Only the keys some row of the sequence may see (the GPU kernel's
    // split range, DecodeSplits.h); the rest stay 0 and are masked for
    // every row, so they cannot change O or LSE.
    const KeyTiles seen =
        decodeVisibleKeyTiles(spec, args, {b, b}, {0, hq - 1}, {0, s.qLen - 1},
                              s.qLen, pages.seqLens[b], /*blockN=*/1);
    for (int64_t j = 0; j < pages.seqLens[b]; ++j, ++t) {
      if (j < seen.first || j > seen.last)
        continue;
      const int32_t page = pages.pageOf(b, j);
      const int64_t slot = j % s.pageSize;
      for (int64_t h = 0; h < hk; ++h) {
        for (int64_t d = 0; d < s.headDimQK; ++d)
          copy(kCache, kCache.offset(page, h, slot, d), kp,
               (t * hk + h) * s.headDimQK + d);
        for (int64_t d = 0; d < s.headDimV; ++d)
          copy(vCache, vCache.offset(page, h, slot, d), vp,
               (t * hk + h) * s.headDimV + d);
      }
    }
    cuQ.push_back(static_cast<int32_t>((b + 1) * s.qLen));
    cuK.push_back(static_cast<int32_t>(t));
  }
  kernel.runVarlen(qp, kp, vp, op, writeLse ? &lp : nullptr, cuQ, cuK, args,
                   nullptr, numThreads);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < s.qLen; ++i) {
        const int64_t tq = b * s.qLen + i;
        for (int64_t d = 0; d < s.headDimV; ++d)
          copy(op, (tq * hq + h) * s.headDimV + d, o, o.offset(b, h, i, d));
        if (writeLse)
          copy(lp, h * totalQ + tq, *lse, lse->offset(b, h, i));
      }
}

} // namespace flashjit::runtime
