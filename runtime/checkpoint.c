/* Self-describing checkpoints: the model's settings, the feature normalisation and the
 * dataset's fingerprint in a checkpoint's safetensors metadata (written by ng_trainer_save,
 * checked by ng_trainer_load, read back by ng_model_from_checkpoint). docs/training.md lists
 * the keys. */
#include "checkpoint_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KIND_NAME[] = {"sage", "gcn", "gat", "gin", "sage-pool"};
static const char *const NORMALIZE_NAME[] = {"none", "row"};
static const char *const REDUCE_NAME[] = {"sum", "max", "min"};
static const char *const WEIGHT_NAME[] = {"none", "gcn_norm"};
static const char *const FINALIZE_NAME[] = {"none", "mean"};
static const char *const COMBINE_NAME[] = {"sum", "concat"};
static const char *const ACT_NAME[] = {"none", "relu"};

#define NAME_OF(table, v) ((unsigned)(v) < NG_ARRAY_LEN(table) ? (table)[(unsigned)(v)] : "?")

static int index_of(const char *const *table, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(table[i], name) == 0)
      return (int)i;
  return -1;
}
#define INDEX_OF(table, name) index_of(table, NG_ARRAY_LEN(table), name)

static void put(ng_st_meta *m, const char *key, const char *fmt, ...) NG_PRINTF(3, 4);
static void put(ng_st_meta *m, const char *key, const char *fmt, ...) {
  ng__strlcpy(m->key, key, sizeof m->key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->value, sizeof m->value, fmt, ap);
  va_end(ap);
}

int ng__ckpt_describe(ng_st_meta *meta, int cap, const struct ng_model *m, ng_normalize normalize,
                      const ng_dataset_info *info) {
  if (cap < NG_CKPT_DESC_MAX)
    return 0;
  int n = 0;
  put(&meta[n++], "model.kind", "%s", NAME_OF(KIND_NAME, m->kind));
  put(&meta[n++], "model.in_dim", "%lld", (long long)m->in_dim);
  put(&meta[n++], "model.layers", "%d", m->n_layers);
  for (int l = 0; l < m->n_layers; l++) {
    const ng_layer_opts *o = &m->layers[l].o;
    char key[32];
    snprintf(key, sizeof key, "model.layer%d", l);
    put(&meta[n++], key,
        "out_dim=%lld fanout=%d aggregator=%s reduce=%s edge_weight=%s finalize=%s self_loop=%d "
        "combine=%s activation=%s bias=%d dropout=%.9g weight_decay=%.9g heads=%d "
        "attn_dropout=%.9g",
        (long long)o->out_dim, (int)o->fanout, ng_aggregator_name(o->aggregator),
        NAME_OF(REDUCE_NAME, o->aggregator.reduce), NAME_OF(WEIGHT_NAME, o->aggregator.edge_weight),
        NAME_OF(FINALIZE_NAME, o->aggregator.finalize), o->aggregator.self_loop != 0,
        NAME_OF(COMBINE_NAME, o->combine), NAME_OF(ACT_NAME, o->activation), o->bias != 0,
        (double)o->dropout, (double)o->weight_decay, (int)o->heads, (double)o->attn_dropout);
  }
  put(&meta[n++], "train.normalize", "%s", NAME_OF(NORMALIZE_NAME, normalize));
  put(&meta[n++], "dataset.name", "%s", info->name);
  put(&meta[n++], "dataset.nodes", "%lld", (long long)info->nodes);
  put(&meta[n++], "dataset.feature_dim", "%lld", (long long)info->feature_dim);
  put(&meta[n++], "dataset.classes", "%d", (int)info->classes);
  return n;
}

/* ---- reading the description ---- */

static ng_status bad_meta(const char *path, const char *key, const char *value) {
  return ng__err(NG_ERR_FORMAT,
                 "%s: checkpoint metadata '%s' is %s%s%s; the file was edited or "
                 "is damaged",
                 path, key, value ? "'" : "missing", value ? value : "", value ? "'" : "");
}

static ng_status meta_i64(int64_t *out, const ng_st_file *f, const char *key, const char *path,
                          int64_t lo, int64_t hi) {
  const char *v = ng__st_meta(f, key);
  char *end = NULL;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || end == v || *end || errno || x < lo || x > hi)
    return bad_meta(path, key, v);
  *out = x;
  return NG_OK;
}

/* One "name=value" field of a layer's description. */
static bool field(char *out, size_t cap, const char *desc, const char *name) {
  size_t len = strlen(name);
  for (const char *p = desc; p && *p;) {
    while (*p == ' ')
      p++;
    if (strncmp(p, name, len) == 0 && p[len] == '=') {
      p += len + 1;
      size_t n = strcspn(p, " ");
      if (n >= cap)
        return false;
      memcpy(out, p, n);
      out[n] = '\0';
      return true;
    }
    p = strchr(p, ' ');
  }
  return false;
}

/* Parses a layer's description into `o`. */
static ng_status parse_layer(ng_layer_opts *o, const char *desc, const char *key,
                             const char *path) {
  char v[64];
  char *end;
  int idx;
  *o = (ng_layer_opts)NG_LAYER_OPTS_INIT;
#define NUM(name, dst, conv)                                                                       \
  do {                                                                                             \
    if (!field(v, sizeof v, desc, name))                                                           \
      return bad_meta(path, key, desc);                                                            \
    errno = 0;                                                                                     \
    dst = conv;                                                                                    \
    if (*end || end == v || errno)                                                                 \
      return bad_meta(path, key, desc);                                                            \
  } while (0)
#define ENUM(name, table, dst, type)                                                               \
  do {                                                                                             \
    if (!field(v, sizeof v, desc, name) || (idx = INDEX_OF(table, v)) < 0)                         \
      return bad_meta(path, key, desc);                                                            \
    dst = (type)idx;                                                                               \
  } while (0)
  NUM("out_dim", o->out_dim, strtoll(v, &end, 10));
  NUM("fanout", o->fanout, (int32_t)strtol(v, &end, 10));
  ENUM("reduce", REDUCE_NAME, o->aggregator.reduce, ng_reduce);
  ENUM("edge_weight", WEIGHT_NAME, o->aggregator.edge_weight, ng_edge_weight);
  ENUM("finalize", FINALIZE_NAME, o->aggregator.finalize, ng_finalize);
  NUM("self_loop", o->aggregator.self_loop, (int32_t)strtol(v, &end, 10));
  ENUM("combine", COMBINE_NAME, o->combine, ng_sage_combine);
  ENUM("activation", ACT_NAME, o->activation, ng_activation);
  NUM("bias", o->bias, (int32_t)strtol(v, &end, 10));
  NUM("dropout", o->dropout, strtof(v, &end));
  NUM("weight_decay", o->weight_decay, strtof(v, &end));
  /* Written since GAT; older checkpoints lack them and keep the defaults. */
  if (field(v, sizeof v, desc, "heads"))
    NUM("heads", o->heads, (int32_t)strtol(v, &end, 10));
  if (field(v, sizeof v, desc, "attn_dropout"))
    NUM("attn_dropout", o->attn_dropout, strtof(v, &end));
#undef NUM
#undef ENUM
  return NG_OK;
}

/* The whole description; *described = false (and nothing else) for checkpoints without one. */
typedef struct {
  bool described;
  ng_model_kind kind;
  int64_t in_dim;
  int layers;
  ng_layer_opts layer[NG_MAX_LAYERS];
  ng_normalize normalize;
  char dataset[64];
  int64_t nodes, feature_dim, classes;
  char aggregator[NG_MAX_LAYERS][64]; /* each layer's aggregator name ("" when unrecorded) */
} ckpt_desc;

/* Whether `name` is a built-in aggregator's (or "custom", a combination of built-in parts), not
 * a user aggregator's, whose functions only the program that defined it has. */
static bool builtin_aggregator(const char *name) {
  static const char *const NAMES[] = {"", "mean", "sum", "max", "min", "gcn", "custom"};
  for (size_t i = 0; i < NG_ARRAY_LEN(NAMES); i++)
    if (strcmp(name, NAMES[i]) == 0)
      return true;
  return false;
}

static ng_status read_desc(ckpt_desc *d, const ng_st_file *f, const char *path) {
  memset(d, 0, sizeof *d);
  const char *kind = ng__st_meta(f, "model.kind");
  if (!kind)
    return NG_OK;
  d->described = true;
  int idx = INDEX_OF(KIND_NAME, kind);
  if (idx < 0)
    return bad_meta(path, "model.kind", kind);
  d->kind = (ng_model_kind)idx;
  int64_t layers = 0;
  NG_CHECK(meta_i64(&d->in_dim, f, "model.in_dim", path, 1, INT64_MAX));
  NG_CHECK(meta_i64(&layers, f, "model.layers", path, 1, NG_MAX_LAYERS));
  d->layers = (int)layers;
  for (int l = 0; l < d->layers; l++) {
    char key[32];
    snprintf(key, sizeof key, "model.layer%d", l);
    const char *desc = ng__st_meta(f, key);
    if (!desc)
      return bad_meta(path, key, NULL);
    NG_CHECK(parse_layer(&d->layer[l], desc, key, path));
    if (!field(d->aggregator[l], sizeof d->aggregator[l], desc, "aggregator"))
      d->aggregator[l][0] = '\0';
  }
  const char *norm = ng__st_meta(f, "train.normalize");
  if (!norm || (idx = INDEX_OF(NORMALIZE_NAME, norm)) < 0)
    return bad_meta(path, "train.normalize", norm);
  d->normalize = (ng_normalize)idx;
  const char *name = ng__st_meta(f, "dataset.name");
  if (!name)
    return bad_meta(path, "dataset.name", NULL);
  ng__strlcpy(d->dataset, name, sizeof d->dataset);
  NG_CHECK(meta_i64(&d->nodes, f, "dataset.nodes", path, 0, INT64_MAX));
  NG_CHECK(meta_i64(&d->feature_dim, f, "dataset.feature_dim", path, 0, INT64_MAX));
  NG_CHECK(meta_i64(&d->classes, f, "dataset.classes", path, 0, INT32_MAX));
  return NG_OK;
}

/* "25,10": the fanouts of a model as the command's --fanouts lists them, hops from the
 * targets outwards (the last layer's first). */
static void fanouts_text(char *buf, size_t cap, const ng_layer_opts *layer, int layers) {
  size_t at = 0;
  buf[0] = '\0';
  for (int l = layers - 1; l >= 0 && at < cap; l--)
    at += (size_t)snprintf(buf + at, cap - at, "%s%d", l == layers - 1 ? "" : ",",
                           (int)layer[l].fanout);
}

#define MISMATCH(setting, fmt_ckpt, fmt_this, ...)                                                 \
  ng__err(NG_ERR_FORMAT,                                                                           \
          "%s: the checkpoint was trained with " setting " " fmt_ckpt ", this run uses " fmt_this  \
          "; use the checkpoint's setting (or train a new model)",                                 \
          path, __VA_ARGS__)

ng_status ng__ckpt_check(const ng_st_file *f, const char *path, const struct ng_model *m,
                         ng_normalize normalize, const ng_dataset_info *info, bool weights_only) {
  ckpt_desc d;
  NG_CHECK(read_desc(&d, f, path));
  if (!d.described)
    return NG_OK; /* older checkpoints: only the tensors' names and shapes are checked */
  if (d.kind != m->kind)
    return MISMATCH("--model", "%s", "%s", NAME_OF(KIND_NAME, d.kind), NAME_OF(KIND_NAME, m->kind));
  if (d.in_dim != m->in_dim || d.feature_dim != info->feature_dim)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained on %lld feature columns (dataset '%s'), this "
                   "dataset '%s' has %lld",
                   path, (long long)d.in_dim, d.dataset, info->name, (long long)info->feature_dim);
  if (d.classes != info->classes)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained on %lld classes (dataset '%s'), this dataset "
                   "'%s' has %d",
                   path, (long long)d.classes, d.dataset, info->name, (int)info->classes);
  if (d.layers != m->n_layers)
    return MISMATCH("layers", "%d", "%d", d.layers, m->n_layers);
  for (int l = 0; l < d.layers; l++) {
    const ng_layer_opts *c = &d.layer[l], *o = &m->layers[l].o;
    /* GAT's hidden width is --heads x --hidden: name both with the heads. */
    if (m->kind == NG_MODEL_GAT && l + 1 == d.layers && c->heads != o->heads)
      return MISMATCH("--output-heads", "%d", "%d", (int)c->heads, (int)o->heads);
    if (m->kind == NG_MODEL_GAT && l + 1 < d.layers &&
        (c->heads != o->heads || c->out_dim != o->out_dim))
      return MISMATCH("--heads x --hidden", "%d x %lld (layer %d)", "%d x %lld", (int)c->heads,
                      (long long)(c->out_dim / NG_MAX(c->heads, 1)), l, (int)o->heads,
                      (long long)(o->out_dim / NG_MAX(o->heads, 1)));
    if (l + 1 < d.layers && c->out_dim != o->out_dim)
      return MISMATCH("--hidden", "%lld (layer %d)", "%lld", (long long)c->out_dim, l,
                      (long long)o->out_dim);
    const char *ca = ng_aggregator_name(c->aggregator), *oa = ng_aggregator_name(o->aggregator);
    if ((o->aggregator.user || !builtin_aggregator(d.aggregator[l])) &&
        strcmp(d.aggregator[l], oa) != 0)
      return MISMATCH("--aggregator", "%s (layer %d)", "%s", d.aggregator[l], l, oa);
    if (c->aggregator.reduce != o->aggregator.reduce ||
        c->aggregator.edge_weight != o->aggregator.edge_weight ||
        c->aggregator.finalize != o->aggregator.finalize ||
        (c->aggregator.self_loop != 0) != (o->aggregator.self_loop != 0))
      return MISMATCH("--aggregator", "%s (layer %d)", "%s", ca, l, oa);
    if (m->kind == NG_MODEL_GAT && c->combine != o->combine)
      return MISMATCH("head combine", "%s (layer %d)", "%s",
                      c->combine == NG_HEADS_CONCAT ? "concat" : "mean", l,
                      o->combine == NG_HEADS_CONCAT ? "concat" : "mean");
    if (m->kind == NG_MODEL_SAGE && c->combine != o->combine)
      return MISMATCH("--combine", "%s (layer %d)", "%s", NAME_OF(COMBINE_NAME, c->combine), l,
                      NAME_OF(COMBINE_NAME, o->combine));
    if (c->activation != o->activation)
      return MISMATCH("activation", "%s (layer %d)", "%s", NAME_OF(ACT_NAME, c->activation), l,
                      NAME_OF(ACT_NAME, o->activation));
    if ((c->bias != 0) != (o->bias != 0))
      return MISMATCH("bias", "%s (layer %d)", "%s", c->bias ? "on" : "off", l,
                      o->bias ? "on" : "off");
  }
  if (d.normalize != normalize)
    return MISMATCH("--normalize-features", "%s", "%s", NAME_OF(NORMALIZE_NAME, d.normalize),
                    NAME_OF(NORMALIZE_NAME, normalize));
  if (weights_only)
    return NG_OK; /* inference: fanouts do not matter, and another graph is allowed */
  for (int l = 0; l < d.layers; l++)
    if (d.layer[l].fanout != m->layers[l].o.fanout) {
      char a[96], b[96];
      ng_layer_opts mine[NG_MAX_LAYERS];
      for (int k = 0; k < m->n_layers; k++)
        mine[k] = m->layers[k].o;
      fanouts_text(a, sizeof a, d.layer, d.layers);
      fanouts_text(b, sizeof b, mine, m->n_layers);
      return MISMATCH("--fanouts", "%s", "%s (hops from the targets outwards)", a, b);
    }
  if (strcmp(d.dataset, info->name) != 0 || d.nodes != info->nodes)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained on dataset '%s' (%lld nodes), this run uses "
                   "'%s' (%lld nodes); resume on the same dataset (predict and evaluate accept "
                   "another one)",
                   path, d.dataset, (long long)d.nodes, info->name, (long long)info->nodes);
  return NG_OK;
}

ng_status ng_model_from_checkpoint(ng_model_t *out, const char *path) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_from_checkpoint: out is NULL");
  *out = NULL;
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_from_checkpoint: no path");
  ng_st_file f;
  NG_CHECK(ng__st_open(&f, path));
  ckpt_desc d;
  ng_status st = read_desc(&d, &f, path);
  ng__st_close(&f);
  if (st != NG_OK)
    return st;
  if (!d.described)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint does not record its model's settings (written by neargnn "
                   "before 0.1 recorded them); give the model's options, or re-save it with "
                   "`neargnn train --resume %s --checkpoint NEW` and the options it was trained "
                   "with",
                   path, path);
  for (int l = 0; l < d.layers; l++)
    if (!builtin_aggregator(d.aggregator[l]))
      return ng__err(NG_ERR_UNSUPPORTED,
                     "%s: layer %d uses the user aggregator \"%s\", whose functions only the "
                     "program that defined it has; build the model there (ng_aggregator_define) "
                     "and load the checkpoint into its trainer",
                     path, l, d.aggregator[l]);
  ng_model_t m = NULL;
  NG_CHECK(ng_model_create(&m, d.kind, d.in_dim));
  for (int l = 0; l < d.layers && st == NG_OK; l++)
    st = ng_model_add_layer(m, &d.layer[l]);
  if (st != NG_OK) {
    ng__err_prefix("%s: the model the checkpoint describes", path);
    ng_model_destroy(m);
    return st;
  }
  *out = m;
  return NG_OK;
}

ng_status ng_checkpoint_info_get(ng_checkpoint_info *out, const char *path) {
  if (!out || out->size < sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_checkpoint_info_get: out missing or from an older header "
                   "(NG_CHECKPOINT_INFO_INIT)");
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_checkpoint_info_get: no path");
  ng_st_file f;
  NG_CHECK(ng__st_open(&f, path));
  ng_checkpoint_info r = NG_CHECKPOINT_INFO_INIT;
  ckpt_desc d;
  int64_t epochs = 0, batch = 0, opt = 0;
  const char *fmt = ng__st_meta(&f, "format"), *seed = ng__st_meta(&f, "seed");
  ng_status st = NG_OK;
  if (!fmt || strcmp(fmt, NG_CHECKPOINT_FORMAT) != 0)
    st = ng__err(NG_ERR_FORMAT, "%s: not a neargnn checkpoint (metadata format is '%s')", path,
                 fmt ? fmt : "missing");
  if (st == NG_OK)
    st = read_desc(&d, &f, path);
  if (st == NG_OK)
    st = meta_i64(&epochs, &f, "epochs_done", path, 0, INT64_MAX);
  if (st == NG_OK)
    st = meta_i64(&batch, &f, "batch", path, 0, INT64_MAX);
  if (st == NG_OK)
    st = meta_i64(&opt, &f, "optimizer", path, 0, NG_OPTIMIZER_SGD);
  if (st == NG_OK && !seed)
    st = bad_meta(path, "seed", NULL);
  if (st == NG_OK) {
    r.described = d.described;
    r.kind = d.kind;
    r.layers = d.layers;
    r.normalize = d.normalize;
    ng__strlcpy(r.dataset, d.dataset, sizeof r.dataset);
    r.nodes = d.nodes;
    r.feature_dim = d.feature_dim;
    r.classes = (int32_t)d.classes;
    r.epochs_done = epochs;
    r.seed = strtoull(seed, NULL, 10);
    r.batch = batch;
    r.optimizer = (ng_optimizer)opt;
    *out = r;
  }
  ng__st_close(&f);
  return st;
}
