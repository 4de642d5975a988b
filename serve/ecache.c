/* The cache of layer-0 outputs of the serving engine (serve/ecache_impl.h says what it holds and
 * the version rule that keeps it exact under updates; docs/serving-engine.md, "Cached layer-0
 * outputs").
 *
 * Entries are rows of layer 0's output in one slab of `capacity` rows, found by node through an
 * open-addressing index (linear probing, deletion by backward shift) and evicted by CLOCK: a hit
 * or an insert sets a slot's reference bit, and the hand clears bits until it finds a slot whose
 * bit is clear. One mutex guards it all: a lookup or an insert holds it for a copy of the rows
 * it moves, an invalidation for the removal of the entries an update changes. */
#include "ecache_impl.h"

#include "dataset_impl.h"
#include "npy_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 64

/* Out-neighbours of a node through edges updates added (u -> the destinations of edges u -> d
 * ever added), as a growable list per source in an open-addressing map. */
typedef struct {
  int64_t n, cap;
  int64_t ids[];
} dst_list;

struct ng_ecache {
  pthread_mutex_t mu;
  int64_t dim;      /* floats of a row (layer 0's out_dim) */
  int64_t capacity; /* slots */
  float *rows;      /* [capacity, dim] */
  int64_t *node;    /* [capacity] node of a slot, -1: free */
  uint64_t *ver;    /* [capacity] the snapshot version a slot's row was computed on */
  uint8_t *ref;     /* [capacity] CLOCK reference bits */
  int64_t *free_slots, n_free;
  int64_t hand;
  int32_t *index; /* [index_cap] slot of a node, -1: empty */
  size_t index_cap;
  uint64_t version; /* the newest snapshot whose update was invalidated */
  /* [base nodes] the version of the last update that invalidated each node (0: none), once an
   * update was invalidated: a row computed on an older snapshot may still go in when no update
   * since changed it (the version rule, serve/ecache_impl.h). NULL: rows go in only while
   * `version` is their snapshot's. */
  uint64_t *touched;
  void (*test_before_insert)(void *); /* ng__ecache_test_before_insert */
  void *test_arg;
  /* The index of added edges could not be extended (out of memory): the changed entries of later
   * updates could not be found, so the cache neither serves nor keeps rows from then on. */
  bool broken;
  ng_ecache_stats st;
  /* The out-neighbour index (updates only, under the engine's update lock): the base graph's
   * transpose, built at the first update that needs it, and the destinations of added edges. */
  const ng_csr *base;
  int64_t *t_indptr;
  int32_t *t_idx;
  ng_srv_map added; /* node -> dst_list * */
};

struct ng_ecache_work {
  ng_srv_field *field; /* the missing nodes' depth-1 fields */
  void *rows;          /* [needed, dim] the batch's layer-0 rows (host) */
  size_t rows_cap;
  void *miss;
  size_t miss_cap; /* int64 ids, then int32 positions of the missing nodes */
  void *fill;
  size_t fill_cap; /* the placeholder blocks' indptr and weights */
  void *dev;
  size_t dev_cap; /* the upper blocks on the device */
  void *stage;
  size_t stage_cap;
};

static ng_status add_edge(ng_ecache *c, int64_t src, int64_t dst);

static size_t hash_of(int64_t v, size_t mask) {
  uint64_t h = (uint64_t)v * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h ^ (h >> 29)) & mask;
}

bool ng__ecache_supports(const struct ng_model *m) {
  return m->n_layers >= 2 && !ng__model_raw_input(m);
}

ng_status ng__ecache_create(ng_ecache **out, const struct ng_model *m, const ng_srv_snap *s,
                            int64_t bytes) {
  *out = NULL;
  if (bytes <= 0 || !ng__ecache_supports(m))
    return NG_OK;
  const int64_t dim = m->layers[0].out_dim;
  /* A row costs its floats, its node, version and reference bit, and two index slots. */
  const int64_t per = dim * (int64_t)sizeof(float) + 8 + 8 + 1 + 8 + 2 * 4;
  const int64_t capacity = bytes / per;
  if (capacity < 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "embedding cache of %lld bytes holds no row: a row of layer 0 (%lld columns) "
                   "takes %lld bytes; give at least that, or 0 to turn the cache off",
                   (long long)bytes, (long long)dim, (long long)per);
  if (capacity > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "embedding cache of %lld bytes: at most 2^31 - 1 rows",
                   (long long)bytes);
  ng_ecache *c = ng__calloc(1, sizeof *c, "the embedding cache");
  if (!c)
    return NG_ERR_NOMEM;
  pthread_mutex_init(&c->mu, NULL);
  c->dim = dim;
  c->capacity = capacity;
  c->version = s->version;
  c->base = s->base;
  c->st.capacity = capacity;
  c->index_cap = 16;
  while (c->index_cap < (size_t)capacity * 2)
    c->index_cap *= 2;
  c->rows = ng__big_alloc((size_t)capacity * (size_t)dim * sizeof(float), "the embedding cache");
  c->node = ng__malloc((size_t)capacity * sizeof *c->node, "the embedding cache");
  c->ver = ng__malloc((size_t)capacity * sizeof *c->ver, "the embedding cache");
  c->ref = ng__calloc((size_t)capacity, 1, "the embedding cache");
  c->free_slots = ng__malloc((size_t)capacity * sizeof *c->free_slots, "the embedding cache");
  c->index = ng__malloc(c->index_cap * sizeof *c->index, "the embedding cache's index");
  if (!c->rows || !c->node || !c->ver || !c->ref || !c->free_slots || !c->index) {
    ng__ecache_destroy(c);
    return NG_ERR_NOMEM;
  }
  memset(c->index, 0xff, c->index_cap * sizeof *c->index);
  for (int64_t i = 0; i < capacity; i++) {
    c->node[i] = -1;
    c->free_slots[i] = capacity - 1 - i;
  }
  c->n_free = capacity;
  /* Edges added before the engine started (replayed from the log) are in the delta's rows: each
   * member of a replaced row is recorded as reaching that row's node (a superset of the added
   * edges, which costs only extra invalidations). */
  ng_status st = NG_OK;
  for (size_t i = 0; i < s->rows.cap && st == NG_OK; i++) {
    if (s->rows.keys[i] < 0)
      continue;
    const ng_srv_row *r = s->rows.vals[i];
    for (int64_t j = 0; j < r->n && st == NG_OK; j++)
      st = add_edge(c, r->ids[j], s->rows.keys[i]);
  }
  if (st != NG_OK) {
    ng__ecache_destroy(c);
    return st;
  }
  *out = c;
  return NG_OK;
}

void ng__ecache_destroy(ng_ecache *c) {
  if (!c)
    return;
  if (c->rows)
    ng__big_free(c->rows, (size_t)c->capacity * (size_t)c->dim * sizeof(float));
  free(c->node);
  free(c->ver);
  free(c->ref);
  free(c->free_slots);
  free(c->index);
  free(c->t_indptr);
  free(c->t_idx);
  free(c->touched);
  for (size_t i = 0; i < c->added.cap; i++)
    if (c->added.keys[i] >= 0)
      free(c->added.vals[i]);
  free(c->added.keys);
  free(c->added.vals);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

void ng__ecache_stats_get(ng_ecache_stats *out, ng_ecache *c) {
  memset(out, 0, sizeof *out);
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  *out = c->st;
  out->entries = c->capacity - c->n_free;
  pthread_mutex_unlock(&c->mu);
}

/* ---- the index and the slots (under c->mu) ---- */

static size_t index_find(const ng_ecache *c, int64_t v) {
  const size_t mask = c->index_cap - 1;
  size_t h = hash_of(v, mask);
  while (c->index[h] >= 0 && c->node[c->index[h]] != v)
    h = (h + 1) & mask;
  return h;
}

/* Removes index slot h (occupied) by backward shift: later entries of its probe run move up so
 * that no lookup meets a hole before its key. */
static void index_remove(ng_ecache *c, size_t h) {
  const size_t mask = c->index_cap - 1;
  size_t hole = h;
  for (size_t j = (h + 1) & mask; c->index[j] >= 0; j = (j + 1) & mask) {
    const size_t home = hash_of(c->node[c->index[j]], mask);
    /* j's entry may fill the hole when its home is not in (hole, j] cyclically. */
    const bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      c->index[hole] = c->index[j];
      hole = j;
    }
  }
  c->index[hole] = -1;
}

static void slot_drop(ng_ecache *c, int64_t slot) {
  index_remove(c, index_find(c, c->node[slot]));
  c->node[slot] = -1;
  c->ref[slot] = 0;
  c->free_slots[c->n_free++] = slot;
}

/* A free slot, evicting by CLOCK when none is free. */
static int64_t slot_take(ng_ecache *c) {
  if (c->n_free > 0)
    return c->free_slots[--c->n_free];
  for (;;) {
    const int64_t s = c->hand;
    c->hand = c->hand + 1 == c->capacity ? 0 : c->hand + 1;
    if (c->ref[s]) {
      c->ref[s] = 0;
      continue;
    }
    slot_drop(c, s);
    c->st.evictions++;
    return c->free_slots[--c->n_free];
  }
}

static void remove_node(ng_ecache *c, int64_t v) {
  if (c->touched && v < c->base->nodes)
    c->touched[v] = c->version;
  const size_t h = index_find(c, v);
  if (c->index[h] < 0)
    return;
  slot_drop(c, c->index[h]);
  c->st.invalidations++;
}

void ng__ecache_test_before_insert(ng_ecache *c, void (*fn)(void *), void *arg) {
  c->test_before_insert = fn;
  c->test_arg = arg;
}

bool ng__ecache_test_has(ng_ecache *c, int64_t v, uint64_t *version) {
  pthread_mutex_lock(&c->mu);
  const size_t h = index_find(c, v);
  const bool has = c->index[h] >= 0;
  if (has && version)
    *version = c->ver[c->index[h]];
  pthread_mutex_unlock(&c->mu);
  return has;
}

/* ---- the out-neighbour index (under the engine's update lock) ---- */

static dst_list *added_get(const ng_ecache *c, int64_t src) {
  if (!c->added.cap)
    return NULL;
  const size_t mask = c->added.cap - 1;
  for (size_t h = hash_of(src, mask); c->added.keys[h] != -1; h = (h + 1) & mask)
    if (c->added.keys[h] == src)
      return c->added.vals[h];
  return NULL;
}

static ng_status added_grow(ng_ecache *c) {
  const size_t cap = c->added.cap ? 2 * c->added.cap : 64;
  int64_t *keys = ng__malloc(cap * sizeof *keys, "the embedding cache's edge index");
  void **vals = ng__malloc(cap * sizeof *vals, "the embedding cache's edge index");
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return NG_ERR_NOMEM;
  }
  memset(keys, 0xff, cap * sizeof *keys);
  for (size_t i = 0; i < c->added.cap; i++) {
    if (c->added.keys[i] < 0)
      continue;
    size_t h = hash_of(c->added.keys[i], cap - 1);
    while (keys[h] != -1)
      h = (h + 1) & (cap - 1);
    keys[h] = c->added.keys[i];
    vals[h] = c->added.vals[i];
  }
  free(c->added.keys);
  free(c->added.vals);
  c->added = (ng_srv_map){keys, vals, cap, c->added.n};
  return NG_OK;
}

/* Records that dst reads src (an edge src -> dst added by an update). */
static ng_status add_edge(ng_ecache *c, int64_t src, int64_t dst) {
  if ((c->added.n + 1) * 2 > c->added.cap)
    NG_CHECK(added_grow(c));
  const size_t mask = c->added.cap - 1;
  size_t h = hash_of(src, mask);
  while (c->added.keys[h] != -1 && c->added.keys[h] != src)
    h = (h + 1) & mask;
  dst_list *l = c->added.keys[h] == src ? c->added.vals[h] : NULL;
  if (l)
    for (int64_t i = 0; i < l->n; i++)
      if (l->ids[i] == dst)
        return NG_OK;
  if (!l || l->n == l->cap) {
    const int64_t cap = l ? 2 * l->cap : 4;
    dst_list *bigger = realloc(l, sizeof *l + (size_t)cap * sizeof(int64_t));
    if (!bigger)
      return ng__err(NG_ERR_NOMEM, "embedding cache: out of memory for its edge index");
    if (!l) {
      bigger->n = 0;
      c->added.keys[h] = src;
      c->added.n++;
    }
    bigger->cap = cap;
    l = bigger;
    c->added.vals[h] = l;
  }
  l->ids[l->n++] = dst;
  return NG_OK;
}

/* The base graph's transpose: for each node, the nodes whose base row holds it (edges x 4 +
 * nodes x 8 bytes). Built by threads over destinations with atomic counters, so a node's readers
 * land in an order that varies from run to run: invalidation removes them all, and no answer
 * depends on that order. */
static ng_status build_transpose(ng_ecache *c) {
  if (c->t_indptr)
    return NG_OK;
  const ng_csr *g = c->base;
  const int64_t n = g->nodes;
  int64_t *ip = ng__calloc((size_t)n + 1, sizeof *ip, "the base graph's out-neighbours");
  int32_t *ix =
      ng__malloc((size_t)NG_MAX(g->nnz, 1) * sizeof *ix, "the base graph's out-neighbours");
  int64_t *at = ng__malloc((size_t)n * sizeof *at + 1, "the base graph's out-neighbours");
  if (!ip || !ix || !at) {
    free(ip);
    free(ix);
    free(at);
    return NG_ERR_NOMEM;
  }
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < g->nnz; e++) {
    const int64_t s = ng__csr_index(g, e);
#pragma omp atomic
    ip[s + 1]++;
  }
  for (int64_t v = 0; v < n; v++)
    ip[v + 1] += ip[v];
  memcpy(at, ip, (size_t)n * sizeof *at);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t d = 0; d < n; d++)
    for (int64_t e = g->indptr[d]; e < g->indptr[d + 1]; e++) {
      int64_t slot;
      const int64_t s = ng__csr_index(g, e);
#pragma omp atomic capture
      slot = at[s]++;
      ix[slot] = (int32_t)d;
    }
  free(at);
  c->t_indptr = ip;
  c->t_idx = ix;
  return NG_OK;
}

ng_status ng__ecache_prepare_updates(ng_ecache *c) {
  return c ? build_transpose(c) : NG_OK;
}

/* Removes v's out-neighbours: the nodes whose row in the base holds v and those an added edge
 * from v reaches (under c->mu). */
static void remove_readers(ng_ecache *c, int64_t v) {
  if (v < c->base->nodes)
    for (int64_t e = c->t_indptr[v]; e < c->t_indptr[v + 1]; e++)
      remove_node(c, c->t_idx[e]);
  const dst_list *l = added_get(c, v);
  for (int64_t i = 0; l && i < l->n; i++)
    remove_node(c, l->ids[i]);
}

void ng__ecache_invalidate(ng_ecache *c, const ng_graph_update *u, const ng_srv_resized *resized,
                           uint64_t version, bool gcn0) {
  if (!c)
    return;
  /* Outside the lock (updates are serialised by the engine): the index of added edges, and the
   * transpose when this update needs out-neighbours. */
  ng_status st = NG_OK;
  for (int64_t i = 0; i < u->n_add_edges && st == NG_OK; i++)
    st = add_edge(c, u->add_src[i], u->add_dst[i]);
  const bool readers = u->n_feature_rows > 0 || (gcn0 && (u->n_add_edges || u->n_remove_edges));
  if (st == NG_OK && readers)
    st = build_transpose(c);
  pthread_mutex_lock(&c->mu);
  c->version = version;             /* before the removals, which record it per node */
  if (!c->touched && st == NG_OK) { /* pages are taken as nodes are touched */
    c->touched = calloc((size_t)NG_MAX(c->base->nodes, 1), sizeof *c->touched);
    /* Without the record from the first update on, a later insert could not tell a row this
     * update changed: stop using the cache, as without the index. */
    if (!c->touched)
      st = NG_ERR_NOMEM;
  }
  if (st != NG_OK) {
    /* Without the index the changed entries cannot be found, now or for later updates: empty
     * the cache and stop using it (exact, slower). */
    c->broken = true;
    for (int64_t s = 0; s < c->capacity; s++)
      if (c->node[s] >= 0) {
        slot_drop(c, s);
        c->st.invalidations++;
      }
  } else {
    /* A replaced feature row: its node (its own row, the self term) and every node whose
     * aggregation reads it. */
    for (int64_t i = 0; i < u->n_feature_rows; i++) {
      remove_node(c, u->feature_ids[i]);
      remove_readers(c, u->feature_ids[i]);
    }
    /* An edge s -> d added or removed changes d's row. Under GCN weights a row's length is its
     * node's degree, in the weight of every edge that reads the node (1 / sqrt(deg(d) deg(s)))
     * and in its own self weight: when d's degree changed, every reader of d changes too. */
    for (int k = 0; k < 2; k++) {
      const int64_t n = k ? u->n_remove_edges : u->n_add_edges;
      const int64_t *dst = k ? u->remove_dst : u->add_dst;
      for (int64_t i = 0; i < n; i++)
        remove_node(c, dst[i]);
    }
    for (int64_t i = 0; gcn0 && i < resized->n; i++)
      remove_readers(c, resized->ids[i]);
    /* Added nodes: nothing of theirs is cached yet. */
  }
  pthread_mutex_unlock(&c->mu);
}

/* ---- a batch ---- */

ng_status ng__ecache_work_create(ng_ecache_work **out) {
  *out = ng__calloc(1, sizeof **out, "the embedding cache's batch memory");
  if (!*out)
    return NG_ERR_NOMEM;
  ng_status st = ng__srv_field_create(&(*out)->field);
  if (st != NG_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

void ng__ecache_work_destroy(ng_ecache_work *w, ng_backend *be) {
  if (!w)
    return;
  ng__srv_field_destroy(w->field);
  free(w->rows);
  free(w->miss);
  free(w->fill);
  free(w->stage);
  if (be && w->dev)
    be->iface->free(be, w->dev);
  free(w);
}

/* Copies the upper blocks of `mb` to the device (a host-memory backend reads them where they
 * are) into dmb's blocks 1 ... */
static ng_status upload_upper(ng_ecache_work *w, ng_backend *be, const ng_minibatch *up,
                              ng_minibatch *dmb) {
  typedef struct {
    const void *src;
    size_t bytes;
    const void **dst;
  } item;
  item it[4 * NG_MAX_LAYERS];
  int n = 0;
  for (int l = 0; l < up->n_layers; l++) {
    const ng_block *b = &up->blocks[l];
    ng_block *db = &dmb->blocks[l + 1];
    *db = *b;
    it[n++] = (item){b->indptr, ((size_t)b->n_dst + 1) * 4, (const void **)&db->indptr};
    it[n++] = (item){b->indices, (size_t)b->nnz * 4, (const void **)&db->indices};
    it[n++] = (item){b->edge_w, b->edge_w ? (size_t)b->nnz * 4 : 0, (const void **)&db->edge_w};
    it[n++] = (item){b->self_w, b->self_w ? (size_t)b->n_dst * 4 : 0, (const void **)&db->self_w};
  }
  if (be->iface->host_memory) {
    for (int i = 0; i < n; i++)
      *it[i].dst = it[i].src;
    return NG_OK;
  }
  size_t total = ALIGN;
  for (int i = 0; i < n; i++)
    total += (it[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  NG_CHECK(ng__host_reserve(&w->stage, &w->stage_cap, total, "the cached batch's blocks"));
  NG_CHECK(ng__bk_reserve(be, &w->dev, &w->dev_cap, total));
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    if (it[i].bytes)
      memcpy((char *)w->stage + at, it[i].src, it[i].bytes);
    *it[i].dst = it[i].src ? (char *)w->dev + at : NULL;
    at += (it[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  }
  return be->iface->copy_h2d(be, w->dev, w->stage, NG_MAX(at, (size_t)ALIGN));
}

/* Computes the layer-0 rows of the `n` missing nodes `ids` on snapshot `s` into `rows`
 * ([n, dim]): a depth-1 field through the engine's forward pass, whose upper blocks are
 * placeholders of one destination without edges (their layers compute one row, unread). */
static ng_status compute_missing(ng_ecache_work *w, const ng_ecache_ctx *cx, const ng_srv_snap *s,
                                 const int64_t *ids, int32_t n, int64_t dim, float *rows,
                                 int64_t *hot_rows, int64_t *cold_rows) {
  const struct ng_model *m = cx->model;
  const int32_t all = -1;
  ng_minibatch mb;
  NG_CHECK(ng__srv_field_build(&mb, w->field, s, 1, &all, cx->gcn, NULL, ids, n));
  /* Placeholders: indptr {0, 0}, and GCN weights of 1 (nnz 0: no edge weight is read). */
  NG_CHECK(ng__host_reserve(&w->fill, &w->fill_cap, 4 * sizeof(float), "placeholder blocks"));
  int32_t *zero = w->fill;
  float *one = (float *)w->fill + 2;
  zero[0] = zero[1] = 0;
  one[0] = one[1] = 1.0f;
  for (int l = 1; l < m->n_layers; l++) {
    mb.blocks[l] = (ng_block){.n_dst = 1,
                              .n_src = l == 1 ? n : 1,
                              .nnz = 0,
                              .indptr = zero,
                              .indices = zero,
                              .edge_w = cx->gcn[l] ? one : NULL,
                              .self_w = cx->gcn[l] ? one : NULL};
  }
  mb.n_layers = m->n_layers;
  NG_CHECK(cx->layer0(cx->arg, s, &mb, hot_rows, cold_rows));
  return cx->be->iface->copy_d2h(cx->be, rows, cx->ex->ws[0].out,
                                 (size_t)n * (size_t)dim * sizeof(float));
}

ng_status ng__ecache_forward(ng_ecache *c, ng_ecache_work *w, const ng_ecache_ctx *cx,
                             const ng_srv_snap *s, const int64_t *targets, int32_t n_targets,
                             int64_t *hot_rows, int64_t *cold_rows) {
  const struct ng_model *m = cx->model;
  const int L = m->n_layers;
  const int64_t dim = c->dim;
  const size_t row_b = (size_t)dim * sizeof(float);
  int32_t all[NG_MAX_LAYERS];
  for (int l = 0; l < L; l++)
    all[l] = -1;
  /* The field of layers 1 .. L-1: its input nodes are those whose layer-0 rows are needed. */
  ng_minibatch up;
  NG_CHECK(
      ng__srv_field_build(&up, cx->field, s, L - 1, all, cx->gcn + 1, NULL, targets, n_targets));
  const int32_t need = up.blocks[0].n_src;
  const int64_t *ids = up.node_ids;
  NG_CHECK(ng__host_reserve(&w->rows, &w->rows_cap, (size_t)need * row_b + ALIGN,
                            "the batch's layer-0 rows"));
  NG_CHECK(ng__host_reserve(&w->miss, &w->miss_cap, (size_t)need * 12 + ALIGN,
                            "the batch's missing rows"));
  float *rows = w->rows;
  int64_t *miss_ids = w->miss;
  int32_t *miss_at = (int32_t *)(miss_ids + need);
  int32_t n_miss = 0;
  pthread_mutex_lock(&c->mu);
  for (int32_t i = 0; i < need; i++) {
    const size_t h = index_find(c, ids[i]);
    const int32_t slot = c->index[h];
    if (slot >= 0 && !c->broken && c->ver[slot] <= s->version) {
      memcpy(rows + (size_t)i * (size_t)dim, c->rows + (size_t)slot * (size_t)dim, row_b);
      c->ref[slot] = 1;
      c->st.hits++;
    } else {
      miss_ids[n_miss] = ids[i];
      miss_at[n_miss++] = i;
      c->st.misses++;
    }
  }
  pthread_mutex_unlock(&c->mu);
  *hot_rows = *cold_rows = 0;
  if (n_miss > 0) {
    NG_CHECK(ng__host_reserve(&w->stage, &w->stage_cap, (size_t)n_miss * row_b + ALIGN,
                              "the missing layer-0 rows"));
    float *got = w->stage;
    NG_CHECK(compute_missing(w, cx, s, miss_ids, n_miss, dim, got, hot_rows, cold_rows));
    for (int32_t j = 0; j < n_miss; j++)
      memcpy(rows + (size_t)miss_at[j] * (size_t)dim, got + (size_t)j * (size_t)dim, row_b);
    if (c->test_before_insert)
      c->test_before_insert(c->test_arg);
    /* Inserted only when no later update changed the row (the version rule). */
    pthread_mutex_lock(&c->mu);
    const bool current = c->version == s->version;
    if (!c->broken && (current || c->touched)) {
      for (int32_t j = 0; j < n_miss; j++) {
        const int64_t v = miss_ids[j];
        if (!current && (v >= c->base->nodes || c->touched[v] > s->version))
          continue;
        size_t h = index_find(c, v);
        int64_t slot = c->index[h];
        if (slot < 0) {
          slot = slot_take(c);
          h = index_find(c, v); /* an eviction may have moved the probe run */
          c->index[h] = (int32_t)slot;
          c->node[slot] = v;
        }
        c->ver[slot] = s->version;
        c->ref[slot] = 1;
        memcpy(c->rows + (size_t)slot * (size_t)dim, got + (size_t)j * (size_t)dim, row_b);
      }
    }
    pthread_mutex_unlock(&c->mu);
  }
  /* Layers 1 ..: block 0 stands for layer 0, whose output rows are the cached ones. */
  ng_minibatch dmb;
  memset(&dmb, 0, sizeof dmb);
  dmb.n_layers = L;
  dmb.node_ids = up.node_ids;
  dmb.n_targets = n_targets;
  dmb.blocks[0] = (ng_block){.n_dst = need, .n_src = need, .indptr = up.blocks[0].indptr};
  NG_CHECK(upload_upper(w, cx->be, &up, &dmb));
  NG_CHECK(ng__exec_prepare_upper(cx->ex, &dmb));
  NG_CHECK(cx->be->iface->copy_h2d(cx->be, cx->ex->ws[0].out, rows, (size_t)need * row_b));
  return ng__exec_forward_upper(cx->ex, &dmb);
}

/* ---- prefill ---- */

static uint64_t hash_mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9E3779B97F4A7C15ULL;
  return h ^ (h >> 29);
}

ng_status ng__prefill_hash_file(uint64_t *out, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return ng__err_errno(NG_ERR_IO, errno, "%s", path);
  enum { CHUNK = 1 << 20 }; /* a multiple of 8: words never straddle two reads */
  unsigned char *buf = ng__malloc(CHUNK, "a file's hash");
  if (!buf) {
    fclose(f);
    return NG_ERR_NOMEM;
  }
  uint64_t h = 0xcbf29ce484222325ULL, total = 0;
  size_t n;
  while ((n = fread(buf, 1, CHUNK, f)) > 0) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w = 0;
      for (int b = 7; b >= 0; b--)
        w = w << 8 | buf[i + (size_t)b];
      h = hash_mix(h, w);
    }
    if (i < n) { /* the last partial word (only the file's end is short) */
      uint64_t w = 0;
      for (size_t b = n; b > i; b--)
        w = w << 8 | buf[b - 1];
      h = hash_mix(h, w);
    }
    total += n;
  }
  const bool failed = ferror(f) != 0;
  free(buf);
  fclose(f);
  if (failed)
    return ng__err(NG_ERR_IO, "%s: read error", path);
  *out = hash_mix(h, total);
  return NG_OK;
}

ng_status ng__prefill_meta(char *buf, size_t cap, const struct ng_dataset *ds,
                           const char *checkpoint, int64_t dim) {
  if (!ds->dir)
    return ng__err(NG_ERR_INVALID_ARG,
                   "embedding cache prefill: the dataset was built in memory, not opened from a "
                   "folder, so no file can name it");
  uint64_t h[3];
  const char *rel[2] = {"dataset.json", "indptr.npy"};
  for (int k = 0; k < 2; k++) {
    char *p = ng__path_join(ds->dir, rel[k]);
    if (!p)
      return NG_ERR_NOMEM;
    const ng_status st = ng__prefill_hash_file(&h[k], p);
    free(p);
    NG_CHECK(st);
  }
  NG_CHECK(ng__prefill_hash_file(&h[2], checkpoint));
  const bool orig = ds->info.orig_ids != 0;
  const int n =
      snprintf(buf, cap,
               "{\"format\":\"%s\",\"version\":%d,\"layer\":0,\"nodes\":%lld,\"dim\":%lld,"
               "\"ids\":\"%s\",\"dataset_json\":\"%016llx\",\"indptr\":\"%016llx\","
               "\"checkpoint\":\"%016llx\"}\n",
               NG_PREFILL_FORMAT, NG_PREFILL_VERSION, (long long)ds->info.nodes, (long long)dim,
               orig ? "original" : "dataset", (unsigned long long)h[0], (unsigned long long)h[1],
               (unsigned long long)h[2]);
  if (n < 0 || (size_t)n >= cap)
    return ng__err(NG_ERR_INTERNAL, "embedding cache prefill: description over %zu bytes", cap);
  return NG_OK;
}

/* The value of "key" in the one-line JSON object `json` (a string without its quotes, or a
 * number), into `out`; false when the key is missing. */
static bool meta_value(char *out, size_t cap, const char *json, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(json, pat);
  if (!p)
    return false;
  p += strlen(pat);
  while (*p == ' ')
    p++;
  const bool quoted = *p == '"';
  p += quoted;
  const size_t len = quoted ? strcspn(p, "\"") : strcspn(p, ",} \n");
  if (len >= cap)
    return false;
  memcpy(out, p, len);
  out[len] = 0;
  return true;
}

/* Checks `path`.prefill.json against what rows for this engine would have. */
static ng_status check_meta(const char *path, const struct ng_dataset *ds, const char *checkpoint,
                            int64_t dim) {
  char want[512], got[1024];
  NG_CHECK(ng__prefill_meta(want, sizeof want, ds, checkpoint, dim));
  const size_t pl = strlen(path) + sizeof NG_PREFILL_SUFFIX;
  char *meta = ng__malloc(pl, "the prefill's description");
  if (!meta)
    return NG_ERR_NOMEM;
  snprintf(meta, pl, "%s%s", path, NG_PREFILL_SUFFIX);
  FILE *f = fopen(meta, "r");
  if (!f) {
    const ng_status st = ng__err_errno(NG_ERR_IO, errno,
                                       "embedding cache prefill: %s (written beside the rows by "
                                       "neargnn embed --layer 0 --for-serve)",
                                       meta);
    free(meta);
    return st;
  }
  const size_t n = fread(got, 1, sizeof got - 1, f);
  fclose(f);
  got[n] = 0;
  static const char *const keys[] = {"format", "version",      "layer",  "nodes",     "dim",
                                     "ids",    "dataset_json", "indptr", "checkpoint"};
  ng_status st = NG_OK;
  for (size_t k = 0; k < sizeof keys / sizeof *keys && st == NG_OK; k++) {
    char a[128], b[128];
    meta_value(a, sizeof a, want, keys[k]);
    if (!meta_value(b, sizeof b, got, keys[k]))
      st = ng__err(NG_ERR_FORMAT, "%s: no \"%s\": not a description of embedding cache rows", meta,
                   keys[k]);
    else if (strcmp(a, b) == 0)
      continue;
    else if (k < 3)
      st = ng__err(NG_ERR_FORMAT,
                   "%s: \"%s\" is %s, not %s: not rows of layer 0 as this version of neargnn "
                   "embed --for-serve writes them",
                   meta, keys[k], b, a);
    else if (k < 8)
      st = ng__err(NG_ERR_FORMAT,
                   "%s: the rows were computed on another dataset (\"%s\" is %s there, %s for %s); "
                   "write them again with neargnn embed --layer 0 --for-serve --dataset %s",
                   meta, keys[k], b, a, ds->dir, ds->dir);
    else
      st = ng__err(NG_ERR_FORMAT,
                   "%s: the rows were computed with another checkpoint than %s (its hash is %s "
                   "there, %s here); write them again with neargnn embed --layer 0 --for-serve "
                   "--checkpoint %s",
                   meta, checkpoint, b, a, checkpoint);
  }
  free(meta);
  return st;
}

/* Reads the rows of a float32 .npy [rows, dim] with pread, through a window of consecutive rows
 * (one row when they are read out of order): the file is never mapped, so its pages do not count
 * in the server's resident memory, whose bound holds the cache but not its source. */
typedef struct {
  int fd;
  const char *path;
  size_t data_offset, row_b;
  int64_t rows;
  char *win;
  int64_t win_first, win_n, win_cap;
} row_reader;

static ng_status reader_open(row_reader *rr, const char *path, int64_t rows, int64_t dim,
                             bool in_order) {
  memset(rr, 0, sizeof *rr);
  rr->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (rr->fd < 0)
    return ng__err_errno(NG_ERR_IO, errno, "embedding cache prefill: %s", path);
  rr->path = path;
  char head[4096];
  const ssize_t got = pread(rr->fd, head, sizeof head, 0);
  ng_npy_header hdr;
  struct stat sb;
  ng_status st = got < 0 ? ng__err_errno(NG_ERR_IO, errno, "%s", path)
                         : ng__npy_parse_header(&hdr, head, (size_t)got, path);
  if (st == NG_OK &&
      (hdr.dtype != NG_DTYPE_F32 || hdr.ndim != 2 || hdr.shape[0] != rows || hdr.shape[1] != dim))
    st = ng__err(NG_ERR_FORMAT, "%s: %s of %d dimensions [%lld, ...], not float32 [%lld, %lld]",
                 path, ng__dtype_name(hdr.dtype), hdr.ndim, (long long)hdr.shape[0],
                 (long long)rows, (long long)dim);
  if (st == NG_OK && (fstat(rr->fd, &sb) || (size_t)sb.st_size != hdr.data_offset + hdr.nbytes))
    st = ng__err(NG_ERR_FORMAT, "%s: %lld bytes, not the %zu its header implies (cut short?)", path,
                 (long long)sb.st_size, hdr.data_offset + hdr.nbytes);
  if (st == NG_OK) {
    rr->data_offset = hdr.data_offset;
    rr->row_b = (size_t)dim * sizeof(float);
    rr->rows = rows;
    rr->win_cap = in_order ? NG_MAX((int64_t)1, (int64_t)((4 << 20) / rr->row_b)) : 1;
    rr->win = ng__malloc((size_t)rr->win_cap * rr->row_b, "the prefill's read window");
    if (!rr->win)
      st = NG_ERR_NOMEM;
  }
  if (st != NG_OK) {
    close(rr->fd);
    rr->fd = -1;
  }
  return st;
}

/* Row r into dst. */
static ng_status reader_row(row_reader *rr, int64_t r, float *dst) {
  if (r < rr->win_first || r >= rr->win_first + rr->win_n) {
    const int64_t n = NG_MIN(rr->win_cap, rr->rows - r);
    const size_t want = (size_t)n * rr->row_b;
    size_t done = 0;
    while (done < want) {
      const ssize_t k = pread(rr->fd, rr->win + done, want - done,
                              (off_t)(rr->data_offset + (size_t)r * rr->row_b + done));
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        return k < 0 ? ng__err_errno(NG_ERR_IO, errno, "%s", rr->path)
                     : ng__err(NG_ERR_IO, "%s: ends early", rr->path);
      done += (size_t)k;
    }
    rr->win_first = r;
    rr->win_n = n;
  }
  memcpy(dst, rr->win + (size_t)(r - rr->win_first) * rr->row_b, rr->row_b);
  return NG_OK;
}

static void reader_close(row_reader *rr) {
  if (rr->fd >= 0)
    close(rr->fd);
  free(rr->win);
}

static void bit_set(uint8_t *bits, int64_t v) {
  bits[v >> 3] = (uint8_t)(bits[v >> 3] | (1u << (v & 7)));
}

static bool bit_get(const uint8_t *bits, int64_t v) {
  return (bits[v >> 3] >> (v & 7)) & 1u;
}

ng_status ng__ecache_prefill(ng_ecache *c, int64_t *rows, const char *path,
                             const struct ng_model *m, const ng_srv_snap *s,
                             const struct ng_dataset *ds, const char *checkpoint, bool gcn0) {
  *rows = 0;
  if (!c && !ng__ecache_supports(m))
    return ng__err(NG_ERR_INVALID_ARG,
                   "embedding cache prefill: the cache does not serve this model (it needs two "
                   "layers or more and an input layer that aggregates raw rows without "
                   "parameters: GraphSAGE, GCN, GIN; not GAT or SAGE-pool), so there is nothing "
                   "to prefill");
  if (!c)
    return ng__err(NG_ERR_INVALID_ARG, "embedding cache prefill: the cache is off; give it a size "
                                       "(embedding_cache_bytes, --embedding-cache SIZE)");
  NG_CHECK(check_meta(path, ds, checkpoint, c->dim));
  const int64_t nodes = c->base->nodes, dim = c->dim;
  /* Row r of the file is node r, or, in a renumbered dataset, the node whose original id is r
   * (as neargnn embed writes every node). */
  const int64_t *orig = ds->info.orig_ids ? ds->arrays[NG_ARR_ORIG_ID].data : NULL;
  row_reader rr;
  NG_CHECK(reader_open(&rr, path, nodes, dim, orig == NULL));
  ng_status st = NG_OK;
  /* What the replayed updates changed since the base (the snapshot's delta): nodes whose own
   * inputs changed (their neighbour row or feature row replaced: `own`), and nodes whose change
   * reaches whoever aggregates them (`reach`: a replaced feature row; under GCN weights also a
   * replaced neighbour row, whose length is the node's degree in its readers' edge weights). */
  uint8_t *own = NULL, *reach = NULL;
  const size_t bits = ((size_t)nodes + 7) / 8;
  const bool changed = s->rows.n > 0 || s->feats.n > 0;
  if (st == NG_OK && changed) {
    own = ng__calloc(bits, 1, "the prefill's changed nodes");
    reach = ng__calloc(bits, 1, "the prefill's changed nodes");
    if (!own || !reach)
      st = NG_ERR_NOMEM;
  }
  for (int k = 0; k < 2 && st == NG_OK && changed; k++) {
    const ng_srv_map *map = k ? &s->feats : &s->rows;
    for (size_t i = 0; i < map->cap; i++) {
      const int64_t v = map->keys[i];
      if (v < 0 || v >= nodes) /* empty, or an added node (none of its rows is in the file) */
        continue;
      bit_set(own, v);
      if (k == 1 || gcn0)
        bit_set(reach, v);
    }
  }
  const ng_csr *g = c->base;
  int64_t loaded = 0;
  /* The lanes have not started: nobody waits for the lock while the rows are read. */
  pthread_mutex_lock(&c->mu);
  for (int64_t v = 0; v < nodes && c->n_free > 0 && st == NG_OK && !c->broken; v++) {
    if (changed) {
      /* A node whose row was not replaced aggregates its base row on `s` too. */
      bool dirty = bit_get(own, v);
      for (int64_t e = g->indptr[v]; e < g->indptr[v + 1] && !dirty; e++)
        dirty = bit_get(reach, ng__csr_index(g, e));
      if (dirty)
        continue;
    }
    const size_t h = index_find(c, v);
    if (c->index[h] >= 0)
      continue;
    const int64_t slot = c->free_slots[--c->n_free];
    c->index[h] = (int32_t)slot;
    c->node[slot] = v;
    c->ver[slot] = c->version;
    c->ref[slot] = 0; /* not yet used: the first evicted */
    const int64_t r = orig ? orig[v] : v;
    st = r < 0 || r >= nodes ? ng__err(NG_ERR_FORMAT, "%s: node %lld's original id %lld has no row",
                                       path, (long long)v, (long long)r)
                             : reader_row(&rr, r, c->rows + (size_t)slot * (size_t)dim);
    if (st != NG_OK) {
      slot_drop(c, slot);
      break;
    }
    loaded++;
  }
  pthread_mutex_unlock(&c->mu);
  free(own);
  free(reach);
  reader_close(&rr);
  *rows = loaded;
  return st;
}
