/* Link prediction on the GPU (--device cuda, runtime/link.c): every cold-row path gives the same
 * loss bits and validation metrics, a run repeats bit for bit, and the losses follow the CPU's
 * within fp32 tolerance. The link trainer runs in the node trainer's pipeline (worker threads,
 * packages copied up to three iterations ahead, each in its own buffer slot); on the CPU
 * backend copies and ops run at once, so only a device shows an ordering that lets the ops read
 * a package or its zero-copy rows before they have landed, or a worker rewrite a staging slot
 * whose copy is in flight (the zero-copy and hybrid modes then gave other losses than
 * baseline). Exits 77 (skipped) without CUDA or a GPU. */
#include "ng_test.h"
#include "ng_test_cora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef NG_HAVE_CUDA
int main(void) {
  printf("skipped: this build has no CUDA backend\n");
  return 77;
}
#else
#include "ng_test_gpu.h"

enum { EPOCHS = 2 };

static ng_dataset_t cora;

/* A copy of the converted Cora at `name` with its edges split (the split writes into it). */
static const char *split_copy(const char *name) {
  static char dst[4096];
  snprintf(dst, sizeof dst, "%s", ng_test_path(name));
  char cmd[16384];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, ng_test_path("cora"), dst);
  EXPECT_TRUE(system(cmd) == 0);
  ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
  so.seed = 4;
  EXPECT_OK(ng_dataset_split_edges(NULL, dst, &so));
  return dst;
}

/* The bug report's model: GraphSAGE-mean 1433 -> 32 (ReLU, fanout 5) -> 16 (fanout 5). */
static ng_model_t link_model(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = NG_AGGREGATOR_MEAN;
  l0.fanout = l1.fanout = 5;
  l0.out_dim = 32;
  l1.out_dim = 16;
  l0.activation = NG_ACT_RELU;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = 0.2f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

typedef struct {
  double loss[EPOCHS];
  ng_link_metrics val;
} run_result;

/* EPOCHS epochs on `device` in `mode` (with the TRANSFER strategy `transfer`), and the
 * validation metrics after them. */
static run_result train_depth(ng_dataset_t ds, ng_model_t m, const ng_link_opts *lo,
                              const char *device, ng_mode mode, ng_fetch transfer, int workers,
                              int lookahead) {
  run_result r;
  memset(&r, 0, sizeof r);
  r.val = (ng_link_metrics)NG_LINK_METRICS_INIT;
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.device = device;
  o.mode = mode;
  o.transfer = transfer;
  o.cache_ratio = 0.2; /* four fifths of the rows cold: every path reads some */
  o.batch = 1024;
  o.seed = 4;
  if (workers != 0)
    o.workers = workers;
  if (lookahead > 0)
    o.lookahead = lookahead;
  ng_link_trainer_t t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, lo));
  for (int e = 0; t && e < EPOCHS; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_link_trainer_epoch(&s, t));
    r.loss[e] = s.loss;
    printf("    %s %s/%s epoch %d: loss %a (%.6f), %.1f it/s\n", device, ng_mode_name(mode),
           ng_fetch_name(transfer), e + 1, s.loss, s.loss, s.it_per_s);
  }
  if (t)
    EXPECT_OK(ng_link_trainer_evaluate(&r.val, t, NG_SPLIT_VAL));
  printf("    %s %s/%s: val auc %.6f mrr %.6f\n", device, ng_mode_name(mode),
         ng_fetch_name(transfer), r.val.auc, r.val.mrr);
  ng_link_trainer_destroy(t);
  return r;
}

/* The same with the default workers and lookahead. */
static run_result train(ng_dataset_t ds, ng_model_t m, const ng_link_opts *lo, const char *device,
                        ng_mode mode, ng_fetch transfer) {
  return train_depth(ds, m, lo, device, mode, transfer, 0, 0);
}

static void expect_same(const run_result *a, const run_result *b) {
  EXPECT_TRUE(memcmp(a->loss, b->loss, sizeof a->loss) == 0);
  EXPECT_TRUE(memcmp(&a->val.auc, &b->val.auc, sizeof a->val.auc) == 0);
  EXPECT_TRUE(memcmp(&a->val.ap, &b->val.ap, sizeof a->val.ap) == 0);
  EXPECT_TRUE(memcmp(&a->val.mrr, &b->val.mrr, sizeof a->val.mrr) == 0);
}

/* Every mode on cuda against baseline, bit for bit: the dot decoder, and the MLP decoder with
 * degree negatives and self pairs; baseline repeats, and follows the CPU within fp32 rounding. */
static void test_modes_on_gpu(void) {
  const char *dir = split_copy("cora_link_gpu");
  ng_dataset_t ds = ng_test_open_ok(dir);
  ng_model_t m = link_model();
  static const struct {
    ng_mode mode;
    ng_fetch transfer;
  } runs[] = {
      {NG_MODE_ZEROCOPY, NG_FETCH_AUTO},      {NG_MODE_PARTIAL, NG_FETCH_AUTO},
      {NG_MODE_HYBRID, NG_FETCH_AUTO},        {NG_MODE_HYBRID, NG_FETCH_BATCH},
      {NG_MODE_HYBRID_STATIC, NG_FETCH_AUTO}, {NG_MODE_AUTO, NG_FETCH_AUTO},
  };
  for (int variant = 0; ds && variant < 2; variant++) {
    ng_link_opts lo = NG_LINK_OPTS_INIT;
    if (variant == 1) {
      lo.decoder = NG_LINK_DECODER_MLP;
      lo.neg = NG_LINK_NEG_DEGREE;
      lo.neg_per_pos = 2;
      lo.mlp_hidden = 8;
      lo.self_pairs = 1;
    }
    printf("  variant %d (%s decoder)\n", variant, variant ? "mlp" : "dot");
    const run_result ref = train(ds, m, &lo, "cuda", NG_MODE_BASELINE, NG_FETCH_AUTO);
    EXPECT_TRUE(isfinite(ref.loss[EPOCHS - 1]) && ref.loss[EPOCHS - 1] > 0.0);
    for (size_t i = 0; i < NG_TEST_LEN(runs); i++) {
      if (variant == 1 && runs[i].mode != NG_MODE_ZEROCOPY && runs[i].mode != NG_MODE_HYBRID)
        continue;
      const run_result r = train(ds, m, &lo, "cuda", runs[i].mode, runs[i].transfer);
      expect_same(&r, &ref);
    }
    /* Several workers and three packages copied ahead of the device, each in its own slot:
     * the deepest ordering, and every buffer slot in use. */
    const run_result deep = train_depth(ds, m, &lo, "cuda", NG_MODE_HYBRID, NG_FETCH_AUTO, 4, 3);
    expect_same(&deep, &ref);
    if (variant == 1)
      continue;
    const run_result again = train(ds, m, &lo, "cuda", NG_MODE_BASELINE, NG_FETCH_AUTO);
    expect_same(&again, &ref);
    /* The same samples, negatives and dropout masks on the CPU: the losses differ only by fp32
     * rounding (GEMM order) over a few steps. */
    const run_result cpu = train(ds, m, &lo, "cpu", NG_MODE_AUTO, NG_FETCH_AUTO);
    for (int e = 0; e < EPOCHS; e++)
      EXPECT_NEAR(ref.loss[e], cpu.loss[e], 5e-3 * fabs(cpu.loss[e]));
    EXPECT_NEAR(ref.val.auc, cpu.val.auc, 5e-3);
  }
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* Evaluation on the GPU scores the dot decoder's pairs with pair_dot over uploaded embeddings
 * (runtime/link_eval.c): its metrics are the host scoring's bits on the same trainer
 * (NG_LINK_EVAL_DEVICE=0) with every row uploaded at once and in chunks of a few hundred rows
 * (NG_LINK_EVAL_DEVICE_BYTES), and a CPU trainer given the same weights gets the same metrics
 * within fp32 rounding of the embeddings (its inference's GEMMs are not cuBLAS's). */
static void test_eval_on_gpu(void) {
  const char *dir = split_copy("cora_link_gpu_eval");
  ng_dataset_t ds = ng_test_open_ok(dir);
  ng_model_t m = link_model();
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.device = "cuda";
  o.batch = 1024;
  o.seed = 4;
  ng_link_trainer_t g = NULL, c = NULL;
  EXPECT_OK(ng_link_trainer_create(&g, ds, m, &o, &lo));
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  for (int e = 0; g && e < EPOCHS; e++)
    EXPECT_OK(ng_link_trainer_epoch(&s, g));
  /* The block buffers take 2^18 pairs of 12 bytes; the model's 16-float rows 64 bytes each. */
  char chunk[64];
  snprintf(chunk, sizeof chunk, "%d", (1 << 18) * 12 + 300 * 64);
  const struct { const char *dev, *bytes; } runs[] = {{NULL, NULL}, {"0", NULL}, {NULL, chunk}};
  ng_link_metrics r[3];
  for (size_t i = 0; g && i < NG_TEST_LEN(runs); i++) {
    r[i] = (ng_link_metrics)NG_LINK_METRICS_INIT;
    if (runs[i].dev)
      setenv("NG_LINK_EVAL_DEVICE", runs[i].dev, 1);
    if (runs[i].bytes)
      setenv("NG_LINK_EVAL_DEVICE_BYTES", runs[i].bytes, 1);
    EXPECT_OK(ng_link_trainer_evaluate(&r[i], g, NG_SPLIT_VAL));
    unsetenv("NG_LINK_EVAL_DEVICE");
    unsetenv("NG_LINK_EVAL_DEVICE_BYTES");
    printf("    gpu eval run %zu: auc %.6f ap %.6f mrr %.6f\n", i, r[i].auc, r[i].ap, r[i].mrr);
    if (i > 0) {
      EXPECT_TRUE(memcmp(&r[i].auc, &r[0].auc, sizeof r[0].auc) == 0);
      EXPECT_TRUE(memcmp(&r[i].ap, &r[0].ap, sizeof r[0].ap) == 0);
      EXPECT_TRUE(memcmp(&r[i].mrr, &r[0].mrr, sizeof r[0].mrr) == 0);
      EXPECT_TRUE(memcmp(&r[i].hits10, &r[0].hits10, sizeof r[0].hits10) == 0);
      EXPECT_TRUE(memcmp(&r[i].loss, &r[0].loss, sizeof r[0].loss) == 0);
    }
  }
  char ckpt[4096 + 256];
  snprintf(ckpt, sizeof ckpt, "%s", ng_test_path("cora_link_gpu_eval.ckpt"));
  if (g)
    EXPECT_OK(ng_link_trainer_save(g, ckpt));
  o.device = "cpu";
  EXPECT_OK(ng_link_trainer_create(&c, ds, m, &o, &lo));
  if (g && c) {
    EXPECT_OK(ng_link_trainer_load_weights(c, ckpt));
    ng_link_metrics rc = NG_LINK_METRICS_INIT;
    EXPECT_OK(ng_link_trainer_evaluate(&rc, c, NG_SPLIT_VAL));
    printf("    cpu eval, the same weights: auc %.6f ap %.6f mrr %.6f\n", rc.auc, rc.ap, rc.mrr);
    EXPECT_TRUE(r[0].auc > 0.6);
    EXPECT_NEAR(r[0].auc, rc.auc, 1e-3);
    EXPECT_NEAR(r[0].ap, rc.ap, 1e-3);
    EXPECT_NEAR(r[0].mrr, rc.mrr, 5e-3);
    EXPECT_TRUE(r[0].positives == rc.positives && r[0].negatives == rc.negatives);
  }
  ng_link_trainer_destroy(c);
  ng_link_trainer_destroy(g);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

int main(void) {
  if (!ng_test_gpu_found("gpu_link"))
    return 77;
  cora = ng_test_fetch_cora();
  if (!cora)
    return ng_test_summary();
  RUN_TEST(test_modes_on_gpu);
  RUN_TEST(test_eval_on_gpu);
  ng_dataset_close(cora);
  return ng_test_summary();
}
#endif
