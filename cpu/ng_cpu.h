/* The CPU backend's constructor: the header of cpu/ that the layers above include to make one
 * (as gpu/ng_cuda.h is for the CUDA backend). The interface it fills is core/backend_impl.h. */
#ifndef NG_CPU_H
#define NG_CPU_H

#include "backend_impl.h"

/// The CPU backend (cpu/backend_cpu.c). `threads` 0 = the OpenMP default.
ng_status ng__backend_cpu_create(ng_backend **out, int threads);

#endif /* NG_CPU_H */
