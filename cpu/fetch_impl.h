/* The CPU side of a tiered iteration (cpu/fetch.c): splits the input layer of a sampled
 * mini-batch into its hot part (sources with global id < H, whose rows are in the device's hot
 * tier) and its cold part, and does the cold part's host work for one fetch strategy, writing
 * everything the device needs into one contiguous package that a single copy moves.
 *
 * The device then computes the input layer's aggregation as
 *     finalize(merge(partial(hot edges), partial(cold edges))) (+ the self loop)
 * in that fixed order, whatever the strategy: PARTIAL reduces the cold edges here, BATCH stages
 * the cold rows for the device to reduce, ZCOPY lets the device read them from host memory. The
 * reductions follow the operation order of cpu/kernels_impl.h on both sides, and input dropout
 * is keyed by the row's global id wherever the row is read, so all three strategies give the
 * same bits (sched/feature_store.c assembles the device side). */
#ifndef NG_FETCH_IMPL_H
#define NG_FETCH_IMPL_H

#include "kernels_impl.h"
#include "sampler_impl.h"

/// An overlay over the feature table: the rows that replace some of the table's, or that add rows
/// past its end (serving's snapshot, serve/delta.c: rows an update replaced or added). The input
/// layer reads a row through it wherever it reads the table by node id, and a row it holds is
/// cold even when its id is below H (the hot tier holds the table's row). Training has none
/// (`row` NULL): every row is the table's, and the split and the reads are the plain pointer
/// computations, decided once per package.
typedef struct {
  /// Node v's row when the overlay holds one (borrowed for the package's fill), else NULL.
  const float *(*row)(const void *ctx, int64_t v);
  const void *ctx;
  /// The same over a bf16 table (features_bf16; `row` NULL then): node v's bf16 row, read as
  /// the table's own (the cooperative cold fetch's exchanged rows, sched/coop.c).
  const uint16_t *(*row16)(const void *ctx, int64_t v);
} ng_row_overlay;

/// What a fetcher needs to know about the run (borrowed pointers).
typedef struct {
  ng_fetch mode;
  int64_t hot;           ///< H: rows [0, H) are in the hot tier
  const float *features; ///< the host feature table [nodes, dim] (not read with features_bf16)
  /// NG_PRECISION_BF16: the host table in bf16 [nodes, dim] (core/bf16.h), read instead of
  /// `features`: staged rows travel as bf16 (half the bytes; fp32 when input dropout applies,
  /// converted and dropped here) and PARTIAL reduces converted rows into fp32 states. NULL: fp32.
  const uint16_t *features_bf16;
  /// nodes: the ids the mini-batches may hold (the table's rows, and with an overlay the rows
  /// it adds past them).
  int64_t nodes, dim;
  /// Rows read from the overlay instead of the table (without input dropout; the
  /// device never reads an overlaid row from host memory itself: ng__fetch_fill refuses such a
  /// package, see ng_fetch_plan.c.overlaid). Zero: the plain table.
  ng_row_overlay overlay;
  ng_aggr ag;  ///< the input layer's aggregator (drop_p/drop_key are set per iteration)
  int threads; ///< OpenMP threads for the host work (1 in pinned workers)
  const ng_cpu_kernels *kernels;
  /// The dataset's labels [nodes]: the targets' go into the package. NULL (serving): none.
  const int32_t *labels;
  /// PARTIAL leaves the cold self rows to the device, which reads them from host memory by
  /// zero-copy (set when the device has a zero-copy view of the table and rows are large
  /// enough for zero-copy to run at the link's rate): the host then reads each cold
  /// neighbour row once and writes only the states, instead of also copying the self rows
  /// into the package for the DMA engine to read again.
  bool self_zcopy;
  /// Package rows (staged rows, PARTIAL's states) go to a DMA engine: write them with
  /// non-temporal stores. False on a host-memory backend, whose device thread reads them right
  /// back from the caches.
  bool stream_rows;
  /// PARTIAL with self_zcopy: the share, in [0, 1], of the destinations (the last ones) whose
  /// cold edges the device reduces from rows it reads by zero-copy, as ZCOPY does, instead of
  /// the host. It moves cold-row reading from the workers to the link when the link has room
  /// (the hybrid controller's finest step, docs/scheduler.md); 0 otherwise.
  double device_share;
  /// A partitioned hot tier (docs/distributed.md): the device gathers the hot rows an iteration
  /// reads from the GPUs that hold them into rows of their own, one per hot local node, with
  /// input dropout, and reduces the hot edges over those rows. The package then lists the hot
  /// rows (hot_ids) and hot.indices and self_hot_ids are positions among them, not global ids.
  bool hot_gather;
} ng_fetch_cfg;

/// One iteration's package, everything the device needs for it: pointers into one contiguous buffer
/// of `bytes` bytes starting at `base`, so that a copy of the buffer plus ng__fetch_rebase gives
/// the device view.
typedef struct {
  void *base;
  size_t bytes;
  ng_fetch mode;
  int32_t n_dst;
  int64_t dim;
  /// The input block's edges split by tier, over the same n_dst destinations in edge order.
  /// hot.indices are global ids (rows of the hot cache); cold.indices are global ids (PARTIAL:
  /// rows of the host table) or positions among the staged rows (BATCH, ZCOPY, and PARTIAL's
  /// edges the device reduces). n_src is the row count of the table the indices address (at
  /// least n_dst). edge_w is set for weighted aggregators.
  ng_block hot, cold;
  /// The cold edges of destinations [0, n_host_dst) were reduced by the host into cold_state
  /// (PARTIAL); the device reduces those of the others, [n_host_dst, n_dst), from the staged
  /// rows: `device_cold` is that sub-block, its own indptr over those destinations and the
  /// last cold edges (BATCH, ZCOPY: n_host_dst 0 and the whole cold block; PARTIAL: none, or
  /// with cfg.device_share the last destinations' edges, indices counting the device's rows
  /// from 0).
  int32_t n_host_dst;
  ng_block device_cold;
  const float *self_w; ///< [n_dst] the self-loop weights, NULL without a self loop
  /// Self rows (the destinations' own features, rows [0, n_dst) of the layer's input), by tier:
  /// destination self_*_pos[i] reads row self_*_ids[i] of the hot cache / of the staged rows.
  int32_t n_self_hot, n_self_cold;
  const int32_t *self_hot_pos, *self_cold_pos;
  const int64_t *self_hot_ids, *self_cold_ids;
  /// cfg.hot_gather: the global ids of the hot local nodes, in local order (each hot source
  /// once, and the hot destinations), which the device gathers into hot rows 0 .. n_hot_rows;
  /// NULL (and 0) otherwise.
  int64_t n_hot_rows;
  const int64_t *hot_ids;
  /// The staged rows, with input dropout applied: BATCH the unique cold local nodes (each cold
  /// source once, and the cold destinations) and PARTIAL the cold self rows, copied here
  /// (`staged`); ZCOPY the same rows as BATCH, and PARTIAL with cfg.self_zcopy its cold self
  /// rows followed by the rows of the cold edges the device reduces (one per edge, in edge
  /// order), which the device gathers from host memory itself: the package holds only their
  /// global ids (`staged_ids`, `staged` NULL; PARTIAL's cold self row i is staged row i, and
  /// device_cold's index j is staged row n_self_cold + j).
  int64_t n_staged;
  const float *staged;
  /// NG_PRECISION_BF16 without input dropout: the staged rows as bf16, copied from the table as
  /// they are (`staged` NULL); the device converts them where it reads them. NULL otherwise.
  const uint16_t *staged16;
  const int64_t *staged_ids;
  /// PARTIAL: the bare reduction of the cold edges of destinations [0, n_host_dst) (its n_dst
  /// is n_host_dst) when the host reduced some cold edge; otherwise (and outside PARTIAL) n_dst
  /// 0 and val, count NULL, while n_host_dst keeps its value.
  ng_pstate cold_state;
  /// The rest of the mini-batch: blocks 1 .. n_layers-1 with every array (the transposes too),
  /// and blocks[0]'s counts only (its edges are the two sub-blocks above). node_ids is NULL:
  /// nothing after the input layer needs global ids.
  ng_minibatch mb;
  const int32_t *labels; ///< [mb.n_targets] the targets' labels
  ng_fetch_stats stats;  ///< h2d_bytes is left to whoever copies the package
} ng_fetch_pkg;

/// Per-thread scratch of the host work, reused across iterations (no steady-state allocation).
typedef struct {
  int32_t *stage_pos; ///< [n_src] position of each cold local node among the staged rows
  size_t cap;         ///< bytes
  int64_t *stage_ids; ///< [n_staged] global id of each row the host stages (BATCH, PARTIAL)
  size_t ids_cap;     ///< bytes
  int32_t *hot_pos;   ///< cfg.hot_gather: [n_src] position of each hot local node among hot_ids
  size_t hot_cap;     ///< bytes
  /// With an overlay: [n_src] whether each local node's row is the overlay's, and PARTIAL's
  /// cold rows gathered through it into a table of their own (rows by stage_pos), which the
  /// host's reduction then reads with the kernels training uses.
  uint8_t *overlaid;
  size_t overlaid_cap; ///< bytes
  float *rows;
  size_t rows_cap; ///< bytes
} ng_fetch_scratch;

void ng__fetch_scratch_free(ng_fetch_scratch *s);

/// acc += f, counter by counter: an epoch's or a run's totals.
static inline void ng__fetch_stats_add(ng_fetch_stats *acc, const ng_fetch_stats *f) {
  acc->hot_rows += f->hot_rows;
  acc->cold_rows += f->cold_rows;
  acc->h2d_bytes += f->h2d_bytes;
  acc->zcopy_bytes += f->zcopy_bytes;
  acc->cpu_cold_bytes += f->cpu_cold_bytes;
  acc->cold_edges += f->cold_edges;
  acc->destinations += f->destinations;
}

/// What one package will be, before any of it is written (ng__fetch_plan): its size, which the
/// caller gets memory of (a staging slot), and the counts its layout follows.
typedef struct {
  size_t bytes; ///< the memory ng__fetch_fill writes the package into (at least 1)
  float drop_p; ///< the input dropout it was planned with
  /// The layout's counts (cpu/fetch.c; ng__fetch_fill's alone).
  struct ng_fetch_counts {
    int64_t hot_nnz, cold_nnz, n_staged;
    int64_t n_hot_rows; ///< cfg.hot_gather: the hot local nodes
    int32_t n_self_hot, n_self_cold;
    int32_t n_host_dst; ///< destinations whose cold edges the host reduces (PARTIAL)
    int64_t host_nnz;   ///< their cold edges
    bool staged_bf16;   ///< staged rows stay bf16 (a bf16 table and no input dropout)
    int64_t cold_nodes; ///< local nodes whose rows are cold (the overlaid ones included)
    /// Local nodes whose rows the overlay holds (all cold). A package the device would read
    /// rows of from host memory (ZCOPY, PARTIAL's self_zcopy) cannot have any: plan it again
    /// with the rows staged (BATCH).
    int64_t overlaid;
  } c;
} ng_fetch_plan;

/// Plans the package of mini-batch `mb` (its blocks[0] is the input layer) with input dropout
/// `drop_p`: checks the configuration and counts what each tier gets (the first pass; nothing
/// is read from the feature table), writing `*plan` and the positions `scratch` keeps for the
/// fill. Run on its own, it is the dry run that sizes staging slots before the first epoch.
ng_status ng__fetch_plan(ng_fetch_plan *plan, const ng_fetch_cfg *cfg, const ng_minibatch *mb,
                         float drop_p, ng_fetch_scratch *scratch);

/// Writes the package `plan` describes into `base` (host memory of at least plan->bytes, which
/// the caller owns) with input dropout keyed by `drop_key`. `cfg`, `mb` and `scratch` must be
/// those of the plan, with no other plan made over `scratch` in between.
ng_status ng__fetch_fill(ng_fetch_pkg *out, const ng_fetch_plan *plan, const ng_fetch_cfg *cfg,
                         const ng_minibatch *mb, uint64_t drop_key, ng_fetch_scratch *scratch,
                         void *base);

/// The same package seen at `dev_base`, where a copy of its bytes lives.
void ng__fetch_rebase(ng_fetch_pkg *dev, const ng_fetch_pkg *host, void *dev_base);

#endif /* NG_FETCH_IMPL_H */
