/* Infrastructure of the hybrid runtime (docs/scheduler.md): the worker pool with hwloc
 * placement, the ready ring that hands iterations to the device thread in order, per-worker
 * staging slot pools, and the feedback controller that moves workers between the PARTIAL and
 * TRANSFER groups. Not installed. Every blocking call here waits on a condition variable (never
 * spins) and every object can be closed, which wakes all its waiters, so a failure anywhere
 * stops the pipeline promptly. */
#ifndef NG_SCHED_IMPL_H
#define NG_SCHED_IMPL_H

#include "core_impl.h"

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== worker pool (sched/pool.c) ============================================================ */

/// Placement of a pool. Strings are borrowed for the duration of ng__pool_start() only.
typedef struct {
  size_t size; ///< sizeof(ng_pool_opts)
  /// Worker threads to start; 0 means one per usable core, minus the device core when reserved.
  int workers;
  /// OS cpu indices the pool may use, as "0-3,8,10-11"; NULL or "" means every core this process
  /// may run on (cgroup limits and the affinity the process started with, e.g. from taskset).
  const char *cpuset;
  /// PCI id of the GPU the pool feeds ("0000:17:00.0", "00000000:17:00.0" or "17:00.0"); when
  /// hwloc finds it, the pool keeps to the cores of its package/NUMA node. NULL for none.
  const char *pci_bus_id;
  /// Keep the first chosen core for the device thread (ng__pool_bind_device_thread()).
  bool reserve_device_core;
  /// Bind each worker (and the device thread) to its core. Failure to bind is recorded, not fatal.
  bool bind;
} ng_pool_opts;

#define NG_POOL_OPTS_INIT                                                                          \
  { sizeof(ng_pool_opts), 0, NULL, NULL, true, true }

typedef struct ng_pool ng_pool;

/// Chooses cores and starts `o->workers` threads; worker w binds itself to its core (when
/// `o->bind`) and then calls `fn(ctx, w)` once. Worker cores are distinct while there are enough
/// cores, physical cores before their hyperthreads; with more workers than cores they wrap around
/// and ng__pool_oversubscribed() says so. `*out` is set before any worker calls `fn`, so `fn` may
/// reach the pool through `ctx`. `ctx` is borrowed until ng__pool_join(). Returns
/// NG_ERR_INVALID_ARG for a malformed or unusable cpuset or PCI id or a negative worker count,
/// NG_ERR_UNSUPPORTED when hwloc cannot read the machine, or NG_ERR_NOMEM, also when a thread
/// cannot be created (no worker has called `fn` then: threads wait behind a gate that opens only
/// once all of them exist).
/// The cores this process may use that are nearest PCI device `pci_bus_id` (its NUMA node or
/// package, as hwloc sees it; all usable cores when it is NULL, "" or not found), as a list
/// ("0-15,32-47") of at most `cap` characters.
ng_status ng__cpus_near(char *list, size_t cap, const char *pci_bus_id);
/// Slice `k` of `m` of the cpu list `list`, by whole cores in logical order (PUs when the list
/// has fewer cores than slices), as a list: how the ranks of one host split their cores.
ng_status ng__cpus_slice(char *out, size_t cap, const char *list, int k, int m);

ng_status ng__pool_start(ng_pool **out, const ng_pool_opts *o, void (*fn)(void *ctx, int worker),
                         void *ctx);
/// Loads the machine's topology, which the process's first ng__pool_start would (40-60 ms on
/// the H100 machine: hwloc scans every PCI device), on a thread of its own while the caller
/// sets other things up; ng__pool_prefetch_join waits for it (and accepts a prefetch that never
/// started). Best effort: a failure is left for ng__pool_start to report.
typedef struct {
  pthread_t thread;
  bool running;
} ng_pool_prefetch;
void ng__pool_prefetch(ng_pool_prefetch *p);
void ng__pool_prefetch_join(ng_pool_prefetch *p);
/// Waits for every worker's `fn` to return and frees the pool (accepts NULL). The pool's other
/// accessors must not be called afterwards.
void ng__pool_join(ng_pool *p);
/// Number of worker threads.
int ng__pool_workers(const ng_pool *p);
/// OS index of worker w's core, or -1 when w is out of range.
int ng__pool_core(const ng_pool *p, int w);
/// Whether worker w bound itself to its core. False while it has not tried yet, when binding is
/// off, or when the system refused (containers may forbid it).
bool ng__pool_bound(const ng_pool *p, int w);
/// OS index of the core reserved for the device thread, or -1 when none is reserved.
int ng__pool_device_core(const ng_pool *p);
/// Whether some worker shares its core with another worker or with the device thread.
bool ng__pool_oversubscribed(const ng_pool *p);
/// Whether the pool's cores were chosen near the PCI device of ng_pool_opts::pci_bus_id.
bool ng__pool_near_pci(const ng_pool *p);
/// Binds the calling thread to the device core. Returns NG_OK doing nothing when the pool does
/// not bind or reserves no core, NG_ERR_UNSUPPORTED (with the system's reason) when the system
/// refuses; callers may carry on unbound after that error.
ng_status ng__pool_bind_device_thread(const ng_pool *p);
/// One line for logs, e.g. "15 workers on cores 1-15, device thread on core 0, near PCI
/// 0000:17:00.0". Owned by the pool.
const char *ng__pool_describe(const ng_pool *p);

/// Parses a cpu list such as "0-3,8,10-11" into a sorted array of distinct OS indices in
/// `*out` (malloc'd, caller frees) of `*n` entries. NG_ERR_INVALID_ARG names the offending part.
ng_status ng__cpuset_parse(int **out, int *n, const char *list);

/* ==== ready ring (sched/ring.c) ============================================================== */

/// Hands the results of iterations 0, 1, 2, ... from many producers (the workers) to one
/// consumer (the device thread) strictly in iteration order. Only iterations in the window
/// [next_to_take, next_to_take + capacity) can be put, so a fast producer blocks instead of
/// running ahead without bound.
typedef struct ng_ring ng_ring;

/// What the ring has seen; wait times are on the monotonic clock and include waits in progress.
typedef struct {
  int64_t next;          ///< the next iteration the consumer will take
  int depth;             ///< items put and not yet taken (in order or not)
  int capacity;          ///< window size
  int producers_waiting; ///< producers blocked right now because their iteration is past the window
  int64_t put_wait_ns;   ///< total time producers spent blocked in ng__ring_put()
  int64_t take_wait_ns;  ///< total time the consumer spent blocked in ng__ring_take()
  int64_t puts;          ///< items put so far
} ng_ring_stats;

/// Creates a ring whose window holds `capacity` >= 1 iterations.
ng_status ng__ring_create(ng_ring **out, int capacity);
/// Frees the ring (accepts NULL). Items still inside are not freed: take them back first with
/// ng__ring_reclaim(). No thread may be inside a ring call.
void ng__ring_destroy(ng_ring *r);
/// Publishes `item` (not NULL; taken by the ring) as the result of iteration `iter`; every
/// iteration is put exactly once. Blocks while `iter` >= next_to_take + capacity. Returns the
/// close status when the ring is or gets closed (the item stays the caller's then),
/// NG_ERR_INVALID_ARG for a NULL item, a negative iteration or one at or past the end set by
/// ng__ring_finish(), and NG_ERR_STATE for an iteration already put or taken.
ng_status ng__ring_put(ng_ring *r, int64_t iter, void *item);
/// Takes the next iteration in order, blocking until it is put; `*iter` receives its index and
/// `*item` the item (now the caller's). At the end set by ng__ring_finish() it returns NG_OK with
/// `*item` = NULL and `*iter` = the end, again on every later call. Once the ring is closed it
/// returns the close status at once with `*item` = NULL, even when items are ready: an error
/// stops the consumer promptly. Single consumer.
ng_status ng__ring_take(ng_ring *r, int64_t *iter, void **item);
/// Declares the normal end: no iteration >= `n_iters` will be put. The consumer drains
/// iterations below it, then sees the end. Returns NG_ERR_INVALID_ARG when an iteration >=
/// `n_iters` was already put or taken, NG_ERR_STATE when a different end was already set, and the
/// close status after a close.
ng_status ng__ring_finish(ng_ring *r, int64_t n_iters);
/// Stops the ring with the error `why`: every blocked and later put and take returns `why` at
/// once. The first close wins; later ones change nothing. `why` must be an error (NG_OK, a bug,
/// is recorded as NG_ERR_INTERNAL); the normal end is ng__ring_finish().
void ng__ring_close(ng_ring *r, ng_status why);
/// Takes back any one item still in the ring, in no particular order, without blocking; false
/// when it is empty. For cleanup after a close, once producers have stopped.
bool ng__ring_reclaim(ng_ring *r, int64_t *iter, void **item);
/// A consistent snapshot of the ring's counters.
void ng__ring_stats(ng_ring *r, ng_ring_stats *out);

/* ==== staging slots (sched/ring.c) =========================================================== */

/// Allocator of staging buffers (e.g. pinned or registered host memory). `alloc` returns a
/// status and writes the buffer to `*out`, so that it can report its own error (ng__err()).
typedef ng_status (*ng_slot_alloc_fn)(void *ctx, size_t bytes, void **out);
typedef void (*ng_slot_free_fn)(void *ctx, void *ptr, size_t bytes);

/// A fixed set of K staging buffers that one worker fills and the device thread releases once
/// the copy out of them has completed. Buffers are 64-byte aligned with the default allocator.
typedef struct ng_slots ng_slots;

/// Allocates `k` >= 1 buffers of `bytes_each` > 0 bytes through `alloc_fn`/`free_fn` (both NULL:
/// ng__aligned_alloc()). `ctx` is borrowed until ng__slots_destroy().
ng_status ng__slots_create(ng_slots **out, int k, size_t bytes_each, ng_slot_alloc_fn alloc_fn,
                           ng_slot_free_fn free_fn, void *ctx);
/// Frees every buffer, acquired or not (accepts NULL). Nobody may still use one.
void ng__slots_destroy(ng_slots *s);
/// A free buffer, blocking until one is released; NULL once the pool is closed.
void *ng__slots_acquire(ng_slots *s);
/// Gives an acquired buffer back (any thread). Accepted after a close too, so that in-flight
/// copies can finish. NG_ERR_INVALID_ARG when `buf` is not an acquired buffer of this pool.
ng_status ng__slots_release(ng_slots *s, void *buf);
/// Wakes every waiter of ng__slots_acquire(); it returns NULL from now on.
void ng__slots_close(ng_slots *s);
/// Undoes ng__slots_close() for the next run (the runtime closes them when it stops a pool); no
/// thread may be waiting in ng__slots_acquire().
void ng__slots_reopen(ng_slots *s);
/// Replaces the acquired buffer `*buf` by one of at least `bytes` bytes (growing by at least half
/// its size, so that repeated growth is amortised), keeping its content. On failure `*buf` is
/// unchanged and still acquired. Does nothing when it is already large enough.
ng_status ng__slots_grow(ng_slots *s, void **buf, size_t bytes);
/// Grows the `n` free buffers that ng__slots_acquire() hands out next (the free list is LIFO:
/// the last released first) to exactly `bytes` each, when smaller, without keeping their
/// content: a worker's first packages then need no growth (sched/pipeline.c sizes them before
/// the first epoch). Stops at the free buffers there are. On failure the buffer being grown
/// keeps its old size and the error names it. No thread may acquire from the pool meanwhile.
ng_status ng__slots_presize(ng_slots *s, int n, size_t bytes);
/// Capacity of the free buffer the j-th ng__slots_acquire() from now would hand out (j = 0:
/// the next), or 0 when fewer than j + 1 are free.
size_t ng__slots_next_bytes(ng_slots *s, int j);
/// Capacity in bytes of buffer `buf` of this pool (0 when it is not one).
size_t ng__slots_bytes(ng_slots *s, const void *buf);
/// Buffers free right now, and total time ng__slots_acquire() spent blocked (monotonic ns).
void ng__slots_stats(ng_slots *s, int *free_now, int64_t *wait_ns);

/* ==== timeline (sched/trace.c) ============================================================== */

/// What a span of a thread's time was spent on. Workers: SLOT_WAIT, SAMPLE, FETCH, READY_WAIT,
/// PREPARE;
/// the device thread: TAKE_WAIT, UPLOAD, COPY_WAIT, FORWARD, LOSS_WAIT, BACKWARD, CONTROL, and
/// START/STOP around the workers' pool (inline, it also samples and fetches).
typedef enum {
  NG_SPAN_SLOT_WAIT,  ///< waiting for a free staging slot (the device still holds them all)
  NG_SPAN_SAMPLE,     ///< sampling the iteration's blocks
  NG_SPAN_FETCH,      ///< the group's fetch: reduction, gather or id lists, and the package
  NG_SPAN_READY_WAIT, ///< blocked handing the package over (the ready window is full)
  NG_SPAN_TAKE_WAIT,  ///< the device thread waiting for the next iteration's package
  NG_SPAN_UPLOAD,     ///< queuing a package's copy and its zero-copy reads
  NG_SPAN_COPY_WAIT,  ///< waiting for a package's copy to land
  NG_SPAN_FORWARD,    ///< queuing the forward pass and the loss
  NG_SPAN_LOSS_WAIT,  ///< waiting for the previous iteration's loss (the device is busy), and
                      ///< reporting that iteration (the trainer's sink, its progress callback)
  NG_SPAN_BACKWARD,   ///< queuing the backward pass and the step
  NG_SPAN_CONTROL,    ///< the controller's step and the telemetry
  NG_SPAN_START,      ///< starting the workers' pool for an epoch
  NG_SPAN_STOP,       ///< joining the pool (after the last epoch, a failure or to start afresh)
  NG_SPAN_EPOCH,      ///< a whole call of ng__pipeline_epoch, around the device thread's spans
  NG_SPAN_PREPARE,    ///< a worker writing the next epoch's order (ng_epoch_plan.shuffle_ids)
  NG_SPAN_FEED_WAIT,  ///< a worker waiting for its iteration's blocks from the sample feed
  NG_SPAN_SLOT_GROW,  ///< a worker growing a staging slot (page-locking it), inside its fetch
  NG_SPAN_COUNT
} ng_span_kind;

/// A timeline of per-thread spans ("tracks"), each track written by one thread at a time, read
/// only once every writer has stopped (after joining them). Track 0 is the device thread.
typedef struct ng_trace ng_trace;

/// Creates a trace of `tracks` >= 1 tracks, each holding at most `max_spans` >= 1 spans; later
/// spans are counted as dropped. Times are the monotonic clock (ng__now_ns()).
ng_status ng__trace_create(ng_trace **out, int tracks, int64_t max_spans);
void ng__trace_destroy(ng_trace *t); ///< accepts NULL
/// Names track `track` ("worker 3 (core 4)"); copied. Only ng__trace_write() reads names, so a
/// thread may name a track while another records on it.
void ng__trace_name(ng_trace *t, int track, const char *name);
/// Records a span [t0, t1] of iteration `iter` (-1: none; the epoch for START, STOP and EPOCH) on
/// `track`; `arg` is the worker group for FETCH spans (ng_group), the sampled edges for SAMPLE
/// spans, else 0. Accepts t == NULL
/// (tracing off): costs a branch then.
void ng__trace_span(ng_trace *t, int track, ng_span_kind kind, int64_t iter, int arg, int64_t t0,
                    int64_t t1);
/// The lower-case name of a span kind ("sample", "loss wait", ...).
const char *ng__span_name(ng_span_kind k);
/// Spans recorded and dropped so far, over all tracks.
void ng__trace_counts(const ng_trace *t, int64_t *recorded, int64_t *dropped);
/// Writes the trace as Chrome trace-event JSON (Perfetto, chrome://tracing) to `path`: one
/// complete event per span, in microseconds from the first span, with its iteration (and group)
/// as arguments.
ng_status ng__trace_write(const ng_trace *t, const char *path);

/* ==== feedback controller (sched/ctrl.c) ===================================================== */

/// The two worker groups. PARTIAL workers aggregate cold rows on the CPU; TRANSFER workers batch
/// them for DMA or let the GPU read them (ZCOPY).
typedef enum { NG_GROUP_PARTIAL = 0, NG_GROUP_TRANSFER = 1 } ng_group;
#define NG_GROUP_COUNT 2

typedef struct {
  size_t size;           ///< sizeof(ng_ctrl_opts)
  double period_ms;      ///< how often the caller samples and calls ng__ctrl_step() (> 0)
  double threshold;      ///< relative throughput difference that justifies a move (>= 0)
  bool fixed;            ///< never move workers
  int min_per_group;     ///< workers a group keeps at least (>= 0; 1 keeps both measurable)
  int initial_partial;   ///< workers in PARTIAL at the start; -1 means half, rounded up
  int warmup_periods;    ///< periods ignored at the start (caches, allocations warm up)
  int min_iters;         ///< iterations each group must complete before a comparison (>= 1)
  double gpu_bound_wait; ///< producer wait fraction above which a half-full ring means GPU-bound
  /// Consumer wait fraction at or below which a half-full ring means GPU-bound too: the device
  /// thread never waited for a package while some were ready.
  double gpu_busy_wait;
  /// The device share (ng_fetch_cfg.device_share) in steps of 1 / NG_CTRL_SHARE_DEN: the most
  /// the controller gives the device while the TRANSFER group is empty (0: never), and the
  /// share at the start (at most share_steps, or any step when `fixed`).
  int share_steps;
  int initial_share;
  /// Share of the workers' time spent waiting for their blocks from the device sampler's feed
  /// at or above which the sampler sets the pace: no split helps then, and none is tried.
  double sampler_bound_wait;
} ng_ctrl_opts;

#define NG_CTRL_OPTS_INIT                                                                          \
  { sizeof(ng_ctrl_opts), 100.0, 0.10, false, 1, -1, 2, 4, 0.5, 0.05, 0, 0, 0.5 }

/// The device share's unit: shares are multiples of 1 / NG_CTRL_SHARE_DEN.
#define NG_CTRL_SHARE_DEN 32

/// A share of `steps` steps as a fraction of the destinations (ng_fetch_cfg.device_share).
static inline double ng__ctrl_share_frac(int steps) {
  return (double)steps / NG_CTRL_SHARE_DEN;
}

/// Why the controller decided what it did (ng__ctrl_reason_name() gives the CSV word).
typedef enum {
  NG_CTRL_FIXED,         ///< moves are off
  NG_CTRL_WARMUP,        ///< within the first warmup_periods
  NG_CTRL_SETTLING,      ///< the period right after a move: its sample mixes two splits
  NG_CTRL_GPU_BOUND,     ///< a half-full ring and waiting producers or a busy consumer
  NG_CTRL_GROUP_EMPTY,   ///< a group has no worker, so there is nothing to compare
  NG_CTRL_NO_DATA,       ///< too few iterations yet: for a comparison, or the split's own rate
  NG_CTRL_BALANCED,      ///< throughputs within the threshold
  NG_CTRL_HYSTERESIS,    ///< the move would undo the last one and the difference is < 2x threshold
  NG_CTRL_AT_LIMIT,      ///< the slower group is at min_per_group
  NG_CTRL_MOVED,         ///< one worker moved towards the faster group
  NG_CTRL_REVERTED,      ///< the last move lowered the device's throughput: undone
  NG_CTRL_BLOCKED,       ///< the proposed direction was reverted recently and the other can't go
  NG_CTRL_JUDGING,       ///< the last move's verdict waits for enough iterations under it
  NG_CTRL_CPU_BOUND,     ///< every worker in PARTIAL and the device waits for them
  NG_CTRL_PROBE,         ///< the proposed direction is blocked: the other one is tried instead
  NG_CTRL_SAMPLER_BOUND, ///< the workers wait for the device sampler: no split would help
} ng_ctrl_reason;

/// +1: one worker PARTIAL -> TRANSFER; -1: TRANSFER -> PARTIAL; 0: none. While the TRANSFER
/// group is empty, a move changes the device share by one step instead, as long as the share
/// can go that way (docs/scheduler.md): TRANSFER raises it, PARTIAL lowers it. A worker move
/// leaves the share at 0; a revert restores the split and share before the move it undoes.
typedef enum {
  NG_CTRL_MOVE_TO_PARTIAL = -1,
  NG_CTRL_MOVE_NONE = 0,
  NG_CTRL_MOVE_TO_TRANSFER = 1
} ng_ctrl_move;

/// The group a move gives a worker to (the other group gives it).
static inline int ng__ctrl_move_to(ng_ctrl_move m) {
  return m == NG_CTRL_MOVE_TO_TRANSFER ? NG_GROUP_TRANSFER : NG_GROUP_PARTIAL;
}

/// What happened over the last period. An iteration's busy time runs from taking it to handing
/// it to the ring, minus the time blocked in ng__ring_put() (a full window stalls both groups
/// alike, so it says nothing about which is faster); waits for a staging slot stay in, since they
/// are the copy cost of the group's strategy. Attribute an iteration's busy time to the period in
/// which it completes, so that iters / busy_s is exact per-thread throughput.
typedef struct {
  int64_t iters[NG_GROUP_COUNT]; ///< iterations completed by each group
  double busy_s[NG_GROUP_COUNT]; ///< busy thread-seconds of each group
  int ring_depth;                ///< ng_ring_stats::depth at the end of the period
  int ring_capacity;
  /// Growth of ng_ring_stats::put_wait_ns over the period / (workers x period), in [0, 1].
  double producer_wait_frac;
  /// Growth of ng_ring_stats::take_wait_ns over the period / period, in [0, 1].
  double consumer_wait_frac;
  /// The workers' time waiting for blocks from the device sampler's feed / (workers x
  /// period), in [0, 1] (0 without a feed).
  double feed_wait_frac;
  /// Iterations the device finished in the period and its length. When seconds > 0, every move
  /// is judged by the device's throughput (done / seconds) two periods later and undone if it
  /// fell by more than half the threshold (docs/scheduler.md); 0 turns the judge off.
  int64_t done;
  double seconds;
} ng_ctrl_sample;

typedef struct {
  int64_t period;    ///< index of the step, from 0
  ng_ctrl_move move; ///< the move the caller must apply
  ng_ctrl_reason reason;
  int workers[NG_GROUP_COUNT];   ///< the split after this decision
  int share;                     ///< the device share after it, in steps
  double tput[NG_GROUP_COUNT];   ///< per-thread iterations/s compared (0 when not compared)
  double rel_diff;               ///< (faster - slower) / slower, 0 when not compared
  int ring_depth, ring_capacity; ///< copied from the sample
  double producer_wait_frac, consumer_wait_frac;
} ng_ctrl_decision;

/// The periods of a stretch of time under one split: their totals and the last rates.
#define NG_CTRL_RATES 16
typedef struct {
  int64_t done;                       ///< iterations
  double secs;                        ///< seconds
  int periods;                        ///< periods (with seconds > 0)
  double rate[NG_CTRL_RATES];         ///< the last periods' iterations/s, a ring
  int64_t period_done[NG_CTRL_RATES]; ///< and their iterations
} ng_ctrl_window;

/// Controller state; plain data, owned by the caller, no threads.
typedef struct {
  ng_ctrl_opts o;
  int workers[NG_GROUP_COUNT];                  ///< the current split
  int share;                                    ///< the current device share, in steps
  int prev_workers[NG_GROUP_COUNT], prev_share; ///< the state before the last move
  int64_t period;                               ///< steps taken
  int settle;                                   ///< periods still to skip after a move
  ng_ctrl_move last_move;                       ///< the last move made (NONE before the first)
  int64_t acc_iters[NG_GROUP_COUNT];
  double acc_busy[NG_GROUP_COUNT];
  bool judging; ///< the last move awaits its verdict
  bool probing; ///< the last move was a probe: it stays only if it raises the rate
  /// The settled periods under the current split, those of the split before the last move (the
  /// rate the move is judged against), and those since the move settled (its rate).
  ng_ctrl_window win, before, judged;
  /// Per direction (indexed by ng__ctrl_move_to): periods it stays blocked after a
  /// revert, the next block's length (doubling while the direction keeps failing), and whether
  /// it failed since the last move that held.
  int block_left[2], block_len[2];
  bool block_failed[2];
  /// The TRANSFER direction's block as it was before the last move cleared it (emptying the
  /// TRANSFER group does), for a revert to restore.
  bool unblocked;
  int unblocked_left, unblocked_len;
  bool unblocked_failed;
} ng_ctrl;

/// Sets `c` up for `workers` >= 0 workers split by `o` (NULL: defaults). NG_ERR_INVALID_ARG for
/// an option out of range.
ng_status ng__ctrl_init(ng_ctrl *c, const ng_ctrl_opts *o, int workers);
/// Feeds one period's sample and returns the decision; a move is already applied to c->workers,
/// the caller reassigns one worker accordingly. The rule is in docs/scheduler.md.
ng_ctrl_decision ng__ctrl_step(ng_ctrl *c, const ng_ctrl_sample *s);
/// The lower-case name of a reason ("balanced", "gpu_bound", ...).
const char *ng__ctrl_reason_name(ng_ctrl_reason r);
/// The CSV header matching ng__ctrl_log_line() (no newline).
const char *ng__ctrl_log_header(void);
/// Formats `d` as one CSV line (no newline) into `buf` of `cap` bytes (truncated, always
/// NUL-terminated when cap > 0). Returns the length the whole line needs, as snprintf().
size_t ng__ctrl_log_line(const ng_ctrl_decision *d, char *buf, size_t cap);

/// The runtime's counters at one point in time, which the controller's periods and the telemetry
/// compare: the device's iterations, bytes and waits, each group's iterations and busy time.
typedef struct {
  int64_t t_ns;
  int64_t iters;
  int64_t group_iters[NG_GROUP_COUNT], group_busy_ns[NG_GROUP_COUNT];
  int64_t pcie, cpu_cold;
  int64_t put_wait_ns, take_wait_ns;
  int64_t feed_wait_ns; ///< the workers' waits for the device sampler's feed
  int ring_depth;       ///< a level, not a count
} ng_counters;

/// out = a - b, counter by counter; the ring's depth is a's. `out` may be `a`.
void ng__counters_sub(ng_counters *out, const ng_counters *a, const ng_counters *b);
/// The start of a period that continues one left open at an epoch's end: `now`, the next
/// epoch's first counters, less `tail`, the open period's counts at the end (`end - start`,
/// its ring depth the depth at the end). Neither the time between the two nor the work the
/// workers did in it counts: the packages the ring gained meanwhile are taken off the
/// iterations. `out` may be `now`.
void ng__counters_resume(ng_counters *out, const ng_counters *now, const ng_counters *tail);

#ifdef __cplusplus
}
#endif

#endif /* NG_SCHED_IMPL_H */
