/* The link decoder's scoring of node pairs from their embeddings (runtime/link_impl.h): the one
 * function that the link trainer (its training iterations and its offline evaluation and
 * scoring, runtime/link.c) and the serving engine (pair requests, serve/engine_forward.c) call,
 * so that a served score is the offline score's bits whenever the embeddings are. */
#include "link_impl.h"

#include <omp.h>
#include <stdlib.h>

/* Pairs of the dot decoder summed side by side (ng__link_score). */
#define DOT_LANES 8

float ng__link_mlp_score(const ng_link_dec *dec, const float *a, const float *b, float *hid) {
  const int64_t d = dec->dim, H = dec->hidden;
  const float *W1 = dec->mlp, *b1 = W1 + d * H, *w2 = b1 + H, *b2 = w2 + H;
  float s = *b2;
  for (int64_t j = 0; j < H; j++) {
    float z = b1[j];
    for (int64_t c = 0; c < d; c++)
      z += a[c] * b[c] * W1[c * H + j];
    hid[j] = z;
    s += (z > 0 ? z : 0) * w2[j];
  }
  return s;
}

ng_status ng__link_score(const ng_link_dec *dec, float *s, const float *h, const int32_t *u,
                         const int32_t *v, int64_t n, int threads) {
  const int64_t d = dec->dim;
  if (threads < 1)
    threads = 1;
  /* Each pair's sum runs in column order on one thread: the score does not depend on the
   * thread count or on the other pairs. */
  if (dec->decoder == NG_LINK_DECODER_DOT) {
    /* DOT_LANES pairs at a time, each still one float sum in column order (the bits of the
     * plain loop: the build targets x86-64-v2, which has no fused multiply-add): independent
     * chains of additions instead of one, whose latency bound a 256-wide sum by a pair. The
     * backends' pair_dot op (core/backend_impl.h), which link evaluation scores with on a
     * device, gives these bits; tests/test_link.c and tests/test_gpu_parity.c compare them. */
#pragma omp parallel for schedule(static) num_threads(threads) if (n > 256)
    for (int64_t i0 = 0; i0 < n; i0 += DOT_LANES) {
      const int64_t w = n - i0 < DOT_LANES ? n - i0 : DOT_LANES;
      if (w < DOT_LANES) {
        for (int64_t i = i0; i < i0 + w; i++) {
          const float *a = h + (int64_t)u[i] * d, *b = h + (int64_t)v[i] * d;
          float acc = 0.0f;
          for (int64_t c = 0; c < d; c++)
            acc += a[c] * b[c];
          s[i] = acc;
        }
        continue;
      }
      const float *a[DOT_LANES], *b[DOT_LANES];
      float acc[DOT_LANES];
      for (int l = 0; l < DOT_LANES; l++) {
        a[l] = h + (int64_t)u[i0 + l] * d;
        b[l] = h + (int64_t)v[i0 + l] * d;
        acc[l] = 0.0f;
      }
      for (int64_t c = 0; c < d; c++)
        for (int l = 0; l < DOT_LANES; l++)
          acc[l] += a[l][c] * b[l][c];
      for (int l = 0; l < DOT_LANES; l++)
        s[i0 + l] = acc[l];
    }
    return NG_OK;
  }
  if (dec->decoder != NG_LINK_DECODER_MLP || !dec->mlp || dec->hidden < 1)
    return ng__err(NG_ERR_INTERNAL, "link scoring: decoder %d without its weights",
                   (int)dec->decoder);
  const int64_t H = dec->hidden;
  ng_status st = NG_OK;
#pragma omp parallel num_threads(threads) if (n > 16)
  {
    float *hid = malloc((size_t)H * sizeof *hid);
    if (!hid) {
#pragma omp critical
      st = ng__err(NG_ERR_NOMEM, "out of memory for the MLP decoder's hidden row");
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; i++)
      if (hid)
        s[i] = ng__link_mlp_score(dec, h + (int64_t)u[i] * d, h + (int64_t)v[i] * d, hid);
    free(hid);
  }
  return st;
}
