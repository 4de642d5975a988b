/* The sample feed (sched/feed.c): threads sample the pipeline's ring positions 0, 1, 2 ... with a
 * backend's device sampler, one lane each (thread k takes positions k, k + lanes, ...) (the GPU
 * samples; core/backend_impl.h, sampler_run) and hands each position's blocks to the worker that
 * takes that position, which then fetches its cold rows (reads them, or aggregates them near the
 * data) as if it had sampled them itself. Workers thus spend their cores on the features, not on
 * the topology (docs/sampling.md). The blocks are those the CPU sampler would draw, bit for bit, so
 * training gives the same bits with either sampler.
 *
 * The feed keeps `slots` sampled positions: position s goes into slot s % slots once the
 * position before it in that slot has been released, so it runs at most `slots` positions ahead
 * of the slowest worker. Several lanes hide the device's latency: a lane's position waits for
 * its round trips to the device (one a layer) while the training step fills the GPU, and the
 * other lanes' kernels fill those gaps. Every wait is on a condition variable, and ng__feed_stop
 * wakes them. */
#ifndef NG_FEED_IMPL_H
#define NG_FEED_IMPL_H

#include "backend_impl.h"
#include "trace_impl.h"

/// What the feed samples at ring position `seq`: its targets (valid until the feed calls again),
/// their count and the iteration's seed. Returns false when there is none to sample (the pool
/// is stopping): the feed thread then ends. `lane` is the calling thread's (its trace track is
/// the feed's track + lane).
typedef bool (*ng_feed_plan_fn)(void *ctx, int lane, int64_t seq, const int64_t **targets,
                                int32_t *n, uint64_t *seed);

typedef struct ng_feed ng_feed;

typedef struct {
  ng_backend *be;
  ng_dev_sampler *sampler;
  const ng_sampler_cfg *cfg; ///< borrowed for the feed's life
  int lanes;                 ///< threads, each on its own lane of the sampler, >= 1
  int slots;                 ///< positions sampled ahead, >= lanes
  ng_feed_plan_fn plan;
  void *plan_ctx;
  ng_trace *trace; ///< NULL: no timeline; else the feed's spans go on track `track`
  int track;
} ng_feed_opts;

/// Starts the feed's threads at ring positions 0 .. lanes - 1.
ng_status ng__feed_start(ng_feed **out, const ng_feed_opts *o);
/// The blocks of position `seq`, waiting until they are sampled; valid until
/// ng__feed_release(f, seq). A failure to sample that position comes back here with its
/// message; NG_ERR_INTERRUPTED once the feed is stopping.
ng_status ng__feed_get(ng_feed *f, int64_t seq, ng_minibatch *mb);
/// Gives position `seq`'s slot back for a later position.
void ng__feed_release(ng_feed *f, int64_t seq);
/// Makes every waiter (the feed's threads, workers in ng__feed_get) return: call it before
/// joining the workers, then ng__feed_stop. NULL accepted.
void ng__feed_close(ng_feed *f);
/// Closes the feed, joins its threads and frees it (its host buffers too); NULL accepted. No
/// worker may be inside ng__feed_get any more.
void ng__feed_stop(ng_feed *f);

#endif /* NG_FEED_IMPL_H */
