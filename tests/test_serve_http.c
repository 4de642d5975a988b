/* The HTTP front of the serving mode (serve/http.c, serve/http_json.c): the request parsers, the
 * response writers, and the server itself on a real socket, driven by a small HTTP client.
 *
 * TEST-ONLY FAKE ENGINE: the server is tested here against a fake engine defined below (the
 * functions of include/neargnn_serve.h that http.c calls), so that the HTTP behaviour (routing,
 * status codes, limits, metrics, drain) is tested apart from the real engine, which
 * tests/cli_serve.sh drives end to end. The linker takes these definitions before the library's:
 * http.c's calls resolve here, and the real engine's object is never pulled in. */
#include "core_impl.h"
#include "http_impl.h"
#include "ng_test.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the fake engine (test only) ---- */

#define FAKE_DIM 3
#define FAKE_CLASSES 4

/* A request the fake holds (fake_hold) until fake_release answers it. */
typedef struct fake_job {
  const ng_infer_request *req;
  ng_infer_result *res;
  ng_infer_done_fn done;
  void *user;
  ng_infer_ticket ticket;
  struct fake_job *next;
} fake_job;

struct ng_engine {
  atomic_llong nodes;
  atomic_int busy; /* submit refuses with NG_ERR_STATE (queue full) */
  atomic_llong requests, updates;
  atomic_llong computed, cancelled;
  ng_infer_request last; /* the last request seen (ids not kept) */
  /* Under fake_mu: while `hold`, submitted requests wait in `held` for fake_release, as queued
   * requests wait for a paused engine; otherwise they are answered inside ng_engine_submit (the
   * callback may run before submit returns). */
  bool hold;
  fake_job *held;
  int n_held;
  uint64_t tickets;
  /* Under fake_mu: while upd_hold > 0, ng_engine_apply waits until upd_hold updates wait at once
   * (as the real engine's group commit held open by ng__engine_test_group_hold), then they all
   * go on; upd_waiting counts them. Bounded: after 60 s the hold gives up, so that a server
   * that cannot queue them all fails the test instead of hanging it. */
  int upd_hold, upd_waiting;
};
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

/* A deterministic logit of (node, class) that is not all zeros and has a unique argmax. */
static float fake_logit(int64_t v, int64_t c) {
  return (float)(((v * 7 + c * 3) % 11) - 5) * 0.37f + (float)c * 1e-3f;
}

void ng_engine_info_get(ng_engine_info *out, const ng_engine *e) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "fake");
  out->nodes = atomic_load(&((ng_engine *)e)->nodes);
  out->feature_dim = FAKE_DIM;
  out->classes = FAKE_CLASSES;
  out->layers = 2;
  out->layer_dim[0] = 5;
  out->layer_dim[1] = FAKE_CLASSES;
  out->ready = 1;
}

/* The fake's answer to an admitted request. */
static void fake_compute(ng_engine *e, const ng_infer_request *req, ng_infer_result *res) {
  const unsigned out = req->outputs ? req->outputs : NG_OUT_LOGITS;
  res->n = req->n;
  res->classes = FAKE_CLASSES;
  res->embedding_dim = 5;
  res->logits = (out & NG_OUT_LOGITS) ? malloc((size_t)req->n * FAKE_CLASSES * sizeof(float)) : 0;
  res->embedding = (out & NG_OUT_EMBEDDING) ? malloc((size_t)req->n * 5 * sizeof(float)) : 0;
  res->cls = (out & NG_OUT_CLASS) ? malloc((size_t)req->n * sizeof(int64_t)) : 0;
  for (int64_t i = 0; i < req->n; i++) {
    const int64_t v = req->node_ids[i];
    int64_t best = 0;
    for (int64_t c = 0; c < FAKE_CLASSES; c++) {
      if (res->logits)
        res->logits[i * FAKE_CLASSES + c] = fake_logit(v, c);
      if (fake_logit(v, c) > fake_logit(v, best))
        best = c;
    }
    for (int64_t k = 0; res->embedding && k < 5; k++)
      res->embedding[i * 5 + k] = (float)v / 3.0f + (float)k;
    if (res->cls)
      res->cls[i] = best;
  }
  res->hub = req->node_ids[0] == 0; /* node 0 is the fake's hub */
  res->batch_nodes = req->n;
  res->hot_rows = 2 * req->n;
  res->cold_rows = req->n;
  atomic_fetch_add(&e->computed, 1);
}

ng_status ng_engine_submit(ng_engine *e, const ng_infer_request *req, ng_infer_result *res,
                           ng_infer_done_fn done, void *user, ng_infer_ticket *ticket) {
  memset(res, 0, sizeof *res);
  if (atomic_load(&e->busy))
    return ng__err(NG_ERR_STATE, "admission queue full (1024 requests)");
  const int64_t nodes = atomic_load(&e->nodes);
  for (int64_t i = 0; i < req->n; i++)
    if (req->node_ids[i] < 0 || req->node_ids[i] >= nodes)
      return ng__err(NG_ERR_INVALID_ARG, "node id %" PRId64 " is not in [0, %" PRId64 ")",
                     req->node_ids[i], nodes);
  atomic_fetch_add(&e->requests, 1);
  pthread_mutex_lock(&fake_mu);
  e->last = *req;
  e->last.node_ids = NULL;
  const ng_infer_ticket t = ++e->tickets;
  if (ticket)
    *ticket = t;
  if (e->hold) {
    fake_job *j = calloc(1, sizeof *j);
    *j = (fake_job){req, res, done, user, t, e->held};
    e->held = j;
    e->n_held++;
    pthread_mutex_unlock(&fake_mu);
    return NG_OK;
  }
  pthread_mutex_unlock(&fake_mu);
  fake_compute(e, req, res);
  done(user, NG_OK, "");
  return NG_OK;
}

ng_status ng_engine_cancel(ng_engine *e, ng_infer_ticket ticket) {
  pthread_mutex_lock(&fake_mu);
  for (fake_job **p = &e->held; *p; p = &(*p)->next) {
    fake_job *j = *p;
    if (j->ticket != ticket)
      continue;
    *p = j->next;
    e->n_held--;
    pthread_mutex_unlock(&fake_mu);
    atomic_fetch_add(&e->cancelled, 1);
    j->done(j->user, NG_ERR_INTERRUPTED, "request cancelled while queued");
    free(j);
    return NG_OK;
  }
  pthread_mutex_unlock(&fake_mu);
  return ng__err(NG_ERR_NOT_FOUND, "no such request");
}

/* Holds the requests submitted from now on. */
static void fake_hold(ng_engine *e) {
  pthread_mutex_lock(&fake_mu);
  e->hold = true;
  pthread_mutex_unlock(&fake_mu);
}

/* Stops holding, and answers the held requests. */
static void fake_release(ng_engine *e) {
  pthread_mutex_lock(&fake_mu);
  e->hold = false;
  fake_job *j = e->held;
  e->held = NULL;
  e->n_held = 0;
  pthread_mutex_unlock(&fake_mu);
  while (j) {
    fake_job *next = j->next;
    fake_compute(e, j->req, j->res);
    j->done(j->user, NG_OK, "");
    free(j);
    j = next;
  }
}

static int fake_held(ng_engine *e) {
  pthread_mutex_lock(&fake_mu);
  const int n = e->n_held;
  pthread_mutex_unlock(&fake_mu);
  return n;
}

/* Waits (bounded: 30 s) until `*v` reaches `want`; returns its last value. */
static int64_t await_count(atomic_llong *v, int64_t want) {
  const struct timespec ts = {0, 2 * 1000000L};
  for (int i = 0; i < 15000 && atomic_load(v) < want; i++)
    nanosleep(&ts, NULL);
  return atomic_load(v);
}

static int await_held(ng_engine *e, int want) {
  const struct timespec ts = {0, 2 * 1000000L};
  for (int i = 0; i < 15000 && fake_held(e) < want; i++)
    nanosleep(&ts, NULL);
  return fake_held(e);
}

void ng_infer_result_free(ng_infer_result *r) {
  free(r->logits);
  free(r->embedding);
  free(r->cls);
  r->logits = r->embedding = NULL;
  r->cls = NULL;
}

static pthread_cond_t fake_upd_cv = PTHREAD_COND_INITIALIZER;

static int fake_upd_waiting(ng_engine *e) {
  pthread_mutex_lock(&fake_mu);
  const int n = e->upd_waiting;
  pthread_mutex_unlock(&fake_mu);
  return n;
}

/* Lets the held updates go on. */
static void fake_upd_release(ng_engine *e) {
  pthread_mutex_lock(&fake_mu);
  e->upd_hold = 0;
  e->upd_waiting = 0;
  pthread_cond_broadcast(&fake_upd_cv);
  pthread_mutex_unlock(&fake_mu);
}

/* The fake takes updates as an engine with a log does, so the server starts its updaters. */
ng_status ng_engine_log_info_get(ng_engine_log_info *out, const ng_engine *e) {
  (void)e;
  *out = (ng_engine_log_info)NG_ENGINE_LOG_INFO_INIT;
  return NG_OK;
}

ng_status ng_engine_apply(ng_engine *e, const ng_graph_update *u, ng_update_result *out) {
  pthread_mutex_lock(&fake_mu);
  if (e->upd_hold > 0) {
    e->upd_waiting++;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    while (e->upd_hold > 0 && e->upd_waiting < e->upd_hold &&
           pthread_cond_timedwait(&fake_upd_cv, &fake_mu, &until) != ETIMEDOUT) {
    }
    if (e->upd_hold > 0) { /* the last of the group (or the hold gave up): all go on */
      e->upd_hold = 0;
      e->upd_waiting = 0;
      pthread_cond_broadcast(&fake_upd_cv);
    }
  }
  pthread_mutex_unlock(&fake_mu);
  const int64_t nodes = atomic_load(&e->nodes);
  for (int64_t i = 0; i < u->n_add_edges; i++)
    if (u->add_src[i] >= nodes + u->add_nodes || u->add_dst[i] >= nodes + u->add_nodes)
      return ng__err(NG_ERR_INVALID_ARG, "edge %" PRId64 " names an unknown node", i);
  *out = (ng_update_result){
      sizeof *out, nodes, u->add_nodes, u->n_add_edges, u->n_remove_edges, u->n_feature_rows, 1};
  atomic_fetch_add(&e->nodes, u->add_nodes);
  atomic_fetch_add(&e->updates, 1);
  return NG_OK;
}

void ng_engine_stats_get(ng_engine_stats *out, const ng_engine *e) {
  memset(out, 0, sizeof *out);
  out->requests = atomic_load(&((ng_engine *)e)->requests);
  out->updates = atomic_load(&((ng_engine *)e)->updates);
  out->computed = atomic_load(&((ng_engine *)e)->computed);
  out->cancelled = atomic_load(&((ng_engine *)e)->cancelled);
  out->queue_depth = 3;
}

/* ---- helpers ---- */

static ng_status parse_infer(ng_http_infer *r, const char *body, int32_t layers) {
  return ng__parse_infer_request(r, body, strlen(body), layers);
}

static cJSON *parse_or_fail(const char *text) {
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  if (!j)
    ng_test_fail(__FILE__, __LINE__, "not JSON: %s", text ? text : "(null)");
  return j;
}

/* ---- parsers ---- */

static void test_parse_infer(void) {
  ng_http_infer r;
  EXPECT_OK(parse_infer(&r,
                        "{\"id\":\"q1\",\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\","
                        "\"shape\":[3],\"data\":[5,0,9007199254740991]}],"
                        "\"parameters\":{\"fanouts\":[25,10],\"seed\":7,\"embedding_layer\":1,"
                        "\"timeout_ms\":250},"
                        "\"outputs\":[{\"name\":\"class\"},{\"name\":\"embedding\"}]}",
                        2));
  EXPECT_EQ_I(r.req.timeout_ms, 250);
  EXPECT_EQ_I(r.req.n, 3);
  EXPECT_EQ_I(r.req.node_ids[0], 5);
  EXPECT_EQ_I(r.req.node_ids[2], 9007199254740991LL);
  EXPECT_STR(r.id, "q1");
  EXPECT_EQ_I(r.req.n_fanouts, 2);
  EXPECT_EQ_I(r.req.fanout[0], 10); /* input layer first: the list's order reversed */
  EXPECT_EQ_I(r.req.fanout[1], 25);
  EXPECT_EQ_I((long long)r.req.seed, 7);
  EXPECT_EQ_I(r.req.embedding_layer, 1);
  EXPECT_EQ_I(r.req.outputs, NG_OUT_CLASS | NG_OUT_EMBEDDING);
  ng__http_infer_clear(&r);
  EXPECT_TRUE(r.ids == NULL && r.id == NULL);

  /* Defaults: every output, the layer before the last, the full neighbourhood; a seed above
   * 2^53 as a string. */
  EXPECT_OK(parse_infer(&r,
                        " {\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
                        "\"data\":[4]}],\"parameters\":{\"seed\":\"18446744073709551615\"}}\n",
                        3));
  EXPECT_EQ_I(r.req.outputs, NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS);
  EXPECT_EQ_I(r.req.embedding_layer, 1);
  EXPECT_EQ_I(r.req.n_fanouts, 0);
  EXPECT_EQ_I(r.req.timeout_ms, 0); /* the engine's request_timeout_ms */
  EXPECT_TRUE(r.req.seed == UINT64_MAX);
  EXPECT_TRUE(r.id == NULL);
  ng__http_infer_clear(&r);

  /* Only `len` bytes are read: the same text cut short is malformed. */
  const char *whole = "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
                      "\"data\":[4]}]}";
  EXPECT_OK(ng__parse_infer_request(&r, whole, strlen(whole), 2));
  ng__http_infer_clear(&r);
  EXPECT_STATUS(ng__parse_infer_request(&r, whole, strlen(whole) - 1, 2), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("malformed JSON");
}

static void test_parse_infer_rejects(void) {
  static const struct {
    const char *body, *needle;
  } cases[] = {
      {"", "empty body"},
      {"{\"inputs\": [", "malformed JSON"},
      {"[1,2]", "JSON object"},
      {"{} x", "text after"},
      {"{}", "\"inputs\""},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}",
       "INT64"},
      {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}]}",
       "unknown input \"x\""},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1]}]}",
       "shape [2] but 1 values"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1,1],\"data\":[1]}]}",
       "shape [n]"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[0],\"data\":[]}]}",
       "n >= 1"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,-3]}]"
       "}",
       "data[1]"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1.5]}]}",
       "data[0]"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
       "\"data\":[1e300]}]}",
       "data[0]"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"fanouts\":[5]}}",
       "has 1 values but the model has 2 layers"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"fanouts\":[5,0]}}",
       "fanouts[1]"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"seed\":-1}}",
       "\"seed\""},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"embedding_layer\":2}}",
       "embedding_layer"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"timeout_ms\":-5}}",
       "\"timeout_ms\""},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"timeout_ms\":0}}",
       "\"timeout_ms\""},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"timeout_ms\":3600001}}",
       "from 1 to 3600000"},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"parameters\":{\"timeout_ms\":1.5}}",
       "\"timeout_ms\""},
      {"{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
       "\"outputs\":[{\"name\":\"probabilities\"}]}",
       "outputs[0]"},
      {"{\"id\":5,\"inputs\":[]}", "\"id\" must be a string"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(cases); i++) {
    ng_http_infer r;
    const ng_status st = parse_infer(&r, cases[i].body, 2);
    if (st != NG_ERR_INVALID_ARG || !strstr(ng_last_error(), cases[i].needle))
      ng_test_fail(__FILE__, __LINE__,
                   "case %zu %s: got %s \"%s\", expected INVALID_ARG with \"%s\"", i, cases[i].body,
                   ng_status_name(st), ng_last_error(), cases[i].needle);
    EXPECT_TRUE(r.ids == NULL && r.id == NULL && r.req.n == 0);
  }
}

static void test_parse_graph_update(void) {
  ng_http_update u;
  const char *body = "{\"id\":\"u1\",\"add_nodes\":{\"count\":2,\"features\":[[1,2,3],[4,5,6.5]]},"
                     "\"add_edges\":[[0,10],[10,11]],\"remove_edges\":[[3,4]],"
                     "\"update_features\":{\"ids\":[7],\"values\":[-1,0.25,1e-3]}}";
  EXPECT_OK(ng__parse_graph_update(&u, body, strlen(body), FAKE_DIM));
  EXPECT_STR(u.id, "u1");
  EXPECT_EQ_I(u.u.add_nodes, 2);
  EXPECT_TRUE(u.u.add_features[5] == 6.5f && u.u.add_features[0] == 1.0f);
  EXPECT_EQ_I(u.u.n_add_edges, 2);
  EXPECT_EQ_I(u.u.add_src[1], 10);
  EXPECT_EQ_I(u.u.add_dst[1], 11);
  EXPECT_EQ_I(u.u.n_remove_edges, 1);
  EXPECT_EQ_I(u.u.remove_src[0], 3);
  EXPECT_EQ_I(u.u.remove_dst[0], 4);
  EXPECT_EQ_I(u.u.n_feature_rows, 1);
  EXPECT_EQ_I(u.u.feature_ids[0], 7);
  EXPECT_TRUE(u.u.feature_values[1] == 0.25f && u.u.feature_values[2] == 1e-3f);
  ng__http_update_clear(&u);

  const char *edges_only = "{\"remove_edges\":[[1,2],[2,1]]}";
  EXPECT_OK(ng__parse_graph_update(&u, edges_only, strlen(edges_only), FAKE_DIM));
  EXPECT_EQ_I(u.u.n_remove_edges, 2);
  EXPECT_EQ_I(u.u.add_nodes + u.u.n_add_edges + u.u.n_feature_rows, 0);
  EXPECT_TRUE(u.u.add_features == NULL && u.u.feature_values == NULL);
  ng__http_update_clear(&u);

  static const struct {
    const char *body, *needle;
  } bad[] = {
      {"{}", "nothing to do"},
      {"{\"add_edge\":[[1,2]]}", "unknown key \"add_edge\""},
      {"{\"add_nodes\":{\"features\":[[1,2]]}}", "row 0"},
      {"{\"add_nodes\":{\"features\":[1,2,3,4]}}", "not a multiple"},
      {"{\"add_nodes\":{\"count\":3,\"features\":[[1,2,3]]}}", "count is 3"},
      {"{\"add_nodes\":{\"features\":[[1,2,1e39]]}}", "finite float"},
      {"{\"add_edges\":[[1,2,3]]}", "add_edges[0]"},
      {"{\"add_edges\":[[1,-2]]}", "add_edges[0]"},
      {"{\"remove_edges\":{\"a\":1}}", "remove_edges"},
      {"{\"update_features\":{\"ids\":[1,2],\"values\":[[1,2,3]]}}", "2 ids but 1 rows"},
      {"{\"update_features\":{\"ids\":[1.5],\"values\":[[1,2,3]]}}", "ids[0]"},
      {"{\"add_nodes\":[1,2,3]}", "\"add_nodes\" must be an object"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad); i++) {
    const ng_status st = ng__parse_graph_update(&u, bad[i].body, strlen(bad[i].body), FAKE_DIM);
    if (st != NG_ERR_INVALID_ARG || !strstr(ng_last_error(), bad[i].needle))
      ng_test_fail(__FILE__, __LINE__,
                   "case %zu %s: got %s \"%s\", expected INVALID_ARG with \"%s\"", i, bad[i].body,
                   ng_status_name(st), ng_last_error(), bad[i].needle);
    EXPECT_TRUE(u.buf == NULL && u.id == NULL);
  }
}

/* ---- response writers ---- */

static void test_infer_response(void) {
  /* Values whose shortest decimal form needs all 9 digits, and one that is not finite. */
  float logits[6] = {0.1f, -1.0f / 3.0f, 3.4028235e38f, 1.17549435e-38f, -0.0f, 0.0f};
  logits[5] = INFINITY;
  float emb[4] = {1.5f, 2.0f / 7.0f, -8.25f, 1e-7f};
  int64_t cls[2] = {0, 1};
  ng_infer_result r = {.logits = logits,
                       .embedding = emb,
                       .cls = cls,
                       .n = 2,
                       .classes = 3,
                       .embedding_dim = 2,
                       .hub = 1,
                       .batch_nodes = 17,
                       .hot_rows = 5,
                       .cold_rows = 9,
                       .queue_us = 12.5,
                       .compute_us = 100};
  size_t len = 0;
  char *text = ng__infer_response_json(&len, "m\"x", "id\n1",
                                       NG_OUT_LOGITS | NG_OUT_EMBEDDING | NG_OUT_CLASS, &r);
  EXPECT_TRUE(text && len == strlen(text));
  cJSON *j = parse_or_fail(text);
  if (j) {
    EXPECT_STR(cJSON_GetObjectItem(j, "model_name")->valuestring, "m\"x");
    EXPECT_STR(cJSON_GetObjectItem(j, "id")->valuestring, "id\n1");
    cJSON *outs = cJSON_GetObjectItem(j, "outputs");
    EXPECT_EQ_I(cJSON_GetArraySize(outs), 3);
    cJSON *lo = cJSON_GetArrayItem(outs, 0);
    EXPECT_STR(cJSON_GetObjectItem(lo, "name")->valuestring, "logits");
    EXPECT_STR(cJSON_GetObjectItem(lo, "datatype")->valuestring, "FP32");
    EXPECT_EQ_I(cJSON_GetArrayItem(cJSON_GetObjectItem(lo, "shape"), 0)->valueint, 2);
    EXPECT_EQ_I(cJSON_GetArrayItem(cJSON_GetObjectItem(lo, "shape"), 1)->valueint, 3);
    cJSON *d = cJSON_GetObjectItem(lo, "data");
    for (int i = 0; i < 5; i++) { /* the text reads back to the same bits */
      float back = (float)cJSON_GetArrayItem(d, i)->valuedouble;
      if (memcmp(&back, &logits[i], sizeof back) != 0 && !(back == 0 && logits[i] == 0))
        ng_test_fail(__FILE__, __LINE__, "logit %d: %.9g read back as %.9g", i, (double)logits[i],
                     (double)back);
    }
    EXPECT_TRUE(cJSON_IsNull(cJSON_GetArrayItem(d, 5)));
    cJSON *eo = cJSON_GetArrayItem(outs, 1);
    EXPECT_STR(cJSON_GetObjectItem(eo, "name")->valuestring, "embedding");
    EXPECT_TRUE((float)cJSON_GetArrayItem(cJSON_GetObjectItem(eo, "data"), 1)->valuedouble ==
                emb[1]);
    cJSON *co = cJSON_GetArrayItem(outs, 2);
    EXPECT_STR(cJSON_GetObjectItem(co, "datatype")->valuestring, "INT64");
    EXPECT_EQ_I(cJSON_GetArrayItem(cJSON_GetObjectItem(co, "data"), 1)->valueint, 1);
    cJSON *p = cJSON_GetObjectItem(j, "parameters");
    EXPECT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(p, "hub")));
    EXPECT_EQ_I(cJSON_GetObjectItem(p, "batch_nodes")->valueint, 17);
    cJSON_Delete(j);
  }
  free(text);

  /* Only what was asked for, no id when none was given. */
  text = ng__infer_response_json(&len, "m", NULL, NG_OUT_CLASS, &r);
  j = parse_or_fail(text);
  if (j) {
    EXPECT_TRUE(cJSON_GetObjectItem(j, "id") == NULL);
    EXPECT_EQ_I(cJSON_GetArraySize(cJSON_GetObjectItem(j, "outputs")), 1);
    cJSON_Delete(j);
  }
  free(text);

  text = ng__error_json(&len, "bad \"thing\"\t\\");
  j = parse_or_fail(text);
  if (j)
    EXPECT_STR(cJSON_GetObjectItem(j, "error")->valuestring, "bad \"thing\"\t\\");
  cJSON_Delete(j);
  free(text);

  ng_engine_info info;
  ng_engine_info_get(&info, &(ng_engine){.nodes = 42});
  text = ng__model_metadata_json(&len, &info);
  j = parse_or_fail(text);
  if (j) {
    EXPECT_STR(cJSON_GetObjectItem(j, "name")->valuestring, "fake");
    cJSON *in = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "inputs"), 0);
    EXPECT_STR(cJSON_GetObjectItem(in, "datatype")->valuestring, "INT64");
    cJSON *outs = cJSON_GetObjectItem(j, "outputs");
    EXPECT_EQ_I(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 0), "shape"), 1)->valueint,
        FAKE_CLASSES);
    EXPECT_EQ_I(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 1), "shape"), 1)->valueint,
        5);
    EXPECT_EQ_I(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "parameters"), "nodes")->valueint, 42);
    cJSON_Delete(j);
  }
  free(text);

  char small[4];
  EXPECT_EQ_I(ng__json_escape(small, sizeof small, "abc"), 5); /* "abc" needs 5 characters */
  EXPECT_STR(small, "\"ab");
}

/* ---- the server on a socket ---- */

typedef struct {
  int status;
  char head[4096];
  char *body;
} http_answer;

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

static bool send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0)
      return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

/* Reads one answer (headers, then Content-Length bytes) from `fd`. */
static bool read_answer(int fd, http_answer *a) {
  memset(a, 0, sizeof a->head);
  a->status = 0;
  a->body = NULL;
  size_t got = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  char *end = NULL;
  while (!end) {
    if (got + 1 >= cap)
      buf = realloc(buf, cap *= 2);
    ssize_t k = recv(fd, buf + got, cap - got - 1, 0);
    if (k <= 0) {
      free(buf);
      return false;
    }
    got += (size_t)k;
    buf[got] = 0;
    end = strstr(buf, "\r\n\r\n");
  }
  const size_t head_len = (size_t)(end - buf) + 4;
  snprintf(a->head, sizeof a->head, "%.*s", (int)head_len, buf);
  sscanf(buf, "HTTP/1.1 %d", &a->status);
  const char *cl = strcasestr(a->head, "content-length:");
  const size_t body_len = cl ? strtoul(cl + 15, NULL, 10) : 0;
  while (got < head_len + body_len) {
    if (got + 1 >= cap)
      buf = realloc(buf, cap *= 2);
    ssize_t k = recv(fd, buf + got, cap - got - 1, 0);
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  a->body = malloc(body_len + 1);
  memcpy(a->body, buf + head_len, got - head_len < body_len ? got - head_len : body_len);
  a->body[body_len] = 0;
  free(buf);
  return true;
}

/* One request on a fresh connection. */
static http_answer http(int port, const char *method, const char *path, const char *body) {
  http_answer a = {0};
  int fd = connect_to(port);
  if (fd < 0) {
    a.status = -1;
    return a;
  }
  char head[512];
  int n = snprintf(head, sizeof head,
                   "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n"
                   "Content-Type: application/json\r\n\r\n",
                   method, path, body ? strlen(body) : 0);
  if (!send_all(fd, head, (size_t)n) || (body && !send_all(fd, body, strlen(body))) ||
      !read_answer(fd, &a))
    a.status = -2;
  close(fd);
  return a;
}

static void answer_free(http_answer *a) {
  free(a->body);
  a->body = NULL;
}

#define INFER_BODY(ids, n)                                                                         \
  "{\"id\":\"t\",\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[" #n         \
  "],\"data\":[" ids "]}],\"outputs\":[{\"name\":\"class\"},{\"name\":\"logits\"}]}"

/* Whether /metrics shows every line of `want` within 2 s: a request's counters move in its
 * completion callback, after its answer was sent, so the client may see the answer first. */
static bool metrics_show(int port, const char *const *want, size_t n, char **last) {
  for (int tries = 0; tries < 200; tries++) {
    http_answer m = http(port, "GET", "/metrics", NULL);
    size_t ok = 0;
    while (ok < n && m.body && strstr(m.body, want[ok]))
      ok++;
    if (ok == n) {
      answer_free(&m);
      return true;
    }
    if (tries == 199 && last) {
      *last = m.body;
      return false;
    }
    answer_free(&m);
    const struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return false;
}

typedef struct {
  int port;
  http_answer a;
} slow_call;

static void *slow_infer(void *arg) {
  slow_call *c = arg;
  c->a = http(c->port, "POST", "/v2/models/fake/infer", INFER_BODY("1", 1));
  return NULL;
}

/* Answers the fake's held requests 100 ms from now (while the server drains). */
static void *release_later(void *arg) {
  const struct timespec ts = {0, 100 * 1000000L};
  nanosleep(&ts, NULL);
  fake_release(arg);
  return NULL;
}

static void test_server(void) {
  ng_engine eng = {.nodes = 100};
  ng_http_server *s = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.port = 0;
  o.max_body_bytes = 64 * 1024;
  EXPECT_OK(ng_http_server_start(&s, &eng, &o));
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  EXPECT_TRUE(port > 0);

  http_answer a = http(port, "GET", "/v2/health/live", NULL);
  EXPECT_EQ_I(a.status, 200);
  answer_free(&a);
  a = http(port, "GET", "/v2/health/ready", NULL);
  EXPECT_EQ_I(a.status, 200);
  answer_free(&a);
  a = http(port, "GET", "/v2", NULL);
  EXPECT_EQ_I(a.status, 200);
  EXPECT_TRUE(a.body && strstr(a.body, "\"name\":\"neargnn\""));
  answer_free(&a);
  a = http(port, "GET", "/v2/models/fake", NULL);
  EXPECT_EQ_I(a.status, 200);
  EXPECT_TRUE(a.body && strstr(a.body, "\"node_ids\""));
  answer_free(&a);
  a = http(port, "GET", "/v2/models/fake/ready", NULL);
  EXPECT_EQ_I(a.status, 200);
  answer_free(&a);
  a = http(port, "GET", "/v2/models/other", NULL);
  EXPECT_EQ_I(a.status, 404);
  EXPECT_TRUE(a.body && strstr(a.body, "\"error\""));
  answer_free(&a);
  a = http(port, "GET", "/v2/models/fakeish/infer", NULL);
  EXPECT_EQ_I(a.status, 404);
  answer_free(&a);
  a = http(port, "GET", "/nope", NULL);
  EXPECT_EQ_I(a.status, 404);
  answer_free(&a);
  a = http(port, "GET", "/v2/models/fake/infer", NULL);
  EXPECT_EQ_I(a.status, 405);
  answer_free(&a);

  /* An infer request: the classes are the fake engine's argmax of its logits. */
  a = http(port, "POST", "/v2/models/fake/infer", INFER_BODY("0,3,99", 3));
  EXPECT_EQ_I(a.status, 200);
  cJSON *j = parse_or_fail(a.body);
  if (j) {
    EXPECT_STR(cJSON_GetObjectItem(j, "id")->valuestring, "t");
    cJSON *outs = cJSON_GetObjectItem(j, "outputs");
    EXPECT_EQ_I(cJSON_GetArraySize(outs), 2);
    cJSON *lo = cJSON_GetArrayItem(outs, 0), *co = cJSON_GetArrayItem(outs, 1);
    EXPECT_STR(cJSON_GetObjectItem(lo, "name")->valuestring, "logits");
    EXPECT_EQ_I(cJSON_GetArraySize(cJSON_GetObjectItem(lo, "data")), 3 * FAKE_CLASSES);
    const int64_t ids[3] = {0, 3, 99};
    for (int i = 0; i < 3; i++) {
      int64_t best = 0;
      for (int64_t c = 1; c < FAKE_CLASSES; c++)
        if (fake_logit(ids[i], c) > fake_logit(ids[i], best))
          best = c;
      EXPECT_EQ_I(cJSON_GetArrayItem(cJSON_GetObjectItem(co, "data"), i)->valueint, best);
      EXPECT_TRUE((float)cJSON_GetArrayItem(cJSON_GetObjectItem(lo, "data"), i * FAKE_CLASSES + 2)
                      ->valuedouble == fake_logit(ids[i], 2));
    }
    cJSON_Delete(j);
  }
  answer_free(&a);

  /* Bad input: 400 with a KServe error body, and the server goes on. */
  a = http(port, "POST", "/v2/models/fake/infer", "{\"inputs\": [");
  EXPECT_EQ_I(a.status, 400);
  EXPECT_TRUE(a.body && strstr(a.body, "malformed JSON"));
  answer_free(&a);
  a = http(port, "POST", "/v2/models/fake/infer", INFER_BODY("100", 1)); /* unknown id */
  EXPECT_EQ_I(a.status, 400);
  EXPECT_TRUE(a.body && strstr(a.body, "node id 100"));
  answer_free(&a);

  /* A full queue: 503 with Retry-After. */
  atomic_store(&eng.busy, 1);
  a = http(port, "POST", "/v2/models/fake/infer", INFER_BODY("1", 1));
  EXPECT_EQ_I(a.status, 503);
  EXPECT_TRUE(strcasestr(a.head, "Retry-After: 1") != NULL);
  EXPECT_TRUE(a.body && strstr(a.body, "{\"error\":\"operation not valid") != NULL);
  answer_free(&a);
  atomic_store(&eng.busy, 0);

  /* A declared body over the limit: 413 before a byte of it is sent (the server closes). */
  int fd = connect_to(port);
  const char *big = "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Length: "
                    "1000000000\r\n\r\n";
  EXPECT_TRUE(fd >= 0 && send_all(fd, big, strlen(big)));
  EXPECT_TRUE(read_answer(fd, &a));
  EXPECT_EQ_I(a.status, 413);
  answer_free(&a);
  close(fd);
  /* A chunked body that grows over the limit: 413 too, nothing kept. */
  fd = connect_to(port);
  const char *chunked = "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n";
  EXPECT_TRUE(fd >= 0 && send_all(fd, chunked, strlen(chunked)));
  char *chunk = malloc(16 * 1024 + 16);
  int hl = snprintf(chunk, 16, "4000\r\n");
  memset(chunk + hl, ' ', 16 * 1024);
  memcpy(chunk + hl + 16 * 1024, "\r\n", 2);
  bool sent = true;
  for (int i = 0; i < 5 && sent; i++) /* 80 KiB in all */
    sent = send_all(fd, chunk, (size_t)hl + 16 * 1024 + 2);
  sent = sent && send_all(fd, "0\r\n\r\n", 5);
  free(chunk);
  EXPECT_TRUE(read_answer(fd, &a));
  EXPECT_EQ_I(a.status, 413);
  answer_free(&a);
  close(fd);

  /* Keep-alive: two requests on one connection. */
  fd = connect_to(port);
  const char *two = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 2; i++) {
    EXPECT_TRUE(send_all(fd, two, strlen(two)));
    EXPECT_TRUE(read_answer(fd, &a));
    EXPECT_EQ_I(a.status, 200);
    answer_free(&a);
  }
  close(fd);

  /* A graph update: acknowledged with the new node's id, then visible. */
  a = http(port, "POST", "/v2/models/fake/graph",
           "{\"add_nodes\":{\"features\":[[1,2,3]]},\"add_edges\":[[100,5]]}");
  EXPECT_EQ_I(a.status, 200);
  EXPECT_TRUE(a.body && strstr(a.body, "\"first_new_id\":100") && strstr(a.body, "\"nodes\":101"));
  answer_free(&a);
  a = http(port, "POST", "/v2/models/fake/infer", INFER_BODY("100", 1));
  EXPECT_EQ_I(a.status, 200);
  answer_free(&a);
  a = http(port, "POST", "/v2/models/fake/graph", "{\"add_edges\":[[500,5]]}");
  EXPECT_EQ_I(a.status, 400);
  answer_free(&a);
  a = http(port, "POST", "/v2/models/fake/graph", "{\"add_nodes\":{\"features\":[[1,2]]}}");
  EXPECT_EQ_I(a.status, 400);
  answer_free(&a);

  /* The metrics count what happened. */
  static const char *const want[] = {
      "neargnn_http_requests_total{endpoint=\"infer\",code=\"200\"} 2",
      "neargnn_http_requests_total{endpoint=\"infer\",code=\"400\"} 2",
      "neargnn_http_requests_total{endpoint=\"infer\",code=\"503\"} 1",
      "neargnn_http_requests_total{endpoint=\"infer\",code=\"413\"} 2",
      "neargnn_http_requests_total{endpoint=\"graph\",code=\"200\"} 1",
      "neargnn_http_requests_total{endpoint=\"other\",code=\"404\"} 3",
      "neargnn_http_request_duration_seconds_bucket{endpoint=\"infer\",le=\"+Inf\"} 8",
      "neargnn_infer_duration_seconds_count{path=\"ordinary\"} 1",
      "neargnn_infer_duration_seconds_count{path=\"hub\"} 1",
      "neargnn_infer_batch_nodes_bucket{le=\"4\"} 2",
      "neargnn_engine_updates_applied_total 1",
      "neargnn_engine_queue_depth 3",
      "neargnn_graph_nodes 101",
  };
  char *last = NULL;
  if (!metrics_show(port, want, NG_TEST_LEN(want), &last))
    ng_test_fail(__FILE__, __LINE__, "/metrics lacks one of the expected lines:\n%s",
                 last ? last : "(no answer)");
  free(last);

  /* parameters.timeout_ms reaches the engine. */
  a = http(port, "POST", "/v2/models/fake/infer",
           "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
           "\"data\":[2]}],\"parameters\":{\"timeout_ms\":75}}");
  EXPECT_EQ_I(a.status, 200);
  EXPECT_EQ_I(eng.last.timeout_ms, 75);
  answer_free(&a);

  /* Drain: a request in flight when the server stops is answered; then nothing listens. */
  fake_hold(&eng);
  slow_call call = {.port = port};
  pthread_t th, rel;
  pthread_create(&th, NULL, slow_infer, &call);
  EXPECT_EQ_I(await_held(&eng, 1), 1); /* with the engine, its connection suspended */
  pthread_create(&rel, NULL, release_later, &eng);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
  pthread_join(rel, NULL);
  pthread_join(th, NULL);
  EXPECT_EQ_I(call.a.status, 200);
  answer_free(&call.a);
  EXPECT_TRUE(connect_to(port) < 0);
}

/* A client that closes its connection while its request waits for the engine (held, as by a
 * paused engine) cancels it: the engine never computes it. A request whose client stays is
 * answered once the engine goes on, on the same kind of suspended connection. */
static void test_disconnect_cancels(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_server *s = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.port = 0;
  EXPECT_OK(ng_http_server_start(&s, &eng, &o));
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  const char *body = INFER_BODY("3", 1);
  char req[1024];
  const int n = snprintf(req, sizeof req,
                         "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
  fake_hold(&eng);
  int gone = connect_to(port);
  EXPECT_TRUE(gone >= 0 && send_all(gone, req, (size_t)n));
  EXPECT_EQ_I(await_held(&eng, 1), 1); /* submitted; its connection suspended */
  close(gone);
  EXPECT_EQ_I(await_count(&eng.cancelled, 1), 1); /* the sweeper saw the client leave */
  EXPECT_EQ_I(fake_held(&eng), 0);
  static const char *const waiting0[] = {"neargnn_http_waiting 0",
                                         "neargnn_http_cancelled_total 1"};
  EXPECT_TRUE(metrics_show(port, waiting0, NG_TEST_LEN(waiting0), NULL));
  /* A client that stays: answered after the engine goes on. */
  int stays = connect_to(port);
  EXPECT_TRUE(stays >= 0 && send_all(stays, req, (size_t)n));
  EXPECT_EQ_I(await_held(&eng, 1), 1);
  fake_release(&eng);
  http_answer a;
  EXPECT_TRUE(read_answer(stays, &a));
  EXPECT_EQ_I(a.status, 200);
  EXPECT_TRUE(a.body && strstr(a.body, "\"class\""));
  answer_free(&a);
  close(stays);
  EXPECT_EQ_I(atomic_load(&eng.computed), 1); /* the cancelled one never was */
  EXPECT_EQ_I(atomic_load(&eng.cancelled), 1);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* The bodies held at once are bounded, charged as their bytes arrive: while 36 KB of one
 * connection's 40 KB body are held (its buffer grown to the declared length), another 40 KB body
 * does not fit in the rest of the 64 KB budget; it is dropped as it comes and answered 503 once
 * complete. The first is answered once its body is complete, and its memory goes back to the
 * budget. */
static void test_body_budget(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_server *s = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.port = 0;
  o.max_body_bytes = 48 * 1024;
  o.max_buffered_bytes = 64 * 1024;
  EXPECT_OK(ng_http_server_start(&s, &eng, &o));
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  const char *body_head =
      "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
      "\"data\":[1]}]";
  const size_t total = 40000, first = 36000;
  char head[256];
  int hn = snprintf(head, sizeof head,
                    "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    total);
  /* A's body: the head, spaces, the closing brace. */
  char *body = malloc(total);
  memset(body, ' ', total);
  memcpy(body, body_head, strlen(body_head));
  body[total - 1] = '}';
  int a = connect_to(port);
  EXPECT_TRUE(a >= 0 && send_all(a, head, (size_t)hn) && send_all(a, body, first));
  static const char *const held[] = {"neargnn_http_buffered_bytes 40001"};
  EXPECT_TRUE(metrics_show(port, held, 1, NULL)); /* A's buffer, grown to its declared length */
  int b = connect_to(port);
  http_answer ans;
  EXPECT_TRUE(b >= 0 && send_all(b, head, (size_t)hn) && send_all(b, body, total));
  EXPECT_TRUE(read_answer(b, &ans));
  EXPECT_EQ_I(ans.status, 503);
  EXPECT_TRUE(strcasestr(ans.head, "Retry-After:") != NULL);
  answer_free(&ans);
  close(b);
  EXPECT_TRUE(send_all(a, body + first, total - first));
  free(body);
  EXPECT_TRUE(read_answer(a, &ans));
  EXPECT_EQ_I(ans.status, 200);
  answer_free(&ans);
  close(a);
  static const char *const want[] = {
      "neargnn_http_requests_total{endpoint=\"infer\",code=\"200\"} 1",
      "neargnn_http_requests_total{endpoint=\"infer\",code=\"503\"} 1",
      "neargnn_http_buffered_bytes 0",
  };
  char *last = NULL;
  if (!metrics_show(port, want, NG_TEST_LEN(want), &last))
    ng_test_fail(__FILE__, __LINE__, "/metrics lacks one of the expected lines:\n%s",
                 last ? last : "(no answer)");
  free(last);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* Sends one request on a fresh keep-alive connection, whose reads give up after 30 s; returns
 * the socket (-1 on failure). */
static int send_request(int port, const char *method, const char *path, const char *body) {
  int fd = connect_to(port);
  if (fd < 0)
    return -1;
  const struct timeval tv = {30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char head[512];
  const int n = snprintf(head, sizeof head,
                         "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
                         "Content-Type: application/json\r\n\r\n",
                         method, path, strlen(body));
  if (!send_all(fd, head, (size_t)n) || !send_all(fd, body, strlen(body))) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Updates waiting to be durable hold no event-loop thread: with one event-loop thread, and the
 * engine holding the updates' group open until UPD_K of them wait, UPD_K - 1 updates wait while
 * an infer request is answered; the last one releases the group and all are answered, durable.
 * (Were an update to wait on the event-loop thread, the others and the infer would never be
 * read: the bounded waits below report it.) */
static void test_updates_do_not_block(void) {
  enum { UPD_K = 4 };
  ng_engine eng = {.nodes = 10};
  ng_http_server *s = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.port = 0;
  ng__http_test_threads = 1;
  const ng_status st = ng_http_server_start(&s, &eng, &o);
  ng__http_test_threads = 0;
  EXPECT_OK(st);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  pthread_mutex_lock(&fake_mu);
  eng.upd_hold = UPD_K;
  pthread_mutex_unlock(&fake_mu);
  const char *upd = "{\"id\":\"u\",\"add_edges\":[[1,2]]}";
  int fds[UPD_K];
  for (int i = 0; i < UPD_K - 1; i++) {
    fds[i] = send_request(port, "POST", "/v2/models/fake/graph", upd);
    EXPECT_TRUE(fds[i] >= 0);
  }
  /* All of them wait in ng_engine_apply at once (bounded: 30 s). */
  const struct timespec ts = {0, 2 * 1000000L};
  for (int i = 0; i < 15000 && fake_upd_waiting(&eng) < UPD_K - 1; i++)
    nanosleep(&ts, NULL);
  EXPECT_EQ_I(fake_upd_waiting(&eng), UPD_K - 1);
  /* An infer is answered meanwhile, on the same event-loop thread. */
  int inf = send_request(port, "POST", "/v2/models/fake/infer", INFER_BODY("3", 1));
  http_answer a;
  EXPECT_TRUE(inf >= 0 && read_answer(inf, &a));
  EXPECT_EQ_I(a.status, 200);
  EXPECT_TRUE(a.body && strstr(a.body, "\"class\""));
  answer_free(&a);
  if (inf >= 0)
    close(inf);
  EXPECT_EQ_I(atomic_load(&eng.updates), 0); /* none applied yet */
  /* The last update releases the group: all are answered 200, durable. */
  fds[UPD_K - 1] = send_request(port, "POST", "/v2/models/fake/graph", upd);
  EXPECT_TRUE(fds[UPD_K - 1] >= 0);
  for (int i = 0; i < UPD_K; i++) {
    if (fds[i] < 0)
      continue;
    EXPECT_TRUE(read_answer(fds[i], &a));
    EXPECT_EQ_I(a.status, 200);
    EXPECT_TRUE(a.body && strstr(a.body, "\"durable\":true") && strstr(a.body, "\"id\":\"u\""));
    answer_free(&a);
    close(fds[i]);
  }
  EXPECT_EQ_I(atomic_load(&eng.updates), UPD_K);
  static const char *const want[] = {
      "neargnn_http_requests_total{endpoint=\"graph\",code=\"200\"} 4",
      "neargnn_http_waiting 0",
      "neargnn_http_buffered_bytes 0",
  };
  char *last = NULL;
  if (!metrics_show(port, want, NG_TEST_LEN(want), &last))
    ng_test_fail(__FILE__, __LINE__, "/metrics lacks one of the expected lines:\n%s",
                 last ? last : "(no answer)");
  free(last);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* Releases the fake's held updates 100 ms from now (while the server drains). */
static void *upd_release_later(void *arg) {
  const struct timespec ts = {0, 100 * 1000000L};
  nanosleep(&ts, NULL);
  fake_upd_release(arg);
  return NULL;
}

/* A client that goes away while its update waits: the update is applied all the same, its answer
 * dropped; and an update waiting when the server stops is applied and answered before the stop
 * returns (the drain waits for it). */
static void test_update_disconnect_and_drain(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_server *s = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.port = 0;
  EXPECT_OK(ng_http_server_start(&s, &eng, &o));
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  pthread_mutex_lock(&fake_mu);
  eng.upd_hold = 3;
  pthread_mutex_unlock(&fake_mu);
  const char *upd = "{\"add_edges\":[[1,2]]}";
  const int gone = send_request(port, "POST", "/v2/models/fake/graph", upd);
  const int stays = send_request(port, "POST", "/v2/models/fake/graph", upd);
  EXPECT_TRUE(gone >= 0 && stays >= 0);
  const struct timespec ts = {0, 2 * 1000000L};
  for (int i = 0; i < 15000 && fake_upd_waiting(&eng) < 2; i++)
    nanosleep(&ts, NULL);
  EXPECT_EQ_I(fake_upd_waiting(&eng), 2);
  if (gone >= 0)
    close(gone);
  /* The group is released while the server drains: the stop waits for both. */
  pthread_t rel;
  pthread_create(&rel, NULL, upd_release_later, &eng);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
  pthread_join(rel, NULL);
  EXPECT_EQ_I(atomic_load(&eng.updates), 2);
  http_answer a;
  EXPECT_TRUE(stays >= 0 && read_answer(stays, &a));
  EXPECT_EQ_I(a.status, 200);
  EXPECT_TRUE(a.body && strstr(a.body, "\"durable\":true"));
  answer_free(&a);
  if (stays >= 0)
    close(stays);
}

/* A port in use is a clear error, not a crash. */
static void test_port_in_use(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_server *s = NULL, *t = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.port = 0;
  EXPECT_OK(ng_http_server_start(&s, &eng, &o));
  if (!s)
    return;
  o.port = ng_http_server_port(s);
  EXPECT_STATUS(ng_http_server_start(&t, &eng, &o), NG_ERR_IO);
  EXPECT_ERR_HAS("cannot listen");
  o.host = "localhost";
  EXPECT_STATUS(ng_http_server_start(&t, &eng, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("numeric");
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

int main(void) {
  RUN_TEST(test_parse_infer);
  RUN_TEST(test_parse_infer_rejects);
  RUN_TEST(test_parse_graph_update);
  RUN_TEST(test_infer_response);
  RUN_TEST(test_server);
  RUN_TEST(test_body_budget);
  RUN_TEST(test_disconnect_cancels);
  RUN_TEST(test_port_in_use);
  RUN_TEST(test_updates_do_not_block);
  RUN_TEST(test_update_disconnect_and_drain);
  return ng_test_summary();
}
