/* Shared training runs of the fetch-strategy suites. */
#include "ng_test_fetch.h"

#include "backend_impl.h"
#include "fetch_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  if (r->kind == NG_MODEL_GAT) { /* 4 concatenated heads of 8, then 2 averaged ones */
    l0.heads = 4;
    l0.combine = NG_HEADS_CONCAT;
    l1.heads = 2;
    l1.combine = NG_HEADS_MEAN;
    l0.attn_dropout = l1.attn_dropout = r->dropout;
  }
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
  if (r->lookahead > 0)
    o.lookahead = r->lookahead;
  o.cache_ratio = r->cache_ratio;
  o.device_share = r->device_share;
  o.ready_window = r->ready_window;
  o.normalize = r->raw_features ? NG_NORMALIZE_NONE : NG_NORMALIZE_ROW;
  o.precision = r->precision;
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
    ng__fetch_stats_add(&out->fetch, &s.fetch);
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

bool ng_test_fetch_self_zcopy(const ng_test_fetch_run *r) {
  return r->mode == NG_MODE_HYBRID_STATIC && r->transfer == NG_FETCH_ZCOPY &&
         r->partial_workers == r->workers;
}

void ng_test_fetch_expect_self_split(const ng_test_fetch_run *run, const ng_test_fetch_result *r,
                                     const ng_test_fetch_result *partial_ref) {
  EXPECT_TRUE(r->fetch.zcopy_bytes > 0);
  if (run->device_share == 1.0)
    EXPECT_EQ_I(r->fetch.cpu_cold_bytes, 0);
  else
    EXPECT_TRUE(r->fetch.cpu_cold_bytes > 0);
  EXPECT_EQ_I(r->fetch.cpu_cold_bytes + r->fetch.zcopy_bytes, partial_ref->fetch.cpu_cold_bytes);
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

/* One SGD step of lr 1 on a single parameter 1 with gradient 1: returns the parameter after it. */
static float sgd_probe(ng_backend *be, float *d_w, const float *d_g) {
  const float one = 1.0f;
  float w = -1.0f;
  EXPECT_OK(be->iface->copy_h2d(be, d_w, &one, sizeof one));
  ng_opt_hp hp = {.kind = NG_OPT_SGD, .lr = 1.0f};
  EXPECT_OK(be->iface->opt_step(be, &hp, d_w, d_g, NULL, NULL, 1));
  EXPECT_OK(be->iface->copy_d2h(be, &w, d_w, sizeof w));
  return w;
}

void ng_test_xent_guard(ng_backend *be) {
  enum { N = 2, C = 3 };
  /* Two batches of logits: a good one and one whose loss is NaN. */
  const float good[N * C] = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f};
  const float bad[N * C] = {1.0f, NAN, 0.5f, -1.0f, 0.0f, 3.0f};
  const int32_t lab[N] = {1, 0};
  const float one = 1.0f;
  void *d_good = NULL, *d_bad = NULL, *d_lab = NULL, *d_w = NULL, *d_g = NULL;
  EXPECT_OK(be->iface->alloc(be, &d_good, sizeof good));
  EXPECT_OK(be->iface->alloc(be, &d_bad, sizeof bad));
  EXPECT_OK(be->iface->alloc(be, &d_lab, sizeof lab));
  EXPECT_OK(be->iface->alloc(be, &d_w, sizeof one));
  EXPECT_OK(be->iface->alloc(be, &d_g, sizeof one));
  if (!d_good || !d_bad || !d_lab || !d_w || !d_g)
    goto out;
  EXPECT_OK(be->iface->copy_h2d(be, d_good, good, sizeof good));
  EXPECT_OK(be->iface->copy_h2d(be, d_bad, bad, sizeof bad));
  EXPECT_OK(be->iface->copy_h2d(be, d_lab, lab, sizeof lab));
  EXPECT_OK(be->iface->copy_h2d(be, d_g, &one, sizeof one));

  double l_now = 0.0, l1 = -1.0, l2 = -1.0;
  int64_t c_now = 0, c1 = -1, c2 = -1;
  EXPECT_OK(be->iface->xent(be, d_good, d_lab, N, C, NULL, &l_now, &c_now));
  EXPECT_TRUE(isfinite(l_now) && l_now > 0.0);
  /* In order: a good result, then a bad one. */
  EXPECT_OK(be->iface->xent(be, d_good, d_lab, N, C, NULL, NULL, NULL));
  EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 0.0f); /* nothing bad unread: the step runs */
  EXPECT_OK(be->iface->xent(be, d_bad, d_lab, N, C, NULL, NULL, NULL));
  EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 1.0f); /* held back */
  EXPECT_OK(be->iface->xent_result(be, &l1, &c1));
  EXPECT_TRUE(l1 == l_now && c1 == c_now);
  EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 1.0f); /* the bad one is still unread */
  EXPECT_OK(be->iface->xent_result(be, &l2, &c2));
  EXPECT_TRUE(isnan(l2));
  EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 0.0f); /* read: steps run again */
  EXPECT_STATUS(be->iface->xent_result(be, &l1, &c1), NG_ERR_STATE);
  EXPECT_ERR_HAS("no xent result");
  /* A result read at once (host outputs) never joins the queue, nor holds a step back. */
  EXPECT_OK(be->iface->xent(be, d_good, d_lab, N, C, NULL, NULL, NULL));
  EXPECT_OK(be->iface->xent(be, d_bad, d_lab, N, C, NULL, &l2, &c2));
  EXPECT_TRUE(isnan(l2));
  EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 0.0f);
  EXPECT_OK(be->iface->xent_result(be, &l1, &c1));
  EXPECT_TRUE(l1 == l_now);
  /* A label out of range: reported by the op itself (CPU) or, deferred, by xent_result (CUDA),
   * with the steps held back until then. */
  const int32_t bad_lab[N] = {1, C};
  EXPECT_OK(be->iface->copy_h2d(be, d_lab, bad_lab, sizeof bad_lab));
  const ng_status s = be->iface->xent(be, d_good, d_lab, N, C, NULL, NULL, NULL);
  if (s == NG_OK) {
    EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 1.0f);
    EXPECT_STATUS(be->iface->xent_result(be, &l1, &c1), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("label 3 of row 1");
    EXPECT_TRUE(sgd_probe(be, d_w, d_g) == 0.0f);
  } else {
    EXPECT_EQ_I(s, NG_ERR_INVALID_ARG);
  }
  EXPECT_OK(be->iface->copy_h2d(be, d_lab, lab, sizeof lab));
  /* The queue holds NG_XENT_QUEUE results. */
  for (int k = 0; k < NG_XENT_QUEUE; k++)
    EXPECT_OK(be->iface->xent(be, d_good, d_lab, N, C, NULL, NULL, NULL));
  EXPECT_STATUS(be->iface->xent(be, d_good, d_lab, N, C, NULL, NULL, NULL), NG_ERR_STATE);
  EXPECT_ERR_HAS("queued unread");
  for (int k = 0; k < NG_XENT_QUEUE; k++) {
    EXPECT_OK(be->iface->xent_result(be, &l1, &c1));
    EXPECT_TRUE(l1 == l_now && c1 == c_now);
  }
out:
  be->iface->free(be, d_good);
  be->iface->free(be, d_bad);
  be->iface->free(be, d_lab);
  be->iface->free(be, d_w);
  be->iface->free(be, d_g);
}
