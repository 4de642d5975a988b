/* The tiered input layer and the hybrid runtime on the CPU backend (which plays the device
 * here, so CI runs it): every mode (baseline, zerocopy, partial, hybrid-static, hybrid), every
 * worker count (inline, 1, 3) and thread count gives bit-identical losses and weights, the two
 * extreme tiers give the same bits as each other, and the fetch counters add up. The input
 * layer over a row overlay (serving's snapshot: rows an update replaced) gives the bits of the
 * table with those rows written in. tests/test_gpu_fetch.c checks the same on CUDA. */
#include "ng_test_agg.h"
#include "ng_test_fetch.h"

#include "core_impl.h"
#include "feature_store_impl.h"
#include "ng_cpu.h"
#include "ng_test_graph.h"
#include "sampler_impl.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <string.h>

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
    /* GIN's sum is partially aggregated like any sum: its MLP comes after the aggregation. */
    {"gin, dropout 0.5", NG_MODEL_GIN, NG_AGGREGATOR_SUM, 0.5f},
    /* A user aggregator of three state floats: the CPU's partial states merge by its law. */
    {"sage softmax-aggr (user), dropout 0.5",
     NG_MODEL_SAGE,
     {NG_REDUCE_SUM, NG_EDGE_WEIGHT_NONE, NG_FINALIZE_NONE, 0, &ng_test_softmax},
     0.5f},
};

/* A mode with its threads: workers -1 is the inline form (no worker threads). */
typedef struct {
  ng_mode mode;
  ng_fetch transfer;
  int workers, partial_workers;
  int threads;
  double period_ms;
  int lookahead;       /* 0: the default */
  double device_share; /* hybrid-static */
  int ready_window;    /* 0: the default */
} mode_case;

static const mode_case MODES[] = {
    {NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
    {NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, -1, 1, 0, 0, 0, 0},
    {NG_MODE_BASELINE, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
    {NG_MODE_BASELINE, NG_FETCH_AUTO, 1, -1, 1, 0, 0, 0, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 3, -1, 1, 0, 0, 0, 0},
    /* Every depth of the device's pipeline, inline and with threads. */
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, -1, -1, 1, 0, 1, 0, 0},
    {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 1, 0, 2, 0, 0},
    {NG_MODE_BASELINE, NG_FETCH_AUTO, 2, -1, 1, 0, 1, 0, 0},
    {NG_MODE_PARTIAL, NG_FETCH_AUTO, 3, -1, 1, 0, 0, 0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_BATCH, 3, 1, 1, 0, 0, 0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 2, 1, 1, 0, 0, 0, 0},
    /* Every worker PARTIAL beside a zero-copy view of the table (Cora's rows are 5.7 KB): the
     * device reads the cold self rows, and with a device share the cold neighbour rows of the
     * last half (all) of each package's destinations, which it reduces itself. */
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 2, 2, 1, 0, 0, 0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 2, 2, 1, 0, 0, 0.5, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 2, 2, 1, 0, 0, 1.0, 0},
    {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 3, 2, 1, 0, 1, 0.25, 0},
    /* A 0.01 ms period: the controller decides after almost every iteration. With the zcopy
     * transfer it may also move the device share once every worker is PARTIAL (timing decides
     * whether a run gets there; the bits may not change either way). */
    {NG_MODE_HYBRID, NG_FETCH_BATCH, 3, -1, 1, 0.01, 0, 0, 0},
    {NG_MODE_HYBRID, NG_FETCH_ZCOPY, 3, -1, 1, 0.01, 0, 0, 0},
    /* The narrowest ready window (every worker waits for the device after each iteration;
     * each has the fewest staging slots, lookahead + 2) and one longer than an epoch (a
     * window's share of slots per worker; the workers run into the next epoch until it). */
    {NG_MODE_PARTIAL, NG_FETCH_AUTO, 3, -1, 1, 0, 1, 0, 1},
    {NG_MODE_HYBRID, NG_FETCH_ZCOPY, 3, -1, 1, 0.01, 0, 0, 64},
};

static ng_test_fetch_run run_of(const model_case *mc, const mode_case *m, double ratio) {
  return (ng_test_fetch_run){.device = "cpu",
                             .mode = m->mode,
                             .transfer = m->transfer,
                             .workers = m->workers,
                             .partial_workers = m->partial_workers,
                             .cache_ratio = ratio,
                             .kind = mc->kind,
                             .aggregator = mc->ag,
                             .dropout = mc->dropout,
                             .threads = m->threads,
                             .period_ms = m->period_ms,
                             .lookahead = m->lookahead,
                             .device_share = m->device_share,
                             .ready_window = m->ready_window};
}

static void describe(char *buf, size_t cap, const model_case *mc, const mode_case *m) {
  snprintf(buf, cap,
           "%s, %s/%s, %d workers (%d partial), %d threads, lookahead %d, device share %g, "
           "ready window %d",
           mc->name, ng_mode_name(m->mode), ng_fetch_name(m->transfer), m->workers,
           m->partial_workers, m->threads, m->lookahead, m->device_share, m->ready_window);
}

/* Whether model MODELS[m] runs mode MODES[k] against its reference. Every pair, unless
 * NG_TEST_FETCH_STRIDE is s > 1 (the TSan stage, tests/CMakeLists.txt): then only the modes with
 * k % s == m % s, so that every mode still runs for some model and every model on several
 * threaded modes, at about 1/s of the runs; s may not exceed the models' count. */
static bool mode_selected(size_t m, size_t k) {
  const char *v = getenv("NG_TEST_FETCH_STRIDE");
  const long s = v ? strtol(v, NULL, 10) : 1;
  if (s < 1 || s > (long)NG_ARRAY_LEN(MODELS)) {
    fprintf(stderr, "NG_TEST_FETCH_STRIDE=%s: expected 1 to %zu\n", v, NG_ARRAY_LEN(MODELS));
    exit(2);
  }
  return k % (size_t)s == m % (size_t)s;
}

/* Every mode of MODES against the first, for model MODELS[m]. */
static void modes_bit_identical(size_t m) {
  ng_test_fetch_result ref, r;
  ng_test_fetch_run run = run_of(&MODELS[m], &MODES[0], 0.3);
  if (!ng_test_fetch_train(cora, &run, &ref))
    return;
  EXPECT_TRUE(ref.fetch.hot_rows > 0 && ref.fetch.cold_rows > 0);
  EXPECT_TRUE(isfinite(ref.loss[1]) && ref.loss[1] > 0.0);
  for (size_t k = 1; k < NG_ARRAY_LEN(MODES); k++) {
    if (!mode_selected(m, k))
      continue;
    run = run_of(&MODELS[m], &MODES[k], 0.3);
    if (!ng_test_fetch_train(cora, &run, &r))
      continue;
    char what[192];
    describe(what, sizeof what, &MODELS[m], &MODES[k]);
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
    /* Every strategy reads the same rows from each tier. */
    EXPECT_EQ_I(r.fetch.hot_rows, ref.fetch.hot_rows);
    EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
    /* Who read the cold rows: the CPU (partial, batch) or the device (zcopy). */
    if (MODES[k].mode == NG_MODE_ZEROCOPY)
      EXPECT_TRUE(r.fetch.zcopy_bytes > 0 && r.fetch.cpu_cold_bytes == 0);
    if (MODES[k].mode == NG_MODE_PARTIAL || MODES[k].mode == NG_MODE_BASELINE)
      EXPECT_TRUE(r.fetch.cpu_cold_bytes > 0 && r.fetch.zcopy_bytes == 0);
    /* PARTIAL workers with the table readable by zero-copy leave the cold self rows to
     * the device: the same rows as the reference (PARTIAL, all read by the CPU), split. */
    if (ng_test_fetch_self_zcopy(&run))
      ng_test_fetch_expect_self_split(&run, &r, &ref);
    if (MODES[k].mode == NG_MODE_HYBRID_STATIC) {
      EXPECT_EQ_I(r.workers[0], MODES[k].partial_workers);
      EXPECT_EQ_I(r.workers[1], MODES[k].workers - MODES[k].partial_workers);
    }
    if (MODES[k].workers > 0)
      EXPECT_EQ_I(r.workers[0] + r.workers[1], MODES[k].workers);
    free(r.checkpoint);
  }
  free(ref.checkpoint);
}

/* With every row hot or every row cold, the input aggregation is one reduction in edge order
 * either way (merged with an empty state), so the bits agree; tiers in between only reorder
 * the additions, so they agree within rounding. */
static void test_tier_sizes(void) {
  const model_case *mc = &MODELS[0];
  const mode_case baseline = {NG_MODE_BASELINE, NG_FETCH_AUTO, 2, -1, 1, 0, 0, 0, 0};
  const mode_case partial = {NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0};
  const mode_case zerocopy = {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 1, 0, 0, 0, 0};
  ng_test_fetch_result all_hot, all_hot_z, all_cold, part;
  ng_test_fetch_run run = run_of(mc, &baseline, 1.0);
  if (!ng_test_fetch_train(cora, &run, &all_hot))
    return;
  /* Zero-copy with nothing cold: nothing registered, nothing to read. */
  run = run_of(mc, &zerocopy, 1.0);
  if (ng_test_fetch_train(cora, &run, &all_hot_z)) {
    EXPECT_TRUE(ng_test_fetch_same(&all_hot, &all_hot_z, "all hot, baseline vs zerocopy"));
    free(all_hot_z.checkpoint);
  }
  run = run_of(mc, &partial, 0.0);
  if (!ng_test_fetch_train(cora, &run, &all_cold))
    return;
  run = run_of(mc, &zerocopy, 0.5);
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
  /* Every row is an input-layer edge's or a destination's self row; the input layer's
   * destinations hold each epoch's 140 targets; its cold edges follow the tiers. */
  const int64_t dst = all_hot.fetch.destinations;
  EXPECT_TRUE(dst >= 2 * 140);
  EXPECT_EQ_I(all_cold.fetch.destinations, dst);
  EXPECT_EQ_I(part.fetch.destinations, dst);
  EXPECT_EQ_I(all_hot.fetch.cold_edges, 0);
  EXPECT_EQ_I(all_cold.fetch.cold_edges, total - dst);
  EXPECT_TRUE(part.fetch.cold_edges > 0 && part.fetch.cold_edges < total - dst);
  for (int e = 0; e < NG_TEST_FETCH_EPOCHS; e++)
    EXPECT_NEAR(part.loss[e], all_hot.loss[e], 1e-4 * fabs(all_hot.loss[e]));
  /* The CPU backend copies nothing to a device. */
  EXPECT_EQ_I(part.fetch.h2d_bytes, 0);
  free(all_hot.checkpoint);
  free(all_cold.checkpoint);
  free(part.checkpoint);
}

/* bf16 feature storage (NG_PRECISION_BF16), which every row read converts to fp32 exactly:
 * within bf16 every mode, worker count and thread count gives the same bits (each aggregator,
 * with and without input dropout: rows staged as bf16, or converted and dropped on the host);
 * the row-normalised features are not bf16 values, so bf16 and fp32 differ; and the host reads
 * half the bytes of fp32's for the same rows. */
static void bf16_modes_bit_identical(size_t m) {
  ng_test_fetch_result ref, r, f32;
  ng_test_fetch_run run = run_of(&MODELS[m], &MODES[0], 0.3);
  if (MODELS[m].ag.user) { /* user aggregators read fp32 tables only: refused with the reason */
    ng_model_t um = NULL;
    EXPECT_OK(ng_model_create(&um, NG_MODEL_SAGE, 1433));
    ng_layer_opts l = NG_LAYER_OPTS_INIT;
    l.out_dim = 7;
    l.aggregator = MODELS[m].ag;
    EXPECT_OK(ng_model_add_layer(um, &l));
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.precision = NG_PRECISION_BF16;
    ng_trainer_t t = NULL;
    EXPECT_STATUS(ng_trainer_create(&t, cora, um, &o), NG_ERR_UNSUPPORTED);
    EXPECT_ERR_HAS("user-defined");
    ng_model_destroy(um);
    return;
  }
  if (!ng_test_fetch_train(cora, &run, &f32))
    return;
  run.precision = NG_PRECISION_BF16;
  if (!ng_test_fetch_train(cora, &run, &ref)) {
    free(f32.checkpoint);
    return;
  }
  EXPECT_TRUE(isfinite(ref.loss[1]) && ref.loss[1] > 0.0);
  EXPECT_TRUE(ref.checkpoint_len != f32.checkpoint_len ||
              memcmp(ref.checkpoint, f32.checkpoint, ref.checkpoint_len) != 0);
  EXPECT_EQ_I(ref.fetch.cold_rows, f32.fetch.cold_rows);
  EXPECT_EQ_I(2 * ref.fetch.cpu_cold_bytes, f32.fetch.cpu_cold_bytes);
  for (size_t k = 1; k < NG_ARRAY_LEN(MODES); k++) {
    if (!mode_selected(m, k))
      continue;
    run = run_of(&MODELS[m], &MODES[k], 0.3);
    run.precision = NG_PRECISION_BF16;
    if (!ng_test_fetch_train(cora, &run, &r))
      continue;
    char what[224];
    describe(what, sizeof what, &MODELS[m], &MODES[k]);
    strncat(what, ", bf16", sizeof what - strlen(what) - 1);
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
    EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
    if (MODES[k].mode == NG_MODE_ZEROCOPY) /* each unique cold row once, 2 bytes a value */
      EXPECT_TRUE(r.fetch.zcopy_bytes > 0 && r.fetch.zcopy_bytes % (2 * 1433) == 0);
    if (MODES[k].mode == NG_MODE_PARTIAL)
      EXPECT_EQ_I(r.fetch.cpu_cold_bytes, ref.fetch.cpu_cold_bytes);
    free(r.checkpoint);
  }
  free(ref.checkpoint);
  free(f32.checkpoint);
}

/* bf16 over the extreme tiers and the cpu mode (every row read in place by the CPU backend):
 * one reduction in edge order each, so the same bits, as in fp32 (test_tier_sizes). */
static void test_bf16_tiers(void) {
  const model_case *mc = &MODELS[0];
  const mode_case cases[] = {
      {NG_MODE_BASELINE, NG_FETCH_AUTO, 2, -1, 1, 0, 0, 0, 0},
      {NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
      {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 1, 0, 0, 0, 0},
      {NG_MODE_CPU, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
  };
  const double ratio[] = {1.0, 0.0, 0.0, -1.0};
  ng_test_fetch_result ref, r;
  ng_test_fetch_run run = run_of(mc, &cases[0], ratio[0]);
  run.precision = NG_PRECISION_BF16;
  if (!ng_test_fetch_train(cora, &run, &ref))
    return;
  for (size_t k = 1; k < NG_ARRAY_LEN(cases); k++) {
    run = run_of(mc, &cases[k], ratio[k]);
    run.precision = NG_PRECISION_BF16;
    if (!ng_test_fetch_train(cora, &run, &r))
      continue;
    char what[224];
    describe(what, sizeof what, mc, &cases[k]);
    strncat(what, ", bf16, extreme tiers", sizeof what - strlen(what) - 1);
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
    free(r.checkpoint);
  }
  free(ref.checkpoint);
}

/* Raw-row models (GAT) in bf16: the identity input block reads every row through the bf16
 * table (scatter_rows_bf16 from the hot tier, staged bf16 rows or zero-copy); the same bits in
 * every raw-row mode. */
static void test_bf16_raw_rows(void) {
  const model_case gat = {"gat, dropout 0.5", NG_MODEL_GAT, NG_AGGREGATOR_SUM, 0.5f};
  const model_case gat0 = {"gat", NG_MODEL_GAT, NG_AGGREGATOR_SUM, 0.0f};
  const mode_case modes[] = {
      {NG_MODE_BASELINE, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
      {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 1, 0, 0, 0, 0},
      {NG_MODE_HYBRID, NG_FETCH_BATCH, 3, -1, 1, 0.01, 0, 0, 0},
  };
  const model_case *mcs[] = {&gat, &gat0};
  for (size_t i = 0; i < NG_ARRAY_LEN(mcs); i++) {
    ng_test_fetch_result ref, r;
    ng_test_fetch_run run = run_of(mcs[i], &modes[0], 0.3);
    run.precision = NG_PRECISION_BF16;
    if (!ng_test_fetch_train(cora, &run, &ref))
      continue;
    EXPECT_TRUE(isfinite(ref.loss[1]) && ref.loss[1] > 0.0);
    for (size_t k = 1; k < NG_ARRAY_LEN(modes); k++) {
      run = run_of(mcs[i], &modes[k], 0.3);
      run.precision = NG_PRECISION_BF16;
      if (!ng_test_fetch_train(cora, &run, &r))
        continue;
      char what[224];
      describe(what, sizeof what, mcs[i], &modes[k]);
      strncat(what, ", bf16", sizeof what - strlen(what) - 1);
      EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
      free(r.checkpoint);
    }
    free(ref.checkpoint);
  }
}

/* Without normalisation the bf16 table is features.bf16.npy, written beside features.npy on
 * first use and mapped afterwards. Cora's features are 0 and 1, which bf16 holds exactly, so
 * bf16 then gives fp32's bits, in every mode. */
static void test_bf16_file(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/features.bf16.npy", ng_test_path("cora"));
  remove(path);
  const mode_case cases[] = {
      {NG_MODE_PARTIAL, NG_FETCH_AUTO, 2, -1, 1, 0, 0, 0, 0},
      {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 1, 0, 0, 0, 0},
      {NG_MODE_BASELINE, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
  };
  ng_test_fetch_result ref, r;
  ng_test_fetch_run run = run_of(&MODELS[0], &cases[0], 0.3);
  run.raw_features = true;
  if (!ng_test_fetch_train(cora, &run, &ref))
    return;
  for (size_t k = 0; k < NG_ARRAY_LEN(cases); k++) {
    run = run_of(&MODELS[0], &cases[k], 0.3);
    run.raw_features = true;
    run.precision = NG_PRECISION_BF16;
    if (!ng_test_fetch_train(cora, &run, &r))
      continue;
    FILE *f = fopen(path, "rb");
    EXPECT_TRUE(f != NULL);
    if (f) {
      fseek(f, 0, SEEK_END);
      EXPECT_TRUE(ftell(f) >= 2708L * 1433L * 2L && ftell(f) < 2708L * 1433L * 2L + 4096L);
      fclose(f);
    }
    char what[224];
    describe(what, sizeof what, &MODELS[0], &cases[k]);
    strncat(what, ", bf16 from features.bf16.npy vs fp32", sizeof what - strlen(what) - 1);
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
    free(r.checkpoint);
  }
  /* Written once: later runs map it (its time stays); a newer features.npy gets a new one. */
  struct stat before, after;
  EXPECT_TRUE(stat(path, &before) == 0);
  char src[4096];
  snprintf(src, sizeof src, "%s/features.npy", ng_test_path("cora"));
  run = run_of(&MODELS[0], &cases[0], 0.3);
  run.raw_features = true;
  run.precision = NG_PRECISION_BF16;
  if (ng_test_fetch_train(cora, &run, &r)) {
    EXPECT_TRUE(stat(path, &after) == 0);
    EXPECT_TRUE(after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
                after.st_mtim.tv_nsec == before.st_mtim.tv_nsec && after.st_ino == before.st_ino);
    free(r.checkpoint);
  }
  struct timespec later[2] = {{before.st_mtim.tv_sec + 60, 0}, {before.st_mtim.tv_sec + 60, 0}};
  EXPECT_TRUE(utimensat(AT_FDCWD, src, later, 0) == 0);
  if (ng_test_fetch_train(cora, &run, &r)) {
    EXPECT_TRUE(stat(path, &after) == 0);
    EXPECT_TRUE(after.st_ino != before.st_ino); /* renamed into place: a new file */
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, "bf16 after features.npy changed"));
    free(r.checkpoint);
  }
  free(ref.checkpoint);
}

/* A bf16 row takes half the bytes: a hot tier of a given size holds twice the rows, and the
 * memory estimate counts half the feature table (and half the hot tier's bytes). */
static void test_bf16_sizes(void) {
  ng_model_t m = ng_test_cora_sage();
  int64_t hot[2] = {0, 0};
  ng_memory_estimate est[2];
  for (int k = 0; k < 2; k++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.mode = NG_MODE_BASELINE;
    o.workers = -1;
    o.cache_bytes = 1433 * 4 * 100; /* 100 fp32 rows */
    o.precision = k ? NG_PRECISION_BF16 : NG_PRECISION_FP32;
    est[k] = (ng_memory_estimate)NG_MEMORY_ESTIMATE_INIT;
    EXPECT_OK(ng_trainer_estimate_memory(&est[k], cora, m, &o));
    ng_trainer_t t = NULL;
    EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
    hot[k] = t ? ng_trainer_hot_rows(t) : -1;
    ng_trainer_destroy(t);
  }
  EXPECT_EQ_I(hot[0], 100);
  EXPECT_EQ_I(hot[1], 200);
  EXPECT_EQ_I(est[0].hot_rows, 100);
  EXPECT_EQ_I(est[1].hot_rows, 200);
  EXPECT_EQ_I(est[1].features * 2, est[0].features);
  ng_model_destroy(m);
}

/* GAT's input layer needs raw rows (ng__model_raw_input): every raw-row strategy (batched,
 * zero-copy; hybrid modes run them on every worker) gives the same bits, whatever the tiers,
 * with no cold edge reduced anywhere; mode partial is refused with the reason. */
static void raw_rows_case(const model_case *mc);

static void test_gat_raw_rows(void) {
  const model_case gat = {"gat, dropout 0.5", NG_MODEL_GAT, NG_AGGREGATOR_SUM, 0.5f};
  const model_case pool = {"sage-pool, dropout 0.5", NG_MODEL_SAGE_POOL, NG_AGGREGATOR_MAX, 0.5f};
  raw_rows_case(&gat);
  raw_rows_case(&pool);
}

static void raw_rows_case(const model_case *mc) {
  const model_case gat = *mc;
  static const mode_case modes[] = {
      {NG_MODE_BASELINE, NG_FETCH_AUTO, -1, -1, 2, 0, 0, 0, 0},
      {NG_MODE_BASELINE, NG_FETCH_AUTO, 2, -1, 1, 0, 0, 0, 0},
      {NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, -1, 1, 0, 0, 0, 0},
      {NG_MODE_HYBRID_STATIC, NG_FETCH_ZCOPY, 2, 1, 1, 0, 0, 0, 0},
      {NG_MODE_HYBRID, NG_FETCH_BATCH, 3, -1, 1, 0.01, 0, 0, 0},
  };
  ng_test_fetch_result ref, r;
  ng_test_fetch_run run = run_of(&gat, &modes[0], 0.3);
  if (!ng_test_fetch_train(cora, &run, &ref))
    return;
  EXPECT_TRUE(isfinite(ref.loss[1]) && ref.loss[1] > 0.0 && ref.loss[1] < ref.loss[0]);
  EXPECT_TRUE(ref.fetch.hot_rows > 0 && ref.fetch.cold_rows > 0);
  EXPECT_EQ_I(ref.fetch.cold_edges, 0); /* raw rows only: nothing to reduce */
  for (size_t k = 1; k < NG_ARRAY_LEN(modes); k++) {
    run = run_of(&gat, &modes[k], 0.3);
    if (!ng_test_fetch_train(cora, &run, &r))
      continue;
    char what[192];
    describe(what, sizeof what, &gat, &modes[k]);
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
    EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
    EXPECT_EQ_I(r.fetch.cold_edges, 0);
    if (modes[k].workers > 0) /* no worker aggregates partially */
      EXPECT_EQ_I(r.workers[0], 0);
    free(r.checkpoint);
  }
  /* The tiers only decide where rows come from: all hot gives the same bits. */
  run = run_of(&gat, &modes[0], 1.0);
  if (ng_test_fetch_train(cora, &run, &r)) {
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, "raw rows: 30% hot vs all hot"));
    EXPECT_EQ_I(r.fetch.cold_rows, 0);
    free(r.checkpoint);
  }
  free(ref.checkpoint);
  /* Mode partial cannot serve it. */
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, mc->kind, 1433));
  ng_layer_opts l = NG_LAYER_OPTS_INIT;
  l.out_dim = 7;
  l.heads = 2;
  EXPECT_OK(ng_model_add_layer(m, &l));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.mode = NG_MODE_PARTIAL;
  o.cache_ratio = 0.3;
  ng_trainer_t t = NULL;
  EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("cannot be partially aggregated");
  EXPECT_TRUE(t == NULL);
  ng_model_destroy(m);
}

/* One case per model of MODELS (in its order), for fp32 and bf16, so that tests/CMakeLists.txt
 * can spread the suite's longest part over several ctest entries. */
#define MODEL_CASES(X)                                                                             \
  X(0, sage_mean) X(1, gcn) X(2, sage_max) X(3, sage_min) X(4, sage_sum) X(5, gin) X(6, sage_user)
#define COUNT_MODEL(i, id) +1
_Static_assert(NG_ARRAY_LEN(MODELS) == 0 MODEL_CASES(COUNT_MODEL),
               "every model of MODELS needs its case in MODEL_CASES");
#define DEFINE_MODEL_CASES(i, id)                                                                  \
  static void test_modes_##id(void) {                                                              \
    modes_bit_identical(i);                                                                        \
  }                                                                                                \
  static void test_bf16_modes_##id(void) {                                                         \
    bf16_modes_bit_identical(i);                                                                   \
  }
MODEL_CASES(DEFINE_MODEL_CASES)

static void test_options(void) {
  ng_fetch f = NG_FETCH_BATCH;
  for (int i = 0; i <= NG_FETCH_AUTO; i++) {
    EXPECT_OK(ng_fetch_parse(&f, ng_fetch_name((ng_fetch)i)));
    EXPECT_EQ_I(f, i);
  }
  EXPECT_STATUS(ng_fetch_parse(&f, "dma"), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(ng_last_error(), "partial, batch, zcopy or auto") != NULL);
  EXPECT_TRUE(strcmp(ng_fetch_name((ng_fetch)9), "?") == 0);
  ng_mode md = NG_MODE_CPU;
  for (int i = 0; i <= NG_MODE_HYBRID; i++) {
    EXPECT_OK(ng_mode_parse(&md, ng_mode_name((ng_mode)i)));
    EXPECT_EQ_I(md, i);
  }
  EXPECT_STATUS(ng_mode_parse(&md, "fast"), NG_ERR_INVALID_ARG);

  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  ng_layer_opts l = NG_LAYER_OPTS_INIT;
  l.out_dim = 7;
  l.fanout = 5;
  EXPECT_OK(ng_model_add_layer(m, &l));
  struct {
    double ratio;
    int64_t bytes;
    int mode, transfer, workers;
    ng_status want;
    int64_t hot;
  } cases[] = {
      {1.5, 0, NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, NG_ERR_INVALID_ARG, 0},
      {-1.0, -5, NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, NG_ERR_INVALID_ARG, 0},
      {-1.0, 0, 17, NG_FETCH_AUTO, -1, NG_ERR_INVALID_ARG, 0},
      {-1.0, 0, NG_MODE_HYBRID, NG_FETCH_PARTIAL, 2, NG_ERR_INVALID_ARG, 0}, /* not a TRANSFER */
      {-1.0, 0, NG_MODE_HYBRID, NG_FETCH_AUTO, -1, NG_ERR_INVALID_ARG, 0},   /* needs workers */
      {-1.0, 0, NG_MODE_BASELINE, NG_FETCH_AUTO, -2, NG_ERR_INVALID_ARG, 0},
      {-1.0, 0, NG_MODE_BASELINE, NG_FETCH_AUTO, -1, NG_OK, 2708}, /* CPU default: every row */
      {0.5, 0, NG_MODE_CPU, NG_FETCH_AUTO, -1, NG_OK, 2708},       /* cpu mode: every row hot */
      {-1.0, 100 * 1433 * 4 + 3, NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 1, NG_OK, 100}, /* whole rows */
      {0.25, 0, NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, NG_OK, 677},
      {-1.0, (int64_t)1 << 40, NG_MODE_PARTIAL, NG_FETCH_AUTO, -1, NG_OK, 2708}, /* clamped */
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.cache_ratio = cases[i].ratio;
    o.cache_bytes = cases[i].bytes;
    o.mode = (ng_mode)cases[i].mode;
    o.transfer = (ng_fetch)cases[i].transfer;
    o.workers = cases[i].workers;
    ng_trainer_t t = NULL;
    EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), cases[i].want);
    if (cases[i].want == NG_OK)
      EXPECT_EQ_I(ng_trainer_hot_rows(t), cases[i].hot);
    else
      EXPECT_TRUE(t == NULL && strlen(ng_last_error()) > 0);
    ng_trainer_destroy(t);
  }
  /* The pipeline's depth: 1 to 3 packages ahead. */
  for (int la = 0; la <= 4; la += 4) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.lookahead = la;
    ng_trainer_t t = NULL;
    EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("lookahead in [1, 3]");
    EXPECT_TRUE(t == NULL);
  }
  /* The ready window: 0 (the default) to NG_READY_WINDOW_MAX iterations. */
  const int windows[] = {-1, NG_READY_WINDOW_MAX + 1};
  for (size_t k = 0; k < NG_ARRAY_LEN(windows); k++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.ready_window = windows[k];
    ng_trainer_t t = NULL;
    EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("ready_window in [0, 1024]");
    EXPECT_TRUE(t == NULL);
  }
  /* A caller built against an older header passes a smaller struct: the fields it lacks keep
   * their defaults, whatever lies beyond its size. A size that holds not even itself is
   * refused. */
  {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.ready_window = -5; /* beyond the older struct: never read */
    o.size = offsetof(ng_train_opts, ready_window);
    ng_trainer_t t = NULL;
    EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
    ng_trainer_destroy(t);
    o.size = 0;
    EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("NG_TRAIN_OPTS_INIT");
    EXPECT_TRUE(t == NULL);
  }
  ng_model_destroy(m);
}

/* Where the host keeps the table: the dataset's mapping or a copy in huge pages (AUTO reads the
 * mapping in place, never copying it: issue 20's memory bound; a normalised table is a copy
 * already). Both give the same bits. */
static void test_features_memory(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  ng_layer_opts l = NG_LAYER_OPTS_INIT;
  l.out_dim = 7;
  l.fanout = 5;
  l.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l));
  const struct {
    ng_features_memory fm;
    ng_normalize norm;
    int copied;
  } cases[] = {
      {NG_FEATURES_MAPPED, NG_NORMALIZE_NONE, 0},
      {NG_FEATURES_COPY, NG_NORMALIZE_NONE, 1},
      {NG_FEATURES_AUTO, NG_NORMALIZE_NONE, 0},
      {NG_FEATURES_MAPPED, NG_NORMALIZE_ROW, 1},
  };
  uint8_t *ref = NULL;
  size_t ref_len = 0;
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.features_memory = cases[i].fm;
    o.normalize = cases[i].norm;
    o.mode = NG_MODE_PARTIAL;
    o.workers = 2;
    o.cache_ratio = 0.3;
    o.batch = 32;
    ng_trainer_t t = NULL;
    EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
    if (!t)
      continue;
    EXPECT_EQ_I(ng_trainer_features_copied(t), cases[i].copied);
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    const char *path = ng_test_path("features-memory.safetensors");
    EXPECT_OK(ng_trainer_save(t, path));
    size_t len = 0;
    uint8_t *b = ng_test_read_file(path, &len);
    if (cases[i].norm == NG_NORMALIZE_NONE) {
      if (!ref) {
        ref = b;
        ref_len = len;
        b = NULL;
      } else {
        EXPECT_TRUE(b && len == ref_len && memcmp(b, ref, len) == 0);
      }
    }
    free(b);
    ng_trainer_destroy(t);
  }
  free(ref);
  EXPECT_EQ_I(ng_trainer_features_copied(NULL), -1);
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.features_memory = (ng_features_memory)3;
  ng_trainer_t t = NULL;
  EXPECT_STATUS(ng_trainer_create(&t, cora, m, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("features_memory");
  ng_model_destroy(m);
}

/* ---- the input layer over a row overlay (serve/engine_forward.c reads snapshots so) ---- */

enum { OV_NODES = 3000, OV_DIM = 16, OV_TARGETS = 160, OV_EVERY = 7 };

/* Every OV_EVERY-th node's row is the overlay's. */
typedef struct {
  const float *rows; /* [OV_NODES, OV_DIM]: the overlay's rows, read for overlaid nodes only */
} ov_ctx;

static const float *ov_row(const void *ctx, int64_t v) {
  const ov_ctx *o = ctx;
  return v % OV_EVERY == 3 ? o->rows + v * OV_DIM : NULL;
}

/* The input layer's aggregation and self rows of `mb` through `st` (CPU backend: the package is
 * its own device view); false when the package was refused. */
static bool ov_input(ng_store *st, const ng_fetch_cfg *cfg, const ng_minibatch *mb, float *agg,
                     float *self, ng_fetch_plan *plan) {
  ng_fetch_scratch sc;
  memset(&sc, 0, sizeof sc);
  ng_fetch_pkg pkg;
  bool ok = ng__fetch_plan(plan, cfg, mb, 0.0f, &sc) == NG_OK;
  void *buf = ok ? aligned_alloc(64, (plan->bytes + 63) & ~(size_t)63) : NULL;
  ok = buf && ng__fetch_fill(&pkg, plan, cfg, mb, 0, &sc, buf) == NG_OK;
  const float *a = NULL, *s = NULL;
  if (ok)
    EXPECT_OK(ng__store_input(st, &cfg->ag, &pkg, 0.0f, 0, -1, &a, &s));
  if (a && s) {
    const size_t bytes = (size_t)pkg.n_dst * OV_DIM * sizeof(float);
    memcpy(agg, a, bytes);
    memcpy(self, s, bytes);
  }
  free(buf);
  ng__fetch_scratch_free(&sc);
  return ok;
}

/* The overlay's rows are read wherever the table would be, in the host's staging and in its
 * partial reduction, and an overlaid row below H is cold (the hot tier holds the table's row):
 * every strategy and hot-tier size gives the bits of a plain table with the overlay's rows
 * written in. The rows are small integers, so that sums are exact and moving a row from the hot
 * to the cold part (which reorders the additions) keeps the bits. */
static void test_overlay_rows(void) {
  ng_backend *be = NULL;
  EXPECT_OK(ng__backend_cpu_create(&be, 2));
  if (!be)
    return;
  ng_csr g;
  ng_test_random_graph(&g, OV_NODES, 19);
  ng_rng r;
  ng_rng_seed(&r, 23);
  const size_t n = (size_t)OV_NODES * OV_DIM;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *xr = malloc(n * sizeof *xr);
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)(int)(ng_rng_below(&r, 9)) - 4.0f;
    y[i] = (float)(int)(ng_rng_below(&r, 9)) - 4.0f + 0.5f; /* never equal to x's */
  }
  const ov_ctx ctx = {y};
  for (int64_t v = 0; v < OV_NODES; v++) {
    const float *o = ov_row(&ctx, v);
    memcpy(xr + v * OV_DIM, o ? o : x + v * OV_DIM, OV_DIM * sizeof(float));
  }
  int64_t targets[OV_TARGETS];
  ng_test_pick_targets(targets, OV_TARGETS, OV_NODES, 29);
  ng_sample_arena *arena = NULL;
  EXPECT_OK(ng__sample_arena_create(&arena));
  const struct {
    const char *name;
    ng_aggr ag;
  } aggs[] = {
      {"mean", {.reduce = NG_REDUCE_SUM, .mean = true}},
      {"sum", {.reduce = NG_REDUCE_SUM}},
      {"max", {.reduce = NG_REDUCE_MAX}},
  };
  const ng_fetch modes[] = {NG_FETCH_BATCH, NG_FETCH_PARTIAL};
  const int64_t hots[] = {0, 1000, OV_NODES};
  const size_t out_bytes = (size_t)OV_TARGETS * OV_DIM * sizeof(float);
  float *ref_a = malloc(out_bytes), *ref_s = malloc(out_bytes);
  float *got_a = malloc(out_bytes), *got_s = malloc(out_bytes);
  float *old_a = malloc(out_bytes), *old_s = malloc(out_bytes);
  ng_sampler_cfg scfg = {.graph = &g, .n_layers = 1, .fanout = {8}};
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, arena, &scfg, targets, OV_TARGETS, 31));
  /* What the overlay should show: the local nodes it replaces, and the cold ones. */
  int64_t overlaid = 0;
  for (int32_t s = 0; s < mb.blocks[0].n_src; s++)
    overlaid += ov_row(&ctx, mb.node_ids[s]) != NULL;
  EXPECT_TRUE(overlaid > 0);
  int compared = 0;
  for (size_t a = 0; a < NG_ARRAY_LEN(aggs); a++)
    for (size_t h = 0; h < NG_ARRAY_LEN(hots); h++) {
      const int64_t H = hots[h];
      ng_store plain, over;
      EXPECT_OK(ng__store_open(&plain, be, xr, OV_NODES, OV_DIM, H, NG_FETCH_BATCH, false));
      EXPECT_OK(ng__store_open(&over, be, x, OV_NODES, OV_DIM, H, NG_FETCH_BATCH, false));
      int64_t cold = 0;
      for (int32_t s = 0; s < mb.blocks[0].n_src; s++)
        cold += mb.node_ids[s] >= H || ov_row(&ctx, mb.node_ids[s]) != NULL;
      for (size_t m = 0; m < NG_ARRAY_LEN(modes); m++) {
        ng_fetch_cfg cfg = {.mode = modes[m],
                            .hot = H,
                            .features = xr,
                            .nodes = OV_NODES,
                            .dim = OV_DIM,
                            .ag = aggs[a].ag,
                            .threads = 2,
                            .kernels = ng__cpu_kernels(ng__cpu_isa_best())};
        ng_fetch_plan plan;
        EXPECT_TRUE(ov_input(&plain, &cfg, &mb, ref_a, ref_s, &plan));
        EXPECT_EQ_I(plan.c.overlaid, 0);
        /* The table under the overlay alone reads other rows: the comparison can fail. */
        cfg.features = x;
        EXPECT_TRUE(ov_input(&over, &cfg, &mb, old_a, old_s, &plan));
        EXPECT_TRUE(memcmp(old_a, ref_a, out_bytes) != 0);
        cfg.overlay = (ng_row_overlay){ov_row, &ctx, NULL};
        memset(got_a, 0xff, out_bytes);
        memset(got_s, 0xff, out_bytes);
        EXPECT_TRUE(ov_input(&over, &cfg, &mb, got_a, got_s, &plan));
        EXPECT_EQ_I(plan.c.overlaid, overlaid);
        EXPECT_EQ_I(plan.c.cold_nodes, cold);
        if (memcmp(got_a, ref_a, out_bytes) != 0 || memcmp(got_s, ref_s, out_bytes) != 0)
          ng_test_fail(__FILE__, __LINE__,
                       "%s, %s, hot %lld: the input layer over the overlay differs from the "
                       "table with its rows written in",
                       aggs[a].name, ng_fetch_name(modes[m]), (long long)H);
        compared++;
      }
      ng__store_close(&plain);
      ng__store_close(&over);
    }
  EXPECT_EQ_I(compared, 3 * 3 * 2);
  /* The device cannot read an overlaid row from host memory (ZCOPY), and input dropout is not
   * keyed over the rows an overlay gathers: both are refused, naming why. */
  ng_fetch_cfg zc = {.mode = NG_FETCH_ZCOPY,
                     .hot = 0,
                     .features = x,
                     .nodes = OV_NODES,
                     .dim = OV_DIM,
                     .overlay = {.row = ov_row, .ctx = &ctx},
                     .ag = aggs[1].ag,
                     .threads = 1,
                     .kernels = ng__cpu_kernels(ng__cpu_isa_best())};
  ng_fetch_scratch sc;
  memset(&sc, 0, sizeof sc);
  ng_fetch_plan plan;
  EXPECT_OK(ng__fetch_plan(&plan, &zc, &mb, 0.0f, &sc));
  EXPECT_EQ_I(plan.c.overlaid, overlaid);
  void *buf = aligned_alloc(64, (plan.bytes + 63) & ~(size_t)63);
  ng_fetch_pkg pkg;
  EXPECT_STATUS(ng__fetch_fill(&pkg, &plan, &zc, &mb, 0, &sc, buf), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("overlay");
  zc.mode = NG_FETCH_PARTIAL;
  EXPECT_STATUS(ng__fetch_plan(&plan, &zc, &mb, 0.5f, &sc), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("dropout");
  free(buf);
  ng__fetch_scratch_free(&sc);
  free(ref_a);
  free(ref_s);
  free(got_a);
  free(got_s);
  free(old_a);
  free(old_s);
  ng__sample_arena_destroy(arena);
  free(x);
  free(y);
  free(xr);
  ng__csr_free(&g);
  ng__backend_destroy(be);
}

int main(void) {
  cora = ng_test_fetch_cora();
  RUN_TEST(test_options);
  RUN_TEST(test_features_memory);
  RUN_TEST(test_tier_sizes);
  RUN_TEST(test_overlay_rows);
#define RUN_MODES(i, id) RUN_TEST(test_modes_##id);
  MODEL_CASES(RUN_MODES)
  RUN_TEST(test_gat_raw_rows);
#define RUN_BF16_MODES(i, id) RUN_TEST(test_bf16_modes_##id);
  MODEL_CASES(RUN_BF16_MODES)
  RUN_TEST(test_bf16_tiers);
  RUN_TEST(test_bf16_raw_rows);
  RUN_TEST(test_bf16_file);
  RUN_TEST(test_bf16_sizes);
  ng_dataset_close(cora);
  return ng_test_summary();
}
