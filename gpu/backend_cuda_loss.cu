/* The CUDA backend's loss and optimizer: the deferred cross-entropy (its queue of results and the
 * step guard) and the SGD and Adam steps, with their kernels. The rules of the whole backend are
 * in backend_cuda_impl.h. */
#include "backend_cuda_impl.h"

namespace ng_cuda {

/* ---- kernels: loss and optimizer ---- */

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

/* ---- loss and optimizer ---- */

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
  NG_CHECK(use(be, "opt_step"));
  if (hp->kind == NG_OPT_SGD) {
    k_sgd<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(
        param, grad, state1, n, hp->lr, hp->weight_decay, hp->momentum, ctx_of(be)->d_unread_bad);
    LAUNCH_CHECK("opt_step");
    return NG_OK;
  }
  /* Adam, the only other optimizer the front lets through; the CPU's constants, computed the same
   * way on the host. */
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

} // namespace ng_cuda
