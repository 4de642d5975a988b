/* The CPU aggregation and gather kernels (cpu/kernels_cpu.c), in one portable variant and SIMD
 * variants for AVX2 and AVX-512 chosen once at run time. They are single-threaded and work on a
 * range of rows, so that the CPU backend (cpu/backend_cpu.c) can split rows over OpenMP threads
 * and worker threads can call them directly on their own rows.
 *
 * Every variant performs, for every output element, the same floating-point operations in the
 * same order (no fused multiply-add, no reassociation), so all variants give bit-identical
 * results; tests/test_ops.c checks it. The order is:
 *  - sum forward: acc = +0; for each edge e of d in edge order: acc = acc + (w_e * x) (or acc + x
 *    when unweighted); then, for MEAN with at least one neighbour, acc = acc / count; then, with
 *    a self loop, acc = acc + self_w[d] * src[d];
 *  - max/min forward: the first neighbour's value, then each later neighbour replaces it only
 *    when strictly better (so ties and NaN keep the earlier one); rows without neighbours give 0
 *    and argbest -1;
 *  - sum backward, per source s: acc = +0; for each transposed edge (d, e) of s in transposed
 *    order: acc = acc + c_e * grad_dst[d], with c_e = (weighted ? w_e : 1) * (MEAN ?
 *    1 / count(d) : 1) computed in float; then, with a self loop and s < n_dst,
 *    acc = acc + self_w[s] * grad_dst[s];
 *  - max/min backward, per source s: acc = +0; for each transposed edge (d, e) of s in transposed
 *    order whose edge is the first of d with source s (a destination listing a source twice
 *    still routes its gradient once): acc = acc + grad_dst[d] where argbest[d] == s. */
#ifndef NG_KERNELS_IMPL_H
#define NG_KERNELS_IMPL_H

#include "backend_impl.h"

/// The instruction-set variants of the kernels, from the most portable up.
typedef enum {
  NG_CPU_ISA_GENERIC = 0, ///< plain C (SSE4.2 at most, from -march=x86-64-v2)
  NG_CPU_ISA_AVX2 = 1,    ///< AVX2 (256-bit)
  NG_CPU_ISA_AVX512 = 2,  ///< AVX-512F (512-bit, mask registers)
  NG_CPU_ISA_COUNT_
} ng_cpu_isa;

/// The longest row (floats) stage_sum streams: it sums a row in a scratch row on the stack.
#define NG_STAGE_SUM_MAX 4096

/// One variant's kernels. Pointers are borrowed and must not overlap between inputs and
/// outputs. Row ranges are absolute: row d of an output is at out + d * dim.
typedef struct {
  ng_cpu_isa isa;
  const char *name; ///< "generic", "avx2", "avx512"
  /// dst[i, :] = table[ids[i], :] for i in [0, n).
  void (*gather_rows)(float *dst, const float *table, const int64_t *ids, int64_t n, int64_t dim);
  /// The same with non-temporal stores (rows for DMA), fenced at the end; falls back to
  /// gather_rows when dst rows are not vector-aligned.
  void (*stage_rows)(float *dst, const float *table, const int64_t *ids, int64_t n, int64_t dim);
  /// SUM-reduction forward of destinations [d0, d1) into out [*, dim]; `ag` says whether edges
  /// are weighted (blk->edge_w), whether MEAN divides and whether a self loop (blk->self_w) is
  /// added. With neither MEAN nor self loop this is exactly the partial state's value.
  void (*aggr_sum)(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                   int32_t d0, int32_t d1, float *out);
  /// aggr_sum for rows that go to the DMA engine: the same values, written with non-temporal
  /// stores and fenced at the end; falls back to aggr_sum when out's rows are not
  /// vector-aligned or dim > NG_STAGE_SUM_MAX.
  void (*stage_sum)(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                    int32_t d0, int32_t d1, float *out);
  /// MAX (is_max) or MIN forward of destinations [d0, d1); argbest may be NULL.
  void (*aggr_best)(bool is_max, const ng_block *blk, const float *src, int64_t dim, int32_t d0,
                    int32_t d1, float *out, int32_t *argbest);
  /// SUM-reduction backward of sources [s0, s1) into grad_src [*, dim] (overwritten).
  void (*aggr_sum_bwd)(const ng_aggr *ag, const ng_block *blk, const float *grad_dst, int64_t dim,
                       int32_t s0, int32_t s1, float *grad_src);
  /// MAX/MIN backward of sources [s0, s1) into grad_src [*, dim] (overwritten).
  void (*aggr_best_bwd)(const ng_block *blk, const float *grad_dst, const int32_t *argbest,
                        int64_t dim, int32_t s0, int32_t s1, float *grad_src);
} ng_cpu_kernels;

/// The partial state of destinations [d0, d1) (counts and values; `bare` has no MEAN and no
/// self loop): the input dropout's portable loop when bare->drop_p > 0 (in the operation order
/// above, so that every variant of aggr_sum / aggr_best computes the same values when drop_p
/// is 0), else k's aggr_sum (stage_sum when `staged`: the state goes to the DMA engine, not
/// back to this core) or aggr_best. No argbest.
void ng__cpu_aggr_partial_rows(const ng_cpu_kernels *k, const ng_aggr *bare, const ng_block *blk,
                               const float *src, int64_t dim, int32_t d0, int32_t d1,
                               ng_pstate *state, bool staged);

/* ng__cpu_pair_dot_rows, the dot decoder's pair scores: ng_cpu.h (runtime/link_score.c calls it
 * too). */

/* ---- bf16 tables (cpu/kernels_bf16.c; NG_PRECISION_BF16) ----
 * Plain C loops (vectorised by the compiler) that convert each bf16 element to fp32 where it is
 * read and then follow the operation order above, so that they give the fp32 kernels' bits on
 * the converted table, like every variant. */

/// ng__cpu_aggr_partial_rows over a bf16 table `src` (uint16 bits), with the input dropout of
/// `bare` applied to the converted values.
void ng__cpu_aggr_partial_rows_bf16(const ng_aggr *bare, const ng_block *blk, const uint16_t *src,
                                    int64_t dim, int32_t d0, int32_t d1, ng_pstate *state);
/// dst[i, :] = table[ids[i], :] for i in [0, n), bf16 rows copied as they are (staging).
void ng__cpu_gather_rows_bf16(uint16_t *dst, const uint16_t *table, const int64_t *ids, int64_t n,
                              int64_t dim);
/// ng_drop_row (core/rng.h) from a bf16 row: converted, then dropped like an fp32 row.
void ng__cpu_drop_row_bf16(float *dst, const uint16_t *src, int64_t row, int64_t dim, float p,
                           uint64_t key);

/* ---- user aggregators (cpu/agg_user.c): the definition's functions called per element, in
 * the order of backend_impl.h (neighbours in edge order, sources' gradients in transposed-edge
 * order), single-threaded over a range of rows. State rows are [dim, S]. ---- */

/// Forward of destinations [d0, d1) into out [*, dim]: finalize(state, degree), 0 for a
/// destination without neighbours. Edge weights when ag->weighted, else 1.
void ng__cpu_uagg_fwd_rows(const ng_aggr *ag, const ng_block *blk, const float *src, int64_t dim,
                           int32_t d0, int32_t d1, float *out);
/// The states of destinations [d0, d1) into val [*, dim, S] (not finalized; counts are the
/// caller's), with the aggregator's input dropout keyed as aggr_partial's.
void ng__cpu_uagg_partial_rows(const ng_aggr *ag, const ng_block *blk, const float *src,
                               int64_t dim, int32_t d0, int32_t d1, float *val);
/// acc = merge(acc, other) for rows [d0, d1), the rules of pstate_merge (counts added too).
void ng__cpu_uagg_merge_rows(const ng_aggr *ag, ng_pstate *acc, const ng_pstate *other, int32_t d0,
                             int32_t d1);
/// dst rows [d0, d1) = finalize(state, count), 0 where count is 0.
void ng__cpu_uagg_finalize_rows(const ng_aggr *ag, const ng_pstate *state, int32_t d0, int32_t d1,
                                float *dst);
/// aggr_user_bwd's first pass: work[e, c] for the edges of destinations [d0, d1).
void ng__cpu_uagg_bwd_dst_rows(const ng_aggr *ag, const ng_block *blk, const float *src,
                               const float *grad_dst, int64_t dim, int32_t d0, int32_t d1,
                               float *work);
/// aggr_user_bwd's second pass: grad_src rows [s0, s1) = the sums of their edges' work in
/// transposed-edge order.
void ng__cpu_uagg_bwd_src_rows(const ng_block *blk, const float *work, int64_t dim, int32_t s0,
                               int32_t s1, float *grad_src);

/// Whether this CPU (and its operating system) runs `isa`.
bool ng__cpu_isa_supported(ng_cpu_isa isa);
/// The fastest variant this CPU runs.
ng_cpu_isa ng__cpu_isa_best(void);
/// The kernels of `isa`, or NULL when this CPU does not run it.
const ng_cpu_kernels *ng__cpu_kernels(ng_cpu_isa isa);
/// Parses "generic", "avx2" or "avx512" (the values of the NG_CPU_ISA environment variable).
ng_status ng__cpu_isa_parse(ng_cpu_isa *out, const char *name);

/// The kernels a CPU backend uses (chosen at ng__backend_cpu_create(): NG_CPU_ISA when set,
/// otherwise the best this CPU runs). `be` must be a CPU backend.
const ng_cpu_kernels *ng__backend_cpu_kernels(const ng_backend *be);

#endif /* NG_KERNELS_IMPL_H */
