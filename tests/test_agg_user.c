/* User-defined aggregators (ng_aggregator_define, NG_AGGREGATOR_SOURCE) on the CPU backend: the
 * definition's checks; aggr_fwd against the definition's functions called in edge order (bit for
 * bit, any thread count); partial states over two halves of every neighbour list, merged by
 * the user's law, against the unsplit forward; input dropout in the partial state; and a
 * linear user mean against the built-in MEAN kernels. Gradients: tests/test_gradcheck.c. The
 * tiered runtime with user aggregators: tests/test_fetch.c. */
#include "neargnn_serve.h"
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_agg.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ng_backend *be, *be1;

static const ng_aggregator_def *const DEFS[] = {&ng_test_powmean, &ng_test_softmax, &ng_test_mean};

/* ---- the definition's checks ---- */

static void bad_merge(float *s, const float *t) {
  (void)s, (void)t; /* drops the other state */
}

static float bad_grad(const float *s, float n, float x, float w, float y) {
  return 2.0f * ng_test_powmean.grad(s, n, x, w, y);
}

static void test_define_checks(void) {
  ng_aggregator a;
  for (size_t i = 0; i < NG_TEST_LEN(DEFS); i++) {
    EXPECT_OK(ng_aggregator_define(&a, DEFS[i]));
    EXPECT_TRUE(a.user == DEFS[i]);
    EXPECT_STR(ng_aggregator_name(a), DEFS[i]->name);
  }
  ng_aggregator_def d = ng_test_powmean;
  d.merge = bad_merge;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("merge must be the law");
  d = ng_test_powmean;
  d.grad = bad_grad;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("fix agg_grad");
  d = ng_test_powmean; /* not linear, declared linear */
  d.linear = 1;
  d.grad = NULL;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("needs agg_grad");
  d = ng_test_powmean;
  d.grad = NULL;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("no grad");
  d = ng_test_softmax;
  d.state_size = NG_AGG_STATE_MAX + 1;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("state_size 9");
  d = ng_test_powmean;
  d.source = "NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }";
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("defines no agg_accumulate");
  d = ng_test_powmean; /* another aggregator's row function */
  d.accumulate_row = ng_test_mean.accumulate_row;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("accumulate_row gives other states");
  d = ng_test_mean;
  d.size = 8;
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("sizeof(ng_aggregator_def)");
  d = ng_test_mean;
  d.name = "two words";
  EXPECT_STATUS(ng_aggregator_define(&a, &d), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng_aggregator_define(&a, NULL), NG_ERR_INVALID_ARG);
  /* A CPU-only aggregator (no source) is accepted. */
  d = ng_test_mean;
  d.source = NULL;
  EXPECT_OK(ng_aggregator_define(&a, &d));
  /* A model layer takes it; a self loop is refused. */
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 5));
  ng_layer_opts lo = NG_LAYER_OPTS_INIT;
  EXPECT_OK(ng_aggregator_define(&lo.aggregator, &ng_test_softmax));
  EXPECT_OK(ng_model_add_layer(m, &lo));
  ng_layer_opts got = NG_LAYER_OPTS_INIT;
  EXPECT_OK(ng_model_layer_get(&got, m, 0));
  EXPECT_TRUE(got.aggregator.user == &ng_test_softmax);
  lo.aggregator.self_loop = 1;
  EXPECT_STATUS(ng_model_add_layer(m, &lo), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("no self loop");
  ng_model_destroy(m);
}

/* ---- forward against the definition ---- */

/* The forward computed here: the functions in edge order, 0 for no neighbours. */
static void reference_fwd(const ng_aggregator_def *u, bool weighted, const ng_block *b,
                          const float *src, int64_t dim, float *out) {
  float s[NG_AGG_STATE_MAX];
  for (int32_t d = 0; d < b->n_dst; d++)
    for (int64_t c = 0; c < dim; c++) {
      const int32_t e0 = b->indptr[d], e1 = b->indptr[d + 1];
      u->init(s);
      for (int32_t e = e0; e < e1; e++)
        u->accumulate(s, src[(int64_t)b->indices[e] * dim + c], weighted ? b->edge_w[e] : 1.0f);
      out[(int64_t)d * dim + c] = e1 > e0 ? u->finalize(s, (float)(e1 - e0)) : 0.0f;
    }
}

/* A block of nd destinations (every fifth without neighbours) over ns sources. */
static void make_block(ng_test_block *tb, ng_rng *r, int32_t nd, int32_t ns, int32_t max_deg) {
  tb->indptr = ng_test_xmalloc(((size_t)nd + 1) * 4);
  tb->indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++)
    tb->indptr[d + 1] =
        tb->indptr[d] + (d % 5 == 4 ? 0 : 1 + (int32_t)ng_rng_below(r, (uint64_t)max_deg));
  ng_test_block_fill(tb, r, nd, ns, true, true);
}

static ng_aggr user_aggr(const ng_aggregator_def *u, bool weighted) {
  ng_aggregator pub;
  ng_aggr ag;
  EXPECT_OK(ng_aggregator_define(&pub, u));
  pub.edge_weight = weighted ? NG_EDGE_WEIGHT_GCN_NORM : NG_EDGE_WEIGHT_NONE;
  EXPECT_OK(ng__aggr_from_public(&ag, &pub));
  return ag;
}

static void test_fwd_matches_definition(void) {
  ng_rng r;
  ng_rng_seed(&r, 31);
  ng_test_block tb;
  make_block(&tb, &r, 70, 150, 9);
  const int64_t dims[] = {1, 7, 300};                /* 300: more than one tile of 256 features */
  for (size_t i = 0; i < 2 * NG_TEST_LEN(DEFS); i++) /* with the row function, then without */
    for (int weighted = 0; weighted < 2; weighted++)
      for (size_t k = 0; k < NG_TEST_LEN(dims); k++) {
        const int64_t dim = dims[k], nd = (int64_t)tb.b.n_dst * dim;
        ng_aggregator_def def = *DEFS[i % NG_TEST_LEN(DEFS)];
        if (i >= NG_TEST_LEN(DEFS))
          def.accumulate_row = NULL;
        const ng_aggregator_def *u = &def;
        const ng_aggr ag = user_aggr(u, weighted);
        float *src = ng_test_rand_floats(&r, (int64_t)tb.b.n_src * dim);
        float *ref = ng_test_xmalloc((size_t)nd * 4), *out = ng_test_xmalloc((size_t)nd * 4);
        float *out1 = ng_test_xmalloc((size_t)nd * 4);
        memset(out, 0x7f, (size_t)nd * 4); /* poison */
        memset(out1, 0x7f, (size_t)nd * 4);
        reference_fwd(u, weighted, &tb.b, src, dim, ref);
        EXPECT_OK(be->iface->aggr_fwd(be, &ag, &tb.b, src, dim, out, NULL));
        EXPECT_OK(be1->iface->aggr_fwd(be1, &ag, &tb.b, src, dim, out1, NULL));
        if (memcmp(ref, out, (size_t)nd * 4) || memcmp(ref, out1, (size_t)nd * 4))
          ng_test_fail(__FILE__, __LINE__, "%s%s dim %lld: aggr_fwd differs from the definition",
                       u->name, weighted ? " weighted" : "", (long long)dim);
        for (int64_t j = 0; j < nd; j++)
          if (!isfinite(out[j]))
            ng_test_fail(__FILE__, __LINE__, "%s: out[%lld] = %g", u->name, (long long)j,
                         (double)out[j]);
        free(src);
        free(ref);
        free(out);
        free(out1);
      }
  ng_test_block_free(&tb);
}

/* ---- partial states merged by the user's law ---- */

/* The block of the first `half` (0) or the other (1) part of each destination's edges. */
static void split_block(const ng_block *b, int part, ng_block *out, int32_t *indptr,
                        int32_t *indices, float *edge_w) {
  *out = *b;
  indptr[0] = 0;
  int32_t n = 0;
  for (int32_t d = 0; d < b->n_dst; d++) {
    const int32_t e0 = b->indptr[d], e1 = b->indptr[d + 1], mid = e0 + (e1 - e0) / 2;
    for (int32_t e = part ? mid : e0; e < (part ? e1 : mid); e++) {
      indices[n] = b->indices[e];
      edge_w[n++] = b->edge_w[e];
    }
    indptr[d + 1] = n;
  }
  out->nnz = n;
  out->indptr = indptr;
  out->indices = indices;
  out->edge_w = edge_w;
  out->t_indptr = out->t_dst = out->t_eid = NULL;
}

static void test_partial_merge(void) {
  ng_rng r;
  ng_rng_seed(&r, 47);
  ng_test_block tb;
  make_block(&tb, &r, 60, 120, 10);
  const ng_block *b = &tb.b;
  const size_t nnz = (size_t)b->nnz + 1, nd1 = (size_t)b->n_dst + 1;
  int32_t *ip[2] = {ng_test_xmalloc(nd1 * 4), ng_test_xmalloc(nd1 * 4)};
  int32_t *ix[2] = {ng_test_xmalloc(nnz * 4), ng_test_xmalloc(nnz * 4)};
  float *ew[2] = {ng_test_xmalloc(nnz * 4), ng_test_xmalloc(nnz * 4)};
  ng_block half[2];
  for (int p = 0; p < 2; p++)
    split_block(b, p, &half[p], ip[p], ix[p], ew[p]);
  const int64_t dim = 13;
  for (size_t i = 0; i < NG_TEST_LEN(DEFS); i++)
    for (int weighted = 0; weighted < 2; weighted++) {
      const ng_aggr ag = user_aggr(DEFS[i], weighted);
      const int64_t S = ng__aggr_state_size(&ag), nd = (int64_t)b->n_dst * dim;
      float *src = ng_test_rand_floats(&r, (int64_t)b->n_src * dim);
      float *ref = ng_test_xmalloc((size_t)nd * 4), *out = ng_test_xmalloc((size_t)nd * 4);
      ng_pstate st[2];
      for (int p = 0; p < 2; p++) {
        st[p] = (ng_pstate){ng_test_xmalloc((size_t)(nd * S) * 4),
                            ng_test_xmalloc((size_t)b->n_dst * 4), b->n_dst, dim};
        memset(st[p].val, 0x7f, (size_t)(nd * S) * 4);
        EXPECT_OK(be->iface->aggr_partial(be, &ag, &half[p], src, &st[p]));
      }
      EXPECT_OK(be->iface->pstate_merge(be, &ag, &st[1], &st[0])); /* the later half first */
      memset(out, 0x7f, (size_t)nd * 4);
      EXPECT_OK(be->iface->pstate_finalize(be, &ag, &st[1], out));
      EXPECT_OK(be->iface->aggr_fwd(be, &ag, b, src, dim, ref, NULL));
      double worst = 0.0;
      for (int64_t j = 0; j < nd; j++)
        worst = fmax(worst, fabs((double)out[j] - ref[j]) / (1.0 + fabs((double)ref[j])));
      if (!(worst <= 1e-5))
        ng_test_fail(__FILE__, __LINE__,
                     "%s%s: merged halves differ from the unsplit forward by %g (relative)",
                     DEFS[i]->name, weighted ? " weighted" : "", worst);
      for (int32_t d = 0; d < b->n_dst; d++)
        EXPECT_EQ_I(st[1].count[d], b->indptr[d + 1] - b->indptr[d]);
      for (int p = 0; p < 2; p++) {
        free(st[p].val);
        free(st[p].count);
      }
      free(src);
      free(ref);
      free(out);
    }
  for (int p = 0; p < 2; p++) {
    free(ip[p]);
    free(ix[p]);
    free(ew[p]);
  }
  ng_test_block_free(&tb);
}

/* Input dropout in aggr_partial drops the elements of the table's rows as ng_drop_row does. */
static void test_partial_dropout(void) {
  ng_rng r;
  ng_rng_seed(&r, 53);
  ng_test_block tb;
  make_block(&tb, &r, 40, 90, 7);
  const ng_block *b = &tb.b;
  const int64_t dim = 11, nd = (int64_t)b->n_dst * dim, ns = (int64_t)b->n_src * dim;
  float *src = ng_test_rand_floats(&r, ns), *dropped = ng_test_xmalloc((size_t)ns * 4);
  const float p = 0.4f;
  const uint64_t key = 0x5eed;
  for (int32_t s = 0; s < b->n_src; s++)
    ng_drop_row(dropped + s * dim, src + s * dim, s, dim, p, key);
  ng_aggr ag = user_aggr(&ng_test_softmax, false);
  const int64_t S = ng__aggr_state_size(&ag);
  ng_pstate a = {ng_test_xmalloc((size_t)(nd * S) * 4), ng_test_xmalloc((size_t)b->n_dst * 4),
                 b->n_dst, dim};
  ng_pstate c = {ng_test_xmalloc((size_t)(nd * S) * 4), ng_test_xmalloc((size_t)b->n_dst * 4),
                 b->n_dst, dim};
  EXPECT_OK(be->iface->aggr_partial(be, &ag, b, dropped, &c));
  ag.drop_p = p;
  ag.drop_key = key;
  EXPECT_OK(be->iface->aggr_partial(be, &ag, b, src, &a));
  EXPECT_TRUE(memcmp(a.val, c.val, (size_t)(nd * S) * 4) == 0);
  free(a.val);
  free(a.count);
  free(c.val);
  free(c.count);
  free(src);
  free(dropped);
  ng_test_block_free(&tb);
}

/* A user mean (linear) gives the built-in MEAN kernels' forward bit for bit, and their backward
 * within a rounding (its coefficient is w / n where theirs is w * (1 / n)). */
static void test_user_mean_is_builtin_mean(void) {
  ng_rng r;
  ng_rng_seed(&r, 59);
  ng_test_block tb;
  make_block(&tb, &r, 80, 160, 12);
  const ng_block *b = &tb.b;
  for (int weighted = 0; weighted < 2; weighted++) {
    const int64_t dim = 37, nd = (int64_t)b->n_dst * dim, ns = (int64_t)b->n_src * dim;
    const ng_aggr user = user_aggr(&ng_test_mean, weighted);
    const ng_aggr builtin = {NG_REDUCE_SUM, weighted, false, true, 0.0f, 0, NULL};
    float *src = ng_test_rand_floats(&r, ns), *g = ng_test_rand_floats(&r, nd);
    float *a = ng_test_xmalloc((size_t)nd * 4), *c = ng_test_xmalloc((size_t)nd * 4);
    EXPECT_OK(be->iface->aggr_fwd(be, &user, b, src, dim, a, NULL));
    EXPECT_OK(be->iface->aggr_fwd(be, &builtin, b, src, dim, c, NULL));
    EXPECT_TRUE(memcmp(a, c, (size_t)nd * 4) == 0);
    float *ga = ng_test_xmalloc((size_t)ns * 4), *gc = ng_test_xmalloc((size_t)ns * 4);
    float *work = ng_test_xmalloc((size_t)b->nnz * (size_t)dim * 4);
    EXPECT_OK(be->iface->aggr_user_bwd(be, &user, b, src, g, dim, work, ga));
    EXPECT_OK(be->iface->aggr_bwd(be, &builtin, b, g, NULL, dim, gc));
    for (int64_t j = 0; j < ns; j++)
      EXPECT_NEAR(ga[j], gc[j], 1e-6 * (1.0 + fabs(gc[j])));
    /* The built-in ops refuse each other's aggregators. */
    EXPECT_STATUS(be->iface->aggr_bwd(be, &user, b, g, NULL, dim, gc), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("aggr_user_bwd");
    EXPECT_STATUS(be->iface->aggr_user_bwd(be, &builtin, b, src, g, dim, work, ga),
                  NG_ERR_INVALID_ARG);
    free(src);
    free(g);
    free(a);
    free(c);
    free(ga);
    free(gc);
    free(work);
  }
  ng_test_block_free(&tb);
}

/* Checkpoints record the aggregator's name: the trainer of a model with the same aggregator
 * loads them, one with another aggregator is refused, and so is rebuilding the model from the
 * file alone (its functions are the program's); serving refuses user aggregators. */
static void test_checkpoint_and_serving(void) {
  ng_dataset_t cora = ng_test_fetch_cora();
  ng_model_t m[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    EXPECT_OK(ng_model_create(&m[k], NG_MODEL_SAGE, 1433));
    for (int l = 0; l < 2; l++) {
      ng_layer_opts lo = NG_LAYER_OPTS_INIT;
      lo.fanout = 5;
      lo.out_dim = l ? 7 : 16;
      lo.activation = l ? NG_ACT_NONE : NG_ACT_RELU;
      if (k == 0)
        EXPECT_OK(ng_aggregator_define(&lo.aggregator, &ng_test_powmean));
      EXPECT_OK(ng_model_add_layer(m[k], &lo));
    }
  }
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 64;
  ng_trainer_t t = NULL, t2 = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, m[0], &o));
  ng_epoch_stats st = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_trainer_epoch(&st, t));
  EXPECT_TRUE(isfinite(st.loss) && st.loss > 0.0);
  double acc = -1.0; /* layer-wise inference over every node runs the aggregator too */
  EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_TEST));
  EXPECT_TRUE(acc > 0.2 && acc <= 1.0);
  const char *path = ng_test_path("powmean.safetensors");
  EXPECT_OK(ng_trainer_save(t, path));
  EXPECT_OK(ng_trainer_load(t, path));
  ng_model_t from = NULL;
  EXPECT_STATUS(ng_model_from_checkpoint(&from, path), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("user aggregator \"powmean3\"");
  EXPECT_OK(ng_trainer_create(&t2, cora, m[1], &o));
  EXPECT_STATUS(ng_trainer_load(t2, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("powmean3");
  ng_engine *e = NULL;
  ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
  EXPECT_STATUS(ng_engine_create(&e, cora, m[0], path, &eo), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("user aggregator");
  ng_trainer_destroy(t2);
  ng_trainer_destroy(t);
  ng_model_destroy(m[0]);
  ng_model_destroy(m[1]);
  ng_dataset_close(cora);
}

int main(void) {
  if (ng__backend_cpu_create(&be, 2) != NG_OK || ng__backend_cpu_create(&be1, 1) != NG_OK) {
    fprintf(stderr, "test_agg_user: %s\n", ng_last_error());
    return 1;
  }
  RUN_TEST(test_define_checks);
  RUN_TEST(test_fwd_matches_definition);
  RUN_TEST(test_partial_merge);
  RUN_TEST(test_partial_dropout);
  RUN_TEST(test_user_mean_is_builtin_mean);
  RUN_TEST(test_checkpoint_and_serving);
  ng__backend_destroy(be);
  ng__backend_destroy(be1);
  return ng_test_summary();
}
