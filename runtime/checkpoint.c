/* The checkpoint codec: one writer and one strict reader of neargnn checkpoints (safetensors
 * files whose metadata records the run's counters, the model's settings, the feature
 * normalisation and the dataset's fingerprint). Every reader of the library goes through
 * ng__ckpt_read, so a damaged or edited file is refused the same way everywhere: a key that a
 * flipped byte renamed is unknown, a value that one changed fails the header CRC, a tensor
 * that one changed fails its own CRC. docs/training.md lists the keys. */
#include "checkpoint_impl.h"
#include "names_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* The strings a checkpoint records, from the one name table of each enum (core/names_impl.h). */
static const char *const KIND_NAME[] = {NG_MODEL_NAMES(NG_NAME_ONLY)};
static const char *const NORMALIZE_NAME[] = {NG_NORMALIZE_NAMES(NG_NAME_ONLY)};
static const char *const REDUCE_NAME[] = {NG_REDUCE_NAMES(NG_NAME_ONLY)};
static const char *const WEIGHT_NAME[] = {NG_EDGE_WEIGHT_NAMES(NG_NAME_ONLY)};
static const char *const FINALIZE_NAME[] = {NG_FINALIZE_NAMES(NG_NAME_ONLY)};
static const char *const COMBINE_NAME[] = {NG_COMBINE_NAMES(NG_NAME_ONLY)};
static const char *const ACT_NAME[] = {NG_ACTIVATION_NAMES(NG_NAME_ONLY)};

#define NAME_OF(table, v) ((unsigned)(v) < NG_ARRAY_LEN(table) ? (table)[(unsigned)(v)] : "?")
#define INDEX_OF(table, name) ng__name_index(table, (int)NG_ARRAY_LEN(table), name)

/* The header CRC's key. It is written first: a value before it that a damaged quote extended
 * over it would otherwise hide it, and with it every check of version 2. */
static const char CRC_KEY[] = "header_crc";
/* The metadata keys besides the description, in the order they are written. */
static const char *const RUN_KEYS[] = {
    "header_crc", "format", "version", "epochs_done", "step",      "model",     "optimizer",
    "iteration",  "batch",  "seed",    "base_epochs", "base_step", "checksums",
};
/* The description's fixed keys; "model.layerN" come beside them. */
static const char *const DESC_KEYS[] = {
    "model.kind",   "model.in_dim",  "model.layers",        "train.normalize",
    "dataset.name", "dataset.nodes", "dataset.feature_dim", "dataset.classes",
};
/* The keys of a link checkpoint (ng__ckpt_write_link), beside the others; version 2 only. */
static const char *const LINK_KEYS[] = {"link.decoder", "link.mlp_hidden", "link.checksums"};
/* The MLP decoder's tensors, after the model's and the optimizer's (ng_link_dec's order). */
static const char *const DEC_TENSOR[] = {"decoder.w1", "decoder.b1", "decoder.w2", "decoder.b2"};
#define DEC_TENSORS 4
/* The fields of a "model.layerN" value, in the order they are written. "heads" and
 * "attn_dropout" came with GAT: version-1 files may lack them. */
enum {
  F_OUT_DIM,
  F_FANOUT,
  F_AGGREGATOR,
  F_REDUCE,
  F_EDGE_WEIGHT,
  F_FINALIZE,
  F_SELF_LOOP,
  F_COMBINE,
  F_ACTIVATION,
  F_BIAS,
  F_DROPOUT,
  F_WEIGHT_DECAY,
  F_HEADS,
  F_ATTN_DROPOUT,
  F_COUNT,
};
static const char *const FIELD_NAME[F_COUNT] = {
    "out_dim", "fanout",     "aggregator", "reduce",  "edge_weight",  "finalize", "self_loop",
    "combine", "activation", "bias",       "dropout", "weight_decay", "heads",    "attn_dropout",
};

/* 3 tensors a layer for SAGE/GCN, 4 for GAT and GIN, 5 for SAGE-pool (with fewer layers), and
 * the optimizer's two states: the "checksums" value must hold 9 characters of each. */
#define CKPT_MAX_TENSORS (3 * NG_MAX_LAYERS + 2)
_Static_assert(4 * NG_GAT_MAX_LAYERS <= 3 * NG_MAX_LAYERS, "GAT's tensors must fit checksums");
_Static_assert(5 * NG_POOL_MAX_LAYERS <= 3 * NG_MAX_LAYERS, "SAGE-pool's must fit checksums");
_Static_assert(CKPT_MAX_TENSORS * 9 <= sizeof(((ng_st_meta *)0)->value),
               "the checksums of a checkpoint's tensors must fit one metadata value");
_Static_assert(NG_ARRAY_LEN(RUN_KEYS) + NG_ARRAY_LEN(DESC_KEYS) + NG_MAX_LAYERS +
                       NG_ARRAY_LEN(LINK_KEYS) <=
                   NG_ST_MAX_META,
               "a checkpoint's metadata must fit a safetensors file's");

/* ---- writing ---- */

static void put(ng_st_meta *m, const char *key, const char *fmt, ...) NG_PRINTF(3, 4);
static void put(ng_st_meta *m, const char *key, const char *fmt, ...) {
  ng__strlcpy(m->key, key, sizeof m->key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->value, sizeof m->value, fmt, ap);
  va_end(ap);
}

static uLong crc_bytes(uLong crc, const void *p, size_t n) {
  return crc32(crc, p, (uInt)n);
}

static uLong crc_u64(uLong crc, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  return crc_bytes(crc, b, sizeof b);
}

uint32_t ng__ckpt_header_crc(const ng_st_meta *meta, int n_meta, const ng_st_tensor *tensors,
                             int n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  /* Each string with its terminator, so that no two different tables hash the same text. */
  for (int i = 0; i < n_meta; i++) {
    if (strcmp(meta[i].key, CRC_KEY) == 0)
      continue;
    crc = crc_bytes(crc, meta[i].key, strlen(meta[i].key) + 1);
    crc = crc_bytes(crc, meta[i].value, strlen(meta[i].value) + 1);
  }
  for (int i = 0; i < n; i++) {
    const ng_st_tensor *t = &tensors[i];
    crc = crc_bytes(crc, t->name, strlen(t->name) + 1);
    crc = crc_u64(crc, (uint64_t)t->dtype);
    crc = crc_u64(crc, (uint64_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
      crc = crc_u64(crc, (uint64_t)t->shape[d]);
  }
  return (uint32_t)crc;
}

/* The description of `m`, trained with `normalize` on a dataset of `info`, into meta[0..];
 * returns the number of entries. */
static int describe(ng_st_meta *meta, const struct ng_model *m, ng_normalize normalize,
                    const ng_dataset_info *info) {
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

/* The MLP decoder's tensor i (DEC_TENSOR) of `dec`: its shape and its place in dec->mlp. */
static void dec_tensor(ng_st_tensor *t, const ng_link_dec *dec, int i) {
  const int64_t d = dec->dim, H = dec->hidden;
  const int64_t off[DEC_TENSORS] = {0, d * H, d * H + H, d * H + 2 * H};
  memset(t, 0, sizeof *t);
  ng__strlcpy(t->name, DEC_TENSOR[i], sizeof t->name);
  t->dtype = NG_DTYPE_F32;
  t->ndim = i == 0 ? 2 : 1;
  t->shape[0] = i == 0 ? d : i == 3 ? 1 : H;
  t->shape[1] = i == 0 ? H : 0;
  t->data = dec->mlp ? dec->mlp + off[i] : NULL;
  t->nbytes = (size_t)(i == 0 ? d * H : t->shape[0]) * sizeof(float);
}

static ng_status write_ckpt(const char *path, const struct ng_model *m, const float *host,
                            ng_normalize normalize, const ng_dataset_info *info,
                            const ng_ckpt_run *run, const ng_link_dec *dec) {
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_save: no path");
  ng_param_tensor pt[NG_LAYER_TENSORS * NG_MAX_LAYERS];
  const int np = ng__model_param_tensors(m, pt, (int)NG_ARRAY_LEN(pt));
  if (np + 2 > CKPT_MAX_TENSORS)
    return ng__err(NG_ERR_INTERNAL, "%s: %d tensors do not fit a checkpoint's checksums", path,
                   np + 2);
  ng_st_tensor ts[CKPT_MAX_TENSORS + DEC_TENSORS];
  int n = 0;
  for (int i = 0; i < np; i++, n++) {
    memset(&ts[n], 0, sizeof ts[n]);
    ng__strlcpy(ts[n].name, pt[i].name, sizeof ts[n].name);
    ts[n].dtype = NG_DTYPE_F32;
    ts[n].ndim = pt[i].ndim;
    ts[n].shape[0] = pt[i].shape[0];
    ts[n].shape[1] = pt[i].shape[1];
    ts[n].data = host + pt[i].offset;
    ts[n].nbytes = (size_t)(pt[i].ndim == 2 ? pt[i].shape[0] * pt[i].shape[1] : pt[i].shape[0]) *
                   sizeof(float);
  }
  for (int i = 0; i < 2; i++, n++) {
    memset(&ts[n], 0, sizeof ts[n]);
    snprintf(ts[n].name, sizeof ts[n].name, "optimizer.state%d", i + 1);
    ts[n].dtype = NG_DTYPE_F32;
    ts[n].ndim = 1;
    ts[n].shape[0] = m->n_params;
    ts[n].data = host + (size_t)(i + 1) * (size_t)m->n_params;
    ts[n].nbytes = (size_t)m->n_params * sizeof(float);
  }
  ng_st_meta meta[NG_ST_MAX_META];
  memset(meta, 0, sizeof meta);
  int k = 1; /* meta[0] is the header CRC, filled last */
  put(&meta[k++], "format", "%s", NG_CHECKPOINT_FORMAT);
  put(&meta[k++], "version", "%d", NG_CHECKPOINT_VERSION);
  put(&meta[k++], "epochs_done", "%lld", (long long)run->epochs_done);
  put(&meta[k++], "step", "%lld", (long long)run->step);
  put(&meta[k++], "model", "%d", (int)m->kind);
  put(&meta[k++], "optimizer", "%d", (int)run->optimizer);
  put(&meta[k++], "iteration", "%lld", (long long)run->iteration);
  put(&meta[k++], "batch", "%lld", (long long)run->batch);
  put(&meta[k++], "seed", "%llu", (unsigned long long)run->seed);
  put(&meta[k++], "base_epochs", "%lld", (long long)run->base_epochs);
  put(&meta[k++], "base_step", "%lld", (long long)run->base_step);
  ng_st_meta *sums = &meta[k++];
  ng__strlcpy(sums->key, "checksums", sizeof sums->key);
  size_t at = 0;
  for (int i = 0; i < n; i++)
    at += (size_t)snprintf(sums->value + at, sizeof sums->value - at, "%s%08x", i ? "," : "",
                           (unsigned)ng__crc32(ts[i].data, ts[i].nbytes));
  k += describe(meta + k, m, normalize, info);
  int n_all = n;
  if (dec) {
    const bool mlp = dec->decoder == NG_LINK_DECODER_MLP;
    put(&meta[k++], "link.decoder", "%s", ng_link_decoder_name(dec->decoder));
    put(&meta[k++], "link.mlp_hidden", "%lld", (long long)(mlp ? dec->hidden : 0));
    if (mlp) {
      /* Their CRCs in a key of their own: "checksums" has room for the GNN's alone. */
      ng_st_meta *ls = &meta[k++];
      ng__strlcpy(ls->key, "link.checksums", sizeof ls->key);
      size_t a = 0;
      for (int i = 0; i < DEC_TENSORS; i++, n_all++) {
        dec_tensor(&ts[n_all], dec, i);
        a += (size_t)snprintf(ls->value + a, sizeof ls->value - a, "%s%08x", i ? "," : "",
                              (unsigned)ng__crc32(ts[n_all].data, ts[n_all].nbytes));
      }
    }
  }
  n = n_all;
  put(&meta[0], CRC_KEY, "%08x", (unsigned)ng__ckpt_header_crc(meta + 1, k - 1, ts, n));
  return ng__st_write(path, ts, n, meta, k);
}

ng_status ng__ckpt_write(const char *path, const struct ng_model *m, const float *host,
                         ng_normalize normalize, const ng_dataset_info *info,
                         const ng_ckpt_run *run) {
  return write_ckpt(path, m, host, normalize, info, run, NULL);
}

ng_status ng__ckpt_write_link(const char *path, const struct ng_model *m, const float *host,
                              ng_normalize normalize, const ng_dataset_info *info,
                              const ng_ckpt_run *run, const ng_link_dec *dec) {
  if (!dec || dec->dim != m->layers[m->n_layers - 1].o.out_dim ||
      (dec->decoder == NG_LINK_DECODER_MLP && (!dec->mlp || dec->hidden < 1)))
    return ng__err(NG_ERR_INTERNAL, "%s: a link checkpoint's decoder does not fit its model",
                   path ? path : "(no path)");
  return write_ckpt(path, m, host, normalize, info, run, dec);
}

/* ---- reading ---- */

static ng_status bad_meta(const char *path, const char *key, const char *value, const char *want) {
  return ng__err(NG_ERR_FORMAT,
                 "%s: checkpoint metadata '%s' is %s%.80s%s%s%s; the file was edited or is "
                 "damaged",
                 path, key, value ? "'" : "missing", value ? value : "", value ? "'" : "",
                 want ? ", not " : "", want ? want : "");
}

static ng_status bad_field(const char *path, const char *key, int field, const char *value,
                           const char *want) {
  return ng__err(NG_ERR_FORMAT,
                 "%s: checkpoint metadata '%s': %s is %s%.64s%s, not %s; the file was edited or "
                 "is damaged",
                 path, key, FIELD_NAME[field], value ? "'" : "missing", value ? value : "",
                 value ? "'" : "", want);
}

/* A decimal integer in [lo, hi], without the sign, space or other text strtoll would skip. */
static bool parse_i64(int64_t *out, const char *v, int64_t lo, int64_t hi) {
  if (!v || !(v[0] == '-' ? v[1] >= '0' && v[1] <= '9' : v[0] >= '0' && v[0] <= '9'))
    return false;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (*end || errno || x < lo || x > hi)
    return false;
  *out = x;
  return true;
}

/* A finite number in [lo, hi] (hi excluded when `hi_open`). */
static bool parse_float(float *out, const char *v, double lo, double hi, bool hi_open) {
  if (!v || !*v || v[0] == ' ' || v[0] == '+')
    return false;
  char *end = NULL;
  errno = 0;
  float x = strtof(v, &end);
  if (*end || end == v || errno == ERANGE || !isfinite(x) || x < lo || (hi_open ? x >= hi : x > hi))
    return false;
  *out = x;
  return true;
}

static ng_status meta_i64(int64_t *out, const ng_st_file *f, const char *key, const char *path,
                          int64_t lo, int64_t hi, const char *want) {
  const char *v = ng__st_meta(f, key);
  if (!parse_i64(out, v, lo, hi))
    return bad_meta(path, key, v, want);
  return NG_OK;
}

/* Metadata `key` as 8 lowercase hex digits (a CRC-32). */
static ng_status meta_hex32(uint32_t *out, const ng_st_file *f, const char *key, const char *path) {
  const char *v = ng__st_meta(f, key);
  if (!v || strlen(v) != 8 || strspn(v, "0123456789abcdef") != 8)
    return bad_meta(path, key, v, "8 hex digits");
  *out = (uint32_t)strtoul(v, NULL, 16);
  return NG_OK;
}

/* The header's CRC-32 (CRC_KEY) against the metadata and tensor table it covers. */
static ng_status check_header_crc(const ng_st_file *f, const char *path) {
  uint32_t want = 0;
  NG_CHECK(meta_hex32(&want, f, CRC_KEY, path));
  const uint32_t got = ng__ckpt_header_crc(f->meta, f->n_meta, f->tensors, f->n);
  if (got != want)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint's metadata fails its checksum (CRC-32 %08x, the file "
                   "says %s): a setting was edited or the file is damaged; use another "
                   "checkpoint",
                   path, (unsigned)got, ng__st_meta(f, CRC_KEY));
  return NG_OK;
}

/* The run's seed: a decimal integer in [0, 2^64). */
static ng_status meta_seed(uint64_t *out, const ng_st_file *f, const char *path) {
  const char *seed = ng__st_meta(f, "seed");
  char *end = NULL;
  errno = 0;
  if (seed && seed[0] >= '0' && seed[0] <= '9')
    *out = strtoull(seed, &end, 10);
  if (!end || *end || errno)
    return bad_meta(path, "seed", seed, "an integer in [0, 2^64)");
  return NG_OK;
}

/* Splits a "model.layerN" value into its fields: single spaces between "name=value" pairs,
 * every name known and given once. */
static ng_status split_fields(char vals[F_COUNT][64], bool have[F_COUNT], const char *desc,
                              const char *key, const char *path) {
  memset(have, 0, F_COUNT * sizeof *have);
  const char *p = desc;
  while (true) {
    const char *tok_end = strchr(p, ' ');
    size_t len = tok_end ? (size_t)(tok_end - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    int f = -1;
    for (int i = 0; eq && i < F_COUNT; i++)
      if (strlen(FIELD_NAME[i]) == (size_t)(eq - p) &&
          memcmp(p, FIELD_NAME[i], (size_t)(eq - p)) == 0)
        f = i;
    if (f < 0 || len - (size_t)(eq - p) - 1 == 0 || len - (size_t)(eq - p) - 1 >= 64)
      return ng__err(NG_ERR_FORMAT,
                     "%s: checkpoint metadata '%s' has '%.*s', not a known name=value field; the "
                     "file was edited or is damaged",
                     path, key, (int)NG_MIN(len, 64), p);
    if (have[f])
      return ng__err(NG_ERR_FORMAT,
                     "%s: checkpoint metadata '%s' gives %s twice; the file was edited or is "
                     "damaged",
                     path, key, FIELD_NAME[f]);
    have[f] = true;
    const size_t vlen = len - (size_t)(eq - p) - 1;
    memcpy(vals[f], eq + 1, vlen);
    vals[f][vlen] = '\0';
    if (!tok_end)
      return NG_OK;
    p = tok_end + 1;
  }
}

/* Whether `name` is a built-in aggregator's (or "custom", a combination of built-in parts), not
 * a user aggregator's, whose functions only the program that defined it has. */
static bool builtin_aggregator(const char *name) {
  for (int32_t i = 0; ng_aggregator_builtin_name(i); i++)
    if (strcmp(name, ng_aggregator_builtin_name(i)) == 0)
      return true;
  return strcmp(name, "custom") == 0;
}

/* Parses a layer's description into `o` and its aggregator's name. */
static ng_status parse_layer(ng_layer_opts *o, char *aggregator, size_t agg_cap, const char *desc,
                             const char *key, const char *path, int version) {
  char v[F_COUNT][64];
  bool have[F_COUNT];
  NG_CHECK(split_fields(v, have, desc, key, path));
  for (int f = 0; f < F_COUNT; f++)
    if (!have[f] && !(version == 1 && (f == F_HEADS || f == F_ATTN_DROPOUT)))
      return bad_field(path, key, f, NULL, "given");
  *o = (ng_layer_opts)NG_LAYER_OPTS_INIT;
  int64_t x = 0;
  int idx;
  if (!parse_i64(&x, v[F_OUT_DIM], 1, INT32_MAX))
    return bad_field(path, key, F_OUT_DIM, v[F_OUT_DIM], "an integer in [1, 2^31)");
  o->out_dim = x;
  if (!parse_i64(&x, v[F_FANOUT], -1, INT32_MAX) || x == 0)
    return bad_field(path, key, F_FANOUT, v[F_FANOUT], "a positive integer or -1");
  o->fanout = (int32_t)x;
#define ENUM(field, table, dst, type, want)                                                        \
  do {                                                                                             \
    if ((idx = INDEX_OF(table, v[field])) < 0)                                                     \
      return bad_field(path, key, field, v[field], want);                                          \
    dst = (type)idx;                                                                               \
  } while (0)
  ENUM(F_REDUCE, REDUCE_NAME, o->aggregator.reduce, ng_reduce, "sum, max or min");
  ENUM(F_EDGE_WEIGHT, WEIGHT_NAME, o->aggregator.edge_weight, ng_edge_weight, "none or gcn_norm");
  ENUM(F_FINALIZE, FINALIZE_NAME, o->aggregator.finalize, ng_finalize, "none or mean");
  ENUM(F_COMBINE, COMBINE_NAME, o->combine, ng_sage_combine, "sum or concat");
  ENUM(F_ACTIVATION, ACT_NAME, o->activation, ng_activation, "none or relu");
#undef ENUM
  if (!parse_i64(&x, v[F_SELF_LOOP], 0, 1))
    return bad_field(path, key, F_SELF_LOOP, v[F_SELF_LOOP], "0 or 1");
  o->aggregator.self_loop = (int32_t)x;
  if (!parse_i64(&x, v[F_BIAS], 0, 1))
    return bad_field(path, key, F_BIAS, v[F_BIAS], "0 or 1");
  o->bias = (int32_t)x;
  if (!parse_float(&o->dropout, v[F_DROPOUT], 0, 1, true))
    return bad_field(path, key, F_DROPOUT, v[F_DROPOUT], "a number in [0, 1)");
  if (!parse_float(&o->weight_decay, v[F_WEIGHT_DECAY], 0, HUGE_VAL, false))
    return bad_field(path, key, F_WEIGHT_DECAY, v[F_WEIGHT_DECAY], "a finite number >= 0");
  if (have[F_HEADS]) {
    if (!parse_i64(&x, v[F_HEADS], 1, 1 << 16))
      return bad_field(path, key, F_HEADS, v[F_HEADS], "an integer in [1, 65536]");
    o->heads = (int32_t)x;
  }
  if (have[F_ATTN_DROPOUT] && !parse_float(&o->attn_dropout, v[F_ATTN_DROPOUT], 0, 1, true))
    return bad_field(path, key, F_ATTN_DROPOUT, v[F_ATTN_DROPOUT], "a number in [0, 1)");
  /* The writer names the aggregator from its parts: a built-in name whose parts say otherwise
   * (a flipped self_loop, say) was edited. */
  ng__strlcpy(aggregator, v[F_AGGREGATOR], agg_cap);
  const char *parts = ng_aggregator_name(o->aggregator);
  if (builtin_aggregator(aggregator) && strcmp(parts, aggregator) != 0) {
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata '%s': aggregator=%s but its parts (reduce=%s "
                   "edge_weight=%s finalize=%s self_loop=%d) are %s%s; the file was edited or is "
                   "damaged",
                   path, key, aggregator, v[F_REDUCE], v[F_EDGE_WEIGHT], v[F_FINALIZE],
                   (int)o->aggregator.self_loop,
                   strcmp(parts, "custom") ? "" : "no built-in: ", parts);
  }
  return NG_OK;
}

/* Is `key` "model.layerN" with N < `layers`? */
static bool layer_key(const char *key, int layers) {
  return strncmp(key, "model.layer", 11) == 0 && key[11] >= '0' && key[11] < '0' + layers &&
         key[12] == '\0';
}

static bool known_key(const char *key, int version, int layers) {
  for (size_t i = 0; i < NG_ARRAY_LEN(RUN_KEYS); i++)
    if (strcmp(key, RUN_KEYS[i]) == 0)
      return version >= 2 || strcmp(key, CRC_KEY) != 0;
  for (size_t i = 0; i < NG_ARRAY_LEN(DESC_KEYS); i++)
    if (strcmp(key, DESC_KEYS[i]) == 0)
      return true;
  for (size_t i = 0; i < NG_ARRAY_LEN(LINK_KEYS); i++)
    if (strcmp(key, LINK_KEYS[i]) == 0)
      return version >= 2;
  return layer_key(key, layers);
}

static bool is_desc_key(const char *key) {
  return strncmp(key, "model.", 6) == 0 || strncmp(key, "train.", 6) == 0 ||
         strncmp(key, "dataset.", 8) == 0;
}

/* The model of description `d` (its layout: a user aggregator becomes its built-in parts). */
static ng_status desc_model(ng_model_t *out, const ng_ckpt_desc *d, const char *path) {
  ng_model_t m = NULL;
  ng_status st = ng_model_create(&m, d->kind, d->in_dim);
  for (int l = 0; l < d->layers && st == NG_OK; l++)
    st = ng_model_add_layer(m, &d->layer[l]);
  if (st != NG_OK) {
    ng__err_prefix("%s: the model the checkpoint describes", path);
    ng_model_destroy(m);
    return st == NG_ERR_NOMEM ? st : NG_ERR_FORMAT;
  }
  *out = m;
  return NG_OK;
}

static ng_status read_desc(ng_ckpt_desc *d, const ng_st_file *f, const char *path, int version,
                           bool link) {
  memset(d, 0, sizeof *d);
  const char *kind = ng__st_meta(f, "model.kind");
  bool any = false;
  for (int i = 0; i < f->n_meta; i++)
    any |= is_desc_key(f->meta[i].key);
  if (!any && version == 1)
    return NG_OK; /* written before the description existed */
  d->described = true;
  int idx = kind ? INDEX_OF(KIND_NAME, kind) : -1;
  if (idx < 0)
    return bad_meta(path, "model.kind", kind, "sage, gcn, gat, gin or sage-pool");
  d->kind = (ng_model_kind)idx;
  int64_t layers = 0;
  NG_CHECK(meta_i64(&d->in_dim, f, "model.in_dim", path, 1, INT32_MAX, "an integer in [1, 2^31)"));
  NG_CHECK(meta_i64(&layers, f, "model.layers", path, 1, NG_MAX_LAYERS, "an integer in [1, 8]"));
  d->layers = (int)layers;
  for (int l = 0; l < d->layers; l++) {
    char key[32];
    snprintf(key, sizeof key, "model.layer%d", l);
    const char *desc = ng__st_meta(f, key);
    if (!desc)
      return bad_meta(path, key, NULL, NULL);
    NG_CHECK(parse_layer(&d->layer[l], d->aggregator[l], sizeof d->aggregator[l], desc, key, path,
                         version));
  }
  const char *norm = ng__st_meta(f, "train.normalize");
  if (!norm || (idx = INDEX_OF(NORMALIZE_NAME, norm)) < 0)
    return bad_meta(path, "train.normalize", norm, "none or row");
  d->normalize = (ng_normalize)idx;
  const char *name = ng__st_meta(f, "dataset.name");
  if (!name || strlen(name) >= sizeof d->dataset)
    return bad_meta(path, "dataset.name", name, "a name of at most 63 bytes");
  ng__strlcpy(d->dataset, name, sizeof d->dataset);
  NG_CHECK(meta_i64(&d->nodes, f, "dataset.nodes", path, 1, INT64_MAX, "a positive integer"));
  NG_CHECK(meta_i64(&d->feature_dim, f, "dataset.feature_dim", path, 1, INT32_MAX,
                    "an integer in [1, 2^31)"));
  NG_CHECK(
      meta_i64(&d->classes, f, "dataset.classes", path, 1, INT32_MAX, "an integer in [1, 2^31)"));
  /* The trainer requires both; a file where they differ was edited. */
  if (d->feature_dim != d->in_dim)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: model.in_dim %lld, dataset.feature_dim "
                   "%lld; the file was edited or is damaged",
                   path, (long long)d->in_dim, (long long)d->feature_dim);
  /* A link model's last layer is the node embedding, whatever the dataset's classes. */
  if (!link && d->classes != d->layer[d->layers - 1].out_dim)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: dataset.classes %lld, the last layer's "
                   "out_dim %lld; the file was edited or is damaged",
                   path, (long long)d->classes, (long long)d->layer[d->layers - 1].out_dim);
  return NG_OK;
}

/* The "checksums" value: 8 hex digits per tensor, comma-separated, in the order of the file's
 * tensor table; each is checked against its tensor's data. */
static ng_status check_sums(const ng_st_file *f, const char *text, const char *path,
                            const char *key, int first, int count) {
  int n = first;
  const char *p = text;
  while (true) {
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
      const char c = p[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0)
        return bad_meta(path, key, text, "8 hex digits per tensor, comma-separated");
      v = v << 4 | (uint32_t)d;
    }
    p += 8;
    if (n >= first + count)
      return ng__err(NG_ERR_FORMAT,
                     "%s: checkpoint metadata '%s' lists more than the file's %d tensors; the "
                     "file was edited or is damaged",
                     path, key, count);
    const ng_st_tensor *t = &f->tensors[n++];
    const uint32_t got = ng__crc32(t->data, t->nbytes);
    if (got != v)
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor '%s' fails its checksum (CRC-32 %08x, the file says %08x): the "
                     "file is damaged; use another checkpoint",
                     path, t->name, (unsigned)got, (unsigned)v);
    if (*p == '\0')
      break;
    if (*p++ != ',')
      return bad_meta(path, key, text, "8 hex digits per tensor, comma-separated");
  }
  if (n != first + count)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata '%s' lists %d tensors but the file has %d; the file "
                   "was edited or is damaged",
                   path, key, n - first, count);
  return NG_OK;
}

/* A described checkpoint holds exactly its model's tensors, in the writer's order, and the
 * optimizer's two states. */
static ng_status check_tensors(const ng_ckpt *c, const char *path) {
  ng_model_t m = NULL;
  NG_CHECK(desc_model(&m, &c->desc, path));
  ng_param_tensor pt[NG_LAYER_TENSORS * NG_MAX_LAYERS];
  const int np = ng__model_param_tensors(m, pt, (int)NG_ARRAY_LEN(pt));
  const int64_t n_params = m->n_params;
  ng_model_destroy(m);
  const ng_st_file *f = &c->file;
  const int n_dec = c->link.decoder == NG_LINK_DECODER_MLP ? DEC_TENSORS : 0;
  if (f->n != np + 2 + n_dec)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the file has %d tensors but the model it describes has %d parameter "
                   "tensors, 2 optimizer states and %d of a decoder; the file was edited or is "
                   "damaged",
                   path, f->n, np, n_dec);
  const ng_link_dec dec = {.decoder = c->link.decoder,
                           .dim = c->desc.layer[c->desc.layers - 1].out_dim,
                           .hidden = c->link.hidden};
  for (int i = np + 2; i < f->n; i++) {
    ng_st_tensor want;
    dec_tensor(&want, &dec, i - np - 2);
    const ng_st_tensor *t = &f->tensors[i];
    if (strcmp(t->name, want.name) != 0 || t->dtype != NG_DTYPE_F32 || t->ndim != want.ndim ||
        t->shape[0] != want.shape[0] || (want.ndim == 2 && t->shape[1] != want.shape[1]))
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor %d is '%s', not float32 '%s' of shape [%lld%s%lld] as the "
                     "decoder the file describes has; the file was edited or is damaged",
                     path, i, t->name, want.name, (long long)want.shape[0],
                     want.ndim == 2 ? ", " : "", want.ndim == 2 ? (long long)want.shape[1] : 0LL);
  }
  for (int i = 0; i < np + 2; i++) {
    const ng_st_tensor *t = &f->tensors[i];
    char name[64];
    int64_t shape[2] = {n_params, 0};
    int ndim = 1;
    if (i < np) {
      ng__strlcpy(name, pt[i].name, sizeof name);
      ndim = pt[i].ndim;
      shape[0] = pt[i].shape[0];
      shape[1] = pt[i].shape[1];
    } else {
      snprintf(name, sizeof name, "optimizer.state%d", i - np + 1);
    }
    if (strcmp(t->name, name) != 0 || t->dtype != NG_DTYPE_F32 || t->ndim != ndim ||
        t->shape[0] != shape[0] || (ndim == 2 && t->shape[1] != shape[1]))
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor %d is '%s', not float32 '%s' of shape [%lld%s%lld] as the model "
                     "the file describes has; the file was edited or is damaged",
                     path, i, t->name, name, (long long)shape[0], ndim == 2 ? ", " : "",
                     ndim == 2 ? (long long)shape[1] : 0LL);
  }
  return NG_OK;
}

/* The "link.*" keys: none in a node checkpoint, "link.decoder" and "link.mlp_hidden" (and for the
 * MLP "link.checksums") in a link checkpoint. */
static ng_status read_link(ng_ckpt_link *l, const ng_st_file *f, const char *path, int version) {
  memset(l, 0, sizeof *l);
  const char *name = ng__st_meta(f, "link.decoder");
  if (!name && !ng__st_meta(f, "link.mlp_hidden") && !ng__st_meta(f, "link.checksums"))
    return NG_OK;
  if (version < 2)
    return ng__err(NG_ERR_FORMAT, "%s: 'link.*' keys in a version-%d checkpoint", path, version);
  if (!name || ng_link_decoder_parse(&l->decoder, name) != NG_OK)
    return bad_meta(path, "link.decoder", name, "dot or mlp");
  const bool mlp = l->decoder == NG_LINK_DECODER_MLP;
  NG_CHECK(meta_i64(&l->hidden, f, "link.mlp_hidden", path, mlp ? 1 : 0, mlp ? 65536 : 0,
                    mlp ? "an integer in [1, 65536]" : "0 (the dot decoder has no MLP)"));
  if (!mlp && ng__st_meta(f, "link.checksums"))
    return ng__err(NG_ERR_FORMAT,
                   "%s: 'link.checksums' in a checkpoint of the dot decoder, which has no "
                   "tensors; the file was edited or is damaged",
                   path);
  l->present = true;
  return NG_OK;
}

static ng_status read_all(ng_ckpt *c, const char *path) {
  const ng_st_file *f = &c->file;
  const char *fmt = ng__st_meta(f, "format");
  if (!fmt || strcmp(fmt, NG_CHECKPOINT_FORMAT) != 0)
    return ng__err(NG_ERR_FORMAT, "%s: not a neargnn checkpoint (metadata format is '%.64s')", path,
                   fmt ? fmt : "missing");
  int64_t x = 0;
  NG_CHECK(meta_i64(&x, f, "version", path, 1, NG_CHECKPOINT_VERSION, "1 or 2"));
  c->version = (int)x;
  /* Every key must be one this version writes: a flipped byte in a key's name makes it
   * unknown (and the key it was missing), never silently ignored. */
  const char *layers = ng__st_meta(f, "model.layers");
  int64_t n_layers = NG_MAX_LAYERS; /* a malformed count is reported by read_desc */
  if (layers && !parse_i64(&n_layers, layers, 1, NG_MAX_LAYERS))
    n_layers = NG_MAX_LAYERS;
  for (int i = 0; i < f->n_meta; i++)
    if (!known_key(f->meta[i].key, c->version, (int)n_layers))
      return ng__err(NG_ERR_FORMAT,
                     "%s: checkpoint metadata key '%.64s' is unknown to a version-%d checkpoint; "
                     "the file was edited or is damaged",
                     path, f->meta[i].key, c->version);
  if (c->version >= 2)
    NG_CHECK(check_header_crc(f, path));
  ng_ckpt_run *r = &c->run;
  const int64_t cap = INT64_C(1) << 62; /* counters far from overflowing when incremented */
  const char *want_count = "an integer in [0, 2^62)";
  NG_CHECK(meta_i64(&r->epochs_done, f, "epochs_done", path, 0, cap - 1, want_count));
  NG_CHECK(meta_i64(&r->step, f, "step", path, 0, cap - 1, want_count));
  NG_CHECK(meta_i64(&r->iteration, f, "iteration", path, 0, cap - 1, want_count));
  NG_CHECK(meta_i64(&r->batch, f, "batch", path, 0, cap - 1, want_count));
  NG_CHECK(meta_i64(&x, f, "model", path, 0, NG_MODEL_SAGE_POOL, "a model kind in [0, 4]"));
  c->model = (ng_model_kind)x;
  NG_CHECK(meta_i64(&x, f, "optimizer", path, 0, NG_OPTIMIZER_SGD, "0 (adam) or 1 (sgd)"));
  r->optimizer = (ng_optimizer)x;
  NG_CHECK(meta_seed(&r->seed, f, path));
  r->has_base = ng__st_meta(f, "base_epochs") || ng__st_meta(f, "base_step");
  if (r->has_base || c->version >= 2) {
    NG_CHECK(meta_i64(&r->base_epochs, f, "base_epochs", path, 0, cap - 1, want_count));
    NG_CHECK(meta_i64(&r->base_step, f, "base_step", path, 0, cap - 1, want_count));
    r->has_base = true;
  }
  NG_CHECK(read_link(&c->link, f, path, c->version));
  NG_CHECK(read_desc(&c->desc, f, path, c->version, c->link.present));
  if (c->version >= 2 && !c->desc.described)
    return bad_meta(path, "model.kind", NULL, NULL);
  if (c->desc.described && c->desc.kind != c->model)
    return ng__err(NG_ERR_FORMAT,
                   "%s: checkpoint metadata disagrees: model %d, model.kind %s; the file was "
                   "edited or is damaged",
                   path, (int)c->model, NAME_OF(KIND_NAME, c->desc.kind));
  const char *sums = ng__st_meta(f, "checksums");
  if (!sums && c->version >= 2)
    return bad_meta(path, "checksums", NULL, NULL);
  const int n_dec = c->link.decoder == NG_LINK_DECODER_MLP ? DEC_TENSORS : 0;
  if (n_dec && f->n < n_dec)
    return ng__err(NG_ERR_FORMAT,
                   "%s: a link checkpoint of the MLP decoder holds %d tensors, fewer than the "
                   "decoder's %d; the file was edited or is damaged",
                   path, f->n, n_dec);
  if (sums) {
    NG_CHECK(check_sums(f, sums, path, "checksums", 0, f->n - n_dec));
    c->checksummed = true;
  }
  if (n_dec) {
    const char *ls = ng__st_meta(f, "link.checksums");
    if (!ls)
      return bad_meta(path, "link.checksums", NULL, NULL);
    NG_CHECK(check_sums(f, ls, path, "link.checksums", f->n - n_dec, n_dec));
  }
  if (c->desc.described)
    NG_CHECK(check_tensors(c, path));
  return NG_OK;
}

ng_status ng__ckpt_parse(ng_ckpt *out, const void *buf, size_t len, const char *name) {
  memset(out, 0, sizeof *out);
  if (!name)
    name = "checkpoint buffer";
  NG_CHECK(ng__st_parse(&out->file, buf, len, name));
  ng_status st = read_all(out, name);
  if (st != NG_OK)
    ng__ckpt_close(out);
  return st;
}

ng_status ng__ckpt_read(ng_ckpt *out, const char *path) {
  memset(out, 0, sizeof *out);
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "checkpoint: no path given");
  NG_CHECK(ng__st_open(&out->file, path));
  ng_status st = read_all(out, path);
  if (st != NG_OK)
    ng__ckpt_close(out);
  return st;
}

void ng__ckpt_close(ng_ckpt *c) {
  if (!c)
    return;
  ng__st_close(&c->file);
  memset(c, 0, sizeof *c);
}

/* ---- checking a run against a checkpoint ---- */

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

/* The aggregators of layer `l`: by name where both are built-ins, else by the part that
 * differs (a mean with a self loop is no built-in: "--aggregator custom" would not say what
 * changed). */
static ng_status check_aggregator(const ng_layer_opts *c, const char *recorded,
                                  const ng_layer_opts *o, int l, const char *path) {
  const char *oa = ng_aggregator_name(o->aggregator);
  const bool user = o->aggregator.user || !builtin_aggregator(recorded);
  if (user && strcmp(recorded, oa) != 0)
    return MISMATCH("--aggregator", "%s (layer %d)", "%s", recorded, l, oa);
  const ng_aggregator *a = &c->aggregator, *b = &o->aggregator;
  const char *ca = ng_aggregator_name(*a);
  if (!user && strcmp(ca, oa) != 0 && strcmp(ca, "custom") != 0 && strcmp(oa, "custom") != 0)
    return MISMATCH("--aggregator", "%s (layer %d)", "%s", ca, l, oa);
  if (a->reduce != b->reduce)
    return MISMATCH("aggregator reduce", "%s (layer %d)", "%s", NAME_OF(REDUCE_NAME, a->reduce), l,
                    NAME_OF(REDUCE_NAME, b->reduce));
  if (a->edge_weight != b->edge_weight)
    return MISMATCH("aggregator edge_weight", "%s (layer %d)", "%s",
                    NAME_OF(WEIGHT_NAME, a->edge_weight), l, NAME_OF(WEIGHT_NAME, b->edge_weight));
  if (a->finalize != b->finalize)
    return MISMATCH("aggregator finalize", "%s (layer %d)", "%s",
                    NAME_OF(FINALIZE_NAME, a->finalize), l, NAME_OF(FINALIZE_NAME, b->finalize));
  if ((a->self_loop != 0) != (b->self_loop != 0))
    return MISMATCH("aggregator self_loop", "%d (layer %d)", "%d", a->self_loop != 0, l,
                    b->self_loop != 0);
  return NG_OK;
}

ng_status ng__ckpt_verify(const ng_ckpt *c, const char *path, const struct ng_model *m,
                          ng_normalize normalize, const ng_dataset_info *info, bool weights_only) {
  const ng_ckpt_desc *d = &c->desc;
  if (c->model != m->kind)
    return MISMATCH("--model", "%s", "%s", NAME_OF(KIND_NAME, c->model),
                    NAME_OF(KIND_NAME, m->kind));
  if (!d->described)
    return NG_OK; /* older checkpoints: the tensors' names and shapes are checked on loading */
  if (d->in_dim != m->in_dim || d->feature_dim != info->feature_dim)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained on %lld feature columns (dataset '%s'), this "
                   "dataset '%s' has %lld",
                   path, (long long)d->in_dim, d->dataset, info->name,
                   (long long)info->feature_dim);
  if (c->link.present && !weights_only)
    return ng__err(NG_ERR_FORMAT,
                   "%s: a link-prediction checkpoint (decoder %s) does not resume node training; "
                   "load its weights (inference, serving, ng_link_trainer_load_weights)",
                   path, ng_link_decoder_name(c->link.decoder));
  /* A link model's output is an embedding: the dataset's classes do not constrain it. */
  if (!c->link.present && d->classes != info->classes)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained on %lld classes (dataset '%s'), this dataset "
                   "'%s' has %d",
                   path, (long long)d->classes, d->dataset, info->name, (int)info->classes);
  if (d->layers != m->n_layers)
    return MISMATCH("layers", "%d", "%d", d->layers, m->n_layers);
  for (int l = 0; l < d->layers; l++) {
    const ng_layer_opts *c_ = &d->layer[l], *o = &m->layers[l].o;
    /* GAT's hidden width is --heads x --hidden: name both with the heads. */
    if (m->kind == NG_MODEL_GAT && l + 1 == d->layers && c_->heads != o->heads)
      return MISMATCH("--output-heads", "%d", "%d", (int)c_->heads, (int)o->heads);
    if (m->kind == NG_MODEL_GAT && l + 1 < d->layers &&
        (c_->heads != o->heads || c_->out_dim != o->out_dim))
      return MISMATCH("--heads x --hidden", "%d x %lld (layer %d)", "%d x %lld", (int)c_->heads,
                      (long long)(c_->out_dim / NG_MAX(c_->heads, 1)), l, (int)o->heads,
                      (long long)(o->out_dim / NG_MAX(o->heads, 1)));
    if (l + 1 < d->layers && c_->out_dim != o->out_dim)
      return MISMATCH("--hidden", "%lld (layer %d)", "%lld", (long long)c_->out_dim, l,
                      (long long)o->out_dim);
    NG_CHECK(check_aggregator(c_, d->aggregator[l], o, l, path));
    if (m->kind == NG_MODEL_GAT && c_->combine != o->combine)
      return MISMATCH("head combine", "%s (layer %d)", "%s",
                      c_->combine == NG_HEADS_CONCAT ? "concat" : "mean", l,
                      o->combine == NG_HEADS_CONCAT ? "concat" : "mean");
    if (m->kind == NG_MODEL_SAGE && c_->combine != o->combine)
      return MISMATCH("--combine", "%s (layer %d)", "%s", NAME_OF(COMBINE_NAME, c_->combine), l,
                      NAME_OF(COMBINE_NAME, o->combine));
    if (c_->activation != o->activation)
      return MISMATCH("activation", "%s (layer %d)", "%s", NAME_OF(ACT_NAME, c_->activation), l,
                      NAME_OF(ACT_NAME, o->activation));
    if ((c_->bias != 0) != (o->bias != 0))
      return MISMATCH("bias", "%s (layer %d)", "%s", c_->bias ? "on" : "off", l,
                      o->bias ? "on" : "off");
  }
  if (d->normalize != normalize)
    return MISMATCH("--normalize-features", "%s", "%s", NAME_OF(NORMALIZE_NAME, d->normalize),
                    NAME_OF(NORMALIZE_NAME, normalize));
  if (weights_only)
    return NG_OK; /* inference: fanouts do not matter, and another graph is allowed */
  for (int l = 0; l < d->layers; l++)
    if (d->layer[l].fanout != m->layers[l].o.fanout) {
      char a[96], b[96];
      ng_layer_opts mine[NG_MAX_LAYERS];
      for (int k = 0; k < m->n_layers; k++)
        mine[k] = m->layers[k].o;
      fanouts_text(a, sizeof a, d->layer, d->layers);
      fanouts_text(b, sizeof b, mine, m->n_layers);
      return MISMATCH("--fanouts", "%s", "%s (hops from the targets outwards)", a, b);
    }
  if (strcmp(d->dataset, info->name) != 0 || d->nodes != info->nodes)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint was trained on dataset '%s' (%lld nodes), this run uses "
                   "'%s' (%lld nodes); resume on the same dataset (predict and evaluate accept "
                   "another one)",
                   path, d->dataset, (long long)d->nodes, info->name, (long long)info->nodes);
  return NG_OK;
}

ng_status ng__ckpt_tensors(float *host, const ng_ckpt *c, const char *path,
                           const struct ng_model *m, bool with_state) {
  ng_param_tensor pt[NG_LAYER_TENSORS * NG_MAX_LAYERS];
  const int np = ng__model_param_tensors(m, pt, (int)NG_ARRAY_LEN(pt));
  for (int i = 0; i < (with_state ? np + 2 : np); i++) {
    char name[64];
    const int want_ndim = i < np ? pt[i].ndim : 1;
    const int64_t want0 = i < np ? pt[i].shape[0] : m->n_params;
    const int64_t want1 = i < np ? pt[i].shape[1] : 0;
    const int64_t n = want_ndim == 2 ? want0 * want1 : want0;
    float *dst = i < np ? host + pt[i].offset : host + (int64_t)(i - np + 1) * m->n_params;
    if (i < np)
      ng__strlcpy(name, pt[i].name, sizeof name);
    else
      snprintf(name, sizeof name, "optimizer.state%d", i - np + 1);
    const ng_st_tensor *t = ng__st_find(&c->file, name);
    /* Shapes, not only sizes: a [out, in] (PyTorch Linear) tensor must not load transposed. */
    const bool shape_ok = t && t->ndim == want_ndim && t->shape[0] == want0 &&
                          (want_ndim == 1 || t->shape[1] == want1);
    if (!shape_ok || t->dtype != NG_DTYPE_F32 || t->nbytes != (size_t)n * sizeof(float)) {
      char shape[64];
      if (want_ndim == 2)
        snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)want0, (long long)want1);
      else
        snprintf(shape, sizeof shape, "[%lld]", (long long)want0);
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor '%s' is missing or is not float32 of shape %s as this model "
                     "needs (weights are stored [in, out])",
                     path, name, shape);
    }
    memcpy(dst, t->data, t->nbytes);
  }
  return NG_OK;
}

ng_status ng__ckpt_model(ng_model_t *out, const ng_ckpt *c, const char *path) {
  const ng_ckpt_desc *d = &c->desc;
  if (!d->described)
    return ng__err(NG_ERR_FORMAT,
                   "%s: the checkpoint does not record its model's settings (written by neargnn "
                   "before 0.1 recorded them); give the model's options, or re-save it with "
                   "`neargnn train --resume %s --checkpoint NEW` and the options it was trained "
                   "with",
                   path, path);
  for (int l = 0; l < d->layers; l++)
    if (!builtin_aggregator(d->aggregator[l]))
      return ng__err(NG_ERR_UNSUPPORTED,
                     "%s: layer %d uses the user aggregator \"%s\", whose functions only the "
                     "program that defined it has; build the model there (ng_aggregator_define) "
                     "and load the checkpoint into its trainer",
                     path, l, d->aggregator[l]);
  return desc_model(out, d, path);
}

ng_status ng__ckpt_link_mlp(float *mlp, const ng_ckpt *c, int64_t dim) {
  if (c->link.decoder != NG_LINK_DECODER_MLP)
    return ng__err(NG_ERR_INTERNAL, "checkpoint: no MLP decoder to read");
  const ng_link_dec dec = {.decoder = c->link.decoder, .dim = dim, .hidden = c->link.hidden};
  int64_t at = 0;
  for (int i = 0; i < DEC_TENSORS; i++) {
    ng_st_tensor want;
    dec_tensor(&want, &dec, i);
    const ng_st_tensor *t = ng__st_find(&c->file, want.name);
    if (!t || t->nbytes != want.nbytes)
      return ng__err(NG_ERR_FORMAT,
                     "checkpoint: decoder tensor '%s' is missing or does not fit an embedding of "
                     "%lld columns",
                     want.name, (long long)dim);
    memcpy(mlp + at, t->data, t->nbytes);
    at += (int64_t)(t->nbytes / sizeof(float));
  }
  return NG_OK;
}

/* ---- the public API ---- */

ng_status ng_model_from_checkpoint(ng_model_t *out, const char *path) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_from_checkpoint: out is NULL");
  *out = NULL;
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_model_from_checkpoint: no path");
  ng_ckpt c;
  NG_CHECK(ng__ckpt_read(&c, path));
  ng_status st = ng__ckpt_model(out, &c, path);
  ng__ckpt_close(&c);
  return st;
}

ng_status ng_checkpoint_info_get(ng_checkpoint_info *out, const char *path) {
  if (!out || out->size < sizeof *out)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_checkpoint_info_get: out missing or from an older header "
                   "(NG_CHECKPOINT_INFO_INIT)");
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_checkpoint_info_get: no path");
  ng_ckpt c;
  NG_CHECK(ng__ckpt_read(&c, path));
  ng_checkpoint_info r = NG_CHECKPOINT_INFO_INIT;
  const ng_ckpt_desc *d = &c.desc;
  r.described = d->described;
  r.kind = d->kind;
  r.layers = d->layers;
  r.normalize = d->normalize;
  ng__strlcpy(r.dataset, d->dataset, sizeof r.dataset);
  r.nodes = d->nodes;
  r.feature_dim = d->feature_dim;
  r.classes = (int32_t)d->classes;
  r.epochs_done = c.run.epochs_done;
  r.seed = c.run.seed;
  r.batch = c.run.batch;
  r.optimizer = c.run.optimizer;
  *out = r;
  ng__ckpt_close(&c);
  return NG_OK;
}

/* ---- relational models (ng_hetero_trainer_save / _load_weights) ----
 * Their own keys beside the run's counters: a relational model has no "model.layerN", and a
 * node checkpoint's reader refuses these keys as unknown, as this reader refuses a node
 * checkpoint's. The dataset is recorded by its schema's CRC, which fits one metadata value for
 * any number of types. */
static const char *const HETERO_KEYS[] = {
    "header_crc",
    "format",
    "version",
    "epochs_done",
    "step",
    "seed",
    "checksums",
    "hetero.model",
    "hetero.layers",
    "hetero.hidden",
    "hetero.embed_dim",
    "hetero.bases",
    "hetero.heads",
    "hetero.classes",
    "hetero.target",
    "hetero.node_types",
    "hetero.edge_types",
    "hetero.schema",
    "hetero.params",
    "dataset.name",
};
static const char *const HETERO_TENSOR[3] = {"hetero.params", "optimizer.state1",
                                             "optimizer.state2"};

ng_status ng__ckpt_write_hetero(const char *path, const ng_ckpt_hetero *h, const float *host) {
  if (!path || !*path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_hetero_trainer_save: no path");
  ng_st_tensor ts[3];
  memset(ts, 0, sizeof ts);
  for (int i = 0; i < 3; i++) {
    ng__strlcpy(ts[i].name, HETERO_TENSOR[i], sizeof ts[i].name);
    ts[i].dtype = NG_DTYPE_F32;
    ts[i].ndim = 1;
    ts[i].shape[0] = h->n_params;
    ts[i].data = host + (size_t)i * (size_t)h->n_params;
    ts[i].nbytes = (size_t)h->n_params * sizeof(float);
  }
  ng_st_meta meta[NG_ST_MAX_META];
  memset(meta, 0, sizeof meta);
  int k = 1; /* meta[0]: the header CRC, filled last */
  put(&meta[k++], "format", "%s", NG_CHECKPOINT_FORMAT);
  put(&meta[k++], "version", "%d", NG_CHECKPOINT_VERSION);
  put(&meta[k++], "epochs_done", "%lld", (long long)h->epochs_done);
  put(&meta[k++], "step", "%lld", (long long)h->step);
  put(&meta[k++], "seed", "%llu", (unsigned long long)h->seed);
  ng_st_meta *sums = &meta[k++];
  ng__strlcpy(sums->key, "checksums", sizeof sums->key);
  size_t at = 0;
  for (int i = 0; i < 3; i++)
    at += (size_t)snprintf(sums->value + at, sizeof sums->value - at, "%s%08x", i ? "," : "",
                           (unsigned)ng__crc32(ts[i].data, ts[i].nbytes));
  put(&meta[k++], "hetero.model", "%s", h->model);
  put(&meta[k++], "hetero.layers", "%lld", (long long)h->layers);
  put(&meta[k++], "hetero.hidden", "%lld", (long long)h->hidden);
  put(&meta[k++], "hetero.embed_dim", "%lld", (long long)h->embed_dim);
  put(&meta[k++], "hetero.bases", "%lld", (long long)h->bases);
  put(&meta[k++], "hetero.heads", "%lld", (long long)h->heads);
  put(&meta[k++], "hetero.classes", "%lld", (long long)h->classes);
  put(&meta[k++], "hetero.target", "%lld", (long long)h->target);
  put(&meta[k++], "hetero.node_types", "%lld", (long long)h->node_types);
  put(&meta[k++], "hetero.edge_types", "%lld", (long long)h->edge_types);
  put(&meta[k++], "hetero.schema", "%08x", (unsigned)h->schema);
  put(&meta[k++], "hetero.params", "%lld", (long long)h->n_params);
  put(&meta[k++], "dataset.name", "%s", h->dataset);
  put(&meta[0], CRC_KEY, "%08x", (unsigned)ng__ckpt_header_crc(meta + 1, k - 1, ts, 3));
  return ng__st_write(path, ts, 3, meta, k);
}

ng_status ng__ckpt_read_hetero(ng_ckpt_hetero *h, const float **params, ng_st_file *f,
                               const char *path) {
  memset(h, 0, sizeof *h);
  memset(f, 0, sizeof *f);
  *params = NULL;
  NG_CHECK(ng__st_open(f, path));
  const char *fmt = ng__st_meta(f, "format");
  if (!fmt || strcmp(fmt, NG_CHECKPOINT_FORMAT) != 0)
    return ng__err(NG_ERR_FORMAT, "%s: not a neargnn checkpoint (metadata format is '%.64s')", path,
                   fmt ? fmt : "missing");
  if (!ng__st_meta(f, "hetero.model"))
    return ng__err(NG_ERR_FORMAT,
                   "%s: not a relational model's checkpoint (no 'hetero.model'); a node model's "
                   "checkpoint is read by neargnn predict or ng_model_from_checkpoint",
                   path);
  for (int i = 0; i < f->n_meta; i++) {
    bool known = false;
    for (size_t j = 0; j < NG_ARRAY_LEN(HETERO_KEYS); j++)
      known |= strcmp(f->meta[i].key, HETERO_KEYS[j]) == 0;
    if (!known)
      return ng__err(NG_ERR_FORMAT,
                     "%s: checkpoint metadata key '%.64s' is unknown to a relational model's "
                     "checkpoint; the file was edited or is damaged",
                     path, f->meta[i].key);
  }
  int64_t x = 0;
  NG_CHECK(meta_i64(&x, f, "version", path, 2, NG_CHECKPOINT_VERSION, "2"));
  NG_CHECK(check_header_crc(f, path));
  const char *sums = ng__st_meta(f, "checksums");
  if (!sums)
    return bad_meta(path, "checksums", NULL, NULL);
  NG_CHECK(check_sums(f, sums, path, "checksums", 0, f->n));
  const int64_t cap = INT64_C(1) << 62;
  const char *count = "an integer in [0, 2^62)";
  NG_CHECK(meta_i64(&h->epochs_done, f, "epochs_done", path, 0, cap - 1, count));
  NG_CHECK(meta_i64(&h->step, f, "step", path, 0, cap - 1, count));
  NG_CHECK(meta_i64(&h->layers, f, "hetero.layers", path, 1, NG_MAX_LAYERS, "1 to 8"));
  NG_CHECK(meta_i64(&h->hidden, f, "hetero.hidden", path, 1, cap - 1, "a positive integer"));
  NG_CHECK(meta_i64(&h->embed_dim, f, "hetero.embed_dim", path, 0, cap - 1, count));
  NG_CHECK(meta_i64(&h->bases, f, "hetero.bases", path, 0, 1 << 20, "an integer in [0, 2^20]"));
  NG_CHECK(meta_i64(&h->heads, f, "hetero.heads", path, 0, 1 << 20, "an integer in [0, 2^20]"));
  NG_CHECK(meta_i64(&h->classes, f, "hetero.classes", path, 1, 65536, "1 to 65536"));
  NG_CHECK(meta_i64(&h->node_types, f, "hetero.node_types", path, 1, 1 << 20, "a type count"));
  NG_CHECK(meta_i64(&h->edge_types, f, "hetero.edge_types", path, 1, 1 << 20, "a count"));
  NG_CHECK(meta_i64(&h->target, f, "hetero.target", path, 0, h->node_types - 1, "a type index"));
  NG_CHECK(meta_i64(&h->n_params, f, "hetero.params", path, 1, cap - 1, "a positive integer"));
  NG_CHECK(meta_hex32(&h->schema, f, "hetero.schema", path));
  NG_CHECK(meta_seed(&h->seed, f, path));
  const char *model = ng__st_meta(f, "hetero.model"), *name = ng__st_meta(f, "dataset.name");
  if (strlen(model) >= sizeof h->model)
    return bad_meta(path, "hetero.model", model, "a model name");
  ng__strlcpy(h->model, model, sizeof h->model);
  ng__strlcpy(h->dataset, name ? name : "", sizeof h->dataset);
  if (f->n != 3)
    return ng__err(NG_ERR_FORMAT,
                   "%s: a relational model's checkpoint holds 3 tensors, not %d; the file was "
                   "edited or is damaged",
                   path, f->n);
  for (int i = 0; i < 3; i++) {
    const ng_st_tensor *t = &f->tensors[i];
    if (strcmp(t->name, HETERO_TENSOR[i]) != 0 || t->dtype != NG_DTYPE_F32 || t->ndim != 1 ||
        t->shape[0] != h->n_params)
      return ng__err(NG_ERR_FORMAT,
                     "%s: tensor %d is '%s', not '%s' of %lld float32; the file was edited or is "
                     "damaged",
                     path, i, t->name, HETERO_TENSOR[i], (long long)h->n_params);
  }
  *params = (const float *)f->tensors[0].data;
  return NG_OK;
}

ng_status ng__ckpt_copy_out(float **out, ng_backend *be, const float *params, const float *state1,
                            const float *state2, int64_t n) {
  const size_t bytes = (size_t)n * sizeof(float);
  float *host = *out = ng__malloc(3 * bytes, "a checkpoint");
  if (!host)
    return NG_ERR_NOMEM;
  const float *src[3] = {params, state1, state2};
  ng_status st = NG_OK;
  for (int i = 0; i < 3 && st == NG_OK; i++)
    st = be->iface->copy_d2h(be, host + (size_t)i * (size_t)n, src[i], bytes);
  return st;
}
