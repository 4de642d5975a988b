/* The trainer's parts, built in order by ng_trainer_create (runtime/trainer.c): the options'
 * checks, the backend and the model on it, the device sampler, the feature store and the
 * pipeline. */
#include "ng_cpu.h"
#include "trainer_state_impl.h"
#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

#include <sched.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Threads of the sample feed with a device sampler: two lanes hide most of the device's round
 * trips behind each other (docs/sampling.md). */
#define FEED_LANES 2
/* The shortest row PARTIAL workers leave to the device's zero-copy reads (self_zcopy). */
#define SELF_ZCOPY_MIN_ROW_BYTES 2048

/* Whether the dataset's features are its read-only mapping of features.npy (a folder), not the
 * caller's memory (ng_dataset_from_arrays): only a file mapping may drop its pages. */
static bool features_mapped(const struct ng_dataset *ds) {
  return ds->arrays[NG_ARR_FEATURES].map != NULL;
}

/* Drops this process's resident pages of a read-only file mapping (whole pages inside
 * [p, p + bytes)) once they have been copied: the page cache keeps them, the RSS does not count
 * them twice (the mapping and the trainer's own table). Never on other memory: there
 * MADV_DONTNEED would discard the contents (a caller's array would read as zeros). */
static void drop_pages(const void *p, size_t bytes, bool file_mapping) {
  if (file_mapping)
    ng__drop_pages(p, bytes);
}

/* Row-normalised copy of the features: each row divided by its sum (as Kipf & Welling). */
static ng_status normalize_rows(float **out, const float *x, int64_t n, int64_t d, int threads,
                                bool file_mapping) {
  size_t bytes;
  if (!ng__mul_ok((size_t)n * (size_t)d, sizeof(float), &bytes))
    return ng__err(NG_ERR_NOMEM, "features too large to normalise in memory");
  float *y = ng__big_alloc(bytes, "row-normalised features");
  if (!y)
    return NG_ERR_NOMEM;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < n; r++) {
    const float *src = x + r * d;
    double sum = 0.0;
    for (int64_t c = 0; c < d; c++)
      sum += src[c];
    float inv = sum != 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int64_t c = 0; c < d; c++)
      y[r * d + c] = src[c] * inv;
  }
  drop_pages(x, bytes, file_mapping);
  *out = y;
  return NG_OK;
}

/* A copy of the feature table in memory backed by huge pages (ng__big_alloc), written by
 * `threads` threads so that the pages fault in where they will be read. */
static ng_status copy_features(float **out, const float *x, size_t bytes, int threads,
                               bool file_mapping) {
  float *y = ng__big_alloc(bytes, "the copy of the feature table (features_memory copy)");
  if (!y)
    return NG_ERR_NOMEM;
  const size_t chunk = (size_t)64 << 20;
  const int64_t chunks = (int64_t)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t k = 0; k < chunks; k++) {
    const size_t at = (size_t)k * chunk;
    memcpy((char *)y + at, (const char *)x + at, NG_MIN(chunk, bytes - at));
    drop_pages((const char *)x + at, NG_MIN(chunk, bytes - at), file_mapping);
  }
  *out = y;
  return NG_OK;
}

/* NG_NORMALIZE_ROW: the table the trainer reads is a row-normalised copy (t->features_owned). */
ng_status ng__trainer_setup_normalized(struct ng_trainer *t, const ng_train_opts *opts) {
  const struct ng_dataset *ds = t->ds;
  if (opts->normalize != NG_NORMALIZE_ROW)
    return NG_OK;
  NG_CHECK(normalize_rows(&t->features_owned, ds->features, ds->info.nodes, ds->info.feature_dim,
                          ng__trainer_threads(opts), features_mapped(ds)));
  t->features = t->features_owned;
  return NG_OK;
}

/* Worker threads: 0 = the cores this process may use (or the cpuset's) minus the device
 * thread's, at least one. */
ng_status ng__trainer_resolve_workers(int *out, int workers, const char *cpuset) {
  if (workers != 0) {
    *out = workers;
    return NG_OK;
  }
  int cores = 0;
  if (cpuset && *cpuset) {
    int *ids = NULL;
    NG_CHECK(ng__cpuset_parse(&ids, &cores, cpuset));
    free(ids);
  } else {
    cpu_set_t set;
    cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  *out = NG_MAX(1, cores - 1);
  return NG_OK;
}

ng_status ng__trainer_make_backend(ng_backend **out, const ng_train_opts *o) {
  const char *dev = o->device ? o->device : "cpu";
  if (strcmp(dev, "cpu") == 0)
    return ng__backend_cpu_create(out, o->threads);
  if (strcmp(dev, "cuda") == 0) {
#ifdef NG_HAVE_CUDA
    /* Each rank of a host drives the GPU of its local rank (docs/distributed.md); a rank that
     * sees one GPU only was given its own by its launcher (CUDA_VISIBLE_DEVICES). */
    int device = 0, count = 0;
    char desc[8];
    /* No GPU, or no driver: said so, rather than as the runtime's first error code
     * (cudaErrorInsufficientDriver, cudaErrorNoDevice). */
    NG_CHECK(ng__cuda_devices(&count, desc, sizeof desc));
    if (count == 0)
      return ng__err(NG_ERR_UNSUPPORTED, "device 'cuda': no CUDA device (no GPU, or no NVIDIA "
                                         "driver loaded); use --device cpu");
    const int local = o->comm ? ng_comm_local_size(o->comm) : 1;
    if (local > 1) {
      if (count > 1 && count < local)
        return ng__err(NG_ERR_INVALID_ARG,
                       "%d ranks on this host but %d GPUs: one rank per GPU (fewer --ranks, or "
                       "fewer ranks per host under mpirun)",
                       local, count);
      device = count > 1 ? ng_comm_local_rank(o->comm) : 0;
    }
    return ng__backend_cuda_create(out, device);
#else
    return ng__err(NG_ERR_UNSUPPORTED,
                   "device 'cuda': this build of neargnn has no CUDA backend; build it where the "
                   "CUDA toolkit is installed (cmake --preset default, or -DNG_CUDA=ON)");
#endif
  }
  return ng__err(NG_ERR_INVALID_ARG, "unknown device '%s' (cpu or cuda)", dev);
}

/* Checks the model against the dataset and the options' ranges, before anything is allocated. */
ng_status ng__trainer_check_opts(const ng_train_opts *opts, ng_dataset_t ds, ng_model_t model,
                                 bool for_link) {
  const ng_train_opts o = *opts;
  const ng_dataset_info *info = &ds->info;
  if (model->n_layers == 0)
    return ng__err(NG_ERR_INVALID_ARG, "the model has no layers");
  /* A link trainer's last layer is the node embedding, whatever the class count. */
  if (for_link && model->in_dim != info->feature_dim)
    return ng__err(NG_ERR_INVALID_ARG, "the model expects %lld input columns, the dataset has %lld",
                   (long long)model->in_dim, (long long)info->feature_dim);
  if (for_link)
    goto options;
  if (info->feature_dim == 0 || info->classes == 0)
    return ng__err(NG_ERR_INVALID_ARG, "dataset '%s' has no %s: training needs features and labels",
                   info->name, info->feature_dim == 0 ? "features" : "labels");
  if (model->in_dim != info->feature_dim)
    return ng__err(NG_ERR_INVALID_ARG, "the model expects %lld input columns, the dataset has %lld",
                   (long long)model->in_dim, (long long)info->feature_dim);
  if (model->layers[model->n_layers - 1].out_dim != info->classes)
    return ng__err(NG_ERR_INVALID_ARG,
                   "the last layer has %lld outputs but the dataset has %d classes",
                   (long long)model->layers[model->n_layers - 1].out_dim, (int)info->classes);
  if (info->train == 0)
    return ng__err(NG_ERR_INVALID_ARG, "dataset '%s' has no training split", info->name);
options:
  if (o.batch < 0 || !(o.lr > 0.0) || o.eval_chunk < 0 || o.eval_chunk > INT32_MAX / 2 ||
      o.threads < 0 || (unsigned)o.optimizer > NG_OPTIMIZER_SGD ||
      (unsigned)o.normalize > NG_NORMALIZE_ROW)
    return ng__err(NG_ERR_INVALID_ARG,
                   "training options out of range (batch >= 0, lr > 0, eval_chunk >= 0, threads "
                   ">= 0, known optimizer and normalisation)");
  if (o.batch > INT32_MAX / 2)
    return ng__err(NG_ERR_INVALID_ARG, "batch %lld too large", (long long)o.batch);
  if (info->nodes > INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "dataset '%s' has %lld nodes; training addresses feature rows with 32-bit ids "
                   "(up to 2^31 - 1 nodes)",
                   info->name, (long long)info->nodes);
  if ((unsigned)o.mode > NG_MODE_HYBRID)
    return ng__err(NG_ERR_INVALID_ARG, "unknown mode %d", (int)o.mode);
  if (o.transfer != NG_FETCH_BATCH && o.transfer != NG_FETCH_ZCOPY && o.transfer != NG_FETCH_AUTO)
    return ng__err(NG_ERR_INVALID_ARG,
                   "the TRANSFER group's strategy must be batch, zcopy or auto (got %s)",
                   ng_fetch_name(o.transfer));
  if ((unsigned)o.features_memory > NG_FEATURES_COPY)
    return ng__err(NG_ERR_INVALID_ARG, "unknown features_memory %d", (int)o.features_memory);
  if (o.workers < -1 || !(o.period_ms > 0.0) || !(o.threshold >= 0.0) || !(o.telemetry_s > 0.0) ||
      o.partial_workers < -1 || o.lookahead < 1 || o.lookahead > NG_LOOKAHEAD_MAX ||
      o.trace_spans < 0 || o.ready_window < 0 || o.ready_window > NG_READY_WINDOW_MAX ||
      o.op_profile_every < 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "runtime options out of range (workers >= -1, period_ms > 0, threshold >= 0, "
                   "telemetry_s > 0, partial_workers >= -1, lookahead in [1, %d], "
                   "trace_spans >= 0, ready_window in [0, %d], op_profile_every >= 0)",
                   NG_LOOKAHEAD_MAX, NG_READY_WINDOW_MAX);
  if ((unsigned)o.sampler > NG_SAMPLER_DEVICE)
    return ng__err(NG_ERR_INVALID_ARG, "unknown sampler %d (auto, cpu or device)", (int)o.sampler);
  if (!(o.sampler_memory_share > 0.0 && o.sampler_memory_share <= 1.0))
    return ng__err(NG_ERR_INVALID_ARG, "sampler_memory_share %g is not in (0, 1]",
                   o.sampler_memory_share);
  if ((unsigned)o.precision > NG_PRECISION_BF16)
    return ng__err(NG_ERR_INVALID_ARG, "unknown precision %d (fp32, tf32 or bf16)",
                   (int)o.precision);
  return NG_OK;
}

/* The device side: the backend in its precision, the model on it, the op profile and the
 * training step handed down to the pipeline. */
ng_status ng__trainer_setup_device(struct ng_trainer *t, const ng_train_opts *opts) {
  const ng_train_opts o = *opts;
  const ng_dataset_info *info = &t->ds->info;
  NG_CHECK(ng__trainer_make_backend(&t->be, &o));
  if (o.precision == NG_PRECISION_TF32) { /* bf16 is feature storage: fp32 products */
    if (!t->be->iface->set_precision)
      return ng__err(NG_ERR_UNSUPPORTED, "precision tf32: the %s backend computes in fp32 only",
                     t->be->iface->name);
    NG_CHECK(t->be->iface->set_precision(t->be, o.precision));
  }
  NG_CHECK(ng__exec_create(&t->ex, t->model, t->be, o.seed));
  ng__prof_init(&t->prof, o.op_profile_every > 0 ? t->be : NULL);
  t->ex.prof = &t->prof;
  t->step = (ng_train_step){
      .ex = &t->ex,
      .store = &t->store,
      .classes = info->classes,
      .hp = {.kind = o.optimizer == NG_OPTIMIZER_SGD ? NG_OPT_SGD : NG_OPT_ADAM,
             .lr = (float)o.lr,
             .momentum = (float)o.momentum,
             .beta1 = 0.9f,
             .beta2 = 0.999f,
             .eps = 1e-8f},
      .stepped_iter = -1,
      .prof = &t->prof,
      .prof_every = o.op_profile_every,
      .prof_iter = -1,
  };
  const int64_t n_train = info->train, batch = o.batch ? NG_MIN(o.batch, n_train) : n_train;
  NG_CHECK(ng__dist_setup(&t->dist, o.comm, t->be, n_train, batch, t->model->n_params));
  if (t->dist.ranks > 1)
    t->step.reduce = &t->dist;
  return NG_OK;
}

/* Starts warming the device's GEMMs up (backend op warm_start) while the rest is set up: their
 * first calls cost about 0.2 s on an H100, which fell in the first iteration. The shapes are a
 * step's, from the mini-batch sizes the sampling gives at most (as ng__trainer_estimate counts
 * them), and the scratch is the model's arena, reserved for them now: at most kWarmArena and a
 * sixteenth of the free device memory, shapes shrunk to fit (the forward pass grows the arena
 * to its activations and gradients anyway, usually more on W4-like models; an upper-bound shape
 * may reserve more than a step then uses). Joined at the end of ng_trainer_create. */
ng_status ng__trainer_warm_gemms(struct ng_trainer *t) {
  enum { kWarmArena = 512 << 20 };
  ng_backend *be = t->be;
  const struct ng_model *m = t->model;
  if (!be->iface->warm_start)
    return NG_OK;
  const ng_dataset_info *info = &t->ds->info;
  const double nodes = (double)info->nodes;
  const double avg_deg = info->nodes ? (double)info->edges / nodes : 0.0;
  const int64_t batch = t->opts.batch > 0 ? NG_MIN(t->opts.batch, info->train) : info->train;
  double r = (double)NG_MAX(batch / NG_MAX(t->dist.ranks, 1), (int64_t)1);
  int64_t rows[NG_MAX_LAYERS];
  for (int l = m->n_layers - 1; l >= 0; l--) {
    const double f = m->layers[l].o.fanout < 0 ? avg_deg : (double)m->layers[l].o.fanout;
    const double src = NG_MIN(nodes, r * (1.0 + f));
    /* GAT's projection and SAGE-pool's MLP multiply every source row. */
    const bool sources = m->kind == NG_MODEL_GAT || m->kind == NG_MODEL_SAGE_POOL;
    rows[l] = (int64_t)(sources ? src : r);
    r = src;
  }
  ng_gemm_shape shapes[NG_WARM_SHAPES];
  const int n = ng__model_gemm_shapes(m, rows, shapes, NG_WARM_SHAPES);
  if (n == 0)
    return NG_OK;
  double most = 0.0;
  for (int i = 0; i < n; i++) {
    const double a = (double)shapes[i].m, b = (double)shapes[i].n, c = (double)shapes[i].k;
    most = fmax(most, (a * c + c * b + a * b) * sizeof(float));
  }
  /* Never more than a sixteenth of the free memory: the shapes are upper bounds (no
   * de-duplication), and the hot tier and the sampler are sized from what is left. A device too
   * full even for that is reported now, as the first iteration would. */
  size_t free_bytes = 0;
  NG_CHECK(be->iface->mem_info(be, &free_bytes, NULL));
  void *arena = NULL;
  const size_t bytes = (size_t)fmin(most, fmin((double)kWarmArena, (double)free_bytes / 16.0));
  NG_CHECK(ng__exec_reserve(&t->ex, bytes, &arena));
  be->iface->warm_start(be, shapes, n, arena, bytes);
  return NG_OK;
}

/* The device sampler, when the options ask for one or AUTO finds that the topology fits: before
 * the store, whose hot tier takes what device memory is left. */
ng_status ng__trainer_setup_sampler(struct ng_trainer *t, const ng_train_opts *opts) {
  const ng_csr *g = &t->ds->csr;
  ng_backend *be = t->be;
  if (opts->sampler == NG_SAMPLER_CPU)
    return NG_OK;
  if (!be->iface->sampler_create) {
    if (opts->sampler == NG_SAMPLER_DEVICE)
      return ng__err(NG_ERR_UNSUPPORTED, "sampler device: the %s backend cannot sample",
                     be->iface->name);
    return NG_OK;
  }
  if (opts->sampler == NG_SAMPLER_AUTO) {
    if (be->iface->host_memory)
      return NG_OK; /* the workers are the CPU already */
    size_t free_b = 0, total_b = 0;
    NG_CHECK(be->iface->mem_info(be, &free_b, &total_b));
    const double topo = (double)(g->nodes + 1) * 8.0 + (double)g->nnz * (g->idx32 ? 4.0 : 8.0);
    if (topo > opts->sampler_memory_share * (double)free_b)
      return NG_OK;
  }
  const double t0 = ng__now();
  NG_CHECK(be->iface->sampler_create(be, g, FEED_LANES, &t->dev_sampler));
  t->startup.sampler_s = ng__now() - t0;
  return NG_OK;
}

/* The topology's pages, once the device sampler holds its copy: training samples on the device
 * and never reads the host's CSR again, so that this process's resident pages of its mapping
 * (the dataset's check at open read every one) leave the RSS (docs/memory.md): 7 GB of a
 * 100 M-node graph. Evaluation and inference read it again from the page cache. */
void ng__trainer_drop_topology(const struct ng_trainer *t) {
  const struct ng_dataset *ds = t->ds;
  if (!t->dev_sampler)
    return;
  for (int k = NG_ARR_INDPTR; k <= NG_ARR_INDICES; k++)
    drop_pages(ds->arrays[k].data, ds->arrays[k].hdr.nbytes, ds->arrays[k].map != NULL);
}

/* The hot rows' pages of the dataset's feature mapping, once the hot tier holds them in device
 * memory: training reads a hot row from the device only (the workers' fetch and the device's
 * gathers take cold rows from the host), so its pages, which the upload read, leave the RSS:
 * 2.6 GB of a 100 M-node, 128-d graph with 5% hot. The page shared with the first cold row,
 * which registration pins, stays. */
void ng__trainer_drop_hot_rows(const struct ng_trainer *t) {
  const struct ng_dataset *ds = t->ds;
  if (t->be->iface->host_memory || t->store.hot <= 0 || t->features != ds->features ||
      t->opts.precision == NG_PRECISION_BF16)
    return;
  drop_pages(ds->features, (size_t)t->store.hot * (size_t)ds->info.feature_dim * sizeof(float),
             features_mapped(ds));
}

/* The table the host reads in training (for setup_store, the hot tier `hot` rows): the dataset's
 * mapping, its bf16 conversion, or a copy in huge pages. */
static ng_status setup_table(struct ng_trainer *t, const ng_train_opts *opts, int64_t hot) {
  const ng_train_opts o = *opts;
  const ng_dataset_t ds = t->ds;
  const ng_dataset_info *info = &ds->info;
  const bool bf16 = o.precision == NG_PRECISION_BF16;
  /* The table the host reads: the dataset's mapping, or a copy in huge pages. */
  const size_t table_bytes =
      (size_t)info->nodes * (size_t)info->feature_dim * sizeof(float); /* checked by the dataset */
  /* AUTO: only when the host reads rows during training (cold rows, or the CPU backend's). */
  const bool host_reads = hot < info->nodes || t->be->iface->host_memory;
  /* AUTO reads the mapping in place: a copy would hold the table twice for a while and once
   * more in anonymous memory, against the bound of docs/memory.md (issue 20). COPY is the
   * user's choice (faster random reads in huge pages). */
  if (bf16) {
    /* The bf16 table replaces the fp32 one on every path; COPY's huge-page copy is then the bf16
     * table's own (in anonymous memory). */
    const double t0 = ng__now();
    ng_progress prog;
    ng__progress_init(&prog, o.progress, o.progress_ctx);
    NG_CHECK(ng__bf16_table_open(&t->bf16, ds, t->features,
                                 o.features_memory == NG_FEATURES_COPY && host_reads,
                                 ng__trainer_threads(&o), &prog));
    t->startup.features_copy_s = ng__now() - t0;
  } else if (!t->features_owned && o.features_memory == NG_FEATURES_COPY && host_reads) {
    const double t0 = ng__now();
    NG_CHECK(copy_features(&t->features_owned, ds->features, table_bytes, ng__trainer_threads(&o),
                           features_mapped(ds)));
    t->startup.features_copy_s = ng__now() - t0;
    t->features = t->features_owned;
  }
  return NG_OK;
}

/* The feature store: the hot tier's size, the table the host reads (the mapping, or a copy in
 * huge pages), the store itself and the workers' fetch configuration. */
ng_status ng__trainer_setup_store(struct ng_trainer *t, const ng_train_opts *opts) {
  const ng_train_opts o = *opts;
  const ng_dataset_t ds = t->ds;
  const ng_dataset_info *info = &ds->info;
  const struct ng_model *model = t->model;
  t->mode = ng__mode_resolve(o.mode, t->be);
  if (t->mode == NG_MODE_CPU && !t->be->iface->host_memory) {
    return ng__err(NG_ERR_INVALID_ARG, "mode cpu trains without a GPU: use device cpu with it");
  }
  const ng_fetch transfer = ng__transfer_resolve(o.transfer, info->feature_dim);
  if (ng__model_raw_input(model)) {
    /* Attention weighs each neighbour row with the layer's weights, which only the device
     * holds: the CPU cannot reduce cold neighbours ahead of the layer, so they travel as raw
     * rows (docs/aggregators.md). */
    if (t->mode == NG_MODE_PARTIAL)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "mode partial: a %s model's cold neighbours cannot be partially aggregated "
                     "on the CPU (%s needs the layer's weights, which only the device holds); use "
                     "--mode baseline or zerocopy, or hybrid/auto, which send raw rows for it",
                     model->kind == NG_MODEL_GAT ? "GAT" : "SAGE-pool",
                     model->kind == NG_MODEL_GAT ? "the attention" : "the pooling layer");
    if (t->mode == NG_MODE_HYBRID || t->mode == NG_MODE_HYBRID_STATIC)
      t->mode = transfer == NG_FETCH_ZCOPY ? NG_MODE_ZEROCOPY : NG_MODE_BASELINE;
  }
  const bool bf16 = o.precision == NG_PRECISION_BF16;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  const ng_aggr *in_ag = ng__model_input_aggr(model);
  if (bf16 && in_ag->user)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "precision bf16: the input layer's aggregator '%s' is user-defined, and user "
                   "aggregators read fp32 features only; use --precision fp32",
                   in_ag->user->name ? in_ag->user->name : "custom");
  int64_t hot = info->nodes; /* mode cpu: the CPU backend reads every row where it is */
  if (t->mode != NG_MODE_CPU)
    NG_CHECK(ng__store_hot_rows_elem(&hot, t->be, info->nodes, info->feature_dim, elem,
                                     o.cache_bytes, o.cache_ratio));
  NG_CHECK(setup_table(t, opts, hot));
  const bool zcopy = t->mode == NG_MODE_ZEROCOPY ||
                     ((t->mode == NG_MODE_HYBRID || t->mode == NG_MODE_HYBRID_STATIC) &&
                      transfer == NG_FETCH_ZCOPY);
  /* Replicated (this GPU's copy of rows [0, hot)) or partitioned over the ranks' GPUs, by the
   * placement's rule (runtime/cache_place.c); collective over the ranks. AUTO may time copies
   * on the ops stream: the GEMM warm-up must not queue in front of them. */
  if (t->dist.ranks > 1 && o.cache_placement == NG_CACHE_AUTO && t->be->iface->warm_wait)
    t->be->iface->warm_wait(t->be);
  NG_CHECK(ng__cache_open(
      &t->store, &t->cache, t->dist.ranks > 1 ? t->dist.comm : NULL, t->be, &ds->csr,
      bf16 ? (const void *)t->bf16.rows : (const void *)t->features, elem, info->nodes,
      info->feature_dim, hot, zcopy ? NG_FETCH_ZCOPY : NG_FETCH_BATCH,
      bf16 ? t->bf16.owned == NULL : t->features_owned == NULL, o.cache_placement, o.cache_bench));
  hot = t->store.hot; /* partitioned: the hot set of all the ranks' GPUs */
  t->store.prof = &t->prof;
  if (t->store.parts > 0) {
    ng_store *v = &t->store_eval;
    memset(v, 0, sizeof *v);
    v->be = t->be;
    v->nodes = info->nodes;
    v->dim = info->feature_dim;
    v->mode = NG_FETCH_BATCH;
    v->bf16 = bf16;
    v->host = bf16 ? NULL : t->features;
    v->host16 = bf16 ? t->bf16.rows : NULL;
  }
  t->fetch = (ng_fetch_cfg){
      .mode = NG_FETCH_BATCH, /* per worker, by its group */
      .hot = hot,
      .features = t->features,
      .features_bf16 = bf16 ? t->bf16.rows : NULL,
      .nodes = info->nodes,
      .dim = info->feature_dim,
      .ag = *ng__model_input_aggr(model),
      .threads = ng__trainer_threads(&o),
      .kernels = ng__cpu_kernels(ng__cpu_isa_best()),
      .labels = ds->labels,
      .hot_gather = t->store.parts > 0,
      .stream_rows = !t->be->iface->host_memory,
      /* PARTIAL workers leave the cold self rows to the device when it reads the table by
       * zero-copy anyway and rows are long enough for zero-copy to run at the link's rate (2 KB,
       * ../shared/device/limits.md): each self row then crosses host DRAM once instead of
       * three times (read, written into the package, read by the DMA engine). */
      .self_zcopy = ng__store_zcopy(&t->store) &&
                    info->feature_dim * (int64_t)elem >= SELF_ZCOPY_MIN_ROW_BYTES,
  };
  return NG_OK;
}

/* Sizes the workers' first staging slots from the first epoch's first mini-batch before it
 * begins (ng__pipeline_presize): page-locked one growth at a time, they cost the first epoch
 * 1.5-3.8 s of worker time on W4 (43-48 growths of 65-110 MB). Each slot stays within what
 * the memory estimate counts for it, (1 + 1/NG_SLOT_GROWTH_DEN) x package_bytes. Not without
 * workers (workers -1): inference and prediction make such trainers and never train (a slot of
 * every input row would be pinned for nothing), and an inline epoch grows its few slots in
 * one thread as before. */
static ng_status presize_staging(struct ng_trainer *t) {
  const int64_t n_train = t->ds->info.train;
  if (n_train <= 0 || t->opts.workers < 0)
    return NG_OK;
  const int64_t batch = ng__trainer_batch(t);
  if (batch > INT32_MAX)
    return NG_OK; /* the epoch refuses it */
  const ng_epoch_plan plan =
      ng__trainer_epoch_plan(t, batch, 0, 0, ng__trainer_epoch_order(t, 0, n_train));
  const size_t cap = ng__slot_size((size_t)t->mem.package_bytes);
  const double t0 = ng__now();
  size_t slot = 0;
  NG_CHECK(ng__pipeline_presize(t->rt, &plan, t->model->layers[0].o.dropout, cap, &slot));
  t->startup.staging_s = ng__now() - t0;
  t->startup.staging_slot_bytes = (int64_t)slot;
  return NG_OK;
}

/* The sampler's configuration, the epoch orders and the pipeline (workers, ready ring,
 * controller). */
ng_status ng__trainer_setup_runtime(struct ng_trainer *t, const ng_train_opts *opts) {
  const ng_train_opts o = *opts;
  const ng_dataset_t ds = t->ds;
  const ng_dataset_info *info = &ds->info;
  const struct ng_model *model = t->model;
  const ng_fetch transfer = ng__transfer_resolve(o.transfer, info->feature_dim);
  NG_CHECK(ng__sample_arena_create(&t->arena));
  t->perm = ng__malloc(2 * (size_t)info->train * sizeof *t->perm, "the epoch orders");
  t->perm_epoch[0] = t->perm_epoch[1] = -1;
  if (!t->perm)
    return NG_ERR_NOMEM;
  t->cfg.graph = &ds->csr;
  t->cfg.n_layers = ng__model_block(model, model->n_layers);
  if (ng__model_raw_input(model)) {
    /* Block 0 is the identity block of the first layer's sources (ng__model_raw_input): fanout
     * 0, so that the feature store delivers their raw rows. Every attention layer's block needs
     * its transpose (attn_bwd sums per source), the first one's too (its weights' gradient). */
    t->cfg.fanout[0] = 0;
    t->cfg.gcn_weights[0] = false;
    t->cfg.transpose[0] = false;
  }
  for (int l = 0; l < model->n_layers; l++) {
    const ng_layer *L = &model->layers[l];
    const int k = ng__model_block(model, l);
    t->cfg.fanout[k] = L->o.fanout;
    t->cfg.gcn_weights[k] = L->ag.weighted || L->ag.self_loop;
    /* The backward stops at the input layer's weights (the features need no gradient), so
     * block 0's transpose would never be read: on W1 it was a quarter of the sampling time. */
    t->cfg.transpose[k] = k > 0;
  }
  const char *cpuset = o.cpuset;
  if (t->dist.ranks > 1 && !(cpuset && *cpuset) && t->dist.comm->local_size > 1) {
    NG_CHECK(ng__dist_cpuset(t->dist_cpuset, sizeof t->dist_cpuset, t->dist.comm, t->be));
    cpuset = t->dist_cpuset;
  }
  ng_pipeline_opts ro = {
      .mode = t->mode,
      .cpuset = cpuset,
      .transfer = transfer,
      .partial_workers = o.partial_workers,
      .period_ms = o.period_ms,
      .threshold = o.threshold,
      .telemetry = o.telemetry,
      .telemetry_ctx = o.telemetry_ctx,
      .telemetry_s = o.telemetry_s,
      .omp_threads = ng__trainer_threads(&o),
      .lookahead = o.lookahead,
      .device_share = o.device_share,
      .trace_spans = o.trace_spans,
      .ready_window = o.ready_window,
      .dev_sampler = t->dev_sampler,
      .feed_lanes = FEED_LANES,
  };
  NG_CHECK(ng__trainer_resolve_workers(&ro.workers, o.workers, cpuset));
  NG_CHECK(ng__dist_coop_create(&t->coop, &t->dist, o.cold_fetch, t->mode, &t->fetch,
                                t->model->layers[0].o.dropout, &ro.workers, o.workers));
  ro.coop = t->coop;
  /* The sample feed's thread waits on the device most of the time but wants a core of its own
   * when it is awake: by default it takes one from the workers. */
  if (t->dev_sampler && o.workers == 0 && ro.workers > 1)
    ro.workers--;
  NG_CHECK(ng__pipeline_create(&t->rt, t->be, &t->store, &t->cfg, &t->fetch, &ro));
  return presize_staging(t);
}

/* The options a caller passed, over the defaults (fields of a newer library keep theirs). */
ng_status ng__trainer_merge_opts(ng_train_opts *o, const ng_train_opts *opts) {
  *o = (ng_train_opts)NG_TRAIN_OPTS_INIT;
  if (!opts)
    return NG_OK;
  if (opts->size < sizeof opts->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_train_opts.size is %zu; initialise the options with NG_TRAIN_OPTS_INIT",
                   opts->size);
  /* A caller built against an older, smaller struct passes fewer fields (the others keep
   * their defaults); newer fields that this library does not know are ignored. */
  memcpy(o, opts, NG_MIN(opts->size, sizeof *o));
  o->size = sizeof *o;
  return NG_OK;
}
