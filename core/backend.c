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
  if (desc->user) {
    if (desc->self_loop)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "aggregator \"%s\": user aggregators take no self loop; combine the node "
                     "itself with a GraphSAGE layer instead",
                     desc->user->name ? desc->user->name : "(unnamed)");
    NG_CHECK(ng__aggregator_def_check(desc->user));
  }
  out->user = desc->user;
  out->reduce = desc->user ? NG_REDUCE_SUM : desc->reduce;
  out->weighted = desc->edge_weight == NG_EDGE_WEIGHT_GCN_NORM;
  out->self_loop = desc->self_loop != 0;
  out->mean = !desc->user && desc->finalize == NG_FINALIZE_MEAN;
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

int ng__minibatch_arrays(const ng_minibatch *mb, const void **src, size_t *bytes) {
  int n = 0;
  src[n] = mb->node_ids;
  bytes[n++] = (size_t)mb->blocks[0].n_src * sizeof(int64_t);
  for (int l = 0; l < mb->n_layers; l++) {
    const ng_block *b = &mb->blocks[l];
    const size_t dst1 = ((size_t)b->n_dst + 1) * sizeof(int32_t);
    const size_t e4 = (size_t)b->nnz * 4;
    src[n] = b->indptr, bytes[n++] = dst1;
    src[n] = b->indices, bytes[n++] = e4;
    if (b->edge_w) {
      src[n] = b->edge_w, bytes[n++] = e4;
      src[n] = b->self_w, bytes[n++] = (size_t)b->n_dst * sizeof(float);
    }
    if (b->t_indptr) {
      src[n] = b->t_indptr, bytes[n++] = ((size_t)b->n_src + 1) * sizeof(int32_t);
      src[n] = b->t_dst, bytes[n++] = e4;
      src[n] = b->t_eid, bytes[n++] = e4;
    }
  }
  return n;
}

void ng__minibatch_rebase(ng_minibatch *out, const ng_minibatch *mb, void *const *dst) {
  *out = *mb;
  int k = 0;
  out->node_ids = dst[k++];
  for (int l = 0; l < mb->n_layers; l++) {
    ng_block *b = &out->blocks[l];
    b->indptr = dst[k++];
    b->indices = dst[k++];
    if (b->edge_w) {
      b->edge_w = dst[k++];
      b->self_w = dst[k++];
    }
    if (b->t_indptr) {
      b->t_indptr = dst[k++];
      b->t_dst = dst[k++];
      b->t_eid = dst[k++];
    }
  }
}

size_t ng__minibatch_packed_bytes(const size_t *bytes, int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += (bytes[i] + 63) & ~(size_t)63;
  return total;
}

ng_status ng__sampler_cfg_check(const ng_sampler_cfg *cfg) {
  if (!cfg || !cfg->graph)
    return ng__err(NG_ERR_INVALID_ARG, "sampler: no configuration or graph given; set cfg->graph");
  const ng_csr *g = cfg->graph;
  if (!g->indptr || (!g->idx32) == (!g->idx64))
    return ng__err(NG_ERR_INVALID_ARG,
                   "sampler: the graph must have indptr and exactly one of idx32/idx64 set");
  if (g->nodes < 0)
    return ng__err(NG_ERR_INVALID_ARG, "sampler: graph of %lld nodes", (long long)g->nodes);
  if (cfg->n_layers < 1 || cfg->n_layers > NG_MAX_LAYERS)
    return ng__err(NG_ERR_INVALID_ARG, "sampler: %d layers; use 1 to %d", cfg->n_layers,
                   NG_MAX_LAYERS);
  for (int l = 0; l < cfg->n_layers; l++)
    if (cfg->fanout[l] < -1 || (cfg->fanout[l] == 0 && l > 0))
      return ng__err(
          NG_ERR_INVALID_ARG,
          "sampler: fanout %d of layer %d; use a positive count or -1 (all neighbours), or 0 "
          "(no neighbours) for layer 0",
          (int)cfg->fanout[l], l);
  return NG_OK;
}
