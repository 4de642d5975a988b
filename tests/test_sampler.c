/* The neighbour sampler (cpu/sampler.c): block structure, transpose, GCN weights, uniformity,
 * determinism, steady-state memory, both index widths, input validation and epoch shuffles. */
#include "ng_test.h"
#include "ng_test_graph.h"
#include "sampler_impl.h"
#include "ng_cpu.h"

#include <stdlib.h>
#include <sys/mman.h>

/* ---- graphs ---- */

/* ---- the structural checks every mini-batch must pass ---- */

static void check_minibatch(const ng_csr *g, const ng_sampler_cfg *cfg, const int64_t *targets,
                            int32_t n_targets, const ng_minibatch *mb) {
  int L = cfg->n_layers;
  EXPECT_EQ_I(mb->n_layers, L);
  if (mb->n_layers != L)
    return;
  EXPECT_EQ_I(mb->n_targets, n_targets);
  EXPECT_EQ_I(mb->blocks[L - 1].n_dst, n_targets);
  for (int32_t i = 0; i < n_targets; i++)
    EXPECT_EQ_I(mb->node_ids[i], targets[i]);

  /* Node ids: in range and distinct. */
  int32_t n_all = mb->blocks[0].n_src;
  int64_t *sorted = malloc((size_t)n_all * sizeof *sorted);
  memcpy(sorted, mb->node_ids, (size_t)n_all * sizeof *sorted);
  qsort(sorted, (size_t)n_all, sizeof *sorted, ng_test_cmp_i64);
  int dups = 0, out_of_range = 0;
  for (int32_t i = 0; i < n_all; i++) {
    dups += i > 0 && sorted[i] == sorted[i - 1];
    out_of_range += sorted[i] < 0 || sorted[i] >= g->nodes;
  }
  EXPECT_EQ_I(dups, 0);
  EXPECT_EQ_I(out_of_range, 0);
  free(sorted);

  /* posof[u] = position of u in the row being checked (stamped by dst + 1). */
  int64_t *posof = malloc((size_t)g->nodes * sizeof *posof);
  int64_t *stamp = calloc((size_t)g->nodes, sizeof *stamp);
  int64_t stamp_now = 0;
  for (int l = 0; l < L; l++) {
    const ng_block *b = &mb->blocks[l];
    if (l + 1 < L)
      EXPECT_EQ_I(b->n_dst, mb->blocks[l + 1].n_src);
    EXPECT_TRUE(b->n_dst <= b->n_src);
    EXPECT_EQ_I(b->indptr[0], 0);
    EXPECT_EQ_I(b->indptr[b->n_dst], b->nnz);
    int bad_mono = 0, bad_local = 0, missing = 0, unordered = 0, bad_count = 0, bad_new = 0;
    int32_t next_new = b->n_dst;
    for (int32_t d = 0; d < b->n_dst; d++) {
      bad_mono += b->indptr[d + 1] < b->indptr[d];
      int64_t u = mb->node_ids[d];
      int64_t row = g->indptr[u], deg = g->indptr[u + 1] - row;
      stamp_now++;
      for (int64_t p = 0; p < deg; p++) {
        int64_t w = ng__csr_index(g, row + p);
        stamp[w] = stamp_now;
        posof[w] = p;
      }
      int64_t want = cfg->fanout[l] < 0 ? deg : NG_MIN(deg, (int64_t)cfg->fanout[l]);
      bad_count += (int64_t)(b->indptr[d + 1] - b->indptr[d]) != want;
      int64_t last = -1;
      for (int32_t e = b->indptr[d]; e < b->indptr[d + 1]; e++) {
        int32_t s = b->indices[e];
        if (s < 0 || s >= b->n_src) {
          bad_local++;
          continue;
        }
        /* New sources are numbered in order of first appearance. */
        if (s >= b->n_dst) {
          if (s == next_new)
            next_new++;
          else if (s > next_new)
            bad_new++;
        }
        int64_t w = mb->node_ids[s];
        if (stamp[w] != stamp_now) {
          missing++;
          continue;
        }
        /* Strictly increasing row positions: distinct neighbours, kept in row order. */
        unordered += posof[w] <= last;
        last = posof[w];
      }
    }
    EXPECT_EQ_I(next_new, b->n_src);
    EXPECT_EQ_I(bad_mono, 0);
    EXPECT_EQ_I(bad_local, 0);
    EXPECT_EQ_I(missing, 0);
    EXPECT_EQ_I(unordered, 0);
    EXPECT_EQ_I(bad_count, 0);
    EXPECT_EQ_I(bad_new, 0);

    if (cfg->transpose[l]) {
      EXPECT_TRUE(b->t_indptr && b->t_dst && b->t_eid);
      EXPECT_EQ_I(b->t_indptr[0], 0);
      EXPECT_EQ_I(b->t_indptr[b->n_src], b->nnz);
      char *seen = calloc((size_t)b->nnz + 1, 1);
      int bad = 0;
      for (int32_t s = 0; s < b->n_src; s++) {
        bad += b->t_indptr[s + 1] < b->t_indptr[s];
        int32_t prev = -1;
        for (int32_t i = b->t_indptr[s]; i < b->t_indptr[s + 1]; i++) {
          int32_t e = b->t_eid[i], d = b->t_dst[i];
          if (e < 0 || e >= b->nnz || d < 0 || d >= b->n_dst) {
            bad++;
            continue;
          }
          bad += seen[e]++ != 0;                            /* each edge once */
          bad += b->indices[e] != s;                        /* edge of this source */
          bad += e < b->indptr[d] || e >= b->indptr[d + 1]; /* of this destination */
          bad += e <= prev;                                 /* in edge order */
          prev = e;
        }
      }
      EXPECT_EQ_I(bad, 0);
      free(seen);
    } else {
      EXPECT_TRUE(!b->t_indptr && !b->t_dst && !b->t_eid);
    }

    if (cfg->gcn_weights[l]) {
      EXPECT_TRUE(b->edge_w && b->self_w);
      double worst = 0.0;
      for (int32_t d = 0; d < b->n_dst; d++) {
        int64_t u = mb->node_ids[d];
        double du = (double)(g->indptr[u + 1] - g->indptr[u]);
        worst = fmax(worst, fabs(b->self_w[d] - 1.0 / (du + 1.0)) * (du + 1.0));
        for (int32_t e = b->indptr[d]; e < b->indptr[d + 1]; e++) {
          int64_t w = mb->node_ids[b->indices[e]];
          double dw = (double)(g->indptr[w + 1] - g->indptr[w]);
          double want = 1.0 / sqrt((du + 1.0) * (dw + 1.0));
          worst = fmax(worst, fabs(b->edge_w[e] - want) / want);
        }
      }
      EXPECT_NEAR(worst, 0.0, 1e-6);
    } else {
      EXPECT_TRUE(!b->edge_w && !b->self_w);
    }
  }
  free(stamp);
  free(posof);
}

static void test_structure(void) {
  ng_csr g;
  ng_test_random_graph(&g, 3000, 11);
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  /* Configurations: "25,10" style (transposed as the trainer asks: every block but the input's),
   * three layers with one "all", a single layer, and fanouts that draw more than 128 positions
   * of the hubs' 1000 (kept ones, then excluded ones). */
  ng_sampler_cfg cfgs[] = {
      {.graph = &g,
       .n_layers = 2,
       .fanout = {10, 25},
       .gcn_weights = {true, true},
       .transpose = {false, true}},
      {.graph = &g, .n_layers = 3, .fanout = {3, -1, 5}, .gcn_weights = {false, true, false}},
      {.graph = &g, .n_layers = 1, .fanout = {15}, .transpose = {true}},
      {.graph = &g, .n_layers = 2, .fanout = {300, 800}, .gcn_weights = {true, false}},
  };
  int64_t targets[200];
  for (size_t c = 0; c < NG_ARRAY_LEN(cfgs); c++) {
    for (int rep = 0; rep < 3; rep++) {
      int32_t n_t = rep == 0 ? 1 : 100 * rep;
      ng_test_pick_targets(targets, n_t, g.nodes, c * 10 + (uint64_t)rep);
      ng_minibatch mb;
      EXPECT_OK(ng__sample(&mb, a, &cfgs[c], targets, n_t, 1000 + (uint64_t)rep));
      check_minibatch(&g, &cfgs[c], targets, n_t, &mb);
      /* The mini-batch is not trivial: edges and new nodes exist in every layer. */
      for (int l = 0; l < cfgs[c].n_layers && rep > 0; l++)
        EXPECT_TRUE(mb.blocks[l].nnz > 0 && mb.blocks[l].n_src > mb.blocks[l].n_dst);
    }
  }
  ng__sample_arena_destroy(a);
  ng__csr_free(&g);
}

/* Fanout -1 takes every neighbour, and fanouts at or above a row's length take the whole row. */
static void test_all_neighbours(void) {
  ng_csr g;
  ng_test_random_graph(&g, 2000, 12);
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  int64_t targets[64];
  ng_test_pick_targets(targets, 64, g.nodes, 3);
  ng_sampler_cfg all = {.graph = &g, .n_layers = 2, .fanout = {-1, -1}, .transpose = {true, true}};
  ng_sampler_cfg big = {.graph = &g, .n_layers = 2, .fanout = {100000, 100000}};
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, a, &all, targets, 64, 5));
  check_minibatch(&g, &all, targets, 64, &mb);
  int64_t total = 0;
  for (int d = 0; d < 64; d++)
    total += g.indptr[targets[d] + 1] - g.indptr[targets[d]];
  EXPECT_EQ_I(mb.blocks[1].nnz, total);
  /* A whole row is the row itself, in order. */
  int mismatch = 0;
  for (int d = 0; d < 64; d++) {
    int64_t row = g.indptr[targets[d]];
    for (int32_t e = mb.blocks[1].indptr[d]; e < mb.blocks[1].indptr[d + 1]; e++)
      mismatch +=
          mb.node_ids[mb.blocks[1].indices[e]] != g.idx32[row + (e - mb.blocks[1].indptr[d])];
  }
  EXPECT_EQ_I(mismatch, 0);
  int64_t nnz_all[2] = {mb.blocks[0].nnz, mb.blocks[1].nnz};
  EXPECT_OK(ng__sample(&mb, a, &big, targets, 64, 6));
  check_minibatch(&g, &big, targets, 64, &mb);
  EXPECT_EQ_I(mb.blocks[0].nnz, nnz_all[0]);
  EXPECT_EQ_I(mb.blocks[1].nnz, nnz_all[1]);
  ng__sample_arena_destroy(a);
  ng__csr_free(&g);
}

/* Cora (real data): full neighbourhoods with GCN weights are Kipf & Welling's symmetric
 * normalisation, and sampled 2-layer blocks pass the structural checks. */
static void test_cora(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cora/edges.txt", ng_test_data_dir());
  int64_t m = 0, nodes = 0;
  int64_t *ends = ng_test_read_edges(path, &m);
  EXPECT_TRUE(ends != NULL);
  if (!ends)
    return;
  for (int64_t i = 0; i < 2 * m; i++)
    nodes = NG_MAX(nodes, ends[i] + 1);
  EXPECT_EQ_I(nodes, 2708);
  if (nodes != 2708) {
    free(ends);
    return;
  }
  /* Undirected: store each edge in both rows. */
  ng_csr g;
  EXPECT_OK(ng__csr_alloc(&g, nodes, 2 * m));
  ng_test_undirected_csr(g.indptr, g.idx32, nodes, ends, m);
  free(ends);

  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  int64_t targets[140];
  ng_test_pick_targets(targets, 140, nodes, 9);
  ng_sampler_cfg gcn = {.graph = &g,
                        .n_layers = 2,
                        .fanout = {-1, -1},
                        .gcn_weights = {true, true},
                        .transpose = {true, true}};
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, a, &gcn, targets, 140, 1));
  check_minibatch(&g, &gcn, targets, 140, &mb);
  /* Kipf & Welling: row d of D^-1/2 (A + I) D^-1/2 sums to sum_w 1/sqrt(d_d d_w) + 1/d_d with
   * d = degree + 1; compare that row sum computed straight from the graph. */
  const ng_block *b = &mb.blocks[1];
  double worst = 0.0;
  for (int32_t d = 0; d < b->n_dst; d++) {
    double sum = b->self_w[d], want = 0.0;
    for (int32_t e = b->indptr[d]; e < b->indptr[d + 1]; e++)
      sum += b->edge_w[e];
    int64_t u = targets[d];
    double du = (double)(g.indptr[u + 1] - g.indptr[u] + 1);
    want = 1.0 / du;
    for (int64_t e = g.indptr[u]; e < g.indptr[u + 1]; e++) {
      int64_t w = g.idx32[e];
      want += 1.0 / sqrt(du * (double)(g.indptr[w + 1] - g.indptr[w] + 1));
    }
    worst = fmax(worst, fabs(sum - want));
  }
  EXPECT_NEAR(worst, 0.0, 1e-5);
  ng_sampler_cfg sage = {.graph = &g, .n_layers = 2, .fanout = {10, 25}, .transpose = {true, true}};
  EXPECT_OK(ng__sample(&mb, a, &sage, targets, 140, 2));
  check_minibatch(&g, &sage, targets, 140, &mb);
  ng__sample_arena_destroy(a);
  ng__csr_free(&g);
}

/* ---- uniformity ---- */

/* Pearson's statistic for the per-position counts of `trials` draws of k of n positions without
 * replacement. Each count has variance T p (1 - p) and the counts are negatively correlated
 * (they sum to T k), so the statistic scaled by (n - 1) / (n (1 - p)) is chi-square with n - 1
 * degrees of freedom. */
static double marginal_chi2(const int64_t *counts, int64_t n, int64_t k, int64_t trials) {
  double p = (double)k / (double)n, expect = (double)trials * p;
  double scale = (double)trials * p * (1.0 - p) * (double)n / (double)(n - 1);
  double x = 0.0;
  for (int64_t i = 0; i < n; i++)
    x += ((double)counts[i] - expect) * ((double)counts[i] - expect);
  return x / scale;
}

/* A graph whose node 0 has `n` neighbours 1..n stored in a scrambled order; every other node is
 * isolated. Returns the row position of each neighbour in posof[node]. */
static void build_star(ng_csr *g, int64_t n, int64_t *posof) {
  EXPECT_OK(ng__csr_alloc(g, n + 1, n));
  g->indptr[0] = 0;
  for (int64_t v = 1; v <= n + 1; v++)
    g->indptr[v] = n;
  for (int64_t i = 0; i < n; i++)
    g->idx32[i] = (int32_t)(i + 1);
  ng_rng r;
  ng_rng_seed(&r, (uint64_t)n);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)i + 1);
    int32_t t = g->idx32[i];
    g->idx32[i] = g->idx32[j];
    g->idx32[j] = t;
  }
  for (int64_t i = 0; i < n; i++)
    posof[g->idx32[i]] = i;
}

/* Per-position counts of `trials` samples of k neighbours of the star's centre, seeds 0.. */
static void sample_counts(int64_t *counts, int64_t n, int32_t k, int64_t trials) {
  ng_csr g;
  int64_t *posof = malloc(((size_t)n + 1) * sizeof *posof);
  build_star(&g, n, posof);
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  ng_sampler_cfg cfg = {.graph = &g, .n_layers = 1, .fanout = {k}};
  memset(counts, 0, (size_t)n * sizeof *counts);
  int64_t target = 0;
  for (int64_t t = 0; t < trials; t++) {
    ng_minibatch mb;
    EXPECT_OK(ng__sample(&mb, a, &cfg, &target, 1, (uint64_t)t));
    EXPECT_EQ_I(mb.blocks[0].nnz, k);
    for (int64_t e = 0; e < mb.blocks[0].nnz; e++)
      counts[posof[mb.node_ids[mb.blocks[0].indices[e]]]]++;
  }
  ng__sample_arena_destroy(a);
  free(posof);
  ng__csr_free(&g);
}

static void test_uniform_marginals(void) {
  /* Each case exercises one drawing path: a row of at most 64 positions (a bit mask), small or
   * large draws, of the kept or of the excluded positions. Critical values: the 0.999
   * quantiles of chi-square with n - 1 degrees. */
  struct {
    int64_t n;
    int32_t k;
    int64_t trials;
    double crit;
  } cases[] = {
      {40, 10, 4000, 72.055},    /* draw 10 kept (mask) */
      {40, 30, 4000, 72.055},    /* draw 10 excluded (mask) */
      {100, 10, 12000, 148.230}, /* draw 10 kept (small) */
      {100, 90, 12000, 148.230}, /* draw 10 excluded (small) */
      {600, 200, 1500, 711.682}, /* draw 200 kept (large) */
      {600, 450, 1500, 711.682}, /* draw 150 excluded (large) */
  };
  for (size_t c = 0; c < NG_ARRAY_LEN(cases); c++) {
    int64_t n = cases[c].n, k = cases[c].k, trials = cases[c].trials;
    int64_t *counts = malloc((size_t)n * sizeof *counts);
    sample_counts(counts, n, cases[c].k, trials);
    double x = marginal_chi2(counts, n, k, trials);
    if (!(x < cases[c].crit))
      ng_test_fail(__FILE__, __LINE__, "n=%lld k=%lld: chi2 %.2f >= %.2f", (long long)n,
                   (long long)k, x, cases[c].crit);
    /* The statistic rejects a biased sampler: always the first k positions. */
    int64_t *biased = calloc((size_t)n, sizeof *biased);
    for (int64_t i = 0; i < k; i++)
      biased[i] = trials;
    EXPECT_TRUE(marginal_chi2(biased, n, k, trials) > cases[c].crit);
    /* ... and a subtly biased one: the first half of the row 10 % more likely than the rest. */
    double w_lo = 1.1 * (double)k / (1.05 * (double)n);
    double w_hi = 1.0 * (double)k / (1.05 * (double)n);
    for (int64_t i = 0; i < n; i++)
      biased[i] = (int64_t)llround((double)trials * (i < n / 2 ? w_lo : w_hi));
    EXPECT_TRUE(marginal_chi2(biased, n, k, trials) > cases[c].crit);
    free(biased);
    free(counts);
  }
}

/* Floyd's algorithm as documented (sampler.c), on the stream of (seed, block 0, node 0): the
 * positions every drawing path must return, sorted. Returns how many. */
static int64_t floyd_reference(int64_t *out, int64_t n, int64_t k, uint64_t seed) {
  ng_rng r;
  ng_rng_seed(&r, ng_hash3(seed, 0, 0));
  const bool exclude = k > n / 2;
  const int64_t m = exclude ? n - k : k;
  bool *in = calloc((size_t)n, sizeof *in);
  for (int64_t j = n - m; j < n; j++) {
    const int64_t t = (int64_t)ng_rng_below(&r, (uint64_t)j + 1);
    in[in[t] ? j : t] = true;
  }
  int64_t len = 0;
  for (int64_t p = 0; p < n; p++)
    if (in[p] != exclude)
      out[len++] = p;
  free(in);
  return len;
}

/* Every drawing path returns exactly Floyd's positions, so a path's choice never changes a
 * mini-batch: rows up to 64 positions (the mask, at its edges too), small and large draws. */
static void test_floyd_positions(void) {
  const int64_t rows[] = {11, 16, 33, 63, 64, 65, 100, 400};
  for (size_t c = 0; c < NG_ARRAY_LEN(rows); c++) {
    const int64_t n = rows[c];
    ng_csr g;
    int64_t *posof = malloc(((size_t)n + 1) * sizeof *posof);
    int64_t *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    build_star(&g, n, posof);
    ng_sample_arena *a = NULL;
    EXPECT_OK(ng__sample_arena_create(&a));
    const int64_t ks[] = {1, 10, n / 2, n / 2 + 1, n - 1};
    for (size_t kk = 0; kk < NG_ARRAY_LEN(ks); kk++) {
      const int64_t k = ks[kk];
      if (k < 1 || k >= n)
        continue;
      ng_sampler_cfg cfg = {.graph = &g, .n_layers = 1, .fanout = {(int32_t)k}};
      for (uint64_t seed = 0; seed < 50; seed++) {
        ng_minibatch mb;
        int64_t target = 0;
        EXPECT_OK(ng__sample(&mb, a, &cfg, &target, 1, seed));
        EXPECT_EQ_I(floyd_reference(want, n, k, seed), k);
        EXPECT_EQ_I(mb.blocks[0].nnz, k);
        for (int64_t e = 0; e < mb.blocks[0].nnz; e++)
          got[e] = posof[mb.node_ids[mb.blocks[0].indices[e]]];
        if (memcmp(got, want, (size_t)k * sizeof *got) != 0) {
          ng_test_fail(__FILE__, __LINE__, "n=%lld k=%lld seed %llu: not Floyd's positions",
                       (long long)n, (long long)k, (unsigned long long)seed);
          break;
        }
      }
    }
    ng__sample_arena_destroy(a);
    free(got);
    free(want);
    free(posof);
    ng__csr_free(&g);
  }
}

/* The joint distribution: every 2-subset (and every 4-subset) of 6 positions equally likely. */
static void test_uniform_subsets(void) {
  const int64_t n = 6, trials = 6000;
  const double crit = 36.123; /* chi-square, 14 degrees of freedom, 0.999 */
  for (int32_t k = 2; k <= 4; k += 2) {
    ng_csr g;
    int64_t posof[7];
    build_star(&g, n, posof);
    ng_sample_arena *a = NULL;
    EXPECT_OK(ng__sample_arena_create(&a));
    ng_sampler_cfg cfg = {.graph = &g, .n_layers = 1, .fanout = {k}};
    int64_t counts[64] = {0};
    int64_t target = 0;
    for (int64_t t = 0; t < trials; t++) {
      ng_minibatch mb;
      EXPECT_OK(ng__sample(&mb, a, &cfg, &target, 1, (uint64_t)t + 77));
      unsigned mask = 0;
      for (int64_t e = 0; e < mb.blocks[0].nnz; e++)
        mask |= 1u << posof[mb.node_ids[mb.blocks[0].indices[e]]];
      counts[mask]++;
    }
    int subsets = 0;
    double x = 0.0, expect = (double)trials / 15.0;
    for (unsigned mask = 0; mask < 64; mask++) {
      if (__builtin_popcount(mask) != k) {
        EXPECT_EQ_I(counts[mask], 0);
        continue;
      }
      subsets++;
      x += ((double)counts[mask] - expect) * ((double)counts[mask] - expect) / expect;
    }
    EXPECT_EQ_I(subsets, 15);
    if (!(x < crit))
      ng_test_fail(__FILE__, __LINE__, "k=%d: subset chi2 %.2f >= %.2f", (int)k, x, crit);
    /* A sampler that never takes positions 0 and 1 together fails the same test. */
    double xb = 0.0;
    for (unsigned mask = 0; mask < 64; mask++) {
      if (__builtin_popcount(mask) != k)
        continue;
      double o = (mask & 3u) == 3u ? 0.0 : (double)trials / (k == 2 ? 14.0 : 9.0);
      xb += (o - expect) * (o - expect) / expect;
    }
    EXPECT_TRUE(xb > crit);
    ng__sample_arena_destroy(a);
    ng__csr_free(&g);
  }
}

/* ---- determinism ---- */

typedef struct {
  unsigned char *buf;
  size_t len, cap;
} bytes_t;

/* Appends a length and `n` bytes (none when `p` is NULL, so NULL and empty arrays differ). */
static void put(bytes_t *b, const void *p, size_t n) {
  size_t rec = p ? n : (size_t)-1;
  while (b->len + n + sizeof rec > b->cap) {
    b->cap = b->cap ? b->cap * 2 : 4096;
    b->buf = realloc(b->buf, b->cap);
  }
  memcpy(b->buf + b->len, &rec, sizeof rec);
  b->len += sizeof rec;
  if (p) {
    memcpy(b->buf + b->len, p, n);
    b->len += n;
  }
}

/* All bytes of a mini-batch, concatenated (the caller frees .buf). */
static bytes_t serialize(const ng_minibatch *mb) {
  bytes_t b = {0};
  put(&b, &mb->n_layers, sizeof mb->n_layers);
  put(&b, mb->node_ids, (size_t)mb->blocks[0].n_src * sizeof(int64_t));
  for (int l = 0; l < mb->n_layers; l++) {
    const ng_block *k = &mb->blocks[l];
    size_t nd = (size_t)k->n_dst, ns = (size_t)k->n_src, ne = (size_t)k->nnz;
    put(&b, &k->n_dst, sizeof k->n_dst);
    put(&b, &k->n_src, sizeof k->n_src);
    put(&b, k->indptr, (nd + 1) * 4);
    put(&b, k->indices, ne * 4);
    put(&b, k->edge_w, ne * 4);
    put(&b, k->self_w, nd * 4);
    put(&b, k->t_indptr, (ns + 1) * 4);
    put(&b, k->t_dst, ne * 4);
    put(&b, k->t_eid, ne * 4);
  }
  return b;
}

static bool same_bytes(bytes_t x, bytes_t y) {
  return x.len == y.len && memcmp(x.buf, y.buf, x.len) == 0;
}

static void test_determinism(void) {
  ng_csr g, g64;
  ng_test_random_graph(&g, 5000, 21);
  /* The same graph with int64 indices (ng__csr_alloc picks them only from 2^31 nodes). */
  ng_test_csr_copy(&g64, &g, true);
  ng_sample_arena *a = NULL, *b = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  EXPECT_OK(ng__sample_arena_create(&b));
  ng_sampler_cfg cfg = {.graph = &g,
                        .n_layers = 3,
                        .fanout = {4, 10, 25},
                        .gcn_weights = {true, false, true},
                        .transpose = {false, true, true}};
  ng_sampler_cfg cfg64 = cfg;
  cfg64.graph = &g64;
  int64_t targets[256], other[300];
  ng_test_pick_targets(targets, 256, g.nodes, 1);
  ng_test_pick_targets(other, 300, g.nodes, 2);
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, a, &cfg, targets, 256, 42));
  check_minibatch(&g, &cfg, targets, 256, &mb);
  bytes_t ref = serialize(&mb), again;

  /* Same arena again, after a different mini-batch in between. */
  EXPECT_OK(ng__sample(&mb, a, &cfg, other, 300, 43));
  EXPECT_OK(ng__sample(&mb, a, &cfg, targets, 256, 42));
  again = serialize(&mb);
  EXPECT_TRUE(same_bytes(ref, again));
  free(again.buf);

  /* A fresh arena. */
  EXPECT_OK(ng__sample(&mb, b, &cfg, targets, 256, 42));
  again = serialize(&mb);
  EXPECT_TRUE(same_bytes(ref, again));
  free(again.buf);

  /* int64 indices give the same bytes as int32 ones. */
  EXPECT_OK(ng__sample(&mb, b, &cfg64, targets, 256, 42));
  check_minibatch(&g64, &cfg64, targets, 256, &mb);
  again = serialize(&mb);
  EXPECT_TRUE(same_bytes(ref, again));
  free(again.buf);

  /* A different seed differs. */
  EXPECT_OK(ng__sample(&mb, a, &cfg, targets, 256, 4242));
  again = serialize(&mb);
  EXPECT_TRUE(!same_bytes(ref, again));
  free(again.buf);
  free(ref.buf);
  ng__sample_arena_destroy(a);
  ng__sample_arena_destroy(b);
  ng__csr_free(&g64);
  ng__csr_free(&g);
}

/* A node's neighbours in a layer depend on (seed, layer, node) only: not on the other targets,
 * nor on the node's position in the batch. Layers use different streams. */
static void test_stream_per_node(void) {
  ng_csr g;
  ng_test_random_graph(&g, 3000, 51);
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  /* Hubs (v % 97 == 5) have 1000 neighbours: samples of 10 of them collide only by accident. */
  int64_t hub_a = 5, hub_b = 102, hub_c = 199;
  ng_sampler_cfg one = {.graph = &g, .n_layers = 1, .fanout = {10}};
  int64_t first[] = {hub_a, hub_b}, second[] = {hub_c, 17, hub_b, hub_a};
  int64_t got_first[2][10], got_second[4][10];
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, a, &one, first, 2, 3));
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < 10; i++)
      got_first[d][i] = mb.node_ids[mb.blocks[0].indices[mb.blocks[0].indptr[d] + i]];
  EXPECT_OK(ng__sample(&mb, a, &one, second, 4, 3));
  for (int d = 0; d < 4; d++)
    for (int i = 0; i < 10 && mb.blocks[0].indptr[d] + i < mb.blocks[0].indptr[d + 1]; i++)
      got_second[d][i] = mb.node_ids[mb.blocks[0].indices[mb.blocks[0].indptr[d] + i]];
  EXPECT_TRUE(memcmp(got_first[0], got_second[3], sizeof got_first[0]) == 0);
  EXPECT_TRUE(memcmp(got_first[1], got_second[2], sizeof got_first[1]) == 0);
  /* Block indices key the streams: in a 2-layer batch the hub's block-0 neighbours are those of
   * the 1-layer batch (block 0 as well), and its block-1 neighbours differ. */
  ng_sampler_cfg two = {.graph = &g, .n_layers = 2, .fanout = {10, 10}};
  EXPECT_OK(ng__sample(&mb, a, &two, first, 2, 3));
  int64_t layer0[10], layer1[10];
  for (int i = 0; i < 10; i++) {
    layer1[i] = mb.node_ids[mb.blocks[1].indices[i]];
    layer0[i] = mb.node_ids[mb.blocks[0].indices[i]];
  }
  EXPECT_TRUE(memcmp(layer0, got_first[0], sizeof layer0) == 0);
  EXPECT_TRUE(memcmp(layer0, layer1, sizeof layer0) != 0);
  ng__sample_arena_destroy(a);
  ng__csr_free(&g);
}

/* Sampling on int64 indices from scratch (not only equal to int32): structure and full rows. */
static void test_index64(void) {
  /* A hand-made graph: 0 -> {5, 3, 1, 4}, 1 -> {0}, 2 -> {}, 3 -> {0, 1, 2}, 4 -> {3}, 5 -> {0}. */
  int64_t indptr[] = {0, 4, 5, 5, 8, 9, 10};
  int64_t idx[] = {5, 3, 1, 4, 0, 0, 1, 2, 3, 0};
  ng_csr g = {.nodes = 6, .nnz = 10, .indptr = indptr, .idx64 = idx};
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  ng_sampler_cfg cfg = {.graph = &g,
                        .n_layers = 2,
                        .fanout = {-1, 2},
                        .gcn_weights = {true, true},
                        .transpose = {true, true}};
  int64_t targets[] = {0, 2};
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, a, &cfg, targets, 2, 7));
  check_minibatch(&g, &cfg, targets, 2, &mb);
  EXPECT_EQ_I(mb.blocks[1].nnz, 2); /* two of node 0's four, none of node 2 */
  EXPECT_EQ_I(mb.blocks[1].n_src, 4);
  /* blocks[0] takes every neighbour of the 4 nodes. */
  int64_t want = 0;
  for (int32_t i = 0; i < mb.blocks[0].n_dst; i++)
    want += indptr[mb.node_ids[i] + 1] - indptr[mb.node_ids[i]];
  EXPECT_EQ_I(mb.blocks[0].nnz, want);
  ng__sample_arena_destroy(a);
}

/* Node ids beyond int32 (int64 indices, as ng__csr_alloc makes from 2^31 nodes). indptr of
 * 2^31 + 64 nodes is a 16 GiB sparse mapping: every row is empty (zero pages) except those of the
 * 64 nodes above 2^31, so only its last page is touched. */
static void test_ids_beyond_int32(void) {
  enum { HUBS = 64, ROW = 12 };
  const int64_t base = (int64_t)1 << 31, nodes = base + HUBS;
  size_t bytes = ((size_t)nodes + 1) * sizeof(int64_t);
  int64_t *indptr =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (indptr == MAP_FAILED) {
    printf("        (skipped: cannot reserve %zu bytes of address space)\n", bytes);
    return;
  }
  int64_t idx[HUBS * ROW];
  /* Row of node base + i: ten other high nodes, then low nodes i and i + 100 (empty rows). */
  for (int64_t i = 0; i < HUBS; i++) {
    for (int64_t j = 0; j < 10; j++)
      idx[i * ROW + j] = base + (i + 1 + 5 * j) % HUBS;
    idx[i * ROW + 10] = i;
    idx[i * ROW + 11] = i + 100;
    indptr[base + i + 1] = (i + 1) * ROW;
  }
  ng_csr g = {.nodes = nodes, .nnz = (int64_t)HUBS * ROW, .indptr = indptr, .idx64 = idx};
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  ng_sampler_cfg cfg = {.graph = &g,
                        .n_layers = 2,
                        .fanout = {5, 4},
                        .gcn_weights = {true, true},
                        .transpose = {true, true}};
  int64_t targets[] = {base + 3, base + 40, 7};
  ng_minibatch mb;
  EXPECT_OK(ng__sample(&mb, a, &cfg, targets, 3, 11));
  int bad = 0, high = 0;
  for (int l = 0; l < 2; l++) {
    const ng_block *b = &mb.blocks[l];
    for (int32_t d = 0; d < b->n_dst; d++) {
      int64_t u = mb.node_ids[d], deg = indptr[u + 1] - indptr[u];
      bad += b->indptr[d + 1] - b->indptr[d] != NG_MIN(deg, (int64_t)cfg.fanout[l]);
      int64_t last = -1;
      for (int32_t e = b->indptr[d]; e < b->indptr[d + 1]; e++) {
        int64_t w = mb.node_ids[b->indices[e]], p = 0;
        while (p < deg && idx[indptr[u] + p] != w)
          p++;
        bad += p == deg || p <= last; /* an edge of the graph, in row order */
        last = p;
        high += w >= base;
        double dw = (double)(indptr[w + 1] - indptr[w]) + 1.0;
        bad += fabs(b->edge_w[e] - 1.0 / sqrt((double)(deg + 1) * dw)) > 1e-7;
      }
    }
  }
  EXPECT_EQ_I(bad, 0);
  EXPECT_TRUE(high > 0);
  EXPECT_EQ_I(mb.blocks[1].nnz, 8); /* 4 + 4 + none of node 7's empty row */
  ng__sample_arena_destroy(a);
  munmap(indptr, bytes);
}

/* ---- memory ---- */

static void test_steady_state(void) {
  ng_csr g;
  ng_test_random_graph(&g, 20000, 31);
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  size_t empty = ng__sample_arena_bytes(a);
  ng_sampler_cfg cfg = {.graph = &g,
                        .n_layers = 2,
                        .fanout = {10, 25},
                        .gcn_weights = {true, true},
                        .transpose = {true, true}};
  int64_t *order = malloc((size_t)g.nodes * sizeof *order), *ids = malloc((size_t)g.nodes * 8);
  for (int64_t i = 0; i < g.nodes; i++)
    ids[i] = i;
  ng__epoch_shuffle(order, ids, g.nodes, 5, 0);
  const int32_t batch = 128;
  size_t warm = 0;
  for (int it = 0; it < 150; it++) {
    ng_minibatch mb;
    EXPECT_OK(
        ng__sample(&mb, a, &cfg, order + (int64_t)it * batch, batch, ng__iter_seed(5, 0, it)));
    if (it == 29)
      warm = ng__sample_arena_bytes(a);
  }
  EXPECT_TRUE(warm > empty);
  EXPECT_EQ_I(ng__sample_arena_bytes(a), warm);
  free(ids);
  free(order);
  ng__sample_arena_destroy(a);
  ng__csr_free(&g);
}

/* ---- validation ---- */

static void test_invalid(void) {
  ng_csr g;
  ng_test_random_graph(&g, 500, 41);
  ng_sample_arena *a = NULL;
  EXPECT_OK(ng__sample_arena_create(&a));
  ng_minibatch mb;
  int64_t t[] = {1, 2, 3};
  ng_sampler_cfg cfg = {.graph = &g, .n_layers = 2, .fanout = {5, 5}};

  /* Fanout 0 is the identity block of raw-input models (GAT), for layer 0 only: no edges, and
   * its sources are its destinations, the next block's sources. */
  cfg.fanout[1] = 0;
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, t, 3, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("fanout 0 of layer 1");
  cfg.fanout[1] = 5;
  cfg.fanout[0] = 0;
  EXPECT_OK(ng__sample(&mb, a, &cfg, t, 3, 1));
  EXPECT_EQ_I(mb.blocks[0].nnz, 0);
  EXPECT_EQ_I(mb.blocks[0].n_dst, mb.blocks[1].n_src);
  EXPECT_EQ_I(mb.blocks[0].n_src, mb.blocks[0].n_dst);
  EXPECT_TRUE(mb.blocks[1].nnz > 0);
  for (int32_t d = 0; d <= mb.blocks[0].n_dst; d++)
    EXPECT_EQ_I(mb.blocks[0].indptr[d], 0);
  cfg.fanout[0] = -2;
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, t, 3, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("-1 (all neighbours)");
  cfg.fanout[0] = 5;
  cfg.n_layers = 0;
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, t, 3, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("0 layers");
  cfg.n_layers = NG_MAX_LAYERS + 1;
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, t, 3, 1), NG_ERR_INVALID_ARG);
  cfg.n_layers = 2;
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, t, 0, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("at least one");

  int64_t out_of_range[] = {1, 500};
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, out_of_range, 2, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("targets[1] = 500");
  int64_t negative[] = {-1};
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, negative, 1, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("targets[0] = -1");
  int64_t dup[] = {7, 8, 9, 8};
  EXPECT_STATUS(ng__sample(&mb, a, &cfg, dup, 4, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("targets[3] = 8 repeats targets[1]");
  EXPECT_EQ_I(mb.n_layers, 0); /* nothing half-filled looks valid */

  ng_sampler_cfg no_graph = {.n_layers = 1, .fanout = {5}};
  EXPECT_STATUS(ng__sample(&mb, a, &no_graph, t, 3, 1), NG_ERR_INVALID_ARG);

  /* After errors the arena still works. */
  EXPECT_OK(ng__sample(&mb, a, &cfg, t, 3, 1));
  check_minibatch(&g, &cfg, t, 3, &mb);
  ng__sample_arena_destroy(a);
  ng__sample_arena_destroy(NULL);
  ng__csr_free(&g);
}

/* ---- epoch shuffle ---- */

/* The shuffle's definition: Fisher-Yates from the end with one stream per (seed, epoch). The
 * library's version draws its partners ahead to prefetch them; it must give these bits. */
static void shuffle_reference(int64_t *out, const int64_t *ids, int64_t n, uint64_t seed,
                              int64_t epoch) {
  memmove(out, ids, (size_t)n * sizeof *out);
  ng_rng r;
  ng_rng_seed(&r, ng_hash2(seed, (uint64_t)epoch));
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)i + 1);
    int64_t t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
}

/* Shorter and longer than the draw-ahead window, in place and not. */
static void test_epoch_shuffle_bits(void) {
  const int64_t sizes[] = {1, 2, 3, 31, 32, 33, 64, 1000, 100003};
  int64_t *ids = malloc(100003 * sizeof *ids), *got = malloc(100003 * sizeof *got),
          *want = malloc(100003 * sizeof *want);
  EXPECT_TRUE(ids && got && want);
  for (int64_t i = 0; ids && got && want && i < 100003; i++)
    ids[i] = 5 * i + 2;
  for (size_t k = 0; ids && got && want && k < NG_ARRAY_LEN(sizes); k++) {
    const int64_t n = sizes[k];
    for (int64_t epoch = 0; epoch < 3; epoch++) {
      shuffle_reference(want, ids, n, 7 + (uint64_t)k, epoch);
      ng__epoch_shuffle(got, ids, n, 7 + (uint64_t)k, epoch);
      EXPECT_TRUE(memcmp(got, want, (size_t)n * sizeof *got) == 0);
      memcpy(got, ids, (size_t)n * sizeof *got);
      ng__epoch_shuffle(got, got, n, 7 + (uint64_t)k, epoch);
      EXPECT_TRUE(memcmp(got, want, (size_t)n * sizeof *got) == 0);
    }
  }
  free(ids);
  free(got);
  free(want);
}

static void test_epoch_shuffle(void) {
  enum { N = 1000 };
  int64_t ids[N], e0[N], e0b[N], e1[N], sorted[N];
  for (int i = 0; i < N; i++)
    ids[i] = 3 * i + 1; /* not 0..N-1: the shuffle permutes values, it does not make ids */
  ng__epoch_shuffle(e0, ids, N, 99, 0);
  ng__epoch_shuffle(e1, ids, N, 99, 1);
  memcpy(e0b, ids, sizeof ids);
  ng__epoch_shuffle(e0b, e0b, N, 99, 0); /* in place gives the same */
  EXPECT_TRUE(memcmp(e0, e0b, sizeof e0) == 0);
  memcpy(sorted, e0, sizeof e0);
  qsort(sorted, N, sizeof *sorted, ng_test_cmp_i64);
  EXPECT_TRUE(memcmp(sorted, ids, sizeof ids) == 0);
  memcpy(sorted, e1, sizeof e1);
  qsort(sorted, N, sizeof *sorted, ng_test_cmp_i64);
  EXPECT_TRUE(memcmp(sorted, ids, sizeof ids) == 0);
  int same01 = 0, fixed = 0;
  for (int i = 0; i < N; i++) {
    same01 += e0[i] == e1[i];
    fixed += e0[i] == ids[i];
  }
  /* A random permutation has about one fixed point; allow a generous margin. */
  EXPECT_TRUE(same01 < 10);
  EXPECT_TRUE(fixed < 10);
  int64_t other_seed[N];
  ng__epoch_shuffle(other_seed, ids, N, 100, 0);
  EXPECT_TRUE(memcmp(other_seed, e0, sizeof e0) != 0);
}

/* The CPU backend's device sampler (what the sample feed uses without a GPU) copies the CPU
 * sampler's blocks into the caller's buffer: the same checks as the CUDA backend's
 * (tests/test_gpu_sample.c). */
static void test_device_sampler(void) {
  ng_backend *be = NULL;
  EXPECT_OK(ng__backend_cpu_create(&be, 0));
  if (be)
    ng_test_check_device_sampler(be, NULL);
  ng__backend_destroy(be);
}

int main(void) {
  RUN_TEST(test_structure);
  RUN_TEST(test_all_neighbours);
  RUN_TEST(test_cora);
  RUN_TEST(test_uniform_marginals);
  RUN_TEST(test_uniform_subsets);
  RUN_TEST(test_floyd_positions);
  RUN_TEST(test_determinism);
  RUN_TEST(test_stream_per_node);
  RUN_TEST(test_index64);
  RUN_TEST(test_ids_beyond_int32);
  RUN_TEST(test_steady_state);
  RUN_TEST(test_invalid);
  RUN_TEST(test_epoch_shuffle);
  RUN_TEST(test_epoch_shuffle_bits);
  RUN_TEST(test_device_sampler);
  return ng_test_summary();
}
