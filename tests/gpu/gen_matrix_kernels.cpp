//===- gen_matrix_kernels.cpp - Generate the matrix kernels ahead of time -===//
//
// Writes <dir>/<id>.ptx and <dir>/<id>.info ("name arch threads block_m
// shared_bytes") for every kernel of tests/support/KernelMatrix.h, so the
// [gpu] tests run them on a GPU machine that has no MLIR (the ahead-of-time
// flow a host application uses), and the block-sparse / varlen kernels of
// sparseKernels(), and (sm_90a) those of optionKernels(). Usage:
// gen_matrix_kernels DIR [ARCH [MMA]]; MMA (default, mma.sync or wgmma)
// applies to the matrix and sparse kernels (scripts/ptx-matrix.sh uses it
// to compare the PTX of every instruction kind before and after a change).
//
//===----------------------------------------------------------------------===//
#include "KernelMatrix.h"
#include "OptionKernelOptions.h"

#include "flashjit/compiler/GpuCompiler.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace {
/// Writes <dir>/<id>.ptx and <dir>/<id>.info ("name arch threads block_m
/// shared_bytes", then "block_n varlen block_sparse" when \p sparse).
void write(const std::string &dir, const std::string &id,
           const flashjit::GpuKernelImage &img, bool sparse = false) {
  std::ofstream(dir + "/" + id + ".ptx") << img.ptx;
  std::ofstream info(dir + "/" + id + ".info");
  info << img.name << ' ' << img.arch << ' ' << img.threads << ' ' << img.blockM
       << ' ' << img.sharedBytes;
  if (sparse)
    info << ' ' << img.blockN << ' ' << img.varlen << ' ' << img.blockSparse;
  info << '\n';
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr,
                 "usage: %s DIR [sm_80|sm_90a [default|mma.sync|wgmma]]\n",
                 argv[0]);
    return 1;
  }
  std::string dir = argv[1];
  flashjit::GpuCompileOptions o;
  o.arch = argc > 2 ? argv[2] : "sm_90a";
  if (argc > 3) {
    std::string mma = argv[3];
    if (mma == "mma.sync")
      o.mma = flashjit::GpuMma::MmaSync;
    else if (mma == "wgmma")
      o.mma = flashjit::GpuMma::Wgmma;
    else if (mma != "default") {
      std::fprintf(stderr, "unknown MMA '%s'\n", mma.c_str());
      return 1;
    }
  }
  int n = 0;
  for (const auto &k : flashjit::testing::kernelMatrix()) {
    write(dir, k.id, flashjit::compileGpu(k.spec, o));
    ++n;
  }
  // Block-sparse / varlen kernels: the .info line also has block_n, varlen
  // and block_sparse.
  for (const auto &k : flashjit::testing::sparseKernels()) {
    flashjit::GpuCompileOptions so = o;
    so.varlen = k.varlen;
    so.blockSparse = k.blockSparse;
    write(dir, k.id, flashjit::compileGpu(k.spec, so), /*sparse=*/true);
    ++n;
  }
  // Option kernels (sm_90a only: wgmma and the mma choice exist there).
  for (const auto &k : flashjit::testing::optionKernels()) {
    if (o.arch != "sm_90a" || o.mma != flashjit::GpuMma::Default)
      break;
    write(dir, k.id,
          flashjit::compileGpu(k.spec, flashjit::testing::options(k)));
    ++n;
  }
  std::printf("%d kernels written to %s\n", n, dir.c_str());
  return 0;
}
