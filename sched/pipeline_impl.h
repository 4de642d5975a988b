/* The pipeline of the hybrid runtime (sched/pipeline.c): runs an epoch's iterations with pinned
 * worker threads that sample and fetch (each by its group's strategy) and a device thread that
 * consumes them in iteration order, copying packages up to three iterations ahead, while the
 * feedback controller moves workers between the PARTIAL and TRANSFER groups. docs/scheduler.md
 * describes it. */
#ifndef NG_PIPELINE_IMPL_H
#define NG_PIPELINE_IMPL_H

#include <stdatomic.h>
#include "coop_impl.h"
#include "feature_store_impl.h"
#include "train_step_impl.h"

typedef struct ng_epoch_plan ng_epoch_plan;

/// The targets of an iteration that are not a slice of its plan's order, with a payload that
/// travels with the iteration's package to the device thread: link prediction makes the ends
/// of the iteration's node pairs its targets and carries the pairs' target rows to the loss
/// (runtime/link.c, docs/link-prediction.md; the loss is ng_host_loss, train_step_impl.h). An
/// upward hook (docs/architecture.md lists it): the runtime's function, which the pipeline's
/// producers call through this table.
typedef struct {
  /// Makes iteration `i` of plan `p`: *targets (*n of them, the sampler's seeds), valid until
  /// the same producer's next call, and *payload (*payload_bytes bytes, 0: none), which the
  /// pipeline copies behind the package into its staging slot. `producer` is the calling
  /// producer's index in [0, ng__pipeline_producers()): each producer calls one iteration at
  /// a time, producers concurrently, so what one writes must be its own. Everything it makes
  /// must depend on (p, i) only, never on the producer or the timing. An error fails the
  /// iteration as a failed fetch does.
  ng_status (*make)(void *ctx, int producer, const ng_epoch_plan *p, int64_t i,
                    const int64_t **targets, int32_t *n, const void **payload,
                    size_t *payload_bytes);
  void *ctx;
} ng_target_hook;

/// What an epoch (or the rest of one) is: iterations [first, iters) over `order`.
struct ng_epoch_plan {
  const int64_t *order; ///< the epoch's shuffled training ids (NULL with `targets`)
  int64_t n_train, batch;
  int64_t epoch, first, iters;
  uint64_t seed; ///< the run's seed (iteration seeds derive from it)
  /// A `next` plan's order may be left to the workers (the epoch's shuffle, which would
  /// otherwise keep the device idle between two epochs): when `shuffle_ids` is set, `order` is
  /// the caller's writable buffer of n_train ids, and the first worker between two iterations
  /// (or waiting for a plan) after the call publishes the plan writes the shuffle of
  /// shuffle_ids into it (ng__epoch_shuffle with the plan's seed and epoch), then sets
  /// *order_epoch (when given) to `epoch`, at most once; no worker reads the order before.
  /// Nothing writes it without workers, or when no worker comes by before the caller settles
  /// it (ng__pipeline_settle), which the caller must do before the next call; *order_epoch
  /// tells the caller whether it was written. Ignored on the current plan; plans compare equal
  /// whatever their `shuffle_ids`.
  const int64_t *shuffle_ids;
  int64_t *order_epoch;
  /// Data-parallel runs (docs/distributed.md): iteration i's global batch, order[i * batch ..
  /// + n_i), is cut into `ranks` slices and this process trains slice `rank` of it
  /// (ng__plan_slice). ranks 0 or 1: the whole batch.
  int rank, ranks;
  /// borrowed: where iteration i's targets come from when they are not order[i * batch ..
  /// + n_i) (ng_target_hook); NULL: from the order. Not with the device sampler, whose feed
  /// reads the order (NG_ERR_UNSUPPORTED), nor with several ranks.
  const ng_target_hook *targets;
};

/// The targets iteration `i` of plan `p` trains on this rank: order[*begin .. *begin + *n).
/// Slice r of a global batch of n_i targets is [floor(n_i r / R), floor(n_i (r + 1) / R)).
static inline void ng__plan_slice(const ng_epoch_plan *p, int64_t i, int64_t *begin, int32_t *n) {
  const int64_t b = i * p->batch, ni = p->n_train - b < p->batch ? p->n_train - b : p->batch;
  if (p->ranks <= 1) {
    *begin = b;
    *n = (int32_t)ni;
    return;
  }
  const int64_t lo = ni * p->rank / p->ranks, hi = ni * (p->rank + 1) / p->ranks;
  *begin = b + lo;
  *n = (int32_t)(hi - lo);
}

/// An epoch's running totals, handed down by the caller as data: the device thread adds each
/// finished iteration to them, in iteration order, and then reports progress (phase "train",
/// `done` of `iters` iterations) through `prog`, whose callback (the user's) may stop the epoch
/// with NG_ERR_INTERRUPTED. The totals move before that call, and the iterations counted stay
/// counted whatever the epoch call returns, so that a checkpoint written after a stop resumes
/// at iteration `done`.
typedef struct {
  double loss_sum; ///< the iterations' mean losses, each weighted by the rank's share of it
  int64_t correct; ///< correct predictions
  int64_t edges;   ///< sampled edges
  ng_fetch_stats fetch;
  double *iter_ms;   ///< the caller's [plan->iters]: ms between iterations finishing
  int64_t n_iter_ms; ///< entries of iter_ms written
  double last_done;  ///< ng__now() when the last iteration finished (the caller sets the start)
  int64_t done;      ///< iterations of the epoch finished (plan->first at the start)
  int64_t iters;     ///< the epoch's iterations (plan->iters), progress's total
  ng_progress *prog; ///< borrowed: the user's progress callback, or one without
  /// borrowed: a data-parallel run's ranks, which weight each rank's loss by its share of the
  /// global batch (ng__grad_loss_weight); NULL in a run of one process.
  const ng_grad_reduce *ranks;
} ng_epoch_tally;

typedef struct {
  ng_mode mode; ///< resolved: never AUTO
  int workers;  ///< > 0 threads, or -1 (inline)
  const char *cpuset;
  ng_fetch transfer; ///< BATCH or ZCOPY (resolved)
  int partial_workers;
  double period_ms, threshold;
  ng_telemetry_fn telemetry;
  void *telemetry_ctx;
  double telemetry_s;
  int omp_threads;     ///< OpenMP threads of the inline host work
  int lookahead;       ///< packages copied ahead of the device, 1 to NG_LOOKAHEAD_MAX
  double device_share; ///< HYBRID_STATIC: ng_train_opts.device_share (needs fetch->self_zcopy)
  int64_t trace_spans; ///< record a timeline of at most this many spans per thread (0: none)
  int ready_window;    ///< ng_train_opts.ready_window (0: the default, 4 x workers)
  /// Sample on the device with this sampler (the backend's, made for the sampler's graph) and
  /// hand the blocks to the workers through the sample feed (sched/feed_impl.h); NULL: each
  /// worker samples its iterations itself.
  ng_dev_sampler *dev_sampler;
  int feed_lanes; ///< threads (and sampler lanes) of the sample feed; the sampler has as many
  /// A data-parallel run's cold-row figures, and with exchange the cooperative cold fetch
  /// (sched/coop_impl.h, borrowed): each produced iteration runs ng__coop_step before its
  /// fetch and reads its cold rows through the step's overlay. Exchange needs the host work
  /// inline (workers -1). NULL: none.
  ng_coop *coop;
} ng_pipeline_opts;

/// A staging slot that must grow takes 1 + 1 / NG_SLOT_GROWTH_DEN of the largest package seen
/// (sched/pipeline.c; the memory estimate counts it, runtime/trainer_memory.c).
#define NG_SLOT_GROWTH_DEN 16

/// The size a staging slot that must hold `need` bytes grows to: a sixteenth above.
static inline size_t ng__slot_size(size_t need) {
  return need + need / NG_SLOT_GROWTH_DEN;
}

/// The staging slots of each worker that ng__pipeline_presize sizes before the first epoch: as
/// many as a worker fills before its first package's copy frees one (W4: 43-48 slots of 15
/// workers grew in the first epoch, ~0-2 in each later one). When the device is the bottleneck
/// the workers fill the ready window and use more of their S slots, but then a growth is off
/// the critical path (they wait for the device anyway); sizing all S would pin memory that a
/// worker-bound run never touches.
#define NG_SLOT_PRESIZE 3

/// The deepest lookahead: one package slot per backend mark, one of them the computing one.
#define NG_LOOKAHEAD_MAX (NG_BACKEND_MARKS - 1)

typedef struct ng_pipeline ng_pipeline;

/// Sets up a pipeline over a backend, its store, the sampler and fetch configurations (all
/// borrowed until destroy). Staging memory comes from be->host_alloc and persists across epochs.
ng_status ng__pipeline_create(ng_pipeline **out, ng_backend *be, ng_store *store,
                              const ng_sampler_cfg *sampler, const ng_fetch_cfg *fetch,
                              const ng_pipeline_opts *opts);
void ng__pipeline_destroy(ng_pipeline *rt);

/// Runs iterations plan->first .. plan->iters-1, each on the device by `step`
/// (train_step_impl.h), and adds each to `tally` in order (reporting progress). For each iteration
/// the device thread calls ng__train_step_forward (with the iteration's payload when the plan
/// has an ng_target_hook: the payload lives in the package's staging slot, which goes back to
/// its worker only after the iteration's loss was read), then reads the previous iteration's loss
/// (ng__train_step_result), then ng__train_step_backward: the pipeline keeps at most two losses
/// unread, so that the device always has work queued while the host waits. Packages are copied
/// (and prefetched, ng__train_step_prefetch) `lookahead` iterations ahead, each in slot
/// iter % (lookahead + 1). On an
/// error it stops every thread and returns it (with ng_last_error() describing it); the
/// iterations already reported stay done. A worker's failure surfaces in iteration order: the
/// iterations before the failed one are trained first. `drop_p` is the input layer's dropout;
/// `workers_out` receives the final split (PARTIAL, TRANSFER) and `share_out` the final device
/// share.
///
/// `next` (NULL: none) is the epoch expected to follow, with first = 0 and its own order array:
/// when the epoch ends well, the workers stay and go on with `next`'s iterations while the
/// caller does whatever it does between epochs (bounded by the ready window), so that the next
/// call finds its first packages ready instead of waiting for a pool to start and fill. A call
/// whose plan is not that `next` (a resumed epoch, another order) discards that work first.
/// `next`'s order must stay unchanged until the next call returns, or until ng__pipeline_stop();
/// `plan`'s until this call returns (every position of it has been taken by then).
ng_status ng__pipeline_epoch(ng_pipeline *rt, const ng_epoch_plan *plan, const ng_epoch_plan *next,
                             ng_train_step *step, ng_epoch_tally *tally, float drop_p,
                             int workers_out[2], double *share_out);

/// Sizes the staging slots before the first epoch, so that it does not page-lock them one
/// growth at a time (docs/scheduler.md, "Staging slots"): samples iteration plan->first of
/// `plan` (the device sampler's lane 0, or the CPU sampler with worker 0's arena; the same
/// blocks the epoch will sample), measures the package each group's strategy makes of it
/// (ng__fetch_plan, with input dropout `drop_p`), and grows the first NG_SLOT_PRESIZE slots of
/// every worker to its group's size x (1 + 1/NG_SLOT_GROWTH_DEN) plus the item header, at most
/// `cap` bytes each, one thread a worker (bound to the workers' cores, so that the pages are
/// first touched on their NUMA node). A larger package later still grows its slot on demand.
/// *slot_bytes receives the largest size asked (0: none; a slot already as large stays).
/// NG_ERR_STATE once an epoch ran; an allocation refused is reported with the worker and the bytes,
/// and the slots stay usable.
ng_status ng__pipeline_presize(ng_pipeline *rt, const ng_epoch_plan *plan, float drop_p, size_t cap,
                               size_t *slot_bytes);

/// For tests: when 0, ng__pipeline_presize sizes nothing (every slot grows on demand, as before
/// it); when > 0, it makes slots of at most this many bytes (an undersized probe); -1 (the
/// default): no limit of its own.
extern _Atomic int64_t ng__pipeline_presize_limit;

/// The producers of iterations: the worker threads, or 1 (the device thread) inline. A plan's
/// ng_target_hook is called with producer indices below it.
int ng__pipeline_producers(const ng_pipeline *rt);
/// Whether the host work runs inline on the device thread (no worker threads): its producer may
/// then use the caller's OpenMP threads, a worker thread one core.
bool ng__pipeline_inline(const ng_pipeline *rt);

/// For tests: the capacity of the free slot of `worker` that its j-th acquire from now takes
/// (0: none); the slots grown on demand since ng__pipeline_create.
size_t ng__pipeline_slot_bytes(const ng_pipeline *rt, int worker, int j);
int64_t ng__pipeline_slot_grows(const ng_pipeline *rt);

/// Stops workers left running for an expected next epoch and discards their work; does nothing
/// when none run. Afterwards no thread reads the orders of earlier plans.
void ng__pipeline_stop(ng_pipeline *rt);

/// Settles the last call's `next` order that was left to the workers (ng_epoch_plan.shuffle_ids):
/// waits while a worker writes it, or takes it back when none has begun. Afterwards no worker
/// writes it, and what a worker wrote is visible to the caller; whether it was written, the
/// caller tells from *order_epoch. Required before the next call; for
/// the caller's thread, between calls.
void ng__pipeline_settle(ng_pipeline *rt);

/// The epoch whose iterations workers left running produce ahead (the last call's `next`), or
/// -1 when none do. For the caller's thread, between calls.
int64_t ng__pipeline_ahead(const ng_pipeline *rt);

/// Writes the timeline recorded so far (ng_pipeline_opts.trace_spans) to `path` as Chrome
/// trace-event JSON (ng__trace_write), with the spans written and dropped in `*spans` and
/// `*dropped` (each may be NULL); NG_ERR_STATE when none was recorded. Not during an epoch.
ng_status ng__pipeline_write_trace(const ng_pipeline *rt, const char *path, int64_t *spans,
                                   int64_t *dropped);

/// The placement of the last epoch's threads (one line), or "".
const char *ng__pipeline_placement(const ng_pipeline *rt);

/// For tests: when >= 0, the worker that produces iteration ng__pipeline_fault_iter of epoch
/// ng__pipeline_fault_epoch fails with NG_ERR_IO (as a bad row or an allocation failure would),
/// so that error handling can be exercised.
extern _Atomic int64_t ng__pipeline_fault_epoch, ng__pipeline_fault_iter;

/// Resolves AUTO choices: the mode for the backend, the TRANSFER strategy for the row size.
ng_mode ng__mode_resolve(ng_mode m, const ng_backend *be);
ng_fetch ng__transfer_resolve(ng_fetch t, int64_t dim);
/// The cold-row strategy of a worker group (`partial_group`: the PARTIAL group, else the TRANSFER
/// one) in mode `m` (resolved); `transfer`: the resolved TRANSFER strategy.
ng_fetch ng__mode_fetch(ng_mode m, bool partial_group, ng_fetch transfer);

#endif /* NG_PIPELINE_IMPL_H */
