/* Finite-difference gradient checks of every CPU-backend op that has a backward: aggregation
 * (sum, mean, max, min, GCN, and weighted mean with a self loop), GEMM (both operands, all
 * transpose combinations, gradients computed with the backend's own GEMM as a model does), bias
 * + activation (input and bias gradients), dropout and softmax cross-entropy; user-defined
 * aggregators (aggr_user_bwd: a power mean and a softmax aggregation with their agg_grad, a mean
 * declared linear) and GraphSAGE models whose second layer runs one.
 *
 * Each check picks a scalar loss L (a random weighting sum_i r_i out_i, or the cross-entropy
 * itself), evaluates it in double from the op's float outputs, and compares the analytic
 * gradient with the central difference (L(x + h) - L(x - h)) / (2h) per input element, the step
 * being the exact difference of the two perturbed floats.
 *
 * Tolerances: the linear ops (and piecewise-linear ones away from their kinks) have no
 * truncation error, so a large step (h = 0.25) leaves only the float rounding of the few outputs
 * the element touches, about k * 2^-24 * |out| / h: 1e-4 relative is a hundred times that yet
 * a thousand times below any wrong coefficient (weights lie in [0.1, 1]). Max/min use distinct
 * inputs spaced 0.03 apart and h = 0.01, and ReLU inputs are kept 0.05 away from 0, so no step
 * crosses a kink. The cross-entropy is smooth: h = 1e-3 gives a truncation error near
 * h^2 |L'''| / 6 < 1e-7, checked at 1e-6 + 1e-4 relative against float gradients. */
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_agg.h"
#include "ng_test_graph.h"
#include "model_impl.h"

#include <stdlib.h>
#include <string.h>

static ng_backend *be;

/* ---- blocks ---- */

/* A random block with up to max_deg distinct neighbours per destination (some destinations
 * empty), optionally with one destination listing a source twice, weights in [0.1, 1], and the
 * transpose in edge order. */
static void tblock_make(ng_test_block *tb, ng_rng *r, int32_t nd, int32_t ns, int32_t max_deg,
                        bool dup) {
  tb->indptr = ng_test_xmalloc(((size_t)nd + 1) * 4);
  tb->indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++) {
    int32_t deg = d % 5 == 4 ? 0 : 1 + (int32_t)ng_rng_below(r, (uint64_t)max_deg);
    tb->indptr[d + 1] = tb->indptr[d] + deg;
  }
  ng_test_block_fill(tb, r, nd, ns, false, dup);
}

/* ---- aggregation ---- */

typedef struct {
  const ng_aggr *ag;
  const ng_block *b;
  float *src, *out, *r;
  int32_t *arg;
  int64_t dim;
} aggr_ctx;

static double aggr_loss(void *p) {
  aggr_ctx *c = p;
  EXPECT_OK(be->iface->aggr_fwd(be, c->ag, c->b, c->src, c->dim, c->out, c->arg));
  return ng_test_dot(c->r, c->out, (int64_t)c->b->n_dst * c->dim);
}

static void test_aggr(void) {
  static const struct {
    const char *name;
    ng_aggr ag;
  } cases[] = {
      {"sum", {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL}},
      {"mean", {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL}},
      {"max", {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL}},
      {"min", {NG_REDUCE_MIN, false, false, false, 0.0f, 0, NULL}},
      {"gcn", {NG_REDUCE_SUM, true, true, false, 0.0f, 0, NULL}},
      {"weighted-mean+self", {NG_REDUCE_SUM, true, true, true, 0.0f, 0, NULL}},
  };
  ng_rng r;
  ng_rng_seed(&r, 101);
  const int64_t dims[] = {1, 7, 20};
  for (int dup = 0; dup < 2; dup++) {
    ng_test_block tb;
    tblock_make(&tb, &r, 12, 30, 6, dup);
    for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
      int64_t dim = dims[di], ns = (int64_t)tb.b.n_src * dim, nd = (int64_t)tb.b.n_dst * dim;
      for (size_t ci = 0; ci < NG_TEST_LEN(cases); ci++) {
        const ng_aggr *ag = &cases[ci].ag;
        bool best = ag->reduce != NG_REDUCE_SUM;
        float *src = ng_test_xmalloc((size_t)ns * 4);
        if (best) { /* distinct values 0.03 apart: no tie, no kink within a step of 0.01 */
          for (int64_t i = 0; i < ns; i++)
            src[i] = (float)i * 0.03f - 0.5f;
          for (int64_t i = ns - 1; i > 0; i--) {
            int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)i + 1);
            float t = src[i];
            src[i] = src[j];
            src[j] = t;
          }
        } else {
          for (int64_t i = 0; i < ns; i++)
            src[i] = ng_test_frand(&r);
        }
        aggr_ctx c = {ag,
                      &tb.b,
                      src,
                      ng_test_xmalloc((size_t)nd * 4),
                      ng_test_rand_floats(&r, nd),
                      best ? ng_test_xmalloc((size_t)nd * 4) : NULL,
                      dim};
        float *grad = ng_test_xmalloc((size_t)ns * 4);
        aggr_loss(&c); /* the winners of the unperturbed input */
        EXPECT_OK(be->iface->aggr_bwd(be, ag, &tb.b, c.r, c.arg, dim, grad));
        char what[96];
        snprintf(what, sizeof what, "aggr %s dim %lld%s", cases[ci].name, (long long)dim,
                 dup ? " (duplicate edge)" : "");
        ng_test_gradcheck(what, src, ns, grad, aggr_loss, &c, best ? 0.01f : 0.25f, 1e-4, 1e-4);
        free(src);
        free(c.out);
        free(c.r);
        free(c.arg);
        free(grad);
      }
    }
    ng_test_block_free(&tb);
  }
}

/* User aggregators (tests/ng_test_agg.h): smooth, so a small step (h = 1e-3), whose truncation
 * error (h^2 times the third derivative / 6) stays below 1e-6; the float rounding of the loss
 * difference is about 1e-4 of a gradient, so 2e-4 + 2e-3 relative, far below a wrong one. */
static void test_aggr_user(void) {
  static const ng_aggregator_def *const defs[] = {&ng_test_powmean, &ng_test_softmax,
                                                  &ng_test_mean};
  ng_rng r;
  ng_rng_seed(&r, 103);
  const int64_t dims[] = {1, 6};
  for (int dup = 0; dup < 2; dup++) {
    ng_test_block tb;
    tblock_make(&tb, &r, 12, 30, 6, dup);
    for (size_t di = 0; di < NG_TEST_LEN(dims); di++)
      for (size_t ci = 0; ci < NG_TEST_LEN(defs); ci++)
        for (int weighted = 0; weighted < 2; weighted++) {
          const int64_t dim = dims[di], ns = (int64_t)tb.b.n_src * dim;
          const int64_t nd = (int64_t)tb.b.n_dst * dim;
          ng_aggregator pub;
          ng_aggr ag;
          EXPECT_OK(ng_aggregator_define(&pub, defs[ci]));
          pub.edge_weight = weighted ? NG_EDGE_WEIGHT_GCN_NORM : NG_EDGE_WEIGHT_NONE;
          EXPECT_OK(ng__aggr_from_public(&ag, &pub));
          float *src = ng_test_rand_floats(&r, ns);
          aggr_ctx c = {
              &ag,  &tb.b, src, ng_test_xmalloc((size_t)nd * 4), ng_test_rand_floats(&r, nd),
              NULL, dim};
          float *grad = ng_test_xmalloc((size_t)ns * 4);
          float *work = ng_test_xmalloc(((size_t)tb.b.nnz + 1) * (size_t)dim * 4);
          EXPECT_OK(be->iface->aggr_user_bwd(be, &ag, &tb.b, src, c.r, dim, work, grad));
          char what[96];
          snprintf(what, sizeof what, "user aggr %s%s dim %lld%s", defs[ci]->name,
                   weighted ? " weighted" : "", (long long)dim, dup ? " (duplicate edge)" : "");
          ng_test_gradcheck(what, src, ns, grad, aggr_loss, &c, 1e-3f, 2e-4, 2e-3);
          free(src);
          free(c.out);
          free(c.r);
          free(grad);
          free(work);
        }
    ng_test_block_free(&tb);
  }
}

/* ---- attention (GAT) ---- */

typedef struct {
  const ng_attn *at;
  const ng_block *b;
  float *z, *att_src, *att_dst, *alpha, *out, *r;
  int64_t out_n;
} attn_ctx;

static double attn_loss(void *p) {
  attn_ctx *c = p;
  EXPECT_OK(be->iface->attn_fwd(be, c->at, c->b, c->z, c->att_src, c->att_dst, c->alpha, c->out));
  return ng_test_dot(c->r, c->out, c->out_n);
}

/* The softmax is smooth; LeakyReLU has a kink at 0, which a step of 1e-2 crossed for a few of
 * the ~100 scores (the difference then averages the two slopes), so the step is 1e-3: about 1e-3
 * absolute of float rounding in the loss difference, yet far below a wrong coefficient. The
 * attention mask depends on positions only, so dropout keeps the loss differentiable. */
static void test_attn(void) {
  static const struct {
    int32_t heads;
    int64_t head_dim;
    bool mean;
    float drop_p;
  } cases[] = {{1, 5, false, 0.0f},
               {3, 4, false, 0.0f},
               {2, 3, true, 0.0f},
               {3, 2, false, 0.4f},
               {4, 3, true, 0.3f}};
  ng_rng r;
  ng_rng_seed(&r, 404);
  for (int dup = 0; dup < 2; dup++) {
    ng_test_block tb;
    tblock_make(&tb, &r, 9, 21, 5, dup);
    for (size_t ci = 0; ci < NG_TEST_LEN(cases); ci++) {
      const ng_attn at = {.heads = cases[ci].heads,
                          .head_dim = cases[ci].head_dim,
                          .slope = 0.2f,
                          .mean_heads = cases[ci].mean,
                          .drop_p = cases[ci].drop_p,
                          .drop_key = 0x9e3779b97f4a7c15ull + ci};
      const int64_t kf = at.heads * at.head_dim, nz = tb.b.n_src * kf;
      const int64_t out_n = tb.b.n_dst * (at.mean_heads ? at.head_dim : kf);
      attn_ctx c = {&at,
                    &tb.b,
                    ng_test_rand_floats(&r, nz),
                    ng_test_rand_floats(&r, kf),
                    ng_test_rand_floats(&r, kf),
                    ng_test_xmalloc((size_t)(tb.b.nnz + tb.b.n_dst) * (size_t)at.heads * 4),
                    ng_test_xmalloc((size_t)out_n * 4),
                    ng_test_rand_floats(&r, out_n),
                    out_n};
      /* Scores of a few units: the softmax is far from uniform, so its gradient matters. */
      for (int64_t i = 0; i < kf; i++) {
        c.att_src[i] *= 3.0f;
        c.att_dst[i] *= 3.0f;
      }
      float *gz = ng_test_xmalloc((size_t)nz * 4), *gs = ng_test_xmalloc((size_t)kf * 4);
      float *gd = ng_test_xmalloc((size_t)kf * 4);
      float *work =
          ng_test_xmalloc((size_t)ng_attn_bwd_work(&at, tb.b.n_dst, tb.b.n_src, tb.b.nnz) * 4);
      attn_loss(&c);
      EXPECT_OK(be->iface->attn_bwd(be, &at, &tb.b, c.z, c.att_src, c.att_dst, c.alpha, c.r, work,
                                    gz, gs, gd));
      /* Each destination's coefficients sum to 1 per head. */
      for (int32_t d = 0; d < tb.b.n_dst; d++)
        for (int k = 0; k < at.heads; k++) {
          double sum = c.alpha[(tb.b.nnz + d) * at.heads + k];
          for (int32_t e = tb.b.indptr[d]; e < tb.b.indptr[d + 1]; e++)
            sum += c.alpha[(int64_t)e * at.heads + k];
          EXPECT_NEAR(sum, 1.0, 1e-5);
        }
      char what[96];
      snprintf(what, sizeof what, "attn %d heads x %lld%s drop %.1f%s z", (int)at.heads,
               (long long)at.head_dim, at.mean_heads ? " mean" : "", (double)at.drop_p,
               dup ? " (duplicate edge)" : "");
      ng_test_gradcheck(what, c.z, nz, gz, attn_loss, &c, 1e-3f, 1e-3, 2e-3);
      what[strlen(what) - 1] = '\0';
      strcat(what, "att_src");
      ng_test_gradcheck(what, c.att_src, kf, gs, attn_loss, &c, 1e-3f, 1e-3, 2e-3);
      what[strlen(what) - 7] = '\0';
      strcat(what, "att_dst");
      ng_test_gradcheck(what, c.att_dst, kf, gd, attn_loss, &c, 1e-3f, 1e-3, 2e-3);
      free(c.z);
      free(c.att_src);
      free(c.att_dst);
      free(c.alpha);
      free(c.out);
      free(c.r);
      free(gz);
      free(gs);
      free(gd);
      free(work);
    }
    ng_test_block_free(&tb);
  }
}

/* ---- whole layers: GAT, GIN and SAGE-pool models (models/model.c) ---- */

typedef struct {
  ng_model_exec *ex;
  ng_minibatch *mb;
  const float *agg0, *self0;
  float *r;
  int64_t n_logits;
} model_ctx;

static double model_loss(void *p) {
  model_ctx *c = p;
  /* Training mode (the backward needs its workspace) without dropout: deterministic. */
  EXPECT_OK(ng__exec_forward(c->ex, c->mb, c->agg0, c->self0, true, 1));
  return ng_test_dot(c->r, c->ex->logits, c->n_logits);
}

/* The parameter gradients of 2-layer models (6 -> 8 -> 4) over random blocks, from
 * ng__exec_backward with d logits = r, against central differences of r . logits. The models
 * hold some 150 ReLU / LeakyReLU units: a step of 1e-3 crossed a kink for 3 of GIN's 56 first-
 * layer parameters (errors of 0.5 to 5%), so the step is 1e-4, whose float rounding in the loss
 * difference stays below 5e-3 absolute; a wrong term is off by far more. */
static void test_model_grads(void) {
  static const struct {
    const char *name;
    ng_model_kind kind;
    int32_t heads[2];
    ng_sage_combine combine[2];
    const ng_aggregator_def *user; /* every layer's aggregator, NULL: the default */
  } cases[] = {
      {"gat", NG_MODEL_GAT, {2, 2}, {NG_HEADS_CONCAT, NG_HEADS_MEAN}, NULL},
      {"gin", NG_MODEL_GIN, {1, 1}, {NG_SAGE_SUM, NG_SAGE_SUM}, NULL},
      {"sage-pool", NG_MODEL_SAGE_POOL, {1, 1}, {NG_SAGE_SUM, NG_SAGE_SUM}, NULL},
      {"sage-pool concat", NG_MODEL_SAGE_POOL, {1, 1}, {NG_SAGE_CONCAT, NG_SAGE_CONCAT}, NULL},
      /* The second layer's aggregation runs aggr_user_bwd into the first layer's output. */
      {"sage softmax-aggr", NG_MODEL_SAGE, {1, 1}, {NG_SAGE_SUM, NG_SAGE_SUM}, &ng_test_softmax},
      {"sage powmean", NG_MODEL_SAGE, {1, 1}, {NG_SAGE_CONCAT, NG_SAGE_CONCAT}, &ng_test_powmean},
  };
  enum { IN = 6, HID = 8, OUT = 4, N_T = 3, N_1 = 9, N_0 = 24 };
  ng_rng r;
  ng_rng_seed(&r, 505);
  /* Layer 1 (targets): N_T destinations of N_1 sources; layer 0: N_1 of N_0. */
  ng_test_block b1, b0, id;
  tblock_make(&b1, &r, N_T, N_1, 4, false);
  tblock_make(&b0, &r, N_1, N_0, 4, true);
  /* The identity block of raw-input models: N_0 destinations, no edges. */
  id.indptr = calloc(N_0 + 1, sizeof(int32_t));
  ng_test_block_fill(&id, &r, N_0, N_0, false, false);
  float *x = ng_test_rand_floats(&r, (int64_t)N_0 * IN);
  float *agg0 = ng_test_xmalloc((size_t)N_1 * IN * 4);
  for (size_t ci = 0; ci < NG_TEST_LEN(cases); ci++) {
    ng_model_t m = NULL;
    EXPECT_OK(ng_model_create(&m, cases[ci].kind, IN));
    ng_layer_opts lo[2] = {NG_LAYER_OPTS_INIT, NG_LAYER_OPTS_INIT};
    for (int l = 0; l < 2; l++) {
      lo[l].out_dim = l ? OUT : HID;
      lo[l].heads = cases[ci].heads[l];
      lo[l].combine = cases[ci].combine[l];
      lo[l].activation = l ? NG_ACT_NONE : NG_ACT_RELU;
      if (cases[ci].user)
        EXPECT_OK(ng_aggregator_define(&lo[l].aggregator, cases[ci].user));
      EXPECT_OK(ng_model_add_layer(m, &lo[l]));
    }
    const bool raw = ng__model_raw_input(m);
    ng_minibatch mb = {.n_layers = raw ? 3 : 2, .n_targets = N_T};
    int k = 0;
    if (raw)
      mb.blocks[k++] = id.b;
    mb.blocks[k++] = b0.b;
    mb.blocks[k++] = b1.b;
    /* The input layer's work the feature store does: raw rows (raw-input models) or the sum
     * of the neighbours' rows and the destinations' own rows. */
    const ng_aggr sum = {.reduce = NG_REDUCE_SUM};
    EXPECT_OK(be->iface->aggr_fwd(be, &sum, &b0.b, x, IN, agg0, NULL));
    ng_model_exec ex;
    EXPECT_OK(ng__exec_create(&ex, m, be, 77));
    /* Biases start at 0: make them matter. */
    for (int64_t i = 0; i < ex.model->n_params; i++)
      if (ex.params[i] == 0.0f)
        ex.params[i] = 0.1f * ng_test_frand(&r);
    model_ctx c = {
        &ex, &mb, agg0, x, ng_test_rand_floats(&r, (int64_t)N_T * OUT), (int64_t)N_T * OUT};
    model_loss(&c);
    float *d_logits = ng_test_xmalloc((size_t)c.n_logits * 4);
    memcpy(d_logits, c.r, (size_t)c.n_logits * 4);
    EXPECT_OK(ng__exec_backward(&ex, &mb, d_logits));
    const int64_t n = ex.model->n_params;
    float *grad = ng_test_xmalloc((size_t)n * 4);
    memcpy(grad, ex.grads, (size_t)n * 4);
    char what[64];
    snprintf(what, sizeof what, "model %s parameters", cases[ci].name);
    ng_test_gradcheck(what, ex.params, n, grad, model_loss, &c, 1e-4f, 5e-3, 2e-3);
    free(grad);
    free(d_logits);
    free(c.r);
    ng__exec_destroy(&ex);
    ng_model_destroy(m);
  }
  free(x);
  free(agg0);
  ng_test_block_free(&b0);
  ng_test_block_free(&b1);
  ng_test_block_free(&id);
}

/* ---- GEMM ---- */

typedef struct {
  bool ta, tb;
  int64_t m, n, k, lda, ldb;
  float alpha;
  float *a, *b, *c, *r;
} gemm_ctx;

static double gemm_loss(void *p) {
  gemm_ctx *g = p;
  EXPECT_OK(be->iface->gemm(be, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b,
                            g->ldb, 0.0f, g->c, g->n));
  return ng_test_dot(g->r, g->c, g->m * g->n);
}

static void test_gemm(void) {
  ng_rng r;
  ng_rng_seed(&r, 202);
  const int64_t m = 5, n = 4, k = 6;
  for (int tr = 0; tr < 4; tr++) {
    gemm_ctx g = {.ta = tr & 1, .tb = tr & 2, .m = m, .n = n, .k = k, .alpha = 0.8f};
    g.lda = g.ta ? m : k;
    g.ldb = g.tb ? k : n;
    g.a = ng_test_rand_floats(&r, m * k);
    g.b = ng_test_rand_floats(&r, k * n);
    g.c = ng_test_xmalloc((size_t)(m * n) * 4);
    g.r = ng_test_rand_floats(&r, m * n); /* dL/dC */
    /* dL/d op(A) = alpha R op(B)^T and dL/d op(B) = alpha op(A)^T R, written with the backend's
     * GEMM in the stored layouts of A and B, as a model's backward pass does. */
    float *ga = ng_test_xmalloc((size_t)(m * k) * 4), *gb = ng_test_xmalloc((size_t)(k * n) * 4);
    if (!g.ta) /* A [m, k] = R [m, n] op(B)^T */
      EXPECT_OK(
          be->iface->gemm(be, false, !g.tb, m, k, n, g.alpha, g.r, n, g.b, g.ldb, 0.0f, ga, k));
    else /* A [k, m] = op(B) [k, n] R^T */
      EXPECT_OK(be->iface->gemm(be, g.tb, true, k, m, n, g.alpha, g.b, g.ldb, g.r, n, 0.0f, ga, m));
    if (!g.tb) /* B [k, n] = op(A)^T [k, m] R */
      EXPECT_OK(
          be->iface->gemm(be, !g.ta, false, k, n, m, g.alpha, g.a, g.lda, g.r, n, 0.0f, gb, n));
    else /* B [n, k] = R^T [n, m] op(A) */
      EXPECT_OK(be->iface->gemm(be, true, g.ta, n, k, m, g.alpha, g.r, n, g.a, g.lda, 0.0f, gb, k));
    char what[64];
    snprintf(what, sizeof what, "gemm %c%c dA", g.ta ? 'T' : 'N', g.tb ? 'T' : 'N');
    ng_test_gradcheck(what, g.a, m * k, ga, gemm_loss, &g, 0.25f, 1e-4, 1e-4);
    snprintf(what, sizeof what, "gemm %c%c dB", g.ta ? 'T' : 'N', g.tb ? 'T' : 'N');
    ng_test_gradcheck(what, g.b, k * n, gb, gemm_loss, &g, 0.25f, 1e-4, 1e-4);
    free(g.a);
    free(g.b);
    free(g.c);
    free(g.r);
    free(ga);
    free(gb);
  }
}

/* ---- bias + activation ---- */

typedef struct {
  float *x, *bias, *y, *r;
  int64_t rows, cols;
  ng_activation act;
} bias_ctx;

static double bias_loss(void *p) {
  bias_ctx *c = p;
  memcpy(c->y, c->x, (size_t)(c->rows * c->cols) * 4);
  EXPECT_OK(be->iface->bias_act_fwd(be, c->y, c->bias, c->rows, c->cols, c->act));
  return ng_test_dot(c->r, c->y, c->rows * c->cols);
}

static void test_bias_act(void) {
  ng_rng r;
  ng_rng_seed(&r, 303);
  const int64_t rows = 9, cols = 6, n = rows * cols;
  for (int act = NG_ACT_NONE; act <= NG_ACT_RELU; act++) {
    bias_ctx c = {ng_test_rand_floats(&r, n),
                  ng_test_rand_floats(&r, cols),
                  ng_test_xmalloc((size_t)n * 4),
                  ng_test_rand_floats(&r, n),
                  rows,
                  cols,
                  (ng_activation)act};
    /* keep every pre-activation at least 0.05 away from the ReLU kink */
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        float *v = &c.x[i * cols + j];
        float pre = *v + c.bias[j];
        if (fabsf(pre) < 0.05f)
          *v += pre < 0.0f ? -0.1f : 0.1f;
      }
    bias_loss(&c);
    float *g = ng_test_xmalloc((size_t)n * 4), *gbias = ng_test_xmalloc((size_t)cols * 4);
    memcpy(g, c.r, (size_t)n * 4);
    EXPECT_OK(be->iface->bias_act_bwd(be, g, c.y, gbias, rows, cols, (ng_activation)act));
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++)
      zeros += g[i] == 0.0f;
    if (act == NG_ACT_RELU) /* the check covers both sides of the kink */
      EXPECT_TRUE(zeros > 0 && zeros < n);
    ng_test_gradcheck(act ? "bias_act relu dx" : "bias_act none dx", c.x, n, g, bias_loss, &c,
                      0.01f, 1e-4, 1e-4);
    ng_test_gradcheck(act ? "bias_act relu dbias" : "bias_act none dbias", c.bias, cols, gbias,
                      bias_loss, &c, 0.01f, 1e-4, 1e-4);
    free(c.x);
    free(c.bias);
    free(c.y);
    free(c.r);
    free(g);
    free(gbias);
  }
}

/* ---- dropout ---- */

typedef struct {
  float *x, *y, *r;
  uint8_t *mask;
  int64_t n;
  float p;
} drop_ctx;

static double drop_loss(void *p) {
  drop_ctx *c = p;
  memcpy(c->y, c->x, (size_t)c->n * 4);
  EXPECT_OK(be->iface->dropout_fwd(be, c->y, c->mask, c->n, c->p, 77));
  return ng_test_dot(c->r, c->y, c->n);
}

static void test_dropout(void) {
  ng_rng r;
  ng_rng_seed(&r, 404);
  const float ps[] = {0.0f, 0.3f};
  for (size_t pi = 0; pi < NG_TEST_LEN(ps); pi++) {
    const int64_t n = 200;
    drop_ctx c = {ng_test_rand_floats(&r, n),
                  ng_test_xmalloc((size_t)n * 4),
                  ng_test_rand_floats(&r, n),
                  ng_test_xmalloc((size_t)n),
                  n,
                  ps[pi]};
    drop_loss(&c);
    float *g = ng_test_xmalloc((size_t)n * 4);
    memcpy(g, c.r, (size_t)n * 4);
    EXPECT_OK(be->iface->dropout_bwd(be, g, c.mask, n, c.p));
    ng_test_gradcheck(pi ? "dropout p 0.3" : "dropout p 0", c.x, n, g, drop_loss, &c, 0.25f, 1e-4,
                      1e-4);
    free(c.x);
    free(c.y);
    free(c.r);
    free(c.mask);
    free(g);
  }
}

/* ---- cross-entropy ---- */

typedef struct {
  float *z;
  int32_t *labels;
  int64_t n, classes;
} xent_ctx;

static double xent_loss(void *p) {
  xent_ctx *c = p;
  double loss = NAN;
  int64_t correct;
  EXPECT_OK(be->iface->xent(be, c->z, c->labels, c->n, c->classes, NULL, &loss, &correct));
  return loss;
}

static void test_xent(void) {
  ng_rng r;
  ng_rng_seed(&r, 505);
  const int64_t shapes[][2] = {{1, 2}, {7, 5}, {20, 13}};
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    xent_ctx c = {ng_test_rand_floats(&r, shapes[si][0] * shapes[si][1]),
                  ng_test_xmalloc((size_t)shapes[si][0] * 4), shapes[si][0], shapes[si][1]};
    for (int64_t i = 0; i < c.n * c.classes; i++)
      c.z[i] *= 3.0f;
    for (int64_t i = 0; i < c.n; i++)
      c.labels[i] = (int32_t)ng_rng_below(&r, (uint64_t)c.classes);
    float *g = ng_test_xmalloc((size_t)(c.n * c.classes) * 4);
    double loss;
    int64_t correct;
    EXPECT_OK(be->iface->xent(be, c.z, c.labels, c.n, c.classes, g, &loss, &correct));
    char what[64];
    snprintf(what, sizeof what, "xent %lld x %lld", (long long)c.n, (long long)c.classes);
    ng_test_gradcheck(what, c.z, c.n * c.classes, g, xent_loss, &c, 1e-3f, 1e-6, 1e-4);
    free(c.z);
    free(c.labels);
    free(g);
  }
}

int main(void) {
  if (ng__backend_cpu_create(&be, 0) != NG_OK) {
    fprintf(stderr, "test_gradcheck: %s\n", ng_last_error());
    return 1;
  }
  RUN_TEST(test_aggr);
  RUN_TEST(test_aggr_user);
  RUN_TEST(test_attn);
  RUN_TEST(test_model_grads);
  RUN_TEST(test_gemm);
  RUN_TEST(test_bias_act);
  RUN_TEST(test_dropout);
  RUN_TEST(test_xent);
  ng__backend_destroy(be);
  return ng_test_summary();
}
