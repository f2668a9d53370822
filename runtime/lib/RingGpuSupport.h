//===- RingGpuSupport.h - Pieces shared by the GPU ring's passes -*- C++
//-*-===//
//
// Private to runtime/lib: what the GPU ring forward (RingGpu.cpp) and
// backward (RingBackwardGpu.cpp) share: one rank's dense geometry and its
// checks, the layout of K/V chunks packed in a travelling device buffer
// (chunk j of K one contiguous [B, Hkv, Lk, Dqk] tensor, then the V
// chunks), the packing of a rank's K/V into it, and the pair of device
// buffers one of which is sent while the other receives.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_RUNTIME_LIB_RINGGPUSUPPORT_H
#define FLASHJIT_RUNTIME_LIB_RINGGPUSUPPORT_H

#include "flashjit/runtime/AttentionKernel.h"
#include "flashjit/runtime/Memory.h"
#include "flashjit/runtime/Ring.h"

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace flashjit::runtime::ring {

/// One rank's GPU ring call: its place in the ring, the chunks it holds
/// (perRank per tensor, chunks in all) and their shapes. Dense chunks are
/// [B, H, len, D]; a varlen chunk packs every sequence's part of that chunk
/// ([tokens, H, D], sequence b's part seqQ[b] / seqK[b] tokens long at rows
/// cuChunkQ[b] / cuChunkK[b]).
struct GpuGeometry {
  int rank = 0, ranks = 1;
  int64_t perRank = 1, chunks = 1;
  int64_t batch = 0, headsQ = 0, headsKV = 0, dqk = 0, dv = 0;
  int64_t lenQ = 0, lenK = 0; // chunk lengths (dense) or chunk totals (varlen)
  bool varlen = false;
  // Varlen: per-sequence chunk lengths, a chunk's cu_seqlens, and the
  // rank's local cu_seqlens (the caller's).
  std::vector<int64_t> seqQ, seqK;
  std::vector<int32_t> cuChunkQ, cuChunkK, cuLocalQ, cuLocalK;

  /// Token rows of one query / key chunk over the batch.
  int64_t tokensQ() const { return varlen ? lenQ : batch * lenQ; }
  int64_t tokensK() const { return varlen ? lenK : batch * lenK; }
};

/// The geometry of \p shape (the rank's checked tensors) in \p transport's
/// ring under \p sharding. Throws UserError for a bad rank, a local seqlen
/// the sharding cannot cut (zigzag: odd), a global seqlen above 2^31 - 1,
/// or a head dim whose rows are not a multiple of 16 bytes (\p fn, the
/// caller's name, in the message).
GpuGeometry gpuGeometry(const AttentionSpec &spec, const AttentionShape &shape,
                        const RingTransport &transport, Sharding sharding,
                        const char *fn);

/// The same for a packed varlen batch of \p shape with the rank's local
/// cu_seqlens \p cuQ / \p cuK (checkVarlenTensors'd). Throws UserError
/// as gpuGeometry, naming the sequence whose local length the sharding
/// cannot cut.
GpuGeometry gpuVarlenGeometry(const AttentionSpec &spec,
                              const VarlenShape &shape,
                              std::span<const int32_t> cuQ,
                              std::span<const int32_t> cuK,
                              const RingTransport &transport, Sharding sharding,
                              const char *fn);

/// Throws UserError (through ring::fail) unless \p config is a kernel of
/// kind \p kind, not block-sparse, varlen exactly when \p varlen, and
/// \p kernelSpec is \p ringSpec (contextParallelSpec of the caller's spec
/// \p spec): ring kernels read global indices. \p fn, the caller's name,
/// in the message.
void checkRingKernel(const KernelConfig &config, KernelKind kind,
                     const AttentionSpec &kernelSpec,
                     const AttentionSpec &ringSpec, const AttentionSpec &spec,
                     const char *fn, bool varlen = false);

/// Step \p step of the ring schedule on \p g's rank, which then holds the
/// K/V of rank (rank - step) mod R: calls \p compute(i, j, chunkArgs) for
/// each (local query chunk i, visiting key chunk j) pair, i major, whose
/// mask classifyChunkPair does not find empty on its indices alone (device
/// buffers: no buffer ranges; varlen: over every sequence's chunk
/// lengths), chunkArgs being chunkArguments of the pair;
/// counts the pairs computed and skipped in \p stats.
void forEachPair(
    const AttentionSpec &ringSpec, const Arguments &args, const GpuGeometry &g,
    Sharding sharding, int step,
    const std::function<void(int64_t, int64_t, const Arguments &)> &compute,
    RingStats &stats);

/// perRank chunks of K (dtype \p k) and then of V (\p v), [B, Hkv, Lk, D]
/// each (varlen: [tokensK, Hkv, D]), packed in one device buffer.
struct GpuKVLayout {
  GpuGeometry g;
  DType k = DType::BF16, v = DType::BF16;

  size_t kBytes() const; // all K chunks
  size_t vBytes() const; // all V chunks
  size_t bytes() const { return kBytes() + vBytes(); }
  /// Chunk \p j of K (\p isV false) or V in the buffer at \p buf.
  TensorRef chunk(CUdeviceptr buf, bool isV, int64_t j) const;
};

/// Copies the rank's \p k and \p v (local tensors, head_dim stride 1) into
/// the buffer at \p buf in \p l's layout, on \p stream. Throws UserError
/// for a head_dim stride other than 1.
void packKV(const GpuKVLayout &l, CUdeviceptr buf, const TensorRef &k,
            const TensorRef &v, CUstream stream);

/// Copies \p n token rows of \p src [T, H, D] from row \p srcRow into
/// \p dst [T', H, D] (same dtype, heads and head dim) from row \p dstRow,
/// on \p stream: one 2-D copy where both keep a token's heads packed, else
/// one per head. Throws UserError for a head_dim stride other than 1.
void copyTokens(const TensorRef &src, int64_t srcRow, const TensorRef &dst,
                int64_t dstRow, int64_t n, CUstream stream);

/// The same for varlen LSEs [H, T] (fp32): tokens [srcCol, srcCol + n) of
/// every head into tokens from \p dstCol, one 2-D copy. Throws UserError
/// for a token stride other than 1.
void copyLseTokens(const TensorRef &src, int64_t srcCol, const TensorRef &dst,
                   int64_t dstCol, int64_t n, CUstream stream);

/// Two stream-ordered device buffers of equal size that travel around the
/// ring: cur() is this step's, and a shift sends it while the other
/// receives, then swaps them.
class GpuTravelling {
public:
  /// Allocates both on \p stream; \p zero: cur() starts as zeros.
  GpuTravelling(Device &device, size_t bytes, CUstream stream, bool zero);
  CUdeviceptr cur() const { return cur_; }
  size_t bytes() const { return bytes_; }
  /// Begins the shift of cur() into the other buffer.
  void start(RingTransport &t) const;
  /// Completes it and swaps the buffers.
  void finish(RingTransport &t);

private:
  std::unique_ptr<StreamBuffer> a_, b_;
  CUdeviceptr cur_ = 0, next_ = 0;
  size_t bytes_ = 0;
};

} // namespace flashjit::runtime::ring

#endif // FLASHJIT_RUNTIME_LIB_RINGGPUSUPPORT_H
