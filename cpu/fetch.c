/* The host work of a tiered iteration: split the input layer by tier and fetch the cold part
 * by one of the three strategies (see fetch_impl.h). */
#include "fetch_impl.h"

#include "rng.h"

#include <stdlib.h>
#include <string.h>

/* Rows copied or reduced per OpenMP task: big enough to amortise the scheduling. */
#define FETCH_CHUNK_ROWS 64

void ng__fetch_scratch_free(ng_fetch_scratch *s) {
  free(s->stage_pos);
  free(s->stage_ids);
  free(s->hot_pos);
  free(s->overlaid);
  free(s->rows);
  memset(s, 0, sizeof *s);
}

/* A bump allocator over the package: run with base NULL to size it, then again to carve it. */
typedef struct {
  char *base;
  size_t used;
} layout;

static void *take(layout *l, size_t bytes) {
  size_t at = (l->used + 63) & ~(size_t)63; /* rows start on cache lines (and float4) */
  l->used = at + bytes;
  return l->base && bytes ? l->base + at : NULL;
}

typedef struct ng_fetch_counts counts;

/* The arrays of blocks 1.. and the labels, after the input layer's. */
static void carve_rest(ng_fetch_pkg *p, layout *l, const ng_minibatch *mb, bool labels) {
  const size_t i32 = sizeof(int32_t);
  p->mb.n_layers = mb->n_layers;
  p->mb.n_targets = mb->n_targets;
  p->mb.node_ids = NULL;
  p->mb.blocks[0] = (ng_block){
      .n_dst = mb->blocks[0].n_dst, .n_src = mb->blocks[0].n_src, .nnz = mb->blocks[0].nnz};
  for (int k = 1; k < mb->n_layers; k++) {
    const ng_block *h = &mb->blocks[k];
    ng_block *b = &p->mb.blocks[k];
    const size_t nd = (size_t)h->n_dst, ns = (size_t)h->n_src, nnz = (size_t)h->nnz;
    *b = (ng_block){.n_dst = h->n_dst, .n_src = h->n_src, .nnz = h->nnz};
    b->indptr = take(l, (nd + 1) * i32);
    b->indices = take(l, nnz * i32);
    b->edge_w = h->edge_w ? take(l, nnz * i32) : NULL;
    b->self_w = h->self_w ? take(l, nd * i32) : NULL;
    b->t_indptr = h->t_indptr ? take(l, (ns + 1) * i32) : NULL;
    b->t_dst = h->t_dst ? take(l, nnz * i32) : NULL;
    b->t_eid = h->t_eid ? take(l, nnz * i32) : NULL;
  }
  p->labels = labels ? take(l, (size_t)mb->n_targets * i32) : NULL;
}

/* Copies blocks 1.. and the targets' labels into the carved package. */
static void fill_rest(ng_fetch_pkg *p, const ng_minibatch *mb, const int32_t *labels) {
  for (int k = 1; k < mb->n_layers; k++) {
    const ng_block *h = &mb->blocks[k];
    const ng_block *b = &p->mb.blocks[k];
    const size_t nd = (size_t)h->n_dst, ns = (size_t)h->n_src, nnz = (size_t)h->nnz;
    struct {
      const void *dst, *src;
      size_t bytes;
    } a[] = {
        {b->indptr, h->indptr, (nd + 1) * 4},
        {b->indices, h->indices, nnz * 4},
        {b->edge_w, h->edge_w, nnz * 4},
        {b->self_w, h->self_w, nd * 4},
        {b->t_indptr, h->t_indptr, (ns + 1) * 4},
        {b->t_dst, h->t_dst, nnz * 4},
        {b->t_eid, h->t_eid, nnz * 4},
    };
    for (size_t i = 0; i < NG_ARRAY_LEN(a); i++)
      if (a[i].dst && a[i].bytes)
        memcpy((void *)a[i].dst, a[i].src, a[i].bytes);
  }
  int32_t *lab = (int32_t *)p->labels;
  for (int32_t i = 0; lab && i < mb->n_targets; i++)
    lab[i] = labels[mb->node_ids[i]];
}

/* Whether the package holds PARTIAL's states of the host's destinations: only when the host
 * reduces some cold edge. With none (every row hot, or a mini-batch that drew no cold
 * neighbour) the device merges nothing, and a state a destination would be written, copied and
 * never read: on W4 with every row hot, 47.5 of a package's 53.3 MB. */
static bool host_states(const ng_fetch_cfg *cfg, const counts *c) {
  return cfg->mode == NG_FETCH_PARTIAL && c->host_nnz > 0;
}

/* Whether the device reads the staged rows from host memory itself (the package holds their
 * ids only). */
static bool device_reads(const ng_fetch_cfg *cfg) {
  return cfg->mode == NG_FETCH_ZCOPY || (cfg->mode == NG_FETCH_PARTIAL && cfg->self_zcopy);
}

static void carve(ng_fetch_pkg *p, layout *l, const ng_fetch_cfg *cfg, int32_t nd,
                  const counts *c) {
  const size_t i32 = sizeof(int32_t), f32 = sizeof(float), i64 = sizeof(int64_t);
  const bool w = cfg->ag.weighted;
  p->hot.indptr = take(l, ((size_t)nd + 1) * i32);
  p->hot.indices = take(l, (size_t)c->hot_nnz * i32);
  p->hot.edge_w = w ? take(l, (size_t)c->hot_nnz * f32) : NULL;
  p->cold.indptr = take(l, ((size_t)nd + 1) * i32);
  p->cold.indices = take(l, (size_t)c->cold_nnz * i32);
  p->cold.edge_w = w ? take(l, (size_t)c->cold_nnz * f32) : NULL;
  const bool device_part = cfg->mode == NG_FETCH_PARTIAL && c->n_host_dst < nd;
  p->device_cold.indptr = device_part ? take(l, ((size_t)(nd - c->n_host_dst) + 1) * i32) : NULL;
  p->self_w = cfg->ag.self_loop ? take(l, (size_t)nd * f32) : NULL;
  p->self_hot_pos = take(l, (size_t)c->n_self_hot * i32);
  p->self_hot_ids = take(l, (size_t)c->n_self_hot * i64);
  p->hot_ids = cfg->hot_gather ? take(l, (size_t)c->n_hot_rows * i64) : NULL;
  p->self_cold_pos = take(l, (size_t)c->n_self_cold * i32);
  p->self_cold_ids = take(l, (size_t)c->n_self_cold * i64);
  p->staged16 = NULL;
  if (device_reads(cfg)) {
    p->staged = NULL;
    p->staged_ids = take(l, (size_t)c->n_staged * i64);
  } else if (c->staged_bf16) {
    p->staged = NULL;
    p->staged16 = take(l, (size_t)c->n_staged * (size_t)cfg->dim * sizeof(uint16_t));
    p->staged_ids = NULL;
  } else {
    p->staged = take(l, (size_t)c->n_staged * (size_t)cfg->dim * f32);
    p->staged_ids = NULL;
  }
  if (host_states(cfg, c)) {
    /* A user aggregator's state holds state_size floats a feature (its merge law's state). */
    p->cold_state.val = take(l, (size_t)c->n_host_dst * (size_t)cfg->dim *
                                    (size_t)ng__aggr_state_size(&cfg->ag) * f32);
    p->cold_state.count = take(l, (size_t)c->n_host_dst * i32);
  } else {
    p->cold_state.val = NULL;
    p->cold_state.count = NULL;
  }
}

/* Node v's row: the overlay's when it holds one, else the table's (fp32, and bf16). */
static inline const float *row_of(const ng_fetch_cfg *cfg, int64_t v) {
  const float *r = cfg->overlay.row ? cfg->overlay.row(cfg->overlay.ctx, v) : NULL;
  return r ? r : cfg->features + v * cfg->dim;
}
static inline const uint16_t *row16_of(const ng_fetch_cfg *cfg, int64_t v) {
  const uint16_t *r = cfg->overlay.row16 ? cfg->overlay.row16(cfg->overlay.ctx, v) : NULL;
  return r ? r : cfg->features_bf16 + v * cfg->dim;
}
static inline bool has_overlay(const ng_fetch_cfg *cfg) {
  return cfg->overlay.row || cfg->overlay.row16;
}

/* PARTIAL: reduces the cold edges of the host's destinations into the package's state, from the
 * table (`src` NULL: the edges hold global ids) or from the cold rows gathered through an
 * overlay (the edges hold their positions). The same kernels either way, hence the same bits
 * for the same row values. */
static void reduce_cold(ng_fetch_pkg *p, const ng_fetch_cfg *cfg, const void *src, float drop_p,
                        uint64_t drop_key) {
  ng_aggr bare = cfg->ag;
  bare.mean = false; /* MEAN divides and the self loop is added after the merge */
  bare.self_loop = false;
  bare.drop_p = drop_p;
  bare.drop_key = drop_key;
  const int32_t nd = p->n_host_dst;
  const int64_t chunks = ((int64_t)nd + FETCH_CHUNK_ROWS - 1) / FETCH_CHUNK_ROWS;
  const int threads = cfg->threads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const int32_t d0 = (int32_t)(c * FETCH_CHUNK_ROWS);
    const int32_t d1 = (int32_t)NG_MIN((int64_t)nd, (c + 1) * FETCH_CHUNK_ROWS);
    if (cfg->features_bf16)
      ng__cpu_aggr_partial_rows_bf16(&bare, &p->cold, src ? src : cfg->features_bf16, cfg->dim, d0,
                                     d1, &p->cold_state);
    else
      ng__cpu_aggr_partial_rows(cfg->kernels, &bare, &p->cold, src ? src : cfg->features, cfg->dim,
                                d0, d1, &p->cold_state, cfg->stream_rows);
  }
}

/* PARTIAL over overlaid rows: the rows of the cold local nodes, each read through the overlay,
 * gathered into scratch->rows at their stage_pos, the table reduce_cold then reads. */
static ng_status gather_cold(const ng_fetch_cfg *cfg, const ng_minibatch *mb, const counts *c,
                             ng_fetch_scratch *scratch) {
  const int64_t dim = cfg->dim;
  const bool b16 = cfg->features_bf16 != NULL; /* bf16 rows, gathered as they are */
  const size_t row_b = (size_t)dim * (b16 ? sizeof(uint16_t) : sizeof(float));
  NG_CHECK(ng__host_reserve((void **)&scratch->rows, &scratch->rows_cap,
                            NG_MAX((size_t)c->cold_nodes * row_b, (size_t)1),
                            "the cold rows read through the overlay"));
  const int32_t ns = mb->blocks[0].n_src;
  const int32_t *pos = scratch->stage_pos;
  char *rows = (char *)scratch->rows;
  const int threads = cfg->threads;
#pragma omp parallel for schedule(static)                                                          \
    num_threads(threads) if (threads > 1 && ns > FETCH_CHUNK_ROWS)
  for (int32_t s = 0; s < ns; s++)
    if (pos[s] >= 0)
      memcpy(rows + (size_t)pos[s] * row_b,
             b16 ? (const void *)row16_of(cfg, mb->node_ids[s])
                 : (const void *)row_of(cfg, mb->node_ids[s]),
             row_b);
  return NG_OK;
}

/* Copies rows ids[0..n) of the table into staged rows 0..n: with streaming stores when they go
 * to a DMA engine, or through the input dropout. A bf16 table stages bf16 rows as they are
 * (staged16) without dropout, else converted fp32 rows. `overlay`: some row of the package is
 * the overlay's, so each is read through it. */
static void stage(float *staged, uint16_t *staged16, const ng_fetch_cfg *cfg, const int64_t *ids,
                  int64_t n, float drop_p, uint64_t drop_key, bool overlay) {
  const int64_t dim = cfg->dim;
  const int64_t chunks = (n + FETCH_CHUNK_ROWS - 1) / FETCH_CHUNK_ROWS;
  const int threads = cfg->threads;
  const uint16_t *t16 = cfg->features_bf16;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && chunks > 1)
  for (int64_t k = 0; k < chunks; k++) {
    const int64_t i0 = k * FETCH_CHUNK_ROWS, i1 = NG_MIN(n, i0 + FETCH_CHUNK_ROWS);
    if (t16 && staged16 && overlay) {
      for (int64_t i = i0; i < i1; i++)
        memcpy(staged16 + i * dim, row16_of(cfg, ids[i]), (size_t)dim * sizeof(uint16_t));
    } else if (t16 && staged16) {
      ng__cpu_gather_rows_bf16(staged16 + i0 * dim, t16, ids + i0, i1 - i0, dim);
    } else if (t16) {
      for (int64_t i = i0; i < i1; i++)
        ng__cpu_drop_row_bf16(staged + i * dim,
                              overlay ? row16_of(cfg, ids[i]) : t16 + ids[i] * dim, ids[i], dim,
                              drop_p, drop_key);
    } else if (overlay) { /* no dropout with an overlay (ng__fetch_plan refuses it) */
      for (int64_t i = i0; i < i1; i++)
        memcpy(staged + i * dim, row_of(cfg, ids[i]), (size_t)dim * sizeof(float));
    } else if (drop_p == 0.0f) {
      (cfg->stream_rows ? cfg->kernels->stage_rows : cfg->kernels->gather_rows)(
          staged + i0 * dim, cfg->features, ids + i0, i1 - i0, dim);
    } else {
      for (int64_t i = i0; i < i1; i++)
        ng_drop_row(staged + i * dim, cfg->features + ids[i] * dim, ids[i], dim, drop_p, drop_key);
    }
  }
}

/* Refuses a configuration the package cannot be laid out for. */
static ng_status check_cfg(const ng_fetch_cfg *cfg) {
  if ((unsigned)cfg->mode > NG_FETCH_ZCOPY)
    return ng__err(NG_ERR_INVALID_ARG, "unknown fetch strategy %d", (int)cfg->mode);
  /* The runtime checks the user's share (ng__pipeline_create); this is the layout's own need. */
  if (cfg->device_share > 0.0 && !(cfg->mode == NG_FETCH_PARTIAL && cfg->self_zcopy))
    return ng__err(NG_ERR_INVALID_ARG,
                   "a device share (%g) needs the partial strategy with the device reading the "
                   "table by zero-copy (self_zcopy)",
                   cfg->device_share);
  if ((cfg->overlay.row && cfg->features_bf16) || (cfg->overlay.row16 && !cfg->features_bf16))
    return ng__err(NG_ERR_INVALID_ARG,
                   "a row overlay of %s rows over a package that reads a%s table",
                   cfg->overlay.row ? "fp32" : "bf16", cfg->features_bf16 ? " bf16" : "n fp32");
  return NG_OK;
}

/* Whether the cold rows are staged one per unique cold local node (BATCH here, ZCOPY on the
 * device) rather than reduced by the host (PARTIAL). */
static bool stages_nodes(const ng_fetch_cfg *cfg) {
  return cfg->mode != NG_FETCH_PARTIAL;
}

/* Whether local node s's row is read from the hot tier: its id is below H and, with an overlay
 * (`ovl`, a flag per local node), the overlay does not replace it. The bodies below that test it
 * are inlined with a constant `with_ovl`, so that the plain table's loops (training's, and a
 * serving batch that reads no overlaid row) compile to the id test alone. */
#define NG_FETCH_INLINE static inline __attribute__((always_inline))

NG_FETCH_INLINE bool hot_node(const int64_t *gid, const uint8_t *ovl, int64_t H, int32_t s,
                              bool with_ovl) {
  return gid[s] < H && !(with_ovl && ovl[s]);
}

/* The flags of the local nodes the overlay replaces, in scratch->overlaid, and how many; 0
 * without an overlay (nothing is looked up). */
static ng_status mark_overlaid(int64_t *n, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                               ng_fetch_scratch *scratch) {
  *n = 0;
  if (!has_overlay(cfg))
    return NG_OK;
  const int32_t ns = mb->blocks[0].n_src;
  NG_CHECK(ng__host_reserve((void **)&scratch->overlaid, &scratch->overlaid_cap,
                            (size_t)NG_MAX(ns, 1), "the fetch scratch"));
  int64_t k = 0;
  for (int32_t s = 0; s < ns; s++) {
    const bool o = cfg->overlay.row ? cfg->overlay.row(cfg->overlay.ctx, mb->node_ids[s]) != NULL
                                    : cfg->overlay.row16(cfg->overlay.ctx, mb->node_ids[s]) != NULL;
    scratch->overlaid[s] = o;
    k += o;
  }
  *n = k;
  return NG_OK;
}

/* Pass 1: how many edges, self rows and staged rows each tier gets, which the layout needs
 * before anything is written. PARTIAL: the host reduces the cold edges of the first
 * destinations, the device those of the last device_share of them, from rows staged one per
 * edge after the self rows. */
NG_FETCH_INLINE ng_status count_in(counts *c, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                                   ng_fetch_scratch *scratch, const uint8_t *ovl, bool with_ovl) {
  const ng_block *b = &mb->blocks[0];
  const int64_t *gid = mb->node_ids;
  const int64_t H = cfg->hot;
  const int32_t nd = b->n_dst, ns = b->n_src;
  const bool staging = stages_nodes(cfg);
  /* A local copy, which the compiler can keep in registers over the loops. */
  counts n;
  memset(&n, 0, sizeof n);
  n.n_host_dst = staging ? 0 : nd - (int32_t)(cfg->device_share * (double)nd);
  const int32_t host_end = b->indptr[n.n_host_dst]; /* the host's destinations' edges */
  for (int64_t e = 0; e < b->nnz; e++) {
    const bool hot = hot_node(gid, ovl, H, b->indices[e], with_ovl);
    n.hot_nnz += hot;
    n.host_nnz += !hot && e < host_end;
  }
  n.cold_nnz = b->nnz - n.hot_nnz;
  for (int32_t d = 0; d < nd; d++)
    n.n_self_hot += hot_node(gid, ovl, H, d, with_ovl);
  n.n_self_cold = nd - n.n_self_hot;
  /* Staged modes stage every cold local node once (each non-destination source is some edge's
   * source and each destination needs its self row); PARTIAL over overlaid rows gathers them
   * the same way into the table its reduction reads. */
  const bool positions = staging || with_ovl;
  if (positions)
    NG_CHECK(ng__host_reserve((void **)&scratch->stage_pos, &scratch->cap,
                              (size_t)ns * sizeof(int32_t), "the fetch scratch"));
  for (int32_t s = 0; s < ns; s++) {
    const bool cold = !hot_node(gid, ovl, H, s, with_ovl);
    if (positions)
      scratch->stage_pos[s] = cold ? (int32_t)n.cold_nodes : -1;
    n.cold_nodes += cold;
  }
  n.n_staged = staging ? n.cold_nodes : n.n_self_cold + (n.cold_nnz - n.host_nnz);
  if (cfg->hot_gather) {
    /* Every hot local node is gathered once, as the cold ones are staged once. */
    NG_CHECK(ng__host_reserve((void **)&scratch->hot_pos, &scratch->hot_cap,
                              (size_t)ns * sizeof(int32_t), "the fetch scratch"));
    for (int32_t s = 0; s < ns; s++)
      scratch->hot_pos[s] = hot_node(gid, ovl, H, s, with_ovl) ? (int32_t)n.n_hot_rows++ : -1;
  }
  *c = n;
  return NG_OK;
}

static ng_status count_tiers(counts *c, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                             ng_fetch_scratch *scratch) {
  int64_t overlaid = 0;
  NG_CHECK(mark_overlaid(&overlaid, cfg, mb, scratch));
  if (overlaid > 0)
    NG_CHECK(count_in(c, cfg, mb, scratch, scratch->overlaid, true));
  else
    NG_CHECK(count_in(c, cfg, mb, scratch, NULL, false));
  c->overlaid = overlaid;
  return NG_OK;
}

/* The overlay flags the passes after the count test: NULL when no local node is overlaid. */
static const uint8_t *overlaid_of(const counts *c, const ng_fetch_scratch *scratch) {
  return c->overlaid > 0 ? scratch->overlaid : NULL;
}

/* The bytes the package of counts `c` takes (the memory lay_out carves); `out` is
 * scratch. */
static size_t package_bytes(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                            const counts *c) {
  layout l = {NULL, 0};
  carve(out, &l, cfg, mb->blocks[0].n_dst, c);
  carve_rest(out, &l, mb, cfg->labels != NULL);
  return NG_MAX(l.used, (size_t)1);
}

/* Carves the package's memory at `base` (package_bytes long) into its arrays and copies in
 * what passes through unchanged (blocks 1.. and the labels). */
static void lay_out(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                    const counts *c, void *base) {
  const int32_t nd = mb->blocks[0].n_dst;
  layout l = (layout){base, 0};
  carve(out, &l, cfg, nd, c);
  carve_rest(out, &l, mb, cfg->labels != NULL);
  fill_rest(out, mb, cfg->labels);
  out->base = base;
  out->bytes = l.used;
  out->mode = cfg->mode;
  out->n_dst = nd;
  out->dim = cfg->dim;
  out->n_self_hot = c->n_self_hot;
  out->n_self_cold = c->n_self_cold;
  out->n_staged = c->n_staged;
  out->n_hot_rows = cfg->hot_gather ? c->n_hot_rows : 0;
  out->n_host_dst = c->n_host_dst;
}

/* Pass 2: writes the input block's edges into the hot and the cold sub-block, in edge order
 * within each destination. The host's PARTIAL edges address the table by global id, or over
 * overlaid rows the gathered cold rows by position. */
NG_FETCH_INLINE void split_in(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                              const counts *c, const ng_fetch_scratch *scratch, const uint8_t *ovl,
                              bool with_ovl) {
  const ng_block *b = &mb->blocks[0];
  const int64_t *gid = mb->node_ids;
  const int64_t H = cfg->hot;
  const int32_t nd = b->n_dst;
  const bool staging = stages_nodes(cfg);
  int32_t *hp = (int32_t *)out->hot.indptr, *hi = (int32_t *)out->hot.indices;
  int32_t *cp = (int32_t *)out->cold.indptr, *ci = (int32_t *)out->cold.indices;
  float *hw = (float *)out->hot.edge_w, *cw = (float *)out->cold.edge_w;
  /* PARTIAL: the rows of the device's edges, after the self rows' ids; the edges' indices
   * count from 0 (the device gathers them into rows of their own). */
  int64_t *dev_ids = out->staged_ids ? (int64_t *)out->staged_ids + c->n_self_cold : NULL;
  const int32_t n_host_dst = c->n_host_dst;
  const int32_t *hot_pos = cfg->hot_gather ? scratch->hot_pos : NULL;
  int32_t nh = 0, nc = 0, nz = 0;
  hp[0] = cp[0] = 0;
  for (int32_t d = 0; d < nd; d++) {
    const bool host = d < n_host_dst;
    for (int32_t e = b->indptr[d]; e < b->indptr[d + 1]; e++) {
      const int32_t s = b->indices[e];
      const int64_t g = gid[s];
      if (hot_node(gid, ovl, H, s, with_ovl)) {
        if (hw)
          hw[nh] = b->edge_w[e];
        hi[nh++] = hot_pos ? hot_pos[s] : (int32_t)g;
      } else {
        if (cw)
          cw[nc] = b->edge_w[e];
        if (staging) {
          ci[nc++] = scratch->stage_pos[s];
        } else if (host) {
          ci[nc++] = with_ovl ? scratch->stage_pos[s] : (int32_t)g;
        } else {
          dev_ids[nz] = g;
          ci[nc++] = nz++;
        }
      }
    }
    hp[d + 1] = nh;
    cp[d + 1] = nc;
  }
}

static void split_edges(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                        const counts *c, const ng_fetch_scratch *scratch) {
  const uint8_t *ovl = overlaid_of(c, scratch);
  if (ovl)
    split_in(out, cfg, mb, c, scratch, ovl, true);
  else
    split_in(out, cfg, mb, c, scratch, NULL, false);
}

/* Completes the two sub-blocks split_edges wrote (their counts, the self-loop weights) and
 * derives the device's sub-block from the cold one: all of it when the cold rows are staged,
 * else the last destinations' edges (their indices are staged rows already) with an indptr
 * from 0. */
static void finish_blocks(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                          const counts *c) {
  const ng_block *b = &mb->blocks[0];
  const int64_t H = cfg->hot;
  const int32_t nd = b->n_dst;
  const bool staging = stages_nodes(cfg);
  int32_t *cp = (int32_t *)out->cold.indptr, *ci = (int32_t *)out->cold.indices;
  float *cw = (float *)out->cold.edge_w;
  out->hot.n_dst = out->cold.n_dst = nd;
  out->hot.nnz = c->hot_nnz;
  out->cold.nnz = c->cold_nnz;
  out->hot.n_src = (int32_t)NG_MAX((int64_t)nd, cfg->hot_gather ? c->n_hot_rows : H);
  out->cold.n_src =
      (int32_t)NG_MAX((int64_t)nd, staging ? c->n_staged : NG_MAX(c->n_staged, cfg->nodes));
  if (out->self_w)
    memcpy((float *)out->self_w, b->self_w, (size_t)nd * sizeof(float));
  if (staging) {
    out->device_cold = out->cold;
  } else {
    const int32_t m = c->n_host_dst, dn = nd - m;
    int32_t *dp = (int32_t *)out->device_cold.indptr;
    for (int32_t j = 0; dp && j <= dn; j++)
      dp[j] = cp[m + j] - (int32_t)c->host_nnz;
    out->device_cold = (ng_block){
        .n_dst = dn,
        .n_src = (int32_t)NG_MAX((int64_t)dn, c->cold_nnz - c->host_nnz),
        .nnz = c->cold_nnz - c->host_nnz,
        .indptr = dp,
        .indices = ci ? ci + c->host_nnz : NULL,
        .edge_w = cw ? cw + c->host_nnz : NULL,
    };
  }
}

/* Splits the self rows (the destinations' own features) by tier: a hot one reads the hot
 * cache at its global id, a cold one the staged rows. */
static void split_self(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                       const counts *c, const ng_fetch_scratch *scratch) {
  const uint8_t *ovl = overlaid_of(c, scratch);
  const int64_t *gid = mb->node_ids;
  const int64_t H = cfg->hot;
  const int32_t nd = mb->blocks[0].n_dst;
  const bool staging = stages_nodes(cfg);
  int32_t *shp = (int32_t *)out->self_hot_pos, *scp = (int32_t *)out->self_cold_pos;
  int64_t *shi = (int64_t *)out->self_hot_ids, *sci = (int64_t *)out->self_cold_ids;
  int32_t a = 0, z = 0;
  for (int32_t d = 0; d < nd; d++) {
    const int64_t g = gid[d];
    if (hot_node(gid, ovl, H, d, ovl != NULL)) {
      shp[a] = d;
      shi[a++] = cfg->hot_gather ? scratch->hot_pos[d] : g;
    } else {
      scp[z] = d;
      sci[z] = staging ? scratch->stage_pos[d] : z;
      z++;
    }
  }
}

/* Writes the global ids of the rows the host stages, in staging order, into the package when
 * the device reads the rows itself, else into the scratch (the host reads them next); `*ids`
 * is where they went. BATCH: staged row stage_pos[s] is the row of cold local node s (ZCOPY
 * hands these ids to the device, which gathers the rows). PARTIAL: the cold self rows,
 * gid[self_cold_pos[i]]. */
static ng_status list_staged(int64_t **ids, const ng_fetch_pkg *out, const ng_fetch_cfg *cfg,
                             const ng_minibatch *mb, const counts *c, ng_fetch_scratch *scratch) {
  const int64_t *gid = mb->node_ids;
  const int32_t ns = mb->blocks[0].n_src;
  int64_t *dst = (int64_t *)out->staged_ids;
  if (!device_reads(cfg)) {
    NG_CHECK(ng__host_reserve((void **)&scratch->stage_ids, &scratch->ids_cap,
                              (size_t)c->n_staged * sizeof(int64_t), "the fetch scratch"));
    dst = scratch->stage_ids;
  }
  if (stages_nodes(cfg)) {
    for (int32_t s = 0; s < ns; s++)
      if (scratch->stage_pos[s] >= 0)
        dst[scratch->stage_pos[s]] = gid[s];
  } else {
    /* split_self wrote one cold self row per destination not in the hot tier: n_self_cold. */
    const int32_t *scp = out->self_cold_pos;
    for (int32_t i = 0; i < c->n_self_cold; i++)
      dst[i] = gid[scp[i]];
  }
  *ids = dst;
  return NG_OK;
}

/* The package's counters: the rows each tier serves and the cold bytes the host and the device
 * read. */
static void count_stats(ng_fetch_pkg *out, const ng_fetch_cfg *cfg, int32_t nd, const counts *c) {
  out->stats.hot_rows = c->hot_nnz + c->n_self_hot;
  out->stats.cold_rows = c->cold_nnz + c->n_self_cold;
  out->stats.cold_edges = c->cold_nnz;
  out->stats.destinations = nd;
  /* BATCH reads each unique cold row once; PARTIAL every cold edge's row, and the cold self
   * rows, except those it leaves to the device; ZCOPY leaves the reading (of each unique cold
   * row once) to the device. */
  const int64_t row_bytes =
      cfg->dim * (int64_t)(cfg->features_bf16 ? sizeof(uint16_t) : sizeof(float));
  const int64_t device_rows = device_reads(cfg) ? c->n_staged : 0;
  out->stats.cpu_cold_bytes = cfg->mode == NG_FETCH_BATCH ? c->n_staged * row_bytes
                              : cfg->mode == NG_FETCH_PARTIAL
                                  ? (c->cold_nnz + c->n_self_cold - device_rows) * row_bytes
                                  : 0;
  out->stats.zcopy_bytes = device_rows * row_bytes;
}

ng_status ng__fetch_plan(ng_fetch_plan *plan, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                         float drop_p, ng_fetch_scratch *scratch) {
  memset(plan, 0, sizeof *plan);
  NG_CHECK(check_cfg(cfg));
  if (has_overlay(cfg) && drop_p != 0.0f)
    return ng__err(NG_ERR_INVALID_ARG,
                   "input dropout (%g) over a row overlay: dropout is keyed by the rows the "
                   "package reads, which an overlay's gathered rows renumber; serve without it",
                   (double)drop_p);
  counts c;
  NG_CHECK(count_tiers(&c, cfg, mb, scratch));
  /* Staged rows travel as bf16 from a bf16 table unless input dropout applies (it drops them
   * in fp32). */
  c.staged_bf16 = cfg->features_bf16 != NULL && drop_p == 0.0f;
  ng_fetch_pkg sizing;
  memset(&sizing, 0, sizeof sizing);
  plan->c = c;
  plan->drop_p = drop_p;
  plan->bytes = package_bytes(&sizing, cfg, mb, &c);
  return NG_OK;
}

ng_status ng__fetch_fill(ng_fetch_pkg *out, const ng_fetch_plan *plan, const ng_fetch_cfg *cfg,
                         const ng_minibatch *mb, uint64_t drop_key, ng_fetch_scratch *scratch,
                         void *base) {
  memset(out, 0, sizeof *out);
  const counts c = plan->c;
  const float drop_p = plan->drop_p;
  if (c.overlaid > 0 && device_reads(cfg))
    return ng__err(NG_ERR_INVALID_ARG,
                   "fetch: %lld rows of the mini-batch are the overlay's, which the device "
                   "cannot read from the host table; plan it with the rows staged (batch)",
                   (long long)c.overlaid);
  lay_out(out, cfg, mb, &c, base);
  split_edges(out, cfg, mb, &c, scratch);
  finish_blocks(out, cfg, mb, &c);
  split_self(out, cfg, mb, &c, scratch);
  if (cfg->hot_gather) {
    int64_t *hid = (int64_t *)out->hot_ids;
    for (int32_t s = 0; s < mb->blocks[0].n_src; s++)
      if (scratch->hot_pos[s] >= 0)
        hid[scratch->hot_pos[s]] = mb->node_ids[s];
  }
  int64_t *ids = NULL;
  NG_CHECK(list_staged(&ids, out, cfg, mb, &c, scratch));

  /* The host reads of the cold tier: the staged rows (BATCH's cold sources, PARTIAL's cold self
   * rows) and PARTIAL's reduction. */
  if (!device_reads(cfg))
    stage((float *)out->staged, (uint16_t *)out->staged16, cfg, ids, c.n_staged, drop_p, drop_key,
          c.overlaid > 0);
  const bool states = host_states(cfg, &c);
  out->cold_state.n_dst = states ? c.n_host_dst : 0;
  out->cold_state.dim = cfg->dim;
  if (states && c.overlaid > 0)
    NG_CHECK(gather_cold(cfg, mb, &c, scratch));
  if (states)
    reduce_cold(out, cfg, c.overlaid > 0 ? scratch->rows : NULL, drop_p, drop_key);
  count_stats(out, cfg, mb->blocks[0].n_dst, &c);
  return NG_OK;
}

static const void *rebase(const void *p, const void *host_base, void *dev_base) {
  return p ? (const char *)dev_base + ((const char *)p - (const char *)host_base) : NULL;
}

void ng__fetch_rebase(ng_fetch_pkg *dev, const ng_fetch_pkg *host, void *dev_base) {
  const void *hb = host->base;
  *dev = *host;
  dev->base = dev_base;
#define REBASE(field) dev->field = rebase(host->field, hb, dev_base)
  REBASE(hot.indptr);
  REBASE(hot.indices);
  REBASE(hot.edge_w);
  REBASE(cold.indptr);
  REBASE(cold.indices);
  REBASE(cold.edge_w);
  REBASE(device_cold.indptr);
  REBASE(device_cold.indices);
  REBASE(device_cold.edge_w);
  REBASE(self_w);
  REBASE(self_hot_pos);
  REBASE(self_cold_pos);
  REBASE(self_hot_ids);
  REBASE(self_cold_ids);
  REBASE(hot_ids);
  REBASE(staged);
  REBASE(staged16);
  REBASE(staged_ids);
  dev->cold_state.val = (float *)rebase(host->cold_state.val, hb, dev_base);
  dev->cold_state.count = (int32_t *)rebase(host->cold_state.count, hb, dev_base);
  REBASE(labels);
  for (int k = 1; k < host->mb.n_layers; k++) {
    REBASE(mb.blocks[k].indptr);
    REBASE(mb.blocks[k].indices);
    REBASE(mb.blocks[k].edge_w);
    REBASE(mb.blocks[k].self_w);
    REBASE(mb.blocks[k].t_indptr);
    REBASE(mb.blocks[k].t_dst);
    REBASE(mb.blocks[k].t_eid);
  }
#undef REBASE
}
