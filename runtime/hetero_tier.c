/* Per-type hot tiers within one budget (runtime/hetero_impl.h, ng__hetero_hot_plan). The
 * homogeneous tiering (runtime/tiering.c) orders one table; here each type's rows are ordered by
 * in-degree (its ng__hot_order), then the types' orders merge by score per byte. */
#include "hetero_impl.h"
#include "tiering_impl.h"

#include <stdlib.h>
#include <string.h>

void ng__hetero_source_degree(double *deg, const struct ng_hetero *ds, int32_t t) {
  memset(deg, 0, (size_t)ds->ntypes[t].count * sizeof *deg);
  for (int32_t r = 0; r < ds->info.edge_types; r++) {
    const ng_csr *g = &ds->etypes[r].csr;
    if (ds->etypes[r].src != t)
      continue;
    for (int64_t e = 0; e < g->nnz; e++)
      deg[ng__csr_index(g, e)] += 1.0;
  }
}

void ng__hetero_hot_plan_free(ng_hetero_hot_plan *p) {
  if (!p)
    return;
  for (int32_t t = 0; p->ids && t < p->n_types; t++)
    free(p->ids[t]);
  free(p->ids);
  free(p->hot);
  memset(p, 0, sizeof *p);
}

ng_status ng__hetero_hot_plan(ng_hetero_hot_plan *out, const struct ng_hetero *ds, int64_t budget) {
  memset(out, 0, sizeof *out);
  NG_CHECK(ng__hetero_check((ng_hetero_t)ds));
  if (budget < 0)
    return ng__err(NG_ERR_INVALID_ARG, "hot tier plan: budget %lld bytes", (long long)budget);
  const int32_t T = ds->info.node_types;
  out->n_types = T;
  out->hot = ng__calloc((size_t)T, sizeof *out->hot, "the hot tier plan");
  out->ids = ng__calloc((size_t)T, sizeof *out->ids, "the hot tier plan");
  double **deg = ng__calloc((size_t)T, sizeof *deg, "the hot tier scores");
  ng_status st = out->hot && out->ids && deg ? NG_OK : NG_ERR_NOMEM;
  /* Each type with features: its ids by descending in-degree, ties by id. */
  for (int32_t t = 0; t < T && st == NG_OK; t++) {
    const int64_t n = ds->ntypes[t].count;
    if (ds->ntypes[t].feature_dim == 0 || n == 0)
      continue;
    deg[t] = ng__malloc((size_t)n * sizeof **deg, "the hot tier scores");
    int64_t *perm = ng__malloc((size_t)n * sizeof *perm, "the hot tier order");
    out->ids[t] = ng__malloc((size_t)n * sizeof **out->ids, "the hot tier order");
    if (!deg[t] || !perm || !out->ids[t]) {
      free(perm);
      st = NG_ERR_NOMEM;
      break;
    }
    ng__hetero_source_degree(deg[t], ds, t);
    st = ng__hot_order(perm, deg[t], n, 0);
    for (int64_t v = 0; v < n && st == NG_OK; v++)
      out->ids[t][perm[v]] = v;
    free(perm);
  }
  /* Merge: the best next row of any type that still fits, until none does. */
  int64_t left = budget;
  while (st == NG_OK) {
    int32_t best = -1;
    double best_score = 0.0;
    for (int32_t t = 0; t < T; t++) {
      const int64_t row = ds->ntypes[t].feature_dim * (int64_t)sizeof(float);
      if (!deg[t] || out->hot[t] == ds->ntypes[t].count || row > left)
        continue;
      const double score = deg[t][out->ids[t][out->hot[t]]] / (double)row;
      if (best < 0 || score > best_score) {
        best = t;
        best_score = score;
      }
    }
    if (best < 0)
      break;
    out->hot[best]++;
    left -= ds->ntypes[best].feature_dim * (int64_t)sizeof(float);
  }
  out->bytes = budget - left;
  for (int32_t t = 0; deg && t < T; t++)
    free(deg[t]);
  free(deg);
  if (st != NG_OK) {
    ng__hetero_hot_plan_free(out);
    return st;
  }
  /* Keep only the hot prefix of each order. */
  for (int32_t t = 0; t < T; t++) {
    if (!out->ids[t] || out->hot[t] == ds->ntypes[t].count)
      continue;
    if (out->hot[t] == 0) {
      free(out->ids[t]);
      out->ids[t] = NULL;
      continue;
    }
    int64_t *shrunk = realloc(out->ids[t], (size_t)out->hot[t] * sizeof *shrunk);
    if (shrunk)
      out->ids[t] = shrunk;
  }
  return NG_OK;
}
