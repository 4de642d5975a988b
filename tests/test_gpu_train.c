/* Training on the GPU (--device cuda) against the CPU: the same model code through the CUDA
 * backend. Cora's accuracy bars hold on the GPU, its losses follow the CPU's within fp32
 * tolerance, and a GPU run repeats bit for bit. Exits 77 (skipped) without CUDA or a GPU. */
#include "ng_test_cora.h"

#include <stdlib.h>

#ifndef NG_HAVE_CUDA
int main(void) {
  printf("skipped: this build has no CUDA backend\n");
  return 77;
}
#else
#include "ng_test_gpu.h"

enum { EPOCHS = 200, SEEDS = 3 };

static ng_dataset_t cora;

/* Kipf & Welling's recipe for GCN; the same with GraphSAGE-mean and fanouts 25,10. */
static ng_model_t make_model(ng_model_kind kind) {
  const bool gcn = kind == NG_MODEL_GCN;
  return ng_test_cora_recipe_model(kind, gcn ? -1 : 10, gcn ? -1 : 25, 16);
}

/* Trains on `device` and returns the test accuracy; losses[EPOCHS] receives each epoch's. */
static double train_with(ng_model_kind kind, const char *device, uint64_t seed, double *losses,
                         ng_precision precision, int op_profile_every) {
  ng_model_t m = make_model(kind);
  ng_train_opts o = ng_test_cora_recipe_opts(seed);
  o.precision = precision;
  o.op_profile_every = op_profile_every;
  o.device = device;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
  double acc = 0.0;
  for (int e = 0; t && e < EPOCHS; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    losses[e] = s.loss;
  }
  if (t)
    EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_TEST));
  if (t && op_profile_every > 0) { /* every op kind of both layers was timed */
    ng_op_time ops[64];
    int n = 0;
    int64_t iters = 0;
    EXPECT_OK(ng_trainer_op_profile(ops, 64, &n, &iters, t));
    EXPECT_TRUE(iters > 0);
    int gemms = 0;
    for (int i = 0; i < n; i++) {
      EXPECT_TRUE(ops[i].calls > 0 && ops[i].ms >= 0.0);
      gemms += strcmp(ops[i].name, "gemm fwd") == 0;
    }
    EXPECT_EQ_I(gemms, 2);
  }
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  return acc;
}

static double train(ng_model_kind kind, const char *device, uint64_t seed, double *losses) {
  return train_with(kind, device, seed, losses, NG_PRECISION_FP32, 0);
}

static void check_model(ng_model_kind kind, const char *name, double bar) {
  static double cpu[EPOCHS], gpu[EPOCHS], again[EPOCHS];
  double sum = 0.0;
  for (uint64_t seed = 1; seed <= SEEDS; seed++) {
    double acc = train(kind, "cuda", seed, gpu);
    printf("  %s seed %llu on cuda: test accuracy %.2f%%\n", name, (unsigned long long)seed,
           100 * acc);
    sum += acc;
    if (seed == 1) {
      /* The same run on the CPU: the same dropout masks and samples, so the losses differ only
       * by fp32 rounding (GEMM order), which grows slowly over training. */
      double cpu_acc = train(kind, "cpu", seed, cpu);
      printf("  %s seed 1 on cpu:  test accuracy %.2f%%\n", name, 100 * cpu_acc);
      for (int e = 0; e < 20; e++)
        EXPECT_NEAR(gpu[e], cpu[e], 1e-3 * fabs(cpu[e]));
      EXPECT_NEAR(gpu[EPOCHS - 1], cpu[EPOCHS - 1], 0.05 * fabs(cpu[EPOCHS - 1]));
      /* A GPU run repeats bit for bit. */
      double acc2 = train(kind, "cuda", seed, again);
      EXPECT_TRUE(memcmp(gpu, again, sizeof gpu) == 0);
      EXPECT_TRUE(memcmp(&acc, &acc2, sizeof acc) == 0);
    }
  }
  double mean = sum / SEEDS;
  printf("  %s mean test accuracy on cuda %.2f%%\n", name, 100 * mean);
  EXPECT_TRUE(mean >= bar);
}

/* TF32 products: Cora's accuracy stays within 0.5 points of fp32's (mean of 3 seeds), a TF32 run
 * repeats bit for bit, and timing the ops changes no bit of the losses. */
static void test_tf32_and_op_profile(void) {
  static double l32[EPOCHS], l_tf[EPOCHS], l_tf2[EPOCHS], l_prof[EPOCHS];
  for (int k = 0; k < 2; k++) {
    const ng_model_kind kind = k ? NG_MODEL_SAGE : NG_MODEL_GCN;
    double a32 = 0.0, atf = 0.0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
      a32 += train_with(kind, "cuda", seed, l32, NG_PRECISION_FP32, 0) / SEEDS;
      atf += train_with(kind, "cuda", seed, l_tf, NG_PRECISION_TF32, 0) / SEEDS;
    }
    printf("  %s mean test accuracy: fp32 %.2f%%, tf32 %.2f%%\n", k ? "SAGE" : "GCN", 100 * a32,
           100 * atf);
    EXPECT_TRUE(fabs(a32 - atf) <= 0.005);
    (void)train_with(kind, "cuda", SEEDS, l_tf2, NG_PRECISION_TF32, 0);
    EXPECT_TRUE(memcmp(l_tf, l_tf2, sizeof l_tf) == 0);
    (void)train_with(kind, "cuda", SEEDS, l_prof, NG_PRECISION_TF32, 7);
    EXPECT_TRUE(memcmp(l_tf, l_prof, sizeof l_tf) == 0);
  }
}

/* bf16 feature storage on the GPU (the hot tier in bf16): Cora's accuracy stays within 0.5
 * points of fp32's (mean of 3 seeds), a bf16 run repeats bit for bit and differs from fp32. */
static void test_bf16(void) {
  static double l32[EPOCHS], l16[EPOCHS], l16b[EPOCHS];
  for (int k = 0; k < 2; k++) {
    const ng_model_kind kind = k ? NG_MODEL_SAGE : NG_MODEL_GCN;
    double a32 = 0.0, a16 = 0.0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
      a32 += train_with(kind, "cuda", seed, l32, NG_PRECISION_FP32, 0) / SEEDS;
      a16 += train_with(kind, "cuda", seed, l16, NG_PRECISION_BF16, 0) / SEEDS;
    }
    printf("  %s mean test accuracy: fp32 %.2f%%, bf16 %.2f%%\n", k ? "SAGE" : "GCN", 100 * a32,
           100 * a16);
    EXPECT_TRUE(fabs(a32 - a16) <= 0.005);
    EXPECT_TRUE(memcmp(l32, l16, sizeof l32) != 0);
    (void)train_with(kind, "cuda", SEEDS, l16b, NG_PRECISION_BF16, 0);
    EXPECT_TRUE(memcmp(l16, l16b, sizeof l16) == 0);
  }
}

/* 30 epochs of a 3-layer GraphSAGE-mean (fanouts 10,10,10, hidden 64, dropout 0.5, batch 64)
 * on Cora: two layers' weight gradients go to the side queue, beside the input gradient's chain.
 * Each epoch's loss into losses[30]. */
static void train_deep(double *losses) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  for (int l = 0; l < 3; l++) {
    ng_layer_opts o = NG_LAYER_OPTS_INIT;
    o.aggregator = NG_AGGREGATOR_MEAN;
    o.fanout = 10;
    o.out_dim = l < 2 ? 64 : 7;
    o.activation = l < 2 ? NG_ACT_RELU : NG_ACT_NONE;
    o.dropout = 0.5f;
    EXPECT_OK(ng_model_add_layer(m, &o));
  }
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 64;
  o.lr = 0.01;
  o.seed = 5;
  o.device = "cuda";
  o.normalize = NG_NORMALIZE_ROW;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
  for (int e = 0; t && e < 30; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    losses[e] = s.loss;
  }
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

/* The weight gradients above the input layer run on the backend's side queue, beside the input
 * gradient's chain (models/model.c, weight_grads): the losses have the same bits as with every op
 * on one queue (NG_CUDA_SIDE=0), which the op profile's timed iterations also use; Cora's GCN and
 * GraphSAGE (one layer on the side queue) and a 3-layer GraphSAGE (two, with mini-batches). */
static void test_side_queue(void) {
  static double one[EPOCHS], two[EPOCHS];
  for (int k = 0; k < 3; k++) {
    const ng_model_kind kind = k ? NG_MODEL_SAGE : NG_MODEL_GCN;
    memset(one, 0, sizeof one);
    memset(two, 0xff, sizeof two);
    EXPECT_EQ_I(setenv("NG_CUDA_SIDE", "0", 1), 0);
    if (k < 2)
      (void)train(kind, "cuda", 2, one);
    else
      train_deep(one);
    EXPECT_EQ_I(unsetenv("NG_CUDA_SIDE"), 0);
    if (k < 2)
      (void)train(kind, "cuda", 2, two);
    else
      train_deep(two);
    EXPECT_TRUE(memcmp(one, two, k < 2 ? sizeof one : 30 * sizeof one[0]) == 0);
  }
}

static void test_gcn_cora_on_gpu(void) {
  check_model(NG_MODEL_GCN, "GCN", 0.800);
}
static void test_sage_cora_on_gpu(void) {
  check_model(NG_MODEL_SAGE, "SAGE", 0.780);
}

int main(void) {
  if (!ng_test_gpu_found("gpu_train"))
    return 77;
  cora = ng_test_fetch_cora();
  if (!cora)
    return ng_test_summary();
  RUN_TEST(test_gcn_cora_on_gpu);
  RUN_TEST(test_sage_cora_on_gpu);
  RUN_TEST(test_tf32_and_op_profile);
  RUN_TEST(test_bf16);
  RUN_TEST(test_side_queue);
  ng_dataset_close(cora);
  return ng_test_summary();
}
#endif
