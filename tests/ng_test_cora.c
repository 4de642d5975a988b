/* Cora and Kipf & Welling's recipe for the suites that train on it (ng_test_cora.h). */
#include "ng_test_cora.h"

#include <stdlib.h>

ng_dataset_t ng_test_fetch_cora(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  const char *dst = ng_test_path("cora");
  if (ng_dataset_convert(dst, src, &co) != NG_OK) {
    fprintf(stderr, "cannot convert %s: %s\n", src, ng_last_error());
    exit(1);
  }
  return ng_test_open_ok(dst);
}

ng_model_t ng_test_cora_sage(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.out_dim = 16;
  l0.fanout = 5;
  l0.dropout = 0.5f;
  l1.out_dim = 7;
  l1.fanout = 10;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

ng_model_t ng_test_cora_recipe_model(ng_model_kind kind, int32_t fanout0, int32_t fanout1,
                                     int64_t hidden) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, kind, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = kind == NG_MODEL_GCN ? NG_AGGREGATOR_GCN : NG_AGGREGATOR_MEAN;
  l0.fanout = fanout0;
  l1.fanout = fanout1;
  l0.out_dim = hidden;
  l1.out_dim = 7;
  l0.activation = NG_ACT_RELU;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = 0.5f;
  l0.weight_decay = 5e-4f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

ng_train_opts ng_test_cora_recipe_opts(uint64_t seed) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 0;
  o.lr = 0.01;
  o.seed = seed;
  o.normalize = NG_NORMALIZE_ROW;
  return o;
}
