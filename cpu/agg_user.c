/* User aggregators on the CPU: the definition's functions (ng_aggregator_def) called per
 * element. Rows are walked neighbour by neighbour, each row's features contiguous, so that the
 * memory access is that of the built-in kernels; the arithmetic is the user's, through function
 * pointers; a row's accumulate runs as one call of the definition's row function, whose loop the
 * compiler inlines and may vectorise where NG_AGGREGATOR_SOURCE expanded it (docs/aggregators.md
 * gives the cost). */
#include "kernels_impl.h"
#include "rng.h"

#include <string.h>

/* accumulate over the n features of one neighbour row: the definition's row function when it
 * has one (one call a row), else one call a feature. */
static inline void accumulate_row(const ng_aggregator_def *u, float *st, const float *row, float w,
                                  int64_t n) {
  if (u->accumulate_row) {
    u->accumulate_row(st, u->state_size, row, w, n);
  } else {
    const int64_t S = u->state_size;
    for (int64_t c = 0; c < n; c++)
      u->accumulate(st + c * S, row[c], w);
  }
}

/* The state of destination d over its edges into st [dim, S] (dropout when ag->drop_p > 0). */
static void reduce_row(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                       int32_t d, float *restrict st) {
  const ng_aggregator_def *u = ag->user;
  const int64_t S = u->state_size;
  for (int64_t c = 0; c < dim; c++)
    u->init(st + c * S);
  const bool drop = ag->drop_p > 0.0f;
  const uint32_t threshold = drop ? ng_dropout_threshold(ag->drop_p) : 0;
  const float scale = drop ? 1.0f / (1.0f - ag->drop_p) : 1.0f;
  for (int32_t e = blk->indptr[d]; e < blk->indptr[d + 1]; e++) {
    const int64_t r = blk->indices[e];
    const float *restrict row = src + r * dim;
    const float w = ag->weighted ? blk->edge_w[e] : 1.0f;
    if (drop) {
      const uint64_t base = (uint64_t)r * (uint64_t)dim;
      for (int64_t c = 0; c < dim; c++)
        u->accumulate(st + c * S,
                      ng_dropped(row[c], ag->drop_key, base + (uint64_t)c, threshold, scale), w);
    } else {
      accumulate_row(u, st, row, w, dim);
    }
  }
}

void ng__cpu_uagg_fwd_rows(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                           int32_t d0, int32_t d1, float *out) {
  const ng_aggregator_def *u = ag->user;
  const int64_t S = u->state_size;
  float st[256 * NG_AGG_STATE_MAX];
  /* Features in tiles of 256, so that the state stays on the stack whatever dim is. */
  for (int32_t d = d0; d < d1; d++) {
    float *restrict o = out + (int64_t)d * dim;
    const int32_t deg = blk->indptr[d + 1] - blk->indptr[d];
    if (deg == 0) {
      memset(o, 0, (size_t)dim * sizeof(float));
      continue;
    }
    for (int64_t c0 = 0; c0 < dim; c0 += 256) {
      const int64_t n = NG_MIN(dim - c0, (int64_t)256);
      for (int64_t c = 0; c < n; c++)
        u->init(st + c * S);
      for (int32_t e = blk->indptr[d]; e < blk->indptr[d + 1]; e++) {
        const float *restrict row = src + (int64_t)blk->indices[e] * dim + c0;
        accumulate_row(u, st, row, ag->weighted ? blk->edge_w[e] : 1.0f, n);
      }
      for (int64_t c = 0; c < n; c++)
        o[c0 + c] = u->finalize(st + c * S, (float)deg);
    }
  }
}

void ng__cpu_uagg_partial_rows(const ng_aggr *ag, const ng_block *blk, const float *src,
                               int64_t dim, int32_t d0, int32_t d1, float *val) {
  const int64_t S = ag->user->state_size;
  for (int32_t d = d0; d < d1; d++)
    reduce_row(ag, blk, src, dim, d, val + (int64_t)d * dim * S);
}

void ng__cpu_uagg_merge_rows(const ng_aggr *ag, ng_pstate *acc, const ng_pstate *other, int32_t d0,
                             int32_t d1) {
  const ng_aggregator_def *u = ag->user;
  const int64_t S = u->state_size, dim = acc->dim;
  for (int32_t d = d0; d < d1; d++) {
    float *a = acc->val + (int64_t)d * dim * S;
    const float *o = other->val + (int64_t)d * dim * S;
    if (other->count[d] == 0) {
      /* nothing to merge */
    } else if (acc->count[d] == 0) {
      memcpy(a, o, (size_t)(dim * S) * sizeof(float));
    } else {
      for (int64_t c = 0; c < dim; c++)
        u->merge(a + c * S, o + c * S);
    }
    acc->count[d] += other->count[d];
  }
}

void ng__cpu_uagg_finalize_rows(const ng_aggr *ag, const ng_pstate *state, int32_t d0, int32_t d1,
                                float *dst) {
  const ng_aggregator_def *u = ag->user;
  const int64_t S = u->state_size, dim = state->dim;
  for (int32_t d = d0; d < d1; d++) {
    const float *v = state->val + (int64_t)d * dim * S;
    float *o = dst + (int64_t)d * dim;
    const int32_t cnt = state->count[d];
    for (int64_t c = 0; c < dim; c++)
      o[c] = cnt == 0 ? 0.0f : u->finalize(v + c * S, (float)cnt);
  }
}

void ng__cpu_uagg_bwd_dst_rows(const ng_aggr *ag, const ng_block *blk, const float *src,
                               const float *grad_dst, int64_t dim, int32_t d0, int32_t d1,
                               float *work) {
  const ng_aggregator_def *u = ag->user;
  const int64_t S = u->state_size;
  float st[256 * NG_AGG_STATE_MAX], y[256];
  for (int32_t d = d0; d < d1; d++) {
    const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
    const float deg = (float)(e1 - e0);
    const float *g = grad_dst + (int64_t)d * dim;
    if (u->linear) { /* the coefficient depends on the edge's weight and the degree only */
      for (int32_t e = e0; e < e1; e++) {
        const float a = ng__agg_linear_coef(u, ag->weighted ? blk->edge_w[e] : 1.0f, deg);
        float *wk = work + (int64_t)e * dim;
        for (int64_t c = 0; c < dim; c++)
          wk[c] = g[c] * a;
      }
      continue;
    }
    for (int64_t c0 = 0; c0 < dim; c0 += 256) {
      const int64_t n = NG_MIN(dim - c0, (int64_t)256);
      for (int64_t c = 0; c < n; c++)
        u->init(st + c * S);
      for (int32_t e = e0; e < e1; e++) {
        const float *row = src + (int64_t)blk->indices[e] * dim + c0;
        accumulate_row(u, st, row, ag->weighted ? blk->edge_w[e] : 1.0f, n);
      }
      for (int64_t c = 0; c < n; c++)
        y[c] = u->finalize(st + c * S, deg);
      for (int32_t e = e0; e < e1; e++) {
        const float *row = src + (int64_t)blk->indices[e] * dim + c0;
        const float w = ag->weighted ? blk->edge_w[e] : 1.0f;
        float *wk = work + (int64_t)e * dim + c0;
        for (int64_t c = 0; c < n; c++)
          wk[c] = g[c0 + c] * u->grad(st + c * S, deg, row[c], w, y[c]);
      }
    }
  }
}

void ng__cpu_uagg_bwd_src_rows(const ng_block *blk, const float *work, int64_t dim, int32_t s0,
                               int32_t s1, float *grad_src) {
  for (int32_t s = s0; s < s1; s++) {
    float *restrict o = grad_src + (int64_t)s * dim;
    for (int64_t c = 0; c < dim; c++)
      o[c] = 0.0f;
    for (int32_t t = blk->t_indptr[s]; t < blk->t_indptr[s + 1]; t++) {
      const float *restrict wk = work + (int64_t)blk->t_eid[t] * dim;
      for (int64_t c = 0; c < dim; c++)
        o[c] = o[c] + wk[c];
    }
  }
}
