//===- RingNcclGpuTest.cpp - The NCCL ring transport on one GPU -----------===//
//
// Issue 20: the GPU transport of ring attention, NcclTransport over a
// communicator of one rank (the one-GPU machine; a ring of one sends to
// itself through ncclSend / ncclRecv in one group). Three shifts ping-pong
// between two device buffers, as the ring's steps do, each checked byte for
// byte on the host; then the overlapped ordering (the transport's own
// stream, ordered by events against the caller's). Skipped, with the reason,
// where libnccl cannot be loaded (set FLASHJIT_NCCL_LIBRARY to libnccl.so.2,
// e.g. PyTorch's site-packages/nvidia/nccl/lib/libnccl.so.2).
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/NcclTransport.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

using namespace flashjit;
using namespace flashjit::runtime;

TEST_CASE("NCCL ring transport: one rank shifts device buffers to itself",
          "[gpu][ring][nccl]") {
  std::string why;
  if (!Nccl::available(&why)) {
    WARN("SKIPPED: libnccl cannot be loaded: " << why);
    return;
  }
  const Nccl &nccl = Nccl::get();
  WARN("NCCL " << nccl.version() << " from " << nccl.path());
  Device &device = Device::get(0);
  device.makeCurrent();
  NcclCommunicator comm(nccl.uniqueId(), 1, 0, device);
  CUstream stream = nullptr;
  REQUIRE(Driver::get().cuStreamCreate(&stream, CU_STREAM_DEFAULT) ==
          CUDA_SUCCESS);
  {
    NcclTransport t(comm.handle(), stream);
    CHECK(t.rank() == 0);
    CHECK(t.size() == 1);
    // An odd byte count (the header plus K/V chunks of any dtype).
    const size_t bytes = (size_t(1) << 20) + 37;
    DeviceBuffer a(device, bytes), b(device, bytes);
    std::vector<uint8_t> host(bytes), back(bytes);
    for (size_t i = 0; i < bytes; ++i)
      host[i] = static_cast<uint8_t>((i * 131 + 7) % 251);
    a.copyFromHost(host.data(), bytes);
    device.synchronize();
    DeviceBuffer *cur = &a, *next = &b;
    for (int step = 0; step < 3; ++step) {
      INFO("shift " << step);
      next->fill(static_cast<uint8_t>(0xA0 + step));
      device.synchronize(); // the fill is done before NCCL writes
      t.startShift(cur->data(), next->data(), bytes);
      t.waitShift();
      REQUIRE(Driver::get().cuStreamSynchronize(stream) == CUDA_SUCCESS);
      next->copyToHost(back.data(), bytes);
      REQUIRE(back == host);
      std::swap(cur, next);
    }
    // Misuse is a UserError, checked before NCCL is called.
    CHECK_THROWS_AS(t.waitShift(), UserError);
    CHECK_THROWS_AS(t.startShift(nullptr, b.data(), 16), UserError);
  }
  REQUIRE(Driver::get().cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(Driver::get().cuStreamDestroy(stream) == CUDA_SUCCESS);
}

TEST_CASE("NCCL ring transport, overlapped: shifts on its own stream after "
          "the caller's writes, the caller's stream after the shifts",
          "[gpu][ring][nccl][overlap]") {
  std::string why;
  if (!Nccl::available(&why)) {
    WARN("SKIPPED: libnccl cannot be loaded: " << why);
    return;
  }
  const Nccl &nccl = Nccl::get();
  Device &device = Device::get(0);
  device.makeCurrent();
  NcclCommunicator comm(nccl.uniqueId(), 1, 0, device);
  const Driver &d = Driver::get();
  CUstream stream = nullptr;
  REQUIRE(d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  {
    NcclTransport t(comm.handle(), stream);
    CHECK(t.overlapShifts(true));
    // 64 MiB: a shift that did not wait for the memset enqueued just
    // before it on the caller's stream would send stale bytes, and a
    // memset after waitShift that did not wait for the shift would be
    // overwritten by it.
    const size_t bytes = size_t(64) << 20;
    DeviceBuffer a(device, bytes), b(device, bytes);
    a.fill(0x11);
    b.fill(0x22);
    device.synchronize();
    CUdeviceptr cur = reinterpret_cast<CUdeviceptr>(a.data());
    CUdeviceptr next = reinterpret_cast<CUdeviceptr>(b.data());
    std::vector<uint8_t> back(bytes);
    for (int step = 0; step < 4; ++step) {
      INFO("overlapped shift " << step);
      auto value = static_cast<unsigned char>(0x40 + step);
      REQUIRE(d.cuMemsetD8Async(cur, value, bytes, stream) == CUDA_SUCCESS);
      t.startShift(reinterpret_cast<const void *>(cur),
                   reinterpret_cast<void *>(next), bytes);
      CHECK_THROWS_AS(t.overlapShifts(false), UserError); // shift pending
      t.waitShift();
      // Ordered after the shift on the caller's stream: overwrites the
      // bytes the shift sent, not the ones it received.
      REQUIRE(d.cuMemsetD8Async(cur, 0x77, bytes, stream) == CUDA_SUCCESS);
      REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
      REQUIRE(d.cuMemcpyDtoH(back.data(), next, bytes) == CUDA_SUCCESS);
      CHECK(std::count(back.begin(), back.end(), value) ==
            static_cast<std::ptrdiff_t>(bytes));
      std::swap(cur, next);
    }
    // Back to the serial ordering: the shift runs on the caller's stream.
    CHECK_FALSE(t.overlapShifts(false));
    REQUIRE(d.cuMemsetD8Async(cur, 0x55, bytes, stream) == CUDA_SUCCESS);
    t.startShift(reinterpret_cast<const void *>(cur),
                 reinterpret_cast<void *>(next), bytes);
    t.waitShift();
    REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    REQUIRE(d.cuMemcpyDtoH(back.data(), next, bytes) == CUDA_SUCCESS);
    CHECK(std::count(back.begin(), back.end(), 0x55) ==
          static_cast<std::ptrdiff_t>(bytes));
  }
  REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  REQUIRE(d.cuStreamDestroy(stream) == CUDA_SUCCESS);
}
