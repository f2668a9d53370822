//===- KernelAbi.h - Argument order of generated CPU kernels -----*- C++
//-*-===//
//
// The compiler's attn-tile pass builds, and the runtime's CpuAttentionKernel
// calls, kernels with plain pointers and scalars (no memref descriptors), in
// this order:
//
//   q, k, v, o, lse, status, counters                   pointers
//   for each buffer, sorted by name: data, size         pointer, i64
//   for each parameter, sorted by name: value           i32, i64 or f32
//   batch, seqlen_q, seqlen_k                           i64
//   q strides[4], k strides[4], v strides[4], o strides[4], lse strides[3]
//   varlen only: cu_seqlens_q, cu_seqlens_k             pointers (i32)
//   block-sparse only: kv_num_blocks, kv_indices,
//     full_kv_num_blocks, full_kv_indices               pointers (i32)
//     row_batch_stride, row_head_stride, num_kv_tiles   i64
//   item_begin, item_end                                i64
//
// Strides are in elements. One work item is one (batch, head, q tile):
// item = (b * heads_q + h) * ceil(seqlen_q / block_m) + q_tile. `status` is
// an i32 per buffer, set to 1 when the kernel read it out of range;
// `counters` is i64[3] (empty, partial, full tile counts) and is written
// only by kernels compiled with count-tiles; block-sparse kernels count only
// the tiles they visit (a listed full tile counts full; a listed partial
// tile counts as the run-time classifier finds it).
//
// Varlen: batch is the number of sequences and seqlen_q/seqlen_k the largest
// sequence lengths (items cover those); q, k, v, o are packed
// [total, heads, head_dim] tensors passed as 4-D strides (0, head stride,
// token stride, dim stride) and lse [heads_q, total_q] as (0, head stride,
// token stride): token t of sequence b is at (cu_seqlens[b] + t) * token
// stride. Items past their sequence's end do nothing.
//
// Block-sparse: the row of item (b, h, q tile) in the BlockMask is
// b * row_batch_stride + h * row_head_stride + q_tile (a stride is 0 where
// the mask is shared); its lists start at row * num_kv_tiles. Listed tiles
// at or past the (sequence's) last key tile are skipped.
//
// The block-mask builder `<kernel>_block_mask` (attn-build-block-mask) of a
// block-sparse kernel takes:
//
//   status                                              pointer
//   for each buffer, sorted by name: data, size         pointer, i64
//   for each parameter, sorted by name: value           i32, i64 or f32
//   seqlen_q, seqlen_k                                  i64 (varlen: largest)
//   varlen only: cu_seqlens_q, cu_seqlens_k             pointers (i32)
//   kv_num_blocks, kv_indices, full_kv_num_blocks,
//     full_kv_indices                                   pointers (i32, out)
//   mask_batch, mask_heads, num_q_tiles, num_kv_tiles   i64
//   row_begin, row_end                                  i64
//
// and fills rows [row_begin, row_end) of a BlockMask of extents
// [mask_batch, mask_heads, num_q_tiles(, num_kv_tiles)]. No MLIR here.
//
// The host calls a kernel through a packed entry point `void entry(void
// **args)`, args[i] pointing at argument i: ORC's `_mlir_<symbol>` wrapper
// in memory, `<symbol>_packed` (kPackedSuffix) in a compiled kernel.so.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_KERNELABI_H
#define FLASHJIT_RUNTIME_KERNELABI_H

#include "flashjit/frontend/Arguments.h"

#include <cstdint>

namespace flashjit::abi {

/// Pointer arguments before the buffers.
constexpr int kLeadingPointers = 7;
/// i64 scalars after the parameters: 3 sizes, 19 strides, 2 item bounds.
constexpr int kTrailingScalars = 3 + 4 * 4 + 3 + 2;
/// Extra arguments of varlen kernels: cu_seqlens_q, cu_seqlens_k.
constexpr int kVarlenArgs = 2;
/// Extra arguments of block-sparse kernels: 4 list pointers, 3 scalars.
constexpr int kBlockSparseArgs = 4 + 3;
/// Builder arguments besides buffers, parameters and the varlen pointers:
/// status, 2 seqlens, 4 list pointers, 4 extents, 2 row bounds.
constexpr int kBuilderFixedArgs = 1 + 2 + 4 + 4 + 2;
/// The block-mask builder of kernel `<symbol>` is `<symbol>_block_mask`.
constexpr const char *kBlockMaskSuffix = "_block_mask";
/// The packed entry point of kernel `<symbol>` in a kernel.so.
constexpr const char *kPackedSuffix = "_packed";

/// One argument of a packed entry point: args[i] points at a Slot, which the
/// kernel reads with the argument's own type (every member starts at the
/// union's address).
union Slot {
  void *ptr;
  int64_t i64;
  int32_t i32;
  float f32;
};

/// A pointer argument.
inline Slot ptrSlot(const void *p) {
  Slot s;
  s.ptr = const_cast<void *>(p);
  return s;
}
/// An i64 argument.
inline Slot i64Slot(int64_t v) {
  Slot s;
  s.i64 = v;
  return s;
}
/// A run-time parameter, in its declared type (f32, i32 or i64).
inline Slot scalarSlot(const Scalar &v) {
  Slot s;
  s.i64 = 0;
  if (v.type == ScalarType::Float32)
    s.f32 = v.floatValue;
  else if (v.type == ScalarType::Int32)
    s.i32 = static_cast<int32_t>(v.intValue);
  else
    s.i64 = v.intValue;
  return s;
}

} // namespace flashjit::abi

#endif // FLASHJIT_RUNTIME_KERNELABI_H
