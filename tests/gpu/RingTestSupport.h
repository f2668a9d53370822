//===- RingTestSupport.h - Ranks as threads on one GPU --------------------===//
//
// The stand-in for several GPUs in the [gpu][ring] tests: every rank a
// thread of one process with its own stream on one device, its shifts
// staged through host memory and an InProcessRing. NCCL itself cannot run
// two ranks of one communicator on one GPU (ncclCommInitRank refuses a
// duplicate device).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_GPU_RINGTESTSUPPORT_H
#define FLASHJIT_TESTS_GPU_RINGTESTSUPPORT_H

#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"
#include "flashjit/runtime/Ring.h"

#include <cuda.h>

#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace flashjit::test {

using runtime::Driver;
using runtime::RingTransport;

/// A rank of ranks-as-threads on one GPU: each shift copies the send
/// buffer to host memory (after the rank's stream has finished with it),
/// moves it through \p host (an InProcessRing rank), and copies the
/// received bytes to the device buffer in waitShift.
class StagedDeviceRing final : public RingTransport {
public:
  StagedDeviceRing(RingTransport &host, CUstream stream)
      : host_(host), stream_(stream) {}
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  void startShift(const void *send, void *recv, size_t bytes) override {
    const Driver &d = Driver::get();
    check(d.cuStreamSynchronize(stream_));
    sendHost_.resize(bytes);
    recvHost_.resize(bytes);
    check(d.cuMemcpyDtoH(sendHost_.data(), reinterpret_cast<CUdeviceptr>(send),
                         bytes));
    recv_ = recv;
    bytes_ = bytes;
    host_.startShift(sendHost_.data(), recvHost_.data(), bytes);
  }
  void waitShift() override {
    host_.waitShift();
    const Driver &d = Driver::get();
    check(d.cuStreamSynchronize(stream_)); // no kernel reads recv_ now
    check(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(recv_), recvHost_.data(),
                         bytes_));
    // A copy from pageable memory may return before its DMA lands: wait
    // for it before the rank's stream reads the buffer (the streams are
    // blocking ones too, ordered after the legacy stream's copy).
    check(d.cuCtxSynchronize());
  }
  void abort(const std::string &why) noexcept override { host_.abort(why); }

private:
  static void check(CUresult r) {
    if (r != CUDA_SUCCESS)
      throw std::runtime_error("CUDA error " + std::to_string(int(r)));
  }
  RingTransport &host_;
  CUstream stream_;
  std::vector<char> sendHost_, recvHost_;
  void *recv_ = nullptr;
  size_t bytes_ = 0;
};

/// Runs \p body(rank, transport, stream) for each of \p ranks ranks on its
/// own thread, stream (made current on \p dev) and StagedDeviceRing, then
/// synchronises and destroys the stream; rethrows the first rank's
/// exception.
inline void runRankThreads(
    runtime::Device &dev, int ranks,
    const std::function<void(int, RingTransport &, CUstream)> &body) {
  runtime::InProcessRing host(ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        dev.makeCurrent();
        CUstream stream = nullptr;
        const Driver &d = Driver::get();
        if (d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) != CUDA_SUCCESS)
          throw std::runtime_error("cuStreamCreate failed");
        StagedDeviceRing t(host.rank(r), stream);
        try {
          body(r, t, stream);
          d.cuStreamSynchronize(stream);
        } catch (...) {
          d.cuStreamSynchronize(stream);
          d.cuStreamDestroy(stream);
          throw;
        }
        d.cuStreamDestroy(stream);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
}

} // namespace flashjit::test

#endif // FLASHJIT_TESTS_GPU_RINGTESTSUPPORT_H
