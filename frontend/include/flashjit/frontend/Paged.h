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

/// The float64 oracle of paged attention: for each sequence b, gathers its
/// seq_len(b) keys and values out of the pages, then computes exactly what
/// referenceVarlenAttention computes for that sequence: the mask and score
/// modifier see batch = b, q_idx in [0, q_len), kv_idx in [0, seq_len(b)),
/// seqlen_q = q_len and seqlen_k = seq_len(b). The q_len query tokens are the
/// last q_len positions of the sequence, so decoding uses the bottom-right
/// causal alignment (spec.causal = Causal::BottomRight, or
/// causal(Alignment::BottomRight) in the mask): query i sees keys
/// 0 .. seq_len - q_len + i. Tokens in unused page slots are never read. A
/// sequence of length 0 gives O = 0 and LSE = -inf. Output
/// O [batch, heads_q, q_len, head_dim_v], LSE [batch, heads_q, q_len]
/// (shape.seqlenK = the longest sequence). Throws UserError for bad tensors,
/// tables or arguments.
ReferenceOutput
referencePagedAttention(const AttentionSpec &spec, const TensorRef &q,
                        const TensorRef &kCache, const TensorRef &vCache,
                        const PageList &pages, const Arguments &args = {});

/// Merges two attention states over disjoint key sets of the same query rows
/// into the state over their union: with m = max(lse_a, lse_b),
/// lse = m + log(exp(lse_a - m) + exp(lse_b - m)) and
/// o = exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b. A state with
/// LSE = -inf (an empty or fully masked key set) carries no weight and its O
/// is not read (it may hold NaN); two such states give O = 0, LSE = -inf. A
/// NaN or +inf LSE gives NaN. o_* and o: [batch, heads, seqlen, head_dim],
/// dtype F16, BF16 or F32, any strides; lse_*: [batch, heads, seqlen] F32.
/// The outputs may be exactly one of the inputs (in place: each row is read
/// whole before it is written). Computed in double. Throws UserError naming
/// the tensor, field and value on mismatched shapes or dtypes.
void mergeStates(const TensorRef &oA, const TensorRef &lseA,
                 const TensorRef &oB, const TensorRef &lseB, const TensorRef &o,
                 const TensorRef &lse);

/// The n-way merge (n >= 1) of states over pairwise disjoint key sets, with
/// the same rules as the two-way one: lse = log sum_i exp(lse_i),
/// o = sum_i exp(lse_i - lse) o_i over the states with finite LSE. Throws
/// UserError when \p os and \p lses differ in length, are empty, or a tensor
/// does not match.
void mergeStates(std::span<const TensorRef> os, std::span<const TensorRef> lses,
                 const TensorRef &o, const TensorRef &lse);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_PAGED_H
