/* The device side of one training iteration; see train_step_impl.h. */
#include "train_step_impl.h"

#include <math.h>
#include <stdlib.h>

ng_status ng__train_step_prefetch(ng_train_step *ts, uint64_t seed, const ng_fetch_pkg *pkg,
                                  int slot) {
  const ng_layer *L0 = &ts->ex->model->layers[0];
  return ng__store_prefetch(ts->store, ng__model_input_aggr(ts->ex->model), pkg, L0->o.dropout,
                            ng__exec_input_drop_key(seed), slot);
}

/* The input layer (the feature store finishes the package) and the layers' forward ops, queued. */
static ng_status input_forward(ng_train_step *ts, uint64_t seed, const ng_fetch_pkg *pkg,
                               int slot) {
  const ng_layer *L0 = &ts->ex->model->layers[0];
  const float *agg0 = NULL, *self0 = NULL;
  NG_CHECK(ng__store_input(ts->store, ng__model_input_aggr(ts->ex->model), pkg, L0->o.dropout,
                           ng__exec_input_drop_key(seed), slot, &agg0, &self0));
  return ng__exec_forward(ts->ex, &pkg->mb, agg0, self0, true, seed);
}

/* The ops of a forward (the input layer, the layers, the loss), queued. */
static ng_status forward_ops(ng_train_step *ts, uint64_t seed, const ng_fetch_pkg *pkg, int slot) {
  ng_backend *be = ts->ex->be;
  NG_CHECK(input_forward(ts, seed, pkg, slot));
  const int64_t n = pkg->mb.n_targets, classes = ts->classes;
  NG_CHECK(ng__bk_reserve(be, &ts->d_logits, &ts->d_logits_cap,
                          (size_t)n * (size_t)classes * sizeof(float)));
  /* No host outputs: ng__train_step_result reads the loss later, while the device runs ahead. */
  const double cells = (double)n * (double)classes;
  NG_PROF_OP(
      ts->prof, "loss", -1, 4.0 * cells, 2.0 * sizeof(float) * cells,
      be->iface->xent(be, ts->ex->logits, pkg->labels, n, classes, ts->d_logits, NULL, NULL));
  return NG_OK;
}

/* The ops of a forward whose loss is on the host (ts->host_loss): the outputs come to the host
 * (a copy that waits for the forward's ops, hence for every op queued before them, the last
 * iteration's backward pass and step too), the hook forms the loss and its gradient, which goes
 * back into d_logits. Nothing on the device still reads d_logits then: the last backward pass
 * that did is done, since the copy of the outputs came after it on the same queue. The loss
 * joins host_q, which ng__train_step_result reads in order. */
static ng_status host_loss_ops(ng_train_step *ts, int64_t iter, uint64_t seed,
                               const ng_fetch_pkg *pkg, const void *payload, int slot) {
  ng_backend *be = ts->ex->be;
  const ng_host_loss *hl = ts->host_loss;
  if (ts->host_q_len >= NG_HOST_LOSS_QUEUE)
    return ng__err(NG_ERR_INTERNAL, "train step: %d host losses unread", ts->host_q_len);
  NG_CHECK(input_forward(ts, seed, pkg, slot));
  const int64_t n = pkg->mb.n_targets;
  const size_t bytes = NG_MAX((size_t)n * (size_t)hl->dim * sizeof(float), (size_t)64);
  NG_CHECK(ng__host_reserve((void **)&ts->h, &ts->h_cap, bytes, "the outputs on the host"));
  NG_CHECK(ng__host_reserve((void **)&ts->dh, &ts->dh_cap, bytes, "the outputs' gradient"));
  NG_CHECK(ng__bk_reserve(be, &ts->d_logits, &ts->d_logits_cap, bytes));
  NG_CHECK(
      be->iface->copy_d2h(be, ts->h, ts->ex->logits, (size_t)n * (size_t)hl->dim * sizeof(float)));
  double loss = 0.0;
  int64_t correct = 0;
  NG_CHECK(hl->loss(hl->ctx, iter, payload, ts->h, n, hl->dim, ts->dh, &loss, &correct));
  NG_CHECK(
      be->iface->copy_h2d(be, ts->d_logits, ts->dh, (size_t)n * (size_t)hl->dim * sizeof(float)));
  const int at = (ts->host_q_head + ts->host_q_len) % NG_HOST_LOSS_QUEUE;
  ts->host_q[at].loss = loss;
  ts->host_q[at].correct = correct;
  ts->host_q_len++;
  return NG_OK;
}

ng_status ng__train_step_forward(ng_train_step *ts, int64_t iter, uint64_t seed,
                                 const ng_fetch_pkg *pkg, const void *payload, int slot) {
  /* This trainer's first forward is never timed, wherever a resumed run starts: its buffers
   * grow and its GEMM graphs are captured. */
  const bool timed =
      ts->prof && ts->prof_every > 0 && iter % ts->prof_every == 0 && ts->forwards > 0;
  ts->forwards++;
  ts->prof_iter = timed ? iter : -1;
  if (timed)
    NG_CHECK(ng__prof_start(ts->prof));
  const ng_status st = ts->host_loss ? host_loss_ops(ts, iter, seed, pkg, payload, slot)
                                     : forward_ops(ts, seed, pkg, slot);
  /* The pipeline reads the loss of the iteration before between this forward and its backward
   * (nothing of that is timed), and after a failure nothing else may be. */
  ng__prof_pause(ts->prof);
  return st;
}

/* The ops of a backward pass and the optimizer step, queued. */
static ng_status backward_ops(ng_train_step *ts, int64_t iter, const ng_fetch_pkg *pkg) {
  NG_CHECK(ng__exec_backward(ts->ex, &pkg->mb, ts->d_logits));
  if (ts->reduce)
    NG_CHECK(ng__grad_reduce(ts->reduce, ts->ex->grads, ts->ex->model->n_params, pkg->mb.n_targets,
                             iter));
  ng_opt_hp hp = ts->hp;
  hp.step = ts->steps + 1;
  return ng__exec_step(ts->ex, &hp);
}

ng_status ng__train_step_backward(ng_train_step *ts, int64_t iter, const ng_fetch_pkg *pkg) {
  const bool timed = iter == ts->prof_iter;
  if (timed)
    ng__prof_resume(ts->prof);
  const ng_status st = backward_ops(ts, iter, pkg);
  if (timed && st == NG_OK)
    ng__prof_finish(ts->prof);
  ng__prof_pause(ts->prof);
  NG_CHECK(st);
  ts->steps++;
  ts->stepped_iter = iter;
  return NG_OK;
}

ng_status ng__train_step_result(ng_train_step *ts, int64_t iter, double *loss, int64_t *correct) {
  ng_backend *be = ts->ex->be;
  if (ts->host_loss) { /* known since its forward, finite (the hook fails on another) */
    if (ts->host_q_len == 0)
      return ng__err(NG_ERR_STATE, "train step: no host loss to read");
    *loss = ts->host_q[ts->host_q_head].loss;
    *correct = ts->host_q[ts->host_q_head].correct;
    ts->host_q_head = (ts->host_q_head + 1) % NG_HOST_LOSS_QUEUE;
    ts->host_q_len--;
    return NG_OK;
  }
  const ng_status st = be->iface->xent_result(be, loss, correct);
  if (st == NG_OK && isfinite(*loss))
    return NG_OK;
  /* A bad result (a label out of range, a non-finite loss): the step guard held this
   * iteration's step back, so it does not count. */
  if (ts->stepped_iter == iter && iter >= 0) {
    ts->steps--;
    ts->stepped_iter = -1;
  }
  if (st != NG_OK)
    return st;
  return ng__err(NG_ERR_STATE,
                 "the training loss is %g; the parameters are left as they were before this "
                 "iteration: lower the learning rate or normalise the features, and check that "
                 "no feature is NaN or infinite (neargnn info DIR --check-features reads every "
                 "value and names the first bad row; opening samples only some rows)",
                 *loss);
}

void ng__grad_share(const ng_grad_reduce *g, int64_t iter, int64_t *n_i, int64_t *n_local) {
  const int64_t b = iter * g->batch;
  *n_i = NG_MIN(g->batch, g->n_train - b);
  *n_local = *n_i * (g->rank + 1) / g->ranks - *n_i * g->rank / g->ranks;
}

double ng__grad_loss_weight(const ng_grad_reduce *g, int64_t iter) {
  if (!g || g->ranks <= 1)
    return 1.0;
  int64_t n_i, n_local;
  ng__grad_share(g, iter, &n_i, &n_local);
  return (double)n_local / (double)n_i;
}

ng_status ng__grad_reduce(ng_grad_reduce *g, float *grads, int64_t n_grads, int32_t n_local,
                          int64_t iter) {
  int64_t n_i, mine;
  ng__grad_share(g, iter, &n_i, &mine);
  if (mine != n_local)
    return ng__err(NG_ERR_STATE, "distributed: iteration %lld has %d targets on rank %d, not %lld",
                   (long long)iter, (int)n_local, g->rank, (long long)mine);
  /* The loss's gradient is the mean over the rank's targets: times n_local / n_i, summed over
   * the ranks, it is the mean over the global batch (exact when n_i / n_local is a power of
   * two, as with an even split over 2^k ranks). */
  const float scale = (float)((double)n_local / (double)n_i);
  if (g->device)
    return g->be->iface->allreduce(g->be, grads, n_grads, scale);
  const double t0 = ng__now();
  if (scale != 1.0f)
    for (int64_t i = 0; i < n_grads; i++)
      grads[i] *= scale;
  NG_CHECK(ng__comm_allreduce_f32(g->comm, grads, n_grads));
  g->wall_ms += (ng__now() - t0) * 1e3;
  g->count++;
  return NG_OK;
}

void ng__train_step_free(ng_train_step *ts) {
  if (ts->d_logits)
    ts->ex->be->iface->free(ts->ex->be, ts->d_logits);
  ts->d_logits = NULL;
  ts->d_logits_cap = 0;
  free(ts->h);
  free(ts->dh);
  ts->h = ts->dh = NULL;
  ts->h_cap = ts->dh_cap = 0;
  ts->host_q_head = ts->host_q_len = 0;
}
