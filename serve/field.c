/* Receptive fields of serving requests over a snapshot (base + delta), laid out as the sampler
 * lays out a mini-batch (cpu/sampler_impl.h), so that the model executor runs them unchanged.
 *
 * With every neighbour kept (fanout -1), a block lists each destination's row in row order and
 * fills GCN weights from the snapshot's row lengths with the sampler's formula: the blocks are
 * those the trainer's full-neighbour evaluation builds with ng__sample, edge for edge, on an
 * unchanged graph. A sampled block draws k of n row positions with Floyd's algorithm from the
 * stream ng_hash3(seed, layer, node), where seed is the seed of the request whose target the node
 * was reached from: each target carries its own seed, and a node reached with two seeds is two
 * local nodes with their own draws, so a node's neighbours depend on neither the batch, nor the
 * order of its targets, nor the seeds of the other requests in the batch. */
#include "engine_impl.h"

#include "rng.h"
#include "sampler_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *ptr;
  size_t cap;
} buf;

struct ng_srv_field {
  buf ids;  /* int64 global id of each local node */
  buf seed; /* uint64 sampling seed of each local node (sampled fields; 0 for shared rows) */
  buf kid;  /* int64 table key of each local node: its id, or -1 - id for a shared input row */
  buf draw; /* int64 drawn row positions */
  buf deg;  /* double deg + 1 of each source */
  buf indptr[NG_MAX_LAYERS], indices[NG_MAX_LAYERS], edge_w[NG_MAX_LAYERS], self_w[NG_MAX_LAYERS];
  /* The table from a key (global id, seed) to a local node. A slot is used by the current build
   * only when its stamp is the build's generation: a new build bumps the generation instead of
   * clearing the table, so starting a build costs nothing however large an earlier field made the
   * table. A build uses only the first `active` slots, sized for its own field, so that its
   * probes stay within a working set of its size however large the allocation grew. */
  int64_t *keys;
  uint64_t *kseed;
  int32_t *vals;
  uint32_t *stamp;
  uint32_t gen;  /* the current build's generation; stamps of other builds read as empty */
  size_t cap;    /* slots allocated */
  size_t active; /* slots the current build uses, a power of two <= cap */
};

static ng_status reserve(buf *b, size_t bytes, const char *what) {
  return ng__host_reserve(&b->ptr, &b->cap, NG_MAX(bytes, (size_t)64), what);
}

ng_status ng__srv_field_create(ng_srv_field **out) {
  *out = ng__calloc(1, sizeof **out, "a receptive-field builder");
  return *out ? NG_OK : NG_ERR_NOMEM;
}

void ng__srv_field_destroy(ng_srv_field *f) {
  if (!f)
    return;
  free(f->ids.ptr);
  free(f->seed.ptr);
  free(f->kid.ptr);
  free(f->draw.ptr);
  free(f->deg.ptr);
  for (int l = 0; l < NG_MAX_LAYERS; l++) {
    free(f->indptr[l].ptr);
    free(f->indices[l].ptr);
    free(f->edge_w[l].ptr);
    free(f->self_w[l].ptr);
  }
  free(f->keys);
  free(f->kseed);
  free(f->vals);
  free(f->stamp);
  free(f);
}

static size_t slot_of(int64_t key, uint64_t seed, size_t mask) {
  uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ULL ^ seed * 0xc2b2ae3d27d4eb4fULL;
  return (size_t)(h ^ (h >> 32)) & mask;
}

/* Empties the table: a new generation, so every slot of earlier builds reads as empty. The
 * stamps are cleared only when the generation counter wraps (once in 2^32 builds). */
static void table_clear(ng_srv_field *f) {
  if (++f->gen == 0) {
    memset(f->stamp, 0, f->cap * sizeof *f->stamp);
    f->gen = 1;
  }
}

static void table_put(ng_srv_field *f, int64_t key, uint64_t seed, int32_t val) {
  const size_t mask = f->active - 1;
  size_t h = slot_of(key, seed, mask);
  while (f->stamp[h] == f->gen)
    h = (h + 1) & mask;
  f->keys[h] = key;
  f->kseed[h] = seed;
  f->vals[h] = val;
  f->stamp[h] = f->gen;
}

/* Sizes the active table for `nodes` local nodes at load <= 1/2 and holds the first n_cur local
 * nodes in it. `fresh`: a new build, whose table starts empty at the smallest size that fits. */
static ng_status table_reserve(ng_srv_field *f, size_t nodes, int32_t n_cur, bool fresh) {
  size_t active = 1024;
  while (active < nodes * 2)
    active *= 2;
  if (!fresh && active <= f->active)
    return NG_OK;
  if (active > f->cap) {
    int64_t *keys = ng__malloc(active * sizeof *keys, "the receptive field's node table");
    uint64_t *kseed = ng__malloc(active * sizeof *kseed, "the receptive field's node table");
    int32_t *vals = ng__malloc(active * sizeof *vals, "the receptive field's node table");
    uint32_t *stamp = ng__calloc(active, sizeof *stamp, "the receptive field's node table");
    if (!keys || !kseed || !vals || !stamp) {
      free(keys);
      free(kseed);
      free(vals);
      free(stamp);
      return NG_ERR_NOMEM;
    }
    free(f->keys);
    free(f->kseed);
    free(f->vals);
    free(f->stamp);
    f->keys = keys;
    f->kseed = kseed;
    f->vals = vals;
    f->stamp = stamp;
    f->cap = active;
    f->gen = 0; /* the stamps are 0: the clear below makes generation 1 */
  }
  /* A new generation empties the table; when it grows within a build, the current nodes go back
   * in at the new size (their keys are kept per node). */
  table_clear(f);
  f->active = active;
  const int64_t *kid = f->kid.ptr;
  const uint64_t *seed = f->seed.ptr;
  for (int32_t i = 0; i < n_cur; i++)
    table_put(f, kid[i], seed[i], i);
  return NG_OK;
}

/* The local node of key (key, seed), or -1. */
static int32_t table_find(const ng_srv_field *f, int64_t key, uint64_t seed) {
  const size_t mask = f->active - 1;
  for (size_t h = slot_of(key, seed, mask);; h = (h + 1) & mask) {
    if (f->stamp[h] != f->gen)
      return -1;
    if (f->keys[h] == key && f->kseed[h] == seed)
      return f->vals[h];
  }
}

/* The local node of key (key, seed), appended as global node `id` with sampling seed `seed`
 * when new. The table and ids[], seed[] must have room for one more node. */
static int32_t table_add(ng_srv_field *f, int64_t key, uint64_t seed, int64_t id, int32_t *n_cur) {
  const size_t mask = f->active - 1;
  for (size_t h = slot_of(key, seed, mask);; h = (h + 1) & mask) {
    if (f->stamp[h] != f->gen) {
      f->keys[h] = key;
      f->kseed[h] = seed;
      f->vals[h] = *n_cur;
      f->stamp[h] = f->gen;
      ((int64_t *)f->ids.ptr)[*n_cur] = id;
      ((int64_t *)f->kid.ptr)[*n_cur] = key;
      ((uint64_t *)f->seed.ptr)[*n_cur] = seed;
      return (*n_cur)++;
    }
    if (f->keys[h] == key && f->kseed[h] == seed)
      return f->vals[h];
  }
}

/* The local source of neighbour `u` of a destination with sampling seed `seed` in block `l`.
 * Above the input block, u is keyed by (u, seed): it draws its own neighbours with that seed in
 * the next block down, so the same node reached from requests of two seeds is two local nodes.
 * The input block's sources draw nothing: a new one is keyed by its id alone (the key -1 - u, an
 * id no node has), so requests of any seeds share its row, unless (u, seed) is already a
 * destination. Full-neighbourhood fields use seed 0 for every node, hence keys by id alone. */
static int32_t source_of(ng_srv_field *f, int l, bool sampled, int64_t u, uint64_t seed,
                         int32_t *n_cur) {
  if (l > 0 || !sampled)
    return table_add(f, u, seed, u, n_cur);
  const int32_t d = table_find(f, u, seed);
  return d >= 0 ? d : table_add(f, -1 - u, 0, u, n_cur);
}

/* k of n positions (0 < k < n), sorted, into pos: the sampler's Floyd draw from `stream`. */
static void draw(int64_t *pos, int64_t k, int64_t n, uint64_t stream) {
  ng_rng r;
  ng_rng_seed(&r, stream);
  ng__floyd_sorted(pos, k, n, &r);
}

static int64_t kept(int32_t fanout, int64_t n) {
  return fanout < 0 || fanout >= n ? n : fanout;
}

ng_status ng__srv_field_build(ng_minibatch *out, ng_srv_field *f, const ng_srv_snap *s,
                              int n_layers, const int32_t *fanout, const bool *gcn,
                              const uint64_t *seeds, const int64_t *targets, int32_t n_targets) {
  memset(out, 0, sizeof *out);
  const bool sampled = seeds != NULL;
  NG_CHECK(reserve(&f->ids, (size_t)n_targets * sizeof(int64_t), "receptive-field node ids"));
  NG_CHECK(reserve(&f->seed, (size_t)n_targets * sizeof(uint64_t), "receptive-field seeds"));
  NG_CHECK(reserve(&f->kid, (size_t)n_targets * sizeof(int64_t), "receptive-field keys"));
  NG_CHECK(table_reserve(f, (size_t)n_targets, 0, true));
  int32_t n_cur = 0;
  for (int32_t i = 0; i < n_targets; i++) {
    const int32_t before = n_cur;
    const uint64_t sd = sampled ? seeds[i] : 0;
    table_add(f, targets[i], sd, targets[i], &n_cur);
    if (n_cur == before)
      return ng__err(NG_ERR_INTERNAL, "receptive field: target %lld (seed %llu) repeats",
                     (long long)targets[i], (unsigned long long)sd);
  }
  for (int l = n_layers - 1; l >= 0; l--) {
    const int32_t n_dst = n_cur;
    /* Row lengths first: the block's edge count bounds its new nodes. */
    NG_CHECK(reserve(&f->indptr[l], ((size_t)n_dst + 1) * sizeof(int32_t), "block indptr"));
    int32_t *indptr = f->indptr[l].ptr;
    int64_t nnz = 0;
    indptr[0] = 0;
    for (int32_t d = 0; d < n_dst; d++) {
      ng_srv_rowview rv;
      ng__srv_row(&rv, s, ((const int64_t *)f->ids.ptr)[d]);
      nnz += kept(fanout[l], rv.n);
      if (nnz > INT32_MAX)
        return ng__err(NG_ERR_INVALID_ARG,
                       "the receptive field's block %d would hold more than 2^31 - 1 edges; ask "
                       "for fewer nodes or sample with fanouts",
                       l);
      indptr[d + 1] = (int32_t)nnz;
    }
    if ((int64_t)n_cur + nnz > INT32_MAX)
      return ng__err(NG_ERR_INVALID_ARG, "the receptive field is too large (block %d)", l);
    NG_CHECK(reserve(&f->indices[l], (size_t)nnz * sizeof(int32_t), "block indices"));
    NG_CHECK(reserve(&f->ids, ((size_t)n_cur + (size_t)nnz) * sizeof(int64_t),
                     "receptive-field node ids"));
    NG_CHECK(reserve(&f->seed, ((size_t)n_cur + (size_t)nnz) * sizeof(uint64_t),
                     "receptive-field seeds"));
    NG_CHECK(
        reserve(&f->kid, ((size_t)n_cur + (size_t)nnz) * sizeof(int64_t), "receptive-field keys"));
    /* Sampled fields may hold a node once per seed, so only the edges bound their new nodes. */
    NG_CHECK(table_reserve(f, (size_t)n_cur + (size_t)(sampled ? nnz : NG_MIN(nnz, s->nodes)),
                           n_cur, false));
    int32_t *indices = f->indices[l].ptr;
    for (int32_t d = 0; d < n_dst; d++) {
      const int64_t v = ((const int64_t *)f->ids.ptr)[d];
      const uint64_t sd = ((const uint64_t *)f->seed.ptr)[d];
      ng_srv_rowview rv;
      ng__srv_row(&rv, s, v);
      const int64_t k = kept(fanout[l], rv.n);
      int32_t *o = indices + indptr[d];
      if (k == rv.n) {
        for (int64_t i = 0; i < k; i++)
          o[i] = source_of(f, l, sampled, ng__srv_rowview_at(&rv, i), sd, &n_cur);
      } else {
        NG_CHECK(reserve(&f->draw, (size_t)k * sizeof(int64_t), "drawn row positions"));
        int64_t *pos = f->draw.ptr;
        draw(pos, k, rv.n, ng_hash3(sd, (uint64_t)l, (uint64_t)v));
        for (int64_t i = 0; i < k; i++)
          o[i] = source_of(f, l, sampled, ng__srv_rowview_at(&rv, pos[i]), sd, &n_cur);
      }
    }
    ng_block *b = &out->blocks[l];
    *b = (ng_block){
        .n_dst = n_dst, .n_src = n_cur, .nnz = nnz, .indptr = indptr, .indices = indices};
    if (gcn[l]) {
      /* The sampler's formula (cpu/sampler.c, fill_gcn), with the snapshot's row lengths. */
      NG_CHECK(reserve(&f->edge_w[l], (size_t)nnz * sizeof(float), "GCN edge weights"));
      NG_CHECK(reserve(&f->self_w[l], (size_t)n_dst * sizeof(float), "GCN self weights"));
      NG_CHECK(reserve(&f->deg, (size_t)n_cur * sizeof(double), "source degrees"));
      double *deg1 = f->deg.ptr;
      const int64_t *ids = f->ids.ptr;
      for (int32_t i = 0; i < n_cur; i++) {
        ng_srv_rowview rv;
        ng__srv_row(&rv, s, ids[i]);
        deg1[i] = (double)rv.n + 1.0;
      }
      float *ew = f->edge_w[l].ptr, *sw = f->self_w[l].ptr;
      for (int32_t d = 0; d < n_dst; d++) {
        sw[d] = (float)(1.0 / deg1[d]);
        for (int32_t e = indptr[d]; e < indptr[d + 1]; e++)
          ew[e] = (float)(1.0 / sqrt(deg1[d] * deg1[indices[e]]));
      }
      b->edge_w = ew;
      b->self_w = sw;
    }
  }
  out->n_layers = n_layers;
  out->node_ids = f->ids.ptr;
  out->n_targets = n_targets;
  return NG_OK;
}

int64_t ng__srv_field_estimate(const ng_srv_snap *s, int n_layers, const int32_t *fanout,
                               const int64_t *targets, int64_t n_targets, int64_t limit) {
  /* Depth-first over the unrolled tree, with an explicit stack of (node, layer). */
  enum { STACK = 4096 };
  struct {
    int64_t v;
    int l;
  } stack[STACK];
  int64_t edges = 0;
  for (int64_t t = 0; t < n_targets; t++) {
    int top = 0;
    stack[top].v = targets[t];
    stack[top].l = n_layers - 1;
    top++;
    while (top > 0) {
      top--;
      const int64_t v = stack[top].v;
      const int l = stack[top].l;
      ng_srv_rowview rv;
      ng__srv_row(&rv, s, v);
      const int64_t k = kept(fanout[l], rv.n);
      edges += k;
      if (edges > limit)
        return edges;
      if (l == 0)
        continue;
      /* Sampled rows are estimated by their first k neighbours: the count, not which. */
      for (int64_t i = 0; i < k && top < STACK; i++) {
        stack[top].v = ng__srv_rowview_at(&rv, i);
        stack[top].l = l - 1;
        top++;
      }
    }
  }
  return edges;
}
