//===- RingGpu.h - Context-parallel (ring) attention on GPUs ----*- C++ -*-===//
//
// The GPU ring forward of issue 20 (Ring.h describes the schedule): each
// rank runs the GPU forward kernel of contextParallelSpec(spec, dtypeO) on
// its query chunks against each visiting key/value chunk pair that is not
// empty, merges the partial (O, LSE) states exactly on the device
// (GpuPagedOps::mergeStates into fp32 accumulators), and passes the K/V
// slice on through a RingTransport whose buffers are device memory
// (NcclTransport). With RingOptions::overlap (the default) the shift that
// brings step s + 1's slice runs on the transport's communication stream
// while step s computes on the caller's stream (two K/V buffers, events
// ordering the shift after the work that wrote its send buffer and last
// read its receive buffer, and the next step's kernels after the shift);
// without it every shift is ordered on the caller's stream, one after the
// other with the kernels (the serial path, kept for timing).
// ringAttentionGpuVarlen does the same on packed varlen batches, and both
// run the all-gather schedule where RingOptions::schedule picks it (Auto:
// the bytes-per-token rule of Ring.h's RingSchedule, as on the CPU).
//
// The GPU ring backward (ringAttentionBackwardGpu) follows the CPU
// backward ring's schedule and arithmetic (ringAttentionBackwardCpu):
// K/V travel as in the forward, fp32 dK/dV accumulators travel after each
// step's additions and come home with one last shift, and every chunk
// pair's gradients come from the GPU backward kernel run with the GLOBAL
// O and LSE.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_RINGGPU_H
#define FLASHJIT_RUNTIME_RINGGPU_H

#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Ring.h"

#include <cuda.h>

#include <cstdint>
#include <span>

namespace flashjit::runtime {

class Device;
class GpuPagedOps;

/// One rank's part of ring attention on a GPU (dense batches; the forward
/// only). \p spec is the attention the caller wants over the whole
/// sequence; \p kernel must be the dense GPU forward kernel (not varlen, not
/// block-sparse) of contextParallelSpec(spec, spec.dtypeO): its partial O is
/// in the output's 16-bit dtype, rounded once per chunk pair before the
/// fp32 merge. \p ops merges the states (GpuPagedOps of \p device).
///
/// q [B, Hq, Sq / R, Dqk], k [B, Hkv, Sk / R, Dqk], v [B, Hkv, Sk / R, Dv],
/// o [B, Hq, Sq / R, Dv] and lse [B, Hq, Sq / R] (fp32; required when
/// spec.returnLse, else it may be null) are this rank's parts of the global
/// tensors, cut as options.sharding says (shardSequence), device memory of
/// \p device with the strides GpuAttentionKernel::run accepts. The mask and
/// score modifier see global indices; buffers in \p args are the global
/// ones in device memory (a document mask's doc_id has Sq entries) and a
/// sink (spec.sink, args.sink: Hq fp32 logits in device memory) joins each
/// row once, at the final merge. Chunk pairs are skipped when the mask is
/// empty on its indices alone (classifyChunkPair without buffer ranges:
/// causal and window masks skip pairs, a document mask's buffer reads do
/// not; the kernel skips their tiles). options.schedule picks the ring or
/// the all-gather schedule as on the CPU (Ring.h, RingSchedule; Auto by its
/// bytes-per-token rule): all-gather shifts the K/V slices R - 1 times,
/// copying each to its global place in full K/V tensors (R slices of
/// stream-ordered memory), then runs one kernel call per local query chunk
/// against the whole key sequence (chunk pairs counted in RingStats are
/// then those calls). options.numThreads is ignored.
///
/// \p transport moves device memory and must order its shifts after
/// \p stream's work (an NcclTransport made with \p stream): each rank
/// enqueues its kernels and merges on \p stream and returns without
/// synchronising it. With options.overlap (and R > 1) the call asks
/// transport.overlapShifts(true), which for an NcclTransport puts the
/// shifts on its communication stream (it stays in that ordering after the
/// call) and returns whether they overlap (RingStats::overlapped): at step
/// s the shift of the slice held (buffer A) into buffer B starts after the
/// work enqueued on \p stream before it (step s - 1's kernels, the last to
/// read B; the packing of A at step 0), step s's kernels read A on
/// \p stream while it runs, and waitShift orders step s + 1's kernels
/// (reading B) and step s + 1's shift (receiving into A) after it. Results
/// are bit-identical with and without overlap. Host-staged transports
/// (InProcessRing) answer false and run as before. Every rank calls this with
/// the same spec and equally shaped tensors (unlike the CPU ring, a rank with
/// other shapes is not detected: the buffers carry no header). Temporary memory
/// (two K/V slices, one partial and fp32 accumulators per local query chunk) is
/// stream-ordered (StreamBuffer) on \p stream.
///
/// Throws UserError naming the field and value for bad tensors or
/// arguments, a kernel that is varlen, block-sparse or not compiled from
/// contextParallelSpec(spec, spec.dtypeO), a local seqlen the sharding
/// cannot cut (zigzag: odd), or a head dim whose rows are not a multiple of
/// 16 bytes (the packed K/V chunks need aligned rows: 16-bit head dims
/// multiples of 8); DriverError for CUDA or NCCL failures. A rank that
/// throws calls transport.abort().
RingStats
ringAttentionGpu(const AttentionSpec &spec, const GpuAttentionKernel &kernel,
                 const GpuPagedOps &ops, Device &device,
                 RingTransport &transport, const TensorRef &q,
                 const TensorRef &k, const TensorRef &v, const TensorRef &o,
                 const TensorRef *lse, const Arguments &args = {},
                 const RingOptions &options = {}, CUstream stream = nullptr);

/// The GPU ring forward on a packed varlen batch (ringAttentionCpuVarlen's
/// layout and semantics on device memory): \p kernel must be the varlen
/// GPU forward kernel (GpuCompileOptions::varlen, not block-sparse) of
/// contextParallelSpec(spec, spec.dtypeO); q [total_q / R, Hq, Dqk], k, v
/// [total_k / R, Hkv, D], o [total_q / R, Hq, Dv] and lse [Hq, total_q / R]
/// (fp32) are this rank's parts (shardVarlen), device memory, and
/// \p cuSeqlensQ / \p cuSeqlensK the local cu_seqlens in host memory
/// (shardCuSeqlens of the global ones, the same on every rank). Masks see
/// batch = b and q_idx / kv_idx from sequence b's first token of the whole
/// sequence with its global lengths; chunk pairs empty for every sequence
/// are skipped, and sequences of length 0 are allowed. Each query chunk
/// packs every sequence's part of it (zigzag: a stream-ordered copy), and
/// the K/V chunks travel packed likewise. Schedules, overlap, sink and
/// transport as ringAttentionGpu, except that the call synchronises
/// \p stream before it returns (the chunk cu_seqlens it uploads are device
/// buffers of the call). Throws as ringAttentionGpu, for a kernel that is
/// not varlen, for bad cu_seqlens (checkVarlenTensors) and for local
/// sequence lengths the sharding cannot cut (naming the sequence).
RingStats ringAttentionGpuVarlen(
    const AttentionSpec &spec, const GpuAttentionKernel &kernel,
    const GpuPagedOps &ops, Device &device, RingTransport &transport,
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef *lse,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args = {}, const RingOptions &options = {},
    CUstream stream = nullptr);

/// One rank's part of the ring backward on a GPU (dense batches): the
/// gradients of ringAttentionGpu's output. \p kernel must be the dense GPU
/// backward kernel (GpuCompileOptions::kind = Backward, not varlen, not
/// block-sparse) of contextParallelSpec(spec, spec.dtypeO), the spec the
/// forward ring's kernel is compiled from; \p ops (GpuPagedOps of
/// \p device) adds the partial gradients.
///
/// q, k, v, o, lse, dO, dq, dk and dv are this rank's parts of the global
/// tensors (shardSequence under options.sharding; shapes and dtypes of
/// GpuAttentionBackwardKernel::run, device memory of \p device): o and lse
/// are what ringAttentionGpu wrote (the global O and LSE), dO the upstream
/// gradient of o. Schedule: R steps; at step s the rank holds rank
/// (r - s) mod R's K/V chunks (sent on while the step computes) and their
/// fp32 dK/dV accumulators; for each (local query chunk, visiting key
/// chunk) pair that classifyChunkPair (without buffer ranges, as the
/// forward) does not find empty it runs \p kernel with the global LSE
/// (P = exp(s' - LSE) is the whole sequence's probability, D = rowsum(dO *
/// O) its own) into 16-bit partials and adds them (GpuPagedOps::accumulate:
/// one fp32 addition each) to its dQ accumulator and to the visiting
/// dK/dV; then the dK/dV move on (2R - 1 shifts in all, none for one rank)
/// and, home again, are written to dk and dv with one rounding, as dQ to
/// dq. The kernel calls and additions come in one fixed order on
/// \p stream, so with \p backward.deterministic (whose kernel dQ is
/// bit-identical run to run) the gradients are bit-identical run to run.
/// The mask and score modifier see global indices; buffers in \p args are
/// the global ones in device memory. options.overlap as in the forward:
/// the K/V shift overlaps the step's kernels; the dK/dV shift, which needs
/// the step's additions and which the next step's additions need, runs on
/// the transport's stream without overlapping compute.
///
/// Returns the rank's share of the f32 buffer and parameter gradients
/// (summed over its chunk pairs in order; sum them over the ranks for the
/// totals). \p stats, where given, receives the pairs computed and skipped
/// and the shifts made. Asynchronous on \p stream as ringAttentionGpu
/// (the transport's shifts and a kernel call with data gradients or
/// unproven buffer reads synchronise it); temporary memory (two K/V
/// slices, two fp32 dK/dV slices, the fp32 dQ accumulators and one pair's
/// 16-bit partials) is stream-ordered. \p kernel's workspaces serve one
/// stream at a time: ranks sharing a device need a kernel object each.
///
/// Throws UserError naming the field and value for bad tensors
/// (checkBackwardTensors) or arguments, a kernel that is not a dense
/// backward kernel of contextParallelSpec(spec, spec.dtypeO), a spec with
/// an attention sink (not yet: d sink is GpuSinkGradient's on the rank's
/// o, dO and lse, summed over the ranks), a local seqlen the sharding
/// cannot cut, head dims whose rows are not a multiple of 16 bytes, and
/// what GpuAttentionBackwardKernel::run throws; DriverError for CUDA or
/// NCCL failures. A rank that throws calls transport.abort().
DataGradients ringAttentionBackwardGpu(
    const AttentionSpec &spec, const GpuAttentionBackwardKernel &kernel,
    const GpuPagedOps &ops, Device &device, RingTransport &transport,
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    const Arguments &args = {}, const RingOptions &options = {},
    const GpuBackwardOptions &backward = {}, CUstream stream = nullptr,
    RingStats *stats = nullptr);

/// The GPU ring backward on a packed varlen batch: the gradients of
/// ringAttentionGpuVarlen's output, on ringAttentionBackwardGpu's schedule
/// and arithmetic. \p kernel must be the varlen GPU backward kernel
/// (GpuCompileOptions::kind = Backward, varlen, not block-sparse) of
/// contextParallelSpec(spec, spec.dtypeO); the layouts of
/// ringAttentionBackwardCpuVarlen on device memory (q, dq [total_q / R,
/// Hq, Dqk], k, v, dk, dv [total_k / R, Hkv, D], o, dO [total_q / R, Hq,
/// Dv], lse [Hq, total_q / R] fp32 with token stride 1 under zigzag) with
/// the local cu_seqlens \p cuSeqlensQ / \p cuSeqlensK in host memory
/// (shardCuSeqlens of the global ones, the same on every rank). Sequences
/// of length 0 are allowed (their keys get dK = dV = 0). Under zigzag the
/// query side (q, o, dO, lse) is packed per chunk into stream-ordered
/// memory. Like ringAttentionGpuVarlen the call synchronises \p stream
/// before it returns. Throws as ringAttentionBackwardGpu, for a kernel
/// that is not varlen, for bad tensors or cu_seqlens
/// (checkVarlenBackwardTensors) and for local sequence lengths the
/// sharding cannot cut (naming the sequence).
DataGradients ringAttentionBackwardGpuVarlen(
    const AttentionSpec &spec, const GpuAttentionBackwardKernel &kernel,
    const GpuPagedOps &ops, Device &device, RingTransport &transport,
    const TensorRef &q, const TensorRef &k, const TensorRef &v,
    const TensorRef &o, const TensorRef &lse, const TensorRef &dO,
    const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
    std::span<const int32_t> cuSeqlensQ, std::span<const int32_t> cuSeqlensK,
    const Arguments &args = {}, const RingOptions &options = {},
    const GpuBackwardOptions &backward = {}, CUstream stream = nullptr,
    RingStats *stats = nullptr);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_RINGGPU_H
