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
  const float *self_w; /* NULL: no self loop (always for user aggregators and partial states) */
  int n_dst;
};

/* Input dropout of element i of the table (core/rng.h: ng_dropout_keep, ng_dropped), applied
 * by the instances of k_fwd with Drop. */
struct drop {
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
  const u64 h = mix64(dr.key ^ (i >> 1));
  return (u32)(h >> ((i & 1) * 32)) >= dr.threshold ? __fmul_rn(x, dr.scale) : 0.0f;
}

/* V values of a row at p as floats: fp32 (V = 4: one 16-byte load) or bf16 (unsigned short,
 * NG_PRECISION_BF16: V = 4 is one 8-byte load; a bf16 value is the top half of its fp32 bits,
 * so the conversion is exact and the arithmetic after it is the fp32 kernel's on the converted
 * table; little-endian: value 0 is the low half of a word). */
template <int V> __device__ __forceinline__ void ld(float *o, const float *p) {
  if constexpr (V == 4) {
    const float4 t = *reinterpret_cast<const float4 *>(p);
    o[0] = t.x;
    o[1] = t.y;
    o[2] = t.z;
    o[3] = t.w;
  } else {
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      o[v] = p[v];
  }
}
template <int V> __device__ __forceinline__ void ld(float *o, const unsigned short *p) {
  if constexpr (V == 4) {
    const uint2 t = *reinterpret_cast<const uint2 *>(p);
    o[0] = __uint_as_float(t.x << 16);
    o[1] = __uint_as_float(t.x & 0xffff0000u);
    o[2] = __uint_as_float(t.y << 16);
    o[3] = __uint_as_float(t.y & 0xffff0000u);
  } else {
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      o[v] = __uint_as_float((u32)p[v] << 16);
  }
}

/* V floats to p (V = 4: one 16-byte store). */
template <int V> __device__ __forceinline__ void st(float *p, const float *o) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4 *>(p) = make_float4(o[0], o[1], o[2], o[3]);
  } else {
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      p[v] = o[v];
  }
}

/* T chunks of V columns of one row (zeros past dim). */
template <int V, int T, class E>
__device__ __forceinline__ void load(float (&x)[T][V], const E *row, i64 j0, i64 span, i64 dim) {
  _Pragma("unroll")
  for (int k = 0; k < T; k++) {
    const i64 j = j0 + k * span;
    if (j < dim) {
      ld<V>(x[k], row + j);
    } else {
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        x[k][v] = 0.0f;
    }
  }
}

/* One neighbour (row r, weight w: 1 when unweighted, and 1 * x is x bit for bit) into the
 * states, after its input dropout when Drop. Dropout is a template argument, not a run-time
 * test: with the test in the kernel nvcc kept both forms of the accumulation live and the
 * V = 4, T = 8 instances took 164-180 registers, one block of 256 threads an SM instead of
 * two (the 1.7% the template lost on W1 against the hand-written kernel). Splitting the
 * accumulation by weighted / unweighted costs registers the same way (bf16 rows: 165 against
 * 127), so an unweighted edge multiplies by 1. */
template <class A, int V, int T, bool Drop>
__device__ __forceinline__ void accumulate(float (&s)[T][V][A::S], float (&x)[T][V], float w,
                                           const drop &dr, i64 r, i64 j0, i64 span, i64 dim) {
  if constexpr (Drop) {
    _Pragma("unroll")
    for (int k = 0; k < T; k++) {
      const u64 base = (u64)(r * dim + j0 + k * span);
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        x[k][v] = dropped(dr, x[k][v], base + v);
    }
  }
  _Pragma("unroll")
  for (int k = 0; k < T; k++)
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      A::acc(s[k][v], x[k][v], w);
}

/* Forward (out != NULL: finalized rows [n_dst, dim], 0 without neighbours, plus
 * self_w[d] * src[d] when the block has self-loop weights) or partial state (state
 * [n_dst, dim, S] and count [n_dst]; no self loop): one warp per destination and group of T
 * chunks of 32 V columns, neighbours in edge order, two neighbours' rows loaded before either
 * is accumulated. E is float, or unsigned short for bf16 rows. Registers decide the speed of
 * the wide rows: two blocks of 256 threads an SM need at most 128 a thread; the built-ins'
 * V = 4, T = 8 instances take 94-128 (nvcc 13, sm_90; the hand-written kernel took 124;
 * tests/test_gpu_parity.c checks two blocks fit). */
template <class A, int V, int T, class E, bool Drop>
__global__ void __launch_bounds__(256)
k_fwd(blk b, const E *__restrict__ src, i64 dim, drop dr, float *__restrict__ out,
      float *__restrict__ state, int *__restrict__ count) {
  const i64 d = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (d >= b.n_dst)
    return;
  const int e0 = b.indptr[d], e1 = b.indptr[d + 1];
  if (count && lane == 0 && blockIdx.y == 0)
    count[d] = e1 - e0;
  const bool weighted = b.edge_w != nullptr;
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
      const float w0 = weighted ? b.edge_w[e] : 1.0f, w1 = weighted ? b.edge_w[e + 1] : 1.0f;
      load<V, T>(x0, src + r0 * dim, j0, span, dim);
      load<V, T>(x1, src + r1 * dim, j0, span, dim);
      accumulate<A, V, T, Drop>(s, x0, w0, dr, r0, j0, span, dim);
      accumulate<A, V, T, Drop>(s, x1, w1, dr, r1, j0, span, dim);
    }
    if (e < e1) {
      const i64 r0 = b.indices[e];
      const float w0 = weighted ? b.edge_w[e] : 1.0f;
      load<V, T>(x0, src + r0 * dim, j0, span, dim);
      accumulate<A, V, T, Drop>(s, x0, w0, dr, r0, j0, span, dim);
    }
    if (!out) {
      _Pragma("unroll")
      for (int k = 0; k < T; k++) {
        const i64 j = j0 + k * span;
        if (j >= dim)
          continue;
        /* Columns j .. j + V - 1 of row d are V x S consecutive floats: S 16-byte stores
         * with V = 4 (state is 16-byte aligned then). */
        float f[V * A::S];
        _Pragma("unroll")
        for (int v = 0; v < V; v++)
          _Pragma("unroll")
          for (int q = 0; q < A::S; q++)
            f[v * A::S + q] = s[k][v][q];
        float *p = state + (d * dim + j) * A::S;
        if constexpr (V == 4) {
          _Pragma("unroll")
          for (int q = 0; q < A::S; q++)
            st<4>(p + 4 * q, f + 4 * q);
        } else {
          _Pragma("unroll")
          for (int q = 0; q < V * A::S; q++)
            p[q] = f[q];
        }
      }
      continue;
    }
    /* The self loop (GCN's A + I): y + self_w[d] x_d, after finalize, without dropout. */
    const bool self = b.self_w != nullptr;
    const float sw = self ? b.self_w[d] : 0.0f;
    if (self)
      load<V, T>(x0, src + d * dim, j0, span, dim);
    const float deg = (float)(e1 - e0);
    _Pragma("unroll")
    for (int k = 0; k < T; k++) {
      const i64 j = j0 + k * span;
      if (j >= dim)
        continue;
      float y[V];
      _Pragma("unroll")
      for (int v = 0; v < V; v++) {
        y[v] = e1 > e0 ? A::fin(s[k][v], deg) : 0.0f;
        if (self)
          y[v] = y[v] + sw * x0[k][v];
      }
      st<V>(out + d * dim + j, y);
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

/* dst[d, c] = fin(state[d, c], count[d]) (0 for a row without neighbours): one warp per row,
 * striding over rows beyond the grid, V columns a lane (V = 4: the S x 4 state floats of four
 * columns as S 16-byte loads), so that a row's count is read once and no division finds the
 * row (the flat one-thread-per-element form ran at 42% of HBM bandwidth on W4's input layer,
 * H100). */
template <class A, int V>
__global__ void k_finalize(const float *__restrict__ val, const int *__restrict__ count, i64 n_dst,
                           i64 dim, float *__restrict__ dst) {
  const int lane = threadIdx.x & 31;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 r = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; r < n_dst; r += warps) {
    const int c = count[r];
    const float n = (float)c;
    for (i64 j = (i64)lane * V; j < dim; j += 32 * V) {
      float s[V * A::S], y[V];
      const float *p = val + (r * dim + j) * A::S;
      if constexpr (V == 4) {
        _Pragma("unroll")
        for (int q = 0; q < A::S; q++)
          ld<4>(s + 4 * q, p + 4 * q);
      } else {
        _Pragma("unroll")
        for (int q = 0; q < V * A::S; q++)
          s[q] = p[q];
      }
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        y[v] = c == 0 ? 0.0f : A::fin(s + v * A::S, n);
      st<V>(dst + r * dim + j, y);
    }
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
