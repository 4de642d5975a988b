/* The tiered input layer on CUDA: hot rows in device memory, cold rows by each fetch strategy
 * (PARTIAL states from the CPU, BATCH staged rows, ZCOPY reads of registered host memory). The
 * three give bit-identical losses and weights, follow the CPU backend within fp32 tolerance and
 * read the same rows from each tier. Exits 77 (skipped) without CUDA or a GPU. */
#include "ng_test_fetch.h"

#include <math.h>
#include <stdlib.h>

#ifndef NG_HAVE_CUDA
int main(void) {
  printf("skipped: this build has no CUDA backend\n");
  return 77;
}
#else
#include "ng_cuda.h"

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
    {"sage-max, dropout 0.2", NG_MODEL_SAGE, NG_AGGREGATOR_MAX, 0.2f},
};

typedef struct {
  ng_mode mode;
  ng_fetch transfer;
  int workers, partial_workers;
  double period_ms;
  int lookahead;       /* 0: the default */
  double device_share; /* hybrid-static */
} mode_case;

/* Inline (the synchronous form) and with worker threads, every mode. */
static const mode_case MODES[] = {
    {NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, -1, 0, 0, 0},
    {NG_MODE_BASELINE, NG_FETCH_AUTO, -1, -1, 0, 0, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, -1, -1, 0, 0, 0},
    {NG_MODE_BASELINE, NG_FETCH_AUTO, 4, -1, 0, 0, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 4, -1, 0, 0, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 0, 1, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, -1, -1, 0, 2, 0},
    {NG_MODE_BASELINE, NG_FETCH_AUTO, 2, -1, 0, 1, 0},
    {NG_MODE_PARTIAL, NG_FETCH_AUTO, 4, -1, 0, 0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 5, 2, 0, 0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_BATCH, 3, 1, 0, 0, 0},
    /* Every worker PARTIAL beside the registered table: the device reads the cold self rows,
     * and with a device share the cold neighbour rows of that share of the destinations. */
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 3, 3, 0, 0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 3, 3, 0, 0, 0.25},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 3, 3, 0, 0, 1.0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 4, 3, 0, 1, 0.5},
    {NG_MODE_HYBRID, NG_FETCH_AUTO, 6, -1, 0.01, 0, 0},
};

static void test_strategies(void) {
  for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
    const model_case *mc = &MODELS[m];
    ng_test_fetch_run run = {.device = "cpu",
                             .mode = NG_MODE_PARTIAL,
                             .transfer = NG_FETCH_AUTO,
                             .workers = -1,
                             .partial_workers = -1,
                             .cache_ratio = 0.3,
                             .kind = mc->kind,
                             .aggregator = mc->ag,
                             .dropout = mc->dropout,
                             .threads = 2};
    ng_test_fetch_result cpu, ref, r;
    if (!ng_test_fetch_train(cora, &run, &cpu))
      continue;
    run.device = "cuda";
    if (!ng_test_fetch_train(cora, &run, &ref)) {
      free(cpu.checkpoint);
      continue;
    }
    for (int e = 0; e < NG_TEST_FETCH_EPOCHS; e++)
      EXPECT_NEAR(ref.loss[e], cpu.loss[e], 1e-4 * fabs(cpu.loss[e]));
    EXPECT_EQ_I(ref.fetch.hot_rows, cpu.fetch.hot_rows);
    EXPECT_EQ_I(ref.fetch.cold_rows, cpu.fetch.cold_rows);
    EXPECT_EQ_I(ref.hot_rows, 812); /* 30% of Cora's 2708 rows */
    for (size_t k = 1; k < sizeof MODES / sizeof MODES[0]; k++) {
      const mode_case *md = &MODES[k];
      run.mode = md->mode;
      run.transfer = md->transfer;
      run.workers = md->workers;
      run.partial_workers = md->partial_workers;
      run.period_ms = md->period_ms;
      run.lookahead = md->lookahead;
      run.device_share = md->device_share;
      if (!ng_test_fetch_train(cora, &run, &r))
        continue;
      char what[160];
      snprintf(what, sizeof what, "cuda %s, %s/%s, %d workers, lookahead %d, device share %g",
               mc->name, ng_mode_name(md->mode), ng_fetch_name(md->transfer), md->workers,
               md->lookahead, md->device_share);
      EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
      EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
      EXPECT_TRUE(r.fetch.h2d_bytes > 0);
      if (ng_test_fetch_self_zcopy(&run))
        ng_test_fetch_expect_self_split(&run, &r, &ref);
      printf(
          "  %-24s %-14s %2d workers, share %-4g: losses %.6f %.6f, h2d %.2f MB, zcopy %.2f MB\n",
          mc->name, ng_mode_name(md->mode), md->workers, md->device_share, r.loss[0], r.loss[1],
          (double)r.fetch.h2d_bytes / 1e6, (double)r.fetch.zcopy_bytes / 1e6);
      free(r.checkpoint);
    }
    free(ref.checkpoint);
    free(cpu.checkpoint);
  }
}

/* bf16 feature storage on CUDA (the hot tier, staged rows and zero-copy reads in bf16, converted
 * as read): every mode and worker count gives the bits of the inline PARTIAL run, which follows
 * the CPU backend's bf16 run within fp32 tolerance; baseline packages and zero-copy reads carry
 * half the row bytes of fp32's; all hot and all cold agree bit for bit. */
static void test_bf16(void) {
  for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
    const model_case *mc = &MODELS[m];
    ng_test_fetch_run run = {.device = "cpu",
                             .mode = NG_MODE_PARTIAL,
                             .transfer = NG_FETCH_AUTO,
                             .workers = -1,
                             .partial_workers = -1,
                             .cache_ratio = 0.3,
                             .kind = mc->kind,
                             .aggregator = mc->ag,
                             .dropout = mc->dropout,
                             .threads = 2,
                             .precision = NG_PRECISION_BF16};
    ng_test_fetch_result cpu, ref, r;
    if (!ng_test_fetch_train(cora, &run, &cpu))
      continue;
    run.device = "cuda";
    if (!ng_test_fetch_train(cora, &run, &ref)) {
      free(cpu.checkpoint);
      continue;
    }
    for (int e = 0; e < NG_TEST_FETCH_EPOCHS; e++)
      EXPECT_NEAR(ref.loss[e], cpu.loss[e], 1e-4 * fabs(cpu.loss[e]));
    EXPECT_EQ_I(ref.fetch.cpu_cold_bytes, cpu.fetch.cpu_cold_bytes);
    for (size_t k = 1; k < sizeof MODES / sizeof MODES[0]; k++) {
      const mode_case *md = &MODES[k];
      run.mode = md->mode;
      run.transfer = md->transfer;
      run.workers = md->workers;
      run.partial_workers = md->partial_workers;
      run.period_ms = md->period_ms;
      run.lookahead = md->lookahead;
      run.device_share = md->device_share;
      if (!ng_test_fetch_train(cora, &run, &r))
        continue;
      char what[160];
      snprintf(what, sizeof what, "cuda bf16 %s, %s/%s, %d workers, lookahead %d, share %g",
               mc->name, ng_mode_name(md->mode), ng_fetch_name(md->transfer), md->workers,
               md->lookahead, md->device_share);
      EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
      EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
      printf(
          "  bf16 %-24s %-14s %2d workers, share %-4g: h2d %.2f MB, zcopy %.2f MB, cpu %.2f MB\n",
          mc->name, ng_mode_name(md->mode), md->workers, md->device_share,
          (double)r.fetch.h2d_bytes / 1e6, (double)r.fetch.zcopy_bytes / 1e6,
          (double)r.fetch.cpu_cold_bytes / 1e6);
      free(r.checkpoint);
    }
    free(ref.checkpoint);
    free(cpu.checkpoint);
  }
  /* Bytes against fp32, without input dropout (rows staged as bf16), and the extreme tiers. */
  ng_test_fetch_run run = {.device = "cuda",
                           .mode = NG_MODE_BASELINE,
                           .transfer = NG_FETCH_AUTO,
                           .workers = 2,
                           .partial_workers = -1,
                           .cache_ratio = 0.0,
                           .kind = NG_MODEL_SAGE,
                           .aggregator = NG_AGGREGATOR_MEAN,
                           .dropout = 0.0f,
                           .threads = 2};
  ng_test_fetch_result b32, b16, z16, hot16;
  if (!ng_test_fetch_train(cora, &run, &b32))
    return;
  run.precision = NG_PRECISION_BF16;
  if (ng_test_fetch_train(cora, &run, &b16)) {
    /* The packages hold the staged rows plus blocks and ids: well under fp32's. */
    EXPECT_TRUE(b16.fetch.h2d_bytes < b32.fetch.h2d_bytes * 3 / 4);
    EXPECT_EQ_I(2 * b16.fetch.cpu_cold_bytes, b32.fetch.cpu_cold_bytes);
    run.mode = NG_MODE_ZEROCOPY;
    if (ng_test_fetch_train(cora, &run, &z16)) {
      EXPECT_TRUE(ng_test_fetch_same(&b16, &z16, "cuda bf16 all cold: baseline vs zerocopy"));
      EXPECT_EQ_I(z16.fetch.zcopy_bytes, b16.fetch.cpu_cold_bytes);
      free(z16.checkpoint);
    }
    run.mode = NG_MODE_BASELINE;
    run.cache_ratio = 1.0;
    if (ng_test_fetch_train(cora, &run, &hot16)) {
      EXPECT_TRUE(ng_test_fetch_same(&b16, &hot16, "cuda bf16 all cold vs all hot"));
      free(hot16.checkpoint);
    }
    free(b16.checkpoint);
  }
  free(b32.checkpoint);
}

/* All rows hot (nothing crosses PCIe but the package) and all rows cold give the same bits. */
static void test_tier_extremes(void) {
  const model_case *mc = &MODELS[0];
  ng_test_fetch_run run = {.device = "cuda",
                           .mode = NG_MODE_ZEROCOPY,
                           .transfer = NG_FETCH_AUTO,
                           .workers = 2,
                           .partial_workers = -1,
                           .cache_ratio = 0.0,
                           .kind = mc->kind,
                           .aggregator = mc->ag,
                           .dropout = mc->dropout,
                           .threads = 2};
  ng_test_fetch_result cold, hot;
  if (!ng_test_fetch_train(cora, &run, &cold))
    return;
  run.mode = NG_MODE_BASELINE;
  run.cache_ratio = 1.0;
  if (ng_test_fetch_train(cora, &run, &hot)) {
    EXPECT_TRUE(ng_test_fetch_same(&cold, &hot, "cuda all cold (zcopy) vs all hot"));
    EXPECT_EQ_I(hot.fetch.cold_rows, 0);
    EXPECT_EQ_I(cold.fetch.hot_rows, 0);
    /* A package of staged rows is larger than one of ids only. */
    EXPECT_TRUE(cold.fetch.h2d_bytes > 0 && hot.fetch.h2d_bytes > 0);
    free(hot.checkpoint);
  }
  free(cold.checkpoint);
}

int main(void) {
  int devices = 0;
  char desc[512];
  if (ng__cuda_devices(&devices, desc, sizeof desc) != NG_OK || devices == 0) {
    printf("skipped: no CUDA device\n");
    return 77;
  }
  cora = ng_test_fetch_cora();
  RUN_TEST(test_strategies);
  RUN_TEST(test_tier_extremes);
  RUN_TEST(test_bf16);
  ng_dataset_close(cora);
  return ng_test_summary();
}
#endif
