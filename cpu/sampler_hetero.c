/* Per-relation uniform neighbour sampling without replacement (cpu/sampler_hetero_impl.h).
 *
 * Each (block, relation, destination) draws k of its row's n positions from its own stream:
 * Floyd's algorithm (ng__floyd_sorted, the homogeneous sampler's) over m = min(k, n - k)
 * positions, the kept ones when k <= n / 2 and the excluded ones otherwise, so neighbours keep
 * their row order. One id table per node type (core/idmap.h) gives each node one local id in
 * every layer. Single-threaded per mini-batch, as the homogeneous sampler: workers sample
 * different mini-batches in parallel. */
#include "sampler_hetero_impl.h"
#include "idmap.h"
#include "rng.h"
#include "sampler_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t *ids; /* global ids of the type, in local order */
  int32_t n;
  size_t cap;
  ng_idmap map;
} type_list;

/* Room for `more` new ids of type list `t`. */
static ng_status reserve(type_list *t, int64_t more) {
  const int64_t need = (int64_t)t->n + more;
  if (need > INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "heterogeneous sampler: more than 2^31 - 1 nodes of one type in a mini-batch; "
                   "use smaller batches or fanouts");
  if ((size_t)need > t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 1024;
    while (cap < (size_t)need)
      cap *= 2;
    int64_t *ids = realloc(t->ids, cap * sizeof *ids);
    if (!ids)
      return ng__err(NG_ERR_NOMEM, "heterogeneous sampler: out of memory for %zu node ids", cap);
    t->ids = ids;
    t->cap = cap;
  }
  return ng__idmap_reserve(&t->map, (size_t)need, t->ids, t->n, "the sampler's id table");
}

static ng_status check_cfg(const ng_hetero_sampler_cfg *c, const int64_t *targets,
                           int32_t n_targets) {
  if (c->n_layers < 1 || c->n_layers > NG_MAX_LAYERS || c->n_types < 1 || c->n_rels < 1 ||
      c->target_type < 0 || c->target_type >= c->n_types || !c->csr || !c->rel_src || !c->rel_dst ||
      !c->fanouts)
    return ng__err(NG_ERR_INVALID_ARG,
                   "heterogeneous sampler: %d hops (1 to %d), %d types, %d relations, target type "
                   "%d: a configuration out of range",
                   (int)c->n_layers, NG_MAX_LAYERS, (int)c->n_types, (int)c->n_rels,
                   (int)c->target_type);
  for (int32_t r = 0; r < c->n_rels; r++)
    if (c->rel_src[r] < 0 || c->rel_src[r] >= c->n_types || c->rel_dst[r] < 0 ||
        c->rel_dst[r] >= c->n_types || !c->csr[r])
      return ng__err(NG_ERR_INVALID_ARG, "heterogeneous sampler: relation %d is malformed", (int)r);
  for (int32_t i = 0; i < c->n_layers * c->n_rels; i++)
    if (c->fanouts[i] < -1)
      return ng__err(NG_ERR_INVALID_ARG,
                     "heterogeneous sampler: fanout %d of block %d, relation %d; -1 (all), 0 "
                     "(none) or a count",
                     (int)c->fanouts[i], (int)(i / c->n_rels), (int)(i % c->n_rels));
  if (n_targets < 1 || !targets)
    return ng__err(NG_ERR_INVALID_ARG, "heterogeneous sampler: no targets");
  return NG_OK;
}

void ng__hetero_minibatch_free(ng_hetero_minibatch *mb) {
  if (!mb)
    return;
  for (int32_t i = 0; mb->blocks && i < mb->n_layers * mb->n_rels; i++) {
    free((void *)mb->blocks[i].indptr);
    free((void *)mb->blocks[i].indices);
  }
  for (int32_t t = 0; mb->node_ids && t < mb->n_types; t++)
    free(mb->node_ids[t]);
  free(mb->node_ids);
  free(mb->n_nodes);
  free(mb->blocks);
  memset(mb, 0, sizeof *mb);
}

/* Samples block (l, r) into `b`, adding new source nodes to their type's list. */
static ng_status sample_block(ng_block *b, const ng_hetero_sampler_cfg *c, type_list *types,
                              int32_t l, int32_t r, int32_t n_dst, uint64_t seed, int64_t **pos,
                              int64_t *pos_cap) {
  const ng_csr *g = c->csr[r];
  const type_list *dst = &types[c->rel_dst[r]];
  type_list *src = &types[c->rel_src[r]];
  const int32_t k = c->fanouts[l * c->n_rels + r];
  int32_t *indptr = malloc(sizeof *indptr * ((size_t)n_dst + 1));
  int64_t cap = 0, nnz = 0;
  int32_t *indices = NULL;
  ng_status st = NG_OK;
  if (!indptr)
    return ng__err(NG_ERR_NOMEM, "heterogeneous sampler: out of memory for a block");
  indptr[0] = 0;
  const uint64_t hop_key = ng_hash2(seed, (uint64_t)l);
  for (int32_t i = 0; i < n_dst && st == NG_OK; i++) {
    const int64_t v = dst->ids[i];
    const int64_t lo = g->indptr[v], deg = g->indptr[v + 1] - lo;
    const int64_t take = k < 0 || k >= deg ? deg : k;
    /* The positions kept: all, or k drawn (or all but deg - k drawn), in row order. */
    const int64_t m = take == deg ? 0 : NG_MIN(take, deg - take);
    if (m > *pos_cap) {
      int64_t *p = realloc(*pos, sizeof *p * (size_t)m);
      if (!p) {
        st = ng__err(NG_ERR_NOMEM, "heterogeneous sampler: out of memory drawing a row");
        break;
      }
      *pos = p;
      *pos_cap = m;
    }
    if (m > 0) {
      ng_rng rng;
      ng_rng_seed(&rng, ng_hash3(hop_key, (uint64_t)r, (uint64_t)v));
      ng__floyd_sorted(*pos, m, deg, &rng);
    }
    if (nnz + take > INT32_MAX) {
      st = ng__err(NG_ERR_UNSUPPORTED,
                   "heterogeneous sampler: a block of more than 2^31 - 1 edges; use smaller "
                   "batches or fanouts");
      break;
    }
    if (nnz + take > cap) {
      cap = NG_MAX(2 * cap, nnz + take);
      cap = NG_MAX(cap, 1024);
      int32_t *p = realloc(indices, sizeof *p * (size_t)cap);
      if (!p) {
        st = ng__err(NG_ERR_NOMEM, "heterogeneous sampler: out of memory for a block");
        break;
      }
      indices = p;
    }
    NG_CHECK_GOTO(st, reserve(src, take), done);
    const ng_idmap_view view = ng__idmap_view(&src->map);
    if (m > 0 && m == take) { /* the drawn positions are the kept ones */
      for (int64_t j = 0; j < m; j++)
        indices[nnz++] = ng__idmap_add(view, ng__csr_index(g, lo + (*pos)[j]), src->ids, &src->n);
    } else { /* every position, or all but the drawn ones (then take > deg / 2) */
      for (int64_t p = 0, next = 0; p < deg; p++) {
        if (next < m && (*pos)[next] == p) {
          next++;
          continue;
        }
        indices[nnz++] = ng__idmap_add(view, ng__csr_index(g, lo + p), src->ids, &src->n);
      }
    }
    indptr[i + 1] = (int32_t)nnz;
  }
done:
  if (st != NG_OK) {
    free(indptr);
    free(indices);
    return st;
  }
  b->n_dst = n_dst;
  b->nnz = nnz;
  b->indptr = indptr;
  b->indices = indices ? indices : malloc(sizeof(int32_t));
  if (!b->indices) {
    free(indptr);
    b->indptr = NULL;
    return ng__err(NG_ERR_NOMEM, "heterogeneous sampler: out of memory for a block");
  }
  return NG_OK;
}

ng_status ng__hetero_sample(ng_hetero_minibatch *out, const ng_hetero_sampler_cfg *cfg,
                            const int64_t *targets, int32_t n_targets, uint64_t seed) {
  memset(out, 0, sizeof *out);
  NG_CHECK(check_cfg(cfg, targets, n_targets));
  const int32_t T = cfg->n_types, R = cfg->n_rels, L = cfg->n_layers;
  type_list *types = ng__calloc((size_t)T, sizeof *types, "the sampler's type lists");
  out->n_layers = L;
  out->n_types = T;
  out->n_rels = R;
  out->n_nodes = ng__calloc((size_t)(L + 1) * (size_t)T, sizeof *out->n_nodes, "node counts");
  out->node_ids = ng__calloc((size_t)T, sizeof *out->node_ids, "node ids");
  out->blocks = ng__calloc((size_t)L * (size_t)R, sizeof *out->blocks, "blocks");
  int64_t *pos = NULL, pos_cap = 0;
  ng_status st = NG_OK;
  if (!types || !out->n_nodes || !out->node_ids || !out->blocks) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int32_t t = 0; t < T; t++)
    ng__idmap_clear(&types[t].map);
  type_list *tt = &types[cfg->target_type];
  NG_CHECK_GOTO(st, reserve(tt, n_targets), done);
  for (int32_t i = 0; i < n_targets; i++) {
    const int64_t v = targets[i];
    if (v < 0 || ng__idmap_find(ng__idmap_view(&tt->map), v) >= 0) {
      st = ng__err(NG_ERR_INVALID_ARG,
                   "heterogeneous sampler: target %lld (position %d) is negative or repeated; "
                   "targets are distinct ids of the target type",
                   (long long)v, (int)i);
      goto done;
    }
    ng__idmap_add(ng__idmap_view(&tt->map), v, tt->ids, &tt->n);
  }
  for (int32_t t = 0; t < T; t++)
    out->n_nodes[L * T + t] = types[t].n;
  for (int32_t l = L - 1; l >= 0; l--) {
    for (int32_t r = 0; r < R; r++) {
      /* A destination id must be a row of the relation's CSR. */
      const ng_csr *g = cfg->csr[r];
      const type_list *d = &types[cfg->rel_dst[r]];
      const int32_t n_dst = out->n_nodes[(l + 1) * T + cfg->rel_dst[r]];
      for (int32_t i = 0; i < n_dst; i++)
        if (d->ids[i] >= g->nodes) {
          st = ng__err(NG_ERR_INVALID_ARG,
                       "heterogeneous sampler: node %lld is not a row of relation %d (it has "
                       "%lld)",
                       (long long)d->ids[i], (int)r, (long long)g->nodes);
          goto done;
        }
      NG_CHECK_GOTO(
          st, sample_block(&out->blocks[l * R + r], cfg, types, l, r, n_dst, seed, &pos, &pos_cap),
          done);
    }
    for (int32_t t = 0; t < T; t++)
      out->n_nodes[l * T + t] = types[t].n;
    for (int32_t r = 0; r < R; r++)
      out->blocks[l * R + r].n_src = types[cfg->rel_src[r]].n;
  }
  for (int32_t t = 0; t < T; t++) {
    out->node_ids[t] = types[t].ids;
    types[t].ids = NULL;
  }
done:
  for (int32_t t = 0; types && t < T; t++) {
    free(types[t].ids);
    ng__idmap_free(&types[t].map);
  }
  free(types);
  free(pos);
  if (st != NG_OK)
    ng__hetero_minibatch_free(out);
  return st;
}
