//===- NcclTransport.cpp - Ring shifts over a dlopen'ed NCCL --------------===//
//
// libnccl is never linked: its entry points are looked up with dlsym, so the
// runtime loads without it. The declarations below follow nccl.h (NCCL
// 2.x): ncclResult_t and ncclDataType_t are C enums (int), ncclComm_t an
// opaque pointer, ncclUniqueId 128 bytes passed by value, cudaStream_t the
// driver's CUstream. Where CMake found nccl.h (FLASHJIT_HAVE_NCCL_H), the
// constants and sizes are checked against it at compile time.
//
//===----------------------------------------------------------------------===//
#include "flashjit/runtime/NcclTransport.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/runtime/Device.h"
#include "flashjit/runtime/Driver.h"

#include "Check.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#ifdef FLASHJIT_HAVE_NCCL_H
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == sizeof(flashjit::runtime::NcclUniqueId));
static_assert(ncclSuccess == 0 && ncclUint8 == 1);
static_assert(sizeof(ncclResult_t) == sizeof(int) &&
              sizeof(ncclDataType_t) == sizeof(int));
#endif

namespace flashjit::runtime {

namespace {
constexpr int kNcclSuccess = 0;
constexpr int kNcclUint8 = 1;
} // namespace

struct Nccl::Fns {
  using Comm = void *;
  int (*getVersion)(int *) = nullptr;
  int (*getUniqueId)(NcclUniqueId *) = nullptr;
  int (*commInitRank)(Comm *, int, NcclUniqueId, int) = nullptr;
  int (*commDestroy)(Comm) = nullptr;
  int (*commCount)(Comm, int *) = nullptr;
  int (*commUserRank)(Comm, int *) = nullptr;
  int (*send)(const void *, size_t, int, int, Comm, CUstream) = nullptr;
  int (*recv)(void *, size_t, int, int, Comm, CUstream) = nullptr;
  int (*groupStart)() = nullptr;
  int (*groupEnd)() = nullptr;
  const char *(*getErrorString)(int) = nullptr;
};

Nccl::Nccl() : fns_(std::make_unique<Fns>()) {}

Nccl::~Nccl() {
  if (handle_)
    dlclose(handle_);
}

std::unique_ptr<Nccl> Nccl::load(const std::string &path) {
  std::unique_ptr<Nccl> n(new Nccl());
  n->path_ = path;
  n->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!n->handle_) {
    const char *err = dlerror();
    throw DriverError(fmt::format(
        "NCCL not available: dlopen(\"{}\") failed: {}. Ring attention over "
        "GPUs needs libnccl.so.2; set FLASHJIT_NCCL_LIBRARY to its path "
        "(e.g. PyTorch's site-packages/nvidia/nccl/lib/libnccl.so.2)",
        path, err ? err : "unknown error"));
  }
  auto sym = [&](auto &fn, const char *name) {
    void *p = dlsym(n->handle_, name);
    if (!p)
      throw DriverError(fmt::format("NCCL library \"{}\" has no symbol {} "
                                    "(NCCL 2.7 or newer is needed)",
                                    path, name));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  Fns &f = *n->fns_;
  sym(f.getVersion, "ncclGetVersion");
  sym(f.getUniqueId, "ncclGetUniqueId");
  sym(f.commInitRank, "ncclCommInitRank");
  sym(f.commDestroy, "ncclCommDestroy");
  sym(f.commCount, "ncclCommCount");
  sym(f.commUserRank, "ncclCommUserRank");
  sym(f.send, "ncclSend");
  sym(f.recv, "ncclRecv");
  sym(f.groupStart, "ncclGroupStart");
  sym(f.groupEnd, "ncclGroupEnd");
  sym(f.getErrorString, "ncclGetErrorString");
  return n;
}

namespace {
struct GlobalNccl {
  std::unique_ptr<Nccl> nccl;
  std::string error;
};

GlobalNccl &globalNccl() {
  static GlobalNccl g = [] {
    GlobalNccl out;
    const char *env = std::getenv("FLASHJIT_NCCL_LIBRARY");
    try {
      out.nccl = Nccl::load(env && *env ? env : "libnccl.so.2");
    } catch (const Error &e) {
      out.error = e.what();
    }
    return out;
  }();
  return g;
}

void check(const Nccl &n, int result, const char *call) {
  if (result != kNcclSuccess)
    throw DriverError(fmt::format("{} failed: NCCL error {} ({})", call, result,
                                  n.fns().getErrorString(result)));
}
} // namespace

bool Nccl::available(std::string *whyNot) {
  GlobalNccl &g = globalNccl();
  if (!g.nccl && whyNot)
    *whyNot = g.error;
  return g.nccl != nullptr;
}

const Nccl &Nccl::get() {
  GlobalNccl &g = globalNccl();
  if (!g.nccl)
    throw DriverError(g.error);
  return *g.nccl;
}

int Nccl::version() const {
  int v = 0;
  check(*this, fns_->getVersion(&v), "ncclGetVersion");
  return v;
}

NcclUniqueId Nccl::uniqueId() const {
  NcclUniqueId id{};
  check(*this, fns_->getUniqueId(&id), "ncclGetUniqueId");
  return id;
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId &id, int ranks, int rank,
                                   Device &device) {
  checkRingRank(rank, ranks);
  const Nccl &n = Nccl::get();
  device.makeCurrent();
  check(n, n.fns().commInitRank(&comm_, ranks, id, rank), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_)
    (void)Nccl::get().fns().commDestroy(comm_);
}

NcclTransport::NcclTransport(void *comm, CUstream stream)
    : comm_(comm), stream_(stream) {
  if (!comm)
    throw UserError("NcclTransport: the communicator is null");
  const Nccl &n = Nccl::get();
  check(n, n.fns().commUserRank(comm, &rank_), "ncclCommUserRank");
  check(n, n.fns().commCount(comm, &size_), "ncclCommCount");
}

NcclTransport::~NcclTransport() {
  if (!commStream_)
    return;
  const Driver &d = Driver::get();
  (void)d.cuStreamSynchronize(commStream_);
  (void)d.cuEventDestroy(ready_);
  (void)d.cuEventDestroy(done_);
  (void)d.cuStreamDestroy(commStream_);
}

bool NcclTransport::overlapShifts(bool on) {
  if (pending_)
    throw UserError(fmt::format("rank {}: overlapShifts called while a shift "
                                "is pending",
                                rank_));
  if (on && !commStream_) {
    const Driver &d = Driver::get();
    FLASHJIT_CHECK(d.cuEventCreate(&ready_, CU_EVENT_DISABLE_TIMING));
    FLASHJIT_CHECK(d.cuEventCreate(&done_, CU_EVENT_DISABLE_TIMING));
    FLASHJIT_CHECK(d.cuStreamCreate(&commStream_, CU_STREAM_NON_BLOCKING));
  }
  overlap_ = on;
  return on;
}

void NcclTransport::startShift(const void *send, void *recv, size_t bytes) {
  if (pending_)
    throw UserError(fmt::format("rank {}: startShift called twice without "
                                "waitShift",
                                rank_));
  if (bytes > 0 && (!send || !recv))
    throw UserError(fmt::format("rank {}: a shift of {} bytes with a null "
                                "{} buffer",
                                rank_, bytes, send ? "receive" : "send"));
  CUstream on = stream_;
  if (overlap_) {
    // The send buffer is complete and the receive buffer free once the
    // caller's stream reaches this point.
    const Driver &d = Driver::get();
    FLASHJIT_CHECK(d.cuEventRecord(ready_, stream_));
    FLASHJIT_CHECK(d.cuStreamWaitEvent(commStream_, ready_, 0));
    on = commStream_;
  }
  const Nccl &n = Nccl::get();
  const Nccl::Fns &f = n.fns();
  int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  check(n, f.groupStart(), "ncclGroupStart");
  int r1 = f.send(send, bytes, kNcclUint8, next, comm_, on);
  int r2 = f.recv(recv, bytes, kNcclUint8, prev, comm_, on);
  int r3 = f.groupEnd(); // always close the group, even after an error
  check(n, r1, "ncclSend");
  check(n, r2, "ncclRecv");
  check(n, r3, "ncclGroupEnd");
  if (overlap_)
    FLASHJIT_CHECK(Driver::get().cuEventRecord(done_, commStream_));
  pending_ = true;
}

void NcclTransport::waitShift() {
  if (!pending_)
    throw UserError(
        fmt::format("rank {}: waitShift without startShift", rank_));
  pending_ = false;
  if (overlap_)
    FLASHJIT_CHECK(Driver::get().cuStreamWaitEvent(stream_, done_, 0));
}

} // namespace flashjit::runtime
