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
  /// A partitioned hot tier (ng__store_open_part, docs/distributed.md): the hot rows [0, hot)
  /// are striped over `parts` >= 1 parts, row g in part g % parts at row g / parts
  /// (ng__part_of, ng__part_row); this store holds part `part` (cache_owned, part_rows rows)
  /// and reads the others through part_ptr (its peers' parts, opened by CUDA IPC), so that
  /// `cache` and `cache16` are NULL. Each iteration the device gathers the hot rows the
  /// package lists (ng_fetch_cfg.hot_gather) into hot_rows, then reduces over them. 0: the hot
  /// tier is this store's own copy of rows [0, hot) (replicated).
  int parts, part;
  int64_t part_rows;
  const void *part_ptr[NG_MAX_PARTS];
  void *part_opened[NG_MAX_PARTS]; ///< parts this store opened (ipc_open), closed with it
  void *hot_rows;                  ///< [n_hot_rows, dim] fp32, the gathered hot rows
  size_t hot_rows_cap;
} ng_store;

/// The part that holds hot row g of a tier striped over `parts` parts, and g's row in it.
/// Striping by g mod R rather than slicing [0, R x H) into R ranges: the rows are ordered by
/// hotness, so each part gets an equal share of every hotness level, and the peer reads of an
/// iteration spread evenly over the GPUs instead of all landing on the GPU holding the hottest
/// slice.
static inline int ng__part_of(int64_t g, int parts) {
  return (int)(g % parts);
}
static inline int64_t ng__part_row(int64_t g, int parts) {
  return g / parts;
}
/// Rows part `part` of `hot` rows striped over `parts` parts holds: ceil((hot - part) / parts).
static inline int64_t ng__part_rows(int64_t hot, int parts, int part) {
  return hot > part ? (hot - part + parts - 1) / parts : 0;
}

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

/// Opens the store with a partitioned hot tier: rows [0, hot) striped over `parts` parts
/// (1 <= parts <= NG_MAX_PARTS), of which this store copies part `part` into backend memory
/// (at least one row's allocation, so that it can be exported); `elem` 4 (fp32 `features`) or
/// 2 (bf16). The other parts are attached with ng__store_part_attach before the first
/// ng__store_input. ZCOPY registers rows [hot, nodes) as ng__store_open does.
ng_status ng__store_open_part(ng_store *st, ng_backend *be, const void *features, size_t elem,
                              int64_t nodes, int64_t dim, int64_t hot, int parts, int part,
                              ng_fetch mode, bool read_only);
/// Writes the NG_IPC_HANDLE_BYTES handle of this store's part (the backend's ipc_export).
ng_status ng__store_part_export(ng_store *st, void *handle);
/// Attaches the other parts: ptrs[p] for p != st->part (ptrs[st->part] is ignored), as the
/// backend's kernels address them; `opened`: they came from ipc_open and are closed with the
/// store.
void ng__store_part_attach(ng_store *st, void *const *ptrs, bool opened);

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
