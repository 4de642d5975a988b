/* The CPU backend's constructor: the header of cpu/ that the layers above include to make one
 * (as gpu/ng_cuda.h is for the CUDA backend). The interface it fills is core/backend_impl.h. */
#ifndef NG_CPU_H
#define NG_CPU_H

#include "backend_impl.h"

/// The CPU backend (cpu/backend_cpu.c). `threads` 0 = the OpenMP default.
ng_status ng__backend_cpu_create(ng_backend **out, int threads);

/// The dot decoder's scores of pairs [i0, i1): out[i] = rows u[i] . v[i] of h [*, dim], each a
/// float sum in column order from +0 with every product and sum rounded apart
/// (cpu/kernels_cpu.c). The CPU backend's pair_dot op (backend_impl.h) and the link decoder's
/// scoring (runtime/link_score.c) both call it, so that their scores are the same bits.
/// Portable C only: the order leaves SIMD nothing but side-by-side pairs.
void ng__cpu_pair_dot_rows(float *out, const float *h, const int32_t *u, const int32_t *v,
                           int64_t i0, int64_t i1, int64_t dim);

#endif /* NG_CPU_H */
