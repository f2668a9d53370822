//===- GpuTensorChecks.h - Checks shared by the GPU launchers --*- C++ -*-===//
//
// Tensor and argument checks of the forward launcher (AttentionKernel.cpp)
// and the backward launcher (GpuBackwardKernel.cpp). Private to
// runtime/lib.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_GPUTENSORCHECKS_H
#define FLASHJIT_RUNTIME_LIB_GPUTENSORCHECKS_H

#include "flashjit/frontend/Arguments.h"
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

/// The fp8 forward (issue 18) moves 16-byte pieces of \p q, \p k, \p v
/// (16 elements) with cp.async: 16-byte aligned bases and strides.
void requireFp8Aligned(const TensorRef &q, const TensorRef &k,
                       const TensorRef &v);

/// Appends the fp8 forward kernel's descale arguments (Fp8Abi.h) of a call
/// of \p batch sequences and \p headsKV kv heads to \p a, after checking
/// them (Arguments::validateDescalesFor: lengths and presence; the values
/// are device memory and not read).
void addFp8DescaleArgs(KernelArgs &a, const AttentionSpec &spec,
                       const Arguments &args, int64_t batch, int64_t headsKV);

} // namespace flashjit::runtime::detail

#endif // FLASHJIT_RUNTIME_LIB_GPUTENSORCHECKS_H
