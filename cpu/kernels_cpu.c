/* The CPU aggregation and gather kernels: the portable variant, the AVX2 and AVX-512 variants
 * (cpu/kernels_simd.h instantiated with target attributes, since the library is compiled for
 * x86-64-v2) and their run-time selection. */

/* Bit-identical variants need every multiply and add rounded separately: a fused multiply-add
 * in one variant and not in another would change results. GCC contracts a * b + c into an FMA
 * whenever the target has one (the AVX variants do), even across vector intrinsics. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels_impl.h"
#include "ng_cpu.h"

#include "rng.h"

#include <immintrin.h>
#include <string.h>

/* The prefetches' locality (__builtin_prefetch's third argument): 2, prefetcht1, fetches into
 * L2, not L1. A prefetch into L1 holds one of the core's few L1 miss buffers until its line
 * arrives, and with rows of 4 KB that number, not DRAM, capped a core's misses in flight; one
 * into L2 waits in L2's longer queue, and the row's loads then hit L2. On the H100 machine (W1,
 * 4 KB rows, 15 threads) CPU aggregation alone went from 89-92 to 97-105 GB/s, and partial mode
 * from 2,457 to 2,764 it/s (eval/results/HISTORY.md). */
#define NGK_PREFETCH_LOCALITY 2

/* How many rows ahead to prefetch: about 4 KiB in flight per thread, between 2 and 16 rows.
 * Rows are random in a table larger than the caches, so hardware prefetchers cannot guess them. */
static inline int64_t ngk_prefetch_distance(int64_t dim) {
  int64_t rows = 4096 / (dim * (int64_t)sizeof(float) + 1);
  return NG_MAX(2, NG_MIN(16, rows));
}

/* The coefficient of transposed edge (d, e) in a SUM backward (see kernels_impl.h). */
static inline float ngk_bwd_coef(const ng_aggr *ag, const ng_block *blk, int32_t d, int32_t e) {
  float c = ag->weighted ? blk->edge_w[e] : 1.0f;
  if (ag->mean)
    c = c * (1.0f / (float)(blk->indptr[d + 1] - blk->indptr[d]));
  return c;
}

/* Whether edge e is the first edge of destination d with source s: a destination that lists a
 * source twice took its max/min from the first occurrence (later ties never win), so only that
 * edge routes the gradient. */
static inline bool ngk_first_edge(const ng_block *blk, int32_t d, int32_t e, int32_t s) {
  for (int32_t e2 = blk->indptr[d]; e2 < e; e2++)
    if (blk->indices[e2] == s)
      return false;
  return true;
}

/* ---- the portable variant ----
 * `omp simd` lets the compiler use SSE on the row loops: every element is independent, so the
 * vector and scalar forms compute the same values. */

static void prefetch_row_generic(const float *row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 16)
    __builtin_prefetch(row + j, 0, NGK_PREFETCH_LOCALITY);
  __builtin_prefetch(row + dim - 1, 0, NGK_PREFETCH_LOCALITY);
}

static void gather_rows_generic(float *restrict dst, const float *restrict table,
                                const int64_t *ids, int64_t n, int64_t dim) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int64_t i = 0; i < n; i++) {
    if (i + pf < n)
      prefetch_row_generic(table + ids[i + pf] * dim, dim);
    memcpy(dst + i * dim, table + ids[i] * dim, (size_t)dim * sizeof(float));
  }
}

/* o = o + w * row (w == NULL: o = o + row). */
static inline void row_acc_generic(float *restrict o, const float *restrict row, const float *w,
                                   int64_t dim) {
  if (w) {
    const float wv = *w;
#pragma omp simd
    for (int64_t j = 0; j < dim; j++)
      o[j] = o[j] + wv * row[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < dim; j++)
      o[j] = o[j] + row[j];
  }
}

/* Destination d's sum into row o. */
static inline void sum_row_generic(const ng_aggr *ag, const ng_block *blk, const float *src,
                                   int64_t dim, int64_t pf, int32_t d, float *o) {
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
#pragma omp simd
  for (int64_t j = 0; j < dim; j++)
    o[j] = 0.0f;
  for (int32_t e = e0; e < e1; e++) {
    if (e + pf < blk->nnz)
      prefetch_row_generic(src + (int64_t)blk->indices[e + pf] * dim, dim);
    row_acc_generic(o, src + (int64_t)blk->indices[e] * dim, ag->weighted ? &blk->edge_w[e] : NULL,
                    dim);
  }
  if (ag->mean && e1 > e0) {
    const float c = (float)(e1 - e0);
#pragma omp simd
    for (int64_t j = 0; j < dim; j++)
      o[j] = o[j] / c;
  }
  if (ag->self_loop)
    row_acc_generic(o, src + (int64_t)d * dim, &blk->self_w[d], dim);
}

static void aggr_sum_generic(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                             int32_t d0, int32_t d1, float *out) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int32_t d = d0; d < d1; d++)
    sum_row_generic(ag, blk, src, dim, pf, d, out + (int64_t)d * dim);
}

/* aggr_sum with SSE streaming stores (see stage_sum in kernels_simd.h). */
static void stage_sum_generic(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                              int32_t d0, int32_t d1, float *out) {
  if (dim <= 0 || dim % 4 || dim > NG_STAGE_SUM_MAX || ((uintptr_t)out & 15)) {
    aggr_sum_generic(ag, blk, src, dim, d0, d1, out);
    return;
  }
  _Alignas(64) float row[NG_STAGE_SUM_MAX];
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int32_t d = d0; d < d1; d++) {
    sum_row_generic(ag, blk, src, dim, pf, d, row);
    float *o = out + (int64_t)d * dim;
    for (int64_t k = 0; k < dim; k += 4)
      _mm_stream_ps(o + k, _mm_load_ps(row + k));
  }
  _mm_sfence();
}

static void aggr_best_generic(bool is_max, const ng_block *blk, const float *src, int64_t dim,
                              int32_t d0, int32_t d1, float *out, int32_t *argbest) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int32_t d = d0; d < d1; d++) {
    const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
    float *restrict o = out + (int64_t)d * dim;
    int32_t *restrict a = argbest ? argbest + (int64_t)d * dim : NULL;
    if (e0 == e1) {
#pragma omp simd
      for (int64_t j = 0; j < dim; j++)
        o[j] = 0.0f;
    } else {
      memcpy(o, src + (int64_t)blk->indices[e0] * dim, (size_t)dim * sizeof(float));
    }
    if (a) {
      const int32_t first = e0 == e1 ? -1 : blk->indices[e0];
#pragma omp simd
      for (int64_t j = 0; j < dim; j++)
        a[j] = first;
    }
    for (int32_t e = e0 + 1; e < e1; e++) {
      if (e + pf < blk->nnz)
        prefetch_row_generic(src + (int64_t)blk->indices[e + pf] * dim, dim);
      const int32_t s = blk->indices[e];
      const float *restrict row = src + (int64_t)s * dim;
#pragma omp simd
      for (int64_t j = 0; j < dim; j++) {
        const bool win = is_max ? row[j] > o[j] : row[j] < o[j];
        if (win) {
          o[j] = row[j];
          if (a)
            a[j] = s;
        }
      }
    }
  }
}

static void aggr_sum_bwd_generic(const ng_aggr *ag, const ng_block *blk, const float *grad_dst,
                                 int64_t dim, int32_t s0, int32_t s1, float *grad_src) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int32_t s = s0; s < s1; s++) {
    float *o = grad_src + (int64_t)s * dim;
#pragma omp simd
    for (int64_t j = 0; j < dim; j++)
      o[j] = 0.0f;
    for (int32_t t = blk->t_indptr[s]; t < blk->t_indptr[s + 1]; t++) {
      if (t + pf < blk->nnz)
        prefetch_row_generic(grad_dst + (int64_t)blk->t_dst[t + pf] * dim, dim);
      const int32_t d = blk->t_dst[t];
      const float c = ngk_bwd_coef(ag, blk, d, blk->t_eid[t]);
      row_acc_generic(o, grad_dst + (int64_t)d * dim, &c, dim);
    }
    if (ag->self_loop && s < blk->n_dst)
      row_acc_generic(o, grad_dst + (int64_t)s * dim, &blk->self_w[s], dim);
  }
}

static void aggr_best_bwd_generic(const ng_block *blk, const float *grad_dst,
                                  const int32_t *argbest, int64_t dim, int32_t s0, int32_t s1,
                                  float *grad_src) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int32_t s = s0; s < s1; s++) {
    float *restrict o = grad_src + (int64_t)s * dim;
#pragma omp simd
    for (int64_t j = 0; j < dim; j++)
      o[j] = 0.0f;
    for (int32_t t = blk->t_indptr[s]; t < blk->t_indptr[s + 1]; t++) {
      if (t + pf < blk->nnz) {
        prefetch_row_generic(grad_dst + (int64_t)blk->t_dst[t + pf] * dim, dim);
        prefetch_row_generic((const float *)(argbest + (int64_t)blk->t_dst[t + pf] * dim), dim);
      }
      const int32_t d = blk->t_dst[t];
      if (!ngk_first_edge(blk, d, blk->t_eid[t], s))
        continue;
      const float *restrict g = grad_dst + (int64_t)d * dim;
      const int32_t *restrict a = argbest + (int64_t)d * dim;
#pragma omp simd
      for (int64_t j = 0; j < dim; j++)
        if (a[j] == s)
          o[j] = o[j] + g[j];
    }
  }
}

/* gather_rows with SSE streaming stores (see stage_rows in kernels_simd.h). */
static void stage_rows_generic(float *restrict dst, const float *restrict table, const int64_t *ids,
                               int64_t n, int64_t dim) {
  if (dim <= 0 || dim % 4 || ((uintptr_t)dst & 15)) {
    gather_rows_generic(dst, table, ids, n, dim);
    return;
  }
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int64_t i = 0; i < n; i++) {
    if (i + pf < n)
      prefetch_row_generic(table + ids[i + pf] * dim, dim);
    const float *row = table + ids[i] * dim;
    float *o = dst + i * dim;
    for (int64_t k = 0; k < dim; k += 4)
      _mm_stream_ps(o + k, _mm_loadu_ps(row + k));
  }
  _mm_sfence();
}

static const ng_cpu_kernels kernels_generic = {
    .isa = NG_CPU_ISA_GENERIC,
    .name = "generic",
    .gather_rows = gather_rows_generic,
    .stage_rows = stage_rows_generic,
    .aggr_sum = aggr_sum_generic,
    .stage_sum = stage_sum_generic,
    .aggr_best = aggr_best_generic,
    .aggr_sum_bwd = aggr_sum_bwd_generic,
    .aggr_best_bwd = aggr_best_bwd_generic,
};

/* ---- AVX2: 8 floats per vector, 16 registers ---- */

#define NGK_TARGET __attribute__((target("avx2")))
#define NGK_ISA NG_CPU_ISA_AVX2
#define NGK_ISA_NAME "avx2"
#define NGK_FN(name) name##_avx2
#define NGK_VL ((int64_t)8)
#define NGK_SUM_VECS 8
#define NGK_BEST_VECS 4
#define NGK_V __m256
#define NGK_VI __m256i
#define NGK_TM __m256i
#define NGK_CM __m256
#define NGK_TMASK(n)                                                                               \
  _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOADT(p, tm) _mm256_maskload_ps((p), (tm))
#define V_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V_STREAM(p, v) _mm256_stream_ps((p), (v))
#define V_STORET(p, tm, v) _mm256_maskstore_ps((p), (tm), (v))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_DIV(a, b) _mm256_div_ps((a), (b))
#define V_GT(a, b) _mm256_cmp_ps((a), (b), _CMP_GT_OQ)
#define V_LT(a, b) _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define V_BLEND(m, a, b) _mm256_blendv_ps((a), (b), (m))
#define V_MASKADD(acc, m, g) _mm256_blendv_ps((acc), _mm256_add_ps((acc), (g)), (m))
#define VI_SET1(x) _mm256_set1_epi32(x)
#define VI_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define VI_LOADT(p, tm) _mm256_maskload_epi32((p), (tm))
#define VI_STORE(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define VI_STORET(p, tm, v) _mm256_maskstore_epi32((p), (tm), (v))
#define VI_BLEND(m, a, b)                                                                          \
  _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), (m)))
#define VI_EQ(a, b) _mm256_castsi256_ps(_mm256_cmpeq_epi32((a), (b)))
#include "kernels_simd.h"

/* ---- AVX-512F: 16 floats per vector, 32 registers, mask registers for tails ---- */

#define NGK_TARGET __attribute__((target("avx512f")))
#define NGK_ISA NG_CPU_ISA_AVX512
#define NGK_ISA_NAME "avx512"
#define NGK_FN(name) name##_avx512
#define NGK_VL ((int64_t)16)
#define NGK_SUM_VECS 8
#define NGK_BEST_VECS 8
#define NGK_V __m512
#define NGK_VI __m512i
#define NGK_TM __mmask16
#define NGK_CM __mmask16
#define NGK_TMASK(n) ((__mmask16)((1u << (n)) - 1u))
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_LOADT(p, tm) _mm512_maskz_loadu_ps((tm), (p))
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_STREAM(p, v) _mm512_stream_ps((p), (v))
#define V_STORET(p, tm, v) _mm512_mask_storeu_ps((p), (tm), (v))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_DIV(a, b) _mm512_div_ps((a), (b))
#define V_GT(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_GT_OQ)
#define V_LT(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ)
#define V_BLEND(m, a, b) _mm512_mask_blend_ps((m), (a), (b))
#define V_MASKADD(acc, m, g) _mm512_mask_add_ps((acc), (m), (acc), (g))
#define VI_SET1(x) _mm512_set1_epi32(x)
#define VI_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define VI_LOADT(p, tm) _mm512_maskz_loadu_epi32((tm), (const void *)(p))
#define VI_STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define VI_STORET(p, tm, v) _mm512_mask_storeu_epi32((void *)(p), (tm), (v))
#define VI_BLEND(m, a, b) _mm512_mask_blend_epi32((m), (a), (b))
#define VI_EQ(a, b) _mm512_cmpeq_epi32_mask((a), (b))
#include "kernels_simd.h"

/* ---- selection ---- */

static const char *const ISA_NAMES[NG_CPU_ISA_COUNT_] = {"generic", "avx2", "avx512"};

/* ---- the dot decoder's pair scores ---- */

/* Pairs summed side by side: independent chains of additions (a 256-wide sum is one chain of
 * dependent adds per pair), as runtime/link_score.c's ng__link_score sums them. */
#define NGK_DOT_LANES 8

void ng__cpu_pair_dot_rows(float *out, const float *h, const int32_t *u, const int32_t *v,
                           int64_t i0, int64_t i1, int64_t dim) {
  /* Each lane is one pair's float sum in column order, a product and an add rounded apart (this
   * file contracts nothing: see the top), so the grouping of pairs changes no bit. */
  int64_t i = i0;
  for (; i + NGK_DOT_LANES <= i1; i += NGK_DOT_LANES) {
    const float *a[NGK_DOT_LANES], *b[NGK_DOT_LANES];
    float acc[NGK_DOT_LANES];
    for (int l = 0; l < NGK_DOT_LANES; l++) {
      a[l] = h + (int64_t)u[i + l] * dim;
      b[l] = h + (int64_t)v[i + l] * dim;
      acc[l] = 0.0f;
    }
    for (int64_t c = 0; c < dim; c++)
      for (int l = 0; l < NGK_DOT_LANES; l++)
        acc[l] = acc[l] + a[l][c] * b[l][c];
    for (int l = 0; l < NGK_DOT_LANES; l++)
      out[i + l] = acc[l];
  }
  for (; i < i1; i++) {
    const float *a = h + (int64_t)u[i] * dim, *b = h + (int64_t)v[i] * dim;
    float acc = 0.0f;
    for (int64_t c = 0; c < dim; c++)
      acc = acc + a[c] * b[c];
    out[i] = acc;
  }
}

/* ---- partial reduction with input dropout ----
 * Scalar: dropout hashes every element, so the loads are not the bottleneck here, and one plain
 * loop keeps the operation order of kernels_impl.h obviously intact. */

static void aggr_partial_dropped(const ng_aggr *ag, const ng_block *blk, const float *src,
                                 int64_t dim, int32_t d0, int32_t d1, float *out) {
  const uint32_t threshold = ng_dropout_threshold(ag->drop_p);
  const float scale = 1.0f / (1.0f - ag->drop_p);
  const uint64_t key = ag->drop_key;
  for (int32_t d = d0; d < d1; d++) {
    float *restrict o = out + (int64_t)d * dim;
    const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
    if (ag->reduce == NG_REDUCE_SUM || e0 == e1)
      memset(o, 0, (size_t)dim * sizeof(float));
    for (int32_t e = e0; e < e1; e++) {
      const int64_t r = blk->indices[e];
      const float *row = src + r * dim;
      const uint64_t base = (uint64_t)r * (uint64_t)dim;
      if (ag->reduce == NG_REDUCE_SUM) {
        const float w = ag->weighted ? blk->edge_w[e] : 1.0f;
        for (int64_t j = 0; j < dim; j++) {
          const float x = ng_dropped(row[j], key, base + (uint64_t)j, threshold, scale);
          o[j] = ag->weighted ? o[j] + w * x : o[j] + x;
        }
      } else {
        const bool is_max = ag->reduce == NG_REDUCE_MAX;
        for (int64_t j = 0; j < dim; j++) {
          const float x = ng_dropped(row[j], key, base + (uint64_t)j, threshold, scale);
          if (e == e0 || (is_max ? x > o[j] : x < o[j]))
            o[j] = x;
        }
      }
    }
  }
}

void ng__cpu_aggr_partial_rows(const ng_cpu_kernels *k, const ng_aggr *bare, const ng_block *blk,
                               const float *src, int64_t dim, int32_t d0, int32_t d1,
                               ng_pstate *state, bool staged) {
  for (int32_t d = d0; d < d1; d++)
    state->count[d] = blk->indptr[d + 1] - blk->indptr[d];
  if (bare->user) /* the user's law, which partial states merge by (cpu/agg_user.c) */
    ng__cpu_uagg_partial_rows(bare, blk, src, dim, d0, d1, state->val);
  else if (bare->drop_p > 0.0f)
    aggr_partial_dropped(bare, blk, src, dim, d0, d1, state->val);
  else if (bare->reduce == NG_REDUCE_SUM)
    (staged ? k->stage_sum : k->aggr_sum)(bare, blk, src, dim, d0, d1, state->val);
  else
    k->aggr_best(bare->reduce == NG_REDUCE_MAX, blk, src, dim, d0, d1, state->val, NULL);
}

bool ng__cpu_isa_supported(ng_cpu_isa isa) {
  __builtin_cpu_init();
  switch (isa) {
  case NG_CPU_ISA_GENERIC:
    return true;
  case NG_CPU_ISA_AVX2:
    return __builtin_cpu_supports("avx2");
  case NG_CPU_ISA_AVX512:
    return __builtin_cpu_supports("avx512f");
  default:
    return false;
  }
}

ng_cpu_isa ng__cpu_isa_best(void) {
  if (ng__cpu_isa_supported(NG_CPU_ISA_AVX512))
    return NG_CPU_ISA_AVX512;
  if (ng__cpu_isa_supported(NG_CPU_ISA_AVX2))
    return NG_CPU_ISA_AVX2;
  return NG_CPU_ISA_GENERIC;
}

const ng_cpu_kernels *ng__cpu_kernels(ng_cpu_isa isa) {
  static const ng_cpu_kernels *const TABLES[NG_CPU_ISA_COUNT_] = {
      [NG_CPU_ISA_GENERIC] = &kernels_generic,
      [NG_CPU_ISA_AVX2] = &kernels_avx2,
      [NG_CPU_ISA_AVX512] = &kernels_avx512,
  };
  return ng__cpu_isa_supported(isa) ? TABLES[isa] : NULL;
}

ng_status ng__cpu_isa_parse(ng_cpu_isa *out, const char *name) {
  for (int i = 0; i < NG_CPU_ISA_COUNT_; i++) {
    if (name && strcmp(name, ISA_NAMES[i]) == 0) {
      *out = (ng_cpu_isa)i;
      return NG_OK;
    }
  }
  return ng__err(NG_ERR_INVALID_ARG,
                 "NG_CPU_ISA=\"%s\": unknown kernel variant; use generic, avx2 or avx512",
                 name ? name : "(null)");
}
