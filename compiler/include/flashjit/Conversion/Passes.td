//===- Passes.td - flashjit conversion passes --------------*- tablegen -*-===//
#ifndef FLASHJIT_CONVERSION_PASSES
#define FLASHJIT_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def ConvertAttnToSCF : Pass<"convert-attn-to-scf"> {
  let summary = "lowers attn tile ops to scalar loops for the CPU";
  let description = [{
    Each tile op becomes scf.for loops over memref.load/store and arith/math
    (global memory through llvm.getelementptr/llvm.load/llvm.store on the
    kernel's plain pointers). The mask and score regions of
    attn.mask_select / attn.score_mod are inlined into the element loops.
    Reductions carry `reassoc` fast-math flags so LLVM can vectorise them.

    Before:
    ```mlir
    attn.row_sum %p into %l : memref<64x64xf32>, memref<64xf32>
    ```
    After:
    ```mlir
    scf.for %i = %c0 to %c64 step %c1 {
      %s = scf.for %j = ... iter_args(%acc = %l_i) -> f32 { ... arith.addf ... }
      memref.store %s, %l[%i] : memref<64xf32>
    }
    ```
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

#endif // FLASHJIT_CONVERSION_PASSES
