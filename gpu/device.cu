// Device discovery for the CUDA backend.
#include "ng_cuda.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" ng_status ng__cuda_devices(int *count, char *desc, size_t cap) {
  *count = 0;
  if (cap)
    desc[0] = '\0';
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return NG_OK;
  }
  if (err != cudaSuccess)
    return ng__err(NG_ERR_CUDA, "cudaGetDeviceCount: %s", cudaGetErrorString(err));
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess)
      return ng__err(NG_ERR_CUDA, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorString(err));
    if (used < cap) {
      int w = snprintf(desc + used, cap - used, "%s%d: %s (sm_%d%d, %.1f GiB)", i ? "; " : "", i,
                       prop.name, prop.major, prop.minor,
                       (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
      if (w > 0)
        used += (size_t)w;
    }
  }
  *count = n;
  return NG_OK;
}

extern "C" ng_status ng__cuda_host_register(void *ptr, size_t bytes, bool read_only) {
  if (!ptr || bytes == 0)
    return ng__err(NG_ERR_INVALID_ARG, "cudaHostRegister: empty range; pass a buffer to pin");
  /* A read-only mapping (a memory-mapped dataset) can only be registered read-only. */
  unsigned flags = cudaHostRegisterMapped | (read_only ? cudaHostRegisterReadOnly : 0u);
  cudaError_t err = cudaHostRegister(ptr, bytes, flags);
  if (err != cudaSuccess)
    return ng__err(NG_ERR_CUDA, "cudaHostRegister of %zu bytes: %s (%s)", bytes,
                   cudaGetErrorName(err), cudaGetErrorString(err));
  return NG_OK;
}

extern "C" ng_status ng__cuda_host_unregister(void *ptr) {
  cudaError_t err = cudaHostUnregister(ptr);
  if (err != cudaSuccess)
    return ng__err(NG_ERR_CUDA, "cudaHostUnregister: %s (%s)", cudaGetErrorName(err),
                   cudaGetErrorString(err));
  return NG_OK;
}
