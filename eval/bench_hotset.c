/* Hot-set hit rates: how many of the feature rows that sampled mini-batches read fall into a
 * GPU cache of the first H node ids, for each hot-set score (docs/tiering.md).
 *
 *   bench_hotset [options] [DATASET_DIR]
 *
 * Without a folder it generates a power-law dataset (ng_dataset_generate, no features) into a
 * temporary folder. For the original order and for each score it renumbers the dataset
 * (ng_dataset_reorder into a temporary folder), then samples one epoch of mini-batches of the
 * training split (2 layers, fanouts 25,10 from the targets outwards) and counts the input layer's
 * source nodes (blocks[0] sources, i.e. the rows whose features a batch reads) with id < H for
 * H = 5%, 10% and 25% of the nodes. Temporary folders are removed at the end. */
#include "dataset_impl.h"
#include "sampler_impl.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_RATIOS 3
static const double RATIO[N_RATIOS] = {0.05, 0.10, 0.25};
/* Fanouts per block index (0 = input layer): 25 next to the targets, 10 one hop further. */
static const int32_t FANOUT[2] = {10, 25};

typedef struct {
  int64_t nodes;
  double avg_degree;
  int32_t batch;
  int64_t batches; /* 0: one epoch of the training split */
  int32_t iterations;
  int threads;
  uint64_t seed;
  const char *dir;
} bench_opts;

static void usage(FILE *f) {
  fprintf(f, "usage: bench_hotset [options] [DATASET_DIR]\n"
             "  --nodes N        generated graph size when no folder is given (default 1000000)\n"
             "  --avg-degree F   mean neighbours per node of the generated graph (default 15)\n"
             "  --batch B        targets per mini-batch (default 1024)\n"
             "  --batches K      mini-batches per order (default: one epoch of the train split)\n"
             "  --iterations N   PageRank iterations of rpr and wrpr (default 10)\n"
             "  --threads T      threads (default: OpenMP's default)\n"
             "  --seed S         seed of the generated graph and of the sampling (default 1)\n");
}

static int parse_num(const char *s, double lo, double hi, double *out, const char *what) {
  char *end;
  double v = s ? strtod(s, &end) : NAN;
  if (!s || *s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) {
    fprintf(stderr, "bench_hotset: %s '%s': expected a number in [%g, %g]\n", what, s ? s : "", lo,
            hi);
    return 2;
  }
  *out = v;
  return 0;
}

static int parse_args(bench_opts *o, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    double x = 0;
    int rc = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--nodes")) {
      rc = parse_num(v, 2, 1e12, &x, a);
      o->nodes = (int64_t)x;
    } else if (!strcmp(a, "--avg-degree")) {
      rc = parse_num(v, 0.01, 1e6, &x, a);
      o->avg_degree = x;
    } else if (!strcmp(a, "--batch")) {
      rc = parse_num(v, 1, 1 << 20, &x, a);
      o->batch = (int32_t)x;
    } else if (!strcmp(a, "--batches")) {
      rc = parse_num(v, 0, 1e9, &x, a);
      o->batches = (int64_t)x;
    } else if (!strcmp(a, "--iterations")) {
      rc = parse_num(v, 1, 1000, &x, a);
      o->iterations = (int32_t)x;
    } else if (!strcmp(a, "--threads")) {
      rc = parse_num(v, 1, 4096, &x, a);
      o->threads = (int)x;
    } else if (!strcmp(a, "--seed")) {
      rc = parse_num(v, 0, 9e15, &x, a);
      o->seed = (uint64_t)x;
    } else if (a[0] == '-' || o->dir) {
      usage(stderr);
      return 2;
    } else {
      o->dir = a;
      continue;
    }
    if (rc)
      return rc;
    i++;
  }
  return 0;
}

/* Removes a dataset folder (flat: files only) that this program created. */
static void remove_folder(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
  rmdir(dir);
}

typedef struct {
  int64_t inputs;         /* input-layer source nodes over all batches */
  int64_t hits[N_RATIOS]; /* of them, with id < H */
  int64_t batches;
} hit_count;

/* Samples `o->batches` mini-batches of ds's shuffled training split and counts cache hits. */
static ng_status measure(hit_count *out, const struct ng_dataset *ds, const bench_opts *o,
                         ng_sample_arena **arenas) {
  memset(out, 0, sizeof *out);
  int64_t n_train = ds->info.train;
  int64_t per_epoch = n_train / o->batch;
  if (per_epoch == 0) {
    fprintf(stderr, "bench_hotset: %s: %lld training nodes, fewer than one batch of %d\n", ds->dir,
            (long long)n_train, (int)o->batch);
    return NG_ERR_INVALID_ARG;
  }
  int64_t batches = o->batches > 0 ? o->batches : per_epoch;
  int64_t *order = malloc((size_t)n_train * sizeof *order);
  if (!order)
    return NG_ERR_NOMEM;
  ng__epoch_shuffle(order, ds->split[0], n_train, o->seed, 0);
  ng_sampler_cfg cfg = {.graph = &ds->csr, .n_layers = 2};
  cfg.fanout[0] = FANOUT[0];
  cfg.fanout[1] = FANOUT[1];
  int64_t hot[N_RATIOS];
  for (int k = 0; k < N_RATIOS; k++)
    hot[k] = (int64_t)floor(RATIO[k] * (double)ds->info.nodes);
  int64_t inputs = 0, h0 = 0, h1 = 0, h2 = 0;
  ng_status st = NG_OK;
#pragma omp parallel num_threads(o->threads) reduction(+ : inputs, h0, h1, h2)
  {
    ng_sample_arena *a = arenas[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < batches; b++) {
      ng_minibatch mb;
      ng_status s = ng__sample(&mb, a, &cfg, order + (b % per_epoch) * o->batch, o->batch,
                               ng__iter_seed(o->seed, 0, b));
      if (s != NG_OK) {
#pragma omp critical
        if (st == NG_OK) {
          st = s;
          fprintf(stderr, "bench_hotset: %s: %s\n", ng_status_str(s), ng_last_error());
        }
        continue;
      }
      int64_t n_src = mb.blocks[0].n_src;
      inputs += n_src;
      for (int64_t i = 0; i < n_src; i++) {
        int64_t id = mb.node_ids[i];
        h0 += id < hot[0];
        h1 += id < hot[1];
        h2 += id < hot[2];
      }
    }
  }
  free(order);
  out->inputs = inputs;
  out->hits[0] = h0;
  out->hits[1] = h1;
  out->hits[2] = h2;
  out->batches = batches;
  return st;
}

int main(int argc, char **argv) {
  bench_opts o = {.nodes = 1000000, .avg_degree = 15, .batch = 1024, .iterations = 10, .seed = 1};
  int rc = parse_args(&o, argc, argv);
  if (rc)
    return rc;
  if (o.threads <= 0)
    o.threads = omp_get_max_threads();

  const char *tmp_root = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char tmp[4096], src_dir[4200], dst_dir[4200];
  snprintf(tmp, sizeof tmp, "%s/bench_hotset-XXXXXX", tmp_root);
  if (!mkdtemp(tmp)) {
    perror("bench_hotset: cannot create a temporary folder");
    return 1;
  }
  ng_status st = NG_OK;
  ng_dataset_t src = NULL;
  ng_sample_arena **arenas = calloc((size_t)o.threads, sizeof *arenas);
  if (!arenas) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int t = 0; t < o.threads && st == NG_OK; t++)
    st = ng__sample_arena_create(&arenas[t]);
  if (st != NG_OK)
    goto done;

  if (o.dir) {
    snprintf(src_dir, sizeof src_dir, "%s", o.dir);
  } else {
    snprintf(src_dir, sizeof src_dir, "%s/generated", tmp);
    ng_generate_opts g = NG_GENERATE_OPTS_INIT;
    g.nodes = o.nodes;
    g.avg_degree = o.avg_degree;
    g.feature_dim = 0;
    g.seed = o.seed;
    g.threads = o.threads;
    double t0 = ng__now();
    if ((st = ng_dataset_generate(src_dir, &g)) != NG_OK)
      goto done;
    printf("generated %lld nodes, avg degree %g, in %.2f s\n", (long long)o.nodes, o.avg_degree,
           ng__now() - t0);
  }
  if ((st = ng_dataset_open(&src, src_dir, NULL)) != NG_OK)
    goto done;
  printf("dataset %s: %lld nodes, %lld edges, %lld training nodes\n", src_dir,
         (long long)src->info.nodes, (long long)src->info.edges, (long long)src->info.train);
  printf("fanout 25,10, batch %d, threads %d, seed %llu\n\n", (int)o.batch, o.threads,
         (unsigned long long)o.seed);
  printf("%-9s %9s %9s %9s %9s %13s %10s\n", "order", "hit 5%", "hit 10%", "hit 25%", "batches",
         "inputs/batch", "reorder s");

  const char *names[] = {"original", "degree", "rpr", "wrpr"};
  const ng_hot_score kinds[] = {NG_HOT_DEGREE, NG_HOT_DEGREE, NG_HOT_RPR, NG_HOT_WRPR};
  for (int k = 0; k < 4 && st == NG_OK; k++) {
    ng_dataset_t ds = src;
    double seconds = 0;
    if (k > 0) {
      snprintf(dst_dir, sizeof dst_dir, "%s/%s", tmp, names[k]);
      ng_reorder_opts r = NG_REORDER_OPTS_INIT;
      r.score = kinds[k];
      r.iterations = o.iterations;
      r.threads = o.threads;
      double t0 = ng__now();
      if ((st = ng_dataset_reorder(dst_dir, src, &r)) != NG_OK)
        break;
      seconds = ng__now() - t0;
      if ((st = ng_dataset_open(&ds, dst_dir, NULL)) != NG_OK) {
        remove_folder(dst_dir);
        break;
      }
    }
    hit_count c;
    st = measure(&c, ds, &o, arenas);
    if (st == NG_OK) {
      double in = (double)NG_MAX(c.inputs, 1);
      printf("%-9s %8.2f%% %8.2f%% %8.2f%% %9lld %13.0f ", names[k], 100.0 * (double)c.hits[0] / in,
             100.0 * (double)c.hits[1] / in, 100.0 * (double)c.hits[2] / in, (long long)c.batches,
             (double)c.inputs / (double)c.batches);
      if (k > 0)
        printf("%10.2f\n", seconds);
      else
        printf("%10s\n", "-");
    }
    if (ds != src) {
      ng_dataset_close(ds);
      remove_folder(dst_dir);
    }
  }
done:
  if (st != NG_OK)
    fprintf(stderr, "bench_hotset: %s: %s\n", ng_status_str(st), ng_last_error());
  ng_dataset_close(src);
  if (arenas)
    for (int t = 0; t < o.threads; t++)
      ng__sample_arena_destroy(arenas[t]);
  free(arenas);
  if (!o.dir)
    remove_folder(src_dir);
  rmdir(tmp);
  return st == NG_OK ? 0 : 1;
}
