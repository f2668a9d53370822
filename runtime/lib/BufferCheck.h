//===- BufferCheck.h - When a GPU call checks its buffer reads --*- C++ -*-===//
//
// A generated kernel flags a buffer read outside [0, size) in a per-buffer
// status word; checking the flags means waiting for the GPU. The launchers
// (AttentionKernel.cpp, GpuBackwardKernel.cpp, DecodeKernel.cpp) wait only
// for calls whose reads BufferReads (frontend/BufferBounds.h) cannot prove
// in range before the launch; a proven call sets no flag, so it neither
// clears nor reads them (a checked call clears them before its launch, so
// no stale flag is ever reported). Private to runtime/lib.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_BUFFERCHECK_H
#define FLASHJIT_RUNTIME_LIB_BUFFERCHECK_H

#include "flashjit/frontend/BufferBounds.h"
#include "flashjit/runtime/AttentionKernel.h"

#include <cstdint>
#include <vector>

namespace flashjit::runtime::detail {

/// Whether a call over \p at must check its buffer reads on the GPU (some
/// read of \p reads is not proven inside its buffer of \p args). The
/// dense/varlen overload below builds no positions for a variant that
/// reads no buffer.
inline bool needsStatusCheck(const BufferReads &reads, const CallPositions &at,
                             const Arguments &args) {
  return !reads.empty() && !reads.unproven(at, args).empty();
}

/// The positions of \p batch sequences of seqlen_q x seqlen_k, \p heads
/// query heads (dense and block-sparse calls).
inline CallPositions densePositions(int64_t heads, int64_t batch,
                                    int64_t seqlenQ, int64_t seqlenK) {
  CallPositions at(heads);
  at.add(0, batch, seqlenQ, seqlenK);
  return at;
}

/// The positions of a packed varlen batch: sequence b has
/// cuQ[b + 1] - cuQ[b] queries and cuK[b + 1] - cuK[b] keys.
inline CallPositions varlenPositions(int64_t heads,
                                     const std::vector<int32_t> &cuQ,
                                     const std::vector<int32_t> &cuK) {
  CallPositions at(heads);
  for (size_t b = 0; b + 1 < cuQ.size() && b + 1 < cuK.size(); ++b)
    at.add(static_cast<int64_t>(b), 1, int64_t(cuQ[b + 1]) - cuQ[b],
           int64_t(cuK[b + 1]) - cuK[b]);
  return at;
}

/// The positions of a paged decode call: sequence b has \p qLen queries
/// (seqlen_q = q_len) and seqLens[b] keys.
inline CallPositions decodePositions(int64_t heads, int64_t qLen,
                                     const std::vector<int64_t> &seqLens) {
  CallPositions at(heads);
  for (size_t b = 0; b < seqLens.size(); ++b)
    at.add(static_cast<int64_t>(b), 1, qLen, seqLens[b]);
  return at;
}

/// needsStatusCheck for a dense or block-sparse call (\p cu null: \p batch
/// sequences of seqlen_q x seqlen_k) or a packed varlen batch (\p cu's
/// host copy of the offsets), \p heads query heads; false without building
/// positions when the variant reads no buffer.
inline bool needsStatusCheck(const BufferReads &reads, const Arguments &args,
                             int64_t heads, int64_t batch, int64_t seqlenQ,
                             int64_t seqlenK, const DeviceCuSeqlens *cu) {
  if (reads.empty())
    return false;
  return needsStatusCheck(reads,
                          cu ? varlenPositions(heads, cu->hostQ(), cu->hostK())
                             : densePositions(heads, batch, seqlenQ, seqlenK),
                          args);
}

} // namespace flashjit::runtime::detail

#endif // FLASHJIT_RUNTIME_LIB_BUFFERCHECK_H
