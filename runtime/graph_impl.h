/* The graph utilities built on compressed sparse rows (ng_csr, core/csr_impl.h). */
#ifndef NG_GRAPH_IMPL_H
#define NG_GRAPH_IMPL_H

#include "csr_impl.h"

/* ---- graph utilities (runtime/graph.c). All are OpenMP parallel and deterministic: their
 * output does not depend on the number of threads. Arrays they return are owned by the caller
 * and freed with ng__csr_free(). ---- */

/// Allocates a CSR for `nodes` nodes and `nnz` entries (int32 indices when nodes < 2^31).
ng_status ng__csr_alloc(ng_csr *out, int64_t nodes, int64_t nnz);
/// Frees what ng__csr_alloc() or a utility below allocated; accepts a zeroed struct.
void ng__csr_free(ng_csr *g);
/// Out-degree (row length) of every node into `deg[nodes]`.
void ng__csr_row_degrees(const ng_csr *g, int64_t *deg);
/// In-degree (how often each node appears as a neighbour) into `deg[nodes]`.
ng_status ng__csr_in_degrees(const ng_csr *g, int64_t *deg);
/// Sorts every row, then drops duplicate entries and (when `drop_self_loops`) entries (v, v),
/// compacting in place; `g->nnz` and `g->indptr` are updated. Reports the removed counts.
ng_status ng__csr_sort_dedup(ng_csr *g, bool drop_self_loops, int64_t *removed_dups,
                             int64_t *removed_loops);
/// The symmetric closure: every (u, v) also as (v, u), rows sorted, duplicates removed.
ng_status ng__csr_symmetrize(ng_csr *out, const ng_csr *g);
/// Renumbers nodes: new id of old node v is perm[v] (a permutation of [0, nodes)); row perm[v]
/// of `out` holds the renumbered neighbours of v in their original order.
ng_status ng__csr_relabel(ng_csr *out, const ng_csr *g, const int64_t *perm);
/// Checks that `perm` is a permutation of [0, n) (NG_ERR_INVALID_ARG names the first problem).
ng_status ng__perm_check(const int64_t *perm, int64_t n);

/// Discrete power-law fit of positive integer samples (Clauset, Shalizi & Newman 2009): for
/// each candidate xmin, the approximate maximum-likelihood exponent
/// alpha = 1 + n / sum(ln(x / (xmin - 0.5))), keeping the xmin whose fitted tail is closest to
/// the data in Kolmogorov-Smirnov distance. Values < 1 are ignored. `xs` is sorted in place.
typedef struct {
  double alpha;   ///< fitted exponent (0 when there is too little data)
  int64_t xmin;   ///< the tail's lower bound
  int64_t n_tail; ///< samples >= xmin
  double ks;      ///< KS distance of the fit
} ng_powerlaw_fit;
ng_status ng__powerlaw_fit(ng_powerlaw_fit *out, int64_t *xs, int64_t n);

#endif /* NG_GRAPH_IMPL_H */
