/* The id -> local index table (core/idmap.h): numbering in order of first appearance, lookups,
 * growth that keeps every index, clearing by generation (and its wrap-around), restarting in a
 * small window of a large allocation, against a plain array as the reference. */
#include "ng_test.h"
#include "idmap.h"
#include "rng.h"

#include <stdlib.h>

/* Adds n ids drawn from [0, range) (repeats included) in `batches` uses of one table, growing
 * it as the sampler does (room for everything seen so far plus the next id), and checks every
 * answer against first[] (the local index of each id in the current use, -1 when absent). */
static void check_uses(ng_idmap *m, int64_t range, int64_t n, int batches, uint64_t seed,
                       bool restart) {
  int32_t *first = ng_test_xmalloc((size_t)range * sizeof *first);
  int64_t *ids = ng_test_xmalloc((size_t)(range + 1) * sizeof *ids);
  ng_rng r;
  ng_rng_seed(&r, seed);
  int bad = 0;
  for (int b = 0; b < batches; b++) {
    if (restart)
      ng__idmap_restart(m);
    else
      ng__idmap_clear(m);
    for (int64_t i = 0; i < range; i++)
      first[i] = -1;
    int32_t count = 0;
    for (int64_t i = 0; i < n; i++) {
      /* Runs of consecutive ids and random ones, as rows of renumbered and random graphs. */
      const int64_t key =
          (i & 64) ? (int64_t)ng_rng_below(&r, (uint64_t)range) : (b * 7 + i) % range;
      EXPECT_OK(ng__idmap_reserve(m, (size_t)count + 1, ids, count, "test table"));
      const ng_idmap_view v = ng__idmap_view(m);
      const int32_t before = count, got = ng__idmap_add(v, key, ids, &count);
      const int32_t want = first[key] >= 0 ? first[key] : before;
      if (first[key] < 0)
        first[key] = before;
      bad += got != want || count != before + (want == before) || ids[got] != key;
    }
    const ng_idmap_view v = ng__idmap_view(m);
    for (int64_t k = 0; k < range; k++)
      bad += ng__idmap_find(v, k) != first[k];
    EXPECT_TRUE(m->used >= 2 * (size_t)count && m->cap >= m->used);
  }
  EXPECT_EQ_I(bad, 0);
  free(first);
  free(ids);
}

static void test_numbering(void) {
  ng_idmap m = {0};
  EXPECT_EQ_I(ng__idmap_find(ng__idmap_view(&m), 3), -1);
  check_uses(&m, 5000, 20000, 3, 1, false);
  /* Ids far beyond int32 and a table that grows from its first size several times. */
  ng_idmap big = {0};
  ng__idmap_clear(&big);
  int64_t ids[3000] = {0};
  int32_t n = 0;
  for (int i = 0; i < 3000; i++) {
    EXPECT_OK(ng__idmap_reserve(&big, (size_t)n + 1, ids, n, "test table"));
    EXPECT_EQ_I(ng__idmap_add(ng__idmap_view(&big), ((int64_t)i << 35) + 17, ids, &n), i);
  }
  for (int i = 0; i < 3000; i++)
    EXPECT_EQ_I(ng__idmap_find(ng__idmap_view(&big), ((int64_t)i << 35) + 17), i);
  EXPECT_EQ_I(ng__idmap_find(ng__idmap_view(&big), 17 + 1), -1);
  EXPECT_EQ_I(ng__idmap_bytes(&big), big.cap * sizeof(ng_idmap_slot));
  ng__idmap_free(&big);
  EXPECT_TRUE(big.slot == NULL && big.cap == 0);
  ng__idmap_free(&m);
  ng__idmap_free(NULL);
}

/* A restart after a large use: the next, small use works within a small window of the
 * allocation, which grows back (re-inserting what it holds) as the use grows, every index kept;
 * a large use after small ones reuses the allocation. */
static void test_restart(void) {
  ng_idmap m = {0};
  check_uses(&m, 40000, 30000, 1, 5, false);
  const size_t big = m.cap;
  EXPECT_TRUE(big >= 32768);
  ng__idmap_restart(&m);
  int64_t ids[200];
  int32_t n = 0;
  EXPECT_OK(ng__idmap_reserve(&m, 200, ids, n, "test table"));
  EXPECT_TRUE(m.used == 1024 && m.cap == big);
  for (int i = 0; i < 200; i++)
    EXPECT_EQ_I(ng__idmap_add(ng__idmap_view(&m), 5 * (int64_t)i + 1, ids, &n), i);
  /* Nothing of the large use shows through the small window. */
  EXPECT_EQ_I(ng__idmap_find(ng__idmap_view(&m), 0), -1);
  EXPECT_EQ_I(ng__idmap_find(ng__idmap_view(&m), 2), -1);
  /* Small and growing uses, then large ones, each after a restart. */
  check_uses(&m, 5000, 600, 4, 6, true);
  EXPECT_TRUE(m.used < big && m.cap == big);
  check_uses(&m, 50000, 15000, 2, 7, true);
  EXPECT_TRUE(m.cap == big);
  ng__idmap_free(&m);
  EXPECT_TRUE(m.used == 0);
}

/* A clear is a new generation; when the generation wraps around the slots are really cleared,
 * so that no slot of an old use looks occupied. */
static void test_generation_wrap(void) {
  ng_idmap m = {0};
  ng__idmap_clear(&m);
  int64_t ids[4] = {0};
  int32_t n = 0;
  EXPECT_OK(ng__idmap_reserve(&m, 4, ids, n, "test table"));
  EXPECT_EQ_I(ng__idmap_add(ng__idmap_view(&m), 42, ids, &n), 0);
  m.gen = UINT32_MAX; /* the slot of 42 carries generation 1 */
  ng__idmap_clear(&m);
  EXPECT_EQ_I(m.gen, 1);
  EXPECT_EQ_I(ng__idmap_find(ng__idmap_view(&m), 42), -1);
  n = 0;
  EXPECT_EQ_I(ng__idmap_add(ng__idmap_view(&m), 7, ids, &n), 0);
  EXPECT_EQ_I(ng__idmap_add(ng__idmap_view(&m), 42, ids, &n), 1);
  check_uses(&m, 300, 1000, 4, 9, false);
  ng__idmap_free(&m);
}

int main(void) {
  RUN_TEST(test_numbering);
  RUN_TEST(test_generation_wrap);
  RUN_TEST(test_restart);
  return ng_test_summary();
}
