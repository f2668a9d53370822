//===- Fp8Abi.h - The fp8 forward kernel's descale arguments ----*- C++ -*-===//
//
// The GPU forward kernel of a spec with fp8 Q/K/V (issue 18) takes the
// descale factors (frontend Arguments::qDescale/kDescale/vDescale) after
// its fixed arguments (KernelAbi.h: forwardArgTypes) and before the
// variant's. Kept apart from KernelAbi.h so that the ABI of every other
// kernel is untouched. Also the kernel's shared-memory layout, needed where
// it is built (AttnToNVVM), planned (compileGpu) and checked (LaunchCheck).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_FP8ABI_H
#define FLASHJIT_RUNTIME_FP8ABI_H

#include "flashjit/runtime/KernelAbi.h"

#include <cstdint>
#include <vector>

namespace flashjit::abi::gpu {

/// The fp8 forward kernel's descale arguments, in order: q_descale,
/// k_descale, v_descale (pointers to f32; null: the factor is 1), then for
/// each of them an i32 that is 1 where it holds [batch, heads_kv] values
/// (element batch * heads_kv + kv head; varlen: batch is the sequence) and
/// 0 where it holds one value for the tensor, then heads_kv (i32). The
/// kernel computes scores as scale * q_descale * k_descale * (q8 . k8)
/// (what the mask and the score modifier see) and O = v_descale * sum p v8.
inline constexpr int kFp8DescaleArgs = 7;

/// The types of the kFp8DescaleArgs arguments.
inline std::vector<ArgType> fp8DescaleArgTypes() {
  std::vector<ArgType> t(3, ArgType::Ptr);
  t.insert(t.end(), 4, ArgType::I32);
  return t;
}

} // namespace flashjit::abi::gpu

namespace flashjit {

/// Bytes of an fp8 tile of \p rows rows and \p dim one-byte elements in the
/// 128-byte-swizzled layout: column blocks of 128 elements, each rows x
/// 128 bytes (a head dim of 64 fills half of each row).
constexpr int64_t fp8TileBytes(int64_t rows, int64_t dim) {
  return rows * 128 * ((dim + 127) / 128);
}

/// Dynamic shared memory of the fp8 forward kernel of \p c (cp.async, two
/// K/V stages): [Q | K0 V0 | K1 V1 | V^T], V^T the head_dim_v x block_n
/// transpose of the current stage's V that O += P V reads (fp8 wgmma
/// takes K-major operands only).
inline int64_t fp8SharedBytes(const KernelConfig &c, int headDimQK,
                              int headDimV) {
  int64_t stage =
      fp8TileBytes(c.blockN, headDimQK) + fp8TileBytes(c.blockN, headDimV);
  return fp8TileBytes(c.blockM(), headDimQK) + 2 * stage +
         fp8TileBytes(headDimV, c.blockN);
}

} // namespace flashjit

#endif // FLASHJIT_RUNTIME_FP8ABI_H
