/* GAT on the CUDA backend: the attention ops (attn_fwd, attn_bwd) against the CPU backend (the
 * reference, whose gradients tests/test_gradcheck.c checks by finite differences) with outputs
 * poisoned before each op and every CUDA op run twice for the same bytes; then Cora trained
 * with GAT on the GPU (the accuracy bar of tests/test_train.c, losses near the CPU's), and the
 * raw-row strategies (batched, zero-copy, hybrid) giving the same bits on the GPU; GIN and
 * SAGE-pool trained on the GPU against the CPU; GAT and GIN served on the GPU with cold rows
 * aggregated by CPU workers, against the CPU's unsplit forward.
 *
 * Tolerance: |cpu - gpu| <= 1e-4 * (|cpu| + max |cpu| of the tensor / 100). The softmax's
 * expf and the order-preserving but FMA-contracted sums of the device differ from the CPU's by
 * a few ulps of each term, which the exponentials can amplify to some 1e-6 relative; a wrong
 * coefficient or a missed slot is off by far more. Coefficients (alpha) also sum to 1 per
 * destination and head. Exits 77 (skipped) without CUDA or without a device. */
#include "ng_cpu.h"
#include "ng_test.h"
#include "ng_test_fetch.h"
#include "ng_test_graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef NG_HAVE_CUDA

int main(void) {
  printf("gpu_attn: skipped: this build has no CUDA backend (configure with -DNG_CUDA=ON)\n");
  return 77;
}

#else

#include "neargnn_serve.h"
#include "ng_cuda.h"
#include "trainer_impl.h"

static ng_backend *cpu, *gpu;

static void *up(const void *h, size_t bytes) {
  void *d = NULL;
  EXPECT_OK(gpu->iface->alloc(gpu, &d, bytes ? bytes : 4));
  if (bytes)
    EXPECT_OK(gpu->iface->copy_h2d(gpu, d, h, bytes));
  return d;
}

static void down(void *h, const void *d, size_t bytes) {
  if (bytes)
    EXPECT_OK(gpu->iface->copy_d2h(gpu, h, d, bytes));
}

/* A device buffer of 0xff bytes (NaN as floats). */
static void *dpoison(size_t bytes) {
  void *p = ng_test_xmalloc(bytes ? bytes : 4);
  memset(p, 0xff, bytes ? bytes : 4);
  void *d = up(p, bytes);
  free(p);
  return d;
}

static void cmp_near(const char *what, const float *c, const float *g, int64_t n) {
  double top = 0.0;
  for (int64_t i = 0; i < n; i++)
    top = fmax(top, fabs((double)c[i]));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double bound = 1e-4 * (fabs((double)c[i]) + top / 100.0);
    if (!(fabs((double)c[i] - (double)g[i]) <= bound) && bad++ < 3)
      ng_test_fail(__FILE__, __LINE__, "%s: element %lld: cpu %.9g, gpu %.9g (bound %.3g)", what,
                   (long long)i, (double)c[i], (double)g[i], bound);
  }
  if (bad > 3)
    ng_test_fail(__FILE__, __LINE__, "%s: %lld of %lld elements differ", what, (long long)bad,
                 (long long)n);
}

typedef struct {
  ng_block b;
  void *p[5];
} dblock;

static void dblock_up(dblock *db, const ng_block *h) {
  size_t nnz = (size_t)h->nnz, nd = (size_t)h->n_dst, ns = (size_t)h->n_src;
  db->p[0] = up(h->indptr, (nd + 1) * 4);
  db->p[1] = up(h->indices, nnz * 4);
  db->p[2] = up(h->t_indptr, (ns + 1) * 4);
  db->p[3] = up(h->t_dst, nnz * 4);
  db->p[4] = up(h->t_eid, nnz * 4);
  db->b = *h;
  db->b.indptr = db->p[0];
  db->b.indices = db->p[1];
  db->b.edge_w = NULL;
  db->b.self_w = NULL;
  db->b.t_indptr = db->p[2];
  db->b.t_dst = db->p[3];
  db->b.t_eid = db->p[4];
}

static void dblock_free(dblock *db) {
  for (int i = 0; i < 5; i++)
    gpu->iface->free(gpu, db->p[i]);
}

/* One attention case on both backends: forward, backward, twice on the GPU. */
static void attn_case(const char *bname, const ng_block *hb, const ng_attn *at, ng_rng *r) {
  char what[160];
  snprintf(what, sizeof what, "%s, %d heads x %lld%s, drop %.1f", bname, (int)at->heads,
           (long long)at->head_dim, at->mean_heads ? " mean" : "", (double)at->drop_p);
  const int64_t kf = at->heads * at->head_dim, nz = hb->n_src * kf;
  const int64_t slots = (hb->nnz + hb->n_dst) * at->heads;
  const int64_t out_n = hb->n_dst * (at->mean_heads ? at->head_dim : kf);
  const int64_t work_n = ng_attn_bwd_work(at, hb->n_dst, hb->n_src, hb->nnz);
  float *z = ng_test_rand_floats(r, nz), *as = ng_test_rand_floats(r, kf);
  float *ad = ng_test_rand_floats(r, kf), *g = ng_test_rand_floats(r, out_n);
  for (int64_t i = 0; i < kf; i++) { /* scores of a few units: a peaked softmax */
    as[i] *= 3.0f;
    ad[i] *= 3.0f;
  }
  /* The CPU reference. */
  float *c_alpha = ng_test_xmalloc((size_t)(slots + 1) * 4);
  float *c_out = ng_test_xmalloc((size_t)(out_n + 1) * 4);
  float *c_work = ng_test_xmalloc((size_t)(work_n + 1) * 4);
  float *c_gz = ng_test_xmalloc((size_t)(nz + 1) * 4), *c_gs = ng_test_xmalloc((size_t)kf * 4);
  float *c_gd = ng_test_xmalloc((size_t)kf * 4);
  EXPECT_OK(cpu->iface->attn_fwd(cpu, at, hb, z, as, ad, c_alpha, c_out));
  EXPECT_OK(cpu->iface->attn_bwd(cpu, at, hb, z, as, ad, c_alpha, g, c_work, c_gz, c_gs, c_gd));
  /* The GPU, twice. */
  dblock db;
  dblock_up(&db, hb);
  float *dz = up(z, (size_t)nz * 4), *das = up(as, (size_t)kf * 4), *dad = up(ad, (size_t)kf * 4);
  float *dg = up(g, (size_t)out_n * 4);
  float *h_alpha[2], *h_out[2], *h_gz[2], *h_gs[2], *h_gd[2];
  for (int rep = 0; rep < 2; rep++) {
    float *d_alpha = dpoison((size_t)slots * 4), *d_out = dpoison((size_t)out_n * 4);
    float *d_work = dpoison((size_t)work_n * 4), *d_gz = dpoison((size_t)nz * 4);
    float *d_gs = dpoison((size_t)kf * 4), *d_gd = dpoison((size_t)kf * 4);
    EXPECT_OK(gpu->iface->attn_fwd(gpu, at, &db.b, dz, das, dad, d_alpha, d_out));
    EXPECT_OK(
        gpu->iface->attn_bwd(gpu, at, &db.b, dz, das, dad, d_alpha, dg, d_work, d_gz, d_gs, d_gd));
    h_alpha[rep] = ng_test_xmalloc((size_t)(slots + 1) * 4);
    h_out[rep] = ng_test_xmalloc((size_t)(out_n + 1) * 4);
    h_gz[rep] = ng_test_xmalloc((size_t)(nz + 1) * 4);
    h_gs[rep] = ng_test_xmalloc((size_t)kf * 4);
    h_gd[rep] = ng_test_xmalloc((size_t)kf * 4);
    down(h_alpha[rep], d_alpha, (size_t)slots * 4);
    down(h_out[rep], d_out, (size_t)out_n * 4);
    down(h_gz[rep], d_gz, (size_t)nz * 4);
    down(h_gs[rep], d_gs, (size_t)kf * 4);
    down(h_gd[rep], d_gd, (size_t)kf * 4);
    void *bufs[] = {d_alpha, d_out, d_work, d_gz, d_gs, d_gd};
    for (size_t i = 0; i < NG_TEST_LEN(bufs); i++)
      gpu->iface->free(gpu, bufs[i]);
  }
  char w2[200];
#define CMP(name, c, h, n)                                                                         \
  do {                                                                                             \
    snprintf(w2, sizeof w2, "%s: %s", what, name);                                                 \
    cmp_near(w2, c, h[0], n);                                                                      \
    if ((n) > 0 && memcmp(h[0], h[1], (size_t)(n)*4) != 0)                                         \
      ng_test_fail(__FILE__, __LINE__, "%s: two GPU runs differ", w2);                             \
  } while (0)
  CMP("alpha", c_alpha, h_alpha, slots);
  CMP("out", c_out, h_out, out_n);
  CMP("grad z", c_gz, h_gz, nz);
  CMP("grad att_src", c_gs, h_gs, kf);
  CMP("grad att_dst", c_gd, h_gd, kf);
#undef CMP
  for (int32_t d = 0; d < hb->n_dst; d++)
    for (int k = 0; k < at->heads; k++) {
      double sum = h_alpha[0][(hb->nnz + d) * at->heads + k];
      for (int32_t e = hb->indptr[d]; e < hb->indptr[d + 1]; e++)
        sum += h_alpha[0][(int64_t)e * at->heads + k];
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  for (int rep = 0; rep < 2; rep++) {
    free(h_alpha[rep]);
    free(h_out[rep]);
    free(h_gz[rep]);
    free(h_gs[rep]);
    free(h_gd[rep]);
  }
  void *dbufs[] = {dz, das, dad, dg};
  for (size_t i = 0; i < NG_TEST_LEN(dbufs); i++)
    gpu->iface->free(gpu, dbufs[i]);
  dblock_free(&db);
  free(z);
  free(as);
  free(ad);
  free(g);
  free(c_alpha);
  free(c_out);
  free(c_work);
  free(c_gz);
  free(c_gs);
  free(c_gd);
}

static void test_attn_parity(void) {
  static const struct {
    const char *name;
    int32_t nd, ns, max_deg;
    bool repeats, dup;
  } blocks[] = {
      {"small", 9, 21, 5, false, false},
      {"duplicate edge", 12, 30, 6, false, true},
      {"large fanout", 40, 300, 200, true, false},
      {"many destinations", 3000, 5000, 12, false, false},
      {"no destination", 0, 7, 1, false, false},
  };
  static const struct {
    int32_t heads;
    int64_t head_dim;
    bool mean;
    float drop_p;
  } shapes[] = {{1, 7, false, 0.0f}, {8, 8, false, 0.6f}, {3, 5, true, 0.0f}, {1, 7, true, 0.6f}};
  ng_rng r;
  ng_rng_seed(&r, 2201);
  for (size_t bi = 0; bi < NG_TEST_LEN(blocks); bi++) {
    ng_test_block tb;
    tb.indptr = ng_test_xmalloc(((size_t)blocks[bi].nd + 1) * 4);
    tb.indptr[0] = 0;
    for (int32_t d = 0; d < blocks[bi].nd; d++) {
      int32_t deg = d % 5 == 4 ? 0 : 1 + (int32_t)ng_rng_below(&r, (uint64_t)blocks[bi].max_deg);
      tb.indptr[d + 1] = tb.indptr[d] + deg;
    }
    ng_test_block_fill(&tb, &r, blocks[bi].nd, blocks[bi].ns, blocks[bi].repeats, blocks[bi].dup);
    for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
      const ng_attn at = {.heads = shapes[si].heads,
                          .head_dim = shapes[si].head_dim,
                          .slope = 0.2f,
                          .mean_heads = shapes[si].mean,
                          .drop_p = shapes[si].drop_p,
                          .drop_key = 0x243f6a8885a308d3ull + si};
      attn_case(blocks[bi].name, &tb.b, &at, &r);
    }
    ng_test_block_free(&tb);
  }
}

/* Attention in parts as inference runs it (docs/aggregators.md): a destination's hot part (its
 * self slot and sources below n_src / 3) as a state on the GPU, its cold part as a state from the
 * CPU, uploaded and merged on the GPU, against the unsplit forward on the CPU. Not bit-identical
 * (the merge reorders the sums): within 1e-5 x (1 + |unsplit|); the GPU's hot state also follows
 * the CPU's within the file's tolerance. */
static void test_attn_partial_gpu(void) {
  static const struct { int32_t nd, ns, max_deg; } blocks[] = {{40, 300, 200}, {3000, 5000, 12}};
  static const struct {
    int32_t heads;
    int64_t head_dim;
    bool mean;
  } shapes[] = {{1, 7, false}, {8, 8, false}, {3, 5, true}};
  ng_rng r;
  ng_rng_seed(&r, 2202);
  for (size_t bi = 0; bi < NG_TEST_LEN(blocks); bi++) {
    const int32_t nd = blocks[bi].nd, ns = blocks[bi].ns;
    ng_test_block tb;
    tb.indptr = ng_test_xmalloc(((size_t)nd + 1) * 4);
    tb.indptr[0] = 0;
    for (int32_t d = 0; d < nd; d++)
      tb.indptr[d + 1] =
          tb.indptr[d] +
          (d % 5 == 4 ? 0 : 1 + (int32_t)ng_rng_below(&r, (uint64_t)blocks[bi].max_deg));
    ng_test_block_fill(&tb, &r, nd, ns, false, false);
    /* The hot and the cold part, edges in order. */
    int32_t *ip[2], *ix[2];
    ng_block part[2];
    for (int h = 0; h < 2; h++) {
      ip[h] = ng_test_xmalloc(((size_t)nd + 1) * 4);
      ix[h] = ng_test_xmalloc((size_t)tb.b.nnz * 4 + 4);
      int64_t n = 0;
      ip[h][0] = 0;
      for (int32_t d = 0; d < nd; d++) {
        for (int32_t e = tb.b.indptr[d]; e < tb.b.indptr[d + 1]; e++)
          if ((tb.b.indices[e] < ns / 3) == (h == 0))
            ix[h][n++] = tb.b.indices[e];
        ip[h][d + 1] = (int32_t)n;
      }
      part[h] = (ng_block){.n_dst = nd, .n_src = ns, .nnz = n, .indptr = ip[h], .indices = ix[h]};
    }
    for (size_t si = 0; si < NG_TEST_LEN(shapes); si++) {
      const ng_attn at = {.heads = shapes[si].heads,
                          .head_dim = shapes[si].head_dim,
                          .slope = 0.2f,
                          .mean_heads = shapes[si].mean};
      const int64_t kf = at.heads * at.head_dim, cols = ng_attn_state_cols(&at);
      const int64_t out_n = (int64_t)nd * (at.mean_heads ? at.head_dim : kf);
      float *z = ng_test_rand_floats(&r, (int64_t)ns * kf), *as = ng_test_rand_floats(&r, kf);
      float *ad = ng_test_rand_floats(&r, kf);
      for (int64_t i = 0; i < kf; i++) {
        as[i] *= 3.0f;
        ad[i] *= 3.0f;
      }
      float *alpha = ng_test_xmalloc((size_t)(tb.b.nnz + nd) * (size_t)at.heads * 4 + 4);
      float *want = ng_test_xmalloc((size_t)out_n * 4 + 4),
            *got = ng_test_xmalloc((size_t)out_n * 4 + 4);
      float *c_hot = ng_test_xmalloc((size_t)nd * (size_t)cols * 4 + 4);
      float *c_cold = ng_test_xmalloc((size_t)nd * (size_t)cols * 4 + 4);
      float *g_hot = ng_test_xmalloc((size_t)nd * (size_t)cols * 4 + 4);
      EXPECT_OK(cpu->iface->attn_fwd(cpu, &at, &tb.b, z, as, ad, alpha, want));
      EXPECT_OK(cpu->iface->attn_state(cpu, &at, &part[0], z, z, as, ad, true, c_hot));
      EXPECT_OK(cpu->iface->attn_state(cpu, &at, &part[1], z, z, as, ad, false, c_cold));
      /* The hot part's block on the GPU (no transpose: no backward). */
      void *dip = up(ip[0], ((size_t)nd + 1) * 4), *dix = up(ix[0], (size_t)part[0].nnz * 4);
      ng_block dbk = part[0];
      dbk.indptr = dip;
      dbk.indices = dix;
      float *dz = up(z, (size_t)ns * (size_t)kf * 4), *das = up(as, (size_t)kf * 4);
      float *dad = up(ad, (size_t)kf * 4);
      float *d_hot = dpoison((size_t)nd * (size_t)cols * 4);
      float *d_cold = up(c_cold, (size_t)nd * (size_t)cols * 4);
      float *d_out = dpoison((size_t)out_n * 4);
      EXPECT_OK(gpu->iface->attn_state(gpu, &at, &dbk, dz, dz, das, dad, true, d_hot));
      down(g_hot, d_hot, (size_t)nd * (size_t)cols * 4);
      EXPECT_OK(gpu->iface->attn_merge(gpu, &at, nd, d_hot, d_cold, d_out));
      down(got, d_out, (size_t)out_n * 4);
      cmp_near("attn_state hot part", c_hot, g_hot, (int64_t)nd * cols);
      double worst = 0;
      for (int64_t i = 0; i < out_n; i++) {
        const double e = fabs((double)got[i] - (double)want[i]) / (1.0 + fabs((double)want[i]));
        worst = e > worst || isnan(e) ? e : worst;
      }
      printf("  %d x %d, %d heads x %lld%s: largest split (GPU) / unsplit (CPU) difference %.3g\n",
             nd, ns, (int)at.heads, (long long)at.head_dim, at.mean_heads ? " mean" : "", worst);
      EXPECT_TRUE(worst <= 1e-5);
      void *bufs[] = {dz, das, dad, d_hot, d_cold, d_out, dip, dix};
      for (size_t i = 0; i < NG_TEST_LEN(bufs); i++)
        gpu->iface->free(gpu, bufs[i]);
      free(z);
      free(as);
      free(ad);
      free(alpha);
      free(want);
      free(got);
      free(c_hot);
      free(c_cold);
      free(g_hot);
    }
    for (int h = 0; h < 2; h++) {
      free(ip[h]);
      free(ix[h]);
    }
    ng_test_block_free(&tb);
  }
}

static ng_dataset_t cora;

/* Velickovic et al.'s recipe, as tests/test_train.c trains it, on `device`. */
static double train_gat(const char *device, uint64_t seed, int epochs, double *losses) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_GAT, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.fanout = l1.fanout = -1;
  l0.heads = 8;
  l0.combine = NG_HEADS_CONCAT;
  l0.out_dim = 64;
  l1.heads = 1;
  l1.combine = NG_HEADS_MEAN;
  l1.out_dim = 7;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = l0.attn_dropout = l1.attn_dropout = 0.6f;
  l0.weight_decay = l1.weight_decay = 5e-4f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 0;
  o.lr = 0.005;
  o.seed = seed;
  o.device = device;
  o.normalize = NG_NORMALIZE_ROW;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
  double acc = 0.0;
  for (int e = 0; t && e < epochs; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    losses[e] = s.loss;
  }
  if (t)
    EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_TEST));
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  return acc;
}

static void test_gat_cora_gpu(void) {
  enum { EPOCHS = 200, CLOSE = 5 };
  static double gpu_loss[EPOCHS], gpu_again[EPOCHS], cpu_loss[EPOCHS];
  double sum = 0.0;
  const uint64_t seeds[] = {1, 2, 3};
  for (size_t i = 0; i < NG_TEST_LEN(seeds); i++) {
    double acc = train_gat("cuda", seeds[i], EPOCHS, gpu_loss);
    printf("  GAT on the GPU, seed %llu: test accuracy %.2f%%\n", (unsigned long long)seeds[i],
           100 * acc);
    sum += acc;
  }
  printf("  GAT on the GPU: mean test accuracy %.2f%%\n", 100 * sum / 3.0);
  EXPECT_TRUE(sum / 3.0 >= 0.810);
  /* The first epochs follow the CPU's losses (later ones drift apart within rounding), and a
   * GPU run repeats bit for bit. */
  train_gat("cpu", 1, CLOSE, cpu_loss);
  train_gat("cuda", 1, CLOSE, gpu_loss);
  train_gat("cuda", 1, CLOSE, gpu_again);
  for (int e = 0; e < CLOSE; e++) {
    EXPECT_NEAR(gpu_loss[e], cpu_loss[e], 1e-3 * fabs(cpu_loss[e]));
    EXPECT_TRUE(gpu_loss[e] == gpu_again[e]);
  }
}

/* GIN and SAGE-pool are compositions of ops test_gpu_parity.c checks (sum and max
 * aggregation, GEMM, bias + ReLU, self loop): their Cora runs on the GPU follow the CPU's
 * losses in the first epochs and reach the CPU's bar (tests/test_train.c, one seed). */
static double train_kind(ng_model_kind kind, const char *device, int epochs, double *losses) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, kind, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.fanout = kind == NG_MODEL_GIN ? -1 : 10;
  l1.fanout = kind == NG_MODEL_GIN ? -1 : 25;
  l0.out_dim = 64;
  l1.out_dim = 7;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = 0.5f;
  l0.weight_decay = l1.weight_decay = 5e-4f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 0;
  o.lr = 0.01;
  o.seed = 1;
  o.device = device;
  o.normalize = NG_NORMALIZE_ROW;
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
  double acc = 0.0;
  for (int e = 0; t && e < epochs; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
    losses[e] = s.loss;
  }
  if (t)
    EXPECT_OK(ng_trainer_evaluate(&acc, NULL, t, NG_SPLIT_TEST));
  ng_trainer_destroy(t);
  ng_model_destroy(m);
  return acc;
}

static void test_gin_pool_gpu(void) {
  enum { EPOCHS = 200, CLOSE = 5 };
  static double g[EPOCHS], c[CLOSE];
  const ng_model_kind kinds[] = {NG_MODEL_GIN, NG_MODEL_SAGE_POOL};
  const char *names[] = {"GIN", "SAGE-pool"};
  for (int k = 0; k < 2; k++) {
    double acc = train_kind(kinds[k], "cuda", EPOCHS, g);
    printf("  %s on the GPU, seed 1: test accuracy %.2f%%\n", names[k], 100 * acc);
    EXPECT_TRUE(acc >= 0.720);
    train_kind(kinds[k], "cpu", CLOSE, c);
    for (int e = 0; e < CLOSE; e++)
      EXPECT_NEAR(g[e], c[e], 1e-3 * fabs(c[e]));
  }
}

/* Raw rows through every strategy on the GPU: the same bits (tests/test_fetch.c on the CPU). */
static void test_gat_raw_rows_gpu(void) {
  ng_test_fetch_run run = {.device = "cuda",
                           .mode = NG_MODE_BASELINE,
                           .transfer = NG_FETCH_AUTO,
                           .workers = 2,
                           .partial_workers = -1,
                           .cache_ratio = 0.3,
                           .kind = NG_MODEL_GAT,
                           .aggregator = NG_AGGREGATOR_SUM,
                           .dropout = 0.5f,
                           .threads = 1};
  ng_test_fetch_result ref, r;
  if (!ng_test_fetch_train(cora, &run, &ref))
    return;
  EXPECT_EQ_I(ref.fetch.cold_edges, 0);
  EXPECT_TRUE(ref.fetch.cold_rows > 0 && ref.fetch.h2d_bytes > 0);
  const struct {
    ng_mode mode;
    ng_fetch transfer;
    int workers, partial;
  } modes[] = {{NG_MODE_ZEROCOPY, NG_FETCH_AUTO, 2, -1},
               {NG_MODE_HYBRID, NG_FETCH_ZCOPY, 3, -1},
               {NG_MODE_HYBRID_STATIC, NG_FETCH_BATCH, 2, 1}};
  for (size_t k = 0; k < NG_TEST_LEN(modes); k++) {
    run.mode = modes[k].mode;
    run.transfer = modes[k].transfer;
    run.workers = modes[k].workers;
    run.partial_workers = modes[k].partial;
    run.period_ms = 0.01;
    if (!ng_test_fetch_train(cora, &run, &r))
      continue;
    char what[96];
    snprintf(what, sizeof what, "gat on the GPU: baseline vs %s/%s", ng_mode_name(modes[k].mode),
             ng_fetch_name(modes[k].transfer));
    EXPECT_TRUE(ng_test_fetch_same(&ref, &r, what));
    EXPECT_EQ_I(r.workers[0], 0);
    if (modes[k].mode == NG_MODE_ZEROCOPY)
      EXPECT_TRUE(r.fetch.zcopy_bytes > 0);
    free(r.checkpoint);
  }
  free(ref.checkpoint);
}

/* The serving engine on the GPU with a GAT model's input layer in online-softmax parts (the
 * device's hot state, the CPU workers' cold state), SAGE-pool's in max states and GIN's partial
 * sums: every row hot,
 * half of them cold and all cold, against the CPU trainer's unsplit full-neighbour logits (1e-4
 * x (1 + |unsplit|): the GPU's GEMM and expf besides the split's order), bit-identical run to run
 * and for 1 or 3 CPU workers. */
static void serve_logits(ng_engine *e, float *out, int64_t nodes, int64_t classes, int64_t *cold) {
  int64_t ids[500];
  for (int64_t c0 = 0; c0 < nodes; c0 += 500) {
    const int64_t n = NG_MIN(500, nodes - c0);
    for (int64_t i = 0; i < n; i++)
      ids[i] = c0 + i;
    ng_infer_request r;
    memset(&r, 0, sizeof r);
    r.node_ids = ids;
    r.n = n;
    r.outputs = NG_OUT_LOGITS;
    ng_infer_result res;
    ng_status st = ng_engine_infer(e, &r, &res);
    EXPECT_OK(st);
    if (st != NG_OK)
      return;
    memcpy(out + c0 * classes, res.logits, (size_t)(n * classes) * sizeof(float));
    *cold += res.cold_rows;
    ng_infer_result_free(&res);
  }
}

static void test_serve_split_gpu(void) {
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, cora));
  const ng_model_kind kinds[] = {NG_MODEL_GAT, NG_MODEL_GIN, NG_MODEL_SAGE_POOL};
  const char *names[] = {"GAT", "GIN", "SAGE-pool"};
  const int64_t n = info.nodes * info.classes;
  float *got = ng_test_xmalloc((size_t)n * sizeof(float));
  float *first = ng_test_xmalloc((size_t)n * sizeof(float));
  float *ref = ng_test_xmalloc((size_t)n * sizeof(float));
  for (int k = 0; k < 3; k++) {
    ng_model_t m = NULL;
    EXPECT_OK(ng_model_create(&m, kinds[k], info.feature_dim));
    ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
    l0.fanout = l1.fanout = 10;
    l0.out_dim = 32;
    l1.out_dim = info.classes;
    l1.activation = NG_ACT_NONE;
    l0.heads = 4;
    l1.heads = 2;
    l0.combine = kinds[k] == NG_MODEL_GAT ? NG_HEADS_CONCAT : NG_SAGE_SUM;
    l1.combine = kinds[k] == NG_MODEL_GAT ? NG_HEADS_MEAN : NG_SAGE_SUM;
    EXPECT_OK(ng_model_add_layer(m, &l0));
    EXPECT_OK(ng_model_add_layer(m, &l1));
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 256;
    o.seed = 3;
    o.normalize = NG_NORMALIZE_ROW;
    ng_trainer_t t = NULL;
    EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
    if (!t)
      break;
    for (int e = 0; e < (kinds[k] == NG_MODEL_SAGE_POOL ? 3 : 10); e++) {
      ng_epoch_stats s = NG_EPOCH_STATS_INIT;
      EXPECT_OK(ng_trainer_epoch(&s, t));
    }
    char ckpt[4096];
    snprintf(ckpt, sizeof ckpt, "%s/%s.st", ng_test_path(""), names[k]);
    EXPECT_OK(ng_trainer_save(t, ckpt));
    const float *logits = NULL;
    EXPECT_OK(ng__trainer_logits(&logits, t));
    memcpy(ref, logits, (size_t)n * sizeof(float));
    ng_trainer_destroy(t);
    /* PARTIAL splits the input layer by tier; the hub run (AUTO, every request a hub) too;
     * BASELINE sends raw rows. */
    const struct {
      ng_mode mode;
      double ratio;
      int workers;
    } runs[] = {{NG_MODE_PARTIAL, -1.0, 2}, {NG_MODE_PARTIAL, 0.0, 2}, {NG_MODE_PARTIAL, 0.5, 2},
                {NG_MODE_PARTIAL, 0.5, 1},  {NG_MODE_AUTO, 0.5, 3},    {NG_MODE_BASELINE, 0.5, 2}};
    for (size_t r = 0; r < NG_TEST_LEN(runs); r++) {
      ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
      eo.device = "cuda";
      eo.cache_ratio = runs[r].ratio;
      eo.workers = runs[r].workers;
      eo.normalize = NG_NORMALIZE_ROW;
      eo.mode = runs[r].mode;
      eo.hub_edges = runs[r].mode == NG_MODE_AUTO ? 1 : 0;
      ng_engine *e = NULL;
      ng_status st = ng_engine_create(&e, cora, m, ckpt, &eo);
      if (st != NG_OK)
        printf("  engine: %s\n", ng_last_error());
      EXPECT_OK(st);
      if (!e)
        continue;
      for (int64_t i = 0; i < n; i++)
        got[i] = NAN; /* poisoned */
      int64_t cold = 0;
      serve_logits(e, got, info.nodes, info.classes, &cold);
      double w = 0.0;
      for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)ref[i]) / (1.0 + fabs((double)ref[i]));
        w = d > w || d != d ? d : w;
      }
      printf("  %s on the GPU, %s, cache_ratio %.1f, %d workers: %lld cold rows, largest "
             "relative difference to the CPU's unsplit logits %.3g\n",
             names[k], ng_mode_name(runs[r].mode), runs[r].ratio, runs[r].workers, (long long)cold,
             w);
      EXPECT_TRUE(w <= 1e-4);
      EXPECT_EQ_I(cold > 0, runs[r].ratio >= 0.0);
      if (r == 2)
        memcpy(first, got, (size_t)n * sizeof(float));
      if (r == 3 || r == 4) /* the split's bits again, for 1 and 3 workers and hub requests */
        EXPECT_TRUE(memcmp(first, got, (size_t)n * sizeof(float)) == 0);
      ng_engine_destroy(e);
    }
    ng_model_destroy(m);
  }
  free(got);
  free(first);
  free(ref);
}

int main(void) {
  int count = 0;
  char desc[512];
  if (ng__cuda_devices(&count, desc, sizeof desc) != NG_OK) {
    printf("gpu_attn: skipped: listing CUDA devices failed: %s\n", ng_last_error());
    return 77;
  }
  if (count == 0) {
    printf("gpu_attn: skipped: no CUDA device visible (no GPU or no driver)\n");
    return 77;
  }
  printf("gpu_attn: %s\n", desc);
  if (ng__backend_cpu_create(&cpu, 0) != NG_OK || ng__backend_cuda_create(&gpu, 0) != NG_OK) {
    printf("gpu_attn: creating the backends failed: %s\n", ng_last_error());
    ng__backend_destroy(cpu);
    return 1;
  }
  RUN_TEST(test_attn_parity);
  RUN_TEST(test_attn_partial_gpu);
  cora = ng_test_fetch_cora();
  RUN_TEST(test_gat_cora_gpu);
  RUN_TEST(test_gat_raw_rows_gpu);
  RUN_TEST(test_gin_pool_gpu);
  RUN_TEST(test_serve_split_gpu);
  ng_dataset_close(cora);
  ng__backend_destroy(gpu);
  ng__backend_destroy(cpu);
  return ng_test_summary();
}

#endif /* NG_HAVE_CUDA */
