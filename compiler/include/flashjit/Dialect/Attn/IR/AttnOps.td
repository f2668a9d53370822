//===- AttnOps.td - attn dialect operations ----------------*- tablegen -*-===//
//
// High level: attn.attention (mask and score regions), attn.yield and the
// scalar ops the regions need beyond arith/math (attn.param,
// attn.buffer_load, attn.div, attn.rem, attn.fptosi_sat).
//
// Tile level (FlashAttention-2 forward, destination-passing style on f32
// memref tiles): attn.fill, attn.load_tile, attn.dot, attn.mask_select,
// attn.score_mod, attn.row_max, attn.exp2, attn.rescale, attn.row_sum,
// attn.store_tile, attn.store_lse, attn.load_elem; attn.mask_reduce (block
// masks of data-dependent masks).
//
// Backward: attn.attention's optional score_grad region with
// attn.buffer_grad and attn.param_grad; tile ops attn.load_lse,
// attn.row_dot, attn.softmax_grad, attn.score_grad and attn.dot's
// transpose_lhs.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_ATTN_OPS
#define FLASHJIT_ATTN_OPS

include "flashjit/Dialect/Attn/IR/AttnDialect.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Attn_Ptr : Type<CPred<"::llvm::isa<::mlir::LLVM::LLVMPointerType>($_self)">,
                    "LLVM pointer", "::mlir::LLVM::LLVMPointerType">,
              BuildableType<"::mlir::LLVM::LLVMPointerType::get($_builder.getContext())">;
def Attn_Tile : MemRefRankOf<[F32], [2]>;
def Attn_Rows : MemRefRankOf<[F32], [1]>;
def Attn_RowsOrTile : MemRefRankOf<[F32], [1, 2]>;
def Attn_DslScalar : AnyTypeOf<[I32, I64, F32]>;

//===----------------------------------------------------------------------===//
// High level
//===----------------------------------------------------------------------===//

def Attn_AttentionOp : Attn_Op<"attention", [Symbol, IsolatedFromAbove,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "one attention kernel: shapes, mask and score modifier";
  let description = [{
    Declares the forward attention kernel `@sym_name`:
    `O = softmax(mask(score_mod(scale * Q K^T))) V` and `LSE`, with Q of
    `heads_q` heads and K/V of `heads_kv` heads (query head h reads K/V head
    `h / (heads_q / heads_kv)`). The `mask` region takes
    `(batch, head, q_idx, kv_idx, seqlen_q, seqlen_k)` (all i32) and yields
    an i1; the `score` region takes the f32 score followed by the same six
    indices and yields an f32. `params` and `buffers` map the names of the
    runtime parameters and captured buffers read by the regions to their
    types. With the unit attribute `sink`, the kernel takes an attention
    sink `sink[heads_q]` (f32, one logit per query head, a kernel argument)
    that joins the softmax denominator with no value:
    `LSE = log(exp(sink[h]) + sum_allowed exp(s'))`; a row with no allowed
    key gets O = 0 and LSE = sink[h].

    ```mlir
    attn.attention @causal_softcap {dtype_q = bf16, dtype_k = bf16,
        dtype_v = bf16, dtype_o = bf16, head_dim_qk = 64 : i64,
        head_dim_v = 64 : i64, heads_q = 4 : i64, heads_kv = 2 : i64,
        scale = 0.125 : f32, return_lse = true, params = {}, buffers = {}}
    mask {
    ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
      %0 = arith.cmpi sle, %kv, %q : i32
      attn.yield %0 : i1
    } score {
    ^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
      %c = arith.constant 3.000000e+01 : f32
      %0 = arith.divf %s, %c : f32
      %1 = math.tanh %0 : f32
      %2 = arith.mulf %c, %1 : f32
      attn.yield %2 : f32
    }
    ```

    A backward kernel is the same op with a third region, `score_grad`
    (empty for a forward kernel, and ignored by the forward pipelines), so
    the forward and the backward read one mask and one score region: they
    cannot evaluate a mask or a modifier differently. `score_grad` takes
    `(d_score, score, batch, head, q_idx, kv_idx, seqlen_q, seqlen_k)`
    (f32, f32, then i32 x 6): `d_score` is dS', the gradient of the loss
    with respect to the modified score s' = score(score, ...), and `score`
    the unmodified scaled score s. It yields dS = dS' * ds'/ds and may
    accumulate the gradients of f32 buffers (`attn.buffer_grad`) and f32
    parameters (`attn.param_grad`) it reads: dBuffer[idx] += dS' *
    ds'/dbuffer[idx], dParam += dS' * ds'/dparam. MLIRGen builds it from
    the symbolic derivative of frontend/Derivative.h. Target-neutral: it
    says what the gradient is, not how the tiles run (`attn-tile-backward`
    builds the CPU kernels; the GPU backward reads the same op).

    With `score_grad_of_output` (GPU backward kernels only; the CPU's
    `attn-tile-backward` refuses it) the region's `score` argument is the
    modified score s' instead (frontend/Derivative.h derivativeInOutput:
    softcap's 1 - tanh^2(s / cap) as 1 - (s' / cap)^2), which the kernel
    recovers from P and the row's LSE instead of keeping s live.

    ```mlir
    attn.attention @softcap {...} mask {...} score {
    ^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
      %cap = attn.param "cap" : f32
      %0 = arith.divf %s, %cap : f32
      %1 = math.tanh %0 : f32
      %2 = arith.mulf %cap, %1 : f32
      attn.yield %2 : f32
    } score_grad {
    ^bb0(%ds: f32, %s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32,
         %sk: i32):
      // ... d s'/d s = 1 - tanh^2(s / cap), d s'/d cap = ...
      attn.param_grad "cap", %dcap : f32
      attn.yield %dscore : f32
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       I64Attr:$head_dim_qk, I64Attr:$head_dim_v,
                       TypeAttr:$dtype_q, TypeAttr:$dtype_k,
                       TypeAttr:$dtype_v, TypeAttr:$dtype_o,
                       I64Attr:$heads_q, I64Attr:$heads_kv,
                       F32Attr:$scale, BoolAttr:$return_lse,
                       DictionaryAttr:$params, DictionaryAttr:$buffers,
                       UnitAttr:$sink, UnitAttr:$score_grad_of_output);
  let regions = (region SizedRegion<1>:$mask, SizedRegion<1>:$score,
                 MaxSizedRegion<1>:$score_grad);
  let assemblyFormat = [{
    $sym_name attr-dict-with-keyword `mask` $mask `score` $score
    (`score_grad` $score_grad^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether this op carries the backward's score_grad region.
    bool hasScoreGrad() { return !getScoreGrad().empty(); }
  }];
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["AttentionOp", "MaskSelectOp", "MaskReduceOp",
                 "ScoreModOp", "ScoreGradOp"]>]> {
  let summary = "yields the value of a mask or score region";
  let description = [{
    Ends the `mask` region (an i1) or the `score` / `score_grad` region (an
    f32) of `attn.attention`, `attn.mask_select`, `attn.mask_reduce`,
    `attn.score_mod` and `attn.score_grad`.

    ```mlir
    attn.yield %allowed : i1
    ```
  }];
  let arguments = (ins AnyTypeOf<[I1, F32]>:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Attn_ParamOp : Attn_Op<"param", [Pure]> {
  let summary = "reads a runtime scalar parameter";
  let description = [{
    The value of the runtime parameter `name` (a kernel argument, so changing
    it never recompiles). Its type must match the enclosing
    `attn.attention`'s `params` entry.

    ```mlir
    %cap = attn.param "cap" : f32
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Attn_DslScalar:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_BufferLoadOp : Attn_Op<"buffer_load", [Pure]> {
  let summary = "reads one element of a captured buffer";
  let description = [{
    Element `index` of the captured 1-D buffer `name`. Reads outside the
    buffer give 0 and are reported to the caller after the kernel ran.

    ```mlir
    %d = attn.buffer_load "doc_id"[%q] : i32 -> i32
    ```
  }];
  let arguments = (ins StrAttr:$name, AnySignlessInteger:$index);
  let results = (outs Attn_DslScalar:$result);
  let assemblyFormat =
      "$name `[` $index `]` attr-dict `:` type($index) `->` type($result)";
  let hasVerifier = 1;
}

class Attn_IntBinaryOp<string mnemonic> : Attn_Op<mnemonic,
    [Pure, SameOperandsAndResultType]> {
  let arguments = (ins AnyTypeOf<[I32, I64]>:$lhs, AnyTypeOf<[I32, I64]>:$rhs);
  let results = (outs AnyTypeOf<[I32, I64]>:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_DivOp : Attn_IntBinaryOp<"div"> {
  let summary = "the DSL's integer division";
  let description = [{
    Signed division truncating toward zero that never traps: `x / 0` is 0
    and `MIN / -1` wraps to `MIN`.

    ```mlir
    %c = attn.div %q, %chunk : i32
    ```
  }];
}

def Attn_RemOp : Attn_IntBinaryOp<"rem"> {
  let summary = "the DSL's integer remainder";
  let description = [{
    Signed remainder (sign of the dividend) that never traps: `x % 0` and
    `x % -1` are 0.

    ```mlir
    %r = attn.rem %q, %c64 : i32
    ```
  }];
}

def Attn_FPToSISatOp : Attn_Op<"fptosi_sat", [Pure]> {
  let summary = "saturating f32 to integer conversion";
  let description = [{
    Truncates toward zero; values beyond the integer range saturate and NaN
    gives 0.

    ```mlir
    %i = attn.fptosi_sat %x : f32 to i32
    ```
  }];
  let arguments = (ins F32:$in);
  let results = (outs AnyTypeOf<[I32, I64]>:$out);
  let assemblyFormat = "$in attr-dict `:` type($in) `to` type($out)";
  let hasVerifier = 1;
}

def Attn_BufferGradOp : Attn_Op<"buffer_grad"> {
  let summary = "accumulates into the gradient of a captured f32 buffer";
  let description = [{
    In a `score_grad` region (of `attn.attention` or `attn.score_grad`):
    `dBuffer[index] += value`, where dBuffer is the gradient of the f32
    buffer `name` (as many elements as the bound buffer). The order of the
    accumulations is the lowering's business (the CPU backward makes it
    deterministic). An index outside the buffer adds nothing and is
    reported like an out-of-range `attn.buffer_load`.

    ```mlir
    attn.buffer_grad "slope"[%h], %v : i32
    ```
  }];
  let arguments = (ins StrAttr:$name, AnySignlessInteger:$index, F32:$value);
  let assemblyFormat = "$name `[` $index `]` `,` $value attr-dict `:` type($index)";
  let hasVerifier = 1;
}

def Attn_ParamGradOp : Attn_Op<"param_grad"> {
  let summary = "accumulates into the gradient of an f32 parameter";
  let description = [{
    In a `score_grad` region (of `attn.attention` or `attn.score_grad`):
    `dParam += value` for the f32 runtime parameter `name`.

    ```mlir
    attn.param_grad "cap", %v
    ```
  }];
  let arguments = (ins StrAttr:$name, F32:$value);
  let assemblyFormat = "$name `,` $value attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile level
//===----------------------------------------------------------------------===//

def Attn_FillOp : Attn_Op<"fill"> {
  let summary = "sets every element of a tile or row vector";
  let description = [{
    ```mlir
    attn.fill %ninf, %m : f32, memref<64xf32>
    ```
  }];
  let arguments = (ins F32:$value, Attn_RowsOrTile:$dst);
  let assemblyFormat = "$value `,` $dst attr-dict `:` type($value) `,` type($dst)";
  let hasVerifier = 1;
}

def Attn_LoadTileOp : Attn_Op<"load_tile"> {
  let summary = "loads a strided tile of rows from memory, widened to f32";
  let description = [{
    Row `r < rows` of `dst` gets the `dim(dst, 1)` elements of type
    `elem_type` at element offsets `offset + r * row_stride + c * col_stride`
    from `base`; rows `r >= rows` are set to 0, so edge tiles need no
    special case downstream.

    ```mlir
    attn.load_tile %q[%off] rows %n strides(%s2, %s3) into %qt
        : bf16, memref<64x128xf32>
    ```
  }];
  let arguments = (ins Attn_Ptr:$base, I64:$offset, I64:$rows,
                       I64:$row_stride, I64:$col_stride, Attn_Tile:$dst,
                       TypeAttr:$elem_type);
  let assemblyFormat = [{
    $base `[` $offset `]` `rows` $rows `strides` `(` $row_stride `,`
    $col_stride `)` `into` $dst attr-dict `:` $elem_type `,` type($dst)
  }];
  let hasVerifier = 1;
}

def Attn_DotOp : Attn_Op<"dot"> {
  let summary = "tile matrix product: acc (+)= scale * lhs(^T) x rhs(^T)";
  let description = [{
    `acc[i][j] = (accumulate ? acc[i][j] : 0) + scale * sum_k lhs'[i][k] *
    rhs'[k][j]` where `rhs'` is `rhs` transposed when `transpose_rhs` is set
    (S = Q K^T) and `rhs` itself otherwise (O += P V), and `lhs'` is `lhs`
    transposed when `transpose_lhs` is set (the backward's dV += P^T dO and
    dK += dS^T Q).

    With `skip_zero_lhs`, a term whose `lhs[i][k]` is exactly 0 contributes
    exactly 0 whatever `rhs'[k][j]` holds (IEEE would give NaN for 0 * inf or
    0 * NaN). O += P V sets it in partially masked tiles: P is 0 at masked
    keys, so a NaN or Inf in V there never reaches the row, wherever the tile
    boundaries fall; the backward's dV += P^T dO, dQ += dS K and
    dK += dS^T Q set it there too (P and dS are exactly 0 at masked pairs).
    It cannot be combined with `transpose_rhs`. A NaN in `lhs` still
    propagates.

    ```mlir
    attn.dot %qt, %kt transpose_rhs into %s scale 0.180336878 : memref<64x128xf32>, memref<64x128xf32>, memref<64x64xf32>
    attn.dot %p, %vt into %acc accumulate skip_zero_lhs scale 1.0 : memref<64x64xf32>, memref<64x128xf32>, memref<64x128xf32>
    attn.dot %p transpose_lhs, %dot into %dv accumulate scale 1.0 : memref<64x64xf32>, memref<64x128xf32>, memref<64x128xf32>
    ```
  }];
  let arguments = (ins Attn_Tile:$lhs, Attn_Tile:$rhs, Attn_Tile:$acc,
                       UnitAttr:$transpose_rhs, UnitAttr:$accumulate,
                       F32Attr:$scale, UnitAttr:$transpose_lhs,
                       UnitAttr:$skip_zero_lhs);
  let assemblyFormat = [{
    $lhs (`transpose_lhs` $transpose_lhs^)? `,` $rhs
    (`transpose_rhs` $transpose_rhs^)? `into` $acc
    (`accumulate` $accumulate^)? (`skip_zero_lhs` $skip_zero_lhs^)?
    `scale` $scale attr-dict `:` type($lhs) `,` type($rhs) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def Attn_MaskSelectOp : Attn_Op<"mask_select", [
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "masked select: disallowed scores become -inf";
  let description = [{
    For the score tile `scores` of queries `q0 + i` and keys `kv0 + j`:
    elements with `i >= rows` or `j >= cols` (past the sequence) and
    elements whose `mask` region yields false become -inf; others are kept.
    The region takes `(batch, head, q_idx, kv_idx, seqlen_q, seqlen_k)` as
    i32. A region that yields the constant `true` (a tile classified full)
    runs no per-element mask code: only the bounds are applied.

    ```mlir
    attn.mask_select %s at(%q0, %kv0) valid(%rows, %cols) batch %b head %h
        seqlens(%sq, %sk) : memref<64x64xf32> {
    ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
      %0 = arith.cmpi sle, %kv, %q : i32
      attn.yield %0 : i1
    }
    ```
  }];
  let arguments = (ins Attn_Tile:$scores, I64:$q0, I64:$kv0,
                       I64:$rows, I64:$cols, I64:$batch, I64:$head,
                       I64:$seqlen_q, I64:$seqlen_k);
  let regions = (region SizedRegion<1>:$mask);
  let assemblyFormat = [{
    $scores `at` `(` $q0 `,` $kv0 `)` `valid` `(` $rows `,` $cols `)`
    `batch` $batch `head` $head `seqlens` `(` $seqlen_q `,` $seqlen_k `)`
    attr-dict `:` type($scores) $mask
  }];
  let hasVerifier = 1;
}

def Attn_MaskReduceOp : Attn_Op<"mask_reduce", [
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "whether the mask holds somewhere and everywhere on a tile";
  let description = [{
    Evaluates the `mask` region at every element `(q0 + i, kv0 + j)`,
    `i < rows`, `j < cols`, of one tile (the tile clipped to the sequence)
    and yields `any` (some element is allowed) and `all` (every element is).
    With `rows` or `cols` 0 it yields `any = false`, `all = true`. The region
    takes `(batch, head, q_idx, kv_idx, seqlen_q, seqlen_k)` as i32, like
    `attn.mask_select`'s. Block-mask builders use it to classify tiles whose
    mask reads data (interval arithmetic cannot decide them): all: full,
    !any: empty, else partial. Lowerings may stop early once `any` is true
    and `all` false.

    ```mlir
    %any, %all = attn.mask_reduce at(%q0, %kv0) valid(%rows, %cols)
        batch %b head %h seqlens(%sq, %sk) {
    ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
      %0 = arith.cmpi sle, %kv, %q : i32
      attn.yield %0 : i1
    }
    ```
  }];
  let arguments = (ins I64:$q0, I64:$kv0, I64:$rows, I64:$cols, I64:$batch,
                       I64:$head, I64:$seqlen_q, I64:$seqlen_k);
  let results = (outs I1:$any, I1:$all);
  let regions = (region SizedRegion<1>:$mask);
  let assemblyFormat = [{
    `at` `(` $q0 `,` $kv0 `)` `valid` `(` $rows `,` $cols `)`
    `batch` $batch `head` $head `seqlens` `(` $seqlen_q `,` $seqlen_k `)`
    attr-dict-with-keyword $mask
  }];
  let hasVerifier = 1;
}

def Attn_ScoreModOp : Attn_Op<"score_mod", [
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "applies the score modifier to the live scores of a tile";
  let description = [{
    For each element with `i < rows`, `j < cols` whose score is not -inf
    (i.e. allowed by the mask), replaces `s` by `post_scale * mod(s, ...)`,
    where `mod` is the region (arguments: the f32 score, then batch, head,
    q_idx, kv_idx, seqlen_q, seqlen_k as i32). `post_scale` folds log2(e)
    in, so that the softmax runs on exp2.

    ```mlir
    attn.score_mod %s at(%q0, %kv0) valid(%rows, %cols) batch %b head %h
        seqlens(%sq, %sk) post_scale 1.44269502 : memref<64x64xf32> {
    ^bb0(%x: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
      attn.yield %x : f32
    }
    ```
  }];
  let arguments = (ins Attn_Tile:$scores, I64:$q0, I64:$kv0,
                       I64:$rows, I64:$cols, I64:$batch, I64:$head,
                       I64:$seqlen_q, I64:$seqlen_k, F32Attr:$post_scale);
  let regions = (region SizedRegion<1>:$mod);
  let assemblyFormat = [{
    $scores `at` `(` $q0 `,` $kv0 `)` `valid` `(` $rows `,` $cols `)`
    `batch` $batch `head` $head `seqlens` `(` $seqlen_q `,` $seqlen_k `)`
    `post_scale` $post_scale attr-dict `:` type($scores) $mod
  }];
  let hasVerifier = 1;
}

def Attn_RowMaxOp : Attn_Op<"row_max"> {
  let summary = "running row maximum";
  let description = [{
    `out[i] = max(init[i], max_j scores[i][j])` (-inf stays -inf).

    ```mlir
    attn.row_max %s, %m into %mnew : memref<64x64xf32>, memref<64xf32>, memref<64xf32>
    ```
  }];
  let arguments = (ins Attn_Tile:$scores, Attn_Rows:$init, Attn_Rows:$out);
  let assemblyFormat = [{
    $scores `,` $init `into` $out attr-dict `:` type($scores) `,`
    type($init) `,` type($out)
  }];
  let hasVerifier = 1;
}

def Attn_Exp2Op : Attn_Op<"exp2"> {
  let summary = "exp2 relative to a row maximum, safe for empty rows";
  let description = [{
    `out[i, ...] = max[i] == -inf ? 0 : exp2(in[i, ...] - max[i])`: the
    guard keeps rows with no allowed key free of (-inf) - (-inf) = NaN. On
    a 1-D `in` this gives the rescale factor `exp2(m_old - m_new)`.

    With `zero_masked`, also `out = 0` wherever `in` is -inf (a masked
    score), whatever `max[i]` holds: the backward's P = exp2(S - LSE) is
    then exactly 0 at masked pairs even in a row whose LSE is NaN (it
    attends a NaN or Inf key), so the row's NaN stays out of the dK and dV
    of keys it does not attend.

    ```mlir
    attn.exp2 %s, %mnew into %p : memref<64x64xf32>, memref<64xf32>, memref<64x64xf32>
    attn.exp2 %s, %lse2 into %p zero_masked : memref<64x64xf32>, memref<64xf32>, memref<64x64xf32>
    ```
  }];
  let arguments = (ins Attn_RowsOrTile:$in, Attn_Rows:$max,
                       Attn_RowsOrTile:$out, UnitAttr:$zero_masked);
  let assemblyFormat = [{
    $in `,` $max `into` $out (`zero_masked` $zero_masked^)? attr-dict `:`
    type($in) `,` type($max) `,` type($out)
  }];
  let hasVerifier = 1;
}

def Attn_RescaleOp : Attn_Op<"rescale"> {
  let summary = "multiplies each row by a per-row factor, in place";
  let description = [{
    `x[i, ...] *= factor[i]` (the O accumulator and the running sum after
    the running maximum moved).

    ```mlir
    attn.rescale %acc by %alpha : memref<64x128xf32>, memref<64xf32>
    ```
  }];
  let arguments = (ins Attn_RowsOrTile:$x, Attn_Rows:$factor);
  let assemblyFormat = "$x `by` $factor attr-dict `:` type($x) `,` type($factor)";
  let hasVerifier = 1;
}

def Attn_RowSumOp : Attn_Op<"row_sum"> {
  let summary = "accumulates row sums";
  let description = [{
    `acc[i] += sum_j in[i][j]`.

    ```mlir
    attn.row_sum %p into %l : memref<64x64xf32>, memref<64xf32>
    ```
  }];
  let arguments = (ins Attn_Tile:$in, Attn_Rows:$acc);
  let assemblyFormat = "$in `into` $acc attr-dict `:` type($in) `,` type($acc)";
  let hasVerifier = 1;
}

def Attn_StoreTileOp : Attn_Op<"store_tile"> {
  let summary = "normalises the O accumulator and stores its valid rows";
  let description = [{
    For `r < rows`: element c of row r, `sum[r] == 0 ? 0 : acc[r][c] /
    sum[r]`, is rounded to `elem_type` and stored at element offset
    `offset + r * row_stride + c * col_stride` of `base`. Rows with no
    allowed key (sum 0) store exact zeros.

    ```mlir
    attn.store_tile %acc, %l into %o[%off] rows %n strides(%s2, %s3)
        : memref<64x128xf32>, memref<64xf32> -> bf16
    ```
  }];
  let arguments = (ins Attn_Tile:$acc, Attn_Rows:$sum, Attn_Ptr:$base,
                       I64:$offset, I64:$rows, I64:$row_stride,
                       I64:$col_stride, TypeAttr:$elem_type);
  let assemblyFormat = [{
    $acc `,` $sum `into` $base `[` $offset `]` `rows` $rows `strides` `(`
    $row_stride `,` $col_stride `)` attr-dict `:` type($acc) `,` type($sum)
    `->` $elem_type
  }];
  let hasVerifier = 1;
}

def Attn_StoreLseOp : Attn_Op<"store_lse"> {
  let summary = "stores the natural-log LSE of the valid rows";
  let description = [{
    For `r < rows`: `sum[r] == 0 ? -inf : (max[r] + log2(sum[r])) * ln(2)`
    (max and sum are in the exp2 domain) as f32 at element offset
    `offset + r * row_stride` of `base`.

    ```mlir
    attn.store_lse %m, %l into %lse[%off] rows %n stride %s2
        : memref<64xf32>, memref<64xf32>
    ```
  }];
  let arguments = (ins Attn_Rows:$max, Attn_Rows:$sum, Attn_Ptr:$base,
                       I64:$offset, I64:$rows, I64:$row_stride);
  let assemblyFormat = [{
    $max `,` $sum `into` $base `[` $offset `]` `rows` $rows `stride`
    $row_stride attr-dict `:` type($max) `,` type($sum)
  }];
  let hasVerifier = 1;
}

def Attn_LoadElemOp : Attn_Op<"load_elem"> {
  let summary = "bounds-checked read of one buffer element";
  let description = [{
    Element `index` of the `size`-element buffer at `base`. An index
    outside `[0, size)` reads nothing, gives 0 and sets the i32 flag at
    `status[slot]` to 1 (the host reports it after the kernel ran).

    ```mlir
    %v = attn.load_elem %doc[%i] size %n status %st[0] : i32 -> i32
    ```
  }];
  let arguments = (ins Attn_Ptr:$base, AnySignlessInteger:$index, I64:$size,
                       Attn_Ptr:$status, I64Attr:$slot);
  let results = (outs Attn_DslScalar:$result);
  let assemblyFormat = [{
    $base `[` $index `]` `size` $size `status` $status `[` $slot `]`
    attr-dict `:` type($index) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile level, backward (FlashAttention-2 paper, Algorithm 2)
//===----------------------------------------------------------------------===//

def Attn_LoadLseOp : Attn_Op<"load_lse"> {
  let summary = "loads a q tile's LSE into the exp2 domain";
  let description = [{
    For `r < rows`: `out[r] = base[offset + r * row_stride] * log2(e)` (the
    natural-log f32 LSE the forward stored, so that `attn.exp2` of scores
    in the exp2 domain gives P = exp(s' - LSE)); rows `r >= rows` get -inf
    (no allowed key), so their P is 0.

    ```mlir
    attn.load_lse %lse[%off] rows %n stride %s2 into %l2 : memref<64xf32>
    ```
  }];
  let arguments = (ins Attn_Ptr:$base, I64:$offset, I64:$rows,
                       I64:$row_stride, Attn_Rows:$out);
  let assemblyFormat = [{
    $base `[` $offset `]` `rows` $rows `stride` $row_stride `into` $out
    attr-dict `:` type($out)
  }];
  let hasVerifier = 1;
}

def Attn_RowDotOp : Attn_Op<"row_dot"> {
  let summary = "row-wise dot product of two tiles";
  let description = [{
    `out[i] = sum_j lhs[i][j] * rhs[i][j]`: the backward's preprocessing
    D_i = rowsum(dO_i * O_i).

    ```mlir
    attn.row_dot %dot, %ot into %d : memref<64x128xf32>, memref<64x128xf32>, memref<64xf32>
    ```
  }];
  let arguments = (ins Attn_Tile:$lhs, Attn_Tile:$rhs, Attn_Rows:$out);
  let assemblyFormat = [{
    $lhs `,` $rhs `into` $out attr-dict `:` type($lhs) `,` type($rhs) `,`
    type($out)
  }];
  let hasVerifier = 1;
}

def Attn_SoftmaxGradOp : Attn_Op<"softmax_grad"> {
  let summary = "dS' = P * (dP - D), exactly 0 where P is 0";
  let description = [{
    `out[i][j] = p[i][j] == 0 ? 0 : p[i][j] * (dp[i][j] - d[i])`: the
    gradient of the modified scores through the softmax. Masked entries and
    rows with no allowed key have P = 0 and get an exact 0 whatever dP and
    D hold. `out` may alias `dp`.

    ```mlir
    attn.softmax_grad %p, %dp, %d into %ds : memref<64x64xf32>, memref<64x64xf32>, memref<64xf32>, memref<64x64xf32>
    ```
  }];
  let arguments = (ins Attn_Tile:$p, Attn_Tile:$dp, Attn_Rows:$d,
                       Attn_Tile:$out);
  let assemblyFormat = [{
    $p `,` $dp `,` $d `into` $out attr-dict `:` type($p) `,` type($dp) `,`
    type($d) `,` type($out)
  }];
  let hasVerifier = 1;
}

def Attn_ScoreGradOp : Attn_Op<"score_grad", [
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "applies the score modifier's derivative to a dS' tile";
  let description = [{
    For each element with `i < rows`, `j < cols` and `grad[i][j] != 0`:
    `grad[i][j] = region(grad[i][j], scores[i][j], batch, head, q0 + i,
    kv0 + j, seqlen_q, seqlen_k)` (the `score_grad` region of
    `attn.attention`: dS' and the unmodified score in, dS out, with the
    region's `attn.buffer_grad` / `attn.param_grad` accumulations, if any,
    performed for that element); every other element becomes 0. A zero dS'
    contributes exactly nothing, so the region never runs on masked
    entries (where its derivative may be inf or NaN).

    ```mlir
    attn.score_grad %ds, %s at(%q0, %kv0) valid(%rows, %cols) batch %b
        head %h seqlens(%sq, %sk) : memref<64x64xf32>, memref<64x64xf32> {
    ^bb0(%g: f32, %x: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32,
         %sk: i32):
      attn.yield %g : f32
    }
    ```
  }];
  let arguments = (ins Attn_Tile:$grad, Attn_Tile:$scores, I64:$q0, I64:$kv0,
                       I64:$rows, I64:$cols, I64:$batch, I64:$head,
                       I64:$seqlen_q, I64:$seqlen_k);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $grad `,` $scores `at` `(` $q0 `,` $kv0 `)` `valid` `(` $rows `,` $cols
    `)` `batch` $batch `head` $head `seqlens` `(` $seqlen_q `,` $seqlen_k `)`
    attr-dict `:` type($grad) `,` type($scores) $body
  }];
  let hasVerifier = 1;
}

#endif // FLASHJIT_ATTN_OPS
