/* The CUDA backend's internal interface: what its files share (backend_cuda.cu: lifetime,
 * memory, copies, zero-copy and the ops table; backend_cuda_aggr.cu: gathers and aggregation;
 * backend_cuda_dense.cu: GEMM and the elementwise ops; backend_cuda_loss.cu: the loss and the
 * optimizer; backend_cuda_link.cu: link prediction's pair scores). The backend is split by op
 * family, as ggml splits its CUDA backend, so that each file holds one family's kernels beside the
 * host functions that launch them. Only nvcc reads this header; the rest of neargnn sees
 * gpu/ng_cuda.h.
 *
 * Determinism: every output element is computed by one thread in a fixed order (no
 * floating-point atomics), and reductions across threads use fixed trees, so results are
 * bit-identical run to run. The elementwise and aggregation kernels also perform the CPU
 * backend's operations in the CPU's order with every multiply and add rounded separately
 * (__fmul_rn / __fadd_rn stop nvcc from fusing them into FMAs), which makes them agree with the
 * CPU bit for bit; GEMM (cuBLAS) and the cross-entropy's sums agree within fp32 rounding.
 *
 * Arguments are checked before any op here runs, by the checked front every backend shares
 * (core/backend_check.c), with the CPU backend's messages: counts, shapes, pointers and enums,
 * and empty work never reaches an op. The block arrays live on the device, so the front does
 * not read their contents (indptr endpoints, index ranges), and xent checks its labels on the
 * device. What the ops here still check is the CUDA backend's own: cuBLAS's 32-bit sizes, the
 * state of the copy queues and the timing events. */
#ifndef NG_BACKEND_CUDA_IMPL_H
#define NG_BACKEND_CUDA_IMPL_H

#include "ng_cuda.h"

#include "backend_impl.h"
#include "rng.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <type_traits>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace ng_cuda {

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

/* What a GEMM's epilogue adds to the product (gemm_bias_act): nothing (a cublasSgemm call), the
 * bias, the bias and ReLU, ReLU alone (cuBLASLt). */
enum gemm_epi { kEpiNone = 0, kEpiBias, kEpiBiasRelu, kEpiRelu };

/* A cuBLAS call, exactly: the GEMM graph cache's key (no padding, compared with memcmp). `side`:
 * the call runs on the side stream with its handle (1) or on the ops stream with `blas` (0); a
 * graph captured on one is replayed only there, where the handle's workspace it captured is
 * never in use by another stream at the same time. */
struct gemm_key {
  const void *a, *b;
  void *c;
  const void *bias; // kEpiBias, kEpiBiasRelu: [n]
  int op_a, op_b, m, n, k, lda, ldb, ldc, epi, side;
  float alpha, beta;
};
static_assert(sizeof(gemm_key) == 80, "gemm_key is compared with memcmp: no padding");

constexpr int kGemmGraphs = 64; // GEMM calls remembered (graphs kept) at once

/* A cuBLASLt algorithm chosen for a product's shape class (gemm_lt): its rows rounded up to a
 * power of two, the rest exact, the operands' and the bias's alignments. No padding: compared
 * with memcmp. */
struct lt_shape {
  int m_class, n, k, lda, ldb, ldc, op_a, op_b, epi, beta_nz;
  uint32_t align_a, align_b, align_c, align_bias;
};
static_assert(sizeof(lt_shape) == 56, "lt_shape is compared with memcmp: no padding");

struct lt_choice {
  lt_shape shape;
  cublasLtMatmulAlgo_t algo;
  bool found;    // false: cuBLASLt offered none (two passes then)
  uint64_t used; // gemm_clock at its last use; 0: empty
};

constexpr int kLtChoices = 16;

struct gemm_graph {
  gemm_key key;
  cudaGraphExec_t exec; // the captured call, or NULL (seen once, or capture failed)
  bool plain;           // its capture failed: always a plain call
  uint64_t used;        // gemm_clock at its last use; 0: the entry is empty
};

struct cuda_ctx {
  int device;
  cudaStream_t stream;     // every op (the copy stream between copy_ops_begin/end, the side
                           // stream between side_begin/end)
  cudaStream_t ops_stream; // the ops' own stream (`blas` is bound to it)
  // The side queue (side_begin/end/join), made on first use: its stream, the events that fork
  // it from the ops stream and join it back, and a cuBLAS handle bound to it (a handle's
  // workspace must not serve two streams at once).
  cudaStream_t side_stream;
  cudaEvent_t side_fork, side_done;
  cublasHandle_t blas_side;
  bool side_off;      // NG_CUDA_SIDE=0, or the side queue could not be made: no side stream
  bool side_open;     // between side_begin and side_end
  bool side_pending;  // side ops ended and not yet joined
  int64_t side_forks; // side_begin calls that forked the side stream (ng__cuda_side_forks)
  cudaStream_t copy_stream[NG_BACKEND_MARKS]; // copy_h2d_async and copy ops, one per slot, so
                                              // that the slots' transfers overlap
  int copy_ops_slot;                          // the slot of copy_ops_begin, or -1
  cudaEvent_t marks[NG_BACKEND_MARKS];        // mark(), on `stream`
  cudaEvent_t copied[NG_BACKEND_MARKS];       // the last copy (or copy op) of each slot
  cudaEvent_t xent_done[NG_XENT_QUEUE];       // each queued xent result's copy to the host
  cudaEvent_t timing[NG_BACKEND_EVENTS];      // event_record's, created on first use
  int64_t xent_n[NG_XENT_QUEUE], xent_classes[NG_XENT_QUEUE]; // their shapes
  int64_t xent_head, xent_count; // the queue of results not yet read by xent_result
  cublasHandle_t blas;
  cublasLtHandle_t blas_lt; // gemm_bias_act's products with an epilogue
  lt_choice lt_choices[kLtChoices];
  int64_t lt_min_rows; // gemm_bias_act's rows from which cuBLASLt's epilogue runs (kLtMinRows)
  bool tf32;           // set_precision TF32: the cuBLASLt products too
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
  // warm_start's thread and what it runs (backend_cuda_dense.cu)
  pthread_t warm_thread;
  bool warm_running;
  ng_gemm_shape warm[NG_WARM_SHAPES]; // shrunk to fit warm_buf
  int n_warm;
  float *warm_buf;         // the caller's scratch
  struct nccl_state *nccl; // the device communicator (backend_cuda_nccl.cu), or NULL
};

/* cuBLAS's math mode for fp32 products: TF32 tensor cores (set_precision TF32) or the default,
 * which never uses them for cublasSgemm. */
inline cublasMath_t blas_math(bool tf32) {
  return tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

inline cuda_ctx *ctx_of(const ng_backend *be) {
  return static_cast<cuda_ctx *>(be->ctx);
}

/* ---- errors ---- */

inline ng_status cuda_err(const char *op, const char *what, cudaError_t err) {
  return ng__err(NG_ERR_CUDA, "%s: %s failed: %s (%s)", op, what, cudaGetErrorName(err),
                 cudaGetErrorString(err));
}

/* cuBLAS's allocation failure is the device's memory running out (cublasCreate's workspace, a
 * GEMM's): said so, with the class the other out-of-memory errors have. */
inline ng_status blas_err(const char *op, const char *what, cublasStatus_t st) {
  if (st == CUBLAS_STATUS_ALLOC_FAILED)
    return ng__err(NG_ERR_NOMEM,
                   "%s: %s failed: %s (out of device memory: free some, or use a smaller hot "
                   "tier or batch)",
                   op, what, cublasGetStatusName(st));
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
inline ng_status use(const ng_backend *be, const char *op) {
  CU_CHECK(op, cudaSetDevice(ctx_of(be)->device));
  return NG_OK;
}

/* ---- launch geometry ---- */

inline unsigned grid_1d(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return (unsigned)NG_MAX((int64_t)1, NG_MIN(blocks, kMaxGridX));
}

/* Warp-per-row kernels: x covers the rows, y the column tiles of 32 * V columns (a kernel
 * strides over tiles beyond kMaxGridY). */
inline dim3 grid_rows(int64_t rows, int64_t dim, int v) {
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

/* The chunks a warp takes of a row of `dim` values, V = v at a time: a whole row up to 8 chunks
 * (4 KiB with V 4). */
inline int chunks_per_warp(int64_t dim, int v) {
  const int64_t tiles = (dim + 32 * v - 1) / (32 * v);
  return tiles >= 8 ? 8 : tiles >= 4 ? 4 : tiles >= 2 ? 2 : 1;
}

/* The grid of a warp-per-row kernel covering T chunks of 32 * v columns per warp. */
inline dim3 grid_rows_chunks(int64_t rows, int64_t dim, int v, int t) {
  int64_t groups = (dim + 32 * v * t - 1) / (32 * v * t);
  return dim3((unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
              (unsigned)NG_MAX((int64_t)1, NG_MIN(groups, (int64_t)kMaxGridY)));
}

inline bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
/* Whether a table's rows can be loaded V = 4 values at a time (16 bytes of fp32, 8 of bf16). */
inline bool aligned_v4(const float *p) {
  return aligned16(p);
}
inline bool aligned_v4(const uint16_t *p) {
  return (reinterpret_cast<uintptr_t>(p) & 7u) == 0;
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

/* bf16 rows (NG_PRECISION_BF16): V values loaded at once (8 bytes for V 4) and converted to
 * fp32 exactly (the top half of each fp32's bits), so that the arithmetic after the load is the
 * fp32 kernels' on the converted table. Little-endian: value 0 is the low half of a word. */
template <int V> __device__ inline void ld(float *o, const uint16_t *p) {
  if constexpr (V == 4) {
    const uint2 t = *reinterpret_cast<const uint2 *>(p);
    o[0] = __uint_as_float(t.x << 16);
    o[1] = __uint_as_float(t.x & 0xffff0000u);
    o[2] = __uint_as_float(t.y << 16);
    o[3] = __uint_as_float(t.y & 0xffff0000u);
  } else {
    o[0] = __uint_as_float((uint32_t)*p << 16);
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

/* ---- the ops of each family, for the table (backend_cuda.cu) ---- */

/// backend_cuda_sample.cu: the device sampler.
ng_status cuda_sampler_create(ng_backend *be, const ng_csr *g, int lanes, ng_dev_sampler **out);
void cuda_sampler_destroy(ng_backend *be, ng_dev_sampler *s);
ng_status cuda_sampler_run(ng_backend *be, ng_dev_sampler *s, int lane, const ng_sampler_cfg *cfg,
                           const int64_t *targets, int32_t n, uint64_t seed, ng_minibatch *out,
                           void **host, size_t *host_cap);

/// backend_cuda.cu's fill, which the dense ops use too.
ng_status cuda_fill(ng_backend *be, float *x, int64_t n, float value);

/// backend_cuda.cu's page-locked host memory, which the device sampler's output uses too.
ng_status cuda_host_alloc(ng_backend *be, void **out, size_t bytes);
void cuda_host_free(ng_backend *be, void *ptr);

ng_status cuda_gather_rows(ng_backend *be, float *dst, const float *table, const int64_t *ids,
                           int64_t n, int64_t dim);
ng_status cuda_aggr_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                        const float *grad_dst, const int32_t *argbest, int64_t dim,
                        float *grad_src);
/// backend_cuda_uagg.cu: the gather-aggregate kernel template (agg_template.h) for the
/// built-ins (forward of every built-in, with max's and min's argbest when given; partial state,
/// fp32 and bf16 rows; merge and finalize) and for user aggregators (ng_aggr.user, compiled
/// with NVRTC on first use): the backend's aggr_fwd, aggr_partial (_bf16), pstate_merge and
/// pstate_finalize ops.
ng_status cuda_tmpl_fwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk, const float *src,
                        int64_t dim, float *dst, int32_t *argbest);
ng_status cuda_tmpl_partial(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                            const float *src, ng_pstate *state);
ng_status cuda_tmpl_partial_bf16(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                                 const uint16_t *src, ng_pstate *state);
ng_status cuda_tmpl_merge(ng_backend *be, const ng_aggr *ag, ng_pstate *acc,
                          const ng_pstate *other);
ng_status cuda_tmpl_finalize(ng_backend *be, const ng_aggr *ag, const ng_pstate *state, float *dst);
ng_status cuda_aggr_user_bwd(ng_backend *be, const ng_aggr *ag, const ng_block *blk,
                             const float *src, const float *grad_dst, int64_t dim, float *work,
                             float *grad_src);
/// backend_cuda_attn.cu: GAT's attention.
ng_status cuda_attn_state(ng_backend *be, const ng_attn *at, const ng_block *blk,
                          const float *z_src, const float *z_dst, const float *att_src,
                          const float *att_dst, bool self, float *state);
ng_status cuda_attn_merge(ng_backend *be, const ng_attn *at, int32_t n_dst, float *acc,
                          const float *other, float *out);
ng_status cuda_attn_fwd(ng_backend *be, const ng_attn *at, const ng_block *blk, const float *z,
                        const float *att_src, const float *att_dst, float *alpha, float *out);
ng_status cuda_attn_bwd(ng_backend *be, const ng_attn *at, const ng_block *blk, const float *z,
                        const float *att_src, const float *att_dst, const float *alpha,
                        const float *grad_out, float *work, float *grad_z, float *grad_att_src,
                        float *grad_att_dst);
ng_status cuda_scatter_rows(ng_backend *be, float *dst, const int32_t *pos, const float *table,
                            const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key);
ng_status cuda_add_self_loop(ng_backend *be, float *dst, const float *self_w, const float *rows,
                             int64_t n, int64_t dim);
/// The bf16-table twin of scatter_rows (NG_PRECISION_BF16): the same kernel with rows loaded as
/// bf16 and converted to fp32 as they are read.
ng_status cuda_scatter_rows_bf16(ng_backend *be, float *dst, const int32_t *pos,
                                 const uint16_t *table, const int64_t *ids, int64_t n, int64_t dim,
                                 float drop_p, uint64_t drop_key);
ng_status cuda_gemm(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc);
ng_status cuda_gemm_bias_act(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                             int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc, const float *bias,
                             ng_activation act);
ng_status cuda_set_precision(ng_backend *be, ng_precision p);
/// gemm_bias_act's row threshold for cuBLASLt's epilogue: kLtMinRows, or NG_CUDA_LT_MIN_ROWS
/// (tests run the model through the epilogue on small graphs with 1).
int64_t lt_min_rows_default(void);
void cuda_warm_start(ng_backend *be, const ng_gemm_shape *shapes, int n, float *scratch,
                     size_t bytes);
void cuda_warm_wait(ng_backend *be);
void cuda_warm_join(cuda_ctx *c);
ng_status cuda_add(ng_backend *be, float *y, const float *x, int64_t n);
ng_status cuda_bias_act_fwd(ng_backend *be, float *x, const float *bias, int64_t rows, int64_t cols,
                            ng_activation act);
ng_status cuda_bias_act_bwd(ng_backend *be, float *grad, const float *y, float *grad_bias,
                            int64_t rows, int64_t cols, ng_activation act);
ng_status cuda_dropout_fwd(ng_backend *be, float *x, uint8_t *mask, int64_t n, float p,
                           uint64_t seed);
ng_status cuda_dropout_bwd(ng_backend *be, float *grad, const uint8_t *mask, int64_t n, float p);
ng_status cuda_xent(ng_backend *be, const float *logits, const int32_t *labels, int64_t n,
                    int64_t classes, float *grad, double *loss, int64_t *correct);
ng_status cuda_xent_result(ng_backend *be, double *loss, int64_t *correct);
ng_status cuda_opt_step(ng_backend *be, const ng_opt_hp *hp, float *param, const float *grad,
                        float *state1, float *state2, int64_t n);
ng_status cuda_pair_dot(ng_backend *be, float *out, const float *h, const int32_t *u,
                        const int32_t *v, int64_t n, int64_t dim); // backend_cuda_link.cu
ng_status cuda_dist_id(ng_backend *be, void *id);
ng_status cuda_dist_init(ng_backend *be, const void *id, int rank, int ranks);
ng_status cuda_allreduce(ng_backend *be, float *x, int64_t n, float scale);
ng_status cuda_allreduce_time(ng_backend *be, double *ms, int64_t *count);
/// backend_cuda_peer.cu: the partitioned hot tier (gathers from the parts, CUDA IPC).
ng_status cuda_gather_parts(ng_backend *be, float *dst, const void *const *parts, int n_parts,
                            bool bf16, const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key);
ng_status cuda_ipc_export(ng_backend *be, const void *ptr, void *handle);
ng_status cuda_ipc_open(ng_backend *be, const void *handle, const char *peer_pci, void **ptr);
void cuda_ipc_close(ng_backend *be, void *ptr);
void nccl_release(cuda_ctx *c); // before the stream goes

} // namespace ng_cuda

#endif /* NG_BACKEND_CUDA_IMPL_H */
