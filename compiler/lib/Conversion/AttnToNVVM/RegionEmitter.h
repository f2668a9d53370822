//===- RegionEmitter.h - The attn regions inside a GPU kernel ---*- C++ -*-===//
//
// The one FragmentEmitter of the GPU kernels: it evaluates an
// attn.attention's mask and score regions by cloning them. Private to the
// AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_REGIONEMITTER_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_REGIONEMITTER_H

#include "flashjit/Conversion/AttnToNVVM/FragmentEmitter.h"

#include <memory>

namespace flashjit::attn {
class AttentionOp;
} // namespace flashjit::attn

namespace flashjit::nvvm {

/// The FragmentEmitter of \p op's mask and score regions. Parameters and
/// buffers are the kernel's extra arguments in the order of the op's
/// dictionaries (sorted by name).
std::unique_ptr<FragmentEmitter> createRegionEmitter(attn::AttentionOp op);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_REGIONEMITTER_H
