/* Attention aggregated in parts (ops attn_state / attn_merge, docs/aggregators.md): a GAT
 * destination's slots split between a "hot" part (its self slot and the edges from sources below
 * a threshold) and a "cold" part (the others), each part's online-softmax state computed apart
 * and merged, equals attn_fwd over the whole block within the documented tolerance (it is not
 * bit-identical: the merge reorders the sums). Random blocks with degrees 0 to 40, concatenated
 * and averaged heads, scores up to about 60 (exp of them would overflow without the running
 * max), destinations whose cold part is empty, and destinations with no slot at all. */
#include "ng_test.h"

#include "ng_cpu.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_DST = 300, N_SRC = 900, HEADS = 3, F = 7 };

/* The documented tolerance: |split - unsplit| <= TOL x (1 + |unsplit|). */
#define TOL 1e-5

typedef struct {
  int32_t *indptr, *indices;
  int64_t nnz;
} edges;

static void block_of(ng_block *b, const edges *e) {
  memset(b, 0, sizeof *b);
  b->n_dst = N_DST;
  b->n_src = N_SRC;
  b->nnz = e->nnz;
  b->indptr = e->indptr;
  b->indices = e->indices;
}

/* The edges of `all` whose source is (hot) or is not (!hot) below `cut`, in order. */
static edges part_of(const edges *all, int32_t cut, bool hot) {
  edges p = {ng_test_xmalloc((N_DST + 1) * sizeof(int32_t)),
             ng_test_xmalloc((size_t)(all->nnz + 1) * sizeof(int32_t)), 0};
  p.indptr[0] = 0;
  for (int32_t d = 0; d < N_DST; d++) {
    for (int32_t e = all->indptr[d]; e < all->indptr[d + 1]; e++)
      if ((all->indices[e] < cut) == hot)
        p.indices[p.nnz++] = all->indices[e];
    p.indptr[d + 1] = (int32_t)p.nnz;
  }
  return p;
}

static double worst_error(const float *got, const float *want, int64_t n) {
  double w = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs((double)got[i] - (double)want[i]) / (1.0 + fabs((double)want[i]));
    w = d > w || isnan(d) ? d : w;
  }
  return w;
}

static void check(bool mean_heads, float spread) {
  ng_backend *be = NULL;
  EXPECT_OK(ng__backend_cpu_create(&be, 2));
  ng_rng r;
  ng_rng_seed(&r, mean_heads ? 7u : 8u);
  edges all = {ng_test_xmalloc((N_DST + 1) * sizeof(int32_t)),
               ng_test_xmalloc((size_t)N_DST * 40 * sizeof(int32_t)), 0};
  all.indptr[0] = 0;
  for (int32_t d = 0; d < N_DST; d++) {
    /* Degree 0 for every 50th, sources all hot for every 7th. */
    const int deg = d % 50 == 0 ? 0 : (int)ng_rng_below(&r, 41);
    for (int i = 0; i < deg; i++)
      all.indices[all.nnz++] =
          (int32_t)(d % 7 == 0 ? ng_rng_below(&r, N_SRC / 3) : ng_rng_below(&r, N_SRC));
    all.indptr[d + 1] = (int32_t)all.nnz;
  }
  const int64_t KF = HEADS * F;
  float *z = ng_test_xmalloc((size_t)N_SRC * KF * sizeof(float));
  float att_src[HEADS * F], att_dst[HEADS * F];
  for (int64_t i = 0; i < N_SRC * KF; i++)
    z[i] = (float)(ng_rng_uniform(&r) - 0.5) * spread;
  for (int i = 0; i < HEADS * F; i++) {
    att_src[i] = (float)(ng_rng_uniform(&r) - 0.5);
    att_dst[i] = (float)(ng_rng_uniform(&r) - 0.5);
  }
  ng_attn at = {.heads = HEADS, .head_dim = F, .slope = 0.2f, .mean_heads = mean_heads};
  const int64_t out_cols = mean_heads ? F : KF, cols = ng_attn_state_cols(&at);
  ng_block b;
  block_of(&b, &all);
  float *alpha = ng_test_xmalloc((size_t)(all.nnz + N_DST) * HEADS * sizeof(float));
  float *want = ng_test_xmalloc((size_t)N_DST * out_cols * sizeof(float));
  float *got = ng_test_xmalloc((size_t)N_DST * out_cols * sizeof(float));
  EXPECT_OK(be->iface->attn_fwd(be, &at, &b, z, att_src, att_dst, alpha, want));
  /* Hot: self slot and sources below N_SRC / 3 (the destinations' own rows are z's first). */
  edges hot = part_of(&all, N_SRC / 3, true), cold = part_of(&all, N_SRC / 3, false);
  ng_block bh, bc;
  block_of(&bh, &hot);
  block_of(&bc, &cold);
  float *sh = ng_test_xmalloc((size_t)N_DST * cols * sizeof(float));
  float *sc = ng_test_xmalloc((size_t)N_DST * cols * sizeof(float));
  for (int64_t i = 0; i < N_DST * out_cols; i++)
    got[i] = NAN; /* poisoned */
  EXPECT_OK(be->iface->attn_state(be, &at, &bh, z, z, att_src, att_dst, true, sh));
  EXPECT_OK(be->iface->attn_state(be, &at, &bc, z, z, att_src, att_dst, false, sc));
  /* A destination without cold edges has the empty state. */
  EXPECT_TRUE(sc[(int64_t)7 * cols] == -INFINITY && sc[(int64_t)7 * cols + 1] == 0.0f);
  EXPECT_OK(be->iface->attn_merge(be, &at, N_DST, sh, sc, got));
  const double w = worst_error(got, want, N_DST * out_cols);
  printf("  %s heads, scores x%.0f: largest split/unsplit difference %.3g\n",
         mean_heads ? "mean" : "concat", (double)spread, w);
  EXPECT_TRUE(w <= TOL);
  /* Merging the other way round (cold into hot's copy) agrees as well. */
  EXPECT_OK(be->iface->attn_state(be, &at, &bh, z, z, att_src, att_dst, true, sh));
  EXPECT_OK(be->iface->attn_merge(be, &at, N_DST, sc, sh, got));
  EXPECT_TRUE(worst_error(got, want, N_DST * out_cols) <= TOL);
  /* The whole block as one state, finalized alone. */
  EXPECT_OK(be->iface->attn_state(be, &at, &b, z, z, att_src, att_dst, true, sh));
  EXPECT_OK(be->iface->attn_merge(be, &at, N_DST, sh, NULL, got));
  EXPECT_TRUE(worst_error(got, want, N_DST * out_cols) <= TOL);
  /* No slot at all (no self slot, degree 0): the output is 0. */
  EXPECT_OK(be->iface->attn_state(be, &at, &bc, z, z, att_src, att_dst, false, sc));
  EXPECT_OK(be->iface->attn_merge(be, &at, N_DST, sc, NULL, got));
  for (int64_t c = 0; c < out_cols; c++)
    EXPECT_TRUE(got[c] == 0.0f); /* destination 0 has degree 0 */
  /* A wrong merge (no rescaling) is caught: the check can fail. */
  EXPECT_OK(be->iface->attn_state(be, &at, &bh, z, z, att_src, att_dst, true, sh));
  EXPECT_OK(be->iface->attn_state(be, &at, &bc, z, z, att_src, att_dst, false, sc));
  for (int64_t d = 0; d < N_DST; d++)
    for (int k = 0; k < HEADS; k++)
      if (sc[d * cols + k * (F + 2)] != -INFINITY)
        sc[d * cols + k * (F + 2)] += 1.0f;
  EXPECT_OK(be->iface->attn_merge(be, &at, N_DST, sh, sc, got));
  EXPECT_TRUE(worst_error(got, want, N_DST * out_cols) > TOL);
  free(all.indptr);
  free(all.indices);
  free(hot.indptr);
  free(hot.indices);
  free(cold.indptr);
  free(cold.indices);
  free(z);
  free(alpha);
  free(want);
  free(got);
  free(sh);
  free(sc);
  ng__backend_destroy(be);
}

static void test_concat_heads(void) {
  check(false, 2.0f);
}
static void test_mean_heads(void) {
  check(true, 2.0f);
}
static void test_large_scores(void) {
  check(false, 60.0f);
}

int main(void) {
  RUN_TEST(test_concat_heads);
  RUN_TEST(test_mean_heads);
  RUN_TEST(test_large_scores);
  return ng_test_summary();
}
