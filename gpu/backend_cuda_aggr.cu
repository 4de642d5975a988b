/* The CUDA backend's gathers and aggregation: row gathers (device memory or zero-copy host
 * memory), block aggregation backward, scatter and self loops, with their kernels. Every
 * forward (MAX/MIN's argbest included), partial state, merge and finalize, and every op of a
 * user aggregator, runs the gather-aggregate template (backend_cuda_uagg.cu, whose functions
 * the backend's ops table names); what stays here is the backward of the built-ins
 * (docs/aggregators.md says why). The rules of
 * the whole backend are in backend_cuda_impl.h. */
#include "backend_cuda_impl.h"

#include <type_traits>

namespace ng_cuda {

/* Rows are read in bursts: a warp covers T chunks of 32 * V columns of one row and issues all
 * their loads before any store, so that a row in registered host memory crosses PCIe as one
 * burst (zero-copy is bound by the rate of random requests, and chunks of one row fetched at
 * different times cost one request each) and device-memory rows keep T loads in flight. */

template <int V, int T, typename S>
__device__ inline void ld_chunks(float (&x)[T][V], const S *row, int64_t j0, int64_t span,
                                 int64_t dim) {
#pragma unroll
  for (int k = 0; k < T; k++) {
    const int64_t j = j0 + k * span;
    if (j < dim) {
      ld<V>(x[k], row + j);
    } else {
#pragma unroll
      for (int v = 0; v < V; v++)
        x[k][v] = 0.0f;
    }
  }
}

/* One warp per row and group of T chunks; the table may be registered host memory. */
template <int V, int T>
__global__ void k_gather(float *__restrict__ dst, const float *__restrict__ table,
                         const int64_t *ids, int64_t n, int64_t dim) {
  const int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= n)
    return;
  const float *in = table + ids[row] * dim;
  float *out = dst + row * dim;
  const int64_t span = 32 * V;
  for (int64_t j0 = ((int64_t)blockIdx.y * T * 32 + lane) * V; j0 < dim;
       j0 += (int64_t)gridDim.y * T * span) {
    float v[T][V];
    ld_chunks<V, T>(v, in, j0, span, dim);
#pragma unroll
    for (int k = 0; k < T; k++)
      if (j0 + k * span < dim)
        st<V>(out + j0 + k * span, v[k]);
  }
}

/* ---- kernels: aggregation (the operation order of cpu/kernels_impl.h) ---- */

struct sum_flags {
  bool weighted, self_loop, mean;
};

/* Input dropout (scatter_rows' drop_p): element (row, c) of the source table. */
struct in_drop {
  bool on;
  uint64_t key;
  uint32_t threshold;
  float scale;
};

template <int V>
__device__ inline void apply_drop(const in_drop &dr, float *x, int64_t row, int64_t dim,
                                  int64_t j) {
  if (!dr.on)
    return;
  const uint64_t base = (uint64_t)(row * dim + j);
  for (int k = 0; k < V; k++)
    x[k] = ng_dropout_keep(dr.key, base + k, dr.threshold) ? __fmul_rn(x[k], dr.scale) : 0.0f;
}

/* The coefficient of transposed edge t, exactly as ngk_bwd_coef computes it. */
__device__ inline float bwd_coef(const sum_flags &f, const ng_block &b, int32_t t, int32_t d) {
  float c = f.weighted ? b.edge_w[b.t_eid[t]] : 1.0f;
  if (f.mean)
    c = __fmul_rn(c, __fdiv_rn(1.0f, (float)(b.indptr[d + 1] - b.indptr[d])));
  return c;
}

/* SUM backward: a warp per source and column tile, contributions in transposed order; four
 * edges' gradient rows are loaded before they are added (in order). A source has few edges
 * (2.5 on average with fanout 10 and n_src = 4 n_dst), so the warps loop over sources
 * (grid-stride) rather than one short-lived block per eight sources: block launches, not
 * bytes, bound the one-warp-per-source form there. */
template <int V>
__global__ void k_aggr_sum_bwd(sum_flags f, ng_block b, const float *__restrict__ grad_dst,
                               int64_t dim, float *__restrict__ grad_src) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t s = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; s < b.n_src; s += warps) {
    const int32_t t0 = b.t_indptr[s], t1 = b.t_indptr[s + 1];
    for (int64_t j = ((int64_t)blockIdx.y * 32 + lane) * V; j < dim;
         j += (int64_t)gridDim.y * 32 * V) {
      float acc[V], g[4][V], c[4];
      for (int k = 0; k < V; k++)
        acc[k] = 0.0f;
      int32_t t = t0;
      for (; t + 3 < t1; t += 4) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int32_t d = b.t_dst[t + u];
          c[u] = bwd_coef(f, b, t + u, d);
          ld<V>(g[u], grad_dst + (int64_t)d * dim + j);
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
          for (int k = 0; k < V; k++)
            acc[k] = __fadd_rn(acc[k], __fmul_rn(c[u], g[u][k]));
      }
      for (; t < t1; t++) {
        const int32_t d = b.t_dst[t];
        const float cc = bwd_coef(f, b, t, d);
        ld<V>(g[0], grad_dst + (int64_t)d * dim + j);
        for (int k = 0; k < V; k++)
          acc[k] = __fadd_rn(acc[k], __fmul_rn(cc, g[0][k]));
      }
      if (f.self_loop && s < b.n_dst) {
        const float w = b.self_w[s];
        ld<V>(g[0], grad_dst + s * dim + j);
        for (int k = 0; k < V; k++)
          acc[k] = __fadd_rn(acc[k], __fmul_rn(w, g[0][k]));
      }
      st<V>(grad_src + s * dim + j, acc);
    }
  }
}

/* Whether edge e is the first edge of destination d with source s (ngk_first_edge of
 * cpu/kernels_cpu.c): a destination listing a source twice routes its gradient once. */
__device__ inline bool first_edge(const ng_block &b, int32_t d, int32_t e, int32_t s) {
  for (int32_t e2 = b.indptr[d]; e2 < e; e2++)
    if (b.indices[e2] == s)
      return false;
  return true;
}

/* MAX/MIN backward: one warp per source and column tile; each element adds grad_dst where the
 * destination's winner is this source, in transposed order. */
template <int V>
__global__ void k_aggr_best_bwd(ng_block b, const float *grad_dst, const int32_t *argbest,
                                int64_t dim, float *grad_src) {
  const int64_t s = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (s >= b.n_src)
    return;
  const int32_t t0 = b.t_indptr[s], t1 = b.t_indptr[s + 1];
  for (int64_t j = ((int64_t)blockIdx.y * 32 + lane) * V; j < dim;
       j += (int64_t)gridDim.y * 32 * V) {
    float acc[V], g[V];
    int32_t a[V];
    for (int k = 0; k < V; k++)
      acc[k] = 0.0f;
    for (int32_t t = t0; t < t1; t++) {
      const int32_t d = b.t_dst[t];
      if (!first_edge(b, d, b.t_eid[t], (int32_t)s))
        continue;
      ld<V>(g, grad_dst + (int64_t)d * dim + j);
      ldi<V>(a, argbest + (int64_t)d * dim + j);
      for (int k = 0; k < V; k++)
        if (a[k] == (int32_t)s)
          acc[k] = __fadd_rn(acc[k], g[k]);
    }
    st<V>(grad_src + s * dim + j, acc);
  }
}

/* One warp per row, as k_gather, writing row pos[i] with input dropout. A grid with fewer
 * warps than rows strides over them. */
template <int V, int T, typename S>
__global__ void k_scatter(float *__restrict__ dst, const int32_t *pos, const S *__restrict__ table,
                          const int64_t *ids, int64_t n, int64_t dim, in_drop dr) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; row < n; row += warps) {
    const int64_t r = ids[row];
    const S *in = table + r * dim;
    float *out = dst + (pos ? (int64_t)pos[row] : row) * dim;
    const int64_t span = 32 * V;
    for (int64_t j0 = ((int64_t)blockIdx.y * T * 32 + lane) * V; j0 < dim;
         j0 += (int64_t)gridDim.y * T * span) {
      float v[T][V];
      ld_chunks<V, T>(v, in, j0, span, dim);
#pragma unroll
      for (int k = 0; k < T; k++) {
        const int64_t j = j0 + k * span;
        if (j < dim) {
          apply_drop<V>(dr, v[k], r, dim, j);
          st<V>(out + j, v[k]);
        }
      }
    }
  }
}

/* Bytes of host rows a row gather queued behind a copy keeps in flight. A warp per row for
 * every row (a 26 MB W1 gather: 6,300 warps) holds the SMs for the whole transfer, waiting on
 * PCIe, and the compute queue's kernels then run in the gaps between gathers: on the H100 a
 * zero-copy W1 iteration took 0.69 ms, the gather's 0.53 plus the compute's. Eight blocks
 * (256 KiB of 4 KiB rows in flight) keep the link busy while the training step runs beside
 * them: 1,890 it/s instead of 1,430 (49 GB/s, the probe's zero-copy rate); 2 to 64 blocks and
 * 32 to 256 threads per block all gave 1,810-1,920. */
constexpr int64_t kCopyOpsInflight = 256 << 10;

/* The blocks along x of a row gather on a copy queue: enough warps for kCopyOpsInflight bytes,
 * each warp reading up to T chunks of V floats of its row at once, over the grid's `y` column
 * groups. */
unsigned copy_ops_blocks(int64_t dim, int v, int t, unsigned y) {
  const int64_t warp_bytes = NG_MIN(dim, (int64_t)32 * v * t) * (int64_t)sizeof(float);
  const int64_t warps = (kCopyOpsInflight + warp_bytes - 1) / warp_bytes;
  const int64_t per_block = (int64_t)kWarpsPerBlock * NG_MAX(y, 1u);
  return (unsigned)NG_MAX((int64_t)1, (warps + per_block - 1) / per_block);
}

__global__ void k_self_loop(float *dst, const float *self_w, const float *rows, int64_t n,
                            int64_t dim) {
  const int64_t total = n * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __fadd_rn(dst[i], __fmul_rn(self_w[i / dim], rows[i]));
}

/* ---- gathers ---- */

ng_status cuda_gather_rows(ng_backend *be, float *dst, const float *table, const int64_t *ids,
                           int64_t n, int64_t dim) {
  NG_CHECK(use(be, "gather_rows"));
  cudaStream_t s = ctx_of(be)->stream;
  const int v = dim % 4 == 0 && aligned16(dst) && aligned16(table) ? 4 : 1;
  const int t = chunks_per_warp(dim, v);
  const dim3 grid = grid_rows_chunks(n, dim, v, t);
  with_chunks(t, [&](auto T) {
    if (v == 4)
      k_gather<4, decltype(T)::value><<<grid, kThreads, 0, s>>>(dst, table, ids, n, dim);
    else
      k_gather<1, decltype(T)::value><<<grid, kThreads, 0, s>>>(dst, table, ids, n, dim);
  });
  LAUNCH_CHECK("gather_rows");
  return NG_OK;
}

/* ---- aggregation ---- */

ng_status cuda_aggr_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                        const float *grad_dst, const int32_t *argbest, int64_t dim,
                        float *grad_src) {
  const bool sum = ag->reduce == NG_REDUCE_SUM;
  NG_CHECK(use(be, "aggr_bwd"));
  cudaStream_t s = ctx_of(be)->stream;
  const bool v4 = dim % 4 == 0 && aligned16(grad_src) && (!grad_dst || aligned16(grad_dst)) &&
                  (sum || !argbest || aligned16(argbest));
  dim3 grid = grid_rows(blk->n_src, dim, v4 ? 4 : 1);
  if (sum) {
    grid.x = NG_MIN(grid.x, (unsigned)kBwdMaxBlocks); /* the kernel loops over sources */
    const sum_flags f = {ag->weighted, ag->self_loop, ag->mean};
    if (v4)
      k_aggr_sum_bwd<4><<<grid, kThreads, 0, s>>>(f, *blk, grad_dst, dim, grad_src);
    else
      k_aggr_sum_bwd<1><<<grid, kThreads, 0, s>>>(f, *blk, grad_dst, dim, grad_src);
  } else {
    if (v4)
      k_aggr_best_bwd<4><<<grid, kThreads, 0, s>>>(*blk, grad_dst, argbest, dim, grad_src);
    else
      k_aggr_best_bwd<1><<<grid, kThreads, 0, s>>>(*blk, grad_dst, argbest, dim, grad_src);
  }
  LAUNCH_CHECK("aggr_bwd");
  return NG_OK;
}

template <typename S>
static ng_status scatter_rows_of(ng_backend *be, const char *op, float *dst, const int32_t *pos,
                                 const S *table, const int64_t *ids, int64_t n, int64_t dim,
                                 float drop_p, uint64_t drop_key) {
  NG_CHECK(use(be, op));
  cudaStream_t s = ctx_of(be)->stream;
  const in_drop dr = {drop_p > 0.0f, drop_key, ng_dropout_threshold(drop_p),
                      1.0f / (1.0f - drop_p)};
  const int v = dim % 4 == 0 && aligned16(dst) && aligned_v4(table) ? 4 : 1;
  const int t = chunks_per_warp(dim, v);
  dim3 grid = grid_rows_chunks(n, dim, v, t);
  if (ctx_of(be)->copy_ops_slot >= 0) /* behind a copy: leave the SMs to the training step */
    grid.x = NG_MIN(grid.x, copy_ops_blocks(dim, v, t, grid.y));
  with_chunks(t, [&](auto T) {
    if (v == 4)
      k_scatter<4, decltype(T)::value, S>
          <<<grid, kThreads, 0, s>>>(dst, pos, table, ids, n, dim, dr);
    else
      k_scatter<1, decltype(T)::value, S>
          <<<grid, kThreads, 0, s>>>(dst, pos, table, ids, n, dim, dr);
  });
  LAUNCH_CHECK(op);
  return NG_OK;
}

ng_status cuda_scatter_rows(ng_backend *be, float *dst, const int32_t *pos, const float *table,
                            const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key) {
  return scatter_rows_of(be, "scatter_rows", dst, pos, table, ids, n, dim, drop_p, drop_key);
}

ng_status cuda_scatter_rows_bf16(ng_backend *be, float *dst, const int32_t *pos,
                                 const uint16_t *table, const int64_t *ids, int64_t n, int64_t dim,
                                 float drop_p, uint64_t drop_key) {
  return scatter_rows_of(be, "scatter_rows_bf16", dst, pos, table, ids, n, dim, drop_p, drop_key);
}

ng_status cuda_add_self_loop(ng_backend *be, float *dst, const float *self_w, const float *rows,
                             int64_t n, int64_t dim) {
  NG_CHECK(use(be, "add_self_loop"));
  k_self_loop<<<grid_1d(n * dim), kThreads, 0, ctx_of(be)->stream>>>(dst, self_w, rows, n, dim);
  LAUNCH_CHECK("add_self_loop");
  return NG_OK;
}

} // namespace ng_cuda
