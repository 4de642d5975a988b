/* The ready ring (iterations handed to the device thread in order, within a bounded window) and
 * the staging slot pools (buffers a worker fills and the device thread gives back). One mutex
 * per object; producers beyond the window wait on the condition variable of the slot their
 * iteration will occupy, so a take wakes only the producers it lets in. */
#include "ring_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Total blocked time of a group of waiters, counting the ones still blocked up to now. */
typedef struct {
  int waiting;
  int64_t start_sum; /* sum of the start times of current waits */
  int64_t done_ns;   /* total of finished waits */
} wait_clock;

static int64_t wait_begin(wait_clock *w) {
  int64_t t = ng__now_ns();
  w->waiting++;
  w->start_sum += t;
  return t;
}

static void wait_end(wait_clock *w, int64_t t0) {
  w->waiting--;
  w->start_sum -= t0;
  w->done_ns += ng__now_ns() - t0;
}

static int64_t wait_total(const wait_clock *w) {
  return w->done_ns + (w->waiting ? (int64_t)w->waiting * ng__now_ns() - w->start_sum : 0);
}

/* ==== ready ring ==== */

typedef struct {
  void *item;
  int64_t iter;
  bool full;
  pthread_cond_t cv; /* producers whose iteration maps to this slot, waiting for the window */
} ring_slot;

struct ng_ring {
  pthread_mutex_t mu;
  pthread_cond_t take_cv;
  ring_slot *slots;
  int cap;
  int64_t next;
  int64_t end; /* -1 until ng__ring_finish() */
  ng_status closed;
  int depth;
  int64_t puts;
  wait_clock put_wait, take_wait;
};

ng_status ng__ring_create(ng_ring **out, int capacity) {
  *out = NULL;
  if (capacity < 1)
    return ng__err(NG_ERR_INVALID_ARG, "ready ring: capacity %d; it must be at least 1", capacity);
  ng_ring *r = ng__calloc(1, sizeof *r, "ready ring");
  if (!r)
    return NG_ERR_NOMEM;
  r->slots = ng__calloc((size_t)capacity, sizeof *r->slots, "ready ring slots");
  if (!r->slots) {
    free(r);
    return NG_ERR_NOMEM;
  }
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->take_cv, NULL);
  for (int i = 0; i < capacity; i++)
    pthread_cond_init(&r->slots[i].cv, NULL);
  r->cap = capacity;
  r->end = -1;
  *out = r;
  return NG_OK;
}

void ng__ring_destroy(ng_ring *r) {
  if (!r)
    return;
  for (int i = 0; i < r->cap; i++)
    pthread_cond_destroy(&r->slots[i].cv);
  pthread_cond_destroy(&r->take_cv);
  pthread_mutex_destroy(&r->mu);
  free(r->slots);
  free(r);
}

static ng_status closed_err(ng_status why) {
  return ng__err(why, "ready ring: closed after a failure elsewhere (%s)", ng_status_str(why));
}

static void wake_all(ng_ring *r) {
  pthread_cond_broadcast(&r->take_cv);
  for (int i = 0; i < r->cap; i++)
    pthread_cond_broadcast(&r->slots[i].cv);
}

ng_status ng__ring_put(ng_ring *r, int64_t iter, void *item) {
  if (!item || iter < 0)
    return ng__err(NG_ERR_INVALID_ARG, "ready ring: put of iteration %lld with %s item",
                   (long long)iter, item ? "an" : "a NULL");
  ng_status st = NG_OK;
  ring_slot *s = &r->slots[iter % r->cap];
  pthread_mutex_lock(&r->mu);
  if (r->closed == NG_OK && (r->end < 0 || iter < r->end) && iter >= r->next + r->cap) {
    int64_t t0 = wait_begin(&r->put_wait);
    while (r->closed == NG_OK && (r->end < 0 || iter < r->end) && iter >= r->next + r->cap)
      pthread_cond_wait(&s->cv, &r->mu);
    wait_end(&r->put_wait, t0);
  }
  if (r->closed != NG_OK)
    st = closed_err(r->closed);
  else if (r->end >= 0 && iter >= r->end)
    st = ng__err(NG_ERR_INVALID_ARG, "ready ring: iteration %lld is past the end (%lld)",
                 (long long)iter, (long long)r->end);
  else if (iter < r->next || s->full)
    st = ng__err(NG_ERR_STATE, "ready ring: iteration %lld was already put", (long long)iter);
  if (st == NG_OK) {
    s->item = item;
    s->iter = iter;
    s->full = true;
    r->depth++;
    r->puts++;
    if (iter == r->next)
      pthread_cond_signal(&r->take_cv);
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

ng_status ng__ring_take(ng_ring *r, int64_t *iter, void **item) {
  ng_status st = NG_OK;
  *item = NULL;
  pthread_mutex_lock(&r->mu);
  int64_t t0 = -1;
  for (;;) {
    if (r->closed != NG_OK) {
      st = closed_err(r->closed);
      *iter = r->next;
      break;
    }
    if (r->end >= 0 && r->next >= r->end) {
      *iter = r->end;
      break;
    }
    ring_slot *s = &r->slots[r->next % r->cap];
    if (s->full) {
      *iter = r->next;
      *item = s->item;
      s->item = NULL;
      s->full = false;
      r->depth--;
      r->next++;
      /* The slot now belongs to iteration next - 1 + capacity: let its producer in. */
      pthread_cond_broadcast(&s->cv);
      break;
    }
    if (t0 < 0)
      t0 = wait_begin(&r->take_wait);
    pthread_cond_wait(&r->take_cv, &r->mu);
  }
  if (t0 >= 0)
    wait_end(&r->take_wait, t0);
  pthread_mutex_unlock(&r->mu);
  return st;
}

ng_status ng__ring_finish(ng_ring *r, int64_t n_iters) {
  ng_status st = NG_OK;
  pthread_mutex_lock(&r->mu);
  if (r->closed != NG_OK) {
    st = closed_err(r->closed);
    goto unlock;
  }
  if (r->end >= 0) {
    if (r->end != n_iters)
      st = ng__err(NG_ERR_STATE, "ready ring: end set to %lld, then to %lld", (long long)r->end,
                   (long long)n_iters);
    goto unlock;
  }
  if (n_iters < r->next) {
    st = ng__err(NG_ERR_INVALID_ARG,
                 "ready ring: end %lld, but iterations up to %lld were already taken",
                 (long long)n_iters, (long long)r->next - 1);
    goto unlock;
  }
  for (int i = 0; i < r->cap; i++)
    if (r->slots[i].full && r->slots[i].iter >= n_iters) {
      st = ng__err(NG_ERR_INVALID_ARG, "ready ring: end %lld, but iteration %lld was already put",
                   (long long)n_iters, (long long)r->slots[i].iter);
      goto unlock;
    }
  r->end = n_iters;
  /* The consumer may be waiting for an iteration that will not come, and producers past the end
   * may be waiting for a window that will not reach them. */
  wake_all(r);
unlock:
  pthread_mutex_unlock(&r->mu);
  return st;
}

void ng__ring_close(ng_ring *r, ng_status why) {
  pthread_mutex_lock(&r->mu);
  if (r->closed == NG_OK) {
    r->closed = why != NG_OK ? why : NG_ERR_INTERNAL;
    wake_all(r);
  }
  pthread_mutex_unlock(&r->mu);
}

bool ng__ring_reclaim(ng_ring *r, int64_t *iter, void **item) {
  bool found = false;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->cap && !found; i++) {
    ring_slot *s = &r->slots[i];
    if (s->full) {
      *iter = s->iter;
      *item = s->item;
      s->item = NULL;
      s->full = false;
      r->depth--;
      found = true;
    }
  }
  pthread_mutex_unlock(&r->mu);
  return found;
}

void ng__ring_stats(ng_ring *r, ng_ring_stats *out) {
  pthread_mutex_lock(&r->mu);
  out->next = r->next;
  out->depth = r->depth;
  out->capacity = r->cap;
  out->producers_waiting = r->put_wait.waiting;
  out->put_wait_ns = wait_total(&r->put_wait);
  out->take_wait_ns = wait_total(&r->take_wait);
  out->puts = r->puts;
  pthread_mutex_unlock(&r->mu);
}

/* ==== staging slots ==== */

struct ng_slots {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int k;
  void **buf;
  size_t *bytes;
  bool *held;
  int *free_stack; /* indices of free buffers; the last released is reused first (cache-warm) */
  int n_free;
  bool closed;
  ng_slot_alloc_fn alloc;
  ng_slot_free_fn free;
  void *ctx;
  wait_clock acquire_wait;
};

static ng_status default_alloc(void *ctx, size_t bytes, void **out) {
  (void)ctx;
  *out = ng__aligned_alloc(bytes, "staging buffer");
  return *out ? NG_OK : NG_ERR_NOMEM;
}

static void default_free(void *ctx, void *ptr, size_t bytes) {
  (void)ctx;
  (void)bytes;
  ng__aligned_free(ptr);
}

void ng__slots_destroy(ng_slots *s) {
  if (!s)
    return;
  if (s->buf)
    for (int i = 0; i < s->k; i++)
      if (s->buf[i])
        s->free(s->ctx, s->buf[i], s->bytes[i]);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s->buf);
  free(s->bytes);
  free(s->held);
  free(s->free_stack);
  free(s);
}

ng_status ng__slots_create(ng_slots **out, int k, size_t bytes_each, ng_slot_alloc_fn alloc_fn,
                           ng_slot_free_fn free_fn, void *ctx) {
  *out = NULL;
  if (k < 1 || bytes_each == 0 || (!alloc_fn) != (!free_fn))
    return ng__err(NG_ERR_INVALID_ARG,
                   "staging slots: %d buffers of %zu bytes%s; give at least one buffer of at "
                   "least one byte, and both allocator callbacks or neither",
                   k, bytes_each, (!alloc_fn) != (!free_fn) ? " with one allocator callback" : "");
  ng_slots *s = ng__calloc(1, sizeof *s, "staging slots");
  if (!s)
    return NG_ERR_NOMEM;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->k = k;
  s->alloc = alloc_fn ? alloc_fn : default_alloc;
  s->free = free_fn ? free_fn : default_free;
  s->ctx = ctx;
  s->buf = ng__calloc((size_t)k, sizeof *s->buf, "staging slots");
  s->bytes = ng__calloc((size_t)k, sizeof *s->bytes, "staging slots");
  s->held = ng__calloc((size_t)k, sizeof *s->held, "staging slots");
  s->free_stack = ng__calloc((size_t)k, sizeof *s->free_stack, "staging slots");
  if (!s->buf || !s->bytes || !s->held || !s->free_stack) {
    ng__slots_destroy(s);
    return NG_ERR_NOMEM;
  }
  for (int i = 0; i < k; i++) {
    ng_status st = s->alloc(s->ctx, bytes_each, &s->buf[i]);
    if (st == NG_OK && !s->buf[i])
      st = ng__err(NG_ERR_INTERNAL, "staging slots: the allocator returned NULL without error");
    if (st != NG_OK) {
      s->buf[i] = NULL;
      ng__err_prefix("staging buffer %d of %d (%zu bytes)", i, k, bytes_each);
      ng__slots_destroy(s);
      return st;
    }
    s->bytes[i] = bytes_each;
    /* Pushed in reverse so that buffer 0 is acquired first. */
    s->free_stack[i] = k - 1 - i;
  }
  s->n_free = k;
  *out = s;
  return NG_OK;
}

void *ng__slots_acquire(ng_slots *s) {
  void *buf = NULL;
  pthread_mutex_lock(&s->mu);
  if (!s->closed && s->n_free == 0) {
    int64_t t0 = wait_begin(&s->acquire_wait);
    while (!s->closed && s->n_free == 0)
      pthread_cond_wait(&s->cv, &s->mu);
    wait_end(&s->acquire_wait, t0);
  }
  if (!s->closed) {
    int i = s->free_stack[--s->n_free];
    s->held[i] = true;
    buf = s->buf[i];
  }
  pthread_mutex_unlock(&s->mu);
  return buf;
}

/* Index of `buf` in the pool, or -1. Called with the lock held. */
static int slot_index(const ng_slots *s, const void *buf) {
  for (int i = 0; i < s->k; i++)
    if (s->buf[i] == buf)
      return i;
  return -1;
}

ng_status ng__slots_release(ng_slots *s, void *buf) {
  ng_status st = NG_OK;
  pthread_mutex_lock(&s->mu);
  int i = buf ? slot_index(s, buf) : -1;
  if (i < 0 || !s->held[i]) {
    st = ng__err(NG_ERR_INVALID_ARG, "staging slots: release of %p, which is %s", buf,
                 i < 0 ? "not a buffer of this pool" : "not acquired (released twice?)");
  } else {
    s->held[i] = false;
    s->free_stack[s->n_free++] = i;
    pthread_cond_signal(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

void ng__slots_close(ng_slots *s) {
  pthread_mutex_lock(&s->mu);
  s->closed = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

void ng__slots_reopen(ng_slots *s) {
  pthread_mutex_lock(&s->mu);
  s->closed = false;
  pthread_mutex_unlock(&s->mu);
}

/* Replaces buffer i (its old `old_bytes`, at `old`) by a new one of `bytes`, copying the old
 * content when `keep`; the allocation (pinned memory can be slow) and the copy run outside the
 * lock, which only the table's update needs (the buffer is the caller's: acquired, or free with
 * no thread acquiring). An error names the operation: `what` buffer i to `bytes``when`. */
static ng_status replace(ng_slots *s, int i, void *old, size_t old_bytes, size_t bytes, bool keep,
                         const char *what, const char *when, void **out) {
  void *nbuf = NULL;
  ng_status st = s->alloc(s->ctx, bytes, &nbuf);
  if (st == NG_OK && !nbuf)
    st = ng__err(NG_ERR_INTERNAL, "staging slots: the allocator returned NULL without error");
  if (st != NG_OK) {
    ng__err_prefix("%s staging buffer %d to %zu bytes%s", what, i, bytes, when);
    return st;
  }
  if (keep)
    memcpy(nbuf, old, old_bytes);
  pthread_mutex_lock(&s->mu);
  s->buf[i] = nbuf;
  s->bytes[i] = bytes;
  pthread_mutex_unlock(&s->mu);
  s->free(s->ctx, old, old_bytes);
  if (out)
    *out = nbuf;
  return NG_OK;
}

/* The index of the free buffer the j-th ng__slots_acquire() from now hands out (j from the top
 * of the free stack), or -1. Under the lock. */
static int next_free(const ng_slots *s, int j) {
  const int at = s->n_free - 1 - j;
  return j >= 0 && at >= 0 ? s->free_stack[at] : -1;
}

ng_status ng__slots_grow(ng_slots *s, void **buf, size_t bytes) {
  pthread_mutex_lock(&s->mu);
  int i = *buf ? slot_index(s, *buf) : -1;
  bool held = i >= 0 && s->held[i];
  size_t old_bytes = i >= 0 ? s->bytes[i] : 0;
  pthread_mutex_unlock(&s->mu);
  if (!held)
    return ng__err(NG_ERR_INVALID_ARG, "staging slots: grow of %p, which is not acquired", *buf);
  if (bytes <= old_bytes)
    return NG_OK;
  size_t want = old_bytes + old_bytes / 2;
  if (want < old_bytes || want < bytes)
    want = bytes;
  return replace(s, i, *buf, old_bytes, want, true, "growing", "", buf);
}

ng_status ng__slots_presize(ng_slots *s, int n, size_t bytes) {
  for (int j = 0; j < n; j++) {
    pthread_mutex_lock(&s->mu);
    const int i = next_free(s, j);
    void *old = i >= 0 ? s->buf[i] : NULL;
    const size_t old_bytes = i >= 0 ? s->bytes[i] : 0;
    pthread_mutex_unlock(&s->mu);
    if (i < 0)
      break;
    if (old_bytes < bytes)
      NG_CHECK(
          replace(s, i, old, old_bytes, bytes, false, "sizing", " before the first epoch", NULL));
  }
  return NG_OK;
}

size_t ng__slots_next_bytes(ng_slots *s, int j) {
  pthread_mutex_lock(&s->mu);
  const int i = next_free(s, j);
  const size_t n = i >= 0 ? s->bytes[i] : 0;
  pthread_mutex_unlock(&s->mu);
  return n;
}

size_t ng__slots_bytes(ng_slots *s, const void *buf) {
  pthread_mutex_lock(&s->mu);
  int i = buf ? slot_index(s, buf) : -1;
  size_t n = i >= 0 ? s->bytes[i] : 0;
  pthread_mutex_unlock(&s->mu);
  return n;
}

void ng__slots_stats(ng_slots *s, int *free_now, int64_t *wait_ns) {
  pthread_mutex_lock(&s->mu);
  *free_now = s->n_free;
  *wait_ns = wait_total(&s->acquire_wait);
  pthread_mutex_unlock(&s->mu);
}
