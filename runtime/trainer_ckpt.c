/* The trainer's checkpoints (runtime/checkpoint.c's codec): save, load to resume, load weights. */
#include "checkpoint_impl.h"
#include "trainer_state_impl.h"

#include <stdlib.h>

/* Iterations of an epoch trained with `batch` (0: full batch). */
static int64_t epoch_iters(int64_t n_train, int64_t batch) {
  int64_t b = batch ? NG_MIN(batch, n_train) : n_train;
  return b > 0 ? (n_train + b - 1) / b : 0;
}

ng_status ng__trainer_copy_out(float **out, ng_trainer_t t) {
  return ng__ckpt_copy_out(out, t->be, t->ex.params, t->ex.state1, t->ex.state2,
                           t->model->n_params);
}

ng_status ng_trainer_save(ng_trainer_t t, const char *path) {
  NG_CHECK(ng__trainer_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_save: no path");
  const struct ng_model *m = t->model;
  float *host = NULL;
  ng_status st = ng__trainer_copy_out(&host, t);
  const ng_ckpt_run run = {
      .epochs_done = t->epochs_done,
      .step = t->step.steps,
      .iteration = t->iter_done,
      .batch = t->opts.batch,
      .base_epochs = t->base_epochs,
      .base_step = t->base_step,
      .optimizer = t->opts.optimizer,
      .seed = t->opts.seed,
  };
  if (st == NG_OK)
    st = ng__ckpt_write(path, m, host, t->opts.normalize, &t->ds->info, &run);
  free(host);
  return st;
}

/* What resuming needs beyond the model: the same seed and optimizer, the same batch in the
 * middle of an epoch, and counters that agree with each other and with this dataset's
 * iterations per epoch. */
static ng_status check_resume(const ng_trainer_t t, const ng_ckpt_run *r, const char *path) {
  /* Every later epoch's order, samples and dropout derive from the seed: another one would
   * continue a different run than the one the checkpoint holds. */
  if (r->seed != t->opts.seed)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained with seed %llu but this trainer has seed %llu; "
                   "resume with --seed %llu",
                   path, (unsigned long long)r->seed, (unsigned long long)t->opts.seed,
                   (unsigned long long)r->seed);
  if (r->optimizer != t->opts.optimizer)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained with --optimizer %s, this run uses %s; resume "
                   "with the checkpoint's optimizer (its state is the optimizer's own)",
                   path, ng_optimizer_name(r->optimizer), ng_optimizer_name(t->opts.optimizer));
  const int64_t n_train = t->ds->info.train, iters = epoch_iters(n_train, r->batch);
  /* The rest of an epoch replays the epoch's order and samples: they depend on the batch. */
  if (r->iteration > 0 && r->batch != t->opts.batch)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint stops after iteration %lld of an epoch trained with batch "
                   "%lld; resume it with the same batch (this trainer has %lld)",
                   path, (long long)r->iteration, (long long)r->batch, (long long)t->opts.batch);
  /* The counters must agree with each other: an edited or damaged epochs_done would otherwise
   * skip epochs or report epochs that were never trained. */
  if (r->iteration >= iters)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata iteration %lld is out of range: an epoch of %lld "
                   "training nodes in batches of %lld has %lld iterations",
                   path, (long long)r->iteration, (long long)n_train, (long long)r->batch,
                   (long long)iters);
  long long want = 0;
  bool agree;
  if (r->has_base)
    agree = r->base_epochs <= r->epochs_done &&
            !__builtin_mul_overflow(r->epochs_done - r->base_epochs, iters, &want) &&
            !__builtin_add_overflow(want, r->base_step + r->iteration, &want) && want == r->step;
  else /* older checkpoints: each epoch had at least one iteration */
    agree = r->epochs_done + r->iteration <= r->step;
  if (!agree && r->has_base)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: epochs_done %lld and iteration %lld with "
                   "%lld iterations per epoch from epoch %lld (step %lld) make step %lld, but "
                   "the file says step %lld; the file was edited or is damaged",
                   path, (long long)r->epochs_done, (long long)r->iteration, (long long)iters,
                   (long long)r->base_epochs, (long long)r->base_step, want, (long long)r->step);
  if (!agree)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: epochs_done %lld and iteration %lld need "
                   "at least %lld optimizer steps, but the file says step %lld; the file was "
                   "edited or is damaged",
                   path, (long long)r->epochs_done, (long long)r->iteration,
                   (long long)(r->epochs_done + r->iteration), (long long)r->step);
  return NG_OK;
}

/* ng_trainer_load, or with `weights_only` ng_trainer_load_weights: the parameters alone, without
 * the checks and state that only resuming training needs. */
static ng_status load_impl(ng_trainer_t t, const char *path, bool weights_only) {
  NG_CHECK(ng__trainer_check(t));
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_load: no path");
  ng__trainer_drop_logits(t); /* even a failed load may have replaced some parameters */
  const struct ng_model *m = t->model;
  const size_t bytes = (size_t)m->n_params * sizeof(float);
  ng_ckpt c;
  NG_CHECK(ng__ckpt_read(&c, path));
  const ng_ckpt_run *r = &c.run;
  float *host = NULL;
  ng_status st;
  NG_CHECK_GOTO(st, ng__ckpt_verify(&c, path, m, t->opts.normalize, &t->ds->info, weights_only),
                done);
  if (!weights_only)
    NG_CHECK_GOTO(st, check_resume(t, r, path), done);
  host = ng__malloc(3 * bytes, "a checkpoint");
  if (!host) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  NG_CHECK_GOTO(st, ng__ckpt_tensors(host, &c, path, m, !weights_only), done);
  st = t->be->iface->copy_h2d(t->be, t->ex.params, host, bytes);
  if (st == NG_OK && !weights_only)
    st = t->be->iface->copy_h2d(t->be, t->ex.state1, host + m->n_params, bytes);
  if (st == NG_OK && !weights_only)
    st = t->be->iface->copy_h2d(t->be, t->ex.state2, host + 2 * m->n_params, bytes);
  if (st == NG_OK && !weights_only) {
    const int64_t iters = epoch_iters(t->ds->info.train, r->batch);
    t->epochs_done = r->epochs_done;
    t->step.steps = r->step;
    t->iter_done = r->iteration;
    /* The same iterations per epoch continue the file's base; another batch starts one. */
    bool same = epoch_iters(t->ds->info.train, t->opts.batch) == iters;
    if (same && r->has_base) {
      t->base_epochs = r->base_epochs;
      t->base_step = r->base_step;
    } else if (same && r->step == r->epochs_done * iters + r->iteration) {
      t->base_epochs = t->base_step = 0;
    } else {
      t->base_epochs = r->epochs_done;
      t->base_step = r->step - r->iteration;
    }
  }
done:
  free(host);
  ng__ckpt_close(&c);
  return st;
}

ng_status ng_trainer_load(ng_trainer_t t, const char *path) {
  return load_impl(t, path, false);
}

ng_status ng_trainer_load_weights(ng_trainer_t t, const char *path) {
  return load_impl(t, path, true);
}
