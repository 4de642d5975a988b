/* The communicator over MPI (mpirun): MPI_COMM_WORLD. Reductions gather every rank's
 * contribution on rank 0, which sums them in rank order and broadcasts the result, so that every
 * rank gets the same bits whatever MPI's own reduction order would be. Built only when CMake
 * finds MPI (NG_HAVE_MPI); otherwise "mpi" is an error that says so. */
#include "comm_impl.h"

#ifdef NG_HAVE_MPI
#include <mpi.h>

#include <stdlib.h>
#include <string.h>

typedef struct {
  bool initialised; /* MPI_Init was ours: MPI_Finalize is too */
} mpi_comm;

static ng_status mpi_err(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return ng__err(NG_ERR_IO, "distributed: %s failed: %s", what, msg);
}

#define MPI_CHECK(call, what)                                                                      \
  do {                                                                                             \
    int mpi_rc_ = (call);                                                                          \
    if (mpi_rc_ != MPI_SUCCESS)                                                                    \
      return mpi_err(mpi_rc_, what);                                                               \
  } while (0)

static ng_status m_allreduce(struct ng_comm *c, void *x, int64_t n, bool f64) {
  const size_t esz = f64 ? sizeof(double) : sizeof(float);
  const size_t bytes = (size_t)n * esz;
  if (bytes > (size_t)INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED,
                   "distributed: an all-reduce of %zu bytes is over MPI's "
                   "int count",
                   bytes);
  if (c->rank == 0)
    NG_CHECK(ng__host_reserve(&c->scratch, &c->scratch_cap, bytes * (size_t)c->size,
                              "the all-reduce's buffer"));
  MPI_CHECK(
      MPI_Gather(x, (int)bytes, MPI_BYTE, c->scratch, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD),
      "MPI_Gather");
  if (c->rank == 0)
    ng__comm_sum(x, c->scratch, c->size, n, f64);
  MPI_CHECK(MPI_Bcast(x, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return NG_OK;
}

static ng_status m_bcast(struct ng_comm *c, void *buf, size_t bytes, int root) {
  (void)c;
  if (bytes > (size_t)INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED, "distributed: a broadcast of %zu bytes", bytes);
  MPI_CHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  return NG_OK;
}

static ng_status m_allgather(struct ng_comm *c, const void *in, void *out, size_t bytes) {
  (void)c;
  if (bytes > (size_t)INT32_MAX)
    return ng__err(NG_ERR_UNSUPPORTED, "distributed: an all-gather of %zu bytes", bytes);
  MPI_CHECK(MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
            "MPI_Allgather");
  return NG_OK;
}

static ng_status m_alltoallv(struct ng_comm *c, const void *send, const size_t *send_bytes,
                             void *recv, const size_t *recv_bytes) {
  const int n = c->size;
  int *v = ng__malloc((size_t)n * 4 * sizeof *v, "the all-to-all's counts");
  if (!v)
    return NG_ERR_NOMEM;
  int *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
  size_t so = 0, ro = 0;
  for (int q = 0; q < n; q++) {
    sc[q] = (int)send_bytes[q];
    rc[q] = (int)recv_bytes[q];
    sd[q] = (int)so;
    rd[q] = (int)ro;
    so += send_bytes[q];
    ro += recv_bytes[q];
  }
  if (so > (size_t)INT32_MAX || ro > (size_t)INT32_MAX) {
    free(v);
    return ng__err(NG_ERR_UNSUPPORTED,
                   "distributed: an all-to-all of %zu bytes sent, %zu received is over MPI's "
                   "int counts",
                   so, ro);
  }
  /* The self block was copied by the caller; sending it again is harmless (same bytes). */
  const int rc_mpi = MPI_Alltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
  free(v);
  if (rc_mpi != MPI_SUCCESS)
    return mpi_err(rc_mpi, "MPI_Alltoallv");
  return NG_OK;
}

static void m_destroy(struct ng_comm *c) {
  mpi_comm *m = c->impl;
  if (m && m->initialised) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }
  free(m);
  c->impl = NULL;
}

static const ng_comm_ops MPI_OPS = {"mpi",       m_allreduce, m_bcast,
                                    m_allgather, m_alltoallv, m_destroy};

bool ng__comm_have_mpi(void) {
  return true;
}

ng_status ng__comm_mpi_open(struct ng_comm *c) {
  mpi_comm *m = ng__calloc(1, sizeof *m, "the MPI communicator");
  if (!m)
    return NG_ERR_NOMEM;
  c->impl = m;
  c->ops = &MPI_OPS;
  int inited = 0;
  MPI_CHECK(MPI_Initialized(&inited), "MPI_Initialized");
  if (!inited) {
    int provided = 0;
    /* One thread at a time calls MPI (the device thread during an epoch): SERIALIZED. */
    MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    m->initialised = true;
  }
  /* Errors come back as codes, not as an abort. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank), "MPI_Comm_rank");
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size), "MPI_Comm_size");
  return NG_OK;
}

#else

bool ng__comm_have_mpi(void) {
  return false;
}

ng_status ng__comm_mpi_open(struct ng_comm *c) {
  (void)c;
  return ng__err(NG_ERR_UNSUPPORTED,
                 "distributed: this build of neargnn has no MPI (CMake found none): install "
                 "Open MPI (Debian: openmpi-bin libopenmpi-dev) and rebuild, or use the built-in "
                 "launcher, neargnn train --ranks N, on one host");
}

#endif
