/* The feedback controller: pure logic over per-period samples, moving one worker at a time
 * towards the group with the higher per-thread throughput (docs/scheduler.md states the rule). */
#include "ctrl_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Periods a failed direction stays blocked: long enough that the controller does not retry a
 * harmful move every few periods, short enough to notice a change of phase. A direction failing
 * again before it succeeds waits twice as long, up to BLOCK_PERIODS_MAX: at the best split the
 * signals keep proposing moves that the judge undoes, and each retry costs the iterations it
 * runs under a worse split. */
enum { BLOCK_PERIODS = 20, BLOCK_PERIODS_MAX = 320 };
/* Iterations a rate needs before the judge trusts it: a period of a slow workload holds a few
 * iterations of uneven length, and a verdict on those would undo good moves at random. */
enum { JUDGE_MIN_ITERS = 64 };
/* Periods the judge waits for at least: on a fast workload 64 iterations fit in one period, and
 * one period's rate varies by 5-10% on W1 (H100, 2,500 it/s, 50 ms), as much as a move
 * changes it; three give verdicts that hold. */
enum { JUDGE_MIN_PERIODS = 3 };
/* Iterations each of a window's last periods needs for its rate to be the median of theirs
 * (window_median); below, a period's rate is too coarse and the totals count. */
enum { MEDIAN_MIN_ITERS = 16 };

static void window_reset(ng_ctrl_window *w) {
  memset(w, 0, sizeof *w);
}

static void window_add(ng_ctrl_window *w, int64_t done, double secs) {
  if (!(secs > 0))
    return;
  w->rate[w->periods % NG_CTRL_RATES] = (double)done / secs;
  w->period_done[w->periods % NG_CTRL_RATES] = done;
  w->done += done;
  w->secs += secs;
  w->periods++;
}

/* Whether each of the window's last periods (those its median takes) held enough iterations
 * for a rate of its own. */
static bool window_has_median(const ng_ctrl_window *w) {
  const int n = NG_MIN(w->periods, NG_CTRL_RATES);
  for (int i = 0; i < n; i++)
    if (w->period_done[i] < MEDIAN_MIN_ITERS)
      return false;
  return n > 0;
}

/* The median of the window's last periods' rates: one period with a stall does not move it (on
 * some H100 instances W1's epochs dipped by 20-25% every few epochs in every mode, and one such
 * period undid good moves). */
static double window_median(const ng_ctrl_window *w) {
  const int n = NG_MIN(w->periods, NG_CTRL_RATES);
  double r[NG_CTRL_RATES];
  for (int i = 0; i < n; i++) { /* insertion sort: n <= 16 */
    int j = i;
    for (; j > 0 && r[j - 1] > w->rate[i]; j--)
      r[j] = r[j - 1];
    r[j] = w->rate[i];
  }
  return n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
}

ng_status ng__ctrl_init(ng_ctrl *c, const ng_ctrl_opts *o, int workers) {
  static const ng_ctrl_opts defaults = NG_CTRL_OPTS_INIT;
  if (!o)
    o = &defaults;
  if (o->size < sizeof *o)
    return ng__err(NG_ERR_INVALID_ARG,
                   "controller options: size %zu, expected %zu; start from "
                   "NG_CTRL_OPTS_INIT",
                   o->size, sizeof *o);
  const char *bad = NULL;
  if (workers < 0)
    bad = "the worker count is negative";
  else if (!(o->period_ms > 0) || !isfinite(o->period_ms))
    bad = "period_ms must be positive";
  else if (!(o->threshold >= 0) || !isfinite(o->threshold))
    bad = "threshold must be 0 or more";
  else if (o->min_per_group < 0)
    bad = "min_per_group must be 0 or more";
  else if (o->initial_partial < -1 || o->initial_partial > workers)
    bad = "initial_partial must be -1 (half) or at most the worker count";
  else if (o->warmup_periods < 0)
    bad = "warmup_periods must be 0 or more";
  else if (o->min_iters < 1)
    bad = "min_iters must be at least 1";
  else if (!(o->gpu_bound_wait > 0 && o->gpu_bound_wait <= 1))
    bad = "gpu_bound_wait must be in (0, 1]";
  else if (!(o->gpu_busy_wait >= 0 && o->gpu_busy_wait < 1))
    bad = "gpu_busy_wait must be in [0, 1)";
  else if (!(o->sampler_bound_wait > 0 && o->sampler_bound_wait <= 1))
    bad = "sampler_bound_wait must be in (0, 1]";
  else if (o->share_steps < 0 || o->share_steps > NG_CTRL_SHARE_DEN)
    bad = "share_steps must be in [0, NG_CTRL_SHARE_DEN]";
  else if (o->initial_share < 0 || o->initial_share > NG_CTRL_SHARE_DEN ||
           (!o->fixed && o->initial_share > o->share_steps))
    bad = "initial_share must be in [0, share_steps] ([0, NG_CTRL_SHARE_DEN] when fixed)";
  if (bad)
    return ng__err(NG_ERR_INVALID_ARG,
                   "controller options: %s (workers %d, period_ms %g, "
                   "threshold %g, min_per_group %d, initial_partial %d)",
                   bad, workers, o->period_ms, o->threshold, o->min_per_group, o->initial_partial);
  memset(c, 0, sizeof *c);
  c->o = *o;
  int partial = o->initial_partial < 0 ? (workers + 1) / 2 : o->initial_partial;
  /* Honour min_per_group from the start whenever the workers are enough for both groups. */
  if (workers >= 2 * o->min_per_group)
    partial = NG_MAX(o->min_per_group, NG_MIN(partial, workers - o->min_per_group));
  c->workers[NG_GROUP_PARTIAL] = partial;
  c->workers[NG_GROUP_TRANSFER] = workers - partial;
  c->share = o->initial_share;
  c->last_move = NG_CTRL_MOVE_NONE;
  c->block_len[0] = c->block_len[1] = BLOCK_PERIODS;
  return NG_OK;
}

static void reset_acc(ng_ctrl *c) {
  for (int g = 0; g < NG_GROUP_COUNT; g++) {
    c->acc_iters[g] = 0;
    c->acc_busy[g] = 0;
  }
}

/* Whether a move in direction `m` changes the device share rather than a worker's group: the
 * TRANSFER group is empty and the share can go that way. One TRANSFER worker that hands its
 * cold rows to the device (ZCOPY) takes so little CPU time per iteration that it alone can
 * fill the link (on W1 one zerocopy worker ran 95% of fifteen's rate), so the step from no
 * TRANSFER worker to one is too coarse; the share's steps fill it. */
static bool moves_share(const ng_ctrl *c, ng_ctrl_move m) {
  if (c->o.share_steps == 0 || c->workers[NG_GROUP_TRANSFER] > 0)
    return false;
  return m == NG_CTRL_MOVE_TO_TRANSFER ? c->share < c->o.share_steps : c->share > 0;
}

/* The split and share a move in direction `m` leads to (can_move() holds). */
static void next_state(const ng_ctrl *c, ng_ctrl_move m, int workers[NG_GROUP_COUNT], int *share) {
  const int to = ng__ctrl_move_to(m);
  memcpy(workers, c->workers, sizeof c->workers);
  *share = c->share;
  if (moves_share(c, m)) {
    *share += m == NG_CTRL_MOVE_TO_TRANSFER ? 1 : -1;
  } else {
    workers[1 - to]--;
    workers[to]++;
    *share = 0;
  }
}

/* Direction k (a ng__ctrl_move_to index) is open afresh: no block, and the backoff reset. */
static void open_dir(ng_ctrl *c, int k) {
  c->block_left[k] = 0;
  c->block_len[k] = BLOCK_PERIODS;
  c->block_failed[k] = false;
}

/* The last move is `m`: a settling period follows, and the decision reports it. */
static void set_last_move(ng_ctrl *c, ng_ctrl_decision *d, ng_ctrl_move m) {
  c->last_move = m;
  c->settle = 1;
  d->move = m;
}

/* Moves one worker, or one share step, in direction `m` (can_move() holds): the split, the last
 * move (and the state before it, which a revert restores), a settling period and the decision.
 * The first TRANSFER worker replaces the largest share (the share drops to 0); the last one
 * returns to a share of 0, from where the share climbs step by step: a large share at once
 * loads the link more than the one worker did (on W1, 15/0 with half the destinations on the
 * device ran 8% below 14/1, and the judge undid it every time). */
static void move(ng_ctrl *c, ng_ctrl_decision *d, ng_ctrl_move m) {
  int w[NG_GROUP_COUNT], sh;
  next_state(c, m, w, &sh);
  memcpy(c->prev_workers, c->workers, sizeof c->workers);
  c->prev_share = c->share;
  memcpy(c->workers, w, sizeof w);
  c->share = sh;
  const int k = ng__ctrl_move_to(NG_CTRL_MOVE_TO_TRANSFER);
  c->unblocked = c->o.share_steps > 0 && c->prev_workers[NG_GROUP_TRANSFER] > 0 &&
                 c->workers[NG_GROUP_TRANSFER] == 0;
  if (c->unblocked) {
    /* The TRANSFER group just emptied: the next step towards TRANSFER is the first share step,
     * a split not tried yet, whatever blocked that direction at the worker splits before. A
     * revert of this move restores the block (undo). */
    c->unblocked_left = c->block_left[k];
    c->unblocked_len = c->block_len[k];
    c->unblocked_failed = c->block_failed[k];
    open_dir(c, k);
  }
  set_last_move(c, d, m);
}

/* Undoes the last move (the judge's verdict): the state before it, a settling period, and the
 * decision as a move the other way. */
static void undo(ng_ctrl *c, ng_ctrl_decision *d) {
  memcpy(c->workers, c->prev_workers, sizeof c->workers);
  c->share = c->prev_share;
  if (c->unblocked) { /* back among the worker splits: their block on TRANSFER holds again */
    const int k = ng__ctrl_move_to(NG_CTRL_MOVE_TO_TRANSFER);
    c->block_left[k] = c->unblocked_left;
    c->block_len[k] = c->unblocked_len;
    c->block_failed[k] = c->unblocked_failed;
    c->unblocked = false;
  }
  set_last_move(c, d, (ng_ctrl_move)-c->last_move);
}

/* Direction k (a ng__ctrl_move_to index) failed: it is blocked, twice as long as last time when it
 * failed already since its last success. */
static void fail_dir(ng_ctrl *c, int k) {
  if (c->block_failed[k])
    c->block_len[k] = NG_MIN(2 * c->block_len[k], BLOCK_PERIODS_MAX);
  c->block_failed[k] = true;
  c->block_left[k] = c->block_len[k];
}

/* Whether a move in direction `m` can be made: a share step, or a worker from a group that can
 * give one. */
static bool can_move(const ng_ctrl *c, ng_ctrl_move m) {
  const int from = 1 - ng__ctrl_move_to(m);
  return moves_share(c, m) || (c->workers[from] > 0 && c->workers[from] - 1 >= c->o.min_per_group);
}

/* A signal proposes direction `want` for reason `why`. Unless the judge reverted that direction
 * recently, the move is made (when the source group can give a worker). When it is blocked,
 * the other direction is tried instead, if it is free: the signals do not measure the device's
 * rate (per-thread rates favour zero-copy workers, whose work the device does), so a signal
 * may keep proposing a move that fails while the opposite one would pay. Trying both
 * neighbours of a split, with the judge keeping whichever raises the rate, makes the
 * controller a hill climber that does not stall on one wrong signal. */
static ng_ctrl_reason propose(ng_ctrl *c, ng_ctrl_decision *d, ng_ctrl_move want,
                              ng_ctrl_reason why) {
  if (c->block_left[ng__ctrl_move_to(want)] == 0) {
    if (can_move(c, want))
      move(c, d, want);
    return why;
  }
  const ng_ctrl_move other = (ng_ctrl_move)-want;
  if (c->block_left[ng__ctrl_move_to(other)] == 0 && can_move(c, other)) {
    move(c, d, other);
    return NG_CTRL_PROBE;
  }
  return NG_CTRL_BLOCKED;
}

/* Compares the accumulated throughputs and picks the move; fills d->tput and d->rel_diff. */
static ng_ctrl_reason compare(ng_ctrl *c, ng_ctrl_decision *d) {
  for (int g = 0; g < NG_GROUP_COUNT; g++)
    d->tput[g] = (double)c->acc_iters[g] / c->acc_busy[g];
  reset_acc(c);
  int fast =
      d->tput[NG_GROUP_TRANSFER] > d->tput[NG_GROUP_PARTIAL] ? NG_GROUP_TRANSFER : NG_GROUP_PARTIAL;
  int slow = 1 - fast;
  d->rel_diff = (d->tput[fast] - d->tput[slow]) / d->tput[slow];
  ng_ctrl_move want =
      fast == NG_GROUP_TRANSFER ? NG_CTRL_MOVE_TO_TRANSFER : NG_CTRL_MOVE_TO_PARTIAL;
  if (d->rel_diff <= c->o.threshold)
    return NG_CTRL_BALANCED;
  /* An open direction may still be held back; a blocked one goes to propose(), which probes
   * the other way. */
  if (c->block_left[ng__ctrl_move_to(want)] == 0) {
    if (c->last_move == -want && d->rel_diff <= 2 * c->o.threshold)
      return NG_CTRL_HYSTERESIS;
    if (!can_move(c, want))
      return NG_CTRL_AT_LIMIT;
  }
  return propose(c, d, want, NG_CTRL_MOVED);
}

/* The verdict on the last move once enough iterations ran under it: 1 when the device's rate
 * fell below the rate before the move (by more than half the threshold), or when the move was a
 * probe or a step up of the device share and the rate did not rise by more than that; 0 when it
 * held (the judging ends); -1 while the iterations are too few, or while the fall of a move the
 * signals proposed waits for six periods (below).
 *
 * A probe goes against what the signals propose, so it must pay for itself: a probe kept
 * because it merely held would let the controller drift down a gentle slope, each step losing
 * less than the band (on W1 with 15 workers, 14/1 slid to 10/5 and lost 10% that way). A share
 * step up must pay too. The signal that proposes it (the device waited for packages) persists
 * while the link fills, and one step moves 1/32 of the destinations, less than the judge can
 * tell from noise: steps kept for holding crept to 3/32 and 4/32 on W1, 5-8% below 1/32. */
static int judge(ng_ctrl *c, const ng_ctrl_sample *s) {
  window_add(&c->judged, s->done, s->seconds);
  if (c->judged.done < JUDGE_MIN_ITERS || c->judged.periods < JUDGE_MIN_PERIODS)
    return -1;
  /* Both rates by one statistic: the medians when both windows allow them, else the totals. */
  const bool median = window_has_median(&c->judged) && window_has_median(&c->before);
  const double rate = median ? window_median(&c->judged) : c->judged.done / c->judged.secs;
  const double rate_before = median ? window_median(&c->before) : c->before.done / c->before.secs;
  const bool raised = rate > rate_before * (1.0 + c->o.threshold / 2);
  const bool must_pay = c->probing || c->share > c->prev_share;
  const bool fell = rate < rate_before * (1.0 - c->o.threshold / 2);
  /* A move the signals proposed is undone for a fall only after twice the periods: the revert
   * blocks its direction for 20 to 320 periods, while keeping a bad move three periods longer
   * costs three periods. Stalls only lower rates, and on some H100 instances one came every
   * 1.4-1.5 s in every mode, long enough to spoil two periods of three: the median of six
   * outvotes it. A move that must pay is undone at once: it is a guess. */
  if (fell && !must_pay && c->judged.periods < 2 * JUDGE_MIN_PERIODS)
    return -1;
  c->judging = false;
  if (fell || (must_pay && !raised))
    return 1;
  /* A move that raised the rate opens its direction afresh, and counts as a failure of the
   * way back: the split just left is the worse one, and a signal proposing it again (the
   * GPU-bound rule does, at the best split) would otherwise be tried at once. One that merely
   * held changes no block, so that on a flat top the controller does not cycle between
   * neighbours with the backoff reset at every turn. */
  if (raised) {
    const int k = ng__ctrl_move_to(c->last_move), back = 1 - k;
    open_dir(c, k);
    /* Only when the way back leads where the move came from: from 14/1 to 15/0, the next step
     * towards TRANSFER is a device share step, a split not tried yet. */
    int w[NG_GROUP_COUNT], sh;
    const ng_ctrl_move way_back = (ng_ctrl_move)-c->last_move;
    if (can_move(c, way_back)) {
      next_state(c, way_back, w, &sh);
      if (sh == c->prev_share && memcmp(w, c->prev_workers, sizeof w) == 0)
        fail_dir(c, back);
    }
  }
  return 0;
}

ng_ctrl_decision ng__ctrl_step(ng_ctrl *c, const ng_ctrl_sample *s) {
  ng_ctrl_decision d;
  memset(&d, 0, sizeof d);
  int verdict = 0;
  /* A settled period under the current split counts towards the rate the next move is judged
   * against. */
  if (!c->o.fixed && c->period >= c->o.warmup_periods && c->settle == 0)
    window_add(&c->win, s->done, s->seconds);
  d.period = c->period++;
  d.move = NG_CTRL_MOVE_NONE;
  d.ring_depth = s->ring_depth;
  d.ring_capacity = s->ring_capacity;
  d.producer_wait_frac = s->producer_wait_frac;
  d.consumer_wait_frac = s->consumer_wait_frac;

  if (c->o.fixed) {
    d.reason = NG_CTRL_FIXED;
  } else if (d.period < c->o.warmup_periods) {
    d.reason = NG_CTRL_WARMUP;
  } else if (c->settle > 0) {
    /* This period began under the old split: its sample would blur the effect of the move. */
    c->settle--;
    d.reason = NG_CTRL_SETTLING;
  } else if (c->judging && (verdict = judge(c, s)) < 0) {
    d.reason = NG_CTRL_JUDGING;
  } else if (verdict > 0) {
    /* The judge: the last move made the device slower. Whatever the signal that proposed it,
     * the total throughput is what counts, so the move is undone and its direction is not
     * proposed again for a while. */
    c->judging = false;
    reset_acc(c);
    d.reason = NG_CTRL_REVERTED;
    fail_dir(c, ng__ctrl_move_to(c->last_move));
    undo(c, &d);
  } else if (s->seconds > 0 &&
             (c->win.periods < JUDGE_MIN_PERIODS || c->win.done < JUDGE_MIN_ITERS)) {
    /* The current split's rate, which the next move will be judged against, spans too few
     * periods or iterations yet: a move now would be judged against noise. */
    d.reason = NG_CTRL_NO_DATA;
  } else if (s->feed_wait_frac >= c->o.sampler_bound_wait) {
    /* The workers spend most of their time waiting for the device sampler's blocks: the
     * sampler sets the pace (its kernels share the device with the step, and its lanes with
     * the feed thread). Moving a worker between groups changes neither, and the device's wait
     * for packages would make the CPU-bound rule move one for nothing; nothing moves, and the
     * data is dropped. */
    reset_acc(c);
    d.reason = NG_CTRL_SAMPLER_BOUND;
  } else if (s->ring_capacity > 0 && 2 * s->ring_depth >= s->ring_capacity &&
             (s->producer_wait_frac >= c->o.gpu_bound_wait ||
              s->consumer_wait_frac <= c->o.gpu_busy_wait)) {
    /* Packages queue up: workers wait on a full window, or the device thread found every
     * package ready (with mixed groups the PARTIAL workers rarely reach the window, so the
     * workers' average wait stays low while the device binds). The device (or its link) sets
     * the pace. A TRANSFER iteration costs the device more than a PARTIAL one (it reads the
     * cold rows by zero-copy, or copies them all), so one worker moves to PARTIAL, which
     * lightens the device's share of every iteration until the workers become the bottleneck
     * again. Comparing per-thread rates here would move the other way: TRANSFER workers look
     * fast because the device does their work. The data is dropped so that the next
     * comparison reflects the phase that follows. */
    reset_acc(c);
    d.reason = propose(c, &d, NG_CTRL_MOVE_TO_PARTIAL, NG_CTRL_GPU_BOUND);
  } else if (c->workers[NG_GROUP_TRANSFER] == 0 && c->workers[NG_GROUP_PARTIAL] > 0 &&
             (moves_share(c, NG_CTRL_MOVE_TO_TRANSFER)
                  ? s->consumer_wait_frac > c->o.gpu_busy_wait
                  : s->consumer_wait_frac >= c->o.gpu_bound_wait)) {
    /* Every worker reduces on the CPU and the device waits for them: the CPU sets the pace. A
     * TRANSFER worker spends less CPU time on an iteration (the device or the DMA engine does
     * the reading), so one worker moves there; the judge undoes it if the device then binds
     * harder than the CPU did. Without this an emptied TRANSFER group could never come back.
     * A share step is a small one: it is proposed as soon as the device waits for packages
     * for more than gpu_busy_wait of the period, until the GPU-bound rule above takes it
     * back. */
    reset_acc(c);
    d.reason = propose(c, &d, NG_CTRL_MOVE_TO_TRANSFER, NG_CTRL_CPU_BOUND);
  } else if (c->workers[NG_GROUP_PARTIAL] == 0 || c->workers[NG_GROUP_TRANSFER] == 0) {
    d.reason = NG_CTRL_GROUP_EMPTY;
  } else {
    for (int g = 0; g < NG_GROUP_COUNT; g++) {
      if (s->iters[g] > 0)
        c->acc_iters[g] += s->iters[g];
      if (s->busy_s[g] > 0 && isfinite(s->busy_s[g]))
        c->acc_busy[g] += s->busy_s[g];
    }
    bool enough = true;
    for (int g = 0; g < NG_GROUP_COUNT; g++)
      enough = enough && c->acc_iters[g] >= c->o.min_iters && c->acc_busy[g] > 0;
    d.reason = enough ? compare(c, &d) : NG_CTRL_NO_DATA;
  }
  for (int k = 0; k < 2 && d.reason != NG_CTRL_REVERTED; k++)
    if (c->block_left[k] > 0)
      c->block_left[k]--;
  if (d.move != NG_CTRL_MOVE_NONE && d.reason != NG_CTRL_REVERTED && c->win.secs > 0) {
    c->judging = true;
    c->probing = d.reason == NG_CTRL_PROBE;
    c->before = c->win;
    window_reset(&c->judged);
  } else if (d.move != NG_CTRL_MOVE_NONE ||
             (d.reason != NG_CTRL_SETTLING && d.reason != NG_CTRL_WARMUP &&
              d.reason != NG_CTRL_JUDGING)) {
    c->judging = false; /* a verdict comes only from the periods right after the settling one */
  }
  if (d.move != NG_CTRL_MOVE_NONE) /* a new split: its rate starts afresh */
    window_reset(&c->win);
  d.workers[NG_GROUP_PARTIAL] = c->workers[NG_GROUP_PARTIAL];
  d.workers[NG_GROUP_TRANSFER] = c->workers[NG_GROUP_TRANSFER];
  d.share = c->share;
  return d;
}

const char *ng__ctrl_reason_name(ng_ctrl_reason r) {
  switch (r) {
  case NG_CTRL_FIXED:
    return "fixed";
  case NG_CTRL_WARMUP:
    return "warmup";
  case NG_CTRL_SETTLING:
    return "settling";
  case NG_CTRL_GPU_BOUND:
    return "gpu_bound";
  case NG_CTRL_REVERTED:
    return "reverted";
  case NG_CTRL_BLOCKED:
    return "blocked";
  case NG_CTRL_GROUP_EMPTY:
    return "group_empty";
  case NG_CTRL_NO_DATA:
    return "no_data";
  case NG_CTRL_BALANCED:
    return "balanced";
  case NG_CTRL_HYSTERESIS:
    return "hysteresis";
  case NG_CTRL_AT_LIMIT:
    return "at_limit";
  case NG_CTRL_MOVED:
    return "moved";
  case NG_CTRL_JUDGING:
    return "judging";
  case NG_CTRL_CPU_BOUND:
    return "cpu_bound";
  case NG_CTRL_PROBE:
    return "probe";
  case NG_CTRL_SAMPLER_BOUND:
    return "sampler_bound";
  }
  return "unknown";
}

const char *ng__ctrl_log_header(void) {
  return "period,move,reason,partial,transfer,tput_partial,tput_transfer,rel_diff,ring_depth,"
         "ring_capacity,producer_wait,consumer_wait,device_share";
}

size_t ng__ctrl_log_line(const ng_ctrl_decision *d, char *buf, size_t cap) {
  const char *move = d->move == NG_CTRL_MOVE_TO_TRANSFER  ? "to_transfer"
                     : d->move == NG_CTRL_MOVE_TO_PARTIAL ? "to_partial"
                                                          : "none";
  int n = snprintf(buf, cap, "%lld,%s,%s,%d,%d,%.6g,%.6g,%.4f,%d,%d,%.3f,%.3f,%.4g",
                   (long long)d->period, move, ng__ctrl_reason_name(d->reason),
                   d->workers[NG_GROUP_PARTIAL], d->workers[NG_GROUP_TRANSFER],
                   d->tput[NG_GROUP_PARTIAL], d->tput[NG_GROUP_TRANSFER], d->rel_diff,
                   d->ring_depth, d->ring_capacity, d->producer_wait_frac, d->consumer_wait_frac,
                   ng__ctrl_share_frac(d->share));
  return n > 0 ? (size_t)n : 0;
}

void ng__counters_sub(ng_counters *out, const ng_counters *a, const ng_counters *b) {
  ng_counters d = *a;
  d.t_ns -= b->t_ns;
  d.iters -= b->iters;
  d.pcie -= b->pcie;
  d.cpu_cold -= b->cpu_cold;
  for (int g = 0; g < NG_GROUP_COUNT; g++) {
    d.group_iters[g] -= b->group_iters[g];
    d.group_busy_ns[g] -= b->group_busy_ns[g];
  }
  d.put_wait_ns -= b->put_wait_ns;
  d.take_wait_ns -= b->take_wait_ns;
  d.feed_wait_ns -= b->feed_wait_ns;
  *out = d;
}

void ng__counters_resume(ng_counters *out, const ng_counters *now, const ng_counters *tail) {
  const int gained = now->ring_depth - tail->ring_depth;
  ng__counters_sub(out, now, tail);
  out->iters += NG_MAX(gained, 0);
}
