/* The CPU kernels over bf16 feature tables (NG_PRECISION_BF16): each element is converted to
 * fp32 where it is read (exactly, core/bf16.h) and then goes through the fp32 kernels'
 * operation order (kernels_impl.h), so a reduction over a bf16 table gives the bits of the fp32
 * kernels over the converted table, on every path that reads rows. */

/* As in kernels_cpu.c: every multiply and add rounded separately, never fused. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels_impl.h"

#include "bf16.h"
#include "rng.h"

#include <string.h>

/* Rows ahead to prefetch: about 4 KiB in flight, as the fp32 kernels. */
static int64_t prefetch_distance(int64_t dim) {
  const int64_t rows = 4096 / (dim * (int64_t)sizeof(uint16_t) + 1);
  return NG_MAX(2, NG_MIN(16, rows));
}

static void prefetch_row(const uint16_t *row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 32)
    __builtin_prefetch(row + j, 0, 2);
  __builtin_prefetch(row + dim - 1, 0, 2);
}

void ng__cpu_gather_rows_bf16(uint16_t *restrict dst, const uint16_t *restrict table,
                              const int64_t *ids, int64_t n, int64_t dim) {
  if (dim <= 0)
    return;
  const int64_t pf = prefetch_distance(dim);
  for (int64_t i = 0; i < n; i++) {
    if (i + pf < n)
      prefetch_row(table + ids[i + pf] * dim, dim);
    memcpy(dst + i * dim, table + ids[i] * dim, (size_t)dim * sizeof(uint16_t));
  }
}

void ng__cpu_drop_row_bf16(float *restrict dst, const uint16_t *restrict src, int64_t row,
                           int64_t dim, float p, uint64_t key) {
  if (p == 0.0f) {
#pragma omp simd
    for (int64_t c = 0; c < dim; c++)
      dst[c] = ng_bf16_to_f32(src[c]);
    return;
  }
  const uint32_t threshold = ng_dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  const uint64_t base = (uint64_t)row * (uint64_t)dim;
  for (int64_t c = 0; c < dim; c++)
    dst[c] = ng_dropped(ng_bf16_to_f32(src[c]), key, base + (uint64_t)c, threshold, scale);
}

/* Destination d's bare SUM (weighted or not), without dropout. */
static inline __attribute__((always_inline)) void sum_row(const ng_aggr *ag, const ng_block *blk,
                                                          const uint16_t *src, int64_t dim,
                                                          int64_t pf, int32_t d,
                                                          float *restrict o) {
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
#pragma omp simd
  for (int64_t j = 0; j < dim; j++)
    o[j] = 0.0f;
  for (int32_t e = e0; e < e1; e++) {
    if (e + pf < blk->nnz)
      prefetch_row(src + (int64_t)blk->indices[e + pf] * dim, dim);
    const uint16_t *restrict row = src + (int64_t)blk->indices[e] * dim;
    if (ag->weighted) {
      const float w = blk->edge_w[e];
#pragma omp simd
      for (int64_t j = 0; j < dim; j++)
        o[j] = o[j] + w * ng_bf16_to_f32(row[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < dim; j++)
        o[j] = o[j] + ng_bf16_to_f32(row[j]);
    }
  }
}

/* Destination d's MAX (is_max) or MIN: the first neighbour's value, then strictly better ones;
 * no neighbour gives 0. */
static inline __attribute__((always_inline)) void best_row(bool is_max, const ng_block *blk,
                                                           const uint16_t *src, int64_t dim,
                                                           int64_t pf, int32_t d,
                                                           float *restrict o) {
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
  if (e0 == e1) {
#pragma omp simd
    for (int64_t j = 0; j < dim; j++)
      o[j] = 0.0f;
    return;
  }
  const uint16_t *restrict first = src + (int64_t)blk->indices[e0] * dim;
#pragma omp simd
  for (int64_t j = 0; j < dim; j++)
    o[j] = ng_bf16_to_f32(first[j]);
  for (int32_t e = e0 + 1; e < e1; e++) {
    if (e + pf < blk->nnz)
      prefetch_row(src + (int64_t)blk->indices[e + pf] * dim, dim);
    const uint16_t *restrict row = src + (int64_t)blk->indices[e] * dim;
#pragma omp simd
    for (int64_t j = 0; j < dim; j++) {
      const float x = ng_bf16_to_f32(row[j]);
      const bool win = is_max ? x > o[j] : x < o[j];
      o[j] = win ? x : o[j];
    }
  }
}

/* With input dropout: the scalar loop of aggr_partial_dropped (kernels_cpu.c) on converted
 * values. */
static void dropped_row(const ng_aggr *ag, const ng_block *blk, const uint16_t *src, int64_t dim,
                        int32_t d, float *restrict o) {
  const uint32_t threshold = ng_dropout_threshold(ag->drop_p);
  const float scale = 1.0f / (1.0f - ag->drop_p);
  const uint64_t key = ag->drop_key;
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
  if (ag->reduce == NG_REDUCE_SUM || e0 == e1)
    memset(o, 0, (size_t)dim * sizeof(float));
  for (int32_t e = e0; e < e1; e++) {
    const int64_t r = blk->indices[e];
    const uint16_t *row = src + r * dim;
    const uint64_t base = (uint64_t)r * (uint64_t)dim;
    if (ag->reduce == NG_REDUCE_SUM) {
      const float w = ag->weighted ? blk->edge_w[e] : 1.0f;
      for (int64_t j = 0; j < dim; j++) {
        const float x =
            ng_dropped(ng_bf16_to_f32(row[j]), key, base + (uint64_t)j, threshold, scale);
        o[j] = ag->weighted ? o[j] + w * x : o[j] + x;
      }
    } else {
      const bool is_max = ag->reduce == NG_REDUCE_MAX;
      for (int64_t j = 0; j < dim; j++) {
        const float x =
            ng_dropped(ng_bf16_to_f32(row[j]), key, base + (uint64_t)j, threshold, scale);
        if (e == e0 || (is_max ? x > o[j] : x < o[j]))
          o[j] = x;
      }
    }
  }
}

/* One clone per instruction set, picked when the library loads: the row loops vectorise to the
 * CPU's widest vectors. Every element's operations are the same in each clone (no fused
 * multiply-add, see the top of the file), so the clones give the same bits. */
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) &&                \
    !defined(__SANITIZE_THREAD__)
#define NG_BF16_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NG_BF16_CLONES
#endif

NG_BF16_CLONES
void ng__cpu_aggr_partial_rows_bf16(const ng_aggr *bare, const ng_block *blk, const uint16_t *src,
                                    int64_t dim, int32_t d0, int32_t d1, ng_pstate *state) {
  for (int32_t d = d0; d < d1; d++)
    state->count[d] = blk->indptr[d + 1] - blk->indptr[d];
  if (dim <= 0)
    return;
  const int64_t pf = prefetch_distance(dim);
  for (int32_t d = d0; d < d1; d++) {
    float *o = state->val + (int64_t)d * dim;
    if (bare->drop_p > 0.0f)
      dropped_row(bare, blk, src, dim, d, o);
    else if (bare->reduce == NG_REDUCE_SUM)
      sum_row(bare, blk, src, dim, pf, d, o);
    else
      best_row(bare->reduce == NG_REDUCE_MAX, blk, src, dim, pf, d, o);
  }
}
