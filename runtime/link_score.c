/* The link decoder's scoring of node pairs from their embeddings (runtime/link_impl.h): the one
 * function that the link trainer (its training iterations and its offline evaluation and
 * scoring, runtime/link.c) and the serving engine (pair requests, serve/engine_forward.c) call,
 * so that a served score is the offline score's bits whenever the embeddings are. */
#include "link_impl.h"
#include "ng_cpu.h"

#include <omp.h>
#include <stdlib.h>

/* Pairs of the dot decoder a thread scores at a time (ng__link_score). */
#define DOT_CHUNK 256

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
    /* The CPU backend's pair_dot rows (cpu/kernels_cpu.c): pairs side by side, each one float sum
     * in column order, so that the backends' pair_dot op, which link evaluation scores with on a
     * device, gives these bits (tests/test_link.c and tests/test_gpu_parity.c compare them). */
#pragma omp parallel for schedule(static) num_threads(threads) if (n > DOT_CHUNK)
    for (int64_t i0 = 0; i0 < n; i0 += DOT_CHUNK)
      ng__cpu_pair_dot_rows(s, h, u, v, i0, n - i0 < DOT_CHUNK ? n : i0 + DOT_CHUNK, d);
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
