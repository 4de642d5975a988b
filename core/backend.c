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
