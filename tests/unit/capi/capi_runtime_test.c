/*===- capi_runtime_test.c - flashjit_c_runtime from C --------------------===//
 *
 * capi_runtime_test BUNDLE_DIR: the runtime-only C library (no compiler)
 * loads the kernels a CTest fixture bundled with `flashjit bundle`: any
 * spelling of a bundled spec is found, its PTX is the generated kernel, the
 * bundled CPU kernel runs and matches naive attention, and
 * every failure (compiling, a missing bundle, spec or target, a corrupted
 * entry) is a status code with a message naming the problem. On a machine
 * without a GPU, running a loaded kernel is FLASHJIT_DRIVER_ERROR; the
 * values computed on a GPU are checked by tests/gpu/torch_compare.py.
 *
 *===----------------------------------------------------------------------===*/
#include "capi_reference.h"

#include "flashjit-c/flashjit.h"

#include "capi_check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* A bundled block-sparse CPU kernel's bundled backward
 * (flashjit_run_backward_ex) runs in flashjit_c_runtime with a BSR mask of
 * every causal tile: the same identities as the dense backward below
 * (sum_j dV[j] = sum_i dO[i], every row sees key 0; sum_j dK[j] = 0); a
 * block-sparse kernel bundled without its backward names the bundle flag
 * that makes it. Returns 1 when every check held. */
static int test_bundled_block_sparse_backward(const char *dir) {
  enum { S = 100, D = 16 };
  static float q[S * D], k[S * D], v[S * D], o[S * D], lse[S], dO[S * D],
      dq[S * D], dk[S * D], dv[S * D];
  for (int i = 0; i < S * D; ++i)
    q[i] = capi_uniform(), k[i] = capi_uniform(), v[i] = capi_uniform(),
    dO[i] = capi_uniform();
  int ok = 1;
  flashjit_kernel *kernel = NULL;
  ok &= flashjit_load(dir,
                      "attention(name=bs_c, causal=top_left, "
                      "head_dim=16, dtype=fp32)",
                      "cpu", &kernel) == FLASHJIT_OK;
  if (!kernel)
    return 0;
  int64_t bm = 0, bn = 0;
  ok &= flashjit_kernel_tiles(kernel, &bm, &bn) == FLASHJIT_OK;
  int32_t offsets[S + 1], cols[S * S];
  int n = 0, rows = (int)((S + bm - 1) / bm);
  offsets[0] = 0;
  for (int m = 0; m < rows; ++m) {
    for (int t = 0; t * bn < S && t * bn < (m + 1) * bm; ++t)
      cols[n++] = t;
    offsets[m + 1] = n;
  }
  flashjit_block_mask *mask = NULL;
  ok &= flashjit_block_mask_from_bsr(kernel, 1, S, S, offsets, cols, n,
                                     &mask) == FLASHJIT_OK;
  flashjit_tensor tq = capi_tensor4(q, 1, 1, S, D),
                  tk = capi_tensor4(k, 1, 1, S, D),
                  tv = capi_tensor4(v, 1, 1, S, D),
                  to = capi_tensor4(o, 1, 1, S, D),
                  tl = capi_tensor4(lse, 1, 1, S, 1),
                  tdo = capi_tensor4(dO, 1, 1, S, D),
                  tdq = capi_tensor4(dq, 1, 1, S, D),
                  tdk = capi_tensor4(dk, 1, 1, S, D),
                  tdv = capi_tensor4(dv, 1, 1, S, D);
  tl.rank = 3;
  ok &= flashjit_run_block_sparse(kernel, &tq, &tk, &tv, &to, &tl, mask, NULL,
                                  0, NULL) == FLASHJIT_OK;
  ok &= flashjit_run_backward_ex(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq,
                                 &tdk, &tdv, NULL, NULL, 0, mask, NULL, 0, NULL,
                                 0, NULL) == FLASHJIT_OK;
  double worstV = 0, worstK = 0;
  for (int d = 0; d < D; ++d) {
    double sv = 0, so = 0, sk = 0;
    for (int j = 0; j < S; ++j)
      sv += dv[j * D + d], sk += dk[j * D + d], so += dO[j * D + d];
    worstV = fmax(worstV, fabs(sv - so));
    worstK = fmax(worstK, fabs(sk));
  }
  printf("bundled block-sparse CPU backward: max |sum dV - sum dO| = %.3g, "
         "max |sum dK| = %.3g\n",
         worstV, worstK);
  ok &= worstV < 1e-3 && worstK < 1e-3;
  flashjit_block_mask_destroy(mask);
  flashjit_kernel_destroy(kernel);

  kernel = NULL;
  ok &= flashjit_load(dir,
                      "attention(name=bs_nobwd, head_dim=16, "
                      "dtype=fp32)",
                      "cpu", &kernel) == FLASHJIT_OK;
  if (!kernel)
    return 0;
  ok &= flashjit_block_mask_from_bsr(kernel, 1, S, S, offsets, cols, n,
                                     &mask) == FLASHJIT_OK;
  ok &= flashjit_run_backward_ex(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq,
                                 &tdk, &tdv, NULL, NULL, 0, mask, NULL, 0, NULL,
                                 0, NULL) == FLASHJIT_USER_ERROR;
  printf("bundled block-sparse kernel without its backward: %s\n",
         flashjit_last_error());
  ok &= strstr(flashjit_last_error(), "flashjit_c_runtime") != NULL &&
        strstr(flashjit_last_error(), "--block-sparse") != NULL;
  flashjit_block_mask_destroy(mask);
  flashjit_kernel_destroy(kernel);
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: capi_runtime_test BUNDLE_DIR\n");
    return 2;
  }
  const char *dir = argv[1];
  flashjit_kernel *kernel = NULL;

  /* No compiler in this library. */
  CHECK(flashjit_compile("attention(head_dim=64)", "sm_90a", &kernel) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "flashjit_load") != NULL);
  CHECK(kernel == NULL);

  /* The bundled spec, spelled differently from the bundle's text (field
   * order, shorthands): canonicalised before the lookup. */
  CHECK(flashjit_load(dir,
                      "attention(dtype=bf16, head_dim=64, "
                      "causal=top_left)",
                      "sm_90a", &kernel) == FLASHJIT_OK);
  CHECK(kernel != NULL);
  if (kernel) {
    const char *ptx = flashjit_kernel_ptx(kernel);
    CHECK(ptx && strstr(ptx, ".target sm_90a") &&
          strstr(ptx, "wgmma.mma_async"));
    float dummy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    flashjit_tensor t;
    memset(&t, 0, sizeof t);
    t.data = dummy;
    t.dtype = FLASHJIT_BF16;
    t.rank = 4;
    for (int i = 0; i < 4; ++i)
      t.shape[i] = 1, t.strides[i] = 1;
    flashjit_status s =
        flashjit_run(kernel, &t, &t, &t, &t, NULL, NULL, 0, NULL);
    /* Without a GPU: a driver error saying why; with one, host pointers
     * or shapes are rejected before launch. Never OK. */
    CHECK(s == FLASHJIT_DRIVER_ERROR || s == FLASHJIT_USER_ERROR);
    CHECK(strlen(flashjit_last_error()) > 0);
  }
  flashjit_kernel_destroy(kernel);

  /* The sm_80 kernel of the second bundled spec. */
  kernel = NULL;
  CHECK(flashjit_load(dir,
                      "attention(mask=(kv_idx <= q_idx), head_dim=128, "
                      "dtype=fp16)",
                      "sm_80", &kernel) == FLASHJIT_OK);
  CHECK(kernel && strstr(flashjit_kernel_ptx(kernel), ".target sm_80"));
  flashjit_kernel_destroy(kernel);

  /* A spec bundled only with --mma mma.sync loads as that kernel. */
  kernel = NULL;
  CHECK(flashjit_load(dir, "attention(name=sync64, head_dim=64, dtype=fp16)",
                      "sm_90a", &kernel) == FLASHJIT_OK);
  CHECK(kernel && strstr(flashjit_kernel_ptx(kernel), "mma.sync") &&
        !strstr(flashjit_kernel_ptx(kernel), "wgmma"));
  flashjit_kernel_destroy(kernel);

  /* The GPU decode kernels bundled beside a forward (--kernel fwd,decode)
   * and alone (--kernel decode): found without the compiler; paged decoding
   * without a GPU is a driver error, bad input a user error naming it. */
  {
    kernel = NULL;
    CHECK(flashjit_load(dir,
                        "attention(name=dec64, causal=bottom_right, "
                        "head_dim=64, dtype=bf16, heads_q=8, heads_kv=2)",
                        "sm_90a", &kernel) == FLASHJIT_OK);
    CHECK(kernel && strstr(flashjit_kernel_ptx(kernel), ".entry dec64(") &&
          !strstr(flashjit_kernel_ptx(kernel), "dec64_decode"));
    flashjit_kernel_destroy(kernel);
    kernel = NULL;
    CHECK(flashjit_load(dir,
                        "attention(name=deconly, causal=bottom_right, "
                        "head_dim=128, dtype=fp16, heads_q=4, heads_kv=1)",
                        "sm_90a", &kernel) == FLASHJIT_OK);
    /* Without a GPU the decode-only kernel carries the decode module. */
    CHECK(kernel &&
          strstr(flashjit_kernel_ptx(kernel), ".entry deconly_decode(") &&
          strstr(flashjit_kernel_ptx(kernel), ".entry deconly_decode_merge("));
    static uint16_t q[4 * 128], kc[2 * 16 * 128], o[4 * 128];
    flashjit_tensor tq, tk, to;
    memset(&tq, 0, sizeof tq);
    tq.data = q;
    tq.dtype = FLASHJIT_FP16;
    tq.rank = 4;
    const int64_t qs[4] = {1, 4, 1, 128}, ks[4] = {2, 1, 16, 128};
    for (int i = 0; i < 4; ++i)
      tq.shape[i] = qs[i];
    tq.strides[3] = 1, tq.strides[2] = 128, tq.strides[1] = 128,
    tq.strides[0] = 512;
    tk = tq;
    tk.data = kc;
    for (int i = 0; i < 4; ++i)
      tk.shape[i] = ks[i];
    tk.strides[2] = 128, tk.strides[1] = 16 * 128, tk.strides[0] = 16 * 128;
    to = tq;
    to.data = o;
    const int32_t indptr[2] = {0, 1}, indices[1] = {1}, last[1] = {5};
    flashjit_page_table table;
    memset(&table, 0, sizeof table);
    table.layout = FLASHJIT_PAGED_CSR;
    table.batch = 1;
    table.kv_indptr = indptr;
    table.kv_indices = indices;
    table.num_indices = 1;
    table.kv_last_page_len = last;
    flashjit_status s =
        flashjit_run_paged(kernel, &tq, &tk, &tk, &table, &to, NULL, NULL, 0);
    CHECK(s == FLASHJIT_DRIVER_ERROR || s == FLASHJIT_USER_ERROR);
    CHECK(flashjit_run_paged_ex(kernel, &tq, &tk, &tk, &table, &to, NULL, NULL,
                                0, 2000, NULL) == FLASHJIT_USER_ERROR);
    CHECK(strstr(flashjit_last_error(), "num_splits = 2000") != NULL);
    CHECK(flashjit_run_paged(kernel, &tq, &tk, &tk, NULL, &to, NULL, NULL, 0) ==
          FLASHJIT_USER_ERROR);
    CHECK(strstr(flashjit_last_error(), "table is NULL") != NULL);
    flashjit_kernel_destroy(kernel);
    /* No sm_80 decode (nor forward) of that spec in the bundle. */
    kernel = NULL;
    CHECK(flashjit_load(dir,
                        "attention(name=deconly, causal=bottom_right, "
                        "head_dim=128, dtype=fp16, heads_q=4, heads_kv=1)",
                        "sm_80", &kernel) == FLASHJIT_USER_ERROR);
    CHECK(kernel == NULL);
  }

  /* The bundled CPU kernel (a kernel.so): loaded and run without the
   * compiler, checked against naive attention on fresh random inputs. */
  {
    enum { B = 2, H = 3, SQ = 37, SK = 29, D = 32 };
    static float q[B * H * SQ * D], k[B * H * SK * D], v[B * H * SK * D],
        o[B * H * SQ * D], lse[B * H * SQ];
    srand(777u + (unsigned)time(NULL));
    for (int i = 0; i < B * H * SQ * D; ++i)
      q[i] = capi_uniform();
    for (int i = 0; i < B * H * SK * D; ++i)
      k[i] = capi_uniform(), v[i] = capi_uniform();
    kernel = NULL;
    CHECK(flashjit_load(dir,
                        "attention(heads_q=3, heads_kv=3, dtype=fp32, "
                        "head_dim=32, causal=bottom_right, name=causal_c)",
                        "cpu", &kernel) == FLASHJIT_OK);
    CHECK(kernel && flashjit_kernel_ptx(kernel) == NULL);
    flashjit_tensor tq = capi_tensor4(q, B, H, SQ, D),
                    tk = capi_tensor4(k, B, H, SK, D),
                    tv = capi_tensor4(v, B, H, SK, D),
                    to = capi_tensor4(o, B, H, SQ, D),
                    tl = capi_tensor4(lse, B, H, SQ, 1);
    tl.rank = 3;
    CHECK(kernel && flashjit_run(kernel, &tq, &tk, &tv, &to, &tl, NULL, 0,
                                 NULL) == FLASHJIT_OK);
    double worstO = 1, worstL = 1;
    int emptyOk =
        capi_check_causal(B, H, SQ, SK, D, q, k, v, o, lse, &worstO, &worstL);
    printf("bundled CPU kernel: max |O - O_ref| = %.3g, max |LSE - LSE_ref| "
           "= %.3g\n",
           worstO, worstL);
    CHECK(worstO < 1e-4);
    CHECK(worstL < 1e-4);
    CHECK(emptyOk);
    /* Its backward, bundled beside it (--kernel fwd,bwd), runs without the
     * compiler. Two identities of the exact gradients: softmax rows sum to
     * 1, so sum_j dV[j] = sum of dO over the rows that see a key (bottom
     * right: i >= SQ - SK); each row of dS sums to 0, so sum_j dK[j] = 0. */
    static float dO[B * H * SQ * D], dq[B * H * SQ * D], dk[B * H * SK * D],
        dv[B * H * SK * D];
    for (int i = 0; i < B * H * SQ * D; ++i)
      dO[i] = capi_uniform();
    flashjit_tensor tdo = capi_tensor4(dO, B, H, SQ, D),
                    tdq = capi_tensor4(dq, B, H, SQ, D),
                    tdk = capi_tensor4(dk, B, H, SK, D),
                    tdv = capi_tensor4(dv, B, H, SK, D);
    CHECK(flashjit_run_backward(kernel, &tq, &tk, &tv, &to, &tl, &tdo, &tdq,
                                &tdk, &tdv, NULL, 0, NULL, 0,
                                NULL) == FLASHJIT_OK);
    double worstV = 0, worstK = 0, dqAbs = 0;
    for (int bh = 0; bh < B * H; ++bh)
      for (int d = 0; d < D; ++d) {
        double sv = 0, so = 0, sk = 0;
        for (int j = 0; j < SK; ++j) {
          sv += dv[(bh * SK + j) * D + d];
          sk += dk[(bh * SK + j) * D + d];
        }
        for (int i = SQ - SK; i < SQ; ++i)
          so += dO[(bh * SQ + i) * D + d];
        worstV = fmax(worstV, fabs(sv - so));
        worstK = fmax(worstK, fabs(sk));
        for (int i = 0; i < SQ; ++i)
          dqAbs += fabs(dq[(bh * SQ + i) * D + d]);
      }
    printf("bundled CPU backward: max |sum dV - sum dO| = %.3g, max |sum dK| "
           "= %.3g\n",
           worstV, worstK);
    CHECK(worstV < 1e-3);
    CHECK(worstK < 1e-3);
    CHECK(dqAbs > 0 && dqAbs == dqAbs);
    flashjit_kernel_destroy(kernel);
    CHECK(flashjit_load(dir, "attention(head_dim=32)", "cpu", &kernel) ==
          FLASHJIT_USER_ERROR);
    CHECK(test_bundled_block_sparse_backward(dir));
  }

  /* Failures name what was wrong. */
  flashjit_kernel *bad = NULL;
  CHECK(flashjit_load(dir, "attention(head_dim=32)", "sm_90a", &bad) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "head_dim_qk=32") != NULL);
  CHECK(flashjit_load(dir,
                      "attention(dtype=bf16, head_dim=64, "
                      "causal=top_left)",
                      "sm_75", &bad) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "sm_75") != NULL);
  CHECK(flashjit_load("/nonexistent/flashjit-bundle", "attention()", "sm_90a",
                      &bad) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "/nonexistent/flashjit-bundle") != NULL);
  CHECK(flashjit_load(dir, "attention(head_dim=", "sm_90a", &bad) ==
        FLASHJIT_USER_ERROR);
  CHECK(flashjit_load(NULL, "attention()", "sm_90a", &bad) ==
        FLASHJIT_USER_ERROR);
  CHECK(bad == NULL);

  return CHECK_SUMMARY();
}
