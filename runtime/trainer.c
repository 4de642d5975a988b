/* The trainer: epochs of sampled mini-batches, full-neighbour evaluation and checkpoints. */
#include "checkpoint_impl.h"
#include "dataset_impl.h"
#include "features_bf16_impl.h"
#include "model_impl.h"
#include "ng_cpu.h"
#include "safetensors_impl.h"
#include "pipeline_impl.h"
#include "pool_impl.h"
#include "trainer_impl.h"
#include "infer_impl.h"
#include "trainer_dist_impl.h"
#include "cache_place_impl.h"
#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sched.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NG_TRAINER_MAGIC 0x6e677472u /* "ngtr" */
/* Threads of the sample feed with a device sampler: two lanes hide most of the device's round
 * trips behind each other (docs/sampling.md). */
#define FEED_LANES 2
/* The shortest row PARTIAL workers leave to the device's zero-copy reads (self_zcopy). */
#define SELF_ZCOPY_MIN_ROW_BYTES 2048

/* A backend buffer that grows to the largest request and is reused (no steady-state allocs). */
typedef struct {
  void *ptr;
  size_t cap;
} growbuf;

struct ng_trainer {
  uint32_t magic;
  struct ng_dataset *ds;
  const struct ng_model *model; /* &model_copy */
  struct ng_model model_copy;   /* layers may be added to the caller's model afterwards */
  ng_train_opts opts;
  ng_backend *be;
  ng_pool_prefetch topo_prefetch; /* the machine's topology, loaded during ng_trainer_create */
  ng_model_exec ex;
  ng_sampler_cfg cfg;
  ng_sample_arena *arena;
  const float *features; /* the dataset's mapping, or features_owned (normalised or copied) */
  float *features_owned;
  ng_bf16_table bf16; /* NG_PRECISION_BF16: the table every path reads (bf16.rows) */
  /* [2][train]: the orders of two consecutive epochs, epoch e's in perm[e % 2] (perm_epoch[]
   * says which epoch each holds, -1: none), so that the runtime's workers can go on with the
   * next epoch's while the caller is between epochs. */
  int64_t *perm;
  int64_t perm_epoch[2];
  int64_t epochs_done;
  /* The device side of an iteration (the model, the store, the optimizer and its step count),
   * which the runtime runs. */
  ng_train_step step;
  /* Iterations of epoch `epochs_done` already trained: an epoch stopped by the progress
   * callback (Ctrl-C) or an error resumes at the next iteration, here or from a checkpoint. */
  int64_t iter_done;
  /* From epoch base_epochs on, which began after base_step optimizer steps, every epoch has
   * had ceil(train / batch) iterations: the checkpoint's step count is checked against it. A
   * load with another batch (allowed between epochs) starts a new base. */
  int64_t base_epochs, base_step;
  /* [nodes, classes] of full-neighbour inference with the current parameters, or NULL:
   * evaluating several splits infers once. */
  float *logits;
  ng_store store; /* the hot tier and the device side of the input layer */
  /* A partitioned hot tier (ng_train_opts.cache_placement) is read through the package's list
   * of hot rows, which inference does not build: it reads every row from host memory through
   * this store without a hot tier (the same table, hot 0, nothing to close). */
  ng_store store_eval;
  ng_cache_info cache;         /* the hot tier's placement and why */
  ng_fetch_cfg fetch;          /* the host side of the input layer */
  ng_pipeline *rt;             /* workers, ready ring, controller */
  ng_dev_sampler *dev_sampler; /* the device sampler (ng_train_opts.sampler), or NULL */
  ng_mode mode;                /* resolved */
  ng_prof prof;                /* the op profile (ng_train_opts.op_profile_every) */
  ng_startup_times startup;
  /* The epoch in progress, which the runtime counts each finished iteration into. */
  ng_epoch_tally tally;
  ng_progress prog;
  growbuf labels, eval_out;    /* backend memory */
  growbuf stage, stage_labels; /* host staging for backends with their own memory */
  char *temp_dir;              /* inference's temporary files (ng_train_opts.temp_dir, copied) */
  /* [val + test, classes]: the logits of the validation then the test split, or NULL. One
   * inference over both receptive fields serves both evaluations (they overlap mostly). */
  float *eval_logits;
  ng_memory_estimate mem;   /* the estimate the trainer was created under */
  ng_grad_reduce dist;      /* the ranks of a data-parallel run (ng_train_opts.comm) */
  ng_coop *coop;            /* cold-row counter and cooperative fetch (runtime/trainer_dist.c) */
  ng_cold_fetch_stats cold; /* the last epoch's cold-row figures */
  char dist_cpuset[1024];   /* this rank's share of its host's cores, or "" */
};

static void drop_logits(ng_trainer_t t);

/* The trainer's own parallel loops use opts->threads (0: the OpenMP default) without changing
 * the process-wide setting. */
static int omp_threads(const ng_train_opts *o) {
  return o->threads > 0 ? o->threads : omp_get_max_threads();
}

static ng_status trainer_check(ng_trainer_t t) {
  if (!t)
    return ng__err(NG_ERR_INVALID_ARG, "trainer handle is NULL");
  if (t->magic != NG_TRAINER_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "trainer handle is not a live trainer (destroyed?)");
  return NG_OK;
}

static ng_status grow(ng_backend *be, growbuf *b, size_t bytes) {
  return ng__bk_reserve(be, &b->ptr, &b->cap, bytes);
}

/* Host memory that grows to the largest request (staging before a copy to the backend). */
static ng_status host_grow(growbuf *b, size_t bytes, const char *what) {
  return ng__host_reserve(&b->ptr, &b->cap, bytes, what);
}

static void growbuf_free(ng_backend *be, growbuf *b) {
  be->iface->free(be, b->ptr);
  b->ptr = NULL;
  b->cap = 0;
}

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

/* The first number in file `path`, or false when it has none ("max" in a cgroup file). */
static bool read_number(const char *path, unsigned long long *out) {
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  const bool ok = fscanf(f, "%llu", out) == 1;
  fclose(f);
  return ok;
}

/* Memory this process may still fill, in bytes: MemAvailable of /proc/meminfo, lowered to what
 * its cgroup (v2) allows, memory.max - memory.current (a container's /proc/meminfo shows the
 * host's memory). 0 when nothing can be read. */
static uint64_t mem_available(void) {
  unsigned long long kib = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
        break;
    fclose(f);
  }
  uint64_t avail = (uint64_t)kib * 1024;
  char group[512] = "";
  f = fopen("/proc/self/cgroup", "r");
  if (f) {
    char line[600];
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "0::", 3) == 0 && sscanf(line + 3, "%511s", group) == 1)
        break;
    fclose(f);
  }
  unsigned long long max = 0, cur = 0;
  const char *dir = strcmp(group, "/") ? group : "";
  char max_path[640], cur_path[640];
  snprintf(max_path, sizeof max_path, "/sys/fs/cgroup%s/memory.max", dir);
  snprintf(cur_path, sizeof cur_path, "/sys/fs/cgroup%s/memory.current", dir);
  if (group[0] && read_number(max_path, &max) && read_number(cur_path, &cur))
    avail = NG_MIN(avail, max > cur ? (uint64_t)(max - cur) : 0);
  return avail;
}

/* Worker threads: 0 = the cores this process may use (or the cpuset's) minus the device
 * thread's, at least one. */
static ng_status resolve_workers(int *out, int workers, const char *cpuset) {
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

static ng_status make_backend(ng_backend **out, const ng_train_opts *o) {
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
static ng_status check_opts(const ng_train_opts *opts, ng_dataset_t ds, ng_model_t model,
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
static ng_status setup_device(struct ng_trainer *t, const ng_train_opts *opts) {
  const ng_train_opts o = *opts;
  const ng_dataset_info *info = &t->ds->info;
  NG_CHECK(make_backend(&t->be, &o));
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
 * step's, from the mini-batch sizes the sampling gives at most (as estimate_memory counts
 * them), and the scratch is the model's arena, reserved for them now: at most kWarmArena and a
 * sixteenth of the free device memory, shapes shrunk to fit (the forward pass grows the arena
 * to its activations and gradients anyway, usually more on W4-like models; an upper-bound shape
 * may reserve more than a step then uses). Joined at the end of ng_trainer_create. */
static ng_status warm_gemms(struct ng_trainer *t) {
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
static ng_status setup_sampler(struct ng_trainer *t, const ng_train_opts *opts) {
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
static void drop_topology(const struct ng_trainer *t) {
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
static void drop_hot_rows(const struct ng_trainer *t) {
  const struct ng_dataset *ds = t->ds;
  if (t->be->iface->host_memory || t->store.hot <= 0 || t->features != ds->features ||
      t->opts.precision == NG_PRECISION_BF16)
    return;
  drop_pages(ds->features, (size_t)t->store.hot * (size_t)ds->info.feature_dim * sizeof(float),
             features_mapped(ds));
}

/* The feature store: the hot tier's size, the table the host reads (the mapping, or a copy in
 * huge pages), the store itself and the workers' fetch configuration. */
static ng_status setup_store(struct ng_trainer *t, const ng_train_opts *opts) {
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
                                 omp_threads(&o), &prog));
    t->startup.features_copy_s = ng__now() - t0;
  } else if (!t->features_owned && o.features_memory == NG_FEATURES_COPY && host_reads) {
    const double t0 = ng__now();
    NG_CHECK(copy_features(&t->features_owned, ds->features, table_bytes, omp_threads(&o),
                           features_mapped(ds)));
    t->startup.features_copy_s = ng__now() - t0;
    t->features = t->features_owned;
  }
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
      .threads = omp_threads(&o),
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

static const int64_t *epoch_order(ng_trainer_t t, int64_t epoch, int64_t n_train);

/* The plan of epoch `epoch` from iteration `first` over `order`, with the trainer's batch
 * (`batch`, the whole training set at most, checked against INT32_MAX by the caller). */
static ng_epoch_plan epoch_plan(const struct ng_trainer *t, int64_t batch, int64_t epoch,
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
static int64_t train_batch(const struct ng_trainer *t) {
  const int64_t n_train = t->ds->info.train;
  return t->opts.batch ? NG_MIN(t->opts.batch, n_train) : n_train;
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
  const int64_t batch = train_batch(t);
  if (batch > INT32_MAX)
    return NG_OK; /* the epoch refuses it */
  const ng_epoch_plan plan = epoch_plan(t, batch, 0, 0, epoch_order(t, 0, n_train));
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
static ng_status setup_runtime(struct ng_trainer *t, const ng_train_opts *opts) {
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
      .omp_threads = omp_threads(&o),
      .lookahead = o.lookahead,
      .device_share = o.device_share,
      .trace_spans = o.trace_spans,
      .ready_window = o.ready_window,
      .dev_sampler = t->dev_sampler,
      .feed_lanes = FEED_LANES,
  };
  NG_CHECK(resolve_workers(&ro.workers, o.workers, cpuset));
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

/* ---- the memory estimate (docs/memory.md) ---- */

#define MEM_ALLOWANCE ((int64_t)2 << 30)

/* Bytes of `n` items of `each` bytes, saturating instead of overflowing. */
static int64_t mem_mul(double n, double each) {
  const double b = n * each;
  return b >= 9e18 ? (int64_t)9e18 : (int64_t)b;
}

/* The estimate for `o` (checked), with backend `be` for the hot tier's size (NULL: one is made
 * for the question and destroyed when the answer needs a device's free memory). */
static ng_status estimate_memory(ng_memory_estimate *out, ng_dataset_t ds, const struct ng_model *m,
                                 const ng_train_opts *opts, ng_backend *be) {
  const ng_train_opts o = *opts;
  const ng_dataset_info *info = &ds->info;
  const double nodes = (double)info->nodes, dim = (double)info->feature_dim;
  const double avg_deg = info->nodes ? (double)info->edges / nodes : 0.0;
  /* Bytes a feature value takes in the hot tier and the host's table. */
  const double elem = o.precision == NG_PRECISION_BF16 ? 2.0 : 4.0;
  ng_memory_estimate e = NG_MEMORY_ESTIMATE_INIT;
  const bool cuda = o.device && strcmp(o.device, "cuda") == 0;
  /* The hot tier: every row on the CPU backend (its memory is the host's). */
  int64_t hot = info->nodes;
  /* On the cpu device a mode other than cpu (auto) simulates a tier of the given size, whose
   * cold rows then travel in packages as on a GPU. */
  const bool sized_tier = o.mode != NG_MODE_AUTO && o.mode != NG_MODE_CPU &&
                          (o.cache_bytes > 0 || o.cache_ratio >= 0.0);
  if (cuda || sized_tier) {
    ng_backend *own = NULL;
    if (cuda && !be && o.cache_bytes <= 0 && o.cache_ratio < 0.0) {
      NG_CHECK(make_backend(&own, &o));
      be = own;
    }
    ng_status st = NG_OK;
    if (be && cuda)
      st = ng__store_hot_rows_elem(&hot, be, info->nodes, info->feature_dim, (size_t)elem,
                                   o.cache_bytes, o.cache_ratio);
    else if (o.cache_bytes > 0)
      hot = NG_MIN(info->nodes, o.cache_bytes / (int64_t)NG_MAX(dim * elem, elem));
    else
      hot = NG_MIN(info->nodes, (int64_t)(o.cache_ratio * nodes));
    if (own)
      ng__backend_destroy(own);
    NG_CHECK(st);
  }
  e.hot_rows = hot;
  const double table = nodes * dim * 4.0;
  const bool owned = o.normalize == NG_NORMALIZE_ROW || o.features_memory == NG_FEATURES_COPY;
  if (o.precision == NG_PRECISION_BF16)
    /* The bf16 table (half the fp32 one: the mapped features.bf16.npy, or anonymous memory),
     * after the fp32 mapping it is converted from (read once) and a normalised fp32 copy. */
    e.features = mem_mul(o.normalize == NG_NORMALIZE_ROW ? 2.5 : owned ? 1.5 : 0.5, table);
  else
    e.features = mem_mul(owned ? 2.0 : 1.0, table);
  e.topology = mem_mul(nodes + 1, 8) + mem_mul((double)info->edges, info->index_bytes) +
               mem_mul(nodes, info->classes ? 4 : 0) +
               mem_mul((double)(info->train + info->val + info->test), 8);
  /* One mini-batch: the targets, then each hop's sources (fanout, or the mean degree for all
   * neighbours), at most every node; the input layer's cold rows are in its package at worst
   * (BATCH: the cold share of the rows), plus the blocks' arrays and ids. */
  const double batch = (double)(o.batch > 0 ? NG_MIN(o.batch, info->train) : info->train);
  double rows = batch, edges = 0.0, ids = batch, dst0 = batch;
  for (int l = m->n_layers - 1; l >= 0; l--) {
    const double f = m->layers[l].o.fanout < 0 ? avg_deg : (double)m->layers[l].o.fanout;
    edges += rows * f;
    dst0 = rows;
    rows = NG_MIN(nodes, rows * (1.0 + f));
    ids += rows;
  }
  /* The feature rows a package holds, by who fetches: BATCH the cold share of the input rows,
   * PARTIAL a state for every destination once any row is cold (a mini-batch then draws some
   * cold edge, and the host's share of the destinations gets a state each) and the cold share
   * of their self rows, ZCOPY none (ids only); the hybrid modes the larger of PARTIAL and their
   * TRANSFER strategy. */
  const double cold = nodes > 0 ? (nodes - (double)hot) / nodes : 0.0;
  const ng_mode mode = o.mode == NG_MODE_AUTO ? (cuda ? NG_MODE_HYBRID : NG_MODE_CPU) : o.mode;
  const bool transfer_zcopy = ng__transfer_resolve(o.transfer, info->feature_dim) == NG_FETCH_ZCOPY;
  /* A state holds state_size floats a feature (a user aggregator's merge law may keep several)
   * and a count a destination. */
  const double state_rows =
      cold > 0.0 && dim > 0.0
          ? dst0 * ((double)ng__aggr_state_size(ng__model_input_aggr(m)) + 1.0 / dim)
          : 0.0;
  const double batch_rows = rows * cold, partial_rows = state_rows + dst0 * cold;
  double pkg_rows = 0.0;
  if (mode == NG_MODE_BASELINE)
    pkg_rows = batch_rows;
  else if (mode == NG_MODE_PARTIAL)
    pkg_rows = partial_rows;
  else if (mode == NG_MODE_HYBRID || mode == NG_MODE_HYBRID_STATIC)
    pkg_rows = NG_MAX(partial_rows, transfer_zcopy ? 0.0 : batch_rows);
  e.package_bytes =
      mem_mul(pkg_rows, dim * 4.0) + mem_mul(rows, 8.0) + mem_mul(edges, 16.0) + mem_mul(ids, 8.0);
  int workers = 0;
  if (o.workers >= 0)
    NG_CHECK(resolve_workers(&workers, o.workers, o.cpuset));
  e.workers = workers;
  const int window = o.ready_window > 0 ? o.ready_window : NG_MAX(4, 4 * workers);
  e.slots = workers ? o.lookahead + NG_MAX(2, (window + workers - 1) / workers) : o.lookahead + 1;
  /* Each slot grows to 1 + 1/16 x the largest package; each worker's scratch (sampler arena,
   * fetch buffers) holds about two packages; the device thread one more. */
  const double per_worker =
      (double)e.slots * (1.0 + 1.0 / NG_SLOT_GROWTH_DEN) * (double)e.package_bytes +
      2.0 * (double)e.package_bytes;
  e.staging = mem_mul(NG_MAX(workers, 1), per_worker) + e.package_bytes;
  /* Inference: two layer outputs in memory (or their trimmed file pages), two chunks of input
   * rows and blocks, and the logits of every node (predictions). */
  /* Intermediate layers (all but the last) are buffered, two at a time; chunks gather inputs
   * at most as wide as the widest layer input. */
  int64_t widest = info->feature_dim, hidden = 0;
  for (int l = 0; l < m->n_layers; l++) {
    widest = NG_MAX(widest, m->layers[l].in_dim);
    if (l + 1 < m->n_layers)
      hidden = NG_MAX(hidden, m->layers[l].out_dim);
  }
  const int64_t limit = o.infer_host_bytes > 0   ? o.infer_host_bytes
                        : o.infer_host_bytes < 0 ? (int64_t)64 << 20
                                                 : NG_INFER_HOST_BYTES_DEFAULT;
  /* A chunk's input rows: its destinations and their neighbours. The host gathers them (input
   * rows and ids) for chunks of eval_chunk, by default 4096 (NG_INFER_CHUNK_SMALL); beside a GPU
   * that reads a layer's rows itself, the default chunk is NG_INFER_CHUNK_LARGE and its slot holds
   * the sampler's table and block and the rows' positions, about 96 bytes a row. */
  const double small = o.eval_chunk > 0 ? (double)o.eval_chunk : (double)NG_INFER_CHUNK_SMALL;
  const double chunk_rows = NG_MIN(nodes, small * (1.0 + avg_deg));
  const double large_rows =
      cuda && o.eval_chunk == 0 ? NG_MIN(nodes, NG_INFER_CHUNK_LARGE * (1.0 + avg_deg)) : 0.0;
  const double slot_bytes = NG_MAX(chunk_rows * ((double)widest * 4.0 + 16.0), large_rows * 96.0);
  /* Inference's staging slots: its producers (every thread but the device thread's beside a GPU,
   * one on the CPU) + 2 (runtime/infer.c). */
  const int infer_slots =
      (cuda ? NG_MAX(1, NG_MIN(omp_threads(&o) - 1, NG_INFER_MAX_SLOTS - 2)) : 1) + 2;
  e.inference =
      NG_MIN(mem_mul(nodes, (double)hidden * 4.0), limit) * (int64_t)NG_MIN(2, m->n_layers - 1) +
      mem_mul((double)infer_slots, slot_bytes) + mem_mul(2.0 * nodes, (double)info->classes * 4.0);
  e.allowance = MEM_ALLOWANCE;
  e.host_total = e.features + e.topology + e.staging + e.inference + e.allowance;
  if (cuda)
    e.device = mem_mul((double)hot, dim * elem) + mem_mul((double)m->n_params, 16.0) +
               mem_mul(o.lookahead + 1 + 4, (double)e.package_bytes);
  e.available = (int64_t)mem_available();
  const size_t size = out->size;
  memcpy(out, &e, NG_MIN(size, sizeof e));
  out->size = size;
  return NG_OK;
}

/* The options a caller passed, over the defaults (fields of a newer library keep theirs). */
static ng_status merge_opts(ng_train_opts *o, const ng_train_opts *opts) {
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

ng_status ng_trainer_estimate_memory(ng_memory_estimate *out, ng_dataset_t ds, ng_model_t model,
                                     const ng_train_opts *opts) {
  if (!out || out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_trainer_estimate_memory: out is NULL or its size is not set "
                   "(NG_MEMORY_ESTIMATE_INIT)");
  NG_CHECK(ng__dataset_check(ds));
  NG_CHECK(ng__model_check(model));
  ng_train_opts o;
  NG_CHECK(merge_opts(&o, opts));
  NG_CHECK(check_opts(&o, ds, model, false));
  return estimate_memory(out, ds, model, &o, NULL);
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
  NG_CHECK(merge_opts(&o, opts));
  NG_CHECK(check_opts(&o, ds, model, for_link));
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
    NG_CHECK_GOTO(st, estimate_memory(&t->mem, ds, model, &o, NULL), fail);
    if (t->mem.host_total > o.max_host_memory)
      goto too_large;
  }
  if (o.normalize == NG_NORMALIZE_ROW) {
    NG_CHECK_GOTO(st,
                  normalize_rows(&t->features_owned, ds->features, ds->info.nodes,
                                 ds->info.feature_dim, omp_threads(&o), features_mapped(ds)),
                  fail);
    t->features = t->features_owned;
  }
  /* The workers' placement reads the machine's topology, loaded meanwhile. */
  ng__pool_prefetch(&t->topo_prefetch);
  NG_CHECK_GOTO(st, setup_device(t, &o), fail);
  NG_CHECK_GOTO(st, warm_gemms(t), fail);
  NG_CHECK_GOTO(st, setup_sampler(t, &o), fail);
  NG_CHECK_GOTO(st, estimate_memory(&t->mem, ds, model, &o, t->be), fail);
  if (o.max_host_memory > 0 && t->mem.host_total > o.max_host_memory)
    goto too_large;
  drop_topology(t);
  NG_CHECK_GOTO(st, setup_store(t, &o), fail);
  drop_hot_rows(t);
  NG_CHECK_GOTO(st, setup_runtime(t, &o), fail);
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
  NG_CHECK(trainer_check(t));
  *out = (ng_trainer_parts){.be = t->be,
                            .ex = &t->ex,
                            .sampler = &t->cfg,
                            .arena = t->arena,
                            .store = &t->store,
                            .fetch = &t->fetch,
                            .step = &t->step,
                            .mode = t->mode,
                            .threads = omp_threads(&t->opts)};
  return NG_OK;
}

void ng__trainer_params_changed(ng_trainer_t t) {
  if (trainer_check(t) == NG_OK)
    drop_logits(t);
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
  drop_logits(t);
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

static size_t logits_bytes(ng_trainer_t t) {
  return (size_t)t->ds->info.nodes * (size_t)t->ds->info.classes * sizeof(float);
}

/* Forgets the inferred logits: the parameters are about to change. */
static void drop_logits(ng_trainer_t t) {
  if (t->logits)
    ng__big_free(t->logits, logits_bytes(t));
  t->logits = NULL;
  free(t->eval_logits);
  t->eval_logits = NULL;
}

int64_t ng_trainer_hot_rows(ng_trainer_t t) {
  return trainer_check(t) == NG_OK ? t->store.hot : -1;
}

ng_status ng_trainer_cache_info(ng_cache_info *out, ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_cache_info: out is NULL");
  *out = t->cache;
  return NG_OK;
}

ng_status ng_trainer_startup(ng_startup_times *out, ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_startup: out is NULL");
  *out = t->startup;
  out->hot_upload_s = t->store.upload_s; /* the store timed its own set-up */
  out->register_s = t->store.register_s;
  return NG_OK;
}

struct ng_pipeline *ng__trainer_pipeline(ng_trainer_t t, ng_memory_estimate *mem) {
  if (trainer_check(t) != NG_OK)
    return NULL;
  if (mem)
    *mem = t->mem;
  return t->rt;
}

int ng_trainer_features_copied(ng_trainer_t t) {
  return trainer_check(t) == NG_OK ? t->features_owned != NULL : -1;
}

const char *ng_trainer_sampler(ng_trainer_t t) {
  return trainer_check(t) != NG_OK ? "" : t->dev_sampler ? "device" : "cpu";
}

const char *ng_trainer_placement(ng_trainer_t t) {
  return trainer_check(t) == NG_OK ? ng__pipeline_placement(t->rt) : "";
}

ng_status ng_trainer_write_trace(ng_trainer_t t, const char *path, int64_t *spans,
                                 int64_t *dropped) {
  NG_CHECK(trainer_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_write_trace: a path is required");
  /* Workers going on with the next epoch still record: they stop first (the next epoch then
   * starts a pool). */
  ng__pipeline_stop(t->rt);
  return ng__pipeline_write_trace(t->rt, path, spans, dropped);
}

ng_status ng_trainer_op_profile(ng_op_time *out, int cap, int *n, int64_t *iterations,
                                ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
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
  return trainer_check(t) == NG_OK ? t->epochs_done : -1;
}

/* Gathers rows `ids` of a host table into backend memory. A backend with its own memory gets
 * them gathered on the host and copied in one transfer (the synchronous path; the tiered
 * feature store's fetch strategies are the fast ones). */
static ng_status gather_inputs(ng_trainer_t t, const float *table, int64_t dim, const int64_t *ids,
                               int64_t n, growbuf *dst) {
  size_t bytes = (size_t)NG_MAX(n, 1) * (size_t)dim * sizeof(float);
  NG_CHECK(grow(t->be, dst, bytes));
  if (t->be->iface->host_memory)
    return t->be->iface->gather_rows(t->be, dst->ptr, table, ids, n, dim);
  NG_CHECK(host_grow(&t->stage, bytes, "the feature staging buffer"));
  float *s = t->stage.ptr;
#pragma omp parallel for schedule(static) num_threads(omp_threads(&t->opts)) if (n > 4096)
  for (int64_t i = 0; i < n; i++)
    memcpy(s + i * dim, table + ids[i] * dim, (size_t)dim * sizeof(float));
  return t->be->iface->copy_h2d(t->be, dst->ptr, s, (size_t)n * (size_t)dim * sizeof(float));
}

static ng_status gather_labels(ng_trainer_t t, const int64_t *ids, int64_t n) {
  size_t bytes = (size_t)NG_MAX(n, 1) * sizeof(int32_t);
  NG_CHECK(grow(t->be, &t->labels, bytes));
  bool direct = t->be->iface->host_memory;
  if (!direct)
    NG_CHECK(host_grow(&t->stage_labels, bytes, "the label staging buffer"));
  int32_t *lab = direct ? t->labels.ptr : t->stage_labels.ptr;
  for (int64_t i = 0; i < n; i++)
    lab[i] = t->ds->labels[ids[i]];
  if (direct)
    return NG_OK;
  return t->be->iface->copy_h2d(t->be, t->labels.ptr, lab, (size_t)n * sizeof(int32_t));
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
static const int64_t *epoch_order(ng_trainer_t t, int64_t epoch, int64_t n_train) {
  if (!order_written(t, epoch))
    shuffle_order(t, epoch);
  return t->perm + (epoch % 2) * n_train;
}

ng_status ng_trainer_epoch(ng_epoch_stats *out, ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
  if (!out || out->size < sizeof(ng_epoch_stats))
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_epoch: stats missing or from an older header");
  /* A dataset file truncated under the run stops it here, naming the file (docs/guarantees.md). */
  NG_CHECK(ng__dataset_verify_maps(t->ds));
  const ng_dataset_info *info = &t->ds->info;
  int64_t n_train = info->train;
  int64_t batch = train_batch(t);
  if (batch > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "a full-batch of %lld nodes is too large; set a batch",
                   (long long)batch);
  int64_t epoch = t->epochs_done;
  drop_logits(t);
  int64_t iters = (n_train + batch - 1) / batch, first = t->iter_done;
  /* Workers going on with another epoch than this one (after a load or a stopped epoch) stop
   * before an order they may read is rewritten. */
  if (ng__pipeline_ahead(t->rt) != epoch || first != 0)
    ng__pipeline_stop(t->rt);
  /* This epoch's order was left to the workers during the last one: a worker wrote it, or
   * none began and it is written here. The next one's is left to them again (the device
   * thread waited 4-5 ms for W1's 600k ids between two epochs when it shuffled them here). */
  ng__pipeline_settle(t->rt);
  const int64_t *order = epoch_order(t, epoch, n_train);
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
  const ng_epoch_plan plan = epoch_plan(t, batch, epoch, first, order);
  /* The next order's buffer held the last epoch's, which no worker reads any more. */
  ng_epoch_plan next = epoch_plan(t, batch, epoch + 1, 0, t->perm + ((epoch + 1) % 2) * n_train);
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
  qsort(ty->iter_ms, (size_t)ty->n_iter_ms, sizeof *ty->iter_ms, cmp_double);
  out->iter_ms_median = ty->n_iter_ms ? ty->iter_ms[(ty->n_iter_ms - 1) / 2] : 0.0;
  out->iter_ms_p99 = ty->n_iter_ms ? ty->iter_ms[nearest_rank(ty->n_iter_ms, 0.99)] : 0.0;
  out->ranks = t->dist.ranks;
  out->allreduce_ms = allreduce_ms;
  t->cold.size = sizeof t->cold;
  return ng__dist_coop_epoch(&t->cold, t->coop, &t->dist, &t->fetch, batch);
}

ng_status ng_trainer_cold_fetch(ng_cold_fetch_stats *out, ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
  if (!out || out->size < sizeof(ng_cold_fetch_stats))
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_cold_fetch: stats missing or too small");
  *out = t->cold;
  out->size = sizeof *out;
  return NG_OK;
}

/* The inference context of the trainer's model, features and hot tier (runtime/infer.c). */
static ng_infer_ctx infer_ctx(ng_trainer_t t, const ng_infer_opts *io) {
  return (ng_infer_ctx){
      .ex = &t->ex,
      .graph = &t->ds->csr,
      .features = t->features,
      .features_bf16 = t->bf16.rows,
      .store = t->store.parts > 0 ? &t->store_eval : &t->store,
      .threads = omp_threads(&t->opts),
      .adapt_threads = t->opts.threads == 0 && t->be->iface->host_memory,
      .chunk = io && io->chunk > 0 ? io->chunk : t->opts.eval_chunk,
      .host_bytes = io && io->host_bytes != 0       ? io->host_bytes
                    : t->opts.infer_host_bytes != 0 ? t->opts.infer_host_bytes
                                                    : NG_INFER_HOST_BYTES_DEFAULT,
      .temp_dir = io && io->temp_dir ? io->temp_dir : t->temp_dir,
      .device_bytes = io ? io->device_bytes : 0,
      .progress = io ? io->progress : t->opts.progress,
      .progress_ctx = io ? io->progress_ctx : t->opts.progress_ctx,
  };
}

/* Full-neighbour layer-wise inference of every node: the logits [nodes, classes] in t->logits,
 * computed once per parameter state. */
static ng_status infer_all(ng_trainer_t t) {
  if (t->logits)
    return NG_OK;
  float *logits = ng__big_alloc(logits_bytes(t), "the logits of every node");
  if (!logits)
    return NG_ERR_NOMEM;
  const ng_infer_ctx c = infer_ctx(t, NULL);
  ng_status st = ng__infer(logits, &c, t->model->n_layers - 1, NULL, t->ds->info.nodes, NULL);
  if (st != NG_OK) {
    ng__big_free(logits, logits_bytes(t));
    return st;
  }
  t->logits = logits;
  return NG_OK;
}

ng_status ng_trainer_embed_dim(int64_t *dim, ng_trainer_t t, int32_t layer) {
  NG_CHECK(trainer_check(t));
  if (!dim)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_embed_dim: dim is NULL");
  const struct ng_model *m = t->model;
  if (layer < -1 || layer >= m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: the model has layers 0 to %d (-1: the last)",
                   (int)layer, m->n_layers - 1);
  *dim = m->layers[layer < 0 ? m->n_layers - 1 : layer].out_dim;
  return NG_OK;
}

ng_status ng_trainer_embed(float *out, ng_trainer_t t, const int64_t *nodes, int64_t n,
                           const ng_infer_opts *opts) {
  return ng__trainer_embed(out, t, nodes, n, opts, NULL, NULL);
}

ng_status ng__trainer_embed(float *out, ng_trainer_t t, const int64_t *nodes, int64_t n,
                            const ng_infer_opts *opts, void (*rows_done)(void *, int64_t, int64_t),
                            void *rows_done_ctx) {
  NG_CHECK(trainer_check(t));
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof opts->size)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_infer_opts.size is %zu; initialise the options with NG_INFER_OPTS_INIT",
                     opts->size);
    memcpy(&io, opts, NG_MIN(opts->size, sizeof io));
    io.size = sizeof io;
  }
  int64_t dim = 0;
  NG_CHECK(ng_trainer_embed_dim(&dim, t, io.layer));
  if (!out && (nodes ? n : t->ds->info.nodes) > 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_embed: out is NULL");
  if (io.chunk < 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_infer_opts.chunk %lld is negative", (long long)io.chunk);
  const int layer = io.layer < 0 ? t->model->n_layers - 1 : io.layer;
  /* Workers going on with the next epoch sample and fetch on every core: inference waits for
   * no one, so they stop (the next epoch starts a pool again). */
  ng__pipeline_stop(t->rt);
  ng_infer_ctx c = infer_ctx(t, &io);
  c.rows_done = rows_done;
  c.rows_done_ctx = rows_done_ctx;
  if (io.report && io.report->size < sizeof io.report->size)
    return ng__err(NG_ERR_INVALID_ARG, "ng_infer_opts.report: initialise it with "
                                       "NG_INFER_REPORT_INIT");
  ng_infer_stats stats;
  const ng_status st =
      ng__infer(out, &c, layer, nodes, nodes ? n : t->ds->info.nodes, io.report ? &stats : NULL);
  if (st == NG_OK && io.report)
    ng__infer_report(io.report, &stats, layer + 1);
  return st;
}

/* The logits of the validation and the test split (t->eval_logits), by one inference over both
 * receptive fields. */
static ng_status infer_eval_splits(ng_trainer_t t) {
  const ng_dataset_info *info = &t->ds->info;
  const int64_t n = info->val + info->test;
  int64_t *ids = ng__malloc((size_t)NG_MAX(n, 1) * sizeof *ids, "the evaluation ids");
  float *logits = ng__malloc((size_t)NG_MAX(n, 1) * (size_t)info->classes * sizeof(float),
                             "the logits of the evaluation splits");
  ng_status st = ids && logits ? NG_OK : NG_ERR_NOMEM;
  if (st == NG_OK) {
    if (info->val)
      memcpy(ids, t->ds->split[NG_SPLIT_VAL], (size_t)info->val * sizeof *ids);
    if (info->test)
      memcpy(ids + info->val, t->ds->split[NG_SPLIT_TEST], (size_t)info->test * sizeof *ids);
    const ng_infer_ctx c = infer_ctx(t, NULL);
    st = ng__infer(logits, &c, t->model->n_layers - 1, ids, n, NULL);
  }
  free(ids);
  if (st != NG_OK) {
    free(logits);
    return st;
  }
  t->eval_logits = logits;
  return NG_OK;
}

ng_status ng_trainer_evaluate(double *accuracy, double *loss, ng_trainer_t t, ng_split split) {
  NG_CHECK(trainer_check(t));
  if ((unsigned)split > NG_SPLIT_TEST)
    return ng__err(NG_ERR_INVALID_ARG, "unknown split %d", (int)split);
  const ng_dataset_info *info = &t->ds->info;
  int64_t n = split == NG_SPLIT_TRAIN ? info->train
              : split == NG_SPLIT_VAL ? info->val
                                      : info->test;
  if (n == 0)
    return ng__err(NG_ERR_INVALID_ARG, "dataset '%s' has an empty %s split", info->name,
                   split == NG_SPLIT_TRAIN ? "train"
                   : split == NG_SPLIT_VAL ? "val"
                                           : "test");
  const int64_t *ids = t->ds->split[split];
  ng_status st = NG_OK;
  if (t->logits) { /* every node's logits are there already (ng_trainer_predict) */
    st = gather_inputs(t, t->logits, info->classes, ids, n, &t->eval_out);
  } else {
    /* Only the split's receptive field (layer-wise, runtime/infer.c), into backend memory; the
     * validation and test splits together, kept until the parameters change. */
    const size_t bytes = (size_t)n * (size_t)info->classes * sizeof(float);
    const float *host = NULL;
    float *own = NULL;
    if (split == NG_SPLIT_TRAIN) {
      own = ng__malloc(NG_MAX(bytes, (size_t)1), "the logits of the training split");
      if (!own)
        return NG_ERR_NOMEM;
      const ng_infer_ctx c = infer_ctx(t, NULL);
      st = ng__infer(own, &c, t->model->n_layers - 1, ids, n, NULL);
      host = own;
    } else {
      if (!t->eval_logits)
        st = infer_eval_splits(t);
      host = t->eval_logits ? t->eval_logits +
                                  (split == NG_SPLIT_TEST ? info->val : 0) * (int64_t)info->classes
                            : NULL;
    }
    if (st == NG_OK)
      st = grow(t->be, &t->eval_out, bytes);
    if (st == NG_OK && t->be->iface->host_memory)
      memcpy(t->eval_out.ptr, host, bytes);
    else if (st == NG_OK)
      st = t->be->iface->copy_h2d(t->be, t->eval_out.ptr, host, bytes);
    free(own);
  }
  if (st == NG_OK)
    st = gather_labels(t, ids, n);
  double l = 0.0;
  int64_t correct = 0;
  if (st == NG_OK)
    st = t->be->iface->xent(t->be, t->eval_out.ptr, t->labels.ptr, n, info->classes, NULL, &l,
                            &correct);
  if (st != NG_OK)
    return st;
  if (accuracy)
    *accuracy = (double)correct / (double)n;
  if (loss)
    *loss = l;
  return NG_OK;
}

ng_status ng__trainer_logits(const float **out, ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng__trainer_logits: out is NULL");
  NG_CHECK(infer_all(t));
  *out = t->logits;
  return NG_OK;
}

ng_status ng_trainer_predict(int32_t *out, ng_trainer_t t) {
  NG_CHECK(trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_predict: out is NULL");
  return ng_trainer_predict_nodes(NULL, out, t, NULL, t->ds->info.nodes);
}

ng_status ng_trainer_predict_nodes(float *logits, int32_t *classes, ng_trainer_t t,
                                   const int64_t *nodes, int64_t n) {
  NG_CHECK(trainer_check(t));
  const int64_t all = t->ds->info.nodes, k = t->ds->info.classes;
  if (n < 0 || (!nodes && n != all) || (n > 0 && !logits && !classes))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_trainer_predict_nodes: %lld nodes %s; give node ids, or NULL and every "
                   "node (%lld), and logits or classes to fill",
                   (long long)n, nodes ? "given" : "without ids", (long long)all);
  for (int64_t i = 0; nodes && i < n; i++)
    if (nodes[i] < 0 || nodes[i] >= all)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_trainer_predict_nodes: nodes[%lld] = %lld is not a node id in [0, %lld)",
                     (long long)i, (long long)nodes[i], (long long)all);
  /* Every node, or logits already inferred: the shared table; else only the nodes' receptive
   * field (the same bits, docs/inference.md). */
  float *own = NULL;
  const float *table = NULL;
  if (!nodes || t->logits) {
    NG_CHECK(infer_all(t));
    table = t->logits;
  } else {
    if (!(own = ng__malloc((size_t)NG_MAX(n, 1) * (size_t)k * sizeof(float), "node logits")))
      return NG_ERR_NOMEM;
    ng_infer_opts io = NG_INFER_OPTS_INIT;
    const ng_status st = ng_trainer_embed(own, t, nodes, n, &io);
    if (st != NG_OK) {
      free(own);
      return st;
    }
  }
#pragma omp parallel for schedule(static) num_threads(omp_threads(&t->opts)) if (n > 65536)
  for (int64_t i = 0; i < n; i++) {
    const float *row = own ? own + i * k : table + (nodes ? nodes[i] : i) * k;
    if (logits)
      memcpy(logits + i * k, row, (size_t)k * sizeof(float));
    if (classes) {
      int32_t best = 0;
      for (int64_t c = 1; c < k; c++)
        if (row[c] > row[best])
          best = (int32_t)c;
      classes[i] = best;
    }
  }
  free(own);
  return NG_OK;
}

/* ---- checkpoints ---- */

/* Iterations of an epoch trained with `batch` (0: full batch). */
static int64_t epoch_iters(int64_t n_train, int64_t batch) {
  int64_t b = batch ? NG_MIN(batch, n_train) : n_train;
  return b > 0 ? (n_train + b - 1) / b : 0;
}

ng_status ng__trainer_copy_out(float **out, ng_trainer_t t) {
  const int64_t n = t->model->n_params;
  const size_t bytes = (size_t)n * sizeof(float);
  float *host = *out = ng__malloc(3 * bytes, "a checkpoint");
  ng_status st = host ? t->be->iface->copy_d2h(t->be, host, t->ex.params, bytes) : NG_ERR_NOMEM;
  if (st == NG_OK)
    st = t->be->iface->copy_d2h(t->be, host + n, t->ex.state1, bytes);
  if (st == NG_OK)
    st = t->be->iface->copy_d2h(t->be, host + 2 * n, t->ex.state2, bytes);
  return st;
}

ng_status ng_trainer_save(ng_trainer_t t, const char *path) {
  NG_CHECK(trainer_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_save: no path");
  const struct ng_model *m = t->model;
  float *host = NULL;
  ng_status st = ng__trainer_copy_out(&host, t);
  const ng_ckpt_run run = {
      .epochs_done = t->epochs_done,
      .step = t->step.steps,
      .iteration = t->iter_done,
      .batch = t->opts.batch,
      .base_epochs = t->base_epochs,
      .base_step = t->base_step,
      .optimizer = t->opts.optimizer,
      .seed = t->opts.seed,
  };
  if (st == NG_OK)
    st = ng__ckpt_write(path, m, host, t->opts.normalize, &t->ds->info, &run);
  free(host);
  return st;
}

/* What resuming needs beyond the model: the same seed and optimizer, the same batch in the
 * middle of an epoch, and counters that agree with each other and with this dataset's
 * iterations per epoch. */
static ng_status check_resume(const ng_trainer_t t, const ng_ckpt_run *r, const char *path) {
  /* Every later epoch's order, samples and dropout derive from the seed: another one would
   * continue a different run than the one the checkpoint holds. */
  if (r->seed != t->opts.seed)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained with seed %llu but this trainer has seed %llu; "
                   "resume with --seed %llu",
                   path, (unsigned long long)r->seed, (unsigned long long)t->opts.seed,
                   (unsigned long long)r->seed);
  if (r->optimizer != t->opts.optimizer)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained with --optimizer %s, this run uses %s; resume "
                   "with the checkpoint's optimizer (its state is the optimizer's own)",
                   path, ng_optimizer_name(r->optimizer), ng_optimizer_name(t->opts.optimizer));
  const int64_t n_train = t->ds->info.train, iters = epoch_iters(n_train, r->batch);
  /* The rest of an epoch replays the epoch's order and samples: they depend on the batch. */
  if (r->iteration > 0 && r->batch != t->opts.batch)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint stops after iteration %lld of an epoch trained with batch "
                   "%lld; resume it with the same batch (this trainer has %lld)",
                   path, (long long)r->iteration, (long long)r->batch, (long long)t->opts.batch);
  /* The counters must agree with each other: an edited or damaged epochs_done would otherwise
   * skip epochs or report epochs that were never trained. */
  if (r->iteration >= iters)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata iteration %lld is out of range: an epoch of %lld "
                   "training nodes in batches of %lld has %lld iterations",
                   path, (long long)r->iteration, (long long)n_train, (long long)r->batch,
                   (long long)iters);
  long long want = 0;
  bool agree;
  if (r->has_base)
    agree = r->base_epochs <= r->epochs_done &&
            !__builtin_mul_overflow(r->epochs_done - r->base_epochs, iters, &want) &&
            !__builtin_add_overflow(want, r->base_step + r->iteration, &want) && want == r->step;
  else /* older checkpoints: each epoch had at least one iteration */
    agree = r->epochs_done + r->iteration <= r->step;
  if (!agree && r->has_base)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: epochs_done %lld and iteration %lld with "
                   "%lld iterations per epoch from epoch %lld (step %lld) make step %lld, but "
                   "the file says step %lld; the file was edited or is damaged",
                   path, (long long)r->epochs_done, (long long)r->iteration, (long long)iters,
                   (long long)r->base_epochs, (long long)r->base_step, want, (long long)r->step);
  if (!agree)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: epochs_done %lld and iteration %lld need "
                   "at least %lld optimizer steps, but the file says step %lld; the file was "
                   "edited or is damaged",
                   path, (long long)r->epochs_done, (long long)r->iteration,
                   (long long)(r->epochs_done + r->iteration), (long long)r->step);
  return NG_OK;
}

/* ng_trainer_load, or with `weights_only` ng_trainer_load_weights: the parameters alone, without
 * the checks and state that only resuming training needs. */
static ng_status load_impl(ng_trainer_t t, const char *path, bool weights_only) {
  NG_CHECK(trainer_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_load: no path");
  drop_logits(t); /* even a failed load may have replaced some parameters */
  const struct ng_model *m = t->model;
  const size_t bytes = (size_t)m->n_params * sizeof(float);
  ng_ckpt c;
  NG_CHECK(ng__ckpt_read(&c, path));
  const ng_ckpt_run *r = &c.run;
  float *host = NULL;
  ng_status st;
  NG_CHECK_GOTO(st, ng__ckpt_verify(&c, path, m, t->opts.normalize, &t->ds->info, weights_only),
                done);
  if (!weights_only)
    NG_CHECK_GOTO(st, check_resume(t, r, path), done);
  host = ng__malloc(3 * bytes, "a checkpoint");
  if (!host) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  NG_CHECK_GOTO(st, ng__ckpt_tensors(host, &c, path, m, !weights_only), done);
  st = t->be->iface->copy_h2d(t->be, t->ex.params, host, bytes);
  if (st == NG_OK && !weights_only)
    st = t->be->iface->copy_h2d(t->be, t->ex.state1, host + m->n_params, bytes);
  if (st == NG_OK && !weights_only)
    st = t->be->iface->copy_h2d(t->be, t->ex.state2, host + 2 * m->n_params, bytes);
  if (st == NG_OK && !weights_only) {
    const int64_t iters = epoch_iters(t->ds->info.train, r->batch);
    t->epochs_done = r->epochs_done;
    t->step.steps = r->step;
    t->iter_done = r->iteration;
    /* The same iterations per epoch continue the file's base; another batch starts one. */
    bool same = epoch_iters(t->ds->info.train, t->opts.batch) == iters;
    if (same && r->has_base) {
      t->base_epochs = r->base_epochs;
      t->base_step = r->base_step;
    } else if (same && r->step == r->epochs_done * iters + r->iteration) {
      t->base_epochs = t->base_step = 0;
    } else {
      t->base_epochs = r->epochs_done;
      t->base_step = r->step - r->iteration;
    }
  }
done:
  free(host);
  ng__ckpt_close(&c);
  return st;
}

ng_status ng_trainer_load(ng_trainer_t t, const char *path) {
  return load_impl(t, path, false);
}

ng_status ng_trainer_load_weights(ng_trainer_t t, const char *path) {
  return load_impl(t, path, true);
}
