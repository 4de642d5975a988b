/* The link-prediction generator (ng_dataset_generate_links, docs/generate.md#links): the same
 * seed writes the same files whatever the thread count, a different seed other files, the
 * planted communities make the edges homophilous in the classes, and a GNN trained a few epochs
 * on a split of a small generated graph predicts its held-out edges far above chance. */
#include "npy_impl.h"
#include "ng_test.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const FILES[] = {"indptr.npy", "indices.npy", "labels.npy", "features.npy"};

static ng_generate_opts small_opts(int64_t nodes, uint64_t seed, int threads) {
  ng_generate_opts o = NG_GENERATE_OPTS_INIT;
  o.nodes = nodes;
  o.avg_degree = 10.0;
  o.classes = 4;
  o.homophily = 0.9;
  o.feature_dim = 16;
  o.seed = seed;
  o.threads = threads;
  return o;
}

static char *read_in(const char *dir, const char *file, size_t *len) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *buf = ng_test_read_file(path, len);
  if (!buf)
    ng_test_fail(__FILE__, __LINE__, "cannot read %s", path);
  return buf;
}

/* 1: every file of `a` equals its namesake in `b`, byte for byte; 0 if one differs. */
static int same_files(const char *a, const char *b) {
  int same = 1;
  for (size_t i = 0; i < NG_TEST_LEN(FILES); i++) {
    size_t la = 0, lb = 0;
    char *x = read_in(a, FILES[i], &la), *y = read_in(b, FILES[i], &lb);
    if (!x || !y || la != lb || memcmp(x, y, la) != 0)
      same = 0;
    free(x);
    free(y);
  }
  return same;
}

static void test_same_seed_same_files(void) {
  char a[4096], b[4096], c[4096];
  snprintf(a, sizeof a, "%s", ng_test_path("links_t1"));
  snprintf(b, sizeof b, "%s", ng_test_path("links_t2"));
  snprintf(c, sizeof c, "%s", ng_test_path("links_seed2"));
  ng_generate_links_opts lo = NG_GENERATE_LINKS_OPTS_INIT;
  lo.communities = 40;
  ng_generate_opts o1 = small_opts(5000, 7, 1), o2 = small_opts(5000, 7, 2);
  ng_generate_opts o3 = small_opts(5000, 8, 2);
  EXPECT_OK(ng_dataset_generate_links(a, &o1, &lo));
  EXPECT_OK(ng_dataset_generate_links(b, &o2, &lo));
  EXPECT_OK(ng_dataset_generate_links(c, &o3, &lo));
  EXPECT_TRUE(same_files(a, b));
  EXPECT_TRUE(!same_files(a, c));

  /* Labels are communities modulo the classes; a row draws 90% of its entries from its own
   * community, so at least that share of the edges joins two nodes of one class. */
  ng_dataset_t ds = ng_test_open_ok(a);
  if (!ds)
    return;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(info.classes, 4);
  ng_dataset_close(ds);
  size_t lp = 0, lx = 0, ll = 0;
  char *bp = read_in(a, "indptr.npy", &lp), *bx = read_in(a, "indices.npy", &lx);
  char *bl = read_in(a, "labels.npy", &ll);
  ng_npy_header hp, hx, hl;
  if (bp && bx && bl && ng__npy_parse_header(&hp, bp, lp, "indptr") == NG_OK &&
      ng__npy_parse_header(&hx, bx, lx, "indices") == NG_OK &&
      ng__npy_parse_header(&hl, bl, ll, "labels") == NG_OK) {
    const int64_t *indptr = (const int64_t *)(bp + hp.data_offset);
    const int32_t *indices = (const int32_t *)(bx + hx.data_offset);
    const int32_t *labels = (const int32_t *)(bl + hl.data_offset);
    int64_t same = 0, edges = indptr[5000];
    for (int64_t v = 0; v < 5000; v++)
      for (int64_t e = indptr[v]; e < indptr[v + 1]; e++)
        same += labels[v] == labels[indices[e]];
    const double share = (double)same / (double)edges;
    printf("  %lld edges, same-class share %.4f\n", (long long)edges, share);
    EXPECT_TRUE(edges > 40000 && edges < 60000);
    EXPECT_TRUE(share > 0.88);
  } else {
    ng_test_fail(__FILE__, __LINE__, "cannot parse the generated arrays");
  }
  free(bp);
  free(bx);
  free(bl);
}

static void test_bad_links_options(void) {
  ng_generate_opts o = small_opts(100, 1, 1);
  ng_generate_links_opts lo = NG_GENERATE_LINKS_OPTS_INIT;
  lo.communities = 101;
  EXPECT_STATUS(ng_dataset_generate_links(ng_test_path("links_bad"), &o, &lo), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("communities is 101");
  EXPECT_TRUE(!ng_test_exists(ng_test_path("links_bad")));
  lo.communities = 0;
  lo.size = 4;
  EXPECT_STATUS(ng_dataset_generate_links(ng_test_path("links_bad"), &o, &lo), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_GENERATE_LINKS_OPTS_INIT");
}

/* Generate, split, train 3 epochs of 2-layer GraphSAGE with a dot decoder: the test AUC is far
 * above chance. One random draw of the held-out edges' scores gives an AUC within about 0.02 of
 * 0.5 at this size (a few thousand pairs), so 0.8 cannot be reached without learning. */
static void test_generated_links_predictable(void) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path("links_train"));
  ng_generate_opts o = small_opts(3000, 3, 2);
  EXPECT_OK(ng_dataset_generate_links(dir, &o, NULL));
  ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
  so.neg_per_pos = 1;
  so.neg_source = 1; /* both ends uniform: the Planetoid protocol, for AUC */
  so.seed = 2;
  EXPECT_OK(ng_dataset_split_edges(NULL, dir, &so));
  ng_dataset_t ds = ng_test_open_ok(dir);
  if (!ds)
    return;
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 16));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = NG_AGGREGATOR_MEAN;
  l0.fanout = 10;
  l1.fanout = 5;
  l0.out_dim = 32;
  l1.out_dim = 16;
  l0.activation = NG_ACT_RELU;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts t = NG_TRAIN_OPTS_INIT;
  t.batch = 256;
  t.seed = 1;
  t.threads = 2;
  t.lr = 0.01;
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  ng_link_trainer_t tr = NULL;
  EXPECT_OK(ng_link_trainer_create(&tr, ds, m, &t, &lo));
  if (tr) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    for (int e = 0; e < 3; e++)
      EXPECT_OK(ng_link_trainer_epoch(&s, tr));
    ng_link_metrics r = NG_LINK_METRICS_INIT;
    EXPECT_OK(ng_link_trainer_evaluate(&r, tr, NG_SPLIT_TEST));
    printf("  loss %.4f, test auc %.4f ap %.4f over %lld positives\n", s.loss, r.auc, r.ap,
           (long long)r.positives);
    EXPECT_TRUE(r.positives > 2000);
    EXPECT_TRUE(r.auc > 0.8);
    /* An epoch capped at 2 mini-batches trains 2 (of about 100). */
    EXPECT_STATUS(ng_link_trainer_set_epoch_iters(tr, -1), NG_ERR_INVALID_ARG);
    EXPECT_OK(ng_link_trainer_set_epoch_iters(tr, 2));
    EXPECT_OK(ng_link_trainer_epoch(&s, tr));
    EXPECT_EQ_I(s.iterations, 2);
    ng_link_trainer_destroy(tr);
  }
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

int main(void) {
  omp_set_num_threads(2);
  RUN_TEST(test_same_seed_same_files);
  RUN_TEST(test_bad_links_options);
  RUN_TEST(test_generated_links_predictable);
  return ng_test_summary();
}
