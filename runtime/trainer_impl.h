/* Internal accessors of the trainer (runtime/trainer.c) for the layers above and the tests. */
#ifndef NG_TRAINER_IMPL_H
#define NG_TRAINER_IMPL_H

#include "core_impl.h"

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

#endif /* NG_TRAINER_IMPL_H */
