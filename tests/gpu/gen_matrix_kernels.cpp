//===- gen_matrix_kernels.cpp - Generate the matrix kernels ahead of time -===//
//
// Writes <dir>/<id>.ptx and <dir>/<id>.info (the kernel's configuration; see
// write(); was "name arch threads block_m shared_bytes") for every kernel of
// tests/support/KernelMatrix.h, so the [gpu] tests run them on a GPU machine
// that has no MLIR (the ahead-of-time flow a host application uses), the
// block-sparse / varlen kernels of sparseKernels(), sinkKernels(),
// fp8Kernels() (sm_90a, default MMA only),
// ringKernels(), ringVarlenKernels() and paddedKernels(), the ring backward
// kernels
// (ringBackwardKernels(), ringVarlenBackwardKernels()), the
// backward kernels (backwardKernels(), backwardVarlenKernels(),
// backwardSparseKernels(), the timing
// pairs of benchKernels()), and
// (sm_90a) those of optionKernels(). Usage: gen_matrix_kernels DIR [ARCH
// [MMA]]; MMA (default, mma.sync, wgmma, wgmma.tma, wgmma.tma.ws or
// wgmma.tma.ws.overlap) applies
// to the matrix and sparse kernels (scripts/ptx-matrix.sh uses it to
// compare the PTX of every instruction kind before and after a change);
// wgmma.tma applies where wgmma does (head dims multiples of 64; the
// default elsewhere), and so does wgmma.tma.ws (head dim 64 with two
// consumer warpgroups), and varlen / block-sparse kernels get wgmma's
// cp.async loads.
// The backward kernels take the default instruction kind (wgmma on sm_90a
// where the tile policy picks it) except under MMA mma.sync, which forces
// mma.sync on them too; MMA backward-only.mma.sync writes only the backward
// and timing kernels that way (the old kernels, for timing beside the new);
// FLASHJIT_BACKWARD_ONLY=<substring> with backward-only... writes only the
// backward and timing kernels whose id contains it.
// FLASHJIT_MATRIX_ONLY=<substring> writes only the matrix kernels whose id
// contains it (the [gpu] tests take the same variable), nothing else.
// MMA mask-bench writes only the [.maskbench] timing kernels; mask-bench-base
// the same kernels without masked-key isolation (their baseline, through
// setMaskedValueIsolationForTesting); mask-bench-old the same with the vote
// inside every partial tile (setMaskedValueTileVoteForTesting; backward:
// setMaskedValueBackwardTileVoteForTesting);
// mask-bench-sync the same kernels with the wgmma backward's synchronous
// tile step where the order is a choice (GpuCompileOptions::syncBackward;
// as the [.maskbench] baseline its "base" columns are the synchronous
// kernels). Timing ids of benchKernels() ending `_sync` are built that way
// too; those ending `_noftz` (forward and backward) and the block-sparse
// timing ids `<id>_noftz` with the softmax exponentials as ex2.approx.f32
// (setSoftmaxExp2FtzForTesting off); those ending `_noscan` (backward) with
// the tile loop through every query tile (setTileRangeBackwardForTesting
// off); those ending `_loadfirst` (backward) with the next tile's loads and
// the dS^T stores before the products (setProductsFirstBackwardForTesting
// off), `_lateload` with a masked kernel's loads after them
// (setMaskedLoadsAfterProductsBackwardForTesting on), `_scan` with the
// visited-range loop above head dim 64 (setTileRangeWideBackwardForTesting
// on). resultCheckKernels() are
// written a second time as `<id>_tilevote`, built with the in-tile masked-value
// vote (setMaskedValueTileVoteForTesting), for the [gpu][masked] comparison;
// so are overlapMaskedKernels() and overlapVoteKernels() (the overlap by
// name on sm_90a, whatever MMA), the latter also as `<id>_pubvote` (the
// published vote, setMaskedValuePublishedVoteForTesting). MMA
// mask-bench-pub writes the [.maskbench] kernels with the published vote.
// pingPongKernels() take the overlap with the ping-pong by name (sm_90a,
// whatever MMA).
//
//===----------------------------------------------------------------------===//
#include "KernelMatrix.h"
#include "OptionKernelOptions.h"
#include "OutputFiles.h"
#include "RingVarlenKernels.h"

#include "flashjit/compiler/BackwardOrderTesting.h"
#include "flashjit/compiler/Exp2Testing.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/compiler/MaskedValueTesting.h"
#include "flashjit/compiler/ScoreFactorTesting.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {
/// Writes <dir>/<id>.ptx and <dir>/<id>.info ("name arch warps
/// rows_per_warp min_blocks_per_sm wgmma block_n varlen block_sparse
/// shared_bytes kind", then " tma" on TMA kernels and " ws" on
/// warp-specialised ones: the whole KernelConfig,
/// read back by
/// test::readKernelInfo). \p sparse is kept for the callers.
void write(const std::string &dir, const std::string &id,
           const flashjit::GpuKernelImage &img, bool sparse = false) {
  (void)sparse;
  flashjit::testing::writeOutputFile(dir + "/" + id + ".ptx", img.ptx);
  std::ostringstream info;
  const flashjit::KernelConfig &c = img.config;
  info << img.name << ' ' << c.arch << ' ' << c.numWarps << ' ' << c.rowsPerWarp
       << ' ' << c.minBlocksPerSM << ' ' << c.wgmma << ' ' << c.blockN << ' '
       << c.varlen << ' ' << c.blockSparse << ' ' << img.sharedBytes << ' '
       << flashjit::toString(c.kind) << (c.tma ? " tma" : "")
       << (c.warpSpecialized ? " ws" : "") << '\n';
  flashjit::testing::writeOutputFile(dir + "/" + id + ".info", info.str());
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr,
                 "usage: %s DIR [sm_80|sm_90a "
                 "[default|mma.sync|wgmma|wgmma.tma|wgmma.tma.ws|"
                 "wgmma.tma.ws.overlap|backward-only|"
                 "backward-only.mma.sync|mask-bench|mask-bench-base|"
                 "mask-bench-sync|mask-bench-old|mask-bench-pub|"
                 "mask-bench-pingpong]]\n",
                 argv[0]);
    return 1;
  }
  std::string dir = argv[1];
  flashjit::testing::makeOutputDir(argv[0], dir);
  flashjit::GpuCompileOptions o;
  o.arch = argc > 2 ? argv[2] : "sm_90a";
  // MMA "backward-only": only the backward and timing kernels (a quick pack
  // for the [backward] tests: scripts/gpu-check.sh with
  // GPU_CHECK_PACK=backward).
  bool backwardOnly = false, tma = false, ws = false, overlap = false,
       maskBench = false, syncBackward = false, maskBenchPingPong = false;
  if (argc > 3) {
    std::string mma = argv[3];
    // mask-bench-base: the [.maskbench] baseline, the same kernels without
    // the isolation of masked keys (a testing hook; these files go to no
    // cache).
    if (mma == "mask-bench-base")
      flashjit::setMaskedValueIsolationForTesting(false);
    // mask-bench-sync: the same kernels with the wgmma backward's
    // synchronous tile step (the maskbench loop below).
    syncBackward = mma == "mask-bench-sync";
    // mask-bench-old: the same kernels with the vote in every partial tile
    // (session 15's forward placement; session 16's backward: dS' zeroed
    // and K voted on in every partial tile), the [.maskbench] "old" column.
    if (mma == "mask-bench-old") {
      flashjit::setMaskedValueTileVoteForTesting(true);
      flashjit::setMaskedValueBackwardTileVoteForTesting(true);
    }
    // mask-bench-pub: the warp-specialised forwards with the published
    // vote (sessions 18-25's default), the others as mask-bench.
    if (mma == "mask-bench-pub")
      flashjit::setMaskedValuePublishedVoteForTesting(true);
    // mask-bench-pingpong: the forward-only `_ovl` ids with the ping-pong
    // by name (GpuMma::WgmmaTmaWsPingPong), the others as mask-bench.
    maskBenchPingPong = mma == "mask-bench-pingpong";
    if (mma == "mask-bench" || mma == "mask-bench-base" ||
        mma == "mask-bench-sync" || mma == "mask-bench-old" ||
        mma == "mask-bench-pub" || maskBenchPingPong)
      maskBench = true;
    else if (mma == "backward-only")
      backwardOnly = true;
    else if (mma == "backward-only.mma.sync") {
      backwardOnly = true;
      o.mma = flashjit::GpuMma::MmaSync;
    } else if (mma == "mma.sync")
      o.mma = flashjit::GpuMma::MmaSync;
    else if (mma == "wgmma")
      o.mma = flashjit::GpuMma::Wgmma;
    else if (mma == "wgmma.tma")
      tma = true;
    else if (mma == "wgmma.tma.ws")
      tma = ws = true;
    else if (mma == "wgmma.tma.ws.overlap")
      tma = ws = overlap = true;
    else if (mma != "default") {
      std::fprintf(stderr, "unknown MMA '%s'\n", mma.c_str());
      return 1;
    }
  }
  // wgmma.tma: where wgmma applies, else the default; varlen and
  // block-sparse kernels take wgmma (cp.async: TMA asked for by name is
  // refused there); wgmma.tma.ws: head dim 64 too (two consumer warpgroups,
  // block_m 128, since 2026-12-06; wgmma.tma before); wgmma.tma.ws.overlap:
  // wgmma.tma.ws with the intra-warpgroup overlap up to head dim 128 (3 K/V
  // stages).
  auto forSpec = [&](const flashjit::AttentionSpec &spec, bool varlen = false,
                     bool blockSparse = false) {
    flashjit::GpuCompileOptions so = o;
    so.varlen = varlen;
    so.blockSparse = blockSparse;
    if (tma && spec.headDimQK % 64 == 0 && spec.headDimV % 64 == 0) {
      so.mma = varlen || blockSparse ? flashjit::GpuMma::Wgmma
               : ws ? (overlap && std::max(spec.headDimQK, spec.headDimV) <= 128
                           ? flashjit::GpuMma::WgmmaTmaWsOverlap
                           : flashjit::GpuMma::WgmmaTmaWs)
                    : flashjit::GpuMma::WgmmaTma;
    }
    return so;
  };
  // The backward kernels: mma.sync when asked for, else the default.
  const flashjit::GpuMma bwdMma = o.mma == flashjit::GpuMma::MmaSync
                                      ? flashjit::GpuMma::MmaSync
                                      : flashjit::GpuMma::Default;
  const char *only = std::getenv("FLASHJIT_MATRIX_ONLY");
  // FLASHJIT_BACKWARD_ONLY=<substring> (with MMA backward-only...): only
  // the backward and timing kernels whose id contains it.
  const char *bwdOnly = std::getenv("FLASHJIT_BACKWARD_ONLY");
  auto skip = [&](const std::string &id) {
    return backwardOnly && bwdOnly && id.find(bwdOnly) == std::string::npos;
  };
  int n = 0;
  // MMA "mask-bench": only the [.maskbench] timing kernels (forward <id>_fwd
  // and backward <id>, default instructions; the forward-only `_ovl` ids:
  // the overlap by name), nothing else; "mask-bench-base" the same without
  // masked-key isolation (its baseline).
  if (maskBench) {
    for (const auto &k : flashjit::testing::maskBenchKernels()) {
      flashjit::GpuCompileOptions bo;
      bo.arch = o.arch;
      if (flashjit::testing::maskBenchForwardOnly(k)) {
        if (bo.arch == "sm_90a")
          bo.mma = maskBenchPingPong ? flashjit::GpuMma::WgmmaTmaWsPingPong
                                     : flashjit::GpuMma::WgmmaTmaWsOverlap;
        write(dir, k.id + "_fwd", flashjit::compileGpu(k.spec, bo));
        ++n;
        continue;
      }
      write(dir, k.id + "_fwd", flashjit::compileGpu(k.spec, bo));
      bo.kind = flashjit::KernelKind::Backward;
      bo.syncBackward = syncBackward;
      write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
      n += 2;
    }
    std::printf("%d kernels written to %s\n", n, dir.c_str());
    return 0;
  }
  for (const auto &k : flashjit::testing::kernelMatrix()) {
    if (backwardOnly)
      break;
    if (only && k.id.find(only) == std::string::npos)
      continue;
    write(dir, k.id, flashjit::compileGpu(k.spec, forSpec(k.spec)));
    ++n;
  }
  // Masked-value forward kernels (issue 21 section 3), FLASHJIT_MATRIX_ONLY
  // applying as to the matrix.
  for (const auto &k : flashjit::testing::maskedValueKernels(false)) {
    if (backwardOnly)
      break;
    if (only && k.id.find(only) == std::string::npos)
      continue;
    write(dir, k.id, flashjit::compileGpu(k.spec, forSpec(k.spec)));
    ++n;
  }
  // The benchmark's masked head-dim-128 forwards: the defaults whatever
  // MMA the matrix is built with (the overlap's, on sm_90a).
  for (const auto &k : flashjit::testing::overlapMaskedKernels()) {
    if (backwardOnly)
      break;
    if (only && k.id.find(only) == std::string::npos)
      continue;
    flashjit::GpuCompileOptions dflt;
    dflt.arch = o.arch;
    write(dir, k.id, flashjit::compileGpu(k.spec, dflt));
    flashjit::setMaskedValueTileVoteForTesting(true);
    flashjit::GpuKernelImage img = flashjit::compileGpu(k.spec, dflt);
    flashjit::setMaskedValueTileVoteForTesting(false);
    write(dir, k.id + "_tilevote", img);
    n += 2;
  }
  // Masked head-dim-128 forwards with the overlap by name (sm_90a; the
  // default elsewhere), whatever MMA the matrix is built with: `<id>` with
  // the default (the result check), `<id>_pubvote` with the published
  // masked-value vote, `<id>_tilevote` with the in-tile vote.
  for (const auto &k : flashjit::testing::overlapVoteKernels()) {
    if (backwardOnly)
      break;
    if (only && k.id.find(only) == std::string::npos)
      continue;
    flashjit::GpuCompileOptions ov;
    ov.arch = o.arch;
    if (ov.arch == "sm_90a")
      ov.mma = flashjit::GpuMma::WgmmaTmaWsOverlap;
    write(dir, k.id, flashjit::compileGpu(k.spec, ov));
    flashjit::setMaskedValuePublishedVoteForTesting(true);
    flashjit::GpuKernelImage pub = flashjit::compileGpu(k.spec, ov);
    flashjit::setMaskedValuePublishedVoteForTesting(false);
    write(dir, k.id + "_pubvote", pub);
    flashjit::setMaskedValueTileVoteForTesting(true);
    flashjit::GpuKernelImage img = flashjit::compileGpu(k.spec, ov);
    flashjit::setMaskedValueTileVoteForTesting(false);
    write(dir, k.id + "_tilevote", img);
    n += 3;
  }
  // The overlap with the inter-warpgroup ping-pong by name (sm_90a; the
  // default elsewhere), whatever MMA the matrix is built with.
  for (const auto &k : flashjit::testing::pingPongKernels()) {
    if (backwardOnly)
      break;
    if (only && k.id.find(only) == std::string::npos)
      continue;
    flashjit::GpuCompileOptions pp;
    pp.arch = o.arch;
    if (pp.arch == "sm_90a")
      pp.mma = flashjit::GpuMma::WgmmaTmaWsPingPong;
    write(dir, k.id, flashjit::compileGpu(k.spec, pp));
    ++n;
  }
  // The same specs with the in-tile vote (`<id>_tilevote`), which the
  // [gpu][masked] tests compare with the kernels that check their results.
  for (const auto &k : flashjit::testing::resultCheckKernels()) {
    if (backwardOnly)
      break;
    if (only && k.id.find(only) == std::string::npos)
      continue;
    flashjit::setMaskedValueTileVoteForTesting(true);
    flashjit::GpuKernelImage img =
        flashjit::compileGpu(k.spec, forSpec(k.spec));
    flashjit::setMaskedValueTileVoteForTesting(false);
    write(dir, k.id + "_tilevote", img);
    ++n;
  }
  if (only) {
    std::printf("%d kernels written to %s\n", n, dir.c_str());
    return 0;
  }
  // Block-sparse / varlen kernels: the .info line also has block_n, varlen
  // and block_sparse.
  for (const auto &k : flashjit::testing::sparseKernels()) {
    if (backwardOnly)
      break;
    flashjit::GpuCompileOptions so = forSpec(k.spec, k.varlen, k.blockSparse);
    write(dir, k.id, flashjit::compileGpu(k.spec, so), /*sparse=*/true);
    ++n;
  }
  // Attention-sink kernels (issue 22), written like the sparse ones.
  for (const auto &k : flashjit::testing::sinkKernels()) {
    if (backwardOnly)
      break;
    flashjit::GpuCompileOptions so = o;
    so.varlen = k.varlen;
    so.blockSparse = k.blockSparse;
    write(dir, k.id, flashjit::compileGpu(k.spec, so), /*sparse=*/true);
    ++n;
  }
  // fp8 kernels (issue 18; sm_90a only), the default instructions, written
  // like the sparse ones; only with the default MMA (the other MMAs'
  // matrices stay as they were).
  for (const auto &k : flashjit::testing::fp8Kernels()) {
    if (backwardOnly || o.arch != "sm_90a" ||
        o.mma != flashjit::GpuMma::Default)
      break;
    flashjit::GpuCompileOptions so;
    so.arch = o.arch;
    so.varlen = k.varlen;
    so.blockSparse = k.blockSparse;
    // `_noiso`: the timing baseline without masked-key isolation.
    const bool noIso = k.id.ends_with("_noiso");
    if (noIso)
      flashjit::setMaskedValueIsolationForTesting(false);
    flashjit::GpuKernelImage img = flashjit::compileGpu(k.spec, so);
    if (noIso)
      flashjit::setMaskedValueIsolationForTesting(true);
    write(dir, k.id, img, /*sparse=*/true);
    ++n;
  }
  // Ring kernels (issue 20): the ring spec of each, written like the sparse
  // ones.
  for (const auto &k : flashjit::testing::ringKernels()) {
    if (backwardOnly)
      break;
    write(dir, k.id,
          flashjit::compileGpu(flashjit::testing::ringKernelSpec(k.spec), o),
          /*sparse=*/true);
    ++n;
  }
  // Varlen ring kernels (issue 20): the varlen forward of each ring spec.
  for (const auto &k : flashjit::testing::ringVarlenKernels()) {
    if (backwardOnly)
      break;
    flashjit::GpuCompileOptions vo = o;
    vo.varlen = true;
    write(dir, k.id,
          flashjit::compileGpu(flashjit::testing::ringKernelSpec(k.spec), vo),
          /*sparse=*/true);
    ++n;
  }
  // Ring backward kernels (issue 20): the backward of each ring spec.
  for (const auto &k : flashjit::testing::ringBackwardKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    write(dir, k.id,
          flashjit::compileGpu(flashjit::testing::ringKernelSpec(k.spec), bo),
          /*sparse=*/true);
    ++n;
  }
  // Varlen ring backward kernels (issue 20).
  for (const auto &k : flashjit::testing::ringVarlenBackwardKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    bo.varlen = true;
    write(dir, k.id,
          flashjit::compileGpu(flashjit::testing::ringKernelSpec(k.spec), bo),
          /*sparse=*/true);
    ++n;
  }
  // Masked-value backward kernels (issue 21 section 3; the forward ones
  // above).
  for (const auto &k : flashjit::testing::maskedValueKernels(true)) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
    ++n;
  }
  // Head dims that are not multiples of 16 (issue 16), written like the
  // sparse ones; mma.sync on every arch (the default and the only MMA that
  // takes them).
  for (const auto &k : flashjit::testing::paddedKernels()) {
    if (backwardOnly)
      break;
    flashjit::GpuCompileOptions so = o;
    so.mma = flashjit::GpuMma::Default;
    so.varlen = k.varlen;
    so.blockSparse = k.blockSparse;
    write(dir, k.id, flashjit::compileGpu(k.spec, so), /*sparse=*/true);
    ++n;
  }
  // Backward kernels (bwdMma; .info as the sparse ones).
  for (const auto &k : flashjit::testing::backwardKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
    ++n;
  }
  // Varlen backward kernels.
  for (const auto &k : flashjit::testing::backwardVarlenKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    bo.varlen = true;
    write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
    ++n;
  }
  // Block-sparse backward kernels (varlen too for ids bwdbsvl_).
  for (const auto &k : flashjit::testing::backwardSparseKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    bo.blockSparse = true;
    bo.varlen = k.id.rfind("bwdbsvl_", 0) == 0;
    write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
    ++n;
  }
  // Timing kernels: forward <id>_fwd and backward <id>.
  for (const auto &k : flashjit::testing::benchKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    auto endsWith = [&](const std::string &tail) {
      return k.id.size() > tail.size() &&
             k.id.compare(k.id.size() - tail.size(), tail.size(), tail) == 0;
    };
    // `_noftz`: the softmax exponentials without ftz (before session 18).
    flashjit::setSoftmaxExp2FtzForTesting(!endsWith("_noftz"));
    write(dir, k.id + "_fwd", flashjit::compileGpu(k.spec, bo));
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    // `_sync`: the synchronous backward tile step (the old default with
    // mask or modifier code at head dim 128).
    bo.syncBackward = endsWith("_sync");
    // `_noscan`: the tile loop through every query tile (before session 20).
    flashjit::setTileRangeBackwardForTesting(!endsWith("_noscan"));
    // `_loadfirst`: loads and dS^T stores before the products (before
    // session 21).
    flashjit::setProductsFirstBackwardForTesting(!endsWith("_loadfirst"));
    // `_lateload`: a masked kernel with the loads after the products too.
    flashjit::setMaskedLoadsAfterProductsBackwardForTesting(
        endsWith("_lateload"));
    // `_scan`: the visited-range loop above head dim 64.
    flashjit::setTileRangeWideBackwardForTesting(endsWith("_scan"));
    write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
    flashjit::setTileRangeWideBackwardForTesting(false);
    flashjit::setMaskedLoadsAfterProductsBackwardForTesting(false);
    flashjit::setProductsFirstBackwardForTesting(true);
    flashjit::setTileRangeBackwardForTesting(true);
    flashjit::setSoftmaxExp2FtzForTesting(true);
    n += 2;
  }
  // Block-sparse timing kernels: forward <id>_fwd, backward <id> (bwdMma),
  // <id>_nopf (bwdMma without the listed-tile prefetch), <id>_noftz (bwdMma
  // with the softmax exponentials without ftz) and <id>_mma (mma.sync, the
  // old paths).
  for (const auto &k : flashjit::testing::sparseBenchKernels()) {
    if (skip(k.id))
      continue;
    flashjit::GpuCompileOptions bo;
    bo.arch = o.arch;
    bo.blockSparse = true;
    write(dir, k.id + "_fwd", flashjit::compileGpu(k.spec, bo), true);
    bo.kind = flashjit::KernelKind::Backward;
    bo.mma = bwdMma;
    write(dir, k.id, flashjit::compileGpu(k.spec, bo), /*sparse=*/true);
    // `_nopf`: the same without the listed-tile prefetch (session 16's).
    flashjit::setListedPrefetchBackwardForTesting(false);
    write(dir, k.id + "_nopf", flashjit::compileGpu(k.spec, bo), true);
    flashjit::setListedPrefetchBackwardForTesting(true);
    // `_noftz`: ex2.approx.f32 (session 17's exponentials).
    flashjit::setSoftmaxExp2FtzForTesting(false);
    write(dir, k.id + "_noftz", flashjit::compileGpu(k.spec, bo), true);
    flashjit::setSoftmaxExp2FtzForTesting(true);
    bo.mma = flashjit::GpuMma::MmaSync;
    write(dir, k.id + "_mma", flashjit::compileGpu(k.spec, bo), true);
    n += 5;
  }
  // Option kernels (sm_90a only: wgmma and the mma choice exist there).
  for (const auto &k : flashjit::testing::optionKernels()) {
    if (o.arch != "sm_90a" || o.mma != flashjit::GpuMma::Default ||
        backwardOnly || tma)
      break;
    write(dir, k.id,
          flashjit::compileGpu(k.spec, flashjit::testing::options(k)));
    ++n;
  }
  std::printf("%d kernels written to %s\n", n, dir.c_str());
  return 0;
}
