/* The HTTP front of the serving mode (http_impl.h, docs/serving.md): KServe v2 endpoints on
 * libmicrohttpd, a pool of event-loop threads serving every connection (keep-alive). An infer
 * request's body is parsed and submitted to the engine (ng_engine_submit), and its connection
 * is suspended (MHD_suspend_connection) until the engine's callback resumes it with the answer,
 * so that a waiting request holds no thread; the engine merges the requests of concurrent
 * connections into device batches. A client that goes away while its request waits cancels it:
 * libmicrohttpd does not watch a suspended connection, so the sweeper thread (below) looks for
 * the end of its input and calls ng_engine_cancel. A graph update waits the same way: its parsed
 * form goes to a pool of updater threads (below) that call ng_engine_apply, which returns once
 * the update is durable, and its connection is suspended until they resume it with the answer,
 * so that no event-loop thread waits for an fsync. Bodies are bounded twice: one body
 * may not pass max_body_bytes (413, unread), and the bodies held at once may not pass
 * max_buffered_bytes (503, charged as the bytes arrive), so that memory stays bounded whatever
 * the load.
 *
 * Slow clients cannot hold the server: libmicrohttpd's own timeout is an idle one, which every
 * byte resets, so a sweeper thread closes connections whose headers are not complete within
 * header_timeout_s of their accept or previous answer, and bodies that stop arriving at
 * min_body_rate. Connections are capped per client address, and health_connections slots beyond
 * max_connections answer only health checks and /metrics. */
#include "core_impl.h"
#include "http_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* What each request is, for routing and for the metrics. */
typedef enum {
  EP_LIVE,
  EP_READY,
  EP_SERVER_META,
  EP_MODEL_META,
  EP_MODEL_READY,
  EP_INFER,
  EP_GRAPH,
  EP_METRICS,
  EP_OTHER,
  EP_COUNT
} endpoint;
static const char *const EP_NAMES[EP_COUNT] = {"health_live",    "health_ready", "server_metadata",
                                               "model_metadata", "model_ready",  "infer",
                                               "graph",          "metrics",      "other"};

/* The most event-loop threads of the server (half the cores, at least two). */
#define HTTP_MAX_THREADS 8
/* The updater threads (a graph update waits in one until it is durable): 16 per event-loop
 * thread, 64 to 128. The engine's group commit puts every update waiting at once under one
 * fdatasync, so the updates acknowledged per second are about the updaters waiting at once over
 * the time of one group's commit (its fsync and each update's snapshot: tens of ms under load,
 * eval/results). A waiting thread costs its stack's address space, not its pages. */
#define HTTP_MIN_UPDATERS 64
#define HTTP_MAX_UPDATERS 128

int ng__http_test_threads = 0;

/* The status codes the server answers with; anything else is counted as "other". */
static const unsigned CODES[] = {200, 400, 404, 405, 413, 500, 501, 503};
#define N_CODES (NG_ARRAY_LEN(CODES) + 1)

/* Latency histogram bounds in seconds (Prometheus `le`), and batch size bounds in nodes. */
static const double LAT_BOUNDS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                    0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};
#define N_LAT (NG_ARRAY_LEN(LAT_BOUNDS) + 1)
static const double BATCH_BOUNDS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
#define N_BATCH (NG_ARRAY_LEN(BATCH_BOUNDS) + 1)

struct request;

typedef struct {
  _Atomic int64_t bucket[N_LAT]; /* not cumulative: the writer adds to one */
  _Atomic int64_t sum_ns, count;
} histogram;

/* Where a connection is, for the sweeper: waiting for a request's headers (since its accept or
 * its previous answer), receiving a body (the sweeper measures its rate window by window), busy
 * with a request whose body is complete (computing or sending the answer: no deadline), or
 * suspended while the engine has its request (the sweeper cancels it if the client goes away). */
typedef enum { PH_HEADERS, PH_BODY, PH_BUSY, PH_WAIT } conn_phase;

/* One connection from accept to close: libmicrohttpd's socket context. */
typedef struct conn {
  struct conn *prev, *next; /* the server's list */
  MHD_socket fd;
  bool reserved; /* accepted with every ordinary slot taken: health checks and /metrics only */
  bool shut;     /* the sweeper shut it down; it closes through libmicrohttpd */
  conn_phase phase;
  ng_infer_ticket ticket;       /* PH_WAIT: the engine's name of its request (0: cancelled) */
  double since;                 /* start of the header wait, or of the body's rate window */
  _Atomic int64_t window_bytes; /* body bytes received since `since` (PH_BODY) */
} conn;

struct ng_http_server {
  struct MHD_Daemon *daemon;
  ng_engine *engine;
  ng_http_opts o;
  int port;
  char name[64];
  int32_t layers;
  int64_t feature_dim;
  atomic_int draining;
  _Atomic int64_t in_flight, buffered;
  _Atomic int64_t suspended; /* connections suspended while the engine has their request */
  _Atomic int64_t cancelled; /* infer requests cancelled because their client went away */
  _Atomic int64_t requests[EP_COUNT][N_CODES];
  histogram latency[EP_COUNT];
  histogram infer_path[2]; /* successful infers: ordinary, hub */
  _Atomic int64_t batch_bucket[N_BATCH];
  _Atomic int64_t batch_sum, batch_count;
  _Atomic int64_t connections;      /* open now */
  _Atomic int64_t slow_closed[2];   /* closed by the sweeper: headers, body */
  _Atomic int64_t reserved_refused; /* ordinary requests refused on a reserved slot */
  /* The connections, under `mu`: libmicrohttpd's callbacks add and remove them, the request
   * threads move their phase, the sweeper reads them. A connection leaves the list before
   * libmicrohttpd closes its socket, so the sweeper never shuts down a reused descriptor. */
  pthread_mutex_t mu;
  pthread_cond_t wake; /* stops the sweeper */
  conn *conns;
  int ordinary; /* connections in ordinary slots */
  bool stop, sweeper_started;
  pthread_t sweeper;
  /* The updates waiting for an updater thread (a FIFO through request.qnext), under upd_mu;
   * upd_cv wakes the updaters (an update queued, or the stop). */
  pthread_mutex_t upd_mu;
  pthread_cond_t upd_cv;
  struct request *upd_head, *upd_tail;
  bool upd_stop;
  int n_updaters;
  pthread_t updaters[HTTP_MAX_UPDATERS];
};

/* One request between its first and its last call of the access handler. */
typedef struct request {
  endpoint ep;
  conn *k; /* its connection (NULL only when out of memory at accept) */
  double t0;
  char *body;
  size_t len, cap;
  int64_t reserved; /* bytes counted in the server's `buffered` */
  int64_t declared; /* the Content-Length (0: none, or chunked) */
  int64_t dropped;  /* body bytes read and dropped (over the limit, or not wanted) */
  bool too_large, overloaded, answered;
  bool close;                /* answer with Connection: close (the framing is not trusted) */
  unsigned route_code;       /* 404 or 405 from routing, else 0 */
  const char *route_message; /* static text */
  unsigned code;             /* the status answered */
  int hub;                   /* infer: -1 not known, 0 ordinary, 1 hub */
  /* An infer request submitted to the engine: its parsed form and its result are the engine's
   * until the callback (infer_done), which may run on any thread, before the handler has
   * suspended the connection included; `mu` orders the two. */
  ng_http_server *s;
  struct MHD_Connection *c;
  bool submitted;
  ng_http_infer in;
  ng_infer_result res;
  pthread_mutex_t mu;
  bool engine_done; /* the callback ran (under mu) */
  bool suspended;   /* the handler suspended the connection and the callback has not resumed it */
  ng_status st;     /* the engine's answer, and its message */
  char msg[1024];
  /* A graph update handed to the updaters (queued): its parsed form, and what ng_engine_apply
   * answered (written by the updater before infer_done resumes the connection). */
  bool queued;
  struct request *qnext;
  ng_http_update up;
  ng_update_result ures;
  int64_t unodes;
} request;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void observe(histogram *h, const double *bounds, size_t n_bounds, double v,
                    double scale_to_ns) {
  size_t i = 0;
  while (i < n_bounds && v > bounds[i])
    i++;
  atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_ns, (int64_t)(v * scale_to_ns), memory_order_relaxed);
  atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

/* Reserves `bytes` of the body budget; false when the bodies held at once would pass it. */
static bool reserve(ng_http_server *s, request *r, int64_t bytes) {
  int64_t cur = atomic_load(&s->buffered);
  do {
    if (cur + bytes > s->o.max_buffered_bytes)
      return false;
  } while (!atomic_compare_exchange_weak(&s->buffered, &cur, cur + bytes));
  r->reserved += bytes;
  return true;
}

/* Moves a request's connection to `ph`, starting its clock (a new header wait, or the body's
 * first rate window); `ticket` names the engine's request in PH_WAIT. */
static void set_phase_ticket(ng_http_server *s, conn *k, conn_phase ph, ng_infer_ticket ticket) {
  if (!k)
    return;
  pthread_mutex_lock(&s->mu);
  k->phase = ph;
  k->ticket = ticket;
  k->since = now_s();
  atomic_store(&k->window_bytes, 0);
  pthread_mutex_unlock(&s->mu);
}

static void set_phase(ng_http_server *s, conn *k, conn_phase ph) {
  set_phase_ticket(s, k, ph, 0);
}

static void release(ng_http_server *s, request *r) {
  atomic_fetch_sub(&s->buffered, r->reserved);
  r->reserved = 0;
  free(r->body);
  r->body = NULL;
  r->len = r->cap = 0;
}

/* Queues an answer; `body` (malloc'd) is taken. A NULL body (out of memory) becomes a 500. */
static enum MHD_Result reply(ng_http_server *s, struct MHD_Connection *c, request *r, unsigned code,
                             char *body, size_t len, const char *type) {
  if (!body) {
    static const char OOM[] = "{\"error\":\"out of memory\"}";
    code = MHD_HTTP_INTERNAL_SERVER_ERROR;
    body = strdup(OOM);
    len = body ? sizeof OOM - 1 : 0;
    type = "application/json";
  }
  struct MHD_Response *resp =
      body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
           : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == MHD_HTTP_SERVICE_UNAVAILABLE) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", s->o.retry_after_s);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
  }
  /* While draining, the connection closes after this answer so that the client reconnects to a
   * server that is up. */
  if (atomic_load(&s->draining) || r->close)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ret = MHD_queue_response(c, code, resp);
  MHD_destroy_response(resp);
  r->code = code;
  r->answered = true;
  return ret;
}

static enum MHD_Result reply_error(ng_http_server *s, struct MHD_Connection *c, request *r,
                                   unsigned code, const char *message) {
  size_t len = 0;
  char *body = ng__error_json(&len, message);
  return reply(s, c, r, code, body, len, "application/json");
}

static enum MHD_Result reply_json(ng_http_server *s, struct MHD_Connection *c, request *r,
                                  char *body, size_t len) {
  return reply(s, c, r, MHD_HTTP_OK, body, len, "application/json");
}

/* The answer to an engine error: bad input 400, overload or draining 503, updates without a
 * log 501, anything else 500; the message is the engine's. */
static unsigned code_of(ng_status st) {
  switch (st) {
  case NG_ERR_INVALID_ARG:
  case NG_ERR_NOT_FOUND:
    return MHD_HTTP_BAD_REQUEST;
  case NG_ERR_STATE:
    return MHD_HTTP_SERVICE_UNAVAILABLE;
  case NG_ERR_UNSUPPORTED:
    return MHD_HTTP_NOT_IMPLEMENTED;
  default:
    return MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
}

static enum MHD_Result engine_error_msg(ng_http_server *s, struct MHD_Connection *c, request *r,
                                        ng_status st, const char *detail) {
  char msg[1200];
  snprintf(msg, sizeof msg, "%s%s%s", ng_status_str(st), *detail ? ": " : "", detail);
  return reply_error(s, c, r, code_of(st), msg);
}

static enum MHD_Result engine_error(ng_http_server *s, struct MHD_Connection *c, request *r,
                                    ng_status st) {
  return engine_error_msg(s, c, r, st, ng_last_error());
}

/* The engine's answer to a submitted request (ng_infer_done_fn), on an engine thread or the
 * sweeper's: it resumes the connection if the handler suspended it, and libmicrohttpd then calls
 * the handler again, which answers. Nothing of `r` is touched after the resume: the connection's
 * thread may answer and free it at once. */
static void infer_done(void *user, ng_status st, const char *message) {
  request *r = user;
  ng_http_server *s = r->s;
  pthread_mutex_lock(&r->mu);
  r->st = st;
  snprintf(r->msg, sizeof r->msg, "%s", message);
  r->engine_done = true;
  const bool resume = r->suspended;
  r->suspended = false;
  if (resume)
    MHD_resume_connection(r->c);
  pthread_mutex_unlock(&r->mu);
  if (resume)
    atomic_fetch_sub(&s->suspended, 1);
}

/* An infer request: its first call parses and submits it, then suspends the connection until the
 * engine answers (unless it already has); the call after the resume answers. A request cancelled
 * because its client went away closes the connection without an answer. */
static enum MHD_Result do_infer(ng_http_server *s, struct MHD_Connection *c, request *r) {
  if (!r->submitted) {
    ng_status st = ng__parse_infer_request(&r->in, r->body, r->len, s->layers);
    release(s, r); /* the body is parsed: its memory goes back to the budget before the wait */
    if (st != NG_OK)
      return reply_error(s, c, r, MHD_HTTP_BAD_REQUEST, ng_last_error());
    r->s = s;
    r->c = c;
    ng_infer_ticket ticket = 0;
    st = ng_engine_submit(s->engine, &r->in.req, &r->res, infer_done, r, &ticket);
    if (st != NG_OK) /* refused at admission: answered at once */
      return engine_error(s, c, r, st);
    r->submitted = true;
    pthread_mutex_lock(&r->mu);
    const bool wait = !r->engine_done;
    if (wait) {
      MHD_suspend_connection(c);
      r->suspended = true;
      atomic_fetch_add(&s->suspended, 1);
    }
    pthread_mutex_unlock(&r->mu);
    if (wait) {
      /* The resume is handled by this thread once the handler returns, so the connection is in
       * PH_WAIT before its answer moves it on. */
      set_phase_ticket(s, r->k, PH_WAIT, ticket);
      return MHD_YES;
    }
  }
  pthread_mutex_lock(&r->mu);
  const ng_status st = r->st;
  pthread_mutex_unlock(&r->mu);
  if (st == NG_ERR_INTERRUPTED)
    return MHD_NO; /* cancelled: the client is gone */
  if (st != NG_OK)
    return engine_error_msg(s, c, r, st, r->msg);
  const ng_infer_result *res = &r->res;
  r->hub = res->hub ? 1 : 0;
  size_t i = 0;
  while (i < NG_ARRAY_LEN(BATCH_BOUNDS) && (double)res->batch_nodes > BATCH_BOUNDS[i])
    i++;
  atomic_fetch_add_explicit(&s->batch_bucket[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->batch_sum, res->batch_nodes, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->batch_count, 1, memory_order_relaxed);
  size_t len = 0;
  char *body = ng__infer_response_json(&len, s->name, r->in.id, r->in.req.outputs, res);
  return reply_json(s, c, r, body, len);
}

/* Applies the queued graph updates, one at a time per thread, until the server stops with the
 * queue empty. The answer is handed over as an infer's (infer_done resumes the connection);
 * nothing of `r` is touched after that. A client that went away meanwhile gets no answer, but its
 * update is applied all the same (it may already be in the log). */
static void *updater(void *arg) {
  ng_http_server *s = arg;
  pthread_mutex_lock(&s->upd_mu);
  for (;;) {
    while (!s->upd_head && !s->upd_stop)
      pthread_cond_wait(&s->upd_cv, &s->upd_mu);
    request *r = s->upd_head;
    if (!r)
      break; /* stopping, and nothing is left */
    s->upd_head = r->qnext;
    if (!s->upd_head)
      s->upd_tail = NULL;
    pthread_mutex_unlock(&s->upd_mu);
    r->ures = (ng_update_result)NG_UPDATE_RESULT_INIT;
    const ng_status st = ng_engine_apply(s->engine, &r->up.u, &r->ures);
    if (st == NG_OK) {
      ng_engine_info info;
      ng_engine_info_get(&info, s->engine);
      r->unodes = info.nodes;
    }
    infer_done(r, st, st == NG_OK ? "" : ng_last_error());
    pthread_mutex_lock(&s->upd_mu);
  }
  pthread_mutex_unlock(&s->upd_mu);
  return NULL;
}

/* Stops the updaters once the queue is empty (they apply what is left first). */
static void stop_updaters(ng_http_server *s) {
  pthread_mutex_lock(&s->upd_mu);
  s->upd_stop = true;
  pthread_cond_broadcast(&s->upd_cv);
  pthread_mutex_unlock(&s->upd_mu);
  for (int i = 0; i < s->n_updaters; i++)
    pthread_join(s->updaters[i], NULL);
  s->n_updaters = 0;
}

/* A graph update: its first call parses it, suspends the connection and queues it for the
 * updaters; the call after the resume answers. Its body's bytes stay charged to the budget until
 * the answer, so that the updates waiting at once are bounded as bodies are. */
static enum MHD_Result do_graph(ng_http_server *s, struct MHD_Connection *c, request *r) {
  if (!r->queued) {
    const ng_status st = ng__parse_graph_update(&r->up, r->body, r->len, s->feature_dim);
    free(r->body); /* parsed: the text goes, its charge stays until the answer */
    r->body = NULL;
    r->len = r->cap = 0;
    if (st != NG_OK) {
      release(s, r);
      return reply_error(s, c, r, MHD_HTTP_BAD_REQUEST, ng_last_error());
    }
    if (s->n_updaters == 0) {
      /* An engine without a log: ng_engine_apply refuses at once, without waiting, and says why. */
      r->ures = (ng_update_result)NG_UPDATE_RESULT_INIT;
      const ng_status ast = ng_engine_apply(s->engine, &r->up.u, &r->ures);
      release(s, r);
      return engine_error_msg(s, c, r, ast, ng_last_error());
    }
    r->s = s;
    r->c = c;
    r->queued = true;
    pthread_mutex_lock(&r->mu);
    MHD_suspend_connection(c);
    r->suspended = true;
    atomic_fetch_add(&s->suspended, 1);
    pthread_mutex_unlock(&r->mu);
    /* In PH_WAIT with no ticket: the sweeper leaves it alone (an update is not cancelled). The
     * resume is handled by this thread once the handler returns. */
    set_phase(s, r->k, PH_WAIT);
    pthread_mutex_lock(&s->upd_mu);
    if (s->upd_tail)
      s->upd_tail->qnext = r;
    else
      s->upd_head = r;
    s->upd_tail = r;
    pthread_cond_signal(&s->upd_cv);
    pthread_mutex_unlock(&s->upd_mu);
    return MHD_YES;
  }
  release(s, r);
  pthread_mutex_lock(&r->mu);
  const ng_status st = r->st;
  pthread_mutex_unlock(&r->mu);
  if (st != NG_OK)
    return engine_error_msg(s, c, r, st, r->msg);
  size_t len = 0;
  char *body = ng__update_response_json(&len, s->name, r->up.id, &r->ures, r->unodes);
  return reply_json(s, c, r, body, len);
}

static enum MHD_Result do_get(ng_http_server *s, struct MHD_Connection *c, request *r) {
  ng_engine_info info;
  switch (r->ep) {
  case EP_LIVE:
    return reply_json(s, c, r, strdup("{\"live\":true}"), 13);
  case EP_READY:
  case EP_MODEL_READY: {
    ng_engine_info_get(&info, s->engine);
    const bool ready = info.ready && !atomic_load(&s->draining);
    char *body = strdup(ready ? "{\"ready\":true}" : "{\"ready\":false}");
    return reply(s, c, r, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, body,
                 body ? strlen(body) : 0, "application/json");
  }
  case EP_SERVER_META: {
    char buf[256];
    int n = snprintf(buf, sizeof buf,
                     "{\"name\":\"neargnn\",\"version\":\"%s\",\"extensions\":[\"graph_update\","
                     "\"metrics\"]}",
                     ng_version());
    return reply_json(s, c, r, strdup(buf), (size_t)n);
  }
  case EP_MODEL_META: {
    ng_engine_info_get(&info, s->engine);
    size_t len = 0;
    char *body = ng__model_metadata_json(&len, &info);
    return reply_json(s, c, r, body, len);
  }
  case EP_METRICS: {
    size_t len = 0;
    char *body = ng__http_metrics_text(&len, s);
    return reply(s, c, r, MHD_HTTP_OK, body, len, "text/plain; version=0.0.4; charset=utf-8");
  }
  default:
    return reply_error(s, c, r, MHD_HTTP_NOT_FOUND, "no such endpoint");
  }
}

/* Maps method and path to an endpoint; *code is 0, or 404 / 405 with *message set. */
static endpoint route(const ng_http_server *s, const char *method, const char *url, unsigned *code,
                      const char **message) {
  const bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
  const bool post = strcmp(method, "POST") == 0;
  endpoint ep = EP_OTHER;
  bool wants_post = false;
  static const char MODELS[] = "/v2/models/";
  *code = 0;
  if (strcmp(url, "/v2/health/live") == 0) {
    ep = EP_LIVE;
  } else if (strcmp(url, "/v2/health/ready") == 0) {
    ep = EP_READY;
  } else if (strcmp(url, "/v2") == 0 || strcmp(url, "/v2/") == 0) {
    ep = EP_SERVER_META;
  } else if (strcmp(url, "/metrics") == 0) {
    ep = EP_METRICS;
  } else if (strncmp(url, MODELS, sizeof MODELS - 1) == 0) {
    const char *name = url + sizeof MODELS - 1;
    const size_t nl = strlen(s->name);
    const char *rest = name + nl;
    if (strncmp(name, s->name, nl) != 0 || (*rest && *rest != '/')) {
      *code = MHD_HTTP_NOT_FOUND;
      *message = "unknown model; GET /v2/models/NAME with the name the server was started with";
      return EP_OTHER;
    }
    if (!*rest) {
      ep = EP_MODEL_META;
    } else if (strcmp(rest, "/ready") == 0) {
      ep = EP_MODEL_READY;
    } else if (strcmp(rest, "/infer") == 0) {
      ep = EP_INFER;
      wants_post = true;
    } else if (strcmp(rest, "/graph") == 0) {
      ep = EP_GRAPH;
      wants_post = true;
    }
  }
  if (ep == EP_OTHER) {
    *code = MHD_HTTP_NOT_FOUND;
    *message = "no such endpoint (see docs/serving.md)";
  } else if (wants_post ? !post : !get) {
    *code = MHD_HTTP_METHOD_NOT_ALLOWED;
    *message = wants_post ? "this endpoint takes POST" : "this endpoint takes GET";
  }
  return ep;
}

/* The answer to a body over the limit. */
static enum MHD_Result too_large(ng_http_server *s, struct MHD_Connection *c, request *r) {
  char msg[128];
  snprintf(msg, sizeof msg, "request body over the limit of %" PRId64 " bytes (serve --max-body)",
           s->o.max_body_bytes);
  return reply_error(s, c, r, MHD_HTTP_CONTENT_TOO_LARGE, msg);
}

/* What a reserved slot answers: liveness, readiness and the metrics, so that an orchestrator
 * and a scraper see the server while ordinary connections are exhausted. */
static bool is_health(endpoint ep) {
  return ep == EP_LIVE || ep == EP_READY || ep == EP_MODEL_READY || ep == EP_METRICS;
}

typedef struct {
  int content_lengths;
  const char *first; /* the first Content-Length's value */
  bool differ, chunked;
} framing;

static enum MHD_Result scan_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
  (void)kind;
  framing *f = cls;
  if (key && strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
    if (f->content_lengths++ == 0)
      f->first = value;
    else if (!f->first || !value || strcmp(f->first, value) != 0)
      f->differ = true;
  } else if (key && strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    f->chunked = true;
  }
  return MHD_YES;
}

/* The request's body length must be unambiguous (RFC 9112 6.3): libmicrohttpd reads the first of
 * several Content-Length headers and prefers Transfer-Encoding to Content-Length, while a proxy in
 * front may read another, and then the two disagree on where the next request starts. NULL when
 * the framing is sound, else the 400's message. */
static const char *framing_error(struct MHD_Connection *c) {
  framing f = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, scan_framing, &f);
  if (f.differ)
    return "conflicting Content-Length headers; send one";
  if (f.chunked && f.content_lengths)
    return "both Transfer-Encoding and Content-Length; send one of them";
  return NULL;
}

/* Only the POST endpoints keep their body; any other request's body is dropped as it comes. */
static bool takes_body(const request *r) {
  return !r->route_code && (r->ep == EP_INFER || r->ep == EP_GRAPH);
}

/* The first call of a request, with its headers: what can be answered before its body. Such an
 * early answer makes libmicrohttpd discard the body and close the connection after it. Everything
 * else is answered once the request is complete: libmicrohttpd keeps a connection alive only
 * after an answer to a whole request. */
static enum MHD_Result first_call(ng_http_server *s, struct MHD_Connection *c, request *r) {
  if (!r->k) {
    r->close = true;
    return reply(s, c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, 0, NULL); /* the OOM answer */
  }
  if (r->k->reserved && !is_health(r->ep)) {
    atomic_fetch_add_explicit(&s->reserved_refused, 1, memory_order_relaxed);
    r->close = true;
    return reply_error(s, c, r, MHD_HTTP_SERVICE_UNAVAILABLE,
                       "every connection slot for ordinary requests is taken (serve "
                       "--max-connections); the reserved ones answer health checks and /metrics "
                       "only; retry later");
  }
  const char *bad = framing_error(c);
  if (bad) {
    r->close = true;
    return reply_error(s, c, r, MHD_HTTP_BAD_REQUEST, bad);
  }
  /* A declared length over the limit is refused before a byte of the body is read. */
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  const long long declared = cl ? strtoll(cl, NULL, 10) : 0;
  if (declared > s->o.max_body_bytes) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "request body of %lld bytes is over the limit of %" PRId64 " bytes (serve --max-body)",
             declared, s->o.max_body_bytes);
    return reply_error(s, c, r, MHD_HTTP_CONTENT_TOO_LARGE, msg);
  }
  r->declared = declared > 0 ? (int64_t)declared : 0;
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)version;
  ng_http_server *s = cls;
  request *r = *con_cls;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r)
      return MHD_NO;
    r->t0 = now_s();
    r->hub = -1;
    pthread_mutex_init(&r->mu, NULL);
    *con_cls = r;
    atomic_fetch_add(&s->in_flight, 1);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->k = ci ? ci->socket_context : NULL;
    r->ep = route(s, method, url, &r->route_code, &r->route_message);
    const enum MHD_Result ret = first_call(s, c, r);
    /* An early answer has its body discarded by libmicrohttpd: the body's clock stops. */
    set_phase(s, r->k, r->answered ? PH_BUSY : PH_BODY);
    return ret;
  }
  if (*upload_data_size && r->k)
    atomic_fetch_add_explicit(&r->k->window_bytes, (int64_t)*upload_data_size,
                              memory_order_relaxed);
  if (r->answered) { /* an early answer is queued: the rest of the body is dropped */
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (*upload_data_size) {
    const size_t n = *upload_data_size;
    *upload_data_size = 0;
    /* Dropped as it comes, never kept. libmicrohttpd cannot answer in the middle of a body,
     * so a chunked body over the limit gets its 413 at its end; one that goes on past twice
     * the limit has its connection closed without an answer. */
    if (r->too_large || r->overloaded || !takes_body(r)) {
      r->dropped += (int64_t)n;
      return r->dropped > 2 * s->o.max_body_bytes ? MHD_NO : MHD_YES;
    }
    if ((int64_t)(r->len + n) > s->o.max_body_bytes) {
      r->too_large = true;
      release(s, r);
      return MHD_YES;
    }
    if (r->len + n + 1 > r->cap) {
      /* The buffer grows by doubling as the bytes arrive, up to a declared length, and only
       * what it holds is charged to the budget: a length declared and not sent holds nothing. */
      const size_t need = r->len + n + 1;
      size_t cap = r->cap ? r->cap : 4096;
      while (cap < need)
        cap *= 2;
      if (r->declared > 0 && cap > (size_t)r->declared + 1)
        cap = NG_MAX(need, (size_t)r->declared + 1);
      if ((int64_t)cap > r->reserved && !reserve(s, r, (int64_t)cap - r->reserved)) {
        r->overloaded = true;
        release(s, r);
        return MHD_YES;
      }
      char *p = realloc(r->body, cap);
      if (!p) {
        r->overloaded = true;
        release(s, r);
        return MHD_YES;
      }
      r->body = p;
      r->cap = cap;
    }
    memcpy(r->body + r->len, upload_data, n);
    r->len += n;
    return MHD_YES;
  }
  /* The request is complete: computing and sending its answer has no deadline. */
  set_phase(s, r->k, PH_BUSY);
  if (r->submitted) /* resumed: the engine answered */
    return do_infer(s, c, r);
  if (r->queued) /* resumed: the update was applied */
    return do_graph(s, c, r);
  if (r->too_large)
    return too_large(s, c, r);
  if (r->route_code)
    return reply_error(s, c, r, r->route_code, r->route_message);
  if (atomic_load(&s->draining))
    return reply_error(s, c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is shutting down");
  if (r->overloaded)
    return reply_error(s, c, r, MHD_HTTP_SERVICE_UNAVAILABLE,
                       "too many request bodies held at once; retry later");
  if (r->ep == EP_INFER)
    return do_infer(s, c, r);
  if (r->ep == EP_GRAPH)
    return do_graph(s, c, r);
  return do_get(s, c, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  ng_http_server *s = cls;
  request *r = *con_cls;
  if (!r)
    return;
  *con_cls = NULL;
  const double dt = now_s() - r->t0;
  size_t k = 0;
  while (k < NG_ARRAY_LEN(CODES) && CODES[k] != r->code)
    k++;
  atomic_fetch_add_explicit(&s->requests[r->ep][k], 1, memory_order_relaxed);
  observe(&s->latency[r->ep], LAT_BOUNDS, NG_ARRAY_LEN(LAT_BOUNDS), dt, 1e9);
  if (r->ep == EP_INFER && r->code == MHD_HTTP_OK && r->hub >= 0)
    observe(&s->infer_path[r->hub], LAT_BOUNDS, NG_ARRAY_LEN(LAT_BOUNDS), dt, 1e9);
  /* The connection waits for its next request's headers from now. */
  if (r->k)
    set_phase(s, r->k, PH_HEADERS);
  release(s, r);
  /* A submitted request is answered by now: libmicrohttpd completes no suspended connection.
   * One refused at admission has its parsed form only. */
  ng_infer_result_free(&r->res);
  ng__http_infer_clear(&r->in);
  ng__http_update_clear(&r->up);
  pthread_mutex_destroy(&r->mu);
  free(r);
  atomic_fetch_sub(&s->in_flight, 1);
}

/* Connections come and go: a new one takes an ordinary slot while there is one, else a reserved
 * one (libmicrohttpd accepts up to max_connections + health_connections). Called in the accepting
 * thread before the connection's own starts, and at close before the socket is closed. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  ng_http_server *s = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    conn *k = calloc(1, sizeof *k);
    *socket_context = k;
    if (!k)
      return; /* its requests get 500: there is no memory to watch it */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    k->fd = ci ? ci->connect_fd : MHD_INVALID_SOCKET;
    pthread_mutex_lock(&s->mu);
    k->reserved = s->ordinary >= s->o.max_connections;
    if (!k->reserved)
      s->ordinary++;
    k->phase = PH_HEADERS;
    k->since = now_s();
    k->next = s->conns;
    if (s->conns)
      s->conns->prev = k;
    s->conns = k;
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->connections, 1);
    return;
  }
  conn *k = *socket_context;
  *socket_context = NULL;
  if (!k)
    return;
  pthread_mutex_lock(&s->mu);
  if (!k->reserved)
    s->ordinary--;
  if (k->prev)
    k->prev->next = k->next;
  else
    s->conns = k->next;
  if (k->next)
    k->next->prev = k->prev;
  pthread_mutex_unlock(&s->mu);
  atomic_fetch_sub(&s->connections, 1);
  free(k);
}

/* Shuts a connection's socket down: its thread wakes to the end of its input and libmicrohttpd
 * closes it as a client that went away (no answer: the client is too slow to read one). */
static void shut_slow(ng_http_server *s, conn *k, int what) {
  if (k->fd != MHD_INVALID_SOCKET)
    shutdown(k->fd, SHUT_RDWR);
  k->shut = true;
  atomic_fetch_add_explicit(&s->slow_closed[what], 1, memory_order_relaxed);
}

/* Whether the client of a connection went away: the end of its input (it closed its socket) or
 * an error. Bytes waiting (a pipelined next request) are left where they are. */
static bool peer_gone(MHD_socket fd) {
  if (fd == MHD_INVALID_SOCKET)
    return false;
  char b;
  const ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Cancels the engine's requests of suspended connections whose client went away (`all`: of
 * every suspended connection). The tickets are collected under s->mu and cancelled without it:
 * a cancel runs the request's callback, which resumes its connection. A ticket that was answered
 * meanwhile is no longer known to the engine, and its cancel does nothing. */
static void cancel_waiting(ng_http_server *s, bool all) {
  enum { BATCH = 64 };
  ng_infer_ticket gone[BATCH];
  for (;;) {
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (conn *k = s->conns; k && n < BATCH; k = k->next)
      if (k->phase == PH_WAIT && k->ticket && (all || peer_gone(k->fd))) {
        gone[n++] = k->ticket;
        k->ticket = 0;
      }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
      if (ng_engine_cancel(s->engine, gone[i]) == NG_OK)
        atomic_fetch_add_explicit(&s->cancelled, 1, memory_order_relaxed);
    if (n < BATCH)
      return;
  }
}

/* The deadlines that libmicrohttpd's idle timeout cannot give: every tick, a connection whose
 * headers are later than header_timeout_s, or whose body brought less than min_body_rate per
 * second over its last window of body_window_s, is shut down; and the requests of suspended
 * connections whose client went away are cancelled (at most a tick, 50 ms, after it left). */
static void *sweeper(void *arg) {
  ng_http_server *s = arg;
  double tick = NG_MIN(0.05, NG_MIN(s->o.header_timeout_s, s->o.body_window_s) / 4);
  tick = NG_MAX(tick, 0.005);
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    const double t = (double)until.tv_nsec * 1e-9 + tick;
    until.tv_sec += (time_t)t;
    until.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
    pthread_cond_timedwait(&s->wake, &s->mu, &until);
    const double now = now_s();
    for (conn *k = s->conns; k && !s->stop; k = k->next) {
      if (k->shut)
        continue;
      const double dt = now - k->since;
      if (k->phase == PH_HEADERS && dt > s->o.header_timeout_s) {
        shut_slow(s, k, 0);
      } else if (k->phase == PH_BODY && s->o.min_body_rate > 0 && dt >= s->o.body_window_s) {
        const int64_t got = atomic_exchange(&k->window_bytes, 0);
        if ((double)got < (double)s->o.min_body_rate * dt)
          shut_slow(s, k, 1);
        else
          k->since = now;
      }
    }
    if (atomic_load(&s->suspended) > 0 && !s->stop) {
      pthread_mutex_unlock(&s->mu);
      cancel_waiting(s, false);
      pthread_mutex_lock(&s->mu);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

ng_status ng_http_server_start(ng_http_server **out, ng_engine *engine, const ng_http_opts *opts) {
  *out = NULL;
  ng_http_opts o = NG_HTTP_OPTS_INIT;
  if (opts) {
    if (opts->size != sizeof o)
      return ng__err(NG_ERR_INVALID_ARG, "ng_http_opts: size %zu, expected %zu", opts->size,
                     sizeof o);
    o = *opts;
  }
  if (!engine)
    return ng__err(NG_ERR_INVALID_ARG, "http server: no engine");
  if (o.port < 0 || o.port > 65535)
    return ng__err(NG_ERR_INVALID_ARG, "http server: port %d is not in [0, 65535]", o.port);
  if (o.max_body_bytes < 1024)
    return ng__err(NG_ERR_INVALID_ARG,
                   "http server: max body of %" PRId64 " bytes is too small (1 KiB at least)",
                   o.max_body_bytes);
  if (o.max_buffered_bytes <= 0)
    o.max_buffered_bytes = 4 * o.max_body_bytes;
  if (o.max_buffered_bytes < o.max_body_bytes)
    o.max_buffered_bytes = o.max_body_bytes;
  if (o.max_connections < 1)
    o.max_connections = 512;
  if (o.retry_after_s < 1)
    o.retry_after_s = 1;
  if (!(o.header_timeout_s > 0 && o.header_timeout_s <= 86400))
    return ng__err(NG_ERR_INVALID_ARG,
                   "http server: header timeout of %g s is not in (0, 86400] (serve "
                   "--header-timeout-s)",
                   o.header_timeout_s);
  if (!(o.body_window_s > 0 && o.body_window_s <= 86400))
    return ng__err(NG_ERR_INVALID_ARG, "http server: body rate window of %g s is not in (0, 86400]",
                   o.body_window_s);
  if (o.min_body_rate < 0 || o.max_connections_per_client < 0 || o.health_connections < 0 ||
      o.health_connections > 65536)
    return ng__err(NG_ERR_INVALID_ARG,
                   "http server: min body rate %" PRId64
                   ", connections per client %d and health connections %d must be >= 0 (health "
                   "connections at most 65536)",
                   o.min_body_rate, o.max_connections_per_client, o.health_connections);
  if (!o.host)
    o.host = "127.0.0.1";

  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(o.host, NULL, &hints, &ai) != 0 || !ai)
    return ng__err(NG_ERR_INVALID_ARG,
                   "http server: host '%s' is not a numeric IPv4 or IPv6 address (127.0.0.1, "
                   "0.0.0.0, ::1)",
                   o.host);
  struct sockaddr_storage addr;
  memset(&addr, 0, sizeof addr);
  memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
  const bool v6 = ai->ai_family == AF_INET6;
  freeaddrinfo(ai);
  if (v6)
    ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)o.port);
  else
    ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)o.port);

  ng_http_server *s = calloc(1, sizeof *s);
  if (!s)
    return ng__err(NG_ERR_NOMEM, "http server: no memory");
  s->engine = engine;
  s->o = o;
  ng_engine_info info;
  ng_engine_info_get(&info, engine);
  snprintf(s->name, sizeof s->name, "%s", info.name);
  s->layers = info.layers;
  s->feature_dim = info.feature_dim;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  const int cond_rc = pthread_cond_init(&s->wake, &ca);
  pthread_condattr_destroy(&ca);
  if (cond_rc != 0 || pthread_mutex_init(&s->mu, NULL) != 0) {
    if (cond_rc == 0)
      pthread_cond_destroy(&s->wake);
    free(s);
    return ng__err(NG_ERR_NOMEM, "http server: cannot create a mutex");
  }
  pthread_mutex_init(&s->upd_mu, NULL);
  pthread_cond_init(&s->upd_cv, NULL);

  /* A pool of event-loop threads (epoll where there is one): suspending a connection while the
   * engine has its request is not available with a thread per connection, and a waiting request
   * then holds no thread. The handlers never block: an infer waits suspended, and so does an
   * update while an updater thread waits for its group's fsync. */
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
  if (v6)
    flags |= MHD_USE_IPv6;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const unsigned pool = ng__http_test_threads > 0
                            ? (unsigned)ng__http_test_threads
                            : (unsigned)NG_MAX(2, NG_MIN(HTTP_MAX_THREADS, cores / 2));
  /* No log, no updates (ng_engine_apply refuses them): then no updater is started. */
  ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
  const bool has_log = ng_engine_log_info_get(&li, engine) == NG_OK;
  const int updaters =
      has_log ? (int)NG_MIN(HTTP_MAX_UPDATERS, NG_MAX(HTTP_MIN_UPDATERS, 16 * pool)) : 0;
  for (int i = 0; i < updaters; i++) {
    if (pthread_create(&s->updaters[i], NULL, updater, s) != 0) {
      stop_updaters(s);
      pthread_mutex_destroy(&s->upd_mu);
      pthread_cond_destroy(&s->upd_cv);
      pthread_mutex_destroy(&s->mu);
      pthread_cond_destroy(&s->wake);
      free(s);
      return ng__err(NG_ERR_NOMEM, "http server: cannot start the updater threads");
    }
    s->n_updaters++;
  }
  s->daemon =
      MHD_start_daemon(flags, (uint16_t)o.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                       (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                       MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
                       (unsigned)o.max_connections + (unsigned)o.health_connections,
                       MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o.max_connections_per_client,
                       MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120, MHD_OPTION_THREAD_POOL_SIZE,
                       pool, MHD_OPTION_END);
  if (!s->daemon) {
    stop_updaters(s);
    pthread_mutex_destroy(&s->upd_mu);
    pthread_cond_destroy(&s->upd_cv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
    return ng__err(NG_ERR_IO,
                   "http server: cannot listen on %s port %d (in use, or not an address of this "
                   "machine); pick another with --host/--port, or --port 0 for a free one",
                   o.host, o.port);
  }
  if (pthread_create(&s->sweeper, NULL, sweeper, s) != 0) {
    MHD_stop_daemon(s->daemon);
    stop_updaters(s);
    pthread_mutex_destroy(&s->upd_mu);
    pthread_cond_destroy(&s->upd_cv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
    return ng__err(NG_ERR_NOMEM, "http server: cannot start the connection deadline thread");
  }
  s->sweeper_started = true;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
  s->port = di ? di->port : o.port;
  *out = s;
  return NG_OK;
}

int ng_http_server_port(const ng_http_server *s) {
  return s ? s->port : -1;
}

int ng_http_server_stop(ng_http_server *s) {
  if (!s)
    return 0;
  atomic_store(&s->draining, 1);
  /* Stop accepting: the listening socket closes now; open connections go on. */
  const MHD_socket fd = MHD_quiesce_daemon(s->daemon);
  if (fd != MHD_INVALID_SOCKET)
    close(fd);
  const double deadline = now_s() + s->o.drain_timeout_s;
  const struct timespec tick = {0, 1000000};
  while (atomic_load(&s->in_flight) > 0 && now_s() < deadline)
    nanosleep(&tick, NULL);
  const int left = (int)atomic_load(&s->in_flight);
  /* libmicrohttpd must not stop with a connection suspended: the requests the engine still has
   * are cancelled, and their callbacks resume their connections (one in a batch when the batch
   * ends; one submitted a moment ago, whose connection was not yet marked, on the next round).
   * Updates are not cancelled: the queued ones are applied and answered (an update once given to
   * ng_engine_apply may be in the log already), and the loop waits for them. */
  while (atomic_load(&s->suspended) > 0) {
    cancel_waiting(s, true);
    nanosleep(&tick, NULL);
  }
  /* The updaters stop with the queue empty: one queued a moment ago is applied, and resumes its
   * connection while libmicrohttpd still runs. */
  stop_updaters(s);
  /* The sweeper watches slow clients through the drain, and stops before the connections close. */
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->mu);
  if (s->sweeper_started)
    pthread_join(s->sweeper, NULL);
  MHD_stop_daemon(s->daemon);
  pthread_mutex_destroy(&s->upd_mu);
  pthread_cond_destroy(&s->upd_cv);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->wake);
  free(s);
  return left;
}

/* ---- /metrics ---- */

static void write_histogram(FILE *f, const char *metric, const char *labels, histogram *h,
                            const double *bounds, size_t n_bounds, double sum_scale) {
  int64_t cum = 0;
  for (size_t i = 0; i <= n_bounds; i++) {
    cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
    if (i < n_bounds)
      fprintf(f, "%s_bucket{%s%sle=\"%g\"} %" PRId64 "\n", metric, labels, *labels ? "," : "",
              bounds[i], cum);
    else
      fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %" PRId64 "\n", metric, labels, *labels ? "," : "",
              cum);
  }
  fprintf(f, "%s_sum{%s} %.9g\n", metric, labels,
          (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) * sum_scale);
  fprintf(f, "%s_count{%s} %" PRId64 "\n", metric, labels,
          atomic_load_explicit(&h->count, memory_order_relaxed));
}

static void counter(FILE *f, const char *name, const char *help, const char *type, int64_t v) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %" PRId64 "\n", name, help, name, type, name, v);
}

char *ng__http_metrics_text(size_t *len, ng_http_server *s) {
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  if (!f)
    return NULL;
  fputs("# HELP neargnn_http_requests_total HTTP requests answered, by endpoint and status.\n"
        "# TYPE neargnn_http_requests_total counter\n",
        f);
  for (int e = 0; e < EP_COUNT; e++)
    for (size_t k = 0; k < N_CODES; k++) {
      const int64_t v = atomic_load_explicit(&s->requests[e][k], memory_order_relaxed);
      if (!v && k != 0)
        continue;
      if (k < NG_ARRAY_LEN(CODES))
        fprintf(f, "neargnn_http_requests_total{endpoint=\"%s\",code=\"%u\"} %" PRId64 "\n",
                EP_NAMES[e], CODES[k], v);
      else
        fprintf(f, "neargnn_http_requests_total{endpoint=\"%s\",code=\"other\"} %" PRId64 "\n",
                EP_NAMES[e], v);
    }
  fputs("# HELP neargnn_http_request_duration_seconds Time from a request's headers to its "
        "answer sent, by endpoint.\n# TYPE neargnn_http_request_duration_seconds histogram\n",
        f);
  for (int e = 0; e < EP_COUNT; e++) {
    char labels[64];
    snprintf(labels, sizeof labels, "endpoint=\"%s\"", EP_NAMES[e]);
    write_histogram(f, "neargnn_http_request_duration_seconds", labels, &s->latency[e], LAT_BOUNDS,
                    NG_ARRAY_LEN(LAT_BOUNDS), 1e-9);
  }
  fputs("# HELP neargnn_infer_duration_seconds Successful infer requests by the engine's path: "
        "hub (split, cold neighbours aggregated by CPU workers) or ordinary.\n"
        "# TYPE neargnn_infer_duration_seconds histogram\n",
        f);
  write_histogram(f, "neargnn_infer_duration_seconds", "path=\"ordinary\"", &s->infer_path[0],
                  LAT_BOUNDS, NG_ARRAY_LEN(LAT_BOUNDS), 1e-9);
  write_histogram(f, "neargnn_infer_duration_seconds", "path=\"hub\"", &s->infer_path[1],
                  LAT_BOUNDS, NG_ARRAY_LEN(LAT_BOUNDS), 1e-9);
  fputs("# HELP neargnn_infer_batch_nodes Target nodes of the device batch each infer request "
        "rode in.\n# TYPE neargnn_infer_batch_nodes histogram\n",
        f);
  int64_t cum = 0;
  for (size_t i = 0; i < N_BATCH; i++) {
    cum += atomic_load_explicit(&s->batch_bucket[i], memory_order_relaxed);
    if (i < NG_ARRAY_LEN(BATCH_BOUNDS))
      fprintf(f, "neargnn_infer_batch_nodes_bucket{le=\"%g\"} %" PRId64 "\n", BATCH_BOUNDS[i], cum);
    else
      fprintf(f, "neargnn_infer_batch_nodes_bucket{le=\"+Inf\"} %" PRId64 "\n", cum);
  }
  fprintf(
      f, "neargnn_infer_batch_nodes_sum %" PRId64 "\nneargnn_infer_batch_nodes_count %" PRId64 "\n",
      atomic_load(&s->batch_sum), atomic_load(&s->batch_count));
  counter(f, "neargnn_http_in_flight", "Requests being answered now.", "gauge",
          atomic_load(&s->in_flight));
  counter(f, "neargnn_http_buffered_bytes", "Request body bytes held now.", "gauge",
          atomic_load(&s->buffered));
  counter(f, "neargnn_http_connections", "Connections open now.", "gauge",
          atomic_load(&s->connections));
  counter(f, "neargnn_http_waiting", "Connections suspended while the engine has their request.",
          "gauge", atomic_load(&s->suspended));
  counter(f, "neargnn_http_cancelled_total",
          "Infer requests cancelled because their client went away before the answer.", "counter",
          atomic_load(&s->cancelled));
  fputs("# HELP neargnn_http_slow_closed_total Connections closed for headers later than "
        "--header-timeout-s or a body slower than --min-body-rate.\n"
        "# TYPE neargnn_http_slow_closed_total counter\n",
        f);
  fprintf(f, "neargnn_http_slow_closed_total{phase=\"headers\"} %" PRId64 "\n",
          atomic_load(&s->slow_closed[0]));
  fprintf(f, "neargnn_http_slow_closed_total{phase=\"body\"} %" PRId64 "\n",
          atomic_load(&s->slow_closed[1]));
  counter(f, "neargnn_http_reserved_refused_total",
          "Requests other than health checks and /metrics refused (503) on a connection slot "
          "reserved for those.",
          "counter", atomic_load(&s->reserved_refused));

  ng_engine_stats st;
  memset(&st, 0, sizeof st);
  ng_engine_stats_get(&st, s->engine);
  ng_engine_info info;
  ng_engine_info_get(&info, s->engine);
  counter(f, "neargnn_engine_requests_total", "Infer requests the engine answered.", "counter",
          st.requests);
  counter(f, "neargnn_engine_request_nodes_total", "Target nodes of those requests.", "counter",
          st.request_nodes);
  counter(f, "neargnn_engine_hub_requests_total", "Requests served on the hub path.", "counter",
          st.hub_requests);
  counter(f, "neargnn_engine_rejected_busy_total",
          "Requests refused because the admission queue was full (503).", "counter",
          st.rejected_busy);
  counter(f, "neargnn_engine_rejected_deadline_total",
          "Requests refused at admission: the predicted wait passed their deadline (503).",
          "counter", st.rejected_deadline);
  counter(f, "neargnn_engine_timed_out_total",
          "Requests whose deadline passed before they could start; never computed (503).",
          "counter", st.timed_out);
  counter(f, "neargnn_engine_computed_total",
          "Requests taken into a device batch (computed, or computing now).", "counter",
          st.computed);
  counter(f, "neargnn_engine_cancelled_total",
          "Requests cancelled: dropped from the queue, or computed and their answer discarded.",
          "counter", st.cancelled);
  counter(f, "neargnn_engine_embedding_cache_hits_total",
          "Layer-0 rows of full-neighbourhood batches found in the embedding cache.", "counter",
          st.cache_hits);
  counter(f, "neargnn_engine_embedding_cache_misses_total",
          "Layer-0 rows computed because the embedding cache did not hold them.", "counter",
          st.cache_misses);
  counter(f, "neargnn_engine_embedding_cache_evictions_total",
          "Embedding cache rows evicted to make room.", "counter", st.cache_evictions);
  counter(f, "neargnn_engine_embedding_cache_invalidations_total",
          "Embedding cache rows removed because an update changed them.", "counter",
          st.cache_invalidations);
  counter(f, "neargnn_engine_embedding_cache_rows", "Rows the embedding cache holds now.", "gauge",
          st.cache_entries);
  counter(f, "neargnn_engine_batches_total", "Device batches run.", "counter", st.batches);
  counter(f, "neargnn_engine_batch_nodes_total", "Target nodes of those batches.", "counter",
          st.batch_nodes);
  counter(f, "neargnn_engine_hot_rows_total", "Input rows read from the hot tier.", "counter",
          st.hot_rows);
  counter(f, "neargnn_engine_cold_rows_total", "Input rows read from host memory.", "counter",
          st.cold_rows);
  counter(f, "neargnn_engine_updates_applied_total", "Graph updates acknowledged (durable).",
          "counter", st.updates);
  counter(f, "neargnn_engine_update_syncs_total",
          "fsyncs of the update log; concurrent updates share one (group commit).", "counter",
          st.update_syncs);
  counter(f, "neargnn_engine_queue_depth", "Requests admitted and not yet answered.", "gauge",
          st.queue_depth);
  counter(f, "neargnn_graph_nodes", "Nodes of the served graph (grows with updates).", "gauge",
          info.nodes);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  if (len)
    *len = n;
  return text;
}
