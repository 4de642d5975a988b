/* Sorting helpers shared by every layer. */
#include "core_impl.h"

#include <stdlib.h>

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int64_t ng__sort_unique_i64(int64_t *a, int64_t n) {
  if (n <= 0)
    return 0;
  qsort(a, (size_t)n, sizeof *a, cmp_i64);
  int64_t m = 1;
  for (int64_t i = 1; i < n; i++)
    if (a[i] != a[m - 1])
      a[m++] = a[i];
  return m;
}
