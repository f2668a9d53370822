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
//   item_begin, item_end                                i64
//
// Strides are in elements. One work item is one (batch, head, q tile):
// item = (b * heads_q + h) * ceil(seqlen_q / block_m) + q_tile. `status` is
// an i32 per buffer, set to 1 when the kernel read it out of range;
// `counters` is i64[3] (empty, partial, full tile counts) and is written
// only by kernels compiled with count-tiles. No MLIR here.
//
// The host calls a kernel through a packed entry point `void entry(void
// **args)`, args[i] pointing at argument i: ORC's `_mlir_<symbol>` wrapper
// in memory, `<symbol>_packed` (kPackedSuffix) in a compiled kernel.so.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_KERNELABI_H
#define FLASHJIT_RUNTIME_KERNELABI_H

namespace flashjit::abi {

/// Pointer arguments before the buffers.
constexpr int kLeadingPointers = 7;
/// i64 scalars after the parameters: 3 sizes, 19 strides, 2 item bounds.
constexpr int kTrailingScalars = 3 + 4 * 4 + 3 + 2;
/// The packed entry point of kernel `<symbol>` in a kernel.so.
constexpr const char *kPackedSuffix = "_packed";

} // namespace flashjit::abi

#endif // FLASHJIT_RUNTIME_KERNELABI_H
