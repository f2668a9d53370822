/*===- capi_backward_test.c - flashjit_run_backward from C ----------------===//
 *
 * The backward through the C API on the CPU target, checked against central
 * finite differences of the forward (through flashjit_run) for the loss
 * L = sum(dO * O): dQ, dK and dV at sampled elements, the gradient of an f32
 * parameter (softcap's cap) and of an f32 buffer (ALiBi-style slopes), all
 * within 2e-3 * (1 + |g|) (fp32 forward, step 1e-2: truncation and
 * rounding error both well below that). Also the errors: an unknown grad
 * name, a wrong buffer size, a GPU-less GPU kernel is not reachable here.
 *
 *===----------------------------------------------------------------------===*/
#include "flashjit-c/flashjit.h"

#include "capi_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, HQ = 2, HKV = 1, SQ = 5, SK = 7, D = 4 };

static float q[B * HQ * SQ * D], k[B * HKV * SK * D], v[B * HKV * SK * D];
static float o[B * HQ * SQ * D], dO[B * HQ * SQ * D], lse[B * HQ * SQ];
static float dq[B * HQ * SQ * D], dk[B * HKV * SK * D], dv[B * HKV * SK * D];
static float slope[HQ];
static float cap = 1.5f;

static flashjit_tensor tensor(float *data, int64_t b, int64_t h, int64_t s,
                              int64_t d) {
  flashjit_tensor t;
  t.data = data;
  t.dtype = FLASHJIT_FP32;
  t.rank = 4;
  t.shape[0] = b, t.shape[1] = h, t.shape[2] = s, t.shape[3] = d;
  t.strides[3] = 1, t.strides[2] = d, t.strides[1] = s * d,
  t.strides[0] = h * s * d;
  return t;
}

static flashjit_kernel *kernel;

static void args(flashjit_arg a[2]) {
  memset(a, 0, 2 * sizeof(flashjit_arg));
  a[0].name = "cap";
  a[0].kind = FLASHJIT_ARG_F32;
  a[0].scalar = cap;
  a[1].name = "slope";
  a[1].kind = FLASHJIT_ARG_BUFFER_F32;
  a[1].data = slope;
  a[1].size = HQ;
}

/* L = sum(dO * O) with the forward at the current inputs. */
static double loss(void) {
  flashjit_tensor tq = tensor(q, B, HQ, SQ, D), tk = tensor(k, B, HKV, SK, D),
                  tv = tensor(v, B, HKV, SK, D), to = tensor(o, B, HQ, SQ, D);
  flashjit_tensor tl = tensor(lse, B, HQ, SQ, 1);
  tl.rank = 3;
  tl.strides[2] = 1, tl.strides[1] = SQ, tl.strides[0] = HQ * SQ;
  flashjit_arg a[2];
  args(a);
  if (flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, a, 2, NULL) != FLASHJIT_OK)
    return NAN;
  double l = 0;
  for (int i = 0; i < B * HQ * SQ * D; ++i)
    l += (double)dO[i] * o[i];
  return l;
}

static int fdCheck(float *x, double grad, const char *what) {
  const float h = 1e-2f;
  float x0 = *x;
  *x = x0 + h;
  double lp = loss();
  *x = x0 - h;
  double lm = loss();
  *x = x0;
  double fd = (lp - lm) / (2.0 * h);
  int ok = fabs(fd - grad) <= 2e-3 * (1.0 + fabs(grad));
  if (!ok)
    fprintf(stderr, "%s: analytic %g, finite difference %g\n", what, grad, fd);
  return ok;
}

int main(void) {
  srand(12345);
  for (int i = 0; i < B * HQ * SQ * D; ++i) {
    q[i] = (float)rand() / RAND_MAX * 2 - 1;
    dO[i] = (float)rand() / RAND_MAX * 2 - 1;
  }
  for (int i = 0; i < B * HKV * SK * D; ++i) {
    k[i] = (float)rand() / RAND_MAX * 2 - 1;
    v[i] = (float)rand() / RAND_MAX * 2 - 1;
  }
  slope[0] = 0.25f, slope[1] = 0.5f;
  const char *spec =
      "attention(name=capi_bwd, mask=(kv_idx <= (q_idx + 2)), "
      "score=((param<f32>(cap) * tanh((score / param<f32>(cap)))) - "
      "(buffer<f32>(slope)[head] * cast<f32>(abs((q_idx - kv_idx))))), "
      "head_dim=4, dtype=fp32, heads_q=2, heads_kv=1, scale=2.0)";
  CHECK(flashjit_compile(spec, "cpu", &kernel) == FLASHJIT_OK);
  if (!kernel)
    return CHECK_SUMMARY();
  CHECK(isfinite(loss()));

  flashjit_tensor tq = tensor(q, B, HQ, SQ, D), tk = tensor(k, B, HKV, SK, D),
                  tv = tensor(v, B, HKV, SK, D), to = tensor(o, B, HQ, SQ, D),
                  tdo = tensor(dO, B, HQ, SQ, D),
                  tdq = tensor(dq, B, HQ, SQ, D),
                  tdk = tensor(dk, B, HKV, SK, D),
                  tdv = tensor(dv, B, HKV, SK, D);
  flashjit_tensor tl = tensor(lse, B, HQ, SQ, 1);
  tl.rank = 3;
  tl.strides[2] = 1, tl.strides[1] = SQ, tl.strides[0] = HQ * SQ;
  flashjit_arg a[2];
  args(a);
  float dcap = NAN, dslope[HQ] = {NAN, NAN};
  flashjit_grad g[2] = {{"cap", &dcap, 1}, {"slope", dslope, HQ}};
  CHECK(flashjit_run_backward(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk,
                              &tdv, a, 2, g, 2, NULL) == FLASHJIT_OK);
  CHECK(fdCheck(&cap, dcap, "d cap"));
  CHECK(fdCheck(&slope[0], dslope[0], "d slope[0]"));
  CHECK(fdCheck(&slope[1], dslope[1], "d slope[1]"));
  for (int i = 0; i < B * HQ * SQ * D; i += 7)
    CHECK(fdCheck(&q[i], dq[i], "dq"));
  for (int i = 0; i < B * HKV * SK * D; i += 5) {
    CHECK(fdCheck(&k[i], dk[i], "dk"));
    CHECK(fdCheck(&v[i], dv[i], "dv"));
  }

  /* Errors: a name with no gradient, a wrong buffer size, NULL lse. */
  flashjit_grad bad[1] = {{"nope", &dcap, 1}};
  CHECK(flashjit_run_backward(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk,
                              &tdv, a, 2, bad, 1, NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "nope") != NULL);
  flashjit_grad wrong[1] = {{"slope", dslope, 3}};
  CHECK(flashjit_run_backward(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk,
                              &tdv, a, 2, wrong, 1,
                              NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "size = 3, expected 2") != NULL);
  CHECK(flashjit_run_backward(kernel, &tq, &tk, &tv, &to, NULL, &tdo, &tdq,
                              &tdk, &tdv, a, 2, NULL, 0,
                              NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "lse is NULL") != NULL);
  flashjit_kernel_destroy(kernel);

  /* A block-sparse or varlen kernel: this entry point has no block mask or
   * cu_seqlens argument, so a dense backward would ignore them (it did
   * before 2026-12-02): refused, naming the mode. */
  const char *modes[2] = {"block-sparse", "varlen"};
  unsigned flags[2] = {FLASHJIT_COMPILE_BLOCK_SPARSE, FLASHJIT_COMPILE_VARLEN};
  for (int m = 0; m < 2; ++m) {
    flashjit_kernel *moded = NULL;
    CHECK(flashjit_compile_ex("attention(name=capi_bwd_mode, head_dim=4, "
                              "dtype=fp32)",
                              "cpu", flags[m], &moded) == FLASHJIT_OK);
    if (!moded)
      continue;
    flashjit_tensor mq = tensor(q, 1, 1, SQ, D), mk = tensor(k, 1, 1, SK, D),
                    mv = tensor(v, 1, 1, SK, D), mo = tensor(o, 1, 1, SQ, D),
                    mdo = tensor(dO, 1, 1, SQ, D),
                    mdq = tensor(dq, 1, 1, SQ, D),
                    mdk = tensor(dk, 1, 1, SK, D),
                    mdv = tensor(dv, 1, 1, SK, D);
    flashjit_tensor ml = tensor(lse, 1, 1, SQ, 1);
    ml.rank = 3;
    ml.strides[2] = 1, ml.strides[1] = SQ, ml.strides[0] = SQ;
    CHECK(flashjit_run_backward(moded, &mq, &mk, &mv, &mo, &ml, &mdo, &mdq,
                                &mdk, &mdv, NULL, 0, NULL, 0,
                                NULL) == FLASHJIT_USER_ERROR);
    CHECK(strstr(flashjit_last_error(), modes[m]) != NULL);
    CHECK(strstr(flashjit_last_error(), "dense-call kernels only") != NULL);
    flashjit_kernel_destroy(moded);
  }
  return CHECK_SUMMARY();
}
