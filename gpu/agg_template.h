/* The gather-aggregate kernel template of aggregators defined with NG_AGGREGATOR_SOURCE
 * (docs/aggregators.md). One text, two compilers: NG__AGG_TEMPLATE expands it into code (the
 * built-in aggregators' instances, compiled by nvcc with the library, gpu/backend_cuda_uagg.cu)
 * and into the string ng__agg_template_src, which gpu/backend_cuda_uagg.cu hands to NVRTC behind
 * a user aggregator's source at run time. It therefore includes nothing, names no type of the
 * library, and writes pragmas as _Pragma.
 *
 * An aggregator enters as a struct A with enum S (state floats a feature) and static device
 * functions init, acc, merge, fin (and grad unless linear), which forward to the user's
 * agg_init, agg_accumulate, agg_merge, agg_finalize, agg_grad.
 *
 * The order of operations is the CPU backend's (cpu/agg_user.c): each destination's neighbours
 * in edge order, each source's gradient in transposed-edge order, no atomics; the input dropout
 * of a partial state is core/rng.h's ng_dropped on element (row, column) of the table. */
#ifndef NG_AGG_TEMPLATE_H
#define NG_AGG_TEMPLATE_H

#define NG__AGG_TEMPLATE(...)                                                                      \
  __VA_ARGS__                                                                                      \
  static const char ng__agg_template_src[] = #__VA_ARGS__;

// clang-format off
NG__AGG_TEMPLATE(
namespace ng_aggt {
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

/* A block's destination-grouped edges (ng_block's first arrays). */
struct blk {
  const int *indptr;
  const int *indices;
  const float *edge_w; /* NULL: every weight is 1 */
  int n_dst;
};

/* Input dropout of element i of the table (core/rng.h: ng_dropout_keep, ng_dropped). */
struct drop {
  int on;
  u64 key;
  u32 threshold;
  float scale;
};

__device__ __forceinline__ u64 mix64(u64 x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float dropped(const drop &dr, float x, u64 i) {
  if (!dr.on)
    return x;
  const u64 h = mix64(dr.key ^ (i >> 1));
  return (u32)(h >> ((i & 1) * 32)) >= dr.threshold ? __fmul_rn(x, dr.scale) : 0.0f;
}

/* T chunks of V columns of one row (zeros past dim), V = 4 as one 16-byte load. */
template <int V, int T>
__device__ __forceinline__ void load(float (&x)[T][V], const float *row, i64 j0, i64 span,
                                     i64 dim) {
  _Pragma("unroll")
  for (int k = 0; k < T; k++) {
    const i64 j = j0 + k * span;
    if (j < dim) {
      if (V == 4) {
        const float4 t = *reinterpret_cast<const float4 *>(row + j);
        x[k][0] = t.x;
        x[k][V > 1 ? 1 : 0] = t.y;
        x[k][V > 2 ? 2 : 0] = t.z;
        x[k][V > 3 ? 3 : 0] = t.w;
      } else {
        _Pragma("unroll")
        for (int v = 0; v < V; v++)
          x[k][v] = row[j + v];
      }
    } else {
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        x[k][v] = 0.0f;
    }
  }
}

template <class A, int V, int T>
__device__ __forceinline__ void accumulate(float (&s)[T][V][A::S], float (&x)[T][V], float w,
                                           const drop &dr, i64 r, i64 j0, i64 span, i64 dim) {
  _Pragma("unroll")
  for (int k = 0; k < T; k++)
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      A::acc(s[k][v], dropped(dr, x[k][v], (u64)(r * dim + j0 + k * span + v)), w);
}

/* Forward (out != NULL: finalized rows [n_dst, dim], 0 without neighbours) or partial state
 * (state [n_dst, dim, S] and count [n_dst]): one warp per destination and group of T chunks of
 * 32 V columns, neighbours in edge order, two neighbours' rows loaded before either is
 * accumulated. */
template <class A, int V, int T>
__global__ void k_fwd(blk b, const float *__restrict__ src, i64 dim, drop dr,
                      float *__restrict__ out, float *__restrict__ state, int *__restrict__ count) {
  const i64 d = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (d >= b.n_dst)
    return;
  const int e0 = b.indptr[d], e1 = b.indptr[d + 1];
  if (count && lane == 0 && blockIdx.y == 0)
    count[d] = e1 - e0;
  const i64 span = 32 * V;
  for (i64 j0 = ((i64)blockIdx.y * T * 32 + lane) * V; j0 < dim;
       j0 += (i64)gridDim.y * T * span) {
    float s[T][V][A::S];
    _Pragma("unroll")
    for (int k = 0; k < T; k++)
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        A::init(s[k][v]);
    float x0[T][V], x1[T][V];
    int e = e0;
    for (; e + 1 < e1; e += 2) {
      const i64 r0 = b.indices[e], r1 = b.indices[e + 1];
      load<V, T>(x0, src + r0 * dim, j0, span, dim);
      load<V, T>(x1, src + r1 * dim, j0, span, dim);
      accumulate<A, V, T>(s, x0, b.edge_w ? b.edge_w[e] : 1.0f, dr, r0, j0, span, dim);
      accumulate<A, V, T>(s, x1, b.edge_w ? b.edge_w[e + 1] : 1.0f, dr, r1, j0, span, dim);
    }
    if (e < e1) {
      const i64 r0 = b.indices[e];
      load<V, T>(x0, src + r0 * dim, j0, span, dim);
      accumulate<A, V, T>(s, x0, b.edge_w ? b.edge_w[e] : 1.0f, dr, r0, j0, span, dim);
    }
    const float deg = (float)(e1 - e0);
    _Pragma("unroll")
    for (int k = 0; k < T; k++) {
      const i64 j = j0 + k * span;
      if (j >= dim)
        continue;
      if (out && V == 4) { /* one 16-byte store (out is 16-byte aligned with V = 4) */
        float y[4];
        _Pragma("unroll")
        for (int v = 0; v < 4; v++)
          y[v] = e1 > e0 ? A::fin(s[k][V > v ? v : 0], deg) : 0.0f;
        *reinterpret_cast<float4 *>(out + d * dim + j) = make_float4(y[0], y[1], y[2], y[3]);
        continue;
      }
      _Pragma("unroll")
      for (int v = 0; v < V; v++) {
        const i64 at = d * dim + j + v;
        if (out) {
          out[at] = e1 > e0 ? A::fin(s[k][v], deg) : 0.0f;
        } else {
          _Pragma("unroll")
          for (int q = 0; q < A::S; q++)
            state[at * A::S + q] = s[k][v][q];
        }
      }
    }
  }
}

/* acc = merge(acc, other) elementwise; a row empty in `other` keeps acc, a row empty in acc
 * takes other's state. Counts are added by k_merge_counts after it. */
template <class A>
__global__ void k_merge(float *acc, const int *acc_count, const float *other,
                        const int *other_count, i64 n_dst, i64 dim) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n_dst * dim;
       i += (i64)gridDim.x * blockDim.x) {
    const i64 d = i / dim;
    if (other_count[d] == 0)
      continue;
    float *a = acc + i * A::S;
    const float *o = other + i * A::S;
    if (acc_count[d] == 0) {
      for (int q = 0; q < A::S; q++)
        a[q] = o[q];
    } else {
      float sa[A::S], so[A::S];
      for (int q = 0; q < A::S; q++) {
        sa[q] = a[q];
        so[q] = o[q];
      }
      A::merge(sa, so);
      for (int q = 0; q < A::S; q++)
        a[q] = sa[q];
    }
  }
}

template <class A>
__global__ void k_merge_counts(int *acc_count, const int *other_count, i64 n_dst) {
  for (i64 d = blockIdx.x * (i64)blockDim.x + threadIdx.x; d < n_dst;
       d += (i64)gridDim.x * blockDim.x)
    acc_count[d] += other_count[d];
}

template <class A>
__global__ void k_finalize(const float *val, const int *count, i64 n_dst, i64 dim, float *dst) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n_dst * dim;
       i += (i64)gridDim.x * blockDim.x) {
    const int c = count[i / dim];
    float s[A::S];
    for (int q = 0; q < A::S; q++)
      s[q] = val[i * A::S + q];
    dst[i] = c == 0 ? 0.0f : A::fin(s, (float)c);
  }
}

/* d y / d x of one neighbour: the declared agg_grad, or for a linear aggregator
 * finalize(accumulate(init, 1, w)) - finalize(init), as ng__agg_linear_coef on the CPU. */
template <class A, bool Linear> struct grad_of {
  static __device__ __forceinline__ float g(const float *s, float n, float x, float w, float y) {
    return A::grad(s, n, x, w, y);
  }
};
template <class A> struct grad_of<A, true> {
  static __device__ __forceinline__ float g(const float *s, float n, float x, float w, float y) {
    (void)s, (void)x, (void)y;
    float a[A::S], z[A::S];
    A::init(a);
    A::acc(a, 1.0f, w);
    A::init(z);
    return A::fin(a, n) - A::fin(z, n);
  }
};

/* aggr_user_bwd's first pass: one thread per (destination, column) recomputes the state in
 * edge order, then writes work[e, c] = grad_dst[d, c] * d y / d x_e. */
template <class A, bool Linear>
__global__ void k_bwd_dst(blk b, const float *__restrict__ src, const float *__restrict__ grad_dst,
                          i64 dim, float *__restrict__ work) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (i64)b.n_dst * dim;
       i += (i64)gridDim.x * blockDim.x) {
    const i64 d = i / dim, c = i - d * dim;
    const int e0 = b.indptr[d], e1 = b.indptr[d + 1];
    const float deg = (float)(e1 - e0), g = grad_dst[i];
    float s[A::S];
    A::init(s);
    float y = 0.0f;
    if (!Linear) {
      for (int e = e0; e < e1; e++)
        A::acc(s, src[(i64)b.indices[e] * dim + c], b.edge_w ? b.edge_w[e] : 1.0f);
      y = A::fin(s, deg);
    }
    for (int e = e0; e < e1; e++) {
      const float w = b.edge_w ? b.edge_w[e] : 1.0f;
      const float x = Linear ? 0.0f : src[(i64)b.indices[e] * dim + c];
      work[(i64)e * dim + c] = __fmul_rn(g, grad_of<A, Linear>::g(s, deg, x, w, y));
    }
  }
}

/* The second pass: grad_src[s, c] = sum of work[e, c] over s's edges in transposed order. */
template <class A>
__global__ void k_bwd_src(const int *t_indptr, const int *t_eid, const float *__restrict__ work,
                          i64 n_src, i64 dim, float *__restrict__ grad_src) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n_src * dim;
       i += (i64)gridDim.x * blockDim.x) {
    const i64 s = i / dim, c = i - s * dim;
    float acc = 0.0f;
    for (int t = t_indptr[s]; t < t_indptr[s + 1]; t++)
      acc = __fadd_rn(acc, work[(i64)t_eid[t] * dim + c]);
    grad_src[i] = acc;
  }
}
} // namespace ng_aggt
)
// clang-format on

#endif /* NG_AGG_TEMPLATE_H */
