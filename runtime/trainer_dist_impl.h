/* The trainer's data-parallel side (runtime/trainer_dist.c, docs/distributed.md): which slice of
 * every global batch this rank trains, the gradient all-reduce between backward and step, the
 * epoch's figures summed over the ranks, and the rank's share of its host's cores. */
#ifndef NG_TRAINER_DIST_IMPL_H
#define NG_TRAINER_DIST_IMPL_H

#include "backend_impl.h"
#include "comm_impl.h"

typedef struct {
  struct ng_comm *comm;   ///< borrowed; NULL: one process
  int rank, ranks;        ///< 0 and 1 in one process
  ng_backend *be;         ///< borrowed
  bool device;            ///< the backend reduces on the device (NCCL), not the communicator
  int64_t n_train, batch; ///< the global batch (resolved: <= n_train)
  double wall_ms;         ///< host all-reduce time this epoch (communicator)
  int64_t count;          ///< all-reduces this epoch
} ng_dist_train;

/// Joins the ranks of `comm` (NULL or one rank: nothing to do, d->ranks = 1): checks that every
/// rank has the same global batch, training split and model size, and creates the device
/// communicator of a backend that has one (NCCL; rank 0's id broadcast over `comm`). A host-memory
/// backend (cpu) reduces over `comm`; any other backend without dist ops is an error.
ng_status ng__dist_setup(ng_dist_train *d, struct ng_comm *comm, ng_backend *be, int64_t n_train,
                         int64_t batch, int64_t n_params);
/// The train step's reduce hook (ng_train_step.reduce): the rank's gradients scaled by its share
/// of the iteration's global batch (n_local / n_i) and summed over the ranks.
ng_status ng__dist_reduce(void *ctx, float *grads, int64_t n_grads, int32_t n_local, int64_t iter);
/// The weight of this rank's mean loss of iteration `iter` in the iteration's global mean loss.
double ng__dist_loss_weight(const ng_dist_train *d, int64_t iter);
/// Sums the epoch's figures over the ranks (loss, correct, edges: every rank gets the sums) and
/// gives this rank's mean all-reduce time per iteration (ms), resetting it.
ng_status ng__dist_epoch_end(ng_dist_train *d, double *loss_sum, int64_t *correct, int64_t *edges,
                             double *allreduce_ms);
/// The cores of this rank (a list into out[cap]): the cores nearest its device (all usable ones
/// on cpu), cut by whole cores among the ranks of its host that are nearest the same cores.
ng_status ng__dist_cpuset(char *out, size_t cap, struct ng_comm *comm, ng_backend *be);
/// Threads of a rank when the user set none: the usable cores / the ranks of its host.
int ng__dist_threads(struct ng_comm *comm);

#endif /* NG_TRAINER_DIST_IMPL_H */
