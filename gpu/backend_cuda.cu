/* The CUDA backend: every op of struct ng_backend_i on device memory, queued on one stream that
 * the backend owns (see docs/gpu.md).
 *
 * Determinism: every output element is computed by one thread in a fixed order (no
 * floating-point atomics), and reductions across threads use fixed trees, so results are
 * bit-identical run to run. The elementwise and aggregation kernels also perform the CPU
 * backend's operations in the CPU's order with every multiply and add rounded separately
 * (__fmul_rn / __fadd_rn stop nvcc from fusing them into FMAs), which makes them agree with the
 * CPU bit for bit; GEMM (cuBLAS) and the cross-entropy's sums agree within fp32 rounding.
 *
 * Argument checks are the CPU backend's, with one difference: the block arrays live on the
 * device, so their contents (indptr endpoints, index ranges) are not read back; counts, shapes
 * and pointers are checked on the host, and xent checks its labels on the device. */
#include "ng_cuda.h"

#include "backend_impl.h"
#include "rng.h"

#include <cublas_v2.h>
#include <type_traits>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;                 // threads per block of every kernel
constexpr int kWarpsPerBlock = kThreads / 32; // rows per block of the warp-per-row kernels
constexpr int64_t kMaxGridX = 1 << 20;        // blocks of a grid-stride elementwise kernel
constexpr int kMaxGridY = 65535;              // column tiles per launch (CUDA's y limit)
constexpr int kBwdMaxBlocks = 4096;           // 32768 warps: more than any GPU holds at once
constexpr int kSumThreads = 256;              // threads of the one-block loss reduction

/* The xent results the host reads back, in pinned host memory and on the device. */
struct xent_result {
  double loss;                // sum of the row losses
  unsigned long long correct; // rows whose arg-max is the label
  unsigned long long bad_row; // the first row with a label outside [0, classes), or ~0
  int bad_label;
};

/* A cuBLAS call, exactly: the GEMM graph cache's key (no padding, compared with memcmp). */
struct gemm_key {
  const void *a, *b;
  void *c;
  int op_a, op_b, m, n, k, lda, ldb, ldc;
  float alpha, beta;
};

constexpr int kGemmGraphs = 64; // GEMM calls remembered (graphs kept) at once

struct gemm_graph {
  gemm_key key;
  cudaGraphExec_t exec; // the captured call, or NULL (seen once, or capture failed)
  bool plain;           // its capture failed: always a plain call
  uint64_t used;        // gemm_clock at its last use; 0: the entry is empty
};

struct cuda_ctx {
  int device;
  cudaStream_t stream;     // every op (the copy stream between copy_ops_begin/end)
  cudaStream_t ops_stream; // the ops' own stream (cuBLAS is bound to it)
  cudaStream_t copy_stream[NG_BACKEND_MARKS]; // copy_h2d_async and copy ops, one per slot, so
                                              // that the slots' transfers overlap
  int copy_ops_slot;                          // the slot of copy_ops_begin, or -1
  cudaEvent_t marks[NG_BACKEND_MARKS];        // mark(), on `stream`
  cudaEvent_t copied[NG_BACKEND_MARKS];       // the last copy (or copy op) of each slot
  cudaEvent_t xent_done[NG_XENT_QUEUE];       // each queued xent result's copy to the host
  int64_t xent_n[NG_XENT_QUEUE], xent_classes[NG_XENT_QUEUE]; // their shapes
  int64_t xent_head, xent_count; // the queue of results not yet read by xent_result
  cublasHandle_t blas;
  void *scratch; // [scratch_cap] bytes of one op's temporaries, grown on demand (ensure_scratch)
  size_t scratch_cap;
  double *row_loss; // [row_loss_cap] per-row losses of xent, grown on demand
  int64_t row_loss_cap;
  xent_result *d_res; // [NG_XENT_QUEUE]
  xent_result *h_res; // [NG_XENT_QUEUE], pinned
  int *d_unread_bad;  // queued xent results that are bad and unread: opt_step skips while > 0
  bool gemm_graphs;   // replay repeated GEMM calls as CUDA graphs (NG_CUDA_GEMM_GRAPHS=0: off)
  gemm_graph gemms[kGemmGraphs];
  uint64_t gemm_clock;
};

cuda_ctx *ctx_of(const ng_backend *be) {
  return static_cast<cuda_ctx *>(be->ctx);
}

/* ---- errors ---- */

ng_status cuda_err(const char *op, const char *what, cudaError_t err) {
  return ng__err(NG_ERR_CUDA, "%s: %s failed: %s (%s)", op, what, cudaGetErrorName(err),
                 cudaGetErrorString(err));
}

ng_status blas_err(const char *op, const char *what, cublasStatus_t st) {
  return ng__err(NG_ERR_CUBLAS, "%s: %s failed: %s (%s)", op, what, cublasGetStatusName(st),
                 cublasGetStatusString(st));
}

#define CU_CHECK(op, call)                                                                         \
  do {                                                                                             \
    cudaError_t cu_err_ = (call);                                                                  \
    if (cu_err_ != cudaSuccess)                                                                    \
      return cuda_err((op), #call, cu_err_);                                                       \
  } while (0)

/* A launch reports configuration errors through cudaGetLastError (faults in the kernel itself
 * surface at the next synchronising call). */
#define LAUNCH_CHECK(op)                                                                           \
  do {                                                                                             \
    cudaError_t cu_err_ = cudaGetLastError();                                                      \
    if (cu_err_ != cudaSuccess)                                                                    \
      return cuda_err((op), "kernel launch", cu_err_);                                             \
  } while (0)

/* Makes the backend's device current in the calling thread (ops may come from any thread). */
ng_status use(const ng_backend *be, const char *op) {
  CU_CHECK(op, cudaSetDevice(ctx_of(be)->device));
  return NG_OK;
}

/* ---- argument checks: the shared ones are ng__bk_check_* (core/backend.c) ---- */

ng_status check_block(const char *op, const ng_block *blk, bool need_transpose) {
  if (!blk)
    return ng__err(NG_ERR_INVALID_ARG, "%s: block is NULL", op);
  if (blk->n_dst < 0 || blk->n_src < blk->n_dst)
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: block has %d destinations and %d sources; destinations must be the "
                   "first n_dst of the sources",
                   op, (int)blk->n_dst, (int)blk->n_src);
  if (blk->nnz < 0 || blk->nnz > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG, "%s: block has %lld edges; blocks hold 0 .. 2^31-1 edges",
                   op, (long long)blk->nnz);
  NG_CHECK(ng__bk_check_ptr(op, "block indptr", blk->indptr, true));
  NG_CHECK(ng__bk_check_ptr(op, "block indices", blk->indices, blk->nnz > 0));
  if (need_transpose && (!blk->t_indptr || (blk->nnz > 0 && (!blk->t_dst || !blk->t_eid))))
    return ng__err(NG_ERR_INVALID_ARG,
                   "%s: block has no transpose (t_indptr, t_dst, t_eid); sample with transpose "
                   "enabled for backward passes",
                   op);
  return NG_OK;
}

/* ---- launch geometry ---- */

unsigned grid_1d(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return (unsigned)NG_MAX((int64_t)1, NG_MIN(blocks, kMaxGridX));
}

/* Warp-per-row kernels: x covers the rows, y the column tiles of 32 * V columns (a kernel
 * strides over tiles beyond kMaxGridY). */
dim3 grid_rows(int64_t rows, int64_t dim, int v) {
  int64_t tiles = (dim + 32 * v - 1) / (32 * v);
  return dim3((unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
              (unsigned)NG_MAX((int64_t)1, NG_MIN(tiles, (int64_t)kMaxGridY)));
}

/* Calls f(std::integral_constant<int, T>) for T = t (8, 4, 2 or 1): the chunk count of a
 * warp-per-row kernel is a template parameter, so that its registers are arrays. */
template <typename F> void with_chunks(int t, F &&f) {
  switch (t) {
  case 8:
    f(std::integral_constant<int, 8>{});
    break;
  case 4:
    f(std::integral_constant<int, 4>{});
    break;
  case 2:
    f(std::integral_constant<int, 2>{});
    break;
  default:
    f(std::integral_constant<int, 1>{});
  }
}

/* The grid of a warp-per-row kernel covering T chunks of 32 * v columns per warp. */
dim3 grid_rows_chunks(int64_t rows, int64_t dim, int v, int t) {
  int64_t groups = (dim + 32 * v * t - 1) / (32 * v * t);
  return dim3((unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
              (unsigned)NG_MAX((int64_t)1, NG_MIN(groups, (int64_t)kMaxGridY)));
}

bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/* ---- device helpers ---- */

/* Loads and stores of V consecutive values (V = 4: one 16-byte access). */
template <int V> __device__ inline void ld(float *o, const float *p) {
  if constexpr (V == 4) {
    const float4 t = *reinterpret_cast<const float4 *>(p);
    o[0] = t.x;
    o[1] = t.y;
    o[2] = t.z;
    o[3] = t.w;
  } else {
    o[0] = *p;
  }
}

template <int V> __device__ inline void st(float *p, const float *o) {
  if constexpr (V == 4)
    *reinterpret_cast<float4 *>(p) = make_float4(o[0], o[1], o[2], o[3]);
  else
    *p = o[0];
}

template <int V> __device__ inline void ldi(int32_t *o, const int32_t *p) {
  if constexpr (V == 4) {
    const int4 t = *reinterpret_cast<const int4 *>(p);
    o[0] = t.x;
    o[1] = t.y;
    o[2] = t.z;
    o[3] = t.w;
  } else {
    o[0] = *p;
  }
}

template <int V> __device__ inline void sti(int32_t *p, const int32_t *o) {
  if constexpr (V == 4)
    *reinterpret_cast<int4 *>(p) = make_int4(o[0], o[1], o[2], o[3]);
  else
    *p = o[0];
}

/* The dropout rule of core/rng.h (ng_mix64 and ng_dropout_keep), copied literally for device
 * code: rng.h is host C. tests/test_gpu_parity.c checks that the masks agree bit for bit. */
__device__ inline uint64_t dev_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
__device__ inline bool dev_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold) {
  uint64_t h = dev_mix64(key ^ (i >> 1));
  return (uint32_t)(h >> ((i & 1) * 32)) >= threshold;
}

/* ---- kernels: memory ---- */

__global__ void k_fill(float *x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = value;
}

/* Rows are read in bursts: a warp covers T chunks of 32 * V columns of one row and issues all
 * their loads before any store, so that a row in registered host memory crosses PCIe as one
 * burst (zero-copy is bound by the rate of random requests, and chunks of one row fetched at
 * different times cost one request each) and device-memory rows keep T loads in flight. */
template <int V, int T>
__device__ inline void ld_chunks(float (&x)[T][V], const float *row, int64_t j0, int64_t span,
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

/* The chunks per warp for rows of `dim` values: a whole row up to 8 chunks (4 KiB with V 4). */
int chunks_per_warp(int64_t dim, int v) {
  const int64_t tiles = (dim + 32 * v - 1) / (32 * v);
  return tiles >= 8 ? 8 : tiles >= 4 ? 4 : tiles >= 2 ? 2 : 1;
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

/* Input dropout of aggr_partial (ng_aggr.drop_p): element (row, c) of the source table. */
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
    x[k] = dev_dropout_keep(dr.key, base + k, dr.threshold) ? __fmul_rn(x[k], dr.scale) : 0.0f;
}

/* acc = acc + (w * x) (or acc + x), elementwise, for one edge's chunks. */
template <int V, int T>
__device__ inline void sum_edge(float (&acc)[T][V], float (&x)[T][V], const sum_flags &f,
                                const in_drop &dr, const ng_block &b, int32_t e, int32_t r,
                                int64_t dim, int64_t j0, int64_t span) {
  const float w = f.weighted ? b.edge_w[e] : 1.0f;
#pragma unroll
  for (int k = 0; k < T; k++) {
    apply_drop<V>(dr, x[k], r, dim, j0 + k * span);
#pragma unroll
    for (int v = 0; v < V; v++)
      acc[k][v] =
          f.weighted ? __fadd_rn(acc[k][v], __fmul_rn(w, x[k][v])) : __fadd_rn(acc[k][v], x[k][v]);
  }
}

/* SUM forward: one warp per destination and group of T chunks of 32 * V columns, neighbours in
 * edge order; two neighbours' rows are loaded before either is added (the additions keep their
 * order). */
template <int V, int T>
__global__ void k_aggr_sum(sum_flags f, in_drop dr, ng_block b, const float *__restrict__ src,
                           int64_t dim, float *__restrict__ dst) {
  const int64_t d = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (d >= b.n_dst)
    return;
  const int32_t e0 = b.indptr[d], e1 = b.indptr[d + 1];
  const int64_t span = 32 * V;
  for (int64_t j0 = ((int64_t)blockIdx.y * T * 32 + lane) * V; j0 < dim;
       j0 += (int64_t)gridDim.y * T * span) {
    float acc[T][V], x0[T][V], x1[T][V];
#pragma unroll
    for (int k = 0; k < T; k++)
#pragma unroll
      for (int v = 0; v < V; v++)
        acc[k][v] = 0.0f;
    int32_t e = e0;
    for (; e + 1 < e1; e += 2) {
      const int32_t r0 = b.indices[e], r1 = b.indices[e + 1];
      ld_chunks<V, T>(x0, src + (int64_t)r0 * dim, j0, span, dim);
      ld_chunks<V, T>(x1, src + (int64_t)r1 * dim, j0, span, dim);
      sum_edge<V, T>(acc, x0, f, dr, b, e, r0, dim, j0, span);
      sum_edge<V, T>(acc, x1, f, dr, b, e + 1, r1, dim, j0, span);
    }
    if (e < e1) {
      const int32_t r0 = b.indices[e];
      ld_chunks<V, T>(x0, src + (int64_t)r0 * dim, j0, span, dim);
      sum_edge<V, T>(acc, x0, f, dr, b, e, r0, dim, j0, span);
    }
    if (f.mean && e1 > e0) {
      const float c = (float)(e1 - e0);
#pragma unroll
      for (int k = 0; k < T; k++)
#pragma unroll
        for (int v = 0; v < V; v++)
          acc[k][v] = __fdiv_rn(acc[k][v], c);
    }
    if (f.self_loop) {
      const float w = b.self_w[d];
      ld_chunks<V, T>(x0, src + d * dim, j0, span, dim);
#pragma unroll
      for (int k = 0; k < T; k++)
#pragma unroll
        for (int v = 0; v < V; v++)
          acc[k][v] = __fadd_rn(acc[k][v], __fmul_rn(w, x0[k][v]));
    }
#pragma unroll
    for (int k = 0; k < T; k++)
      if (j0 + k * span < dim)
        st<V>(dst + d * dim + j0 + k * span, acc[k]);
  }
}

/* MAX/MIN forward: the first neighbour, then strictly better ones (ties and NaN keep the
 * earlier); empty rows give 0 and argbest -1. One warp per destination and group of T chunks. */
template <int V, int T, bool IS_MAX>
__global__ void k_aggr_best(in_drop dr, ng_block b, const float *__restrict__ src, int64_t dim,
                            float *__restrict__ dst, int32_t *__restrict__ argbest) {
  const int64_t d = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (d >= b.n_dst)
    return;
  const int32_t e0 = b.indptr[d], e1 = b.indptr[d + 1];
  const int64_t span = 32 * V;
  for (int64_t j0 = ((int64_t)blockIdx.y * T * 32 + lane) * V; j0 < dim;
       j0 += (int64_t)gridDim.y * T * span) {
    float best[T][V], x[T][V];
    int32_t arg[T][V];
    const int32_t first = e0 == e1 ? -1 : b.indices[e0];
    if (e0 == e1) {
#pragma unroll
      for (int k = 0; k < T; k++)
#pragma unroll
        for (int v = 0; v < V; v++)
          best[k][v] = 0.0f;
    } else {
      ld_chunks<V, T>(best, src + (int64_t)first * dim, j0, span, dim);
#pragma unroll
      for (int k = 0; k < T; k++)
        apply_drop<V>(dr, best[k], first, dim, j0 + k * span);
    }
#pragma unroll
    for (int k = 0; k < T; k++)
#pragma unroll
      for (int v = 0; v < V; v++)
        arg[k][v] = first;
    for (int32_t e = e0 + 1; e < e1; e++) {
      const int32_t s = b.indices[e];
      ld_chunks<V, T>(x, src + (int64_t)s * dim, j0, span, dim);
#pragma unroll
      for (int k = 0; k < T; k++) {
        apply_drop<V>(dr, x[k], s, dim, j0 + k * span);
#pragma unroll
        for (int v = 0; v < V; v++) {
          const bool win = IS_MAX ? x[k][v] > best[k][v] : x[k][v] < best[k][v];
          if (win) {
            best[k][v] = x[k][v];
            arg[k][v] = s;
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < T; k++) {
      const int64_t j = j0 + k * span;
      if (j < dim) {
        st<V>(dst + d * dim + j, best[k]);
        if (argbest)
          sti<V>(argbest + d * dim + j, arg[k]);
      }
    }
  }
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
template <int V, int T>
__global__ void k_scatter(float *__restrict__ dst, const int32_t *pos,
                          const float *__restrict__ table, const int64_t *ids, int64_t n,
                          int64_t dim, in_drop dr) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; row < n; row += warps) {
    const int64_t r = ids[row];
    const float *in = table + r * dim;
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

__global__ void k_degree(ng_block b, int32_t *count) {
  for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < b.n_dst;
       d += (int64_t)gridDim.x * blockDim.x)
    count[d] = b.indptr[d + 1] - b.indptr[d];
}

/* Merges the values of row d (one thread per element); counts are added afterwards by
 * k_merge_counts, so that every thread here reads the counts before any changes. */
__global__ void k_merge_vals(ng_reduce red, float *acc, const int32_t *acc_count,
                             const float *other, const int32_t *other_count, int64_t n_dst,
                             int64_t dim) {
  const int64_t n = n_dst * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = i / dim;
    const float o = other[i], a = acc[i];
    if (other_count[d] == 0)
      continue;
    if (acc_count[d] == 0)
      acc[i] = o;
    else if (red == NG_REDUCE_SUM)
      acc[i] = __fadd_rn(a, o);
    else if (red == NG_REDUCE_MAX)
      acc[i] = o > a ? o : a;
    else
      acc[i] = o < a ? o : a;
  }
}

__global__ void k_merge_counts(int32_t *acc_count, const int32_t *other_count, int64_t n_dst) {
  for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < n_dst;
       d += (int64_t)gridDim.x * blockDim.x)
    acc_count[d] += other_count[d];
}

__global__ void k_finalize(bool mean, const float *val, const int32_t *count, int64_t n_dst,
                           int64_t dim, float *dst) {
  const int64_t n = n_dst * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t c = count[i / dim];
    dst[i] = c == 0 ? 0.0f : mean ? __fdiv_rn(val[i], (float)c) : val[i];
  }
}

/* ---- kernels: dense ---- */

/* C = beta * C for an empty product (beta == 0 does not read C). */
__global__ void k_scale_c(float *c, int64_t m, int64_t n, int64_t ldc, float beta) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    float *p = c + (i / n) * ldc + i % n;
    *p = beta == 0.0f ? 0.0f : __fmul_rn(beta, *p);
  }
}

__global__ void k_add(float *y, const float *x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void k_bias_act(float *x, const float *bias, int64_t rows, int64_t cols, bool relu) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v = x[i];
    if (bias)
      v = __fadd_rn(v, bias[i % cols]);
    if (relu) /* v < 0 ? 0 : v keeps NaN visible, as the CPU does */
      v = v < 0.0f ? 0.0f : v;
    x[i] = v;
  }
}

__global__ void k_relu_bwd(float *grad, const float *y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    grad[i] = y[i] > 0.0f ? grad[i] : 0.0f;
}

/* The bias gradient in the chunked row order of NG_BIAS_CHUNK_ROWS (backend_impl.h), the CPU's
 * order, so that the sums agree bit for bit. Pass 1: block (k, y) sums chunk k of the rows for
 * one column per thread (a row's columns are consecutive threads: coalesced loads), eight rows'
 * values loaded before they are added in order, and with RELU applies the mask on the way
 * (grad = y > 0 ? grad : 0, written back), so the gradient is read once. Pass 2 adds the chunk
 * sums in chunk order. A single chunk writes its sums directly: 0 + s is s bit for bit, since a
 * sum that starts from +0 is never -0. */
template <bool RELU>
__global__ void k_bias_chunks(float *grad, const float *y, int64_t rows, int64_t cols,
                              float *part) {
  const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  const int64_t r0 = (int64_t)blockIdx.x * NG_BIAS_CHUNK_ROWS;
  const int64_t r1 = rows - r0 < NG_BIAS_CHUNK_ROWS ? rows : r0 + NG_BIAS_CHUNK_ROWS;
  constexpr int U = 8;
  float acc = 0.0f;
  int64_t r = r0;
  for (; r + U <= r1; r += U) {
    float g[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = (r + u) * cols + c;
      g[u] = grad[i];
      if (RELU) {
        g[u] = y[i] > 0.0f ? g[u] : 0.0f;
        grad[i] = g[u];
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
      acc = __fadd_rn(acc, g[u]);
  }
  for (; r < r1; r++) {
    const int64_t i = r * cols + c;
    float g = grad[i];
    if (RELU) {
      g = y[i] > 0.0f ? g : 0.0f;
      grad[i] = g;
    }
    acc = __fadd_rn(acc, g);
  }
  part[(int64_t)blockIdx.x * cols + c] = acc;
}

__global__ void k_bias_total(const float *part, int64_t chunks, int64_t cols, float *out) {
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  float acc = 0.0f;
  for (int64_t k = 0; k < chunks; k++)
    acc = __fadd_rn(acc, part[k * cols + c]);
  out[c] = acc;
}

__global__ void k_dropout_fwd(float *x, uint8_t *mask, int64_t n, uint64_t key, uint32_t threshold,
                              float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const bool keep = dev_dropout_keep(key, (uint64_t)i, threshold);
    mask[i] = keep;
    x[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
  }
}

__global__ void k_dropout_bwd(float *grad, const uint8_t *mask, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    grad[i] = mask[i] ? __fmul_rn(grad[i], scale) : 0.0f;
}

__global__ void k_xent_init(xent_result *res) {
  res->loss = 0.0;
  res->correct = 0;
  res->bad_row = ~0ULL;
  res->bad_label = 0;
}

/* Finds the first row whose label is out of range: an integer atomic minimum, the same whatever
 * the order of the threads. */
__global__ void k_xent_check(const int32_t *labels, int64_t n, int64_t classes, xent_result *res) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t y = labels[i];
    if (y < 0 || y >= classes)
      atomicMin(&res->bad_row, (unsigned long long)i);
  }
}

/* One warp per row: stable log-softmax in double, arg-max ties to the lowest class; writes the
 * row's loss and whether its arg-max is the label into row_loss [n, 2]. Does nothing when a
 * label is bad, so that an invalid call writes no gradient. */
__global__ void k_xent_rows(const float *logits, const int32_t *labels, int64_t n, int64_t classes,
                            float *grad, double inv_n, double *row_loss, const xent_result *res) {
  if (res->bad_row != ~0ULL)
    return;
  const int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (i >= n)
    return;
  const float *z = logits + i * classes;
  const int32_t y = labels[i];
  /* Each lane scans its classes in order keeping the first strict maximum (as the CPU scans). */
  float best = -INFINITY;
  long long arg = INT64_MAX;
  if (lane < classes) {
    best = z[lane];
    arg = lane;
  }
  for (int64_t j = lane + 32; j < classes; j += 32)
    if (z[j] > best) {
      best = z[j];
      arg = j;
    }
  /* Combine the lanes: the larger value wins, ties go to the lower class. */
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, off);
    const long long oa = __shfl_xor_sync(0xffffffffu, arg, off);
    if (ob > best || (ob == best && oa < arg)) {
      best = ob;
      arg = oa;
    }
  }
  const double mx = best;
  double se = 0.0;
  for (int64_t j = lane; j < classes; j += 32)
    se += exp((double)z[j] - mx);
  for (int off = 16; off > 0; off >>= 1)
    se += __shfl_xor_sync(0xffffffffu, se, off);
  const double lse = mx + log(se);
  const double zy = z[y];
  __syncwarp();
  if (grad) { /* written after every read of the row: grad may be the logits themselves */
    float *g = grad + i * classes;
    for (int64_t j = lane; j < classes; j += 32)
      g[j] = (float)((exp((double)z[j] - lse) - (j == y ? 1.0 : 0.0)) * inv_n);
  }
  if (lane == 0) {
    row_loss[2 * i] = lse - zy;
    row_loss[2 * i + 1] = arg == y ? 1.0 : 0.0;
  }
}

/* Sums the row losses and hits in one block: thread t takes rows t, t + T, ... in order, then a
 * fixed tree combines the threads, so the sum is the same at every run. */
__global__ void k_xent_sum(const double *row_loss, const int32_t *labels, int64_t n,
                           xent_result *res, int *unread_bad) {
  __shared__ double s_loss[kSumThreads];
  __shared__ unsigned long long s_hits[kSumThreads];
  double loss = 0.0;
  unsigned long long hits = 0;
  if (res->bad_row == ~0ULL)
    for (int64_t i = threadIdx.x; i < n; i += kSumThreads) {
      loss += row_loss[2 * i];
      hits += row_loss[2 * i + 1] != 0.0;
    }
  s_loss[threadIdx.x] = loss;
  s_hits[threadIdx.x] = hits;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      s_loss[threadIdx.x] += s_loss[threadIdx.x + w];
      s_hits[threadIdx.x] += s_hits[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    res->loss = s_loss[0];
    res->correct = s_hits[0];
    /* A bad result holds back every optimizer step until the host has read it. */
    if (res->bad_row != ~0ULL)
      res->bad_label = labels[res->bad_row];
    if (res->bad_row != ~0ULL || !isfinite(s_loss[0]))
      atomicAdd(unread_bad, 1);
  }
}

/* The host read a bad result: the steps queued after this point run again. */
__global__ void k_xent_read_bad(int *unread_bad) {
  atomicSub(unread_bad, 1);
}

struct adam_consts {
  float lr, wd, b1, b2, c1, c2, eps, step_size, bc2_sqrt;
};

__global__ void k_sgd(float *param, const float *grad, float *mom_buf, int64_t n, float lr,
                      float wd, float mom, const int *unread_bad) {
  if (*unread_bad)
    return;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float g = wd != 0.0f ? __fadd_rn(grad[i], __fmul_rn(wd, param[i])) : grad[i];
    if (mom != 0.0f) { /* the buffer starts at 0, so step 1 stores g as PyTorch does */
      g = __fadd_rn(__fmul_rn(mom, mom_buf[i]), g);
      mom_buf[i] = g;
    }
    param[i] = __fsub_rn(param[i], __fmul_rn(lr, g));
  }
}

__global__ void k_adam(float *param, const float *grad, float *m1, float *m2, int64_t n,
                       adam_consts c, const int *unread_bad) {
  if (*unread_bad)
    return;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float g = c.wd != 0.0f ? __fadd_rn(grad[i], __fmul_rn(c.wd, param[i])) : grad[i];
    const float m = __fadd_rn(__fmul_rn(c.b1, m1[i]), __fmul_rn(c.c1, g));
    const float v = __fadd_rn(__fmul_rn(c.b2, m2[i]), __fmul_rn(__fmul_rn(c.c2, g), g));
    m1[i] = m;
    m2[i] = v;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bc2_sqrt), c.eps);
    param[i] = __fsub_rn(param[i], __fmul_rn(c.step_size, __fdiv_rn(m, denom)));
  }
}

/* ---- lifetime and memory ---- */

void release(cuda_ctx *c) {
  if (!c)
    return;
  /* Teardown errors cannot be reported (destroy returns nothing); each call is independent. */
  if (c->ops_stream)
    (void)cudaStreamSynchronize(c->ops_stream);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->copy_stream[k])
      (void)cudaStreamSynchronize(c->copy_stream[k]);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->marks[k])
      (void)cudaEventDestroy(c->marks[k]);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->copied[k])
      (void)cudaEventDestroy(c->copied[k]);
  for (int k = 0; k < NG_XENT_QUEUE; k++)
    if (c->xent_done[k])
      (void)cudaEventDestroy(c->xent_done[k]);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->copy_stream[k])
      (void)cudaStreamDestroy(c->copy_stream[k]);
  for (int k = 0; k < kGemmGraphs; k++)
    if (c->gemms[k].exec)
      (void)cudaGraphExecDestroy(c->gemms[k].exec);
  if (c->blas)
    (void)cublasDestroy(c->blas);
  (void)cudaFree(c->scratch);
  (void)cudaFree(c->row_loss);
  (void)cudaFree(c->d_res);
  (void)cudaFree(c->d_unread_bad);
  (void)cudaFreeHost(c->h_res);
  if (c->ops_stream)
    (void)cudaStreamDestroy(c->ops_stream);
  free(c);
}

void cuda_destroy(ng_backend *be) {
  if (ctx_of(be))
    (void)cudaSetDevice(ctx_of(be)->device);
  release(ctx_of(be));
  free(be);
}

ng_status cuda_alloc(ng_backend *be, void **out, size_t bytes) {
  NG_CHECK(ng__bk_check_ptr("alloc", "out", out, true));
  *out = NULL;
  NG_CHECK(use(be, "alloc"));
  /* A zero-byte request still gets a distinct, freeable pointer, as on the CPU backend. */
  cudaError_t err = cudaMalloc(out, NG_MAX(bytes, (size_t)1));
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); /* not sticky: clear it so that later calls do not see it */
    *out = NULL;
    return ng__err(NG_ERR_NOMEM,
                   "alloc: out of device memory allocating %zu bytes on CUDA device %d; use "
                   "smaller batches or a GPU with more memory",
                   bytes, ctx_of(be)->device);
  }
  if (err != cudaSuccess) {
    *out = NULL;
    return cuda_err("alloc", "cudaMalloc", err);
  }
  return NG_OK;
}

void cuda_free(ng_backend *be, void *ptr) {
  if (!ptr)
    return;
  (void)cudaSetDevice(ctx_of(be)->device);
  (void)cudaFree(ptr); /* free returns nothing; a failure here leaves a sticky error to report */
}

ng_status cuda_copy(ng_backend *be, const char *op, void *dst, const void *src, size_t bytes,
                    bool wait) {
  if (bytes == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr(op, "dst", dst, true));
  NG_CHECK(ng__bk_check_ptr(op, "src", src, true));
  NG_CHECK(use(be, op));
  cuda_ctx *c = ctx_of(be);
  CU_CHECK(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream));
  if (wait)
    CU_CHECK(op, cudaStreamSynchronize(c->stream));
  return NG_OK;
}

/* Host-to-device copies wait as well: the caller may reuse the host buffer on return (a
 * pinned source would otherwise still be read by the DMA engine). */
ng_status cuda_copy_h2d(ng_backend *be, void *dst, const void *host_src, size_t bytes) {
  return cuda_copy(be, "copy_h2d", dst, host_src, bytes, true);
}

/* The copy waits on the copy stream for the slot's mark and records the slot's event; the op
 * stream waits for that event only at wait_copy, so the copy overlaps the ops in between. */
ng_status cuda_copy_h2d_async(ng_backend *be, void *dst, const void *host_src, size_t bytes,
                              int slot) {
  NG_CHECK(ng__bk_check_slot("copy_h2d_async", slot));
  NG_CHECK(ng__bk_check_ptr("copy_h2d_async", "dst", dst, bytes > 0));
  NG_CHECK(ng__bk_check_ptr("copy_h2d_async", "src", host_src, bytes > 0));
  NG_CHECK(use(be, "copy_h2d_async"));
  cuda_ctx *c = ctx_of(be);
  CU_CHECK("copy_h2d_async", cudaStreamWaitEvent(c->copy_stream[slot], c->marks[slot], 0));
  if (bytes > 0)
    CU_CHECK("copy_h2d_async",
             cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->copy_stream[slot]));
  CU_CHECK("copy_h2d_async", cudaEventRecord(c->copied[slot], c->copy_stream[slot]));
  return NG_OK;
}

ng_status cuda_wait_copy(ng_backend *be, int slot) {
  NG_CHECK(ng__bk_check_slot("wait_copy", slot));
  NG_CHECK(use(be, "wait_copy"));
  cuda_ctx *c = ctx_of(be);
  CU_CHECK("wait_copy", cudaStreamWaitEvent(c->stream, c->copied[slot], 0));
  return NG_OK;
}

ng_status cuda_copy_ops_begin(ng_backend *be, int slot) {
  NG_CHECK(ng__bk_check_slot("copy_ops_begin", slot));
  cuda_ctx *c = ctx_of(be);
  if (c->copy_ops_slot >= 0)
    return ng__err(NG_ERR_STATE, "copy_ops_begin: slot %d's copy ops have not ended",
                   c->copy_ops_slot);
  NG_CHECK(use(be, "copy_ops_begin"));
  c->copy_ops_slot = slot;
  c->stream = c->copy_stream[slot];
  return NG_OK;
}

ng_status cuda_copy_ops_end(ng_backend *be, int slot) {
  cuda_ctx *c = ctx_of(be);
  if (slot < 0 || slot != c->copy_ops_slot)
    return ng__err(NG_ERR_STATE, "copy_ops_end: slot %d has no copy ops begun", slot);
  c->copy_ops_slot = -1;
  c->stream = c->ops_stream;
  NG_CHECK(use(be, "copy_ops_end"));
  CU_CHECK("copy_ops_end", cudaEventRecord(c->copied[slot], c->copy_stream[slot]));
  return NG_OK;
}

ng_status cuda_mark(ng_backend *be, int k) {
  NG_CHECK(ng__bk_check_slot("mark", k));
  NG_CHECK(use(be, "mark"));
  CU_CHECK("mark", cudaEventRecord(ctx_of(be)->marks[k], ctx_of(be)->stream));
  return NG_OK;
}

ng_status cuda_copy_d2h(ng_backend *be, void *host_dst, const void *src, size_t bytes) {
  return cuda_copy(be, "copy_d2h", host_dst, src, bytes, true);
}

ng_status cuda_copy_d2d(ng_backend *be, void *dst, const void *src, size_t bytes) {
  return cuda_copy(be, "copy_d2d", dst, src, bytes, false);
}

ng_status cuda_fill(ng_backend *be, float *x, int64_t n, float value) {
  NG_CHECK(ng__bk_check_count("fill", "n", n));
  NG_CHECK(ng__bk_check_ptr("fill", "x", x, n > 0));
  if (n == 0)
    return NG_OK;
  NG_CHECK(use(be, "fill"));
  k_fill<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(x, n, value);
  LAUNCH_CHECK("fill");
  return NG_OK;
}

ng_status cuda_mem_info(ng_backend *be, size_t *free_bytes, size_t *total) {
  NG_CHECK(use(be, "mem_info"));
  size_t f = 0, t = 0;
  CU_CHECK("mem_info", cudaMemGetInfo(&f, &t));
  if (free_bytes)
    *free_bytes = f;
  if (total)
    *total = t;
  return NG_OK;
}

ng_status cuda_host_alloc(ng_backend *be, void **out, size_t bytes) {
  NG_CHECK(ng__bk_check_ptr("host_alloc", "out", out, true));
  *out = nullptr;
  NG_CHECK(use(be, "host_alloc"));
  cudaError_t err = cudaHostAlloc(out, NG_MAX(bytes, (size_t)1), cudaHostAllocMapped);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *out = nullptr;
    return ng__err(NG_ERR_NOMEM, "host_alloc: cannot page-lock %zu bytes of host memory (%s)",
                   bytes, cudaGetErrorString(err));
  }
  return NG_OK;
}

void cuda_host_free(ng_backend *be, void *ptr) {
  (void)be;
  if (ptr)
    (void)cudaFreeHost(ptr);
}

ng_status cuda_host_register(ng_backend *be, void *ptr, size_t bytes, bool read_only) {
  NG_CHECK(use(be, "host_register"));
  return ng__cuda_host_register(ptr, bytes, read_only);
}

void cuda_host_unregister(ng_backend *be, void *ptr) {
  (void)be;
  if (ptr)
    (void)ng__cuda_host_unregister(ptr);
}

ng_status cuda_pci_bus_id(ng_backend *be, char *buf, size_t cap) {
  if (cap)
    buf[0] = '\0';
  NG_CHECK(use(be, "pci_bus_id"));
  CU_CHECK("pci_bus_id",
           cudaDeviceGetPCIBusId(buf, (int)NG_MIN(cap, (size_t)INT32_MAX), ctx_of(be)->device));
  return NG_OK;
}

ng_status cuda_host_view(ng_backend *be, const void *host, const void **out) {
  NG_CHECK(use(be, "host_view"));
  void *dev = nullptr;
  cudaError_t err = cudaHostGetDevicePointer(&dev, const_cast<void *>(host), 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: clear it so that later launch checks pass */
    return ng__err(NG_ERR_CUDA,
                   "host_view: host memory at %p is not registered for zero-copy access (%s); "
                   "register it with ng__cuda_host_register first",
                   host, cudaGetErrorString(err));
  }
  *out = dev;
  return NG_OK;
}

/* Both queues: a caller that syncs may then reuse the sources of queued copies. */
ng_status cuda_sync(ng_backend *be) {
  NG_CHECK(use(be, "sync"));
  CU_CHECK("sync", cudaStreamSynchronize(ctx_of(be)->ops_stream));
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    CU_CHECK("sync", cudaStreamSynchronize(ctx_of(be)->copy_stream[k]));
  return NG_OK;
}

/* ---- gathers ---- */

ng_status cuda_gather_rows(ng_backend *be, float *dst, const float *table, const int64_t *ids,
                           int64_t n, int64_t dim) {
  NG_CHECK(ng__bk_check_count("gather_rows", "n", n));
  NG_CHECK(ng__bk_check_count("gather_rows", "dim", dim));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr("gather_rows", "dst", dst, true));
  NG_CHECK(ng__bk_check_ptr("gather_rows", "table", table, true));
  NG_CHECK(ng__bk_check_ptr("gather_rows", "ids", ids, true));
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

/* Launches the SUM or MAX/MIN forward over the block's destinations (no launch for empty work). */
ng_status launch_fwd(ng_backend *be, const char *op, const ng_aggr *ag, const ng_block *blk,
                     const float *src, int64_t dim, float *dst, int32_t *argbest) {
  if (blk->n_dst == 0 || dim == 0)
    return NG_OK;
  cudaStream_t s = ctx_of(be)->stream;
  const bool v4 =
      dim % 4 == 0 && aligned16(src) && aligned16(dst) && (!argbest || aligned16(argbest));
  const int t = chunks_per_warp(dim, v4 ? 4 : 1);
  const dim3 grid = grid_rows_chunks(blk->n_dst, dim, v4 ? 4 : 1, t);
  const in_drop dr = {ag->drop_p > 0.0f, ag->drop_key, ng_dropout_threshold(ag->drop_p),
                      1.0f / (1.0f - ag->drop_p)};
  const ng_block b = *blk;
  with_chunks(t, [&](auto T) {
    constexpr int C = decltype(T)::value;
    if (ag->reduce == NG_REDUCE_SUM) {
      const sum_flags f = {ag->weighted, ag->self_loop, ag->mean};
      if (v4)
        k_aggr_sum<4, C><<<grid, kThreads, 0, s>>>(f, dr, b, src, dim, dst);
      else
        k_aggr_sum<1, C><<<grid, kThreads, 0, s>>>(f, dr, b, src, dim, dst);
    } else if (ag->reduce == NG_REDUCE_MAX) {
      if (v4)
        k_aggr_best<4, C, true><<<grid, kThreads, 0, s>>>(dr, b, src, dim, dst, argbest);
      else
        k_aggr_best<1, C, true><<<grid, kThreads, 0, s>>>(dr, b, src, dim, dst, argbest);
    } else {
      if (v4)
        k_aggr_best<4, C, false><<<grid, kThreads, 0, s>>>(dr, b, src, dim, dst, argbest);
      else
        k_aggr_best<1, C, false><<<grid, kThreads, 0, s>>>(dr, b, src, dim, dst, argbest);
    }
  });
  LAUNCH_CHECK(op);
  return NG_OK;
}

ng_status cuda_aggr_fwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk, const float *src,
                        int64_t dim, float *dst, int32_t *argbest) {
  NG_CHECK(check_block("aggr_fwd", blk, false));
  NG_CHECK(ng__bk_check_aggr("aggr_fwd", ag, blk));
  NG_CHECK(ng__bk_check_no_drop("aggr_fwd", ag));
  NG_CHECK(ng__bk_check_count("aggr_fwd", "dim", dim));
  if (blk->n_dst == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr("aggr_fwd", "src", src, blk->n_src > 0));
  NG_CHECK(ng__bk_check_ptr("aggr_fwd", "dst", dst, true));
  NG_CHECK(use(be, "aggr_fwd"));
  return launch_fwd(be, "aggr_fwd", ag, blk, src, dim, dst,
                    ag->reduce == NG_REDUCE_SUM ? nullptr : argbest);
}

ng_status cuda_aggr_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                        const float *grad_dst, const int32_t *argbest, int64_t dim,
                        float *grad_src) {
  NG_CHECK(check_block("aggr_bwd", blk, true));
  NG_CHECK(ng__bk_check_aggr("aggr_bwd", ag, blk));
  NG_CHECK(ng__bk_check_no_drop("aggr_bwd", ag));
  NG_CHECK(ng__bk_check_count("aggr_bwd", "dim", dim));
  if (blk->n_src == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr("aggr_bwd", "grad_dst", grad_dst, blk->n_dst > 0));
  NG_CHECK(ng__bk_check_ptr("aggr_bwd", "grad_src", grad_src, true));
  const bool sum = ag->reduce == NG_REDUCE_SUM;
  if (!sum)
    NG_CHECK(ng__bk_check_ptr("aggr_bwd", "argbest (MAX/MIN need the forward's winners)", argbest,
                              blk->n_dst > 0));
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

ng_status cuda_aggr_partial(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                            const float *src, ng_pstate *state) {
  NG_CHECK(check_block("aggr_partial", blk, false));
  NG_CHECK(ng__bk_check_aggr("aggr_partial", ag, blk));
  NG_CHECK(ng__bk_check_state("aggr_partial", state));
  if (state->n_dst != blk->n_dst)
    return ng__err(NG_ERR_INVALID_ARG,
                   "aggr_partial: state has %d rows but the block %d destinations; size the "
                   "state for the block",
                   (int)state->n_dst, (int)blk->n_dst);
  const int64_t dim = state->dim;
  NG_CHECK(ng__bk_check_ptr("aggr_partial", "src", src, blk->nnz > 0 && dim > 0));
  NG_CHECK(ng__bk_check_dropout_p("aggr_partial", ag->drop_p));
  if (blk->n_dst == 0)
    return NG_OK;
  NG_CHECK(use(be, "aggr_partial"));
  k_degree<<<grid_1d(blk->n_dst), kThreads, 0, ctx_of(be)->stream>>>(*blk, state->count);
  LAUNCH_CHECK("aggr_partial");
  /* A partial state is the bare reduction: MEAN divides and the self loop is added only when
   * the merged state is finalized. */
  ng_aggr bare = *ag;
  bare.mean = false;
  bare.self_loop = false;
  return launch_fwd(be, "aggr_partial", &bare, blk, src, dim, state->val, nullptr);
}

ng_status cuda_pstate_merge(ng_backend *be, const ng_aggr *ag, ng_pstate *acc,
                            const ng_pstate *other) {
  NG_CHECK(ng__bk_check_aggr("pstate_merge", ag, NULL));
  NG_CHECK(ng__bk_check_no_drop("pstate_merge", ag));
  NG_CHECK(ng__bk_check_state("pstate_merge", acc));
  NG_CHECK(ng__bk_check_state("pstate_merge", other));
  if (acc->n_dst != other->n_dst || acc->dim != other->dim)
    return ng__err(NG_ERR_INVALID_ARG,
                   "pstate_merge: states of shapes [%d, %lld] and [%d, %lld]; only states of the "
                   "same destinations and dimension merge",
                   (int)acc->n_dst, (long long)acc->dim, (int)other->n_dst, (long long)other->dim);
  if (acc->n_dst == 0)
    return NG_OK;
  NG_CHECK(use(be, "pstate_merge"));
  cudaStream_t s = ctx_of(be)->stream;
  const int64_t n = (int64_t)acc->n_dst * acc->dim;
  if (n > 0) {
    k_merge_vals<<<grid_1d(n), kThreads, 0, s>>>(ag->reduce, acc->val, acc->count, other->val,
                                                 other->count, acc->n_dst, acc->dim);
    LAUNCH_CHECK("pstate_merge");
  }
  k_merge_counts<<<grid_1d(acc->n_dst), kThreads, 0, s>>>(acc->count, other->count, acc->n_dst);
  LAUNCH_CHECK("pstate_merge");
  return NG_OK;
}

ng_status cuda_pstate_finalize(ng_backend *be, const ng_aggr *ag, const ng_pstate *state,
                               float *dst) {
  NG_CHECK(ng__bk_check_aggr("pstate_finalize", ag, NULL));
  NG_CHECK(ng__bk_check_no_drop("pstate_finalize", ag));
  NG_CHECK(ng__bk_check_state("pstate_finalize", state));
  const int64_t n = (int64_t)state->n_dst * state->dim;
  NG_CHECK(ng__bk_check_ptr("pstate_finalize", "dst", dst, n > 0));
  if (n == 0)
    return NG_OK;
  NG_CHECK(use(be, "pstate_finalize"));
  k_finalize<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(ag->mean, state->val, state->count,
                                                              state->n_dst, state->dim, dst);
  LAUNCH_CHECK("pstate_finalize");
  return NG_OK;
}

ng_status cuda_scatter_rows(ng_backend *be, float *dst, const int32_t *pos, const float *table,
                            const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key) {
  NG_CHECK(ng__bk_check_count("scatter_rows", "n", n));
  NG_CHECK(ng__bk_check_count("scatter_rows", "dim", dim));
  NG_CHECK(ng__bk_check_dropout_p("scatter_rows", drop_p));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr("scatter_rows", "dst", dst, true));
  NG_CHECK(ng__bk_check_ptr("scatter_rows", "table", table, true));
  NG_CHECK(ng__bk_check_ptr("scatter_rows", "ids", ids, true));
  NG_CHECK(use(be, "scatter_rows"));
  cudaStream_t s = ctx_of(be)->stream;
  const in_drop dr = {drop_p > 0.0f, drop_key, ng_dropout_threshold(drop_p),
                      1.0f / (1.0f - drop_p)};
  const int v = dim % 4 == 0 && aligned16(dst) && aligned16(table) ? 4 : 1;
  const int t = chunks_per_warp(dim, v);
  dim3 grid = grid_rows_chunks(n, dim, v, t);
  if (ctx_of(be)->copy_ops_slot >= 0) /* behind a copy: leave the SMs to the training step */
    grid.x = NG_MIN(grid.x, copy_ops_blocks(dim, v, t, grid.y));
  with_chunks(t, [&](auto T) {
    if (v == 4)
      k_scatter<4, decltype(T)::value><<<grid, kThreads, 0, s>>>(dst, pos, table, ids, n, dim, dr);
    else
      k_scatter<1, decltype(T)::value><<<grid, kThreads, 0, s>>>(dst, pos, table, ids, n, dim, dr);
  });
  LAUNCH_CHECK("scatter_rows");
  return NG_OK;
}

ng_status cuda_add_self_loop(ng_backend *be, float *dst, const float *self_w, const float *rows,
                             int64_t n, int64_t dim) {
  NG_CHECK(ng__bk_check_count("add_self_loop", "n", n));
  NG_CHECK(ng__bk_check_count("add_self_loop", "dim", dim));
  if (n == 0 || dim == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr("add_self_loop", "dst", dst, true));
  NG_CHECK(ng__bk_check_ptr("add_self_loop", "self_w", self_w, true));
  NG_CHECK(ng__bk_check_ptr("add_self_loop", "rows", rows, true));
  NG_CHECK(use(be, "add_self_loop"));
  k_self_loop<<<grid_1d(n * dim), kThreads, 0, ctx_of(be)->stream>>>(dst, self_w, rows, n, dim);
  LAUNCH_CHECK("add_self_loop");
  return NG_OK;
}

/* ---- GEMM ---- */

/* cuBLAS is column-major: a row-major [r, c] matrix with leading dimension ld is its
 * column-major transpose, so C^T [n, m] = op(B)^T op(A)^T is computed with the operands swapped
 * and each keeps its own transpose flag. */
ng_status gemm_plain(cuda_ctx *ctx, const gemm_key *g) {
  const cublasStatus_t st = cublasSgemm(
      ctx->blas, (cublasOperation_t)g->op_b, (cublasOperation_t)g->op_a, g->n, g->m, g->k,
      &g->alpha, static_cast<const float *>(g->b), g->ldb, static_cast<const float *>(g->a), g->lda,
      &g->beta, static_cast<float *>(g->c), g->ldc);
  if (st != CUBLAS_STATUS_SUCCESS)
    return blas_err("gemm", "cublasSgemm", st);
  return NG_OK;
}

/* Captures the call `g` on the ops stream into an executable graph; NULL when the capture
 * fails (the call then did not run). */
cudaGraphExec_t gemm_capture(cuda_ctx *ctx, const gemm_key *g) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(ctx->ops_stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  const ng_status st = gemm_plain(ctx, g);
  cudaError_t err = cudaStreamEndCapture(ctx->ops_stream, &graph);
  if (st == NG_OK && err == cudaSuccess && graph)
    err = cudaGraphInstantiate(&exec, graph, 0);
  if (graph)
    (void)cudaGraphDestroy(graph);
  if (st != NG_OK || err != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return exec;
}

/* The GEMM graph cache. cuBLAS spends ~20 us of host time per call choosing and launching its
 * kernels (H100, with 15 workers loading the memory bus), as long as the device computes one of
 * W1's GEMMs, and a training iteration repeats the same few calls on the same buffers. The
 * second time a call comes with exactly the same arguments (pointers, shape, scalars) it is
 * captured into a CUDA graph, and every later one launches that graph: the same kernels, hence
 * the same bits, for a few microseconds. The least recently used entry makes room; a graph
 * destroyed while it runs is freed when it completes (cudaGraphExecDestroy). */
ng_status gemm_replay(cuda_ctx *ctx, const gemm_key *g) {
  gemm_graph *hit = nullptr, *victim = &ctx->gemms[0];
  for (int i = 0; i < kGemmGraphs && !hit; i++) {
    gemm_graph *e = &ctx->gemms[i];
    if (e->used && memcmp(&e->key, g, sizeof *g) == 0)
      hit = e;
    else if (e->used < victim->used)
      victim = e;
  }
  const uint64_t now = ++ctx->gemm_clock;
  if (!hit) {
    if (victim->exec)
      (void)cudaGraphExecDestroy(victim->exec);
    *victim = gemm_graph{*g, nullptr, false, now};
    return gemm_plain(ctx, g);
  }
  hit->used = now;
  if (!hit->exec && !hit->plain) {
    hit->exec = gemm_capture(ctx, g);
    hit->plain = !hit->exec;
  }
  if (!hit->exec)
    return gemm_plain(ctx, g);
  CU_CHECK("gemm", cudaGraphLaunch(hit->exec, ctx->ops_stream));
  return NG_OK;
}

ng_status cuda_gemm(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc) {
  NG_CHECK(ng__bk_check_count("gemm", "m", m));
  NG_CHECK(ng__bk_check_count("gemm", "n", n));
  NG_CHECK(ng__bk_check_count("gemm", "k", k));
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < NG_MAX(a_cols, (int64_t)1) || ldb < NG_MAX(b_cols, (int64_t)1) ||
      ldc < NG_MAX(n, (int64_t)1))
    return ng__err(NG_ERR_INVALID_ARG,
                   "gemm: leading dimensions lda %lld, ldb %lld, ldc %lld are below the row "
                   "lengths %lld, %lld, %lld of the row-major A, B, C",
                   (long long)lda, (long long)ldb, (long long)ldc, (long long)a_cols,
                   (long long)b_cols, (long long)n);
  if (m == 0 || n == 0)
    return NG_OK;
  NG_CHECK(ng__bk_check_ptr("gemm", "C", c, true));
  NG_CHECK(ng__bk_check_ptr("gemm", "A", a, k > 0));
  NG_CHECK(ng__bk_check_ptr("gemm", "B", b, k > 0));
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
      ldc > INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "gemm: m=%lld n=%lld k=%lld (lda %lld, ldb %lld, ldc %lld) exceed cuBLAS's "
                   "32-bit sizes; split the product",
                   (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldb,
                   (long long)ldc);
  NG_CHECK(use(be, "gemm"));
  cuda_ctx *ctx = ctx_of(be);
  if (k == 0) { /* an empty product: C = beta * C, where beta == 0 does not read C */
    k_scale_c<<<grid_1d(m * n), kThreads, 0, ctx->stream>>>(c, m, n, ldc, beta);
    LAUNCH_CHECK("gemm");
    return NG_OK;
  }
  const gemm_key key = {a,
                        b,
                        c,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        (int)m,
                        (int)n,
                        (int)k,
                        (int)lda,
                        (int)ldb,
                        (int)ldc,
                        alpha,
                        beta};
  if (!ctx->gemm_graphs || ctx->stream != ctx->ops_stream)
    return gemm_plain(ctx, &key);
  return gemm_replay(ctx, &key);
}

/* ---- elementwise ops ---- */

ng_status cuda_add(ng_backend *be, float *y, const float *x, int64_t n) {
  NG_CHECK(ng__bk_check_count("add", "n", n));
  NG_CHECK(ng__bk_check_ptr("add", "y", y, n > 0));
  NG_CHECK(ng__bk_check_ptr("add", "x", x, n > 0));
  if (n == 0)
    return NG_OK;
  NG_CHECK(use(be, "add"));
  k_add<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(y, x, n);
  LAUNCH_CHECK("add");
  return NG_OK;
}

/* Grows the ops' scratch buffer (temporaries that live within one op, such as the bias
 * gradient's chunk sums) to at least `bytes`. Like ensure_row_loss, it allocates only when an
 * op needs more than any before on this backend: the steady state allocates nothing. */
ng_status ensure_scratch(cuda_ctx *c, const char *op, size_t bytes) {
  if (bytes <= c->scratch_cap)
    return NG_OK;
  const size_t cap = NG_MAX(bytes + bytes / 2, (size_t)1 << 16);
  CU_CHECK(op, cudaStreamSynchronize(c->stream));
  CU_CHECK(op, cudaFree(c->scratch));
  c->scratch = nullptr;
  c->scratch_cap = 0;
  CU_CHECK(op, cudaMalloc(&c->scratch, cap));
  c->scratch_cap = cap;
  return NG_OK;
}

ng_status cuda_bias_act_fwd(ng_backend *be, float *x, const float *bias, int64_t rows, int64_t cols,
                            ng_activation act) {
  NG_CHECK(ng__bk_check_count("bias_act_fwd", "rows", rows));
  NG_CHECK(ng__bk_check_count("bias_act_fwd", "cols", cols));
  NG_CHECK(ng__bk_check_act("bias_act_fwd", act));
  NG_CHECK(ng__bk_check_ptr("bias_act_fwd", "x", x, rows > 0 && cols > 0));
  if (rows == 0 || cols == 0)
    return NG_OK;
  NG_CHECK(use(be, "bias_act_fwd"));
  k_bias_act<<<grid_1d(rows * cols), kThreads, 0, ctx_of(be)->stream>>>(x, bias, rows, cols,
                                                                        act == NG_ACT_RELU);
  LAUNCH_CHECK("bias_act_fwd");
  return NG_OK;
}

ng_status cuda_bias_act_bwd(ng_backend *be, float *grad, const float *y, float *grad_bias,
                            int64_t rows, int64_t cols, ng_activation act) {
  NG_CHECK(ng__bk_check_count("bias_act_bwd", "rows", rows));
  NG_CHECK(ng__bk_check_count("bias_act_bwd", "cols", cols));
  NG_CHECK(ng__bk_check_act("bias_act_bwd", act));
  NG_CHECK(ng__bk_check_ptr("bias_act_bwd", "grad", grad, rows > 0 && cols > 0));
  NG_CHECK(ng__bk_check_ptr("bias_act_bwd", "y (ReLU needs the forward output)", y,
                            act == NG_ACT_RELU && rows > 0 && cols > 0));
  if (cols == 0)
    return NG_OK;
  NG_CHECK(use(be, "bias_act_bwd"));
  cuda_ctx *c = ctx_of(be);
  const bool relu = act == NG_ACT_RELU && rows > 0;
  if (!grad_bias) {
    if (relu) {
      k_relu_bwd<<<grid_1d(rows * cols), kThreads, 0, c->stream>>>(grad, y, rows * cols);
      LAUNCH_CHECK("bias_act_bwd");
    }
    return NG_OK;
  }
  if (rows == 0) /* the sums of no rows are 0, as on the CPU */
    return cuda_fill(be, grad_bias, cols, 0.0f);
  const int64_t chunks = (rows + NG_BIAS_CHUNK_ROWS - 1) / NG_BIAS_CHUNK_ROWS;
  float *part = grad_bias;
  if (chunks > 1) {
    NG_CHECK(ensure_scratch(c, "bias_act_bwd", (size_t)(chunks * cols) * sizeof(float)));
    part = static_cast<float *>(c->scratch);
  }
  const unsigned threads = (unsigned)NG_MIN((int64_t)kThreads, (cols + 31) / 32 * 32);
  const dim3 grid((unsigned)chunks, (unsigned)((cols + threads - 1) / threads));
  if (relu)
    k_bias_chunks<true><<<grid, threads, 0, c->stream>>>(grad, y, rows, cols, part);
  else
    k_bias_chunks<false><<<grid, threads, 0, c->stream>>>(grad, y, rows, cols, part);
  LAUNCH_CHECK("bias_act_bwd");
  if (chunks > 1) {
    k_bias_total<<<(unsigned)((cols + kThreads - 1) / kThreads), kThreads, 0, c->stream>>>(
        part, chunks, cols, grad_bias);
    LAUNCH_CHECK("bias_act_bwd");
  }
  return NG_OK;
}

ng_status cuda_dropout_fwd(ng_backend *be, float *x, uint8_t *mask, int64_t n, float p,
                           uint64_t seed) {
  NG_CHECK(ng__bk_check_count("dropout_fwd", "n", n));
  NG_CHECK(ng__bk_check_dropout_p("dropout_fwd", p));
  NG_CHECK(ng__bk_check_ptr("dropout_fwd", "x", x, n > 0));
  NG_CHECK(ng__bk_check_ptr("dropout_fwd", "mask", mask, n > 0));
  if (n == 0)
    return NG_OK;
  NG_CHECK(use(be, "dropout_fwd"));
  /* The key and threshold come from core/rng.h itself; the per-element rule is its copy. */
  k_dropout_fwd<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(
      x, mask, n, ng_mix64(seed), ng_dropout_threshold(p), 1.0f / (1.0f - p));
  LAUNCH_CHECK("dropout_fwd");
  return NG_OK;
}

ng_status cuda_dropout_bwd(ng_backend *be, float *grad, const uint8_t *mask, int64_t n, float p) {
  NG_CHECK(ng__bk_check_count("dropout_bwd", "n", n));
  NG_CHECK(ng__bk_check_dropout_p("dropout_bwd", p));
  NG_CHECK(ng__bk_check_ptr("dropout_bwd", "grad", grad, n > 0));
  NG_CHECK(ng__bk_check_ptr("dropout_bwd", "mask", mask, n > 0));
  if (n == 0)
    return NG_OK;
  NG_CHECK(use(be, "dropout_bwd"));
  k_dropout_bwd<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(grad, mask, n, 1.0f / (1.0f - p));
  LAUNCH_CHECK("dropout_bwd");
  return NG_OK;
}

/* Grows the per-row xent buffer (2 doubles a row). This is the one device allocation inside an
 * op: it happens only when a batch has more rows than any before on this backend. */
ng_status ensure_row_loss(cuda_ctx *c, int64_t n) {
  if (n <= c->row_loss_cap)
    return NG_OK;
  const int64_t cap = NG_MAX(n, (int64_t)4096);
  CU_CHECK("xent", cudaStreamSynchronize(c->stream));
  CU_CHECK("xent", cudaFree(c->row_loss));
  c->row_loss = nullptr;
  c->row_loss_cap = 0;
  CU_CHECK("xent", cudaMalloc(&c->row_loss, (size_t)cap * 2 * sizeof(double)));
  c->row_loss_cap = cap;
  return NG_OK;
}

/* Reads queue entry `q` (its copy to the host waited for) into the caller's outputs. */
ng_status xent_read(cuda_ctx *c, int64_t q, double *loss, int64_t *correct) {
  CU_CHECK("xent", cudaEventSynchronize(c->xent_done[q]));
  const xent_result r = c->h_res[q];
  if (r.bad_row != ~0ULL || !isfinite(r.loss)) {
    k_xent_read_bad<<<1, 1, 0, c->stream>>>(c->d_unread_bad);
    LAUNCH_CHECK("xent");
  }
  if (r.bad_row != ~0ULL)
    return ng__err(NG_ERR_INVALID_ARG,
                   "xent: label %d of row %llu is outside [0, %lld); labels must be class "
                   "indices",
                   r.bad_label, r.bad_row, (long long)c->xent_classes[q]);
  if (loss)
    *loss = r.loss / (double)c->xent_n[q];
  if (correct)
    *correct = (int64_t)r.correct;
  return NG_OK;
}

ng_status cuda_xent(ng_backend *be, const float *logits, const int32_t *labels, int64_t n,
                    int64_t classes, float *grad, double *loss, int64_t *correct) {
  NG_CHECK(ng__bk_check_count("xent", "n", n));
  if (classes < 1)
    return ng__err(NG_ERR_INVALID_ARG, "xent: %lld classes; there must be at least one",
                   (long long)classes);
  NG_CHECK(ng__bk_check_ptr("xent", "logits", logits, n > 0));
  NG_CHECK(ng__bk_check_ptr("xent", "labels", labels, n > 0));
  const bool deferred = !loss && !correct;
  if (n == 0 && !deferred) {
    if (loss)
      *loss = 0.0;
    if (correct)
      *correct = 0;
    return NG_OK;
  }
  cuda_ctx *c = ctx_of(be);
  if (deferred && c->xent_count == NG_XENT_QUEUE)
    return ng__err(NG_ERR_STATE,
                   "xent: %d results are queued unread; read them with xent_result first",
                   NG_XENT_QUEUE);
  NG_CHECK(use(be, "xent"));
  NG_CHECK(ensure_row_loss(c, NG_MAX(n, (int64_t)1)));
  const int64_t q = (c->xent_head + c->xent_count) % NG_XENT_QUEUE;
  xent_result *res = c->d_res + q;
  k_xent_init<<<1, 1, 0, c->stream>>>(res);
  LAUNCH_CHECK("xent");
  if (n > 0) {
    k_xent_check<<<grid_1d(n), kThreads, 0, c->stream>>>(labels, n, classes, res);
    LAUNCH_CHECK("xent");
    const unsigned row_blocks = (unsigned)((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
    k_xent_rows<<<row_blocks, kThreads, 0, c->stream>>>(logits, labels, n, classes, grad,
                                                        1.0 / (double)n, c->row_loss, res);
    LAUNCH_CHECK("xent");
    k_xent_sum<<<1, kSumThreads, 0, c->stream>>>(c->row_loss, labels, n, res, c->d_unread_bad);
    LAUNCH_CHECK("xent");
  }
  CU_CHECK("xent",
           cudaMemcpyAsync(c->h_res + q, res, sizeof *res, cudaMemcpyDeviceToHost, c->stream));
  CU_CHECK("xent", cudaEventRecord(c->xent_done[q], c->stream));
  c->xent_n[q] = NG_MAX(n, (int64_t)1);
  c->xent_classes[q] = classes;
  if (deferred) {
    c->xent_count++;
    return NG_OK; /* xent_result reads it */
  }
  return xent_read(c, q, loss, correct); /* never queued: the caller reads it now */
}

ng_status cuda_xent_result(ng_backend *be, double *loss, int64_t *correct) {
  cuda_ctx *c = ctx_of(be);
  if (c->xent_count == 0)
    return ng__err(NG_ERR_STATE, "xent_result: no xent result to read (call xent first)");
  NG_CHECK(use(be, "xent_result"));
  const int64_t q = c->xent_head;
  c->xent_head = (c->xent_head + 1) % NG_XENT_QUEUE;
  c->xent_count--;
  return xent_read(c, q, loss, correct);
}

ng_status cuda_opt_step(ng_backend *be, const ng_opt_hp *hp, float *param, const float *grad,
                        float *state1, float *state2, int64_t n) {
  NG_CHECK(ng__bk_check_ptr("opt_step", "hyper-parameters", hp, true));
  NG_CHECK(ng__bk_check_count("opt_step", "n", n));
  NG_CHECK(ng__bk_check_ptr("opt_step", "param", param, n > 0));
  NG_CHECK(ng__bk_check_ptr("opt_step", "grad", grad, n > 0));
  if (hp->kind == NG_OPT_SGD) {
    NG_CHECK(ng__bk_check_ptr("opt_step", "state1 (SGD momentum buffer)", state1,
                              hp->momentum != 0.0f && n > 0));
    if (n == 0)
      return NG_OK;
    NG_CHECK(use(be, "opt_step"));
    k_sgd<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(
        param, grad, state1, n, hp->lr, hp->weight_decay, hp->momentum, ctx_of(be)->d_unread_bad);
    LAUNCH_CHECK("opt_step");
    return NG_OK;
  }
  if (hp->kind != NG_OPT_ADAM)
    return ng__err(NG_ERR_INVALID_ARG, "opt_step: unknown optimizer %d", (int)hp->kind);
  if (hp->step < 1)
    return ng__err(NG_ERR_INVALID_ARG, "opt_step: Adam step %lld; steps count from 1",
                   (long long)hp->step);
  NG_CHECK(ng__bk_check_ptr("opt_step", "state1 (Adam first moment)", state1, n > 0));
  NG_CHECK(ng__bk_check_ptr("opt_step", "state2 (Adam second moment)", state2, n > 0));
  if (n == 0)
    return NG_OK;
  NG_CHECK(use(be, "opt_step"));
  /* The CPU's constants, computed the same way on the host. */
  const double bc1 = 1.0 - pow((double)hp->beta1, (double)hp->step);
  const double bc2 = 1.0 - pow((double)hp->beta2, (double)hp->step);
  adam_consts k;
  k.lr = hp->lr;
  k.wd = hp->weight_decay;
  k.b1 = hp->beta1;
  k.b2 = hp->beta2;
  k.c1 = 1.0f - hp->beta1;
  k.c2 = 1.0f - hp->beta2;
  k.eps = hp->eps;
  k.step_size = (float)((double)hp->lr / bc1);
  k.bc2_sqrt = (float)sqrt(bc2);
  k_adam<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(param, grad, state1, state2, n, k,
                                                          ctx_of(be)->d_unread_bad);
  LAUNCH_CHECK("opt_step");
  return NG_OK;
}

ng_backend_i make_iface() {
  ng_backend_i t = {};
  t.name = "cuda";
  t.host_memory = false;
  t.destroy = cuda_destroy;
  t.alloc = cuda_alloc;
  t.free = cuda_free;
  t.copy_h2d = cuda_copy_h2d;
  t.copy_h2d_async = cuda_copy_h2d_async;
  t.wait_copy = cuda_wait_copy;
  t.mark = cuda_mark;
  t.copy_ops_begin = cuda_copy_ops_begin;
  t.copy_ops_end = cuda_copy_ops_end;
  t.copy_d2h = cuda_copy_d2h;
  t.copy_d2d = cuda_copy_d2d;
  t.fill = cuda_fill;
  t.sync = cuda_sync;
  t.mem_info = cuda_mem_info;
  t.host_alloc = cuda_host_alloc;
  t.host_free = cuda_host_free;
  t.host_register = cuda_host_register;
  t.host_unregister = cuda_host_unregister;
  t.host_view = cuda_host_view;
  t.pci_bus_id = cuda_pci_bus_id;
  t.gather_rows = cuda_gather_rows;
  t.aggr_fwd = cuda_aggr_fwd;
  t.aggr_bwd = cuda_aggr_bwd;
  t.aggr_partial = cuda_aggr_partial;
  t.pstate_merge = cuda_pstate_merge;
  t.pstate_finalize = cuda_pstate_finalize;
  t.scatter_rows = cuda_scatter_rows;
  t.add_self_loop = cuda_add_self_loop;
  t.gemm = cuda_gemm;
  t.add = cuda_add;
  t.bias_act_fwd = cuda_bias_act_fwd;
  t.bias_act_bwd = cuda_bias_act_bwd;
  t.dropout_fwd = cuda_dropout_fwd;
  t.dropout_bwd = cuda_dropout_bwd;
  t.xent = cuda_xent;
  t.xent_result = cuda_xent_result;
  t.opt_step = cuda_opt_step;
  return t;
}

const ng_backend_i CUDA_IFACE = make_iface();

ng_status create(ng_backend **out, int device) {
  int count = 0;
  CU_CHECK("cuda backend", cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return ng__err(NG_ERR_INVALID_ARG,
                   "cuda backend: device %d does not exist (%d CUDA devices visible); pick one in "
                   "[0, %d) or check CUDA_VISIBLE_DEVICES",
                   device, count, count);
  CU_CHECK("cuda backend", cudaSetDevice(device));
  cuda_ctx *c = static_cast<cuda_ctx *>(ng__calloc(1, sizeof(cuda_ctx), "CUDA backend context"));
  ng_backend *be = static_cast<ng_backend *>(ng__calloc(1, sizeof(ng_backend), "CUDA backend"));
  if (!c || !be) {
    free(c);
    free(be);
    return NG_ERR_NOMEM;
  }
  c->device = device;
  const char *graphs_env = getenv("NG_CUDA_GEMM_GRAPHS");
  c->gemm_graphs = !(graphs_env && strcmp(graphs_env, "0") == 0);
  be->iface = &CUDA_IFACE;
  be->ctx = c;
  ng_status st = NG_OK;
  cudaError_t err = cudaSuccess;
  cublasStatus_t bst = CUBLAS_STATUS_SUCCESS;
  const char *what = "";
  c->copy_ops_slot = -1;
  err = cudaStreamCreateWithFlags(&c->ops_stream, cudaStreamNonBlocking);
  for (int k = 0; k < NG_BACKEND_MARKS && err == cudaSuccess; k++)
    err = cudaStreamCreateWithFlags(&c->copy_stream[k], cudaStreamNonBlocking);
  c->stream = c->ops_stream;
  if (err != cudaSuccess)
    what = "cudaStreamCreateWithFlags";
  else if ((err = cudaMalloc(&c->d_res, NG_XENT_QUEUE * sizeof(xent_result))) != cudaSuccess ||
           (err = cudaMalloc(&c->d_unread_bad, sizeof(int))) != cudaSuccess)
    what = "cudaMalloc";
  else if ((err = cudaMemset(c->d_unread_bad, 0, sizeof(int))) != cudaSuccess)
    what = "cudaMemset";
  else if ((err = cudaMallocHost(&c->h_res, NG_XENT_QUEUE * sizeof(xent_result))) != cudaSuccess)
    what = "cudaMallocHost";
  for (int k = 0; k < NG_XENT_QUEUE && err == cudaSuccess; k++)
    if ((err = cudaEventCreateWithFlags(&c->xent_done[k], cudaEventDisableTiming)) != cudaSuccess)
      what = "cudaEventCreateWithFlags";
  for (int k = 0; k < NG_BACKEND_MARKS && err == cudaSuccess; k++)
    if ((err = cudaEventCreateWithFlags(&c->marks[k], cudaEventDisableTiming)) != cudaSuccess ||
        (err = cudaEventCreateWithFlags(&c->copied[k], cudaEventDisableTiming)) != cudaSuccess)
      what = "cudaEventCreateWithFlags";
  if (err != cudaSuccess) {
    st = cuda_err("cuda backend", what, err);
    goto fail;
  }
  /* fp32 stays fp32: the default math mode never uses TF32 tensor cores for cublasSgemm (only
   * CUBLAS_TF32_TENSOR_OP_MATH would), and atomics stay disallowed (the default), so products
   * are reproducible run to run on one stream. */
  if ((bst = cublasCreate(&c->blas)) != CUBLAS_STATUS_SUCCESS)
    what = "cublasCreate";
  else if ((bst = cublasSetStream(c->blas, c->ops_stream)) != CUBLAS_STATUS_SUCCESS)
    what = "cublasSetStream";
  else if ((bst = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
    what = "cublasSetMathMode";
  else if ((bst = cublasSetAtomicsMode(c->blas, CUBLAS_ATOMICS_NOT_ALLOWED)) !=
           CUBLAS_STATUS_SUCCESS)
    what = "cublasSetAtomicsMode";
  if (bst != CUBLAS_STATUS_SUCCESS) {
    st = blas_err("cuda backend", what, bst);
    goto fail;
  }
  *out = be;
  return NG_OK;
fail:
  release(c);
  free(be);
  return st;
}

} // namespace

extern "C" ng_status ng__backend_cuda_create(ng_backend **out, int device) {
  NG_CHECK(ng__bk_check_ptr("cuda backend", "out", out, true));
  *out = nullptr;
  return create(out, device);
}
