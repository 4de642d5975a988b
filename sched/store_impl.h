/* The tiered feature store and the device side of a tiered iteration (sched/store.c).
 *
 * Hot tier: rows [0, H) of the features in backend memory (a copy on the GPU; on the CPU
 * backend the host table itself). Cold tier: the rest, in host memory; with ZCOPY it is
 * registered so that the device reads it directly. ng__store_input turns the package of
 * cpu/fetch.c into the input layer's aggregation and self rows on the device, in the fixed
 * order hot partial, cold partial, merge (hot + cold), finalize, self loop. */
#ifndef NG_STORE_IMPL_H
#define NG_STORE_IMPL_H

#include "fetch_impl.h"

typedef struct {
  ng_backend *be;
  int64_t nodes, dim, hot;
  ng_fetch mode;
  const float *host;     ///< the host table [nodes, dim] (borrowed)
  const float *host_dev; ///< the kernels' view of the host table (ZCOPY), else NULL
  const float *cache;    ///< the kernels' view of the hot rows [hot, dim]
  float *cache_owned;    ///< backend memory of the hot rows, when the backend has its own
  void *registered;      ///< page-aligned start of the registered cold rows, or NULL
  /* Per-iteration buffers, grown to the largest mini-batch and reused. */
  void *pkg_host; ///< package memory from be->host_alloc (pinned on CUDA)
  size_t pkg_host_cap;
  void *pkg_dev; ///< the package's device copy
  size_t pkg_dev_cap;
  void *work; ///< hot state, cold state, aggregation and self rows
  size_t work_cap;
} ng_store;

/// How many rows fit the hot tier: `cache_bytes` > 0 gives cache_bytes / row bytes, else a
/// `cache_ratio` in [0, 1] gives ratio * nodes, else (auto) as many as fit in half of the
/// backend's free memory, or all rows on a host-memory backend. Clamped to [0, nodes].
ng_status ng__store_hot_rows(int64_t *hot, ng_backend *be, int64_t nodes, int64_t dim,
                             int64_t cache_bytes, double cache_ratio);

/// Opens the store: copies rows [0, hot) into backend memory (unless the backend's memory is
/// the host's) and, for ZCOPY, registers the cold rows (`read_only` when `features` is a
/// read-only mapping).
ng_status ng__store_open(ng_store *st, ng_backend *be, const float *features, int64_t nodes,
                         int64_t dim, int64_t hot, ng_fetch mode, bool read_only);
void ng__store_close(ng_store *st);

/// The reserve callback of ng__fetch_prepare over the store's package memory (ctx: the store).
ng_status ng__store_reserve(void *ctx, size_t bytes, void **base);

/// The input layer of one iteration on the device from the host package `pkg` (built with the
/// same drop_p / drop_key): copies it over when the backend has its own memory, then computes
/// agg [n_dst, dim] and self [n_dst, dim] (self rows after dropout) in backend memory, valid
/// until the next call. Adds the bytes copied to pkg->stats.h2d_bytes.
ng_status ng__store_input(ng_store *st, const ng_aggr *ag, ng_fetch_pkg *pkg, float drop_p,
                          uint64_t drop_key, const float **agg, const float **self);

#endif /* NG_STORE_IMPL_H */
