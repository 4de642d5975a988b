/* User-defined aggregators on the CUDA backend against the CPU backend (the reference): the
 * same NG_AGGREGATOR_SOURCE text compiled at run time with NVRTC (tests/ng_test_agg.h: a power
 * mean, a softmax aggregation of three state floats, a linear mean) in aggr_fwd, aggr_partial
 * (with input dropout), pstate_merge, pstate_finalize and aggr_user_bwd, over blocks with empty
 * rows, repeated sources and dims that are not multiples of 4; each GPU op twice gives the same
 * bytes. The built-ins give, bit for bit, their specification (test_builtin_bits, against a
 * scalar reference here): those that run through the same template (compiled by nvcc at build
 * time: sum, mean, GCN's weighted sum and self loop forward, sum/mean partial states from fp32
 * and bf16 tables with input dropout, every built-in's merge and finalize) each product and sum
 * rounded in edge order; max and min (hand-written forward with argbest and partial states) the
 * first neighbour's value replaced only by a strictly better one (NaN first neighbours, ties,
 * repeated sources). The template hook gives aggr_fwd's bits, and so does the built-in mean's
 * text compiled by NVRTC. Training Cora with a user aggregator on CUDA follows the CPU backend in
 * every fetch strategy.
 *
 * Tolerances: |cpu - gpu| <= 1e-5 (1 + |cpu|) for values (expf, cbrtf and the division differ
 * by an ulp or two between glibc and CUDA; merged states reorder a few sums), exact for counts;
 * losses within 1e-3 relative of the CPU run after two epochs. Exits 77 without CUDA or GPU. */
/* The scalar reference of test_builtin_bits rounds every product and sum on its own, as the
 * kernels do: no contraction into fused multiply-adds. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "bf16.h"
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_agg.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef NG_HAVE_CUDA
int main(void) {
  printf("gpu_agg: skipped: this build has no CUDA backend (configure with -DNG_CUDA=ON)\n");
  return 77;
}
#else
#include "ng_cuda.h"

static ng_backend *cpu, *gpu;
static const ng_aggregator_def *const DEFS[] = {&ng_test_powmean, &ng_test_softmax, &ng_test_mean};

static void *up(const void *h, size_t bytes) {
  void *d = NULL;
  EXPECT_OK(gpu->iface->alloc(gpu, &d, bytes ? bytes : 4));
  if (bytes)
    EXPECT_OK(gpu->iface->copy_h2d(gpu, d, h, bytes));
  return d;
}

/* A device buffer of `bytes` poisoned with 0xff (NaN floats, -1 ints). */
static void *dpoisoned(size_t bytes) {
  void *h = ng_test_xmalloc(bytes ? bytes : 4);
  memset(h, 0xff, bytes ? bytes : 4);
  void *d = up(h, bytes ? bytes : 4);
  free(h);
  return d;
}

static void *down(const void *d, size_t bytes) {
  void *h = ng_test_xmalloc(bytes ? bytes : 4);
  if (bytes)
    EXPECT_OK(gpu->iface->copy_d2h(gpu, h, d, bytes));
  return h;
}

static void cmp_near(const char *what, const float *c, const float *g, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)c[i] - (double)g[i]) <= 1e-5 * (1.0 + fabs((double)c[i])))) {
      if (bad++ < 3)
        ng_test_fail(__FILE__, __LINE__, "%s: element %lld: cpu %.9g, gpu %.9g", what, (long long)i,
                     (double)c[i], (double)g[i]);
    }
  if (bad > 3)
    ng_test_fail(__FILE__, __LINE__, "%s: %lld of %lld elements differ", what, (long long)bad,
                 (long long)n);
}

/* A block on the device: the host block's arrays copied. */
typedef struct {
  ng_block b;
  void *a[7];
} dblock;

static void dblock_make(dblock *d, const ng_block *h) {
  const size_t nd = (size_t)h->n_dst, ns = (size_t)h->n_src, nnz = (size_t)h->nnz;
  d->b = *h;
  d->b.indptr = d->a[0] = up(h->indptr, (nd + 1) * 4);
  d->b.indices = d->a[1] = up(h->indices, nnz * 4);
  d->b.edge_w = d->a[2] = up(h->edge_w, nnz * 4);
  d->b.t_indptr = d->a[3] = up(h->t_indptr, (ns + 1) * 4);
  d->b.t_dst = d->a[4] = up(h->t_dst, nnz * 4);
  d->b.t_eid = d->a[5] = up(h->t_eid, nnz * 4);
  d->b.self_w = d->a[6] = up(h->self_w, nd * 4);
}

static void dblock_free(dblock *d) {
  for (int i = 0; i < 7; i++)
    gpu->iface->free(gpu, d->a[i]);
}

static void make_block(ng_test_block *tb, ng_rng *r, int32_t nd, int32_t ns, int32_t max_deg) {
  tb->indptr = ng_test_xmalloc(((size_t)nd + 1) * 4);
  tb->indptr[0] = 0;
  for (int32_t d = 0; d < nd; d++)
    tb->indptr[d + 1] =
        tb->indptr[d] + (d % 5 == 4 ? 0 : 1 + (int32_t)ng_rng_below(r, (uint64_t)max_deg));
  ng_test_block_fill(tb, r, nd, ns, true, true);
}

static ng_aggr user_aggr(const ng_aggregator_def *u, bool weighted) {
  ng_aggregator pub;
  ng_aggr ag;
  EXPECT_OK(ng_aggregator_define(&pub, u));
  pub.edge_weight = weighted ? NG_EDGE_WEIGHT_GCN_NORM : NG_EDGE_WEIGHT_NONE;
  EXPECT_OK(ng__aggr_from_public(&ag, &pub));
  return ag;
}

/* Every op of one aggregator, dim and weighting on both backends. */
static void parity_case(const ng_aggregator_def *u, bool weighted, const ng_block *hb,
                        const dblock *db, int64_t dim, ng_rng *r) {
  char what[160];
  const ng_aggr ag = user_aggr(u, weighted);
  const int64_t S = ng__aggr_state_size(&ag);
  const int64_t nd = (int64_t)hb->n_dst * dim, ns = (int64_t)hb->n_src * dim;
  float *src = ng_test_rand_floats(r, ns), *g = ng_test_rand_floats(r, nd);
  float *dsrc = up(src, (size_t)ns * 4), *dg = up(g, (size_t)nd * 4);
  snprintf(what, sizeof what, "%s%s dim %lld", u->name, weighted ? " weighted" : "",
           (long long)dim);
  /* Forward, twice on the GPU. */
  float *c_out = ng_test_xmalloc((size_t)nd * 4);
  EXPECT_OK(cpu->iface->aggr_fwd(cpu, &ag, hb, src, dim, c_out, NULL));
  float *d_out = dpoisoned((size_t)nd * 4);
  EXPECT_OK(gpu->iface->aggr_fwd(gpu, &ag, &db->b, dsrc, dim, d_out, NULL));
  float *g_out = down(d_out, (size_t)nd * 4);
  EXPECT_OK(gpu->iface->aggr_fwd(gpu, &ag, &db->b, dsrc, dim, d_out, NULL));
  float *g_out2 = down(d_out, (size_t)nd * 4);
  cmp_near(what, c_out, g_out, nd);
  EXPECT_TRUE(memcmp(g_out, g_out2, (size_t)nd * 4) == 0);
  /* Partial states with input dropout, merged into a state of the same rows, finalized. */
  for (int drop = 0; drop < 2; drop++) {
    ng_aggr pa = ag;
    pa.drop_p = drop ? 0.3f : 0.0f;
    pa.drop_key = 0xfeed;
    const size_t sb = (size_t)(nd * S) * 4, cb = (size_t)hb->n_dst * 4;
    ng_pstate cs = {ng_test_xmalloc(sb), ng_test_xmalloc(cb), hb->n_dst, dim};
    ng_pstate gs = {dpoisoned(sb), dpoisoned(cb), hb->n_dst, dim};
    EXPECT_OK(cpu->iface->aggr_partial(cpu, &pa, hb, src, &cs));
    EXPECT_OK(gpu->iface->aggr_partial(gpu, &pa, &db->b, dsrc, &gs));
    float *gv = down(gs.val, sb);
    int32_t *gc = down(gs.count, cb);
    snprintf(what, sizeof what, "%s%s dim %lld partial%s", u->name, weighted ? " weighted" : "",
             (long long)dim, drop ? " (dropout)" : "");
    EXPECT_TRUE(memcmp(gc, cs.count, cb) == 0);
    /* Compare only the states of rows with neighbours (an empty row's state is undefined). */
    for (int32_t d = 0; d < hb->n_dst; d++)
      if (cs.count[d] > 0)
        cmp_near(what, cs.val + (int64_t)d * dim * S, gv + (int64_t)d * dim * S, dim * S);
    /* acc = merge(state, state): every row with neighbours doubles its list. */
    ng_pstate cs2 = {ng_test_xmalloc(sb), ng_test_xmalloc(cb), hb->n_dst, dim};
    memcpy(cs2.val, cs.val, sb);
    memcpy(cs2.count, cs.count, cb);
    ng_pstate gs2 = {up(cs.val, sb), up(cs.count, cb), hb->n_dst, dim};
    EXPECT_OK(cpu->iface->pstate_merge(cpu, &ag, &cs2, &cs));
    EXPECT_OK(gpu->iface->pstate_merge(gpu, &ag, &gs2, &gs));
    float *c_fin = ng_test_xmalloc((size_t)nd * 4), *d_fin = dpoisoned((size_t)nd * 4);
    EXPECT_OK(cpu->iface->pstate_finalize(cpu, &ag, &cs2, c_fin));
    EXPECT_OK(gpu->iface->pstate_finalize(gpu, &ag, &gs2, d_fin));
    float *g_fin = down(d_fin, (size_t)nd * 4);
    int32_t *gc2 = down(gs2.count, cb);
    EXPECT_TRUE(memcmp(gc2, cs2.count, cb) == 0);
    cmp_near(what, c_fin, g_fin, nd);
    free(cs.val), free(cs.count), free(cs2.val), free(cs2.count);
    free(gv), free(gc), free(gc2), free(c_fin), free(g_fin);
    gpu->iface->free(gpu, gs.val), gpu->iface->free(gpu, gs.count);
    gpu->iface->free(gpu, gs2.val), gpu->iface->free(gpu, gs2.count);
    gpu->iface->free(gpu, d_fin);
  }
  /* Backward. */
  const size_t wb = ((size_t)hb->nnz + 1) * (size_t)dim * 4;
  float *c_grad = ng_test_xmalloc((size_t)ns * 4), *work = ng_test_xmalloc(wb);
  EXPECT_OK(cpu->iface->aggr_user_bwd(cpu, &ag, hb, src, g, dim, work, c_grad));
  float *d_work = dpoisoned(wb), *d_grad = dpoisoned((size_t)ns * 4);
  EXPECT_OK(gpu->iface->aggr_user_bwd(gpu, &ag, &db->b, dsrc, dg, dim, d_work, d_grad));
  float *g_grad = down(d_grad, (size_t)ns * 4);
  snprintf(what, sizeof what, "%s%s dim %lld backward", u->name, weighted ? " weighted" : "",
           (long long)dim);
  cmp_near(what, c_grad, g_grad, ns);
  free(src), free(g), free(c_out), free(g_out), free(g_out2), free(c_grad), free(work);
  free(g_grad);
  gpu->iface->free(gpu, dsrc), gpu->iface->free(gpu, dg), gpu->iface->free(gpu, d_out);
  gpu->iface->free(gpu, d_work), gpu->iface->free(gpu, d_grad);
}

static void test_user_parity(void) {
  ng_rng r;
  ng_rng_seed(&r, 71);
  ng_test_block tb;
  make_block(&tb, &r, 90, 200, 12);
  dblock db;
  dblock_make(&db, &tb.b);
  const int64_t dims[] = {1, 7, 64, 300, 1024};
  for (size_t i = 0; i < NG_TEST_LEN(DEFS); i++)
    for (int w = 0; w < 2; w++)
      for (size_t k = 0; k < NG_TEST_LEN(dims); k++)
        parity_case(DEFS[i], w, &tb.b, &db, dims[k], &r);
  dblock_free(&db);
  ng_test_block_free(&tb);
}

/* The built-ins through the template hook (nvcc, build time) give aggr_fwd's bits: for sum and
 * mean that is the same kernel, for max and min the template's instance against the
 * hand-written k_aggr_best (inputs without NaN: the template's max starts from -inf). */
static void test_template_builtins(void) {
  static const struct {
    const char *name;
    ng_aggr ag;
  } cases[] = {
      {"sum", {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL}},
      {"sum", {NG_REDUCE_SUM, true, false, false, 0.0f, 0, NULL}},
      {"mean", {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL}},
      {"mean", {NG_REDUCE_SUM, true, false, true, 0.0f, 0, NULL}},
      {"max", {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL}},
      {"min", {NG_REDUCE_MIN, false, false, false, 0.0f, 0, NULL}},
  };
  ng_rng r;
  ng_rng_seed(&r, 73);
  ng_test_block tb;
  make_block(&tb, &r, 300, 700, 20);
  dblock db;
  dblock_make(&db, &tb.b);
  const int64_t dims[] = {3, 128, 1024};
  for (size_t k = 0; k < NG_TEST_LEN(dims); k++)
    for (size_t c = 0; c < NG_TEST_LEN(cases); c++) {
      const int64_t dim = dims[k], nd = (int64_t)tb.b.n_dst * dim;
      const int64_t ns = (int64_t)tb.b.n_src * dim;
      float *src = ng_test_rand_floats(&r, ns), *dsrc = up(src, (size_t)ns * 4);
      float *a = dpoisoned((size_t)nd * 4), *b = dpoisoned((size_t)nd * 4);
      int32_t *arg = cases[c].ag.reduce == NG_REDUCE_SUM ? NULL : dpoisoned((size_t)nd * 4);
      EXPECT_OK(gpu->iface->aggr_fwd(gpu, &cases[c].ag, &db.b, dsrc, dim, a, arg));
      EXPECT_OK(
          ng__cuda_template_builtin_fwd(gpu, cases[c].name, &cases[c].ag, &db.b, dsrc, dim, b));
      float *ha = down(a, (size_t)nd * 4), *hbuf = down(b, (size_t)nd * 4);
      if (memcmp(ha, hbuf, (size_t)nd * 4) != 0)
        ng_test_fail(__FILE__, __LINE__, "template %s%s dim %lld differs from aggr_fwd",
                     cases[c].name, cases[c].ag.weighted ? " weighted" : "", (long long)dim);
      free(src), free(ha), free(hbuf);
      gpu->iface->free(gpu, dsrc), gpu->iface->free(gpu, a), gpu->iface->free(gpu, b);
      if (arg)
        gpu->iface->free(gpu, arg);
    }
  /* The built-in mean's text through NVRTC, as a user aggregator: the same bits again. */
  ng_aggregator_def mean = ng_test_mean;
  mean.name = "builtin-mean-via-nvrtc";
  mean.source = ng__cuda_builtin_agg_source("mean");
  EXPECT_TRUE(mean.source != NULL);
  const ng_aggr user = user_aggr(&mean, false);
  const ng_aggr builtin = {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL};
  const int64_t dim = 128, nd = (int64_t)tb.b.n_dst * dim, ns = (int64_t)tb.b.n_src * dim;
  float *src = ng_test_rand_floats(&r, ns), *dsrc = up(src, (size_t)ns * 4);
  float *a = dpoisoned((size_t)nd * 4), *b = dpoisoned((size_t)nd * 4);
  EXPECT_OK(gpu->iface->aggr_fwd(gpu, &builtin, &db.b, dsrc, dim, a, NULL));
  EXPECT_OK(gpu->iface->aggr_fwd(gpu, &user, &db.b, dsrc, dim, b, NULL));
  float *ha = down(a, (size_t)nd * 4), *hbuf = down(b, (size_t)nd * 4);
  EXPECT_TRUE(memcmp(ha, hbuf, (size_t)nd * 4) == 0);
  free(src), free(ha), free(hbuf);
  gpu->iface->free(gpu, dsrc), gpu->iface->free(gpu, a), gpu->iface->free(gpu, b);
  dblock_free(&db);
  ng_test_block_free(&tb);
}

/* ---- the built-ins' bits ---- */

/* Element (row, c) of a dim-wide table after ag's input dropout (core/rng.h's rule). */
static float ref_drop(const ng_aggr *ag, float x, int64_t row, int64_t dim, int64_t c) {
  if (ag->drop_p <= 0.0f)
    return x;
  const float scale = 1.0f / (1.0f - ag->drop_p);
  return ng_dropped(x, ag->drop_key, (uint64_t)(row * dim + c), ng_dropout_threshold(ag->drop_p),
                    scale);
}

/* The SUM family's specification (sum, mean, weighted, GCN's self loop), per element: the sum
 * of (w *) x over the edges in order, then / n when mean and n > 0, then + self_w[d] x_d; an
 * empty row gives 0 (plus its self loop). `state`: the bare sum (no mean, no self loop) and
 * the counts. */
static void ref_sum(const ng_aggr *ag, const ng_block *b, const float *src, int64_t dim, bool state,
                    float *out, int32_t *count) {
  for (int32_t d = 0; d < b->n_dst; d++) {
    const int32_t e0 = b->indptr[d], e1 = b->indptr[d + 1];
    if (count)
      count[d] = e1 - e0;
    for (int64_t c = 0; c < dim; c++) {
      float acc = 0.0f;
      for (int32_t e = e0; e < e1; e++) {
        const int64_t r = b->indices[e];
        const float x = ref_drop(ag, src[r * dim + c], r, dim, c);
        acc = ag->weighted ? acc + b->edge_w[e] * x : acc + x;
      }
      if (!state && ag->mean && e1 > e0)
        acc = acc / (float)(e1 - e0);
      if (!state && ag->self_loop)
        acc = acc + b->self_w[d] * src[(int64_t)d * dim + c];
      out[(int64_t)d * dim + c] = acc;
    }
  }
}

/* MAX/MIN's specification (the CPU backend's aggr_best and partial state), per element: the
 * first neighbour's value (after its input dropout), replaced only by a strictly greater (max)
 * or smaller (min) later one, so that a NaN first neighbour stays, a later NaN never wins, and
 * neither does a tie or a repeated source; arg: the source row of the value kept. A row without
 * neighbours gives 0 and arg -1. `count`: the neighbours (partial state). */
static void ref_best(const ng_aggr *ag, const ng_block *b, const float *src, int64_t dim,
                     float *out, int32_t *arg, int32_t *count) {
  const bool is_max = ag->reduce == NG_REDUCE_MAX;
  for (int32_t d = 0; d < b->n_dst; d++) {
    const int32_t e0 = b->indptr[d], e1 = b->indptr[d + 1];
    if (count)
      count[d] = e1 - e0;
    for (int64_t c = 0; c < dim; c++) {
      float best = 0.0f;
      int32_t a = -1;
      for (int32_t e = e0; e < e1; e++) {
        const int32_t r = b->indices[e];
        const float x = ref_drop(ag, src[(int64_t)r * dim + c], r, dim, c);
        if (e == e0 || (is_max ? x > best : x < best)) {
          best = x;
          a = r;
        }
      }
      out[(int64_t)d * dim + c] = best;
      if (arg)
        arg[(int64_t)d * dim + c] = a;
    }
  }
}

/* merge then finalize of two partial states of `red` (mean divides), per element. */
static void ref_merge_finalize(const ng_aggr *ag, float *acc, int32_t *acc_count,
                               const float *other, const int32_t *other_count, int32_t nd,
                               int64_t dim, float *out) {
  for (int32_t d = 0; d < nd; d++)
    for (int64_t c = 0; c < dim; c++) {
      const int64_t i = (int64_t)d * dim + c;
      if (other_count[d] == 0)
        continue;
      if (acc_count[d] == 0)
        acc[i] = other[i];
      else if (ag->reduce == NG_REDUCE_SUM)
        acc[i] = acc[i] + other[i];
      else if (ag->reduce == NG_REDUCE_MAX)
        acc[i] = other[i] > acc[i] ? other[i] : acc[i];
      else
        acc[i] = other[i] < acc[i] ? other[i] : acc[i];
    }
  for (int32_t d = 0; d < nd; d++) {
    acc_count[d] += other_count[d];
    for (int64_t c = 0; c < dim; c++) {
      const int64_t i = (int64_t)d * dim + c;
      out[i] = acc_count[d] == 0 ? 0.0f : ag->mean ? acc[i] / (float)acc_count[d] : acc[i];
    }
  }
}

static void cmp_bits(const char *what, const void *want, const void *got, size_t bytes) {
  if (memcmp(want, got, bytes) == 0)
    return;
  size_t i = 0;
  while (((const unsigned char *)want)[i] == ((const unsigned char *)got)[i])
    i++;
  const size_t at = i / 4;
  float w, g;
  memcpy(&w, (const char *)want + at * 4, 4);
  memcpy(&g, (const char *)got + at * 4, 4);
  ng_test_fail(__FILE__, __LINE__, "%s: element %zu differs: want %a, got %a", what, at, (double)w,
               (double)g);
}

/* As cmp_bits over n floats, except that with `nan_any` any NaN matches any NaN: a NaN that
 * went through input dropout's multiply, whose payload the GPU's __fmul_rn need not keep as the
 * host's multiply does (everything else, NaN payloads without dropout included, byte for byte). */
static void cmp_floats(const char *what, const float *want, const float *got, int64_t n,
                       bool nan_any) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&want[i], &got[i], 4) != 0 && !(nan_any && isnan(want[i]) && isnan(got[i]))) {
      ng_test_fail(__FILE__, __LINE__, "%s: element %lld differs: want %a, got %a", what,
                   (long long)i, (double)want[i], (double)got[i]);
      return;
    }
}

/* Values for max and min: multiples of 0.5 in [-2, 2] (many ties between neighbours), with
 * -0 beside +0, NaNs of three payloads (one every 37: a NaN first neighbour is common),
 * infinities and subnormals; bf16 keeps all of them (quantised values are exact). */
static float *select_floats(ng_rng *r, int64_t n) {
  static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7fffffffu};
  float *x = ng_test_xmalloc((size_t)(n ? n : 1) * 4);
  for (int64_t i = 0; i < n; i++) {
    x[i] = 0.5f * (float)((int)ng_rng_below(r, 9) - 4);
    if (i % 37 == 11)
      memcpy(&x[i], &nans[(i / 37) % 3], 4);
    else if (i % 53 == 7)
      x[i] = -0.0f;
    else if (i % 71 == 3)
      x[i] = i & 1 ? -INFINITY : INFINITY;
    else if (i % 83 == 5)
      x[i] = (i & 1 ? -1.0f : 1.0f) * 1.5e-40f;
  }
  return x;
}

/* MAX/MIN (the template's selection instances) against ref_best, byte for byte: aggr_fwd with
 * argbest (aligned, and misaligned by one int, which takes the V = 1 instances) and without it;
 * partial states (values, empty rows' 0, counts) from the fp32 and the bf16 table, with and without
 * input dropout. */
static void check_best(const ng_aggr *base, const char *name, const ng_block *hb, const dblock *db,
                       int64_t dim, const float *sel, const float *dsel, const float *selc,
                       const uint16_t *dsel16, int k) {
  char what[160];
  const int64_t nd = (int64_t)hb->n_dst * dim;
  const size_t ob = (size_t)nd * 4, cb = (size_t)hb->n_dst * 4;
  float *want = ng_test_xmalloc(ob);
  int32_t *warg = ng_test_xmalloc(ob), *wcount = ng_test_xmalloc(cb);
  /* Forward (no dropout: aggr_fwd takes none). */
  ref_best(base, hb, sel, dim, want, warg, NULL);
  float *dout = dpoisoned(ob);
  int32_t *darg = dpoisoned(ob + 4);
  for (int mis = 0; mis < 3; mis++) {
    int32_t *a = mis == 2 ? NULL : darg + mis;
    EXPECT_OK(gpu->iface->fill(gpu, dout, nd, NAN));
    EXPECT_OK(gpu->iface->aggr_fwd(gpu, base, &db->b, dsel, dim, dout, a));
    float *got = down(dout, ob);
    snprintf(what, sizeof what, "aggr_fwd %s dim %lld%s", name, (long long)dim,
             mis == 2 ? " without argbest"
             : mis    ? " (argbest misaligned)"
                      : "");
    cmp_bits(what, want, got, ob);
    free(got);
    if (a) {
      int32_t *garg = down(a, ob);
      snprintf(what, sizeof what, "argbest %s dim %lld%s", name, (long long)dim,
               mis ? " (misaligned)" : "");
      cmp_bits(what, warg, garg, ob);
      free(garg);
    }
  }
  /* Partial states. */
  for (int drop = 0; drop < 2; drop++)
    for (int bf = 0; bf < 2; bf++) {
      ng_aggr ag = *base;
      ag.drop_p = drop ? 0.25f : 0.0f;
      ag.drop_key = 0x5eed + (uint64_t)k;
      ref_best(&ag, hb, bf ? selc : sel, dim, want, NULL, wcount);
      ng_pstate gs = {dpoisoned(ob), dpoisoned(cb), hb->n_dst, dim};
      if (bf)
        EXPECT_OK(gpu->iface->aggr_partial_bf16(gpu, &ag, &db->b, dsel16, &gs));
      else
        EXPECT_OK(gpu->iface->aggr_partial(gpu, &ag, &db->b, dsel, &gs));
      float *gv = down(gs.val, ob);
      int32_t *gc = down(gs.count, cb);
      snprintf(what, sizeof what, "aggr_partial%s %s dim %lld%s", bf ? "_bf16" : "", name,
               (long long)dim, drop ? " dropout" : "");
      cmp_floats(what, want, gv, nd, drop);
      cmp_bits(what, wcount, gc, cb);
      free(gv), free(gc);
      gpu->iface->free(gpu, gs.val), gpu->iface->free(gpu, gs.count);
    }
  free(want), free(warg), free(wcount);
  gpu->iface->free(gpu, dout), gpu->iface->free(gpu, darg);
}

/* Random values with, every 89th and 97th, -0 and a subnormal (which the kernels keep: no
 * flush to zero). */
static float *special_floats(ng_rng *r, int64_t n) {
  float *x = ng_test_rand_floats(r, n);
  for (int64_t i = 0; i < n; i++)
    if (i % 89 == 5)
      x[i] = -0.0f;
    else if (i % 97 == 7)
      x[i] = (i & 1 ? -1.0f : 1.0f) * 1.5e-40f;
  return x;
}

/* Every built-in op against the reference, bit for bit: the forward of
 * sum, mean, weighted sum and mean, GCN (weighted + self loop), mean with self loop, max and
 * min (with argbest); partial states of sum, mean, max and min from fp32 and bf16 tables with
 * and without dropout (states and counts); merge and finalize of sum, mean, max and min. Dims
 * cover V = 1 and 4 and T = 1, 2, 4, 8 chunks with tails; the block has empty rows and
 * repeated sources; max and min read select_floats (ties, NaNs, infinities, -0). */
static void test_builtin_bits(void) {
  static const struct {
    const char *name;
    ng_aggr ag;
  } cases[] = {
      {"sum", {NG_REDUCE_SUM, false, false, false, 0.0f, 0, NULL}},
      {"mean", {NG_REDUCE_SUM, false, false, true, 0.0f, 0, NULL}},
      {"weighted sum", {NG_REDUCE_SUM, true, false, false, 0.0f, 0, NULL}},
      {"weighted mean", {NG_REDUCE_SUM, true, false, true, 0.0f, 0, NULL}},
      {"gcn", {NG_REDUCE_SUM, true, true, false, 0.0f, 0, NULL}},
      {"mean+self", {NG_REDUCE_SUM, false, true, true, 0.0f, 0, NULL}},
      {"max", {NG_REDUCE_MAX, false, false, false, 0.0f, 0, NULL}},
      {"min", {NG_REDUCE_MIN, false, false, false, 0.0f, 0, NULL}},
  };
  ng_rng r;
  ng_rng_seed(&r, 83);
  ng_test_block tb, tb2;
  make_block(&tb, &r, 260, 600, 24);
  /* The second block's empty rows are others (d % 7 == 3): every merge case occurs. */
  tb2.indptr = ng_test_xmalloc(261 * 4);
  tb2.indptr[0] = 0;
  for (int32_t d = 0; d < 260; d++)
    tb2.indptr[d + 1] = tb2.indptr[d] + (d % 7 == 3 ? 0 : 1 + (int32_t)ng_rng_below(&r, 9));
  ng_test_block_fill(&tb2, &r, 260, 600, true, true);
  dblock db, db2;
  dblock_make(&db, &tb.b);
  dblock_make(&db2, &tb2.b);
  const int64_t dims[] = {1, 3, 4, 5, 128, 130, 256, 512, 1024, 1028};
  char what[160];
  for (size_t k = 0; k < NG_TEST_LEN(dims); k++) {
    const int64_t dim = dims[k], nd = (int64_t)tb.b.n_dst * dim, ns = (int64_t)tb.b.n_src * dim;
    const size_t ob = (size_t)nd * 4, cb = (size_t)tb.b.n_dst * 4;
    float *src = special_floats(&r, ns), *dsrc = up(src, (size_t)ns * 4);
    /* The bf16 table and its exact fp32 values. */
    uint16_t *src16 = ng_test_xmalloc((size_t)ns * 2);
    float *conv = ng_test_xmalloc((size_t)ns * 4);
    for (int64_t i = 0; i < ns; i++) {
      src16[i] = ng_f32_to_bf16(src[i]);
      conv[i] = ng_bf16_to_f32(src16[i]);
    }
    uint16_t *dsrc16 = up(src16, (size_t)ns * 2);
    /* Max's and min's table, its bf16 form and that form's exact fp32 values. */
    float *sel = select_floats(&r, ns), *dsel = up(sel, (size_t)ns * 4);
    uint16_t *sel16 = ng_test_xmalloc((size_t)ns * 2);
    float *selc = ng_test_xmalloc((size_t)ns * 4);
    for (int64_t i = 0; i < ns; i++) {
      sel16[i] = ng_f32_to_bf16(sel[i]);
      selc[i] = ng_bf16_to_f32(sel16[i]);
    }
    uint16_t *dsel16 = up(sel16, (size_t)ns * 2);
    float *want = ng_test_xmalloc(ob), *dout = dpoisoned(ob);
    for (size_t c = 0; c < NG_TEST_LEN(cases); c++)
      for (int drop = 0; drop < 2; drop++) {
        ng_aggr ag = cases[c].ag;
        ag.drop_p = drop ? 0.25f : 0.0f;
        ag.drop_key = 0x5eed + (uint64_t)k;
        if (ag.reduce == NG_REDUCE_SUM) {
          /* Forward (only aggr_partial takes input dropout). */
          if (!drop) {
            ref_sum(&ag, &tb.b, src, dim, false, want, NULL);
            EXPECT_OK(gpu->iface->fill(gpu, dout, nd, NAN));
            EXPECT_OK(gpu->iface->aggr_fwd(gpu, &ag, &db.b, dsrc, dim, dout, NULL));
            float *got = down(dout, ob);
            snprintf(what, sizeof what, "aggr_fwd %s dim %lld", cases[c].name, (long long)dim);
            cmp_bits(what, want, got, ob);
            /* The feature store finalizes an input layer with no cold edge in aggr_fwd instead
             * of a partial state and pstate_finalize: the same bits. */
            if (!ag.self_loop) {
              ng_pstate gs = {dpoisoned(ob), dpoisoned(cb), tb.b.n_dst, dim};
              EXPECT_OK(gpu->iface->aggr_partial(gpu, &ag, &db.b, dsrc, &gs));
              EXPECT_OK(gpu->iface->fill(gpu, dout, nd, NAN));
              EXPECT_OK(gpu->iface->pstate_finalize(gpu, &ag, &gs, dout));
              float *fin = down(dout, ob);
              snprintf(what, sizeof what, "aggr_fwd = aggr_partial + pstate_finalize, %s dim %lld",
                       cases[c].name, (long long)dim);
              cmp_bits(what, got, fin, ob);
              free(fin);
              gpu->iface->free(gpu, gs.val), gpu->iface->free(gpu, gs.count);
            }
            free(got);
          }
          if (ag.self_loop)
            continue; /* a partial state has no self loop */
          /* Partial states, fp32 and bf16 tables. */
          for (int bf = 0; bf < 2; bf++) {
            int32_t *wcount = ng_test_xmalloc(cb);
            ref_sum(&ag, &tb.b, bf ? conv : src, dim, true, want, wcount);
            ng_pstate gs = {dpoisoned(ob), dpoisoned(cb), tb.b.n_dst, dim};
            if (bf)
              EXPECT_OK(gpu->iface->aggr_partial_bf16(gpu, &ag, &db.b, dsrc16, &gs));
            else
              EXPECT_OK(gpu->iface->aggr_partial(gpu, &ag, &db.b, dsrc, &gs));
            float *gv = down(gs.val, ob);
            int32_t *gc = down(gs.count, cb);
            snprintf(what, sizeof what, "aggr_partial%s %s dim %lld%s", bf ? "_bf16" : "",
                     cases[c].name, (long long)dim, drop ? " dropout" : "");
            cmp_bits(what, want, gv, ob);
            cmp_bits(what, wcount, gc, cb);
            free(gv), free(gc), free(wcount);
            gpu->iface->free(gpu, gs.val), gpu->iface->free(gpu, gs.count);
          }
        } else if (!drop) {
          check_best(&ag, cases[c].name, &tb.b, &db, dim, sel, dsel, selc, dsel16, (int)k);
        }
        const float *tab = ag.reduce == NG_REDUCE_SUM ? dsrc : dsel;
        /* Merge and finalize: two blocks' partial states (from the GPU) merged, finalized. */
        if (drop)
          continue;
        ng_pstate g1 = {dpoisoned(ob), dpoisoned(cb), tb.b.n_dst, dim};
        ng_pstate g2 = {dpoisoned(ob), dpoisoned(cb), tb.b.n_dst, dim};
        EXPECT_OK(gpu->iface->aggr_partial(gpu, &ag, &db.b, tab, &g1));
        EXPECT_OK(gpu->iface->aggr_partial(gpu, &ag, &db2.b, tab, &g2));
        float *v1 = down(g1.val, ob), *v2 = down(g2.val, ob);
        int32_t *c1 = down(g1.count, cb), *c2 = down(g2.count, cb);
        ref_merge_finalize(&ag, v1, c1, v2, c2, tb.b.n_dst, dim, want);
        EXPECT_OK(gpu->iface->pstate_merge(gpu, &ag, &g1, &g2));
        EXPECT_OK(gpu->iface->pstate_finalize(gpu, &ag, &g1, dout));
        float *mv = down(g1.val, ob), *got = down(dout, ob);
        int32_t *mc = down(g1.count, cb);
        snprintf(what, sizeof what, "pstate_merge %s dim %lld", cases[c].name, (long long)dim);
        cmp_bits(what, v1, mv, ob);
        cmp_bits(what, c1, mc, cb);
        snprintf(what, sizeof what, "pstate_finalize %s dim %lld", cases[c].name, (long long)dim);
        cmp_bits(what, want, got, ob);
        free(v1), free(v2), free(c1), free(c2), free(mv), free(got), free(mc);
        gpu->iface->free(gpu, g1.val), gpu->iface->free(gpu, g1.count);
        gpu->iface->free(gpu, g2.val), gpu->iface->free(gpu, g2.count);
      }
    free(src), free(src16), free(conv), free(want), free(sel), free(sel16), free(selc);
    gpu->iface->free(gpu, dsrc), gpu->iface->free(gpu, dsrc16), gpu->iface->free(gpu, dout);
    gpu->iface->free(gpu, dsel), gpu->iface->free(gpu, dsel16);
  }
  dblock_free(&db);
  dblock_free(&db2);
  ng_test_block_free(&tb);
  ng_test_block_free(&tb2);
}

/* Errors: a CPU-only aggregator (no source) and a source NVRTC rejects, with their reasons. */
static void test_errors(void) {
  ng_rng r;
  ng_rng_seed(&r, 79);
  ng_test_block tb;
  make_block(&tb, &r, 10, 20, 4);
  dblock db;
  dblock_make(&db, &tb.b);
  float *src = ng_test_rand_floats(&r, 20 * 4), *dsrc = up(src, 20 * 16);
  float *out = dpoisoned(10 * 16);
  ng_aggregator_def d = ng_test_mean;
  d.source = NULL;
  ng_aggr ag = user_aggr(&d, false);
  EXPECT_STATUS(gpu->iface->aggr_fwd(gpu, &ag, &db.b, dsrc, 4, out, NULL), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("CPU only");
  d = ng_test_mean;
  d.name = "broken";
  d.source = "NG_AGG_FN void agg_init(float *s) { s[0] = no_such_name; }"
             "NG_AGG_FN void agg_accumulate(float *s, float x, float w) { s[0] += w * x; }"
             "NG_AGG_FN void agg_merge(float *s, const float *t) { s[0] += t[0]; }"
             "NG_AGG_FN float agg_finalize(const float *s, float n) { return s[0] / n; }";
  ag = user_aggr(&d, false);
  EXPECT_STATUS(gpu->iface->aggr_fwd(gpu, &ag, &db.b, dsrc, 4, out, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("no_such_name");
  free(src);
  gpu->iface->free(gpu, dsrc), gpu->iface->free(gpu, out);
  dblock_free(&db);
  ng_test_block_free(&tb);
}

/* Cora with a user aggregator on CUDA: every fetch strategy follows the CPU backend. */
static void test_training(void) {
  ng_dataset_t cora = ng_test_fetch_cora();
  if (!cora)
    return;
  const ng_mode modes[] = {NG_MODE_PARTIAL, NG_MODE_BASELINE, NG_MODE_ZEROCOPY};
  for (size_t i = 0; i < 2; i++) {
    ng_test_fetch_run run = {.device = "cpu",
                             .mode = NG_MODE_PARTIAL,
                             .transfer = NG_FETCH_AUTO,
                             .workers = -1,
                             .partial_workers = -1,
                             .cache_ratio = 0.3,
                             .kind = NG_MODEL_SAGE,
                             .dropout = 0.5f,
                             .threads = 2};
    EXPECT_OK(ng_aggregator_define(&run.aggregator, DEFS[i]));
    ng_test_fetch_result ref, r;
    if (!ng_test_fetch_train(cora, &run, &ref))
      continue;
    run.device = "cuda";
    for (size_t m = 0; m < NG_TEST_LEN(modes); m++) {
      run.mode = modes[m];
      if (!ng_test_fetch_train(cora, &run, &r))
        continue;
      for (int e = 0; e < NG_TEST_FETCH_EPOCHS; e++)
        EXPECT_NEAR(r.loss[e], ref.loss[e], 1e-3 * fabs(ref.loss[e]));
      EXPECT_EQ_I(r.fetch.hot_rows, ref.fetch.hot_rows);
      EXPECT_EQ_I(r.fetch.cold_rows, ref.fetch.cold_rows);
      free(r.checkpoint);
    }
    free(ref.checkpoint);
  }
  ng_dataset_close(cora);
}

int main(void) {
  int count = 0;
  char desc[512];
  if (ng__cuda_devices(&count, desc, sizeof desc) != NG_OK || count == 0) {
    printf("gpu_agg: skipped: no CUDA device visible\n");
    return 77;
  }
  printf("gpu_agg: %s\n", desc);
  if (ng__backend_cpu_create(&cpu, 0) != NG_OK || ng__backend_cuda_create(&gpu, 0) != NG_OK) {
    printf("gpu_agg: creating the backends failed: %s\n", ng_last_error());
    return 1;
  }
  RUN_TEST(test_user_parity);
  RUN_TEST(test_template_builtins);
  RUN_TEST(test_builtin_bits);
  RUN_TEST(test_errors);
  RUN_TEST(test_training);
  ng__backend_destroy(gpu);
  ng__backend_destroy(cpu);
  return ng_test_summary();
}
#endif
