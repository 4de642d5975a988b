/* The op profile: device time of every op of a sampled iteration's device step, measured with
 * the backend's timing events (backend_impl.h, event_record), and summed per kind of op. The
 * trainer picks the iterations; the model and the feature store bracket their ops with
 * ng__prof_begin / ng__prof_end, which do nothing while no iteration is being timed. */
#ifndef NG_PROF_H
#define NG_PROF_H

#include "backend_impl.h"

/// Kinds of op a profile tells apart (name x layer): the input layer's and the loss (8) and at
/// most 11 a model layer (dropout, aggregation, GEMMs, activation, each forward and backward,
/// and the optimizer), so a model of NG_MAX_LAYERS layers never runs out.
#define NG_PROF_ROWS NG_OP_PROFILE_MAX
_Static_assert(NG_PROF_ROWS >= 8 + 11 * NG_MAX_LAYERS, "op profile rows for the deepest model");
/// Two timing events an op: the events of one iteration's ops (at most 8 + 16 a layer).
_Static_assert(NG_BACKEND_EVENTS / 2 >= 8 + 16 * NG_MAX_LAYERS,
               "timing events for the deepest model's iteration");

typedef struct {
  ng_backend *be; ///< borrowed; NULL when the backend has no timing events (profile off)
  bool active;    ///< ops are being timed now
  int next_event; ///< the next free timing event of the iteration being timed
  int open_row;   ///< the row of the op between begin and end, or -1
  /// Ops timed but not yet read: row, begin and end events, and what they did.
  struct {
    int row, ev0, ev1;
    double flops, bytes;
  } pending[NG_BACKEND_EVENTS / 2];
  int n_pending;
  ng_op_time rows[NG_PROF_ROWS];
  int n_rows;
  bool whole;         ///< the iteration being timed reached ng__prof_finish
  int64_t iterations; ///< iterations timed and read
} ng_prof;

/// Sets up a profile over `be` (borrowed); off when the backend has no timing events.
void ng__prof_init(ng_prof *p, ng_backend *be);

/// Starts timing one iteration: first reads what the last timed iteration left pending.
ng_status ng__prof_start(ng_prof *p);
/// Stops timing ops until the next ng__prof_start (or ng__prof_resume).
void ng__prof_pause(ng_prof *p);
/// Times ops again within the iteration started last (between its forward and backward pass).
void ng__prof_resume(ng_prof *p);
/// Ends the iteration being timed after its last op (the optimizer step): only such a whole
/// iteration is added to the sums.
void ng__prof_finish(ng_prof *p);
/// Reads the timed ops still pending into the sums (waits for their events); those of an
/// iteration that did not finish are dropped.
ng_status ng__prof_collect(ng_prof *p);

/// Brackets one op: begin records an event before it, end one after it and files the op as
/// `name` of layer `layer` (-1: none) with the floating-point operations and device-memory
/// bytes it does. Both do nothing on a NULL or inactive profile.
ng_status ng__prof_begin(ng_prof *p);
ng_status ng__prof_end(ng_prof *p, const char *name, int layer, double flops, double bytes);

/// Runs `call` (an ng_status expression) bracketed by profile `p` as `name` of `layer`, with
/// its floating-point operations and device-memory bytes; returns its status on failure.
#define NG_PROF_OP(p, name, layer, flops, bytes, call)                                             \
  do {                                                                                             \
    NG_CHECK(ng__prof_begin(p));                                                                   \
    NG_CHECK(call);                                                                                \
    NG_CHECK(ng__prof_end(p, name, layer, (double)(flops), (double)(bytes)));                      \
  } while (0)

#endif /* NG_PROF_H */
