/* The serving engine's cache of layer-0 outputs (serve/ecache.c; docs/serving-engine.md, "Cached
 * layer-0 outputs").
 *
 * For full-neighbourhood requests on a model whose input layer is a parameter-free aggregation
 * (GraphSAGE mean/sum/max, GCN, GIN; not GAT or SAGE-pool, ng__model_raw_input) with two layers
 * or more, the engine keeps each node's layer-0 output (after the activation: what layer 1
 * reads), tagged with the snapshot version it was computed on. A batch then builds the field of
 * its targets over layers 1 .. L-1 only, looks up the layer-0 rows of that field's input nodes,
 * computes the missing ones through the engine's own input path (a field of depth 1, the tiers
 * and the strategies), inserts them, and runs layers 1 .. from the rows.
 *
 * The version rule (why a batch on an older snapshot never lets a newer one read a stale row):
 * - the cache holds `version`, the newest snapshot whose update it has invalidated;
 *   ng__ecache_invalidate runs before that snapshot is published, under the cache's lock;
 * - invalidation records, per base node, the version of the last update that changed its row;
 * - a row of node v computed on snapshot V is inserted (tagged V) only when no update after V
 *   changed it: while `version` == V, or when v's recorded version is at most V (an added node,
 *   which has no record, only while `version` == V). So under a steady stream of updates,
 *   batches that straddle a commit still fill the cache with the rows the commit left alone;
 * - a batch on snapshot V reads an entry tagged v only when v <= V: an entry in the cache was
 *   valid from v through `version` (every update since v that changed it removed it), and
 *   V <= `version`, so it is valid at V; an entry of a newer snapshot is not read.
 * So an entry is never read on a snapshot where its inputs differ from where it was computed. */
#ifndef NG_SERVE_ECACHE_IMPL_H
#define NG_SERVE_ECACHE_IMPL_H

#include "engine_impl.h"
#include "model_impl.h"

typedef struct ng_ecache ng_ecache;
typedef struct ng_ecache_work ng_ecache_work;

/// Counters of the cache (monotonic).
typedef struct {
  int64_t hits, misses, evictions, invalidations;
  int64_t entries, capacity; ///< rows held now, and the most it holds
} ng_ecache_stats;

/// Whether the cache serves model `m` (two layers or more, an input layer that aggregates raw
/// rows without parameters).
bool ng__ecache_supports(const struct ng_model *m);

/// A cache of at most `bytes` of layer-0 rows of model `m` (borrowed), starting at snapshot `s`
/// (borrowed: its delta rows seed the out-neighbour index of edges that updates added). *out is
/// NULL when `bytes` is 0 or the model is not supported (the cache is off).
ng_status ng__ecache_create(ng_ecache **out, const struct ng_model *m, const ng_srv_snap *s,
                            int64_t bytes);
void ng__ecache_destroy(ng_ecache *c);
/// Builds now what invalidation needs for any update (the base graph's out-neighbours), so that
/// the first update does not pay for it while requests wait: called at start-up by an engine
/// that takes updates. c may be NULL (no cache).
ng_status ng__ecache_prepare_updates(ng_ecache *c);
void ng__ecache_stats_get(ng_ecache_stats *out, ng_ecache *c);

/// Removes every entry that update `u` changes (`resized`: the nodes whose row length it
/// changed, from ng__srv_snap_apply_into): a replaced feature row's node and its
/// out-neighbours, an added or removed edge's destination, and under GCN weights (gcn0: layer
/// 0's) the out-neighbours of a node whose degree changed. Then sets the cache's version to
/// `version`, the snapshot's with u applied. Call it for every update, in the log's order, after
/// the update is durable and before a snapshot with it is published. c may be NULL.
void ng__ecache_invalidate(ng_ecache *c, const ng_graph_update *u, const ng_srv_resized *resized,
                           uint64_t version, bool gcn0);

/// How a batch's missing layer-0 rows are computed: `layer0` runs the engine's forward pass of
/// the model over `mb` (L blocks; block 0 the depth-1 field of the missing nodes, the upper
/// blocks placeholders) on snapshot `s`; afterwards ex->ws[0].out's first rows are their
/// layer-0 outputs. *hot_rows and *cold_rows get the input rows it read by tier.
typedef ng_status (*ng_ecache_layer0_fn)(void *arg, const ng_srv_snap *s, const ng_minibatch *mb,
                                         int64_t *hot_rows, int64_t *cold_rows);

/// What one batch needs: the executor and backend the engine runs on (borrowed), the field
/// builder of the batch's upper layers (borrowed), the GCN flags of each layer and the layer-0
/// callback.
typedef struct {
  ng_model_exec *ex;
  ng_backend *be;
  const struct ng_model *model;
  ng_srv_field *field;
  const bool *gcn;
  ng_ecache_layer0_fn layer0;
  void *arg;
} ng_ecache_ctx;

/// Per-thread memory of ng__ecache_forward (one per thread that runs batches).
ng_status ng__ecache_work_create(ng_ecache_work **out);
void ng__ecache_work_destroy(ng_ecache_work *w, ng_backend *be);

/// The forward pass of the full-neighbourhood batch of `n_targets` distinct `targets` on
/// snapshot `s` from cached layer-0 rows: afterwards ex->ws[l].out holds layer l's output, its
/// first n_targets rows the targets' (layer 0's too), as the engine's forward leaves them.
ng_status ng__ecache_forward(ng_ecache *c, ng_ecache_work *w, const ng_ecache_ctx *cx,
                             const ng_srv_snap *s, const int64_t *targets, int32_t n_targets,
                             int64_t *hot_rows, int64_t *cold_rows);

/* ---- prefill (`neargnn embed --layer 0 --for-serve`, `serve --embedding-cache-prefill`) ---- */

/// The format of the file beside a prefill's rows, FILE.prefill.json, which names what they were
/// computed from.
#define NG_PREFILL_FORMAT "neargnn-embedding-prefill"
#define NG_PREFILL_VERSION 1
#define NG_PREFILL_SUFFIX ".prefill.json"

/// The hash that names a file's bytes in FILE.prefill.json (64 bits; a check that the same file
/// is meant, not a defence against a forged one): little-endian 8-byte words w mixed as
/// h = ((h ^ w) * 0x9E3779B97F4A7C15) ^ (h >> 29) from h = 0xcbf29ce484222325, the last partial
/// word zero-padded, then the byte count mixed in the same way. `neargnn embed` writes it with
/// its own copy of these lines (apps/ sees the public API only); tests/cli_embed.sh checks that
/// both agree.
ng_status ng__prefill_hash_file(uint64_t *out, const char *path);

/// Writes into `buf` (cap bytes) the FILE.prefill.json that rows of layer 0 of `dim` columns
/// for every node of `ds`, computed with `checkpoint`, have: what `neargnn embed --for-serve`
/// writes. NG_ERR_INVALID_ARG for a dataset without a folder.
ng_status ng__prefill_meta(char *buf, size_t cap, const struct ng_dataset *ds,
                           const char *checkpoint, int64_t dim);

/// Loads the layer-0 rows of `path` (a float32 .npy [nodes, dim] of every base node, as `neargnn
/// embed --layer 0` writes it) into the cache at the engine's start, after its log was replayed
/// into snapshot `s`. `path`.prefill.json must name the same dataset `ds` and the same
/// `checkpoint` (NG_ERR_FORMAT naming what differs otherwise). Rows are taken in node order
/// until the cache is full; a row that the replayed updates changed (its node's neighbour row or
/// feature row replaced, or a neighbour's feature row replaced, or under GCN weights (gcn0) a
/// neighbour's degree) is left out, so that every entry equals what the engine computes on `s`.
/// c NULL (the cache is off, or the model is one it does not serve) is NG_ERR_INVALID_ARG saying
/// which. *rows gets the rows loaded.
ng_status ng__ecache_prefill(ng_ecache *c, int64_t *rows, const char *path,
                             const struct ng_model *m, const ng_srv_snap *s,
                             const struct ng_dataset *ds, const char *checkpoint, bool gcn0);

/// Test hook: fn(arg) runs in a batch that computed missing rows, after it computed them on its
/// snapshot and before it inserts them (set it while no batch runs; NULL: none).
void ng__ecache_test_before_insert(ng_ecache *c, void (*fn)(void *), void *arg);
/// Test hook: the entry of node v in the cache (its version in *version), or NULL.
bool ng__ecache_test_has(ng_ecache *c, int64_t v, uint64_t *version);

#endif /* NG_SERVE_ECACHE_IMPL_H */
