/* The graph generator: determinism across thread counts, option checks, CSR structure, the
 * degree distribution's exponent, homophily, class-correlated features, splits, progress and
 * interruption. Every generated dataset is opened with ng_dataset_open, which validates it. */
#include "dataset_impl.h"
#include "ng_test.h"

#include <dirent.h>
#include <stdlib.h>

/* A small default graph for the tests (seconds in total on two cores). */
static ng_generate_opts base_opts(int64_t nodes) {
  ng_generate_opts o = NG_GENERATE_OPTS_INIT;
  o.nodes = nodes;
  o.avg_degree = 12.0;
  o.classes = 8;
  o.feature_dim = 16;
  o.seed = 7;
  return o;
}

/* Generates into a fresh folder named `name` under the test folder; the path goes to `dir`. */
static bool generate(char *dir, size_t cap, const char *name, const ng_generate_opts *o) {
  snprintf(dir, cap, "%s", ng_test_path(name));
  ng_status st = ng_dataset_generate(dir, o);
  if (st != NG_OK) {
    ng_test_fail(__FILE__, __LINE__, "generate %s: %s (%s)", name, ng_status_name(st),
                 ng_last_error());
    return false;
  }
  return true;
}

/* generate(), then the new dataset opened with feature checks; NULL (and a failure) when either
 * step fails. */
static ng_dataset_t generate_open(char *dir, size_t cap, const char *name,
                                  const ng_generate_opts *o) {
  return generate(dir, cap, name, o) ? ng_test_open_ok(dir) : NULL;
}

/* 1 when both files exist and hold the same bytes, 0 when they differ, -1 when one is missing. */
/* Drops dataset.json's "id" line: every dataset written draws a new random id. */
static void drop_id(char *text, size_t *len) {
  char *at = text ? strstr(text, "\"id\":") : NULL;
  char *end = at ? memchr(at, '\n', *len - (size_t)(at - text)) : NULL;
  if (!end)
    return;
  memmove(at, end + 1, *len - (size_t)(end + 1 - text));
  *len -= (size_t)(end + 1 - at);
}

static int same_file(const char *dir_a, const char *dir_b, const char *file) {
  char pa[4200], pb[4200];
  snprintf(pa, sizeof pa, "%s/%s", dir_a, file);
  snprintf(pb, sizeof pb, "%s/%s", dir_b, file);
  size_t la = 0, lb = 0;
  char *a = ng_test_read_file(pa, &la), *b = ng_test_read_file(pb, &lb);
  if (strcmp(file, "dataset.json") == 0) {
    drop_id(a, &la);
    drop_id(b, &lb);
  }
  int r = !a || !b ? -1 : (la == lb && memcmp(a, b, la) == 0);
  free(a);
  free(b);
  return r;
}

/* Counts rows that are not strictly increasing, entries out of range and self loops. */
static int64_t structure_errors(const ng_csr *g) {
  int64_t bad = 0;
  for (int64_t v = 0; v < g->nodes; v++) {
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++) {
      int64_t u = ng__csr_index(g, e);
      bad += u < 0 || u >= g->nodes || u == v;
      bad += e > g->indptr[v] && ng__csr_index(g, e - 1) >= u;
    }
  }
  return bad;
}

static double same_class_share(const ng_csr *g, const int32_t *labels) {
  int64_t same = 0;
  for (int64_t v = 0; v < g->nodes; v++)
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
      same += labels[ng__csr_index(g, e)] == labels[v];
  return g->nnz ? (double)same / (double)g->nnz : 0.0;
}

/* ---- determinism ---- */

static const char *const COMPARED[] = {"indptr.npy",   "indices.npy",   "features.npy",
                                       "labels.npy",   "train_idx.npy", "val_idx.npy",
                                       "test_idx.npy", "dataset.json"};

static void test_same_files_for_any_thread_count(void) {
  ng_generate_opts o = base_opts(30000);
  char dirs[3][4200];
  for (int t = 0; t < 3; t++) {
    char name[32];
    snprintf(name, sizeof name, "det-%d", t + 1);
    o.threads = t + 1;
    if (!generate(dirs[t], sizeof dirs[t], name, &o))
      return;
  }
  for (size_t f = 0; f < NG_TEST_LEN(COMPARED); f++) {
    for (int t = 1; t < 3; t++) {
      int r = same_file(dirs[0], dirs[t], COMPARED[f]);
      if (r != 1)
        ng_test_fail(__FILE__, __LINE__, "%s differs (%d) between 1 and %d threads", COMPARED[f], r,
                     t + 1);
    }
  }
  /* Another seed changes the graph, the features and the splits. */
  char other[4200];
  o.seed = 8;
  o.threads = 2;
  if (!generate(other, sizeof other, "det-seed8", &o))
    return;
  EXPECT_EQ_I(same_file(dirs[0], other, "indices.npy"), 0);
  EXPECT_EQ_I(same_file(dirs[0], other, "features.npy"), 0);
  EXPECT_EQ_I(same_file(dirs[0], other, "labels.npy"), 0);
  EXPECT_EQ_I(same_file(dirs[0], other, "train_idx.npy"), 0);
}

/* ---- options ---- */

#define EXPECT_REJECTED(field, value, needle)                                                      \
  do {                                                                                             \
    ng_generate_opts bad_ = base_opts(1000);                                                       \
    bad_.field = value;                                                                            \
    EXPECT_STATUS(ng_dataset_generate(dst, &bad_), NG_ERR_INVALID_ARG);                            \
    EXPECT_ERR_HAS(needle);                                                                        \
    EXPECT_TRUE(!ng_test_exists(dst));                                                             \
  } while (0)

static void test_option_errors(void) {
  char dst[4200];
  snprintf(dst, sizeof dst, "%s", ng_test_path("rejected"));
  EXPECT_REJECTED(size, sizeof(ng_generate_opts) - 8, "NG_GENERATE_OPTS_INIT");
  EXPECT_REJECTED(nodes, 1, "nodes");
  EXPECT_REJECTED(nodes, (int64_t)1 << 31, "below 2^31");
  EXPECT_REJECTED(avg_degree, 0.0, "avg_degree");
  EXPECT_REJECTED(avg_degree, 999.0, "below nodes - 1");
  EXPECT_REJECTED(avg_degree, NAN, "avg_degree");
  EXPECT_REJECTED(exponent, 2.0, "exponent");
  EXPECT_REJECTED(exponent, INFINITY, "exponent");
  EXPECT_REJECTED(homophily, -0.1, "homophily");
  EXPECT_REJECTED(homophily, 1.5, "homophily");
  EXPECT_REJECTED(classes, 0, "classes");
  EXPECT_REJECTED(feature_dim, -1, "feature_dim");
  EXPECT_REJECTED(feature_noise, -1.0, "feature_noise");
  EXPECT_REJECTED(train_frac, 1.2, "train_frac");
  EXPECT_REJECTED(val_frac, -0.1, "val_frac");
  EXPECT_REJECTED(test_frac, 0.85, "at most 1");
  EXPECT_REJECTED(name, "a name far longer than the sixty-three bytes that dataset.json keeps",
                  "name");
  EXPECT_REJECTED(feature_dim, INT64_MAX / 2, "do not fit");

  /* An existing destination is refused and left alone. */
  ng_generate_opts o = base_opts(1000);
  char dir[4200];
  if (!generate(dir, sizeof dir, "exists", &o))
    return;
  EXPECT_STATUS(ng_dataset_generate(dir, &o), NG_ERR_EXISTS);
  EXPECT_ERR_HAS(dir);
  ng_dataset_t ds = ng_test_open_ok(dir);
  ng_dataset_close(ds);
}

/* ---- structure, degrees, homophily ---- */

static void test_structure_and_counts(void) {
  ng_generate_opts o = base_opts(100000);
  o.avg_degree = 16.0;
  o.homophily = 0.8;
  o.train_frac = 0.6;
  o.val_frac = 0.2;
  o.test_frac = 0.2;
  o.name = "structure";
  char dir[4200];
  ng_dataset_t ds = generate_open(dir, sizeof dir, "structure", &o);
  if (!ds)
    return;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_STR(info.name, "structure");
  EXPECT_EQ_I(info.nodes, o.nodes);
  EXPECT_EQ_I(info.feature_dim, o.feature_dim);
  EXPECT_EQ_I(info.classes, o.classes);
  EXPECT_EQ_I(info.undirected, 0);
  EXPECT_EQ_I(info.index_bytes, 4);
  EXPECT_EQ_I(info.train, 60000);
  EXPECT_EQ_I(info.val, 20000);
  EXPECT_EQ_I(info.test, 20000);

  const ng_csr *g = &ds->csr;
  EXPECT_EQ_I(structure_errors(g), 0);
  /* The mean row length is the requested one: the weights are rescaled by their realised sum,
   * so only Poisson noise (about 0.1% here) remains. */
  EXPECT_NEAR((double)g->nnz / (double)g->nodes, o.avg_degree, 0.01 * o.avg_degree);

  /* Classes are exactly balanced. */
  int64_t count[8] = {0};
  for (int64_t v = 0; v < g->nodes; v++)
    count[ds->labels[v]]++;
  for (int c = 0; c < 8; c++)
    EXPECT_TRUE(count[c] == 12500);

  /* Same-class share: homophily h of the neighbours come from the own class, the rest from all
   * nodes, of which 1/C is the own class. */
  EXPECT_NEAR(same_class_share(g, ds->labels), 0.8 + 0.2 / 8.0, 0.01);

  /* Splits: sorted, disjoint, and covering all nodes here (0.6 + 0.2 + 0.2). */
  uint8_t *seen = calloc((size_t)g->nodes, 1);
  const int64_t sizes[3] = {info.train, info.val, info.test};
  for (int s = 0; s < 3 && seen; s++) {
    for (int64_t i = 0; i < sizes[s]; i++) {
      int64_t v = ds->split[s][i];
      EXPECT_TRUE(v >= 0 && v < g->nodes && (i == 0 || ds->split[s][i - 1] < v));
      if (v >= 0 && v < g->nodes)
        seen[v]++;
    }
  }
  int64_t once = 0;
  for (int64_t v = 0; seen && v < g->nodes; v++)
    once += seen[v] == 1;
  EXPECT_EQ_I(once, g->nodes);
  free(seen);

  /* dataset.json records the options. */
  char path[4300];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/dataset.json", dir);
  char *json = ng_test_read_file(path, &len);
  EXPECT_TRUE(json && strstr(json, "nodes=100000 avg_degree=16 exponent=2.5 classes=8"));
  EXPECT_TRUE(json && strstr(json, "homophily=0.8 feature_dim=16 feature_noise=1"));
  EXPECT_TRUE(json && strstr(json, "train_frac=0.6 val_frac=0.2 test_frac=0.2 seed=7"));
  free(json);
  ng_dataset_close(ds);
}

static void test_homophily_extremes(void) {
  const double hs[2] = {0.0, 1.0};
  for (int i = 0; i < 2; i++) {
    ng_generate_opts o = base_opts(20000);
    o.homophily = hs[i];
    o.feature_dim = 0;
    char dir[4200], name[32];
    snprintf(name, sizeof name, "homophily-%d", i);
    ng_dataset_t ds = generate_open(dir, sizeof dir, name, &o);
    if (!ds)
      continue;
    EXPECT_EQ_I(structure_errors(&ds->csr), 0);
    double share = same_class_share(&ds->csr, ds->labels);
    if (hs[i] == 1.0)
      EXPECT_NEAR(share, 1.0, 0.0);
    else
      EXPECT_NEAR(share, 1.0 / 8.0, 0.01);
    ng_dataset_close(ds);
  }
}

/* ---- the power law ---- */

static bool fit_exponents(double *row_alpha, double *in_alpha, double *top_share, double exponent) {
  ng_generate_opts o = base_opts(100000);
  o.avg_degree = 16.0;
  o.exponent = exponent;
  o.feature_dim = 0;
  char dir[4200], name[32];
  snprintf(name, sizeof name, "powerlaw-%g", exponent);
  ng_dataset_t ds = generate_open(dir, sizeof dir, name, &o);
  if (!ds)
    return false;
  const ng_csr *g = &ds->csr;
  int64_t n = g->nodes;
  int64_t *rows = malloc((size_t)n * sizeof *rows), *in = calloc((size_t)n, sizeof *in);
  bool ok = rows && in;
  if (ok) {
    for (int64_t v = 0; v < n; v++) {
      rows[v] = g->indptr[v + 1] - g->indptr[v];
      for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
        in[ng__csr_index(g, e)]++;
    }
    ng_powerlaw_fit f;
    EXPECT_OK(ng__powerlaw_fit(&f, rows, n));
    *row_alpha = f.alpha;
    EXPECT_OK(ng__powerlaw_fit(&f, in, n)); /* sorts `in` ascending */
    *in_alpha = f.alpha;
    int64_t top = 0;
    for (int64_t i = n - n / 100; i < n; i++)
      top += in[i];
    *top_share = (double)top / (double)g->nnz;
  }
  free(rows);
  free(in);
  ng_dataset_close(ds);
  return ok;
}

/* The discrete maximum-likelihood fit of the row lengths and in-degrees lands within 0.15 of the
 * requested exponent (over seeds its spread is about 0.02 and its bias +0.05 to +0.09, from the
 * Poisson rounding of small weights and the cap on large ones); the exponents of graphs made
 * for 2.2 and 2.8 are told apart by far more than that tolerance. */
static void test_powerlaw_exponent(void) {
  const double exps[2] = {2.2, 2.8};
  double row[2] = {0, 0}, in[2] = {0, 0}, top[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    if (!fit_exponents(&row[i], &in[i], &top[i], exps[i]))
      return;
    EXPECT_NEAR(row[i], exps[i], 0.15);
    EXPECT_NEAR(in[i], exps[i], 0.15);
  }
  EXPECT_TRUE(row[1] - row[0] > 0.45);
  EXPECT_TRUE(in[1] - in[0] > 0.45);
  /* A hot set: the most-referenced 1% of nodes receive a large share of all references, more
   * so for the heavier tail (a regular graph would give them 1%). */
  EXPECT_TRUE(top[0] > 0.12);
  EXPECT_TRUE(top[1] > 0.05);
  EXPECT_TRUE(top[0] > top[1]);
}

/* ---- features ---- */

/* Nearest-class-mean accuracy on `test` nodes with class means from `train` nodes, over
 * feature rows x[v * D .. v * D + D). */
static double nearest_mean_accuracy(const float *x, int64_t D, const int32_t *labels, int32_t C,
                                    const int64_t *train, int64_t ntrain, const int64_t *test,
                                    int64_t ntest) {
  double *mu = calloc((size_t)(C * D), sizeof *mu);
  int64_t *cnt = calloc((size_t)C, sizeof *cnt);
  int64_t correct = 0;
  if (mu && cnt) {
    for (int64_t i = 0; i < ntrain; i++) {
      int64_t v = train[i];
      cnt[labels[v]]++;
      for (int64_t k = 0; k < D; k++)
        mu[labels[v] * D + k] += x[v * D + k];
    }
    for (int32_t c = 0; c < C; c++)
      for (int64_t k = 0; k < D; k++)
        mu[c * D + k] /= (double)(cnt[c] ? cnt[c] : 1);
    for (int64_t i = 0; i < ntest; i++) {
      int64_t v = test[i];
      int32_t best = -1;
      double best_d = INFINITY;
      for (int32_t c = 0; c < C; c++) {
        double d2 = 0.0;
        for (int64_t k = 0; k < D; k++) {
          double t = x[v * D + k] - mu[c * D + k];
          d2 += t * t;
        }
        if (d2 < best_d) {
          best_d = d2;
          best = c;
        }
      }
      correct += best == labels[v];
    }
  }
  free(mu);
  free(cnt);
  return ntest ? (double)correct / (double)ntest : 0.0;
}

/* Residuals around the class means are normal with deviation `noise`: their standard
 * deviation and both tail shares (4.55% beyond 2 sigma, 0.27% beyond 3 sigma) match, and the
 * class means have norm 1. */
static void check_residuals(ng_dataset_t ds, int64_t D, int32_t C, double noise) {
  const int64_t n = ds->info.nodes;
  double *mu = calloc((size_t)(C * D), sizeof *mu);
  int64_t *cnt = calloc((size_t)C, sizeof *cnt);
  if (mu && cnt) {
    for (int64_t v = 0; v < n; v++) {
      cnt[ds->labels[v]]++;
      for (int64_t k = 0; k < D; k++)
        mu[ds->labels[v] * D + k] += ds->features[v * D + k];
    }
    double norm_sum = 0.0;
    for (int32_t c = 0; c < C; c++) {
      double norm2 = 0.0;
      for (int64_t k = 0; k < D; k++) {
        mu[c * D + k] /= (double)cnt[c];
        norm2 += mu[c * D + k] * mu[c * D + k];
      }
      norm_sum += sqrt(norm2);
    }
    EXPECT_NEAR(norm_sum / C, 1.0, 0.05);
    double ss = 0.0;
    int64_t beyond2 = 0, beyond3 = 0;
    for (int64_t v = 0; v < n; v++) {
      for (int64_t k = 0; k < D; k++) {
        double r = (ds->features[v * D + k] - mu[ds->labels[v] * D + k]) / noise;
        ss += r * r;
        beyond2 += fabs(r) > 2.0;
        beyond3 += fabs(r) > 3.0;
      }
    }
    double total = (double)(n * D);
    /* Tolerances: about six standard errors at 640k values, ten at 160k. */
    EXPECT_NEAR(sqrt(ss / total), 1.0, 0.01);
    EXPECT_NEAR((double)beyond2 / total, 0.0455, 0.003);
    EXPECT_NEAR((double)beyond3 / total, 0.0027, 0.0006);
  }
  free(mu);
  free(cnt);
}

static void test_features(void) {
  ng_generate_opts o = base_opts(20000);
  o.feature_dim = 32;
  o.train_frac = 0.5;
  o.val_frac = 0.0;
  o.test_frac = 0.5;
  char dir[4200];
  ng_dataset_t ds = generate_open(dir, sizeof dir, "features", &o);
  if (!ds)
    return;
  const ng_csr *g = &ds->csr;
  const int64_t n = g->nodes, D = o.feature_dim;
  const int32_t C = o.classes;
  EXPECT_TRUE(ds->split[1] == NULL); /* an empty split has no file */
  const int64_t ntrain = ds->info.train, ntest = ds->info.test;
  double acc = nearest_mean_accuracy(ds->features, D, ds->labels, C, ds->split[0], ntrain,
                                     ds->split[2], ntest);
  /* Two class means are about 1.4 noise deviations apart: well above chance (1/8), far from
   * perfect, so that the graph has something to add. */
  EXPECT_TRUE(acc > 2.0 / C);
  EXPECT_TRUE(acc < 0.7);

  /* Averaging each node with its neighbours (most of them of its class) sharpens the classes:
   * what a GNN layer does. */
  float *agg = malloc((size_t)(n * D) * sizeof *agg);
  if (agg) {
    for (int64_t v = 0; v < n; v++) {
      for (int64_t k = 0; k < D; k++) {
        double s = ds->features[v * D + k];
        for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
          s += ds->features[ng__csr_index(g, e) * D + k];
        agg[v * D + k] = (float)(s / (double)(1 + g->indptr[v + 1] - g->indptr[v]));
      }
    }
    double acc_agg =
        nearest_mean_accuracy(agg, D, ds->labels, C, ds->split[0], ntrain, ds->split[2], ntest);
    EXPECT_TRUE(acc_agg > acc + 0.3);
    free(agg);
  }

  check_residuals(ds, D, C, o.feature_noise);
  ng_dataset_close(ds);

  /* Less noise: the same residual law at the new scale, and the classes nearly separate. */
  o.nodes = 5000;
  o.feature_noise = 0.25;
  ds = generate_open(dir, sizeof dir, "features-quiet", &o);
  if (!ds)
    return;
  acc = nearest_mean_accuracy(ds->features, D, ds->labels, C, ds->split[0], ds->info.train,
                              ds->split[2], ds->info.test);
  EXPECT_TRUE(acc > 0.95);
  check_residuals(ds, D, C, o.feature_noise);
  ng_dataset_close(ds);
}

/* ---- small and extreme graphs ---- */

static void test_small_and_dense_graphs(void) {
  struct {
    int64_t nodes;
    double avg_degree, homophily;
    int32_t classes;
    int64_t dim;
  } cases[] = {
      {2, 0.5, 0.8, 2, 3},    /* the smallest graph */
      {12, 9.0, 1.0, 4, 7},   /* rows longer than their class: the own class runs out */
      {50, 40.0, 0.5, 3, 1},  /* nearly complete rows */
      {50, 4.0, 0.8, 60, 2},  /* more classes than nodes: some are empty */
      {3000, 6.0, 0.9, 1, 0}, /* one class, no features */
  };
  for (size_t i = 0; i < NG_TEST_LEN(cases); i++) {
    ng_generate_opts o = base_opts(cases[i].nodes);
    o.avg_degree = cases[i].avg_degree;
    o.homophily = cases[i].homophily;
    o.classes = cases[i].classes;
    o.feature_dim = cases[i].dim;
    o.train_frac = 0.5;
    o.val_frac = 0.0;
    o.test_frac = 0.5;
    char dir[4200], name[32];
    snprintf(name, sizeof name, "small-%zu", i);
    ng_dataset_t ds = generate_open(dir, sizeof dir, name, &o);
    if (!ds)
      continue;
    EXPECT_EQ_I(structure_errors(&ds->csr), 0);
    EXPECT_EQ_I(ds->info.feature_dim, cases[i].dim);
    if (cases[i].nodes * cases[i].avg_degree >= 100)
      EXPECT_TRUE(ds->csr.nnz > 0);
    EXPECT_EQ_I(ds->info.train + ds->info.test, cases[i].nodes);
    if (cases[i].homophily == 1.0 && cases[i].classes > 1) {
      /* Own-class neighbours as long as the class has any left, then others. */
      for (int64_t v = 0; v < ds->csr.nodes; v++) {
        int64_t same = 0, d = ds->csr.indptr[v + 1] - ds->csr.indptr[v];
        for (int64_t e = ds->csr.indptr[v]; e < ds->csr.indptr[v + 1]; e++)
          same += ds->labels[ng__csr_index(&ds->csr, e)] == ds->labels[v];
        int64_t class_size = 0;
        for (int64_t u = 0; u < ds->csr.nodes; u++)
          class_size += ds->labels[u] == ds->labels[v];
        EXPECT_EQ_I(same, NG_MIN(d, class_size - 1));
      }
    }
    ng_dataset_close(ds);
  }
}

/* ---- progress and interruption ---- */

typedef struct {
  char phases[8][16];
  int nphases;
  int bad; /* calls with done > total or going backwards */
  double last_done;
  bool finished[8];
  const char *stop_in; /* phase whose first call asks to stop */
} progress_log;

static int on_progress(void *ctx, const char *phase, double done, double total) {
  progress_log *p = ctx;
  if (p->nphases == 0 || strcmp(p->phases[p->nphases - 1], phase) != 0) {
    if (p->nphases == 8)
      return 1;
    snprintf(p->phases[p->nphases++], sizeof p->phases[0], "%s", phase);
    p->last_done = 0.0;
  }
  p->bad += done > total || done < p->last_done;
  p->last_done = done;
  if (done == total)
    p->finished[p->nphases - 1] = true;
  return p->stop_in && strcmp(phase, p->stop_in) == 0;
}

static int leftovers(const char *prefix) {
  DIR *d = opendir(ng_test_tmpdir());
  int n = 0;
  if (!d)
    return -1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

static void test_progress_and_interrupt(void) {
  static const char *const phases[4] = {"degrees", "edges", "features", "splits"};
  progress_log log;
  memset(&log, 0, sizeof log);
  ng_generate_opts o = base_opts(20000);
  o.progress = on_progress;
  o.progress_ctx = &log;
  char dir[4200];
  if (!generate(dir, sizeof dir, "progress", &o))
    return;
  EXPECT_EQ_I(log.nphases, 4);
  for (int i = 0; i < 4 && i < log.nphases; i++) {
    EXPECT_STR(log.phases[i], phases[i]);
    EXPECT_TRUE(log.finished[i]);
  }
  EXPECT_EQ_I(log.bad, 0);

  /* Stopping in any phase leaves neither the dataset nor its temporary folder behind. */
  for (int i = 0; i < 4; i++) {
    memset(&log, 0, sizeof log);
    log.stop_in = phases[i];
    char name[32];
    snprintf(name, sizeof name, "stopped-%d", i);
    snprintf(dir, sizeof dir, "%s", ng_test_path(name));
    EXPECT_STATUS(ng_dataset_generate(dir, &o), NG_ERR_INTERRUPTED);
    EXPECT_ERR_HAS(phases[i]);
    EXPECT_EQ_I(leftovers(name), 0);
  }
}

int main(void) {
  RUN_TEST(test_same_files_for_any_thread_count);
  RUN_TEST(test_option_errors);
  RUN_TEST(test_structure_and_counts);
  RUN_TEST(test_homophily_extremes);
  RUN_TEST(test_powerlaw_exponent);
  RUN_TEST(test_features);
  RUN_TEST(test_small_and_dense_graphs);
  RUN_TEST(test_progress_and_interrupt);
  return ng_test_summary();
}
