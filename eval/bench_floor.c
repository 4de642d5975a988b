/* bench_floor: the machine rates the evaluation harness (eval/harness/run.py) divides an
 * iteration's work by to get its physical floor (DESIGN.md, section 9; docs/eval.md):
 *
 *   1. H2D: copy_h2d of a 512 MiB page-locked buffer (the backend's host_alloc) into device
 *      memory; the median of 10 copies after a warm-up. Then the device's own ceilings, which
 *      the op profile's roofline divides by: a device-memory copy and an 8192^3 GEMM in fp32
 *      and TF32 (device_peaks).
 *   2. CPU partial aggregation alone, with T threads (one pthread each, pinned to its own core,
 *      the first allowed core left to the main thread as the runtime leaves it to the device
 *      thread): every thread runs the CPU kernels' aggr_sum (the kernels the PARTIAL workers use)
 *      over its own random block, `fanout` random rows of the host table per destination (a
 *      mean: the harness passes its workload's cold rows per state), 64 destinations per call.
 *      Rate = rows read x row bytes / time, summed over the threads.
 *   3. GPU zero-copy gather alone: the CUDA backend's gather_rows of random rows of the same
 *      table, page-locked and mapped with ng__cuda_host_register, into device memory, in calls
 *      of at most 256 MiB, each waited for.
 *   4. Both at once for the same interval: the T CPU threads of 2 while the main thread runs the
 *      gathers of 3. They share host DRAM, so each runs slower than alone; the sum of the two
 *      rates is the combined host read rate that cold rows can be read at with T workers.
 *   5. The same with delivery: the CPU threads write their sums with the kernels' stage_sum (the
 *      non-temporal stores PARTIAL stages its states with) into rings of page-locked staging,
 *      and the main thread, between gathers, copies the states written since its last visit to
 *      the device on a copy queue, as the device thread copies PARTIAL packages. A state must
 *      reach the GPU to be of use, and its write and DMA read take host DRAM as the cold rows
 *      do: the sum of the two read rates here is the delivered rate, the rate at which cold rows
 *      can be consumed with T workers (the floor's host term, docs/eval.md).
 *
 *   6. Peer copies (two or more GPUs): cudaMemcpyPeer of 256 MiB from device 0 to device 1, the
 *      best of 5 after a warm-up, and whether it went peer to peer: what a partitioned feature
 *      cache across GPUs would read its peers' rows at (docs/distributed.md); "n/a" with one.
 *
 *   bench_floor [--dim D] [--threads LIST]... [--table-gib G] [--seconds S] [--fanout F]
 *               [--device N] [--json FILE]
 *
 * Every rate counts bytes of rows read, GB = 1e9 B, except the states' rate of 5 (bytes written
 * and copied). Each measured interval follows a warm-up of a fifth of it (at least 0.1 s).
 * Without the CUDA backend in the build only the CPU figures (2) are measured: the program says
 * so, reports the GPU figures as missing (null in the JSON) and exits 0. Needs the table plus
 * about 1 GiB of host memory (and RING_BYTES of page-locked staging per thread);
 * takes about (3 x thread counts + 1) x 1.2 x S seconds plus the table's set-up. */
#include "backend_impl.h"
#include "rng.h"
#include "bench_util.h"
#include "kernels_impl.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

enum {
  MAX_THREAD_COUNTS = 64,
  MAX_THREADS = 1024,
  CHUNK_DST = 64, /* destinations per aggr_sum call */
  H2D_REPS = 10,  /* timed copies of the H2D probe */
  ZC_SETS = 4,    /* id sets the gathers cycle through */
  CHECK_ROWS = 4, /* gathered rows compared with the table */
  PHASE_WARM = 0, /* the threads' phases, set by the main thread */
  PHASE_MEASURE = 1,
  PHASE_STOP = 2
};
/* Longest wait past a measured interval for a thread to read its first chunk in it: far beyond
 * any scheduling delay, short of the harness's time limit for a probe. */
#define MEASURE_WAIT_S 120.0

#ifdef NG_HAVE_CUDA
static const size_t H2D_BYTES = (size_t)512 << 20;
static const size_t PEER_BYTES = (size_t)256 << 20;
enum { PEER_REPS = 5 };
static const size_t GATHER_CALL_BYTES = (size_t)256 << 20;
/* A thread's ring of staged states (5): whole chunks, at least 8. */
static const size_t RING_BYTES = (size_t)16 << 20;
/* Gathers of the delivered figure (5) are shorter, so that the states' copies follow their
 * writing closely: a round lasts 0.6 ms (4 KB rows) to 2 ms (512 B rows), in which a thread
 * stages at most a few hundred KB of states, far less than half its ring. */
static const size_t DELIVER_CALL_BYTES = (size_t)32 << 20;
#endif

typedef struct {
  int64_t dim;
  int threads[MAX_THREAD_COUNTS];
  int n_threads;
  double table_gib;
  double seconds;
  double fanout; /* mean rows per destination */
  int device;
  const char *json;
} floor_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_floor [options]\n"
          "  --dim D          feature columns of a row (row bytes = 4 D; default 1024)\n"
          "  --threads LIST   CPU thread counts, e.g. 1,2,4,8,12,15; repeatable (default: 1 and\n"
          "                   every allowed core but one)\n"
          "  --table-gib G    host table the rows are drawn from, in GiB (default 8)\n"
          "  --seconds S      measured interval of each figure (default 1)\n"
          "  --fanout F       rows summed per destination by the CPU threads, a mean: with a\n"
          "                   fraction, destinations get floor(F) or floor(F) + 1 rows, spread\n"
          "                   evenly (default 10; the harness passes its workload's own)\n"
          "  --device N       CUDA device (default 0)\n"
          "  --json FILE      also write the figures as JSON\n");
}

/* Parses a whole number in [lo, hi]; 0 on success, after printing the problem otherwise. */
static int parse_long(const char *opt, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno || n < lo || n > hi) {
    fprintf(stderr, "bench_floor: %s '%s': expected a whole number in [%ld, %ld]\n", opt, v, lo,
            hi);
    return 2;
  }
  *out = n;
  return 0;
}

static int parse_double(const char *opt, const char *v, double lo, double hi, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (*v == '\0' || *end != '\0' || !(x >= lo) || !(x <= hi)) {
    fprintf(stderr, "bench_floor: %s '%s': expected a number in [%g, %g]\n", opt, v, lo, hi);
    return 2;
  }
  *out = x;
  return 0;
}

/* Appends the comma-separated thread counts of `v`. */
static int parse_threads(floor_opts *o, const char *v) {
  char buf[512];
  if (strlen(v) >= sizeof buf) {
    fprintf(stderr, "bench_floor: --threads '%s' is too long\n", v);
    return 2;
  }
  strcpy(buf, v);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    long n;
    if (parse_long("--threads", tok, 1, MAX_THREADS, &n))
      return 2;
    if (o->n_threads == MAX_THREAD_COUNTS) {
      fprintf(stderr, "bench_floor: --threads: at most %d thread counts\n", MAX_THREAD_COUNTS);
      return 2;
    }
    o->threads[o->n_threads++] = (int)n;
  }
  if (o->n_threads == 0) {
    fprintf(stderr, "bench_floor: --threads '%s' names no thread count\n", v);
    return 2;
  }
  return 0;
}

static int parse_args(floor_opts *o, int argc, char **argv) {
  *o = (floor_opts){.dim = 1024, .table_gib = 8, .seconds = 1, .fanout = 10};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    const char *opts[] = {"--dim",    "--threads", "--table-gib", "--seconds",
                          "--fanout", "--device",  "--json"};
    bool known = false;
    for (size_t k = 0; k < NG_ARRAY_LEN(opts); k++)
      known = known || !strcmp(a, opts[k]);
    if (!known) {
      fprintf(stderr, "bench_floor: unknown argument %s\n", a);
      usage(stderr);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "bench_floor: %s needs a value\n", a);
      return 2;
    }
    const char *v = argv[++i];
    long n = 0;
    int rc = 0;
    if (!strcmp(a, "--dim")) {
      rc = parse_long(a, v, 1, 1 << 20, &n);
      o->dim = n;
    } else if (!strcmp(a, "--threads")) {
      rc = parse_threads(o, v);
    } else if (!strcmp(a, "--table-gib")) {
      rc = parse_double(a, v, 1.0 / 1024, 65536, &o->table_gib);
    } else if (!strcmp(a, "--seconds")) {
      rc = parse_double(a, v, 0.01, 3600, &o->seconds);
    } else if (!strcmp(a, "--fanout")) {
      rc = parse_double(a, v, 1, 1000, &o->fanout);
    } else if (!strcmp(a, "--device")) {
      rc = parse_long(a, v, 0, 1024, &n);
      o->device = (int)n;
    } else {
      o->json = v;
    }
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- cores ---- */

typedef struct {
  int cpu[CPU_SETSIZE];
  int n;
} core_list;

/* The cores this process may run on, in the order of their ids. */
static void allowed_cores(core_list *c) {
  cpu_set_t set;
  c->n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; i++)
      if (CPU_ISSET(i, &set))
        c->cpu[c->n++] = i;
  }
  if (c->n == 0) { /* affinity unknown: run unpinned */
    c->cpu[0] = -1;
    c->n = 1;
  }
}

/* Binds the calling thread to `cpu` (-1: leaves it unbound). A failure only costs placement. */
static void pin_self(int cpu) {
  if (cpu < 0)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* The core of CPU thread i: the main thread keeps the first allowed core, as the runtime's
 * device thread does; threads wrap around the others when there are more threads than cores. */
static int thread_core(const core_list *c, int i) {
  return c->n > 1 ? c->cpu[1 + i % (c->n - 1)] : c->cpu[0];
}

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- the host table and the CPU threads ---- */

typedef struct {
  const float *table;
  int64_t rows, dim;
  size_t bytes;
} host_table;

typedef struct cpu_thread cpu_thread;

/* What the threads of one measurement share. */
typedef struct {
  const host_table *tab;
  const ng_cpu_kernels *k;
  _Atomic int phase;
  /* Threads that have read a chunk in the measured phase: the phase ends only when all have,
   * since on a loaded machine a thread can sleep through a short phase and measure nothing. */
  _Atomic int measured;
  bool deliver;        /* 5: the threads stage their states into their rings */
  int64_t ring_chunks; /* 5: chunks of CHUNK_DST states a ring holds */
} cpu_shared;

struct cpu_thread {
  cpu_shared *sh;
  int core;
  /* The thread's own block: n_chunks x CHUNK_DST destinations, `fanout` random rows each. */
  int32_t *indptr, *indices;
  int64_t nnz, n_chunks;
  float *out; /* CHUNK_DST rows */
  /* 5: ring_chunks x CHUNK_DST rows of page-locked staging (NULL without a GPU), the chunks
   * staged into it so far (written by the thread) and those copied to the device (main thread). */
  float *ring;
  _Atomic int64_t staged;
  int64_t copied;
  /* Results: rows read in the measured phase and its length. */
  int64_t rows;
  double seconds;
};

static void *cpu_main(void *arg) {
  cpu_thread *t = arg;
  cpu_shared *sh = t->sh;
  pin_self(t->core);
  const ng_aggr bare = {.reduce = NG_REDUCE_SUM}; /* the partial state's value: no mean */
  int seen = PHASE_WARM;
  bool counted = false;
  int64_t rows = 0, rows0 = 0;
  double t0 = 0;
  for (int64_t c = 0;; c = c + 1 == t->n_chunks ? 0 : c + 1) {
    int ph = atomic_load_explicit(&sh->phase, memory_order_acquire);
    if (ph != seen) {
      if (ph == PHASE_STOP) {
        /* A stop without a measured phase (a call longer than the warm-up) measures nothing. */
        t->rows = seen == PHASE_MEASURE ? rows - rows0 : 0;
        t->seconds = seen == PHASE_MEASURE ? ng__now() - t0 : 0;
        break;
      }
      rows0 = rows;
      t0 = ng__now();
      seen = ph;
    }
    /* A view of CHUNK_DST destinations: indptr offsets index the whole `indices`. */
    ng_block b = {.n_dst = CHUNK_DST,
                  .n_src = (int32_t)sh->tab->rows,
                  .nnz = t->nnz,
                  .indptr = t->indptr + c * CHUNK_DST,
                  .indices = t->indices};
    if (sh->deliver) {
      const int64_t n = atomic_load_explicit(&t->staged, memory_order_relaxed);
      float *out = t->ring + (n % sh->ring_chunks) * CHUNK_DST * sh->tab->dim;
      sh->k->stage_sum(&bare, &b, sh->tab->table, sh->tab->dim, 0, CHUNK_DST, out);
      atomic_store_explicit(&t->staged, n + 1, memory_order_release);
    } else {
      sh->k->aggr_sum(&bare, &b, sh->tab->table, sh->tab->dim, 0, CHUNK_DST, t->out);
    }
    rows += t->indptr[(c + 1) * CHUNK_DST] - t->indptr[c * CHUNK_DST];
    if (seen == PHASE_MEASURE && !counted) {
      counted = true;
      atomic_fetch_add_explicit(&sh->measured, 1, memory_order_release);
    }
  }
  return NULL;
}

static void cpu_threads_free(cpu_thread *th, int n) {
  for (int i = 0; i < n && th; i++) {
    free(th[i].indptr);
    free(th[i].indices);
    free(th[i].out);
  }
  free(th);
}

/* The rows of destinations [0, d) at a mean of `fanout` rows each: floor(d * fanout), so that
 * each destination gets floor(fanout) or one more, spread evenly (an integer fanout gives every
 * destination exactly that many). */
static int64_t rows_before(int64_t d, double fanout) {
  return (int64_t)floor((double)d * fanout + 1e-9);
}

/* Builds `n` threads' blocks: enough edges that one pass over them reads at least 1 GiB of rows
 * (far more than any last-level cache) and at least 2^20 edges, at most 2^24. */
static cpu_thread *cpu_threads_make(const host_table *tab, int n, double fanout,
                                    const core_list *cores) {
  const int64_t row_bytes = tab->dim * (int64_t)sizeof(float);
  int64_t edges = ((int64_t)1 << 30) / row_bytes;
  edges = NG_MAX((int64_t)1 << 20, NG_MIN((int64_t)1 << 24, edges));
  const int64_t n_chunks = NG_MAX(1, (int64_t)((double)edges / (CHUNK_DST * fanout)));
  const int64_t n_dst = n_chunks * CHUNK_DST, nnz = rows_before(n_dst, fanout);
  cpu_thread *th = ng__calloc((size_t)n, sizeof *th, "CPU probe threads");
  if (!th)
    return NULL;
  for (int i = 0; i < n; i++) {
    cpu_thread *t = &th[i];
    t->core = thread_core(cores, i);
    t->nnz = nnz;
    t->n_chunks = n_chunks;
    t->indptr = ng__malloc((size_t)(n_dst + 1) * sizeof(int32_t), "CPU probe indptr");
    t->indices = ng__malloc((size_t)nnz * sizeof(int32_t), "CPU probe indices");
    t->out = ng__malloc((size_t)CHUNK_DST * (size_t)tab->dim * sizeof(float), "CPU probe output");
    if (!t->indptr || !t->indices || !t->out) {
      cpu_threads_free(th, n);
      return NULL;
    }
    for (int64_t d = 0; d <= n_dst; d++)
      t->indptr[d] = (int32_t)rows_before(d, fanout);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < nnz; e++)
      t->indices[e] = (int32_t)(ng_hash3(100 + (uint64_t)i, (uint64_t)e, 7) % (uint64_t)tab->rows);
  }
  return th;
}

/* ---- the GPU side ---- */

#ifdef NG_HAVE_CUDA
typedef struct {
  ng_backend *be;
  const float *view; /* the table as the kernels address it */
  float *d_dst;
  int64_t *d_ids; /* ZC_SETS sets of call_rows ids */
  int64_t call_rows;
  int64_t deliver_rows; /* rows of a gather of figure 5 */
  float *d_states;      /* where figure 5's states are copied to (half a ring) */
} gpu_side;

/* Gathers until `seconds` have passed (at least one call); the rows gathered and the time. */
static ng_status gpu_gather_for(gpu_side *g, int64_t dim, double seconds, int64_t *rows,
                                double *elapsed) {
  const struct ng_backend_i *I = g->be->iface;
  double t0 = ng__now(), t = t0;
  int64_t n = 0;
  for (int s = 0; n == 0 || t - t0 < seconds; s = (s + 1) % ZC_SETS) {
    NG_CHECK(I->gather_rows(g->be, g->d_dst, g->view, g->d_ids + (int64_t)s * g->call_rows,
                            g->call_rows, dim));
    NG_CHECK(I->sync(g->be));
    n += g->call_rows;
    t = ng__now();
  }
  *rows = n;
  *elapsed = t - t0;
  return NG_OK;
}

/* Figure 5's main thread, until `seconds` have passed (at least one round): a round queues the
 * copies of every thread's chunks staged since the last round on copy queue 0, then a gather of
 * deliver_rows rows on the op queue, and waits for both. A thread's copy starts at most half a
 * ring behind it, so that it does not read a chunk the thread may be rewriting; chunks further
 * behind were never delivered and are counted in *dropped (the figure is then not valid). The
 * rows gathered, the bytes copied, the chunks dropped and the time. */
static ng_status gpu_deliver_for(gpu_side *g, cpu_thread *th, int n, const cpu_shared *sh,
                                 double seconds, int64_t *rows, int64_t *copied, int64_t *dropped,
                                 double *elapsed) {
  const int64_t dim = sh->tab->dim, ring = sh->ring_chunks;
  const struct ng_backend_i *I = g->be->iface;
  const int64_t chunk_floats = (int64_t)CHUNK_DST * dim;
  const size_t chunk_bytes = (size_t)chunk_floats * sizeof(float);
  double t0 = ng__now(), t = t0;
  int64_t nr = 0, nb = 0, nd = 0;
  for (int s = 0; nr == 0 || t - t0 < seconds; s = (s + 1) % ZC_SETS) {
    for (int i = 0; i < n; i++) {
      cpu_thread *c = &th[i];
      const int64_t end = atomic_load_explicit(&c->staged, memory_order_acquire);
      const int64_t first = NG_MAX(c->copied, end - ring / 2);
      nd += first - c->copied;
      for (int64_t from = first; from < end;) {
        const int64_t slot = from % ring, len = NG_MIN(end - from, ring - slot);
        NG_CHECK(I->copy_h2d_async(g->be, g->d_states, c->ring + slot * chunk_floats,
                                   (size_t)len * chunk_bytes, 0));
        nb += len * (int64_t)chunk_bytes;
        from += len;
      }
      c->copied = end;
    }
    NG_CHECK(I->gather_rows(g->be, g->d_dst, g->view, g->d_ids + (int64_t)s * g->call_rows,
                            g->deliver_rows, dim));
    NG_CHECK(I->wait_copy(g->be, 0));
    NG_CHECK(I->sync(g->be));
    nr += g->deliver_rows;
    t = ng__now();
  }
  *rows = nr;
  *copied = nb;
  *dropped = nd;
  *elapsed = t - t0;
  return NG_OK;
}

/* The main thread's part of a measurement for `seconds`: figure 5's gathers and state copies
 * with sh->deliver, else figure 4's gathers (no bytes copied, none dropped). */
static ng_status gpu_phase(gpu_side *g, cpu_thread *th, int n, const cpu_shared *sh, double seconds,
                           int64_t *rows, int64_t *copied, int64_t *dropped, double *elapsed) {
  if (sh->deliver)
    return gpu_deliver_for(g, th, n, sh, seconds, rows, copied, dropped, elapsed);
  *copied = *dropped = 0;
  return gpu_gather_for(g, sh->tab->dim, seconds, rows, elapsed);
}
#endif

/* ---- one measurement: T CPU threads alone, or together with the GPU's gathers ---- */

typedef struct {
  int threads;
  /* GB/s; < 0 when not measured. 4: cpu_together, gpu_together; 5: cpu_delivering,
   * gpu_delivering and the states copied (states_gbs). */
  double cpu_alone, cpu_together, gpu_together;
  double cpu_delivering, gpu_delivering, states_gbs;
} floor_row;

/* Runs `n` CPU threads for warm + seconds; with `gpu`, the main thread gathers meanwhile (and,
 * with sh->deliver, copies the threads' states) and *gpu_gbs (*states_gbs) receives its rate over
 * the measured phase. */
static int measure(cpu_thread *th, int n, cpu_shared *sh, double warm, double seconds, void *gpu,
                   double *cpu_gbs, double *gpu_gbs, double *states_gbs) {
  const double row_bytes = (double)sh->tab->dim * sizeof(float);
  pthread_t *tid = ng__calloc((size_t)n, sizeof *tid, "CPU probe thread ids");
  if (!tid)
    return 1;
  /* Threads start in the warm-up phase, which lasts far longer than starting them takes, so
   * every thread is usually running when the measured phase begins (and the phase waits for
   * one that is not). */
  atomic_store(&sh->phase, PHASE_WARM);
  atomic_store(&sh->measured, 0);
  int started = 0, rc = 0;
  bool invalid = false; /* 5: states were dropped, so no figure */
  for (; started < n; started++) {
    th[started].sh = sh;
    th[started].rows = 0;
    th[started].seconds = 0;
    atomic_store(&th[started].staged, 0);
    th[started].copied = 0;
    if (pthread_create(&tid[started], NULL, cpu_main, &th[started]) != 0) {
      fprintf(stderr, "bench_floor: could not start %d threads (%d started)\n", n, started);
      rc = 1;
      break;
    }
  }
  if (!rc) {
#ifdef NG_HAVE_CUDA
    if (gpu) {
      gpu_side *g = gpu;
      int64_t rows, bytes, dropped;
      double el;
      ng_status st = gpu_phase(g, th, n, sh, warm, &rows, &bytes, &dropped, &el);
      atomic_store_explicit(&sh->phase, PHASE_MEASURE, memory_order_release);
      if (st == NG_OK)
        st = gpu_phase(g, th, n, sh, seconds, &rows, &bytes, &dropped, &el);
      if (st != NG_OK) {
        fprintf(stderr, "bench_floor: zero-copy gather%s failed: %s\n",
                sh->deliver ? " or state copy" : "", ng_last_error());
        rc = 1;
      } else if (dropped > 0) {
        /* The rows behind those states were read but never delivered: no figure rather than
         * one too fast (the floor then takes the combined rate). */
        fprintf(stderr,
                "bench_floor: %d threads: %lld staged chunks were overwritten before they were "
                "copied; the delivered figure is not measured\n",
                n, (long long)dropped);
        *gpu_gbs = -1;
        *states_gbs = -1;
        invalid = true;
      } else {
        *gpu_gbs = (double)rows * row_bytes / el * 1e-9;
        *states_gbs = (double)bytes / el * 1e-9;
      }
    } else
#endif
    {
      (void)gpu;
      (void)gpu_gbs;
      (void)states_gbs;
      sleep_s(warm);
      atomic_store_explicit(&sh->phase, PHASE_MEASURE, memory_order_release);
      sleep_s(seconds);
    }
    /* Each thread's rate is its own rows over its own time in the phase, so a thread that got
     * its core late still gives a true figure once it has read a chunk there. */
    double t0 = ng__now();
    while (atomic_load_explicit(&sh->measured, memory_order_acquire) < started &&
           ng__now() - t0 < MEASURE_WAIT_S)
      sleep_s(0.001);
  }
  atomic_store_explicit(&sh->phase, PHASE_STOP, memory_order_release);
  double sum = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(tid[i], NULL);
    if (th[i].seconds > 0)
      sum += (double)th[i].rows * row_bytes / th[i].seconds * 1e-9;
    else
      rc = 1;
  }
  free(tid);
  if (rc)
    fprintf(stderr, "bench_floor: the %d-thread measurement failed\n", n);
  *cpu_gbs = invalid ? -1 : sum;
  return rc;
}

/* ---- output ---- */

#ifdef NG_HAVE_CUDA
enum { PEAK_N = 8192, PEAK_REPS = 5 };

/* The device's own ceilings, for the op profile's roofline (docs/eval.md): a device-to-device
 * copy of 256 MiB (bytes read + written over its time, GB/s) and a PEAK_N^3 GEMM in fp32 and in
 * TF32 (2 n^3 over its time, TFLOP/s), each the median of PEAK_REPS after a warm-up, on random
 * data (zeros can run faster). Leaves the backend in fp32. */
static ng_status device_peaks(ng_backend *be, double *hbm, double *fp32, double *tf32) {
  const struct ng_backend_i *I = be->iface;
  const size_t bytes = (size_t)PEAK_N * PEAK_N * sizeof(float);
  float *host = ng__big_alloc(bytes, "GEMM probe input");
  float *m[3] = {NULL, NULL, NULL};
  ng_status st = host ? NG_OK : NG_ERR_NOMEM;
  for (int i = 0; i < 3 && st == NG_OK; i++)
    st = I->alloc(be, (void **)&m[i], bytes);
  for (int i = 0; i < 2 && st == NG_OK; i++) {
    bench_fill_random(host, (int64_t)PEAK_N * PEAK_N, 51 + (uint64_t)i);
    st = I->copy_h2d(be, m[i], host, bytes);
  }
  double t[PEAK_REPS];
  for (int r = -1; r < PEAK_REPS && st == NG_OK; r++) {
    const double t0 = ng__now();
    st = I->copy_d2d(be, m[2], m[0], bytes);
    if (st == NG_OK)
      st = I->sync(be);
    if (r >= 0)
      t[r] = ng__now() - t0;
  }
  if (st == NG_OK)
    *hbm = 2.0 * (double)bytes / bench_median(t, PEAK_REPS) * 1e-9;
  for (int prec = 0; prec < 2 && st == NG_OK; prec++) {
    st = I->set_precision(be, prec ? NG_PRECISION_TF32 : NG_PRECISION_FP32);
    for (int r = -1; r < PEAK_REPS && st == NG_OK; r++) {
      const double t0 = ng__now();
      st = I->gemm(be, false, false, PEAK_N, PEAK_N, PEAK_N, 1.0f, m[0], PEAK_N, m[1], PEAK_N, 0.0f,
                   m[2], PEAK_N);
      if (st == NG_OK)
        st = I->sync(be);
      if (r >= 0)
        t[r] = ng__now() - t0;
    }
    if (st == NG_OK)
      *(prec ? tf32 : fp32) = 2.0 * pow(PEAK_N, 3) / bench_median(t, PEAK_REPS) * 1e-12;
  }
  if (st == NG_OK)
    st = I->set_precision(be, NG_PRECISION_FP32);
  for (int i = 0; i < 3; i++)
    I->free(be, m[i]);
  if (host)
    ng__big_free(host, bytes);
  return st;
}
#endif

static void json_num(FILE *f, double x) {
  if (x < 0)
    fputs("null", f);
  else
    fprintf(f, "%.6g", x);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* The device's ceilings (device_peaks); -1 where not measured. */
typedef struct {
  double hbm_gbs, gemm_fp32_tflops, gemm_tf32_tflops;
} device_ceilings;

static int write_json(const floor_opts *o, const char *device, const char *isa,
                      const host_table *tab, double h2d, double zc_alone, double peer,
                      bool peer_p2p, const device_ceilings *dc, const floor_row *r, int n) {
  FILE *f = fopen(o->json, "w");
  if (!f) {
    fprintf(stderr, "bench_floor: cannot write %s: %s\n", o->json, strerror(errno));
    return 1;
  }
  fprintf(f,
          "{\n  \"tool\": \"bench_floor\",\n  \"cuda\": %s,\n  \"cpu_isa\": \"%s\",\n"
          "  \"dim\": %lld,\n  \"row_bytes\": %lld,\n  \"table_bytes\": %zu,\n"
          "  \"fanout\": %g,\n  \"seconds\": %g,\n  \"device\": ",
#ifdef NG_HAVE_CUDA
          "true",
#else
          "false",
#endif
          isa, (long long)tab->dim, (long long)(tab->dim * (int64_t)sizeof(float)), tab->bytes,
          o->fanout, o->seconds);
  json_str(f, device);
  fputs(",\n  \"h2d_gbs\": ", f);
  json_num(f, h2d);
  fputs(",\n  \"peer_gbs\": ", f);
  json_num(f, peer);
  fprintf(f, ",\n  \"peer_p2p\": %s", peer_p2p ? "true" : "false");
  fputs(",\n  \"gpu_zcopy_gbs\": ", f);
  json_num(f, zc_alone);
  fputs(",\n  \"hbm_gbs\": ", f);
  json_num(f, dc->hbm_gbs);
  fputs(",\n  \"gemm_fp32_tflops\": ", f);
  json_num(f, dc->gemm_fp32_tflops);
  fputs(",\n  \"gemm_tf32_tflops\": ", f);
  json_num(f, dc->gemm_tf32_tflops);
  fputs(",\n  \"threads\": [", f);
  for (int i = 0; i < n; i++) {
    const double comb = r[i].gpu_together >= 0 ? r[i].cpu_together + r[i].gpu_together : -1;
    const double dlv = r[i].gpu_delivering >= 0 ? r[i].cpu_delivering + r[i].gpu_delivering : -1;
    fprintf(f, "%s\n    {\"threads\": %d, \"cpu_alone_gbs\": ", i ? "," : "", r[i].threads);
    json_num(f, r[i].cpu_alone);
    fputs(", \"cpu_together_gbs\": ", f);
    json_num(f, r[i].cpu_together);
    fputs(", \"gpu_together_gbs\": ", f);
    json_num(f, r[i].gpu_together);
    fputs(", \"combined_gbs\": ", f);
    json_num(f, comb);
    fputs(", \"cpu_delivering_gbs\": ", f);
    json_num(f, r[i].cpu_delivering);
    fputs(", \"gpu_delivering_gbs\": ", f);
    json_num(f, r[i].gpu_delivering);
    fputs(", \"states_gbs\": ", f);
    json_num(f, r[i].states_gbs);
    fputs(", \"delivered_gbs\": ", f);
    json_num(f, dlv);
    fputs("}", f);
  }
  fputs("\n  ]\n}\n", f);
  if (fclose(f) != 0) {
    fprintf(stderr, "bench_floor: writing %s failed: %s\n", o->json, strerror(errno));
    return 1;
  }
  return 0;
}

/* A rate in a column of 10 after a space, or "-" when not measured. */
static void print_gbs(double x) {
  if (x < 0)
    printf(" %10s", "-");
  else
    printf(" %10.2f", x);
}

/* ---- the run ---- */

static int run(floor_opts *o) {
  int rc = 1;
  core_list cores;
  allowed_cores(&cores);
  if (o->n_threads == 0) {
    o->threads[o->n_threads++] = 1;
    if (cores.n > 2)
      o->threads[o->n_threads++] = cores.n - 1;
  }
  int max_t = 0;
  for (int i = 0; i < o->n_threads; i++)
    max_t = NG_MAX(max_t, o->threads[i]);

  ng_cpu_isa isa = ng__cpu_isa_best();
  const char *isa_env = getenv("NG_CPU_ISA");
  if (isa_env && *isa_env && ng__cpu_isa_parse(&isa, isa_env) != NG_OK) {
    fprintf(stderr, "bench_floor: NG_CPU_ISA: %s\n", ng_last_error());
    return 1;
  }
  const ng_cpu_kernels *k = ng__cpu_kernels(isa);
  if (!k) {
    fprintf(stderr, "bench_floor: this CPU does not run the %s kernels (NG_CPU_ISA)\n", isa_env);
    return 1;
  }

  const size_t row_bytes = (size_t)o->dim * sizeof(float);
  host_table tab = {.dim = o->dim};
  tab.rows = (int64_t)(o->table_gib * (double)((size_t)1 << 30) / (double)row_bytes);
  if (tab.rows < 1 || tab.rows > INT32_MAX) {
    fprintf(stderr,
            "bench_floor: a %.3f GiB table of %zu-byte rows has %lld rows; the blocks address "
            "1 to 2^31-1 rows: change --table-gib\n",
            o->table_gib, row_bytes, (long long)tab.rows);
    return 1;
  }
  tab.bytes = (size_t)tab.rows * row_bytes;

  floor_row rows[MAX_THREAD_COUNTS];
  for (int i = 0; i < o->n_threads; i++)
    rows[i] = (floor_row){.threads = o->threads[i],
                          .cpu_alone = -1,
                          .cpu_together = -1,
                          .gpu_together = -1,
                          .cpu_delivering = -1,
                          .gpu_delivering = -1,
                          .states_gbs = -1};
  double h2d = -1, zc_alone = -1, peer = -1;
  bool peer_p2p = false;
  device_ceilings dc = {-1, -1, -1};
  const double warm = NG_MAX(0.1, o->seconds / 5);
  char device[512] = "cpu only (no CUDA backend in this build)";
  cpu_thread *th = NULL;
  cpu_shared sh = {.tab = &tab, .k = k};
  bool registered = false;
  float *table = ng__big_alloc(tab.bytes, "bench_floor host table");
  void *gpu_arg = NULL;
#ifdef NG_HAVE_CUDA
  gpu_side g = {0};
  void *h2d_host = NULL, *h2d_dev = NULL;
  int64_t *h_ids = NULL;
#endif
  if (!table) {
    fprintf(stderr, "bench_floor: %s\n", ng_last_error());
    goto cleanup;
  }
  double t_setup = ng__now();
  bench_fill_random(table, (int64_t)(tab.bytes / sizeof(float)), 41);
  tab.table = table;
  th = cpu_threads_make(&tab, max_t, o->fanout, &cores);
  if (!th) {
    fprintf(stderr, "bench_floor: %s\n", ng_last_error());
    goto cleanup;
  }
  pin_self(cores.cpu[0]);

#ifdef NG_HAVE_CUDA
  int count = 0;
  if (ng__cuda_devices(&count, device, sizeof device) != NG_OK) {
    fprintf(stderr, "bench_floor: listing the CUDA devices failed: %s\n", ng_last_error());
    goto cleanup;
  }
  if (count <= o->device) {
    /* As in a build without CUDA: the CPU's figures still mean something (CI runs this). */
    snprintf(device, sizeof device, "cpu only (CUDA device %d is not visible)", o->device);
    printf("bench_floor: CUDA device %d is not visible (%d device(s): no GPU, no driver, or "
           "CUDA_VISIBLE_DEVICES hides it); H2D and zero-copy not measured, CPU aggregation "
           "only\n",
           o->device, count);
    goto cpu_only;
  }
#define CK(call, what)                                                                             \
  do {                                                                                             \
    if ((call) != NG_OK) {                                                                         \
      fprintf(stderr, "bench_floor: %s failed: %s\n", (what), ng_last_error());                    \
      goto cleanup;                                                                                \
    }                                                                                              \
  } while (0)
  CK(ng__backend_cuda_create(&g.be, o->device), "creating the CUDA backend");
  const struct ng_backend_i *I = g.be->iface;
  CK(ng__cuda_host_register(table, tab.bytes, false), "registering the host table");
  registered = true;
  const void *view = NULL;
  CK(I->host_view(g.be, table, &view), "host_view of the table");
  g.view = view;

  /* 1. H2D */
  CK(I->host_alloc(g.be, &h2d_host, H2D_BYTES), "host_alloc (H2D probe)");
  CK(I->alloc(g.be, &h2d_dev, H2D_BYTES), "alloc (H2D probe)");
  bench_fill_random(h2d_host, (int64_t)(H2D_BYTES / sizeof(float)), 42);
  double times[H2D_REPS];
  for (int r = -1; r < H2D_REPS; r++) {
    double t0 = ng__now();
    CK(I->copy_h2d(g.be, h2d_dev, h2d_host, H2D_BYTES), "copy_h2d (H2D probe)");
    CK(I->sync(g.be), "sync (H2D probe)");
    if (r >= 0)
      times[r] = ng__now() - t0;
  }
  h2d = (double)H2D_BYTES / bench_median(times, H2D_REPS) * 1e-9;
  I->free(g.be, h2d_dev);
  h2d_dev = NULL;
  I->host_free(g.be, h2d_host);
  h2d_host = NULL;
  CK(device_peaks(g.be, &dc.hbm_gbs, &dc.gemm_fp32_tflops, &dc.gemm_tf32_tflops),
     "the device-memory and GEMM probes");
  /* 6. peer copies, when a second device is visible */
  if (count >= 2 &&
      ng__cuda_peer_bandwidth(&peer, &peer_p2p, 0, 1, PEER_BYTES, PEER_REPS) != NG_OK) {
    fprintf(stderr, "bench_floor: the peer copy probe failed: %s\n", ng_last_error());
    peer = -1;
  }

  /* 3. the zero-copy gathers' buffers and ids */
  g.call_rows = NG_MIN(tab.rows, (int64_t)(GATHER_CALL_BYTES / row_bytes));
  g.call_rows = NG_MAX(1, g.call_rows);
  const size_t ids_bytes = (size_t)(ZC_SETS * g.call_rows) * sizeof(int64_t);
  h_ids = ng__malloc(ids_bytes, "gather ids");
  if (!h_ids) {
    fprintf(stderr, "bench_floor: %s\n", ng_last_error());
    goto cleanup;
  }
  for (int64_t i = 0; i < ZC_SETS * g.call_rows; i++)
    h_ids[i] = (int64_t)(ng_hash2(43, (uint64_t)i) % (uint64_t)tab.rows);
  CK(I->alloc(g.be, (void **)&g.d_ids, ids_bytes), "alloc (gather ids)");
  CK(I->alloc(g.be, (void **)&g.d_dst, (size_t)g.call_rows * row_bytes), "alloc (gather rows)");
  CK(I->copy_h2d(g.be, g.d_ids, h_ids, ids_bytes), "copy_h2d (gather ids)");
  /* The gather must read the right rows for its rate to mean anything. */
  {
    float check[CHECK_ROWS * 4];
    const int64_t cdim = NG_MIN(o->dim, 4), nc = NG_MIN((int64_t)CHECK_ROWS, g.call_rows);
    CK(I->gather_rows(g.be, g.d_dst, g.view, g.d_ids, g.call_rows, o->dim), "gather_rows");
    for (int64_t r = 0; r < nc; r++) {
      CK(I->copy_d2h(g.be, check + r * 4, g.d_dst + r * o->dim, (size_t)cdim * sizeof(float)),
         "copy_d2h (gather check)");
      if (memcmp(check + r * 4, table + h_ids[r] * o->dim, (size_t)cdim * sizeof(float)) != 0) {
        fprintf(stderr,
                "bench_floor: zero-copy gathered row %lld differs from the table; the "
                "timing would be of a wrong result\n",
                (long long)r);
        goto cleanup;
      }
    }
  }
  {
    int64_t n;
    double el;
    CK(gpu_gather_for(&g, o->dim, warm, &n, &el), "gather_rows (warm-up)");
    CK(gpu_gather_for(&g, o->dim, o->seconds, &n, &el), "gather_rows (zero-copy alone)");
    zc_alone = (double)n * (double)row_bytes / el * 1e-9;
  }
  /* 5. the threads' staging rings and the states' device buffer */
  g.deliver_rows = NG_MIN(g.call_rows, NG_MAX(1, (int64_t)(DELIVER_CALL_BYTES / row_bytes)));
  const size_t chunk_bytes = (size_t)CHUNK_DST * row_bytes;
  sh.ring_chunks = NG_MAX((int64_t)8, (int64_t)(RING_BYTES / chunk_bytes));
  for (int i = 0; i < max_t; i++)
    CK(I->host_alloc(g.be, (void **)&th[i].ring, (size_t)sh.ring_chunks * chunk_bytes),
       "host_alloc (staging rings)");
  CK(I->alloc(g.be, (void **)&g.d_states, (size_t)(sh.ring_chunks / 2) * chunk_bytes),
     "alloc (states)");
  gpu_arg = &g;
#undef CK
cpu_only:
#else
  printf("bench_floor: the CUDA backend is not built (configure with -DNG_CUDA=ON where the CUDA "
         "toolkit is installed); H2D and zero-copy not measured, CPU aggregation only\n");
#endif

  printf("# bench_floor: %s\n# %zu-byte rows (dim %lld), table %.2f GiB (%lld rows, set up in "
         "%.1f s), fanout %g, %s kernels, %.2f s per figure after %.2f s warm-up, %d allowed "
         "cores\n",
         device, row_bytes, (long long)o->dim, (double)tab.bytes / (double)((size_t)1 << 30),
         (long long)tab.rows, ng__now() - t_setup, o->fanout, k->name, o->seconds, warm, cores.n);
  printf("# H2D pinned copy (512 MiB, median of 10):");
  print_gbs(h2d);
  printf(" GB/s\n# peer copy device 0 -> 1 (256 MiB):    ");
  if (peer >= 0)
    printf(" %10.2f GB/s (%s)", peer, peer_p2p ? "peer to peer" : "through the host");
  else
    printf(" %10s (fewer than two devices, or the probe failed)", "n/a");
  printf("\n# GPU zero-copy gather alone:            ");
  print_gbs(zc_alone);
  printf(" GB/s\n# device memory copy (read + written):     ");
  print_gbs(dc.hbm_gbs);
  printf(" GB/s\n# GEMM %d^3, fp32 / TF32 (TFLOP/s):   ", 8192);
  print_gbs(dc.gemm_fp32_tflops);
  print_gbs(dc.gemm_tf32_tflops);
  printf(" GB/s\n%7s %10s %10s %10s %10s %10s %10s %10s %10s\n", "threads", "cpu_alone", "cpu_tog",
         "gpu_tog", "combined", "cpu_dlv", "gpu_dlv", "states", "delivered");
  fflush(stdout);
  for (int i = 0; i < o->n_threads; i++) {
    floor_row *r = &rows[i];
    double dummy, dummy2;
    sh.deliver = false;
    if (measure(th, r->threads, &sh, warm, o->seconds, NULL, &r->cpu_alone, &dummy, &dummy2))
      goto cleanup;
    if (gpu_arg && measure(th, r->threads, &sh, warm, o->seconds, gpu_arg, &r->cpu_together,
                           &r->gpu_together, &dummy2))
      goto cleanup;
    sh.deliver = true;
    if (gpu_arg && measure(th, r->threads, &sh, warm, o->seconds, gpu_arg, &r->cpu_delivering,
                           &r->gpu_delivering, &r->states_gbs))
      goto cleanup;
    printf("%7d", r->threads);
    print_gbs(r->cpu_alone);
    print_gbs(r->cpu_together);
    print_gbs(r->gpu_together);
    print_gbs(r->gpu_together >= 0 ? r->cpu_together + r->gpu_together : -1);
    print_gbs(r->cpu_delivering);
    print_gbs(r->gpu_delivering);
    print_gbs(r->states_gbs);
    print_gbs(r->gpu_delivering >= 0 ? r->cpu_delivering + r->gpu_delivering : -1);
    printf("\n");
    fflush(stdout);
  }
  printf("# GB/s of rows read (1 GB = 1e9 B); combined = cpu_tog + gpu_tog, both running at "
         "once; delivered = cpu_dlv + gpu_dlv, the same while the CPU threads stage their states "
         "and the GPU copies them (states: GB/s staged and copied)\n");
  if (o->json &&
      write_json(o, device, k->name, &tab, h2d, zc_alone, peer, peer_p2p, &dc, rows, o->n_threads))
    goto cleanup;
  rc = 0;
cleanup:
#ifdef NG_HAVE_CUDA
  if (g.be) {
    for (int i = 0; th && i < max_t; i++)
      g.be->iface->host_free(g.be, th[i].ring);
    g.be->iface->free(g.be, g.d_states);
    g.be->iface->free(g.be, g.d_ids);
    g.be->iface->free(g.be, g.d_dst);
    g.be->iface->free(g.be, h2d_dev);
    g.be->iface->host_free(g.be, h2d_host);
  }
  free(h_ids);
  if (registered && ng__cuda_host_unregister(table) != NG_OK) {
    fprintf(stderr, "bench_floor: unregistering the table failed: %s\n", ng_last_error());
    rc = 1;
  }
  ng__backend_destroy(g.be);
#else
  (void)registered;
  (void)gpu_arg;
#endif
  cpu_threads_free(th, max_t);
  if (table)
    ng__big_free(table, tab.bytes);
  return rc;
}

int main(int argc, char **argv) {
  floor_opts o;
  int rc = parse_args(&o, argc, argv);
  if (rc)
    return rc;
  return run(&o);
}
