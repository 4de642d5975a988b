/* Link prediction: the edge split (runtime/link_split.c), the metrics on hand-computed cases,
 * bit-identical training across cold-row paths and thread counts, and Kipf & Welling's GAE
 * recipe on Cora (docs/link-prediction.md). */
#include "link_impl.h"
#include "ng_cpu.h"
#include "pipeline_impl.h"
#include "npy_impl.h"
#include "ng_test.h"
#include "ng_test_cora.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static ng_dataset_t cora;

/* A copy of Cora's dataset folder at `name` (a split writes into its dataset's folder). */
static const char *cora_copy(const char *name) {
  static char dst[4096];
  snprintf(dst, sizeof dst, "%s", ng_test_path(name));
  char cmd[16384];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, ng_test_path("cora"), dst);
  EXPECT_TRUE(system(cmd) == 0);
  return dst;
}

/* The data of the .npy file `path` (its header parsed and dropped), malloc'd; *len bytes. */
static void *read_npy(const char *path, size_t *len) {
  size_t n = 0;
  char *buf = ng_test_read_file(path, &n);
  ng_npy_header h;
  if (!buf || ng__npy_parse_header(&h, buf, n, path) != NG_OK || h.data_offset + h.nbytes != n) {
    ng_test_fail(__FILE__, __LINE__, "cannot read %s", path);
    free(buf);
    return NULL;
  }
  memmove(buf, buf + h.data_offset, h.nbytes);
  *len = h.nbytes;
  return buf;
}

static void *read_links(const char *dir, int id, size_t *len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/links/%s", dir, NG_LINK_FILE[id]);
  return read_npy(path, len);
}

/* ---- metrics ---- */

static void test_metrics_hand_computed(void) {
  /* Positive 0 (3) beats both its negatives: rank 1; positive 1 (1) has one negative above
   * (2) and one below (0): rank 2. Pooled, 3 beats all four negatives and 1 beats 0, ties 1 and
   * loses to 2, 2: AUC (4 + 1.5) / 8. Highest first: 3 (P), 2 2 (N N), 1 1 (P N), 0 (N); AP is
   * 1/2 x 1 + 1/2 x 2/5 = 0.7. */
  const float pos[2] = {3.0f, 1.0f}, neg[4] = {1.0f, 2.0f, 2.0f, 0.0f};
  ng_link_metrics m = NG_LINK_METRICS_INIT;
  EXPECT_OK(ng_link_metrics_compute(&m, pos, neg, 2, 2));
  EXPECT_NEAR(m.mrr, (1.0 + 0.5) / 2, 1e-12);
  EXPECT_NEAR(m.auc, 5.5 / 8, 1e-12);
  EXPECT_NEAR(m.ap, 0.7, 1e-12);
  EXPECT_NEAR(m.hits10, 1.0, 0);
  EXPECT_EQ_I(m.positives, 2);
  EXPECT_EQ_I(m.negatives, 4);
  /* Ties: one negative of three above, two equal: rank 1 + 1 + 2/2 = 3 for positive 0. */
  const float pos2[1] = {1.0f}, neg2[3] = {1.5f, 1.0f, 1.0f};
  EXPECT_OK(ng_link_metrics_compute(&m, pos2, neg2, 1, 3));
  EXPECT_NEAR(m.mrr, 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(m.auc, (0.5 + 0.5) / 3.0, 1e-12);
  /* All scores 0: BCE log 2 each, AUC one half, AP the share of positives (one threshold). */
  const float z1[1] = {0.0f}, z4[4] = {0, 0, 0, 0};
  EXPECT_OK(ng_link_metrics_compute(&m, z1, z4, 1, 4));
  EXPECT_NEAR(m.loss, log(2.0), 1e-12);
  EXPECT_NEAR(m.auc, 0.5, 1e-12);
  EXPECT_NEAR(m.ap, 0.2, 1e-12);
  EXPECT_NEAR(m.mrr, 1.0 / 3.0, 1e-12); /* rank 1 + 4 / 2 */
  /* Hits@K at the boundaries: 10 negatives above -> rank 11, out of Hits@10, in Hits@50. */
  float big[60];
  for (int i = 0; i < 60; i++)
    big[i] = i < 10 ? 2.0f : -1.0f;
  const float one[1] = {1.0f};
  EXPECT_OK(ng_link_metrics_compute(&m, one, big, 1, 60));
  EXPECT_NEAR(m.hits10, 0.0, 0);
  EXPECT_NEAR(m.hits50, 1.0, 0);
  EXPECT_NEAR(m.mrr, 1.0 / 11.0, 1e-12);
  /* Refused: non-finite scores, empty input, a wrong size. */
  const float nan1[1] = {NAN};
  EXPECT_STATUS(ng_link_metrics_compute(&m, nan1, z4, 1, 4), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("positive score 0");
  EXPECT_STATUS(ng_link_metrics_compute(&m, z1, z4, 0, 4), NG_ERR_INVALID_ARG);
  ng_link_metrics bad = NG_LINK_METRICS_INIT;
  bad.size = 8;
  EXPECT_STATUS(ng_link_metrics_compute(&bad, z1, z4, 1, 4), NG_ERR_INVALID_ARG);
}

/* The metrics as a full sort of the pooled scores computes them (the definition, as
 * docs/link-prediction.md states it), for test_metrics_against_sort. */
typedef struct {
  float s;
  int pos;
} ref_scored;

static int ref_desc(const void *a, const void *b) {
  const float x = ((const ref_scored *)a)->s, y = ((const ref_scored *)b)->s;
  return x > y ? -1 : x < y;
}

static void ref_auc_ap(double *auc, double *ap, const float *pos, const float *neg, int64_t n,
                       int64_t k) {
  const int64_t total = n * (1 + k);
  ref_scored *all = malloc((size_t)total * sizeof *all);
  for (int64_t i = 0; i < n; i++)
    all[i] = (ref_scored){pos[i], 1};
  for (int64_t i = 0; i < n * k; i++)
    all[n + i] = (ref_scored){neg[i], 0};
  qsort(all, (size_t)total, sizeof *all, ref_desc);
  const double n_pos = (double)n, n_neg = (double)(n * k);
  double a = 0.0, p = 0.0, tp = 0.0, fp = 0.0;
  for (int64_t x = 0; x < total;) {
    int64_t y = x;
    double gp = 0.0, gn = 0.0;
    while (y < total && all[y].s == all[x].s) {
      gp += all[y].pos;
      gn += !all[y].pos;
      y++;
    }
    a += gp * ((n_neg - fp - gn) + 0.5 * gn);
    tp += gp;
    fp += gn;
    p += (gp / n_pos) * (tp / (tp + fp));
    x = y;
  }
  free(all);
  *auc = a / (n_pos * n_neg);
  *ap = p;
}

static void test_metrics_against_sort(void) {
  /* Scores on a grid of 33 values (many ties between positives, between negatives and across),
   * -0 beside +0, positives a little higher on average; more positives than one block of the
   * per-positive sums (runtime/link_eval.c). AUC and AP are the bits of the full sort's walk;
   * MRR, Hits@K and the loss the per-positive definitions; every figure the same bits with one
   * thread and with three. */
  const int64_t n = 2500, k = 13;
  float *pos = malloc((size_t)n * sizeof *pos), *neg = malloc((size_t)(n * k) * sizeof *neg);
  uint64_t x = 12345;
  for (int64_t i = 0; i < n * (1 + k); i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int q = (int)((x >> 33) % 33) - 16; /* -16 .. 16 */
    float v = (float)q * 0.25f;
    if (q == 0 && (x >> 20) % 2)
      v = -0.0f;
    if (i < n)
      pos[i] = v + (q < 12 ? 1.0f : 0.0f);
    else
      neg[i - n] = v;
  }
  double auc, ap;
  ref_auc_ap(&auc, &ap, pos, neg, n, k);
  double mrr = 0.0, hits10 = 0.0, loss = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double above = 0, tied = 0;
    for (int64_t j = 0; j < k; j++) {
      above += neg[i * k + j] > pos[i];
      tied += neg[i * k + j] == pos[i];
      const double s = neg[i * k + j];
      loss += (s > 0 ? s : 0) + log1p(exp(-fabs(s)));
    }
    const double s = pos[i];
    loss += (s > 0 ? s : 0) - s + log1p(exp(-fabs(s)));
    const double rank = 1.0 + above + 0.5 * tied;
    mrr += 1.0 / rank;
    hits10 += rank <= 10;
  }
  ng_link_metrics m1 = NG_LINK_METRICS_INIT, m3 = NG_LINK_METRICS_INIT;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  EXPECT_OK(ng_link_metrics_compute(&m1, pos, neg, n, (int32_t)k));
  omp_set_num_threads(3);
  EXPECT_OK(ng_link_metrics_compute(&m3, pos, neg, n, (int32_t)k));
  omp_set_num_threads(saved);
  printf("  auc %.6f ap %.6f mrr %.6f hits@10 %.4f\n", m1.auc, m1.ap, m1.mrr, m1.hits10);
  EXPECT_TRUE(memcmp(&m1.auc, &auc, sizeof auc) == 0);
  EXPECT_TRUE(memcmp(&m1.ap, &ap, sizeof ap) == 0);
  EXPECT_TRUE(auc > 0.55 && auc < 0.95); /* informative scores, not a degenerate case */
  EXPECT_NEAR(m1.mrr, mrr / (double)n, 1e-12);
  EXPECT_NEAR(m1.hits10, hits10 / (double)n, 0);
  EXPECT_NEAR(m1.loss, loss / (double)(n * (1 + k)), 1e-12);
  EXPECT_TRUE(memcmp(&m1, &m3, sizeof m1) == 0);
  /* A non-finite negative in a later block is found and named. */
  neg[2100 * k + 5] = INFINITY;
  EXPECT_STATUS(ng_link_metrics_compute(&m1, pos, neg, n, (int32_t)k), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("negative score [2100, 5]");
  free(neg);
  free(pos);
}

/* The dot decoder's scores (runtime/link_score.c, several pairs summed side by side) are each
 * pair's float sum in column order, whatever the thread count and wherever the pair falls among
 * the others: the bits that serving and offline scoring share. */
static void test_dot_scores_column_order(void) {
  const int64_t rows = 50, d = 37, n = 203;
  float *h = malloc((size_t)(rows * d) * sizeof *h);
  int32_t u[203], v[203];
  uint64_t x = 99;
  for (int64_t i = 0; i < rows * d; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * 3.0f;
  }
  for (int64_t i = 0; i < n; i++) {
    u[i] = (int32_t)((i * 7) % rows);
    v[i] = (int32_t)((i * 13 + 5) % rows);
  }
  const ng_link_dec dec = {.decoder = NG_LINK_DECODER_DOT, .dim = d};
  float s1[203], s3[203], s_off[203];
  for (int64_t i = 0; i < n; i++)
    s1[i] = s3[i] = s_off[i] = NAN; /* poisoned */
  EXPECT_OK(ng__link_score(&dec, s1, h, u, v, n, 1));
  EXPECT_OK(ng__link_score(&dec, s3, h, u, v, n, 3));
  EXPECT_OK(ng__link_score(&dec, s_off + 3, h, u + 3, v + 3, n - 3, 2));
  for (int64_t i = 0; i < n; i++) {
    float acc = 0.0f;
    for (int64_t c = 0; c < d; c++)
      acc += h[u[i] * d + c] * h[v[i] * d + c];
    EXPECT_TRUE(memcmp(&acc, &s1[i], sizeof acc) == 0);
    EXPECT_TRUE(memcmp(&acc, &s3[i], sizeof acc) == 0);
    if (i >= 3)
      EXPECT_TRUE(memcmp(&acc, &s_off[i], sizeof acc) == 0);
  }
  free(h);
}

/* The CPU backend's pair_dot (the op link evaluation scores pairs with on a device) gives
 * ng__link_score's dot bits for the same embeddings, whatever its thread count and wherever the
 * pairs fall in a chunk of its split; the front refuses what the op's contract rules out. */
static void test_pair_dot_op(void) {
  const int64_t rows = 300, dims[] = {1, 3, 16, 37, 256}, ns[] = {1, 7, 8, 9, 203, 5000};
  uint64_t x = 7;
  for (int threads = 1; threads <= 3; threads += 2) {
    ng_backend *be = NULL;
    EXPECT_OK(ng__backend_cpu_create(&be, threads));
    if (!be)
      return;
    for (size_t di = 0; di < NG_TEST_LEN(dims); di++)
      for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++) {
        const int64_t d = dims[di], n = ns[ni];
        float *h = malloc((size_t)(rows * d) * sizeof *h);
        float *ref = malloc((size_t)n * sizeof *ref), *got = malloc((size_t)n * sizeof *got);
        int32_t *u = malloc((size_t)n * sizeof *u), *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < rows * d; i++) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          /* Wide exponents (2^-20 .. 2^10) and both signs: sums whose order shows in the bits. */
          const double m = (double)(x >> 11) / 9007199254740992.0;
          h[i] = (float)ldexp(m - 0.5, (int)((x >> 3) % 31) - 20);
        }
        for (int64_t i = 0; i < n; i++) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          u[i] = (int32_t)((x >> 20) % (uint64_t)rows);
          v[i] = (int32_t)((x >> 40) % (uint64_t)rows);
        }
        memset(got, 0xff, (size_t)n * sizeof *got); /* poisoned: NaN */
        const ng_link_dec dec = {.decoder = NG_LINK_DECODER_DOT, .dim = d};
        EXPECT_OK(ng__link_score(&dec, ref, h, u, v, n, 1));
        EXPECT_OK(be->iface->pair_dot(be, got, h, u, v, n, d));
        if (memcmp(ref, got, (size_t)n * sizeof *ref) != 0) {
          int64_t i = 0;
          while (memcmp(&ref[i], &got[i], sizeof *ref) == 0)
            i++;
          ng_test_fail(__FILE__, __LINE__,
                       "pair_dot threads %d dim %lld n %lld: pair %lld is %a, ng__link_score %a",
                       threads, (long long)d, (long long)n, (long long)i, (double)got[i],
                       (double)ref[i]);
        }
        free(h);
        free(ref);
        free(got);
        free(u);
        free(v);
      }
    float h[4] = {1, 2, 3, 4}, s = NAN;
    int32_t u[2] = {0, 1}, bad[2] = {1, -1};
    EXPECT_OK(be->iface->pair_dot(be, NULL, NULL, NULL, NULL, 0, 2)); /* nothing to do */
    EXPECT_TRUE(isnan(s));
    EXPECT_OK(be->iface->pair_dot(be, &s, h, u, u + 1, 1, 2));
    EXPECT_TRUE(s == 1.0f * 3.0f + 2.0f * 4.0f);
    EXPECT_STATUS(be->iface->pair_dot(be, &s, h, u, u, 1, 0), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("dim is 0");
    EXPECT_STATUS(be->iface->pair_dot(be, &s, h, u, bad, 2, 2), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("pair 1 has rows (1, -1)");
    EXPECT_STATUS(be->iface->pair_dot(be, NULL, h, u, u, 1, 2), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("out is NULL");
    ng__backend_destroy(be);
  }
}

/* ---- the split ---- */

static int pair_cmp(const void *a, const void *b) {
  const ng_link_pair *x = a, *y = b;
  if (x->u != y->u)
    return x->u < y->u ? -1 : 1;
  return x->v < y->v ? -1 : x->v > y->v;
}

static void test_split_edges(void) {
  const char *dir = cora_copy("cora_split");
  ng_split_edges_opts o = NG_SPLIT_EDGES_OPTS_INIT;
  o.val = 0.05;
  o.test = 0.10;
  o.neg_per_pos = 7;
  o.seed = 11;
  o.undirected = 1;
  o.threads = 1;
  ng_link_split_info info = NG_LINK_SPLIT_INFO_INIT;
  EXPECT_OK(ng_dataset_split_edges(&info, dir, &o));
  /* Cora: 10,556 entries, every edge both ways, no self loops: 5,278 candidate pairs. */
  ng_dataset_info di = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&di, cora));
  EXPECT_EQ_I(di.edges, 10556);
  EXPECT_EQ_I(info.train + info.val + info.test, 5278);
  EXPECT_EQ_I(info.val, (int64_t)(5278 * 0.05));
  EXPECT_EQ_I(info.test, (int64_t)(5278 * 0.10));
  EXPECT_EQ_I(info.mp_edges, 2 * info.train);
  EXPECT_EQ_I(info.neg_per_pos, 7);
  size_t lp, lx, lt, lv, lvn, lte, ltn;
  int64_t *ip = read_links(dir, NG_LINK_ARR_INDPTR, &lp);
  int32_t *ix = read_links(dir, NG_LINK_ARR_INDICES, &lx);
  char *tr = read_links(dir, NG_LINK_ARR_TRAIN_POS, &lt);
  char *va = read_links(dir, NG_LINK_ARR_VAL_POS, &lv);
  char *vn = read_links(dir, NG_LINK_ARR_VAL_NEG, &lvn);
  char *te = read_links(dir, NG_LINK_ARR_TEST_POS, &lte);
  char *tn = read_links(dir, NG_LINK_ARR_TEST_NEG, &ltn);
  EXPECT_TRUE(ip && ix && tr && va && vn && te && tn);
  if (!(ip && ix && tr && va && vn && te && tn))
    return;
  const ng_link_pair *train = (const ng_link_pair *)tr, *val = (const ng_link_pair *)va,
                     *test = (const ng_link_pair *)te;
  const ng_link_pair *vneg = (const ng_link_pair *)vn, *tneg = (const ng_link_pair *)tn;
  EXPECT_EQ_I(lt, (size_t)info.train * 16);
  EXPECT_EQ_I(lvn, (size_t)info.val * 7 * 16);
  EXPECT_EQ_I(lx, (size_t)info.mp_edges * 4);
  EXPECT_EQ_I(ip[2708], info.mp_edges);
  /* The message-passing graph holds every training pair both ways and no held-out pair in
   * either direction; held-out pairs are u < v and were edges of the full graph. */
  ng_link_pair *mp = ng_test_xmalloc((size_t)info.mp_edges * sizeof *mp);
  for (int64_t r = 0; r < 2708; r++)
    for (int64_t e = ip[r]; e < ip[r + 1]; e++)
      mp[e] = (ng_link_pair){r, ix[e]};
  qsort(mp, (size_t)info.mp_edges, sizeof *mp, pair_cmp);
  int64_t bad_train = 0, bad_held = 0, bad_neg = 0;
  for (int64_t i = 0; i < info.train; i++)
    bad_train += !ng__link_pair_find(mp, info.mp_edges, train[i].u, train[i].v) ||
                 !ng__link_pair_find(mp, info.mp_edges, train[i].v, train[i].u) ||
                 train[i].u >= train[i].v;
  const ng_link_pair *held[2] = {val, test};
  const int64_t n_held[2] = {info.val, info.test};
  const ng_link_pair *negs[2] = {vneg, tneg};
  /* The full graph's pairs, to check that negatives are non-edges. */
  ng_dataset_t d2 = ng_test_open_ok(dir);
  ng_link_pair *all = ng_test_xmalloc(10556 * sizeof *all);
  {
    size_t l0, l1;
    char *a0 = read_npy(ng_test_path("cora/indptr.npy"), &l0);
    char *a1 = read_npy(ng_test_path("cora/indices.npy"), &l1);
    const int64_t *fp = (const int64_t *)a0;
    const int32_t *fx = (const int32_t *)a1;
    for (int64_t r = 0; r < 2708; r++)
      for (int64_t e = fp[r]; e < fp[r + 1]; e++)
        all[e] = (ng_link_pair){r, fx[e]};
    free(a0);
    free(a1);
  }
  qsort(all, 10556, sizeof *all, pair_cmp);
  for (int s = 0; s < 2; s++)
    for (int64_t i = 0; i < n_held[s]; i++) {
      const ng_link_pair p = held[s][i];
      bad_held += ng__link_pair_find(mp, info.mp_edges, p.u, p.v) ||
                  ng__link_pair_find(mp, info.mp_edges, p.v, p.u) || p.u >= p.v ||
                  !ng__link_pair_find(all, 10556, p.u, p.v);
      for (int j = 0; j < 7; j++) {
        const ng_link_pair q = negs[s][i * 7 + j];
        bad_neg += q.u != p.u || q.v == q.u || q.v < 0 || q.v >= 2708 ||
                   ng__link_pair_find(all, 10556, q.u, q.v);
      }
    }
  EXPECT_EQ_I(bad_train, 0);
  EXPECT_EQ_I(bad_held, 0);
  EXPECT_EQ_I(bad_neg, 0);
  /* Deterministic: the same seed with another thread count writes the same bytes; another seed
   * another split. */
  o.threads = 2;
  EXPECT_OK(ng_dataset_split_edges(&info, dir, &o));
  size_t lv2, lvn2;
  char *va2 = read_links(dir, NG_LINK_ARR_VAL_POS, &lv2);
  char *vn2 = read_links(dir, NG_LINK_ARR_VAL_NEG, &lvn2);
  EXPECT_TRUE(va2 && lv2 == lv && memcmp(va2, va, lv) == 0);
  EXPECT_TRUE(vn2 && lvn2 == lvn && memcmp(vn2, vn, lvn) == 0);
  free(va2);
  free(vn2);
  o.seed = 12;
  EXPECT_OK(ng_dataset_split_edges(&info, dir, &o));
  va2 = read_links(dir, NG_LINK_ARR_VAL_POS, &lv2);
  EXPECT_TRUE(va2 && lv2 == lv && memcmp(va2, va, lv) != 0);
  free(va2);
  /* Uniform sources: negatives are random non-edges, most with another source. */
  o.neg_source = 1;
  EXPECT_OK(ng_dataset_split_edges(&info, dir, &o));
  EXPECT_EQ_I(info.neg_source, 1);
  vn2 = read_links(dir, NG_LINK_ARR_TEST_NEG, &lvn2);
  size_t lte2;
  char *te2 = read_links(dir, NG_LINK_ARR_TEST_POS, &lte2);
  const ng_link_pair *un = (const ng_link_pair *)vn2, *test2 = (const ng_link_pair *)te2;
  int64_t other = 0, bad_uniform = 0;
  for (int64_t i = 0; vn2 && te2 && i < info.test * 7; i++) {
    other += un[i].u != test2[i / 7].u;
    bad_uniform += un[i].u == un[i].v || ng__link_pair_find(all, 10556, un[i].u, un[i].v);
  }
  EXPECT_TRUE(other > info.test * 7 * 9 / 10);
  EXPECT_EQ_I(bad_uniform, 0);
  free(vn2);
  free(te2);
  o.neg_source = 0;
  /* Bad options are refused before anything is written. */
  o.val = 0.6;
  o.test = 0.5;
  EXPECT_STATUS(ng_dataset_split_edges(&info, dir, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("sum below 1");
  ng_dataset_close(d2);
  free(all);
  free(mp);
  free(ip);
  free(ix);
  free(tr);
  free(va);
  free(vn);
  free(te);
  free(tn);
}

/* ---- training ---- */

static ng_model_t link_model(ng_model_kind kind, int32_t f0, int32_t f1, int64_t hidden,
                             int64_t out, float dropout) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, kind, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = kind == NG_MODEL_GCN ? NG_AGGREGATOR_GCN : NG_AGGREGATOR_MEAN;
  l0.fanout = f0;
  l1.fanout = f1;
  l0.out_dim = hidden;
  l1.out_dim = out;
  l0.activation = NG_ACT_RELU;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = dropout;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

/* Trains `epochs` epochs and returns the last epoch's loss; *val gets the validation metrics. */
static double train_link(ng_dataset_t ds, ng_model_t m, const ng_train_opts *o,
                         const ng_link_opts *lo, int epochs, ng_link_metrics *val) {
  ng_link_trainer_t t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, o, lo));
  if (!t)
    return NAN;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  for (int e = 0; e < epochs; e++) {
    EXPECT_OK(ng_link_trainer_epoch(&s, t));
    /* A share of the mini-batches' pairs, self pairs (lo->self_pairs) not among them. */
    EXPECT_TRUE(s.train_acc >= 0.0 && s.train_acc <= 1.0);
  }
  if (val)
    EXPECT_OK(ng_link_trainer_evaluate(val, t, NG_SPLIT_VAL));
  ng_link_trainer_destroy(t);
  return s.loss;
}

static void test_bits_across_modes_and_threads(void) {
  const char *dir = cora_copy("cora_modes");
  ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
  so.neg_per_pos = 20;
  so.seed = 3;
  EXPECT_OK(ng_dataset_split_edges(NULL, dir, &so));
  ng_dataset_t ds = ng_test_open_ok(dir);
  ng_model_t m = link_model(NG_MODEL_SAGE, 5, 5, 32, 16, 0.2f);
  const ng_mode modes[] = {NG_MODE_BASELINE, NG_MODE_ZEROCOPY, NG_MODE_PARTIAL, NG_MODE_HYBRID};
  for (int variant = 0; variant < 2; variant++) {
    ng_link_opts lo = NG_LINK_OPTS_INIT;
    if (variant == 1) { /* the MLP decoder, degree negatives, two per positive, self pairs */
      lo.decoder = NG_LINK_DECODER_MLP;
      lo.neg = NG_LINK_NEG_DEGREE;
      lo.neg_per_pos = 2;
      lo.mlp_hidden = 8;
      lo.self_pairs = 1;
    }
    double ref = NAN;
    ng_link_metrics ref_val = NG_LINK_METRICS_INIT;
    for (size_t i = 0; i < NG_TEST_LEN(modes); i++)
      for (int threads = 1; threads <= 2; threads++) {
        /* The MLP variant: two runs of two modes, thread counts crossed (time on 2 cores). */
        if (variant == 1 && !((i == 0 && threads == 1) || (i == 3 && threads == 2)))
          continue;
        ng_train_opts o = NG_TRAIN_OPTS_INIT;
        o.batch = 512;
        o.seed = 5;
        o.mode = modes[i];
        o.cache_ratio = 0.25; /* three quarters of the rows cold: every path does work */
        o.threads = threads;
        ng_link_metrics v = NG_LINK_METRICS_INIT;
        const double loss = train_link(ds, m, &o, &lo, 1, &v);
        printf("  variant %d mode %s threads %d: loss %a val auc %.6f\n", variant,
               ng_mode_name(modes[i]), threads, loss, v.auc);
        if (isnan(ref)) {
          ref = loss;
          ref_val = v;
          EXPECT_TRUE(isfinite(loss) && loss > 0.0);
          continue;
        }
        EXPECT_TRUE(memcmp(&loss, &ref, sizeof loss) == 0);
        EXPECT_TRUE(memcmp(&v.auc, &ref_val.auc, sizeof v.auc) == 0);
        EXPECT_TRUE(memcmp(&v.mrr, &ref_val.mrr, sizeof v.mrr) == 0);
      }
  }
  /* Training learns: after a few epochs validation AUC is well above chance. */
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 512;
  o.threads = 2;
  ng_link_metrics v = NG_LINK_METRICS_INIT;
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  train_link(ds, m, &o, &lo, 4, &v);
  printf("  after 4 epochs: val auc %.4f mrr %.4f\n", v.auc, v.mrr);
  EXPECT_TRUE(v.auc > 0.75);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* ng__sort_unique_i64, the sort-unique of a link mini-batch's endpoints: ascending, each id
 * once, the count of distinct ids, on ids with many repeats and negative ones. */
static void test_sort_unique(void) {
  enum { N = 5000 };
  int64_t *a = malloc(N * sizeof *a), *seen = calloc(2001, sizeof *seen);
  EXPECT_TRUE(a && seen);
  if (!a || !seen) {
    free(a);
    free(seen);
    return;
  }
  uint64_t x = 88172645463325252ull; /* xorshift64 */
  int64_t distinct = 0;
  for (int i = 0; i < N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    a[i] = (int64_t)(x % 2001) - 1000;
    distinct += seen[a[i] + 1000]++ == 0;
  }
  const int64_t m = ng__sort_unique_i64(a, N);
  EXPECT_EQ_I(m, distinct);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; i++)
    bad += !seen[a[i] + 1000] || (i > 0 && a[i - 1] >= a[i]);
  EXPECT_EQ_I(bad, 0);
  EXPECT_EQ_I(ng__sort_unique_i64(a, 0), 0);
  a[0] = 7;
  EXPECT_EQ_I(ng__sort_unique_i64(a, 1), 1);
  EXPECT_EQ_I(a[0], 7);
  free(a);
  free(seen);
}

/* Stops an epoch at its third iteration's progress report (ng_progress_fn). */
static int stop_at_three(void *ctx, const char *phase, double done, double total) {
  (void)total;
  int *calls = ctx;
  ++*calls;
  return strcmp(phase, "train") == 0 && done >= 3.0;
}

/* The pipeline's worker threads with several packages in flight: every worker count, depth
 * (lookahead) and ready window gives the inline run's loss bits, epoch after epoch; a worker's
 * failure and a stop by the progress callback end the epoch with their error, and the trainer
 * trains on afterwards. */
static void test_workers_and_depth(void) {
  const char *dir = cora_copy("cora_workers");
  ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
  so.neg_per_pos = 5;
  so.seed = 4;
  EXPECT_OK(ng_dataset_split_edges(NULL, dir, &so));
  ng_dataset_t ds = ng_test_open_ok(dir);
  ng_model_t m = link_model(NG_MODEL_SAGE, 4, 4, 16, 16, 0.1f);
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  lo.neg_per_pos = 2;
  lo.self_pairs = 1;
  /* {mode, workers, lookahead, ready window}: inline first, the reference. */
  const struct {
    ng_mode mode;
    int workers, lookahead, window;
  } runs[] = {{NG_MODE_BASELINE, -1, 1, 0},
              {NG_MODE_HYBRID, 3, 3, 2},
              {NG_MODE_PARTIAL, 2, 2, 0},
              {NG_MODE_HYBRID_STATIC, 2, 1, 1},
              {NG_MODE_ZEROCOPY, 1, 3, 0}};
  double ref[2] = {NAN, NAN};
  for (size_t r = 0; r < NG_TEST_LEN(runs); r++) {
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 256;
    o.seed = 9;
    o.mode = runs[r].mode;
    o.cache_ratio = 0.25;
    o.threads = 2;
    o.workers = runs[r].workers;
    o.lookahead = runs[r].lookahead;
    o.ready_window = runs[r].window;
    if (runs[r].mode == NG_MODE_HYBRID_STATIC)
      o.partial_workers = 1;
    ng_link_trainer_t t = NULL;
    EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
    if (!t)
      continue;
    EXPECT_OK(ng_link_trainer_set_epoch_iters(t, 7));
    for (int e = 0; e < 2; e++) {
      ng_epoch_stats s = NG_EPOCH_STATS_INIT;
      EXPECT_OK(ng_link_trainer_epoch(&s, t));
      printf("  mode %s workers %d lookahead %d window %d epoch %d: loss %a split %d/%d\n",
             ng_mode_name(runs[r].mode), runs[r].workers, runs[r].lookahead, runs[r].window, e,
             s.loss, s.workers[0], s.workers[1]);
      EXPECT_EQ_I(s.iterations, 7);
      EXPECT_TRUE(s.sampled_edges > 0);
      if (runs[r].workers > 0)
        EXPECT_EQ_I(s.workers[0] + s.workers[1], runs[r].workers);
      if (r == 0) {
        ref[e] = s.loss;
        EXPECT_TRUE(isfinite(s.loss) && s.loss > 0.0);
      } else {
        EXPECT_TRUE(memcmp(&s.loss, &ref[e], sizeof s.loss) == 0);
      }
    }
    ng_link_trainer_destroy(t);
  }
  /* Errors: the worker that makes iteration 4 of the next epoch fails; then the progress
   * callback stops an epoch at its third iteration. Each epoch call fails with its reason, the
   * workers are gone, and the next epoch trains. */
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 256;
  o.seed = 9;
  o.mode = NG_MODE_HYBRID;
  o.cache_ratio = 0.25;
  o.workers = 3;
  o.lookahead = 2;
  int calls = 0;
  ng_link_trainer_t t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
  if (t) {
    EXPECT_OK(ng_link_trainer_set_epoch_iters(t, 7));
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    atomic_store(&ng__pipeline_fault_epoch, 0);
    atomic_store(&ng__pipeline_fault_iter, 4);
    EXPECT_STATUS(ng_link_trainer_epoch(&s, t), NG_ERR_IO);
    EXPECT_ERR_HAS("injected failure");
    EXPECT_ERR_HAS("iteration 4");
    atomic_store(&ng__pipeline_fault_epoch, -1);
    atomic_store(&ng__pipeline_fault_iter, -1);
    EXPECT_OK(ng_link_trainer_epoch(&s, t));
    EXPECT_EQ_I(s.epoch, 0);
    EXPECT_TRUE(isfinite(s.loss));
    ng_link_trainer_destroy(t);
  }
  o.progress = stop_at_three;
  o.progress_ctx = &calls;
  t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
  if (t) {
    EXPECT_OK(ng_link_trainer_set_epoch_iters(t, 7));
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_STATUS(ng_link_trainer_epoch(&s, t), NG_ERR_INTERRUPTED);
    EXPECT_TRUE(calls >= 1);
    ng_link_trainer_destroy(t);
  }
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* Evaluation's device path (pair_dot over uploaded embeddings, NG_LINK_EVAL_DEVICE=1 runs it on
 * the CPU backend) gives the host scoring's metrics bit for bit: with every row uploaded at
 * once, and in chunks when NG_LINK_EVAL_DEVICE_BYTES holds only a few hundred rows. A budget
 * below one positive's rows is refused with NG_ERR_NOMEM. */
static void test_eval_device_path(void) {
  const char *dir = cora_copy("cora_dev_eval");
  ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
  so.neg_per_pos = 30;
  so.seed = 6;
  EXPECT_OK(ng_dataset_split_edges(NULL, dir, &so));
  ng_dataset_t ds = ng_test_open_ok(dir);
  ng_model_t m = link_model(NG_MODEL_SAGE, 5, 5, 32, 16, 0.0f);
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 512;
  o.seed = 8;
  o.threads = 2;
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  ng_link_trainer_t t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
  if (!t) {
    ng_model_destroy(m);
    ng_dataset_close(ds);
    return;
  }
  ng_epoch_stats es = NG_EPOCH_STATS_INIT;
  EXPECT_OK(ng_link_trainer_epoch(&es, t));
  /* The block buffers take 2^18 pairs of 12 bytes; 16-float rows are 64 bytes each. */
  char chunk[64];
  snprintf(chunk, sizeof chunk, "%d", (1 << 18) * 12 + 400 * 64);
  const struct { const char *dev, *bytes; } runs[] = {{NULL, NULL}, {"1", NULL}, {"1", chunk}};
  for (int split = 0; split < 2; split++) {
    const ng_split sp = split ? NG_SPLIT_TEST : NG_SPLIT_VAL;
    ng_link_metrics r[3];
    for (size_t i = 0; i < NG_TEST_LEN(runs); i++) {
      r[i] = (ng_link_metrics)NG_LINK_METRICS_INIT;
      if (runs[i].dev)
        setenv("NG_LINK_EVAL_DEVICE", runs[i].dev, 1);
      if (runs[i].bytes)
        setenv("NG_LINK_EVAL_DEVICE_BYTES", runs[i].bytes, 1);
      EXPECT_OK(ng_link_trainer_evaluate(&r[i], t, sp));
      unsetenv("NG_LINK_EVAL_DEVICE");
      unsetenv("NG_LINK_EVAL_DEVICE_BYTES");
      printf("  %s run %zu: auc %.6f ap %.6f mrr %.6f\n", split ? "test" : "val", i, r[i].auc,
             r[i].ap, r[i].mrr);
    }
    EXPECT_TRUE(r[0].auc > 0.5 && r[0].positives > 0 && r[0].negatives == 30 * r[0].positives);
    for (size_t i = 1; i < NG_TEST_LEN(runs); i++) {
      EXPECT_TRUE(memcmp(&r[i].auc, &r[0].auc, sizeof r[0].auc) == 0);
      EXPECT_TRUE(memcmp(&r[i].ap, &r[0].ap, sizeof r[0].ap) == 0);
      EXPECT_TRUE(memcmp(&r[i].mrr, &r[0].mrr, sizeof r[0].mrr) == 0);
      EXPECT_TRUE(memcmp(&r[i].hits10, &r[0].hits10, sizeof r[0].hits10) == 0);
      EXPECT_TRUE(memcmp(&r[i].loss, &r[0].loss, sizeof r[0].loss) == 0);
    }
  }
  /* Room for fewer rows than one positive and its 30 negatives name. */
  char tiny[64];
  snprintf(tiny, sizeof tiny, "%d", (1 << 18) * 12 + 10 * 64);
  setenv("NG_LINK_EVAL_DEVICE", "1", 1);
  setenv("NG_LINK_EVAL_DEVICE_BYTES", tiny, 1);
  ng_link_metrics r = NG_LINK_METRICS_INIT;
  EXPECT_STATUS(ng_link_trainer_evaluate(&r, t, NG_SPLIT_VAL), NG_ERR_NOMEM);
  EXPECT_ERR_HAS("too little for the rows of one positive");
  setenv("NG_LINK_EVAL_DEVICE_BYTES", "12x", 1);
  EXPECT_STATUS(ng_link_trainer_evaluate(&r, t, NG_SPLIT_VAL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not a byte count");
  unsetenv("NG_LINK_EVAL_DEVICE");
  unsetenv("NG_LINK_EVAL_DEVICE_BYTES");
  ng_link_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

static void test_bad_inputs(void) {
  /* A dataset without links/ names the command that makes it. */
  ng_model_t m = link_model(NG_MODEL_SAGE, 5, 5, 16, 16, 0.0f);
  ng_link_trainer_t t = NULL;
  EXPECT_STATUS(ng_link_trainer_create(&t, cora, m, NULL, NULL), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("split-edges");
  EXPECT_TRUE(t == NULL);
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  lo.neg_per_pos = 0;
  EXPECT_STATUS(ng_link_trainer_create(&t, cora, m, NULL, &lo), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng_link_trainer_evaluate(NULL, NULL, NG_SPLIT_VAL), NG_ERR_INVALID_ARG);
  ng_link_trainer_destroy(NULL);
  ng_model_destroy(m);
}

/* Kipf & Welling's GAE on Cora (Planetoid protocol): 85/5/10 split with as many random non-edges
 * as positives, 2-layer GCN 32 -> 16, dot decoder, full batch (every training edge, one uniform
 * random pair each, and every node with itself, as GAE reconstructs A + I, per step), Adam lr
 * 0.01, 200 epochs. Published: AUC 91.0, AP 92.0. */
static void test_gae_cora(void) {
  const uint64_t seeds[] = {1, 2, 3};
  double auc = 0.0, ap = 0.0;
  for (size_t i = 0; i < NG_TEST_LEN(seeds); i++) {
    const char *dir = cora_copy("cora_gae");
    ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
    so.val = 0.05;
    so.test = 0.10;
    so.neg_per_pos = 1;
    so.neg_source = 1; /* random non-edges, as GAE's test_edges_false */
    so.seed = seeds[i];
    EXPECT_OK(ng_dataset_split_edges(NULL, dir, &so));
    ng_dataset_t ds = ng_test_open_ok(dir);
    ng_model_t m = link_model(NG_MODEL_GCN, -1, -1, 32, 16, 0.0f);
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 0;
    o.lr = 0.01;
    o.seed = seeds[i];
    ng_link_trainer_t t = NULL;
    ng_link_opts lo = NG_LINK_OPTS_INIT;
    lo.self_pairs = 1; /* GAE reconstructs A + I */
    EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    for (int e = 0; e < 200 && t; e++)
      EXPECT_OK(ng_link_trainer_epoch(&s, t));
    ng_link_metrics r = NG_LINK_METRICS_INIT;
    if (t)
      EXPECT_OK(ng_link_trainer_evaluate(&r, t, NG_SPLIT_TEST));
    printf("  seed %llu: test auc %.4f ap %.4f (loss %.4f)\n", (unsigned long long)seeds[i], r.auc,
           r.ap, s.loss);
    auc += r.auc;
    ap += r.ap;
    ng_link_trainer_destroy(t);
    ng_model_destroy(m);
    ng_dataset_close(ds);
  }
  auc /= (double)NG_TEST_LEN(seeds);
  ap /= (double)NG_TEST_LEN(seeds);
  printf("  mean test auc %.4f ap %.4f\n", auc, ap);
  EXPECT_TRUE(auc >= 0.91);
  EXPECT_TRUE(ap >= 0.92);
}

int main(void) {
  omp_set_num_threads(2);
  cora = ng_test_fetch_cora();
  RUN_TEST(test_metrics_hand_computed);
  RUN_TEST(test_sort_unique);
  RUN_TEST(test_metrics_against_sort);
  RUN_TEST(test_dot_scores_column_order);
  RUN_TEST(test_pair_dot_op);
  RUN_TEST(test_split_edges);
  RUN_TEST(test_bad_inputs);
  RUN_TEST(test_bits_across_modes_and_threads);
  RUN_TEST(test_workers_and_depth);
  RUN_TEST(test_eval_device_path);
  RUN_TEST(test_gae_cora);
  ng_dataset_close(cora);
  return ng_test_summary();
}
