//===- GpuTensorChecks.h - Checks shared by the GPU launchers --*- C++ -*-===//
//
// Tensor and argument checks of the forward launcher (AttentionKernel.cpp)
// and the backward launcher (GpuBackwardKernel.cpp). Private to
// runtime/lib.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_GPUTENSORCHECKS_H
#define FLASHJIT_RUNTIME_LIB_GPUTENSORCHECKS_H

#include "flashjit/frontend/Tensor.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Launch.h"

#include <string>
#include <vector>

namespace flashjit::runtime::detail {

/// Throws UserError unless \p t's data is \p bytes-aligned and every
/// stride but the last (of an axis longer than 1) is a multiple of
/// \p strideElems elements (the GPU kernels load \p bytes-byte vectors).
void requireAligned(const char *name, const TensorRef &t, int bytes,
                    int strideElems);

/// Throws UserError unless the head_dim axis (the last: 3 dense, 2 varlen)
/// of \p t is contiguous.
void requireUnitInner(const char *name, const TensorRef &t);

/// The launcher's fixed arguments match the kernel ABI (KernelAbi.h) in
/// number: a change on one side that the other missed is an InternalError
/// before any launch, not a kernel reading the wrong argument.
void checkFixedArgs(const KernelArgs &a,
                    const std::vector<abi::gpu::ArgType> &abiTypes,
                    const std::string &kernel);

} // namespace flashjit::runtime::detail

#endif // FLASHJIT_RUNTIME_LIB_GPUTENSORCHECKS_H
