/* bench_gpu: the CUDA backend's memory throughput against the machine's measured limits (the
 * benchmark targets of issue 4). Four tables on stdout, each headed by the bytes it counts:
 *
 *   1. HBM probe: copy_d2d of a 2 GiB buffer; GB/s = 2 x bytes / time (read + write). The
 *      aggregation figures are given as a percentage of this one.
 *   2. Aggregation on the device, GraphSAGE-mean (SUM with mean), forward and backward, on random
 *      blocks: n_dst = 100k and 400k destinations with F = 10 and 25 sources each, drawn
 *      uniformly from n_src = 4 n_dst, for D = 128, 256, 512, 1024. Target: >= 70% of the probe.
 *   3. Zero-copy gather_rows of random rows of a host table (8 GiB by default, registered with
 *      ng__cuda_host_register) into device memory, rows of 256 B to 4 KB, about 25 GB (1 to 16 M
 *      rows, some 0.5 s) per timed call, beside the figures measured on the H200 machine
 *      (shared/device/limits.md). Target: within 10% of them.
 *   4. The batch path on the same rows: the CPU backend's gather_rows (OpenMP threads) into a
 *      registered 256 MiB staging buffer, then copy_h2d to the device, each part timed apart.
 *
 *   bench_gpu [--device N] [--table-gib G] [--reps R] [--quick]
 *
 * Every time is the median of R calls (default 10) after a warm-up call, the clock stopped after
 * sync. The figures are those of correct results: every block's layout is validated on the host;
 * at start-up small blocks run on the CUDA and the CPU backends, which must agree, with the
 * backward the adjoint of the forward; every measured aggregation is spot-checked against the
 * host's computation and every gather against the host table. Without the CUDA backend in the
 * build the program says so and exits 0. Needs about 17 GB of device memory (the 400k block at
 * D = 1024) and the table plus 1 GB of host memory; takes one to two minutes (--quick: seconds,
 * on small sizes). */
#include "backend_impl.h"
#include "rng.h"
#include "bench_util.h"
#include "ng_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NG_HAVE_CUDA
#include "ng_cuda.h"
#endif

typedef struct {
  int device;
  double table_gib; /* 0: the default of the mode */
  int reps;         /* 0: the default of the mode */
  bool quick;
} bench_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_gpu [options]\n"
          "  --device N       CUDA device to measure (default 0)\n"
          "  --table-gib G    host table of the zero-copy and batch gathers, in GiB (default 8;\n"
          "                   0.25 with --quick)\n"
          "  --reps R         timed calls per figure, the median counts (default 10; 3 with\n"
          "                   --quick)\n"
          "  --quick          small sizes, for a smoke run of a few seconds\n");
}

static int parse_args(bench_opts *o, int argc, char **argv) {
  *o = (bench_opts){0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--quick")) {
      o->quick = true;
    } else if (!strcmp(a, "--device") || !strcmp(a, "--table-gib") || !strcmp(a, "--reps")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "bench_gpu: %s needs a value\n", a);
        return 2;
      }
      const char *v = argv[++i];
      char *end;
      if (!strcmp(a, "--table-gib")) {
        double g = strtod(v, &end);
        if (*v == '\0' || *end != '\0' || !(g >= 1.0 / 1024) || g > 65536) {
          fprintf(stderr, "bench_gpu: --table-gib '%s': expected a size in [0.001, 65536] GiB\n",
                  v);
          return 2;
        }
        o->table_gib = g;
      } else {
        long n = strtol(v, &end, 10);
        long lo = !strcmp(a, "--reps") ? 1 : 0;
        if (*v == '\0' || *end != '\0' || n < lo || n > 1000000) {
          fprintf(stderr, "bench_gpu: %s '%s': expected an integer in [%ld, 1000000]\n", a, v, lo);
          return 2;
        }
        if (!strcmp(a, "--reps"))
          o->reps = (int)n;
        else
          o->device = (int)n;
      }
    } else {
      fprintf(stderr, "bench_gpu: unknown argument %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  return 0;
}

#ifdef NG_HAVE_CUDA

enum {
  MAX_DIM = 1024,   /* the widest aggregation row */
  CHECK_ROWS = 16,  /* rows of each measured result compared on the host */
  N_ROW_SIZES = 5,  /* zero-copy row sizes */
  WARMUP_CALLS = 1, /* untimed calls before each figure */
  PATTERN_FLOATS = 4 << 20
};

static const int64_t AGGR_DIMS[] = {128, 256, 512, 1024};
static const int32_t FANOUTS[] = {10, 25};
static const int64_t ROW_BYTES[N_ROW_SIZES] = {256, 512, 1024, 2048, 4096};
/* Zero-copy random-row throughput measured on the H200 machine (8 GiB registered host table),
 * shared/device/limits.md: the reference the gather is held to. */
static const double ZC_REF_GBS[N_ROW_SIZES] = {9.1, 16.8, 31.7, 51.0, 51.1};
static const double AGGR_TARGET = 0.70; /* of the HBM probe */
static const double ZC_TARGET = 0.90;   /* of the reference */

/* The sizes of one run (full or --quick). */
typedef struct {
  int reps;
  size_t probe_bytes;
  const int32_t *n_dsts;
  int n_n_dst;
  size_t table_bytes;   /* host table of the gathers */
  double gather_target; /* bytes per timed gather call (about 0.5 s at the reference rate) */
  int64_t gather_min_rows, gather_max_rows;
  size_t batch_bytes; /* device destination and pinned staging buffer */
} bench_cfg;

static const int32_t FULL_N_DST[] = {100000, 400000};
static const int32_t QUICK_N_DST[] = {20000};

#define FAIL(what)                                                                                 \
  do {                                                                                             \
    fprintf(stderr, "bench_gpu: %s failed: %s\n", (what), ng_last_error());                        \
    goto cleanup;                                                                                  \
  } while (0)

/* Goes to cleanup (the caller's rc still 1) when `call` fails, printing ng_last_error(). */
#define CK(call, what)                                                                             \
  do {                                                                                             \
    if ((call) != NG_OK)                                                                           \
      FAIL(what);                                                                                  \
  } while (0)

static void random_ids(int64_t *ids, int64_t n, int64_t rows, uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    ids[i] = (int64_t)(ng_hash2(seed, (uint64_t)i) % (uint64_t)rows);
}

/* ---- device buffers filled from a repeating pattern ----
 * Filling gigabytes from the host would take longer than the measurements, so the device
 * buffers repeat one random chunk: float i of a filled buffer is pattern[i % PATTERN_FLOATS],
 * which the host checks recompute. */

typedef struct {
  float *host, *dev;
} pattern;

static float pat(const pattern *p, int64_t i) {
  return p->host[i % PATTERN_FLOATS];
}

static ng_status pattern_fill(ng_backend *be, const pattern *p, float *dst, int64_t n) {
  const struct ng_backend_i *I = be->iface;
  for (int64_t at = 0; at < n; at += PATTERN_FLOATS)
    NG_CHECK(I->copy_d2d(be, dst + at, p->dev,
                         (size_t)NG_MIN((int64_t)PATTERN_FLOATS, n - at) * sizeof(float)));
  return I->sync(be);
}

/* ---- blocks: the layout of core/backend_impl.h ---- */

typedef struct {
  int32_t *indptr, *indices, *t_indptr, *t_dst, *t_eid;
  ng_block b;
} hblock;

static void hblock_free(hblock *hb) {
  free(hb->indptr);
  free(hb->indices);
  free(hb->t_indptr);
  free(hb->t_dst);
  free(hb->t_eid);
  memset(hb, 0, sizeof *hb);
}

/* n_dst destinations with `fanout` sources each, drawn uniformly (with repeats) from n_src; the
 * transpose lists each source's edges in edge order, as the sampler builds it. */
static ng_status hblock_make(hblock *hb, int32_t n_dst, int32_t n_src, int32_t fanout,
                             uint64_t seed) {
  memset(hb, 0, sizeof *hb);
  const int64_t nnz = (int64_t)n_dst * fanout;
  if (nnz > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "bench block of %lld edges: blocks hold < 2^31 edges",
                   (long long)nnz);
  hb->indptr = ng__malloc(((size_t)n_dst + 1) * sizeof(int32_t), "block indptr");
  hb->indices = ng__malloc((size_t)nnz * sizeof(int32_t), "block indices");
  hb->t_indptr = ng__calloc((size_t)n_src + 1, sizeof(int32_t), "block t_indptr");
  hb->t_dst = ng__malloc((size_t)nnz * sizeof(int32_t), "block t_dst");
  hb->t_eid = ng__malloc((size_t)nnz * sizeof(int32_t), "block t_eid");
  int32_t *cur = ng__malloc((size_t)n_src * sizeof(int32_t), "block transpose cursor");
  if (!hb->indptr || !hb->indices || !hb->t_indptr || !hb->t_dst || !hb->t_eid || !cur) {
    free(cur);
    hblock_free(hb);
    return NG_ERR_NOMEM;
  }
  for (int32_t d = 0; d <= n_dst; d++)
    hb->indptr[d] = d * fanout;
  for (int64_t e = 0; e < nnz; e++) {
    hb->indices[e] = (int32_t)(ng_hash2(seed, (uint64_t)e) % (uint64_t)n_src);
    hb->t_indptr[hb->indices[e] + 1]++;
  }
  for (int32_t s = 0; s < n_src; s++) {
    hb->t_indptr[s + 1] += hb->t_indptr[s];
    cur[s] = hb->t_indptr[s];
  }
  for (int32_t d = 0; d < n_dst; d++)
    for (int32_t e = hb->indptr[d]; e < hb->indptr[d + 1]; e++) {
      int32_t at = cur[hb->indices[e]]++;
      hb->t_dst[at] = d;
      hb->t_eid[at] = e;
    }
  free(cur);
  hb->b = (ng_block){.n_dst = n_dst,
                     .n_src = n_src,
                     .nnz = nnz,
                     .indptr = hb->indptr,
                     .indices = hb->indices,
                     .t_indptr = hb->t_indptr,
                     .t_dst = hb->t_dst,
                     .t_eid = hb->t_eid};
  return NG_OK;
}

/* Whether the block has the layout of backend_impl.h: indptr and t_indptr run from 0 to nnz,
 * every index is in range, and the transpose lists each edge exactly once, under its own source
 * and with its own destination. (Each transposed entry names an edge of its source, distinct
 * and increasing within the source, and there are nnz entries: so every edge appears once.) */
static ng_status hblock_validate(const hblock *hb) {
  const ng_block *b = &hb->b;
  if (hb->indptr[0] != 0 || hb->indptr[b->n_dst] != b->nnz || hb->t_indptr[0] != 0 ||
      hb->t_indptr[b->n_src] != b->nnz)
    return ng__err(NG_ERR_INTERNAL, "bench block: indptr or t_indptr does not run from 0 to nnz");
  for (int32_t d = 0; d < b->n_dst; d++)
    if (hb->indptr[d] > hb->indptr[d + 1])
      return ng__err(NG_ERR_INTERNAL, "bench block: indptr decreases at destination %d", (int)d);
  for (int64_t e = 0; e < b->nnz; e++)
    if (hb->indices[e] < 0 || hb->indices[e] >= b->n_src)
      return ng__err(NG_ERR_INTERNAL, "bench block: edge %lld has source %d out of range",
                     (long long)e, (int)hb->indices[e]);
  for (int32_t s = 0; s < b->n_src; s++) {
    if (hb->t_indptr[s] > hb->t_indptr[s + 1])
      return ng__err(NG_ERR_INTERNAL, "bench block: t_indptr decreases at source %d", (int)s);
    for (int32_t t = hb->t_indptr[s]; t < hb->t_indptr[s + 1]; t++) {
      const int32_t e = hb->t_eid[t], d = hb->t_dst[t];
      if (e < 0 || e >= b->nnz || hb->indices[e] != s || d < 0 || d >= b->n_dst ||
          e < hb->indptr[d] || e >= hb->indptr[d + 1] ||
          (t > hb->t_indptr[s] && e <= hb->t_eid[t - 1]))
        return ng__err(NG_ERR_INTERNAL,
                       "bench block: transposed edge %d of source %d (edge %d, destination %d) "
                       "is not an edge of that source and destination, or repeats one",
                       (int)t, (int)s, (int)e, (int)d);
    }
  }
  return NG_OK;
}

/* A copy of a host block in device memory. */
typedef struct {
  void *mem[5];
  ng_block b;
} dblock;

static void dblock_free(ng_backend *be, dblock *db) {
  for (int i = 0; i < 5; i++)
    be->iface->free(be, db->mem[i]);
  memset(db, 0, sizeof *db);
}

static ng_status dblock_up(ng_backend *be, dblock *db, const ng_block *h) {
  memset(db, 0, sizeof *db);
  const void *src[5] = {h->indptr, h->indices, h->t_indptr, h->t_dst, h->t_eid};
  const size_t n[5] = {(size_t)h->n_dst + 1, (size_t)h->nnz, (size_t)h->n_src + 1, (size_t)h->nnz,
                       (size_t)h->nnz};
  for (int i = 0; i < 5; i++) {
    ng_status st = be->iface->alloc(be, &db->mem[i], n[i] * sizeof(int32_t));
    if (st == NG_OK)
      st = be->iface->copy_h2d(be, db->mem[i], src[i], n[i] * sizeof(int32_t));
    if (st != NG_OK) {
      dblock_free(be, db);
      return st;
    }
  }
  db->b = *h;
  db->b.indptr = db->mem[0];
  db->b.indices = db->mem[1];
  db->b.t_indptr = db->mem[2];
  db->b.t_dst = db->mem[3];
  db->b.t_eid = db->mem[4];
  return NG_OK;
}

static ng_aggr mean_aggr(void) {
  return (ng_aggr){.reduce = NG_REDUCE_SUM, .mean = true};
}

/* ---- timing ---- */

typedef enum { OP_D2D, OP_FWD, OP_BWD, OP_GATHER } op_kind;

/* One timed operation: what run_op queues. */
typedef struct {
  op_kind kind;
  ng_backend *be;
  void *dst; /* d2d destination, aggregation output, gather destination */
  const void *src;
  size_t bytes; /* d2d */
  const ng_block *blk;
  int64_t dim;
  const int64_t *ids; /* gather: device ids, n of them, batch rows per call */
  int64_t n, batch;
} op_args;

static ng_status run_op(const op_args *a) {
  const struct ng_backend_i *I = a->be->iface;
  const ng_aggr ag = mean_aggr();
  switch (a->kind) {
  case OP_D2D:
    return I->copy_d2d(a->be, a->dst, a->src, a->bytes);
  case OP_FWD:
    return I->aggr_fwd(a->be, &ag, a->blk, a->src, a->dim, a->dst, NULL);
  case OP_BWD:
    return I->aggr_bwd(a->be, &ag, a->blk, a->src, NULL, a->dim, a->dst);
  case OP_GATHER:
    for (int64_t at = 0; at < a->n; at += a->batch)
      NG_CHECK(
          I->gather_rows(a->be, a->dst, a->src, a->ids + at, NG_MIN(a->batch, a->n - at), a->dim));
    return NG_OK;
  }
  return ng__err(NG_ERR_INVALID_ARG, "bench_gpu: unknown operation %d", (int)a->kind);
}

/* Median seconds of `reps` calls after WARMUP_CALLS untimed ones, each waited for with sync;
 * *best receives the fastest (may be NULL). */
static ng_status time_op(const op_args *a, int reps, double *out_median, double *best) {
  double *t = ng__malloc((size_t)reps * sizeof(double), "timings");
  if (!t)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  for (int r = -WARMUP_CALLS; r < reps && st == NG_OK; r++) {
    double t0 = ng__now();
    st = run_op(a);
    if (st == NG_OK)
      st = a->be->iface->sync(a->be);
    if (r >= 0)
      t[r] = ng__now() - t0;
  }
  if (st == NG_OK) {
    *out_median = bench_median(t, reps);
    if (best)
      *best = t[0]; /* bench_median() sorted them */
  }
  free(t);
  return st;
}

/* ---- correctness checks ---- */

/* The aggregation of destination d in the CPU's operation order: a sum in edge order, then the
 * division by the degree. */
static void ref_fwd_row(const hblock *hb, const pattern *p, int64_t dim, int32_t d, float *out) {
  const int32_t e0 = hb->indptr[d], e1 = hb->indptr[d + 1];
  for (int64_t j = 0; j < dim; j++) {
    float acc = 0.0f;
    for (int32_t e = e0; e < e1; e++)
      acc = acc + pat(p, (int64_t)hb->indices[e] * dim + j);
    out[j] = e1 > e0 ? acc / (float)(e1 - e0) : 0.0f;
  }
}

/* The gradient of source s: each transposed edge adds grad_dst[d] / degree(d), in order. */
static void ref_bwd_row(const hblock *hb, const pattern *p, int64_t dim, int32_t s, float *out) {
  for (int64_t j = 0; j < dim; j++) {
    float acc = 0.0f;
    for (int32_t t = hb->t_indptr[s]; t < hb->t_indptr[s + 1]; t++) {
      const int32_t d = hb->t_dst[t];
      const float c = 1.0f / (float)(hb->indptr[d + 1] - hb->indptr[d]);
      acc = acc + c * pat(p, (int64_t)d * dim + j);
    }
    out[j] = acc;
  }
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)a[i] - (double)b[i]));
  return m;
}

/* fp32 sums of at most 25 terms in [-0.5, 0.5] agree far closer than this; a wrong edge or row
 * is off by about 0.01 or more. */
static const double AGGR_TOL = 1e-4;

/* Relative gap allowed between <fwd(x), g> and <x, bwd(g)>: fp32 rounding of the rows gives
 * far less than 1e-8; one misplaced transposed edge among 5000 gives about 1e-5. */
static const double ADJ_TOL = 1e-6;

/* The generator's blocks (validated) on the CPU backend against the CUDA backend, forward and
 * backward, for each fanout and the narrowest and widest D, plus the adjoint test: checks the
 * device kernels the timings are about and the block's transpose. Sources are a random table, so
 * that every edge matters. */
static int check_against_cpu(ng_backend *gpu, ng_backend *cpu) {
  const int32_t n_dst = 500, n_src = 2000;
  const int64_t dims[2] = {AGGR_DIMS[0], MAX_DIM};
  const struct ng_backend_i *G = gpu->iface, *C = cpu->iface;
  const ng_aggr ag = mean_aggr();
  const size_t src_bytes = (size_t)n_src * MAX_DIM * sizeof(float);
  const size_t dst_bytes = (size_t)n_dst * MAX_DIM * sizeof(float);
  int rc = 1;
  double worst = 0, worst_adj = 0, dot[2] = {0}, dot_abs[2] = {0};
  hblock hb = {0};
  dblock db = {0};
  float *h_src = ng__malloc(src_bytes, "check sources");
  float *h_gdst = ng__malloc(dst_bytes, "check output gradient");
  float *c_out = ng__malloc(src_bytes, "check CPU result");
  float *g_out = ng__malloc(src_bytes, "check GPU result");
  float *d_src = NULL, *d_gdst = NULL, *d_out = NULL;
  if (!h_src || !h_gdst || !c_out || !g_out)
    FAIL("allocating the check buffers");
  bench_fill_random(h_src, (int64_t)n_src * MAX_DIM, 11);
  bench_fill_random(h_gdst, (int64_t)n_dst * MAX_DIM, 12);
  CK(G->alloc(gpu, (void **)&d_src, src_bytes), "alloc (check sources)");
  CK(G->alloc(gpu, (void **)&d_gdst, dst_bytes), "alloc (check output gradient)");
  CK(G->alloc(gpu, (void **)&d_out, src_bytes), "alloc (check result)");
  CK(G->copy_h2d(gpu, d_src, h_src, src_bytes), "copy_h2d (check sources)");
  CK(G->copy_h2d(gpu, d_gdst, h_gdst, dst_bytes), "copy_h2d (check output gradient)");
  for (size_t fi = 0; fi < NG_ARRAY_LEN(FANOUTS); fi++) {
    CK(hblock_make(&hb, n_dst, n_src, FANOUTS[fi], 100 + fi), "building the check block");
    CK(hblock_validate(&hb), "checking the check block");
    CK(dblock_up(gpu, &db, &hb.b), "uploading the check block");
    for (int di = 0; di < 2; di++) {
      const int64_t dim = dims[di];
      for (int bwd = 0; bwd < 2; bwd++) {
        const int64_t rows = bwd ? n_src : n_dst;
        const size_t bytes = (size_t)rows * (size_t)dim * sizeof(float);
        if (bwd) {
          CK(C->aggr_bwd(cpu, &ag, &hb.b, h_gdst, NULL, dim, c_out), "CPU aggr_bwd");
          CK(G->aggr_bwd(gpu, &ag, &db.b, d_gdst, NULL, dim, d_out), "CUDA aggr_bwd");
        } else {
          CK(C->aggr_fwd(cpu, &ag, &hb.b, h_src, dim, c_out, NULL), "CPU aggr_fwd");
          CK(G->aggr_fwd(gpu, &ag, &db.b, d_src, dim, d_out, NULL), "CUDA aggr_fwd");
        }
        CK(G->copy_d2h(gpu, g_out, d_out, bytes), "copy_d2h (check result)");
        /* The backward must be the adjoint of the forward whatever the backend:
         * <fwd(src), grad_dst> = <src, bwd(grad_dst)>, which fails for a wrong transpose. */
        const float *other = bwd ? h_src : h_gdst;
        dot[bwd] = 0;
        dot_abs[bwd] = 0;
        for (int64_t i = 0; i < rows * dim; i++) {
          dot[bwd] += (double)g_out[i] * other[i];
          dot_abs[bwd] += fabs((double)g_out[i] * other[i]);
        }
        double diff = max_abs_diff(c_out, g_out, rows * dim);
        worst = fmax(worst, diff);
        if (!(diff <= AGGR_TOL)) {
          fprintf(stderr,
                  "bench_gpu: the CUDA %s differs from the CPU backend's by %.3g (fanout %d, "
                  "D %lld): the kernel or the bench's block is wrong; nothing measured\n",
                  bwd ? "aggr_bwd" : "aggr_fwd", diff, (int)FANOUTS[fi], (long long)dim);
          goto cleanup;
        }
      }
      const double adj = fabs(dot[0] - dot[1]) / fmax(dot_abs[0], dot_abs[1]);
      worst_adj = fmax(worst_adj, adj);
      if (!(adj <= ADJ_TOL)) {
        fprintf(stderr,
                "bench_gpu: the CUDA aggr_bwd is not the adjoint of aggr_fwd (relative gap %.3g, "
                "fanout %d, D %lld): the bench's transpose is wrong; nothing measured\n",
                adj, (int)FANOUTS[fi], (long long)dim);
        goto cleanup;
      }
    }
    dblock_free(gpu, &db);
    hblock_free(&hb);
  }
  printf("# check: aggr_fwd and aggr_bwd (mean) on the CUDA and CPU backends, n_dst %d, "
         "n_src %d, fanouts 10 and 25, D %lld and %lld: max |GPU - CPU| = %.3g (limit %.0e); "
         "adjoint gap %.3g (limit %.0e)\n",
         (int)n_dst, (int)n_src, (long long)dims[0], (long long)dims[1], worst, AGGR_TOL, worst_adj,
         ADJ_TOL);
  rc = 0;
cleanup:
  dblock_free(gpu, &db);
  hblock_free(&hb);
  G->free(gpu, d_src);
  G->free(gpu, d_gdst);
  G->free(gpu, d_out);
  free(h_src);
  free(h_gdst);
  free(c_out);
  free(g_out);
  return rc;
}

/* Compares CHECK_ROWS rows, spread over the result, of the measured forward (d_out) and backward
 * (d_gsrc) with the host's computation on the patterned inputs. */
static int spot_check(ng_backend *be, const hblock *hb, const pattern *p, int64_t dim,
                      const float *d_out, const float *d_gsrc) {
  float *got = ng__malloc((size_t)dim * sizeof(float), "spot-check row");
  float *want = ng__malloc((size_t)dim * sizeof(float), "spot-check row");
  int rc = 1;
  if (!got || !want)
    FAIL("allocating the spot-check rows");
  for (int bwd = 0; bwd < 2; bwd++) {
    const int32_t rows = bwd ? hb->b.n_src : hb->b.n_dst;
    for (int k = 0; k < CHECK_ROWS; k++) {
      const int32_t r = (int32_t)((int64_t)k * (rows - 1) / (CHECK_ROWS - 1));
      const float *row = (bwd ? d_gsrc : d_out) + (int64_t)r * dim;
      CK(be->iface->copy_d2h(be, got, row, (size_t)dim * sizeof(float)), "copy_d2h (spot check)");
      if (bwd)
        ref_bwd_row(hb, p, dim, r, want);
      else
        ref_fwd_row(hb, p, dim, r, want);
      double diff = max_abs_diff(got, want, dim);
      if (!(diff <= AGGR_TOL)) {
        fprintf(stderr,
                "bench_gpu: %s row %d of the measured block (D %lld) is off by %.3g from the "
                "host's computation: the timing is of a wrong result\n",
                bwd ? "aggr_bwd" : "aggr_fwd", (int)r, (long long)dim, diff);
        goto cleanup;
      }
    }
  }
  rc = 0;
cleanup:
  free(got);
  free(want);
  return rc;
}

/* Copies n gathered rows back and compares them byte for byte with the host table. */
static int check_gathered(ng_backend *be, const float *d_rows, const float *table,
                          const int64_t *ids, int64_t n, int64_t dim, float *buf,
                          const char *path) {
  const size_t row_bytes = (size_t)dim * sizeof(float);
  if (be->iface->copy_d2h(be, buf, d_rows, (size_t)n * row_bytes) != NG_OK) {
    fprintf(stderr, "bench_gpu: copy_d2h (%s check) failed: %s\n", path, ng_last_error());
    return 1;
  }
  for (int64_t i = 0; i < n; i++)
    if (memcmp(buf + i * dim, table + ids[i] * dim, row_bytes) != 0) {
      fprintf(stderr,
              "bench_gpu: %s: gathered row %lld (table row %lld, %zu B) differs from the host "
              "table; the timing is of a wrong result\n",
              path, (long long)i, (long long)ids[i], row_bytes);
      return 1;
    }
  return 0;
}

/* ---- 1. HBM probe ---- */

static int bench_hbm(ng_backend *be, const bench_cfg *c, const pattern *p, double *hbm_gbs) {
  const struct ng_backend_i *I = be->iface;
  int rc = 1;
  float *a = NULL, *b = NULL;
  CK(I->alloc(be, (void **)&a, c->probe_bytes), "alloc (HBM probe source)");
  CK(I->alloc(be, (void **)&b, c->probe_bytes), "alloc (HBM probe destination)");
  CK(pattern_fill(be, p, a, (int64_t)(c->probe_bytes / sizeof(float))), "filling the probe");
  op_args op = {.kind = OP_D2D, .be = be, .dst = b, .src = a, .bytes = c->probe_bytes};
  double med, best;
  CK(time_op(&op, c->reps, &med, &best), "copy_d2d (HBM probe)");
  const double moved = 2.0 * (double)c->probe_bytes;
  *hbm_gbs = moved / med * 1e-9;
  printf("\n# 1. HBM probe: copy_d2d of one buffer; bytes = 2 x size (read + write), GB = 1e9 B\n");
  printf("%-10s %10s %10s %10s %10s\n", "MiB", "ms(med)", "ms(best)", "GB/s(med)", "GB/s(best)");
  printf("%-10zu %10.3f %10.3f %10.1f %10.1f\n", c->probe_bytes >> 20, med * 1e3, best * 1e3,
         *hbm_gbs, moved / best * 1e-9);
  fflush(stdout);
  rc = 0;
cleanup:
  I->free(be, a);
  I->free(be, b);
  return rc;
}

/* ---- 2. aggregation ---- */

static int bench_aggr(ng_backend *be, const bench_cfg *c, const pattern *p, double hbm_gbs) {
  const struct ng_backend_i *I = be->iface;
  printf("\n# 2. aggregation on the device, GraphSAGE-mean (SUM, mean), n_src = 4 n_dst, sources "
         "uniform; median of %d calls\n"
         "#   aggr_fwd bytes = nnz*D*4 (source rows read) + n_dst*D*4 (written) + "
         "(n_dst+1)*4 + nnz*4 (indptr, indices)\n"
         "#   aggr_bwd bytes = nnz*D*4 (grad_dst rows read) + n_src*D*4 (written) + "
         "(n_src+1)*4 + nnz*4 + (n_dst+1)*4 (t_indptr, t_dst, indptr)\n"
         "#   %%HBM = GB/s / the probe's %.1f GB/s; target >= %.0f%%\n",
         c->reps, hbm_gbs, AGGR_TARGET * 100);
  printf("%-9s %7s %8s %3s %5s %9s %9s %9s %8s %6s %6s\n", "op", "n_dst", "n_src", "F", "D", "nnz",
         "MB", "ms", "GB/s", "%HBM", "target");
  int rc = 1;
  float *table = NULL, *out = NULL, *gdst = NULL, *gsrc = NULL;
  hblock hb = {0};
  dblock db = {0};
  for (int ni = 0; ni < c->n_n_dst; ni++) {
    const int32_t n_dst = c->n_dsts[ni], n_src = 4 * n_dst;
    const int64_t src_floats = (int64_t)n_src * MAX_DIM, dst_floats = (int64_t)n_dst * MAX_DIM;
    /* Buffers for the widest rows, reused for the narrower ones. */
    CK(I->alloc(be, (void **)&table, (size_t)src_floats * sizeof(float)), "alloc (source table)");
    CK(I->alloc(be, (void **)&gsrc, (size_t)src_floats * sizeof(float)), "alloc (grad_src)");
    CK(I->alloc(be, (void **)&out, (size_t)dst_floats * sizeof(float)), "alloc (output rows)");
    CK(I->alloc(be, (void **)&gdst, (size_t)dst_floats * sizeof(float)), "alloc (grad_dst)");
    CK(pattern_fill(be, p, table, src_floats), "filling the source table");
    CK(pattern_fill(be, p, gdst, dst_floats), "filling grad_dst");
    for (size_t fi = 0; fi < NG_ARRAY_LEN(FANOUTS); fi++) {
      const int32_t fanout = FANOUTS[fi];
      CK(hblock_make(&hb, n_dst, n_src, fanout, 1000 + (uint64_t)ni * 10 + fi),
         "building the block");
      CK(hblock_validate(&hb), "checking the block");
      CK(dblock_up(be, &db, &hb.b), "uploading the block");
      const double nnz = (double)hb.b.nnz;
      for (size_t di = 0; di < NG_ARRAY_LEN(AGGR_DIMS); di++) {
        const int64_t dim = AGGR_DIMS[di];
        const double row = (double)dim * sizeof(float);
        for (int bwd = 0; bwd < 2; bwd++) {
          op_args op = {.kind = bwd ? OP_BWD : OP_FWD,
                        .be = be,
                        .dst = bwd ? gsrc : out,
                        .src = bwd ? gdst : table,
                        .blk = &db.b,
                        .dim = dim};
          double med;
          CK(time_op(&op, c->reps, &med, NULL), bwd ? "aggr_bwd" : "aggr_fwd");
          const double bytes =
              bwd ? nnz * row + n_src * row + 4.0 * ((n_src + 1) + nnz + (n_dst + 1))
                  : nnz * row + n_dst * row + 4.0 * ((n_dst + 1) + nnz);
          const double gbs = bytes / med * 1e-9, frac = gbs / hbm_gbs;
          printf("%-9s %7d %8d %3d %5lld %9lld %9.1f %9.3f %8.1f %6.1f %6s\n",
                 bwd ? "aggr_bwd" : "aggr_fwd", (int)n_dst, (int)n_src, (int)fanout, (long long)dim,
                 (long long)hb.b.nnz, bytes * 1e-6, med * 1e3, gbs, frac * 100,
                 frac >= AGGR_TARGET ? "ok" : "below");
          fflush(stdout);
        }
        if (spot_check(be, &hb, p, dim, out, gsrc))
          goto cleanup;
      }
      dblock_free(be, &db);
      hblock_free(&hb);
    }
    I->free(be, table);
    I->free(be, gsrc);
    I->free(be, out);
    I->free(be, gdst);
    table = gsrc = out = gdst = NULL;
  }
  printf("# spot check: %d rows of every measured forward and backward equal the host's "
         "computation within %.0e\n",
         CHECK_ROWS, AGGR_TOL);
  rc = 0;
cleanup:
  dblock_free(be, &db);
  hblock_free(&hb);
  I->free(be, table);
  I->free(be, gsrc);
  I->free(be, out);
  I->free(be, gdst);
  return rc;
}

/* ---- 3 and 4. gathers of random rows of a host table ---- */

/* Rows per timed call for one row size: about c->gather_target bytes, within the bounds. */
static int64_t gather_rows_for(const bench_cfg *c, int64_t row_bytes) {
  int64_t n = (int64_t)(c->gather_target / (double)row_bytes);
  return NG_MAX(c->gather_min_rows, NG_MIN(c->gather_max_rows, n));
}

/* The random ids of row size ROW_BYTES[ri] (*n_out of them): the same in both tables. */
static void make_ids(const bench_cfg *c, int ri, int64_t *h_ids, int64_t *n_out) {
  const int64_t rb = ROW_BYTES[ri], n = gather_rows_for(c, rb);
  random_ids(h_ids, n, (int64_t)(c->table_bytes / (size_t)rb), 2000 + (uint64_t)ri);
  *n_out = n;
}

static int bench_gather(ng_backend *be, ng_backend *cpu, const bench_cfg *c) {
  const struct ng_backend_i *I = be->iface;
  const int64_t max_rows = gather_rows_for(c, ROW_BYTES[0]);
  int rc = 1;
  bool table_reg = false, stage_reg = false;
  float *d_dst = NULL;
  int64_t *d_ids = NULL;
  float *table = ng__big_alloc(c->table_bytes, "host feature table");
  float *stage = ng__big_alloc(c->batch_bytes, "pinned staging buffer");
  int64_t *h_ids = ng__malloc((size_t)max_rows * sizeof(int64_t), "gather ids");
  float *check = ng__malloc(c->batch_bytes, "gather check rows");
  double *tg = ng__malloc((size_t)c->reps * sizeof(double), "timings");
  double *th = ng__malloc((size_t)c->reps * sizeof(double), "timings");
  double *ts = ng__malloc((size_t)c->reps * sizeof(double), "timings");
  if (!table || !stage || !h_ids || !check || !tg || !th || !ts)
    FAIL("allocating the host buffers of the gathers");
  double t0 = ng__now();
  bench_fill_random(table, (int64_t)(c->table_bytes / sizeof(float)), 21);
  bench_fill_random(stage, (int64_t)(c->batch_bytes / sizeof(float)),
                    22); /* touched before pinning */
  CK(ng__cuda_host_register(table, c->table_bytes, false), "registering the host table");
  table_reg = true;
  CK(ng__cuda_host_register(stage, c->batch_bytes, false), "registering the staging buffer");
  stage_reg = true;
  CK(I->alloc(be, (void **)&d_ids, (size_t)max_rows * sizeof(int64_t)), "alloc (gather ids)");
  CK(I->alloc(be, (void **)&d_dst, c->batch_bytes), "alloc (gather destination)");
  printf("\n# host table: %.2f GiB, filled and registered in %.1f s; gathers in calls of at most "
         "%zu MiB\n",
         (double)c->table_bytes / (double)(1 << 30), ng__now() - t0, c->batch_bytes >> 20);

  printf("\n# 3. zero-copy gather_rows of random rows of the registered host table into device "
         "memory; bytes = rows * row bytes; median of %d\n"
         "#   ref = limits.md (H200 machine, 8 GiB table); target: ratio >= %.2f\n",
         c->reps, ZC_TARGET);
  printf("%-6s %5s %9s %9s %8s %8s %7s %6s %6s\n", "row_B", "D", "rows", "ms", "Mrows/s", "GB/s",
         "ref", "ratio", "target");
  for (int ri = 0; ri < N_ROW_SIZES; ri++) {
    const int64_t rb = ROW_BYTES[ri], dim = rb / (int64_t)sizeof(float);
    int64_t n;
    make_ids(c, ri, h_ids, &n);
    CK(I->copy_h2d(be, d_ids, h_ids, (size_t)n * sizeof(int64_t)), "copy_h2d (gather ids)");
    op_args op = {.kind = OP_GATHER,
                  .be = be,
                  .dst = d_dst,
                  .src = table,
                  .dim = dim,
                  .ids = d_ids,
                  .n = n,
                  .batch = (int64_t)(c->batch_bytes / (size_t)rb)};
    double med;
    CK(time_op(&op, c->reps, &med, NULL), "gather_rows (zero-copy)");
    const int64_t nc = NG_MIN(n, op.batch);
    CK(I->gather_rows(be, d_dst, table, d_ids, nc, dim), "gather_rows (zero-copy check)");
    if (check_gathered(be, d_dst, table, h_ids, nc, dim, check, "zero-copy gather"))
      goto cleanup;
    const double gbs = (double)n * (double)rb / med * 1e-9, ratio = gbs / ZC_REF_GBS[ri];
    printf("%-6lld %5lld %9lld %9.2f %8.1f %8.2f %7.1f %6.2f %6s\n", (long long)rb, (long long)dim,
           (long long)n, med * 1e3, (double)n / med * 1e-6, gbs, ZC_REF_GBS[ri], ratio,
           ratio >= ZC_TARGET ? "ok" : "below");
    fflush(stdout);
  }

  printf("\n# 4. batch path: the CPU backend's gather_rows (%d OpenMP threads) of the same rows "
         "into the registered staging buffer, then copy_h2d, call by call; bytes = rows * row "
         "bytes; medians of %d\n",
         omp_get_max_threads(), c->reps);
  printf("%-6s %5s %9s %9s %9s %9s %9s %9s\n", "row_B", "D", "rows", "gath_ms", "gath_GB/s",
         "h2d_ms", "h2d_GB/s", "both_GB/s");
  for (int ri = 0; ri < N_ROW_SIZES; ri++) {
    const int64_t rb = ROW_BYTES[ri], dim = rb / (int64_t)sizeof(float);
    const int64_t batch = (int64_t)(c->batch_bytes / (size_t)rb);
    int64_t n;
    make_ids(c, ri, h_ids, &n);
    int64_t last = 0;
    for (int r = -WARMUP_CALLS; r < c->reps; r++) {
      double g = 0, h = 0;
      for (int64_t at = 0; at < n; at += batch) {
        const int64_t len = NG_MIN(batch, n - at);
        double a = ng__now();
        CK(cpu->iface->gather_rows(cpu, stage, table, h_ids + at, len, dim), "CPU gather_rows");
        double b = ng__now();
        CK(I->copy_h2d(be, d_dst, stage, (size_t)len * (size_t)rb), "copy_h2d (staging)");
        h += ng__now() - b;
        g += b - a;
        last = at;
      }
      if (r >= 0) {
        tg[r] = g;
        th[r] = h;
      }
    }
    if (check_gathered(be, d_dst, table, h_ids + last, NG_MIN(batch, n - last), dim, check,
                       "batch path"))
      goto cleanup;
    for (int r = 0; r < c->reps; r++)
      ts[r] = tg[r] + th[r]; /* before the medians sort tg and th */
    const double gm = bench_median(tg, c->reps), hm = bench_median(th, c->reps),
                 sm = bench_median(ts, c->reps);
    const double bytes = (double)n * (double)rb;
    printf("%-6lld %5lld %9lld %9.2f %9.2f %9.2f %9.2f %9.2f\n", (long long)rb, (long long)dim,
           (long long)n, gm * 1e3, bytes / gm * 1e-9, hm * 1e3, bytes / hm * 1e-9,
           bytes / sm * 1e-9);
    fflush(stdout);
  }
  printf("# gather check: the first rows of each zero-copy gather and of the last batch-path "
         "call equal the host table's\n");
  rc = 0;
cleanup:
  I->free(be, d_ids);
  I->free(be, d_dst);
  if (table_reg && ng__cuda_host_unregister(table) != NG_OK) {
    fprintf(stderr, "bench_gpu: unregistering the host table failed: %s\n", ng_last_error());
    rc = 1;
  }
  if (stage_reg && ng__cuda_host_unregister(stage) != NG_OK) {
    fprintf(stderr, "bench_gpu: unregistering the staging buffer failed: %s\n", ng_last_error());
    rc = 1;
  }
  ng__big_free(table, c->table_bytes);
  ng__big_free(stage, c->batch_bytes);
  free(h_ids);
  free(check);
  free(tg);
  free(th);
  free(ts);
  return rc;
}

static int run(const bench_opts *o) {
  bench_cfg c = {
      .reps = o->reps    ? o->reps
              : o->quick ? 3
                         : 10,
      .probe_bytes = o->quick ? (size_t)64 << 20 : (size_t)2 << 30,
      .n_dsts = o->quick ? QUICK_N_DST : FULL_N_DST,
      .n_n_dst = o->quick ? (int)NG_ARRAY_LEN(QUICK_N_DST) : (int)NG_ARRAY_LEN(FULL_N_DST),
      .gather_target = o->quick ? 64e6 : 25e9,
      .gather_min_rows = o->quick ? 1 << 14 : 1 << 20,
      .gather_max_rows = o->quick ? 1 << 18 : 1 << 24,
      .batch_bytes = o->quick ? (size_t)16 << 20 : (size_t)256 << 20,
  };
  const double gib = o->table_gib > 0 ? o->table_gib : o->quick ? 0.25 : 8.0;
  /* Whole 4 KB rows, so that every row size sees the same bytes. */
  c.table_bytes = (size_t)(gib * (double)(1 << 30)) / 4096 * 4096;

  int count = 0, rc = 1;
  char desc[1024];
  ng_backend *gpu = NULL, *cpu = NULL;
  pattern p = {0};
  double t_start = ng__now(), hbm_gbs = 0;
  CK(ng__cuda_devices(&count, desc, sizeof desc), "listing the CUDA devices");
  if (count == 0) {
    fprintf(stderr, "bench_gpu: no CUDA device is visible (no GPU, no driver, or "
                    "CUDA_VISIBLE_DEVICES hides them); run it on the GPU machine\n");
    return 1;
  }
  if (o->device >= count) {
    fprintf(stderr, "bench_gpu: --device %d does not exist; visible: %s\n", o->device, desc);
    return 1;
  }
  CK(ng__backend_cuda_create(&gpu, o->device), "creating the CUDA backend");
  CK(ng__backend_cpu_create(&cpu, 0), "creating the CPU backend");
  printf("# bench_gpu: device %d of: %s\n# reps %d (median counts), %d OpenMP threads%s\n",
         o->device, desc, c.reps, omp_get_max_threads(), o->quick ? ", --quick sizes" : "");
  fflush(stdout);
  if (check_against_cpu(gpu, cpu))
    goto cleanup;

  p.host = ng__malloc((size_t)PATTERN_FLOATS * sizeof(float), "fill pattern");
  if (!p.host)
    FAIL("allocating the fill pattern");
  bench_fill_random(p.host, PATTERN_FLOATS, 31);
  CK(gpu->iface->alloc(gpu, (void **)&p.dev, (size_t)PATTERN_FLOATS * sizeof(float)),
     "alloc (fill pattern)");
  CK(gpu->iface->copy_h2d(gpu, p.dev, p.host, (size_t)PATTERN_FLOATS * sizeof(float)),
     "copy_h2d (fill pattern)");

  if (bench_hbm(gpu, &c, &p, &hbm_gbs) || bench_aggr(gpu, &c, &p, hbm_gbs) ||
      bench_gather(gpu, cpu, &c))
    goto cleanup;
  printf("\n# bench_gpu: done in %.1f s\n", ng__now() - t_start);
  rc = 0;
cleanup:
  if (gpu)
    gpu->iface->free(gpu, p.dev);
  free(p.host);
  ng__backend_destroy(cpu);
  ng__backend_destroy(gpu);
  return rc;
}

#endif /* NG_HAVE_CUDA */

int main(int argc, char **argv) {
  bench_opts o;
  int rc = parse_args(&o, argc, argv);
  if (rc)
    return rc;
#ifdef NG_HAVE_CUDA
  return run(&o);
#else
  (void)o;
  printf("bench_gpu: the CUDA backend is not built (configure with -DNG_CUDA=ON where the CUDA "
         "toolkit is installed); nothing measured\n");
  return 0;
#endif
}
