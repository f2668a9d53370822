/*===- capi_test.c - The C API from C -------------------------------------===//
 *
 * Compiles a causal spec for the CPU through the C API, runs it on random
 * inputs and compares O and LSE with a naive double-precision attention
 * written here; checks that bad input comes back as status codes with a
 * message. Plain C: proves the header is C.
 *
 *===----------------------------------------------------------------------===*/
#include "capi_reference.h"

#include "flashjit-c/flashjit.h"

#include "capi_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 2, H = 3, SQ = 37, SK = 29, D = 32 };

int main(void) {
  static float q[B * H * SQ * D], k[B * H * SK * D], v[B * H * SK * D],
      o[B * H * SQ * D], lse[B * H * SQ];
  srand(12345u + (unsigned)time(NULL));
  for (int i = 0; i < B * H * SQ * D; ++i)
    q[i] = capi_uniform();
  for (int i = 0; i < B * H * SK * D; ++i)
    k[i] = capi_uniform(), v[i] = capi_uniform();

  flashjit_kernel *kernel = NULL;
  const char *spec = "attention(name=causal_c, causal=bottom_right, "
                     "head_dim=32, dtype=fp32, heads_q=3, heads_kv=3)";
  CHECK(flashjit_compile(spec, "cpu", &kernel) == FLASHJIT_OK);
  CHECK(kernel != NULL);
  CHECK(flashjit_kernel_ptx(kernel) == NULL);
  flashjit_tensor tq = capi_tensor4(q, B, H, SQ, D),
                  tk = capi_tensor4(k, B, H, SK, D),
                  tv = capi_tensor4(v, B, H, SK, D),
                  to = capi_tensor4(o, B, H, SQ, D),
                  tl = capi_tensor4(lse, B, H, SQ, 1);
  tl.rank = 3;
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, NULL, 0, NULL) ==
        FLASHJIT_OK);

  /* Naive attention in double: bottom-right causal, scale 1/sqrt(D). */
  double worstO = 0, worstL = 0;
  int emptyOk =
      capi_check_causal(B, H, SQ, SK, D, q, k, v, o, lse, &worstO, &worstL);
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
  flashjit_tensor wrong = capi_tensor4(k, B, H, SK, 16);
  CHECK(flashjit_run(kernel, &tq, &wrong, &tv, &to, &tl, NULL, 0, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "k.shape[3]") != NULL);
  flashjit_arg unknown = {"cap", FLASHJIT_ARG_F32, 30.0, 0, NULL, 0};
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, &unknown, 1, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "cap") != NULL);

  /* Values that do not fit their type are refused, never wrapped (issue 21):
   * i32 outside [-2^31, 2^31 - 1], f32 overflowing to inf. */
  flashjit_arg wide[] = {
      {"w", FLASHJIT_ARG_I32, 0, (int64_t)1 << 40, NULL, 0},
      {"w", FLASHJIT_ARG_I32, 0, -(int64_t)2147483648 - 1, NULL, 0},
      {"w", FLASHJIT_ARG_I32, 0, (int64_t)2147483647 + 1, NULL, 0},
      {"cap", FLASHJIT_ARG_F32, 1e300, 0, NULL, 0},
      {"cap", FLASHJIT_ARG_F32, -1e39, 0, NULL, 0}};
  const char *wideValue[] = {"1099511627776", "-2147483649", "2147483648",
                             "1e+300", "-1e+39"};
  for (int i = 0; i < 5; ++i) {
    CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, &wide[i], 1, NULL) ==
          FLASHJIT_USER_ERROR);
    CHECK(strstr(flashjit_last_error(), wide[i].name) != NULL);
    CHECK(strstr(flashjit_last_error(), wideValue[i]) != NULL);
    CHECK(strstr(flashjit_last_error(), "unknown") == NULL);
  }

  /* The same name twice, and an output aliasing an input (issue 21). */
  flashjit_arg twice[] = {{"cap", FLASHJIT_ARG_F32, 30.0, 0, NULL, 0},
                          {"cap", FLASHJIT_ARG_F32, 20.0, 0, NULL, 0}};
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, twice, 2, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "args[1] 'cap' repeats args[0]") != NULL);
  flashjit_tensor aliased = capi_tensor4(q, B, H, SQ, D);
  CHECK(flashjit_run(kernel, &tq, &tk, &tv, &aliased, &tl, NULL, 0, NULL) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "o overlaps q") != NULL);

  /* A GPU target compiles to PTX without a GPU. */
  flashjit_kernel *gpu = NULL;
  CHECK(flashjit_compile("attention(causal=top_left, head_dim=64, dtype=bf16)",
                         "sm_90a", &gpu) == FLASHJIT_OK);
  /* head_dim 64 on sm_90a: the default kernel uses wgmma. */
  CHECK(gpu && flashjit_kernel_ptx(gpu) &&
        strstr(flashjit_kernel_ptx(gpu), "wgmma.mma_async") != NULL);
  flashjit_kernel_destroy(gpu);
  flashjit_kernel_destroy(kernel);
  flashjit_kernel_destroy(NULL);

  return CHECK_SUMMARY();
}
