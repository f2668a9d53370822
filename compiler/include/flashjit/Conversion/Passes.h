//===- Passes.h - flashjit conversion passes --------------------*- C++ -*-===//
#ifndef FLASHJIT_CONVERSION_PASSES_H
#define FLASHJIT_CONVERSION_PASSES_H

#include "flashjit/Dialect/Attn/IR/Attn.h"
#include "flashjit/runtime/KernelAbi.h"

#include "mlir/Pass/Pass.h"

namespace flashjit {

#define GEN_PASS_DECL
#include "flashjit/Conversion/Passes.h.inc"

/// The convert-attn-to-nvvm options of a kernel configuration, and back:
/// the one place where the pass's options and the kernel configuration
/// record meet (arch is not a pass option: the pass builds the same IR for
/// every target). \p options is anything with the pass's option members:
/// ConvertAttnToNVVMOptions, the pass itself, the attn-to-nvvm pipeline's
/// options.
ConvertAttnToNVVMOptions toPassOptions(const KernelConfig &config);
template <class Options> KernelConfig fromPassOptions(const Options &options) {
  KernelConfig c;
  c.blockN = options.blockN;
  c.numWarps = options.numWarps;
  c.minBlocksPerSM = options.minBlocksPerSM;
  c.rowsPerWarp = options.rowsPerWarp;
  c.varlen = options.varlen;
  c.blockSparse = options.blockSparse;
  c.wgmma = options.wgmma;
  c.tma = options.tma;
  c.warpSpecialized = options.warpSpecialized;
  c.overlapSoftmax = options.overlapSoftmax;
  c.pingPong = options.pingPong;
  c.decodeStages = options.decodeStages;
  c.syncBackward = options.syncBackward;
  c.arch = options.arch;
  c.kind = options.backward ? KernelKind::Backward
           : options.decode ? KernelKind::Decode
                            : KernelKind::Forward;
  return c;
}

#define GEN_PASS_REGISTRATION
#include "flashjit/Conversion/Passes.h.inc"

} // namespace flashjit

#endif // FLASHJIT_CONVERSION_PASSES_H
