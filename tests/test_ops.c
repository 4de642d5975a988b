/* The CPU backend's ops (cpu/backend_cpu.c, cpu/kernels_cpu.c) against plain references written
 * here: naive loops, double accumulation where rounding matters. Every op also runs with 1 and 3
 * OpenMP threads and, for the kernels, with every SIMD variant this CPU has (forced through
 * NG_CPU_ISA); all of those must give the same bytes. Output buffers are poisoned with NaN before
 * each call, so an element an op forgets to write fails the comparison.
 *
 * Tolerances: a float sum of k terms, evaluated left to right, is within k * u * sum |term| of
 * the exact sum (u = 2^-24, Higham's bound for recursive summation, first order); each further
 * multiply or divide adds one u relative. The checks allow 2u per operation, i.e. twice the
 * bound, so they pass on correct code and fail on any wrong term, order or missing element. */
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"

#include "kernels_impl.h"
#include "bf16.h"
#include "features_bf16_impl.h"

#include <omp.h>
#include <stdlib.h>

#define U2 0x1p-23 /* twice the unit roundoff of float */

static const int THREADS[2] = {1, 3};

/* ---- helpers ---- */

/* Rounds values to multiples of 1/4 (zeros made +0): max/min then meet many ties between
 * different sources, which must go to the first in edge order. */
static void quantize(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = roundf(x[i] * 4.0f) / 4.0f + 0.0f;
}

static void poison(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = NAN;
}

static void poison_i32(int32_t *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = -7;
}

static float *dup_floats(const float *x, int64_t n) {
  float *y = ng_test_xmalloc((size_t)n * sizeof *y);
  memcpy(y, x, (size_t)n * sizeof *y);
  return y;
}

static ng_backend *make_backend(const char *isa) {
  if (isa)
    setenv("NG_CPU_ISA", isa, 1);
  else
    unsetenv("NG_CPU_ISA");
  ng_backend *be = NULL;
  EXPECT_OK(ng__backend_cpu_create(&be, 0));
  unsetenv("NG_CPU_ISA");
  if (!be) {
    fprintf(stderr, "test_ops: cannot create the CPU backend: %s\n", ng_last_error());
    exit(2);
  }
  return be;
}

/* The variants this CPU runs, generic first. */
static int supported_isas(ng_cpu_isa *out) {
  int n = 0;
  for (int i = 0; i < NG_CPU_ISA_COUNT_; i++)
    if (ng__cpu_isa_supported((ng_cpu_isa)i))
      out[n++] = (ng_cpu_isa)i;
  return n;
}

static const char *isa_name(ng_cpu_isa isa) {
  static const char *const names[] = {"generic", "avx2", "avx512"};
  return names[isa];
}

/* A backend for each variant this CPU runs (generic first) in `bes`, the variants in `isas`;
 * returns how many. */
static int make_backends(ng_backend **bes, ng_cpu_isa *isas) {
  int n = supported_isas(isas);
  for (int i = 0; i < n; i++)
    bes[i] = make_backend(isa_name(isas[i]));
  return n;
}

static void destroy_backends(ng_backend **bes, int n) {
  for (int i = 0; i < n; i++)
    ng__backend_destroy(bes[i]);
}

/* Reports the first element where got and ref differ by more than tol[i] (or are not numbers);
 * returns whether all agree. */
static bool expect_close(const char *what, const float *got, const double *ref, const double *tol,
                         int64_t n, int line) {
  for (int64_t i = 0; i < n; i++) {
    if (!(fabs((double)got[i] - ref[i]) <= tol[i])) {
      ng_test_fail(__FILE__, line, "%s: element %lld is %.9g, reference %.9g (tolerance %.3g)",
                   what, (long long)i, (double)got[i], ref[i], tol[i]);
      return false;
    }
  }
  return true;
}

static bool expect_same_bytes(const char *what, const void *a, const void *b, size_t bytes,
                              int line) {
  if (memcmp(a, b, bytes) == 0)
    return true;
  const unsigned char *x = a, *y = b;
  size_t i = 0;
  while (x[i] == y[i])
    i++;
  ng_test_fail(__FILE__, line, "%s: bytes differ from offset %zu (element %zu of 4 bytes)", what, i,
               i / 4);
  return false;
}

/* ---- blocks built by hand ---- */

typedef struct {
  int32_t n_dst, n_src, max_deg;
  bool dups;         /* destinations may list a source more than once */
  bool shuffle_t;    /* transposed edges of a source in random order instead of edge order */
  double empty_frac; /* share of destinations forced to have no neighbour */
} block_shape;

/* A random block: each destination gets up to max_deg random sources (distinct unless dups),
 * random positive edge and self weights, and the transpose by a counting sort. */
static void tblock_make(ng_test_block *tb, ng_rng *r, const block_shape *sh) {
  int32_t nd = sh->n_dst, ns = sh->n_src;
  tb->indptr = ng_test_xmalloc(((size_t)nd + 1) * sizeof(int32_t));
  tb->indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++) {
    int32_t deg = (int32_t)ng_rng_below(r, (uint64_t)sh->max_deg + 1);
    if (ng_rng_uniform(r) < sh->empty_frac)
      deg = 0;
    if (!sh->dups && deg > ns)
      deg = ns;
    tb->indptr[d + 1] = tb->indptr[d] + deg;
  }
  ng_test_block_fill(tb, r, nd, ns, sh->dups, sh->dups);
  if (sh->shuffle_t)
    for (int32_t s = 0; s < ns; s++)
      for (int32_t t = tb->t_indptr[s + 1] - 1; t > tb->t_indptr[s]; t--) {
        int32_t o =
            tb->t_indptr[s] + (int32_t)ng_rng_below(r, (uint64_t)t - (uint64_t)tb->t_indptr[s] + 1);
        int32_t td = tb->t_dst[t], te = tb->t_eid[t];
        tb->t_dst[t] = tb->t_dst[o];
        tb->t_eid[t] = tb->t_eid[o];
        tb->t_dst[o] = td;
        tb->t_eid[o] = te;
      }
}

/* ---- aggregation references ---- */

typedef struct {
  const char *name;
  ng_aggr ag;
} aggr_case;

static const aggr_case AGGRS[] = {
    {"sum", {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL}},
    {"mean", {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL}},
    {"max", {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL}},
    {"min", {NG_REDUCE_MIN, false, false, false, 0.0f, 0, NULL}},
    {"gcn", {NG_REDUCE_SUM, true, true, false, 0.0f, 0, NULL}},
    {"weighted-mean+self", {NG_REDUCE_SUM, true, true, true, 0.0f, 0, NULL}},
};

static const block_shape SHAPES[] = {
    {0, 0, 0, false, false, 0.0},      /* nothing at all */
    {0, 7, 0, false, false, 0.0},      /* sources but no destination */
    {5, 5, 0, false, false, 0.0},      /* destinations without neighbours */
    {40, 90, 6, true, false, 0.2},     /* empty rows and duplicate edges */
    {300, 1000, 20, false, true, 0.1}, /* big enough for threads; shuffled transpose */
    {6, 700, 600, false, false, 0.0},  /* large fanout */
};

static const int64_t DIMS[] = {1, 5, 16, 33, 128, 130, 300};

/* Forward reference: SUM in double with a tolerance per element; MAX/MIN by exact float
 * comparisons in edge order (the first strict winner), so their values and winners are exact. */
static void ref_aggr_fwd(const ng_aggr *ag, const ng_block *b, const float *src, int64_t dim,
                         double *out, double *tol, int32_t *win) {
  for (int32_t d = 0; d < b->n_dst; d++) {
    int32_t e0 = b->indptr[d], e1 = b->indptr[d + 1], cnt = e1 - e0;
    for (int64_t j = 0; j < dim; j++) {
      int64_t o = (int64_t)d * dim + j;
      if (ag->reduce != NG_REDUCE_SUM) {
        float best = 0.0f;
        int32_t arg = -1;
        for (int32_t e = e0; e < e1; e++) {
          float v = src[(int64_t)b->indices[e] * dim + j];
          bool wins = arg < 0 || (ag->reduce == NG_REDUCE_MAX ? v > best : v < best);
          if (wins) {
            best = v;
            arg = b->indices[e];
          }
        }
        out[o] = best;
        tol[o] = 0.0;
        win[o] = arg;
        continue;
      }
      double s = 0.0, sabs = 0.0;
      for (int32_t e = e0; e < e1; e++) {
        double t = src[(int64_t)b->indices[e] * dim + j];
        if (ag->weighted)
          t *= b->edge_w[e];
        s += t;
        sabs += fabs(t);
      }
      double ops = (ag->weighted ? 2 * cnt : cnt) + 1;
      if (ag->mean && cnt > 0) {
        s /= cnt;
        sabs /= cnt;
        ops += 1;
      }
      if (ag->self_loop) {
        double t = (double)b->self_w[d] * src[(int64_t)d * dim + j];
        s += t;
        sabs += fabs(t);
        ops += 2;
      }
      out[o] = s;
      tol[o] = ops * U2 * sabs;
      win[o] = -1;
    }
  }
}

/* Backward reference: the transpose of the forward, written as a scatter over destinations (no
 * use of the block's transposed arrays). MAX/MIN route each element to the reference winner. */
static void ref_aggr_bwd(const ng_aggr *ag, const ng_block *b, const float *g, const int32_t *win,
                         int64_t dim, double *out, double *tol) {
  int64_t n = (int64_t)b->n_src * dim;
  double *sabs = calloc((size_t)n + 1, sizeof(double));
  int32_t *terms = calloc((size_t)b->n_src + 1, sizeof(int32_t));
  for (int64_t i = 0; i < n; i++)
    out[i] = 0.0;
  for (int32_t d = 0; d < b->n_dst; d++) {
    int32_t e0 = b->indptr[d], e1 = b->indptr[d + 1];
    if (ag->reduce != NG_REDUCE_SUM) {
      for (int64_t j = 0; j < dim; j++) {
        int32_t s = win[(int64_t)d * dim + j];
        if (s >= 0) {
          out[(int64_t)s * dim + j] += g[(int64_t)d * dim + j];
          sabs[(int64_t)s * dim + j] += fabs((double)g[(int64_t)d * dim + j]);
          terms[s]++;
        }
      }
      continue;
    }
    for (int32_t e = e0; e < e1; e++) {
      int32_t s = b->indices[e];
      double c = ag->weighted ? b->edge_w[e] : 1.0;
      if (ag->mean)
        c /= (e1 - e0);
      for (int64_t j = 0; j < dim; j++) {
        double t = c * g[(int64_t)d * dim + j];
        out[(int64_t)s * dim + j] += t;
        sabs[(int64_t)s * dim + j] += fabs(t);
      }
      terms[s]++;
    }
    if (ag->self_loop)
      for (int64_t j = 0; j < dim; j++) {
        double t = (double)b->self_w[d] * g[(int64_t)d * dim + j];
        out[(int64_t)d * dim + j] += t;
        sabs[(int64_t)d * dim + j] += fabs(t);
      }
  }
  for (int32_t s = 0; s < b->n_src; s++)
    for (int64_t j = 0; j < dim; j++) /* per term: coefficient (2 ops), multiply, add */
      tol[(int64_t)s * dim + j] = (terms[s] + 1) * 4 * U2 * sabs[(int64_t)s * dim + j];
  free(sabs);
  free(terms);
}

/* ---- tests ---- */

static void test_isa_selection(void) {
  ng_backend *be = make_backend(NULL);
  const ng_cpu_kernels *k = ng__backend_cpu_kernels(be);
  EXPECT_TRUE(k != NULL);
  if (k)
    EXPECT_EQ_I(k->isa, ng__cpu_isa_best());
  ng__backend_destroy(be);

  ng_cpu_isa isas[NG_CPU_ISA_COUNT_];
  int n = supported_isas(isas);
  EXPECT_TRUE(n >= 1 && isas[0] == NG_CPU_ISA_GENERIC);
  for (int i = 0; i < n; i++) {
    be = make_backend(isa_name(isas[i]));
    k = ng__backend_cpu_kernels(be);
    EXPECT_TRUE(k && k->isa == isas[i]);
    if (k)
      EXPECT_STR(k->name, isa_name(isas[i]));
    ng__backend_destroy(be);
  }
  printf("  kernel variants on this CPU:");
  for (int i = 0; i < n; i++)
    printf(" %s", isa_name(isas[i]));
  printf(" (best %s)\n", isa_name(ng__cpu_isa_best()));

  setenv("NG_CPU_ISA", "sse9", 1);
  be = (ng_backend *)&be; /* must be reset to NULL on failure */
  EXPECT_STATUS(ng__backend_cpu_create(&be, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_CPU_ISA");
  EXPECT_TRUE(be == NULL);
  unsetenv("NG_CPU_ISA");
  EXPECT_STATUS(ng__backend_cpu_create(&be, -1), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(ng__backend_cpu_kernels(NULL) == NULL);
  ng__backend_destroy(NULL);
}

static void test_memory(void) {
  ng_backend *be = make_backend(NULL);
  const struct ng_backend_i *I = be->iface;
  EXPECT_STR(I->name, "cpu");
  EXPECT_TRUE(I->host_memory);
  ng_rng r;
  ng_rng_seed(&r, 11);
  const int64_t sizes[] = {0, 1, 1000, (3 << 20) + 5}; /* the last is copied in parallel chunks */
  for (size_t si = 0; si < NG_TEST_LEN(sizes); si++) {
    int64_t n = sizes[si];
    float *host = ng_test_rand_floats(&r, n), *back = ng_test_xmalloc((size_t)n * sizeof(float));
    void *a = NULL, *b = NULL;
    EXPECT_OK(I->alloc(be, &a, (size_t)n * sizeof(float)));
    EXPECT_OK(I->alloc(be, &b, (size_t)n * sizeof(float)));
    EXPECT_TRUE(a && ((uintptr_t)a % 64) == 0);
    for (int t = 0; t < 2; t++) {
      omp_set_num_threads(THREADS[t]);
      poison(a, n);
      poison(b, n);
      poison(back, n);
      EXPECT_OK(I->copy_h2d(be, a, host, (size_t)n * sizeof(float)));
      EXPECT_OK(I->copy_d2d(be, b, a, (size_t)n * sizeof(float)));
      EXPECT_OK(I->copy_d2h(be, back, b, (size_t)n * sizeof(float)));
      expect_same_bytes("copy round trip", back, host, (size_t)n * sizeof(float), __LINE__);
      EXPECT_OK(I->fill(be, a, n, -2.5f));
      bool filled = true;
      for (int64_t i = 0; i < n; i++)
        filled &= ((float *)a)[i] == -2.5f;
      EXPECT_TRUE(filled);
      /* add: y += x against the obvious loop */
      EXPECT_OK(I->copy_h2d(be, a, host, (size_t)n * sizeof(float)));
      EXPECT_OK(I->add(be, a, back, n));
      bool added = true;
      for (int64_t i = 0; i < n; i++)
        added &= ((float *)a)[i] == host[i] + host[i];
      EXPECT_TRUE(added);
    }
    EXPECT_OK(I->sync(be));
    I->free(be, a);
    I->free(be, b);
    free(host);
    free(back);
  }
  /* Overlapping copy_d2d behaves as memmove. */
  float buf[10];
  for (int i = 0; i < 10; i++)
    buf[i] = (float)i + 1.0f;
  EXPECT_OK(I->copy_d2d(be, buf + 2, buf, 6 * sizeof(float)));
  EXPECT_TRUE(buf[2] == 1.0f && buf[7] == 6.0f && buf[8] == 9.0f);
  I->free(be, NULL);
  EXPECT_STATUS(I->fill(be, NULL, 4, 0.0f), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(I->add(be, buf, buf, -1), NG_ERR_INVALID_ARG);
  omp_set_num_threads(2);
  ng__backend_destroy(be);
}

static void test_gather(void) {
  ng_cpu_isa isas[NG_CPU_ISA_COUNT_];
  ng_backend *bes[NG_CPU_ISA_COUNT_];
  int n_isa = make_backends(bes, isas);
  ng_rng r;
  ng_rng_seed(&r, 5);
  const int64_t dims[] = {1, 7, 16, 17, 64, 100, 1024};
  const int64_t counts[] = {0, 1, 3000};
  for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
    for (size_t ci = 0; ci < NG_TEST_LEN(counts); ci++) {
      int64_t dim = dims[di], n = counts[ci], rows = 500;
      float *table = ng_test_rand_floats(&r, rows * dim);
      int64_t *ids = ng_test_xmalloc((size_t)n * sizeof *ids);
      for (int64_t i = 0; i < n; i++)
        ids[i] = (int64_t)ng_rng_below(&r, (uint64_t)rows);
      float *ref = ng_test_xmalloc((size_t)(n * dim) * sizeof(float));
      for (int64_t i = 0; i < n; i++)
        memcpy(ref + i * dim, table + ids[i] * dim, (size_t)dim * sizeof(float));
      float *got = ng_test_xmalloc((size_t)(n * dim) * sizeof(float));
      for (int i = 0; i < n_isa; i++)
        for (int t = 0; t < 2; t++) {
          omp_set_num_threads(THREADS[t]);
          poison(got, n * dim);
          EXPECT_OK(bes[i]->iface->gather_rows(bes[i], got, table, ids, n, dim));
          char what[96];
          snprintf(what, sizeof what, "gather_rows dim %lld n %lld %s %d threads", (long long)dim,
                   (long long)n, isa_name(isas[i]), THREADS[t]);
          expect_same_bytes(what, got, ref, (size_t)(n * dim) * sizeof(float), __LINE__);
        }
      /* stage_rows (streaming stores into 64-byte aligned rows, or the plain gather when a
       * row is not vector-aligned: dst + 1 float) copies the same bytes. */
      /* C11's aligned_alloc wants a size that is a multiple of the alignment. */
      const size_t abytes = ((size_t)(n * dim + 16) * sizeof(float) + 127) / 64 * 64;
      float *aligned = aligned_alloc(64, abytes);
      for (int i = 0; i < n_isa; i++)
        for (int shift = 0; shift < 2; shift++) {
          poison(aligned + shift, n * dim);
          ng__cpu_kernels(isas[i])->stage_rows(aligned + shift, table, ids, n, dim);
          char what[96];
          snprintf(what, sizeof what, "stage_rows dim %lld n %lld %s shift %d", (long long)dim,
                   (long long)n, isa_name(isas[i]), shift);
          expect_same_bytes(what, aligned + shift, ref, (size_t)(n * dim) * sizeof(float),
                            __LINE__);
        }
      free(aligned);
      free(table);
      free(ids);
      free(ref);
      free(got);
    }
  }
  EXPECT_STATUS(bes[0]->iface->gather_rows(bes[0], NULL, NULL, NULL, 4, 8), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(bes[0]->iface->gather_rows(bes[0], NULL, NULL, NULL, 4, -1), NG_ERR_INVALID_ARG);
  omp_set_num_threads(2);
  destroy_backends(bes, n_isa);
}

/* Runs forward and backward of every aggregator on every shape and dimension with every variant
 * and 1 and 3 threads: all runs must give the bytes of (generic, 1 thread), and that run must
 * match the references. */
static void test_aggr_fwd_bwd(void) {
  ng_cpu_isa isas[NG_CPU_ISA_COUNT_];
  ng_backend *bes[NG_CPU_ISA_COUNT_];
  int n_isa = make_backends(bes, isas);
  ng_rng r;
  ng_rng_seed(&r, 7);
  int runs = 0;
  for (size_t si = 0; si < NG_TEST_LEN(SHAPES); si++) {
    ng_test_block tb;
    tblock_make(&tb, &r, &SHAPES[si]);
    const ng_block *b = &tb.b;
    for (size_t di = 0; di < NG_TEST_LEN(DIMS); di++) {
      int64_t dim = DIMS[di];
      int64_t nd = (int64_t)b->n_dst * dim, ns = (int64_t)b->n_src * dim;
      float *src = ng_test_rand_floats(&r, ns), *gdst = ng_test_rand_floats(&r, nd);
      if (di % 2)
        quantize(src, ns);
      float *out0 = ng_test_xmalloc((size_t)nd * 4), *out = ng_test_xmalloc((size_t)nd * 4);
      int32_t *arg0 = ng_test_xmalloc((size_t)nd * 4), *arg = ng_test_xmalloc((size_t)nd * 4);
      float *gs0 = ng_test_xmalloc((size_t)ns * 4), *gs = ng_test_xmalloc((size_t)ns * 4);
      double *ref = ng_test_xmalloc((size_t)(nd + ns) * 8),
             *tol = ng_test_xmalloc((size_t)(nd + ns) * 8);
      int32_t *win = ng_test_xmalloc((size_t)nd * 4);
      for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++) {
        const ng_aggr *ag = &AGGRS[ai].ag;
        bool best = ag->reduce != NG_REDUCE_SUM;
        char what[160];
        snprintf(what, sizeof what, "%s shape %zu dim %lld", AGGRS[ai].name, si, (long long)dim);
        for (int i = 0; i < n_isa; i++)
          for (int t = 0; t < 2; t++) {
            omp_set_num_threads(THREADS[t]);
            bool first = i == 0 && t == 0;
            float *o = first ? out0 : out, *g = first ? gs0 : gs;
            int32_t *a = first ? arg0 : arg;
            poison(o, nd);
            poison_i32(a, nd);
            poison(g, ns);
            EXPECT_OK(bes[i]->iface->aggr_fwd(bes[i], ag, b, src, dim, o, best ? a : NULL));
            EXPECT_OK(bes[i]->iface->aggr_bwd(bes[i], ag, b, gdst, best ? a : NULL, dim, g));
            runs++;
            if (first)
              continue;
            char w2[220];
            snprintf(w2, sizeof w2, "%s: %s/%d threads vs generic/1", what, isa_name(isas[i]),
                     THREADS[t]);
            expect_same_bytes(w2, o, out0, (size_t)nd * 4, __LINE__);
            if (best)
              expect_same_bytes(w2, a, arg0, (size_t)nd * 4, __LINE__);
            expect_same_bytes(w2, g, gs0, (size_t)ns * 4, __LINE__);
          }
        ref_aggr_fwd(ag, b, src, dim, ref, tol, win);
        expect_close(what, out0, ref, tol, nd, __LINE__);
        if (best)
          expect_same_bytes(what, arg0, win, (size_t)nd * 4, __LINE__);
        ref_aggr_bwd(ag, b, gdst, win, dim, ref, tol);
        expect_close(what, gs0, ref, tol, ns, __LINE__);
      }
      free(src);
      free(gdst);
      free(out0);
      free(out);
      free(arg0);
      free(arg);
      free(gs0);
      free(gs);
      free(ref);
      free(tol);
      free(win);
    }
    ng_test_block_free(&tb);
  }
  printf("  %d forward+backward runs compared\n", runs);
  omp_set_num_threads(2);
  destroy_backends(bes, n_isa);
}

/* MAX backward on a destination that lists one source twice: the gradient reaches it once. */
static void test_aggr_max_duplicate_source(void) {
  ng_backend *be = make_backend(NULL);
  /* destination 0: sources 2, 1, 2 ; destination 1: source 2 */
  int32_t indptr[] = {0, 3, 4}, indices[] = {2, 1, 2, 2};
  int32_t t_indptr[] = {0, 0, 1, 4}, t_dst[] = {0, 0, 0, 1}, t_eid[] = {1, 0, 2, 3};
  ng_block b = {.n_dst = 2,
                .n_src = 3,
                .nnz = 4,
                .indptr = indptr,
                .indices = indices,
                .t_indptr = t_indptr,
                .t_dst = t_dst,
                .t_eid = t_eid};
  float src[] = {9.0f, 9.0f, 1.0f, 5.0f, 3.0f, -4.0f}; /* [3, 2] */
  float out[4], gdst[] = {10.0f, 20.0f, 100.0f, 200.0f}, gsrc[6];
  int32_t arg[4];
  ng_aggr mx = {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL};
  poison(out, 4);
  poison(gsrc, 6);
  EXPECT_OK(be->iface->aggr_fwd(be, &mx, &b, src, 2, out, arg));
  /* d0: column 0 max(3, 1, 3) = 3 from source 2; column 1 max(-4, 5, -4) = 5 from source 1. */
  EXPECT_TRUE(out[0] == 3.0f && out[1] == 5.0f && out[2] == 3.0f && out[3] == -4.0f);
  EXPECT_TRUE(arg[0] == 2 && arg[1] == 1 && arg[2] == 2 && arg[3] == 2);
  EXPECT_OK(be->iface->aggr_bwd(be, &mx, &b, gdst, arg, 2, gsrc));
  EXPECT_TRUE(gsrc[0] == 0.0f && gsrc[1] == 0.0f);     /* source 0 has no edge */
  EXPECT_TRUE(gsrc[2] == 0.0f && gsrc[3] == 20.0f);    /* source 1 won d0 column 1 */
  EXPECT_TRUE(gsrc[4] == 110.0f && gsrc[5] == 200.0f); /* once from d0 (not twice), once d1 */
  ng__backend_destroy(be);
}

/* Partial states: one state over all edges, finalized, equals the forward without self loop bit
 * for bit; two states over a random split of the edges, merged, equal it exactly for MAX/MIN and
 * within rounding for SUM; merging is independent of threads and variants. */
static void test_aggr_partial(void) {
  ng_cpu_isa isas[NG_CPU_ISA_COUNT_];
  ng_backend *bes[NG_CPU_ISA_COUNT_];
  int n_isa = make_backends(bes, isas);
  ng_rng r;
  ng_rng_seed(&r, 9);
  for (size_t si = 0; si < NG_TEST_LEN(SHAPES); si++) {
    ng_test_block tb;
    tblock_make(&tb, &r, &SHAPES[si]);
    const ng_block *b = &tb.b;
    /* The two halves: every edge goes to one of them at random, in edge order. */
    int32_t nd = b->n_dst;
    int32_t *ip[2], *ix[2];
    float *ew[2];
    for (int h = 0; h < 2; h++) {
      ip[h] = ng_test_xmalloc(((size_t)nd + 1) * 4);
      ix[h] = ng_test_xmalloc((size_t)b->nnz * 4);
      ew[h] = ng_test_xmalloc((size_t)b->nnz * 4);
      ip[h][0] = 0;
    }
    for (int32_t d = 0; d < nd; d++) {
      ip[0][d + 1] = ip[0][d];
      ip[1][d + 1] = ip[1][d];
      for (int32_t e = b->indptr[d]; e < b->indptr[d + 1]; e++) {
        int h = (int)ng_rng_below(&r, 2);
        ix[h][ip[h][d + 1]] = b->indices[e];
        ew[h][ip[h][d + 1]++] = b->edge_w[e];
      }
    }
    ng_block half[2];
    for (int h = 0; h < 2; h++)
      half[h] = (ng_block){.n_dst = nd,
                           .n_src = b->n_src,
                           .nnz = ip[h][nd],
                           .indptr = ip[h],
                           .indices = ix[h],
                           .edge_w = ew[h]};
    for (size_t di = 0; di < NG_TEST_LEN(DIMS); di++) {
      int64_t dim = DIMS[di], n = (int64_t)nd * dim;
      float *src = ng_test_rand_floats(&r, (int64_t)b->n_src * dim);
      if (di % 2)
        quantize(src, (int64_t)b->n_src * dim);
      float *fwd = ng_test_xmalloc((size_t)n * 4), *fin = ng_test_xmalloc((size_t)n * 4);
      float *merged0 = ng_test_xmalloc((size_t)n * 4);
      ng_pstate st[2];
      for (int h = 0; h < 2; h++)
        st[h] =
            (ng_pstate){ng_test_xmalloc((size_t)n * 4), ng_test_xmalloc((size_t)nd * 4), nd, dim};
      for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++) {
        ng_aggr ag = AGGRS[ai].ag;
        ag.self_loop = false; /* partial states carry no self loop */
        char what[160];
        snprintf(what, sizeof what, "partial %s shape %zu dim %lld", AGGRS[ai].name, si,
                 (long long)dim);
        for (int i = 0; i < n_isa; i++)
          for (int t = 0; t < 2; t++) {
            omp_set_num_threads(THREADS[t]);
            ng_backend *be = bes[i];
            poison(fwd, n);
            EXPECT_OK(be->iface->aggr_fwd(be, &ag, b, src, dim, fwd, NULL));
            /* all edges in one state */
            poison(st[0].val, n);
            poison_i32(st[0].count, nd);
            EXPECT_OK(be->iface->aggr_partial(be, &ag, b, src, &st[0]));
            for (int32_t d = 0; d < nd; d++)
              if (st[0].count[d] != b->indptr[d + 1] - b->indptr[d]) {
                ng_test_fail(__FILE__, __LINE__, "%s: count[%d] = %d", what, (int)d,
                             (int)st[0].count[d]);
                break;
              }
            poison(fin, n);
            EXPECT_OK(be->iface->pstate_finalize(be, &ag, &st[0], fin));
            expect_same_bytes(what, fin, fwd, (size_t)n * 4, __LINE__);
            /* two halves merged */
            for (int h = 0; h < 2; h++) {
              poison(st[h].val, n);
              poison_i32(st[h].count, nd);
              EXPECT_OK(be->iface->aggr_partial(be, &ag, &half[h], src, &st[h]));
            }
            EXPECT_OK(be->iface->pstate_merge(be, &ag, &st[0], &st[1]));
            poison(fin, n);
            EXPECT_OK(be->iface->pstate_finalize(be, &ag, &st[0], fin));
            if (i == 0 && t == 0)
              memcpy(merged0, fin, (size_t)n * 4);
            else
              expect_same_bytes(what, fin, merged0, (size_t)n * 4, __LINE__);
            for (int32_t d = 0; d < nd; d++)
              if (st[0].count[d] != b->indptr[d + 1] - b->indptr[d]) {
                ng_test_fail(__FILE__, __LINE__, "%s: merged count[%d] = %d", what, (int)d,
                             (int)st[0].count[d]);
                break;
              }
          }
        if (ag.reduce != NG_REDUCE_SUM) {
          expect_same_bytes(what, merged0, fwd, (size_t)n * 4, __LINE__);
        } else {
          double *ref = ng_test_xmalloc((size_t)n * 8), *tol = ng_test_xmalloc((size_t)n * 8);
          int32_t *win = ng_test_xmalloc((size_t)n * 4);
          ref_aggr_fwd(&ag, b, src, dim, ref, tol, win);
          expect_close(what, merged0, ref, tol, n, __LINE__);
          free(ref);
          free(tol);
          free(win);
        }
      }
      for (int h = 0; h < 2; h++) {
        free(st[h].val);
        free(st[h].count);
      }
      free(src);
      free(fwd);
      free(fin);
      free(merged0);
    }
    for (int h = 0; h < 2; h++) {
      free(ip[h]);
      free(ix[h]);
      free(ew[h]);
    }
    ng_test_block_free(&tb);
  }
  omp_set_num_threads(2);
  destroy_backends(bes, n_isa);
}

/* stage_sum (streaming stores from an L1 scratch row, or aggr_sum when out's rows are not
 * vector-aligned or longer than NG_STAGE_SUM_MAX) gives the bytes of aggr_sum in every variant,
 * for every SUM aggregator, rows inside and beyond a register tile, and destinations [d0, d1)
 * that leave the rows around them untouched. */
static void test_stage_sum(void) {
  ng_cpu_isa isas[NG_CPU_ISA_COUNT_];
  int n_isa = supported_isas(isas);
  ng_rng r;
  ng_rng_seed(&r, 13);
  const int64_t dims[] = {4, 16, 128, 256, 1024, NG_STAGE_SUM_MAX, NG_STAGE_SUM_MAX + 16};
  const block_shape shapes[] = {SHAPES[3], SHAPES[4], SHAPES[5]};
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    ng_test_block tb;
    tblock_make(&tb, &r, &shapes[si]);
    const ng_block *b = &tb.b;
    const int32_t nd = b->n_dst, d0 = nd / 3, d1 = nd - 1;
    for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
      const int64_t dim = dims[di], n = (int64_t)nd * dim;
      float *src = ng_test_rand_floats(&r, (int64_t)b->n_src * dim);
      float *ref = ng_test_xmalloc((size_t)n * sizeof(float));
      const size_t abytes = ((size_t)(n + 16) * sizeof(float) + 127) / 64 * 64;
      float *aligned = aligned_alloc(64, abytes);
      EXPECT_TRUE(aligned != NULL);
      for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++) {
        const ng_aggr *ag = &AGGRS[ai].ag;
        if (ag->reduce != NG_REDUCE_SUM)
          continue;
        for (int i = 0; i < n_isa; i++) {
          const ng_cpu_kernels *k = ng__cpu_kernels(isas[i]);
          poison(ref, n);
          k->aggr_sum(ag, b, src, dim, d0, d1, ref);
          for (int shift = 0; shift < 2; shift++) {
            poison(aligned + shift, n);
            k->stage_sum(ag, b, src, dim, d0, d1, aligned + shift);
            char what[128];
            snprintf(what, sizeof what, "stage_sum %s shape %zu dim %lld %s shift %d",
                     AGGRS[ai].name, si, (long long)dim, isa_name(isas[i]), shift);
            /* the whole buffer: rows outside [d0, d1) keep their poison in both */
            expect_same_bytes(what, aligned + shift, ref, (size_t)n * sizeof(float), __LINE__);
          }
        }
      }
      free(aligned);
      free(ref);
      free(src);
    }
    ng_test_block_free(&tb);
  }
}

static void test_aggr_errors(void) {
  ng_backend *be = make_backend(NULL);
  const struct ng_backend_i *I = be->iface;
  ng_rng r;
  ng_rng_seed(&r, 3);
  block_shape sh = {4, 6, 3, false, false, 0.0};
  ng_test_block tb;
  tblock_make(&tb, &r, &sh);
  float src[6 * 2], dst[4 * 2], g[6 * 2];
  int32_t arg[4 * 2];
  for (int i = 0; i < 12; i++)
    src[i] = ng_test_frand(&r);
  ng_aggr weighted_max = {NG_REDUCE_MAX, true, false, false, 0.0f, 0, NULL};
  EXPECT_STATUS(I->aggr_fwd(be, &weighted_max, &tb.b, src, 2, dst, arg), NG_ERR_UNSUPPORTED);
  ng_aggr bad = {(ng_reduce)7, false, false, false, 0.0f, 0, NULL};
  EXPECT_STATUS(I->aggr_fwd(be, &bad, &tb.b, src, 2, dst, arg), NG_ERR_INVALID_ARG);
  ng_aggr gcn = {NG_REDUCE_SUM, true, true, false, 0.0f, 0, NULL};
  ng_block nw = tb.b;
  nw.edge_w = NULL;
  EXPECT_STATUS(I->aggr_fwd(be, &gcn, &nw, src, 2, dst, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("edge_w");
  ng_block nt = tb.b;
  nt.t_indptr = NULL;
  ng_aggr sum = {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL};
  EXPECT_STATUS(I->aggr_bwd(be, &sum, &nt, dst, NULL, 2, g), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("transpose");
  ng_aggr mx = {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL};
  EXPECT_STATUS(I->aggr_bwd(be, &mx, &tb.b, dst, NULL, 2, g), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("argbest");
  ng_block inv = tb.b;
  inv.n_src = 2; /* fewer sources than destinations */
  EXPECT_STATUS(I->aggr_fwd(be, &sum, &inv, src, 2, dst, NULL), NG_ERR_INVALID_ARG);
  inv = tb.b;
  inv.nnz += 1;
  EXPECT_STATUS(I->aggr_fwd(be, &sum, &inv, src, 2, dst, NULL), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(I->aggr_fwd(be, &sum, &tb.b, src, -2, dst, NULL), NG_ERR_INVALID_ARG);
  ng_pstate st = {dst, arg, 3, 2}; /* 3 rows for a 4-destination block */
  EXPECT_STATUS(I->aggr_partial(be, &sum, &tb.b, src, &st), NG_ERR_INVALID_ARG);
  ng_pstate a = {dst, arg, 4, 2}, o = {g, arg, 4, 1};
  EXPECT_STATUS(I->pstate_merge(be, &sum, &a, &o), NG_ERR_INVALID_ARG);
  ng_test_block_free(&tb);
  ng__backend_destroy(be);
}

/* ---- GEMM ---- */

typedef struct {
  int64_t m, n, k;
  const char *why;
} gemm_shape;

static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, const float *c,
                     int64_t ldc, double *out, double *tol) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0.0, sabs = 0.0;
      for (int64_t p = 0; p < k; p++) {
        double x = ta ? a[p * lda + i] : a[i * lda + p];
        double y = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += x * y;
        sabs += fabs(x * y);
      }
      double cv = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
      out[i * n + j] = alpha * s + cv;
      tol[i * n + j] = (double)(k + 4) * U2 * (fabs((double)alpha) * sabs + fabs(cv));
    }
}

static void test_gemm(void) {
  ng_backend *be = make_backend(NULL);
  ng_rng r;
  ng_rng_seed(&r, 21);
  const gemm_shape shapes[] = {
      {1, 1, 1, "scalar"},
      {7, 5, 3, "small"},
      {33, 17, 65, "odd sizes"},
      {1100, 20, 30, "split by rows"},
      {5, 1100, 30, "split by columns"},
      {8, 12, 2100, "split by the inner dimension"},
      {0, 4, 3, "m = 0"},
      {3, 4, 0, "k = 0"},
  };
  const float alphas[] = {1.0f, -0.75f}, betas[] = {0.0f, 0.5f};
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    const gemm_shape *s = &shapes[si];
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr & 2;
      /* leading dimensions wider than the rows: sub-matrices of bigger arrays */
      int64_t lda = (ta ? s->m : s->k) + 3, ldb = (tb ? s->k : s->n) + 1, ldc = s->n + 2;
      int64_t a_rows = ta ? s->k : s->m, b_rows = tb ? s->n : s->k;
      float *a = ng_test_rand_floats(&r, a_rows * lda), *b = ng_test_rand_floats(&r, b_rows * ldb);
      float *c_init = ng_test_rand_floats(&r, s->m * ldc);
      float *c0 = ng_test_xmalloc((size_t)(s->m * ldc) * 4),
            *c = ng_test_xmalloc((size_t)(s->m * ldc) * 4);
      double *ref = ng_test_xmalloc((size_t)(s->m * s->n) * 8),
             *tol = ng_test_xmalloc((size_t)(s->m * s->n) * 8);
      float *got = ng_test_xmalloc((size_t)(s->m * s->n) * 4);
      for (int ai = 0; ai < 2; ai++)
        for (int bi = 0; bi < 2; bi++) {
          char what[160];
          snprintf(what, sizeof what, "gemm %s %c%c alpha %g beta %g", s->why, ta ? 'T' : 'N',
                   tb ? 'T' : 'N', (double)alphas[ai], (double)betas[bi]);
          for (int t = 0; t < 2; t++) {
            omp_set_num_threads(THREADS[t]);
            float *cc = t ? c : c0;
            memcpy(cc, c_init, (size_t)(s->m * ldc) * 4);
            if (betas[bi] == 0.0f) /* beta == 0 must not read C */
              for (int64_t i = 0; i < s->m; i++)
                poison(cc + i * ldc, s->n);
            EXPECT_OK(be->iface->gemm(be, ta, tb, s->m, s->n, s->k, alphas[ai], a, lda, b, ldb,
                                      betas[bi], cc, ldc));
          }
          expect_same_bytes(what, c, c0, (size_t)(s->m * ldc) * 4, __LINE__);
          ref_gemm(ta, tb, s->m, s->n, s->k, alphas[ai], a, lda, b, ldb, betas[bi], c_init, ldc,
                   ref, tol);
          for (int64_t i = 0; i < s->m; i++)
            memcpy(got + i * s->n, c0 + i * ldc, (size_t)s->n * 4);
          expect_close(what, got, ref, tol, s->m * s->n, __LINE__);
          /* the padding between rows of C is left alone */
          bool pad_kept = true;
          for (int64_t i = 0; i < s->m; i++)
            for (int64_t j = s->n; j < ldc; j++)
              pad_kept &= c0[i * ldc + j] == c_init[i * ldc + j];
          EXPECT_TRUE(pad_kept);
        }
      free(a);
      free(b);
      free(c_init);
      free(c0);
      free(c);
      free(ref);
      free(tol);
      free(got);
    }
  }
  /* oneDNN's own threading splits a long inner dimension by the thread count (its results
   * differ between 1 and 8 threads for this shape); the backend's fixed partition must not, also
   * when nested parallel regions are allowed. */
  {
    int64_t m = 16, n = 16, k = 200000;
    float *a = ng_test_rand_floats(&r, k * m), *b = ng_test_rand_floats(&r, k * n);
    float *c[2] = {ng_test_xmalloc((size_t)(m * n) * 4), ng_test_xmalloc((size_t)(m * n) * 4)};
    int levels = omp_get_max_active_levels();
    for (int nest = 0; nest < 2; nest++) {
      omp_set_max_active_levels(nest ? 4 : 1);
      for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t ? 8 : 1);
        poison(c[t], m * n);
        EXPECT_OK(be->iface->gemm(be, true, false, m, n, k, 1.0f, a, m, b, n, 0.0f, c[t], n));
      }
      expect_same_bytes("gemm long inner dimension, 1 vs 8 threads", c[0], c[1],
                        (size_t)(m * n) * 4, __LINE__);
    }
    omp_set_max_active_levels(levels);
    free(a);
    free(b);
    free(c[0]);
    free(c[1]);
  }
  float x[4] = {1, 2, 3, 4};
  EXPECT_STATUS(be->iface->gemm(be, false, false, 2, 2, 2, 1.0f, x, 1, x, 2, 0.0f, x, 2),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("leading dimensions");
  EXPECT_STATUS(be->iface->gemm(be, false, false, -1, 2, 2, 1.0f, x, 2, x, 2, 0.0f, x, 2),
                NG_ERR_INVALID_ARG);
  omp_set_num_threads(2);
  ng__backend_destroy(be);
}

/* A row of an untransposed product is the same bits whatever the number of rows computed with
 * it (every m from 1 to 300, and starting at another row): the serving engine answers a node
 * alone or in any batch with the same bits. oneDNN's row blocks on AVX2 sum a block's tail in
 * another order (row bits depended on m mod 6 there); the backend pads the tail to a whole block.
 */
static void test_gemm_rows_independent(void) {
  ng_backend *be = make_backend(NULL);
  ng_rng r;
  ng_rng_seed(&r, 23);
  const int64_t shapes[][2] = {{16, 1433}, {7, 16}, {256, 128}, {64, 300}};
  const int64_t M = 300;
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    const int64_t n = shapes[si][0], k = shapes[si][1];
    float *a = ng_test_rand_floats(&r, M * k), *b = ng_test_rand_floats(&r, k * n);
    float *ref = ng_test_xmalloc((size_t)(M * n) * 4), *c = ng_test_xmalloc((size_t)(M * n) * 4);
    EXPECT_OK(be->iface->gemm(be, false, false, M, n, k, 1.0f, a, k, b, n, 0.0f, ref, n));
    int64_t bad = 0, first_bad = -1;
    for (int64_t m = 1; m <= M; m++)
      for (int64_t off = 0; off <= 5 && off + m <= M; off += 5) {
        poison(c, m * n);
        EXPECT_OK(
            be->iface->gemm(be, false, false, m, n, k, 1.0f, a + off * k, k, b, n, 0.0f, c, n));
        if (memcmp(c, ref + off * n, (size_t)(m * n) * 4) != 0 && bad++ == 0)
          first_bad = m;
      }
    if (bad)
      ng_test_fail(__FILE__, __LINE__,
                   "gemm n=%lld k=%lld: rows differ from the same rows of a %lld-row product for "
                   "%lld row counts (first m = %lld)",
                   (long long)n, (long long)k, (long long)M, (long long)bad, (long long)first_bad);
    free(a);
    free(b);
    free(ref);
    free(c);
  }
  ng__backend_destroy(be);
}

/* ---- dense elementwise ops ---- */

static void test_bias_act(void) {
  ng_backend *be = make_backend(NULL);
  ng_rng r;
  ng_rng_seed(&r, 31);
  const int64_t shapes[][2] = {{0, 5}, {1, 1}, {3, 70}, {700, 9}, {200, 300}};
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
    float *x = ng_test_rand_floats(&r, n), *bias = ng_test_rand_floats(&r, cols),
          *g = ng_test_rand_floats(&r, n);
    for (int act = NG_ACT_NONE; act <= NG_ACT_RELU; act++) {
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        /* references: the same float expressions, written plainly */
        float *yref = dup_floats(x, n), *gref = dup_floats(g, n);
        float *bref = ng_test_xmalloc((size_t)cols * 4);
        for (int64_t i = 0; i < rows; i++)
          for (int64_t j = 0; j < cols; j++) {
            float v = yref[i * cols + j] + (with_bias ? bias[j] : 0.0f);
            yref[i * cols + j] = act == NG_ACT_RELU && v < 0.0f ? 0.0f : v;
          }
        for (int64_t j = 0; j < cols; j++) {
          float s = 0.0f, chunk = 0.0f;
          for (int64_t i = 0; i < rows; i++) {
            float *gv = &gref[i * cols + j];
            if (act == NG_ACT_RELU && !(yref[i * cols + j] > 0.0f))
              *gv = 0.0f;
            chunk += *gv; /* in row order within a chunk, the chunks in order, as specified */
            if ((i + 1) % NG_BIAS_CHUNK_ROWS == 0 || i + 1 == rows) {
              s += chunk;
              chunk = 0.0f;
            }
          }
          bref[j] = s;
        }
        float *y[2], *gg[2], *gb[2];
        for (int t = 0; t < 2; t++) {
          omp_set_num_threads(THREADS[t]);
          y[t] = dup_floats(x, n);
          gg[t] = dup_floats(g, n);
          gb[t] = ng_test_xmalloc((size_t)cols * 4);
          poison(gb[t], cols);
          EXPECT_OK(be->iface->bias_act_fwd(be, y[t], with_bias ? bias : NULL, rows, cols,
                                            (ng_activation)act));
          EXPECT_OK(be->iface->bias_act_bwd(be, gg[t], y[t], with_bias ? gb[t] : NULL, rows, cols,
                                            (ng_activation)act));
          expect_same_bytes("bias_act_fwd", y[t], yref, (size_t)n * 4, __LINE__);
          expect_same_bytes("bias_act_bwd grad", gg[t], gref, (size_t)n * 4, __LINE__);
          if (with_bias)
            expect_same_bytes("bias_act_bwd grad_bias", gb[t], bref, (size_t)cols * 4, __LINE__);
        }
        for (int t = 0; t < 2; t++) {
          free(y[t]);
          free(gg[t]);
          free(gb[t]);
        }
        free(yref);
        free(gref);
        free(bref);
      }
    }
    free(x);
    free(bias);
    free(g);
  }
  float v[2] = {1, 2};
  EXPECT_STATUS(be->iface->bias_act_fwd(be, v, NULL, 1, 2, (ng_activation)9), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(be->iface->bias_act_bwd(be, v, NULL, NULL, 1, 2, NG_ACT_RELU), NG_ERR_INVALID_ARG);
  omp_set_num_threads(2);
  ng__backend_destroy(be);
}

static void test_dropout(void) {
  ng_backend *be = make_backend(NULL);
  ng_rng r;
  ng_rng_seed(&r, 41);
  const int64_t n = 200003;
  float *x = ng_test_rand_floats(&r, n), *g = ng_test_rand_floats(&r, n);
  const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
  for (size_t pi = 0; pi < NG_TEST_LEN(ps); pi++) {
    float p = ps[pi];
    uint64_t seed = 1234 + pi;
    uint32_t thr = (uint32_t)((double)p * 0x1p32);
    float scale = 1.0f / (1.0f - p);
    float *y[2], *gg[2];
    uint8_t *m[2];
    for (int t = 0; t < 2; t++) {
      omp_set_num_threads(THREADS[t]);
      y[t] = dup_floats(x, n);
      gg[t] = dup_floats(g, n);
      m[t] = ng_test_xmalloc((size_t)n);
      memset(m[t], 0xAB, (size_t)n);
      EXPECT_OK(be->iface->dropout_fwd(be, y[t], m[t], n, p, seed));
      EXPECT_OK(be->iface->dropout_bwd(be, gg[t], m[t], n, p));
    }
    expect_same_bytes("dropout mask threads", m[0], m[1], (size_t)n, __LINE__);
    expect_same_bytes("dropout_fwd threads", y[0], y[1], (size_t)n * 4, __LINE__);
    expect_same_bytes("dropout_bwd threads", gg[0], gg[1], (size_t)n * 4, __LINE__);
    int64_t kept = 0, bad_mask = 0, bad_val = 0;
    for (int64_t i = 0; i < n; i++) {
      uint64_t h = ng_mix64(ng_mix64(seed) ^ ((uint64_t)i >> 1));
      bool keep = (uint32_t)(i & 1 ? h >> 32 : h) >= thr;
      kept += keep;
      bad_mask += m[0][i] != (uint8_t)keep;
      float want = keep ? x[i] * scale : 0.0f, gwant = keep ? g[i] * scale : 0.0f;
      bad_val += y[0][i] != want || gg[0][i] != gwant;
    }
    EXPECT_EQ_I(bad_mask, 0);
    EXPECT_EQ_I(bad_val, 0);
    /* the kept share is 1 - p within 5 standard deviations */
    double sd = sqrt((double)p * (1.0 - p) / (double)n);
    EXPECT_NEAR((double)kept / (double)n, 1.0 - p, 5.0 * sd + 1e-12);
    if (p == 0.0f)
      expect_same_bytes("dropout p = 0 copies", y[0], x, (size_t)n * 4, __LINE__);
    for (int t = 0; t < 2; t++) {
      free(y[t]);
      free(gg[t]);
      free(m[t]);
    }
  }
  /* another seed, another mask */
  uint8_t *m1 = ng_test_xmalloc(1000), *m2 = ng_test_xmalloc(1000);
  float *y = dup_floats(x, 1000);
  EXPECT_OK(be->iface->dropout_fwd(be, y, m1, 1000, 0.5f, 1));
  EXPECT_OK(be->iface->dropout_fwd(be, y, m2, 1000, 0.5f, 2));
  EXPECT_TRUE(memcmp(m1, m2, 1000) != 0);
  EXPECT_STATUS(be->iface->dropout_fwd(be, y, m1, 1000, 1.0f, 1), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(be->iface->dropout_fwd(be, y, m1, 1000, -0.1f, 1), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(be->iface->dropout_bwd(be, y, m1, 1000, NAN), NG_ERR_INVALID_ARG);
  free(m1);
  free(m2);
  free(y);
  free(x);
  free(g);
  omp_set_num_threads(2);
  ng__backend_destroy(be);
}

static void test_xent(void) {
  ng_backend *be = make_backend(NULL);
  ng_rng r;
  ng_rng_seed(&r, 51);
  const int64_t shapes[][2] = {{1, 1}, {5, 3}, {1000, 7}, {300, 47}};
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    int64_t n = shapes[si][0], classes = shapes[si][1];
    float *z = ng_test_rand_floats(&r, n * classes);
    for (int64_t i = 0; i < n * classes; i++)
      z[i] *= 4.0f;
    if (si == 3) /* huge logits: a naive exp would overflow */
      for (int64_t i = 0; i < classes; i++)
        z[i] = 3.0e4f + (float)i;
    int32_t *lab = ng_test_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
      lab[i] = (int32_t)ng_rng_below(&r, (uint64_t)classes);
    /* reference in double, straight from the definition */
    double loss_ref = 0.0;
    int64_t correct_ref = 0;
    double *gref = ng_test_xmalloc((size_t)(n * classes) * 8),
           *gtol = ng_test_xmalloc((size_t)(n * classes) * 8);
    for (int64_t i = 0; i < n; i++) {
      const float *zi = z + i * classes;
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < classes; j++)
        if (zi[j] > mx) {
          mx = zi[j];
          arg = j;
        }
      double se = 0.0;
      for (int64_t j = 0; j < classes; j++)
        se += exp(zi[j] - mx);
      loss_ref += -(zi[lab[i]] - mx - log(se));
      correct_ref += arg == lab[i];
      for (int64_t j = 0; j < classes; j++) {
        gref[i * classes + j] = (exp(zi[j] - mx) / se - (j == lab[i])) / (double)n;
        gtol[i * classes + j] = 1e-6 / (double)n; /* float rounding of values in [-1, 1] / n */
      }
    }
    loss_ref /= (double)n;
    float *g[2];
    double loss[2];
    int64_t correct[2];
    for (int t = 0; t < 2; t++) {
      omp_set_num_threads(THREADS[t]);
      g[t] = ng_test_xmalloc((size_t)(n * classes) * 4);
      poison(g[t], n * classes);
      EXPECT_OK(be->iface->xent(be, z, lab, n, classes, g[t], &loss[t], &correct[t]));
    }
    expect_same_bytes("xent grad threads", g[0], g[1], (size_t)(n * classes) * 4, __LINE__);
    EXPECT_TRUE(loss[0] == loss[1]);
    EXPECT_EQ_I(correct[0], correct[1]);
    EXPECT_NEAR(loss[0], loss_ref, 1e-12 * (1.0 + fabs(loss_ref)));
    EXPECT_EQ_I(correct[0], correct_ref);
    expect_close("xent grad", g[0], gref, gtol, n * classes, __LINE__);
    /* in place: grad may be the logits */
    float *zz = dup_floats(z, n * classes);
    double l2;
    EXPECT_OK(be->iface->xent(be, zz, lab, n, classes, zz, &l2, NULL));
    expect_same_bytes("xent in place", zz, g[0], (size_t)(n * classes) * 4, __LINE__);
    free(zz);
    free(g[0]);
    free(g[1]);
    free(z);
    free(lab);
    free(gref);
    free(gtol);
  }
  /* arg-max ties go to the lowest class */
  float tie[] = {0.5f, 2.0f, -1.0f, 2.0f};
  int32_t lab1 = 1, lab3 = 3;
  double loss;
  int64_t correct = -1;
  EXPECT_OK(be->iface->xent(be, tie, &lab1, 1, 4, NULL, &loss, &correct));
  EXPECT_EQ_I(correct, 1);
  EXPECT_OK(be->iface->xent(be, tie, &lab3, 1, 4, NULL, &loss, &correct));
  EXPECT_EQ_I(correct, 0);
  /* no rows: zero loss */
  loss = -1.0;
  EXPECT_OK(be->iface->xent(be, NULL, NULL, 0, 4, NULL, &loss, &correct));
  EXPECT_TRUE(loss == 0.0 && correct == 0);
  /* labels out of range */
  int32_t bad[] = {0, 4};
  float z2[8] = {0};
  EXPECT_STATUS(be->iface->xent(be, z2, bad, 2, 4, NULL, &loss, &correct), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("label 4 of row 1");
  bad[1] = -1;
  EXPECT_STATUS(be->iface->xent(be, z2, bad, 2, 4, NULL, &loss, &correct), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(be->iface->xent(be, z2, bad, 2, 0, NULL, &loss, &correct), NG_ERR_INVALID_ARG);
  omp_set_num_threads(2);
  ng__backend_destroy(be);
}

static void test_xent_guard(void) {
  ng_backend *be = make_backend(NULL);
  if (!be)
    return;
  ng_test_xent_guard(be);
  ng__backend_destroy(be);
}

/* Optimizers against a double-precision reference of the update rules over several steps. */
static void test_opt(void) {
  ng_backend *be = make_backend(NULL);
  ng_rng r;
  ng_rng_seed(&r, 61);
  const int64_t n = 70001;
  ng_opt_hp hps[] = {
      {.kind = NG_OPT_SGD, .lr = 0.1f},
      {.kind = NG_OPT_SGD, .lr = 0.05f, .weight_decay = 0.01f, .momentum = 0.9f},
      {.kind = NG_OPT_ADAM, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
      {.kind = NG_OPT_ADAM,
       .lr = 0.003f,
       .weight_decay = 5e-4f,
       .beta1 = 0.8f,
       .beta2 = 0.99f,
       .eps = 1e-6f},
  };
  for (size_t hi = 0; hi < NG_TEST_LEN(hps); hi++) {
    float *p0 = ng_test_rand_floats(&r, n);
    float *grads[3];
    for (int s = 0; s < 3; s++)
      grads[s] = ng_test_rand_floats(&r, n);
    float *p[2], *s1[2], *s2[2];
    for (int t = 0; t < 2; t++) {
      omp_set_num_threads(THREADS[t]);
      p[t] = dup_floats(p0, n);
      s1[t] = calloc((size_t)n, 4);
      s2[t] = calloc((size_t)n, 4);
      for (int s = 0; s < 3; s++) {
        ng_opt_hp h = hps[hi];
        h.step = s + 1;
        EXPECT_OK(be->iface->opt_step(be, &h, p[t], grads[s], s1[t], s2[t], n));
      }
    }
    expect_same_bytes("opt_step threads", p[0], p[1], (size_t)n * 4, __LINE__);
    const ng_opt_hp *h = &hps[hi];
    int64_t bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
      double w = p0[i], m = 0.0, v = 0.0;
      for (int s = 0; s < 3; s++) {
        double gr = grads[s][i] + (double)h->weight_decay * w;
        if (h->kind == NG_OPT_SGD) {
          if (h->momentum != 0.0f)
            gr = m = h->momentum * m + gr;
          w -= h->lr * gr;
        } else {
          m = h->beta1 * m + (1.0 - h->beta1) * gr;
          v = h->beta2 * v + (1.0 - h->beta2) * gr * gr;
          double mh = m / (1.0 - pow(h->beta1, s + 1)), vh = v / (1.0 - pow(h->beta2, s + 1));
          w -= h->lr * mh / (sqrt(vh) + h->eps);
        }
      }
      /* float steps of size up to lr: rounding of |w| and of each step, a few ulps each */
      double tol = 1e-6 * (fabs(w) + 3.0 * h->lr) + 1e-7;
      double err = fabs(p[0][i] - w);
      worst = NG_MAX(worst, err / tol);
      bad += !(err <= tol);
    }
    if (bad)
      ng_test_fail(__FILE__, __LINE__,
                   "optimizer %zu: %lld of %lld parameters off (worst %.2f x "
                   "tolerance)",
                   hi, (long long)bad, (long long)n, worst);
    for (int t = 0; t < 2; t++) {
      free(p[t]);
      free(s1[t]);
      free(s2[t]);
    }
    for (int s = 0; s < 3; s++)
      free(grads[s]);
    free(p0);
  }
  float w = 1.0f, gr = 1.0f;
  ng_opt_hp adam0 = {.kind = NG_OPT_ADAM, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .step = 0};
  EXPECT_STATUS(be->iface->opt_step(be, &adam0, &w, &gr, &w, &w, 1), NG_ERR_INVALID_ARG);
  ng_opt_hp mom = {.kind = NG_OPT_SGD, .lr = 0.1f, .momentum = 0.9f};
  EXPECT_STATUS(be->iface->opt_step(be, &mom, &w, &gr, NULL, NULL, 1), NG_ERR_INVALID_ARG);
  ng_opt_hp unknown = {.kind = (ng_optimizer_kind)5, .lr = 0.1f};
  EXPECT_STATUS(be->iface->opt_step(be, &unknown, &w, &gr, NULL, NULL, 1), NG_ERR_INVALID_ARG);
  /* The backend's optimizer kinds are the public ng_optimizer's values. */
  EXPECT_EQ_I(NG_OPT_ADAM, NG_OPTIMIZER_ADAM);
  EXPECT_EQ_I(NG_OPT_SGD, NG_OPTIMIZER_SGD);
  omp_set_num_threads(2);
  ng__backend_destroy(be);
}

/* ---- the checked front (core/backend_check.c) ---- */

/* Every op reaches the backend through the front, which names the op and the argument it
 * refuses, returns NG_OK for empty work whatever the pointers, and reads block offsets only
 * because this backend's memory is host memory. */
static void test_front_checks(void) {
  ng_backend *be = make_backend(NULL);
  const struct ng_backend_i *I = be->iface;
  EXPECT_TRUE(I != be->impl && I->destroy == be->impl->destroy);
  EXPECT_STATUS(I->gather_rows(be, NULL, NULL, NULL, 4, 8), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("gather_rows: dst is NULL");
  EXPECT_STATUS(I->copy_h2d_async(be, NULL, NULL, 0, NG_BACKEND_MARKS), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("copy_h2d_async: slot 4 is not in [0, 4)");
  EXPECT_STATUS(I->event_record(be, -1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("event_record: event -1");
  float v[4] = {1, 2, 3, 4};
  EXPECT_STATUS(I->gemm(be, false, false, 2, 2, 2, 1.0f, v, 1, v, 2, 0.0f, v, 2),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("gemm: leading dimensions lda 1");
  int32_t indptr[3] = {0, 1, 3}, idx[2] = {0, 1};
  ng_block b = {2, 2, 2, indptr, idx, NULL, NULL, NULL, NULL, NULL};
  ng_aggr sum = {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL};
  EXPECT_STATUS(I->aggr_fwd(be, &sum, &b, v, 1, v, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("aggr_fwd: block indptr runs from 0 to 3 but the block has 2 edges");
  /* Empty work succeeds with NULL pointers and touches nothing. */
  EXPECT_OK(I->copy_h2d(be, NULL, NULL, 0));
  EXPECT_OK(I->copy_h2d_async(be, NULL, NULL, 0, 1));
  EXPECT_OK(I->fill(be, NULL, 0, 1.0f));
  EXPECT_OK(I->add(be, NULL, NULL, 0));
  EXPECT_OK(I->gather_rows(be, NULL, NULL, NULL, 0, 8));
  EXPECT_OK(I->gemm(be, false, false, 0, 3, 2, 1.0f, NULL, 2, NULL, 3, 0.0f, NULL, 3));
  EXPECT_OK(I->bias_act_bwd(be, NULL, NULL, NULL, 5, 0, NG_ACT_RELU));
  EXPECT_OK(I->dropout_fwd(be, NULL, NULL, 0, 0.5f, 1));
  ng_opt_hp sgd = {NG_OPT_SGD, 0.1f, 0.0f, 0.9f, 0.0f, 0.0f, 0.0f, 1};
  EXPECT_OK(I->opt_step(be, &sgd, NULL, NULL, NULL, NULL, 0));
  ng__backend_destroy(be);
}

/* An optional op the backend lacks stays NULL in its front, so that callers can test for it;
 * name and host_memory are the backend's. */
static void test_front_optional_ops(void) {
  ng_backend *cpu = make_backend(NULL);
  struct ng_backend_i lacking = *cpu->impl;
  lacking.event_record = NULL;
  lacking.event_elapsed = NULL;
  lacking.set_precision = NULL;
  ng_backend be;
  ng__backend_init(&be, &lacking, cpu->ctx);
  EXPECT_TRUE(be.iface == &be.front && be.impl == &lacking);
  EXPECT_TRUE(!be.iface->event_record && !be.iface->event_elapsed && !be.iface->set_precision);
  EXPECT_STR(be.iface->name, "cpu");
  EXPECT_TRUE(be.iface->host_memory);
  EXPECT_TRUE(be.iface->fill && be.iface->fill != lacking.fill);
  EXPECT_STATUS(be.iface->fill(&be, NULL, 4, 0.0f), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("fill: x is NULL");
  float x[3];
  EXPECT_OK(be.iface->fill(&be, x, 3, 2.0f));
  EXPECT_TRUE(x[0] == 2.0f && x[2] == 2.0f);
  ng__backend_destroy(cpu);
}

/* bf16 rounding (core/bf16.h): to nearest with ties to even, against a reference that picks
 * the nearer of the two bf16 neighbours in double; specials; and every bf16 value (NaNs aside)
 * round-trips through fp32 unchanged. */
static uint16_t ref_bf16(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  const uint32_t lo = u & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;
  float flo, fhi;
  memcpy(&flo, &lo, 4);
  memcpy(&fhi, &hi, 4);
  if ((hi & 0x7f800000u) == 0x7f800000u && (hi & 0x007fffffu) == 0) /* hi is +-inf */
    fhi = (u >> 31) ? -INFINITY : INFINITY;
  /* The nearer one; at the mid point, the even one. Overflowing the largest finite value
   * beyond its half ulp goes to infinity, as IEEE rounding does. */
  const double dlo = fabs((double)f - (double)flo), dhi = fabs((double)fhi - (double)f);
  if (isinf(fhi)) {
    /* Beyond the largest bf16: the half-way point to 2^128 is lo + 0x8000 in the bits. */
    return (u & 0xffffu) > 0x8000u || ((u & 0xffffu) == 0x8000u && (lo & 0x10000u))
               ? (uint16_t)(hi >> 16)
               : (uint16_t)(lo >> 16);
  }
  if (dlo < dhi)
    return (uint16_t)(lo >> 16);
  if (dhi < dlo)
    return (uint16_t)(hi >> 16);
  return (lo & 0x10000u) ? (uint16_t)(hi >> 16) : (uint16_t)(lo >> 16);
}

static void test_bf16_rounding(void) {
  const struct {
    uint32_t f;
    uint16_t want;
  } cases[] = {
      {0x3f800000u, 0x3f80}, /* 1 */
      {0x3f808000u, 0x3f80}, /* 1 + 2^-8, a tie: to the even 1 */
      {0x3f818000u, 0x3f82}, /* a tie above an odd bf16: up */
      {0x3f808001u, 0x3f81}, /* just above the tie: up */
      {0x3f807fffu, 0x3f80}, /* just below: down */
      {0xbf808001u, 0xbf81}, /* negative values round their magnitude */
      {0x80000000u, 0x8000}, /* -0 */
      {0x00000001u, 0x0000}, /* the smallest subnormal */
      {0x7f800000u, 0x7f80}, /* inf */
      {0xff800000u, 0xff80}, /* -inf */
      {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to inf */
      {0x7f7f7fffu, 0x7f7f}, /* ... but not below its bf16 half ulp */
  };
  for (size_t i = 0; i < NG_TEST_LEN(cases); i++) {
    float f;
    memcpy(&f, &cases[i].f, 4);
    EXPECT_EQ_I(ng_f32_to_bf16(f), cases[i].want);
  }
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fffffffu};
  for (size_t i = 0; i < NG_TEST_LEN(nans); i++) {
    float f;
    memcpy(&f, &nans[i], 4);
    EXPECT_TRUE(isnan(ng_bf16_to_f32(ng_f32_to_bf16(f))));
  }
  int64_t bad = 0;
  for (uint32_t h = 0; h < 0x10000u; h++) {
    const float f = ng_bf16_to_f32((uint16_t)h);
    if (!isnan(f) && ng_f32_to_bf16(f) != h)
      bad++;
  }
  EXPECT_EQ_I(bad, 0);
  ng_rng r;
  ng_rng_seed(&r, 21);
  bad = 0;
  for (int i = 0; i < 1000000; i++) {
    const uint32_t u = (uint32_t)ng_rng_next(&r);
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f))
      continue;
    if (ng_f32_to_bf16(f) != ref_bf16(u) && bad++ < 3)
      ng_test_fail(__FILE__, __LINE__, "bf16 of bits 0x%08x: got 0x%04x, want 0x%04x", u,
                   ng_f32_to_bf16(f), ref_bf16(u));
  }
  EXPECT_EQ_I(bad, 0);
  /* The table conversion is the same rounding, whatever the threads. */
  float x[1000];
  uint16_t a[1000], b[1000];
  for (int i = 0; i < 1000; i++)
    x[i] = (float)(ng_rng_uniform(&r) * 200.0 - 100.0);
  ng__bf16_convert(a, x, 1000, 1);
  ng__bf16_convert(b, x, 1000, 3);
  for (int i = 0; i < 1000; i++)
    if (a[i] != ng_f32_to_bf16(x[i]) || b[i] != a[i]) {
      ng_test_fail(__FILE__, __LINE__, "ng__bf16_convert: value %d differs", i);
      break;
    }
}

/* The bf16-table ops give, bit for bit, the fp32 ops' results on the converted table, for
 * every aggregator, with and without input dropout, in every kernel variant and thread count
 * (their contract in backend_impl.h, on which every mode's bit-identity rests). */
static void test_bf16_ops(void) {
  ng_cpu_isa isas[NG_CPU_ISA_COUNT_];
  ng_backend *bes[NG_CPU_ISA_COUNT_];
  int n_isa = make_backends(bes, isas);
  ng_rng r;
  ng_rng_seed(&r, 17);
  const float drops[] = {0.0f, 0.3f};
  for (size_t si = 0; si < NG_TEST_LEN(SHAPES); si++) {
    ng_test_block tb;
    tblock_make(&tb, &r, &SHAPES[si]);
    const ng_block *b = &tb.b;
    const int32_t nd = b->n_dst;
    for (size_t di = 0; di < NG_TEST_LEN(DIMS); di++) {
      const int64_t dim = DIMS[di], n = (int64_t)nd * dim, rows = (int64_t)b->n_src;
      float *x = ng_test_rand_floats(&r, rows * dim);
      uint16_t *x16 = ng_test_xmalloc((size_t)NG_MAX(rows * dim, 1) * 2);
      for (int64_t i = 0; i < rows * dim; i++) {
        x16[i] = ng_f32_to_bf16(x[i] * 3.0f);
        x[i] = ng_bf16_to_f32(x16[i]);
      }
      ng_pstate want = {ng_test_xmalloc((size_t)NG_MAX(n, 1) * 4),
                        ng_test_xmalloc((size_t)NG_MAX(nd, 1) * 4), nd, dim};
      ng_pstate got = {ng_test_xmalloc((size_t)NG_MAX(n, 1) * 4),
                       ng_test_xmalloc((size_t)NG_MAX(nd, 1) * 4), nd, dim};
      for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++)
        for (size_t k = 0; k < NG_TEST_LEN(drops); k++) {
          ng_aggr ag = AGGRS[ai].ag;
          ag.self_loop = false;
          ag.drop_p = drops[k];
          ag.drop_key = 99;
          char what[160];
          snprintf(what, sizeof what, "bf16 partial %s drop %g shape %zu dim %lld", AGGRS[ai].name,
                   (double)drops[k], si, (long long)dim);
          for (int i = 0; i < n_isa; i++)
            for (int t = 0; t < 2; t++) {
              omp_set_num_threads(THREADS[t]);
              ng_backend *be = bes[i];
              poison(want.val, n);
              poison(got.val, n);
              poison_i32(got.count, nd);
              EXPECT_OK(be->iface->aggr_partial(be, &ag, b, x, &want));
              EXPECT_OK(be->iface->aggr_partial_bf16(be, &ag, b, x16, &got));
              expect_same_bytes(what, got.val, want.val, (size_t)n * 4, __LINE__);
              expect_same_bytes(what, got.count, want.count, (size_t)nd * 4, __LINE__);
            }
        }
      /* scatter_rows: every source row to a shuffled position, with and without dropout. */
      if (rows > 0) {
        int64_t *ids = ng_test_xmalloc((size_t)rows * 8);
        int32_t *pos = ng_test_xmalloc((size_t)rows * 4);
        for (int64_t i = 0; i < rows; i++) {
          ids[i] = (int64_t)ng_rng_below(&r, (uint64_t)rows);
          pos[i] = (int32_t)i;
        }
        for (int64_t i = rows - 1; i > 0; i--) {
          int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)i + 1);
          int32_t tmp = pos[i];
          pos[i] = pos[j];
          pos[j] = tmp;
        }
        float *a = ng_test_xmalloc((size_t)(rows * dim) * 4);
        float *c = ng_test_xmalloc((size_t)(rows * dim) * 4);
        for (size_t k = 0; k < NG_TEST_LEN(drops); k++) {
          poison(a, rows * dim);
          poison(c, rows * dim);
          ng_backend *be = bes[0];
          EXPECT_OK(be->iface->scatter_rows(be, a, pos, x, ids, rows, dim, drops[k], 5));
          EXPECT_OK(be->iface->scatter_rows_bf16(be, c, pos, x16, ids, rows, dim, drops[k], 5));
          expect_same_bytes("bf16 scatter_rows", c, a, (size_t)(rows * dim) * 4, __LINE__);
        }
        free(a);
        free(c);
        free(ids);
        free(pos);
      }
      free(want.val);
      free(want.count);
      free(got.val);
      free(got.count);
      free(x);
      free(x16);
    }
    ng_test_block_free(&tb);
  }
  omp_set_num_threads(2);
  /* The front checks them like their fp32 twins. */
  ng_backend *be = bes[0];
  const uint16_t one = 0x3f80;
  const int64_t id0 = 0;
  EXPECT_STATUS(be->iface->scatter_rows_bf16(be, NULL, NULL, &one, &id0, 1, 1, 0.0f, 0),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("scatter_rows_bf16");
  destroy_backends(bes, n_isa);
}

int main(void) {
  RUN_TEST(test_isa_selection);
  RUN_TEST(test_memory);
  RUN_TEST(test_gather);
  RUN_TEST(test_aggr_fwd_bwd);
  RUN_TEST(test_aggr_max_duplicate_source);
  RUN_TEST(test_aggr_partial);
  RUN_TEST(test_stage_sum);
  RUN_TEST(test_aggr_errors);
  RUN_TEST(test_gemm);
  RUN_TEST(test_gemm_rows_independent);
  RUN_TEST(test_bias_act);
  RUN_TEST(test_dropout);
  RUN_TEST(test_xent);
  RUN_TEST(test_xent_guard);
  RUN_TEST(test_opt);
  RUN_TEST(test_front_checks);
  RUN_TEST(test_front_optional_ops);
  RUN_TEST(test_bf16_rounding);
  RUN_TEST(test_bf16_ops);
  return ng_test_summary();
}
