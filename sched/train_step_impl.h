/* The device side of one training iteration (sched/train_step.c): the input layer from the
 * tiered feature store, the model's forward pass, the loss, the backward pass and the optimizer
 * step, over a model on the backend (models/). The pipeline (sched/pipeline.c) calls these
 * directly, in this order for each iteration; the trainer (runtime/) only fills the struct. */
#ifndef NG_TRAIN_STEP_IMPL_H
#define NG_TRAIN_STEP_IMPL_H

#include "comm_impl.h"
#include "feature_store_impl.h"
#include "model_impl.h"

/// A data-parallel run's gradient all-reduce (docs/distributed.md), handed down as data: the
/// trainer joins the ranks and fills it (runtime/trainer_dist.c, ng__dist_setup), the train step
/// sums the gradients over `comm` (or the backend's device communicator) between an iteration's
/// backward pass and its optimizer step, and the trainer reads and resets the timings at the end
/// of an epoch.
typedef struct {
  struct ng_comm *comm;   ///< borrowed; NULL: one process
  int rank, ranks;        ///< 0 and 1 in one process
  ng_backend *be;         ///< borrowed
  bool device;            ///< the backend reduces on the device (NCCL), not the communicator
  int64_t n_train, batch; ///< the global batch (resolved: <= n_train)
  double wall_ms;         ///< host all-reduce time this epoch (communicator)
  int64_t count;          ///< all-reduces this epoch
} ng_grad_reduce;

/// The size of iteration `iter`'s global batch (*n_i) and this rank's share of it (*n_local):
/// slice r of n_i targets is [floor(n_i r / R), floor(n_i (r + 1) / R)), as ng__plan_slice.
void ng__grad_share(const ng_grad_reduce *g, int64_t iter, int64_t *n_i, int64_t *n_local);

/// The weight of this rank's mean loss of iteration `iter` in the iteration's global mean loss
/// (n_local / n_i); 1 when `g` is NULL or a run of one rank.
double ng__grad_loss_weight(const ng_grad_reduce *g, int64_t iter);

/// The rank's gradients (backend memory, n_grads floats, of its `n_local` targets of iteration
/// `iter`) scaled by its share of the iteration's global batch (n_local / n_i) and summed over
/// the ranks.
ng_status ng__grad_reduce(ng_grad_reduce *g, float *grads, int64_t n_grads, int32_t n_local,
                          int64_t iter);

/// The loss of a model whose outputs are scored on the host (link prediction: the targets'
/// embeddings, scored in pairs by the decoder, runtime/link.c) instead of the device's
/// cross-entropy over classes. An upward hook (docs/architecture.md lists it): the runtime's
/// function, which the train step calls on the device thread.
typedef struct {
  /// Iteration `iter`'s loss: `h` [n, dim] are its n targets' outputs (on the host),
  /// `payload` what the plan's ng_target_hook made for the iteration (pipeline_impl.h). Writes
  /// d loss / d h into dh [n, dim], the iteration's loss and its correct count. Called in
  /// iteration order, one call at a time; an error (a non-finite loss included) stops the epoch
  /// before the iteration's backward pass.
  ng_status (*loss)(void *ctx, int64_t iter, const void *payload, const float *h, int64_t n,
                    int64_t dim, float *dh, double *loss, int64_t *correct);
  void *ctx;
  int64_t dim; ///< the model's output columns
} ng_host_loss;

/// Results of host losses read ahead of the pipeline's result call: it reads the loss of
/// iteration i - 1 after queuing i's forward, so at most two are unread.
#define NG_HOST_LOSS_QUEUE 4

/// What the device side of training needs, handed down by the trainer as data. The trainer
/// fills the borrowed pointers, `classes` and `hp` once, and reads or restores `steps` (its
/// checkpoints hold it); the functions below own the rest.
typedef struct {
  ng_model_exec *ex; ///< borrowed: parameters, gradients, optimizer state and workspace
  ng_store *store;   ///< borrowed: the input layer's features (hot tier and the device side)
  int64_t classes;   ///< the loss's number of classes
  ng_opt_hp hp;      ///< the optimizer's hyper-parameters; `step` is set at each step
  int64_t steps;     ///< optimizer steps queued so far
  /// The iteration whose step was queued last, until its loss is read (-1: none): a bad loss
  /// takes that step back out of `steps`.
  int64_t stepped_iter;
  void *d_logits; ///< backend memory: d loss / d logits of the iteration in flight
  size_t d_logits_cap;
  ng_prof *prof;      ///< borrowed: the op profile the ops are timed into, or NULL
  int64_t prof_every; ///< time the ops of one iteration in this many (0: none)
  int64_t prof_iter;  ///< the iteration being timed, or -1
  int64_t forwards;   ///< forward passes this trainer queued (its first is never timed)
  /// borrowed: a data-parallel run's ranks, over which the gradients are summed between each
  /// iteration's backward pass and its optimizer step (ng__grad_reduce); NULL in a run of one
  /// process.
  ng_grad_reduce *reduce;
  /// borrowed: the loss on the host (NULL: the device's cross-entropy over `classes`). The
  /// forward pass then waits for the outputs, brings them to the host and the loss's gradient
  /// back (the fields below), and the result call reads the queue instead of the backend.
  const ng_host_loss *host_loss;
  float *h, *dh; ///< host: the outputs and their gradient, grown to the largest iteration
  size_t h_cap, dh_cap;
  struct {
    double loss;
    int64_t correct;
  } host_q[NG_HOST_LOSS_QUEUE]; ///< unread host losses, oldest at host_q_head
  int host_q_head, host_q_len;
} ng_train_step;

/// Queues, right after iteration `iter`'s package copy (in package slot `slot`) and while the
/// device still runs the iteration before, the reads of host memory the package needs
/// (ng__store_prefetch). `seed` is the iteration's seed (ng__iter_seed).
ng_status ng__train_step_prefetch(ng_train_step *ts, uint64_t seed, const ng_fetch_pkg *pkg,
                                  int slot);
/// Queues the input layer, the forward pass and the loss (a deferred xent: nothing waits for
/// the device) of iteration `iter`. With a host loss (ts->host_loss) it waits for the outputs
/// instead and computes the loss on the host, with `payload` (the iteration's, from its plan's
/// ng_target_hook; NULL without one). With an op profile, one iteration in
/// prof_every has its ops timed, forward and backward (this trainer's first forward left out:
/// its buffers grow and its GEMM graphs are captured).
ng_status ng__train_step_forward(ng_train_step *ts, int64_t iter, uint64_t seed,
                                 const ng_fetch_pkg *pkg, const void *payload, int slot);
/// Queues iteration `iter`'s backward pass and optimizer step before its loss is known: the
/// backend's step guard (backend_impl.h, xent) keeps a non-finite loss from the parameters, and
/// ng__train_step_result takes the step back out of the count.
ng_status ng__train_step_backward(ng_train_step *ts, int64_t iter, const ng_fetch_pkg *pkg);
/// Waits for iteration `iter`'s loss (the oldest unread one; `iter` -1 for a forward whose step
/// was never queued) and fails on a non-finite one, whose step, if queued, then did nothing.
ng_status ng__train_step_result(ng_train_step *ts, int64_t iter, double *loss, int64_t *correct);
/// Frees what the step functions allocated; the borrowed pointers are left alone.
void ng__train_step_free(ng_train_step *ts);

#endif /* NG_TRAIN_STEP_IMPL_H */
