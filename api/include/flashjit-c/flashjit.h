/*===- flashjit-c/flashjit.h - The C API --------------------------*- C -*-===//
 *
 * A small C interface for other languages (ctypes, FFI): compile an attention
 * spec given as canonical text for the CPU or a GPU architecture, run it on
 * strided tensors, read the error of the last failing call. Handles are
 * opaque; every function reports failure through its return code and
 * flashjit_last_error() (per thread), never by aborting.
 *
 * Thread safety: every function may be called from any thread at once; one
 * kernel may be run by several threads (on several streams) at once, and is
 * destroyed only when no call uses it.
 *
 * Tensors: Q [batch, heads_q, seqlen_q, head_dim_qk], K and V
 * [batch, heads_kv, seqlen_k, head_dim], O [batch, heads_q, seqlen_q,
 * head_dim_v], LSE [batch, heads_q, seqlen_q] (fp32, rank 3); strides in
 * elements. Semantics: README.md ("Semantics").
 *
 *===----------------------------------------------------------------------===*/
#ifndef FLASHJIT_C_FLASHJIT_H
#define FLASHJIT_C_FLASHJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every call. */
typedef enum flashjit_status {
  FLASHJIT_OK = 0,
  FLASHJIT_USER_ERROR = 1,    /**< bad input: spec, option, tensor, argument */
  FLASHJIT_COMPILE_ERROR = 2, /**< a compiler pass failed */
  FLASHJIT_DRIVER_ERROR = 3,  /**< CUDA driver, NVRTC or nvJitLink failed */
  FLASHJIT_INTERNAL_ERROR = 4 /**< a bug in flashjit */
} flashjit_status;

/** Element type of a tensor. FLASHJIT_E4M3 / FLASHJIT_E5M2 are the OCP fp8
 *  formats (torch.float8_e4m3fn / torch.float8_e5m2), for Q, K and V only,
 *  with descales passed as FLASHJIT_Q_DESCALE etc. The CPU target runs them
 *  (dequantised to f32 on load; not the backward or paged decoding); sm_90a
 *  has the fp8 wgmma forward: Q, K and V all fp8, O bf16 or fp16,
 *  head_dim_qk a multiple of 32 and head_dim_v of 16 (up to 256), dense,
 *  varlen or block-sparse; it refuses the rest by name, and sm_80 refuses
 *  fp8 (no fp8 tensor-core MMA). */
typedef enum flashjit_dtype {
  FLASHJIT_FP16 = 0,
  FLASHJIT_BF16 = 1,
  FLASHJIT_FP32 = 2,
  FLASHJIT_E4M3 = 3,
  FLASHJIT_E5M2 = 4
} flashjit_dtype;

/** A strided tensor (host memory for the CPU target, device memory for a GPU
 *  target): rank 4 for Q, K, V and O, rank 3 for LSE (varlen runs: rank 3
 *  for Q, K, V and O, rank 2 for LSE). */
typedef struct flashjit_tensor {
  void *data;
  flashjit_dtype dtype;
  int rank;
  int64_t shape[4];
  int64_t strides[4]; /**< in elements */
} flashjit_tensor;

/** Kinds of run-time argument. */
typedef enum flashjit_arg_kind {
  FLASHJIT_ARG_F32 = 0,        /**< parameter, value in `scalar` */
  FLASHJIT_ARG_I32 = 1,        /**< parameter, value in `integer` */
  FLASHJIT_ARG_I64 = 2,        /**< parameter, value in `integer` */
  FLASHJIT_ARG_BUFFER_F32 = 3, /**< buffer: `data`, `size` elements */
  FLASHJIT_ARG_BUFFER_I32 = 4,
  FLASHJIT_ARG_BUFFER_I64 = 5
} flashjit_arg_kind;

/** The reserved name of the attention sink (a spec with `sink=true`): pass
 *  it in \p args as an FLASHJIT_ARG_BUFFER_F32 of heads_q fp32 logits (host
 *  memory on the CPU, device memory on a GPU), and in flashjit_run_backward's
 *  \p grads with `size` = heads_q to receive d sink. Not an identifier, so
 *  it never names a variant's buffer or parameter. */
#define FLASHJIT_SINK "@sink"

/** The reserved names of the fp8 descales (Arguments::qDescale in
 *  flashjit/frontend/Arguments.h): pass each in \p args as an
 *  FLASHJIT_ARG_BUFFER_F32 of 1 (per tensor) or batch * heads_kv (per block)
 *  fp32 values; the real value of an fp8 element is its value times the
 *  descale. Unset means 1. Only for fp8 Q, K, V. */
#define FLASHJIT_Q_DESCALE "@q_descale"
#define FLASHJIT_K_DESCALE "@k_descale"
#define FLASHJIT_V_DESCALE "@v_descale"

/** One runtime parameter or captured buffer, by name. An FLASHJIT_ARG_I32
 *  value outside [-2^31, 2^31 - 1] and an FLASHJIT_ARG_F32 value that
 *  overflows f32 (1e300; inf and NaN pass as given) are FLASHJIT_USER_ERROR,
 *  never wrapped or rounded to inf. */
typedef struct flashjit_arg {
  const char *name;
  flashjit_arg_kind kind;
  double scalar;
  int64_t integer;
  const void *data;
  int64_t size;
} flashjit_arg;

/** A compiled kernel. */
typedef struct flashjit_kernel flashjit_kernel;

/** The message of this thread's last failing call ("" if none). Valid until
 *  the thread's next failing call. */
const char *flashjit_last_error(void);

/** Compiles \p spec_text (canonical spec text, e.g.
 *  "attention(causal=top_left, head_dim=64, dtype=bf16)") for \p target:
 *  "cpu", "sm_80" or "sm_90a". On success stores a new kernel in \p out.
 *  Goes through the kernel cache (FLASHJIT_CACHE_DIR, FLASHJIT_DISABLE_CACHE,
 *  FLASHJIT_ALWAYS_COMPILE): a kernel compiled by an earlier run is loaded,
 *  not compiled. In flashjit_c_runtime (no compiler) it fails with
 *  FLASHJIT_USER_ERROR. */
flashjit_status flashjit_compile(const char *spec_text, const char *target,
                                 flashjit_kernel **out);

/** Parses and validates \p spec_text as flashjit_compile does, compiling
 *  nothing, and writes its canonical text (the one spelling every equivalent
 *  text has, on which the kernel cache and bundles key) with a terminating
 *  NUL into \p out, which holds \p out_size bytes. \p needed, when not
 *  NULL, receives the canonical text's length plus one; \p out NULL with
 *  \p out_size 0 only measures. Fails with FLASHJIT_USER_ERROR (naming the
 *  column, field or value) for a syntax or type error, an invalid field, or
 *  an \p out_size too small (\p out is then left untouched). Available in
 *  both libraries. */
flashjit_status flashjit_spec_canonicalize(const char *spec_text, char *out,
                                           size_t out_size, size_t *needed);

/** Loads the precompiled kernel for \p spec_text on \p target ("sm_80",
 *  "sm_90a" or "cpu") from the bundle directory \p bundle_dir (made by
 *  `flashjit bundle`); the spec text is canonicalised first, so any text that
 *  parses to the bundled spec matches. Compiles nothing: available in
 *  flashjit_c_runtime, which links no compiler. Without a GPU a GPU kernel
 *  still carries its PTX, and flashjit_run reports FLASHJIT_DRIVER_ERROR; a
 *  CPU kernel (the bundle's kernel.so, default tile sizes) runs anywhere
 *  with the CPU features it was built for. Fails with FLASHJIT_USER_ERROR
 *  when the bundle is missing, unreadable or has no such kernel, an entry
 *  fails its checksums, or a CPU kernel needs features this CPU lacks.
 *  For a GPU target the bundled backward (`--kernel fwd,bwd`) and decode
 *  kernels (`--kernel fwd,decode`) of the spec are picked up too; a bundle
 *  holding only the decode kernels of the spec (`--kernel decode`) gives a
 *  kernel that only flashjit_run_paged runs (other runs:
 *  FLASHJIT_USER_ERROR). */
flashjit_status flashjit_load(const char *bundle_dir, const char *spec_text,
                              const char *target, flashjit_kernel **out);

/** Runs \p kernel: O (and LSE when the spec returns it; \p lse may be NULL
 *  otherwise) from Q, K, V; \p args holds \p num_args parameters and
 *  buffers. \p stream is a CUstream for GPU kernels (NULL: the default
 *  stream) and ignored on the CPU. */
flashjit_status flashjit_run(const flashjit_kernel *kernel,
                             const flashjit_tensor *q, const flashjit_tensor *k,
                             const flashjit_tensor *v, const flashjit_tensor *o,
                             const flashjit_tensor *lse,
                             const flashjit_arg *args, int num_args,
                             void *stream);

/** Gradient output for one captured f32 buffer or one f32 parameter. */
typedef struct flashjit_grad {
  const char *name; /**< the buffer's or parameter's name */
  float *data;      /**< dBuffer: `size` elements (the bound buffer's length);
                         dParam: 1 element */
  int64_t size;
} flashjit_grad;

/** The backward of \p kernel's attention (README.md, "Backward"): from Q, K,
 *  V, the forward's O and LSE (fp32 [batch, heads_q, seqlen_q], required:
 *  compile the forward with `return_lse` true, the default) and dO (O's
 *  shape and dtype), writes dQ, dK, dV (the shapes and dtypes of Q, K, V;
 *  fp32 accumulation; every element overwritten) and, for each of the
 *  \p num_grads entries of \p grads, the gradient of that f32 buffer
 *  (`size` = the bound buffer's length) or f32 parameter (`size` = 1),
 *  overwritten. A buffer or parameter not listed gets no gradient; listing
 *  one the score modifier does not read as f32 is FLASHJIT_USER_ERROR.
 *  \p args are the forward's. \p kernel is the forward kernel from
 *  flashjit_compile or flashjit_load. A kernel from flashjit_load whose
 *  bundle holds its backward (`flashjit bundle --kernel fwd,bwd`: the spec
 *  with LSE; on the CPU the forward's tiles) runs that bundled backward,
 *  also in flashjit_c_runtime; otherwise the backward is compiled (through
 *  the memory tier and the disk cache) on the first call, which
 *  flashjit_c_runtime, having no compiler, reports as
 *  FLASHJIT_USER_ERROR. On the CPU: deterministic, \p stream ignored. On
 *  a GPU (device 0): tensors, \p args buffers and \p grads `data` are
 *  device memory; asynchronous on \p stream except that buffer/parameter
 *  gradients synchronise it; dQ and the buffer/parameter gradients are
 *  accumulated with fp32 atomics (last bits vary between runs). Varlen
 *  and block-sparse kernels are FLASHJIT_USER_ERROR here (their calls take
 *  cu_seqlens or a block mask: flashjit_run_backward_ex). Aliasing
 *  (README "Semantics" 10): dq, dk, dv and every grads[i].data must
 *  overlap no input (q, k, v, o, lse, d_o, the \p args buffers) and not
 *  each other, and a grads name may appear once (FLASHJIT_USER_ERROR
 *  naming both, nothing written); the inputs may share memory (o may be
 *  q). */
flashjit_status
flashjit_run_backward(const flashjit_kernel *kernel, const flashjit_tensor *q,
                      const flashjit_tensor *k, const flashjit_tensor *v,
                      const flashjit_tensor *o, const flashjit_tensor *lse,
                      const flashjit_tensor *d_o, const flashjit_tensor *dq,
                      const flashjit_tensor *dk, const flashjit_tensor *dv,
                      const flashjit_arg *args, int num_args,
                      const flashjit_grad *grads, int num_grads, void *stream);

/** The kernel's PTX (GPU targets) or NULL (CPU). Owned by the kernel. */
const char *flashjit_kernel_ptx(const flashjit_kernel *kernel);

/** Frees a kernel (NULL is ignored). */
void flashjit_kernel_destroy(flashjit_kernel *kernel);

/** flashjit's version, "MAJOR.MINOR.PATCH" (the CMake project's version). */
const char *flashjit_version(void);

/** The canonical text of the expression \p text (a mask or score modifier
 *  in the text DSL, e.g. "kv_idx <= q_idx"), fully parenthesised, so that
 *  it can be placed in a spec's `mask=` or `score=` field without changing
 *  any other field. On success \p out points at a per-thread string valid
 *  until this thread's next call of flashjit_canonical_expr (a spec's
 *  canonical text: flashjit_spec_canonicalize). FLASHJIT_USER_ERROR for a
 *  parse error (the message shows the column). */
flashjit_status flashjit_canonical_expr(const char *text, const char **out);

/** The kernel's spec in canonical text. Owned by the kernel. */
const char *flashjit_kernel_spec(const flashjit_kernel *kernel);

/** Modes of a kernel (flashjit_compile_ex flags, OR-ed). */
typedef enum flashjit_compile_flag {
  /** Packed variable-length sequences: run with flashjit_run_varlen. */
  FLASHJIT_COMPILE_VARLEN = 1,
  /** Block-sparse: runs take a flashjit_block_mask (flashjit_run_block_sparse
   *  or, with FLASHJIT_COMPILE_VARLEN, flashjit_run_varlen). */
  FLASHJIT_COMPILE_BLOCK_SPARSE = 2
} flashjit_compile_flag;

/** flashjit_compile with \p flags, a set of flashjit_compile_flag (0 is
 *  flashjit_compile). Varlen and block-sparse kernels go through the kernel
 *  cache like dense ones. FLASHJIT_USER_ERROR for an unknown flag. */
flashjit_status flashjit_compile_ex(const char *spec_text, const char *target,
                                    unsigned flags, flashjit_kernel **out);

/** The kernel's flashjit_compile_flag set. */
unsigned flashjit_kernel_flags(const flashjit_kernel *kernel);

/** The kernel's tile sizes: queries (\p block_m) and keys (\p block_n)
 *  per tile, the block size of its block masks. Either pointer may be
 *  NULL. */
flashjit_status flashjit_kernel_tiles(const flashjit_kernel *kernel,
                                      int64_t *block_m, int64_t *block_n);

/** A block mask (FlexAttention's BlockMask form, README "Semantics" 12) in
 *  host memory for a CPU kernel, device memory for a GPU kernel; used with
 *  kernels of the same target and tile sizes. */
typedef struct flashjit_block_mask flashjit_block_mask;

/** Sizes of a block mask: tiles of block_m x block_n, built for seqlen_q x
 *  seqlen_k (varlen: the largest sequence), extents batch (1: shared) x
 *  heads (1: shared) x num_q_tiles rows of num_kv_tiles entries. */
typedef struct flashjit_block_mask_info {
  int64_t block_m, block_n;
  int64_t seqlen_q, seqlen_k;
  int64_t batch, heads;
  int64_t num_q_tiles, num_kv_tiles;
  int varlen; /**< 1 when built for a varlen batch (keeps its cu_seqlens) */
} flashjit_block_mask_info;

/** Builds the block mask of the spec's mask for \p batch x \p seqlen_q x
 *  \p seqlen_k calls of the block-sparse (not varlen) \p kernel with
 *  \p args (the mask's parameters and buffers; reuse the result only while
 *  they are unchanged). GPU kernels build it on the device on \p stream.
 *  FLASHJIT_USER_ERROR for a dense or varlen kernel, negative sizes, bad
 *  arguments or a buffer read out of range. */
flashjit_status flashjit_build_block_mask(const flashjit_kernel *kernel,
                                          int64_t batch, int64_t seqlen_q,
                                          int64_t seqlen_k,
                                          const flashjit_arg *args,
                                          int num_args, void *stream,
                                          flashjit_block_mask **out);

/** The same for a packed batch of \p num_seqs sequences (a block-sparse
 *  varlen kernel): \p cu_seqlens_q and \p cu_seqlens_k are host int32
 *  arrays of num_seqs + 1 entries (also for GPU kernels); the mask keeps
 *  copies and fits only calls with the same cu_seqlens. */
flashjit_status flashjit_build_varlen_block_mask(
    const flashjit_kernel *kernel, const int32_t *cu_seqlens_q,
    const int32_t *cu_seqlens_k, int64_t num_seqs, const flashjit_arg *args,
    int num_args, void *stream, flashjit_block_mask **out);

/** A block mask from a user's block-sparse layout in BSR form for
 *  \p kernel's tiles (block_m x block_n, flashjit_kernel_tiles): \p heads
 *  (1: every head, or heads_q) x num_q_tiles rows, num_q_tiles =
 *  ceil(seqlen_q / block_m); row r = h * num_q_tiles + m lists the key
 *  tiles col_indices[row_offsets[r] .. row_offsets[r + 1]) (host int32;
 *  heads * num_q_tiles + 1 offsets, \p num_col_indices indices). Every
 *  listed tile is partial: the spec's mask still applies inside it.
 *  FLASHJIT_USER_ERROR naming the bad entry. */
flashjit_status flashjit_block_mask_from_bsr(
    const flashjit_kernel *kernel, int64_t heads, int64_t seqlen_q,
    int64_t seqlen_k, const int32_t *row_offsets, const int32_t *col_indices,
    int64_t num_col_indices, flashjit_block_mask **out);

/** The sizes of \p mask. */
flashjit_status flashjit_block_mask_get_info(const flashjit_block_mask *mask,
                                             flashjit_block_mask_info *out);

/** Copies the four lists of \p mask to host int32 arrays (any may be NULL):
 *  kv_num_blocks and full_kv_num_blocks [batch, heads, num_q_tiles],
 *  kv_indices and full_kv_indices [batch, heads, num_q_tiles,
 *  num_kv_tiles] (entries past a row's count are unspecified).
 *  Synchronous. */
flashjit_status flashjit_block_mask_copy(const flashjit_block_mask *mask,
                                         int32_t *kv_num_blocks,
                                         int32_t *kv_indices,
                                         int32_t *full_kv_num_blocks,
                                         int32_t *full_kv_indices);

/** Frees a block mask (NULL is ignored). */
void flashjit_block_mask_destroy(flashjit_block_mask *mask);

/** flashjit_run for a block-sparse (not varlen) kernel: visits only the
 *  tiles \p mask lists. FLASHJIT_USER_ERROR when the mask does not fit the
 *  call (tile sizes, extents, seqlens; naming both values) or belongs to
 *  another target. */
flashjit_status
flashjit_run_block_sparse(const flashjit_kernel *kernel,
                          const flashjit_tensor *q, const flashjit_tensor *k,
                          const flashjit_tensor *v, const flashjit_tensor *o,
                          const flashjit_tensor *lse,
                          const flashjit_block_mask *mask,
                          const flashjit_arg *args, int num_args, void *stream);

/** Runs a varlen kernel on \p num_seqs packed sequences (README
 *  "Semantics" 11): q [total_q, heads_q, head_dim_qk], k and v [total_k,
 *  heads_kv, head_dim], o [total_q, heads_q, head_dim_v], lse [heads_q,
 *  total_q] (fp32, rank 2); \p cu_seqlens_q and \p cu_seqlens_k are host int32
 * arrays of num_seqs
 *  + 1 entries (first 0, non-decreasing, last = total tokens; for GPU
 *  kernels they are checked and uploaded on each call). \p mask is required
 *  by block-sparse varlen kernels and must be NULL otherwise.
 *  FLASHJIT_USER_ERROR naming the bad tensor, cu_seqlens entry, argument or
 *  mask field. */
flashjit_status
flashjit_run_varlen(const flashjit_kernel *kernel, const flashjit_tensor *q,
                    const flashjit_tensor *k, const flashjit_tensor *v,
                    const flashjit_tensor *o, const flashjit_tensor *lse,
                    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                    int64_t num_seqs, const flashjit_block_mask *mask,
                    const flashjit_arg *args, int num_args, void *stream);

/** flashjit_run_backward for every kind of kernel: the backward of a
 *  dense, block-sparse, varlen or block-sparse varlen forward kernel
 *  (README "Backward", "Block masks in training"), with the arguments its
 *  forward call took.
 *
 *  Dense kernels: \p cu_seqlens_q, \p cu_seqlens_k and \p mask NULL,
 *  \p num_seqs 0; the call is flashjit_run_backward's.
 *
 *  Block-sparse (not varlen) kernels: \p mask is the block mask the
 *  forward ran with (flashjit_run_block_sparse), cu_seqlens NULL and
 *  \p num_seqs 0; q [batch, heads_q, seqlen_q, head_dim_qk], k and v
 *  [batch, heads_kv, seqlen_k, head_dim], o and d_o [batch, heads_q,
 *  seqlen_q, head_dim_v], lse [batch, heads_q, seqlen_q] (fp32); dq, dk,
 *  dv the shapes and dtypes of q, k, v. The gradients are those of the
 *  forward with that mask: a key tile the mask does not list is masked
 *  (it gets no gradient, and a row whose listed tiles hold no allowed key
 *  has LSE = -inf and dQ = 0), a listed full tile is computed without the
 *  spec's mask, a listed partial tile with it.
 *
 *  Varlen kernels: \p num_seqs packed sequences as flashjit_run_varlen
 *  (q, dq [total_q, heads_q, head_dim_qk], k, v, dk, dv [total_k,
 *  heads_kv, head_dim], o, d_o [total_q, heads_q, head_dim_v], lse
 *  [heads_q, total_q] fp32 rank 2); \p cu_seqlens_q and \p cu_seqlens_k
 *  are host int32 arrays of num_seqs + 1 entries (first 0,
 *  non-decreasing, last = total tokens; uploaded on each GPU call);
 *  \p mask is required by block-sparse varlen kernels (the varlen block
 *  mask of the same cu_seqlens) and must be NULL otherwise. Empty
 *  sequences are allowed (their rows and keys get zero gradients).
 *
 *  \p kernel is the forward kernel (flashjit_compile_ex or flashjit_load
 *  with the same flags); its backward is compiled with the same mode
 *  flags (on the CPU with the forward's tiles, so its masks fit), or
 *  taken from the bundle (`flashjit bundle --kernel fwd,bwd` with
 *  `--varlen` / `--block-sparse`), as flashjit_run_backward; in
 *  flashjit_c_runtime without a bundled backward of that mode:
 *  FLASHJIT_USER_ERROR. On a GPU the backward visits tiles of its own
 *  size (wgmma: 64 query rows x 128 keys, 64 x 64 at head dim 256;
 *  mma.sync: 64 keys and query tiles of 64, 32 or 16 rows by head dim);
 *  a key tile may span several mask tiles, each 8 keys keeping their mask
 *  tile's class, so block_m must be a multiple of its query rows per tile
 *  and block_n a multiple of 8: the default forward tiles satisfy this
 *  at every head dim (FLASHJIT_USER_ERROR naming both tile sizes
 *  otherwise).
 *
 *  grads, args, stream, aliasing (the cu_seqlens arrays count as inputs)
 *  and determinism as flashjit_run_backward (the GPU block-sparse backward
 *  accumulates dQ with fp32 atomics). FLASHJIT_USER_ERROR naming the
 *  field and value: a mask given to a kernel that is not block-sparse or
 *  missing for one, cu_seqlens given to a dense kernel or missing for a
 *  varlen one, a mask of the other target, tiles or extents (as
 *  flashjit_run_block_sparse), bad cu_seqlens entries, tensors, grads. */
flashjit_status flashjit_run_backward_ex(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k, const flashjit_tensor *v,
    const flashjit_tensor *o, const flashjit_tensor *lse,
    const flashjit_tensor *d_o, const flashjit_tensor *dq,
    const flashjit_tensor *dk, const flashjit_tensor *dv,
    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k, int64_t num_seqs,
    const flashjit_block_mask *mask, const flashjit_arg *args, int num_args,
    const flashjit_grad *grads, int num_grads, void *stream);

/* ---- Serving: paged KV caches, state merging (issue 17, README
 * "Serving") ---- */

/** The layout of a flashjit_page_table. */
typedef enum flashjit_paged_layout {
  FLASHJIT_PAGED_CSR = 0,        /**< FlashInfer: kv_indptr, kv_indices,
                                      kv_last_page_len */
  FLASHJIT_PAGED_BLOCK_TABLE = 1 /**< vLLM: block_table, seq_lens */
} flashjit_paged_layout;

/** A page table of \p batch sequences over a paged cache k_cache
 *  [num_pages, heads_kv, page_size, head_dim] (any strides: the [pages,
 *  page_size, heads, dim] layout is a view). int32 arrays in host memory;
 *  for GPU calls (flashjit_run_paged with a GPU kernel, flashjit_paged_append
 *  with \p device >= 0) each array may also be device memory, which is
 *  copied to the host (synchronously). Validated entry by entry on every
 *  call (FLASHJIT_USER_ERROR naming the entry).
 *  CSR: sequence b owns pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]),
 *  the last holding kv_last_page_len[b] tokens (kv_indptr has batch + 1
 *  entries, kv_indices num_indices). Block table: row b of the row-major
 *  [batch, max_pages] block_table lists its pages, seq_lens[b] its tokens;
 *  entries past a sequence's last page are not read. The other layout's
 *  fields are ignored. */
typedef struct flashjit_page_table {
  flashjit_paged_layout layout;
  int64_t batch;
  const int32_t *kv_indptr;
  const int32_t *kv_indices;
  int64_t num_indices;
  const int32_t *kv_last_page_len;
  const int32_t *block_table;
  int64_t max_pages;
  const int32_t *seq_lens;
} flashjit_page_table;

/** merge_states (README "Serving"): merges \p n >= 1 attention states over
 *  disjoint key sets, os[i] [batch, heads, seqlen, head_dim] (fp16, bf16 or
 *  fp32, any strides) and lses[i] [batch, heads, seqlen] (fp32), into
 *  \p o and \p lse (which may be exactly one of the inputs): lse =
 *  log(exp(sink[h]) + sum_i exp(lse_i)), o = sum_i exp(lse_i - lse) o_i.
 *  A state with LSE = -inf carries no weight (its O is not read); a row
 *  with no state gets O = 0, LSE = sink[h] (-inf without a sink). \p sink
 *  is NULL or \p sink_size = heads fp32 logits (entered once). \p device
 *  -1: host memory (computed in double); >= 0: tensors and sink in that
 *  CUDA device's memory (at most 32 states per call; asynchronous on
 *  \p stream). FLASHJIT_USER_ERROR naming the tensor, field and value;
 *  also for \p o or \p lse overlapping an input (other than being exactly
 *  that input's view) or each other. */
flashjit_status flashjit_merge_states(const flashjit_tensor *os,
                                      const flashjit_tensor *lses, int n,
                                      const flashjit_tensor *o,
                                      const flashjit_tensor *lse,
                                      const float *sink, int64_t sink_size,
                                      int device, void *stream);

/** The append helper: writes k_new [batch, heads_kv, n_new, head_dim_qk]
 *  and v_new [batch, heads_kv, n_new, head_dim_v] (the caches' dtypes) as
 *  the last n_new tokens of each sequence of \p table, which already counts
 *  them (update the table first), into k_cache [num_pages, heads_kv,
 *  page_size, head_dim_qk] and v_cache. \p device -1: host memory; >= 0:
 *  tensors in that CUDA device's memory (the table, host or device memory,
 *  is checked on the host and uploaded; the call synchronises \p stream).
 *  FLASHJIT_USER_ERROR naming the field and value (a page id outside the
 *  cache, a sequence shorter than n_new, mismatched shapes or dtypes, a
 *  cache overlapping k_new, v_new or the page ids, k_cache and v_cache the
 *  same memory; the two caches may interleave with equal strides). */
flashjit_status flashjit_paged_append(const flashjit_tensor *k_new,
                                      const flashjit_tensor *v_new,
                                      const flashjit_tensor *k_cache,
                                      const flashjit_tensor *v_cache,
                                      const flashjit_page_table *table,
                                      int device, void *stream);

/** Paged decoding: q [batch, heads_q, q_len, head_dim_qk] against the
 *  paged caches through \p table; o [batch, heads_q, q_len, head_dim_v],
 *  lse [batch, heads_q, q_len] (fp32, rank 3; may be NULL). Semantics:
 *  README "Serving" (the query tokens are the last q_len positions of each
 *  sequence; use a bottom-right causal mask). flashjit_run_paged_ex with
 *  \p num_splits 0 and the default stream.
 *
 *  CPU: a kernel compiled with FLASHJIT_COMPILE_VARLEN
 *  (runtime::cpuPagedDecode); host memory.
 *
 *  GPU (any kernel for sm_80 / sm_90a, device 0): the split-KV decode
 *  kernels of the kernel's spec (runtime::GpuDecodeKernel; q_len 1..64,
 *  page_size a power of two 1..256): a kernel from flashjit_load whose
 *  bundle holds them (`flashjit bundle --kernel fwd,decode`; also with
 *  flashjit_c_runtime) runs those, otherwise they are compiled on the
 *  first call through the memory tier and the disk cache (flashjit_c
 *  only; flashjit_c_runtime reports FLASHJIT_USER_ERROR). q, the caches,
 *  o, lse and the sink are device memory (q, k_cache, v_cache 16-byte
 *  aligned with head_dim contiguous); the table may be host or device
 *  memory (it is checked on the host and uploaded each call). Each call
 *  has its own workspace (no lock): threads may call it at once, on the
 *  same or different streams, for the same kernel; each call synchronises
 *  its stream before returning. FLASHJIT_USER_ERROR naming the field and
 *  value (shapes, dtypes, alignment, q_len, table entries; o or lse
 *  overlapping q, the caches, the table or each other);
 *  FLASHJIT_DRIVER_ERROR without a GPU. */
flashjit_status flashjit_run_paged(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k_cache, const flashjit_tensor *v_cache,
    const flashjit_page_table *table, const flashjit_tensor *o,
    const flashjit_tensor *lse, const flashjit_arg *args, int num_args);

/** flashjit_run_paged with the GPU's key-split count \p num_splits (0:
 *  the heuristic of runtime::decodeNumSplits; 1..1024 forces it; every
 *  count gives the same result up to rounding; a CPU kernel does not
 *  split: 0 or 1 there) and \p stream (a CUstream; NULL: the default
 *  stream; ignored on the CPU). FLASHJIT_USER_ERROR for \p num_splits
 *  outside 0..1024, or above 1 on the CPU. */
flashjit_status flashjit_run_paged_ex(
    const flashjit_kernel *kernel, const flashjit_tensor *q,
    const flashjit_tensor *k_cache, const flashjit_tensor *v_cache,
    const flashjit_page_table *table, const flashjit_tensor *o,
    const flashjit_tensor *lse, const flashjit_arg *args, int num_args,
    int num_splits, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_C_FLASHJIT_H */
