/* GAT's attention on the CPU (see attn_impl.h and ng_attn in core/backend_impl.h). A
 * destination's slots are its self loop first and then its edges in edge order; every sum runs
 * in that order, so the softmax is deterministic without atomics. */
#include "attn_impl.h"

#include "rng.h"

#include <math.h>
#include <string.h>

/* z[row, head k] . att[k] in column order. */
static float head_dot(const float *z, int64_t row, int k, const float *att, const ng_attn *at) {
  const int64_t F = at->head_dim, KF = (int64_t)at->heads * F;
  const float *zr = z + row * KF + k * F, *a = att + k * F;
  float s = 0.0f;
  for (int64_t f = 0; f < F; f++)
    s += zr[f] * a[f];
  return s;
}

static float leaky(float x, float slope) {
  return x > 0.0f ? x : slope * x;
}

/* The source row of slot i of destination d (i = 0 is the self loop) and the slot's index in
 * alpha. */
static void slot_of(const ng_block *blk, int32_t d, int64_t i, int32_t *src, int64_t *slot) {
  if (i == 0) {
    *src = d;
    *slot = blk->nnz + d;
  } else {
    int64_t e = blk->indptr[d] + i - 1;
    *src = blk->indices[e];
    *slot = e;
  }
}

/* Attention dropout of coefficient (slot, k): the coefficient as the weighted sum uses it. */
static float dropped_alpha(const ng_attn *at, float a, int64_t slot, int k, uint32_t thr,
                           float scale) {
  if (at->drop_p == 0.0f)
    return a;
  return ng_dropped(a, at->drop_key, (uint64_t)slot * (uint64_t)at->heads + (uint64_t)k, thr,
                    scale);
}

void ng__attn_fwd_rows(const ng_attn *at, const ng_block *blk, const float *z, const float *att_src,
                       const float *att_dst, float *alpha, float *out, int32_t d0, int32_t d1) {
  const int K = at->heads;
  const int64_t F = at->head_dim, KF = (int64_t)K * F, out_cols = at->mean_heads ? F : KF;
  const uint32_t thr = ng_dropout_threshold(at->drop_p);
  const float scale = 1.0f / (1.0f - at->drop_p);
  for (int32_t d = d0; d < d1; d++) {
    const int64_t n_slots = 1 + (int64_t)(blk->indptr[d + 1] - blk->indptr[d]);
    float *o = out + (int64_t)d * out_cols;
    memset(o, 0, (size_t)out_cols * sizeof *o);
    for (int k = 0; k < K; k++) {
      const float sd = head_dot(z, d, k, att_dst, at);
      float m = -INFINITY;
      int32_t j;
      int64_t s;
      /* alpha holds the scores, then exp(score - max), then the coefficients. */
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(blk, d, i, &j, &s);
        float e = leaky(head_dot(z, j, k, att_src, at) + sd, at->slope);
        alpha[s * K + k] = e;
        m = e > m ? e : m;
      }
      float sum = 0.0f;
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(blk, d, i, &j, &s);
        float x = expf(alpha[s * K + k] - m);
        alpha[s * K + k] = x;
        sum += x;
      }
      const float inv = 1.0f / sum;
      float *ok = o + (at->mean_heads ? 0 : k * F);
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(blk, d, i, &j, &s);
        float a = alpha[s * K + k] * inv;
        alpha[s * K + k] = a;
        float ad = dropped_alpha(at, a, s, k, thr, scale);
        const float *zj = z + (int64_t)j * KF + k * F;
        for (int64_t f = 0; f < F; f++)
          ok[f] += ad * zj[f];
      }
    }
    if (at->mean_heads) {
      const float inv_k = 1.0f / (float)K;
      for (int64_t f = 0; f < F; f++)
        o[f] *= inv_k;
    }
  }
}

/* The gradient reaching head k of destination d's output. */
static float grad_of(const ng_attn *at, const float *grad_out, int32_t d, int k, int64_t f) {
  const int64_t F = at->head_dim;
  if (at->mean_heads)
    return grad_out[(int64_t)d * F + f] * (1.0f / (float)at->heads);
  return grad_out[(int64_t)d * at->heads * F + k * F + f];
}

void ng__attn_bwd_dst_rows(const ng_attn *at, const ng_block *blk, const float *z,
                           const float *att_src, const float *att_dst, const float *alpha,
                           const float *grad_out, float *work, int32_t d0, int32_t d1) {
  const int K = at->heads;
  const int64_t F = at->head_dim, KF = (int64_t)K * F;
  const uint32_t thr = ng_dropout_threshold(at->drop_p);
  const float scale = 1.0f / (1.0f - at->drop_p);
  float *dpre = work, *dsd = work + (blk->nnz + blk->n_dst) * K;
  for (int32_t d = d0; d < d1; d++) {
    const int64_t n_slots = 1 + (int64_t)(blk->indptr[d + 1] - blk->indptr[d]);
    for (int k = 0; k < K; k++) {
      int32_t j;
      int64_t s;
      /* dpre first holds d(alpha) of each slot. */
      float dot = 0.0f;
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(blk, d, i, &j, &s);
        const float *zj = z + (int64_t)j * KF + k * F;
        float g = 0.0f;
        for (int64_t f = 0; f < F; f++)
          g += grad_of(at, grad_out, d, k, f) * zj[f];
        float da = dropped_alpha(at, g, s, k, thr, scale);
        dpre[s * K + k] = da;
        dot += alpha[s * K + k] * da;
      }
      const float sd = head_dot(z, d, k, att_dst, at);
      float sum = 0.0f;
      for (int64_t i = 0; i < n_slots; i++) {
        slot_of(blk, d, i, &j, &s);
        float de = alpha[s * K + k] * (dpre[s * K + k] - dot);
        float pre = head_dot(z, j, k, att_src, at) + sd;
        float dp = pre > 0.0f ? de : at->slope * de;
        dpre[s * K + k] = dp;
        sum += dp;
      }
      dsd[(int64_t)d * K + k] = sum;
    }
  }
}

void ng__attn_bwd_src_rows(const ng_attn *at, const ng_block *blk, const float *att_src,
                           const float *att_dst, const float *alpha, const float *grad_out,
                           float *work, float *grad_z, int32_t s0, int32_t s1) {
  const int K = at->heads;
  const int64_t F = at->head_dim, KF = (int64_t)K * F;
  const uint32_t thr = ng_dropout_threshold(at->drop_p);
  const float scale = 1.0f / (1.0f - at->drop_p);
  const float *dpre = work, *dsd = work + (blk->nnz + blk->n_dst) * K;
  float *dss = work + (blk->nnz + 2 * (int64_t)blk->n_dst) * K;
  for (int32_t j = s0; j < s1; j++) {
    float *gz = grad_z + (int64_t)j * KF;
    memset(gz, 0, (size_t)KF * sizeof *gz);
    const int64_t t0 = blk->t_indptr[j], t1 = blk->t_indptr[j + 1];
    for (int k = 0; k < K; k++) {
      float *gk = gz + k * F;
      float ds = 0.0f;
      /* Its self slot (a destination's own row), then its edges in transposed order. */
      for (int64_t t = j < blk->n_dst ? t0 - 1 : t0; t < t1; t++) {
        int32_t d = t < t0 ? j : blk->t_dst[t];
        int64_t s = t < t0 ? blk->nnz + j : (int64_t)blk->t_eid[t];
        float ad = dropped_alpha(at, alpha[s * K + k], s, k, thr, scale);
        for (int64_t f = 0; f < F; f++)
          gk[f] += ad * grad_of(at, grad_out, d, k, f);
        ds += dpre[s * K + k];
      }
      dss[(int64_t)j * K + k] = ds;
      const float *as = att_src + k * F, *ad = att_dst + k * F;
      for (int64_t f = 0; f < F; f++)
        gk[f] += ds * as[f];
      if (j < blk->n_dst) {
        const float dd = dsd[(int64_t)j * K + k];
        for (int64_t f = 0; f < F; f++)
          gk[f] += dd * ad[f];
      }
    }
  }
}

void ng__attn_bwd_param_cols(const ng_attn *at, const ng_block *blk, const float *z,
                             const float *work, float *grad_att_src, float *grad_att_dst,
                             int64_t c0, int64_t c1) {
  const int K = at->heads;
  const int64_t F = at->head_dim, KF = (int64_t)K * F;
  const float *dsd = work + (blk->nnz + blk->n_dst) * K;
  const float *dss = work + (blk->nnz + 2 * (int64_t)blk->n_dst) * K;
  for (int64_t c = c0; c < c1; c++) {
    const int64_t k = c / F;
    float gs = 0.0f, gd = 0.0f;
    for (int32_t r = 0; r < blk->n_src; r++)
      gs += dss[(int64_t)r * K + k] * z[(int64_t)r * KF + c];
    for (int32_t r = 0; r < blk->n_dst; r++)
      gd += dsd[(int64_t)r * K + k] * z[(int64_t)r * KF + c];
    grad_att_src[c] = gs;
    grad_att_dst[c] = gd;
  }
}

/* ---- online-softmax partial states (inference: attention aggregated near the data) ---- */

/* z[row, head k] . att[k] of a row given by its pointer. */
static float row_dot(const float *zr, int k, const float *att, int64_t F) {
  const float *a = att + k * F, *r = zr + k * F;
  float s = 0.0f;
  for (int64_t f = 0; f < F; f++)
    s += r[f] * a[f];
  return s;
}

void ng__attn_state_rows(const ng_attn *at, const ng_block *blk, const float *z_src,
                         const float *z_dst, const float *att_src, const float *att_dst, bool self,
                         float *state, int32_t d0, int32_t d1) {
  const int K = at->heads;
  const int64_t F = at->head_dim, KF = (int64_t)K * F, cols = ng_attn_state_cols(at);
  for (int32_t d = d0; d < d1; d++) {
    const int64_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
    const float *zd = z_dst + (int64_t)d * KF;
    for (int k = 0; k < K; k++) {
      float *st = state + (int64_t)d * cols + k * (F + 2);
      const float sd = row_dot(zd, k, att_dst, F);
      /* Two passes, as attn_fwd: the max, then the exponentials and the weighted sum. */
      float m = -INFINITY;
      if (self)
        m = leaky(row_dot(zd, k, att_src, F) + sd, at->slope);
      for (int64_t e = e0; e < e1; e++) {
        const float x =
            leaky(row_dot(z_src + (int64_t)blk->indices[e] * KF, k, att_src, F) + sd, at->slope);
        m = x > m ? x : m;
      }
      float *v = st + 2;
      memset(v, 0, (size_t)F * sizeof *v);
      float sum = 0.0f;
      for (int64_t i = self ? -1 : 0; i < e1 - e0; i++) {
        const float *zj = i < 0 ? zd : z_src + (int64_t)blk->indices[e0 + i] * KF;
        const float w = expf(leaky(row_dot(zj, k, att_src, F) + sd, at->slope) - m);
        sum += w;
        for (int64_t f = 0; f < F; f++)
          v[f] += w * zj[k * F + f];
      }
      st[0] = m;
      st[1] = sum;
    }
  }
}

void ng__attn_merge_rows(const ng_attn *at, float *acc, const float *other, float *out, int32_t d0,
                         int32_t d1) {
  const int K = at->heads;
  const int64_t F = at->head_dim, cols = ng_attn_state_cols(at);
  const int64_t out_cols = at->mean_heads ? F : (int64_t)K * F;
  for (int32_t d = d0; d < d1; d++) {
    float *o = out ? out + (int64_t)d * out_cols : NULL;
    if (o)
      memset(o, 0, (size_t)out_cols * sizeof *o);
    for (int k = 0; k < K; k++) {
      float *a = acc + (int64_t)d * cols + k * (F + 2);
      if (other) {
        const float *b = other + (int64_t)d * cols + k * (F + 2);
        const float m = a[0] > b[0] ? a[0] : b[0];
        if (m != -INFINITY) { /* both empty: acc stays empty */
          const float ca = a[0] == -INFINITY ? 0.0f : expf(a[0] - m);
          const float cb = b[0] == -INFINITY ? 0.0f : expf(b[0] - m);
          a[0] = m;
          a[1] = a[1] * ca + b[1] * cb;
          for (int64_t f = 0; f < F; f++)
            a[2 + f] = a[2 + f] * ca + b[2 + f] * cb;
        }
      }
      if (o) {
        const float inv = a[1] > 0.0f ? 1.0f / a[1] : 0.0f;
        float *ok = o + (at->mean_heads ? 0 : k * F);
        for (int64_t f = 0; f < F; f++)
          ok[f] += a[2 + f] * inv;
      }
    }
    if (o && at->mean_heads) {
      const float inv_k = 1.0f / (float)K;
      for (int64_t f = 0; f < F; f++)
        o[f] *= inv_k;
    }
  }
}
