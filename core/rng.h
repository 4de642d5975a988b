/* Counter-based random numbers: the value for (seed, stream, counter) never depends on which
 * thread asks or in which order, which is what makes generation, sampling and dropout
 * reproducible for any thread count. */
#ifndef NG_RNG_H
#define NG_RNG_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
static inline uint64_t ng_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A hash of several words: seeds per-(run, epoch, iteration, node) streams.
static inline uint64_t ng_hash2(uint64_t a, uint64_t b) {
  return ng_mix64(ng_mix64(a) ^ b);
}
static inline uint64_t ng_hash3(uint64_t a, uint64_t b, uint64_t c) {
  return ng_mix64(ng_hash2(a, b) ^ c);
}

/// A small sequential generator (xoshiro256**), seeded from a hash; one per stream.
typedef struct {
  uint64_t s[4];
} ng_rng;

static inline void ng_rng_seed(ng_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++)
    r->s[i] = ng_mix64(seed + (uint64_t)i * 0x632be59bd9b4e019ULL);
}

static inline uint64_t ng_rotl64(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static inline uint64_t ng_rng_next(ng_rng *r) {
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

/// Uniform double in [0, 1) with 53 random bits.
static inline double ng_rng_uniform(ng_rng *r) {
  return (double)(ng_rng_next(r) >> 11) * 0x1.0p-53;
}

/// Uniform integer in [0, n) without modulo bias (Lemire's multiply-shift with rejection).
static inline uint64_t ng_rng_below(ng_rng *r, uint64_t n) {
  uint64_t x = ng_rng_next(r);
  __uint128_t m = (__uint128_t)x * n;
  uint64_t low = (uint64_t)m;
  if (low < n) {
    uint64_t threshold = -n % n;
    while (low < threshold) {
      x = ng_rng_next(r);
      m = (__uint128_t)x * n;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

/// Standard normal deviate (Box-Muller; uses two uniforms, returns one value).
static inline double ng_rng_normal(ng_rng *r) {
  double u1 = 1.0 - ng_rng_uniform(r); /* (0, 1] */
  double u2 = ng_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/// The dropout rule every backend follows, so that masks agree bit for bit: element i of a
/// tensor is kept iff 32 bits of ng_mix64(key ^ (i / 2)) (the low half for even i, the high half
/// for odd i) are >= ng_dropout_threshold(p), where key = ng_mix64(seed). One hash serves two
/// elements; p is resolved to 2^-32.
static inline uint32_t ng_dropout_threshold(float p) {
  return (uint32_t)((double)p * 4294967296.0); /* p < 1, so below 2^32 */
}
static inline bool ng_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold) {
  uint64_t h = ng_mix64(key ^ (i >> 1));
  return (uint32_t)(h >> ((i & 1) * 32)) >= threshold;
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
