/* Hot-set scores and reordering: scores against plain serial references, determinism across
 * thread counts, the order, and reordered datasets (graph, features, labels, splits and orig_id
 * moved with their nodes; a reorder of a reorder composes orig_id). */
#include "rng.h"
#include "dataset_impl.h"
#include "ng_test.h"
#include "tiering_impl.h"

#include <dirent.h>
#include <stdlib.h>

/* ---- small graphs ---- */

/* A random CSR with empty rows, repeated entries and self loops (int32 indices). */
static void random_csr(ng_csr *g, int64_t nodes, int max_row, uint64_t seed) {
  ng_rng r;
  ng_rng_seed(&r, seed);
  int64_t *len = ng_test_xmalloc((size_t)nodes * sizeof *len);
  int64_t nnz = 0;
  for (int64_t v = 0; v < nodes; v++) {
    /* About one row in five is empty, so the dangling mass matters. */
    len[v] = ng_rng_below(&r, 5) == 0 ? 0 : (int64_t)ng_rng_below(&r, (uint64_t)max_row) + 1;
    nnz += len[v];
  }
  if (ng__csr_alloc(g, nodes, nnz) != NG_OK) {
    fprintf(stderr, "cannot allocate a test graph: %s\n", ng_last_error());
    exit(2);
  }
  g->indptr[0] = 0;
  for (int64_t v = 0; v < nodes; v++) {
    g->indptr[v + 1] = g->indptr[v] + len[v];
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++) {
      /* Skewed choice (the minimum of two draws), so some nodes are hot. */
      uint64_t a = ng_rng_below(&r, (uint64_t)nodes), b = ng_rng_below(&r, (uint64_t)nodes);
      g->idx32[e] = (int32_t)(a < b ? a : b);
    }
  }
  free(len);
}

/* The reverse PageRank of tiering_impl.h by a plain serial push loop. */
static void reference_pagerank(double *out, const ng_csr *g, const int64_t *train, int64_t n_train,
                               bool weighted, int iterations) {
  int64_t n = g->nodes;
  double *tele = calloc((size_t)n, sizeof *tele), *next = calloc((size_t)n, sizeof *next);
  bool *is_train = calloc((size_t)n, sizeof *is_train);
  int64_t marked = 0;
  for (int64_t i = 0; i < n_train; i++)
    if (!is_train[train[i]]) {
      is_train[train[i]] = true;
      marked++;
    }
  for (int64_t v = 0; v < n; v++) {
    if (weighted) {
      double w = (double)n / (double)marked;
      out[v] = (is_train[v] ? w : 1.0) / ((double)marked * w + (double)(n - marked));
      tele[v] = is_train[v] ? 1.0 / (double)marked : 0.0;
    } else {
      out[v] = tele[v] = 1.0 / (double)n;
    }
  }
  for (int it = 0; it < iterations; it++) {
    double dangling = 0.0;
    for (int64_t v = 0; v < n; v++)
      next[v] = 0.0;
    for (int64_t v = 0; v < n; v++) {
      int64_t len = g->indptr[v + 1] - g->indptr[v];
      if (len == 0)
        dangling += out[v];
      for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
        next[g->idx32[e]] += out[v] / (double)len;
    }
    for (int64_t v = 0; v < n; v++)
      out[v] = (1.0 - NG_HOT_DAMPING) * tele[v] + NG_HOT_DAMPING * (next[v] + dangling * tele[v]);
  }
  free(tele);
  free(next);
  free(is_train);
}

static const int64_t TRAIN_IDS[] = {3, 17, 17, 40, 41, 99, 150, 151, 152, 199};

static void test_scores_match_reference(void) {
  ng_csr g = {0};
  random_csr(&g, 200, 9, 11);
  double *got = ng_test_xmalloc(200 * sizeof *got), *want = ng_test_xmalloc(200 * sizeof *want);

  EXPECT_OK(ng__hot_scores(got, &g, NG_HOT_DEGREE, NULL, 0, 0, 2, NULL));
  for (int64_t v = 0; v < 200; v++)
    want[v] = 0;
  for (int64_t e = 0; e < g.nnz; e++)
    want[g.idx32[e]] += 1;
  for (int64_t v = 0; v < 200; v++)
    EXPECT_NEAR(got[v], want[v], 0);

  for (int weighted = 0; weighted <= 1; weighted++) {
    int iters[] = {1, 3, 10};
    for (size_t k = 0; k < NG_TEST_LEN(iters); k++) {
      EXPECT_OK(ng__hot_scores(got, &g, weighted ? NG_HOT_WRPR : NG_HOT_RPR, TRAIN_IDS,
                               (int64_t)NG_TEST_LEN(TRAIN_IDS), iters[k], 3, NULL));
      reference_pagerank(want, &g, TRAIN_IDS, (int64_t)NG_TEST_LEN(TRAIN_IDS), weighted, iters[k]);
      double sum = 0;
      for (int64_t v = 0; v < 200; v++) {
        EXPECT_NEAR(got[v], want[v], 1e-15);
        sum += got[v];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  }
  free(got);
  free(want);
  ng__csr_free(&g);
}

static void test_scores_deterministic(void) {
  /* Enough nodes for several summation blocks, so thread counts split the work differently. */
  const int64_t n = 40000;
  ng_csr g = {0};
  random_csr(&g, n, 12, 5);
  int64_t train[500];
  for (int i = 0; i < 500; i++)
    train[i] = (int64_t)i * 79 % n;
  ng_hot_score kinds[] = {NG_HOT_DEGREE, NG_HOT_RPR, NG_HOT_WRPR};
  double *one = ng_test_xmalloc((size_t)n * sizeof *one),
         *other = ng_test_xmalloc((size_t)n * sizeof *other);
  int64_t *p1 = ng_test_xmalloc((size_t)n * sizeof *p1),
          *p2 = ng_test_xmalloc((size_t)n * sizeof *p2);
  for (size_t k = 0; k < NG_TEST_LEN(kinds); k++) {
    EXPECT_OK(ng__hot_scores(one, &g, kinds[k], train, 500, 10, 1, NULL));
    EXPECT_OK(ng__hot_order(p1, one, n, 1));
    for (int t = 2; t <= 3; t++) {
      EXPECT_OK(ng__hot_scores(other, &g, kinds[k], train, 500, 10, t, NULL));
      EXPECT_TRUE(memcmp(one, other, (size_t)n * sizeof *one) == 0);
      EXPECT_OK(ng__hot_order(p2, other, n, t));
      EXPECT_TRUE(memcmp(p1, p2, (size_t)n * sizeof *p1) == 0);
    }
  }
  free(one);
  free(other);
  free(p1);
  free(p2);
  ng__csr_free(&g);
}

static void test_order_sorted(void) {
  const int64_t sizes[] = {1, 2, 7, 1000};
  for (size_t k = 0; k < NG_TEST_LEN(sizes); k++) {
    int64_t n = sizes[k];
    double *score = ng_test_xmalloc((size_t)n * sizeof *score);
    int64_t *perm = ng_test_xmalloc((size_t)n * sizeof *perm),
            *inv = ng_test_xmalloc((size_t)n * sizeof *inv);
    ng_rng r;
    ng_rng_seed(&r, 3 + (uint64_t)n);
    /* Few distinct values, so many ties must be broken by id. */
    for (int64_t v = 0; v < n; v++)
      score[v] = (double)ng_rng_below(&r, 13) * 0.25;
    for (int t = 1; t <= 3; t++) {
      EXPECT_OK(ng__hot_order(perm, score, n, t));
      EXPECT_OK(ng__perm_check(perm, n));
      for (int64_t v = 0; v < n; v++)
        inv[perm[v]] = v;
      for (int64_t i = 1; i < n; i++) {
        double a = score[inv[i - 1]], b = score[inv[i]];
        EXPECT_TRUE(a > b || (a == b && inv[i - 1] < inv[i]));
      }
    }
    free(score);
    free(perm);
    free(inv);
  }
  double bad[2] = {1.0, NAN};
  int64_t perm[2];
  EXPECT_STATUS(ng__hot_order(perm, bad, 2, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NaN");
}

/* Two copies of one shape, 0..4 and 5..9; only node 0 is a training node. Rank flows along rows:
 * 0 -> {1, 2}, 1 -> {3}, 3 -> {4} and the same for 5 -> {6, 7}, 6 -> {8}, 8 -> {9}. */
static void test_wrpr_favours_training(void) {
  ng_csr g = {0};
  EXPECT_OK(ng__csr_alloc(&g, 10, 8));
  const int64_t indptr[] = {0, 2, 3, 3, 4, 4, 6, 7, 7, 8, 8};
  const int32_t idx[] = {1, 2, 3, 4, 6, 7, 8, 9};
  memcpy(g.indptr, indptr, sizeof indptr);
  memcpy(g.idx32, idx, sizeof idx);
  const int64_t train[] = {0};
  double rpr[10], wrpr[10];
  EXPECT_OK(ng__hot_scores(rpr, &g, NG_HOT_RPR, NULL, 0, 10, 2, NULL));
  EXPECT_OK(ng__hot_scores(wrpr, &g, NG_HOT_WRPR, train, 1, 10, 2, NULL));
  double rpr_near = 0, wrpr_near = 0;
  for (int v = 0; v < 5; v++) {
    EXPECT_NEAR(rpr[v], rpr[v + 5], 1e-15); /* the copies are alike without training nodes */
    EXPECT_TRUE(wrpr[v] > wrpr[v + 5]);
    rpr_near += rpr[v];
    wrpr_near += wrpr[v];
  }
  EXPECT_NEAR(rpr_near, 0.5, 1e-12);
  EXPECT_TRUE(wrpr_near > 0.9);
  int64_t perm[10];
  EXPECT_OK(ng__hot_order(perm, wrpr, 10, 2));
  for (int v = 0; v < 5; v++)
    EXPECT_TRUE(perm[v] < 5); /* the training side is the hot set */

  EXPECT_STATUS(ng__hot_scores(wrpr, &g, NG_HOT_WRPR, train, 0, 10, 2, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("training");
  EXPECT_STATUS(ng__hot_scores(rpr, &g, NG_HOT_RPR, NULL, 0, 0, 2, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("iterations");
  ng__csr_free(&g);
}

/* ---- reordered datasets ---- */

static const char *make_source(void) {
  static char dir[1024];
  if (dir[0])
    return dir;
  snprintf(dir, sizeof dir, "%s", ng_test_path("src"));
  ng_generate_opts o = NG_GENERATE_OPTS_INIT;
  o.nodes = 600;
  o.avg_degree = 6;
  o.classes = 4;
  o.feature_dim = 5;
  o.seed = 9;
  EXPECT_OK(ng_dataset_generate(dir, &o));
  return dir;
}

/* Checks that `dst` is `src` renumbered, with dst's orig_id giving src's ids, and that the first
 * ids are the ones with the highest in-degree when `by_degree`. */
static void expect_relabelled(ng_dataset_t src, ng_dataset_t dst, bool by_degree) {
  EXPECT_EQ_I(dst->info.nodes, src->info.nodes);
  EXPECT_EQ_I(dst->info.edges, src->info.edges);
  EXPECT_EQ_I(dst->info.index_bytes, src->info.index_bytes);
  EXPECT_EQ_I(dst->info.orig_ids, 1);
  int64_t n = src->info.nodes, dim = src->info.feature_dim;
  const int64_t *orig = dst->arrays[NG_ARR_ORIG_ID].data;
  const int64_t *src_orig = src->info.orig_ids ? src->arrays[NG_ARR_ORIG_ID].data : NULL;
  /* src's node of each dst node: invert src's own orig_id when it has one. */
  int64_t *to_src = ng_test_xmalloc((size_t)n * sizeof *to_src);
  int64_t *seen = ng_test_xmalloc((size_t)n * sizeof *seen);
  for (int64_t v = 0; v < n; v++)
    seen[v] = -1;
  int64_t *from_orig = NULL;
  if (src_orig) {
    from_orig = ng_test_xmalloc((size_t)n * sizeof *from_orig);
    for (int64_t v = 0; v < n; v++)
      from_orig[src_orig[v]] = v;
  }
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t o = orig[i];
    int64_t v = src_orig ? from_orig[o] : o;
    to_src[i] = v;
    if (v < 0 || v >= n || seen[v] >= 0) {
      bad++;
      continue;
    }
    seen[v] = i;
  }
  EXPECT_EQ_I(bad, 0);
  if (bad)
    goto done;
  int64_t edge_bad = 0, feat_bad = 0, label_bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = to_src[i];
    int64_t len = dst->csr.indptr[i + 1] - dst->csr.indptr[i];
    if (len != src->csr.indptr[v + 1] - src->csr.indptr[v]) {
      edge_bad++;
      continue;
    }
    /* Rows keep their order: the k-th neighbour maps back to src's k-th neighbour. */
    for (int64_t k = 0; k < len; k++)
      edge_bad += to_src[ng__csr_index(&dst->csr, dst->csr.indptr[i] + k)] !=
                  ng__csr_index(&src->csr, src->csr.indptr[v] + k);
    if (dim)
      feat_bad += memcmp(dst->features + i * dim, src->features + v * dim,
                         (size_t)dim * sizeof(float)) != 0;
    if (src->labels)
      label_bad += dst->labels[i] != src->labels[v];
  }
  EXPECT_EQ_I(edge_bad, 0);
  EXPECT_EQ_I(feat_bad, 0);
  EXPECT_EQ_I(label_bad, 0);
  const int64_t counts[3] = {src->info.train, src->info.val, src->info.test};
  for (int s = 0; s < 3; s++) {
    EXPECT_EQ_I((s == 0 ? dst->info.train : s == 1 ? dst->info.val : dst->info.test), counts[s]);
    if (!counts[s])
      continue;
    int64_t *mapped = ng_test_xmalloc((size_t)counts[s] * sizeof *mapped);
    int64_t *want = ng_test_xmalloc((size_t)counts[s] * sizeof *want);
    int64_t unsorted = 0;
    for (int64_t j = 0; j < counts[s]; j++) {
      mapped[j] = to_src[dst->split[s][j]];
      want[j] = src->split[s][j];
      unsorted += j > 0 && dst->split[s][j - 1] >= dst->split[s][j];
    }
    EXPECT_EQ_I(unsorted, 0);
    qsort(mapped, (size_t)counts[s], sizeof *mapped, ng_test_cmp_i64);
    qsort(want, (size_t)counts[s], sizeof *want, ng_test_cmp_i64);
    EXPECT_TRUE(memcmp(mapped, want, (size_t)counts[s] * sizeof *want) == 0);
    free(mapped);
    free(want);
  }
  if (by_degree) {
    int64_t *deg = ng_test_xmalloc((size_t)n * sizeof *deg);
    EXPECT_OK(ng__csr_in_degrees(&dst->csr, deg));
    int64_t rising = 0;
    for (int64_t i = 1; i < n; i++)
      rising += deg[i] > deg[i - 1];
    EXPECT_EQ_I(rising, 0);
    EXPECT_TRUE(deg[0] > deg[n - 1]);
    free(deg);
  }
done:
  free(to_src);
  free(seen);
  free(from_orig);
}

static bool leftovers(const char *dir) {
  DIR *d = opendir(dir);
  bool found = false;
  struct dirent *e;
  while (d && (e = readdir(d)))
    found |= strstr(e->d_name, ".tmp-") != NULL;
  if (d)
    closedir(d);
  return found;
}

static void test_reorder_dataset(void) {
  ng_dataset_t src = ng_test_open_ok(make_source());
  if (!src)
    return;
  char r1[1024], r2[1024];
  snprintf(r1, sizeof r1, "%s", ng_test_path("wrpr"));
  snprintf(r2, sizeof r2, "%s", ng_test_path("wrpr-degree"));
  ng_reorder_opts o = NG_REORDER_OPTS_INIT;
  double share[NG_REORDER_SHARES] = {-1, -1, -1};
  o.score = NG_HOT_WRPR;
  o.threads = 2;
  o.entry_share = share;
  EXPECT_OK(ng_dataset_reorder(r1, src, &o));
  EXPECT_TRUE(share[0] > 0.05 && share[0] <= share[1] && share[1] <= share[2] && share[2] <= 1);
  ng_dataset_t d1 = ng_test_open_ok(r1);
  if (d1) {
    expect_relabelled(src, d1, false);
    /* A reorder of the reorder: orig_id still names the generated dataset's ids. */
    o.score = NG_HOT_DEGREE;
    o.threads = 3;
    EXPECT_OK(ng_dataset_reorder(r2, d1, &o));
    ng_dataset_t d2 = ng_test_open_ok(r2);
    if (d2) {
      expect_relabelled(src, d2, true);
      expect_relabelled(d1, d2, true);
    }
    ng_dataset_close(d2);
  }
  char *json_path = ng__path_join(r1, "dataset.json");
  char *json = json_path ? ng_test_read_file(json_path, NULL) : NULL;
  EXPECT_TRUE(json && strstr(json, "wrpr") && strstr(json, make_source()));
  free(json);
  free(json_path);

  /* The same files for another thread count. */
  char r3[1024];
  snprintf(r3, sizeof r3, "%s", ng_test_path("wrpr-1thread"));
  o = (ng_reorder_opts)NG_REORDER_OPTS_INIT;
  o.score = NG_HOT_WRPR;
  o.threads = 1;
  EXPECT_OK(ng_dataset_reorder(r3, src, &o));
  const char *files[] = {"indptr.npy", "indices.npy",   "features.npy",
                         "labels.npy", "train_idx.npy", "orig_id.npy"};
  for (size_t k = 0; k < NG_TEST_LEN(files); k++) {
    char a[1100], b[1100];
    size_t la = 0, lb = 0;
    snprintf(a, sizeof a, "%s/%s", r1, files[k]);
    snprintf(b, sizeof b, "%s/%s", r3, files[k]);
    char *x = ng_test_read_file(a, &la), *y = ng_test_read_file(b, &lb);
    EXPECT_TRUE(x && y && la == lb && memcmp(x, y, la) == 0);
    free(x);
    free(y);
  }
  ng_dataset_close(d1);
  ng_dataset_close(src);
}

static int stop_at_features(void *ctx, const char *phase, double done, double total) {
  (void)done;
  (void)total;
  (*(int *)ctx)++;
  return strcmp(phase, "features") == 0;
}

static void test_reorder_errors(void) {
  ng_dataset_t src = ng_test_open_ok(make_source());
  if (!src)
    return;
  EXPECT_STATUS(ng_dataset_reorder(make_source(), src, NULL), NG_ERR_EXISTS);
  char dst[1024];
  snprintf(dst, sizeof dst, "%s", ng_test_path("stopped"));
  ng_reorder_opts o = NG_REORDER_OPTS_INIT;
  int calls = 0;
  o.progress = stop_at_features;
  o.progress_ctx = &calls;
  EXPECT_STATUS(ng_dataset_reorder(dst, src, &o), NG_ERR_INTERRUPTED);
  EXPECT_TRUE(calls > 0);
  EXPECT_TRUE(!ng_test_exists(dst));
  EXPECT_TRUE(!leftovers(ng_test_tmpdir()));
  o = (ng_reorder_opts)NG_REORDER_OPTS_INIT;
  o.score = NG_HOT_RPR; /* iterations matter to the PageRank scores only */
  o.iterations = 0;
  EXPECT_STATUS(ng_dataset_reorder(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("iterations");
  o = (ng_reorder_opts)NG_REORDER_OPTS_INIT;
  o.score = (ng_hot_score)7;
  EXPECT_STATUS(ng_dataset_reorder(dst, src, &o), NG_ERR_INVALID_ARG);
  o.score = NG_HOT_RPR;
  o.size = 3;
  EXPECT_STATUS(ng_dataset_reorder(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_REORDER_OPTS_INIT");
  EXPECT_TRUE(!ng_test_exists(dst));
  EXPECT_TRUE(!leftovers(ng_test_tmpdir()));
  EXPECT_STATUS(ng_dataset_reorder(dst, NULL, NULL), NG_ERR_INVALID_ARG);
  ng_dataset_close(src);
}

/* Real data: Cora (converted, so with its own orig_id) reordered by wrpr keeps everything with
 * its node. */
static void test_reorder_cora(void) {
  char cora[1024];
  snprintf(cora, sizeof cora, "%s/cora", ng_test_data_dir());
  if (!ng_test_exists(cora)) {
    printf("  (no %s: skipped)\n", cora);
    return;
  }
  char conv[1024];
  snprintf(conv, sizeof conv, "%s", ng_test_path("cora"));
  EXPECT_OK(ng_dataset_convert(conv, cora, NULL));
  ng_dataset_t src = ng_test_open_ok(conv);
  if (!src)
    return;
  char dst[1024];
  snprintf(dst, sizeof dst, "%s", ng_test_path("cora-wrpr"));
  EXPECT_OK(ng_dataset_reorder(dst, src, NULL));
  ng_dataset_t d = ng_test_open_ok(dst);
  if (d)
    expect_relabelled(src, d, false);
  ng_dataset_close(d);
  ng_dataset_close(src);
}

int main(void) {
  RUN_TEST(test_scores_match_reference);
  RUN_TEST(test_scores_deterministic);
  RUN_TEST(test_order_sorted);
  RUN_TEST(test_wrpr_favours_training);
  RUN_TEST(test_reorder_dataset);
  RUN_TEST(test_reorder_errors);
  RUN_TEST(test_reorder_cora);
  return ng_test_summary();
}
