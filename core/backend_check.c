/* The checked front of the backend interface: every op a caller reaches through be->iface checks
 * its arguments here, once for all backends, and then calls the backend's own op (be->impl), so
 * that every backend refuses the same calls with the same status and message (see "Arguments
 * are validated once" in backend_impl.h). What a backend still checks is its own: the CUDA
 * backend's 32-bit cuBLAS sizes and its stream state, the xent label ranges each backend reads
 * where its memory is. A front op costs one indirect call more than calling impl directly. */
#include "backend_impl.h"
#include "fault_impl.h"

#include <string.h>

/* ---- the checks ---- */

static ng_status check_count(const char *op, const char *what, int64_t v) {
  if (v < 0)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s is %lld; it must be >= 0", op, what, (long long)v);
  return NG_OK;
}

/* `p` must not be NULL when `needed`. */
static ng_status check_ptr(const char *op, const char *what, const void *p, bool needed) {
  if (needed && !p)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s is NULL; pass a buffer of the documented size", op,
                   what);
  return NG_OK;
}

ng_status ng__bk_check_ptr(const char *op, const char *what, const void *p, bool needed) {
  return check_ptr(op, what, p, needed);
}

/* A known reduce, MAX/MIN without weights, self loop or mean, and the block's weight arrays
 * present when the aggregator uses them (`blk` may be NULL). */
static ng_status check_aggr(const char *op, const ng_aggr *ag, const ng_block *blk) {
  if (!ag)
    return ng__err(NG_ERR_INVALID_ARG, "%s: aggregator is NULL", op);
  if ((unsigned)ag->reduce > NG_REDUCE_MIN)
    return ng__err(NG_ERR_INVALID_ARG, "%s: unknown reduce %d", op, (int)ag->reduce);
  if (ag->reduce != NG_REDUCE_SUM && (ag->weighted || ag->self_loop || ag->mean))
    return ng__err(NG_ERR_UNSUPPORTED, "%s: MAX/MIN take no edge weight, self loop or MEAN", op);
  if (ag->user && (ag->reduce != NG_REDUCE_SUM || ag->self_loop || ag->mean))
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: user aggregator \"%s\" with a built-in reduce, MEAN or self loop; build "
                   "it with ng__aggr_from_public",
                   op, ag->user->name);
  if (!blk)
    return NG_OK;
  NG_CHECK(check_ptr(op, "block edge_w (the aggregator is weighted)", blk->edge_w,
                     ag->weighted && blk->nnz > 0));
  return check_ptr(op, "block self_w (the aggregator has a self loop)", blk->self_w,
                   ag->self_loop && blk->n_dst > 0);
}

/* Only aggr_partial applies the aggregator's input dropout; the other ops refuse it. */
static ng_status check_no_drop(const char *op, const ng_aggr *ag) {
  if (ag && ag->drop_p != 0.0f)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: the aggregator asks for input dropout, which only aggr_partial applies; "
                   "apply dropout_fwd to the input instead",
                   op);
  return NG_OK;
}

static ng_status check_state(const char *op, const ng_pstate *st) {
  if (!st)
    return ng__err(NG_ERR_INVALID_ARG, "%s: state is NULL", op);
  NG_CHECK(check_count(op, "state n_dst", st->n_dst));
  NG_CHECK(check_count(op, "state dim", st->dim));
  NG_CHECK(check_ptr(op, "state val", st->val, st->n_dst > 0 && st->dim > 0));
  return check_ptr(op, "state count", st->count, st->n_dst > 0);
}

static ng_status check_act(const char *op, ng_activation act) {
  if (act != NG_ACT_NONE && act != NG_ACT_RELU)
    return ng__err(NG_ERR_INVALID_ARG, "%s: unknown activation %d; use NG_ACT_NONE or NG_ACT_RELU",
                   op, (int)act);
  return NG_OK;
}

/* A buffer slot or mark in [0, NG_BACKEND_MARKS). */
static ng_status check_slot(const char *op, int slot) {
  if (slot < 0 || slot >= NG_BACKEND_MARKS)
    return ng__err(NG_ERR_INVALID_ARG, "%s: slot %d is not in [0, %d)", op, slot, NG_BACKEND_MARKS);
  return NG_OK;
}

static ng_status check_dropout_p(const char *op, float p) {
  if (!(p >= 0.0f && p < 1.0f))
    return ng__err(NG_ERR_INVALID_ARG, "%s: drop probability %g is outside [0, 1)", op, (double)p);
  return NG_OK;
}

static ng_status check_rows_dim(const char *op, int64_t n, int64_t dim) {
  NG_CHECK(check_count(op, "n", n));
  return check_count(op, "dim", dim);
}

/* ---- blocks ---- */

static ng_status check_block_shape(const char *op, const ng_block *blk) {
  if (!blk)
    return ng__err(NG_ERR_INVALID_ARG, "%s: block is NULL", op);
  if (blk->n_dst < 0 || blk->n_src < blk->n_dst)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: block has %d destinations and %d sources; destinations must be the "
                   "first n_dst of the sources",
                   op, (int)blk->n_dst, (int)blk->n_src);
  if (blk->nnz < 0 || blk->nnz > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "%s: block has %lld edges; blocks hold 0 .. 2^31-1 edges",
                   op, (long long)blk->nnz);
  return check_ptr(op, "block indptr", blk->indptr, true);
}

/* An offsets array (indptr, t_indptr) of `rows` rows must run from 0 to the block's nnz. It is
 * read, so only for backends whose memory is host memory. */
static ng_status check_ends(const char *op, const char *what, const int32_t *ptr, int32_t rows,
                            int64_t nnz, const char *fix) {
  if (ptr[0] != 0 || ptr[rows] != nnz)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: block %s runs from %d to %d but the block has %lld edges%s", op, what,
                   (int)ptr[0], (int)ptr[rows], (long long)nnz, fix);
  return NG_OK;
}

/* The block's shape and arrays, the transpose's with `transpose` (backward passes), and with
 * `host` (the backend's memory is host memory) the endpoints of its offsets arrays. */
static ng_status check_block(const char *op, const ng_block *blk, bool transpose, bool host) {
  NG_CHECK(check_block_shape(op, blk));
  if (host)
    NG_CHECK(check_ends(op, "indptr", blk->indptr, blk->n_dst, blk->nnz,
                        "; indptr must go from 0 to nnz"));
  NG_CHECK(check_ptr(op, "block indices", blk->indices, blk->nnz > 0));
  if (!transpose)
    return NG_OK;
  if (!blk->t_indptr || (blk->nnz > 0 && (!blk->t_dst || !blk->t_eid)))
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: block has no transpose (t_indptr, t_dst, t_eid); sample with transpose "
                   "enabled for backward passes",
                   op);
  return host ? check_ends(op, "t_indptr", blk->t_indptr, blk->n_src, blk->nnz, "") : NG_OK;
}

/* The checks every aggregation over a block starts with. */
static ng_status check_aggr_block(ng_backend *be, const char *op, const ng_aggr *ag,
                                  const ng_block *blk, bool transpose) {
  NG_CHECK(check_block(op, blk, transpose, be->impl->host_memory));
  return check_aggr(op, ag, blk);
}

/* What aggr_fwd and aggr_bwd start with: the block, an aggregator without input dropout, dim. */
static ng_status check_aggr_dim(ng_backend *be, const char *op, const ng_aggr *ag,
                                const ng_block *blk, bool transpose, int64_t dim) {
  NG_CHECK(check_aggr_block(be, op, ag, blk, transpose));
  NG_CHECK(check_no_drop(op, ag));
  return check_count(op, "dim", dim);
}

/* ---- memory ---- */

/* Injected failures (fault_impl.h) are refused here, before the backend, so that they behave
 * alike on every backend; the messages read as the backends' own. */
static ng_status front_alloc(ng_backend *be, void **out, size_t bytes) {
  NG_CHECK(check_ptr("alloc", "out", out, true));
  if (NG_UNLIKELY(ng__fault_backend_hit(NG_FAULT_ALLOC, bytes))) {
    *out = NULL;
    return ng__err(NG_ERR_NOMEM, "%s: out of device memory allocating %zu bytes [injected]",
                   be->impl->name, bytes);
  }
  return be->impl->alloc(be, out, bytes);
}

static ng_status front_host_alloc(ng_backend *be, void **out, size_t bytes) {
  NG_CHECK(check_ptr("host_alloc", "out", out, true));
  if (NG_UNLIKELY(ng__fault_backend_hit(NG_FAULT_HOST_ALLOC, bytes))) {
    *out = NULL;
    return ng__err(NG_ERR_NOMEM,
                   "%s: cannot allocate %zu bytes of pinned host memory (the limit on "
                   "page-locked memory is reached) [injected]",
                   be->impl->name, bytes);
  }
  return be->impl->host_alloc(be, out, bytes);
}

static ng_status front_host_register(ng_backend *be, void *ptr, size_t bytes, bool read_only) {
  NG_CHECK(check_ptr("host_register", "ptr", ptr, bytes > 0));
  if (NG_UNLIKELY(ng__fault_backend_hit(NG_FAULT_HOST_REGISTER, bytes)))
    return ng__err(NG_ERR_NOMEM,
                   "%s: cannot page-lock %zu bytes of host memory for zero-copy reads (the "
                   "limit on page-locked memory is reached) [injected]",
                   be->impl->name, bytes);
  return be->impl->host_register(be, ptr, bytes, read_only);
}

/* A copy of 0 bytes is done before it starts, whatever its pointers. */
static ng_status check_copy(const char *op, void *dst, const void *src, size_t bytes) {
  NG_CHECK(check_ptr(op, "dst", dst, bytes > 0));
  return check_ptr(op, "src", src, bytes > 0);
}

/* copy_h2d, copy_d2h and copy_d2d take the same arguments and are checked alike. */
#define NG_FRONT_COPY(op)                                                                          \
  static ng_status front_##op(ng_backend *be, void *dst, const void *src, size_t bytes) {          \
    NG_CHECK(check_copy(#op, dst, src, bytes));                                                    \
    return bytes == 0 ? NG_OK : be->impl->op(be, dst, src, bytes);                                 \
  }
NG_FRONT_COPY(copy_h2d)
NG_FRONT_COPY(copy_d2h)
NG_FRONT_COPY(copy_d2d)

/* An empty asynchronous copy still orders the slot (it waits for the mark and is waited for). */
static ng_status front_copy_h2d_async(ng_backend *be, void *dst, const void *host_src, size_t bytes,
                                      int slot) {
  NG_CHECK(check_slot("copy_h2d_async", slot));
  NG_CHECK(check_copy("copy_h2d_async", dst, host_src, bytes));
  return be->impl->copy_h2d_async(be, dst, host_src, bytes, slot);
}

/* The ops whose one argument is a buffer slot or mark. */
#define NG_FRONT_SLOT(op)                                                                          \
  static ng_status front_##op(ng_backend *be, int slot) {                                          \
    NG_CHECK(check_slot(#op, slot));                                                               \
    return be->impl->op(be, slot);                                                                 \
  }
NG_FRONT_SLOT(wait_copy)
NG_FRONT_SLOT(mark)
NG_FRONT_SLOT(wait_mark)
NG_FRONT_SLOT(copy_ops_begin)
NG_FRONT_SLOT(copy_ops_end)

static ng_status front_fill(ng_backend *be, float *x, int64_t n, float value) {
  NG_CHECK(check_count("fill", "n", n));
  NG_CHECK(check_ptr("fill", "x", x, n > 0));
  return n == 0 ? NG_OK : be->impl->fill(be, x, n, value);
}

/* ---- sampling ---- */

static ng_status front_sampler_create(ng_backend *be, const ng_csr *g, int lanes,
                                      ng_dev_sampler **out) {
  NG_CHECK(check_ptr("sampler_create", "out", out, true));
  *out = NULL;
  NG_CHECK(check_ptr("sampler_create", "graph", g, true));
  if (!g->indptr || (!g->idx32) == (!g->idx64) || g->nodes < 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "sampler_create: the graph must have nodes >= 0, indptr and exactly one of "
                   "idx32/idx64");
  if (lanes < 1 || lanes > 64)
    return ng__err(NG_ERR_INVALID_ARG, "sampler_create: %d lanes; use 1 to 64", lanes);
  return be->impl->sampler_create(be, g, lanes, out);
}

/* What the CPU sampler checks too: the layers and fanouts, and every target an id of the graph
 * (the device cannot report a bad id by name). */
static ng_status front_sampler_run(ng_backend *be, ng_dev_sampler *s, int lane,
                                   const ng_sampler_cfg *cfg, const int64_t *targets, int32_t n,
                                   uint64_t seed, ng_minibatch *out, void **host,
                                   size_t *host_cap) {
  NG_CHECK(check_ptr("sampler_run", "out", out, true));
  memset(out, 0, sizeof *out);
  NG_CHECK(check_ptr("sampler_run", "sampler", s, true));
  NG_CHECK(check_ptr("sampler_run", "host buffer", host, true));
  NG_CHECK(check_ptr("sampler_run", "host buffer's capacity", host_cap, true));
  NG_CHECK(ng__sampler_cfg_check(cfg));
  if (n < 1 || !targets)
    return ng__err(NG_ERR_INVALID_ARG, "sampler: %d targets; a mini-batch needs at least one",
                   (int)n);
  for (int32_t i = 0; i < n; i++)
    if (targets[i] < 0 || targets[i] >= cfg->graph->nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "sampler: targets[%d] = %lld is not a node id of the graph (0 .. %lld)",
                     (int)i, (long long)targets[i], (long long)cfg->graph->nodes - 1);
  if (NG_UNLIKELY(ng__fault_backend_hit(NG_FAULT_SAMPLER_RUN, 0)))
    return ng__err(NG_ERR_NOMEM,
                   "%s: sampler_run: out of device memory sampling %d targets "
                   "[injected]",
                   be->impl->name, (int)n);
  if (lane < 0)
    return ng__err(NG_ERR_INVALID_ARG, "sampler_run: lane %d", lane);
  return be->impl->sampler_run(be, s, lane, cfg, targets, n, seed, out, host, host_cap);
}

/* ---- timing ---- */

static ng_status front_event_record(ng_backend *be, int k) {
  if (k < 0 || k >= NG_BACKEND_EVENTS)
    return ng__err(NG_ERR_INVALID_ARG, "event_record: event %d outside [0, %d)", k,
                   NG_BACKEND_EVENTS);
  return be->impl->event_record(be, k);
}

static ng_status front_event_elapsed(ng_backend *be, int a, int b, double *ms) {
  if (a < 0 || a >= NG_BACKEND_EVENTS || b < 0 || b >= NG_BACKEND_EVENTS || !ms)
    return ng__err(NG_ERR_INVALID_ARG, "event_elapsed: events %d, %d outside [0, %d)", a, b,
                   NG_BACKEND_EVENTS);
  return be->impl->event_elapsed(be, a, b, ms);
}

/* ---- gathers and aggregation ---- */

static ng_status check_gather(const char *op, float *dst, const float *table, const int64_t *ids) {
  NG_CHECK(check_ptr(op, "dst", dst, true));
  NG_CHECK(check_ptr(op, "table", table, true));
  return check_ptr(op, "ids", ids, true);
}

static ng_status front_gather_rows(ng_backend *be, float *dst, const float *table,
                                   const int64_t *ids, int64_t n, int64_t dim) {
  NG_CHECK(check_rows_dim("gather_rows", n, dim));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_gather("gather_rows", dst, table, ids));
  return be->impl->gather_rows(be, dst, table, ids, n, dim);
}

static ng_status front_aggr_fwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                const float *src, int64_t dim, float *dst, int32_t *argbest) {
  NG_CHECK(check_aggr_dim(be, "aggr_fwd", ag, blk, false, dim));
  if (blk->n_dst == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_ptr("aggr_fwd", "src", src, blk->n_src > 0));
  NG_CHECK(check_ptr("aggr_fwd", "dst", dst, true));
  return be->impl->aggr_fwd(be, ag, blk, src, dim, dst, argbest);
}

static ng_status front_aggr_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                const float *grad_dst, const int32_t *argbest, int64_t dim,
                                float *grad_src) {
  NG_CHECK(check_aggr_dim(be, "aggr_bwd", ag, blk, true, dim));
  if (blk->n_src == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_ptr("aggr_bwd", "grad_dst", grad_dst, blk->n_dst > 0));
  NG_CHECK(check_ptr("aggr_bwd", "grad_src", grad_src, true));
  NG_CHECK(check_ptr("aggr_bwd", "argbest (MAX/MIN need the forward's winners)", argbest,
                     ag->reduce != NG_REDUCE_SUM && blk->n_dst > 0));
  if (ag->user)
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggr_bwd: aggregator \"%s\" is user-defined; its backward is aggr_user_bwd, "
                   "which needs the forward's input",
                   ag->user->name);
  return be->impl->aggr_bwd(be, ag, blk, grad_dst, argbest, dim, grad_src);
}

static ng_status front_aggr_user_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                     const float *src, const float *grad_dst, int64_t dim,
                                     float *work, float *grad_src) {
  NG_CHECK(check_aggr_dim(be, "aggr_user_bwd", ag, blk, true, dim));
  if (!ag->user)
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggr_user_bwd: the aggregator is a built-in; its backward is aggr_bwd");
  if (blk->n_src == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_ptr("aggr_user_bwd", "src", src, blk->nnz > 0));
  NG_CHECK(check_ptr("aggr_user_bwd", "grad_dst", grad_dst, blk->n_dst > 0));
  NG_CHECK(check_ptr("aggr_user_bwd", "work ([nnz, dim] floats)", work, blk->nnz > 0));
  NG_CHECK(check_ptr("aggr_user_bwd", "grad_src", grad_src, true));
  return be->impl->aggr_user_bwd(be, ag, blk, src, grad_dst, dim, work, grad_src);
}

/* The attention's shape: heads and head_dim positive, a slope and dropout in range. */
static ng_status check_attn(const char *op, const ng_attn *at) {
  if (!at)
    return ng__err(NG_ERR_INVALID_ARG, "%s: attention descriptor is NULL", op);
  if (at->heads < 1 || at->head_dim < 1)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %d heads of %lld columns; both must be >= 1", op,
                   (int)at->heads, (long long)at->head_dim);
  if (!(at->slope >= 0.0f && at->slope < 1.0f))
    return ng__err(NG_ERR_INVALID_ARG, "%s: LeakyReLU slope %g is outside [0, 1)", op,
                   (double)at->slope);
  return check_dropout_p(op, at->drop_p);
}

static ng_status front_attn_fwd(ng_backend *be, const ng_attn *at, const ng_block *blk,
                                const float *z, const float *att_src, const float *att_dst,
                                float *alpha, float *out) {
  NG_CHECK(check_attn("attn_fwd", at));
  NG_CHECK(check_block("attn_fwd", blk, false, be->impl->host_memory));
  if (blk->n_dst == 0)
    return NG_OK;
  NG_CHECK(check_ptr("attn_fwd", "z", z, true));
  NG_CHECK(check_ptr("attn_fwd", "att_src", att_src, true));
  NG_CHECK(check_ptr("attn_fwd", "att_dst", att_dst, true));
  NG_CHECK(check_ptr("attn_fwd", "alpha", alpha, true));
  NG_CHECK(check_ptr("attn_fwd", "out", out, true));
  return be->impl->attn_fwd(be, at, blk, z, att_src, att_dst, alpha, out);
}

static ng_status front_attn_bwd(ng_backend *be, const ng_attn *at, const ng_block *blk,
                                const float *z, const float *att_src, const float *att_dst,
                                const float *alpha, const float *grad_out, float *work,
                                float *grad_z, float *grad_att_src, float *grad_att_dst) {
  NG_CHECK(check_attn("attn_bwd", at));
  NG_CHECK(check_block("attn_bwd", blk, true, be->impl->host_memory));
  /* The parameter gradients are written even for an empty block (as zeros). */
  NG_CHECK(check_ptr("attn_bwd", "grad_att_src", grad_att_src, true));
  NG_CHECK(check_ptr("attn_bwd", "grad_att_dst", grad_att_dst, true));
  NG_CHECK(check_ptr("attn_bwd", "z", z, blk->n_src > 0));
  NG_CHECK(check_ptr("attn_bwd", "grad_z", grad_z, blk->n_src > 0));
  NG_CHECK(check_ptr("attn_bwd", "att_src", att_src, blk->n_dst > 0));
  NG_CHECK(check_ptr("attn_bwd", "att_dst", att_dst, blk->n_dst > 0));
  NG_CHECK(check_ptr("attn_bwd", "alpha", alpha, blk->n_dst > 0));
  NG_CHECK(check_ptr("attn_bwd", "grad_out", grad_out, blk->n_dst > 0));
  NG_CHECK(check_ptr("attn_bwd", "work (ng_attn_bwd_work floats)", work, blk->n_src > 0));
  return be->impl->attn_bwd(be, at, blk, z, att_src, att_dst, alpha, grad_out, work, grad_z,
                            grad_att_src, grad_att_dst);
}

static ng_status front_aggr_partial(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                    const float *src, ng_pstate *state) {
  NG_CHECK(check_aggr_block(be, "aggr_partial", ag, blk, false));
  NG_CHECK(check_state("aggr_partial", state));
  if (state->n_dst != blk->n_dst)
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggr_partial: state has %d rows but the block %d destinations; size the "
                   "state for the block",
                   (int)state->n_dst, (int)blk->n_dst);
  NG_CHECK(check_ptr("aggr_partial", "src", src, blk->nnz > 0 && state->dim > 0));
  NG_CHECK(check_dropout_p("aggr_partial", ag->drop_p));
  return blk->n_dst == 0 ? NG_OK : be->impl->aggr_partial(be, ag, blk, src, state);
}

static ng_status front_pstate_merge(ng_backend *be, const ng_aggr *ag, ng_pstate *acc,
                                    const ng_pstate *other) {
  NG_CHECK(check_aggr("pstate_merge", ag, NULL));
  NG_CHECK(check_no_drop("pstate_merge", ag));
  NG_CHECK(check_state("pstate_merge", acc));
  NG_CHECK(check_state("pstate_merge", other));
  if (acc->n_dst != other->n_dst || acc->dim != other->dim)
    return ng__err(NG_ERR_INVALID_ARG,
                   "pstate_merge: states of shapes [%d, %lld] and [%d, %lld]; only states of the "
                   "same destinations and dimension merge",
                   (int)acc->n_dst, (long long)acc->dim, (int)other->n_dst, (long long)other->dim);
  return acc->n_dst == 0 ? NG_OK : be->impl->pstate_merge(be, ag, acc, other);
}

static ng_status front_pstate_finalize(ng_backend *be, const ng_aggr *ag, const ng_pstate *state,
                                       float *dst) {
  NG_CHECK(check_aggr("pstate_finalize", ag, NULL));
  NG_CHECK(check_no_drop("pstate_finalize", ag));
  NG_CHECK(check_state("pstate_finalize", state));
  const bool work = state->n_dst > 0 && state->dim > 0;
  NG_CHECK(check_ptr("pstate_finalize", "dst", dst, work));
  return work ? be->impl->pstate_finalize(be, ag, state, dst) : NG_OK;
}

static ng_status front_scatter_rows(ng_backend *be, float *dst, const int32_t *pos,
                                    const float *table, const int64_t *ids, int64_t n, int64_t dim,
                                    float drop_p, uint64_t drop_key) {
  NG_CHECK(check_rows_dim("scatter_rows", n, dim));
  NG_CHECK(check_dropout_p("scatter_rows", drop_p));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_gather("scatter_rows", dst, table, ids));
  return be->impl->scatter_rows(be, dst, pos, table, ids, n, dim, drop_p, drop_key);
}

static ng_status front_aggr_partial_bf16(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                         const uint16_t *src, ng_pstate *state) {
  NG_CHECK(check_aggr_block(be, "aggr_partial_bf16", ag, blk, false));
  if (ag->user)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "aggr_partial_bf16: a user-defined aggregator (%s) reads fp32 tables only",
                   ag->user->name ? ag->user->name : "custom");
  NG_CHECK(check_state("aggr_partial_bf16", state));
  if (state->n_dst != blk->n_dst)
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggr_partial_bf16: state has %d rows but the block %d destinations; size the "
                   "state for the block",
                   (int)state->n_dst, (int)blk->n_dst);
  NG_CHECK(check_ptr("aggr_partial_bf16", "src", src, blk->nnz > 0 && state->dim > 0));
  NG_CHECK(check_dropout_p("aggr_partial_bf16", ag->drop_p));
  return blk->n_dst == 0 ? NG_OK : be->impl->aggr_partial_bf16(be, ag, blk, src, state);
}

static ng_status front_scatter_rows_bf16(ng_backend *be, float *dst, const int32_t *pos,
                                         const uint16_t *table, const int64_t *ids, int64_t n,
                                         int64_t dim, float drop_p, uint64_t drop_key) {
  NG_CHECK(check_rows_dim("scatter_rows_bf16", n, dim));
  NG_CHECK(check_dropout_p("scatter_rows_bf16", drop_p));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_ptr("scatter_rows_bf16", "dst", dst, true));
  NG_CHECK(check_ptr("scatter_rows_bf16", "table", table, true));
  NG_CHECK(check_ptr("scatter_rows_bf16", "ids", ids, true));
  return be->impl->scatter_rows_bf16(be, dst, pos, table, ids, n, dim, drop_p, drop_key);
}

static ng_status front_add_self_loop(ng_backend *be, float *dst, const float *self_w,
                                     const float *rows, int64_t n, int64_t dim) {
  NG_CHECK(check_rows_dim("add_self_loop", n, dim));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(check_ptr("add_self_loop", "dst", dst, true));
  NG_CHECK(check_ptr("add_self_loop", "self_w", self_w, true));
  NG_CHECK(check_ptr("add_self_loop", "rows", rows, true));
  return be->impl->add_self_loop(be, dst, self_w, rows, n, dim);
}

/* ---- dense ops ---- */

/* The sizes of C = op(A) op(B): counts, and leading dimensions no shorter than the rows of the
 * row-major A, B and C. */
static ng_status check_gemm_shape(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                  int64_t lda, int64_t ldb, int64_t ldc) {
  NG_CHECK(check_count("gemm", "m", m));
  NG_CHECK(check_count("gemm", "n", n));
  NG_CHECK(check_count("gemm", "k", k));
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < NG_MAX(a_cols, (int64_t)1) || ldb < NG_MAX(b_cols, (int64_t)1) ||
      ldc < NG_MAX(n, (int64_t)1))
    return ng__err(NG_ERR_INVALID_ARG,
                   "gemm: leading dimensions lda %lld, ldb %lld, ldc %lld are below the row "
                   "lengths %lld, %lld, %lld of the row-major A, B, C",
                   (long long)lda, (long long)ldb, (long long)ldc, (long long)a_cols,
                   (long long)b_cols, (long long)n);
  return NG_OK;
}

/* C empty (m or n 0) is done; k == 0 still writes beta * C, which the backend does. */
static ng_status front_gemm(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc) {
  NG_CHECK(check_gemm_shape(trans_a, trans_b, m, n, k, lda, ldb, ldc));
  if (m == 0 || n == 0)
    return NG_OK;
  NG_CHECK(check_ptr("gemm", "C", c, true));
  NG_CHECK(check_ptr("gemm", "A", a, k > 0));
  NG_CHECK(check_ptr("gemm", "B", b, k > 0));
  return be->impl->gemm(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static ng_status front_gemm_bias_act(ng_backend *be, bool trans_a, bool trans_b, int64_t m,
                                     int64_t n, int64_t k, const float *a, int64_t lda,
                                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                                     const float *bias, ng_activation act) {
  NG_CHECK(check_gemm_shape(trans_a, trans_b, m, n, k, lda, ldb, ldc));
  NG_CHECK(check_act("gemm_bias_act", act));
  if (m == 0 || n == 0)
    return NG_OK;
  NG_CHECK(check_ptr("gemm_bias_act", "C", c, true));
  NG_CHECK(check_ptr("gemm_bias_act", "A", a, k > 0));
  NG_CHECK(check_ptr("gemm_bias_act", "B", b, k > 0));
  return be->impl->gemm_bias_act(be, trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, bias,
                                 act);
}

static ng_status front_add(ng_backend *be, float *y, const float *x, int64_t n) {
  NG_CHECK(check_count("add", "n", n));
  NG_CHECK(check_ptr("add", "y", y, n > 0));
  NG_CHECK(check_ptr("add", "x", x, n > 0));
  return n == 0 ? NG_OK : be->impl->add(be, y, x, n);
}

static ng_status check_bias_act(const char *op, int64_t rows, int64_t cols, ng_activation act) {
  NG_CHECK(check_count(op, "rows", rows));
  NG_CHECK(check_count(op, "cols", cols));
  return check_act(op, act);
}

static ng_status front_bias_act_fwd(ng_backend *be, float *x, const float *bias, int64_t rows,
                                    int64_t cols, ng_activation act) {
  NG_CHECK(check_bias_act("bias_act_fwd", rows, cols, act));
  NG_CHECK(check_ptr("bias_act_fwd", "x", x, rows > 0 && cols > 0));
  return rows == 0 || cols == 0 ? NG_OK : be->impl->bias_act_fwd(be, x, bias, rows, cols, act);
}

/* rows == 0 is work: the bias gradient of no rows is 0. */
static ng_status front_bias_act_bwd(ng_backend *be, float *grad, const float *y, float *grad_bias,
                                    int64_t rows, int64_t cols, ng_activation act) {
  NG_CHECK(check_bias_act("bias_act_bwd", rows, cols, act));
  NG_CHECK(check_ptr("bias_act_bwd", "grad", grad, rows > 0 && cols > 0));
  NG_CHECK(check_ptr("bias_act_bwd", "y (ReLU needs the forward output)", y,
                     act == NG_ACT_RELU && rows > 0 && cols > 0));
  return cols == 0 ? NG_OK : be->impl->bias_act_bwd(be, grad, y, grad_bias, rows, cols, act);
}

static ng_status check_dropout(const char *op, const char *what, const void *x, const void *mask,
                               int64_t n, float p) {
  NG_CHECK(check_count(op, "n", n));
  NG_CHECK(check_dropout_p(op, p));
  NG_CHECK(check_ptr(op, what, x, n > 0));
  return check_ptr(op, "mask", mask, n > 0);
}

static ng_status front_dropout_fwd(ng_backend *be, float *x, uint8_t *mask, int64_t n, float p,
                                   uint64_t seed) {
  NG_CHECK(check_dropout("dropout_fwd", "x", x, mask, n, p));
  return n == 0 ? NG_OK : be->impl->dropout_fwd(be, x, mask, n, p, seed);
}

static ng_status front_dropout_bwd(ng_backend *be, float *grad, const uint8_t *mask, int64_t n,
                                   float p) {
  NG_CHECK(check_dropout("dropout_bwd", "grad", grad, mask, n, p));
  return n == 0 ? NG_OK : be->impl->dropout_bwd(be, grad, mask, n, p);
}

/* ---- loss and optimizer ---- */

/* n == 0 is still a result (loss 0, or a queued one), so the backend runs it. */
static ng_status front_xent(ng_backend *be, const float *logits, const int32_t *labels, int64_t n,
                            int64_t classes, float *grad, double *loss, int64_t *correct) {
  NG_CHECK(check_count("xent", "n", n));
  if (classes < 1)
    return ng__err(NG_ERR_INVALID_ARG, "xent: %lld classes; there must be at least one",
                   (long long)classes);
  NG_CHECK(check_ptr("xent", "logits", logits, n > 0));
  NG_CHECK(check_ptr("xent", "labels", labels, n > 0));
  return be->impl->xent(be, logits, labels, n, classes, grad, loss, correct);
}

/* The optimizer and the state buffers it needs. */
static ng_status check_opt(const ng_opt_hp *hp, const float *state1, const float *state2,
                           int64_t n) {
  if (hp->kind == NG_OPT_SGD)
    return check_ptr("opt_step", "state1 (SGD momentum buffer)", state1,
                     hp->momentum != 0.0f && n > 0);
  if (hp->kind != NG_OPT_ADAM)
    return ng__err(NG_ERR_INVALID_ARG, "opt_step: unknown optimizer %d", (int)hp->kind);
  if (hp->step < 1)
    return ng__err(NG_ERR_INVALID_ARG, "opt_step: Adam step %lld; steps count from 1",
                   (long long)hp->step);
  NG_CHECK(check_ptr("opt_step", "state1 (Adam first moment)", state1, n > 0));
  return check_ptr("opt_step", "state2 (Adam second moment)", state2, n > 0);
}

static ng_status front_opt_step(ng_backend *be, const ng_opt_hp *hp, float *param,
                                const float *grad, float *state1, float *state2, int64_t n) {
  NG_CHECK(check_ptr("opt_step", "hyper-parameters", hp, true));
  NG_CHECK(check_count("opt_step", "n", n));
  NG_CHECK(check_ptr("opt_step", "param", param, n > 0));
  NG_CHECK(check_ptr("opt_step", "grad", grad, n > 0));
  NG_CHECK(check_opt(hp, state1, state2, n));
  return n == 0 ? NG_OK : be->impl->opt_step(be, hp, param, grad, state1, state2, n);
}

/* ---- link prediction ---- */

static ng_status front_pair_dot(ng_backend *be, float *out, const float *h, const int32_t *u,
                                const int32_t *v, int64_t n, int64_t dim) {
  NG_CHECK(check_count("pair_dot", "n", n));
  if (dim < 1)
    return ng__err(NG_ERR_INVALID_ARG, "pair_dot: dim is %lld; it must be >= 1", (long long)dim);
  if (n == 0)
    return NG_OK;
  NG_CHECK(check_ptr("pair_dot", "out", out, true));
  NG_CHECK(check_ptr("pair_dot", "h", h, true));
  NG_CHECK(check_ptr("pair_dot", "u", u, true));
  NG_CHECK(check_ptr("pair_dot", "v", v, true));
  /* The rows' upper bound is h's row count, which the op is not told; a negative row is wrong
   * whatever h is, and host memory can be read here to say so (a device checks nothing). */
  if (be->impl->host_memory)
    for (int64_t i = 0; i < n; i++)
      if (u[i] < 0 || v[i] < 0)
        return ng__err(NG_ERR_INVALID_ARG, "pair_dot: pair %lld has rows (%d, %d); rows are >= 0",
                       (long long)i, (int)u[i], (int)v[i]);
  return be->impl->pair_dot(be, out, h, u, v, n, dim);
}

/* ---- the front table ---- */

/* The ops the front checks. The others (destroy, free, sync, mem_info, host_free,
 * host_unregister, pci_bus_id, host_view, set_precision, warm_start, warm_wait, xent_result,
 * sampler_destroy, side_begin, side_end, side_join) take nothing the front could validate that the
 * backend does not know better, so the front holds the backend's own pointers there. */
#define NG_FRONT_OPS(X)                                                                            \
  X(alloc)                                                                                         \
  X(host_alloc)                                                                                    \
  X(host_register)                                                                                 \
  X(copy_h2d)                                                                                      \
  X(copy_d2h)                                                                                      \
  X(copy_d2d)                                                                                      \
  X(copy_h2d_async)                                                                                \
  X(wait_copy)                                                                                     \
  X(mark)                                                                                          \
  X(wait_mark)                                                                                     \
  X(copy_ops_begin)                                                                                \
  X(copy_ops_end)                                                                                  \
  X(fill)                                                                                          \
  X(event_record)                                                                                  \
  X(sampler_create)                                                                                \
  X(sampler_run)                                                                                   \
  X(event_elapsed)                                                                                 \
  X(gather_rows)                                                                                   \
  X(aggr_fwd)                                                                                      \
  X(aggr_bwd)                                                                                      \
  X(aggr_user_bwd)                                                                                 \
  X(aggr_partial)                                                                                  \
  X(pstate_merge)                                                                                  \
  X(pstate_finalize)                                                                               \
  X(scatter_rows)                                                                                  \
  X(aggr_partial_bf16)                                                                             \
  X(scatter_rows_bf16)                                                                             \
  X(add_self_loop)                                                                                 \
  X(attn_fwd)                                                                                      \
  X(attn_bwd)                                                                                      \
  X(gemm)                                                                                          \
  X(gemm_bias_act)                                                                                 \
  X(add)                                                                                           \
  X(bias_act_fwd)                                                                                  \
  X(bias_act_bwd)                                                                                  \
  X(dropout_fwd)                                                                                   \
  X(dropout_bwd)                                                                                   \
  X(xent)                                                                                          \
  X(opt_step)                                                                                      \
  X(pair_dot)

/* A slot impl leaves NULL (an optional op it lacks) stays NULL, so that callers still see that
 * the backend has no such op. */
void ng__backend_init(ng_backend *be, const struct ng_backend_i *impl, void *ctx) {
  be->impl = impl;
  be->ctx = ctx;
  be->front = *impl;
#define NG_FRONT_WRAP(op)                                                                          \
  if (impl->op)                                                                                    \
    be->front.op = front_##op;
  NG_FRONT_OPS(NG_FRONT_WRAP)
#undef NG_FRONT_WRAP
  be->iface = &be->front;
}
