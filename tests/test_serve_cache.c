/* The serving engine's cache of layer-0 outputs (serve/ecache.c) on Cora and the CPU backend:
 * cached answers equal the trainer's logits, and after any random sequence of updates (feature
 * rows, edges added and removed, nodes added) interleaved with requests they equal, bit for bit,
 * those of an engine without the cache that applied the same updates; GraphSAGE (mean) and GCN
 * (whose weights follow degrees), every row hot or half of them cold, hub requests included;
 * hits happen, and a budget of a few rows evicts and stays exact. A cache prefilled from the
 * trainer's layer-wise layer-0 rows (serve --embedding-cache-prefill) answers with the same bits
 * too, with updates replayed from the log before it and applied after; a budget bounds it, and
 * rows of another checkpoint or dataset are refused. */
#include "ng_test.h"
#include "ng_test_fetch.h"

#include "dataset_impl.h"
#include "ecache_impl.h"
#include "engine_state_impl.h"
#include "neargnn_serve.h"
#include "rng.h"
#include "trainer_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ng_dataset_t cora;
static ng_dataset_info info = NG_DATASET_INFO_INIT;

typedef struct {
  ng_model_t model;
  char ckpt[4096];
  float *ref; /* [nodes, classes] the trainer's full-neighbour logits */
  ng_normalize normalize;
} trained;

static trained sage, gcn;

static const char *tpath(const char *name) {
  static char paths[32][4096];
  static int n;
  char *p = paths[n++ % 32];
  snprintf(p, 4096, "%s", ng_test_path(name));
  return p;
}

static void train(trained *t, ng_model_t m, const char *name, ng_normalize norm) {
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

static ng_engine *engine(const trained *t, double cache_ratio, int64_t hub_edges,
                         int64_t cache_bytes, const char *log) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.cache_ratio = cache_ratio;
  o.hub_edges = hub_edges;
  o.embedding_cache_bytes = cache_bytes;
  o.log_path = log;
  o.max_delay_us = 0;
  o.workers = 2;
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
  o.normalize = t->normalize;
  if (log)
    unlink(log);
  ng_engine *e = NULL;
  ng_status st = ng_engine_create(&e, cora, t->model, t->ckpt, &o);
  if (st != NG_OK)
    fprintf(stderr, "  engine: %s\n", ng_last_error());
  EXPECT_OK(st);
  return e;
}

/* The answer of `n` nodes: logits and layer 0's output ("embedding"), in one buffer (free()). */
static float *answer(ng_engine *e, const int64_t *ids, int64_t n, int64_t *floats) {
  ng_infer_request r;
  memset(&r, 0, sizeof r);
  r.node_ids = ids;
  r.n = n;
  r.outputs = NG_OUT_LOGITS | NG_OUT_EMBEDDING;
  r.embedding_layer = 0;
  ng_infer_result res;
  ng_status st = ng_engine_infer(e, &r, &res);
  EXPECT_OK(st);
  if (st != NG_OK)
    return NULL;
  const int64_t nl = n * res.classes, ne = n * res.embedding_dim;
  float *out = ng_test_xmalloc((size_t)(nl + ne) * sizeof(float));
  memcpy(out, res.logits, (size_t)nl * sizeof(float));
  memcpy(out + nl, res.embedding, (size_t)ne * sizeof(float));
  *floats = nl + ne;
  ng_infer_result_free(&res);
  return out;
}

static int64_t first_diff(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return i;
  return -1;
}

/* Whether engines a (cached) and b answer `ids` with the same bits. */
static bool same_answer(ng_engine *a, ng_engine *b, const int64_t *ids, int64_t n,
                        const char *what) {
  int64_t na = 0, nb = 0;
  float *x = answer(a, ids, n, &na), *y = answer(b, ids, n, &nb);
  bool ok = x && y && na == nb;
  if (ok) {
    const int64_t at = first_diff(x, y, na);
    if (at >= 0) {
      ng_test_fail(__FILE__, __LINE__, "%s: element %lld of %lld differs: %.9g cached vs %.9g",
                   what, (long long)at, (long long)na, (double)x[at], (double)y[at]);
      ok = false;
    }
  }
  free(x);
  free(y);
  return ok;
}

/* Cached answers of every node equal the trainer's logits, the first time (computed and
 * inserted) and the second (read from the cache, in other batches). */
static void check_matches_trainer(const trained *t) {
  ng_engine *e = engine(t, -1.0, 0, (int64_t)64 << 20, NULL);
  if (!e)
    return;
  const int64_t C = info.classes;
  int64_t ids[300];
  for (int pass = 0; pass < 2; pass++) {
    const int64_t chunk = pass ? 300 : 137;
    for (int64_t c0 = 0; c0 < info.nodes; c0 += chunk) {
      const int64_t n = NG_MIN(chunk, info.nodes - c0);
      for (int64_t i = 0; i < n; i++)
        ids[i] = c0 + i;
      int64_t nf = 0;
      float *got = answer(e, ids, n, &nf);
      if (!got)
        break;
      const int64_t at = first_diff(got, t->ref + c0 * C, n * C);
      free(got);
      if (at >= 0) {
        ng_test_fail(__FILE__, __LINE__, "pass %d, nodes from %lld: logit %lld differs", pass,
                     (long long)c0, (long long)at);
        break;
      }
    }
  }
  ng_engine_stats s;
  ng_engine_stats_get(&s, e);
  EXPECT_TRUE(s.cache_hits > 0);
  EXPECT_TRUE(s.cache_misses >= info.nodes);
  EXPECT_EQ_I(s.cache_entries, info.nodes);
  EXPECT_EQ_I(s.cache_evictions, 0);
  ng_engine_destroy(e);
}

static void test_sage_matches_trainer(void) {
  check_matches_trainer(&sage);
}

static void test_gcn_matches_trainer(void) {
  check_matches_trainer(&gcn);
}

/* ---- random updates ---- */

typedef struct {
  ng_rng r;
  int64_t nodes; /* now */
  float *feat;   /* [4, dim] */
  int64_t src[8], dst[8], rsrc[4], rdst[4], fid[4];
  /* Edges known to exist (added ones, and base edges drawn), for removals. */
  int64_t *es, *ed;
  int64_t n_e, cap_e;
} gen;

static int64_t pick(gen *g, int64_t n) {
  return (int64_t)(ng_rng_next(&g->r) % (uint64_t)n);
}

static void known_edge(gen *g, int64_t s, int64_t d) {
  if (g->n_e == g->cap_e) {
    g->cap_e = g->cap_e ? 2 * g->cap_e : 64;
    g->es = realloc(g->es, (size_t)g->cap_e * sizeof(int64_t));
    g->ed = realloc(g->ed, (size_t)g->cap_e * sizeof(int64_t));
  }
  g->es[g->n_e] = s;
  g->ed[g->n_e++] = d;
}

/* A node near the last update's, so that updates and requests meet in the graph. */
static int64_t near_node(gen *g, int64_t v) {
  const ng_csr *csr = &cora->csr;
  if (v < csr->nodes && csr->indptr[v + 1] > csr->indptr[v] && pick(g, 2))
    return ng__csr_index(csr, csr->indptr[v] + pick(g, csr->indptr[v + 1] - csr->indptr[v]));
  return pick(g, g->nodes);
}

/* A random update: feature rows, added and removed edges, sometimes an added node. */
static void random_update(gen *g, ng_graph_update *u, int64_t focus) {
  memset(u, 0, sizeof *u);
  const int64_t dim = info.feature_dim;
  const int kind = (int)pick(g, 4);
  if (kind == 0 || kind == 3) { /* feature rows */
    u->n_feature_rows = 1 + pick(g, 2);
    for (int64_t i = 0; i < u->n_feature_rows; i++) {
      g->fid[i] = near_node(g, focus);
      for (int64_t c = 0; c < dim; c++)
        g->feat[i * dim + c] = pick(g, 40) == 0 ? 1.0f : 0.0f;
      g->feat[i * dim + pick(g, dim)] = 1.0f;
    }
    u->feature_ids = g->fid;
    u->feature_values = g->feat;
  }
  if (kind == 1 || kind == 3) { /* edges added, some into or out of the focus */
    u->n_add_edges = 1 + pick(g, 3);
    for (int64_t i = 0; i < u->n_add_edges; i++) {
      g->src[i] = near_node(g, focus);
      g->dst[i] = i == 0 ? focus : near_node(g, focus);
      known_edge(g, g->src[i], g->dst[i]);
    }
    u->add_src = g->src;
    u->add_dst = g->dst;
  }
  if (kind == 2 && g->n_e > 0) { /* an edge removed */
    const int64_t k = pick(g, g->n_e);
    g->rsrc[0] = g->es[k];
    g->rdst[0] = g->ed[k];
    /* Every copy of it goes: it no longer exists. */
    for (int64_t i = 0; i < g->n_e;)
      if (g->es[i] == g->rsrc[0] && g->ed[i] == g->rdst[0]) {
        g->es[i] = g->es[--g->n_e];
        g->ed[i] = g->ed[g->n_e];
      } else {
        i++;
      }
    u->n_remove_edges = 1;
    u->remove_src = g->rsrc;
    u->remove_dst = g->rdst;
  }
  if (kind == 2 && pick(g, 2)) { /* a node added, linked both ways to the focus */
    u->add_nodes = 1;
    for (int64_t c = 0; c < dim; c++)
      g->feat[c] = pick(g, 30) == 0 ? 1.0f : 0.0f;
    g->feat[pick(g, dim)] = 1.0f;
    u->add_features = g->feat;
    g->src[0] = g->nodes;
    g->dst[0] = focus;
    g->src[1] = focus;
    g->dst[1] = g->nodes;
    known_edge(g, g->nodes, focus);
    known_edge(g, focus, g->nodes);
    u->n_add_edges = 2;
    u->add_src = g->src;
    u->add_dst = g->dst;
  }
}

/* Engine `a` (cached) and `b` (not) take the same `rounds` random updates, each followed by
 * requests of nodes near it (read, updated, read again): every answer has the same bits. */
static void random_run(const trained *t, double cache_ratio, int64_t hub_edges, int64_t cache_bytes,
                       uint64_t seed, int rounds, ng_engine_stats *out) {
  ng_engine *a = engine(t, cache_ratio, hub_edges, cache_bytes, tpath("cached.log"));
  ng_engine *b = engine(t, cache_ratio, hub_edges, 0, tpath("plain.log"));
  if (!a || !b) {
    ng_engine_destroy(a);
    ng_engine_destroy(b);
    return;
  }
  gen g;
  memset(&g, 0, sizeof g);
  ng_rng_seed(&g.r, seed);
  g.nodes = info.nodes;
  g.feat = ng_test_xmalloc(4 * (size_t)info.feature_dim * sizeof(float));
  const ng_csr *csr = &cora->csr;
  for (int i = 0; i < 200; i++) { /* base edges to remove */
    const int64_t d = pick(&g, csr->nodes);
    if (csr->indptr[d + 1] > csr->indptr[d])
      known_edge(&g,
                 ng__csr_index(csr, csr->indptr[d] + pick(&g, csr->indptr[d + 1] - csr->indptr[d])),
                 d);
  }
  int64_t ids[16];
  bool ok = true;
  for (int round = 0; round < rounds && ok; round++) {
    const int64_t focus = pick(&g, g.nodes);
    /* Requests before the update fill the cache around the focus. */
    ids[0] = focus;
    for (int i = 1; i < 8; i++)
      ids[i] = near_node(&g, focus);
    ok = same_answer(a, b, ids, 8, "before the update");
    ng_graph_update u;
    random_update(&g, &u, focus);
    ng_update_result ra = NG_UPDATE_RESULT_INIT, rb = NG_UPDATE_RESULT_INIT;
    const ng_status sa = ng_engine_apply(a, &u, &ra), sb = ng_engine_apply(b, &u, &rb);
    EXPECT_EQ_I(sa, sb);
    EXPECT_OK(sa);
    g.nodes += sa == NG_OK ? u.add_nodes : 0;
    /* After it: the focus, the nodes it touched and their neighbours, alone and together. */
    int n = 0;
    ids[n++] = focus;
    for (int64_t i = 0; i < u.n_feature_rows; i++)
      ids[n++] = u.feature_ids[i];
    for (int64_t i = 0; i < u.n_add_edges && n < 14; i++)
      ids[n++] = u.add_dst[i];
    for (int64_t i = 0; i < u.n_remove_edges && n < 14; i++)
      ids[n++] = u.remove_dst[i];
    while (n < 16) {
      const int64_t v = near_node(&g, ids[pick(&g, n)]);
      ids[n++] = v;
    }
    ok = ok && same_answer(a, b, ids, n, "after the update");
    for (int i = 0; i < n && ok; i++)
      ok = same_answer(a, b, &ids[i], 1, "after the update, alone");
  }
  /* Finally every node (old and added), in chunks. */
  int64_t all[256];
  for (int64_t c0 = 0; c0 < g.nodes && ok; c0 += 256) {
    const int64_t n = NG_MIN(256, g.nodes - c0);
    for (int64_t i = 0; i < n; i++)
      all[i] = c0 + i;
    ok = same_answer(a, b, all, n, "every node at the end");
  }
  ng_engine_stats_get(out, a);
  ng_engine_stats sb;
  ng_engine_stats_get(&sb, b);
  EXPECT_EQ_I(sb.cache_hits + sb.cache_misses + sb.cache_entries, 0);
  free(g.feat);
  free(g.es);
  free(g.ed);
  ng_engine_destroy(a);
  ng_engine_destroy(b);
}

static void test_random_updates_sage(void) {
  ng_engine_stats s;
  memset(&s, 0, sizeof s);
  random_run(&sage, -1.0, 0, (int64_t)64 << 20, 11, 60, &s);
  EXPECT_TRUE(s.cache_hits > 0);
  EXPECT_TRUE(s.cache_invalidations > 0);
  EXPECT_EQ_I(s.cache_evictions, 0);
}

static void test_random_updates_gcn(void) {
  ng_engine_stats s;
  memset(&s, 0, sizeof s);
  random_run(&gcn, -1.0, 0, (int64_t)64 << 20, 12, 60, &s);
  EXPECT_TRUE(s.cache_hits > 0);
  EXPECT_TRUE(s.cache_invalidations > 0);
}

/* Half of the rows cold (replaced and added rows are cold anyway), and hub requests whose cold
 * part CPU workers aggregate: the missing rows take the engine's every input path. */
static void test_random_updates_cold_and_hubs(void) {
  ng_engine_stats s;
  memset(&s, 0, sizeof s);
  random_run(&sage, 0.5, 40, (int64_t)64 << 20, 13, 30, &s);
  EXPECT_TRUE(s.cache_hits > 0);
  memset(&s, 0, sizeof s);
  random_run(&gcn, 0.5, 40, (int64_t)64 << 20, 14, 30, &s);
  EXPECT_TRUE(s.cache_hits > 0);
}

/* A budget of 24 rows: a batch needs more rows than the cache holds, entries are evicted all
 * the time, and the answers stay exact. */
static void test_tiny_budget(void) {
  const int64_t row = 16 * 4 + 8 + 8 + 1 + 8 + 8;
  ng_engine_stats s;
  memset(&s, 0, sizeof s);
  random_run(&sage, -1.0, 0, 24 * row, 15, 30, &s);
  EXPECT_TRUE(s.cache_evictions > 0);
  EXPECT_TRUE(s.cache_hits > 0);
  EXPECT_TRUE(s.cache_entries <= 24);
  memset(&s, 0, sizeof s);
  random_run(&gcn, 0.5, 0, 24 * row, 16, 20, &s);
  EXPECT_TRUE(s.cache_evictions > 0);
}

/* Options: a budget below one row is refused; GAT-like models and one layer run uncached. */
static void test_options(void) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.embedding_cache_bytes = 10;
  o.normalize = sage.normalize;
  ng_engine *e = NULL;
  EXPECT_STATUS(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("embedding cache");
  o.embedding_cache_bytes = -1;
  EXPECT_STATUS(ng_engine_create(&e, cora, sage.model, sage.ckpt, &o), NG_ERR_INVALID_ARG);
}

/* Updates on one thread while others read through the cache (for ThreadSanitizer), then every
 * node against an uncached engine that took the same updates. */
typedef struct {
  ng_engine *e;
  uint64_t seed;
  int rounds;
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  ng_rng g;
  ng_rng_seed(&g, r->seed);
  for (int i = 0; i < r->rounds; i++) {
    int64_t ids[4];
    for (int k = 0; k < 4; k++)
      ids[k] = (int64_t)(ng_rng_next(&g) % (uint64_t)info.nodes);
    int64_t n = 0;
    free(answer(r->e, ids, 4, &n));
  }
  return NULL;
}

static void test_concurrent_updates(void) {
  ng_engine *a = engine(&gcn, -1.0, 0, (int64_t)8 << 20, tpath("conc_a.log"));
  ng_engine *b = engine(&gcn, -1.0, 0, 0, tpath("conc_b.log"));
  if (!a || !b) {
    ng_engine_destroy(a);
    ng_engine_destroy(b);
    return;
  }
  reader rd[2] = {{a, 1, 60}, {a, 2, 60}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&th[i], NULL, reader_main, &rd[i]);
  gen g;
  memset(&g, 0, sizeof g);
  ng_rng_seed(&g.r, 21);
  g.nodes = info.nodes;
  g.feat = ng_test_xmalloc(4 * (size_t)info.feature_dim * sizeof(float));
  ng_graph_update ups[20];
  for (int i = 0; i < 20; i++) {
    random_update(&g, &ups[i], pick(&g, g.nodes));
    EXPECT_OK(ng_engine_apply(a, &ups[i], NULL));
    EXPECT_OK(ng_engine_apply(b, &ups[i], NULL));
    g.nodes += ups[i].add_nodes;
  }
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  int64_t all[256];
  bool ok = true;
  for (int64_t c0 = 0; c0 < g.nodes && ok; c0 += 256) {
    const int64_t n = NG_MIN(256, g.nodes - c0);
    for (int64_t i = 0; i < n; i++)
      all[i] = c0 + i;
    ok = same_answer(a, b, all, n, "every node after concurrent updates");
  }
  free(g.feat);
  free(g.es);
  free(g.ed);
  ng_engine_destroy(a);
  ng_engine_destroy(b);
}

/* ---- prefill (serve --embedding-cache-prefill) from the trainer's layer-wise embeddings ---- */

/* Writes what `neargnn embed --layer 0 --for-serve` writes: the trainer's layer-0 output of every
 * node, by layer-wise full-neighbour inference from the checkpoint, and the description beside
 * it. */
static void write_prefill(const trained *t, const char *path) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.workers = -1;
  o.normalize = t->normalize;
  ng_trainer_t tr = NULL;
  EXPECT_OK(ng_trainer_create(&tr, cora, t->model, &o));
  EXPECT_OK(ng_trainer_load_weights(tr, t->ckpt));
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  io.layer = 0;
  unlink(path);
  EXPECT_OK(ng_trainer_embed_npy(path, tr, NULL, info.nodes, &io));
  ng_trainer_destroy(tr);
  char meta[512], mpath[4200];
  EXPECT_OK(ng__prefill_meta(meta, sizeof meta, cora, t->ckpt, 16));
  snprintf(mpath, sizeof mpath, "%s%s", path, NG_PREFILL_SUFFIX);
  FILE *f = fopen(mpath, "w");
  EXPECT_TRUE(f != NULL);
  if (f) {
    fputs(meta, f);
    fclose(f);
  }
}

static ng_status engine_prefilled(ng_engine **out, const trained *t, int64_t cache_bytes,
                                  const char *prefill, const char *log) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.embedding_cache_bytes = cache_bytes;
  o.embedding_cache_prefill = prefill;
  o.log_path = log;
  o.max_delay_us = 0;
  o.workers = 2;
  o.request_timeout_ms = NG_ENGINE_MAX_TIMEOUT_MS;
  o.normalize = t->normalize;
  *out = NULL;
  return ng_engine_create(out, cora, t->model, t->ckpt, &o);
}

static void copy_file(const char *dst, const char *src) {
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  EXPECT_TRUE(in && out);
  char buf[65536];
  size_t n;
  while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0)
    EXPECT_EQ_I(fwrite(buf, 1, n, out), n);
  if (in)
    fclose(in);
  if (out)
    fclose(out);
}

/* Every node of engines a and b, in chunks: the same bits. */
static bool same_everywhere(ng_engine *a, ng_engine *b, int64_t nodes, const char *what) {
  int64_t all[256];
  bool ok = true;
  for (int64_t c0 = 0; c0 < nodes && ok; c0 += 256) {
    const int64_t n = NG_MIN(256, nodes - c0);
    for (int64_t i = 0; i < n; i++)
      all[i] = c0 + i;
    ok = same_answer(a, b, all, n, what);
  }
  return ok;
}

/* A cache prefilled from the trainer's rows answers every node with the bits of an engine
 * without the cache, and computes no layer-0 row itself. */
static void check_prefill_exact(const trained *t, const char *file) {
  const char *path = tpath(file);
  write_prefill(t, path);
  ng_engine *a = NULL, *b = engine(t, -1.0, 0, 0, NULL);
  EXPECT_OK(engine_prefilled(&a, t, (int64_t)64 << 20, path, NULL));
  if (!a || !b) {
    ng_engine_destroy(a);
    ng_engine_destroy(b);
    return;
  }
  ng_engine_stats s;
  ng_engine_stats_get(&s, a);
  EXPECT_EQ_I(s.cache_entries, info.nodes);
  same_everywhere(a, b, info.nodes, "prefilled, every node");
  ng_engine_stats_get(&s, a);
  EXPECT_EQ_I(s.cache_misses, 0);
  EXPECT_TRUE(s.cache_hits >= info.nodes);
  ng_engine_destroy(a);
  ng_engine_destroy(b);
}

/* ---- a batch that straddles a commit ---- */

typedef struct {
  ng_engine *e;
  const ng_graph_update *u;
  int calls;
} straddle;

static void apply_once(void *arg) {
  straddle *st = arg;
  if (st->calls++ == 0)
    EXPECT_OK(ng_engine_apply(st->e, st->u, NULL));
}

/* A batch computes its missing rows on snapshot V; before it inserts them, an update (a new
 * feature row of y, a neighbour of target t) commits. The rows the update changed (y's own and
 * its readers', t among them) must not go in; the others must, tagged V, so that the cache stays
 * warm under a stream of commits. Then every answer equals an engine's without the cache. */
static void test_straddling_batch(void) {
  ng_engine *a = engine(&sage, -1.0, 0, (int64_t)8 << 20, tpath("straddle_a.log"));
  ng_engine *b = engine(&sage, -1.0, 0, 0, tpath("straddle_b.log"));
  if (!a || !b) {
    ng_engine_destroy(a);
    ng_engine_destroy(b);
    return;
  }
  const ng_csr *g = &cora->csr;
  int64_t t = 0;
  while (g->indptr[t + 1] - g->indptr[t] < 3)
    t++; /* a target with three neighbours or more */
  int64_t y = ng__csr_index(g, g->indptr[t]);
  /* A neighbour z of t that does not read y (and is not y): its row must go in. */
  int64_t z = -1;
  for (int64_t e = g->indptr[t] + 1; e < g->indptr[t + 1] && z < 0; e++) {
    const int64_t c = ng__csr_index(g, e);
    bool reads_y = c == y;
    for (int64_t f = g->indptr[c]; f < g->indptr[c + 1]; f++)
      reads_y |= ng__csr_index(g, f) == y;
    if (!reads_y)
      z = c;
  }
  EXPECT_TRUE(z >= 0);
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  u.n_feature_rows = 1;
  u.feature_ids = &y;
  u.feature_values = cora->features + 17 * (size_t)info.feature_dim;
  straddle st = {a, &u, 0};
  const uint64_t v0 = a->snap->version;
  ng__ecache_test_before_insert(a->ecache, apply_once, &st);
  int64_t n = 0;
  free(answer(a, &t, 1, &n)); /* computed on v0, the update commits before the insert */
  ng__ecache_test_before_insert(a->ecache, NULL, NULL);
  EXPECT_EQ_I(st.calls, 1);
  EXPECT_TRUE(a->snap->version == v0 + 1);
  uint64_t ver = 0;
  EXPECT_TRUE(!ng__ecache_test_has(a->ecache, t, NULL)); /* reads y */
  EXPECT_TRUE(!ng__ecache_test_has(a->ecache, y, NULL)); /* y's own row */
  EXPECT_TRUE(z >= 0 && ng__ecache_test_has(a->ecache, z, &ver));
  EXPECT_TRUE(ver == v0);
  EXPECT_OK(ng_engine_apply(b, &u, NULL));
  same_everywhere(a, b, info.nodes, "every node after a straddling batch");
  ng_engine_destroy(a);
  ng_engine_destroy(b);
}

static void test_prefill_exact(void) {
  check_prefill_exact(&sage, "sage-l0.npy");
  check_prefill_exact(&gcn, "gcn-l0.npy");
}

/* Updates logged after the rows were written: replayed at start, the rows they changed are left
 * out, and every answer equals an uncached engine's on the same log; so do the answers after
 * more updates while both run. */
static void check_prefill_updates(const trained *t, const char *file, uint64_t seed) {
  const char *path = tpath(file), *log_a = tpath("prefill-a.log"), *log_b = tpath("prefill-b.log");
  write_prefill(t, path);
  ng_engine *w = engine(t, -1.0, 0, 0, log_b);
  if (!w)
    return;
  gen g;
  memset(&g, 0, sizeof g);
  ng_rng_seed(&g.r, seed);
  g.nodes = info.nodes;
  g.feat = ng_test_xmalloc(4 * (size_t)info.feature_dim * sizeof(float));
  ng_graph_update u;
  for (int i = 0; i < 25; i++) {
    random_update(&g, &u, pick(&g, g.nodes));
    EXPECT_OK(ng_engine_apply(w, &u, NULL));
    g.nodes += u.add_nodes;
  }
  ng_engine_destroy(w);
  copy_file(log_a, log_b);
  ng_engine *a = NULL, *b = NULL;
  EXPECT_OK(engine_prefilled(&a, t, (int64_t)64 << 20, path, log_a));
  EXPECT_OK(engine_prefilled(&b, t, 0, NULL, log_b));
  if (a && b) {
    ng_engine_stats s;
    ng_engine_stats_get(&s, a);
    /* The updated nodes' rows, and their readers', are not taken. */
    EXPECT_TRUE(s.cache_entries > info.nodes / 2);
    EXPECT_TRUE(s.cache_entries < info.nodes);
    bool ok = same_everywhere(a, b, g.nodes, "prefilled after replayed updates");
    ng_engine_stats_get(&s, a);
    EXPECT_TRUE(s.cache_misses > 0);
    for (int i = 0; i < 15 && ok; i++) {
      const int64_t focus = pick(&g, g.nodes);
      random_update(&g, &u, focus);
      EXPECT_OK(ng_engine_apply(a, &u, NULL));
      EXPECT_OK(ng_engine_apply(b, &u, NULL));
      g.nodes += u.add_nodes;
      int64_t ids[8] = {focus};
      for (int k = 1; k < 8; k++)
        ids[k] = near_node(&g, focus);
      ok = same_answer(a, b, ids, 8, "prefilled, after a live update");
    }
    if (ok)
      same_everywhere(a, b, g.nodes, "prefilled, every node after live updates");
  }
  free(g.feat);
  free(g.es);
  free(g.ed);
  ng_engine_destroy(a);
  ng_engine_destroy(b);
}

static void test_prefill_updates(void) {
  check_prefill_updates(&sage, "sage-l0u.npy", 31);
  check_prefill_updates(&gcn, "gcn-l0u.npy", 32);
}

/* A budget of 100 rows takes the first 100 and stays exact; rows of another checkpoint or
 * dataset, a missing description, a cache that is off and a model the cache does not serve are
 * refused, naming the cause. */
static void test_prefill_bounds_and_refusals(void) {
  const char *path = tpath("sage-l0b.npy");
  write_prefill(&sage, path);
  const int64_t row = 16 * 4 + 8 + 8 + 1 + 8 + 8;
  ng_engine *a = NULL, *b = engine(&sage, -1.0, 0, 0, NULL);
  EXPECT_OK(engine_prefilled(&a, &sage, 100 * row, path, NULL));
  if (a && b) {
    ng_engine_stats s;
    ng_engine_stats_get(&s, a);
    EXPECT_EQ_I(s.cache_entries, 100);
    /* In node order: the first 100 nodes. */
    EXPECT_TRUE(ng__ecache_test_has(a->ecache, 99, NULL));
    EXPECT_TRUE(!ng__ecache_test_has(a->ecache, 100, NULL));
    same_everywhere(a, b, 600, "prefilled into 100 rows");
  }
  ng_engine_destroy(a);
  ng_engine_destroy(b);

  EXPECT_STATUS(engine_prefilled(&a, &gcn, (int64_t)1 << 20, path, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("another checkpoint");
  EXPECT_STATUS(engine_prefilled(&a, &sage, 0, path, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("cache is off");
  EXPECT_STATUS(engine_prefilled(&a, &sage, (int64_t)1 << 20, tpath("none.npy"), NULL), NG_ERR_IO);
  EXPECT_ERR_HAS("none.npy.prefill.json");
  /* The description of another dataset (its indptr differs). */
  char meta[512], mpath[4200];
  EXPECT_OK(ng__prefill_meta(meta, sizeof meta, cora, sage.ckpt, 16));
  char *at = strstr(meta, "\"indptr\":\"");
  EXPECT_TRUE(at != NULL);
  if (at)
    at[10] = at[10] == '0' ? '1' : '0';
  snprintf(mpath, sizeof mpath, "%s%s", path, NG_PREFILL_SUFFIX);
  FILE *f = fopen(mpath, "w");
  if (f) {
    fputs(meta, f);
    fclose(f);
  }
  EXPECT_STATUS(engine_prefilled(&a, &sage, (int64_t)1 << 20, path, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("another dataset");
  EXPECT_TRUE(a == NULL);
  /* Rows cut short (a copy without its last row), beside a true description. */
  const char *cut = tpath("cut.npy");
  copy_file(cut, path);
  FILE *cf = fopen(cut, "r+b");
  EXPECT_TRUE(cf && fseek(cf, 0, SEEK_END) == 0);
  if (cf) {
    EXPECT_EQ_I(ftruncate(fileno(cf), ftell(cf) - 16 * 4), 0);
    fclose(cf);
  }
  EXPECT_OK(ng__prefill_meta(meta, sizeof meta, cora, sage.ckpt, 16));
  snprintf(mpath, sizeof mpath, "%s%s", cut, NG_PREFILL_SUFFIX);
  f = fopen(mpath, "w");
  if (f) {
    fputs(meta, f);
    fclose(f);
  }
  EXPECT_STATUS(engine_prefilled(&a, &sage, (int64_t)1 << 20, cut, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("cut short");

  /* One layer: the cache serves models of two layers or more. */
  trained one;
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT;
  l0.out_dim = info.classes;
  l0.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  train(&one, m, "one.safetensors", NG_NORMALIZE_ROW);
  EXPECT_STATUS(engine_prefilled(&a, &one, (int64_t)1 << 20, path, NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("does not serve this model");
  ng_model_destroy(one.model);
  free(one.ref);
}

int main(void) {
  cora = ng_test_fetch_cora();
  EXPECT_OK(ng_dataset_info_get(&info, cora));
  train(&sage, ng_test_cora_sage(), "sage.safetensors", NG_NORMALIZE_ROW);
  train(&gcn, cora_gcn(), "gcn.safetensors", NG_NORMALIZE_NONE);
  RUN_TEST(test_sage_matches_trainer);
  RUN_TEST(test_gcn_matches_trainer);
  RUN_TEST(test_random_updates_sage);
  RUN_TEST(test_random_updates_gcn);
  RUN_TEST(test_random_updates_cold_and_hubs);
  RUN_TEST(test_tiny_budget);
  RUN_TEST(test_options);
  RUN_TEST(test_concurrent_updates);
  RUN_TEST(test_straddling_batch);
  RUN_TEST(test_prefill_exact);
  RUN_TEST(test_prefill_updates);
  RUN_TEST(test_prefill_bounds_and_refusals);
  ng_model_destroy(sage.model);
  ng_model_destroy(gcn.model);
  free(sage.ref);
  free(gcn.ref);
  ng_dataset_close(cora);
  return ng_test_summary();
}
