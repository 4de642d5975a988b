/* libFuzzer target: flips bytes of a valid small checkpoint (the metadata especially) and reads
 * it with the checkpoint codec (ng__ckpt_parse, what every reader of the library uses). The
 * oracle: the reader refuses, saying why, or returns exactly the original's run, model
 * description and tensors. A flip that is accepted and changes what the file means (a setting,
 * a counter, a weight) traps.
 *
 * Input: byte 0 picks the original (a GraphSAGE-mean or a GCN checkpoint, written once per run
 * by ng__ckpt_write); then records of 3 bytes, at most 8: a 16-bit little-endian position and
 * a byte to XOR there (0: no change). A position with its top bit set falls in the header (the
 * length prefix and the JSON), otherwise anywhere in the file. */
#include "checkpoint_impl.h"
#include "fuzz_files.h"

#include <math.h>

enum { N_ORIGINALS = 2, MAX_FLIPS = 8 };

typedef struct {
  uint8_t *bytes;
  size_t len, header_len; /* header_len: the prefix and the JSON */
  ng_ckpt ck;
} original;

static original orig[N_ORIGINALS];
static ng_ckpt got;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes the checkpoint of a small model of `kind` and reads its bytes back. */
static bool make_original(original *o, ng_model_kind kind, const char *dir, int index) {
  ng_model_t m = NULL;
  if (ng_model_create(&m, kind, 5) != NG_OK)
    return false;
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = kind == NG_MODEL_GCN ? NG_AGGREGATOR_GCN : NG_AGGREGATOR_MEAN;
  l0.out_dim = 4;
  l0.fanout = 3;
  l0.dropout = 0.5f;
  l0.weight_decay = 5e-4f;
  l1.out_dim = 3;
  l1.fanout = -1;
  l1.activation = NG_ACT_NONE;
  bool ok = ng_model_add_layer(m, &l0) == NG_OK && ng_model_add_layer(m, &l1) == NG_OK;
  const int64_t np = ok ? m->n_params : 0;
  float *host = ok ? calloc((size_t)(3 * np), sizeof(float)) : NULL;
  for (int64_t i = 0; host && i < 3 * np; i++)
    host[i] = (float)sin((double)i + 0.25); /* no two weights alike */
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  snprintf(info.name, sizeof info.name, "tiny");
  info.nodes = 11;
  info.feature_dim = 5;
  info.classes = 3;
  const ng_ckpt_run run = {.epochs_done = 2,
                           .step = 6,
                           .iteration = 0,
                           .batch = 4,
                           .base_epochs = 0,
                           .base_step = 0,
                           .optimizer = NG_OPTIMIZER_ADAM,
                           .seed = 12345};
  char path[512];
  snprintf(path, sizeof path, "%s/orig%d.safetensors", dir, index);
  ok = host && ng__ckpt_write(path, m, host, NG_NORMALIZE_ROW, &info, &run) == NG_OK;
  free(host);
  ng_model_destroy(m);
  FILE *f = ok ? fopen(path, "rb") : NULL;
  if (!f)
    return false;
  fseek(f, 0, SEEK_END);
  o->len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  o->bytes = malloc(o->len);
  ok = o->bytes && fread(o->bytes, 1, o->len, f) == o->len;
  fclose(f);
  if (!ok || o->len < 8)
    return false;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)o->bytes[i] << (8 * i);
  o->header_len = 8 + (size_t)hlen;
  return ng__ckpt_parse(&o->ck, o->bytes, o->len, "original") == NG_OK;
}

static bool same_layer(const ng_layer_opts *a, const ng_layer_opts *b) {
  return a->fanout == b->fanout && a->out_dim == b->out_dim &&
         a->aggregator.reduce == b->aggregator.reduce &&
         a->aggregator.edge_weight == b->aggregator.edge_weight &&
         a->aggregator.finalize == b->aggregator.finalize &&
         a->aggregator.self_loop == b->aggregator.self_loop && a->activation == b->activation &&
         a->dropout == b->dropout && a->weight_decay == b->weight_decay &&
         a->combine == b->combine && a->bias == b->bias && a->heads == b->heads &&
         a->attn_dropout == b->attn_dropout;
}

/* Whether `b` means exactly what `a` means. */
static bool same(const ng_ckpt *a, const ng_ckpt *b) {
  const ng_ckpt_run *r = &a->run, *s = &b->run;
  const ng_ckpt_desc *d = &a->desc, *e = &b->desc;
  if (a->version != b->version || a->model != b->model || a->checksummed != b->checksummed ||
      r->epochs_done != s->epochs_done || r->step != s->step || r->iteration != s->iteration ||
      r->batch != s->batch || r->has_base != s->has_base || r->base_epochs != s->base_epochs ||
      r->base_step != s->base_step || r->optimizer != s->optimizer || r->seed != s->seed)
    return false;
  if (d->described != e->described || d->kind != e->kind || d->in_dim != e->in_dim ||
      d->layers != e->layers || d->normalize != e->normalize ||
      strcmp(d->dataset, e->dataset) != 0 || d->nodes != e->nodes ||
      d->feature_dim != e->feature_dim || d->classes != e->classes)
    return false;
  for (int l = 0; l < d->layers; l++)
    if (!same_layer(&d->layer[l], &e->layer[l]) || strcmp(d->aggregator[l], e->aggregator[l]))
      return false;
  const ng_st_file *f = &a->file, *g = &b->file;
  if (f->n != g->n)
    return false;
  for (int i = 0; i < f->n; i++) {
    const ng_st_tensor *t = &f->tensors[i], *u = &g->tensors[i];
    if (strcmp(t->name, u->name) || t->dtype != u->dtype || t->ndim != u->ndim ||
        t->nbytes != u->nbytes || memcmp(t->shape, u->shape, sizeof t->shape) ||
        memcmp(t->data, u->data, t->nbytes))
      return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool ready;
  if (!ready) {
    const char *dir = fuzz_scratch();
    if (!dir || !make_original(&orig[0], NG_MODEL_SAGE, dir, 0) ||
        !make_original(&orig[1], NG_MODEL_GCN, dir, 1))
      __builtin_trap(); /* the codec cannot read what it wrote */
    ready = true;
  }
  if (size < 1)
    return 0;
  const original *o = &orig[data[0] % N_ORIGINALS];
  uint8_t *buf = malloc(o->len);
  if (!buf)
    return 0;
  memcpy(buf, o->bytes, o->len);
  for (size_t at = 1, k = 0; at + 3 <= size && k < MAX_FLIPS; at += 3, k++) {
    const unsigned pos = data[at] | (unsigned)data[at + 1] << 8;
    const size_t where = pos & 0x8000 ? (pos & 0x7fff) % o->header_len : pos % o->len;
    buf[where] ^= data[at + 2];
  }
  if (ng__ckpt_parse(&got, buf, o->len, "fuzz input") != NG_OK) {
    if (got.file.n != 0 || got.file.n_meta != 0 || ng_last_error()[0] == '\0')
      __builtin_trap();
  } else {
    if (!same(&o->ck, &got))
      __builtin_trap(); /* accepted, and it means something else */
    ng__ckpt_close(&got);
  }
  free(buf);
  return 0;
}
