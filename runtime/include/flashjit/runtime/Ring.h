//===- Ring.h - Context-parallel (ring) attention ---------------*- C++ -*-===//
//
// Ring attention (issue 20; Liu et al. 2023, "Ring Attention with Blockwise
// Transformers"; ring-flash-attention's zigzag schedule): each of R ranks
// holds 1/R of a sequence's queries, keys and values (ContextParallel.h says
// how it is cut). In R steps every rank computes its queries against the
// key/value slice it holds while passing that slice to the next rank
// (rank + 1 mod R) and receiving the previous rank's; the partial (O, LSE)
// states merge exactly through their LSEs. The mask and score modifier see
// global token indices (contextParallelSpec), and a (query chunk, key
// chunk) pair whose mask is empty everywhere is skipped without computing:
// with a causal mask, half of the pairs.
//
// The transport is an interface: InProcessRing runs ranks as threads of one
// process (the CPU backend's tests), NcclTransport (NcclTransport.h) moves
// device buffers with ncclSend/ncclRecv.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_RING_H
#define FLASHJIT_RUNTIME_RING_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/ContextParallel.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/DataGradients.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flashjit::runtime {

class CpuAttentionKernel;
class CpuBackwardKernel;

/// One rank's end of a ring: each shift sends a buffer to the next rank
/// ((rank + 1) mod size) and receives one from the previous rank. Every
/// rank of the ring makes the same sequence of shifts with the same byte
/// counts. Implementations say whose memory the buffers are (host memory
/// for InProcessRing, device memory for NcclTransport).
class RingTransport {
public:
  virtual ~RingTransport() = default;
  /// This rank, in [0, size()).
  virtual int rank() const = 0;
  /// The number of ranks.
  virtual int size() const = 0;
  /// Begins a shift of \p bytes bytes: \p send goes to the next rank,
  /// \p recv receives the previous rank's. \p send must stay unchanged and
  /// \p recv unread until waitShift() returns. One shift at a time.
  virtual void startShift(const void *send, void *recv, size_t bytes) = 0;
  /// Completes the shift begun last (for NcclTransport: orders it on the
  /// stream; the host does not wait). Throws when a rank aborted the ring.
  virtual void waitShift() = 0;
  /// Called by a rank that fails between shifts, so that the others stop
  /// waiting for it (InProcessRing: their waitShift throws UserError naming
  /// the rank and \p why). No-op by default.
  virtual void abort(const std::string &why) noexcept { (void)why; }
  /// Asks a transport whose shifts are ordered on a GPU stream
  /// (NcclTransport) to run the shifts begun from now on concurrently with
  /// the caller's stream (\p on: on a communication stream of its own,
  /// after the work enqueued on the caller's stream before startShift, with
  /// waitShift making the caller's stream wait for the shift) or on the
  /// caller's stream itself, in order with its kernels (off). Returns
  /// whether shifts now overlap the caller's stream. Transports that move
  /// host memory (InProcessRing) keep their behaviour and return false,
  /// the default. Throws DriverError when the stream or events cannot be
  /// made.
  virtual bool overlapShifts(bool on) {
    (void)on;
    return false;
  }
};

/// An in-process ring of \p size ranks, each used by one thread (the
/// stand-in for NCCL in tests and for CPU context parallelism in one
/// process). Host memory; a shift copies each rank's buffer into its
/// successor's receive buffer. Thread-safe as documented by RingTransport.
class InProcessRing {
public:
  /// Throws UserError unless \p size is in [1, kMaxRingRanks].
  explicit InProcessRing(int size);
  ~InProcessRing();
  InProcessRing(const InProcessRing &) = delete;
  InProcessRing &operator=(const InProcessRing &) = delete;

  /// The transport of rank \p r (one thread uses it). Throws UserError for
  /// a rank outside [0, size).
  RingTransport &rank(int r);
  int size() const { return static_cast<int>(ranks_.size()); }

private:
  struct Shared;
  class Rank;
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

/// How the forward moves K/V (the backward always runs the ring).
/// Ring: R steps, each computing against the visiting chunk while it moves
/// on, partial states merged through their LSEs (memory: two K/V slices).
/// AllGather: R - 1 shifts gather every rank's K/V in global order first,
/// then one kernel call per local query chunk against the whole key
/// sequence (no merges; memory: R K/V slices; communication not
/// overlapped). Auto: AllGather when the gathered K/V of all ranks takes no
/// more bytes per token than this rank's Q and O (GQA with few K/V heads,
/// or a short ring), else Ring; a rule of thumb, not yet measured on several
/// GPUs.
enum class RingSchedule : uint8_t { Auto, Ring, AllGather };

/// Options of a ring attention call.
struct RingOptions {
  /// How the sequence is cut over the ranks (ContextParallel.h).
  Sharding sharding = Sharding::Contiguous;
  /// Threads each rank's kernel calls use (0: all cores; ranks of an
  /// InProcessRing are threads already, so 1 is the default).
  int numThreads = 1;
  /// The forward's schedule; every rank must pick the same (Auto does: its
  /// inputs are equal on every rank).
  RingSchedule schedule = RingSchedule::Auto;
  /// GPU rings: whether the K/V shifts run concurrently with the kernels
  /// (RingTransport::overlapShifts(true): step s computes on the caller's
  /// stream while step s + 1's slice arrives) or on the caller's stream one
  /// after the other with them (false: the serial path, kept for timing).
  /// Results are bit-identical either way (same kernels, same merge order).
  /// CPU rings ignore it.
  bool overlap = true;
};

/// What a rank did in one ring call.
struct RingStats {
  /// (query chunk, key chunk) pairs computed and skipped as empty.
  int pairsComputed = 0;
  int pairsSkipped = 0;
  /// Ring shifts made (size - 1).
  int shifts = 0;
  /// Whether the forward ran the all-gather schedule.
  bool allGather = false;
  /// Whether the shifts overlapped compute (the transport's answer to
  /// RingTransport::overlapShifts; always false on the CPU).
  bool overlapped = false;
};

/// One rank's part of ring attention on the CPU backend. \p spec is the
/// attention the caller wants over the whole sequence; \p kernel must be
/// compiled (dense, CompileOptions::varlen off) from
/// contextParallelSpec(spec) (fp32 partial states). q
/// [B, Hq, Sq / R, Dqk], k [B, Hkv, Sk / R, Dqk], v [B, Hkv, Sk / R, Dv],
/// o [B, Hq, Sq / R, Dv] and lse [B, Hq, Sq / R] (fp32; required when
/// spec.returnLse, else it may be null) are this rank's parts of the global
/// tensors, cut as options.sharding says (shardSequence), host memory, any
/// strides. The mask and score modifier see global indices (q_idx in
/// [0, Sq), seqlen_q = Sq, ...); buffers in \p args are the global ones
/// (a document mask's doc_id has Sq entries) and, with a sink
/// (spec.sink), args.sink joins each row once, at the final merge. Every
/// rank of \p transport calls this with the same spec and equally shaped
/// tensors. Throws UserError naming the field and value for bad tensors or
/// arguments, a kernel not compiled from contextParallelSpec(spec), a
/// local seqlen the sharding cannot cut (zigzag: odd), and tensors whose
/// shape differs from another rank's ("rank 1 received the K/V of rank 0
/// with a different layout: ..."); a rank that throws aborts the ring.
RingStats ringAttentionCpu(const AttentionSpec &spec,
                           const CpuAttentionKernel &kernel,
                           RingTransport &transport, const TensorRef &q,
                           const TensorRef &k, const TensorRef &v,
                           const TensorRef &o, const TensorRef *lse,
                           const Arguments &args = {},
                           const RingOptions &options = {});

/// The same on a packed varlen batch: \p kernel compiled with
/// CompileOptions::varlen from contextParallelSpec(spec); q
/// [total_q / R, Hq, Dqk], k, v [total_k / R, Hkv, D], o
/// [total_q / R, Hq, Dv], lse [Hq, total_q / R] are this rank's parts
/// (shardVarlen) and \p cuSeqlensQ / \p cuSeqlensK the local cu_seqlens
/// (shardCuSeqlens of the global ones: every sequence's length / R, the
/// same on every rank). Masks see batch = b, q_idx / kv_idx from sequence
/// b's first token of the whole sequence and its global lengths. Throws as
/// ringAttentionCpu, and for local sequence lengths the sharding cannot cut.
RingStats ringAttentionCpuVarlen(
    const AttentionSpec &spec, const CpuAttentionKernel &kernel,
    RingTransport &transport, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &o, const TensorRef *lse,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args = {}, const RingOptions &options = {});

/// One rank's part of the ring backward on the CPU (ring-flash-attention's
/// schedule): K/V travel around the ring as in the forward and, with them,
/// fp32 accumulators of their dK/dV; at each step the rank adds its
/// queries' contributions (dQ to its own accumulator, dK/dV to the
/// travelling ones) from the backward kernel run with the GLOBAL O and LSE
/// (P = exp(s' - LSE) is then the whole sequence's probability, D =
/// rowsum(dO * O) its own), and one last shift brings every dK/dV home.
/// Empty chunk pairs are skipped as in the forward. Deterministic: a fixed
/// order of kernel calls and additions, so the gradients are bit-identical
/// run to run and independent of thread counts.
///
/// \p kernel is the CPU backward kernel of contextParallelSpec(spec)
/// (compileCpuBackward / loadOrCompileCpuBackward, dense). q, k, v as the
/// forward got them, o and lse as ringAttentionCpu wrote them (the rank's
/// part of the global O and LSE), dO like o; writes dq like q, dk like k,
/// dv like v (the rank's parts, overwritten), accumulating in fp32: each
/// chunk pair's partial gradients are rounded to the inputs' dtype once
/// before they are added. Returns the rank's share of the f32 buffer and
/// parameter gradients and of d sink (sum them over the ranks for the
/// totals). \p stats, where given, receives the pairs computed/skipped and
/// the shifts made (2R - 1, or 0 for one rank). Throws UserError as
/// ringAttentionCpu and for bad gradient tensors (checkBackwardTensors).
DataGradients ringAttentionBackwardCpu(
    const AttentionSpec &spec, const CpuBackwardKernel &kernel,
    RingTransport &transport, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &o, const TensorRef &lse,
    const TensorRef &dO, const TensorRef &dq, const TensorRef &dk,
    const TensorRef &dv, const Arguments &args = {},
    const RingOptions &options = {}, RingStats *stats = nullptr);

/// The backward ring on a packed varlen batch: \p kernel compiled with
/// CompileOptions::varlen; the layouts of ringAttentionCpuVarlen (q, dq
/// [total_q / R, Hq, Dqk], k, v, dk, dv [total_k / R, Hkv, D], o, dO
/// [total_q / R, Hq, Dv], lse [Hq, total_q / R]) with the local
/// cu_seqlens. Throws as ringAttentionBackwardCpu, and for bad cu_seqlens
/// (checkVarlenBackwardTensors) or local lengths the sharding cannot cut.
DataGradients ringAttentionBackwardCpuVarlen(
    const AttentionSpec &spec, const CpuBackwardKernel &kernel,
    RingTransport &transport, const TensorRef &q, const TensorRef &k,
    const TensorRef &v, const TensorRef &o, const TensorRef &lse,
    const TensorRef &dO, const TensorRef &dq, const TensorRef &dk,
    const TensorRef &dv, std::span<const int32_t> cuSeqlensQ,
    std::span<const int32_t> cuSeqlensK, const Arguments &args = {},
    const RingOptions &options = {}, RingStats *stats = nullptr);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_RING_H
