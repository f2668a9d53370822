/*===- capi_sparse_test.c - Varlen, block masks and text helpers in C -----===//
 *
 * The C API entry points beyond dense runs, on the CPU target, each checked
 * against a naive double-precision attention written here:
 * - flashjit_version (the CMake project's version) and the canonical text
 *   of expressions and specs (an expression cannot smuggle in a field);
 * - flashjit_compile_ex + flashjit_run_varlen: a packed batch of sequences
 *   of odd lengths, one of them empty, bottom-right causal, GQA;
 * - flashjit_build_block_mask + flashjit_run_block_sparse: a document mask
 *   read from a buffer; the mask's lists are compared with tile classes
 *   computed here by brute force;
 * - flashjit_block_mask_from_bsr: a user layout (allowed = layout AND mask);
 * - a block-sparse varlen kernel (flashjit_build_varlen_block_mask);
 * - errors as status codes naming the field.
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

/** Attention of one query row in double: keys j < sk with allowed[j];
 *  q, k and v rows of d floats, k/v rows kstride floats apart. Stores O in
 *  o[d] and returns LSE (O = 0 and -inf when nothing is allowed). */
static double ref_row(int d, const float *q, const float *k, const float *v,
                      long kstride, int sk, const unsigned char *allowed,
                      double *o) {
  double m = -INFINITY, l = 0;
  for (int c = 0; c < d; ++c)
    o[c] = 0;
  double *s = (double *)malloc(sizeof(double) * (sk > 0 ? sk : 1));
  for (int j = 0; j < sk; ++j) {
    if (!allowed[j])
      continue;
    double dot = 0;
    for (int c = 0; c < d; ++c)
      dot += (double)q[c] * k[j * kstride + c];
    s[j] = dot / sqrt((double)d);
    if (s[j] > m)
      m = s[j];
  }
  if (m == -INFINITY) {
    free(s);
    return -INFINITY;
  }
  for (int j = 0; j < sk; ++j)
    if (allowed[j])
      l += exp(s[j] - m);
  for (int j = 0; j < sk; ++j)
    if (allowed[j])
      for (int c = 0; c < d; ++c)
        o[c] += exp(s[j] - m) / l * v[j * kstride + c];
  free(s);
  return m + log(l);
}

/** Largest |got - want| over a row, and whether an empty row is exact. */
static void compare_row(int d, const float *got_o, float got_lse,
                        const double *want_o, double want_lse, double *worst,
                        int *empty_ok) {
  if (want_lse == -INFINITY) {
    *empty_ok &= isinf(got_lse) && got_lse < 0;
    for (int c = 0; c < d; ++c)
      *empty_ok &= got_o[c] == 0.0f;
    return;
  }
  for (int c = 0; c < d; ++c)
    if (fabs(got_o[c] - want_o[c]) > *worst)
      *worst = fabs(got_o[c] - want_o[c]);
  if (fabs(got_lse - want_lse) > *worst)
    *worst = fabs(got_lse - want_lse);
}

static flashjit_tensor tensor(float *data, int rank, const int64_t *shape) {
  flashjit_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FLASHJIT_FP32;
  t.rank = rank;
  int64_t acc = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = acc;
    acc *= shape[i];
  }
  return t;
}

static float *random_floats(long n) {
  float *p = (float *)malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (long i = 0; i < n; ++i)
    p[i] = capi_uniform();
  return p;
}

static void test_text(void) {
  CHECK(strcmp(flashjit_version(), FLASHJIT_EXPECTED_VERSION) == 0);
  const char *out = NULL;
  CHECK(flashjit_canonical_expr("kv_idx<=q_idx", &out) == FLASHJIT_OK);
  CHECK(out && strcmp(out, "(kv_idx <= q_idx)") == 0);
  /* An expression is one expression: no way to set another field. */
  CHECK(flashjit_canonical_expr("true, heads_q=4", &out) ==
        FLASHJIT_USER_ERROR);
  char spec[256];
  CHECK(flashjit_spec_canonicalize("attention(head_dim=32, dtype=fp32)", spec,
                                   sizeof spec, NULL) == FLASHJIT_OK);
  CHECK(strstr(spec, "head_dim_qk=32, head_dim_v=32") != NULL);
  CHECK(flashjit_spec_canonicalize("attention(head_dim=)", spec, sizeof spec,
                                   NULL) == FLASHJIT_USER_ERROR);
}

enum { D = 16, HQ = 4, HKV = 2 };

static void test_varlen(void) {
  /* Bottom-right causal per sequence; sequence 1 is empty. */
  const int32_t cuq[] = {0, 37, 37, 102, 107};
  const int32_t cuk[] = {0, 50, 53, 118, 118};
  const int nseq = 4, tq = 107, tk = 118;
  flashjit_kernel *kern = NULL;
  CHECK(flashjit_compile_ex("attention(causal=bottom_right, head_dim=16, "
                            "dtype=fp32, heads_q=4, heads_kv=2)",
                            "cpu", FLASHJIT_COMPILE_VARLEN,
                            &kern) == FLASHJIT_OK);
  if (!kern)
    return;
  CHECK(flashjit_kernel_flags(kern) == FLASHJIT_COMPILE_VARLEN);
  float *q = random_floats((long)tq * HQ * D),
        *k = random_floats((long)tk * HKV * D),
        *v = random_floats((long)tk * HKV * D),
        *o = random_floats((long)tq * HQ * D),
        *lse = random_floats((long)HQ * tq);
  int64_t sq[] = {tq, HQ, D}, sk[] = {tk, HKV, D}, sl[] = {HQ, tq};
  flashjit_tensor Q = tensor(q, 3, sq), K = tensor(k, 3, sk),
                  V = tensor(v, 3, sk), O = tensor(o, 3, sq),
                  L = tensor(lse, 2, sl);
  CHECK(flashjit_run_varlen(kern, &Q, &K, &V, &O, &L, cuq, cuk, nseq, NULL,
                            NULL, 0, NULL) == FLASHJIT_OK);
  double worst = 0, want[D];
  int empty_ok = 1;
  unsigned char allowed[128];
  for (int b = 0; b < nseq; ++b) {
    int lq = cuq[b + 1] - cuq[b], lk = cuk[b + 1] - cuk[b];
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < lq; ++i) {
        for (int j = 0; j < lk; ++j)
          allowed[j] = j <= i + lk - lq;
        int row = cuq[b] + i, hk = h / (HQ / HKV);
        double l = ref_row(
            D, q + ((long)row * HQ + h) * D, k + ((long)cuk[b] * HKV + hk) * D,
            v + ((long)cuk[b] * HKV + hk) * D, HKV * D, lk, allowed, want);
        compare_row(D, o + ((long)row * HQ + h) * D, lse[(long)h * tq + row],
                    want, l, &worst, &empty_ok);
      }
  }
  printf("varlen: max error %.3g\n", worst);
  CHECK(worst < 1e-4);
  CHECK(empty_ok);

  /* Errors: a decreasing cu_seqlens entry, a dense run of a varlen kernel,
   * a block mask for a dense varlen kernel. */
  const int32_t bad[] = {0, 37, 30, 102, 107};
  CHECK(flashjit_run_varlen(kern, &Q, &K, &V, &O, &L, bad, cuk, nseq, NULL,
                            NULL, 0, NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "cu_seqlens_q") != NULL);
  CHECK(flashjit_run_varlen(kern, &Q, &K, &V, &O, &L, cuq, cuk, -1, NULL, NULL,
                            0, NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "num_seqs") != NULL);
  CHECK(flashjit_run(kern, &Q, &K, &V, &O, &L, NULL, 0, NULL) ==
        FLASHJIT_USER_ERROR);
  flashjit_block_mask *m = NULL;
  CHECK(flashjit_build_varlen_block_mask(kern, cuq, cuk, nseq, NULL, 0, NULL,
                                         &m) == FLASHJIT_USER_ERROR);
  flashjit_kernel_destroy(kern);
  free(q), free(k), free(v), free(o), free(lse);
}

enum { S = 150, B = 2 };

/** Document ids of S tokens: documents of 40, 70 and 40 tokens. */
static int doc_of(int i) { return i < 40 ? 0 : i < 110 ? 1 : 2; }

static void test_block_sparse(void) {
  flashjit_kernel *kern = NULL;
  CHECK(flashjit_compile_ex(
            "attention(mask=(buffer<i32>(doc)[q_idx] == "
            "buffer<i32>(doc)[kv_idx]), head_dim=16, dtype=fp32, heads_q=4, "
            "heads_kv=2)",
            "cpu", FLASHJIT_COMPILE_BLOCK_SPARSE, &kern) == FLASHJIT_OK);
  if (!kern)
    return;
  int64_t bm = 0, bn = 0;
  CHECK(flashjit_kernel_tiles(kern, &bm, &bn) == FLASHJIT_OK);
  CHECK(bm > 0 && bn > 0);
  int32_t doc[S];
  for (int i = 0; i < S; ++i)
    doc[i] = doc_of(i);
  flashjit_arg arg = {"doc", FLASHJIT_ARG_BUFFER_I32, 0, 0, doc, S};
  flashjit_block_mask *mask = NULL;
  CHECK(flashjit_build_block_mask(kern, B, S, S, &arg, 1, NULL, &mask) ==
        FLASHJIT_OK);
  if (!mask)
    return;
  flashjit_block_mask_info info;
  CHECK(flashjit_block_mask_get_info(mask, &info) == FLASHJIT_OK);
  int64_t nq = (S + bm - 1) / bm, nk = (S + bn - 1) / bn;
  CHECK(info.block_m == bm && info.block_n == bn);
  CHECK(info.num_q_tiles == nq && info.num_kv_tiles == nk);
  CHECK(info.seqlen_q == S && info.seqlen_k == S && !info.varlen);
  /* The mask reads neither batch nor head: one shared row set. */
  CHECK(info.batch == 1 && info.heads == 1);
  int32_t *num = (int32_t *)calloc((size_t)nq, sizeof(int32_t)),
          *idx = (int32_t *)calloc((size_t)(nq * nk), sizeof(int32_t)),
          *fnum = (int32_t *)calloc((size_t)nq, sizeof(int32_t)),
          *fidx = (int32_t *)calloc((size_t)(nq * nk), sizeof(int32_t));
  CHECK(flashjit_block_mask_copy(mask, num, idx, fnum, fidx) == FLASHJIT_OK);
  /* Brute force: a tile is full when the mask holds everywhere in it,
   * partial when somewhere, unlisted otherwise. */
  int lists_ok = 1;
  for (int64_t m = 0; m < nq; ++m) {
    int np = 0, nf = 0;
    for (int64_t n = 0; n < nk; ++n) {
      int any = 0, all = 1;
      for (int64_t i = m * bm; i < (m + 1) * bm && i < S; ++i)
        for (int64_t j = n * bn; j < (n + 1) * bn && j < S; ++j) {
          int a = doc_of((int)i) == doc_of((int)j);
          any |= a, all &= a;
        }
      if (any && all)
        lists_ok &= nf < fnum[m] && fidx[m * nk + nf++] == n;
      else if (any)
        lists_ok &= np < num[m] && idx[m * nk + np++] == n;
    }
    lists_ok &= np == num[m] && nf == fnum[m];
  }
  CHECK(lists_ok);

  float *q = random_floats((long)B * HQ * S * D),
        *k = random_floats((long)B * HKV * S * D),
        *v = random_floats((long)B * HKV * S * D),
        *o = random_floats((long)B * HQ * S * D),
        *lse = random_floats((long)B * HQ * S);
  int64_t sq[] = {B, HQ, S, D}, sk[] = {B, HKV, S, D}, sl[] = {B, HQ, S};
  flashjit_tensor Q = tensor(q, 4, sq), K = tensor(k, 4, sk),
                  V = tensor(v, 4, sk), O = tensor(o, 4, sq),
                  L = tensor(lse, 3, sl);
  CHECK(flashjit_run_block_sparse(kern, &Q, &K, &V, &O, &L, mask, &arg, 1,
                                  NULL) == FLASHJIT_OK);
  double worst = 0, want[D];
  int empty_ok = 1;
  unsigned char allowed[S];
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < S; ++i) {
        for (int j = 0; j < S; ++j)
          allowed[j] = doc_of(i) == doc_of(j);
        int hk = h / (HQ / HKV);
        double l =
            ref_row(D, q + (((long)b * HQ + h) * S + i) * D,
                    k + ((long)b * HKV + hk) * S * D,
                    v + ((long)b * HKV + hk) * S * D, D, S, allowed, want);
        compare_row(D, o + (((long)b * HQ + h) * S + i) * D,
                    lse[((long)b * HQ + h) * S + i], want, l, &worst,
                    &empty_ok);
      }
  printf("block mask: max error %.3g\n", worst);
  CHECK(worst < 1e-4);

  /* A BSR layout of the diagonal tiles (shared by every head): allowed =
   * same tile row and column AND the document mask. */
  int32_t *offsets = (int32_t *)malloc(sizeof(int32_t) * (size_t)(nq + 1));
  int32_t *cols = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq);
  offsets[0] = 0;
  for (int64_t m = 0; m < nq; ++m)
    offsets[m + 1] = (int32_t)(m + 1), cols[m] = (int32_t)m;
  flashjit_block_mask *bsr = NULL;
  CHECK(bm == bn); /* the diagonal layout needs square tiles */
  CHECK(flashjit_block_mask_from_bsr(kern, 1, S, S, offsets, cols, nq, &bsr) ==
        FLASHJIT_OK);
  CHECK(flashjit_run_block_sparse(kern, &Q, &K, &V, &O, &L, bsr, &arg, 1,
                                  NULL) == FLASHJIT_OK);
  worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < S; ++i) {
        for (int j = 0; j < S; ++j)
          allowed[j] = doc_of(i) == doc_of(j) && i / bm == j / bn;
        int hk = h / (HQ / HKV);
        double l =
            ref_row(D, q + (((long)b * HQ + h) * S + i) * D,
                    k + ((long)b * HKV + hk) * S * D,
                    v + ((long)b * HKV + hk) * S * D, D, S, allowed, want);
        compare_row(D, o + (((long)b * HQ + h) * S + i) * D,
                    lse[((long)b * HQ + h) * S + i], want, l, &worst,
                    &empty_ok);
      }
  printf("BSR layout: max error %.3g\n", worst);
  CHECK(worst < 1e-4);
  CHECK(empty_ok);

  /* Errors: a BSR column out of range, a mask built for other seqlens, no
   * mask, a dense run of a block-sparse kernel, unknown flags. */
  cols[0] = (int32_t)nk;
  flashjit_block_mask *badm = NULL;
  CHECK(flashjit_block_mask_from_bsr(kern, 1, S, S, offsets, cols, nq, &badm) ==
        FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "col_indices") != NULL);
  flashjit_block_mask *shorter = NULL;
  CHECK(flashjit_build_block_mask(kern, B, S - 1, S, &arg, 1, NULL, &shorter) ==
        FLASHJIT_OK);
  CHECK(flashjit_run_block_sparse(kern, &Q, &K, &V, &O, &L, shorter, &arg, 1,
                                  NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "seqlen") != NULL);
  CHECK(flashjit_run_block_sparse(kern, &Q, &K, &V, &O, &L, NULL, &arg, 1,
                                  NULL) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "mask is NULL") != NULL);
  CHECK(flashjit_run(kern, &Q, &K, &V, &O, &L, &arg, 1, NULL) ==
        FLASHJIT_USER_ERROR);
  flashjit_kernel *none = NULL;
  CHECK(flashjit_compile_ex("attention(head_dim=16, dtype=fp32)", "cpu", 8,
                            &none) == FLASHJIT_USER_ERROR);
  CHECK(strstr(flashjit_last_error(), "0x8") != NULL);
  flashjit_block_mask_destroy(shorter);
  flashjit_block_mask_destroy(bsr);
  flashjit_block_mask_destroy(mask);
  flashjit_block_mask_destroy(NULL);
  flashjit_kernel_destroy(kern);
  free(num), free(idx), free(fnum), free(fidx), free(offsets), free(cols);
  free(q), free(k), free(v), free(o), free(lse);
}

static void test_varlen_block_sparse(void) {
  /* Packed documents: causal inside each sequence through a block mask. */
  const int32_t cu[] = {0, 70, 70, 200};
  flashjit_kernel *kern = NULL;
  CHECK(flashjit_compile_ex(
            "attention(causal=top_left, head_dim=16, "
            "dtype=fp32, heads_q=4, heads_kv=2)",
            "cpu", FLASHJIT_COMPILE_VARLEN | FLASHJIT_COMPILE_BLOCK_SPARSE,
            &kern) == FLASHJIT_OK);
  if (!kern)
    return;
  flashjit_block_mask *mask = NULL;
  CHECK(flashjit_build_varlen_block_mask(kern, cu, cu, 3, NULL, 0, NULL,
                                         &mask) == FLASHJIT_OK);
  flashjit_block_mask_info info;
  CHECK(flashjit_block_mask_get_info(mask, &info) == FLASHJIT_OK);
  CHECK(info.varlen == 1 && info.batch == 3 && info.seqlen_q == 130);
  const int t = 200;
  float *q = random_floats((long)t * HQ * D),
        *k = random_floats((long)t * HKV * D),
        *v = random_floats((long)t * HKV * D),
        *o = random_floats((long)t * HQ * D),
        *lse = random_floats((long)HQ * t);
  int64_t sq[] = {t, HQ, D}, sk[] = {t, HKV, D}, sl[] = {HQ, t};
  flashjit_tensor Q = tensor(q, 3, sq), K = tensor(k, 3, sk),
                  V = tensor(v, 3, sk), O = tensor(o, 3, sq),
                  L = tensor(lse, 2, sl);
  CHECK(flashjit_run_varlen(kern, &Q, &K, &V, &O, &L, cu, cu, 3, mask, NULL, 0,
                            NULL) == FLASHJIT_OK);
  double worst = 0, want[D];
  int empty_ok = 1;
  unsigned char allowed[200];
  for (int b = 0; b < 3; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < cu[b + 1] - cu[b]; ++i) {
        int len = cu[b + 1] - cu[b], row = cu[b] + i, hk = h / (HQ / HKV);
        for (int j = 0; j < len; ++j)
          allowed[j] = j <= i;
        double l = ref_row(
            D, q + ((long)row * HQ + h) * D, k + ((long)cu[b] * HKV + hk) * D,
            v + ((long)cu[b] * HKV + hk) * D, HKV * D, len, allowed, want);
        compare_row(D, o + ((long)row * HQ + h) * D, lse[(long)h * t + row],
                    want, l, &worst, &empty_ok);
      }
  printf("varlen block mask: max error %.3g\n", worst);
  CHECK(worst < 1e-4);
  CHECK(empty_ok);
  /* The mask keeps its cu_seqlens: other ones are refused. */
  const int32_t other[] = {0, 60, 70, 200};
  CHECK(flashjit_run_varlen(kern, &Q, &K, &V, &O, &L, other, other, 3, mask,
                            NULL, 0, NULL) == FLASHJIT_USER_ERROR);
  CHECK(flashjit_run_varlen(kern, &Q, &K, &V, &O, &L, cu, cu, 3, NULL, NULL, 0,
                            NULL) == FLASHJIT_USER_ERROR);
  flashjit_block_mask_destroy(mask);
  flashjit_kernel_destroy(kern);
  free(q), free(k), free(v), free(o), free(lse);

  /* GPU targets compile both modes to PTX without a GPU; the block-sparse
   * module carries its builder. */
  flashjit_kernel *gpu = NULL;
  CHECK(flashjit_compile_ex(
            "attention(causal=top_left, head_dim=64, "
            "dtype=bf16)",
            "sm_80", FLASHJIT_COMPILE_VARLEN | FLASHJIT_COMPILE_BLOCK_SPARSE,
            &gpu) == FLASHJIT_OK);
  CHECK(gpu && flashjit_kernel_ptx(gpu) &&
        strstr(flashjit_kernel_ptx(gpu), "_block_mask") != NULL);
  int64_t bn = 0;
  CHECK(flashjit_kernel_tiles(gpu, NULL, &bn) == FLASHJIT_OK && bn > 0);
  flashjit_kernel_destroy(gpu);
}

int main(void) {
  (void)capi_tensor4, (void)capi_check_causal; /* shared, unused here */
  srand(777u + (unsigned)time(NULL));
  test_text();
  test_varlen();
  test_block_sparse();
  test_varlen_block_sparse();
  return CHECK_SUMMARY();
}
