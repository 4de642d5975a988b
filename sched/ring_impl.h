/* The ready ring and the staging slots of the hybrid runtime (sched/ring.c, docs/scheduler.md):
 * the ring hands iterations to the device thread in order, and each worker fills its own pool
 * of staging slots. Not installed. Every blocking call here waits on a condition variable
 * (never spins) and every object can be closed, which wakes all its waiters, so a failure
 * anywhere stops the pipeline promptly. */
#ifndef NG_RING_IMPL_H
#define NG_RING_IMPL_H

#include "core_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Hands the results of iterations 0, 1, 2, ... from many producers (the workers) to one
/// consumer (the device thread) strictly in iteration order. Only iterations in the window
/// [next_to_take, next_to_take + capacity) can be put, so a fast producer blocks instead of
/// running ahead without bound.
typedef struct ng_ring ng_ring;

/// What the ring has seen; wait times are on the monotonic clock and include waits in progress.
typedef struct {
  int64_t next;          ///< the next iteration the consumer will take
  int depth;             ///< items put and not yet taken (in order or not)
  int capacity;          ///< window size
  int producers_waiting; ///< producers blocked right now because their iteration is past the window
  int64_t put_wait_ns;   ///< total time producers spent blocked in ng__ring_put()
  int64_t take_wait_ns;  ///< total time the consumer spent blocked in ng__ring_take()
  int64_t puts;          ///< items put so far
} ng_ring_stats;

/// Creates a ring whose window holds `capacity` >= 1 iterations.
ng_status ng__ring_create(ng_ring **out, int capacity);
/// Frees the ring (accepts NULL). Items still inside are not freed: take them back first with
/// ng__ring_reclaim(). No thread may be inside a ring call.
void ng__ring_destroy(ng_ring *r);
/// Publishes `item` (not NULL; taken by the ring) as the result of iteration `iter`; every
/// iteration is put exactly once. Blocks while `iter` >= next_to_take + capacity. Returns the
/// close status when the ring is or gets closed (the item stays the caller's then),
/// NG_ERR_INVALID_ARG for a NULL item, a negative iteration or one at or past the end set by
/// ng__ring_finish(), and NG_ERR_STATE for an iteration already put or taken.
ng_status ng__ring_put(ng_ring *r, int64_t iter, void *item);
/// Takes the next iteration in order, blocking until it is put; `*iter` receives its index and
/// `*item` the item (now the caller's). At the end set by ng__ring_finish() it returns NG_OK with
/// `*item` = NULL and `*iter` = the end, again on every later call. Once the ring is closed it
/// returns the close status at once with `*item` = NULL, even when items are ready: an error
/// stops the consumer promptly. Single consumer.
ng_status ng__ring_take(ng_ring *r, int64_t *iter, void **item);
/// Declares the normal end: no iteration >= `n_iters` will be put. The consumer drains
/// iterations below it, then sees the end. Returns NG_ERR_INVALID_ARG when an iteration >=
/// `n_iters` was already put or taken, NG_ERR_STATE when a different end was already set, and the
/// close status after a close.
ng_status ng__ring_finish(ng_ring *r, int64_t n_iters);
/// Stops the ring with the error `why`: every blocked and later put and take returns `why` at
/// once. The first close wins; later ones change nothing. `why` must be an error (NG_OK, a bug,
/// is recorded as NG_ERR_INTERNAL); the normal end is ng__ring_finish().
void ng__ring_close(ng_ring *r, ng_status why);
/// Takes back any one item still in the ring, in no particular order, without blocking; false
/// when it is empty. For cleanup after a close, once producers have stopped.
bool ng__ring_reclaim(ng_ring *r, int64_t *iter, void **item);
/// A consistent snapshot of the ring's counters.
void ng__ring_stats(ng_ring *r, ng_ring_stats *out);

/// Allocator of staging buffers (e.g. pinned or registered host memory). `alloc` returns a
/// status and writes the buffer to `*out`, so that it can report its own error (ng__err()).
typedef ng_status (*ng_slot_alloc_fn)(void *ctx, size_t bytes, void **out);
typedef void (*ng_slot_free_fn)(void *ctx, void *ptr, size_t bytes);

/// A fixed set of K staging buffers that one worker fills and the device thread releases once
/// the copy out of them has completed. Buffers are 64-byte aligned with the default allocator.
typedef struct ng_slots ng_slots;

/// Allocates `k` >= 1 buffers of `bytes_each` > 0 bytes through `alloc_fn`/`free_fn` (both NULL:
/// ng__aligned_alloc()). `ctx` is borrowed until ng__slots_destroy().
ng_status ng__slots_create(ng_slots **out, int k, size_t bytes_each, ng_slot_alloc_fn alloc_fn,
                           ng_slot_free_fn free_fn, void *ctx);
/// Frees every buffer, acquired or not (accepts NULL). Nobody may still use one.
void ng__slots_destroy(ng_slots *s);
/// A free buffer, blocking until one is released; NULL once the pool is closed.
void *ng__slots_acquire(ng_slots *s);
/// Gives an acquired buffer back (any thread). Accepted after a close too, so that in-flight
/// copies can finish. NG_ERR_INVALID_ARG when `buf` is not an acquired buffer of this pool.
ng_status ng__slots_release(ng_slots *s, void *buf);
/// Wakes every waiter of ng__slots_acquire(); it returns NULL from now on.
void ng__slots_close(ng_slots *s);
/// Undoes ng__slots_close() for the next run (the runtime closes them when it stops a pool); no
/// thread may be waiting in ng__slots_acquire().
void ng__slots_reopen(ng_slots *s);
/// Replaces the acquired buffer `*buf` by one of at least `bytes` bytes (growing by at least half
/// its size, so that repeated growth is amortised), keeping its content. On failure `*buf` is
/// unchanged and still acquired. Does nothing when it is already large enough.
ng_status ng__slots_grow(ng_slots *s, void **buf, size_t bytes);
/// Grows the `n` free buffers that ng__slots_acquire() hands out next (the free list is LIFO:
/// the last released first) to exactly `bytes` each, when smaller, without keeping their
/// content: a worker's first packages then need no growth (sched/pipeline.c sizes them before
/// the first epoch). Stops at the free buffers there are. On failure the buffer being grown
/// keeps its old size and the error names it. No thread may acquire from the pool meanwhile.
ng_status ng__slots_presize(ng_slots *s, int n, size_t bytes);
/// Capacity of the free buffer the j-th ng__slots_acquire() from now would hand out (j = 0:
/// the next), or 0 when fewer than j + 1 are free.
size_t ng__slots_next_bytes(ng_slots *s, int j);
/// Capacity in bytes of buffer `buf` of this pool (0 when it is not one).
size_t ng__slots_bytes(ng_slots *s, const void *buf);
/// Buffers free right now, and total time ng__slots_acquire() spent blocked (monotonic ns).
void ng__slots_stats(ng_slots *s, int *free_now, int64_t *wait_ns);

#ifdef __cplusplus
}
#endif

#endif /* NG_RING_IMPL_H */
