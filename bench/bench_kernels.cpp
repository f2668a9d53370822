//===- bench_kernels.cpp - Generate the benchmark's kernels ---------------===//
//
// Writes <dir>/<variant>_d<D>.ptx and <dir>/manifest.json for the benchmark
// variants (dense, causal, causal sliding window 1024, causal + softcap 30,
// ALiBi) at head dims 64, 128 and 256, bf16, for sm_90a. The GPU machine
// has no MLIR, so kernels are generated here and carried (bench/README.md).
// Usage: bench_kernels DIR
//
//===----------------------------------------------------------------------===//
#include "flashjit/compiler/GpuCompiler.h"
#include "flashjit/frontend/Library.h"
#include "flashjit/frontend/Printer.h"
#include "flashjit/runtime/Ptxas.h"

#include <cstdio>
#include <fstream>
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
  s.variant = v;
  s.headDimQK = s.headDimV = d;
  s.headsQ = s.headsKV = 2048 / d; // hidden 2048
  return s;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 1;
  }
  std::string dir = argv[1];
  // --tiles: also each tile configuration of the experiment list for every
  // variant, labelled w<warps>r<rows per warp>n<block_n>m<min CTAs per SM>.
  bool tiles = argc > 2 && std::string(argv[2]) == "--tiles";
  struct Job {
    std::string name;
    int d;
    GpuCompileOptions options;
    std::string label;
  };
  std::vector<Job> jobs;
  for (std::string name : {"dense", "causal", "swa1024", "softcap30", "alibi"})
    for (int d : {64, 128, 256})
      jobs.push_back({name, d, {}, "default"});
  struct Tile {
    int d, warps, rows, blockN, minBlocks;
  };
  const Tile experiment[] = {{64, 4, 32, 64, 1},  {64, 4, 32, 64, 2},
                             {64, 4, 32, 128, 1}, {64, 8, 16, 64, 2},
                             {128, 4, 32, 64, 1}, {128, 4, 32, 32, 1},
                             {128, 8, 32, 64, 1}, {256, 8, 16, 64, 1},
                             {256, 4, 16, 64, 1}, {256, 8, 16, 32, 1}};
  if (tiles)
    for (std::string name :
         {"dense", "causal", "swa1024", "softcap30", "alibi"})
      for (const Tile &t : experiment) {
        GpuCompileOptions o;
        o.numWarps = t.warps;
        o.rowsPerWarp = t.rows;
        o.blockN = t.blockN;
        o.minBlocksPerSM = t.minBlocks;
        jobs.push_back({name, t.d, o,
                        "w" + std::to_string(t.warps) + "r" +
                            std::to_string(t.rows) + "n" +
                            std::to_string(t.blockN) + "m" +
                            std::to_string(t.minBlocks)});
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
        img = compileGpu(spec, job.options);
      } catch (const UserError &e) { // e.g. too much shared memory
        std::printf("%-10s d%-4d %-14s skipped: %s\n", name.c_str(), d,
                    job.label.c_str(), e.what());
        continue;
      }
      std::string file =
          name + "_d" + std::to_string(d) + "_" + job.label + ".ptx";
      std::ofstream(dir + "/" + file) << img.ptx;
      runtime::PtxasReport r = runtime::runPtxas(img.ptx, img.arch);
      const runtime::PtxasFunctionReport *f = r.find(img.name);
      manifest << (first ? "" : ",\n") << "  {\"variant\": \"" << name
               << "\", \"D\": " << d << ", \"ptx\": \"" << file
               << "\", \"kernel\": \"" << img.name
               << "\", \"threads\": " << img.threads
               << ", \"block_m\": " << img.blockM
               << ", \"block_n\": " << img.blockN
               << ", \"smem\": " << img.sharedBytes
               << ", \"registers\": " << (f ? f->registers : -1)
               << ", \"spill_bytes\": "
               << (f ? f->spillStoreBytes + f->spillLoadBytes : -1)
               << ", \"label\": \"" << job.label << "\""
               << ", \"compile_s\": " << img.timings.back().seconds
               << ", \"scale\": " << spec.effectiveScale() << ", \"spec\": \""
               << printSpec(spec) << "\"}";
      first = false;
      std::printf("%-10s d%-4d %-14s %3d threads  block %dx%d  smem %6d  regs "
                  "%d  spills %d\n",
                  name.c_str(), d, job.label.c_str(), img.threads, img.blockM,
                  img.blockN, img.sharedBytes, f ? f->registers : -1,
                  f ? f->spillStoreBytes + f->spillLoadBytes : -1);
    }
  }
  manifest << "\n]\n";
  return 0;
}
