/* Shared training runs of the fetch-strategy suites. */
#include "ng_test_fetch.h"

#include <stdlib.h>
#include <string.h>

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

bool ng_test_fetch_train(ng_dataset_t ds, const ng_test_fetch_run *r, ng_test_fetch_result *out) {
  memset(out, 0, sizeof *out);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, r->kind, info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = r->aggregator;
  l0.fanout = 10;
  l1.fanout = 5;
  l0.out_dim = 32;
  l1.out_dim = info.classes;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = r->dropout;
  l0.weight_decay = 5e-4f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 32;
  o.seed = 7;
  o.device = r->device;
  o.threads = r->threads;
  o.mode = r->mode;
  o.transfer = r->transfer;
  o.workers = r->workers;
  o.partial_workers = r->partial_workers;
  o.period_ms = r->period_ms > 0 ? r->period_ms : 100.0;
  o.cache_ratio = r->cache_ratio;
  o.normalize = NG_NORMALIZE_ROW;
  ng_trainer_t t = NULL;
  bool ok = ng_trainer_create(&t, ds, m, &o) == NG_OK;
  if (!ok)
    fprintf(stderr, "  trainer: %s\n", ng_last_error());
  EXPECT_TRUE(ok);
  for (int e = 0; ok && e < NG_TEST_FETCH_EPOCHS; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    ok = ng_trainer_epoch(&s, t) == NG_OK;
    if (!ok)
      fprintf(stderr, "  epoch %d: %s\n", e, ng_last_error());
    EXPECT_TRUE(ok);
    out->loss[e] = s.loss;
    out->fetch.hot_rows += s.fetch.hot_rows;
    out->fetch.cold_rows += s.fetch.cold_rows;
    out->fetch.h2d_bytes += s.fetch.h2d_bytes;
    out->fetch.zcopy_bytes += s.fetch.zcopy_bytes;
    out->fetch.cpu_cold_bytes += s.fetch.cpu_cold_bytes;
    out->sampled_edges += s.sampled_edges;
    out->workers[0] = s.workers[0];
    out->workers[1] = s.workers[1];
  }
  if (ok) {
    out->hot_rows = ng_trainer_hot_rows(t);
    const char *path = ng_test_path("fetch.safetensors");
    ok = ng_trainer_save(t, path) == NG_OK;
    EXPECT_TRUE(ok);
    if (ok)
      out->checkpoint = ng_test_read_file(path, &out->checkpoint_len);
    ok = out->checkpoint != NULL;
  }
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  return ok;
}

bool ng_test_fetch_same(const ng_test_fetch_result *a, const ng_test_fetch_result *b,
                        const char *what) {
  for (int e = 0; e < NG_TEST_FETCH_EPOCHS; e++)
    if (memcmp(&a->loss[e], &b->loss[e], sizeof(double)) != 0) {
      fprintf(stderr, "  %s: epoch %d loss %.17g vs %.17g\n", what, e, a->loss[e], b->loss[e]);
      return false;
    }
  if (!a->checkpoint || !b->checkpoint || a->checkpoint_len != b->checkpoint_len ||
      memcmp(a->checkpoint, b->checkpoint, a->checkpoint_len) != 0) {
    fprintf(stderr, "  %s: the final checkpoints differ\n", what);
    return false;
  }
  return true;
}
