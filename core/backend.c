/* Backend-independent helpers of the backend interface. */
#include "backend_impl.h"

void ng__backend_destroy(ng_backend *be) {
  if (be && be->iface && be->iface->destroy)
    be->iface->destroy(be);
}

ng_status ng__aggr_from_public(ng_aggr *out, const ng_aggregator *desc) {
  if (!desc)
    return ng__err(NG_ERR_INVALID_ARG, "aggregator: NULL descriptor");
  if ((unsigned)desc->reduce > NG_REDUCE_MIN)
    return ng__err(NG_ERR_INVALID_ARG, "aggregator: unknown reduce %d", (int)desc->reduce);
  if ((unsigned)desc->edge_weight > NG_EDGE_WEIGHT_GCN_NORM)
    return ng__err(NG_ERR_INVALID_ARG, "aggregator: unknown edge weight %d",
                   (int)desc->edge_weight);
  if ((unsigned)desc->finalize > NG_FINALIZE_MEAN)
    return ng__err(NG_ERR_INVALID_ARG, "aggregator: unknown finalize %d", (int)desc->finalize);
  if (desc->reduce != NG_REDUCE_SUM && (desc->edge_weight != NG_EDGE_WEIGHT_NONE ||
                                        desc->self_loop || desc->finalize != NG_FINALIZE_NONE))
    return ng__err(NG_ERR_UNSUPPORTED,
                   "aggregator: MAX/MIN take no edge weight, self loop or MEAN finalize");
  out->reduce = desc->reduce;
  out->weighted = desc->edge_weight == NG_EDGE_WEIGHT_GCN_NORM;
  out->self_loop = desc->self_loop != 0;
  out->mean = desc->finalize == NG_FINALIZE_MEAN;
  out->drop_p = 0.0f;
  out->drop_key = 0;
  return NG_OK;
}

ng_status ng__bk_reserve(ng_backend *be, void **buf, size_t *cap, size_t bytes) {
  if (bytes <= *cap)
    return NG_OK;
  const size_t want = NG_MAX(bytes, *cap + *cap / 2);
  be->iface->free(be, *buf);
  *buf = NULL;
  *cap = 0;
  NG_CHECK(be->iface->alloc(be, buf, want));
  *cap = want;
  return NG_OK;
}

/* ---- argument checks shared by the backends ---- */

ng_status ng__bk_check_count(const char *op, const char *what, int64_t v) {
  if (v < 0)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s is %lld; it must be >= 0", op, what, (long long)v);
  return NG_OK;
}

ng_status ng__bk_check_ptr(const char *op, const char *what, const void *p, bool needed) {
  if (needed && !p)
    return ng__err(NG_ERR_INVALID_ARG, "%s: %s is NULL; pass a buffer of the documented size", op,
                   what);
  return NG_OK;
}

ng_status ng__bk_check_aggr(const char *op, const ng_aggr *ag, const ng_block *blk) {
  if (!ag)
    return ng__err(NG_ERR_INVALID_ARG, "%s: aggregator is NULL", op);
  if ((unsigned)ag->reduce > NG_REDUCE_MIN)
    return ng__err(NG_ERR_INVALID_ARG, "%s: unknown reduce %d", op, (int)ag->reduce);
  if (ag->reduce != NG_REDUCE_SUM && (ag->weighted || ag->self_loop || ag->mean))
    return ng__err(NG_ERR_UNSUPPORTED, "%s: MAX/MIN take no edge weight, self loop or MEAN", op);
  if (blk) {
    NG_CHECK(ng__bk_check_ptr(op, "block edge_w (the aggregator is weighted)", blk->edge_w,
                              ag->weighted && blk->nnz > 0));
    NG_CHECK(ng__bk_check_ptr(op, "block self_w (the aggregator has a self loop)", blk->self_w,
                              ag->self_loop && blk->n_dst > 0));
  }
  return NG_OK;
}

ng_status ng__bk_check_state(const char *op, const ng_pstate *st) {
  if (!st)
    return ng__err(NG_ERR_INVALID_ARG, "%s: state is NULL", op);
  NG_CHECK(ng__bk_check_count(op, "state n_dst", st->n_dst));
  NG_CHECK(ng__bk_check_count(op, "state dim", st->dim));
  NG_CHECK(ng__bk_check_ptr(op, "state val", st->val, st->n_dst > 0 && st->dim > 0));
  NG_CHECK(ng__bk_check_ptr(op, "state count", st->count, st->n_dst > 0));
  return NG_OK;
}

ng_status ng__bk_check_act(const char *op, ng_activation act) {
  if (act != NG_ACT_NONE && act != NG_ACT_RELU)
    return ng__err(NG_ERR_INVALID_ARG, "%s: unknown activation %d; use NG_ACT_NONE or NG_ACT_RELU",
                   op, (int)act);
  return NG_OK;
}

ng_status ng__bk_check_no_drop(const char *op, const ng_aggr *ag) {
  if (ag && ag->drop_p != 0.0f)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: the aggregator asks for input dropout, which only aggr_partial applies; "
                   "apply dropout_fwd to the input instead",
                   op);
  return NG_OK;
}

ng_status ng__bk_check_slot(const char *op, int slot) {
  if (slot < 0 || slot >= NG_BACKEND_MARKS)
    return ng__err(NG_ERR_INVALID_ARG, "%s: slot %d is not in [0, %d)", op, slot, NG_BACKEND_MARKS);
  return NG_OK;
}

ng_status ng__bk_check_dropout_p(const char *op, float p) {
  if (!(p >= 0.0f && p < 1.0f))
    return ng__err(NG_ERR_INVALID_ARG, "%s: drop probability %g is outside [0, 1)", op, (double)p);
  return NG_OK;
}
