//===- AttnDialect.td - The attn dialect -------------------*- tablegen -*-===//
//
// The attn dialect holds attention at two levels: `attn.attention`, one op
// per kernel whose regions are the user's mask and score modifier, and the
// tile-level ops (load tile, dot, row max, exp2, rescale, masked select,
// store) of a FlashAttention-2 forward program that the backends lower.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_ATTN_DIALECT
#define FLASHJIT_ATTN_DIALECT

include "mlir/IR/OpBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::flashjit::attn";
  let summary = "Attention kernels: the DSL's semantics and FlashAttention tiles";
  let description = [{
    Two levels. `attn.attention` declares one attention kernel: its static
    shape parameters as attributes and the user's mask and score modifier as
    regions built from `arith`/`math` ops plus the few `attn` scalar ops whose
    semantics the standard dialects lack (division by zero gives 0,
    saturating float-to-int casts, runtime parameters, captured buffers).

    The tile level is a FlashAttention-2 forward program over memref tiles in
    destination-passing style: the `attn-tile` pass produces it and the
    backends (`convert-attn-to-scf` for the CPU) lower it.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

#endif // FLASHJIT_ATTN_DIALECT
