//===- DecodeKernel.h - Split-KV decoding over paged KV caches ---*- C++
//-*-===//
//
// Runs the GPU decode kernels (compileGpu with GpuCompileOptions::kind =
// KernelKind::Decode: `<name>_decode` and `<name>_decode_merge`,
// abi::gpu::DecodeArg in KernelAbi.h): attention of q_len new query tokens
// per sequence against a KV cache kept in pages, split over the keys and
// merged through the LSEs. Semantics: referencePagedAttention
// (frontend/Paged.h). Links no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_DECODEKERNEL_H
#define FLASHJIT_RUNTIME_DECODEKERNEL_H

#include "flashjit/frontend/Paged.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <span>

namespace flashjit::runtime {

/// A page table in device memory (int32): the page ids, each sequence's
/// first entry and its length, from a PageList validated on the host
/// (checkPagedCsr or checkBlockTable: a CSR table and a block table give
/// the same device form, so the kernels read one layout).
class DevicePageTable {
public:
  DevicePageTable() = default;
  /// Uploads \p pages (its page ids, starts and lengths) to \p device.
  DevicePageTable(const PageList &pages, Device &device);
  /// The table of a contiguous cache k [batch, heads_kv, capacity, dim]
  /// (any strides): sequence b is one "page" b of \p capacity tokens
  /// holding seq_lens[b] of them (each in [0, capacity]). Throws UserError
  /// naming the entry otherwise.
  static DevicePageTable contiguous(std::span<const int32_t> seqLens,
                                    int64_t capacity, Device &device);

  int64_t batch() const { return static_cast<int64_t>(seqLens_.size()); }
  /// Tokens per page (capacity for a contiguous table).
  int64_t pageSize() const { return pageSize_; }
  /// Pages the ids may address (batch for a contiguous table).
  int64_t numPages() const { return numPages_; }
  bool isContiguous() const { return contiguous_; }
  /// The host copy of the lengths.
  const std::vector<int64_t> &seqLens() const { return seqLens_; }
  int64_t maxSeqLen() const { return maxSeqLen_; }
  CUdeviceptr pages() const { return pages_.ptr(); }
  CUdeviceptr pageStart() const { return start_.ptr(); }
  CUdeviceptr deviceSeqLens() const { return lens_.ptr(); }

private:
  DeviceBuffer pages_, start_, lens_;
  std::vector<int64_t> seqLens_;
  int64_t pageSize_ = 0, numPages_ = 0, maxSeqLen_ = 0;
  bool contiguous_ = false;
};

/// The number of key splits of a decode call: enough CTAs to fill
/// \p smCount SMs at two CTAs each with the least wave-quantization loss
/// (the smallest count within 5% of the best occupancy efficiency), at
/// most one split per 4 key tiles of the longest sequence and at most 256.
int decodeNumSplits(int64_t batch, int64_t headsKV, int64_t rowTiles,
                    int64_t maxSeqLen, int blockN, int smCount);

/// The loaded decode kernels of one spec on one device.
class GpuDecodeKernel {
public:
  /// Loads \p ptx for \p device; \p info is the image's
  /// (GpuKernelImage::info(): the variant's name, the Decode configuration:
  /// arch, threads(), blockM() packed query rows per CTA, blockN keys per
  /// tile; sharedBytes of `<name>_decode`). Throws UserError if the kernel
  /// was generated for another architecture or the tiles are not positive,
  /// DriverError if loading fails.
  GpuDecodeKernel(AttentionSpec spec, GpuKernelInfo info, std::string_view ptx,
                  Device &device);

  /// O and LSE of q [batch, heads_q, q_len, head_dim_qk] (q_len in 1..64)
  /// against the paged cache k_cache [num_pages, heads_kv, page_size,
  /// head_dim_qk], v_cache [num_pages, heads_kv, page_size, head_dim_v]
  /// (any strides with head_dim contiguous: the [pages, page_size, heads,
  /// dim] layout of FlashInfer and vLLM is a view) through \p table; for a
  /// contiguous table (DevicePageTable::contiguous) k/v are
  /// [batch, heads_kv, capacity, dim]. Writes o [batch, heads_q, q_len,
  /// head_dim_v] (the spec's dtype) and, when the spec returns it and
  /// \p lse is given, lse [batch, heads_q, q_len] fp32. The causal
  /// alignment is the spec's (bottom-right for decoding: see
  /// referencePagedAttention). \p numSplits 0 picks decodeNumSplits.
  /// Asynchronous on \p stream (a variant reading buffers synchronises it
  /// to check for out-of-range reads); uses workspaces owned by this
  /// object, so calls on one object must not run concurrently. Throws
  /// UserError naming the bad field (shapes, dtypes, alignment, q_len,
  /// numSplits, a table that does not fit the cache), DriverError if a
  /// launch fails.
  void run(const TensorRef &q, const TensorRef &kCache, const TensorRef &vCache,
           const DevicePageTable &table, const TensorRef &o,
           const TensorRef *lse, const Arguments &args = {}, int numSplits = 0,
           CUstream stream = nullptr) const;

  /// The split count run() uses for this call shape when numSplits is 0.
  int defaultNumSplits(int64_t batch, int64_t qLen, int64_t maxSeqLen) const;

  const AttentionSpec &spec() const { return spec_; }
  const GpuKernelInfo &info() const { return info_; }
  /// The split kernel `<name>_decode`.
  const Function &function() const { return decode_; }

  /// The largest q_len run() takes.
  static constexpr int64_t kMaxQLen = 64;

private:
  AttentionSpec spec_;
  GpuKernelInfo info_;
  Device *device_;
  Module module_;
  Function decode_, merge_;
  mutable DeviceBuffer status_, oPart_, lsePart_;
  mutable std::mutex mutex_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_DECODEKERNEL_H
