/* A program that defines its own per-hop aggregator and trains Cora with it: a power mean
 *
 *     y = ( sum_j |x_j|^3 / n ) ^ (1/3)     over a node's n sampled neighbours, per feature,
 *
 * written once with NG_AGGREGATOR_SOURCE. The same functions run in the CPU backend, in the
 * CPU's partial aggregation of cold neighbours (their states merge by agg_merge), and, compiled
 * at run time with NVRTC, on the GPU (`train_powmean DATA EPOCHS cuda`). Its backward is
 * declared (agg_grad); ng_aggregator_define checks it against a finite difference.
 *
 *   train_powmean DATA [EPOCHS] [DEVICE]    DATA: a planetoid folder or a dataset folder */
#include <neargnn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The aggregator, once. State: s[0] = sum of w |x|^3. Plain C over float: this text is also
 * handed to NVRTC, which compiles it with NG_AGG_FN = __device__ __forceinline__. */
// clang-format off
NG_AGGREGATOR_SOURCE(powmean_source,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) {
    const float a = fabsf(x);
    s[0] = s[0] + w * (a * a * a);
  }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) {
    return n > 0.0f ? cbrtf(s[0] / n) : 0.0f;
  }
  /* d y / d x_j = w_j x_j |x_j| / (n y^2) */
  NG_AGG_FN float agg_grad(const float *s, float n, float x, float w, float y) {
    (void)s;
    return y > 0.0f ? w * x * fabsf(x) / (n * y * y) : 0.0f;
  })
// clang-format on

/* Its definition: the functions above (NG_AGGREGATOR_FUNCTIONS: init, accumulate, merge,
 * finalize, the source text and the row form of accumulate), the state size and the backward. */
static const ng_aggregator_def powmean = {
    .size = sizeof(ng_aggregator_def),
    .name = "powmean3",
    .state_size = 1,
    .linear = 0,
    .grad = agg_grad,
    NG_AGGREGATOR_FUNCTIONS(powmean_source),
};

static int fail(const char *what, ng_status st) {
  fprintf(stderr, "train_powmean: %s: %s: %s\n", what, ng_status_str(st), ng_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: train_powmean DATA [EPOCHS] [cpu|cuda]\n");
    return 2;
  }
  const int epochs = argc > 2 ? atoi(argv[2]) : 30;
  const char *device = argc > 3 ? argv[3] : "cpu";
  char path[4096], converted[4096] = "";
  snprintf(path, sizeof path, "%s/dataset.json", argv[1]);
  const char *dir = argv[1];
  struct stat sb;
  if (stat(path, &sb) != 0) { /* planetoid files: convert them into a temporary dataset */
    snprintf(converted, sizeof converted, "/tmp/train_powmean-%ld", (long)getpid());
    ng_convert_opts co = NG_CONVERT_OPTS_INIT;
    co.format = NG_FORMAT_PLANETOID;
    ng_status st = ng_dataset_convert(converted, argv[1], &co);
    if (st != NG_OK)
      return fail("convert", st);
    dir = converted;
  }
  ng_dataset_t ds = NULL;
  ng_model_t model = NULL;
  ng_trainer_t trainer = NULL;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  int rc = 0;
  ng_status st = ng_dataset_open(&ds, dir, NULL);
  if (st == NG_OK)
    st = ng_dataset_info_get(&info, ds);
  if (st == NG_OK)
    st = ng_model_create(&model, NG_MODEL_SAGE, info.feature_dim);
  /* Two GraphSAGE hops, both aggregating with the power mean: h W_self + powmean(h_j) W_neigh. */
  for (int l = 0; l < 2 && st == NG_OK; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    st = ng_aggregator_define(&lo.aggregator, &powmean);
    lo.fanout = l == 0 ? 5 : 10;
    lo.out_dim = l == 0 ? 64 : info.classes;
    lo.activation = l == 0 ? NG_ACT_RELU : NG_ACT_NONE;
    lo.dropout = 0.5f;
    lo.weight_decay = l == 0 ? 5e-4f : 0.0f;
    if (st == NG_OK)
      st = ng_model_add_layer(model, &lo);
  }
  ng_train_opts opts = NG_TRAIN_OPTS_INIT;
  opts.batch = 0; /* full batch */
  opts.normalize = NG_NORMALIZE_ROW;
  opts.device = device;
  if (st == NG_OK)
    st = ng_trainer_create(&trainer, ds, model, &opts);
  for (int e = 0; e < epochs && st == NG_OK; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    st = ng_trainer_epoch(&s, trainer);
    if (st == NG_OK && (e % 10 == 0 || e == epochs - 1))
      printf("epoch %d loss %.4f\n", e, s.loss);
  }
  double acc = 0.0;
  if (st == NG_OK)
    st = ng_trainer_evaluate(&acc, NULL, trainer, NG_SPLIT_TEST);
  if (st == NG_OK)
    printf("neargnn %s: %s on %s, aggregator %s, test accuracy %.4f after %d epochs\n",
           ng_version(), info.name, device, powmean.name, acc, epochs);
  else
    rc = fail("training", st);
  ng_trainer_destroy(trainer);
  ng_model_destroy(model);
  ng_dataset_close(ds);
  if (converted[0]) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", converted);
    if (system(cmd) != 0)
      fprintf(stderr, "train_powmean: could not remove %s\n", converted);
  }
  return rc;
}
