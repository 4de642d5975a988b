/* Parity of the CUDA backend with the CPU backend (the reference): every op runs on both with the
 * same random inputs (never all zero), outputs poisoned with NaN / -1 bytes before each op, over
 * several shapes (0 rows, empty rows, dims that are not multiples of 4, large fanout). Each CUDA
 * op also runs twice and must give the same bytes both times. Finite-difference gradient checks
 * then run on the CUDA backend for aggregation, GEMM, bias + activation and cross-entropy.
 *
 * Tolerances: fp32 results agree when |cpu - gpu| <= 1e-5 * S, where S is the sum of the
 * absolute values of the terms that make up the element (the op evaluated on |inputs|): a sum's
 * rounding error is bounded by its length times 2^-24 times S, and 1e-5 allows 160 terms' worth
 * of rounding differences, far below any wrong coefficient. Elementwise results use S = |cpu|.
 * Dropout masks, MAX/MIN winners (argbest), partial-state counts and correct-prediction counts
 * must be identical. Exits 77 (skipped) without CUDA or without a device. */
#include "bf16.h"
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"

#include <stdlib.h>

#ifndef NG_HAVE_CUDA

int main(void) {
  printf("gpu_parity: skipped: this build has no CUDA backend (configure with -DNG_CUDA=ON)\n");
  return 77;
}

#else

#include "ng_cuda.h"

static ng_backend *cpu, *gpu;

#define REL 1e-5

/* ---- device buffers ---- */

static void *dalloc(size_t bytes) {
  void *d = NULL;
  EXPECT_OK(gpu->iface->alloc(gpu, &d, bytes));
  return d;
}

static void *up(const void *h, size_t bytes) {
  void *d = dalloc(bytes);
  if (bytes)
    EXPECT_OK(gpu->iface->copy_h2d(gpu, d, h, bytes));
  return d;
}

static void down(void *h, const void *d, size_t bytes) {
  if (bytes)
    EXPECT_OK(gpu->iface->copy_d2h(gpu, h, d, bytes));
}

static void dfree(void *d) {
  gpu->iface->free(gpu, d);
}

/* A host buffer of 0xff bytes: NaN as floats, -1 as integers. */
static void *poison(size_t bytes) {
  void *p = ng_test_xmalloc(bytes);
  memset(p, 0xff, bytes);
  return p;
}

/* Overwrites a device buffer with poison. */
static void dpoison(void *d, size_t bytes) {
  if (!bytes)
    return;
  void *p = poison(bytes);
  EXPECT_OK(gpu->iface->copy_h2d(gpu, d, p, bytes));
  free(p);
}

static float *fabs_copy(const float *x, int64_t n) {
  float *y = ng_test_xmalloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++)
    y[i] = fabsf(x[i]);
  return y;
}

/* Floats in {+-0.25, +-0.5, +-0.75, +-1}: many ties, never zero. */
static float *tie_floats(ng_rng *r, int64_t n) {
  float *x = ng_test_xmalloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    float v = ceilf(fabsf(ng_test_frand(r)) * 4.0f) / 4.0f;
    x[i] = ng_rng_below(r, 2) ? v : -v;
  }
  return x;
}

/* ---- comparisons ---- */

/* |cpu - gpu| <= REL * scale[i] (scale NULL: |cpu|); NaN (poison left behind) always fails. */
static void cmp_near(const char *what, const float *c, const float *g, int64_t n,
                     const float *scale) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double s = scale ? fabs((double)scale[i]) : fabs((double)c[i]);
    if (!(fabs((double)c[i] - (double)g[i]) <= REL * s)) {
      if (bad++ < 3)
        ng_test_fail(__FILE__, __LINE__, "%s: element %lld: cpu %.9g, gpu %.9g (bound %.3g)", what,
                     (long long)i, (double)c[i], (double)g[i], REL * s);
    }
  }
  if (bad > 3)
    ng_test_fail(__FILE__, __LINE__, "%s: %lld of %lld elements differ", what, (long long)bad,
                 (long long)n);
}

static void cmp_bits(const char *what, const void *a, const void *b, size_t bytes) {
  if (bytes && memcmp(a, b, bytes) != 0) {
    size_t i = 0;
    while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i])
      i++;
    ng_test_fail(__FILE__, __LINE__, "%s: bytes differ (first at byte %zu of %zu)", what, i, bytes);
  }
}

/* ---- blocks ---- */

/* A random block: destination d has no neighbour when (d + empty_off) % 5 == 4, else 1 ..
 * max_deg; `repeats` allows repeated sources (large fanouts), `dup` forces one repeat. */
static void tblock_make(ng_test_block *tb, ng_rng *r, int32_t nd, int32_t ns, int32_t max_deg,
                        int32_t empty_off, bool repeats, bool dup) {
  tb->indptr = ng_test_xmalloc(((size_t)nd + 1) * 4);
  tb->indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++) {
    int32_t deg = (d + empty_off) % 5 == 4 ? 0 : 1 + (int32_t)ng_rng_below(r, (uint64_t)max_deg);
    tb->indptr[d + 1] = tb->indptr[d] + deg;
  }
  ng_test_block_fill(tb, r, nd, ns, repeats, dup);
}

/* A copy of a block on the device. */
typedef struct {
  ng_block b;
  void *p[7];
} dblock;

static void dblock_up(dblock *db, const ng_block *h) {
  size_t nnz = (size_t)h->nnz, nd = (size_t)h->n_dst, ns = (size_t)h->n_src;
  db->p[0] = up(h->indptr, (nd + 1) * 4);
  db->p[1] = up(h->indices, nnz * 4);
  db->p[2] = up(h->edge_w, nnz * 4);
  db->p[3] = up(h->self_w, nd * 4);
  db->p[4] = up(h->t_indptr, (ns + 1) * 4);
  db->p[5] = up(h->t_dst, nnz * 4);
  db->p[6] = up(h->t_eid, nnz * 4);
  db->b = *h;
  db->b.indptr = db->p[0];
  db->b.indices = db->p[1];
  db->b.edge_w = db->p[2];
  db->b.self_w = db->p[3];
  db->b.t_indptr = db->p[4];
  db->b.t_dst = db->p[5];
  db->b.t_eid = db->p[6];
}

static void dblock_free(dblock *db) {
  for (int i = 0; i < 7; i++)
    dfree(db->p[i]);
}

static const struct {
  const char *name;
  ng_aggr ag;
} AGGRS[] = {
    {"sum", {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL}},
    {"mean", {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL}},
    {"max", {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL}},
    {"min", {NG_REDUCE_MIN, false, false, false, 0.0f, 0, NULL}},
    {"gcn", {NG_REDUCE_SUM, true, true, false, 0.0f, 0, NULL}},
    {"weighted-mean+self", {NG_REDUCE_SUM, true, true, true, 0.0f, 0, NULL}},
};

/* ---- aggregation forward and backward ---- */

static void aggr_case(const char *bname, const ng_aggr *ag, const char *aname, ng_test_block *tb,
                      const dblock *db, int64_t dim, bool ties, ng_rng *r) {
  char what[160];
  const bool best = ag->reduce != NG_REDUCE_SUM;
  const int64_t ns = (int64_t)tb->b.n_src * dim, nd = (int64_t)tb->b.n_dst * dim;
  const size_t nsb = (size_t)ns * 4, ndb = (size_t)nd * 4;
  float *src = ties ? tie_floats(r, ns) : ng_test_rand_floats(r, ns);
  float *gdst = ng_test_rand_floats(r, nd);
  float *asrc = fabs_copy(src, ns), *agdst = fabs_copy(gdst, nd);
  float *out_c = poison(ndb), *scale = poison(ndb), *gsrc_c = poison(nsb), *gscale = poison(nsb);
  int32_t *arg_c = best ? poison(ndb) : NULL, *arg_abs = best ? poison(ndb) : NULL;
  EXPECT_OK(cpu->iface->aggr_fwd(cpu, ag, &tb->b, src, dim, out_c, arg_c));
  EXPECT_OK(cpu->iface->aggr_fwd(cpu, ag, &tb->b, asrc, dim, scale, arg_abs));
  EXPECT_OK(cpu->iface->aggr_bwd(cpu, ag, &tb->b, gdst, arg_c, dim, gsrc_c));
  /* The bound of a max/min backward: the same routing of |grad_dst|. */
  EXPECT_OK(cpu->iface->aggr_bwd(cpu, ag, &tb->b, agdst, arg_c, dim, gscale));
  if (best) /* a winner is one of the inputs: the bound is its own size */
    for (int64_t i = 0; i < nd; i++)
      scale[i] = out_c[i];

  float *d_src = up(src, nsb), *d_gdst = up(gdst, ndb);
  float *d_out = dalloc(ndb), *d_gsrc = dalloc(nsb);
  int32_t *d_arg = best ? dalloc(ndb) : NULL;
  float *out_g[2] = {poison(ndb), poison(ndb)}, *gsrc_g[2] = {poison(nsb), poison(nsb)};
  int32_t *arg_g[2] = {poison(ndb), poison(ndb)};
  for (int run = 0; run < 2; run++) {
    dpoison(d_out, ndb);
    dpoison(d_gsrc, nsb);
    if (best)
      dpoison(d_arg, ndb);
    EXPECT_OK(gpu->iface->aggr_fwd(gpu, ag, &db->b, d_src, dim, d_out, d_arg));
    EXPECT_OK(gpu->iface->aggr_bwd(gpu, ag, &db->b, d_gdst, d_arg, dim, d_gsrc));
    down(out_g[run], d_out, ndb);
    down(gsrc_g[run], d_gsrc, nsb);
    if (best)
      down(arg_g[run], d_arg, ndb);
  }
  snprintf(what, sizeof what, "aggr_fwd %s on %s dim %lld%s", aname, bname, (long long)dim,
           ties ? " (ties)" : "");
  cmp_near(what, out_c, out_g[0], nd, scale);
  cmp_bits(what, out_g[0], out_g[1], ndb);
  if (best) {
    cmp_bits(what, arg_c, arg_g[0], ndb);
    cmp_bits(what, arg_g[0], arg_g[1], ndb);
  }
  snprintf(what, sizeof what, "aggr_bwd %s on %s dim %lld%s", aname, bname, (long long)dim,
           ties ? " (ties)" : "");
  cmp_near(what, gsrc_c, gsrc_g[0], ns, gscale);
  cmp_bits(what, gsrc_g[0], gsrc_g[1], nsb);

  dfree(d_src);
  dfree(d_gdst);
  dfree(d_out);
  dfree(d_gsrc);
  dfree(d_arg);
  for (int run = 0; run < 2; run++) {
    free(out_g[run]);
    free(gsrc_g[run]);
    free(arg_g[run]);
  }
  free(src);
  free(gdst);
  free(asrc);
  free(agdst);
  free(out_c);
  free(scale);
  free(gsrc_c);
  free(gscale);
  free(arg_c);
  free(arg_abs);
}

static void test_aggr(void) {
  ng_rng r;
  ng_rng_seed(&r, 11);
  static const struct {
    const char *name;
    int32_t nd, ns, max_deg;
    bool repeats, dup;
  } blocks[] = {
      {"0 destinations", 0, 5, 1, false, false},
      {"small block", 12, 30, 6, false, false},
      {"block with a repeated edge", 12, 30, 6, false, true},
      {"medium block", 300, 900, 20, false, true},
      {"large fanout", 24, 3000, 1200, true, false},
  };
  const int64_t dims[] = {0, 1, 3, 4, 7, 16, 130, 256};
  for (size_t bi = 0; bi < NG_TEST_LEN(blocks); bi++) {
    ng_test_block tb;
    tblock_make(&tb, &r, blocks[bi].nd, blocks[bi].ns, blocks[bi].max_deg, 0, blocks[bi].repeats,
                blocks[bi].dup);
    dblock db;
    dblock_up(&db, &tb.b);
    for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
      if (blocks[bi].ns > 1000 && dims[di] > 16)
        continue; /* the large fanout at wide rows adds run time, not coverage */
      for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++)
        for (int ties = 0; ties < 2; ties++)
          if (!ties || AGGRS[ai].ag.reduce != NG_REDUCE_SUM)
            aggr_case(blocks[bi].name, &AGGRS[ai].ag, AGGRS[ai].name, &tb, &db, dims[di], ties, &r);
    }
    dblock_free(&db);
    ng_test_block_free(&tb);
  }
}

/* ---- partial states: partial over two blocks, merge, finalize ---- */

static void test_pstate(void) {
  ng_rng r;
  ng_rng_seed(&r, 22);
  const int32_t nd = 40, ns = 120;
  const int64_t dims[] = {5, 8};
  for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
    const int64_t dim = dims[di], n = (int64_t)nd * dim;
    const size_t vb = (size_t)n * 4, cb = (size_t)nd * 4;
    for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++) {
      const ng_aggr *ag = &AGGRS[ai].ag;
      const bool best = ag->reduce != NG_REDUCE_SUM;
      ng_test_block ta, tbb;
      /* Different empty rows in the two blocks exercise every merge case. */
      tblock_make(&ta, &r, nd, ns, 7, 0, false, false);
      tblock_make(&tbb, &r, nd, ns, 7, 2, false, false);
      dblock da, dbb;
      dblock_up(&da, &ta.b);
      dblock_up(&dbb, &tbb.b);
      float *src = best ? tie_floats(&r, (int64_t)ns * dim) : ng_test_rand_floats(&r, ns * dim);
      float *asrc = fabs_copy(src, (int64_t)ns * dim);
      /* CPU: the states, and the same steps on |src| for the bounds. */
      ng_pstate c1 = {poison(vb), poison(cb), nd, dim}, c2 = {poison(vb), poison(cb), nd, dim};
      ng_pstate s1 = {poison(vb), poison(cb), nd, dim}, s2 = {poison(vb), poison(cb), nd, dim};
      float *out_c = poison(vb), *scale = poison(vb);
      EXPECT_OK(cpu->iface->aggr_partial(cpu, ag, &ta.b, src, &c1));
      EXPECT_OK(cpu->iface->aggr_partial(cpu, ag, &tbb.b, src, &c2));
      EXPECT_OK(cpu->iface->aggr_partial(cpu, ag, &ta.b, asrc, &s1));
      EXPECT_OK(cpu->iface->aggr_partial(cpu, ag, &tbb.b, asrc, &s2));
      float *p1_c = ng_test_xmalloc(vb);
      memcpy(p1_c, c1.val, vb);
      float *p1_scale = ng_test_xmalloc(vb);
      memcpy(p1_scale, s1.val, vb);
      EXPECT_OK(cpu->iface->pstate_merge(cpu, ag, &c1, &c2));
      EXPECT_OK(cpu->iface->pstate_merge(cpu, ag, &s1, &s2));
      EXPECT_OK(cpu->iface->pstate_finalize(cpu, ag, &c1, out_c));
      EXPECT_OK(cpu->iface->pstate_finalize(cpu, ag, &s1, scale));
      if (best)
        for (int64_t i = 0; i < n; i++)
          scale[i] = out_c[i];

      float *d_src = up(src, (size_t)ns * dim * 4), *d_out = dalloc(vb);
      ng_pstate g1 = {dalloc(vb), dalloc(cb), nd, dim}, g2 = {dalloc(vb), dalloc(cb), nd, dim};
      float *p1_g[2] = {poison(vb), poison(vb)}, *m_g[2] = {poison(vb), poison(vb)};
      float *out_g[2] = {poison(vb), poison(vb)};
      int32_t *cnt_g[2] = {poison(cb), poison(cb)};
      for (int run = 0; run < 2; run++) {
        dpoison(g1.val, vb);
        dpoison(g1.count, cb);
        dpoison(g2.val, vb);
        dpoison(g2.count, cb);
        dpoison(d_out, vb);
        EXPECT_OK(gpu->iface->aggr_partial(gpu, ag, &da.b, d_src, &g1));
        EXPECT_OK(gpu->iface->aggr_partial(gpu, ag, &dbb.b, d_src, &g2));
        down(p1_g[run], g1.val, vb);
        EXPECT_OK(gpu->iface->pstate_merge(gpu, ag, &g1, &g2));
        EXPECT_OK(gpu->iface->pstate_finalize(gpu, ag, &g1, d_out));
        down(m_g[run], g1.val, vb);
        down(cnt_g[run], g1.count, cb);
        down(out_g[run], d_out, vb);
      }
      char what[128];
      snprintf(what, sizeof what, "aggr_partial %s dim %lld", AGGRS[ai].name, (long long)dim);
      /* Rows without neighbours hold 0 in a partial state on both backends (no poison left). */
      cmp_near(what, p1_c, p1_g[0], n, best ? p1_c : p1_scale);
      cmp_bits(what, p1_g[0], p1_g[1], vb);
      snprintf(what, sizeof what, "pstate_merge %s dim %lld", AGGRS[ai].name, (long long)dim);
      cmp_near(what, c1.val, m_g[0], n, best ? c1.val : s1.val);
      cmp_bits(what, c1.count, cnt_g[0], cb);
      cmp_bits(what, m_g[0], m_g[1], vb);
      cmp_bits(what, cnt_g[0], cnt_g[1], cb);
      snprintf(what, sizeof what, "pstate_finalize %s dim %lld", AGGRS[ai].name, (long long)dim);
      cmp_near(what, out_c, out_g[0], n, scale);
      cmp_bits(what, out_g[0], out_g[1], vb);

      for (int run = 0; run < 2; run++) {
        free(p1_g[run]);
        free(m_g[run]);
        free(out_g[run]);
        free(cnt_g[run]);
      }
      dfree(d_src);
      dfree(d_out);
      dfree(g1.val);
      dfree(g1.count);
      dfree(g2.val);
      dfree(g2.count);
      free(c1.val);
      free(c1.count);
      free(c2.val);
      free(c2.count);
      free(s1.val);
      free(s1.count);
      free(s2.val);
      free(s2.count);
      free(p1_c);
      free(p1_scale);
      free(out_c);
      free(scale);
      free(src);
      free(asrc);
      dblock_free(&da);
      dblock_free(&dbb);
      ng_test_block_free(&ta);
      ng_test_block_free(&tbb);
    }
  }
}

/* ---- the aggregation template's occupancy ----
 * Every built-in forward and partial state runs the gather-aggregate template
 * (gpu/agg_template.h). Its widest forward instance (1024-wide rows: V = 4, T = 8) reaches
 * HBM's rate only with two blocks of 256 threads resident an SM, as the hand-written kernels
 * it replaced had (sum 124 registers, max 128): at 164 registers the template ran W1's mean
 * 1.7% slower (docs/aggregators.md). Its kernels of several chunks a lane declare two blocks
 * (__launch_bounds__(256, 2); one chunk a lane is left unbounded), so ptxas keeps to 128 registers
 * by spilling if it must: every built-in instance, with and without input dropout, from bf16 rows
 * (sum, max, min) and with argbest (max, min), must keep two blocks and spill nothing (two rows
 * with their dropout keep bits spilled 50-300 bytes a thread, which is why the dropout instances of
 * wide rows load one row at a time). */
static void test_template_occupancy(void) {
  static const struct {
    const char *name;
    bool bf16, argbest;
  } inst[] = {{"sum", false, false}, {"mean", false, false}, {"max", false, false},
              {"min", false, false}, {"sum", true, false},   {"max", true, false},
              {"min", true, false},  {"max", false, true},   {"min", false, true}};
  for (size_t i = 0; i < NG_TEST_LEN(inst); i++)
    for (int drop = 0; drop < (inst[i].argbest ? 1 : 2); drop++) {
      int blocks = 0, regs = 0, spill = -1;
      EXPECT_OK(ng__cuda_template_occupancy(inst[i].name, inst[i].bf16, drop, inst[i].argbest,
                                            &blocks, &regs, &spill));
      if (blocks < 2 || spill != 0)
        ng_test_fail(__FILE__, __LINE__,
                     "template %s%s%s%s: %d block(s) of 256 threads an SM (%d registers a "
                     "thread), %d bytes of spills a thread; two blocks and no spill expected",
                     inst[i].name, inst[i].bf16 ? " bf16" : "", drop ? " dropout" : "",
                     inst[i].argbest ? " argbest" : "", blocks, regs, spill);
    }
  int blocks = 0, regs = 0, spill = 0;
  EXPECT_STATUS(ng__cuda_template_occupancy("mean", true, false, false, &blocks, &regs, &spill),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("bf16");
  EXPECT_STATUS(ng__cuda_template_occupancy("sum", false, false, true, &blocks, &regs, &spill),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("argbest");
  EXPECT_STATUS(ng__cuda_template_occupancy("max", false, true, true, &blocks, &regs, &spill),
                NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("dropout");
}

/* ---- bf16 tables (NG_PRECISION_BF16) ----
 * aggr_partial_bf16 and scatter_rows_bf16 give, bit for bit, the CUDA fp32 ops' results on the
 * converted table (every mode's bit-identity within bf16 rests on it), with and without input
 * dropout, from device memory and (scatter) from registered host memory read by zero-copy; and
 * they agree with the CPU backend's bf16 ops like the fp32 ops do. */
static void test_bf16(void) {
  ng_rng r;
  ng_rng_seed(&r, 44);
  const int32_t nd = 40, ns = 120;
  const int64_t dims[] = {5, 8, 130};
  const float drops[] = {0.0f, 0.3f};
  for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
    const int64_t dim = dims[di], n = (int64_t)nd * dim, tn = (int64_t)ns * dim;
    const size_t vb = (size_t)n * 4, cb = (size_t)nd * 4;
    float *x = ng_test_rand_floats(&r, tn);
    uint16_t *x16 = ng_test_xmalloc((size_t)tn * 2);
    for (int64_t i = 0; i < tn; i++) {
      x16[i] = ng_f32_to_bf16(x[i]);
      x[i] = ng_bf16_to_f32(x16[i]);
    }
    float *ax = fabs_copy(x, tn);
    float *d_x = up(x, (size_t)tn * 4);
    uint16_t *d_x16 = up(x16, (size_t)tn * 2);
    for (size_t ai = 0; ai < NG_TEST_LEN(AGGRS); ai++)
      for (size_t k = 0; k < NG_TEST_LEN(drops); k++) {
        ng_aggr ag = AGGRS[ai].ag;
        ag.self_loop = false;
        ag.drop_p = drops[k];
        ag.drop_key = 3;
        ng_test_block tb;
        tblock_make(&tb, &r, nd, ns, 7, 0, false, false);
        dblock db;
        dblock_up(&db, &tb.b);
        ng_pstate c = {poison(vb), poison(cb), nd, dim}, sc = {poison(vb), poison(cb), nd, dim};
        EXPECT_OK(cpu->iface->aggr_partial_bf16(cpu, &ag, &tb.b, x16, &c));
        EXPECT_OK(cpu->iface->aggr_partial(cpu, &ag, &tb.b, ax, &sc));
        ng_pstate g32 = {dalloc(vb), dalloc(cb), nd, dim}, g16 = {dalloc(vb), dalloc(cb), nd, dim};
        float *h32 = poison(vb), *h16 = poison(vb);
        int32_t *n16 = poison(cb);
        dpoison(g32.val, vb);
        dpoison(g16.val, vb);
        EXPECT_OK(gpu->iface->aggr_partial(gpu, &ag, &db.b, d_x, &g32));
        EXPECT_OK(gpu->iface->aggr_partial_bf16(gpu, &ag, &db.b, d_x16, &g16));
        down(h32, g32.val, vb);
        down(h16, g16.val, vb);
        down(n16, g16.count, cb);
        char what[128];
        snprintf(what, sizeof what, "aggr_partial_bf16 %s drop %g dim %lld", AGGRS[ai].name,
                 (double)drops[k], (long long)dim);
        cmp_bits(what, h32, h16, vb);
        cmp_bits(what, c.count, n16, cb);
        cmp_near(what, c.val, h16, n, ag.reduce == NG_REDUCE_SUM ? sc.val : c.val);
        free(h32);
        free(h16);
        free(n16);
        free(c.val);
        free(c.count);
        free(sc.val);
        free(sc.count);
        dfree(g32.val);
        dfree(g32.count);
        dfree(g16.val);
        dfree(g16.count);
        dblock_free(&db);
        ng_test_block_free(&tb);
      }
    /* scatter_rows_bf16: rows to shuffled positions, from device memory and by zero-copy. */
    uint16_t *pinned = ng_test_xmalloc((size_t)tn * 2);
    memcpy(pinned, x16, (size_t)tn * 2);
    EXPECT_OK(ng__cuda_host_register(pinned, (size_t)tn * 2, false));
    const void *view = NULL;
    EXPECT_OK(gpu->iface->host_view(gpu, pinned, &view));
    int64_t *ids = ng_test_xmalloc((size_t)ns * 8);
    int32_t *pos = ng_test_xmalloc((size_t)ns * 4);
    for (int32_t i = 0; i < ns; i++) {
      ids[i] = (int64_t)ng_rng_below(&r, (uint64_t)ns);
      pos[i] = (i * 7) % ns; /* 7 and 120 are coprime: a permutation */
    }
    int64_t *d_ids = up(ids, (size_t)ns * 8);
    int32_t *d_pos = up(pos, (size_t)ns * 4);
    const size_t ob = (size_t)tn * 4;
    float *d_out = dalloc(ob);
    for (size_t k = 0; k < NG_TEST_LEN(drops); k++) {
      float *want = poison(ob), *got = poison(ob);
      EXPECT_OK(cpu->iface->scatter_rows_bf16(cpu, want, pos, x16, ids, ns, dim, drops[k], 9));
      for (int src = 0; src < 2; src++) {
        dpoison(d_out, ob);
        EXPECT_OK(gpu->iface->scatter_rows_bf16(gpu, d_out, d_pos, src ? view : d_x16, d_ids, ns,
                                                dim, drops[k], 9));
        down(got, d_out, ob);
        char what[128];
        snprintf(what, sizeof what, "scatter_rows_bf16 drop %g dim %lld (%s)", (double)drops[k],
                 (long long)dim, src ? "zero-copy" : "device table");
        cmp_bits(what, want, got, ob);
      }
      free(want);
      free(got);
    }
    EXPECT_OK(ng__cuda_host_unregister(pinned));
    free(pinned);
    dfree(d_out);
    dfree(d_ids);
    dfree(d_pos);
    free(ids);
    free(pos);
    dfree(d_x);
    dfree(d_x16);
    free(x);
    free(x16);
    free(ax);
  }
}

/* ---- gathers ---- */

static void gather_case(const char *what, const float *table, const float *d_table, int64_t rows,
                        int64_t n, int64_t dim, ng_rng *r) {
  int64_t *ids = ng_test_xmalloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++)
    ids[i] = (int64_t)ng_rng_below(r, (uint64_t)rows);
  const size_t ob = (size_t)(n * dim) * 4;
  float *out_c = poison(ob), *out_g[2] = {poison(ob), poison(ob)};
  EXPECT_OK(cpu->iface->gather_rows(cpu, out_c, table, ids, n, dim));
  int64_t *d_ids = up(ids, (size_t)n * 8);
  float *d_out = dalloc(ob);
  for (int run = 0; run < 2; run++) {
    dpoison(d_out, ob);
    EXPECT_OK(gpu->iface->gather_rows(gpu, d_out, d_table, d_ids, n, dim));
    down(out_g[run], d_out, ob);
  }
  cmp_bits(what, out_c, out_g[0], ob);
  cmp_bits(what, out_g[0], out_g[1], ob);
  dfree(d_ids);
  dfree(d_out);
  free(out_c);
  free(out_g[0]);
  free(out_g[1]);
  free(ids);
}

static void test_gather(void) {
  ng_rng r;
  ng_rng_seed(&r, 33);
  const int64_t dims[] = {1, 4, 7, 128, 130};
  const int64_t ns[] = {0, 1, 500};
  const int64_t rows = 1000;
  for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
    const int64_t dim = dims[di];
    const size_t tb = (size_t)(rows * dim) * 4;
    float *table = ng_test_rand_floats(&r, rows * dim);
    float *d_table = up(table, tb);
    /* The same table in registered host memory: the kernel reads it over the bus. */
    float *pinned = ng_test_xmalloc(tb);
    memcpy(pinned, table, tb);
    EXPECT_OK(ng__cuda_host_register(pinned, tb, false));
    for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++) {
      char what[96];
      snprintf(what, sizeof what, "gather_rows n %lld dim %lld (device table)", (long long)ns[ni],
               (long long)dim);
      gather_case(what, table, d_table, rows, ns[ni], dim, &r);
      snprintf(what, sizeof what, "gather_rows n %lld dim %lld (registered host table)",
               (long long)ns[ni], (long long)dim);
      gather_case(what, table, pinned, rows, ns[ni], dim, &r);
    }
    EXPECT_OK(ng__cuda_host_unregister(pinned));
    free(pinned);
    dfree(d_table);
    free(table);
  }
}

/* ---- GEMM ---- */

static void test_gemm(void) {
  ng_rng r;
  ng_rng_seed(&r, 44);
  static const struct {
    int64_t m, n, k, pad;
    float alpha, beta;
  } shapes[] = {
      {0, 5, 3, 0, 1.0f, 0.0f},     {5, 0, 3, 0, 1.0f, 0.0f},       {4, 5, 0, 0, 1.0f, 0.0f},
      {4, 5, 0, 1, 1.0f, 0.5f},     {1, 1, 1, 0, 0.8f, 0.0f},       {7, 9, 13, 0, 0.8f, 0.0f},
      {7, 9, 13, 3, 1.0f, 0.7f},    {64, 33, 130, 0, 1.0f, 0.0f},   {300, 17, 1000, 0, 1.0f, 1.0f},
      {17, 300, 64, 5, 0.5f, 0.0f}, {128, 128, 128, 0, 1.0f, 0.0f},
  };
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
    for (int tr = 0; tr < 4; tr++) {
      const bool ta = tr & 1, tbt = tr & 2;
      const int64_t m = shapes[si].m, n = shapes[si].n, k = shapes[si].k, pad = shapes[si].pad;
      const float alpha = shapes[si].alpha, beta = shapes[si].beta;
      const int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tbt ? n : k,
                    bcols = tbt ? k : n;
      const int64_t lda = NG_MAX(acols, (int64_t)1) + pad, ldb = NG_MAX(bcols, (int64_t)1) + pad;
      const int64_t ldc = NG_MAX(n, (int64_t)1) + pad;
      const int64_t na = arows * lda, nb = brows * ldb, nc = m * ldc;
      float *a = ng_test_rand_floats(&r, NG_MAX(na, (int64_t)1));
      float *b = ng_test_rand_floats(&r, NG_MAX(nb, (int64_t)1));
      float *c0 = ng_test_rand_floats(&r, NG_MAX(nc, (int64_t)1));
      float *aa = fabs_copy(a, na), *ab = fabs_copy(b, nb), *scale = fabs_copy(c0, nc);
      float *c_c = ng_test_xmalloc((size_t)NG_MAX(nc, (int64_t)1) * 4);
      memcpy(c_c, c0, (size_t)nc * 4);
      if (beta == 0.0f) /* beta == 0 must not read C: poison it */
        memset(c_c, 0xff, (size_t)nc * 4);
      EXPECT_OK(cpu->iface->gemm(cpu, ta, tbt, m, n, k, alpha, a, lda, b, ldb, beta, c_c, ldc));
      EXPECT_OK(cpu->iface->gemm(cpu, ta, tbt, m, n, k, fabsf(alpha), aa, lda, ab, ldb, fabsf(beta),
                                 scale, ldc));
      float *d_a = up(a, (size_t)na * 4), *d_b = up(b, (size_t)nb * 4);
      float *d_c = dalloc((size_t)nc * 4);
      float *c_g[2] = {ng_test_xmalloc((size_t)nc * 4 + 4), ng_test_xmalloc((size_t)nc * 4 + 4)};
      for (int run = 0; run < 2; run++) {
        if (beta == 0.0f)
          dpoison(d_c, (size_t)nc * 4);
        else if (nc)
          EXPECT_OK(gpu->iface->copy_h2d(gpu, d_c, c0, (size_t)nc * 4));
        EXPECT_OK(
            gpu->iface->gemm(gpu, ta, tbt, m, n, k, alpha, d_a, lda, d_b, ldb, beta, d_c, ldc));
        down(c_g[run], d_c, (size_t)nc * 4);
      }
      /* Padding columns of C are never written: compare the m x n part only. */
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = n; j < ldc; j++)
          c_c[i * ldc + j] = c_g[0][i * ldc + j] = c_g[1][i * ldc + j] = 1.0f;
      char what[96];
      snprintf(what, sizeof what, "gemm %c%c m %lld n %lld k %lld ld+%lld beta %g", ta ? 'T' : 'N',
               tbt ? 'T' : 'N', (long long)m, (long long)n, (long long)k, (long long)pad,
               (double)beta);
      if (m && n)
        cmp_near(what, c_c, c_g[0], nc, scale);
      cmp_bits(what, c_g[0], c_g[1], (size_t)nc * 4);
      dfree(d_a);
      dfree(d_b);
      dfree(d_c);
      free(c_g[0]);
      free(c_g[1]);
      free(a);
      free(b);
      free(c0);
      free(aa);
      free(ab);
      free(scale);
      free(c_c);
    }
  }
}

/* gemm_bias_act (a layer's forward product with the bias and ReLU in the GEMM's epilogue, or
 * two passes below cuBLASLt's row threshold): against the CPU's gemm followed by the bias and
 * the activation, within the GEMM's tolerance
 * (the bias's magnitude added), on padded and offset (4-byte aligned) operands, beta 0 and 1,
 * with and without a bias, for both activations and every transpose; the same bits run to run;
 * the padding of C untouched. */
static void test_gemm_bias_act(void) {
  if (!gpu->iface->gemm_bias_act)
    return;
  ng_rng r;
  ng_rng_seed(&r, 47);
  static const struct {
    int64_t m, n, k, pad, off, bias_off;
    float beta;
  } shapes[] = {
      {0, 5, 3, 0, 0, 0, 0.0f},
      {4, 5, 0, 1, 0, 0, 1.0f},
      {1, 1, 1, 0, 0, 0, 0.0f},
      {7, 9, 13, 3, 1, 0, 0.0f},
      {64, 33, 130, 0, 0, 0, 1.0f},
      {300, 128, 128, 128, 0, 0, 0.0f},
      {300, 128, 128, 128, 0, 0, 1.0f},
      {257, 36, 70, 4, 1, 0, 0.0f},
      {1024, 16, 256, 16, 0, 0, 0.0f},
      /* From 65536 rows the epilogue runs in cuBLASLt (backend_cuda_dense.cu, kLtMinRows);
       * 70001 rows reuse the algorithm chosen for 66000's class (131072 rows). */
      {66000, 40, 24, 8, 1, 0, 0.0f},
      {70001, 40, 24, 8, 1, 0, 0.0f},
      {66000, 40, 24, 8, 1, 0, 1.0f},
      {66000, 128, 128, 128, 0, 0, 0.0f},
      {66000, 40, 24, 8, 0, 0, 1.0f},
      /* The operands 16-byte aligned, the bias not: two passes (cuBLASLt's kernels may load the
       * bias 16 bytes at a time). */
      {66000, 40, 24, 8, 0, 1, 0.0f},
  };
  for (size_t si = 0; si < NG_TEST_LEN(shapes); si++)
    for (int tr = 0; tr < 4; tr++)
      for (int act = NG_ACT_NONE; act <= NG_ACT_RELU; act++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
          const bool ta = tr & 1, tbt = tr & 2;
          const int64_t m = shapes[si].m, n = shapes[si].n, k = shapes[si].k;
          const int64_t pad = shapes[si].pad, off = shapes[si].off, boff = shapes[si].bias_off;
          const float beta = shapes[si].beta;
          const int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tbt ? n : k,
                        bcols = tbt ? k : n;
          const int64_t lda = NG_MAX(acols, (int64_t)1) + pad;
          const int64_t ldb = NG_MAX(bcols, (int64_t)1) + pad, ldc = NG_MAX(n, (int64_t)1) + pad;
          const int64_t na = arows * lda + off, nb = brows * ldb + off, nc = m * ldc + off;
          float *a = ng_test_rand_floats(&r, NG_MAX(na, (int64_t)1));
          float *b = ng_test_rand_floats(&r, NG_MAX(nb, (int64_t)1));
          float *c0 = ng_test_rand_floats(&r, NG_MAX(nc, (int64_t)1));
          float *bias = ng_test_rand_floats(&r, NG_MAX(n, (int64_t)1) + off + boff);
          float *aa = fabs_copy(a, na), *ab = fabs_copy(b, nb), *scale = fabs_copy(c0, nc);
          float *c_c = ng_test_xmalloc((size_t)NG_MAX(nc, (int64_t)1) * 4);
          memcpy(c_c, c0, (size_t)nc * 4);
          EXPECT_OK(cpu->iface->gemm(cpu, ta, tbt, m, n, k, 1.0f, a + off, lda, b + off, ldb, beta,
                                     c_c + off, ldc));
          EXPECT_OK(cpu->iface->gemm(cpu, ta, tbt, m, n, k, 1.0f, aa + off, lda, ab + off, ldb,
                                     fabsf(beta), scale + off, ldc));
          for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
              float *v = &c_c[off + i * ldc + j];
              if (with_bias) {
                *v += bias[off + boff + j];
                scale[off + i * ldc + j] += fabsf(bias[off + boff + j]);
              }
              if (act == NG_ACT_RELU && *v < 0.0f)
                *v = 0.0f;
            }
          float *d_a = up(a, (size_t)na * 4), *d_b = up(b, (size_t)nb * 4);
          float *d_bias = up(bias, (size_t)(NG_MAX(n, (int64_t)1) + off + boff) * 4);
          float *d_c = dalloc((size_t)NG_MAX(nc, (int64_t)1) * 4);
          float *c_g[2] = {ng_test_xmalloc((size_t)nc * 4 + 4),
                           ng_test_xmalloc((size_t)nc * 4 + 4)};
          /* From 65536 rows an epilogue may take cuBLASLt unless its bias is less than 16-byte
           * aligned (then never); on 16-byte aligned operands, the untransposed product the
           * layers make must (others may find no algorithm for their alignments). */
          const bool epi = with_bias || act == NG_ACT_RELU;
          const bool bias_ok = !with_bias || (off + boff) % 4 == 0;
          const bool may_lt = epi && m >= 65536 && bias_ok;
          const bool must_lt = may_lt && off == 0 && !ta && !tbt;
          char what[128];
          snprintf(what, sizeof what,
                   "gemm_bias_act %c%c m %lld n %lld k %lld ld+%lld off %lld/%lld beta %g %s%s",
                   ta ? 'T' : 'N', tbt ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
                   (long long)pad, (long long)off, (long long)boff, (double)beta,
                   act ? "relu" : "none", with_bias ? " bias" : "");
          for (int run = 0; run < 2; run++) {
            if (nc)
              EXPECT_OK(gpu->iface->copy_h2d(gpu, d_c, c0, (size_t)nc * 4));
            if (beta == 0.0f) /* beta == 0 must not read C: poison what it computes */
              for (int64_t i = 0; i < m && n; i++)
                dpoison(d_c + off + i * ldc, (size_t)n * 4);
            const int64_t before = ng__cuda_lt_products();
            EXPECT_OK(gpu->iface->gemm_bias_act(
                gpu, ta, tbt, m, n, k, d_a + off, lda, d_b + off, ldb, beta, d_c + off, ldc,
                with_bias ? d_bias + off + boff : NULL, (ng_activation)act));
            const int64_t took = ng__cuda_lt_products() - before;
            if (!(must_lt ? took == 1 : may_lt ? took <= 1 : took == 0))
              ng_test_fail(__FILE__, __LINE__, "%s: %lld products through cuBLASLt (%s)", what,
                           (long long)took,
                           must_lt  ? "must be 1"
                           : may_lt ? "may be 1"
                                    : "must be 0");
            down(c_g[run], d_c, (size_t)nc * 4);
          }
          /* C's padding and what lies before it stay as they were. */
          for (int64_t i = 0; i < nc; i++) {
            const int64_t col = (i - off) % ldc;
            if (i < off || col >= n)
              EXPECT_TRUE(memcmp(&c_g[0][i], &c0[i], 4) == 0);
          }
          if (m && n)
            cmp_near(what, c_c, c_g[0], nc, scale);
          cmp_bits(what, c_g[0], c_g[1], (size_t)nc * 4);
          dfree(d_a);
          dfree(d_b);
          dfree(d_c);
          dfree(d_bias);
          free(c_g[0]);
          free(c_g[1]);
          free(a);
          free(b);
          free(c0);
          free(bias);
          free(aa);
          free(ab);
          free(scale);
          free(c_c);
        }
}

/* The CUDA backend replays a GEMM call it has seen before (same pointers, shape and scalars) as
 * a CUDA graph: a replay must read the buffers' current contents, give the bits of the plain
 * call, be the graph of its own call when calls differ in one argument, and stay right when
 * more calls than the cache holds (64) come and go. */
static void test_gemm_replay(void) {
  ng_rng r;
  ng_rng_seed(&r, 45);
  const int64_t m = 100, n = 33, k = 130, calls = 70;
  const size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
  float *d_a = dalloc(na * 4), *d_b = dalloc(nb * 4), *d_c = dalloc(nc * 4 * (size_t)calls);
  float *first = ng_test_xmalloc(nc * 4), *got = ng_test_xmalloc(nc * 4);
  float *c_c = ng_test_xmalloc(nc * 4);
  float *a0 = ng_test_rand_floats(&r, (int64_t)na), *b0 = ng_test_rand_floats(&r, (int64_t)nb);
  float *aa = fabs_copy(a0, (int64_t)na), *ab = fabs_copy(b0, (int64_t)nb);
  float *scale = ng_test_xmalloc(nc * 4);
  EXPECT_OK(cpu->iface->gemm(cpu, false, false, m, n, k, 1.0f, aa, k, ab, n, 0.0f, scale, n));
  for (int rep = 0; rep < 5; rep++) {
    /* New data in the same buffers each time; rep 4 repeats rep 0's data. */
    float *a = rep % 4 ? ng_test_rand_floats(&r, (int64_t)na) : a0;
    float *b = rep % 4 ? ng_test_rand_floats(&r, (int64_t)nb) : b0;
    EXPECT_OK(gpu->iface->copy_h2d(gpu, d_a, a, na * 4));
    EXPECT_OK(gpu->iface->copy_h2d(gpu, d_b, b, nb * 4));
    dpoison(d_c, nc * 4);
    EXPECT_OK(gpu->iface->gemm(gpu, false, false, m, n, k, 1.0f, d_a, k, d_b, n, 0.0f, d_c, n));
    down(got, d_c, nc * 4);
    EXPECT_OK(cpu->iface->gemm(cpu, false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c_c, n));
    char what[64];
    snprintf(what, sizeof what, "gemm replay %d", rep);
    if (rep % 4) { /* the scale of rep 0's data bounds the others' within a factor */
      float *sa = fabs_copy(a, (int64_t)na), *sb = fabs_copy(b, (int64_t)nb);
      float *sc = ng_test_xmalloc(nc * 4);
      EXPECT_OK(cpu->iface->gemm(cpu, false, false, m, n, k, 1.0f, sa, k, sb, n, 0.0f, sc, n));
      cmp_near(what, c_c, got, (int64_t)nc, sc);
      free(sa);
      free(sb);
      free(sc);
      free(a);
      free(b);
    } else {
      cmp_near(what, c_c, got, (int64_t)nc, scale);
    }
    if (rep == 0)
      memcpy(first, got, nc * 4);
    if (rep == 4) /* the plain call (rep 0) and the graph's replay give the same bits */
      cmp_bits(what, first, got, nc * 4);
  }
  /* More distinct calls than the cache holds, each made twice (captured), then all again: every
   * product lands in its own output, right. */
  EXPECT_OK(gpu->iface->copy_h2d(gpu, d_a, a0, na * 4));
  EXPECT_OK(gpu->iface->copy_h2d(gpu, d_b, b0, nb * 4));
  for (int pass = 0; pass < 3; pass++) {
    dpoison(d_c, nc * 4 * (size_t)calls);
    for (int64_t i = 0; i < calls; i++)
      for (int twice = 0; twice < 2; twice++) /* the second is captured, evicting a graph */
        EXPECT_OK(gpu->iface->gemm(gpu, false, false, m, n, k, 1.0f, d_a, k, d_b, n, 0.0f,
                                   d_c + i * (int64_t)nc, n));
    for (int64_t i = 0; i < calls; i += 23) {
      down(got, d_c + i * (int64_t)nc, nc * 4);
      cmp_bits("gemm replay, many calls", first, got, nc * 4);
    }
  }
  /* Calls that differ in one argument each, all writing the same C, in rounds: a replay must
   * be the call's own graph. Small integers make every product exact, so the CPU's bits are
   * the GPU's. */
  enum { D = 64 };
  static const struct {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int a, b; /* which A and B buffer */
  } v[] = {
      {false, false, 32, 16, 64, 1.0f, 0.0f, 0, 0}, {true, false, 32, 16, 64, 1.0f, 0.0f, 0, 0},
      {false, true, 32, 16, 64, 1.0f, 0.0f, 0, 0},  {false, false, 16, 32, 64, 1.0f, 0.0f, 0, 0},
      {false, false, 32, 16, 48, 1.0f, 0.0f, 0, 0}, {false, false, 32, 16, 64, 0.5f, 0.0f, 0, 0},
      {false, false, 32, 16, 64, 1.0f, 0.5f, 0, 0}, {false, false, 32, 16, 64, 1.0f, 0.0f, 1, 0},
      {false, false, 32, 16, 64, 1.0f, 0.0f, 0, 1},
  };
  float *ha[2], *hb[2], *da[2], *db[2];
  float *hc0 = ng_test_xmalloc(D * D * 4), *hc = ng_test_xmalloc(D * D * 4);
  float *gc = ng_test_xmalloc(D * D * 4);
  for (int i = 0; i < D * D; i++)
    hc0[i] = (float)(i % 5) - 2.0f;
  for (int j = 0; j < 2; j++) {
    ha[j] = ng_test_xmalloc(D * D * 4);
    hb[j] = ng_test_xmalloc(D * D * 4);
    for (int i = 0; i < D * D; i++) {
      ha[j][i] = (float)((i * 7 + j * 3) % 5) - 2.0f;
      hb[j][i] = (float)((i * 3 + j * 5) % 5) - 2.0f;
    }
    da[j] = up(ha[j], D * D * 4);
    db[j] = up(hb[j], D * D * 4);
  }
  float *dc = dalloc(D * D * 4);
  for (int round = 0; round < 3; round++)
    for (size_t i = 0; i < NG_TEST_LEN(v); i++) {
      memcpy(hc, hc0, D * D * 4);
      EXPECT_OK(gpu->iface->copy_h2d(gpu, dc, hc0, D * D * 4));
      EXPECT_OK(cpu->iface->gemm(cpu, v[i].ta, v[i].tb, v[i].m, v[i].n, v[i].k, v[i].alpha,
                                 ha[v[i].a], D, hb[v[i].b], D, v[i].beta, hc, D));
      EXPECT_OK(gpu->iface->gemm(gpu, v[i].ta, v[i].tb, v[i].m, v[i].n, v[i].k, v[i].alpha,
                                 da[v[i].a], D, db[v[i].b], D, v[i].beta, dc, D));
      down(gc, dc, D * D * 4);
      char what[64];
      snprintf(what, sizeof what, "gemm replay, variant %zu, round %d", i, round);
      cmp_bits(what, hc, gc, D * D * 4);
    }
  for (int j = 0; j < 2; j++) {
    free(ha[j]);
    free(hb[j]);
    dfree(da[j]);
    dfree(db[j]);
  }
  free(hc0);
  free(hc);
  free(gc);
  dfree(dc);
  dfree(d_a);
  dfree(d_b);
  dfree(d_c);
  free(first);
  free(got);
  free(c_c);
  free(a0);
  free(b0);
  free(aa);
  free(ab);
  free(scale);
}

/* The side queue (side_begin/end/join): a product queued there has the bits of the same product
 * on the main queue, plain and replayed as a graph. It waits for what the main queue queued
 * before side_begin (its B is written there last, behind a long chain of fills), and the main
 * queue's ops after side_join wait for it (its result, copied last behind a long chain of fills
 * on the side queue, is read at once): either order broken reads poison. Misuse fails with
 * NG_ERR_STATE and leaves the queues usable. */
static void test_side_queue(void) {
  ng_rng r;
  ng_rng_seed(&r, 46);
  const int64_t m = 300, n = 200, k = 260, big = (int64_t)1 << 25;
  const size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
  float *a = ng_test_rand_floats(&r, (int64_t)na), *b = ng_test_rand_floats(&r, (int64_t)nb);
  float *d_a = up(a, na * 4), *d_b_src = up(b, nb * 4), *d_b = dalloc(nb * 4);
  float *d_c = dalloc(nc * 4), *d_c2 = dalloc(nc * 4), *d_out = dalloc(nc * 4);
  float *d_big = dalloc((size_t)big * 4), *d_big2 = dalloc((size_t)big * 4);
  float *ref = ng_test_xmalloc(nc * 4), *got = ng_test_xmalloc(nc * 4);
  EXPECT_OK(gpu->iface->gemm(gpu, false, false, m, n, k, 1.0f, d_a, k, d_b_src, n, 0.0f, d_c, n));
  down(ref, d_c, nc * 4);
  const int64_t forks = ng__cuda_side_forks(gpu);
  for (int rep = 0; rep < 4; rep++) { /* plain, captured, then replayed */
    dpoison(d_c, nc * 4);
    dpoison(d_c2, nc * 4);
    dpoison(d_b, nb * 4);
    EXPECT_OK(gpu->iface->fill(gpu, d_out, (int64_t)nc, 0.0f));
    for (int i = 0; i < 4; i++) /* the main queue is busy when B is written */
      EXPECT_OK(gpu->iface->fill(gpu, d_big, big, (float)i));
    EXPECT_OK(gpu->iface->copy_d2d(gpu, d_b, d_b_src, nb * 4));
    EXPECT_OK(gpu->iface->side_begin(gpu));
    EXPECT_OK(gpu->iface->gemm(gpu, false, false, m, n, k, 1.0f, d_a, k, d_b, n, 0.0f, d_c, n));
    for (int i = 0; i < 4; i++) /* the side queue is busy before it writes what is read */
      EXPECT_OK(gpu->iface->fill(gpu, d_big2, big, (float)i));
    EXPECT_OK(gpu->iface->copy_d2d(gpu, d_c2, d_c, nc * 4));
    EXPECT_OK(gpu->iface->side_end(gpu));
    EXPECT_OK(gpu->iface->side_join(gpu));
    EXPECT_OK(gpu->iface->add(gpu, d_out, d_c2, (int64_t)nc));
    down(got, d_out, nc * 4);
    char what[64];
    snprintf(what, sizeof what, "side queue, rep %d", rep);
    cmp_bits(what, ref, got, nc * 4);
  }
  EXPECT_TRUE(ng__cuda_side_forks(gpu) == forks + 4);
  EXPECT_EQ_I(gpu->iface->side_end(gpu), NG_ERR_STATE);
  EXPECT_OK(gpu->iface->side_begin(gpu));
  EXPECT_EQ_I(gpu->iface->side_begin(gpu), NG_ERR_STATE);
  EXPECT_EQ_I(gpu->iface->side_join(gpu), NG_ERR_STATE);
  EXPECT_EQ_I(gpu->iface->copy_ops_begin(gpu, 0), NG_ERR_STATE);
  EXPECT_OK(gpu->iface->side_end(gpu));
  EXPECT_OK(gpu->iface->side_join(gpu));
  EXPECT_OK(gpu->iface->side_join(gpu)); /* nothing pending: nothing to do */
  EXPECT_OK(gpu->iface->copy_ops_begin(gpu, 0));
  EXPECT_EQ_I(gpu->iface->side_begin(gpu), NG_ERR_STATE);
  EXPECT_EQ_I(gpu->iface->gemm(gpu, false, false, m, n, k, 1.0f, d_a, k, d_b, n, 0.0f, d_c, n),
              NG_ERR_STATE); /* no GEMM on a copy queue */
  EXPECT_OK(gpu->iface->copy_ops_end(gpu, 0));
  EXPECT_OK(gpu->iface->sync(gpu));
  dfree(d_a);
  dfree(d_b_src);
  dfree(d_b);
  dfree(d_c);
  dfree(d_c2);
  dfree(d_out);
  dfree(d_big);
  dfree(d_big2);
  free(a);
  free(b);
  free(ref);
  free(got);
}

/* ---- elementwise ops ---- */

static void test_fill_add_copy(void) {
  ng_rng r;
  ng_rng_seed(&r, 55);
  const int64_t ns[] = {0, 1, 7, 100003};
  for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++) {
    const int64_t n = ns[ni];
    const size_t bytes = (size_t)n * 4;
    float *x = ng_test_rand_floats(&r, n), *y = ng_test_rand_floats(&r, n);
    float *y_c = ng_test_xmalloc(bytes + 4);
    memcpy(y_c, y, bytes);
    EXPECT_OK(cpu->iface->add(cpu, y_c, x, n));
    float *d_x = up(x, bytes), *d_y = dalloc(bytes), *d_z = dalloc(bytes);
    float *g = ng_test_xmalloc(bytes + 4), *g2 = ng_test_xmalloc(bytes + 4);
    for (int run = 0; run < 2; run++) {
      if (n)
        EXPECT_OK(gpu->iface->copy_h2d(gpu, d_y, y, bytes));
      EXPECT_OK(gpu->iface->add(gpu, d_y, d_x, n));
      down(run ? g2 : g, d_y, bytes);
    }
    cmp_near("add", y_c, g, n, NULL);
    cmp_bits("add twice", g, g2, bytes);
    /* fill, then a device-to-device copy of the sum */
    EXPECT_OK(gpu->iface->fill(gpu, d_x, n, -2.5f));
    down(g, d_x, bytes);
    for (int64_t i = 0; i < n; i++)
      EXPECT_TRUE(g[i] == -2.5f);
    EXPECT_OK(gpu->iface->copy_d2d(gpu, d_z, d_y, bytes));
    down(g, d_z, bytes);
    cmp_bits("copy_d2d", g, g2, bytes);
    dfree(d_x);
    dfree(d_y);
    dfree(d_z);
    free(x);
    free(y);
    free(y_c);
    free(g);
    free(g2);
  }
}

/* scatter_rows (fp32): rows gathered by id to given positions (or in order), with and without
 * input dropout, bit for bit the CPU backend's, for widths of one chunk a row (V = 1 and 4) and
 * wider ones, and row counts of 1, 7 and 121. */
static void test_scatter_rows(void) {
  ng_rng r;
  ng_rng_seed(&r, 77);
  const int64_t dims[] = {1, 5, 8, 64, 128, 130, 300};
  const int64_t ns_[] = {1, 7, 121};
  const float drops[] = {0.0f, 0.3f};
  const int64_t rows_tbl = 150;
  for (size_t di = 0; di < NG_TEST_LEN(dims); di++)
    for (size_t ni = 0; ni < NG_TEST_LEN(ns_); ni++)
      for (int with_pos = 0; with_pos < 2; with_pos++) {
        const int64_t dim = dims[di], ns = ns_[ni], tn = rows_tbl * dim;
        float *x = ng_test_rand_floats(&r, tn);
        int64_t *ids = ng_test_xmalloc((size_t)ns * 8);
        int32_t *pos = ng_test_xmalloc((size_t)ns * 4);
        for (int64_t i = 0; i < ns; i++) {
          ids[i] = (int64_t)ng_rng_below(&r, (uint64_t)rows_tbl);
          pos[i] = (int32_t)((i * 5) % ns); /* 5 is coprime to 1, 7 and 121: a permutation */
        }
        float *d_x = up(x, (size_t)tn * 4);
        int64_t *d_ids = up(ids, (size_t)ns * 8);
        int32_t *d_pos = up(pos, (size_t)ns * 4);
        const size_t ob = (size_t)(ns * dim) * 4;
        float *d_out = dalloc(ob);
        for (size_t k = 0; k < NG_TEST_LEN(drops); k++) {
          float *want = poison(ob), *got = poison(ob);
          EXPECT_OK(cpu->iface->scatter_rows(cpu, want, with_pos ? pos : NULL, x, ids, ns, dim,
                                             drops[k], 11));
          dpoison(d_out, ob);
          EXPECT_OK(gpu->iface->scatter_rows(gpu, d_out, with_pos ? d_pos : NULL, d_x, d_ids, ns,
                                             dim, drops[k], 11));
          down(got, d_out, ob);
          char what[128];
          snprintf(what, sizeof what, "scatter_rows drop %g dim %lld rows %lld %s",
                   (double)drops[k], (long long)dim, (long long)ns,
                   with_pos ? "to positions" : "in order");
          cmp_bits(what, want, got, ob);
          free(want);
          free(got);
        }
        dfree(d_out);
        dfree(d_x);
        dfree(d_ids);
        dfree(d_pos);
        free(x);
        free(ids);
        free(pos);
      }
}

static void test_bias_act(void) {
  ng_rng r;
  ng_rng_seed(&r, 66);
  const int64_t rows_[] = {0, 1, 37, 1000}, cols_[] = {1, 5, 64, 130, 300};
  for (size_t ri = 0; ri < NG_TEST_LEN(rows_); ri++)
    for (size_t ci = 0; ci < NG_TEST_LEN(cols_); ci++)
      for (int act = NG_ACT_NONE; act <= NG_ACT_RELU; act++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
          const int64_t rows = rows_[ri], cols = cols_[ci], n = rows * cols;
          const size_t nb = (size_t)n * 4, cb = (size_t)cols * 4;
          float *x = ng_test_rand_floats(&r, n), *bias = ng_test_rand_floats(&r, cols);
          float *g = ng_test_rand_floats(&r, n);
          float *y_c = ng_test_xmalloc(nb + 4), *g_c = ng_test_xmalloc(nb + 4);
          float *gb_c = poison(cb), *gb_scale = poison(cb);
          memcpy(y_c, x, nb);
          memcpy(g_c, g, nb);
          EXPECT_OK(cpu->iface->bias_act_fwd(cpu, y_c, with_bias ? bias : NULL, rows, cols,
                                             (ng_activation)act));
          EXPECT_OK(cpu->iface->bias_act_bwd(cpu, g_c, y_c, gb_c, rows, cols, (ng_activation)act));
          float *ag = fabs_copy(g_c, n);
          EXPECT_OK(cpu->iface->bias_act_bwd(cpu, ag, y_c, gb_scale, rows, cols, NG_ACT_NONE));
          float *d_y = dalloc(nb), *d_g = dalloc(nb), *d_b = up(bias, cb), *d_gb = dalloc(cb);
          float *y_g[2] = {poison(nb + 4), poison(nb + 4)},
                *g_g[2] = {poison(nb + 4), poison(nb + 4)};
          float *gb_g[2] = {poison(cb), poison(cb)};
          for (int run = 0; run < 2; run++) {
            if (n) {
              EXPECT_OK(gpu->iface->copy_h2d(gpu, d_y, x, nb));
              EXPECT_OK(gpu->iface->copy_h2d(gpu, d_g, g, nb));
            }
            dpoison(d_gb, cb);
            EXPECT_OK(gpu->iface->bias_act_fwd(gpu, d_y, with_bias ? d_b : NULL, rows, cols,
                                               (ng_activation)act));
            EXPECT_OK(
                gpu->iface->bias_act_bwd(gpu, d_g, d_y, d_gb, rows, cols, (ng_activation)act));
            down(y_g[run], d_y, nb);
            down(g_g[run], d_g, nb);
            down(gb_g[run], d_gb, cb);
          }
          char what[96];
          snprintf(what, sizeof what, "bias_act %s%s rows %lld cols %lld", act ? "relu" : "none",
                   with_bias ? "+bias" : "", (long long)rows, (long long)cols);
          cmp_near(what, y_c, y_g[0], n, NULL);
          cmp_near(what, g_c, g_g[0], n, NULL);
          cmp_near(what, gb_c, gb_g[0], cols, gb_scale);
          cmp_bits(what, gb_c, gb_g[0], cb); /* both sum in the chunked row order */
          cmp_bits(what, y_g[0], y_g[1], nb);
          cmp_bits(what, g_g[0], g_g[1], nb);
          cmp_bits(what, gb_g[0], gb_g[1], cb);
          for (int run = 0; run < 2; run++) {
            free(y_g[run]);
            free(g_g[run]);
            free(gb_g[run]);
          }
          dfree(d_y);
          dfree(d_g);
          dfree(d_b);
          dfree(d_gb);
          free(x);
          free(bias);
          free(g);
          free(y_c);
          free(g_c);
          free(gb_c);
          free(gb_scale);
          free(ag);
        }
}

static void test_dropout(void) {
  ng_rng r;
  ng_rng_seed(&r, 77);
  const int64_t ns[] = {0, 1, 2, 7, 1001, 100000};
  const float ps[] = {0.0f, 0.3f, 0.9f};
  for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++)
    for (size_t pi = 0; pi < NG_TEST_LEN(ps); pi++) {
      const int64_t n = ns[ni];
      const float p = ps[pi];
      const uint64_t seed = 1000 + ni * 7 + pi;
      const size_t nb = (size_t)n * 4;
      float *x = ng_test_rand_floats(&r, n), *g = ng_test_rand_floats(&r, n);
      float *x_c = ng_test_xmalloc(nb + 4), *g_c = ng_test_xmalloc(nb + 4);
      uint8_t *m_c = poison((size_t)n + 1);
      memcpy(x_c, x, nb);
      memcpy(g_c, g, nb);
      EXPECT_OK(cpu->iface->dropout_fwd(cpu, x_c, m_c, n, p, seed));
      EXPECT_OK(cpu->iface->dropout_bwd(cpu, g_c, m_c, n, p));
      float *d_x = dalloc(nb), *d_g = dalloc(nb);
      uint8_t *d_m = dalloc((size_t)n);
      float *x_g[2] = {poison(nb + 4), poison(nb + 4)}, *g_g[2] = {poison(nb + 4), poison(nb + 4)};
      uint8_t *m_g[2] = {poison((size_t)n + 1), poison((size_t)n + 1)};
      for (int run = 0; run < 2; run++) {
        if (n) {
          EXPECT_OK(gpu->iface->copy_h2d(gpu, d_x, x, nb));
          EXPECT_OK(gpu->iface->copy_h2d(gpu, d_g, g, nb));
        }
        dpoison(d_m, (size_t)n);
        EXPECT_OK(gpu->iface->dropout_fwd(gpu, d_x, d_m, n, p, seed));
        EXPECT_OK(gpu->iface->dropout_bwd(gpu, d_g, d_m, n, p));
        down(x_g[run], d_x, nb);
        down(g_g[run], d_g, nb);
        down(m_g[run], d_m, (size_t)n);
      }
      char what[64];
      snprintf(what, sizeof what, "dropout n %lld p %g", (long long)n, (double)p);
      cmp_bits(what, m_c, m_g[0], (size_t)n); /* the masks agree bit for bit */
      cmp_near(what, x_c, x_g[0], n, NULL);
      cmp_near(what, g_c, g_g[0], n, NULL);
      cmp_bits(what, x_g[0], x_g[1], nb);
      cmp_bits(what, g_g[0], g_g[1], nb);
      cmp_bits(what, m_g[0], m_g[1], (size_t)n);
      if (n >= 1001 && p > 0.0f) { /* the masks keep about 1 - p of the elements */
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++)
          kept += m_c[i];
        EXPECT_NEAR((double)kept / (double)n, 1.0 - p, 0.05);
      }
      for (int run = 0; run < 2; run++) {
        free(x_g[run]);
        free(g_g[run]);
        free(m_g[run]);
      }
      dfree(d_x);
      dfree(d_g);
      dfree(d_m);
      free(x);
      free(g);
      free(x_c);
      free(g_c);
      free(m_c);
    }
}

static void test_xent(void) {
  ng_rng r;
  ng_rng_seed(&r, 88);
  const int64_t ns[] = {0, 1, 37, 1000};
  const int64_t classes_[] = {1, 2, 7, 40, 100};
  for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++)
    for (size_t ci = 0; ci < NG_TEST_LEN(classes_); ci++)
      for (int ties = 0; ties < 2; ties++) {
        const int64_t n = ns[ni], classes = classes_[ci], nz = n * classes;
        const size_t zb = (size_t)nz * 4, lb = (size_t)n * 4;
        float *z = ties ? tie_floats(&r, nz) : ng_test_rand_floats(&r, nz);
        for (int64_t i = 0; i < nz; i++)
          z[i] *= 3.0f;
        int32_t *y = ng_test_xmalloc(lb + 4);
        for (int64_t i = 0; i < n; i++)
          y[i] = (int32_t)ng_rng_below(&r, (uint64_t)classes);
        float *g_c = poison(zb + 4);
        double loss_c = -1.0, loss_g[3] = {-2.0, -3.0, -4.0};
        int64_t corr_c = -1, corr_g[3] = {-2, -3, -4};
        EXPECT_OK(cpu->iface->xent(cpu, z, y, n, classes, g_c, &loss_c, &corr_c));
        float *d_z = up(z, zb), *d_g = dalloc(zb);
        int32_t *d_y = up(y, lb);
        float *g_g[3] = {poison(zb + 4), poison(zb + 4), poison(zb + 4)};
        for (int run = 0; run < 2; run++) {
          dpoison(d_g, zb);
          EXPECT_OK(gpu->iface->xent(gpu, d_z, d_y, n, classes, d_g, &loss_g[run], &corr_g[run]));
          down(g_g[run], d_g, zb);
        }
        /* grad may be the logits themselves */
        EXPECT_OK(gpu->iface->xent(gpu, d_z, d_y, n, classes, d_z, &loss_g[2], &corr_g[2]));
        down(g_g[2], d_z, zb);
        char what[96];
        snprintf(what, sizeof what, "xent n %lld classes %lld%s", (long long)n, (long long)classes,
                 ties ? " (ties)" : "");
        /* The loss is a mean of non-negative row losses: relative bound. */
        EXPECT_NEAR(loss_g[0], loss_c, REL * fabs(loss_c) + 1e-12);
        EXPECT_EQ_I(corr_g[0], corr_c);
        EXPECT_TRUE(loss_g[0] == loss_g[1] && loss_g[0] == loss_g[2]);
        EXPECT_TRUE(corr_g[0] == corr_g[1] && corr_g[0] == corr_g[2]);
        cmp_near(what, g_c, g_g[0], nz, NULL);
        cmp_bits(what, g_g[0], g_g[1], zb);
        cmp_bits(what, g_g[0], g_g[2], zb);
        if (n > 0) {
          /* Without host outputs the result waits for xent_result, bit for bit the same. */
          double l_late = -1.0;
          int64_t c_late = -1;
          EXPECT_OK(gpu->iface->copy_h2d(gpu, d_z, z, zb)); /* the run above overwrote it */
          EXPECT_OK(gpu->iface->xent(gpu, d_z, d_y, n, classes, d_g, NULL, NULL));
          EXPECT_OK(gpu->iface->xent_result(gpu, &l_late, &c_late));
          EXPECT_TRUE(l_late == loss_g[0] && c_late == corr_g[0]);
          EXPECT_STATUS(gpu->iface->xent_result(gpu, &l_late, &c_late), NG_ERR_STATE);
        }
        if (n > 0 && classes > 1) {
          /* A label out of range fails on both backends and leaves the GPU gradient untouched;
           * without host outputs the GPU reports it from xent_result. */
          y[n - 1] = (int32_t)classes;
          EXPECT_OK(gpu->iface->copy_h2d(gpu, d_y, y, lb));
          dpoison(d_g, zb);
          EXPECT_STATUS(cpu->iface->xent(cpu, z, y, n, classes, g_c, NULL, NULL),
                        NG_ERR_INVALID_ARG);
          EXPECT_OK(gpu->iface->xent(gpu, d_z, d_y, n, classes, d_g, NULL, NULL));
          EXPECT_STATUS(gpu->iface->xent_result(gpu, NULL, NULL), NG_ERR_INVALID_ARG);
          char row[64];
          snprintf(row, sizeof row, "label %lld of row %lld", (long long)classes,
                   (long long)(n - 1));
          EXPECT_ERR_HAS(row);
          down(g_g[0], d_g, zb);
          int64_t touched = 0;
          for (int64_t i = 0; i < nz; i++)
            touched += !isnan(g_g[0][i]);
          EXPECT_EQ_I(touched, 0);
        }
        for (int run = 0; run < 3; run++)
          free(g_g[run]);
        dfree(d_z);
        dfree(d_g);
        dfree(d_y);
        free(z);
        free(y);
        free(g_c);
      }
}

static void test_xent_guard(void) {
  ng_test_xent_guard(gpu);
}

static void test_opt(void) {
  ng_rng r;
  ng_rng_seed(&r, 99);
  const ng_opt_hp hps[] = {
      {NG_OPT_SGD, 0.1f, 0.0f, 0.0f, 0, 0, 0, 1},
      {NG_OPT_SGD, 0.05f, 1e-2f, 0.9f, 0, 0, 0, 1},
      {NG_OPT_ADAM, 1e-2f, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f, 1},
      {NG_OPT_ADAM, 3e-3f, 5e-4f, 0.0f, 0.8f, 0.99f, 1e-6f, 1},
  };
  const int64_t ns[] = {1, 1001};
  for (size_t hi = 0; hi < NG_TEST_LEN(hps); hi++)
    for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++) {
      const int64_t n = ns[ni];
      const size_t nb = (size_t)n * 4;
      float *p = ng_test_rand_floats(&r, n), *s1 = ng_test_xmalloc(nb), *s2 = ng_test_xmalloc(nb);
      memset(s1, 0, nb);
      memset(s2, 0, nb);
      float *d_p = up(p, nb), *d_s1 = up(s1, nb), *d_s2 = up(s2, nb), *d_gr = dalloc(nb);
      float *back = ng_test_xmalloc(nb);
      for (int64_t step = 1; step <= 3; step++) {
        float *gr = ng_test_rand_floats(&r, n);
        ng_opt_hp hp = hps[hi];
        hp.step = step;
        EXPECT_OK(cpu->iface->opt_step(cpu, &hp, p, gr, s1, s2, n));
        EXPECT_OK(gpu->iface->copy_h2d(gpu, d_gr, gr, nb));
        EXPECT_OK(gpu->iface->opt_step(gpu, &hp, d_p, d_gr, d_s1, d_s2, n));
        free(gr);
      }
      char what[64];
      snprintf(what, sizeof what, "opt_step %s n %lld", hps[hi].kind ? "adam" : "sgd",
               (long long)n);
      down(back, d_p, nb);
      cmp_near(what, p, back, n, NULL);
      down(back, d_s1, nb);
      cmp_near(what, s1, back, n, NULL);
      down(back, d_s2, nb);
      cmp_near(what, s2, back, n, NULL);
      dfree(d_p);
      dfree(d_s1);
      dfree(d_s2);
      dfree(d_gr);
      free(p);
      free(s1);
      free(s2);
      free(back);
    }
}

/* The argument checks are the checked front's (core/backend_check.c), the CPU backend's: the
 * same error classes and messages. The front must not read the block's device arrays (a host
 * read of device memory would crash). */
/* pair_dot: the CUDA scores are the CPU's bits, not merely near them (each pair's sum in column
 * order from +0, every product and add rounded apart on both: bits link evaluation's metrics
 * rely on), for dims on and off the float4 path, a table that is not 16-byte aligned (h + 1),
 * repeated and equal rows, and a launch whose grid the pairs fill; each CUDA run twice. */
static void test_pair_dot(void) {
  ng_rng r;
  ng_rng_seed(&r, 91);
  const int64_t rows = 1000, dims[] = {1, 3, 4, 16, 37, 256};
  const int64_t ns[] = {1, 31, 257, 100000};
  for (size_t di = 0; di < NG_TEST_LEN(dims); di++) {
    const int64_t d = dims[di], nh = rows * d + 1;
    /* Values over 2^-10 .. 2^10 with both signs: sums whose order shows in their bits. */
    float *h = ng_test_xmalloc((size_t)nh * 4);
    for (int64_t i = 0; i < nh; i++)
      h[i] = ldexpf(ng_test_frand(&r), (int)ng_rng_below(&r, 21) - 10);
    float *d_h = up(h, (size_t)nh * 4);
    for (size_t ni = 0; ni < NG_TEST_LEN(ns); ni++) {
      const int64_t n = ns[ni];
      int32_t *u = ng_test_xmalloc((size_t)n * 4), *v = ng_test_xmalloc((size_t)n * 4);
      for (int64_t i = 0; i < n; i++) {
        u[i] = (int32_t)ng_rng_below(&r, (uint64_t)rows);
        v[i] = i % 5 == 0 ? u[i] : (int32_t)ng_rng_below(&r, (uint64_t)rows);
      }
      int32_t *d_u = up(u, (size_t)n * 4), *d_v = up(v, (size_t)n * 4);
      float *d_s = dalloc((size_t)n * 4);
      for (int off = 0; off < 2; off++) {
        float *c = poison((size_t)n * 4), *g[2] = {poison((size_t)n * 4), poison((size_t)n * 4)};
        EXPECT_OK(cpu->iface->pair_dot(cpu, c, h + off, u, v, n, d));
        for (int run = 0; run < 2; run++) {
          dpoison(d_s, (size_t)n * 4);
          EXPECT_OK(gpu->iface->pair_dot(gpu, d_s, d_h + off, d_u, d_v, n, d));
          down(g[run], d_s, (size_t)n * 4);
        }
        char what[96];
        snprintf(what, sizeof what, "pair_dot dim %lld n %lld offset %d", (long long)d,
                 (long long)n, off);
        for (int64_t i = 0; i < n; i++)
          if (!isfinite(c[i])) {
            ng_test_fail(__FILE__, __LINE__, "%s: cpu score %lld is %g", what, (long long)i,
                         (double)c[i]);
            break;
          }
        cmp_bits(what, c, g[0], (size_t)n * 4);
        cmp_bits(what, g[0], g[1], (size_t)n * 4);
        free(c);
        free(g[0]);
        free(g[1]);
      }
      dfree(d_u);
      dfree(d_v);
      dfree(d_s);
      free(u);
      free(v);
    }
    dfree(d_h);
    free(h);
  }
  /* The front's checks, the same on both backends. */
  EXPECT_STATUS(gpu->iface->pair_dot(gpu, NULL, NULL, NULL, NULL, 1, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("dim is 0");
  EXPECT_OK(gpu->iface->pair_dot(gpu, NULL, NULL, NULL, NULL, 0, 4));
}

static void test_errors(void) {
  EXPECT_TRUE(gpu->iface != gpu->impl && cpu->iface != cpu->impl);
  ng_block blk = {0};
  ng_aggr ag = {NG_REDUCE_MAX, false, false, true, 0.0f, 0, NULL};
  float *d = dalloc(64);
  EXPECT_STATUS(gpu->iface->aggr_fwd(gpu, &ag, &blk, d, 4, d, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("aggr_fwd: block indptr is NULL");
  int32_t *ip = dalloc(8);
  blk.indptr = ip;
  EXPECT_STATUS(gpu->iface->aggr_fwd(gpu, &ag, &blk, d, 4, d, NULL), NG_ERR_UNSUPPORTED);
  EXPECT_STATUS(gpu->iface->fill(gpu, d, -1, 0.0f), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("fill: n is -1");
  EXPECT_STATUS(gpu->iface->dropout_fwd(gpu, d, (uint8_t *)d, 4, 1.0f, 1), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(gpu->iface->gemm(gpu, false, false, 2, 2, 2, 1.0f, d, 1, d, 2, 0.0f, d, 2),
                NG_ERR_INVALID_ARG);
  EXPECT_STATUS(gpu->iface->bias_act_fwd(gpu, d, NULL, 2, 2, (ng_activation)7), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(gpu->iface->xent(gpu, d, ip, 1, 0, NULL, NULL, NULL), NG_ERR_INVALID_ARG);
  void *huge = NULL;
  EXPECT_STATUS(gpu->iface->alloc(gpu, &huge, (size_t)1 << 50), NG_ERR_NOMEM);
  EXPECT_TRUE(huge == NULL);
  /* the failed allocation left no error behind */
  EXPECT_OK(gpu->iface->sync(gpu));
  dfree(d);
  dfree(ip);
}

/* ---- finite-difference gradient checks on the CUDA backend ---- */

typedef struct {
  const ng_aggr *ag;
  const ng_block *b;
  float *src, *out, *r, *d_src, *d_out;
  int32_t *d_arg;
  int64_t dim, ns, nd;
} aggr_ctx;

static double aggr_loss(void *p) {
  aggr_ctx *c = p;
  EXPECT_OK(gpu->iface->copy_h2d(gpu, c->d_src, c->src, (size_t)c->ns * 4));
  EXPECT_OK(gpu->iface->aggr_fwd(gpu, c->ag, c->b, c->d_src, c->dim, c->d_out, c->d_arg));
  down(c->out, c->d_out, (size_t)c->nd * 4);
  return ng_test_dot(c->r, c->out, c->nd);
}

/* Tolerances as in tests/test_gradcheck.c: linear ops with h = 0.25, max/min on distinct inputs
 * 0.03 apart with h = 0.01. */
static void test_gradcheck_aggr(void) {
  ng_rng r;
  ng_rng_seed(&r, 111);
  for (int dup = 0; dup < 2; dup++) {
    ng_test_block tb;
    tblock_make(&tb, &r, 12, 30, 6, 0, false, dup);
    dblock db;
    dblock_up(&db, &tb.b);
    const int64_t dim = 5, ns = (int64_t)tb.b.n_src * dim, nd = (int64_t)tb.b.n_dst * dim;
    for (size_t ai = 0; ai < 5; ai++) { /* sum, mean, max, min, gcn */
      const ng_aggr *ag = &AGGRS[ai].ag;
      const bool best = ag->reduce != NG_REDUCE_SUM;
      float *src = ng_test_xmalloc((size_t)ns * 4);
      if (best) {
        for (int64_t i = 0; i < ns; i++)
          src[i] = (float)i * 0.03f - 0.5f;
        for (int64_t i = ns - 1; i > 0; i--) {
          int64_t j = (int64_t)ng_rng_below(&r, (uint64_t)i + 1);
          float t = src[i];
          src[i] = src[j];
          src[j] = t;
        }
      } else {
        for (int64_t i = 0; i < ns; i++)
          src[i] = ng_test_frand(&r);
      }
      aggr_ctx c = {ag,
                    &db.b,
                    src,
                    ng_test_xmalloc((size_t)nd * 4),
                    ng_test_rand_floats(&r, nd),
                    dalloc((size_t)ns * 4),
                    dalloc((size_t)nd * 4),
                    best ? dalloc((size_t)nd * 4) : NULL,
                    dim,
                    ns,
                    nd};
      aggr_loss(&c); /* the winners of the unperturbed input */
      float *d_r = up(c.r, (size_t)nd * 4), *d_grad = dalloc((size_t)ns * 4);
      float *grad = ng_test_xmalloc((size_t)ns * 4);
      EXPECT_OK(gpu->iface->aggr_bwd(gpu, ag, &db.b, d_r, c.d_arg, dim, d_grad));
      down(grad, d_grad, (size_t)ns * 4);
      char what[96];
      snprintf(what, sizeof what, "gpu gradcheck aggr %s%s", AGGRS[ai].name,
               dup ? " (duplicate edge)" : "");
      ng_test_gradcheck(what, src, ns, grad, aggr_loss, &c, best ? 0.01f : 0.25f, 1e-4, 1e-4);
      dfree(c.d_src);
      dfree(c.d_out);
      dfree(c.d_arg);
      dfree(d_r);
      dfree(d_grad);
      free(src);
      free(c.out);
      free(c.r);
      free(grad);
    }
    dblock_free(&db);
    ng_test_block_free(&tb);
  }
}

typedef struct {
  bool ta, tb;
  int64_t m, n, k, lda, ldb;
  float alpha;
  float *a, *b, *c, *r, *d_a, *d_b, *d_c;
} gemm_ctx;

static double gemm_loss(void *p) {
  gemm_ctx *g = p;
  EXPECT_OK(gpu->iface->copy_h2d(gpu, g->d_a, g->a, (size_t)(g->m * g->k) * 4));
  EXPECT_OK(gpu->iface->copy_h2d(gpu, g->d_b, g->b, (size_t)(g->k * g->n) * 4));
  EXPECT_OK(gpu->iface->gemm(gpu, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->d_a, g->lda, g->d_b,
                             g->ldb, 0.0f, g->d_c, g->n));
  down(g->c, g->d_c, (size_t)(g->m * g->n) * 4);
  return ng_test_dot(g->r, g->c, g->m * g->n);
}

static void test_gradcheck_gemm(void) {
  ng_rng r;
  ng_rng_seed(&r, 222);
  const int64_t m = 5, n = 4, k = 6;
  for (int tr = 0; tr < 4; tr++) {
    gemm_ctx g = {.ta = tr & 1, .tb = tr & 2, .m = m, .n = n, .k = k, .alpha = 0.8f};
    g.lda = g.ta ? m : k;
    g.ldb = g.tb ? k : n;
    g.a = ng_test_rand_floats(&r, m * k);
    g.b = ng_test_rand_floats(&r, k * n);
    g.c = ng_test_xmalloc((size_t)(m * n) * 4);
    g.r = ng_test_rand_floats(&r, m * n);
    g.d_a = up(g.a, (size_t)(m * k) * 4);
    g.d_b = up(g.b, (size_t)(k * n) * 4);
    g.d_c = dalloc((size_t)(m * n) * 4);
    float *d_r = up(g.r, (size_t)(m * n) * 4), *d_ga = dalloc((size_t)(m * k) * 4),
          *d_gb = dalloc((size_t)(k * n) * 4);
    /* The gradients with the backend's own GEMM in the stored layouts, as a model computes. */
    if (!g.ta)
      EXPECT_OK(gpu->iface->gemm(gpu, false, !g.tb, m, k, n, g.alpha, d_r, n, g.d_b, g.ldb, 0.0f,
                                 d_ga, k));
    else
      EXPECT_OK(
          gpu->iface->gemm(gpu, g.tb, true, k, m, n, g.alpha, g.d_b, g.ldb, d_r, n, 0.0f, d_ga, m));
    if (!g.tb)
      EXPECT_OK(gpu->iface->gemm(gpu, !g.ta, false, k, n, m, g.alpha, g.d_a, g.lda, d_r, n, 0.0f,
                                 d_gb, n));
    else
      EXPECT_OK(
          gpu->iface->gemm(gpu, true, g.ta, n, k, m, g.alpha, d_r, n, g.d_a, g.lda, 0.0f, d_gb, k));
    float *ga = ng_test_xmalloc((size_t)(m * k) * 4), *gb = ng_test_xmalloc((size_t)(k * n) * 4);
    down(ga, d_ga, (size_t)(m * k) * 4);
    down(gb, d_gb, (size_t)(k * n) * 4);
    char what[64];
    snprintf(what, sizeof what, "gpu gradcheck gemm %c%c dA", g.ta ? 'T' : 'N', g.tb ? 'T' : 'N');
    ng_test_gradcheck(what, g.a, m * k, ga, gemm_loss, &g, 0.25f, 1e-4, 1e-4);
    snprintf(what, sizeof what, "gpu gradcheck gemm %c%c dB", g.ta ? 'T' : 'N', g.tb ? 'T' : 'N');
    ng_test_gradcheck(what, g.b, k * n, gb, gemm_loss, &g, 0.25f, 1e-4, 1e-4);
    dfree(g.d_a);
    dfree(g.d_b);
    dfree(g.d_c);
    dfree(d_r);
    dfree(d_ga);
    dfree(d_gb);
    free(g.a);
    free(g.b);
    free(g.c);
    free(g.r);
    free(ga);
    free(gb);
  }
}

typedef struct {
  float *x, *bias, *y, *r, *d_y, *d_bias;
  int64_t rows, cols;
  ng_activation act;
} bias_ctx;

static double bias_loss(void *p) {
  bias_ctx *c = p;
  const int64_t n = c->rows * c->cols;
  EXPECT_OK(gpu->iface->copy_h2d(gpu, c->d_y, c->x, (size_t)n * 4));
  EXPECT_OK(gpu->iface->copy_h2d(gpu, c->d_bias, c->bias, (size_t)c->cols * 4));
  EXPECT_OK(gpu->iface->bias_act_fwd(gpu, c->d_y, c->d_bias, c->rows, c->cols, c->act));
  down(c->y, c->d_y, (size_t)n * 4);
  return ng_test_dot(c->r, c->y, n);
}

static void test_gradcheck_bias_act(void) {
  ng_rng r;
  ng_rng_seed(&r, 333);
  const int64_t rows = 9, cols = 6, n = rows * cols;
  for (int act = NG_ACT_NONE; act <= NG_ACT_RELU; act++) {
    bias_ctx c = {ng_test_rand_floats(&r, n),
                  ng_test_rand_floats(&r, cols),
                  ng_test_xmalloc((size_t)n * 4),
                  ng_test_rand_floats(&r, n),
                  dalloc((size_t)n * 4),
                  dalloc((size_t)cols * 4),
                  rows,
                  cols,
                  (ng_activation)act};
    for (int64_t i = 0; i < rows; i++) /* pre-activations at least 0.05 from the ReLU kink */
      for (int64_t j = 0; j < cols; j++) {
        float *v = &c.x[i * cols + j];
        float pre = *v + c.bias[j];
        if (fabsf(pre) < 0.05f)
          *v += pre < 0.0f ? -0.1f : 0.1f;
      }
    bias_loss(&c);
    float *d_g = up(c.r, (size_t)n * 4), *d_gb = dalloc((size_t)cols * 4);
    EXPECT_OK(gpu->iface->bias_act_bwd(gpu, d_g, c.d_y, d_gb, rows, cols, (ng_activation)act));
    float *g = ng_test_xmalloc((size_t)n * 4), *gbias = ng_test_xmalloc((size_t)cols * 4);
    down(g, d_g, (size_t)n * 4);
    down(gbias, d_gb, (size_t)cols * 4);
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++)
      zeros += g[i] == 0.0f;
    if (act == NG_ACT_RELU)
      EXPECT_TRUE(zeros > 0 && zeros < n);
    ng_test_gradcheck(act ? "gpu gradcheck bias_act relu dx" : "gpu gradcheck bias_act none dx",
                      c.x, n, g, bias_loss, &c, 0.01f, 1e-4, 1e-4);
    ng_test_gradcheck(act ? "gpu gradcheck bias_act relu dbias"
                          : "gpu gradcheck bias_act none dbias",
                      c.bias, cols, gbias, bias_loss, &c, 0.01f, 1e-4, 1e-4);
    dfree(c.d_y);
    dfree(c.d_bias);
    dfree(d_g);
    dfree(d_gb);
    free(c.x);
    free(c.bias);
    free(c.y);
    free(c.r);
    free(g);
    free(gbias);
  }
}

typedef struct {
  float *z, *d_z;
  int32_t *d_y;
  int64_t n, classes;
} xent_ctx;

static double xent_loss(void *p) {
  xent_ctx *c = p;
  double loss = -1.0;
  EXPECT_OK(gpu->iface->copy_h2d(gpu, c->d_z, c->z, (size_t)(c->n * c->classes) * 4));
  EXPECT_OK(gpu->iface->xent(gpu, c->d_z, c->d_y, c->n, c->classes, NULL, &loss, NULL));
  return loss;
}

/* The cross-entropy is smooth: h = 1e-3, 1e-6 + 1e-4 relative (tests/test_gradcheck.c). */
static void test_gradcheck_xent(void) {
  ng_rng r;
  ng_rng_seed(&r, 444);
  const int64_t n = 6, classes = 5, nz = n * classes;
  xent_ctx c = {ng_test_rand_floats(&r, nz), NULL, NULL, n, classes};
  int32_t y[6];
  for (int64_t i = 0; i < n; i++)
    y[i] = (int32_t)ng_rng_below(&r, (uint64_t)classes);
  c.d_z = up(c.z, (size_t)nz * 4);
  c.d_y = up(y, sizeof y);
  float *d_g = dalloc((size_t)nz * 4), *g = ng_test_xmalloc((size_t)nz * 4);
  double loss = -1.0;
  EXPECT_OK(gpu->iface->xent(gpu, c.d_z, c.d_y, n, classes, d_g, &loss, NULL));
  EXPECT_TRUE(loss > 0.0);
  down(g, d_g, (size_t)nz * 4);
  ng_test_gradcheck("gpu gradcheck xent", c.z, nz, g, xent_loss, &c, 1e-3f, 1e-6, 1e-4);
  dfree(c.d_z);
  dfree(c.d_y);
  dfree(d_g);
  free(c.z);
  free(g);
}

int main(void) {
  int count = 0;
  char desc[512];
  if (ng__cuda_devices(&count, desc, sizeof desc) != NG_OK) {
    printf("gpu_parity: skipped: listing CUDA devices failed: %s\n", ng_last_error());
    return 77;
  }
  if (count == 0) {
    printf("gpu_parity: skipped: no CUDA device visible (no GPU or no driver)\n");
    return 77;
  }
  printf("gpu_parity: %s\n", desc);
  if (ng__backend_cpu_create(&cpu, 0) != NG_OK || ng__backend_cuda_create(&gpu, 0) != NG_OK) {
    printf("gpu_parity: creating the backends failed: %s\n", ng_last_error());
    ng__backend_destroy(cpu);
    return 1;
  }
  RUN_TEST(test_errors);
  RUN_TEST(test_fill_add_copy);
  RUN_TEST(test_gather);
  RUN_TEST(test_aggr);
  RUN_TEST(test_pstate);
  RUN_TEST(test_template_occupancy);
  RUN_TEST(test_bf16);
  RUN_TEST(test_gemm);
  RUN_TEST(test_gemm_replay);
  RUN_TEST(test_gemm_bias_act);
  RUN_TEST(test_side_queue);
  RUN_TEST(test_scatter_rows);
  RUN_TEST(test_bias_act);
  RUN_TEST(test_dropout);
  RUN_TEST(test_xent);
  RUN_TEST(test_xent_guard);
  RUN_TEST(test_opt);
  RUN_TEST(test_pair_dot);
  RUN_TEST(test_gradcheck_aggr);
  RUN_TEST(test_gradcheck_gemm);
  RUN_TEST(test_gradcheck_bias_act);
  RUN_TEST(test_gradcheck_xent);
  ng__backend_destroy(gpu);
  ng__backend_destroy(cpu);
  return ng_test_summary();
}

#endif /* NG_HAVE_CUDA */
