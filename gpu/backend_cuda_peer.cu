/* The CUDA backend's partitioned hot tier (docs/distributed.md, "The feature cache across
 * GPUs"): the hot rows [0, R x H) are striped over the R GPUs of a host (row g in part g % R, at
 * row g / R), each GPU exports its part by CUDA IPC, opens its peers' parts, and gathers the
 * rows an iteration reads from the parts that hold them, over NVLink or PCIe peer-to-peer. */
#include "backend_cuda_impl.h"

#include <string.h>

namespace ng_cuda {

static_assert(sizeof(cudaIpcMemHandle_t) == NG_IPC_HANDLE_BYTES,
              "NG_IPC_HANDLE_BYTES must be the size of cudaIpcMemHandle_t");

namespace {

struct parts_arg {
  const void *p[NG_MAX_PARTS];
};

/* V consecutive values of a row as fp32: fp32 as they are, bf16 converted exactly (the top half
 * of each fp32's bits; little-endian, value 0 in the low half of a word). */
template <int V, bool B16> __device__ inline void ld_row(float *o, const void *row, int64_t j) {
  if constexpr (B16)
    ld<V>(o, static_cast<const uint16_t *>(row) + j);
  else
    ld<V>(o, static_cast<const float *>(row) + j);
}

/* A warp a row: dst[i] = row ids[i] of the striped table, dropped as aggr_partial drops element
 * (ids[i], c) of a table (kept values x * scale, rounded once). */
template <int V, bool B16>
__global__ void k_gather_parts(float *__restrict__ dst, parts_arg parts, int n_parts,
                               const int64_t *__restrict__ ids, int64_t n, int64_t dim, bool drop,
                               uint64_t key, uint32_t threshold, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  const size_t elem = B16 ? sizeof(uint16_t) : sizeof(float);
  for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; i < n; i += warps) {
    const int64_t g = ids[i];
    const char *row =
        static_cast<const char *>(parts.p[g % n_parts]) + (size_t)(g / n_parts) * dim * elem;
    float *out = dst + i * dim;
    const uint64_t base = (uint64_t)(g * dim);
    for (int64_t j = (int64_t)lane * V; j < dim; j += 32 * V) {
      float v[V];
      ld_row<V, B16>(v, row, j);
      if (drop)
#pragma unroll
        for (int k = 0; k < V; k++)
          v[k] = ng_dropout_keep(key, base + j + k, threshold) ? __fmul_rn(v[k], scale) : 0.0f;
      st<V>(out + j, v);
    }
  }
}

} // namespace

ng_status cuda_gather_parts(ng_backend *be, float *dst, const void *const *parts, int n_parts,
                            bool bf16, const int64_t *ids, int64_t n, int64_t dim, float drop_p,
                            uint64_t drop_key) {
  if (n_parts < 1 || n_parts > NG_MAX_PARTS)
    return ng__err(NG_ERR_INVALID_ARG, "gather_parts: %d parts is outside [1, %d]", n_parts,
                   NG_MAX_PARTS);
  if (n <= 0 || dim <= 0)
    return NG_OK;
  NG_CHECK(use(be, "gather_parts"));
  parts_arg a;
  memset(&a, 0, sizeof a);
  bool v4 = dim % 4 == 0 && aligned16(dst);
  for (int p = 0; p < n_parts; p++) {
    a.p[p] = parts[p];
    v4 = v4 && ((uintptr_t)parts[p] & (bf16 ? 7u : 15u)) == 0;
  }
  const bool drop = drop_p > 0.0f;
  const uint32_t threshold = drop ? ng_dropout_threshold(drop_p) : 0;
  const float scale = drop ? 1.0f / (1.0f - drop_p) : 1.0f;
  const unsigned blocks = (unsigned)NG_MAX(
      (int64_t)1, NG_MIN((n + kWarpsPerBlock - 1) / kWarpsPerBlock, (int64_t)kMaxGridX));
  cudaStream_t s = ctx_of(be)->stream;
#define NG_GATHER_PARTS(V, B)                                                                      \
  k_gather_parts<V, B>                                                                             \
      <<<blocks, kThreads, 0, s>>>(dst, a, n_parts, ids, n, dim, drop, drop_key, threshold, scale)
  if (v4 && bf16)
    NG_GATHER_PARTS(4, true);
  else if (v4)
    NG_GATHER_PARTS(4, false);
  else if (bf16)
    NG_GATHER_PARTS(1, true);
  else
    NG_GATHER_PARTS(1, false);
#undef NG_GATHER_PARTS
  LAUNCH_CHECK("gather_parts");
  return NG_OK;
}

ng_status cuda_ipc_export(ng_backend *be, const void *ptr, void *handle) {
  NG_CHECK(use(be, "ipc_export"));
  cudaIpcMemHandle_t h;
  CU_CHECK("ipc_export", cudaIpcGetMemHandle(&h, const_cast<void *>(ptr)));
  memcpy(handle, &h, sizeof h);
  return NG_OK;
}

ng_status cuda_ipc_open(ng_backend *be, const void *handle, const char *peer_pci, void **ptr) {
  NG_CHECK(use(be, "ipc_open"));
  *ptr = nullptr;
  const int mine = ctx_of(be)->device;
  int peer = -1;
  if (peer_pci && *peer_pci && cudaDeviceGetByPCIBusId(&peer, peer_pci) != cudaSuccess) {
    (void)cudaGetLastError(); /* not visible here (CUDA_VISIBLE_DEVICES): the open tells */
    peer = -1;
  }
  if (peer >= 0 && peer != mine) {
    int can = 0;
    CU_CHECK("ipc_open", cudaDeviceCanAccessPeer(&can, mine, peer));
    if (!can)
      return ng__err(NG_ERR_UNSUPPORTED,
                     "ipc_open: device %d cannot access device %d (%s) peer-to-peer", mine, peer,
                     peer_pci);
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else if (e != cudaSuccess)
      return ng__err(NG_ERR_UNSUPPORTED, "ipc_open: enabling peer access to device %d (%s): %s",
                     peer, peer_pci, cudaGetErrorString(e));
  }
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  void *p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return ng__err(
        NG_ERR_UNSUPPORTED, "ipc_open: cudaIpcOpenMemHandle of device %s failed: %s (%s)",
        peer_pci && *peer_pci ? peer_pci : "?", cudaGetErrorName(e), cudaGetErrorString(e));
  }
  *ptr = p;
  return NG_OK;
}

void cuda_ipc_close(ng_backend *be, void *ptr) {
  if (!ptr || use(be, "ipc_close") != NG_OK)
    return;
  (void)cudaIpcCloseMemHandle(ptr);
}

} // namespace ng_cuda
