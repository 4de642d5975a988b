/* Hot-set scores and the permutation that puts the hottest nodes first (runtime/tiering.c).
 * Everything here is OpenMP parallel and deterministic: the output does not depend on the
 * number of threads (fixed partitions, no floating-point atomics). */
#ifndef NG_TIERING_IMPL_H
#define NG_TIERING_IMPL_H

#include "core_impl.h"
#include "graph_impl.h"

/// The damping factor of the reverse PageRank scores (the usual PageRank value).
#define NG_HOT_DAMPING 0.85

/// Scores every node of `g` into `out[g->nodes]`:
///  - NG_HOT_DEGREE: the in-degree;
///  - NG_HOT_RPR: r <- (1 - d) t + d (A r + m t) for `iterations` steps from r = t, where
///    (A r)[u] = sum over rows v that hold u of r[v] / len(v), m is the rank of empty rows and
///    t is uniform (1 / n);
///  - NG_HOT_WRPR: the same with t uniform over the `n_train` ids `train` (which must be
///    non-empty) and, as in the weighted reverse PageRank of Min et al. (data tiering), a start
///    vector that weights training nodes by n / n_train against 1 for the others (normalised).
/// The PageRank scores sum to 1. `threads` 0 uses the OpenMP default; `progress` may be NULL.
ng_status ng__hot_scores(double *out, const ng_csr *g, ng_hot_score kind, const int64_t *train,
                         int64_t n_train, int iterations, int threads, ng_progress *progress);

/// The permutation that sorts nodes by descending `score[n]`, ties by ascending id:
/// perm[old] = new. Scores must not be NaN.
ng_status ng__hot_order(int64_t *perm, const double *score, int64_t n, int threads);

#endif /* NG_TIERING_IMPL_H */
