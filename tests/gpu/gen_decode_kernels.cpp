//===- gen_decode_kernels.cpp - The decode kernels, ahead of time ---------===//
//
// Writes DIR/<id>.ptx and DIR/<id>.info (gen_matrix_kernels' line, read
// by test::readKernelInfo, with "decode_stages=N" last) for every kernel of
// decodeKernels(), compiled with GpuCompileOptions::kind =
// KernelKind::Decode and the kernel's decodeStages for sm_90a (the
// `_serialmerge` ids with setDecodeSerialMergeForTesting on).
//
//===----------------------------------------------------------------------===//
#include "DecodeKernels.h"
#include "OutputFiles.h"

#include "flashjit/compiler/DecodeMergeTesting.h"
#include "flashjit/compiler/GpuCompiler.h"

#include <cstdio>
#include <sstream>
#include <string>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 1;
  }
  std::string dir = argv[1];
  flashjit::testing::makeOutputDir(argv[0], dir);
  flashjit::GpuCompileOptions o;
  o.arch = "sm_90a";
  o.kind = flashjit::KernelKind::Decode;
  for (const auto &k : flashjit::testing::decodeKernels()) {
    o.decodeStages = k.stages;
    flashjit::setDecodeSerialMergeForTesting(k.serialMerge);
    flashjit::GpuKernelImage img = flashjit::compileGpu(k.spec, o);
    flashjit::setDecodeSerialMergeForTesting(false);
    flashjit::testing::writeOutputFile(dir + "/" + k.id + ".ptx", img.ptx);
    // The .info line of gen_matrix_kernels (test::readKernelInfo).
    const flashjit::KernelConfig &c = img.config;
    std::ostringstream info;
    info << img.name << ' ' << c.arch << ' ' << c.numWarps << ' '
         << c.rowsPerWarp << ' ' << c.minBlocksPerSM << ' ' << c.wgmma << ' '
         << c.blockN << ' ' << c.varlen << ' ' << c.blockSparse << ' '
         << img.sharedBytes << ' ' << flashjit::toString(c.kind);
    if (c.decodeStages)
      info << " decode_stages=" << c.decodeStages;
    info << '\n';
    flashjit::testing::writeOutputFile(dir + "/" + k.id + ".info", info.str());
  }
  std::printf("%zu decode kernels in %s\n",
              flashjit::testing::decodeKernels().size(), dir.c_str());
  return 0;
}
