/*===- flashjit-c/flashjit.h - The C API --------------------------*- C -*-===//
 *
 * A small C interface for other languages (ctypes, FFI): compile an attention
 * spec given as canonical text for the CPU or a GPU architecture, run it on
 * strided tensors, read the error of the last failing call. Handles are
 * opaque; every function reports failure through its return code and
 * flashjit_last_error() (per thread), never by aborting.
 *
 * Tensors: Q [batch, heads_q, seqlen_q, head_dim_qk], K and V
 * [batch, heads_kv, seqlen_k, head_dim], O [batch, heads_q, seqlen_q,
 * head_dim_v], LSE [batch, heads_q, seqlen_q] (fp32, rank 3); strides in
 * elements. Semantics: README.md ("Semantics").
 *
 *===----------------------------------------------------------------------===*/
#ifndef FLASHJIT_C_FLASHJIT_H
#define FLASHJIT_C_FLASHJIT_H

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

/** Element type of a tensor. */
typedef enum flashjit_dtype {
  FLASHJIT_FP16 = 0,
  FLASHJIT_BF16 = 1,
  FLASHJIT_FP32 = 2
} flashjit_dtype;

/** A strided tensor (host memory for the CPU target, device memory for a GPU
 *  target): rank 4 for Q, K, V and O, rank 3 for LSE. */
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

/** Loads the precompiled kernel for \p spec_text on \p target ("sm_80",
 *  "sm_90a" or "cpu") from the bundle directory \p bundle_dir (made by
 *  `flashjit bundle`); the spec text is canonicalised first, so any text that
 *  parses to the bundled spec matches. Compiles nothing: available in
 *  flashjit_c_runtime, which links no compiler. Without a GPU a GPU kernel
 *  still carries its PTX, and flashjit_run reports FLASHJIT_DRIVER_ERROR; a
 *  CPU kernel (the bundle's kernel.so, default tile sizes) runs anywhere
 *  with the CPU features it was built for. Fails with FLASHJIT_USER_ERROR
 *  when the bundle is missing, unreadable or has no such kernel, an entry
 *  fails its checksums, or a CPU kernel needs features this CPU lacks. */
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
 *  flashjit_compile or flashjit_load; its backward is compiled (through the
 *  in-process memory tier) on the first call, so flashjit_c_runtime, which
 *  has no compiler, reports FLASHJIT_USER_ERROR. CPU kernels only: a GPU
 *  kernel gives FLASHJIT_USER_ERROR (the GPU backward is issue 15).
 *  Deterministic. \p stream is ignored on the CPU. */
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

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_C_FLASHJIT_H */
