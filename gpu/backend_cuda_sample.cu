/* The CUDA backend's device sampler (sampler_create / sampler_run / sampler_destroy): node-wise
 * uniform sampling without replacement, on the GPU, into the same blocks as cpu/sampler.c, bit
 * for bit. The blocks are then copied to host memory, where the CPU workers take them over: they
 * read (or aggregate near the data) the cold rows of the input layer as if they had sampled the
 * blocks themselves (docs/sampling.md, "Sampling on the GPU").
 *
 * What makes the blocks identical:
 *  - rows: destination v of block l draws from the stream ng_hash3(seed, l, v) with the CPU's
 *    generator (xoshiro256**) and the CPU's draw (Floyd's algorithm over m = min(k, n - k)
 *    positions, the excluded ones when k > n / 2), one thread per destination; the positions
 *    come out sorted, as on the CPU;
 *  - local ids: the CPU numbers new nodes in order of first appearance over the layer's edges.
 *    Here every edge inserts its global id into a hash table and takes the smallest edge
 *    position that names it (integer atomicMin: the result does not depend on the order); an
 *    edge that is the first to name a new node is flagged, and an exclusive scan of the flags
 *    gives each new node its rank, hence its local id;
 *  - GCN weights in double with IEEE division and square root, as the CPU computes them;
 *  - the transpose by a stable radix sort of the edges by source, which keeps each source's
 *    edges in increasing edge order, as the CPU's counting sort does.
 * Only integer atomics are used; the output does not depend on the schedule. */
#include "backend_cuda_impl.h"

#include <cub/cub.cuh>

#include <climits>

namespace ng_cuda {
struct sampler_lane;
}

/* The topology, shared by the lanes; each lane (sampler_lane) has its own stream and memory. */
struct ng_dev_sampler {
  int device;
  int n_lanes;
  ng_cuda::sampler_lane *lanes; // [n_lanes]
  int64_t nodes;
  int64_t *indptr; // [nodes + 1], device
  int32_t *idx32;  // [nnz] (int32 graphs) or NULL
  int64_t *idx64;  // [nnz] (int64 graphs) or NULL
  const ng_csr *graph;
};

namespace ng_cuda {
namespace {

constexpr unsigned long long kEmpty = ~0ull;

/* A device buffer that grows to the largest size asked (contents are not kept). */
struct dbuf {
  void *p;
  size_t cap;
};

/* The sampler's working memory, kept from call to call in the sampler (see sampler_mem). */
struct layer_mem {
  dbuf indptr64, indptr, indices, edge_w, self_w, t_indptr, t_dst, t_eid, edge_dst, sorted_src;
};

struct sampler_mem {
  dbuf targets, node_ids, gid, pos, counts, slot_e, flag, rank, cub_tmp, err, n_dev;
  dbuf keys, vals, first; // the hash table: global id -> local id, first edge position
  size_t table_cap;       // slots (a power of two)
  layer_mem layer[NG_MAX_LAYERS];
  int64_t *h_small; // pinned: counts read back (nnz, new nodes, error flag)
};

} // namespace

/* One lane: what one thread samples with (its stream and working memory). */
struct sampler_lane {
  const ng_dev_sampler *s;
  cudaStream_t stream;
  sampler_mem m;
};

namespace {

ng_status grow(dbuf *b, size_t bytes, const char *what) {
  if (bytes <= b->cap)
    return NG_OK;
  size_t cap = NG_MAX(bytes + bytes / 4, (size_t)4096);
  if (b->p)
    (void)cudaFree(b->p);
  b->p = NULL;
  b->cap = 0;
  cudaError_t err = cudaMalloc(&b->p, cap);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    b->p = NULL;
    return ng__err(err == cudaErrorMemoryAllocation ? NG_ERR_NOMEM : NG_ERR_CUDA,
                   "device sampler: cannot allocate %zu bytes of device memory for %s (%s)", cap,
                   what, cudaGetErrorString(err));
  }
  b->cap = cap;
  return NG_OK;
}

/* grow, keeping the first `used` bytes (copied on `stream` before the old buffer goes). */
ng_status grow_keep(dbuf *b, size_t bytes, size_t used, cudaStream_t stream, const char *what) {
  if (bytes <= b->cap)
    return NG_OK;
  dbuf old = *b;
  *b = {};
  ng_status st = grow(b, bytes, what);
  if (st == NG_OK && used > 0) {
    cudaError_t err = cudaMemcpyAsync(b->p, old.p, used, cudaMemcpyDeviceToDevice, stream);
    if (err == cudaSuccess)
      err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess)
      st = cuda_err("sampler_run", "cudaMemcpyAsync", err);
  }
  if (old.p)
    (void)cudaFree(old.p);
  return st;
}

void dfree(dbuf *b) {
  if (b->p)
    (void)cudaFree(b->p);
  b->p = NULL;
  b->cap = 0;
}

template <typename T> T *as(dbuf &b) {
  return static_cast<T *>(b.p);
}

/* ---- kernels ---- */

__device__ __forceinline__ int64_t d_index(const int32_t *i32, const int64_t *i64, int64_t e) {
  return i32 ? (int64_t)i32[e] : i64[e];
}

__device__ __forceinline__ uint32_t d_slot_of(int64_t key, size_t mask) {
  /* the CPU's slot_of is a host detail; any hash works here, the numbering does not use it */
  return (uint32_t)((ng_mix64((uint64_t)key)) & mask);
}

/* Finds or inserts `key`; returns its slot. The table never fills (cap >= 2 x nodes). */
__device__ __forceinline__ uint32_t d_insert(unsigned long long *keys, size_t mask, int64_t key,
                                             bool *existed) {
  uint32_t h = d_slot_of(key, mask);
  for (;;) {
    const unsigned long long old = atomicCAS(&keys[h], kEmpty, (unsigned long long)key);
    if (old == kEmpty || old == (unsigned long long)key) {
      *existed = old != kEmpty;
      return h;
    }
    h = (uint32_t)((h + 1) & mask);
  }
}

__global__ void k_targets(const int64_t *targets, int32_t n, int64_t *node_ids,
                          unsigned long long *keys, int32_t *vals, size_t mask, int64_t *err) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  bool existed = false;
  const uint32_t h = d_insert(keys, mask, targets[i], &existed);
  if (existed) {
    atomicMin(reinterpret_cast<unsigned long long *>(err), (unsigned long long)i);
    return;
  }
  vals[h] = i;
  node_ids[i] = targets[i];
}

/* Re-inserts local nodes [0, n) into a fresh (larger) table. */
__global__ void k_rehash(const int64_t *node_ids, int32_t n, unsigned long long *keys,
                         int32_t *vals, size_t mask) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  bool existed = false;
  vals[d_insert(keys, mask, node_ids[i], &existed)] = i;
}

__device__ __forceinline__ int64_t d_take(int32_t fanout, int64_t n) {
  return (fanout < 0 || fanout >= n) ? n : fanout;
}

/* counts[d] = the sampled neighbours of destination d for d < *n_dst (on the device: the host
 * learns it with the layer's edge count, in one round trip), 0 for d in [*n_dst, ub]. */
__global__ void k_counts(const int64_t *ids, const int32_t *n_dst, int32_t ub, const int64_t *gp,
                         int32_t fanout, int64_t *counts) {
  const int32_t d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d > ub)
    return;
  if (d >= *n_dst) {
    counts[d] = 0;
    return;
  }
  const int64_t v = ids[d];
  counts[d] = d_take(fanout, gp[v + 1] - gp[v]);
}

/* *n = base + rank[nnz] (the nodes after a layer: those before it and the new ones). */
__global__ void k_set_count(int32_t *n, int32_t base, const int32_t *rank, int64_t nnz) {
  *n = base + (rank ? rank[nnz] : 0);
}

/* One thread per destination: its row's sampled neighbours, as cpu/sampler.c's draw_row, into
 * gid[off[d], off[d + 1]). pos[off[d] ...] holds the drawn positions of rows longer than 64. */
__global__ void k_draw(const int64_t *ids, int32_t n_dst, const int64_t *gp, const int32_t *i32,
                       const int64_t *i64, int32_t fanout, uint64_t seed, int layer,
                       const int64_t *off, int64_t *gid, int64_t *pos) {
  const int32_t d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= n_dst)
    return;
  const int64_t v = ids[d], row = gp[v], n = gp[v + 1] - row, k = d_take(fanout, n);
  int64_t *out = gid + off[d];
  if (k == n) {
    for (int64_t i = 0; i < n; i++)
      out[i] = d_index(i32, i64, row + i);
    return;
  }
  ng_rng r;
  ng_rng_seed(&r, ng_hash3(seed, (uint64_t)layer, (uint64_t)v));
  const bool exclude = k > n / 2;
  const int64_t m = exclude ? n - k : k;
  if (n <= 64) {
    uint64_t mask = 0;
    for (int64_t j = n - m; j < n; j++) {
      const uint64_t t = ng_rng_below(&r, (uint64_t)j + 1);
      mask |= (mask >> t & 1u) ? 1ull << j : 1ull << t;
    }
    if (exclude)
      mask = ~mask & (n == 64 ? ~0ull : (1ull << n) - 1);
    for (int64_t o = 0; mask; mask &= mask - 1)
      out[o++] = d_index(i32, i64, row + __ffsll((long long)mask) - 1);
    return;
  }
  /* Floyd's draw into a sorted array, as draw_small (draw_large draws the same positions). */
  int64_t *p = pos + off[d];
  int64_t len = 0;
  for (int64_t j = n - m; j < n; j++) {
    const int64_t t = (int64_t)ng_rng_below(&r, (uint64_t)j + 1);
    int64_t lo = 0, hi = len;
    while (lo < hi) {
      const int64_t mid = (lo + hi) >> 1;
      if (p[mid] < t)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo < len && p[lo] == t) {
      p[len++] = j;
    } else {
      for (int64_t q = len; q > lo; q--)
        p[q] = p[q - 1];
      p[lo] = t;
      len++;
    }
  }
  if (exclude) {
    int64_t next = 0, o = 0;
    for (int64_t q = 0; q < n; q++) {
      if (next < m && p[next] == q) {
        next++;
        continue;
      }
      out[o++] = d_index(i32, i64, row + q);
    }
  } else {
    for (int64_t i = 0; i < k; i++)
      out[i] = d_index(i32, i64, row + p[i]);
  }
}

__global__ void k_insert(const int64_t *gid, int64_t nnz, unsigned long long *keys, int32_t *first,
                         size_t mask, int32_t *slot_e) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= nnz)
    return;
  bool existed = false;
  const uint32_t h = d_insert(keys, mask, gid[e], &existed);
  slot_e[e] = (int32_t)h;
  atomicMin(&first[h], (int32_t)e);
}

__global__ void k_flag(int64_t nnz, const int32_t *slot_e, const int32_t *vals,
                       const int32_t *first, int32_t *flag) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e > nnz)
    return;
  if (e == nnz) {
    flag[e] = 0;
    return;
  }
  const int32_t h = slot_e[e];
  flag[e] = vals[h] < 0 && first[h] == (int32_t)e;
}

__global__ void k_assign(int64_t nnz, const int32_t *flag, const int32_t *rank,
                         const int32_t *slot_e, const int64_t *gid, int32_t *vals,
                         int64_t *node_ids, int32_t n_cur) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= nnz || !flag[e])
    return;
  const int32_t local = n_cur + rank[e];
  vals[slot_e[e]] = local;
  node_ids[local] = gid[e];
}

__global__ void k_indices(int64_t nnz, const int32_t *slot_e, const int32_t *vals,
                          int32_t *indices) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < nnz)
    indices[e] = vals[slot_e[e]];
}

__global__ void k_indptr32(const int64_t *off, int32_t n, int32_t *indptr) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n)
    indptr[i] = (int32_t)off[i];
}

/* GCN weights as cpu/sampler.c's fill_gcn: double degrees + 1, IEEE division and sqrt. */
__global__ void k_gcn(const int32_t *indptr, const int32_t *indices, int32_t n_dst,
                      const int64_t *ids, const int64_t *gp, float *edge_w, float *self_w) {
  const int32_t d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= n_dst)
    return;
  const double deg_d = (double)(gp[ids[d] + 1] - gp[ids[d]]) + 1.0;
  self_w[d] = (float)__ddiv_rn(1.0, deg_d);
  for (int32_t e = indptr[d]; e < indptr[d + 1]; e++) {
    const int64_t s = ids[indices[e]];
    const double deg_s = (double)(gp[s + 1] - gp[s]) + 1.0;
    edge_w[e] = (float)__ddiv_rn(1.0, __dsqrt_rn(__dmul_rn(deg_d, deg_s)));
  }
}

__global__ void k_edge_dst(const int32_t *indptr, int32_t n_dst, int32_t *edge_dst, int32_t *eid) {
  const int32_t d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= n_dst)
    return;
  for (int32_t e = indptr[d]; e < indptr[d + 1]; e++) {
    edge_dst[e] = d;
    eid[e] = e;
  }
}

/* t_indptr[s] = the first position of source s in the sorted sources (sorted_src ascending). */
__global__ void k_t_indptr(const int32_t *sorted_src, int64_t nnz, int32_t n_src,
                           int32_t *t_indptr) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i > nnz)
    return;
  const int32_t lo = i == 0 ? 0 : sorted_src[i - 1] + 1;
  const int32_t hi = i == nnz ? n_src : sorted_src[i];
  for (int32_t s = lo; s <= hi; s++)
    t_indptr[s] = (int32_t)i;
}

__global__ void k_t_dst(const int32_t *t_eid, const int32_t *edge_dst, int64_t nnz,
                        int32_t *t_dst) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nnz)
    t_dst[i] = edge_dst[t_eid[i]];
}

unsigned blocks_for(int64_t n) {
  return (unsigned)NG_MAX((n + kThreads - 1) / kThreads, (int64_t)1);
}

#define SCHECK(call)                                                                               \
  do {                                                                                             \
    cudaError_t cu_err_ = (call);                                                                  \
    if (cu_err_ != cudaSuccess)                                                                    \
      return cuda_err("sampler_run", #call, cu_err_);                                              \
  } while (0)

/* Makes the table hold at least `nodes` nodes at half load, keeping local nodes [0, n_cur). */
ng_status table_fit(sampler_lane *f, int64_t nodes, int32_t n_cur, bool clear) {
  sampler_mem *m = &f->m;
  size_t cap = m->table_cap ? m->table_cap : 1024;
  while (cap < (size_t)nodes * 2)
    cap *= 2;
  const bool grows = cap > m->table_cap;
  if (!grows && !clear)
    return NG_OK;
  if (grows) {
    NG_CHECK(grow(&m->keys, cap * sizeof(unsigned long long), "the sampler's hash table"));
    NG_CHECK(grow(&m->vals, cap * sizeof(int32_t), "the sampler's hash table"));
    NG_CHECK(grow(&m->first, cap * sizeof(int32_t), "the sampler's hash table"));
    m->table_cap = cap;
  }
  cudaStream_t st = f->stream;
  SCHECK(cudaMemsetAsync(m->keys.p, 0xff, m->table_cap * sizeof(unsigned long long), st));
  SCHECK(cudaMemsetAsync(m->vals.p, 0xff, m->table_cap * sizeof(int32_t), st));
  SCHECK(cudaMemsetAsync(m->first.p, 0x7f, m->table_cap * sizeof(int32_t), st));
  if (n_cur > 0) {
    k_rehash<<<blocks_for(n_cur), kThreads, 0, st>>>(as<int64_t>(m->node_ids), n_cur,
                                                     as<unsigned long long>(m->keys),
                                                     as<int32_t>(m->vals), m->table_cap - 1);
    LAUNCH_CHECK("sampler_run");
  }
  return NG_OK;
}

/* An exclusive scan of n + 1 values (the last one 0) in place, with cub's temporaries. */
template <typename T> ng_status scan(sampler_lane *f, const T *in, T *out, int64_t n) {
  size_t tmp = 0;
  SCHECK(cub::DeviceScan::ExclusiveSum(nullptr, tmp, in, out, (int)(n + 1), f->stream));
  NG_CHECK(grow(&f->m.cub_tmp, tmp, "the sampler's scan"));
  SCHECK(cub::DeviceScan::ExclusiveSum(f->m.cub_tmp.p, tmp, in, out, (int)(n + 1), f->stream));
  return NG_OK;
}

/* Bits a radix sort of values below n needs. */
int bits_for(int64_t n) {
  int b = 1;
  while (b < 31 && ((int64_t)1 << b) < n)
    b++;
  return b;
}

/* Layer l's rows and local ids: *n_cur (host) nodes before it, whose count the device also holds
 * in m->n_dev; `ub` bounds them from above without a round trip (the host learns the exact count
 * with the layer's edge count). The GCN weights and the transpose come later (finish_block),
 * once every count is known. */
ng_status sample_layer(sampler_lane *f, const ng_sampler_cfg *cfg, int l, uint64_t seed, int32_t ub,
                       int64_t *err, int32_t *n_cur, ng_block *b) {
  sampler_mem *m = &f->m;
  layer_mem *lm = &m->layer[l];
  cudaStream_t st = f->stream;
  const int32_t fanout = cfg->fanout[l];
  int32_t *n_dev = as<int32_t>(m->n_dev);

  /* rows: counts and offsets over the bound, then one round trip for the exact sizes */
  NG_CHECK(grow(&m->counts, ((size_t)ub + 1) * sizeof(int64_t), "row counts"));
  NG_CHECK(grow(&lm->indptr64, ((size_t)ub + 1) * sizeof(int64_t), "row offsets"));
  k_counts<<<blocks_for((int64_t)ub + 1), kThreads, 0, st>>>(
      as<int64_t>(m->node_ids), n_dev, ub, f->s->indptr, fanout, as<int64_t>(m->counts));
  LAUNCH_CHECK("sampler_run");
  NG_CHECK(scan(f, as<int64_t>(m->counts), as<int64_t>(lm->indptr64), ub));
  int64_t *h = m->h_small;
  SCHECK(cudaMemcpyAsync(&h[0], n_dev, sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  SCHECK(cudaMemcpyAsync(&h[1], as<int64_t>(lm->indptr64) + ub, sizeof(int64_t),
                         cudaMemcpyDeviceToHost, st));
  if (err)
    SCHECK(cudaMemcpyAsync(&h[2], err, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  SCHECK(cudaStreamSynchronize(st));
  if (err && h[2] != -1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "sampler: targets[%lld] repeats an earlier target; targets must be distinct",
                   (long long)h[2]);
  const int32_t n_dst = (int32_t)(h[0] & 0xffffffff);
  const int64_t nnz = h[1];
  *n_cur = n_dst;
  if (nnz > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG,
                   "sampler: block %d would hold more than 2^31-1 edges; use smaller batches or "
                   "fanouts",
                   l);
  const int64_t most = NG_MIN((int64_t)n_dst + nnz, f->s->nodes);
  if (most > INT32_MAX)
    return ng__err(NG_ERR_INVALID_ARG,
                   "sampler: block %d could hold more than 2^31-1 nodes; use smaller batches or "
                   "fanouts",
                   l);
  const size_t e_bytes = (size_t)NG_MAX(nnz, (int64_t)1);
  NG_CHECK(grow(&m->gid, e_bytes * sizeof(int64_t), "sampled node ids"));
  NG_CHECK(grow(&m->pos, e_bytes * sizeof(int64_t), "drawn positions"));
  NG_CHECK(grow(&lm->indptr, ((size_t)n_dst + 1) * sizeof(int32_t), "block indptr"));
  NG_CHECK(grow(&m->slot_e, e_bytes * sizeof(int32_t), "edge slots"));
  NG_CHECK(grow(&m->flag, (e_bytes + 1) * sizeof(int32_t), "first-appearance flags"));
  NG_CHECK(grow(&m->rank, (e_bytes + 1) * sizeof(int32_t), "first-appearance ranks"));
  NG_CHECK(grow(&lm->indices, e_bytes * sizeof(int32_t), "block indices"));
  NG_CHECK(grow_keep(&m->node_ids, (size_t)NG_MAX(most, (int64_t)1) * sizeof(int64_t),
                     (size_t)n_dst * sizeof(int64_t), st, "node ids"));
  NG_CHECK(table_fit(f, most, n_dst, false));
  const int64_t *ids = as<int64_t>(m->node_ids);
  k_draw<<<blocks_for(n_dst), kThreads, 0, st>>>(ids, n_dst, f->s->indptr, f->s->idx32, f->s->idx64,
                                                 fanout, seed, l, as<int64_t>(lm->indptr64),
                                                 as<int64_t>(m->gid), as<int64_t>(m->pos));
  LAUNCH_CHECK("sampler_run");
  k_indptr32<<<blocks_for((int64_t)n_dst + 1), kThreads, 0, st>>>(as<int64_t>(lm->indptr64), n_dst,
                                                                  as<int32_t>(lm->indptr));
  LAUNCH_CHECK("sampler_run");

  /* local ids in order of first appearance */
  const size_t mask = m->table_cap - 1;
  if (nnz > 0) {
    k_insert<<<blocks_for(nnz), kThreads, 0, st>>>(
        as<int64_t>(m->gid), nnz, as<unsigned long long>(m->keys), as<int32_t>(m->first), mask,
        as<int32_t>(m->slot_e));
    LAUNCH_CHECK("sampler_run");
  }
  k_flag<<<blocks_for(nnz + 1), kThreads, 0, st>>>(nnz, as<int32_t>(m->slot_e),
                                                   as<int32_t>(m->vals), as<int32_t>(m->first),
                                                   as<int32_t>(m->flag));
  LAUNCH_CHECK("sampler_run");
  NG_CHECK(scan(f, as<int32_t>(m->flag), as<int32_t>(m->rank), nnz));
  if (nnz > 0) {
    k_assign<<<blocks_for(nnz), kThreads, 0, st>>>(
        nnz, as<int32_t>(m->flag), as<int32_t>(m->rank), as<int32_t>(m->slot_e),
        as<int64_t>(m->gid), as<int32_t>(m->vals), as<int64_t>(m->node_ids), n_dst);
    LAUNCH_CHECK("sampler_run");
    k_indices<<<blocks_for(nnz), kThreads, 0, st>>>(nnz, as<int32_t>(m->slot_e),
                                                    as<int32_t>(m->vals), as<int32_t>(lm->indices));
    LAUNCH_CHECK("sampler_run");
  }
  k_set_count<<<1, 1, 0, st>>>(n_dev, n_dst, as<int32_t>(m->rank), nnz);
  LAUNCH_CHECK("sampler_run");
  *b = {};
  b->n_dst = n_dst;
  b->nnz = nnz;
  b->indptr = as<int32_t>(lm->indptr);
  b->indices = as<int32_t>(lm->indices);
  return NG_OK;
}

/* Block l's GCN weights and transpose, as the configuration asks, once its n_src is known. */
ng_status finish_block(sampler_lane *f, const ng_sampler_cfg *cfg, int l, ng_block *b) {
  sampler_mem *m = &f->m;
  layer_mem *lm = &m->layer[l];
  cudaStream_t st = f->stream;
  const int32_t n_dst = b->n_dst, n_src = b->n_src;
  const int64_t nnz = b->nnz;
  const size_t e_bytes = (size_t)NG_MAX(nnz, (int64_t)1);
  if (cfg->gcn_weights[l]) {
    NG_CHECK(grow(&lm->edge_w, e_bytes * sizeof(float), "GCN edge weights"));
    NG_CHECK(grow(&lm->self_w, (size_t)NG_MAX(n_dst, 1) * sizeof(float), "GCN self weights"));
    k_gcn<<<blocks_for(n_dst), kThreads, 0, st>>>(b->indptr, b->indices, n_dst,
                                                  as<int64_t>(m->node_ids), f->s->indptr,
                                                  as<float>(lm->edge_w), as<float>(lm->self_w));
    LAUNCH_CHECK("sampler_run");
    b->edge_w = as<float>(lm->edge_w);
    b->self_w = as<float>(lm->self_w);
  }
  if (cfg->transpose[l]) {
    NG_CHECK(grow(&lm->t_indptr, ((size_t)n_src + 1) * sizeof(int32_t), "t_indptr"));
    NG_CHECK(grow(&lm->t_dst, e_bytes * sizeof(int32_t), "t_dst"));
    NG_CHECK(grow(&lm->t_eid, e_bytes * sizeof(int32_t), "t_eid"));
    NG_CHECK(grow(&lm->edge_dst, e_bytes * 2 * sizeof(int32_t), "edge destinations"));
    NG_CHECK(grow(&lm->sorted_src, e_bytes * sizeof(int32_t), "sorted sources"));
    int32_t *edge_dst = as<int32_t>(lm->edge_dst), *eid = edge_dst + e_bytes;
    k_edge_dst<<<blocks_for(n_dst), kThreads, 0, st>>>(b->indptr, n_dst, edge_dst, eid);
    LAUNCH_CHECK("sampler_run");
    if (nnz > 0) {
      size_t tmp = 0;
      const int bits = bits_for(n_src);
      SCHECK(cub::DeviceRadixSort::SortPairs(nullptr, tmp, b->indices, as<int32_t>(lm->sorted_src),
                                             eid, as<int32_t>(lm->t_eid), (int)nnz, 0, bits, st));
      NG_CHECK(grow(&m->cub_tmp, tmp, "the sampler's sort"));
      SCHECK(cub::DeviceRadixSort::SortPairs(m->cub_tmp.p, tmp, b->indices,
                                             as<int32_t>(lm->sorted_src), eid,
                                             as<int32_t>(lm->t_eid), (int)nnz, 0, bits, st));
      k_t_dst<<<blocks_for(nnz), kThreads, 0, st>>>(as<int32_t>(lm->t_eid), edge_dst, nnz,
                                                    as<int32_t>(lm->t_dst));
      LAUNCH_CHECK("sampler_run");
    }
    k_t_indptr<<<blocks_for(nnz + 1), kThreads, 0, st>>>(as<int32_t>(lm->sorted_src), nnz, n_src,
                                                         as<int32_t>(lm->t_indptr));
    LAUNCH_CHECK("sampler_run");
    b->t_indptr = as<int32_t>(lm->t_indptr);
    b->t_dst = as<int32_t>(lm->t_dst);
    b->t_eid = as<int32_t>(lm->t_eid);
  }
  return NG_OK;
}

/* Copies the device mini-batch `d` into the host buffer, array after array. */
ng_status copy_out(ng_backend *be, sampler_lane *f, const ng_minibatch *d, ng_minibatch *out,
                   void **host, size_t *host_cap) {
  const void *src[NG_MB_ARRAYS];
  size_t bytes[NG_MB_ARRAYS];
  const int n = ng__minibatch_arrays(d, src, bytes);
  const size_t total = ng__minibatch_packed_bytes(bytes, n);
  if (total > *host_cap || !*host) {
    cuda_host_free(be, *host);
    *host = NULL;
    *host_cap = 0;
    /* Pinned, hence resident: a sixteenth of room, as the staging slots (sched/pipeline.c). */
    const size_t cap = NG_MAX(total + total / 16, (size_t)1 << 20);
    NG_CHECK(cuda_host_alloc(be, host, cap));
    *host_cap = cap;
  }
  NG_CHECK(use(be, "sampler_run"));
  void *dst[NG_MB_ARRAYS];
  char *at = static_cast<char *>(*host);
  for (int i = 0; i < n; i++) {
    dst[i] = at;
    if (bytes[i])
      SCHECK(cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyDeviceToHost, f->stream));
    at += (bytes[i] + 63) & ~(size_t)63;
  }
  SCHECK(cudaStreamSynchronize(f->stream));
  ng__minibatch_rebase(out, d, dst);
  return NG_OK;
}

} // namespace

namespace {

void lane_free(sampler_lane *f) {
  if (f->stream)
    (void)cudaStreamSynchronize(f->stream);
  sampler_mem *m = &f->m;
  dbuf *bufs[] = {&m->targets, &m->node_ids, &m->gid, &m->pos,   &m->counts, &m->slot_e, &m->flag,
                  &m->rank,    &m->cub_tmp,  &m->err, &m->n_dev, &m->keys,   &m->vals,   &m->first};
  for (dbuf *b : bufs)
    dfree(b);
  for (int l = 0; l < NG_MAX_LAYERS; l++) {
    layer_mem *lm = &m->layer[l];
    dbuf *lb[] = {&lm->indptr64, &lm->indptr, &lm->indices, &lm->edge_w,   &lm->self_w,
                  &lm->t_indptr, &lm->t_dst,  &lm->t_eid,   &lm->edge_dst, &lm->sorted_src};
    for (dbuf *b : lb)
      dfree(b);
  }
  if (m->h_small)
    (void)cudaFreeHost(m->h_small);
  if (f->stream)
    (void)cudaStreamDestroy(f->stream);
}

} // namespace

ng_status cuda_sampler_create(ng_backend *be, const ng_csr *g, int lanes, ng_dev_sampler **out) {
  *out = NULL;
  NG_CHECK(use(be, "sampler_create"));
  ng_dev_sampler *s =
      static_cast<ng_dev_sampler *>(ng__calloc(1, sizeof(ng_dev_sampler), "device sampler"));
  sampler_lane *ln = static_cast<sampler_lane *>(
      ng__calloc((size_t)lanes, sizeof(sampler_lane), "device sampler lanes"));
  if (!s || !ln) {
    free(s);
    free(ln);
    return NG_ERR_NOMEM;
  }
  s->device = ctx_of(be)->device;
  s->nodes = g->nodes;
  s->graph = g;
  s->lanes = ln;
  s->n_lanes = lanes;
  /* The highest priority: the sampler's small kernels go ahead of the training step's blocks,
   * which fill the GPU while the feed samples the iterations after the current one. */
  int least = 0, greatest = 0;
  cudaError_t err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  for (int k = 0; k < lanes && err == cudaSuccess; k++) {
    ln[k].s = s;
    err = cudaStreamCreateWithPriority(&ln[k].stream, cudaStreamNonBlocking, greatest);
    if (err == cudaSuccess)
      err = cudaHostAlloc(&ln[k].m.h_small, 4 * sizeof(int64_t), cudaHostAllocDefault);
  }
  const size_t ip = ((size_t)g->nodes + 1) * sizeof(int64_t);
  const size_t ix = (size_t)NG_MAX(g->nnz, (int64_t)1) * (g->idx32 ? 4 : 8);
  if (err == cudaSuccess)
    err = cudaMalloc(&s->indptr, ip);
  if (err == cudaSuccess)
    err = g->idx32 ? cudaMalloc(&s->idx32, ix) : cudaMalloc(&s->idx64, ix);
  if (err == cudaSuccess)
    err = cudaMemcpy(s->indptr, g->indptr, ip, cudaMemcpyHostToDevice);
  if (err == cudaSuccess && g->nnz > 0)
    err = g->idx32 ? cudaMemcpy(s->idx32, g->idx32, ix, cudaMemcpyHostToDevice)
                   : cudaMemcpy(s->idx64, g->idx64, ix, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    const ng_status st = ng__err(
        err == cudaErrorMemoryAllocation ? NG_ERR_NOMEM : NG_ERR_CUDA,
        "sampler_create: cannot put the graph's topology (%zu bytes) on CUDA device %d: %s; "
        "sample on the CPU (--sampler cpu)",
        ip + ix, s->device, cudaGetErrorString(err));
    cuda_sampler_destroy(be, s);
    return st;
  }
  *out = s;
  return NG_OK;
}

void cuda_sampler_destroy(ng_backend *be, ng_dev_sampler *s) {
  if (!s)
    return;
  (void)be;
  (void)cudaSetDevice(s->device);
  for (int k = 0; k < s->n_lanes; k++)
    lane_free(&s->lanes[k]);
  free(s->lanes);
  (void)cudaFree(s->indptr);
  (void)cudaFree(s->idx32);
  (void)cudaFree(s->idx64);
  free(s);
}

ng_status cuda_sampler_run(ng_backend *be, ng_dev_sampler *s, int lane, const ng_sampler_cfg *cfg,
                           const int64_t *targets, int32_t n, uint64_t seed, ng_minibatch *out,
                           void **host, size_t *host_cap) {
  memset(out, 0, sizeof *out);
  NG_CHECK(use(be, "sampler_run"));
  if (lane >= s->n_lanes)
    return ng__err(NG_ERR_INVALID_ARG, "sampler_run: lane %d of a sampler with %d", lane,
                   s->n_lanes);
  sampler_lane *f = &s->lanes[lane];
  sampler_mem *m = &f->m;
  cudaStream_t st = f->stream;
  NG_CHECK(grow(&m->targets, (size_t)n * sizeof(int64_t), "targets"));
  NG_CHECK(grow(&m->node_ids, (size_t)n * sizeof(int64_t), "node ids"));
  NG_CHECK(grow(&m->err, sizeof(int64_t), "the error flag"));
  NG_CHECK(grow(&m->n_dev, sizeof(int32_t), "the node count"));
  SCHECK(cudaMemcpyAsync(m->targets.p, targets, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice,
                         st));
  SCHECK(cudaMemsetAsync(m->err.p, 0xff, sizeof(int64_t), st));
  NG_CHECK(table_fit(f, n, 0, true));
  k_targets<<<blocks_for(n), kThreads, 0, st>>>(
      as<int64_t>(m->targets), n, as<int64_t>(m->node_ids), as<unsigned long long>(m->keys),
      as<int32_t>(m->vals), m->table_cap - 1, as<int64_t>(m->err));
  LAUNCH_CHECK("sampler_run");
  k_set_count<<<1, 1, 0, st>>>(as<int32_t>(m->n_dev), n, nullptr, 0);
  LAUNCH_CHECK("sampler_run");
  /* Each layer costs one round trip: its edge count and the nodes the layer above it added,
   * while the counts run over a bound (the nodes before the layer above, plus its edges). */
  int32_t n_cur = n;
  int64_t ub = n;
  ng_minibatch d = {};
  for (int l = cfg->n_layers - 1; l >= 0; l--) {
    NG_CHECK(sample_layer(f, cfg, l, seed, (int32_t)ub,
                          l == cfg->n_layers - 1 ? as<int64_t>(m->err) : nullptr, &n_cur,
                          &d.blocks[l]));
    if (l + 1 < cfg->n_layers)
      d.blocks[l + 1].n_src = n_cur;
    ub = NG_MIN((int64_t)n_cur + d.blocks[l].nnz, s->nodes);
  }
  SCHECK(cudaMemcpyAsync(&m->h_small[0], m->n_dev.p, sizeof(int32_t), cudaMemcpyDeviceToHost, st));
  SCHECK(cudaStreamSynchronize(st));
  d.blocks[0].n_src = (int32_t)(m->h_small[0] & 0xffffffff);
  for (int l = 0; l < cfg->n_layers; l++)
    NG_CHECK(finish_block(f, cfg, l, &d.blocks[l]));
  d.n_layers = cfg->n_layers;
  d.node_ids = as<int64_t>(m->node_ids);
  d.n_targets = n;
  return copy_out(be, f, &d, out, host, host_cap);
}

} // namespace ng_cuda
