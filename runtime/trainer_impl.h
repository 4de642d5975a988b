/* Internal accessors of the trainer (runtime/trainer.c) for the layers above and the tests. */
#ifndef NG_TRAINER_IMPL_H
#define NG_TRAINER_IMPL_H

#include "core_impl.h"
#include "fetch_impl.h"
#include "train_step_impl.h"

/// The logits [nodes, classes] of full-neighbour layer-wise inference with the trainer's current
/// parameters (computed once per parameter state, as ng_trainer_evaluate does), borrowed: valid
/// until the parameters change (an epoch, a load) or the trainer is destroyed. The serving
/// engine's answers are checked against them bit for bit.
ng_status ng__trainer_logits(const float **out, ng_trainer_t trainer);
/// ng_trainer_embed, telling rows_done(rows_done_ctx, first, n) (NULL: nobody) when rows
/// [first, first + n) of `out` are written: every node in id order only (runtime/infer_impl.h).
ng_status ng__trainer_embed(float *out, ng_trainer_t trainer, const int64_t *nodes, int64_t n,
                            const ng_infer_opts *opts, void (*rows_done)(void *, int64_t, int64_t),
                            void *rows_done_ctx);

/// For tests: the trainer's runtime (its workers' staging slots, sched/pipeline_impl.h) and the
/// memory estimate it was created under (*mem, may be NULL).
struct ng_pipeline *ng__trainer_pipeline(ng_trainer_t trainer, ng_memory_estimate *mem);

/// A trainer whose model's last layer is a node embedding (link prediction, runtime/link.c):
/// ng_trainer_create without the checks that tie the output layer to the dataset's classes.
/// Its node-classification calls (epoch, evaluate) are not for it; the link trainer drives the
/// parts below itself.
ng_status ng__trainer_create_link(ng_trainer_t *out, ng_dataset_t ds, ng_model_t model,
                                  const ng_train_opts *opts);

/// The parts of a trainer another trainer drives (borrowed, valid while `t` lives): the link
/// trainer samples, fetches and steps with them through their own interfaces.
typedef struct {
  ng_backend *be;
  ng_model_exec *ex;
  ng_sampler_cfg *sampler; ///< over the trainer's dataset's graph
  ng_sample_arena *arena;
  ng_store *store;
  const ng_fetch_cfg *fetch; ///< mode BATCH; the caller sets the strategy per package
  ng_train_step *step;       ///< its optimizer settings and step count
  ng_mode mode;              ///< resolved
  int threads;               ///< OpenMP threads of the host work
} ng_trainer_parts;
ng_status ng__trainer_parts(ng_trainer_parts *out, ng_trainer_t t);
/// The trainer's parameters, then the optimizer's two states, copied to the host as a
/// checkpoint holds them: *out [3 n_params] (the caller frees it, even on failure).
ng_status ng__trainer_copy_out(float **out, ng_trainer_t t);
/// An epoch's `n` iteration times into out->iter_ms_median and iter_ms_p99 (the nearest-rank
/// percentile); sorts iter_ms. Node and link epochs report them alike.
void ng__epoch_times(ng_epoch_stats *out, double *iter_ms, int64_t n);
/// Tells the trainer its parameters changed outside its epochs (its cached inference goes).
void ng__trainer_params_changed(ng_trainer_t t);

#endif /* NG_TRAINER_IMPL_H */
