/* Helpers the benchmark programs share (eval/bench_*.c): deterministic inputs and medians. */
#ifndef NG_BENCH_UTIL_H
#define NG_BENCH_UTIL_H

#include "rng.h"

#include <stdint.h>
#include <stdlib.h>

/* Values in [-0.5, 0.5) from a counter-based hash: any thread count gives the same table, and
 * every page is touched before timing. */
static inline void bench_fill_random(float *x, int64_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)((double)(ng_hash2(seed, (uint64_t)i) >> 11) * 0x1.0p-53 - 0.5);
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n times (sorts them). */
static inline double bench_median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

#endif /* NG_BENCH_UTIL_H */
