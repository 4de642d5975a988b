/* Cooperative cold fetches; see coop_impl.h and docs/distributed.md. */
#include "coop_impl.h"

#include <stdlib.h>
#include <string.h>

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The position of `id` in the ascending ids[0, n), or -1. */
static int64_t find(const int64_t *ids, int64_t n, int64_t id) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ids[mid] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && ids[lo] == id ? lo : -1;
}

void ng__coop_bucket(int64_t *out, int64_t *counts, const int64_t *ids, int64_t n, int ranks) {
  for (int q = 0; q < ranks; q++)
    counts[q] = 0;
  for (int64_t k = 0; k < n; k++)
    counts[ng__coop_owner(ids[k], ranks)]++;
  /* A counting sort by owner (stable), then each owner's block ascending. */
  int64_t at[NG_COOP_MAX_RANKS];
  int64_t s = 0;
  for (int q = 0; q < ranks; q++) {
    at[q] = s;
    s += counts[q];
  }
  for (int64_t k = 0; k < n; k++)
    out[at[ng__coop_owner(ids[k], ranks)]++] = ids[k];
  s = 0;
  for (int q = 0; q < ranks; q++) {
    qsort(out + s, (size_t)counts[q], sizeof *out, cmp_i64);
    s += counts[q];
  }
}

void ng__coop_serve_free(ng_coop_serve_buf *b) {
  free(b->uniq);
  free(b->rows);
  memset(b, 0, sizeof *b);
}

ng_status ng__coop_serve(void *answers, int64_t *n_read, const int64_t *req, int64_t n_req,
                         const void *table, size_t row_b, ng_coop_serve_buf *b) {
  *n_read = 0;
  NG_CHECK(ng__host_reserve((void **)&b->uniq, &b->uniq_cap,
                            NG_MAX((size_t)n_req * sizeof(int64_t), (size_t)1),
                            "the rows other ranks ask for"));
  if (n_req > 0)
    memcpy(b->uniq, req, (size_t)n_req * sizeof(int64_t));
  qsort(b->uniq, (size_t)n_req, sizeof(int64_t), cmp_i64);
  int64_t u = 0;
  for (int64_t k = 0; k < n_req; k++)
    if (u == 0 || b->uniq[u - 1] != b->uniq[k])
      b->uniq[u++] = b->uniq[k];
  NG_CHECK(ng__host_reserve((void **)&b->rows, &b->rows_cap, NG_MAX((size_t)u * row_b, (size_t)1),
                            "the rows this rank reads for the host"));
  /* The one read from host memory of each row the host needs this step; the answers copy it
   * from here, however many ranks asked. */
  const char *t = table;
  char *rows = b->rows, *a = answers;
  for (int64_t k = 0; k < u; k++)
    memcpy(rows + (size_t)k * row_b, t + (size_t)b->uniq[k] * row_b, row_b);
  for (int64_t k = 0; k < n_req; k++) {
    const int64_t at = find(b->uniq, u, req[k]);
    memcpy(a + (size_t)k * row_b, rows + (size_t)at * row_b, row_b);
  }
  *n_read = u;
  return NG_OK;
}

struct ng_coop {
  struct ng_comm *comm;
  bool exchange;
  int ranks, rank;
  int64_t hot, nodes, dim;
  const void *table; /* fp32 or bf16 (b16) rows of row_b bytes */
  bool b16;
  size_t row_b;
  int64_t *cold; /* this step's cold ids, as the input layer lists them */
  size_t cold_cap;
  int64_t *req; /* the same, by owner (ng__coop_bucket): what this rank asks each owner */
  size_t req_cap;
  int64_t *asked; /* what the ranks ask this rank, their blocks back to back */
  size_t asked_cap;
  char *answers; /* [asked] rows */
  size_t answers_cap;
  char *rows; /* [req] the rows that came back, in req's order */
  size_t rows_cap;
  int64_t *first; /* [ranks + 1] where each owner's block of req starts: the overlay's index */
  int64_t n_req;
  int64_t *n_out, *n_in; /* [ranks] requests to / from each rank */
  size_t *b_out, *b_in;  /* [ranks] bytes to / from each rank */
  ng_coop_serve_buf serve;
  ng_coop_stats stats;
};

ng_status ng__coop_create(ng_coop **out, struct ng_comm *comm, bool exchange, int64_t hot,
                          const float *table, const uint16_t *table16, int64_t nodes, int64_t dim) {
  *out = NULL;
  if (comm)
    NG_CHECK(ng__comm_check(comm));
  const int size = comm ? comm->size : 1, rank = comm ? comm->rank : 0;
  if (exchange && !comm)
    return ng__err(NG_ERR_INVALID_ARG, "cooperative cold fetch: no communicator to exchange over");
  if (exchange && comm->local_size != comm->size)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "cooperative cold fetch: the %d ranks run on several hosts (%d on this one); "
                   "the ranks of one host share its memory, so it needs them all on one host",
                   comm->size, comm->local_size);
  if (exchange && !table == !table16)
    return ng__err(NG_ERR_INVALID_ARG,
                   "cooperative cold fetch: it reads one host table, fp32 or bf16; given %s",
                   table ? "both" : "none");
  if (size > NG_COOP_MAX_RANKS)
    return ng__err(NG_ERR_UNSUPPORTED, "cooperative cold fetch: %d ranks, at most %d", size,
                   NG_COOP_MAX_RANKS);
  ng_coop *co = ng__calloc(1, sizeof *co, "the cooperative fetch");
  if (!co)
    return NG_ERR_NOMEM;
  *co = (ng_coop){.comm = comm,
                  .exchange = exchange,
                  .ranks = size,
                  .rank = rank,
                  .hot = hot,
                  .nodes = nodes,
                  .dim = dim,
                  .table = table16 ? (const void *)table16 : (const void *)table,
                  .b16 = table16 != NULL,
                  .row_b = (size_t)dim * (table16 ? sizeof(uint16_t) : sizeof(float))};
  const size_t r = (size_t)size;
  co->n_out = ng__calloc(2 * r, sizeof(int64_t), "the exchange's counts");
  co->b_out = ng__calloc(2 * r, sizeof(size_t), "the exchange's sizes");
  if (!co->n_out || !co->b_out) {
    ng__coop_destroy(co);
    return NG_ERR_NOMEM;
  }
  co->first = ng__calloc(r + 1, sizeof(int64_t), "the exchange's blocks");
  if (!co->first) {
    ng__coop_destroy(co);
    return NG_ERR_NOMEM;
  }
  co->n_in = co->n_out + r;
  co->b_in = co->b_out + r;
  *out = co;
  return NG_OK;
}

void ng__coop_destroy(ng_coop *co) {
  if (!co)
    return;
  free(co->cold);
  free(co->req);
  free(co->asked);
  free(co->answers);
  free(co->rows);
  free(co->first);
  free(co->n_out);
  free(co->b_out);
  ng__coop_serve_free(&co->serve);
  free(co);
}

/* The overlay: node v's row when it is one of this step's cold rows, else NULL (the table's).
 * The requests are the index: sorted by owner, each owner's block ascending, and the rows came
 * back in the requests' order, so v's row is at its position in its owner's block. */
static const float *overlay_row(const void *ctx, int64_t v) {
  const ng_coop *co = ctx;
  if (v < co->hot)
    return NULL;
  const int q = ng__coop_owner(v, co->ranks);
  const int64_t at = co->first[q];
  const int64_t k = find(co->req + at, co->first[q + 1] - at, v);
  return k < 0 ? NULL : (const float *)(co->rows + (size_t)(at + k) * co->row_b);
}

/* The same over a bf16 table: the owners sent their bf16 rows as they are (half the bytes). */
static const uint16_t *overlay_row16(const void *ctx, int64_t v) {
  return (const uint16_t *)(const void *)overlay_row(ctx, v);
}

static ng_status reserve(void *p, size_t *cap, int64_t n, size_t elem, const char *what) {
  return ng__host_reserve((void **)p, cap, NG_MAX((size_t)n * elem, (size_t)1), what);
}

ng_status ng__coop_step(ng_coop *co, const ng_minibatch *mb, ng_row_overlay *ovl) {
  *ovl = (ng_row_overlay){NULL, NULL, NULL};
  const int32_t ns = mb->blocks[0].n_src;
  if (!co->exchange) {
    /* Counting only: worker threads may call it at once (nothing but the counters is
     * shared). A mini-batch's local nodes are distinct. */
    int64_t n = 0;
    for (int32_t s = 0; s < ns; s++)
      n += mb->node_ids[s] >= co->hot;
    __atomic_fetch_add(&co->stats.steps, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&co->stats.rows_needed, n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&co->stats.rows_read, n, __ATOMIC_RELAXED);
    return NG_OK;
  }
  NG_CHECK(reserve(&co->cold, &co->cold_cap, ns, sizeof(int64_t), "the step's cold ids"));
  int64_t n = 0;
  for (int32_t s = 0; s < ns; s++)
    if (mb->node_ids[s] >= co->hot)
      co->cold[n++] = mb->node_ids[s];
  co->stats.steps++;
  co->stats.rows_needed += n;
  const int R = co->ranks, me = co->rank;
  const size_t row_b = co->row_b;
  NG_CHECK(reserve(&co->req, &co->req_cap, n, sizeof(int64_t), "the step's requests"));
  ng__coop_bucket(co->req, co->n_out, co->cold, n, R);
  co->n_req = n;
  /* Who asks what: the counts, then the ids. */
  NG_CHECK(ng__comm_alltoall(co->comm, co->n_out, co->n_in, sizeof(int64_t)));
  int64_t n_asked = 0;
  for (int q = 0; q < R; q++) {
    co->b_out[q] = (size_t)co->n_out[q] * sizeof(int64_t);
    co->b_in[q] = (size_t)co->n_in[q] * sizeof(int64_t);
    n_asked += co->n_in[q];
  }
  NG_CHECK(reserve(&co->asked, &co->asked_cap, n_asked, sizeof(int64_t), "the requests asked"));
  NG_CHECK(ng__comm_alltoallv(co->comm, co->req, co->b_out, co->asked, co->b_in));
  for (int64_t k = 0; k < n_asked; k++)
    if (co->asked[k] < co->hot || co->asked[k] >= co->nodes ||
        ng__coop_owner(co->asked[k], R) != me)
      return ng__err(NG_ERR_INTERNAL,
                     "cooperative cold fetch: rank %d was asked for row %lld, which is not a "
                     "cold row it owns (rows [%lld, %lld), owner rule g mod %d)",
                     me, (long long)co->asked[k], (long long)co->hot, (long long)co->nodes, R);
  /* Each distinct row read once, answered to every rank that asked. */
  NG_CHECK(reserve(&co->answers, &co->answers_cap, n_asked, row_b, "the rows asked"));
  int64_t n_read = 0;
  NG_CHECK(ng__coop_serve(co->answers, &n_read, co->asked, n_asked, co->table, row_b, &co->serve));
  for (int q = 0; q < R; q++) {
    co->b_out[q] = (size_t)co->n_in[q] * row_b; /* answers go back to who asked */
    co->b_in[q] = (size_t)co->n_out[q] * row_b;
  }
  NG_CHECK(reserve(&co->rows, &co->rows_cap, n, row_b, "the step's cold rows"));
  NG_CHECK(ng__comm_alltoallv(co->comm, co->answers, co->b_out, co->rows, co->b_in));
  co->stats.rows_read += n_read;
  co->stats.rows_sent += n_asked - co->n_in[me];
  co->stats.rows_received += n - co->n_out[me];
  co->first[0] = 0;
  for (int q = 0; q < R; q++)
    co->first[q + 1] = co->first[q] + co->n_out[q];
  *ovl =
      co->b16 ? (ng_row_overlay){NULL, co, overlay_row16} : (ng_row_overlay){overlay_row, co, NULL};
  return NG_OK;
}

bool ng__coop_exchanges(const ng_coop *co) {
  return co && co->exchange;
}

void ng__coop_stats(ng_coop *co, ng_coop_stats *out, bool reset) {
  /* Counting workers may be making the next epoch's iterations meanwhile: atomic reads (each
   * counter on its own; a step counted between two reads shows in one of them only). */
  int64_t *f[] = {&co->stats.steps, &co->stats.rows_needed, &co->stats.rows_read,
                  &co->stats.rows_sent, &co->stats.rows_received};
  int64_t *o[] = {&out->steps, &out->rows_needed, &out->rows_read, &out->rows_sent,
                  &out->rows_received};
  for (size_t k = 0; k < NG_ARRAY_LEN(f); k++)
    *o[k] = reset ? __atomic_exchange_n(f[k], 0, __ATOMIC_RELAXED)
                  : __atomic_load_n(f[k], __ATOMIC_RELAXED);
}
