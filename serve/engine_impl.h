/* The serving engine's internals (serve/): the versioned graph delta that online updates build
 * (serve/delta.c), its durable log, and the receptive-field builder that reads the graph through
 * it (serve/field.c). docs/serving-engine.md describes the design.
 *
 * The base dataset is never written: it stays memory-mapped. Every update makes a new immutable
 * snapshot, base + delta, in which the rows (neighbour lists) and feature rows it changed are
 * replaced by copies of their own. A batch holds one snapshot for its whole computation
 * (reference counted), so it never sees half of an update, and an update never waits for a
 * batch. */
#ifndef NG_SERVE_ENGINE_IMPL_H
#define NG_SERVE_ENGINE_IMPL_H

#include "backend_impl.h"
#include "csr_impl.h"
#include "neargnn_serve.h"

#include <stdatomic.h>

/* ---- snapshots of the graph: base + delta ---- */

/// A node's neighbour row that an update replaced: its whole new row (reference counted, shared
/// by the snapshots that have it).
typedef struct {
  atomic_int ref;
  int64_t n;
  int64_t ids[];
} ng_srv_row;

/// A feature row that an update replaced or added (already normalised as the model was
/// trained; reference counted).
typedef struct {
  atomic_int ref;
  float x[];
} ng_srv_feat;

/// Open addressing from node id to a row (key -1: an empty slot).
typedef struct {
  int64_t *keys;
  void **vals;
  size_t cap; /* a power of two, or 0 */
  size_t n;
} ng_srv_map;

/// One immutable version of the graph and its features.
typedef struct {
  atomic_int ref;
  uint64_t version; ///< updates applied
  int64_t nodes;    ///< base nodes + added ones
  ng_srv_map rows;  ///< node -> ng_srv_row *
  ng_srv_map feats; ///< node -> ng_srv_feat *
  const ng_csr *base;
  const float *base_x; ///< [base nodes, dim] (the mapping, or its normalised copy)
  int64_t dim;
  ng_normalize normalize;
} ng_srv_snap;

/// A view of node v's neighbour row in a snapshot (exactly one of i32/i64 set unless n == 0).
typedef struct {
  const int32_t *i32;
  const int64_t *i64;
  int64_t n;
} ng_srv_rowview;

/// The first snapshot: the base alone (refcount 1).
ng_status ng__srv_snap_base(ng_srv_snap **out, const ng_csr *base, const float *base_x, int64_t dim,
                            ng_normalize normalize);
void ng__srv_snap_ref(ng_srv_snap *s);
/// Drops a reference; the last one frees the snapshot and its rows no other snapshot shares.
void ng__srv_snap_unref(ng_srv_snap *s);
/// Node v's neighbour row (v < s->nodes).
void ng__srv_row(ng_srv_rowview *out, const ng_srv_snap *s, int64_t v);
static inline int64_t ng__srv_rowview_at(const ng_srv_rowview *r, int64_t i) {
  return r->i32 ? (int64_t)r->i32[i] : r->i64[i];
}
/// Node v's feature row, and whether it comes from the delta (a replaced or added row).
const float *ng__srv_feature(const ng_srv_snap *s, int64_t v, bool *overlay);
/// Whether node v's features were replaced or added by an update.
bool ng__srv_has_overlay(const ng_srv_snap *s, int64_t v);

/// What an update changed: an edge added twice, or one already there, counts once or not at all.
typedef struct {
  int64_t added_nodes, added_edges, removed_edges, updated_features;
} ng_srv_changes;

/// The nodes of the snapshot before an update whose neighbour row's length the update changed
/// (memory reused from update to update; free `ids` when done).
typedef struct {
  int64_t *ids;
  int64_t n, cap;
} ng_srv_resized;

/// Validates update `u` against `s` and builds the snapshot with it applied into *out (s is
/// not changed); *changes (may be NULL) gets what it changed. Errors: NG_ERR_INVALID_ARG naming
/// the bad entry, a feature row that is not finite after the model's normalisation included.
/// Costs a copy of s's delta: to apply many updates, fork once and apply them into the fork.
ng_status ng__srv_snap_apply(ng_srv_snap **out, const ng_srv_snap *s, const ng_graph_update *u,
                             ng_srv_changes *changes);
/// A private copy of `s` (its rows shared, by reference) for ng__srv_snap_apply_into.
ng_status ng__srv_snap_fork(ng_srv_snap **out, const ng_srv_snap *s);
/// Applies update `u` to `s` in place: s must be private (from ng__srv_snap_fork, not yet
/// published). Costs what the update touches, not the delta. On an error s is as it was. Its
/// version goes up by one when the update changed something. *resized (may be NULL) gets the
/// nodes whose row length changed.
ng_status ng__srv_snap_apply_into(ng_srv_snap *s, const ng_graph_update *u, ng_srv_changes *changes,
                                  ng_srv_resized *resized);

/* ---- the update log ---- */

struct ng_dataset;

/// What names the dataset a log was written for: its counts, a CRC-32 of its indptr and the
/// random id of its dataset.json (all zero when it has none).
typedef struct {
  int64_t nodes, edges, dim;
  uint32_t indptr_crc;
  uint8_t id[16];
} ng_srv_fingerprint;

/// The fingerprint of `ds` (reads the whole indptr: computed once, when a log is opened).
void ng__srv_fingerprint(ng_srv_fingerprint *out, const struct ng_dataset *ds);

/// The append-only log: a header naming the dataset, then one record per update whose header
/// and payload each carry a CRC-32.
typedef struct {
  int fd;
  char *path;
  uint64_t seq;        ///< records in the log
  int64_t length;      ///< bytes of valid log (the header and whole records)
  int64_t syncs;       ///< fdatasyncs of appended records since it was opened
  bool test_fail_next; ///< a test makes the next append fail as a failed write would
} ng_srv_log;

/// What ng__srv_log_open found and did.
typedef struct {
  int64_t replayed;    ///< records applied
  int64_t cut_offset;  ///< byte from which a torn tail was cut off (-1: nothing was cut)
  int64_t cut_bytes;   ///< bytes cut off
  const char *cut_why; ///< what was at cut_offset (a static string; NULL when nothing was cut)
  bool migrated;       ///< a version-1 log was rewritten in the current format
} ng_srv_log_report;

/// Opens (or creates) the log at `path` for the dataset `fp` names, replaying every record onto
/// *snap (replaced by the result). A damaged tail is cut off only when no valid record follows
/// it anywhere (a crash during an append; *rep says what was cut); a damaged record with a valid
/// one after it, a sequence gap or a log of another dataset is refused with NG_ERR_FORMAT naming
/// the offset. A version-1 log is replayed and rewritten in the current format.
ng_status ng__srv_log_open(ng_srv_log *log, const char *path, ng_srv_snap **snap,
                           const ng_srv_fingerprint *fp, ng_srv_log_report *rep);
/// Appends update `u` as one record and fsyncs it. On failure the log is cut back to where it
/// was, so that no half record stays.
ng_status ng__srv_log_append(ng_srv_log *log, const ng_graph_update *u, int64_t dim);
/// Appends the `n` updates `u` (borrowed) as n records with consecutive sequence numbers, in one
/// write and one fdatasync (group commit). On failure none of them stays: the log is cut back to
/// where it was.
ng_status ng__srv_log_append_group(ng_srv_log *log, const ng_graph_update *const *u, int n,
                                   int64_t dim);
void ng__srv_log_close(ng_srv_log *log);

/* ---- receptive fields ---- */

/// Reusable memory of the field builder (one per thread).
typedef struct ng_srv_field ng_srv_field;
ng_status ng__srv_field_create(ng_srv_field **out);
void ng__srv_field_destroy(ng_srv_field *f);

/// The blocks of the receptive field of `n_targets` `targets` in snapshot `s`, as the sampler
/// lays them out (cpu/sampler_impl.h): block l keeps fanout[l] neighbours of each destination
/// (-1: all, in row order). `seeds` NULL: every node once (the targets must be distinct), and no
/// fanout may draw. Otherwise target i samples with seeds[i]: a node reached from it draws from
/// the stream ng_hash3(seeds[i], l, v), and a node reached with two seeds is two local nodes
/// (the pairs (target, seed) must be distinct), so a node's neighbours never depend on the other
/// targets of the batch or their seeds. GCN weights where gcn[l]. The arrays live in `f` until
/// its next build. Clearing `f` for a build costs nothing, whatever its earlier builds held.
ng_status ng__srv_field_build(ng_minibatch *out, ng_srv_field *f, const ng_srv_snap *s,
                              int n_layers, const int32_t *fanout, const bool *gcn,
                              const uint64_t *seeds, const int64_t *targets, int32_t n_targets);
/// The edges of the unrolled receptive field of `targets` (counting a node reached twice twice),
/// counted up to `limit` (returns a value > limit as soon as it passes it).
int64_t ng__srv_field_estimate(const ng_srv_snap *s, int n_layers, const int32_t *fanout,
                               const int64_t *targets, int64_t n_targets, int64_t limit);

/* ---- test hooks (tests/test_serve_engine.c) ---- */

/// Holds both lanes (paused) or lets them go: while held they start no batch, so that a test can
/// let a queued request's deadline pass deterministically. ng_engine_destroy still drains.
void ng__engine_test_pause(ng_engine *e, bool paused);
/// Fixes the measured cost (microseconds per unit of work: estimated field edges plus nodes) that
/// admission predicts waits with; batches then do not update it. 0 returns to measuring.
void ng__engine_test_cost(ng_engine *e, double us_per_work);
/// Holds the next update group open until `k` updates are queued (its leader's included): the
/// leader takes its group, and so syncs, only then, so that a test can make k concurrent updates
/// share one fsync deterministically. 0: no hold. Applies to one group.
void ng__engine_test_group_hold(ng_engine *e, int k);
/// Updates queued and not yet taken into a group (ng_engine_apply callers waiting).
int ng__engine_test_updates_queued(ng_engine *e);
/// Makes the next group's log append fail as a failed write would.
void ng__engine_test_fail_append(ng_engine *e);

/// Arms (hold) or releases the hub hold: while armed, a lane that has taken a hub request waits
/// before computing it until released, as a hub that computes for ever would. The request is
/// taken (its deadline no longer applies); ng_engine_destroy waits for it, so release first.
void ng__engine_test_hold_hub(ng_engine *e, bool hold);
/// Waits up to `timeout_s` for a hub batch to wait in the hold; returns whether one does.
bool ng__engine_test_hub_held(ng_engine *e, double timeout_s);

#endif /* NG_SERVE_ENGINE_IMPL_H */
