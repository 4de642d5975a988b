/* The checkpoint codec (runtime/checkpoint.c, issue 37): a flipped byte in a metadata key or
 * value, or an edited setting, is refused by every reader (ng_trainer_load, _load_weights,
 * ng_model_from_checkpoint, ng_checkpoint_info_get, ng_engine_create); values are strict even
 * where the header CRC was recomputed (a deliberate edit: NaN dropout, unknown or repeated
 * fields, trailing text); version-1 files still load with the checks their keys allow; a
 * differing setting is named by its own key; and the engine builds the checkpoint's model and
 * normalisation when given none. Real data: Cora. */
#include "checkpoint_impl.h"
#include "dataset_impl.h"
#include "neargnn_serve.h"
#include "ng_test.h"

#include <stdlib.h>

static ng_dataset_t cora;
static char good[4096]; /* a version-2 checkpoint of a SAGE-mean model, features row-normalised */

static void open_cora(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s/cora", ng_test_data_dir());
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_PLANETOID;
  const char *dst = ng_test_path("cora");
  if (ng_dataset_convert(dst, src, &co) != NG_OK || ng_dataset_open(&cora, dst, NULL) != NG_OK) {
    fprintf(stderr, "cannot convert or open %s: %s\n", src, ng_last_error());
    exit(1);
  }
}

static ng_model_t sage(ng_aggregator ag) {
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, cora->info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.aggregator = l1.aggregator = ag;
  l0.fanout = 5;
  l1.fanout = 10;
  l0.out_dim = 16;
  l1.out_dim = cora->info.classes;
  l1.activation = NG_ACT_NONE;
  l0.dropout = l1.dropout = 0.5f;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  return m;
}

static ng_train_opts opts(void) {
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 0;
  o.normalize = NG_NORMALIZE_ROW;
  o.workers = -1;
  o.seed = 3;
  return o;
}

static ng_trainer_t trainer(ng_model_t m) {
  ng_train_opts o = opts();
  ng_trainer_t t = NULL;
  EXPECT_OK(ng_trainer_create(&t, cora, m, &o));
  return t;
}

/* Writes `dst` as `src` with every `from` replaced by `to` (same length): flipped bytes. */
static void flip(const char *src, const char *dst, const char *from, const char *to) {
  size_t len = 0, n = strlen(from);
  char *b = ng_test_read_file(src, &len);
  EXPECT_TRUE(b != NULL && strlen(to) == n);
  int hits = 0;
  for (size_t i = 0; b && i + n <= len; i++)
    if (memcmp(b + i, from, n) == 0) {
      memcpy(b + i, to, n);
      hits++;
    }
  EXPECT_TRUE(hits > 0);
  EXPECT_TRUE(b && ng_test_write_file(dst, b, len));
  free(b);
}

/* Rewrites `src` to `dst` with metadata `key` set to `value` (NULL: dropped, and `key` NULL
 * changes nothing); `resign` recomputes the header CRC, as a deliberate editor would. */
static void edit(const char *src, const char *dst, const char *key, const char *value,
                 bool resign) {
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, src));
  ng_st_meta meta[NG_ST_MAX_META];
  int n = 0;
  for (int i = 0; i < f.n_meta; i++) {
    const bool hit = key && strcmp(f.meta[i].key, key) == 0;
    if (hit && !value)
      continue;
    meta[n] = f.meta[i];
    if (hit)
      snprintf(meta[n].value, sizeof meta[n].value, "%s", value);
    n++;
  }
  for (int i = 0; resign && i < n; i++)
    if (strcmp(meta[i].key, "header_crc") == 0)
      snprintf(meta[i].value, sizeof meta[i].value, "%08x",
               (unsigned)ng__ckpt_header_crc(meta, n, f.tensors, f.n));
  EXPECT_OK(ng__st_write(dst, f.tensors, f.n, meta, n));
  ng__st_close(&f);
}

/* The value of layer 0's description in `path` with field `name` set to `value`. */
static void layer0_with(char *out, size_t cap, const char *path, const char *name,
                        const char *value) {
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, path));
  const char *d = ng__st_meta(&f, "model.layer0");
  char field[64];
  snprintf(field, sizeof field, "%s=", name);
  const char *at = d ? strstr(d, field) : NULL;
  EXPECT_TRUE(at != NULL);
  if (at) {
    const char *end = strchr(at, ' ');
    snprintf(out, cap, "%.*s%s%s%s", (int)(at - d), d, field, value, end ? end : "");
  }
  ng__st_close(&f);
}

/* Every reader refuses `path` with NG_ERR_FORMAT and a message containing `needle`. */
static void refused_by_all(const char *path, const char *needle) {
  ng_model_t m = sage(NG_AGGREGATOR_MEAN);
  ng_trainer_t t = trainer(m);
  EXPECT_STATUS(ng_trainer_load(t, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  EXPECT_STATUS(ng_trainer_load_weights(t, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  ng_model_t back = NULL;
  EXPECT_STATUS(ng_model_from_checkpoint(&back, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  EXPECT_TRUE(back == NULL);
  ng_checkpoint_info ci = NG_CHECKPOINT_INFO_INIT;
  EXPECT_STATUS(ng_checkpoint_info_get(&ci, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
  eo.workers = 1;
  ng_engine *e = NULL;
  EXPECT_STATUS(ng_engine_create(&e, cora, NULL, path, &eo), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  EXPECT_STATUS(ng_engine_create(&e, cora, m, path, &eo), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(needle);
  EXPECT_TRUE(e == NULL);
  ng_engine_destroy(e);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

static void make_good(void) {
  ng_model_t m = sage(NG_AGGREGATOR_MEAN);
  ng_trainer_t t = trainer(m);
  for (int e = 0; t && e < 2; e++) {
    ng_epoch_stats s = NG_EPOCH_STATS_INIT;
    EXPECT_OK(ng_trainer_epoch(&s, t));
  }
  snprintf(good, sizeof good, "%s", ng_test_path("good.safetensors"));
  EXPECT_OK(ng_trainer_save(t, good));
  EXPECT_OK(ng_trainer_load(t, good));
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

/* Issue 37 case 2: a byte flip that renamed "checksums" switched CRC checking off, so a
 * corrupted weight evaluated to a loss of 3.7e36 with exit 0. Now the key is unknown. */
static void test_key_flip_refused(void) {
  char bad[4096];
  snprintf(bad, sizeof bad, "%s", ng_test_path("chdcksums.safetensors"));
  flip(good, bad, "\"checksums\"", "\"chdcksums\"");
  refused_by_all(bad, "'chdcksums' is unknown");
  /* The same with a weight blown up as in the report: still the key, before any tensor. */
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, bad));
  const ng_st_tensor *w = ng__st_find(&f, "layers.0.w_self");
  size_t off = w ? (size_t)((const char *)w->data - (const char *)f.map) : 0;
  ng__st_close(&f);
  size_t len = 0;
  unsigned char *b = ng_test_read_file(bad, &len);
  if (b && off) {
    b[off + 3] = 0x7e; /* the first weight's exponent byte: about 1e37 */
    EXPECT_TRUE(ng_test_write_file(bad, b, len));
  }
  free(b);
  refused_by_all(bad, "'chdcksums' is unknown");
  /* Other keys: the header CRC's own, and a layer's. */
  flip(good, bad, "\"header_crc\"", "\"headdr_crc\"");
  refused_by_all(bad, "'headdr_crc' is unknown");
  flip(good, bad, "\"model.layer1\"", "\"model.layer5\"");
  refused_by_all(bad, "'model.layer5' is unknown");
}

/* Issue 37 case 3: single flips of self_loop, and edits of activation or train.normalize,
 * loaded and changed predictions. Now the header CRC refuses each, in every reader. */
static void test_value_edits_refused(void) {
  char bad[4096];
  snprintf(bad, sizeof bad, "%s", ng_test_path("edited.safetensors"));
  flip(good, bad, "self_loop=0", "self_loop=1");
  refused_by_all(bad, "metadata fails its checksum");
  flip(good, bad, "activation=relu", "activation=none");
  refused_by_all(bad, "metadata fails its checksum");
  edit(good, bad, "train.normalize", "none", false);
  refused_by_all(bad, "metadata fails its checksum");
  flip(good, bad, "\"version\":\"2\"", "\"version\":\"1\""); /* a downgrade keeps header_crc */
  refused_by_all(bad, "'header_crc' is unknown to a version-1 checkpoint");
  /* A tensor table edit: a renamed tensor. */
  flip(good, bad, "layers.0.w_self", "layers.0.w_sekf");
  refused_by_all(bad, "metadata fails its checksum");
}

/* Strict values, even where the header CRC was recomputed: issue 37 item 14's dropout=nan
 * passed --resume; out-of-range, unknown and repeated fields, a description that contradicts
 * itself and trailing text after the checksums are refused naming the key. */
static void test_strict_values(void) {
  char bad[4096], v[256];
  snprintf(bad, sizeof bad, "%s", ng_test_path("strict.safetensors"));
  static const struct {
    const char *field, *value, *needle;
  } cases[] = {
      {"dropout", "nan", "'model.layer0': dropout is 'nan', not a number in [0, 1)"},
      {"dropout", "1", "dropout is '1'"},
      {"weight_decay", "inf", "weight_decay is 'inf'"},
      {"self_loop", "2", "self_loop is '2', not 0 or 1"},
      {"heads", "0", "heads is '0'"},
      {"out_dim", "16 out_dim=16", "gives out_dim twice"},
      {"bias", "1 colour=red", "'colour=red', not a known name=value field"},
      {"self_loop", "1", "aggregator=mean but its parts"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(cases); i++) {
    layer0_with(v, sizeof v, good, cases[i].field, cases[i].value);
    edit(good, bad, "model.layer0", v, true);
    refused_by_all(bad, cases[i].needle);
  }
  const char *sums = NULL;
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, good));
  sums = ng__st_meta(&f, "checksums");
  snprintf(v, sizeof v, "%s,", sums ? sums : "");
  ng__st_close(&f);
  edit(good, bad, "checksums", v, true);
  refused_by_all(bad, "'checksums' is");
  edit(good, bad, "epochs_done", "-1", true);
  refused_by_all(bad, "'epochs_done' is '-1'");
  edit(good, bad, "dataset.classes", "8", true);
  refused_by_all(bad, "dataset.classes 8");
  edit(good, bad, "checksums", NULL, true);
  refused_by_all(bad, "'checksums' is missing");
}

/* A version-1 file (written before the header CRC): it loads, its per-tensor CRCs still
 * checked, and its description checked against itself; one without any CRC loads too. */
static void test_version1_loads(void) {
  char v1[4096], bad[4096];
  snprintf(v1, sizeof v1, "%s", ng_test_path("v1.safetensors"));
  snprintf(bad, sizeof bad, "%s", ng_test_path("v1-bad.safetensors"));
  edit(good, v1, "version", "1", false);
  edit(v1, v1, "header_crc", NULL, false);
  ng_model_t m = sage(NG_AGGREGATOR_MEAN);
  ng_trainer_t t = trainer(m);
  EXPECT_OK(ng_trainer_load(t, v1));
  EXPECT_EQ_I(ng_trainer_epochs_done(t), 2);
  ng_model_t back = NULL;
  EXPECT_OK(ng_model_from_checkpoint(&back, v1));
  ng_model_destroy(back);
  /* A flipped weight byte still fails its tensor's CRC. */
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, v1));
  const ng_st_tensor *w = ng__st_find(&f, "layers.1.w_neigh");
  size_t off = w ? (size_t)((const char *)w->data - (const char *)f.map) : 0;
  ng__st_close(&f);
  size_t len = 0;
  unsigned char *b = ng_test_read_file(v1, &len);
  if (b && off) {
    b[off + 5] ^= 0x04;
    EXPECT_TRUE(ng_test_write_file(bad, b, len));
  }
  free(b);
  refused_by_all(bad, "tensor 'layers.1.w_neigh' fails its checksum");
  /* A flipped self_loop contradicts the recorded aggregator name; a renamed key is unknown. */
  flip(v1, bad, "self_loop=0", "self_loop=1");
  refused_by_all(bad, "aggregator=mean but its parts");
  flip(v1, bad, "\"checksums\"", "\"chdcksums\"");
  refused_by_all(bad, "'chdcksums' is unknown");
  /* Without checksums and the epoch base (the oldest files): loads unverified. */
  edit(v1, bad, "checksums", NULL, false);
  edit(bad, bad, "base_epochs", NULL, false);
  edit(bad, bad, "base_step", NULL, false);
  EXPECT_OK(ng_trainer_load(t, bad));
  EXPECT_EQ_I(ng_trainer_epochs_done(t), 2);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

/* Issue 37 item 14: a self_loop that differs was reported as "--aggregator custom"; the
 * message now names the part. */
static void test_mismatch_names_part(void) {
  ng_aggregator looped = NG_AGGREGATOR_MEAN;
  looped.self_loop = 1;
  ng_model_t m = sage(looped);
  ng_trainer_t t = trainer(m);
  EXPECT_STATUS(ng_trainer_load(t, good), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("trained with aggregator self_loop 0 (layer 0), this run uses 1");
  EXPECT_STATUS(ng_trainer_load_weights(t, good), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("aggregator self_loop 0 (layer 0), this run uses 1");
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

/* Issue 37 case 4: the engine serves the checkpoint's model and normalisation when given
 * none (the trainer's predictions), and refuses a model or normalisation that differs. */
static void test_engine_builds_from_checkpoint(void) {
  ng_model_t m = sage(NG_AGGREGATOR_MEAN);
  ng_trainer_t t = trainer(m);
  EXPECT_OK(ng_trainer_load_weights(t, good));
  const int64_t ids[5] = {0, 7, 600, 1358, 2707};
  const int64_t k = cora->info.classes;
  float want[5 * 16];
  int32_t cls[5];
  EXPECT_OK(ng_trainer_predict_nodes(want, cls, t, ids, 5));
  ng_engine_opts eo = NG_ENGINE_OPTS_INIT;
  eo.workers = 1;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, NULL, good, &eo));
  if (e) {
    ng_infer_request r;
    memset(&r, 0, sizeof r);
    r.node_ids = ids;
    r.n = 5;
    r.outputs = NG_OUT_LOGITS | NG_OUT_CLASS;
    ng_infer_result res;
    EXPECT_OK(ng_engine_infer(e, &r, &res));
    for (int64_t i = 0; res.logits && i < 5; i++) {
      EXPECT_EQ_I(res.cls[i], cls[i]);
      for (int64_t c = 0; c < k; c++)
        EXPECT_NEAR(res.logits[i * k + c], want[i * k + c], 1e-5);
    }
    ng_infer_result_free(&res);
    ng_engine_info ei;
    ng_engine_info_get(&ei, e);
    EXPECT_EQ_I(ei.layers, 2);
    EXPECT_EQ_I(ei.layer_dim[0], 16);
  }
  ng_engine_destroy(e);
  e = NULL;
  /* What is given must be the checkpoint's. */
  eo.normalize = NG_NORMALIZE_NONE;
  EXPECT_STATUS(ng_engine_create(&e, cora, NULL, good, &eo), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("--normalize-features row, this run uses none");
  eo.normalize = NG_NORMALIZE_ROW;
  ng_model_t summed = sage(NG_AGGREGATOR_SUM);
  EXPECT_STATUS(ng_engine_create(&e, cora, summed, good, &eo), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("--aggregator mean (layer 0), this run uses sum");
  EXPECT_OK(ng_engine_create(&e, cora, m, good, &eo));
  ng_engine_destroy(e);
  ng_model_destroy(summed);
  ng_trainer_destroy(t);
  ng_model_destroy(m);
}

int main(void) {
  open_cora();
  make_good();
  RUN_TEST(test_key_flip_refused);
  RUN_TEST(test_value_edits_refused);
  RUN_TEST(test_strict_values);
  RUN_TEST(test_version1_loads);
  RUN_TEST(test_mismatch_names_part);
  RUN_TEST(test_engine_builds_from_checkpoint);
  ng_dataset_close(cora);
  return ng_test_summary();
}
