/*===- capi_reference.h - Naive attention for the C API tests -------------===//
 *
 * Random fp32 inputs and a naive double-precision bottom-right causal
 * attention (scale 1/sqrt(D)), shared by the C API tests: a kernel's O and
 * LSE are compared with it.
 *
 *===----------------------------------------------------------------------===*/
#ifndef FLASHJIT_TESTS_CAPI_REFERENCE_H
#define FLASHJIT_TESTS_CAPI_REFERENCE_H

#include "flashjit-c/flashjit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/** A contiguous fp32 tensor [s0, s1, s2, s3]. */
static flashjit_tensor capi_tensor4(float *data, int64_t s0, int64_t s1,
                                    int64_t s2, int64_t s3) {
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

/** A uniform random value in [-1, 1]. */
static float capi_uniform(void) {
  return (float)rand() / (float)RAND_MAX * 2 - 1;
}

/** Compares o [B, H, SQ, D] and lse [B, H, SQ] with bottom-right causal
 *  attention of q [B, H, SQ, D], k and v [B, H, SK, D] in double: stores the
 *  largest errors in worst_o and worst_lse and returns 0 if a row with no
 *  allowed key is not exactly O = 0, LSE = -inf, else 1. */
static int capi_check_causal(int B, int H, int SQ, int SK, int D,
                             const float *q, const float *k, const float *v,
                             const float *o, const float *lse, double *worst_o,
                             double *worst_lse) {
  int empty_ok = 1;
  double *s = (double *)malloc(sizeof(double) * (SK > 0 ? SK : 1));
  *worst_o = 0, *worst_lse = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < SQ; ++i) {
        double m = -INFINITY, l = 0;
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
        float got_l = lse[(b * H + h) * SQ + i];
        if (last < 0) { /* no allowed key: O = 0, LSE = -inf exactly */
          for (int d = 0; d < D; ++d)
            empty_ok &= o[((b * H + h) * SQ + i) * D + d] == 0.0f;
          empty_ok &= isinf(got_l) && got_l < 0;
          continue;
        }
        for (int j = 0; j <= last; ++j)
          l += exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double want = 0;
          for (int j = 0; j <= last; ++j)
            want += exp(s[j] - m) / l * v[((b * H + h) * SK + j) * D + d];
          double e = fabs(o[((b * H + h) * SQ + i) * D + d] - want);
          if (e > *worst_o)
            *worst_o = e;
        }
        double e = fabs(got_l - (m + log(l)));
        if (e > *worst_lse)
          *worst_lse = e;
      }
  free(s);
  return empty_ok;
}

#endif /* FLASHJIT_TESTS_CAPI_REFERENCE_H */
