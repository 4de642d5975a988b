/* CSR graph utilities: allocation, degrees, per-row sort and deduplication, symmetric closure
 * and relabelling. Every pass is OpenMP parallel and its output never depends on the thread
 * count: counts are integer sums, entries scattered through atomic cursors land in rows that
 * are sorted afterwards, and everything else writes to positions fixed by a prefix sum. They
 * scale to 10^9 entries: no global sort, and memory is the input plus the output (plus one
 * array of node counters where a pass needs it).
 *
 * Index width: the utilities follow the width of their input (idx32 or idx64), so the int64
 * path can be exercised on small graphs; ng__csr_alloc() picks int64 only from 2^31 nodes. Both
 * arrays of a CSR come from malloc(), which is what ng__csr_free() releases. */
#include "graph_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Node ids fit int32 below this many nodes (the NG_INDEX32_MAX_NODES of dataset_impl.h). */
#define INDEX32_MAX_NODES ((int64_t)1 << 31)

/* The prefix sum splits its array into this many blocks, whatever the thread count; below
 * SCAN_SERIAL_MAX elements one thread is faster than waking the others. */
enum { SCAN_BLOCKS = 1024, SCAN_SERIAL_MAX = 1 << 16 };

/* sort_dedup works on chunks of consecutive rows balanced by entries + rows. */
enum { DEDUP_CHUNKS = 512 };

/* Rows shorter than this are insertion-sorted. */
enum { INSERTION_MAX = 24 };

static ng_status csr_alloc_width(ng_csr *out, int64_t nodes, int64_t nnz, bool wide) {
  memset(out, 0, sizeof *out);
  if (nodes < 0 || nnz < 0)
    return ng__err(NG_ERR_INVALID_ARG, "CSR of %lld nodes and %lld entries: counts must be >= 0",
                   (long long)nodes, (long long)nnz);
  if (!wide && nodes >= INDEX32_MAX_NODES)
    return ng__err(NG_ERR_INTERNAL, "int32 CSR indices cannot hold %lld nodes", (long long)nodes);
  size_t ptr_bytes, idx_bytes;
  if (!ng__mul_ok((size_t)nodes + 1, sizeof(int64_t), &ptr_bytes) ||
      !ng__mul_ok((size_t)nnz, wide ? sizeof(int64_t) : sizeof(int32_t), &idx_bytes))
    return ng__err(NG_ERR_NOMEM, "CSR of %lld nodes and %lld entries does not fit in memory",
                   (long long)nodes, (long long)nnz);
  out->indptr = ng__calloc((size_t)nodes + 1, sizeof(int64_t), "CSR row offsets");
  void *idx = out->indptr ? ng__malloc(idx_bytes, "CSR indices") : NULL;
  if (!idx) {
    free(out->indptr);
    out->indptr = NULL;
    return NG_ERR_NOMEM;
  }
  if (wide)
    out->idx64 = idx;
  else
    out->idx32 = idx;
  out->nodes = nodes;
  out->nnz = nnz;
  return NG_OK;
}

ng_status ng__csr_alloc(ng_csr *out, int64_t nodes, int64_t nnz) {
  return csr_alloc_width(out, nodes, nnz, nodes >= INDEX32_MAX_NODES);
}

void ng__csr_free(ng_csr *g) {
  if (!g)
    return;
  free(g->indptr);
  free(g->idx32);
  free(g->idx64);
  memset(g, 0, sizeof *g);
}

static inline void csr_set(const ng_csr *g, int64_t e, int64_t v) {
  if (g->idx32)
    g->idx32[e] = (int32_t)v;
  else
    g->idx64[e] = v;
}

static inline size_t csr_width(const ng_csr *g) {
  return g->idx32 ? sizeof(int32_t) : sizeof(int64_t);
}

static inline void *csr_entry_ptr(const ng_csr *g, int64_t e) {
  return g->idx32 ? (void *)(g->idx32 + e) : (void *)(g->idx64 + e);
}

/* Turns the counts a[0, n) into exclusive offsets and stores their total in a[n] (the array
 * has n + 1 slots). Integer sums in fixed blocks: identical for every thread count. */
static int64_t exclusive_scan(int64_t *a, int64_t n) {
  if (n <= SCAN_SERIAL_MAX) {
    int64_t run = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = a[i];
      a[i] = run;
      run += c;
    }
    a[n] = run;
    return run;
  }
  int64_t sums[SCAN_BLOCKS];
  int64_t per = (n + SCAN_BLOCKS - 1) / SCAN_BLOCKS;
#pragma omp parallel for schedule(static)
  for (int b = 0; b < SCAN_BLOCKS; b++) {
    int64_t lo = NG_MIN((int64_t)b * per, n), hi = NG_MIN(lo + per, n), s = 0;
    for (int64_t i = lo; i < hi; i++)
      s += a[i];
    sums[b] = s;
  }
  int64_t run = 0;
  for (int b = 0; b < SCAN_BLOCKS; b++) {
    int64_t s = sums[b];
    sums[b] = run;
    run += s;
  }
#pragma omp parallel for schedule(static)
  for (int b = 0; b < SCAN_BLOCKS; b++) {
    int64_t lo = NG_MIN((int64_t)b * per, n), hi = NG_MIN(lo + per, n), off = sums[b];
    for (int64_t i = lo; i < hi; i++) {
      int64_t c = a[i];
      a[i] = off;
      off += c;
    }
  }
  a[n] = run;
  return run;
}

/* Checks that every index lies in [0, nodes); the error names the first bad entry. */
static ng_status check_indices(const ng_csr *g) {
  int64_t lo = 0, hi = 0;
  if (g->nnz > 0)
    lo = hi = ng__csr_index(g, 0);
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi)
  for (int64_t e = 0; e < g->nnz; e++) {
    int64_t v = ng__csr_index(g, e);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  if (g->nnz == 0 || (lo >= 0 && hi < g->nodes))
    return NG_OK;
  for (int64_t u = 0; u < g->nodes; u++) {
    for (int64_t e = g->indptr[u]; e < g->indptr[u + 1]; e++) {
      int64_t v = ng__csr_index(g, e);
      if (v < 0 || v >= g->nodes)
        return ng__err(NG_ERR_INVALID_ARG,
                       "CSR row %lld holds node %lld, outside [0, %lld): the graph is corrupt",
                       (long long)u, (long long)v, (long long)g->nodes);
    }
  }
  return ng__err(NG_ERR_INVALID_ARG, "CSR indices outside the rows' ranges: indptr is corrupt");
}

void ng__csr_row_degrees(const ng_csr *g, int64_t *deg) {
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < g->nodes; v++)
    deg[v] = g->indptr[v + 1] - g->indptr[v];
}

ng_status ng__csr_in_degrees(const ng_csr *g, int64_t *deg) {
  NG_CHECK(check_indices(g));
  memset(deg, 0, (size_t)g->nodes * sizeof *deg);
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < g->nnz; e++)
    __atomic_fetch_add(&deg[ng__csr_index(g, e)], 1, __ATOMIC_RELAXED);
  return NG_OK;
}

/* ---- per-row sort and deduplication, instantiated for both index widths: introsort (median
 * of three, Hoare partition, heapsort past 2 log2(n) levels), then one compaction sweep. ---- */
/* T is a type here, which cannot be parenthesised. */
/* NOLINTBEGIN(bugprone-macro-parentheses) */
#define DEFINE_ROW_KERNELS(T, SFX)                                                                 \
  static void insertion_sort_##SFX(T *a, int64_t n) {                                              \
    for (int64_t i = 1; i < n; i++) {                                                              \
      T x = a[i];                                                                                  \
      int64_t j = i;                                                                               \
      for (; j > 0 && a[j - 1] > x; j--)                                                           \
        a[j] = a[j - 1];                                                                           \
      a[j] = x;                                                                                    \
    }                                                                                              \
  }                                                                                                \
  static void sift_down_##SFX(T *a, int64_t root, int64_t n) {                                     \
    T x = a[root];                                                                                 \
    for (int64_t child; (child = 2 * root + 1) < n; root = child) {                                \
      if (child + 1 < n && a[child + 1] > a[child])                                                \
        child++;                                                                                   \
      if (a[child] <= x)                                                                           \
        break;                                                                                     \
      a[root] = a[child];                                                                          \
    }                                                                                              \
    a[root] = x;                                                                                   \
  }                                                                                                \
  static void heap_sort_##SFX(T *a, int64_t n) {                                                   \
    for (int64_t i = n / 2; i-- > 0;)                                                              \
      sift_down_##SFX(a, i, n);                                                                    \
    for (int64_t end = n - 1; end > 0; end--) {                                                    \
      T t = a[0];                                                                                  \
      a[0] = a[end];                                                                               \
      a[end] = t;                                                                                  \
      sift_down_##SFX(a, 0, end);                                                                  \
    }                                                                                              \
  }                                                                                                \
  static void intro_sort_##SFX(T *a, int64_t n, int depth) {                                       \
    while (n > INSERTION_MAX) {                                                                    \
      if (depth-- == 0) {                                                                          \
        heap_sort_##SFX(a, n);                                                                     \
        return;                                                                                    \
      }                                                                                            \
      /* Order a[0], a[mid], a[n-1], then pivot on the median moved to a[0]: Hoare's scheme        \
       * with the pivot at the front always splits into two non-empty parts. */                    \
      int64_t mid = n / 2;                                                                         \
      T t;                                                                                         \
      if (a[mid] < a[0]) {                                                                         \
        t = a[mid], a[mid] = a[0], a[0] = t;                                                       \
      }                                                                                            \
      if (a[n - 1] < a[mid]) {                                                                     \
        t = a[n - 1], a[n - 1] = a[mid], a[mid] = t;                                               \
        if (a[mid] < a[0]) {                                                                       \
          t = a[mid], a[mid] = a[0], a[0] = t;                                                     \
        }                                                                                          \
      }                                                                                            \
      t = a[mid], a[mid] = a[0], a[0] = t;                                                         \
      T pivot = a[0];                                                                              \
      int64_t i = -1, j = n;                                                                       \
      for (;;) {                                                                                   \
        do                                                                                         \
          j--;                                                                                     \
        while (a[j] > pivot);                                                                      \
        do                                                                                         \
          i++;                                                                                     \
        while (a[i] < pivot);                                                                      \
        if (i >= j)                                                                                \
          break;                                                                                   \
        t = a[i], a[i] = a[j], a[j] = t;                                                           \
      }                                                                                            \
      /* [0, j] <= pivot <= [j + 1, n): recurse into the smaller part, loop on the larger. */      \
      int64_t left = j + 1;                                                                        \
      if (left < n - left) {                                                                       \
        intro_sort_##SFX(a, left, depth);                                                          \
        a += left;                                                                                 \
        n -= left;                                                                                 \
      } else {                                                                                     \
        intro_sort_##SFX(a + left, n - left, depth);                                               \
        n = left;                                                                                  \
      }                                                                                            \
    }                                                                                              \
    insertion_sort_##SFX(a, n);                                                                    \
  }                                                                                                \
  /* Sorts a[0, n), drops repeats and (when `self` >= 0) the value `self`; returns the new         \
   * length and adds the removed counts. */                                                        \
  static int64_t sort_dedup_row_##SFX(T *a, int64_t n, int64_t self, int64_t *dups,                \
                                      int64_t *loops) {                                            \
    if (n > 1) {                                                                                   \
      int depth = 0;                                                                               \
      for (int64_t m = n; m > 1; m >>= 1)                                                          \
        depth += 2;                                                                                \
      intro_sort_##SFX(a, n, depth);                                                               \
    }                                                                                              \
    int64_t w = 0;                                                                                 \
    for (int64_t r = 0; r < n; r++) {                                                              \
      T v = a[r];                                                                                  \
      if ((int64_t)v == self)                                                                      \
        ++*loops;                                                                                  \
      else if (w > 0 && a[w - 1] == v)                                                             \
        ++*dups;                                                                                   \
      else                                                                                         \
        a[w++] = v;                                                                                \
    }                                                                                              \
    return w;                                                                                      \
  }

/* NOLINTEND(bugprone-macro-parentheses) */
DEFINE_ROW_KERNELS(int32_t, i32)
DEFINE_ROW_KERNELS(int64_t, i64)
#undef DEFINE_ROW_KERNELS

/* Sorts and deduplicates row v in place (at its current offset `start`, `len` entries). */
static int64_t sort_dedup_row(const ng_csr *g, int64_t v, int64_t start, int64_t len,
                              bool drop_self_loops, int64_t *dups, int64_t *loops) {
  int64_t self = drop_self_loops ? v : -1;
  if (g->idx32)
    return sort_dedup_row_i32(g->idx32 + start, len, self, dups, loops);
  return sort_dedup_row_i64(g->idx64 + start, len, self, dups, loops);
}

/* The first row whose (offset + row number) reaches `target`: chunk boundaries that balance
 * entries and rows, since both cost time. */
static int64_t balanced_row(const int64_t *indptr, int64_t nodes, int64_t target) {
  int64_t lo = 0, hi = nodes;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (indptr[mid] + mid < target)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

ng_status ng__csr_sort_dedup(ng_csr *g, bool drop_self_loops, int64_t *removed_dups,
                             int64_t *removed_loops) {
  int64_t nodes = g->nodes;
  int64_t row_lo[DEDUP_CHUNKS + 1], src_start[DEDUP_CHUNKS + 1], kept[DEDUP_CHUNKS];
  int64_t total = g->indptr[nodes] + nodes;
  for (int c = 0; c <= DEDUP_CHUNKS; c++) {
    row_lo[c] = balanced_row(g->indptr, nodes, (int64_t)((__int128)total * c / DEDUP_CHUNKS));
    src_start[c] = g->indptr[row_lo[c]];
  }
  row_lo[DEDUP_CHUNKS] = nodes;
  src_start[DEDUP_CHUNKS] = g->indptr[nodes];
  int64_t dups = 0, loops = 0;
  /* Phase 1: each chunk sorts its rows and packs them towards the chunk's own start, leaving in
   * indptr[v] the packed start of row v. A chunk reads the end of its last row from
   * src_start[], never from indptr[] of the next chunk, which that chunk rewrites. */
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : dups, loops)
  for (int c = 0; c < DEDUP_CHUNKS; c++) {
    int64_t w = src_start[c];
    for (int64_t v = row_lo[c]; v < row_lo[c + 1]; v++) {
      int64_t start = g->indptr[v];
      int64_t end = v + 1 < row_lo[c + 1] ? g->indptr[v + 1] : src_start[c + 1];
      int64_t len = sort_dedup_row(g, v, start, end - start, drop_self_loops, &dups, &loops);
      if (w != start && len > 0)
        memmove(csr_entry_ptr(g, w), csr_entry_ptr(g, start), (size_t)len * csr_width(g));
      g->indptr[v] = w;
      w += len;
    }
    kept[c] = w - src_start[c];
  }
  /* Phase 2: slide the packed chunks together, left to right. A chunk's destination ends where
   * the next chunk's destination starts, which is at or before that chunk's source, so no
   * chunk overwrites data not yet moved. */
  int64_t shift[DEDUP_CHUNKS], dst = 0;
  for (int c = 0; c < DEDUP_CHUNKS; c++) {
    if (kept[c] > 0 && dst != src_start[c])
      memmove(csr_entry_ptr(g, dst), csr_entry_ptr(g, src_start[c]),
              (size_t)kept[c] * csr_width(g));
    shift[c] = src_start[c] - dst;
    dst += kept[c];
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < DEDUP_CHUNKS; c++)
    for (int64_t v = row_lo[c]; v < row_lo[c + 1]; v++)
      g->indptr[v] -= shift[c];
  g->indptr[nodes] = dst;
  g->nnz = dst;
  if (removed_dups)
    *removed_dups = dups;
  if (removed_loops)
    *removed_loops = loops;
  return NG_OK;
}

ng_status ng__csr_symmetrize(ng_csr *out, const ng_csr *g) {
  memset(out, 0, sizeof *out);
  NG_CHECK(check_indices(g));
  int64_t nodes = g->nodes;
  if (g->nnz > INT64_MAX / 2)
    return ng__err(NG_ERR_INVALID_ARG, "symmetrize: %lld entries cannot be doubled",
                   (long long)g->nnz);
  NG_CHECK(csr_alloc_width(out, nodes, 2 * g->nnz, g->idx64 != NULL));
  int64_t *ptr = out->indptr;
  /* Count pass: every row receives its own entries and the transposed ones. */
  ng__csr_row_degrees(g, ptr);
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < g->nnz; e++)
    __atomic_fetch_add(&ptr[ng__csr_index(g, e)], 1, __ATOMIC_RELAXED);
  exclusive_scan(ptr, nodes);
  /* Fill pass: ptr[v] serves as row v's write cursor, so it ends at the start of row v + 1.
   * Positions inside a row depend on timing, but the rows are sorted below. */
#pragma omp parallel for schedule(dynamic, 1024)
  for (int64_t u = 0; u < nodes; u++) {
    int64_t start = g->indptr[u], len = g->indptr[u + 1] - start;
    int64_t pos = __atomic_fetch_add(&ptr[u], len, __ATOMIC_RELAXED);
    if (len > 0)
      memcpy(csr_entry_ptr(out, pos), csr_entry_ptr(g, start), (size_t)len * csr_width(g));
    for (int64_t e = start; e < start + len; e++) {
      int64_t v = ng__csr_index(g, e);
      csr_set(out, __atomic_fetch_add(&ptr[v], 1, __ATOMIC_RELAXED), u);
    }
  }
  memmove(ptr + 1, ptr, (size_t)nodes * sizeof *ptr);
  ptr[0] = 0;
  NG_CHECK(ng__csr_sort_dedup(out, false, NULL, NULL));
  /* Give back what duplicates freed; a failed shrink keeps the larger block, which is fine. */
  void *small = realloc(csr_entry_ptr(out, 0), NG_MAX((size_t)out->nnz, 1) * csr_width(out));
  if (small && out->idx32)
    out->idx32 = small;
  else if (small)
    out->idx64 = small;
  return NG_OK;
}

ng_status ng__perm_check(const int64_t *perm, int64_t n) {
  if (n < 0 || (n > 0 && !perm))
    return ng__err(NG_ERR_INVALID_ARG, "permutation of %lld elements: no array or bad size",
                   (long long)n);
  size_t words = ((size_t)n + 63) / 64;
  uint64_t *seen = ng__calloc(words, sizeof *seen, "permutation check bitmap");
  if (!seen)
    return NG_ERR_NOMEM;
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
  for (int64_t v = 0; v < n; v++) {
    int64_t p = perm[v];
    if (p < 0 || p >= n) {
      bad |= 1;
      continue;
    }
    uint64_t bit = (uint64_t)1 << (p & 63);
    if (__atomic_fetch_or(&seen[p >> 6], bit, __ATOMIC_RELAXED) & bit)
      bad |= 1;
  }
  ng_status st = NG_OK;
  if (bad) {
    /* Rare: find the first problem in index order, so the message is reproducible. */
    memset(seen, 0, words * sizeof *seen);
    for (int64_t v = 0; v < n && st == NG_OK; v++) {
      int64_t p = perm[v];
      if (p < 0 || p >= n) {
        st =
            ng__err(NG_ERR_INVALID_ARG, "not a permutation: perm[%lld] = %lld is outside [0, %lld)",
                    (long long)v, (long long)p, (long long)n);
      } else if (seen[p >> 6] & ((uint64_t)1 << (p & 63))) {
        int64_t w = 0;
        while (perm[w] != p)
          w++;
        st = ng__err(NG_ERR_INVALID_ARG, "not a permutation: perm[%lld] = %lld repeats perm[%lld]",
                     (long long)v, (long long)p, (long long)w);
      } else {
        seen[p >> 6] |= (uint64_t)1 << (p & 63);
      }
    }
  }
  free(seen);
  return st;
}

ng_status ng__csr_relabel(ng_csr *out, const ng_csr *g, const int64_t *perm) {
  memset(out, 0, sizeof *out);
  NG_CHECK(ng__perm_check(perm, g->nodes));
  NG_CHECK(check_indices(g));
  int64_t nodes = g->nodes;
  NG_CHECK(csr_alloc_width(out, nodes, g->nnz, g->idx64 != NULL));
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < nodes; v++)
    out->indptr[perm[v]] = g->indptr[v + 1] - g->indptr[v];
  exclusive_scan(out->indptr, nodes);
#pragma omp parallel for schedule(dynamic, 1024)
  for (int64_t v = 0; v < nodes; v++) {
    int64_t dst = out->indptr[perm[v]];
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
      csr_set(out, dst++, perm[ng__csr_index(g, e)]);
  }
  return NG_OK;
}
