/* The CUDA backend's attention (GAT; ops attn_fwd / attn_bwd of core/backend_impl.h), in the
 * operation order of cpu/attn.c: one thread per destination (forward), per destination and head
 * (backward, phase 1), per source and head (phase 2: each source sums its own terms, in the
 * transposed edge order, so no atomics) and per column (phase 3). The kernels favour being
 * obviously right over being fast: each thread walks its slots and columns serially. */
#include "backend_cuda_impl.h"

namespace ng_cuda {

namespace {

struct attn_dev {
  int heads;
  int64_t F; // head_dim
  float slope;
  bool mean;
  float drop_p;
  uint64_t key;
  uint32_t threshold;
  float scale;
};

__device__ inline float head_dot(const float *z, int64_t row, int k, const float *att,
                                 const attn_dev &a) {
  const int64_t KF = (int64_t)a.heads * a.F;
  const float *zr = z + row * KF + k * a.F, *w = att + k * a.F;
  float s = 0.0f;
  for (int64_t f = 0; f < a.F; f++)
    s += zr[f] * w[f];
  return s;
}

__device__ inline void slot_of(const ng_block &b, int32_t d, int64_t i, int32_t *src,
                               int64_t *slot) {
  if (i == 0) {
    *src = d;
    *slot = b.nnz + d;
  } else {
    const int64_t e = b.indptr[d] + i - 1;
    *src = b.indices[e];
    *slot = e;
  }
}

__device__ inline float dropped(const attn_dev &a, float x, int64_t slot, int k) {
  if (a.drop_p == 0.0f)
    return x;
  return ng_dropout_keep(a.key, (uint64_t)slot * (uint64_t)a.heads + (uint64_t)k, a.threshold)
             ? x * a.scale
             : 0.0f;
}

__device__ inline float grad_of(const attn_dev &a, const float *g, int32_t d, int k, int64_t f) {
  if (a.mean)
    return g[(int64_t)d * a.F + f] * (1.0f / (float)a.heads);
  return g[(int64_t)d * a.heads * a.F + k * a.F + f];
}

__global__ void k_attn_fwd(attn_dev a, ng_block b, const float *__restrict__ z,
                           const float *__restrict__ att_src, const float *__restrict__ att_dst,
                           float *__restrict__ alpha, float *__restrict__ out) {
  const int K = a.heads;
  const int64_t F = a.F, KF = (int64_t)K * F, out_cols = a.mean ? F : KF;
  for (int64_t dd = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; dd < b.n_dst;
       dd += (int64_t)gridDim.x * blockDim.x) {
    const int32_t d = (int32_t)dd;
    const int64_t n_slots = 1 + (int64_t)(b.indptr[d + 1] - b.indptr[d]);
    float *o = out + (int64_t)d * out_cols;
    for (int64_t f = 0; f < out_cols; f++)
      o[f] = 0.0f;
    for (int k = 0; k < K; k++) {
      const float sd = head_dot(z, d, k, att_dst, a);
      float m = -INFINITY;
      int32_t j;
      int64_t s;
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(b, d, i, &j, &s);
        float e = head_dot(z, j, k, att_src, a) + sd;
        e = e > 0.0f ? e : a.slope * e;
        alpha[s * K + k] = e;
        m = e > m ? e : m;
      }
      float sum = 0.0f;
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(b, d, i, &j, &s);
        const float x = expf(alpha[s * K + k] - m);
        alpha[s * K + k] = x;
        sum += x;
      }
      const float inv = 1.0f / sum;
      float *ok = o + (a.mean ? 0 : k * F);
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(b, d, i, &j, &s);
        const float al = alpha[s * K + k] * inv;
        alpha[s * K + k] = al;
        const float ad = dropped(a, al, s, k);
        const float *zj = z + (int64_t)j * KF + k * F;
        for (int64_t f = 0; f < F; f++)
          ok[f] += ad * zj[f];
      }
    }
    if (a.mean) {
      const float inv_k = 1.0f / (float)K;
      for (int64_t f = 0; f < F; f++)
        o[f] *= inv_k;
    }
  }
}

/* Phase 1: d(score) of each slot of destination d, head k, and d(s_dst). */
__global__ void k_attn_bwd_dst(attn_dev a, ng_block b, const float *__restrict__ z,
                               const float *__restrict__ att_src, const float *__restrict__ att_dst,
                               const float *__restrict__ alpha, const float *__restrict__ grad_out,
                               float *__restrict__ work) {
  const int K = a.heads;
  const int64_t F = a.F, KF = (int64_t)K * F;
  float *dpre = work, *dsd = work + (b.nnz + b.n_dst) * K;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < (int64_t)b.n_dst * K;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int32_t d = (int32_t)(t / K);
    const int k = (int)(t % K);
    const int64_t n_slots = 1 + (int64_t)(b.indptr[d + 1] - b.indptr[d]);
    int32_t j;
    int64_t s;
    float dot = 0.0f;
    for (int64_t i = 0; i < n_slots; i++) {
      slot_of(b, d, i, &j, &s);
      const float *zj = z + (int64_t)j * KF + k * F;
      float g = 0.0f;
      for (int64_t f = 0; f < F; f++)
        g += grad_of(a, grad_out, d, k, f) * zj[f];
      const float da = dropped(a, g, s, k);
      dpre[s * K + k] = da;
      dot += alpha[s * K + k] * da;
    }
    const float sd = head_dot(z, d, k, att_dst, a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n_slots; i++) {
      slot_of(b, d, i, &j, &s);
      const float de = alpha[s * K + k] * (dpre[s * K + k] - dot);
      const float pre = head_dot(z, j, k, att_src, a) + sd;
      const float dp = pre > 0.0f ? de : a.slope * de;
      dpre[s * K + k] = dp;
      sum += dp;
    }
    dsd[(int64_t)d * K + k] = sum;
  }
}

/* Phase 2: grad_z of source j, head k, from its self slot and its transposed edges. */
__global__ void k_attn_bwd_src(attn_dev a, ng_block b, const float *__restrict__ att_src,
                               const float *__restrict__ att_dst, const float *__restrict__ alpha,
                               const float *__restrict__ grad_out, float *__restrict__ work,
                               float *__restrict__ grad_z) {
  const int K = a.heads;
  const int64_t F = a.F, KF = (int64_t)K * F;
  const float *dpre = work, *dsd = work + (b.nnz + b.n_dst) * K;
  float *dss = work + (b.nnz + 2 * (int64_t)b.n_dst) * K;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < (int64_t)b.n_src * K;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int32_t j = (int32_t)(t / K);
    const int k = (int)(t % K);
    float *gk = grad_z + (int64_t)j * KF + k * F;
    for (int64_t f = 0; f < F; f++)
      gk[f] = 0.0f;
    const int64_t t0 = b.t_indptr[j], t1 = b.t_indptr[j + 1];
    float ds = 0.0f;
    for (int64_t u = j < b.n_dst ? t0 - 1 : t0; u < t1; u++) {
      const int32_t d = u < t0 ? j : b.t_dst[u];
      const int64_t s = u < t0 ? b.nnz + j : (int64_t)b.t_eid[u];
      const float ad = dropped(a, alpha[s * K + k], s, k);
      for (int64_t f = 0; f < F; f++)
        gk[f] += ad * grad_of(a, grad_out, d, k, f);
      ds += dpre[s * K + k];
    }
    dss[(int64_t)j * K + k] = ds;
    const float *as = att_src + k * F, *adv = att_dst + k * F;
    for (int64_t f = 0; f < F; f++)
      gk[f] += ds * as[f];
    if (j < b.n_dst) {
      const float dd = dsd[(int64_t)j * K + k];
      for (int64_t f = 0; f < F; f++)
        gk[f] += dd * adv[f];
    }
  }
}

/* Phase 3: the attention vectors' gradients, one column each, summed in row order. */
__global__ void k_attn_bwd_param(attn_dev a, ng_block b, const float *__restrict__ z,
                                 const float *__restrict__ work, float *__restrict__ g_src,
                                 float *__restrict__ g_dst) {
  const int K = a.heads;
  const int64_t F = a.F, KF = (int64_t)K * F;
  const float *dsd = work + (b.nnz + b.n_dst) * K;
  const float *dss = work + (b.nnz + 2 * (int64_t)b.n_dst) * K;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < KF;
       c += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = c / F;
    float gs = 0.0f, gd = 0.0f;
    for (int32_t r = 0; r < b.n_src; r++)
      gs += dss[(int64_t)r * K + k] * z[(int64_t)r * KF + c];
    for (int32_t r = 0; r < b.n_dst; r++)
      gd += dsd[(int64_t)r * K + k] * z[(int64_t)r * KF + c];
    g_src[c] = gs;
    g_dst[c] = gd;
  }
}

attn_dev dev_of(const ng_attn *at) {
  attn_dev a;
  a.heads = at->heads;
  a.F = at->head_dim;
  a.slope = at->slope;
  a.mean = at->mean_heads;
  a.drop_p = at->drop_p;
  a.key = at->drop_key;
  a.threshold = ng_dropout_threshold(at->drop_p);
  a.scale = 1.0f / (1.0f - at->drop_p);
  return a;
}

__device__ inline float row_dot(const float *zr, int k, const float *att, int64_t F) {
  const float *w = att + k * F, *r = zr + k * F;
  float s = 0.0f;
  for (int64_t f = 0; f < F; f++)
    s += r[f] * w[f];
  return s;
}

__device__ inline float leaky_of(float x, float slope) {
  return x > 0.0f ? x : slope * x;
}

/* Online-softmax partial states (cpu/attn.c's ng__attn_state_rows, same order): one thread per
 * destination and head. */
__global__ void k_attn_state(attn_dev a, ng_block b, const float *__restrict__ z_src,
                             const float *__restrict__ z_dst, const float *__restrict__ att_src,
                             const float *__restrict__ att_dst, bool self, float *state) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= (int64_t)b.n_dst * a.heads)
    return;
  const int32_t d = (int32_t)(t / a.heads);
  const int k = (int)(t % a.heads);
  const int64_t F = a.F, KF = (int64_t)a.heads * F;
  const int64_t e0 = b.indptr[d], e1 = b.indptr[d + 1];
  const float *zd = z_dst + (int64_t)d * KF;
  float *st = state + (int64_t)d * a.heads * (F + 2) + k * (F + 2);
  const float sd = row_dot(zd, k, att_dst, F);
  float m = -INFINITY;
  if (self)
    m = leaky_of(row_dot(zd, k, att_src, F) + sd, a.slope);
  for (int64_t e = e0; e < e1; e++) {
    const float x =
        leaky_of(row_dot(z_src + (int64_t)b.indices[e] * KF, k, att_src, F) + sd, a.slope);
    m = x > m ? x : m;
  }
  float *v = st + 2;
  for (int64_t f = 0; f < F; f++)
    v[f] = 0.0f;
  float sum = 0.0f;
  for (int64_t i = self ? -1 : 0; i < e1 - e0; i++) {
    const float *zj = i < 0 ? zd : z_src + (int64_t)b.indices[e0 + i] * KF;
    const float w = expf(leaky_of(row_dot(zj, k, att_src, F) + sd, a.slope) - m);
    sum += w;
    for (int64_t f = 0; f < F; f++)
      v[f] += w * zj[k * F + f];
  }
  st[0] = m;
  st[1] = sum;
}

/* Merge and finalize (ng__attn_merge_rows): one thread per destination. */
__global__ void k_attn_merge(attn_dev a, int32_t n_dst, float *acc, const float *other,
                             float *out) {
  const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= n_dst)
    return;
  const int64_t F = a.F, cols = (int64_t)a.heads * (F + 2);
  const int64_t out_cols = a.mean ? F : (int64_t)a.heads * F;
  float *o = out ? out + d * out_cols : nullptr;
  if (o)
    for (int64_t f = 0; f < out_cols; f++)
      o[f] = 0.0f;
  for (int k = 0; k < a.heads; k++) {
    float *x = acc + d * cols + k * (F + 2);
    if (other) {
      const float *y = other + d * cols + k * (F + 2);
      const float m = x[0] > y[0] ? x[0] : y[0];
      if (m != -INFINITY) {
        const float cx = x[0] == -INFINITY ? 0.0f : expf(x[0] - m);
        const float cy = y[0] == -INFINITY ? 0.0f : expf(y[0] - m);
        x[0] = m;
        x[1] = x[1] * cx + y[1] * cy;
        for (int64_t f = 0; f < F; f++)
          x[2 + f] = x[2 + f] * cx + y[2 + f] * cy;
      }
    }
    if (o) {
      const float inv = x[1] > 0.0f ? 1.0f / x[1] : 0.0f;
      float *ok = o + (a.mean ? 0 : k * F);
      for (int64_t f = 0; f < F; f++)
        ok[f] += x[2 + f] * inv;
    }
  }
  if (o && a.mean) {
    const float inv_k = 1.0f / (float)a.heads;
    for (int64_t f = 0; f < F; f++)
      o[f] *= inv_k;
  }
}

} // namespace

ng_status cuda_attn_state(ng_backend *be, const ng_attn *at, const ng_block *blk,
                          const float *z_src, const float *z_dst, const float *att_src,
                          const float *att_dst, bool self, float *state) {
  NG_CHECK(use(be, "attn_state"));
  if (blk->n_dst == 0)
    return NG_OK;
  k_attn_state<<<grid_1d((int64_t)blk->n_dst * at->heads), kThreads, 0, ctx_of(be)->stream>>>(
      dev_of(at), *blk, z_src, z_dst, att_src, att_dst, self, state);
  LAUNCH_CHECK("attn_state");
  return NG_OK;
}

ng_status cuda_attn_merge(ng_backend *be, const ng_attn *at, int32_t n_dst, float *acc,
                          const float *other, float *out) {
  NG_CHECK(use(be, "attn_merge"));
  if (n_dst == 0)
    return NG_OK;
  k_attn_merge<<<grid_1d(n_dst), kThreads, 0, ctx_of(be)->stream>>>(dev_of(at), n_dst, acc, other,
                                                                    out);
  LAUNCH_CHECK("attn_merge");
  return NG_OK;
}

ng_status cuda_attn_fwd(ng_backend *be, const ng_attn *at, const ng_block *blk, const float *z,
                        const float *att_src, const float *att_dst, float *alpha, float *out) {
  NG_CHECK(use(be, "attn_fwd"));
  cudaStream_t s = ctx_of(be)->stream;
  k_attn_fwd<<<grid_1d(blk->n_dst), kThreads, 0, s>>>(dev_of(at), *blk, z, att_src, att_dst, alpha,
                                                      out);
  LAUNCH_CHECK("attn_fwd");
  return NG_OK;
}

ng_status cuda_attn_bwd(ng_backend *be, const ng_attn *at, const ng_block *blk, const float *z,
                        const float *att_src, const float *att_dst, const float *alpha,
                        const float *grad_out, float *work, float *grad_z, float *grad_att_src,
                        float *grad_att_dst) {
  NG_CHECK(use(be, "attn_bwd"));
  cudaStream_t s = ctx_of(be)->stream;
  const attn_dev a = dev_of(at);
  if (blk->n_dst > 0) {
    k_attn_bwd_dst<<<grid_1d((int64_t)blk->n_dst * at->heads), kThreads, 0, s>>>(
        a, *blk, z, att_src, att_dst, alpha, grad_out, work);
    LAUNCH_CHECK("attn_bwd");
  }
  if (blk->n_src > 0) {
    k_attn_bwd_src<<<grid_1d((int64_t)blk->n_src * at->heads), kThreads, 0, s>>>(
        a, *blk, att_src, att_dst, alpha, grad_out, work, grad_z);
    LAUNCH_CHECK("attn_bwd");
  }
  k_attn_bwd_param<<<grid_1d((int64_t)at->heads * at->head_dim), kThreads, 0, s>>>(
      a, *blk, z, work, grad_att_src, grad_att_dst);
  LAUNCH_CHECK("attn_bwd");
  return NG_OK;
}

} // namespace ng_cuda
