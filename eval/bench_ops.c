/* bench_ops: memory throughput of the CPU backend's gather and aggregation kernels on random rows
 * of a feature table larger than the caches, for every SIMD variant this CPU runs and for 1 and
 * all threads.
 *
 *   bench_ops [TABLE_MIB [REPS]]     (defaults: 1024 MiB, 3 repetitions; the best one counts)
 *
 * For each row width D in {128, 256, 1024} the table holds TABLE_MIB MiB of float rows. The
 * block has n_src = table rows and n_dst = n_src / 10 destinations with 10 random neighbours each
 * (so about one table's worth of random row reads). Figures:
 *   rows/s   neighbour rows reduced (aggregation) or rows copied (gather) per second;
 *   GB/s     bytes of rows read plus rows written per second (10^9 bytes): gather reads and
 *            writes n rows, aggr_fwd reads nnz rows and writes n_dst, aggr_bwd reads nnz
 *            gradient rows and writes n_src;
 *   GB/s/thr the same per thread.
 * aggr_fwd(user) is the same mean defined by the user (NG_AGGREGATOR_SOURCE), whose CPU path
 * calls the definition's functions per element (one variant: it has no SIMD form).
 * Memory needed: about 2 x TABLE_MIB plus 20%. */
#include "backend_impl.h"
#include "rng.h"
#include "bench_util.h"
#include "ng_cpu.h"
#include "kernels_impl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FANOUT = 10 };

static void *xalloc(size_t bytes, const char *what) {
  void *p = ng__big_alloc(bytes, what);
  if (!p) {
    fprintf(stderr, "bench_ops: %s\n", ng_last_error());
    exit(1);
  }
  return p;
}

typedef struct {
  int32_t *indptr, *indices, *t_indptr, *t_dst, *t_eid;
  ng_block b;
} bench_block;

static void make_block(bench_block *bb, int32_t n_dst, int32_t n_src, uint64_t seed) {
  int64_t nnz = (int64_t)n_dst * FANOUT;
  bb->indptr = malloc(((size_t)n_dst + 1) * 4);
  bb->indices = malloc((size_t)nnz * 4);
  bb->t_indptr = calloc((size_t)n_src + 1, 4);
  bb->t_dst = malloc((size_t)nnz * 4);
  bb->t_eid = malloc((size_t)nnz * 4);
  int32_t *cur = malloc((size_t)n_src * 4);
  if (!bb->indptr || !bb->indices || !bb->t_indptr || !bb->t_dst || !bb->t_eid || !cur) {
    fprintf(stderr, "bench_ops: out of memory for the block\n");
    exit(1);
  }
  for (int32_t d = 0; d <= n_dst; d++)
    bb->indptr[d] = d * FANOUT;
  for (int64_t e = 0; e < nnz; e++) {
    bb->indices[e] = (int32_t)(ng_hash2(seed, (uint64_t)e) % (uint64_t)n_src);
    bb->t_indptr[bb->indices[e] + 1]++;
  }
  for (int32_t s = 0; s < n_src; s++) {
    bb->t_indptr[s + 1] += bb->t_indptr[s];
    cur[s] = bb->t_indptr[s];
  }
  for (int64_t e = 0; e < nnz; e++) {
    int32_t at = cur[bb->indices[e]]++;
    bb->t_dst[at] = (int32_t)(e / FANOUT);
    bb->t_eid[at] = (int32_t)e;
  }
  free(cur);
  bb->b = (ng_block){.n_dst = n_dst,
                     .n_src = n_src,
                     .nnz = nnz,
                     .indptr = bb->indptr,
                     .indices = bb->indices,
                     .t_indptr = bb->t_indptr,
                     .t_dst = bb->t_dst,
                     .t_eid = bb->t_eid};
}

static void free_block(bench_block *bb) {
  free(bb->indptr);
  free(bb->indices);
  free(bb->t_indptr);
  free(bb->t_dst);
  free(bb->t_eid);
}

typedef enum { OP_GATHER, OP_AGGR_FWD, OP_AGGR_BWD, OP_AGGR_USER } bench_op;
static const char *const OP_NAMES[] = {"gather_rows", "aggr_fwd(mean)", "aggr_bwd(mean)",
                                       "aggr_fwd(user)"};

/* The mean as a user defines it (NG_AGGREGATOR_SOURCE): its forward runs through function
 * pointers (cpu/agg_user.c), which the built-in SIMD kernels are measured against. */
// clang-format off
NG_AGGREGATOR_SOURCE(user_mean_src,
  NG_AGG_FN void agg_init(float *s) { s[0] = 0.0f; }
  NG_AGG_FN void agg_accumulate(float *s, float x, float w) { s[0] = s[0] + w * x; }
  NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] = s[0] + t[0]; }
  NG_AGG_FN float agg_finalize(const float *s, float n) { return s[0] / n; })
// clang-format on
static const ng_aggregator_def USER_MEAN = {.size = sizeof(ng_aggregator_def),
                                            .name = "user-mean",
                                            .state_size = 1,
                                            .linear = 1,
                                            NG_AGGREGATOR_FUNCTIONS(user_mean_src)};

typedef struct {
  ng_backend *be;
  const ng_block *b;
  const ng_aggr *ag, *user;
  float *table, *out, *grad_src;
  const int64_t *ids;
  int64_t dim;
} bench_args;

static double run_op(bench_op op, const bench_args *a) {
  const struct ng_backend_i *I = a->be->iface;
  double t0 = ng__now();
  ng_status st = NG_OK;
  switch (op) {
  case OP_GATHER:
    st = I->gather_rows(a->be, a->out, a->table, a->ids, a->b->nnz / FANOUT, a->dim);
    break;
  case OP_AGGR_FWD:
    st = I->aggr_fwd(a->be, a->ag, a->b, a->table, a->dim, a->out, NULL);
    break;
  case OP_AGGR_BWD:
    st = I->aggr_bwd(a->be, a->ag, a->b, a->out, NULL, a->dim, a->grad_src);
    break;
  case OP_AGGR_USER:
    st = I->aggr_fwd(a->be, a->user, a->b, a->table, a->dim, a->out, NULL);
    break;
  }
  double t = ng__now() - t0;
  if (st != NG_OK) {
    fprintf(stderr, "bench_ops: %s failed: %s\n", OP_NAMES[op], ng_last_error());
    exit(1);
  }
  return t;
}

int main(int argc, char **argv) {
  if (argc > 3 || (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
    fprintf(stderr, "usage: bench_ops [TABLE_MIB [REPS]]  (defaults 1024 3)\n");
    return argc > 3 ? 2 : 0;
  }
  int64_t table_mib = argc > 1 ? atoll(argv[1]) : 1024;
  int reps = argc > 2 ? atoi(argv[2]) : 3;
  if (table_mib < 1 || reps < 1) {
    fprintf(stderr, "bench_ops: TABLE_MIB and REPS must be positive\n");
    return 2;
  }
  const int max_threads = omp_get_max_threads();
  const int thread_counts[2] = {1, max_threads};
  const int n_thread_counts = max_threads > 1 ? 2 : 1;
  const int64_t dims[] = {128, 256, 1024};
  const size_t table_bytes = (size_t)table_mib << 20;
  const ng_aggr mean = {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL};
  ng_aggregator user_pub;
  ng_aggr user;
  if (ng_aggregator_define(&user_pub, &USER_MEAN) != NG_OK ||
      ng__aggr_from_public(&user, &user_pub) != NG_OK) {
    fprintf(stderr, "bench_ops: %s\n", ng_last_error());
    return 1;
  }

  printf("# bench_ops: table %lld MiB, fanout %d, best of %d, up to %d threads\n",
         (long long)table_mib, FANOUT, reps, max_threads);
  printf("%-15s %5s %-8s %4s %12s %9s %9s\n", "op", "D", "isa", "thr", "rows/s", "GB/s",
         "GB/s/thr");
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
    const int64_t dim = dims[di], row_bytes = dim * (int64_t)sizeof(float);
    const int32_t n_src =
        (int32_t)NG_MIN((int64_t)INT32_MAX / FANOUT, (int64_t)(table_bytes / (size_t)row_bytes));
    const int32_t n_dst = n_src / FANOUT;
    if (n_dst < 1) {
      fprintf(stderr, "bench_ops: a %lld MiB table is too small for D = %lld\n",
              (long long)table_mib, (long long)dim);
      return 2;
    }
    float *table = xalloc((size_t)n_src * (size_t)row_bytes, "feature table");
    float *grad_src = xalloc((size_t)n_src * (size_t)row_bytes, "gradient table");
    float *out = xalloc((size_t)n_dst * (size_t)row_bytes, "output rows");
    int64_t *ids = xalloc((size_t)n_dst * sizeof(int64_t), "gather ids");
    bench_fill_random(table, (int64_t)n_src * dim, 1);
    bench_fill_random(grad_src, (int64_t)n_src * dim, 2); /* pre-faulted before timing */
    bench_fill_random(out, (int64_t)n_dst * dim, 3);
    for (int32_t i = 0; i < n_dst; i++)
      ids[i] = (int64_t)(ng_hash2(4, (uint64_t)i) % (uint64_t)n_src);
    bench_block bb;
    make_block(&bb, n_dst, n_src, 5);
    for (int isa = 0; isa < NG_CPU_ISA_COUNT_; isa++) {
      if (!ng__cpu_isa_supported((ng_cpu_isa)isa))
        continue;
      const char *names[] = {"generic", "avx2", "avx512"};
      setenv("NG_CPU_ISA", names[isa], 1);
      ng_backend *be = NULL;
      if (ng__backend_cpu_create(&be, 0) != NG_OK) {
        fprintf(stderr, "bench_ops: %s\n", ng_last_error());
        return 1;
      }
      bench_args args = {be, &bb.b, &mean, &user, table, out, grad_src, ids, dim};
      for (int op = OP_GATHER; op <= OP_AGGR_USER; op++) {
        if (op == OP_AGGR_USER && isa != 0)
          continue; /* no SIMD variant: once */
        for (int ti = 0; ti < n_thread_counts; ti++) {
          int threads = thread_counts[ti];
          omp_set_num_threads(threads);
          run_op((bench_op)op, &args); /* warm-up */
          double best = 1e300;
          for (int r = 0; r < reps; r++)
            best = NG_MIN(best, run_op((bench_op)op, &args));
          double rows = op == OP_GATHER ? (double)n_dst : (double)bb.b.nnz;
          double moved = op == OP_GATHER                           ? 2.0 * n_dst
                         : op == OP_AGGR_FWD || op == OP_AGGR_USER ? (double)bb.b.nnz + n_dst
                                                                   : (double)bb.b.nnz + n_src;
          double gbs = moved * (double)row_bytes / best * 1e-9;
          printf("%-15s %5lld %-8s %4d %12.4g %9.2f %9.2f\n", OP_NAMES[op], (long long)dim,
                 names[isa], threads, rows / best, gbs, gbs / threads);
          fflush(stdout);
        }
      }
      ng__backend_destroy(be);
    }
    unsetenv("NG_CPU_ISA");
    free_block(&bb);
    ng__big_free(table, (size_t)n_src * (size_t)row_bytes);
    ng__big_free(grad_src, (size_t)n_src * (size_t)row_bytes);
    ng__big_free(out, (size_t)n_dst * (size_t)row_bytes);
    ng__big_free(ids, (size_t)n_dst * sizeof(int64_t));
  }
  omp_set_num_threads(max_threads);
  return 0;
}
