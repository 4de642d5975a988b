/* The C face of the CUDA backend: the only header of gpu/ the rest of neargnn includes.
 * It names no CUDA type. Everything here exists only when NG_HAVE_CUDA is defined. */
#ifndef NG_CUDA_H
#define NG_CUDA_H

#include "core/core_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Number of CUDA devices visible (0 when none, or no driver: that is not an error) and a
/// one-line description of each, separated by "; ", into `desc` of `cap` bytes.
ng_status ng__cuda_devices(int *count, char *desc, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* NG_CUDA_H */
