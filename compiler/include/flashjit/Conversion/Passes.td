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

def ConvertAttnToNVVM : Pass<"convert-attn-to-nvvm", "::mlir::ModuleOp"> {
  let summary = "turns attn.attention into a FlashAttention-style GPU kernel";
  let description = [{
    Replaces each `attn.attention @f` by the kernel `gpu.func @f` in
    `gpu.module @flashjit_kernels`: Q tile per CTA, 16 or 32 query rows per
    warp, K/V tiles double-buffered in shared memory through `cp.async`,
    `ldmatrix` fragments and `mma.sync m16n8k16` (bf16/fp16, fp32
    accumulators) or, with `wgmma=true` (sm_90a), `wgmma.mma_async` per
    warpgroup on 128-byte-swizzled tiles (inline PTX), the score modifier
    and mask inlined on the accumulator fragments, online
    softmax with exp2, and run-time tile classification (full tiles run no
    mask code, empty tiles are never loaded). attn.div/rem/fptosi_sat stay
    for attn-expand-scalar; the rest are nvvm/llvm/arith/scf ops that
    MLIR's gpu-lower-to-nvvm pipeline takes to PTX.

    Before:
    ```mlir
    attn.attention @causal {...} mask { ... attn.yield %m : i1 } score { ... }
    ```
    After:
    ```mlir
    gpu.module @flashjit_kernels {
      gpu.func @causal(%q: !llvm.ptr<1>, ...) kernel { ... nvvm.mma.sync ... }
    }
    ```
  }];
  let options = [
    Option<"blockN", "block-n", "int", /*default=*/"64",
           "keys per tile (a multiple of 16)">,
    Option<"numWarps", "num-warps", "int", /*default=*/"4",
           "warps per CTA (4 or 8), 16 query rows each">,
    Option<"minBlocksPerSM", "min-blocks-per-sm", "int", /*default=*/"1",
           "CTAs per SM the register allocation must allow">,
    Option<"rowsPerWarp", "rows-per-warp", "int", /*default=*/"16",
           "query rows per warp: 16 (one m16 tile) or 32 (two)">,
    Option<"varlen", "varlen", "bool", /*default=*/"false",
           "packed variable-length sequences (cu_seqlens arguments)">,
    Option<"blockSparse", "block-sparse", "bool", /*default=*/"false",
           "visit the key tiles of a block mask; also emit the block-mask "
           "builder kernel @<name>_block_mask">,
    Option<"backward", "backward", "bool", /*default=*/"false",
           "build the backward kernels @<name>_bwd_pre, @<name>_bwd and "
           "@<name>_bwd_post instead of the forward (mma.sync; block-n: "
           "query rows per tile, num-warps * 16 keys per CTA)">,
    Option<"decode", "decode", "bool", /*default=*/"false",
           "build the split-KV decode kernel @<name>_decode over a paged KV "
           "cache and its merge kernel @<name>_decode_merge instead of the "
           "forward (mma.sync, rows-per-warp 16)">,
    Option<"wgmma", "wgmma", "bool", /*default=*/"false",
           "sm_90a warpgroup MMA (wgmma.mma_async) instead of mma.sync: "
           "rows-per-warp 16, num-warps 4 or 8, head dims multiples of 64">,
    Option<"tma", "tma", "bool", /*default=*/"false",
           "with wgmma, dense forward only: Q, K and V loaded by TMA "
           "(cp.async.bulk.tensor, mbarrier completion) through tensor-map "
           "arguments">,
    Option<"warpSpecialized", "warp-specialized", "bool", /*default=*/"false",
           "with tma: one producer warpgroup issues the TMA loads into the "
           "K/V ring (mbarrier full/empty pairs per stage), the num-warps "
           "consumer warps compute; setmaxnreg 24 / 240">,
    Option<"overlapSoftmax", "overlap-softmax", "bool", /*default=*/"false",
           "with warp-specialized: FlashAttention-3's intra-warpgroup "
           "overlap (two wgmma groups in flight: a tile's S = Q K^T and the "
           "previous tile's P V; the softmax runs while P V does)">,
    Option<"pingPong", "ping-pong", "bool", /*default=*/"false",
           "with overlap-softmax and two consumer warpgroups: "
           "FlashAttention-3's inter-warpgroup ping-pong (the warpgroups "
           "take turns to issue their products through named barriers 2 "
           "and 3)">,
    Option<"decodeStages", "decode-stages", "int", /*default=*/"0",
           "with decode: K/V cp.async stages, 2 (0 reads as 2) or 3 (Q "
           "overlaid on the third stage, one barrier per key tile; "
           "head dim qk at most 128)">,
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "target, sm_80 or sm_90a (give the PTX pipeline's): decode "
           "kernels for sm_90a carry the programmatic dependent launch "
           "controls (griddepcontrol), sm_80 has none">,
    Option<"syncBackward", "sync-backward", "bool", /*default=*/"false",
           "with backward and wgmma: the synchronous tile step for mask or "
           "score-modifier code at head dims above 64 (not split, not "
           "block-sparse) instead of the pipelined one">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

#endif // FLASHJIT_CONVERSION_PASSES
