//===- MLIRGen.h - Frontend expression trees to the attn dialect -*- C++
//-*-===//
//
// The one place where the frontend's expression tree becomes MLIR: an
// AttentionSpec becomes a module holding one attn.attention op whose mask and
// score regions are the user's expressions, each op located at the user's
// source line. Compiler-internal (includes MLIR).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTENDTOMLIR_MLIRGEN_H
#define FLASHJIT_FRONTENDTOMLIR_MLIRGEN_H

#include "flashjit/frontend/Variant.h"
#include "flashjit/runtime/KernelAbi.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace flashjit {

/// Builds `module { attn.attention @<variant name> ... }` for \p spec (which
/// must be valid: call spec.validate() first). With KernelKind::Backward the
/// op also carries the score_grad region (the score modifier's symbolic
/// derivative; AttnOps.td states its semantics). With \p gradOfOutput (GPU
/// backward kernels that recover the modified score from P) a score_grad
/// that reads the score is written in the modifier's output where
/// derivativeInOutput can, and the op marked score_grad_of_output; else as
/// without it. Returns null after emitting a diagnostic if the result does
/// not verify. Throws UserError (at the user's line) for a backward of a
/// modifier that cannot be differentiated.
mlir::OwningOpRef<mlir::ModuleOp> mlirGen(mlir::MLIRContext &context,
                                          const AttentionSpec &spec,
                                          KernelKind kind = KernelKind::Forward,
                                          bool gradOfOutput = false);

} // namespace flashjit

#endif // FLASHJIT_FRONTENDTOMLIR_MLIRGEN_H
