/* The CPU's attention kernels (GAT, ops attn_fwd / attn_bwd of core/backend_impl.h) over row
 * ranges, so that the backend can split rows over threads: every row (a destination in the
 * forward and in the first backward phase, a source in the second, a column in the third) is
 * computed by one thread alone in a fixed order, so the result does not depend on the split.
 * The CUDA backend (gpu/backend_cuda_attn.cu) follows the same order of operations. */
#ifndef NG_ATTN_IMPL_H
#define NG_ATTN_IMPL_H

#include "backend_impl.h"

/// Forward of destinations [d0, d1).
void ng__attn_fwd_rows(const ng_attn *at, const ng_block *blk, const float *z, const float *att_src,
                       const float *att_dst, float *alpha, float *out, int32_t d0, int32_t d1);
/// Backward phase 1, destinations [d0, d1): d(score) of each slot into work[0 ..] and
/// d(s_dst) of each destination after them (ng_attn_bwd_work's layout).
void ng__attn_bwd_dst_rows(const ng_attn *at, const ng_block *blk, const float *z,
                           const float *att_src, const float *att_dst, const float *alpha,
                           const float *grad_out, float *work, int32_t d0, int32_t d1);
/// Backward phase 2, sources [s0, s1): grad_z and d(s_src) of each source (into work).
void ng__attn_bwd_src_rows(const ng_attn *at, const ng_block *blk, const float *att_src,
                           const float *att_dst, const float *alpha, const float *grad_out,
                           float *work, float *grad_z, int32_t s0, int32_t s1);
/// Backward phase 3, columns [c0, c1) of heads * head_dim: the attention vectors' gradients.
void ng__attn_bwd_param_cols(const ng_attn *at, const ng_block *blk, const float *z,
                             const float *work, float *grad_att_src, float *grad_att_dst,
                             int64_t c0, int64_t c1);

/// Attention partial states (op attn_state) of destinations [d0, d1).
void ng__attn_state_rows(const ng_attn *at, const ng_block *blk, const float *z_src,
                         const float *z_dst, const float *att_src, const float *att_dst, bool self,
                         float *state, int32_t d0, int32_t d1);
/// Merge and finalize (op attn_merge) of rows [d0, d1).
void ng__attn_merge_rows(const ng_attn *at, float *acc, const float *other, float *out, int32_t d0,
                         int32_t d1);

#endif /* NG_ATTN_IMPL_H */
