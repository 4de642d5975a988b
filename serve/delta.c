/* Versioned graph deltas over the immutable base dataset, and their durable log. */
#include "dataset_impl.h"
#include "engine_impl.h"
#include "idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- the node -> row map ----
 *
 * Not an ng_idmap (core/idmap.h): its values are reference-counted rows that a snapshot's
 * successor shares (map_clone), a put replaces a value in place, and the layer-0 cache
 * (serve/ecache.c) walks its slots; it shares the id tables' hash. */

static size_t map_slot(int64_t key, size_t mask) {
  return ng__idmap_hash(key, mask);
}

static void *map_get(const ng_srv_map *m, int64_t key) {
  if (m->cap == 0)
    return NULL;
  size_t mask = m->cap - 1;
  for (size_t h = map_slot(key, mask);; h = (h + 1) & mask) {
    if (m->keys[h] == key)
      return m->vals[h];
    if (m->keys[h] == -1)
      return NULL;
  }
}

static ng_status map_alloc(ng_srv_map *m, size_t cap) {
  m->keys = ng__malloc(cap * sizeof *m->keys, "the update delta's index");
  m->vals = ng__calloc(cap, sizeof *m->vals, "the update delta's index");
  if (!m->keys || !m->vals) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    return NG_ERR_NOMEM;
  }
  memset(m->keys, 0xff, cap * sizeof *m->keys);
  m->cap = cap;
  m->n = 0;
  return NG_OK;
}

static void map_free(ng_srv_map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static void map_insert_new(ng_srv_map *m, int64_t key, void *val) {
  size_t mask = m->cap - 1, h = map_slot(key, mask);
  while (m->keys[h] != -1)
    h = (h + 1) & mask;
  m->keys[h] = key;
  m->vals[h] = val;
  m->n++;
}

static void row_unref(void *p) {
  ng_srv_row *r = p;
  if (r && atomic_fetch_sub(&r->ref, 1) == 1)
    free(r);
}

static void feat_unref(void *p) {
  ng_srv_feat *f = p;
  if (f && atomic_fetch_sub(&f->ref, 1) == 1)
    free(f);
}

/* Grows the table so that `extra` more keys keep its load at most 1/2. */
static ng_status map_reserve(ng_srv_map *m, size_t extra) {
  if ((m->n + extra) * 2 <= m->cap)
    return NG_OK;
  size_t cap = m->cap ? m->cap : 64;
  while ((m->n + extra) * 2 > cap)
    cap *= 2;
  ng_srv_map bigger;
  NG_CHECK(map_alloc(&bigger, cap));
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] != -1)
      map_insert_new(&bigger, m->keys[i], m->vals[i]);
  map_free(m);
  *m = bigger;
  return NG_OK;
}

/* Sets key -> val (val's reference is taken); the value it replaces is released with `unref`.
 * Cannot fail after map_reserve(m, 1) (or more, for as many new keys). */
static ng_status map_put(ng_srv_map *m, int64_t key, void *val, void (*unref)(void *)) {
  NG_CHECK(map_reserve(m, 1));
  size_t mask = m->cap - 1;
  for (size_t h = map_slot(key, mask);; h = (h + 1) & mask) {
    if (m->keys[h] == key) {
      unref(m->vals[h]);
      m->vals[h] = val;
      return NG_OK;
    }
    if (m->keys[h] == -1) {
      m->keys[h] = key;
      m->vals[h] = val;
      m->n++;
      return NG_OK;
    }
  }
}

/* A copy of `src` sharing its values (each value's reference count goes up). */
static ng_status map_clone(ng_srv_map *dst, const ng_srv_map *src, bool rows) {
  memset(dst, 0, sizeof *dst);
  if (src->cap == 0)
    return NG_OK;
  NG_CHECK(map_alloc(dst, src->cap));
  memcpy(dst->keys, src->keys, src->cap * sizeof *src->keys);
  memcpy(dst->vals, src->vals, src->cap * sizeof *src->vals);
  dst->n = src->n;
  for (size_t i = 0; i < src->cap; i++) {
    if (src->keys[i] == -1)
      continue;
    if (rows)
      atomic_fetch_add(&((ng_srv_row *)src->vals[i])->ref, 1);
    else
      atomic_fetch_add(&((ng_srv_feat *)src->vals[i])->ref, 1);
  }
  return NG_OK;
}

static void map_release(ng_srv_map *m, void (*unref)(void *)) {
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] != -1)
      unref(m->vals[i]);
  map_free(m);
}

/* ---- snapshots ---- */

ng_status ng__srv_snap_base(ng_srv_snap **out, const ng_csr *base, const float *base_x, int64_t dim,
                            ng_normalize normalize) {
  ng_srv_snap *s = ng__calloc(1, sizeof *s, "a graph snapshot");
  if (!s)
    return NG_ERR_NOMEM;
  atomic_init(&s->ref, 1);
  s->nodes = base->nodes;
  s->base = base;
  s->base_x = base_x;
  s->dim = dim;
  s->normalize = normalize;
  *out = s;
  return NG_OK;
}

void ng__srv_snap_ref(ng_srv_snap *s) {
  atomic_fetch_add(&s->ref, 1);
}

void ng__srv_snap_unref(ng_srv_snap *s) {
  if (!s || atomic_fetch_sub(&s->ref, 1) != 1)
    return;
  map_release(&s->rows, row_unref);
  map_release(&s->feats, feat_unref);
  free(s);
}

void ng__srv_row(ng_srv_rowview *out, const ng_srv_snap *s, int64_t v) {
  memset(out, 0, sizeof *out);
  const ng_srv_row *r = map_get(&s->rows, v);
  if (r) {
    out->i64 = r->ids;
    out->n = r->n;
  } else if (v < s->base->nodes) {
    const int64_t b = s->base->indptr[v];
    out->n = s->base->indptr[v + 1] - b;
    if (s->base->idx32)
      out->i32 = s->base->idx32 + b;
    else
      out->i64 = s->base->idx64 + b;
  }
}

const float *ng__srv_feature(const ng_srv_snap *s, int64_t v, bool *overlay) {
  const ng_srv_feat *f = map_get(&s->feats, v);
  if (overlay)
    *overlay = f != NULL;
  return f ? f->x : s->base_x + v * s->dim;
}

bool ng__srv_has_overlay(const ng_srv_snap *s, int64_t v) {
  return s->feats.n > 0 && map_get(&s->feats, v) != NULL;
}

/* A feature row as the model reads it: row-normalised exactly as the trainer normalises the
 * table (runtime/trainer_setup.c, normalize_rows) when the model was trained so. A row that is
 * finite but not after normalisation (a tiny sum: its inverse overflows) would make every answer
 * that reads it NaN, and a logged one would do so again after every restart: it is refused here,
 * before the update reaches the log. `what` and `i` name the row in the update. */
static ng_status make_feat(ng_srv_feat **out, const float *x, int64_t dim, ng_normalize norm,
                           const char *what, int64_t i, int64_t node) {
  ng_srv_feat *f = ng__malloc(sizeof *f + (size_t)dim * sizeof(float), "a feature row");
  if (!f)
    return NG_ERR_NOMEM;
  atomic_init(&f->ref, 1);
  double sum = 0.0;
  if (norm == NG_NORMALIZE_ROW) {
    for (int64_t c = 0; c < dim; c++)
      sum += x[c];
    float inv = sum != 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int64_t c = 0; c < dim; c++)
      f->x[c] = x[c] * inv;
  } else {
    memcpy(f->x, x, (size_t)dim * sizeof(float));
  }
  for (int64_t c = 0; c < dim; c++) {
    if (!isfinite(f->x[c])) {
      const float bad = f->x[c];
      free(f);
      return ng__err(NG_ERR_INVALID_ARG,
                     "update: %s row %lld (node %lld) is finite but column %lld becomes %g under "
                     "the model's row normalisation (the row sums to %g); send a row whose sum is "
                     "not tiny against its values",
                     what, (long long)i, (long long)node, (long long)c, (double)bad, sum);
    }
  }
  *out = f;
  return NG_OK;
}

static ng_status check_finite(const float *x, int64_t n, const char *what, int64_t row,
                              int64_t dim) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return ng__err(NG_ERR_INVALID_ARG, "update: %s row %lld column %lld is %g (not finite)", what,
                     (long long)(row + i / dim), (long long)(i % dim), (double)x[i]);
  return NG_OK;
}

/* Edge operations grouped by destination: index `op` < n_remove is a removal. */
typedef struct {
  int64_t dst, src;
  int64_t op;
} edge_op;

static int cmp_edge_op(const void *a, const void *b) {
  const edge_op *x = a, *y = b;
  if (x->dst != y->dst)
    return (x->dst > y->dst) - (x->dst < y->dst);
  return (x->op > y->op) - (x->op < y->op); /* removals first, then additions, each in order */
}

/* Builds the row of one destination with its edge operations (ops[0, n)) applied to its row in
 * `s` into *out (a new row; `s` is not changed), counting into `chg` the edges it added (an edge
 * already there, or added twice, counts once) and removed; *old_len gets the row's length in s. */
static ng_status edit_row(ng_srv_row **out, int64_t *old_len, const ng_srv_snap *s,
                          const edge_op *ops, int64_t n, int64_t n_remove, ng_srv_changes *chg) {
  const int64_t v = ops[0].dst;
  ng_srv_rowview rv;
  ng__srv_row(&rv, s, v);
  *old_len = rv.n;
  int64_t adds = 0;
  for (int64_t i = 0; i < n; i++)
    adds += ops[i].op >= n_remove;
  ng_srv_row *r =
      ng__malloc(sizeof *r + (size_t)(rv.n + adds) * sizeof(int64_t), "an updated neighbour row");
  if (!r)
    return NG_ERR_NOMEM;
  atomic_init(&r->ref, 1);
  r->n = rv.n;
  for (int64_t i = 0; i < rv.n; i++)
    r->ids[i] = ng__srv_rowview_at(&rv, i);
  for (int64_t i = 0; i < n; i++) {
    const int64_t u = ops[i].src;
    int64_t at = 0, kept = 0;
    bool found = false;
    for (; at < r->n; at++) {
      if (r->ids[at] == u)
        found = true;
      else if (ops[i].op < n_remove)
        r->ids[kept++] = r->ids[at];
    }
    if (ops[i].op < n_remove) {
      if (!found) {
        free(r);
        return ng__err(NG_ERR_INVALID_ARG,
                       "update: remove_edges[%lld] = (%lld, %lld): node %lld has no neighbour %lld",
                       (long long)ops[i].op, (long long)u, (long long)v, (long long)v,
                       (long long)u);
      }
      r->n = kept; /* every occurrence goes */
      chg->removed_edges++;
    } else if (!found) {
      r->ids[r->n++] = u; /* adding an edge that exists changes nothing */
      chg->added_edges++;
    }
  }
  *out = r;
  return NG_OK;
}

static ng_status check_update(const ng_srv_snap *s, const ng_graph_update *u) {
  if (!u)
    return ng__err(NG_ERR_INVALID_ARG, "update: NULL");
  const int64_t dim = s->dim;
  if (u->add_nodes < 0 || u->n_add_edges < 0 || u->n_remove_edges < 0 || u->n_feature_rows < 0)
    return ng__err(NG_ERR_INVALID_ARG, "update: negative count");
  if ((u->add_nodes > 0 && !u->add_features) ||
      (u->n_add_edges > 0 && (!u->add_src || !u->add_dst)) ||
      (u->n_remove_edges > 0 && (!u->remove_src || !u->remove_dst)) ||
      (u->n_feature_rows > 0 && (!u->feature_ids || !u->feature_values)))
    return ng__err(NG_ERR_INVALID_ARG, "update: a count is set but its array is NULL");
  const int64_t nodes = s->nodes + u->add_nodes;
  if (u->add_nodes > INT32_MAX || nodes > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG,
                   "update: %lld nodes would pass the engine's limit of 2^31 - 1 nodes",
                   (long long)nodes);
  for (int64_t i = 0; i < u->n_add_edges; i++)
    if (u->add_src[i] < 0 || u->add_src[i] >= nodes || u->add_dst[i] < 0 || u->add_dst[i] >= nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "update: add_edges[%lld] = (%lld, %lld) names a node outside [0, %lld)",
                     (long long)i, (long long)u->add_src[i], (long long)u->add_dst[i],
                     (long long)nodes);
  for (int64_t i = 0; i < u->n_remove_edges; i++)
    if (u->remove_src[i] < 0 || u->remove_src[i] >= nodes || u->remove_dst[i] < 0 ||
        u->remove_dst[i] >= nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "update: remove_edges[%lld] = (%lld, %lld) names a node outside [0, %lld)",
                     (long long)i, (long long)u->remove_src[i], (long long)u->remove_dst[i],
                     (long long)nodes);
  for (int64_t i = 0; i < u->n_feature_rows; i++)
    if (u->feature_ids[i] < 0 || u->feature_ids[i] >= nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "update: feature_ids[%lld] = %lld is not a node id (0 .. %lld)", (long long)i,
                     (long long)u->feature_ids[i], (long long)nodes - 1);
  NG_CHECK(check_finite(u->add_features, u->add_nodes * dim, "add_features", 0, dim));
  NG_CHECK(check_finite(u->feature_values, u->n_feature_rows * dim, "feature_values", 0, dim));
  return NG_OK;
}

ng_status ng__srv_snap_fork(ng_srv_snap **out, const ng_srv_snap *s) {
  *out = NULL;
  ng_srv_snap *n = ng__calloc(1, sizeof *n, "a graph snapshot");
  if (!n)
    return NG_ERR_NOMEM;
  atomic_init(&n->ref, 1);
  n->version = s->version;
  n->nodes = s->nodes;
  n->base = s->base;
  n->base_x = s->base_x;
  n->dim = s->dim;
  n->normalize = s->normalize;
  ng_status st = map_clone(&n->rows, &s->rows, true);
  if (st == NG_OK)
    st = map_clone(&n->feats, &s->feats, false);
  if (st != NG_OK) {
    ng__srv_snap_unref(n);
    return st;
  }
  *out = n;
  return NG_OK;
}

/* The update is applied in two phases, so that one that fails leaves the snapshot as it was:
 * first everything that can fail (validation, the new feature and neighbour rows, the maps'
 * room), then the puts, which cannot. Added nodes, then edges (removals before additions, per
 * destination in the update's order), then replaced feature rows (a row given twice: the last). */
ng_status ng__srv_snap_apply_into(ng_srv_snap *s, const ng_graph_update *u, ng_srv_changes *changes,
                                  ng_srv_resized *resized) {
  NG_CHECK(check_update(s, u));
  const int64_t dim = s->dim, n_feats = u->add_nodes + u->n_feature_rows;
  const int64_t n_ops = u->n_remove_edges + u->n_add_edges;
  ng_srv_changes chg = {0};
  ng_status st = NG_OK;
  edge_op *ops = NULL;
  ng_srv_feat **feats = NULL;
  ng_srv_row **rows = NULL;
  int64_t *row_node = NULL, n_rows = 0, n_made = 0;
  if (resized)
    resized->n = 0;
  if (n_feats > 0) {
    feats = ng__calloc((size_t)n_feats, sizeof *feats, "the update's feature rows");
    if (!feats)
      return NG_ERR_NOMEM;
  }
  for (; n_made < n_feats; n_made++) {
    const bool added = n_made < u->add_nodes;
    const int64_t i = added ? n_made : n_made - u->add_nodes;
    NG_CHECK_GOTO(st,
                  make_feat(&feats[n_made], (added ? u->add_features : u->feature_values) + i * dim,
                            dim, s->normalize, added ? "add_features" : "feature_values", i,
                            added ? s->nodes + i : u->feature_ids[i]),
                  fail);
  }
  if (n_ops > 0) {
    ops = ng__malloc((size_t)n_ops * sizeof *ops, "the update's edges");
    rows = ng__calloc((size_t)n_ops, sizeof *rows, "the update's neighbour rows");
    row_node = ng__malloc((size_t)n_ops * sizeof *row_node, "the update's neighbour rows");
    if (!ops || !rows || !row_node) {
      st = NG_ERR_NOMEM;
      goto fail;
    }
    for (int64_t i = 0; i < u->n_remove_edges; i++)
      ops[i] = (edge_op){u->remove_dst[i], u->remove_src[i], i};
    for (int64_t i = 0; i < u->n_add_edges; i++)
      ops[u->n_remove_edges + i] = (edge_op){u->add_dst[i], u->add_src[i], u->n_remove_edges + i};
    qsort(ops, (size_t)n_ops, sizeof *ops, cmp_edge_op);
    /* At most one resized row per destination, so per edge operation. */
    if (resized && resized->cap < n_ops) {
      int64_t *ids = realloc(resized->ids, (size_t)n_ops * sizeof *ids);
      if (!ids) {
        st = ng__err(NG_ERR_NOMEM, "out of memory for an update's changed rows");
        goto fail;
      }
      resized->ids = ids;
      resized->cap = n_ops;
    }
    for (int64_t a = 0; a < n_ops;) {
      int64_t b = a + 1, old_len = 0;
      while (b < n_ops && ops[b].dst == ops[a].dst)
        b++;
      NG_CHECK_GOTO(
          st, edit_row(&rows[n_rows], &old_len, s, ops + a, b - a, u->n_remove_edges, &chg), fail);
      row_node[n_rows] = ops[a].dst;
      /* A row of an existing node whose length changed (its degree, in GCN weights). */
      if (resized && ops[a].dst < s->nodes && rows[n_rows]->n != old_len)
        resized->ids[resized->n++] = ops[a].dst;
      n_rows++;
      a = b;
    }
  }
  NG_CHECK_GOTO(st, map_reserve(&s->rows, (size_t)n_rows), fail);
  NG_CHECK_GOTO(st, map_reserve(&s->feats, (size_t)n_feats), fail);
  /* From here nothing fails. */
  for (int64_t i = 0; i < n_feats; i++)
    (void)map_put(&s->feats, i < u->add_nodes ? s->nodes + i : u->feature_ids[i - u->add_nodes],
                  feats[i], feat_unref);
  for (int64_t i = 0; i < n_rows; i++)
    (void)map_put(&s->rows, row_node[i], rows[i], row_unref);
  chg.added_nodes = u->add_nodes;
  chg.updated_features = u->n_feature_rows;
  s->nodes += u->add_nodes;
  if (chg.added_nodes || chg.added_edges || chg.removed_edges || chg.updated_features)
    s->version++;
  free(ops);
  free(rows);
  free(row_node);
  free(feats);
  if (changes)
    *changes = chg;
  return NG_OK;
fail:
  for (int64_t i = 0; i < n_rows; i++)
    row_unref(rows[i]);
  for (int64_t i = 0; i < n_made; i++)
    feat_unref(feats[i]);
  free(ops);
  free(rows);
  free(row_node);
  free(feats);
  if (resized)
    resized->n = 0;
  return st;
}

ng_status ng__srv_snap_apply(ng_srv_snap **out, const ng_srv_snap *s, const ng_graph_update *u,
                             ng_srv_changes *changes) {
  *out = NULL;
  ng_srv_snap *n = NULL;
  NG_CHECK(ng__srv_snap_fork(&n, s));
  ng_status st = ng__srv_snap_apply_into(n, u, changes, NULL);
  if (st != NG_OK) {
    ng__srv_snap_unref(n);
    return st;
  }
  *out = n;
  return NG_OK;
}

/* ---- the log ----
 *
 * Version 2 (docs/serving-engine.md, "The log"):
 *   header (64 bytes): "NGSRVLOG", u32 version 2, u32 CRC-32 of bytes 16..64, i64 base nodes,
 *     i64 base edges, i64 feature columns, u32 CRC-32 of indptr, u32 0, u8[16] dataset id.
 *   record header (32 bytes): u32 magic "NGUR", u32 CRC-32 of bytes 8..32, u64 payload bytes,
 *     u64 sequence number, u32 CRC-32 of the payload, u32 0.
 *   payload: u64 sequence number (1, 2, ...), i64 add_nodes, n_add_edges, n_remove_edges,
 *     n_feature_rows, then add_features (float32), add_src, add_dst, remove_src, remove_dst,
 *     feature_ids (int64) and feature_values (float32). Little-endian, as the host writes them.
 * The record header's own CRC is checked before its length is used, so that one flipped bit in a
 * length cannot make the records after it look like a torn tail.
 *
 * Version 1 (still replayed, then rewritten as version 2): header (32 bytes) "NGSRVLOG", u32 1,
 * u32 0, i64 base nodes, i64 feature columns; record: u32 magic, u32 CRC-32 of the length and the
 * payload, u64 payload bytes, payload (the same). */

#define LOG_MAGIC "NGSRVLOG"
#define LOG_VERSION 2u
#define LOG_HEADER 64
#define LOG_HEADER_V1 32
#define REC_MAGIC 0x5255474eu /* "NGUR" */
#define REC_HEAD 32
#define REC_HEAD_V1 16
#define REC_FIXED 40 /* sequence number and the four counts */

static uint32_t crc(const void *p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  const Bytef *b = p;
  while (n > 0) { /* zlib takes 32-bit lengths */
    const uInt k = (uInt)NG_MIN(n, (size_t)1 << 30);
    c = crc32(c, b, k);
    b += k;
    n -= k;
  }
  return (uint32_t)c;
}

void ng__srv_fingerprint(ng_srv_fingerprint *out, const struct ng_dataset *ds) {
  memset(out, 0, sizeof *out);
  out->nodes = ds->info.nodes;
  out->edges = ds->info.edges;
  out->dim = ds->info.feature_dim;
  out->indptr_crc = crc(ds->csr.indptr, (size_t)(ds->csr.nodes + 1) * sizeof(int64_t));
  if (ds->has_id)
    memcpy(out->id, ds->id, sizeof out->id);
}

static void make_header(char head[LOG_HEADER], const ng_srv_fingerprint *fp) {
  memset(head, 0, LOG_HEADER);
  memcpy(head, LOG_MAGIC, 8);
  const uint32_t version = LOG_VERSION;
  memcpy(head + 8, &version, 4);
  memcpy(head + 16, &fp->nodes, 8);
  memcpy(head + 24, &fp->edges, 8);
  memcpy(head + 32, &fp->dim, 8);
  memcpy(head + 40, &fp->indptr_crc, 4);
  memcpy(head + 48, fp->id, 16);
  const uint32_t hc = crc(head + 16, LOG_HEADER - 16);
  memcpy(head + 12, &hc, 4);
}

static bool id_set(const uint8_t id[16]) {
  for (int i = 0; i < 16; i++)
    if (id[i])
      return true;
  return false;
}

static void hex_id(char out[33], const uint8_t id[16]) {
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* Refuses a version-2 header that is damaged or names another dataset. Ids are compared when
 * both sides have one; counts and the indptr CRC always (a dataset folder without an id). */
static ng_status check_header(const char head[LOG_HEADER], const ng_srv_fingerprint *fp,
                              const char *path) {
  uint32_t hc = 0;
  memcpy(&hc, head + 12, 4);
  if (hc != crc(head + 16, LOG_HEADER - 16))
    return ng__err(NG_ERR_FORMAT,
                   "%s: the log's header fails its CRC-32: the log is damaged; restore it from a "
                   "copy or move it away (every update in it is lost)",
                   path);
  ng_srv_fingerprint h;
  memset(&h, 0, sizeof h);
  memcpy(&h.nodes, head + 16, 8);
  memcpy(&h.edges, head + 24, 8);
  memcpy(&h.dim, head + 32, 8);
  memcpy(&h.indptr_crc, head + 40, 4);
  memcpy(h.id, head + 48, 16);
  char want[33], have[33];
  hex_id(want, h.id);
  hex_id(have, fp->id);
  if (id_set(h.id) && id_set(fp->id) && memcmp(h.id, fp->id, 16) != 0)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the log was written for the dataset with id %s, this one has id %s "
                   "(dataset.json): its updates name other nodes; use the log of this dataset "
                   "or a new path",
                   path, want, have);
  if (h.nodes != fp->nodes || h.edges != fp->edges || h.dim != fp->dim ||
      h.indptr_crc != fp->indptr_crc)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the log was written for a dataset of %lld nodes, %lld edges, %lld feature "
                   "columns and indptr CRC-32 %08x; this one has %lld, %lld, %lld and %08x: its "
                   "updates name other nodes; use the log of this dataset or a new path",
                   path, (long long)h.nodes, (long long)h.edges, (long long)h.dim,
                   (unsigned)h.indptr_crc, (long long)fp->nodes, (long long)fp->edges,
                   (long long)fp->dim, (unsigned)fp->indptr_crc);
  return NG_OK;
}

static ng_status write_all(int fd, const void *buf, size_t n, const char *path) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return ng__err_errno(NG_ERR_IO, errno, "%s: cannot write the update log", path);
    p += w;
    n -= (size_t)w;
  }
  return NG_OK;
}

static ng_status read_at(int fd, void *buf, size_t n, int64_t off, const char *path) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return ng__err_errno(NG_ERR_IO, r < 0 ? errno : EIO, "%s: cannot read the update log", path);
    p += r;
    off += r;
    n -= (size_t)r;
  }
  return NG_OK;
}

/* A version-2 record header for a payload of `len` bytes. */
static void make_rec_head(char rh[REC_HEAD], const char *payload, uint64_t len) {
  const uint32_t magic = REC_MAGIC, pc = crc(payload, (size_t)len);
  uint64_t seq = 0;
  memcpy(&seq, payload, 8);
  memset(rh, 0, REC_HEAD);
  memcpy(rh, &magic, 4);
  memcpy(rh + 8, &len, 8);
  memcpy(rh + 16, &seq, 8);
  memcpy(rh + 24, &pc, 4);
  const uint32_t hc = crc(rh + 8, REC_HEAD - 8);
  memcpy(rh + 4, &hc, 4);
}

/* Payload bytes of an update, or 0 when it overflows. */
static size_t payload_bytes(const ng_graph_update *u, int64_t dim) {
  size_t floats = 0, ints = 0, fa = 0, fb = 0;
  if (!ng__mul_ok((size_t)u->add_nodes, (size_t)dim, &fa) ||
      !ng__mul_ok((size_t)u->n_feature_rows, (size_t)dim, &fb) || !ng__add_ok(fa, fb, &floats))
    return 0;
  ints = 2 * (size_t)u->n_add_edges + 2 * (size_t)u->n_remove_edges + (size_t)u->n_feature_rows;
  return REC_FIXED + floats * sizeof(float) + ints * sizeof(int64_t);
}

static char *put(char *p, const void *src, size_t n) {
  if (n)
    memcpy(p, src, n);
  return p + n;
}

/* Writes update `u`'s record with sequence `seq` at `rec` (payload_bytes(u, dim) + REC_HEAD
 * bytes). */
static void encode_record(char *rec, const ng_graph_update *u, int64_t dim, uint64_t seq,
                          size_t len) {
  char *p = rec + REC_HEAD;
  p = put(p, &seq, 8);
  p = put(p, &u->add_nodes, 8);
  p = put(p, &u->n_add_edges, 8);
  p = put(p, &u->n_remove_edges, 8);
  p = put(p, &u->n_feature_rows, 8);
  p = put(p, u->add_features, (size_t)(u->add_nodes * dim) * sizeof(float));
  p = put(p, u->add_src, (size_t)u->n_add_edges * 8);
  p = put(p, u->add_dst, (size_t)u->n_add_edges * 8);
  p = put(p, u->remove_src, (size_t)u->n_remove_edges * 8);
  p = put(p, u->remove_dst, (size_t)u->n_remove_edges * 8);
  p = put(p, u->feature_ids, (size_t)u->n_feature_rows * 8);
  put(p, u->feature_values, (size_t)(u->n_feature_rows * dim) * sizeof(float));
  make_rec_head(rec, rec + REC_HEAD, len);
}

ng_status ng__srv_log_append_group(ng_srv_log *log, const ng_graph_update *const *u, int n,
                                   int64_t dim) {
  if (n <= 0)
    return NG_OK;
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    const size_t len = payload_bytes(u[i], dim);
    if (len == 0 || !ng__add_ok(total, REC_HEAD + len, &total))
      return ng__err(NG_ERR_INVALID_ARG, "update too large to log");
  }
  char *buf = ng__malloc(total, "the update log's records");
  if (!buf)
    return NG_ERR_NOMEM;
  /* One record per update, sequence numbers consecutive: replay cannot tell a group from
   * updates appended one at a time. */
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    const size_t len = payload_bytes(u[i], dim);
    encode_record(buf + at, u[i], dim, log->seq + 1 + (uint64_t)i, len);
    at += REC_HEAD + len;
  }
  ng_status st = NG_OK;
  if (log->test_fail_next) {
    log->test_fail_next = false;
    st = ng__err(NG_ERR_IO, "%s: cannot write the update log (a test's injected failure)",
                 log->path);
  }
  if (st == NG_OK)
    st = write_all(log->fd, buf, total, log->path);
  if (st == NG_OK && fdatasync(log->fd) != 0)
    st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot fsync the update log", log->path);
  free(buf);
  if (st != NG_OK) {
    /* No half record may stay: the next append and every replay start from a whole log. A group
     * fails as a whole: none of its records may stay, since none is acknowledged. */
    if (ftruncate(log->fd, (off_t)log->length) != 0 || lseek(log->fd, 0, SEEK_END) < 0)
      ng__err_prefix("%s: the log could not be cut back after a failed append", log->path);
    return st;
  }
  log->seq += (uint64_t)n;
  log->length += (int64_t)total;
  log->syncs++;
  return NG_OK;
}

ng_status ng__srv_log_append(ng_srv_log *log, const ng_graph_update *u, int64_t dim) {
  return ng__srv_log_append_group(log, &u, 1, dim);
}

/* Whether bytes [off, end) of the file are all zero (a file system may extend a file before
 * its data reach the disk: a crash then leaves zeros). */
static bool zeros_to_end(int fd, int64_t off, int64_t end) {
  char buf[4096];
  while (off < end) {
    size_t n = (size_t)NG_MIN((int64_t)sizeof buf, end - off);
    if (pread(fd, buf, n, (off_t)off) != (ssize_t)n)
      return false;
    for (size_t i = 0; i < n; i++)
      if (buf[i])
        return false;
    off += (int64_t)n;
  }
  return true;
}

/* Applies one record's payload to *snap. */
static ng_status replay_record(ng_srv_snap **snap, const char *pl, size_t len, uint64_t want_seq,
                               const char *path, int64_t off) {
  uint64_t seq;
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  memcpy(&seq, pl, 8);
  memcpy(&u.add_nodes, pl + 8, 8);
  memcpy(&u.n_add_edges, pl + 16, 8);
  memcpy(&u.n_remove_edges, pl + 24, 8);
  memcpy(&u.n_feature_rows, pl + 32, 8);
  const int64_t dim = (*snap)->dim;
  if (seq != want_seq || u.add_nodes < 0 || u.n_add_edges < 0 || u.n_remove_edges < 0 ||
      u.n_feature_rows < 0 || u.add_nodes > INT32_MAX || u.n_feature_rows > INT32_MAX ||
      u.n_add_edges > INT32_MAX || u.n_remove_edges > INT32_MAX || payload_bytes(&u, dim) != len)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the record at byte %lld has sequence %llu (expected %llu) or counts that "
                   "do not match its length; the log is damaged",
                   path, (long long)off, (unsigned long long)seq, (unsigned long long)want_seq);
  /* The arrays are copied out: the payload's offsets need not be aligned. */
  const size_t fa = (size_t)(u.add_nodes * dim), fr = (size_t)(u.n_feature_rows * dim);
  const size_t ie =
      2 * (size_t)u.n_add_edges + 2 * (size_t)u.n_remove_edges + (size_t)u.n_feature_rows;
  float *f = ng__malloc((fa + fr + 1) * sizeof(float), "a replayed update");
  int64_t *ids = ng__malloc((ie + 1) * sizeof(int64_t), "a replayed update");
  if (!f || !ids) {
    free(f);
    free(ids);
    return NG_ERR_NOMEM;
  }
  const char *p = pl + REC_FIXED;
  memcpy(f, p, fa * sizeof(float));
  p += fa * sizeof(float);
  memcpy(ids, p, ie * sizeof(int64_t));
  p += ie * sizeof(int64_t);
  memcpy(f + fa, p, fr * sizeof(float));
  u.add_features = f;
  u.add_src = ids;
  u.add_dst = ids + u.n_add_edges;
  u.remove_src = ids + 2 * u.n_add_edges;
  u.remove_dst = u.remove_src + u.n_remove_edges;
  u.feature_ids = u.remove_dst + u.n_remove_edges;
  u.feature_values = f + fa;
  /* The records apply in place (one copy for a whole replay, not one per record) once the
   * snapshot is the replay's own. */
  ng_status st = NG_OK;
  if (atomic_load(&(*snap)->ref) != 1) {
    ng_srv_snap *own = NULL;
    st = ng__srv_snap_fork(&own, *snap);
    if (st == NG_OK) {
      ng__srv_snap_unref(*snap);
      *snap = own;
    }
  }
  if (st == NG_OK)
    st = ng__srv_snap_apply_into(*snap, &u, NULL, NULL);
  free(f);
  free(ids);
  if (st != NG_OK) {
    ng__err_prefix("%s: record %llu at byte %lld does not apply to this dataset", path,
                   (unsigned long long)seq, (long long)off);
    return st == NG_ERR_NOMEM ? st : NG_ERR_FORMAT;
  }
  return NG_OK;
}

/* Reusable memory for reading records. */
typedef struct {
  char *buf;
  size_t cap;
} rec_buf;

/* Whether a whole record of format `version` that passes every check of its own (its header's
 * CRC before its length is trusted, a length that fits the file, its payload's CRC) starts at
 * byte `off` of a file of `size` bytes. On true, *payload points at its payload (in `b`) and
 * *len is its length; on false, *why says what failed. Only an I/O error is an error. */
static ng_status record_at(bool *valid, const char **payload, uint64_t *len, const char **why,
                           rec_buf *b, int fd, int64_t off, int64_t size, uint32_t version,
                           const char *path) {
  *valid = false;
  const int64_t head = version == 1 ? REC_HEAD_V1 : REC_HEAD;
  if (size - off < head) {
    *why = "a record header cut short";
    return NG_OK;
  }
  char rh[REC_HEAD];
  NG_CHECK(read_at(fd, rh, (size_t)head, off, path));
  uint32_t magic = 0, hc = 0, pc = 0, zero = 0;
  uint64_t n = 0, seq = 0;
  memcpy(&magic, rh, 4);
  memcpy(&hc, rh + 4, 4);
  memcpy(&n, rh + 8, 8);
  if (magic != REC_MAGIC) {
    *why = "no record magic";
    return NG_OK;
  }
  if (version != 1) {
    memcpy(&seq, rh + 16, 8);
    memcpy(&pc, rh + 24, 4);
    memcpy(&zero, rh + 28, 4);
    if (hc != crc(rh + 8, REC_HEAD - 8) || zero != 0) {
      *why = "a record header that fails its CRC-32";
      return NG_OK;
    }
  }
  if (n < REC_FIXED || n > (uint64_t)(size - off - head)) {
    *why = "a record cut short";
    return NG_OK;
  }
  /* Version 1's CRC covers the length too: the 8 bytes go before the payload. */
  const size_t pre = version == 1 ? 8 : 0;
  NG_CHECK(ng__host_reserve((void **)&b->buf, &b->cap, (size_t)n + pre, "a log record"));
  memcpy(b->buf, rh + 8, pre);
  NG_CHECK(read_at(fd, b->buf + pre, (size_t)n, off + head, path));
  const uint32_t have = crc(b->buf, (size_t)n + pre);
  if (have != (version == 1 ? hc : pc)) {
    *why = "a record that fails its CRC-32";
    return NG_OK;
  }
  uint64_t pseq = 0;
  memcpy(&pseq, b->buf + pre, 8);
  if (version != 1 && pseq != seq) {
    *why = "a record whose header and payload differ in its sequence number";
    return NG_OK;
  }
  *valid = true;
  *payload = b->buf + pre;
  *len = n;
  return NG_OK;
}

/* The offset of the first valid record that starts after byte `from`, or -1. A record is
 * looked for at every byte whose next four bytes are the record magic, not just where the
 * damaged record's length points, since that length may be the damage. */
static ng_status next_valid(int64_t *found, rec_buf *b, int fd, int64_t from, int64_t size,
                            uint32_t version, const char *path) {
  *found = -1;
  const uint32_t magic = REC_MAGIC;
  char chunk[65536];
  for (int64_t at = from + 1; at + 4 <= size;) {
    const size_t n = (size_t)NG_MIN((int64_t)sizeof chunk, size - at);
    NG_CHECK(read_at(fd, chunk, n, at, path));
    for (size_t i = 0; i + 4 <= n; i++) {
      if (memcmp(chunk + i, &magic, 4) != 0)
        continue;
      bool valid = false;
      const char *pl = NULL, *why = NULL;
      uint64_t len = 0;
      NG_CHECK(record_at(&valid, &pl, &len, &why, b, fd, at + (int64_t)i, size, version, path));
      if (valid) {
        *found = at + (int64_t)i;
        return NG_OK;
      }
    }
    if (n < 4)
      break;
    at += (int64_t)n - 3; /* a magic across the chunk's end is seen by the next chunk */
  }
  return NG_OK;
}

/* Writes a finished version-2 copy of a version-1 log into place: fsynced, renamed over the old
 * one and the folder fsynced, so that a crash leaves either log whole. */
static ng_status migrate_commit(ng_srv_log *log, int tmp_fd, const char *tmp, const char *path) {
  if (fsync(tmp_fd) != 0)
    return ng__err_errno(NG_ERR_IO, errno, "%s: cannot fsync the rewritten update log", tmp);
  if (rename(tmp, path) != 0)
    return ng__err_errno(NG_ERR_IO, errno,
                         "%s: cannot move the log rewritten in format version %u into place", path,
                         LOG_VERSION);
  char dir[4096];
  ng__strlcpy(dir, path, sizeof dir);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = slash == dir ? (slash[1] = '\0', '/') : '\0';
  int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  close(log->fd);
  log->fd = tmp_fd;
  return NG_OK;
}

static ng_status log_open(ng_srv_log *log, const char *path, ng_srv_snap **snap,
                          const ng_srv_fingerprint *fp, ng_srv_log_report *rep, char **tmp_path,
                          int *tmp_fd) {
  log->fd = -1;
  log->path = strdup(path);
  if (!log->path)
    return ng__err(NG_ERR_NOMEM, "out of memory");
  int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return ng__err_errno(NG_ERR_IO, errno, "%s: cannot open the update log", path);
  log->fd = fd;
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return ng__err_errno(NG_ERR_IO, errno, "%s: cannot stat the update log", path);
  int64_t size = (int64_t)sb.st_size;
  char head[LOG_HEADER];
  uint32_t version = 0;
  if (size >= 12) {
    NG_CHECK(read_at(fd, head, 12, 0, path));
    memcpy(&version, head + 8, 4);
  }
  const int64_t head_len = version == 1 ? LOG_HEADER_V1 : LOG_HEADER;
  if (size < head_len) {
    /* A new log, or one whose header a crash cut short: nothing was acknowledged from it. */
    if (size > 0 && !zeros_to_end(fd, 0, size)) {
      char first[LOG_HEADER] = {0};
      if (read_at(fd, first, (size_t)size, 0, path) != NG_OK ||
          memcmp(first, LOG_MAGIC, (size_t)NG_MIN(size, 8)) != 0)
        return ng__err(NG_ERR_FORMAT, "%s: not a neargnn update log (%lld bytes, bad header)", path,
                       (long long)size);
    }
    make_header(head, fp);
    if (ftruncate(fd, 0) != 0)
      return ng__err_errno(NG_ERR_IO, errno, "%s: cannot reset the update log", path);
    NG_CHECK(write_all(fd, head, sizeof head, path));
    if (fsync(fd) != 0)
      return ng__err_errno(NG_ERR_IO, errno, "%s: cannot fsync the update log", path);
    log->length = LOG_HEADER;
    return NG_OK;
  }
  NG_CHECK(read_at(fd, head, (size_t)head_len, 0, path));
  if (memcmp(head, LOG_MAGIC, 8) != 0 || (version != 1 && version != LOG_VERSION))
    return ng__err(NG_ERR_FORMAT,
                   "%s: not a neargnn update log this version reads (magic %.8s, format version "
                   "%u; this neargnn reads 1 and %u)",
                   path, memcmp(head, LOG_MAGIC, 8) == 0 ? LOG_MAGIC : "unknown", (unsigned)version,
                   LOG_VERSION);
  if (version == 1) {
    /* Version 1 names its dataset by two counts only; that check is all it allows. Its bytes
     * 12..16 are zero, where version 2 keeps its header's CRC: a version-2 log whose version
     * field was damaged is not read as version 1. */
    int64_t h_nodes = 0, h_dim = 0;
    uint32_t zero = 0;
    memcpy(&zero, head + 12, 4);
    memcpy(&h_nodes, head + 16, 8);
    memcpy(&h_dim, head + 24, 8);
    if (zero != 0)
      return ng__err(NG_ERR_FORMAT,
                     "%s: the log's header is damaged (version 1 with a header CRC); restore it "
                     "from a copy or move it away (every update in it is lost)",
                     path);
    if (h_nodes != fp->nodes || h_dim != fp->dim)
      return ng__err(NG_ERR_FORMAT,
                     "%s: the log was written for a dataset of %lld nodes and %lld feature "
                     "columns, this one has %lld and %lld; use the log of this dataset or a new "
                     "path",
                     path, (long long)h_nodes, (long long)h_dim, (long long)fp->nodes,
                     (long long)fp->dim);
    /* The records are copied into a version-2 log beside it as they replay. */
    const size_t plen = strlen(path);
    *tmp_path = ng__malloc(plen + 16, "a path");
    if (!*tmp_path)
      return NG_ERR_NOMEM;
    snprintf(*tmp_path, plen + 16, "%s.v2-XXXXXX", path);
    *tmp_fd = mkostemp(*tmp_path, O_APPEND | O_CLOEXEC);
    if (*tmp_fd < 0) {
      free(*tmp_path);
      *tmp_path = NULL;
      return ng__err_errno(NG_ERR_IO, errno,
                           "%s: cannot create a file beside it to rewrite the version-1 log in "
                           "format version %u",
                           path, LOG_VERSION);
    }
    char h2[LOG_HEADER];
    make_header(h2, fp);
    NG_CHECK(write_all(*tmp_fd, h2, sizeof h2, *tmp_path));
  } else {
    NG_CHECK(check_header(head, fp, path));
  }
  int64_t off = head_len;
  ng_status st = NG_OK;
  rec_buf b = {0};
  while (off < size) {
    bool valid = false;
    const char *pl = NULL, *why = NULL;
    uint64_t len = 0;
    NG_CHECK_GOTO(st, record_at(&valid, &pl, &len, &why, &b, fd, off, size, version, path), done);
    if (!valid) {
      /* A tail is torn by a crash during an append only if nothing valid follows it: then that
       * update was never acknowledged. A valid record after it means the damage is inside
       * acknowledged data, which is never cut. */
      int64_t next = -1;
      NG_CHECK_GOTO(st, next_valid(&next, &b, fd, off, size, version, path), done);
      if (next >= 0) {
        st = ng__err(NG_ERR_FORMAT,
                     "%s: the record at byte %lld is damaged (%s) and a valid record follows at "
                     "byte %lld: the log is corrupt; restore it from a copy, or move it away "
                     "(every update in it is lost)",
                     path, (long long)off, why, (long long)next);
        goto done;
      }
      if (ftruncate(fd, (off_t)off) != 0 || fsync(fd) != 0) {
        st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot cut off %s at byte %lld", path, why,
                           (long long)off);
        goto done;
      }
      rep->cut_offset = off;
      rep->cut_bytes = size - off;
      rep->cut_why = why;
      size = off;
      break;
    }
    NG_CHECK_GOTO(st, replay_record(snap, pl, (size_t)len, log->seq + 1, path, off), done);
    if (*tmp_path) {
      char rh[REC_HEAD];
      make_rec_head(rh, pl, len);
      NG_CHECK_GOTO(st, write_all(*tmp_fd, rh, sizeof rh, *tmp_path), done);
      NG_CHECK_GOTO(st, write_all(*tmp_fd, pl, (size_t)len, *tmp_path), done);
    }
    log->seq++;
    rep->replayed++;
    off += (version == 1 ? REC_HEAD_V1 : REC_HEAD) + (int64_t)len;
  }
  log->length = off;
  if (*tmp_path) {
    NG_CHECK_GOTO(st, migrate_commit(log, *tmp_fd, *tmp_path, path), done);
    *tmp_fd = -1;
    free(*tmp_path);
    *tmp_path = NULL;
    log->length = LOG_HEADER + (off - LOG_HEADER_V1) + (int64_t)log->seq * (REC_HEAD - REC_HEAD_V1);
    rep->migrated = true;
  }
  if (lseek(log->fd, 0, SEEK_END) < 0)
    st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot seek the update log", path);
done:
  free(b.buf);
  return st;
}

ng_status ng__srv_log_open(ng_srv_log *log, const char *path, ng_srv_snap **snap,
                           const ng_srv_fingerprint *fp, ng_srv_log_report *rep) {
  memset(log, 0, sizeof *log);
  memset(rep, 0, sizeof *rep);
  rep->cut_offset = -1;
  char *tmp = NULL;
  int tmp_fd = -1;
  ng_status st = log_open(log, path, snap, fp, rep, &tmp, &tmp_fd);
  if (tmp) { /* a migration that did not finish: the version-1 log stays as it was */
    close(tmp_fd);
    unlink(tmp);
    free(tmp);
  }
  if (st != NG_OK)
    ng__srv_log_close(log); /* the file and the path go; *snap holds what replayed */
  return st;
}

void ng__srv_log_close(ng_srv_log *log) {
  if (log->fd >= 0)
    close(log->fd);
  free(log->path);
  memset(log, 0, sizeof *log);
  log->fd = -1;
}
