//===- Passes.h - attn dialect passes -----------------------------*- C++
//-*-===//
#ifndef FLASHJIT_DIALECT_ATTN_TRANSFORMS_PASSES_H
#define FLASHJIT_DIALECT_ATTN_TRANSFORMS_PASSES_H

#include "flashjit/Dialect/Attn/IR/Attn.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace flashjit::attn {

#define GEN_PASS_DECL
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashjit/Dialect/Attn/Transforms/Passes.h.inc"

} // namespace flashjit::attn

#endif // FLASHJIT_DIALECT_ATTN_TRANSFORMS_PASSES_H
