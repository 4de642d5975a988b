/* Edge splits for link prediction (ng_dataset_split_edges): held-out positives, fixed negatives
 * and the message-passing graph without the held-out edges, written to <dataset>/links/
 * (docs/dataset-format.md, "Link splits"). */
#include "dataset_impl.h"
#include "link_impl.h"
#include "sampler_impl.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Purposes of the split's random streams (ng_hash3(seed, purpose, index)). */
enum { PURPOSE_ORDER = 0x6c6e6b31, PURPOSE_NEG = 0x6c6e6b32 };
/* Draws per negative before a source is declared to have no non-neighbour left to draw. */
#define NEG_MAX_DRAWS 4096

const char *const NG_LINK_FILE[NG_LINK_ARR_COUNT_] = {
    "indptr.npy",  "indices.npy",  "train_pos.npy", "val_pos.npy",
    "val_neg.npy", "test_pos.npy", "test_neg.npy",
};

int ng__link_pair_cmp(const void *a, const void *b) {
  const ng_link_pair *x = a, *y = b;
  if (x->u != y->u)
    return x->u < y->u ? -1 : 1;
  return x->v < y->v ? -1 : x->v > y->v;
}

bool ng__link_pair_find(const ng_link_pair *sorted, int64_t n, int64_t u, int64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const ng_link_pair *p = &sorted[mid];
    if (p->u < u || (p->u == u && p->v < v))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && sorted[lo].u == u && sorted[lo].v == v;
}

/* The candidate edges of `g`, sorted and unique: every entry (row r, neighbour c) but self loops
 * as the pair (r, c), or with `undirected` as (min, max), each pair once. */
static ng_status candidates(ng_link_pair **out, int64_t *n_out, const ng_csr *g, bool undirected) {
  int64_t n = 0;
  for (int64_t r = 0; r < g->nodes; r++)
    for (int64_t e = g->indptr[r]; e < g->indptr[r + 1]; e++) {
      const int64_t c = ng__csr_index(g, e);
      n += c != r;
    }
  ng_link_pair *p = ng__malloc((size_t)NG_MAX(n, 1) * sizeof *p, "the candidate edges");
  if (!p)
    return NG_ERR_NOMEM;
  int64_t k = 0;
  for (int64_t r = 0; r < g->nodes; r++)
    for (int64_t e = g->indptr[r]; e < g->indptr[r + 1]; e++) {
      const int64_t c = ng__csr_index(g, e);
      if (c == r)
        continue;
      p[k++] = undirected ? (ng_link_pair){NG_MIN(r, c), NG_MAX(r, c)} : (ng_link_pair){r, c};
    }
  qsort(p, (size_t)k, sizeof *p, ng__link_pair_cmp);
  int64_t u = 0;
  for (int64_t i = 0; i < k; i++)
    if (u == 0 || ng__link_pair_cmp(&p[u - 1], &p[i]) != 0)
      p[u++] = p[i];
  *out = p;
  *n_out = u;
  return NG_OK;
}

/* K negatives of each positive pos[i] into neg[i * K .. + K) (pairs): with `keep_source` its
 * source and a destination drawn uniformly (OGB's corruption), else both ends drawn uniformly
 * (the Planetoid protocol's random non-edges), from the stream ng_hash3(seed, PURPOSE_NEG, i);
 * redrawn while the pair is a self loop or an edge of the full graph (`all`, sorted). */
static ng_status negatives(ng_link_pair *neg, const ng_link_pair *pos, int64_t n, int32_t k,
                           bool keep_source, const ng_link_pair *all, int64_t n_all,
                           bool undirected, int64_t nodes, uint64_t seed, int threads) {
  int64_t bad = -1;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(max : bad)
  for (int64_t i = 0; i < n; i++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(seed, PURPOSE_NEG, (uint64_t)i));
    for (int32_t j = 0; j < k; j++) {
      ng_link_pair q = {-1, -1};
      for (int d = 0; d < NEG_MAX_DRAWS && q.u < 0; d++) {
        const int64_t a = keep_source ? pos[i].u : (int64_t)ng_rng_below(&r, (uint64_t)nodes);
        const int64_t c = (int64_t)ng_rng_below(&r, (uint64_t)nodes);
        const bool edge = undirected ? ng__link_pair_find(all, n_all, NG_MIN(a, c), NG_MAX(a, c))
                                     : ng__link_pair_find(all, n_all, a, c);
        if (c != a && !edge)
          q = (ng_link_pair){a, c};
      }
      if (q.u < 0) {
        bad = NG_MAX(bad, i);
        q = pos[i];
      }
      neg[i * k + j] = q;
    }
  }
  if (bad >= 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "split-edges: no non-edge found in %d draws for the negatives of held-out edge "
                   "(%lld, %lld); a graph this dense has no negatives to hold out",
                   NEG_MAX_DRAWS, (long long)pos[bad].u, (long long)pos[bad].v);
  return NG_OK;
}

ng_status ng__link_mp_graph(int64_t **indptr_out, void **indices_out, const ng_csr *g,
                            const ng_link_pair *held, int64_t n_held, bool undirected,
                            int threads) {
  const int64_t nodes = g->nodes;
  int64_t *indptr = ng__calloc((size_t)nodes + 1, sizeof *indptr, "the message-passing indptr");
  if (!indptr)
    return NG_ERR_NOMEM;
#define HELD(r, c)                                                                                 \
  ((r) != (c) && (undirected ? ng__link_pair_find(held, n_held, NG_MIN(r, c), NG_MAX(r, c))        \
                             : ng__link_pair_find(held, n_held, r, c)))
#pragma omp parallel for schedule(dynamic, 1024) num_threads(threads)
  for (int64_t r = 0; r < nodes; r++) {
    int64_t keep = 0;
    for (int64_t e = g->indptr[r]; e < g->indptr[r + 1]; e++) {
      const int64_t c = ng__csr_index(g, e);
      keep += !HELD(r, c);
    }
    indptr[r + 1] = keep;
  }
  for (int64_t r = 0; r < nodes; r++)
    indptr[r + 1] += indptr[r];
  const size_t elem = g->idx32 ? sizeof(int32_t) : sizeof(int64_t);
  void *indices =
      ng__malloc((size_t)NG_MAX(indptr[nodes], 1) * elem, "the message-passing indices");
  if (!indices) {
    free(indptr);
    return NG_ERR_NOMEM;
  }
#pragma omp parallel for schedule(dynamic, 1024) num_threads(threads)
  for (int64_t r = 0; r < nodes; r++) {
    int64_t o = indptr[r];
    for (int64_t e = g->indptr[r]; e < g->indptr[r + 1]; e++) {
      const int64_t c = ng__csr_index(g, e);
      if (HELD(r, c))
        continue;
      if (g->idx32)
        ((int32_t *)indices)[o++] = (int32_t)c;
      else
        ((int64_t *)indices)[o++] = c;
    }
  }
#undef HELD
  *indptr_out = indptr;
  *indices_out = indices;
  return NG_OK;
}

static ng_status write_pairs(const char *dir, int id, const ng_link_pair *p, int64_t n) {
  char *path = ng__path_join(dir, NG_LINK_FILE[id]);
  if (!path)
    return NG_ERR_NOMEM;
  const int64_t shape[2] = {n, 2};
  const ng_status st = ng__npy_write(path, NG_DTYPE_I64, 2, shape, p);
  free(path);
  return st;
}

static ng_status write_array(const char *dir, int id, ng_dtype dt, int ndim, const int64_t *shape,
                             const void *data) {
  char *path = ng__path_join(dir, NG_LINK_FILE[id]);
  if (!path)
    return NG_ERR_NOMEM;
  const ng_status st = ng__npy_write(path, dt, ndim, shape, data);
  free(path);
  return st;
}

static ng_status write_json(const char *dir, const ng_link_split_info *in, double val,
                            double test) {
  char *path = ng__path_join(dir, NG_LINK_JSON);
  if (!path)
    return NG_ERR_NOMEM;
  FILE *f = fopen(path, "wx");
  if (!f) {
    const int e = errno;
    const ng_status st = ng__err_errno(NG_ERR_IO, e, "%s", path);
    free(path);
    return st;
  }
  fprintf(f,
          "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"seed\": %llu,\n"
          "  \"val_share\": %.17g,\n  \"test_share\": %.17g,\n  \"undirected\": %s,\n"
          "  \"neg_per_pos\": %d,\n  \"neg_source\": \"%s\",\n  \"train\": %lld,\n  \"val\": "
          "%lld,\n  \"test\": %lld,\n"
          "  \"mp_edges\": %lld\n}\n",
          NG_LINK_FORMAT, NG_LINK_VERSION, (unsigned long long)in->seed, val, test,
          in->undirected ? "true" : "false", (int)in->neg_per_pos,
          in->neg_source ? "uniform" : "source", (long long)in->train, (long long)in->val,
          (long long)in->test, (long long)in->mp_edges);
  const bool bad = ferror(f) != 0;
  const bool closed = fclose(f) == 0;
  ng_status st = NG_OK;
  if (bad || !closed)
    st = ng__err(NG_ERR_IO, "%s: writing failed", path);
  free(path);
  return st;
}

ng_status ng__link_write_split(const char *dir, const ng_link_split_arrays *a,
                               const ng_link_split_info *in, double val, double test) {
  const int64_t ip_shape[1] = {a->nodes + 1}, ix_shape[1] = {a->indptr[a->nodes]};
  const int64_t vn_shape[3] = {a->n_val, a->k, 2}, tn_shape[3] = {a->n_test, a->k, 2};
  NG_CHECK(write_array(dir, NG_LINK_ARR_INDPTR, NG_DTYPE_I64, 1, ip_shape, a->indptr));
  NG_CHECK(write_array(dir, NG_LINK_ARR_INDICES, a->wide ? NG_DTYPE_I64 : NG_DTYPE_I32, 1, ix_shape,
                       a->indices));
  NG_CHECK(write_pairs(dir, NG_LINK_ARR_TRAIN_POS, a->train, a->n_train));
  NG_CHECK(write_pairs(dir, NG_LINK_ARR_VAL_POS, a->val, a->n_val));
  NG_CHECK(write_array(dir, NG_LINK_ARR_VAL_NEG, NG_DTYPE_I64, 3, vn_shape, a->val_neg));
  NG_CHECK(write_pairs(dir, NG_LINK_ARR_TEST_POS, a->test, a->n_test));
  NG_CHECK(write_array(dir, NG_LINK_ARR_TEST_NEG, NG_DTYPE_I64, 3, tn_shape, a->test_neg));
  return write_json(dir, in, val, test);
}

/* Removes a links folder this library wrote (its known files, then the folder). */
static void remove_links_dir(const char *dir) {
  for (int i = 0; i < NG_LINK_ARR_COUNT_; i++) {
    char *p = ng__path_join(dir, NG_LINK_FILE[i]);
    if (p)
      unlink(p);
    free(p);
  }
  char *p = ng__path_join(dir, NG_LINK_JSON);
  if (p)
    unlink(p);
  free(p);
  rmdir(dir);
}

ng_status ng_dataset_split_edges(ng_link_split_info *info, const char *dir,
                                 const ng_split_edges_opts *opts) {
  ng_split_edges_opts o = NG_SPLIT_EDGES_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof(size_t) || opts->size > sizeof o)
      return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_split_edges: opts->size %zu is not %zu",
                     opts->size, sizeof o);
    memcpy(&o, opts, opts->size);
  }
  if (info && info->size != sizeof *info)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_split_edges: info->size %zu is not %zu",
                   info->size, sizeof *info);
  if (!dir)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_split_edges: dir is NULL");
  if (!(o.val >= 0.0 && o.val < 1.0) || !(o.test >= 0.0 && o.test < 1.0) ||
      !(o.val + o.test < 1.0) || o.neg_per_pos < 1 || o.threads < 0 || o.undirected < -1 ||
      (unsigned)o.neg_source > 1 || o.undirected > 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "split-edges: val %g and test %g must be in [0, 1) and sum below 1, "
                   "neg_per_pos %d >= 1, threads >= 0, undirected -1, 0 or 1, neg_source 0 or 1",
                   o.val, o.test, (int)o.neg_per_pos);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  ng_dataset_t ds = NULL;
  NG_CHECK(ng_dataset_open(&ds, dir, NULL));
  const ng_csr *g = &ds->csr;
  const bool undirected = o.undirected < 0 ? ds->info.undirected : o.undirected == 1;
  ng_link_pair *all = NULL, *order = NULL;
  int64_t *perm = NULL, *indptr = NULL;
  ng_link_pair *neg = NULL;
  void *indices = NULL;
  char *tmp = NULL, *dst = NULL, *old = NULL;
  int64_t n_all = 0;
  ng_status st = candidates(&all, &n_all, g, undirected);
  if (st != NG_OK)
    goto done;
  const int64_t n_val = (int64_t)((double)n_all * o.val),
                n_test = (int64_t)((double)n_all * o.test);
  const int64_t n_train = n_all - n_val - n_test;
  if (n_all == 0 || (o.val > 0 && n_val == 0) || (o.test > 0 && n_test == 0)) {
    st = ng__err(NG_ERR_INVALID_ARG,
                 "split-edges: dataset '%s' has %lld candidate edges, too few for val %g and "
                 "test %g",
                 ds->info.name, (long long)n_all, o.val, o.test);
    goto done;
  }
  /* The held-out edges: a seeded shuffle of the sorted candidates; val first, then test, the
   * rest trains. Each held-out array is sorted again so that the files do not show the order. */
  perm = ng__malloc((size_t)n_all * sizeof *perm, "the edge order");
  order = ng__malloc((size_t)n_all * sizeof *order, "the split edges");
  if (!perm || !order) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int64_t i = 0; i < n_all; i++)
    perm[i] = i;
  ng__epoch_shuffle(perm, perm, n_all, ng_hash2(o.seed, PURPOSE_ORDER), 0);
  for (int64_t i = 0; i < n_all; i++)
    order[i] = all[perm[i]];
  ng_link_pair *val = order, *test = order + n_val, *train = order + n_val + n_test;
  qsort(val, (size_t)n_val, sizeof *val, ng__link_pair_cmp);
  qsort(test, (size_t)n_test, sizeof *test, ng__link_pair_cmp);
  qsort(train, (size_t)n_train, sizeof *train, ng__link_pair_cmp);
  const int64_t n_neg = n_val + n_test, k = o.neg_per_pos;
  neg = ng__malloc((size_t)NG_MAX(n_neg * k, 1) * sizeof *neg, "the fixed negatives");
  if (!neg) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  NG_CHECK_GOTO(st,
                negatives(neg, order, n_neg, o.neg_per_pos, o.neg_source == 0, all, n_all,
                          undirected, g->nodes, o.seed, threads),
                done);
  /* val and test are adjacent and each sorted: one sorted list of the held-out pairs needs
   * them merged, which a copy and a sort do simply. */
  ng_link_pair *held = ng__malloc((size_t)NG_MAX(n_neg, 1) * sizeof *held, "the held-out edges");
  if (!held) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  memcpy(held, order, (size_t)n_neg * sizeof *held);
  qsort(held, (size_t)n_neg, sizeof *held, ng__link_pair_cmp);
  st = ng__link_mp_graph(&indptr, &indices, g, held, n_neg, undirected, threads);
  free(held);
  if (st != NG_OK)
    goto done;
  /* Written into a temporary folder beside links/, then renamed into place. */
  dst = ng__path_join(dir, NG_LINK_DIR);
  if (!dst || !(tmp = ng__tmp_template(dst))) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  ng__tmp_sweep(dst);
  if (!mkdtemp(tmp)) {
    st = ng__err_errno(NG_ERR_IO, errno, "split-edges: cannot create a folder beside %s", dst);
    goto done;
  }
  ng_link_split_info out = NG_LINK_SPLIT_INFO_INIT;
  out.train = n_train;
  out.val = n_val;
  out.test = n_test;
  out.neg_per_pos = o.neg_per_pos;
  out.neg_source = o.neg_source;
  out.undirected = undirected;
  out.mp_edges = indptr[g->nodes];
  out.seed = o.seed;
  const ng_link_split_arrays arr = {.nodes = g->nodes,
                                    .indptr = indptr,
                                    .indices = indices,
                                    .wide = !g->idx32,
                                    .train = train,
                                    .val = val,
                                    .test = test,
                                    .n_train = n_train,
                                    .n_val = n_val,
                                    .n_test = n_test,
                                    .val_neg = neg,
                                    .test_neg = neg + n_val * k,
                                    .k = k};
  NG_CHECK_GOTO(st, ng__link_write_split(tmp, &arr, &out, o.val, o.test), fail);
  /* An existing split moves aside under a temporary name first (ng__tmp_sweep removes it if we
   * die before the end), so that links/ is always a whole split. */
  struct stat sb;
  if (lstat(dst, &sb) == 0) {
    if (!(old = ng__tmp_template(dst)) || !mkdtemp(old) || rmdir(old) != 0 ||
        rename(dst, old) != 0) {
      st = ng__err_errno(NG_ERR_IO, errno, "split-edges: cannot move the old %s aside", dst);
      goto fail;
    }
  }
  if (rename(tmp, dst) != 0) {
    st = ng__err_errno(NG_ERR_IO, errno, "split-edges: cannot rename %s to %s", tmp, dst);
    if (old)
      rename(old, dst);
    goto fail;
  }
  if (old)
    remove_links_dir(old);
  if (info)
    *info = out;
  goto done;
fail:
  remove_links_dir(tmp);
done:
  free(old);
  free(tmp);
  free(dst);
  free(indptr);
  free(indices);
  free(neg);
  free(order);
  free(perm);
  free(all);
  ng_dataset_close(ds);
  return st;
}
