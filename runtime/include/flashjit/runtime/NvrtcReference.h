//===- NvrtcReference.h - A naive GPU attention reference -------*- C++ -*-===//
//
// An independent second lowering of the DSL: the spec's mask and score
// modifier printed as CUDA C++ (CudaPrinter.h) inside a deliberately simple
// kernel, compiled with NVRTC for the device's arch. It checks the generated
// kernels at sizes too large for the float64 CPU oracle (N up to 32k).
//
// The kernel: one warp per (batch, head, query row), 8 rows per block
// sharing K/V tiles of 32 keys staged in shared memory as fp32. Lane j
// computes the score of key j of the tile in fp32 (scale * q.k, then the
// score modifier, for allowed keys only), then an online softmax over the
// tiles; keys whose modified score is -inf carry no weight; a row with no
// contributing key writes O = 0 and LSE = -inf exactly. O is rounded to the
// spec's dtype, LSE is fp32 (natural log). No tensor cores, no fast math.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_NVRTCREFERENCE_H
#define FLASHJIT_RUNTIME_NVRTCREFERENCE_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/Module.h"

#include <cuda.h>

#include <string>

namespace flashjit::runtime {

class Device;

/// The generated CUDA C++ of a reference kernel and how to launch it.
struct ReferenceKernelSource {
  /// A complete translation unit (includes cuda_fp16.h / cuda_bf16.h).
  std::string source;
  /// The extern "C" kernel name: fj_reference_<variant name>.
  std::string kernelName;
  /// Threads per block (32 * rowsPerBlock).
  int threadsPerBlock = 0;
  /// Query rows per block (one warp each).
  int rowsPerBlock = 0;
  /// Keys per shared-memory tile.
  int keysPerTile = 0;
  /// Dynamic shared memory per block in bytes.
  int dynamicSharedBytes = 0;
};

/// Largest head dim (qk or v) the reference supports: its K/V tiles live in
/// shared memory.
constexpr int kReferenceMaxHeadDim = 512;

/// Generates the reference kernel for \p spec (no GPU needed). The kernel's
/// parameters, in order: q, k, v (const T *), o (T *), lse (float *, may be
/// null), a FjDims struct by value (sizes and element strides of every
/// tensor, int64), then each runtime parameter of spec.variant.params() (in
/// that order, as int / long long / float), then for each buffer of
/// spec.variant.buffers() a const pointer and an int64 size. Throws
/// UserError if spec.validate() fails or a head dim exceeds
/// kReferenceMaxHeadDim.
ReferenceKernelSource generateReferenceKernel(const AttentionSpec &spec);

/// A reference kernel compiled for one device.
class NvrtcReference {
public:
  /// Generates, compiles (NVRTC, for device.properties().arch()) and loads
  /// the reference for \p spec. Throws UserError for a bad spec, DriverError
  /// for NVRTC/driver failures (with the compile log).
  NvrtcReference(const AttentionSpec &spec, Device &device);

  /// Runs attention on device tensors: q, k, v, o (and lse when given; it
  /// must be given when spec.returnLse) hold device pointers, shaped and
  /// typed as checkAttentionTensors requires; \p args' buffers hold device
  /// pointers. Launches on \p stream, waits for it, and then throws
  /// UserError if a buffer was read outside its size (naming the buffer and
  /// index, as the interpreter does). Throws UserError for bad tensors or
  /// arguments (including sizes that do not fit the DSL's int32 indices),
  /// DriverError for a failed launch.
  void run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
           const TensorRef &o, const TensorRef *lse, const Arguments &args = {},
           CUstream stream = nullptr);

  /// The generated source and launch shape.
  const ReferenceKernelSource &kernel() const { return kernel_; }
  /// The PTX NVRTC produced.
  const std::string &ptx() const { return ptx_; }
  /// The loaded kernel (registers, local memory, ...).
  const Function &function() const { return function_; }

private:
  AttentionSpec spec_;
  Device *device_;
  ReferenceKernelSource kernel_;
  std::string ptx_;
  Module module_;
  Function function_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_NVRTCREFERENCE_H
