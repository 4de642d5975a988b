/* The trainer's full-neighbour inference (runtime/infer.c): evaluation of a split, predictions
 * and embeddings, and the logits kept between them while the parameters do not change. */
#include "infer_impl.h"
#include "trainer_state_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static ng_status grow(ng_backend *be, growbuf *b, size_t bytes) {
  return ng__bk_reserve(be, &b->ptr, &b->cap, bytes);
}

/* Host memory that grows to the largest request (staging before a copy to the backend). */
static ng_status host_grow(growbuf *b, size_t bytes, const char *what) {
  return ng__host_reserve(&b->ptr, &b->cap, bytes, what);
}

/* Gathers rows `ids` of a host table into backend memory. A backend with its own memory gets
 * them gathered on the host and copied in one transfer (the synchronous path; the tiered
 * feature store's fetch strategies are the fast ones). */
static ng_status gather_inputs(ng_trainer_t t, const float *table, int64_t dim, const int64_t *ids,
                               int64_t n, growbuf *dst) {
  size_t bytes = (size_t)NG_MAX(n, 1) * (size_t)dim * sizeof(float);
  NG_CHECK(grow(t->be, dst, bytes));
  if (t->be->iface->host_memory)
    return t->be->iface->gather_rows(t->be, dst->ptr, table, ids, n, dim);
  NG_CHECK(host_grow(&t->stage, bytes, "the feature staging buffer"));
  float *s = t->stage.ptr;
#pragma omp parallel for schedule(static) num_threads(ng__trainer_threads(&t->opts)) if (n > 4096)
  for (int64_t i = 0; i < n; i++)
    memcpy(s + i * dim, table + ids[i] * dim, (size_t)dim * sizeof(float));
  return t->be->iface->copy_h2d(t->be, dst->ptr, s, (size_t)n * (size_t)dim * sizeof(float));
}

static ng_status gather_labels(ng_trainer_t t, const int64_t *ids, int64_t n) {
  size_t bytes = (size_t)NG_MAX(n, 1) * sizeof(int32_t);
  NG_CHECK(grow(t->be, &t->labels, bytes));
  bool direct = t->be->iface->host_memory;
  if (!direct)
    NG_CHECK(host_grow(&t->stage_labels, bytes, "the label staging buffer"));
  int32_t *lab = direct ? t->labels.ptr : t->stage_labels.ptr;
  for (int64_t i = 0; i < n; i++)
    lab[i] = t->ds->labels[ids[i]];
  if (direct)
    return NG_OK;
  return t->be->iface->copy_h2d(t->be, t->labels.ptr, lab, (size_t)n * sizeof(int32_t));
}

static size_t logits_bytes(ng_trainer_t t) {
  return (size_t)t->ds->info.nodes * (size_t)t->ds->info.classes * sizeof(float);
}

/* Forgets the inferred logits: the parameters are about to change. */
void ng__trainer_drop_logits(ng_trainer_t t) {
  if (t->logits)
    ng__big_free(t->logits, logits_bytes(t));
  t->logits = NULL;
  free(t->eval_logits);
  t->eval_logits = NULL;
}

/* The inference context of the trainer's model, features and hot tier (runtime/infer.c). */
static ng_infer_ctx infer_ctx(ng_trainer_t t, const ng_infer_opts *io) {
  return (ng_infer_ctx){
      .ex = &t->ex,
      .graph = &t->ds->csr,
      .features = t->features,
      .features_bf16 = t->bf16.rows,
      .store = t->store.parts > 0 ? &t->store_eval : &t->store,
      .threads = ng__trainer_threads(&t->opts),
      .adapt_threads = t->opts.threads == 0 && t->be->iface->host_memory,
      .chunk = io && io->chunk > 0 ? io->chunk : t->opts.eval_chunk,
      .host_bytes = io && io->host_bytes != 0       ? io->host_bytes
                    : t->opts.infer_host_bytes != 0 ? t->opts.infer_host_bytes
                                                    : NG_INFER_HOST_BYTES_DEFAULT,
      .temp_dir = io && io->temp_dir ? io->temp_dir : t->temp_dir,
      .device_bytes = io ? io->device_bytes : 0,
      .progress = io ? io->progress : t->opts.progress,
      .progress_ctx = io ? io->progress_ctx : t->opts.progress_ctx,
  };
}

/* Full-neighbour layer-wise inference of every node: the logits [nodes, classes] in t->logits,
 * computed once per parameter state. */
static ng_status infer_all(ng_trainer_t t) {
  if (t->logits)
    return NG_OK;
  float *logits = ng__big_alloc(logits_bytes(t), "the logits of every node");
  if (!logits)
    return NG_ERR_NOMEM;
  const ng_infer_ctx c = infer_ctx(t, NULL);
  ng_status st = ng__infer(logits, &c, t->model->n_layers - 1, NULL, t->ds->info.nodes, NULL);
  if (st != NG_OK) {
    ng__big_free(logits, logits_bytes(t));
    return st;
  }
  t->logits = logits;
  return NG_OK;
}

ng_status ng_trainer_embed_dim(int64_t *dim, ng_trainer_t t, int32_t layer) {
  NG_CHECK(ng__trainer_check(t));
  if (!dim)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_embed_dim: dim is NULL");
  const struct ng_model *m = t->model;
  if (layer < -1 || layer >= m->n_layers)
    return ng__err(NG_ERR_INVALID_ARG, "layer %d: the model has layers 0 to %d (-1: the last)",
                   (int)layer, m->n_layers - 1);
  *dim = m->layers[layer < 0 ? m->n_layers - 1 : layer].out_dim;
  return NG_OK;
}

ng_status ng_trainer_embed(float *out, ng_trainer_t t, const int64_t *nodes, int64_t n,
                           const ng_infer_opts *opts) {
  return ng__trainer_embed(out, t, nodes, n, opts, NULL, NULL);
}

ng_status ng__trainer_embed(float *out, ng_trainer_t t, const int64_t *nodes, int64_t n,
                            const ng_infer_opts *opts, void (*rows_done)(void *, int64_t, int64_t),
                            void *rows_done_ctx) {
  NG_CHECK(ng__trainer_check(t));
  ng_infer_opts io = NG_INFER_OPTS_INIT;
  if (opts) {
    if (opts->size < sizeof opts->size)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_infer_opts.size is %zu; initialise the options with NG_INFER_OPTS_INIT",
                     opts->size);
    memcpy(&io, opts, NG_MIN(opts->size, sizeof io));
    io.size = sizeof io;
  }
  int64_t dim = 0;
  NG_CHECK(ng_trainer_embed_dim(&dim, t, io.layer));
  if (!out && (nodes ? n : t->ds->info.nodes) > 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_embed: out is NULL");
  if (io.chunk < 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_infer_opts.chunk %lld is negative", (long long)io.chunk);
  const int layer = io.layer < 0 ? t->model->n_layers - 1 : io.layer;
  /* Workers going on with the next epoch sample and fetch on every core: inference waits for
   * no one, so they stop (the next epoch starts a pool again). */
  ng__pipeline_stop(t->rt);
  ng_infer_ctx c = infer_ctx(t, &io);
  c.rows_done = rows_done;
  c.rows_done_ctx = rows_done_ctx;
  if (io.report && io.report->size < sizeof io.report->size)
    return ng__err(NG_ERR_INVALID_ARG, "ng_infer_opts.report: initialise it with "
                                       "NG_INFER_REPORT_INIT");
  ng_infer_stats stats;
  const ng_status st =
      ng__infer(out, &c, layer, nodes, nodes ? n : t->ds->info.nodes, io.report ? &stats : NULL);
  if (st == NG_OK && io.report)
    ng__infer_report(io.report, &stats, layer + 1);
  return st;
}

/* The logits of the validation and the test split (t->eval_logits), by one inference over both
 * receptive fields. */
static ng_status infer_eval_splits(ng_trainer_t t) {
  const ng_dataset_info *info = &t->ds->info;
  const int64_t n = info->val + info->test;
  int64_t *ids = ng__malloc((size_t)NG_MAX(n, 1) * sizeof *ids, "the evaluation ids");
  float *logits = ng__malloc((size_t)NG_MAX(n, 1) * (size_t)info->classes * sizeof(float),
                             "the logits of the evaluation splits");
  ng_status st = ids && logits ? NG_OK : NG_ERR_NOMEM;
  if (st == NG_OK) {
    if (info->val)
      memcpy(ids, t->ds->split[NG_SPLIT_VAL], (size_t)info->val * sizeof *ids);
    if (info->test)
      memcpy(ids + info->val, t->ds->split[NG_SPLIT_TEST], (size_t)info->test * sizeof *ids);
    const ng_infer_ctx c = infer_ctx(t, NULL);
    st = ng__infer(logits, &c, t->model->n_layers - 1, ids, n, NULL);
  }
  free(ids);
  if (st != NG_OK) {
    free(logits);
    return st;
  }
  t->eval_logits = logits;
  return NG_OK;
}

ng_status ng_trainer_evaluate(double *accuracy, double *loss, ng_trainer_t t, ng_split split) {
  NG_CHECK(ng__trainer_check(t));
  if ((unsigned)split > NG_SPLIT_TEST)
    return ng__err(NG_ERR_INVALID_ARG, "unknown split %d", (int)split);
  const ng_dataset_info *info = &t->ds->info;
  int64_t n = split == NG_SPLIT_TRAIN ? info->train
              : split == NG_SPLIT_VAL ? info->val
                                      : info->test;
  if (n == 0)
    return ng__err(NG_ERR_INVALID_ARG, "dataset '%s' has an empty %s split", info->name,
                   split == NG_SPLIT_TRAIN ? "train"
                   : split == NG_SPLIT_VAL ? "val"
                                           : "test");
  const int64_t *ids = t->ds->split[split];
  ng_status st = NG_OK;
  if (t->logits) { /* every node's logits are there already (ng_trainer_predict) */
    st = gather_inputs(t, t->logits, info->classes, ids, n, &t->eval_out);
  } else {
    /* Only the split's receptive field (layer-wise, runtime/infer.c), into backend memory; the
     * validation and test splits together, kept until the parameters change. */
    const size_t bytes = (size_t)n * (size_t)info->classes * sizeof(float);
    const float *host = NULL;
    float *own = NULL;
    if (split == NG_SPLIT_TRAIN) {
      own = ng__malloc(NG_MAX(bytes, (size_t)1), "the logits of the training split");
      if (!own)
        return NG_ERR_NOMEM;
      const ng_infer_ctx c = infer_ctx(t, NULL);
      st = ng__infer(own, &c, t->model->n_layers - 1, ids, n, NULL);
      host = own;
    } else {
      if (!t->eval_logits)
        st = infer_eval_splits(t);
      host = t->eval_logits ? t->eval_logits +
                                  (split == NG_SPLIT_TEST ? info->val : 0) * (int64_t)info->classes
                            : NULL;
    }
    if (st == NG_OK)
      st = grow(t->be, &t->eval_out, bytes);
    if (st == NG_OK && t->be->iface->host_memory)
      memcpy(t->eval_out.ptr, host, bytes);
    else if (st == NG_OK)
      st = t->be->iface->copy_h2d(t->be, t->eval_out.ptr, host, bytes);
    free(own);
  }
  if (st == NG_OK)
    st = gather_labels(t, ids, n);
  double l = 0.0;
  int64_t correct = 0;
  if (st == NG_OK)
    st = t->be->iface->xent(t->be, t->eval_out.ptr, t->labels.ptr, n, info->classes, NULL, &l,
                            &correct);
  if (st != NG_OK)
    return st;
  if (accuracy)
    *accuracy = (double)correct / (double)n;
  if (loss)
    *loss = l;
  return NG_OK;
}

ng_status ng__trainer_logits(const float **out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng__trainer_logits: out is NULL");
  NG_CHECK(infer_all(t));
  *out = t->logits;
  return NG_OK;
}

ng_status ng_trainer_predict(int32_t *out, ng_trainer_t t) {
  NG_CHECK(ng__trainer_check(t));
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_predict: out is NULL");
  return ng_trainer_predict_nodes(NULL, out, t, NULL, t->ds->info.nodes);
}

ng_status ng_trainer_predict_nodes(float *logits, int32_t *classes, ng_trainer_t t,
                                   const int64_t *nodes, int64_t n) {
  NG_CHECK(ng__trainer_check(t));
  const int64_t all = t->ds->info.nodes, k = t->ds->info.classes;
  if (n < 0 || (!nodes && n != all) || (n > 0 && !logits && !classes))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_trainer_predict_nodes: %lld nodes %s; give node ids, or NULL and every "
                   "node (%lld), and logits or classes to fill",
                   (long long)n, nodes ? "given" : "without ids", (long long)all);
  for (int64_t i = 0; nodes && i < n; i++)
    if (nodes[i] < 0 || nodes[i] >= all)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_trainer_predict_nodes: nodes[%lld] = %lld is not a node id in [0, %lld)",
                     (long long)i, (long long)nodes[i], (long long)all);
  /* Every node, or logits already inferred: the shared table; else only the nodes' receptive
   * field (the same bits, docs/inference.md). */
  float *own = NULL;
  const float *table = NULL;
  if (!nodes || t->logits) {
    NG_CHECK(infer_all(t));
    table = t->logits;
  } else {
    if (!(own = ng__malloc((size_t)NG_MAX(n, 1) * (size_t)k * sizeof(float), "node logits")))
      return NG_ERR_NOMEM;
    ng_infer_opts io = NG_INFER_OPTS_INIT;
    const ng_status st = ng_trainer_embed(own, t, nodes, n, &io);
    if (st != NG_OK) {
      free(own);
      return st;
    }
  }
#pragma omp parallel for schedule(static) num_threads(ng__trainer_threads(&t->opts)) if (n > 65536)
  for (int64_t i = 0; i < n; i++) {
    const float *row = own ? own + i * k : table + (nodes ? nodes[i] : i) * k;
    if (logits)
      memcpy(logits + i * k, row, (size_t)k * sizeof(float));
    if (classes) {
      int32_t best = 0;
      for (int64_t c = 1; c < k; c++)
        if (row[c] > row[best])
          best = (int32_t)c;
      classes[i] = best;
    }
  }
  free(own);
  return NG_OK;
}
