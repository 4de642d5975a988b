/* The CUDA backend: its lifetime, memory, copies (the copy streams and marks), zero-copy host
 * memory and the ops table, on one stream the backend owns (see docs/gpu.md). The op families
 * live beside it (backend_cuda_aggr.cu, backend_cuda_dense.cu, backend_cuda_loss.cu); what they
 * share, and the rules they keep, is backend_cuda_impl.h. */
#include "backend_cuda_impl.h"

#include <sys/mman.h>

namespace ng_cuda {

/* ---- kernels: memory ---- */

__global__ void k_fill(float *x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = value;
}

/* ---- lifetime and memory ---- */

void release(cuda_ctx *c) {
  if (!c)
    return;
  cuda_warm_join(c);
  /* Teardown errors cannot be reported (destroy returns nothing); each call is independent. */
  if (c->ops_stream)
    (void)cudaStreamSynchronize(c->ops_stream);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->copy_stream[k])
      (void)cudaStreamSynchronize(c->copy_stream[k]);
  if (c->side_stream)
    (void)cudaStreamSynchronize(c->side_stream);
  nccl_release(c);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->marks[k])
      (void)cudaEventDestroy(c->marks[k]);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->copied[k])
      (void)cudaEventDestroy(c->copied[k]);
  for (int k = 0; k < NG_XENT_QUEUE; k++)
    if (c->xent_done[k])
      (void)cudaEventDestroy(c->xent_done[k]);
  for (int k = 0; k < NG_BACKEND_EVENTS; k++)
    if (c->timing[k])
      (void)cudaEventDestroy(c->timing[k]);
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    if (c->copy_stream[k])
      (void)cudaStreamDestroy(c->copy_stream[k]);
  for (int k = 0; k < kGemmGraphs; k++)
    if (c->gemms[k].exec)
      (void)cudaGraphExecDestroy(c->gemms[k].exec);
  if (c->blas)
    (void)cublasDestroy(c->blas);
  if (c->blas_side)
    (void)cublasDestroy(c->blas_side);
  if (c->side_fork)
    (void)cudaEventDestroy(c->side_fork);
  if (c->side_done)
    (void)cudaEventDestroy(c->side_done);
  if (c->side_stream)
    (void)cudaStreamDestroy(c->side_stream);
  if (c->blas_lt)
    (void)cublasLtDestroy(c->blas_lt);
  (void)cudaFree(c->scratch);
  (void)cudaFree(c->row_loss);
  (void)cudaFree(c->d_res);
  (void)cudaFree(c->d_unread_bad);
  (void)cudaFreeHost(c->h_res);
  if (c->ops_stream)
    (void)cudaStreamDestroy(c->ops_stream);
  free(c);
  /* A teardown error stays in the thread's last-error state, where the next kernel launch's
   * LAUNCH_CHECK (cudaGetLastError) would report it as its own: after a creation that failed
   * half-way with the device out of memory, the next backend's first fill failed with "invalid
   * resource handle" (tests/test_gpu_faults.c). Drop it. */
  (void)cudaGetLastError();
}

void cuda_destroy(ng_backend *be) {
  if (ctx_of(be))
    (void)cudaSetDevice(ctx_of(be)->device);
  release(ctx_of(be));
  free(be);
}

ng_status cuda_alloc(ng_backend *be, void **out, size_t bytes) {
  *out = NULL;
  NG_CHECK(use(be, "alloc"));
  /* A zero-byte request still gets a distinct, freeable pointer, as on the CPU backend. */
  cudaError_t err = cudaMalloc(out, NG_MAX(bytes, (size_t)1));
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); /* not sticky: clear it so that later calls do not see it */
    *out = NULL;
    return ng__err(NG_ERR_NOMEM,
                   "alloc: out of device memory allocating %zu bytes on CUDA device %d; use "
                   "smaller batches or a GPU with more memory",
                   bytes, ctx_of(be)->device);
  }
  if (err != cudaSuccess) {
    *out = NULL;
    return cuda_err("alloc", "cudaMalloc", err);
  }
  return NG_OK;
}

void cuda_free(ng_backend *be, void *ptr) {
  if (!ptr)
    return;
  (void)cudaSetDevice(ctx_of(be)->device);
  (void)cudaFree(ptr); /* free returns nothing; a failure here leaves a sticky error to report */
}

ng_status cuda_copy(ng_backend *be, const char *op, void *dst, const void *src, size_t bytes,
                    bool wait) {
  NG_CHECK(use(be, op));
  cuda_ctx *c = ctx_of(be);
  CU_CHECK(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream));
  if (wait)
    CU_CHECK(op, cudaStreamSynchronize(c->stream));
  return NG_OK;
}

/* Host-to-device copies wait as well: the caller may reuse the host buffer on return (a
 * pinned source would otherwise still be read by the DMA engine). */
ng_status cuda_copy_h2d(ng_backend *be, void *dst, const void *host_src, size_t bytes) {
  return cuda_copy(be, "copy_h2d", dst, host_src, bytes, true);
}

/* The copy waits on the copy stream for the slot's mark and records the slot's event; the op
 * stream waits for that event only at wait_copy, so the copy overlaps the ops in between. */
ng_status cuda_copy_h2d_async(ng_backend *be, void *dst, const void *host_src, size_t bytes,
                              int slot) {
  NG_CHECK(use(be, "copy_h2d_async"));
  cuda_ctx *c = ctx_of(be);
  CU_CHECK("copy_h2d_async", cudaStreamWaitEvent(c->copy_stream[slot], c->marks[slot], 0));
  if (bytes > 0)
    CU_CHECK("copy_h2d_async",
             cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->copy_stream[slot]));
  CU_CHECK("copy_h2d_async", cudaEventRecord(c->copied[slot], c->copy_stream[slot]));
  return NG_OK;
}

ng_status cuda_wait_copy(ng_backend *be, int slot) {
  NG_CHECK(use(be, "wait_copy"));
  cuda_ctx *c = ctx_of(be);
  CU_CHECK("wait_copy", cudaStreamWaitEvent(c->stream, c->copied[slot], 0));
  return NG_OK;
}

ng_status cuda_copy_ops_begin(ng_backend *be, int slot) {
  cuda_ctx *c = ctx_of(be);
  if (c->copy_ops_slot >= 0)
    return ng__err(NG_ERR_STATE, "copy_ops_begin: slot %d's copy ops have not ended",
                   c->copy_ops_slot);
  if (c->side_open)
    return ng__err(NG_ERR_STATE, "copy_ops_begin: the side queue is open (side_end first)");
  NG_CHECK(use(be, "copy_ops_begin"));
  c->copy_ops_slot = slot;
  c->stream = c->copy_stream[slot];
  return NG_OK;
}

ng_status cuda_copy_ops_end(ng_backend *be, int slot) {
  cuda_ctx *c = ctx_of(be);
  if (slot != c->copy_ops_slot)
    return ng__err(NG_ERR_STATE, "copy_ops_end: slot %d has no copy ops begun", slot);
  c->copy_ops_slot = -1;
  c->stream = c->ops_stream;
  NG_CHECK(use(be, "copy_ops_end"));
  CU_CHECK("copy_ops_end", cudaEventRecord(c->copied[slot], c->copy_stream[slot]));
  return NG_OK;
}

/* A cuBLAS handle bound to stream `s`: fp32 stays fp32 (blas_math) and atomics stay disallowed (the
 * default), so products are reproducible run to run. On failure *h is NULL (the out parameter's
 * contents are not specified then) and *what names the call. */
static cublasStatus_t blas_make(cublasHandle_t *h, cudaStream_t s, bool tf32, const char **what) {
  cublasStatus_t st = cublasCreate(h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    *h = nullptr;
    *what = "cublasCreate";
    return st;
  }
  if ((st = cublasSetStream(*h, s)) != CUBLAS_STATUS_SUCCESS)
    *what = "cublasSetStream";
  else if ((st = cublasSetMathMode(*h, blas_math(tf32))) != CUBLAS_STATUS_SUCCESS)
    *what = "cublasSetMathMode";
  else if ((st = cublasSetAtomicsMode(*h, CUBLAS_ATOMICS_NOT_ALLOWED)) != CUBLAS_STATUS_SUCCESS)
    *what = "cublasSetAtomicsMode";
  if (st != CUBLAS_STATUS_SUCCESS) {
    (void)cublasDestroy(*h);
    *h = nullptr;
  }
  return st;
}

/* The side queue, made on its first use: most backends never open it (serving, inference). Its
 * cuBLAS handle has the ops handle's settings; cuBLAS picks the same kernel for a call on
 * either, so a product has the same bits on both queues. */
static ng_status side_make(cuda_ctx *c) {
  if (c->side_stream)
    return NG_OK;
  cudaStream_t s = nullptr;
  cudaEvent_t fork = nullptr, done = nullptr;
  cublasHandle_t h = nullptr;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess)
    s = nullptr;
  if (err == cudaSuccess &&
      (err = cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)) != cudaSuccess)
    fork = nullptr;
  if (err == cudaSuccess &&
      (err = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) != cudaSuccess)
    done = nullptr;
  cublasStatus_t bst = CUBLAS_STATUS_SUCCESS;
  const char *what = "";
  if (err == cudaSuccess)
    bst = blas_make(&h, s, c->tf32, &what);
  if (err == cudaSuccess && bst == CUBLAS_STATUS_SUCCESS) {
    c->side_stream = s;
    c->side_fork = fork;
    c->side_done = done;
    c->blas_side = h;
    return NG_OK;
  }
  if (done)
    (void)cudaEventDestroy(done);
  if (fork)
    (void)cudaEventDestroy(fork);
  if (s)
    (void)cudaStreamDestroy(s);
  if (err != cudaSuccess)
    return cuda_err("side_begin", "making the side queue", err);
  return blas_err("side_begin", what, bst);
}

ng_status cuda_side_begin(ng_backend *be) {
  cuda_ctx *c = ctx_of(be);
  if (c->copy_ops_slot >= 0)
    return ng__err(NG_ERR_STATE, "side_begin: slot %d's copy ops have not ended", c->copy_ops_slot);
  if (c->side_open)
    return ng__err(NG_ERR_STATE, "side_begin: the side queue is open already");
  NG_CHECK(use(be, "side_begin"));
  /* The side queue only lets work overlap: where it cannot be made (out of memory for a stream
   * or a handle), its ops run on the ops stream, as with NG_CUDA_SIDE=0. */
  if (!c->side_off && side_make(c) != NG_OK) {
    (void)cudaGetLastError();
    c->side_off = true;
  }
  if (!c->side_off) {
    CU_CHECK("side_begin", cudaEventRecord(c->side_fork, c->ops_stream));
    CU_CHECK("side_begin", cudaStreamWaitEvent(c->side_stream, c->side_fork, 0));
    c->stream = c->side_stream;
    c->side_forks++;
  }
  c->side_open = true;
  return NG_OK;
}

ng_status cuda_side_end(ng_backend *be) {
  cuda_ctx *c = ctx_of(be);
  if (!c->side_open)
    return ng__err(NG_ERR_STATE, "side_end: the side queue is not open");
  c->side_open = false;
  if (c->side_off)
    return NG_OK;
  c->stream = c->ops_stream;
  NG_CHECK(use(be, "side_end"));
  const cudaError_t err = cudaEventRecord(c->side_done, c->side_stream);
  if (err != cudaSuccess) { /* nothing to join on: the side's ops are waited for here */
    (void)cudaStreamSynchronize(c->side_stream);
    return cuda_err("side_end", "cudaEventRecord", err);
  }
  c->side_pending = true;
  return NG_OK;
}

ng_status cuda_side_join(ng_backend *be) {
  cuda_ctx *c = ctx_of(be);
  if (c->side_open)
    return ng__err(NG_ERR_STATE, "side_join: the side queue is still open (side_end first)");
  if (!c->side_pending)
    return NG_OK;
  NG_CHECK(use(be, "side_join"));
  CU_CHECK("side_join", cudaStreamWaitEvent(c->ops_stream, c->side_done, 0));
  c->side_pending = false;
  return NG_OK;
}

ng_status cuda_mark(ng_backend *be, int k) {
  NG_CHECK(use(be, "mark"));
  CU_CHECK("mark", cudaEventRecord(ctx_of(be)->marks[k], ctx_of(be)->stream));
  return NG_OK;
}

ng_status cuda_wait_mark(ng_backend *be, int k) {
  NG_CHECK(use(be, "wait_mark"));
  CU_CHECK("wait_mark", cudaEventSynchronize(ctx_of(be)->marks[k]));
  return NG_OK;
}

ng_status cuda_event_record(ng_backend *be, int k) {
  NG_CHECK(use(be, "event_record"));
  cuda_ctx *c = ctx_of(be);
  if (!c->timing[k])
    CU_CHECK("event_record", cudaEventCreate(&c->timing[k]));
  CU_CHECK("event_record", cudaEventRecord(c->timing[k], c->ops_stream));
  return NG_OK;
}

ng_status cuda_event_elapsed(ng_backend *be, int a, int b, double *ms) {
  cuda_ctx *c = ctx_of(be);
  if (!c->timing[a] || !c->timing[b]) /* the front checked the range */
    return ng__err(NG_ERR_INVALID_ARG, "event_elapsed: events %d, %d not recorded", a, b);
  NG_CHECK(use(be, "event_elapsed"));
  CU_CHECK("event_elapsed", cudaEventSynchronize(c->timing[b]));
  float t = 0.0f;
  CU_CHECK("event_elapsed", cudaEventElapsedTime(&t, c->timing[a], c->timing[b]));
  *ms = t;
  return NG_OK;
}

ng_status cuda_copy_d2h(ng_backend *be, void *host_dst, const void *src, size_t bytes) {
  return cuda_copy(be, "copy_d2h", host_dst, src, bytes, true);
}

ng_status cuda_copy_d2d(ng_backend *be, void *dst, const void *src, size_t bytes) {
  return cuda_copy(be, "copy_d2d", dst, src, bytes, false);
}

ng_status cuda_fill(ng_backend *be, float *x, int64_t n, float value) {
  NG_CHECK(use(be, "fill"));
  k_fill<<<grid_1d(n), kThreads, 0, ctx_of(be)->stream>>>(x, n, value);
  LAUNCH_CHECK("fill");
  return NG_OK;
}

ng_status cuda_mem_info(ng_backend *be, size_t *free_bytes, size_t *total) {
  NG_CHECK(use(be, "mem_info"));
  size_t f = 0, t = 0;
  CU_CHECK("mem_info", cudaMemGetInfo(&f, &t));
  if (free_bytes)
    *free_bytes = f;
  if (total)
    *total = t;
  return NG_OK;
}

/* Page-locked host memory. cudaHostAlloc pins at about 1.1 GB/s, and its calls serialise in the
 * driver however many threads allocate (H100 machine: 4 GiB in 64 MiB pieces took 3.7-4.0 s,
 * serial or from 15 threads), while memory from the kernel in 2 MiB pages, touched and then
 * registered, took 1.66 s serial and 0.30 s from 15 threads (eval/results). The runtime's
 * workers grow their staging slots during the first epoch, so pinning was most of it (8.3 s
 * against 0.9 s for a steady W4 epoch). Large buffers therefore come from huge pages and
 * cudaHostRegister, small ones from cudaHostAlloc. A header page before the caller's bytes
 * records which, for host_free. */
constexpr size_t kPinHeader = 4096;             // keeps the caller's bytes aligned to 4 KiB
constexpr size_t kPinHugeMin = (size_t)4 << 20; // below this, cudaHostAlloc
constexpr size_t kHugePage = (size_t)2 << 20;
constexpr uint64_t kPinMagic = 0x6e6770696e6e6564ULL; // "ngpinned"

struct pin_header {
  uint64_t magic;
  uint64_t total; // bytes of the whole region, header included
  int huge;       // 1: mmap + cudaHostRegister; 0: cudaHostAlloc
};

/* A region of `total` bytes in 2 MiB pages, faulted in and registered; NULL when any step fails
 * (the caller then falls back to cudaHostAlloc). */
void *pin_huge(size_t total) {
  void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return nullptr;
  (void)madvise(p, total, MADV_HUGEPAGE);
  /* Registration pins every page: fault them in first, a huge page per 2 MiB where the kernel
   * has them. */
  volatile char *c = static_cast<volatile char *>(p);
  for (size_t at = 0; at < total; at += 4096)
    c[at] = 0;
  if (cudaHostRegister(p, total, cudaHostRegisterMapped) != cudaSuccess) {
    (void)cudaGetLastError();
    munmap(p, total);
    return nullptr;
  }
  return p;
}

ng_status cuda_host_alloc(ng_backend *be, void **out, size_t bytes) {
  *out = nullptr;
  NG_CHECK(use(be, "host_alloc"));
  size_t total = NG_MAX(bytes, (size_t)1) + kPinHeader;
  void *p = nullptr;
  int huge = 0;
  if (total >= kPinHugeMin) {
    total = (total + kHugePage - 1) / kHugePage * kHugePage;
    p = pin_huge(total);
    huge = p != nullptr;
  }
  if (!p) {
    total = NG_MAX(bytes, (size_t)1) + kPinHeader;
    const cudaError_t err = cudaHostAlloc(&p, total, cudaHostAllocMapped);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return ng__err(NG_ERR_NOMEM, "host_alloc: cannot page-lock %zu bytes of host memory (%s)",
                     bytes, cudaGetErrorString(err));
    }
  }
  pin_header *h = static_cast<pin_header *>(p);
  h->magic = kPinMagic;
  h->total = total;
  h->huge = huge;
  *out = static_cast<char *>(p) + kPinHeader;
  return NG_OK;
}

void cuda_host_free(ng_backend *be, void *ptr) {
  (void)be;
  if (!ptr)
    return;
  pin_header *h = reinterpret_cast<pin_header *>(static_cast<char *>(ptr) - kPinHeader);
  if (h->magic != kPinMagic)
    return; /* not ours: freeing it would corrupt whatever it is */
  h->magic = 0;
  if (h->huge) {
    /* cudaFreeHost waits for the device; unregistering does not say that it does, and a copy
     * still reading the buffer must finish before its pages go back to the kernel. */
    (void)cudaDeviceSynchronize();
    const size_t total = h->total;
    (void)cudaHostUnregister(h);
    munmap(h, total);
  } else {
    (void)cudaFreeHost(h);
  }
}

ng_status cuda_host_register(ng_backend *be, void *ptr, size_t bytes, bool read_only) {
  NG_CHECK(use(be, "host_register"));
  return ng__cuda_host_register(ptr, bytes, read_only);
}

void cuda_host_unregister(ng_backend *be, void *ptr) {
  (void)be;
  if (ptr)
    (void)ng__cuda_host_unregister(ptr);
}

ng_status cuda_pci_bus_id(ng_backend *be, char *buf, size_t cap) {
  if (cap)
    buf[0] = '\0';
  NG_CHECK(use(be, "pci_bus_id"));
  CU_CHECK("pci_bus_id",
           cudaDeviceGetPCIBusId(buf, (int)NG_MIN(cap, (size_t)INT32_MAX), ctx_of(be)->device));
  return NG_OK;
}

ng_status cuda_host_view(ng_backend *be, const void *host, const void **out) {
  NG_CHECK(use(be, "host_view"));
  void *dev = nullptr;
  cudaError_t err = cudaHostGetDevicePointer(&dev, const_cast<void *>(host), 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: clear it so that later launch checks pass */
    return ng__err(NG_ERR_CUDA,
                   "host_view: host memory at %p is not registered for zero-copy access (%s); "
                   "register it with ng__cuda_host_register first",
                   host, cudaGetErrorString(err));
  }
  *out = dev;
  return NG_OK;
}

/* Both queues: a caller that syncs may then reuse the sources of queued copies. */
ng_status cuda_sync(ng_backend *be) {
  NG_CHECK(use(be, "sync"));
  CU_CHECK("sync", cudaStreamSynchronize(ctx_of(be)->ops_stream));
  for (int k = 0; k < NG_BACKEND_MARKS; k++)
    CU_CHECK("sync", cudaStreamSynchronize(ctx_of(be)->copy_stream[k]));
  if (ctx_of(be)->side_stream)
    CU_CHECK("sync", cudaStreamSynchronize(ctx_of(be)->side_stream));
  return NG_OK;
}

ng_backend_i make_iface() {
  ng_backend_i t = {};
  t.name = "cuda";
  t.host_memory = false;
  t.destroy = cuda_destroy;
  t.alloc = cuda_alloc;
  t.free = cuda_free;
  t.copy_h2d = cuda_copy_h2d;
  t.copy_h2d_async = cuda_copy_h2d_async;
  t.wait_copy = cuda_wait_copy;
  t.mark = cuda_mark;
  t.wait_mark = cuda_wait_mark;
  t.copy_ops_begin = cuda_copy_ops_begin;
  t.copy_ops_end = cuda_copy_ops_end;
  t.side_begin = cuda_side_begin;
  t.side_end = cuda_side_end;
  t.side_join = cuda_side_join;
  t.copy_d2h = cuda_copy_d2h;
  t.copy_d2d = cuda_copy_d2d;
  t.fill = cuda_fill;
  t.sync = cuda_sync;
  t.mem_info = cuda_mem_info;
  t.host_alloc = cuda_host_alloc;
  t.host_free = cuda_host_free;
  t.host_register = cuda_host_register;
  t.host_unregister = cuda_host_unregister;
  t.host_view = cuda_host_view;
  t.event_record = cuda_event_record;
  t.event_elapsed = cuda_event_elapsed;
  t.set_precision = cuda_set_precision;
  t.warm_start = cuda_warm_start;
  t.warm_wait = cuda_warm_wait;
  t.pci_bus_id = cuda_pci_bus_id;
  t.sampler_create = cuda_sampler_create;
  t.sampler_destroy = cuda_sampler_destroy;
  t.sampler_run = cuda_sampler_run;
  t.gather_rows = cuda_gather_rows;
  /* Every forward and partial state, merge and finalize runs the aggregation template (the
   * built-ins' laws are their NG_AGGREGATOR_SOURCE text's); the backward stays specialised. */
  t.aggr_fwd = cuda_tmpl_fwd;
  t.aggr_bwd = cuda_aggr_bwd;
  t.aggr_user_bwd = cuda_aggr_user_bwd;
  t.attn_fwd = cuda_attn_fwd;
  t.attn_bwd = cuda_attn_bwd;
  t.attn_state = cuda_attn_state;
  t.attn_merge = cuda_attn_merge;
  t.aggr_partial = cuda_tmpl_partial;
  t.pstate_merge = cuda_tmpl_merge;
  t.pstate_finalize = cuda_tmpl_finalize;
  t.scatter_rows = cuda_scatter_rows;
  t.aggr_partial_bf16 = cuda_tmpl_partial_bf16;
  t.scatter_rows_bf16 = cuda_scatter_rows_bf16;
  t.add_self_loop = cuda_add_self_loop;
  t.gemm = cuda_gemm;
  t.gemm_bias_act = cuda_gemm_bias_act;
  t.add = cuda_add;
  t.bias_act_fwd = cuda_bias_act_fwd;
  t.bias_act_bwd = cuda_bias_act_bwd;
  t.dropout_fwd = cuda_dropout_fwd;
  t.dropout_bwd = cuda_dropout_bwd;
  t.xent = cuda_xent;
  t.xent_result = cuda_xent_result;
  t.opt_step = cuda_opt_step;
  t.pair_dot = cuda_pair_dot;
  t.dist_id = cuda_dist_id;
  t.dist_init = cuda_dist_init;
  t.allreduce = cuda_allreduce;
  t.allreduce_time = cuda_allreduce_time;
  t.gather_parts = cuda_gather_parts;
  t.ipc_export = cuda_ipc_export;
  t.ipc_open = cuda_ipc_open;
  t.ipc_close = cuda_ipc_close;
  return t;
}

const ng_backend_i CUDA_IFACE = make_iface();

ng_status create(ng_backend **out, int device) {
  int count = 0;
  CU_CHECK("cuda backend", cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return ng__err(NG_ERR_INVALID_ARG,
                   "cuda backend: device %d does not exist (%d CUDA devices visible); pick one in "
                   "[0, %d) or check CUDA_VISIBLE_DEVICES",
                   device, count, count);
  CU_CHECK("cuda backend", cudaSetDevice(device));
  cuda_ctx *c = static_cast<cuda_ctx *>(ng__calloc(1, sizeof(cuda_ctx), "CUDA backend context"));
  ng_backend *be = static_cast<ng_backend *>(ng__calloc(1, sizeof(ng_backend), "CUDA backend"));
  if (!c || !be) {
    free(c);
    free(be);
    return NG_ERR_NOMEM;
  }
  c->device = device;
  const char *graphs_env = getenv("NG_CUDA_GEMM_GRAPHS");
  c->gemm_graphs = !(graphs_env && strcmp(graphs_env, "0") == 0);
  c->lt_min_rows = lt_min_rows_default();
  const char *side_env = getenv("NG_CUDA_SIDE"); /* "0": no side queue, to measure what it saves */
  c->side_off = side_env && strcmp(side_env, "0") == 0;
  ng__backend_init(be, &CUDA_IFACE, c);
  ng_status st = NG_OK;
  cudaError_t err = cudaSuccess;
  cublasStatus_t bst = CUBLAS_STATUS_SUCCESS;
  const char *what = "";
  c->copy_ops_slot = -1;
  /* A handle whose creation failed is not left for release() to use: the out parameter's
   * contents are not specified on failure. */
  if ((err = cudaStreamCreateWithFlags(&c->ops_stream, cudaStreamNonBlocking)) != cudaSuccess)
    c->ops_stream = nullptr;
  for (int k = 0; k < NG_BACKEND_MARKS && err == cudaSuccess; k++)
    if ((err = cudaStreamCreateWithFlags(&c->copy_stream[k], cudaStreamNonBlocking)) != cudaSuccess)
      c->copy_stream[k] = nullptr;
  c->stream = c->ops_stream;
  if (err != cudaSuccess)
    what = "cudaStreamCreateWithFlags";
  else if ((err = cudaMalloc(&c->d_res, NG_XENT_QUEUE * sizeof(xent_result))) != cudaSuccess ||
           (err = cudaMalloc(&c->d_unread_bad, sizeof(int))) != cudaSuccess)
    what = "cudaMalloc";
  else if ((err = cudaMemset(c->d_unread_bad, 0, sizeof(int))) != cudaSuccess)
    what = "cudaMemset";
  else if ((err = cudaMallocHost(&c->h_res, NG_XENT_QUEUE * sizeof(xent_result))) != cudaSuccess)
    what = "cudaMallocHost";
  for (int k = 0; k < NG_XENT_QUEUE && err == cudaSuccess; k++)
    if ((err = cudaEventCreateWithFlags(&c->xent_done[k], cudaEventDisableTiming)) != cudaSuccess) {
      c->xent_done[k] = nullptr;
      what = "cudaEventCreateWithFlags";
    }
  for (int k = 0; k < NG_BACKEND_MARKS && err == cudaSuccess; k++) {
    if ((err = cudaEventCreateWithFlags(&c->marks[k], cudaEventDisableTiming)) != cudaSuccess)
      c->marks[k] = nullptr;
    else if ((err = cudaEventCreateWithFlags(&c->copied[k], cudaEventDisableTiming)) != cudaSuccess)
      c->copied[k] = nullptr;
    if (err != cudaSuccess)
      what = "cudaEventCreateWithFlags";
  }
  if (err != cudaSuccess) {
    st = cuda_err("cuda backend", what, err);
    goto fail;
  }
  bst = blas_make(&c->blas, c->ops_stream, false, &what);
  if (bst == CUBLAS_STATUS_SUCCESS &&
      (bst = cublasLtCreate(&c->blas_lt)) != CUBLAS_STATUS_SUCCESS) {
    c->blas_lt = nullptr; /* not left for release() to destroy */
    what = "cublasLtCreate";
  }
  if (bst != CUBLAS_STATUS_SUCCESS) {
    st = blas_err("cuda backend", what, bst);
    goto fail;
  }
  *out = be;
  return NG_OK;
fail:
  release(c);
  free(be);
  return st;
}

} // namespace ng_cuda

extern "C" int64_t ng__cuda_side_forks(ng_backend *be) {
  if (!be || strcmp(be->iface->name, "cuda") != 0)
    return -1;
  return ng_cuda::ctx_of(be)->side_forks;
}

extern "C" ng_status ng__backend_cuda_create(ng_backend **out, int device) {
  NG_CHECK(ng__bk_check_ptr("cuda backend", "out", out, true));
  *out = nullptr;
  return ng_cuda::create(out, device);
}
