/* The HTTP front against hostile and slow clients (serve/http.c, serve/http_json.c): ids that
 * are not plain integer literals, ambiguous body framing, slow headers and bodies, the
 * per-client connection cap, the slots reserved for health checks, and body lengths declared
 * and not sent. Raw sockets, so that each case is sent byte for byte as a client would.
 *
 * TEST-ONLY FAKE ENGINE: as in test_serve_http.c, the engine functions that http.c calls are
 * defined below (the linker takes them before the library's), so that the server's connection
 * handling is tested apart from the real engine. Waits are bounded generously and assertions
 * are on outcomes (closed or answered, and the metrics counting why), not on timing. */
#include "core_impl.h"
#include "http_impl.h"
#include "ng_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the fake engine (test only): every id below `nodes` is answered, class = id % 4 ---- */

struct ng_engine {
  atomic_llong nodes;
};

void ng_engine_info_get(ng_engine_info *out, const ng_engine *e) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "fake");
  out->nodes = atomic_load(&((ng_engine *)e)->nodes);
  out->feature_dim = 2;
  out->classes = 4;
  out->layers = 2;
  out->layer_dim[0] = 3;
  out->layer_dim[1] = 4;
  out->ready = 1;
}

/* Answers inside the call, through the callback (the HTTP front's asynchronous call). */
static ng_status fake_infer(ng_engine *e, const ng_infer_request *req, ng_infer_result *res) {
  for (int64_t i = 0; i < req->n; i++)
    if (req->node_ids[i] < 0 || req->node_ids[i] >= atomic_load(&e->nodes))
      return ng__err(NG_ERR_INVALID_ARG, "node id %" PRId64 " is unknown", req->node_ids[i]);
  res->n = req->n;
  res->classes = 4;
  res->cls = malloc((size_t)req->n * sizeof *res->cls);
  if (!res->cls)
    return ng__err(NG_ERR_NOMEM, "fake engine: no memory");
  for (int64_t i = 0; i < req->n; i++)
    res->cls[i] = req->node_ids[i] % 4;
  res->batch_nodes = req->n;
  return NG_OK;
}

ng_status ng_engine_submit(ng_engine *e, const ng_infer_request *req, ng_infer_result *res,
                           ng_infer_done_fn done, void *user, ng_infer_ticket *ticket) {
  memset(res, 0, sizeof *res);
  *ticket = 1;
  ng_status st = fake_infer(e, req, res);
  if (st == NG_OK)
    done(user, st, "");
  return st;
}

ng_status ng_engine_cancel(ng_engine *e, ng_infer_ticket ticket) {
  (void)e;
  return ng__err(NG_ERR_NOT_FOUND, "ticket %" PRIu64 ": answered already", ticket);
}

void ng_infer_result_free(ng_infer_result *r) {
  free(r->logits);
  free(r->embedding);
  free(r->cls);
  r->logits = r->embedding = NULL;
  r->cls = NULL;
}

/* As an engine with a log: the server starts its updaters. */
ng_status ng_engine_log_info_get(ng_engine_log_info *out, const ng_engine *e) {
  (void)e;
  *out = (ng_engine_log_info)NG_ENGINE_LOG_INFO_INIT;
  return NG_OK;
}

ng_status ng_engine_apply(ng_engine *e, const ng_graph_update *u, ng_update_result *out) {
  const int64_t nodes = atomic_fetch_add(&e->nodes, u->add_nodes);
  *out = (ng_update_result){
      sizeof *out, nodes, u->add_nodes, u->n_add_edges, u->n_remove_edges, u->n_feature_rows, 1};
  return NG_OK;
}

void ng_engine_stats_get(ng_engine_stats *out, const ng_engine *e) {
  (void)e;
  memset(out, 0, sizeof *out);
}

/* ---- ids are plain integer literals ---- */

#define INFER_IDS(ids, n)                                                                          \
  "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[" #n "],\"data\":[" ids   \
  "]}],\"outputs\":[{\"name\":\"class\"}]}"

static void test_ids_plain_integers(void) {
  static const struct {
    const char *body, *message;
  } bad_infer[] = {
      {INFER_IDS("1.0", 1), "data[0] is not a node id"},
      {INFER_IDS("1e3", 1), "data[0] is not a node id"},
      {INFER_IDS("2, -0", 2), "data[1] is not a node id"},
      {INFER_IDS("3, 4, 1E0", 3), "data[2] is not a node id"},
      {INFER_IDS("5, 10.00", 2), "data[1] is not a node id"},
      {INFER_IDS("7, 1", 1.0), "shape [n] with n >= 1"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad_infer); i++) {
    ng_http_infer r;
    EXPECT_STATUS(ng__parse_infer_request(&r, bad_infer[i].body, strlen(bad_infer[i].body), 2),
                  NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS(bad_infer[i].message);
  }
  /* Plain literals are ids; a string holding digits or -0 elsewhere changes nothing. */
  const char *good = "{\"id\":\"-0 1.0\",\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\","
                     "\"shape\":[4],\"data\":[0, 17, 1000, 9007199254740992]}],"
                     "\"parameters\":{\"x\":[1.5, -0, {\"y\":1e3}],\"seed\":3}}";
  ng_http_infer r;
  EXPECT_OK(ng__parse_infer_request(&r, good, strlen(good), 2));
  EXPECT_EQ_I(r.req.n, 4);
  if (r.req.n == 4) {
    EXPECT_EQ_I(r.ids[1], 17);
    EXPECT_EQ_I(r.ids[2], 1000);
    EXPECT_EQ_I(r.ids[3], 9007199254740992LL);
  }
  EXPECT_EQ_I(r.req.seed, 3);
  ng__http_infer_clear(&r);

  static const struct {
    const char *body, *message;
  } bad_update[] = {
      {"{\"add_edges\":[[1, 2], [1.0, 2]]}", "add_edges[1] is not a pair"},
      {"{\"remove_edges\":[[1, 2e0]]}", "remove_edges[0] is not a pair"},
      {"{\"update_features\":{\"ids\":[4, -0],\"values\":[[1, 2], [3, 4]]}}",
       "update_features.ids[1] is not a node id"},
      {"{\"update_features\":{\"ids\":[1e1],\"values\":[1, 2]}}",
       "update_features.ids[0] is not a node id"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad_update); i++) {
    ng_http_update u;
    EXPECT_STATUS(ng__parse_graph_update(&u, bad_update[i].body, strlen(bad_update[i].body), 2),
                  NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS(bad_update[i].message);
  }
  /* Feature values are floats and may be written any way. */
  const char *update = "{\"add_nodes\":{\"features\":[[1.0, -0]]},\"add_edges\":[[3, 10]],"
                       "\"update_features\":{\"ids\":[2],\"values\":[[1e3, 2.5]]}}";
  ng_http_update u;
  EXPECT_OK(ng__parse_graph_update(&u, update, strlen(update), 2));
  EXPECT_EQ_I(u.u.n_add_edges, 1);
  EXPECT_EQ_I(u.u.n_feature_rows, 1);
  if (u.u.n_feature_rows == 1) {
    EXPECT_EQ_I(u.u.feature_ids[0], 2);
    EXPECT_NEAR(u.u.feature_values[0], 1000.0, 0);
  }
  ng__http_update_clear(&u);
}

/* ---- a raw HTTP client ---- */

typedef struct {
  int status;
  char head[4096];
  char *body;
} http_answer;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  const struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A connection to the server; reads time out after 10 s, so that a server that never answers
 * fails the test instead of hanging it. */
static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const struct timeval tv = {10, 0};
  if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
                  connect(fd, (struct sockaddr *)&a, sizeof a) != 0)) {
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

static bool send_str(int fd, const char *p) {
  return send_all(fd, p, strlen(p));
}

/* Reads one answer (headers, then Content-Length bytes); false when the connection closes or
 * times out first. */
static bool read_answer(int fd, http_answer *a) {
  memset(a, 0, sizeof *a);
  size_t got = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  char *end = NULL;
  while (buf && !end) {
    ssize_t k = got + 1 < cap ? recv(fd, buf + got, cap - got - 1, 0) : -1;
    if (k <= 0) {
      free(buf);
      return false;
    }
    got += (size_t)k;
    buf[got] = 0;
    end = strstr(buf, "\r\n\r\n");
  }
  if (!buf)
    return false;
  const size_t head_len = (size_t)(end - buf) + 4;
  snprintf(a->head, sizeof a->head, "%.*s", (int)head_len, buf);
  sscanf(buf, "HTTP/1.1 %d", &a->status);
  const char *cl = strcasestr(a->head, "content-length:");
  const size_t body_len = cl ? strtoul(cl + 15, NULL, 10) : 0;
  a->body = calloc(1, body_len + 1);
  size_t have = got - head_len < body_len ? got - head_len : body_len;
  if (a->body)
    memcpy(a->body, buf + head_len, have);
  free(buf);
  while (a->body && have < body_len) {
    ssize_t k = recv(fd, a->body + have, body_len - have, 0);
    if (k <= 0)
      break;
    have += (size_t)k;
  }
  return true;
}

static void answer_free(http_answer *a) {
  free(a->body);
  a->body = NULL;
}

/* Sends `request` on `fd` and reads the answer's status (-1: none, the connection closed). The
 * body, when `body` is not NULL, is kept there (free it). */
static int ask(int fd, const char *request, char **body) {
  http_answer a;
  if (fd < 0 || !send_str(fd, request) || !read_answer(fd, &a))
    return -1;
  if (body)
    *body = a.body;
  else
    answer_free(&a);
  return a.status;
}

/* A request on a fresh connection, closed afterwards. */
static int ask_new(int port, const char *request, char **body) {
  const int fd = connect_to(port);
  const int status = ask(fd, request, body);
  if (fd >= 0)
    close(fd);
  return status;
}

#define LIVE "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"

static char *infer_request(const char *ids, int n) {
  char body[256], *req = malloc(512);
  snprintf(body, sizeof body,
           "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[%d],"
           "\"data\":[%s]}],\"outputs\":[{\"name\":\"class\"}]}",
           n, ids);
  if (req)
    snprintf(req, 512,
             "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
  return req;
}

/* Whether /metrics shows every line of `want` within 20 s (the counters of a request move after
 * its answer is sent; connections close asynchronously). */
static bool metrics_show(int port, const char *const *want, size_t n) {
  char *body = NULL;
  const double until = mono_s() + 20;
  for (bool last = false; !last;) {
    last = mono_s() > until;
    body = NULL;
    if (ask_new(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &body) ==
        200) {
      size_t ok = 0;
      while (ok < n && body && strstr(body, want[ok]))
        ok++;
      if (ok == n) {
        free(body);
        return true;
      }
    }
    if (!last)
      free(body);
    sleep_ms(20);
  }
  fprintf(stderr, "last /metrics:\n%s\n", body ? body : "(none)");
  free(body);
  return false;
}

/* Whether the server closed `fd` (end of input or reset) without answering. */
static bool closed_by_server(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 0) != 1)
    return false;
  char c;
  const ssize_t k = recv(fd, &c, 1, MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Sends `text` one byte every 100 ms (repeating it) until the server closes the connection or
 * `limit_s` passes; true when the server closed it. */
static bool trickle_until_closed(int fd, const char *text, double limit_s) {
  const size_t n = strlen(text);
  for (int i = 0; i < (int)(limit_s * 10); i++) {
    if (closed_by_server(fd) || !send_all(fd, text + (size_t)i % n, 1))
      return true;
    sleep_ms(100);
  }
  return closed_by_server(fd);
}

static ng_http_server *start(ng_engine *eng, ng_http_opts *o) {
  ng_http_server *s = NULL;
  o->port = 0;
  EXPECT_OK(ng_http_server_start(&s, eng, o));
  return s;
}

/* ---- slow clients ---- */

/* Slowloris: headers trickled a byte at a time reset libmicrohttpd's idle timeout with every
 * byte, so only the header deadline closes the connection, on a first request and on the next
 * request of a keep-alive connection. A client that sends its headers in time is served. */
static void test_header_deadline(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.header_timeout_s = 1.0;
  ng_http_server *s = start(&eng, &o);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  int fd = connect_to(port);
  EXPECT_TRUE(fd >= 0 && send_str(fd, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_TRUE(trickle_until_closed(fd, "X-Slow: a\r\n", 15));
  close(fd);
  /* The same after a first request answered on the connection. */
  fd = connect_to(port);
  EXPECT_EQ_I(ask(fd, LIVE, NULL), 200);
  EXPECT_TRUE(fd >= 0 && send_str(fd, "GET /v2/health/ready HTTP/1.1\r\n"));
  EXPECT_TRUE(trickle_until_closed(fd, "X-Slow: a\r\n", 15));
  close(fd);
  EXPECT_EQ_I(ask_new(port, LIVE, NULL), 200);
  static const char *const want[] = {"neargnn_http_slow_closed_total{phase=\"headers\"} 2",
                                     "neargnn_http_slow_closed_total{phase=\"body\"} 0"};
  EXPECT_TRUE(metrics_show(port, want, NG_TEST_LEN(want)));
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* A body that stops arriving at the minimum rate is closed; one that keeps the rate across
 * several windows is answered. */
static void test_body_rate(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.min_body_rate = 100;
  o.body_window_s = 1.0;
  ng_http_server *s = start(&eng, &o);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  int fd = connect_to(port);
  EXPECT_TRUE(fd >= 0 && send_str(fd, "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n"
                                      "Content-Length: 1000\r\n\r\n"));
  EXPECT_TRUE(trickle_until_closed(fd, "          ", 15)); /* 10 bytes a second */
  close(fd);
  /* 2000 bytes, 100 every 100 ms: ten times the minimum, over two windows at least. */
  char *req = infer_request("1", 1);
  char *head = req ? strstr(req, "\r\n\r\n") : NULL;
  EXPECT_TRUE(head != NULL);
  if (head) {
    const char *json = head + 4;
    char *body = malloc(2000);
    memset(body, ' ', 2000);
    memcpy(body, json, strlen(json));
    char h[256];
    snprintf(h, sizeof h,
             "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n");
    fd = connect_to(port);
    bool sent = fd >= 0 && send_str(fd, h);
    for (int i = 0; i < 20 && sent; i++, sleep_ms(100))
      sent = send_all(fd, body + 100 * i, 100);
    EXPECT_TRUE(sent);
    http_answer a;
    EXPECT_TRUE(read_answer(fd, &a));
    EXPECT_EQ_I(a.status, 200);
    answer_free(&a);
    close(fd);
    free(body);
  }
  free(req);
  static const char *const want[] = {"neargnn_http_slow_closed_total{phase=\"body\"} 1",
                                     "neargnn_http_slow_closed_total{phase=\"headers\"} 0"};
  EXPECT_TRUE(metrics_show(port, want, NG_TEST_LEN(want)));
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* ---- connection slots ---- */

/* One address holds at most max_connections_per_client connections: the next is closed
 * unanswered, and a slot freed is taken again. */
static void test_per_client_cap(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.max_connections_per_client = 2;
  ng_http_server *s = start(&eng, &o);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  int a = connect_to(port), b = connect_to(port);
  EXPECT_EQ_I(ask(a, LIVE, NULL), 200);
  EXPECT_EQ_I(ask(b, LIVE, NULL), 200);
  EXPECT_EQ_I(ask_new(port, LIVE, NULL), -1);
  close(a);
  int status = -1;
  for (const double until = mono_s() + 20; status != 200 && mono_s() < until; sleep_ms(20))
    status = ask_new(port, LIVE, NULL);
  EXPECT_EQ_I(status, 200);
  close(b);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* With every ordinary slot held, health checks and /metrics are answered on the reserved slots
 * and other requests there get 503 with Connection: close; a freed ordinary slot serves again. */
static void test_health_slots(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.max_connections = 2;
  o.health_connections = 2;
  o.max_connections_per_client = 0;
  ng_http_server *s = start(&eng, &o);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  int a = connect_to(port), b = connect_to(port);
  EXPECT_EQ_I(ask(a, LIVE, NULL), 200);
  EXPECT_EQ_I(ask(b, LIVE, NULL), 200);
  int c = connect_to(port);
  EXPECT_EQ_I(ask(c, "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n", NULL), 200);
  char *metrics = NULL;
  EXPECT_EQ_I(ask(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &metrics), 200);
  EXPECT_TRUE(metrics && strstr(metrics, "neargnn_http_connections 3"));
  free(metrics);
  char *req = infer_request("1", 1);
  int d = connect_to(port);
  http_answer ans;
  EXPECT_TRUE(d >= 0 && req && send_str(d, req) && read_answer(d, &ans));
  EXPECT_EQ_I(ans.status, 503);
  EXPECT_TRUE(strcasestr(ans.head, "Connection: close") != NULL);
  EXPECT_TRUE(ans.body && strstr(ans.body, "health checks"));
  answer_free(&ans);
  close(d);
  /* Counted when its answer was sent, which the client may see first. */
  bool counted = false;
  for (const double until = mono_s() + 20; !counted && mono_s() < until; sleep_ms(20)) {
    metrics = NULL;
    counted = ask(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &metrics) == 200 && metrics &&
              strstr(metrics, "neargnn_http_reserved_refused_total 1");
    free(metrics);
  }
  EXPECT_TRUE(counted);
  /* A freed ordinary slot serves again, once the server has seen the close (until then a new
   * connection takes a reserved slot and gets 503). */
  close(a);
  int status = -1;
  for (const double until = mono_s() + 20; status != 200 && mono_s() < until; sleep_ms(20))
    status = ask_new(port, req, NULL);
  EXPECT_EQ_I(status, 200);
  free(req);
  close(b);
  close(c);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* ---- bodies ---- */

/* Bodies declared at the limit and not sent hold none of the budget: a real POST is answered.
 * A declared length over the limit is still refused at once. */
static void test_declared_bodies(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  o.max_body_bytes = 64 * 1024;
  o.max_buffered_bytes = 128 * 1024;
  o.min_body_rate = 0;
  ng_http_server *s = start(&eng, &o);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  const char *claim = "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n"
                      "Content-Length: 65536\r\n\r\n";
  int held[2];
  for (int i = 0; i < 2; i++) {
    held[i] = connect_to(port);
    EXPECT_TRUE(held[i] >= 0 && send_str(held[i], claim));
  }
  /* Both claims are being handled (in flight), with the /metrics request itself. */
  static const char *const seen[] = {"neargnn_http_in_flight 3"};
  EXPECT_TRUE(metrics_show(port, seen, 1));
  char *req = infer_request("1, 2", 2), *body = NULL;
  EXPECT_EQ_I(ask_new(port, req, &body), 200);
  EXPECT_TRUE(body && strstr(body, "\"data\":[1,2]"));
  free(body);
  free(req);
  EXPECT_EQ_I(ask_new(port,
                      "POST /v2/models/fake/graph HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n"
                      "{\"add_edges\":[[1, 2], [2, 1]]}",
                      NULL),
              200);
  EXPECT_EQ_I(ask_new(port,
                      "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n"
                      "Content-Length: 65537\r\n\r\n",
                      NULL),
              413);
  for (int i = 0; i < 2; i++)
    close(held[i]);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

/* A body's length must be unambiguous: conflicting Content-Length headers, or Transfer-Encoding
 * with Content-Length, get 400 and the connection closes; a repeated equal length is one length.
 * An id written as 1.0 gets 400 over the wire too. */
static void test_framing(void) {
  ng_engine eng = {.nodes = 10};
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  ng_http_server *s = start(&eng, &o);
  if (!s)
    return;
  const int port = ng_http_server_port(s);
  const char *json = "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[1],"
                     "\"data\":[3]}]}";
  const size_t n = strlen(json);
  char req[512];
  snprintf(req, sizeof req,
           "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
           "Content-Length: %zu\r\n\r\n%s",
           n, n + 7, json);
  char *body = NULL;
  int fd = connect_to(port);
  http_answer a;
  EXPECT_TRUE(fd >= 0 && send_str(fd, req) && read_answer(fd, &a));
  EXPECT_EQ_I(a.status, 400);
  EXPECT_TRUE(a.body && strstr(a.body, "conflicting Content-Length"));
  EXPECT_TRUE(strcasestr(a.head, "Connection: close") != NULL);
  answer_free(&a);
  close(fd);
  snprintf(req, sizeof req,
           "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
           "content-length: %zu\r\n\r\n%s",
           n, n, json);
  EXPECT_EQ_I(ask_new(port, req, NULL), 200);
  snprintf(req, sizeof req,
           "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
           "Content-Length: %zu\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
           n, n, json);
  EXPECT_EQ_I(ask_new(port, req, &body), 400);
  EXPECT_TRUE(body && strstr(body, "Transfer-Encoding"));
  free(body);
  body = NULL;
  char *ids = infer_request("2, 1.0", 2);
  EXPECT_EQ_I(ask_new(port, ids, &body), 400);
  EXPECT_TRUE(body && strstr(body, "data[1] is not a node id"));
  free(body);
  free(ids);
  EXPECT_EQ_I(ng_http_server_stop(s), 0);
}

int main(void) {
  RUN_TEST(test_ids_plain_integers);
  RUN_TEST(test_header_deadline);
  RUN_TEST(test_body_rate);
  RUN_TEST(test_per_client_cap);
  RUN_TEST(test_health_slots);
  RUN_TEST(test_declared_bodies);
  RUN_TEST(test_framing);
  return ng_test_summary();
}
