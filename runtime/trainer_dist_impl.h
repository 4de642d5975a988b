/* The trainer's data-parallel side (runtime/trainer_dist.c, docs/distributed.md): joining the
 * ranks (the ng_grad_reduce the train step sums the gradients over, sched/train_step_impl.h),
 * the epoch's figures summed over the ranks, and the rank's
 * share of its host's cores. */
#ifndef NG_TRAINER_DIST_IMPL_H
#define NG_TRAINER_DIST_IMPL_H

#include "coop_impl.h"
#include "train_step_impl.h"

/// Joins the ranks of `comm` (NULL or one rank: nothing to do, d->ranks = 1): checks that every
/// rank has the same global batch, training split and model size, and creates the device
/// communicator of a backend that has one (NCCL; rank 0's id broadcast over `comm`). A host-memory
/// backend (cpu) reduces over `comm`; any other backend without dist ops is an error.
ng_status ng__dist_setup(ng_grad_reduce *d, struct ng_comm *comm, ng_backend *be, int64_t n_train,
                         int64_t batch, int64_t n_params);
/// Sums the epoch's figures over the ranks (loss, correct, edges: every rank gets the sums) and
/// gives this rank's mean all-reduce time per iteration (ms), resetting it.
ng_status ng__dist_epoch_end(ng_grad_reduce *d, double *loss_sum, int64_t *correct, int64_t *edges,
                             double *allreduce_ms);
/// The cores of this rank (a list into out[cap]): the cores nearest its device (all usable ones
/// on cpu), cut by whole cores among the ranks of its host that are nearest the same cores.
ng_status ng__dist_cpuset(char *out, size_t cap, struct ng_comm *comm, ng_backend *be);
/// Threads of a rank when the user set none: the usable cores / the ranks of its host.
int ng__dist_threads(struct ng_comm *comm);

/// The cold-row counter of every run, and with `want` COOPERATIVE and several ranks the
/// cooperative cold fetch (docs/distributed.md) over d's communicator, in *out (taken by the
/// caller: ng__coop_destroy). `fetch` is the host side of the input layer (its hot set, table,
/// precision). *workers is the pipeline's resolved worker count, `user_workers` the one asked:
/// cooperation runs the host work inline, so the default (0) becomes -1 there, and a number of
/// threads asked is left for the pipeline to refuse. Refused here: the hybrid and zero-copy
/// modes (`mode`, resolved), a partitioned hot tier and input dropout (`input_dropout`, the
/// first layer's, fixed for the run), whose rows are not exchanged yet. A bf16 table's rows are
/// exchanged as bf16 (fetch->features_bf16).
ng_status ng__dist_coop_create(ng_coop **out, const ng_grad_reduce *d, ng_cold_fetch want,
                               ng_mode mode, const ng_fetch_cfg *fetch, float input_dropout,
                               int *workers, int user_workers);
/// The run's cold-row figures of `co` so far, summed over d's ranks (collective with several ranks)
/// into *out, for a global batch of `batch` targets, with the NUMA placement rule's choice for
/// them (runtime/placement_impl.h: rank 0's reading of the host's nodes, every rank's GPU node);
/// keeps out->size.
ng_status ng__dist_coop_epoch(ng_cold_fetch_stats *out, ng_coop *co, const ng_grad_reduce *d,
                              const ng_fetch_cfg *fetch, int64_t batch);

#endif /* NG_TRAINER_DIST_IMPL_H */
