/* The CPU backend: every op of struct ng_backend_i on host memory. It is the reference the CUDA
 * backend is compared against, so every op gives bit-identical results for any thread count:
 * rows are computed independently (any split of rows over threads gives the same bytes), sums
 * across rows run in fixed-size chunks combined in order, and GEMMs are split by a partition
 * that depends only on the shape, each part one single-threaded oneDNN call (see
 * docs/backends.md). Aggregation and gathers run on the SIMD kernels of cpu/kernels_cpu.c.
 * Its ops see only arguments the checked front has validated (core/backend_check.c), which also
 * reads the blocks' offsets here because this backend's memory is host memory; what stays here
 * is the check that needs the data the op reads anyway (xent's labels). */
#include "attn_impl.h"
#include "kernels_impl.h"
#include "sampler_impl.h"
#include "ng_cpu.h"

#include "rng.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <unistd.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int threads; /* 0: the OpenMP default at each call */
  const ng_cpu_kernels *kern;
  struct {
    double loss;
    int64_t correct;
  } queue[NG_XENT_QUEUE]; /* deferred xent results, read in order by xent_result */
  int head, count;
  double events[NG_BACKEND_EVENTS]; /* event_record: the clock, in seconds */
} cpu_ctx;

enum {
  AGGR_CHUNK_ROWS = 32,       /* destinations (or sources) per dynamically scheduled chunk */
  GATHER_CHUNK_ROWS = 256,    /* rows per gather chunk (the kernel prefetches within a chunk) */
  PAR_MIN_WORK = 1 << 15,     /* elements below which an op runs on the calling thread */
  COPY_CHUNK = 1 << 20,       /* bytes per chunk of a parallel copy */
  XENT_CHUNK_ROWS = 256,      /* rows per partial loss sum */
  BIAS_CHUNK_COLS = 64,       /* columns per chunk of the bias-gradient column sums */
  GEMM_MAX_PARTS = 64,        /* a GEMM is split into at most this many parts ... */
  GEMM_MIN_ROWS = 64,         /* ... of at least this many rows or columns of C ... */
  GEMM_MIN_K = 512,           /* ... or of at least this many products of the inner dimension */
  GEMM_ENOUGH_PARTS = 16,     /* a row or column split with this many parts is parallel enough */
  GEMM_MIN_K_PARTS = 4,       /* an inner-dimension split needs at least this many parts */
  GEMM_MAX_K_TEMP = 64 << 20, /* bytes of partial products an inner-dimension split may hold */
  GEMM_ROW_BLOCK = 48,        /* rows of A a oneDNN call always sees a multiple of (sgemm_rows) */
};

static int nthreads(const ng_backend *be) {
  const cpu_ctx *c = be->ctx;
  return c->threads > 0 ? c->threads : omp_get_max_threads();
}

static const ng_cpu_kernels *kern(const ng_backend *be) {
  return ((const cpu_ctx *)be->ctx)->kern;
}

static inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/* ---- lifetime and memory ---- */

static void cpu_destroy(ng_backend *be) {
  free(be->ctx);
  free(be);
}

static ng_status cpu_alloc(ng_backend *be, void **out, size_t bytes) {
  (void)be;
  *out = ng__aligned_alloc(bytes, "CPU backend buffer");
  return *out ? NG_OK : NG_ERR_NOMEM;
}

static void cpu_free(ng_backend *be, void *ptr) {
  (void)be;
  ng__aligned_free(ptr);
}

/* Copies in fixed 1 MiB chunks over the threads (a copy's bytes do not depend on the split). */
static void par_copy(const ng_backend *be, void *dst, const void *src, size_t bytes) {
  int64_t chunks = (int64_t)((bytes + COPY_CHUNK - 1) / COPY_CHUNK);
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (chunks > 4)
  for (int64_t c = 0; c < chunks; c++) {
    size_t off = (size_t)c * COPY_CHUNK;
    memcpy((char *)dst + off, (const char *)src + off, NG_MIN((size_t)COPY_CHUNK, bytes - off));
  }
}

static ng_status cpu_copy(ng_backend *be, void *dst, const void *src, size_t bytes) {
  const char *d = dst, *s = src;
  if (d < s + bytes && s < d + bytes)
    memmove(dst, src, bytes); /* overlapping ranges need memmove's ordering */
  else
    par_copy(be, dst, src, bytes);
  return NG_OK;
}

static ng_status cpu_copy_h2d(ng_backend *be, void *dst, const void *host_src, size_t bytes) {
  return cpu_copy(be, dst, host_src, bytes);
}

static ng_status cpu_copy_h2d_async(ng_backend *be, void *dst, const void *host_src, size_t bytes,
                                    int slot) {
  (void)slot;
  /* Ops are synchronous here, so the copy can run at once; an empty one has no order to keep. */
  return bytes == 0 ? NG_OK : cpu_copy(be, dst, host_src, bytes);
}

/* Ops run at once here, so copies are done when they return and the copy-engine queue is the
 * ops' queue: waiting for a copy, marks and copy ops (wait_copy, mark, wait_mark,
 * copy_ops_begin/end) have nothing to do. */
static ng_status cpu_queue_nop(ng_backend *be, int slot) {
  (void)be, (void)slot;
  return NG_OK;
}

static ng_status cpu_copy_d2h(ng_backend *be, void *host_dst, const void *src, size_t bytes) {
  return cpu_copy(be, host_dst, src, bytes);
}

static ng_status cpu_copy_d2d(ng_backend *be, void *dst, const void *src, size_t bytes) {
  return cpu_copy(be, dst, src, bytes);
}

static ng_status cpu_fill(ng_backend *be, float *x, int64_t n, float value) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++)
    x[i] = value;
  return NG_OK;
}

static ng_status cpu_mem_info(ng_backend *be, size_t *free_bytes, size_t *total) {
  (void)be;
  long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES),
       phys = sysconf(_SC_PHYS_PAGES);
  if (page <= 0 || avail < 0 || phys <= 0)
    return ng__err(NG_ERR_IO, "cpu backend: the host's memory size is unknown (sysconf failed)");
  if (free_bytes)
    *free_bytes = (size_t)avail * (size_t)page;
  if (total)
    *total = (size_t)phys * (size_t)page;
  return NG_OK;
}

static ng_status cpu_host_register(ng_backend *be, void *ptr, size_t bytes, bool read_only) {
  (void)be, (void)ptr, (void)bytes, (void)read_only; /* host memory is the backend's memory */
  return NG_OK;
}

static void cpu_host_unregister(ng_backend *be, void *ptr) {
  (void)be, (void)ptr;
}

static ng_status cpu_pci_bus_id(ng_backend *be, char *buf, size_t cap) {
  (void)be;
  if (cap)
    buf[0] = '\0';
  return NG_OK;
}

static ng_status cpu_host_view(ng_backend *be, const void *host, const void **out) {
  (void)be;
  *out = host; /* the backend's memory is host memory */
  return NG_OK;
}

static ng_status cpu_sync(ng_backend *be) {
  (void)be; /* every op has finished when it returns */
  return NG_OK;
}

/* Every op has finished when it returns, so an event is the clock's time. */
static ng_status cpu_event_record(ng_backend *be, int k) {
  ((cpu_ctx *)be->ctx)->events[k] = ng__now();
  return NG_OK;
}

static ng_status cpu_event_elapsed(ng_backend *be, int a, int b, double *ms) {
  const cpu_ctx *c = be->ctx;
  *ms = (c->events[b] - c->events[a]) * 1e3;
  return NG_OK;
}

static ng_status cpu_set_precision(ng_backend *be, ng_precision p) {
  (void)be;
  if (p == NG_PRECISION_FP32)
    return NG_OK;
  return ng__err(NG_ERR_UNSUPPORTED,
                 "precision tf32: the CPU backend computes in fp32 only; use it with --device "
                 "cuda");
}

/* ---- gathers ---- */

static ng_status cpu_gather_rows(ng_backend *be, float *dst, const float *table, const int64_t *ids,
                                 int64_t n, int64_t dim) {
  const ng_cpu_kernels *k = kern(be);
  int64_t chunks = ceil_div(n, GATHER_CHUNK_ROWS);
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n * dim >= PAR_MIN_WORK)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t i0 = c * GATHER_CHUNK_ROWS, len = NG_MIN((int64_t)GATHER_CHUNK_ROWS, n - i0);
    k->gather_rows(dst + i0 * dim, table, ids + i0, len, dim);
  }
  return NG_OK;
}

/* ---- aggregation ---- */

/* Runs the statements given last on chunks of AGGR_CHUNK_ROWS rows of [0, rows), dynamically
 * scheduled: every row is computed by one thread on its own, so the schedule never changes the
 * result. */
// clang-format off
#define FOR_ROW_CHUNKS(be, rows, work, r0, r1, ...)                                                \
  do {                                                                                             \
    const int64_t rows_ = (rows);                                                                  \
    const int64_t chunks_ = ceil_div(rows_, AGGR_CHUNK_ROWS);                                      \
    const int nt_ = nthreads(be);                                                                  \
    const bool par_ = (work) >= PAR_MIN_WORK;                                                      \
    _Pragma("omp parallel for schedule(dynamic, 1) num_threads(nt_) if (par_)")                   \
    for (int64_t c_ = 0; c_ < chunks_; c_++) {                                                     \
      const int32_t r0 = (int32_t)(c_ * AGGR_CHUNK_ROWS);                                          \
      const int32_t r1 = (int32_t)NG_MIN(rows_, (int64_t)r0 + AGGR_CHUNK_ROWS);                    \
      __VA_ARGS__;                                                                                 \
    }                                                                                              \
  } while (0)
// clang-format on

static ng_status cpu_aggr_fwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                              const float *src, int64_t dim, float *dst, int32_t *argbest) {
  const ng_cpu_kernels *k = kern(be);
  int64_t work = (blk->nnz + blk->n_dst) * dim;
  if (ag->user) {
    FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1,
                   ng__cpu_uagg_fwd_rows(ag, blk, src, dim, d0, d1, dst));
  } else if (ag->reduce == NG_REDUCE_SUM) {
    FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1, k->aggr_sum(ag, blk, src, dim, d0, d1, dst));
  } else {
    bool is_max = ag->reduce == NG_REDUCE_MAX;
    FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1,
                   k->aggr_best(is_max, blk, src, dim, d0, d1, dst, argbest));
  }
  return NG_OK;
}

static ng_status cpu_aggr_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                              const float *grad_dst, const int32_t *argbest, int64_t dim,
                              float *grad_src) {
  const ng_cpu_kernels *k = kern(be);
  int64_t work = (blk->nnz + blk->n_src) * dim;
  if (ag->reduce == NG_REDUCE_SUM) {
    FOR_ROW_CHUNKS(be, blk->n_src, work, s0, s1,
                   k->aggr_sum_bwd(ag, blk, grad_dst, dim, s0, s1, grad_src));
  } else {
    FOR_ROW_CHUNKS(be, blk->n_src, work, s0, s1,
                   k->aggr_best_bwd(blk, grad_dst, argbest, dim, s0, s1, grad_src));
  }
  return NG_OK;
}

static ng_status cpu_aggr_user_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                   const float *src, const float *grad_dst, int64_t dim,
                                   float *work, float *grad_src) {
  const int64_t cells = (blk->nnz + blk->n_src) * dim * 4;
  FOR_ROW_CHUNKS(be, blk->n_dst, cells, d0, d1,
                 ng__cpu_uagg_bwd_dst_rows(ag, blk, src, grad_dst, dim, d0, d1, work));
  FOR_ROW_CHUNKS(be, blk->n_src, cells, s0, s1,
                 ng__cpu_uagg_bwd_src_rows(blk, work, dim, s0, s1, grad_src));
  return NG_OK;
}

/* ---- attention (GAT): the row kernels of cpu/attn.c, rows split over threads ---- */

static ng_status cpu_attn_fwd(ng_backend *be, const ng_attn *at, const ng_block *blk,
                              const float *z, const float *att_src, const float *att_dst,
                              float *alpha, float *out) {
  int64_t work = (blk->nnz + blk->n_dst) * at->heads * at->head_dim * 3;
  FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1,
                 ng__attn_fwd_rows(at, blk, z, att_src, att_dst, alpha, out, d0, d1));
  return NG_OK;
}

static ng_status cpu_attn_bwd(ng_backend *be, const ng_attn *at, const ng_block *blk,
                              const float *z, const float *att_src, const float *att_dst,
                              const float *alpha, const float *grad_out, float *work, float *grad_z,
                              float *grad_att_src, float *grad_att_dst) {
  int64_t cells = (blk->nnz + blk->n_src) * at->heads * at->head_dim * 3;
  FOR_ROW_CHUNKS(
      be, blk->n_dst, cells, d0, d1,
      ng__attn_bwd_dst_rows(at, blk, z, att_src, att_dst, alpha, grad_out, work, d0, d1));
  FOR_ROW_CHUNKS(
      be, blk->n_src, cells, s0, s1,
      ng__attn_bwd_src_rows(at, blk, att_src, att_dst, alpha, grad_out, work, grad_z, s0, s1));
  const int64_t cols = at->heads * at->head_dim;
#pragma omp parallel for schedule(static)                                                          \
    num_threads(nthreads(be)) if (cols * blk->n_src >= PAR_MIN_WORK)
  for (int64_t c = 0; c < cols; c++)
    ng__attn_bwd_param_cols(at, blk, z, work, grad_att_src, grad_att_dst, c, c + 1);
  return NG_OK;
}

static ng_status cpu_attn_state(ng_backend *be, const ng_attn *at, const ng_block *blk,
                                const float *z_src, const float *z_dst, const float *att_src,
                                const float *att_dst, bool self, float *state) {
  int64_t work = (blk->nnz + blk->n_dst) * at->heads * at->head_dim * 3;
  FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1,
                 ng__attn_state_rows(at, blk, z_src, z_dst, att_src, att_dst, self, state, d0, d1));
  return NG_OK;
}

static ng_status cpu_attn_merge(ng_backend *be, const ng_attn *at, int32_t n_dst, float *acc,
                                const float *other, float *out) {
  int64_t work = (int64_t)n_dst * ng_attn_state_cols(at) * 2;
  FOR_ROW_CHUNKS(be, n_dst, work, d0, d1, ng__attn_merge_rows(at, acc, other, out, d0, d1));
  return NG_OK;
}

static ng_status cpu_aggr_partial(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                  const float *src, ng_pstate *state) {
  int64_t dim = state->dim;
  const ng_cpu_kernels *k = kern(be);
  /* A partial state is the bare reduction: MEAN divides and the self loop is added only when
   * the merged state is finalized. */
  ng_aggr bare = *ag;
  bare.mean = false;
  bare.self_loop = false;
  int64_t work = (blk->nnz + blk->n_dst) * NG_MAX(dim, (int64_t)1);
  FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1,
                 { ng__cpu_aggr_partial_rows(k, &bare, blk, src, dim, d0, d1, state, false); });
  return NG_OK;
}

static ng_status cpu_pstate_merge(ng_backend *be, const ng_aggr *ag, ng_pstate *acc,
                                  const ng_pstate *other) {
  const int64_t dim = acc->dim;
  const ng_reduce red = ag->reduce;
  if (ag->user) {
    FOR_ROW_CHUNKS(be, acc->n_dst, acc->n_dst * dim * ng__aggr_state_size(ag), d0, d1,
                   ng__cpu_uagg_merge_rows(ag, acc, other, d0, d1));
    return NG_OK;
  }
  FOR_ROW_CHUNKS(be, acc->n_dst, acc->n_dst * dim, d0, d1, {
    for (int32_t d = d0; d < d1; d++) {
      float *restrict a = acc->val + (int64_t)d * dim;
      const float *restrict o = other->val + (int64_t)d * dim;
      if (other->count[d] == 0) {
        /* nothing to add */
      } else if (acc->count[d] == 0) {
        memcpy(a, o, (size_t)dim * sizeof(float));
      } else if (red == NG_REDUCE_SUM) {
        for (int64_t j = 0; j < dim; j++)
          a[j] = a[j] + o[j];
      } else if (red == NG_REDUCE_MAX) {
        for (int64_t j = 0; j < dim; j++)
          a[j] = o[j] > a[j] ? o[j] : a[j];
      } else {
        for (int64_t j = 0; j < dim; j++)
          a[j] = o[j] < a[j] ? o[j] : a[j];
      }
      acc->count[d] += other->count[d];
    }
  });
  return NG_OK;
}

static ng_status cpu_pstate_finalize(ng_backend *be, const ng_aggr *ag, const ng_pstate *state,
                                     float *dst) {
  const int64_t dim = state->dim;
  const bool mean = ag->mean;
  if (ag->user) {
    FOR_ROW_CHUNKS(be, state->n_dst, state->n_dst * dim * ng__aggr_state_size(ag), d0, d1,
                   ng__cpu_uagg_finalize_rows(ag, state, d0, d1, dst));
    return NG_OK;
  }
  FOR_ROW_CHUNKS(be, state->n_dst, state->n_dst * dim, d0, d1, {
    for (int32_t d = d0; d < d1; d++) {
      const float *restrict v = state->val + (int64_t)d * dim;
      float *restrict o = dst + (int64_t)d * dim;
      const int32_t cnt = state->count[d];
      if (cnt == 0) {
        for (int64_t j = 0; j < dim; j++)
          o[j] = 0.0f;
      } else if (mean) {
        const float c = (float)cnt;
        for (int64_t j = 0; j < dim; j++)
          o[j] = v[j] / c;
      } else {
        memcpy(o, v, (size_t)dim * sizeof(float));
      }
    }
  });
  return NG_OK;
}

static ng_status cpu_scatter_rows(ng_backend *be, float *dst, const int32_t *pos,
                                  const float *table, const int64_t *ids, int64_t n, int64_t dim,
                                  float drop_p, uint64_t drop_key) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n * dim >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++)
    ng_drop_row(dst + (pos ? (int64_t)pos[i] : i) * dim, table + ids[i] * dim, ids[i], dim, drop_p,
                drop_key);
  return NG_OK;
}

static ng_status cpu_aggr_partial_bf16(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                       const uint16_t *src, ng_pstate *state) {
  const int64_t dim = state->dim;
  ng_aggr bare = *ag;
  bare.mean = false;
  bare.self_loop = false;
  int64_t work = (blk->nnz + blk->n_dst) * NG_MAX(dim, (int64_t)1);
  FOR_ROW_CHUNKS(be, blk->n_dst, work, d0, d1,
                 { ng__cpu_aggr_partial_rows_bf16(&bare, blk, src, dim, d0, d1, state); });
  return NG_OK;
}

static ng_status cpu_scatter_rows_bf16(ng_backend *be, float *dst, const int32_t *pos,
                                       const uint16_t *table, const int64_t *ids, int64_t n,
                                       int64_t dim, float drop_p, uint64_t drop_key) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n * dim >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++)
    ng__cpu_drop_row_bf16(dst + (pos ? (int64_t)pos[i] : i) * dim, table + ids[i] * dim, ids[i],
                          dim, drop_p, drop_key);
  return NG_OK;
}

/* The partitioned hot tier's gather (backend_impl.h): row g of part g % R, at row g / R, dropped
 * by its global id. On the CPU the parts are host memory (tests stand in for peer devices). */
static ng_status cpu_gather_parts(ng_backend *be, float *dst, const void *const *parts, int n_parts,
                                  bool bf16, const int64_t *ids, int64_t n, int64_t dim,
                                  float drop_p, uint64_t drop_key) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n * dim >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++) {
    const int64_t g = ids[i], row = g / n_parts;
    const void *part = parts[g % n_parts];
    if (bf16)
      ng__cpu_drop_row_bf16(dst + i * dim, (const uint16_t *)part + row * dim, g, dim, drop_p,
                            drop_key);
    else
      ng_drop_row(dst + i * dim, (const float *)part + row * dim, g, dim, drop_p, drop_key);
  }
  return NG_OK;
}

static ng_status cpu_add_self_loop(ng_backend *be, float *dst, const float *self_w,
                                   const float *rows, int64_t n, int64_t dim) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n * dim >= PAR_MIN_WORK)
  for (int64_t d = 0; d < n; d++) {
    const float w = self_w[d];
    float *restrict o = dst + d * dim;
    const float *restrict x = rows + d * dim;
    for (int64_t j = 0; j < dim; j++)
      o[j] = o[j] + w * x[j];
  }
  return NG_OK;
}

/* ---- GEMM ---- */

/* How a GEMM is split: by rows of C, by columns of C, or by the inner dimension (partial
 * products summed in order). The plan depends only on (m, n, k), never on the thread count. */
typedef enum { SPLIT_ROWS, SPLIT_COLS, SPLIT_K } gemm_split;

typedef struct {
  gemm_split split;
  int64_t part;  /* rows, columns or inner products per part */
  int64_t parts; /* number of parts */
} gemm_plan;

static gemm_plan plan_gemm(int64_t m, int64_t n, int64_t k, bool trans_a) {
  /* Row parts are whole multiples of GEMM_ROW_BLOCK, so that only the last one is padded. */
  int64_t rows = NG_MAX((int64_t)GEMM_MIN_ROWS, ceil_div(m, GEMM_MAX_PARTS));
  rows = ceil_div(rows, GEMM_ROW_BLOCK) * GEMM_ROW_BLOCK;
  int64_t cols = NG_MAX((int64_t)GEMM_MIN_ROWS, ceil_div(n, GEMM_MAX_PARTS));
  int64_t inner = NG_MAX((int64_t)GEMM_MIN_K, ceil_div(k, GEMM_MAX_PARTS));
  int64_t nr = ceil_div(m, rows), nc = ceil_div(n, cols), nk = ceil_div(k, inner);
  if (nr >= GEMM_ENOUGH_PARTS)
    return (gemm_plan){SPLIT_ROWS, rows, nr};
  if (nc >= GEMM_ENOUGH_PARTS)
    return (gemm_plan){SPLIT_COLS, cols, nc};
  /* Few rows and columns but a long inner dimension: the weight gradients X^T G. Split the inner
   * dimension when the partial products fit the budget. Only for a transposed A: a row of an
   * untransposed product (a node's row of X W) must be the same bits whatever m is, and whether
   * its inner dimension is split depends on m. */
  if (trans_a && nk >= GEMM_MIN_K_PARTS && nk * m * n * (int64_t)sizeof(float) <= GEMM_MAX_K_TEMP)
    return (gemm_plan){SPLIT_K, inner, nk};
  return nr >= nc ? (gemm_plan){SPLIT_ROWS, rows, nr} : (gemm_plan){SPLIT_COLS, cols, nc};
}

/* The scratch of sgemm_rows' padded tail: one grow-only buffer per thread, as the row parts run on
 * the OpenMP team's threads and several threads (workers, the device thread, serving's) may
 * multiply at once; a buffer per call was an allocation on every product's hot path. A thread's
 * buffer is freed when the thread exits (pad_key's destructor); the main thread's lives as long
 * as the process. */
static _Thread_local float *pad_buf;
static _Thread_local size_t pad_cap; /* floats */
static pthread_key_t pad_key;
static pthread_once_t pad_once = PTHREAD_ONCE_INIT;
static bool pad_key_ok;

static void pad_key_init(void) {
  pad_key_ok = pthread_key_create(&pad_key, free) == 0;
}

/* The calling thread's scratch of at least `floats` floats (contents unspecified), or NULL. */
static float *pad_scratch(size_t floats) {
  if (floats > pad_cap) {
    float *p = malloc(floats * sizeof *p);
    if (!p)
      return NULL;
    free(pad_buf);
    pad_buf = p;
    pad_cap = floats;
    pthread_once(&pad_once, pad_key_init);
    if (pad_key_ok)
      (void)pthread_setspecific(pad_key, p);
  }
  return pad_buf;
}

/* dnnl_sgemm, except that an untransposed A is always handed over as a whole multiple of
 * GEMM_ROW_BLOCK rows (the rest zero, computed and dropped). oneDNN computes the rows of a product
 * in register blocks whose tail (m not a multiple of the block) and one-row (gemv) kernels sum in
 * another order than the full blocks; how many rows a block has depends on the instruction set
 * (on AVX2 the row bits depend on m mod 6 and mod 24; 48 covers the AVX2 and AVX-512 blockings).
 * Every row of C is then the same bits whatever the number of rows computed with it (m, and the
 * row split below), which the serving engine relies on: a node's answer does not depend on the
 * batch it rides in (docs/serving-engine.md). */
static dnnl_status_t sgemm_rows(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb,
                                float beta, float *c, int64_t ldc) {
  const int64_t tail = m % GEMM_ROW_BLOCK, head = m - tail;
  if (ta != 'N' || tail == 0)
    return dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (head > 0) {
    dnnl_status_t st = dnnl_sgemm('N', tb, head, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (st != dnnl_success)
      return st;
  }
  /* The last rows, padded to one whole block (copied: at most GEMM_ROW_BLOCK - 1 rows). The
   * padding rows are zero, as the block's other rows' bits do not depend on them but a NaN or a
   * subnormal left there by an earlier product would slow the block down. */
  const float *at = a + head * lda;
  float *ct = c + head * ldc;
  float *a2 = pad_scratch((size_t)(GEMM_ROW_BLOCK * (k + n)));
  if (!a2)
    return dnnl_out_of_memory;
  float *c2 = a2 + GEMM_ROW_BLOCK * k;
  for (int64_t i = 0; i < tail; i++)
    memcpy(a2 + i * k, at + i * lda, (size_t)k * sizeof(float));
  memset(a2 + tail * k, 0, (size_t)((GEMM_ROW_BLOCK - tail) * k) * sizeof(float));
  if (beta != 0.0f) {
    for (int64_t i = 0; i < tail; i++)
      memcpy(c2 + i * n, ct + i * ldc, (size_t)n * sizeof(float));
    memset(c2 + tail * n, 0, (size_t)((GEMM_ROW_BLOCK - tail) * n) * sizeof(float));
  }
  dnnl_status_t st = dnnl_sgemm('N', tb, GEMM_ROW_BLOCK, n, k, alpha, a2, k, b, ldb, beta, c2, n);
  if (st == dnnl_success)
    for (int64_t i = 0; i < tail; i++)
      memcpy(ct + i * ldc, c2 + i * n, (size_t)n * sizeof(float));
  return st;
}

static ng_status cpu_gemm(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float beta, float *c, int64_t ldc) {
  if (k == 0) { /* an empty product: C = beta * C, where beta == 0 does not read C */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return NG_OK;
  }
  const gemm_plan plan = plan_gemm(m, n, k, trans_a);
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  float *partial = NULL;
  if (plan.split == SPLIT_K) {
    partial = ng__malloc((size_t)(plan.parts * m * n) * sizeof(float), "gemm partial products");
    if (!partial)
      return NG_ERR_NOMEM;
  }
  dnnl_status_t err = dnnl_success;
  int64_t err_part = plan.parts;
#pragma omp parallel num_threads(nthreads(be)) if (plan.parts > 1)
  {
    /* oneDNN sizes its own parallelism from this ICV, which belongs to this region's tasks:
     * each part then runs single-threaded, whatever the caller's nesting settings. */
    omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
    for (int64_t p = 0; p < plan.parts; p++) {
      int64_t off = p * plan.part;
      dnnl_status_t st;
      if (plan.split == SPLIT_ROWS) {
        int64_t len = NG_MIN(plan.part, m - off);
        st = sgemm_rows(ta, tb, len, n, k, alpha, trans_a ? a + off : a + off * lda, lda, b, ldb,
                        beta, c + off * ldc, ldc);
      } else if (plan.split == SPLIT_COLS) {
        int64_t len = NG_MIN(plan.part, n - off);
        st = sgemm_rows(ta, tb, m, len, k, alpha, a, lda, trans_b ? b + off * ldb : b + off, ldb,
                        beta, c + off, ldc);
      } else {
        int64_t len = NG_MIN(plan.part, k - off);
        st = dnnl_sgemm(ta, tb, m, n, len, 1.0f, trans_a ? a + off * lda : a + off, lda,
                        trans_b ? b + off : b + off * ldb, ldb, 0.0f, partial + p * m * n, n);
      }
      if (st != dnnl_success) {
#pragma omp critical(ng_cpu_gemm_err)
        if (p < err_part) {
          err_part = p;
          err = st;
        }
      }
    }
  }
  if (err == dnnl_success && plan.split == SPLIT_K) {
    /* C = alpha * (P_0 + P_1 + ...) + beta * C, the parts summed in order for every element. */
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (m * n >= PAR_MIN_WORK)
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        float s = partial[i * n + j];
        for (int64_t p = 1; p < plan.parts; p++)
          s = s + partial[(p * m + i) * n + j];
        float *cij = &c[i * ldc + j];
        *cij = beta == 0.0f ? alpha * s : alpha * s + beta * *cij;
      }
    }
  }
  free(partial);
  if (err != dnnl_success)
    return ng__err(NG_ERR_DNNL,
                   "gemm: dnnl_sgemm failed with \"%s\" on part %lld of a %c%c product m=%lld "
                   "n=%lld k=%lld (lda %lld, ldb %lld, ldc %lld)",
                   dnnl_status2str(err), (long long)err_part, ta, tb, (long long)m, (long long)n,
                   (long long)k, (long long)lda, (long long)ldb, (long long)ldc);
  return NG_OK;
}

/* ---- elementwise ops ---- */

static ng_status cpu_add(ng_backend *be, float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++)
    y[i] = y[i] + x[i];
  return NG_OK;
}

static ng_status cpu_bias_act_fwd(ng_backend *be, float *x, const float *bias, int64_t rows,
                                  int64_t cols, ng_activation act) {
  const bool relu = act == NG_ACT_RELU;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (rows * cols >= PAR_MIN_WORK)
  for (int64_t r = 0; r < rows; r++) {
    float *restrict row = x + r * cols;
    if (bias)
      for (int64_t j = 0; j < cols; j++)
        row[j] = row[j] + bias[j];
    /* x < 0 ? 0 : x keeps NaN visible (a NaN input stays NaN). */
    if (relu)
      for (int64_t j = 0; j < cols; j++)
        row[j] = row[j] < 0.0f ? 0.0f : row[j];
  }
  return NG_OK;
}

static ng_status cpu_bias_act_bwd(ng_backend *be, float *grad, const float *y, float *grad_bias,
                                  int64_t rows, int64_t cols, ng_activation act) {
  if (act == NG_ACT_RELU) {
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (rows * cols >= PAR_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
      float *restrict g = grad + r * cols;
      const float *restrict yr = y + r * cols;
      for (int64_t j = 0; j < cols; j++)
        g[j] = yr[j] > 0.0f ? g[j] : 0.0f;
    }
  }
  if (grad_bias) {
    /* Each column block summed by one thread in the chunked row order of NG_BIAS_CHUNK_ROWS
     * (backend_impl.h): column blocks are independent. */
    int64_t blocks = ceil_div(cols, BIAS_CHUNK_COLS);
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (rows * cols >= PAR_MIN_WORK)
    for (int64_t cb = 0; cb < blocks; cb++) {
      int64_t c0 = cb * BIAS_CHUNK_COLS, w = NG_MIN((int64_t)BIAS_CHUNK_COLS, cols - c0);
      float total[BIAS_CHUNK_COLS] = {0};
      for (int64_t r0 = 0; r0 < rows; r0 += NG_BIAS_CHUNK_ROWS) {
        int64_t r1 = NG_MIN(rows, r0 + NG_BIAS_CHUNK_ROWS);
        float acc[BIAS_CHUNK_COLS] = {0};
        for (int64_t r = r0; r < r1; r++) {
          const float *restrict g = grad + r * cols + c0;
          for (int64_t j = 0; j < w; j++)
            acc[j] = acc[j] + g[j];
        }
        for (int64_t j = 0; j < w; j++)
          total[j] = total[j] + acc[j];
      }
      memcpy(grad_bias + c0, total, (size_t)w * sizeof(float));
    }
  }
  return NG_OK;
}

static ng_status cpu_dropout_fwd(ng_backend *be, float *x, uint8_t *mask, int64_t n, float p,
                                 uint64_t seed) {
  /* The shared rule of core/rng.h (ng_dropout_keep), unrolled so that each hash serves the
   * pair of elements it decides. */
  const uint64_t key = ng_mix64(seed);
  const uint32_t threshold = ng_dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n >= PAR_MIN_WORK)
  for (int64_t j = 0; j < pairs; j++) {
    const uint64_t h = ng_mix64(key ^ (uint64_t)j);
    const int64_t i = 2 * j;
    const bool keep0 = (uint32_t)h >= threshold;
    mask[i] = keep0;
    x[i] = keep0 ? x[i] * scale : 0.0f;
    if (i + 1 < n) {
      const bool keep1 = (uint32_t)(h >> 32) >= threshold;
      mask[i + 1] = keep1;
      x[i + 1] = keep1 ? x[i + 1] * scale : 0.0f;
    }
  }
  return NG_OK;
}

static ng_status cpu_dropout_bwd(ng_backend *be, float *grad, const uint8_t *mask, int64_t n,
                                 float p) {
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++)
    grad[i] = mask[i] ? grad[i] * scale : 0.0f;
  return NG_OK;
}

static ng_status cpu_xent(ng_backend *be, const float *logits, const int32_t *labels, int64_t n,
                          int64_t classes, float *grad, double *loss, int64_t *correct) {
  if (!loss && !correct && ((const cpu_ctx *)be->ctx)->count == NG_XENT_QUEUE)
    return ng__err(NG_ERR_STATE,
                   "xent: %d results are queued unread; read them with xent_result first",
                   NG_XENT_QUEUE);
  for (int64_t i = 0; i < n; i++)
    if (labels[i] < 0 || labels[i] >= classes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "xent: label %d of row %lld is outside [0, %lld); labels must be class "
                     "indices",
                     (int)labels[i], (long long)i, (long long)classes);
  int64_t chunks = ceil_div(n, XENT_CHUNK_ROWS);
  double *part = ng__malloc((size_t)NG_MAX(chunks, (int64_t)1) * sizeof(double), "xent sums");
  if (!part)
    return NG_ERR_NOMEM;
  int64_t hits = 0;
  const double inv_n = n > 0 ? 1.0 / (double)n : 0.0;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) reduction(+ : hits) \
    if (n * classes >= PAR_MIN_WORK)
  for (int64_t ch = 0; ch < chunks; ch++) {
    double sum = 0.0;
    int64_t r1 = NG_MIN(n, (ch + 1) * XENT_CHUNK_ROWS);
    for (int64_t i = ch * XENT_CHUNK_ROWS; i < r1; i++) {
      const float *z = logits + i * classes;
      const int32_t y = labels[i];
      int64_t best = 0;
      for (int64_t j = 1; j < classes; j++)
        if (z[j] > z[best])
          best = j;
      hits += best == y;
      /* log-softmax with the maximum subtracted: exp never overflows. */
      const double mx = z[best];
      double se = 0.0;
      for (int64_t j = 0; j < classes; j++)
        se += exp((double)z[j] - mx);
      const double lse = mx + log(se);
      sum += lse - (double)z[y];
      if (grad) { /* written last: grad may be the logits themselves */
        float *g = grad + i * classes;
        for (int64_t j = 0; j < classes; j++)
          g[j] = (float)((exp((double)z[j] - lse) - (j == y ? 1.0 : 0.0)) * inv_n);
      }
    }
    part[ch] = sum;
  }
  double total = 0.0;
  for (int64_t ch = 0; ch < chunks; ch++)
    total += part[ch];
  free(part);
  cpu_ctx *c = be->ctx;
  const double mean = total * inv_n;
  if (loss || correct) { /* read at once: never queued */
    if (loss)
      *loss = mean;
    if (correct)
      *correct = hits;
    return NG_OK;
  }
  /* Labels were checked above: only a non-finite loss makes a result bad here. */
  const int q = (c->head + c->count) % NG_XENT_QUEUE;
  c->queue[q].loss = mean;
  c->queue[q].correct = hits;
  c->count++;
  return NG_OK;
}

static ng_status cpu_xent_result(ng_backend *be, double *loss, int64_t *correct) {
  cpu_ctx *c = be->ctx;
  if (c->count == 0)
    return ng__err(NG_ERR_STATE, "xent_result: no xent result to read (call xent first)");
  const int q = c->head;
  c->head = (c->head + 1) % NG_XENT_QUEUE;
  c->count--;
  if (loss)
    *loss = c->queue[q].loss;
  if (correct)
    *correct = c->queue[q].correct;
  return NG_OK;
}

/* The step guard (backend_impl.h, xent): a bad loss not yet read holds back every step. */
static bool step_guarded(const ng_backend *be) {
  const cpu_ctx *c = be->ctx;
  for (int k = 0; k < c->count; k++)
    if (!isfinite(c->queue[(c->head + k) % NG_XENT_QUEUE].loss))
      return true;
  return false;
}

static ng_status cpu_opt_step(ng_backend *be, const ng_opt_hp *hp, float *param, const float *grad,
                              float *state1, float *state2, int64_t n) {
  if (step_guarded(be))
    return NG_OK;
  const float wd = hp->weight_decay, lr = hp->lr;
  if (hp->kind == NG_OPT_SGD) {
    const float mom = hp->momentum;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n >= PAR_MIN_WORK)
    for (int64_t i = 0; i < n; i++) {
      float g = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
      if (mom != 0.0f) { /* the buffer starts at 0, so step 1 stores g as PyTorch does */
        g = mom * state1[i] + g;
        state1[i] = g;
      }
      param[i] = param[i] - lr * g;
    }
    return NG_OK;
  }
  /* Adam, the only other optimizer the front lets through. */
  const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
  /* PyTorch's form: param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). */
  const double bc1 = 1.0 - pow((double)b1, (double)hp->step);
  const double bc2 = 1.0 - pow((double)b2, (double)hp->step);
  const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n >= PAR_MIN_WORK)
  for (int64_t i = 0; i < n; i++) {
    const float g = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
    const float m = b1 * state1[i] + c1 * g;
    const float v = b2 * state2[i] + c2 * g * g;
    state1[i] = m;
    state2[i] = v;
    param[i] = param[i] - step_size * (m / (sqrtf(v) / bc2_sqrt + eps));
  }
  return NG_OK;
}

/* ---- the device sampler: on this backend the device is the CPU, so it is ng__sample itself,
 * copied into the caller's buffer as the CUDA backend's copies its blocks back. It lets the
 * runtime's hand-off of sampled blocks to the workers run, and be tested, without a GPU. */

struct ng_dev_sampler {
  const ng_csr *graph;
  int lanes;
  ng_sample_arena **arena; /* one a lane */
};

static void cpu_sampler_destroy(ng_backend *be, ng_dev_sampler *s);

static ng_status cpu_sampler_create(ng_backend *be, const ng_csr *g, int lanes,
                                    ng_dev_sampler **out) {
  *out = NULL;
  ng_dev_sampler *s = ng__calloc(1, sizeof *s, "CPU device sampler");
  if (!s)
    return NG_ERR_NOMEM;
  s->graph = g;
  s->lanes = lanes;
  s->arena = ng__calloc((size_t)lanes, sizeof *s->arena, "CPU device sampler lanes");
  ng_status st = s->arena ? NG_OK : NG_ERR_NOMEM;
  for (int k = 0; k < lanes && st == NG_OK; k++)
    st = ng__sample_arena_create(&s->arena[k]);
  if (st != NG_OK) {
    cpu_sampler_destroy(be, s);
    return st;
  }
  *out = s;
  return NG_OK;
}

static void cpu_sampler_destroy(ng_backend *be, ng_dev_sampler *s) {
  (void)be;
  if (!s)
    return;
  for (int k = 0; s->arena && k < s->lanes; k++)
    ng__sample_arena_destroy(s->arena[k]);
  free(s->arena);
  free(s);
}

static ng_status cpu_sampler_run(ng_backend *be, ng_dev_sampler *s, int lane,
                                 const ng_sampler_cfg *cfg, const int64_t *targets, int32_t n,
                                 uint64_t seed, ng_minibatch *out, void **host, size_t *host_cap) {
  memset(out, 0, sizeof *out);
  ng_minibatch mb;
  if (lane >= s->lanes)
    return ng__err(NG_ERR_INVALID_ARG, "sampler_run: lane %d of a sampler with %d", lane, s->lanes);
  NG_CHECK(ng__sample(&mb, s->arena[lane], cfg, targets, n, seed));
  const void *src[NG_MB_ARRAYS];
  size_t bytes[NG_MB_ARRAYS];
  const int k = ng__minibatch_arrays(&mb, src, bytes);
  const size_t total = ng__minibatch_packed_bytes(bytes, k);
  if (total > *host_cap || !*host) {
    cpu_free(be, *host);
    *host = NULL;
    *host_cap = 0;
    NG_CHECK(cpu_alloc(be, host, total + total / 4));
    *host_cap = total + total / 4;
  }
  void *dst[NG_MB_ARRAYS];
  char *at = *host;
  for (int i = 0; i < k; i++) {
    dst[i] = at;
    if (bytes[i])
      memcpy(at, src[i], bytes[i]);
    at += (bytes[i] + 63) & ~(size_t)63;
  }
  ng__minibatch_rebase(out, &mb, dst);
  return NG_OK;
}

/* Chunks of PAIR_CHUNK pairs (a multiple of the kernel's 8 side-by-side pairs) over the
 * threads: each pair's bits are its own sum's, whatever the split. */
#define PAIR_CHUNK 256

static ng_status cpu_pair_dot(ng_backend *be, float *out, const float *h, const int32_t *u,
                              const int32_t *v, int64_t n, int64_t dim) {
  const int64_t chunks = (n + PAIR_CHUNK - 1) / PAIR_CHUNK;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (n * dim >= PAR_MIN_WORK)
  for (int64_t k = 0; k < chunks; k++)
    ng__cpu_pair_dot_rows(out, h, u, v, k * PAIR_CHUNK, NG_MIN(n, (k + 1) * PAIR_CHUNK), dim);
  return NG_OK;
}

static const struct ng_backend_i CPU_IFACE = {
    .name = "cpu",
    .host_memory = true,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy_h2d,
    .copy_h2d_async = cpu_copy_h2d_async,
    .wait_copy = cpu_queue_nop,
    .mark = cpu_queue_nop,
    .wait_mark = cpu_queue_nop,
    .copy_ops_begin = cpu_queue_nop,
    .copy_ops_end = cpu_queue_nop,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .fill = cpu_fill,
    .sync = cpu_sync,
    .mem_info = cpu_mem_info,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .host_view = cpu_host_view,
    .event_record = cpu_event_record,
    .event_elapsed = cpu_event_elapsed,
    .set_precision = cpu_set_precision,
    .pci_bus_id = cpu_pci_bus_id,
    .sampler_create = cpu_sampler_create,
    .sampler_destroy = cpu_sampler_destroy,
    .sampler_run = cpu_sampler_run,
    .gather_rows = cpu_gather_rows,
    .aggr_fwd = cpu_aggr_fwd,
    .aggr_bwd = cpu_aggr_bwd,
    .attn_fwd = cpu_attn_fwd,
    .attn_bwd = cpu_attn_bwd,
    .aggr_user_bwd = cpu_aggr_user_bwd,
    .attn_state = cpu_attn_state,
    .attn_merge = cpu_attn_merge,
    .aggr_partial = cpu_aggr_partial,
    .pstate_merge = cpu_pstate_merge,
    .pstate_finalize = cpu_pstate_finalize,
    .scatter_rows = cpu_scatter_rows,
    .aggr_partial_bf16 = cpu_aggr_partial_bf16,
    .scatter_rows_bf16 = cpu_scatter_rows_bf16,
    .gather_parts = cpu_gather_parts,
    .add_self_loop = cpu_add_self_loop,
    .gemm = cpu_gemm,
    .add = cpu_add,
    .bias_act_fwd = cpu_bias_act_fwd,
    .bias_act_bwd = cpu_bias_act_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .xent = cpu_xent,
    .xent_result = cpu_xent_result,
    .opt_step = cpu_opt_step,
    .pair_dot = cpu_pair_dot,
};

ng_status ng__backend_cpu_create(ng_backend **out, int threads) {
  NG_CHECK(ng__bk_check_ptr("cpu backend", "out", out, true));
  *out = NULL;
  if (threads < 0)
    return ng__err(NG_ERR_INVALID_ARG, "cpu backend: %d threads; use 0 for the OpenMP default",
                   threads);
  ng_cpu_isa isa = ng__cpu_isa_best();
  const char *env = getenv("NG_CPU_ISA");
  if (env && *env) {
    NG_CHECK(ng__cpu_isa_parse(&isa, env));
    if (!ng__cpu_isa_supported(isa))
      return ng__err(NG_ERR_UNSUPPORTED,
                     "NG_CPU_ISA=%s: this CPU does not run that kernel variant; unset NG_CPU_ISA "
                     "or pick a variant the CPU supports (generic always works)",
                     env);
  }
  ng_backend *be = ng__calloc(1, sizeof *be, "CPU backend");
  cpu_ctx *ctx = ng__calloc(1, sizeof *ctx, "CPU backend context");
  if (!be || !ctx) {
    free(be);
    free(ctx);
    return NG_ERR_NOMEM;
  }
  ctx->threads = threads;
  ctx->kern = ng__cpu_kernels(isa);
  ng__backend_init(be, &CPU_IFACE, ctx);
  *out = be;
  return NG_OK;
}

const ng_cpu_kernels *ng__backend_cpu_kernels(const ng_backend *be) {
  return be && be->impl == &CPU_IFACE ? kern(be) : NULL;
}
