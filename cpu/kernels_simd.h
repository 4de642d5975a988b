/* The SIMD kernels, written once and instantiated per instruction set by cpu/kernels_cpu.c,
 * which includes this file once per ISA after defining the following (this file undefines
 * them all at its end):
 *   NGK_TARGET               the function attribute enabling the ISA
 *   NGK_ISA, NGK_ISA_NAME    its ng_cpu_isa value and name
 *   NGK_FN(name)             the name of this instance's function
 *   NGK_VL                   floats per vector
 *   NGK_SUM_VECS             vectors a sum keeps in registers (dims up to NGK_SUM_VECS * NGK_VL)
 *   NGK_BEST_VECS            vectors a max/min keeps in registers (values and arg-best ids)
 *   NGK_V, NGK_VI            the float and int32 vector types
 *   NGK_TM, NGK_CM           a tail mask (first n lanes) and a comparison result
 *   NGK_TMASK(n)             the tail mask of the first n lanes, 1 <= n <= NGK_VL
 *   V_ZERO, V_SET1, V_LOAD, V_LOADT, V_STORE, V_STORET, V_ADD, V_MUL, V_DIV, V_GT, V_LT,
 *   V_BLEND(m, a, b) (b where m), V_MASKADD(acc, m, g) (acc + g where m),
 *   VI_SET1, VI_LOAD, VI_LOADT, VI_STORE, VI_STORET, VI_BLEND, VI_EQ.
 * Every function performs the operations listed in kernels_impl.h in the same order as the
 * portable variant, with separate multiplies and adds (never fused), so results match it bit
 * for bit. Dimensions up to a register tile keep their accumulators in registers; larger ones
 * accumulate in the output row, which stays in L1 while the neighbour rows stream past. */

#define NGK_INLINE static inline __attribute__((always_inline)) NGK_TARGET

/* The tail mask of the last (possibly partial) vector of a row of `dim` floats. */
#define NGK_TAIL(dim) NGK_TMASK((int)((dim) - ((dim)-1) / NGK_VL * NGK_VL))

/* Into L2 (NGK_PREFETCH_LOCALITY, kernels_cpu.c says why). */
NGK_INLINE void NGK_FN(prefetch_row)(const float *row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 16)
    __builtin_prefetch(row + j, 0, NGK_PREFETCH_LOCALITY);
  __builtin_prefetch(row + dim - 1, 0, NGK_PREFETCH_LOCALITY);
}

static NGK_TARGET void NGK_FN(gather_rows)(float *restrict dst, const float *restrict table,
                                           const int64_t *ids, int64_t n, int64_t dim) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  const int64_t full = (dim - 1) / NGK_VL; /* vectors before the (possibly partial) last one */
  const NGK_TM tm = NGK_TAIL(dim);
  for (int64_t i = 0; i < n; i++) {
    if (i + pf < n)
      NGK_FN(prefetch_row)(table + ids[i + pf] * dim, dim);
    const float *row = table + ids[i] * dim;
    float *o = dst + i * dim;
    int64_t k = 0;
    for (; k + 4 <= full; k += 4) {
      NGK_V a = V_LOAD(row + k * NGK_VL), b = V_LOAD(row + (k + 1) * NGK_VL);
      NGK_V c = V_LOAD(row + (k + 2) * NGK_VL), d = V_LOAD(row + (k + 3) * NGK_VL);
      V_STORE(o + k * NGK_VL, a);
      V_STORE(o + (k + 1) * NGK_VL, b);
      V_STORE(o + (k + 2) * NGK_VL, c);
      V_STORE(o + (k + 3) * NGK_VL, d);
    }
    for (; k < full; k++)
      V_STORE(o + k * NGK_VL, V_LOAD(row + k * NGK_VL));
    V_STORET(o + full * NGK_VL, tm, V_LOADT(row + full * NGK_VL, tm));
  }
}

/* ---- register tiles: nv vectors of a row, the last one masked by tm ----
 * nv is a constant after inlining, so the arrays stay in registers. */

/* The register-tile cases of a dispatch switch: C(n) for each tile of n vectors. */
#if NGK_SUM_VECS >= 8
#define NGK_SUM_CASES(C) C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8)
#else
#define NGK_SUM_CASES(C) C(1) C(2) C(3) C(4)
#endif
#if NGK_BEST_VECS >= 8
#define NGK_BEST_CASES(C) C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8)
#else
#define NGK_BEST_CASES(C) C(1) C(2) C(3) C(4)
#endif

NGK_INLINE void NGK_FN(tile_load)(const int nv, NGK_TM tm, NGK_V *acc, const float *row) {
  const int64_t last = (nv - 1) * NGK_VL;
#pragma GCC unroll 16
  for (int k = 0; k < nv - 1; k++)
    acc[k] = V_LOAD(row + k * NGK_VL);
  acc[nv - 1] = V_LOADT(row + last, tm);
}

NGK_INLINE void NGK_FN(tile_zero)(const int nv, NGK_V *acc) {
#pragma GCC unroll 16
  for (int k = 0; k < nv; k++)
    acc[k] = V_ZERO();
}

/* acc = acc + row */
NGK_INLINE void NGK_FN(tile_add)(const int nv, NGK_TM tm, NGK_V *acc, const float *row) {
  const int64_t last = (nv - 1) * NGK_VL;
#pragma GCC unroll 16
  for (int k = 0; k < nv - 1; k++)
    acc[k] = V_ADD(acc[k], V_LOAD(row + k * NGK_VL));
  acc[nv - 1] = V_ADD(acc[nv - 1], V_LOADT(row + last, tm));
}

/* acc = acc + w * row, a separate multiply and add */
NGK_INLINE void NGK_FN(tile_axpy)(const int nv, NGK_TM tm, NGK_V *acc, NGK_V w, const float *row) {
  const int64_t last = (nv - 1) * NGK_VL;
#pragma GCC unroll 16
  for (int k = 0; k < nv - 1; k++)
    acc[k] = V_ADD(acc[k], V_MUL(w, V_LOAD(row + k * NGK_VL)));
  acc[nv - 1] = V_ADD(acc[nv - 1], V_MUL(w, V_LOADT(row + last, tm)));
}

NGK_INLINE void NGK_FN(tile_store)(const int nv, NGK_TM tm, float *o, const NGK_V *acc) {
  const int64_t last = (nv - 1) * NGK_VL;
#pragma GCC unroll 16
  for (int k = 0; k < nv - 1; k++)
    V_STORE(o + k * NGK_VL, acc[k]);
  V_STORET(o + last, tm, acc[nv - 1]);
}

NGK_INLINE void NGK_FN(tile_istore)(const int nv, NGK_TM tm, int32_t *o, const NGK_VI *acc) {
  const int64_t last = (nv - 1) * NGK_VL;
#pragma GCC unroll 16
  for (int k = 0; k < nv - 1; k++)
    VI_STORE(o + k * NGK_VL, acc[k]);
  VI_STORET(o + last, tm, acc[nv - 1]);
}

/* ---- SUM forward ---- */

/* One destination with its nv accumulators in registers (nv is a constant after inlining). */
NGK_INLINE void NGK_FN(sum_fwd_regs)(const int nv, NGK_TM tm, const ng_aggr *ag,
                                     const ng_block *blk, const float *src, int64_t dim, int64_t pf,
                                     int32_t d, float *o) {
  const int32_t *idx = blk->indices;
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
  NGK_V acc[NGK_SUM_VECS];
  NGK_FN(tile_zero)(nv, acc);
  if (ag->weighted) {
    const float *ew = blk->edge_w;
    for (int32_t e = e0; e < e1; e++) {
      if (e + pf < blk->nnz)
        NGK_FN(prefetch_row)(src + (int64_t)idx[e + pf] * dim, dim);
      NGK_FN(tile_axpy)(nv, tm, acc, V_SET1(ew[e]), src + (int64_t)idx[e] * dim);
    }
  } else {
    for (int32_t e = e0; e < e1; e++) {
      if (e + pf < blk->nnz)
        NGK_FN(prefetch_row)(src + (int64_t)idx[e + pf] * dim, dim);
      NGK_FN(tile_add)(nv, tm, acc, src + (int64_t)idx[e] * dim);
    }
  }
  if (ag->mean && e1 > e0) {
    const NGK_V c = V_SET1((float)(e1 - e0));
#pragma GCC unroll 16
    for (int k = 0; k < nv; k++)
      acc[k] = V_DIV(acc[k], c);
  }
  if (ag->self_loop)
    NGK_FN(tile_axpy)(nv, tm, acc, V_SET1(blk->self_w[d]), src + (int64_t)d * dim);
  NGK_FN(tile_store)(nv, tm, o, acc);
}

/* o = o + w * row over a whole row (w == NULL: o = o + row). */
NGK_INLINE void NGK_FN(row_acc)(float *o, const float *row, const float *w, int64_t full,
                                NGK_TM tm) {
  if (w) {
    const NGK_V wv = V_SET1(*w);
    for (int64_t k = 0; k < full; k++)
      V_STORE(o + k * NGK_VL, V_ADD(V_LOAD(o + k * NGK_VL), V_MUL(wv, V_LOAD(row + k * NGK_VL))));
    V_STORET(o + full * NGK_VL, tm,
             V_ADD(V_LOADT(o + full * NGK_VL, tm), V_MUL(wv, V_LOADT(row + full * NGK_VL, tm))));
  } else {
    for (int64_t k = 0; k < full; k++)
      V_STORE(o + k * NGK_VL, V_ADD(V_LOAD(o + k * NGK_VL), V_LOAD(row + k * NGK_VL)));
    V_STORET(o + full * NGK_VL, tm,
             V_ADD(V_LOADT(o + full * NGK_VL, tm), V_LOADT(row + full * NGK_VL, tm)));
  }
}

NGK_INLINE void NGK_FN(row_zero)(float *o, int64_t full, NGK_TM tm) {
  for (int64_t k = 0; k < full; k++)
    V_STORE(o + k * NGK_VL, V_ZERO());
  V_STORET(o + full * NGK_VL, tm, V_ZERO());
}

/* One destination accumulated in its output row o (dimensions beyond a register tile). */
NGK_INLINE void NGK_FN(sum_fwd_mem)(NGK_TM tm, const ng_aggr *ag, const ng_block *blk,
                                    const float *src, int64_t dim, int64_t pf, int32_t d,
                                    float *o) {
  const int32_t *idx = blk->indices;
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
  const int64_t full = (dim - 1) / NGK_VL;
  NGK_FN(row_zero)(o, full, tm);
  for (int32_t e = e0; e < e1; e++) {
    if (e + pf < blk->nnz)
      NGK_FN(prefetch_row)(src + (int64_t)idx[e + pf] * dim, dim);
    NGK_FN(row_acc)
    (o, src + (int64_t)idx[e] * dim, ag->weighted ? &blk->edge_w[e] : NULL, full, tm);
  }
  if (ag->mean && e1 > e0) {
    const NGK_V c = V_SET1((float)(e1 - e0));
    for (int64_t k = 0; k < full; k++)
      V_STORE(o + k * NGK_VL, V_DIV(V_LOAD(o + k * NGK_VL), c));
    V_STORET(o + full * NGK_VL, tm, V_DIV(V_LOADT(o + full * NGK_VL, tm), c));
  }
  if (ag->self_loop)
    NGK_FN(row_acc)(o, src + (int64_t)d * dim, &blk->self_w[d], full, tm);
}

/* Destination d's sum into row o, in registers when nv <= NGK_SUM_VECS, else in o. */
NGK_INLINE void NGK_FN(sum_fwd_row)(const int nv, NGK_TM tm, const ng_aggr *ag, const ng_block *blk,
                                    const float *src, int64_t dim, int64_t pf, int32_t d,
                                    float *o) {
  switch (nv) {
#define NGK_CASE(n)                                                                                \
  case n:                                                                                          \
    NGK_FN(sum_fwd_regs)(n, tm, ag, blk, src, dim, pf, d, o);                                      \
    break;
    NGK_SUM_CASES(NGK_CASE)
#undef NGK_CASE
  default:
    NGK_FN(sum_fwd_mem)(tm, ag, blk, src, dim, pf, d, o);
  }
}

static NGK_TARGET void NGK_FN(aggr_sum)(const ng_aggr *ag, const ng_block *blk, const float *src,
                                        int64_t dim, int32_t d0, int32_t d1, float *out) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  const NGK_TM tm = NGK_TAIL(dim);
  const int nv = (int)NG_MIN((dim + NGK_VL - 1) / NGK_VL, NGK_SUM_VECS + 1);
  for (int32_t d = d0; d < d1; d++)
    NGK_FN(sum_fwd_row)(nv, tm, ag, blk, src, dim, pf, d, out + (int64_t)d * dim);
}

/* aggr_sum for rows that go to the DMA engine (partial states): each destination is summed in a
 * scratch row that stays in L1 and then streamed out with non-temporal stores, which saves the
 * output's read for ownership and its write-back through the caches. Fenced at the end. Falls
 * back to aggr_sum when rows are not vector-aligned or longer than NG_STAGE_SUM_MAX floats. */
static NGK_TARGET void NGK_FN(stage_sum)(const ng_aggr *ag, const ng_block *blk, const float *src,
                                         int64_t dim, int32_t d0, int32_t d1, float *out) {
  if (dim <= 0 || dim % NGK_VL || dim > NG_STAGE_SUM_MAX || ((uintptr_t)out & (NGK_VL * 4 - 1))) {
    NGK_FN(aggr_sum)(ag, blk, src, dim, d0, d1, out);
    return;
  }
  _Alignas(64) float row[NG_STAGE_SUM_MAX];
  const int64_t pf = ngk_prefetch_distance(dim);
  const NGK_TM tm = NGK_TAIL(dim);
  const int nv = (int)NG_MIN(dim / NGK_VL, NGK_SUM_VECS + 1);
  for (int32_t d = d0; d < d1; d++) {
    NGK_FN(sum_fwd_row)(nv, tm, ag, blk, src, dim, pf, d, row);
    float *o = out + (int64_t)d * dim;
    for (int64_t k = 0; k < dim; k += NGK_VL)
      V_STREAM(o + k, V_LOAD(row + k));
  }
  _mm_sfence(); /* the streamed states are visible before the package is published */
}

/* ---- MAX / MIN forward ---- */

NGK_INLINE NGK_CM NGK_FN(better)(const bool is_max, NGK_V v, NGK_V cur) {
  return is_max ? V_GT(v, cur) : V_LT(v, cur);
}

NGK_INLINE void NGK_FN(best_fwd_regs)(const bool is_max, const int nv, NGK_TM tm,
                                      const ng_block *blk, const float *src, int64_t dim,
                                      int64_t pf, int32_t d, float *out, int32_t *argbest) {
  const int32_t *idx = blk->indices;
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
  const int64_t last = (nv - 1) * NGK_VL;
  NGK_V val[NGK_BEST_VECS];
  NGK_VI arg[NGK_BEST_VECS];
  /* A destination without edges gets 0 and the arg-best id -1. */
  const NGK_VI first = VI_SET1(e0 == e1 ? -1 : idx[e0]);
#pragma GCC unroll 16
  for (int k = 0; k < nv; k++)
    arg[k] = first;
  if (e0 == e1)
    NGK_FN(tile_zero)(nv, val);
  else
    NGK_FN(tile_load)(nv, tm, val, src + (int64_t)idx[e0] * dim);
  for (int32_t e = e0 + 1; e < e1; e++) {
    if (e + pf < blk->nnz)
      NGK_FN(prefetch_row)(src + (int64_t)idx[e + pf] * dim, dim);
    const float *row = src + (int64_t)idx[e] * dim;
    const NGK_VI s = VI_SET1(idx[e]);
#pragma GCC unroll 16
    for (int k = 0; k < nv; k++) {
      const NGK_V v = k < nv - 1 ? V_LOAD(row + k * NGK_VL) : V_LOADT(row + last, tm);
      const NGK_CM m = NGK_FN(better)(is_max, v, val[k]);
      val[k] = V_BLEND(m, val[k], v);
      arg[k] = VI_BLEND(m, arg[k], s);
    }
  }
  NGK_FN(tile_store)(nv, tm, out + (int64_t)d * dim, val);
  if (argbest)
    NGK_FN(tile_istore)(nv, tm, argbest + (int64_t)d * dim, arg);
}

NGK_INLINE void NGK_FN(best_fwd_mem)(const bool is_max, NGK_TM tm, const ng_block *blk,
                                     const float *src, int64_t dim, int64_t pf, int32_t d,
                                     float *out, int32_t *argbest) {
  const int32_t *idx = blk->indices;
  const int32_t e0 = blk->indptr[d], e1 = blk->indptr[d + 1];
  const int64_t full = (dim - 1) / NGK_VL, last = full * NGK_VL;
  float *o = out + (int64_t)d * dim;
  int32_t *a = argbest ? argbest + (int64_t)d * dim : NULL;
  const NGK_VI first = VI_SET1(e0 == e1 ? -1 : idx[e0]);
  if (e0 == e1) {
    NGK_FN(row_zero)(o, full, tm);
  } else {
    const float *row = src + (int64_t)idx[e0] * dim;
    for (int64_t k = 0; k < full; k++)
      V_STORE(o + k * NGK_VL, V_LOAD(row + k * NGK_VL));
    V_STORET(o + last, tm, V_LOADT(row + last, tm));
  }
  if (a) {
    for (int64_t k = 0; k < full; k++)
      VI_STORE(a + k * NGK_VL, first);
    VI_STORET(a + last, tm, first);
  }
  for (int32_t e = e0 + 1; e < e1; e++) {
    if (e + pf < blk->nnz)
      NGK_FN(prefetch_row)(src + (int64_t)idx[e + pf] * dim, dim);
    const float *row = src + (int64_t)idx[e] * dim;
    const NGK_VI s = VI_SET1(idx[e]);
    for (int64_t k = 0; k < full; k++) {
      const NGK_V v = V_LOAD(row + k * NGK_VL), cur = V_LOAD(o + k * NGK_VL);
      const NGK_CM m = NGK_FN(better)(is_max, v, cur);
      V_STORE(o + k * NGK_VL, V_BLEND(m, cur, v));
      if (a)
        VI_STORE(a + k * NGK_VL, VI_BLEND(m, VI_LOAD(a + k * NGK_VL), s));
    }
    const NGK_V v = V_LOADT(row + last, tm), cur = V_LOADT(o + last, tm);
    const NGK_CM m = NGK_FN(better)(is_max, v, cur);
    V_STORET(o + last, tm, V_BLEND(m, cur, v));
    if (a)
      VI_STORET(a + last, tm, VI_BLEND(m, VI_LOADT(a + last, tm), s));
  }
}

static NGK_TARGET void NGK_FN(aggr_best)(bool is_max, const ng_block *blk, const float *src,
                                         int64_t dim, int32_t d0, int32_t d1, float *out,
                                         int32_t *argbest) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  const NGK_TM tm = NGK_TAIL(dim);
  const int nv = (int)NG_MIN((dim + NGK_VL - 1) / NGK_VL, NGK_BEST_VECS + 1);
  for (int32_t d = d0; d < d1; d++) {
    switch (nv) {
#define NGK_CASE(n)                                                                                \
  case n:                                                                                          \
    if (is_max)                                                                                    \
      NGK_FN(best_fwd_regs)(true, n, tm, blk, src, dim, pf, d, out, argbest);                      \
    else                                                                                           \
      NGK_FN(best_fwd_regs)(false, n, tm, blk, src, dim, pf, d, out, argbest);                     \
    break;
      NGK_BEST_CASES(NGK_CASE)
#undef NGK_CASE
    default:
      if (is_max)
        NGK_FN(best_fwd_mem)(true, tm, blk, src, dim, pf, d, out, argbest);
      else
        NGK_FN(best_fwd_mem)(false, tm, blk, src, dim, pf, d, out, argbest);
    }
  }
}

/* ---- SUM backward (per source, over the transposed edges) ---- */

NGK_INLINE void NGK_FN(sum_bwd_regs)(const int nv, NGK_TM tm, const ng_aggr *ag,
                                     const ng_block *blk, const float *grad_dst, int64_t dim,
                                     int64_t pf, int32_t s, float *grad_src) {
  const int32_t t0 = blk->t_indptr[s], t1 = blk->t_indptr[s + 1];
  NGK_V acc[NGK_SUM_VECS];
  NGK_FN(tile_zero)(nv, acc);
  for (int32_t t = t0; t < t1; t++) {
    if (t + pf < blk->nnz)
      NGK_FN(prefetch_row)(grad_dst + (int64_t)blk->t_dst[t + pf] * dim, dim);
    const int32_t d = blk->t_dst[t];
    const NGK_V c = V_SET1(ngk_bwd_coef(ag, blk, d, blk->t_eid[t]));
    NGK_FN(tile_axpy)(nv, tm, acc, c, grad_dst + (int64_t)d * dim);
  }
  if (ag->self_loop && s < blk->n_dst)
    NGK_FN(tile_axpy)(nv, tm, acc, V_SET1(blk->self_w[s]), grad_dst + (int64_t)s * dim);
  NGK_FN(tile_store)(nv, tm, grad_src + (int64_t)s * dim, acc);
}

NGK_INLINE void NGK_FN(sum_bwd_mem)(NGK_TM tm, const ng_aggr *ag, const ng_block *blk,
                                    const float *grad_dst, int64_t dim, int64_t pf, int32_t s,
                                    float *grad_src) {
  const int32_t t0 = blk->t_indptr[s], t1 = blk->t_indptr[s + 1];
  const int64_t full = (dim - 1) / NGK_VL;
  float *o = grad_src + (int64_t)s * dim;
  NGK_FN(row_zero)(o, full, tm);
  for (int32_t t = t0; t < t1; t++) {
    if (t + pf < blk->nnz)
      NGK_FN(prefetch_row)(grad_dst + (int64_t)blk->t_dst[t + pf] * dim, dim);
    const int32_t d = blk->t_dst[t];
    const float c = ngk_bwd_coef(ag, blk, d, blk->t_eid[t]);
    NGK_FN(row_acc)(o, grad_dst + (int64_t)d * dim, &c, full, tm);
  }
  if (ag->self_loop && s < blk->n_dst)
    NGK_FN(row_acc)(o, grad_dst + (int64_t)s * dim, &blk->self_w[s], full, tm);
}

static NGK_TARGET void NGK_FN(aggr_sum_bwd)(const ng_aggr *ag, const ng_block *blk,
                                            const float *grad_dst, int64_t dim, int32_t s0,
                                            int32_t s1, float *grad_src) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  const NGK_TM tm = NGK_TAIL(dim);
  const int nv = (int)NG_MIN((dim + NGK_VL - 1) / NGK_VL, NGK_SUM_VECS + 1);
  for (int32_t s = s0; s < s1; s++) {
    switch (nv) {
#define NGK_CASE(n)                                                                                \
  case n:                                                                                          \
    NGK_FN(sum_bwd_regs)(n, tm, ag, blk, grad_dst, dim, pf, s, grad_src);                          \
    break;
      NGK_SUM_CASES(NGK_CASE)
#undef NGK_CASE
    default:
      NGK_FN(sum_bwd_mem)(tm, ag, blk, grad_dst, dim, pf, s, grad_src);
    }
  }
}

/* ---- MAX / MIN backward ---- */

NGK_INLINE void NGK_FN(best_bwd_regs)(const int nv, NGK_TM tm, const ng_block *blk,
                                      const float *grad_dst, const int32_t *argbest, int64_t dim,
                                      int64_t pf, int32_t s, float *grad_src) {
  const int32_t t0 = blk->t_indptr[s], t1 = blk->t_indptr[s + 1];
  const int64_t last = (nv - 1) * NGK_VL;
  const NGK_VI sv = VI_SET1(s);
  NGK_V acc[NGK_BEST_VECS];
  NGK_FN(tile_zero)(nv, acc);
  for (int32_t t = t0; t < t1; t++) {
    if (t + pf < blk->nnz) {
      NGK_FN(prefetch_row)(grad_dst + (int64_t)blk->t_dst[t + pf] * dim, dim);
      NGK_FN(prefetch_row)((const float *)(argbest + (int64_t)blk->t_dst[t + pf] * dim), dim);
    }
    const int32_t d = blk->t_dst[t];
    if (!ngk_first_edge(blk, d, blk->t_eid[t], s))
      continue;
    const float *g = grad_dst + (int64_t)d * dim;
    const int32_t *a = argbest + (int64_t)d * dim;
#pragma GCC unroll 16
    for (int k = 0; k < nv; k++) {
      const NGK_V gv = k < nv - 1 ? V_LOAD(g + k * NGK_VL) : V_LOADT(g + last, tm);
      const NGK_VI av = k < nv - 1 ? VI_LOAD(a + k * NGK_VL) : VI_LOADT(a + last, tm);
      acc[k] = V_MASKADD(acc[k], VI_EQ(av, sv), gv);
    }
  }
  NGK_FN(tile_store)(nv, tm, grad_src + (int64_t)s * dim, acc);
}

NGK_INLINE void NGK_FN(best_bwd_mem)(NGK_TM tm, const ng_block *blk, const float *grad_dst,
                                     const int32_t *argbest, int64_t dim, int64_t pf, int32_t s,
                                     float *grad_src) {
  const int32_t t0 = blk->t_indptr[s], t1 = blk->t_indptr[s + 1];
  const int64_t full = (dim - 1) / NGK_VL, last = full * NGK_VL;
  const NGK_VI sv = VI_SET1(s);
  float *o = grad_src + (int64_t)s * dim;
  NGK_FN(row_zero)(o, full, tm);
  for (int32_t t = t0; t < t1; t++) {
    if (t + pf < blk->nnz) {
      NGK_FN(prefetch_row)(grad_dst + (int64_t)blk->t_dst[t + pf] * dim, dim);
      NGK_FN(prefetch_row)((const float *)(argbest + (int64_t)blk->t_dst[t + pf] * dim), dim);
    }
    const int32_t d = blk->t_dst[t];
    if (!ngk_first_edge(blk, d, blk->t_eid[t], s))
      continue;
    const float *g = grad_dst + (int64_t)d * dim;
    const int32_t *a = argbest + (int64_t)d * dim;
    for (int64_t k = 0; k < full; k++)
      V_STORE(o + k * NGK_VL, V_MASKADD(V_LOAD(o + k * NGK_VL), VI_EQ(VI_LOAD(a + k * NGK_VL), sv),
                                        V_LOAD(g + k * NGK_VL)));
    V_STORET(
        o + last, tm,
        V_MASKADD(V_LOADT(o + last, tm), VI_EQ(VI_LOADT(a + last, tm), sv), V_LOADT(g + last, tm)));
  }
}

static NGK_TARGET void NGK_FN(aggr_best_bwd)(const ng_block *blk, const float *grad_dst,
                                             const int32_t *argbest, int64_t dim, int32_t s0,
                                             int32_t s1, float *grad_src) {
  if (dim <= 0)
    return;
  const int64_t pf = ngk_prefetch_distance(dim);
  const NGK_TM tm = NGK_TAIL(dim);
  const int nv = (int)NG_MIN((dim + NGK_VL - 1) / NGK_VL, NGK_BEST_VECS + 1);
  for (int32_t s = s0; s < s1; s++) {
    switch (nv) {
#define NGK_CASE(n)                                                                                \
  case n:                                                                                          \
    NGK_FN(best_bwd_regs)(n, tm, blk, grad_dst, argbest, dim, pf, s, grad_src);                    \
    break;
      NGK_BEST_CASES(NGK_CASE)
#undef NGK_CASE
    default:
      NGK_FN(best_bwd_mem)(tm, blk, grad_dst, argbest, dim, pf, s, grad_src);
    }
  }
}

/* gather_rows with non-temporal (streaming) stores: the staged rows go to the DMA engine, not
 * back to this core, so writing them around the caches saves the read-for-ownership and keeps
 * the caches for the table. Rows must start on vector boundaries (else a plain gather). */
static NGK_TARGET void NGK_FN(stage_rows)(float *restrict dst, const float *restrict table,
                                          const int64_t *ids, int64_t n, int64_t dim) {
  if (dim <= 0 || dim % NGK_VL || ((uintptr_t)dst & (NGK_VL * 4 - 1))) {
    NGK_FN(gather_rows)(dst, table, ids, n, dim);
    return;
  }
  const int64_t pf = ngk_prefetch_distance(dim);
  for (int64_t i = 0; i < n; i++) {
    if (i + pf < n)
      NGK_FN(prefetch_row)(table + ids[i + pf] * dim, dim);
    const float *row = table + ids[i] * dim;
    float *o = dst + i * dim;
    for (int64_t k = 0; k < dim; k += NGK_VL)
      V_STREAM(o + k, V_LOAD(row + k));
  }
  _mm_sfence(); /* the streamed rows are visible before the package is published */
}

static const ng_cpu_kernels NGK_FN(kernels) = {
    .isa = NGK_ISA,
    .name = NGK_ISA_NAME,
    .gather_rows = NGK_FN(gather_rows),
    .stage_rows = NGK_FN(stage_rows),
    .aggr_sum = NGK_FN(aggr_sum),
    .stage_sum = NGK_FN(stage_sum),
    .aggr_best = NGK_FN(aggr_best),
    .aggr_sum_bwd = NGK_FN(aggr_sum_bwd),
    .aggr_best_bwd = NGK_FN(aggr_best_bwd),
};

#undef NGK_INLINE
#undef NGK_TAIL
#undef NGK_SUM_CASES
#undef NGK_BEST_CASES

/* The ISA definitions end with this instance, so the next one starts from a clean slate. */
#undef NGK_TARGET
#undef NGK_ISA
#undef NGK_ISA_NAME
#undef NGK_FN
#undef NGK_VL
#undef NGK_SUM_VECS
#undef NGK_BEST_VECS
#undef NGK_V
#undef NGK_VI
#undef NGK_TM
#undef NGK_CM
#undef NGK_TMASK
#undef V_ZERO
#undef V_SET1
#undef V_LOAD
#undef V_LOADT
#undef V_STORE
#undef V_STORET
#undef V_ADD
#undef V_MUL
#undef V_DIV
#undef V_GT
#undef V_LT
#undef V_BLEND
#undef V_MASKADD
#undef VI_SET1
#undef VI_LOAD
#undef VI_LOADT
#undef VI_STORE
#undef VI_STORET
#undef VI_BLEND
#undef VI_EQ
#undef V_STREAM
