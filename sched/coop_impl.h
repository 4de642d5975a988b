/* Cooperative cold fetches (sched/coop.c, docs/distributed.md, "Cooperative cold fetch"): in
 * each iteration the ranks of one host split the cold rows their input layers need by an owner
 * rule, each rank reads from host memory only the rows it owns that some rank needs, once for
 * the whole host, and the rows go to the ranks that need them over the communicator's
 * all-to-all. The fetch then reads them through a row overlay (cpu/fetch_impl.h), which gives
 * the same values, hence the same bits, as reading the table.
 *
 * The owner rule is the partitioned hot tier's: row g belongs to rank g mod R (R the ranks of
 * the host). Rows are numbered by hotness, so striping gives every rank the same share of every
 * hotness level: the reads of a step spread evenly over the ranks.
 *
 * The pieces below are pure functions over one rank's arrays, so that a test can run the
 * exchange of several simulated ranks in one process (tests/test_coop.c); ng__coop_step runs
 * them with the communicator between them. */
#ifndef NG_COOP_IMPL_H
#define NG_COOP_IMPL_H

#include "comm_impl.h"
#include "fetch_impl.h"

/// The most ranks one host's cooperation spans.
#define NG_COOP_MAX_RANKS 1024

/// The rank of `ranks` that reads row g from host memory for the host.
static inline int ng__coop_owner(int64_t g, int ranks) {
  return (int)(g % ranks);
}

/// One rank's requests: the `n` distinct ids `ids` (any order) sorted by owner, then ascending,
/// into out[n]; counts[q] (of `ranks`) = how many rank q owns.
void ng__coop_bucket(int64_t *out, int64_t *counts, const int64_t *ids, int64_t n, int ranks);

/// An owner's work space, reused across steps (no steady-state allocation).
typedef struct {
  int64_t *uniq; ///< the distinct ids asked for this step, ascending
  size_t uniq_cap;
  void *rows; ///< [n uniq] their rows, each read once from the table
  size_t rows_cap;
} ng_coop_serve_buf;

void ng__coop_serve_free(ng_coop_serve_buf *b);

/// The owner's side of a step: `req` holds the n_req ids the ranks asked this rank for (the
/// ranks' blocks back to back; each id owned by this rank). Reads each distinct id's row once
/// from `table` (rows of `row_bytes`: fp32 or bf16, copied as they are) and writes the answer for
/// request k at answers[k * row_bytes ..]. *n_read = the distinct rows read.
ng_status ng__coop_serve(void *answers, int64_t *n_read, const int64_t *req, int64_t n_req,
                         const void *table, size_t row_bytes, ng_coop_serve_buf *b);

/// What a rank's cooperation did over some steps (ng__coop_stats).
typedef struct {
  int64_t steps;
  /// Distinct cold rows its input layers needed: what it reads from host memory alone.
  int64_t rows_needed;
  /// Cold rows it read from host memory: cooperative, its owned share of the host's distinct
  /// rows; otherwise rows_needed.
  int64_t rows_read;
  int64_t rows_sent, rows_received; ///< rows that went to, and came from, other ranks
} ng_coop_stats;

typedef struct ng_coop ng_coop;

/// A rank's cooperation over `comm` (borrowed; every rank of it must be on one host; NULL: one
/// process, counting only). With
/// `exchange` false it only counts (rows_needed = rows_read), which gives the figures of a run
/// without cooperation; with true every ng__coop_step is a collective. The host feature table
/// [nodes, dim] (borrowed; rows [0, hot) the hot tier's) is `table` (fp32) or `table16` (bf16,
/// NG_PRECISION_BF16): exactly one when exchanging, whose rows travel as they are (bf16: half
/// the bytes) and come back through the overlay's row or row16.
ng_status ng__coop_create(ng_coop **out, struct ng_comm *comm, bool exchange, int64_t hot,
                          const float *table, const uint16_t *table16, int64_t nodes, int64_t dim);
void ng__coop_destroy(ng_coop *co);

/// One iteration: the cold ids of `mb`'s input layer (node ids >= hot), exchanged with the other
/// ranks (collective when cooperating: every rank calls it for the same iterations in the same
/// order; then from one thread at a time). Counting only, any threads may call it at once.
/// *ovl gets the overlay that holds this rank's cold rows until the next call (empty
/// without exchange).
ng_status ng__coop_step(ng_coop *co, const ng_minibatch *mb, ng_row_overlay *ovl);

/// Whether `co` exchanges rows (NULL: no).
bool ng__coop_exchanges(const ng_coop *co);

/// The figures since ng__coop_create (or the last reset), into *out; with `reset`, zeroes them.
/// Counting only, steps may run meanwhile (each counter is read atomically).
void ng__coop_stats(ng_coop *co, ng_coop_stats *out, bool reset);

#endif /* NG_COOP_IMPL_H */
