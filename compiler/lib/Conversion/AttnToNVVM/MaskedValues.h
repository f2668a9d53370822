//===- MaskedValues.h - NaN/Inf at masked keys stays out -------*- C++ -*-===//
//
// The rule (README, "Masked keys are isolated"; issue 21 §3): a row's
// result depends only on the keys it attends. In a partially masked key
// tile the product O += P V runs over every key of the tile, and P is 0 at
// the row's masked keys, so a NaN or Inf in V there would reach the row as
// 0 * inf = NaN. The scores need no care: masking replaces a masked score
// (NaN from a NaN in K included) by -inf with a select.
//
// Forward and decode (exact; the common path unchanged): only partial
// tiles can hold a key masked for some row, so only there, once the tile
// has landed in shared memory, the threads that compute vote (one barrier
// with an OR reduction) on whether the V tile holds a non-finite element
// (each thread's scan: one fma of 16-bit pairs, x * 0 + acc, per 32-bit
// word: NaN stays in acc iff some x was NaN or Inf).
// Almost always it does not. When it does (the guarded path, before the
// plain product):
//   1. every thread adds to its own O elements (i, d), already rescaled,
//      the terms P[i, j] * V[j, d] over the keys j of the tile with V[j, d]
//      not finite and P[i, j] != 0, P as the product takes it (16-bit;
//      the weights come from the other threads of the row's quad by
//      shuffles; a run-time loop over the keys with plain loads: rare path,
//      small code, few registers: P stays packed as in the plain path);
//   2. the threads replace every non-finite element of the V tile by 0 in
//      shared memory; then the plain product runs on it. (A key may be
//      masked for one row and attended by another row of the same tile, so
//      the V rows of masked keys cannot simply be dropped; and the product
//      cannot run on the raw tile, where 0 * inf is NaN.)
// Why it is exact: terms whose weight is exactly 0 (every masked pair, and
// an attended pair whose weight underflowed) are skipped, as the CPU
// backend's skip_zero_lhs does; every other term reaches O as before: the
// non-finite ones in step 1 (+inf, -inf or NaN, which adding the finite
// rest cannot change; +inf meeting -inf gives NaN as in the product), the
// finite ones through the product. An O element that gets no non-finite
// term is untouched by step 1, so it gets exactly the product on the tile
// with those values at weight 0: a row attending none of them has the
// result of the clean tile.
//
// Backward: dS' = P (dP - D) is set to exactly 0 where P is, in the tiles
// that evaluate the mask (only they hold pairs a row does not attend; dP
// is NaN for every query of a key whose V holds a NaN or Inf, and D for
// every row that attends one, so 0 * NaN would reach dK of clean keys),
// and dQ = dS K, where K of a masked key meets dS = 0, takes a guarded
// product (dS == 0 terms skipped, from shared memory) in partial tiles
// whose K tile holds a NaN or Inf (the same vote on K: with swizzled tiles
// (wgmma) at each partial tile's dS^T barrier, which the tile has anyway
// (barrierVotingIf); mma.sync kernels once per CTA as soon as K has
// landed: a CTA keeps its K tile for the whole kernel). K cannot be
// rewritten: later query tiles' S^T = K Q^T read it.
//
// The pipelined wgmma backward at head dim 64 (without score_grad code)
// checks results instead (no vote, no barrier, no select in the common
// path; setMaskedValueBackwardTileVoteForTesting restores the above):
//   - dS': at a masked pair P = +0 exactly, so P (dP - D) is +-0 unless
//     dP - D is NaN or Inf, and then the product is NaN. Each thread
//     checks its own dS^T fragments, packed to 16 bits as the products
//     take them (wordsHaveNonFinite: a NaN or Inf in f32 stays one in
//     16 bits; a finite value that rounds to Inf is a false alarm): only a
//     thread with one, in a partial tile, zeroes its dS' where P is 0 and
//     packs again (a +-0 and a +0 weight give the same products);
//   - dQ = dS K: a masked pair meets a NaN or Inf in K only as 0 * Inf or
//     0 * NaN, which makes that dQ element NaN. Each thread checks its own
//     dQ fragments (valuesHaveNonFinite, once the product has landed):
//     only a thread with one, in a partial tile, adds dqSkipZero's terms
//     instead (per thread: it reads the published dS^T and K tiles, no
//     barrier). A dQ element without a NaN or Inf got no such term.
//
// Where the forward's vote runs (its cost is the barrier more than the
// scan: session 15 measured +12-18% on a document mask whose tiles are all
// partial):
//   - cp.async kernels (varlen, block-sparse, mma.sync): in the tile, a
//     scan while S's product is in flight and a barrier of its own;
//   - TMA kernels without warp specialisation above head dim 64: in the
//     tile, as cp.async kernels (setMaskedValueTileEndVoteForTesting
//     builds session 16's placement, measured slower: tile j + 1's vote
//     rides on tile j's closing CTA barrier, barrierVotingIf, once tile
//     j + 1 has landed; the first tile votes before the loop);
//   - TMA kernels without warp specialisation up to head dim 64 (their
//     default there): no vote in the loop; they check their result (below);
//   - warp-specialised kernels: no vote in the loop; they check their
//     result (below). With setMaskedValuePublishedVoteForTesting (sessions
//     18-23's default, measured +2-15% on an H100): each consumer warp
//     scans its chunks while S is in flight, its lane 0 marks a per-stage word
//     in shared memory (atomic max) when the warp saw a NaN or Inf and arrives
//     at the stage's "voted" mbarrier (publishWarpVote; lane 0 of every
//     consumer warp arrives once per use of the stage, also in tiles that need
//     no vote); a warp waits there only in tiles that need the vote and only
//     just before P V (awaitPublishedVote), so the two consumer warpgroups do
//     not meet at a barrier in the loop. The word holds the stage use + 1 that
//     last found one: a later use never matches an older one's mark. The
//     overlapped consumer loop (ForwardOverlap.cpp) publishes the same way
//     without a branch on the lane (every lane of a warp that saw one marks the
//     word; lane 0's arrival is a predicated instruction).
//   - the fp8 forward (cp.async, wgmma k32): its threads transpose V
//     through shared memory before every tile anyway, so they scan the
//     fp8 bytes they move and the transpose's closing barrier ORs the
//     votes (ForwardMma::selectStageVoting); its guarded path
//     (ForwardMma::isolateNonFiniteV, WgmmaFp8.cpp) adds the terms with
//     P as the product takes it (e4m3) and transposes the tile again with
//     the non-finite bytes zeroed.
// The old placement (in the tile everywhere) stays reachable for timing:
// setMaskedValueTileVoteForTesting.
//
// The forward at head dim 64 (TMA, no warp specialisation) checks its
// result (ForwardKernelBuilder::checkedLoop): the row block runs with no
// vote and no guarded path, as without isolation; after the loop each
// thread checks its O accumulators for a NaN or Inf (valuesHaveNonFinite)
// and the CTA votes once (voteOr); only where one holds does the CTA run
// the row block again from its first key tile with the in-tile vote, the
// ring's stage uses and mbarrier phases going on from the first pass's.
// Exact, bit for bit the in-tile kernel's O and LSE: a NaN or Inf in V of
// a key tile the CTA visits meets every row of the CTA (masked: 0 * Inf or
// 0 * NaN is NaN; attended: P * Inf), so some O accumulator becomes NaN or
// Inf, and stays so (the rescale by alpha in [0, 1] and the sums never
// make it finite); an overflow is a false alarm. So a finite O means the
// in-tile vote would have found nothing in any tile and its loop is the
// plain one; otherwise the second pass is the in-tile kernel. m, l and
// LSE come from the masked scores, which V does not touch. Cost: the
// common path is the loop of the kernel without isolation plus one f32
// add tree and one reducing barrier per CTA; a CTA that meets a NaN or Inf
// in V (attended or not) takes about twice its time.
//
// Warp-specialised forwards (head dim 128: the serial consumer step and
// the overlapped one, ForwardOverlap.cpp) check their result the same way
// (ForwardKernelBuilder::checkedLoop, buildWarpSpecialized): the consumer
// warps run the loop of the kernel without isolation (the overlapped one
// ends with its flushPV, which releases the last stage), check their O,
// and vote once at named barrier 1 (bar.red.or over the 256 consumer
// threads; the producer never reaches it). The consumers' thread 0 then
// writes the decision to a word in shared memory and arrives at a
// "decision" mbarrier (one arrival, one phase: the Published vote's
// mbarrier and word of stage 0, unused by a checking kernel). The
// producer thread, after issuing its last load, waits there: it exits,
// or issues the row block's tiles again, the ring's uses going on from
// the first pass's count (use u waits for the consumers' release of use
// u - stages: every consumer thread released each stage of the first
// pass before its vote, so at 2 and 3 stages the first stages of the
// second pass are free at once, and the full and empty mbarriers' phases
// continue). The consumers rerun the same loop (serial or overlapped)
// with the in-tile vote (rare path; O, m and l from init), so a CTA that
// reruns computes exactly the in-tile kernel's O and LSE. Each CTA decides for
// itself: CTAs that rerun and CTAs that do not never wait for each other;
// a CTA with no key tile (jBegin > jEnd) has a finite O, decides "no" and
// its producer, which loaded nothing, exits.
//
// Barriers: the vote and the guarded path synchronise the threads that
// compute: the CTA (barrier 0), or in warp-specialised kernels named
// barrier 1 of the consumer warps (the producer never reaches it; every
// consumer warp reads the same published vote, so all of them take the
// guarded path together). Private to the AttnToNVVM conversion.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_CONVERSION_ATTNTONVVM_MASKEDVALUES_H
#define FLASHJIT_CONVERSION_ATTNTONVVM_MASKEDVALUES_H

#include "BackwardMma.h"
#include "KernelOps.h"
#include "MmaStrategy.h"

namespace flashjit::nvvm {

/// The threads that meet at the masked-value paths' barriers: all
/// \p nthreads threads of the CTA (\p barrierId 0), or the \p nthreads
/// threads of named barrier \p barrierId (warp-specialised consumers).
struct VoteGroup {
  mlir::Value tid; ///< the thread's index in the group, 0 .. nthreads - 1
  int nthreads = 0;
  int barrierId = 0;
};

/// Whether kernels isolate masked keys (true unless
/// setMaskedValueIsolationForTesting turned it off).
bool maskedValueIsolation();

/// Whether forward kernels vote inside each partial tile with a barrier of
/// its own (setMaskedValueTileVoteForTesting; default false).
bool maskedValueTileVote();

/// Whether TMA forward kernels without warp specialisation vote at the
/// closing barrier (setMaskedValueTileEndVoteForTesting; default false).
bool maskedValueTileEndVote();

/// Whether backward kernels isolate masked keys with session 16's votes
/// and selects (setMaskedValueBackwardTileVoteForTesting; default false:
/// the pipelined wgmma backward at head dim 64 checks its results).
bool maskedValueBackwardTileVote();

/// Whether warp-specialised forward kernels publish the vote in each
/// partial tile instead of checking their result
/// (setMaskedValuePublishedVoteForTesting; default false).
bool maskedValuePublishedVote();

/// Whether any 16-bit element (bf16 or fp16 as \p ops says) of the packed
/// pairs \p words (i32 each) is NaN or Inf: this thread's answer, no vote
/// (a pairwise tree of 16-bit fmas, words.size() - 1 of them).
mlir::Value wordsHaveNonFinite(KernelOps &ops,
                               llvm::ArrayRef<mlir::Value> words);

/// Whether any of the f32 values \p xs is NaN or Inf, or their sum
/// overflows (a pairwise tree of adds, xs.size() of them; an overflow is
/// a false alarm for callers whose guarded path is exact too): this
/// thread's answer, no vote.
mlir::Value valuesHaveNonFinite(KernelOps &ops, llvm::ArrayRef<mlir::Value> xs);

/// One barrier of \p group that ORs the i1 \p vote over its threads: true
/// in all of them iff it was true in one. Every thread of the group must
/// call it.
mlir::Value voteOr(KernelOps &ops, const VoteGroup &group, mlir::Value vote);

/// Where \p cond: whether any 16-bit element of this thread's 16-byte
/// chunks of the tile at \p smem (as tileHasNonFiniteIf splits the tile
/// over \p group) is NaN or Inf; no barrier. Else false, nothing read.
mlir::Value chunksHaveNonFiniteIf(KernelOps &ops, mlir::Value cond,
                                  const VoteGroup &group, mlir::Value smem,
                                  int rows, int dim, bool swizzled);

/// A warp's share of a published vote (warp-specialised forward): the
/// warp's OR of \p bad (i1 per thread, vote.any); its lane 0 (\p lane 0)
/// raises the word at \p flag (!llvm.ptr<3>) to \p token (i32, atomic
/// max: tokens grow from use to use) where that OR is true, then arrives
/// once at the mbarrier \p votedBar (whose count is the number of warps
/// that vote). Every lane of the warp must call it. \p branchFree: no
/// branch on the lane (every lane of a warp whose OR is true raises the
/// word, the same token; lane 0 arrives by a predicated instruction): a
/// branch on the lane in the overlapped consumer loop made ptxas treat the
/// whole loop as divergent (its wgmma descriptors through R2UR, WARPSYNC
/// before each group).
void publishWarpVote(KernelOps &ops, mlir::Value bad, mlir::Value lane,
                     mlir::Value flag, mlir::Value token, mlir::Value votedBar,
                     bool branchFree = false);

/// Where \p cond: waits for the phase of \p votedBar with parity
/// \p parity (every voting warp has published), then whether the word at
/// \p flag holds \p token (some warp saw a NaN or Inf in this use). Else
/// false, no wait.
mlir::Value awaitPublishedVote(KernelOps &ops, mlir::Value cond,
                               mlir::Value flag, mlir::Value token,
                               mlir::Value votedBar, mlir::Value parity);

/// Where \p cond (the same in the whole group): whether any 16-bit element
/// (bf16 or fp16 as \p ops says) of the tile of \p rows x \p dim elements
/// at \p smem (the layout of tileOffset) is NaN or Inf: each thread scans
/// its 16-byte chunks, then one barrier of the group ORs the votes (the
/// result is the same in all of them). Else false: no scan, no barrier.
/// Every thread of the group must call it.
mlir::Value tileHasNonFiniteIf(KernelOps &ops, mlir::Value cond,
                               const VoteGroup &group, mlir::Value smem,
                               int rows, int dim, bool swizzled);

/// One barrier of the group that, where \p cond (the same in the whole
/// group), also tells whether any 16-bit element of the tile at \p smem
/// (as tileHasNonFiniteIf) is NaN or Inf: each thread scans its chunks and
/// the barrier is the OR-reducing one; elsewhere a plain barrier of the
/// group and false. For a barrier the kernel has anyway: the vote then
/// costs the scan, and no barrier of its own. Every thread of the group
/// must call it.
mlir::Value barrierVotingIf(KernelOps &ops, mlir::Value cond,
                            const VoteGroup &group, mlir::Value smem, int rows,
                            int dim, bool swizzled);

/// Step 1 and 2 of the guarded path (scheme above) where \p poisoned (the
/// same in the whole group; tileHasNonFiniteIf's result): returns \p o
/// (this thread's O fragments, o[(mt * nO + jd) * 4 + i]: rows g / g + 8
/// of m16 tile mt, columns 8 jd + 2 t + (i & 1)) plus the non-finite terms
/// of P V (\p p in the layout of S, f32) of the V tile at \p sV
/// (\p shape.blockN keys x headDimV), and leaves that tile with its
/// non-finite elements replaced by 0; elsewhere \p o unchanged and nothing
/// done. The caller then runs the plain product on the tile. \p asyncProxy:
/// the tile is read or later written through the async proxy (wgmma, TMA),
/// so the rewrite is fenced for it. Every thread of the group must call it
/// (barriers where \p poisoned).
llvm::SmallVector<mlir::Value>
isolateNonFiniteV(KernelOps &ops, const TileShape &shape,
                  llvm::ArrayRef<mlir::Value> o, llvm::ArrayRef<mlir::Value> p,
                  mlir::Value poisoned, mlir::Value sV, mlir::Value lane,
                  const VoteGroup &group, bool swizzled, bool asyncProxy);

/// The part of isolateNonFiniteV that needs every thread of the group, for
/// threads that have no rows of their own in the tile (the decode's idle
/// warps): where \p poisoned, the group's barriers and this thread's share
/// of the rewrite of the V tile at \p sV.
void joinRewriteIf(KernelOps &ops, mlir::Value poisoned, const TileShape &shape,
                   mlir::Value sV, const VoteGroup &group, bool swizzled,
                   bool asyncProxy);

/// The backward's dQ = dS K of one query tile with the terms whose dS is
/// exactly 0 skipped, from the dS^T tile at \p sDS ([blockM x blockN]) and
/// the K tile at \p sK ([blockM x headDimQK]) in shared memory, in the
/// layout BackwardMma::computeDQ returns (rows 16 (warp % rowGroups) + g
/// (+ 8), columns dqCols (warp / rowGroups) + 8 jd + 2 t (+ 1)). The same
/// products of the same 16-bit values as the mma, summed in f32 in key
/// order: a masked pair's dS is 0 and 0 * inf (a NaN or Inf in K at a key
/// the row masks) never reaches the row's dQ. A run-time loop over the keys
/// (rare path).
llvm::SmallVector<mlir::Value>
dqSkipZero(KernelOps &ops, const BackwardTileShape &shape, mlir::Value warp,
           mlir::Value lane, mlir::Value sDS, mlir::Value sK, bool swizzled);

} // namespace flashjit::nvvm

#endif // FLASHJIT_CONVERSION_ATTNTONVVM_MASKEDVALUES_H
