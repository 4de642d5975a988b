/* The hybrid runtime's infrastructure: ready ring (order, bounded window, close, finish),
 * staging slots, worker pool placement and the feedback controller. Threads that could hang are
 * joined with a deadline, and an alarm ends the whole suite, so a bug fails instead of hanging. */
#include "ng_test.h"
#include "ctrl_impl.h"
#include "pool_impl.h"
#include "ring_impl.h"

#include <hwloc.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { SUITE_DEADLINE_S = 120 };
static const double JOIN_DEADLINE_S = 10.0;

/* Joins `t` or ends the suite: a thread still blocked past the deadline is a hang, and the
 * objects it uses cannot be freed under it. */
static void join_or_die(pthread_t t, const char *what) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)JOIN_DEADLINE_S;
  int rc = pthread_timedjoin_np(t, NULL, &ts);
  if (rc != 0) {
    ng_test_fail(__FILE__, __LINE__, "%s: thread still blocked after %.0f s (rc %d)", what,
                 JOIN_DEADLINE_S, rc);
    fflush(NULL);
    _exit(1);
  }
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* ==== ring: order and window with several producers ==== */

enum { ORDER_ITERS = 3000, ORDER_PRODUCERS = 3, ORDER_CAP = 4 };

typedef struct {
  int64_t iter;
  uint64_t tag;
} order_item;

typedef struct {
  ng_ring *ring;
  order_item *items;
  int64_t next_chunk; /* atomic: the next iteration to hand out */
  int64_t max_put;    /* atomic: the highest iteration whose put returned */
  int put_errors;     /* atomic */
  uint64_t seed;
} order_ctx;

static uint64_t tag_of(int64_t i) {
  return (uint64_t)i * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull;
}

/* Takes chunks of 1..capacity consecutive iterations, as workers take iterations from a counter,
 * and puts each chunk in a random order with random pauses: the ring sees iterations from
 * different producers interleaved and out of order. */
static void *order_producer(void *arg) {
  order_ctx *c = arg;
  uint64_t rng = __atomic_add_fetch(&c->seed, 0x1234567ull, __ATOMIC_RELAXED);
  for (;;) {
    int len = 1 + (int)(xorshift(&rng) % ORDER_CAP);
    int64_t first = __atomic_fetch_add(&c->next_chunk, len, __ATOMIC_RELAXED);
    if (first >= ORDER_ITERS)
      break;
    if (first + len > ORDER_ITERS)
      len = (int)(ORDER_ITERS - first);
    int64_t chunk[ORDER_CAP];
    for (int j = 0; j < len; j++)
      chunk[j] = first + j;
    for (int j = len - 1; j > 0; j--) {
      int k = (int)(xorshift(&rng) % (uint64_t)(j + 1));
      int64_t t = chunk[j];
      chunk[j] = chunk[k];
      chunk[k] = t;
    }
    for (int j = 0; j < len; j++) {
      int64_t i = chunk[j];
      c->items[i].iter = i;
      c->items[i].tag = tag_of(i);
      if (xorshift(&rng) % 64 == 0)
        sleep_ms(1);
      if (ng__ring_put(c->ring, i, &c->items[i]) != NG_OK) {
        __atomic_add_fetch(&c->put_errors, 1, __ATOMIC_RELAXED);
        ng__ring_close(c->ring, NG_ERR_INTERNAL); /* so that the consumer stops too */
        return NULL;
      }
      int64_t m = __atomic_load_n(&c->max_put, __ATOMIC_RELAXED);
      while (i > m && !__atomic_compare_exchange_n(&c->max_put, &m, i, true, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED))
        ;
    }
  }
  return NULL;
}

static void test_ring_order_and_window(void) {
  order_ctx c = {0};
  c.items = ng_test_xmalloc(ORDER_ITERS * sizeof *c.items);
  c.max_put = -1;
  c.seed = 42;
  EXPECT_OK(ng__ring_create(&c.ring, ORDER_CAP));
  if (!c.ring)
    return;
  EXPECT_OK(ng__ring_finish(c.ring, ORDER_ITERS));
  pthread_t th[ORDER_PRODUCERS];
  for (int p = 0; p < ORDER_PRODUCERS; p++)
    pthread_create(&th[p], NULL, order_producer, &c);
  int in_order = 0, intact = 0, window_ok = 0;
  int64_t worst_ahead = 0;
  uint64_t rng = 7;
  for (int64_t t = 0;; t++) {
    int64_t iter = -1;
    void *item = NULL;
    EXPECT_OK(ng__ring_take(c.ring, &iter, &item));
    if (!item) {
      EXPECT_EQ_I(iter, ORDER_ITERS);
      EXPECT_EQ_I(t, ORDER_ITERS);
      break;
    }
    order_item *it = item;
    in_order += iter == t;
    intact += it == &c.items[t] && it->iter == t && it->tag == tag_of(t);
    /* Until the next take, the consumer's position is t + 1: every iteration put so far must be
     * inside [t + 1, t + 1 + capacity). */
    int64_t ahead = __atomic_load_n(&c.max_put, __ATOMIC_RELAXED) - (t + 1);
    worst_ahead = NG_MAX(worst_ahead, ahead);
    window_ok += ahead < ORDER_CAP;
    /* A slow consumer now and then lets the producers run into the window's end. */
    if (xorshift(&rng) % 16 == 0)
      sleep_ms(1);
    if (t > ORDER_ITERS) {
      ng_test_fail(__FILE__, __LINE__, "the ring returned more items than were put");
      break;
    }
  }
  for (int p = 0; p < ORDER_PRODUCERS; p++)
    join_or_die(th[p], "order producer");
  EXPECT_EQ_I(in_order, ORDER_ITERS);
  EXPECT_EQ_I(intact, ORDER_ITERS);
  EXPECT_EQ_I(window_ok, ORDER_ITERS);
  EXPECT_TRUE(worst_ahead < ORDER_CAP);
  EXPECT_EQ_I(c.put_errors, 0);
  ng_ring_stats st;
  ng__ring_stats(c.ring, &st);
  EXPECT_EQ_I(st.puts, ORDER_ITERS);
  EXPECT_EQ_I(st.depth, 0);
  EXPECT_EQ_I(st.next, ORDER_ITERS);
  EXPECT_EQ_I(st.capacity, ORDER_CAP);
  EXPECT_EQ_I(st.producers_waiting, 0);
  /* The consumer paused with the window full: producers must have waited. */
  EXPECT_TRUE(st.put_wait_ns > 0);
  ng__ring_destroy(c.ring);
  free(c.items);
}

/* ==== ring: blocking at the window's end, close, finish ==== */

typedef struct {
  ng_ring *ring;
  int64_t iter;
  void *item;
  ng_status st;
  int done; /* atomic */
} ring_call;

static void *put_thread(void *arg) {
  ring_call *c = arg;
  c->st = ng__ring_put(c->ring, c->iter, c->item);
  __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void *take_thread(void *arg) {
  ring_call *c = arg;
  c->st = ng__ring_take(c->ring, &c->iter, &c->item);
  __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int done(ring_call *c) {
  return __atomic_load_n(&c->done, __ATOMIC_ACQUIRE);
}

/* Waits until `n` producers are blocked on the window (or a deadline passes). */
static void wait_producers_blocked(ng_ring *r, int n) {
  ng_ring_stats st;
  for (int k = 0; k < 2000; k++) {
    ng__ring_stats(r, &st);
    if (st.producers_waiting >= n)
      return;
    sleep_ms(5);
  }
}

static void test_ring_blocks_past_window(void) {
  ng_ring *r = NULL;
  int v[6] = {10, 11, 12, 13, 14, 15};
  EXPECT_OK(ng__ring_create(&r, 4));
  if (!r)
    return;
  for (int i = 0; i < 4; i++)
    EXPECT_OK(ng__ring_put(r, i, &v[i]));
  ring_call c = {r, 4, &v[4], NG_ERR_INTERNAL, 0};
  pthread_t t;
  pthread_create(&t, NULL, put_thread, &c);
  wait_producers_blocked(r, 1);
  sleep_ms(20);
  EXPECT_EQ_I(done(&c), 0); /* iteration 4 is past the window [0, 4) */
  ng_ring_stats st;
  ng__ring_stats(r, &st);
  EXPECT_EQ_I(st.producers_waiting, 1);
  EXPECT_EQ_I(st.depth, 4);
  EXPECT_TRUE(st.put_wait_ns > 0);
  int64_t iter = -1;
  void *item = NULL;
  EXPECT_OK(ng__ring_take(r, &iter, &item));
  EXPECT_EQ_I(iter, 0);
  EXPECT_TRUE(item == &v[0]);
  join_or_die(t, "producer let into the window");
  EXPECT_OK(c.st);
  for (int i = 1; i <= 4; i++) {
    EXPECT_OK(ng__ring_take(r, &iter, &item));
    EXPECT_EQ_I(iter, i);
    EXPECT_TRUE(item == &v[i]);
  }
  /* Misuse is reported, not followed. */
  EXPECT_STATUS(ng__ring_put(r, 2, &v[2]), NG_ERR_STATE);
  EXPECT_STATUS(ng__ring_put(r, 6, NULL), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__ring_put(r, -1, &v[0]), NG_ERR_INVALID_ARG);
  EXPECT_OK(ng__ring_put(r, 6, &v[5]));
  EXPECT_STATUS(ng__ring_put(r, 6, &v[5]), NG_ERR_STATE);
  EXPECT_ERR_HAS("already put");
  ng__ring_destroy(r);
  EXPECT_STATUS(ng__ring_create(&r, 0), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(r == NULL);
}

static void test_ring_close_unblocks(void) {
  ng_ring *r = NULL;
  int v[8];
  EXPECT_OK(ng__ring_create(&r, 4));
  if (!r)
    return;
  /* Iteration 0 never comes: the consumer waits for it, and two producers wait past the window. */
  for (int i = 1; i < 4; i++)
    EXPECT_OK(ng__ring_put(r, i, &v[i]));
  ring_call p1 = {r, 4, &v[4], NG_OK, 0}, p2 = {r, 9, &v[5], NG_OK, 0}, cons = {0};
  cons.ring = r;
  pthread_t tp1, tp2, tc;
  pthread_create(&tp1, NULL, put_thread, &p1);
  pthread_create(&tp2, NULL, put_thread, &p2);
  pthread_create(&tc, NULL, take_thread, &cons);
  wait_producers_blocked(r, 2);
  sleep_ms(20);
  EXPECT_EQ_I(done(&p1) + done(&p2) + done(&cons), 0);
  double t0 = ng__now();
  ng__ring_close(r, NG_ERR_IO);
  ng__ring_close(r, NG_ERR_CUDA); /* the first close wins */
  join_or_die(tp1, "producer after close");
  join_or_die(tp2, "producer after close");
  join_or_die(tc, "consumer after close");
  EXPECT_TRUE(ng__now() - t0 < 5.0);
  EXPECT_STATUS(p1.st, NG_ERR_IO);
  EXPECT_STATUS(p2.st, NG_ERR_IO);
  EXPECT_STATUS(cons.st, NG_ERR_IO);
  EXPECT_TRUE(cons.item == NULL);
  /* Closed: later calls fail at once with the first status, even with items ready. */
  EXPECT_STATUS(ng__ring_put(r, 0, &v[0]), NG_ERR_IO);
  int64_t iter;
  void *item = &v[0];
  EXPECT_STATUS(ng__ring_take(r, &iter, &item), NG_ERR_IO);
  EXPECT_TRUE(item == NULL);
  EXPECT_STATUS(ng__ring_finish(r, 4), NG_ERR_IO);
  /* The items inside can be taken back for cleanup, each once. */
  int seen = 0, sum = 0;
  while (ng__ring_reclaim(r, &iter, &item)) {
    seen++;
    sum += (int)iter;
    EXPECT_TRUE(item == &v[iter]);
  }
  EXPECT_EQ_I(seen, 3);
  EXPECT_EQ_I(sum, 1 + 2 + 3);
  ng_ring_stats st;
  ng__ring_stats(r, &st);
  EXPECT_EQ_I(st.depth, 0);
  EXPECT_TRUE(st.take_wait_ns > 0);
  ng__ring_destroy(r);

  /* NG_OK is not a reason to close: it is recorded as an internal error. */
  EXPECT_OK(ng__ring_create(&r, 2));
  ng__ring_close(r, NG_OK);
  EXPECT_STATUS(ng__ring_take(r, &iter, &item), NG_ERR_INTERNAL);
  ng__ring_destroy(r);
}

static void test_ring_finish_and_drain(void) {
  ng_ring *r = NULL;
  int v[8];
  EXPECT_OK(ng__ring_create(&r, 8));
  if (!r)
    return;
  for (int i = 4; i >= 0; i--)
    EXPECT_OK(ng__ring_put(r, i, &v[i]));
  EXPECT_STATUS(ng__ring_finish(r, 3), NG_ERR_INVALID_ARG); /* 3 and 4 were put */
  EXPECT_OK(ng__ring_finish(r, 5));
  EXPECT_OK(ng__ring_finish(r, 5));
  EXPECT_STATUS(ng__ring_finish(r, 6), NG_ERR_STATE);
  EXPECT_STATUS(ng__ring_put(r, 5, &v[5]), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("past the end");
  int64_t iter;
  void *item;
  for (int i = 0; i < 5; i++) {
    EXPECT_OK(ng__ring_take(r, &iter, &item));
    EXPECT_EQ_I(iter, i);
    EXPECT_TRUE(item == &v[i]);
  }
  for (int k = 0; k < 2; k++) {
    item = &v[0];
    EXPECT_OK(ng__ring_take(r, &iter, &item));
    EXPECT_TRUE(item == NULL);
    EXPECT_EQ_I(iter, 5);
  }
  ng__ring_destroy(r);

  /* finish wakes a consumer waiting for an iteration that will not come, and a producer
   * waiting for a window that will never reach its iteration. */
  EXPECT_OK(ng__ring_create(&r, 2));
  EXPECT_OK(ng__ring_put(r, 0, &v[0]));
  EXPECT_OK(ng__ring_take(r, &iter, &item));
  ring_call cons = {0}, prod = {r, 10, &v[1], NG_OK, 0};
  cons.ring = r;
  pthread_t tc, tp;
  pthread_create(&tc, NULL, take_thread, &cons);
  pthread_create(&tp, NULL, put_thread, &prod);
  wait_producers_blocked(r, 1);
  sleep_ms(20);
  EXPECT_EQ_I(done(&cons) + done(&prod), 0);
  EXPECT_STATUS(ng__ring_finish(r, 0), NG_ERR_INVALID_ARG); /* iteration 0 was taken */
  EXPECT_OK(ng__ring_finish(r, 1));
  join_or_die(tc, "consumer at the end");
  join_or_die(tp, "producer past the end");
  EXPECT_OK(cons.st);
  EXPECT_TRUE(cons.item == NULL);
  EXPECT_EQ_I(cons.iter, 1);
  EXPECT_STATUS(prod.st, NG_ERR_INVALID_ARG);
  /* A close after the end still stops the consumer with the error. */
  ng__ring_close(r, NG_ERR_INTERRUPTED);
  EXPECT_STATUS(ng__ring_take(r, &iter, &item), NG_ERR_INTERRUPTED);
  ng__ring_destroy(r);
}

/* ==== staging slots ==== */

typedef struct {
  int calls;         /* allocation attempts */
  int allocs, frees; /* successful allocations, frees */
  int fail_at;       /* the attempt that fails (1-based), 0 for none */
  size_t live_bytes;
} alloc_ctx;

static ng_status counting_alloc(void *ctx, size_t bytes, void **out) {
  alloc_ctx *a = ctx;
  if (++a->calls == a->fail_at)
    return ng__err(NG_ERR_CUDA, "pinned allocation refused (test)");
  *out = malloc(bytes);
  if (!*out)
    return NG_ERR_NOMEM;
  a->allocs++;
  a->live_bytes += bytes;
  return NG_OK;
}

static void counting_free(void *ctx, void *ptr, size_t bytes) {
  alloc_ctx *a = ctx;
  a->frees++;
  a->live_bytes -= bytes;
  free(ptr);
}

typedef struct {
  ng_slots *s;
  void *got;
  int done; /* atomic */
} acquire_call;

static void *acquire_thread(void *arg) {
  acquire_call *c = arg;
  c->got = ng__slots_acquire(c->s);
  __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Sizing before use: the buffers acquired next (the free list's top) grow to the size asked,
 * the others and the held ones do not; a refused allocation names the buffer and leaves it. */
static void test_slots_presize(void) {
  alloc_ctx a = {0};
  ng_slots *s = NULL;
  EXPECT_OK(ng__slots_create(&s, 5, 64, counting_alloc, counting_free, &a));
  if (!s)
    return;
  void *held = ng__slots_acquire(s); /* buffer 0 */
  EXPECT_EQ_I(ng__slots_next_bytes(s, 0), 64);
  EXPECT_OK(ng__slots_presize(s, 2, 1000));
  EXPECT_EQ_I(ng__slots_next_bytes(s, 0), 1000);
  EXPECT_EQ_I(ng__slots_next_bytes(s, 1), 1000);
  EXPECT_EQ_I(ng__slots_next_bytes(s, 2), 64);
  EXPECT_EQ_I(ng__slots_next_bytes(s, 4), 0); /* four are free */
  EXPECT_EQ_I(ng__slots_bytes(s, held), 64);
  EXPECT_EQ_I(a.live_bytes, 3 * 64 + 2 * 1000);
  /* Already large enough: nothing allocated; more than are free: stops at the last. */
  const int allocs = a.allocs;
  EXPECT_OK(ng__slots_presize(s, 2, 500));
  EXPECT_EQ_I(a.allocs, allocs);
  EXPECT_OK(ng__slots_presize(s, 9, 200));
  EXPECT_EQ_I(ng__slots_next_bytes(s, 3), 200);
  EXPECT_EQ_I(ng__slots_next_bytes(s, 0), 1000);
  /* The acquires take the sized buffers first. */
  void *b1 = ng__slots_acquire(s), *b2 = ng__slots_acquire(s);
  EXPECT_EQ_I(ng__slots_bytes(s, b1), 1000);
  EXPECT_EQ_I(ng__slots_bytes(s, b2), 1000);
  EXPECT_OK(ng__slots_release(s, b2));
  EXPECT_OK(ng__slots_release(s, b1));
  /* A refused allocation: the error names the buffer and the bytes, the buffer stays. */
  a.fail_at = a.calls + 1;
  EXPECT_STATUS(ng__slots_presize(s, 3, 4000), NG_ERR_CUDA);
  EXPECT_ERR_HAS("pinned allocation refused");
  EXPECT_ERR_HAS("to 4000 bytes before the first epoch");
  EXPECT_EQ_I(ng__slots_next_bytes(s, 0), 1000);
  a.fail_at = 0;
  EXPECT_OK(ng__slots_release(s, held));
  ng__slots_destroy(s);
  EXPECT_EQ_I(a.allocs, a.frees);
  EXPECT_EQ_I(a.live_bytes, 0);
}

static void test_slots(void) {
  alloc_ctx a = {0};
  ng_slots *s = NULL;
  EXPECT_OK(ng__slots_create(&s, 2, 64, counting_alloc, counting_free, &a));
  if (!s)
    return;
  EXPECT_EQ_I(a.allocs, 2);
  unsigned char *b0 = ng__slots_acquire(s), *b1 = ng__slots_acquire(s);
  EXPECT_TRUE(b0 && b1 && b0 != b1);
  EXPECT_EQ_I(ng__slots_bytes(s, b0), 64);
  int free_now = -1;
  int64_t wait_ns = -1;
  ng__slots_stats(s, &free_now, &wait_ns);
  EXPECT_EQ_I(free_now, 0);
  EXPECT_EQ_I(wait_ns, 0);

  /* A third acquire blocks until a release. */
  acquire_call c = {s, NULL, 0};
  pthread_t t;
  pthread_create(&t, NULL, acquire_thread, &c);
  sleep_ms(30);
  EXPECT_EQ_I(__atomic_load_n(&c.done, __ATOMIC_ACQUIRE), 0);
  EXPECT_OK(ng__slots_release(s, b1));
  join_or_die(t, "slot acquire after a release");
  EXPECT_TRUE(c.got == b1);
  ng__slots_stats(s, &free_now, &wait_ns);
  EXPECT_TRUE(wait_ns > 0);

  /* Growth keeps the content and is amortised; shrinking is a no-op. */
  for (int i = 0; i < 64; i++)
    b0[i] = (unsigned char)(i * 7 + 1);
  void *g = b0;
  EXPECT_OK(ng__slots_grow(s, &g, 70));
  EXPECT_TRUE(g != NULL);
  EXPECT_EQ_I(ng__slots_bytes(s, g), 96); /* at least 1.5x the old size */
  EXPECT_EQ_I(ng__slots_bytes(s, b0), 0);
  int same = 0;
  for (int i = 0; i < 64; i++)
    same += ((unsigned char *)g)[i] == (unsigned char)(i * 7 + 1);
  EXPECT_EQ_I(same, 64);
  void *g2 = g;
  EXPECT_OK(ng__slots_grow(s, &g2, 10));
  EXPECT_TRUE(g2 == g);
  EXPECT_OK(ng__slots_grow(s, &g2, 1000));
  EXPECT_EQ_I(ng__slots_bytes(s, g2), 1000);
  /* A failing allocator leaves the buffer as it was. */
  a.fail_at = a.calls + 1;
  void *g3 = g2;
  EXPECT_STATUS(ng__slots_grow(s, &g3, 5000), NG_ERR_CUDA);
  EXPECT_ERR_HAS("pinned allocation refused");
  EXPECT_TRUE(g3 == g2);
  EXPECT_EQ_I(ng__slots_bytes(s, g2), 1000);
  a.fail_at = 0;

  /* Misuse: foreign pointers, double release, growing a free buffer. */
  int foreign;
  EXPECT_STATUS(ng__slots_release(s, &foreign), NG_ERR_INVALID_ARG);
  EXPECT_OK(ng__slots_release(s, g2));
  EXPECT_STATUS(ng__slots_release(s, g2), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("released twice");
  void *g4 = g2;
  EXPECT_STATUS(ng__slots_grow(s, &g4, 5000), NG_ERR_INVALID_ARG);

  /* The last released buffer is reused first. */
  void *again = ng__slots_acquire(s);
  EXPECT_TRUE(again == g2);

  /* Close: a blocked acquire returns NULL, later ones too, releases are still accepted. */
  acquire_call c2 = {s, &foreign, 0};
  pthread_create(&t, NULL, acquire_thread, &c2);
  sleep_ms(20);
  EXPECT_EQ_I(__atomic_load_n(&c2.done, __ATOMIC_ACQUIRE), 0);
  ng__slots_close(s);
  join_or_die(t, "slot acquire after close");
  EXPECT_TRUE(c2.got == NULL);
  EXPECT_OK(ng__slots_release(s, again));
  EXPECT_TRUE(ng__slots_acquire(s) == NULL);
  ng__slots_destroy(s);
  EXPECT_EQ_I(a.allocs, a.frees);
  EXPECT_EQ_I(a.live_bytes, 0);

  /* A failing allocation during creation frees what was allocated and keeps its message. */
  alloc_ctx f = {.fail_at = 3};
  s = NULL;
  EXPECT_STATUS(ng__slots_create(&s, 4, 128, counting_alloc, counting_free, &f), NG_ERR_CUDA);
  EXPECT_ERR_HAS("pinned allocation refused");
  EXPECT_ERR_HAS("staging buffer 2 of 4");
  EXPECT_TRUE(s == NULL);
  EXPECT_EQ_I(f.frees, 2);
  EXPECT_EQ_I(f.live_bytes, 0);

  EXPECT_STATUS(ng__slots_create(&s, 0, 128, NULL, NULL, NULL), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__slots_create(&s, 2, 0, NULL, NULL, NULL), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__slots_create(&s, 2, 8, counting_alloc, NULL, &f), NG_ERR_INVALID_ARG);

  /* The default allocator gives cache-line aligned buffers. */
  EXPECT_OK(ng__slots_create(&s, 3, 100, NULL, NULL, NULL));
  if (s) {
    void *d = ng__slots_acquire(s);
    EXPECT_EQ_I((uintptr_t)d % 64, 0);
    EXPECT_OK(ng__slots_grow(s, &d, 300));
    EXPECT_EQ_I((uintptr_t)d % 64, 0);
    ng__slots_destroy(s);
  }
}

/* ==== worker pool ==== */

enum { MAX_TEST_WORKERS = 16 };

typedef struct {
  int calls;                 /* atomic */
  int ran[MAX_TEST_WORKERS]; /* atomic */
  int cpu[MAX_TEST_WORKERS];
  int affinity_count[MAX_TEST_WORKERS];
} pool_ctx;

static void pool_fn(void *arg, int w) {
  pool_ctx *c = arg;
  __atomic_add_fetch(&c->calls, 1, __ATOMIC_ACQ_REL);
  if (w < 0 || w >= MAX_TEST_WORKERS)
    return;
  __atomic_add_fetch(&c->ran[w], 1, __ATOMIC_RELAXED);
  cpu_set_t set;
  CPU_ZERO(&set);
  c->affinity_count[w] = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
  c->cpu[w] = sched_getcpu();
}

static cpu_set_t initial_affinity;

/* Runs a pool to completion and checks what every pool must guarantee. Returns false when the
 * pool did not start. */
static bool run_pool(const ng_pool_opts *o, int expect_workers, pool_ctx *c, int *cores,
                     bool *bound, int *device_core, char *desc, size_t desc_cap) {
  memset(c, 0, sizeof *c);
  ng_pool *p = NULL;
  ng_status st = ng__pool_start(&p, o, pool_fn, c);
  EXPECT_OK(st);
  if (st != NG_OK)
    return false;
  int n = ng__pool_workers(p);
  if (expect_workers > 0)
    EXPECT_EQ_I(n, expect_workers);
  for (int w = 0; w < n && w < MAX_TEST_WORKERS; w++)
    cores[w] = ng__pool_core(p, w);
  EXPECT_EQ_I(ng__pool_core(p, -1), -1);
  EXPECT_EQ_I(ng__pool_core(p, n), -1);
  *device_core = ng__pool_device_core(p);
  snprintf(desc, desc_cap, "%s", ng__pool_describe(p));
  /* Wait for every worker to have run before reading the binding flags. */
  for (int k = 0; k < 2000 && __atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) < n; k++)
    sleep_ms(5);
  for (int w = 0; w < n && w < MAX_TEST_WORKERS; w++)
    bound[w] = ng__pool_bound(p, w);
  ng__pool_join(p);
  EXPECT_EQ_I(c->calls, n);
  int once = 0;
  for (int w = 0; w < n && w < MAX_TEST_WORKERS; w++) {
    once += c->ran[w] == 1;
    EXPECT_TRUE(CPU_ISSET(cores[w], &initial_affinity));
    if (bound[w]) {
      EXPECT_EQ_I(c->cpu[w], cores[w]);
      EXPECT_EQ_I(c->affinity_count[w], 1);
    }
    if (!o->bind)
      EXPECT_TRUE(!bound[w]);
  }
  EXPECT_EQ_I(once, n);
  return true;
}

static void test_pool_workers(void) {
  int ncpu = CPU_COUNT(&initial_affinity);
  for (int bind = 0; bind < 2; bind++) {
    for (int n = 2; n <= 3; n++) {
      ng_pool_opts o = NG_POOL_OPTS_INIT;
      o.workers = n;
      o.bind = bind;
      pool_ctx c;
      int cores[MAX_TEST_WORKERS], dev;
      bool bound[MAX_TEST_WORKERS];
      char desc[512];
      if (!run_pool(&o, n, &c, cores, bound, &dev, desc, sizeof desc))
        continue;
      EXPECT_TRUE(dev >= 0 && CPU_ISSET(dev, &initial_affinity));
      /* Distinct cores, away from the device core, whenever there are enough of them. */
      if (n + 1 <= ncpu) {
        int clash = 0;
        for (int i = 0; i < n; i++) {
          clash += cores[i] == dev;
          for (int j = 0; j < i; j++)
            clash += cores[i] == cores[j];
        }
        EXPECT_EQ_I(clash, 0);
      }
      char want[64];
      snprintf(want, sizeof want, "%d workers on core", n);
      EXPECT_TRUE(strstr(desc, want) != NULL);
      snprintf(want, sizeof want, "device thread on core %d", dev);
      EXPECT_TRUE(strstr(desc, want) != NULL);
      if (!bind)
        EXPECT_TRUE(strstr(desc, "unbound") != NULL);
      int n_bound = 0;
      for (int w = 0; w < n; w++)
        n_bound += bound[w];
      printf("        %s (%d bound)\n", desc, n_bound);
    }
  }
}

static void test_pool_default_count_and_cpuset(void) {
  int ncpu = CPU_COUNT(&initial_affinity);
  int first = -1;
  for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
    if (CPU_ISSET(i, &initial_affinity))
      first = i;
  pool_ctx c;
  int cores[MAX_TEST_WORKERS], dev;
  bool bound[MAX_TEST_WORKERS];
  char desc[512];

  /* workers = 0: one per core minus the device core (at least one). */
  ng_pool_opts o = NG_POOL_OPTS_INIT;
  if (ncpu - 1 <= MAX_TEST_WORKERS)
    run_pool(&o, NG_MAX(1, ncpu - 1), &c, cores, bound, &dev, desc, sizeof desc);

  /* Without a reserved core, workers = 0 takes every core. */
  o.reserve_device_core = false;
  o.bind = false;
  if (ncpu <= MAX_TEST_WORKERS && run_pool(&o, ncpu, &c, cores, bound, &dev, desc, sizeof desc)) {
    EXPECT_EQ_I(dev, -1);
    int clash = 0;
    for (int i = 0; i < ncpu; i++)
      for (int j = 0; j < i; j++)
        clash += cores[i] == cores[j];
    EXPECT_EQ_I(clash, 0);
    EXPECT_TRUE(strstr(desc, "oversubscribed") == NULL);
  }

  /* One listed core: the device thread and two workers share it, and the pool says so. */
  char one[16];
  snprintf(one, sizeof one, "%d", first);
  ng_pool_opts q = NG_POOL_OPTS_INIT;
  q.cpuset = one;
  q.workers = 2;
  ng_pool *p = NULL;
  pool_ctx pc = {0};
  EXPECT_OK(ng__pool_start(&p, &q, pool_fn, &pc));
  if (p) {
    EXPECT_EQ_I(ng__pool_device_core(p), first);
    EXPECT_EQ_I(ng__pool_core(p, 0), first);
    EXPECT_EQ_I(ng__pool_core(p, 1), first);
    EXPECT_TRUE(ng__pool_oversubscribed(p));
    EXPECT_TRUE(strstr(ng__pool_describe(p), "oversubscribed") != NULL);
    ng__pool_join(p);
    EXPECT_EQ_I(pc.calls, 2);
  }

  /* Malformed and unusable lists are rejected before any thread starts. */
  const char *bad[] = {"a", "1-", "3-1", "1,,2", ",1", "1,", "1-2-3", " 1", "0x1", "99999999"};
  for (size_t i = 0; i < NG_TEST_LEN(bad); i++) {
    q.cpuset = bad[i];
    p = NULL;
    memset(&pc, 0, sizeof pc);
    EXPECT_STATUS(ng__pool_start(&p, &q, pool_fn, &pc), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("cpuset");
    EXPECT_TRUE(p == NULL);
    EXPECT_EQ_I(pc.calls, 0);
  }
  q.cpuset = "100000";
  EXPECT_STATUS(ng__pool_start(&p, &q, pool_fn, &pc), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not usable by this process");
  q.cpuset = NULL;
  q.workers = -1;
  EXPECT_STATUS(ng__pool_start(&p, &q, pool_fn, &pc), NG_ERR_INVALID_ARG);
  EXPECT_EQ_I(pc.calls, 0);
}

static void test_cpuset_parse(void) {
  int *v = NULL, n = 0;
  EXPECT_OK(ng__cpuset_parse(&v, &n, "0-3,8,10-11"));
  int want[] = {0, 1, 2, 3, 8, 10, 11};
  EXPECT_EQ_I(n, 7);
  for (int i = 0; i < n && i < 7; i++)
    EXPECT_EQ_I(v[i], want[i]);
  free(v);
  EXPECT_OK(ng__cpuset_parse(&v, &n, "5,3,3,4-5"));
  EXPECT_EQ_I(n, 3);
  if (n == 3) {
    EXPECT_EQ_I(v[0], 3);
    EXPECT_EQ_I(v[2], 5);
  }
  free(v);
  EXPECT_STATUS(ng__cpuset_parse(&v, &n, ""), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__cpuset_parse(&v, &n, "2,x7"), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("\"x7\"");
  EXPECT_TRUE(v == NULL);
  EXPECT_EQ_I(n, 0);
}

static void test_pool_pci(void) {
  pool_ctx c = {0};
  ng_pool *p = NULL;
  ng_pool_opts o = NG_POOL_OPTS_INIT;
  o.workers = 1;
  o.bind = false;
  const char *bad[] = {"zz",       "0000:17:00",        "0000:17:00.8", "0000:17:20.0",
                       "17:00.0x", "123456789:17:00.0", "0000:117:00.0"};
  for (size_t i = 0; i < NG_TEST_LEN(bad); i++) {
    o.pci_bus_id = bad[i];
    EXPECT_STATUS(ng__pool_start(&p, &o, pool_fn, &c), NG_ERR_INVALID_ARG);
    EXPECT_ERR_HAS("PCI bus id");
  }
  /* An id hwloc does not know: all usable cores, and the description says why. */
  o.pci_bus_id = "00000000:fe:1f.7";
  EXPECT_OK(ng__pool_start(&p, &o, pool_fn, &c));
  if (p) {
    EXPECT_TRUE(!ng__pool_near_pci(p));
    EXPECT_TRUE(strstr(ng__pool_describe(p), "PCI 0000:fe:1f.7 not found") != NULL);
    ng__pool_join(p);
  }

  /* On a machine with a GPU, NG_TEST_PCI_BUS_ID names it as CUDA prints it: hwloc must find it,
   * and the pool must say so. */
  const char *gpu = getenv("NG_TEST_PCI_BUS_ID");
  if (gpu && *gpu) {
    o.pci_bus_id = gpu;
    o.workers = 0;
    o.bind = true;
    memset(&c, 0, sizeof c);
    EXPECT_OK(ng__pool_start(&p, &o, pool_fn, &c));
    if (p) {
      EXPECT_TRUE(ng__pool_near_pci(p));
      printf("        %s; worker cores in order:", ng__pool_describe(p));
      for (int w = 0; w < ng__pool_workers(p); w++)
        printf(" %d", ng__pool_core(p, w));
      printf("\n");
      ng__pool_join(p);
    }
  }

  /* A device hwloc does know (a GPU, NIC or disk controller, when the machine shows one): the
   * pool keeps to the cores near it. */
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) == 0) {
    hwloc_obj_t pci = hwloc_get_next_pcidev(topo, NULL);
    hwloc_obj_t near = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : NULL;
    if (near) {
      char id[32];
      snprintf(id, sizeof id, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
               pci->attr->pcidev.dev, pci->attr->pcidev.func);
      o.pci_bus_id = id;
      o.workers = 0;
      memset(&c, 0, sizeof c);
      EXPECT_OK(ng__pool_start(&p, &o, pool_fn, &c));
      if (p) {
        EXPECT_TRUE(ng__pool_near_pci(p));
        int outside = 0;
        for (int w = 0; w < ng__pool_workers(p); w++)
          outside += !hwloc_bitmap_isset(near->cpuset, (unsigned)ng__pool_core(p, w));
        EXPECT_EQ_I(outside, 0);
        EXPECT_TRUE(strstr(ng__pool_describe(p), "near PCI") != NULL);
        printf("        %s\n", ng__pool_describe(p));
        ng__pool_join(p);
      }
    } else {
      printf("        (hwloc shows no PCI device here: placement near one not exercised)\n");
    }
  }
  hwloc_topology_destroy(topo);
}

typedef struct {
  ng_pool *pool;
  ng_status st;
  int cpu, affinity_count;
} device_call;

static void *device_thread(void *arg) {
  device_call *d = arg;
  d->st = ng__pool_bind_device_thread(d->pool);
  cpu_set_t set;
  CPU_ZERO(&set);
  d->affinity_count = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
  d->cpu = sched_getcpu();
  return NULL;
}

/* Placement on a machine hwloc simulates (HWLOC_SYNTHETIC), so that the core order can be
 * checked on hyperthreaded sockets whatever this machine is. The pool runs in a child process
 * (this executable with --placement), since the variable changes every topology hwloc loads. */
static void placement_child(int workers, const char *cpuset) {
  ng_pool_opts o = NG_POOL_OPTS_INIT;
  o.workers = workers;
  o.cpuset = strcmp(cpuset, "-") ? cpuset : NULL;
  o.bind = false;
  pool_ctx c = {0};
  ng_pool *p = NULL;
  if (ng__pool_start(&p, &o, pool_fn, &c) != NG_OK) {
    printf("error %s\n", ng_last_error());
    return;
  }
  printf("device %d oversubscribed %d workers", ng__pool_device_core(p),
         (int)ng__pool_oversubscribed(p));
  for (int w = 0; w < ng__pool_workers(p); w++)
    printf(" %d", ng__pool_core(p, w));
  printf("\n");
  ng__pool_join(p);
}

static void expect_placement(const char *synthetic, int workers, const char *cpuset,
                             const char *want) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    ng_test_fail(__FILE__, __LINE__, "cannot find this executable: %s", strerror(errno));
    return;
  }
  self[len] = '\0';
  char cmd[4600], got[512] = "";
  snprintf(cmd, sizeof cmd, "HWLOC_SYNTHETIC='%s' '%s' --placement %d '%s'", synthetic, self,
           workers, cpuset);
  FILE *f = popen(cmd, "r");
  if (!f) {
    ng_test_fail(__FILE__, __LINE__, "popen(%s): %s", cmd, strerror(errno));
    return;
  }
  if (!fgets(got, sizeof got, f))
    got[0] = '\0';
  int rc = pclose(f);
  got[strcspn(got, "\n")] = '\0';
  EXPECT_EQ_I(rc, 0);
  EXPECT_STR(got, want);
}

static void test_pool_core_order(void) {
  /* Two packages of two cores of two hyperthreads: PUs 0-7, core k holds PUs 2k and 2k+1. The
   * first hyperthread of every core comes first, the device thread takes the very first. */
  const char *two_by_two = "pack:2 core:2 pu:2";
  expect_placement(two_by_two, 0, "-", "device 0 oversubscribed 0 workers 2 4 6 1 3 5 7");
  expect_placement(two_by_two, 3, "-", "device 0 oversubscribed 0 workers 2 4 6");
  /* Core 0 keeps only its second hyperthread, which then counts as a first. */
  expect_placement(two_by_two, 0, "1-7", "device 1 oversubscribed 0 workers 2 4 6 3 5 7");
  /* More workers than cores: they wrap around the same order. */
  expect_placement("core:2 pu:2", 5, "-", "device 0 oversubscribed 1 workers 2 1 3 2 1");
  expect_placement(two_by_two, 0, "9",
                   "error cpuset \"9\": cpu 9 is not usable by this "
                   "process (usable: 0-7); list only those");
}

static void test_pool_device_thread(void) {
  for (int bind = 0; bind < 2; bind++) {
    ng_pool_opts o = NG_POOL_OPTS_INIT;
    o.workers = 1;
    o.bind = bind;
    pool_ctx c = {0};
    ng_pool *p = NULL;
    EXPECT_OK(ng__pool_start(&p, &o, pool_fn, &c));
    if (!p)
      continue;
    device_call d = {p, NG_ERR_INTERNAL, -1, -1};
    pthread_t t;
    pthread_create(&t, NULL, device_thread, &d);
    join_or_die(t, "device thread binding");
    if (!bind) {
      EXPECT_OK(d.st);
      EXPECT_EQ_I(d.affinity_count, CPU_COUNT(&initial_affinity));
    } else if (d.st == NG_OK) {
      EXPECT_EQ_I(d.cpu, ng__pool_device_core(p));
      EXPECT_EQ_I(d.affinity_count, 1);
    } else {
      /* Binding may be forbidden here; then it must say so, not fail silently. */
      EXPECT_STATUS(d.st, NG_ERR_UNSUPPORTED);
      EXPECT_ERR_HAS("cannot bind the device thread");
    }
    ng__pool_join(p);
  }
  /* A pool with no reserved core has nothing to bind the device thread to. */
  ng_pool_opts o = NG_POOL_OPTS_INIT;
  o.workers = 1;
  o.reserve_device_core = false;
  pool_ctx c = {0};
  ng_pool *p = NULL;
  EXPECT_OK(ng__pool_start(&p, &o, pool_fn, &c));
  if (p) {
    EXPECT_EQ_I(ng__pool_device_core(p), -1);
    EXPECT_OK(ng__pool_bind_device_thread(p));
    EXPECT_TRUE(strstr(ng__pool_describe(p), "device thread") == NULL);
    ng__pool_join(p);
  }
}

/* ==== controller ==== */

/* A sample where each group ran `iters` iterations at `tput` iterations per busy second. */
static ng_ctrl_sample sample(double tput_partial, double tput_transfer, int64_t iters) {
  ng_ctrl_sample s = {0};
  s.iters[NG_GROUP_PARTIAL] = iters;
  s.iters[NG_GROUP_TRANSFER] = iters;
  s.busy_s[NG_GROUP_PARTIAL] = (double)iters / tput_partial;
  s.busy_s[NG_GROUP_TRANSFER] = (double)iters / tput_transfer;
  s.ring_depth = 1;
  s.ring_capacity = 8;
  s.producer_wait_frac = 0.05;
  s.consumer_wait_frac = 0.3;
  return s;
}

static ng_ctrl ctrl_ready(int workers, int initial_partial) {
  ng_ctrl_opts o = NG_CTRL_OPTS_INIT;
  o.warmup_periods = 0;
  o.initial_partial = initial_partial;
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, &o, workers));
  return c;
}

static void test_ctrl_init(void) {
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, NULL, 8));
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 4);
  EXPECT_OK(ng__ctrl_init(&c, NULL, 5));
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 3);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 2);
  ng_ctrl_opts o = NG_CTRL_OPTS_INIT;
  o.initial_partial = 0; /* raised to min_per_group */
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 1);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 7);
  o.min_per_group = 0;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 0);
  o = (ng_ctrl_opts)NG_CTRL_OPTS_INIT;
  o.threshold = -0.1;
  EXPECT_STATUS(ng__ctrl_init(&c, &o, 8), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("threshold");
  o = (ng_ctrl_opts)NG_CTRL_OPTS_INIT;
  o.period_ms = 0;
  EXPECT_STATUS(ng__ctrl_init(&c, &o, 8), NG_ERR_INVALID_ARG);
  o = (ng_ctrl_opts)NG_CTRL_OPTS_INIT;
  o.initial_partial = 9;
  EXPECT_STATUS(ng__ctrl_init(&c, &o, 8), NG_ERR_INVALID_ARG);
  o = (ng_ctrl_opts)NG_CTRL_OPTS_INIT;
  o.min_iters = 0;
  EXPECT_STATUS(ng__ctrl_init(&c, &o, 8), NG_ERR_INVALID_ARG);
  o = (ng_ctrl_opts)NG_CTRL_OPTS_INIT;
  o.gpu_bound_wait = 1.5;
  EXPECT_STATUS(ng__ctrl_init(&c, &o, 8), NG_ERR_INVALID_ARG);
}

static void test_ctrl_moves_and_threshold(void) {
  /* Warm-up periods are ignored whatever they show. */
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, NULL, 8));
  ng_ctrl_sample fast_transfer = sample(100, 150, 10);
  for (int i = 0; i < 2; i++) {
    ng_ctrl_decision d = ng__ctrl_step(&c, &fast_transfer);
    EXPECT_EQ_I(d.reason, NG_CTRL_WARMUP);
    EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
    EXPECT_EQ_I(d.period, i);
  }
  /* Then one worker moves towards the faster group, the next period settles, and a persisting
   * difference moves another. */
  ng_ctrl_decision d = ng__ctrl_step(&c, &fast_transfer);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_EQ_I(d.workers[NG_GROUP_PARTIAL], 3);
  EXPECT_EQ_I(d.workers[NG_GROUP_TRANSFER], 5);
  EXPECT_NEAR(d.tput[NG_GROUP_PARTIAL], 100, 1e-9);
  EXPECT_NEAR(d.tput[NG_GROUP_TRANSFER], 150, 1e-9);
  EXPECT_NEAR(d.rel_diff, 0.5, 1e-12);
  d = ng__ctrl_step(&c, &fast_transfer);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  d = ng__ctrl_step(&c, &fast_transfer);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_EQ_I(d.workers[NG_GROUP_TRANSFER], 6);

  /* The other direction. */
  c = ctrl_ready(8, -1);
  ng_ctrl_sample fast_partial = sample(300, 100, 10);
  d = ng__ctrl_step(&c, &fast_partial);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 5);

  /* Within the threshold nothing moves; just past it one worker does. */
  c = ctrl_ready(8, -1);
  ng_ctrl_sample close_enough = sample(100, 109, 10);
  d = ng__ctrl_step(&c, &close_enough);
  EXPECT_EQ_I(d.reason, NG_CTRL_BALANCED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
  ng_ctrl_sample just_past = sample(100, 111, 10);
  d = ng__ctrl_step(&c, &just_past);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);

  /* The slower group keeps min_per_group workers. */
  c = ctrl_ready(2, -1);
  d = ng__ctrl_step(&c, &fast_transfer);
  EXPECT_EQ_I(d.reason, NG_CTRL_AT_LIMIT);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 1);

  /* With min_per_group 0 a group can be emptied; an empty group cannot be compared. */
  ng_ctrl_opts o = NG_CTRL_OPTS_INIT;
  o.warmup_periods = 0;
  o.min_per_group = 0;
  EXPECT_OK(ng__ctrl_init(&c, &o, 2));
  d = ng__ctrl_step(&c, &fast_transfer);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_EQ_I(d.workers[NG_GROUP_PARTIAL], 0);
  ng__ctrl_step(&c, &fast_transfer); /* settling */
  d = ng__ctrl_step(&c, &fast_partial);
  EXPECT_EQ_I(d.reason, NG_CTRL_GROUP_EMPTY);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);

  /* Every worker in PARTIAL and the device waiting for them (CPU-bound): one worker moves to
   * TRANSFER, the group that costs a worker less per iteration; not while the device waits
   * little. */
  o.initial_partial = 3;
  EXPECT_OK(ng__ctrl_init(&c, &o, 3));
  ng_ctrl_sample cpu_bound = sample(100, 100, 10);
  cpu_bound.iters[NG_GROUP_TRANSFER] = 0;
  cpu_bound.busy_s[NG_GROUP_TRANSFER] = 0.0;
  cpu_bound.ring_depth = 0;
  cpu_bound.consumer_wait_frac = 0.2;
  d = ng__ctrl_step(&c, &cpu_bound);
  EXPECT_EQ_I(d.reason, NG_CTRL_GROUP_EMPTY);
  cpu_bound.consumer_wait_frac = 0.7;
  /* The same, but the workers spend most of their time waiting for the device sampler's
   * blocks: the sampler sets the pace, and no worker moves (issue 19: the controller does not
   * move cores for nothing). */
  ng_ctrl_sample sampler_bound = cpu_bound;
  sampler_bound.feed_wait_frac = 0.6;
  d = ng__ctrl_step(&c, &sampler_bound);
  EXPECT_EQ_I(d.reason, NG_CTRL_SAMPLER_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  EXPECT_EQ_I(d.workers[NG_GROUP_PARTIAL], 3);
  EXPECT_TRUE(strcmp(ng__ctrl_reason_name(NG_CTRL_SAMPLER_BOUND), "sampler_bound") == 0);
  /* A device-bound period with waiting producers is the sampler's too when the feed binds. */
  ng_ctrl_sample full = sampler_bound;
  full.ring_depth = 8;
  full.ring_capacity = 8;
  full.producer_wait_frac = 0.8;
  d = ng__ctrl_step(&c, &full);
  EXPECT_EQ_I(d.reason, NG_CTRL_SAMPLER_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  /* Below the threshold the CPU-bound rule moves as before. */
  cpu_bound.feed_wait_frac = 0.3;
  d = ng__ctrl_step(&c, &cpu_bound);
  EXPECT_EQ_I(d.reason, NG_CTRL_CPU_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_EQ_I(d.workers[NG_GROUP_TRANSFER], 1);
  EXPECT_TRUE(strcmp(ng__ctrl_reason_name(NG_CTRL_CPU_BOUND), "cpu_bound") == 0);
  /* The option is checked. */
  o.sampler_bound_wait = 0.0;
  EXPECT_STATUS(ng__ctrl_init(&c, &o, 3), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("sampler_bound_wait");
}

static void test_ctrl_gpu_bound_fixed_and_data(void) {
  /* Producers blocked on a full ring: the device sets the pace, and one worker moves to
   * PARTIAL to lighten the device's share, even though TRANSFER looks faster per thread; then
   * a settling period; at the TRANSFER group's minimum no more moves. */
  ng_ctrl c = ctrl_ready(8, -1);
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.producer_wait_frac = 0.8;
  s.consumer_wait_frac = 0.0;
  ng_ctrl_decision d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_GPU_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 5);
  EXPECT_EQ_I(d.ring_depth, 8);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  for (int i = 0; i < 12; i++)
    d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 1);
  EXPECT_EQ_I(d.reason, NG_CTRL_GPU_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  c = ctrl_ready(8, -1);
  /* Waiting producers with a nearly empty ring are not GPU-bound (they wait on the window's
   * head, i.e. on a slow iteration), and neither is a full ring nobody waits on while the
   * device thread waited for packages too. */
  s.ring_depth = 2;
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);
  c = ctrl_ready(8, -1);
  s.ring_depth = 8;
  s.producer_wait_frac = 0.1;
  s.consumer_wait_frac = 0.2;
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);
  /* A half-full ring whose device thread never waited is GPU-bound even when the producers'
   * average wait is low (mixed groups: PARTIAL workers rarely reach the window). */
  c = ctrl_ready(8, -1);
  s.consumer_wait_frac = 0.05;
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_GPU_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  c = ctrl_ready(8, -1);
  s.ring_depth = 3; /* not half full */
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);

  /* fixed: never a move. */
  ng_ctrl_opts o = NG_CTRL_OPTS_INIT;
  o.fixed = true;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  ng_ctrl_sample big = sample(100, 1000, 50);
  for (int i = 0; i < 10; i++) {
    d = ng__ctrl_step(&c, &big);
    EXPECT_EQ_I(d.reason, NG_CTRL_FIXED);
    EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  }
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);

  /* Too few iterations per period: samples accumulate until each group has min_iters (4), and
   * the comparison uses the totals. */
  c = ctrl_ready(8, -1);
  ng_ctrl_sample slow = {0};
  slow.ring_capacity = 8;
  slow.iters[NG_GROUP_PARTIAL] = 1;
  slow.busy_s[NG_GROUP_PARTIAL] = 0.01;
  slow.iters[NG_GROUP_TRANSFER] = 2;
  slow.busy_s[NG_GROUP_TRANSFER] = 0.01;
  for (int i = 0; i < 3; i++) {
    d = ng__ctrl_step(&c, &slow);
    EXPECT_EQ_I(d.reason, NG_CTRL_NO_DATA);
  }
  d = ng__ctrl_step(&c, &slow);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);
  EXPECT_NEAR(d.tput[NG_GROUP_PARTIAL], 4 / 0.04, 1e-6);
  EXPECT_NEAR(d.tput[NG_GROUP_TRANSFER], 8 / 0.04, 1e-6);
}

static void test_ctrl_hysteresis(void) {
  /* After a move to TRANSFER, a reversal needs more than twice the threshold. */
  ng_ctrl c = ctrl_ready(8, -1);
  ng_ctrl_sample to_transfer = sample(100, 150, 10);
  ng_ctrl_decision d = ng__ctrl_step(&c, &to_transfer);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  ng_ctrl_sample mild_back = sample(115, 100, 10); /* 15%: above 10%, below 20% */
  d = ng__ctrl_step(&c, &mild_back);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  for (int i = 0; i < 3; i++) {
    d = ng__ctrl_step(&c, &mild_back);
    EXPECT_EQ_I(d.reason, NG_CTRL_HYSTERESIS);
    EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  }
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 5);
  ng_ctrl_sample strong_back = sample(125, 100, 10);
  d = ng__ctrl_step(&c, &strong_back);
  EXPECT_EQ_I(d.reason, NG_CTRL_MOVED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 4);

  /* A closed loop: TRANSFER threads share a PCIe link of 400 iterations/s, PARTIAL threads run
   * at 100 each, 8 workers starting 7/1. The controller must walk to 4/4 and stay, with no
   * back-and-forth on the way. Per-thread rates drift a little with the split, as contention
   * on memory bandwidth would make them. */
  c = ctrl_ready(8, 7);
  int moves = 0, reversals = 0;
  ng_ctrl_move last = NG_CTRL_MOVE_NONE;
  for (int period = 0; period < 60; period++) {
    int np = c.workers[NG_GROUP_PARTIAL], nt = c.workers[NG_GROUP_TRANSFER];
    double tp = 100.0 * (1.0 - 0.01 * nt);
    double tt = 400.0 / nt;
    ng_ctrl_sample s = {0};
    s.iters[NG_GROUP_PARTIAL] = (int64_t)(tp * np * 0.1 + 0.5);
    s.busy_s[NG_GROUP_PARTIAL] = (double)s.iters[NG_GROUP_PARTIAL] / tp;
    s.iters[NG_GROUP_TRANSFER] = (int64_t)(tt * nt * 0.1 + 0.5);
    s.busy_s[NG_GROUP_TRANSFER] = (double)s.iters[NG_GROUP_TRANSFER] / tt;
    s.ring_capacity = 16;
    d = ng__ctrl_step(&c, &s);
    if (d.move != NG_CTRL_MOVE_NONE) {
      moves++;
      reversals += last != NG_CTRL_MOVE_NONE && d.move == -last;
      last = d.move;
    }
  }
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 4);
  EXPECT_EQ_I(moves, 3);
  EXPECT_EQ_I(reversals, 0);
}

static int count_char(const char *s, char ch) {
  int n = 0;
  for (; *s; s++)
    n += *s == ch;
  return n;
}

/* Steps through the judge's `periods` periods after a settling one and returns the last
 * decision, the verdict; the ones before say `judging`. A fast workload (64 iterations in a
 * period) is judged on the third period; a fall of a move the signals proposed undoes it on the
 * sixth. */
static ng_ctrl_decision verdict(ng_ctrl *c, const ng_ctrl_sample *s, int periods) {
  for (int k = 0; k < periods - 1; k++) {
    const ng_ctrl_decision d = ng__ctrl_step(c, s);
    EXPECT_EQ_I(d.reason, NG_CTRL_JUDGING);
  }
  return ng__ctrl_step(c, s);
}

/* Steps `n` periods in which no move may be made yet: the current split's own rate spans too
 * few periods (3) or iterations (64) to judge a move against. */
static void no_data(ng_ctrl *c, const ng_ctrl_sample *s, int n) {
  for (int k = 0; k < n; k++) {
    const ng_ctrl_decision d = ng__ctrl_step(c, s);
    EXPECT_EQ_I(d.reason, NG_CTRL_NO_DATA);
    EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  }
}

/* The judge: with the device's throughput in the samples, a move that lowers it is undone
 * after six periods (a probe that does not raise it after three) and its direction is blocked;
 * a move that does not lower it stays after three. */
static void test_ctrl_judge(void) {
  ng_ctrl c = ctrl_ready(8, -1);
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.producer_wait_frac = 0.8; /* GPU-bound: proposes a move to PARTIAL */
  s.done = 100;
  s.seconds = 0.1; /* 1000 it/s */
  /* The first move waits until three periods give the split's own rate. */
  no_data(&c, &s, 2);
  ng_ctrl_decision d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 5);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  /* 10% slower than before the move (the band is half the 10% threshold): undone. */
  s.done = 90;
  d = verdict(&c, &s, 6);
  EXPECT_EQ_I(d.reason, NG_CTRL_REVERTED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
  d = ng__ctrl_step(&c, &s); /* settling after the revert */
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  /* The GPU-bound proposal is blocked now: once the restored split's rate is known again, the
   * other direction is probed instead, and once the judge has undone that too, neither is
   * tried. */
  s.done = 100;
  no_data(&c, &s, 2);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_PROBE);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_TRUE(strcmp(ng__ctrl_reason_name(NG_CTRL_PROBE), "probe") == 0);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  s.done = 90;
  d = verdict(&c, &s, 3);
  EXPECT_EQ_I(d.reason, NG_CTRL_REVERTED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  no_data(&c, &s, 2);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_BLOCKED);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_NONE);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
  EXPECT_TRUE(strcmp(ng__ctrl_reason_name(NG_CTRL_REVERTED), "reverted") == 0);
  EXPECT_TRUE(strcmp(ng__ctrl_reason_name(NG_CTRL_BLOCKED), "blocked") == 0);

  /* A move after which the throughput holds (4% lower, inside the band) stays. */
  c = ctrl_ready(8, -1);
  s.done = 100;
  no_data(&c, &s, 2);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  d = ng__ctrl_step(&c, &s);
  s.done = 96;
  d = verdict(&c, &s, 3);
  EXPECT_TRUE(d.reason != NG_CTRL_REVERTED && d.reason != NG_CTRL_JUDGING);
  EXPECT_TRUE(c.workers[NG_GROUP_PARTIAL] >= 5);

  /* A slow workload: 20 iterations a period. The first move waits for 64 iterations of the
   * split's own rate (four periods); the verdict waits until 64 iterations ran under the move
   * (here three periods), and weighs them all: one slow period among them does not undo it. */
  c = ctrl_ready(8, -1);
  s.done = 20;
  no_data(&c, &s, 3);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_SETTLING);
  s.done = 14; /* 30% slower: a single-period verdict would revert */
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_JUDGING);
  EXPECT_TRUE(strcmp(ng__ctrl_reason_name(NG_CTRL_JUDGING), "judging") == 0);
  s.done = 24;
  d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_JUDGING);
  s.done = 26; /* 64 in 0.3 s: 213 it/s against 200 before */
  d = ng__ctrl_step(&c, &s);
  EXPECT_TRUE(d.reason != NG_CTRL_REVERTED && d.reason != NG_CTRL_JUDGING);
  /* Kept; the judged periods are the new split's rate, and the device still binds, so the
   * same period moves one more worker. */
  EXPECT_EQ_I(d.reason, NG_CTRL_GPU_BOUND);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 6);
  /* ... and a real slowdown over enough iterations is undone. */
  c = ctrl_ready(8, -1);
  s.done = 20;
  no_data(&c, &s, 3);
  d = ng__ctrl_step(&c, &s);
  d = ng__ctrl_step(&c, &s);
  s.done = 16;
  for (int k = 0; k < 5; k++) {
    d = ng__ctrl_step(&c, &s);
    EXPECT_EQ_I(d.reason, NG_CTRL_JUDGING);
  }
  d = ng__ctrl_step(&c, &s); /* 96 in 0.6 s: 160 it/s against 200 */
  EXPECT_EQ_I(d.reason, NG_CTRL_REVERTED);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
}

/* Runs `periods` periods against a device whose rate depends only on the split: `rate[p]`
 * iterations per 0.1 s period with p PARTIAL workers of 8. The signals in `s` stay as given;
 * returns the periods spent off `best` and counts the moves in each direction. */
static int simulate(ng_ctrl *c, ng_ctrl_sample *s, const int64_t rate[9], int best, int periods,
                    int moves[2]) {
  int off = 0;
  for (int i = 0; i < periods; i++) {
    s->done = rate[c->workers[NG_GROUP_PARTIAL]];
    s->seconds = 0.1;
    const ng_ctrl_decision d = ng__ctrl_step(c, s);
    if (d.move != NG_CTRL_MOVE_NONE && d.reason != NG_CTRL_REVERTED)
      moves[d.move == NG_CTRL_MOVE_TO_TRANSFER]++;
    off += c->workers[NG_GROUP_PARTIAL] != best;
  }
  return off;
}

/* The per-thread signal points the wrong way (zero-copy workers look fast because the device
 * does their reading) and is never balanced: the judge undoes its moves, and the probes of
 * the other direction walk the split to the best one, where the controller then stays. */
static void test_ctrl_probe_climbs(void) {
  ng_ctrl c = ctrl_ready(8, 4);
  ng_ctrl_sample s = sample(100, 400, 10); /* TRANSFER looks 4x faster per thread */
  const int64_t rate[9] = {50, 60, 70, 80, 100, 120, 140, 160, 110}; /* best: 7 PARTIAL */
  int moves[2] = {0, 0};
  simulate(&c, &s, rate, 7, 200, moves);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 7);
  EXPECT_TRUE(moves[0] >= 3); /* 4 -> 7 took at least three probes to PARTIAL */
  /* Settled: retries of both neighbours back off, so the split stays at the best nearly all
   * the time. */
  moves[0] = moves[1] = 0;
  const int off = simulate(&c, &s, rate, 7, 4000, moves);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 7);
  /* Each retry of the signal's direction runs six periods before its revert (84 periods off
   * in all here; 48 when a revert took three). */
  EXPECT_TRUE(off < 4000 / 40);
  EXPECT_TRUE(moves[0] + moves[1] < 30);
}

/* A probe must raise the rate to stay. Here the signal (GPU-bound) proposes a move to PARTIAL
 * that the judge undoes, and every step the other way loses 3%, inside the judge's band: probes
 * kept for merely holding would walk the split down the slope, one worker per block. */
static void test_ctrl_probe_must_pay(void) {
  ng_ctrl c = ctrl_ready(8, 6);
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.consumer_wait_frac = 0.0; /* GPU-bound: proposes moves to PARTIAL */
  /* best: 6 PARTIAL; 8 is never reached (min_per_group keeps a TRANSFER worker) */
  const int64_t rate[9] = {73, 76, 79, 82, 85, 88, 91, 73, 0};
  int lowest = 8, off = 0, probes = 0;
  for (int i = 0; i < 4000; i++) {
    s.done = rate[c.workers[NG_GROUP_PARTIAL]];
    s.seconds = 0.1;
    const ng_ctrl_decision d = ng__ctrl_step(&c, &s);
    probes += d.reason == NG_CTRL_PROBE;
    lowest = NG_MIN(lowest, c.workers[NG_GROUP_PARTIAL]);
    off += c.workers[NG_GROUP_PARTIAL] != 6;
  }
  EXPECT_TRUE(probes >= 3); /* the other way was tried, and undone each time */
  EXPECT_EQ_I(lowest, 5);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 6);
  EXPECT_TRUE(off < 4000 / 20);
}

/* A direction that keeps failing is retried ever more rarely (blocks of 20, 40 ... 320
 * periods), and a move that holds resets the backoff. */
static void test_ctrl_backoff(void) {
  ng_ctrl c = ctrl_ready(8, 4);
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.consumer_wait_frac = 0.0; /* GPU-bound: proposes moves to PARTIAL */
  const int64_t rate[9] = {10, 20, 30, 40, 100, 80, 70, 60, 50}; /* best: 4, where it starts */
  int moves[2] = {0, 0}, attempts[64], n = 0;
  for (int i = 0; i < 3000 && n < 64; i++) {
    s.done = rate[c.workers[NG_GROUP_PARTIAL]];
    s.seconds = 0.1;
    const ng_ctrl_decision d = ng__ctrl_step(&c, &s);
    if (d.move == NG_CTRL_MOVE_TO_PARTIAL && d.reason == NG_CTRL_GPU_BOUND)
      attempts[n++] = i;
  }
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 4);
  /* The gaps between two tries of the failing direction double up to the cap. */
  EXPECT_TRUE(n >= 6);
  for (int k = 2; k < n; k++) {
    const int gap = attempts[k] - attempts[k - 1], prev = attempts[k - 1] - attempts[k - 2];
    EXPECT_TRUE(gap >= prev || gap >= 320);
  }
  EXPECT_TRUE(attempts[n - 1] - attempts[n - 2] >= 320);
  /* A move that raises the rate resets its direction's backoff: with 5 PARTIAL now the best,
   * the controller moves there, and the next move that way (to 6, worse) is blocked for 20
   * periods again, not 320. */
  const int64_t rate2[9] = {10, 20, 30, 40, 100, 120, 70, 60, 50};
  int first_block = -1;
  bool at5 = false;
  for (int i = 0; i < 400 && first_block < 0; i++) {
    s.done = rate2[c.workers[NG_GROUP_PARTIAL]];
    const ng_ctrl_decision d = ng__ctrl_step(&c, &s);
    at5 = at5 || (d.reason != NG_CTRL_REVERTED && c.workers[NG_GROUP_PARTIAL] == 5);
    if (at5 && d.reason == NG_CTRL_REVERTED && d.move == NG_CTRL_MOVE_TO_TRANSFER)
      first_block = c.block_left[0];
  }
  EXPECT_EQ_I(first_block, 20);
  simulate(&c, &s, rate2, 5, 400, moves);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 5);

  /* A flat top: 5 PARTIAL runs within the judge's band of 4. Moves there hold without
   * raising the rate, so they must not reset the backoff, or the controller cycles
   * 4 -> 5 -> 6 (undone) -> 5 -> 4 forever, a third of the time on a split 30% slower. */
  const int64_t flat[9] = {10, 20, 30, 40, 100, 97, 70, 60, 50};
  ng_ctrl c3 = ctrl_ready(8, 4);
  moves[0] = moves[1] = 0;
  simulate(&c3, &s, flat, 4, 400, moves);
  moves[0] = moves[1] = 0;
  int slow = 0;
  for (int i = 0; i < 4000; i++) {
    s.done = flat[c3.workers[NG_GROUP_PARTIAL]];
    const ng_ctrl_decision d = ng__ctrl_step(&c3, &s);
    if (d.move != NG_CTRL_MOVE_NONE && d.reason != NG_CTRL_REVERTED)
      moves[d.move == NG_CTRL_MOVE_TO_TRANSFER]++;
    slow += flat[c3.workers[NG_GROUP_PARTIAL]] < 90;
  }
  EXPECT_TRUE(moves[0] + moves[1] < 80);
  EXPECT_TRUE(slow < 4000 / 20);

  /* Noise: each period's rate varies by up to +-12% (W1's periods vary by 5-10%), so now and
   * then the judge keeps a worse neighbour, and the move back to the best then raises the
   * rate. That counts as a failure of the way back, so the GPU-bound signal (which proposes
   * that way again at once) waits out a growing block instead of cycling every 20 periods. */
  const int64_t sharp[9] = {10, 20, 30, 75, 100, 75, 60, 50, 40};
  ng_ctrl c4 = ctrl_ready(8, 4);
  uint64_t rng = 12345;
  int off = 0, n_moves = 0;
  for (int i = 0; i < 8000; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const double noise = 0.88 + 0.24 * (double)(rng >> 11) / 9007199254740992.0;
    s.done = (int64_t)((double)sharp[c4.workers[NG_GROUP_PARTIAL]] * noise);
    const ng_ctrl_decision d = ng__ctrl_step(&c4, &s);
    n_moves += d.move != NG_CTRL_MOVE_NONE;
    off += i >= 400 && c4.workers[NG_GROUP_PARTIAL] != 4;
  }
  printf("  noisy sharp top: %d of 7600 periods off the best, %d moves\n", off, n_moves);
  EXPECT_TRUE(off < 7600 / 10);
  /* The rule itself: a move from 3 to 4 PARTIAL that raises the rate by 43% blocks the way
   * back (to TRANSFER) and leaves its own direction open. */
  ng_ctrl c5 = ctrl_ready(8, 3);
  s.done = sharp[3];
  no_data(&c5, &s, 2);
  ng_ctrl_decision d5 = ng__ctrl_step(&c5, &s);
  EXPECT_EQ_I(d5.move, NG_CTRL_MOVE_TO_PARTIAL);
  s.done = sharp[4];
  d5 = ng__ctrl_step(&c5, &s); /* settling */
  d5 = verdict(&c5, &s, 3);
  EXPECT_EQ_I(d5.reason, NG_CTRL_GPU_BOUND); /* kept, and TO_PARTIAL is open: 4 -> 5 */
  EXPECT_EQ_I(c5.block_left[0], 0);
  EXPECT_EQ_I(c5.block_left[1], 19); /* 20, less this period */
  EXPECT_TRUE(c5.block_failed[1]);
}

/* One period with a stall (a fifth of the rate) does not decide a verdict: the judge compares
 * the median of the periods' rates, before and after the move; a drop in most periods still
 * undoes the move. */
static void test_ctrl_judge_median(void) {
  ng_ctrl c = ctrl_ready(8, -1);
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.producer_wait_frac = 0.8; /* GPU-bound: proposes a move to PARTIAL */
  s.seconds = 0.1;
  s.done = 100;
  no_data(&c, &s, 2);
  ng_ctrl_decision d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  EXPECT_EQ_I(ng__ctrl_step(&c, &s).reason, NG_CTRL_SETTLING);
  const int64_t stalled[3] = {100, 20, 100}; /* the totals would be 27% slower */
  for (int k = 0; k < 3; k++) {
    s.done = stalled[k];
    d = ng__ctrl_step(&c, &s);
  }
  /* Kept: the verdict's period goes on to the next GPU-bound move. */
  EXPECT_EQ_I(d.reason, NG_CTRL_GPU_BOUND);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 6);
  EXPECT_EQ_I(ng__ctrl_step(&c, &s).reason, NG_CTRL_SETTLING);
  /* Two stalled periods of the first three: the verdict waits for more, and the median of
   * five keeps the move. */
  const int64_t stalled2[5] = {20, 100, 20, 100, 100};
  for (int k = 0; k < 5; k++) {
    s.done = stalled2[k];
    d = ng__ctrl_step(&c, &s);
    EXPECT_EQ_I(d.reason, k < 4 ? NG_CTRL_JUDGING : NG_CTRL_GPU_BOUND);
  }
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 7);
  EXPECT_EQ_I(ng__ctrl_step(&c, &s).reason, NG_CTRL_SETTLING);
  /* Slower in four periods of six: undone (its totals, against the stalled ones, rose). */
  const int64_t slower[6] = {85, 100, 85, 85, 100, 85};
  for (int k = 0; k < 6; k++) {
    s.done = slower[k];
    d = ng__ctrl_step(&c, &s);
  }
  EXPECT_EQ_I(d.reason, NG_CTRL_REVERTED);
  EXPECT_EQ_I(c.workers[NG_GROUP_PARTIAL], 6);
}

/* Options of a controller that may move the device share (up to `share_steps`): no warm-up,
 * groups that may empty. */
static ng_ctrl_opts share_opts(int initial_partial, int share_steps, int initial_share) {
  ng_ctrl_opts o = NG_CTRL_OPTS_INIT;
  o.warmup_periods = 0;
  o.initial_partial = initial_partial;
  o.min_per_group = 0;
  o.share_steps = share_steps;
  o.initial_share = initial_share;
  return o;
}

/* The device share: while every worker is PARTIAL, the CPU-bound signal (the device waits for
 * packages) raises it one step at a time and the GPU-bound one lowers it, each step judged by
 * the device's rate like a worker move; it settles where the device starts to bind, with no
 * worker moved. */
static void test_ctrl_share_climbs(void) {
  ng_ctrl_opts o = share_opts(8, 8, 0);
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  EXPECT_EQ_I(c.share, 0);
  ng_ctrl_sample s = sample(100, 200, 10);
  const int64_t rate[9] = {70, 76, 82, 88, 80, 75, 70, 65, 60}; /* best: 3 steps */
  int highest = 0, off = 0;
  for (int i = 0; i < 600; i++) {
    const bool device_binds = c.share > 3;
    s.ring_depth = device_binds ? 8 : 1;
    s.consumer_wait_frac = device_binds ? 0.0 : 0.3;
    s.done = rate[c.share];
    s.seconds = 0.1;
    const ng_ctrl_decision d = ng__ctrl_step(&c, &s);
    EXPECT_EQ_I(d.share, c.share);
    EXPECT_EQ_I(d.workers[NG_GROUP_PARTIAL], 8);
    highest = NG_MAX(highest, c.share);
    off += i >= 300 && c.share != 3;
  }
  EXPECT_EQ_I(c.share, 3);
  EXPECT_TRUE(highest == 4); /* one step past the best was tried, and undone */
  EXPECT_TRUE(off < 30);
}

/* The device share's first step is a split not tried yet: neither a move to 8/0 that raised the
 * rate (its way back is to 7/1, which stays blocked) nor a block left from the worker splits
 * before holds it back, and the CPU-bound signal takes it as soon as 8/0's rate is known. */
static void test_ctrl_share_after_worker(void) {
  ng_ctrl_opts o = share_opts(6, 4, 0);
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  ng_ctrl_sample s = sample(100, 200, 10);
  /* 6/2 -> 7/1 raises the rate (blocking the way back to 6/2), and so does 7/1 -> 8/0. */
  const int64_t rate_share[5] = {90, 95, 100, 92, 85}; /* best: 2 steps */
  int at_best = 0, left = -1, first_step = -1;
  for (int i = 0; i < 300; i++) {
    const bool worker = c.workers[NG_GROUP_TRANSFER] > 0;
    if (!worker && left < 0)
      left = i;
    if (c.share > 0 && first_step < 0)
      first_step = i;
    const bool device_binds = worker || c.share > 2;
    s.ring_depth = device_binds ? 8 : 1;
    s.consumer_wait_frac = device_binds ? 0.0 : 0.3;
    s.done = worker ? (c.workers[NG_GROUP_TRANSFER] == 2 ? 70 : 80) : rate_share[c.share];
    s.seconds = 0.1;
    (void)ng__ctrl_step(&c, &s);
    at_best += i >= 150 && !worker && c.share == 2;
  }
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 0);
  EXPECT_EQ_I(c.share, 2);
  EXPECT_TRUE(at_best > 130);
  /* The first step came once the new split's rate was known, not after a block of 20. */
  EXPECT_TRUE(left >= 0 && first_step > left && first_step - left < 8);
}

/* Emptying the TRANSFER group clears that direction's block only while the group stays empty:
 * when the judge undoes the move, the block of the worker splits holds again. */
static void test_ctrl_share_revert_block(void) {
  ng_ctrl_opts o = share_opts(7, 4, 0);
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  const int k = ng__ctrl_move_to(NG_CTRL_MOVE_TO_TRANSFER);
  c.block_left[k] = 200;
  c.block_len[k] = 160;
  c.block_failed[k] = true;
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.consumer_wait_frac = 0.0; /* GPU-bound: a move to PARTIAL, 7/1 -> 8/0 */
  s.seconds = 0.1;
  s.done = 100;
  no_data(&c, &s, 2);
  ng_ctrl_decision d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_PARTIAL);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 0);
  EXPECT_EQ_I(c.block_left[k], 0);
  EXPECT_EQ_I(ng__ctrl_step(&c, &s).reason, NG_CTRL_SETTLING);
  s.done = 80; /* slower: undone */
  d = verdict(&c, &s, 6);
  EXPECT_EQ_I(d.reason, NG_CTRL_REVERTED);
  EXPECT_EQ_I(c.workers[NG_GROUP_TRANSFER], 1);
  EXPECT_TRUE(c.block_left[k] > 150);
  EXPECT_EQ_I(c.block_len[k], 160);
  EXPECT_TRUE(c.block_failed[k]);
}

/* A share step up must raise the rate to stay. Here the device keeps waiting for packages (the
 * CPU-bound signal proposes a step up every time it may) while each step changes the rate by
 * 2%, inside the judge's band: steps kept for merely holding would creep up to the top share,
 * 12% below the start. */
static void test_ctrl_share_must_pay(void) {
  ng_ctrl_opts o = share_opts(8, 8, 0);
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  ng_ctrl_sample s = sample(100, 200, 10);
  s.ring_depth = 1;
  s.consumer_wait_frac = 0.3;
  const int64_t rate[9] = {100, 102, 100, 98, 96, 94, 92, 90, 88};
  int highest = 0, off = 0, reverts = 0;
  for (int i = 0; i < 2000; i++) {
    s.done = rate[c.share];
    s.seconds = 0.1;
    const ng_ctrl_decision d = ng__ctrl_step(&c, &s);
    reverts += d.reason == NG_CTRL_REVERTED;
    highest = NG_MAX(highest, c.share);
    off += c.share != 0;
  }
  EXPECT_EQ_I(c.share, 0);
  EXPECT_EQ_I(highest, 1);
  EXPECT_TRUE(reverts >= 3); /* tried, and undone each time, ever more rarely */
  EXPECT_TRUE(off < 2000 / 20);
}

/* A period that goes on across an epoch boundary: the time between the two epochs and the
 * packages the workers made in it do not count, everything before and after does. */
static void test_counters_resume(void) {
  /* The period opened at t = 1.000 s with 100 iterations done and the ring 2 deep; at the
   * epoch's end (t = 1.030 s) 140 were done, the ring was 3 deep, and each group had done 20
   * more iterations in 0.5 busy seconds. */
  ng_counters open = {.t_ns = 1000000000, .iters = 100, .put_wait_ns = 7, .ring_depth = 2};
  open.group_iters[NG_GROUP_PARTIAL] = 50;
  open.group_busy_ns[NG_GROUP_PARTIAL] = 2000000000;
  ng_counters end = open;
  end.t_ns = 1030000000;
  end.iters = 140;
  end.put_wait_ns = 9;
  end.ring_depth = 3;
  end.group_iters[NG_GROUP_PARTIAL] = 70;
  end.group_busy_ns[NG_GROUP_PARTIAL] = 2500000000;
  ng_counters tail;
  ng__counters_sub(&tail, &end, &open);
  EXPECT_TRUE(tail.t_ns == 30000000 && tail.iters == 40 && tail.put_wait_ns == 2);
  EXPECT_TRUE(tail.group_iters[NG_GROUP_PARTIAL] == 20 &&
              tail.group_busy_ns[NG_GROUP_PARTIAL] == 500000000);
  EXPECT_EQ_I(tail.ring_depth, 3);
  /* The caller took 200 ms; meanwhile the workers filled the ring to 10. The next epoch counts
   * its iterations from 0. */
  ng_counters start = {.t_ns = 1230000000, .iters = 0, .put_wait_ns = 50, .ring_depth = 10};
  start.group_iters[NG_GROUP_PARTIAL] = 77;
  start.group_busy_ns[NG_GROUP_PARTIAL] = 2600000000;
  ng_counters from;
  ng__counters_resume(&from, &start, &tail);
  /* 20 ms into the epoch the device has taken 60 iterations: the period holds the 40 before the
   * boundary and the 60 after it, less the 7 the ring gained between, in 30 + 20 ms. */
  ng_counters now = start;
  now.t_ns = 1250000000;
  now.iters = 60;
  now.ring_depth = 4;
  ng_counters d;
  ng__counters_sub(&d, &now, &from);
  EXPECT_TRUE(d.t_ns == 50000000);
  EXPECT_TRUE(d.iters == 40 + 60 - 7);
  EXPECT_TRUE(d.put_wait_ns == 2);
  EXPECT_TRUE(d.group_iters[NG_GROUP_PARTIAL] == 20 &&
              d.group_busy_ns[NG_GROUP_PARTIAL] == 500000000);
  EXPECT_EQ_I(d.ring_depth, 4);
  /* A ring that emptied meanwhile (a failure's drain, a restart) takes nothing off. */
  start.ring_depth = 0;
  ng__counters_resume(&from, &start, &tail);
  EXPECT_TRUE(start.iters - from.iters == 40);
}

/* At the largest share the next step towards TRANSFER moves a worker, which replaces the
 * share (back to 0), and undoing that move restores it; the last TRANSFER worker returns to a
 * share of 0; options out of range are refused. */
static void test_ctrl_share_edges(void) {
  ng_ctrl_opts o = share_opts(8, 2, 2);
  ng_ctrl c;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  ng_ctrl_sample s = sample(100, 200, 10);
  s.consumer_wait_frac = 0.3; /* below gpu_bound_wait: no worker move at the top share */
  s.done = 100;
  s.seconds = 0.1;
  for (int i = 0; i < 50; i++)
    EXPECT_EQ_I(ng__ctrl_step(&c, &s).move, NG_CTRL_MOVE_NONE);
  s.consumer_wait_frac = 0.6; /* the device waits most of the time: a worker moves */
  ng_ctrl_decision d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_CPU_BOUND);
  EXPECT_EQ_I(d.move, NG_CTRL_MOVE_TO_TRANSFER);
  EXPECT_EQ_I(d.workers[NG_GROUP_TRANSFER], 1);
  EXPECT_EQ_I(d.share, 0);
  s.done = 50; /* slower: the judge undoes it */
  EXPECT_EQ_I(ng__ctrl_step(&c, &s).reason, NG_CTRL_SETTLING);
  d = verdict(&c, &s, 6);
  EXPECT_EQ_I(d.reason, NG_CTRL_REVERTED);
  EXPECT_EQ_I(d.workers[NG_GROUP_TRANSFER], 0);
  EXPECT_EQ_I(d.share, 2);
  /* The last TRANSFER worker returns to a share of 0 (the share then climbs step by step). */
  o.share_steps = 4;
  o.initial_share = 0;
  o.initial_partial = 7;
  EXPECT_OK(ng__ctrl_init(&c, &o, 8));
  s = sample(100, 200, 10);
  s.ring_depth = 8;
  s.consumer_wait_frac = 0.0; /* GPU-bound: a move to PARTIAL */
  s.done = 100;
  s.seconds = 0.1;
  d = ng__ctrl_step(&c, &s);
  for (int i = 0; i < 10 && d.move == NG_CTRL_MOVE_NONE; i++)
    d = ng__ctrl_step(&c, &s);
  EXPECT_EQ_I(d.reason, NG_CTRL_GPU_BOUND);
  EXPECT_EQ_I(d.workers[NG_GROUP_TRANSFER], 0);
  EXPECT_EQ_I(d.share, 0);
  /* Out of range: more steps than the unit has, a start above the steps (unless fixed). */
  ng_ctrl bad;
  o.share_steps = NG_CTRL_SHARE_DEN + 1;
  EXPECT_STATUS(ng__ctrl_init(&bad, &o, 8), NG_ERR_INVALID_ARG);
  o.share_steps = 2;
  o.initial_share = 3;
  EXPECT_STATUS(ng__ctrl_init(&bad, &o, 8), NG_ERR_INVALID_ARG);
  o.fixed = true;
  o.share_steps = 0;
  o.initial_share = NG_CTRL_SHARE_DEN;
  EXPECT_OK(ng__ctrl_init(&bad, &o, 8));
  EXPECT_EQ_I(bad.share, NG_CTRL_SHARE_DEN);
}

static void test_ctrl_log_line(void) {
  ng_ctrl c = ctrl_ready(8, -1);
  ng_ctrl_sample s = sample(100, 150, 10);
  ng_ctrl_decision d = ng__ctrl_step(&c, &s);
  char line[256];
  size_t n = ng__ctrl_log_line(&d, line, sizeof line);
  EXPECT_EQ_I(n, strlen(line));
  EXPECT_STR(line, "0,to_transfer,moved,3,5,100,150,0.5000,1,8,0.050,0.300,0");
  EXPECT_EQ_I(count_char(line, ','), count_char(ng__ctrl_log_header(), ','));
  char small[10];
  memset(small, 'x', sizeof small);
  EXPECT_EQ_I(ng__ctrl_log_line(&d, small, sizeof small), n);
  EXPECT_EQ_I(strlen(small), sizeof small - 1);
  for (int r = NG_CTRL_FIXED; r <= NG_CTRL_MOVED; r++)
    EXPECT_TRUE(strcmp(ng__ctrl_reason_name((ng_ctrl_reason)r), "unknown") != 0);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--placement") == 0) {
    placement_child(atoi(argv[2]), argv[3]);
    return 0;
  }
  alarm(SUITE_DEADLINE_S); /* a hang anywhere kills the suite (SIGALRM) instead of ctest waiting */
  CPU_ZERO(&initial_affinity);
  if (sched_getaffinity(0, sizeof initial_affinity, &initial_affinity) != 0) {
    fprintf(stderr, "sched_getaffinity: %s\n", strerror(errno));
    return 2;
  }
  RUN_TEST(test_ring_order_and_window);
  RUN_TEST(test_ring_blocks_past_window);
  RUN_TEST(test_ring_close_unblocks);
  RUN_TEST(test_ring_finish_and_drain);
  RUN_TEST(test_slots);
  RUN_TEST(test_slots_presize);
  RUN_TEST(test_cpuset_parse);
  RUN_TEST(test_pool_workers);
  RUN_TEST(test_pool_default_count_and_cpuset);
  RUN_TEST(test_pool_pci);
  RUN_TEST(test_pool_core_order);
  RUN_TEST(test_pool_device_thread);
  RUN_TEST(test_ctrl_init);
  RUN_TEST(test_ctrl_moves_and_threshold);
  RUN_TEST(test_ctrl_gpu_bound_fixed_and_data);
  RUN_TEST(test_ctrl_hysteresis);
  RUN_TEST(test_ctrl_judge);
  RUN_TEST(test_ctrl_judge_median);
  RUN_TEST(test_ctrl_probe_climbs);
  RUN_TEST(test_ctrl_probe_must_pay);
  RUN_TEST(test_ctrl_backoff);
  RUN_TEST(test_ctrl_share_climbs);
  RUN_TEST(test_ctrl_share_edges);
  RUN_TEST(test_ctrl_share_after_worker);
  RUN_TEST(test_ctrl_share_must_pay);
  RUN_TEST(test_counters_resume);
  RUN_TEST(test_ctrl_share_revert_block);
  RUN_TEST(test_ctrl_log_line);
  return ng_test_summary();
}
