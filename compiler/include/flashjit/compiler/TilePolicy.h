//===- TilePolicy.h - The measured tile rules of GPU kernels ----*- C++ -*-===//
//
// Which instructions and tiles a GPU kernel of a spec gets by default: the
// rules measured in the H200 tile experiments (bench/RESULTS.md), among
// configurations that ptxas assembles without spills (checked in CI for
// the whole kernel matrix). Free of MLIR and LLVM headers.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_COMPILER_TILEPOLICY_H
#define FLASHJIT_COMPILER_TILEPOLICY_H

#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/KernelAbi.h"

#include <string>

namespace flashjit {

/// The tensor-core instructions of a GPU kernel.
enum class GpuMma {
  /// defaultGpuTileConfig's choice: Wgmma on sm_90a where it applies.
  Default,
  /// mma.sync m16n8k16 with ldmatrix fragments (sm_80 and sm_90a;
  /// FlashAttention-2's instructions).
  MmaSync,
  /// wgmma.mma_async (sm_90a only): warpgroups of 4 warps, 64 query rows
  /// each, Q and K read from shared memory by descriptor, P from registers
  /// (FlashAttention-3's instructions, Shah et al. 2024, section 3). Needs
  /// head dims that are multiples of 64 and rowsPerWarp 16.
  Wgmma,
  /// Wgmma with Q, K and V loaded by TMA (cp.async.bulk.tensor into a ring
  /// of 128-byte-swizzled stages, mbarrier completion; KernelConfig::tma).
  /// Dense kernels only: varlen and block-sparse kernels asking for it get
  /// Wgmma's cp.async loads (their per-sequence offsets and listed tiles
  /// are not in one tensor map yet). What Default picks where wgmma
  /// applies and the tiles have one warpgroup (head dim 64); asked for by
  /// name, TMA without warp specialisation at every head dim.
  WgmmaTma,
  /// WgmmaTma, warp-specialised (KernelConfig::warpSpecialized): a producer
  /// warpgroup issues the TMA loads, two consumer warpgroups compute, with
  /// setmaxnreg 24 / 240; at head dim 64 too, with the tiles above it (two
  /// warpgroups of 64 rows, 128-key tiles), where Default keeps one
  /// warpgroup without a producer (WgmmaTma). Varlen and block-sparse are
  /// refused. What Default picks where TMA tiles have two warpgroups (head
  /// dims above 64), except the kernels that take WgmmaTmaWsOverlap; asked
  /// for by name, always the serial tile step.
  WgmmaTmaWs,
  /// WgmmaTmaWs with FlashAttention-3's intra-warpgroup overlap
  /// (KernelConfig::overlapSoftmax): needs a ring of 3 K/V stages (head
  /// dims 64 to 128), else refused. What Default picks at head dim 128
  /// without buffer reads in the key loop and without a variant mask
  /// unless a score modifier comes with it (dense, softcap,
  /// AttentionSpec::causal alone, causal + softcap, a sink, ALiBi without
  /// a mask: its slopes are read once per row; TilePolicy.cpp:
  /// overlapByDefault); other masks alone (windows, prefix-LM), bias
  /// tables indexed by kv_idx, masked ALiBi and document masks keep
  /// WgmmaTmaWs.
  WgmmaTmaWsOverlap,
  /// WgmmaTmaWsOverlap with FlashAttention-3's inter-warpgroup ping-pong
  /// (KernelConfig::pingPong): the two consumer warpgroups take turns to
  /// issue their products (named barriers), so one's softmax runs while
  /// the other's products do. Where WgmmaTmaWsOverlap applies, else
  /// refused; asked for by name only (Default never picks it).
  WgmmaTmaWsPingPong,
};

/// "default", "mma.sync", "wgmma", "wgmma.tma", "wgmma.tma.ws",
/// "wgmma.tma.ws.overlap" or "wgmma.tma.ws.overlap.pingpong".
const char *toString(GpuMma mma);

/// The tile configuration of a GPU kernel: the one kernel configuration
/// record (runtime/KernelAbi.h), every field chosen.
using GpuTileConfig = KernelConfig;

/// The default tile configuration of \p spec on \p arch ("sm_80" or
/// "sm_90a"; GpuCompileOptions overrides it; arch, varlen and blockSparse
/// are set from the arguments), chosen from the tile
/// experiment on an H200 (bench/RESULTS.md) among configurations that
/// ptxas assembles without spills. mma.sync tiles (sm_80, \p mma MmaSync,
/// head dims that are not multiples of 64), block_m = 128 everywhere:
/// - head_dim <= 64: 4 warps of 32 query rows, 64-key tiles (variants that
///   read buffers: 8 warps of 16 rows);
/// - head_dim <= 128: 4 warps of 32 rows, 32-key tiles for no mask or a
///   top-left causal one, without buffers; else 8 warps of 16 rows, 64-key
///   tiles (4 x 32 spills there);
/// - head_dim > 128: 8 warps of 16 rows, 64-key tiles on sm_90a for masks
///   of depth <= 4 (causal, one-sided windows, document ids), else 32 (also
///   on sm_80, whose shared memory holds less);
/// - \p varlen kernels above head_dim 64 and \p blockSparse kernels with a
///   mask: 8 warps of 16 rows, 64-key tiles wherever the rules above give
///   4 x 32 (their extra per-sequence or list state spills it);
/// - head dims that are not multiples of 16 (padded): odd ones 8 warps of
///   16 rows and 32-key tiles, and above 128 (either dim) 16-key tiles.
///
/// On sm_90a, when head_dim_qk and head_dim_v are multiples of 64, \p mma
/// Default or Wgmma gives wgmma tiles instead: above head_dim 64, 8 warps
/// (two warpgroups, 128 query rows) with 128-key tiles up to head_dim 128
/// and 64-key tiles above (half that for variants that read buffers and
/// have a mask and a score modifier, or are varlen or block-sparse); at
/// head_dim 64, 4
/// warps (one warpgroup, 64 query rows) with 128-key tiles when there is
/// neither a mask nor a score modifier other than one whose buffer reads
/// are all per row (ALiBi; session 27), else 64-key tiles and 3 CTAs per
/// SM.
/// \p mma MmaSync gives the mma.sync tiles above; Wgmma where it cannot
/// apply (sm_80, other head dims) is a UserError in validateForGpu.
GpuTileConfig defaultGpuTileConfig(const AttentionSpec &spec,
                                   const std::string &arch = "sm_90a",
                                   bool varlen = false,
                                   bool blockSparse = false,
                                   GpuMma mma = GpuMma::Default);

/// Whether the GPU backward's default mma.sync tiles for \p spec's head
/// dims spill registers on sm_80 or sm_90a (ptxas -v, 2026-12-02): true at
/// 112 and above 128 (every tiling dQ's column split allows spills there,
/// 72-3200 bytes) and at 80 with a score modifier whose derivative reads
/// the score (softcap's: 32-184 bytes). Such kernels are still built (they
/// are correct, only slower); false for the other multiples of 16.
bool backwardDefaultTilesSpill(const AttentionSpec &spec);

} // namespace flashjit

#endif // FLASHJIT_COMPILER_TILEPOLICY_H
