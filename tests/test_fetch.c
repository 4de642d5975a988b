/* The tiered input layer on the CPU backend (which plays the device here, so CI runs it): the
 * three fetch strategies give bit-identical losses and weights for any hot-tier size and thread
 * count, the two extreme tiers give the same bits as each other, and the fetch counters add up.
 * tests/test_gpu_fetch.c checks the same on CUDA. */
#include "ng_test_fetch.h"

#include "core/core_impl.h"

#include <math.h>
#include <stdlib.h>

static ng_dataset_t cora;

typedef struct {
  const char *name;
  ng_model_kind kind;
  ng_aggregator ag;
  float dropout;
} model_case;

static const model_case MODELS[] = {
    {"sage-mean, dropout 0.5", NG_MODEL_SAGE, NG_AGGREGATOR_MEAN, 0.5f},
    {"gcn, dropout 0.5", NG_MODEL_GCN, NG_AGGREGATOR_GCN, 0.5f},
    {"sage-max", NG_MODEL_SAGE, NG_AGGREGATOR_MAX, 0.0f},
    {"sage-min, dropout 0.3", NG_MODEL_SAGE, NG_AGGREGATOR_MIN, 0.3f},
    {"sage-sum", NG_MODEL_SAGE, NG_AGGREGATOR_SUM, 0.0f},
};

static const ng_fetch FETCHES[] = {NG_FETCH_PARTIAL, NG_FETCH_BATCH, NG_FETCH_ZCOPY};

static ng_test_fetch_run run_of(const model_case *mc, ng_fetch f, double ratio, int threads) {
  return (ng_test_fetch_run){"cpu", f, ratio, mc->kind, mc->ag, mc->dropout, threads};
}

static void test_strategies_bit_identical(void) {
  for (size_t m = 0; m < NG_ARRAY_LEN(MODELS); m++) {
    ng_test_fetch_result ref, r;
    ng_test_fetch_run run = run_of(&MODELS[m], NG_FETCH_PARTIAL, 0.3, 2);
    if (!ng_test_fetch_train(cora, &run, &ref))
      continue;
    EXPECT_TRUE(ref.fetch.hot_rows > 0 && ref.fetch.cold_rows > 0);
    EXPECT_TRUE(isfinite(ref.loss[1]) && ref.loss[1] > 0.0);
    for (size_t f = 0; f < NG_ARRAY_LEN(FETCHES); f++)
      for (int threads = 1; threads <= 2; threads++) {
        run = run_of(&MODELS[m], FETCHES[f], 0.3, threads);
        if (!ng_test_fetch_train(cora, &run, &r))
          continue;
        char what[128];
        snprintf(what, sizeof what, "%s, %s, %d threads", MODELS[m].name, ng_fetch_name(FETCHES[f]),
                 threads);
        EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
        /* Every strategy reads the same rows from each tier. */
        EXPECT_EQ_I(r.fetch.hot_rows, ref.fetch.hot_rows);
        EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
        free(r.checkpoint);
      }
    free(ref.checkpoint);
  }
}

/* With every row hot or every row cold, the input aggregation is one reduction in edge order
 * either way (merged with an empty state), so the bits agree; tiers in between only reorder
 * the additions, so they agree within rounding. */
static void test_tier_sizes(void) {
  const model_case *mc = &MODELS[0];
  ng_test_fetch_result all_hot, all_cold, part;
  ng_test_fetch_run run = run_of(mc, NG_FETCH_BATCH, 1.0, 2);
  if (!ng_test_fetch_train(cora, &run, &all_hot))
    return;
  run = run_of(mc, NG_FETCH_PARTIAL, 0.0, 2);
  if (!ng_test_fetch_train(cora, &run, &all_cold))
    return;
  run = run_of(mc, NG_FETCH_ZCOPY, 0.5, 2);
  if (!ng_test_fetch_train(cora, &run, &part))
    return;
  EXPECT_TRUE(ng_test_fetch_same(&all_hot, &all_cold, "all hot vs all cold"));
  EXPECT_EQ_I(all_hot.hot_rows, 2708);
  EXPECT_EQ_I(all_cold.hot_rows, 0);
  EXPECT_EQ_I(part.hot_rows, 1354);
  EXPECT_EQ_I(all_hot.fetch.cold_rows, 0);
  EXPECT_EQ_I(all_cold.fetch.hot_rows, 0);
  /* The same samples: the same rows in all, split differently; and more than the input
   * layer's edges (each destination's self row counts too). */
  int64_t total = all_hot.fetch.hot_rows;
  EXPECT_EQ_I(all_cold.fetch.cold_rows, total);
  EXPECT_EQ_I(part.fetch.hot_rows + part.fetch.cold_rows, total);
  EXPECT_TRUE(part.fetch.hot_rows > 0 && part.fetch.cold_rows > 0);
  EXPECT_TRUE(total > 0 && total < all_hot.sampled_edges + 2 * 140);
  for (int e = 0; e < NG_TEST_FETCH_EPOCHS; e++)
    EXPECT_NEAR(part.loss[e], all_hot.loss[e], 1e-4 * fabs(all_hot.loss[e]));
  /* The CPU backend copies nothing to a device. */
  EXPECT_EQ_I(part.fetch.h2d_bytes, 0);
  free(all_hot.checkpoint);
  free(all_cold.checkpoint);
  free(part.checkpoint);
}

static void test_options(void) {
  ng_fetch f = NG_FETCH_BATCH;
  for (int i = 0; i <= NG_FETCH_ZCOPY; i++) {
    EXPECT_OK(ng_fetch_parse(&f, ng_fetch_name((ng_fetch)i)));
    EXPECT_EQ_I(f, i);
  }
  EXPECT_STATUS(ng_fetch_parse(&f, "dma"), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(ng_last_error(), "partial, batch or zcopy") != NULL);
  EXPECT_TRUE(strcmp(ng_fetch_name((ng_fetch)9), "?") == 0);

  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  ng_layer_opts l = NG_LAYER_OPTS_INIT;
  l.out_dim = 7;
  l.fanout = 5;
  EXPECT_OK(ng_model_add_layer(m, &l));
  struct {
    double ratio;
    int64_t bytes;
    int fetch;
    ng_status want;
    int64_t hot;
  } cases[] = {
      {1.5, 0, NG_FETCH_PARTIAL, NG_ERR_INVALID_ARG, 0},
      {-1.0, -5, NG_FETCH_PARTIAL, NG_ERR_INVALID_ARG, 0},
      {-1.0, 0, 7, NG_ERR_INVALID_ARG, 0},
      {-1.0, 0, NG_FETCH_BATCH, NG_OK, 2708},                 /* CPU default: every row */
      {-1.0, 100 * 1433 * 4 + 3, NG_FETCH_ZCOPY, NG_OK, 100}, /* bytes win, whole rows */
      {0.25, 0, NG_FETCH_PARTIAL, NG_OK, 677},
      {-1.0, (int64_t)1 << 40, NG_FETCH_PARTIAL, NG_OK, 2708}, /* clamped to the nodes */
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.cache_ratio = cases[i].ratio;
    o.cache_bytes = cases[i].bytes;
    o.fetch = (ng_fetch)cases[i].fetch;
    ng_trainer_t t = NULL;
    EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), cases[i].want);
    if (cases[i].want == NG_OK)
      EXPECT_EQ_I(ng_trainer_hot_rows(t), cases[i].hot);
    else
      EXPECT_TRUE(t == NULL && strlen(ng_last_error()) > 0);
    ng_trainer_destroy(t);
  }
  ng_model_destroy(m);
}

int main(void) {
  cora = ng_test_fetch_cora();
  RUN_TEST(test_options);
  RUN_TEST(test_tier_sizes);
  RUN_TEST(test_strategies_bit_identical);
  ng_dataset_close(cora);
  return ng_test_summary();
}
