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

/** The kernel's PTX (GPU targets) or NULL (CPU). Owned by the kernel. */
const char *flashjit_kernel_ptx(const flashjit_kernel *kernel);

/** Frees a kernel (NULL is ignored). */
void flashjit_kernel_destroy(flashjit_kernel *kernel);

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_C_FLASHJIT_H */
