/* The gather-aggregate kernel template of aggregators defined with NG_AGGREGATOR_SOURCE
 * (docs/aggregators.md). One text, two compilers: NG__AGG_TEMPLATE expands it into code (the
 * built-in aggregators' instances, compiled by nvcc with the library, gpu/backend_cuda_uagg.cu)
 * and into the string ng__agg_template_src, which gpu/backend_cuda_uagg.cu hands to NVRTC behind
 * a user aggregator's source at run time. It therefore includes nothing, names no type of the
 * library, and writes pragmas as _Pragma. The one thing it takes from outside is core/rng.h's
 * shared part (ng_mix64, ng_dropout_keep): nvcc sees it through backend_cuda_impl.h, NVRTC as
 * the string ng__rng_src, which backend_cuda_uagg.cu puts in front of this text.
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
 * by the instances of k_fwd with Drop: whether it is kept (a kept value is multiplied by
 * scale, a dropped one is 0). */
struct drop {
  u64 key;
  u32 threshold;
  float scale;
};

__device__ __forceinline__ bool kept(const drop &dr, u64 i) {
  return ng_dropout_keep(dr.key, i, dr.threshold);
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

/* T chunks of V columns of one row. Full: every chunk lies inside the row (the whole warp's
 * group of T chunks does), so no column is tested; otherwise zeros past dim. A test per chunk
 * is a predicate per load, which ptxas if-converts into the loads' block; without the tests
 * the bf16 and sum instances keep 16 loads in flight instead of 11-12. */
template <int V, int T, bool Full, class E>
__device__ __forceinline__ void load(float (&x)[T][V], const E *row, i64 j0, i64 span, i64 dim) {
  _Pragma("unroll")
  for (int k = 0; k < T; k++) {
    const i64 j = j0 + k * span;
    if (Full || j < dim) {
      ld<V>(x[k], row + j);
    } else {
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        x[k][v] = 0.0f;
    }
  }
}

/* Input dropout of one neighbour (row r) over the lane's T x V values: bit k V + v of the
 * result says whether element (r, j0 + k span + v) is kept (kept). The bits depend on the row
 * and the columns only, so they are computed before the row's loads are issued: one register a
 * row while the loads are in flight, rather than the hash's 64-bit temporaries after them.
 * With V = 4 the four elements of a chunk start at a multiple of 4 (dim and j are), so they
 * are the two halves of two hashes (element i takes half i & 1 of ng_mix64(key ^ (i >> 1))): two
 * ng_mix64 for four elements instead of four, the same bits. */
template <int V, int T>
__device__ __forceinline__ u32 keep_bits(const drop &dr, i64 r, i64 j0, i64 span, i64 dim) {
  static_assert(V * T <= 32, "one bit a value");
  u32 keep = 0;
  _Pragma("unroll")
  for (int k = 0; k < T; k++) {
    const u64 base = (u64)(r * dim + j0 + k * span);
    if constexpr (V == 4) {
      const u64 h0 = ng_mix64(dr.key ^ (base >> 1));
      const u64 h1 = ng_mix64(dr.key ^ ((base >> 1) + 1));
      keep |= (u32)((u32)h0 >= dr.threshold) << (4 * k);
      keep |= (u32)((u32)(h0 >> 32) >= dr.threshold) << (4 * k + 1);
      keep |= (u32)((u32)h1 >= dr.threshold) << (4 * k + 2);
      keep |= (u32)((u32)(h1 >> 32) >= dr.threshold) << (4 * k + 3);
    } else {
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        keep |= (u32)kept(dr, base + v) << (k * V + v);
    }
  }
  return keep;
}

/* x after the input dropout whose kept elements are the bits of `keep` (ng_dropped: a kept
 * value times scale, a dropped one 0). The test for "all kept" gives the same values as the
 * general form; it is there for ptxas: a branch between a row's loads and their first use
 * keeps the loads together in front of it (the hand-written kernels had one, their run-time
 * dropout test). Without it the fp32 sum's instance of 1024-wide rows issued its 8 loads
 * interleaved with the sums, 3-4 in flight. */
template <int V, int T>
__device__ __forceinline__ void apply_drop(float (&x)[T][V], u32 keep, float scale) {
  constexpr u32 all = V * T == 32 ? ~0u : (1u << (V * T)) - 1;
  if (keep == all) {
    _Pragma("unroll")
    for (int k = 0; k < T; k++)
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        x[k][v] = __fmul_rn(x[k][v], scale);
    return;
  }
  _Pragma("unroll")
  for (int k = 0; k < T; k++)
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      x[k][v] = (keep >> (k * V + v)) & 1 ? __fmul_rn(x[k][v], scale) : 0.0f;
}

/* One neighbour (weight w: 1 when unweighted, and 1 * x is x bit for bit) into the states,
 * after its input dropout when Drop (keep: its keep_bits). Dropout is a template argument, not
 * a run-time test: with the test in the kernel nvcc kept both forms of the accumulation live
 * and the V = 4, T = 8 instances took 164-180 registers, one block of 256 threads an SM instead
 * of two (the 1.7% the template lost on W1 against the hand-written kernel). Splitting the
 * accumulation by weighted / unweighted costs registers the same way (bf16 rows: 165 against
 * 127), so an unweighted edge multiplies by 1. */
template <class A, int V, int T, bool Drop>
__device__ __forceinline__ void accumulate(float (&s)[T][V][A::S], float (&x)[T][V], float w,
                                           u32 keep, float scale) {
  if constexpr (Drop)
    apply_drop<V, T>(x, keep, scale);
  _Pragma("unroll")
  for (int k = 0; k < T; k++)
    _Pragma("unroll")
    for (int v = 0; v < V; v++)
      A::acc(s[k][v], x[k][v], w);
}

/* Selection aggregators, for the built-ins max and min only (not part of the user API: a user
 * aggregator's ops struct has no Select, so is_select is false and none of the code below is
 * in its kernels). An ops struct with enum { Select = 1 } (and S = 1) keeps per element one of
 * the values it saw, and acc either keeps the state or replaces it by x (max: x > s ? x : s).
 * The template then starts the state from the first neighbour's value rather than from init,
 * as the CPU backend does, so that a NaN first neighbour stays NaN (init = -inf followed by
 * acc would pass over it); a row without neighbours has state 0 (the CPU's). The forward can
 * also write per element the source row of the value kept (training's argbest, which the
 * backward routes the gradient to; -1 for a row without neighbours): the row of the last
 * neighbour whose acc changed the state's bits. For max that is a neighbour strictly greater
 * than all before it (x > s changes the bits: x and s are then different numbers; otherwise
 * the state is kept as it was), so a later tie, a repeated source (the same value again) and
 * a NaN after the first never win. */
template <class A, class = void> struct is_select {
  static constexpr bool value = false;
};
template <class A> struct is_select<A, decltype((void)A::Select)> {
  static constexpr bool value = A::Select != 0;
};

/* One neighbour into a selection state, recording its row r where acc changed the state's
 * bits. */
template <class A, int V, int T, bool Drop>
__device__ __forceinline__ void pick(float (&s)[T][V][A::S], int (&a)[T][V], float (&x)[T][V],
                                     i64 r, u32 keep, float scale) {
  if constexpr (Drop)
    apply_drop<V, T>(x, keep, scale);
  _Pragma("unroll")
  for (int k = 0; k < T; k++)
    _Pragma("unroll")
    for (int v = 0; v < V; v++) {
      const u32 before = __float_as_uint(s[k][v][0]);
      A::acc(s[k][v], x[k][v], 1.0f);
      if (__float_as_uint(s[k][v][0]) != before)
        a[k][v] = (int)r;
    }
}

/* A selection state started from neighbour r's values x (after its dropout). */
template <class A, int V, int T, bool Drop, bool Arg>
__device__ __forceinline__ void first(float (&s)[T][V][A::S], int (&a)[Arg ? T : 1][V],
                                      float (&x)[T][V], i64 r, u32 keep, float scale) {
  if constexpr (Drop)
    apply_drop<V, T>(x, keep, scale);
  _Pragma("unroll")
  for (int k = 0; k < T; k++)
    _Pragma("unroll")
    for (int v = 0; v < V; v++) {
      s[k][v][0] = x[k][v];
      if constexpr (Arg)
        a[k][v] = (int)r;
    }
}

/* The states of one destination (edges e0 .. e1) over the lane's T chunks at j0. Pair: two
 * neighbours' rows loaded before either is accumulated (2 T loads of 16 bytes in flight a
 * lane); a selection aggregator's first two neighbours are such a pair too (the state is the
 * first's values, the second accumulated into it), so a row of 10 neighbours takes five rounds
 * of loads, as the sum's does. One row at a time, with its T loads in flight as the
 * hand-written kernels had: with Arg (the indices take the registers of a second row), and with
 * Drop over more than 16 values a lane (1024-wide rows: two rows, their keep bits and the hash
 * spilled 50-300 bytes a thread at 128 registers). */
template <class A, int V, int T, class E, bool Drop, bool Arg, bool Full>
__device__ __forceinline__ void reduce(float (&s)[T][V][A::S], int (&a)[Arg ? T : 1][V],
                                       const blk &b, const E *__restrict__ src, i64 dim,
                                       const drop &dr, int e0, int e1, i64 j0, i64 span) {
  constexpr bool Sel = is_select<A>::value;
  constexpr bool Pair = !Arg && (!Drop || V * T <= 16);
  const bool weighted = b.edge_w != nullptr;
  float x0[T][V], x1[T][V];
  u32 k0 = 0, k1 = 0; /* keep_bits of the two rows (Drop) */
  int e = e0;
  if constexpr (Sel) {
    if (e0 == e1) {
      _Pragma("unroll")
      for (int k = 0; k < T; k++)
        _Pragma("unroll")
        for (int v = 0; v < V; v++) {
          s[k][v][0] = 0.0f;
          if constexpr (Arg)
            a[k][v] = -1;
        }
      return;
    }
    const i64 r0 = b.indices[e0];
    if constexpr (Drop)
      k0 = keep_bits<V, T>(dr, r0, j0, span, dim);
    if (!Pair || e0 + 1 == e1) {
      load<V, T, Full>(x0, src + r0 * dim, j0, span, dim);
      first<A, V, T, Drop, Arg>(s, a, x0, r0, k0, dr.scale);
      e = e0 + 1;
    } else {
      const i64 r1 = b.indices[e0 + 1];
      if constexpr (Drop)
        k1 = keep_bits<V, T>(dr, r1, j0, span, dim);
      load<V, T, Full>(x0, src + r0 * dim, j0, span, dim);
      load<V, T, Full>(x1, src + r1 * dim, j0, span, dim);
      first<A, V, T, Drop, Arg>(s, a, x0, r0, k0, dr.scale);
      accumulate<A, V, T, Drop>(s, x1, 1.0f, k1, dr.scale);
      e = e0 + 2;
    }
  } else {
    _Pragma("unroll")
    for (int k = 0; k < T; k++)
      _Pragma("unroll")
      for (int v = 0; v < V; v++)
        A::init(s[k][v]);
  }
  if constexpr (Pair) {
    for (; e + 1 < e1; e += 2) {
      const i64 r0 = b.indices[e], r1 = b.indices[e + 1];
      const float w0 = weighted ? b.edge_w[e] : 1.0f, w1 = weighted ? b.edge_w[e + 1] : 1.0f;
      if constexpr (Drop) {
        k0 = keep_bits<V, T>(dr, r0, j0, span, dim);
        k1 = keep_bits<V, T>(dr, r1, j0, span, dim);
      }
      load<V, T, Full>(x0, src + r0 * dim, j0, span, dim);
      load<V, T, Full>(x1, src + r1 * dim, j0, span, dim);
      accumulate<A, V, T, Drop>(s, x0, w0, k0, dr.scale);
      accumulate<A, V, T, Drop>(s, x1, w1, k1, dr.scale);
    }
  }
  for (; e < e1; e++) { /* one row at a time (the last of an odd count, with a Pair) */
    /* With a Pair this runs at most once; told so, ptxas does not unroll it into more loads in
     * flight, which took W4's 128-wide instances from 32 registers to 40-46 and 5 blocks an SM
     * (its sum and mean ran 5% slower than the kernels they replaced). */
    if constexpr (Pair)
      if (e + 1 != e1)
        __builtin_unreachable();
    const i64 r0 = b.indices[e];
    const float w0 = weighted ? b.edge_w[e] : 1.0f;
    if constexpr (Drop)
      k0 = keep_bits<V, T>(dr, r0, j0, span, dim);
    load<V, T, Full>(x0, src + r0 * dim, j0, span, dim);
    if constexpr (Arg)
      pick<A, V, T, Drop>(s, a, x0, r0, k0, dr.scale);
    else
      accumulate<A, V, T, Drop>(s, x0, w0, k0, dr.scale);
  }
}

/* Forward (out != NULL: finalized rows [n_dst, dim], 0 without neighbours, plus
 * self_w[d] * src[d] when the block has self-loop weights) or partial state (state
 * [n_dst, dim, S] and count [n_dst]; no self loop): one warp per destination and group of T
 * chunks of 32 V columns, neighbours in edge order (reduce). A warp whose group lies inside
 * the row (every group when dim is a multiple of 32 V T: 1024-wide rows, W4's 128) runs the
 * Full instance of reduce, without a column test. E is float, or unsigned short for bf16 rows.
 * Registers decide the speed of the wide rows: two blocks of 256 threads an SM need at most 128
 * a thread (tests/test_gpu_parity.c checks that every built-in V = 4, T = 8 instance keeps
 * two). Arg (selection aggregators, k_fwd_arg): with the source row of each kept value in arg
 * [n_dst, dim]. */
template <class A, int V, int T, class E, bool Drop, bool Arg>
__device__ __forceinline__ void fwd(const blk &b, const E *__restrict__ src, i64 dim,
                                    const drop &dr, float *__restrict__ out,
                                    float *__restrict__ state, int *__restrict__ count,
                                    int *__restrict__ arg) {
  constexpr bool Sel = is_select<A>::value;
  static_assert(!Sel || A::S == 1, "a selection aggregator keeps one value");
  static_assert(!Arg || Sel, "only a selection aggregator has an index output");
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
    int a[Arg ? T : 1][V]; /* the index output's (a single unused row without Arg) */
    (void)a;
    /* Whether the warp's whole group (lane 0's first column + T chunks of 32 V) is inside the
     * row: the same for every lane, so the warp does not split between the two paths. With
     * T = 1 the lane's one chunk starts at j0 < dim, so it is inside: one path. */
    const bool full = T == 1 || j0 - lane * V + T * span <= dim;
    if (full)
      reduce<A, V, T, E, Drop, Arg, true>(s, a, b, src, dim, dr, e0, e1, j0, span);
    else
      reduce<A, V, T, E, Drop, Arg, false>(s, a, b, src, dim, dr, e0, e1, j0, span);
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
    /* The self loop (GCN's A + I): y + self_w[d] x_d, after finalize, without dropout. A
     * selection aggregator has none (a max with one is refused: core/backend_check.c), so its
     * instances leave the code out. */
    const bool self = !Sel && b.self_w != nullptr;
    const float sw = self ? b.self_w[d] : 0.0f;
    float x[T][V];
    if (self)
      load<V, T, false>(x, src + d * dim, j0, span, dim);
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
          y[v] = y[v] + sw * x[k][v];
      }
      st<V>(out + d * dim + j, y);
      if constexpr (Arg) {
        int *q = arg + d * dim + j;
        if constexpr (V == 4) {
          *reinterpret_cast<int4 *>(q) = make_int4(a[k][0], a[k][1], a[k][2], a[k][3]);
        } else {
          _Pragma("unroll")
          for (int v = 0; v < V; v++)
            q[v] = a[k][v];
        }
      }
    }
  }
}

/* The forward and partial state of every aggregator (fwd above). Two blocks of 256 threads an
 * SM (at most 128 registers a thread) for several chunks a lane: with __launch_bounds__(256)
 * alone ptxas aimed at its own register target, and the max instance of 1024-wide rows took 64
 * registers by issuing each 16-byte load only after the previous one was used (one load in
 * flight a lane, where the hand-written kernel kept a row of 8; W1's one-batch forward ran 1.8x
 * slower); bounded to two blocks it takes up to 128 and keeps both rows' loads in flight
 * (docs/aggregators.md). One chunk a lane (T = 1: rows of at most 32 V, W4's 128) is left
 * unbounded (0: no minimum), where ptxas keeps 31-32 registers and eight blocks an SM. */
template <class A, int V, int T, class E, bool Drop>
__global__ void __launch_bounds__(256, T > 1 ? 2 : 0)
k_fwd(blk b, const E *__restrict__ src, i64 dim, drop dr, float *__restrict__ out,
      float *__restrict__ state, int *__restrict__ count) {
  fwd<A, V, T, E, Drop, false>(b, src, dim, dr, out, state, count, nullptr);
}

/* The forward of a selection aggregator (built-in max and min) with its index output, fp32
 * rows, no dropout (aggr_fwd takes none); two blocks an SM at every width (at T = 1 its
 * argbest registers keep it near the hand-written kernel's 40 either way). */
template <class A, int V, int T>
__global__ void __launch_bounds__(256, 2)
k_fwd_arg(blk b, const float *__restrict__ src, i64 dim, float *__restrict__ out,
          int *__restrict__ arg) {
  fwd<A, V, T, float, false, true>(b, src, dim, drop{0, 0, 0.0f}, out, nullptr, nullptr, arg);
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
