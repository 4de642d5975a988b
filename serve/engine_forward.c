/* One batch of the serving engine: the targets' receptive field, the tiered input layer (hot
 * rows in device memory, cold rows by the mode's strategy, or aggregated near the data by CPU
 * threads), the model's forward and the answers. docs/serving-engine.md describes the design. */
#include "engine_state_impl.h"

#include "ng_cpu.h"
#include "pipeline_impl.h"
#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one device batch ---- */

/* Packs host arrays into one buffer copied to the device in one transfer (a host-memory backend
 * reads them where they are). */
typedef struct {
  const void *src;
  size_t bytes;
  const void **dst;
} pack_item;

/* The raw-input layout of `mb` in `dmb` (ng__model_raw_input): an identity block over the
 * first block's sources, its edges `indptr`, then mb's blocks one place further on. */
static void raw_input_mb(ng_minibatch *dmb, const ng_minibatch *mb, const int32_t *indptr) {
  memset(dmb, 0, sizeof *dmb);
  dmb->n_layers = mb->n_layers + 1;
  dmb->node_ids = mb->node_ids;
  dmb->n_targets = mb->n_targets;
  const int32_t ns = mb->blocks[0].n_src;
  dmb->blocks[0] = (ng_block){.n_dst = ns, .n_src = ns, .indptr = indptr};
  for (int l = 0; l < mb->n_layers; l++)
    dmb->blocks[l + 1] = mb->blocks[l];
}

/* Adds blocks 1.. of `mb` (their indptr, indices, edge and self weights) to the items at n, to
 * land in dmb's blocks `shift` further on (the raw-input layouts put an identity block first).
 * Returns the new count. */
static int pack_upper_blocks(pack_item *items, int n, const ng_minibatch *mb, ng_minibatch *dmb,
                             int shift) {
  for (int l = 1; l < mb->n_layers; l++) {
    const ng_block *b = &mb->blocks[l];
    ng_block *db = &dmb->blocks[l + shift];
    items[n++] = (pack_item){b->indptr, ((size_t)b->n_dst + 1) * 4, (const void **)&db->indptr};
    items[n++] = (pack_item){b->indices, (size_t)b->nnz * 4, (const void **)&db->indices};
    items[n++] =
        (pack_item){b->edge_w, b->edge_w ? (size_t)b->nnz * 4 : 0, (const void **)&db->edge_w};
    items[n++] =
        (pack_item){b->self_w, b->self_w ? (size_t)b->n_dst * 4 : 0, (const void **)&db->self_w};
  }
  return n;
}

static ng_status upload(lane *ln, pack_item *items, int n, int slot) {
  if (ln->be->iface->host_memory) {
    for (int i = 0; i < n; i++)
      *items[i].dst = items[i].src;
    return NG_OK;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += (items[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  total = NG_MAX(total, (size_t)ALIGN);
  growbuf *host = &ln->pack[slot], *dev = &ln->dev_pack[slot];
  NG_CHECK(ng__host_reserve(&host->ptr, &host->cap, total, "the batch's staging buffer"));
  NG_CHECK(ng__bk_reserve(ln->be, &dev->ptr, &dev->cap, total));
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    if (items[i].bytes)
      memcpy((char *)host->ptr + at, items[i].src, items[i].bytes);
    *items[i].dst = items[i].src ? (char *)dev->ptr + at : NULL;
    at += (items[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  }
  return ln->be->iface->copy_h2d(ln->be, dev->ptr, host->ptr, NG_MAX(at, (size_t)ALIGN));
}

/* Carves `bytes` from a bump pointer (NULL base: sizing). */
static void *carve(char *base, size_t *at, size_t bytes) {
  void *p = base ? base + *at : NULL;
  *at += (bytes + ALIGN - 1) / ALIGN * ALIGN;
  return p;
}

/* FETCH_AUTO (HYBRID's ordinary batches): PARTIAL when the batch has enough cold edges and
 * aggregating them near the data at least halves what crosses PCIe, else ZCOPY (see forward). */
typedef enum { FETCH_TRANSFER, FETCH_ZCOPY, FETCH_PARTIAL, FETCH_AUTO } fetch_kind;

/* FETCH_AUTO's rule: partial aggregation when the cold edges are at least this many and at
 * least twice the destinations (a state per destination then replaces two rows or more). Below
 * it, handing the batch to the CPU threads costs more than the device's zero-copy reads. The
 * serving benchmark on W4 (eval/results/2026-11-25-h100-serve.md) chose it. */
#define AUTO_PARTIAL_MIN_EDGES 256

/* Node v's row in snapshot `ctx` when the delta replaced or added it, else NULL: the overlay
 * through which cpu/fetch.c reads the snapshot's rows over the base table. */
static const float *snap_overlay_row(const void *ctx, int64_t v) {
  bool overlay = false;
  const float *row = ng__srv_feature(ctx, v, &overlay);
  return overlay ? row : NULL;
}

/* cpu/fetch.c's scratch in the lane's host buffers, which engine.c frees with the lane: lent to
 * a package's plan and again to its fill, and taken back (scratch_return) after each. The hot
 * rows' positions (split_raw's list of hot rows) borrow the second upload's staging buffer,
 * which no batch uses before its package is filled. */
static ng_fetch_scratch scratch_lend(lane *ln) {
  return (ng_fetch_scratch){.stage_pos = ln->host_i32.ptr,
                            .cap = ln->host_i32.cap,
                            .stage_ids = ln->host_i64.ptr,
                            .ids_cap = ln->host_i64.cap,
                            .overlaid = ln->host_f.ptr,
                            .overlaid_cap = ln->host_f.cap,
                            .rows = ln->stage.ptr,
                            .rows_cap = ln->stage.cap,
                            .hot_pos = ln->pack[1].ptr,
                            .hot_cap = ln->pack[1].cap};
}

static void scratch_return(lane *ln, const ng_fetch_scratch *sc) {
  ln->host_i32 = (growbuf){sc->stage_pos, sc->cap};
  ln->host_i64 = (growbuf){sc->stage_ids, sc->ids_cap};
  ln->host_f = (growbuf){sc->overlaid, sc->overlaid_cap};
  ln->stage = (growbuf){sc->rows, sc->rows_cap};
  ln->pack[1] = (growbuf){sc->hot_pos, sc->hot_cap};
}

/* The engine's store as lane `ln` computes an input layer with it (sched/feature_store.c): the
 * engine's tables (the hot tier, the zero-copy view of the base table), read through the lane's
 * backend into the lane's device memory (ln->work; ln->dev_pack[1] for the rows the device reads
 * from host memory), so that lanes share nothing they write. store_return takes the
 * memory back. */
static ng_store store_lend(lane *ln) {
  ng_store st = ln->e->store;
  st.be = ln->be;
  st.cache_owned = NULL; /* the engine's: never freed or written through this copy */
  st.registered = NULL;
  st.hot_rows = NULL;
  st.hot_rows_cap = 0;
  memset(st.part_opened, 0, sizeof st.part_opened);
  st.prof = NULL;
  st.work = ln->work.ptr;
  st.work_cap = ln->work.cap;
  memset(st.pre, 0, sizeof st.pre);
  st.pre[NG_STORE_SLOTS].buf = ln->dev_pack[1].ptr;
  st.pre[NG_STORE_SLOTS].cap = ln->dev_pack[1].cap;
  return st;
}

static void store_return(lane *ln, const ng_store *st) {
  ln->work = (growbuf){st->work, st->work_cap};
  ln->dev_pack[1] = (growbuf){st->pre[NG_STORE_SLOTS].buf, st->pre[NG_STORE_SLOTS].cap};
}

/* Plans the package of `mb` with strategy cfg->mode. */
static ng_status plan_package(ng_fetch_plan *plan, lane *ln, const ng_fetch_cfg *cfg,
                              const ng_minibatch *mb) {
  ng_fetch_scratch sc = scratch_lend(ln);
  const ng_status st = ng__fetch_plan(plan, cfg, mb, 0.0f, &sc);
  scratch_return(ln, &sc);
  return st;
}

/* The forward pass of one receptive field `mb` on snapshot `s` with cold rows fetched by `how`:
 * afterwards ex->ws[l].out holds layer l's output, its first n_targets rows the targets'. The
 * input layer is training's: cpu/fetch.c splits it by tier and does the host's part (staging,
 * or PARTIAL's reduction near the data) reading the snapshot's rows through its overlay, and
 * sched/feature_store.c computes it on the device in training's order (hot partial, cold
 * partial, merge, finalize, self loop), so that the same rows give the trainer's bits in every
 * strategy. */
static ng_status forward(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb, fetch_kind how,
                         batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const int32_t nd = mb->blocks[0].n_dst;
  ng_fetch_cfg cfg = {
      .mode = NG_FETCH_PARTIAL,
      .hot = e->hot,
      .features = s->base_x,
      .nodes = s->nodes,
      .dim = s->dim,
      /* A snapshot without replaced or added rows reads the base table alone. */
      .overlay = {.row = s->feats.n > 0 ? snap_overlay_row : NULL, .ctx = s},
      .ag = *ng__model_input_aggr(&e->model),
      .threads = e->workers,
      .kernels = ng__cpu_kernels(ng__cpu_isa_best()),
  };
  ng_fetch_plan plan;
  bool planned = false;
  if (how == FETCH_AUTO) {
    NG_CHECK(plan_package(&plan, ln, &cfg, mb));
    const int64_t nc = plan.c.cold_nnz;
    how = nc >= AUTO_PARTIAL_MIN_EDGES && nc >= 2 * (int64_t)nd ? FETCH_PARTIAL : FETCH_ZCOPY;
    planned = how == FETCH_PARTIAL;
  }
  /* ZCOPY needs the device's view of the base table; otherwise, and for a batch that reads rows
   * of the delta (which the device cannot read from host memory), the host stages the rows. */
  cfg.mode = how == FETCH_PARTIAL                               ? NG_FETCH_PARTIAL
             : how == FETCH_ZCOPY && ng__store_zcopy(&e->store) ? NG_FETCH_ZCOPY
                                                                : NG_FETCH_BATCH;
  if (!planned)
    NG_CHECK(plan_package(&plan, ln, &cfg, mb));
  if (cfg.mode == NG_FETCH_ZCOPY && plan.c.overlaid > 0) {
    cfg.mode = NG_FETCH_BATCH;
    NG_CHECK(plan_package(&plan, ln, &cfg, mb));
  }
  rows->hot_rows = mb->blocks[0].n_src - plan.c.cold_nodes;
  rows->cold_rows = plan.c.cold_nodes;

  /* The package in the lane's staging memory, aligned as a staging slot is, then on the device
   * in one copy (a host-memory backend reads it where it is). */
  NG_CHECK(ng__host_reserve(&ln->pack[0].ptr, &ln->pack[0].cap, plan.bytes + ALIGN,
                            "the batch's input package"));
  void *base = (void *)(((uintptr_t)ln->pack[0].ptr + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
  ng_fetch_pkg pkg, dev;
  ng_fetch_scratch sc = scratch_lend(ln);
  const ng_status filled = ng__fetch_fill(&pkg, &plan, &cfg, mb, 0, &sc, base);
  scratch_return(ln, &sc);
  NG_CHECK(filled);
  if (B->host_memory) {
    dev = pkg;
  } else {
    NG_CHECK(ng__bk_reserve(be, &ln->dev_pack[0].ptr, &ln->dev_pack[0].cap, pkg.bytes));
    NG_CHECK(B->copy_h2d(be, ln->dev_pack[0].ptr, base, pkg.bytes));
    ng__fetch_rebase(&dev, &pkg, ln->dev_pack[0].ptr);
  }
  const float *agg = NULL, *self = NULL;
  ng_store st = store_lend(ln);
  const ng_status in =
      ng__store_input(&st, ng__model_input_aggr(&e->model), &dev, 0.0f, 0, -1, &agg, &self);
  store_return(ln, &st);
  NG_CHECK(in);
  return ng__exec_forward(&ln->ex, &dev.mb, agg, self, false, 0);
}

/* ---- GAT: the input layer's attention in online-softmax parts ---- */

/* z [n, kf] = rows[r] W for r < n (W [in, kf] row-major on the host), by `threads` threads over
 * rows. A row sums its products in the order of its input columns, skipping zero inputs (they add
 * nothing: an accumulator that starts at +0 never becomes -0, so the bits are the same; bag-of-
 * words features are mostly zeros), so its bits do not depend on the thread count. */
static void host_project(const float *const *rows, int64_t n, int64_t in, const float *W,
                         int64_t kf, float *z, int threads) {
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < n; r++) {
    float *o = z + r * kf;
    const float *h = rows[r];
    for (int64_t c = 0; c < kf; c++)
      o[c] = 0.0f;
    for (int64_t k = 0; k < in; k++) {
      const float x = h[k];
      if (x == 0.0f)
        continue;
      const float *w = W + k * kf;
      for (int64_t c = 0; c < kf; c++)
        o[c] = o[c] + x * w[c];
    }
  }
}

/* The input block of a GAT or SAGE-pool field split by tier, by cpu/fetch.c as it splits
 * training's (BATCH, the hot rows listed, the snapshot's rows read through its overlay): the hot
 * local nodes' ids (pkg->hot_ids, which the device gathers from its tier) and the hot sub-block
 * over their positions; the staged rows, each cold local node's row once, and the cold
 * sub-block over them; the self rows by tier (a hot one by its position among the hot rows).
 * Training has no split of these layers (its raw-input models read raw rows, as
 * forward_raw_input does): only the split is shared, what the CPU does with the cold rows is
 * serving's (docs/serving-engine.md). The package lives in the lane's output buffer, which the
 * batch fills only after its forward; the lane's index buffers are free again afterwards. */
static ng_status split_raw(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                           ng_fetch_pkg *pkg, batch_rows *rows) {
  ng_engine *e = ln->e;
  const ng_fetch_cfg cfg = {
      .mode = NG_FETCH_BATCH,
      .hot = e->hot,
      .features = s->base_x,
      .nodes = s->nodes,
      .dim = s->dim,
      .overlay = {.row = s->feats.n > 0 ? snap_overlay_row : NULL, .ctx = s},
      .ag = {.reduce = NG_REDUCE_SUM}, /* the split alone: these layers read no edge weights */
      .threads = e->workers,
      .kernels = ng__cpu_kernels(ng__cpu_isa_best()),
      .hot_gather = true,
  };
  ng_fetch_plan plan;
  NG_CHECK(plan_package(&plan, ln, &cfg, mb));
  NG_CHECK(ng__host_reserve(&ln->out_host.ptr, &ln->out_host.cap, plan.bytes + ALIGN,
                            "the batch's input package"));
  void *base = (void *)(((uintptr_t)ln->out_host.ptr + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
  ng_fetch_scratch sc = scratch_lend(ln);
  const ng_status st = ng__fetch_fill(pkg, &plan, &cfg, mb, 0, &sc, base);
  scratch_return(ln, &sc);
  rows->hot_rows = mb->blocks[0].n_src - plan.c.cold_nodes;
  rows->cold_rows = plan.c.cold_nodes;
  return st;
}

/* The forward pass of a GAT model (docs/serving-engine.md, "GAT"): the input layer's sources are
 * split by tier (split_raw). The device gathers the hot rows from its tier and projects them
 * (z = h W); the CPU workers project, with the host copy of the fixed weights, every
 * destination's row and each cold source's row once, and reduce each destination's cold edges
 * into an online-softmax state (attn_state's order, cpu/attn.c). Only the destinations'
 * projections and those states cross to the device, which computes the hot part's state (self
 * slot and hot edges), merges the two (attn_merge), adds the bias and the activation and runs
 * the upper layers as usual. */
static ng_status forward_gat(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                             batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const ng_layer *L0 = &e->model.layers[0];
  const ng_attn *at = &e->at0;
  const int32_t nd = mb->blocks[0].n_dst;
  const int64_t dim = s->dim, kf = L0->cols, cols = ng_attn_state_cols(at);
  ng_fetch_pkg pkg;
  NG_CHECK(split_raw(ln, s, mb, &pkg, rows));
  const int32_t n_hot = (int32_t)pkg.n_hot_rows;
  const int64_t n_st = pkg.n_staged, nh = pkg.hot.nnz, nc = pkg.cold.nnz;

  /* The rows the CPU projects: the destinations' (a hot one is the base table's row, which the
   * hot tier holds; a cold one is staged), then the staged rows that are not destinations. The
   * cold edges index them through zrow (a staged row's projected row). */
  NG_CHECK(ng__host_reserve(&ln->host_i32.ptr, &ln->host_i32.cap,
                            ((size_t)n_st + (size_t)nc + 1) * sizeof(int32_t),
                            "the batch's index arrays"));
  NG_CHECK(ng__host_reserve(&ln->host_i64.ptr, &ln->host_i64.cap,
                            ((size_t)nd + (size_t)n_st + 1) * sizeof(const float *),
                            "the rows the CPU projects"));
  int32_t *zrow = ln->host_i32.ptr, *c_idx = zrow + n_st;
  const float **row_ptr = ln->host_i64.ptr;
  for (int32_t i = 0; i < pkg.n_self_hot; i++) {
    const int32_t d = pkg.self_hot_pos[i];
    row_ptr[d] = s->base_x + mb->node_ids[d] * dim;
  }
  for (int64_t r = 0; r < n_st; r++)
    zrow[r] = -1;
  for (int32_t i = 0; i < pkg.n_self_cold; i++) {
    const int32_t d = pkg.self_cold_pos[i];
    row_ptr[d] = pkg.staged + pkg.self_cold_ids[i] * dim;
    zrow[pkg.self_cold_ids[i]] = d;
  }
  int32_t n_z = nd;
  for (int64_t r = 0; r < n_st; r++)
    if (zrow[r] < 0) {
      row_ptr[n_z] = pkg.staged + r * dim;
      zrow[r] = n_z++;
    }
  for (int64_t k = 0; k < nc; k++)
    c_idx[k] = zrow[pkg.cold.indices[k]];

  /* The model's layout (ng__model_raw_input): an identity block, then the field's blocks. The
   * workspace gives layer 0's output rows and its z, which holds the hot rows' projections. */
  ng_minibatch dmb;
  raw_input_mb(&dmb, mb, mb->blocks[0].indptr);
  NG_CHECK(ng__exec_prepare_upper(&ln->ex, &dmb));
  float *z_hot = ln->ex.ws[0].z, *out0 = ln->ex.ws[0].out;

  const size_t hot_x_b = (size_t)n_hot * (size_t)dim * sizeof(float);
  const size_t state_b = (size_t)nd * (size_t)cols * sizeof(float);
  size_t wbytes = 0;
  carve(NULL, &wbytes, hot_x_b);
  carve(NULL, &wbytes, state_b);
  NG_CHECK(ng__bk_reserve(be, &ln->work.ptr, &ln->work.cap, NG_MAX(wbytes, (size_t)ALIGN)));
  size_t at_w = 0;
  float *hot_x = carve(ln->work.ptr, &at_w, hot_x_b);
  float *h_state = carve(ln->work.ptr, &at_w, state_b);

  /* First copy: the hot sub-block, the hot ids and the upper blocks; the device then gathers
   * and projects the hot rows while the CPU works on its part. */
  ng_block hb = {.n_dst = nd, .n_src = NG_MAX(n_hot, nd), .nnz = nh};
  const int64_t *hot_ids_dev = NULL;
  const float *z_dst_dev = NULL, *c_state_dev = NULL;
  pack_item items[8 + 4 * NG_MAX_LAYERS];
  int ni = 0;
#define ITEM(ptr, bytes, dstp) items[ni++] = (pack_item){(ptr), (bytes), (const void **)(dstp)}
  ITEM(pkg.hot.indptr, ((size_t)nd + 1) * 4, &hb.indptr);
  ITEM(nh ? pkg.hot.indices : NULL, (size_t)nh * 4, &hb.indices);
  ITEM(n_hot ? pkg.hot_ids : NULL, (size_t)n_hot * 8, &hot_ids_dev);
  ni = pack_upper_blocks(items, ni, mb, &dmb, 1);
  NG_CHECK(upload(ln, items, ni, 0));
  const float *P = ln->ex.params;
  if (n_hot > 0) {
    NG_CHECK(B->scatter_rows(be, hot_x, NULL, e->store.cache, hot_ids_dev, n_hot, dim, 0.0f, 0));
    NG_CHECK(B->gemm(be, false, false, n_hot, kf, dim, 1.0f, hot_x, dim, P + L0->off_w, kf, 0.0f,
                     z_hot, kf));
  }

  /* The CPU's part: each row it needs projected once, then the cold edges' states. */
  const size_t z_floats = (size_t)n_z * (size_t)kf, st_floats = (size_t)nd * (size_t)cols;
  NG_CHECK(ng__host_reserve(&ln->gat_z.ptr, &ln->gat_z.cap,
                            (z_floats + st_floats) * sizeof(float) + ALIGN,
                            "the projected rows of the CPU's part"));
  float *z_host = ln->gat_z.ptr, *c_state = z_host + z_floats;
  const float *hp = e->host_params;
  host_project(row_ptr, n_z, dim, hp + L0->off_w, kf, z_host, e->workers);
  const ng_block cb = {.n_dst = nd,
                       .n_src = NG_MAX(n_z, nd),
                       .nnz = nc,
                       .indptr = pkg.cold.indptr,
                       .indices = c_idx};
  const int threads = e->workers;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) if (threads > 1)
  for (int32_t d = 0; d < nd; d++)
    ng__attn_state_rows(at, &cb, z_host, z_host, hp + L0->off_att_src, hp + L0->off_att_dst, false,
                        c_state, d, d + 1);

  /* Second copy: the destinations' projections and the cold states. */
  ni = 0;
  ITEM(z_host, (size_t)nd * (size_t)kf * sizeof(float), &z_dst_dev);
  ITEM(c_state, state_b, &c_state_dev);
#undef ITEM
  NG_CHECK(upload(ln, items, ni, 1));
  NG_CHECK(B->attn_state(be, at, &hb, z_hot, z_dst_dev, P + L0->off_att_src, P + L0->off_att_dst,
                         true, h_state));
  NG_CHECK(B->attn_merge(be, at, nd, h_state, c_state_dev, out0));
  NG_CHECK(B->bias_act_fwd(be, out0, L0->off_b >= 0 ? P + L0->off_b : NULL, nd, L0->out_dim,
                           L0->o.activation));
  return ng__exec_forward_upper(&ln->ex, &dmb);
}

/* ---- SAGE-pool: the input layer's pooled max in partial states ---- */

/* The forward pass of a SAGE-pool model with the input layer split by tier (PARTIAL,
 * split_raw): the device gathers its hot rows, pools them (pre = ReLU(h W_pool + b_pool)) and
 * reduces each destination's hot edges into a max state; the CPU workers pool each cold row
 * once with the host copy of the weights and reduce the cold edges into a max state (the CPU
 * kernels); the device merges the states, finalizes them and combines them with the
 * destinations' own rows (hot ones from its gathered rows, cold ones staged), then runs the
 * upper layers. Training has no equivalent of the pooled states (it sends this layer raw rows),
 * so their reductions, merge and finalize are the backend's ops called here, not
 * sched/feature_store.c's input layer, which reduces feature rows. */
static ng_status forward_pool(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                              batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const ng_layer *L0 = &e->model.layers[0];
  const int32_t nd = mb->blocks[0].n_dst;
  const int64_t dim = s->dim, pd = L0->pre_dim;
  const size_t row_b = (size_t)dim * sizeof(float);
  ng_fetch_pkg pkg;
  NG_CHECK(split_raw(ln, s, mb, &pkg, rows));
  const int32_t n_hot = (int32_t)pkg.n_hot_rows, n_cold = (int32_t)pkg.n_staged;
  const int32_t n_self_hot = pkg.n_self_hot, n_self_cold = pkg.n_self_cold;
  const int64_t nh = pkg.hot.nnz, nc = pkg.cold.nnz;
  NG_CHECK(ng__host_reserve(&ln->host_i64.ptr, &ln->host_i64.cap,
                            ((size_t)n_cold + (size_t)n_self_cold + 1) * sizeof(int64_t),
                            "the batch's id arrays"));
  const float **row_ptr = ln->host_i64.ptr; /* [n_cold] the staged (cold) rows */
  int64_t *iota = (int64_t *)(row_ptr + n_cold);
  _Static_assert(sizeof(const float *) == sizeof(int64_t), "row pointers fill int64 slots");
  for (int32_t r = 0; r < n_cold; r++)
    row_ptr[r] = pkg.staged + (int64_t)r * dim;
  for (int32_t i = 0; i < n_self_cold; i++)
    iota[i] = i;

  ng_minibatch dmb;
  raw_input_mb(&dmb, mb, mb->blocks[0].indptr);
  NG_CHECK(ng__exec_prepare_upper(&ln->ex, &dmb));
  float *pre_hot = ln->ex.ws[0].pre, *agg = ln->ex.ws[0].agg, *out0 = ln->ex.ws[0].out;

  const size_t hot_x_b = (size_t)n_hot * row_b, st_rows = (size_t)nd * (size_t)pd * sizeof(float);
  const size_t st_cnt = (size_t)nd * sizeof(int32_t), self_b = (size_t)nd * row_b;
  size_t wbytes = 0;
  carve(NULL, &wbytes, hot_x_b);
  carve(NULL, &wbytes, st_rows);
  carve(NULL, &wbytes, st_cnt);
  carve(NULL, &wbytes, self_b);
  NG_CHECK(ng__bk_reserve(be, &ln->work.ptr, &ln->work.cap, NG_MAX(wbytes, (size_t)ALIGN)));
  size_t at_w = 0;
  float *hot_x = carve(ln->work.ptr, &at_w, hot_x_b);
  ng_pstate hot = {carve(ln->work.ptr, &at_w, st_rows), carve(ln->work.ptr, &at_w, st_cnt), nd, pd};
  float *self = carve(ln->work.ptr, &at_w, self_b);

  ng_block hb = {.n_dst = nd, .n_src = NG_MAX(n_hot, nd), .nnz = nh};
  const int64_t *hot_ids_dev = NULL, *shi = NULL, *iota_dev = NULL;
  const int32_t *shp = NULL, *scp = NULL, *pcnt_dev = NULL;
  const float *pval_dev = NULL, *staged_dev = NULL;
  pack_item items[12 + 4 * NG_MAX_LAYERS];
  int ni = 0;
#define ITEM(ptr, bytes, dstp) items[ni++] = (pack_item){(ptr), (bytes), (const void **)(dstp)}
  ITEM(pkg.hot.indptr, ((size_t)nd + 1) * 4, &hb.indptr);
  ITEM(nh ? pkg.hot.indices : NULL, (size_t)nh * 4, &hb.indices);
  ITEM(n_hot ? pkg.hot_ids : NULL, (size_t)n_hot * 8, &hot_ids_dev);
  ITEM(n_self_hot ? pkg.self_hot_pos : NULL, (size_t)n_self_hot * 4, &shp);
  ITEM(n_self_hot ? pkg.self_hot_ids : NULL, (size_t)n_self_hot * 8, &shi);
  ni = pack_upper_blocks(items, ni, mb, &dmb, 1);
  NG_CHECK(upload(ln, items, ni, 0));
  const float *P = ln->ex.params;
  if (n_hot > 0) {
    NG_CHECK(B->scatter_rows(be, hot_x, NULL, e->store.cache, hot_ids_dev, n_hot, dim, 0.0f, 0));
    NG_CHECK(B->gemm(be, false, false, n_hot, pd, dim, 1.0f, hot_x, dim, P + L0->off_w_pre, pd,
                     0.0f, pre_hot, pd));
    NG_CHECK(B->bias_act_fwd(be, pre_hot, P + L0->off_b_pre, n_hot, pd, NG_ACT_RELU));
  }
  NG_CHECK(B->aggr_partial(be, &e->bare, &hb, pre_hot, &hot));
  if (n_self_hot > 0) /* the hot destinations' own rows, by their place among the hot rows */
    NG_CHECK(B->scatter_rows(be, self, shp, hot_x, shi, n_self_hot, dim, 0.0f, 0));

  /* The CPU's part: each cold row pooled once, its cold edges' max states, the cold self rows. */
  const size_t pre_floats = (size_t)n_cold * (size_t)pd, st_floats = (size_t)nd * (size_t)pd;
  const size_t bytes =
      (pre_floats + st_floats) * sizeof(float) + st_cnt + (size_t)n_self_cold * row_b + 4 * ALIGN;
  NG_CHECK(ng__host_reserve(&ln->gat_z.ptr, &ln->gat_z.cap, bytes, "the pooled rows of the CPU"));
  size_t sat = 0;
  float *pre_cold = carve(ln->gat_z.ptr, &sat, pre_floats * sizeof(float));
  float *p_val = carve(ln->gat_z.ptr, &sat, st_floats * sizeof(float));
  int32_t *p_cnt = carve(ln->gat_z.ptr, &sat, st_cnt);
  float *staged = carve(ln->gat_z.ptr, &sat, (size_t)n_self_cold * row_b);
  const float *hp = e->host_params;
  host_project(row_ptr, n_cold, dim, hp + L0->off_w_pre, pd, pre_cold, e->workers);
  const float *b_pre = hp + L0->off_b_pre;
  const int threads = e->workers;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int32_t r = 0; r < n_cold; r++) { /* bias then ReLU, as bias_act_fwd */
    float *x = pre_cold + (int64_t)r * pd;
    for (int64_t c = 0; c < pd; c++) {
      const float v = x[c] + b_pre[c];
      x[c] = v > 0.0f ? v : 0.0f;
    }
  }
  /* The cold edges' max states over the pooled rows, with the CPU kernels training reduces
   * with (cpu/kernels_impl.h's order, the device's too). */
  const ng_cpu_kernels *kern = ng__cpu_kernels(ng__cpu_isa_best());
  const ng_block cb = {.n_dst = nd,
                       .n_src = NG_MAX(n_cold, nd),
                       .nnz = nc,
                       .indptr = pkg.cold.indptr,
                       .indices = pkg.cold.indices};
  ng_pstate cs = {p_val, p_cnt, nd, pd};
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) if (threads > 1)
  for (int32_t d = 0; d < nd; d++)
    ng__cpu_aggr_partial_rows(kern, &e->bare, &cb, pre_cold, pd, d, d + 1, &cs, false);
  for (int32_t i = 0; i < n_self_cold; i++)
    memcpy(staged + (int64_t)i * dim, pkg.staged + pkg.self_cold_ids[i] * dim, row_b);

  ni = 0;
  ITEM(p_val, st_floats * sizeof(float), &pval_dev);
  ITEM(p_cnt, st_cnt, &pcnt_dev);
  ITEM(n_self_cold ? staged : NULL, (size_t)n_self_cold * row_b, &staged_dev);
  ITEM(n_self_cold ? pkg.self_cold_pos : NULL, (size_t)n_self_cold * 4, &scp);
  ITEM(n_self_cold ? iota : NULL, (size_t)n_self_cold * 8, &iota_dev);
#undef ITEM
  NG_CHECK(upload(ln, items, ni, 1));
  ng_pstate cold = {(float *)pval_dev, (int32_t *)pcnt_dev, nd, pd};
  if (nc > 0)
    NG_CHECK(B->pstate_merge(be, &e->bare, &hot, &cold));
  NG_CHECK(B->pstate_finalize(be, &e->bare, &hot, agg));
  if (n_self_cold > 0)
    NG_CHECK(B->scatter_rows(be, self, scp, staged_dev, iota_dev, n_self_cold, dim, 0.0f, 0));
  NG_CHECK(ng__exec_pool_combine(&ln->ex, 0, nd, self, agg, out0));
  return ng__exec_forward_upper(&ln->ex, &dmb);
}

/* The forward pass of a model whose input layer reads raw rows (GAT, SAGE-pool:
 * ng__model_raw_input) in every strategy but PARTIAL, as the trainer lays it out: an identity
 * block first (each of the field's input sources a destination without edges), whose input
 * layer (forward) delivers every source's raw row from its tier, then the field's blocks. */
static ng_status forward_raw_input(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                                   fetch_kind how, batch_rows *rows) {
  const int32_t ns = mb->blocks[0].n_src;
  NG_CHECK(ng__host_reserve(&ln->gat_z.ptr, &ln->gat_z.cap, ((size_t)ns + 1) * sizeof(int32_t),
                            "the identity block"));
  memset(ln->gat_z.ptr, 0, ((size_t)ns + 1) * sizeof(int32_t));
  ng_minibatch dmb;
  raw_input_mb(&dmb, mb, ln->gat_z.ptr);
  return forward(ln, s, &dmb, how == FETCH_PARTIAL ? FETCH_TRANSFER : how, rows);
}

/* The batch's distinct targets: a small open-addressing map from a key to its place among them.
 * The key is the node id, and for sampled requests (node, seed): a node asked for with two
 * seeds is two targets, each drawing its field with its request's seed. */
static size_t target_slot(int64_t v, uint64_t seed, size_t mask) {
  uint64_t hv = (uint64_t)v * 0x9e3779b97f4a7c15ULL ^ seed * 0xc2b2ae3d27d4eb4fULL;
  return (size_t)(hv ^ (hv >> 32)) & mask;
}

static uint64_t seed_of(const ng_infer_request *r) {
  return r->n_fanouts ? r->seed : 0;
}

static ng_status batch_targets(lane *ln, pending **reqs, int n_req, int32_t *n_targets) {
  int64_t total = 0;
  for (int i = 0; i < n_req; i++)
    total += reqs[i]->req->n;
  size_t cap = 64;
  while (cap < (size_t)total * 2)
    cap *= 2;
  NG_CHECK(ng__host_reserve(&ln->targets.ptr, &ln->targets.cap, (size_t)total * sizeof(int64_t),
                            "the batch's targets"));
  NG_CHECK(ng__host_reserve(&ln->target_seeds.ptr, &ln->target_seeds.cap,
                            (size_t)total * sizeof(uint64_t), "the batch's targets"));
  NG_CHECK(ng__host_reserve(&ln->map_keys.ptr, &ln->map_keys.cap, cap * sizeof(int64_t),
                            "the batch's target map"));
  NG_CHECK(ng__host_reserve(&ln->map_seeds.ptr, &ln->map_seeds.cap, cap * sizeof(uint64_t),
                            "the batch's target map"));
  NG_CHECK(ng__host_reserve(&ln->map_vals.ptr, &ln->map_vals.cap, cap * sizeof(int32_t),
                            "the batch's target map"));
  int64_t *keys = ln->map_keys.ptr, *targets = ln->targets.ptr;
  uint64_t *kseeds = ln->map_seeds.ptr, *seeds = ln->target_seeds.ptr;
  int32_t *vals = ln->map_vals.ptr;
  memset(keys, 0xff, cap * sizeof *keys);
  int32_t n = 0;
  for (int i = 0; i < n_req; i++) {
    const ng_infer_request *r = reqs[i]->req;
    const uint64_t sd = seed_of(r);
    for (int64_t j = 0; j < r->n; j++) {
      const int64_t v = r->node_ids[j];
      size_t h = target_slot(v, sd, cap - 1);
      while (keys[h] != -1 && (keys[h] != v || kseeds[h] != sd))
        h = (h + 1) & (cap - 1);
      if (keys[h] == -1) {
        keys[h] = v;
        kseeds[h] = sd;
        vals[h] = n;
        seeds[n] = sd;
        targets[n++] = v;
      }
    }
  }
  ln->map_cap = cap;
  *n_targets = n;
  return NG_OK;
}

static int32_t target_of(const lane *ln, int64_t v, uint64_t seed) {
  const int64_t *keys = ln->map_keys.ptr;
  const uint64_t *kseeds = ln->map_seeds.ptr;
  const int32_t *vals = ln->map_vals.ptr;
  const size_t cap = ln->map_cap;
  size_t h = target_slot(v, seed, cap - 1);
  while (keys[h] != v || kseeds[h] != seed)
    h = (h + 1) & (cap - 1);
  return vals[h];
}

/* Which strategy fetches the cold rows of a batch: the mode's, and near-data partial
 * aggregation for hub requests in the modes that have it. */
static fetch_kind strategy(const ng_engine *e, bool hub) {
  switch (e->mode) {
  case NG_MODE_BASELINE:
    return FETCH_TRANSFER;
  case NG_MODE_ZEROCOPY:
    return FETCH_ZCOPY;
  case NG_MODE_PARTIAL:
    return FETCH_PARTIAL;
  case NG_MODE_HYBRID:
    return hub ? FETCH_PARTIAL : FETCH_AUTO;
  default: /* CPU, HYBRID_STATIC */
    return hub ? FETCH_PARTIAL : FETCH_TRANSFER;
  }
}

/* The cache's layer-0 rows of missing nodes: the engine's forward pass (serve/ecache.c). */
typedef struct {
  lane *ln;
  fetch_kind how;
} ecache_arg;

static ng_status ecache_layer0(void *arg, const ng_srv_snap *s, const ng_minibatch *mb,
                               int64_t *hot_rows, int64_t *cold_rows) {
  const ecache_arg *a = arg;
  batch_rows rows = {0, 0};
  ng_status st = forward(a->ln, s, mb, a->how, &rows);
  *hot_rows = rows.hot_rows;
  *cold_rows = rows.cold_rows;
  return st;
}

/* A request's answer must be finite: a NaN or infinity (a feature row that overflows the model,
 * a damaged weight) is an error naming the first nodes it reached, never a 200 with null logits
 * or class 0 (docs/guarantees.md). Checks the rows the request reads: its logits, and its
 * embedding layer's rows when it asked for them (ed > 0). */
static ng_status answer_finite(pending *p, const float *logits, int64_t classes, const float *emb,
                               int64_t ed, const lane *ln, uint64_t sd) {
  const ng_infer_request *r = p->req;
  int64_t bad[3], n_bad = 0;
  for (int64_t j = 0; j < r->n; j++) {
    const int32_t t = target_of(ln, r->node_ids[j], sd);
    bool ok = true;
    for (int64_t c = 0; c < classes && ok; c++)
      ok = isfinite(logits[(size_t)t * (size_t)classes + (size_t)c]);
    for (int64_t c = 0; c < ed && ok; c++)
      ok = isfinite(emb[(size_t)t * (size_t)ed + (size_t)c]);
    if (!ok && n_bad++ < 3)
      bad[n_bad - 1] = r->node_ids[j];
  }
  if (n_bad == 0)
    return NG_OK;
  char ids[96] = "";
  for (int64_t i = 0; i < NG_MIN(n_bad, 3); i++)
    snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? ", " : "",
             (long long)bad[i]);
  snprintf(p->err, sizeof p->err,
           "engine: the answer is not finite (NaN or infinity) for %lld of the request's %lld "
           "nodes (%s%s): a feature row or a weight overflows the model",
           (long long)n_bad, (long long)r->n, ids, n_bad > 3 ? ", ..." : "");
  return NG_ERR_NONFINITE;
}

/* A pair request's answer (its res's common fields set): the score of each of its pairs by the
 * link decoder that the trainer's offline scoring calls (runtime/link_score.c), from the
 * embeddings of its ends, the last layer's rows `emb` [batch targets, dim] of this batch. The
 * ends' rows, then the scores, must be finite. */
static void answer_pairs(pending *p, const ng_engine *e, const lane *ln, const float *emb,
                         int64_t dim) {
  const ng_infer_request *pr = p->pairs_req;
  ng_infer_result *res = p->res;
  const int64_t n = pr->n;
  const uint64_t sd = seed_of(pr);
  res->n = n;
  res->classes = 0;
  res->embedding_dim = 0;
  res->score = malloc((size_t)n * sizeof(float) + 1);
  int32_t *uv = malloc(2 * (size_t)n * sizeof *uv + 1);
  if (!res->score || !uv) {
    free(uv);
    ng_infer_result_free(res);
    p->st = NG_ERR_NOMEM;
    snprintf(p->err, sizeof p->err, "engine: out of memory for the answer of %lld pairs",
             (long long)n);
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    uv[j] = target_of(ln, pr->node_ids[j], sd);
    uv[n + j] = target_of(ln, pr->dst_ids[j], sd);
  }
  /* One thread: the lane's; a pair's score does not depend on the thread count. */
  p->st = ng__link_score(&e->dec, res->score, emb, uv, uv + n, n, 1);
  free(uv);
  if (p->st != NG_OK)
    snprintf(p->err, sizeof p->err, "%s", ng_last_error());
  if (p->st == NG_OK)
    p->st = answer_finite(p, emb, dim, NULL, 0, ln, sd);
  for (int64_t j = 0; j < n && p->st == NG_OK; j++)
    if (!isfinite(res->score[j])) {
      p->st = NG_ERR_NONFINITE;
      snprintf(p->err, sizeof p->err,
               "engine: the score of pair %lld (%lld, %lld) is not finite: the decoder's weights "
               "overflow it",
               (long long)j, (long long)pr->node_ids[j], (long long)pr->dst_ids[j]);
    }
  if (p->st != NG_OK)
    ng_infer_result_free(res);
}

/* Computes a batch of compatible requests (same sampling) and fills their results. */
ng_status ng__engine_run_batch(lane *ln, pending **reqs, int n_req, double t0,
                               batch_rows *rows_out) {
  ng_engine *e = ln->e;
  const struct ng_model *m = &e->model;
  const ng_infer_request *r0 = reqs[0]->req;
  int32_t n_targets = 0;
  NG_CHECK(batch_targets(ln, reqs, n_req, &n_targets));
  ng_srv_snap *s = ng__engine_snap_acquire(e);
  ng_minibatch mb;
  ng_status st = NG_OK;
  batch_rows rows = {0, 0};
  if (e->ecache && r0->n_fanouts == 0) { /* full neighbourhoods from cached layer-0 rows */
    ecache_arg a = {ln, strategy(e, reqs[0]->hub)};
    const ng_ecache_ctx cx = {&ln->ex, ln->be, m, ln->field, e->gcn, ecache_layer0, &a};
    st = ng__ecache_forward(e->ecache, ln->ecache_work, &cx, s, ln->targets.ptr, n_targets,
                            &rows.hot_rows, &rows.cold_rows);
  } else {
    /* Sampled batches give each target its request's seed; a batch's requests share fanouts. */
    st = ng__srv_field_build(&mb, ln->field, s, m->n_layers, reqs[0]->fanout, e->gcn,
                             r0->n_fanouts ? ln->target_seeds.ptr : NULL, ln->targets.ptr,
                             n_targets);
  }
  if (st == NG_OK && !(e->ecache && r0->n_fanouts == 0)) {
    const fetch_kind how = strategy(e, reqs[0]->hub);
    if (!ng__model_raw_input(m))
      st = forward(ln, s, &mb, how, &rows);
    else if (how != FETCH_PARTIAL)
      st = forward_raw_input(ln, s, &mb, how, &rows);
    else if (e->gat)
      st = forward_gat(ln, s, &mb, &rows);
    else
      st = forward_pool(ln, s, &mb, &rows);
  }
  ng__srv_snap_unref(s);
  if (st != NG_OK)
    return st;
  *rows_out = rows;
  /* The outputs the batch's requests want, copied back once per layer. */
  bool want[NG_MAX_LAYERS] = {false};
  want[m->n_layers - 1] = true;
  for (int i = 0; i < n_req; i++)
    if (reqs[i]->req->outputs & NG_OUT_EMBEDDING)
      want[reqs[i]->emb_layer] = true;
  size_t off[NG_MAX_LAYERS], total = 0;
  for (int l = 0; l < m->n_layers; l++) {
    off[l] = total;
    if (want[l])
      total += (size_t)n_targets * (size_t)m->layers[l].out_dim;
  }
  NG_CHECK(ng__host_reserve(&ln->out_host.ptr, &ln->out_host.cap, total * sizeof(float),
                            "the batch's outputs"));
  float *host = ln->out_host.ptr;
  for (int l = 0; l < m->n_layers; l++)
    if (want[l])
      NG_CHECK(ln->be->iface->copy_d2h(ln->be, host + off[l], ln->ex.ws[l].out,
                                       (size_t)n_targets * (size_t)m->layers[l].out_dim *
                                           sizeof(float)));
  const double t1 = now_us();
  const int64_t classes = m->layers[m->n_layers - 1].out_dim;
  const float *logits = host + off[m->n_layers - 1];
  for (int i = 0; i < n_req; i++) {
    pending *p = reqs[i];
    const ng_infer_request *r = p->req;
    ng_infer_result *res = p->res;
    const unsigned outs = r->outputs ? r->outputs : NG_OUT_LOGITS;
    res->n = r->n;
    res->classes = classes;
    res->embedding_dim = (outs & NG_OUT_EMBEDDING) ? m->layers[p->emb_layer].out_dim : 0;
    res->hub = p->hub;
    res->batch_nodes = n_targets;
    res->hot_rows = rows.hot_rows;
    res->cold_rows = rows.cold_rows;
    res->queue_us = t0 - p->t_enq;
    res->compute_us = t1 - t0;
    if (p->pairs_req) {
      answer_pairs(p, e, ln, logits, classes);
      continue;
    }
    if (outs & NG_OUT_LOGITS)
      res->logits = malloc((size_t)r->n * (size_t)classes * sizeof(float) + 1);
    if (outs & NG_OUT_EMBEDDING)
      res->embedding = malloc((size_t)r->n * (size_t)res->embedding_dim * sizeof(float) + 1);
    if (outs & NG_OUT_CLASS)
      res->cls = malloc((size_t)r->n * sizeof(int64_t) + 1);
    if (((outs & NG_OUT_LOGITS) && !res->logits) ||
        ((outs & NG_OUT_EMBEDDING) && !res->embedding) || ((outs & NG_OUT_CLASS) && !res->cls)) {
      ng_infer_result_free(res);
      p->st = NG_ERR_NOMEM;
      snprintf(p->err, sizeof p->err, "engine: out of memory for the answer of %lld nodes",
               (long long)r->n);
      continue;
    }
    const uint64_t sd = seed_of(r);
    for (int64_t j = 0; j < r->n; j++) {
      const int32_t t = target_of(ln, r->node_ids[j], sd);
      const float *row = logits + (size_t)t * (size_t)classes;
      if (res->logits)
        memcpy(res->logits + j * classes, row, (size_t)classes * sizeof(float));
      if (res->embedding) {
        const int64_t ed = res->embedding_dim;
        memcpy(res->embedding + j * ed, host + off[p->emb_layer] + (size_t)t * (size_t)ed,
               (size_t)ed * sizeof(float));
      }
      if (res->cls) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
          if (row[c] > row[best])
            best = c;
        res->cls[j] = best;
      }
    }
    p->st =
        answer_finite(p, logits, classes, res->embedding_dim > 0 ? host + off[p->emb_layer] : NULL,
                      res->embedding_dim, ln, sd);
    if (p->st != NG_OK)
      ng_infer_result_free(res);
  }
  return NG_OK;
}

/* Whether two requests may share a device batch: full neighbourhoods, or the same fanouts
 * (whatever their seeds: each target draws with its own request's seed, batch_targets). */
