/* bench_agg_gpu: the gather-aggregate kernel template (gpu/agg_template.h, docs/aggregators.md)
 * on the input-layer shapes of workloads W1 and W4 (docs/eval.md), on one GPU. Per shape it
 * times, in milliseconds (median of REPS after a warm-up), the built-in ops that go through the
 * template (every forward and partial state, max and min included):
 *   mean/sum/gcn aggr_fwd      the forward training runs (gcn: GCN weights and the self loop);
 *   sum partial (bf16, drop)   aggr_partial, the hot part of a partial state, from the fp32 and
 *                              bf16 tables, and with input dropout 0.5;
 *   mean finalize              pstate_finalize of a state of the block's shape;
 *   max/min aggr_fwd           the MAX/MIN forward with argbest (training's); no argbest: the
 *                              forward without it (inference's);
 *   max partial (bf16, drop)   aggr_partial of max, as the sum's rows;
 *   X template (nvcc)          ng__cuda_template_builtin_fwd: built-in X's text in the template
 *                              without the self loop (for max: the kernel aggr_fwd runs
 *                              without argbest);
 *   mean user (nvrtc)          the built-in mean's text as a user aggregator, compiled at run
 *                              time by NVRTC;
 * and two user aggregators for scale: a power mean (cbrtf) and a softmax aggregation of three
 * state floats (expf). The file uses only ops that existed before the built-ins moved onto the
 * template, so the same file built on the older tree gives the hand-written kernels' times for
 * the same rows (docs/aggregators.md has the commands).
 *
 *   bench_agg_gpu [TABLE_MIB [REPS]]     (defaults: 2048 MiB, 20; the median counts)
 *
 * Shapes: W1: 1000 destinations x fanout 10 (one batch) and the same for 100 batches at once,
 * 1024 features; W4: 180,224 destinations (1024 targets x 16 x 11: the input layer of fanouts
 * 15,10,5) x fanout 5, 128 features. Sources are random rows of a TABLE_MIB table on the device.
 * GB/s counts the rows read and written (10^9 bytes; bf16 rows at 2 bytes). First-call NVRTC
 * compile times are printed too. Prints "skipped" without CUDA. */
#include "backend_impl.h"
#include "bench_util.h"
#include "bf16.h"
#include "rng.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NG_HAVE_CUDA
int main(void) {
  printf("bench_agg_gpu: skipped: this build has no CUDA backend\n");
  return 0;
}
#else
#include "ng_cuda.h"
#include "ng_test_agg.h" /* the power mean and softmax aggregation the tests define */

/* The built-in mean's text, as a user writes it (must equal ng__cuda_builtin_agg_source("mean")
 * for the nvrtc column to be the template's code; the benchmark checks the outputs agree). */
#define agg_init mean_init
#define agg_accumulate mean_accumulate
#define agg_merge mean_merge
#define agg_finalize mean_finalize
// clang-format off
NG_AGGREGATOR_SOURCE(mean_src,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { s[0] = s[0] + w * x; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { return s[0] / n; })
// clang-format on
#undef agg_init
#undef agg_accumulate
#undef agg_merge
#undef agg_finalize

static const ng_aggregator_def MEAN = {.size = sizeof(ng_aggregator_def),
                                       .name = "mean-nvrtc",
                                       .state_size = 1,
                                       .linear = 1,
                                       .init = mean_init,
                                       .accumulate = mean_accumulate,
                                       .merge = mean_merge,
                                       .finalize = mean_finalize,
                                       .grad = NULL,
                                       .source = mean_src,
                                       .accumulate_row = mean_src_accumulate_row};
static void check(ng_status st, const char *what) {
  if (st != NG_OK) {
    fprintf(stderr, "bench_agg_gpu: %s: %s\n", what, ng_last_error());
    exit(1);
  }
}

static ng_backend *be;

static void *dalloc(size_t bytes) {
  void *d = NULL;
  check(be->iface->alloc(be, &d, bytes), "alloc");
  return d;
}

/* A block of nd destinations with `fanout` random sources each among `rows`, with edge and
 * self-loop weights, on the device. */
static ng_block make_block(int32_t nd, int32_t fanout, int64_t rows, uint64_t seed, void **bufs) {
  const int64_t nnz = (int64_t)nd * fanout;
  int32_t *indptr = malloc(((size_t)nd + 1) * 4), *indices = malloc((size_t)nnz * 4);
  float *w = malloc((size_t)nnz * 4), *self = malloc((size_t)nd * 4);
  for (int32_t d = 0; d <= nd; d++)
    indptr[d] = d * fanout;
  for (int32_t d = 0; d < nd; d++)
    self[d] = 1.0f / (float)(fanout + 1);
  for (int64_t e = 0; e < nnz; e++) {
    indices[e] = (int32_t)(ng_hash2(seed, (uint64_t)e) % (uint64_t)rows);
    w[e] = 0.5f + (float)(ng_hash2(seed + 1, (uint64_t)e) >> 40) * 0x1.0p-24f;
  }
  bufs[0] = dalloc(((size_t)nd + 1) * 4);
  bufs[1] = dalloc((size_t)nnz * 4);
  bufs[2] = dalloc((size_t)nnz * 4);
  bufs[3] = dalloc((size_t)nd * 4);
  check(be->iface->copy_h2d(be, bufs[0], indptr, ((size_t)nd + 1) * 4), "copy");
  check(be->iface->copy_h2d(be, bufs[1], indices, (size_t)nnz * 4), "copy");
  check(be->iface->copy_h2d(be, bufs[2], w, (size_t)nnz * 4), "copy");
  check(be->iface->copy_h2d(be, bufs[3], self, (size_t)nd * 4), "copy");
  free(indptr), free(indices), free(w), free(self);
  return (ng_block){.n_dst = nd,
                    .n_src = (int32_t)rows,
                    .nnz = nnz,
                    .indptr = bufs[0],
                    .indices = bufs[1],
                    .edge_w = bufs[2],
                    .self_w = bufs[3]};
}

typedef enum { K_FWD, K_FWD_NOARG, K_TEMPLATE, K_PARTIAL, K_PARTIAL_BF16, K_FINALIZE } kind;

/* What one shape's runs read and write. */
typedef struct {
  const ng_block *b;
  const float *table;
  const uint16_t *table16;
  int64_t dim;
  int32_t *argbest; /* MAX/MIN aggr_fwd's, as training passes it */
  ng_pstate *state;
} bench_io;

static ng_status run(kind k, const char *builtin, const ng_aggr *ag, const bench_io *io,
                     float *out) {
  switch (k) {
  case K_TEMPLATE:
    return ng__cuda_template_builtin_fwd(be, builtin, ag, io->b, io->table, io->dim, out);
  case K_PARTIAL:
    return be->iface->aggr_partial(be, ag, io->b, io->table, io->state);
  case K_PARTIAL_BF16:
    return be->iface->aggr_partial_bf16(be, ag, io->b, io->table16, io->state);
  case K_FINALIZE:
    return be->iface->pstate_finalize(be, ag, io->state, out);
  case K_FWD_NOARG:
    return be->iface->aggr_fwd(be, ag, io->b, io->table, io->dim, out, NULL);
  default:
    return be->iface->aggr_fwd(be, ag, io->b, io->table, io->dim, out,
                               ag->reduce == NG_REDUCE_SUM ? NULL : io->argbest);
  }
}

/* Median milliseconds of `reps` timed calls (after one warm-up call). */
static double time_ms(kind k, const char *builtin, const ng_aggr *ag, const bench_io *io,
                      float *out, int reps) {
  check(run(k, builtin, ag, io, out), "warm-up");
  check(be->iface->sync(be), "sync");
  double *t = malloc((size_t)reps * sizeof(double));
  for (int i = 0; i < reps; i++) {
    check(be->iface->event_record(be, 0), "event");
    check(run(k, builtin, ag, io, out), builtin);
    check(be->iface->event_record(be, 1), "event");
    check(be->iface->event_elapsed(be, 0, 1, &t[i]), "elapsed");
  }
  const double m = bench_median(t, reps);
  free(t);
  return m;
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
  double w = 0.0;
  for (int64_t i = 0; i < n; i++)
    w = fmax(w, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)a[i])));
  return w;
}

int main(int argc, char **argv) {
  const int64_t table_mib = argc > 1 ? atoll(argv[1]) : 2048;
  const int reps = argc > 2 ? atoi(argv[2]) : 20;
  if (table_mib < 16 || reps < 1) {
    fprintf(stderr, "usage: bench_agg_gpu [TABLE_MIB >= 16 [REPS >= 1]]\n");
    return 2;
  }
  int count = 0;
  char desc[512];
  check(ng__cuda_devices(&count, desc, sizeof desc), "devices");
  if (count == 0) {
    printf("bench_agg_gpu: skipped: no CUDA device\n");
    return 0;
  }
  check(ng__backend_cuda_create(&be, 0), "backend");
  printf("bench_agg_gpu: %s; table %lld MiB, median of %d\n", desc, (long long)table_mib, reps);
  const struct {
    const char *name;
    int32_t n_dst, fanout;
    int64_t dim;
  } shapes[] = {{"W1 (1 batch)", 1000, 10, 1024},
                {"W1 (100 batches)", 100000, 10, 1024},
                {"W4 input layer", 180224, 5, 128}};
  ng_aggregator pub;
  ng_aggr mean_user, pm_user, sm_user;
  check(ng_aggregator_define(&pub, &MEAN), "define");
  check(ng__aggr_from_public(&mean_user, &pub), "aggr");
  check(ng_aggregator_define(&pub, &ng_test_powmean), "define");
  check(ng__aggr_from_public(&pm_user, &pub), "aggr");
  check(ng_aggregator_define(&pub, &ng_test_softmax), "define");
  check(ng__aggr_from_public(&sm_user, &pub), "aggr");
  const ng_aggr mean = {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL};
  const ng_aggr sum = {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL};
  const ng_aggr gcn = {NG_REDUCE_SUM, true, true, false, 0.0f, 0, NULL};
  const ng_aggr sum_drop = {NG_REDUCE_SUM, false, false, false, 0.5f, 7, NULL};
  const ng_aggr mx = {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL};
  const ng_aggr mx_drop = {NG_REDUCE_MAX, false, false, false, 0.5f, 7, NULL};
  const ng_aggr mn = {NG_REDUCE_MIN, false, false, false, 0.0f, 0, NULL};
  if (strcmp(ng__cuda_builtin_agg_source("mean"), mean_src) != 0)
    printf("note: this file's mean text differs from the built-in's\n");
  printf("%-18s %-28s %10s %9s\n", "shape", "kernel", "ms", "GB/s");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t dim = shapes[s].dim;
    const int64_t rows = ((int64_t)table_mib << 20) / (dim * 4);
    float *table = dalloc((size_t)(rows * dim) * 4);
    uint16_t *table16 = dalloc((size_t)(rows * dim) * 2);
    float *host = malloc((size_t)(rows * dim) * 4);
    bench_fill_random(host, rows * dim, 17);
    check(be->iface->copy_h2d(be, table, host, (size_t)(rows * dim) * 4), "copy table");
    uint16_t *host16 = malloc((size_t)(rows * dim) * 2);
    for (int64_t i = 0; i < rows * dim; i++)
      host16[i] = ng_f32_to_bf16(host[i]);
    check(be->iface->copy_h2d(be, table16, host16, (size_t)(rows * dim) * 2), "copy table");
    free(host), free(host16);
    void *bufs[4];
    const ng_block b = make_block(shapes[s].n_dst, shapes[s].fanout, rows, 29 + s, bufs);
    const int64_t nd = (int64_t)b.n_dst * dim;
    float *out[2] = {dalloc((size_t)nd * 4), dalloc((size_t)nd * 4)};
    ng_pstate state = {dalloc((size_t)nd * 4), dalloc((size_t)b.n_dst * 4), b.n_dst, dim};
    const bench_io io = {&b, table, table16, dim, dalloc((size_t)nd * 4), &state};
    const double row_bytes = (double)dim * 4.0;
    const double fwd_bytes = ((double)b.nnz + b.n_dst) * row_bytes;
    /* First-call compile times of the NVRTC kernels. */
    const ng_aggr *users[] = {&mean_user, &pm_user, &sm_user};
    if (s == 0)
      for (int u = 0; u < 3; u++) {
        const double t0 = ng__now();
        check(be->iface->aggr_fwd(be, users[u], &b, table, dim, out[0], NULL), "nvrtc");
        check(be->iface->sync(be), "sync");
        printf("%-18s %-28s %10.1f (first call: NVRTC compile + load)\n", "", users[u]->user->name,
               (ng__now() - t0) * 1e3);
      }
    const struct {
      const char *label;
      kind k;
      const char *builtin;
      const ng_aggr *ag;
      bool compare; /* against the last run without compare's output (out[0]) */
      double bytes;
    } runs[] = {{"mean aggr_fwd", K_FWD, "mean", &mean, false, fwd_bytes},
                {"mean template (nvcc)", K_TEMPLATE, "mean", &mean, true, fwd_bytes},
                {"mean user (nvrtc)", K_FWD, "mean", &mean_user, true, fwd_bytes},
                {"sum aggr_fwd", K_FWD, "sum", &sum, false, fwd_bytes},
                {"sum template (nvcc)", K_TEMPLATE, "sum", &sum, true, fwd_bytes},
                {"gcn aggr_fwd", K_FWD, "gcn", &gcn, false, fwd_bytes + b.n_dst * row_bytes},
                {"max aggr_fwd", K_FWD, "max", &mx, false, fwd_bytes},
                {"max template (nvcc)", K_TEMPLATE, "max", &mx, true, fwd_bytes},
                {"max aggr_fwd no argbest", K_FWD_NOARG, "max", &mx, true, fwd_bytes},
                {"min aggr_fwd", K_FWD, "min", &mn, false, fwd_bytes},
                {"sum partial", K_PARTIAL, "sum", &sum, false, fwd_bytes},
                {"sum partial bf16", K_PARTIAL_BF16, "sum", &sum, false,
                 (double)b.nnz * dim * 2.0 + b.n_dst * row_bytes},
                {"sum partial dropout 0.5", K_PARTIAL, "sum", &sum_drop, false, fwd_bytes},
                {"max partial", K_PARTIAL, "max", &mx, false, fwd_bytes},
                {"max partial bf16", K_PARTIAL_BF16, "max", &mx, false,
                 (double)b.nnz * dim * 2.0 + b.n_dst * row_bytes},
                {"max partial dropout 0.5", K_PARTIAL, "max", &mx_drop, false, fwd_bytes},
                {"mean finalize", K_FINALIZE, "mean", &mean, false, 2.0 * b.n_dst * row_bytes},
                {"powmean3 user (nvrtc)", K_FWD, "powmean", &pm_user, false, fwd_bytes},
                {"softmax S=3 user (nvrtc)", K_FWD, "softmax", &sm_user, false, fwd_bytes}};
    float *ref = malloc((size_t)nd * 4), *got = malloc((size_t)nd * 4);
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
      const double ms =
          time_ms(runs[r].k, runs[r].builtin, runs[r].ag, &io, out[runs[r].compare], reps);
      printf("%-18s %-28s %10.4f %9.1f", shapes[s].name, runs[r].label, ms,
             runs[r].bytes / ms / 1e6);
      /* The template and NVRTC runs against aggr_fwd's output: the same bits expected. */
      if (runs[r].compare) {
        check(be->iface->copy_d2h(be, ref, out[0], (size_t)nd * 4), "copy");
        check(be->iface->copy_d2h(be, got, out[1], (size_t)nd * 4), "copy");
        printf("   max rel diff vs aggr_fwd %.3g", max_rel_diff(ref, got, nd));
      }
      printf("\n");
    }
    free(ref), free(got);
    for (int i = 0; i < 4; i++)
      be->iface->free(be, bufs[i]);
    be->iface->free(be, out[0]), be->iface->free(be, out[1]), be->iface->free(be, table);
    be->iface->free(be, table16), be->iface->free(be, io.argbest);
    be->iface->free(be, state.val), be->iface->free(be, state.count);
  }
  ng__backend_destroy(be);
  return 0;
}
#endif
