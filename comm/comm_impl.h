/* The ranks of a data-parallel run (docs/distributed.md): a small communicator with the few
 * collectives training needs, over TCP sockets (the built-in launcher) or MPI (mpirun), and a
 * group of one rank. The layer sits above core/ only; the train step (sched/) sums gradients
 * over it, the runtime (runtime/) joins the ranks with it, and the CUDA backend's NCCL
 * all-reduce (gpu/backend_cuda_nccl.cu) gets its unique id through it.
 *
 * Determinism: every reduction sums the ranks' contributions in rank order, ((x0 + x1) + x2) ...,
 * on one rank, which sends the result to all: every rank gets the same bits, run after run. */
#ifndef NG_COMM_IMPL_H
#define NG_COMM_IMPL_H

#include "core_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/// One implementation's collectives. Every rank calls the same collectives in the same order.
typedef struct {
  const char *name;
  /// x[0 .. n) = the sum over ranks, in rank order (float or double by `f64`).
  ng_status (*allreduce)(struct ng_comm *c, void *x, int64_t n, bool f64);
  /// Rank `root`'s `bytes` at `buf` into every rank's `buf`.
  ng_status (*bcast)(struct ng_comm *c, void *buf, size_t bytes, int root);
  /// Every rank's `bytes` at `in` into out[rank * bytes ..] on every rank.
  ng_status (*allgather)(struct ng_comm *c, const void *in, void *out, size_t bytes);
  /// All-to-all of blocks of any size: send[send_off[q] .. + send_bytes[q]) goes to rank q, and
  /// rank p's block for this rank lands at recv[recv_off[p] .. + recv_bytes[p]) (the blocks of
  /// each side packed in rank order; the self block is copied by the caller, ng__comm_alltoallv).
  ng_status (*alltoallv)(struct ng_comm *c, const void *send, const size_t *send_bytes, void *recv,
                         const size_t *recv_bytes);
  void (*destroy)(struct ng_comm *c);
} ng_comm_ops;

struct ng_comm {
  uint32_t magic;
  int rank, size;
  int local_rank, local_size; ///< among the ranks whose host name is this rank's
  const ng_comm_ops *ops;
  void *impl;
  /// Scratch of the reductions (the gathered contributions), grown on demand.
  void *scratch;
  size_t scratch_cap;
  /// ng__comm_alltoall's block sizes ([size]), grown once.
  size_t *sizes;
  size_t sizes_cap;
};

#define NG_COMM_MAGIC 0x6e67636du /* "ngcm" */

ng_status ng__comm_check(const struct ng_comm *c);
/// The collectives (a group of one rank returns at once).
ng_status ng__comm_allreduce_f32(struct ng_comm *c, float *x, int64_t n);
ng_status ng__comm_allreduce_f64(struct ng_comm *c, double *x, int64_t n);
ng_status ng__comm_bcast(struct ng_comm *c, void *buf, size_t bytes, int root);
ng_status ng__comm_allgather(struct ng_comm *c, const void *in, void *out, size_t bytes);
/// All-to-all of blocks of any size (the cooperative cold fetch's exchange, sched/coop.c):
/// `send` holds one block for each rank q in rank order, send_bytes[q] bytes each (the block
/// for this rank included); `recv` receives rank p's block for this rank at the sum of
/// recv_bytes[0 .. p), recv_bytes[p] bytes long. Every pair must agree on the sizes (p's
/// send_bytes[q] is q's recv_bytes[p]): exchange them first with ng__comm_alltoall. Blocks are
/// delivered as sent, byte for byte. Over sockets a pair that disagrees is NG_ERR_INVALID_ARG
/// on every rank, naming the pair, and the ranks stay in step (the next collective works);
/// over MPI it is MPI_Alltoallv's error where MPI finds it.
ng_status ng__comm_alltoallv(struct ng_comm *c, const void *send, const size_t *send_bytes,
                             void *recv, const size_t *recv_bytes);
/// All-to-all of `bytes` from each rank to each rank: in[q * bytes ..] to rank q, rank p's at
/// out[p * bytes ..].
ng_status ng__comm_alltoall(struct ng_comm *c, const void *in, void *out, size_t bytes);
/// Waits until every rank has called it.
ng_status ng__comm_barrier(struct ng_comm *c);

/// Sums `n` values of each of `ranks` contributions at parts[r * n ..] into out, in rank order.
void ng__comm_sum(void *out, const void *parts, int ranks, int64_t n, bool f64);

/// The implementations' constructors: they set rank, size, ops and impl.
ng_status ng__comm_socket_open(struct ng_comm *c);
ng_status ng__comm_mpi_open(struct ng_comm *c);
/// Whether this build has MPI.
bool ng__comm_have_mpi(void);

#ifdef __cplusplus
}
#endif

#endif /* NG_COMM_IMPL_H */
