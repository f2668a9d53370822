//===- PagedOps.h - State merging and paged-cache appends on the GPU -*- C++
//-*-===//
//
// The serving helpers of issue 17 for device tensors: the public state merge
// (mergeStates in frontend/Paged.h, 2-way and n-way, with an optional
// attention sink) and the append helper that writes new K/V tokens into a
// paged cache (appendPagedKV), and the element-wise accumulation the GPU
// ring backward sums its partial gradients with. Same semantics and checks as
// the host versions; CUDA C compiled by NVRTC when the object is made (no MLIR;
// the module is loaded once per object), as GpuSinkGradient does.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_PAGEDOPS_H
#define FLASHJIT_RUNTIME_PAGEDOPS_H

#include "flashjit/frontend/Paged.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/runtime/DecodeKernel.h"
#include "flashjit/runtime/Module.h"

#include <cuda.h>

#include <span>
#include <string_view>

namespace flashjit::runtime {

class Device;

/// The merge and append kernels of one device. Thread-safe (calls hold no
/// state).
class GpuPagedOps {
public:
  /// Compiles the kernels for \p device's architecture with NVRTC and loads
  /// them. Throws DriverError if NVRTC or loading fails.
  explicit GpuPagedOps(Device &device);

  /// The n-way state merge of frontend mergeStates on device memory:
  /// \p os[i] [batch, heads, seqlen, head_dim] (F16, BF16 or F32, any
  /// strides), \p lses[i] [batch, heads, seqlen] F32, into \p o and \p lse
  /// (which may be exactly one of the inputs). \p sink, when not null, is
  /// fp32 device memory of \p sinkSize = heads logits, entered once (README,
  /// "merge_states"); its values are not read on the host (a NaN or +inf
  /// entry gives NaN rows). Weights and sums in double. At most kMaxStates
  /// states per call (merge is associative: merge the rest into the
  /// result). Asynchronous on \p stream. Throws UserError for everything
  /// the host merge refuses (naming the tensor, field and value), for more
  /// than kMaxStates states, and for a sink size that is not heads.
  void mergeStates(std::span<const TensorRef> os,
                   std::span<const TensorRef> lses, const TensorRef &o,
                   const TensorRef &lse, const float *sink = nullptr,
                   int64_t sinkSize = 0, CUstream stream = nullptr) const;

  /// The two-way merge (see above).
  void mergeStates(const TensorRef &oA, const TensorRef &lseA,
                   const TensorRef &oB, const TensorRef &lseB,
                   const TensorRef &o, const TensorRef &lse,
                   const float *sink = nullptr, int64_t sinkSize = 0,
                   CUstream stream = nullptr) const;

  /// appendPagedKV on device memory: writes k_new [batch, heads_kv, n_new,
  /// head_dim_qk] and v_new [batch, heads_kv, n_new, head_dim_v] as the
  /// last n_new tokens of each sequence of \p table (which already counts
  /// them) into k_cache [num_pages, heads_kv, page_size, head_dim_qk] and
  /// v_cache (any strides). Every check appendPagedKV makes runs on the
  /// host against the table's host copy (DevicePageTable::hostList: page
  /// ids, lengths, shapes, dtypes); the kernel also skips any page id
  /// outside [0, num_pages). Asynchronous on \p stream. Throws UserError
  /// naming the field and value, also for a contiguous table.
  void append(const TensorRef &kNew, const TensorRef &vNew,
              const TensorRef &kCache, const TensorRef &vCache,
              const DevicePageTable &table, CUstream stream = nullptr) const;

  /// dst = src (\p add false) or dst += src (\p add true) element by
  /// element on device memory: \p src and \p dst of equal rank (1 to 4)
  /// and shape, each F16, BF16 or F32 with any strides (not overlapping
  /// unless equal). The sum is one fp32 addition, rounded once to dst's
  /// dtype (round to nearest even), as the host ring backward adds its
  /// partial gradients (Ring.h); with \p add false, a dtype conversion.
  /// Asynchronous on \p stream. Throws UserError naming the shapes when
  /// they differ, or for a rank outside [1, 4].
  void accumulate(const TensorRef &src, const TensorRef &dst, bool add,
                  CUstream stream = nullptr) const;

  /// The kernels' CUDA C source (the no-GPU tests compile it with NVRTC).
  static std::string_view source();
  /// The most states one mergeStates call takes.
  static constexpr int kMaxStates = 32;
  static constexpr const char *kMergeName = "flashjit_merge_states";
  static constexpr const char *kAppendName = "flashjit_paged_append";
  static constexpr const char *kAccumulateName = "flashjit_accumulate";

private:
  Device *device_;
  Module module_;
  Function merge_, append_, accumulate_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_PAGEDOPS_H
