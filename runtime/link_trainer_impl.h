/* The link trainer's state (runtime/link.c trains, runtime/link_eval.c evaluates and scores) and
 * what the two files share. */
#ifndef NG_LINK_TRAINER_IMPL_H
#define NG_LINK_TRAINER_IMPL_H

#include "link_impl.h"
#include "pipeline_impl.h"
#include "trainer_impl.h"

#include <math.h>

#define NG_LINK_MAGIC 0x6e676c6bu /* "nglk" */

/// A producer's buffers for the iterations it makes (runtime/link.c, make_targets), grown to the
/// largest: the pairs, their ends (the targets, sorted and unique) and the payload.
typedef struct {
  ng_link_pair *pairs; ///< [batch (1 + K)] positives then negatives
  int64_t *seeds;      ///< the unique endpoints
  void *payload;       ///< the pairs' target rows, copied into the package's slot
  size_t pairs_cap, seeds_cap, payload_cap;
} ng_link_producer;

struct ng_link_trainer {
  uint32_t magic;
  ng_dataset_t ds;   /* borrowed: the user's dataset */
  ng_dataset_t view; /* the message-passing graph with ds's features */
  int32_t *labels;   /* the view's labels when ds has none (all 0, never read by a loss) */
  ng_npy arr[NG_LINK_ARR_COUNT_];
  ng_link_split_info info;
  ng_link_opts lo;
  ng_train_opts opts;
  ng_trainer_t tr;
  ng_trainer_parts p;
  int64_t dim;     /* the embedding's columns */
  double *deg_cdf; /* NG_LINK_NEG_DEGREE: cumulative degree^0.75 of nodes [0, v] */
  int64_t epochs;
  int64_t epoch_iters; /* at most this many mini-batches per epoch; 0: all */
  /* Training runs in the node trainer's pipeline (runtime/link.c, ng_link_trainer_epoch): the
   * plan's targets hook makes each iteration's pairs on a producer, the train step's host loss
   * scores them on the device thread. */
  struct ng_pipeline *pl; /* borrowed from tr */
  ng_target_hook targets;
  ng_host_loss loss;
  ng_link_producer *prod; /* [n_prod]: each producer's own buffers */
  int n_prod;
  double *iter_ms; /* the epoch's iteration times (ng_epoch_tally) */
  size_t iter_ms_cap;
  float *scores; /* [pairs] the device thread's scores of an iteration's pairs */
  size_t scores_cap;
  /* The MLP decoder (host): W1 [dim, H], b1 [H], w2 [H], b2, with Adam state. */
  float *mlp, *mlp_g, *mlp_m, *mlp_v;
  int64_t mlp_n, mlp_steps;
};

/// NG_OK for a live trainer, else the error that says why not.
ng_status ng__link_check(ng_link_trainer_t t);

/// BCE with logits of score x and label y: max(x, 0) - x y + log(1 + e^-|x|), stable.
static inline double ng__link_bce(double x, int y) {
  const double m = x > 0 ? x : 0;
  return m - x * y + log1p(exp(-fabs(x)));
}

/// The trainer's decoder and its current weights, for the scoring shared with serving
/// (runtime/link_score.c).
static inline ng_link_dec ng__link_trainer_dec(const ng_link_trainer_t t) {
  return (ng_link_dec){.decoder = t->lo.decoder,
                       .dim = t->dim,
                       .hidden = t->lo.decoder == NG_LINK_DECODER_MLP ? t->lo.mlp_hidden : 0,
                       .mlp = t->mlp};
}

/// Scores of `n` pairs whose ends are rows u[i], v[i] of `h` [*, dim] into s[n].
static inline ng_status ng__link_score_rows(ng_link_trainer_t t, float *s, const float *h,
                                            const int32_t *u, const int32_t *v, int64_t n) {
  const ng_link_dec dec = ng__link_trainer_dec(t);
  return ng__link_score(&dec, s, h, u, v, n, t->p.threads);
}

#endif /* NG_LINK_TRAINER_IMPL_H */
