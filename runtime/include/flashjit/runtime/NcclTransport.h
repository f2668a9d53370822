//===- NcclTransport.h - Ring shifts over NCCL ------------------*- C++ -*-===//
//
// The ring transport of context parallelism on GPUs (issue 20): NCCL's
// ncclSend / ncclRecv inside one group per shift, on the caller's stream.
// libnccl is loaded with dlopen at first use, like libcuda (Driver.h), so
// flashjit loads and runs everything else on machines without NCCL. The
// library is $FLASHJIT_NCCL_LIBRARY when set, else libnccl.so.2 through
// the loader's search path (PyTorch's wheels ship it under
// site-packages/nvidia/nccl/lib). The few NCCL types used are declared
// here (stable ABI since NCCL 2.0; checked against nccl.h at build time
// where CMake finds it).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_NCCLTRANSPORT_H
#define FLASHJIT_RUNTIME_NCCLTRANSPORT_H

#include "flashjit/runtime/Ring.h"

#include <cuda.h>

#include <memory>
#include <string>

namespace flashjit::runtime {

class Device;

/// NCCL's ncclUniqueId: 128 opaque bytes that rank 0 makes (ncclGetUniqueId)
/// and every rank passes to its communicator (sent by the host application
/// through its own channel: MPI, a file, torch.distributed's store).
struct NcclUniqueId {
  char internal[128];
};

/// The NCCL library, loaded once per process.
class Nccl {
public:
  /// Whether the process's library (get()) loads and has every entry point
  /// flashjit uses; the reason (dlopen's message, the missing symbol) in
  /// \p whyNot otherwise.
  static bool available(std::string *whyNot = nullptr);
  /// The process's library: $FLASHJIT_NCCL_LIBRARY, else libnccl.so.2,
  /// loaded at the first call. Throws DriverError naming the path and
  /// dlopen's message (and FLASHJIT_NCCL_LIBRARY) when it cannot be loaded.
  static const Nccl &get();
  /// Loads the library at \p path (a file or a name the loader searches
  /// for). Throws DriverError naming \p path and dlopen's message, or the
  /// missing entry point.
  static std::unique_ptr<Nccl> load(const std::string &path);
  ~Nccl();
  Nccl(const Nccl &) = delete;
  Nccl &operator=(const Nccl &) = delete;

  /// ncclGetVersion's code (e.g. 22809 for 2.28.9).
  int version() const;
  /// A fresh unique id (ncclGetUniqueId). Throws DriverError.
  NcclUniqueId uniqueId() const;
  /// The path or name dlopen loaded.
  const std::string &path() const { return path_; }

  /// The entry points (NcclTransport.cpp).
  struct Fns;
  const Fns &fns() const { return *fns_; }

private:
  Nccl();
  std::string path_;
  void *handle_ = nullptr;
  std::unique_ptr<Fns> fns_;
};

/// An owned NCCL communicator (ncclCommInitRank) of \p ranks ranks, this
/// process being \p rank, on \p device (made current first). Every rank
/// creates its communicator with the same id at the same time (the call
/// blocks until all have joined). Throws UserError for a rank outside
/// [0, ranks) and DriverError for NCCL's errors (with ncclGetErrorString).
class NcclCommunicator {
public:
  NcclCommunicator(const NcclUniqueId &id, int ranks, int rank, Device &device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;
  /// The ncclComm_t, for NcclTransport or the application's own calls.
  void *handle() const { return comm_; }

private:
  void *comm_ = nullptr;
};

/// A RingTransport over an NCCL communicator the caller owns (its own, or
/// an NcclCommunicator's handle()): each shift is one ncclGroupStart /
/// ncclSend(next) / ncclRecv(prev) / ncclGroupEnd of bytes (ncclUint8).
/// Buffers are device memory of the communicator's device. A ring of one
/// rank sends to itself.
///
/// Two orderings (overlapShifts). Serial (the default): the group is
/// enqueued on \p stream, so it runs after the work enqueued there before
/// startShift and before the work enqueued after it, and waitShift returns
/// at once. Overlapped (PyTorch's isend / irecv + wait): the transport's
/// own communication stream (non-blocking, made on first use in the
/// current context) waits for an event recorded on \p stream at
/// startShift (the send buffer is written and the receive buffer no longer
/// read by the work enqueued before it), runs the group, and records a
/// second event that waitShift makes \p stream wait for; the caller's
/// kernels enqueued between the two calls run concurrently with the
/// shift. Either way the host never waits: synchronise \p stream before
/// reading received bytes on the host.
class NcclTransport final : public RingTransport {
public:
  /// Reads the communicator's rank and size (ncclCommUserRank /
  /// ncclCommCount). Throws DriverError when NCCL is unavailable or fails,
  /// UserError for a null communicator.
  NcclTransport(void *comm, CUstream stream);
  /// Destroys the communication stream and events, if made (the stream is
  /// synchronised first).
  ~NcclTransport() override;
  NcclTransport(const NcclTransport &) = delete;
  NcclTransport &operator=(const NcclTransport &) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// Enqueues the shift as the current ordering says. Throws DriverError
  /// with NCCL's or CUDA's message, UserError for null buffers of non-zero
  /// size or a shift already begun.
  void startShift(const void *send, void *recv, size_t bytes) override;
  /// Overlapped: makes the caller's stream wait for the shift. Throws
  /// UserError without a shift begun, DriverError for CUDA's errors.
  void waitShift() override;
  /// Switches between the serial and the overlapped ordering (class
  /// comment) for the shifts begun from now on; returns \p on. Throws
  /// UserError while a shift is pending, DriverError when the stream or
  /// events cannot be made.
  bool overlapShifts(bool on) override;

private:
  void *comm_;
  CUstream stream_;
  CUstream commStream_ = nullptr; // overlapped shifts run here
  CUevent ready_ = nullptr;       // recorded on stream_ at startShift
  CUevent done_ = nullptr;        // recorded on commStream_ after the group
  int rank_ = 0, size_ = 1;
  bool pending_ = false;
  bool overlap_ = false;
};

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_NCCLTRANSPORT_H
