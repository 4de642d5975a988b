/* Hot-set scoring and renumbering (docs/tiering.md): scores that predict how often sampling
 * reads each node's features, the permutation that puts the hottest nodes first, and the
 * dataset writer that applies it, so that a GPU cache of H feature rows holds ids [0, H).
 *
 * Determinism: floating-point sums run in a fixed order. The PageRank pulls over a transpose
 * whose rows are sorted, and the rank of empty rows is summed per fixed block of nodes, then
 * over the blocks in order; so scores, permutation and files never depend on the thread count. */
#include "tiering_impl.h"

#include "dataset_impl.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nodes per block of the fixed partition whose partial sums are added in block order. */
#define SUM_BLOCK 16384
/* Rows of the transpose at most this long are insertion-sorted, longer ones by qsort. */
#define INSERTION_MAX 32
/* More iterations than this only cost time: the ranks have long converged. */
#define MAX_ITERATIONS 1000
/* Feature rows copied between two progress reports. */
#define COPY_BLOCK 65536

static const char *const SCORE_NAME[] = {"degree", "rpr", "wrpr"};
/* The fractions of the nodes reported in ng_reorder_opts.entry_share. */
static const double SHARE_FRACTION[NG_REORDER_SHARES] = {0.05, 0.10, 0.25};

static int thread_count(int threads) {
  return threads > 0 ? threads : omp_get_max_threads();
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void sort_i64(int64_t *a, int64_t n) {
  if (n > INSERTION_MAX) {
    qsort(a, (size_t)n, sizeof *a, cmp_i64);
    return;
  }
  for (int64_t i = 1; i < n; i++) {
    int64_t x = a[i], j = i;
    for (; j > 0 && a[j - 1] > x; j--)
      a[j] = a[j - 1];
    a[j] = x;
  }
}

/* ---- scores ---- */

/* The transpose of a CSR: row u lists, ascending, every v whose row holds u (once per entry). */
typedef struct {
  int64_t *indptr; /* [nodes + 1] */
  int64_t *src;    /* [nnz] */
} transpose;

static void transpose_free(transpose *t) {
  free(t->indptr);
  free(t->src);
  memset(t, 0, sizeof *t);
}

static ng_status transpose_build(transpose *t, const ng_csr *g, int nt) {
  int64_t n = g->nodes;
  memset(t, 0, sizeof *t);
  int64_t *cursor = NULL;
  t->indptr = ng__malloc((size_t)(n + 1) * sizeof *t->indptr, "the transpose's row offsets");
  t->src = ng__malloc((size_t)NG_MAX(g->nnz, 1) * sizeof *t->src, "the transpose's entries");
  cursor = ng__malloc((size_t)NG_MAX(n, 1) * sizeof *cursor, "the transpose's fill cursors");
  ng_status st = NG_ERR_NOMEM;
  if (!t->indptr || !t->src || !cursor)
    goto fail;
  t->indptr[0] = 0;
  NG_CHECK_GOTO(st, ng__csr_in_degrees(g, t->indptr + 1), fail);
  for (int64_t u = 0; u < n; u++)
    t->indptr[u + 1] += t->indptr[u];
  memcpy(cursor, t->indptr, (size_t)n * sizeof *cursor);
  /* Where an entry lands inside its row depends on timing; sorting the rows below removes it. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1024)
  for (int64_t v = 0; v < n; v++)
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++) {
      int64_t pos = __atomic_fetch_add(&cursor[ng__csr_index(g, e)], 1, __ATOMIC_RELAXED);
      t->src[pos] = v;
    }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1024)
  for (int64_t u = 0; u < n; u++)
    sort_i64(t->src + t->indptr[u], t->indptr[u + 1] - t->indptr[u]);
  free(cursor);
  return NG_OK;
fail:
  free(cursor);
  transpose_free(t);
  return st;
}

/* The rank held by empty rows, summed per fixed block and then over the blocks in order. */
static double dangling_mass(const double *r, const int64_t *indptr, int64_t n, double *partial,
                            int nt) {
  int64_t blocks = (n + SUM_BLOCK - 1) / SUM_BLOCK;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t b = 0; b < blocks; b++) {
    double s = 0.0;
    int64_t end = NG_MIN(n, (b + 1) * SUM_BLOCK);
    for (int64_t v = b * SUM_BLOCK; v < end; v++)
      if (indptr[v + 1] == indptr[v])
        s += r[v];
    partial[b] = s;
  }
  double m = 0.0;
  for (int64_t b = 0; b < blocks; b++)
    m += partial[b];
  return m;
}

static ng_status pagerank(double *out, const ng_csr *g, const int64_t *train, int64_t n_train,
                          bool weighted, int iterations, int nt, ng_progress *progress) {
  int64_t n = g->nodes;
  transpose t = {0};
  double *tele = ng__malloc((size_t)n * sizeof *tele, "the teleport vector");
  double *next = ng__malloc((size_t)n * sizeof *next, "the next ranks");
  double *contrib = ng__malloc((size_t)n * sizeof *contrib, "the rank shares");
  double *partial = ng__malloc((size_t)(n / SUM_BLOCK + 1) * sizeof *partial, "partial sums");
  ng_status st = NG_ERR_NOMEM;
  if (!tele || !next || !contrib || !partial)
    goto done;

  if (!weighted) {
    for (int64_t v = 0; v < n; v++)
      tele[v] = out[v] = 1.0 / (double)n;
  } else {
    /* Training nodes are marked first (duplicates count once), then the two vectors are set:
     * teleport only to training nodes; the start weights them by n / n_train as in the paper. */
    memset(tele, 0, (size_t)n * sizeof *tele);
    int64_t marked = 0;
    for (int64_t i = 0; i < n_train; i++) {
      int64_t v = train[i];
      if (v < 0 || v >= n) {
        st = ng__err(NG_ERR_INVALID_ARG,
                     "training id %lld (position %lld) is not a node id in [0, %lld); fix the "
                     "training split",
                     (long long)v, (long long)i, (long long)n);
        goto done;
      }
      if (tele[v] == 0.0) {
        tele[v] = 1.0;
        marked++;
      }
    }
    if (marked == 0) {
      st = ng__err(NG_ERR_INVALID_ARG, "weighted reverse PageRank needs training nodes, and the "
                                       "training split is empty; use the rpr or degree score");
      goto done;
    }
    double w = (double)n / (double)marked, z = (double)marked * w + (double)(n - marked);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t v = 0; v < n; v++) {
      bool is_train = tele[v] != 0.0;
      out[v] = (is_train ? w : 1.0) / z;
      tele[v] = is_train ? 1.0 / (double)marked : 0.0;
    }
  }

  NG_CHECK_GOTO(st, transpose_build(&t, g, nt), done);
  const double d = NG_HOT_DAMPING;
  for (int it = 0; it < iterations; it++) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t v = 0; v < n; v++) {
      int64_t len = g->indptr[v + 1] - g->indptr[v];
      contrib[v] = len > 0 ? out[v] / (double)len : 0.0;
    }
    double m = dangling_mass(out, g->indptr, n, partial, nt);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1024)
    for (int64_t u = 0; u < n; u++) {
      double s = 0.0;
      for (int64_t e = t.indptr[u]; e < t.indptr[u + 1]; e++)
        s += contrib[t.src[e]];
      next[u] = (1.0 - d) * tele[u] + d * (s + m * tele[u]);
    }
    memcpy(out, next, (size_t)n * sizeof *out);
    if (progress)
      NG_CHECK_GOTO(st, ng__progress(progress, "scores", it + 1, iterations, it + 1 == iterations),
                    done);
  }
  st = NG_OK;
done:
  transpose_free(&t);
  free(tele);
  free(next);
  free(contrib);
  free(partial);
  return st;
}

ng_status ng__hot_scores(double *out, const ng_csr *g, ng_hot_score kind, const int64_t *train,
                         int64_t n_train, int iterations, int threads, ng_progress *progress) {
  int64_t n = g->nodes;
  if (n <= 0)
    return ng__err(NG_ERR_INVALID_ARG, "hot-set scores of a graph without nodes");
  int nt = thread_count(threads);
  switch (kind) {
  case NG_HOT_DEGREE: {
    int64_t *deg = ng__malloc((size_t)n * sizeof *deg, "the in-degrees");
    if (!deg)
      return NG_ERR_NOMEM;
    ng_status st = ng__csr_in_degrees(g, deg);
    if (st == NG_OK) {
#pragma omp parallel for num_threads(nt) schedule(static)
      for (int64_t v = 0; v < n; v++)
        out[v] = (double)deg[v];
    }
    free(deg);
    if (st == NG_OK && progress)
      st = ng__progress(progress, "scores", 1, 1, true);
    return st;
  }
  case NG_HOT_RPR:
  case NG_HOT_WRPR:
    if (iterations < 1 || iterations > MAX_ITERATIONS)
      return ng__err(NG_ERR_INVALID_ARG, "%d PageRank iterations; give 1 to %d (10 is plenty)",
                     iterations, MAX_ITERATIONS);
    return pagerank(out, g, train, n_train, kind == NG_HOT_WRPR, iterations, nt, progress);
  }
  return ng__err(NG_ERR_INVALID_ARG, "hot-set score %d is not one of degree (0), rpr (1), wrpr (2)",
                 (int)kind);
}

/* ---- the order ---- */

typedef struct {
  double score;
  int64_t id;
} keyed;

/* Descending score, then ascending id: a total order, so every sort gives the same result. */
static inline bool keyed_before(const keyed *a, const keyed *b) {
  return a->score > b->score || (a->score == b->score && a->id < b->id);
}

static int cmp_keyed(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  return keyed_before(a, b) ? -1 : keyed_before(b, a) ? 1 : 0;
}

static void merge(keyed *dst, const keyed *a, int64_t na, const keyed *b, int64_t nb) {
  int64_t i = 0, j = 0, k = 0;
  while (i < na && j < nb)
    dst[k++] = keyed_before(&b[j], &a[i]) ? b[j++] : a[i++];
  while (i < na)
    dst[k++] = a[i++];
  while (j < nb)
    dst[k++] = b[j++];
}

ng_status ng__hot_order(int64_t *perm, const double *score, int64_t n, int threads) {
  if (n <= 0)
    return ng__err(NG_ERR_INVALID_ARG, "hot-set order of %lld nodes", (long long)n);
  for (int64_t v = 0; v < n; v++)
    if (isnan(score[v]))
      return ng__err(NG_ERR_INVALID_ARG, "hot-set score of node %lld is NaN", (long long)v);
  int nt = thread_count(threads);
  int64_t chunks = NG_MIN((int64_t)nt, n);
  keyed *a = ng__malloc((size_t)n * sizeof *a, "the sort keys");
  keyed *b = ng__malloc((size_t)n * sizeof *b, "the merge buffer");
  int64_t *bounds = ng__malloc((size_t)(chunks + 1) * sizeof *bounds, "the sort chunks");
  ng_status st = NG_ERR_NOMEM;
  if (!a || !b || !bounds)
    goto done;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t v = 0; v < n; v++)
    a[v] = (keyed){score[v], v};
  for (int64_t c = 0; c <= chunks; c++)
    bounds[c] = n * c / chunks;
    /* Each thread sorts a chunk, then chunks merge pairwise; the order is total, so the result is
     * the one sorted sequence whatever the chunking. */
#pragma omp parallel for num_threads(nt) schedule(static, 1)
  for (int64_t c = 0; c < chunks; c++)
    qsort(a + bounds[c], (size_t)(bounds[c + 1] - bounds[c]), sizeof *a, cmp_keyed);
  keyed *from = a, *to = b;
  for (int64_t w = 1; w < chunks; w *= 2) {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; c += 2 * w) {
      int64_t lo = bounds[c], mid = bounds[NG_MIN(c + w, chunks)],
              hi = bounds[NG_MIN(c + 2 * w, chunks)];
      merge(to + lo, from + lo, mid - lo, from + mid, hi - mid);
    }
    keyed *tmp = from;
    from = to;
    to = tmp;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < n; i++)
    perm[from[i].id] = i;
  st = NG_OK;
done:
  free(a);
  free(b);
  free(bounds);
  return st;
}

/* ---- the reordered dataset ---- */

typedef struct {
  const struct ng_dataset *src;
  ng_reorder_opts o;
  int nt;
  ng_progress progress;
  int64_t *perm; /* old -> new */
  int64_t *inv;  /* new -> old */
  ng_dataset_writer w;
} reorder;

static ng_status write_graph(reorder *r, double share[NG_REORDER_SHARES]) {
  int64_t n = r->src->info.nodes;
  ng_csr g = {0};
  /* ng__csr_relabel runs on the OpenMP default team; give it the requested one, then restore. */
  int prev = omp_get_max_threads();
  omp_set_num_threads(r->nt);
  ng_status st = ng__csr_relabel(&g, &r->src->csr, r->perm);
  omp_set_num_threads(prev);
  if (st != NG_OK)
    return st;

  int64_t hot[NG_REORDER_SHARES], hits[NG_REORDER_SHARES] = {0};
  for (int k = 0; k < NG_REORDER_SHARES; k++)
    hot[k] = (int64_t)floor(SHARE_FRACTION[k] * (double)n);
  int64_t h0 = 0, h1 = 0, h2 = 0;
#pragma omp parallel for num_threads(r->nt) schedule(static) reduction(+ : h0, h1, h2)
  for (int64_t e = 0; e < g.nnz; e++) {
    int64_t u = ng__csr_index(&g, e);
    h0 += u < hot[0];
    h1 += u < hot[1];
    h2 += u < hot[2];
  }
  hits[0] = h0;
  hits[1] = h1;
  hits[2] = h2;
  for (int k = 0; k < NG_REORDER_SHARES; k++)
    share[k] = g.nnz > 0 ? (double)hits[k] / (double)g.nnz : 0.0;

  ng_npy *arr = NULL;
  int64_t shape[2] = {n + 1, 0};
  NG_CHECK_GOTO(st, ng__writer_array(&arr, &r->w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, shape), done);
  memcpy(arr->data, g.indptr, (size_t)(n + 1) * sizeof *g.indptr);
  shape[0] = g.nnz;
  ng_dtype dt = g.idx32 ? NG_DTYPE_I32 : NG_DTYPE_I64;
  NG_CHECK_GOTO(st, ng__writer_array(&arr, &r->w, NG_ARR_INDICES, dt, 1, shape), done);
  if (g.nnz > 0)
    memcpy(arr->data, g.idx32 ? (void *)g.idx32 : (void *)g.idx64,
           (size_t)g.nnz * ng__dtype_size(dt));
  st = ng__progress(&r->progress, "graph", (double)g.nnz, (double)g.nnz, true);
done:
  ng__csr_free(&g);
  return st;
}

static ng_status write_nodes(reorder *r) {
  const struct ng_dataset *src = r->src;
  int64_t n = src->info.nodes, dim = src->info.feature_dim;
  ng_npy *arr = NULL;
  int64_t shape[2] = {n, dim};
  if (src->features) {
    NG_CHECK(ng__writer_array(&arr, &r->w, NG_ARR_FEATURES, NG_DTYPE_F32, 2, shape));
    float *dst = arr->data;
    for (int64_t b = 0; b < n; b += COPY_BLOCK) {
      int64_t end = NG_MIN(n, b + COPY_BLOCK);
#pragma omp parallel for num_threads(r->nt) schedule(static)
      for (int64_t i = b; i < end; i++)
        memcpy(dst + i * dim, src->features + r->inv[i] * dim, (size_t)dim * sizeof *dst);
      NG_CHECK(ng__progress(&r->progress, "features", (double)end, (double)n, end == n));
    }
  }
  if (src->labels) {
    NG_CHECK(ng__writer_array(&arr, &r->w, NG_ARR_LABELS, NG_DTYPE_I32, 1, shape));
    int32_t *dst = arr->data;
#pragma omp parallel for num_threads(r->nt) schedule(static)
    for (int64_t i = 0; i < n; i++)
      dst[i] = src->labels[r->inv[i]];
  }
  const int64_t counts[3] = {src->info.train, src->info.val, src->info.test};
  for (int s = 0; s < 3; s++) {
    if (counts[s] == 0 || !src->split[s])
      continue;
    shape[0] = counts[s];
    NG_CHECK(
        ng__writer_array(&arr, &r->w, (ng_array_id)(NG_ARR_TRAIN + s), NG_DTYPE_I64, 1, shape));
    int64_t *dst = arr->data;
    const int64_t *ids = src->split[s];
#pragma omp parallel for num_threads(r->nt) schedule(static)
    for (int64_t i = 0; i < counts[s]; i++)
      dst[i] = r->perm[ids[i]];
    qsort(dst, (size_t)counts[s], sizeof *dst, cmp_i64);
  }
  /* The new dataset's source is src's source: compose with src's own map when it has one. */
  shape[0] = n;
  NG_CHECK(ng__writer_array(&arr, &r->w, NG_ARR_ORIG_ID, NG_DTYPE_I64, 1, shape));
  int64_t *dst = arr->data;
  const int64_t *orig = src->info.orig_ids ? src->arrays[NG_ARR_ORIG_ID].data : NULL;
#pragma omp parallel for num_threads(r->nt) schedule(static)
  for (int64_t i = 0; i < n; i++)
    dst[i] = orig ? orig[r->inv[i]] : r->inv[i];
  return NG_OK;
}

ng_status ng_dataset_reorder(const char *dst_dir, ng_dataset_t src, const ng_reorder_opts *opts) {
  NG_CHECK(ng__dataset_check(src));
  reorder r;
  memset(&r, 0, sizeof r);
  r.src = src;
  r.o = (ng_reorder_opts)NG_REORDER_OPTS_INIT;
  if (opts) {
    /* Callers built against an older, shorter struct keep the defaults of the newer fields. */
    if (opts->size < offsetof(ng_reorder_opts, score) || opts->size > sizeof r.o)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_reorder_opts.size is %zu; initialise the options with "
                     "NG_REORDER_OPTS_INIT",
                     opts->size);
    memcpy(&r.o, opts, opts->size);
  }
  if ((unsigned)r.o.score > NG_HOT_WRPR)
    return ng__err(NG_ERR_INVALID_ARG,
                   "hot-set score %d is not one of NG_HOT_DEGREE, NG_HOT_RPR, NG_HOT_WRPR",
                   (int)r.o.score);
  if (r.o.threads < 0)
    return ng__err(NG_ERR_INVALID_ARG, "%d threads; give 0 (the OpenMP default) or more",
                   r.o.threads);
  if (r.o.score == NG_HOT_WRPR && src->info.train == 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s has no training split, which the wrpr score weights; use --score rpr or "
                   "degree",
                   src->dir);
  r.nt = thread_count(r.o.threads);
  ng__progress_init(&r.progress, r.o.progress, r.o.progress_ctx);

  int64_t n = src->info.nodes;
  double share[NG_REORDER_SHARES] = {0};
  double *score = ng__malloc((size_t)n * sizeof *score, "the hot-set scores");
  r.perm = ng__malloc((size_t)n * sizeof *r.perm, "the permutation");
  r.inv = ng__malloc((size_t)n * sizeof *r.inv, "the inverse permutation");
  ng_status st = NG_ERR_NOMEM;
  if (!score || !r.perm || !r.inv)
    goto done;
  /* The destination is claimed first, so that a taken name fails before the work. */
  NG_CHECK_GOTO(st, ng__writer_begin(&r.w, dst_dir), done);
  NG_CHECK_GOTO(st,
                ng__hot_scores(score, &src->csr, r.o.score, src->split[0], src->info.train,
                               r.o.iterations, r.nt, &r.progress),
                done);
  NG_CHECK_GOTO(st, ng__hot_order(r.perm, score, n, r.nt), done);
#pragma omp parallel for num_threads(r.nt) schedule(static)
  for (int64_t v = 0; v < n; v++)
    r.inv[r.perm[v]] = v;

  NG_CHECK_GOTO(st, write_graph(&r, share), done);
  NG_CHECK_GOTO(st, write_nodes(&r), done);

  ng_dataset_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info = src->info;
  meta.info.orig_ids = 1;
  if (r.o.score == NG_HOT_DEGREE)
    snprintf(meta.source, sizeof meta.source, "reorder of %s by score degree (in-degree)",
             src->dir);
  else
    snprintf(meta.source, sizeof meta.source,
             "reorder of %s by score %s (%d iterations, damping %.2f)", src->dir,
             SCORE_NAME[r.o.score], r.o.iterations, NG_HOT_DAMPING);
  st = ng__writer_commit(&r.w, &meta);
  if (st == NG_OK && r.o.entry_share)
    memcpy(r.o.entry_share, share, sizeof share);
done:
  ng__writer_abort(&r.w);
  free(score);
  free(r.perm);
  free(r.inv);
  return st;
}
