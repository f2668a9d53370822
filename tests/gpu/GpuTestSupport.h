//===- GpuTestSupport.h - Tensors on host and device for [gpu] tests -*- C++
//-*-//
#ifndef FLASHJIT_TESTS_GPU_GPUTESTSUPPORT_H
#define FLASHJIT_TESTS_GPU_GPUTESTSUPPORT_H

#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Types.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Memory.h"

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace flashjit::test {

/// An attention tensor with a host copy and a device copy of one layout:
/// [d0, d1, d2, d3] logical shape, memory order [d0, d2, d1, d3] when
/// \p bshd, \p pad unused elements after each innermost row.
struct GpuTensor {
  std::vector<uint8_t> host;
  runtime::DeviceBuffer device;
  TensorRef hostRef, deviceRef;

  GpuTensor(runtime::Device &dev, DType dtype, std::array<int64_t, 4> shape,
            int rank = 4, bool bshd = false, int64_t pad = 0) {
    int64_t row = shape[3] + pad;
    int64_t n = shape[0] * shape[1] * shape[2] * row;
    host.assign(static_cast<size_t>(n * byteSize(dtype)), 0);
    device = runtime::DeviceBuffer(dev, host.size());
    hostRef.data = host.data();
    hostRef.dtype = dtype;
    hostRef.rank = rank;
    hostRef.shape = shape;
    if (bshd)
      hostRef.strides = {shape[2] * shape[1] * row, row, shape[1] * row, 1};
    else
      hostRef.strides = {shape[1] * shape[2] * row, shape[2] * row, row, 1};
    if (rank == 3) { // [B, H, S] with shape[3] == 1
      hostRef.strides[3] = 1;
    }
    deviceRef = hostRef;
    deviceRef.data = device.data();
  }

  /// Fills every element with a uniform value in [-range, range] and uploads.
  void randomize(std::mt19937_64 &rng, float range = 1.0f) {
    std::uniform_real_distribution<float> u(-range, range);
    for (int64_t a = 0; a < hostRef.shape[0]; ++a)
      for (int64_t b = 0; b < hostRef.shape[1]; ++b)
        for (int64_t c = 0; c < hostRef.shape[2]; ++c)
          for (int64_t d = 0; d < hostRef.shape[3]; ++d)
            storeFromFloat(hostRef.data, hostRef.dtype,
                           hostRef.offset(a, b, c, d), u(rng));
    device.copyFromHost(host.data(), host.size());
  }
  /// Poisons the device copy with NaN (all bits set) before a run.
  void poison() { device.fill(0xFF); }
  void download() { device.copyToHost(host.data(), host.size()); }
  float at(int64_t a, int64_t b, int64_t c, int64_t d = 0) const {
    return loadAsFloat(hostRef.data, hostRef.dtype, hostRef.offset(a, b, c, d));
  }
};

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_GPU_GPUTESTSUPPORT_H
