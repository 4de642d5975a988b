/* The serving engine (include/neargnn_serve.h): checkpoint loading, admission, dynamic batching
 * on two lanes (ordinary batches, and hub requests on a lane of their own), the tiered input layer
 * (hot rows in device memory, cold rows by the mode's strategy, hub requests aggregated near the
 * data by CPU threads) and online updates over snapshots.
 * docs/serving-engine.md describes the design. */
#include "ecache_impl.h"
#include "engine_impl.h"

#include "dataset_impl.h"
#include "feature_store_impl.h"
#include "attn_impl.h"
#include "model_impl.h"
#include "ng_cpu.h"
#include "pipeline_impl.h"
#include "checkpoint_impl.h"
#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENGINE_MAGIC 0x6e677365u /* "ngse" */
/* A request whose unrolled receptive field passes this many edges is a hub request, unless the
 * options say otherwise. */
#define DEFAULT_HUB_EDGES 100000
#define ALIGN 64

/* One admitted request, on its caller's stack until answered. */
typedef struct pending {
  const ng_infer_request *req;
  ng_infer_result *res;
  int32_t fanout[NG_ENGINE_MAX_LAYERS]; /* resolved: -1 = every neighbour */
  int32_t emb_layer;
  bool hub;   /* served by the hub lane */
  bool taken; /* in a batch: computed whatever its deadline does from now on */
  bool done;
  ng_status st;
  char err[512];
  double t_enq;
  double deadline_us; /* now_us() time by which it must start */
  int64_t timeout_ms;
  int64_t work; /* the estimated edges of its field, plus its nodes (the cost model's unit) */
  struct pending *next;
} pending;

typedef struct {
  void *ptr;
  size_t cap;
} growbuf;

/* An execution lane: a thread with what a batch needs of its own (a backend instance, an
 * executor, a field builder, staging and device scratch) and its queue. The model's parameters
 * and the hot tier belong to the main lane; the hub lane's executor and kernels read them,
 * never write or free them. */
enum { LANE_MAIN, LANE_HUB, N_LANES };

typedef struct lane {
  struct ng_engine *e;
  int id;           /* LANE_MAIN or LANE_HUB */
  ng_backend *be;   /* its own instance: one backend runs one thread's queue at a time */
  ng_model_exec ex; /* the hub lane's borrows the main lane's parameters (ex.params) */
  /* Its queue (under e->mu): the admitted requests it has not taken, oldest first. */
  pending *head, *tail;
  int64_t queued_nodes;
  int64_t queued_work;  /* the work of the queued requests */
  int64_t running_work; /* the work of the batch computing now */
  /* Measured cost: an EWMA of a batch's compute time per unit of work on this lane (0 until its
   * first batch, or what a test set with ng__engine_test_cost). Admission predicts a request's
   * wait as the work ahead of it on its lane times this. */
  double us_per_work;
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
  int workers;
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
  pthread_cond_t work_cv, done_cv; /* work_cv: both lanes wait on it for requests */
  bool cost_fixed;                 /* a test fixed us_per_work: batches do not update it */
  bool paused;                     /* a test holds both lanes (ng__engine_test_pause) */
  int64_t admitted;                /* admitted, not yet answered */
  int64_t callers;                 /* threads inside ng_engine_infer */
  bool stopping;
  ng_engine_stats stats;
  /* Test hook (ng__engine_test_hold_hub): a hub batch waits on done_cv while hold_hub. */
  bool hold_hub;
  int hub_held; /* hub batches waiting in the hook now */

  /* The two lanes (docs/serving-engine.md, "Lanes"): LANE_MAIN runs ordinary batches and owns the
   * engine's backend, executor and hot tier; LANE_HUB runs hub requests one at a time. */
  lane lanes[N_LANES];
  ng_ecache *ecache; /* layer-0 outputs of full-neighbourhood batches (NULL: off) */
};

static double now_us(void) {
  return ng__now() * 1e6;
}

/* Waits on `cv` (monotonic clock) until signalled or until now_us() reaches `until_us`. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double until_us) {
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

/* ---- creation ---- */

static ng_status make_backend(ng_backend **out, const char *device, int threads) {
  const char *dev = device ? device : "cpu";
  if (strcmp(dev, "cpu") == 0)
    return ng__backend_cpu_create(out, threads);
  if (strcmp(dev, "cuda") == 0) {
#ifdef NG_HAVE_CUDA
    return ng__backend_cuda_create(out, 0);
#else
    return ng__err(NG_ERR_UNSUPPORTED,
                   "device 'cuda': this build of neargnn has no CUDA backend; build it where the "
                   "CUDA toolkit is installed (cmake --preset default)");
#endif
  }
  return ng__err(NG_ERR_INVALID_ARG, "unknown device '%s' (cpu or cuda)", dev);
}

/* Loads the parameters of checkpoint `c` (read and verified against the engine's model by
 * ng_engine_create) into the executor. The optimizer state and counters are not needed to
 * serve. */
static ng_status load_params(ng_engine *e, const ng_ckpt *c, const char *path) {
  const struct ng_model *m = &e->model;
  float *host = ng__malloc((size_t)m->n_params * sizeof(float), "the checkpoint's parameters");
  if (!host)
    return NG_ERR_NOMEM;
  ng_status st = ng__ckpt_tensors(host, c, path, m, false);
  if (st == NG_OK)
    st = e->lanes[LANE_MAIN].be->iface->copy_h2d(e->lanes[LANE_MAIN].be,
                                                 e->lanes[LANE_MAIN].ex.params, host,
                                                 (size_t)m->n_params * sizeof(float));
  if (st == NG_OK && ng__model_raw_input(m)) { /* kept: the CPU's part of layer 0 reads them */
    e->host_params = host;
    host = NULL;
  }
  free(host);
  return st;
}

/* Reads and verifies the checkpoint at the start of ng_engine_create: without a `model` the
 * engine builds the one the checkpoint describes into *own, and NG_NORMALIZE_AUTO becomes the
 * checkpoint's normalisation; what is given is checked against the checkpoint as resuming
 * training checks it (ng__ckpt_verify), so that a differing option is refused, not served. */
static ng_status open_checkpoint(ng_ckpt *c, struct ng_model *own, const struct ng_model **model,
                                 ng_normalize *normalize, const struct ng_dataset *ds,
                                 const char *path) {
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "engine: no checkpoint given");
  NG_CHECK(ng__ckpt_read(c, path));
  ng_status st = NG_OK;
  if (!*model) {
    ng_model_t built = NULL;
    st = ng__ckpt_model(&built, c, path);
    if (st == NG_OK) {
      *own = *built;
      *model = own;
      ng_model_destroy(built);
    }
  }
  if (st == NG_OK && *normalize == NG_NORMALIZE_AUTO) {
    if (c->desc.described)
      *normalize = c->desc.normalize;
    else
      st = ng__err(NG_ERR_INVALID_ARG,
                   "%s: the checkpoint does not record its feature normalisation; set "
                   "ng_engine_opts.normalize (--normalize-features) to the one it was trained "
                   "with",
                   path);
  }
  if (st == NG_OK)
    st = ng__ckpt_verify(c, path, *model, *normalize, &ds->info, true);
  if (st != NG_OK)
    ng__ckpt_close(c);
  return st;
}

static void *lane_main(void *arg);

static ng_status check_opts(ng_engine_opts *o, const struct ng_dataset *ds,
                            const struct ng_model *m) {
  const ng_dataset_info *info = &ds->info;
  if (m->n_layers == 0)
    return ng__err(NG_ERR_INVALID_ARG, "engine: the model has no layers");
  if (m->n_layers > NG_ENGINE_MAX_LAYERS)
    return ng__err(NG_ERR_INVALID_ARG, "engine: at most %d layers", NG_ENGINE_MAX_LAYERS);
  for (int l = 0; l < m->n_layers; l++) /* its partial states are the built-ins' */
    if (m->layers[l].ag.user)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "engine: layer %d uses the user aggregator \"%s\"; serving runs the "
                     "built-in aggregators only (evaluate or predict it with the trainer)",
                     l, m->layers[l].ag.user->name);
  if (info->feature_dim == 0 || m->in_dim != info->feature_dim)
    return ng__err(NG_ERR_INVALID_ARG,
                   "engine: the model expects %lld input columns, dataset '%s' has %lld",
                   (long long)m->in_dim, info->name, (long long)info->feature_dim);
  if (info->nodes > INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED, "engine: dataset '%s' has more than 2^31 - 1 nodes",
                   info->name);
  if (o->max_batch <= 0)
    o->max_batch = 256;
  if (o->max_delay_us < 0)
    o->max_delay_us = 0;
  if (o->queue_cap <= 0)
    o->queue_cap = o->max_batch;
  if (o->request_timeout_ms <= 0)
    o->request_timeout_ms = 1000;
  if (o->request_timeout_ms > NG_ENGINE_MAX_TIMEOUT_MS)
    return ng__err(NG_ERR_INVALID_ARG, "engine: request_timeout_ms %lld is over the most, %d ms",
                   (long long)o->request_timeout_ms, NG_ENGINE_MAX_TIMEOUT_MS);
  if (o->max_request_nodes <= 0)
    o->max_request_nodes = 4096;
  if (o->workers < 0 || o->threads < 0 || (unsigned)o->mode > NG_MODE_HYBRID ||
      (unsigned)o->normalize > NG_NORMALIZE_ROW || o->cache_bytes < 0 || o->hub_edges < 0 ||
      o->max_batch_work < 0 || o->embedding_cache_bytes < 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "engine options out of range (workers, threads, cache_bytes, hub_edges, "
                   "max_batch_work, embedding_cache_bytes >= 0; a known mode and normalisation)");
  return NG_OK;
}

ng_status ng_engine_create(ng_engine **out, ng_dataset_t ds, ng_model_t model,
                           const char *checkpoint, const ng_engine_opts *opts) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_engine_create: out is NULL");
  *out = NULL;
  NG_CHECK(ng__dataset_check(ds));
  if (model) /* NULL: the model the checkpoint describes */
    NG_CHECK(ng__model_check(model));
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof opts->size)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_engine_opts.size is %zu; initialise the options with NG_ENGINE_OPTS_INIT",
                     opts->size);
    memcpy(&o, opts, NG_MIN(opts->size, sizeof o));
    o.size = sizeof o;
  }
  ng_ckpt ck;
  struct ng_model own;
  const struct ng_model *mdl = model;
  NG_CHECK(open_checkpoint(&ck, &own, &mdl, &o.normalize, ds, checkpoint));
  ng_status st = check_opts(&o, ds, mdl);
  ng_engine *e = st == NG_OK ? ng__calloc(1, sizeof *e, "the serving engine") : NULL;
  if (!e) {
    ng__ckpt_close(&ck);
    return st == NG_OK ? NG_ERR_NOMEM : st;
  }
  e->magic = ENGINE_MAGIC;
  e->ds = ds;
  e->model = *mdl;
  e->o = o;
  ng__strlcpy(e->name, o.name ? o.name : ds->info.name, sizeof e->name);
  e->o.name = NULL; /* borrowed: not kept */
  e->o.device = NULL;
  e->o.log_path = NULL;
  pthread_mutex_init(&e->snap_mu, NULL);
  pthread_mutex_init(&e->upd_mu, NULL);
  pthread_mutex_init(&e->mu, NULL);
  /* Waits end at now_us() times (monotonic): deadlines and the batching delay. */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->work_cv, &ca);
  pthread_cond_init(&e->upd_cv, NULL);
  pthread_cond_init(&e->done_cv, &ca);
  pthread_condattr_destroy(&ca);
  e->log.fd = -1;
  const ng_dataset_info *info = &ds->info;
  const struct ng_model *m = &e->model;
  const int64_t dim = info->feature_dim;
  e->hub_edges = o.hub_edges > 0 ? o.hub_edges : DEFAULT_HUB_EDGES;
  /* Work per batch: by default four hub requests' worth, so that an ordinary batch costs a
   * bounded time however many small requests it merges. */
  if (e->o.max_batch_work == 0)
    e->o.max_batch_work = 4 * e->hub_edges;
  if (o.workers > 0) {
    e->workers = o.workers;
  } else {
    cpu_set_t set;
    const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    e->workers = NG_MAX(1, cores - 1);
  }
  e->gat = m->kind == NG_MODEL_GAT;
  if (e->gat)
    e->at0 = ng__model_layer_attn(m, 0);
  for (int l = 0; l < m->n_layers; l++)
    e->gcn[l] = m->layers[l].ag.weighted || m->layers[l].ag.self_loop;
  e->bare = m->layers[0].ag;
  e->bare.self_loop = false;
  e->bare.drop_p = 0.0f;
  e->bare.drop_key = 0;

  /* The table the model reads: the mapping, or its row-normalised copy (the trainer's). */
  e->base_x = ds->features;
  if (o.normalize == NG_NORMALIZE_ROW) {
    size_t bytes = (size_t)info->nodes * (size_t)dim * sizeof(float);
    e->features_owned = ng__big_alloc(bytes, "row-normalised features");
    if (!e->features_owned) {
      st = NG_ERR_NOMEM;
      goto fail;
    }
    const int nt = o.threads > 0 ? o.threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t r = 0; r < info->nodes; r++) {
      const float *src = ds->features + r * dim;
      double sum = 0.0;
      for (int64_t c = 0; c < dim; c++)
        sum += src[c];
      float inv = sum != 0.0 ? (float)(1.0 / sum) : 0.0f;
      for (int64_t c = 0; c < dim; c++)
        e->features_owned[r * dim + c] = src[c] * inv;
    }
    e->base_x = e->features_owned;
  }

  for (int k = 0; k < N_LANES; k++) {
    e->lanes[k].e = e;
    e->lanes[k].id = k;
  }
  lane *main_ln = &e->lanes[LANE_MAIN];
  NG_CHECK_GOTO(st, make_backend(&main_ln->be, opts ? opts->device : NULL, o.threads), fail);
  NG_CHECK_GOTO(st, ng__exec_create(&main_ln->ex, &e->model, main_ln->be, 0), fail);
  NG_CHECK_GOTO(st, load_params(e, &ck, checkpoint), fail);
  ng__ckpt_close(&ck);
  e->mode = ng__mode_resolve(o.mode, main_ln->be);
  NG_CHECK_GOTO(
      st, ng__store_hot_rows(&e->hot, main_ln->be, info->nodes, dim, o.cache_bytes, o.cache_ratio),
      fail);
  NG_CHECK_GOTO(st,
                ng__store_open(&e->store, main_ln->be, e->base_x, info->nodes, dim, e->hot,
                               e->mode == NG_MODE_ZEROCOPY || e->mode == NG_MODE_HYBRID
                                   ? NG_FETCH_ZCOPY
                                   : NG_FETCH_BATCH,
                               e->features_owned == NULL),
                fail);
  e->store_open = true;

  NG_CHECK_GOTO(st, ng__srv_snap_base(&e->snap, &ds->csr, e->base_x, dim, o.normalize), fail);
  if (opts && opts->log_path) {
    ng_srv_fingerprint fp;
    ng__srv_fingerprint(&fp, ds);
    NG_CHECK_GOTO(st, ng__srv_log_open(&e->log, opts->log_path, &e->snap, &fp, &e->log_rep), fail);
    e->has_log = true;
    e->stats.updates = 0; /* counts updates of this run */
    e->log_records = (int64_t)e->log.seq;
  }
  /* The hub lane: a backend instance of its own (its own queues; on CUDA its own streams and
   * cuBLAS handle in the same context), whose executor reads the main lane's parameters. Both
   * the parameters and the hot tier were uploaded with synchronous copies above, so its kernels
   * see them whole. */
  lane *hub_ln = &e->lanes[LANE_HUB];
  NG_CHECK_GOTO(st, make_backend(&hub_ln->be, opts ? opts->device : NULL, o.threads), fail);
  hub_ln->ex.model = &e->model;
  hub_ln->ex.be = hub_ln->be;
  hub_ln->ex.params = main_ln->ex.params;
  NG_CHECK_GOTO(st, ng__ecache_create(&e->ecache, m, e->snap, o.embedding_cache_bytes), fail);
  for (int k = 0; k < N_LANES; k++) {
    lane *ln = &e->lanes[k];
    NG_CHECK_GOTO(st, ng__srv_field_create(&ln->field), fail);
    if (e->ecache)
      NG_CHECK_GOTO(st, ng__ecache_work_create(&ln->ecache_work), fail);
    if (pthread_create(&ln->thread, NULL, lane_main, ln) != 0) {
      st = ng__err(NG_ERR_INTERNAL, "engine: cannot start the %s lane's thread",
                   k == LANE_MAIN ? "main" : "hub");
      goto fail;
    }
    ln->started = true;
  }
  *out = e;
  return NG_OK;
fail:
  ng__ckpt_close(&ck);
  ng_engine_destroy(e);
  return st;
}

void ng_engine_destroy(ng_engine *e) {
  if (!e || e->magic != ENGINE_MAGIC)
    return;
  pthread_mutex_lock(&e->mu);
  e->stopping = true;
  pthread_cond_broadcast(&e->work_cv);
  pthread_mutex_unlock(&e->mu);
  for (int k = 0; k < N_LANES; k++)
    if (e->lanes[k].started)
      pthread_join(e->lanes[k].thread, NULL);
  /* Callers woken by the last batch leave ng_engine_infer before the lock goes. */
  pthread_mutex_lock(&e->mu);
  while (e->callers > 0)
    pthread_cond_wait(&e->done_cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  e->magic = 0;
  /* The hub lane first: its executor borrows the main lane's parameters, so only its arena is
   * its own. */
  for (int k = N_LANES - 1; k >= 0; k--) {
    lane *ln = &e->lanes[k];
    ng_backend *be = ln->be;
    if (!be)
      continue;
    if (k == LANE_MAIN && e->store_open)
      ng__store_close(&e->store);
    be->iface->free(be, ln->dev_pack[0].ptr);
    be->iface->free(be, ln->dev_pack[1].ptr);
    be->iface->free(be, ln->work.ptr);
    ng__ecache_work_destroy(ln->ecache_work, be);
    if (k == LANE_MAIN)
      ng__exec_destroy(&ln->ex);
    else
      be->iface->free(be, ln->ex.arena);
    ng__backend_destroy(be);
  }
  if (e->has_log)
    ng__srv_log_close(&e->log);
  ng__srv_snap_unref(e->snap);
  ng__ecache_destroy(e->ecache);
  for (int k = 0; k < N_LANES; k++) {
    lane *ln = &e->lanes[k];
    ng__srv_field_destroy(ln->field);
    growbuf *host[] = {&ln->targets,  &ln->target_seeds, &ln->map_keys, &ln->map_seeds,
                       &ln->map_vals, &ln->host_i32,     &ln->host_i64, &ln->host_f,
                       &ln->stage,    &ln->pack[0],      &ln->pack[1],  &ln->out_host,
                       &ln->gat_z};
    for (size_t i = 0; i < NG_ARRAY_LEN(host); i++)
      free(host[i]->ptr);
  }
  if (e->features_owned)
    ng__big_free(e->features_owned,
                 (size_t)e->ds->info.nodes * (size_t)e->ds->info.feature_dim * sizeof(float));
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->done_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->upd_cv);
  pthread_mutex_destroy(&e->upd_mu);
  pthread_mutex_destroy(&e->snap_mu);
  free(e->host_params);
  free(e);
}

static ng_srv_snap *snap_acquire(ng_engine *e) {
  pthread_mutex_lock(&e->snap_mu);
  ng_srv_snap *s = e->snap;
  ng__srv_snap_ref(s);
  pthread_mutex_unlock(&e->snap_mu);
  return s;
}

void ng_engine_info_get(ng_engine_info *out, const ng_engine *e) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!e || e->magic != ENGINE_MAGIC)
    return;
  ng_engine *me = (ng_engine *)e;
  ng__strlcpy(out->name, e->name, sizeof out->name);
  pthread_mutex_lock(&me->snap_mu);
  out->nodes = e->snap->nodes;
  pthread_mutex_unlock(&me->snap_mu);
  out->feature_dim = e->ds->info.feature_dim;
  out->classes = (int32_t)e->model.layers[e->model.n_layers - 1].out_dim;
  out->layers = e->model.n_layers;
  for (int l = 0; l < e->model.n_layers; l++)
    out->layer_dim[l] = e->model.layers[l].out_dim;
  out->ready = 1;
}

void ng_engine_stats_get(ng_engine_stats *out, const ng_engine *e) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!e || e->magic != ENGINE_MAGIC)
    return;
  ng_engine *me = (ng_engine *)e;
  pthread_mutex_lock(&me->mu);
  *out = e->stats;
  out->queue_depth = e->admitted;
  pthread_mutex_unlock(&me->mu);
  ng_ecache_stats cs;
  ng__ecache_stats_get(&cs, me->ecache);
  out->cache_hits = cs.hits;
  out->cache_misses = cs.misses;
  out->cache_evictions = cs.evictions;
  out->cache_invalidations = cs.invalidations;
  out->cache_entries = cs.entries;
}

void ng_infer_result_free(ng_infer_result *r) {
  if (!r)
    return;
  free(r->logits);
  free(r->embedding);
  free(r->cls);
  r->logits = r->embedding = NULL;
  r->cls = NULL;
}

/* ---- one device batch ---- */

/* Packs host arrays into one buffer copied to the device in one transfer (a host-memory backend
 * reads them where they are). */
typedef struct {
  const void *src;
  size_t bytes;
  const void **dst;
} pack_item;

/* Adds blocks 1.. of `mb` (their indptr, indices, edge and self weights) to the items at n, to
 * land in dmb's blocks `shift` further on (the raw-input layouts put an identity block first).
 * Returns the new count. */
static int pack_upper_blocks(pack_item *items, int n, const ng_minibatch *mb, ng_minibatch *dmb,
                             int shift) {
  for (int l = 1; l < mb->n_layers; l++) {
    const ng_block *b = &mb->blocks[l];
    ng_block *db = &dmb->blocks[l + shift];
    items[n++] = (pack_item){b->indptr, ((size_t)b->n_dst + 1) * 4, (const void **)&db->indptr};
    items[n++] = (pack_item){b->indices, (size_t)b->nnz * 4, (const void **)&db->indices};
    items[n++] =
        (pack_item){b->edge_w, b->edge_w ? (size_t)b->nnz * 4 : 0, (const void **)&db->edge_w};
    items[n++] =
        (pack_item){b->self_w, b->self_w ? (size_t)b->n_dst * 4 : 0, (const void **)&db->self_w};
  }
  return n;
}

static ng_status upload(lane *ln, pack_item *items, int n, int slot) {
  if (ln->be->iface->host_memory) {
    for (int i = 0; i < n; i++)
      *items[i].dst = items[i].src;
    return NG_OK;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += (items[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  total = NG_MAX(total, (size_t)ALIGN);
  growbuf *host = &ln->pack[slot], *dev = &ln->dev_pack[slot];
  NG_CHECK(ng__host_reserve(&host->ptr, &host->cap, total, "the batch's staging buffer"));
  NG_CHECK(ng__bk_reserve(ln->be, &dev->ptr, &dev->cap, total));
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    if (items[i].bytes)
      memcpy((char *)host->ptr + at, items[i].src, items[i].bytes);
    *items[i].dst = items[i].src ? (char *)dev->ptr + at : NULL;
    at += (items[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
  }
  return ln->be->iface->copy_h2d(ln->be, dev->ptr, host->ptr, NG_MAX(at, (size_t)ALIGN));
}

/* Carves `bytes` from a bump pointer (NULL base: sizing). */
static void *carve(char *base, size_t *at, size_t bytes) {
  void *p = base ? base + *at : NULL;
  *at += (bytes + ALIGN - 1) / ALIGN * ALIGN;
  return p;
}

/* FETCH_AUTO (HYBRID's ordinary batches): PARTIAL when the batch has enough cold edges and
 * aggregating them near the data at least halves what crosses PCIe, else ZCOPY (see forward). */
typedef enum { FETCH_TRANSFER, FETCH_ZCOPY, FETCH_PARTIAL, FETCH_AUTO } fetch_kind;

/* FETCH_AUTO's rule: partial aggregation when the cold edges are at least this many and at
 * least twice the destinations (a state per destination then replaces two rows or more). Below
 * it, handing the batch to the CPU threads costs more than the device's zero-copy reads. The
 * serving benchmark on W4 (eval/results/2026-11-25-h100-serve.md) chose it. */
#define AUTO_PARTIAL_MIN_EDGES 256

/* The cold edges' partial state of destinations [0, nd) on the host: each destination reduced
 * over its cold edges in edge order, in the operation order of cpu/kernels_impl.h (so the device
 * reducing staged rows gives the same bits), by `threads` threads over destinations. */
static void host_partial(const ng_aggr *ag, const int32_t *indptr, const int32_t *src_local,
                         const float *ew, const float *const *rows_of_local, int32_t nd,
                         int64_t dim, float *val, int32_t *count, int threads) {
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) if (threads > 1)
  for (int32_t d = 0; d < nd; d++) {
    float *acc = val + (int64_t)d * dim;
    const int32_t b = indptr[d], n = indptr[d + 1] - b;
    count[d] = n;
    for (int64_t c = 0; c < dim; c++)
      acc[c] = 0.0f;
    for (int32_t i = 0; i < n; i++) {
      const float *x = rows_of_local[src_local[b + i]];
      const float w = ew ? ew[b + i] : 1.0f;
      if (ag->reduce == NG_REDUCE_SUM) {
        if (ew)
          for (int64_t c = 0; c < dim; c++)
            acc[c] = acc[c] + w * x[c];
        else
          for (int64_t c = 0; c < dim; c++)
            acc[c] = acc[c] + x[c];
      } else {
        const bool is_max = ag->reduce == NG_REDUCE_MAX;
        for (int64_t c = 0; c < dim; c++) {
          const float v = ew ? w * x[c] : x[c];
          if (i == 0 || (is_max ? v > acc[c] : v < acc[c]))
            acc[c] = v;
        }
      }
    }
  }
}

typedef struct {
  int64_t hot_rows, cold_rows;
} batch_rows;

/* The forward pass of one receptive field `mb` on snapshot `s` with cold rows fetched by `how`:
 * afterwards ex->ws[l].out holds layer l's output, its first n_targets rows the targets'. */
static ng_status forward(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb, fetch_kind how,
                         batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const ng_block *b0 = &mb->blocks[0];
  const int32_t nd = b0->n_dst, ns = b0->n_src;
  const int64_t dim = s->dim, nnz = b0->nnz;
  const int64_t *gid = mb->node_ids;
  const bool weighted = b0->edge_w != NULL;

  /* Host arrays: per source its cold position (-1: hot) and row; the two sub-blocks; the self
   * rows by tier; the rows the device gathers by zero-copy and those staged by the host. */
  const size_t need_i32 =
      2 * (size_t)ns + 2 * ((size_t)nd + 1) + 2 * (size_t)nnz + 2 * (size_t)nd + (size_t)ns;
  const size_t need_i64 = 2 * (size_t)nd + 3 * (size_t)ns;
  const size_t need_f = 2 * (size_t)nnz;
  NG_CHECK(ng__host_reserve(&ln->host_i32.ptr, &ln->host_i32.cap, (need_i32 + 1) * sizeof(int32_t),
                            "the batch's index arrays"));
  NG_CHECK(ng__host_reserve(&ln->host_i64.ptr, &ln->host_i64.cap, (need_i64 + 1) * sizeof(int64_t),
                            "the batch's id arrays"));
  NG_CHECK(ng__host_reserve(&ln->host_f.ptr, &ln->host_f.cap, (need_f + 1) * sizeof(float),
                            "the batch's edge weights"));
  int32_t *cold_pos = ln->host_i32.ptr;
  int32_t *h_indptr = cold_pos + ns, *c_indptr = h_indptr + nd + 1;
  int32_t *h_idx = c_indptr + nd + 1, *c_idx = h_idx + nnz;
  int32_t *self_hot_pos = c_idx + nnz, *self_cold_pos = self_hot_pos + nd;
  int32_t *zc_pos = self_cold_pos + nd, *st_pos = zc_pos + ns;
  int64_t *self_hot_ids = ln->host_i64.ptr, *self_cold_ids = self_hot_ids + nd;
  int64_t *zc_ids = self_cold_ids + nd, *iota = zc_ids + ns;
  const float **row_ptr = (const float **)(iota + ns); /* [ns] host row of each cold source */
  _Static_assert(sizeof(const float *) == sizeof(int64_t), "row pointers fill int64 slots");
  float *h_ew = ln->host_f.ptr, *c_ew = h_ew + nnz;

  int32_t n_cold = 0;
  for (int32_t i = 0; i < ns; i++) {
    bool overlay = false;
    const float *row = ng__srv_feature(s, gid[i], &overlay);
    if (gid[i] < e->hot && !overlay) {
      cold_pos[i] = -1;
    } else {
      row_ptr[n_cold] = row;
      cold_pos[i] = n_cold++;
    }
  }
  rows->hot_rows = ns - n_cold;
  rows->cold_rows = n_cold;
  int64_t nh = 0, nc = 0;
  h_indptr[0] = c_indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++) {
    for (int32_t ed = b0->indptr[d]; ed < b0->indptr[d + 1]; ed++) {
      const int32_t src = b0->indices[ed];
      if (cold_pos[src] < 0) {
        h_idx[nh] = (int32_t)gid[src];
        if (weighted)
          h_ew[nh] = b0->edge_w[ed];
        nh++;
      } else {
        c_idx[nc] = cold_pos[src];
        if (weighted)
          c_ew[nc] = b0->edge_w[ed];
        nc++;
      }
    }
    h_indptr[d + 1] = (int32_t)nh;
    c_indptr[d + 1] = (int32_t)nc;
  }
  int32_t n_self_hot = 0, n_self_cold = 0;
  for (int32_t d = 0; d < nd; d++) {
    if (cold_pos[d] < 0) {
      self_hot_pos[n_self_hot] = d;
      self_hot_ids[n_self_hot++] = gid[d];
    } else {
      self_cold_pos[n_self_cold] = d;
      /* TRANSFER, ZCOPY: the row among the cold rows; PARTIAL stages the cold self rows alone,
       * in this order. */
      self_cold_ids[n_self_cold] = how == FETCH_PARTIAL ? n_self_cold : cold_pos[d];
      n_self_cold++;
    }
  }

  const size_t row_b = (size_t)dim * sizeof(float);
  const float *zc_table = e->store.host_dev ? e->store.host_dev : B->host_memory ? e->base_x : NULL;
  if (how == FETCH_AUTO)
    how = nc >= AUTO_PARTIAL_MIN_EDGES && nc >= 2 * (int64_t)nd ? FETCH_PARTIAL : FETCH_ZCOPY;
  if (how == FETCH_ZCOPY && !zc_table)
    how = FETCH_TRANSFER;

  /* Device memory: hot state, cold state, aggregation, self rows, the cold rows. */
  const size_t st_rows = (size_t)nd * row_b, st_cnt = (size_t)nd * sizeof(int32_t);
  const size_t cold_rows_b = (size_t)(how == FETCH_PARTIAL ? 0 : n_cold) * row_b;
  size_t wbytes = 0;
  carve(NULL, &wbytes, st_rows);
  carve(NULL, &wbytes, st_cnt);
  carve(NULL, &wbytes, st_rows);
  carve(NULL, &wbytes, st_cnt);
  carve(NULL, &wbytes, st_rows);
  carve(NULL, &wbytes, st_rows);
  carve(NULL, &wbytes, cold_rows_b);
  NG_CHECK(ng__bk_reserve(be, &ln->work.ptr, &ln->work.cap, NG_MAX(wbytes, (size_t)ALIGN)));
  size_t at = 0;
  char *w = ln->work.ptr;
  ng_pstate hot = {carve(w, &at, st_rows), carve(w, &at, st_cnt), nd, dim};
  ng_pstate cold = {carve(w, &at, st_rows), carve(w, &at, st_cnt), nd, dim};
  float *agg = carve(w, &at, st_rows), *self = carve(w, &at, st_rows);
  float *cold_dev = carve(w, &at, cold_rows_b);

  /* First copy: the blocks. The device then starts on the hot part while the host works on
   * the cold one (on the CUDA backend the ops are queued and return at once). */
  ng_block hb = {.n_dst = nd, .n_src = (int32_t)NG_MAX(e->hot, (int64_t)nd), .nnz = nh};
  ng_block cb = {.n_dst = nd, .n_src = NG_MAX(n_cold, nd), .nnz = nc};
  ng_minibatch dmb = *mb;
  const float *b0_self_w = NULL, *staged_dev = NULL, *pval_dev = NULL;
  const int32_t *pcnt_dev = NULL, *shp = NULL, *scp = NULL, *zcp = NULL, *stp = NULL;
  const int64_t *shi = NULL, *sci = NULL, *zci = NULL, *iota_dev = NULL;
  pack_item items[16 + 4 * NG_MAX_LAYERS];
  int ni = 0;
#define ITEM(ptr, bytes, dstp) items[ni++] = (pack_item){(ptr), (bytes), (const void **)(dstp)}
  ITEM(h_indptr, ((size_t)nd + 1) * 4, &hb.indptr);
  ITEM(nh ? h_idx : NULL, (size_t)nh * 4, &hb.indices);
  ITEM(weighted ? h_ew : NULL, weighted ? (size_t)nh * 4 : 0, &hb.edge_w);
  ITEM(c_indptr, ((size_t)nd + 1) * 4, &cb.indptr);
  ITEM(nc ? c_idx : NULL, (size_t)nc * 4, &cb.indices);
  ITEM(weighted ? c_ew : NULL, weighted ? (size_t)nc * 4 : 0, &cb.edge_w);
  ITEM(b0->self_w, b0->self_w ? (size_t)nd * 4 : 0, &b0_self_w);
  ITEM(self_hot_pos, (size_t)n_self_hot * 4, &shp);
  ITEM(self_hot_ids, (size_t)n_self_hot * 8, &shi);
  ITEM(self_cold_pos, (size_t)n_self_cold * 4, &scp);
  ITEM(self_cold_ids, (size_t)n_self_cold * 8, &sci);
  ni = pack_upper_blocks(items, ni, mb, &dmb, 0);
  NG_CHECK(upload(ln, items, ni, 0));
  NG_CHECK(B->aggr_partial(be, &e->bare, &hb, e->store.cache, &hot));
  NG_CHECK(B->scatter_rows(be, self, shp, e->store.cache, shi, n_self_hot, dim, 0.0f, 0));

  /* The host's part, by strategy. */
  int32_t n_staged = 0, n_zc = 0;
  float *staged = NULL, *p_val = NULL;
  int32_t *p_cnt = NULL;
  if (how == FETCH_PARTIAL) {
    /* The CPU threads reduce the cold edges near the data; only the states and the cold self
     * rows cross to the device. */
    n_staged = n_self_cold;
    const size_t bytes =
        (size_t)nd * row_b + (size_t)nd * sizeof(int32_t) + (size_t)n_staged * row_b + 3 * ALIGN;
    NG_CHECK(ng__host_reserve(&ln->stage.ptr, &ln->stage.cap, bytes, "the cold rows' staging"));
    size_t sat = 0;
    p_val = carve(ln->stage.ptr, &sat, (size_t)nd * row_b);
    p_cnt = carve(ln->stage.ptr, &sat, (size_t)nd * sizeof(int32_t));
    staged = carve(ln->stage.ptr, &sat, (size_t)n_staged * row_b);
    if (nc > 0)
      host_partial(&e->bare, c_indptr, c_idx, weighted ? c_ew : NULL, row_ptr, nd, dim, p_val,
                   p_cnt, e->workers);
    for (int32_t i = 0; i < n_self_cold; i++)
      memcpy(staged + (int64_t)i * dim, row_ptr[cold_pos[self_cold_pos[i]]], row_b);
  } else {
    /* TRANSFER stages every cold row; ZCOPY only those of the delta (replaced or added rows):
     * the device reads the base table's rows from host memory itself. */
    NG_CHECK(ng__host_reserve(&ln->stage.ptr, &ln->stage.cap, (size_t)n_cold * row_b + ALIGN,
                              "the cold rows' staging"));
    staged = ln->stage.ptr;
    for (int32_t i = 0; i < ns; i++) {
      const int32_t p = cold_pos[i];
      if (p < 0)
        continue;
      if (how == FETCH_ZCOPY && !ng__srv_has_overlay(s, gid[i])) {
        zc_pos[n_zc] = p;
        zc_ids[n_zc++] = gid[i];
      } else {
        memcpy(staged + (int64_t)n_staged * dim, row_ptr[p], row_b);
        st_pos[n_staged] = p;
        iota[n_staged] = n_staged;
        n_staged++;
      }
    }
  }
  /* Second copy: what the host made of the cold rows. */
  ni = 0;
  ITEM(staged, (size_t)n_staged * row_b, &staged_dev);
  ITEM(p_val, p_val ? st_rows : 0, &pval_dev);
  ITEM(p_cnt, p_cnt ? st_cnt : 0, &pcnt_dev);
  ITEM(zc_pos, (size_t)n_zc * 4, &zcp);
  ITEM(zc_ids, (size_t)n_zc * 8, &zci);
  ITEM(st_pos, how == FETCH_PARTIAL ? 0 : (size_t)n_staged * 4, &stp);
  ITEM(iota, how == FETCH_PARTIAL ? 0 : (size_t)n_staged * 8, &iota_dev);
#undef ITEM
  NG_CHECK(upload(ln, items, ni, 1));

  /* The cold part and the rest, in the order of sched/feature_store.c whatever the strategy:
   * hot partial, cold partial, merge, finalize, self loop. */
  const float *cold_src = NULL;
  if (how != FETCH_PARTIAL && n_cold > 0) {
    if (n_zc > 0)
      NG_CHECK(B->scatter_rows(be, cold_dev, zcp, zc_table, zci, n_zc, dim, 0.0f, 0));
    if (n_staged > 0)
      NG_CHECK(B->scatter_rows(be, cold_dev, stp, staged_dev, iota_dev, n_staged, dim, 0.0f, 0));
    cold_src = cold_dev;
  }
  if (nc > 0) {
    if (how == FETCH_PARTIAL) {
      cold.val = (float *)pval_dev;
      cold.count = (int32_t *)pcnt_dev;
    } else {
      NG_CHECK(B->aggr_partial(be, &e->bare, &cb, cold_src, &cold));
    }
    NG_CHECK(B->pstate_merge(be, &e->bare, &hot, &cold));
  }
  NG_CHECK(B->scatter_rows(be, self, scp, how == FETCH_PARTIAL ? staged_dev : cold_src, sci,
                           n_self_cold, dim, 0.0f, 0));
  NG_CHECK(B->pstate_finalize(be, &e->bare, &hot, agg));
  if (e->model.layers[0].ag.self_loop)
    NG_CHECK(B->add_self_loop(be, agg, b0_self_w, self, nd, dim));
  return ng__exec_forward(&ln->ex, &dmb, agg, self, false, 0);
}

/* ---- GAT: the input layer's attention in online-softmax parts ---- */

/* z [n, kf] = rows[r] W for r < n (W [in, kf] row-major on the host), by `threads` threads over
 * rows. A row sums its products in the order of its input columns, skipping zero inputs (they add
 * nothing: an accumulator that starts at +0 never becomes -0, so the bits are the same; bag-of-
 * words features are mostly zeros), so its bits do not depend on the thread count. */
static void host_project(const float *const *rows, int64_t n, int64_t in, const float *W,
                         int64_t kf, float *z, int threads) {
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < n; r++) {
    float *o = z + r * kf;
    const float *h = rows[r];
    for (int64_t c = 0; c < kf; c++)
      o[c] = 0.0f;
    for (int64_t k = 0; k < in; k++) {
      const float x = h[k];
      if (x == 0.0f)
        continue;
      const float *w = W + k * kf;
      for (int64_t c = 0; c < kf; c++)
        o[c] = o[c] + x * w[c];
    }
  }
}

/* The input block's edges split by where their source lies: a source with hot_pos >= 0 goes to
 * the hot CSR as that position, the others to the cold CSR as cold_pos; *nh and *nc edges. */
static void split_edges(const ng_block *b0, int32_t nd, const int32_t *hot_pos,
                        const int32_t *cold_pos, int32_t *h_indptr, int32_t *h_idx,
                        int32_t *c_indptr, int32_t *c_idx, int64_t *nh, int64_t *nc) {
  int64_t h = 0, c = 0;
  h_indptr[0] = c_indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++) {
    for (int32_t ed = b0->indptr[d]; ed < b0->indptr[d + 1]; ed++) {
      const int32_t src = b0->indices[ed];
      if (hot_pos[src] >= 0)
        h_idx[h++] = hot_pos[src];
      else
        c_idx[c++] = cold_pos[src];
    }
    h_indptr[d + 1] = (int32_t)h;
    c_indptr[d + 1] = (int32_t)c;
  }
  *nh = h;
  *nc = c;
}

/* The forward pass of a GAT model (docs/serving-engine.md, "GAT"): the input layer's sources are
 * split by tier. The device gathers the hot rows from its tier and projects them (z = h W); the
 * CPU workers project, with the host copy of the fixed weights, every destination's row and each
 * cold source's row once, and reduce each destination's cold edges into an online-softmax state
 * (attn_state's order, cpu/attn.c). Only the destinations' projections and those states cross to
 * the device, which computes the hot part's state (self slot and hot edges), merges the two
 * (attn_merge), adds the bias and the activation and runs the upper layers as usual. */
static ng_status forward_gat(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                             batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const ng_layer *L0 = &e->model.layers[0];
  const ng_attn *at = &e->at0;
  const ng_block *b0 = &mb->blocks[0];
  const int32_t nd = b0->n_dst, ns = b0->n_src;
  const int64_t dim = s->dim, nnz = b0->nnz, kf = L0->cols, cols = ng_attn_state_cols(at);
  const int64_t *gid = mb->node_ids;

  /* Host arrays: per source its place among the hot rows (-1: cold) and among the CPU's
   * projected rows (-1: hot and not a destination); the two sub-blocks; the hot rows' ids; the
   * host rows the CPU projects (the destinations first, then the cold sources). */
  const size_t need_i32 = 2 * (size_t)ns + 2 * ((size_t)nd + 1) + 2 * (size_t)nnz;
  const size_t need_i64 = 2 * (size_t)ns;
  NG_CHECK(ng__host_reserve(&ln->host_i32.ptr, &ln->host_i32.cap, (need_i32 + 1) * sizeof(int32_t),
                            "the batch's index arrays"));
  NG_CHECK(ng__host_reserve(&ln->host_i64.ptr, &ln->host_i64.cap, (need_i64 + 1) * sizeof(int64_t),
                            "the batch's id arrays"));
  int32_t *hot_pos = ln->host_i32.ptr, *z_pos = hot_pos + ns;
  int32_t *h_indptr = z_pos + ns, *c_indptr = h_indptr + nd + 1;
  int32_t *h_idx = c_indptr + nd + 1, *c_idx = h_idx + nnz;
  int64_t *hot_ids = ln->host_i64.ptr;
  const float **row_ptr = (const float **)(hot_ids + ns);
  _Static_assert(sizeof(const float *) == sizeof(int64_t), "row pointers fill int64 slots");

  int32_t n_hot = 0, n_z = nd, n_cold = 0;
  for (int32_t i = 0; i < ns; i++) {
    bool overlay = false;
    const float *row = ng__srv_feature(s, gid[i], &overlay);
    const bool hot = gid[i] < e->hot && !overlay;
    z_pos[i] = -1;
    if (i < nd) {
      row_ptr[i] = row;
      z_pos[i] = i;
    }
    if (hot) {
      hot_pos[i] = n_hot;
      hot_ids[n_hot++] = gid[i];
    } else {
      hot_pos[i] = -1;
      n_cold++;
      if (i >= nd) {
        row_ptr[n_z] = row;
        z_pos[i] = n_z++;
      }
    }
  }
  rows->hot_rows = n_hot;
  rows->cold_rows = n_cold;
  int64_t nh = 0, nc = 0;
  split_edges(b0, nd, hot_pos, z_pos, h_indptr, h_idx, c_indptr, c_idx, &nh, &nc);

  /* The model's layout (ng__model_raw_input): an identity block, then the field's blocks. The
   * workspace gives layer 0's output rows and its z, which holds the hot rows' projections. */
  ng_minibatch dmb;
  memset(&dmb, 0, sizeof dmb);
  dmb.n_layers = mb->n_layers + 1;
  dmb.node_ids = mb->node_ids;
  dmb.n_targets = mb->n_targets;
  dmb.blocks[0] = (ng_block){.n_dst = ns, .n_src = ns, .indptr = b0->indptr};
  for (int l = 0; l < mb->n_layers; l++)
    dmb.blocks[l + 1] = mb->blocks[l];
  NG_CHECK(ng__exec_prepare_upper(&ln->ex, &dmb));
  float *z_hot = ln->ex.ws[0].z, *out0 = ln->ex.ws[0].out;

  const size_t hot_x_b = (size_t)n_hot * (size_t)dim * sizeof(float);
  const size_t state_b = (size_t)nd * (size_t)cols * sizeof(float);
  size_t wbytes = 0;
  carve(NULL, &wbytes, hot_x_b);
  carve(NULL, &wbytes, state_b);
  NG_CHECK(ng__bk_reserve(be, &ln->work.ptr, &ln->work.cap, NG_MAX(wbytes, (size_t)ALIGN)));
  size_t at_w = 0;
  float *hot_x = carve(ln->work.ptr, &at_w, hot_x_b);
  float *h_state = carve(ln->work.ptr, &at_w, state_b);

  /* First copy: the hot sub-block, the hot ids and the upper blocks; the device then gathers
   * and projects the hot rows while the CPU works on its part. */
  ng_block hb = {.n_dst = nd, .n_src = NG_MAX(n_hot, nd), .nnz = nh};
  const int64_t *hot_ids_dev = NULL;
  const float *z_dst_dev = NULL, *c_state_dev = NULL;
  pack_item items[8 + 4 * NG_MAX_LAYERS];
  int ni = 0;
#define ITEM(ptr, bytes, dstp) items[ni++] = (pack_item){(ptr), (bytes), (const void **)(dstp)}
  ITEM(h_indptr, ((size_t)nd + 1) * 4, &hb.indptr);
  ITEM(nh ? h_idx : NULL, (size_t)nh * 4, &hb.indices);
  ITEM(n_hot ? hot_ids : NULL, (size_t)n_hot * 8, &hot_ids_dev);
  ni = pack_upper_blocks(items, ni, mb, &dmb, 1);
  NG_CHECK(upload(ln, items, ni, 0));
  const float *P = ln->ex.params;
  if (n_hot > 0) {
    NG_CHECK(B->scatter_rows(be, hot_x, NULL, e->store.cache, hot_ids_dev, n_hot, dim, 0.0f, 0));
    NG_CHECK(B->gemm(be, false, false, n_hot, kf, dim, 1.0f, hot_x, dim, P + L0->off_w, kf, 0.0f,
                     z_hot, kf));
  }

  /* The CPU's part: each row it needs projected once, then the cold edges' states. */
  const size_t z_floats = (size_t)n_z * (size_t)kf, st_floats = (size_t)nd * (size_t)cols;
  NG_CHECK(ng__host_reserve(&ln->gat_z.ptr, &ln->gat_z.cap,
                            (z_floats + st_floats) * sizeof(float) + ALIGN,
                            "the projected rows of the CPU's part"));
  float *z_host = ln->gat_z.ptr, *c_state = z_host + z_floats;
  const float *hp = e->host_params;
  host_project(row_ptr, n_z, dim, hp + L0->off_w, kf, z_host, e->workers);
  const ng_block cb = {
      .n_dst = nd, .n_src = NG_MAX(n_z, nd), .nnz = nc, .indptr = c_indptr, .indices = c_idx};
  const int threads = e->workers;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) if (threads > 1)
  for (int32_t d = 0; d < nd; d++)
    ng__attn_state_rows(at, &cb, z_host, z_host, hp + L0->off_att_src, hp + L0->off_att_dst, false,
                        c_state, d, d + 1);

  /* Second copy: the destinations' projections and the cold states. */
  ni = 0;
  ITEM(z_host, (size_t)nd * (size_t)kf * sizeof(float), &z_dst_dev);
  ITEM(c_state, state_b, &c_state_dev);
#undef ITEM
  NG_CHECK(upload(ln, items, ni, 1));
  NG_CHECK(B->attn_state(be, at, &hb, z_hot, z_dst_dev, P + L0->off_att_src, P + L0->off_att_dst,
                         true, h_state));
  NG_CHECK(B->attn_merge(be, at, nd, h_state, c_state_dev, out0));
  NG_CHECK(B->bias_act_fwd(be, out0, L0->off_b >= 0 ? P + L0->off_b : NULL, nd, L0->out_dim,
                           L0->o.activation));
  return ng__exec_forward_upper(&ln->ex, &dmb);
}

/* ---- SAGE-pool: the input layer's pooled max in partial states ---- */

/* The forward pass of a SAGE-pool model with the input layer split by tier (PARTIAL): the
 * device gathers its hot rows, pools them (pre = ReLU(h W_pool + b_pool)) and reduces each
 * destination's hot edges into a max state; the CPU workers pool each cold source row once with
 * the host copy of the weights and reduce the cold edges into a max state (host_partial); the
 * device merges the states, finalizes them and combines them with the destinations' own rows
 * (hot ones from its tier, cold ones staged), then runs the upper layers. */
static ng_status forward_pool(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                              batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const ng_layer *L0 = &e->model.layers[0];
  const ng_block *b0 = &mb->blocks[0];
  const int32_t nd = b0->n_dst, ns = b0->n_src;
  const int64_t dim = s->dim, nnz = b0->nnz, pd = L0->pre_dim;
  const int64_t *gid = mb->node_ids;
  const size_t row_b = (size_t)dim * sizeof(float);

  /* Host arrays: per source its place among the hot rows or among the cold ones; the two
   * sub-blocks; the destinations' own rows by tier; the hot ids; the cold rows. */
  const size_t need_i32 = 2 * (size_t)ns + 2 * ((size_t)nd + 1) + 2 * (size_t)nnz + 2 * (size_t)nd;
  const size_t need_i64 = 3 * (size_t)ns + 2 * (size_t)nd;
  NG_CHECK(ng__host_reserve(&ln->host_i32.ptr, &ln->host_i32.cap, (need_i32 + 1) * sizeof(int32_t),
                            "the batch's index arrays"));
  NG_CHECK(ng__host_reserve(&ln->host_i64.ptr, &ln->host_i64.cap, (need_i64 + 1) * sizeof(int64_t),
                            "the batch's id arrays"));
  int32_t *hot_pos = ln->host_i32.ptr, *cold_pos = hot_pos + ns;
  int32_t *h_indptr = cold_pos + ns, *c_indptr = h_indptr + nd + 1;
  int32_t *h_idx = c_indptr + nd + 1, *c_idx = h_idx + nnz;
  int32_t *self_hot_pos = c_idx + nnz, *self_cold_pos = self_hot_pos + nd;
  int64_t *hot_ids = ln->host_i64.ptr, *self_hot_ids = hot_ids + ns, *iota = self_hot_ids + nd;
  const float **row_ptr = (const float **)(iota + nd); /* [ns]: cold rows, then pre rows */
  const float **pre_ptr = row_ptr + ns;
  _Static_assert(sizeof(const float *) == sizeof(int64_t), "row pointers fill int64 slots");

  int32_t n_hot = 0, n_cold = 0;
  for (int32_t i = 0; i < ns; i++) {
    bool overlay = false;
    const float *row = ng__srv_feature(s, gid[i], &overlay);
    hot_pos[i] = cold_pos[i] = -1;
    if (gid[i] < e->hot && !overlay) {
      hot_pos[i] = n_hot;
      hot_ids[n_hot++] = gid[i];
    } else {
      row_ptr[n_cold] = row;
      cold_pos[i] = n_cold++;
    }
  }
  rows->hot_rows = n_hot;
  rows->cold_rows = n_cold;
  int64_t nh = 0, nc = 0;
  split_edges(b0, nd, hot_pos, cold_pos, h_indptr, h_idx, c_indptr, c_idx, &nh, &nc);
  int32_t n_self_hot = 0, n_self_cold = 0;
  for (int32_t d = 0; d < nd; d++) {
    if (hot_pos[d] >= 0) {
      self_hot_pos[n_self_hot] = d;
      self_hot_ids[n_self_hot++] = gid[d];
    } else {
      self_cold_pos[n_self_cold] = d;
      iota[n_self_cold] = n_self_cold;
      n_self_cold++;
    }
  }

  ng_minibatch dmb;
  memset(&dmb, 0, sizeof dmb);
  dmb.n_layers = mb->n_layers + 1;
  dmb.node_ids = mb->node_ids;
  dmb.n_targets = mb->n_targets;
  dmb.blocks[0] = (ng_block){.n_dst = ns, .n_src = ns, .indptr = b0->indptr};
  for (int l = 0; l < mb->n_layers; l++)
    dmb.blocks[l + 1] = mb->blocks[l];
  NG_CHECK(ng__exec_prepare_upper(&ln->ex, &dmb));
  float *pre_hot = ln->ex.ws[0].pre, *agg = ln->ex.ws[0].agg, *out0 = ln->ex.ws[0].out;

  const size_t hot_x_b = (size_t)n_hot * row_b, st_rows = (size_t)nd * (size_t)pd * sizeof(float);
  const size_t st_cnt = (size_t)nd * sizeof(int32_t), self_b = (size_t)nd * row_b;
  size_t wbytes = 0;
  carve(NULL, &wbytes, hot_x_b);
  carve(NULL, &wbytes, st_rows);
  carve(NULL, &wbytes, st_cnt);
  carve(NULL, &wbytes, self_b);
  NG_CHECK(ng__bk_reserve(be, &ln->work.ptr, &ln->work.cap, NG_MAX(wbytes, (size_t)ALIGN)));
  size_t at_w = 0;
  float *hot_x = carve(ln->work.ptr, &at_w, hot_x_b);
  ng_pstate hot = {carve(ln->work.ptr, &at_w, st_rows), carve(ln->work.ptr, &at_w, st_cnt), nd, pd};
  float *self = carve(ln->work.ptr, &at_w, self_b);

  ng_block hb = {.n_dst = nd, .n_src = NG_MAX(n_hot, nd), .nnz = nh};
  const int64_t *hot_ids_dev = NULL, *shi = NULL, *iota_dev = NULL;
  const int32_t *shp = NULL, *scp = NULL, *pcnt_dev = NULL;
  const float *pval_dev = NULL, *staged_dev = NULL;
  pack_item items[12 + 4 * NG_MAX_LAYERS];
  int ni = 0;
#define ITEM(ptr, bytes, dstp) items[ni++] = (pack_item){(ptr), (bytes), (const void **)(dstp)}
  ITEM(h_indptr, ((size_t)nd + 1) * 4, &hb.indptr);
  ITEM(nh ? h_idx : NULL, (size_t)nh * 4, &hb.indices);
  ITEM(n_hot ? hot_ids : NULL, (size_t)n_hot * 8, &hot_ids_dev);
  ITEM(n_self_hot ? self_hot_pos : NULL, (size_t)n_self_hot * 4, &shp);
  ITEM(n_self_hot ? self_hot_ids : NULL, (size_t)n_self_hot * 8, &shi);
  ni = pack_upper_blocks(items, ni, mb, &dmb, 1);
  NG_CHECK(upload(ln, items, ni, 0));
  const float *P = ln->ex.params;
  if (n_hot > 0) {
    NG_CHECK(B->scatter_rows(be, hot_x, NULL, e->store.cache, hot_ids_dev, n_hot, dim, 0.0f, 0));
    NG_CHECK(B->gemm(be, false, false, n_hot, pd, dim, 1.0f, hot_x, dim, P + L0->off_w_pre, pd,
                     0.0f, pre_hot, pd));
    NG_CHECK(B->bias_act_fwd(be, pre_hot, P + L0->off_b_pre, n_hot, pd, NG_ACT_RELU));
  }
  NG_CHECK(B->aggr_partial(be, &e->bare, &hb, pre_hot, &hot));
  if (n_self_hot > 0)
    NG_CHECK(B->scatter_rows(be, self, shp, e->store.cache, shi, n_self_hot, dim, 0.0f, 0));

  /* The CPU's part: each cold row pooled once, its cold edges' max states, the cold self rows. */
  const size_t pre_floats = (size_t)n_cold * (size_t)pd, st_floats = (size_t)nd * (size_t)pd;
  const size_t bytes =
      (pre_floats + st_floats) * sizeof(float) + st_cnt + (size_t)n_self_cold * row_b + 4 * ALIGN;
  NG_CHECK(ng__host_reserve(&ln->gat_z.ptr, &ln->gat_z.cap, bytes, "the pooled rows of the CPU"));
  size_t sat = 0;
  float *pre_cold = carve(ln->gat_z.ptr, &sat, pre_floats * sizeof(float));
  float *p_val = carve(ln->gat_z.ptr, &sat, st_floats * sizeof(float));
  int32_t *p_cnt = carve(ln->gat_z.ptr, &sat, st_cnt);
  float *staged = carve(ln->gat_z.ptr, &sat, (size_t)n_self_cold * row_b);
  const float *hp = e->host_params;
  host_project(row_ptr, n_cold, dim, hp + L0->off_w_pre, pd, pre_cold, e->workers);
  const float *b_pre = hp + L0->off_b_pre;
  const int threads = e->workers;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int32_t r = 0; r < n_cold; r++) { /* bias then ReLU, as bias_act_fwd */
    float *x = pre_cold + (int64_t)r * pd;
    for (int64_t c = 0; c < pd; c++) {
      const float v = x[c] + b_pre[c];
      x[c] = v > 0.0f ? v : 0.0f;
    }
  }
  for (int32_t r = 0; r < n_cold; r++)
    pre_ptr[r] = pre_cold + (int64_t)r * pd;
  host_partial(&e->bare, c_indptr, c_idx, NULL, pre_ptr, nd, pd, p_val, p_cnt, e->workers);
  for (int32_t i = 0; i < n_self_cold; i++)
    memcpy(staged + (int64_t)i * dim, row_ptr[cold_pos[self_cold_pos[i]]], row_b);

  ni = 0;
  ITEM(p_val, st_floats * sizeof(float), &pval_dev);
  ITEM(p_cnt, st_cnt, &pcnt_dev);
  ITEM(n_self_cold ? staged : NULL, (size_t)n_self_cold * row_b, &staged_dev);
  ITEM(n_self_cold ? self_cold_pos : NULL, (size_t)n_self_cold * 4, &scp);
  ITEM(n_self_cold ? iota : NULL, (size_t)n_self_cold * 8, &iota_dev);
#undef ITEM
  NG_CHECK(upload(ln, items, ni, 1));
  ng_pstate cold = {(float *)pval_dev, (int32_t *)pcnt_dev, nd, pd};
  if (nc > 0)
    NG_CHECK(B->pstate_merge(be, &e->bare, &hot, &cold));
  NG_CHECK(B->pstate_finalize(be, &e->bare, &hot, agg));
  if (n_self_cold > 0)
    NG_CHECK(B->scatter_rows(be, self, scp, staged_dev, iota_dev, n_self_cold, dim, 0.0f, 0));
  NG_CHECK(ng__exec_pool_combine(&ln->ex, 0, nd, self, agg, out0));
  return ng__exec_forward_upper(&ln->ex, &dmb);
}

/* The forward pass of a model whose input layer reads raw rows (GAT, SAGE-pool:
 * ng__model_raw_input) in every strategy but PARTIAL: the device assembles every source row of
 * the input layer, hot ones from its tier and cold ones staged by the host, and runs the model as
 * the trainer's evaluation does. */
static ng_status forward_raw_input(lane *ln, const ng_srv_snap *s, const ng_minibatch *mb,
                                   batch_rows *rows) {
  ng_engine *e = ln->e;
  ng_backend *be = ln->be;
  const struct ng_backend_i *B = be->iface;
  const ng_block *b0 = &mb->blocks[0];
  const int32_t ns = b0->n_src;
  const int64_t dim = s->dim, *gid = mb->node_ids;
  const size_t row_b = (size_t)dim * sizeof(float);
  NG_CHECK(ng__host_reserve(&ln->host_i32.ptr, &ln->host_i32.cap, (2 * (size_t)ns + 1) * 4,
                            "the batch's index arrays"));
  NG_CHECK(ng__host_reserve(&ln->host_i64.ptr, &ln->host_i64.cap, (2 * (size_t)ns + 1) * 8,
                            "the batch's id arrays"));
  int32_t *hot_at = ln->host_i32.ptr, *cold_at = hot_at + ns;
  int64_t *hot_ids = ln->host_i64.ptr, *iota = hot_ids + ns;
  int32_t n_hot = 0, n_cold = 0;
  for (int32_t i = 0; i < ns; i++) {
    if (gid[i] < e->hot && !ng__srv_has_overlay(s, gid[i])) {
      hot_at[n_hot] = i;
      hot_ids[n_hot++] = gid[i];
    } else {
      cold_at[n_cold++] = i;
    }
  }
  rows->hot_rows = n_hot;
  rows->cold_rows = n_cold;
  NG_CHECK(ng__host_reserve(&ln->stage.ptr, &ln->stage.cap, (size_t)n_cold * row_b + ALIGN,
                            "the cold rows' staging"));
  float *staged = ln->stage.ptr;
  for (int32_t j = 0; j < n_cold; j++) {
    bool overlay = false;
    memcpy(staged + (int64_t)j * dim, ng__srv_feature(s, gid[cold_at[j]], &overlay), row_b);
    iota[j] = j;
  }
  ng_minibatch dmb;
  memset(&dmb, 0, sizeof dmb);
  dmb.n_layers = mb->n_layers + 1;
  dmb.node_ids = mb->node_ids;
  dmb.n_targets = mb->n_targets;
  dmb.blocks[0] = (ng_block){.n_dst = ns, .n_src = ns, .indptr = b0->indptr};
  const size_t x_b = (size_t)ns * row_b;
  NG_CHECK(ng__bk_reserve(be, &ln->work.ptr, &ln->work.cap, NG_MAX(x_b, (size_t)ALIGN)));
  float *x = ln->work.ptr;
  const int32_t *hot_at_dev = NULL, *cold_at_dev = NULL;
  const int64_t *hot_ids_dev = NULL, *iota_dev = NULL;
  const float *staged_dev = NULL;
  pack_item items[8 + 4 * NG_MAX_LAYERS];
  int ni = 0;
#define ITEM(ptr, bytes, dstp) items[ni++] = (pack_item){(ptr), (bytes), (const void **)(dstp)}
  ITEM(n_hot ? hot_at : NULL, (size_t)n_hot * 4, &hot_at_dev);
  ITEM(n_hot ? hot_ids : NULL, (size_t)n_hot * 8, &hot_ids_dev);
  for (int l = 0; l < mb->n_layers; l++) {
    const ng_block *src_b = &mb->blocks[l];
    ng_block *db = &dmb.blocks[l + 1];
    *db = *src_b;
    db->t_indptr = db->t_dst = db->t_eid = NULL; /* no backward pass */
    ITEM(src_b->indptr, ((size_t)src_b->n_dst + 1) * 4, &db->indptr);
    ITEM(src_b->indices, (size_t)src_b->nnz * 4, &db->indices);
    ITEM(src_b->edge_w, src_b->edge_w ? (size_t)src_b->nnz * 4 : 0, &db->edge_w);
    ITEM(src_b->self_w, src_b->self_w ? (size_t)src_b->n_dst * 4 : 0, &db->self_w);
  }
  NG_CHECK(upload(ln, items, ni, 0));
  if (n_hot > 0)
    NG_CHECK(B->scatter_rows(be, x, hot_at_dev, e->store.cache, hot_ids_dev, n_hot, dim, 0.0f, 0));
  ni = 0;
  ITEM(n_cold ? cold_at : NULL, (size_t)n_cold * 4, &cold_at_dev);
  ITEM(n_cold ? iota : NULL, (size_t)n_cold * 8, &iota_dev);
  ITEM(n_cold ? staged : NULL, (size_t)n_cold * row_b, &staged_dev);
#undef ITEM
  NG_CHECK(upload(ln, items, ni, 1));
  if (n_cold > 0)
    NG_CHECK(B->scatter_rows(be, x, cold_at_dev, staged_dev, iota_dev, n_cold, dim, 0.0f, 0));
  return ng__exec_forward(&ln->ex, &dmb, NULL, x, false, 0);
}

/* The batch's distinct targets: a small open-addressing map from a key to its place among them.
 * The key is the node id, and for sampled requests (node, seed): a node asked for with two
 * seeds is two targets, each drawing its field with its request's seed. */
static size_t target_slot(int64_t v, uint64_t seed, size_t mask) {
  uint64_t hv = (uint64_t)v * 0x9e3779b97f4a7c15ULL ^ seed * 0xc2b2ae3d27d4eb4fULL;
  return (size_t)(hv ^ (hv >> 32)) & mask;
}

static uint64_t seed_of(const ng_infer_request *r) {
  return r->n_fanouts ? r->seed : 0;
}

static ng_status batch_targets(lane *ln, pending **reqs, int n_req, int32_t *n_targets) {
  int64_t total = 0;
  for (int i = 0; i < n_req; i++)
    total += reqs[i]->req->n;
  size_t cap = 64;
  while (cap < (size_t)total * 2)
    cap *= 2;
  NG_CHECK(ng__host_reserve(&ln->targets.ptr, &ln->targets.cap, (size_t)total * sizeof(int64_t),
                            "the batch's targets"));
  NG_CHECK(ng__host_reserve(&ln->target_seeds.ptr, &ln->target_seeds.cap,
                            (size_t)total * sizeof(uint64_t), "the batch's targets"));
  NG_CHECK(ng__host_reserve(&ln->map_keys.ptr, &ln->map_keys.cap, cap * sizeof(int64_t),
                            "the batch's target map"));
  NG_CHECK(ng__host_reserve(&ln->map_seeds.ptr, &ln->map_seeds.cap, cap * sizeof(uint64_t),
                            "the batch's target map"));
  NG_CHECK(ng__host_reserve(&ln->map_vals.ptr, &ln->map_vals.cap, cap * sizeof(int32_t),
                            "the batch's target map"));
  int64_t *keys = ln->map_keys.ptr, *targets = ln->targets.ptr;
  uint64_t *kseeds = ln->map_seeds.ptr, *seeds = ln->target_seeds.ptr;
  int32_t *vals = ln->map_vals.ptr;
  memset(keys, 0xff, cap * sizeof *keys);
  int32_t n = 0;
  for (int i = 0; i < n_req; i++) {
    const ng_infer_request *r = reqs[i]->req;
    const uint64_t sd = seed_of(r);
    for (int64_t j = 0; j < r->n; j++) {
      const int64_t v = r->node_ids[j];
      size_t h = target_slot(v, sd, cap - 1);
      while (keys[h] != -1 && (keys[h] != v || kseeds[h] != sd))
        h = (h + 1) & (cap - 1);
      if (keys[h] == -1) {
        keys[h] = v;
        kseeds[h] = sd;
        vals[h] = n;
        seeds[n] = sd;
        targets[n++] = v;
      }
    }
  }
  ln->map_cap = cap;
  *n_targets = n;
  return NG_OK;
}

static int32_t target_of(const lane *ln, int64_t v, uint64_t seed) {
  const int64_t *keys = ln->map_keys.ptr;
  const uint64_t *kseeds = ln->map_seeds.ptr;
  const int32_t *vals = ln->map_vals.ptr;
  const size_t cap = ln->map_cap;
  size_t h = target_slot(v, seed, cap - 1);
  while (keys[h] != v || kseeds[h] != seed)
    h = (h + 1) & (cap - 1);
  return vals[h];
}

/* Which strategy fetches the cold rows of a batch: the mode's, and near-data partial
 * aggregation for hub requests in the modes that have it. */
static fetch_kind strategy(const ng_engine *e, bool hub) {
  switch (e->mode) {
  case NG_MODE_BASELINE:
    return FETCH_TRANSFER;
  case NG_MODE_ZEROCOPY:
    return FETCH_ZCOPY;
  case NG_MODE_PARTIAL:
    return FETCH_PARTIAL;
  case NG_MODE_HYBRID:
    return hub ? FETCH_PARTIAL : FETCH_AUTO;
  default: /* CPU, HYBRID_STATIC */
    return hub ? FETCH_PARTIAL : FETCH_TRANSFER;
  }
}

/* The cache's layer-0 rows of missing nodes: the engine's forward pass (serve/ecache.c). */
typedef struct {
  lane *ln;
  fetch_kind how;
} ecache_arg;

static ng_status ecache_layer0(void *arg, const ng_srv_snap *s, const ng_minibatch *mb,
                               int64_t *hot_rows, int64_t *cold_rows) {
  const ecache_arg *a = arg;
  batch_rows rows = {0, 0};
  ng_status st = forward(a->ln, s, mb, a->how, &rows);
  *hot_rows = rows.hot_rows;
  *cold_rows = rows.cold_rows;
  return st;
}

/* A request's answer must be finite: a NaN or infinity (a feature row that overflows the model,
 * a damaged weight) is an error naming the first nodes it reached, never a 200 with null logits
 * or class 0 (docs/guarantees.md). Checks the rows the request reads: its logits, and its
 * embedding layer's rows when it asked for them (ed > 0). */
static ng_status answer_finite(pending *p, const float *logits, int64_t classes, const float *emb,
                               int64_t ed, const lane *ln, uint64_t sd) {
  const ng_infer_request *r = p->req;
  int64_t bad[3], n_bad = 0;
  for (int64_t j = 0; j < r->n; j++) {
    const int32_t t = target_of(ln, r->node_ids[j], sd);
    bool ok = true;
    for (int64_t c = 0; c < classes && ok; c++)
      ok = isfinite(logits[(size_t)t * (size_t)classes + (size_t)c]);
    for (int64_t c = 0; c < ed && ok; c++)
      ok = isfinite(emb[(size_t)t * (size_t)ed + (size_t)c]);
    if (!ok && n_bad++ < 3)
      bad[n_bad - 1] = r->node_ids[j];
  }
  if (n_bad == 0)
    return NG_OK;
  char ids[96] = "";
  for (int64_t i = 0; i < NG_MIN(n_bad, 3); i++)
    snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", i ? ", " : "",
             (long long)bad[i]);
  snprintf(p->err, sizeof p->err,
           "engine: the answer is not finite (NaN or infinity) for %lld of the request's %lld "
           "nodes (%s%s): a feature row or a weight overflows the model",
           (long long)n_bad, (long long)r->n, ids, n_bad > 3 ? ", ..." : "");
  return NG_ERR_NONFINITE;
}

/* Computes a batch of compatible requests (same sampling) and fills their results. */
static ng_status run_batch(lane *ln, pending **reqs, int n_req, double t0, batch_rows *rows_out) {
  ng_engine *e = ln->e;
  const struct ng_model *m = &e->model;
  const ng_infer_request *r0 = reqs[0]->req;
  int32_t n_targets = 0;
  NG_CHECK(batch_targets(ln, reqs, n_req, &n_targets));
  ng_srv_snap *s = snap_acquire(e);
  ng_minibatch mb;
  ng_status st = NG_OK;
  batch_rows rows = {0, 0};
  if (e->ecache && r0->n_fanouts == 0) { /* full neighbourhoods from cached layer-0 rows */
    ecache_arg a = {ln, strategy(e, reqs[0]->hub)};
    const ng_ecache_ctx cx = {&ln->ex, ln->be, m, ln->field, e->gcn, ecache_layer0, &a};
    st = ng__ecache_forward(e->ecache, ln->ecache_work, &cx, s, ln->targets.ptr, n_targets,
                            &rows.hot_rows, &rows.cold_rows);
  } else {
    /* Sampled batches give each target its request's seed; a batch's requests share fanouts. */
    st = ng__srv_field_build(&mb, ln->field, s, m->n_layers, reqs[0]->fanout, e->gcn,
                             r0->n_fanouts ? ln->target_seeds.ptr : NULL, ln->targets.ptr,
                             n_targets);
  }
  if (st == NG_OK && !(e->ecache && r0->n_fanouts == 0)) {
    const fetch_kind how = strategy(e, reqs[0]->hub);
    if (!ng__model_raw_input(m))
      st = forward(ln, s, &mb, how, &rows);
    else if (how != FETCH_PARTIAL)
      st = forward_raw_input(ln, s, &mb, &rows);
    else if (e->gat)
      st = forward_gat(ln, s, &mb, &rows);
    else
      st = forward_pool(ln, s, &mb, &rows);
  }
  ng__srv_snap_unref(s);
  if (st != NG_OK)
    return st;
  *rows_out = rows;
  /* The outputs the batch's requests want, copied back once per layer. */
  bool want[NG_MAX_LAYERS] = {false};
  want[m->n_layers - 1] = true;
  for (int i = 0; i < n_req; i++)
    if (reqs[i]->req->outputs & NG_OUT_EMBEDDING)
      want[reqs[i]->emb_layer] = true;
  size_t off[NG_MAX_LAYERS], total = 0;
  for (int l = 0; l < m->n_layers; l++) {
    off[l] = total;
    if (want[l])
      total += (size_t)n_targets * (size_t)m->layers[l].out_dim;
  }
  NG_CHECK(ng__host_reserve(&ln->out_host.ptr, &ln->out_host.cap, total * sizeof(float),
                            "the batch's outputs"));
  float *host = ln->out_host.ptr;
  for (int l = 0; l < m->n_layers; l++)
    if (want[l])
      NG_CHECK(ln->be->iface->copy_d2h(ln->be, host + off[l], ln->ex.ws[l].out,
                                       (size_t)n_targets * (size_t)m->layers[l].out_dim *
                                           sizeof(float)));
  const double t1 = now_us();
  const int64_t classes = m->layers[m->n_layers - 1].out_dim;
  const float *logits = host + off[m->n_layers - 1];
  for (int i = 0; i < n_req; i++) {
    pending *p = reqs[i];
    const ng_infer_request *r = p->req;
    ng_infer_result *res = p->res;
    const unsigned outs = r->outputs ? r->outputs : NG_OUT_LOGITS;
    res->n = r->n;
    res->classes = classes;
    res->embedding_dim = (outs & NG_OUT_EMBEDDING) ? m->layers[p->emb_layer].out_dim : 0;
    res->hub = p->hub;
    res->batch_nodes = n_targets;
    res->hot_rows = rows.hot_rows;
    res->cold_rows = rows.cold_rows;
    res->queue_us = t0 - p->t_enq;
    res->compute_us = t1 - t0;
    if (outs & NG_OUT_LOGITS)
      res->logits = malloc((size_t)r->n * (size_t)classes * sizeof(float) + 1);
    if (outs & NG_OUT_EMBEDDING)
      res->embedding = malloc((size_t)r->n * (size_t)res->embedding_dim * sizeof(float) + 1);
    if (outs & NG_OUT_CLASS)
      res->cls = malloc((size_t)r->n * sizeof(int64_t) + 1);
    if (((outs & NG_OUT_LOGITS) && !res->logits) ||
        ((outs & NG_OUT_EMBEDDING) && !res->embedding) || ((outs & NG_OUT_CLASS) && !res->cls)) {
      ng_infer_result_free(res);
      p->st = NG_ERR_NOMEM;
      snprintf(p->err, sizeof p->err, "engine: out of memory for the answer of %lld nodes",
               (long long)r->n);
      continue;
    }
    const uint64_t sd = seed_of(r);
    for (int64_t j = 0; j < r->n; j++) {
      const int32_t t = target_of(ln, r->node_ids[j], sd);
      const float *row = logits + (size_t)t * (size_t)classes;
      if (res->logits)
        memcpy(res->logits + j * classes, row, (size_t)classes * sizeof(float));
      if (res->embedding) {
        const int64_t ed = res->embedding_dim;
        memcpy(res->embedding + j * ed, host + off[p->emb_layer] + (size_t)t * (size_t)ed,
               (size_t)ed * sizeof(float));
      }
      if (res->cls) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
          if (row[c] > row[best])
            best = c;
        res->cls[j] = best;
      }
    }
    p->st =
        answer_finite(p, logits, classes, res->embedding_dim > 0 ? host + off[p->emb_layer] : NULL,
                      res->embedding_dim, ln, sd);
    if (p->st != NG_OK)
      ng_infer_result_free(res);
  }
  return NG_OK;
}

/* Whether two requests may share a device batch: full neighbourhoods, or the same fanouts
 * (whatever their seeds: each target draws with its own request's seed, batch_targets). */
static bool compatible(const pending *a, const pending *b) {
  if (a->req->n_fanouts != b->req->n_fanouts)
    return false;
  if (a->req->n_fanouts == 0)
    return true;
  return memcmp(a->fanout, b->fanout, sizeof a->fanout) == 0;
}

/* The lane that serves request `p`: the hub lane for hub requests. */
static lane *lane_of(ng_engine *e, const pending *p) {
  return &e->lanes[p->hub ? LANE_HUB : LANE_MAIN];
}

/* Unlinks queued request `p` (its predecessor `prev` in its lane's queue, NULL at the head) and
 * takes it off the queue's counts. Under e->mu. */
static void unlink_pending(lane *ln, pending *p, pending *prev) {
  if (prev)
    prev->next = p->next;
  else
    ln->head = p->next;
  if (ln->tail == p)
    ln->tail = prev;
  p->next = NULL;
  ln->queued_nodes -= p->req->n;
  ln->queued_work -= p->work;
}

/* Answers queued request `p`, whose deadline passed before it could start, as busy: it is never
 * computed. Under e->mu, with p already unlinked. */
static void expire(ng_engine *e, pending *p, double now) {
  p->st = NG_ERR_STATE;
  snprintf(p->err, sizeof p->err,
           "engine busy: the request waited %.1f ms and could not start before its deadline "
           "(timeout_ms %lld); retry later",
           (now - p->t_enq) / 1e3, (long long)p->timeout_ms);
  p->done = true;
  e->admitted--;
  e->stats.timed_out++;
}

/* The lane's measured cost after a batch of `work` units computed in `us`: an EWMA of the cost
 * per unit, weighted towards recent batches so that it follows the load. Under e->mu. */
static void measure(const ng_engine *e, lane *ln, int64_t work, double us) {
  if (e->cost_fixed || work <= 0)
    return;
  const double per = us / (double)work;
  ln->us_per_work = ln->us_per_work > 0.0 ? 0.8 * ln->us_per_work + 0.2 * per : per;
}

/* The test hook's hold (ng__engine_test_hold_hub): a hub batch, once taken, waits here until the
 * test releases it. Under e->mu. */
static void hold_hub_batch(ng_engine *e) {
  if (!e->hold_hub)
    return;
  e->hub_held++;
  pthread_cond_broadcast(&e->done_cv);
  while (e->hold_hub)
    pthread_cond_wait(&e->done_cv, &e->mu);
  e->hub_held--;
}

/* A lane's thread: it forms batches from its own queue and computes them on its own backend.
 * The main lane merges compatible ordinary requests; the hub lane runs each hub request alone
 * and at once (it does not wait max_delay_us). */
static void *lane_main(void *arg) {
  lane *ln = arg;
  ng_engine *e = ln->e;
  pending *batch[1024];
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while ((!ln->head || e->paused) && !e->stopping)
      pthread_cond_wait(&e->work_cv, &e->mu);
    if (!ln->head)
      break; /* stopping, and every request of this lane is answered */
    /* Wait for others to join the oldest request, up to max_delay_us or a full batch. A hub
     * request runs alone and starts at once. */
    const double delay_end = ln->head->t_enq + (double)e->o.max_delay_us;
    while (!e->stopping && !e->paused && ln->head && !ln->head->hub &&
           ln->queued_nodes < e->o.max_batch && ln->queued_work < e->o.max_batch_work &&
           now_us() < delay_end)
      wait_until(&e->work_cv, &e->mu, NG_MIN(delay_end, ln->head->deadline_us));
    if (!ln->head || (e->paused && !e->stopping))
      continue; /* the head left (its deadline passed), or a test paused the lanes */
    /* Take the oldest request, then every later compatible one that fits; requests whose
     * deadline has passed are answered busy instead, never computed. */
    int n = 0;
    int64_t nodes = 0, work = 0;
    pending *p = ln->head, *prev = NULL;
    const pending *first = NULL;
    const double now = now_us();
    while (p && n < (int)NG_ARRAY_LEN(batch)) {
      pending *next = p->next;
      if (now >= p->deadline_us) {
        unlink_pending(ln, p, prev);
        expire(e, p, now);
        p = next;
        continue;
      }
      const bool take =
          !first || (!first->hub && !p->hub && compatible(first, p) &&
                     nodes + p->req->n <= e->o.max_batch && work + p->work <= e->o.max_batch_work);
      if (take) {
        unlink_pending(ln, p, prev);
        p->taken = true;
        batch[n++] = p;
        nodes += p->req->n;
        work += p->work;
        if (!first)
          first = p;
      } else {
        prev = p;
      }
      if (first && (first->hub || nodes >= e->o.max_batch || work >= e->o.max_batch_work))
        break;
      p = next;
    }
    pthread_cond_broadcast(&e->done_cv); /* the callers of expired requests */
    if (n == 0)
      continue;
    ln->running_work = work;
    if (first->hub)
      hold_hub_batch(e);
    pthread_mutex_unlock(&e->mu);

    const double t0 = now_us();
    batch_rows rows = {0, 0};
    ng_status st = run_batch(ln, batch, n, t0, &rows);
    char msg[512] = "";
    if (st != NG_OK)
      snprintf(msg, sizeof msg, "%s", ng_last_error());
    const double t1 = now_us();

    pthread_mutex_lock(&e->mu);
    ln->running_work = 0;
    if (st == NG_OK)
      measure(e, ln, work, t1 - t0);
    e->stats.batches++;
    e->stats.batch_nodes += nodes;
    e->stats.hot_rows += rows.hot_rows;
    e->stats.cold_rows += rows.cold_rows;
    for (int i = 0; i < n; i++) {
      pending *q = batch[i];
      if (st != NG_OK) {
        ng_infer_result_free(q->res);
        q->st = st;
        snprintf(q->err, sizeof q->err, "%s", msg);
      }
      q->done = true;
    }
    e->admitted -= n;
    pthread_cond_broadcast(&e->done_cv);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

void ng__engine_test_pause(ng_engine *e, bool paused) {
  pthread_mutex_lock(&e->mu);
  e->paused = paused;
  pthread_cond_broadcast(&e->work_cv);
  pthread_mutex_unlock(&e->mu);
}

void ng__engine_test_cost(ng_engine *e, double us_per_work) {
  pthread_mutex_lock(&e->mu);
  for (int k = 0; k < N_LANES; k++)
    e->lanes[k].us_per_work = us_per_work;
  e->cost_fixed = us_per_work > 0.0;
  pthread_mutex_unlock(&e->mu);
}

void ng__engine_test_hold_hub(ng_engine *e, bool hold) {
  pthread_mutex_lock(&e->mu);
  e->hold_hub = hold;
  pthread_cond_broadcast(&e->done_cv);
  pthread_mutex_unlock(&e->mu);
}

bool ng__engine_test_hub_held(ng_engine *e, double timeout_s) {
  pthread_mutex_lock(&e->mu);
  const double until = now_us() + timeout_s * 1e6;
  while (e->hub_held == 0 && now_us() < until)
    wait_until(&e->done_cv, &e->mu, until);
  const bool held = e->hub_held > 0;
  pthread_mutex_unlock(&e->mu);
  return held;
}

/* ---- the API ---- */

static ng_status engine_check(const ng_engine *e) {
  if (!e)
    return ng__err(NG_ERR_INVALID_ARG, "engine handle is NULL");
  if (e->magic != ENGINE_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "engine handle is not a live engine (destroyed?)");
  return NG_OK;
}

/* Checks a request against the engine and the current node count. */
static ng_status check_request(ng_engine *e, const ng_infer_request *r, pending *p) {
  const struct ng_model *m = &e->model;
  if (!r)
    return ng__err(NG_ERR_INVALID_ARG, "request is NULL");
  if (r->n < 1 || r->n > e->o.max_request_nodes || !r->node_ids)
    return ng__err(NG_ERR_INVALID_ARG,
                   "request has %lld node ids; send 1 to %lld (max_request_nodes)", (long long)r->n,
                   (long long)e->o.max_request_nodes);
  if (r->outputs & ~(unsigned)(NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS))
    return ng__err(NG_ERR_INVALID_ARG,
                   "request outputs 0x%x: unknown bits (logits 1, embedding "
                   "2, class 4)",
                   r->outputs);
  p->emb_layer = r->embedding_layer >= 0 ? r->embedding_layer : NG_MAX(0, m->n_layers - 2);
  if ((r->outputs & NG_OUT_EMBEDDING) && p->emb_layer >= m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG,
                   "embedding_layer %d does not exist: the model has layers 0 .. %d",
                   (int)r->embedding_layer, m->n_layers - 1);
  if (r->n_fanouts != 0 && r->n_fanouts != m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG,
                   "request gives %d fanouts; give one per layer (%d) or none (full "
                   "neighbourhood)",
                   (int)r->n_fanouts, m->n_layers);
  for (int l = 0; l < m->n_layers; l++) {
    p->fanout[l] = r->n_fanouts ? r->fanout[l] : -1;
    if (p->fanout[l] == 0 || p->fanout[l] < -1)
      return ng__err(NG_ERR_INVALID_ARG, "fanout %d of layer %d: use a positive count or -1 (all)",
                     (int)p->fanout[l], l);
  }
  if (r->timeout_ms < 0 || r->timeout_ms > NG_ENGINE_MAX_TIMEOUT_MS)
    return ng__err(NG_ERR_INVALID_ARG,
                   "timeout_ms %lld: give 1 to %d ms, or 0 for the engine's default (%lld ms)",
                   (long long)r->timeout_ms, NG_ENGINE_MAX_TIMEOUT_MS,
                   (long long)e->o.request_timeout_ms);
  p->timeout_ms = r->timeout_ms ? r->timeout_ms : e->o.request_timeout_ms;
  ng_srv_snap *s = snap_acquire(e);
  ng_status st = NG_OK;
  for (int64_t j = 0; j < r->n; j++) {
    if (r->node_ids[j] < 0 || r->node_ids[j] >= s->nodes) {
      st = ng__err(NG_ERR_INVALID_ARG, "node_ids[%lld] = %lld is not a node (0 .. %lld)",
                   (long long)j, (long long)r->node_ids[j], (long long)s->nodes - 1);
      break;
    }
  }
  if (st == NG_OK) {
    const int64_t edges =
        ng__srv_field_estimate(s, m->n_layers, p->fanout, r->node_ids, r->n, e->hub_edges);
    p->hub = edges > e->hub_edges;
    p->work = edges + r->n;
  }
  ng__srv_snap_unref(s);
  return st;
}

ng_status ng_engine_infer(ng_engine *e, const ng_infer_request *req, ng_infer_result *res) {
  NG_CHECK(engine_check(e));
  if (!res)
    return ng__err(NG_ERR_INVALID_ARG, "ng_engine_infer: result is NULL");
  memset(res, 0, sizeof *res);
  pending p;
  memset(&p, 0, sizeof p);
  NG_CHECK(check_request(e, req, &p));
  p.req = req;
  p.res = res;
  p.t_enq = now_us();
  p.deadline_us = p.t_enq + (double)p.timeout_ms * 1e3;
  pthread_mutex_lock(&e->mu);
  if (e->stopping) {
    pthread_mutex_unlock(&e->mu);
    return ng__err(NG_ERR_STATE, "engine is draining: no new requests");
  }
  if (e->admitted >= e->o.queue_cap) {
    e->stats.rejected_busy++;
    pthread_mutex_unlock(&e->mu);
    return ng__err(NG_ERR_STATE, "engine busy: %d requests admitted and not answered (queue_cap)",
                   e->o.queue_cap);
  }
  /* Admission by predicted wait: the work queued and computing ahead of this request at the
   * measured cost. Refused at once when it would start after its deadline: answering busy now
   * costs the client nothing, computing it late would cost the requests behind it. */
  lane *ln = lane_of(e, &p);
  const double wait_us = (double)(ln->queued_work + ln->running_work) * ln->us_per_work;
  if (p.t_enq + wait_us > p.deadline_us) {
    e->stats.rejected_deadline++;
    pthread_mutex_unlock(&e->mu);
    return ng__err(NG_ERR_STATE,
                   "engine busy: the predicted wait, %.1f ms, passes the request's deadline "
                   "(timeout_ms %lld); retry later",
                   wait_us / 1e3, (long long)p.timeout_ms);
  }
  e->admitted++;
  e->callers++;
  e->stats.requests++;
  e->stats.request_nodes += req->n;
  e->stats.hub_requests += p.hub;
  ln->queued_nodes += req->n;
  ln->queued_work += p.work;
  if (ln->tail)
    ln->tail->next = &p;
  else
    ln->head = &p;
  ln->tail = &p;
  pthread_cond_broadcast(&e->work_cv); /* both lanes wait on it */
  while (!p.done) {
    if (!p.taken && now_us() >= p.deadline_us) {
      /* Still queued at its deadline: leave the queue unanswered by the device. */
      pending *prev = NULL;
      for (pending *q = ln->head; q && q != &p; q = q->next)
        prev = q;
      unlink_pending(ln, &p, prev);
      expire(e, &p, now_us());
      pthread_cond_broadcast(&e->work_cv); /* its lane may be waiting on this head */
      break;
    }
    if (p.taken)
      pthread_cond_wait(&e->done_cv, &e->mu);
    else
      wait_until(&e->done_cv, &e->mu, p.deadline_us);
  }
  e->callers--;
  if (e->stopping)
    pthread_cond_broadcast(&e->done_cv);
  pthread_mutex_unlock(&e->mu);
  if (p.st != NG_OK)
    return ng__err(p.st, "%s", p.err);
  return NG_OK;
}

/* ---- updates: group commit ---- */

/* A caller of ng_engine_apply waiting for its update's group (on its own stack). */
typedef struct upd_waiter {
  const ng_graph_update *u;
  struct upd_waiter *next;
  ng_update_result res;
  ng_srv_snap *snap; /* the snapshot with this update applied (the leader's, while it commits) */
  ng_status st;
  bool done; /* answered (under upd_mu) */
  char err[512];
} upd_waiter;

/* The leader's work on one group, without upd_mu: each update is validated and applied in
 * arrival order onto the snapshot with the ones before it applied (exactly as if serialised); one
 * that fails is answered with its error and skipped. The records of those that changed something
 * go to the log in one write and one fdatasync; then the last snapshot is published. */
static void commit_group(ng_engine *e, upd_waiter *group) {
  int n = 0, n_logged = 0;
  for (upd_waiter *w = group; w; w = w->next)
    n++;
  const ng_graph_update **logged = malloc((size_t)n * sizeof *logged);
  if (!logged) {
    for (upd_waiter *w = group; w; w = w->next) {
      w->st = NG_ERR_NOMEM;
      ng__strlcpy(w->err, "engine: out of memory for an update group", sizeof w->err);
    }
    return;
  }
  ng_srv_snap *base = snap_acquire(e), *cur = base;
  for (upd_waiter *w = group; w; w = w->next) {
    ng_srv_snap *next = NULL;
    ng_srv_changes chg = {0};
    w->st = ng__srv_snap_apply(&next, cur, w->u, &chg);
    if (w->st != NG_OK) {
      ng__strlcpy(w->err, ng_last_error(), sizeof w->err);
      continue;
    }
    /* An update that changes nothing needs no record: replaying it would change nothing. */
    const bool changed =
        chg.added_nodes || chg.added_edges || chg.removed_edges || chg.updated_features;
    w->res = (ng_update_result){sizeof w->res,   cur->nodes,        chg.added_nodes,
                                chg.added_edges, chg.removed_edges, chg.updated_features,
                                changed};
    if (!changed) {
      ng__srv_snap_unref(next);
      continue;
    }
    logged[n_logged++] = w->u;
    w->snap = next;
    cur = next;
  }
  ng_status st = ng__srv_log_append_group(&e->log, logged, n_logged, base->dim);
  if (st != NG_OK) {
    /* Nothing of the group was acknowledged or published: every update that would have been
     * logged fails with the write's error (the log was cut back). */
    const char *why = ng_last_error();
    for (upd_waiter *w = group; w; w = w->next)
      if (w->snap) {
        w->st = st;
        ng__strlcpy(w->err, why, sizeof w->err);
      }
  } else if (n_logged > 0) {
    /* The cached layer-0 rows the group changes go before it is published, update by update in
     * the log's order (serve/ecache_impl.h). */
    const ng_srv_snap *before = base;
    for (upd_waiter *w = group; w; w = w->next)
      if (w->snap) {
        ng__ecache_invalidate(e->ecache, before, w->snap, w->u, e->gcn[0]);
        before = w->snap;
      }
    /* Publish: batches that start from now on see the group; running ones keep their snapshot. */
    ng__srv_snap_ref(cur);
    pthread_mutex_lock(&e->snap_mu);
    ng_srv_snap *old = e->snap;
    e->snap = cur;
    pthread_mutex_unlock(&e->snap_mu);
    ng__srv_snap_unref(old);
    pthread_mutex_lock(&e->mu);
    e->stats.updates += n_logged;
    e->stats.update_syncs++;
    pthread_mutex_unlock(&e->mu);
  }
  for (upd_waiter *w = group; w; w = w->next) {
    ng__srv_snap_unref(w->snap);
    w->snap = NULL;
  }
  ng__srv_snap_unref(base);
  free(logged);
}

ng_status ng_engine_apply(ng_engine *e, const ng_graph_update *u, ng_update_result *out) {
  NG_CHECK(engine_check(e));
  if (out && out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_update_result.size is %zu; initialise it with "
                   "NG_UPDATE_RESULT_INIT",
                   out->size);
  if (!e->has_log)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "engine: updates need a log (ng_engine_opts.log_path) to be durable");
  if (!u)
    return ng__err(NG_ERR_INVALID_ARG, "ng_engine_apply: the update is NULL");
  upd_waiter me = {.u = u};
  pthread_mutex_lock(&e->upd_mu);
  if (e->upd_tail)
    e->upd_tail->next = &me;
  else
    e->upd_head = &me;
  e->upd_tail = &me;
  e->upd_queued++;
  pthread_cond_broadcast(&e->upd_cv); /* a held leader counts the queue */
  /* Updates that arrive while a leader commits wait for it, then form the next group: the first
   * of them to wake leads it. */
  while (!me.done && e->leading)
    pthread_cond_wait(&e->upd_cv, &e->upd_mu);
  if (!me.done) {
    e->leading = true;
    while (e->group_hold > 0 && e->upd_queued < e->group_hold)
      pthread_cond_wait(&e->upd_cv, &e->upd_mu);
    e->group_hold = 0;
    upd_waiter *group = e->upd_head;
    e->upd_head = e->upd_tail = NULL;
    e->upd_queued = 0;
    pthread_mutex_unlock(&e->upd_mu);
    commit_group(e, group);
    pthread_mutex_lock(&e->upd_mu);
    e->log_records = (int64_t)e->log.seq;
    for (upd_waiter *w = group, *next; w; w = next) {
      next = w->next; /* a follower's waiter is gone once it sees done */
      w->done = true;
    }
    e->leading = false;
    pthread_cond_broadcast(&e->upd_cv);
  }
  pthread_mutex_unlock(&e->upd_mu);
  if (me.st != NG_OK)
    return ng__err(me.st, "%s", me.err);
  if (out)
    memcpy((char *)out + sizeof me.res.size, (char *)&me.res + sizeof me.res.size,
           NG_MIN(out->size, sizeof me.res) - sizeof me.res.size);
  return NG_OK;
}

void ng__engine_test_group_hold(ng_engine *e, int k) {
  pthread_mutex_lock(&e->upd_mu);
  e->group_hold = k;
  pthread_mutex_unlock(&e->upd_mu);
}

int ng__engine_test_updates_queued(ng_engine *e) {
  pthread_mutex_lock(&e->upd_mu);
  const int n = e->upd_queued;
  pthread_mutex_unlock(&e->upd_mu);
  return n;
}

void ng__engine_test_fail_append(ng_engine *e) {
  pthread_mutex_lock(&e->upd_mu);
  e->log.test_fail_next = true; /* read by the next leader, after it took upd_mu */
  pthread_mutex_unlock(&e->upd_mu);
}

ng_status ng_engine_update(ng_engine *e, const ng_graph_update *u, int64_t *first_new_id) {
  ng_update_result r = NG_UPDATE_RESULT_INIT;
  NG_CHECK(ng_engine_apply(e, u, &r));
  if (first_new_id)
    *first_new_id = r.first_new_id;
  return NG_OK;
}

ng_status ng_engine_log_info_get(ng_engine_log_info *out, const ng_engine *e) {
  if (!out || out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_engine_log_info_get: out is NULL or without its size; initialise it with "
                   "NG_ENGINE_LOG_INFO_INIT");
  NG_CHECK(engine_check(e));
  if (!e->has_log)
    return ng__err(NG_ERR_UNSUPPORTED, "engine: no update log (ng_engine_opts.log_path)");
  ng_engine_log_info i = NG_ENGINE_LOG_INFO_INIT;
  ng_engine *me = (ng_engine *)e;
  pthread_mutex_lock(&me->upd_mu); /* the record count moves with updates */
  i.records = e->log_records;
  pthread_mutex_unlock(&me->upd_mu);
  i.replayed = e->log_rep.replayed;
  i.cut_offset = e->log_rep.cut_offset;
  i.cut_bytes = e->log_rep.cut_bytes;
  if (e->log_rep.cut_why)
    ng__strlcpy(i.cut_what, e->log_rep.cut_why, sizeof i.cut_what);
  i.migrated = e->log_rep.migrated;
  memcpy((char *)out + sizeof i.size, (char *)&i + sizeof i.size,
         NG_MIN(out->size, sizeof i) - sizeof i.size);
  return NG_OK;
}
