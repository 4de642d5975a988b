/* SNAP edge lists: "src dst" lines separated by blanks, '#' comments, plain or gzip. Ids may
 * be sparse (any non-negative 64-bit integers): the first pass collects the ids and row lengths,
 * and when some id in [0, max id] is unused, nodes are renumbered densely in the order of their
 * original ids, which orig_id.npy records. Features, labels and splits are made up from the
 * seed when asked for. */
#include "convert_impl.h"

#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the id table: original id -> row length during pass 1, then -> node id ----
 *
 * Ids below `cap` live in a direct array (fast, one slot per possible id); ids at or above it
 * live in an open-addressing hash table (memory per distinct id). The direct part grows by
 * doubling while its size stays below DIRECT_FLOOR or twice the ids read so far, so its memory
 * is bounded by the input's size, yet a dense id space never touches the hash table once the
 * direct part has grown past it. Slot values: 0 = absent, else 1 + row length; after pass 1
 * they become node ids (direct part: node id; hash part: node id). */
enum { DIRECT_FLOOR = 1 << 20, HASH_MIN = 1 << 10 };

typedef struct {
  int64_t *direct; ///< [cap]
  int64_t cap;
  int64_t *keys; ///< [mask + 1], -1 = empty
  int64_t *vals;
  uint64_t mask;
  int64_t used;     ///< keys in the hash part
  int64_t distinct; ///< distinct ids in both parts
  int64_t max_id;
  int64_t seen; ///< ids read, bounds the direct part
} id_table;

static void ids_free(id_table *t) {
  free(t->direct);
  free(t->keys);
  free(t->vals);
  memset(t, 0, sizeof *t);
}

static inline uint64_t slot_of(const id_table *t, int64_t id) {
  uint64_t s = ng_mix64((uint64_t)id) & t->mask;
  while (t->keys[s] != id && t->keys[s] != -1)
    s = (s + 1) & t->mask;
  return s;
}

/* Resizes the hash part to `size` slots (a power of two), moving every key at or above the
 * direct part's current cap and handing keys below it to the direct part. */
static ng_status hash_rebuild(id_table *t, uint64_t size) {
  int64_t *keys = malloc(size * sizeof *keys), *vals = calloc(size, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return ng__err(NG_ERR_NOMEM, "out of memory for a table of %llu node ids",
                   (unsigned long long)size);
  }
  memset(keys, 0xff, size * sizeof *keys);
  int64_t *old_keys = t->keys, *old_vals = t->vals;
  uint64_t old_size = old_keys ? t->mask + 1 : 0;
  t->keys = keys;
  t->vals = vals;
  t->mask = size - 1;
  t->used = 0;
  for (uint64_t i = 0; i < old_size; i++) {
    int64_t k = old_keys[i];
    if (k < 0)
      continue;
    if (k < t->cap) {
      t->direct[k] = old_vals[i];
    } else {
      uint64_t s = slot_of(t, k);
      t->keys[s] = k;
      t->vals[s] = old_vals[i];
      t->used++;
    }
  }
  free(old_keys);
  free(old_vals);
  return NG_OK;
}

static ng_status direct_grow(id_table *t, int64_t id) {
  int64_t cap = t->cap ? t->cap : 1024;
  while (cap <= id)
    cap *= 2;
  int64_t *d = realloc(t->direct, (size_t)cap * sizeof *d);
  if (!d)
    return ng__err(NG_ERR_NOMEM, "out of memory for a table of %lld node ids", (long long)cap);
  memset(d + t->cap, 0, (size_t)(cap - t->cap) * sizeof *d);
  t->direct = d;
  t->cap = cap;
  /* Keys that now fall into the direct part leave the hash part. */
  return hash_rebuild(t, t->mask + 1);
}

/* An empty table: both parts allocated, so that neither is ever NULL. */
static ng_status ids_init(id_table *t) {
  memset(t, 0, sizeof *t);
  t->max_id = -1;
  NG_CHECK(hash_rebuild(t, HASH_MIN));
  return direct_grow(t, 0);
}

/* Records one occurrence of `id` adding `add` to its row length. */
static ng_status ids_add(id_table *t, int64_t id, int64_t add) {
  t->seen++;
  if (id > t->max_id)
    t->max_id = id;
  if (id >= t->cap && id < NG_MAX((int64_t)DIRECT_FLOOR, 2 * t->seen))
    NG_CHECK(direct_grow(t, id));
  int64_t *slot;
  if (id < t->cap) {
    slot = &t->direct[id];
  } else {
    if ((uint64_t)(t->used + 1) * 2 > t->mask + 1)
      NG_CHECK(hash_rebuild(t, 2 * (t->mask + 1)));
    uint64_t s = slot_of(t, id);
    if (t->keys[s] < 0) {
      t->keys[s] = id;
      t->vals[s] = 0;
      t->used++;
    }
    slot = &t->vals[s];
  }
  if (*slot == 0) {
    *slot = 1;
    t->distinct++;
  }
  *slot += add;
  return NG_OK;
}

static int64_t *ids_slot(id_table *t, int64_t id) {
  if (id < t->cap)
    return &t->direct[id];
  uint64_t s = slot_of(t, id);
  return t->keys[s] == id ? &t->vals[s] : NULL;
}

typedef struct {
  id_table *t;
  int64_t nodes;
} id_map_ctx;

/* Pass 2's lookup. An id pass 1 did not see (the file changed) gives -1 or, from an empty slot
 * of the direct part, node 0: either way a valid answer, and the digest of the edges read
 * reports the change after the pass. */
static int64_t map_id(void *ctx, int64_t id) {
  id_map_ctx *m = ctx;
  int64_t *slot = ids_slot(m->t, id);
  return slot && *slot >= 0 && *slot < m->nodes ? *slot : -1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* ---- made-up features, labels and splits: counter-based, so the same for any thread count */

enum { STREAM_FEATURES = 0x66656174, STREAM_LABELS = 0x6c61626c, STREAM_SPLITS = 0x73706c74 };
enum { FEATURE_BLOCK_ROWS = 1 << 14 };

static ng_status random_features(ng_conv *c, int64_t nodes) {
  int64_t dim = c->opts.feature_dim, shape[2] = {nodes, dim};
  ng_npy *npy;
  NG_CHECK(ng__writer_array(&npy, &c->w, NG_ARR_FEATURES, NG_DTYPE_F32, 2, shape));
  float *out = npy->data;
  uint64_t seed = c->opts.seed;
  for (int64_t lo = 0; lo < nodes; lo += FEATURE_BLOCK_ROWS) {
    int64_t hi = NG_MIN(lo + FEATURE_BLOCK_ROWS, nodes);
#pragma omp parallel for schedule(static)
    for (int64_t v = lo; v < hi; v++) {
      ng_rng r;
      ng_rng_seed(&r, ng_hash3(seed, STREAM_FEATURES, (uint64_t)v));
      for (int64_t j = 0; j < dim; j++)
        out[v * dim + j] = (float)ng_rng_normal(&r);
    }
    NG_CHECK(ng__progress(&c->progress, "features", (double)hi, (double)nodes, hi == nodes));
  }
  c->meta.info.feature_dim = dim;
  return NG_OK;
}

static ng_status random_labels_and_splits(ng_conv *c, int64_t nodes) {
  int32_t classes = c->opts.classes;
  uint64_t seed = c->opts.seed;
  ng_npy *npy;
  NG_CHECK(ng__writer_array(&npy, &c->w, NG_ARR_LABELS, NG_DTYPE_I32, 1, &nodes));
  int32_t *labels = npy->data;
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < nodes; v++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(seed, STREAM_LABELS, (uint64_t)v));
    labels[v] = (int32_t)ng_rng_below(&r, (uint64_t)classes);
  }
  c->meta.info.classes = classes;
  /* Split sizes are the rounded shares; rounding up all three may overshoot by a node or two,
   * taken back from test, then val. */
  const double frac[3] = {c->opts.train_frac, c->opts.val_frac, c->opts.test_frac};
  int64_t size[3], total = 0;
  for (int s = 0; s < 3; s++) {
    size[s] = (int64_t)(frac[s] * (double)nodes + 0.5);
    total += size[s];
  }
  for (int s = 2; s >= 0 && total > nodes; s--) {
    int64_t cut = NG_MIN(size[s], total - nodes);
    size[s] -= cut;
    total -= cut;
  }
  if (total == 0)
    return ng__progress(&c->progress, "labels", 1, 1, true);
  /* A partial Fisher-Yates shuffle picks `total` distinct nodes; the first size[0] train, the
   * next val, the rest test. Each split is then written in increasing id order. */
  int64_t *order = ng__malloc((size_t)nodes * sizeof *order, "split selection");
  uint8_t *member = ng__calloc((size_t)nodes, 1, "split membership");
  ng_status st = NG_OK;
  if (!order || !member) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int64_t v = 0; v < nodes; v++)
    order[v] = v;
  ng_rng r;
  ng_rng_seed(&r, ng_hash2(seed, STREAM_SPLITS));
  for (int64_t i = 0; i < total; i++) {
    int64_t j = i + (int64_t)ng_rng_below(&r, (uint64_t)(nodes - i)), t = order[i];
    order[i] = order[j];
    order[j] = t;
    member[order[i]] = (uint8_t)(i < size[0] ? 1 : i < size[0] + size[1] ? 2 : 3);
  }
  int64_t *info_size[3] = {&c->meta.info.train, &c->meta.info.val, &c->meta.info.test};
  for (int s = 0; s < 3; s++) {
    *info_size[s] = size[s];
    if (size[s] == 0)
      continue;
    NG_CHECK_GOTO(st, ng__writer_array(&npy, &c->w, NG_ARR_TRAIN + s, NG_DTYPE_I64, 1, &size[s]),
                  done);
    int64_t *ids = npy->data, k = 0;
    for (int64_t v = 0; v < nodes; v++)
      if (member[v] == s + 1)
        ids[k++] = v;
  }
  NG_CHECK_GOTO(st, ng__progress(&c->progress, "labels", 1, 1, true), done);
done:
  free(order);
  free(member);
  return st;
}

/* ---- the converter ---- */

/* Pass 1: ids and row lengths into the table; returns the digest of the edges read. */
static ng_status collect_ids(ng_conv *c, ng_lines *r, id_table *t, uint64_t *digest) {
  bool undirected = c->opts.undirected != 0;
  *digest = 0;
  for (;;) {
    int64_t u, v;
    bool got;
    NG_CHECK(ng__lines_next_edge(r, NG_SEP_BLANKS, &u, &v, &got));
    if (!got)
      break;
    if (u == v) { /* the node exists, the loop does not */
      NG_CHECK(ids_add(t, u, 0));
      c->removed_loops++;
      continue;
    }
    NG_CHECK(ids_add(t, u, undirected ? 1 : 0));
    NG_CHECK(ids_add(t, v, 1));
    *digest = ng__edge_digest(*digest, u, v);
  }
  if (t->distinct == 0)
    return ng__err(NG_ERR_FORMAT, "%s: no edge found; expected lines 'src dst'", r->path);
  return NG_OK;
}

ng_status ng__convert_snap(ng_conv *c) {
  ng_lines r;
  id_table t;
  memset(&t, 0, sizeof t);
  NG_CHECK(ng__lines_open(&r, c->src, &c->progress, "edges (pass 1 of 2)"));
  ng_status st;
  uint64_t digest;
  NG_CHECK_GOTO(st, ids_init(&t), done);
  NG_CHECK_GOTO(st, collect_ids(c, &r, &t, &digest), done);
  /* The largest id may be INT64_MAX, whose successor does not exist: never dense then. */
  bool dense = t.max_id < INT64_MAX && t.distinct == t.max_id + 1;
  int64_t nodes = dense ? t.max_id + 1 : t.distinct;
  ng_npy *ptr_npy;
  int64_t shape = nodes + 1;
  NG_CHECK_GOTO(st, ng__writer_array(&ptr_npy, &c->w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, &shape),
                done);
  int64_t *ptr = ptr_npy->data;
  id_map_ctx m = {.t = &t, .nodes = nodes};
  if (dense) {
    /* Every id in [0, max id] is used: ids are node ids already. */
    for (int64_t v = 0; v < nodes; v++)
      ptr[v] = *ids_slot(&t, v) - 1;
  } else {
    ng_npy *orig;
    NG_CHECK_GOTO(st, ng__writer_array(&orig, &c->w, NG_ARR_ORIG_ID, NG_DTYPE_I64, 1, &nodes),
                  done);
    c->meta.info.orig_ids = 1;
    int64_t *ids = orig->data, k = 0;
    for (int64_t id = 0; id < t.cap; id++)
      if (t.direct[id])
        ids[k++] = id;
    int64_t head = k;
    for (uint64_t s = 0; s <= t.mask; s++)
      if (t.keys[s] >= 0)
        ids[k++] = t.keys[s];
    qsort(ids + head, (size_t)(k - head), sizeof *ids, cmp_i64);
    for (int64_t v = 0; v < nodes; v++) {
      int64_t *slot = ids_slot(&t, ids[v]);
      ptr[v] = *slot - 1;
      *slot = v;
    }
    snprintf(c->detail, sizeof c->detail, "ids_renumbered=%s (%lld ids from %lld to %lld)",
             NG_ARRAY_FILE[NG_ARR_ORIG_ID], (long long)nodes, (long long)ids[0],
             (long long)ids[nodes - 1]);
  }
  ng__counts_to_offsets(ptr, nodes);
  NG_CHECK_GOTO(st,
                ng__conv_fill_edges(c, &r, NG_SEP_BLANKS, ptr, nodes, c->opts.undirected != 0,
                                    digest, dense ? NULL : map_id, &m),
                done);
  ids_free(&t);
  if (c->opts.features == NG_FEATURES_RANDOM)
    NG_CHECK_GOTO(st, random_features(c, nodes), done);
  if (c->opts.classes > 0)
    NG_CHECK_GOTO(st, random_labels_and_splits(c, nodes), done);
done:
  ids_free(&t);
  ng__lines_close(&r);
  return st;
}
