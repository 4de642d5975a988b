/* The CUDA backend's all-reduce over NCCL (docs/distributed.md). NCCL is loaded at run time
 * (dlopen), so that building neargnn needs no NCCL: the few calls and types used are declared
 * here, as nccl.h (NCCL 2.x, ABI-stable) declares them. The library is found at
 *   1. $NG_NCCL_LIBRARY (a path to libnccl.so.2), else
 *   2. the loader's search path: libnccl.so.2 (LD_LIBRARY_PATH, the system's folders).
 * PyTorch's wheels carry it in site-packages/nvidia/nccl/lib/libnccl.so.2.
 *
 * Before the first NCCL call, unless the user set them: NCCL_NVLS_ENABLE=0 (NVLink SHARP
 * multicast off: it needs the fabric manager's multicast support, which the machines this runs
 * on do not give), NCCL_ALGO=Ring and NCCL_PROTO=Simple (one reduction order for a given rank
 * count, so the summed gradients are the same bits run after run). */
#include "backend_cuda_impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

namespace ng_cuda {

namespace {

/* ---- the NCCL ABI (nccl.h) ---- */
typedef struct ncclComm *ncclComm_t;
struct ncclUniqueId {
  char internal[NG_DIST_ID_BYTES];
};
typedef int ncclResult_t; /* ncclSuccess = 0 */
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

struct nccl_api {
  void *lib;
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char *(*error_string)(ncclResult_t);
  ncclResult_t (*get_version)(int *);
  char path[512];
};

nccl_api g_nccl; /* loaded once per process, never unloaded */

constexpr int kTimed = 8; /* all-reduces whose events are kept unread at once */

ng_status nccl_fail(const char *what, ncclResult_t r) {
  return ng__err(NG_ERR_CUDA, "NCCL: %s failed: %s (code %d)", what,
                 g_nccl.error_string ? g_nccl.error_string(r) : "?", (int)r);
}

/* The settings named at the top, where the user left them unset. */
void nccl_env() {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("NCCL_ALGO", "Ring", 0);
  setenv("NCCL_PROTO", "Simple", 0);
}

ng_status load() {
  if (g_nccl.lib)
    return NG_OK;
  const char *env = getenv("NG_NCCL_LIBRARY");
  const char *name = env && *env ? env : "libnccl.so.2";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return ng__err(
        NG_ERR_UNSUPPORTED,
        "NCCL: cannot load %s (%s)%s: several GPUs need NCCL. Point NG_NCCL_LIBRARY at "
        "libnccl.so.2 (PyTorch's wheels have it: "
        "python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))'"
        "/lib/libnccl.so.2) or add its folder to LD_LIBRARY_PATH",
        name, dlerror(), env && *env ? " (NG_NCCL_LIBRARY)" : "");
  nccl_api a = {};
  a.lib = lib;
  bool ok = true;
#define SYM(field, sym)                                                                            \
  do {                                                                                             \
    *reinterpret_cast<void **>(&a.field) = dlsym(lib, sym);                                        \
    ok = ok && a.field != nullptr;                                                                 \
  } while (0)
  SYM(get_unique_id, "ncclGetUniqueId");
  SYM(comm_init_rank, "ncclCommInitRank");
  SYM(all_reduce, "ncclAllReduce");
  SYM(comm_destroy, "ncclCommDestroy");
  SYM(error_string, "ncclGetErrorString");
  SYM(get_version, "ncclGetVersion");
#undef SYM
  if (!ok) {
    dlclose(lib);
    return ng__err(NG_ERR_UNSUPPORTED,
                   "NCCL: %s lacks one of ncclGetUniqueId, ncclCommInitRank, "
                   "ncclAllReduce, ncclCommDestroy, ncclGetErrorString, "
                   "ncclGetVersion: is it NCCL 2?",
                   name);
  }
  snprintf(a.path, sizeof a.path, "%s", name);
  g_nccl = a;
  return NG_OK;
}

} // namespace

struct nccl_state {
  ncclComm_t comm;
  int rank, ranks;
  cudaEvent_t start[kTimed], end[kTimed];
  bool pending[kTimed];
  int64_t queued; /* all-reduces queued; slot = queued % kTimed */
  double ms;      /* harvested since the last allreduce_time */
  int64_t count;
};

__global__ void k_scale(float *x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = __fmul_rn(x[i], s);
}

static ng_status harvest(nccl_state *s, int k) {
  if (!s->pending[k])
    return NG_OK;
  float ms = 0.0f;
  CU_CHECK("allreduce", cudaEventSynchronize(s->end[k]));
  CU_CHECK("allreduce", cudaEventElapsedTime(&ms, s->start[k], s->end[k]));
  s->pending[k] = false;
  s->ms += ms;
  s->count++;
  return NG_OK;
}

ng_status cuda_dist_id(ng_backend *be, void *id) {
  NG_CHECK(use(be, "dist_id"));
  nccl_env();
  NG_CHECK(load());
  if (!id)
    return NG_OK;
  ncclUniqueId u;
  ncclResult_t r = g_nccl.get_unique_id(&u);
  if (r != 0)
    return nccl_fail("ncclGetUniqueId", r);
  memcpy(id, u.internal, NG_DIST_ID_BYTES);
  return NG_OK;
}

ng_status cuda_dist_init(ng_backend *be, const void *id, int rank, int ranks) {
  cuda_ctx *c = ctx_of(be);
  if (c->nccl)
    return ng__err(NG_ERR_STATE, "dist_init: this backend is in a device communicator already");
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return ng__err(NG_ERR_INVALID_ARG, "dist_init: rank %d of %d", rank, ranks);
  NG_CHECK(use(be, "dist_init"));
  nccl_env();
  NG_CHECK(load());
  nccl_state *s = static_cast<nccl_state *>(ng__calloc(1, sizeof(nccl_state), "NCCL state"));
  if (!s)
    return NG_ERR_NOMEM;
  s->rank = rank;
  s->ranks = ranks;
  for (int k = 0; k < kTimed; k++) {
    cudaError_t e = cudaEventCreate(&s->start[k]);
    if (e == cudaSuccess)
      e = cudaEventCreate(&s->end[k]);
    if (e != cudaSuccess) {
      c->nccl = s; /* nccl_release frees what exists */
      nccl_release(c);
      return cuda_err("dist_init", "cudaEventCreate", e);
    }
  }
  ncclUniqueId u;
  memcpy(u.internal, id, NG_DIST_ID_BYTES);
  ncclResult_t r = g_nccl.comm_init_rank(&s->comm, ranks, u, rank);
  c->nccl = s;
  if (r != 0) {
    s->comm = nullptr;
    nccl_release(c);
    return nccl_fail("ncclCommInitRank", r);
  }
  return NG_OK;
}

ng_status cuda_allreduce(ng_backend *be, float *x, int64_t n, float scale) {
  cuda_ctx *c = ctx_of(be);
  nccl_state *s = c->nccl;
  if (!s)
    return ng__err(NG_ERR_STATE, "allreduce: no device communicator (dist_init)");
  if (n <= 0)
    return NG_OK;
  NG_CHECK(use(be, "allreduce"));
  const int k = (int)(s->queued % kTimed);
  NG_CHECK(harvest(s, k));
  CU_CHECK("allreduce", cudaEventRecord(s->start[k], c->stream));
  if (scale != 1.0f) {
    k_scale<<<grid_1d(n), kThreads, 0, c->stream>>>(x, n, scale);
    LAUNCH_CHECK("allreduce");
  }
  ncclResult_t r = g_nccl.all_reduce(x, x, (size_t)n, kNcclFloat32, kNcclSum, s->comm, c->stream);
  if (r != 0)
    return nccl_fail("ncclAllReduce", r);
  CU_CHECK("allreduce", cudaEventRecord(s->end[k], c->stream));
  s->pending[k] = true;
  s->queued++;
  return NG_OK;
}

ng_status cuda_allreduce_time(ng_backend *be, double *ms, int64_t *count) {
  nccl_state *s = ctx_of(be)->nccl;
  *ms = 0.0;
  *count = 0;
  if (!s)
    return NG_OK;
  NG_CHECK(use(be, "allreduce_time"));
  for (int k = 0; k < kTimed; k++)
    NG_CHECK(harvest(s, k));
  *ms = s->ms;
  *count = s->count;
  s->ms = 0.0;
  s->count = 0;
  return NG_OK;
}

void nccl_release(cuda_ctx *c) {
  nccl_state *s = c->nccl;
  if (!s)
    return;
  if (c->ops_stream)
    (void)cudaStreamSynchronize(c->ops_stream);
  if (s->comm)
    (void)g_nccl.comm_destroy(s->comm);
  for (int k = 0; k < kTimed; k++) {
    if (s->start[k])
      (void)cudaEventDestroy(s->start[k]);
    if (s->end[k])
      (void)cudaEventDestroy(s->end[k]);
  }
  free(s);
  c->nccl = nullptr;
}

} // namespace ng_cuda
