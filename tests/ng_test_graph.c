#include "ng_test_graph.h"

#include "sampler_impl.h"

#include <stdlib.h>

float ng_test_frand(ng_rng *r) {
  float v;
  do
    v = (float)(2.0 * ng_rng_uniform(r) - 1.0);
  while (v == 0.0f);
  return v;
}

float *ng_test_rand_floats(ng_rng *r, int64_t n) {
  float *x = ng_test_xmalloc((size_t)n * sizeof *x);
  for (int64_t i = 0; i < n; i++)
    x[i] = ng_test_frand(r);
  return x;
}

void ng_test_block_fill(ng_test_block *tb, ng_rng *r, int32_t n_dst, int32_t n_src, bool repeats,
                        bool force_dup) {
  int32_t nd = n_dst, ns = n_src;
  int32_t nnz = tb->indptr[nd];
  tb->indices = ng_test_xmalloc((size_t)nnz * sizeof(int32_t));
  tb->edge_w = ng_test_xmalloc((size_t)nnz * sizeof(float));
  tb->self_w = ng_test_xmalloc((size_t)nd * sizeof(float));
  for (int32_t d = 0; d < nd; d++) {
    tb->self_w[d] = (float)(0.1 + 0.9 * ng_rng_uniform(r));
    for (int32_t e = tb->indptr[d]; e < tb->indptr[d + 1]; e++) {
      int32_t s;
      bool again;
      do {
        s = (int32_t)ng_rng_below(r, (uint64_t)ns);
        again = false;
        for (int32_t e2 = tb->indptr[d]; e2 < e && !repeats; e2++)
          again |= tb->indices[e2] == s;
      } while (again);
      tb->indices[e] = s;
      tb->edge_w[e] = (float)(0.1 + 0.9 * ng_rng_uniform(r));
    }
  }
  if (force_dup)
    for (int32_t d = 0; d < nd; d++)
      if (tb->indptr[d + 1] - tb->indptr[d] >= 2) {
        tb->indices[tb->indptr[d + 1] - 1] = tb->indices[tb->indptr[d]];
        break;
      }
  /* The transpose by a counting sort over the sources. */
  tb->t_indptr = calloc((size_t)ns + 1, sizeof(int32_t));
  tb->t_dst = ng_test_xmalloc((size_t)nnz * sizeof(int32_t));
  tb->t_eid = ng_test_xmalloc((size_t)nnz * sizeof(int32_t));
  int32_t *cur = ng_test_xmalloc(((size_t)ns + 1) * sizeof(int32_t));
  for (int32_t e = 0; e < nnz; e++)
    tb->t_indptr[tb->indices[e] + 1]++;
  for (int32_t s = 0; s < ns; s++)
    tb->t_indptr[s + 1] += tb->t_indptr[s];
  memcpy(cur, tb->t_indptr, (size_t)ns * sizeof(int32_t));
  for (int32_t d = 0; d < nd; d++)
    for (int32_t e = tb->indptr[d]; e < tb->indptr[d + 1]; e++) {
      int32_t at = cur[tb->indices[e]]++;
      tb->t_dst[at] = d;
      tb->t_eid[at] = e;
    }
  free(cur);
  tb->b = (ng_block){.n_dst = nd,
                     .n_src = ns,
                     .nnz = nnz,
                     .indptr = tb->indptr,
                     .indices = tb->indices,
                     .edge_w = tb->edge_w,
                     .self_w = tb->self_w,
                     .t_indptr = tb->t_indptr,
                     .t_dst = tb->t_dst,
                     .t_eid = tb->t_eid};
}

void ng_test_block_free(ng_test_block *tb) {
  free(tb->indptr);
  free(tb->indices);
  free(tb->edge_w);
  free(tb->self_w);
  free(tb->t_indptr);
  free(tb->t_dst);
  free(tb->t_eid);
}

void ng_test_csr_copy(ng_csr *out, const ng_csr *g, bool wide) {
  memset(out, 0, sizeof *out);
  out->nodes = g->nodes;
  out->nnz = g->nnz;
  out->indptr = ng_test_xmalloc(((size_t)g->nodes + 1) * sizeof(int64_t));
  memcpy(out->indptr, g->indptr, ((size_t)g->nodes + 1) * sizeof(int64_t));
  if (wide)
    out->idx64 = ng_test_xmalloc(((size_t)g->nnz + 1) * sizeof(int64_t));
  else
    out->idx32 = ng_test_xmalloc(((size_t)g->nnz + 1) * sizeof(int32_t));
  for (int64_t e = 0; e < g->nnz; e++) {
    if (wide)
      out->idx64[e] = ng__csr_index(g, e);
    else
      out->idx32[e] = (int32_t)ng__csr_index(g, e);
  }
}

int64_t *ng_test_read_edges(const char *path, int64_t *count) {
  *count = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  int64_t cap = 1 << 14, m = 0;
  int64_t *ends = ng_test_xmalloc((size_t)cap * 2 * sizeof *ends);
  char line[256];
  while (fgets(line, sizeof line, f)) {
    long long a, b;
    if (line[0] == '#' || sscanf(line, "%lld %lld", &a, &b) != 2)
      continue;
    if (m == cap) {
      cap *= 2;
      int64_t *more = realloc(ends, (size_t)cap * 2 * sizeof *ends);
      if (!more) {
        fprintf(stderr, "out of memory reading %s\n", path);
        exit(2);
      }
      ends = more;
    }
    ends[2 * m] = a;
    ends[2 * m + 1] = b;
    m++;
  }
  fclose(f);
  *count = m;
  return ends;
}

void ng_test_undirected_csr(int64_t *indptr, int32_t *indices, int64_t nodes, const int64_t *ends,
                            int64_t m) {
  memset(indptr, 0, ((size_t)nodes + 1) * sizeof *indptr);
  for (int64_t i = 0; i < 2 * m; i++)
    indptr[ends[i] + 1]++;
  for (int64_t v = 0; v < nodes; v++)
    indptr[v + 1] += indptr[v];
  int64_t *cur = ng_test_xmalloc(((size_t)nodes + 1) * sizeof *cur);
  memcpy(cur, indptr, (size_t)nodes * sizeof *cur);
  for (int64_t i = 0; i < m; i++) {
    indices[cur[ends[2 * i]]++] = (int32_t)ends[2 * i + 1];
    indices[cur[ends[2 * i + 1]]++] = (int32_t)ends[2 * i];
  }
  free(cur);
}

/* ---- finite-difference gradient checks ---- */

/* sum_i r_i y_i in double */
double ng_test_dot(const float *r, const float *y, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++)
    s += (double)r[i] * y[i];
  return s;
}

/* Compares analytic[i] with the central difference of f at every element of x. */
void ng_test_gradcheck(const char *what, float *x, int64_t n, const float *analytic,
                       ng_test_loss_fn f, void *ctx, float h, double atol, double rtol) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    x[i] = xi + h;
    const double step_hi = x[i], lp = f(ctx);
    x[i] = xi - h;
    const double step_lo = x[i], lm = f(ctx);
    x[i] = xi;
    const double fd = (lp - lm) / (step_hi - step_lo);
    const double an = analytic[i];
    if (!(fabs(fd - an) <= atol + rtol * fabs(an))) {
      if (bad++ < 3)
        ng_test_fail(__FILE__, __LINE__, "%s: d/dx[%lld]: analytic %.9g, finite difference %.9g",
                     what, (long long)i, an, fd);
    }
  }
  if (bad > 3)
    ng_test_fail(__FILE__, __LINE__, "%s: %lld of %lld elements off", what, (long long)bad,
                 (long long)n);
}

/* ---- sampled graphs and the device sampler ---- */

/* A random graph of `n` nodes: row lengths uniform in [0, 20) (so some nodes are isolated), and
 * every node v with v % 97 == 5 a hub with n / 3 neighbours. Rows hold distinct neighbours in a
 * random (unsorted) order, so "kept in row order" is a real property to check. */
void ng_test_random_graph(ng_csr *g, int64_t n, uint64_t seed) {
  ng_rng r;
  ng_rng_seed(&r, seed);
  int64_t *deg = malloc((size_t)n * sizeof *deg);
  int64_t nnz = 0;
  for (int64_t v = 0; v < n; v++) {
    deg[v] = v % 97 == 5 ? n / 3 : (int64_t)ng_rng_below(&r, 20);
    nnz += deg[v];
  }
  EXPECT_OK(ng__csr_alloc(g, n, nnz));
  EXPECT_TRUE(g->idx32 != NULL);
  int64_t *mark = calloc((size_t)n, sizeof *mark);
  int64_t e = 0;
  for (int64_t v = 0; v < n; v++) {
    g->indptr[v] = e;
    for (int64_t i = 0; i < deg[v]; i++) {
      int64_t u;
      do
        u = (int64_t)ng_rng_below(&r, (uint64_t)n);
      while (mark[u] == v + 1);
      mark[u] = v + 1;
      g->idx32[e++] = (int32_t)u;
    }
  }
  g->indptr[n] = e;
  free(mark);
  free(deg);
}

/* `count` distinct targets drawn from [0, n) with a seed. */
void ng_test_pick_targets(int64_t *out, int32_t count, int64_t n, uint64_t seed) {
  int64_t *all = malloc((size_t)n * sizeof *all);
  for (int64_t i = 0; i < n; i++)
    all[i] = i;
  ng__epoch_shuffle(all, all, n, seed, 0);
  memcpy(out, all, (size_t)count * sizeof *out);
  free(all);
}

/* Whether two mini-batches hold the same counts and the same bytes in every array (an array
 * NULL in one must be NULL in the other). */
static bool same_minibatch(const ng_minibatch *a, const ng_minibatch *b) {
  const void *sa[NG_MB_ARRAYS], *sb[NG_MB_ARRAYS];
  size_t na[NG_MB_ARRAYS], nb[NG_MB_ARRAYS];
  if (a->n_layers != b->n_layers || a->n_targets != b->n_targets)
    return false;
  for (int l = 0; l < a->n_layers; l++) {
    const ng_block *x = &a->blocks[l], *y = &b->blocks[l];
    if (x->n_dst != y->n_dst || x->n_src != y->n_src || x->nnz != y->nnz ||
        !x->edge_w != !y->edge_w || !x->t_indptr != !y->t_indptr)
      return false;
  }
  const int k = ng__minibatch_arrays(a, sa, na);
  if (ng__minibatch_arrays(b, sb, nb) != k)
    return false;
  for (int i = 0; i < k; i++)
    if (na[i] != nb[i] || (na[i] && memcmp(sa[i], sb[i], na[i]) != 0))
      return false;
  return true;
}

void ng_test_check_device_sampler(ng_backend *be, double *edges_per_s) {
  ng_csr g, g64;
  ng_test_random_graph(&g, 20000, 5);
  ng_test_csr_copy(&g64, &g, true);
  ng_dev_sampler *ds = NULL, *ds64 = NULL;
  EXPECT_OK(be->iface->sampler_create(be, &g, 2, &ds));
  EXPECT_OK(be->iface->sampler_create(be, &g64, 1, &ds64));
  ng_sample_arena *arena = NULL;
  EXPECT_OK(ng__sample_arena_create(&arena));
  /* fanouts around every branch of the draw: rows of at most 64 (mask), longer ones (sorted
   * draw), k > n / 2 (excluded positions), whole rows, the full neighbourhood, none */
  const ng_sampler_cfg cfgs[] = {
      {.graph = &g,
       .n_layers = 3,
       .fanout = {4, 10, 25},
       .gcn_weights = {true, false, true},
       .transpose = {false, true, true}},
      {.graph = &g, .n_layers = 2, .fanout = {3000, 15}, .transpose = {true, true}},
      {.graph = &g, .n_layers = 2, .fanout = {5000, 6000}, .gcn_weights = {true, true}},
      {.graph = &g, .n_layers = 1, .fanout = {-1}, .gcn_weights = {true}, .transpose = {true}},
      {.graph = &g, .n_layers = 4, .fanout = {2, 3, 5, 1}, .transpose = {true, true, true, true}},
      /* the identity block of raw-input models (GAT, SAGE-pool): fanout 0, no edges */
      {.graph = &g, .n_layers = 3, .fanout = {0, 10, 25}, .transpose = {false, true, true}},
  };
  void *host = NULL;
  size_t cap = 0;
  int64_t targets[2048]; /* at most 37 + 300 * (configurations - 1) */
  int64_t edges = 0;
  double seconds = 0.0;
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    for (int rep = 0; rep < 3; rep++) {
      const int32_t n = rep == 1 ? 1500 : 37 + 300 * (int32_t)c;
      ng_test_pick_targets(targets, n, g.nodes, 100 * c + (uint64_t)rep);
      const uint64_t seed = 7 + 13 * (uint64_t)rep;
      ng_minibatch want, got, got64;
      EXPECT_OK(ng__sample(&want, arena, &cfgs[c], targets, n, seed));
      const double t0 = ng__now();
      EXPECT_OK(
          be->iface->sampler_run(be, ds, rep % 2, &cfgs[c], targets, n, seed, &got, &host, &cap));
      seconds += ng__now() - t0;
      for (int l = 0; l < want.n_layers; l++)
        edges += want.blocks[l].nnz;
      if (!same_minibatch(&want, &got))
        ng_test_fail(__FILE__, __LINE__,
                     "device sampler: configuration %zu, batch %d differs "
                     "from the CPU sampler's blocks",
                     c, rep);
      ng_sampler_cfg c64 = cfgs[c];
      c64.graph = &g64;
      EXPECT_OK(be->iface->sampler_run(be, ds64, 0, &c64, targets, n, seed, &got64, &host, &cap));
      if (!same_minibatch(&want, &got64))
        ng_test_fail(__FILE__, __LINE__,
                     "device sampler, int64 indices: configuration %zu, "
                     "batch %d differs from the CPU sampler's blocks",
                     c, rep);
    }
  }
  /* bad targets are refused with the CPU sampler's messages */
  targets[1] = targets[0];
  ng_minibatch mb;
  EXPECT_STATUS(be->iface->sampler_run(be, ds, 0, &cfgs[0], targets, 2, 1, &mb, &host, &cap),
                NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(ng_last_error(), "distinct") != NULL);
  targets[1] = g.nodes;
  EXPECT_STATUS(be->iface->sampler_run(be, ds, 1, &cfgs[0], targets, 2, 1, &mb, &host, &cap),
                NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(ng_last_error(), "not a node id") != NULL);
  EXPECT_STATUS(be->iface->sampler_run(be, ds64, 1, &cfgs[0], targets, 1, 1, &mb, &host, &cap),
                NG_ERR_INVALID_ARG);
  if (edges_per_s)
    *edges_per_s = seconds > 0 ? (double)edges / seconds : 0.0;
  be->iface->host_free(be, host);
  ng__sample_arena_destroy(arena);
  be->iface->sampler_destroy(be, ds);
  be->iface->sampler_destroy(be, ds64);
  ng__csr_free(&g64);
  ng__csr_free(&g);
}
