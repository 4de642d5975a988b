/* The timeline of the hybrid runtime (sched/trace.c): spans of each thread's time, written as
 * Chrome trace-event JSON (--trace, docs/scheduler.md). Not installed. */
#ifndef NG_TRACE_IMPL_H
#define NG_TRACE_IMPL_H

#include "core_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/// What a span of a thread's time was spent on. Workers: SLOT_WAIT, SAMPLE, FETCH, READY_WAIT,
/// PREPARE;
/// the device thread: TAKE_WAIT, UPLOAD, COPY_WAIT, FORWARD, LOSS_WAIT, BACKWARD, CONTROL, and
/// START/STOP around the workers' pool (inline, it also samples and fetches).
typedef enum {
  NG_SPAN_SLOT_WAIT,  ///< waiting for a free staging slot (the device still holds them all)
  NG_SPAN_SAMPLE,     ///< sampling the iteration's blocks
  NG_SPAN_FETCH,      ///< the group's fetch: reduction, gather or id lists, and the package
  NG_SPAN_READY_WAIT, ///< blocked handing the package over (the ready window is full)
  NG_SPAN_TAKE_WAIT,  ///< the device thread waiting for the next iteration's package
  NG_SPAN_UPLOAD,     ///< queuing a package's copy and its zero-copy reads
  NG_SPAN_COPY_WAIT,  ///< waiting for a package's copy to land
  NG_SPAN_FORWARD,    ///< queuing the forward pass and the loss
  NG_SPAN_LOSS_WAIT,  ///< waiting for the previous iteration's loss (the device is busy), and
                      ///< reporting that iteration (the trainer's sink, its progress callback)
  NG_SPAN_BACKWARD,   ///< queuing the backward pass and the step
  NG_SPAN_CONTROL,    ///< the controller's step and the telemetry
  NG_SPAN_START,      ///< starting the workers' pool for an epoch
  NG_SPAN_STOP,       ///< joining the pool (after the last epoch, a failure or to start afresh)
  NG_SPAN_EPOCH,      ///< a whole call of ng__pipeline_epoch, around the device thread's spans
  NG_SPAN_PREPARE,    ///< a worker writing the next epoch's order (ng_epoch_plan.shuffle_ids)
  NG_SPAN_FEED_WAIT,  ///< a worker waiting for its iteration's blocks from the sample feed
  NG_SPAN_SLOT_GROW,  ///< a worker growing a staging slot (page-locking it), inside its fetch
  NG_SPAN_COUNT
} ng_span_kind;

/// A timeline of per-thread spans ("tracks"), each track written by one thread at a time, read
/// only once every writer has stopped (after joining them). Track 0 is the device thread.
typedef struct ng_trace ng_trace;

/// Creates a trace of `tracks` >= 1 tracks, each holding at most `max_spans` >= 1 spans; later
/// spans are counted as dropped. Times are the monotonic clock (ng__now_ns()).
ng_status ng__trace_create(ng_trace **out, int tracks, int64_t max_spans);
void ng__trace_destroy(ng_trace *t); ///< accepts NULL
/// Names track `track` ("worker 3 (core 4)"); copied. Only ng__trace_write() reads names, so a
/// thread may name a track while another records on it.
void ng__trace_name(ng_trace *t, int track, const char *name);
/// Records a span [t0, t1] of iteration `iter` (-1: none; the epoch for START, STOP and EPOCH) on
/// `track`; `arg` is the worker group for FETCH spans (ng_group), the sampled edges for SAMPLE
/// spans, else 0. Accepts t == NULL
/// (tracing off): costs a branch then.
void ng__trace_span(ng_trace *t, int track, ng_span_kind kind, int64_t iter, int arg, int64_t t0,
                    int64_t t1);
/// Spans recorded and dropped so far, over all tracks.
void ng__trace_counts(const ng_trace *t, int64_t *recorded, int64_t *dropped);
/// Writes the trace as Chrome trace-event JSON (Perfetto, chrome://tracing) to `path`: one
/// complete event per span, in microseconds from the first span, with its iteration (and group)
/// as arguments.
ng_status ng__trace_write(const ng_trace *t, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* NG_TRACE_IMPL_H */
