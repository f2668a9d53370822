//===- bench_kernels.cpp - Generate the benchmark's kernels ---------------===//
//
// Writes <dir>/<variant>_d<D>.ptx and <dir>/manifest.json for the benchmark
// variants (dense, causal, causal sliding window 1024, causal + softcap 30,
// ALiBi) at head dims 64, 128 and 256, and dense with an attention sink
// (dense_sink) at 128, bf16, for sm_90a. The GPU machine
// has no MLIR, so kernels are generated here and carried (bench/RESULTS.md).
// Usage: bench_kernels DIR [--tiles] [--sparse]
// The sm_90a defaults load by TMA (the manifest's "tma": 1 tells
// run_bench.py to pass tensor maps); beside each dense and causal default
// kernel: the same with cp.async loads (mma wgmma, label "cpasync"); beside
// each default kernel: the same with the softmax exponentials as
// ex2.approx.f32 (label "noftz": setSoftmaxExp2FtzForTesting off, the
// kernels before session 18; run_bench.py --labels default,noftz). ALiBi
// also as before session 27 (label "perelem": ScoreFactorTesting.h's
// hooks off, its old tiles and step).
//
// --sparse also writes the issue-7 kernels and <dir>/block_sparse.json for
// bench/run_block_sparse.py: the document-causal mask with and without a
// block mask (the block-sparse PTX also holds the builder
// `<name>_block_mask`) and the unmasked kernel with and without a block mask,
// each pair with the same tile configuration.
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/Exp2Testing.h"
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/compiler/ScoreFactorTesting.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/KernelAbi.h"
#include "flashjit/runtime/Ptxas.h"

#include "OutputFiles.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace flashjit;

static AttentionSpec benchSpec(const std::string &name, int d) {
  AttentionSpec s;
  Variant v(name);
  if (name == "causal")
    s.causal = Causal::TopLeft;
  else if (name == "swa1024") // FlexAttention's q - kv < 1024 && q >= kv
    v.mask(sliding_window(1023, 0, Alignment::TopLeft));
  else if (name == "softcap30") {
    v.scoreMod(softcap(30.0f));
    s.causal = Causal::TopLeft;
  } else if (name == "alibi")
    v.scoreMod(alibi(buffer<float>("slopes")));
  else if (name == "dense_sink") // issue 22: dense with an attention sink
    s.sink = true;
  s.variant = v;
  s.headDimQK = s.headDimV = d;
  s.headsQ = s.headsKV = 2048 / d; // hidden 2048
  return s;
}

// The issue-7 kernels (--sparse): bench/run_block_sparse.py launches them
// with the argument lists of runtime/KernelAbi.h (abi::gpu: forward and
// block-mask builder) and reads everything it needs from block_sparse.json.
namespace {

/// Threads per CTA of the block-mask builder (KernelAbi.h). The PTX's
/// .reqntid/.maxntid of the builder, when present, is checked against it.
constexpr int kBuilderThreads = flashjit::abi::gpu::kBlockMaskThreads;

/// The first number of the .reqntid or .maxntid directive of `.entry
/// <name>` in \p ptx, 0 if there is none; -1 if the entry does not exist.
int entryThreads(const std::string &ptx, const std::string &name) {
  size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos)
    return -1;
  size_t body = ptx.find('{', at);
  for (const char *d : {".reqntid", ".maxntid"}) {
    size_t p = ptx.find(d, at);
    if (p != std::string::npos && p < body)
      return std::atoi(ptx.c_str() + p + std::string(d).size());
  }
  return 0;
}

/// \p scale with every digit of its f32 value (the launch passes it back).
std::string scaleText(float scale) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(scale));
  return buf;
}

std::string jsonList(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? ", \"" : "\"") + names[i] + "\"";
  return out + "]";
}

/// doc_id[q_idx] == doc_id[kv_idx] with top-left causal (FlexAttention's
/// document mask with q_idx >= kv_idx), or no mask at all.
AttentionSpec sparseSpec(bool document, int d) {
  AttentionSpec s;
  Variant v(document ? "doc_causal" : "dense");
  if (document) {
    Buffer doc = buffer<int32_t>("doc_id");
    v.mask(doc[q_idx] == doc[kv_idx]);
    s.causal = Causal::TopLeft;
  }
  s.variant = v;
  s.headDimQK = s.headDimV = d;
  s.headsQ = s.headsKV = 2048 / d; // hidden 2048
  return s;
}

} // namespace

/// Writes the issue-7 kernels and <dir>/block_sparse.json. Returns 0, or 3
/// if some kernel could not be generated (the others are still written).
static int writeSparseKernels(const std::string &dir) {
  struct Case {
    std::string variant; // the manifest's name (also the PTX file's)
    bool document, blockSparse;
  };
  const Case cases[] = {{"doc_causal_sparse", true, true},
                        {"doc_causal", true, false},
                        {"dense_sparse", false, true},
                        {"dense", false, false}};
  const std::string arch = "sm_90a";
  std::ofstream manifest(dir + "/block_sparse.json");
  manifest << "[\n";
  bool first = true;
  int failed = 0;
  for (int d : {128})
    for (const Case &c : cases) {
      AttentionSpec spec = sparseSpec(c.document, d);
      // The same tiles with and without the block mask, spelled out so that
      // a block-sparse default could not differ.
      GpuTileConfig tile = defaultGpuTileConfig(spec, arch);
      GpuCompileOptions o;
      o.arch = arch;
      o.blockN = tile.blockN;
      o.numWarps = tile.numWarps;
      o.rowsPerWarp = tile.rowsPerWarp;
      o.minBlocksPerSM = tile.minBlocksPerSM;
      o.blockSparse = c.blockSparse;
      std::string label = "w" + std::to_string(tile.numWarps) + "r" +
                          std::to_string(tile.rowsPerWarp) + "n" +
                          std::to_string(tile.blockN) + "m" +
                          std::to_string(tile.minBlocksPerSM);
      GpuKernelImage img;
      std::string builder;
      int builderThreads = 0;
      try {
        img = compileGpu(spec, o);
        if (c.blockSparse && !img.config.blockSparse)
          throw std::runtime_error("compileGpu ignored blockSparse");
        if (c.blockSparse) {
          builder = img.name + "_block_mask";
          builderThreads = entryThreads(img.ptx, builder);
          if (builderThreads < 0)
            throw std::runtime_error("the PTX has no .entry " + builder);
          if (builderThreads == 0)
            builderThreads = kBuilderThreads;
          if (builderThreads != kBuilderThreads)
            throw std::runtime_error(
                builder + " is built for " + std::to_string(builderThreads) +
                " threads, not " + std::to_string(kBuilderThreads));
        }
      } catch (const std::exception &e) {
        std::fprintf(stderr, "%-18s d%-4d %-10s FAILED: %s\n",
                     c.variant.c_str(), d, label.c_str(), e.what());
        ++failed;
        continue;
      }
      std::string file = c.variant + "_d" + std::to_string(d) + ".ptx";
      testing::writeOutputFile(dir + "/" + file, img.ptx);
      runtime::PtxasReport r;
      try { // the report is informative here; a ptxas failure is printed
        r = runtime::runPtxas(img.ptx, img.config.arch);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "%s: ptxas failed: %s\n", file.c_str(), e.what());
        ++failed;
      }
      const runtime::PtxasFunctionReport *f = r.find(img.name);
      const runtime::PtxasFunctionReport *fb =
          builder.empty() ? nullptr : r.find(builder);
      std::vector<std::string> params, buffers;
      for (const ParamDecl &p : spec.variant.params())
        params.push_back(p.name);
      for (const BufferDecl &b : spec.variant.buffers())
        buffers.push_back(b.name);
      manifest << (first ? "" : ",\n") << "  {\"variant\": \"" << c.variant
               << "\", \"D\": " << d << ", \"H\": " << spec.headsQ
               << ", \"ptx\": \"" << file << "\", \"kernel\": \"" << img.name
               << "\", \"block_sparse\": "
               << (img.config.blockSparse ? "true" : "false")
               << ", \"builder\": \"" << builder
               << "\", \"builder_threads\": " << builderThreads
               << ", \"builder_registers\": " << (fb ? fb->registers : -1)
               << ", \"builder_spill_bytes\": "
               << (fb ? fb->spillStoreBytes + fb->spillLoadBytes : -1)
               << ", \"threads\": " << img.config.threads()
               << ", \"block_m\": " << img.config.blockM()
               << ", \"block_n\": " << img.config.blockN
               << ", \"warps\": " << tile.numWarps
               << ", \"rows_per_warp\": " << tile.rowsPerWarp
               << ", \"min_blocks_per_sm\": " << tile.minBlocksPerSM
               << ", \"smem\": " << img.sharedBytes
               << ", \"registers\": " << (f ? f->registers : -1)
               << ", \"spill_bytes\": "
               << (f ? f->spillStoreBytes + f->spillLoadBytes : -1)
               << ", \"label\": \"" << label << "\""
               << ", \"params\": " << jsonList(params)
               << ", \"buffers\": " << jsonList(buffers)
               << ", \"compile_s\": " << img.timings.back().seconds
               << ", \"scale\": " << scaleText(spec.effectiveScale())
               << ", \"spec\": \"" << printSpec(spec) << "\"}";
      first = false;
      std::printf("%-18s d%-4d %-10s %3d threads  block %dx%d  smem %6d  regs "
                  "%d  spills %d%s%s\n",
                  c.variant.c_str(), d, label.c_str(), img.config.threads(),
                  img.config.blockM(), img.config.blockN, img.sharedBytes,
                  f ? f->registers : -1,
                  f ? f->spillStoreBytes + f->spillLoadBytes : -1,
                  builder.empty() ? "" : "  builder ", builder.c_str());
    }
  manifest << "\n]\n";
  testing::checkOutputStream(manifest, dir + "/block_sparse.json");
  return failed ? 3 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    // Also for -h / --help (not made into a directory of that name).
    std::fprintf(stderr, "usage: %s DIR [--tiles] [--sparse]\n", argv[0]);
    bool help = argc >= 2 && (std::string(argv[1]) == "-h" ||
                              std::string(argv[1]) == "--help");
    return help ? 0 : 1;
  }
  std::string dir = argv[1];
  testing::makeOutputDir(argv[0], dir);
  // --tiles: also each tile configuration of the experiment list for every
  // variant, labelled w<warps>r<rows per warp>n<block_n>m<min CTAs per SM>
  // (mma.sync) or wgw..n..m.. (wgmma).
  bool tiles = false, sparse = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tiles")
      tiles = true;
    else if (a == "--sparse")
      sparse = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 1;
    }
  }
  struct Job {
    std::string name;
    int d;
    GpuCompileOptions options;
    std::string label;
    bool ftz = true; ///< false: setSoftmaxExp2FtzForTesting(false)
    /// false: setForwardScoreRowFactorsForTesting(false)
    bool rowFactors = true;
    /// false: setForwardScoreFloatDistanceForTesting(false)
    bool floatDist = true;
  };
  std::vector<Job> jobs;
  for (std::string name : {"dense", "causal", "swa1024", "softcap30", "alibi"})
    for (int d : {64, 128, 256})
      jobs.push_back({name, d, {}, "default"});
  // Session 18: the default kernels with the softmax exponentials without
  // ftz (ex2.approx.f32), labelled "noftz".
  for (std::string name : {"dense", "causal", "swa1024", "softcap30", "alibi"})
    for (int d : {64, 128, 256})
      jobs.push_back({name, d, {}, "noftz", false});
  // Session 27: ALiBi as the default was before session 27, labelled
  // "perelem": slopes[head] read and |q_idx - kv_idx| converted per score
  // (setForwardScoreRowFactorsForTesting and
  // setForwardScoreFloatDistanceForTesting off), the serial step at head
  // dim 128 and 64-key tiles with 3 CTAs per SM at 64.
  for (int d : {64, 128, 256}) {
    GpuCompileOptions o;
    if (d == 64) {
      o.blockN = 64;
      o.minBlocksPerSM = 3;
    } else {
      o.mma = GpuMma::WgmmaTmaWs;
    }
    jobs.push_back({"alibi", d, o, "perelem", true, false, false});
  }
  for (std::string name : {"dense", "causal"})
    for (int d : {64, 128, 256}) {
      GpuCompileOptions o;
      o.mma = GpuMma::Wgmma;
      jobs.push_back({name, d, o, "cpasync"});
    }
  // Issue 16: the warp-specialised forward (two consumer warpgroups: at
  // head dim 64 block_m 128 against the default's one warpgroup of 64
  // rows), labelled "ws"; at head dim 64 also with 64-key tiles where a
  // mask or score modifier has code ("wsn64", the default's block_n there).
  for (std::string name : {"dense", "causal", "swa1024", "softcap30", "alibi"})
    for (int d : {64, 128, 256}) {
      GpuCompileOptions o;
      o.mma = GpuMma::WgmmaTmaWs;
      jobs.push_back({name, d, o, "ws"});
    }
  for (std::string name : {"causal", "swa1024", "softcap30", "alibi"}) {
    GpuCompileOptions o;
    o.mma = GpuMma::WgmmaTmaWs;
    o.blockN = 64;
    jobs.push_back({name, 64, o, "wsn64"});
  }
  // Three consumer warpgroups at head dim 64 (block_m 192, 512 threads,
  // setmaxnreg 24 / 160; FlashAttention-3's tiles there), labelled "ws3".
  for (std::string name :
       {"dense", "causal", "swa1024", "softcap30", "alibi"}) {
    GpuCompileOptions o;
    o.mma = GpuMma::WgmmaTmaWs;
    o.numWarps = 12;
    jobs.push_back({name, 64, o, "ws3"});
  }
  // Issue 16, session 16: the warp-specialised forward with
  // FlashAttention-3's intra-warpgroup overlap (3 K/V stages: head dims 64
  // and 128), labelled "overlap": run_bench.py --labels default,ws,overlap
  // times it beside the default and the serial tile step ("ws"; since
  // session 19 the default at D = 128 is the overlap for dense; since
  // session 20 also for softcap30 (a mask with a score modifier), since
  // session 22 for causal; swa1024 and ALiBi keep the serial step: "ws" is
  // the old kernel, "default" the new one).
  for (std::string name : {"dense", "causal", "swa1024", "softcap30", "alibi"})
    for (int d : {64, 128}) {
      GpuCompileOptions o;
      o.mma = GpuMma::WgmmaTmaWsOverlap;
      jobs.push_back({name, d, o, "overlap"});
    }
  // Issue 16, session 24: the overlap with FlashAttention-3's
  // inter-warpgroup ping-pong (the two consumer warpgroups take turns to
  // issue their products), labelled "pingpong": run_bench.py --labels
  // default,overlap,pingpong times it beside the overlap.
  for (std::string name : {"dense", "causal", "swa1024", "softcap30", "alibi"})
    for (int d : {64, 128}) {
      GpuCompileOptions o;
      o.mma = GpuMma::WgmmaTmaWsPingPong;
      jobs.push_back({name, d, o, "pingpong"});
    }
  // Issue 22: the cost of a sink (run_bench.py --variants dense,dense_sink
  // --d 128 --n 4096,16384 times it beside the dense kernel).
  jobs.push_back({"dense_sink", 128, {}, "default"});
  struct Tile {
    int d, warps, rows, blockN, minBlocks;
    GpuMma mma;
  };
  // mma.sync: the previous defaults and FlashAttention-2's tiles; wgmma:
  // two warpgroups per CTA, or one per CTA with 2-3 CTAs per SM (their
  // barriers do not hold the other CTA's warpgroup in step), and two
  // key-tile sizes per head dim.
  const GpuMma sync = GpuMma::MmaSync, wg = GpuMma::Wgmma;
  const Tile experiment[] = {
      {64, 4, 32, 64, 1, sync},  {64, 8, 16, 128, 1, wg},
      {64, 4, 16, 128, 1, wg},   {64, 8, 16, 64, 1, wg},
      {128, 4, 32, 32, 1, sync}, {128, 4, 32, 64, 1, sync},
      {128, 8, 16, 128, 1, wg},  {128, 8, 16, 64, 1, wg},
      {128, 4, 16, 128, 1, wg},  {128, 4, 16, 64, 2, wg},
      {256, 8, 16, 64, 1, sync}, {256, 8, 16, 64, 1, wg},
      {256, 4, 16, 32, 2, wg},   {256, 8, 16, 32, 1, wg},
      {64, 4, 16, 128, 2, wg},   {64, 4, 16, 64, 3, wg}};
  if (tiles)
    for (std::string name :
         {"dense", "causal", "swa1024", "softcap30", "alibi"})
      for (const Tile &t : experiment) {
        GpuCompileOptions o;
        o.numWarps = t.warps;
        o.rowsPerWarp = t.rows;
        o.blockN = t.blockN;
        o.minBlocksPerSM = t.minBlocks;
        o.mma = t.mma;
        std::string label = t.mma == wg ? "wg" : "";
        label += "w" + std::to_string(t.warps) + "r" + std::to_string(t.rows) +
                 "n" + std::to_string(t.blockN) + "m" +
                 std::to_string(t.minBlocks);
        jobs.push_back({name, t.d, o, label});
      }
  std::ofstream manifest(dir + "/manifest.json");
  manifest << "[\n";
  bool first = true;
  for (const Job &job : jobs) {
    {
      const std::string &name = job.name;
      int d = job.d;
      AttentionSpec spec = benchSpec(name, d);
      GpuKernelImage img;
      try {
        setSoftmaxExp2FtzForTesting(job.ftz);
        setForwardScoreRowFactorsForTesting(job.rowFactors);
        setForwardScoreFloatDistanceForTesting(job.floatDist);
        img = compileGpu(spec, job.options);
        setSoftmaxExp2FtzForTesting(true);
        setForwardScoreRowFactorsForTesting(true);
        setForwardScoreFloatDistanceForTesting(true);
      } catch (const UserError &e) { // e.g. too much shared memory
        setSoftmaxExp2FtzForTesting(true);
        setForwardScoreRowFactorsForTesting(true);
        setForwardScoreFloatDistanceForTesting(true);
        std::printf("%-10s d%-4d %-14s skipped: %s\n", name.c_str(), d,
                    job.label.c_str(), e.what());
        continue;
      }
      std::string file =
          name + "_d" + std::to_string(d) + "_" + job.label + ".ptx";
      testing::writeOutputFile(dir + "/" + file, img.ptx);
      runtime::PtxasReport r = runtime::runPtxas(img.ptx, img.config.arch);
      const runtime::PtxasFunctionReport *f = r.find(img.name);
      manifest << (first ? "" : ",\n") << "  {\"variant\": \"" << name
               << "\", \"D\": " << d << ", \"ptx\": \"" << file
               << "\", \"kernel\": \"" << img.name
               << "\", \"threads\": " << img.config.threads()
               << ", \"block_m\": " << img.config.blockM()
               << ", \"block_n\": " << img.config.blockN
               << ", \"smem\": " << img.sharedBytes
               << ", \"registers\": " << (f ? f->registers : -1)
               << ", \"spill_bytes\": "
               << (f ? f->spillStoreBytes + f->spillLoadBytes : -1)
               << ", \"label\": \"" << job.label << "\""
               << ", \"tma\": " << (img.config.tma ? 1 : 0)
               << ", \"ws\": " << (img.config.warpSpecialized ? 1 : 0)
               << ", \"compile_s\": " << img.timings.back().seconds
               << ", \"scale\": " << spec.effectiveScale() << ", \"spec\": \""
               << printSpec(spec) << "\"}";
      first = false;
      std::printf("%-10s d%-4d %-14s %3d threads  block %dx%d  smem %6d  regs "
                  "%d  spills %d\n",
                  name.c_str(), d, job.label.c_str(), img.config.threads(),
                  img.config.blockM(), img.config.blockN, img.sharedBytes,
                  f ? f->registers : -1,
                  f ? f->spillStoreBytes + f->spillLoadBytes : -1);
    }
  }
  manifest << "\n]\n";
  testing::checkOutputStream(manifest, dir + "/manifest.json");
  manifest.close();
  return sparse ? writeSparseKernels(dir) : 0;
}
