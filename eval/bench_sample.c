/* Neighbour-sampling throughput: sampled edges per second, in total and per core.
 *
 *   bench_sample [options] [DATASET_DIR]
 *
 * With a dataset folder it samples that graph (targets: the train split, else every node);
 * without one it builds a synthetic power-law graph in memory. Each thread owns an arena and
 * takes iterations from a shared counter, as the training workers do. */
#include "dataset_impl.h"
#include "sampler_impl.h"
#include "feature_store_impl.h"
#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The synthetic graph: row lengths follow a discrete power law P(d) ~ d^-ALPHA for d >= DMIN
 * (mean about 15, as sparse citation and product graphs), capped at DMAX_FRACTION of the nodes;
 * neighbours are drawn in proportion to the row lengths (Chung-Lu), so hubs are also the most
 * referenced nodes. */
#define SYN_ALPHA 2.5
#define SYN_DMIN 5
#define SYN_DMAX_FRACTION 0.01

/* Which blocks get their transpose: none, those training needs (every block but the input
 * layer's, whose backward never runs: the trainer's choice), or all. */
enum { TRANSPOSE_NONE, TRANSPOSE_TRAINING, TRANSPOSE_ALL };

typedef struct {
  int64_t nodes;
  int threads;
  int64_t iters;
  int32_t batch;
  int n_layers;
  int32_t fanout[NG_MAX_LAYERS]; /* block index order (0 = input layer) */
  bool gcn;
  int transpose; /* TRANSPOSE_* */
  uint64_t seed;
  double hot_ratio; /* < 0: no cold-edge count */
  const char *dir;
  bool cuda; /* --device cuda: the CUDA backend's device sampler, from one thread */
} bench_opts;

static void usage(FILE *f) {
  fprintf(f, "usage: bench_sample [options] [DATASET_DIR]\n"
             "  --nodes N       synthetic graph size when no folder is given (default 2000000)\n"
             "  --threads T     sampling threads, one arena each (default: OpenMP's default)\n"
             "  --iters I       mini-batches in the timed run (default 400)\n"
             "  --batch B       targets per mini-batch (default 1024)\n"
             "  --fanout LIST   neighbours per layer from the targets outwards (default 25,10)\n"
             "  --gcn           also compute GCN edge and self weights\n"
             "  --transpose     also build the transposed blocks training needs (every block but\n"
             "                  the input layer's, as the trainer does)\n"
             "  --transpose-all also build the input layer's transposed block\n"
             "  --seed S        seed of the graph and of the sampling (default 1)\n"
             "  --device cuda   sample on the GPU (the device sampler, one host thread; the\n"
             "                  blocks copied back to host memory as training's feed does)\n"
             "  --hot-ratio R   also count the input layer's cold edges per destination, the\n"
             "                  hot tier being the first R x nodes ids (as --cache-ratio R of a\n"
             "                  renumbered dataset); printed as 'cold_edges_per_dst X'\n");
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out, const char *what) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "bench_sample: %s '%s': expected an integer in [%lld, %lld]\n", what, s,
            (long long)lo, (long long)hi);
    return 2;
  }
  *out = v;
  return 0;
}

static int parse_f64(const char *s, double lo, double hi, double *out, const char *what) {
  char *end;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) {
    fprintf(stderr, "bench_sample: %s '%s': expected a number in [%g, %g]\n", what, s, lo, hi);
    return 2;
  }
  *out = v;
  return 0;
}

/* "25,10": the first count is the output layer's (each target's neighbours). */
static int parse_fanout(const char *s, bench_opts *o) {
  int32_t vals[NG_MAX_LAYERS];
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (v != -1 && v < 1) || v > INT32_MAX || n == NG_MAX_LAYERS ||
        (*end != ',' && *end != '\0')) {
      fprintf(stderr,
              "bench_sample: --fanout '%s': expected 1 to %d comma-separated counts >= 1 or -1\n",
              s, NG_MAX_LAYERS);
      return 2;
    }
    vals[n++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  if (n == 0) {
    fprintf(stderr, "bench_sample: --fanout is empty\n");
    return 2;
  }
  o->n_layers = n;
  for (int i = 0; i < n; i++)
    o->fanout[n - 1 - i] = vals[i];
  return 0;
}

static int parse_args(bench_opts *o, int argc, char **argv) {
  *o = (bench_opts){.nodes = 2000000,
                    .iters = 400,
                    .batch = 1024,
                    .n_layers = 2,
                    .fanout = {10, 25},
                    .seed = 1,
                    .hot_ratio = -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int64_t v;
    bool has_value = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--device") && i + 1 < argc && !strcmp(argv[i + 1], "cuda")) {
      o->cuda = true;
      i++;
    } else if (!strcmp(a, "--gcn")) {
      o->gcn = true;
    } else if (!strcmp(a, "--transpose")) {
      o->transpose = TRANSPOSE_TRAINING;
    } else if (!strcmp(a, "--transpose-all")) {
      o->transpose = TRANSPOSE_ALL;
    } else if (a[0] == '-' && !has_value) {
      fprintf(stderr, "bench_sample: %s needs a value\n", a);
      return 2;
    } else if (!strcmp(a, "--nodes")) {
      if (parse_i64(argv[++i], 1, INT32_MAX, &o->nodes, a))
        return 2;
    } else if (!strcmp(a, "--threads")) {
      if (parse_i64(argv[++i], 1, 1024, &v, a))
        return 2;
      o->threads = (int)v;
    } else if (!strcmp(a, "--iters")) {
      if (parse_i64(argv[++i], 1, INT32_MAX, &o->iters, a))
        return 2;
    } else if (!strcmp(a, "--batch")) {
      if (parse_i64(argv[++i], 1, INT32_MAX, &v, a))
        return 2;
      o->batch = (int32_t)v;
    } else if (!strcmp(a, "--seed")) {
      if (parse_i64(argv[++i], 0, INT64_MAX, &v, a))
        return 2;
      o->seed = (uint64_t)v;
    } else if (!strcmp(a, "--fanout")) {
      if (parse_fanout(argv[++i], o))
        return 2;
    } else if (!strcmp(a, "--hot-ratio")) {
      if (parse_f64(argv[++i], 0, 1, &o->hot_ratio, a))
        return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "bench_sample: unknown option %s\n", a);
      usage(stderr);
      return 2;
    } else if (!o->dir) {
      o->dir = a;
    } else {
      fprintf(stderr, "bench_sample: more than one dataset folder given\n");
      return 2;
    }
  }
  if (o->threads == 0)
    o->threads = omp_get_max_threads();
  return 0;
}

/* The synthetic graph (see SYN_*), deterministic for a seed whatever the thread count. */
static ng_status build_synthetic(ng_csr *g, int64_t n, uint64_t seed) {
  int64_t dmax = NG_MAX((int64_t)SYN_DMIN, (int64_t)((double)n * SYN_DMAX_FRACTION));
  ng_status st = ng__csr_alloc(g, n, 0);
  if (st != NG_OK)
    return st;
  /* Row lengths by inverse transform of the continuous power law, floored. */
  for (int64_t v = 0; v < n; v++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash2(seed, (uint64_t)v));
    double u = 1.0 - ng_rng_uniform(&r);
    double d = floor((double)SYN_DMIN * pow(u, -1.0 / (SYN_ALPHA - 1.0)));
    g->indptr[v + 1] = g->indptr[v] + NG_MIN((int64_t)d, dmax);
  }
  int64_t nnz = g->indptr[n];
  /* Chung-Lu endpoints: a random stub of the row-length multiset picks v with probability
   * proportional to its row length. */
  int32_t *stubs = ng__malloc((size_t)nnz * sizeof *stubs, "synthetic graph stubs");
  int32_t *idx = ng__malloc((size_t)nnz * sizeof *idx, "synthetic graph indices");
  if (!stubs || !idx) {
    free(stubs);
    free(idx);
    ng__csr_free(g);
    return NG_ERR_NOMEM;
  }
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; v++)
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
      stubs[e] = (int32_t)v;
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; v++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash3(seed, 1, (uint64_t)v));
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
      idx[e] = stubs[ng_rng_below(&r, (uint64_t)nnz)];
  }
  free(stubs);
  free(g->idx32);
  g->idx32 = idx;
  g->nnz = nnz;
  return NG_OK;
}

typedef struct {
  int64_t edges, nodes, batches;
  int64_t cold_edges, dst; /* the input layer's, with a hot tier (--hot-ratio) */
  double cpu_s;            /* CPU time of the sampling threads, summed */
} bench_count;

/* CPU time of the calling thread: on a shared machine it excludes the time other processes
 * held the core, which wall time does not. */
static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Samples iterations [0, iters) on `threads` threads (dynamic: a shared counter, as workers).
 * Returns the wall time; counts go to *out. */
static double run(const bench_opts *o, const ng_sampler_cfg *cfg, const int64_t *order,
                  int64_t n_order, int64_t iters, bench_count *out, ng_sample_arena **arenas,
                  ng_status *failed) {
  int64_t per_epoch = n_order / o->batch;
  int64_t edges = 0, nodes = 0, cold = 0, dst = 0;
  /* The feature store's hot tier for --cache-ratio R: ids below `hot` are hot. */
  int64_t hot = -1;
  if (o->hot_ratio >= 0)
    (void)ng__store_hot_rows(&hot, NULL, cfg->graph->nodes, 1, 0, o->hot_ratio);
  double cpu = 0.0;
  ng_status st = NG_OK;
  double t0 = ng__now();
#pragma omp parallel num_threads(o->threads) reduction(+ : edges, nodes, cold, dst, cpu)
  {
    ng_sample_arena *a = arenas[omp_get_thread_num()];
    double c0 = thread_cpu_s();
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < iters; it++) {
      /* Batches cycle through the shuffled targets; one order serves every epoch here. */
      const int64_t *targets = order + (it % per_epoch) * o->batch;
      ng_minibatch mb;
      ng_status s = ng__sample(&mb, a, cfg, targets, o->batch, ng__iter_seed(o->seed, 0, it));
      if (s != NG_OK) {
#pragma omp critical
        if (st == NG_OK) {
          st = s;
          fprintf(stderr, "bench_sample: %s: %s\n", ng_status_str(s), ng_last_error());
        }
        continue;
      }
      for (int l = 0; l < mb.n_layers; l++)
        edges += mb.blocks[l].nnz;
      nodes += mb.blocks[0].n_src;
      if (hot >= 0) {
        const ng_block *b = &mb.blocks[0];
        for (int64_t e = 0; e < b->nnz; e++)
          cold += mb.node_ids[b->indices[e]] >= hot;
        dst += b->n_dst;
      }
    }
    cpu += thread_cpu_s() - c0;
  }
  double dt = ng__now() - t0;
  out->edges = edges;
  out->nodes = nodes;
  out->batches = iters;
  out->cold_edges = cold;
  out->dst = dst;
  out->cpu_s = cpu;
  *failed = st;
  return dt;
}

/* Samples iterations [0, iters) with the CUDA backend's device sampler from this thread, as the
 * training's sample feed does (blocks copied back into one pinned buffer). Returns the wall
 * time, or a negative value on failure. */
static double run_device(const bench_opts *o, const ng_sampler_cfg *cfg, const int64_t *order,
                         int64_t n_order, int64_t iters, bench_count *out) {
#ifdef NG_HAVE_CUDA
  ng_backend *be = NULL;
  ng_dev_sampler *ds = NULL;
  void *host = NULL;
  size_t cap = 0;
  double dt = -1.0;
  ng_status st = ng__backend_cuda_create(&be, 0);
  if (st == NG_OK)
    st = be->iface->sampler_create(be, cfg->graph, 1, &ds);
  const int64_t per_epoch = n_order / o->batch;
  *out = (bench_count){0};
  for (int pass = 0; st == NG_OK && pass < 2; pass++) { /* pass 0 warms up */
    const int64_t n = pass ? iters : 8;
    const double t0 = ng__now();
    int64_t edges = 0, nodes = 0;
    for (int64_t it = 0; st == NG_OK && it < n; it++) {
      ng_minibatch mb;
      st = be->iface->sampler_run(be, ds, 0, cfg, order + (it % per_epoch) * o->batch, o->batch,
                                  ng__iter_seed(o->seed, 0, it), &mb, &host, &cap);
      for (int l = 0; st == NG_OK && l < mb.n_layers; l++)
        edges += mb.blocks[l].nnz;
      if (st == NG_OK)
        nodes += mb.blocks[0].n_src;
    }
    dt = ng__now() - t0;
    *out = (bench_count){.edges = edges, .nodes = nodes, .batches = n, .cpu_s = dt};
  }
  if (st != NG_OK) {
    fprintf(stderr, "bench_sample: %s: %s\n", ng_status_str(st), ng_last_error());
    dt = -1.0;
  }
  if (be) {
    be->iface->host_free(be, host);
    if (ds)
      be->iface->sampler_destroy(be, ds);
  }
  ng__backend_destroy(be);
  return dt;
#else
  (void)o, (void)cfg, (void)order, (void)n_order, (void)iters, (void)out;
  fprintf(stderr, "bench_sample: --device cuda: this build has no CUDA backend\n");
  return -1.0;
#endif
}

int main(int argc, char **argv) {
  bench_opts o;
  if (parse_args(&o, argc, argv))
    return 2;
  int rc = 1;
  ng_dataset_t ds = NULL;
  ng_csr synthetic = {0};
  const ng_csr *g;
  int64_t *order = NULL, n_order;
  ng_sample_arena **arenas = calloc((size_t)o.threads, sizeof *arenas);

  double t0 = ng__now();
  if (o.dir) {
    ng_status st = ng_dataset_open(&ds, o.dir, NULL);
    if (st != NG_OK) {
      fprintf(stderr, "bench_sample: %s: %s\n", ng_status_str(st), ng_last_error());
      goto done;
    }
    g = &ds->csr;
    n_order = ds->split[0] ? ds->info.train : g->nodes;
    order = malloc((size_t)n_order * sizeof *order);
    for (int64_t i = 0; i < n_order; i++)
      order[i] = ds->split[0] ? ds->split[0][i] : i;
    printf("graph: %s (%s), %lld nodes, %lld edges\n", ds->info.name, o.dir, (long long)g->nodes,
           (long long)g->nnz);
  } else {
    ng_status st = build_synthetic(&synthetic, o.nodes, o.seed);
    if (st != NG_OK) {
      fprintf(stderr, "bench_sample: %s: %s\n", ng_status_str(st), ng_last_error());
      goto done;
    }
    g = &synthetic;
    n_order = g->nodes;
    order = malloc((size_t)n_order * sizeof *order);
    for (int64_t i = 0; i < n_order; i++)
      order[i] = i;
    int64_t dmax = 0;
    for (int64_t v = 0; v < g->nodes; v++)
      dmax = NG_MAX(dmax, g->indptr[v + 1] - g->indptr[v]);
    printf("graph: synthetic power law, %lld nodes, %lld edges (mean row %.1f, max %lld), "
           "built in %.1f s\n",
           (long long)g->nodes, (long long)g->nnz, (double)g->nnz / (double)g->nodes,
           (long long)dmax, ng__now() - t0);
  }
  if (n_order < o.batch) {
    fprintf(stderr, "bench_sample: %lld targets available but --batch is %d\n", (long long)n_order,
            (int)o.batch);
    goto done;
  }
  ng__epoch_shuffle(order, order, n_order, o.seed, 0);

  ng_sampler_cfg cfg = {.graph = g, .n_layers = o.n_layers};
  for (int l = 0; l < o.n_layers; l++) {
    cfg.fanout[l] = o.fanout[l];
    cfg.gcn_weights[l] = o.gcn;
    cfg.transpose[l] = o.transpose == TRANSPOSE_ALL || (o.transpose == TRANSPOSE_TRAINING && l > 0);
  }
  if (o.cuda) {
    bench_count c;
    const double dt = run_device(&o, &cfg, order, n_order, o.iters, &c);
    if (dt < 0)
      goto done;
    printf("device sampler (CUDA), fanout ");
    for (int l = o.n_layers - 1; l >= 0; l--)
      printf(l ? "%d," : "%d", (int)o.fanout[l]);
    printf(", batch %d, gcn %s, transpose %s, %lld batches\n", (int)o.batch, o.gcn ? "on" : "off",
           o.transpose == TRANSPOSE_NONE ? "off" : "on", (long long)c.batches);
    printf("per batch: %.0f sampled edges, %.0f nodes, %.3f ms per batch (copy back included)\n",
           (double)c.edges / (double)c.batches, (double)c.nodes / (double)c.batches,
           1e3 * dt / (double)c.batches);
    printf("sampled edges/s: %.2f M (one host thread)\n", (double)c.edges / dt * 1e-6);
    rc = 0;
    goto done;
  }
  for (int t = 0; t < o.threads; t++)
    if (ng__sample_arena_create(&arenas[t]) != NG_OK) {
      fprintf(stderr, "bench_sample: %s\n", ng_last_error());
      goto done;
    }

  /* Warm-up: grow every arena to its steady size and fault in the graph pages it touches. */
  bench_count c;
  ng_status st;
  run(&o, &cfg, order, n_order, 4 * (int64_t)o.threads, &c, arenas, &st);
  if (st != NG_OK)
    goto done;
  double dt = run(&o, &cfg, order, n_order, o.iters, &c, arenas, &st);
  if (st != NG_OK)
    goto done;

  printf("fanout ");
  for (int l = o.n_layers - 1; l >= 0; l--)
    printf(l ? "%d," : "%d", (int)o.fanout[l]);
  printf(" (targets outwards), batch %d, gcn %s, transpose %s, %d thread%s, %lld batches\n",
         (int)o.batch, o.gcn ? "on" : "off",
         o.transpose == TRANSPOSE_ALL        ? "every block"
         : o.transpose == TRANSPOSE_TRAINING ? "blocks 1.. (training's)"
                                             : "off",
         o.threads, o.threads == 1 ? "" : "s", (long long)c.batches);
  printf("per batch: %.0f sampled edges, %.0f nodes, %.2f ms per batch per thread\n",
         (double)c.edges / (double)c.batches, (double)c.nodes / (double)c.batches,
         1e3 * dt * o.threads / (double)c.batches);
  printf("sampled edges/s: %.2f M total, %.2f M per core (wall time); %.2f M per core-second of "
         "CPU time\n",
         (double)c.edges / dt * 1e-6, (double)c.edges / dt * 1e-6 / o.threads,
         (double)c.edges / c.cpu_s * 1e-6);
  size_t arena_bytes = 0;
  for (int t = 0; t < o.threads; t++)
    arena_bytes += ng__sample_arena_bytes(arenas[t]);
  printf("arena memory: %.1f MiB per thread\n", (double)arena_bytes / o.threads / (1 << 20));
  if (o.hot_ratio >= 0)
    printf("cold_edges_per_dst %.6g (input layer, hot tier %g of the nodes)\n",
           c.dst > 0 ? (double)c.cold_edges / (double)c.dst : 0.0, o.hot_ratio);
  rc = 0;

done:
  for (int t = 0; t < o.threads && arenas; t++)
    ng__sample_arena_destroy(arenas[t]);
  free(arenas);
  free(order);
  ng__csr_free(&synthetic);
  ng_dataset_close(ds);
  return rc;
}
