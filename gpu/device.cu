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

extern "C" ng_status ng__cuda_peer_bandwidth(double *gbs, bool *p2p, int src, int dst, size_t bytes,
                                             int reps) {
  *gbs = -1.0;
  *p2p = false;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2 || src == dst || src < 0 || dst < 0 ||
      src >= n || dst >= n)
    return ng__err(NG_ERR_UNSUPPORTED, "peer copies need two visible CUDA devices (%d visible)", n);
  int can = 0;
  (void)cudaDeviceCanAccessPeer(&can, src, dst);
  void *a = nullptr, *b = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaError_t err = cudaSetDevice(dst);
  if (err == cudaSuccess && can) {
    err = cudaDeviceEnablePeerAccess(src, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled)
      err = cudaSuccess;
    (void)cudaGetLastError();
  }
  if (err == cudaSuccess)
    err = cudaMalloc(&b, bytes);
  if (err == cudaSuccess)
    err = cudaSetDevice(src);
  if (err == cudaSuccess && can) {
    err = cudaDeviceEnablePeerAccess(dst, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled)
      err = cudaSuccess;
    (void)cudaGetLastError();
  }
  if (err == cudaSuccess)
    err = cudaMalloc(&a, bytes);
  if (err == cudaSuccess)
    err = cudaEventCreate(&e0);
  if (err == cudaSuccess)
    err = cudaEventCreate(&e1);
  float best = 0.0f;
  for (int r = -1; r < reps && err == cudaSuccess; r++) { /* r = -1: the warm-up */
    float ms = 0.0f;
    err = cudaEventRecord(e0, 0);
    if (err == cudaSuccess)
      err = cudaMemcpyPeerAsync(b, dst, a, src, bytes, 0);
    if (err == cudaSuccess)
      err = cudaEventRecord(e1, 0);
    if (err == cudaSuccess)
      err = cudaEventSynchronize(e1);
    if (err == cudaSuccess)
      err = cudaEventElapsedTime(&ms, e0, e1);
    if (err == cudaSuccess && r >= 0 && (best == 0.0f || ms < best))
      best = ms;
  }
  if (e0)
    (void)cudaEventDestroy(e0);
  if (e1)
    (void)cudaEventDestroy(e1);
  (void)cudaFree(a);
  (void)cudaSetDevice(dst);
  (void)cudaFree(b);
  (void)cudaSetDevice(src);
  if (err != cudaSuccess)
    return ng__err(NG_ERR_CUDA, "peer copy %d -> %d: %s", src, dst, cudaGetErrorString(err));
  *gbs = best > 0.0f ? (double)bytes / ((double)best * 1e-3) * 1e-9 : -1.0;
  *p2p = can != 0;
  return NG_OK;
}
