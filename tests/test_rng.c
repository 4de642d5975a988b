/* The counter-based random numbers and the dropout rule (core/rng.h), pinned: every value below
 * was computed by the code before it became the one header that the CPU, the CUDA backend and
 * NVRTC all compile, so that a change to any bit of the hash, the generator or the dropout rule
 * fails here (and the GPU suites that compare the device's bits with the CPU's, gpu_sample,
 * gpu_parity and gpu_agg, would fail with it). */
#include "ng_test.h"
#include "rng.h"

#include <stdlib.h>

#define EXPECT_EQ_U64(a, b)                                                                        \
  do {                                                                                             \
    uint64_t ng_a_ = (uint64_t)(a), ng_b_ = (uint64_t)(b);                                         \
    if (ng_a_ != ng_b_)                                                                            \
      ng_test_fail(__FILE__, __LINE__, "%s == %s: %#018" PRIx64 " vs %#018" PRIx64, #a, #b, ng_a_, \
                   ng_b_);                                                                         \
  } while (0)

/* The float's bits, so that -0.0f and 0.0f or two NaNs are told apart. */
static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static void test_hash(void) {
  EXPECT_EQ_U64(ng_mix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ_U64(ng_mix64(1), 0x910a2dec89025cc1ULL);
  EXPECT_EQ_U64(ng_mix64(42), 0xbdd732262feb6e95ULL);
  EXPECT_EQ_U64(ng_mix64(0x9e3779b97f4a7c15ULL), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ_U64(ng_mix64(UINT64_MAX), 0xe4d971771b652c20ULL);
  EXPECT_EQ_U64(ng_hash2(7, 11), 0xd6a4ec196a4061afULL);
  EXPECT_EQ_U64(ng_hash3(7, 11, 13), 0xed9fe439e1a36d9cULL);
  EXPECT_EQ_U64(ng_hash3(UINT64_MAX, 0, 1ULL << 63), 0x697f5e298100cc59ULL);
}

static void test_generator(void) {
  ng_rng r;
  ng_rng_seed(&r, ng_hash3(1234, 5, 6));
  EXPECT_EQ_U64(r.s[0], 0x7677cc9ef5266704ULL);
  EXPECT_EQ_U64(r.s[1], 0xc8495183b3abc421ULL);
  EXPECT_EQ_U64(r.s[2], 0x9ccd52c30d9ba5cbULL);
  EXPECT_EQ_U64(r.s[3], 0x59d64367080bd0a8ULL);
  EXPECT_EQ_U64(ng_rng_next(&r), 0x71aa134a98bcea94ULL);
  EXPECT_EQ_U64(ng_rng_next(&r), 0x6dc509996f9bee0fULL);
  EXPECT_EQ_U64(ng_rng_next(&r), 0xab73555251a4a157ULL);
  EXPECT_EQ_U64(ng_rng_next(&r), 0x5b41eea71b1fe442ULL);
  /* Bounds from 1 to near 2^64, where the rejection step of ng_rng_below runs often. */
  EXPECT_EQ_U64(ng_rng_below(&r, 1), 0);
  EXPECT_EQ_U64(ng_rng_below(&r, 2), 0);
  EXPECT_EQ_U64(ng_rng_below(&r, 3), 1);
  EXPECT_EQ_U64(ng_rng_below(&r, 10), 2);
  EXPECT_EQ_U64(ng_rng_below(&r, 1000003), 372904);
  EXPECT_EQ_U64(ng_rng_below(&r, (1ULL << 63) + 1), 132353761166500272ULL);
  EXPECT_EQ_U64(ng_rng_below(&r, UINT64_MAX - 5), 1422935549108545860ULL);

  /* 100,000 draws folded into one word: small bounds and bounds just above 2^63. */
  uint64_t fold = 0;
  ng_rng_seed(&r, 99);
  for (int i = 0; i < 100000; i++) {
    const uint64_t n = (uint64_t)i % 977 + ((i & 1) ? (1ULL << 63) + 12345 : 1);
    fold = ng_mix64(fold ^ ng_rng_below(&r, n));
  }
  EXPECT_EQ_U64(fold, 0xd0527fa8939d7552ULL);
  EXPECT_TRUE(ng_rng_uniform(&r) == 0x1.9051993b48e54p-1);
  /* Box-Muller goes through libm's log and cos, whose last bit may differ between libraries. */
  EXPECT_NEAR(ng_rng_normal(&r), 0x1.60b334eaa1ee7p+0, 1e-14);
}

static void test_dropout(void) {
  EXPECT_EQ_I(ng_dropout_threshold(0.5f), 2147483648u);
  EXPECT_EQ_I(ng_dropout_threshold(0.1f), 429496736u);
  EXPECT_EQ_I(ng_dropout_threshold(0.0f), 0);

  const uint64_t key = ng_mix64(2024);
  const uint32_t threshold = ng_dropout_threshold(0.3f);
  uint64_t keep = 0;
  for (uint64_t i = 0; i < 64; i++)
    keep |= (uint64_t)ng_dropout_keep(key, i + 1000, threshold) << i;
  EXPECT_EQ_U64(keep, 0xbe6fffd3adc6f7ffULL);

  const float src[7] = {1, 2, 3, 4, 5, 6, 7};
  const float want[7] = {
      0x1.6db6dcp+0f, 0x1.6db6dcp+1f, 0x1.124924p+2f, 0.0f, 0x1.c92494p+2f, 0x1.124924p+3f, 0.0f};
  float dst[7];
  ng_drop_row(dst, src, 3, 7, 0.3f, key);
  for (int c = 0; c < 7; c++)
    EXPECT_EQ_U64(bits_of(dst[c]), bits_of(want[c]));
  ng_drop_row(dst, src, 3, 7, 0.0f, key);
  for (int c = 0; c < 7; c++)
    EXPECT_EQ_U64(bits_of(dst[c]), bits_of(src[c]));
}

/* ng_perm_at is a bijection of [0, n) for every n (domains of odd and even bit counts, the
 * walk-heavy n just above a power of 4), depends on its key, and moves most positions. */
static void test_permutation(void) {
  const uint64_t sizes[] = {1, 2, 3, 5, 16, 17, 100, 1000, 4097, 65537, 300000};
  for (size_t s = 0; s < NG_TEST_LEN(sizes); s++) {
    const uint64_t n = sizes[s];
    uint8_t *seen = calloc(n, 1);
    uint64_t moved = 0, differ = 0;
    for (uint64_t i = 0; i < n; i++) {
      const uint64_t x = ng_perm_at(i, n, 7);
      EXPECT_TRUE(x < n);
      if (x < n) {
        EXPECT_TRUE(!seen[x]);
        seen[x] = 1;
      }
      moved += x != i;
      differ += x != ng_perm_at(i, n, 8);
    }
    free(seen);
    if (n >= 100) {
      EXPECT_TRUE(moved > n * 9 / 10);  /* a fixed point has probability 1/n */
      EXPECT_TRUE(differ > n * 9 / 10); /* another key, another permutation */
    }
  }
}

int main(void) {
  RUN_TEST(test_hash);
  RUN_TEST(test_generator);
  RUN_TEST(test_dropout);
  RUN_TEST(test_permutation);
  return ng_test_summary();
}
