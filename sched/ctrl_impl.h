/* The feedback controller of the hybrid runtime (sched/ctrl.c, docs/scheduler.md): moves
 * workers between the PARTIAL and TRANSFER groups (and sets the device share) by their measured
 * throughput, from the counters each period compares. Not installed. */
#ifndef NG_CTRL_IMPL_H
#define NG_CTRL_IMPL_H

#include "core_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#endif /* NG_CTRL_IMPL_H */
