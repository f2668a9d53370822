//===- BlockMask.h - Compressed tile masks and block-sparse layouts -*- C++
//-*-//
//
// A BlockMask lists, for each query tile, the key tiles a kernel visits: the
// partial ones (the mask runs per element) and the full ones (no mask code
// runs); a key tile in neither list is never loaded. It has the form of
// FlexAttention's BlockMask (torch.nn.attention.flex_attention.BlockMask:
// kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, with
// BLOCK_SIZE = (block_m, block_n)), with plain int32 vectors.
//
// Block masks come from two places: a block-sparse kernel builds one for a
// data-dependent mask (CpuKernel::buildBlockMask and
// GpuAttentionKernel::buildBlockMask: interval arithmetic per tile, buffer
// ranges included, and the mask at every element only of the tiles that
// leaves undecided), or the caller gives a block-sparse
// layout in BSR form (blockMaskFromBsr). Either way the caller owns it and
// may reuse it for every call with the same sizes (and, for built masks, the
// same mask parameters and buffers). Nothing here needs MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_BLOCKMASK_H
#define FLASHJIT_FRONTEND_BLOCKMASK_H

#include "flashjit/frontend/Expr.h"

#include <cstdint>
#include <span>
#include <vector>

namespace flashjit {

/// The tiles a block-sparse kernel visits, per (batch, head, query tile).
///
/// A row is one (b, h, m): b < batch, h < heads, m < numQTiles, at index
/// row(b, h, m) = (b * heads + h) * numQTiles + m. Row r lists
/// kvNumBlocks[r] partial key tiles at kvIndices[r * numKvTiles + i] and
/// fullKvNumBlocks[r] full key tiles at fullKvIndices[r * numKvTiles + i]
/// (each list strictly increasing; no tile in both; the unused tail of a row
/// is ignored). A batch or head extent of 1 is shared by every batch (or
/// sequence) or every query head.
///
/// Semantics: key j is allowed for query i of (b, h) when its tile
/// (i / blockM, j / blockN) is listed partial and the mask holds, or is
/// listed full (the mask is then not evaluated: the builder proved it true
/// on the whole tile). Other keys are not allowed.
///
/// Varlen kernels: q tiles and key tiles are local to each sequence;
/// seqlenQ/seqlenK are the largest sequence lengths; listed tiles past a
/// shorter sequence's end are skipped. A mask built for a varlen batch keeps
/// its cu_seqlens and is only accepted with the same ones.
struct BlockMask {
  /// Queries per q tile and keys per kv tile (must equal the kernel's).
  int64_t blockM = 0;
  int64_t blockN = 0;
  /// The sequence lengths it was built for (varlen: the largest).
  int64_t seqlenQ = 0;
  int64_t seqlenK = 0;
  /// 1 (shared) or the call's batch (number of sequences for varlen).
  int64_t batch = 1;
  /// 1 (shared) or heads_q.
  int64_t heads = 1;
  /// ceil(seqlenQ / blockM) and ceil(seqlenK / blockN).
  int64_t numQTiles = 0;
  int64_t numKvTiles = 0;
  /// [batch, heads, numQTiles]: partial key tiles per row.
  std::vector<int32_t> kvNumBlocks;
  /// [batch, heads, numQTiles, numKvTiles]: their indices.
  std::vector<int32_t> kvIndices;
  /// [batch, heads, numQTiles]: full key tiles per row.
  std::vector<int32_t> fullKvNumBlocks;
  /// [batch, heads, numQTiles, numKvTiles]: their indices.
  std::vector<int32_t> fullKvIndices;
  /// The cu_seqlens of the varlen batch it was built for; empty otherwise.
  std::vector<int32_t> cuSeqlensQ;
  std::vector<int32_t> cuSeqlensK;

  /// Row index of (b, h, m) (b and h already reduced to 0 where shared).
  int64_t row(int64_t b, int64_t h, int64_t m) const {
    return (b * heads + h) * numQTiles + m;
  }
  /// Total listed partial tiles (sum of kvNumBlocks).
  int64_t numPartial() const;
  /// Total listed full tiles (sum of fullKvNumBlocks).
  int64_t numFull() const;

  /// Checks the mask on its own: positive block sizes, non-negative sizes,
  /// numQTiles/numKvTiles equal to ceil(seqlen / block), vector sizes equal
  /// to their shapes, counts in [0, numKvTiles], indices strictly increasing
  /// in [0, numKvTiles), no tile both partial and full. Throws UserError
  /// naming the field and the entry, e.g.
  /// "block_mask.kv_indices[b=0][h=2][row=5][3] = 17 >= num_kv_tiles 16".
  void validate() const;
};

/// Checks \p mask (validate()) and that it fits one call of a kernel with
/// tiles \p blockM x \p blockN: batch 1 or \p batch, heads 1 or \p headsQ,
/// seqlenQ/seqlenK equal to the call's (varlen: the largest), and, for a
/// varlen call (non-empty \p cuSeqlensQ), cu_seqlens equal to the mask's
/// unless the mask has none (a layout shared by every sequence). Throws
/// UserError naming the field and both values.
void checkBlockMaskFor(const BlockMask &mask, int64_t blockM, int64_t blockN,
                       int64_t batch, int64_t headsQ, int64_t seqlenQ,
                       int64_t seqlenK,
                       std::span<const int32_t> cuSeqlensQ = {},
                       std::span<const int32_t> cuSeqlensK = {});

/// checkBlockMaskFor without validate(): only the sizes, extents and
/// cu_seqlens against the call (for a mask whose lists live elsewhere, e.g.
/// in device memory, and were validated when they got there).
void checkBlockMaskFits(const BlockMask &mask, int64_t blockM, int64_t blockN,
                        int64_t batch, int64_t headsQ, int64_t seqlenQ,
                        int64_t seqlenK,
                        std::span<const int32_t> cuSeqlensQ = {},
                        std::span<const int32_t> cuSeqlensK = {});

/// A BlockMask transposed for a key-tile-outer backward kernel (the GPU
/// backward's `_bwd_mask` kernel writes it on the device): for each (b, h,
/// key tile j of kvTile keys), the query tiles of qTile rows it visits,
/// partial and full separately, increasing, with each partial tile's key
/// groups (kBackwardKeyGroup keys each) that the mask code alone does not
/// decide. Row (b, h, j) = (b * heads + h) * numKvTiles + j; its lists at
/// row * numQTiles.
///
/// The rule (checkBackwardBlockTiles): query tile i lies in mask row m =
/// i * qTile / mask.blockM; key group g of key tile j (keys
/// [j * kvTile + 8 g, + 8)) lies in mask tile t = (j * kvTile + 8 g) /
/// mask.blockN and takes its class (unlisted, partial, full); groups with t
/// >= mask.numKvTiles (past the keys) do not count. Backward tile (i, j) is
/// not listed if every counted group is unlisted, full if every one is
/// full, else partial, with key-group word w: bit g set where group g is
/// unlisted (its keys are not allowed), bit 16 + g where it is full (its
/// keys are allowed without the mask code; the rest run it); w = 0 where
/// every counted group is partial (a tile inside one mask tile).
struct TransposedBlockMask {
  /// Query rows per query tile and keys per key tile (the backward's).
  int64_t qTile = 0;
  int64_t kvTile = 0;
  /// The mask's extents.
  int64_t batch = 1;
  int64_t heads = 1;
  /// ceil(seqlenQ / qTile) and ceil(seqlenK / kvTile) of the mask.
  int64_t numQTiles = 0;
  int64_t numKvTiles = 0;
  /// [batch, heads, numKvTiles]: partial query tiles per row.
  std::vector<int32_t> qNumBlocks;
  /// [batch, heads, numKvTiles, numQTiles]: their indices.
  std::vector<int32_t> qIndices;
  /// [batch, heads, numKvTiles, numQTiles]: their key-group words (beside
  /// qIndices).
  std::vector<int32_t> qKeyGroups;
  /// [batch, heads, numKvTiles]: full query tiles per row.
  std::vector<int32_t> fullQNumBlocks;
  /// [batch, heads, numKvTiles, numQTiles]: their indices.
  std::vector<int32_t> fullQIndices;
};

/// Keys per key group of a transposed block mask (TransposedBlockMask):
/// the rows a thread of the GPU backward holds together (one half of an
/// m16 fragment).
inline constexpr int64_t kBackwardKeyGroup = 8;

/// The backward's block-sparse rule for tiles of \p qTile query rows x
/// \p kvTile keys: each query tile inside one mask tile (mask.blockM a
/// multiple of qTile) and each key group of kBackwardKeyGroup keys inside
/// one mask tile (mask.blockN a multiple of 8); a key tile may span
/// several mask tiles (kvTile a multiple of 8, at most 128: 16 groups).
/// Throws UserError naming both tile shapes otherwise.
void checkBackwardBlockTiles(const BlockMask &mask, int64_t qTile,
                             int64_t kvTile);

/// The host twin of the GPU backward's mask transposer: \p mask (validated
/// by the caller) transposed to tiles of \p qTile x \p kvTile under
/// TransposedBlockMask's rule. Throws UserError as
/// checkBackwardBlockTiles.
TransposedBlockMask transposeBlockMask(const BlockMask &mask, int64_t qTile,
                                       int64_t kvTile);

/// The batch and head extents of the block mask a kernel builds for \p mask:
/// batch is 1 unless the mask reads `batch` or the call is varlen (each
/// sequence has its own tile grid), heads is 1 unless it reads `head`.
struct BlockMaskExtent {
  int64_t batch = 1;
  int64_t heads = 1;
};
BlockMaskExtent blockMaskExtent(const Expr &mask, int64_t batch, int64_t headsQ,
                                bool varlen);

/// A user-given block-sparse layout in BSR (block compressed sparse row)
/// form, as in scipy.sparse.bsr_matrix / torch.sparse_bsr_tensor, shared by
/// every head or given per query head.
///
/// Rows are the pairs (h, m), h < heads, m < numQTiles, in that order:
/// row r = h * numQTiles + m has the key tiles
/// colIndices[rowOffsets[r] .. rowOffsets[r + 1]). The layout only selects
/// tiles: the spec's mask still applies inside every listed tile.
struct BsrLayout {
  /// Queries per q tile and keys per kv tile.
  int64_t blockM = 0;
  int64_t blockN = 0;
  /// 1 (every head) or heads_q.
  int64_t heads = 1;
  int64_t numQTiles = 0;
  int64_t numKvTiles = 0;
  /// heads * numQTiles + 1 entries: first 0, non-decreasing, last equal to
  /// colIndices.size().
  std::vector<int32_t> rowOffsets;
  /// Key tiles, strictly increasing within each row, in [0, numKvTiles).
  std::vector<int32_t> colIndices;
};

/// The BlockMask of \p layout for sequences of \p seqlenQ x \p seqlenK
/// (varlen: the largest): every listed tile is partial (the kernel still
/// classifies it, and skips or unmasks it when the mask's index arithmetic
/// allows). Checks that the layout's tile counts equal ceil(seqlen / block)
/// and every entry as BsrLayout states; throws UserError naming the entry,
/// e.g. "col_indices[h=2][row=5][3] = 17 >= num_kv_tiles 16".
BlockMask blockMaskFromBsr(const BsrLayout &layout, int64_t seqlenQ,
                           int64_t seqlenK);

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_BLOCKMASK_H
