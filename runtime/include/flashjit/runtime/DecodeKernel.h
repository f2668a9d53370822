//===- DecodeKernel.h - Split-KV decoding over paged KV caches ---*- C++
//-*-===//
//
// Runs the GPU decode kernels (compileGpu with GpuCompileOptions::kind =
// KernelKind::Decode: `<name>_decode` and `<name>_decode_merge`,
// abi::gpu::DecodeArg in KernelAbi.h): attention of q_len new query tokens
// per sequence against a KV cache kept in pages, split over the keys and
// merged through the LSEs, in the same launch when the merge is small
// (decodeFusedMerge), else by the merge kernel. Semantics:
// referencePagedAttention (frontend/Paged.h). Links no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_DECODEKERNEL_H
#define FLASHJIT_RUNTIME_DECODEKERNEL_H

#include "flashjit/frontend/BufferBounds.h"
#include "flashjit/frontend/Paged.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <atomic>
#include <cstdint>
#include <span>

namespace flashjit::runtime {

/// A page table in device memory (int32): the page ids, each sequence's
/// first entry and its length, from a PageList validated on the host
/// (checkPagedCsr or checkBlockTable: a CSR table and a block table give
/// the same device form, so the kernels read one layout).
class DevicePageTable {
public:
  DevicePageTable() = default;
  /// Uploads \p pages (its page ids, starts and lengths) to \p device,
  /// after checking that every page id a sequence uses lies in [0,
  /// num_pages) (a table built by hand skips checkPagedCsr /
  /// checkBlockTable). Keeps a host copy (hostList()). Throws UserError
  /// naming the sequence, entry and id otherwise.
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
  /// The host copy of the table (a view of this object's storage; empty
  /// for a contiguous table).
  PageList hostList() const;
  CUdeviceptr pages() const { return pages_.ptr(); }
  CUdeviceptr pageStart() const { return start_.ptr(); }
  CUdeviceptr deviceSeqLens() const { return lens_.ptr(); }
  /// The device byte ranges of the table's three int32 arrays (page ids,
  /// page starts, sequence lengths), named for checkPagedOutputs: run()'s
  /// outputs must not overlap them.
  std::vector<MemoryRegion> memory() const;

private:
  DeviceBuffer pages_, start_, lens_;
  std::vector<int64_t> seqLens_, hostStart_;
  std::vector<int32_t> hostPages_;
  int64_t pageSize_ = 0, numPages_ = 0, maxSeqLen_ = 0;
  bool contiguous_ = false;
};

/// A decode call's shape as the split-count model (decodeNumSplits) sees
/// it: the grid of one split is batch x heads_kv x rowTiles CTAs ("groups"),
/// each streaming the K/V tiles of its (sequence, KV head).
struct DecodeSplitShape {
  int64_t batch = 0;     ///< sequences (0: nothing to split, 1 split)
  int64_t headsKV = 1;   ///< KV heads
  int64_t rowTiles = 1;  ///< row tiles per group: ceil(group rows / block_m)
  int64_t groupRows = 1; ///< rows one CTA holds: min(block_m, heads_q /
                         ///< heads_kv * q_len) (decodeFusedMerge's)
  int64_t maxSeqLen = 0; ///< keys of the longest sequence (or the range its
                         ///< rows may see: defaultNumSplits)
  int blockN = 64;       ///< keys per tile
  int64_t tileBytes = 64 * 256 * 2; ///< K + V bytes of one key tile of one
                                    ///< KV head: block_n x (head_dim_qk +
                                    ///< head_dim_v) x element bytes
  int64_t headDimV = 128;           ///< columns the merge combines
  int threads = 128;                ///< the split kernel's threads
  int smCount = 132;                ///< the device's SMs
};

/// The split-count model's constants (decodeNumSplits; session 19's H100
/// sweep, [.decodesplitbench] and [.decodemergebench], and ptxas: see
/// DecodeSplitModel.cpp).
struct DecodeSplitModel {
  /// CTAs of the split kernel resident per SM: every decode kernel holds
  /// 183-245 registers x 128 threads and 45-102 KiB of shared memory, so 2.
  static constexpr int kCtasPerSm = 2;
  /// K + V bytes one SM streams per microsecond while every SM holds
  /// kCtasPerSm CTAs: the device's bandwidth over its SMs (H100: ~3.1
  /// TB/s / 132).
  static constexpr double kSmBytesPerUs = 23.5e3;
  /// K + V bytes one CTA streams per microsecond alone on its SM (H100,
  /// measured with 64-132 SMs busy).
  static constexpr double kCtaBytesPerUs = 22.0e3;
  /// A CTA's fixed cost (page table, Q, the pipeline's fill, its partial
  /// state), in key tiles.
  static constexpr double kCtaFixedTiles = 2.2;
  /// The fused merge's 8-split step per (row, 4 columns) item: one round of
  /// dependent loads.
  static constexpr double kFusedStepUs = 0.33;
  /// The merge kernel's second launch and its fixed work.
  static constexpr double kMergeLaunchUs = 4.0;
  /// One load round of the parallel merge kernel.
  static constexpr double kMergeRoundUs = 0.2;
  /// The serial merge kernel's walk over one split (decodeSerialMerge).
  static constexpr double kSerialMergeSplitUs = 0.125;
  /// decodeNumSplits takes the fewest splits within this fraction of the
  /// least modelled time (the model's error is larger than 2%).
  static constexpr double kTieMargin = 0.02;
  /// At least this many key tiles per split (a CTA's fixed cost: Q, the
  /// pipeline's fill, its partial state).
  static constexpr int64_t kMinTilesPerSplit = 4;
  /// At most this many splits.
  static constexpr int64_t kMaxSplits = 256;
};

/// The modelled time (microseconds) of a decode call of shape \p s with
/// \p numSplits splits: the split kernel's waves of CTAs, each streaming
/// its ceil(tiles / numSplits) key tiles plus its fixed cost (two CTAs per
/// SM at the SM's share of the bandwidth, one alone at a CTA's rate), plus
/// the merge run() would pick (decodeFusedMerge, decodeSerialMerge): none
/// for one split, the fused merge's items x steps rounds, or the merge
/// kernel's launch and its load rounds or bytes. Formula and constants:
/// DecodeSplitModel and DecodeSplitModel.cpp. Throws UserError for a field
/// out of range (as decodeNumSplits) or \p numSplits < 1.
double decodeSplitTimeUs(const DecodeSplitShape &s, int64_t numSplits);

/// The number of key splits of a decode call: the fewest in [1, most]
/// whose decodeSplitTimeUs is within DecodeSplitModel::kTieMargin of the
/// least, where most =
/// min(kMaxSplits, tiles / kMinTilesPerSplit, 65535 / rowTiles) and at
/// least 1. Throws UserError naming the field for batch < 0, headsKV,
/// rowTiles, groupRows, blockN, tileBytes, headDimV, threads or smCount
/// below 1, maxSeqLen < 0, or a count above 2^31.
int decodeNumSplits(const DecodeSplitShape &s);

/// Session 16's rule, kept for the split benchmark ([.decodesplitbench]
/// prints its pick beside decodeNumSplits'): enough CTAs to fill
/// \p smCount SMs at two CTAs each with the least wave-quantization loss
/// (the smallest count within 5% of the best occupancy efficiency), at
/// most one split per 4 key tiles of \p maxSeqLen keys and at most 256;
/// blind to the merge's cost.
int decodeNumSplitsWaves(int64_t batch, int64_t headsKV, int64_t rowTiles,
                         int64_t maxSeqLen, int blockN, int smCount);

/// Where the parts of one GpuDecodeKernel::run() call's workspace lie in
/// its one stream-ordered allocation (StreamBuffer): byte offsets, each
/// 256-byte aligned, the parts in this order and disjoint. With one split
/// the partial parts and the counters are empty (the kernel writes O and
/// LSE itself); with no buffer and one split the workspace is empty.
struct DecodeWorkspaceLayout {
  /// fp32 partial O [num_splits, rows, head_dim_v] (abi::gpu::DecodeArg).
  size_t oPart = 0;
  /// fp32 partial LSE [num_splits, rows], then a scratch LSE [rows] the
  /// merge kernel writes when the caller wants no LSE.
  size_t lsePart = 0;
  /// One int32 out-of-range flag per variant buffer (none: 0 bytes).
  size_t status = 0;
  /// One int32 arrival counter per (batch, kv head, row tile) group
  /// (abi::gpu::kDecCounters), zeroed on the call's stream before the
  /// launch; empty without a fused merge.
  size_t counters = 0;
  /// The whole allocation, bytes (the end of the last part, rounded up to
  /// 256).
  size_t bytes = 0;
};

/// The workspace of a decode call over \p rows = batch * heads_q * q_len
/// query rows, \p numSplits key splits, head dim \p headDimV,
/// \p numBuffers variant buffers and \p groups arrival counters (batch *
/// heads_kv * row tiles for a fused merge, 0 for the merge kernel). Throws
/// UserError for a negative or zero count where one is needed (rows >= 0,
/// groups >= 0, numSplits >= 1, headDimV >= 1) or a size that overflows.
DecodeWorkspaceLayout decodeWorkspaceLayout(int64_t rows, int64_t numSplits,
                                            int64_t headDimV, size_t numBuffers,
                                            int64_t groups = 0);

/// How a decode call with several key splits merges their partial states
/// (abi::gpu::DecodeArg); a call with one split needs no merge.
enum class DecodeMerge {
  Auto,    ///< decodeFusedMerge picks
  Fused,   ///< the last CTA of each group merges, in the split launch
  Separate ///< the merge kernel, a second launch (one CTA per row)
};

/// Whether DecodeMerge::Auto fuses the merge. The last CTA of a group
/// (\p threads threads) merges the group's \p groupRows rows (min(block_m,
/// heads_q / heads_kv * q_len)) of \p headDimV columns alone: each thread
/// takes ceil(groupRows * headDimV / 4 / threads) (row, 4 columns) items
/// one after another, each in ceil(numSplits / 8) steps of 8 splits' loads
/// (DecodeMerge.cpp), while the merge kernel spreads the rows over CTAs but
/// costs a second launch. Fused when items x steps <= kFusedMergeSteps.
/// Measured on the H200 (session 14, page 64, TB/s fused / separate): GQA
/// 32/8 B = 1 (4 rows, 32 splits: 1 x 4) 3.49 / 3.38, B = 8 (1 x 1)
/// 3.72 / 3.73; MQA 32/1 B = 64 (32 rows, 4 splits: 8 x 1) 2.23 / 2.27,
/// B = 8 (8 x 4) 1.81 / 2.17, B = 1 (244 splits: 8 x 31) 0.41 / 0.85.
/// Throws UserError for a count below 1.
bool decodeFusedMerge(int64_t numSplits, int64_t groupRows, int64_t headDimV,
                      int threads);
inline constexpr int64_t kFusedMergeSteps = 4;

/// Whether a call merged by the merge kernel takes its serial twin
/// (`<name>_decode_merge_serial`) rather than the parallel kernel: at most
/// kSerialMergeMaxSplits splits over more rows (\p rows = batch x heads_q x
/// q_len CTAs) than kParallelMergeCtasPerSm x \p smCount. The parallel
/// kernel (75 registers) fits 6 CTAs per SM, the serial one (32) 16: at
/// few splits both are a round or two of loads, so the waves decide
/// (session 19, H100, 2048 rows: 4 splits 7.1 vs 5.0 us, 8 splits 7.1 vs
/// 6.4; 33 splits 11.4 vs 15.9; 256 rows: within 0.1 us). Throws UserError
/// for a count below 1.
bool decodeSerialMerge(int64_t numSplits, int64_t rows, int smCount);
inline constexpr int64_t kSerialMergeMaxSplits = 8;
inline constexpr int64_t kParallelMergeCtasPerSm = 6;

/// The loaded decode kernels of one spec on one device.
class GpuDecodeKernel {
public:
  /// Loads \p ptx for \p device; \p info is the image's
  /// (GpuKernelImage::info(): the variant's name, the Decode configuration:
  /// arch, threads(), blockM() packed query rows per CTA, blockN keys per
  /// tile; sharedBytes of `<name>_decode`). Throws UserError if the kernel
  /// was generated for another architecture, the tiles are not positive,
  /// or the PTX's entries do not match \p spec and \p info
  /// (gpuLaunchConfigMismatch: the entry's parameters, threads and shared
  /// memory), DriverError if loading fails.
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
  /// referencePagedAttention). A spec with an attention sink takes it in
  /// \p args (Arguments::bindSink, fp32 [heads_q] device memory, 4-byte
  /// aligned); it joins each row once, in the merge, never per split, so
  /// every split count gives the same result and a row with no allowed key
  /// gets O = 0, LSE = sink[h]. \p numSplits 0 picks decodeNumSplits.
  /// Asynchronous on \p stream (a call reading buffers whose reads are not
  /// proven in range before the launch, BufferReads in
  /// frontend/BufferBounds.h, synchronises it to check for out-of-range
  /// reads).
  ///
  /// With one split each CTA writes O and LSE (one launch); with several,
  /// \p merge picks who merges the partial states (abi::gpu::DecodeArg):
  /// the last CTA of each (batch, kv head, row tile) group (Fused, one
  /// launch), or the merge kernel (Separate, a second launch on \p stream);
  /// Auto asks decodeFusedMerge. All apply one formula (fp32 sums in
  /// different orders).
  ///
  /// Thread and stream safety: each call takes its own workspace (partial
  /// O / LSE, the buffers' status flags, the groups' arrival counters, set
  /// to 0 on \p stream before the launch; decodeWorkspaceLayout) from the
  /// device's stream-ordered pool on \p stream and frees it there after the
  /// launch (StreamBuffer), and the object holds no per-call state, so any
  /// number of threads may call run() on one object at once, on the same
  /// or different streams, with no lock; calls on different streams may
  /// overlap on the GPU. The caller's tensors and \p table must stay valid
  /// until \p stream has run the call. Throws
  /// UserError naming the bad field (shapes, dtypes, alignment, q_len,
  /// numSplits, a table that does not fit the cache), DriverError if a
  /// launch fails.
  void run(const TensorRef &q, const TensorRef &kCache, const TensorRef &vCache,
           const DevicePageTable &table, const TensorRef &o,
           const TensorRef *lse, const Arguments &args = {}, int numSplits = 0,
           CUstream stream = nullptr,
           DecodeMerge merge = DecodeMerge::Auto) const;

  /// The split count run() uses for this call shape when numSplits is 0:
  /// decodeNumSplits over the key tiles a sequence of \p maxSeqLen keys
  /// may show any of the call's rows (decodeVisibleKeyTiles with \p args'
  /// parameters: a sliding window's, not the whole length; the kernel's
  /// splits divide the same range per group).
  int defaultNumSplits(int64_t batch, int64_t qLen, int64_t maxSeqLen,
                       const Arguments &args = {}) const;
  /// The shape decodeNumSplits sees for a call of \p batch sequences of at
  /// most \p maxSeqLen keys and \p qLen query tokens on this kernel and
  /// device (its block_m, block_n, threads, head dims and dtypes, the
  /// device's SMs): defaultNumSplits' shape before a mask narrows the keys.
  DecodeSplitShape splitShape(int64_t batch, int64_t qLen,
                              int64_t maxSeqLen) const;
  /// Whether run() with DecodeMerge::Auto fuses the merge of a call with
  /// \p qLen query tokens and \p numSplits splits (decodeFusedMerge).
  bool fusesMerge(int64_t qLen, int numSplits) const;

  const AttentionSpec &spec() const { return spec_; }
  const GpuKernelInfo &info() const { return info_; }
  /// The split kernel `<name>_decode`.
  const Function &function() const { return decode_; }
  /// Whether run() launches the merge kernel as a programmatic dependent
  /// launch of the split kernel (LaunchConfig::programmaticDependency: the
  /// merge's launch and prologue overlap the split kernel's tail; its
  /// griddepcontrol.wait orders its reads after all the split kernel's
  /// stores): the module's merge entries carry that wait (sm_90a modules
  /// since session 21; an older or sm_80 module never launches so), the
  /// device and driver allow it (programmaticLaunchAvailable) and it is
  /// switched on (setProgrammaticMerge; initially on unless the
  /// environment variable FLASHJIT_DECODE_PDL is "0" at construction).
  bool programmaticMerge() const {
    return mergeWaits_ && launchAvailable_ && programmaticMerge_.load();
  }
  /// Switches the programmatic launch of the merge kernel on or off for
  /// later run() calls (off: a plain launch after the split kernel, as
  /// before session 21; the kernels are the same, their grid-dependency
  /// instructions then no-ops). For benchmarks that time both in one
  /// process; safe beside concurrent run() calls.
  void setProgrammaticMerge(bool on) { programmaticMerge_.store(on); }
  /// How many calls so far waited for the GPU to check their buffer reads'
  /// status flags (a call whose reads were proven in range waits for none).
  uint64_t bufferCheckSyncs() const { return checkSyncs_.load(); }

  /// The largest q_len run() takes.
  static constexpr int64_t kMaxQLen = 64;

private:
  /// Launches `<name>_decode_merge` (or its serial twin, decodeSerialMerge)
  /// over the partial states at \p oPart /
  /// \p lsePart (decodeWorkspaceLayout) of a \p splits-split call.
  void launchMerge(CUdeviceptr oPart, CUdeviceptr lsePart, int64_t batch,
                   int64_t headsQ, int64_t qLen, int splits, const TensorRef &o,
                   const TensorRef *lse, const Arguments &args,
                   CUstream stream) const;

  AttentionSpec spec_;
  GpuKernelInfo info_;
  Device *device_;
  Module module_;
  Function decode_, merge_, mergeSerial_;
  BufferReads reads_; // the variant's buffer reads, bounded per call
  mutable std::atomic<uint64_t> checkSyncs_{0};
  bool mergeWaits_ = false, launchAvailable_ = false;
  std::atomic<bool> programmaticMerge_{true};
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_DECODEKERNEL_H
