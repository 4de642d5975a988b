/* Link checkpoints and pair scores in serving, on Cora split by ng_dataset_split_edges: a link
 * trainer's checkpoint (ng_link_trainer_save) reloads into a fresh trainer with the same scores'
 * bits and is refused where it does not fit; the serving engine built from it answers pair
 * requests (ng_infer_request.dst_ids) with the bits of the trainer's offline scoring
 * (ng_link_trainer_score, layer-wise embeddings) in every mode on the CPU backend, with and
 * without the embedding cache, however the requests are batched; after updates, the bits of an
 * engine created on the updated graph; over HTTP, the C API's bits; and bad requests get clear
 * errors (docs/serving.md, "Pair scores"). */
#include "ng_test.h"
#include "ng_test_cora.h"

#include "engine_impl.h"
#include "http_impl.h"
#include "link_impl.h"
#include "neargnn_serve.h"
#include "npy_impl.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static ng_dataset_t cora; /* Cora, as converted by the suite's helper */
static ng_dataset_t ds;   /* its copy with the split (links/) */
static ng_dataset_t mp;   /* the split's message-passing graph with Cora's features */
static char dir[4096];
static int64_t *mp_indptr;
static void *mp_indices;
static int mp_index32; /* its indices are int32 */
static ng_dataset_info info = NG_DATASET_INFO_INIT;

/* The test split's pairs: the positives, then their negatives. */
static int64_t *src, *dst;
static int64_t n_pairs;

typedef struct {
  ng_link_decoder decoder;
  char ckpt[4096];
  float *offline; /* [n_pairs] ng_link_trainer_score of the trained trainer */
} trained;
static trained dot, mlp;
static char node_ckpt[4096];

static void *read_npy(const char *path, ng_npy_header *h) {
  size_t n = 0;
  char *buf = ng_test_read_file(path, &n);
  if (!buf || ng__npy_parse_header(h, buf, n, path) != NG_OK || h->data_offset + h->nbytes != n) {
    ng_test_fail(__FILE__, __LINE__, "cannot read %s", path);
    free(buf);
    return NULL;
  }
  memmove(buf, buf + h->data_offset, h->nbytes);
  return buf;
}

static void *read_links(int id, ng_npy_header *h) {
  char path[8192];
  snprintf(path, sizeof path, "%s/links/%s", dir, NG_LINK_FILE[id]);
  return read_npy(path, h);
}

/* A dataset over Cora's features and the graph (indptr, indices of the split's index type). */
static ng_dataset_t graph_dataset(const int64_t *indptr, const void *indices, int index32,
                                  const float *features) {
  ng_dataset_arrays a = NG_DATASET_ARRAYS_INIT;
  a.name = info.name;
  a.nodes = info.nodes;
  a.indptr = indptr;
  a.indptr_type = NG_INT64;
  a.indices = indices;
  a.index_type = index32 ? NG_INT32 : NG_INT64;
  a.undirected = info.undirected;
  a.features = features;
  a.feature_dim = info.feature_dim;
  ng_dataset_t out = NULL;
  EXPECT_OK(ng_dataset_from_arrays(&out, &a));
  return out;
}

static ng_model_t link_model(void) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 1433));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = NG_AGGREGATOR_MEAN;
  l0.fanout = l1.fanout = 5;
  l0.out_dim = 32;
  l1.out_dim = 16;
  l0.activation = NG_ACT_RELU;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = 0.2f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

static ng_link_opts link_opts(ng_link_decoder decoder) {
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  lo.decoder = decoder;
  lo.mlp_hidden = 8;
  return lo;
}

static ng_link_trainer_t link_trainer(ng_link_decoder decoder, uint64_t seed) {
  ng_model_t m = link_model();
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 512;
  o.seed = seed;
  o.threads = 2;
  ng_link_opts lo = link_opts(decoder);
  ng_link_trainer_t t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
  ng_model_destroy(m);
  return t;
}

static float *score_offline(ng_link_trainer_t t) {
  float *s = ng_test_xmalloc((size_t)n_pairs * sizeof(float));
  memset(s, 0xff, (size_t)n_pairs * sizeof(float)); /* poisoned: NaN */
  EXPECT_OK(ng_link_trainer_score(s, t, src, dst, n_pairs));
  return s;
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
      ng_test_fail(__FILE__, __LINE__, "%s: score %lld differs: %.9g vs %.9g", (what),             \
                   (long long)at_, (double)(a)[at_], (double)(b)[at_]);                            \
  } while (0)

/* Trains two epochs with `decoder`, saves, and keeps the offline scores of the test pairs. */
static void train(trained *t, ng_link_decoder decoder, const char *name) {
  t->decoder = decoder;
  ng_link_trainer_t tr = link_trainer(decoder, 3);
  if (!tr)
    return;
  ng_epoch_stats s = NG_EPOCH_STATS_INIT;
  for (int e = 0; e < 2; e++)
    EXPECT_OK(ng_link_trainer_epoch(&s, tr));
  snprintf(t->ckpt, sizeof t->ckpt, "%s", ng_test_path(name));
  EXPECT_OK(ng_link_trainer_save(tr, t->ckpt));
  t->offline = score_offline(tr);
  /* The offline scores are the evaluation's: the metrics from them are the trainer's. */
  const int64_t n_pos = n_pairs / 2;
  ng_link_metrics a = NG_LINK_METRICS_INIT, b = NG_LINK_METRICS_INIT;
  EXPECT_OK(ng_link_metrics_compute(&a, t->offline, t->offline + n_pos, n_pos, 1));
  EXPECT_OK(ng_link_trainer_evaluate(&b, tr, NG_SPLIT_TEST));
  EXPECT_TRUE(memcmp(&a.auc, &b.auc, sizeof a.auc) == 0);
  EXPECT_TRUE(memcmp(&a.ap, &b.ap, sizeof a.ap) == 0);
  printf("  %s decoder: test auc %.4f ap %.4f\n", ng_link_decoder_name(decoder), b.auc, b.ap);
  EXPECT_TRUE(b.auc > 0.6); /* it learned something: the scores are not all alike */
  ng_link_trainer_destroy(tr);
}

/* ---- checkpoints ---- */

static void test_checkpoint_reload(void) {
  const trained *all[] = {&dot, &mlp};
  for (size_t k = 0; k < NG_TEST_LEN(all); k++) {
    const trained *t = all[k];
    /* Another seed: other initial weights, which the load replaces. */
    ng_link_trainer_t fresh = link_trainer(t->decoder, 11);
    if (!fresh)
      return;
    float *before = score_offline(fresh);
    EXPECT_TRUE(first_diff(before, t->offline, n_pairs) >= 0);
    EXPECT_OK(ng_link_trainer_load_weights(fresh, t->ckpt));
    float *after = score_offline(fresh);
    EXPECT_SAME_BITS(after, t->offline, n_pairs, "reloaded trainer");
    free(before);
    free(after);
    ng_link_trainer_destroy(fresh);
    /* The other decoder's trainer refuses it, naming the decoder. */
    ng_link_trainer_t other = link_trainer(
        t->decoder == NG_LINK_DECODER_DOT ? NG_LINK_DECODER_MLP : NG_LINK_DECODER_DOT, 3);
    EXPECT_STATUS(ng_link_trainer_load_weights(other, t->ckpt), NG_ERR_FORMAT);
    EXPECT_ERR_HAS("decoder");
    ng_link_trainer_destroy(other);
    /* Readers of node checkpoints read its GNN: the model it describes, 16 wide at the end. */
    ng_model_t m = NULL;
    EXPECT_OK(ng_model_from_checkpoint(&m, t->ckpt));
    ng_checkpoint_info ci = NG_CHECKPOINT_INFO_INIT;
    EXPECT_OK(ng_checkpoint_info_get(&ci, t->ckpt));
    EXPECT_EQ_I(ci.layers, 2);
    EXPECT_EQ_I(ci.epochs_done, 2);
    ng_model_destroy(m);
  }
  /* A node checkpoint is not a link trainer's. */
  ng_link_trainer_t lt = link_trainer(NG_LINK_DECODER_DOT, 3);
  EXPECT_STATUS(ng_link_trainer_load_weights(lt, node_ckpt), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("node-classification");
  ng_link_trainer_destroy(lt);
  /* A damaged decoder tensor (the file's last bytes are decoder.b2's) fails its checksum. */
  size_t len = 0;
  char *buf = ng_test_read_file(mlp.ckpt, &len);
  if (buf && len > 8) {
    buf[len - 2] ^= 0x10;
    const char *bad = ng_test_path("damaged_link.safetensors");
    EXPECT_TRUE(ng_test_write_file(bad, buf, len));
    ng_model_t m = NULL;
    EXPECT_STATUS(ng_model_from_checkpoint(&m, bad), NG_ERR_FORMAT);
    EXPECT_ERR_HAS("decoder.b2");
  }
  free(buf);
}

/* ---- the engine ---- */

static ng_engine *engine_on(ng_dataset_t g, const trained *t, ng_mode mode, double cache_ratio,
                            int64_t ecache_bytes, const char *log, int serve_workers) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.serve_workers = serve_workers;
  o.mode = mode;
  o.cache_ratio = cache_ratio;
  o.workers = 2;
  o.max_batch = 1024;
  o.request_timeout_ms = 60 * 1000;
  o.embedding_cache_bytes = ecache_bytes;
  o.queue_cap = 4096; /* every pair of the split in requests of one pair, submitted at once */
  o.log_path = log;
  ng_engine *e = NULL;
  ng_status st = ng_engine_create(&e, g, NULL, t->ckpt, &o);
  if (st != NG_OK)
    fprintf(stderr, "  engine: %s\n", ng_last_error());
  EXPECT_OK(st);
  return e;
}

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int left, bad;
} waiter;

static void on_done(void *user, ng_status st, const char *message) {
  waiter *w = user;
  pthread_mutex_lock(&w->mu);
  if (st != NG_OK && w->bad++ == 0)
    fprintf(stderr, "  pair request: %s\n", message);
  w->left--;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void submit(ng_engine *e, const ng_infer_request *r, ng_infer_result *res, waiter *w) {
  const ng_status st = ng_engine_submit(e, r, res, on_done, w, NULL);
  EXPECT_OK(st);
  if (st != NG_OK) { /* never answered: no callback */
    pthread_mutex_lock(&w->mu);
    w->left--;
    w->bad++;
    pthread_mutex_unlock(&w->mu);
  }
}

/* The engine's scores of every test pair into out[n_pairs]: requests of `chunk` pairs, all
 * submitted at once so that they share batches, and node requests among them. Returns the most
 * target nodes a pair request's batch held. */
static int64_t engine_scores(ng_engine *e, float *out, int64_t chunk) {
  const int64_t n_req = (n_pairs + chunk - 1) / chunk;
  ng_infer_request *rq = calloc((size_t)n_req + 1, sizeof *rq);
  ng_infer_result *rs = calloc((size_t)n_req + 1, sizeof *rs);
  waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, (int)n_req + 1, 0};
  /* Every request queued before a lane takes any: batches merge them whatever the load. */
  ng__engine_test_pause(e, true);
  for (int64_t i = 0; i < n_req; i++) {
    rq[i].node_ids = src + i * chunk;
    rq[i].dst_ids = dst + i * chunk;
    rq[i].n = NG_MIN(chunk, n_pairs - i * chunk);
    rq[i].outputs = i % 2 ? NG_OUT_SCORE : 0;
    submit(e, &rq[i], &rs[i], &w);
  }
  /* A node request rides along: the embeddings of some ends. */
  rq[n_req].node_ids = src;
  rq[n_req].n = NG_MIN(n_pairs, 7);
  rq[n_req].outputs = NG_OUT_EMBEDDING;
  rq[n_req].embedding_layer = 1;
  submit(e, &rq[n_req], &rs[n_req], &w);
  ng__engine_test_pause(e, false);
  pthread_mutex_lock(&w.mu);
  while (w.left > 0)
    pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  EXPECT_EQ_I(w.bad, 0);
  int64_t most = 0;
  for (int64_t i = 0; i < n_req && w.bad == 0; i++) {
    EXPECT_EQ_I(rs[i].n, rq[i].n);
    EXPECT_TRUE(rs[i].score && !rs[i].logits && !rs[i].embedding);
    if (rs[i].score)
      memcpy(out + i * chunk, rs[i].score, (size_t)rq[i].n * sizeof(float));
    most = NG_MAX(most, rs[i].batch_nodes);
  }
  EXPECT_EQ_I(rs[n_req].embedding_dim, 16);
  for (int64_t i = 0; i <= n_req; i++)
    ng_infer_result_free(&rs[i]);
  free(rq);
  free(rs);
  return most;
}

/* Every mode on the CPU backend, every row hot, with and without the embedding cache (with it,
 * two main-lane workers): the offline scores' bits, whether pair requests ride alone or merged
 * with others. With a cold tier the input layer adds the hot and cold partial sums in another
 * order: every mode then gives the same bits as the others, close to the offline scores. */
static void test_engine_matches_offline(void) {
  const trained *all[] = {&dot, &mlp};
  const ng_mode modes[] = {NG_MODE_AUTO, NG_MODE_BASELINE, NG_MODE_ZEROCOPY, NG_MODE_PARTIAL,
                           NG_MODE_HYBRID};
  float *got = ng_test_xmalloc((size_t)n_pairs * sizeof(float));
  for (size_t k = 0; k < NG_TEST_LEN(all); k++) {
    const trained *t = all[k];
    for (size_t i = 0; i < NG_TEST_LEN(modes); i++)
      for (int cache = 0; cache < 2; cache++) {
        ng_engine *e = engine_on(mp, t, modes[i], -1.0, cache ? 64 << 20 : 0, NULL, 1 + cache);
        if (!e)
          return;
        ng_engine_info ei;
        ng_engine_info_get(&ei, e);
        EXPECT_EQ_I(ei.pair_scores, 1);
        EXPECT_EQ_I(ei.decoder, (int)t->decoder);
        char what[96];
        snprintf(what, sizeof what, "%s decoder, mode %s, cache %d (and %d workers)",
                 ng_link_decoder_name(t->decoder), ng_mode_name(modes[i]), cache, 1 + cache);
        /* Twice with the cache: the second time its rows are hits. */
        for (int round = 0; round < 1 + cache; round++) {
          memset(got, 0xff, (size_t)n_pairs * sizeof(float));
          const int64_t most = engine_scores(e, got, round ? 1 : 100);
          EXPECT_SAME_BITS(got, t->offline, n_pairs, what);
          if (!round) /* pair requests shared batches: one has at most 200 ends */
            EXPECT_TRUE(most > 200);
        }
        ng_engine_stats s;
        ng_engine_stats_get(&s, e);
        EXPECT_EQ_I(s.cold_rows, 0);
        if (cache)
          EXPECT_TRUE(s.cache_hits > 0);
        ng_engine_destroy(e);
      }
    float *first = NULL;
    for (size_t i = 1; i < NG_TEST_LEN(modes); i++) {
      ng_engine *e = engine_on(mp, t, modes[i], 0.3, 0, NULL, 0);
      if (!e)
        return;
      float *cold = ng_test_xmalloc((size_t)n_pairs * sizeof(float));
      engine_scores(e, cold, 50);
      ng_engine_stats s;
      ng_engine_stats_get(&s, e);
      EXPECT_TRUE(s.cold_rows > 0);
      if (!first) {
        first = cold;
        for (int64_t p = 0; p < n_pairs; p++)
          EXPECT_NEAR(cold[p], t->offline[p], 1e-3 * (1.0 + fabs(t->offline[p])));
      } else {
        EXPECT_SAME_BITS(cold, first, n_pairs, "cold tier, across modes");
        free(cold);
      }
      ng_engine_destroy(e);
    }
    free(first);
  }
  free(got);
}

/* After updates (an edge added, a feature row replaced), with and without the cache: the bits of
 * an engine created on the updated graph (the offline trainer reads the split's files, which the
 * updates do not change), and scores of pairs near the update changed. */
static void test_after_update(void) {
  const int64_t v = src[0], w = dst[1]; /* ends of test pairs */
  const int64_t nodes = info.nodes, dim = info.feature_dim;
  /* The updated graph: row v gains w (appended, as an update appends), and w's features. */
  const int index32 = mp_index32;
  const int64_t edges = mp_indptr[nodes];
  int64_t *ip = ng_test_xmalloc((size_t)(nodes + 1) * sizeof *ip);
  char *ix = ng_test_xmalloc((size_t)(edges + 1) * (index32 ? 4 : 8));
  const size_t isz = index32 ? 4 : 8;
  for (int64_t x = 0, at = 0; x < nodes; x++) {
    ip[x] = at;
    const int64_t len = mp_indptr[x + 1] - mp_indptr[x];
    memcpy(ix + at * (int64_t)isz, (char *)mp_indices + mp_indptr[x] * (int64_t)isz,
           (size_t)len * isz);
    at += len;
    if (x == v) {
      if (index32) {
        const int32_t w32 = (int32_t)w;
        memcpy(ix + at * 4, &w32, 4);
      } else {
        memcpy(ix + at * 8, &w, 8);
      }
      at++;
    }
    ip[x + 1] = at;
  }
  const float *x0 = NULL;
  EXPECT_OK(ng_dataset_features(&x0, mp));
  float *x1 = ng_test_xmalloc((size_t)(nodes * dim) * sizeof(float));
  memcpy(x1, x0, (size_t)(nodes * dim) * sizeof(float));
  float *row = ng_test_xmalloc((size_t)dim * sizeof(float));
  for (int64_t c = 0; c < dim; c++)
    row[c] = (float)(c % 7 == 0);
  memcpy(x1 + w * dim, row, (size_t)dim * sizeof(float));
  ng_dataset_t g1 = graph_dataset(ip, ix, index32, x1);
  float *got = ng_test_xmalloc((size_t)n_pairs * sizeof(float));
  float *want = ng_test_xmalloc((size_t)n_pairs * sizeof(float));
  const trained *all[] = {&dot, &mlp};
  for (size_t k = 0; k < NG_TEST_LEN(all) && g1; k++)
    for (int cache = 0; cache < 2; cache++) {
      const trained *t = all[k];
      char log[4096];
      snprintf(log, sizeof log, "%s", ng_test_path("pairs_update.log"));
      unlink(log);
      ng_engine *e = engine_on(mp, t, NG_MODE_AUTO, -1.0, cache ? 64 << 20 : 0, log, 0);
      ng_engine *fresh = engine_on(g1, t, NG_MODE_AUTO, -1.0, 0, NULL, 0);
      if (!e || !fresh) {
        ng_engine_destroy(e);
        ng_engine_destroy(fresh);
        break;
      }
      engine_scores(e, got, 100); /* warms the cache with the rows the update invalidates */
      ng_graph_update up;
      memset(&up, 0, sizeof up);
      up.n_add_edges = 1;
      up.add_src = &w;
      up.add_dst = &v;
      up.n_feature_rows = 1;
      up.feature_ids = &w;
      up.feature_values = row;
      EXPECT_OK(ng_engine_update(e, &up, NULL));
      engine_scores(e, got, 100);
      engine_scores(fresh, want, 100);
      EXPECT_SAME_BITS(got, want, n_pairs, "after the update");
      EXPECT_TRUE(first_diff(got, t->offline, n_pairs) >= 0);
      EXPECT_TRUE(memcmp(&got[0], &t->offline[0], sizeof(float)) != 0); /* pair 0 has end v */
      ng_engine_destroy(fresh);
      ng_engine_destroy(e);
    }
  ng_dataset_close(g1);
  free(got);
  free(want);
  free(row);
  free(x1);
  free(ip);
  free(ix);
}

static void test_bad_pair_requests(void) {
  ng_engine *e = engine_on(mp, &dot, NG_MODE_AUTO, -1.0, 0, NULL, 0);
  if (!e)
    return;
  ng_infer_request r;
  memset(&r, 0, sizeof r);
  ng_infer_result res;
  int64_t a[2] = {1, 2}, b[2] = {3, info.nodes};
  r.node_ids = a;
  r.dst_ids = b;
  r.n = 2;
  EXPECT_STATUS(ng_engine_infer(e, &r, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("dst_ids[1]");
  b[1] = 4;
  a[0] = -1;
  EXPECT_STATUS(ng_engine_infer(e, &r, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("src_ids[0]");
  a[0] = 1;
  r.outputs = NG_OUT_LOGITS;
  EXPECT_STATUS(ng_engine_infer(e, &r, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("score");
  r.outputs = NG_OUT_SCORE;
  r.dst_ids = NULL;
  EXPECT_STATUS(ng_engine_infer(e, &r, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("dst_ids");
  r.dst_ids = b;
  EXPECT_OK(ng_engine_infer(e, &r, &res));
  EXPECT_EQ_I(res.n, 2);
  EXPECT_TRUE(res.score && isfinite(res.score[0]) && isfinite(res.score[1]));
  ng_infer_result_free(&res);
  ng_engine_destroy(e);
  /* An engine of a node-classification checkpoint has no decoder. */
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.workers = 2;
  ng_engine *ne = NULL;
  EXPECT_OK(ng_engine_create(&ne, cora, NULL, node_ckpt, &o));
  if (ne) {
    EXPECT_STATUS(ng_engine_infer(ne, &r, &res), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("link-prediction checkpoint");
    ng_engine_info ei;
    ng_engine_info_get(&ei, ne);
    EXPECT_EQ_I(ei.pair_scores, 0);
    ng_engine_destroy(ne);
  }
}

/* ---- over HTTP ---- */

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* POSTs `body` to `path` on a fresh connection; returns the status, *out the body (free()). */
static int post(int port, const char *path, const char *body, char **out) {
  *out = NULL;
  int fd = connect_to(port);
  if (fd < 0)
    return -1;
  char head[512];
  const int n = snprintf(head, sizeof head,
                         "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
                         "%zu\r\nContent-Type: application/json\r\n\r\n",
                         path, strlen(body));
  bool ok = send(fd, head, (size_t)n, MSG_NOSIGNAL) == n &&
            send(fd, body, strlen(body), MSG_NOSIGNAL) == (ssize_t)strlen(body);
  size_t got = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  ssize_t k;
  while (ok && (k = recv(fd, buf + got, cap - got - 1, 0)) > 0) {
    got += (size_t)k;
    if (got + 1 >= cap)
      buf = realloc(buf, cap *= 2);
  }
  close(fd);
  buf[got] = 0;
  int status = -2;
  if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
    status = -2;
  char *b = strstr(buf, "\r\n\r\n");
  *out = strdup(b ? b + 4 : "");
  free(buf);
  return status;
}

/* A pair request's body over pairs [0, n) of the test split. */
static char *pair_body(int64_t n, int64_t n_dst) {
  size_t cap = 256 + (size_t)(n + n_dst) * 24, at = 0;
  char *s = malloc(cap);
  at += (size_t)snprintf(s + at, cap - at,
                         "{\"id\":\"p\",\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\","
                         "\"shape\":[%lld],\"data\":[",
                         (long long)n);
  for (int64_t i = 0; i < n; i++)
    at += (size_t)snprintf(s + at, cap - at, "%s%lld", i ? "," : "", (long long)src[i]);
  at += (size_t)snprintf(s + at, cap - at,
                         "]},{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[%lld],"
                         "\"data\":[",
                         (long long)n_dst);
  for (int64_t i = 0; i < n_dst; i++)
    at += (size_t)snprintf(s + at, cap - at, "%s%lld", i ? "," : "", (long long)dst[i]);
  snprintf(s + at, cap - at, "]}]}");
  return s;
}

static void test_http_pairs(void) {
  ng_engine *e = engine_on(mp, &mlp, NG_MODE_AUTO, -1.0, 0, NULL, 0);
  if (!e)
    return;
  ng_http_opts ho = NG_HTTP_OPTS_INIT;
  ho.port = 0;
  ng_http_server *s = NULL;
  EXPECT_OK(ng_http_server_start(&s, e, &ho));
  if (!s) {
    ng_engine_destroy(e);
    return;
  }
  const int port = ng_http_server_port(s);
  char path[256];
  ng_engine_info ei;
  ng_engine_info_get(&ei, e);
  snprintf(path, sizeof path, "/v2/models/%s/infer", ei.name);
  const int64_t n = NG_MIN(n_pairs, 300);
  /* The C API's answer to the same pairs. */
  ng_infer_request r;
  memset(&r, 0, sizeof r);
  r.node_ids = src;
  r.dst_ids = dst;
  r.n = n;
  ng_infer_result res;
  EXPECT_OK(ng_engine_infer(e, &r, &res));
  char *body = pair_body(n, n), *answer = NULL;
  EXPECT_EQ_I(post(port, path, body, &answer), 200);
  cJSON *j = cJSON_Parse(answer);
  cJSON *out = j ? cJSON_GetArrayItem(cJSON_GetObjectItem(j, "outputs"), 0) : NULL;
  EXPECT_TRUE(out != NULL);
  if (out && res.score) {
    EXPECT_STR(cJSON_GetObjectItem(out, "name")->valuestring, "score");
    EXPECT_STR(cJSON_GetObjectItem(out, "datatype")->valuestring, "FP32");
    EXPECT_EQ_I(cJSON_GetArrayItem(cJSON_GetObjectItem(out, "shape"), 0)->valueint, n);
    const cJSON *data = cJSON_GetObjectItem(out, "data");
    EXPECT_EQ_I(cJSON_GetArraySize(data), n);
    float *http = ng_test_xmalloc((size_t)n * sizeof(float));
    int64_t i = 0;
    for (const cJSON *x = data ? data->child : NULL; x && i < n; x = x->next, i++)
      http[i] = (float)x->valuedouble; /* 9 significant digits read back to the same bits */
    EXPECT_SAME_BITS(http, res.score, n, "HTTP against the C API");
    EXPECT_SAME_BITS(http, mlp.offline, n, "HTTP against offline");
    free(http);
  }
  cJSON_Delete(j);
  free(answer);
  free(body);
  ng_infer_result_free(&res);
  /* Shapes that differ, an id out of range, a node output asked of pairs: 400 naming it. */
  body = pair_body(3, 2);
  EXPECT_EQ_I(post(port, path, body, &answer), 400);
  EXPECT_TRUE(answer && strstr(answer, "one shape"));
  free(answer);
  free(body);
  char bad[512];
  snprintf(bad, sizeof bad,
           "{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]},"
           "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[%lld]}]}",
           (long long)info.nodes);
  EXPECT_EQ_I(post(port, path, bad, &answer), 400);
  EXPECT_TRUE(answer && strstr(answer, "dst_ids[0]"));
  free(answer);
  snprintf(bad, sizeof bad,
           "{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]},"
           "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[2]}],"
           "\"outputs\":[{\"name\":\"logits\"}]}");
  EXPECT_EQ_I(post(port, path, bad, &answer), 400);
  EXPECT_TRUE(answer && strstr(answer, "score"));
  free(answer);
  ng_http_server_stop(s);
  ng_engine_destroy(e);
}

/* The parser and the writer alone: inputs src_ids/dst_ids, the default output, the refusals. */
static void test_parse_pairs(void) {
  ng_http_infer r;
  const char *ok = "{\"inputs\":[{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[2],"
                   "\"data\":[5,6]},{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[2],"
                   "\"data\":[7,8]}],\"parameters\":{\"timeout_ms\":50}}";
  EXPECT_OK(ng__parse_infer_request(&r, ok, strlen(ok), 2));
  EXPECT_EQ_I(r.req.n, 2);
  EXPECT_TRUE(r.req.dst_ids != NULL);
  if (r.req.dst_ids) {
    EXPECT_EQ_I(r.req.node_ids[0], 7);
    EXPECT_EQ_I(r.req.node_ids[1], 8);
    EXPECT_EQ_I(r.req.dst_ids[0], 5);
    EXPECT_EQ_I(r.req.dst_ids[1], 6);
  }
  EXPECT_EQ_I(r.req.outputs, NG_OUT_SCORE);
  EXPECT_EQ_I(r.req.timeout_ms, 50);
  float score[2] = {1.5f, -0.1f};
  ng_infer_result res;
  memset(&res, 0, sizeof res);
  res.n = 2;
  res.score = score;
  size_t len = 0;
  char *text = ng__infer_response_json(&len, "m", "x", r.req.outputs, &res);
  EXPECT_TRUE(text && strstr(text, "{\"name\":\"score\",\"datatype\":\"FP32\",\"shape\":[2],"
                                   "\"data\":[1.5,-0.100000001]}"));
  free(text);
  ng__http_infer_clear(&r);
  /* A node request keeps its one input and its three default outputs. */
  const char *node = "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
                     "\"data\":[3]}]}";
  EXPECT_OK(ng__parse_infer_request(&r, node, strlen(node), 2));
  EXPECT_TRUE(r.req.dst_ids == NULL);
  EXPECT_EQ_I(r.req.outputs, NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS);
  ng__http_infer_clear(&r);
  static const struct {
    const char *body, *says;
  } bad[] = {
      {"{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,2]},"
       "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]}]}",
       "one shape"},
      {"{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]},"
       "{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]}]}",
       "one of each"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]},"
       "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]}]}",
       "unknown input \"node_ids\""},
      {"{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}]}",
       "unknown input \"src_ids\""},
      {"{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]},"
       "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]}]}",
       "src_ids has datatype INT32"},
      {"{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]},"
       "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3.0]}]}",
       "dst_ids data[0]"},
      {"{\"inputs\":[{\"name\":\"src_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]},"
       "{\"name\":\"dst_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]}],"
       "\"outputs\":[{\"name\":\"scores\"}]}",
       "\"score\""},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad); i++) {
    EXPECT_STATUS(ng__parse_infer_request(&r, bad[i].body, strlen(bad[i].body), 2),
                  NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS(bad[i].says);
    EXPECT_TRUE(r.ids == NULL); /* nothing half-parsed kept */
  }
}

/* ---- set-up ---- */

static void setup(void) {
  EXPECT_OK(ng_dataset_info_get(&info, cora));
  snprintf(dir, sizeof dir, "%s", ng_test_path("cora_pairs"));
  char cmd[16384];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, ng_test_path("cora"), dir);
  EXPECT_TRUE(system(cmd) == 0);
  ng_split_edges_opts so = NG_SPLIT_EDGES_OPTS_INIT;
  so.neg_per_pos = 1;
  so.neg_source = 1; /* uniform: the Planetoid protocol */
  so.seed = 3;
  EXPECT_OK(ng_dataset_split_edges(NULL, dir, &so));
  ds = ng_test_open_ok(dir);
  ng_npy_header h;
  mp_indptr = read_links(NG_LINK_ARR_INDPTR, &h);
  mp_indices = read_links(NG_LINK_ARR_INDICES, &h);
  const float *x = NULL;
  EXPECT_OK(ng_dataset_features(&x, ds));
  mp_index32 = h.dtype == NG_DTYPE_I32;
  mp = graph_dataset(mp_indptr, mp_indices, mp_index32, x);
  ng_npy_header hp, hn;
  int64_t *pos = read_links(NG_LINK_ARR_TEST_POS, &hp);
  int64_t *neg = read_links(NG_LINK_ARR_TEST_NEG, &hn);
  const int64_t n = hp.shape[0];
  n_pairs = 2 * n;
  src = ng_test_xmalloc((size_t)n_pairs * sizeof *src);
  dst = ng_test_xmalloc((size_t)n_pairs * sizeof *dst);
  for (int64_t i = 0; i < n; i++) {
    src[i] = pos[2 * i];
    dst[i] = pos[2 * i + 1];
    src[n + i] = neg[2 * i];
    dst[n + i] = neg[2 * i + 1];
  }
  free(pos);
  free(neg);
  /* A node-classification checkpoint, for the refusals. */
  ng_model_t m = ng_test_cora_sage();
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.workers = -1;
  ng_trainer_t tr = NULL;
  EXPECT_OK(ng_trainer_create(&tr, cora, m, &o));
  snprintf(node_ckpt, sizeof node_ckpt, "%s", ng_test_path("node.safetensors"));
  EXPECT_OK(ng_trainer_save(tr, node_ckpt));
  ng_trainer_destroy(tr);
  ng_model_destroy(m);
  train(&dot, NG_LINK_DECODER_DOT, "link_dot.safetensors");
  train(&mlp, NG_LINK_DECODER_MLP, "link_mlp.safetensors");
}

int main(void) {
  omp_set_num_threads(2);
  RUN_TEST(test_parse_pairs);
  cora = ng_test_fetch_cora();
  setup();
  if (!dot.offline || !mlp.offline)
    return ng_test_summary();
  RUN_TEST(test_checkpoint_reload);
  RUN_TEST(test_engine_matches_offline);
  RUN_TEST(test_after_update);
  RUN_TEST(test_bad_pair_requests);
  RUN_TEST(test_http_pairs);
  ng_dataset_close(mp);
  ng_dataset_close(ds);
  ng_dataset_close(cora);
  free(mp_indptr);
  free(mp_indices);
  free(src);
  free(dst);
  free(dot.offline);
  free(mlp.offline);
  return ng_test_summary();
}
