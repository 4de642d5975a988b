/* The memory estimate of a training configuration (docs/memory.md): ng_trainer_estimate_memory,
 * and the refusal of ng_train_opts.max_host_memory in ng_trainer_create. */
#include "infer_impl.h"
#include "trainer_state_impl.h"

#include <stdio.h>
#include <string.h>

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

#define MEM_ALLOWANCE ((int64_t)2 << 30)

/* Bytes of `n` items of `each` bytes, saturating instead of overflowing. */
static int64_t mem_mul(double n, double each) {
  const double b = n * each;
  return b >= 9e18 ? (int64_t)9e18 : (int64_t)b;
}

/* The hot tier's rows (*hot): every row on the CPU backend; on a GPU what its free memory holds
 * (`be`, or one made for the question), or the options' size. */
static ng_status estimate_hot_rows(int64_t *hot_out, ng_dataset_t ds, const ng_train_opts *opts,
                                   ng_backend *be) {
  const ng_train_opts o = *opts;
  const ng_dataset_info *info = &ds->info;
  const double nodes = (double)info->nodes, dim = (double)info->feature_dim;
  const double elem = o.precision == NG_PRECISION_BF16 ? 2.0 : 4.0;
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
      NG_CHECK(ng__trainer_make_backend(&own, &o));
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
  *hot_out = hot;
  return NG_OK;
}

/* The bytes of one mini-batch's package with `hot` rows in the hot tier. */
static int64_t estimate_package(const ng_dataset_info *info, const struct ng_model *m,
                                const ng_train_opts *opts, int64_t hot) {
  const ng_train_opts o = *opts;
  const double nodes = (double)info->nodes, dim = (double)info->feature_dim;
  const double avg_deg = info->nodes ? (double)info->edges / nodes : 0.0;
  const bool cuda = o.device && strcmp(o.device, "cuda") == 0;
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
  return mem_mul(pkg_rows, dim * 4.0) + mem_mul(rows, 8.0) + mem_mul(edges, 16.0) +
         mem_mul(ids, 8.0);
}

/* The bytes inference holds (ng_memory_estimate.inference). */
static int64_t estimate_inference(const ng_dataset_info *info, const struct ng_model *m,
                                  const ng_train_opts *opts) {
  const ng_train_opts o = *opts;
  const double nodes = (double)info->nodes;
  const double avg_deg = info->nodes ? (double)info->edges / nodes : 0.0;
  const bool cuda = o.device && strcmp(o.device, "cuda") == 0;
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
      (cuda ? NG_MAX(1, NG_MIN(ng__trainer_threads(&o) - 1, NG_INFER_MAX_SLOTS - 2)) : 1) + 2;
  return NG_MIN(mem_mul(nodes, (double)hidden * 4.0), limit) * (int64_t)NG_MIN(2, m->n_layers - 1) +
         mem_mul((double)infer_slots, slot_bytes) +
         mem_mul(2.0 * nodes, (double)info->classes * 4.0);
}

/* The estimate for `o` (checked), with backend `be` for the hot tier's size (NULL: one is made
 * for the question and destroyed when the answer needs a device's free memory). */
ng_status ng__trainer_estimate(ng_memory_estimate *out, ng_dataset_t ds, const struct ng_model *m,
                               const ng_train_opts *opts, ng_backend *be) {
  const ng_train_opts o = *opts;
  const ng_dataset_info *info = &ds->info;
  const double nodes = (double)info->nodes, dim = (double)info->feature_dim;
  /* Bytes a feature value takes in the hot tier and the host's table. */
  const double elem = o.precision == NG_PRECISION_BF16 ? 2.0 : 4.0;
  ng_memory_estimate e = NG_MEMORY_ESTIMATE_INIT;
  const bool cuda = o.device && strcmp(o.device, "cuda") == 0;
  int64_t hot = 0;
  NG_CHECK(estimate_hot_rows(&hot, ds, &o, be));
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
  e.package_bytes = estimate_package(info, m, &o, hot);
  int workers = 0;
  if (o.workers >= 0)
    NG_CHECK(ng__trainer_resolve_workers(&workers, o.workers, o.cpuset));
  e.workers = workers;
  const int window = o.ready_window > 0 ? o.ready_window : NG_MAX(4, 4 * workers);
  e.slots = workers ? o.lookahead + NG_MAX(2, (window + workers - 1) / workers) : o.lookahead + 1;
  /* Each slot grows to 1 + 1/16 x the largest package; each worker's scratch (sampler arena,
   * fetch buffers) holds about two packages; the device thread one more. */
  const double per_worker =
      (double)e.slots * (1.0 + 1.0 / NG_SLOT_GROWTH_DEN) * (double)e.package_bytes +
      2.0 * (double)e.package_bytes;
  e.staging = mem_mul(NG_MAX(workers, 1), per_worker) + e.package_bytes;
  e.inference = estimate_inference(info, m, &o);
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

ng_status ng_trainer_estimate_memory(ng_memory_estimate *out, ng_dataset_t ds, ng_model_t model,
                                     const ng_train_opts *opts) {
  if (!out || out->size < sizeof out->size)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_trainer_estimate_memory: out is NULL or its size is not set "
                   "(NG_MEMORY_ESTIMATE_INIT)");
  NG_CHECK(ng__dataset_check(ds));
  NG_CHECK(ng__model_check(model));
  ng_train_opts o;
  NG_CHECK(ng__trainer_merge_opts(&o, opts));
  NG_CHECK(ng__trainer_check_opts(&o, ds, model, false));
  return ng__trainer_estimate(out, ds, model, &o, NULL);
}
