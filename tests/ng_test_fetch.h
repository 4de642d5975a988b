/* Training runs for the fetch-strategy suites (test_fetch.c on the CPU backend, test_gpu_fetch.c
 * on CUDA): the same model and seed through a chosen strategy and hot-tier size, keeping each
 * epoch's loss, the fetch counters and the final checkpoint's bytes for comparison. */
#ifndef NG_TEST_FETCH_H
#define NG_TEST_FETCH_H

#include "ng_test_cora.h"

enum { NG_TEST_FETCH_EPOCHS = 2 };

typedef struct {
  const char *device;
  ng_mode mode;
  ng_fetch transfer; ///< the hybrid modes' TRANSFER strategy
  int workers;       ///< ng_train_opts.workers (-1: inline)
  int partial_workers;
  double cache_ratio;
  ng_model_kind kind;
  ng_aggregator aggregator;
  float dropout; ///< on every layer's input, the input layer's too
  int threads;
  double period_ms;       ///< the hybrid controller's period (small: moves happen in a short run)
  int lookahead;          ///< packages copied ahead (0: the default)
  double device_share;    ///< ng_train_opts.device_share (hybrid-static)
  int ready_window;       ///< ng_train_opts.ready_window (0: the default)
  ng_precision precision; ///< ng_train_opts.precision (0: fp32)
  bool raw_features;      ///< no row normalisation (bf16: the table is features.bf16.npy)
} ng_test_fetch_run;

typedef struct {
  double loss[NG_TEST_FETCH_EPOCHS];
  ng_fetch_stats fetch; ///< summed over the epochs
  int64_t sampled_edges;
  int64_t hot_rows;    ///< ng_trainer_hot_rows
  int workers[2];      ///< the last epoch\'s split
  uint8_t *checkpoint; ///< the final checkpoint's bytes (free())
  size_t checkpoint_len;
} ng_test_fetch_result;

/// Trains two epochs of a 2-layer model (fanouts 10,5, batch 32, hidden 32, seed 7) on `ds`
/// (GAT: 4 concatenated heads of 8, then 2 averaged heads, attention dropout = dropout).
/// Returns false (after recording failures) when a call fails.
bool ng_test_fetch_train(ng_dataset_t ds, const ng_test_fetch_run *r, ng_test_fetch_result *out);
/// Whether a run is every worker PARTIAL beside a zero-copy view of the table (hybrid-static,
/// zcopy transfer, no TRANSFER worker), whose cold self rows the device reads.
bool ng_test_fetch_self_zcopy(const ng_test_fetch_run *r);
/// For such a run `run` with result `r`: the device read the cold self rows (and with a device
/// share the rows of its share of the cold edges; with a share of 1 all of them), the CPU the
/// rest, and together the bytes of `partial_ref`, a PARTIAL run whose CPU read every cold row.
void ng_test_fetch_expect_self_split(const ng_test_fetch_run *run, const ng_test_fetch_result *r,
                                     const ng_test_fetch_result *partial_ref);
/// Whether two results are bit-identical (losses and checkpoints), reporting the first difference.
bool ng_test_fetch_same(const ng_test_fetch_result *a, const ng_test_fetch_result *b,
                        const char *what);

struct ng_backend;
/// The deferred-loss queue and the step guard of backend `be` (backend_impl.h, xent): results
/// come back in order, a full queue is refused, and an unread non-finite loss holds every
/// optimizer step back until it is read. Uses only backend memory and copies, so it runs on
/// every backend.
void ng_test_xent_guard(struct ng_backend *be);

#endif /* NG_TEST_FETCH_H */
