/* The serving engine (include/neargnn_serve.h): creation from a dataset and a checkpoint, the
 * lanes' set-up, and the engine's info and counters. The engine's other files: engine_queue.c
 * (admission and the lanes' threads), engine_forward.c (one batch), engine_update.c (updates).
 * docs/serving-engine.md describes the design. */
#include "engine_state_impl.h"

#include "checkpoint_impl.h"
#include "dataset_impl.h"
#include "ng_cpu.h"
#include "pipeline_impl.h"
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
    st = e->lanes[0].be->iface->copy_h2d(e->lanes[0].be, e->lanes[0].ex.params, host,
                                         (size_t)m->n_params * sizeof(float));
  if (st == NG_OK && ng__model_raw_input(m)) { /* kept: the CPU's part of layer 0 reads them */
    e->host_params = host;
    host = NULL;
  }
  free(host);
  return st;
}

/* A link checkpoint's decoder, which scores pair requests (ng_infer_request.dst_ids). */
static ng_status load_decoder(ng_engine *e, const ng_ckpt *c) {
  e->link = c->link;
  if (!c->link.present)
    return NG_OK;
  const struct ng_model *m = &e->model;
  e->dec = (ng_link_dec){.decoder = c->link.decoder,
                         .dim = m->layers[m->n_layers - 1].out_dim,
                         .hidden = c->link.hidden};
  if (c->link.decoder != NG_LINK_DECODER_MLP)
    return NG_OK;
  const int64_t d = e->dec.dim, H = e->dec.hidden;
  e->dec_mlp = ng__malloc((size_t)(d * H + 2 * H + 1) * sizeof(float), "the link decoder");
  if (!e->dec_mlp)
    return NG_ERR_NOMEM;
  e->dec.mlp = e->dec_mlp;
  return ng__ckpt_link_mlp(e->dec_mlp, c, d);
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
  if (o->serve_workers < 0 || o->serve_workers > NG_ENGINE_MAX_SERVE_WORKERS)
    return ng__err(NG_ERR_INVALID_ARG,
                   "engine: serve_workers %d: give 1 to %d main-lane workers, or 0 for the "
                   "default (2 on a GPU, 1 on the CPU)",
                   o->serve_workers, NG_ENGINE_MAX_SERVE_WORKERS);
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
  e->o.embedding_cache_prefill = NULL;
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
  pthread_cond_init(&e->clock_cv, &ca);
  pthread_condattr_destroy(&ca);
  e->clock_until = INFINITY;
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

  /* The lanes: n_main main-lane workers taking ordinary batches from one queue, then the hub
   * lane. On a GPU two workers let one batch's CPU build (the field, the host's part of the input
   * layer) overlap another's device work, each on its own backend instance (its own streams); on
   * the CPU backend the workers would share the same cores, so one is the default. */
  const char *dev = opts && opts->device ? opts->device : "cpu";
  e->n_main = o.serve_workers > 0 ? o.serve_workers : strcmp(dev, "cuda") == 0 ? 2 : 1;
  e->lanes = ng__calloc((size_t)e->n_main + 1, sizeof *e->lanes, "the engine's lanes");
  if (!e->lanes) {
    st = NG_ERR_NOMEM;
    goto fail;
  }
  e->n_lanes = e->n_main + 1;
  e->queues[Q_MAIN].lanes = e->n_main;
  e->queues[Q_HUB].lanes = 1;
  for (int k = 0; k < e->n_lanes; k++) {
    e->lanes[k].e = e;
    e->lanes[k].id = k;
    e->lanes[k].hub = k == e->n_main;
    e->lanes[k].q = &e->queues[k == e->n_main ? Q_HUB : Q_MAIN];
  }
  lane *main_ln = &e->lanes[0];
  NG_CHECK_GOTO(st, make_backend(&main_ln->be, opts ? opts->device : NULL, o.threads), fail);
  NG_CHECK_GOTO(st, ng__exec_create(&main_ln->ex, &e->model, main_ln->be, 0), fail);
  NG_CHECK_GOTO(st, load_params(e, &ck, checkpoint), fail);
  NG_CHECK_GOTO(st, load_decoder(e, &ck), fail);
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
  /* The other lanes (further main-lane workers, the hub lane): each a backend instance of its
   * own (its own queues; on CUDA its own streams and cuBLAS handle in the same context), whose
   * executor reads lane 0's parameters. Both the parameters and the hot tier were uploaded with
   * synchronous copies above, so their kernels see them whole. */
  for (int k = 1; k < e->n_lanes; k++) {
    lane *ln = &e->lanes[k];
    NG_CHECK_GOTO(st, make_backend(&ln->be, opts ? opts->device : NULL, o.threads), fail);
    ln->ex.model = &e->model;
    ln->ex.be = ln->be;
    ln->ex.params = main_ln->ex.params;
  }
  NG_CHECK_GOTO(st, ng__ecache_create(&e->ecache, m, e->snap, o.embedding_cache_bytes), fail);
  if (e->has_log) /* updates can come: the cache's out-neighbour index, built before the first */
    NG_CHECK_GOTO(st, ng__ecache_prepare_updates(e->ecache), fail);
  if (o.embedding_cache_prefill) { /* after the replay: rows it changed are left out */
    int64_t prefilled = 0;
    NG_CHECK_GOTO(st,
                  ng__ecache_prefill(e->ecache, &prefilled, o.embedding_cache_prefill, m, e->snap,
                                     ds, checkpoint, e->gcn[0]),
                  fail);
  }
  for (int k = 0; k < e->n_lanes; k++) {
    lane *ln = &e->lanes[k];
    NG_CHECK_GOTO(st, ng__srv_field_create(&ln->field), fail);
    if (e->ecache)
      NG_CHECK_GOTO(st, ng__ecache_work_create(&ln->ecache_work), fail);
  }
  for (int k = 0; k < e->n_lanes; k++) {
    lane *ln = &e->lanes[k];
    if (pthread_create(&ln->thread, NULL, ng__engine_lane_main, ln) != 0) {
      st = ng__err(NG_ERR_INTERNAL, "engine: cannot start lane %d's thread (%s)", k,
                   ln->hub ? "hub" : "main");
      goto fail;
    }
    ln->started = true;
  }
  if (pthread_create(&e->clock, NULL, ng__engine_clock_main, e) != 0) {
    st = ng__err(NG_ERR_INTERNAL, "engine: cannot start the deadline clock's thread");
    goto fail;
  }
  e->clock_started = true;
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
  for (int k = 0; k < e->n_lanes; k++)
    if (e->lanes[k].started)
      pthread_join(e->lanes[k].thread, NULL);
  /* The lanes answered every admitted request (each callback has returned); the clock, which
   * may still be calling those of expired ones, stops last. */
  pthread_mutex_lock(&e->mu);
  e->clock_stop = true;
  pthread_cond_signal(&e->clock_cv);
  pthread_mutex_unlock(&e->mu);
  if (e->clock_started)
    pthread_join(e->clock, NULL);
  e->magic = 0;
  /* Lane 0 last: the others' executors borrow its parameters, so only their arenas are their
   * own. */
  for (int k = e->n_lanes - 1; k >= 0; k--) {
    lane *ln = &e->lanes[k];
    ng_backend *be = ln->be;
    if (!be)
      continue;
    if (k == 0 && e->store_open)
      ng__store_close(&e->store);
    be->iface->free(be, ln->dev_pack[0].ptr);
    be->iface->free(be, ln->dev_pack[1].ptr);
    be->iface->free(be, ln->work.ptr);
    ng__ecache_work_destroy(ln->ecache_work, be);
    if (k == 0)
      ng__exec_destroy(&ln->ex);
    else
      be->iface->free(be, ln->ex.arena);
    ng__backend_destroy(be);
  }
  if (e->has_log)
    ng__srv_log_close(&e->log);
  ng__srv_snap_unref(e->snap);
  ng__ecache_destroy(e->ecache);
  for (int k = 0; k < e->n_lanes; k++) {
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
  pthread_cond_destroy(&e->clock_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->upd_cv);
  pthread_mutex_destroy(&e->upd_mu);
  pthread_mutex_destroy(&e->snap_mu);
  free(e->host_params);
  free(e->dec_mlp);
  free(e->lanes);
  free(e);
}

ng_srv_snap *ng__engine_snap_acquire(ng_engine *e) {
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
  out->pair_scores = e->link.present;
  out->decoder = e->link.present ? (int32_t)e->link.decoder : 0;
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
  free(r->score);
  r->score = NULL;
  r->logits = r->embedding = NULL;
  r->cls = NULL;
}

ng_status ng__engine_check(const ng_engine *e) {
  if (!e)
    return ng__err(NG_ERR_INVALID_ARG, "engine handle is NULL");
  if (e->magic != ENGINE_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "engine handle is not a live engine (destroyed?)");
  return NG_OK;
}
