/* A program using neargnn as an installed library: converts Cora from its planetoid files (or
 * opens a dataset folder), trains a 2-layer GraphSAGE-mean model on the CPU for a few epochs,
 * and prints the test accuracy. Builds against an installed neargnn with pkg-config or CMake
 * (examples/README.md).
 *
 *   train_cora DATA [EPOCHS]     DATA: a planetoid folder (../shared/data/cora) or a dataset */
#include <neargnn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Prints the failure and its detail; returns the exit status. */
static int fail(const char *what, ng_status st) {
  fprintf(stderr, "train_cora: %s: %s: %s\n", what, ng_status_str(st), ng_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: train_cora DATA [EPOCHS]\n");
    return 2;
  }
  const int epochs = argc > 2 ? atoi(argv[2]) : 30;
  char path[4096], converted[4096] = "";
  snprintf(path, sizeof path, "%s/dataset.json", argv[1]);
  const char *dir = argv[1];
  struct stat sb;
  if (stat(path, &sb) != 0) { /* planetoid files: convert them into a temporary dataset */
    snprintf(converted, sizeof converted, "/tmp/train_cora-%ld", (long)getpid());
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
  /* Layers from the input: the input layer samples the second hop (5 neighbours), the output
   * layer the targets' own neighbours (10): `neargnn train --fanouts 10,5`. */
  for (int l = 0; l < 2 && st == NG_OK; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    lo.aggregator = NG_AGGREGATOR_MEAN;
    lo.fanout = l == 0 ? 5 : 10;
    lo.out_dim = l == 0 ? 64 : info.classes;
    lo.activation = l == 0 ? NG_ACT_RELU : NG_ACT_NONE;
    lo.dropout = 0.5f;
    lo.weight_decay = l == 0 ? 5e-4f : 0.0f;
    st = ng_model_add_layer(model, &lo);
  }
  ng_train_opts opts = NG_TRAIN_OPTS_INIT;
  opts.batch = 0; /* full batch */
  opts.normalize = NG_NORMALIZE_ROW;
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
    printf("neargnn %s: %s, %lld nodes, test accuracy %.4f after %d epochs\n", ng_version(),
           info.name, (long long)info.nodes, acc, epochs);
  else
    rc = fail("training", st);
  ng_trainer_destroy(trainer);
  ng_model_destroy(model);
  ng_dataset_close(ds);
  if (converted[0]) { /* remove the temporary dataset */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", converted);
    if (system(cmd) != 0)
      fprintf(stderr, "train_cora: could not remove %s\n", converted);
  }
  return rc;
}
