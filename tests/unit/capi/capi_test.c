/*===- capi_test.c - The C API from C -------------------------------------===//
 *
 * Compiles a causal spec for the CPU through the C API, runs it on random
 * inputs and compares O and LSE with a naive double-precision attention
 * written here; checks that bad input comes back as status codes with a
 * message. Plain C: proves the header is C.
 *
 *===----------------------------------------------------------------------===*/
#include "flashjit/flashjit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 2, H = 3, SQ = 37, SK = 29, D = 32 };

static int failures = 0, checks = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    ++checks;                                                                  \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__,   \
              __LINE__, #cond, flashjit_last_error());                         \
    }                                                                          \
  } while (0)

static flashjit_tensor tensor4(float *data, int64_t s0, int64_t s1, int64_t s2,
                               int64_t s3) {
  flashjit_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FLASHJIT_FP32;
  t.rank = 4;
  t.shape[0] = s0, t.shape[1] = s1, t.shape[2] = s2, t.shape[3] = s3;
  t.strides[3] = 1, t.strides[2] = s3, t.strides[1] = s2 * s3;
  t.strides[0] = s1 * s2 * s3;
  return t;
}

static float uniform(void) { return (float)rand() / (float)RAND_MAX * 2 - 1; }

int main(void) {
  static float q[B * H * SQ * D], k[B * H * SK * D], v[B * H * SK * D],
      o[B * H * SQ * D], lse[B * H * SQ];
  srand(12345u + (unsigned)time(NULL));
  for (int i = 0; i < B * H * SQ * D; ++i)
    q[i] = uniform();
  for (int i = 0; i < B * H * SK * D; ++i)
    k[i] = uniform(), v[i] = uniform();

  flashjit_kernel *kernel = NULL;
  const char *spec = "attention(name=causal_c, causal=bottom_right, "
                     "head_dim=32, dtype=fp32, heads_q=3, heads_kv=3)";
  CHECK(flashjit_compile(spec, "cpu", &kernel) == FLASHJIT_OK);
  CHECK(kernel != NULL);
  CHECK(flashjit_kernel_ptx(kernel) == NULL);
  flashjit_tensor tq = tensor4(q, B, H, SQ, D), tk = tensor4(k, B, H, SK, D),
                  tv = tensor4(v, B, H, SK, D), to = tensor4(o, B, H, SQ, D),
                  tl = tensor4(lse, B, H, SQ, 1);
  tl.rank = 3;
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, NULL, 0, NULL) ==
        FLASHJIT_OK);

  /* Naive attention in double: bottom-right causal, scale 1/sqrt(D). */
  double worstO = 0, worstL = 0;
  int emptyOk = 1;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < SQ; ++i) {
        double s[SK], m = -INFINITY, l = 0;
        int last = i + SK - SQ; /* keys 0..last are allowed */
        for (int j = 0; j <= last && j < SK; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += (double)q[((b * H + h) * SQ + i) * D + d] *
                   k[((b * H + h) * SK + j) * D + d];
          s[j] = dot * (1.0 / sqrt((double)D));
          if (s[j] > m)
            m = s[j];
        }
        float gotL = lse[(b * H + h) * SQ + i];
        if (last < 0) { /* no allowed key: O = 0, LSE = -inf exactly */
          for (int d = 0; d < D; ++d)
            emptyOk &= o[((b * H + h) * SQ + i) * D + d] == 0.0f;
          emptyOk &= isinf(gotL) && gotL < 0;
          continue;
        }
        for (int j = 0; j <= last; ++j)
          l += exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double want = 0;
          for (int j = 0; j <= last; ++j)
            want += exp(s[j] - m) / l * v[((b * H + h) * SK + j) * D + d];
          double e = fabs(o[((b * H + h) * SQ + i) * D + d] - want);
          if (e > worstO)
            worstO = e;
        }
        double e = fabs(gotL - (m + log(l)));
        if (e > worstL)
          worstL = e;
      }
  printf("max |O - O_ref| = %.3g, max |LSE - LSE_ref| = %.3g\n", worstO,
         worstL);
  CHECK(worstO < 1e-4);
  CHECK(worstL < 1e-4);
  CHECK(emptyOk);

  /* Errors come back as codes with a message naming the problem. */
  flashjit_kernel *bad = NULL;
  CHECK(flashjit_compile("attention(head_dim=", "cpu", &bad) ==
        FLASHJIT_USER_ERROR);
  CHECK(strlen(flashjit_last_error()) > 0);
  CHECK(flashjit_compile(spec, "sm_75", &bad) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "sm_75") != NULL);
  CHECK(flashjit_compile(NULL, "cpu", &bad) == FLASHJIT_USER_ERROR);
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, NULL, NULL, 0, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "lse") != NULL);
  flashjit_tensor wrong = tensor4(k, B, H, SK, 16);
  CHECK(flashjit_run(kernel, &tq, &wrong, &tv, &to, &tl, NULL, 0, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "k.shape[3]") != NULL);
  flashjit_arg unknown = {"cap", FLASHJIT_ARG_F32, 30.0, 0, NULL, 0};
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, &unknown, 1, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "cap") != NULL);

  /* A GPU target compiles to PTX without a GPU. */
  flashjit_kernel *gpu = NULL;
  CHECK(flashjit_compile("attention(causal=top_left, head_dim=64, dtype=bf16)",
                         "sm_90a", &gpu) == FLASHJIT_OK);
  CHECK(gpu && flashjit_kernel_ptx(gpu) &&
        strstr(flashjit_kernel_ptx(gpu), "mma.sync") != NULL);
  flashjit_kernel_destroy(gpu);
  flashjit_kernel_destroy(kernel);
  flashjit_kernel_destroy(NULL);

  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
