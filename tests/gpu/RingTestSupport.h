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

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
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

/// What the ranks of a DeviceRing share: per rank, the buffer it sends in
/// its current shift with the event after which it is ready, and the event
/// its own receive (the copy of its predecessor's buffer) completes.
struct DeviceRingShared {
  struct Slot {
    const void *send = nullptr;
    size_t bytes = 0;
    CUevent ready = nullptr;  // on the sender's stream: send buffer ready
    uint64_t posted = 0;      // the shift whose send is posted
    CUevent copied = nullptr; // the rank's receive of that shift landed
    uint64_t copiedPosted = 0;
  };
  explicit DeviceRingShared(int size) : slots(static_cast<size_t>(size)) {}
  std::mutex m;
  std::condition_variable cv;
  std::vector<Slot> slots;
  bool aborted = false;
  std::string why;
  int finished = 0; // ranks done with the ring (runRankThreads)
};

/// A rank of ranks-as-threads on one GPU whose shifts are device-to-device
/// copies ordered by CUDA events, like NCCL's: startShift records `ready`
/// on the rank's stream and posts the send buffer; waitShift enqueues the
/// copy of the predecessor's buffer into the receive buffer after the
/// predecessor's `ready` (its send buffer is written) and, overlapped, its
/// own (its receive buffer is no longer read), records `copied`, and makes
/// the rank's stream wait for its own copy and its successor's (which read
/// its send buffer). Overlapped (overlapShifts(true)) the copy runs on a
/// communication stream of the rank, concurrently with the kernels
/// enqueued between startShift and waitShift; serial, on the rank's stream
/// after them. The host threads only wait for each other's posts (no
/// stream synchronisation), so GPU-side races in the ring's buffer reuse
/// would show in its results. Events are re-recorded only after every
/// other rank has enqueued its waits on them (the posts order it).
class DeviceRing final : public RingTransport {
public:
  /// Made on the rank's thread with \p dev current.
  DeviceRing(std::shared_ptr<DeviceRingShared> shared, int rank,
             CUstream stream)
      : s_(std::move(shared)), rank_(rank),
        size_(static_cast<int>(s_->slots.size())), stream_(stream) {
    const Driver &d = Driver::get();
    check(d.cuEventCreate(&ready_, CU_EVENT_DISABLE_TIMING));
    check(d.cuEventCreate(&copied_, CU_EVENT_DISABLE_TIMING));
    check(d.cuStreamCreate(&comm_, CU_STREAM_NON_BLOCKING));
  }
  ~DeviceRing() override {
    const Driver &d = Driver::get();
    d.cuStreamSynchronize(comm_);
    d.cuStreamDestroy(comm_);
    d.cuEventDestroy(ready_);
    d.cuEventDestroy(copied_);
  }
  DeviceRing(const DeviceRing &) = delete;
  DeviceRing &operator=(const DeviceRing &) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool overlapShifts(bool on) override { return overlap_ = on; }
  void startShift(const void *send, void *recv, size_t bytes) override {
    if (pending_)
      throw std::logic_error("startShift twice");
    pending_ = true;
    ++shift_;
    recv_ = recv, bytes_ = bytes;
    check(Driver::get().cuEventRecord(ready_, stream_));
    std::lock_guard<std::mutex> lock(s_->m);
    DeviceRingShared::Slot &out = s_->slots[size_t(rank_)];
    out.send = send, out.bytes = bytes, out.ready = ready_, out.posted = shift_;
    s_->cv.notify_all();
  }
  void waitShift() override {
    if (!pending_)
      throw std::logic_error("waitShift without startShift");
    pending_ = false;
    const Driver &d = Driver::get();
    int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
    std::unique_lock<std::mutex> lock(s_->m);
    DeviceRingShared::Slot &in = s_->slots[size_t(prev)];
    wait(lock, [&] { return in.posted >= shift_; });
    if (in.bytes != bytes_)
      fail(lock, "shift byte counts differ");
    CUstream on = overlap_ ? comm_ : stream_;
    check(d.cuStreamWaitEvent(on, in.ready, 0));
    if (overlap_)
      check(d.cuStreamWaitEvent(on, ready_, 0));
    if (bytes_ > 0)
      check(d.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(recv_),
                                reinterpret_cast<CUdeviceptr>(in.send), bytes_,
                                on));
    check(d.cuEventRecord(copied_, on));
    DeviceRingShared::Slot &mine = s_->slots[size_t(rank_)];
    mine.copied = copied_, mine.copiedPosted = shift_;
    s_->cv.notify_all();
    DeviceRingShared::Slot &out = s_->slots[size_t(next)];
    wait(lock, [&] { return out.copiedPosted >= shift_; });
    check(d.cuStreamWaitEvent(stream_, copied_, 0));
    check(d.cuStreamWaitEvent(stream_, out.copied, 0));
  }
  void abort(const std::string &why) noexcept override {
    std::lock_guard<std::mutex> lock(s_->m);
    if (!s_->aborted)
      s_->aborted = true, s_->why = why;
    s_->cv.notify_all();
  }

private:
  static void check(CUresult r) {
    if (r != CUDA_SUCCESS)
      throw std::runtime_error("CUDA error " + std::to_string(int(r)));
  }
  template <typename Pred>
  void wait(std::unique_lock<std::mutex> &lock, Pred pred) {
    s_->cv.wait(lock, [&] { return s_->aborted || pred(); });
    if (s_->aborted)
      throw std::runtime_error("ring aborted: " + s_->why);
  }
  [[noreturn]] void fail(std::unique_lock<std::mutex> &, const char *why) {
    s_->aborted = true, s_->why = why;
    s_->cv.notify_all();
    throw std::runtime_error(why);
  }
  std::shared_ptr<DeviceRingShared> s_;
  int rank_, size_;
  CUstream stream_, comm_ = nullptr;
  CUevent ready_ = nullptr, copied_ = nullptr;
  uint64_t shift_ = 0;
  void *recv_ = nullptr;
  size_t bytes_ = 0;
  bool pending_ = false, overlap_ = false;
};

/// Which stand-in transport runRankThreads gives each rank.
enum class RankTransport { Staged, Device };

/// Runs \p body(rank, transport, stream) for each of \p ranks ranks on its
/// own thread, stream (made current on \p dev) and transport (a
/// StagedDeviceRing, or a DeviceRing), then synchronises and destroys the
/// stream; rethrows the first rank's exception. No rank destroys its
/// transport before every rank is done: a DeviceRing's last waitShift
/// enqueues a wait on its successor's `copied` event, which must still
/// exist (seen under compute-sanitizer memcheck: error 709 on
/// cuStreamWaitEvent when a successor had already destroyed it).
inline void
runRankThreads(runtime::Device &dev, int ranks,
               const std::function<void(int, RingTransport &, CUstream)> &body,
               RankTransport kind = RankTransport::Staged) {
  runtime::InProcessRing host(ranks);
  auto shared = std::make_shared<DeviceRingShared>(ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  // Every rank arrives once, whether its body returned or threw.
  auto arriveAndWait = [&shared, ranks] {
    std::unique_lock<std::mutex> lock(shared->m);
    ++shared->finished;
    shared->cv.notify_all();
    shared->cv.wait(lock, [&] { return shared->finished >= ranks; });
  };
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      bool arrived = false;
      try {
        dev.makeCurrent();
        CUstream stream = nullptr;
        const Driver &d = Driver::get();
        if (d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) != CUDA_SUCCESS)
          throw std::runtime_error("cuStreamCreate failed");
        std::unique_ptr<RingTransport> t;
        if (kind == RankTransport::Device)
          t = std::make_unique<DeviceRing>(shared, r, stream);
        else
          t = std::make_unique<StagedDeviceRing>(host.rank(r), stream);
        try {
          body(r, *t, stream);
          d.cuStreamSynchronize(stream);
        } catch (...) {
          t->abort("a rank threw");
          d.cuStreamSynchronize(stream);
          arrived = true;
          arriveAndWait();
          t.reset();
          d.cuStreamDestroy(stream);
          throw;
        }
        arrived = true;
        arriveAndWait();
        t.reset();
        d.cuStreamDestroy(stream);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        if (!arrived)
          arriveAndWait();
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
