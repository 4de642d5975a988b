/* Layer-wise full-neighbour inference: layer by layer, in chunks of destinations. A pool of
 * producer threads (sched/'s worker pool) samples and gathers several chunks at once, each into
 * its own staging slot, while the calling thread computes the chunks on the device strictly in
 * order. On a GPU, the cold part of the input table and the intermediate layers stay in device
 * memory when they fit, so that each row crosses PCIe once; otherwise intermediate layers live
 * in anonymous host memory up to a limit, above it in a memory-mapped temporary file whose
 * resident pages are dropped as the layer goes on, so that host memory stays bounded whatever
 * the graph's size. */
#include "infer_impl.h"
#include "pool_impl.h"

#include "bf16.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The prefix of the temporary files, beside which ng__tmp_sweep finds dead runs' leftovers. */
#define INFER_TMP_NAME "neargnn-infer"
#define ALIGN_BYTES 64

/* A set of node ids: sorted and distinct, or (ids NULL) every node 0 .. n - 1. */
typedef struct {
  int64_t *ids;
  int64_t n;
} node_set;

/* Whether the chunks take the host-memory paths (aggregation in place, no staging); tests run
 * the device paths on the CPU backend (ng_infer_ctx.device_paths). */
static bool host_paths(const ng_infer_ctx *c, const ng_backend *be) {
  return be->iface->host_memory && !c->device_paths;
}

static int64_t set_id(const node_set *s, int64_t i) {
  return s->ids ? s->ids[i] : i;
}

/* The position of node `v` in set `s` (it is there). */
static int64_t set_pos(const node_set *s, int64_t v) {
  if (!s->ids)
    return v;
  int64_t lo = 0, hi = s->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->ids[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Host memory of one layer's output [rows, dim]: anonymous memory, or a mapped temporary file. */
typedef struct {
  float *ptr;
  size_t bytes;
  bool file;
  size_t dropped_at; /* bytes written when the resident pages were last dropped */
  size_t read_since; /* bytes read since the input pages were last dropped */
} layer_buf;

static void buf_free(layer_buf *b) {
  if (b->ptr) {
    if (b->file)
      munmap(b->ptr, b->bytes);
    else
      ng__big_free(b->ptr, b->bytes);
  }
  memset(b, 0, sizeof *b);
}

/* A layer output of `bytes`: in memory up to `limit`, else in a file under `dir` named
 * `<dir>/neargnn-infer.tmp-<pid>-XXXXXX` (so that a later run's sweep removes it if this process
 * dies), unlinked as soon as it is mapped. */
static ng_status buf_alloc(layer_buf *b, size_t bytes, int64_t limit, const char *dir) {
  memset(b, 0, sizeof *b);
  bytes = NG_MAX(bytes, (size_t)1);
  if (limit >= 0 && bytes <= (size_t)limit) {
    b->ptr = ng__big_alloc(bytes, "a layer's output in inference");
    if (!b->ptr)
      return NG_ERR_NOMEM;
    b->bytes = bytes;
    return NG_OK;
  }
  if (!dir || !*dir) {
    dir = getenv("TMPDIR");
    if (!dir || !*dir)
      dir = "/tmp";
  }
  char *dst = ng__path_join(dir, INFER_TMP_NAME);
  if (!dst)
    return NG_ERR_NOMEM;
  ng__tmp_sweep(dst);
  char *tmpl = ng__tmp_template(dst);
  free(dst);
  if (!tmpl)
    return ng__err(NG_ERR_NOMEM, "out of memory for a temporary file name");
  int fd = mkstemp(tmpl);
  if (fd < 0) {
    ng_status st = ng__err(NG_ERR_IO,
                           "%s: cannot create a temporary file for a layer's output (%s); give "
                           "another folder (--temp-dir) or a larger host memory limit",
                           tmpl, strerror(errno));
    free(tmpl);
    return st;
  }
  unlink(tmpl);
  ng_status st = NG_OK;
  if (ftruncate(fd, (off_t)bytes) != 0) {
    st = ng__err(NG_ERR_IO, "%s: cannot size a temporary file to %zu bytes: %s", tmpl, bytes,
                 strerror(errno));
  } else {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      st = ng__err(NG_ERR_IO, "%s: cannot map a temporary file of %zu bytes: %s", tmpl, bytes,
                   strerror(errno));
    else {
      b->ptr = p;
      b->bytes = bytes;
      b->file = true;
    }
  }
  close(fd);
  free(tmpl);
  return st;
}

/* Drops the resident pages of a file-backed buffer once `since` bytes went through it since the
 * last drop: the page cache keeps (and writes back) the data, the process's RSS forgets it. */
static void buf_trim(layer_buf *b, size_t *since, size_t add, int64_t limit) {
  if (!b->file)
    return;
  *since += add;
  const size_t every = limit > 0 ? (size_t)limit / 4 : ((size_t)64 << 20);
  if (*since < NG_MAX(every, (size_t)16 << 20))
    return;
  madvise(b->ptr, b->bytes, MADV_DONTNEED);
  *since = 0;
}

/* Pinned (backends with their own memory) or plain host memory that grows and is reused. */
typedef struct {
  void *ptr;
  size_t cap;
  bool pinned;
} host_buf;

static ng_status host_buf_reserve(ng_backend *be, host_buf *b, size_t bytes, const char *what) {
  if (bytes <= b->cap && b->ptr)
    return NG_OK;
  size_t cap = NG_MAX(bytes + bytes / 4, (size_t)4096);
  if (!be->iface->host_memory && be->iface->host_alloc) {
    if (b->ptr)
      be->iface->host_free(be, b->ptr);
    b->ptr = NULL;
    b->cap = 0;
    NG_CHECK(be->iface->host_alloc(be, &b->ptr, cap));
    b->cap = cap;
    b->pinned = true;
    return NG_OK;
  }
  return ng__host_reserve(&b->ptr, &b->cap, cap, what);
}

static void host_buf_free(ng_backend *be, host_buf *b) {
  if (b->pinned && b->ptr)
    be->iface->host_free(be, b->ptr);
  else
    free(b->ptr);
  memset(b, 0, sizeof *b);
}

/* One chunk's host side, filled by a producer thread into its staging slot. */
typedef struct {
  ng_sample_arena *arena;
  int64_t *ids;
  size_t ids_cap;
  ng_minibatch mb;
  int64_t first, n; /* positions [first, first + n) of the layer's set */
  host_buf rows;    /* input rows the host gathered [host_rows, in] */
  host_buf pack;    /* what the device needs besides the rows, packed (see produce) */
  size_t pack_bytes;
  /* Offsets into pack (backends with their own memory). */
  size_t off_arrays[4];
  size_t off_hot_pos, off_hot_ids, off_cold_pos, off_cold_ids, off_pos;
  int64_t n_hot, n_cold;
  int64_t host_rows; /* input rows gathered on the host (all, the cold ones, or none) */
  bool split;        /* layer 0 with a hot tier on the device: rows holds only the cold rows */
  /* A host-memory backend reads the input table in place: the block's indices name rows of the
   * table (gidx), and the destinations' own rows are `self` (in the table, or gathered into
   * rows). No gather of every source row. */
  bool direct;
  int32_t *gidx, *lpos;
  size_t gidx_cap, lpos_cap;
  ng_block dblk;
  const float *self;
} slot;

typedef struct {
  const ng_infer_ctx *c;
  ng_backend *be;
  int layer;
  ng_sampler_cfg cfg;
  const node_set *dst_set; /* the layer's destinations */
  const node_set *src_set; /* the rows of the input (NULL: the features, by node id) */
  const float *input;      /* the input table in host memory (NULL when in_dev) */
  const float *in_dev;     /* the input table in device memory: the previous layer's output */
  const float *cold_dev;   /* layer 0: feature rows [hot, nodes) uploaded to device memory */
  float *out_dev;          /* the output in device memory (NULL: the host's dst) */
  const uint16_t *input16; /* layer 0 of a bf16 run: the bf16 table, read instead of input */
  int64_t in_dim;
  layer_buf *in_buf;  /* the input's buffer when it is a previous layer's host output */
  int64_t chunk;      /* destinations per chunk (infer_chunk) */
  bool out_rows_done; /* the chunks write the caller's `out`: tell c->rows_done */
  bool check_finite;  /* the requested layer: its rows must be finite (check_rows) */
} layer_job;

/* Bytes of the block arrays in `pack`, each aligned. */
static size_t align_up(size_t x) {
  return (x + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
}

/* The memory-mapped inputs a chunk reads (the topology, layer 0's feature table) still have
 * every byte they had when mapped: a file truncated under the run ends it with an error naming
 * the file, checked before each chunk's reads rather than met as SIGBUS in them. */
static ng_status inputs_intact(const layer_job *j) {
  const ng_csr *g = j->c->graph;
  NG_CHECK(ng__map_verify(g->indptr));
  NG_CHECK(ng__map_verify(g->idx32 ? (const void *)g->idx32 : (const void *)g->idx64));
  if (j->layer == 0)
    NG_CHECK(ng__map_verify(j->input16 ? (const void *)j->input16 : (const void *)j->input));
  return NG_OK;
}

/* A host-memory backend's chunk: the block re-addressed to the rows of the input table, and the
 * destinations' own rows (in place when they are consecutive rows of the table). */
static ng_status produce_direct(layer_job *j, slot *s) {
  const ng_infer_ctx *c = j->c;
  const ng_block *b = &s->mb.blocks[0];
  const int64_t ns = b->n_src, dim = j->in_dim;
  const int64_t *nid = s->mb.node_ids;
  const node_set *src_set = j->src_set;
  NG_CHECK(ng__host_reserve((void **)&s->lpos, &s->lpos_cap, (size_t)NG_MAX(ns, 1) * 4,
                            "inference row positions"));
  NG_CHECK(ng__host_reserve((void **)&s->gidx, &s->gidx_cap, (size_t)NG_MAX(b->nnz, 1) * 4,
                            "inference row positions"));
  int32_t *lpos = s->lpos, *gidx = s->gidx;
  const int32_t *idx = b->indices;
  const int64_t nnz = b->nnz;
  for (int64_t i = 0; i < ns; i++)
    lpos[i] = (int32_t)(src_set ? set_pos(src_set, nid[i]) : nid[i]);
  for (int64_t e = 0; e < nnz; e++)
    gidx[e] = lpos[idx[e]];
  const int64_t table_rows = src_set ? src_set->n : c->graph->nodes;
  s->dblk = *b;
  s->dblk.indices = gidx;
  s->dblk.n_src = (int32_t)NG_MAX(table_rows, (int64_t)b->n_dst);
  /* The destinations are rows [first, first + n) of the table when both sets are whole. */
  const bool consecutive = !j->dst_set->ids && !(src_set && src_set->ids);
  if (consecutive) {
    s->self = j->input + s->first * dim;
  } else {
    const size_t row_bytes = (size_t)dim * sizeof(float);
    NG_CHECK(host_buf_reserve(j->be, &s->rows, (size_t)NG_MAX(s->n, 1) * row_bytes,
                              "inference input rows"));
    float *rows = s->rows.ptr;
    const float *table = j->input;
    for (int64_t i = 0; i < s->n; i++)
      memcpy(rows + i * dim, table + (int64_t)lpos[i] * dim, row_bytes);
    s->self = rows;
  }
  s->split = false;
  s->n_hot = 0;
  s->n_cold = ns;
  s->host_rows = 0;
  s->pack_bytes = 0;
  return NG_OK;
}

/* Samples the chunk's full 1-hop neighbourhood and prepares what the device reads: the block,
 * and either the input rows gathered from host memory or the positions the device gathers them
 * from (its hot tier, the uploaded cold rows, zero-copy host memory, or the previous layer's
 * output in device memory). Runs on a producer thread, single-threaded: parallelism comes from
 * the producers' several chunks at once. */
static ng_status produce(layer_job *j, slot *s) {
  const ng_infer_ctx *c = j->c;
  ng_backend *be = j->be;
  NG_CHECK(inputs_intact(j));
  NG_CHECK(ng__host_reserve((void **)&s->ids, &s->ids_cap, (size_t)s->n * sizeof *s->ids,
                            "inference ids"));
  for (int64_t i = 0; i < s->n; i++)
    s->ids[i] = set_id(j->dst_set, s->first + i);
  NG_CHECK(ng__sample(&s->mb, s->arena, &j->cfg, s->ids, (int32_t)s->n, 0));
  const ng_block *b = &s->mb.blocks[0];
  const int64_t ns = b->n_src, dim = j->in_dim;
  const int64_t *nid = s->mb.node_ids;
  /* In place: the block addresses the input table by node id and the destinations' own rows come
   * apart, which a layer that reads every source row as a matrix (GAT's projection, SAGE-pool's
   * MLP, GIN's self term) cannot take: those gather their sources like a device does. */
  const ng_model_kind kind = c->ex->model->kind;
  s->direct = host_paths(c, be) && !c->ex->model->layers[j->layer].ag.self_loop &&
              (kind == NG_MODEL_SAGE || kind == NG_MODEL_GCN) && !j->input16;
  if (s->direct)
    return produce_direct(j, s);
  const int64_t hot = c->store && j->layer == 0 ? c->store->hot : 0;
  const bool dev_in = j->in_dev != NULL;
  s->split = !host_paths(c, be) && j->layer == 0 && (hot > 0 || j->cold_dev);
  s->n_hot = 0;
  s->n_cold = ns;
  if (s->split) {
    for (int64_t i = 0; i < ns; i++)
      s->n_hot += nid[i] < hot;
    s->n_cold = ns - s->n_hot;
  }
  /* Cold rows the device reads itself: uploaded once, or by zero-copy. */
  const bool cold_uploaded = s->split && j->cold_dev;
  const bool zcopy = s->split && !cold_uploaded && c->store && ng__store_zcopy(c->store);
  /* The rows the host gathers: every source row, or only the cold ones (or none). */
  s->host_rows = dev_in || cold_uploaded || zcopy ? 0 : s->n_cold;
  const size_t row_bytes = (size_t)dim * sizeof(float);
  if (s->host_rows > 0)
    NG_CHECK(
        host_buf_reserve(be, &s->rows, (size_t)s->host_rows * row_bytes, "inference input rows"));
  float *rows = s->rows.ptr;
  /* The pack: block arrays, then hot/cold positions and ids, then the sources' rows in the
   * device's input table. */
  size_t at = 0;
  const size_t sizes[4] = {((size_t)b->n_dst + 1) * 4, (size_t)b->nnz * 4,
                           b->edge_w ? (size_t)b->nnz * 4 : 0,
                           b->self_w ? (size_t)b->n_dst * 4 : 0};
  for (int k = 0; k < 4; k++) {
    s->off_arrays[k] = at;
    at = align_up(at + sizes[k]);
  }
  const size_t n_cold_ids = (size_t)(s->split ? s->n_cold : 0);
  s->off_hot_pos = at;
  at = align_up(at + (size_t)s->n_hot * 4);
  s->off_hot_ids = at;
  at = align_up(at + (size_t)s->n_hot * 8);
  s->off_cold_pos = at;
  at = align_up(at + n_cold_ids * 4);
  s->off_cold_ids = at;
  at = align_up(at + n_cold_ids * 8);
  s->off_pos = at;
  at = align_up(at + (dev_in ? (size_t)ns * 8 : 0));
  s->pack_bytes = host_paths(c, be) ? 0 : NG_MAX(at, (size_t)ALIGN_BYTES);
  const node_set *src_set = j->src_set;
  if (s->pack_bytes) {
    NG_CHECK(host_buf_reserve(be, &s->pack, s->pack_bytes, "inference block staging"));
    char *p = s->pack.ptr;
    const void *src[4] = {b->indptr, b->indices, b->edge_w, b->self_w};
    for (int k = 0; k < 4; k++)
      if (sizes[k])
        memcpy(p + s->off_arrays[k], src[k], sizes[k]);
    if (s->split) {
      int32_t *hp = (int32_t *)(p + s->off_hot_pos), *cp = (int32_t *)(p + s->off_cold_pos);
      int64_t *hi = (int64_t *)(p + s->off_hot_ids), *ci = (int64_t *)(p + s->off_cold_ids);
      int64_t h = 0, k = 0;
      for (int64_t i = 0; i < ns; i++) {
        if (nid[i] < hot) {
          hp[h] = (int32_t)i;
          hi[h++] = nid[i];
        } else {
          cp[k] = (int32_t)i;
          /* Uploaded cold rows sit at nid - hot, zero-copy reads the host table by node id,
           * batched rows sit at k in `rows`. */
          ci[k] = cold_uploaded ? nid[i] - hot : zcopy ? nid[i] : k;
          k++;
        }
      }
    }
    if (dev_in) {
      int64_t *pos = (int64_t *)(p + s->off_pos);
      for (int64_t i = 0; i < ns; i++)
        pos[i] = src_set ? set_pos(src_set, nid[i]) : nid[i];
    }
  }
  if (s->host_rows > 0) {
    const float *table = j->input;
    const uint16_t *table16 = j->input16;
    /* The gathered rows' sources: every source row, or the cold ones in order. */
    const int32_t *cold_pos =
        s->split ? (const int32_t *)((char *)s->pack.ptr + s->off_cold_pos) : NULL;
    for (int64_t i = 0; i < s->host_rows; i++) {
      const int64_t v = nid[cold_pos ? cold_pos[i] : i];
      const int64_t r = src_set ? set_pos(src_set, v) : v;
      if (table16) /* bf16 rows are converted where they are read, as in training */
        for (int64_t k = 0; k < dim; k++)
          rows[i * dim + k] = ng_bf16_to_f32(table16[r * dim + k]);
      else
        memcpy(rows + i * dim, table + r * dim, row_bytes);
    }
  }
  return NG_OK;
}

/* Device memory of the chunk computation, grown and reused. With asynchronous uploads the
 * block of chunk k goes to pk[k % 2] (copy slot and mark k % 2), the others are used in order on
 * the device's queue. */
typedef struct {
  void *pack, *rows, *x, *out, *pk[2];
  size_t pack_cap, rows_cap, x_cap, out_cap, pk_cap[2];
} dev_bufs;

static void dev_free(ng_backend *be, dev_bufs *d) {
  be->iface->free(be, d->pk[0]);
  be->iface->free(be, d->pk[1]);
  be->iface->free(be, d->pack);
  be->iface->free(be, d->rows);
  be->iface->free(be, d->x);
  be->iface->free(be, d->out);
  memset(d, 0, sizeof *d);
}

/* Whether chunks upload their blocks asynchronously (the backend can wait for a mark): chunk k's
 * copy runs on copy slot k % 2 while the device still computes chunk k - 1, and the calling
 * thread does not wait for either; it waits only for chunk k - 1 to finish before its staging
 * slot goes back to the producers (run_layer). Synchronous, each chunk's upload waited for the
 * device to finish the chunk before it, and the device then idled through the copy and the
 * first launches. */
static bool async_upload(const ng_infer_ctx *c, const ng_backend *be) {
  return !host_paths(c, be) && be->iface->wait_mark && be->iface->copy_h2d_async &&
         be->iface->wait_copy && be->iface->mark;
}

/* Computes a produced chunk on the device into `out` (host rows [n, out_dim]) or into the rows
 * [first, first + n) of j->out_dev. `par` >= 0: the chunk's block is uploaded asynchronously
 * into device buffer `par` on copy slot `par`, and mark `par` is recorded after the ops that read
 * it (async_upload); -1: a synchronous upload. */
static ng_status compute(layer_job *j, slot *s, dev_bufs *d, float *out, int par) {
  ng_backend *be = j->be;
  ng_model_exec *ex = j->c->ex;
  const ng_block *hb = &s->mb.blocks[0];
  const int64_t dim = j->in_dim, out_dim = ex->model->layers[j->layer].out_dim;
  if (s->direct)
    return ng__exec_layer_eval_self(ex, j->layer, &s->dblk, j->input, s->self, out);
  if (host_paths(j->c, be))
    return ng__exec_layer_eval(ex, j->layer, hb, s->rows.ptr, out);
  const size_t row_bytes = (size_t)dim * sizeof(float);
  char *p;
  if (par >= 0) {
    /* A buffer that grows is freed first, which waits for the device: the ops before mark
     * `par`, which read it, are done. */
    NG_CHECK(ng__bk_reserve(be, &d->pk[par], &d->pk_cap[par], s->pack_bytes));
    NG_CHECK(be->iface->copy_h2d_async(be, d->pk[par], s->pack.ptr, s->pack_bytes, par));
    NG_CHECK(be->iface->wait_copy(be, par));
    p = d->pk[par];
  } else {
    NG_CHECK(ng__bk_reserve(be, &d->pack, &d->pack_cap, s->pack_bytes));
    NG_CHECK(be->iface->copy_h2d(be, d->pack, s->pack.ptr, s->pack_bytes));
    p = d->pack;
  }
  ng_block db = *hb;
  db.indptr = (const int32_t *)(p + s->off_arrays[0]);
  db.indices = (const int32_t *)(p + s->off_arrays[1]);
  db.edge_w = hb->edge_w ? (const float *)(p + s->off_arrays[2]) : NULL;
  db.self_w = hb->self_w ? (const float *)(p + s->off_arrays[3]) : NULL;
  db.t_indptr = db.t_dst = db.t_eid = NULL;
  const size_t x_bytes = (size_t)NG_MAX(hb->n_src, 1) * row_bytes;
  NG_CHECK(ng__bk_reserve(be, &d->x, &d->x_cap, x_bytes));
  float *x = d->x;
  if (j->in_dev) { /* the previous layer's output never left the device */
    NG_CHECK(be->iface->gather_rows(be, x, j->in_dev, (const int64_t *)(p + s->off_pos), hb->n_src,
                                    dim));
  } else if (!s->split) {
    NG_CHECK(be->iface->copy_h2d(be, x, s->rows.ptr, (size_t)hb->n_src * row_bytes));
  } else {
    const ng_store *store = j->c->store;
    if (s->n_hot > 0 && store->cache16) /* a bf16 hot tier, converted as it is read */
      NG_CHECK(be->iface->scatter_rows_bf16(be, x, (const int32_t *)(p + s->off_hot_pos),
                                            store->cache16, (const int64_t *)(p + s->off_hot_ids),
                                            s->n_hot, dim, 0.0f, 0));
    else if (s->n_hot > 0) /* hot rows straight from the device's hot tier: never uploaded again */
      NG_CHECK(be->iface->scatter_rows(be, x, (const int32_t *)(p + s->off_hot_pos), store->cache,
                                       (const int64_t *)(p + s->off_hot_ids), s->n_hot, dim, 0.0f,
                                       0));
    if (s->n_cold > 0 && !j->cold_dev && s->host_rows == 0 && store->host_dev16) {
      /* bf16: the device reads the bf16 host table by zero-copy, converting as it reads. */
      NG_CHECK(be->iface->scatter_rows_bf16(
          be, x, (const int32_t *)(p + s->off_cold_pos), store->host_dev16,
          (const int64_t *)(p + s->off_cold_ids), s->n_cold, dim, 0.0f, 0));
    } else if (s->n_cold > 0) {
      /* Uploaded once, or zero-copy (the device reads the host table), or batched: the host
       * gathered them, one copy. */
      const float *table = j->cold_dev ? j->cold_dev : s->host_rows == 0 ? store->host_dev : NULL;
      if (!table) {
        NG_CHECK(ng__bk_reserve(be, &d->rows, &d->rows_cap, (size_t)s->n_cold * row_bytes));
        NG_CHECK(be->iface->copy_h2d(be, d->rows, s->rows.ptr, (size_t)s->n_cold * row_bytes));
        table = d->rows;
      }
      NG_CHECK(be->iface->scatter_rows(be, x, (const int32_t *)(p + s->off_cold_pos), table,
                                       (const int64_t *)(p + s->off_cold_ids), s->n_cold, dim, 0.0f,
                                       0));
    }
  }
  const size_t out_bytes = (size_t)s->n * (size_t)out_dim * sizeof(float);
  NG_CHECK(ng__bk_reserve(be, &d->out, &d->out_cap, NG_MAX(out_bytes, (size_t)1)));
  NG_CHECK(ng__exec_layer_eval(ex, j->layer, &db, x, d->out));
  if (par >= 0)
    NG_CHECK(be->iface->mark(be, par)); /* every op that reads pk[par] is queued */
  /* Through d->out, whose alignment is the allocator's, so that the products run on the same
   * kernels (hence bits) whatever the chunk's offset in the layer. */
  if (j->out_dev)
    return be->iface->copy_d2d(be, j->out_dev + s->first * out_dim, d->out, out_bytes);
  return be->iface->copy_d2h(be, out, d->out, out_bytes);
}

/* The destinations of layer l - 1 from those of layer l: the set and every in-neighbour row. */
static ng_status expand(node_set *out, const node_set *in, const ng_csr *g, int threads) {
  const int64_t nodes = g->nodes;
  if (!in->ids) {
    *out = (node_set){NULL, nodes};
    return NG_OK;
  }
  const size_t words = (size_t)(nodes + 63) / 64;
  uint64_t *bits = ng__calloc(words, sizeof *bits, "the receptive field's bitmap");
  if (!bits)
    return NG_ERR_NOMEM;
  const int64_t n = in->n;
  const int64_t *ids = in->ids;
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
  for (int64_t i = 0; i < n; i++) {
    const int64_t v = ids[i];
    __atomic_fetch_or(&bits[v / 64], (uint64_t)1 << (v % 64), __ATOMIC_RELAXED);
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++) {
      const int64_t u = ng__csr_index(g, e);
      __atomic_fetch_or(&bits[u / 64], (uint64_t)1 << (u % 64), __ATOMIC_RELAXED);
    }
  }
  int64_t count = 0;
  for (size_t w = 0; w < words; w++)
    count += __builtin_popcountll(bits[w]);
  if (count == nodes) { /* the whole graph: no id list */
    free(bits);
    *out = (node_set){NULL, nodes};
    return NG_OK;
  }
  int64_t *list = ng__malloc((size_t)NG_MAX(count, 1) * sizeof *list, "a receptive field");
  if (!list) {
    free(bits);
    return NG_ERR_NOMEM;
  }
  int64_t k = 0;
  for (size_t w = 0; w < words; w++)
    for (uint64_t x = bits[w]; x; x &= x - 1)
      list[k++] = (int64_t)w * 64 + __builtin_ctzll(x);
  free(bits);
  *out = (node_set){list, count};
  return NG_OK;
}

/* ---- a layer's chunks: producers fill slots, the calling thread computes them in order ---- */

/* Chunk k is produced into slot k % n_slots once chunk k - n_slots has been computed, so that at
 * most n_slots chunks are in flight; the device thread takes them strictly in order (the output
 * does not depend on which producer made a chunk, nor when). */
typedef struct {
  layer_job *j;
  slot *slots;
  int n_slots;
  int64_t chunks, chunk, n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t next;     /* the next chunk a producer claims */
  int64_t consumed; /* chunks the device thread has finished with */
  int64_t *ready;   /* [n_slots]: the chunk a slot holds ready, -1 none */
  bool stop;        /* an error, or the end: producers leave */
  ng_status st;     /* a producer's error, with its message */
  char err[512];
  double host_s; /* producers' busy seconds, summed */
} layer_run;

static void producer_main(void *ctx, int worker) {
  (void)worker;
  layer_run *r = ctx;
  double busy = 0;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->stop && r->next < r->chunks && r->next >= r->consumed + r->n_slots)
      pthread_cond_wait(&r->cv, &r->mu);
    if (r->stop || r->next >= r->chunks)
      break;
    const int64_t k = r->next++;
    slot *s = &r->slots[k % r->n_slots];
    pthread_mutex_unlock(&r->mu);
    s->first = k * r->chunk;
    s->n = NG_MIN(r->chunk, r->n - s->first);
    const double t0 = ng__now();
    const ng_status st = produce(r->j, s);
    busy += ng__now() - t0;
    pthread_mutex_lock(&r->mu);
    if (st != NG_OK) {
      if (r->st == NG_OK) {
        r->st = st;
        /* The detail is thread-local: it goes back with the status. */
        ng__strlcpy(r->err, ng_last_error(), sizeof r->err);
      }
      r->stop = true;
      pthread_cond_broadcast(&r->cv);
      break;
    }
    r->ready[k % r->n_slots] = k;
    pthread_cond_broadcast(&r->cv);
  }
  r->host_s += busy;
  pthread_mutex_unlock(&r->mu);
}

/* The producers: sched/'s worker pool, on cores chosen near the GPU and pinned (the pool itself
 * runs a thread unbound when binding is refused, as for training). */
static ng_status producers_start(ng_pool **out, layer_run *r, int n, ng_backend *be) {
  ng_pool_opts po = NG_POOL_OPTS_INIT;
  po.workers = n;
  /* Beside a GPU the producers keep off the device thread's core and are pinned; beside the CPU
   * backend, whose OpenMP team uses every core, the one producer floats. */
  char pci[64] = "";
  if (!be->iface->host_memory) {
    if (be->iface->pci_bus_id && be->iface->pci_bus_id(be, pci, sizeof pci) == NG_OK && pci[0])
      po.pci_bus_id = pci;
  } else {
    po.bind = false;
    po.reserve_device_core = false;
  }
  return ng__pool_start(out, &po, producer_main, r);
}

/* The CPU backend's team for a layer's chunks (ng_infer_ctx.adapt_threads). Each parallel region
 * of the computation (a GEMM, an aggregation: several per tile of 1024 rows) waits at its end for
 * every thread of the team, so that on cores shared with other processes each region lasts until
 * the last of its threads has been scheduled: a 1 M-node, 3-layer run took 216 s with two threads
 * on the 2-core machine at load 18, 44 s with one. Every ADAPT_CYCLE chunks, the first
 * ADAPT_PROBE are computed with every thread and the next ADAPT_PROBE with one; the rest of the
 * cycle takes the team with the better rate (destinations and edges a second). An idle machine
 * loses the probes' difference, about 2%. */
#define ADAPT_CYCLE 64
#define ADAPT_PROBE 2

typedef struct {
  bool on;
  int most, best;    /* every thread; the team the cycle's probes chose */
  double s[2], w[2]; /* the probes' seconds and work: every thread, one */
} adapt_team;

/* Sets the team of chunk k and returns which probe it is (0: every thread, 1: one; -1: none). */
static int adapt_begin(adapt_team *a, int64_t k) {
  if (!a->on)
    return -1;
  const int64_t pos = k % ADAPT_CYCLE;
  if (pos == 0)
    a->s[0] = a->s[1] = a->w[0] = a->w[1] = 0.0;
  const int probe = pos < ADAPT_PROBE ? 0 : pos < 2 * ADAPT_PROBE ? 1 : -1;
  omp_set_num_threads(probe == 0 ? a->most : probe == 1 ? 1 : a->best);
  return probe;
}

static void adapt_end(adapt_team *a, int64_t k, int probe, double secs, double work) {
  if (probe < 0)
    return;
  a->s[probe] += secs;
  a->w[probe] += work;
  if (k % ADAPT_CYCLE == 2 * ADAPT_PROBE - 1)
    a->best = a->w[1] * a->s[0] > a->w[0] * a->s[1] ? 1 : a->most;
}

/* An output row that is not finite is an error, not a prediction: argmax over NaN is class 0
 * and a loss over it NaN, which a caller would take for a result. The message names the first
 * few such nodes of the chunk (dataset ids). */
#define NONFINITE_NAMED 5

static ng_status check_rows(const layer_job *j, const float *rows, int64_t first, int64_t n,
                            int64_t dim) {
  const uint32_t *bits = (const uint32_t *)rows;
  const int64_t count = n * dim;
  bool bad = false;
  for (int64_t i = 0; i < count; i++) /* exponent all ones: NaN or infinity (vectorisable) */
    bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
  if (!bad)
    return NG_OK;
  char list[160] = "";
  size_t at = 0;
  int named = 0;
  int64_t total = 0;
  for (int64_t r = 0; r < n; r++) {
    bool row_bad = false;
    for (int64_t k = 0; k < dim; k++)
      row_bad |= (bits[r * dim + k] & 0x7f800000u) == 0x7f800000u;
    if (!row_bad)
      continue;
    total++;
    if (named < NONFINITE_NAMED && at < sizeof list) {
      int w = snprintf(list + at, sizeof list - at, "%s%lld", named ? ", " : "",
                       (long long)set_id(j->dst_set, first + r));
      at += w > 0 ? (size_t)w : 0;
      named++;
    }
  }
  char more[48] = "";
  if (total > named)
    snprintf(more, sizeof more, " and %lld more", (long long)(total - named));
  return ng__err(NG_ERR_NONFINITE,
                 "the output of layer %d is NaN or infinite for node(s) %s%s; check the features "
                 "(--check-features full) and the model's weights",
                 j->layer, list, more);
}

/* Runs layer `j->layer` over its destination set into `dst` (host rows in the set's order) or
 * j->out_dev, with `n_prod` producers over `n_slots` slots. */
static ng_status run_layer(layer_job *j, float *dst, layer_buf *dst_buf, slot *slots, int n_slots,
                           int n_prod, dev_bufs *d, ng_progress *prog, double *done, double total,
                           ng_infer_stats *stats) {
  const ng_infer_ctx *c = j->c;
  const int64_t n = j->dst_set->n, chunk = j->chunk;
  const int64_t out_dim = c->ex->model->layers[j->layer].out_dim;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const size_t out_row = (size_t)out_dim * sizeof(float);
  if (chunks == 0)
    return NG_OK;
  n_slots = (int)NG_MIN((int64_t)n_slots, chunks);
  n_prod = (int)NG_MIN((int64_t)n_prod, chunks);
  int64_t ready[NG_INFER_MAX_SLOTS];
  for (int i = 0; i < n_slots; i++)
    ready[i] = -1;
  layer_run r = {.j = j,
                 .slots = slots,
                 .n_slots = n_slots,
                 .chunks = chunks,
                 .chunk = chunk,
                 .n = n,
                 .ready = ready,
                 .st = NG_OK};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  ng_pool *pool = NULL;
  ng_status st = producers_start(&pool, &r, n_prod, j->be);
  double wait_s = 0, dev_s = 0;
  const bool async = async_upload(c, j->be);
  const int team0 = omp_get_max_threads();
  adapt_team team = {.on = c->adapt_threads && host_paths(c, j->be) && c->threads > 1,
                     .most = c->threads,
                     .best = c->threads};
  for (int64_t k = 0; k < chunks && st == NG_OK; k++) {
    slot *cur = &slots[k % n_slots];
    const double t0 = ng__now();
    pthread_mutex_lock(&r.mu);
    while (!r.stop && ready[k % n_slots] != k)
      pthread_cond_wait(&r.cv, &r.mu);
    const bool ok = ready[k % n_slots] == k;
    pthread_mutex_unlock(&r.mu);
    const double t1 = ng__now();
    wait_s += t1 - t0;
    if (!ok)
      break; /* a producer failed: its error follows */
    const int probe = adapt_begin(&team, k);
    st = inputs_intact(j); /* the computation reads the table in place too */
    if (st == NG_OK)
      st = compute(j, cur, d, dst ? dst + cur->first * out_dim : NULL, async ? (int)(k % 2) : -1);
    adapt_end(&team, k, probe, ng__now() - t1, (double)cur->n + (double)cur->mb.blocks[0].nnz);
    /* Asynchronous: chunk k - 1's staging slot goes back once the device is done with it (its
     * block landed), while chunk k's ops are queued behind it; chunk k's goes back next time. */
    if (async && st == NG_OK && k > 0)
      st = j->be->iface->wait_mark(j->be, (int)((k - 1) % 2));
    if (async && st == NG_OK && k + 1 == chunks)
      st = j->be->iface->wait_mark(j->be, (int)(k % 2));
    dev_s += ng__now() - t1;
    if (stats) {
      stats->chunks++;
      if (j->layer == 0) {
        stats->hot_rows += cur->split ? cur->n_hot : 0;
        stats->cold_rows += cur->split ? cur->n_cold : cur->mb.blocks[0].n_src;
      }
    }
    if (j->check_finite && dst && st == NG_OK)
      st = check_rows(j, dst + cur->first * out_dim, cur->first, cur->n, out_dim);
    if (dst_buf && st == NG_OK)
      buf_trim(dst_buf, &dst_buf->dropped_at, (size_t)cur->n * out_row, c->host_bytes);
    if (j->out_rows_done && st == NG_OK)
      c->rows_done(c->rows_done_ctx, cur->first, cur->n);
    /* What the chunk read of a previous layer's host output: the rows its producer gathered, or
     * (the direct path, on this thread) every edge's row in place. */
    if (j->in_buf && st == NG_OK) {
      const int64_t rows = cur->direct ? cur->mb.blocks[0].nnz : cur->host_rows;
      buf_trim(j->in_buf, &j->in_buf->read_since, (size_t)rows * (size_t)j->in_dim * sizeof(float),
               c->host_bytes);
    }
    *done += (double)cur->n;
    if (st == NG_OK)
      st = ng__progress(prog, "infer", *done, total, false);
    pthread_mutex_lock(&r.mu);
    r.consumed = async && k + 1 < chunks ? k : k + 1;
    if (st != NG_OK)
      r.stop = true;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
  }
  if (team.on)
    omp_set_num_threads(team0);
  pthread_mutex_lock(&r.mu);
  r.stop = true; /* the normal end, or this thread's error: producers leave */
  pthread_cond_broadcast(&r.cv);
  pthread_mutex_unlock(&r.mu);
  if (pool)
    ng__pool_join(pool);
  if (st == NG_OK && r.st != NG_OK)
    st = ng__err(r.st, "%s", r.err);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
  if (stats) {
    stats->host_s[j->layer] += r.host_s;
    stats->wait_s[j->layer] += wait_s;
    stats->device_s[j->layer] += dev_s;
  }
  return st;
}

/* Producers beside a backend: every thread but the device thread's beside a GPU; one beside a
 * host-memory backend, whose computation (OpenMP on every core) runs at the same time and whose
 * chunks need little host work (a second team only spins against it: libgomp's active waiting
 * took 73% of the cycles of a 1 M-node run on 2 cores). */
static int producer_count(const ng_infer_ctx *c, ng_backend *be) {
  if (c->producers > 0)
    return NG_MIN(c->producers, NG_INFER_MAX_SLOTS - 2);
  if (be->iface->host_memory)
    return 1;
  return NG_MAX(1, NG_MIN(c->threads - 1, NG_INFER_MAX_SLOTS - 2));
}

/* Device memory inference may hold for the input table's cold rows and the intermediate layers
 * (0: none): what the caller allows, at most what is free less a margin for the chunks' buffers
 * and the model's workspace. */
static int64_t device_budget(const ng_infer_ctx *c, ng_backend *be) {
  if (host_paths(c, be) || c->device_bytes < 0 || !be->iface->mem_info)
    return 0;
  size_t free_b = 0, total_b = 0;
  if (be->iface->mem_info(be, &free_b, &total_b) != NG_OK)
    return 0; /* no figure: the host paths alone */
  const int64_t margin = NG_INFER_DEVICE_MARGIN + (int64_t)(free_b / 20);
  int64_t budget = (int64_t)free_b - margin;
  if (c->device_bytes > 0)
    budget = NG_MIN(budget, c->device_bytes);
  return NG_MAX(budget, (int64_t)0);
}

/* Destinations per chunk when the caller leaves it to inference (ng_infer_ctx.chunk 0). The host
 * paths, and a layer whose input rows the host gathers into staging (whose pinned memory grows
 * with the chunk), take NG_INFER_CHUNK_SMALL. A layer whose input rows the device reads itself (its
 * hot tier, the uploaded cold rows, zero-copy, the previous layer kept resident) stages only the
 * block and the rows' positions, so it takes chunks up to NG_INFER_CHUNK_LARGE: each chunk's upload
 * waits for the device and its launches cost the same whatever its size, and 4,096-node chunks
 * paid that 14,649 times for 20 M nodes x 3 layers on an H100 (17.7 s against 9.9 s with 65,536).
 * Such a chunk is also at most the largest layer's destinations over twice the producers (they
 * all get work, on a small graph too) and its device buffers at most a quarter of the device
 * budget, from which they are set aside before any layer is kept resident. */

/* Device bytes a chunk of `chunk` destinations of layer `l` may take at most (its input rows,
 * the layer's workspace and output, the staged block), with `src_rows` rows in its input. Each
 * destination brings its average degree of distinct sources, a quarter more for the skew. */
static int64_t chunk_device_bytes(const ng_infer_ctx *c, int l, int64_t chunk, int64_t src_rows) {
  const ng_layer *L = &c->ex->model->layers[l];
  const ng_model_kind kind = c->ex->model->kind;
  const double deg =
      c->graph->nodes > 0 ? (double)c->graph->indptr[c->graph->nodes] / (double)c->graph->nodes : 0;
  const double edges = 1.25 * (double)chunk * deg;
  const double ns = NG_MIN((double)src_rows, (double)chunk + edges);
  const double per_src = (double)L->in_dim + (kind == NG_MODEL_GAT ? (double)L->cols : 0.0) +
                         (kind == NG_MODEL_SAGE_POOL ? (double)L->pre_dim : 0.0);
  const double per_dst =
      (double)(L->in_dim + L->out_dim) + 2.0 * (double)L->pre_dim + (double)L->heads * (1.0 + deg);
  const double bytes = 4.0 * (ns * per_src + (double)chunk * per_dst) + 24.0 * ns + 8.0 * edges +
                       4.0 * (double)NG_EVAL_TILE_ROWS * (double)(2 * L->in_dim + L->out_dim);
  return bytes >= 9e18 ? INT64_MAX : (int64_t)bytes;
}

/* The large chunk for destination sets of at most `most` nodes and `n_prod` producers: a power
 * of two in [NG_INFER_CHUNK_SMALL, NG_INFER_CHUNK_LARGE] (NG_INFER_CHUNK_SMALL: none larger helps).
 */
static int64_t large_chunk(int64_t most, int n_prod) {
  int64_t ch = NG_INFER_CHUNK_SMALL;
  while (ch < NG_INFER_CHUNK_LARGE && ch * 2 * 2 * NG_MAX(n_prod, 1) <= most)
    ch *= 2;
  return ch;
}

ng_status ng__infer(float *out, const ng_infer_ctx *c, int layer, const int64_t *targets, int64_t n,
                    ng_infer_stats *stats) {
  ng_model_exec *ex = c->ex;
  const struct ng_model *m = ex->model;
  ng_backend *be = ex->be;
  const int64_t nodes = c->graph->nodes;
  if (layer < 0 || layer >= m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: the model has layers 0 to %d", layer,
                   m->n_layers - 1);
  if (c->chunk < 0 || c->chunk > INT32_MAX / 2)
    return ng__err(NG_ERR_INVALID_ARG,
                   "inference chunk %lld is not in [0, %d] (0: chosen per layer)",
                   (long long)c->chunk, INT32_MAX / 2);
  if (!targets)
    n = nodes;
  if (n < 0)
    return ng__err(NG_ERR_INVALID_ARG, "%lld target nodes", (long long)n);
  if (stats)
    memset(stats, 0, sizeof *stats);
  if (n == 0)
    return NG_OK;
  node_set sets[NG_MAX_LAYERS];
  memset(sets, 0, sizeof sets);
  ng_status st = NG_OK;
  /* The last layer's destinations: the targets, sorted and distinct. Targets that already are
   * (link evaluation's nodes, a range) skip the sort, and the last layer writes the caller's
   * rows in place, as for every node: no second copy of the output and no reordering pass
   * (a 16 M x 256 output is 16 GiB, which a temporary file and the copy would hold twice). */
  bool ascending = true;
  if (targets) {
    for (int64_t i = 0; i < n; i++) {
      if (targets[i] < 0 || targets[i] >= nodes)
        return ng__err(NG_ERR_INVALID_ARG, "node id %lld (position %lld) is not in [0, %lld)",
                       (long long)targets[i], (long long)i, (long long)nodes);
      ascending = ascending && (i == 0 || targets[i] > targets[i - 1]);
    }
    int64_t *u = ng__malloc((size_t)n * sizeof *u, "the target ids");
    if (!u)
      return NG_ERR_NOMEM;
    memcpy(u, targets, (size_t)n * sizeof *u);
    int64_t k = n;
    if (!ascending)
      k = ng__sort_unique_i64(u, n);
    sets[layer] = (node_set){u, k};
    if (k == nodes) {
      free(u);
      sets[layer] = (node_set){NULL, nodes};
    }
  } else {
    sets[layer] = (node_set){NULL, nodes};
  }
  /* Receptive fields: layer l's output is needed for layer l + 1's destinations and their
   * neighbours; the whole graph once it covers every node (then no id list at all). */
  for (int l = layer - 1; l >= 0 && st == NG_OK; l--)
    st = expand(&sets[l], &sets[l + 1], c->graph, c->threads);
  double total = 0, done = 0;
  for (int l = 0; l <= layer; l++) {
    total += (double)sets[l].n;
    if (stats)
      stats->rows[l] = sets[l].n;
  }
  /* Device residency (GPU): an intermediate layer's output stays in device memory when it fits
   * beside the previous one's; the input table's cold rows are uploaded once when layer 0 covers
   * every node and they fit beside layer 0's output. Every row then crosses PCIe once instead of
   * once per chunk that reads it; the rows the device reads, hence the bits, are the same. */
  bool resident[NG_MAX_LAYERS] = {false};
  bool upload_cold = false;
  const int64_t hot = c->store ? c->store->hot : 0;
  const int n_prod = producer_count(c, be);
  int64_t budget = device_budget(c, be);
  /* Large chunks (the caller chose none): their device buffers come first. */
  int64_t large = 0;
  if (c->chunk == 0 && budget > 0) {
    int64_t most = 0;
    for (int l = 0; l <= layer; l++)
      most = NG_MAX(most, sets[l].n);
    large = large_chunk(most, n_prod);
    int64_t need = 0;
    for (int l = 0; l <= layer && large > NG_INFER_CHUNK_SMALL; l++)
      need = NG_MAX(need, chunk_device_bytes(c, l, large, l > 0 ? sets[l - 1].n : nodes));
    if (large > NG_INFER_CHUNK_SMALL && need <= budget / 4)
      budget -= need;
    else
      large = 0;
  }
  if (budget > 0) {
    int64_t prev = 0;
    for (int l = 0; l < layer; l++) {
      const int64_t bytes = sets[l].n * m->layers[l].out_dim * (int64_t)sizeof(float);
      resident[l] = prev + bytes <= budget;
      prev = resident[l] ? bytes : 0;
    }
    const int64_t cold_bytes = (nodes - hot) * m->layers[0].in_dim * (int64_t)sizeof(float);
    const int64_t out0 =
        resident[0] && layer > 0 ? sets[0].n * m->layers[0].out_dim * (int64_t)sizeof(float) : 0;
    /* Not with bf16 features: the upload copies the fp32 table (the bf16 run reads bf16 rows). */
    upload_cold = !sets[0].ids && nodes > hot && cold_bytes + out0 <= budget && !c->features_bf16;
  }
  /* Each layer's chunk: the caller's, else large where the device reads the input rows itself
   * (the previous layer resident; layer 0's cold rows uploaded, read by zero-copy beside a hot
   * tier, or none), else small. */
  int64_t chunk_of[NG_MAX_LAYERS];
  for (int l = 0; l <= layer; l++) {
    const bool dev_reads =
        l > 0 ? resident[l - 1]
              : upload_cold || hot >= nodes || (hot > 0 && c->store && ng__store_zcopy(c->store));
    chunk_of[l] = c->chunk > 0 ? c->chunk : large && dev_reads ? large : NG_INFER_CHUNK_SMALL;
    if (stats)
      stats->chunk[l] = chunk_of[l];
  }
  const int n_slots = n_prod + 2;
  slot slots[NG_INFER_MAX_SLOTS];
  memset(slots, 0, sizeof slots);
  dev_bufs d;
  memset(&d, 0, sizeof d);
  for (int k = 0; k < n_slots && st == NG_OK; k++)
    st = ng__sample_arena_create(&slots[k].arena);
  if (stats) {
    stats->producers = n_prod;
    stats->slots = n_slots;
  }
  ng_progress prog;
  ng__progress_init(&prog, c->progress, c->progress_ctx);
  layer_buf bufs[2];
  memset(bufs, 0, sizeof bufs);
  float *dev_out[2] = {NULL, NULL}; /* device outputs of layers l - 1 and l, by parity */
  float *cold_dev = NULL;
  const int64_t in_dim0 = m->layers[0].in_dim;
  if (st == NG_OK && upload_cold) {
    const double t0 = ng__now();
    const size_t bytes = (size_t)(nodes - hot) * (size_t)in_dim0 * sizeof(float);
    st = be->iface->alloc(be, (void **)&cold_dev, bytes);
    if (st == NG_OK)
      st = be->iface->copy_h2d(be, cold_dev, c->features + hot * in_dim0, bytes);
    if (stats) {
      stats->upload_s = ng__now() - t0;
      stats->device_bytes += (int64_t)bytes;
    }
  }
  /* Every node in id order, or targets sorted and distinct: the last layer writes `out`. */
  const bool direct = !targets || ascending;
  for (int l = 0; l <= layer && st == NG_OK; l++) {
    const double t_layer = ng__now();
    const ng_layer *L = &m->layers[l];
    layer_buf *dst_buf = &bufs[l % 2], *src_buf = l > 0 ? &bufs[(l + 1) % 2] : NULL;
    float *src_dev = l > 0 ? dev_out[(l + 1) % 2] : NULL;
    float *dst = NULL;
    const size_t out_bytes = (size_t)sets[l].n * (size_t)L->out_dim * sizeof(float);
    if (l < layer && resident[l]) {
      st = be->iface->alloc(be, (void **)&dev_out[l % 2], NG_MAX(out_bytes, (size_t)1));
      if (st != NG_OK)
        break;
      if (stats)
        stats->device_bytes += (int64_t)out_bytes;
    } else if (l == layer && direct) {
      dst = out;
    } else {
      st = buf_alloc(dst_buf, out_bytes, c->host_bytes, c->temp_dir);
      if (st != NG_OK)
        break;
      dst = dst_buf->ptr;
      if (stats && dst_buf->file)
        stats->file_bytes += (int64_t)dst_buf->bytes;
    }
    layer_job j = {
        .c = c,
        .be = be,
        .layer = l,
        .cfg = {.graph = c->graph, .n_layers = 1},
        .dst_set = &sets[l],
        .src_set = l > 0 ? &sets[l - 1] : NULL,
        .input = l == 0    ? c->features
                 : src_dev ? NULL
                           : src_buf->ptr,
        .in_dev = src_dev,
        .cold_dev = l == 0 ? cold_dev : NULL,
        .out_dev = dst ? NULL : dev_out[l % 2],
        .input16 = l == 0 ? c->features_bf16 : NULL,
        .in_dim = L->in_dim,
        .in_buf = l > 0 && !src_dev ? src_buf : NULL,
        .chunk = chunk_of[l],
        .out_rows_done = dst && dst == out && c->rows_done,
        .check_finite = l == layer,
    };
    j.cfg.fanout[0] = -1;
    j.cfg.gcn_weights[0] = L->ag.weighted || L->ag.self_loop;
    st = run_layer(&j, dst, dst && dst_buf->ptr == dst ? dst_buf : NULL, slots, n_slots, n_prod, &d,
                   &prog, &done, total, stats);
    if (src_buf)
      buf_free(src_buf);
    if (src_dev) {
      be->iface->free(be, src_dev);
      dev_out[(l + 1) % 2] = NULL;
    }
    if (l == 0 && cold_dev) {
      be->iface->free(be, cold_dev);
      cold_dev = NULL;
    }
    if (stats)
      stats->layer_s[l] = ng__now() - t_layer + (l == 0 ? stats->upload_s : 0.0);
  }
  if (st == NG_OK && !direct) {
    /* Rows of the sorted distinct targets back into the caller's order. */
    const node_set *s = &sets[layer];
    const float *src = bufs[layer % 2].ptr;
    const int64_t dim = m->layers[layer].out_dim;
#pragma omp parallel for schedule(static) num_threads(c->threads) if (n > 4096)
    for (int64_t i = 0; i < n; i++)
      memcpy(out + i * dim, src + set_pos(s, targets[i]) * dim, (size_t)dim * sizeof(float));
  }
  if (st == NG_OK)
    st = ng__progress(&prog, "infer", total, total, true);
  buf_free(&bufs[0]);
  buf_free(&bufs[1]);
  be->iface->free(be, dev_out[0]);
  be->iface->free(be, dev_out[1]);
  be->iface->free(be, cold_dev);
  for (int k = 0; k < n_slots; k++) {
    ng__sample_arena_destroy(slots[k].arena);
    free(slots[k].ids);
    free(slots[k].gidx);
    free(slots[k].lpos);
    host_buf_free(be, &slots[k].rows);
    host_buf_free(be, &slots[k].pack);
  }
  dev_free(be, &d);
  for (int l = 0; l < NG_MAX_LAYERS; l++)
    free(sets[l].ids);
  return st;
}

void ng__infer_report(ng_infer_report *out, const ng_infer_stats *s, int layers) {
  ng_infer_report r = NG_INFER_REPORT_INIT;
  r.layers = layers;
  r.producers = s->producers;
  r.slots = s->slots;
  for (int l = 0; l < layers && l < NG_INFER_REPORT_LAYERS && l < NG_MAX_LAYERS; l++) {
    r.rows[l] = s->rows[l];
    r.seconds[l] = s->layer_s[l];
    r.host_seconds[l] = s->host_s[l];
    r.wait_seconds[l] = s->wait_s[l];
    r.device_seconds[l] = s->device_s[l];
    r.chunk[l] = s->chunk[l];
  }
  r.upload_seconds = s->upload_s;
  r.device_bytes = s->device_bytes;
  r.file_bytes = s->file_bytes;
  const size_t size = out->size;
  memcpy(out, &r, NG_MIN(size, sizeof r));
  out->size = size;
}
