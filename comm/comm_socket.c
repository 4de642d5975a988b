/* The communicator over TCP sockets (the built-in launcher, `neargnn train --ranks N`, and any
 * launcher that sets the same variables): rank 0 listens on NG_DIST_ADDR=host:port (or on the
 * listening socket it inherited as NG_DIST_LISTEN_FD), every other rank connects to it. The
 * collectives run through rank 0 (a star): it gathers the contributions, sums them in rank order
 * and sends the result to every rank. Gradients of the CPU backend are small (the model's
 * parameters), and the GPU backend reduces its own over NCCL, so a star is enough. */
#include "comm_impl.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC 0x6e676430u /* "ngd0" */

typedef struct {
  int *fd; /* rank 0: [size] the socket of each rank (fd[0] unused); others: fd[0] = rank 0's */
  /* The all-to-all's headers ([size][2 size] on rank 0, one row elsewhere) and rank 0's offsets
   * of the blocks it keeps ([size]), allocated with the communicator. */
  uint64_t *hdr;
  size_t *at;
} sock_comm;

static ng_status send_all(int fd, const void *buf, size_t bytes, int peer) {
  const char *p = buf;
  while (bytes > 0) {
    ssize_t k = send(fd, p, bytes, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return ng__err_errno(NG_ERR_IO, errno,
                           "distributed: sending to rank %d failed (did it stop?)", peer);
    p += k;
    bytes -= (size_t)k;
  }
  return NG_OK;
}

static ng_status recv_all(int fd, void *buf, size_t bytes, int peer) {
  char *p = buf;
  while (bytes > 0) {
    ssize_t k = recv(fd, p, bytes, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k == 0)
      return ng__err(NG_ERR_IO,
                     "distributed: rank %d closed its connection (it failed or "
                     "stopped; its own message says why)",
                     peer);
    if (k < 0)
      return ng__err_errno(NG_ERR_IO, errno, "distributed: receiving from rank %d failed", peer);
    p += k;
    bytes -= (size_t)k;
  }
  return NG_OK;
}

static sock_comm *sc(struct ng_comm *c) {
  return c->impl;
}

static ng_status scratch(struct ng_comm *c, size_t bytes) {
  return ng__host_reserve(&c->scratch, &c->scratch_cap, bytes, "the all-reduce's buffer");
}

static ng_status s_allreduce(struct ng_comm *c, void *x, int64_t n, bool f64) {
  const size_t bytes = (size_t)n * (f64 ? sizeof(double) : sizeof(float));
  int *fd = sc(c)->fd;
  if (c->rank != 0) {
    NG_CHECK(send_all(fd[0], x, bytes, 0));
    return recv_all(fd[0], x, bytes, 0);
  }
  NG_CHECK(scratch(c, bytes * (size_t)c->size));
  char *parts = c->scratch;
  memcpy(parts, x, bytes);
  for (int r = 1; r < c->size; r++)
    NG_CHECK(recv_all(fd[r], parts + (size_t)r * bytes, bytes, r));
  ng__comm_sum(x, parts, c->size, n, f64);
  for (int r = 1; r < c->size; r++)
    NG_CHECK(send_all(fd[r], x, bytes, r));
  return NG_OK;
}

static ng_status s_bcast(struct ng_comm *c, void *buf, size_t bytes, int root) {
  int *fd = sc(c)->fd;
  if (c->rank != 0) {
    if (c->rank == root)
      return send_all(fd[0], buf, bytes, 0);
    return recv_all(fd[0], buf, bytes, 0);
  }
  if (root != 0)
    NG_CHECK(recv_all(fd[root], buf, bytes, root));
  for (int r = 1; r < c->size; r++)
    if (r != root)
      NG_CHECK(send_all(fd[r], buf, bytes, r));
  return NG_OK;
}

static ng_status s_allgather(struct ng_comm *c, const void *in, void *out, size_t bytes) {
  int *fd = sc(c)->fd;
  const size_t all = bytes * (size_t)c->size;
  if (c->rank != 0) {
    NG_CHECK(send_all(fd[0], in, bytes, 0));
    return recv_all(fd[0], out, all, 0);
  }
  memmove(out, in, bytes);
  for (int r = 1; r < c->size; r++)
    NG_CHECK(recv_all(fd[r], (char *)out + (size_t)r * bytes, bytes, r));
  for (int r = 1; r < c->size; r++)
    NG_CHECK(send_all(fd[r], out, all, r));
  return NG_OK;
}

/* The all-to-all's verdict, which rank 0 sends every rank before any block: whether every pair
 * of ranks agreed on its block's size, and if not the first pair that did not (by sending rank,
 * then receiving rank). Every rank gets the same one, so that a mismatch is an error on every
 * rank at the same point of the protocol, and no block of a failed exchange is left in a socket
 * to be read as the next collective's data. */
typedef struct {
  uint64_t bad; /* 0: the sizes agree; else the sending rank + 1 */
  uint64_t dst, sent, expected;
} a2a_verdict;

static ng_status verdict_error(const a2a_verdict *v, int me) {
  return ng__err(NG_ERR_INVALID_ARG,
                 "distributed: all-to-all: rank %llu sends %llu bytes to rank %llu, which expects "
                 "%llu (the ranks disagree on the exchange's sizes; seen on rank %d, and every "
                 "rank stopped this exchange)",
                 (unsigned long long)(v->bad - 1), (unsigned long long)v->sent,
                 (unsigned long long)v->dst, (unsigned long long)v->expected, me);
}

/* Through rank 0, as the other collectives: every other rank sends it a header of its block
 * sizes (those it sends, then those it expects) and its blocks for the others; rank 0 keeps
 * them, checks that every pair agrees, and sends each rank the verdict and, when the sizes
 * agree, its blocks in source-rank order. A rank sends everything before it receives anything
 * and rank 0 receives everything before it sends, so no two ranks wait on each other; rank 0
 * reads every block a rank sent by that rank's own sizes, so the sockets are drained whatever
 * the verdict. The headers, offsets and kept blocks live in the communicator (no allocation
 * once they have grown to the exchange's size). */
static ng_status s_alltoallv(struct ng_comm *c, const void *send, const size_t *send_bytes,
                             void *recv, const size_t *recv_bytes) {
  sock_comm *s = sc(c);
  int *fd = s->fd;
  const int n = c->size, me = c->rank;
  const size_t row = 2 * (size_t)n; /* one rank's header: sizes sent, then sizes expected */
  const char *src = send;
  char *dst = recv;
  uint64_t *hdr = s->hdr;
  a2a_verdict v = {0, 0, 0, 0};
  if (me != 0) {
    for (int q = 0; q < n; q++) {
      hdr[q] = send_bytes[q];
      hdr[n + q] = recv_bytes[q];
    }
    NG_CHECK(send_all(fd[0], hdr, row * sizeof *hdr, 0));
    size_t off = 0;
    for (int q = 0; q < n; q++) {
      if (q != me && send_bytes[q] > 0)
        NG_CHECK(send_all(fd[0], src + off, send_bytes[q], 0));
      off += send_bytes[q];
    }
    NG_CHECK(recv_all(fd[0], &v, sizeof v, 0));
    if (v.bad)
      return verdict_error(&v, me);
    off = 0;
    for (int p = 0; p < n; p++) {
      if (p != me && recv_bytes[p] > 0)
        NG_CHECK(recv_all(fd[0], dst + off, recv_bytes[p], 0));
      off += recv_bytes[p];
    }
    return NG_OK;
  }
  /* Rank 0: row p of hdr is rank p's header; rank p's blocks for ranks other than itself are
   * kept back to back in the scratch, from at[p]. */
  size_t *at = s->at;
  for (int q = 0; q < n; q++) {
    hdr[q] = send_bytes[q];
    hdr[n + q] = recv_bytes[q];
  }
  size_t total = 0;
  for (int p = 1; p < n; p++) {
    uint64_t *h = hdr + (size_t)p * row;
    NG_CHECK(recv_all(fd[p], h, row * sizeof *h, p));
    size_t mine = 0;
    for (int q = 0; q < n; q++)
      if (q != p)
        mine += (size_t)h[q];
    at[p] = total;
    total += mine;
    NG_CHECK(ng__host_reserve(&c->scratch, &c->scratch_cap, NG_MAX(total, (size_t)1),
                              "the all-to-all's blocks"));
    if (mine > 0)
      NG_CHECK(recv_all(fd[p], (char *)c->scratch + at[p], mine, p));
  }
  /* Every pair: what p sends q is what q expects from p (p == q too: a rank whose own block does
   * not fit fails the exchange for all). */
  for (int p = 0; p < n && !v.bad; p++)
    for (int q = 0; q < n && !v.bad; q++) {
      const uint64_t sent = hdr[(size_t)p * row + (size_t)q];
      const uint64_t expected = hdr[(size_t)q * row + (size_t)n + (size_t)p];
      if (sent != expected) /* its own block included, which comm.c copies */
        v = (a2a_verdict){(uint64_t)p + 1, (uint64_t)q, sent, expected};
    }
  /* Rank 0's own share: each rank's block for it is the first of its kept blocks. */
  size_t off = recv_bytes[0];
  for (int p = 1; p < n && !v.bad; p++) {
    memcpy(dst + off, (char *)c->scratch + at[p], recv_bytes[p]);
    off += recv_bytes[p];
  }
  for (int q = 1; q < n; q++) {
    NG_CHECK(send_all(fd[q], &v, sizeof v, q));
    for (int p = 0; p < n && !v.bad; p++) {
      const size_t bytes = (size_t)hdr[(size_t)p * row + (size_t)q];
      if (p == q || bytes == 0)
        continue;
      const char *block = NULL;
      if (p == 0) {
        size_t o = 0;
        for (int k = 0; k < q; k++)
          o += send_bytes[k];
        block = src + o;
      } else { /* rank p's kept blocks skip its own: those for ranks below q, but not p */
        size_t o = at[p];
        for (int k = 0; k < q; k++)
          if (k != p)
            o += (size_t)hdr[(size_t)p * row + (size_t)k];
        block = (const char *)c->scratch + o;
      }
      NG_CHECK(send_all(fd[q], block, bytes, q));
    }
  }
  return v.bad ? verdict_error(&v, me) : NG_OK;
}

static void s_destroy(struct ng_comm *c) {
  sock_comm *s = sc(c);
  if (!s)
    return;
  if (s->fd)
    for (int r = 0; r < c->size; r++)
      if (s->fd[r] >= 0)
        close(s->fd[r]);
  free(s->fd);
  free(s->hdr);
  free(s->at);
  free(s);
  c->impl = NULL;
}

static const ng_comm_ops SOCKET = {"socket",    s_allreduce, s_bcast,
                                   s_allgather, s_alltoallv, s_destroy};

/* An integer environment variable in [lo, hi], or an error naming it. */
static ng_status env_int(int *out, const char *name, int lo, int hi, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) {
    if (dflt >= lo) {
      *out = dflt;
      return NG_OK;
    }
    return ng__err(NG_ERR_INVALID_ARG, "distributed: %s is not set (the launcher sets it)", name);
  }
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    return ng__err(NG_ERR_INVALID_ARG, "distributed: %s='%s' is not an integer in [%d, %d]", name,
                   v, lo, hi);
  *out = (int)x;
  return NG_OK;
}

static ng_status resolve(struct addrinfo **out, const char *addr, bool passive) {
  char host[256];
  const char *colon = addr ? strrchr(addr, ':') : NULL;
  if (!colon || colon == addr || !colon[1] || (size_t)(colon - addr) >= sizeof host)
    return ng__err(NG_ERR_INVALID_ARG,
                   "distributed: NG_DIST_ADDR='%s' is not host:port (e.g. 127.0.0.1:29500)",
                   addr ? addr : "");
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = 0;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  int e = getaddrinfo(host, colon + 1, &hints, out);
  if (e != 0)
    return ng__err(NG_ERR_INVALID_ARG, "distributed: NG_DIST_ADDR='%s': %s", addr, gai_strerror(e));
  return NG_OK;
}

static void nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

typedef struct {
  uint32_t magic;
  int32_t rank, size;
} hello;

static ng_status accept_ranks(struct ng_comm *c, int lfd, double deadline) {
  int *fd = sc(c)->fd;
  for (int k = 1; k < c->size; k++) {
    int a = -1;
    for (;;) {
      const double left = deadline - ng__now();
      struct pollfd p = {.fd = lfd, .events = POLLIN};
      const int ready = left > 0 ? poll(&p, 1, (int)(left * 1e3) + 1) : 0;
      if (ready == 0)
        return ng__err(NG_ERR_IO,
                       "distributed: rank 0 waited NG_DIST_TIMEOUT_S for rank connections and "
                       "%d of %d came; did the other ranks start, with the same NG_DIST_ADDR?",
                       k - 1, c->size - 1);
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready > 0)
        a = accept(lfd, NULL, NULL);
      if (a >= 0 || errno != EINTR)
        break;
    }
    if (a < 0)
      return ng__err_errno(NG_ERR_IO, errno, "distributed: rank 0 cannot accept rank connections");
    nodelay(a);
    hello h;
    ng_status st = recv_all(a, &h, sizeof h, -1);
    if (st == NG_OK && (h.magic != HELLO_MAGIC || h.size != c->size || h.rank <= 0 ||
                        h.rank >= c->size || fd[h.rank] >= 0))
      st = ng__err(NG_ERR_INVALID_ARG,
                   "distributed: a peer introduced itself as rank %d of %d; this group has %d "
                   "ranks (two launches on one NG_DIST_ADDR?)",
                   (int)h.rank, (int)h.size, c->size);
    if (st != NG_OK) {
      close(a);
      return st;
    }
    fd[h.rank] = a;
  }
  return NG_OK;
}

static ng_status connect_root(struct ng_comm *c, const char *addr, double deadline) {
  struct addrinfo *ai = NULL;
  NG_CHECK(resolve(&ai, addr, false));
  int fd = -1, err = 0;
  for (;;) {
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
      fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
        err = errno;
        close(fd);
        fd = -1;
      }
    }
    if (fd >= 0 || ng__now() > deadline)
      break;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL); /* rank 0 is not listening yet */
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return ng__err_errno(NG_ERR_IO, err,
                         "distributed: rank %d cannot connect to rank 0 at %s (NG_DIST_ADDR) "
                         "within NG_DIST_TIMEOUT_S",
                         c->rank, addr);
  nodelay(fd);
  sc(c)->fd[0] = fd;
  const hello h = {HELLO_MAGIC, c->rank, c->size};
  return send_all(fd, &h, sizeof h, 0);
}

ng_status ng__comm_socket_open(struct ng_comm *c) {
  int rank = 0, size = 1, timeout = 120;
  NG_CHECK(env_int(&size, "NG_RANKS", 1, 1 << 16, -1));
  NG_CHECK(env_int(&rank, "NG_RANK", 0, size - 1, -1));
  NG_CHECK(env_int(&timeout, "NG_DIST_TIMEOUT_S", 1, 1 << 20, 120));
  c->rank = rank;
  c->size = size;
  if (size == 1)
    return NG_OK;
  sock_comm *s = ng__calloc(1, sizeof *s, "the socket communicator");
  if (!s)
    return NG_ERR_NOMEM;
  c->impl = s;
  c->ops = &SOCKET;
  s->fd = ng__malloc((size_t)size * sizeof *s->fd, "the ranks' sockets");
  if (!s->fd)
    return NG_ERR_NOMEM;
  for (int r = 0; r < size; r++)
    s->fd[r] = -1;
  s->hdr = ng__malloc((size_t)(rank == 0 ? size : 1) * 2 * (size_t)size * sizeof *s->hdr,
                      "the all-to-all's headers");
  s->at = ng__malloc((size_t)size * sizeof *s->at, "the all-to-all's offsets");
  if (!s->hdr || !s->at)
    return NG_ERR_NOMEM;
  const char *addr = getenv("NG_DIST_ADDR");
  const double deadline = ng__now() + timeout;
  if (rank != 0)
    return connect_root(c, addr, deadline);
  int lfd = -1, inherited = -1;
  if (env_int(&inherited, "NG_DIST_LISTEN_FD", 0, 1 << 20, -2) == NG_OK && inherited >= 0) {
    lfd = inherited;
  } else {
    struct addrinfo *ai = NULL;
    NG_CHECK(resolve(&ai, addr, true));
    int err = 0;
    for (struct addrinfo *p = ai; p && lfd < 0; p = p->ai_next) {
      lfd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      int one = 1;
      if (lfd >= 0)
        (void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (lfd >= 0 && (bind(lfd, p->ai_addr, p->ai_addrlen) != 0 || listen(lfd, size) != 0)) {
        err = errno;
        close(lfd);
        lfd = -1;
      }
    }
    freeaddrinfo(ai);
    if (lfd < 0)
      return ng__err_errno(NG_ERR_IO, err, "distributed: rank 0 cannot listen on %s (NG_DIST_ADDR)",
                           addr);
  }
  ng_status st = accept_ranks(c, lfd, deadline);
  close(lfd);
  return st;
}
