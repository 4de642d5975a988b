/* The serving engine's state, shared by its files (serve/): engine.c creates and destroys it,
 * engine_queue.c admits requests and runs the lanes, engine_forward.c computes one batch and
 * engine_update.c commits updates. docs/serving-engine.md describes the design. */
#ifndef NG_SERVE_ENGINE_STATE_IMPL_H
#define NG_SERVE_ENGINE_STATE_IMPL_H

#include "ecache_impl.h"
#include "engine_impl.h"

#include "attn_impl.h"
#include "feature_store_impl.h"
#include "checkpoint_impl.h"
#include "model_impl.h"

#include <pthread.h>
#include <time.h>

#define ENGINE_MAGIC 0x6e677365u /* "ngse" */
/* A request whose unrolled receptive field passes this many edges is a hub request, unless the
 * options say otherwise. */
#define DEFAULT_HUB_EDGES 100000
#define ALIGN 64

/* One admitted request (ng_engine_submit allocates it; it is freed once its callback ran). */
typedef struct pending {
  /* Borrowed from the caller until the callback; for a pair request, `own` instead: the pairs'
   * ends, each once, as a node request of their embeddings (pairs_req is the caller's). */
  const ng_infer_request *req;
  const ng_infer_request *pairs_req; /* a pair request: the caller's (src, dst) pairs, or NULL */
  ng_infer_request own;
  int64_t *ends;        /* own.node_ids (malloc) */
  ng_infer_result *res; /* the caller's */
  ng_infer_done_fn done_fn;
  void *user;
  ng_infer_ticket ticket;
  int32_t fanout[NG_ENGINE_MAX_LAYERS]; /* resolved: -1 = every neighbour */
  int32_t emb_layer;
  bool hub;       /* served by the hub lane */
  bool taken;     /* in a batch: computed whatever its deadline does from now on */
  bool cancelled; /* cancelled while in a batch: computed, its answer discarded */
  ng_status st;
  char err[512];
  double t_enq;
  double deadline_us; /* now_us() time by which it must start */
  int64_t timeout_ms;
  int64_t work; /* the estimated edges of its field, plus its nodes (the cost model's unit) */
  struct pending *next; /* its queue's next, or the next of a list of answered ones */
} pending;

/* The most requests one batch takes. */
#define MAX_BATCH_REQUESTS 1024

typedef struct {
  void *ptr;
  size_t cap;
} growbuf;

/* A queue of admitted requests, oldest first, that one or more lanes take batches from; its
 * fields are under e->mu. */
typedef struct queue {
  pending *head, *tail;
  int64_t queued_nodes;
  int64_t queued_work;  /* the work of the queued requests */
  int64_t running_work; /* the work of the batches its lanes compute now */
  /* Measured cost: an EWMA of a batch's compute time per unit of work on one of its lanes (0
   * until its first batch, or what a test set with ng__engine_test_cost). Admission predicts a
   * request's wait as the work ahead of it on its queue times this, over its lane count. */
  double us_per_work;
  int lanes; /* the lanes that take from it */
} queue;
enum { Q_MAIN, Q_HUB, N_QUEUES };

/* An execution lane: a thread with what a batch needs of its own (a backend instance, an
 * executor, a field builder, staging and device scratch) and the queue it takes batches from.
 * The model's parameters and the hot tier belong to lane 0 (the first main-lane worker); the
 * other lanes' executors and kernels read them, never write or free them. */
typedef struct lane {
  struct ng_engine *e;
  int id;           /* its index in e->lanes: 0 .. n_main - 1 main workers, then the hub lane */
  bool hub;         /* the hub lane */
  queue *q;         /* the queue it takes batches from */
  ng_backend *be;   /* its own instance: one backend runs one thread's queue at a time */
  ng_model_exec ex; /* every lane but lane 0 borrows lane 0's parameters (ex.params) */
  pthread_t thread;
  bool started;
  /* The lane thread's memory. */
  ng_srv_field *field;
  growbuf targets, target_seeds, map_keys, map_seeds, map_vals, host_i32, host_i64, host_f, stage,
      work, out_host;
  growbuf gat_z; /* GAT, SAGE-pool: the rows the CPU projected or pooled, then its states */
  growbuf pack[2], dev_pack[2]; /* the blocks, then the host's cold part (two copies a batch) */
  size_t map_cap;
  ng_ecache_work *ecache_work; /* the cache's scratch for this lane's batches */
  /* The batch computing now (under e->mu), where ng_engine_cancel finds its requests. */
  pending *batch[MAX_BATCH_REQUESTS];
  int n_batch;
} lane;

struct ng_engine {
  uint32_t magic;
  struct ng_dataset *ds;
  struct ng_model model; /* a copy: the caller's may change */
  ng_engine_opts o;
  char name[64];
  ng_store store;
  bool store_open;
  ng_mode mode; /* resolved */
  int64_t hot;
  int workers;         /* CPU worker threads (ng_engine_opts.workers) */
  const float *base_x; /* the table the model reads: the mapping or features_owned */
  float *features_owned;
  int64_t hub_edges;
  ng_aggr bare; /* the input layer's aggregator for partial states */
  bool gcn[NG_MAX_LAYERS];
  /* GAT: the input layer's attention. GAT and SAGE-pool: the parameters on the host (fixed
   * while serving), with which the CPU workers project or pool cold rows (forward_gat,
   * forward_pool). */
  bool gat;
  ng_attn at0;
  float *host_params;

  pthread_mutex_t snap_mu; /* guards `snap` (the pointer, not the snapshot: it is immutable) */
  ng_srv_snap *snap;
  /* Group commit (ng_engine_apply): upd_mu guards the queue of updates waiting for a group,
   * `leading` and each waiter's answer; the leader works on `log` and publishes `snap` without
   * it, and is the only thread that does. */
  pthread_mutex_t upd_mu;
  pthread_cond_t upd_cv;
  struct upd_waiter *upd_head, *upd_tail;
  int upd_queued;
  bool leading;        /* a leader is committing a group */
  int group_hold;      /* a test holds the next group open until this many are queued */
  int64_t log_records; /* records in the log (log.seq, read under upd_mu) */
  ng_srv_log log;
  bool has_log;
  ng_srv_log_report log_rep; /* what the start-up replay found */

  pthread_mutex_t mu; /* the lanes' queues and costs, the counters, every pending's done/status */
  pthread_cond_t work_cv; /* every lane waits on it for requests */
  pthread_cond_t done_cv; /* the test hooks' waits */
  bool cost_fixed;        /* a test fixed us_per_work: batches do not update it */
  bool paused;            /* a test holds every lane (ng__engine_test_pause) */
  int64_t admitted;       /* admitted, not yet answered */
  uint64_t next_ticket;   /* the ticket of the next admitted request (from 1) */
  bool stopping;
  /* The clock thread answers queued requests at their deadline (engine_queue.c, clock_main): it
   * sleeps on clock_cv until clock_until, the earliest deadline it knows of; admission wakes it
   * when a request's deadline is earlier. */
  pthread_t clock;
  bool clock_started, clock_stop;
  pthread_cond_t clock_cv;
  double clock_until;
  ng_engine_stats stats;
  /* Test hook (ng__engine_test_hold_hub): a hub batch waits on done_cv while hold_hub. */
  bool hold_hub;
  int hub_held; /* hub batches waiting in the hook now */

  /* The queues and lanes (docs/serving-engine.md, "Lanes"): n_main main-lane workers take
   * ordinary batches from queues[Q_MAIN], lane 0 owning the engine's parameters and hot tier;
   * the hub lane, lanes[n_main], takes hub requests one at a time from queues[Q_HUB]. */
  queue queues[N_QUEUES];
  lane *lanes; /* [n_lanes] */
  int n_lanes, n_main;
  ng_ecache *ecache; /* layer-0 outputs of full-neighbourhood batches (NULL: off) */
  /* A link checkpoint's decoder (link.present), which scores pair requests (dec.mlp points to
   * dec_mlp, the MLP's weights). */
  ng_ckpt_link link;
  ng_link_dec dec;
  float *dec_mlp;
};

typedef struct {
  int64_t hot_rows, cold_rows;
} batch_rows;

static inline double now_us(void) {
  return ng__now() * 1e6;
}

/* Waits on `cv` (monotonic clock) until signalled or until now_us() reaches `until_us`. */
static inline void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double until_us) {
  const double us = NG_MAX(until_us, 0.0);
  struct timespec ts;
  ts.tv_sec = (time_t)(us / 1e6);
  ts.tv_nsec = (long)((us - (double)ts.tv_sec * 1e6) * 1e3);
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  if (ts.tv_nsec < 0)
    ts.tv_nsec = 0;
  pthread_cond_timedwait(cv, mu, &ts);
}

/// A new reference to the engine's current snapshot (ng__srv_snap_unref when done).
ng_srv_snap *ng__engine_snap_acquire(ng_engine *e);
/// Computes a batch of compatible requests (same sampling) on lane `ln` and fills their results;
/// *rows_out gets the rows it read by tier. t0: when the batch started (now_us()).
ng_status ng__engine_run_batch(lane *ln, pending **reqs, int n_req, double t0,
                               batch_rows *rows_out);
/// NG_OK when `e` is a live engine, else NG_ERR_INVALID_ARG saying why.
ng_status ng__engine_check(const ng_engine *e);
/// A lane's thread (engine_queue.c).
void *ng__engine_lane_main(void *arg);
/// The clock thread (engine_queue.c): answers queued requests busy at their deadline.
void *ng__engine_clock_main(void *arg);

#endif
