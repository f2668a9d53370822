//===- AttentionKernel.h - Running generated attention kernels ---*- C++
//-*-===//
//
// Loads a generated forward-attention kernel (PTX or cubin, made by the
// compiler or read from a cache or bundle) and launches it on strided device
// tensors. Links no MLIR: a host application that ships precompiled kernels
// needs only this library and the CUDA driver.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_ATTENTIONKERNEL_H
#define FLASHJIT_RUNTIME_ATTENTIONKERNEL_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/Module.h"

#include <cuda.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace flashjit::runtime {

class Device;

/// Launch facts of a generated kernel (see the compiler's
/// FlashForwardKernel.h for its argument list).
struct GpuKernelInfo {
  /// The kernel's symbol.
  std::string name;
  /// The architecture it was generated for, e.g. "sm_90a".
  std::string arch;
  /// Threads per CTA.
  int threads = 128;
  /// Query rows per CTA (grid x = ceil(seqlen_q / blockM)).
  int blockM = 64;
  /// Dynamic shared memory per CTA, in bytes.
  int sharedBytes = 0;
};

/// A loaded attention kernel for one spec on one device.
class GpuAttentionKernel {
public:
  /// Loads \p ptx for \p device (nvJitLink, else the driver JIT). A
  /// non-empty \p cubin (e.g. from a cache entry) generated for exactly the
  /// device's architecture is loaded instead, skipping the assembly; if it
  /// does not load, the PTX is. Throws UserError if the kernel was generated
  /// for another architecture than the device's, DriverError if loading
  /// fails.
  GpuAttentionKernel(AttentionSpec spec, GpuKernelInfo info,
                     std::string_view ptx, Device &device,
                     std::string_view cubin = {});

  /// Computes O (and LSE when the spec returns it) on device tensors:
  /// q [B, Hq, Sq, Dqk], k [B, Hkv, Sk, Dqk], v [B, Hkv, Sk, Dv],
  /// o [B, Hq, Sq, Dv] in the spec's 16-bit dtype, lse [B, Hq, Sq] fp32
  /// (required when the spec returns LSE). Strides are free except: the
  /// head_dim stride is 1, q/k/v rows start on 16-byte boundaries (data
  /// 16-byte aligned, other strides multiples of 8 elements), o and lse are
  /// 4-byte aligned with even o strides. Buffers in \p args must be device
  /// memory. Asynchronous on \p stream, except that a variant reading
  /// buffers synchronises the stream to check for out-of-range reads. Throws
  /// UserError naming the bad field (also for batch or heads_q above 65535,
  /// or an out-of-range buffer read), DriverError if the launch fails.
  void run(const TensorRef &q, const TensorRef &k, const TensorRef &v,
           const TensorRef &o, const TensorRef *lse, const Arguments &args,
           CUstream stream = nullptr) const;

  const AttentionSpec &spec() const { return spec_; }
  /// True when the module was loaded from the cubin (else from the PTX).
  bool loadedFromCubin() const { return fromCubin_; }
  const GpuKernelInfo &info() const { return info_; }
  /// The loaded function (registers, local memory: see Function).
  const Function &function() const { return function_; }

private:
  AttentionSpec spec_;
  GpuKernelInfo info_;
  Device *device_;
  Module module_;
  bool fromCubin_ = false;
  Function function_;
  mutable DeviceBuffer status_; // out-of-range flags, one i32 per buffer
  mutable std::mutex statusMutex_;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_ATTENTIONKERNEL_H
