//===- Paged.cpp - Page tables, the paged oracle and state merging --------===//
//
// The page tables are validated entry by entry on the host (a bad page id
// would make a kernel read another process's memory), then normalised to a
// PageList. The paged oracle gathers each sequence's tokens out of its pages
// into a packed varlen batch and hands it to referenceVarlenAttention, so it
// is the plain reference by construction. mergeStates combines partial
// softmax states in double.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Paged.h"

#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace flashjit {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string &message) {
  throw UserError(message, std::source_location());
}

void checkPageId(const char *array, int64_t index, int32_t page,
                 int64_t numPages) {
  if (page < 0 || page >= numPages)
    fail(fmt::format("{}[{}] = {}, outside [0, {}) (num_pages of the cache)",
                     array, index, page, numPages));
}

/// Copies the element at \p offset of \p t (elements) to \p dst as raw bytes.
void copyElement(const TensorRef &t, int64_t offset, char *dst) {
  const int size = byteSize(t.dtype);
  std::memcpy(dst, static_cast<const char *>(t.data) + offset * size,
              static_cast<size_t>(size));
}

/// Checks one O / LSE pair of a merge against the shape \p shape of the
/// first O ([batch, heads, seqlen, head_dim]).
void checkState(const std::string &oName, const TensorRef &o,
                const std::string &lseName, const TensorRef &lse,
                const std::array<int64_t, 4> &shape) {
  if (o.rank != 4)
    fail(fmt::format("{}.rank = {}, expected 4 ([batch, heads, seqlen, "
                     "head_dim])",
                     oName, o.rank));
  if (lse.rank != 3)
    fail(fmt::format("{}.rank = {}, expected 3 ([batch, heads, seqlen])",
                     lseName, lse.rank));
  if (lse.dtype != DType::F32)
    fail(fmt::format("{}.dtype = {}, expected fp32", lseName,
                     toString(lse.dtype)));
  for (int i = 0; i < 4; ++i) {
    if (o.shape[i] != shape[i])
      fail(fmt::format("{}.shape[{}] = {}, expected {}", oName, i, o.shape[i],
                       shape[i]));
    if (o.strides[i] < 0)
      fail(fmt::format("{}.strides[{}] = {} is negative", oName, i,
                       o.strides[i]));
  }
  for (int i = 0; i < 3; ++i) {
    if (lse.shape[i] != shape[i])
      fail(fmt::format("{}.shape[{}] = {}, expected {}", lseName, i,
                       lse.shape[i], shape[i]));
    if (lse.strides[i] < 0)
      fail(fmt::format("{}.strides[{}] = {} is negative", lseName, i,
                       lse.strides[i]));
  }
  const int64_t rows = shape[0] * shape[1] * shape[2];
  if (rows * shape[3] > 0 && !o.data)
    fail(fmt::format("{}.data is null", oName));
  if (rows > 0 && !lse.data)
    fail(fmt::format("{}.data is null", lseName));
}

} // namespace

void checkNumPages(const char *name, int64_t numPages) {
  constexpr int64_t kMost = int64_t{1} << 31;
  if (numPages < 0 || numPages > kMost)
    fail(fmt::format("{}.shape[0] = {} pages, expected 0..2^31 (page ids are "
                     "int32)",
                     name, numPages));
}

void checkPageSize(int64_t pageSize) {
  if (pageSize < 1 || pageSize > kMaxPageSize ||
      (pageSize & (pageSize - 1)) != 0)
    fail(fmt::format("page_size = {}, expected a power of two in [1, {}]",
                     pageSize, kMaxPageSize));
}

int64_t PageList::maxSeqLen() const {
  int64_t m = 0;
  for (int64_t n : seqLens)
    m = std::max(m, n);
  return m;
}

PageList checkPagedCsr(const PagedCsr &csr, int64_t batch, int64_t numPages,
                       int64_t pageSize) {
  checkPageSize(pageSize);
  if (numPages < 0)
    fail(fmt::format("num_pages = {} is negative", numPages));
  if (static_cast<int64_t>(csr.kvIndptr.size()) != batch + 1)
    fail(fmt::format("kv_indptr has {} entries, expected batch + 1 = {}",
                     csr.kvIndptr.size(), batch + 1));
  if (static_cast<int64_t>(csr.kvLastPageLen.size()) != batch)
    fail(fmt::format("kv_last_page_len has {} entries, expected batch = {}",
                     csr.kvLastPageLen.size(), batch));
  if (csr.kvIndptr[0] != 0)
    fail(fmt::format("kv_indptr[0] = {}, expected 0", csr.kvIndptr[0]));
  PageList list;
  list.pageSize = pageSize;
  list.numPages = numPages;
  list.pages = csr.kvIndices;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t begin = csr.kvIndptr[b], end = csr.kvIndptr[b + 1];
    if (end < begin)
      fail(fmt::format("kv_indptr[{}] = {} < kv_indptr[{}] = {}", b + 1, end, b,
                       begin));
    if (end > static_cast<int64_t>(csr.kvIndices.size()))
      fail(fmt::format("kv_indptr[{}] = {} exceeds the {} entries of "
                       "kv_indices",
                       b + 1, end, csr.kvIndices.size()));
    const int64_t last = csr.kvLastPageLen[b];
    if (end == begin) {
      if (last != 0)
        fail(fmt::format("kv_last_page_len[{}] = {}, expected 0 (sequence {} "
                         "has no pages)",
                         b, last, b));
    } else if (last < 1 || last > pageSize) {
      fail(fmt::format("kv_last_page_len[{}] = {}, expected 1..page_size = {}",
                       b, last, pageSize));
    }
    for (int64_t i = begin; i < end; ++i)
      checkPageId("kv_indices", i, csr.kvIndices[i], numPages);
    list.pageStart.push_back(begin);
    list.seqLens.push_back(end == begin ? 0
                                        : (end - begin - 1) * pageSize + last);
  }
  return list;
}

PageList checkBlockTable(const BlockTable &table, int64_t batch,
                         int64_t numPages, int64_t pageSize) {
  checkPageSize(pageSize);
  if (numPages < 0)
    fail(fmt::format("num_pages = {} is negative", numPages));
  if (table.maxPages < 0)
    fail(fmt::format("max_pages = {} is negative", table.maxPages));
  int64_t entries = 0, capacity = 0;
  if (__builtin_mul_overflow(batch, table.maxPages, &entries))
    fail(fmt::format("batch = {} times max_pages = {} block_table entries "
                     "overflows 64 bits",
                     batch, table.maxPages));
  if (static_cast<int64_t>(table.table.size()) != entries)
    fail(fmt::format("block_table has {} entries, expected batch * max_pages "
                     "= {} * {}",
                     table.table.size(), batch, table.maxPages));
  // A sequence holds at most max_pages * page_size tokens (no bound when
  // that overflows: seq_lens entries are int32).
  if (__builtin_mul_overflow(table.maxPages, pageSize, &capacity))
    capacity = std::numeric_limits<int64_t>::max();
  if (static_cast<int64_t>(table.seqLens.size()) != batch)
    fail(fmt::format("seq_lens has {} entries, expected batch = {}",
                     table.seqLens.size(), batch));
  PageList list;
  list.pageSize = pageSize;
  list.numPages = numPages;
  list.pages = table.table;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = table.seqLens[b];
    if (len < 0 || len > capacity)
      fail(fmt::format("seq_lens[{}] = {}, expected 0..max_pages * page_size "
                       "= {} * {} = {}",
                       b, len, table.maxPages, pageSize, capacity));
    const int64_t used = (len + pageSize - 1) / pageSize;
    for (int64_t p = 0; p < used; ++p) {
      const int64_t at = b * table.maxPages + p;
      if (table.table[at] < 0 || table.table[at] >= numPages)
        fail(fmt::format("block_table[{}][{}] = {}, outside [0, {}) "
                         "(num_pages of the cache)",
                         b, p, table.table[at], numPages));
    }
    list.pageStart.push_back(b * table.maxPages);
    list.seqLens.push_back(len);
  }
  return list;
}

ReferenceOutput
referencePagedAttention(const AttentionSpec &spec, const TensorRef &q,
                        const TensorRef &kCache, const TensorRef &vCache,
                        const PageList &pages, const Arguments &args) {
  PagedShape s = checkPagedTensors(spec, q, kCache, vCache);
  if (pages.batch() != s.batch)
    fail(fmt::format("the page table has {} sequences, q.shape[0] = {}",
                     pages.batch(), s.batch));
  if (pages.pageSize != s.pageSize)
    fail(fmt::format("the page table's page_size = {}, the cache's = {}",
                     pages.pageSize, s.pageSize));
  if (pages.numPages != s.numPages)
    fail(fmt::format("the page table's num_pages = {}, the cache's = {}",
                     pages.numPages, s.numPages));
  int64_t totalK = 0;
  for (int64_t n : pages.seqLens)
    totalK += n;
  if (totalK > std::numeric_limits<int32_t>::max() ||
      s.batch * s.qLen > std::numeric_limits<int32_t>::max())
    fail(fmt::format("the paged reference packs at most 2^31 - 1 tokens "
                     "(total keys {})",
                     totalK));

  // Gather into packed varlen tensors, raw bytes in the caller's dtypes.
  const int64_t hq = s.headsQ, hk = s.headsKV;
  const int64_t dqk = s.headDimQK, dv = s.headDimV;
  const int64_t totalQ = s.batch * s.qLen;
  const int eq = byteSize(q.dtype), ek = byteSize(kCache.dtype),
            ev = byteSize(vCache.dtype);
  std::vector<char> qp(
      static_cast<size_t>(std::max<int64_t>(totalQ * hq * dqk * eq, 1))),
      kp(static_cast<size_t>(std::max<int64_t>(totalK * hk * dqk * ek, 1))),
      vp(static_cast<size_t>(std::max<int64_t>(totalK * hk * dv * ev, 1)));
  std::vector<int32_t> cuQ{0}, cuK{0};
  int64_t t = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.qLen; ++i)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t d = 0; d < dqk; ++d)
          copyElement(q, q.offset(b, h, i, d),
                      &qp[(((b * s.qLen + i) * hq + h) * dqk + d) * eq]);
    for (int64_t j = 0; j < pages.seqLens[b]; ++j, ++t) {
      const int32_t page = pages.pageOf(b, j);
      const int64_t slot = j % s.pageSize;
      for (int64_t h = 0; h < hk; ++h) {
        for (int64_t d = 0; d < dqk; ++d)
          copyElement(kCache, kCache.offset(page, h, slot, d),
                      &kp[((t * hk + h) * dqk + d) * ek]);
        for (int64_t d = 0; d < dv; ++d)
          copyElement(vCache, vCache.offset(page, h, slot, d),
                      &vp[((t * hk + h) * dv + d) * ev]);
      }
    }
    cuQ.push_back(static_cast<int32_t>((b + 1) * s.qLen));
    cuK.push_back(static_cast<int32_t>(t));
  }
  auto packed = [](std::vector<char> &bytes, DType dtype, int64_t tokens,
                   int64_t heads, int64_t dim) {
    TensorRef r;
    r.data = bytes.data();
    r.dtype = dtype;
    r.rank = 3;
    r.shape = {tokens, heads, dim, 1};
    r.strides = {heads * dim, dim, 1, 1};
    return r;
  };
  VarlenReferenceOutput v = referenceVarlenAttention(
      spec, packed(qp, q.dtype, totalQ, hq, dqk),
      packed(kp, kCache.dtype, totalK, hk, dqk),
      packed(vp, vCache.dtype, totalK, hk, dv), cuQ, cuK, args);

  ReferenceOutput out;
  out.shape = {s.batch, hq, hk, s.qLen, pages.maxSeqLen(), dqk, dv};
  out.o.assign(static_cast<size_t>(s.batch * hq * s.qLen * dv), 0.0);
  out.lse.assign(static_cast<size_t>(s.batch * hq * s.qLen), kNegInf);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < s.qLen; ++i) {
        const int64_t tq = b * s.qLen + i;
        out.lseAt(b, h, i) = v.lseAt(h, tq);
        for (int64_t d = 0; d < dv; ++d)
          out.oAt(b, h, i, d) = v.oAt(tq, h, d);
      }
  return out;
}

void checkMergeSink(std::span<const float> sink, int64_t heads) {
  if (sink.empty())
    return;
  if (static_cast<int64_t>(sink.size()) != heads)
    fail(fmt::format("merge_states: sink has {} entries, expected heads = {} "
                     "(one logit per head)",
                     sink.size(), heads));
  for (size_t h = 0; h < sink.size(); ++h)
    if (std::isnan(sink[h]) || sink[h] == -kNegInf)
      fail(fmt::format("merge_states: sink[{}] = {}: a sink must be finite "
                       "or -inf (no sink for that head)",
                       h, sink[h]));
}

void mergeStates(const TensorRef &oA, const TensorRef &lseA,
                 const TensorRef &oB, const TensorRef &lseB, const TensorRef &o,
                 const TensorRef &lse, std::span<const float> sink) {
  const TensorRef os[] = {oA, oB}, lses[] = {lseA, lseB};
  mergeStates(os, lses, o, lse, sink);
}

void checkMergeStates(std::span<const TensorRef> os,
                      std::span<const TensorRef> lses, const TensorRef &o,
                      const TensorRef &lse) {
  if (os.empty())
    fail("merge_states: no states to merge (os is empty)");
  if (os.size() != lses.size())
    fail(fmt::format("merge_states: {} O tensors but {} LSE tensors", os.size(),
                     lses.size()));
  const std::array<int64_t, 4> shape = os[0].shape;
  for (size_t i = 0; i < os.size(); ++i)
    checkState(fmt::format("o[{}]", i), os[i], fmt::format("lse[{}]", i),
               lses[i], shape);
  checkState("o_out", o, "lse_out", lse, shape);
  checkNoSelfOverlap("o_out", o);
  checkNoSelfOverlap("lse_out", lse);
  // In place is allowed: an output may be exactly one of the inputs (the
  // same view; each row is read whole before it is written). Any other
  // overlap (a shifted or re-strided view, o_out over an LSE) is refused.
  auto same = [](const TensorRef &a, const TensorRef &b) {
    return a.data == b.data && a.dtype == b.dtype && a.rank == b.rank &&
           a.shape == b.shape && a.strides == b.strides;
  };
  const MemoryRegion oOut[] = {memoryOf("o_out", o)},
                     lseOut[] = {memoryOf("lse_out", lse)};
  std::vector<MemoryRegion> forO, forLse = {oOut[0]};
  for (size_t i = 0; i < os.size(); ++i) {
    MemoryRegion oi = memoryOf(fmt::format("o[{}]", i), os[i]),
                 li = memoryOf(fmt::format("lse[{}]", i), lses[i]);
    if (!same(o, os[i]))
      forO.push_back(oi);
    forO.push_back(li);
    forLse.push_back(oi);
    if (!same(lse, lses[i]))
      forLse.push_back(li);
  }
  checkOutputsDisjoint(oOut, forO);
  checkOutputsDisjoint(lseOut, forLse);
}

void mergeStates(std::span<const TensorRef> os, std::span<const TensorRef> lses,
                 const TensorRef &o, const TensorRef &lse,
                 std::span<const float> sink) {
  checkMergeStates(os, lses, o, lse);
  const std::array<int64_t, 4> shape = os[0].shape;
  checkMergeSink(sink, shape[1]);

  const size_t n = os.size();
  const int64_t dim = shape[3];
  std::vector<double> w(n), row(static_cast<size_t>(dim));
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t h = 0; h < shape[1]; ++h)
      for (int64_t s = 0; s < shape[2]; ++s) {
        // The sink is one more state with no value, entered once.
        const double sk = sink.empty() ? kNegInf : double(sink[h]);
        double m = sk;
        bool nan = false;
        for (size_t i = 0; i < n; ++i) {
          w[i] = loadAsFloat(lses[i].data, DType::F32, lses[i].offset(b, h, s));
          if (std::isnan(w[i]) || w[i] == -kNegInf)
            nan = true;
          else
            m = std::max(m, w[i]);
        }
        double l = kNegInf;
        std::fill(row.begin(), row.end(), 0.0);
        if (nan) {
          l = std::numeric_limits<double>::quiet_NaN();
          std::fill(row.begin(), row.end(), l);
        } else if (m != kNegInf) {
          double sum = sk == kNegInf ? 0.0 : std::exp(sk - m);
          for (size_t i = 0; i < n; ++i)
            if (w[i] != kNegInf)
              sum += std::exp(w[i] - m);
          l = m + std::log(sum);
          for (size_t i = 0; i < n; ++i) {
            if (w[i] == kNegInf)
              continue; // no weight; O is not read (it may be garbage)
            const double scale = std::exp(w[i] - l);
            for (int64_t d = 0; d < dim; ++d)
              row[d] += scale * loadAsFloat(os[i].data, os[i].dtype,
                                            os[i].offset(b, h, s, d));
          }
        }
        for (int64_t d = 0; d < dim; ++d)
          storeFromFloat(o.data, o.dtype, o.offset(b, h, s, d),
                         static_cast<float>(row[d]));
        storeFromFloat(lse.data, DType::F32, lse.offset(b, h, s),
                       static_cast<float>(l));
      }
}

int64_t checkPagedAppend(const TensorRef &kNew, const TensorRef &vNew,
                         const TensorRef &kCache, const TensorRef &vCache,
                         const PageList &pages) {
  const std::pair<const char *, const TensorRef *> all[] = {
      {"k_new", &kNew},
      {"v_new", &vNew},
      {"k_cache", &kCache},
      {"v_cache", &vCache}};
  for (auto [name, t] : all) {
    if (t->rank != 4)
      fail(fmt::format("{}.rank = {}, expected 4", name, t->rank));
    for (int i = 0; i < 4; ++i) {
      if (t->shape[i] < 0)
        fail(
            fmt::format("{}.shape[{}] = {} is negative", name, i, t->shape[i]));
      if (t->strides[i] < 0)
        fail(fmt::format("{}.strides[{}] = {} is negative", name, i,
                         t->strides[i]));
    }
  }
  if (kNew.dtype != kCache.dtype)
    fail(fmt::format("k_new.dtype = {}, but k_cache.dtype = {}",
                     toString(kNew.dtype), toString(kCache.dtype)));
  if (vNew.dtype != vCache.dtype)
    fail(fmt::format("v_new.dtype = {}, but v_cache.dtype = {}",
                     toString(vNew.dtype), toString(vCache.dtype)));
  const int64_t batch = kNew.shape[0], hk = kNew.shape[1], nNew = kNew.shape[2];
  auto expect = [](const char *name, const TensorRef &t, int dim, int64_t want,
                   const char *what) {
    if (t.shape[dim] != want)
      fail(fmt::format("{}.shape[{}] = {}, expected {} = {}", name, dim,
                       t.shape[dim], what, want));
  };
  expect("v_new", vNew, 0, batch, "batch (k_new.shape[0])");
  expect("v_new", vNew, 1, hk, "heads_kv (k_new.shape[1])");
  expect("v_new", vNew, 2, nNew, "n_new (k_new.shape[2])");
  expect("v_new", vNew, 3, vCache.shape[3], "head_dim_v (v_cache.shape[3])");
  expect("k_new", kNew, 3, kCache.shape[3], "head_dim_qk (k_cache.shape[3])");
  expect("k_cache", kCache, 1, hk, "heads_kv (k_new.shape[1])");
  expect("v_cache", vCache, 1, hk, "heads_kv (k_new.shape[1])");
  expect("v_cache", vCache, 0, kCache.shape[0], "num_pages (k_cache.shape[0])");
  expect("v_cache", vCache, 2, kCache.shape[2], "page_size (k_cache.shape[2])");
  checkPageSize(kCache.shape[2]);
  if (pages.batch() != batch)
    fail(fmt::format("the page table has {} sequences, k_new.shape[0] = {}",
                     pages.batch(), batch));
  if (pages.pageSize != kCache.shape[2])
    fail(fmt::format("the page table's page_size = {}, k_cache.shape[2] = {}",
                     pages.pageSize, kCache.shape[2]));
  if (pages.numPages != kCache.shape[0])
    fail(fmt::format("the page table's num_pages = {}, k_cache.shape[0] = {}",
                     pages.numPages, kCache.shape[0]));
  if (static_cast<int64_t>(pages.pageStart.size()) != batch)
    fail(fmt::format("the page table has {} page starts for {} sequences",
                     pages.pageStart.size(), batch));
  const int64_t writes = batch * hk * nNew;
  for (auto [name, t] : all)
    if (writes > 0 && t->shape[3] > 0 && !t->data)
      fail(fmt::format("{}.data is null", name));
  checkNumPages("k_cache", kCache.shape[0]);
  // The caches are written: they overlap neither the new tokens nor the
  // page ids. k_cache and v_cache may interleave (FlashInfer's [pages, 2,
  // page_size, heads, dim] cache gives two views with equal strides), but
  // not be one tensor or overlap with other strides.
  checkNoSelfOverlap("k_cache", kCache);
  checkNoSelfOverlap("v_cache", vCache);
  const MemoryRegion ins[] = {memoryOf("k_new", kNew), memoryOf("v_new", vNew),
                              memoryOf("the page table's page ids",
                                       pages.pages.data(),
                                       pages.pages.size_bytes())};
  const MemoryRegion kOut[] = {memoryOf("k_cache", kCache)},
                     vOut[] = {memoryOf("v_cache", vCache)};
  checkOutputsDisjoint(kOut, ins);
  checkOutputsDisjoint(vOut, ins);
  if (kCache.data && kCache.data == vCache.data && writes > 0)
    fail("v_cache and k_cache are the same memory (v_cache.data == "
         "k_cache.data): the values would overwrite the keys");
  if (kCache.strides != vCache.strides || kCache.dtype != vCache.dtype)
    checkOutputsDisjoint(vOut, kOut);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = pages.seqLens[b];
    if (len < nNew)
      fail(fmt::format("seq_lens[{}] = {} < n_new = {}: the page table must "
                       "already count the new tokens",
                       b, len, nNew));
    if (nNew == 0)
      continue;
    const int64_t first = (len - nNew) / pages.pageSize,
                  last = (len - 1) / pages.pageSize;
    for (int64_t p = first; p <= last; ++p) {
      const int64_t at = pages.pageStart[b] + p;
      if (at < 0 || at >= static_cast<int64_t>(pages.pages.size()))
        fail(fmt::format("sequence {}: page entry {} outside the {} page ids "
                         "of the table",
                         b, at, pages.pages.size()));
      const int32_t id = pages.pages[static_cast<size_t>(at)];
      if (id < 0 || id >= pages.numPages)
        fail(fmt::format("page id {} of sequence {} (entry {}) outside [0, "
                         "{})",
                         id, b, at, pages.numPages));
    }
  }
  return nNew;
}

void appendPagedKV(const TensorRef &kNew, const TensorRef &vNew,
                   const TensorRef &kCache, const TensorRef &vCache,
                   const PageList &pages) {
  const int64_t nNew = checkPagedAppend(kNew, vNew, kCache, vCache, pages);
  const int64_t ps = pages.pageSize;
  for (int64_t b = 0; b < kNew.shape[0]; ++b)
    for (int64_t i = 0; i < nNew; ++i) {
      const int64_t pos = pages.seqLens[b] - nNew + i;
      const int32_t page = pages.pageOf(b, pos);
      for (int64_t h = 0; h < kNew.shape[1]; ++h) {
        const TensorRef *src[] = {&kNew, &vNew}, *dst[] = {&kCache, &vCache};
        for (int t = 0; t < 2; ++t) {
          const int size = byteSize(src[t]->dtype);
          for (int64_t d = 0; d < src[t]->shape[3]; ++d)
            std::memcpy(static_cast<char *>(dst[t]->data) +
                            dst[t]->offset(page, h, pos % ps, d) * size,
                        static_cast<const char *>(src[t]->data) +
                            src[t]->offset(b, h, i, d) * size,
                        static_cast<size_t>(size));
        }
      }
    }
}

} // namespace flashjit
