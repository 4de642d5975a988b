/* The tiered feature store: hot rows in backend memory, cold rows in (registered) host memory,
 * and the device side of a tiered iteration. */
#include "feature_store_impl.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels refuse it and pages are touched */
#endif

/* The hot tier's upload moves rows through two page-locked buffers of this size: threads copy
 * one while the DMA engine reads the other. */
#define UPLOAD_CHUNK ((size_t)64 << 20)
/* Pre-faulting before a registration works in pieces of this size, one thread each. */
#define POPULATE_CHUNK ((size_t)32 << 20)

#define BE(st) ((st)->be->iface)

ng_status ng__store_hot_rows(int64_t *hot, ng_backend *be, int64_t nodes, int64_t dim,
                             int64_t cache_bytes, double cache_ratio) {
  return ng__store_hot_rows_elem(hot, be, nodes, dim, sizeof(float), cache_bytes, cache_ratio);
}

ng_status ng__store_hot_rows_elem(int64_t *hot, ng_backend *be, int64_t nodes, int64_t dim,
                                  size_t elem_bytes, int64_t cache_bytes, double cache_ratio) {
  const int64_t row = NG_MAX(dim, (int64_t)1) * (int64_t)elem_bytes;
  int64_t h;
  if (cache_bytes < 0)
    return ng__err(NG_ERR_INVALID_ARG, "cache size %lld bytes is negative", (long long)cache_bytes);
  if (cache_bytes > 0) {
    h = cache_bytes / row;
  } else if (cache_ratio >= 0.0) {
    if (!(cache_ratio <= 1.0))
      return ng__err(NG_ERR_INVALID_ARG, "cache ratio %g is outside [0, 1]", cache_ratio);
    h = (int64_t)(cache_ratio * (double)nodes);
  } else if (be->iface->host_memory) {
    h = nodes; /* the features are in the backend's memory already */
  } else {
    size_t free_bytes = 0;
    NG_CHECK(be->iface->mem_info(be, &free_bytes, NULL));
    h = (int64_t)(free_bytes / 2) / row;
  }
  *hot = NG_MAX((int64_t)0, NG_MIN(h, nodes));
  return NG_OK;
}

void ng__store_close(ng_store *st) {
  if (!st->be)
    return;
  for (int p = 0; p < NG_MAX_PARTS; p++)
    if (st->part_opened[p] && BE(st)->ipc_close)
      BE(st)->ipc_close(st->be, st->part_opened[p]);
  BE(st)->free(st->be, st->cache_owned);
  BE(st)->free(st->be, st->hot_rows);
  BE(st)->free(st->be, st->work);
  for (int k = 0; k <= NG_STORE_SLOTS; k++)
    BE(st)->free(st->be, st->pre[k].buf);
  if (st->registered)
    BE(st)->host_unregister(st->be, st->registered);
  memset(st, 0, sizeof *st);
}

/* Rows first, first + stride, ... (`rows` of them, `row` bytes each) of `table` (typically the
 * dataset's mapping, whose pages may not be resident yet) to device memory `dst`, one after the
 * other: the hot tier (stride 1) or a part of a striped one. A plain copy from pageable memory
 * runs at a third of the link's rate with one thread faulting the pages in (8 GB/s,
 * ../shared/device/limits.md); here `threads` threads copy chunks into page-locked buffers, in
 * parallel and touching the pages in parallel, while the DMA engine moves the previous chunk. */
static ng_status upload_rows(ng_backend *be, void *dst, const char *table, size_t row,
                             int64_t first, int64_t stride, int64_t rows, int threads) {
  const int64_t per = (int64_t)NG_MAX((size_t)1, UPLOAD_CHUNK / NG_MAX(row, (size_t)1));
  void *buf[2] = {NULL, NULL};
  ng_status s = NG_OK;
  for (int b = 0; b < 2 && s == NG_OK; b++)
    s = be->iface->host_alloc(be, &buf[b], (size_t)NG_MIN(per, NG_MAX(rows, (int64_t)1)) * row);
  for (int64_t at = 0, k = 0; at < rows && s == NG_OK; at += per, k++) {
    const int64_t n = NG_MIN(per, rows - at);
    char *stage = buf[k % 2];
    /* This buffer's last copy, chunk k - 2's, was waited for before chunk k - 1 was queued, so
     * the threads fill it while the DMA engine moves chunk k - 1. */
    if (stride == 1) {
      const char *from = table + (size_t)(first + at) * row;
      const size_t bytes = (size_t)n * row, piece = (size_t)1 << 20;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (size_t p = 0; p < bytes; p += piece)
        memcpy(stage + p, from + p, NG_MIN(piece, bytes - p));
    } else {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t i = 0; i < n; i++)
        memcpy(stage + (size_t)i * row, table + (size_t)(first + (at + i) * stride) * row, row);
    }
    s = be->iface->sync(be); /* chunk k - 1 has landed: its buffer is free for chunk k + 1 */
    if (s == NG_OK)
      s = be->iface->copy_h2d_async(be, (char *)dst + (size_t)at * row, stage, (size_t)n * row,
                                    (int)(k % 2));
  }
  if (s == NG_OK)
    s = be->iface->sync(be);
  else
    (void)be->iface->sync(be);
  for (int b = 0; b < 2; b++)
    be->iface->host_free(be, buf[b]);
  return s;
}

/* Faults in the pages of [begin, end) with `threads` threads, so that registering them (which
 * pins every page) finds them resident instead of faulting 4 KiB at a time in one thread. Best
 * effort: a range the kernel refuses to populate is left to the registration. */
static void populate(uintptr_t begin, uintptr_t end, int threads) {
  const size_t len = end - begin;
  const long page = sysconf(_SC_PAGESIZE);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (size_t at = 0; at < len; at += POPULATE_CHUNK) {
    char *p = (char *)(begin + at);
    const size_t n = NG_MIN(POPULATE_CHUNK, len - at);
    if (madvise(p, n, MADV_POPULATE_READ) != 0) {
      volatile char sink = 0;
      for (size_t q = 0; q < n; q += (size_t)page)
        sink ^= p[q];
      (void)sink;
    }
  }
}

/* Opens the store over a table of `elem`-byte values (fp32 or bf16): the hot rows' copy and the
 * zero-copy view are returned through *cache and *host_dev. */
static ng_status open_table(ng_store *st, ng_backend *be, const void *features, size_t elem,
                            int64_t nodes, int64_t dim, int64_t hot, int parts, int part,
                            ng_fetch mode, bool read_only, const void **cache,
                            const void **host_dev) {
  memset(st, 0, sizeof *st);
  st->be = be;
  st->nodes = nodes;
  st->dim = dim;
  st->hot = hot;
  st->mode = mode;
  ng_status s = NG_OK;
  const size_t row = (size_t)dim * elem;
  const char *table = features;
  *cache = *host_dev = NULL;
  if (parts > 0) {
    /* A part of a striped tier: a copy of its rows even where the backend's memory is the
     * host's (the CPU backend then stands in for a GPU, in tests). */
    const double t0 = ng__now();
    st->parts = parts;
    st->part = part;
    st->part_rows = ng__part_rows(hot, parts, part);
    NG_CHECK_GOTO(s,
                  BE(st)->alloc(be, (void **)&st->cache_owned,
                                (size_t)NG_MAX(st->part_rows, (int64_t)1) * row),
                  fail);
    NG_CHECK_GOTO(s,
                  upload_rows(be, st->cache_owned, table, row, part, parts, st->part_rows,
                              omp_get_max_threads()),
                  fail);
    st->part_ptr[part] = st->cache_owned;
    st->upload_s = ng__now() - t0;
  } else if (be->iface->host_memory) {
    *cache = features;
  } else if (hot > 0) {
    const double t0 = ng__now();
    NG_CHECK_GOTO(s, BE(st)->alloc(be, (void **)&st->cache_owned, (size_t)hot * row), fail);
    NG_CHECK_GOTO(s, upload_rows(be, st->cache_owned, table, row, 0, 1, hot, omp_get_max_threads()),
                  fail);
    *cache = st->cache_owned;
    st->upload_s = ng__now() - t0;
  }
  if (mode == NG_FETCH_ZCOPY && hot < nodes) {
    /* Only the cold rows are read across PCIe: register them, from their first page on. */
    const double t0 = ng__now();
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = (uintptr_t)(table + (size_t)hot * row) & ~(page - 1);
    const uintptr_t end = (uintptr_t)(table + (size_t)nodes * row);
    populate(begin, end, omp_get_max_threads());
    NG_CHECK_GOTO(s, BE(st)->host_register(be, (void *)begin, end - begin, read_only), fail);
    st->register_s = ng__now() - t0;
    st->registered = (void *)begin;
    const void *view = NULL;
    NG_CHECK_GOTO(s, BE(st)->host_view(be, (const void *)begin, &view), fail);
    /* The kernels index the table by global id: the view of row 0, which may lie before the
     * registered range, is only ever offset to rows inside it. */
    *host_dev = (const char *)view - (begin - (uintptr_t)features);
  }
  return NG_OK;
fail:
  ng__err_prefix("feature store (%lld hot rows of %lld, %lld bytes each)", (long long)hot,
                 (long long)nodes, (long long)row);
  ng__store_close(st);
  return s;
}

ng_status ng__store_open(ng_store *st, ng_backend *be, const float *features, int64_t nodes,
                         int64_t dim, int64_t hot, ng_fetch mode, bool read_only) {
  const void *cache = NULL, *host_dev = NULL;
  NG_CHECK(open_table(st, be, features, sizeof(float), nodes, dim, hot, 0, 0, mode, read_only,
                      &cache, &host_dev));
  st->host = features;
  st->cache = cache;
  st->host_dev = host_dev;
  return NG_OK;
}

ng_status ng__store_open_bf16(ng_store *st, ng_backend *be, const uint16_t *features, int64_t nodes,
                              int64_t dim, int64_t hot, ng_fetch mode, bool read_only) {
  if (!be->iface->aggr_partial_bf16 || !be->iface->scatter_rows_bf16) {
    memset(st, 0, sizeof *st);
    return ng__err(NG_ERR_UNSUPPORTED,
                   "precision bf16: the %s backend cannot read bf16 feature tables; use "
                   "--precision fp32",
                   be->iface->name);
  }
  const void *cache = NULL, *host_dev = NULL;
  NG_CHECK(open_table(st, be, features, sizeof(uint16_t), nodes, dim, hot, 0, 0, mode, read_only,
                      &cache, &host_dev));
  st->bf16 = true;
  st->host16 = features;
  st->cache16 = cache;
  st->host_dev16 = host_dev;
  return NG_OK;
}

ng_status ng__store_open_part(ng_store *st, ng_backend *be, const void *features, size_t elem,
                              int64_t nodes, int64_t dim, int64_t hot, int parts, int part,
                              ng_fetch mode, bool read_only) {
  memset(st, 0, sizeof *st);
  if (parts < 1 || parts > NG_MAX_PARTS || part < 0 || part >= parts)
    return ng__err(NG_ERR_INVALID_ARG, "store: part %d of %d parts (at most %d parts)", part, parts,
                   NG_MAX_PARTS);
  if (elem != sizeof(float) && elem != sizeof(uint16_t))
    return ng__err(NG_ERR_INVALID_ARG, "store: %zu-byte feature values (4: fp32, 2: bf16)", elem);
  if (!be->iface->gather_parts)
    return ng__err(NG_ERR_UNSUPPORTED, "store: the %s backend cannot read a partitioned hot tier",
                   be->iface->name);
  if (elem == sizeof(uint16_t) && (!be->iface->aggr_partial_bf16 || !be->iface->scatter_rows_bf16))
    return ng__err(NG_ERR_UNSUPPORTED,
                   "precision bf16: the %s backend cannot read bf16 feature tables; use "
                   "--precision fp32",
                   be->iface->name);
  const void *cache = NULL, *host_dev = NULL;
  NG_CHECK(open_table(st, be, features, elem, nodes, dim, hot, parts, part, mode, read_only, &cache,
                      &host_dev));
  if (elem == sizeof(uint16_t)) {
    st->bf16 = true;
    st->host16 = features;
    st->host_dev16 = host_dev;
  } else {
    st->host = features;
    st->host_dev = host_dev;
  }
  return NG_OK;
}

ng_status ng__store_part_export(ng_store *st, void *handle) {
  if (st->parts < 1 || !st->cache_owned)
    return ng__err(NG_ERR_STATE, "store: no part of a partitioned hot tier to export");
  if (!BE(st)->ipc_export)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "store: the %s backend cannot share memory between "
                   "processes",
                   BE(st)->name);
  return BE(st)->ipc_export(st->be, st->cache_owned, handle);
}

void ng__store_part_attach(ng_store *st, void *const *ptrs, bool opened) {
  for (int p = 0; p < st->parts; p++) {
    if (p == st->part)
      continue;
    st->part_ptr[p] = ptrs[p];
    st->part_opened[p] = opened ? ptrs[p] : NULL;
  }
}

/* A scatter_rows from one of the store's tables: `f32` or, in a bf16 store, `b16`. */
static ng_status scatter_tbl(ng_store *st, float *dst, const int32_t *pos, const float *f32,
                             const uint16_t *b16, const int64_t *ids, int64_t n, float drop_p,
                             uint64_t drop_key) {
  if (b16)
    return BE(st)->scatter_rows_bf16(st->be, dst, pos, b16, ids, n, st->dim, drop_p, drop_key);
  return BE(st)->scatter_rows(st->be, dst, pos, f32, ids, n, st->dim, drop_p, drop_key);
}

/* An aggr_partial over one of the store's tables: `f32` or, in a bf16 store, `b16`. */
static ng_status partial_tbl(ng_store *st, const ng_aggr *ag, const ng_block *blk, const float *f32,
                             const uint16_t *b16, ng_pstate *state) {
  if (b16)
    return BE(st)->aggr_partial_bf16(st->be, ag, blk, b16, state);
  return BE(st)->aggr_partial(st->be, ag, blk, f32, state);
}

static size_t align64(size_t x) {
  return (x + 63) & ~(size_t)63;
}

/* The aggregator of the partial states: no self loop (it is added after finalize), no dropout
 * (rows are dropped where they are read from the tables). */
static ng_aggr bare_aggr(const ng_aggr *ag) {
  ng_aggr bare = *ag;
  bare.self_loop = false;
  bare.drop_p = 0.0f;
  bare.drop_key = 0;
  return bare;
}

/* What the device reads from host memory for a package, as laid out in a `pre` buffer: the
 * self rows of the n_dst destinations, the cold state of the destinations the device reduces
 * (ng_fetch_pkg.n_host_dst on) and the gathered rows. */
typedef struct {
  float *self_rows;
  ng_pstate cold;
  float *staged;
} host_parts;

/* Bytes of nd rows of values and of nd counts, each rounded to a cache line. */
static size_t rows_bytes(int32_t nd, int64_t dim) {
  return align64((size_t)nd * (size_t)dim * sizeof(float));
}

static size_t counts_bytes(int32_t nd) {
  return align64((size_t)nd * sizeof(int32_t));
}

/* The destinations whose cold edges the device reduces: [n_host_dst, n_dst). */
static int32_t device_dst(const ng_fetch_pkg *dp) {
  return dp->n_dst - dp->n_host_dst;
}

/* The rows gathered into the staged rows: ZCOPY all of them; PARTIAL those of the device's
 * edges (its self rows go straight to their destinations). */
static int64_t staged_rows(const ng_fetch_pkg *dp) {
  return dp->mode == NG_FETCH_ZCOPY ? dp->n_staged : dp->n_staged - dp->n_self_cold;
}

/* `sdim`: floats of state a row (dim times the aggregator's state size). */
static size_t parts_bytes(const ng_fetch_pkg *dp, int64_t dim, int64_t sdim) {
  return rows_bytes(dp->n_dst, dim) + rows_bytes(device_dst(dp), sdim) +
         counts_bytes(device_dst(dp)) + (size_t)staged_rows(dp) * (size_t)dim * sizeof(float);
}

static host_parts parts_layout(char *base, const ng_fetch_pkg *dp, int64_t dim, int64_t sdim) {
  const int32_t nd = device_dst(dp);
  const size_t self = rows_bytes(dp->n_dst, dim), rows = rows_bytes(nd, sdim);
  host_parts z;
  z.self_rows = (float *)base;
  z.cold = (ng_pstate){(float *)(base + self), (int32_t *)(base + self + rows), nd, dim};
  z.staged = (float *)(base + self + rows + counts_bytes(nd));
  return z;
}

/* Rows [d0, d0 + n) of a partial state of `S` floats a feature. */
static ng_pstate state_rows(const ng_pstate *s, int32_t d0, int32_t n, int64_t S) {
  return (ng_pstate){s->val + (int64_t)d0 * s->dim * S, s->count + d0, n, s->dim};
}

/* Whether the device reads part of a package from host memory: a ZCOPY package's cold rows, or
 * the cold self rows a PARTIAL package left to it (fetch_impl.h: self_zcopy; the package lists
 * their ids, none when every self row is hot). */
static bool reads_host(const ng_fetch_pkg *dp) {
  return dp->mode == NG_FETCH_ZCOPY || (dp->mode == NG_FETCH_PARTIAL && dp->staged_ids != NULL);
}

/* Queues what the device reads from host memory for a package into pre[k], with input dropout
 * (as the host stages rows), and the device's cold edges reduced over the rows read.
 * - ZCOPY: the unique cold rows are gathered into the staged rows, the cold self rows placed
 *   from there (a destination's row is read once even when it is also a source).
 * - PARTIAL: the cold self rows (the package's first n_self_cold ids) go straight to their
 *   destinations, the rows of the device's edges (the other ids) into the staged rows, where
 *   its edges' indices point. */
static ng_status host_part(ng_store *st, const ng_aggr *bare, const ng_fetch_pkg *dp, float drop_p,
                           uint64_t drop_key, int k, host_parts *out) {
  ng_backend *be = st->be;
  const int64_t dim = st->dim;
  if (!ng__store_zcopy(st) && dp->n_staged > 0) /* with every row hot there is nothing to read */
    return ng__err(NG_ERR_STATE,
                   "store: a package the device reads by zero-copy, but the store was opened "
                   "for %s",
                   ng_fetch_name(st->mode));
  const int64_t sdim = dim * ng__aggr_state_size(bare);
  NG_CHECK(ng__bk_reserve(be, &st->pre[k].buf, &st->pre[k].cap,
                          NG_MAX(parts_bytes(dp, dim, sdim), (size_t)64)));
  host_parts z = parts_layout(st->pre[k].buf, dp, dim, sdim);
  *out = z;
  const int64_t n_self = dp->n_self_cold;
  /* A bf16 store's rows are converted as they are read: the device's copies are fp32. */
  const float *hd = st->host_dev;
  const uint16_t *hd16 = st->host_dev16;
  if (dp->mode == NG_FETCH_ZCOPY) {
    NG_CHECK(
        scatter_tbl(st, z.staged, NULL, hd, hd16, dp->staged_ids, dp->n_staged, drop_p, drop_key));
    NG_CHECK(BE(st)->scatter_rows(be, z.self_rows, dp->self_cold_pos, z.staged, dp->self_cold_ids,
                                  n_self, dim, 0.0f, 0));
  } else {
    NG_CHECK(scatter_tbl(st, z.self_rows, dp->self_cold_pos, hd, hd16, dp->staged_ids, n_self,
                         drop_p, drop_key));
    NG_CHECK(scatter_tbl(st, z.staged, NULL, hd, hd16, dp->staged_ids + n_self, staged_rows(dp),
                         drop_p, drop_key));
  }
  if (dp->device_cold.nnz > 0)
    NG_CHECK(BE(st)->aggr_partial(be, bare, &dp->device_cold, z.staged, &z.cold));
  return NG_OK;
}

ng_status ng__store_prefetch(ng_store *st, const ng_aggr *ag, const ng_fetch_pkg *dev_pkg,
                             float drop_p, uint64_t drop_key, int slot) {
  if (slot < 0 || slot >= NG_STORE_SLOTS)
    return ng__err(NG_ERR_INVALID_ARG, "store: package slot %d is not in [0, %d)", slot,
                   NG_STORE_SLOTS);
  st->pre[slot].ready = false;
  if (!reads_host(dev_pkg))
    return NG_OK;
  const ng_aggr bare = bare_aggr(ag);
  host_parts z;
  NG_CHECK(BE(st)->copy_ops_begin(st->be, slot));
  const ng_status s = host_part(st, &bare, dev_pkg, drop_p, drop_key, slot, &z);
  const ng_status e = BE(st)->copy_ops_end(st->be, slot);
  NG_CHECK(s);
  NG_CHECK(e);
  st->pre[slot].ready = true;
  return NG_OK;
}

ng_status ng__store_input(ng_store *st, const ng_aggr *ag, const ng_fetch_pkg *dev_pkg,
                          float drop_p, uint64_t drop_key, int slot, const float **agg,
                          const float **self) {
  ng_backend *be = st->be;
  const int32_t nd = dev_pkg->n_dst;
  const int64_t dim = st->dim;
  const ng_fetch_pkg dp = *dev_pkg;
  /* Work memory: hot state (values, counts), cold state, aggregation, self rows. A state has
   * S floats a feature (a user aggregator's state size). */
  const int64_t S = ng__aggr_state_size(ag);
  const size_t rows = rows_bytes(nd, dim), srows = rows_bytes(nd, dim * S), cnt = counts_bytes(nd);
  NG_CHECK(ng__bk_reserve(be, &st->work, &st->work_cap,
                          NG_MAX(2 * srows + 2 * rows + 2 * cnt, (size_t)64)));
  char *w = st->work;
  ng_pstate hot = {(float *)w, (int32_t *)(w + srows), nd, dim};
  ng_pstate cold = {(float *)(w + srows + cnt), (int32_t *)(w + 2 * srows + cnt), nd, dim};
  float *out = (float *)(w + 2 * srows + 2 * cnt);
  float *self_rows = (float *)(w + 2 * srows + rows + 2 * cnt);

  /* Dropout applies where rows are read from the tables, not to rows already staged dropped,
   * nor to the merge. */
  const ng_aggr bare = bare_aggr(ag);
  ng_aggr dropped = bare;
  dropped.drop_p = drop_p;
  dropped.drop_key = drop_key;
  const bool from_host = reads_host(&dp);
  /* The hot tier's rows: the store's copy, read with dropout; or, partitioned, the rows the
   * package lists gathered from the parts that hold them, dropped as they are gathered (by
   * global id, as the copy's reads drop them), which the hot edges and self rows then read by
   * position: the same values summed in the same order, hence the same bits. */
  const float *hot_tbl = st->cache;
  const uint16_t *hot_tbl16 = st->cache16;
  const ng_aggr *hot_ag = &dropped;
  float hot_drop_p = drop_p;
  uint64_t hot_drop_key = drop_key;
  if (st->parts > 0) {
    if (dp.n_hot_rows > 0 && !dp.hot_ids)
      return ng__err(NG_ERR_STATE, "store: a partitioned hot tier needs packages that list "
                                   "their hot rows (ng_fetch_cfg.hot_gather)");
    for (int p = 0; p < st->parts; p++)
      if (!st->part_ptr[p])
        return ng__err(NG_ERR_STATE, "store: part %d of the hot tier is not attached", p);
    NG_CHECK(
        ng__bk_reserve(be, &st->hot_rows, &st->hot_rows_cap,
                       NG_MAX((size_t)dp.n_hot_rows * (size_t)dim * sizeof(float), (size_t)64)));
    if (dp.n_hot_rows > 0)
      NG_PROF_OP(st->prof, "input hot gather", 0, 0,
                 (double)dp.n_hot_rows * ((st->bf16 ? 2.0 : 4.0) * (double)dim + 4.0 * dim),
                 BE(st)->gather_parts(be, st->hot_rows, st->part_ptr, st->parts, st->bf16,
                                      dp.hot_ids, dp.n_hot_rows, dim, drop_p, drop_key));
    hot_tbl = st->hot_rows;
    hot_tbl16 = NULL;
    hot_ag = &bare;
    hot_drop_p = 0.0f;
    hot_drop_key = 0;
  }
  if (from_host) { /* what the device reads from host memory, queued ahead or queued now */
    host_parts z;
    if (slot >= 0 && slot < NG_STORE_SLOTS && st->pre[slot].ready) {
      z = parts_layout(st->pre[slot].buf, &dp, dim, dim * S);
      st->pre[slot].ready = false;
    } else {
      NG_CHECK(host_part(st, &bare, &dp, drop_p, drop_key, NG_STORE_SLOTS, &z));
    }
    self_rows = z.self_rows;
    cold = z.cold;
  }
  /* The cached part, then the cold part by the package's strategy, merged in that order: the
   * host's destinations with the state it reduced, the device's with the state reduced here
   * (BATCH) or with the host rows (above). Merging destination ranges one by one gives the
   * bits of one merge: it works row by row. */
  ng_prof *pf = st->prof;
  const double fb = (double)sizeof(float), row_b = fb * (double)dim, ib = sizeof(int32_t);
  /* Rows read from a bf16 table (the hot tier, staged bf16 rows) take half the bytes. */
  const double tab_b = st->bf16 ? row_b / 2.0 : row_b, staged_b = dp.staged16 ? row_b / 2.0 : row_b;
  /* Every edge hot (every row hot, or a mini-batch that drew no cold neighbour): no state to
   * merge, so the hot edges' reduction is finalized in its own kernel (aggr_fwd: the same sums
   * in the same order and the same finalize, hence the same bits; test_gpu_agg checks both
   * against one reference) instead of a state and a finalize pass over it: 0.06 ms of W4's
   * 1.63 ms step with every row hot. Built-in sum and mean over an fp32 table without input
   * dropout (aggr_fwd takes none), on a device backend (the CPU backend's finalize is a small
   * share of its step). */
  const bool direct = dp.hot.nnz > 0 && dp.cold.nnz == 0 && dp.device_cold.nnz == 0 && !ag->user &&
                      ag->reduce == NG_REDUCE_SUM && hot_ag->drop_p == 0.0f && !hot_tbl16 &&
                      !BE(st)->host_memory;
  NG_PROF_OP(pf, "input hot aggr", 0, dp.hot.nnz * dim,
             (double)dp.hot.nnz * tab_b + (double)nd * row_b +
                 (double)(dp.hot.nnz + (direct ? 1 : 2) * nd) * ib,
             direct ? BE(st)->aggr_fwd(be, &bare, &dp.hot, hot_tbl, dim, out, NULL)
                    : partial_tbl(st, hot_ag, &dp.hot, hot_tbl, hot_tbl16, &hot));
  const int32_t m = dp.n_host_dst;
  if (dp.cold.nnz > dp.device_cold.nnz) {
    ng_pstate h = state_rows(&hot, 0, m, S);
    NG_PROF_OP(pf, "input merge", 0, (double)m * dim, 3.0 * m * row_b,
               BE(st)->pstate_merge(be, &bare, &h, &dp.cold_state));
  }
  if (dp.device_cold.nnz > 0) {
    if (dp.mode == NG_FETCH_BATCH)
      NG_PROF_OP(pf, "input staged aggr", 0, dp.device_cold.nnz * dim,
                 (double)dp.device_cold.nnz * staged_b + (double)(nd - m) * row_b,
                 partial_tbl(st, &bare, &dp.device_cold, dp.staged, dp.staged16, &cold));
    ng_pstate h = state_rows(&hot, m, nd - m, S);
    NG_PROF_OP(pf, "input merge", 0, (double)(nd - m) * dim, 3.0 * (nd - m) * row_b,
               BE(st)->pstate_merge(be, &bare, &h, &cold));
  }
  NG_PROF_OP(pf, "input self rows", 0, 0, dp.n_self_hot * (tab_b + row_b),
             scatter_tbl(st, self_rows, dp.self_hot_pos, hot_tbl, hot_tbl16, dp.self_hot_ids,
                         dp.n_self_hot, hot_drop_p, hot_drop_key));
  if (!from_host) /* staged rows were dropped on the host */
    NG_PROF_OP(pf, "input self rows", 0, 0, dp.n_self_cold * (staged_b + row_b),
               scatter_tbl(st, self_rows, dp.self_cold_pos, dp.staged, dp.staged16,
                           dp.self_cold_ids, dp.n_self_cold, 0.0f, 0));
  if (!direct)
    NG_PROF_OP(pf, "input finalize", 0, (double)nd * dim, 2.0 * nd * row_b,
               BE(st)->pstate_finalize(be, &bare, &hot, out));
  if (ag->self_loop)
    NG_PROF_OP(pf, "input self loop", 0, 2.0 * nd * dim, 3.0 * nd * row_b,
               BE(st)->add_self_loop(be, out, dp.self_w, self_rows, nd, dim));
  *agg = out;
  *self = self_rows;
  return NG_OK;
}
