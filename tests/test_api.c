/* The library as an application uses it (issue 27): datasets from caller-owned arrays (zero
 * copy, validation, edge lists), self-describing checkpoints (settings recorded, mismatches
 * named, the model rebuilt from a checkpoint, older checkpoints), and predictions of a node
 * subset. Real data: Cora. */
#include "dataset_impl.h"
#include "ng_test.h"
#include "safetensors_impl.h"

#include <stdlib.h>

static ng_dataset_t cora; /* the folder, as ng_dataset_open maps it */

static void open_cora(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  const char *dst = ng_test_path("cora");
  if (ng_dataset_convert(dst, src, &co) != NG_OK || ng_dataset_open(&cora, dst, NULL) != NG_OK) {
    fprintf(stderr, "cannot convert or open %s: %s\n", src, ng_last_error());
    exit(1);
  }
}

/* Cora's arrays as a caller would hand them over: the folder's mappings, borrowed. */
static ng_dataset_arrays cora_arrays(void) {
  ng_dataset_arrays a = NG_DATASET_ARRAYS_INIT;
  a.name = "cora-mem";
  a.nodes = cora->info.nodes;
  a.indptr = cora->csr.indptr;
  a.indptr_type = NG_INT64;
  a.indices = cora->csr.idx32 ? (const void *)cora->csr.idx32 : (const void *)cora->csr.idx64;
  a.index_type = cora->csr.idx32 ? NG_INT32 : NG_INT64;
  a.undirected = cora->info.undirected;
  a.features = cora->features;
  a.feature_dim = cora->info.feature_dim;
  a.labels = cora->labels;
  a.label_type = NG_INT32;
  for (int s = 0; s < 3; s++)
    a.split[s] = cora->split[s];
  a.split_size[0] = cora->info.train;
  a.split_size[1] = cora->info.val;
  a.split_size[2] = cora->info.test;
  return a;
}

/* A 2-layer GraphSAGE-mean model for Cora (fanouts per layer from the input). */
static ng_model_t sage(ng_aggregator ag, int64_t hidden) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, cora->info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = ag;
  l0.fanout = 5;
  l1.fanout = 10;
  l0.out_dim = hidden;
  l1.out_dim = cora->info.classes;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = 0.5f;
  l0.weight_decay = 5e-4f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

static ng_train_opts cpu_opts(void) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 0;
  o.normalize = NG_NORMALIZE_ROW;
  o.workers = -1;
  o.seed = 7;
  return o;
}

/* Trains `epochs` full-batch epochs; returns the test accuracy, and the loss of the last epoch. */
static double train(ng_trainer_t *out, ng_dataset_t ds, ng_model_t m, int epochs, double *loss) {
  ng_train_opts o = cpu_opts();
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
  if (!t)
    return -1;
  for (int e = 0; e < epochs; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    *loss = s.loss;
  }
  double acc = -1;
  EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_TEST));
  *out = t;
  return acc;
}

/* The arrays are read in place, and training on them is bit-identical to the folder. */
static void test_arrays_zero_copy_same_training(void) {
  ng_dataset_arrays a = cora_arrays();
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_from_arrays(&ds, &a));
  if (!ds)
    return;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_STR(info.name, "cora-mem");
  EXPECT_EQ_I(info.nodes, cora->info.nodes);
  EXPECT_EQ_I(info.edges, cora->info.edges);
  EXPECT_EQ_I(info.classes, cora->info.classes);
  EXPECT_EQ_I(info.test, cora->info.test);
  const float *x = NULL;
  EXPECT_OK(ng_dataset_features(&x, ds));
  EXPECT_TRUE(x == cora->features); /* the caller's array itself, not a copy */
  EXPECT_TRUE(ds->csr.indptr == cora->csr.indptr);
  EXPECT_TRUE(ds->labels == cora->labels);
  EXPECT_TRUE(ds->split[0] == cora->split[0]);
  const int64_t *ids = NULL;
  int64_t n = 0;
  EXPECT_OK(ng_dataset_split(&ids, &n, ds, 2));
  EXPECT_TRUE(ids == cora->split[2] && n == cora->info.test);

  ng_model_t m = sage(NG_AGGREGATOR_MEAN, 32);
  ng_trainer_t t1 = NULL, t2 = NULL;
  double l1 = 0, l2 = 0;
  double acc1 = train(&t1, ds, m, 20, &l1), acc2 = train(&t2, cora, m, 20, &l2);
  EXPECT_TRUE(l1 == l2); /* bit for bit */
  EXPECT_TRUE(acc1 == acc2);
  EXPECT_TRUE(acc1 >= 0.70); /* Cora SAGE after 20 full-batch epochs: ~0.78 */
  ng_trainer_destroy(t1);
  ng_trainer_destroy(t2);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* The caller's features are only read: a trainer that copies or row-normalises them must not
 * release their pages (MADV_DONTNEED on anonymous memory reads back as zeros), which it may do to
 * a dataset folder's read-only mapping. */
static void test_arrays_left_intact(void) {
  const size_t bytes = (size_t)cora->info.nodes * (size_t)cora->info.feature_dim * sizeof(float);
  float *x = malloc(bytes);
  if (!x)
    return;
  memcpy(x, cora->features, bytes);
  ng_dataset_arrays a = cora_arrays();
  a.features = x;
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_from_arrays(&ds, &a));
  ng_model_t m = sage(NG_AGGREGATOR_MEAN, 16);
  for (int k = 0; ds && k < 2; k++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 0;
    o.normalize = k ? NG_NORMALIZE_NONE : NG_NORMALIZE_ROW;
    o.features_memory = k ? NG_FEATURES_COPY : NG_FEATURES_AUTO;
    ng_trainer_t t = NULL;
    EXPECT_OK(ng_trainer_create(&t, ds, m, &o));
    ng_trainer_destroy(t);
    EXPECT_TRUE(memcmp(x, cora->features, bytes) == 0);
  }
  ng_model_destroy(m);
  ng_dataset_close(ds);
  free(x);
}

/* An edge list becomes the same CSR, in the list's order; int64 labels and int32 splits are
 * converted. */
static void test_arrays_edge_list(void) {
  const int64_t nodes = cora->info.nodes, m = cora->info.edges;
  int32_t *src = ng_test_xmalloc((size_t)m * sizeof *src), *dst = ng_test_xmalloc((size_t)m * 4);
  int64_t *lab64 = ng_test_xmalloc((size_t)nodes * sizeof *lab64);
  int32_t *test32 = ng_test_xmalloc((size_t)cora->info.test * sizeof *test32);
  for (int64_t v = 0; v < nodes; v++)
    for (int64_t e = cora->csr.indptr[v]; e < cora->csr.indptr[v + 1]; e++) {
      dst[e] = (int32_t)v;
      src[e] = (int32_t)ng__csr_index(&cora->csr, e);
    }
  for (int64_t v = 0; v < nodes; v++)
    lab64[v] = cora->labels[v];
  for (int64_t i = 0; i < cora->info.test; i++)
    test32[i] = (int32_t)cora->split[2][i];
  ng_dataset_arrays a = cora_arrays();
  a.indptr = a.indices = NULL;
  a.edge_src = src;
  a.edge_dst = dst;
  a.index_type = NG_INT32;
  a.edges = m;
  a.undirected = 0; /* the list holds both directions already */
  a.labels = lab64;
  a.label_type = NG_INT64;
  a.split[0] = a.split[1] = NULL;
  a.split_size[0] = a.split_size[1] = 0;
  a.split[2] = test32;
  a.split_type = NG_INT32;
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_from_arrays(&ds, &a));
  if (ds) {
    EXPECT_EQ_I(ds->csr.nnz, m);
    bool same = true;
    for (int64_t v = 0; v <= nodes; v++)
      same &= ds->csr.indptr[v] == cora->csr.indptr[v];
    for (int64_t e = 0; e < m; e++)
      same &= ng__csr_index(&ds->csr, e) == ng__csr_index(&cora->csr, e);
    EXPECT_TRUE(same);
    EXPECT_TRUE(ds->labels != cora->labels && ds->labels[5] == cora->labels[5]);
    EXPECT_EQ_I(ds->split[2][17], cora->split[2][17]);
    EXPECT_EQ_I(ds->info.classes, cora->info.classes); /* from the largest label */
    ng_dataset_close(ds);
  }
  /* undirected: each listed edge in both directions (a 3-node path 0 -> 1 -> 2) */
  const int64_t s3[2] = {0, 1}, d3[2] = {1, 2};
  ng_dataset_arrays p = NG_DATASET_ARRAYS_INIT;
  p.nodes = 3;
  p.edge_src = s3;
  p.edge_dst = d3;
  p.edges = 2;
  p.undirected = 1;
  EXPECT_OK(ng_dataset_from_arrays(&ds, &p));
  if (ds) {
    const int64_t want_ptr[4] = {0, 1, 3, 4}, want_idx[4] = {1, 0, 2, 1};
    for (int i = 0; i < 4; i++) {
      EXPECT_EQ_I(ds->csr.indptr[i], want_ptr[i]);
      EXPECT_EQ_I(ng__csr_index(&ds->csr, i), want_idx[i]);
    }
    ng_dataset_close(ds);
  }
  free(src);
  free(dst);
  free(lab64);
  free(test32);
}

/* Bad arrays fail as a bad folder does, naming the array, the position and the value. */
static void test_arrays_validation(void) {
  ng_dataset_t ds = NULL;
  ng_dataset_arrays a = cora_arrays();
  const int64_t nodes = cora->info.nodes, m = cora->info.edges;
  int32_t *idx = ng_test_xmalloc((size_t)m * sizeof *idx);
  for (int64_t e = 0; e < m; e++)
    idx[e] = (int32_t)ng__csr_index(&cora->csr, e);
  idx[100] = (int32_t)nodes; /* out of range */
  a.indices = idx;
  a.index_type = NG_INT32;
  EXPECT_STATUS(ng_dataset_from_arrays(&ds, &a), NG_ERR_FORMAT);
  EXPECT_TRUE(ds == NULL);
  EXPECT_ERR_HAS("indices[100] = 2708");
  EXPECT_ERR_HAS("ng_dataset_from_arrays(cora-mem)");
  free(idx);

  a = cora_arrays();
  int32_t *lab = ng_test_xmalloc((size_t)nodes * sizeof *lab);
  memcpy(lab, cora->labels, (size_t)nodes * sizeof *lab);
  lab[9] = 7;
  a.labels = lab;
  a.classes = 7;
  EXPECT_STATUS(ng_dataset_from_arrays(&ds, &a), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("labels[9] = 7");
  free(lab);

  a = cora_arrays();
  a.split[1] = cora->split[0]; /* val = train: not disjoint */
  a.split_size[1] = cora->info.train;
  EXPECT_STATUS(ng_dataset_from_arrays(&ds, &a), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("also in");

  a = cora_arrays();
  float *x = ng_test_xmalloc((size_t)nodes * (size_t)a.feature_dim * sizeof *x);
  memcpy(x, cora->features, (size_t)nodes * (size_t)a.feature_dim * sizeof *x);
  x[3 * a.feature_dim + 2] = NAN;
  a.features = x;
  a.check_features = 1;
  EXPECT_STATUS(ng_dataset_from_arrays(&ds, &a), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("features[3, 2] is NaN");
  free(x);

  a = cora_arrays();
  a.edge_src = a.indices; /* both a CSR and an edge list */
  EXPECT_STATUS(ng_dataset_from_arrays(&ds, &a), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not both");
  a = cora_arrays();
  a.size = 8;
  EXPECT_STATUS(ng_dataset_from_arrays(&ds, &a), NG_ERR_INVALID_ARG);
}

/* The checkpoint records the model; ng_model_from_checkpoint rebuilds it; a mismatch names the
 * setting and both values; load_weights serves inference on another trainer. */
static void test_checkpoint_describes_model(void) {
  ng_model_t m = sage(NG_AGGREGATOR_MEAN, 32);
  ng_trainer_t t = NULL;
  double loss = 0;
  double acc = train(&t, cora, m, 5, &loss);
  if (!t)
    return;
  const char *path = ng_test_path("sage.safetensors");
  char ck[4096];
  snprintf(ck, sizeof ck, "%s", path);
  EXPECT_OK(ng_trainer_save(t, ck));

  ng_model_t back = NULL;
  EXPECT_OK(ng_model_from_checkpoint(&back, ck));
  if (back) {
    ng_model_kind kind = NG_MODEL_GCN;
    int64_t in_dim = 0;
    int32_t layers = 0;
    EXPECT_OK(ng_model_kind_get(&kind, &in_dim, back));
    EXPECT_OK(ng_model_shape(&layers, NULL, back));
    EXPECT_EQ_I(kind, NG_MODEL_SAGE);
    EXPECT_EQ_I(in_dim, cora->info.feature_dim);
    EXPECT_EQ_I(layers, 2);
    for (int l = 0; l < 2; l++) {
      ng_layer_opts a = NG_LAYER_OPTS_INIT, b = NG_LAYER_OPTS_INIT;
      EXPECT_OK(ng_model_layer_get(&a, m, l));
      EXPECT_OK(ng_model_layer_get(&b, back, l));
      EXPECT_EQ_I(a.fanout, b.fanout);
      EXPECT_EQ_I(a.out_dim, b.out_dim);
      EXPECT_STR(ng_aggregator_name(a.aggregator), ng_aggregator_name(b.aggregator));
      EXPECT_EQ_I(a.activation, b.activation);
      EXPECT_EQ_I(a.bias, b.bias);
      EXPECT_TRUE(a.dropout == b.dropout && a.weight_decay == b.weight_decay);
    }
  }
  ng_checkpoint_info ci = NG_CHECKPOINT_INFO_INIT;
  EXPECT_OK(ng_checkpoint_info_get(&ci, ck));
  EXPECT_EQ_I(ci.described, 1);
  EXPECT_EQ_I(ci.normalize, NG_NORMALIZE_ROW);
  EXPECT_EQ_I(ci.epochs_done, 5);
  EXPECT_EQ_I(ci.seed, 7);
  EXPECT_EQ_I(ci.nodes, cora->info.nodes);

  /* The rebuilt model, with another seed, evaluates the weights exactly as the original. */
  ng_train_opts o = cpu_opts();
  o.seed = 99;
  ng_trainer_t t2 = NULL;
  EXPECT_OK(ng_trainer_create(&t2, cora, back, &o));
  EXPECT_STATUS(ng_trainer_load(t2, ck), NG_ERR_FORMAT); /* resuming needs the seed */
  EXPECT_ERR_HAS("seed 7");
  EXPECT_OK(ng_trainer_load_weights(t2, ck));
  double acc2 = -1;
  EXPECT_OK(ng_trainer_evaluate(&acc2, NULL, t2, NG_SPLIT_TEST));
  EXPECT_TRUE(acc2 == acc);

  /* Mismatches: the aggregator, the normalisation, the fanouts (resume only). */
  ng_model_t mx = sage(NG_AGGREGATOR_MAX, 32);
  ng_trainer_t t3 = NULL;
  o = cpu_opts();
  EXPECT_OK(ng_trainer_create(&t3, cora, mx, &o));
  EXPECT_STATUS(ng_trainer_load(t3, ck), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("trained with --aggregator mean (layer 0), this run uses max");
  EXPECT_STATUS(ng_trainer_load_weights(t3, ck), NG_ERR_FORMAT);
  ng_trainer_destroy(t3);
  o.normalize = NG_NORMALIZE_NONE;
  EXPECT_OK(ng_trainer_create(&t3, cora, m, &o));
  EXPECT_STATUS(ng_trainer_load(t3, ck), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("--normalize-features row, this run uses none");
  ng_trainer_destroy(t3);
  ng_model_t mf = NULL;
  EXPECT_OK(ng_model_create(&mf, NG_MODEL_SAGE, cora->info.feature_dim));
  for (int l = 0; l < 2; l++) {
    ng_layer_opts lo = NG_LAYER_OPTS_INIT;
    EXPECT_OK(ng_model_layer_get(&lo, m, l));
    lo.fanout = l == 0 ? 10 : 5; /* reversed */
    EXPECT_OK(ng_model_add_layer(mf, &lo));
  }
  o = cpu_opts();
  EXPECT_OK(ng_trainer_create(&t3, cora, mf, &o));
  EXPECT_STATUS(ng_trainer_load(t3, ck), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("--fanouts 10,5, this run uses 5,10");
  EXPECT_OK(ng_trainer_load_weights(t3, ck)); /* inference: fanouts do not matter */
  ng_trainer_destroy(t3);

  ng_model_destroy(mf);
  ng_model_destroy(mx);
  ng_trainer_destroy(t2);
  ng_model_destroy(back);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

/* A checkpoint from before the description (its keys removed) still loads, its shapes checked;
 * the model cannot be rebuilt from it. */
static void test_checkpoint_without_description(void) {
  ng_model_t m = sage(NG_AGGREGATOR_MEAN, 16);
  ng_trainer_t t = NULL;
  double loss = 0;
  train(&t, cora, m, 1, &loss);
  if (!t)
    return;
  char ck[4096], old[4096];
  snprintf(ck, sizeof ck, "%s", ng_test_path("new.safetensors"));
  snprintf(old, sizeof old, "%s", ng_test_path("old.safetensors"));
  EXPECT_OK(ng_trainer_save(t, ck));
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, ck));
  ng_st_meta meta[NG_ST_MAX_META];
  int n = 0;
  /* Format version 1 files had no header CRC. */
  for (int i = 0; i < f.n_meta; i++)
    if (strncmp(f.meta[i].key, "model.", 6) != 0 && strncmp(f.meta[i].key, "dataset.", 8) != 0 &&
        strncmp(f.meta[i].key, "train.", 6) != 0 && strcmp(f.meta[i].key, "header_crc") != 0) {
      meta[n] = f.meta[i];
      if (strcmp(meta[n].key, "version") == 0)
        snprintf(meta[n].value, sizeof meta[n].value, "1");
      n++;
    }
  EXPECT_TRUE(n < f.n_meta);
  EXPECT_OK(ng__st_write(old, f.tensors, f.n, meta, n));
  ng__st_close(&f);
  ng_model_t back = NULL;
  EXPECT_STATUS(ng_model_from_checkpoint(&back, old), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("does not record its model's settings");
  ng_checkpoint_info ci = NG_CHECKPOINT_INFO_INIT;
  EXPECT_OK(ng_checkpoint_info_get(&ci, old));
  EXPECT_EQ_I(ci.described, 0);
  EXPECT_OK(ng_trainer_load(t, old));
  ng_model_t wide = sage(NG_AGGREGATOR_MEAN, 32); /* shapes are still checked */
  ng_trainer_t t2 = NULL;
  ng_train_opts o = cpu_opts();
  EXPECT_OK(ng_trainer_create(&t2, cora, wide, &o));
  EXPECT_STATUS(ng_trainer_load(t2, old), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("shape");
  ng_trainer_destroy(t2);
  ng_model_destroy(wide);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

/* Logits and classes of a subset are the rows of every node's. */
static void test_predict_nodes(void) {
  ng_model_t m = sage(NG_AGGREGATOR_MEAN, 16);
  ng_trainer_t t = NULL;
  double loss = 0;
  train(&t, cora, m, 3, &loss);
  if (!t)
    return;
  const int64_t nodes = cora->info.nodes, k = cora->info.classes;
  float *all = ng_test_xmalloc((size_t)nodes * (size_t)k * sizeof *all);
  int32_t *cls = ng_test_xmalloc((size_t)nodes * sizeof *cls);
  int32_t *pred = ng_test_xmalloc((size_t)nodes * sizeof *pred);
  for (int64_t i = 0; i < nodes * k; i++)
    all[i] = NAN; /* poisoned */
  EXPECT_OK(ng_trainer_predict_nodes(all, cls, t, NULL, nodes));
  EXPECT_OK(ng_trainer_predict(pred, t));
  bool same = true, finite = true;
  for (int64_t v = 0; v < nodes; v++)
    same &= cls[v] == pred[v];
  for (int64_t i = 0; i < nodes * k; i++)
    finite &= isfinite(all[i]) != 0;
  EXPECT_TRUE(same);
  EXPECT_TRUE(finite);
  const int64_t ids[4] = {2707, 0, 1500, 0};
  float sub[4 * 16];
  int32_t sub_cls[4] = {-1, -1, -1, -1};
  EXPECT_OK(ng_trainer_predict_nodes(sub, sub_cls, t, ids, 4));
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ_I(sub_cls[i], pred[ids[i]]);
    EXPECT_TRUE(memcmp(sub + i * k, all + ids[i] * k, (size_t)k * sizeof(float)) == 0);
  }
  const int64_t bad[1] = {nodes};
  EXPECT_STATUS(ng_trainer_predict_nodes(NULL, sub_cls, t, bad, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("nodes[0] = 2708");
  free(all);
  free(cls);
  free(pred);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

int main(void) {
  open_cora();
  RUN_TEST(test_arrays_zero_copy_same_training);
  RUN_TEST(test_arrays_edge_list);
  RUN_TEST(test_arrays_left_intact);
  RUN_TEST(test_arrays_validation);
  RUN_TEST(test_checkpoint_describes_model);
  RUN_TEST(test_checkpoint_without_description);
  RUN_TEST(test_predict_nodes);
  ng_dataset_close(cora);
  return ng_test_summary();
}
