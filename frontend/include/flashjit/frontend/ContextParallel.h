//===- ContextParallel.h - Sequence sharding for ring attention -*- C++ -*-===//
//
// Context parallelism (issue 20): a sequence too long for one device is cut
// into chunks along its token dim and spread over R ranks; each rank keeps
// its query chunks and passes its key/value chunks around a ring, computing
// attention of its queries against each visiting chunk, and the partial
// (O, LSE) states merge exactly through their LSEs (mergeStates, Paged.h).
// This header holds the device-free half: how a sequence is cut (contiguous
// or zigzag), and the spec rewrite that lets a kernel running on one chunk
// pair see the GLOBAL token indices its mask and score modifier are written
// for.
//
// Global indices: the sequence of length S is cut into n equal chunks of
// L = S / n tokens (n = R contiguous, 2R zigzag). A kernel call computes one
// query chunk cq of nq against one key chunk ck of nk, with seqlen_q = L_q
// and seqlen_k = L_k (the chunk lengths; the all-gather schedule passes the
// whole key sequence: ck = 0, nk = 1). contextParallelSpec substitutes, in
// the mask (causal mask included) and the score modifier,
//   q_idx    -> q_idx  + cp_q_chunk  * seqlen_q
//   kv_idx   -> kv_idx + cp_kv_chunk * seqlen_k
//   seqlen_q -> cp_q_chunks  * seqlen_q
//   seqlen_k -> cp_kv_chunks * seqlen_k
// with cp_q_chunk, cp_kv_chunk, cp_q_chunks and cp_kv_chunks i32 runtime
// parameters, so
// one compiled kernel serves every chunk pair, and the tile classifier,
// which treats parameters as their exact values, still classifies (and
// skips) tiles on the global indices. Expressing the offset through the
// call's own seqlen makes it per sequence in a packed varlen batch too.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_CONTEXTPARALLEL_H
#define FLASHJIT_FRONTEND_CONTEXTPARALLEL_H

#include "flashjit/frontend/Arguments.h"
#include "flashjit/frontend/Tensor.h"
#include "flashjit/frontend/TileClass.h"
#include "flashjit/frontend/Variant.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace flashjit {

/// How a sequence is cut over R ranks.
/// Contiguous: R chunks, rank r holds chunk r.
/// Zigzag (load-balanced for causal masks, ring-flash-attention's
/// zigzag_ring): 2R chunks, rank r holds chunks r and 2R - 1 - r, in that
/// order, so every rank owns as many early as late queries.
enum class Sharding : uint8_t { Contiguous, Zigzag };
/// "contiguous" / "zigzag".
std::string_view toString(Sharding s);

/// The runtime parameters contextParallelSpec adds (i32). A variant that
/// already declares one of these names is refused.
inline constexpr std::string_view kCpQChunkParam = "cp_q_chunk";
inline constexpr std::string_view kCpKvChunkParam = "cp_kv_chunk";
inline constexpr std::string_view kCpQChunksParam = "cp_q_chunks";
inline constexpr std::string_view kCpKvChunksParam = "cp_kv_chunks";

/// The most ranks a ring may have (a sanity bound on the caller's count).
inline constexpr int kMaxRingRanks = 4096;

/// Checks \p ranks in [1, kMaxRingRanks] and \p rank in [0, ranks); throws
/// UserError naming the field and value ("ranks = 0", "rank = 3 outside
/// [0, 2)").
void checkRingRank(int rank, int ranks);

/// Chunks a sequence is cut into: R (contiguous) or 2R (zigzag).
int64_t numChunks(int ranks, Sharding sharding);

/// The global chunk indices rank \p rank holds, in its local order: {r}
/// (contiguous) or {r, 2R - 1 - r} (zigzag). Throws as checkRingRank.
std::vector<int64_t> rankChunks(int rank, int ranks, Sharding sharding);

/// The spec a ring kernel is compiled from (this header's comment gives the
/// substitution): the mask is \p spec's effectiveMask() rewritten (causal
/// becomes part of the mask, AttentionSpec::causal = None), the score
/// modifier rewritten, returnLse = true (the merge needs it), sink = false
/// (the ring adds the sink once, at the final merge) and dtypeO =
/// \p partialDtype (the partial states' dtype: fp32 on the CPU keeps one
/// rounding to the output dtype, at the end). The variant's name is kept.
/// Expressions that read no index leaf are unchanged, and a spec whose mask
/// and modifier read none gets no parameters. Throws UserError if \p spec
/// is invalid or its variant already reads a parameter named cp_q_chunk,
/// cp_kv_chunk, cp_q_chunks or cp_kv_chunks.
AttentionSpec contextParallelSpec(const AttentionSpec &spec,
                                  DType partialDtype = DType::F32);

/// \p args (the user's, for the original spec) plus the chunk parameters
/// that \p ringSpec (from contextParallelSpec) reads, for query chunk
/// \p qChunk of \p qChunks against key chunk \p kvChunk of \p kvChunks;
/// the sink binding is dropped (the ring spec has none).
Arguments chunkArguments(const AttentionSpec &ringSpec, const Arguments &args,
                         int64_t qChunk, int64_t kvChunk, int64_t qChunks,
                         int64_t kvChunks);

/// How a (query chunk, key chunk) pair's mask looks over a call of
/// \p batch sequences of \p chunkLenQ x \p chunkLenK tokens each:
/// classifyTile of ringSpec's mask over the whole chunk pair with
/// chunkArguments' exact parameters. Empty means the call can be skipped
/// (sound: never Empty unless every element is masked). \p lensQ/\p lensK
/// (varlen: each sequence's chunk lengths) replace the single lengths when
/// non-empty; the pair is Empty only when it is for every sequence.
/// \p options.bufferRanges (host buffers only: the CPU ring) lets a buffer
/// mask decide too (a document mask's chunk pair between two documents is
/// Empty; TileClass.h's scan limit applies to the chunk's index range).
TileClass classifyChunkPair(const AttentionSpec &ringSpec,
                            const Arguments &chunkArgs, int64_t batch,
                            int64_t chunkLenQ, int64_t chunkLenK,
                            std::span<const int64_t> lensQ = {},
                            std::span<const int64_t> lensK = {},
                            const TileClassOptions &options = {});

/// Copies rank \p rank's part of the global tensor \p global
/// [B, H, S, D] into \p local [B, H, S / R, D] (same dtype; zigzag: its
/// two chunks, in rankChunks order). Throws UserError naming the field when
/// the shapes disagree, dtypes differ or S is not divisible by
/// numChunks(ranks, sharding) ("seqlen 10 is not divisible by 4, the zigzag
/// chunks of 2 ranks").
void shardSequence(const TensorRef &global, const TensorRef &local, int rank,
                   int ranks, Sharding sharding);

/// The inverse: writes \p local back into rank \p rank's part of
/// \p global. LSE tensors ([B, H, S], rank 3) work too.
void unshardSequence(const TensorRef &local, const TensorRef &global, int rank,
                     int ranks, Sharding sharding);

/// The local cu_seqlens of a packed varlen batch: each sequence's length
/// divided by the ranks (every rank holds 1/R of every sequence). Throws
/// UserError naming the entry when a length is not divisible by
/// numChunks(ranks, sharding) or the array is not a valid cu_seqlens.
std::vector<int32_t> shardCuSeqlens(std::span<const int32_t> cuSeqlens,
                                    int ranks, Sharding sharding);

/// Varlen shardSequence: \p global [total, H, D] packed by \p cuSeqlens
/// (global), \p local [total / R, H, D] packed by shardCuSeqlens; each
/// sequence's part is laid out as in the dense case. LSE tensors
/// [H, total] (rank 2) work too, sharded along their last dim.
void shardVarlen(const TensorRef &global, const TensorRef &local,
                 std::span<const int32_t> cuSeqlens, int rank, int ranks,
                 Sharding sharding);

/// The inverse of shardVarlen.
void unshardVarlen(const TensorRef &local, const TensorRef &global,
                   std::span<const int32_t> cuSeqlens, int rank, int ranks,
                   Sharding sharding);

/// Copies \p src into \p dst element by element (equal shapes and dtypes,
/// any strides, ranks 1-4). Throws UserError naming the field otherwise.
void copyTensor(const TensorRef &src, const TensorRef &dst);

/// The view of \p t's elements [start, start + len) along dim \p dim.
TensorRef sliceDim(const TensorRef &t, int dim, int64_t start, int64_t len);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_CONTEXTPARALLEL_H
