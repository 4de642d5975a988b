/* The trainer: its creation (the steps in runtime/trainer_setup.c) and destruction, its accessors
 * and epochs of sampled mini-batches. Evaluation is in runtime/trainer_infer.c, checkpoints in
 * runtime/trainer_ckpt.c. */
#include "trainer_state_impl.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NG_TRAINER_MAGIC 0x6e677472u /* "ngtr" */

/* The trainer's own parallel loops use opts->threads (0: the OpenMP default) without changing
 * the process-wide setting. */
int ng__trainer_threads(const ng_train_opts *o) {
  return o->threads > 0 ? o->threads : omp_get_max_threads();
}

ng_status ng__trainer_check(ng_trainer_t t) {
  if (!t)
    return ng__err(NG_ERR_INVALID_ARG, "trainer handle is NULL");
  if (t->magic != NG_TRAINER_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "trainer handle is not a live trainer (destroyed?)");
  return NG_OK;
}

static void growbuf_free(ng_backend *be, growbuf *b) {
  be->iface->free(be, b->ptr);
  b->ptr = NULL;
  b->cap = 0;
}

static void human_bytes(char *buf, size_t cap, int64_t b) {
  snprintf(buf, cap, "%.2f GiB", (double)b / (double)((int64_t)1 << 30));
}

static ng_status trainer_create(ng_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                                const ng_train_opts *opts, bool for_link) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_create: out is NULL");
  *out = NULL;
  NG_CHECK(ng__dataset_check(ds));
  NG_CHECK(ng__model_check(model));
  ng_train_opts o;
  NG_CHECK(ng__trainer_merge_opts(&o, opts));
  NG_CHECK(ng__trainer_check_opts(&o, ds, model, for_link));
  if (o.comm) {
    NG_CHECK(ng__comm_check(o.comm));
    /* The ranks of a host split its cores (docs/distributed.md). */
    if (o.threads == 0 && o.comm->local_size > 1)
      o.threads = ng__dist_threads(o.comm);
  }
  if (o.max_host_memory < 0 || o.infer_host_bytes < -1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "max_host_memory %lld or infer_host_bytes %lld out of range (>= 0, >= -1)",
                   (long long)o.max_host_memory, (long long)o.infer_host_bytes);
  const double t_create = ng__now();
  struct ng_trainer *t = ng__calloc(1, sizeof *t, "a trainer");
  if (!t)
    return NG_ERR_NOMEM;
  t->magic = NG_TRAINER_MAGIC;
  t->ds = ds;
  t->model_copy = *model;
  t->model = &t->model_copy;
  t->opts = o;
  t->opts.device = NULL; /* not kept: borrowed from the caller */
  t->opts.temp_dir = NULL;
  t->opts.comm = NULL; /* borrowed: t->dist keeps it */
  t->features = ds->features;
  ng_status st = NG_OK;
  if (o.temp_dir && !(t->temp_dir = strdup(o.temp_dir))) {
    st = ng__err(NG_ERR_NOMEM, "out of memory copying the temporary folder's name");
    goto fail;
  }
  /* The estimate, and the refusal, before anything large is allocated (the backend only
   * answers how large the hot tier is). */
  t->mem.size = sizeof t->mem;
  if (o.max_host_memory > 0 && !(o.device && strcmp(o.device, "cuda") == 0)) {
    NG_CHECK_GOTO(st, ng__trainer_estimate(&t->mem, ds, model, &o, NULL), fail);
    if (t->mem.host_total > o.max_host_memory)
      goto too_large;
  }
  NG_CHECK_GOTO(st, ng__trainer_setup_normalized(t, &o), fail);
  /* The workers' placement reads the machine's topology, loaded meanwhile. */
  ng__pool_prefetch(&t->topo_prefetch);
  NG_CHECK_GOTO(st, ng__trainer_setup_device(t, &o), fail);
  NG_CHECK_GOTO(st, ng__trainer_warm_gemms(t), fail);
  NG_CHECK_GOTO(st, ng__trainer_setup_sampler(t, &o), fail);
  NG_CHECK_GOTO(st, ng__trainer_estimate(&t->mem, ds, model, &o, t->be), fail);
  if (o.max_host_memory > 0 && t->mem.host_total > o.max_host_memory)
    goto too_large;
  ng__trainer_drop_topology(t);
  NG_CHECK_GOTO(st, ng__trainer_setup_store(t, &o), fail);
  ng__trainer_drop_hot_rows(t);
  NG_CHECK_GOTO(st, ng__trainer_setup_runtime(t, &o), fail);
  t->opts.cpuset = NULL; /* borrowed from the caller: the runtime copied what it needs */
  if (t->be->iface->warm_wait)
    t->be->iface->warm_wait(t->be);
  ng__pool_prefetch_join(&t->topo_prefetch);
  t->startup.total_s = ng__now() - t_create;
  *out = t;
  return NG_OK;
too_large : {
  char need[32], limit[32], feat[32], stage[32];
  human_bytes(need, sizeof need, t->mem.host_total);
  human_bytes(limit, sizeof limit, o.max_host_memory);
  human_bytes(feat, sizeof feat, t->mem.features);
  human_bytes(stage, sizeof stage, t->mem.staging);
  st = ng__err(NG_ERR_NOMEM,
               "this configuration needs an estimated %s of host memory (features %s, staging "
               "%s for %d workers, docs/memory.md) but the limit is %s: use fewer workers "
               "(--workers), a smaller --batch or --ready-window, --features-memory mapped, or "
               "raise --max-host-memory",
               need, feat, stage, (int)t->mem.workers, limit);
}
fail:
  ng_trainer_destroy(t);
  return st;
}

ng_status ng_trainer_create(ng_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                            const ng_train_opts *opts) {
  return trainer_create(out, ds, model, opts, false);
}

ng_status ng__trainer_create_link(ng_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                                  const ng_train_opts *opts) {
  return trainer_create(out, ds, model, opts, true);
}

ng_status ng__trainer_parts(ng_trainer_parts *out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  *out = (ng_trainer_parts){.be = t->be,
                            .ex = &t->ex,
                            .sampler = &t->cfg,
                            .arena = t->arena,
                            .store = &t->store,
                            .fetch = &t->fetch,
                            .step = &t->step,
                            .mode = t->mode,
                            .threads = ng__trainer_threads(&t->opts)};
  return NG_OK;
}

void ng__trainer_params_changed(ng_trainer_t t) {
  if (ng__trainer_check(t) == NG_OK)
    ng__trainer_drop_logits(t);
}

void ng_trainer_destroy(ng_trainer_t t) {
  if (!t || t->magic != NG_TRAINER_MAGIC)
    return;
  t->magic = 0;
  ng__pool_prefetch_join(&t->topo_prefetch);
  if (t->be) {
    /* Before the arena the warm-up multiplies in goes (a create that failed after it began). */
    if (t->be->iface->warm_wait)
      t->be->iface->warm_wait(t->be);
    growbuf_free(t->be, &t->labels);
    ng__train_step_free(&t->step);
    growbuf_free(t->be, &t->eval_out);
    ng__pipeline_destroy(t->rt);
    ng__coop_destroy(t->coop);
    if (t->dev_sampler)
      t->be->iface->sampler_destroy(t->be, t->dev_sampler);
    ng__store_close(&t->store);
    ng__bf16_table_close(&t->bf16);
    ng__exec_destroy(&t->ex);
    ng__backend_destroy(t->be);
  }
  ng__sample_arena_destroy(t->arena);
  ng__trainer_drop_logits(t);
  if (t->features_owned)
    ng__big_free(t->features_owned,
                 (size_t)t->ds->info.nodes * (size_t)t->ds->info.feature_dim * sizeof(float));
  free(t->perm);
  free(t->tally.iter_ms);
  free(t->stage.ptr);
  free(t->temp_dir);
  free(t->stage_labels.ptr);
  free(t);
}

int64_t ng_trainer_hot_rows(ng_trainer_t t) {
  return ng__trainer_check(t) == NG_OK ? t->store.hot : -1;
}

ng_status ng_trainer_cache_info(ng_cache_info *out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_cache_info: out is NULL");
  *out = t->cache;
  return NG_OK;
}

ng_status ng_trainer_startup(ng_startup_times *out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_startup: out is NULL");
  *out = t->startup;
  out->hot_upload_s = t->store.upload_s; /* the store timed its own set-up */
  out->register_s = t->store.register_s;
  return NG_OK;
}

struct ng_pipeline *ng__trainer_pipeline(ng_trainer_t t, ng_memory_estimate *mem) {
  if (ng__trainer_check(t) != NG_OK)
    return NULL;
  if (mem)
    *mem = t->mem;
  return t->rt;
}

int ng_trainer_features_copied(ng_trainer_t t) {
  return ng__trainer_check(t) == NG_OK ? t->features_owned != NULL : -1;
}

const char *ng_trainer_sampler(ng_trainer_t t) {
  return ng__trainer_check(t) != NG_OK ? "" : t->dev_sampler ? "device" : "cpu";
}

const char *ng_trainer_placement(ng_trainer_t t) {
  return ng__trainer_check(t) == NG_OK ? ng__pipeline_placement(t->rt) : "";
}

ng_status ng_trainer_write_trace(ng_trainer_t t, const char *path, int64_t *spans,
                                 int64_t *dropped) {
  NG_CHECK(ng__trainer_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_write_trace: a path is required");
  /* Workers going on with the next epoch still record: they stop first (the next epoch then
   * starts a pool). */
  ng__pipeline_stop(t->rt);
  return ng__pipeline_write_trace(t->rt, path, spans, dropped);
}

ng_status ng_trainer_op_profile(ng_op_time *out, int cap, int *n, int64_t *iterations,
                                ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!n || (cap > 0 && !out) || cap < 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_op_profile: n is NULL, or out NULL with cap %d",
                   cap);
  /* The last timed iteration is read here: it finished, or its events are waited for. */
  NG_CHECK(ng__prof_collect(&t->prof));
  *n = NG_MIN(cap, t->prof.n_rows);
  if (*n > 0)
    memcpy(out, t->prof.rows, (size_t)*n * sizeof *out);
  if (iterations)
    *iterations = t->prof.iterations;
  return NG_OK;
}

int64_t ng_trainer_epochs_done(ng_trainer_t t) {
  return ng__trainer_check(t) == NG_OK ? t->epochs_done : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The index of the nearest-rank percentile q of n sorted values. */
static int64_t nearest_rank(int64_t n, double q) {
  int64_t r = (int64_t)ceil(q * (double)n);
  return NG_MAX((int64_t)0, NG_MIN(n, r) - 1);
}

void ng__epoch_times(ng_epoch_stats *out, double *iter_ms, int64_t n) {
  qsort(iter_ms, (size_t)n, sizeof *iter_ms, cmp_double);
  out->iter_ms_median = n ? iter_ms[(n - 1) / 2] : 0.0;
  out->iter_ms_p99 = n ? iter_ms[nearest_rank(n, 0.99)] : 0.0;
}

/* Shuffles `epoch`'s training ids into its buffer. The runtime does the same on a worker for
 * the epoch after the one it trains (ng_epoch_plan.shuffle_ids), which it publishes only once
 * the epoch before that is done with the buffer. */
static void shuffle_order(ng_trainer_t t, int64_t epoch) {
  const int64_t n_train = t->ds->info.train;
  ng__epoch_shuffle(t->perm + (epoch % 2) * n_train, t->ds->split[NG_SPLIT_TRAIN], n_train,
                    t->opts.seed, epoch);
  t->perm_epoch[epoch % 2] = epoch;
}

/* Whether `epoch`'s order is in its buffer, perm[epoch % 2]. */
static bool order_written(ng_trainer_t t, int64_t epoch) {
  return t->perm_epoch[epoch % 2] == epoch;
}

/* The order of `epoch`'s training ids, shuffled into its buffer unless it is there already. */
const int64_t *ng__trainer_epoch_order(ng_trainer_t t, int64_t epoch, int64_t n_train) {
  if (!order_written(t, epoch))
    shuffle_order(t, epoch);
  return t->perm + (epoch % 2) * n_train;
}

/* The plan of epoch `epoch` from iteration `first` over `order`, with the trainer's batch
 * (`batch`, the whole training set at most, checked against INT32_MAX by the caller). */
ng_epoch_plan ng__trainer_epoch_plan(const struct ng_trainer *t, int64_t batch, int64_t epoch,
                                     int64_t first, const int64_t *order) {
  const int64_t n_train = t->ds->info.train;
  return (ng_epoch_plan){.order = order,
                         .n_train = n_train,
                         .batch = batch,
                         .epoch = epoch,
                         .first = first,
                         .iters = (n_train + batch - 1) / batch,
                         .seed = t->opts.seed,
                         .rank = t->dist.rank,
                         .ranks = t->dist.ranks};
}

/* The trainer's batch: the option, or the whole training set (at most that). */
int64_t ng__trainer_batch(const struct ng_trainer *t) {
  const int64_t n_train = t->ds->info.train;
  return t->opts.batch ? NG_MIN(t->opts.batch, n_train) : n_train;
}

ng_status ng_trainer_epoch(ng_epoch_stats *out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!out || out->size < sizeof(ng_epoch_stats))
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_epoch: stats missing or from an older header");
  /* A dataset file truncated under the run stops it here, naming the file (docs/guarantees.md). */
  NG_CHECK(ng__dataset_verify_maps(t->ds));
  const ng_dataset_info *info = &t->ds->info;
  int64_t n_train = info->train;
  int64_t batch = ng__trainer_batch(t);
  if (batch > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "a full-batch of %lld nodes is too large; set a batch",
                   (long long)batch);
  int64_t epoch = t->epochs_done;
  ng__trainer_drop_logits(t);
  int64_t iters = (n_train + batch - 1) / batch, first = t->iter_done;
  /* Workers going on with another epoch than this one (after a load or a stopped epoch) stop
   * before an order they may read is rewritten. */
  if (ng__pipeline_ahead(t->rt) != epoch || first != 0)
    ng__pipeline_stop(t->rt);
  /* This epoch's order was left to the workers during the last one: a worker wrote it, or
   * none began and it is written here. The next one's is left to them again (the device
   * thread waited 4-5 ms for W1's 600k ids between two epochs when it shuffled them here). */
  ng__pipeline_settle(t->rt);
  const int64_t *order = ng__trainer_epoch_order(t, epoch, n_train);
  if (first >= iters)
    return ng__err(NG_ERR_STATE,
                   "epoch %lld: %lld of its %lld iterations are already done (a checkpoint of a "
                   "run with a smaller batch?)",
                   (long long)epoch, (long long)first, (long long)iters);
  ng__progress_init(&t->prog, t->opts.progress, t->opts.progress_ctx);
  double *ms = realloc(t->tally.iter_ms, (size_t)iters * sizeof *ms);
  if (!ms)
    return ng__err(NG_ERR_NOMEM, "out of memory for %lld iteration times", (long long)iters);
  ng_epoch_tally *ty = &t->tally;
  *ty = (ng_epoch_tally){.iter_ms = ms,
                         .last_done = ng__now(),
                         .done = first,
                         .iters = iters,
                         .prog = &t->prog,
                         .ranks = &t->dist};
  const ng_epoch_plan plan = ng__trainer_epoch_plan(t, batch, epoch, first, order);
  /* The next order's buffer held the last epoch's, which no worker reads any more. */
  ng_epoch_plan next =
      ng__trainer_epoch_plan(t, batch, epoch + 1, 0, t->perm + ((epoch + 1) % 2) * n_train);
  next.shuffle_ids = order_written(t, epoch + 1) ? NULL : t->ds->split[NG_SPLIT_TRAIN];
  next.order_epoch = &t->perm_epoch[(epoch + 1) % 2];
  double t0 = ng__now();
  int workers[2] = {0, 0};
  double share = 0.0;
  ng_status st = ng__pipeline_epoch(t->rt, &plan, &next, &t->step, ty,
                                    t->model->layers[0].o.dropout, workers, &share);
  /* The iterations counted stay done, whatever stopped the epoch (the progress callback, an
   * error): an epoch stopped resumes at the next one, here or from a checkpoint. */
  t->iter_done = ty->done;
  if (t->iter_done == iters) {
    t->epochs_done++;
    t->iter_done = 0;
  }
  if (st != NG_OK) {
    if (st != NG_ERR_INTERRUPTED)
      ng__err_prefix("epoch %lld", (long long)epoch);
    return st;
  }
  double secs = ng__now() - t0;
  int64_t ran = iters - first, targets = n_train - first * batch;
  double allreduce_ms = 0.0;
  NG_CHECK(ng__dist_epoch_end(&t->dist, &ty->loss_sum, &ty->correct, &ty->edges, &allreduce_ms));
  out->epoch = epoch;
  out->iterations = ran;
  out->loss = ty->loss_sum / (double)ran;
  out->train_acc = (double)ty->correct / (double)targets;
  out->seconds = secs;
  out->it_per_s = secs > 0 ? (double)ran / secs : 0.0;
  out->sampled_edges = ty->edges;
  out->fetch = ty->fetch;
  out->workers[0] = workers[0];
  out->workers[1] = workers[1];
  out->device_share = share;
  ng__epoch_times(out, ty->iter_ms, ty->n_iter_ms);
  out->ranks = t->dist.ranks;
  out->allreduce_ms = allreduce_ms;
  t->cold.size = sizeof t->cold;
  return ng__dist_coop_epoch(&t->cold, t->coop, &t->dist, &t->fetch, batch);
}

ng_status ng_trainer_cold_fetch(ng_cold_fetch_stats *out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!out || out->size < sizeof(ng_cold_fetch_stats))
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_cold_fetch: stats missing or too small");
  *out = t->cold;
  out->size = sizeof *out;
  return NG_OK;
}
