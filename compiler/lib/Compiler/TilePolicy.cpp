//===- TilePolicy.cpp - The measured tile rules of GPU kernels ------------===//
//
// defaultGpuTileConfig (TilePolicy.h) and resolveGpuTileConfig
// (GpuCompiler.h). Every number here comes from a tile experiment on the
// H200 (bench/RESULTS.md) among configurations that assemble without
// spills.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/TilePolicy.h"
#include "flashjit/compiler/GpuCompiler.h"

#include "flashjit/frontend/Derivative.h"
#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Expr.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Casting.h"

#include <fmt/format.h>

#include <algorithm>

namespace flashjit {

/// The mma.sync tiles every rule starts from: 8 warps of 16 rows, 64-key
/// tiles, all registers.
static GpuTileConfig mmaSyncBase(const std::string &arch) {
  GpuTileConfig c;
  c.arch = arch;
  c.blockN = 64;
  c.numWarps = 8;
  c.minBlocksPerSM = 1;
  c.rowsPerWarp = 16;
  return c;
}

/// The tiles of a dense kernel (defaultGpuTileConfig's first rules).
static GpuTileConfig denseTileConfig(const AttentionSpec &spec,
                                     const std::string &arch) {
  // Measured on the H200 (bench/RESULTS.md, tile configurations): two m16
  // tiles per warp halve the shared-memory fragment loads per mma and win
  // wherever their accumulators fit in 255 registers without spills.
  GpuTileConfig c = mmaSyncBase(arch);
  int d = std::max(spec.headDimQK, spec.headDimV);
  bool buffers = !spec.variant.buffers().empty();
  if (d <= 64) {
    if (buffers)
      return c; // ALiBi: 112 TF/s against 108 with 4 warps of 32 rows
    c.numWarps = 4;
    c.rowsPerWarp = 32;
    c.blockN = 64;
  } else if (d <= 128) {
    // 4 warps of 32 rows with 32-key tiles is 6-16% faster here, but masks
    // longer than causal's (and buffer reads) then spill 4-28 bytes at 255
    // registers: those keep 8 warps of 16 rows.
    Expr mask = spec.effectiveMask();
    if (!buffers && (mask.isNull() || mask->depth() <= 2)) {
      c.numWarps = 4;
      c.rowsPerWarp = 32;
      c.blockN = 32;
    }
  } else {
    // 8 warps of 16 rows with 64-key tiles: 4-27% faster than 4 warps with
    // 16/32-key tiles. 64-key tiles leave no registers for long masks (a
    // two-sided bottom-right window spills 8 bytes): those take 32.
    c.numWarps = 8;
    Expr mask = spec.effectiveMask();
    bool shortMask = mask.isNull() || mask->depth() <= 4;
    c.blockN = arch == "sm_80" || !shortMask ? 32 : 64;
  }
  return c;
}

const char *toString(GpuMma mma) {
  switch (mma) {
  case GpuMma::Default:
    return "default";
  case GpuMma::MmaSync:
    return "mma.sync";
  case GpuMma::Wgmma:
    return "wgmma";
  case GpuMma::WgmmaTma:
    return "wgmma.tma";
  case GpuMma::WgmmaTmaWs:
    return "wgmma.tma.ws";
  case GpuMma::WgmmaTmaWsOverlap:
    return "wgmma.tma.ws.overlap";
  case GpuMma::WgmmaTmaWsPingPong:
    return "wgmma.tma.ws.overlap.pingpong";
  }
  return "?";
}

/// Whether \p mask allows every pair: none, or the constant true.
static bool allowsEveryPair(const Expr &mask) {
  auto *k = mask.isNull() ? nullptr : llvm::dyn_cast<ConstantExpr>(mask.get());
  return mask.isNull() || (k && k->boolValue());
}

/// Whether the kernel evaluates a mask (one that is not the constant true).
static bool hasMaskCode(const AttentionSpec &spec) {
  return !allowsEveryPair(spec.effectiveMask());
}

/// Whether the only mask is the spec's causal one (AttentionSpec::causal,
/// either alignment) with no variant mask.
static bool causalMaskAlone(const AttentionSpec &spec) {
  return spec.causal != Causal::None &&
         allowsEveryPair(spec.variant.maskExpr());
}

/// Whether the score modifier is not the identity.
static bool hasScoreModCode(const AttentionSpec &spec) {
  const Expr &score = spec.variant.scoreExpr();
  return !score.isNull() && !llvm::isa<ScoreExpr>(score.get());
}

/// Whether \p e varies along a row: reads kv_idx or the score.
static bool variesAlongRow(const Expr &e) {
  return readsScore(e) || readsIndex(e, IndexVar::KvIdx);
}

/// Whether every buffer read in \p e is evaluated per row: its index and
/// whether it is evaluated at all depend on neither kv_idx nor the score.
/// The lazily evaluated operands of select, && and || (MLIRGen.cpp: an
/// scf.if where they read a buffer) whose condition varies along the row
/// are evaluated per element.
static bool buffersReadPerRow(const Expr &e) {
  if (!variesAlongRow(e))
    return true; // all of it is the row's
  const ExprNode *n = e.get();
  if (auto *l = llvm::dyn_cast<BufferLoadExpr>(n))
    return !variesAlongRow(l->index());
  if (auto *sel = llvm::dyn_cast<SelectExpr>(n))
    return buffersReadPerRow(sel->condition()) &&
           !readsBuffer(sel->trueValue()) && !readsBuffer(sel->falseValue());
  if (auto *bin = llvm::dyn_cast<BinaryExpr>(n))
    if (bin->op() == BinaryOp::And || bin->op() == BinaryOp::Or)
      return buffersReadPerRow(bin->lhs()) && !readsBuffer(bin->rhs());
  return llvm::all_of(n->operands(), buffersReadPerRow);
}

/// Whether the score modifier reads buffers, all of them per row
/// (buffersReadPerRow: ALiBi's slopes[head], a per-head or per-query
/// bias): without a mask or block list the forward reads those once per
/// row before the key loop (ForwardKernelBuilder::beginScoreRowFactors),
/// so its key loop reads no buffer.
static bool scoreReadsBuffersPerRow(const AttentionSpec &spec) {
  const Expr &score = spec.variant.scoreExpr();
  return !score.isNull() && readsBuffer(score) && buffersReadPerRow(score);
}

/// Whether wgmma kernels can be built for \p spec on \p arch.
static bool wgmmaApplies(const AttentionSpec &spec, const std::string &arch) {
  return arch == "sm_90a" && spec.headDimQK % 64 == 0 &&
         spec.headDimV % 64 == 0;
}

/// Whether the warp-specialised kernel \p c of \p spec can take
/// FlashAttention-3's intra-warpgroup overlap (KernelConfig::
/// overlapSoftmax; mma = wgmma.tma.ws.overlap asks for it). The
/// overlapped step holds a tile's K/V stage until the next tile's P V has
/// read V, so the producer runs a tile ahead only with 3 stages in the
/// ring: head dims up to 128 (with 2, at 256, it would wait for each load
/// once per tile).
static bool overlapFits(const AttentionSpec &spec, const GpuTileConfig &c) {
  return c.kvStages(spec.headDimQK, spec.headDimV) >= 3;
}

/// Whether the default warp-specialised kernel \p c of \p spec takes the
/// overlap: head dims up to 128 (above 64, where the default is
/// warp-specialised), no buffer reads in the key loop (masks and score
/// modifiers on indices, the score and parameters only: causal, windows,
/// softcap; or, without a mask, a score modifier whose buffer reads are
/// per row: ALiBi, read once per row before the loop since session 27).
/// Measured on an H100 (bench/RESULTS.md, sessions 16 and 18, D = 128, the
/// serial step = 1): dense 1.02-1.10, causal + softcap 1.05-1.09, causal
/// 0.95-1.06, sliding window 0.93-1.07 (the masked ones while they still
/// spilled), ALiBi 0.85 (its slope term lengthens the softmax that runs
/// beside P V). At 240 consumer registers (ptxas -v, sm_90a, 2026-12-06;
/// O's base computed after the loop, masked kernels with 32-bit descriptor
/// words: ForwardLoads.cpp) dense, softcap, causal (top-left, bottom-right),
/// sliding windows, prefix-LM, chunked, causal + softcap, a sink, fp16 and
/// GQA assemble with no spills, as do ALiBi and a bias table; a document
/// mask spills (84 bytes stored). ALiBi with its slopes read per row and
/// its distance in f32 (session 27, H100, N = 4k / 16k): 487 / 497 TF/s
/// overlapped against 460 / 473 serial. Kernels that read buffers in the
/// key loop keep the serial step; mma = wgmma.tma.ws asks for it everywhere,
/// wgmma.tma.ws.overlap for the overlap. Causal + softcap takes the overlap
/// (+3.5..+9%, sessions 16 and 18), and so does the spec's causal mask alone
/// since session 22: with the masked-value vote published once per row (session
/// 21) the overlapped causal forward ran +3.7% over the serial default at N =
/// 4096 and 16384 in one process (maskbench, H100, masked-key isolation in
/// both; +1..+6% against the serial kernel's timing in another call), where
/// session 20's in-tile vote had made it 0.94-0.96x. Other masks without a
/// score modifier keep the serial step: the overlapped 1024-key window with the
/// published vote timed 351.9 / 311.7 TF/s at N = 4096 / 16384 against the
/// serial default's 352-357 / 312-315 (same H100, session 22).
static bool overlapByDefault(const AttentionSpec &spec,
                             const GpuTileConfig &c) {
  bool noLoopReads = spec.variant.buffers().empty() ||
                     (!hasMaskCode(spec) && scoreReadsBuffersPerRow(spec));
  return c.warpSpecialized && noLoopReads &&
         (!hasMaskCode(spec) || hasScoreModCode(spec) ||
          causalMaskAlone(spec)) &&
         std::max(spec.headDimQK, spec.headDimV) <= 128 && overlapFits(spec, c);
}

/// defaultGpuTileConfig's tiles and instruction kind.
static GpuTileConfig chooseTiles(const AttentionSpec &spec,
                                 const std::string &arch, bool varlen,
                                 bool blockSparse, GpuMma mma) {
  bool askedOverlap =
      mma == GpuMma::WgmmaTmaWsOverlap || mma == GpuMma::WgmmaTmaWsPingPong;
  bool askedWs = mma == GpuMma::WgmmaTmaWs || askedOverlap;
  bool tma = mma == GpuMma::WgmmaTma || askedWs;
  if (mma == GpuMma::Wgmma || tma ||
      (mma == GpuMma::Default && wgmmaApplies(spec, arch))) {
    // Measured on the H200 (bench/RESULTS.md, session 4 tile experiment):
    // above head_dim 64 two warpgroups of 64 query rows (FlashAttention-3's
    // block_m), 128-key tiles up to 128 and 64 above; at 64 one warpgroup
    // per CTA (several CTAs per SM do not wait at each other's barriers):
    // 128-key tiles without a mask or score modifier (317-359 TF/s against
    // 233-301 with two warpgroups), else 64-key tiles and 3 CTAs per SM
    // (softcap 131-172 against 81-169, sliding window 216-260 against
    // 166-230).
    GpuTileConfig c = mmaSyncBase(arch);
    c.wgmma = true;
    // TMA (the default since session 8: 1.05-1.18x cp.async on the H200,
    // dense and causal at head dims 64 and 128, bench/RESULTS.md): one
    // tensor map per tensor; varlen and block-sparse keep cp.async, and
    // mma = wgmma asks for cp.async everywhere.
    c.tma = (tma || mma == GpuMma::Default) && !varlen && !blockSparse;
    c.rowsPerWarp = 16;
    int d = std::max(spec.headDimQK, spec.headDimV);
    // Warp specialisation asked for by name at head_dim 64 takes the tiles
    // above it (two consumer warpgroups of 64 rows, 128-key tiles, masks
    // included: block_m 128, not yet timed against one warpgroup's); the
    // default keeps one warpgroup there.
    if (d <= 64 && !askedWs) {
      c.numWarps = 4;
      // ALiBi-like score modifiers (buffers read per row, no mask) take
      // dense's tiles too: 351-354 TF/s against 340-345 with 64-key tiles
      // and 3 CTAs per SM (session 27, H100, N = 4k / 16k; TMA kernels:
      // varlen and block-sparse ones keep 64 keys, not timed).
      bool plain = !hasMaskCode(spec) &&
                   (!hasScoreModCode(spec) ||
                    (scoreReadsBuffersPerRow(spec) && !varlen && !blockSparse));
      c.blockN = plain ? 128 : 64;
      c.minBlocksPerSM = plain ? 1 : 3;
    } else {
      c.numWarps = 8;
      c.blockN = d <= 128 ? 128 : 64;
      // Buffer reads in a mask with a score modifier, or with varlen
      // offsets or block lists, leave too few registers beside S and O (a
      // varlen document mask with soft-capping spilled 188 bytes at
      // head_dim 128, a document mask with causal 24 bytes block-sparse at
      // 256): half the keys. ALiBi (buffer, no mask) keeps its tiles: half
      // of them cost it 4% at 128 and 17% at 256 on the H200.
      if (!spec.variant.buffers().empty() &&
          ((hasScoreModCode(spec) && hasMaskCode(spec)) || varlen ||
           blockSparse))
        c.blockN /= 2;
    }
    // Warp specialisation (the default where TMA tiles have two consumer
    // warpgroups: 0.98-1.18x the TMA kernel without it on the H200, session
    // 9, bench/RESULTS.md); mma = wgmma.tma asks for TMA without it. Its
    // consumers have 240 registers, not 255: masked kernels above head_dim
    // 128 (a document mask at 256 spilled 12 bytes; causal + softcap at 256
    // 16 bytes with issue 21's masked-value guard, measured on its branch)
    // keep the TMA kernel without it unless asked for by name.
    bool wsFits = d <= 128 || !hasMaskCode(spec);
    c.warpSpecialized = c.tma && c.numWarps == 8 &&
                        (askedWs || (mma == GpuMma::Default && wsFits));
    c.overlapSoftmax = c.warpSpecialized &&
                       ((askedOverlap && overlapFits(spec, c)) ||
                        (mma == GpuMma::Default && overlapByDefault(spec, c)));
    // FlashAttention-3's inter-warpgroup ping-pong on the overlap: by name
    // only. Its first passing GPU run (session 26, H100, one process) was
    // 0.95-1.0x the overlap for dense, causal and softcap at D = 128
    // (bench/RESULTS.md).
    c.pingPong = c.overlapSoftmax && mma == GpuMma::WgmmaTmaWsPingPong;
    return c;
  }
  GpuTileConfig c = denseTileConfig(spec, arch);
  // Varlen's per-sequence offsets push 4 warps of 32 rows over 255
  // registers above head_dim 64 (softcap at 128 spilled 108 bytes): those
  // keep 8 warps of 16 rows and 64-key tiles. Block-sparse list walking does
  // the same to masked kernels (a two-sided window at head_dim 64 spilled 12
  // bytes on sm_80, top-left causal at 128 16 bytes on sm_90a).
  bool masked = hasMaskCode(spec);
  if (c.rowsPerWarp == 32 &&
      ((varlen && std::max(spec.headDimQK, spec.headDimV) > 64) ||
       (blockSparse && masked)))
    c = mmaSyncBase(arch);
  // Odd head dims load element by element (SharedTile.cpp), each load's
  // addresses live beside S and O: softcap at 59 spilled 32 bytes with 4
  // warps of 32 rows, ALiBi at 111 4 bytes with 64-key tiles. 8 warps of 16
  // rows and 32-key tiles assemble clean (gpu_codegen).
  if (spec.headDimQK % 2 || spec.headDimV % 2) {
    c = mmaSyncBase(arch);
    c.blockN = 32;
  }
  // Padded head dims above 128 (not multiples of 16): O's accumulators of
  // the padded dim beside the predicated loads' addresses spill at 32- and
  // 64-key tiles (newuser12: 130 and 150 at 64 keys on sm_90a 124-340
  // bytes, 181 at 32 keys 20-156 on both arches, 226 292-336); 16-key
  // tiles assemble those clean (ptxas -v, a bottom-right causal mask at
  // every third dim of 129..255 and the reported ones). Not all: 225, 226,
  // 231, 234 and 237 still spill 12-104 bytes on sm_90a (316-1568 before),
  // 195, 201, 207, 219, 223, 226 and 234 8-80 on sm_80 (24-380 at 32 keys);
  // no tiling of this kernel fits them.
  if ((spec.headDimQK % 16 || spec.headDimV % 16) &&
      std::max(spec.headDimQK, spec.headDimV) > 128) {
    c = mmaSyncBase(arch);
    c.blockN = 16;
  }
  return c;
}

/// The fp8 forward (issue 18; compiler/lib/Conversion/AttnToNVVM/
/// WgmmaFp8.cpp): the cp.async wgmma kernel, two warpgroups of 64 rows,
/// 128-key tiles (one 128-byte row of V^T per head-dim column) up to
/// head_dim_v 128; 64-key tiles above (O's accumulator of 96 or 128
/// registers leaves no room for 64 of S: ptxas -v on sm_90a spilled
/// 36-464 bytes at 128 keys with head_dim_v 192 or 256, none at 64).
/// head_dim_qk does not enter (S's registers depend on the keys). Not yet
/// measured.
static GpuTileConfig fp8TileConfig(const AttentionSpec &spec,
                                   const std::string &arch) {
  GpuTileConfig c = mmaSyncBase(arch);
  c.blockN = spec.headDimV <= 128 ? 128 : 64;
  c.wgmma = true;
  return c;
}

GpuTileConfig defaultGpuTileConfig(const AttentionSpec &spec,
                                   const std::string &arch, bool varlen,
                                   bool blockSparse, GpuMma mma) {
  GpuTileConfig c = isFp8(spec.dtypeQ)
                        ? fp8TileConfig(spec, arch)
                        : chooseTiles(spec, arch, varlen, blockSparse, mma);
  c.varlen = varlen;
  c.blockSparse = blockSparse;
  return c;
}

/// Whether a derivative of the score modifier reads the raw score
/// (softcap's 1 - tanh^2(s / cap) does; ALiBi's and a bias table's do
/// not), so the backward keeps S^T live beside dK, dV, P^T and dP^T. Every
/// f32 parameter counts as asked for; a modifier that cannot be
/// differentiated counts as reading it (the backward then refuses it).
static bool scoreGradReadsScore(const AttentionSpec &spec) {
  const Expr &score = spec.variant.scoreExpr();
  try {
    ScoreModDerivative d =
        differentiateScoreMod(score, differentiableParams(score));
    bool reads = readsScore(d.score);
    for (const BufferDerivative &b : d.buffers)
      reads = reads || readsScore(b.derivative);
    for (const ParamDerivative &p : d.params)
      reads = reads || readsScore(p.derivative);
    return reads;
  } catch (const UserError &) {
    return true;
  }
}

/// Whether a derivative of the score modifier reads the raw score even
/// when written in the modifier's output (derivativeInOutput: softcap's
/// 1 - (s' / cap)^2 does not; a learned cap's d s'/d cap does).
static bool scoreGradNeedsRawScore(const AttentionSpec &spec) {
  if (!scoreGradReadsScore(spec))
    return false;
  const Expr &score = spec.variant.scoreExpr();
  try {
    return !derivativeInOutput(
                differentiateScoreMod(score, differentiableParams(score)),
                score)
                .has_value();
  } catch (const UserError &) {
    return true;
  }
}

/// Whether the wgmma backward splits dK and dV's head dims over its two
/// warpgroups (BackwardWgmmaSplit.cpp; 64 keys per CTA): head dims 256
/// (multiples of 128 above 128, where one warpgroup's dK and dV alone take
/// 256 registers), without a score modifier (the data gradients' per-row
/// sums assume a warp's query columns are the whole tile's).
static bool backwardWgmmaSplits(const AttentionSpec &spec) {
  return spec.headDimQK == 256 && spec.headDimV == 256 &&
         !hasScoreModCode(spec);
}

/// Whether the default backward on \p arch uses wgmma: sm_90a, head dims
/// 64 or 128 (dK and dV of 128 columns, S^T, dP^T and dQ fit in 255
/// registers; above, dK and dV alone take 256), block-sparse too (its 128
/// keys per CTA may span several of a block mask's key tiles: each 8-key
/// group keeps its mask tile's class, KernelAbi.h). With a score modifier: at
/// head dim 64 always; at 128 (the kernel then takes the synchronous order)
/// where no derivative reads the raw score once written in the modifier's
/// output (ALiBi, bias tables, softcap: GpuCompile.cpp's gradOfOutput recovers
/// s' from P, so S^T dies at P), since keeping S^T live beside dP^T spilled
/// 12-264 bytes (softcap, 2026-12-02).
static bool backwardWgmmaApplies(const AttentionSpec &spec,
                                 const std::string &arch) {
  if (arch != "sm_90a")
    return false;
  if (backwardWgmmaSplits(spec))
    return true;
  if (hasScoreModCode(spec) && spec.headDimQK == 64 && spec.headDimV == 64)
    return true;
  if (hasScoreModCode(spec) && scoreGradNeedsRawScore(spec))
    return false;
  return (spec.headDimQK == 64 || spec.headDimQK == 128) &&
         (spec.headDimV == 64 || spec.headDimV == 128);
}

bool backwardDefaultTilesSpill(const AttentionSpec &spec) {
  // ptxas -v of every tiling dQ's column split allows (block_n 16/32/64, 4
  // and 8 warps; 2026-12-02, sm_80 and sm_90a): above 128 dK and dV alone
  // take head_dim registers per thread, every tiling spills (72-3200 bytes;
  // FlashAttention-2 splits a warp's keys over two warps there); 112 (only
  // block_n 64 splits it) spills 64-172 bytes with or without a mask or
  // score modifier, 80 at block_n 64 32-184 bytes with softcap's
  // derivative (it keeps S^T live), none without one.
  auto spills = [&](int d) {
    return d > 128 || d == 112 ||
           (d == 80 && hasScoreModCode(spec) && scoreGradReadsScore(spec));
  };
  return spills(spec.headDimQK) || spills(spec.headDimV);
}

/// The backward kernels' tiles. mma.sync: 4 warps of 16 keys; 64 query
/// rows per tile up to head dim 64, 32 up to 128 and 16 above (per warp, dK
/// and dV hold head_dim fp32 accumulators per thread beside S^T and dP^T of
/// block_n / 2 each: 255 registers without spills), 64 where dQ's column
/// split needs it (head_dim_qk 80, 112, 144, ...); backwardDefaultTilesSpill
/// says where these spill. wgmma (\p mma, or the
/// default where backwardWgmmaApplies): two warpgroups of 64 keys (8 warps,
/// 128 keys per CTA) and 64 query rows per tile (wgmma's M for dQ = dS K);
/// where backwardWgmmaSplits, 64 keys per CTA shared by both warpgroups
/// (rowsPerWarp 8: block_m = 64).
static GpuTileConfig backwardTileConfig(const AttentionSpec &spec,
                                        const std::string &arch, GpuMma mma) {
  GpuTileConfig c = mmaSyncBase(arch);
  c.kind = KernelKind::Backward;
  if (mma == GpuMma::Wgmma ||
      (mma == GpuMma::Default && backwardWgmmaApplies(spec, arch))) {
    c.wgmma = true;
    c.numWarps = 8;
    c.blockN = 64;
    if (backwardWgmmaSplits(spec))
      c.rowsPerWarp = 8;
    return c;
  }
  c.numWarps = 4;
  int d = std::max(spec.headDimQK, spec.headDimV);
  c.blockN = d <= 64 ? 64 : d <= 128 ? 32 : 16;
  // dQ = dS K splits head_dim_qk's columns over 4 / (block_n / 16) warps in
  // multiples of 16: head dims that are odd multiples of 16 (48, 80, 112,
  // ...) take 64 query rows per tile, one column group (newuser12: 80 was
  // refused at its own default tiles).
  if (spec.headDimQK % (16 * c.numWarps / (c.blockN / 16)) != 0)
    c.blockN = 64;
  // A score modifier keeps the raw scores and its derivative's values live
  // across the dV and dP products: half the query rows per tile keep the
  // main kernel within 255 registers (measured 2026-12-01: softcap and
  // ALiBi spilled 32-64 bytes at the plain tiles), where dQ's column split
  // allows it (head_dim_qk a multiple of 16 * num_warps / (block_n / 32)).
  if (hasScoreModCode(spec) && c.blockN > 16 &&
      spec.headDimQK % (16 * c.numWarps / (c.blockN / 32)) == 0)
    c.blockN /= 2;
  return c;
}

/// Whether the backward kernel \p c of \p spec may take either tile order
/// (KernelConfig::syncBackward): wgmma, mask or score-modifier code, head
/// dims above 64, not the split kernel (rowsPerWarp 8), not block-sparse.
static bool backwardOrderIsChoice(const AttentionSpec &spec,
                                  const GpuTileConfig &c) {
  return c.wgmma && c.rowsPerWarp != 8 && !c.blockSparse &&
         std::max(spec.headDimQK, spec.headDimV) > 64 &&
         (hasMaskCode(spec) || hasScoreModCode(spec));
}

/// The decode kernels' tiles: 4 warps of 16 packed query rows (a GQA group
/// times q_len; warps with only padding rows just load), 64 keys per tile
/// up to head dim 128, 32 above; three K/V stages with Q overlaid on the
/// third up to head_dim_qk 128 (Q in registers: 102 KiB of shared memory
/// at head dim 128, still two CTAs per SM), else two.
static GpuTileConfig decodeTileConfig(const AttentionSpec &spec,
                                      const std::string &arch) {
  GpuTileConfig c = mmaSyncBase(arch);
  c.kind = KernelKind::Decode;
  c.numWarps = 4;
  c.rowsPerWarp = 16;
  c.minBlocksPerSM = 2;
  c.blockN = std::max(spec.headDimQK, spec.headDimV) <= 128 ? 64 : 32;
  // Two stages: three (Q on the third) measured 1-3% slower on an H100,
  // session 17 (bench/RESULTS.md); they stay reachable by decodeStages.
  c.decodeStages = 2;
  return c;
}

GpuTileConfig resolveGpuTileConfig(const AttentionSpec &spec,
                                   const GpuCompileOptions &options) {
  if (options.kind == KernelKind::Decode) {
    GpuTileConfig c = decodeTileConfig(spec, options.arch);
    if (options.blockN)
      c.blockN = options.blockN;
    if (options.numWarps)
      c.numWarps = options.numWarps;
    if (options.rowsPerWarp)
      c.rowsPerWarp = options.rowsPerWarp;
    if (options.minBlocksPerSM)
      c.minBlocksPerSM = options.minBlocksPerSM;
    if (options.decodeStages)
      c.decodeStages = options.decodeStages;
    return c;
  }
  if (options.kind == KernelKind::Backward) {
    // The default's wgmma tiles are 8 warps and 64 query rows: other tiles
    // asked for pick mma.sync (mma = wgmma asked for too: validateForGpu
    // refuses them).
    GpuMma mma = options.mma;
    if (mma == GpuMma::Default && ((options.blockN && options.blockN != 64) ||
                                   (options.numWarps && options.numWarps != 8)))
      mma = GpuMma::MmaSync;
    GpuTileConfig c = backwardTileConfig(spec, options.arch, mma);
    c.varlen = options.varlen;
    c.blockSparse = options.blockSparse;
    if (options.blockN)
      c.blockN = options.blockN;
    if (options.numWarps)
      c.numWarps = options.numWarps;
    if (options.minBlocksPerSM)
      c.minBlocksPerSM = options.minBlocksPerSM;
    c.syncBackward = options.syncBackward && backwardOrderIsChoice(spec, c);
    return c;
  }
  // Two m16 tiles per warp exist only for mma.sync: asking for them picks
  // it unless wgmma was asked for too (then validateForGpu refuses).
  GpuMma mma = options.mma;
  if (mma == GpuMma::Default && options.rowsPerWarp == 32)
    mma = GpuMma::MmaSync;
  GpuTileConfig c = defaultGpuTileConfig(spec, options.arch, options.varlen,
                                         options.blockSparse, mma);
  // A default CTAs-per-SM bound belongs to the default tiles: other warps,
  // rows or key tiles get the full register file unless it is asked for.
  bool reshaped = (options.blockN && options.blockN != c.blockN) ||
                  (options.numWarps && options.numWarps != c.numWarps) ||
                  (options.rowsPerWarp && options.rowsPerWarp != c.rowsPerWarp);
  if (reshaped)
    c.minBlocksPerSM = 1;
  if (options.blockN)
    c.blockN = options.blockN;
  if (options.numWarps)
    c.numWarps = options.numWarps;
  if (options.minBlocksPerSM)
    c.minBlocksPerSM = options.minBlocksPerSM;
  if (options.rowsPerWarp)
    c.rowsPerWarp = options.rowsPerWarp;
  // Tiles the user reshaped away from two consumer warpgroups of all
  // registers lose the default's warp specialisation (asked for by name,
  // validateForGpu refuses them).
  if (c.warpSpecialized && mma == GpuMma::Default &&
      (c.numWarps != 8 || c.minBlocksPerSM != 1 || c.rowsPerWarp != 16))
    c.warpSpecialized = false;
  // Reshaped tiles may change the ring's stages; the default's overlap
  // belongs to the default tiles (the ones measured and checked by ptxas).
  c.overlapSoftmax = c.overlapSoftmax && c.warpSpecialized &&
                     overlapFits(spec, c) &&
                     (mma != GpuMma::Default || !reshaped);
  // The ping-pong alternates two consumer warpgroups.
  c.pingPong = c.pingPong && c.overlapSoftmax && c.numWarps == 8;
  return c;
}

} // namespace flashjit
