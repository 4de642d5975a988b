/* The C face of the CUDA backend: the only header of gpu/ the rest of neargnn includes.
 * It names no CUDA type. Everything here exists only when NG_HAVE_CUDA is defined. */
#ifndef NG_CUDA_H
#define NG_CUDA_H

#include "backend_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Number of CUDA devices visible (0 when none, or no driver: that is not an error) and a
/// one-line description of each, separated by "; ", into `desc` of `cap` bytes.
ng_status ng__cuda_devices(int *count, char *desc, size_t cap);

/// The CUDA backend (gpu/backend_cuda.cu) on device `device`: every op of backend_impl.h on
/// device memory, queued on one stream the backend owns. gather_rows's table may also be host
/// memory registered for zero-copy access (cudaHostRegister with cudaHostRegisterMapped, or
/// cudaHostAlloc with cudaHostAllocMapped): the kernel dereferences the pointer as given, which
/// unified addressing makes valid on the device. See docs/gpu.md.
ng_status ng__backend_cuda_create(ng_backend **out, int device);

/// Pins `bytes` of host memory at `ptr` and maps it for the devices (cudaHostRegisterMapped, plus
/// cudaHostRegisterReadOnly with `read_only`, which a read-only mapping needs), so that the CUDA
/// backend's kernels can read it directly (its host_view op gives the pointer they use); undo
/// with ng__cuda_host_unregister.
ng_status ng__cuda_host_register(void *ptr, size_t bytes, bool read_only);

/// The bandwidth of a device-to-device copy of `bytes` from device `src` to device `dst`
/// (cudaMemcpyPeerAsync, peer access enabled where the devices allow it; the best of `reps`
/// after a warm-up), in GB/s (1e9 B), and whether the copy went peer to peer (NVLink or PCIe
/// P2P) rather than through host memory. NG_ERR_UNSUPPORTED with fewer than two devices.
ng_status ng__cuda_peer_bandwidth(double *gbs, bool *p2p, int src, int dst, size_t bytes, int reps);
ng_status ng__cuda_host_unregister(void *ptr);

/// Benchmark and parity hook: aggr_fwd of built-in `name` ("sum", "mean", "max", "min") through
/// the gather-aggregate template (gpu/agg_template.h), instantiated at build time from the
/// built-in's NG_AGGREGATOR_SOURCE text; `ag` gives only the edge weights (no self loop). The
/// kernel aggr_fwd runs (for max and min: the one it runs without argbest).
ng_status ng__cuda_template_builtin_fwd(ng_backend *be, const char *name, const ng_aggr *ag,
                                        const ng_block *blk, const float *src, int64_t dim,
                                        float *dst);
/// Test hook: the registers a thread, the bytes of local memory a thread (spills) and the
/// resident blocks an SM (256 threads a block) of built-in `name`'s widest forward instance
/// (V = 4, T = 8: 1024-wide rows), from fp32 or bf16 rows ("sum", "max", "min"), with or without
/// input dropout, or (`argbest`: "max", "min", fp32 rows, no dropout) the forward that writes
/// argbest, on the current device.
ng_status ng__cuda_template_occupancy(const char *name, bool bf16, bool drop, bool argbest,
                                      int *blocks_per_sm, int *registers, int *spill_bytes);
/// Test hook: the products gemm_bias_act has run through cuBLASLt's epilogue so far, in this
/// process (the others ran in two passes).
int64_t ng__cuda_lt_products(void);
/// Test hook: how many times side_begin forked backend `be`'s side stream (0 with
/// NG_CUDA_SIDE=0, which runs the side's ops on the ops stream); -1 for a backend not CUDA's.
int64_t ng__cuda_side_forks(ng_backend *be);
/// The NG_AGGREGATOR_SOURCE text of built-in `name` ("sum", "mean", "max", "min"), or NULL.
const char *ng__cuda_builtin_agg_source(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* NG_CUDA_H */
