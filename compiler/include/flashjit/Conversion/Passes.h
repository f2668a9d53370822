//===- Passes.h - flashjit conversion passes ----------------------*- C++
//-*-===//
#ifndef FLASHJIT_CONVERSION_PASSES_H
#define FLASHJIT_CONVERSION_PASSES_H

#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/Pass/Pass.h"

namespace flashjit {

#define GEN_PASS_DECL
#include "flashjit/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashjit/Conversion/Passes.h.inc"

} // namespace flashjit

#endif // FLASHJIT_CONVERSION_PASSES_H
