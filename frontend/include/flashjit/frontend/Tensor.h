//===- Tensor.h - Strided views of attention tensors -------------*- C++
//-*-===//
//
// Every backend takes its tensors as pointer + dtype + 4-D shape + strides in
// elements, so [batch, heads, seqlen, head_dim] and [batch, seqlen, heads,
// head_dim] layouts (and slices of bigger tensors) both work without copies.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_TENSOR_H
#define FLASHJIT_FRONTEND_TENSOR_H

#include "flashjit/frontend/Types.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace flashjit {

struct AttentionSpec;

/// A strided view of up to 4 dims (trailing dims 1); runs may share inputs,
struct TensorRef { // never O or LSE (flashjit does not lock the memory)
  void *data = nullptr;
  DType dtype = DType::BF16;
  int rank = 4;
  std::array<int64_t, 4> shape{};
  /// Strides in elements (not bytes).
  std::array<int64_t, 4> strides{};

  /// A row-major (contiguous) 4-D tensor.
  static TensorRef contiguous(void *data, DType dtype,
                              std::array<int64_t, 4> shape);
  /// A row-major 3-D tensor (LSE: [batch, heads, seqlen]).
  static TensorRef contiguous3(void *data, DType dtype,
                               std::array<int64_t, 3> shape);
  /// A row-major 2-D tensor (varlen LSE: [heads, total_q]).
  static TensorRef contiguous2(void *data, DType dtype,
                               std::array<int64_t, 2> shape);
  /// Number of elements (product of the shape).
  int64_t numel() const;
  /// Offset in elements of the element at \p idx.
  int64_t offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3 = 0) const {
    return i0 * strides[0] + i1 * strides[1] + i2 * strides[2] +
           i3 * strides[3];
  }
};

/// The sizes of one attention call, read off its tensors.
struct AttentionShape {
  int64_t batch = 0;
  int64_t headsQ = 0;
  int64_t headsKV = 0;
  int64_t seqlenQ = 0;
  int64_t seqlenK = 0;
  int64_t headDimQK = 0;
  int64_t headDimV = 0;
};

/// Checks q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv] and,
/// where given, o [B, Hq, Sq, Dv] and lse [B, Hq, Sq] (fp32) against \p spec:
/// ranks, dtypes, head counts and head dims equal to the spec's, shapes
/// consistent with each other, strides >= 0 (>= 1 on output dims larger than
/// 1), non-null data for non-empty tensors, and outputs (o, lse) whose
/// memory (the bytes from their first to their last element) overlaps
/// neither q, k, v nor each other. Throws UserError naming the tensor, the
/// field and the value (e.g. "k.shape[3] = 64, expected 128").
AttentionShape checkAttentionTensors(const AttentionSpec &spec,
                                     const TensorRef &q, const TensorRef &k,
                                     const TensorRef &v,
                                     const TensorRef *o = nullptr,
                                     const TensorRef *lse = nullptr);

/// The sizes of one packed variable-length call (FlashAttention's varlen
/// layout: sequences concatenated along the token dim, no padding).
struct VarlenShape {
  /// Number of sequences (cu_seqlens_q.size() - 1).
  int64_t batch = 0;
  int64_t headsQ = 0;
  int64_t headsKV = 0;
  /// Tokens over all sequences (cu_seqlens_q.back(), cu_seqlens_k.back()).
  int64_t totalQ = 0;
  int64_t totalK = 0;
  /// The longest query and key sequences.
  int64_t maxSeqlenQ = 0;
  int64_t maxSeqlenK = 0;
  int64_t headDimQK = 0;
  int64_t headDimV = 0;
};

/// Checks one `name` cu_seqlens array (int32, batch + 1 entries, first 0,
/// non-decreasing, last equal to \p total tokens) and returns the longest
/// sequence. Throws UserError naming the entry, e.g.
/// "cu_seqlens_q[3] = 10 < cu_seqlens_q[2] = 12".
int64_t checkCuSeqlens(const char *name, std::span<const int32_t> cuSeqlens,
                       int64_t total);

/// Checks a packed varlen call (FlashAttention's flash_attn_varlen_func
/// layout): q [total_q, heads_q, head_dim_qk], k [total_k, heads_kv,
/// head_dim_qk], v [total_k, heads_kv, head_dim_v] and, where given,
/// o [total_q, heads_q, head_dim_v] and lse [heads_q, total_q] (fp32), any
/// strides; cu_seqlens_q and cu_seqlens_k with the same number of entries
/// (checkCuSeqlens); outputs overlap no input and not each other, as in
/// checkAttentionTensors. Sequence b holds query tokens
/// [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and key tokens
/// [cu_seqlens_k[b], cu_seqlens_k[b + 1]). Throws UserError naming the tensor
/// or array, the field and the value.
VarlenShape checkVarlenTensors(const AttentionSpec &spec, const TensorRef &q,
                               const TensorRef &k, const TensorRef &v,
                               std::span<const int32_t> cuSeqlensQ,
                               std::span<const int32_t> cuSeqlensK,
                               const TensorRef *o = nullptr,
                               const TensorRef *lse = nullptr);

/// Checks the backward's tensors (README.md, "Backward"): q, k, v, o, lse
/// and dO as in checkAttentionTensors (o [B, Hq, Sq, Dv], lse [B, Hq, Sq]
/// fp32, dO like o) and dq, dk, dv with the shapes and dtypes of q, k, v.
/// q, k, v, o, lse and dO are inputs here and may share memory with each
/// other (o == q is fine); the outputs dq, dk, dv must overlap no input and
/// not each other (checkOutputsDisjoint), and no output has stride 0 on a
/// dim larger than 1. Throws UserError naming the tensor, the field and the
/// value.
AttentionShape checkBackwardTensors(const AttentionSpec &spec,
                                    const TensorRef &q, const TensorRef &k,
                                    const TensorRef &v, const TensorRef &o,
                                    const TensorRef &lse, const TensorRef &dO,
                                    const TensorRef &dq, const TensorRef &dk,
                                    const TensorRef &dv);

/// checkBackwardTensors for a packed varlen call (checkVarlenTensors'
/// layouts: lse [heads_q, total_q]).
VarlenShape checkVarlenBackwardTensors(
    const AttentionSpec &spec, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, std::span<const int32_t> cuSeqlensQ,
    std::span<const int32_t> cuSeqlensK, const TensorRef &o,
    const TensorRef &lse, const TensorRef &dO, const TensorRef &dq,
    const TensorRef &dk, const TensorRef &dv);

/// A named range of bytes [begin, end) that a call reads or writes (empty
/// when begin == end), for checkOutputsDisjoint.
struct MemoryRegion {
  /// The argument's name as the caller knows it ("dq", "grads[1] 'bias'").
  std::string name;
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

/// The bytes from \p t's first to its last element (empty for an empty
/// tensor); \p t's strides must be checked (non-negative, no overflow).
MemoryRegion memoryOf(std::string name, const TensorRef &t);

/// The \p bytes bytes at \p data (empty when \p data is null or \p bytes
/// is 0).
MemoryRegion memoryOf(std::string name, const void *data, uint64_t bytes);

/// The aliasing rule of every entry point: an output's bytes overlap no
/// input's and no other output's (a strided interleaving counts as
/// overlapping: a kernel writing one while reading the other would race
/// with itself); inputs may share memory. Throws UserError naming both
/// arguments and their byte ranges ("lse overlaps o in memory (...)").
void checkOutputsDisjoint(std::span<const MemoryRegion> outputs,
                          std::span<const MemoryRegion> inputs);

/// Throws UserError when output \p name has stride 0 on a dim larger than 1
/// (two of its elements would be written to one address).
void checkNoSelfOverlap(const char *name, const TensorRef &t);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_TENSOR_H
