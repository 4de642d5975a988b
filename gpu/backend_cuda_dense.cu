/* The CUDA backend's dense ops: GEMM (cuBLAS, repeated calls replayed as CUDA graphs), add, bias
 * and activation forward and backward, dropout, with their kernels. The rules of the whole
 * backend are in backend_cuda_impl.h. */
#include "backend_cuda_impl.h"

#include <atomic>

namespace ng_cuda {

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

/* One warp per row (a grid with fewer warps than rows strides over them), V consecutive
 * columns per lane (V = 4: 16-byte accesses): no per-element division to find the column, which
 * held the flat form at 57% of HBM bandwidth on the H100 (W4's layer 0). */
template <int V>
__global__ void k_bias_act(float *__restrict__ x, const float *__restrict__ bias, int64_t rows,
                           int64_t cols, int64_t stride, bool relu) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
    float *row = x + r * stride;
    for (int64_t j = (int64_t)lane * V; j < cols; j += 32 * V) {
      float v[V], b[V];
      ld<V>(v, row + j);
      if (bias)
        ld<V>(b, bias + j);
#pragma unroll
      for (int u = 0; u < V; u++) {
        if (bias)
          v[u] = __fadd_rn(v[u], b[u]);
        if (relu) /* v < 0 ? 0 : v keeps NaN visible, as the CPU does */
          v[u] = v[u] < 0.0f ? 0.0f : v[u];
      }
      st<V>(row + j, v);
    }
  }
}

/* Blocks of warp-per-row kernels for `rows` rows, capped (the kernels stride over the rest). */
inline unsigned row_blocks(int64_t rows) {
  return (unsigned)NG_MAX((int64_t)1,
                          NG_MIN((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, (int64_t)kMaxGridX));
}

/* x [rows, cols] (rows `stride` floats apart) += bias, then ReLU when `relu`, on stream `st`. */
static void launch_bias_act(cudaStream_t st, float *x, const float *bias, int64_t rows,
                            int64_t cols, int64_t stride, bool relu) {
  if (cols % 4 == 0 && stride % 4 == 0 && aligned16(x) && (!bias || aligned16(bias)))
    k_bias_act<4><<<row_blocks(rows), kThreads, 0, st>>>(x, bias, rows, cols, stride, relu);
  else
    k_bias_act<1><<<row_blocks(rows), kThreads, 0, st>>>(x, bias, rows, cols, stride, relu);
}

__global__ void k_relu_bwd(float *grad, const float *y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    grad[i] = y[i] > 0.0f ? grad[i] : 0.0f;
}

/* The bias gradient in the chunked row order of NG_BIAS_CHUNK_ROWS (backend_impl.h), the CPU's
 * order, so that the sums agree bit for bit. Pass 1: block (k, y) takes chunk k of the rows and
 * the 32 columns of tile y. Its warps load the chunk's rows into shared memory (a row's 32
 * columns are one warp's coalesced access; every load of the block is independent, so many are
 * in flight), and with RELU apply the mask on the way (grad = y > 0 ? grad : 0, written back),
 * so the gradient is read once; then one warp adds each column's values in row order. Loads
 * chained through a thread's own sum held the former form at 17-57% of HBM bandwidth. Pass 2
 * adds the chunk sums in chunk order the same way. A single chunk writes its sums directly: 0 + s
 * is s bit for bit, since a sum that starts from +0 is never -0. */
constexpr int kBiasTileCols = 32;
static_assert(NG_BIAS_CHUNK_ROWS % kWarpsPerBlock == 0, "a chunk's rows split over the warps");

template <bool RELU>
__global__ void k_bias_chunks(float *grad, const float *y, int64_t rows, int64_t cols,
                              float *part) {
  __shared__ float tile[NG_BIAS_CHUNK_ROWS][kBiasTileCols + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c = (int64_t)blockIdx.y * kBiasTileCols + lane;
  const int64_t r0 = (int64_t)blockIdx.x * NG_BIAS_CHUNK_ROWS;
  const int n = (int)NG_MIN((int64_t)NG_BIAS_CHUNK_ROWS, rows - r0);
  if (c < cols) {
#pragma unroll 8
    for (int r = warp; r < n; r += kWarpsPerBlock) {
      const int64_t i = (r0 + r) * cols + c;
      float g = grad[i];
      if (RELU) {
        g = y[i] > 0.0f ? g : 0.0f;
        grad[i] = g;
      }
      tile[r][lane] = g;
    }
  }
  __syncthreads();
  if (warp == 0 && c < cols) {
    float acc = 0.0f;
    for (int r = 0; r < n; r++)
      acc = __fadd_rn(acc, tile[r][lane]);
    part[(int64_t)blockIdx.x * cols + c] = acc;
  }
}

__global__ void k_bias_total(const float *part, int64_t chunks, int64_t cols, float *out) {
  __shared__ float tile[NG_BIAS_CHUNK_ROWS][kBiasTileCols + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c = (int64_t)blockIdx.x * kBiasTileCols + lane;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < chunks; k0 += NG_BIAS_CHUNK_ROWS) {
    const int n = (int)NG_MIN((int64_t)NG_BIAS_CHUNK_ROWS, chunks - k0);
    if (c < cols)
      for (int k = warp; k < n; k += kWarpsPerBlock)
        tile[k][lane] = part[(k0 + k) * cols + c];
    __syncthreads();
    if (warp == 0 && c < cols)
      for (int k = 0; k < n; k++)
        acc = __fadd_rn(acc, tile[k][lane]);
    __syncthreads();
  }
  if (warp == 0 && c < cols)
    out[c] = acc;
}

__global__ void k_dropout_fwd(float *x, uint8_t *mask, int64_t n, uint64_t key, uint32_t threshold,
                              float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const bool keep = ng_dropout_keep(key, (uint64_t)i, threshold);
    mask[i] = keep;
    x[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
  }
}

__global__ void k_dropout_bwd(float *grad, const uint8_t *mask, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    grad[i] = mask[i] ? __fmul_rn(grad[i], scale) : 0.0f;
}

/* ---- GEMM ---- */

/* The key of a call C = alpha op(A) op(B) + beta C (+ the epilogue's bias and activation),
 * zero-filled so that memcmp compares it whole. */
static gemm_key make_key(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, int64_t lda, const void *b, int64_t ldb, float beta,
                         void *c, int64_t ldc, const void *bias, gemm_epi epi) {
  gemm_key key = {};
  key.a = a;
  key.b = b;
  key.c = c;
  key.bias = bias;
  key.op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  key.op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  key.m = (int)m;
  key.n = (int)n;
  key.k = (int)k;
  key.lda = (int)lda;
  key.ldb = (int)ldb;
  key.ldc = (int)ldc;
  key.epi = epi;
  key.alpha = alpha;
  key.beta = beta;
  return key;
}

/* The stream and the cuBLAS handle of call `g` (gemm_key's `side`). */
static cudaStream_t key_stream(const cuda_ctx *ctx, const gemm_key *g) {
  return g->side ? ctx->side_stream : ctx->ops_stream;
}

static cublasHandle_t key_blas(const cuda_ctx *ctx, const gemm_key *g) {
  return g->side ? ctx->blas_side : ctx->blas;
}

/* cuBLAS is column-major: a row-major [r, c] matrix with leading dimension ld is its
 * column-major transpose, so C^T [n, m] = op(B)^T op(A)^T is computed with the operands swapped
 * and each keeps its own transpose flag. The product alone: the key's epilogue is not read. */
static ng_status sgemm(cuda_ctx *ctx, const gemm_key *g) {
  const cublasStatus_t st = cublasSgemm(
      key_blas(ctx, g), (cublasOperation_t)g->op_b, (cublasOperation_t)g->op_a, g->n, g->m, g->k,
      &g->alpha, static_cast<const float *>(g->b), g->ldb, static_cast<const float *>(g->a), g->lda,
      &g->beta, static_cast<float *>(g->c), g->ldc);
  if (st != CUBLAS_STATUS_SUCCESS)
    return blas_err("gemm", "cublasSgemm", st);
  return NG_OK;
}

/* The largest power of two up to 256 that divides the address (cuBLASLt's alignment
 * preference: an algorithm may assume what the preference allows). */
static uint32_t align_of(const void *p) {
  uint32_t a = 256;
  while (a > 4 && (uintptr_t)p % a != 0)
    a >>= 1;
  return a;
}

/* cuBLASLt's descriptors of one product with an epilogue (gemm_lt), in cublasSgemm's
 * column-major view (C^T = op(B)^T op(A)^T): Lt's A is our B and its B our A; `m` rows. */
struct lt_desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  lt_desc(const gemm_key *g, int m) {
    const cublasOperation_t ta = (cublasOperation_t)g->op_b, tb = (cublasOperation_t)g->op_a;
    const cublasLtEpilogue_t epi = g->epi == kEpiBias       ? CUBLASLT_EPILOGUE_BIAS
                                   : g->epi == kEpiBiasRelu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                            : CUBLASLT_EPILOGUE_RELU;
    if (!created(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), (void **)&op))
      return;
    set([&] {
      return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    });
    set([&] {
      return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    });
    set([&] {
      return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    });
    if (g->bias)
      set([&] {
        return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                              sizeof g->bias);
      });
    if (st == CUBLAS_STATUS_SUCCESS)
      created(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta == CUBLAS_OP_N ? g->n : g->k,
                                         ta == CUBLAS_OP_N ? g->k : g->n, g->ldb),
              (void **)&la);
    if (st == CUBLAS_STATUS_SUCCESS)
      created(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb == CUBLAS_OP_N ? g->k : m,
                                         tb == CUBLAS_OP_N ? m : g->k, g->lda),
              (void **)&lb);
    if (st == CUBLAS_STATUS_SUCCESS)
      created(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, g->n, m, g->ldc), (void **)&lc);
  }
  /* A creation's status: on failure the handle is not left for the destructor. */
  bool created(cublasStatus_t s, void **handle) {
    st = s;
    if (s != CUBLAS_STATUS_SUCCESS)
      *handle = nullptr;
    return s == CUBLAS_STATUS_SUCCESS;
  }
  /* The next call, made only while every one before it succeeded. */
  template <class F> void set(F f) {
    if (st == CUBLAS_STATUS_SUCCESS)
      st = f();
  }
  ~lt_desc() {
    if (lc)
      (void)cublasLtMatrixLayoutDestroy(lc);
    if (lb)
      (void)cublasLtMatrixLayoutDestroy(lb);
    if (la)
      (void)cublasLtMatrixLayoutDestroy(la);
    if (op)
      (void)cublasLtMatmulDescDestroy(op);
  }
};

/* cuBLASLt's first algorithm for the shape class of `g` (rows rounded up to a power of two,
 * since each iteration's mini-batch has its own row count and a query costs tens of
 * microseconds of host time), with no workspace and no split-K reduction (each element in one
 * pass: reproducible run to run), for the operands' alignments. Remembered per class: the
 * choice, and so the bits, depend on the class alone. `*fresh` holds the choice when the query
 * failed for a reason other than cuBLASLt having no algorithm: it is not remembered. */
static const lt_choice *lt_choose(cuda_ctx *ctx, const gemm_key *g, lt_choice *fresh) {
  lt_shape sh = {};
  /* A transposed A's rows are its leading dimension's columns: their class is their count. */
  int64_t mc = 1;
  while (mc < g->m)
    mc <<= 1;
  sh.m_class = g->op_a == CUBLAS_OP_N ? (int)NG_MIN(mc, (int64_t)INT32_MAX) : g->m;
  sh.n = g->n;
  sh.k = g->k;
  sh.lda = g->lda;
  sh.ldb = g->ldb;
  sh.ldc = g->ldc;
  sh.op_a = g->op_a;
  sh.op_b = g->op_b;
  sh.epi = g->epi;
  sh.beta_nz = g->beta != 0.0f;
  sh.align_a = align_of(g->b);
  sh.align_b = align_of(g->a);
  sh.align_c = align_of(g->c);
  sh.align_bias = g->bias ? align_of(g->bias) : 256;
  const uint64_t now = ++ctx->gemm_clock;
  lt_choice *victim = &ctx->lt_choices[0];
  for (lt_choice &e : ctx->lt_choices) {
    if (e.used && memcmp(&e.shape, &sh, sizeof sh) == 0) {
      e.used = now;
      return &e;
    }
    if (e.used < victim->used)
      victim = &e;
  }
  lt_desc d(g, sh.m_class);
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t res = {};
  int found = 0;
  const uint64_t zero_ws = 0;
  const uint32_t no_split = CUBLASLT_REDUCTION_SCHEME_NONE;
  if (d.st == CUBLAS_STATUS_SUCCESS)
    d.created(cublasLtMatmulPreferenceCreate(&pref), (void **)&pref);
  auto pref_set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void *v, size_t bytes) {
    d.set([&] { return cublasLtMatmulPreferenceSetAttribute(pref, attr, v, bytes); });
  };
  pref_set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &zero_ws, sizeof zero_ws);
  pref_set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_split, sizeof no_split);
  pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &sh.align_a, sizeof sh.align_a);
  pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &sh.align_b, sizeof sh.align_b);
  pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &sh.align_c, sizeof sh.align_c);
  pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &sh.align_c, sizeof sh.align_c);
  d.set([&] {
    return cublasLtMatmulAlgoGetHeuristic(ctx->blas_lt, d.op, d.la, d.lb, d.lc, d.lc, pref, 1, &res,
                                          &found);
  });
  if (pref)
    (void)cublasLtMatmulPreferenceDestroy(pref);
  const lt_choice c = {sh, res.algo, d.st == CUBLAS_STATUS_SUCCESS && found > 0, now};
  if (d.st != CUBLAS_STATUS_SUCCESS && d.st != CUBLAS_STATUS_NOT_SUPPORTED) {
    *fresh = c; /* a transient failure (memory, internal): asked again next time */
    return fresh;
  }
  *victim = c;
  return victim;
}

/* Products gemm_bias_act ran through cuBLASLt's epilogue (ng__cuda_lt_products). */
static std::atomic<int64_t> g_lt_products{0};

/* The rows from which a product takes its epilogue through cuBLASLt. Measured on W4 (H100,
 * fp32): layer 0's 183 k rows ran as fast as cublasSgemm's and saved the bias pass (0.08 ms of a
 * 1.75 ms step), while layer 1's 16 k rows ran 0.03 ms slower than cublasSgemm's (no split-K)
 * and saved 0.017 ms. With TF32, cuBLASLt's kernels cost the step 8%: two passes there. */
constexpr int64_t kLtMinRows = 65536;

int64_t lt_min_rows_default(void) {
  const char *env = getenv("NG_CUDA_LT_MIN_ROWS");
  const long long v = env ? atoll(env) : 0;
  return v > 0 ? (int64_t)v : kLtMinRows;
}

/* The product with an epilogue (bias, ReLU) through cuBLASLt (lt_choose's algorithm) in fp32
 * from lt_min_rows rows with a bias 16-byte aligned (cuBLASLt has no preference for the bias's
 * alignment, and kernels that load it 16 bytes at a time fault on less); otherwise, or where
 * cuBLASLt offers no algorithm or refuses the class's for these rows (NOT_SUPPORTED),
 * cublasSgemm and the bias and activation kernel in two passes. */
static ng_status gemm_lt(cuda_ctx *ctx, const gemm_key *g) {
  lt_choice fresh;
  const bool lt = !ctx->tf32 && g->m >= ctx->lt_min_rows && (!g->bias || align_of(g->bias) >= 16);
  const lt_choice *c = lt ? lt_choose(ctx, g, &fresh) : nullptr;
  if (c && c->found) {
    lt_desc d(g, g->m);
    d.set([&] {
      return cublasLtMatmul(ctx->blas_lt, d.op, &g->alpha, g->b, d.la, g->a, d.lb, &g->beta, g->c,
                            d.lc, g->c, d.lc, &c->algo, nullptr, 0, key_stream(ctx, g));
    });
    if (d.st == CUBLAS_STATUS_SUCCESS) {
      g_lt_products.fetch_add(1, std::memory_order_relaxed);
      return NG_OK;
    }
    if (d.st != CUBLAS_STATUS_NOT_SUPPORTED)
      return blas_err("gemm_bias_act", "cublasLtMatmul", d.st);
  }
  NG_CHECK(sgemm(ctx, g));
  launch_bias_act(key_stream(ctx, g), static_cast<float *>(g->c),
                  static_cast<const float *>(g->bias), g->m, g->n, g->ldc, g->epi != kEpiBias);
  LAUNCH_CHECK("gemm_bias_act");
  return NG_OK;
}

/* One call as its key says: with an epilogue through gemm_lt, else the product alone. */
ng_status gemm_plain(cuda_ctx *ctx, const gemm_key *g) {
  return g->epi != kEpiNone ? gemm_lt(ctx, g) : sgemm(ctx, g);
}

/* Captures the call `g` on its stream (the ops or the side stream, whose handle is bound to it)
 * into an executable graph; NULL when the capture fails (the call then did not run). */
cudaGraphExec_t gemm_capture(cuda_ctx *ctx, const gemm_key *g) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStream_t s = key_stream(ctx, g);
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  const ng_status st = gemm_plain(ctx, g);
  cudaError_t err = cudaStreamEndCapture(s, &graph);
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
  CU_CHECK("gemm", cudaGraphLaunch(hit->exec, key_stream(ctx, g)));
  return NG_OK;
}

/* gemm and gemm_bias_act: cuBLAS's 32-bit sizes, the empty product, the graph cache. */
static ng_status gemm_run(ng_backend *be, const char *name, bool trans_a, bool trans_b, int64_t m,
                          int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                          const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                          const float *bias, gemm_epi epi) {
  /* cuBLAS takes 32-bit sizes (the front has checked the rest). */
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
      ldc > INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "%s: m=%lld n=%lld k=%lld (lda %lld, ldb %lld, ldc %lld) exceed cuBLAS's "
                   "32-bit sizes; split the product",
                   name, (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldb,
                   (long long)ldc);
  NG_CHECK(use(be, name));
  cuda_ctx *ctx = ctx_of(be);
  if (ctx->copy_ops_slot >= 0)
    return ng__err(NG_ERR_STATE, "%s: no GEMM between copy_ops_begin and copy_ops_end (slot %d)",
                   name, ctx->copy_ops_slot);
  if (k == 0) { /* an empty product: C = beta * C, where beta == 0 does not read C */
    k_scale_c<<<grid_1d(m * n), kThreads, 0, ctx->stream>>>(c, m, n, ldc, beta);
    if (epi != kEpiNone)
      launch_bias_act(ctx->stream, c, bias, m, n, ldc, epi != kEpiBias);
    LAUNCH_CHECK(name);
    return NG_OK;
  }
  gemm_key key =
      make_key(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, epi);
  key.side = ctx->side_stream && ctx->stream == ctx->side_stream;
  if (!ctx->gemm_graphs)
    return gemm_plain(ctx, &key);
  return gemm_replay(ctx, &key);
}

ng_status cuda_gemm(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc) {
  return gemm_run(be, "gemm", trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  nullptr, kEpiNone);
}

ng_status cuda_gemm_bias_act(ng_backend *be, bool trans_a, bool trans_b, int64_t m, int64_t n,
                             int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc, const float *bias,
                             ng_activation act) {
  const bool relu = act == NG_ACT_RELU;
  const gemm_epi epi = bias ? (relu ? kEpiBiasRelu : kEpiBias) : (relu ? kEpiRelu : kEpiNone);
  return gemm_run(be, "gemm_bias_act", trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                  ldc, bias, epi);
}

/* TF32 rounds the GEMMs' inputs to 10 mantissa bits on the tensor cores and accumulates in fp32;
 * cuBLAS picks the same kernel for the same shape, so results stay reproducible run to run. The
 * GEMM graphs captured before a change hold the old mode's kernels: they are dropped (a graph
 * destroyed while it runs is freed when it completes). */
ng_status cuda_set_precision(ng_backend *be, ng_precision p) {
  if (p != NG_PRECISION_FP32 && p != NG_PRECISION_TF32)
    return ng__err(NG_ERR_INVALID_ARG, "set_precision: unknown precision %d", (int)p);
  NG_CHECK(use(be, "set_precision"));
  cuda_ctx *c = ctx_of(be);
  const cublasMath_t mode = blas_math(p == NG_PRECISION_TF32), was = blas_math(c->tf32);
  cublasStatus_t st = cublasSetMathMode(c->blas, mode);
  if (st == CUBLAS_STATUS_SUCCESS && c->blas_side &&
      (st = cublasSetMathMode(c->blas_side, mode)) != CUBLAS_STATUS_SUCCESS)
    (void)cublasSetMathMode(c->blas, was); /* both handles stay in the old mode */
  if (st != CUBLAS_STATUS_SUCCESS)
    return blas_err("set_precision", "cublasSetMathMode", st);
  c->tf32 = p == NG_PRECISION_TF32;
  for (int k = 0; k < kGemmGraphs; k++) {
    if (c->gemms[k].exec)
      CU_CHECK("set_precision", cudaGraphExecDestroy(c->gemms[k].exec));
    memset(&c->gemms[k], 0, sizeof c->gemms[k]);
  }
  return NG_OK;
}

/* ---- warming the GEMMs up ---- */

/* cuBLAS's first GEMM in a process sets the library up (150 ms on an H100, 85 ms with eager
 * module loading), and the first call of each kernel a shape picks loads it (6 to 40 ms each):
 * about 0.2 s that fell in W4's first iteration (eval/results/2026-11-26-h100-deep.md). A thread
 * makes those calls on the backend's own handle and ops stream while the caller sets the rest
 * up (the hot tier, registration, the sampler's topology): the handle's workspace and the loaded
 * kernels are then the ones the training GEMMs use. No other thread uses the handle before
 * warm_wait (the op's contract). The shapes should be the real ones: cuBLAS picks kernels by
 * shape, so a shape shrunk to fit the scratch may load other kernels than training's. */
static void *warm_main(void *arg) {
  cuda_ctx *c = static_cast<cuda_ctx *>(arg);
  (void)pthread_setname_np(pthread_self(), "ng-gemm-warm");
  if (cudaSetDevice(c->device) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  float *buf = c->warm_buf;
  for (int i = 0; i < c->n_warm; i++) {
    const ng_gemm_shape *w = &c->warm[i];
    const int64_t m = w->m, n = w->n, k = w->k;
    gemm_key g =
        make_key(w->trans_a, w->trans_b, m, n, k, 1.0f, buf, w->trans_a ? m : k, buf + m * k,
                 w->trans_b ? k : n, 0.0f, buf + m * k + k * n, n, nullptr, kEpiNone);
    if (gemm_plain(c, &g) != NG_OK)
      break;
    /* A layer's forward product from lt_min_rows rows runs with the bias and ReLU in its
     * epilogue (gemm_bias_act): other kernels, loaded by their own first call. */
    if (!w->trans_a && !w->trans_b && m >= c->lt_min_rows) {
      g.epi = kEpiBiasRelu;
      g.bias = g.b;
      if (gemm_plain(c, &g) != NG_OK)
        break;
    }
  }
  (void)cudaStreamSynchronize(c->ops_stream);
  (void)cudaGetLastError();
  return nullptr;
}

void cuda_warm_start(ng_backend *be, const ng_gemm_shape *shapes, int n, float *scratch,
                     size_t bytes) {
  cuda_ctx *c = ctx_of(be);
  const char *env = getenv("NG_CUDA_WARM"); /* "0": off, to measure what it saves */
  if ((env && strcmp(env, "0") == 0) || c->warm_running || n <= 0 || !shapes || !scratch ||
      use(be, "warm_start") != NG_OK)
    return;
  const int64_t cap = (int64_t)(bytes / sizeof(float));
  c->n_warm = NG_MIN(n, NG_WARM_SHAPES);
  for (int i = 0; i < c->n_warm; i++) {
    ng_gemm_shape *w = &c->warm[i];
    *w = shapes[i];
    int64_t *d[3] = {&w->m, &w->n, &w->k};
    for (int j = 0; j < 3; j++)
      *d[j] = NG_MIN(NG_MAX(*d[j], (int64_t)1), (int64_t)INT32_MAX);
    /* The largest extent halved until A, B and C fit the scratch together (in double: the
     * extents may be up to 2^31 each). */
    auto floats = [](const ng_gemm_shape *g) {
      return (double)g->m * (double)g->k + (double)g->k * (double)g->n +
             (double)g->m * (double)g->n;
    };
    while (floats(w) > (double)cap && (w->m > 1 || w->n > 1 || w->k > 1)) {
      int64_t *big = w->m >= w->n && w->m >= w->k ? &w->m : w->n >= w->k ? &w->n : &w->k;
      *big = (*big + 1) / 2;
    }
    if (floats(w) > (double)cap) {
      c->n_warm = i;
      break;
    }
  }
  c->warm_buf = scratch;
  /* Zeros, so that no GEMM reads garbage (a NaN costs nothing, but a tidy warm-up is easier
   * to reason about under compute-sanitizer's initcheck). */
  if (c->n_warm == 0 || cudaMemsetAsync(scratch, 0, bytes, c->ops_stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  c->warm_running = pthread_create(&c->warm_thread, NULL, warm_main, c) == 0;
}

void cuda_warm_join(cuda_ctx *c) {
  if (!c || !c->warm_running)
    return;
  (void)pthread_join(c->warm_thread, NULL);
  c->warm_running = false;
  c->warm_buf = nullptr;
}

void cuda_warm_wait(ng_backend *be) {
  cuda_warm_join(ctx_of(be));
}

/* ---- elementwise ops ---- */

ng_status cuda_add(ng_backend *be, float *y, const float *x, int64_t n) {
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
  NG_CHECK(use(be, "bias_act_fwd"));
  cudaStream_t st = ctx_of(be)->stream;
  const bool relu = act == NG_ACT_RELU;
  launch_bias_act(st, x, bias, rows, cols, cols, relu);
  LAUNCH_CHECK("bias_act_fwd");
  return NG_OK;
}

ng_status cuda_bias_act_bwd(ng_backend *be, float *grad, const float *y, float *grad_bias,
                            int64_t rows, int64_t cols, ng_activation act) {
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
  const int64_t tiles = (cols + kBiasTileCols - 1) / kBiasTileCols;
  if (tiles > 65535 || chunks > kMaxGridX) /* the grid's y and x dimensions */
    return ng__err(NG_ERR_UNSUPPORTED,
                   "bias_act_bwd: %lld rows x %lld columns; at most %lld x %lld", (long long)rows,
                   (long long)cols, (long long)kMaxGridX * NG_BIAS_CHUNK_ROWS,
                   (long long)kBiasTileCols * 65535);
  const dim3 grid((unsigned)chunks, (unsigned)tiles);
  if (relu)
    k_bias_chunks<true><<<grid, kThreads, 0, c->stream>>>(grad, y, rows, cols, part);
  else
    k_bias_chunks<false><<<grid, kThreads, 0, c->stream>>>(grad, y, rows, cols, part);
  LAUNCH_CHECK("bias_act_bwd");
  if (chunks > 1) {
    k_bias_total<<<(unsigned)tiles, kThreads, 0, c->stream>>>(part, chunks, cols, grad_bias);
    LAUNCH_CHECK("bias_act_bwd");
  }
  return NG_OK;
}

ng_status cuda_dropout_fwd(ng_backend *be, float *x, uint8_t *mask, int64_t n, float p,
                           uint64_t seed) {
  NG_CHECK(use(be, "dropout_fwd"));
  /* The key and threshold come from core/rng.h itself; the per-element rule is its copy. */
  k_dropout_fwd<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(
      x, mask, n, ng_mix64(seed), ng_dropout_threshold(p), 1.0f / (1.0f - p));
  LAUNCH_CHECK("dropout_fwd");
  return NG_OK;
}

ng_status cuda_dropout_bwd(ng_backend *be, float *grad, const uint8_t *mask, int64_t n, float p) {
  NG_CHECK(use(be, "dropout_bwd"));
  k_dropout_bwd<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(grad, mask, n, 1.0f / (1.0f - p));
  LAUNCH_CHECK("dropout_bwd");
  return NG_OK;
}

} // namespace ng_cuda

extern "C" int64_t ng__cuda_lt_products(void) {
  return ng_cuda::g_lt_products.load(std::memory_order_relaxed);
}
