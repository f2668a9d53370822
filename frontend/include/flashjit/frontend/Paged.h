//===- Paged.h - Paged KV caches, page tables and state merging --*- C++
//-*-===//
//
// Serving (issue 17): a KV cache kept in fixed-size pages, addressed through
// one of the two page-table layouts host applications use (FlashInfer's CSR
// and vLLM's block table), the float64 oracle of attention over such a cache,
// and the exact merge of partial attention states through their LSEs (the
// primitive of split-KV decoding, cascade inference and context
// parallelism; Milakov & Gimelshein 2018, "Online normalizer calculation for
// softmax", eq. for combining two partial softmaxes).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_PAGED_H
#define FLASHJIT_FRONTEND_PAGED_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Reference.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"

#include <cstdint>
#include <span>
#include <vector>

namespace flashjit {

/// The largest page size (tokens per page) a paged KV cache may have.
inline constexpr int64_t kMaxPageSize = 256;

/// Checks that \p pageSize is a power of two in [1, kMaxPageSize]; throws
/// UserError naming "page_size" and the value otherwise.
void checkPageSize(int64_t pageSize);

/// FlashInfer's CSR page table: sequence b owns the pages
/// kv_indices[kv_indptr[b] .. kv_indptr[b + 1]) in token order, every one
/// full except the last, which holds kv_last_page_len[b] tokens (1..page_size
/// when the sequence has pages, 0 when it has none). Host memory, int32.
struct PagedCsr {
  /// [batch + 1], kv_indptr[0] = 0, non-decreasing.
  std::span<const int32_t> kvIndptr;
  /// At least kv_indptr[batch] page ids, each in [0, num_pages).
  std::span<const int32_t> kvIndices;
  /// [batch].
  std::span<const int32_t> kvLastPageLen;
};

/// vLLM's block table: row b of the row-major [batch, max_pages] table lists
/// the pages of sequence b in token order; sequence b holds seq_lens[b]
/// tokens, so only its first ceil(seq_lens[b] / page_size) entries are read
/// (the rest may hold anything, e.g. -1). Host memory, int32.
struct BlockTable {
  /// [batch, max_pages], row-major.
  std::span<const int32_t> table;
  /// Columns of the table (>= 0).
  int64_t maxPages = 0;
  /// [batch], each in [0, max_pages * page_size].
  std::span<const int32_t> seqLens;
};

/// Either layout, normalised to what the decode kernels read: the page ids
/// of sequence b are pages[pageStart[b] + p] for p < ceil(seqLens[b] /
/// pageSize). A block table maps to pageStart[b] = b * max_pages and its own
/// table (no copy of the page ids is needed on the device); a CSR table to
/// pageStart[b] = kv_indptr[b] and seqLens[b] = (pages - 1) * page_size +
/// kv_last_page_len[b].
struct PageList {
  int64_t pageSize = 0;
  /// Number of pages in the cache (dim 0 of the cache tensors).
  int64_t numPages = 0;
  /// [batch] offsets into pages.
  std::vector<int64_t> pageStart;
  /// [batch] tokens per sequence.
  std::vector<int64_t> seqLens;
  /// The page ids (a view of the caller's kv_indices or block table).
  std::span<const int32_t> pages;

  int64_t batch() const { return static_cast<int64_t>(seqLens.size()); }
  /// The longest sequence (0 for an empty batch).
  int64_t maxSeqLen() const;
  /// Page id holding token \p t of sequence \p b (t < seqLens[b]).
  int32_t pageOf(int64_t b, int64_t t) const {
    return pages[static_cast<size_t>(pageStart[b] + t / pageSize)];
  }
};

/// Validates a CSR page table for \p batch sequences in a cache of
/// \p numPages pages of \p pageSize tokens and normalises it. Throws
/// UserError naming the array, the entry and the value, e.g.
/// "kv_indices[7] = 40, outside [0, 32)" or "kv_last_page_len[2] = 17 >
/// page_size = 16".
PageList checkPagedCsr(const PagedCsr &csr, int64_t batch, int64_t numPages,
                       int64_t pageSize);

/// The same for a block table; entries beyond a sequence's last page are not
/// read and not checked.
PageList checkBlockTable(const BlockTable &table, int64_t batch,
                         int64_t numPages, int64_t pageSize);

/// The sizes of one paged attention call.
struct PagedShape {
  int64_t batch = 0;
  int64_t headsQ = 0;
  int64_t headsKV = 0;
  /// Query tokens per sequence (the same for every sequence).
  int64_t qLen = 0;
  int64_t numPages = 0;
  int64_t pageSize = 0;
  int64_t headDimQK = 0;
  int64_t headDimV = 0;
};

/// Checks q [batch, heads_q, q_len, head_dim_qk], the caches
/// k_cache [num_pages, heads_kv, page_size, head_dim_qk] and
/// v_cache [num_pages, heads_kv, page_size, head_dim_v] (any strides >= 0, so
/// both the [pages, page_size, heads, dim] layout of FlashInfer/vLLM and the
/// [pages, heads, page_size, dim] one are views) against \p spec: ranks,
/// dtypes, head counts and dims, equal num_pages and page_size in both
/// caches, a valid page size (checkPageSize), non-null data. Throws
/// UserError naming the tensor, field and value.
PagedShape checkPagedTensors(const AttentionSpec &spec, const TensorRef &q,
                             const TensorRef &kCache, const TensorRef &vCache);

/// The paged decode's outputs: o [batch, heads_q, q_len, head_dim_v] and,
/// where given, lse [batch, heads_q, q_len] have strides >= 0, never 0 on a
/// dim larger than 1, and their memory overlaps neither each other, q,
/// k_cache, v_cache nor \p tableArrays (the page table's int32 arrays,
/// memoryOf). Shapes are the caller's check. Throws UserError naming both
/// arguments ("o overlaps v_cache in memory (...)").
void checkPagedOutputs(const TensorRef &q, const TensorRef &kCache,
                       const TensorRef &vCache, const TensorRef &o,
                       const TensorRef *lse,
                       std::span<const MemoryRegion> tableArrays = {});

/// Throws UserError when a cache \p name claims \p numPages pages past
/// 2^31 (page ids are int32, so no table could name the rest: the shape is
/// wrong) or a negative count.
void checkNumPages(const char *name, int64_t numPages);

/// The float64 oracle of paged attention: for each sequence b, gathers its
/// seq_len(b) keys and values out of the pages, then computes exactly what
/// referenceVarlenAttention computes for that sequence: the mask and score
/// modifier see batch = b, q_idx in [0, q_len), kv_idx in [0, seq_len(b)),
/// seqlen_q = q_len and seqlen_k = seq_len(b). The q_len query tokens are the
/// last q_len positions of the sequence, so decoding uses the bottom-right
/// causal alignment (spec.causal = Causal::BottomRight, or
/// causal(Alignment::BottomRight) in the mask): query i sees keys
/// 0 .. seq_len - q_len + i. Tokens in unused page slots are never read. A
/// sequence of length 0 gives O = 0 and LSE = -inf. A spec with an
/// attention sink takes it in \p args (Arguments::bindSink, host memory):
/// it joins each row's denominator once (README, "Attention sinks"), so a
/// row with no allowed key gets O = 0 and LSE = sink[h]. Output
/// O [batch, heads_q, q_len, head_dim_v], LSE [batch, heads_q, q_len]
/// (shape.seqlenK = the longest sequence). Throws UserError for bad tensors,
/// tables or arguments.
ReferenceOutput
referencePagedAttention(const AttentionSpec &spec, const TensorRef &q,
                        const TensorRef &kCache, const TensorRef &vCache,
                        const PageList &pages, const Arguments &args = {});

/// The public state merge (README, "Serving: merge_states"): merges two
/// attention states over disjoint key sets of the same query rows into the
/// state over their union: with m = max(lse_a, lse_b),
/// lse = m + log(exp(lse_a - m) + exp(lse_b - m)) and
/// o = exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b (Milakov &
/// Gimelshein 2018). A state with LSE = -inf (an empty or fully masked key
/// set) carries no weight and its O is not read (it may hold NaN); two such
/// states give O = 0, LSE = -inf. A NaN or +inf LSE gives NaN.
///
/// \p sink (empty, or heads fp32 logits, one per head of dim 1: issue 22)
/// joins every row's denominator once, as one more state with LSE =
/// sink[h] and no value: lse = log(exp(sink[h]) + sum_i exp(lse_i)), so a
/// row whose states are all empty gets O = 0, LSE = sink[h]. Merging the
/// splits of one key set with the sink given once equals attention over the
/// whole set with the sink. A sink of -inf is no sink for that head; NaN and
/// +inf are refused.
///
/// o_a, o_b, o: [batch, heads, seqlen, head_dim], dtype F16, BF16 or F32,
/// any strides (o's must not overlap); lse_a, lse_b, lse: [batch, heads,
/// seqlen] F32. Host memory. The outputs may be exactly one of the inputs
/// (in place: each row is read whole before it is written). Computed in
/// double. Throws UserError naming the tensor, field and value on
/// mismatched ranks, shapes or dtypes, null data, overlapping output
/// strides, or a sink of the wrong length or with a NaN / +inf entry
/// ("sink[3] = nan").
void mergeStates(const TensorRef &oA, const TensorRef &lseA,
                 const TensorRef &oB, const TensorRef &lseB, const TensorRef &o,
                 const TensorRef &lse, std::span<const float> sink = {});

/// The n-way merge (n >= 1) of states over pairwise disjoint key sets, with
/// the same rules and errors as the two-way one: lse = log(exp(sink[h]) +
/// sum_i exp(lse_i)), o = sum_i exp(lse_i - lse) o_i over the states with
/// finite LSE. Throws UserError also when \p os and \p lses differ in
/// length or are empty.
void mergeStates(std::span<const TensorRef> os, std::span<const TensorRef> lses,
                 const TensorRef &o, const TensorRef &lse,
                 std::span<const float> sink = {});

/// The tensor checks of mergeStates (shared with the GPU merge,
/// runtime::GpuPagedOps): at least one state, as many O as LSE tensors,
/// ranks, shapes equal to os[0]'s, dtypes, non-negative strides, non-null
/// data, non-overlapping output strides. Throws UserError naming the
/// tensor, field and value.
void checkMergeStates(std::span<const TensorRef> os,
                      std::span<const TensorRef> lses, const TensorRef &o,
                      const TensorRef &lse);

/// Checks \p sink for a merge of states with \p heads heads: empty (no
/// sink) or \p heads entries, each finite or -inf. Throws UserError naming
/// the entry ("sink has 3 entries, expected heads = 4", "sink[1] = nan").
void checkMergeSink(std::span<const float> sink, int64_t heads);

/// The append helper (issue 17): writes n_new new tokens per sequence into
/// a paged cache. k_new [batch, heads_kv, n_new, head_dim_qk] and v_new
/// [batch, heads_kv, n_new, head_dim_v] are the newest tokens of each
/// sequence: \p pages already counts them (update the page table first:
/// allocate the pages, raise the lengths), so token i of sequence b goes to
/// position p = seq_len(b) - n_new + i, i.e. page pageOf(b, p), slot
/// p % page_size, of k_cache [num_pages, heads_kv, page_size, head_dim_qk]
/// and v_cache [num_pages, heads_kv, page_size, head_dim_v] (any strides;
/// the [pages, page_size, heads, dim] layout is a view). Both page-table
/// layouts work (checkPagedCsr / checkBlockTable give the PageList). The
/// new tokens have the cache's dtype (copied bit for bit). A page
/// shared by two sequences is written by both (the caller's business, as
/// in every paged cache). Host memory. Throws UserError naming the field
/// and value: ranks, dtypes, head counts and dims that differ between the
/// new tokens and the caches, a batch that is not the table's, a page size
/// or page count that is not the cache's, a sequence shorter than n_new
/// ("seq_lens[2] = 3 < n_new = 4"), a page id outside [0, num_pages)
/// ("page id 40 of sequence 1 (entry 7) outside [0, 32)").
void appendPagedKV(const TensorRef &kNew, const TensorRef &vNew,
                   const TensorRef &kCache, const TensorRef &vCache,
                   const PageList &pages);

/// The sizes appendPagedKV checks, shared with the GPU append
/// (runtime::GpuPagedOps): validates the tensors and \p pages as
/// appendPagedKV documents (page ids included) and returns n_new.
int64_t checkPagedAppend(const TensorRef &kNew, const TensorRef &vNew,
                         const TensorRef &kCache, const TensorRef &vCache,
                         const PageList &pages);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_PAGED_H
