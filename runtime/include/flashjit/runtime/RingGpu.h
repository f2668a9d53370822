//===- RingGpu.h - Context-parallel (ring) attention on GPUs ----*- C++ -*-===//
//
// The GPU ring forward of issue 20 (Ring.h describes the schedule): each
// rank runs the GPU forward kernel of contextParallelSpec(spec, dtypeO) on
// its query chunks against each visiting key/value chunk pair that is not
// empty, merges the partial (O, LSE) states exactly on the device
// (GpuPagedOps::mergeStates into fp32 accumulators), and passes the K/V
// slice on through a RingTransport whose buffers are device memory
// (NcclTransport). The shifts are ordered on the caller's stream, one after
// the other with the kernels: communication does not yet overlap compute.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_RINGGPU_H
#define FLASHJIT_RUNTIME_RINGGPU_H

#include "flashjit/runtime/Ring.h"

#include <cuda.h>

namespace flashjit::runtime {

class Device;
class GpuAttentionKernel;
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
/// not; the kernel skips their tiles). options.schedule is ignored (the
/// ring always runs: AllGather is CPU-only for now) and
/// options.numThreads too.
///
/// \p transport moves device memory and must order its shifts on
/// \p stream (an NcclTransport made with \p stream): each rank enqueues its
/// kernels, merges and shifts on \p stream and returns without
/// synchronising it. Every rank calls this with the same spec and equally
/// shaped tensors (unlike the CPU ring, a rank with other shapes is not
/// detected: the buffers carry no header). Temporary memory (two K/V
/// slices, one partial and fp32 accumulators per local query chunk) is
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

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_RINGGPU_H
