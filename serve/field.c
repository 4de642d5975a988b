/* Receptive fields of serving requests over a snapshot (base + delta), laid out as the sampler
 * lays out a mini-batch (cpu/sampler_impl.h), so that the model executor runs them unchanged.
 *
 * With every neighbour kept (fanout -1), a block lists each destination's row in row order and
 * fills GCN weights from the snapshot's row lengths with the sampler's function, numbering local
 * nodes with the sampler's table (core/idmap.h): the blocks are
 * those the trainer's full-neighbour evaluation builds with ng__sample, edge for edge, on an
 * unchanged graph. A sampled block draws k of n row positions with Floyd's algorithm from the
 * stream ng_hash3(seed, layer, node), where seed is the seed of the request whose target the node
 * was reached from: each target carries its own seed, and a node reached with two seeds is two
 * local nodes with their own draws, so a node's neighbours depend on neither the batch, nor the
 * order of its targets, nor the seeds of the other requests in the batch. */
#include "engine_impl.h"

#include "idmap.h"
#include "rng.h"
#include "sampler_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  void *ptr;
  size_t cap;
} buf;

struct ng_srv_field {
  buf ids;   /* int64 global id of each local node */
  buf sidx;  /* int32 index of each local node's sampling seed among the build's seeds */
  buf kid;   /* int64 table key of each local node (node_key): the table's id list */
  buf seeds; /* int64 the build's distinct seeds (uint64 bits), by index */
  buf draw;  /* int64 drawn row positions */
  buf deg;   /* double deg + 1 of each source */
  buf indptr[NG_MAX_LAYERS], indices[NG_MAX_LAYERS], edge_w[NG_MAX_LAYERS], self_w[NG_MAX_LAYERS];
  /* The sampler's table (core/idmap.h) from a local node's key to the node, restarted at each
   * build: emptied in O(1) and sized for the build's own field, so that its probes stay within
   * a working set of that size however large an earlier field made the allocation. */
  ng_idmap table;
  ng_idmap seed_table; /* a seed's bits -> its index among the build's seeds */
};

/* A local node is keyed by (node, seed): a sampled field holds a node once per seed it is
 * reached with. The table keys by one int64: the seed's index among the build's distinct seeds
 * above bit KEY_SEED_SHIFT and the node id below (a full-neighbourhood field's index is 0: its
 * keys are the ids); an input row shared by every seed is -1 - id, which no other key is. */
#define KEY_SEED_SHIFT 40
#define KEY_MAX_SEEDS ((int64_t)1 << (63 - KEY_SEED_SHIFT))

static int64_t node_key(int64_t u, int32_t seed_index) {
  return (int64_t)((uint64_t)seed_index << KEY_SEED_SHIFT) | u;
}

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
  free(f->sidx.ptr);
  free(f->kid.ptr);
  free(f->seeds.ptr);
  free(f->draw.ptr);
  free(f->deg.ptr);
  for (int l = 0; l < NG_MAX_LAYERS; l++) {
    free(f->indptr[l].ptr);
    free(f->indices[l].ptr);
    free(f->edge_w[l].ptr);
    free(f->self_w[l].ptr);
  }
  ng__idmap_free(&f->table);
  ng__idmap_free(&f->seed_table);
  free(f);
}

/* The local node of key `key`, appended as global node `id` with seed index `j` when new. The
 * table and ids[], sidx[], kid[] must have room for one more node. */
static int32_t table_add(ng_srv_field *f, ng_idmap_view t, int64_t key, int64_t id, int32_t j,
                         int32_t *n_cur) {
  const int32_t before = *n_cur;
  const int32_t local = ng__idmap_add(t, key, f->kid.ptr, n_cur);
  if (*n_cur != before) {
    ((int64_t *)f->ids.ptr)[local] = id;
    ((int32_t *)f->sidx.ptr)[local] = j;
  }
  return local;
}

/* The local source of neighbour `u` of a destination with seed index `j` in block `l`.
 * Above the input block, u is keyed by (u, seed): it draws its own neighbours with that seed in
 * the next block down, so the same node reached from requests of two seeds is two local nodes.
 * The input block's sources draw nothing: a new one is keyed by its id alone (the key -1 - u),
 * so requests of any seeds share its row, unless (u, seed) is already a destination.
 * Full-neighbourhood fields use seed index 0 for every node, hence keys by id alone. */
static int32_t source_of(ng_srv_field *f, ng_idmap_view t, int l, bool sampled, int64_t u,
                         int32_t j, int32_t *n_cur) {
  if (l > 0 || !sampled)
    return table_add(f, t, node_key(u, j), u, j, n_cur);
  const int32_t d = ng__idmap_find(t, node_key(u, j));
  return d >= 0 ? d : table_add(f, t, -1 - u, u, 0, n_cur);
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
  if (sampled && s->nodes > ((int64_t)1 << KEY_SEED_SHIFT))
    return ng__err(NG_ERR_INVALID_ARG,
                   "receptive field: sampled fields key nodes by id and seed in 64 bits, which "
                   "holds ids below 2^%d; the graph has %lld nodes (ask for full neighbourhoods)",
                   KEY_SEED_SHIFT, (long long)s->nodes);
  NG_CHECK(reserve(&f->ids, (size_t)n_targets * sizeof(int64_t), "receptive-field node ids"));
  NG_CHECK(reserve(&f->sidx, (size_t)n_targets * sizeof(int32_t), "receptive-field seeds"));
  NG_CHECK(reserve(&f->kid, (size_t)n_targets * sizeof(int64_t), "receptive-field keys"));
  NG_CHECK(reserve(&f->seeds, (size_t)n_targets * sizeof(int64_t), "receptive-field seeds"));
  /* The build's distinct seeds, numbered in order of first appearance (one in a full field). */
  ng__idmap_restart(&f->seed_table);
  NG_CHECK(ng__idmap_reserve(&f->seed_table, (size_t)n_targets, f->seeds.ptr, 0,
                             "the receptive field's seed table"));
  const ng_idmap_view seed_view = ng__idmap_view(&f->seed_table);
  int32_t n_seeds = 0;
  ng__idmap_restart(&f->table);
  NG_CHECK(ng__idmap_reserve(&f->table, (size_t)n_targets, f->kid.ptr, 0,
                             "the receptive field's node table"));
  ng_idmap_view tv = ng__idmap_view(&f->table);
  int32_t n_cur = 0;
  for (int32_t i = 0; i < n_targets; i++) {
    const int32_t before = n_cur;
    const uint64_t sd = sampled ? seeds[i] : 0;
    const int32_t j = ng__idmap_add(seed_view, (int64_t)sd, f->seeds.ptr, &n_seeds);
    if (j >= KEY_MAX_SEEDS)
      return ng__err(NG_ERR_INVALID_ARG,
                     "receptive field: more than %lld distinct seeds in one batch",
                     (long long)KEY_MAX_SEEDS);
    table_add(f, tv, node_key(targets[i], j), targets[i], j, &n_cur);
    if (n_cur == before)
      return ng__err(NG_ERR_INTERNAL, "receptive field: target %lld (seed %llu) repeats",
                     (long long)targets[i], (unsigned long long)sd);
  }
  const int64_t *seed_of = f->seeds.ptr;
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
    NG_CHECK(reserve(&f->sidx, ((size_t)n_cur + (size_t)nnz) * sizeof(int32_t),
                     "receptive-field seeds"));
    NG_CHECK(
        reserve(&f->kid, ((size_t)n_cur + (size_t)nnz) * sizeof(int64_t), "receptive-field keys"));
    /* Sampled fields may hold a node once per seed, so only the edges bound their new nodes. */
    NG_CHECK(ng__idmap_reserve(&f->table,
                               (size_t)n_cur + (size_t)(sampled ? nnz : NG_MIN(nnz, s->nodes)),
                               f->kid.ptr, n_cur, "the receptive field's node table"));
    tv = ng__idmap_view(&f->table);
    int32_t *indices = f->indices[l].ptr;
    for (int32_t d = 0; d < n_dst; d++) {
      const int64_t v = ((const int64_t *)f->ids.ptr)[d];
      const int32_t j = ((const int32_t *)f->sidx.ptr)[d];
      const uint64_t sd = sampled ? (uint64_t)seed_of[j] : 0;
      ng_srv_rowview rv;
      ng__srv_row(&rv, s, v);
      const int64_t k = kept(fanout[l], rv.n);
      int32_t *o = indices + indptr[d];
      if (k == rv.n) {
        for (int64_t i = 0; i < k; i++)
          o[i] = source_of(f, tv, l, sampled, ng__srv_rowview_at(&rv, i), j, &n_cur);
      } else {
        NG_CHECK(reserve(&f->draw, (size_t)k * sizeof(int64_t), "drawn row positions"));
        int64_t *pos = f->draw.ptr;
        draw(pos, k, rv.n, ng_hash3(sd, (uint64_t)l, (uint64_t)v));
        for (int64_t i = 0; i < k; i++)
          o[i] = source_of(f, tv, l, sampled, ng__srv_rowview_at(&rv, pos[i]), j, &n_cur);
      }
    }
    ng_block *b = &out->blocks[l];
    *b = (ng_block){
        .n_dst = n_dst, .n_src = n_cur, .nnz = nnz, .indptr = indptr, .indices = indices};
    if (gcn[l]) {
      /* The sampler's weights, from the snapshot's row lengths. */
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
      ng__gcn_weights(b, deg1, f->edge_w[l].ptr, f->self_w[l].ptr);
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
