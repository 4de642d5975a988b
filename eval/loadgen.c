/* Open-loop HTTP load generator for `neargnn serve` (KServe v2 infer requests), and a trivial
 * endpoint to calibrate it. C11, epoll and POSIX threads; nothing beyond libc.
 *
 *   loadgen --url http://127.0.0.1:8000/v2/models/w4 --rate 20000 --duration 10 --nodes N
 *           [--mix full:0.9,hub:0.1] [--hubs FILE] [--tophubs FILE] [--fanouts 10,5]
 *           [--connections 128] [--threads 2] [--timeout-ms 100] [--json FILE]
 *           [--updates RATE --update-kind features|edges|mix --dim D]
 *   loadgen --serve-trivial PORT [--host ADDR] [--threads T]
 *
 * Open loop: the intended send time of every request is fixed before the first one goes out
 * (Poisson arrivals at --rate, or evenly spaced with --arrivals constant), whatever the server
 * does. Each request goes out on a free keep-alive connection at its intended time, or as soon
 * as one is free when every connection is busy, and its latency runs from the intended time to
 * the last byte of the answer: a server that stalls keeps the connections busy, and that wait is
 * charged to it instead of silently lowering the offered load (no coordinated omission).
 *
 * Each of --threads threads owns its own epoll (it sleeps until the next intended send time with
 * epoll_pwait2's ns timeout), a share of the connections and an independent Poisson stream at
 * rate/threads (the superposition of independent Poisson streams is a Poisson stream at the sum
 * of the rates). Requests are formatted at send time into a fixed buffer; responses are parsed
 * incrementally (status line, Content-Length, chunked bodies, Connection: close, HTTP/1.0) and
 * their bodies discarded, so the generator's cost per request is a few system calls whatever
 * the answer's size.
 *
 * With --timeout-ms, a client gives up on a request that is not answered by its intended time
 * plus the timeout: the request is abandoned, its connection closed and reopened (the server
 * sees the disconnect), and every request carries "parameters":{"timeout_ms": T} so that the
 * server knows the deadline too. A request whose deadline passes before a connection is free is
 * abandoned without being sent. --deadline-slack-ms S makes the client wait S longer before it
 * gives up, so that answers the server sends after the deadline are seen and counted
 * (answered_after_deadline) rather than cut off unseen.
 *
 * With --updates RATE, graph updates (POST .../graph) go out alongside, open loop as well, at
 * RATE per second (Poisson) on connections and threads of their own: each one replaces a random
 * node's feature row with --dim random values, or adds an edge between two random nodes. Their
 * latencies (from the intended send time) are reported apart from the inference classes. They
 * carry no deadline (the update API takes none) and the client never gives up on one before the
 * drain ends: an update abandoned by the client might still be applied, and the count of
 * acknowledged updates must be what the server applied.
 *
 * Exit status: 0 when the run completed (whatever the server answered), 1 when the server could
 * not be reached at the start or the generator failed, 2 on a usage error. */
/* accept4, SO_REUSEPORT, strncasecmp (the build defines it too, as for every target). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL
#define NS_PER_MS 1000000LL
#define MAX_FANOUTS 8
#define MAX_THREADS 256
#define MAX_CONNECTIONS 65536
/* A send later than this after its intended time is counted as late: many late sends mean the
 * connections (or the generator) were the limit, not the server's compute. */
#define LATE_NS NS_PER_MS
/* How often in-flight requests are checked against their deadline: the granularity with which a
 * client gives up. */
#define SCAN_NS NS_PER_MS
/* Wait before reconnecting after a refused connect, so that a dead server does not turn the
 * generator into a busy loop. */
#define RECONNECT_DELAY_NS (10 * NS_PER_MS)
/* Time the connections get to open before the first intended send time. */
#define CONNECT_LIMIT_NS (5 * NS_PER_S)
#define START_DELAY_NS (20 * NS_PER_MS)
/* A request: the header lines (a path of at most 768 bytes, a host of 256) and a body of at
 * most BODY_BUF bytes. */
#define BODY_BUF 1024
#define REQ_BUF 2560
/* Bodies are discarded as they arrive, so a connection's buffer only has to hold a header block;
 * one larger than this is a broken server, not a slow one. */
#define IN_BUF (16 * 1024)
#define MAX_HEADER IN_BUF
#define MAX_STATUS 600
#define EVENTS 256

enum { CLS_FULL, CLS_SAMPLED, CLS_HUB, CLS_TOPHUB, CLS_COUNT };
static const char *const cls_name[CLS_COUNT] = {"full", "sampled", "hub", "tophub"};

/* What became of a request. UNSENT requests are abandoned ones that never left the generator. */
enum { OUT_PENDING, OUT_OK, OUT_503, OUT_STATUS, OUT_CONN, OUT_ABANDONED, OUT_UNSENT };

/* What an update does (the class of an update worker's request). */
enum { UPD_FEATURES, UPD_EDGES, UPD_MIX };
static const char *const upd_name[3] = {"features", "edges", "mix"};
/* Characters of one random feature value as sent, "0.dddd," */
#define VALUE_CHARS 7

typedef struct {
  int64_t due;   /* intended send time, ns after the start */
  int64_t node;  /* the node id asked for */
  int64_t lat;   /* ns from `due` to the end of the answer (OK, 503 and STATUS) */
  int64_t lag;   /* ns from `due` to the send (sent requests) */
  int64_t node2; /* an added edge's destination (updates) */
  int16_t status;
  uint8_t cls; /* the class; UPD_FEATURES or UPD_EDGES for an update */
  uint8_t outcome;
  uint8_t after_deadline; /* answered later than timeout_ms after it was sent */
} req_t;

typedef struct {
  struct sockaddr_storage addr;
  socklen_t addr_len;
  char host[256]; /* as given, for the Host header and the report */
  int port;
  char path[768];  /* .../infer */
  char gpath[768]; /* .../graph */
  char url[1100];
  double rate, duration, warmup, drain;
  int poisson;
  int connections, threads;
  int64_t timeout_ms;
  int64_t nodes;
  int fanouts[MAX_FANOUTS], n_fanouts;
  int64_t *list[CLS_COUNT]; /* node lists of hub and tophub */
  size_t list_len[CLS_COUNT];
  double mix[CLS_COUNT];
  uint64_t seed;
  char outputs[256]; /* the JSON of "outputs", or empty for all of them */
  int64_t slack_ms;  /* wait past a deadline before giving up */
  /* Updates: rate (0: none), what they change, the feature width, connections and threads. */
  double update_rate;
  int update_kind;
  int64_t dim;
  int update_connections, update_threads;
} opts_t;

static _Noreturn void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("loadgen: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (loadgen --help)\n", stderr);
  va_end(ap);
  exit(2);
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* splitmix64: seeds the per-thread generators and derives each sampled request's seed from its
 * index, so a run's requests depend only on --seed and --threads. */
static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

typedef struct {
  uint64_t s[4];
} rng_t;

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng_t *r) { /* xoshiro256** */
  uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

static void rng_seed(rng_t *r, uint64_t seed) {
  for (int i = 0; i < 4; i++)
    r->s[i] = seed = splitmix64(seed);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_u01(rng_t *r) {
  return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static int64_t rng_below(rng_t *r, int64_t n) {
  int64_t v = (int64_t)(rng_u01(r) * (double)n);
  return v < n ? v : n - 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                     */

static double parse_double(const char *opt, const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v))
    usage_error("%s: '%s' is not a number", opt, s);
  return v;
}

static int64_t parse_int(const char *opt, const char *s, int64_t lo, int64_t hi) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    usage_error("%s: '%s' is not an integer in [%lld, %lld]", opt, s, (long long)lo, (long long)hi);
  return (int64_t)v;
}

static int class_of(const char *name, size_t len) {
  for (int c = 0; c < CLS_COUNT; c++)
    if (strlen(cls_name[c]) == len && !strncmp(cls_name[c], name, len))
      return c;
  return -1;
}

/* --mix full:0.9,hub:0.1 (weights are normalised; a class left out has weight 0). */
static void parse_mix(opts_t *o, const char *s) {
  memset(o->mix, 0, sizeof o->mix);
  const char *p = s;
  while (*p) {
    const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
    if (!comma)
      comma = p + strlen(p);
    if (!colon || colon > comma)
      usage_error("--mix: '%s' is not CLASS:WEIGHT[,CLASS:WEIGHT...]", s);
    int c = class_of(p, (size_t)(colon - p));
    if (c < 0)
      usage_error("--mix: unknown class '%.*s' (full, sampled, hub, tophub)", (int)(colon - p), p);
    char w[64];
    size_t wl = (size_t)(comma - colon - 1);
    if (wl == 0 || wl >= sizeof w)
      usage_error("--mix: '%s': a weight is missing or too long", s);
    memcpy(w, colon + 1, wl);
    w[wl] = 0;
    double v = parse_double("--mix", w);
    if (v < 0)
      usage_error("--mix: weight of %s is negative", cls_name[c]);
    o->mix[c] += v;
    p = *comma ? comma + 1 : comma;
  }
  double sum = 0;
  for (int c = 0; c < CLS_COUNT; c++)
    sum += o->mix[c];
  if (!(sum > 0))
    usage_error("--mix: '%s' has no positive weight", s);
  for (int c = 0; c < CLS_COUNT; c++)
    o->mix[c] /= sum;
}

static void parse_fanouts(opts_t *o, const char *s) {
  const char *p = s;
  o->n_fanouts = 0;
  for (;;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || (v < 1 && v != -1) || v > 1000000 || o->n_fanouts == MAX_FANOUTS)
      usage_error("--fanouts: '%s' is not a list of at most %d positive integers (or -1)", s,
                  MAX_FANOUTS);
    o->fanouts[o->n_fanouts++] = (int)v;
    if (*end == 0)
      break;
    if (*end != ',')
      usage_error("--fanouts: '%s' is not comma-separated", s);
    p = end + 1;
  }
}

static void parse_outputs(opts_t *o, const char *s) {
  if (!strcmp(s, "all")) {
    o->outputs[0] = 0;
    return;
  }
  size_t n = (size_t)snprintf(o->outputs, sizeof o->outputs, "[");
  const char *p = s;
  while (*p) {
    size_t len = strcspn(p, ",");
    if (!((len == 6 && !strncmp(p, "logits", 6)) || (len == 9 && !strncmp(p, "embedding", 9)) ||
          (len == 5 && !strncmp(p, "class", 5))))
      usage_error("--outputs: '%.*s' is not logits, embedding or class", (int)len, p);
    n += (size_t)snprintf(o->outputs + n, sizeof o->outputs - n, "%s{\"name\":\"%.*s\"}",
                          n > 1 ? "," : "", (int)len, p);
    p += len;
    if (*p)
      p++;
  }
  if (n + 2 > sizeof o->outputs || n == 1)
    usage_error("--outputs: '%s' is empty or too long", s);
  strcat(o->outputs, "]");
}

/* One node id a line; blank lines and lines starting with '#' are skipped. */
static void read_list(opts_t *o, int c, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    usage_error("%s: %s", path, strerror(errno));
  size_t n = 0, cap = 1024;
  int64_t *v = malloc(cap * sizeof *v);
  char line[256];
  long lineno = 0;
  while (v && fgets(line, sizeof line, f)) {
    lineno++;
    char *p = line;
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == '#' || *p == '\n' || *p == '\r' || *p == 0)
      continue;
    char *end;
    errno = 0;
    long long id = strtoll(p, &end, 10);
    if (errno || end == p || id < 0 || (*end && !strchr(" \t\r\n", *end)))
      usage_error("%s:%ld: '%.*s' is not a node id", path, lineno, (int)strcspn(p, "\r\n"), p);
    if (n == cap) {
      int64_t *nv = realloc(v, 2 * cap * sizeof *v);
      if (!nv) {
        free(v);
        v = NULL;
        break;
      }
      v = nv;
      cap *= 2;
    }
    v[n++] = id;
  }
  fclose(f);
  if (!v)
    usage_error("%s: out of memory", path);
  if (n == 0)
    usage_error("%s: no node ids", path);
  o->list[c] = v;
  o->list_len[c] = n;
}

static void resolve(opts_t *o) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  int rc = getaddrinfo(o->host, port, &hints, &res);
  if (rc)
    usage_error("host '%s': %s", o->host, gai_strerror(rc));
  memcpy(&o->addr, res->ai_addr, res->ai_addrlen);
  o->addr_len = res->ai_addrlen;
  freeaddrinfo(res);
}

/* http://HOST:PORT/PATH, HOST possibly [v6]; PATH is the model's URL as serve prints it, with or
 * without the trailing /infer. */
static void parse_url(opts_t *o, const char *url) {
  if (strncmp(url, "http://", 7))
    usage_error("--url: '%s' does not start with http://", url);
  const char *h = url + 7, *hend, *p;
  if (*h == '[') {
    hend = strchr(h, ']');
    if (!hend)
      usage_error("--url: '%s': unclosed [", url);
    snprintf(o->host, sizeof o->host, "%.*s", (int)(hend - h - 1), h + 1);
    p = hend + 1;
  } else {
    hend = h + strcspn(h, ":/");
    snprintf(o->host, sizeof o->host, "%.*s", (int)(hend - h), h);
    p = hend;
  }
  o->port = 80;
  if (*p == ':') {
    char *end;
    long port = strtol(p + 1, &end, 10);
    if (end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/'))
      usage_error("--url: '%s': bad port", url);
    o->port = (int)port;
    p = end;
  }
  if (*p != '/' || !o->host[0])
    usage_error("--url: '%s' has no host or no path", url);
  size_t len = strlen(p);
  while (len > 1 && p[len - 1] == '/')
    len--;
  if (len >= 6 && !strncmp(p + len - 6, "/infer", 6))
    len -= 6;
  if (len + 7 > sizeof o->path)
    usage_error("--url: path too long");
  snprintf(o->path, sizeof o->path, "%.*s/infer", (int)len, p);
  snprintf(o->gpath, sizeof o->gpath, "%.*s/graph", (int)len, p);
}

static void help(void) {
  fputs(
      "usage: loadgen --url URL | --host ADDR --port N --model NAME  [options]\n"
      "       loadgen --serve-trivial PORT [--host ADDR] [--threads T]\n"
      "\n"
      "Open-loop KServe v2 infer load; latency from each request's intended send time.\n"
      "  --url URL           the model's URL, http://HOST:PORT/v2/models/NAME (as serve prints)\n"
      "  --host/--port/--model  the same in parts (host 127.0.0.1)\n"
      "  --rate R            offered infer requests per second (required; 0 with --updates:\n"
      "                      updates alone)\n"
      "  --duration S        seconds of arrivals (10)\n"
      "  --warmup S          seconds at the start left out of the statistics (0)\n"
      "  --arrivals A        poisson (default) or constant\n"
      "  --connections C     keep-alive connections in all (64)\n"
      "  --threads T         generator threads, each with its own epoll (2)\n"
      "  --timeout-ms MS     give up on a request after MS from its intended time, and send\n"
      "                      parameters.timeout_ms MS (0: never)\n"
      "  --deadline-slack-ms S  with --timeout-ms, wait S more before giving up, so that\n"
      "                      answers after the deadline are seen and counted (0)\n"
      "  --drain S           after the last arrival, longest wait for answers (10); then the\n"
      "                      requests still out count as abandoned\n"
      "  --mix SPEC          class weights, e.g. full:0.9,hub:0.1; classes: full (a uniform node\n"
      "                      of [0, --nodes), whole neighbourhood), sampled (uniform node,\n"
      "                      parameters.fanouts, a random seed each), hub (--hubs), tophub\n"
      "                      (--tophubs); default full:1, or sampled:1 with --fanouts\n"
      "  --nodes N           node ids of full and sampled requests are uniform in [0, N)\n"
      "  --fanouts LIST      fanouts of sampled requests, targets outwards (10,5)\n"
      "  --hubs FILE         node ids of hub requests, one a line\n"
      "  --tophubs FILE      node ids of tophub requests, one a line\n"
      "  --outputs LIST      outputs asked for: class (default), logits, embedding, or all\n"
      "  --seed S            seed of the schedule, the nodes and the sampling seeds (1)\n"
      "  --json FILE         the report as JSON to FILE (- or default: stdout)\n"
      "  --updates R         also send graph updates (POST .../graph) at R per second, open\n"
      "                      loop, on connections of their own; reported apart ('updates')\n"
      "  --update-kind K     features (a random node's row replaced by --dim random values),\n"
      "                      edges (an edge added between two random nodes of [0, --nodes)),\n"
      "                      or mix (each at random, half and half); default features\n"
      "  --dim D             the feature width (the model's feature_dim; needed for features)\n"
      "  --update-connections C  connections of the updates (16)\n"
      "  --update-threads T  threads of the updates (1)\n"
      "  --serve-trivial PORT  serve a fixed 200 answer to every request on PORT (0: any free\n"
      "                      port; prints 'listening on URL'), until SIGTERM or SIGINT\n",
      stdout);
}

/* ------------------------------------------------------------------------------------------ */
/* HTTP response parser: incremental, bodies discarded                                        */

enum { P_HEADER, P_BODY, P_CHUNK_SIZE, P_CHUNK_DATA, P_CHUNK_CRLF, P_TRAILER, P_EOF_BODY };

typedef struct {
  int state;
  int status;
  int keep_alive;
  int64_t remaining; /* body or chunk bytes still to come */
} resp_parser_t;

/* Case-insensitive: does header line [p, end) name `name` and, if so, where does its value
 * start? */
static const char *header_value(const char *p, const char *end, const char *name) {
  size_t n = strlen(name);
  if ((size_t)(end - p) <= n || strncasecmp(p, name, n) || p[n] != ':')
    return NULL;
  p += n + 1;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  return p;
}

static int value_has_token(const char *v, const char *end, const char *token) {
  size_t n = strlen(token);
  for (const char *p = v; p + n <= end; p++)
    if (!strncasecmp(p, token, n))
      return 1;
  return 0;
}

/* Parses the header block [buf, buf+len) (ending in \r\n\r\n); returns 0 or -1 on a malformed
 * one. Sets the state for the body. */
static int parse_header_block(resp_parser_t *ps, const char *buf, size_t len) {
  const char *end = buf + len, *eol = memchr(buf, '\r', len);
  if (!eol || len < 12 || strncmp(buf, "HTTP/1.", 7))
    return -1;
  int http10 = buf[7] == '0';
  if (buf[8] != ' ' || buf[9] < '1' || buf[9] > '5' || buf[10] < '0' || buf[10] > '9' ||
      buf[11] < '0' || buf[11] > '9')
    return -1;
  ps->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
  ps->keep_alive = !http10;
  int64_t content_length = -1;
  int chunked = 0;
  for (const char *p = eol + 2; p < end;) {
    const char *le = memchr(p, '\r', (size_t)(end - p));
    if (!le || le == p)
      break;
    const char *v;
    if ((v = header_value(p, le, "Content-Length"))) {
      char *e;
      errno = 0;
      long long cl = strtoll(v, &e, 10);
      if (errno || e == v || cl < 0)
        return -1;
      content_length = cl;
    } else if ((v = header_value(p, le, "Transfer-Encoding"))) {
      chunked = value_has_token(v, le, "chunked");
    } else if ((v = header_value(p, le, "Connection"))) {
      if (value_has_token(v, le, "close"))
        ps->keep_alive = 0;
      else if (value_has_token(v, le, "keep-alive"))
        ps->keep_alive = 1;
    }
    p = le + 2;
  }
  if (ps->status == 204 || ps->status == 304) {
    ps->state = P_BODY;
    ps->remaining = 0;
  } else if (chunked) {
    ps->state = P_CHUNK_SIZE;
  } else if (content_length >= 0) {
    ps->state = P_BODY;
    ps->remaining = content_length;
  } else { /* the body runs to the end of the connection */
    ps->state = P_EOF_BODY;
    ps->keep_alive = 0;
  }
  return 0;
}

/* Consumes what it can of [buf, buf+*len): returns 1 when a response is complete (bytes after it
 * are left at the front of buf), 0 when more bytes are needed, -1 on a protocol error. */
static int resp_feed(resp_parser_t *ps, char *buf, size_t *len) {
  size_t off = 0, n = *len;
  int done = 0;
  while (!done) {
    if (ps->state == P_HEADER) {
      char *e = NULL;
      for (size_t i = 3; i < n; i++)
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
          e = buf + i + 1;
          break;
        }
      if (!e) {
        if (n > MAX_HEADER)
          return -1;
        break;
      }
      size_t hl = (size_t)(e - buf);
      if (parse_header_block(ps, buf, hl))
        return -1;
      /* An informational answer (100 Continue) precedes the real one. */
      if (ps->status < 200)
        ps->state = P_HEADER;
      off = hl;
    } else if (ps->state == P_BODY || ps->state == P_CHUNK_DATA) {
      size_t take = (size_t)ps->remaining < n - off ? (size_t)ps->remaining : n - off;
      off += take;
      ps->remaining -= (int64_t)take;
      if (ps->remaining > 0)
        break;
      if (ps->state == P_BODY)
        done = 1;
      else
        ps->state = P_CHUNK_CRLF;
    } else if (ps->state == P_CHUNK_CRLF) {
      if (n - off < 2)
        break;
      if (buf[off] != '\r' || buf[off + 1] != '\n')
        return -1;
      off += 2;
      ps->state = P_CHUNK_SIZE;
    } else if (ps->state == P_CHUNK_SIZE || ps->state == P_TRAILER) {
      char *le = NULL;
      for (size_t i = off + 1; i < n; i++)
        if (buf[i] == '\n' && buf[i - 1] == '\r') {
          le = buf + i + 1;
          break;
        }
      if (!le) {
        if (n - off > MAX_HEADER)
          return -1;
        break;
      }
      if (ps->state == P_TRAILER) {
        done = le - (buf + off) == 2; /* the empty line ends the trailers */
      } else {
        char *e;
        errno = 0;
        long long sz = strtoll(buf + off, &e, 16);
        if (errno || e == buf + off || sz < 0)
          return -1;
        ps->remaining = sz;
        ps->state = sz ? P_CHUNK_DATA : P_TRAILER;
      }
      off = (size_t)(le - buf);
    } else { /* P_EOF_BODY: everything until the server closes */
      off = n;
      break;
    }
    if (ps->state == P_HEADER && off) { /* after a 1xx: shift and look for the next header */
      memmove(buf, buf + off, n - off);
      n -= off;
      off = 0;
    }
  }
  memmove(buf, buf + off, n - off);
  *len = n - off;
  return done;
}

/* ------------------------------------------------------------------------------------------ */
/* The generator                                                                               */

enum { C_DOWN, C_CONNECTING, C_IDLE, C_BUSY };

typedef struct {
  int fd;
  int state;
  uint32_t gen;     /* bumped on every open: events of a closed socket are recognised */
  int want_out;     /* registered for EPOLLOUT */
  int64_t retry_at; /* C_DOWN: when to reconnect */
  req_t *req;       /* C_BUSY: the request in flight */
  char *out;        /* [out_cap]: the request being sent */
  size_t out_cap, out_len, out_off;
  char *in;
  size_t in_len;
  resp_parser_t ps;
} conn_t;

typedef struct {
  int id;
  int upd;     /* sends graph updates, not infer requests */
  int n_peers; /* threads of its kind, id in [0, n_peers) */
  const opts_t *o;
  rng_t values; /* feature values of updates */
  req_t *reqs;
  size_t n_reqs, next;
  conn_t *conns;
  int n_conns;
  int *free_stack, n_free, n_busy, n_down;
  int ep, tfd;
  int64_t armed; /* the timerfd's target (ns after the start), or -1 */
  int64_t t0;    /* CLOCK_MONOTONIC ns of intended time 0 */
  uint64_t connect_errors, reconnects;
  int64_t last_done; /* ns after the start of the last completion */
  char err[512];
} worker_t;

/* Written by main between the two barrier waits, which order them before the workers' reads. */
static pthread_barrier_t g_barrier;
static int64_t g_t0;
static int g_abort;

#define TIMER_TAG UINT64_MAX

static void worker_fail(worker_t *w, const char *what, int e) {
  if (!w->err[0])
    snprintf(w->err, sizeof w->err, "%s: %s", what, strerror(e));
}

/* The schedule: intended times, classes and nodes, fixed before the first send. */
static int build_schedule(worker_t *w) {
  const opts_t *o = w->o;
  rng_t r;
  /* Update threads draw from streams of their own: adding updates leaves the infer schedule as
   * it was. */
  rng_seed(&r, o->seed * (uint64_t)0x100000001B3 + (uint64_t)w->id + (w->upd ? 0x5bd1e995u : 0));
  rng_seed(&w->values, splitmix64(o->seed) ^ (uint64_t)w->id);
  const double total_rate = w->upd ? o->update_rate : o->rate;
  double rate = total_rate / w->n_peers;
  double mean = rate * o->duration;
  size_t cap = (size_t)(mean + 10 * sqrt(mean) + 16);
  w->reqs = malloc(cap * sizeof *w->reqs);
  if (!w->reqs)
    return -1;
  double cum[CLS_COUNT], acc = 0;
  for (int c = 0; c < CLS_COUNT; c++)
    cum[c] = (acc += o->mix[c]);
  double t = 0;
  for (uint64_t k = 0;; k++) {
    if (o->poisson)
      t += -log1p(-rng_u01(&r)) / rate;
    else /* thread i sends at (k T + i) / rate: evenly spaced over all threads */
      t = ((double)k * w->n_peers + w->id) / total_rate;
    if (t >= o->duration)
      break;
    if (w->n_reqs == cap) {
      req_t *nr = realloc(w->reqs, 2 * cap * sizeof *nr);
      if (!nr)
        return -1;
      w->reqs = nr;
      cap *= 2;
    }
    req_t *q = &w->reqs[w->n_reqs++];
    memset(q, 0, sizeof *q);
    q->due = (int64_t)(t * (double)NS_PER_S);
    if (w->upd) {
      int kind = o->update_kind;
      if (kind == UPD_MIX)
        kind = rng_u01(&r) < 0.5 ? UPD_FEATURES : UPD_EDGES;
      q->cls = (uint8_t)kind;
      q->node = rng_below(&r, o->nodes);
      /* A destination other than the source (nodes > 1 when edges are asked for). */
      q->node2 = (q->node + 1 + rng_below(&r, o->nodes - 1)) % o->nodes;
      continue;
    }
    double u = rng_u01(&r);
    int c = 0;
    while (c < CLS_COUNT - 1 && (u >= cum[c] || o->mix[c] == 0))
      c++;
    q->cls = (uint8_t)c;
    if (c == CLS_HUB || c == CLS_TOPHUB)
      q->node = o->list[c][rng_below(&r, (int64_t)o->list_len[c])];
    else
      q->node = rng_below(&r, o->nodes);
  }
  return 0;
}

static int64_t now_rel(const worker_t *w) {
  return mono_ns() - w->t0;
}

static void ep_set(worker_t *w, int ci, uint32_t events, int op) {
  struct epoll_event ev = {.events = events,
                           .data.u64 = (uint64_t)w->conns[ci].gen << 32 | (uint32_t)ci};
  if (epoll_ctl(w->ep, op, w->conns[ci].fd, &ev))
    worker_fail(w, "epoll_ctl", errno);
}

static void set_down(worker_t *w, int ci, int64_t now) {
  conn_t *c = &w->conns[ci];
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->state = C_DOWN;
  c->retry_at = now + RECONNECT_DELAY_NS;
  w->n_down++;
}

static void conn_open(worker_t *w, int ci, int64_t now) {
  conn_t *c = &w->conns[ci];
  if (c->state == C_DOWN)
    w->n_down--;
  c->gen++;
  c->fd = socket(w->o->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) {
    worker_fail(w, "socket", errno);
    set_down(w, ci, now);
    return;
  }
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->in_len = 0;
  c->want_out = 1;
  if (connect(c->fd, (const struct sockaddr *)&w->o->addr, w->o->addr_len) &&
      errno != EINPROGRESS) {
    w->connect_errors++;
    set_down(w, ci, now);
    return;
  }
  c->state = C_CONNECTING;
  ep_set(w, ci, EPOLLIN | EPOLLOUT, EPOLL_CTL_ADD);
}

static void free_push(worker_t *w, int ci) {
  w->conns[ci].state = C_IDLE;
  w->free_stack[w->n_free++] = ci;
}

static void free_remove(worker_t *w, int ci) {
  for (int i = 0; i < w->n_free; i++)
    if (w->free_stack[i] == ci) {
      w->free_stack[i] = w->free_stack[--w->n_free];
      return;
    }
}

/* Closes a connection (whatever it carried is settled by the caller) and opens it again. */
static void conn_reopen(worker_t *w, int ci, int64_t now) {
  conn_t *c = &w->conns[ci];
  if (c->state == C_IDLE)
    free_remove(w, ci);
  if (c->state == C_BUSY)
    w->n_busy--;
  if (c->fd >= 0)
    close(c->fd); /* also leaves the epoll set */
  c->fd = -1;
  c->req = NULL;
  c->state = C_CONNECTING; /* not C_DOWN: conn_open must not count it as leaving C_DOWN */
  w->reconnects++;
  conn_open(w, ci, now);
}

static void finish(worker_t *w, req_t *q, int outcome, int status, int64_t now) {
  q->outcome = (uint8_t)outcome;
  q->status = (int16_t)status;
  q->lat = now - q->due;
  w->last_done = now;
}

/* A complete answer with this status. */
static void answered(worker_t *w, req_t *q, int status, int64_t now) {
  int outcome = status / 100 == 2 ? OUT_OK : status == 503 ? OUT_503 : OUT_STATUS;
  /* An answer after the client's deadline is one the client no longer waited for. The server's
   * deadline runs from when the request reached it, so the answer came after that one too when
   * more than the timeout passed since the send (seen only with --deadline-slack-ms: otherwise
   * the client gives up first). */
  if (!w->upd && w->o->timeout_ms > 0) {
    const int64_t limit = w->o->timeout_ms * NS_PER_MS;
    if (now - q->due > limit)
      outcome = OUT_ABANDONED;
    q->after_deadline = now - (q->due + q->lag) > limit;
  }
  finish(w, q, outcome, status, now);
}

/* Writes what is left of the connection's request; 0, or -1 when the connection failed. */
static int conn_write(worker_t *w, int ci) {
  conn_t *c = &w->conns[ci];
  while (c->out_off < c->out_len) {
    ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!c->want_out) {
          c->want_out = 1;
          ep_set(w, ci, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
        }
        return 0;
      }
      return -1;
    }
    c->out_off += (size_t)k;
  }
  if (c->want_out) {
    c->want_out = 0;
    ep_set(w, ci, EPOLLIN, EPOLL_CTL_MOD);
  }
  return 0;
}

/* Room for an update's header block in front of its body (the path is at most 768 bytes, the
 * host 256). */
#define UPD_HEAD 1280

/* The bytes of an update request's buffer: the header block, the body's fixed text and its
 * values. */
static size_t update_buf_bytes(const opts_t *o) {
  return UPD_HEAD + 256 + (size_t)o->dim * VALUE_CHARS;
}

/* Formats graph update q into the connection's buffer: the body first, behind room for the
 * header block, whose length is known only then; the header goes right in front of it, and the
 * send starts there. Feature values are random in [0, 1) with four decimals, written digit by
 * digit: a few ns each, where printf's %g would cost the generator its rate on wide rows. */
static void format_update(worker_t *w, conn_t *c, const req_t *q) {
  const opts_t *o = w->o;
  char *body = c->out + UPD_HEAD, *p = body;
  if (q->cls == UPD_EDGES) {
    p += sprintf(p, "{\"add_edges\":[[%lld,%lld]]}", (long long)q->node, (long long)q->node2);
  } else {
    p += sprintf(p, "{\"update_features\":{\"ids\":[%lld],\"values\":[[", (long long)q->node);
    for (int64_t j = 0; j < o->dim; j++) {
      uint32_t v = (uint32_t)(rng_next(&w->values) >> 32) % 10000u;
      p[0] = '0';
      p[1] = '.';
      p[2] = (char)('0' + v / 1000);
      p[3] = (char)('0' + v / 100 % 10);
      p[4] = (char)('0' + v / 10 % 10);
      p[5] = (char)('0' + v % 10);
      p[6] = ',';
      p += VALUE_CHARS;
    }
    if (o->dim > 0)
      p--; /* the last comma */
    p += sprintf(p, "]]}}");
  }
  char head[UPD_HEAD];
  int hl = snprintf(head, sizeof head,
                    "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    o->gpath, o->host, o->port, (size_t)(p - body));
  if (hl >= (int)sizeof head)
    hl = (int)sizeof head - 1;
  memcpy(body - hl, head, (size_t)hl);
  c->out_off = (size_t)(UPD_HEAD - hl);
  c->out_len = (size_t)(p - c->out);
}

static void conn_send(worker_t *w, int ci, req_t *q, int64_t now) {
  const opts_t *o = w->o;
  conn_t *c = &w->conns[ci];
  if (w->upd) {
    format_update(w, c, q);
    memset(&c->ps, 0, sizeof c->ps);
    c->req = q;
    c->state = C_BUSY;
    w->n_busy++;
    q->lag = now - q->due;
    if (conn_write(w, ci)) {
      finish(w, q, OUT_CONN, 0, now);
      conn_reopen(w, ci, now);
    }
    return;
  }
  char body[BODY_BUF];
  size_t n = (size_t)snprintf(body, sizeof body,
                              "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\","
                              "\"shape\":[1],\"data\":[%lld]}]",
                              (long long)q->node);
  if (o->outputs[0])
    n += (size_t)snprintf(body + n, sizeof body - n, ",\"outputs\":%s", o->outputs);
  int sampled = q->cls == CLS_SAMPLED;
  if (sampled || o->timeout_ms > 0) {
    n += (size_t)snprintf(body + n, sizeof body - n, ",\"parameters\":{");
    const char *sep = "";
    if (sampled) {
      n += (size_t)snprintf(body + n, sizeof body - n, "\"fanouts\":[");
      for (int i = 0; i < o->n_fanouts; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s%d", i ? "," : "", o->fanouts[i]);
      /* A seed per request, below 2^53 so that it is an exact JSON number. */
      uint64_t seed = splitmix64(o->seed ^ ((uint64_t)w->id << 40) ^ (uint64_t)(q - w->reqs)) >> 11;
      n += (size_t)snprintf(body + n, sizeof body - n, "],\"seed\":%llu", (unsigned long long)seed);
      sep = ",";
    }
    if (o->timeout_ms > 0)
      n += (size_t)snprintf(body + n, sizeof body - n, "%s\"timeout_ms\":%lld", sep,
                            (long long)o->timeout_ms);
    n += (size_t)snprintf(body + n, sizeof body - n, "}");
  }
  n += (size_t)snprintf(body + n, sizeof body - n, "}");
  int hl = snprintf(c->out, c->out_cap,
                    "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n%s",
                    o->path, o->host, o->port, n, body);
  c->out_len = (size_t)hl < c->out_cap ? (size_t)hl : c->out_cap - 1;
  c->out_off = 0;
  memset(&c->ps, 0, sizeof c->ps);
  c->req = q;
  c->state = C_BUSY;
  w->n_busy++;
  q->lag = now - q->due;
  if (conn_write(w, ci)) {
    finish(w, q, OUT_CONN, 0, now);
    conn_reopen(w, ci, now);
  }
}

/* A response completed, failed or the connection ended: settle the request in flight. */
static void conn_read(worker_t *w, int ci) {
  conn_t *c = &w->conns[ci];
  for (;;) {
    ssize_t k = recv(c->fd, c->in + c->in_len, IN_BUF - c->in_len, 0);
    int64_t now = now_rel(w);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (k <= 0) { /* end of the connection, or an error */
      if (c->state == C_BUSY) {
        req_t *q = c->req;
        if (c->ps.state == P_EOF_BODY && k == 0) /* the close ends the body */
          answered(w, q, c->ps.status, now);
        else
          finish(w, q, OUT_CONN, 0, now);
      }
      /* An idle keep-alive connection the server closed is simply opened again. */
      conn_reopen(w, ci, now);
      return;
    }
    if (c->state != C_BUSY) { /* bytes nobody asked for: the connection is out of step */
      conn_reopen(w, ci, now);
      return;
    }
    c->in_len += (size_t)k;
    int r = resp_feed(&c->ps, c->in, &c->in_len);
    if (r == 0) {
      if (c->in_len == IN_BUF) { /* a header line that does not fit: not a server we can read */
        finish(w, c->req, OUT_CONN, 0, now);
        conn_reopen(w, ci, now);
        return;
      }
      continue;
    }
    req_t *q = c->req;
    if (r < 0) {
      finish(w, q, OUT_CONN, 0, now);
      conn_reopen(w, ci, now);
      return;
    }
    answered(w, q, c->ps.status, now);
    if (!c->ps.keep_alive || c->in_len) {
      conn_reopen(w, ci, now);
      return;
    }
    c->req = NULL;
    w->n_busy--;
    free_push(w, ci);
    return;
  }
}

static void conn_event(worker_t *w, int ci, uint32_t ev);

/* An event of a socket closed earlier in the same epoll_wait batch belongs to no connection. */
static void dispatch(worker_t *w, struct epoll_event ev) {
  int ci = (int)(uint32_t)ev.data.u64;
  if (ci < w->n_conns && w->conns[ci].gen == (uint32_t)(ev.data.u64 >> 32) && w->conns[ci].fd >= 0)
    conn_event(w, ci, ev.events);
}

static void conn_event(worker_t *w, int ci, uint32_t ev) {
  conn_t *c = &w->conns[ci];
  int64_t now = now_rel(w);
  if (c->state == C_CONNECTING) {
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
      w->connect_errors++;
      set_down(w, ci, now);
      return;
    }
    if (!(ev & EPOLLOUT))
      return;
    c->want_out = 0;
    ep_set(w, ci, EPOLLIN, EPOLL_CTL_MOD);
    free_push(w, ci);
    return;
  }
  if (c->state == C_BUSY && (ev & EPOLLOUT) && c->out_off < c->out_len) {
    if (conn_write(w, ci)) {
      finish(w, c->req, OUT_CONN, 0, now);
      conn_reopen(w, ci, now);
      return;
    }
  }
  if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
    conn_read(w, ci);
}

/* Abandons in-flight requests past their deadline and slack (`limit`; closing their connections,
 * which the server sees as a disconnect) and queued ones that can no longer be sent before their
 * deadline (`unsent_limit`). */
static void expire(worker_t *w, int64_t now, int64_t limit, int64_t unsent_limit) {
  for (int ci = 0; ci < w->n_conns; ci++) {
    conn_t *c = &w->conns[ci];
    if (c->state == C_BUSY && now - c->req->due > limit) {
      finish(w, c->req, OUT_ABANDONED, 0, now);
      conn_reopen(w, ci, now);
    }
  }
  while (w->next < w->n_reqs && now - w->reqs[w->next].due > unsent_limit) {
    finish(w, &w->reqs[w->next], OUT_UNSENT, 0, now);
    w->next++;
  }
}

static void arm(worker_t *w, int64_t target) {
  if (target == w->armed)
    return;
  struct itimerspec its = {{0, 0}, {0, 0}};
  if (target >= 0) {
    int64_t abs_ns = w->t0 + target;
    its.it_value.tv_sec = (time_t)(abs_ns / NS_PER_S);
    its.it_value.tv_nsec = (long)(abs_ns % NS_PER_S);
  }
  if (timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL))
    worker_fail(w, "timerfd_settime", errno);
  w->armed = target;
}

#ifdef SYS_epoll_pwait2
static atomic_int g_no_pwait2; /* the kernel is older than 5.11 */
#endif

/* Waits for events until `target` (ns after the start). epoll_pwait2 takes the timeout in ns,
 * one system call; without it, a timerfd armed at the target stands in for the timeout (one
 * more call whenever the target moves). */
static int wait_until(worker_t *w, struct epoll_event *evs, int64_t target) {
  int64_t d = target - now_rel(w);
  if (d <= 0)
    return epoll_wait(w->ep, evs, EVENTS, 0);
#ifdef SYS_epoll_pwait2
  if (!atomic_load_explicit(&g_no_pwait2, memory_order_relaxed)) {
    struct timespec ts = {.tv_sec = (time_t)(d / NS_PER_S), .tv_nsec = (long)(d % NS_PER_S)};
    int n = (int)syscall(SYS_epoll_pwait2, w->ep, evs, EVENTS, &ts, NULL, (size_t)0);
    if (n >= 0 || errno != ENOSYS)
      return n;
    atomic_store_explicit(&g_no_pwait2, 1, memory_order_relaxed);
  }
#endif
  arm(w, target);
  return epoll_wait(w->ep, evs, EVENTS, -1);
}

static void run_loop(worker_t *w) {
  const opts_t *o = w->o;
  /* Updates carry no deadline: only the drain's end abandons them. */
  const int64_t timeout = !w->upd && o->timeout_ms > 0 ? o->timeout_ms * NS_PER_MS : -1;
  const int64_t give_up = timeout > 0 ? timeout + o->slack_ms * NS_PER_MS : -1;
  const int64_t end = (int64_t)(o->duration * (double)NS_PER_S);
  const int64_t drain_end = end + (int64_t)(o->drain * (double)NS_PER_S);
  int64_t next_scan = 0;
  struct epoll_event evs[EVENTS];
  for (;;) {
    int64_t now = now_rel(w);
    if (timeout > 0 && now >= next_scan) {
      expire(w, now, give_up, timeout);
      next_scan = now + SCAN_NS;
    }
    if (now >= drain_end) { /* the server did not answer in time: what is left is abandoned */
      expire(w, now, -1, -1);
      break;
    }
    for (int ci = 0; w->n_down && ci < w->n_conns; ci++)
      if (w->conns[ci].state == C_DOWN && w->conns[ci].retry_at <= now)
        conn_open(w, ci, now);
    while (w->next < w->n_reqs && w->reqs[w->next].due <= now) {
      req_t *q = &w->reqs[w->next];
      if (timeout > 0 && now - q->due > timeout) {
        finish(w, q, OUT_UNSENT, 0, now);
        w->next++;
        continue;
      }
      if (!w->n_free)
        break;
      w->next++;
      conn_send(w, w->free_stack[--w->n_free], q, now);
      now = now_rel(w);
    }
    if (w->next == w->n_reqs && w->n_busy == 0)
      break;
    /* Sleep until the next thing to do: a send (when a connection is free to take it), a
     * deadline scan, a reconnect, or the end of the drain. */
    int64_t target = drain_end;
    if (w->next < w->n_reqs && w->n_free && w->reqs[w->next].due < target)
      target = w->reqs[w->next].due;
    if (timeout > 0 && (w->n_busy || w->next < w->n_reqs) && next_scan < target)
      target = next_scan;
    for (int ci = 0; w->n_down && ci < w->n_conns; ci++)
      if (w->conns[ci].state == C_DOWN && w->conns[ci].retry_at < target)
        target = w->conns[ci].retry_at;
    int ne = wait_until(w, evs, target);
    if (ne < 0 && errno != EINTR) {
      worker_fail(w, "epoll_wait", errno);
      break;
    }
    for (int i = 0; i < ne; i++) {
      if (evs[i].data.u64 == TIMER_TAG) {
        /* Expired: the next arm() sets it again, even for the same target, and setting a
         * timerfd clears its readiness, so it needs no read. */
        w->armed = -1;
        continue;
      }
      dispatch(w, evs[i]);
    }
  }
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  const opts_t *o = w->o;
  int ok = build_schedule(w) == 0;
  if (!ok)
    snprintf(w->err, sizeof w->err, "out of memory for the schedule");
  w->ep = epoll_create1(EPOLL_CLOEXEC);
  w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  w->conns = calloc((size_t)w->n_conns, sizeof *w->conns);
  w->free_stack = calloc((size_t)w->n_conns, sizeof *w->free_stack);
  char *inbufs = malloc((size_t)w->n_conns * IN_BUF);
  const size_t out_cap = w->upd ? update_buf_bytes(o) : REQ_BUF;
  char *outbufs = malloc((size_t)w->n_conns * out_cap);
  w->armed = -1;
  if (ok && (w->ep < 0 || w->tfd < 0 || !w->conns || !w->free_stack || !inbufs || !outbufs)) {
    snprintf(w->err, sizeof w->err, "cannot set up the thread: %s", strerror(errno));
    ok = 0;
  }
  if (ok) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TIMER_TAG};
    epoll_ctl(w->ep, EPOLL_CTL_ADD, w->tfd, &ev);
    /* Open every connection before the clock starts, so the first arrivals find them. */
    int64_t start = mono_ns();
    w->t0 = start;
    for (int ci = 0; ci < w->n_conns; ci++) {
      w->conns[ci].fd = -1;
      w->conns[ci].state = C_CONNECTING;
      w->conns[ci].in = inbufs + (size_t)ci * IN_BUF;
      w->conns[ci].out = outbufs + (size_t)ci * out_cap;
      w->conns[ci].out_cap = out_cap;
      conn_open(w, ci, 0);
    }
    /* A refused connection is tried again (a server whose listen queue overflowed refuses some
     * of many simultaneous connects) unless every one was refused: then nothing listens. */
    struct epoll_event evs[EVENTS];
    while (w->n_free < w->n_conns && !w->err[0]) {
      int64_t now = mono_ns() - start, left = CONNECT_LIMIT_NS - now;
      if (left <= 0 || w->n_down == w->n_conns) {
        snprintf(w->err, sizeof w->err, "cannot connect to %s port %d%s", o->host, o->port,
                 w->n_down ? " (refused)" : " (no answer in 5 s)");
        break;
      }
      int64_t wait = left;
      for (int ci = 0; w->n_down && ci < w->n_conns; ci++)
        if (w->conns[ci].state == C_DOWN) {
          if (w->conns[ci].retry_at <= now)
            conn_open(w, ci, now);
          else if (w->conns[ci].retry_at - now < wait)
            wait = w->conns[ci].retry_at - now;
        }
      int ne = epoll_wait(w->ep, evs, EVENTS, (int)(wait / NS_PER_MS) + 1);
      for (int i = 0; i < ne; i++)
        if (evs[i].data.u64 != TIMER_TAG)
          dispatch(w, evs[i]);
    }
    ok = !w->err[0];
  }
  pthread_barrier_wait(&g_barrier); /* every thread connected (or failed) */
  pthread_barrier_wait(&g_barrier); /* main has set g_t0 or g_abort */
  if (ok && !g_abort) {
    /* Timeouts of this thread fire within 1 us of their time instead of the default 50 us of
     * slack: a send's lateness is charged to the server's latency. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    w->t0 = g_t0;
    w->reconnects = 0;
    run_loop(w);
  }
  for (int ci = 0; ci < w->n_conns && w->conns; ci++)
    if (w->conns[ci].fd >= 0)
      close(w->conns[ci].fd);
  if (w->ep >= 0)
    close(w->ep);
  if (w->tfd >= 0)
    close(w->tfd);
  free(inbufs);
  free(outbufs);
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* The report                                                                                  */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

typedef struct {
  size_t count;
  double mean, p50, p90, p99, p999, max; /* ms */
} lat_t;

/* Nearest-rank percentiles of n latencies in ns (sorts them). */
static lat_t latency_stats(int64_t *v, size_t n) {
  lat_t s = {0};
  s.count = n;
  if (!n)
    return s;
  qsort(v, n, sizeof *v, cmp_i64);
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += (double)v[i];
  s.mean = sum / (double)n / 1e6;
  const double q[4] = {0.50, 0.90, 0.99, 0.999};
  double *out[4] = {&s.p50, &s.p90, &s.p99, &s.p999};
  for (int k = 0; k < 4; k++) {
    size_t rank = (size_t)ceil(q[k] * (double)n);
    *out[k] = (double)v[rank ? rank - 1 : 0] / 1e6;
  }
  s.max = (double)v[n - 1] / 1e6;
  return s;
}

typedef struct {
  size_t scheduled, sent, ok, refused, errors, abandoned, unsent, late, good, after_deadline;
  size_t by_status[MAX_STATUS], conn_errors;
  int64_t *ok_lat, *refused_lat, *lag;
  size_t n_ok_lat, n_refused_lat, n_lag;
} tally_t;

static int tally_alloc(tally_t *t, size_t n) {
  t->ok_lat = malloc((n + 1) * sizeof(int64_t));
  t->refused_lat = malloc((n + 1) * sizeof(int64_t));
  t->lag = malloc((n + 1) * sizeof(int64_t));
  return t->ok_lat && t->refused_lat && t->lag ? 0 : -1;
}

static void tally_free(tally_t *t) {
  free(t->ok_lat);
  free(t->refused_lat);
  free(t->lag);
}

/* Counts request q in x; `timeout` (ns) bounds the answers that count as goodput. */
static void tally_add(tally_t *x, const req_t *q, int64_t timeout) {
  x->scheduled++;
  if (q->outcome != OUT_UNSENT) {
    x->sent++;
    x->lag[x->n_lag++] = q->lag;
    x->late += q->lag > LATE_NS;
  }
  x->after_deadline += q->after_deadline;
  switch (q->outcome) {
  case OUT_OK:
    x->ok++;
    x->good += q->lat <= timeout;
    x->ok_lat[x->n_ok_lat++] = q->lat;
    break;
  case OUT_503:
    x->refused++;
    x->refused_lat[x->n_refused_lat++] = q->lat;
    break;
  case OUT_STATUS:
    x->errors++;
    x->by_status[q->status >= 0 && q->status < MAX_STATUS ? q->status : 0]++;
    break;
  case OUT_CONN:
    x->errors++;
    x->conn_errors++;
    break;
  case OUT_UNSENT:
    x->unsent++;
    x->abandoned++;
    break;
  default: /* OUT_ABANDONED; OUT_PENDING cannot remain after the drain */
    x->abandoned++;
    break;
  }
}

static void json_lat(FILE *f, const char *key, const lat_t *s) {
  if (!s->count) {
    fprintf(f, "\"%s\":null", key);
    return;
  }
  fprintf(f,
          "\"%s\":{\"count\":%zu,\"mean\":%.4f,\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f,"
          "\"p999\":%.4f,\"max\":%.4f}",
          key, s->count, s->mean, s->p50, s->p90, s->p99, s->p999, s->max);
}

static void json_class(FILE *f, const char *name, tally_t *t, double span) {
  lat_t ok = latency_stats(t->ok_lat, t->n_ok_lat);
  lat_t ref = latency_stats(t->refused_lat, t->n_refused_lat);
  fprintf(f,
          "\"%s\":{\"scheduled\":%zu,\"sent\":%zu,\"ok\":%zu,\"refused_503\":%zu,"
          "\"errors\":%zu,\"abandoned\":%zu,\"abandoned_unsent\":%zu,\"late_sends\":%zu,"
          "\"answered_after_deadline\":%zu,\"achieved_rate\":%.3f,\"goodput_rate\":%.3f,"
          "\"errors_by_status\":{",
          name, t->scheduled, t->sent, t->ok, t->refused, t->errors, t->abandoned, t->unsent,
          t->late, t->after_deadline, (double)t->ok / span, (double)t->good / span);
  const char *sep = "";
  for (int s = 0; s < MAX_STATUS; s++)
    if (t->by_status[s]) {
      fprintf(f, "%s\"%d\":%zu", sep, s, t->by_status[s]);
      sep = ",";
    }
  if (t->conn_errors)
    fprintf(f, "%s\"connection\":%zu", sep, t->conn_errors);
  fputs("},", f);
  json_lat(f, "latency_ms", &ok);
  fputc(',', f);
  json_lat(f, "refused_latency_ms", &ref);
  fputc('}', f);
}

static void table_row(const char *name, tally_t *t, double span) {
  lat_t ok = latency_stats(t->ok_lat, t->n_ok_lat);
  lat_t ref = latency_stats(t->refused_lat, t->n_refused_lat);
  fprintf(stderr, "%-8s %9zu %9zu %9zu %7zu %6zu %7zu %10.1f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n",
          name, t->scheduled, t->sent, t->ok, t->refused, t->errors, t->abandoned,
          (double)t->good / span, ok.p50, ok.p90, ok.p99, ok.p999, ok.max, ref.p99);
}

/* ws[0, n_infer) send infer requests, ws[n_infer, n_workers) updates. */
static int report(const opts_t *o, worker_t *ws, int n_infer, int n_workers, double wall,
                  const char *json_path) {
  tally_t t[CLS_COUNT + 1], tu;
  memset(t, 0, sizeof t);
  memset(&tu, 0, sizeof tu);
  size_t total = 0, total_u = 0;
  for (int i = 0; i < n_workers; i++)
    *(i < n_infer ? &total : &total_u) += ws[i].n_reqs;
  int bad_alloc = tally_alloc(&tu, total_u);
  for (int c = 0; c <= CLS_COUNT; c++)
    bad_alloc |= tally_alloc(&t[c], total);
  if (bad_alloc) {
    fprintf(stderr, "loadgen: out of memory for the report\n");
    return 1;
  }
  const int64_t warm = (int64_t)(o->warmup * (double)NS_PER_S);
  const int64_t timeout = o->timeout_ms > 0 ? o->timeout_ms * NS_PER_MS : INT64_MAX;
  size_t warmup_skipped = 0;
  uint64_t connect_errors = 0;
  int64_t last_end = 0; /* when the last measured request was answered or given up */
  for (int i = 0; i < n_workers; i++) {
    connect_errors += ws[i].connect_errors;
    for (size_t k = 0; k < ws[i].n_reqs; k++) {
      const req_t *q = &ws[i].reqs[k];
      if (q->due < warm) {
        warmup_skipped += i < n_infer;
        continue;
      }
      if (q->due + q->lat > last_end)
        last_end = q->due + q->lat;
      if (i >= n_infer) {
        tally_add(&tu, q, INT64_MAX);
        continue;
      }
      tally_add(&t[q->cls], q, timeout);
      tally_add(&t[CLS_COUNT], q, timeout);
    }
  }
  /* Rates are over the measured window: from the end of the warmup to the last answer (or
   * abandonment), at least to the end of the arrivals. A server that falls behind answers after
   * the arrivals end, and its rate must not be counted as if it had kept up. */
  double end_s = (double)last_end / 1e9;
  double span = (end_s > o->duration ? end_s : o->duration) - o->warmup;
  FILE *f = stdout;
  if (json_path && strcmp(json_path, "-")) {
    f = fopen(json_path, "w");
    if (!f) {
      fprintf(stderr, "loadgen: %s: %s\n", json_path, strerror(errno));
      return 1;
    }
  }
  tally_t *all = &t[CLS_COUNT];
  lat_t lag = latency_stats(all->lag, all->n_lag);
  fprintf(f, "{\"url\":\"%s\",\"offered_rate\":%.3f,\"arrivals\":\"%s\",\"duration_s\":%.3f,",
          o->url, o->rate, o->poisson ? "poisson" : "constant", o->duration);
  fprintf(f,
          "\"warmup_s\":%.3f,\"measured_s\":%.3f,\"wall_s\":%.3f,\"connections\":%d,"
          "\"threads\":%d,\"timeout_ms\":%lld,\"deadline_slack_ms\":%lld,\"nodes\":%lld,"
          "\"seed\":%llu,\"fanouts\":[",
          o->warmup, span, wall, o->connections, o->threads, (long long)o->timeout_ms,
          (long long)o->slack_ms, (long long)o->nodes, (unsigned long long)o->seed);
  for (int i = 0; i < o->n_fanouts; i++)
    fprintf(f, "%s%d", i ? "," : "", o->fanouts[i]);
  fputs("],\"mix\":{", f);
  const char *sep = "";
  for (int c = 0; c < CLS_COUNT; c++)
    if (o->mix[c] > 0) {
      fprintf(f, "%s\"%s\":%.6f", sep, cls_name[c], o->mix[c]);
      sep = ",";
    }
  fprintf(
      f,
      "},\"warmup_requests\":%zu,\"scheduled\":%zu,\"sent\":%zu,\"ok\":%zu,"
      "\"refused_503\":%zu,\"errors\":%zu,\"abandoned\":%zu,\"answered_after_deadline\":%zu,"
      "\"achieved_rate\":%.3f,\"goodput_rate\":%.3f,\"late_sends\":%zu,\"connect_errors\":%llu,",
      warmup_skipped, all->scheduled, all->sent, all->ok, all->refused, all->errors, all->abandoned,
      all->after_deadline, (double)all->ok / span, (double)all->good / span, all->late,
      (unsigned long long)connect_errors);
  json_lat(f, "send_lag_ms", &lag);
  fputs(",\"classes\":{", f);
  sep = "";
  for (int c = 0; c <= CLS_COUNT; c++) {
    if (c < CLS_COUNT && o->mix[c] <= 0)
      continue;
    fputs(sep, f);
    json_class(f, c < CLS_COUNT ? cls_name[c] : "all", &t[c], span);
    sep = ",";
  }
  fputc('}', f);
  lat_t ulag = latency_stats(tu.lag, tu.n_lag);
  if (o->update_rate > 0) {
    fprintf(f,
            ",\"update_rate\":%.3f,\"update_kind\":\"%s\",\"update_connections\":%d,"
            "\"update_threads\":%d,\"dim\":%lld,",
            o->update_rate, upd_name[o->update_kind], o->update_connections, o->update_threads,
            (long long)o->dim);
    json_lat(f, "update_send_lag_ms", &ulag);
    fputc(',', f);
    json_class(f, "updates", &tu, span);
  } else {
    fputs(",\"updates\":null", f);
  }
  fputs("}\n", f);
  int bad = ferror(f) != 0;
  if (f != stdout)
    bad |= fclose(f) != 0;
  else
    bad |= fflush(f) != 0;
  if (bad) {
    fprintf(stderr, "loadgen: writing the report failed\n");
    return 1;
  }
  fprintf(stderr,
          "offered %.0f/s (%s) for %.1f s, measured %.1f s: achieved %.0f/s, goodput %.0f/s; "
          "late sends %zu, send lag p99 %.3f ms max %.3f ms\n",
          o->rate, o->poisson ? "poisson" : "constant", o->duration, span, (double)all->ok / span,
          (double)all->good / span, all->late, lag.p99, lag.max);
  fprintf(stderr, "%-8s %9s %9s %9s %7s %6s %7s %10s %8s %8s %8s %8s %8s %8s\n", "class",
          "scheduled", "sent", "2xx", "503", "errors", "abandon", "goodput/s", "p50 ms", "p90",
          "p99", "p99.9", "max", "503 p99");
  for (int c = 0; c <= CLS_COUNT; c++)
    if (c == CLS_COUNT || o->mix[c] > 0)
      table_row(c < CLS_COUNT ? cls_name[c] : "all", &t[c], span);
  if (o->update_rate > 0)
    table_row("updates", &tu, span);
  if (o->timeout_ms > 0) {
    lat_t ref = latency_stats(all->refused_lat, all->n_refused_lat);
    fprintf(stderr,
            "503 answers %zu: p50 %.3f ms, p99 %.3f ms, max %.3f ms; answered after the deadline "
            "(%lld ms from the send): %zu\n",
            ref.count, ref.p50, ref.p99, ref.max, (long long)o->timeout_ms, all->after_deadline);
  }
  if (o->update_rate > 0)
    fprintf(stderr,
            "updates (%s) offered %.0f/s: acknowledged %zu of %zu (%.0f/s), send lag p99 %.3f ms "
            "max %.3f ms\n",
            upd_name[o->update_kind], o->update_rate, tu.ok, tu.scheduled, (double)tu.ok / span,
            ulag.p99, ulag.max);
  tally_free(&tu);
  for (int c = 0; c <= CLS_COUNT; c++)
    tally_free(&t[c]);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The trivial endpoint                                                                        */

static const char trivial_body[] =
    "{\"model_name\":\"trivial\",\"outputs\":[{\"name\":\"class\",\"datatype\":\"INT64\","
    "\"shape\":[1],\"data\":[0]}]}";

typedef struct tconn {
  struct tconn *prev, *next; /* the thread's open connections, closed at the stop */
  int fd;
  char *in;
  size_t in_len, in_cap;
  char *out;
  size_t out_len, out_off, out_cap;
  int close_after;
  int want_out;
} tconn_t;

typedef struct {
  int listen_fd;
  int ep;
  uint64_t served, updates; /* requests answered, of which graph updates (POST .../graph) */
  tconn_t *conns;
} tserver_t;

/* A connection's input buffer grows up to this: a graph update of a wide feature row is larger
 * than IN_BUF. */
#define TRIVIAL_MAX_REQ (16 * 1024 * 1024)

static atomic_int g_stop;
static char g_resp[512];
static size_t g_resp_len;

static void tconn_close(tserver_t *s, tconn_t *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
}

/* Answers every complete request in the buffer; returns -1 when the connection must close. */
static int tconn_serve(tserver_t *s, tconn_t *c) {
  size_t off = 0;
  for (;;) {
    char *e = NULL;
    for (size_t i = off + 3; i < c->in_len; i++)
      if (c->in[i] == '\n' && c->in[i - 1] == '\r' && c->in[i - 2] == '\n' &&
          c->in[i - 3] == '\r') {
        e = c->in + i + 1;
        break;
      }
    if (!e)
      break;
    int64_t cl = 0;
    int close_req = 0, http10 = 0;
    const char *p = c->in + off, *hend = e;
    const char *eol = memchr(p, '\r', (size_t)(hend - p));
    if (eol && eol - p >= 8 && !strncmp(eol - 8, "HTTP/1.0", 8))
      http10 = 1;
    /* "POST /v2/models/NAME/graph HTTP/1.1" */
    const int graph =
        eol && eol - p > 20 && !strncmp(p, "POST ", 5) && !strncmp(eol - 15, "/graph ", 7);
    for (p = eol ? eol + 2 : hend; p < hend;) {
      const char *le = memchr(p, '\r', (size_t)(hend - p));
      if (!le || le == p)
        break;
      const char *v;
      if ((v = header_value(p, le, "Content-Length")))
        cl = strtoll(v, NULL, 10);
      else if ((v = header_value(p, le, "Transfer-Encoding")))
        return -1; /* a calibration target: chunked request bodies are not taken */
      else if ((v = header_value(p, le, "Connection")))
        close_req = value_has_token(v, le, "close");
      p = le + 2;
    }
    size_t hl = (size_t)(e - (c->in + off));
    if (cl < 0 || (size_t)cl > TRIVIAL_MAX_REQ)
      return -1;
    if (c->in_len - off < hl + (size_t)cl)
      break;
    off += hl + (size_t)cl;
    if (c->out_len + g_resp_len > c->out_cap) {
      size_t cap = 2 * (c->out_cap + g_resp_len);
      char *no = realloc(c->out, cap);
      if (!no)
        return -1;
      c->out = no;
      c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, g_resp, g_resp_len);
    c->out_len += g_resp_len;
    s->served++;
    s->updates += (uint64_t)graph;
    if (close_req || http10) {
      c->close_after = 1;
      break;
    }
  }
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
  while (c->out_off < c->out_len) {
    ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!c->want_out) {
          struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
          epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
          c->want_out = 1;
        }
        return 0;
      }
      return -1;
    }
    c->out_off += (size_t)k;
  }
  if (c->want_out) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = 0;
  }
  c->out_len = c->out_off = 0;
  return c->close_after ? -1 : 0;
}

static void *tserver_main(void *arg) {
  tserver_t *s = arg;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[EVENTS];
  epoll_ctl(s->ep, EPOLL_CTL_ADD, s->listen_fd, &ev);
  while (!atomic_load(&g_stop)) {
    /* The timeout only bounds how long a stop takes to be noticed. */
    int ne = epoll_wait(s->ep, evs, EVENTS, 100);
    for (int i = 0; i < ne; i++) {
      tconn_t *c = evs[i].data.ptr;
      if (!c) {
        int fd;
        while ((fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          tconn_t *nc = calloc(1, sizeof *nc);
          if (nc)
            nc->in = malloc(IN_BUF);
          if (!nc || !nc->in) {
            free(nc);
            close(fd);
            continue;
          }
          nc->fd = fd;
          nc->in_cap = IN_BUF;
          struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
          nc->next = s->conns;
          if (s->conns)
            s->conns->prev = nc;
          s->conns = nc;
          if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &cev)) {
            tconn_close(s, nc);
            continue;
          }
        }
        continue;
      }
      int dead = 0;
      if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        ssize_t k = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (k <= 0 && !(k < 0 && (errno == EAGAIN || errno == EINTR)))
          dead = 1;
        else if (k > 0)
          c->in_len += (size_t)k;
        if (!dead && c->in_len == c->in_cap) { /* a large request: a larger buffer */
          char *bigger = c->in_cap < TRIVIAL_MAX_REQ ? realloc(c->in, 2 * c->in_cap) : NULL;
          if (bigger) {
            c->in = bigger;
            c->in_cap *= 2;
          } else {
            dead = 1;
          }
        }
      }
      if (!dead && tconn_serve(s, c))
        dead = 1;
      if (dead)
        tconn_close(s, c); /* closing the fd also removes it from the epoll set */
    }
  }
  while (s->conns)
    tconn_close(s, s->conns);
  return NULL;
}

static void on_stop(int sig) {
  (void)sig;
  atomic_store(&g_stop, 1);
}

static int serve_trivial(const char *host, int port, int threads) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICHOST},
                  *res;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &res);
  if (rc)
    usage_error("--host '%s': %s", host, gai_strerror(rc));
  g_resp_len = (size_t)snprintf(g_resp, sizeof g_resp,
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                "Content-Length: %zu\r\n\r\n%s",
                                sizeof trivial_body - 1, trivial_body);
  /* A handler rather than sigwait: whichever thread the signal lands on (a sanitizer's runtime
   * may have threads of its own that do not block it), it only sets the flag the servers poll. */
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = on_stop;
  sigemptyset(&act.sa_mask);
  sigaction(SIGTERM, &act, NULL);
  sigaction(SIGINT, &act, NULL);
  tserver_t *srv = calloc((size_t)threads, sizeof *srv);
  pthread_t *tids = calloc((size_t)threads, sizeof *tids);
  if (!srv || !tids) {
    fprintf(stderr, "loadgen: out of memory\n");
    return 1;
  }
  /* One listening socket a thread on the same port (SO_REUSEPORT): the kernel spreads the
   * connections, and no accept is shared between threads. */
  for (int i = 0; i < threads; i++) {
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
        bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 4096)) {
      fprintf(stderr, "loadgen: --serve-trivial: %s port %d: %s\n", host, port, strerror(errno));
      return 1;
    }
    if (port == 0) { /* the others bind the port the kernel picked for the first */
      struct sockaddr_storage sa;
      socklen_t sl = sizeof sa;
      getsockname(fd, (struct sockaddr *)&sa, &sl);
      port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                            : ((struct sockaddr_in *)&sa)->sin_port);
      if (sa.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)res->ai_addr)->sin6_port = htons((uint16_t)port);
      else
        ((struct sockaddr_in *)res->ai_addr)->sin_port = htons((uint16_t)port);
    }
    srv[i].listen_fd = fd;
    srv[i].ep = epoll_create1(EPOLL_CLOEXEC);
    if (srv[i].ep < 0) {
      fprintf(stderr, "loadgen: epoll_create1: %s\n", strerror(errno));
      return 1;
    }
  }
  int v6 = res->ai_family == AF_INET6;
  freeaddrinfo(res);
  for (int i = 0; i < threads; i++)
    if (pthread_create(&tids[i], NULL, tserver_main, &srv[i])) {
      fprintf(stderr, "loadgen: cannot start a thread\n");
      return 1;
    }
  printf("listening on http://%s%s%s:%d/v2/models/trivial\n", v6 ? "[" : "", host, v6 ? "]" : "",
         port);
  fflush(stdout);
  uint64_t served = 0, updates = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(tids[i], NULL);
    served += srv[i].served;
    updates += srv[i].updates;
    close(srv[i].listen_fd);
    close(srv[i].ep);
  }
  fprintf(stderr, "loadgen: trivial endpoint answered %llu requests, %llu of them graph updates\n",
          (unsigned long long)served, (unsigned long long)updates);
  free(srv);
  free(tids);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  opts_t *o = calloc(1, sizeof *o);
  if (!o)
    return 1;
  o->duration = 10;
  o->drain = 10;
  o->poisson = 1;
  o->connections = 64;
  o->threads = 2;
  o->seed = 1;
  o->fanouts[0] = 10;
  o->fanouts[1] = 5;
  o->n_fanouts = 2;
  o->update_connections = 16;
  o->update_threads = 1;
  snprintf(o->host, sizeof o->host, "127.0.0.1");
  snprintf(o->outputs, sizeof o->outputs, "[{\"name\":\"class\"}]");
  const char *url = NULL, *model = NULL, *json_path = NULL, *mix = NULL;
  const char *hubs = NULL, *tophubs = NULL;
  int port = -1, trivial_port = -1, fanouts_given = 0, have_rate = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      help();
      return 0;
    }
    if (i + 1 >= argc)
      usage_error("%s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--url"))
      url = v;
    else if (!strcmp(a, "--host"))
      snprintf(o->host, sizeof o->host, "%s", v);
    else if (!strcmp(a, "--port"))
      port = (int)parse_int(a, v, 0, 65535);
    else if (!strcmp(a, "--model"))
      model = v;
    else if (!strcmp(a, "--rate")) {
      o->rate = parse_double(a, v);
      have_rate = 1;
    } else if (!strcmp(a, "--duration"))
      o->duration = parse_double(a, v);
    else if (!strcmp(a, "--warmup"))
      o->warmup = parse_double(a, v);
    else if (!strcmp(a, "--drain"))
      o->drain = parse_double(a, v);
    else if (!strcmp(a, "--arrivals")) {
      if (strcmp(v, "poisson") && strcmp(v, "constant"))
        usage_error("--arrivals: '%s' is not poisson or constant", v);
      o->poisson = !strcmp(v, "poisson");
    } else if (!strcmp(a, "--connections"))
      o->connections = (int)parse_int(a, v, 1, MAX_CONNECTIONS);
    else if (!strcmp(a, "--threads"))
      o->threads = (int)parse_int(a, v, 1, MAX_THREADS);
    else if (!strcmp(a, "--timeout-ms"))
      o->timeout_ms = parse_int(a, v, 0, 24LL * 3600 * 1000);
    else if (!strcmp(a, "--nodes"))
      o->nodes = parse_int(a, v, 1, INT64_MAX);
    else if (!strcmp(a, "--fanouts")) {
      parse_fanouts(o, v);
      fanouts_given = 1;
    } else if (!strcmp(a, "--mix"))
      mix = v;
    else if (!strcmp(a, "--hubs"))
      hubs = v;
    else if (!strcmp(a, "--tophubs"))
      tophubs = v;
    else if (!strcmp(a, "--outputs"))
      parse_outputs(o, v);
    else if (!strcmp(a, "--seed"))
      o->seed = (uint64_t)parse_int(a, v, 0, INT64_MAX);
    else if (!strcmp(a, "--json"))
      json_path = v;
    else if (!strcmp(a, "--deadline-slack-ms"))
      o->slack_ms = parse_int(a, v, 0, 24LL * 3600 * 1000);
    else if (!strcmp(a, "--updates"))
      o->update_rate = parse_double(a, v);
    else if (!strcmp(a, "--update-kind")) {
      int k = 0;
      while (k < 3 && strcmp(v, upd_name[k]))
        k++;
      if (k == 3)
        usage_error("--update-kind: '%s' is not features, edges or mix", v);
      o->update_kind = k;
    } else if (!strcmp(a, "--dim"))
      o->dim = parse_int(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--update-connections"))
      o->update_connections = (int)parse_int(a, v, 1, MAX_CONNECTIONS);
    else if (!strcmp(a, "--update-threads"))
      o->update_threads = (int)parse_int(a, v, 1, MAX_THREADS);
    else if (!strcmp(a, "--serve-trivial"))
      trivial_port = (int)parse_int(a, v, 0, 65535);
    else
      usage_error("unknown option %s", a);
  }
  if (trivial_port >= 0) {
    int rc = serve_trivial(o->host, trivial_port, o->threads);
    free(o);
    return rc;
  }

  if (url && (model || port >= 0))
    usage_error("give --url or --port and --model, not both");
  if (url) {
    parse_url(o, url);
  } else {
    if (port < 1 || !model)
      usage_error("give --url URL, or --port N and --model NAME");
    o->port = port;
    if (strlen(model) > 256 || strchr(model, '/'))
      usage_error("--model: '%s' is not a model name", model);
    snprintf(o->path, sizeof o->path, "/v2/models/%s/infer", model);
    snprintf(o->gpath, sizeof o->gpath, "/v2/models/%s/graph", model);
  }
  int v6 = strchr(o->host, ':') != NULL;
  snprintf(o->url, sizeof o->url, "http://%s%s%s:%d%s", v6 ? "[" : "", o->host, v6 ? "]" : "",
           o->port, o->path);
  if (o->update_rate < 0)
    usage_error("--updates must not be negative");
  if (!have_rate || !(o->rate > 0 || (o->rate == 0 && o->update_rate > 0)))
    usage_error("--rate must be given and positive (or 0 with --updates)");
  if (!(o->duration > 0) || o->warmup < 0 || o->warmup >= o->duration || o->drain < 0)
    usage_error("need --duration > 0, 0 <= --warmup < --duration and --drain >= 0");
  if (o->threads > o->connections)
    usage_error("--threads %d is more than --connections %d", o->threads, o->connections);
  if ((o->rate + o->update_rate) * o->duration > 1e9)
    usage_error("--rate x --duration is over 10^9 requests");
  if (o->update_rate > 0) {
    if (o->nodes < 1 || (o->update_kind != UPD_FEATURES && o->nodes < 2))
      usage_error("--updates needs --nodes N (at least 2 for edges)");
    if (o->update_kind != UPD_EDGES && o->dim < 1)
      usage_error("--updates of features need --dim D (the model's feature_dim)");
    if (o->update_threads > o->update_connections)
      usage_error("--update-threads %d is more than --update-connections %d", o->update_threads,
                  o->update_connections);
  }
  if (mix)
    parse_mix(o, mix);
  else
    o->mix[fanouts_given ? CLS_SAMPLED : CLS_FULL] = 1;
  if (o->rate > 0 && (o->mix[CLS_FULL] > 0 || o->mix[CLS_SAMPLED] > 0) && o->nodes < 1)
    usage_error("classes full and sampled need --nodes N");
  if (o->mix[CLS_HUB] > 0) {
    if (!hubs)
      usage_error("class hub needs --hubs FILE");
    read_list(o, CLS_HUB, hubs);
  }
  if (o->mix[CLS_TOPHUB] > 0) {
    if (!tophubs)
      usage_error("class tophub needs --tophubs FILE");
    read_list(o, CLS_TOPHUB, tophubs);
  }
  resolve(o);

  /* The infer threads first, then the update threads. */
  const int n_infer = o->rate > 0 ? o->threads : 0;
  const int n_upd = o->update_rate > 0 ? o->update_threads : 0;
  const int n_workers = n_infer + n_upd;
  worker_t *ws = calloc((size_t)n_workers, sizeof *ws);
  pthread_t *tids = calloc((size_t)n_workers, sizeof *tids);
  if (!ws || !tids || pthread_barrier_init(&g_barrier, NULL, (unsigned)n_workers + 1)) {
    fprintf(stderr, "loadgen: cannot set up the threads\n");
    return 1;
  }
  for (int i = 0; i < n_workers; i++) {
    const int upd = i >= n_infer, id = upd ? i - n_infer : i;
    const int peers = upd ? n_upd : n_infer;
    const int conns = upd ? o->update_connections : o->connections;
    ws[i].id = id;
    ws[i].upd = upd;
    ws[i].n_peers = peers;
    ws[i].o = o;
    ws[i].ep = ws[i].tfd = -1;
    ws[i].n_conns = conns / peers + (id < conns % peers);
    if (pthread_create(&tids[i], NULL, worker_main, &ws[i])) {
      fprintf(stderr, "loadgen: cannot start thread %d\n", i);
      return 1;
    }
  }
  pthread_barrier_wait(&g_barrier);
  int failed = 0;
  for (int i = 0; i < n_workers; i++)
    if (ws[i].err[0]) {
      if (!failed)
        fprintf(stderr, "loadgen: %s\n", ws[i].err);
      failed = 1;
    }
  g_t0 = mono_ns() + START_DELAY_NS;
  g_abort = failed;
  pthread_barrier_wait(&g_barrier);
  for (int i = 0; i < n_workers; i++)
    pthread_join(tids[i], NULL);
  double wall = (double)(mono_ns() - g_t0) / 1e9;
  for (int i = 0; i < n_workers && !failed; i++)
    if (ws[i].err[0]) {
      fprintf(stderr, "loadgen: %s\n", ws[i].err);
      failed = 1;
    }
  int rc = failed ? 1 : report(o, ws, n_infer, n_workers, wall, json_path);
  for (int i = 0; i < n_workers; i++) {
    free(ws[i].reqs);
    free(ws[i].conns);
    free(ws[i].free_stack);
  }
  free(ws);
  free(tids);
  for (int c = 0; c < CLS_COUNT; c++)
    free(o->list[c]);
  free(o);
  return rc;
}
