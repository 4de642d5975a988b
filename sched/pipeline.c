/* The pipeline of the hybrid runtime: worker threads sample and fetch whole iterations, the
 * device thread (the caller of ng__pipeline_epoch) consumes them in order. See pipeline_impl.h
 * and docs/scheduler.md. */
#include "pipeline_impl.h"

#include "ctrl_impl.h"
#include "feed_impl.h"
#include "pool_impl.h"
#include "ring_impl.h"
#include "trace_impl.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  SLOT_INITIAL_BYTES = 1 << 20,
  DECISIONS_CAP = 4096,
};

/* Saves and restores the calling thread's affinity: binding the device thread must not outlive
 * the epoch (the caller's thread is the user's). */
typedef struct {
  cpu_set_t set;
  bool saved;
} affinity;

/* The header of a staging slot: one iteration's package and where it came from. The package
 * itself follows the header in the same slot. */
typedef struct {
  int64_t iter;
  int worker;
  int group;
  int64_t edges;
  ng_status status; /* not NG_OK: the worker failed this iteration (pl_worker.err says how) */
  ng_fetch_pkg pkg;
  /* The plan's ng_target_hook's payload of the iteration, behind the package in the same slot
   * (NULL: none). Only the host reads it: the device copy takes pkg.bytes. */
  const void *payload;
} pl_item;

#define ITEM_HEADER (((sizeof(pl_item) + 63) / 64) * 64)

typedef struct {
  ng_slots *slots;
  ng_sample_arena *arena;
  ng_fetch_scratch scratch;
  _Atomic int group; /* ng_group this worker works for (the controller changes it) */
  char err[1024];    /* why its failed item failed (read by the device thread after the put) */
} pl_worker;

/* A plan the workers produce from, with the ring position of its first iteration: ring
 * position seq0 + k is iteration plan.first + k. */
typedef struct {
  ng_epoch_plan plan;
  int64_t seq0;
  bool ready; /* its order is written (see ng_epoch_plan.shuffle_ids) */
} pl_plan;

/* Where the order of plans[1] stands when the caller left it to the workers. */
enum { PREP_NONE, PREP_PENDING, PREP_RUNNING };

struct ng_pipeline {
  ng_backend *be;
  ng_store *store;
  const ng_sampler_cfg *sampler;
  ng_fetch_cfg fetch;
  ng_pipeline_opts o;
  int n_threads;                   /* worker threads; 0 when inline */
  int window;                      /* the ready ring's capacity */
  pl_worker *w;                    /* [max(n_threads, 1)] */
  void *dev_pkg[NG_BACKEND_MARKS]; /* the packages' device copies, by slot */
  size_t dev_cap[NG_BACKEND_MARKS];
  char *cpuset; /* a copy of o.cpuset */
  _Atomic size_t largest_pkg;
  _Atomic int64_t slot_grows; /* staging slots grown on demand (slot_reserve) since create */
  bool epoch_ran;             /* ng__pipeline_epoch was called */
  ng_ctrl ctrl;               /* the split persists from epoch to epoch */
  char placement[256];
  ng_trace *trace;   /* track 0: the device thread; 1 + w: worker w; then the sample feed (NULL:
                       not tracing) */
  ng_feed *feed;     /* the sample feed while the pool runs with a device sampler, else NULL */
  void *inline_host; /* inline with a device sampler: the blocks' host buffer */
  size_t inline_cap;

  /* The workers' state, which lasts from one epoch to the next while they produce an expected
   * next epoch (ng__pipeline_epoch's `next`). The ring counts positions from 0 at the pool's
   * start; plans[] are the epochs those positions belong to, at most the device's and the one
   * after it, and positions from seq_end on have none yet. */
  ng_ring *ring;
  ng_pool *pool;
  float drop_p;
  pthread_mutex_t plan_mu;
  pthread_cond_t plan_cv;
  pl_plan plans[2];
  int n_plans;
  int64_t seq_end;
  bool stopping;        /* under plan_mu: workers waiting for a plan return */
  int prep;             /* under plan_mu: PREP_* of plans[1]'s order */
  int64_t take_seq;     /* the ring position the device thread takes next */
  affinity aff;         /* the caller's affinity, restored at the end of each epoch call */
  _Atomic int64_t next; /* the next ring position a worker takes */
  _Atomic int share;    /* the device share of PARTIAL packages, in controller steps */
  _Atomic int64_t group_iters[NG_GROUP_COUNT];
  _Atomic int64_t group_busy_ns[NG_GROUP_COUNT];
  _Atomic int64_t feed_wait_ns; /* the workers' waits for the sample feed, in all */
  /* The controller's period that was open when the last epoch ended, as counts since its start
   * (`period_open`): when the workers go on into the next epoch, its first period continues
   * that one, the time between the two calls left out. */
  ng_counters period_tail;
  bool period_open;
  pthread_mutex_t err_mu;
  ng_status err;
  char err_msg[1024];
};

_Atomic int64_t ng__pipeline_fault_epoch = -1, ng__pipeline_fault_iter = -1;

static void stop_workers(ng_pipeline *pl);

/* The sample feed's trace track: after the device thread's and the workers'. */
static int feed_track(const ng_pipeline *pl) {
  return 1 + pl->n_threads;
}

/* ---- resolving options ---- */

/* The PARTIAL workers a hybrid mode starts with: partial_workers, or by default (-1) all but
 * one in HYBRID when TRANSFER workers use zero-copy, else half (rounded up; the controller's
 * own default). A zero-copy worker costs the CPU almost nothing per iteration (the device
 * reads its cold rows), so one alone reaches most of the link's rate (one ran at 95% of
 * fifteen's on W1), while near-data aggregation scales with the cores it gets: from half, the
 * controller ended at 14/1 on W1 and at 14/0 on W4. On W4 (14 workers, H100) the first epoch
 * took 1.53 s from 7/7 and 0.95 s from 13/1, and the steady rate was 245 and 298 it/s
 * (eval/results/2026-11-26-h100-deep.md). BATCH workers gather every cold row themselves:
 * there half stays the start. */
static int initial_partial(const ng_pipeline *pl) {
  if (pl->o.partial_workers >= 0)
    return pl->o.partial_workers;
  if (pl->o.mode == NG_MODE_HYBRID && pl->o.transfer == NG_FETCH_ZCOPY && pl->n_threads > 1)
    return pl->n_threads - 1;
  return -1;
}

ng_mode ng__mode_resolve(ng_mode m, const ng_backend *be) {
  if (m != NG_MODE_AUTO)
    return m;
  return be->iface->host_memory ? NG_MODE_CPU : NG_MODE_HYBRID;
}

ng_fetch ng__transfer_resolve(ng_fetch t, int64_t dim) {
  if (t != NG_FETCH_AUTO)
    return t;
  /* Zero-copy gathers run on the copy queue, overlapping the device's work, and cost a worker
   * no reading at all, while BATCH costs it a gather of every cold row: in the harness on the
   * H100 (eval/results/HISTORY.md) zero-copy beat BATCH with 1-8 workers on
   * 1 KB rows (W3) and with 1-4 on 512 B rows (W2). For 256 B rows zero-copy reaches only
   * ~9 GB/s (../shared/device/limits.md): BATCH there. */
  return dim * (int64_t)sizeof(float) >= 512 ? NG_FETCH_ZCOPY : NG_FETCH_BATCH;
}

ng_fetch ng__mode_fetch(ng_mode m, bool partial_group, ng_fetch transfer) {
  switch (m) {
  case NG_MODE_BASELINE:
    return NG_FETCH_BATCH;
  case NG_MODE_ZEROCOPY:
    return NG_FETCH_ZCOPY;
  case NG_MODE_PARTIAL:
    return NG_FETCH_PARTIAL;
  case NG_MODE_HYBRID_STATIC:
  case NG_MODE_HYBRID:
    return partial_group ? NG_FETCH_PARTIAL : transfer;
  default: /* CPU: every row is hot, nothing is fetched */
    return NG_FETCH_BATCH;
  }
}

static bool is_hybrid(const ng_pipeline *pl) {
  return pl->o.mode == NG_MODE_HYBRID || pl->o.mode == NG_MODE_HYBRID_STATIC;
}

/* ---- slots: staging memory from the backend (pinned on CUDA) ---- */

static ng_status slot_alloc(void *ctx, size_t bytes, void **out) {
  ng_backend *be = ctx;
  return be->iface->host_alloc(be, out, bytes);
}

static void slot_free(void *ctx, void *ptr, size_t bytes) {
  ng_backend *be = ctx;
  (void)bytes;
  be->iface->host_free(be, ptr);
}

/* ---- create / destroy ---- */

void ng__pipeline_destroy(ng_pipeline *pl) {
  if (!pl)
    return;
  stop_workers(pl);
  int n = NG_MAX(pl->n_threads, 1);
  for (int i = 0; pl->w && i < n; i++) {
    ng__slots_destroy(pl->w[i].slots);
    ng__sample_arena_destroy(pl->w[i].arena);
    ng__fetch_scratch_free(&pl->w[i].scratch);
  }
  free(pl->w);
  free(pl->cpuset);
  pl->be->iface->host_free(pl->be, pl->inline_host);
  ng__trace_destroy(pl->trace);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    pl->be->iface->free(pl->be, pl->dev_pkg[k]);
  pthread_mutex_destroy(&pl->err_mu);
  pthread_mutex_destroy(&pl->plan_mu);
  pthread_cond_destroy(&pl->plan_cv);
  free(pl);
}

ng_status ng__pipeline_create(ng_pipeline **out, ng_backend *be, ng_store *store,
                              const ng_sampler_cfg *sampler, const ng_fetch_cfg *fetch,
                              const ng_pipeline_opts *opts) {
  *out = NULL;
  ng_pipeline *pl = ng__calloc(1, sizeof *pl, "the pipeline");
  if (!pl)
    return NG_ERR_NOMEM;
  pthread_mutex_init(&pl->err_mu, NULL);
  pthread_mutex_init(&pl->plan_mu, NULL);
  pthread_cond_init(&pl->plan_cv, NULL);
  pl->be = be;
  pl->store = store;
  pl->sampler = sampler;
  pl->fetch = *fetch;
  pl->o = *opts;
  ng_status st = NG_OK;
  if (opts->cpuset && !(pl->cpuset = strdup(opts->cpuset))) {
    st = ng__err(NG_ERR_NOMEM, "out of memory copying the cpuset");
    goto fail;
  }
  pl->o.cpuset = pl->cpuset;
  if (opts->workers == 0 || opts->workers < -1) {
    st = ng__err(NG_ERR_INTERNAL, "runtime: worker count %d not resolved", opts->workers);
    goto fail;
  }
  if (opts->workers < 0 && is_hybrid(pl)) {
    st = ng__err(NG_ERR_INVALID_ARG,
                 "mode %s splits worker threads into two groups; it needs workers (not -1)",
                 ng_mode_name(opts->mode));
    goto fail;
  }
  if (ng__coop_exchanges(opts->coop) && opts->workers > 0) {
    /* Each step's exchange is a collective, which the ranks must run for the same iterations
     * in the same order: the host work inline does, worker threads (iterations in parallel, in
     * any order) would need an ordered channel of their own, which the GPU path brings. */
    st = ng__err(NG_ERR_UNSUPPORTED,
                 "the cooperative cold fetch runs the host work inline (--workers -1) so far; "
                 "this run has %d worker threads",
                 opts->workers);
    goto fail;
  }
  if (!(opts->device_share >= 0.0 && opts->device_share <= 1.0)) {
    st = ng__err(NG_ERR_INVALID_ARG, "device share %g is not in [0, 1]", opts->device_share);
    goto fail;
  }
  /* In steps of 1 / NG_CTRL_SHARE_DEN, rounded down. */
  const int share = (int)(opts->device_share * NG_CTRL_SHARE_DEN + 1e-9);
  if (share > 0 && !(opts->mode == NG_MODE_HYBRID_STATIC && fetch->self_zcopy)) {
    st = ng__err(NG_ERR_INVALID_ARG,
                 "a device share (%g) is for mode hybrid-static with the zcopy transfer and rows "
                 "of at least 2 KB (hybrid picks its own; here: mode %s, %s)",
                 opts->device_share, ng_mode_name(opts->mode),
                 fetch->self_zcopy ? "the device reads the table" : "no zero-copy view of rows");
    goto fail;
  }
  if (opts->lookahead < 1 || opts->lookahead > NG_LOOKAHEAD_MAX) {
    st = ng__err(NG_ERR_INVALID_ARG, "runtime: lookahead %d is not in [1, %d]", opts->lookahead,
                 NG_LOOKAHEAD_MAX);
    goto fail;
  }
  if (opts->ready_window < 0 || opts->ready_window > NG_READY_WINDOW_MAX) {
    st = ng__err(NG_ERR_INVALID_ARG, "runtime: ready window %d is not in [0, %d] (0: the default)",
                 opts->ready_window, NG_READY_WINDOW_MAX);
    goto fail;
  }
  pl->n_threads = opts->workers > 0 ? opts->workers : 0;
  int n = NG_MAX(pl->n_threads, 1);
  pl->window = opts->ready_window > 0
                   ? opts->ready_window
                   : (int)NG_MIN(NG_READY_WINDOW_MAX, NG_MAX(4, 4 * (int64_t)pl->n_threads));
  /* When the device thread waits for an iteration it holds `lookahead` packages (the one it
   * computes and those copied ahead), possibly all of one worker's: that worker needs one slot
   * more to produce the iteration waited for, and one more again to run ahead. To fill the
   * window, each worker needs its share of it besides the device's: lookahead +
   * ceil(window / workers) slots, and at least the two above. Inline, the device thread fills
   * that one itself (no ring, so no window). */
  const int per_worker = (int)(((int64_t)pl->window + n - 1) / n);
  const int slots = pl->n_threads ? opts->lookahead + NG_MAX(2, per_worker) : opts->lookahead + 1;
  pl->w = ng__calloc((size_t)n, sizeof *pl->w, "the workers' state");
  if (!pl->w) {
    st = NG_ERR_NOMEM;
    goto fail;
  }
  if (opts->dev_sampler && (!be->iface->sampler_run || opts->feed_lanes < 1)) {
    st = ng__err(NG_ERR_INTERNAL, "runtime: a device sampler on a backend without one");
    goto fail;
  }
  if (opts->trace_spans > 0)
    NG_CHECK_GOTO(st,
                  ng__trace_create(&pl->trace,
                                   feed_track(pl) + (opts->dev_sampler ? opts->feed_lanes : 0),
                                   opts->trace_spans),
                  fail);
  for (int i = 0; i < n; i++) {
    NG_CHECK_GOTO(
        st, ng__slots_create(&pl->w[i].slots, slots, SLOT_INITIAL_BYTES, slot_alloc, slot_free, be),
        fail);
    NG_CHECK_GOTO(st, ng__sample_arena_create(&pl->w[i].arena), fail);
  }
  /* The split: hybrid modes start from partial_workers (default: initial_partial()); the
   * others put every worker in the one group their strategy belongs to. */
  ng_ctrl_opts co = NG_CTRL_OPTS_INIT;
  co.period_ms = pl->o.period_ms;
  co.threshold = pl->o.threshold;
  co.fixed = pl->o.mode != NG_MODE_HYBRID;
  co.initial_partial = is_hybrid(pl)                   ? initial_partial(pl)
                       : pl->o.mode == NG_MODE_PARTIAL ? pl->n_threads
                                                       : 0;
  /* Either group may empty: with few workers all-TRANSFER is often best, with many
   * all-PARTIAL; the GPU-bound and CPU-bound rules bring an emptied group back. */
  co.min_per_group = 0;
  /* The device share: fixed in hybrid-static; hybrid moves it in steps, up to half of the
   * destinations, while every worker is PARTIAL (ctrl_impl.h, moves_share in ctrl.c). */
  co.initial_share = share;
  co.share_steps = pl->o.mode == NG_MODE_HYBRID && fetch->self_zcopy ? NG_CTRL_SHARE_DEN / 2 : 0;
  NG_CHECK_GOTO(st, ng__ctrl_init(&pl->ctrl, &co, pl->n_threads), fail);
  atomic_store(&pl->share, pl->ctrl.share);
  for (int i = 0; i < n; i++)
    atomic_store(&pl->w[i].group, i < pl->ctrl.workers[NG_GROUP_PARTIAL] ||
                                          (pl->n_threads == 0 && pl->o.mode == NG_MODE_PARTIAL)
                                      ? NG_GROUP_PARTIAL
                                      : NG_GROUP_TRANSFER);
  *out = pl;
  return NG_OK;
fail:
  ng__pipeline_destroy(pl);
  return st;
}

ng_status ng__pipeline_write_trace(const ng_pipeline *pl, const char *path, int64_t *spans,
                                   int64_t *dropped) {
  if (!pl->trace)
    return ng__err(NG_ERR_STATE, "no timeline was recorded (set trace_spans)");
  int64_t n = 0, lost = 0;
  ng__trace_counts(pl->trace, &n, &lost);
  if (spans)
    *spans = n;
  if (dropped)
    *dropped = lost;
  return ng__trace_write(pl->trace, path);
}

const char *ng__pipeline_placement(const ng_pipeline *pl) {
  return pl->placement;
}

/* ---- the timeline (ng_pipeline_opts.trace_spans) ---- */

/* A span's start: the clock, read only while tracing. */
static inline int64_t span_start(const ng_pipeline *pl) {
  return pl->trace ? ng__now_ns() : 0;
}

/* Records a span of `kind` on `track` (0: the device thread, 1 + w: worker w) from t0 to now
 * and returns now, the next span's start (0 when not tracing). */
static int64_t span_end(ng_pipeline *pl, int track, ng_span_kind kind, int64_t iter, int arg,
                        int64_t t0) {
  if (!pl->trace)
    return 0;
  const int64_t now = ng__now_ns();
  ng__trace_span(pl->trace, track, kind, iter, arg, t0, now);
  return now;
}

/* The same on the device thread's track. */
static int64_t device_span(ng_pipeline *pl, ng_span_kind kind, int64_t iter, int64_t t0) {
  return span_end(pl, 0, kind, iter, 0, t0);
}

/* The fetch configuration of worker group `group` now (its strategy, PARTIAL's device share) for
 * `threads` threads. */
static ng_fetch_cfg group_cfg(ng_pipeline *pl, int group, int threads) {
  ng_fetch_cfg cfg = pl->fetch;
  cfg.mode = ng__mode_fetch(pl->o.mode, group == NG_GROUP_PARTIAL, pl->o.transfer);
  cfg.device_share =
      cfg.mode == NG_FETCH_PARTIAL
          ? ng__ctrl_share_frac(atomic_load_explicit(&pl->share, memory_order_relaxed))
          : 0.0;
  cfg.threads = threads;
  return cfg;
}

/* Samples iteration i of plan p itself (no sample feed): with the device sampler (its lane 0,
 * the blocks in *host of *cap bytes) or the CPU sampler in `arena`. The targets are the plan's
 * order's slice, or what its ng_target_hook makes as producer `producer`, whose payload then
 * comes back in *payload (else NULL, 0). */
static ng_status sample_iter(ng_pipeline *pl, ng_sample_arena *arena, int producer,
                             const ng_epoch_plan *p, int64_t i, ng_minibatch *mb, void **host,
                             size_t *cap, const void **payload, size_t *payload_bytes) {
  int64_t begin;
  int32_t n; /* this rank's slice of the iteration's batch */
  ng__plan_slice(p, i, &begin, &n);
  const int64_t *targets = p->targets ? NULL : p->order + begin; /* a hook's plan has no order */
  *payload = NULL;
  *payload_bytes = 0;
  if (p->targets)
    NG_CHECK(
        p->targets->make(p->targets->ctx, producer, p, i, &targets, &n, payload, payload_bytes));
  const uint64_t seed = ng__iter_seed(p->seed, p->epoch, i);
  if (pl->o.dev_sampler)
    return pl->be->iface->sampler_run(pl->be, pl->o.dev_sampler, 0, pl->sampler, targets, n, seed,
                                      mb, host, cap);
  return ng__sample(mb, arena, pl->sampler, targets, n, seed);
}

/* Where a package's payload goes behind it in its slot: cache-line aligned. */
static size_t payload_offset(size_t pkg_bytes) {
  return (pkg_bytes + 63) / 64 * 64;
}

/* Makes the slot `*buf` of `slots` hold a package of `bytes` after its header, and gives where
 * the package goes, in *base. Page-locked memory is slow to allocate and its release may wait
 * for the device, so a slot that must grow grows once to a sixteenth above the largest package
 * any worker has seen. Every byte of it is resident (pinned), and a mini-batch of a fixed batch
 * size varies by a few percent: a quarter (as before) cost 15% of the staging for growth that
 * never came. The growth is a span of iteration `iter` on trace track `track`. */
static ng_status slot_reserve(ng_pipeline *pl, ng_slots *slots, void **buf, int track, int64_t iter,
                              size_t bytes, void **base) {
  const size_t need = ITEM_HEADER + bytes;
  _Atomic size_t *largest = &pl->largest_pkg; /* the largest package any worker has seen */
  size_t seen = atomic_load(largest);
  while (need > seen && !atomic_compare_exchange_weak(largest, &seen, need))
    ;
  if (ng__slots_bytes(slots, *buf) < need) {
    const size_t big = NG_MAX(need, atomic_load(largest));
    const int64_t t0 = span_start(pl);
    NG_CHECK(ng__slots_grow(slots, buf, ng__slot_size(big)));
    atomic_fetch_add_explicit(&pl->slot_grows, 1, memory_order_relaxed);
    span_end(pl, track, NG_SPAN_SLOT_GROW, iter, 0, t0);
  }
  *base = (char *)*buf + ITEM_HEADER;
  return NG_OK;
}

/* ---- staging slots sized before the first epoch ---- */

/* One thread's share of ng__pipeline_presize: worker `slots`' first `n` slots. */
typedef struct {
  ng_slots *slots;
  int n;
  size_t bytes;
  const cpu_set_t *cpus; /* where it runs (first touch places the pages), or NULL */
  ng_status st;
  char err[1024];
  pthread_t thread;
  bool started;
} presize_job;

static void *presize_main(void *arg) {
  presize_job *j = arg;
  if (j->cpus) /* best effort: unbound, the pages land wherever the thread runs */
    (void)pthread_setaffinity_np(pthread_self(), sizeof *j->cpus, j->cpus);
  j->st = ng__slots_presize(j->slots, j->n, j->bytes);
  if (j->st != NG_OK)
    snprintf(j->err, sizeof j->err, "%s", ng_last_error());
  return NULL;
}

/* The cores the workers will run on, for the threads that touch their slots' pages first: the
 * user's cpuset, else those nearest the device (the pool's choice, sched/pool.c). *bound is false
 * when none can be told (the threads then run unbound; the pool reports a bad cpuset); an
 * allocation that fails is the error. */
static ng_status worker_cpus(const ng_pipeline *pl, cpu_set_t *set, bool *bound) {
  char near[1024] = "", pci[64] = "";
  const char *list = pl->o.cpuset;
  *bound = false;
  if (!(list && *list)) {
    if (pl->be->iface->pci_bus_id(pl->be, pci, sizeof pci) != NG_OK ||
        ng__cpus_near(near, sizeof near, pci[0] ? pci : NULL) != NG_OK)
      return NG_OK;
    list = near;
  }
  int *cpus = NULL, n = 0;
  const ng_status st = ng__cpuset_parse(&cpus, &n, list);
  if (st != NG_OK)
    return st == NG_ERR_NOMEM ? st : NG_OK;
  CPU_ZERO(set);
  for (int i = 0; i < n; i++)
    if (cpus[i] < CPU_SETSIZE)
      CPU_SET(cpus[i], set);
  free(cpus);
  *bound = CPU_COUNT(set) > 0;
  return NG_OK;
}

_Atomic int64_t ng__pipeline_presize_limit = -1;

ng_status ng__pipeline_presize(ng_pipeline *pl, const ng_epoch_plan *plan, float drop_p, size_t cap,
                               size_t *slot_bytes) {
  *slot_bytes = 0;
  if (pl->epoch_ran) /* the pool and the feed start in an epoch */
    return ng__err(NG_ERR_STATE, "runtime: staging slots are sized before the first epoch only");
  const int64_t limit = atomic_load(&ng__pipeline_presize_limit);
  if (limit == 0)
    return NG_OK;
  if (limit > 0)
    cap = NG_MIN(cap, (size_t)limit);
  if (plan->first >= plan->iters)
    return NG_OK;
  const int n = NG_MAX(pl->n_threads, 1);
  /* The probe: iteration plan->first's mini-batch, as its worker will sample it. */
  int64_t begin;
  int32_t nt;
  ng__plan_slice(plan, plan->first, &begin, &nt);
  if (nt <= 0)
    return NG_OK;
  ng_minibatch mb;
  void *host = NULL; /* the device sampler's blocks: inline its own buffer, else freed below */
  size_t host_cap = 0;
  const void *payload;
  size_t payload_bytes;
  ng_status st = sample_iter(pl, pl->w[0].arena, 0, plan, plan->first, &mb,
                             pl->n_threads ? &host : &pl->inline_host,
                             pl->n_threads ? &host_cap : &pl->inline_cap, &payload, &payload_bytes);
  /* Its package by each group's strategy (a dry run: the layout's counting pass only). */
  size_t want[NG_GROUP_COUNT] = {0}; /* the groups the workers are in */
  for (int i = 0; i < n && st == NG_OK; i++) {
    const int g = atomic_load(&pl->w[i].group);
    if (want[g])
      continue;
    const ng_fetch_cfg cfg = group_cfg(pl, g, 1);
    ng_fetch_plan fp;
    st = ng__fetch_plan(&fp, &cfg, &mb, drop_p, &pl->w[0].scratch);
    /* as slot_reserve grows one */
    want[g] = NG_MIN(ng__slot_size(ITEM_HEADER + payload_offset(fp.bytes) + payload_bytes), cap);
  }
  if (host)
    pl->be->iface->host_free(pl->be, host);
  if (st != NG_OK) {
    ng__err_prefix("sizing the staging slots from iteration %lld's mini-batch",
                   (long long)plan->first);
    return st;
  }
  /* Each worker's first slots, as many as it has in flight at the start, one thread a worker:
   * page-locking scales over threads (docs/gpu.md), and the free list hands them out first. */
  cpu_set_t cpus;
  bool bind = false;
  if (n > 1) /* one worker is sized here, with the caller's affinity */
    NG_CHECK(worker_cpus(pl, &cpus, &bind));
  size_t presized = 0; /* the largest size given a slot */
  presize_job *jobs = ng__calloc((size_t)n, sizeof *jobs, "the staging slots' sizing");
  if (!jobs)
    return NG_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    jobs[i] = (presize_job){.slots = pl->w[i].slots,
                            .n = NG_SLOT_PRESIZE,
                            .bytes = want[atomic_load(&pl->w[i].group)],
                            .cpus = bind ? &cpus : NULL};
    jobs[i].started = n > 1 && pthread_create(&jobs[i].thread, NULL, presize_main, &jobs[i]) == 0;
    /* One worker, or no thread to be had: here, the caller's affinity kept. */
    if (!jobs[i].started) {
      jobs[i].cpus = NULL;
      presize_main(&jobs[i]);
    }
  }
  for (int i = 0; i < n; i++) {
    if (jobs[i].started)
      (void)pthread_join(jobs[i].thread, NULL);
    if (jobs[i].st != NG_OK && st == NG_OK)
      st = ng__err(jobs[i].st, "worker %d: %s", i, jobs[i].err);
    if (jobs[i].st == NG_OK)
      presized = NG_MAX(presized, jobs[i].bytes);
  }
  free(jobs);
  if (st == NG_OK)
    *slot_bytes = presized;
  return st;
}

size_t ng__pipeline_slot_bytes(const ng_pipeline *pl, int worker, int j) {
  if (worker < 0 || worker >= NG_MAX(pl->n_threads, 1))
    return 0;
  return ng__slots_next_bytes(pl->w[worker].slots, j);
}

int ng__pipeline_producers(const ng_pipeline *pl) {
  return NG_MAX(pl->n_threads, 1);
}

bool ng__pipeline_inline(const ng_pipeline *pl) {
  return pl->n_threads == 0;
}

int64_t ng__pipeline_slot_grows(const ng_pipeline *pl) {
  return atomic_load(&pl->slot_grows);
}

/* ---- errors from any thread ---- */

/* Records the first failure (with its thread's message) and stops the pipeline. */
static void fail(ng_pipeline *pl, ng_status st, const char *who) {
  pthread_mutex_lock(&pl->err_mu);
  if (pl->err == NG_OK) {
    pl->err = st;
    snprintf(pl->err_msg, sizeof pl->err_msg, "%s: %s", who, ng_last_error());
  }
  pthread_mutex_unlock(&pl->err_mu);
  ng__ring_close(pl->ring, st);
  int n = NG_MAX(pl->n_threads, 1);
  for (int i = 0; i < n; i++)
    ng__slots_close(pl->w[i].slots);
}

/* ---- producing one iteration (a worker, or the device thread inline) ---- */

/* Samples and fetches iteration i of plan p into the slot `*buf`, recording both on trace track
 * `track`. */
static ng_status produce(ng_pipeline *pl, pl_worker *w, int index, int track,
                         const ng_epoch_plan *p, int64_t seq, int64_t i, void **buf) {
  const uint64_t seed = ng__iter_seed(p->seed, p->epoch, i);
  const int group = atomic_load_explicit(&w->group, memory_order_relaxed);
  if (atomic_load(&ng__pipeline_fault_iter) == i &&
      atomic_load(&ng__pipeline_fault_epoch) == p->epoch)
    return ng__err(NG_ERR_IO, "injected failure (ng__pipeline_fault_iter)");
  ng_minibatch mb;
  const void *payload = NULL; /* the plan's ng_target_hook's, in the producer's memory */
  size_t payload_bytes = 0;
  const int64_t t0 = span_start(pl);
  if (pl->feed) {
    const int64_t w0 = ng__now_ns();
    NG_CHECK(ng__feed_get(pl->feed, seq, &mb));
    atomic_fetch_add_explicit(&pl->feed_wait_ns, ng__now_ns() - w0, memory_order_relaxed);
  } else {
    NG_CHECK(sample_iter(pl, w->arena, index, p, i, &mb, &pl->inline_host, &pl->inline_cap,
                         &payload, &payload_bytes));
  }
  int64_t edges = 0; /* the span carries them: the trace's summary gives the sampler's rate */
  for (int l = 0; l < mb.n_layers; l++)
    edges += mb.blocks[l].nnz;
  const int64_t t1 =
      pl->feed ? span_end(pl, track, NG_SPAN_FEED_WAIT, i, 0, t0)
               : span_end(pl, track, NG_SPAN_SAMPLE, i, (int)NG_MIN(edges, (int64_t)INT32_MAX), t0);
  ng_fetch_cfg cfg = group_cfg(pl, group, pl->n_threads ? 1 : pl->o.omp_threads);
  /* The package is planned (its size), its slot made to hold it, then filled. */
  ng_fetch_plan plan;
  ng_fetch_pkg pkg;
  void *base = NULL;
  ng_status fetched = NG_OK;
  if (pl->o.coop) /* the host's ranks exchange the step's cold rows */
    fetched = ng__coop_step(pl->o.coop, &mb, &cfg.overlay);
  if (fetched == NG_OK)
    fetched = ng__fetch_plan(&plan, &cfg, &mb, pl->drop_p, &w->scratch);
  const size_t at = payload_offset(plan.bytes); /* the payload's place behind the package */
  if (fetched == NG_OK)
    fetched = slot_reserve(pl, w->slots, buf, track, i,
                           payload_bytes ? at + payload_bytes : plan.bytes, &base);
  if (fetched == NG_OK)
    fetched =
        ng__fetch_fill(&pkg, &plan, &cfg, &mb, ng__exec_input_drop_key(seed), &w->scratch, base);
  if (fetched == NG_OK && payload_bytes)
    memcpy((char *)base + at, payload, payload_bytes);
  if (pl->feed) /* the package holds its own copy of the blocks */
    ng__feed_release(pl->feed, seq);
  NG_CHECK(fetched);
  span_end(pl, track, NG_SPAN_FETCH, i, group, t1);
  pl_item *it = *buf;
  it->iter = i;
  it->worker = index;
  it->group = group;
  it->status = NG_OK;
  it->edges = 0;
  for (int l = 0; l < mb.n_layers; l++)
    it->edges += mb.blocks[l].nnz;
  it->pkg = pkg;
  it->payload = payload_bytes ? (char *)base + at : NULL;
  return NG_OK;
}

/* Writes the order of plans[1], which the caller left to the workers, on worker track `track`
 * (ng_epoch_plan.shuffle_ids). plan_mu is held on entry and on return, but not while the order
 * is written; plans[] stay as they are meanwhile (plan_epoch and ng__pipeline_settle wait). */
static void prepare_next(ng_pipeline *pl, int track) {
  pl->prep = PREP_RUNNING;
  const ng_epoch_plan p = pl->plans[1].plan;
  pthread_mutex_unlock(&pl->plan_mu);
  const int64_t t0 = span_start(pl);
  /* The caller's buffer, left to be written (the plan's readers see it const). */
  ng__epoch_shuffle((int64_t *)p.order, p.shuffle_ids, p.n_train, p.seed, p.epoch);
  if (p.order_epoch)
    *p.order_epoch = p.epoch;
  span_end(pl, track, NG_SPAN_PREPARE, p.epoch, 0, t0);
  pthread_mutex_lock(&pl->plan_mu);
  pl->prep = PREP_NONE;
  pl->plans[1].ready = true;
  pthread_cond_broadcast(&pl->plan_cv);
}

/* A worker between two iterations writes a pending next order before it takes a ring
 * position: holding one meanwhile could keep the device waiting for that position. */
static void prepare_pending(ng_pipeline *pl, int track) {
  pthread_mutex_lock(&pl->plan_mu);
  if (pl->prep == PREP_PENDING && !pl->stopping)
    prepare_next(pl, track);
  pthread_mutex_unlock(&pl->plan_mu);
}

/* The plan and iteration of ring position `seq`, waiting until the device thread has published
 * a plan covering it and its order is written; a worker that must wait for a pending order
 * writes it itself. False when the pool is stopping, or on a position no plan covers (a bug,
 * reported through fail()). */
static bool plan_of(ng_pipeline *pl, int track, int64_t seq, ng_epoch_plan *plan, int64_t *iter) {
  pthread_mutex_lock(&pl->plan_mu);
  bool ok = false, lost = false;
  int64_t oldest = -1;
  while (!pl->stopping) {
    const pl_plan *p = NULL;
    for (int k = 0; k < pl->n_plans; k++)
      if (seq >= pl->plans[k].seq0 &&
          seq < pl->plans[k].seq0 + (pl->plans[k].plan.iters - pl->plans[k].plan.first))
        p = &pl->plans[k];
    if (p && p->ready) {
      *plan = p->plan;
      *iter = p->plan.first + (seq - p->seq0);
      ok = true;
      break;
    }
    if (!p && seq < pl->seq_end) { /* below the oldest plan: taken after its plan was dropped */
      lost = true;
      oldest = pl->n_plans > 0 ? pl->plans[0].seq0 : -1;
      break;
    }
    if (pl->prep == PREP_PENDING) /* it must wait anyway: it writes the pending order */
      prepare_next(pl, track);
    else
      pthread_cond_wait(&pl->plan_cv, &pl->plan_mu); /* not published, or being written */
  }
  pthread_mutex_unlock(&pl->plan_mu);
  if (lost)
    fail(pl,
         ng__err(NG_ERR_INTERNAL, "ring position %lld belongs to no plan (oldest from %lld)",
                 (long long)seq, (long long)oldest),
         "a worker");
  return ok;
}

/* Makes the slot `it` (worker `index`'s, iteration i) a failed item: the device thread fails
 * with the worker's message when it reaches it. */
static void mark_failed(pl_worker *w, pl_item *it, int index, int64_t i, ng_status st) {
  snprintf(w->err, sizeof w->err, "%s", ng_last_error());
  it->iter = i;
  it->worker = index;
  it->status = st;
}

/* A worker: takes ring positions in turn and produces their iterations, whichever epoch they
 * belong to, until the pool stops. A failed iteration goes into the ring as an item with an
 * error, so that the device thread meets it in order (the iterations before it are trained),
 * and the worker stops. */
static void worker_main(void *ctx, int index) {
  ng_pipeline *pl = ctx;
  pl_worker *w = &pl->w[index];
  for (;;) {
    prepare_pending(pl, 1 + index);
    const int64_t seq = atomic_fetch_add(&pl->next, 1);
    ng_epoch_plan plan;
    int64_t i = 0;
    if (!plan_of(pl, 1 + index, seq, &plan, &i))
      return;
    const int64_t t0 = ng__now_ns();
    void *buf = ng__slots_acquire(w->slots);
    if (!buf)
      return; /* closed: the pool is stopping */
    span_end(pl, 1 + index, NG_SPAN_SLOT_WAIT, i, 0, t0);
    ng_status st = produce(pl, w, index, 1 + index, &plan, seq, i, &buf);
    pl_item *it = buf;
    if (st != NG_OK) {
      ng__err_prefix("worker %d", index);
      mark_failed(w, it, index, i, st);
    } else {
      atomic_fetch_add(&pl->group_iters[it->group], 1);
      atomic_fetch_add(&pl->group_busy_ns[it->group], ng__now_ns() - t0);
    }
    const int64_t t_put = span_start(pl);
    const ng_status put = ng__ring_put(pl->ring, seq, buf);
    span_end(pl, 1 + index, NG_SPAN_READY_WAIT, i, 0, t_put);
    if (put != NG_OK) { /* closed: the pool is stopping, or a bug that must stop the run */
      (void)ng__slots_release(w->slots, buf);
      if (put != NG_ERR_INTERRUPTED) {
        char who[32];
        snprintf(who, sizeof who, "worker %d", index);
        fail(pl, put, who);
      }
      return;
    }
    if (st != NG_OK)
      return;
  }
}

/* ---- the device thread ---- */

/* Iteration i's item, from the ring or produced here (inline). */
static ng_status take(ng_pipeline *pl, const ng_epoch_plan *plan, int64_t i, pl_item **out) {
  if (pl->n_threads == 0) {
    pl_worker *w = &pl->w[0];
    void *buf = ng__slots_acquire(w->slots);
    if (!buf)
      return ng__err(NG_ERR_INTERNAL, "runtime: no free staging slot inline");
    const ng_status st = produce(pl, w, 0, 0, plan, -1, i, &buf);
    pl_item *it = buf;
    if (st != NG_OK) /* a failed item, as a worker's: the iterations before it train first */
      mark_failed(w, it, 0, i, st);
    *out = it;
    return NG_OK;
  }
  int64_t got = -1;
  void *item = NULL;
  const int64_t t0 = span_start(pl);
  ng_status st = ng__ring_take(pl->ring, &got, &item);
  device_span(pl, NG_SPAN_TAKE_WAIT, i, t0);
  if (st != NG_OK) {
    pthread_mutex_lock(&pl->err_mu);
    if (pl->err != NG_OK)
      st = ng__err(pl->err, "%s", pl->err_msg);
    pthread_mutex_unlock(&pl->err_mu);
    return st;
  }
  const int64_t want = pl->take_seq++;
  pl_item *it = item;
  if (!it || got != want || it->iter != i) {
    if (it) /* handed back, so that the pool's stop finds every slot */
      (void)ng__slots_release(pl->w[it->worker].slots, it);
    return ng__err(NG_ERR_INTERNAL,
                   "runtime: expected iteration %lld at ring position %lld, the ring gave "
                   "position %lld",
                   (long long)i, (long long)want, (long long)got);
  }
  *out = it; /* a failed item too: the device loop fails when it reaches it */
  return NG_OK;
}

static void release(ng_pipeline *pl, pl_item *it) {
  if (it)
    (void)ng__slots_release(pl->w[it->worker].slots, it);
}

/* Queues the copy of item `it` (iteration `iter`) into device buffer k (after mark k: the
 * iteration that last used that buffer is done with it), sets `view` to the package as the
 * device sees it and queues the reads of host memory the package needs behind the copy. */
static ng_status upload(ng_pipeline *pl, ng_train_step *step, uint64_t seed, pl_item *it, int k,
                        ng_fetch_pkg *view) {
  ng_backend *be = pl->be;
  if (be->iface->host_memory) {
    *view = it->pkg;
  } else {
    NG_CHECK(
        ng__bk_reserve(be, &pl->dev_pkg[k], &pl->dev_cap[k], NG_MAX(it->pkg.bytes, (size_t)64)));
    NG_CHECK(be->iface->copy_h2d_async(be, pl->dev_pkg[k], it->pkg.base, it->pkg.bytes, k));
    it->pkg.stats.h2d_bytes = (int64_t)it->pkg.bytes;
    ng__fetch_rebase(view, &it->pkg, pl->dev_pkg[k]);
  }
  return ng__train_step_prefetch(step, seed, view, k);
}

/* Takes iteration `iter` and copies it into slot iter % depth: its item in ahead[], its package
 * as the device sees it in view[]. */
static ng_status copy_ahead(ng_pipeline *pl, const ng_epoch_plan *plan, ng_train_step *step,
                            int64_t iter, int depth, pl_item **ahead, ng_fetch_pkg *view) {
  const int k = (int)(iter % depth);
  NG_CHECK(take(pl, plan, iter, &ahead[k]));
  if (ahead[k]->status != NG_OK)
    return NG_OK;
  const int64_t t0 = span_start(pl);
  const ng_status st =
      upload(pl, step, ng__iter_seed(plan->seed, plan->epoch, iter), ahead[k], k, &view[k]);
  device_span(pl, NG_SPAN_UPLOAD, iter, t0);
  return st;
}

/* Whether no package taken ahead is a failed one (after which the loop takes no more). */
static bool ahead_ok(pl_item *const *ahead, int depth) {
  for (int k = 0; k < depth; k++)
    if (ahead[k] && ahead[k]->status != NG_OK)
      return false;
  return true;
}

static void snap(ng_pipeline *pl, ng_counters *s, int64_t iters, int64_t pcie, int64_t cpu_cold) {
  s->t_ns = ng__now_ns();
  s->iters = iters;
  s->pcie = pcie;
  s->cpu_cold = cpu_cold;
  for (int g = 0; g < NG_GROUP_COUNT; g++) {
    s->group_iters[g] = atomic_load(&pl->group_iters[g]);
    s->group_busy_ns[g] = atomic_load(&pl->group_busy_ns[g]);
  }
  ng_ring_stats rs = {0};
  if (pl->ring)
    ng__ring_stats(pl->ring, &rs);
  s->put_wait_ns = rs.put_wait_ns;
  s->take_wait_ns = rs.take_wait_ns;
  s->feed_wait_ns = atomic_load(&pl->feed_wait_ns);
  s->ring_depth = rs.depth;
}

/* Makes the workers' groups and the device share what the controller decided: a move changes
 * either the share or the split, where the highest-numbered worker of the group that gives
 * one changes sides. */
static void apply_decision(ng_pipeline *pl, const ng_ctrl_decision *dec) {
  atomic_store(&pl->share, dec->share);
  int partial = 0;
  for (int i = 0; i < pl->n_threads; i++)
    partial += atomic_load(&pl->w[i].group) == NG_GROUP_PARTIAL;
  if (partial == dec->workers[NG_GROUP_PARTIAL])
    return;
  const int from = partial > dec->workers[NG_GROUP_PARTIAL] ? NG_GROUP_PARTIAL : NG_GROUP_TRANSFER;
  for (int i = pl->n_threads - 1; i >= 0; i--)
    if (atomic_load(&pl->w[i].group) == from) {
      atomic_store(&pl->w[i].group, 1 - from);
      return;
    }
}

typedef struct {
  char text[DECISIONS_CAP];
  size_t len;
} decisions;

static void add_decision(decisions *d, const ng_ctrl_decision *dec) {
  if (d->len + 1 >= sizeof d->text)
    return; /* the interval's log is full; the telemetry line says so by its length */
  size_t n = ng__ctrl_log_line(dec, d->text + d->len, sizeof d->text - d->len - 1);
  d->len = NG_MIN(d->len + n, sizeof d->text - 2);
  d->text[d->len++] = '\n';
  d->text[d->len] = '\0';
}

static void affinity_save(affinity *a) {
  a->saved = pthread_getaffinity_np(pthread_self(), sizeof a->set, &a->set) == 0;
}

static void affinity_restore(const affinity *a) {
  if (a->saved)
    (void)pthread_setaffinity_np(pthread_self(), sizeof a->set, &a->set);
}

/* The sample feed's question: the targets and seed of ring position `seq` (ng_feed_plan_fn). */
static bool feed_plan(void *ctx, int lane, int64_t seq, const int64_t **targets, int32_t *n,
                      uint64_t *seed) {
  ng_pipeline *pl = ctx;
  ng_epoch_plan p;
  int64_t i = 0;
  if (!plan_of(pl, feed_track(pl) + lane, seq, &p, &i))
    return false;
  int64_t begin;
  ng__plan_slice(&p, i, &begin, n);
  *targets = p.order + begin;
  *seed = ng__iter_seed(p.seed, p.epoch, i);
  return true;
}

/* Starts the ring and the pool, the workers producing from ring position 0 = iteration
 * plan->first of `plan`. */
static ng_status start_workers(ng_pipeline *pl, const ng_epoch_plan *plan) {
  NG_CHECK(ng__ring_create(&pl->ring, pl->window));
  for (int i = 0; i < pl->n_threads; i++)
    ng__slots_reopen(pl->w[i].slots);
  pl->stopping = false;
  pl->prep = PREP_NONE;
  pl->plans[0] = (pl_plan){*plan, 0, true};
  pl->n_plans = 1;
  pl->seq_end = plan->iters - plan->first;
  pl->take_seq = 0;
  atomic_store(&pl->next, 0);
  char pci[64] = "";
  NG_CHECK(pl->be->iface->pci_bus_id(pl->be, pci, sizeof pci));
  ng_pool_opts po = NG_POOL_OPTS_INIT;
  po.workers = pl->n_threads;
  po.cpuset = pl->o.cpuset;
  po.pci_bus_id = pci[0] ? pci : NULL;
  po.reserve_device_core = true;
  po.bind = true;
  if (pl->o.dev_sampler) {
    /* A worker holds its position's slot for its whole fetch (the package copies the blocks
     * as it goes). With one slot per worker and a few more, a fast worker (TRANSFER by
     * zero-copy) beside slow ones (PARTIAL, 50 ms a package on W4) waited for the slot of a
     * position the slow ones still held: twice the workers cut hybrid's feed waits from 7-19%
     * of the workers' time and gave W4 4% at 15 workers (H100, partial and hybrid alike). */
    ng_feed_opts fo = {.be = pl->be,
                       .sampler = pl->o.dev_sampler,
                       .cfg = pl->sampler,
                       .lanes = pl->o.feed_lanes,
                       .slots = 2 * pl->n_threads + 2 + pl->o.feed_lanes,
                       .plan = feed_plan,
                       .plan_ctx = pl,
                       .trace = pl->trace,
                       .track = feed_track(pl)};
    NG_CHECK(ng__feed_start(&pl->feed, &fo));
    for (int k = 0; pl->trace && k < pl->o.feed_lanes; k++) {
      char name[64];
      snprintf(name, sizeof name, "sample feed, lane %d (device sampler)", k);
      ng__trace_name(pl->trace, feed_track(pl) + k, name);
    }
  }
  NG_CHECK(ng__pool_start(&pl->pool, &po, worker_main, pl));
  snprintf(pl->placement, sizeof pl->placement, "%s", ng__pool_describe(pl->pool));
  if (pl->trace && ng__pool_device_core(pl->pool) >= 0) {
    char name[64];
    snprintf(name, sizeof name, "device thread (core %d)", ng__pool_device_core(pl->pool));
    ng__trace_name(pl->trace, 0, name);
  }
  for (int w = 0; pl->trace && w < pl->n_threads; w++) {
    char name[64];
    snprintf(name, sizeof name, "worker %d (core %d)", w, ng__pool_core(pl->pool, w));
    ng__trace_name(pl->trace, 1 + w, name);
  }
  return NG_OK;
}

/* Stops and joins the workers, returns every slot in the ring and frees it. */
static void stop_workers(ng_pipeline *pl) {
  if (pl->pool) {
    pthread_mutex_lock(&pl->plan_mu);
    pl->stopping = true;
    pthread_cond_broadcast(&pl->plan_cv);
    pthread_mutex_unlock(&pl->plan_mu);
    ng__ring_close(pl->ring, NG_ERR_INTERRUPTED); /* no effect after a failure closed it */
    for (int i = 0; i < pl->n_threads; i++)
      ng__slots_close(pl->w[i].slots);
    ng__feed_close(pl->feed);
    ng__pool_join(pl->pool);
    pl->pool = NULL;
  }
  if (pl->feed) { /* its threads may wait for a plan: wake them even if the pool never started */
    pthread_mutex_lock(&pl->plan_mu);
    pl->stopping = true;
    pthread_cond_broadcast(&pl->plan_cv);
    pthread_mutex_unlock(&pl->plan_mu);
  }
  ng__feed_stop(pl->feed); /* after the join: no worker waits in it any more */
  pl->feed = NULL;
  int64_t iter;
  void *item;
  while (pl->ring && ng__ring_reclaim(pl->ring, &iter, &item))
    release(pl, item);
  ng__ring_destroy(pl->ring);
  pl->ring = NULL;
  pl->n_plans = 0;
  pl->prep = PREP_NONE; /* an order no worker began is the caller's again */
  pl->period_open = false;
}

/* stop_workers(), with a STOP span (of `epoch`, -1 for none) when a pool was running. */
static void stop_traced(ng_pipeline *pl, int64_t epoch) {
  const bool running = pl->pool != NULL;
  const int64_t t0 = span_start(pl);
  stop_workers(pl);
  if (running)
    device_span(pl, NG_SPAN_STOP, epoch, t0);
}

void ng__pipeline_stop(ng_pipeline *pl) {
  stop_traced(pl, -1);
}

int64_t ng__pipeline_ahead(const ng_pipeline *pl) {
  return pl->pool && pl->n_plans == 2 ? pl->plans[1].plan.epoch : -1;
}

void ng__pipeline_settle(ng_pipeline *pl) {
  pthread_mutex_lock(&pl->plan_mu);
  while (pl->prep == PREP_RUNNING)
    pthread_cond_wait(&pl->plan_cv, &pl->plan_mu);
  pl->prep = PREP_NONE; /* a pending one is the caller's now */
  pthread_mutex_unlock(&pl->plan_mu);
}

static bool same_plan(const ng_epoch_plan *a, const ng_epoch_plan *b) {
  return a->order == b->order && a->n_train == b->n_train && a->batch == b->batch &&
         a->epoch == b->epoch && a->first == b->first && a->iters == b->iters &&
         a->seed == b->seed && a->rank == b->rank && a->ranks == b->ranks &&
         a->targets == b->targets;
}

/* Makes the workers produce `plan` from ring position take_seq on: those left running for it
 * go on (the plan before it is done and dropped), others are stopped and a pool started. Then
 * publishes `next`, when given, after it. */
static ng_status plan_epoch(ng_pipeline *pl, const ng_epoch_plan *plan, const ng_epoch_plan *next,
                            float drop_p, bool *went_on) {
  const bool goes_on = pl->pool && pl->n_plans == 2 && same_plan(&pl->plans[1].plan, plan) &&
                       pl->plans[1].seq0 == pl->take_seq && pl->drop_p == drop_p;
  *went_on = goes_on;
  if (!goes_on) {
    const int64_t t0 = span_start(pl);
    stop_workers(pl);
    pl->drop_p = drop_p;
    NG_CHECK(start_workers(pl, plan));
    device_span(pl, NG_SPAN_START, plan->epoch, t0);
  }
  pthread_mutex_lock(&pl->plan_mu);
  if (pl->prep != PREP_NONE) { /* the plan trained next may be the one whose order is unwritten */
    pthread_mutex_unlock(&pl->plan_mu);
    return ng__err(NG_ERR_INTERNAL,
                   "runtime: the last call's next order was not settled (ng__pipeline_settle)");
  }
  if (goes_on) {
    pl->plans[0] = pl->plans[1];
    pl->plans[0].ready = true; /* the caller's plan: its order is written */
    pl->n_plans = 1;
    pthread_cond_broadcast(&pl->plan_cv);
  }
  if (next && next->iters > next->first) {
    pl->plans[1] = (pl_plan){*next, pl->seq_end, !next->shuffle_ids};
    pl->n_plans = 2;
    pl->seq_end += next->iters - next->first;
    pl->prep = next->shuffle_ids ? PREP_PENDING : PREP_NONE;
    pthread_cond_broadcast(&pl->plan_cv);
  }
  pthread_mutex_unlock(&pl->plan_mu);
  return NG_OK;
}

/* Iteration `iter` is done (in order): counts it into the tally, then reports progress, which
 * may stop the epoch. */
static ng_status tally_iter(ng_epoch_tally *t, int64_t iter, double loss, int64_t correct,
                            int64_t edges, const ng_fetch_stats *f) {
  t->loss_sum += loss * ng__grad_loss_weight(t->ranks, iter);
  t->correct += correct;
  t->edges += edges;
  ng__fetch_stats_add(&t->fetch, f);
  const double now = ng__now();
  t->iter_ms[t->n_iter_ms++] = (now - t->last_done) * 1e3;
  t->last_done = now;
  t->done = iter + 1;
  return ng__progress(t->prog, "train", (double)(iter + 1), (double)t->iters, iter + 1 == t->iters);
}

/* Reads the loss of `iter` (whose step is queued), adds the iteration to the tally and hands
 * its package back: its copy is done, since the loss came after it. */
static ng_status finish_prev(ng_pipeline *pl, ng_train_step *step, ng_epoch_tally *tally,
                             int64_t iter, pl_item *it, int64_t *pcie, int64_t *cpu_cold,
                             int64_t *done) {
  double loss = 0.0;
  int64_t correct = 0;
  ng_status st = ng__train_step_result(step, iter, &loss, &correct);
  if (st == NG_OK) {
    *pcie += it->pkg.stats.h2d_bytes + it->pkg.stats.zcopy_bytes;
    *cpu_cold += it->pkg.stats.cpu_cold_bytes;
    ++*done;
    st = tally_iter(tally, iter, loss, correct, it->edges, &it->pkg.stats);
  }
  release(pl, it);
  return st;
}

/* The device loop's state, which lasts from one iteration to the next. Iteration i's ops are
 * queued while the device still runs i - 1's; the host reads i - 1's loss only after queuing
 * i's forward, and queues i's backward and step after that, so the device never waits for the
 * host's launches. The packages of i + 1 .. i + lookahead are copied (and their zero-copy reads
 * queued) while the device runs i, each in slot iter % (lookahead + 1). */
typedef struct {
  ng_pipeline *pl;
  const ng_epoch_plan *plan;
  ng_train_step *step;
  ng_epoch_tally *tally;
  int depth;                           /* the slots in use, lookahead + 1 */
  pl_item *ahead[NG_BACKEND_MARKS];    /* the package in slot k */
  ng_fetch_pkg view[NG_BACKEND_MARKS]; /* the same as the device sees it */
  pl_item *prev;     /* the package of the iteration whose step is queued, its loss unread */
  int64_t prev_iter; /* that iteration */
  int64_t up;        /* the next iteration to copy */
  bool fwd_unread;   /* i's forward is queued, its loss unread, its step not queued */
  int64_t done, pcie, cpu_cold;
  ng_counters ctl0, tel0; /* the counters at the controller period's and telemetry's start */
  int64_t epoch_t0;
  decisions log; /* the controller's decisions since the last telemetry line */
} epoch_loop;

/* Clears the last call's error and makes ready whoever produces this epoch's iterations: the
 * workers (going on, or started) or, without threads, the device thread itself. */
static ng_status begin_epoch(ng_pipeline *pl, const ng_epoch_plan *plan, const ng_epoch_plan *next,
                             float drop_p, bool *went_on) {
  pthread_mutex_lock(&pl->err_mu); /* workers that went on may be running */
  pl->err = NG_OK;
  pl->err_msg[0] = '\0';
  pthread_mutex_unlock(&pl->err_mu);

  ng_status st = NG_OK;
  *went_on = false; /* the workers went on into this epoch from the last one */
  /* The sample feed asks the plan's order for its targets, and the ranks slice the order. */
  if (plan->targets && (pl->o.dev_sampler || plan->ranks > 1))
    return ng__err(NG_ERR_UNSUPPORTED,
                   "targets made per iteration (link prediction) need the CPU sampler and one "
                   "rank (here: the %s sampler, %d ranks)",
                   pl->o.dev_sampler ? "device" : "CPU", NG_MAX(plan->ranks, 1));
  if (pl->n_threads > 0) {
    st = plan_epoch(pl, plan, next, drop_p, went_on);
    /* A pool's start and the ring's fill must not count, neither in the judge's window of a
     * move made late in the last epoch nor in the rate a move is judged against: after a
     * start the first period is a settling one. Workers that went on need none; their period
     * continues below. A pending verdict carries over, so that short epochs still judge their
     * moves. */
    if (!*went_on)
      pl->ctrl.settle = NG_MAX(pl->ctrl.settle, 1);
    affinity_save(&pl->aff);
    /* Binding may be refused (containers): the run goes on unbound, as the placement says. */
    if (st == NG_OK && ng__pool_bind_device_thread(pl->pool) != NG_OK &&
        !strstr(pl->placement, "device thread unbound")) {
      size_t len = strlen(pl->placement);
      snprintf(pl->placement + len, sizeof pl->placement - len,
               ", device thread unbound (binding refused)");
    }
  } else {
    pl->drop_p = drop_p;
    snprintf(pl->placement, sizeof pl->placement,
             "inline: the training thread samples and "
             "fetches between device steps");
  }
  return st;
}

/* Starts the device loop's state: nothing taken yet, and the counters the controller and the
 * telemetry measure from. */
static void loop_init(epoch_loop *L, ng_pipeline *pl, const ng_epoch_plan *plan,
                      ng_train_step *step, ng_epoch_tally *tally, bool went_on) {
  L->pl = pl;
  L->plan = plan;
  L->step = step;
  L->tally = tally;
  L->done = L->pcie = L->cpu_cold = 0;
  snap(pl, &L->ctl0, L->done, L->pcie, L->cpu_cold);
  L->tel0 = L->ctl0;
  L->epoch_t0 = L->ctl0.t_ns;
  /* The period open at the last epoch's end goes on, the caller's time between the two calls
   * left out: a period begun at each epoch's start would lose the end of the last one and W1's
   * ~150 ms epochs hold only three 50 ms periods. So is the work the workers did in that time:
   * the packages the ring gained meanwhile do not count as the device's iterations, or a
   * caller that evaluates between epochs would make every split look fast. */
  if (went_on && pl->period_open)
    ng__counters_resume(&L->ctl0, &L->ctl0, &pl->period_tail);
  pl->period_open = false;
  L->log.len = 0;
  L->log.text[0] = '\0';
  L->depth = pl->o.lookahead + 1;
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    L->ahead[k] = NULL;
  L->prev = NULL;
  L->prev_iter = -1;
  L->up = plan->first;
  L->fwd_unread = false;
}

/* Copies the first `lookahead` packages before the first iteration, so that the device loop
 * finds them in flight. */
static ng_status fill_ahead(epoch_loop *L) {
  ng_pipeline *pl = L->pl;
  const ng_epoch_plan *plan = L->plan;
  ng_status st = NG_OK;
  for (; st == NG_OK && L->up < plan->iters && L->up < plan->first + pl->o.lookahead &&
         ahead_ok(L->ahead, L->depth);
       L->up++)
    if ((st = copy_ahead(pl, plan, L->step, L->up, L->depth, L->ahead, L->view)) != NG_OK)
      ng__err_prefix("iteration %lld", (long long)L->up);
  return st;
}

/* Queues iteration i on the device, reads the loss of the one before it and copies the next
 * package ahead. An error is prefixed with the iteration it belongs to. */
static ng_status device_iteration(epoch_loop *L, int64_t i) {
  ng_pipeline *pl = L->pl;
  ng_backend *be = pl->be;
  const ng_epoch_plan *plan = L->plan;
  const int k = (int)(i % L->depth);
  pl_item **ahead = L->ahead;
  ng_status st = NG_OK;
  int64_t failed = i;              /* the iteration an error belongs to */
  if (ahead[k]->status != NG_OK) { /* its worker failed: every iteration before it is done */
    st = ng__err(ahead[k]->status, "%s", pl->w[ahead[k]->worker].err);
    ng__err_prefix("iteration %lld", (long long)i);
    return st;
  }
  /* Iteration i's package must have landed before its first op. */
  int64_t tk = span_start(pl);
  st = be->iface->wait_copy(be, k);
  tk = device_span(pl, NG_SPAN_COPY_WAIT, i, tk);
  if (st == NG_OK)
    st = ng__train_step_forward(L->step, i, ng__iter_seed(plan->seed, plan->epoch, i), &L->view[k],
                                ahead[k]->payload, k);
  tk = device_span(pl, NG_SPAN_FORWARD, i, tk);
  L->fwd_unread = st == NG_OK;
  if (st == NG_OK && L->prev) {
    st =
        finish_prev(pl, L->step, L->tally, L->prev_iter, L->prev, &L->pcie, &L->cpu_cold, &L->done);
    failed = L->prev_iter;
    L->prev = NULL;
    tk = device_span(pl, NG_SPAN_LOSS_WAIT, L->prev_iter, tk);
  }
  if (st == NG_OK) {
    failed = i;
    st = ng__train_step_backward(L->step, i, &L->view[k]);
    device_span(pl, NG_SPAN_BACKWARD, i, tk);
  }
  if (st == NG_OK) {
    L->fwd_unread = false;
    L->prev = ahead[k];
    L->prev_iter = i;
    ahead[k] = NULL;
    st = be->iface->mark(be, k); /* slot k is free after this point */
  }
  if (st == NG_OK && L->up < plan->iters && ahead_ok(ahead, L->depth)) {
    failed = L->up;
    st = copy_ahead(pl, plan, L->step, L->up++, L->depth, ahead, L->view);
  }
  if (st == NG_OK && i + 1 == plan->iters) {
    failed = i;
    const int64_t t_last = span_start(pl);
    st =
        finish_prev(pl, L->step, L->tally, L->prev_iter, L->prev, &L->pcie, &L->cpu_cold, &L->done);
    L->prev = NULL;
    device_span(pl, NG_SPAN_LOSS_WAIT, i, t_last);
  }
  if (st != NG_OK)
    ng__err_prefix("iteration %lld", (long long)failed);
  return st;
}

/* Gives the controller the period that ends at `now` and applies its decision, which the next
 * telemetry line lists. */
static void control_period(epoch_loop *L, const ng_counters *now) {
  ng_pipeline *pl = L->pl;
  ng_counters d; /* since the period's start */
  ng__counters_sub(&d, now, &L->ctl0);
  const double secs = (double)d.t_ns * 1e-9;
  ng_ctrl_sample s = {.ring_capacity = pl->window};
  for (int g = 0; g < NG_GROUP_COUNT; g++) {
    s.iters[g] = d.group_iters[g];
    s.busy_s[g] = (double)d.group_busy_ns[g] * 1e-9;
  }
  s.ring_depth = d.ring_depth;
  s.producer_wait_frac = NG_MIN(1.0, (double)d.put_wait_ns * 1e-9 / (secs * pl->n_threads));
  s.consumer_wait_frac = NG_MIN(1.0, (double)d.take_wait_ns * 1e-9 / secs);
  s.feed_wait_frac =
      pl->n_threads ? NG_MIN(1.0, (double)d.feed_wait_ns * 1e-9 / (secs * pl->n_threads)) : 0.0;
  s.done = d.iters;
  s.seconds = secs;
  ng_ctrl_decision dec = ng__ctrl_step(&pl->ctrl, &s);
  if (dec.move != NG_CTRL_MOVE_NONE)
    apply_decision(pl, &dec);
  add_decision(&L->log, &dec);
  L->ctl0 = *now;
}

/* Hands the telemetry callback the interval that ends at `now`, with the decisions made in it,
 * and starts the next interval. */
static void report_telemetry(epoch_loop *L, const ng_counters *now) {
  ng_pipeline *pl = L->pl;
  ng_counters d; /* since the telemetry interval's start */
  ng__counters_sub(&d, now, &L->tel0);
  const double secs = (double)d.t_ns * 1e-9;
  ng_telemetry t = {
      .epoch = L->plan->epoch,
      .t = (double)(now->t_ns - L->epoch_t0) * 1e-9,
      .seconds = secs,
      .iterations = d.iters,
      .it_per_s = (double)d.iters / secs,
      .pcie_bytes = d.pcie,
      .cpu_cold_bytes = d.cpu_cold,
      .ring_depth = d.ring_depth,
      .device_busy = NG_MAX(0.0, 1.0 - (double)d.take_wait_ns * 1e-9 / secs),
      .decisions = L->log.text,
      .device_share = ng__ctrl_share_frac(pl->ctrl.share),
  };
  t.workers[0] = pl->ctrl.workers[0];
  t.workers[1] = pl->ctrl.workers[1];
  for (int g = 0; g < NG_GROUP_COUNT; g++) {
    const double busy = (double)d.group_busy_ns[g] * 1e-9;
    t.group_it_per_s[g] = busy > 0 ? (double)d.group_iters[g] / busy : 0.0;
  }
  pl->o.telemetry(&t, pl->o.telemetry_ctx);
  L->log.len = 0;
  L->log.text[0] = '\0';
  L->tel0 = *now;
}

/* After iteration i: the controller every period, the telemetry every telemetry_s. The
 * counters are read (the ring's under its lock) only when one of them is due. */
static void control_due(epoch_loop *L, int64_t i) {
  ng_pipeline *pl = L->pl;
  const int64_t t_ns = ng__now_ns();
  const bool last = i + 1 == L->plan->iters;
  const bool ctl_due = pl->n_threads > 0 && (double)(t_ns - L->ctl0.t_ns) >= pl->o.period_ms * 1e6;
  const bool tel_due = pl->o.telemetry && t_ns > L->tel0.t_ns &&
                       (last || (double)(t_ns - L->tel0.t_ns) >= pl->o.telemetry_s * 1e9);
  if (!ctl_due && !tel_due)
    return;
  ng_counters now;
  snap(pl, &now, L->done, L->pcie, L->cpu_cold);
  if (ctl_due)
    control_period(L, &now);
  if (tel_due)
    report_telemetry(L, &now);
  device_span(pl, NG_SPAN_CONTROL, i, t_ns);
}

/* After a failure, empties the backend's queue for the next epoch without replacing the error
 * the caller sees. */
static void unwind_failure(epoch_loop *L, ng_status st) {
  ng_pipeline *pl = L->pl;
  ng_backend *be = pl->be;
  /* Stop the workers first (they may hold the ring), then hand back what the loop held. */
  if (pl->ring) /* a worker's failure closed it first, and its reason stays */
    ng__ring_close(pl->ring, st);
  /* The losses still unread are read (in order) so that the backend's queue is empty for the
   * next epoch: a queued step whose loss is good is reported as done (its parameters moved),
   * the loss of a forward without a step is dropped. Queued device work may still read the
   * packages held here. None of this may replace the error the caller sees. */
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ng_last_error());
  if (L->prev) {
    (void)finish_prev(pl, L->step, L->tally, L->prev_iter, L->prev, &L->pcie, &L->cpu_cold,
                      &L->done);
    L->prev = NULL;
  }
  if (L->fwd_unread) {
    double loss;
    int64_t correct;
    (void)ng__train_step_result(L->step, -1, &loss, &correct);
  }
  (void)be->iface->sync(be);
  (void)ng__err(st, "%s", msg);
}

ng_status ng__pipeline_epoch(ng_pipeline *pl, const ng_epoch_plan *plan, const ng_epoch_plan *next,
                             ng_train_step *step, ng_epoch_tally *tally, float drop_p,
                             int workers_out[2], double *share_out) {
  const int64_t t_epoch = span_start(pl);
  pl->epoch_ran = true;
  bool went_on = false; /* the workers went on into this epoch from the last one */
  ng_status st = begin_epoch(pl, plan, next, drop_p, &went_on);

  /* The device loop (see epoch_loop): the first packages are copied ahead, then each
   * iteration is queued, and the controller and the telemetry run between iterations. */
  epoch_loop L;
  loop_init(&L, pl, plan, step, tally, went_on);
  if (st == NG_OK)
    st = fill_ahead(&L);
  for (int64_t i = plan->first; st == NG_OK && i < plan->iters; i++) {
    st = device_iteration(&L, i);
    if (st != NG_OK)
      break;
    control_due(&L, i);
  }
  if (st != NG_OK)
    unwind_failure(&L, st);
  /* After a good epoch with a next one expected, the workers go on with it; otherwise they
   * stop here. */
  if (st != NG_OK || pl->n_plans < 2) {
    stop_traced(pl, plan->epoch);
  } else { /* workers go on (so there are some): their period stays open */
    ng_counters now;
    snap(pl, &now, L.done, L.pcie, L.cpu_cold);
    ng__counters_sub(&pl->period_tail, &now, &L.ctl0);
    pl->period_open = true;
  }
  if (pl->n_threads > 0)
    affinity_restore(&pl->aff);
  device_span(pl, NG_SPAN_EPOCH, plan->epoch, t_epoch);
  release(pl, L.prev);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    release(pl, L.ahead[k]);
  if (pl->n_threads > 0)
    memcpy(workers_out, pl->ctrl.workers, sizeof pl->ctrl.workers);
  else
    workers_out[0] = workers_out[1] = 0;
  *share_out = ng__ctrl_share_frac(pl->ctrl.share);
  return st;
}
