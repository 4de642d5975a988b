/* Discrete power-law fitting for degree distributions. */
#include "graph_impl.h"

#include <math.h>
#include <stdlib.h>

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Too few tail samples make the estimate meaningless. */
enum { MIN_TAIL = 50 };

ng_status ng__powerlaw_fit(ng_powerlaw_fit *out, int64_t *xs, int64_t n) {
  out->alpha = 0.0;
  out->xmin = 0;
  out->n_tail = 0;
  out->ks = 1.0;
  if (n <= 0)
    return NG_OK;
  qsort(xs, (size_t)n, sizeof *xs, cmp_i64);
  int64_t first = 0;
  while (first < n && xs[first] < 1)
    first++;
  /* Candidate xmin values: distinct sample values, thinned geometrically so the search stays
   * O(n * MAX_CANDIDATES) on graphs with millions of distinct degrees. */
  int64_t prev = 0;
  for (int64_t i = first; i < n; i++) {
    int64_t xmin = xs[i];
    if (prev > 0 && (double)xmin < (double)prev + fmax(1.0, 0.15 * (double)prev))
      continue;
    prev = xmin;
    int64_t tail = n - i;
    if (tail < MIN_TAIL)
      break;
    double sum_log = 0.0, base = (double)xmin - 0.5;
    for (int64_t j = i; j < n; j++)
      sum_log += log((double)xs[j] / base);
    if (sum_log <= 0.0)
      continue;
    double alpha = 1.0 + (double)tail / sum_log;
    /* KS distance between the empirical tail CDF and the continuous approximation
     * P(X >= x) = ((x - 0.5) / (xmin - 0.5))^(1 - alpha), evaluated at each distinct value. */
    double ks = 0.0;
    for (int64_t j = i; j < n;) {
      int64_t v = xs[j], k = j;
      while (k < n && xs[k] == v)
        k++;
      double emp_below = (double)(j - i) / (double)tail; /* P(X < v) empirical */
      double emp_upto = (double)(k - i) / (double)tail;  /* P(X <= v) */
      double model_below = 1.0 - pow(((double)v - 0.5) / base, 1.0 - alpha);
      double model_upto = 1.0 - pow(((double)v + 0.5) / base, 1.0 - alpha);
      double d1 = fabs(emp_below - model_below), d2 = fabs(emp_upto - model_upto);
      ks = fmax(ks, fmax(d1, d2));
      j = k;
    }
    if (ks < out->ks) {
      out->ks = ks;
      out->alpha = alpha;
      out->xmin = xmin;
      out->n_tail = tail;
    }
  }
  return NG_OK;
}
