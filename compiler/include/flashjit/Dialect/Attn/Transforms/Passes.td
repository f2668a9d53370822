//===- Passes.td - attn dialect passes ---------------------*- tablegen -*-===//
#ifndef FLASHJIT_ATTN_PASSES
#define FLASHJIT_ATTN_PASSES

include "mlir/Pass/PassBase.td"

def AttnTile : Pass<"attn-tile", "::mlir::ModuleOp"> {
  let summary = "turns attn.attention into a FlashAttention-2 tile program";
  let description = [{
    Replaces each `attn.attention @f` by `func.func @f` with the kernel ABI
    (plain pointers, sizes and strides as scalars) whose body runs the
    FlashAttention-2 forward algorithm for the work items
    `[item_begin, item_end)` (one item = one (batch, head, q tile)): load the
    Q tile; for each K/V tile, classify the tile at run time by interval
    arithmetic over the mask (see TileClassifier.h), skip empty tiles,
    apply the mask per element only on partial tiles, then online softmax
    with exp2 (log2(e) folded into the scale) and rescaled O; finally store
    O and LSE.

    With `varlen`, tensors are packed sequences (FlashAttention varlen) and
    each item reads its sequence's bounds from `cu_seqlens_q/k`; with
    `block-sparse`, the K/V loop visits only the partial and full tiles
    listed for the item's row of a block mask (FlexAttention's BlockMask),
    full ones without classification or mask code. KernelAbi.h states the
    extra arguments.

    Before:
    ```mlir
    attn.attention @causal {...} mask {...} score {...}
    ```
    After:
    ```mlir
    func.func @causal(%q: !llvm.ptr, ..., %item_begin: i64, %item_end: i64) {
      scf.for %item = ... {
        attn.load_tile ...
        scf.for %kt = ... {
          // classification, then attn.dot / attn.mask_select / attn.row_max /
          // attn.exp2 / attn.rescale / attn.row_sum / attn.dot
        }
        attn.store_tile ...
        attn.store_lse ...
      }
    }
    ```
  }];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"64",
           "queries per tile">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"64",
           "keys per tile">,
    Option<"countTiles", "count-tiles", "bool", /*default=*/"false",
           "count full/partial/empty tiles into the counters argument">,
    Option<"varlen", "varlen", "bool", /*default=*/"false",
           "packed variable-length sequences (cu_seqlens_q/k arguments)">,
    Option<"blockSparse", "block-sparse", "bool", /*default=*/"false",
           "visit only the tiles a block mask lists (block-mask arguments)">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def AttnTileBackward : Pass<"attn-tile-backward", "::mlir::ModuleOp"> {
  let summary = "turns a backward attn.attention into the CPU backward tiles";
  let description = [{
    Replaces each `attn.attention @f` that carries a `score_grad` region by
    two functions with the backward ABI of KernelAbi.h (`abi::bwd`):
    `@f`, the dK/dV kernel (one work item = one (batch, K/V head, K/V
    tile); every query head of its group and every q tile inner), and
    `@f_dq`, the dQ kernel (one work item = one (batch, query head, q
    tile); K/V tiles inner), which also accumulates the buffer and
    parameter gradients. Each pair of tiles recomputes P from the
    forward's LSE and follows FlashAttention-2's Algorithm 2 (see the
    file header of TileAttentionBackward.cpp); classification, mask and
    score regions are attn-tile's. Every output element is owned by one
    work item, so the kernels need no atomics and are deterministic.

    Before:
    ```mlir
    attn.attention @f {...} mask {...} score {...} score_grad {...}
    ```
    After:
    ```mlir
    func.func @f(%q: !llvm.ptr, ..., %item_begin: i64, %item_end: i64) {
      scf.for %item = ... {
        attn.load_tile ...   // K, V
        scf.for %h = ... { scf.for %qt = ... {
          attn.load_tile ... attn.load_lse ... attn.row_dot ...
          attn.dot ... attn.mask_select ... attn.score_mod ... attn.exp2
          attn.dot ... attn.softmax_grad ... attn.dot transpose_lhs ...
          attn.score_grad ... attn.dot transpose_lhs ...
        } }
        attn.store_tile ...  // dK, dV
      }
    }
    func.func @f_dq(...) { ... attn.dot %ds, %k into %dq accumulate ... }
    ```
  }];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"64",
           "queries per tile">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"64",
           "keys per tile">,
    Option<"varlen", "varlen", "bool", /*default=*/"false",
           "packed variable-length sequences (cu_seqlens_q/k arguments)">,
    Option<"blockSparse", "block-sparse", "bool", /*default=*/"false",
           "visit only the tiles a block mask lists (block-mask arguments)">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def AttnBuildBlockMask : Pass<"attn-build-block-mask", "::mlir::ModuleOp"> {
  let summary = "adds the block-mask builder of each attention kernel";
  let description = [{
    For each `attn.attention @f` (left in place, for attn-tile), adds
    `func.func @f_block_mask` with the builder ABI of KernelAbi.h: for each
    row (batch, head, q tile) of a block mask in `[item_begin, item_end)`,
    each key tile is classified by interval arithmetic over the mask and,
    where that cannot decide, by `attn.mask_reduce` over its elements;
    partial and full tiles are appended in increasing order to `kv_indices`
    and `full_kv_indices`, their counts stored in `kv_num_blocks` and
    `full_kv_num_blocks`.

    Before:
    ```mlir
    attn.attention @doc {...} mask {...} score {...}
    ```
    After:
    ```mlir
    attn.attention @doc {...} mask {...} score {...}
    func.func @doc_block_mask(%status: !llvm.ptr, ..., %item_begin: i64,
                              %item_end: i64) {
      scf.for %row = ... {
        %n:2 = scf.for %kt = ... iter_args(...) {
          // interval classification, else attn.mask_reduce
        }
      }
    }
    ```
  }];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"64",
           "queries per tile">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"64",
           "keys per tile">,
    Option<"varlen", "varlen", "bool", /*default=*/"false",
           "packed variable-length sequences (cu_seqlens_q/k arguments)">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def AttnExpandScalar : Pass<"attn-expand-scalar"> {
  let summary = "expands the DSL's scalar ops into arith/scf/llvm";
  let description = [{
    Lowers attn.param (outside attn.attention), attn.div, attn.rem,
    attn.fptosi_sat and attn.load_elem to standard ops with the DSL's
    semantics: no traps on division by zero or MIN / -1, saturating
    float-to-int casts, bounds-checked buffer reads that flag the host.

    Before:
    ```mlir
    %c = attn.div %a, %b : i32
    ```
    After:
    ```mlir
    %z = arith.cmpi eq, %b, %c0 : i32
    ... arith.divsi on a safe divisor, arith.select ...
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def AttnTestClassify : Pass<"attn-test-classify", "::mlir::ModuleOp"> {
  let summary = "test pass: emits the run-time tile classifier of each mask";
  let description = [{
    For each `attn.attention @f`, adds
    `func.func @f_classify(batch, head, q_lo, q_hi, kv_lo, kv_hi, seqlen_q,
    seqlen_k: i64, params...) -> i8` returning the tile class (0 empty,
    1 partial, 2 full) computed by the same code `attn-tile` puts in the
    kernel. With `buffer-ranges`, the function also takes (data, size) per
    buffer, sorted by name, after the parameters, and classifies with the
    buffer-range rule as `attn-build-block-mask` does. Used by lit tests and
    by the JIT-compiled classifier that unit tests compare with
    flashjit::classifyTile.
  }];
  let options = [
    Option<"bufferRanges", "buffer-ranges", "bool", /*default=*/"false",
           "read the buffers (buffer-range rule, as the block-mask builder)">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

#endif // FLASHJIT_ATTN_PASSES
