/* Counter-based random numbers: the value for (seed, stream, counter) never depends on which
 * thread asks or in which order, which is what makes generation, sampling and dropout
 * reproducible for any thread count.
 *
 * One header for every compiler, so that the CPU, the CUDA backend and user aggregators draw the
 * same bits from one text: host C (C11), nvcc (the functions marked NG_RNG_FN are also device
 * functions: the device sampler, gpu/backend_cuda_sample.cu, and the device dropout) and NVRTC.
 * NVRTC never includes this file: the part inside NG__RNG_SHARED is also kept, under nvcc, as the
 * string ng__rng_src, which gpu/backend_cuda_uagg.cu puts in front of the aggregator template
 * (gpu/agg_template.h) that it compiles at run time, with NG_RNG_FN, uint64_t and uint32_t
 * defined there. That part therefore includes nothing, holds no preprocessor directive and uses
 * only those names. tests/test_rng.c pins its bits. */
#ifndef NG_RNG_H
#define NG_RNG_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NG_RNG_FN static __host__ __device__ __forceinline__
#define NG__RNG_SHARED(...)                                                                        \
  __VA_ARGS__                                                                                      \
  [[maybe_unused]] static const char ng__rng_src[] = #__VA_ARGS__;
#else
#define NG_RNG_FN static inline
#define NG__RNG_SHARED(...) __VA_ARGS__
#endif

// clang-format off
NG__RNG_SHARED(
/* SplitMix64 finaliser: a bijective 64-bit mix with good avalanche. */
NG_RNG_FN uint64_t ng_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* A hash of several words: seeds per-(run, epoch, iteration, node) streams. */
NG_RNG_FN uint64_t ng_hash2(uint64_t a, uint64_t b) {
  return ng_mix64(ng_mix64(a) ^ b);
}
NG_RNG_FN uint64_t ng_hash3(uint64_t a, uint64_t b, uint64_t c) {
  return ng_mix64(ng_hash2(a, b) ^ c);
}

/* A small sequential generator (xoshiro256**), seeded from a hash; one per stream. */
typedef struct {
  uint64_t s[4];
} ng_rng;

NG_RNG_FN void ng_rng_seed(ng_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++)
    r->s[i] = ng_mix64(seed + (uint64_t)i * 0x632be59bd9b4e019ULL);
}

NG_RNG_FN uint64_t ng_rotl64(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

NG_RNG_FN uint64_t ng_rng_next(ng_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = ng_rotl64(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = ng_rotl64(s[3], 45);
  return result;
}

/* The dropout rule every backend follows, so that masks agree bit for bit: element i of a
 * tensor is kept iff 32 bits of ng_mix64(key ^ (i / 2)) (the low half for even i, the high half
 * for odd i) are >= ng_dropout_threshold(p), where key = ng_mix64(seed). One hash serves two
 * elements; p is resolved to 2^-32. */
NG_RNG_FN bool ng_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold) {
  uint64_t h = ng_mix64(key ^ (i >> 1));
  return (uint32_t)(h >> ((i & 1) * 32)) >= threshold;
}
)
// clang-format on

/// The 128-bit product a * b: returns its low 64 bits and writes its high 64 bits to *hi.
NG_RNG_FN uint64_t ng_mul128(uint64_t a, uint64_t b, uint64_t *hi) {
#ifdef __CUDA_ARCH__
  *hi = __umul64hi(a, b);
  return a * b;
#else
  const __uint128_t m = (__uint128_t)a * b;
  *hi = (uint64_t)(m >> 64);
  return (uint64_t)m;
#endif
}

/// Uniform integer in [0, n) without modulo bias (Lemire's multiply-shift with rejection).
NG_RNG_FN uint64_t ng_rng_below(ng_rng *r, uint64_t n) {
  uint64_t hi;
  uint64_t low = ng_mul128(ng_rng_next(r), n, &hi);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold)
      low = ng_mul128(ng_rng_next(r), n, &hi);
  }
  return hi;
}

/// Position i (< n) of a pseudo-random permutation of 0 .. n-1 chosen by `key`: a 4-round
/// Feistel network over the smallest domain of 2^(2h) values that holds n, walked back into
/// [0, n) along the network's own cycle (each step is a bijection of the domain, so the walk is
/// a bijection of [0, n); the domain is under 4n, so a walk takes under 4 steps on average). No
/// table and no set-up: an epoch's order of 10^8 positive edges costs nothing until a position
/// is read, and any worker reads any position. Returns 0 for n <= 1.
NG_RNG_FN uint64_t ng_perm_at(uint64_t i, uint64_t n, uint64_t key) {
  if (n <= 1)
    return 0;
  int bits = 1;
  while (bits < 64 && (n - 1) >> bits)
    bits++;
  const int h = (bits + 1) / 2;
  const uint64_t mask = (1ULL << h) - 1;
  uint64_t x = i;
  do {
    uint64_t l = x >> h, r = x & mask;
    for (uint64_t round = 0; round < 4; round++) {
      const uint64_t f = ng_hash3(key, round, r) & mask;
      const uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    x = (l << h) | r;
  } while (x >= n);
  return x;
}

/// Uniform double in [0, 1) with 53 random bits.
static inline double ng_rng_uniform(ng_rng *r) {
  return (double)(ng_rng_next(r) >> 11) * 0x1.0p-53;
}

/// Standard normal deviate (Box-Muller; uses two uniforms, returns one value).
static inline double ng_rng_normal(ng_rng *r) {
  double u1 = 1.0 - ng_rng_uniform(r); /* (0, 1] */
  double u2 = ng_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/// The threshold of ng_dropout_keep for a dropout probability p < 1: p resolved to 2^-32.
static inline uint32_t ng_dropout_threshold(float p) {
  return (uint32_t)((double)p * 4294967296.0); /* p < 1, so below 2^32 */
}

/// Element `i` of a tensor after inverted dropout by the rule above: x * (1.0f / (1.0f - p)) when
/// kept, 0 otherwise (scale = 1.0f / (1.0f - p), computed once by the caller, in float).
static inline float ng_dropped(float x, uint64_t key, uint64_t i, uint32_t threshold, float scale) {
  return ng_dropout_keep(key, i, threshold) ? x * scale : 0.0f;
}

/// Copies row `row` of a table with `dim` columns (src points at that row) into dst with input
/// dropout keyed by the element's place in the table, (row * dim + c): how the layer-0 input of
/// a tiered run is dropped wherever a row is read (p 0 copies).
static inline void ng_drop_row(float *dst, const float *src, int64_t row, int64_t dim, float p,
                               uint64_t key) {
  if (p == 0.0f) {
    for (int64_t c = 0; c < dim; c++)
      dst[c] = src[c];
    return;
  }
  const uint32_t threshold = ng_dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  const uint64_t base = (uint64_t)row * (uint64_t)dim;
  for (int64_t c = 0; c < dim; c++)
    dst[c] = ng_dropped(src[c], key, base + (uint64_t)c, threshold, scale);
}

#endif /* NG_RNG_H */
