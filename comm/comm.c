/* The communicator's public face, the choice of implementation and the collectives' common
 * parts (docs/distributed.md). */
#include "comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ng_status ng__comm_check(const struct ng_comm *c) {
  if (!c)
    return ng__err(NG_ERR_INVALID_ARG, "communicator handle is NULL");
  if (c->magic != NG_COMM_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "communicator handle is not a live one (destroyed?)");
  return NG_OK;
}

void ng__comm_sum(void *out, const void *parts, int ranks, int64_t n, bool f64) {
  if (f64) {
    double *o = out;
    const double *p = parts;
    for (int64_t i = 0; i < n; i++) {
      double s = p[i];
      for (int r = 1; r < ranks; r++)
        s += p[(int64_t)r * n + i];
      o[i] = s;
    }
  } else {
    float *o = out;
    const float *p = parts;
    for (int64_t i = 0; i < n; i++) {
      float s = p[i];
      for (int r = 1; r < ranks; r++)
        s += p[(int64_t)r * n + i];
      o[i] = s;
    }
  }
}

static ng_status allreduce(struct ng_comm *c, void *x, int64_t n, bool f64) {
  NG_CHECK(ng__comm_check(c));
  if (n < 0 || (n > 0 && !x))
    return ng__err(NG_ERR_INVALID_ARG, "all-reduce: %lld values at %p", (long long)n, x);
  if (c->size == 1 || n == 0)
    return NG_OK;
  return c->ops->allreduce(c, x, n, f64);
}

ng_status ng__comm_allreduce_f32(struct ng_comm *c, float *x, int64_t n) {
  return allreduce(c, x, n, false);
}

ng_status ng__comm_allreduce_f64(struct ng_comm *c, double *x, int64_t n) {
  return allreduce(c, x, n, true);
}

ng_status ng__comm_bcast(struct ng_comm *c, void *buf, size_t bytes, int root) {
  NG_CHECK(ng__comm_check(c));
  if (root < 0 || root >= c->size)
    return ng__err(NG_ERR_INVALID_ARG, "broadcast: root %d is not a rank of %d", root, c->size);
  if (c->size == 1 || bytes == 0)
    return NG_OK;
  return c->ops->bcast(c, buf, bytes, root);
}

ng_status ng__comm_allgather(struct ng_comm *c, const void *in, void *out, size_t bytes) {
  NG_CHECK(ng__comm_check(c));
  if (c->size == 1) {
    memmove(out, in, bytes);
    return NG_OK;
  }
  return c->ops->allgather(c, in, out, bytes);
}

ng_status ng__comm_alltoallv(struct ng_comm *c, const void *send, const size_t *send_bytes,
                             void *recv, const size_t *recv_bytes) {
  NG_CHECK(ng__comm_check(c));
  if (!send_bytes || !recv_bytes)
    return ng__err(NG_ERR_INVALID_ARG, "all-to-all: the block sizes are NULL");
  size_t s_off = 0, r_off = 0;
  for (int q = 0; q < c->rank; q++) {
    s_off += send_bytes[q];
    r_off += recv_bytes[q];
  }
  /* A rank whose own block does not fit still joins the exchange, which fails on every rank
   * (the socket one checks every pair, this one included): returning here alone would leave
   * the others waiting on it, or reading its next collective's data as this one's. */
  const bool self_ok = send_bytes[c->rank] == recv_bytes[c->rank];
  if (self_ok && send_bytes[c->rank] > 0)
    memmove((char *)recv + r_off, (const char *)send + s_off, send_bytes[c->rank]);
  ng_status st = NG_OK;
  if (c->size > 1)
    st = c->ops->alltoallv(c, send, send_bytes, recv, recv_bytes);
  if (st == NG_OK && !self_ok)
    st = ng__err(NG_ERR_INVALID_ARG,
                 "all-to-all: rank %d sends itself %zu bytes but expects %zu from itself", c->rank,
                 send_bytes[c->rank], recv_bytes[c->rank]);
  return st;
}

ng_status ng__comm_alltoall(struct ng_comm *c, const void *in, void *out, size_t bytes) {
  NG_CHECK(ng__comm_check(c));
  NG_CHECK(ng__host_reserve((void **)&c->sizes, &c->sizes_cap, (size_t)c->size * sizeof *c->sizes,
                            "the all-to-all's block sizes"));
  for (int q = 0; q < c->size; q++)
    c->sizes[q] = bytes;
  return ng__comm_alltoallv(c, in, c->sizes, out, c->sizes);
}

ng_status ng__comm_barrier(struct ng_comm *c) {
  double x = 0.0;
  return ng__comm_allreduce_f64(c, &x, 1);
}

/* The ranks that share this rank's host name: which of them this rank is, and how many. */
enum { HOST_BYTES = 256 };
static ng_status find_local(struct ng_comm *c) {
  c->local_rank = 0;
  c->local_size = 1;
  if (c->size == 1)
    return NG_OK;
  char me[HOST_BYTES] = {0};
  const char *forced = getenv("NG_HOST_NAME"); /* tests: pretend to be on another host */
  if (forced && *forced)
    snprintf(me, sizeof me, "%s", forced);
  else if (gethostname(me, sizeof me - 1) != 0)
    snprintf(me, sizeof me, "?");
  char *all = ng__malloc((size_t)c->size * HOST_BYTES, "the ranks' host names");
  if (!all)
    return NG_ERR_NOMEM;
  ng_status st = ng__comm_allgather(c, me, all, HOST_BYTES);
  if (st == NG_OK) {
    c->local_size = 0;
    for (int r = 0; r < c->size; r++) {
      if (strncmp(all + (size_t)r * HOST_BYTES, me, HOST_BYTES) != 0)
        continue;
      if (r == c->rank)
        c->local_rank = c->local_size;
      c->local_size++;
    }
  }
  free(all);
  return st;
}

static void one_destroy(struct ng_comm *c) {
  (void)c;
}

static const ng_comm_ops ONE = {"one", NULL, NULL, NULL, NULL, one_destroy};

/* Started by mpirun (Open MPI) or another PMI launcher. */
static bool under_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

ng_status ng_comm_create(ng_comm_t *out, const char *how) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_comm_create: out is NULL");
  *out = NULL;
  const char *h = how && *how ? how : "auto";
  if (strcmp(h, "auto") == 0) {
    const char *ranks = getenv("NG_RANKS");
    h = ranks && *ranks ? "env" : under_mpirun() ? "mpi" : "one";
  }
  struct ng_comm *c = ng__calloc(1, sizeof *c, "a communicator");
  if (!c)
    return NG_ERR_NOMEM;
  c->magic = NG_COMM_MAGIC;
  c->size = 1;
  c->ops = &ONE;
  ng_status st = NG_OK;
  if (strcmp(h, "env") == 0)
    st = ng__comm_socket_open(c);
  else if (strcmp(h, "mpi") == 0)
    st = ng__comm_mpi_open(c);
  else if (strcmp(h, "one") != 0)
    st =
        ng__err(NG_ERR_INVALID_ARG, "ng_comm_create: unknown kind '%s' (auto, env, mpi or one)", h);
  if (st == NG_OK)
    st = find_local(c);
  if (st != NG_OK) {
    ng_comm_destroy(c);
    return st;
  }
  *out = c;
  return NG_OK;
}

int ng_comm_rank(ng_comm_t c) {
  return ng__comm_check(c) == NG_OK ? c->rank : -1;
}
int ng_comm_size(ng_comm_t c) {
  return ng__comm_check(c) == NG_OK ? c->size : -1;
}
int ng_comm_local_rank(ng_comm_t c) {
  return ng__comm_check(c) == NG_OK ? c->local_rank : -1;
}
int ng_comm_local_size(ng_comm_t c) {
  return ng__comm_check(c) == NG_OK ? c->local_size : -1;
}
const char *ng_comm_kind(ng_comm_t c) {
  return ng__comm_check(c) == NG_OK ? c->ops->name : "";
}

int ng_has_mpi(void) {
  return ng__comm_have_mpi();
}

void ng_comm_destroy(ng_comm_t c) {
  if (!c || c->magic != NG_COMM_MAGIC)
    return;
  c->magic = 0;
  c->ops->destroy(c);
  free(c->scratch);
  free(c->sizes);
  free(c);
}
