//===- InProcessRing.cpp - Ranks as threads of one process ----------------===//
//
// The in-process RingTransport (Ring.h): a shared slot per rank holds the
// buffer it sends in the current shift; a rank's waitShift copies its
// predecessor's buffer, marks it consumed and waits until its successor
// has consumed its own, so a sender's buffer stays valid as long as it is
// read. One mutex and condition variable for the ring (tests and CPU
// context parallelism in one process: simplicity over contention). A rank
// that aborts wakes every waiter, whose wait then throws.
//
//===----------------------------------------------------------------------===//
#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Ring.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <mutex>

namespace flashjit::runtime {

struct InProcessRing::Shared {
  struct Slot {
    const void *data = nullptr;
    size_t bytes = 0;
    uint64_t posted = 0;   // the shift number whose send is posted
    uint64_t consumed = 0; // the shift number the successor has copied
  };
  std::mutex m;
  std::condition_variable cv;
  std::vector<Slot> slots;
  bool aborted = false;
  int abortedBy = -1;
  std::string why;
};

class InProcessRing::Rank final : public RingTransport {
public:
  Rank(std::shared_ptr<Shared> shared, int rank, int size)
      : s_(std::move(shared)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void startShift(const void *send, void *recv, size_t bytes) override {
    if (pending_)
      throw UserError(fmt::format("rank {}: startShift called twice without "
                                  "waitShift",
                                  rank_));
    std::lock_guard<std::mutex> lock(s_->m);
    ++shift_;
    s_->slots[rank_] = {send, bytes, shift_, s_->slots[rank_].consumed};
    recv_ = recv;
    bytes_ = bytes;
    pending_ = true;
    s_->cv.notify_all();
  }

  void waitShift() override {
    if (!pending_)
      throw UserError(
          fmt::format("rank {}: waitShift without startShift", rank_));
    pending_ = false;
    int prev = (rank_ + size_ - 1) % size_;
    std::unique_lock<std::mutex> lock(s_->m);
    Shared::Slot &in = s_->slots[prev];
    s_->cv.wait(lock, [&] { return s_->aborted || in.posted >= shift_; });
    throwIfAborted();
    if (in.bytes != bytes_) {
      std::string why = fmt::format(
          "rank {} expects {} bytes in shift {} but rank {} sends {}", rank_,
          bytes_, shift_, prev, in.bytes);
      abortLocked(why);
      throw UserError(why);
    }
    std::memcpy(recv_, in.data, bytes_);
    in.consumed = shift_;
    s_->cv.notify_all();
    Shared::Slot &out = s_->slots[rank_];
    s_->cv.wait(lock, [&] { return s_->aborted || out.consumed >= shift_; });
    throwIfAborted();
  }

  void abort(const std::string &why) noexcept override {
    std::lock_guard<std::mutex> lock(s_->m);
    abortLocked(why);
  }

private:
  void abortLocked(const std::string &why) noexcept {
    if (!s_->aborted) {
      s_->aborted = true;
      s_->abortedBy = rank_;
      s_->why = why;
    }
    s_->cv.notify_all();
  }
  void throwIfAborted() const {
    if (s_->aborted)
      throw UserError(fmt::format("ring aborted: rank {} failed: {}",
                                  s_->abortedBy, s_->why));
  }

  std::shared_ptr<Shared> s_;
  int rank_, size_;
  uint64_t shift_ = 0;
  void *recv_ = nullptr;
  size_t bytes_ = 0;
  bool pending_ = false;
};

InProcessRing::InProcessRing(int size) : shared_(std::make_shared<Shared>()) {
  checkRingRank(0, size);
  shared_->slots.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    ranks_.push_back(std::make_unique<Rank>(shared_, r, size));
}

InProcessRing::~InProcessRing() = default;

RingTransport &InProcessRing::rank(int r) {
  checkRingRank(r, size());
  return *ranks_[static_cast<size_t>(r)];
}

} // namespace flashjit::runtime
