//===- CpuDecode.h - Paged decoding on the CPU ---------------------*- C++
//-*-===//
//
// The CPU twin of runtime::GpuDecodeKernel (issue 17): attention of q_len
// new query tokens per sequence against a paged KV cache, on the CPU
// backend, so CI tests paged decoding without a GPU. Semantics:
// referencePagedAttention (frontend/Paged.h).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_CPUDECODE_H
#define FLASHJIT_RUNTIME_CPUDECODE_H

#include "flashjit/frontend/Paged.h"
#include "flashjit/runtime/CpuAttentionKernel.h"

namespace flashjit::runtime {

/// O and LSE of q [batch, heads_q, q_len, head_dim_qk] against the paged
/// cache k_cache [num_pages, heads_kv, page_size, head_dim_qk], v_cache
/// [num_pages, heads_kv, page_size, head_dim_v] (any strides; the
/// [pages, page_size, heads, dim] layout is a view) through \p pages
/// (checkPagedCsr or checkBlockTable), with \p kernel, a CPU kernel of the
/// spec compiled with CompileOptions::varlen. Each sequence's seq_len(b)
/// keys and values are gathered out of its pages (unused slots and pages
/// are never read, so they may hold NaN), then the varlen kernel runs with
/// seqlen_q = q_len and seqlen_k = seq_len(b) per sequence, so a causal
/// mask should be bottom-right (the decode convention). A spec with an
/// attention sink takes it in \p args (host memory, Arguments::bindSink).
/// A sequence of length 0 gives O = 0 and LSE = -inf (LSE = sink[h] with a
/// sink). Writes o [batch, heads_q, q_len, head_dim_v] (the spec's dtype)
/// and, when the spec returns it and \p lse is given, lse [batch, heads_q,
/// q_len] fp32. Host memory; \p numThreads as CpuAttentionKernel::run.
/// Throws UserError naming the field and value: a kernel without varlen or
/// with block_sparse, bad tensors or tables (checkPagedTensors), o / lse of
/// the wrong shape or dtype, bad arguments.
void cpuPagedDecode(const CpuAttentionKernel &kernel, const TensorRef &q,
                    const TensorRef &kCache, const TensorRef &vCache,
                    const PageList &pages, const TensorRef &o,
                    const TensorRef *lse, const Arguments &args = {},
                    int numThreads = 0);

} // namespace flashjit::runtime

#endif // FLASHJIT_RUNTIME_CPUDECODE_H
