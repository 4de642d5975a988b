/* `train`: a model on a dataset folder; the training run it shares with `demo` (cmd_demo.c),
 * and the training options every one of them and `embed` (cmd_embed.c) accept. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define N_OPTS(a) (sizeof(a) / sizeof((a)[0]))

const char *const CLI_FEATURES_MEMORY_NAMES[] = {"auto", "mapped", "copy", NULL};
const char *const CLI_PRECISION_NAMES[] = {"fp32", "tf32", "bf16", NULL};
/* In ng_sampler_kind's order; "gpu" is the device sampler's name on the cuda device. */
const char *const CLI_SAMPLER_NAMES[] = {"auto", "cpu", "gpu", NULL};

/* Peak resident memory of this process so far, in bytes (getrusage: KiB on Linux). */
static int64_t peak_rss_bytes(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
}

static double gib(int64_t b) {
  return (double)b / (double)((int64_t)1 << 30);
}

/* Prints the memory estimate (docs/memory.md) on stderr before the trainer allocates anything. */
static ng_status print_estimate(ng_memory_estimate *e, ng_dataset_t ds, ng_model_t m,
                                const ng_train_opts *o, const char *command) {
  const ng_status st = ng_trainer_estimate_memory(e, ds, m, o);
  if (st != NG_OK)
    return st;
  fprintf(stderr,
          "neargnn %s: memory estimate %.2f GiB host = features %.2f + topology %.2f + staging "
          "%.2f (%d workers x %d slots of %.1f MiB packages) + inference %.2f + allowance %.2f"
          "; device %.2f GiB",
          command, gib(e->host_total), gib(e->features), gib(e->topology), gib(e->staging),
          (int)e->workers, (int)e->slots, (double)e->package_bytes / 1048576.0, gib(e->inference),
          gib(e->allowance), gib(e->device));
  if (o->max_host_memory > 0)
    fprintf(stderr, "; limit %.2f GiB", gib(o->max_host_memory));
  if (e->available > 0)
    fprintf(stderr, "; %.2f GiB available", gib(e->available));
  fputc('\n', stderr);
  return NG_OK;
}

/* The ranks of this launcher (--ranks N, one host) hold N copies of what one rank needs besides
 * the files they map together (the topology, and the feature table unless a rank owns a copy):
 * refused, on every rank before any allocation, when that exceeds --max-host-memory or else the
 * memory available. */
static int check_ranks_memory(ng_dataset_t ds, ng_model_t m, const cli_train_cfg *c,
                              const char *command) {
  const char *env = getenv("NG_RANKS");
  const int ranks = env && c->o.comm ? ng_comm_size(c->o.comm) : 1;
  if (ranks <= 1)
    return CLI_CONTINUE;
  const ng_train_opts o = c->o;
  ng_memory_estimate e = NG_MEMORY_ESTIMATE_INIT;
  const ng_status st = ng_trainer_estimate_memory(&e, ds, m, &o);
  if (st != NG_OK)
    return cli_runtime_error(st);
  const bool owned = o.normalize == NG_NORMALIZE_ROW || o.features_memory == NG_FEATURES_COPY;
  const int64_t shared = e.topology + (owned ? 0 : e.features);
  const int64_t each = e.host_total - shared;
  const int64_t total = shared + (int64_t)ranks * each;
  const int64_t limit = o.max_host_memory > 0 ? o.max_host_memory : e.available;
  if (limit <= 0 || total <= limit)
    return CLI_CONTINUE;
  const int64_t fit = each > 0 && limit > shared ? (limit - shared) / each : 0;
  if (ng_comm_rank(c->o.comm) == 0)
    fprintf(stderr,
            "neargnn %s: error: --ranks %d: the ranks' memory estimate is %.2f GiB (%.2f shared "
            "+ %d x %.2f), above %s %.2f GiB; use --ranks %lld or fewer, or fewer workers\n",
            command, ranks, gib(total), gib(shared), ranks, gib(each),
            o.max_host_memory > 0 ? "--max-host-memory" : "the memory available", gib(limit),
            (long long)(fit > 1 ? fit : 1));
  return CLI_EXIT_RUNTIME;
}

static void report_memory(cJSON *root, const ng_memory_estimate *e) {
  cJSON *j = cJSON_AddObjectToObject(root, "memory");
  if (!j)
    return;
  cJSON_AddNumberToObject(j, "features", (double)e->features);
  cJSON_AddNumberToObject(j, "topology", (double)e->topology);
  cJSON_AddNumberToObject(j, "staging", (double)e->staging);
  cJSON_AddNumberToObject(j, "inference", (double)e->inference);
  cJSON_AddNumberToObject(j, "allowance", (double)e->allowance);
  cJSON_AddNumberToObject(j, "host_total", (double)e->host_total);
  cJSON_AddNumberToObject(j, "device", (double)e->device);
  cJSON_AddNumberToObject(j, "hot_rows", (double)e->hot_rows);
  cJSON_AddNumberToObject(j, "workers", e->workers);
  cJSON_AddNumberToObject(j, "slots", e->slots);
  cJSON_AddNumberToObject(j, "package_bytes", (double)e->package_bytes);
  cJSON_AddNumberToObject(j, "available", (double)e->available);
  cJSON_AddNumberToObject(j, "peak_rss", (double)peak_rss_bytes());
}

/* --telemetry: the per-interval lines in one CSV file, the controller's decisions in another. */
typedef struct {
  FILE *lines, *decisions;
} telemetry_files;

static void on_telemetry(const ng_telemetry *t, void *ctx) {
  telemetry_files *f = ctx;
  fprintf(f->lines,
          "%" PRId64 ",%.3f,%.3f,%" PRId64 ",%.2f,%d,%d,%.3f,%.3f,%" PRId64 ",%" PRId64
          ",%d,%.3f,%.4g\n",
          t->epoch, t->t, t->seconds, t->iterations, t->it_per_s, t->workers[0], t->workers[1],
          t->group_it_per_s[0], t->group_it_per_s[1], t->pcie_bytes, t->cpu_cold_bytes,
          t->ring_depth, t->device_busy, t->device_share);
  fflush(f->lines);
  if (t->decisions[0]) {
    fputs(t->decisions, f->decisions);
    fflush(f->decisions);
  }
}

static int open_telemetry(telemetry_files *f, const char *path) {
  char dec[4096];
  snprintf(dec, sizeof dec, "%s.decisions.csv", path);
  f->lines = fopen(path, "w");
  f->decisions = f->lines ? fopen(dec, "w") : NULL;
  if (!f->lines || !f->decisions) {
    fprintf(stderr, "neargnn: error: cannot write %s: %s\n", f->lines ? dec : path,
            strerror(errno));
    if (f->lines)
      fclose(f->lines);
    f->lines = NULL;
    return CLI_EXIT_RUNTIME;
  }
  fputs("epoch,t,seconds,iterations,it_per_s,partial_workers,transfer_workers,partial_it_per_s,"
        "transfer_it_per_s,pcie_bytes,cpu_cold_bytes,ring_depth,device_busy,device_share\n",
        f->lines);
  fprintf(f->decisions, "%s\n", ng_telemetry_decisions_header());
  return CLI_CONTINUE;
}

static void close_telemetry(telemetry_files *f) {
  if (f->lines)
    fclose(f->lines);
  if (f->decisions)
    fclose(f->decisions);
}

/* The per-epoch line and the summary, on stdout; the JSON summary in `json` when given. */
typedef struct {
  cJSON *root, *epochs;
} report;

/* `tiered`: some feature rows live outside the hot tier, so the hit rate and the split of the
 * workers between PARTIAL and TRANSFER mean something (on the CPU every row is hot). */
static void report_epoch(report *r, const ng_epoch_stats *s, double val_acc, bool tiered) {
  printf("epoch %4" PRId64 "  loss %.4f  train-acc %.4f", s->epoch, s->loss, s->train_acc);
  if (val_acc >= 0)
    printf("  val-acc %.4f", val_acc);
  const double rows = (double)(s->fetch.hot_rows + s->fetch.cold_rows);
  const double hit = rows > 0 ? (double)s->fetch.hot_rows / rows : 0.0;
  printf("  %.1f it/s  %.3g edges/s", s->it_per_s,
         s->seconds > 0 ? (double)s->sampled_edges / s->seconds : 0.0);
  if (tiered)
    printf("  hit %.1f%%", 100.0 * hit);
  if (tiered && s->workers[0] + s->workers[1] > 0)
    printf("  split %d/%d", s->workers[0], s->workers[1]);
  if (s->ranks > 1)
    printf("  %d ranks, all-reduce %.3f ms/it", (int)s->ranks, s->allreduce_ms);
  printf("  %.2f s\n", s->seconds);
  fflush(stdout);
  if (!r->epochs)
    return;
  cJSON *e = cJSON_CreateObject();
  cJSON_AddNumberToObject(e, "epoch", (double)s->epoch);
  cJSON_AddNumberToObject(e, "loss", s->loss);
  cJSON_AddNumberToObject(e, "train_acc", s->train_acc);
  if (val_acc >= 0)
    cJSON_AddNumberToObject(e, "val_acc", val_acc);
  cJSON_AddNumberToObject(e, "iterations", (double)s->iterations);
  cJSON_AddNumberToObject(e, "seconds", s->seconds);
  cJSON_AddNumberToObject(e, "it_per_s", s->it_per_s);
  cJSON_AddNumberToObject(e, "sampled_edges", (double)s->sampled_edges);
  cJSON_AddNumberToObject(e, "hit_rate", hit);
  cJSON_AddNumberToObject(e, "hot_rows", (double)s->fetch.hot_rows);
  cJSON_AddNumberToObject(e, "cold_rows", (double)s->fetch.cold_rows);
  cJSON_AddNumberToObject(e, "h2d_bytes", (double)s->fetch.h2d_bytes);
  cJSON_AddNumberToObject(e, "zcopy_bytes", (double)s->fetch.zcopy_bytes);
  cJSON_AddNumberToObject(e, "cpu_cold_bytes", (double)s->fetch.cpu_cold_bytes);
  cJSON_AddNumberToObject(e, "cold_edges", (double)s->fetch.cold_edges);
  cJSON_AddNumberToObject(e, "destinations", (double)s->fetch.destinations);
  cJSON_AddNumberToObject(e, "iter_ms_median", s->iter_ms_median);
  cJSON_AddNumberToObject(e, "iter_ms_p99", s->iter_ms_p99);
  cJSON_AddNumberToObject(e, "partial_workers", s->workers[0]);
  cJSON_AddNumberToObject(e, "transfer_workers", s->workers[1]);
  cJSON_AddNumberToObject(e, "device_share", s->device_share);
  cJSON_AddNumberToObject(e, "ranks", s->ranks);
  cJSON_AddNumberToObject(e, "allreduce_ms", s->allreduce_ms);
  cJSON_AddItemToArray(r->epochs, e);
}

static int write_json(const char *path, cJSON *root) {
  char *text = cJSON_Print(root);
  if (!text) {
    fprintf(stderr, "neargnn: error: out of memory writing %s\n", path);
    return CLI_EXIT_RUNTIME;
  }
  /* The terminating NUL becomes the final newline: the text is written, not used as a string. */
  const size_t len = strlen(text);
  text[len] = '\n';
  const ng_status st = ng_file_write(path, text, len + 1);
  cJSON_free(text);
  return st == NG_OK ? CLI_EXIT_OK : cli_runtime_error(st);
}

/* Writes the predicted class of every node as int32 .npy, indexed by the original node ids
 * when the dataset was renumbered (orig_id.npy), so that users never see internal ids. */
static ng_status write_predictions(ng_trainer_t t, ng_dataset_t ds, int64_t nodes,
                                   const char *path) {
  int32_t *pred = malloc((size_t)nodes * sizeof *pred);
  int32_t *out = malloc((size_t)nodes * sizeof *out);
  const int64_t *orig = NULL;
  ng_status st = pred && out ? NG_OK : NG_ERR_NOMEM;
  if (st == NG_OK)
    st = ng_trainer_predict(pred, t);
  if (st == NG_OK)
    st = ng_dataset_orig_ids(&orig, ds);
  if (st == NG_OK && orig) {
    /* orig is a permutation of [0, nodes) for a renumbered dataset (checked on open). */
    for (int64_t v = 0; v < nodes; v++)
      out[orig[v]] = pred[v];
  } else if (st == NG_OK) {
    memcpy(out, pred, (size_t)nodes * sizeof *out);
  }
  const int64_t shape[1] = {nodes};
  if (st == NG_OK)
    st = ng_npy_save(path, 0, NG_INT32, 1, shape, out);
  free(pred);
  free(out);
  return st;
}

/* An accuracy, or n/a when the dataset has no such split (negative). */
static void print_accuracy(const char *what, double acc) {
  if (acc >= 0)
    printf("%-10s %.4f\n", what, acc);
  else
    printf("%-10s n/a (the dataset has no such split)\n", what);
}

static void add_accuracy(cJSON *root, const char *key, double acc) {
  if (acc >= 0)
    cJSON_AddNumberToObject(root, key, acc);
  else
    cJSON_AddNullToObject(root, key);
}

/* Spans per thread --trace records: 2^21 (64 MiB per thread at most), some 1,500 epochs of
 * 600 iterations on the device thread, which records the most. */
#define TRACE_SPANS ((int64_t)1 << 21)

/* What the run's progress callback notes besides showing progress: when the first and the
 * last training iteration finished (cli_now()), for the whole-run figures of --json. */
typedef struct {
  cli_progress *show;
  double first_iter, last_iter;
  /* --checkpoint-every: iterations trained since the last checkpoint (the library reports
   * progress at most 4 times a second, so they are counted from `done`), the epoch's last
   * `done`, when the last checkpoint was written, and whether the epoch was stopped for one. */
  int64_t every_iters, since;
  double every_s, prev_done, saved_at;
  bool stopped_for_checkpoint;
  /* Data-parallel runs write periodic checkpoints at epoch ends only: a pause of rank 0 alone
   * would split its epoch's figures from the other ranks' (docs/distributed.md). */
  bool epoch_ends_only;
} progress_notes;

static bool checkpoint_due(const progress_notes *n) {
  return (n->every_iters > 0 && n->since >= n->every_iters) ||
         (n->every_s > 0 && cli_now() - n->saved_at >= n->every_s);
}

static int note_progress(void *ctx, const char *phase, double done, double total) {
  progress_notes *n = ctx;
  bool stop = false;
  if (strcmp(phase, "train") == 0 && done > 0) {
    const double now = cli_now();
    if (n->first_iter == 0)
      n->first_iter = now;
    n->last_iter = now;
    n->since += (int64_t)(done >= n->prev_done ? done - n->prev_done : done);
    n->prev_done = done;
    /* Mid-epoch checkpoints stop the epoch as Ctrl-C does (the trainer resumes it at the next
     * iteration, bit-identically); at the epoch's end the loop writes it without a stop. */
    if (done < total && !n->epoch_ends_only && checkpoint_due(n)) {
      n->stopped_for_checkpoint = true;
      stop = true;
    }
  }
  int rc = cli_progress_cb(n->show, phase, done, total);
  return rc || stop;
}

/* Writes the periodic checkpoint (atomically: ng_trainer_save writes a temporary file beside
 * it, syncs it and renames it into place) and restarts the count. */
static ng_status periodic_checkpoint(ng_trainer_t t, progress_notes *n, const char *path) {
  n->since = 0;
  n->saved_at = cli_now();
  return ng_trainer_save(t, path);
}

/* Prints the op profile (--op-profile) as a table, slowest ops first, and adds it to the JSON
 * report as "device_ops". */
static void report_op_profile(ng_trainer_t t, cJSON *root) {
  ng_op_time ops[NG_OP_PROFILE_MAX];
  int n = 0;
  int64_t iters = 0;
  if (ng_trainer_op_profile(ops, (int)(sizeof ops / sizeof ops[0]), &n, &iters, t) != NG_OK ||
      n == 0 || iters == 0)
    return;
  double total = 0;
  for (int i = 0; i < n; i++)
    total += ops[i].ms;
  printf("device step, %" PRId64 " timed iterations: %.3f ms per iteration\n", iters,
         total / (double)iters);
  printf("  %-20s %5s %9s %7s %9s %9s\n", "op", "layer", "ms/iter", "share", "GFLOP/s", "GB/s");
  cJSON *arr = root ? cJSON_AddArrayToObject(root, "device_ops") : NULL;
  bool shown[NG_OP_PROFILE_MAX] = {false};
  for (int k = 0; k < n; k++) {
    int best = -1;
    for (int i = 0; i < n; i++)
      if (!shown[i] && (best < 0 || ops[i].ms > ops[best].ms))
        best = i;
    shown[best] = true;
    const ng_op_time *o = &ops[best];
    const double s = o->ms * 1e-3;
    printf("  %-20s %5d %9.4f %6.1f%% %9.1f %9.1f\n", o->name, o->layer, o->ms / (double)iters,
           total > 0 ? 100.0 * o->ms / total : 0.0, s > 0 ? o->flops / s * 1e-9 : 0.0,
           s > 0 ? o->bytes / s * 1e-9 : 0.0);
    cJSON *e = arr ? cJSON_CreateObject() : NULL;
    if (!e)
      continue;
    cJSON_AddStringToObject(e, "op", o->name);
    cJSON_AddNumberToObject(e, "layer", o->layer);
    cJSON_AddNumberToObject(e, "calls", (double)o->calls);
    cJSON_AddNumberToObject(e, "ms_per_iter", o->ms / (double)iters);
    cJSON_AddNumberToObject(e, "flops_per_iter", o->flops / (double)iters);
    cJSON_AddNumberToObject(e, "bytes_per_iter", o->bytes / (double)iters);
    cJSON_AddItemToArray(arr, e);
  }
  if (root) {
    cJSON_AddNumberToObject(root, "device_step_ms", total / (double)iters);
    cJSON_AddNumberToObject(root, "op_profile_iterations", (double)iters);
  }
}

/* The lines on stderr before the first epoch: the hot tier and the table the host reads, then
 * where the set-up went. */
static void print_setup(ng_trainer_t t, const cli_train_cfg *c, const ng_dataset_info *info,
                        const char *command) {
  int64_t hot = ng_trainer_hot_rows(t);
  const bool bf16 = c->o.precision == NG_PRECISION_BF16;
  fprintf(stderr,
          "neargnn %s: mode %s; hot tier %" PRId64 " of %" PRId64 " rows (%.1f%%, %.1f MiB) in "
          "%s memory; the host reads %s; %s sampler\n",
          command, ng_mode_name((ng_mode)c->o.mode), hot, info->nodes,
          info->nodes ? 100.0 * (double)hot / (double)info->nodes : 0.0,
          (double)hot * (double)info->feature_dim * (bf16 ? 2.0 : 4.0) / 1048576.0, c->o.device,
          bf16                                 ? "the bf16 table (features.bf16.npy or in memory)"
          : ng_trainer_features_copied(t) == 1 ? "its own copy of the features"
                                               : "the dataset's mapping of the features",
          ng_trainer_sampler(t));
  const ng_mode mode = (ng_mode)c->o.mode;
  if ((c->net.model == NG_MODEL_GAT || c->net.model == NG_MODEL_SAGE_POOL) && hot < info->nodes &&
      (mode == NG_MODE_AUTO || mode == NG_MODE_HYBRID || mode == NG_MODE_HYBRID_STATIC))
    fprintf(stderr,
            "neargnn %s: note: a GAT or SAGE-pool model's cold neighbours cannot be partially "
            "aggregated on the CPU (attention and pooling need the layer's weights); every "
            "worker transfers raw rows "
            "(--transfer decides batched or zero-copy)\n",
            command);
  ng_cache_info ci;
  if (c->o.comm && ng_trainer_cache_info(&ci, t) == NG_OK &&
      (ci.placement == NG_CACHE_PARTITIONED || c->o.cache_placement != NG_CACHE_REPLICATED))
    fprintf(stderr,
            "neargnn %s: cache %s: %" PRId64 " hot rows over %d GPU%s, %" PRId64
            " on this one (%s; chosen in %.3f s)\n",
            command, ng_cache_placement_name(ci.placement), ci.hot_rows, (int)ci.parts,
            ci.parts == 1 ? "" : "s", ci.gpu_rows, ci.why, ci.probe_s);
  ng_startup_times su;
  if (ng_trainer_startup(&su, t) == NG_OK)
    fprintf(
        stderr,
        "neargnn %s: set up in %.2f s (%.2f s since the start): features copied %.2f s, "
        "hot rows uploaded %.2f s, cold rows registered %.2f s, topology to the sampler %.2f s, "
        "staging slots of %.1f MB sized %.2f s\n",
        command, su.total_s, cli_now() - cli_start_time(), su.features_copy_s, su.hot_upload_s,
        su.register_s, su.sampler_s, (double)su.staging_slot_bytes / 1e6, su.staging_s);
}

/* The whole run's figures in the JSON report, from the command's start: what a user waits for. */
static void report_whole_run(cJSON *root, ng_trainer_t t, const progress_notes *notes,
                             const cli_train_cfg *c) {
  ng_startup_times su;
  if (ng_trainer_startup(&su, t) == NG_OK) {
    cJSON *js = cJSON_AddObjectToObject(root, "startup");
    if (js) {
      cJSON_AddNumberToObject(js, "ranks_join_s", c->join_s);
      cJSON_AddNumberToObject(js, "trainer_s", su.total_s);
      cJSON_AddNumberToObject(js, "features_copy_s", su.features_copy_s);
      cJSON_AddNumberToObject(js, "hot_upload_s", su.hot_upload_s);
      cJSON_AddNumberToObject(js, "register_s", su.register_s);
      cJSON_AddNumberToObject(js, "sampler_s", su.sampler_s);
      cJSON_AddNumberToObject(js, "staging_s", su.staging_s);
      cJSON_AddNumberToObject(js, "staging_slot_bytes", (double)su.staging_slot_bytes);
      cJSON_AddStringToObject(js, "sampler", ng_trainer_sampler(t));
    }
  }
  ng_cache_info ci;
  if (ng_trainer_cache_info(&ci, t) == NG_OK) {
    cJSON *jc = cJSON_AddObjectToObject(root, "cache");
    if (jc) {
      cJSON_AddStringToObject(jc, "placement", ng_cache_placement_name(ci.placement));
      cJSON_AddNumberToObject(jc, "parts", ci.parts);
      cJSON_AddNumberToObject(jc, "hot_rows", (double)ci.hot_rows);
      cJSON_AddNumberToObject(jc, "gpu_rows", (double)ci.gpu_rows);
      cJSON_AddNumberToObject(jc, "peer_gbs", ci.peer_gbs);
      cJSON_AddNumberToObject(jc, "h2d_gbs", ci.h2d_gbs);
      cJSON_AddNumberToObject(jc, "probe_s", ci.probe_s);
      cJSON_AddStringToObject(jc, "why", ci.why);
    }
  }
  if (notes->first_iter > 0) {
    cJSON_AddNumberToObject(root, "first_iteration_s", notes->first_iter - cli_start_time());
    cJSON_AddNumberToObject(root, "wall_to_last_step_s", notes->last_iter - cli_start_time());
  }
}

/* The host's DRAM read rate for the scaling floor: --dram-gbs, else the largest cpu_alone_gbs
 * of the --cache-bench file (bench_floor --json: CPU threads reading rows from the table), else
 * 0 (unknown). */
static double dram_gbs(const cli_train_cfg *c) {
  if (c->dram_gbs > 0.0)
    return c->dram_gbs;
  ng_bench_rates r = NG_BENCH_RATES_INIT;
  if (!c->o.cache_bench || ng_bench_rates_read(&r, c->o.cache_bench) != NG_OK)
    return 0.0;
  return r.dram_gbs;
}

/* The cold rows the host read and the scaling floor they set (docs/distributed.md): a line on
 * stdout for a run of several ranks (rank 0), and "cold_fetch" in the JSON summary. */
static void report_cold_fetch(ng_trainer_t t, const cli_train_cfg *c, double it_per_s, cJSON *root,
                              int rank) {
  ng_cold_fetch_stats cf = NG_COLD_FETCH_STATS_INIT;
  if (ng_trainer_cold_fetch(&cf, t) != NG_OK || cf.steps == 0)
    return;
  const double gbs = dram_gbs(c);
  const double floor_tps = gbs > 0.0 && cf.bytes_per_target > 0.0
                               ? gbs * 1e9 / cf.bytes_per_target
                               : 0.0; /* 0: unknown, or no cold byte (no DRAM bound) */
  const double tps = it_per_s * (double)c->o.batch;
  if (rank == 0 && cf.ranks > 1) {
    printf("cold rows (%s, %d ranks): %.1f needed, %.1f read from host memory per iteration, "
           "%.0f B/target",
           ng_cold_fetch_name(cf.mode), (int)cf.ranks, cf.rows_needed_per_step,
           cf.rows_read_per_step, cf.bytes_per_target);
    if (floor_tps > 0.0)
      printf("; floor %.3g targets/s at %.1f GB/s host DRAM, reached %.3g (%.0f%%)\n", floor_tps,
             gbs, tps, 100.0 * tps / floor_tps);
    else
      printf("; floor: %s\n", cf.bytes_per_target > 0.0
                                  ? "give --dram-gbs or a bench_floor --json as --cache-bench"
                                  : "none (no cold row)");
  }
  cJSON *j = root ? cJSON_AddObjectToObject(root, "cold_fetch") : NULL;
  if (!j)
    return;
  cJSON_AddStringToObject(j, "mode", ng_cold_fetch_name(cf.mode));
  cJSON_AddNumberToObject(j, "ranks", cf.ranks);
  cJSON_AddNumberToObject(j, "steps", (double)cf.steps);
  cJSON_AddNumberToObject(j, "rows_needed_per_step", cf.rows_needed_per_step);
  cJSON_AddNumberToObject(j, "rows_read_per_step", cf.rows_read_per_step);
  cJSON_AddNumberToObject(j, "rows_sent_per_step", cf.rows_sent_per_step);
  cJSON_AddNumberToObject(j, "row_bytes", (double)cf.row_bytes);
  cJSON_AddNumberToObject(j, "bytes_per_target", cf.bytes_per_target);
  cJSON_AddNumberToObject(j, "dram_gbs", gbs);
  cJSON_AddNumberToObject(j, "floor_targets_per_s", floor_tps);
  cJSON_AddNumberToObject(j, "targets_per_s", tps);
  cJSON_AddNumberToObject(j, "floor_ratio", floor_tps > 0.0 ? tps / floor_tps : 0.0);
  /* The NUMA placement rule's choice, reported, not applied (docs/distributed.md). */
  cJSON *p = cJSON_AddObjectToObject(root, "placement");
  cJSON_AddStringToObject(p, "kind", ng_numa_placement_name(cf.placement));
  cJSON_AddNumberToObject(p, "numa_nodes", cf.numa_nodes);
  cJSON_AddNumberToObject(p, "rank_node", cf.rank_node);
  cJSON_AddNumberToObject(p, "bw_share", cf.placement_bw_share);
  cJSON_AddNumberToObject(p, "floor_targets_per_s", floor_tps * cf.placement_bw_share);
  cJSON_AddBoolToObject(p, "applied", false);
}

/* --checkpoint-every N (iterations) or Nm (minutes, a decimal number); needs --checkpoint. */
static int parse_every(cli_train_files *f, const char *command, const char *text) {
  if (!f->checkpoint)
    return cli_usage_error(command, "--checkpoint-every needs --checkpoint FILE to write to");
  char *end = NULL;
  errno = 0;
  size_t n = strlen(text);
  if (n > 1 && text[n - 1] == 'm') {
    double minutes = strtod(text, &end);
    if (end == text + n - 1 && errno == 0 && minutes > 0 && minutes <= 1e6) {
      f->every_s = minutes * 60.0;
      return CLI_CONTINUE;
    }
  } else if (n > 0 && text[0] >= '0' && text[0] <= '9') {
    long long iters = strtoll(text, &end, 10);
    if (end == text + n && errno == 0 && iters > 0) {
      f->every_iters = iters;
      return CLI_CONTINUE;
    }
  }
  return cli_usage_error(command,
                         "--checkpoint-every '%s': give a positive number of iterations (500) or "
                         "of minutes (10m)",
                         text);
}

/* Rank r's own copy of an output file: PATH.rankR in `buf`, or NULL without a path. */
static const char *rank_path(char *buf, size_t cap, const char *path, int rank) {
  if (!path)
    return NULL;
  snprintf(buf, cap, "%s.rank%d", path, rank);
  return buf;
}

/* One training run's state, which its steps below share (cli_run_training). */
typedef struct {
  const cli_train_cfg *c;
  const char *command;
  int rank;
  const cli_train_files *f; /* this rank's files */
  ng_trainer_t t;
  ng_dataset_info info;
  ng_memory_estimate mem;
  cli_progress pr;
  progress_notes notes;
  report r;
  double total_s, total_it, total_edges, last_loss;
  double val, test; /* the final accuracies; -1: the split is not there */
} train_run;

/* The run's start: the memory estimate, the trainer (resumed from --resume), and the lines on
 * stderr about its set-up. */
static ng_status start_run(train_run *run, ng_dataset_t ds, ng_model_t m, const ng_train_opts *o) {
  const cli_train_cfg *c = run->c;
  const char *command = run->command;
  const cli_train_files *f = run->f;
  ng_status st = print_estimate(&run->mem, ds, m, o, command);
  if (st == NG_OK)
    st = ng_trainer_create(&run->t, ds, m, o);
  ng_trainer_t t = run->t;
  if (st == NG_OK && f->resume) {
    ng_checkpoint_info ci = NG_CHECKPOINT_INFO_INIT;
    if (ng_checkpoint_info_get(&ci, f->resume) == NG_OK && !ci.described)
      fprintf(stderr,
              "neargnn %s: warning: %s does not record the model's settings (an older "
              "checkpoint): they cannot be checked against this run's options; this run's "
              "checkpoint will record them\n",
              command, f->resume);
    st = ng_trainer_load(t, f->resume);
    if (st == NG_OK)
      fprintf(stderr, "neargnn %s: resumed from %s after epoch %" PRId64 "\n", command, f->resume,
              ng_trainer_epochs_done(t) - 1);
  }
  if (st == NG_OK)
    st = ng_dataset_info_get(&run->info, ds);
  if (st == NG_OK)
    print_setup(t, c, &run->info, command);
  ng_cache_info cache;
  if (st == NG_OK && c->o.comm && ng_trainer_cache_info(&cache, t) == NG_OK)
    fprintf(stderr,
            "neargnn %s: rank %d of %d (%s; %d on this host), every global batch (--batch) "
            "split between the ranks; feature cache %s\n",
            command, run->rank, ng_comm_size(c->o.comm), ng_comm_kind(c->o.comm),
            ng_comm_local_size(c->o.comm),
            cache.placement == NG_CACHE_PARTITIONED
                ? "partitioned: the ranks' GPUs cache the hot rows between them"
                : "replicated: every rank caches the same hot rows");
  return st;
}

/* The epochs up to --epochs, each reported, with the periodic checkpoints. */
static ng_status train_epochs(train_run *run) {
  const cli_train_cfg *c = run->c;
  ng_trainer_t t = run->t;
  const char *checkpoint = run->f->checkpoint;
  progress_notes *notes = &run->notes;
  ng_status st = NG_OK;
  while (st == NG_OK && ng_trainer_epochs_done(t) < c->epochs) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    st = ng_trainer_epoch(&s, t);
    if (st == NG_ERR_INTERRUPTED && notes->stopped_for_checkpoint && !cli_progress_interrupted()) {
      notes->stopped_for_checkpoint = false;
      st = periodic_checkpoint(t, notes, checkpoint);
      continue; /* the same epoch goes on at its next iteration */
    }
    notes->stopped_for_checkpoint = false;
    if (st != NG_OK)
      break;
    double val = -1.0;
    bool eval_now = run->rank == 0 && run->info.val > 0 && c->eval_every > 0 &&
                    ((s.epoch + 1) % c->eval_every == 0);
    if (eval_now)
      st = ng_trainer_evaluate(&val, NULL, t, NG_SPLIT_VAL);
    if (st != NG_OK)
      break;
    cli_progress_clear(&run->pr);
    if (s.epoch == 0 || s.iterations == 0)
      fprintf(stderr, "neargnn %s: %s\n", run->command, ng_trainer_placement(t));
    report_epoch(&run->r, &s, val, ng_trainer_hot_rows(t) < run->info.nodes);
    run->total_s += s.seconds;
    run->total_it += (double)s.iterations;
    run->total_edges += (double)s.sampled_edges;
    run->last_loss = s.loss;
    /* Ctrl-C while the line above was printed, or while the library did not report. */
    if (cli_progress_interrupted())
      st = NG_ERR_INTERRUPTED;
    if (st == NG_OK && checkpoint && ng_trainer_epochs_done(t) < c->epochs && checkpoint_due(notes))
      st = periodic_checkpoint(t, notes, checkpoint);
  }
  return st;
}

/* After the epochs (`st` their status): the checkpoint (*ck its status), the final evaluation
 * and the predictions. */
static ng_status finish_run(train_run *run, ng_dataset_t ds, ng_status st, ng_status *ck) {
  ng_trainer_t t = run->t;
  const char *command = run->command, *checkpoint = run->f->checkpoint;
  const ng_dataset_info info = run->info;
  /* The checkpoint comes before the final evaluation, so that nothing trained is lost if the
   * evaluation fails; after an interruption it holds every completed iteration, and --resume
   * continues with the next one. */
  *ck = NG_OK;
  if (t && checkpoint && (st == NG_OK || st == NG_ERR_INTERRUPTED)) {
    *ck = ng_trainer_save(t, checkpoint);
    if (*ck == NG_OK)
      fprintf(stderr, "neargnn %s: checkpoint written to %s (%" PRId64 " complete epochs%s)\n",
              command, checkpoint, ng_trainer_epochs_done(t),
              st == NG_ERR_INTERRUPTED ? ", and part of the next: --resume continues it" : "");
  }
  /* Splits a dataset does not have are reported as such, not evaluated. */
  run->test = -1.0;
  run->val = -1.0;
  if (st == NG_OK && *ck == NG_OK && info.val > 0 && run->rank == 0)
    st = ng_trainer_evaluate(&run->val, NULL, t, NG_SPLIT_VAL);
  if (st == NG_OK && *ck == NG_OK && info.test > 0 && run->rank == 0)
    st = ng_trainer_evaluate(&run->test, NULL, t, NG_SPLIT_TEST);
  if (st == NG_OK && *ck == NG_OK && run->f->predictions) {
    st = write_predictions(t, ds, info.nodes, run->f->predictions);
    if (st == NG_OK)
      fprintf(stderr, "neargnn %s: predictions written to %s (int32 per node, %s ids)\n", command,
              run->f->predictions, info.orig_ids ? "original" : "dataset");
  }
  return st;
}

/* The timeline is written whatever happened, an error or Ctrl-C included: it shows where the
 * run stood. Its own failure is the run's error only when nothing else failed (*st); otherwise
 * the earlier error's message is kept in earlier[cap] for the report, and the result is true. */
static bool write_trace(train_run *run, ng_status *st, ng_status ck, char *earlier, size_t cap) {
  ng_trainer_t t = run->t;
  const char *trace = run->f->trace;
  if (!t || !trace)
    return false;
  snprintf(earlier, cap, "%s", ng_last_error());
  int64_t recorded = 0, dropped = 0;
  const ng_status tr = ng_trainer_write_trace(t, trace, &recorded, &dropped);
  if (tr == NG_OK) {
    fprintf(stderr, "neargnn %s: trace of %" PRId64 " spans written to %s%s\n", run->command,
            recorded, trace, dropped ? " (later spans dropped: the per-thread limit)" : "");
  } else if (*st == NG_OK && ck == NG_OK) {
    *st = tr;
  } else {
    fprintf(stderr, "neargnn %s: no trace written: %s\n", run->command, ng_last_error());
    return true;
  }
  return false;
}

/* The summary of a run that succeeded: stdout, and the JSON report when asked for. Returns the
 * exit status. */
static int report_run(train_run *run) {
  const cli_train_cfg *c = run->c;
  ng_trainer_t t = run->t;
  const char *json = run->f->json;
  const double total_s = run->total_s, total_it = run->total_it, total_edges = run->total_edges;
  cJSON *root = run->r.root;
  int rc = CLI_EXIT_OK;
  if (total_it > 0)
    printf("throughput %.1f it/s  %.3g sampled edges/s  (%.0f iterations in %.2f s)\n",
           total_s > 0 ? total_it / total_s : 0.0, total_s > 0 ? total_edges / total_s : 0.0,
           total_it, total_s);
  else /* a resumed run that had every epoch already: only the evaluation below */
    printf("no epoch trained: the checkpoint has %" PRId64 " of --epochs %" PRId64
           " (neargnn evaluate reports every split)\n",
           ng_trainer_epochs_done(t), c->epochs);
  print_accuracy("val-acc", run->val);
  print_accuracy("test-acc", run->test);
  report_cold_fetch(t, c, total_s > 0 ? total_it / total_s : 0.0, json ? root : NULL, run->rank);
  report_op_profile(t, json ? root : NULL);
  if (json && root) {
    report_whole_run(root, t, &run->notes, c);
    report_memory(root, &run->mem);
    add_accuracy(root, "val_acc", run->val);
    add_accuracy(root, "test_acc", run->test);
    cJSON_AddNumberToObject(root, "final_loss", run->last_loss);
    cJSON_AddNumberToObject(root, "train_seconds", total_s);
    cJSON_AddNumberToObject(root, "it_per_s", total_s > 0 ? total_it / total_s : 0.0);
    cJSON_AddNumberToObject(root, "edges_per_s", total_s > 0 ? total_edges / total_s : 0.0);
    char seed[24]; /* as an exact integer: a double would round seeds above 2^53 */
    snprintf(seed, sizeof seed, "%" PRIu64, c->o.seed);
    cJSON_AddRawToObject(root, "seed", seed);
    cJSON_AddNumberToObject(root, "ranks", c->o.comm ? ng_comm_size(c->o.comm) : 1);
    cJSON_AddNumberToObject(root, "rank", run->rank);
    rc = write_json(json, root);
  }
  return rc;
}

/* Trains `epochs` epochs of `m` on `ds` and evaluates; the shared core of train and demo. */
int cli_run_training(ng_dataset_t ds, ng_model_t m, const cli_train_cfg *c, const char *command,
                     int progress, const cli_train_files *files) {
  /* Ranks but the first train and stay quiet: rank 0 prints, evaluates and writes the files
   * (every rank holds the same parameters); each rank writes its own trace and JSON summary
   * (its own epochs' figures: its workers' split, its fetches), FILE.rankR. */
  const int rank = c->o.comm ? ng_comm_rank(c->o.comm) : 0;
  cli_train_files rank_files = *files;
  char rank_trace[4096], rank_json[4096];
  if (rank > 0) {
    rank_files = (cli_train_files){.resume = files->resume};
    rank_files.trace = rank_path(rank_trace, sizeof rank_trace, files->trace, rank);
    rank_files.json = rank_path(rank_json, sizeof rank_json, files->json, rank);
    progress = CLI_PROGRESS_NONE;
    if (!freopen("/dev/null", "w", stdout))
      return cli_usage_error(command, "rank %d cannot silence its output", rank);
  }
  const cli_train_files *f = &rank_files;
  /* The command line's options, with this run's trace, telemetry and progress. */
  ng_train_opts o = c->o;
  o.trace_spans = f->trace ? TRACE_SPANS : 0;
  telemetry_files tf = {NULL, NULL};
  if (f->telemetry) {
    int trc = open_telemetry(&tf, f->telemetry);
    if (trc != CLI_CONTINUE)
      return trc;
    o.telemetry = on_telemetry;
    o.telemetry_ctx = &tf;
  }
  train_run run = {.c = c,
                   .command = command,
                   .rank = rank,
                   .f = f,
                   .info = NG_DATASET_INFO_INIT,
                   .mem = NG_MEMORY_ESTIMATE_INIT,
                   .last_loss = NAN};
  cli_progress_begin(&run.pr, command, (cli_progress_mode)progress);
  run.notes = (progress_notes){.show = &run.pr,
                               .every_iters = f->every_iters,
                               .every_s = f->every_s,
                               .saved_at = cli_now(),
                               .epoch_ends_only = c->o.comm != NULL};
  o.progress = note_progress;
  o.progress_ctx = &run.notes;
  ng_status st = start_run(&run, ds, m, &o);
  run.r = (report){cJSON_CreateObject(), NULL};
  if (run.r.root)
    run.r.epochs = cJSON_AddArrayToObject(run.r.root, "epochs");
  if (st == NG_OK)
    st = train_epochs(&run);
  ng_status ck = NG_OK;
  st = finish_run(&run, ds, st, &ck);
  char earlier[1024] = "";
  const bool keep_earlier = write_trace(&run, &st, ck, earlier, sizeof earlier);
  cli_progress_end(&run.pr, st);
  int rc = CLI_EXIT_OK;
  if (st == NG_OK && ck == NG_OK) {
    rc = report_run(&run);
  } else if (st == NG_ERR_INTERRUPTED && ck == NG_OK) {
    fprintf(stderr, "neargnn %s: interrupted\n", command);
    rc = CLI_EXIT_INTERRUPTED;
  } else if (keep_earlier) {
    rc = cli_runtime_error_detail(st != NG_OK ? st : ck, earlier);
  } else {
    rc = cli_runtime_error(st != NG_OK ? st : ck);
  }
  cJSON_Delete(run.r.root);
  ng_trainer_destroy(run.t);
  close_telemetry(&tf);
  return rc;
}

/* Over 100 lines with a reason: half of them are the option table and the help text, which read
 * best whole; the rest starts the ranks and hands over to cli_run_training or cli_train_link. */
int cmd_train(int argc, char **argv) {
  cli_train_cfg c = {.o = NG_TRAIN_OPTS_INIT,
                     .net = {.fanouts = "25,10", .weight_decay = "0", .hidden = 256},
                     .epochs = 10,
                     .eval_every = 1};
  const char *dataset = NULL;
  cli_train_files files = {NULL, NULL, NULL, NULL, NULL, NULL, 0, 0.0};
  const char *every = NULL;
  int progress = CLI_PROGRESS_AUTO;
  int32_t ranks = 1;
  int check_features = 0;
  cli_link_cfg link = {.neg_per_pos = 1};
  cli_opt opts[] = {
      CLI_OPT_STRING("dataset", &dataset, "DIR", "dataset folder", .required = true),
      CLI_OPT_CHECK_FEATURES(&check_features),
      CLI_TRAIN_OPTS(&c),
      CLI_LINK_OPTS(&link),
      CLI_OPT_STRING("checkpoint", &files.checkpoint, "FILE",
                     "write model + optimizer state here at the end (safetensors), also after "
                     "Ctrl-C"),
      CLI_OPT_STRING("checkpoint-every", &every, "N|Nm",
                     "also write the checkpoint every N iterations (or N minutes: 10m) during "
                     "training, atomically, so that kill -9 loses at most that much"),
      CLI_OPT_STRING("resume", &files.resume, "FILE",
                     "continue from a checkpoint, bit-identically"),
      CLI_OPT_STRING("json", &files.json, "FILE", "write a machine-readable summary"),
      CLI_OPT_STRING("predictions", &files.predictions, "FILE",
                     "write the predicted class of every node (int32 .npy, original node ids)"),
      CLI_OPT_STRING("telemetry", &files.telemetry, "FILE",
                     "write per-second telemetry as CSV (and the scheduler's decisions to "
                     "FILE.decisions.csv)"),
      CLI_OPT_STRING("trace", &files.trace, "FILE",
                     "write a timeline of the runtime's threads as Chrome trace JSON (open it in "
                     "ui.perfetto.dev; eval/harness/trace_summary.py sums it up)"),
      CLI_OPT_INT("ranks", &ranks, "N", 1, 4096,
                  "data-parallel ranks on this host, one per GPU (docs/distributed.md): forks N "
                  "copies that train slices of every --batch and sum the gradients; under mpirun "
                  "the ranks are mpirun's"),
      CLI_OPT_PROGRESS(&progress),
  };
  cli_spec spec = {
      .command = "train",
      .synopsis = "--dataset DIR [options]",
      .about = "Trains a GraphSAGE, GCN, GAT, GIN or SAGE-pool model with sampled mini-batches and "
               "reports, per "
               "epoch, the loss, training and validation accuracy and throughput; at the end the "
               "test accuracy (full-neighbour inference).",
      .opts = opts,
      .n_opts = N_OPTS(opts),
      .notes = "--epochs counts from the start of training, so --resume with the same --epochs "
               "finishes the interrupted run. Kipf & Welling's GCN: --model gcn --fanouts -1,-1 "
               "--batch 0 --hidden 16 --dropout 0.5 --weight-decay 5e-4,0 --normalize-features "
               "row --epochs 200 --eval-every 0.",
      .example = "neargnn train --dataset data/cora --model sage --fanouts 25,10 --hidden 64 "
                 "--epochs 50 --batch 0 --dropout 0.5 --weight-decay 5e-4,0 "
                 "--normalize-features row",
  };
  int rc = cli_parse(&spec, argc, argv);
  if (rc != CLI_CONTINUE)
    return rc;
  if (every && (rc = parse_every(&files, spec.command, every)) != CLI_CONTINUE)
    return rc;
  if (ranks > 1 && !cli_launched_rank()) {
    /* Every rank runs its own workers and device thread: ranks sharing cores make no progress. */
    cpu_set_t set;
    const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (cores > 0 && ranks > cores)
      return cli_usage_error(spec.command,
                             "--ranks %d: every rank needs a core of its own, and this process "
                             "may use %d; use --ranks %d or fewer",
                             (int)ranks, cores, cores);
    return cli_launch(spec.command, argc, argv, ranks);
  }
  /* One rank of several (this launcher's, or mpirun's), or a plain run. */
  const double join0 = cli_now();
  ng_status st = ng_comm_create(&c.o.comm, "auto");
  c.join_s = cli_now() - join0; /* rank 0 waits here for the others to start and connect */
  if (st != NG_OK)
    return cli_runtime_error(st);
  if (ng_comm_size(c.o.comm) == 1) {
    ng_comm_destroy(c.o.comm);
    c.o.comm = NULL;
  }
  ng_dataset_t ds = NULL;
  st = cli_dataset_open(&ds, dataset, check_features);
  if (st != NG_OK) {
    ng_comm_destroy(c.o.comm);
    return cli_runtime_error(st);
  }
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  ng_model_t m = NULL;
  st = ng_dataset_info_get(&info, ds);
  if (st == NG_OK && link.task == 1) {
    /* Link prediction (cmd_link.c): the last layer is the embedding, not the classes. */
    ng_dataset_info shape = info;
    shape.classes = (int32_t)(link.embed_dim > 0 ? link.embed_dim : c.net.hidden);
    if (c.o.comm || ranks > 1)
      rc = cli_usage_error(spec.command, "--task link runs in one process (no --ranks)");
    else if ((rc = cli_build_model(&m, spec.command, &c.net, &shape)) == CLI_CONTINUE)
      rc = cli_train_link(ds, m, &c.o, &link, c.epochs, c.eval_every, files.json, files.checkpoint);
  } else if (st != NG_OK) {
    rc = cli_runtime_error(st);
  } else if ((rc = cli_build_model(&m, spec.command, &c.net, &info)) == CLI_CONTINUE &&
             (rc = check_ranks_memory(ds, m, &c, spec.command)) == CLI_CONTINUE) {
    rc = cli_run_training(ds, m, &c, spec.command, progress, &files);
  }
  ng_model_destroy(m);
  ng_dataset_close(ds);
  ng_comm_destroy(c.o.comm);
  return rc;
}
