/* The serving engine (include/neargnn_serve.h) on Cora and the CPU backend: answers bit for bit
 * equal to the trainer's full-neighbour evaluation, independent of batching and of the mode, online
 * updates with snapshot isolation, the update log's replay (torn tail, corrupt record),
 * admission control and bad requests; GIN, and GAT and SAGE-pool with their input layer split by
 * tier (states of rows the CPU projects) within a documented tolerance of the unsplit forward and
 * deterministic, or with raw rows bit for bit. */
#include "ng_test.h"
#include "ng_test_fetch.h"

#include "dataset_impl.h"
#include "engine_impl.h"
#include "neargnn_serve.h"
#include "trainer_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static ng_dataset_t cora;
static ng_dataset_info info = NG_DATASET_INFO_INIT;

typedef struct {
  ng_model_t model;
  char ckpt[4096];
  float *ref; /* [nodes, classes] the trainer's full-neighbour logits */
  ng_normalize normalize;
} trained;

static trained sage, gcn, gat, gin, pool;
static const float *cora_features(int64_t v);

/* The main-lane workers of the suite's engines: NG_TEST_SERVE_WORKERS (e.g. 2 or 3) runs every
 * exactness test with batches spread over several workers; unset, the engine's default. */
static int serve_workers(void) {
  const char *v = getenv("NG_TEST_SERVE_WORKERS");
  return v ? atoi(v) : 0;
}

/* A path in the test's folder that stays valid (ng_test_path's buffer is reused). */
static const char *tpath(const char *name) {
  static char paths[32][4096];
  static int n;
  char *p = paths[n++ % 32];
  snprintf(p, 4096, "%s", ng_test_path(name));
  return p;
}

/* Trains `epochs` epochs of `m` and keeps the checkpoint and the trainer's evaluation logits. */
static void train_epochs(trained *t, ng_model_t m, const char *name, ng_normalize norm,
                         int epochs) {
  t->model = m;
  t->normalize = norm;
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 256;
  o.seed = 3;
  o.workers = -1;
  o.normalize = norm;
  ng_trainer_t tr = NULL;
  EXPECT_OK(ng_trainer_create(&tr, cora, m, &o));
  ng_epoch_stats es = NG_EPOCH_STATS_INIT;
  for (int i = 0; i < epochs; i++)
    EXPECT_OK(ng_trainer_epoch(&es, tr));
  snprintf(t->ckpt, sizeof t->ckpt, "%s", tpath(name));
  EXPECT_OK(ng_trainer_save(tr, t->ckpt));
  const float *logits = NULL;
  EXPECT_OK(ng__trainer_logits(&logits, tr));
  size_t bytes = (size_t)info.nodes * (size_t)info.classes * sizeof(float);
  t->ref = ng_test_xmalloc(bytes);
  memcpy(t->ref, logits, bytes);
  ng_trainer_destroy(tr);
}

static void train(trained *t, ng_model_t m, const char *name, ng_normalize norm) {
  train_epochs(t, m, name, norm, 1);
}

static ng_engine *engine(const trained *t, ng_mode mode, double cache_ratio, int64_t hub_edges,
                         const char *log_path, int max_delay_us) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.mode = mode;
  o.cache_ratio = cache_ratio;
  o.hub_edges = hub_edges;
  o.log_path = log_path;
  o.max_delay_us = max_delay_us;
  o.workers = 2;
  o.serve_workers = serve_workers();
  /* Deadlines far off: these tests check answers, under sanitizers on a loaded machine too
   * (the deadline tests give their own). */
  o.request_timeout_ms = 60 * 1000;
  o.normalize = t->normalize;
  ng_engine *e = NULL;
  ng_status st = ng_engine_create(&e, cora, t->model, t->ckpt, &o);
  if (st != NG_OK)
    fprintf(stderr, "  engine: %s\n", ng_last_error());
  EXPECT_OK(st);
  return e;
}

/* Logits of `n` nodes in one request (NULL on failure; free()). */
static float *logits_of(ng_engine *e, const int64_t *ids, int64_t n, ng_infer_result *keep) {
  ng_infer_request r;
  memset(&r, 0, sizeof r);
  r.node_ids = ids;
  r.n = n;
  r.outputs = NG_OUT_LOGITS | NG_OUT_CLASS | NG_OUT_EMBEDDING;
  r.embedding_layer = -1;
  ng_infer_result res;
  ng_status st = ng_engine_infer(e, &r, &res);
  EXPECT_OK(st);
  if (st != NG_OK)
    return NULL;
  float *out = res.logits;
  res.logits = NULL;
  if (keep)
    *keep = res;
  else
    ng_infer_result_free(&res);
  return out;
}

static int64_t first_diff(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return i;
  return -1;
}

#define EXPECT_SAME_BITS(a, b, n, what)                                                            \
  do {                                                                                             \
    int64_t at_ = first_diff((a), (b), (n));                                                       \
    if (at_ >= 0)                                                                                  \
      ng_test_fail(__FILE__, __LINE__, "%s: element %lld differs: %.9g vs %.9g", (what),           \
                   (long long)at_, (double)(a)[at_], (double)(b)[at_]);                            \
  } while (0)

/* A spread of nodes: low ids (hot), high ids (cold under a tier), and the highest-degree one. */
static int64_t probe[64];
static int n_probe;

static void pick_probe(void) {
  n_probe = 0;
  for (int64_t v = 0; v < info.nodes && n_probe < 60; v += 47)
    probe[n_probe++] = v;
  probe[n_probe++] = info.nodes - 1;
  probe[n_probe++] = 1358; /* Cora's id 1358 has the most neighbours (168) */
}

/* The engine on the CPU backend, every row hot: the trainer's bits, per node alone, for all
 * probes in one request, and for the whole graph in chunks. */
static void check_matches_trainer(const trained *t) {
  ng_engine *e = engine(t, NG_MODE_AUTO, -1.0, 0, NULL, 0);
  if (!e)
    return;
  const int64_t C = info.classes;
  float *all = logits_of(e, probe, n_probe, NULL);
  for (int i = 0; all && i < n_probe; i++) {
    EXPECT_SAME_BITS(all + i * C, t->ref + probe[i] * C, C, "probe in one request");
    float *one = logits_of(e, &probe[i], 1, NULL);
    if (one)
      EXPECT_SAME_BITS(one, t->ref + probe[i] * C, C, "probe alone");
    free(one);
  }
  free(all);
  /* Every node, in requests of 500 (the GEMMs see other row counts than the trainer's). */
  int64_t ids[500];
  for (int64_t c0 = 0; c0 < info.nodes; c0 += 500) {
    int64_t n = NG_MIN(500, info.nodes - c0);
    for (int64_t i = 0; i < n; i++)
      ids[i] = c0 + i;
    ng_infer_result res;
    float *l = logits_of(e, ids, n, &res);
    if (!l)
      break;
    EXPECT_SAME_BITS(l, t->ref + c0 * C, n * C, "chunk of 500");
    for (int64_t i = 0; i < n; i++) {
      int64_t best = 0;
      for (int64_t c = 1; c < C; c++)
        if (t->ref[(c0 + i) * C + c] > t->ref[(c0 + i) * C + best])
          best = c;
      if (res.cls[i] != best) {
        EXPECT_EQ_I(res.cls[i], best);
        break;
      }
    }
    EXPECT_EQ_I(res.embedding_dim, 16);
    EXPECT_EQ_I(res.hot_rows > 0, 1);
    EXPECT_EQ_I(res.cold_rows, 0);
    ng_infer_result_free(&res);
    free(l);
  }
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.requests, 1 + n_probe + (info.nodes + 499) / 500);
  EXPECT_EQ_I(s.cold_rows, 0);
  ng_engine_destroy(e);
}

static void test_sage_matches_trainer(void) {
  check_matches_trainer(&sage);
}

static void test_gcn_matches_trainer(void) {
  check_matches_trainer(&gcn);
}

/* Concurrent callers: each sends its requests, the answers are compared with `want`. */
typedef struct {
  ng_engine *e;
  const int64_t *ids;
  int n_ids;
  int per_request;
  int rounds;
  const float *want; /* [n_ids, classes] */
  int32_t n_fanouts;
  int32_t fanout[2];
  uint64_t seed;
  int bad;
  int64_t max_batch_nodes;
} caller;

static void *call_main(void *arg) {
  caller *c = arg;
  const int64_t C = info.classes;
  for (int r = 0; r < c->rounds; r++) {
    for (int i = 0; i < c->n_ids; i += c->per_request) {
      ng_infer_request q;
      memset(&q, 0, sizeof q);
      q.node_ids = c->ids + i;
      q.n = NG_MIN(c->per_request, c->n_ids - i);
      q.outputs = NG_OUT_LOGITS;
      q.n_fanouts = c->n_fanouts;
      q.fanout[0] = c->fanout[0];
      q.fanout[1] = c->fanout[1];
      q.seed = c->seed;
      ng_infer_result res;
      if (ng_engine_infer(c->e, &q, &res) != NG_OK) {
        if (c->bad++ == 0)
          fprintf(stderr, "  request of %lld nodes: %s\n", (long long)q.n, ng_last_error());
        continue;
      }
      if (memcmp(res.logits, c->want + (int64_t)i * C, (size_t)(q.n * C) * sizeof(float)) != 0)
        c->bad++;
      if (res.batch_nodes > c->max_batch_nodes)
        c->max_batch_nodes = res.batch_nodes;
      ng_infer_result_free(&res);
    }
  }
  return NULL;
}

/* Answers of `probe` one request each, from `threads` threads at once, against `want`. Returns
 * the largest batch any answer rode in. */
static int64_t concurrent(ng_engine *e, const float *want, int threads, int rounds,
                          int32_t n_fanouts, uint64_t seed) {
  pthread_t th[8];
  caller c[8];
  for (int k = 0; k < threads; k++) {
    memset(&c[k], 0, sizeof c[k]);
    c[k] = (caller){.e = e,
                    .ids = probe,
                    .n_ids = n_probe,
                    .per_request = 1 + k % 3,
                    .rounds = rounds,
                    .want = want,
                    .n_fanouts = n_fanouts,
                    .fanout = {4, 3},
                    .seed = seed};
    pthread_create(&th[k], NULL, call_main, &c[k]);
  }
  int64_t most = 0;
  for (int k = 0; k < threads; k++) {
    pthread_join(th[k], NULL);
    EXPECT_EQ_I(c[k].bad, 0);
    most = NG_MAX(most, c[k].max_batch_nodes);
  }
  return most;
}

/* With a simulated cold tier: every mode, and hub or not, gives the same bits; merged batches
 * the same bits as requests alone; close to the all-hot answers (the tiered input layer adds the
 * hot and the cold partial sums in another order). */
static void test_modes_and_batching(void) {
  const int64_t C = info.classes;
  ng_mode modes[] = {NG_MODE_BASELINE, NG_MODE_ZEROCOPY, NG_MODE_PARTIAL, NG_MODE_HYBRID};
  float *first = NULL;
  for (size_t k = 0; k < NG_TEST_LEN(modes); k++) {
    for (int hubs = 0; hubs < 2; hubs++) {
      /* hub_edges 1: every request is a hub request (its own batch, partial aggregation). */
      ng_engine *e = engine(&sage, modes[k], 0.3, hubs ? 1 : 0, NULL, 2000);
      if (!e)
        return;
      float *solo = ng_test_xmalloc((size_t)n_probe * (size_t)C * sizeof(float));
      int64_t cold = 0;
      for (int i = 0; i < n_probe; i++) {
        ng_infer_result res;
        float *l = logits_of(e, &probe[i], 1, &res);
        if (!l)
          break;
        EXPECT_EQ_I(res.hub, hubs);
        cold += res.cold_rows;
        memcpy(solo + i * C, l, (size_t)C * sizeof(float));
        free(l);
        ng_infer_result_free(&res);
      }
      EXPECT_TRUE(cold > 0);
      if (!first) {
        first = solo;
        for (int64_t i = 0; i < n_probe * C; i++)
          EXPECT_NEAR(solo[i], sage.ref[probe[i / C] * C + i % C], 1e-4);
      } else {
        char what[64];
        snprintf(what, sizeof what, "mode %s hubs %d", ng_mode_name(modes[k]), hubs);
        EXPECT_SAME_BITS(solo, first, n_probe * C, what);
      }
      int64_t most = concurrent(e, first, 4, 2, 0, 0);
      if (!hubs)
        EXPECT_TRUE(most > 3); /* requests did share batches */
      ng_engine_stats s;
      ng_engine_stats_get(&s, e);
      EXPECT_TRUE(s.cold_rows > 0);
      EXPECT_EQ_I(s.hub_requests > 0, hubs);
      if (solo != first)
        free(solo);
      ng_engine_destroy(e);
    }
  }
  free(first);
}

/* Sampled requests: deterministic per (fanouts, seed), whatever shares their batch. */
static void test_sampled(void) {
  const int64_t C = info.classes;
  ng_engine *e = engine(&sage, NG_MODE_AUTO, -1.0, 0, NULL, 2000);
  if (!e)
    return;
  float *solo = ng_test_xmalloc((size_t)n_probe * (size_t)C * sizeof(float));
  bool differs = false;
  for (int i = 0; i < n_probe; i++) {
    ng_infer_request q;
    memset(&q, 0, sizeof q);
    q.node_ids = &probe[i];
    q.n = 1;
    q.n_fanouts = 2;
    q.fanout[0] = 4;
    q.fanout[1] = 3;
    q.seed = 11;
    ng_infer_result res;
    EXPECT_OK(ng_engine_infer(e, &q, &res));
    if (res.logits) {
      memcpy(solo + i * C, res.logits, (size_t)C * sizeof(float));
      differs |= memcmp(res.logits, sage.ref + probe[i] * C, (size_t)C * sizeof(float)) != 0;
    }
    ng_infer_result_free(&res);
  }
  EXPECT_TRUE(differs); /* sampling dropped neighbours of some node */
  concurrent(e, solo, 3, 2, 2, 11);
  free(solo);
  ng_engine_destroy(e);
}

/* Whether two builds made the same blocks, node for node and edge for edge. */
static bool same_field(const ng_minibatch *a, const ng_minibatch *b, int n_layers) {
  if (a->n_targets != b->n_targets)
    return false;
  for (int l = 0; l < n_layers; l++) {
    const ng_block *x = &a->blocks[l], *y = &b->blocks[l];
    if (x->n_dst != y->n_dst || x->n_src != y->n_src || x->nnz != y->nnz ||
        memcmp(x->indptr, y->indptr, ((size_t)x->n_dst + 1) * 4) != 0 ||
        memcmp(x->indices, y->indices, (size_t)x->nnz * 4) != 0)
      return false;
  }
  return memcmp(a->node_ids, b->node_ids, (size_t)a->blocks[0].n_src * 8) == 0;
}

/* The field builder after a big field (every Cora node, full neighbourhoods, then sampled with
 * a seed per target) builds small fields exactly as a fresh builder does: its table is emptied
 * for each build by a new generation instead of a clear of its whole size, and no entry of the
 * big build may survive into a later one. (The cost of the clear is what changed; it is not
 * timed here.) */
static void test_field_reuse(void) {
  ng_srv_snap *snap = NULL;
  EXPECT_OK(
      ng__srv_snap_base(&snap, &cora->csr, cora->features, info.feature_dim, NG_NORMALIZE_NONE));
  ng_srv_field *big = NULL, *fresh = NULL;
  EXPECT_OK(ng__srv_field_create(&big));
  if (!snap || !big)
    return;
  const bool gcn_w[2] = {true, true};
  const int32_t full[2] = {-1, -1}, sampled[2] = {4, 3};
  int64_t *all = ng_test_xmalloc((size_t)info.nodes * sizeof(int64_t));
  uint64_t *all_seeds = ng_test_xmalloc((size_t)info.nodes * sizeof(uint64_t));
  for (int64_t v = 0; v < info.nodes; v++) {
    all[v] = v;
    all_seeds[v] = (uint64_t)(v % 5);
  }
  for (int round = 0; round < 2; round++) {
    const bool smp = round == 1;
    ng_minibatch mb, want;
    EXPECT_OK(ng__srv_field_build(&mb, big, snap, 2, smp ? sampled : full, gcn_w,
                                  smp ? all_seeds : NULL, all, (int32_t)info.nodes));
    EXPECT_EQ_I(mb.blocks[0].n_src >= info.nodes, 1);
    for (int i = 0; i < n_probe; i++) {
      int64_t t[2] = {probe[i], probe[(i + 7) % n_probe]};
      uint64_t sd[2] = {(uint64_t)i, (uint64_t)i + 1};
      const int32_t nt = t[0] == t[1] && !smp ? 1 : 2;
      EXPECT_OK(ng__srv_field_build(&mb, big, snap, 2, smp ? sampled : full, gcn_w, smp ? sd : NULL,
                                    t, nt));
      EXPECT_OK(ng__srv_field_create(&fresh));
      EXPECT_OK(ng__srv_field_build(&want, fresh, snap, 2, smp ? sampled : full, gcn_w,
                                    smp ? sd : NULL, t, nt));
      if (!same_field(&mb, &want, 2)) {
        ng_test_fail(__FILE__, __LINE__, "%s field of %lld, %lld after a big one differs",
                     smp ? "sampled" : "full", (long long)t[0], (long long)t[1]);
        ng__srv_field_destroy(fresh);
        break;
      }
      ng__srv_field_destroy(fresh);
    }
  }
  free(all);
  free(all_seeds);
  ng__srv_field_destroy(big);
  ng__srv_snap_unref(snap);
}

/* Whether local node `da` of field `a` and `db` of field `b` have the same unrolled tree from
 * block `l` down: the same neighbours (global ids, in block order) at every level. */
static bool same_tree(const ng_minibatch *a, int32_t da, const ng_minibatch *b, int32_t db, int l) {
  const ng_block *x = &a->blocks[l], *y = &b->blocks[l];
  const int32_t n = x->indptr[da + 1] - x->indptr[da];
  if (n != y->indptr[db + 1] - y->indptr[db])
    return false;
  for (int32_t i = 0; i < n; i++) {
    const int32_t sa = x->indices[x->indptr[da] + i], sb = y->indices[y->indptr[db] + i];
    if (a->node_ids[sa] != b->node_ids[sb])
      return false;
    if (l > 0 && !same_tree(a, sa, b, sb, l - 1))
      return false;
  }
  return true;
}

/* A sampled field of targets with different seeds (a node twice with two seeds) gives every
 * target the tree it has in a field of its own: its draws use its own seed at every level. */
static void test_field_seeds(void) {
  ng_srv_snap *snap = NULL;
  EXPECT_OK(
      ng__srv_snap_base(&snap, &cora->csr, cora->features, info.feature_dim, NG_NORMALIZE_NONE));
  ng_srv_field *batch = NULL, *solo = NULL;
  EXPECT_OK(ng__srv_field_create(&batch));
  EXPECT_OK(ng__srv_field_create(&solo));
  if (!snap || !batch || !solo)
    return;
  const bool plain[2] = {false, false};
  const int32_t fan[2] = {4, 3};
  int64_t t[6] = {1358, 1358, 0, 17, 1701, 2707};
  uint64_t sd[6] = {1, 2, 1, 3, 4, 5};
  ng_minibatch mb, one;
  EXPECT_OK(ng__srv_field_build(&mb, batch, snap, 2, fan, plain, sd, t, 6));
  bool seeds_differ = false;
  for (int i = 0; i < 6; i++) {
    EXPECT_OK(ng__srv_field_build(&one, solo, snap, 2, fan, plain, &sd[i], &t[i], 1));
    if (!same_tree(&mb, i, &one, 0, 1))
      ng_test_fail(__FILE__, __LINE__, "target %d (node %lld, seed %llu) differs from alone", i,
                   (long long)t[i], (unsigned long long)sd[i]);
    if (i == 1) /* node 1358 with seed 2 against seed 1 (target 0) */
      seeds_differ = !same_tree(&mb, 0, &one, 0, 1);
  }
  EXPECT_TRUE(seeds_differ);
  ng__srv_field_destroy(batch);
  ng__srv_field_destroy(solo);
  ng__srv_snap_unref(snap);
}

/* One sampled request for `v` with `seed` (fanouts 4, 3); its logits (free()) or NULL. */
typedef struct {
  ng_engine *e;
  int64_t v;
  uint64_t seed;
  float *logits;
  int64_t batch_nodes;
} seeded;

static void *seeded_main(void *arg) {
  seeded *q = arg;
  ng_infer_request r;
  memset(&r, 0, sizeof r);
  r.node_ids = &q->v;
  r.n = 1;
  r.n_fanouts = 2;
  r.fanout[0] = 4;
  r.fanout[1] = 3;
  r.seed = q->seed;
  ng_infer_result res;
  if (ng_engine_infer(q->e, &r, &res) == NG_OK) {
    q->logits = res.logits;
    q->batch_nodes = res.batch_nodes;
    res.logits = NULL;
  }
  ng_infer_result_free(&res);
  return NULL;
}

/* Sampled requests of different seeds share one device batch, and each request's bits are
 * those it gets alone: its targets draw with its own seed, whatever the batch holds (the same
 * node asked for with two seeds, and twice with one). */
static void test_sampled_seeds_batch(void) {
  const int64_t C = info.classes;
  enum { N = 8 };
  seeded q[N];
  for (int i = 0; i < N; i++)
    q[i] = (seeded){.v = probe[(i * 5) % n_probe], .seed = 100 + (uint64_t)i};
  q[1].v = q[0].v; /* one node, two seeds */
  q[3].v = q[2].v;
  q[3].seed = q[2].seed; /* one node, one seed, two requests */
  q[5].v = 1358;         /* the node with the most neighbours: its draws differ by seed */
  q[6].v = 1358;
  ng_engine *alone = engine(&sage, NG_MODE_AUTO, -1.0, 0, NULL, 0);
  float *want[N];
  for (int i = 0; i < N; i++) {
    seeded one = q[i];
    one.e = alone;
    seeded_main(&one);
    want[i] = one.logits;
    EXPECT_TRUE(want[i] != NULL);
  }
  ng_engine_destroy(alone);
  if (want[5] && want[6])
    EXPECT_TRUE(memcmp(want[5], want[6], (size_t)C * sizeof(float)) != 0);
  /* The batcher waits (up to 30 s) until N target nodes are queued: one batch of all. */
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.max_batch = N;
  o.max_delay_us = 30 * 1000 * 1000;
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
  o.workers = 2;
  o.serve_workers = serve_workers();
  o.normalize = sage.normalize;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
  if (!e)
    return;
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    q[i].e = e;
    pthread_create(&th[i], NULL, seeded_main, &q[i]);
  }
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  ng_engine_stats st;
  ng_engine_stats_get(&st, e);
  EXPECT_EQ_I(st.batches, 1);
  EXPECT_EQ_I(st.batch_nodes, N);
  for (int i = 0; i < N; i++) {
    EXPECT_EQ_I(q[i].batch_nodes, N - 1); /* distinct (node, seed) targets */
    if (q[i].logits && want[i])
      EXPECT_SAME_BITS(q[i].logits, want[i], C, "sampled request batched with other seeds");
    free(q[i].logits);
    free(want[i]);
  }
  ng_engine_destroy(e);
}

/* ---- updates ---- */

/* Node v's raw features (the engine normalises them as the model was trained). */
static const float *raw_row(int64_t v) {
  return cora_features(v);
}

static float *one_logits(ng_engine *e, int64_t v) {
  return logits_of(e, &v, 1, NULL);
}

/* A feature row that is finite (so it is logged: the GCN model normalises nothing) but overflows
 * the model makes the answers that read it NaN or infinity: those requests fail with
 * NG_ERR_NONFINITE naming the node (the HTTP front answers 500), never 200 with null logits, and
 * requests that do not read it are answered as before. */
static void test_nonfinite_answer(void) {
  const int64_t C = info.classes;
  ng_engine *e = engine(&gcn, NG_MODE_AUTO, -1.0, 0, tpath("nonfinite.log"), 0);
  if (!e)
    return;
  const int64_t v = 7, far = 2000;
  float *before = one_logits(e, far);
  float *big = ng_test_xmalloc((size_t)info.feature_dim * sizeof(float));
  for (int64_t c = 0; c < info.feature_dim; c++)
    big[c] = 3e38f;
  ng_graph_update up;
  memset(&up, 0, sizeof up);
  up.n_feature_rows = 1;
  up.feature_ids = &v;
  up.feature_values = big;
  EXPECT_OK(ng_engine_update(e, &up, NULL));
  ng_infer_request r;
  memset(&r, 0, sizeof r);
  r.node_ids = &v;
  r.n = 1;
  r.outputs = NG_OUT_LOGITS | NG_OUT_CLASS;
  r.embedding_layer = -1;
  ng_infer_result res;
  EXPECT_STATUS(ng_engine_infer(e, &r, &res), NG_ERR_NONFINITE);
  EXPECT_ERR_HAS("not finite");
  EXPECT_ERR_HAS("(7)");
  float *after = one_logits(e, far);
  if (before && after)
    EXPECT_SAME_BITS(after, before, C, "a node that does not read the row");
  free(before);
  free(after);
  free(big);
  ng_engine_destroy(e);
}

static void test_updates_visible(void) {
  const int64_t C = info.classes;
  const char *log = tpath("updates.log");
  ng_engine *e = engine(&sage, NG_MODE_AUTO, -1.0, 0, log, 0);
  if (!e)
    return;
  const int64_t v = 7, u = 1358;
  float *before_v = one_logits(e, v), *before_u = one_logits(e, u);
  /* A new node with u's features, linked both ways to v. */
  const float *fu = raw_row(u);
  float *feat = ng_test_xmalloc((size_t)info.feature_dim * sizeof(float));
  memcpy(feat, fu, (size_t)info.feature_dim * sizeof(float));
  int64_t n_new = info.nodes;
  int64_t src[2] = {n_new, v}, dst[2] = {v, n_new};
  ng_graph_update up;
  memset(&up, 0, sizeof up);
  up.add_nodes = 1;
  up.add_features = feat;
  up.n_add_edges = 2;
  up.add_src = src;
  up.add_dst = dst;
  int64_t first = -1;
  EXPECT_OK(ng_engine_update(e, &up, &first));
  EXPECT_EQ_I(first, n_new);
  ng_engine_info ei;
  ng_engine_info_get(&ei, e);
  EXPECT_EQ_I(ei.nodes, info.nodes + 1);
  float *after_v = one_logits(e, v), *new_l = one_logits(e, n_new);
  EXPECT_TRUE(after_v && new_l);
  if (after_v && before_v)
    EXPECT_TRUE(memcmp(after_v, before_v, (size_t)C * sizeof(float)) != 0); /* read your write */
  /* Removing the edge into v restores v's row, hence its bits. */
  ng_graph_update rm;
  memset(&rm, 0, sizeof rm);
  rm.n_remove_edges = 1;
  rm.remove_src = &src[0];
  rm.remove_dst = &dst[0];
  EXPECT_OK(ng_engine_update(e, &rm, NULL));
  float *back_v = one_logits(e, v);
  if (back_v && before_v)
    EXPECT_SAME_BITS(back_v, before_v, C, "v after the edge is removed");
  /* Replacing u's features changes u; writing the old ones back restores its bits. */
  float *zero = ng_test_xmalloc((size_t)info.feature_dim * sizeof(float));
  for (int64_t c = 0; c < info.feature_dim; c++)
    zero[c] = (float)(c % 5 == 0);
  ng_graph_update fr;
  memset(&fr, 0, sizeof fr);
  fr.n_feature_rows = 1;
  fr.feature_ids = &u;
  fr.feature_values = zero;
  EXPECT_OK(ng_engine_update(e, &fr, NULL));
  float *u2 = one_logits(e, u);
  if (u2 && before_u)
    EXPECT_TRUE(memcmp(u2, before_u, (size_t)C * sizeof(float)) != 0);
  fr.feature_values = feat;
  EXPECT_OK(ng_engine_update(e, &fr, NULL));
  float *u3 = one_logits(e, u);
  if (u3 && before_u)
    EXPECT_SAME_BITS(u3, before_u, C, "u with its own features written back");
  /* Bad updates are refused whole and leave the log as it was. */
  struct stat sb0, sb1;
  EXPECT_TRUE(stat(log, &sb0) == 0);
  int64_t bad_src[2] = {v, info.nodes + 5}, bad_dst[2] = {u, v};
  ng_graph_update bad;
  memset(&bad, 0, sizeof bad);
  bad.n_add_edges = 2;
  bad.add_src = bad_src;
  bad.add_dst = bad_dst;
  EXPECT_STATUS(ng_engine_update(e, &bad, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("add_edges[1]");
  int64_t missing_src = 5, missing_dst = 6;
  ng_graph_update bad2;
  memset(&bad2, 0, sizeof bad2);
  bad2.n_remove_edges = 1;
  bad2.remove_src = &missing_src;
  bad2.remove_dst = &missing_dst;
  EXPECT_STATUS(ng_engine_update(e, &bad2, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("has no neighbour");
  float nan_row[2048];
  memcpy(nan_row, feat, (size_t)info.feature_dim * sizeof(float));
  nan_row[3] = NAN;
  fr.feature_values = nan_row;
  EXPECT_STATUS(ng_engine_update(e, &fr, NULL), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(stat(log, &sb1) == 0);
  EXPECT_EQ_I(sb1.st_size, sb0.st_size);
  float *still_v = one_logits(e, v);
  if (still_v && before_v)
    EXPECT_SAME_BITS(still_v, before_v, C, "v after refused updates");
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.updates, 4);
  float *final_new = one_logits(e, n_new);
  /* Replay: a new engine on the same log answers as the old one did. */
  ng_engine_destroy(e);
  e = engine(&sage, NG_MODE_AUTO, -1.0, 0, log, 0);
  if (e) {
    ng_engine_info_get(&ei, e);
    EXPECT_EQ_I(ei.nodes, info.nodes + 1);
    float *replay_new = one_logits(e, n_new), *replay_v = one_logits(e, v);
    if (replay_new && final_new)
      EXPECT_SAME_BITS(replay_new, final_new, C, "new node after replay");
    if (replay_v && before_v)
      EXPECT_SAME_BITS(replay_v, before_v, C, "v after replay");
    free(replay_new);
    free(replay_v);
    ng_engine_destroy(e);
  }
  /* Updates need a log. */
  e = engine(&sage, NG_MODE_AUTO, -1.0, 0, NULL, 0);
  if (e) {
    EXPECT_STATUS(ng_engine_update(e, &fr, NULL), NG_ERR_UNSUPPORTED);
    ng_engine_destroy(e);
  }
  free(before_v);
  free(before_u);
  free(after_v);
  free(new_l);
  free(final_new);
  free(back_v);
  free(u2);
  free(u3);
  free(still_v);
  free(feat);
  free(zero);
}

/* Snapshot isolation: an updater flips two things at once (a feature row of a neighbour of the
 * probe, and an edge into the probe) while readers ask for the probe: every answer is one of
 * the two states' answers, never a mix. */
typedef struct {
  ng_engine *e;
  const float *a, *b, *mix1, *mix2;
  int64_t v;
  int rounds;
  int bad, saw_a, saw_b;
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  const int64_t C = info.classes;
  for (int i = 0; i < r->rounds; i++) {
    float *l = one_logits(r->e, r->v);
    if (!l) {
      r->bad++;
      continue;
    }
    if (memcmp(l, r->a, (size_t)C * sizeof(float)) == 0)
      r->saw_a++;
    else if (memcmp(l, r->b, (size_t)C * sizeof(float)) == 0)
      r->saw_b++;
    else
      r->bad++;
    free(l);
  }
  return NULL;
}

static void test_snapshot_isolation(void) {
  const char *log = tpath("isolation.log");
  ng_engine *e = engine(&sage, NG_MODE_AUTO, 0.5, 0, log, 100);
  if (!e)
    return;
  const int64_t v = 1358, w = 2000, x = 21;
  float *alt = ng_test_xmalloc((size_t)info.feature_dim * sizeof(float));
  for (int64_t c = 0; c < info.feature_dim; c++)
    alt[c] = (float)(c % 7 == 0);
  float *orig = ng_test_xmalloc((size_t)info.feature_dim * sizeof(float));
  memcpy(orig, raw_row(x), (size_t)info.feature_dim * sizeof(float));
  /* State A: the dataset. State B: w -> v added and x's features replaced, in one update. */
  ng_graph_update to_b, to_a;
  memset(&to_b, 0, sizeof to_b);
  to_b.n_add_edges = 1;
  to_b.add_src = &w;
  to_b.add_dst = &v;
  to_b.n_feature_rows = 1;
  to_b.feature_ids = &x;
  to_b.feature_values = alt;
  memset(&to_a, 0, sizeof to_a);
  to_a.n_remove_edges = 1;
  to_a.remove_src = &w;
  to_a.remove_dst = &v;
  to_a.n_feature_rows = 1;
  to_a.feature_ids = &x;
  to_a.feature_values = orig;
  /* x must reach v's answer: it is in v's receptive field. */
  float *a = one_logits(e, v);
  EXPECT_OK(ng_engine_update(e, &to_b, NULL));
  float *b = one_logits(e, v);
  EXPECT_OK(ng_engine_update(e, &to_a, NULL));
  float *a2 = one_logits(e, v);
  if (!a || !b || !a2) {
    ng_engine_destroy(e);
    return;
  }
  EXPECT_SAME_BITS(a2, a, info.classes, "state A again");
  EXPECT_TRUE(memcmp(a, b, (size_t)info.classes * sizeof(float)) != 0);
  reader r[3];
  pthread_t th[3];
  for (int k = 0; k < 3; k++) {
    r[k] = (reader){.e = e, .a = a, .b = b, .v = v, .rounds = 60};
    pthread_create(&th[k], NULL, reader_main, &r[k]);
  }
  for (int i = 0; i < 40; i++) {
    EXPECT_OK(ng_engine_update(e, &to_b, NULL));
    EXPECT_OK(ng_engine_update(e, &to_a, NULL));
  }
  int saw = 0;
  for (int k = 0; k < 3; k++) {
    pthread_join(th[k], NULL);
    EXPECT_EQ_I(r[k].bad, 0);
    saw += r[k].saw_a + r[k].saw_b;
  }
  EXPECT_EQ_I(saw, 180);
  ng_engine_destroy(e);
  free(a);
  free(b);
  free(a2);
  free(alt);
  free(orig);
}

/* ---- the log after a crash ---- */

static void copy_file(const char *dst, const char *src, size_t keep) {
  size_t len = 0;
  void *data = ng_test_read_file(src, &len);
  EXPECT_TRUE(data != NULL);
  if (data)
    EXPECT_TRUE(ng_test_write_file(dst, data, NG_MIN(len, keep)));
  free(data);
}

static void test_log_replay(void) {
  const int64_t C = info.classes;
  const char *log = tpath("crash.log");
  ng_engine *e = engine(&gcn, NG_MODE_AUTO, -1.0, 0, log, 0);
  if (!e)
    return;
  const int64_t v = 100;
  size_t sizes[4];
  float *state[4];
  struct stat sb;
  state[0] = one_logits(e, v);
  stat(log, &sb);
  sizes[0] = (size_t)sb.st_size;
  for (int i = 1; i < 4; i++) {
    int64_t src = 200 + i;
    ng_graph_update up;
    memset(&up, 0, sizeof up);
    up.n_add_edges = 1;
    up.add_src = &src;
    up.add_dst = &v;
    EXPECT_OK(ng_engine_update(e, &up, NULL));
    state[i] = one_logits(e, v);
    stat(log, &sb);
    sizes[i] = (size_t)sb.st_size;
  }
  /* kill -9 now: what is on disk is every acknowledged update (copied while the engine runs). */
  const char *crash = tpath("crash-copy.log");
  copy_file(crash, log, sizes[3]);
  ng_engine *r = engine(&gcn, NG_MODE_AUTO, -1.0, 0, crash, 0);
  if (r) {
    float *l = one_logits(r, v);
    if (l && state[3])
      EXPECT_SAME_BITS(l, state[3], C, "after a crash");
    free(l);
    ng_engine_destroy(r);
  }
  /* A torn final record (the crash hit an append): cut off, the earlier ones replayed. */
  const char *torn = tpath("torn.log");
  copy_file(torn, log, sizes[2] + (sizes[3] - sizes[2]) / 2);
  r = engine(&gcn, NG_MODE_AUTO, -1.0, 0, torn, 0);
  if (r) {
    float *l = one_logits(r, v);
    if (l && state[2])
      EXPECT_SAME_BITS(l, state[2], C, "after a torn record");
    free(l);
    stat(torn, &sb);
    EXPECT_EQ_I(sb.st_size, sizes[2]); /* the torn bytes are gone */
    /* The log goes on after the cut: a new update replays too. */
    int64_t src = 300;
    ng_graph_update up;
    memset(&up, 0, sizeof up);
    up.n_add_edges = 1;
    up.add_src = &src;
    up.add_dst = &v;
    EXPECT_OK(ng_engine_update(r, &up, NULL));
    ng_engine_destroy(r);
    r = engine(&gcn, NG_MODE_AUTO, -1.0, 0, torn, 0);
    if (r) {
      ng_engine_stats s;
      ng_engine_stats_get(&s, r);
      EXPECT_EQ_I(s.updates, 0);
      ng_engine_destroy(r);
    }
  }
  /* Zeros after the last record (a file system extended the file before the crash). */
  const char *zeros = tpath("zeros.log");
  {
    size_t len = 0;
    char *data = ng_test_read_file(log, &len);
    char *grown = calloc(len + 100, 1);
    if (data && grown) {
      memcpy(grown, data, len);
      EXPECT_TRUE(ng_test_write_file(zeros, grown, len + 100));
    }
    free(data);
    free(grown);
    r = engine(&gcn, NG_MODE_AUTO, -1.0, 0, zeros, 0);
    if (r) {
      float *l = one_logits(r, v);
      if (l && state[3])
        EXPECT_SAME_BITS(l, state[3], C, "after trailing zeros");
      free(l);
      ng_engine_destroy(r);
    }
  }
  /* A corrupt record with records after it is refused, naming the offset. */
  const char *bad = tpath("corrupt.log");
  {
    size_t len = 0;
    char *data = ng_test_read_file(log, &len);
    if (data) {
      data[sizes[0] + 30] ^= 0x10; /* inside the first record's payload */
      EXPECT_TRUE(ng_test_write_file(bad, data, len));
    }
    free(data);
    ng_engine_opts o = NG_ENGINE_OPTS_INIT;
    o.log_path = bad;
    ng_engine *x = NULL;
    EXPECT_STATUS(ng_engine_create(&x, cora, gcn.model, gcn.ckpt, &o), NG_ERR_FORMAT);
    EXPECT_ERR_HAS("corrupt");
    EXPECT_TRUE(x == NULL);
  }
  /* An edited header is refused: it fails its own CRC (test_serve_log.c has the dataset
   * fingerprint). */
  {
    const char *other = tpath("other.log");
    size_t len = 0;
    char *data = ng_test_read_file(log, &len);
    if (data) {
      int64_t nodes = 12345;
      memcpy(data + 16, &nodes, 8);
      EXPECT_TRUE(ng_test_write_file(other, data, len));
    }
    free(data);
    ng_engine_opts o = NG_ENGINE_OPTS_INIT;
    o.log_path = other;
    ng_engine *x = NULL;
    EXPECT_STATUS(ng_engine_create(&x, cora, gcn.model, gcn.ckpt, &o), NG_ERR_FORMAT);
    EXPECT_ERR_HAS("header fails its CRC-32");
  }
  ng_engine_destroy(e);
  for (int i = 0; i < 4; i++)
    free(state[i]);
}

/* ---- admission and bad input ---- */

typedef struct {
  ng_engine *e;
  int64_t id;
  ng_status st;
} blocked;

static void *blocked_main(void *arg) {
  blocked *b = arg;
  ng_infer_request q;
  memset(&q, 0, sizeof q);
  q.node_ids = &b->id;
  q.n = 1;
  ng_infer_result res;
  b->st = ng_engine_infer(b->e, &q, &res);
  if (b->st == NG_OK)
    ng_infer_result_free(&res);
  return NULL;
}

static void test_queue_full(void) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.queue_cap = 2;
  o.max_batch = 1000;
  o.max_delay_us = 30 * 1000 * 1000; /* the batcher waits for more: both stay admitted */
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
  o.normalize = sage.normalize;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
  if (!e)
    return;
  blocked b[2] = {{e, 3, NG_ERR_INTERNAL}, {e, 4, NG_ERR_INTERNAL}};
  pthread_t th[2];
  for (int k = 0; k < 2; k++)
    pthread_create(&th[k], NULL, blocked_main, &b[k]);
  ng_engine_stats s;
  for (int spin = 0; spin < 5000; spin++) {
    ng_engine_stats_get(&s, e);
    if (s.queue_depth == 2)
      break;
    usleep(1000);
  }
  EXPECT_EQ_I(s.queue_depth, 2);
  int64_t id = 5;
  ng_infer_request q;
  memset(&q, 0, sizeof q);
  q.node_ids = &id;
  q.n = 1;
  ng_infer_result res;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_STATE);
  EXPECT_ERR_HAS("queue_cap");
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.rejected_busy, 1);
  /* Destroy drains: the admitted requests are answered. */
  ng_engine_destroy(e);
  for (int k = 0; k < 2; k++) {
    pthread_join(th[k], NULL);
    EXPECT_OK(b[k].st);
  }
}

/* A request with a deadline, on its own thread. */
typedef struct {
  ng_engine *e;
  int64_t id;
  int64_t timeout_ms;
  ng_status st;
  char err[512];
} timed;

static void *timed_main(void *arg) {
  timed *t = arg;
  ng_infer_request q;
  memset(&q, 0, sizeof q);
  q.node_ids = &t->id;
  q.n = 1;
  q.timeout_ms = t->timeout_ms;
  ng_infer_result res;
  t->st = ng_engine_infer(t->e, &q, &res);
  snprintf(t->err, sizeof t->err, "%s", t->st == NG_OK ? "" : ng_last_error());
  if (t->st == NG_OK)
    ng_infer_result_free(&res);
  return NULL;
}

/* Waits (bounded) until `depth` requests are admitted and unanswered. */
static void await_depth(ng_engine *e, int64_t depth) {
  ng_engine_stats s;
  for (int spin = 0; spin < 20000; spin++) {
    ng_engine_stats_get(&s, e);
    if (s.queue_depth == depth)
      return;
    usleep(1000);
  }
  EXPECT_EQ_I(s.queue_depth, depth);
}

static ng_engine *paused_engine(int max_batch) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.max_batch = max_batch;
  o.max_delay_us = 0;
  o.workers = 2;
  o.serve_workers = serve_workers();
  o.normalize = sage.normalize;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
  if (e)
    ng__engine_test_pause(e, true);
  return e;
}

/* A queued request whose deadline passes before the batcher can start it (the batcher is held)
 * is answered busy and never computed; one admitted with a long deadline is computed once the
 * batcher goes on. */
static void test_deadline_expires(void) {
  ng_engine *e = paused_engine(64);
  if (!e)
    return;
  timed slow = {e, 7, 60 * 1000, NG_ERR_INTERNAL, ""}, quick = {e, 8, 20, NG_ERR_INTERNAL, ""};
  pthread_t th[2];
  pthread_create(&th[0], NULL, timed_main, &slow);
  await_depth(e, 1);
  pthread_create(&th[1], NULL, timed_main, &quick);
  pthread_join(th[1], NULL); /* answered at its deadline while the batcher is held */
  EXPECT_STATUS(quick.st, NG_ERR_STATE);
  EXPECT_TRUE(strstr(quick.err, "deadline (timeout_ms 20)") != NULL);
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.timed_out, 1);
  EXPECT_EQ_I(s.batches, 0);
  EXPECT_EQ_I(s.computed, 0);
  EXPECT_EQ_I(s.queue_depth, 1);
  ng__engine_test_pause(e, false);
  pthread_join(th[0], NULL);
  EXPECT_OK(slow.st);
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.batches, 1);
  EXPECT_EQ_I(s.batch_nodes, 1); /* the expired request was not computed */
  EXPECT_EQ_I(s.computed, 1);
  EXPECT_EQ_I(s.timed_out, 1);
  EXPECT_EQ_I(s.queue_depth, 0);
  ng_engine_destroy(e);
}

static int64_t two_hop(const ng_csr *g, int64_t v);

/* A request's callback (ng_engine_submit): how often it ran, and its last status. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  ng_status st;
  char msg[512];
} recorder;

static void record_done(void *user, ng_status st, const char *message) {
  recorder *r = user;
  pthread_mutex_lock(&r->mu);
  r->calls++;
  r->st = st;
  snprintf(r->msg, sizeof r->msg, "%s", message);
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void recorder_init(recorder *r) {
  memset(r, 0, sizeof *r);
  r->st = NG_ERR_INTERNAL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
}

static int recorder_calls(recorder *r) {
  pthread_mutex_lock(&r->mu);
  const int n = r->calls;
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* One request of one node, submitted: NG_OK and its ticket, or the refusal. */
static ng_status submit_one(ng_engine *e, const int64_t *id, int64_t timeout_ms,
                            ng_infer_result *res, recorder *r, ng_infer_ticket *t) {
  static ng_infer_request reqs[8]; /* borrowed until the callback: kept here */
  static int next;
  ng_infer_request *q = &reqs[next++ % 8];
  memset(q, 0, sizeof *q);
  q->node_ids = id;
  q->n = 1;
  q->outputs = NG_OUT_LOGITS;
  q->timeout_ms = timeout_ms;
  return ng_engine_submit(e, q, res, record_done, r, t);
}

/* Cancelling a queued request (the lanes held) drops it: its callback runs once, before
 * ng_engine_cancel returns, with NG_ERR_INTERRUPTED, and it is never computed; the ticket is then
 * unknown. A request beside it is answered as usual once the lanes go on. */
static void test_cancel_queued(void) {
  ng_engine *e = paused_engine(64);
  if (!e)
    return;
  const int64_t ids[2] = {7, 8};
  recorder rc[2];
  ng_infer_result res[2];
  ng_infer_ticket t[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    recorder_init(&rc[k]);
    EXPECT_OK(submit_one(e, &ids[k], 0, &res[k], &rc[k], &t[k]));
  }
  EXPECT_TRUE(t[0] != 0 && t[1] != 0 && t[0] != t[1]);
  EXPECT_OK(ng_engine_cancel(e, t[0]));
  EXPECT_EQ_I(recorder_calls(&rc[0]), 1); /* answered before cancel returned */
  EXPECT_STATUS(rc[0].st, NG_ERR_INTERRUPTED);
  EXPECT_TRUE(res[0].logits == NULL);
  EXPECT_STATUS(ng_engine_cancel(e, t[0]), NG_ERR_NOT_FOUND);
  EXPECT_STATUS(ng_engine_cancel(e, 0), NG_ERR_NOT_FOUND);
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.cancelled, 1);
  EXPECT_EQ_I(s.computed, 0);
  EXPECT_EQ_I(s.queue_depth, 1);
  ng__engine_test_pause(e, false);
  pthread_mutex_lock(&rc[1].mu);
  while (rc[1].calls == 0)
    pthread_cond_wait(&rc[1].cv, &rc[1].mu);
  pthread_mutex_unlock(&rc[1].mu);
  EXPECT_OK(rc[1].st);
  const int64_t C = info.classes;
  if (res[1].logits)
    EXPECT_SAME_BITS(res[1].logits, sage.ref + ids[1] * C, C, "the request beside it");
  ng_infer_result_free(&res[1]);
  ng_engine_destroy(e); /* every callback has run once destroy returns */
  EXPECT_EQ_I(recorder_calls(&rc[0]), 1);
  EXPECT_EQ_I(recorder_calls(&rc[1]), 1);
  for (int k = 0; k < 2; k++) {
    pthread_cond_destroy(&rc[k].cv);
    pthread_mutex_destroy(&rc[k].mu);
  }
}

/* A request cancelled inside its batch (a hub request held there by the test hook) is computed
 * and its answer discarded: its callback runs once, when the batch ends, with
 * NG_ERR_INTERRUPTED. Meanwhile, with the hub lane busy, a second hub request queued behind it is
 * answered busy at its deadline by the clock, never computed. */
static void test_cancel_in_batch(void) {
  const ng_csr *g = &cora->csr;
  int64_t hub = 0;
  for (int64_t v = 1; v < info.nodes; v++)
    if (two_hop(g, v) > two_hop(g, hub))
      hub = v;
  ng_engine *e = engine(&sage, NG_MODE_AUTO, -1.0, two_hop(g, hub) - 1, NULL, 0);
  if (!e)
    return;
  recorder rc;
  recorder_init(&rc);
  ng_infer_result res;
  ng_infer_ticket t = 0;
  ng__engine_test_hold_hub(e, true);
  EXPECT_OK(submit_one(e, &hub, 0, &res, &rc, &t));
  EXPECT_TRUE(ng__engine_test_hub_held(e, 60.0)); /* taken, and held inside its batch */
  EXPECT_OK(ng_engine_cancel(e, t));
  EXPECT_EQ_I(recorder_calls(&rc), 0); /* its batch has not ended */
  /* The lane is held: the queued request behind it can only be answered by the clock. */
  timed late = {e, hub, 20, NG_ERR_INTERNAL, ""};
  timed_main(&late);
  EXPECT_STATUS(late.st, NG_ERR_STATE);
  EXPECT_TRUE(strstr(late.err, "deadline (timeout_ms 20)") != NULL);
  EXPECT_EQ_I(recorder_calls(&rc), 0); /* still held */
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.timed_out, 1);
  EXPECT_EQ_I(s.computed, 1);
  ng__engine_test_hold_hub(e, false);
  pthread_mutex_lock(&rc.mu);
  while (rc.calls == 0)
    pthread_cond_wait(&rc.cv, &rc.mu);
  pthread_mutex_unlock(&rc.mu);
  EXPECT_STATUS(rc.st, NG_ERR_INTERRUPTED);
  EXPECT_TRUE(res.logits == NULL);
  EXPECT_STATUS(ng_engine_cancel(e, t), NG_ERR_NOT_FOUND);
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.cancelled, 1);
  EXPECT_EQ_I(s.computed, 1);
  EXPECT_EQ_I(s.batches, 1);
  EXPECT_EQ_I(s.queue_depth, 0);
  ng_engine_destroy(e);
  EXPECT_EQ_I(recorder_calls(&rc), 1);
  pthread_cond_destroy(&rc.cv);
  pthread_mutex_destroy(&rc.mu);
}

/* Admission by predicted wait: with work queued ahead and a (fixed) large measured cost, a
 * request whose deadline the wait would pass is refused at once, not queued; with nothing
 * ahead the same cost predicts no wait and the request is admitted. */
static void test_admission_by_wait(void) {
  ng_engine *e = paused_engine(64);
  if (!e)
    return;
  ng__engine_test_cost(e, 1e6); /* one second per unit of work */
  timed ahead = {e, 1358, 60 * 1000, NG_ERR_INTERNAL, ""};
  pthread_t th;
  pthread_create(&th, NULL, timed_main, &ahead); /* nothing ahead of it: admitted */
  await_depth(e, 1);
  timed refused = {e, 3, 1000, NG_ERR_INTERNAL, ""};
  timed_main(&refused); /* returns at once: not queued behind the held batcher */
  EXPECT_STATUS(refused.st, NG_ERR_STATE);
  EXPECT_TRUE(strstr(refused.err, "predicted wait") != NULL);
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.rejected_deadline, 1);
  EXPECT_EQ_I(s.timed_out, 0);
  EXPECT_EQ_I(s.queue_depth, 1);
  EXPECT_EQ_I(s.requests, 1);
  ng__engine_test_pause(e, false);
  pthread_join(th, NULL);
  EXPECT_OK(ahead.st);
  /* Measuring again: a request after the queue drained is admitted and answered. */
  ng__engine_test_cost(e, 0.0);
  timed after = {e, 3, 1000, NG_ERR_INTERNAL, ""};
  timed_main(&after);
  EXPECT_OK(after.st);
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.batches, 2);
  EXPECT_EQ_I(s.rejected_deadline, 1);
  ng_engine_destroy(e);
}

/* The engine's work estimate of each of `ids[n]` as a one-node request of a two-layer model
 * with full fields on Cora (its field's edges plus its node), into `work`; false when the
 * snapshot cannot be made (the failure is already reported). */
static bool full_field_work(int64_t *work, const int64_t *ids, int n) {
  ng_srv_snap *snap = NULL;
  EXPECT_OK(
      ng__srv_snap_base(&snap, &cora->csr, cora->features, info.feature_dim, NG_NORMALIZE_NONE));
  if (!snap)
    return false;
  const int32_t full[2] = {-1, -1};
  for (int i = 0; i < n; i++)
    work[i] = ng__srv_field_estimate(snap, 2, full, &ids[i], 1, INT64_MAX) + 1;
  ng__srv_snap_unref(snap);
  return true;
}

/* Batches are capped by estimated work (field edges plus nodes), not by nodes alone: with room
 * for the first two of three queued one-node requests, they make two batches. */
static void test_batch_work_cap(void) {
  const int64_t ids[3] = {1358, 0, 17};
  int64_t work[3];
  if (!full_field_work(work, ids, 3))
    return;
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.max_batch = 64;
  o.max_delay_us = 0;
  o.max_batch_work = work[0] + work[1];
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
  o.workers = 2;
  o.serve_workers = serve_workers();
  o.normalize = sage.normalize;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
  if (!e)
    return;
  ng__engine_test_pause(e, true);
  timed q[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    q[i] = (timed){e, ids[i], 0, NG_ERR_INTERNAL, ""};
    pthread_create(&th[i], NULL, timed_main, &q[i]);
    await_depth(e, i + 1); /* queued in this order */
  }
  ng__engine_test_pause(e, false);
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    EXPECT_OK(q[i].st);
  }
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.batches, 2);
  EXPECT_EQ_I(s.batch_nodes, 3);
  ng_engine_destroy(e);
}

/* timeout_ms out of range is a bad request; the default queue cap (max_batch) is reachable. */
static void test_deadline_args(void) {
  ng_engine *e = paused_engine(2);
  if (!e)
    return;
  timed bad = {e, 3, -1, NG_ERR_INTERNAL, ""};
  timed_main(&bad);
  EXPECT_STATUS(bad.st, NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(bad.err, "timeout_ms -1") != NULL);
  bad.timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS + 1;
  timed_main(&bad);
  EXPECT_STATUS(bad.st, NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(bad.err, "timeout_ms 3600001") != NULL);
  timed held[2] = {{e, 1, NG_ENGINE_MAX_TIMEOUT_MS, NG_ERR_INTERNAL, ""},
                   {e, 2, 0, NG_ERR_INTERNAL, ""}};
  pthread_t th[2];
  for (int k = 0; k < 2; k++)
    pthread_create(&th[k], NULL, timed_main, &held[k]);
  await_depth(e, 2);
  timed third = {e, 3, 0, NG_ERR_INTERNAL, ""};
  timed_main(&third);
  EXPECT_STATUS(third.st, NG_ERR_STATE);
  EXPECT_TRUE(strstr(third.err, "queue_cap") != NULL);
  ng__engine_test_pause(e, false);
  for (int k = 0; k < 2; k++) {
    pthread_join(th[k], NULL);
    EXPECT_OK(held[k].st);
  }
  ng_engine_destroy(e);
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS + 1;
  ng_engine *x = NULL;
  EXPECT_STATUS(ng_engine_create(&x, cora, sage.model, sage.ckpt, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("request_timeout_ms");
}

/* Several main-lane workers take batches from one queue at once: every answer is the same bits
 * as the trainer's, whichever worker computed it and whatever it was batched with. */
static void test_workers_same_bits(void) {
  const int64_t C = info.classes;
  for (int workers = 2; workers <= 3; workers++) {
    ng_engine_opts o = NG_ENGINE_OPTS_INIT;
    o.serve_workers = workers;
    o.max_batch = 3; /* small batches: many of them, spread over the workers */
    o.queue_cap = 64;
    o.max_delay_us = 200;
    o.workers = 2;
    o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
    o.normalize = sage.normalize;
    ng_engine *e = NULL;
    EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
    if (!e)
      return;
    float *want = ng_test_xmalloc((size_t)n_probe * (size_t)C * sizeof(float));
    for (int i = 0; i < n_probe; i++)
      memcpy(want + i * C, sage.ref + probe[i] * C, (size_t)C * sizeof(float));
    concurrent(e, want, 6, 2, 0, 0);
    ng_engine_stats s;
    ng_engine_stats_get(&s, e);
    EXPECT_EQ_I(s.computed, s.requests);
    EXPECT_TRUE(s.batches >= s.batch_nodes / 3); /* no batch over max_batch */
    EXPECT_EQ_I(s.queue_depth, 0);
    free(want);
    ng_engine_destroy(e);
  }
}

/* Admission counts the main lane's workers: the same work ahead predicts half the wait with two
 * workers, so a deadline between the two predictions is admitted with two workers and refused
 * with one. */
static void test_admission_workers(void) {
  const int64_t ahead_id = 1358;
  int64_t work;
  if (!full_field_work(&work, &ahead_id, 1))
    return;
  for (int workers = 1; workers <= 2; workers++) {
    ng_engine_opts o = NG_ENGINE_OPTS_INIT;
    o.serve_workers = workers;
    o.max_delay_us = 0;
    o.workers = 2;
    o.normalize = sage.normalize;
    ng_engine *e = NULL;
    EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
    if (!e)
      return;
    ng__engine_test_pause(e, true);
    /* The request ahead predicts a wait of 1,000 s for one worker, 500 s for two. */
    ng__engine_test_cost(e, 1e9 / (double)work);
    timed ahead = {e, ahead_id, NG_ENGINE_MAX_TIMEOUT_MS, NG_ERR_INTERNAL, ""};
    pthread_t th[2];
    pthread_create(&th[0], NULL, timed_main, &ahead);
    await_depth(e, 1);
    timed next = {e, 3, 700 * 1000, NG_ERR_INTERNAL, ""};
    if (workers == 1) {
      timed_main(&next); /* refused at once */
      EXPECT_STATUS(next.st, NG_ERR_STATE);
      EXPECT_TRUE(strstr(next.err, "predicted wait") != NULL);
    } else {
      pthread_create(&th[1], NULL, timed_main, &next);
      await_depth(e, 2); /* admitted */
    }
    ng_engine_stats s;
    ng_engine_stats_get(&s, e);
    EXPECT_EQ_I(s.rejected_deadline, workers == 1);
    EXPECT_EQ_I(s.requests, workers == 1 ? 1 : 2);
    ng__engine_test_pause(e, false);
    pthread_join(th[0], NULL);
    EXPECT_OK(ahead.st);
    if (workers == 2) {
      pthread_join(th[1], NULL);
      EXPECT_OK(next.st);
    }
    ng_engine_destroy(e);
  }
}

static void test_bad_requests(void) {
  ng_engine *e = engine(&sage, NG_MODE_AUTO, -1.0, 0, NULL, 0);
  if (!e)
    return;
  int64_t ids[2] = {1, info.nodes};
  ng_infer_request q;
  memset(&q, 0, sizeof q);
  q.node_ids = ids;
  q.n = 2;
  ng_infer_result res;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("node_ids[1]");
  ids[1] = -1;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  ids[1] = 2;
  q.n = 0;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  q.n = 5000;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("max_request_nodes");
  q.n = 2;
  q.n_fanouts = 1;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("one per layer");
  q.n_fanouts = 2;
  q.fanout[0] = 3;
  q.fanout[1] = 0;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("layer 1");
  q.n_fanouts = 0;
  q.outputs = NG_OUT_EMBEDDING;
  q.embedding_layer = 2;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("embedding_layer 2");
  q.outputs = 8;
  EXPECT_STATUS(ng_engine_infer(e, &q, &res), NG_ERR_INVALID_ARG);
  /* A repeated id is answered twice; embedding of layer 1 is the logits. */
  ids[1] = 1;
  q.outputs = NG_OUT_EMBEDDING | NG_OUT_LOGITS;
  q.embedding_layer = 1;
  EXPECT_OK(ng_engine_infer(e, &q, &res));
  if (res.logits) {
    EXPECT_EQ_I(res.embedding_dim, info.classes);
    EXPECT_SAME_BITS(res.logits, res.logits + info.classes, info.classes, "repeated id");
    EXPECT_SAME_BITS(res.embedding, res.logits, 2 * info.classes, "last layer's embedding");
    EXPECT_SAME_BITS(res.logits, sage.ref + info.classes, info.classes, "node 1");
  }
  ng_infer_result_free(&res);
  ng_engine_info ei;
  ng_engine_info_get(&ei, e);
  EXPECT_EQ_I(ei.layers, 2);
  EXPECT_EQ_I(ei.layer_dim[0], 16);
  EXPECT_EQ_I(ei.classes, info.classes);
  EXPECT_EQ_I(ei.ready, 1);
  ng_engine_destroy(e);
  ng_engine_destroy(NULL);
  /* A checkpoint of another model shape is refused. */
  ng_engine *x = NULL;
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  EXPECT_STATUS(ng_engine_create(&x, cora, sage.model, gcn.ckpt, &o), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("trained with --model gcn, this run uses sage");
  EXPECT_STATUS(ng_engine_create(&x, cora, sage.model, tpath("missing.st"), &o), NG_ERR_NOT_FOUND);
}

/* Unrolled 2-hop edges of node v (what the engine's hub test counts for a full neighbourhood). */
static int64_t two_hop(const ng_csr *g, int64_t v) {
  int64_t n = g->indptr[v + 1] - g->indptr[v];
  for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++) {
    int64_t u = ng__csr_index(g, e);
    n += g->indptr[u + 1] - g->indptr[u];
  }
  return n;
}

/* A request on its own thread that says when it is answered (slow-hub test). */
typedef struct {
  ng_engine *e;
  int64_t id;
  ng_status st;
  bool hub;
  float logits[16];
  int *answered; /* under *mu, signalled on *cv */
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
} lane_call;

static void *lane_call_main(void *arg) {
  lane_call *c = arg;
  ng_infer_request q;
  memset(&q, 0, sizeof q);
  q.node_ids = &c->id;
  q.n = 1;
  q.outputs = NG_OUT_LOGITS;
  ng_infer_result res;
  c->st = ng_engine_infer(c->e, &q, &res);
  if (c->st == NG_OK) {
    c->hub = res.hub != 0;
    memcpy(c->logits, res.logits, (size_t)NG_MIN(res.classes, 16) * sizeof(float));
    ng_infer_result_free(&res);
  }
  pthread_mutex_lock(c->mu);
  (*c->answered)++;
  pthread_cond_broadcast(c->cv);
  pthread_mutex_unlock(c->mu);
  return NULL;
}

/* Waits up to `seconds` for *answered to reach `n`; returns it. */
static int await_answered(pthread_mutex_t *mu, pthread_cond_t *cv, int *answered, int n,
                          int seconds) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += seconds;
  pthread_mutex_lock(mu);
  while (*answered < n && pthread_cond_timedwait(cv, mu, &until) == 0) {
  }
  const int got = *answered;
  pthread_mutex_unlock(mu);
  return got;
}

/* The hub lane: a hub request held inside its batch (a simulated slow hub: the hold hook
 * blocks it after it was taken, before it computes) does not stop ordinary requests sent after
 * it from being answered; once released, the hub is answered too. Both with the trainer's bits
 * (every row hot). Routed to the main lane, the ordinary requests would wait behind the held
 * hub until the bounded wait fails. */
static void test_slow_hub(void) {
  const ng_csr *g = &cora->csr;
  int64_t hub = 0;
  for (int64_t v = 1; v < info.nodes; v++)
    if (two_hop(g, v) > two_hop(g, hub))
      hub = v;
  enum { N_ORD = 6 };
  int64_t ord[N_ORD];
  int n_ord = 0;
  for (int64_t v = 0; v < info.nodes && n_ord < N_ORD; v += 97)
    if (two_hop(g, v) < two_hop(g, hub) / 4)
      ord[n_ord++] = v;
  EXPECT_EQ_I(n_ord, N_ORD);
  ng_engine *e = engine(&sage, NG_MODE_AUTO, -1.0, two_hop(g, hub) - 1, NULL, 0);
  if (!e)
    return;
  ng_engine_info ei;
  ng_engine_info_get(&ei, e);
  EXPECT_EQ_I(ei.layers, 2); /* two_hop is the engine's 2-layer estimate */
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  int hub_answered = 0, ord_answered = 0;
  lane_call hc = {e, hub, NG_ERR_INTERNAL, false, {0}, &hub_answered, &mu, &cv};
  lane_call oc[N_ORD];
  pthread_t hub_th, ord_th[N_ORD];
  ng__engine_test_hold_hub(e, true);
  pthread_create(&hub_th, NULL, lane_call_main, &hc);
  EXPECT_TRUE(ng__engine_test_hub_held(e, 60.0)); /* taken, and held inside its batch */
  for (int i = 0; i < N_ORD; i++) {
    oc[i] = (lane_call){e, ord[i], NG_ERR_INTERNAL, false, {0}, &ord_answered, &mu, &cv};
    pthread_create(&ord_th[i], NULL, lane_call_main, &oc[i]);
  }
  /* Bounded generously: answered at once with the lane, never without it. */
  const int got = await_answered(&mu, &cv, &ord_answered, N_ORD, 30);
  EXPECT_EQ_I(got, N_ORD);
  pthread_mutex_lock(&mu);
  EXPECT_EQ_I(hub_answered, 0); /* the hub is still held */
  pthread_mutex_unlock(&mu);
  ng__engine_test_hold_hub(e, false);
  pthread_join(hub_th, NULL);
  for (int i = 0; i < N_ORD; i++)
    pthread_join(ord_th[i], NULL);
  const int64_t C = info.classes;
  EXPECT_OK(hc.st);
  EXPECT_TRUE(hc.hub);
  EXPECT_SAME_BITS(hc.logits, sage.ref + hub * C, C, "the hub, on the hub lane");
  for (int i = 0; i < N_ORD; i++) {
    EXPECT_OK(oc[i].st);
    EXPECT_TRUE(!oc[i].hub);
    EXPECT_SAME_BITS(oc[i].logits, sage.ref + ord[i] * C, C, "an ordinary request beside it");
  }
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.hub_requests, 1);
  EXPECT_EQ_I(s.requests, 1 + N_ORD);
  EXPECT_EQ_I(s.queue_depth, 0);
  ng_engine_destroy(e);
  pthread_cond_destroy(&cv);
  pthread_mutex_destroy(&mu);
}

/* Admission predicts a request's wait from the work ahead of it on its own lane: with a hub
 * request queued (the lanes held) and a cost that makes any work ahead a wait of over an hour,
 * an ordinary request is admitted (nothing is ahead of it on the main lane), and a second hub
 * request is refused (the first is ahead of it on the hub lane). */
static void test_admission_per_lane(void) {
  const ng_csr *g = &cora->csr;
  int64_t hub = 0;
  for (int64_t v = 1; v < info.nodes; v++)
    if (two_hop(g, v) > two_hop(g, hub))
      hub = v;
  const int64_t ord = 0;
  EXPECT_TRUE(two_hop(g, ord) < two_hop(g, hub) - 1);
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.max_delay_us = 0;
  o.workers = 2;
  o.serve_workers = serve_workers();
  o.hub_edges = two_hop(g, hub) - 1;
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
  o.normalize = sage.normalize;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o));
  if (!e)
    return;
  ng__engine_test_pause(e, true);
  ng__engine_test_cost(e, 1e9); /* 1,000 s per unit of work */
  timed h = {e, hub, 0, NG_ERR_INTERNAL, ""}, q = {e, ord, 0, NG_ERR_INTERNAL, ""};
  pthread_t th[2];
  pthread_create(&th[0], NULL, timed_main, &h); /* nothing ahead of it: admitted */
  await_depth(e, 1);
  pthread_create(&th[1], NULL, timed_main, &q); /* the hub is on the other lane: admitted */
  await_depth(e, 2);
  timed h2 = {e, hub, 0, NG_ERR_INTERNAL, ""};
  timed_main(&h2); /* the first hub is ahead of it: refused at once */
  EXPECT_STATUS(h2.st, NG_ERR_STATE);
  EXPECT_TRUE(strstr(h2.err, "predicted wait") != NULL);
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_EQ_I(s.rejected_deadline, 1);
  EXPECT_EQ_I(s.requests, 2);
  EXPECT_EQ_I(s.hub_requests, 1);
  ng__engine_test_pause(e, false);
  for (int k = 0; k < 2; k++)
    pthread_join(th[k], NULL);
  EXPECT_OK(h.st);
  EXPECT_OK(q.st);
  ng_engine_destroy(e);
}

/* A generated power-law graph with real hubs, MAX (SAGE) and weighted (GCN) aggregation: hub
 * requests are told apart from ordinary ones, and every mode answers both with the same bits
 * under a simulated cold tier (the host's partial reduction of MAX and of weighted sums agrees
 * with the device's). */
static void test_generated_hubs(void) {
  const char *dir = tpath("powerlaw");
  ng_generate_opts g = NG_GENERATE_OPTS_INIT;
  g.nodes = 3000;
  g.avg_degree = 10.0;
  g.exponent = 2.1;
  g.classes = 4;
  g.feature_dim = 24;
  g.seed = 5;
  EXPECT_OK(ng_dataset_generate(dir, &g));
  ng_dataset_t ds = ng_test_open_ok(dir);
  if (!ds)
    return;
  const ng_csr *csr = &ds->csr;
  int64_t hub = 0, small = 0;
  for (int64_t v = 0; v < g.nodes; v++) {
    if (two_hop(csr, v) > two_hop(csr, hub))
      hub = v;
    if (csr->indptr[v + 1] > csr->indptr[v] && two_hop(csr, v) < two_hop(csr, small))
      small = v;
  }
  const int64_t threshold = (two_hop(csr, hub) + two_hop(csr, small)) / 2;
  EXPECT_TRUE(two_hop(csr, hub) > 10 * two_hop(csr, small));
  const ng_model_kind kinds[2] = {NG_MODEL_SAGE, NG_MODEL_GCN};
  for (int k = 0; k < 2; k++) {
    trained t;
    memset(&t, 0, sizeof t);
    EXPECT_OK(ng_model_create(&t.model, kinds[k], g.feature_dim));
    ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
    l0.aggregator = l1.aggregator = k == 0 ? NG_AGGREGATOR_MAX : NG_AGGREGATOR_GCN;
    l0.out_dim = 16;
    l1.out_dim = g.classes;
    l1.activation = NG_ACT_NONE;
    EXPECT_OK(ng_model_add_layer(t.model, &l0));
    EXPECT_OK(ng_model_add_layer(t.model, &l1));
    ng_train_opts o = NG_TRAIN_OPTS_INIT;
    o.batch = 256;
    o.workers = -1;
    ng_trainer_t tr = NULL;
    EXPECT_OK(ng_trainer_create(&tr, ds, t.model, &o));
    ng_epoch_stats es = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&es, tr));
    snprintf(t.ckpt, sizeof t.ckpt, "%s", tpath(k ? "pl-gcn.st" : "pl-sage.st"));
    EXPECT_OK(ng_trainer_save(tr, t.ckpt));
    ng_trainer_destroy(tr);
    ng_mode modes[] = {NG_MODE_BASELINE, NG_MODE_ZEROCOPY, NG_MODE_PARTIAL, NG_MODE_HYBRID};
    float first[2][8];
    for (size_t m = 0; m < NG_TEST_LEN(modes); m++) {
      ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
      eo.mode = modes[m];
      eo.cache_ratio = 0.25;
      eo.hub_edges = threshold;
      eo.workers = 2;
      eo.serve_workers = serve_workers();
      ng_engine *e = NULL;
      EXPECT_OK(ng_engine_create(&e, ds, t.model, t.ckpt, &eo));
      if (!e)
        break;
      const int64_t ids[2] = {hub, small};
      for (int i = 0; i < 2; i++) {
        ng_infer_request q;
        memset(&q, 0, sizeof q);
        q.node_ids = &ids[i];
        q.n = 1;
        ng_infer_result r;
        EXPECT_OK(ng_engine_infer(e, &q, &r));
        if (!r.logits)
          continue;
        EXPECT_EQ_I(r.hub, i == 0);
        EXPECT_TRUE(r.cold_rows > 0);
        if (m == 0)
          memcpy(first[i], r.logits, (size_t)g.classes * sizeof(float));
        else
          EXPECT_SAME_BITS(r.logits, first[i], g.classes, ng_mode_name(modes[m]));
        ng_infer_result_free(&r);
      }
      ng_engine_stats st;
      ng_engine_stats_get(&st, e);
      EXPECT_EQ_I(st.hub_requests, 1);
      ng_engine_destroy(e);
    }
    ng_model_destroy(t.model);
  }
  ng_dataset_close(ds);
}

static ng_model_t cora_gcn(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_GCN, info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = NG_AGGREGATOR_GCN;
  l0.out_dim = 16;
  l0.fanout = 5;
  l1.out_dim = info.classes;
  l1.fanout = 5;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

static const float *cora_features(int64_t v) {
  static float *table;
  if (!table) {
    /* The raw features, read back through a trainer-free path: the engine's own normalisation
     * is what is tested, so the raw rows come from the dataset file. */
    char path[4096];
    snprintf(path, sizeof path, "%s/cora/features.npy", ng_test_path(""));
    size_t len = 0;
    char *data = ng_test_read_file(path, &len);
    if (!data) {
      fprintf(stderr, "cannot read %s\n", path);
      exit(1);
    }
    size_t bytes = (size_t)info.nodes * (size_t)info.feature_dim * sizeof(float);
    table = ng_test_xmalloc(bytes);
    memcpy(table, data + len - bytes, bytes); /* .npy: the data follow the header */
    free(data);
  }
  return table + v * info.feature_dim;
}

/* A GAT model (4 concatenated heads of 8, then 2 averaged ones), as tests/ng_test_fetch.c builds
 * it. */
static ng_model_t cora_gat(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_GAT, info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.heads = 4;
  l0.combine = NG_HEADS_CONCAT;
  l0.out_dim = 32;
  l0.fanout = 10;
  l0.dropout = l0.attn_dropout = 0.5f;
  l1.heads = 2;
  l1.combine = NG_HEADS_MEAN;
  l1.out_dim = info.classes;
  l1.fanout = 10;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

/* GIN-0 with a hidden layer of 16. */
static ng_model_t cora_gin(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_GIN, info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.out_dim = 16;
  l0.fanout = 5;
  l0.dropout = 0.5f;
  l1.out_dim = info.classes;
  l1.fanout = 5;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

/* GraphSAGE with max-pooling, its neighbour half and self half side by side in the hidden
 * layer. */
static ng_model_t cora_pool(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE_POOL, info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.out_dim = 16;
  l0.fanout = 5;
  l0.combine = NG_SAGE_CONCAT;
  l1.out_dim = info.classes;
  l1.fanout = 5;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

/* The split's tolerance against the unsplit forward (docs/serving-engine.md, "GAT"): the hot and
 * the cold parts' online-softmax states merge in another order than attn_fwd's softmax, and the
 * CPU projects its rows in another order than the backend's GEMM. */
#define GAT_SPLIT_TOL 1e-5

/* The largest |a - b| / (1 + |b|) over n values. */
static double worst_rel(const float *a, const float *b, int64_t n) {
  double w = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
    w = d > w || d != d ? d : w;
  }
  return w;
}

/* Every node's logits in requests of 500 from `e` into out [nodes, classes]; the cold rows the
 * requests read are added to *cold. */
static void all_logits(ng_engine *e, float *out, int64_t *cold) {
  const int64_t C = info.classes;
  int64_t ids[500];
  for (int64_t c0 = 0; c0 < info.nodes; c0 += 500) {
    const int64_t n = NG_MIN(500, info.nodes - c0);
    for (int64_t i = 0; i < n; i++)
      ids[i] = c0 + i;
    ng_infer_result res;
    float *l = logits_of(e, ids, n, &res);
    if (!l)
      return;
    memcpy(out + c0 * C, l, (size_t)(n * C) * sizeof(float));
    *cold += res.cold_rows;
    ng_infer_result_free(&res);
    free(l);
  }
}

static ng_engine *engine_workers(const trained *t, ng_mode mode, double cache_ratio, int workers,
                                 int64_t hub_edges) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.mode = mode;
  o.cache_ratio = cache_ratio;
  o.workers = workers;
  o.hub_edges = hub_edges;
  o.max_delay_us = 2000;
  o.request_timeout_ms = 60 * 1000;
  o.normalize = t->normalize;
  ng_engine *e = NULL;
  ng_status st = ng_engine_create(&e, cora, t->model, t->ckpt, &o);
  if (st != NG_OK)
    fprintf(stderr, "  engine: %s\n", ng_last_error());
  EXPECT_OK(st);
  return e;
}

/* GAT served with its input layer's attention in parts (PARTIAL, or a hub request): every row
 * hot (the device's state alone), half the rows cold and every row cold (the CPU projects and
 * reduces them), each within GAT_SPLIT_TOL of the trainer's unsplit full-neighbour forward
 * (attn_fwd over raw rows); the split answers are bit-identical run to run, for 1, 2 or 3 CPU
 * workers, hub or not, and alone or batched. With raw rows (the other strategies) the engine
 * gives the trainer's bits. */
static void test_gat_split(void) {
  const int64_t C = info.classes, n = info.nodes * C;
  const size_t bytes = (size_t)n * sizeof(float);
  float *got = ng_test_xmalloc(bytes), *split = ng_test_xmalloc(bytes);
  double big = 0.0;
  for (int64_t i = 0; i < n; i++)
    big = fmax(big, fabs((double)gat.ref[i]));
  printf("  unsplit logits up to %.3g in magnitude\n", big);
  EXPECT_TRUE(big > 0.1); /* trained: not all near zero */
  const double ratios[] = {-1.0, 0.5, 0.0};
  for (size_t k = 0; k < NG_TEST_LEN(ratios); k++) {
    for (int raw = 0; raw < 2; raw++) {
      ng_engine *e =
          engine_workers(&gat, raw ? NG_MODE_BASELINE : NG_MODE_PARTIAL, ratios[k], 2, 0);
      if (!e)
        break;
      for (int64_t i = 0; i < n; i++)
        got[i] = NAN; /* poisoned */
      int64_t cold = 0;
      all_logits(e, got, &cold);
      EXPECT_EQ_I(cold > 0, ratios[k] >= 0.0);
      ng_engine_destroy(e);
      if (raw) {
        EXPECT_SAME_BITS(got, gat.ref, n, "GAT with raw rows");
        continue;
      }
      const double w = worst_rel(got, gat.ref, n);
      printf("  cache_ratio %.1f: %lld cold rows, largest |split - unsplit| / (1 + |unsplit|) "
             "%.3g\n",
             ratios[k], (long long)cold, w);
      EXPECT_TRUE(w <= GAT_SPLIT_TOL);
      if (ratios[k] == 0.5)
        memcpy(split, got, bytes);
    }
  }
  /* The split answers are reproducible: other worker counts, again, hub requests, batches. */
  const int workers[] = {1, 3, 2};
  for (size_t k = 0; k < NG_TEST_LEN(workers); k++) {
    ng_engine *e = k == 2 ? engine_workers(&gat, NG_MODE_AUTO, 0.5, 2, 1)
                          : engine_workers(&gat, NG_MODE_PARTIAL, 0.5, workers[k], 0);
    if (!e)
      break;
    int64_t cold = 0;
    all_logits(e, got, &cold);
    char what[64];
    snprintf(what, sizeof what, "GAT split, %d workers%s", workers[k], k == 2 ? ", hubs" : "");
    EXPECT_SAME_BITS(got, split, n, what);
    float *probes = ng_test_xmalloc((size_t)n_probe * (size_t)C * sizeof(float));
    for (int i = 0; i < n_probe; i++)
      memcpy(probes + i * C, split + probe[i] * C, (size_t)C * sizeof(float));
    const int64_t most = concurrent(e, probes, 4, 1, 0, 0);
    if (k < 2)
      EXPECT_TRUE(most > 3); /* requests did share batches */
    free(probes);
    ng_engine_stats st;
    ng_engine_stats_get(&st, e);
    EXPECT_EQ_I(st.hub_requests > 0, k == 2);
    ng_engine_destroy(e);
  }
  /* The check can fail: a model with other weights is far off. */
  EXPECT_TRUE(worst_rel(split, gin.ref, n) > GAT_SPLIT_TOL);
  free(got);
  free(split);
}

/* GIN: its input aggregation is a sum, so it takes the engine's partial-sum path; all hot it
 * gives the trainer's bits, split it is near them. */
static void test_gin_matches_trainer(void) {
  check_matches_trainer(&gin);
  const int64_t n = info.nodes * info.classes;
  float *got = ng_test_xmalloc((size_t)n * sizeof(float));
  ng_engine *e = engine_workers(&gin, NG_MODE_AUTO, 0.5, 2, 1);
  if (e) {
    int64_t cold = 0;
    all_logits(e, got, &cold);
    const double w = worst_rel(got, gin.ref, n);
    printf("  GIN, half the rows cold, hub path: largest relative difference %.3g\n", w);
    EXPECT_TRUE(cold > 0);
    EXPECT_TRUE(w <= 1e-5);
    ng_engine_destroy(e);
  }
  free(got);
}

/* SAGE-pool: with raw rows the trainer's bits; with its input layer split by tier (PARTIAL: the
 * CPU pools its cold rows and sends max states) within GAT_SPLIT_TOL of them (the max itself is
 * exact; the CPU pools in another order than the backend's GEMM), all hot or all cold, and the
 * same bits for 1 or 3 workers. */
static void test_pool_split(void) {
  const int64_t n = info.nodes * info.classes;
  const size_t bytes = (size_t)n * sizeof(float);
  float *got = ng_test_xmalloc(bytes), *first = ng_test_xmalloc(bytes);
  const struct {
    ng_mode mode;
    double ratio;
    int workers;
  } runs[] = {{NG_MODE_BASELINE, 0.5, 2},
              {NG_MODE_PARTIAL, -1.0, 2},
              {NG_MODE_PARTIAL, 0.0, 2},
              {NG_MODE_PARTIAL, 0.5, 1},
              {NG_MODE_PARTIAL, 0.5, 3}};
  for (size_t k = 0; k < NG_TEST_LEN(runs); k++) {
    ng_engine *e = engine_workers(&pool, runs[k].mode, runs[k].ratio, runs[k].workers, 0);
    if (!e)
      break;
    for (int64_t i = 0; i < n; i++)
      got[i] = NAN; /* poisoned */
    int64_t cold = 0;
    all_logits(e, got, &cold);
    ng_engine_destroy(e);
    EXPECT_EQ_I(cold > 0, runs[k].ratio >= 0.0);
    if (runs[k].mode == NG_MODE_BASELINE) {
      EXPECT_SAME_BITS(got, pool.ref, n, "SAGE-pool with raw rows");
      continue;
    }
    const double w = worst_rel(got, pool.ref, n);
    printf("  SAGE-pool split, cache_ratio %.1f, %d workers: largest relative difference %.3g\n",
           runs[k].ratio, runs[k].workers, w);
    EXPECT_TRUE(w <= GAT_SPLIT_TOL);
    if (k == 3)
      memcpy(first, got, bytes);
    if (k == 4)
      EXPECT_SAME_BITS(got, first, n, "SAGE-pool split, 3 workers against 1");
  }
  free(got);
  free(first);
}

/* Online updates reach the split input layers: a GAT and a SAGE-pool engine split by tier
 * (PARTIAL) and one with raw rows (BASELINE) take the same updates — a new node with a feature
 * row of its own and edges both ways to a hot and a cold node, and a hot node's features
 * replaced (a delta row, so cold) — and then agree within GAT_SPLIT_TOL on the nodes they touch,
 * while the answers did change. */
static void test_raw_input_updates(void) {
  const int64_t C = info.classes, dim = info.feature_dim;
  const trained *models[] = {&gat, &pool};
  float *feat = ng_test_xmalloc((size_t)dim * sizeof(float));
  float *repl = ng_test_xmalloc((size_t)dim * sizeof(float));
  memcpy(feat, raw_row(1358), (size_t)dim * sizeof(float));
  for (int64_t c = 0; c < dim; c++)
    repl[c] = (float)(c % 7 == 0);
  const int64_t hot_v = 10, cold_v = 2500, n_new = info.nodes;
  int64_t ids[] = {n_new, hot_v, cold_v, 1358, 0};
  for (size_t k = 0; k < NG_TEST_LEN(models); k++) {
    ng_engine *e[2] = {NULL, NULL};
    float *before = NULL, *after[2] = {NULL, NULL};
    for (int raw = 0; raw < 2; raw++) {
      ng_engine_opts o = NG_ENGINE_OPTS_INIT;
      o.mode = raw ? NG_MODE_BASELINE : NG_MODE_PARTIAL;
      o.cache_ratio = 0.5;
      o.workers = 2;
      o.serve_workers = serve_workers();
      o.normalize = models[k]->normalize;
      char name[64];
      snprintf(name, sizeof name, "raw-input-%zu-%d.log", k, raw);
      o.log_path = tpath(name);
      EXPECT_OK(ng_engine_create(&e[raw], cora, models[k]->model, models[k]->ckpt, &o));
      if (!e[raw])
        break;
      if (!raw)
        before = logits_of(e[raw], &ids[1], 4, NULL);
      int64_t src[4] = {n_new, hot_v, n_new, cold_v}, dst[4] = {hot_v, n_new, cold_v, n_new};
      ng_graph_update up;
      memset(&up, 0, sizeof up);
      up.add_nodes = 1;
      up.add_features = feat;
      up.n_add_edges = 4;
      up.add_src = src;
      up.add_dst = dst;
      up.n_feature_rows = 1;
      up.feature_ids = &hot_v;
      up.feature_values = repl;
      EXPECT_OK(ng_engine_update(e[raw], &up, NULL));
      ng_infer_result res;
      after[raw] = logits_of(e[raw], ids, (int64_t)NG_TEST_LEN(ids), &res);
      EXPECT_TRUE(res.cold_rows > 0);
      ng_infer_result_free(&res);
    }
    if (before && after[0] && after[1]) {
      const double w = worst_rel(after[0], after[1], (int64_t)NG_TEST_LEN(ids) * C);
      printf("  %s after updates: split against raw rows %.3g\n", k ? "SAGE-pool" : "GAT", w);
      EXPECT_TRUE(w <= GAT_SPLIT_TOL);
      EXPECT_TRUE(memcmp(before, after[0] + C, (size_t)(4 * C) * sizeof(float)) != 0);
    }
    free(before);
    free(after[0]);
    free(after[1]);
    ng_engine_destroy(e[0]);
    ng_engine_destroy(e[1]);
  }
  free(feat);
  free(repl);
}

int main(void) {
  cora = ng_test_fetch_cora();
  EXPECT_OK(ng_dataset_info_get(&info, cora));
  pick_probe();
  train(&sage, ng_test_cora_sage(), "sage.safetensors", NG_NORMALIZE_ROW);
  train(&gcn, cora_gcn(), "gcn.safetensors", NG_NORMALIZE_NONE);
  train_epochs(&gat, cora_gat(), "gat.safetensors", NG_NORMALIZE_ROW, 10);
  train(&gin, cora_gin(), "gin.safetensors", NG_NORMALIZE_NONE);
  train_epochs(&pool, cora_pool(), "pool.safetensors", NG_NORMALIZE_ROW, 3);
  RUN_TEST(test_sage_matches_trainer);
  RUN_TEST(test_gcn_matches_trainer);
  RUN_TEST(test_modes_and_batching);
  RUN_TEST(test_sampled);
  RUN_TEST(test_field_reuse);
  RUN_TEST(test_field_seeds);
  RUN_TEST(test_sampled_seeds_batch);
  RUN_TEST(test_updates_visible);
  RUN_TEST(test_nonfinite_answer);
  RUN_TEST(test_snapshot_isolation);
  RUN_TEST(test_log_replay);
  RUN_TEST(test_queue_full);
  RUN_TEST(test_deadline_expires);
  RUN_TEST(test_cancel_queued);
  RUN_TEST(test_cancel_in_batch);
  RUN_TEST(test_admission_by_wait);
  RUN_TEST(test_deadline_args);
  RUN_TEST(test_batch_work_cap);
  RUN_TEST(test_bad_requests);
  RUN_TEST(test_workers_same_bits);
  RUN_TEST(test_admission_workers);
  RUN_TEST(test_generated_hubs);
  RUN_TEST(test_slow_hub);
  RUN_TEST(test_admission_per_lane);
  RUN_TEST(test_gat_split);
  RUN_TEST(test_gin_matches_trainer);
  RUN_TEST(test_pool_split);
  RUN_TEST(test_raw_input_updates);
  trained *all[] = {&sage, &gcn, &gat, &gin, &pool};
  for (size_t i = 0; i < NG_TEST_LEN(all); i++) {
    ng_model_destroy(all[i]->model);
    free(all[i]->ref);
  }
  ng_dataset_close(cora);
  return ng_test_summary();
}
