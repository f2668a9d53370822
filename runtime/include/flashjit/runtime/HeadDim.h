//===- HeadDim.h - GPU head dims that are not multiples of 16 ---*- C++ -*-===//
//
// The GPU forward kernel takes any head dim up to 256: one that is not a
// multiple of 16 is padded to paddedHeadDim in shared memory (FlashAttention
// pads the same way), its global loads move headDimVectorElems elements at
// a time. Shared by the compiler (the kernel, validateForGpu, the shared
// memory it reports) and the runtime (the checks of a call's tensors).
// KernelConfig::sharedBytes takes the padded head dims.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_HEADDIM_H
#define FLASHJIT_RUNTIME_HEADDIM_H

namespace flashjit {

/// The head dim of a GPU kernel's shared-memory tiles for a tensor head dim
/// \p headDim: rounded up to a multiple of 16 (the k-step of mma.sync
/// m16n8k16). The padding columns are zero-filled when loaded, never read
/// from or written to the tensors.
inline int paddedHeadDim(int headDim) { return (headDim + 15) / 16 * 16; }

/// The elements a GPU forward kernel moves per global load of a row of
/// \p headDim elements: 8 (16 bytes) where 8 divides it, else 4, 2 or 1,
/// the largest that divides it, so that no load crosses the row's end. The
/// tensor's base must be aligned to that many 16-bit elements and its
/// batch/head/seq strides must be multiples of it.
inline int headDimVectorElems(int headDim) {
  for (int v : {8, 4, 2})
    if (headDim % v == 0)
      return v;
  return 1;
}

} // namespace flashjit

#endif // FLASHJIT_RUNTIME_HEADDIM_H
