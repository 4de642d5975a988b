/* Training of relational models (R-GCN, R-SAGE) on heterogeneous datasets: the
 * ng_hetero_trainer_* API (docs/heterogeneous.md#training).
 *
 * A trainer of its own, beside the node trainer (runtime/trainer.c) rather than inside it: the
 * node trainer's feature store, tiering and pipeline are built around one feature table and one
 * block per layer, which a heterogeneous mini-batch does not have. What the two share is
 * reused: the CPU backend and its ops, the epoch shuffle and the iteration seeds
 * (cpu/sampler_impl.h), so a heterogeneous run has the node trainer's determinism: the bits
 * depend on the seed only, not on the thread count. Each mini-batch is sampled on the calling
 * thread by the per-relation sampler (cpu/sampler_hetero.c). */
#include "checkpoint_impl.h"
#include "hetero_impl.h"
#include "ng_cpu.h"
#include "rgcn_impl.h"
#include "sampler_hetero_impl.h"
#include "sampler_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define NG_HETERO_TRAINER_MAGIC 0x6e676874u /* "nght" */
/* The default fanout of every relation and hop (ng_hetero_train_opts.fanouts). */
#define DEFAULT_FANOUT 10

struct ng_hetero_trainer {
  uint32_t magic;
  ng_hetero_t ds;
  ng_hetero_train_opts o;
  ng_backend *be;
  ng_rgcn model;
  ng_rgcn_exec ex;
  const ng_csr **csr;     ///< [R]
  int32_t *rel_src;       ///< [R]
  int32_t *rel_dst;       ///< [R]
  int32_t *fanouts;       ///< [L * R] training
  int32_t *all;           ///< [L * R] evaluation: every neighbour
  const float **features; ///< [T] (NULL for a type without)
  const int32_t *labels;  ///< the target type's
  int64_t *order;         ///< [train] this epoch's shuffle
  int32_t *batch_labels;  ///< [max(batch_size, eval_batch)]
  float *host_params;     ///< ng_hetero_trainer_params's copy
  int64_t epoch, step;
};

static ng_status check_trainer(ng_hetero_trainer_t t) {
  if (!t || t->magic != NG_HETERO_TRAINER_MAGIC)
    return ng__err(NG_ERR_INVALID_ARG, "heterogeneous trainer: %s",
                   t ? "the handle is destroyed or not a trainer" : "the handle is NULL");
  return NG_OK;
}

void ng_hetero_trainer_destroy(ng_hetero_trainer_t t) {
  if (!t || t->magic != NG_HETERO_TRAINER_MAGIC)
    return;
  ng__rgcn_exec_destroy(&t->ex);
  ng__rgcn_free(&t->model);
  ng__backend_destroy(t->be);
  free(t->csr);
  free(t->rel_src);
  free(t->rel_dst);
  free(t->fanouts);
  free(t->all);
  free(t->features);
  free(t->order);
  free(t->batch_labels);
  free(t->host_params);
  t->magic = 0;
  free(t);
}

void ng_hetero_train_opts_init(ng_hetero_train_opts *out) {
  if (out)
    *out = (ng_hetero_train_opts)NG_HETERO_TRAIN_OPTS_INIT;
}

/* The options with their defaults filled in, checked against the dataset. */
static ng_status take_opts(ng_hetero_train_opts *o, const ng_hetero_train_opts *in,
                           const ng_hetero_info *info) {
  const ng_hetero_train_opts def = NG_HETERO_TRAIN_OPTS_INIT;
  *o = def;
  if (in) {
    /* An older caller's smaller struct keeps the defaults of the fields it does not know. */
    if (in->size < sizeof in->size)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_hetero_trainer_create: opts.size is %zu; initialise the options with "
                     "NG_HETERO_TRAIN_OPTS_INIT",
                     in->size);
    memcpy(o, in, NG_MIN(in->size, sizeof *o));
    o->size = sizeof *o;
  }
  if (o->layers < 1 || o->layers > NG_MAX_LAYERS || o->hidden < 1 || o->embed_dim < 0 ||
      o->batch_size < 1 || o->eval_batch < 1 || !(o->lr > 0.0f) || !(o->weight_decay >= 0.0f) ||
      o->threads < 0 || !(o->dropout >= 0.0f && o->dropout < 1.0f))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_hetero_trainer_create: layers %d (1 to %d), hidden %lld, embed_dim %lld, "
                   "batch_size %d, eval_batch %d, lr %g, weight_decay %g, threads %d, dropout "
                   "%g: an option out of range",
                   (int)o->layers, NG_MAX_LAYERS, (long long)o->hidden, (long long)o->embed_dim,
                   (int)o->batch_size, (int)o->eval_batch, (double)o->lr, (double)o->weight_decay,
                   (int)o->threads, (double)o->dropout);
  if (info->target < 0 || info->classes < 1 || info->train < 1)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_hetero_trainer_create: dataset '%s' has no labelled target type with a "
                   "training split; a relational model classifies the target type's nodes",
                   info->name);
  return NG_OK;
}

ng_status ng_hetero_trainer_create(ng_hetero_trainer_t *out, ng_hetero_t ds,
                                   const ng_hetero_train_opts *opts) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_create: out is NULL");
  *out = NULL;
  NG_CHECK(ng__hetero_check(ds));
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  NG_CHECK(ng_hetero_info_get(&info, ds));
  ng_hetero_train_opts o;
  NG_CHECK(take_opts(&o, opts, &info));
  const int32_t T = info.node_types, R = info.edge_types, L = o.layers;
  for (int32_t i = 0; o.rel_fanouts && i < L * R; i++)
    if (o.rel_fanouts[i] < -1)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_hetero_trainer_create: rel_fanouts[%d] = %d; -1 (all), 0 (none) or a "
                     "count",
                     (int)i, (int)o.rel_fanouts[i]);
  for (int32_t l = 0; !o.rel_fanouts && o.fanouts && l < L; l++)
    if (o.fanouts[l] < -1)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_hetero_trainer_create: fanouts[%d] = %d; -1 (all), 0 (none) or a count",
                     (int)l, (int)o.fanouts[l]);
  ng_hetero_trainer_t t = ng__calloc(1, sizeof *t, "the heterogeneous trainer");
  if (!t)
    return NG_ERR_NOMEM;
  t->magic = NG_HETERO_TRAINER_MAGIC;
  t->ds = ds;
  t->o = o;
  /* The borrowed arrays of the options are not kept past this call. */
  t->o.fanouts = t->o.rel_fanouts = NULL;
  ng_status st = NG_OK;
  const size_t lr = (size_t)L * (size_t)R;
  const size_t batch = (size_t)NG_MAX(o.batch_size, o.eval_batch);
  t->csr = ng__calloc((size_t)R, sizeof *t->csr, "the trainer's relations");
  t->rel_src = ng__calloc((size_t)R, sizeof *t->rel_src, "the trainer's relations");
  t->rel_dst = ng__calloc((size_t)R, sizeof *t->rel_dst, "the trainer's relations");
  t->fanouts = ng__calloc(lr, sizeof *t->fanouts, "the trainer's fanouts");
  t->all = ng__calloc(lr, sizeof *t->all, "the trainer's fanouts");
  t->features = ng__calloc((size_t)T, sizeof *t->features, "the trainer's types");
  t->order = ng__calloc((size_t)info.train, sizeof *t->order, "the training order");
  t->batch_labels = ng__calloc(batch, sizeof *t->batch_labels, "a mini-batch's labels");
  int64_t *count = ng__calloc((size_t)T, sizeof *count, "the trainer's types");
  int64_t *feat_dim = ng__calloc((size_t)T, sizeof *feat_dim, "the trainer's types");
  if (!t->csr || !t->rel_src || !t->rel_dst || !t->fanouts || !t->all || !t->features ||
      !t->order || !t->batch_labels || !count || !feat_dim) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int32_t r = 0; r < R; r++) {
    t->csr[r] = &ds->etypes[r].csr;
    t->rel_src[r] = ds->etypes[r].src;
    t->rel_dst[r] = ds->etypes[r].dst;
  }
  for (size_t i = 0; i < lr; i++) {
    const int32_t l = (int32_t)(i / (size_t)R);
    t->fanouts[i] = o.rel_fanouts ? o.rel_fanouts[i] : o.fanouts ? o.fanouts[l] : DEFAULT_FANOUT;
    t->all[i] = -1;
  }
  for (int32_t ty = 0; ty < T; ty++) {
    ng_node_type_info nt = NG_NODE_TYPE_INFO_INIT;
    NG_CHECK_GOTO(st, ng_hetero_node_type(&nt, ds, ty), done);
    NG_CHECK_GOTO(st, ng_hetero_features(&t->features[ty], ds, ty), done);
    count[ty] = nt.count;
    feat_dim[ty] = nt.feature_dim;
  }
  NG_CHECK_GOTO(st, ng_hetero_labels(&t->labels, ds), done);
  const ng_rgcn_spec spec = {
      .kind = o.model,
      .n_types = T,
      .n_rels = R,
      .n_layers = L,
      .target = info.target,
      .classes = info.classes,
      .count = count,
      .feat_dim = feat_dim,
      .rel_src = t->rel_src,
      .rel_dst = t->rel_dst,
      .hidden = o.hidden,
      .embed_dim = o.embed_dim,
      .bases = o.bases,
      .heads = o.heads,
  };
  NG_CHECK_GOTO(st, ng__rgcn_init(&t->model, &spec), done);
  NG_CHECK_GOTO(st, ng__backend_cpu_create(&t->be, o.threads), done);
  NG_CHECK_GOTO(st, ng__rgcn_exec_create(&t->ex, &t->model, t->be, o.seed), done);
done:
  free(count);
  free(feat_dim);
  if (st != NG_OK) {
    ng_hetero_trainer_destroy(t);
    return st;
  }
  *out = t;
  return NG_OK;
}

/* Samples, runs forward (and with `train` backward and a step) over the targets `ids` [n];
 * adds the mini-batch's mean loss times n and its correct count to *loss_sum, *correct. */
static ng_status run_batch(ng_hetero_trainer_t t, const int64_t *ids, int32_t n, bool train,
                           uint64_t seed, double *loss_sum, int64_t *correct) {
  const ng_rgcn *m = &t->model;
  const ng_hetero_sampler_cfg cfg = {
      .n_types = m->T,
      .n_rels = m->R,
      .n_layers = m->L,
      .target_type = m->target,
      .csr = t->csr,
      .rel_src = t->rel_src,
      .rel_dst = t->rel_dst,
      .fanouts = train ? t->fanouts : t->all,
  };
  ng_hetero_minibatch mb;
  NG_CHECK(ng__hetero_sample(&mb, &cfg, ids, n, seed));
  const ng_rgcn_batch b = {
      .n_nodes = mb.n_nodes,
      .node_ids = (const int64_t *const *)mb.node_ids,
      .blocks = mb.blocks,
  };
  for (int32_t i = 0; i < n; i++)
    t->batch_labels[i] = t->labels[ids[i]];
  double loss = 0.0;
  int64_t right = 0;
  ng_status st = ng__rgcn_forward(&t->ex, &b, t->features, train ? t->o.dropout : 0.0f,
                                  ng_hash2(seed, 0x64726f70 /* "drop" */), train);
  if (st == NG_OK)
    st = ng__rgcn_loss_backward(&t->ex, &b, t->batch_labels, train, &loss, &right);
  if (st == NG_OK && train) {
    const ng_opt_hp hp = {
        .kind = NG_OPT_ADAM,
        .lr = t->o.lr,
        .weight_decay = t->o.weight_decay,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .step = ++t->step,
    };
    st = ng__rgcn_step(&t->ex, &hp);
  }
  ng__hetero_minibatch_free(&mb);
  *loss_sum += loss * n;
  *correct += right;
  return st;
}

ng_status ng_hetero_trainer_epoch(double *loss, double *accuracy, ng_hetero_trainer_t t) {
  NG_CHECK(check_trainer(t));
  const int64_t *train = NULL;
  int64_t n = 0;
  NG_CHECK(ng_hetero_split(&train, &n, t->ds, NG_SPLIT_TRAIN));
  ng__epoch_shuffle(t->order, train, n, t->o.seed, t->epoch);
  double batches_loss = 0.0;
  int64_t correct = 0, iters = 0;
  for (int64_t at = 0; at < n; at += t->o.batch_size, iters++) {
    const int32_t cnt = (int32_t)NG_MIN((int64_t)t->o.batch_size, n - at);
    double one = 0.0;
    NG_CHECK(run_batch(t, t->order + at, cnt, true, ng__iter_seed(t->o.seed, t->epoch, iters), &one,
                       &correct));
    batches_loss += one / cnt;
  }
  t->epoch++;
  if (loss)
    *loss = iters ? batches_loss / (double)iters : 0.0;
  if (accuracy)
    *accuracy = n ? (double)correct / (double)n : 0.0;
  return NG_OK;
}

ng_status ng_hetero_trainer_evaluate(double *accuracy, double *loss, ng_hetero_trainer_t t,
                                     ng_split split) {
  NG_CHECK(check_trainer(t));
  if (split != NG_SPLIT_TRAIN && split != NG_SPLIT_VAL && split != NG_SPLIT_TEST)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_evaluate: split %d; 0, 1 or 2",
                   (int)split);
  const int64_t *ids = NULL;
  int64_t n = 0;
  NG_CHECK(ng_hetero_split(&ids, &n, t->ds, (int)split));
  if (n == 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_evaluate: split %d is empty", (int)split);
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t at = 0; at < n; at += t->o.eval_batch) {
    const int32_t cnt = (int32_t)NG_MIN((int64_t)t->o.eval_batch, n - at);
    /* Every neighbour is taken: the seed draws nothing. */
    NG_CHECK(run_batch(t, ids + at, cnt, false, 0, &loss_sum, &correct));
  }
  if (accuracy)
    *accuracy = (double)correct / (double)n;
  if (loss)
    *loss = loss_sum / (double)n;
  return NG_OK;
}

ng_status ng_hetero_trainer_params(const float **params, int64_t *n, ng_hetero_trainer_t t) {
  if (!params || !n)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_params: an output is NULL");
  *params = NULL;
  *n = 0;
  NG_CHECK(check_trainer(t));
  const int64_t count = t->model.n_params;
  if (!t->host_params) {
    t->host_params = ng__malloc((size_t)count * sizeof(float), "a copy of the parameters");
    if (!t->host_params)
      return NG_ERR_NOMEM;
  }
  NG_CHECK(
      t->be->iface->copy_d2h(t->be, t->host_params, t->ex.params, (size_t)count * sizeof(float)));
  *params = t->host_params;
  *n = count;
  return NG_OK;
}

/* ---- checkpoints and predictions (docs/heterogeneous.md#checkpoints) ---- */

/* CRC-32 of the dataset's schema: each type's name, count and width, each relation's names,
 * in order: a checkpoint's parameters fit a dataset of the same schema only. */
static uint32_t schema_crc(const struct ng_hetero *ds) {
  uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
  char line[256];
  for (int32_t i = 0; i < ds->info.node_types; i++) {
    const ng_hetero_ntype *nt = &ds->ntypes[i];
    const int len = snprintf(line, sizeof line, "%s:%lld:%lld;", nt->name, (long long)nt->count,
                             (long long)nt->feature_dim);
    crc = (uint32_t)crc32(crc, (const Bytef *)line, (uInt)len);
  }
  for (int32_t r = 0; r < ds->info.edge_types; r++) {
    const ng_hetero_etype *et = &ds->etypes[r];
    const int len = snprintf(line, sizeof line, "%s:%s:%s;", ds->ntypes[et->src].name, et->relation,
                             ds->ntypes[et->dst].name);
    crc = (uint32_t)crc32(crc, (const Bytef *)line, (uInt)len);
  }
  return crc;
}

static void describe(ng_ckpt_hetero *h, ng_hetero_trainer_t t) {
  memset(h, 0, sizeof *h);
  ng__strlcpy(h->model, ng_hetero_model_name(t->o.model), sizeof h->model);
  h->layers = t->o.layers;
  h->hidden = t->o.hidden;
  h->embed_dim = t->o.embed_dim;
  h->bases = t->o.bases;
  h->heads = t->o.model == NG_HETERO_MODEL_RGAT ? t->o.heads : 0;
  h->node_types = t->model.T;
  h->edge_types = t->model.R;
  h->target = t->model.target;
  h->classes = t->model.classes;
  h->schema = schema_crc(t->ds);
  ng__strlcpy(h->dataset, t->ds->info.name, sizeof h->dataset);
  h->epochs_done = t->epoch;
  h->step = t->step;
  h->seed = t->o.seed;
  h->n_params = t->model.n_params;
}

ng_status ng_hetero_trainer_save(ng_hetero_trainer_t t, const char *path) {
  NG_CHECK(check_trainer(t));
  ng_ckpt_hetero h;
  describe(&h, t);
  float *host = NULL;
  ng_status st =
      ng__ckpt_copy_out(&host, t->be, t->ex.params, t->ex.state1, t->ex.state2, h.n_params);
  if (st == NG_OK)
    st = ng__ckpt_write_hetero(path, &h, host);
  free(host);
  return st;
}

ng_status ng_hetero_trainer_load_weights(ng_hetero_trainer_t t, const char *path) {
  NG_CHECK(check_trainer(t));
  if (!path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_load_weights: path is NULL");
  ng_ckpt_hetero mine, theirs;
  describe(&mine, t);
  ng_st_file f;
  const float *params = NULL;
  ng_status st = ng__ckpt_read_hetero(&theirs, &params, &f, path);
  /* The first setting that differs, named as train-hetero's option. */
  const struct {
    const char *what;
    long long a, b;
  } same[] = {
      {"--layers (the --fanouts count)", (long long)theirs.layers, (long long)mine.layers},
      {"--hidden", (long long)theirs.hidden, (long long)mine.hidden},
      {"--embed-dim", (long long)theirs.embed_dim, (long long)mine.embed_dim},
      {"--bases", (long long)theirs.bases, (long long)mine.bases},
      {"--heads", (long long)theirs.heads, (long long)mine.heads},
      {"the node types", (long long)theirs.node_types, (long long)mine.node_types},
      {"the relations", (long long)theirs.edge_types, (long long)mine.edge_types},
      {"the target type", (long long)theirs.target, (long long)mine.target},
      {"the classes", (long long)theirs.classes, (long long)mine.classes},
      {"the dataset's schema (types' names, counts, widths; relations)", (long long)theirs.schema,
       (long long)mine.schema},
      {"the parameter count", (long long)theirs.n_params, (long long)mine.n_params},
  };
  if (st == NG_OK && strcmp(theirs.model, mine.model) != 0)
    st = ng__err(NG_ERR_INVALID_ARG, "%s: the checkpoint holds model %s, this trainer %s (--model)",
                 path, theirs.model, mine.model);
  for (size_t i = 0; st == NG_OK && i < NG_ARRAY_LEN(same); i++)
    if (same[i].a != same[i].b)
      st = ng__err(NG_ERR_INVALID_ARG,
                   "%s: the checkpoint's %s is %lld, this trainer's %lld; build the trainer as "
                   "the checkpoint was trained",
                   path, same[i].what, same[i].a, same[i].b);
  if (st == NG_OK) /* the next forward pass derives the basis weights from them */
    st = t->be->iface->copy_h2d(t->be, t->ex.params, params, (size_t)mine.n_params * sizeof(float));
  ng__st_close(&f);
  return st;
}

ng_status ng_hetero_trainer_predict(float *logits, ng_hetero_trainer_t t, const int64_t *ids,
                                    int64_t n) {
  NG_CHECK(check_trainer(t));
  if (!logits || (!ids && n > 0) || n < 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_predict: %s",
                   n < 0 ? "n is negative" : "logits or ids is NULL");
  const ng_rgcn *m = &t->model;
  const int64_t count = t->ds->ntypes[m->target].count;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= count)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_hetero_trainer_predict: ids[%lld] = %lld is not a node of the target "
                     "type '%s' (0 to %lld)",
                     (long long)i, (long long)ids[i], t->ds->ntypes[m->target].name,
                     (long long)count - 1);
  const ng_hetero_sampler_cfg cfg = {
      .n_types = m->T,
      .n_rels = m->R,
      .n_layers = m->L,
      .target_type = m->target,
      .csr = t->csr,
      .rel_src = t->rel_src,
      .rel_dst = t->rel_dst,
      .fanouts = t->all,
  };
  for (int64_t at = 0; at < n; at += t->o.eval_batch) {
    const int32_t cnt = (int32_t)NG_MIN((int64_t)t->o.eval_batch, n - at);
    ng_hetero_minibatch mb;
    /* Every neighbour is taken: the seed draws nothing. */
    NG_CHECK(ng__hetero_sample(&mb, &cfg, ids + at, cnt, 0));
    const ng_rgcn_batch b = {
        .n_nodes = mb.n_nodes,
        .node_ids = (const int64_t *const *)mb.node_ids,
        .blocks = mb.blocks,
    };
    ng_status st = ng__rgcn_forward(&t->ex, &b, t->features, 0.0f, 0, false);
    if (st == NG_OK)
      st = t->be->iface->copy_d2h(t->be, logits + at * m->classes, t->ex.logits,
                                  (size_t)cnt * (size_t)m->classes * sizeof(float));
    ng__hetero_minibatch_free(&mb);
    NG_CHECK(st);
  }
  return NG_OK;
}
