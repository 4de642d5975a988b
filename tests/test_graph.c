/* CSR utilities against simple sequential references, on random graphs of several sizes and
 * both index widths, plus determinism across thread counts. */
#include "ng_test.h"
#include "ng_test_graph.h"

#include <omp.h>
#include <stdlib.h>

/* A random graph with duplicates, self loops and skewed row lengths (a few rows get most of
 * the entries, so the long-row sort paths run). `wide` forces int64 indices. */
static void make_graph(ng_csr *g, int64_t n, int64_t m, bool wide, uint64_t seed) {
  memset(g, 0, sizeof *g);
  g->nodes = n;
  g->nnz = n > 0 ? m : 0;
  g->indptr = calloc((size_t)n + 1, sizeof(int64_t));
  int64_t *src = malloc(((size_t)g->nnz + 1) * sizeof *src);
  int64_t *dst = malloc(((size_t)g->nnz + 1) * sizeof *dst);
  ng_rng r;
  ng_rng_seed(&r, seed);
  for (int64_t e = 0; e < g->nnz; e++) {
    uint64_t pick = ng_rng_below(&r, 10);
    /* 30% of the entries fall into the first few rows; 10% are self loops; the targets come
     * from a small range half of the time, which makes duplicates. */
    src[e] = pick < 3 ? (int64_t)ng_rng_below(&r, (uint64_t)NG_MIN(n, 3))
                      : (int64_t)ng_rng_below(&r, (uint64_t)n);
    if (pick == 9)
      dst[e] = src[e];
    else if (pick & 1)
      dst[e] = (int64_t)ng_rng_below(&r, (uint64_t)NG_MIN(n, 16));
    else
      dst[e] = (int64_t)ng_rng_below(&r, (uint64_t)n);
    g->indptr[src[e] + 1]++;
  }
  for (int64_t v = 0; v < n; v++)
    g->indptr[v + 1] += g->indptr[v];
  if (wide)
    g->idx64 = malloc(((size_t)g->nnz + 1) * sizeof(int64_t));
  else
    g->idx32 = malloc(((size_t)g->nnz + 1) * sizeof(int32_t));
  int64_t *cur = malloc(((size_t)n + 1) * sizeof *cur);
  memcpy(cur, g->indptr, (size_t)n * sizeof *cur);
  for (int64_t e = 0; e < g->nnz; e++) {
    int64_t p = cur[src[e]]++;
    if (wide)
      g->idx64[p] = dst[e];
    else
      g->idx32[p] = (int32_t)dst[e];
  }
  free(cur);
  free(src);
  free(dst);
}

/* Whether two CSRs are identical, entry by entry (reports the first difference). */
static bool same_graph(const ng_csr *a, const ng_csr *b, const char *what) {
  if (a->nodes != b->nodes || a->nnz != b->nnz) {
    printf("  %s: %lld nodes %lld entries vs %lld nodes %lld entries\n", what, (long long)a->nodes,
           (long long)a->nnz, (long long)b->nodes, (long long)b->nnz);
    return false;
  }
  if ((a->idx32 != NULL) != (b->idx32 != NULL)) {
    printf("  %s: index widths differ\n", what);
    return false;
  }
  for (int64_t v = 0; v <= a->nodes; v++) {
    if (a->indptr[v] != b->indptr[v]) {
      printf("  %s: indptr[%lld] %lld vs %lld\n", what, (long long)v, (long long)a->indptr[v],
             (long long)b->indptr[v]);
      return false;
    }
  }
  for (int64_t e = 0; e < a->nnz; e++) {
    if (ng__csr_index(a, e) != ng__csr_index(b, e)) {
      printf("  %s: entry %lld: %lld vs %lld\n", what, (long long)e, (long long)ng__csr_index(a, e),
             (long long)ng__csr_index(b, e));
      return false;
    }
  }
  return true;
}

/* Reference: each row sorted with qsort, repeats (and optionally self loops) dropped. */
static void ref_sort_dedup(ng_csr *out, const ng_csr *g, bool drop_loops, int64_t *dups,
                           int64_t *loops) {
  ng_test_csr_copy(out, g, g->idx64 != NULL);
  int64_t *row = malloc(((size_t)g->nnz + 1) * sizeof *row);
  int64_t w = 0;
  *dups = *loops = 0;
  for (int64_t v = 0; v < g->nodes; v++) {
    int64_t len = g->indptr[v + 1] - g->indptr[v];
    for (int64_t k = 0; k < len; k++)
      row[k] = ng__csr_index(g, g->indptr[v] + k);
    qsort(row, (size_t)len, sizeof *row, ng_test_cmp_i64);
    out->indptr[v] = w;
    for (int64_t k = 0; k < len; k++) {
      if (drop_loops && row[k] == v)
        ++*loops;
      else if (w > out->indptr[v] && ng__csr_index(out, w - 1) == row[k])
        ++*dups;
      else if (out->idx32)
        out->idx32[w++] = (int32_t)row[k];
      else
        out->idx64[w++] = row[k];
    }
  }
  out->indptr[g->nodes] = w;
  out->nnz = w;
  free(row);
}

/* Reference symmetric closure: all (u, v) and (v, u) as pairs, sorted, unique. */
static void ref_symmetrize(ng_csr *out, const ng_csr *g) {
  int64_t m = 2 * g->nnz;
  int64_t *pairs = malloc(((size_t)m + 1) * 2 * sizeof *pairs);
  int64_t k = 0;
  for (int64_t u = 0; u < g->nodes; u++) {
    for (int64_t e = g->indptr[u]; e < g->indptr[u + 1]; e++) {
      int64_t v = ng__csr_index(g, e);
      pairs[2 * k] = u, pairs[2 * k + 1] = v, k++;
      pairs[2 * k] = v, pairs[2 * k + 1] = u, k++;
    }
  }
  ng_csr tmp = {0};
  tmp.nodes = g->nodes;
  tmp.nnz = m;
  tmp.indptr = calloc((size_t)g->nodes + 1, sizeof(int64_t));
  int64_t *idx = malloc(((size_t)m + 1) * sizeof *idx);
  for (int64_t i = 0; i < m; i++)
    tmp.indptr[pairs[2 * i] + 1]++;
  for (int64_t v = 0; v < g->nodes; v++)
    tmp.indptr[v + 1] += tmp.indptr[v];
  int64_t *cur = malloc(((size_t)g->nodes + 1) * sizeof *cur);
  memcpy(cur, tmp.indptr, (size_t)g->nodes * sizeof *cur);
  for (int64_t i = 0; i < m; i++)
    idx[cur[pairs[2 * i]]++] = pairs[2 * i + 1];
  tmp.idx64 = idx;
  if (g->idx32) { /* give the reference the input's width */
    tmp.idx32 = malloc(((size_t)m + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < m; i++)
      tmp.idx32[i] = (int32_t)idx[i];
    tmp.idx64 = NULL;
    free(idx);
  }
  int64_t d, l;
  ref_sort_dedup(out, &tmp, false, &d, &l);
  ng__csr_free(&tmp);
  free(cur);
  free(pairs);
}

static int64_t *random_perm(int64_t n, uint64_t seed) {
  int64_t *p = malloc(((size_t)n + 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++)
    p[i] = i;
  ng_rng r;
  ng_rng_seed(&r, seed);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)i + 1), t = p[i];
    p[i] = p[j], p[j] = t;
  }
  return p;
}

typedef struct {
  int64_t nodes, entries;
} graph_size;

static const graph_size SIZES[] = {{0, 0}, {1, 5}, {7, 40}, {1000, 8000}, {70000, 300000}};

static void test_alloc(void) {
  ng_csr g;
  EXPECT_OK(ng__csr_alloc(&g, 10, 25));
  EXPECT_TRUE(g.idx32 != NULL && g.idx64 == NULL);
  EXPECT_EQ_I(g.nodes, 10);
  EXPECT_EQ_I(g.nnz, 25);
  EXPECT_EQ_I(g.indptr[0], 0);
  EXPECT_EQ_I(g.indptr[10], 0);
  ng__csr_free(&g);
  EXPECT_TRUE(g.indptr == NULL && g.idx32 == NULL);
  ng__csr_free(&g); /* a zeroed struct is accepted */
  ng__csr_free(NULL);
  EXPECT_OK(ng__csr_alloc(&g, 0, 0));
  EXPECT_EQ_I(g.indptr[0], 0);
  ng__csr_free(&g);
  EXPECT_STATUS(ng__csr_alloc(&g, -1, 0), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__csr_alloc(&g, 5, -3), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(g.indptr == NULL);
  /* An absurd size fails cleanly instead of overflowing the byte count. */
  EXPECT_STATUS(ng__csr_alloc(&g, 4, INT64_MAX), NG_ERR_NOMEM);
}

static void test_degrees(void) {
  for (size_t s = 0; s < NG_ARRAY_LEN(SIZES); s++) {
    for (int wide = 0; wide < 2; wide++) {
      ng_csr g;
      make_graph(&g, SIZES[s].nodes, SIZES[s].entries, wide, 11 + s);
      int64_t n = g.nodes;
      int64_t *deg = malloc(((size_t)n + 1) * sizeof *deg);
      int64_t *ref = calloc((size_t)n + 1, sizeof *ref);
      for (int64_t v = 0; v < n; v++)
        deg[v] = -7;
      ng__csr_row_degrees(&g, deg);
      int64_t bad = 0;
      for (int64_t v = 0; v < n; v++)
        bad += deg[v] != g.indptr[v + 1] - g.indptr[v];
      EXPECT_EQ_I(bad, 0);
      for (int64_t e = 0; e < g.nnz; e++)
        ref[ng__csr_index(&g, e)]++;
      for (int64_t v = 0; v < n; v++)
        deg[v] = -7;
      EXPECT_OK(ng__csr_in_degrees(&g, deg));
      bad = 0;
      for (int64_t v = 0; v < n; v++)
        bad += deg[v] != ref[v];
      EXPECT_EQ_I(bad, 0);
      if (n > 3) {
        /* An index outside [0, nodes) is reported, naming the row. */
        int64_t e = g.indptr[2];
        if (wide)
          g.idx64[e] = n;
        else
          g.idx32[e] = (int32_t)n;
        EXPECT_STATUS(ng__csr_in_degrees(&g, deg), NG_ERR_INVALID_ARG);
        EXPECT_ERR_HAS("outside [0, ");
      }
      free(deg);
      free(ref);
      ng__csr_free(&g);
    }
  }
}

static void test_sort_dedup(void) {
  for (size_t s = 0; s < NG_ARRAY_LEN(SIZES); s++) {
    for (int wide = 0; wide < 2; wide++) {
      for (int drop = 0; drop < 2; drop++) {
        ng_csr g, ref;
        make_graph(&g, SIZES[s].nodes, SIZES[s].entries, wide, 100 + s);
        int64_t ref_dups, ref_loops, dups = -1, loops = -1;
        ref_sort_dedup(&ref, &g, drop, &ref_dups, &ref_loops);
        EXPECT_OK(ng__csr_sort_dedup(&g, drop, &dups, &loops));
        EXPECT_TRUE(same_graph(&g, &ref, "sort_dedup"));
        EXPECT_EQ_I(dups, ref_dups);
        EXPECT_EQ_I(loops, ref_loops);
        if (SIZES[s].entries >= 1000) {
          EXPECT_TRUE(dups > 0);
          EXPECT_TRUE(drop ? loops > 0 : loops == 0);
        }
        ng__csr_free(&g);
        ng__csr_free(&ref);
      }
    }
  }
}

/* Rows that are long and ordered in ways that hurt naive quicksorts: ascending, descending,
 * all equal, organ pipe and sawtooth. */
static void test_sort_patterns(void) {
  enum { LEN = 20000, ROWS = 5, NODES = 5000 };
  for (int wide = 0; wide < 2; wide++) {
    ng_csr g = {0};
    g.nodes = NODES;
    g.nnz = (int64_t)LEN * ROWS;
    g.indptr = malloc((NODES + 1) * sizeof(int64_t));
    if (wide)
      g.idx64 = malloc((size_t)g.nnz * sizeof(int64_t));
    else
      g.idx32 = malloc((size_t)g.nnz * sizeof(int32_t));
    for (int64_t v = 0; v <= NODES; v++)
      g.indptr[v] = NG_MIN(v, ROWS) * LEN;
    for (int r = 0; r < ROWS; r++) {
      for (int64_t k = 0; k < LEN; k++) {
        int64_t v = r == 0   ? k
                    : r == 1 ? LEN - 1 - k
                    : r == 2 ? 3
                    : r == 3 ? (k < LEN / 2 ? k : LEN - 1 - k)
                             : k % 97;
        v %= NODES;
        if (wide)
          g.idx64[(int64_t)r * LEN + k] = v;
        else
          g.idx32[(int64_t)r * LEN + k] = (int32_t)v;
      }
    }
    ng_csr ref;
    int64_t rd, rl, d, l;
    ref_sort_dedup(&ref, &g, true, &rd, &rl);
    EXPECT_OK(ng__csr_sort_dedup(&g, true, &d, &l));
    EXPECT_TRUE(same_graph(&g, &ref, "sort patterns"));
    EXPECT_EQ_I(d, rd);
    EXPECT_EQ_I(l, rl);
    EXPECT_EQ_I(g.indptr[1], NODES - 1); /* row 0: 0..19999 modulo 5000, less its self loop */
    ng__csr_free(&g);
    ng__csr_free(&ref);
  }
}

static void test_symmetrize(void) {
  for (size_t s = 0; s < NG_ARRAY_LEN(SIZES); s++) {
    for (int wide = 0; wide < 2; wide++) {
      ng_csr g, out, ref;
      make_graph(&g, SIZES[s].nodes, SIZES[s].entries, wide, 200 + s);
      ref_symmetrize(&ref, &g);
      EXPECT_OK(ng__csr_symmetrize(&out, &g));
      EXPECT_TRUE(same_graph(&out, &ref, "symmetrize"));
      EXPECT_TRUE((out.idx64 != NULL) == (wide != 0));
      /* The closure of a symmetric graph is itself. */
      ng_csr again;
      EXPECT_OK(ng__csr_symmetrize(&again, &out));
      EXPECT_TRUE(same_graph(&again, &out, "symmetrize twice"));
      ng__csr_free(&again);
      ng__csr_free(&g);
      ng__csr_free(&out);
      ng__csr_free(&ref);
    }
  }
  /* Corrupt input is refused, and nothing is allocated. */
  ng_csr g, out;
  make_graph(&g, 50, 200, false, 7);
  g.idx32[g.nnz - 1] = -1;
  int64_t row = g.nodes - 1;
  while (g.indptr[row] == g.nnz)
    row--;
  char want[64];
  snprintf(want, sizeof want, "row %lld holds node -1", (long long)row);
  EXPECT_STATUS(ng__csr_symmetrize(&out, &g), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS(want);
  EXPECT_TRUE(out.indptr == NULL);
  ng__csr_free(&g);
}

static void test_relabel(void) {
  for (size_t s = 0; s < NG_ARRAY_LEN(SIZES); s++) {
    for (int wide = 0; wide < 2; wide++) {
      ng_csr g, out, back;
      int64_t n = SIZES[s].nodes;
      make_graph(&g, n, SIZES[s].entries, wide, 300 + s);
      int64_t *perm = random_perm(n, 400 + s);
      int64_t *inv = malloc(((size_t)n + 1) * sizeof *inv);
      for (int64_t v = 0; v < n; v++)
        inv[perm[v]] = v;
      EXPECT_OK(ng__csr_relabel(&out, &g, perm));
      EXPECT_TRUE((out.idx64 != NULL) == (wide != 0));
      EXPECT_EQ_I(out.nnz, g.nnz);
      /* Reference: row perm[v] holds perm of v's neighbours, in their original order. */
      int64_t bad = 0;
      for (int64_t v = 0; v < n; v++) {
        int64_t a = g.indptr[v], len = g.indptr[v + 1] - a, b = out.indptr[perm[v]];
        bad += out.indptr[perm[v] + 1] - b != len;
        for (int64_t k = 0; k < len && !bad; k++)
          bad += ng__csr_index(&out, b + k) != perm[ng__csr_index(&g, a + k)];
      }
      EXPECT_EQ_I(bad, 0);
      EXPECT_OK(ng__csr_relabel(&back, &out, inv));
      EXPECT_TRUE(same_graph(&back, &g, "relabel then inverse"));
      ng__csr_free(&back);
      ng__csr_free(&out);
      ng__csr_free(&g);
      free(perm);
      free(inv);
    }
  }
  /* A non-permutation is refused before anything is allocated. */
  ng_csr g, out;
  make_graph(&g, 20, 60, false, 9);
  int64_t *perm = random_perm(20, 10);
  perm[5] = perm[6];
  EXPECT_STATUS(ng__csr_relabel(&out, &g, perm), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not a permutation");
  EXPECT_TRUE(out.indptr == NULL);
  free(perm);
  ng__csr_free(&g);
}

static void test_perm_check(void) {
  int64_t *p = random_perm(100000, 5);
  EXPECT_OK(ng__perm_check(p, 100000));
  EXPECT_OK(ng__perm_check(NULL, 0));
  EXPECT_STATUS(ng__perm_check(NULL, 3), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__perm_check(p, -1), NG_ERR_INVALID_ARG);
  /* Too high, negative, repeated: the first problem in index order is named. */
  int64_t keep = p[700];
  p[700] = 100000;
  EXPECT_STATUS(ng__perm_check(p, 100000), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("perm[700] = 100000 is outside [0, 100000)");
  p[700] = -2;
  EXPECT_STATUS(ng__perm_check(p, 100000), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("perm[700] = -2");
  p[700] = keep;
  int64_t dup = p[90000];
  p[90000] = p[123];
  EXPECT_STATUS(ng__perm_check(p, 100000), NG_ERR_INVALID_ARG);
  char want[96];
  snprintf(want, sizeof want, "perm[90000] = %lld repeats perm[123]", (long long)p[123]);
  EXPECT_ERR_HAS(want);
  p[90000] = dup;
  EXPECT_OK(ng__perm_check(p, 100000));
  /* A repeat that appears first at a lower index than the out-of-range value. */
  int64_t q[5] = {0, 2, 2, 9, 1};
  EXPECT_STATUS(ng__perm_check(q, 5), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("perm[2] = 2 repeats perm[1]");
  free(p);
}

/* Every utility gives bit-identical arrays with 1, 2 and 3 threads. */
static void test_determinism(void) {
  const int threads[] = {1, 2, 3};
  for (int wide = 0; wide < 2; wide++) {
    ng_csr base;
    make_graph(&base, 90000, 400000, wide, 77);
    int64_t *perm = random_perm(base.nodes, 78);
    ng_csr sym[3], rel[3], dd[3];
    int64_t *indeg[3], dups[3], loops[3];
    for (int t = 0; t < 3; t++) {
      omp_set_num_threads(threads[t]);
      EXPECT_OK(ng__csr_symmetrize(&sym[t], &base));
      EXPECT_OK(ng__csr_relabel(&rel[t], &base, perm));
      ng_test_csr_copy(&dd[t], &base, base.idx64 != NULL);
      EXPECT_OK(ng__csr_sort_dedup(&dd[t], true, &dups[t], &loops[t]));
      indeg[t] = malloc((size_t)base.nodes * sizeof(int64_t));
      EXPECT_OK(ng__csr_in_degrees(&base, indeg[t]));
    }
    for (int t = 1; t < 3; t++) {
      EXPECT_TRUE(same_graph(&sym[t], &sym[0], "symmetrize across threads"));
      EXPECT_TRUE(same_graph(&rel[t], &rel[0], "relabel across threads"));
      EXPECT_TRUE(same_graph(&dd[t], &dd[0], "sort_dedup across threads"));
      EXPECT_EQ_I(dups[t], dups[0]);
      EXPECT_EQ_I(loops[t], loops[0]);
      EXPECT_TRUE(memcmp(indeg[t], indeg[0], (size_t)base.nodes * sizeof(int64_t)) == 0);
    }
    for (int t = 0; t < 3; t++) {
      ng__csr_free(&sym[t]);
      ng__csr_free(&rel[t]);
      ng__csr_free(&dd[t]);
      free(indeg[t]);
    }
    free(perm);
    ng__csr_free(&base);
  }
  omp_set_num_threads(2);
}

int main(void) {
  RUN_TEST(test_alloc);
  RUN_TEST(test_degrees);
  RUN_TEST(test_sort_dedup);
  RUN_TEST(test_sort_patterns);
  RUN_TEST(test_symmetrize);
  RUN_TEST(test_relabel);
  RUN_TEST(test_perm_check);
  RUN_TEST(test_determinism);
  return ng_test_summary();
}
