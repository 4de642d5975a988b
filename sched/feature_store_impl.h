/* The tiered feature store and the device side of a tiered iteration (sched/feature_store.c).
 *
 * Hot tier: rows [0, H) of the features in backend memory (a copy on the GPU; on the CPU
 * backend the host table itself). Cold tier: the rest, in host memory; with ZCOPY it is
 * registered so that the device reads it directly. ng__store_input turns the package of
 * cpu/fetch.c into the input layer's aggregation and self rows on the device, in the fixed
 * order hot partial, cold partial, merge (hot + cold), finalize, self loop. */
#ifndef NG_FEATURE_STORE_IMPL_H
#define NG_FEATURE_STORE_IMPL_H

#include "prof.h"
#include "fetch_impl.h"

/// Package slots the device buffers (the runtime's iter % (lookahead + 1)).
#define NG_STORE_SLOTS NG_BACKEND_MARKS

typedef struct {
  ng_backend *be;
  int64_t nodes, dim, hot;
  ng_fetch mode;
  const float *host;     ///< the host table [nodes, dim] (borrowed)
  const float *host_dev; ///< the kernels' view of the host table (ZCOPY), else NULL
  const float *cache;    ///< the kernels' view of the hot rows [hot, dim]
  float *cache_owned;    ///< backend memory of the hot rows, when the backend has its own
  /// NG_PRECISION_BF16 (ng__store_open_bf16): the tables hold bf16 values (core/bf16.h), in
  /// host16, host_dev16 and cache16, and host, host_dev and cache are NULL. Every read of them
  /// converts to fp32 (the backends' *_bf16 ops), so the results are the fp32 store's on the
  /// converted table.
  bool bf16;
  const uint16_t *host16, *host_dev16, *cache16;
  void *registered; ///< page-aligned start of the registered cold rows, or NULL
  /* Per-iteration buffers, grown to the largest mini-batch and reused. */
  void *work; ///< hot state, cold state, aggregation and self rows
  size_t work_cap;
  /// Per package slot: what the device reads from host memory for a package, queued ahead by
  /// ng__store_prefetch and consumed by ng__store_input: a ZCOPY package's cold part (cold
  /// state, self rows, the gathered rows), or what a PARTIAL package left to the device (its
  /// cold self rows, and with a device share the state of its last destinations and the rows
  /// it was reduced from). The last entry serves a package that was not prefetched.
  struct {
    void *buf;
    size_t cap;
    bool ready;
  } pre[NG_STORE_SLOTS + 1];
  ng_prof *prof;     ///< times the input layer's ops (borrowed; NULL: not timed)
  double upload_s;   ///< seconds ng__store_open spent copying the hot rows to the device
  double register_s; ///< seconds it spent registering the cold rows (ZCOPY)
} ng_store;

/// How many rows fit the hot tier: `cache_bytes` > 0 gives cache_bytes / row bytes, else a
/// `cache_ratio` in [0, 1] gives ratio * nodes, else (auto) as many as fit in half of the
/// backend's free memory, or all rows on a host-memory backend. Clamped to [0, nodes].
ng_status ng__store_hot_rows(int64_t *hot, ng_backend *be, int64_t nodes, int64_t dim,
                             int64_t cache_bytes, double cache_ratio);
/// The same for rows of `elem_bytes`-byte values (2 for bf16 tables: twice the rows fit).
ng_status ng__store_hot_rows_elem(int64_t *hot, ng_backend *be, int64_t nodes, int64_t dim,
                                  size_t elem_bytes, int64_t cache_bytes, double cache_ratio);

/// Opens the store: copies rows [0, hot) into backend memory (unless the backend's memory is
/// the host's) and, for ZCOPY, registers the cold rows (`read_only` when `features` is a
/// read-only mapping).
ng_status ng__store_open(ng_store *st, ng_backend *be, const float *features, int64_t nodes,
                         int64_t dim, int64_t hot, ng_fetch mode, bool read_only);
/// ng__store_open over a bf16 table (NG_PRECISION_BF16): the hot rows go to the device as bf16
/// (half the bytes a row) and ZCOPY registers the bf16 cold rows. The backend needs the *_bf16
/// ops (NG_ERR_UNSUPPORTED otherwise).
ng_status ng__store_open_bf16(ng_store *st, ng_backend *be, const uint16_t *features, int64_t nodes,
                              int64_t dim, int64_t hot, ng_fetch mode, bool read_only);
/// Whether the device reads the store's host table by zero-copy (a host_dev view, fp32 or bf16).
static inline bool ng__store_zcopy(const ng_store *st) {
  return st->host_dev != NULL || st->host_dev16 != NULL;
}
void ng__store_close(ng_store *st);

/// Queues, behind the copy of package slot `slot` (0 <= slot < NG_STORE_SLOTS) on the copy
/// engine's queue, the cold part of a ZCOPY package: the device gathers the package's unique
/// cold rows from host memory (one row per warp, every row in flight at once: zero-copy runs at
/// the link's rate only with that much parallelism), then reduces the cold edges and places the
/// cold self rows from that copy, all while it still computes the iteration before
/// (backend_impl.h, copy_ops_begin). For a PARTIAL package that left its cold self rows to the
/// device (ng_fetch_cfg.self_zcopy), the gather of those rows, and with a device share
/// (ng_fetch_cfg.device_share) the gather of its device edges' rows and their reduction. Does
/// nothing for other packages.
/// Same arguments as ng__store_input, which then uses the result.
ng_status ng__store_prefetch(ng_store *st, const ng_aggr *ag, const ng_fetch_pkg *dev_pkg,
                             float drop_p, uint64_t drop_key, int slot);

/// The input layer of one iteration on the device from `dev_pkg`, the package as the device
/// sees it (ng__fetch_rebase of a copy, or the host package on a host-memory backend) built
/// with the same drop_p / drop_key: queues the computation of agg [n_dst, dim] and self
/// [n_dst, dim] (self rows after dropout) in backend memory, for ops queued before the next
/// call (agg lives in the store's shared work memory; self too, or, when the device read the
/// cold self rows from host memory, in the slot's memory, which the slot's next prefetch
/// overwrites). `slot` is the package's slot: what
/// ng__store_prefetch queued there is used (bit for bit the same as computing it here), or -1.
ng_status ng__store_input(ng_store *st, const ng_aggr *ag, const ng_fetch_pkg *dev_pkg,
                          float drop_p, uint64_t drop_key, int slot, const float **agg,
                          const float **self);

#endif /* NG_FEATURE_STORE_IMPL_H */
