//===- OptionKernelOptions.h - GpuCompileOptions of an OptionKernel -------===//
//
// The compile options of KernelMatrix.h's option kernels, for the code that
// compiles them (gen_matrix_kernels, the code-generation test); the [gpu]
// tests need only KernelMatrix.h.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_TESTS_SUPPORT_OPTIONKERNELOPTIONS_H
#define FLASHJIT_TESTS_SUPPORT_OPTIONKERNELOPTIONS_H

#include "KernelMatrix.h"

#include "flashjit/compiler/GpuCompiler.h"

namespace flashjit::testing {

/// sm_90a options of \p k.
inline GpuCompileOptions options(const OptionKernel &k) {
  GpuCompileOptions o;
  o.arch = "sm_90a";
  o.mma = GpuMma::Default;
  for (GpuMma m :
       {GpuMma::MmaSync, GpuMma::Wgmma, GpuMma::WgmmaTma, GpuMma::WgmmaTmaWs,
        GpuMma::WgmmaTmaWsOverlap, GpuMma::WgmmaTmaWsPingPong})
    if (k.mma == toString(m))
      o.mma = m;
  o.blockN = k.blockN;
  o.numWarps = k.numWarps;
  return o;
}

} // namespace flashjit::testing

#endif // FLASHJIT_TESTS_SUPPORT_OPTIONKERNELOPTIONS_H
