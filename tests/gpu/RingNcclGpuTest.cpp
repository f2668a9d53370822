//===- RingNcclGpuTest.cpp - The NCCL ring transport on one GPU -----------===//
//
// Issue 20: the GPU transport of ring attention, NcclTransport over a
// communicator of one rank (the one-GPU machine; a ring of one sends to
// itself through ncclSend / ncclRecv in one group). Three shifts ping-pong
// between two device buffers, as the ring's steps do, each checked byte for
// byte on the host. Skipped, with the reason, where libnccl cannot be
// loaded (set FLASHJIT_NCCL_LIBRARY to libnccl.so.2, e.g. PyTorch's
// site-packages/nvidia/nccl/lib/libnccl.so.2).
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/NcclTransport.h"

#include <catch2/catch.hpp>

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
