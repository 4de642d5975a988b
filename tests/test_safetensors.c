/* safetensors reading and writing: round trips, the exact bytes another implementation expects,
 * atomic replacement, and hand-made hostile files for every validation rule. */
#include "rng.h"
#include "ng_test.h"
#include "safetensors_impl.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---- */

/* A deterministic, never all-zero pattern valid for `dtype` (BOOL holds only 0 and 1). */
static void fill(void *buf, ng_dtype dtype, size_t count, uint64_t seed) {
  ng_rng r;
  ng_rng_seed(&r, seed);
  for (size_t i = 0; i < count; i++) {
    uint64_t v = ng_rng_next(&r);
    switch (dtype) {
    case NG_DTYPE_F32:
      ((float *)buf)[i] = (float)((double)(v >> 11) * 0x1p-53 * 200.0 - 100.0);
      break;
    case NG_DTYPE_F64:
      ((double *)buf)[i] = (double)(v >> 11) * 0x1p-53 * 2e6 - 1e6;
      break;
    case NG_DTYPE_I32:
      ((int32_t *)buf)[i] = (int32_t)(uint32_t)v;
      break;
    case NG_DTYPE_I64:
      ((int64_t *)buf)[i] = (int64_t)v;
      break;
    case NG_DTYPE_U8:
    case NG_DTYPE_I8:
      ((uint8_t *)buf)[i] = (uint8_t)(v | 1);
      break;
    default:
      ((uint8_t *)buf)[i] = (uint8_t)(i % 3 != 1);
      break;
    }
  }
}

static ng_st_tensor make_tensor(const char *name, ng_dtype dtype, int ndim, const int64_t *shape,
                                const void *data) {
  ng_st_tensor t;
  memset(&t, 0, sizeof t);
  snprintf(t.name, sizeof t.name, "%s", name);
  t.dtype = dtype;
  t.ndim = ndim;
  size_t nbytes = ng__dtype_size(dtype);
  for (int i = 0; i < ndim; i++) {
    t.shape[i] = shape[i];
    nbytes *= (size_t)shape[i];
  }
  t.data = data;
  t.nbytes = nbytes;
  return t;
}

static ng_st_meta make_meta(const char *key, const char *value) {
  ng_st_meta m;
  memset(&m, 0, sizeof m);
  snprintf(m.key, sizeof m.key, "%s", key);
  snprintf(m.value, sizeof m.value, "%s", value);
  return m;
}

/* A metadata value, or "(none)" so that a missing one fails a comparison instead of crashing. */
static const char *meta_or(const ng_st_file *f, const char *key) {
  const char *v = ng__st_meta(f, key);
  return v ? v : "(none)";
}

/* Whether folder `dir` holds a file whose name contains ".tmp-" (a leftover temporary). */
static bool has_temporary(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return true;
  bool found = false;
  struct dirent *e;
  while ((e = readdir(d)))
    found |= strstr(e->d_name, ".tmp-") != NULL;
  closedir(d);
  return found;
}

/* Makes a fresh subfolder of the test folder and returns its path in `out`. */
static void make_dir(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s", ng_test_path(name));
  EXPECT_EQ_I(mkdir(out, 0755), 0);
}

/* Writes a hand-made file: the 8-byte little-endian `hlen`, `hdr_len` header bytes, then
 * `data_len` bytes of a non-zero pattern (bytes 0 and 1 alternate when `bool_data`). */
static void write_raw(const char *path, uint64_t hlen, const char *hdr, size_t hdr_len,
                      size_t data_len, bool bool_data) {
  size_t total = 8 + hdr_len + data_len;
  unsigned char *buf = malloc(total);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(hlen >> (8 * i));
  memcpy(buf + 8, hdr, hdr_len);
  for (size_t i = 0; i < data_len; i++)
    buf[8 + hdr_len + i] = bool_data ? (unsigned char)(i % 2) : (unsigned char)(i * 29 + 7);
  EXPECT_TRUE(ng_test_write_file(path, buf, total));
  free(buf);
}

/* Writes `json` as a header padded with spaces to a multiple of 8 bytes (as writers do, so that
 * the data section is aligned), followed by `data_len` bytes. */
static void write_st(const char *path, const char *json, size_t data_len) {
  size_t n = strlen(json), padded = (n + 7) / 8 * 8;
  char *hdr = malloc(padded + 1);
  memcpy(hdr, json, n);
  memset(hdr + n, ' ', padded - n);
  write_raw(path, padded, hdr, padded, data_len, false);
  free(hdr);
}

/* Expects opening the hand-made file of `json` + `data_len` bytes to fail with `want`, and the
 * message to name the file and contain `needle`. */
static void expect_reject(const char *label, const char *json, size_t data_len, ng_status want,
                          const char *needle) {
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("bad.safetensors"));
  write_st(path, json, data_len);
  int before = ng_test_failures;
  ng_st_file f;
  EXPECT_STATUS(ng__st_open(&f, path), want);
  EXPECT_ERR_HAS(path);
  EXPECT_ERR_HAS(needle);
  EXPECT_TRUE(f.map == NULL && f.n == 0);
  if (ng_test_failures != before)
    fprintf(stderr, "  (in case: %s)\n", label);
}

/* Expects the hand-made file to open, and returns its tensor count (-1 on failure). */
static int expect_accept(const char *label, const char *json, size_t data_len) {
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("good.safetensors"));
  write_st(path, json, data_len);
  ng_st_file f;
  ng_status st = ng__st_open(&f, path);
  if (st != NG_OK) {
    ng_test_fail(__FILE__, __LINE__, "case %s: %s (%s)", label, ng_status_name(st),
                 ng_last_error());
    return -1;
  }
  int n = f.n;
  ng__st_close(&f);
  return n;
}

/* ---- round trips ---- */

enum { RT_COUNT = 12 };
static const char *const RT_NAMES[RT_COUNT] = {
    "bytes", "w",     "scalar", "idx", "cube",  "i8",
    "mask",  "empty", "f64_3d", "one", "größe", "quote\"back\\slash\nnewline",
};
static const ng_dtype RT_DTYPES[RT_COUNT] = {
    NG_DTYPE_U8,   NG_DTYPE_F32, NG_DTYPE_F64, NG_DTYPE_I64, NG_DTYPE_I32, NG_DTYPE_I8,
    NG_DTYPE_BOOL, NG_DTYPE_F32, NG_DTYPE_F64, NG_DTYPE_U8,  NG_DTYPE_I32, NG_DTYPE_BOOL,
};
static const int RT_NDIM[RT_COUNT] = {1, 2, 0, 1, 3, 2, 1, 2, 3, 0, 1, 2};
static const int64_t RT_SHAPE[RT_COUNT][3] = {
    {3}, {2, 3}, {0}, {5}, {2, 2, 2}, {4, 1}, {5}, {0, 3}, {1, 2, 3}, {0}, {6}, {3, 3},
};

typedef struct {
  ng_st_tensor t[RT_COUNT];
  void *data[RT_COUNT];
  ng_st_meta meta[3];
} rt_set;

/* Tensors of every dtype in ranks 0..3, in an order where a 3-byte U8 tensor comes first (so
 * the writer must reorder the data to keep the rest aligned), plus metadata. */
static void rt_make(rt_set *s) {
  for (int i = 0; i < RT_COUNT; i++) {
    size_t count = 1;
    for (int d = 0; d < RT_NDIM[i]; d++)
      count *= (size_t)RT_SHAPE[i][d];
    s->data[i] = malloc(count * ng__dtype_size(RT_DTYPES[i]) + 1);
    fill(s->data[i], RT_DTYPES[i], count, (uint64_t)i + 100);
    s->t[i] = make_tensor(RT_NAMES[i], RT_DTYPES[i], RT_NDIM[i], RT_SHAPE[i], s->data[i]);
  }
  s->meta[0] = make_meta("format", "pt");
  s->meta[1] = make_meta("epoch", "3");
  s->meta[2] = make_meta("note", "a \"quoted\" word, é and a\ttab");
}

static void rt_free(rt_set *s) {
  for (int i = 0; i < RT_COUNT; i++)
    free(s->data[i]);
}

static void test_round_trip(void) {
  rt_set s;
  rt_make(&s);
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("rt.safetensors"));
  EXPECT_OK(ng__st_write(path, s.t, RT_COUNT, s.meta, 3));

  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, path));
  EXPECT_EQ_I(f.n, RT_COUNT);
  EXPECT_EQ_I(f.n_meta, 3);
  for (int i = 0; i < RT_COUNT; i++) {
    const ng_st_tensor *t = ng__st_find(&f, RT_NAMES[i]);
    EXPECT_TRUE(t != NULL);
    if (!t)
      continue;
    EXPECT_STR(t->name, RT_NAMES[i]);
    EXPECT_EQ_I(t->dtype, RT_DTYPES[i]);
    EXPECT_EQ_I(t->ndim, RT_NDIM[i]);
    for (int d = 0; d < RT_NDIM[i]; d++)
      EXPECT_EQ_I(t->shape[d], RT_SHAPE[i][d]);
    EXPECT_EQ_I(t->nbytes, s.t[i].nbytes);
    EXPECT_TRUE(t->nbytes == 0 || memcmp(t->data, s.data[i], t->nbytes) == 0);
    EXPECT_EQ_I((uintptr_t)t->data % ng__dtype_size(t->dtype), 0);
  }
  EXPECT_STR(meta_or(&f, "format"), "pt");
  EXPECT_STR(meta_or(&f, "epoch"), "3");
  EXPECT_STR(meta_or(&f, "note"), s.meta[2].value);
  EXPECT_TRUE(ng__st_find(&f, "missing") == NULL);
  EXPECT_TRUE(ng__st_meta(&f, "missing") == NULL);
  ng__st_close(&f);
  EXPECT_TRUE(f.map == NULL && f.n == 0);
  ng__st_close(&f);
  ng__st_close(NULL);

  /* No metadata and no tensors are valid files too. */
  EXPECT_OK(ng__st_write(path, s.t, 1, NULL, 0));
  EXPECT_OK(ng__st_open(&f, path));
  EXPECT_EQ_I(f.n, 1);
  EXPECT_EQ_I(f.n_meta, 0);
  ng__st_close(&f);
  EXPECT_OK(ng__st_write(path, NULL, 0, NULL, 0));
  EXPECT_OK(ng__st_open(&f, path));
  EXPECT_EQ_I(f.n, 0);
  ng__st_close(&f);
  rt_free(&s);
}

/* A larger generated tensor: 2^20 floats through the write loop and the mapping. */
static void test_round_trip_large(void) {
  const int64_t shape[2] = {1024, 1024};
  float *data = malloc(sizeof(float) << 20);
  fill(data, NG_DTYPE_F32, (size_t)1 << 20, 7);
  ng_st_tensor t[2] = {make_tensor("big", NG_DTYPE_F32, 2, shape, data),
                       make_tensor("big_bytes", NG_DTYPE_U8, 1, shape, data)};
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("large.safetensors"));
  EXPECT_OK(ng__st_write(path, t, 2, NULL, 0));
  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, path));
  const ng_st_tensor *big = ng__st_find(&f, "big");
  const ng_st_tensor *bytes = ng__st_find(&f, "big_bytes");
  EXPECT_TRUE(big && bytes);
  if (big && bytes) {
    EXPECT_EQ_I(big->nbytes, sizeof(float) << 20);
    EXPECT_TRUE(memcmp(big->data, data, big->nbytes) == 0);
    EXPECT_NEAR(((const float *)big->data)[12345], data[12345], 0);
    EXPECT_TRUE(memcmp(bytes->data, data, 1024) == 0);
  }
  ng__st_close(&f);
  free(data);
}

/* The file's first 8 bytes are the header length, the header is JSON padded with spaces so the
 * data starts at a multiple of 8, and its offsets tile the data section. */
static void test_header_layout(void) {
  rt_set s;
  rt_make(&s);
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("layout.safetensors"));
  EXPECT_OK(ng__st_write(path, s.t, RT_COUNT, s.meta, 3));
  size_t len = 0;
  unsigned char *buf = ng_test_read_file(path, &len);
  EXPECT_TRUE(buf != NULL && len >= 8);
  if (!buf || len < 8) {
    free(buf);
    rt_free(&s);
    return;
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)buf[i] << (8 * i);
  size_t data_total = 0;
  for (int i = 0; i < RT_COUNT; i++)
    data_total += s.t[i].nbytes;
  EXPECT_EQ_I(hlen % 8, 0);
  EXPECT_EQ_I(len, 8 + hlen + data_total);
  EXPECT_EQ_I(buf[8], '{');

  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf + 8, hlen, &end, false);
  EXPECT_TRUE(cJSON_IsObject(root));
  for (const char *p = end; end && p < (const char *)buf + 8 + hlen; p++)
    EXPECT_EQ_I(*p, ' ');
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
  EXPECT_TRUE(cJSON_IsObject(meta));
  EXPECT_STR(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "epoch")), "3");
  EXPECT_EQ_I(cJSON_GetArraySize(root), RT_COUNT + 1);

  static const char *const names[NG_DTYPE_COUNT_] = {"F32", "F64", "I32", "I64",
                                                     "U8",  "I8",  "BOOL"};
  for (int i = 0; i < RT_COUNT; i++) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, RT_NAMES[i]);
    EXPECT_TRUE(cJSON_IsObject(e));
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
    EXPECT_STR(dt ? dt : "(none)", names[RT_DTYPES[i]]);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    EXPECT_EQ_I(cJSON_GetArraySize(shape), RT_NDIM[i]);
    for (int d = 0; d < RT_NDIM[i]; d++)
      EXPECT_EQ_I(cJSON_GetNumberValue(cJSON_GetArrayItem(shape, d)), RT_SHAPE[i][d]);
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    EXPECT_EQ_I(cJSON_GetArraySize(offs), 2);
    double begin = cJSON_GetNumberValue(cJSON_GetArrayItem(offs, 0));
    double stop = cJSON_GetNumberValue(cJSON_GetArrayItem(offs, 1));
    EXPECT_EQ_I(stop - begin, s.t[i].nbytes);
    EXPECT_EQ_I((size_t)begin % ng__dtype_size(RT_DTYPES[i]), 0);
    EXPECT_TRUE(stop <= (double)data_total);
    if (stop <= (double)data_total && s.t[i].nbytes)
      EXPECT_TRUE(memcmp(buf + 8 + hlen + (size_t)begin, s.data[i], s.t[i].nbytes) == 0);
  }
  cJSON_Delete(root);
  free(buf);
  rt_free(&s);
}

/* The exact bytes for one F32 tensor "w" = {1, 2}, derived by hand from the format: the JSON
 * {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} is 54 bytes, padded with 2 spaces to
 * 56 (0x38), then 1.0f and 2.0f little-endian. This is what safetensors.torch.save_file writes
 * for {"w": torch.tensor([1., 2.])}, so PyTorch reads ours. */
static void test_exact_bytes(void) {
  static const char json[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  EXPECT_EQ_I(strlen(json), 54);
  unsigned char want[8 + 56 + 8] = {0x38, 0, 0, 0, 0, 0, 0, 0};
  memcpy(want + 8, json, 54);
  want[8 + 54] = ' ';
  want[8 + 55] = ' ';
  static const unsigned char values[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};
  memcpy(want + 64, values, 8);

  const float w[2] = {1.0f, 2.0f};
  const int64_t shape[1] = {2};
  ng_st_tensor t = make_tensor("w", NG_DTYPE_F32, 1, shape, w);
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("exact.safetensors"));
  EXPECT_OK(ng__st_write(path, &t, 1, NULL, 0));
  size_t len = 0;
  unsigned char *got = ng_test_read_file(path, &len);
  EXPECT_EQ_I(len, sizeof want);
  if (got && len == sizeof want) {
    EXPECT_TRUE(memcmp(got, want, sizeof want) == 0);
    char text[57] = {0};
    memcpy(text, got + 8, 56);
    EXPECT_STR(text, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ");
  }
  free(got);

  /* With metadata, as save_file(..., metadata={"format": "pt"}) writes it: the metadata first,
   * 85 bytes of JSON padded with 3 spaces to 88 (0x58). */
  static const char json_meta[] = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\","
                                  "\"shape\":[2],\"data_offsets\":[0,8]}}   ";
  EXPECT_EQ_I(strlen(json_meta), 88);
  ng_st_meta m = make_meta("format", "pt");
  EXPECT_OK(ng__st_write(path, &t, 1, &m, 1));
  got = ng_test_read_file(path, &len);
  EXPECT_EQ_I(len, 8 + 88 + 8);
  if (got && len == 8 + 88 + 8) {
    EXPECT_EQ_I(got[0], 0x58);
    EXPECT_TRUE(memcmp(got + 1, "\0\0\0\0\0\0\0", 7) == 0);
    EXPECT_TRUE(memcmp(got + 8, json_meta, 88) == 0);
    EXPECT_TRUE(memcmp(got + 96, values, 8) == 0);
  }
  free(got);
}

/* ---- atomic replacement ---- */

static void test_replace_is_atomic(void) {
  char dir[4096], path[4200];
  make_dir(dir, sizeof dir, "replace");
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const float a[4] = {1.5f, -2.0f, 3.25f, 4.0f};
  const int64_t b[3] = {-7, 1LL << 40, 9};
  const int64_t shape_a[1] = {4}, shape_b[1] = {3};
  ng_st_tensor ta = make_tensor("a", NG_DTYPE_F32, 1, shape_a, a);
  ng_st_tensor tb = make_tensor("b", NG_DTYPE_I64, 1, shape_b, b);
  EXPECT_OK(ng__st_write(path, &ta, 1, NULL, 0));
  struct stat st;
  EXPECT_EQ_I(stat(path, &st), 0);
  EXPECT_EQ_I(st.st_mode & 0777, 0644);

  ng_st_file old;
  EXPECT_OK(ng__st_open(&old, path));
  EXPECT_OK(ng__st_write(path, &tb, 1, NULL, 0));
  /* The old mapping still sees the whole old file: the new one arrived by rename, never by
   * rewriting the old file in place. */
  const ng_st_tensor *oa = ng__st_find(&old, "a");
  EXPECT_TRUE(oa && memcmp(oa->data, a, sizeof a) == 0);
  ng__st_close(&old);

  ng_st_file now;
  EXPECT_OK(ng__st_open(&now, path));
  EXPECT_TRUE(ng__st_find(&now, "a") == NULL);
  const ng_st_tensor *nb = ng__st_find(&now, "b");
  EXPECT_TRUE(nb && nb->nbytes == sizeof b && memcmp(nb->data, b, sizeof b) == 0);
  ng__st_close(&now);
  EXPECT_TRUE(!has_temporary(dir));
}

/* Every failure leaves the existing file byte for byte as it was, and no temporary file. */
static void test_failed_write_keeps_old(void) {
  char dir[4096], path[4200], other[4200];
  make_dir(dir, sizeof dir, "failed");
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const int32_t v[6] = {1, -2, 3, -4, 5, -6};
  const int64_t shape[2] = {2, 3};
  ng_st_tensor good = make_tensor("v", NG_DTYPE_I32, 2, shape, v);
  EXPECT_OK(ng__st_write(path, &good, 1, NULL, 0));
  size_t old_len = 0;
  unsigned char *old = ng_test_read_file(path, &old_len);
  EXPECT_TRUE(old != NULL);

  /* A folder that does not exist. */
  snprintf(other, sizeof other, "%s/no-such-folder/model.safetensors", dir);
  EXPECT_STATUS(ng__st_write(other, &good, 1, NULL, 0), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("no-such-folder/model.safetensors");
  EXPECT_ERR_HAS("no-such-folder does not exist");

  /* A destination that is a folder: refused before anything is written, and left as it was. */
  snprintf(other, sizeof other, "%s/occupied", dir);
  EXPECT_EQ_I(mkdir(other, 0755), 0);
  snprintf(other, sizeof other, "%s/occupied/keep", dir);
  EXPECT_TRUE(ng_test_write_file(other, "x", 1));
  snprintf(other, sizeof other, "%s/occupied", dir);
  EXPECT_STATUS(ng__st_write(other, &good, 1, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("is a folder");
  struct stat st;
  EXPECT_TRUE(stat(other, &st) == 0 && S_ISDIR(st.st_mode));
  snprintf(other, sizeof other, "%s/", dir);
  EXPECT_STATUS(ng__st_write(other, &good, 1, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("names a folder");

  /* A read-only folder stops everyone but root, so the case only runs without root. */
  if (geteuid() != 0) {
    EXPECT_EQ_I(chmod(dir, 0555), 0);
    EXPECT_STATUS(ng__st_write(path, &good, 1, NULL, 0), NG_ERR_IO);
    EXPECT_ERR_HAS("temporary file");
    EXPECT_EQ_I(chmod(dir, 0755), 0);
  } else {
    printf("note: running as root, so the read-only folder case is skipped\n");
  }

  /* Invalid tensors and metadata, each over the existing file. */
  ng_st_tensor bad[2] = {good, good};
  bad[0].nbytes = 20;
  EXPECT_STATUS(ng__st_write(path, bad, 1, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("tensor 'v' has 20 bytes but shape [2, 3] of I32 needs 24");
  bad[0] = good;
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("tensor 'v' is given twice");
  snprintf(bad[1].name, sizeof bad[1].name, "__metadata__");
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("cannot be called '__metadata__'");
  bad[1] = good;
  bad[1].name[0] = 'u';
  bad[1].dtype = NG_DTYPE_COUNT_;
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("tensor 'u': invalid dtype");
  bad[1].dtype = NG_DTYPE_I32;
  bad[1].ndim = NG_NPY_MAX_DIMS + 1;
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("rank 5");
  bad[1].ndim = 2;
  bad[1].shape[1] = -3;
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("dimension 1 is -3");
  bad[1].shape[1] = 3;
  bad[1].data = NULL;
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("tensor 'u' has no data");
  bad[1].data = v;
  memset(bad[1].name, 'n', sizeof bad[1].name);
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not NUL-terminated");
  snprintf(bad[1].name, sizeof bad[1].name, "bad\xff");
  EXPECT_STATUS(ng__st_write(path, bad, 2, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not valid UTF-8");
  ng_st_meta m[2] = {make_meta("k", "v1"), make_meta("k", "v2")};
  EXPECT_STATUS(ng__st_write(path, &good, 1, m, 2), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("metadata key 'k' is given twice");
  EXPECT_STATUS(ng__st_write(path, &good, 1, m, NG_ST_MAX_META + 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("metadata entries");
  EXPECT_STATUS(ng__st_write(path, &good, -1, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng__st_write(path, &good, NG_ST_MAX_TENSORS + 1, NULL, 0), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("between 0 and 256");

  size_t now_len = 0;
  unsigned char *now = ng_test_read_file(path, &now_len);
  EXPECT_TRUE(now && old && now_len == old_len && memcmp(now, old, old_len) == 0);
  EXPECT_TRUE(!has_temporary(dir));
  free(now);
  free(old);
}

/* ---- hostile files ---- */

static void test_reject_prefix(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("prefix.safetensors"));
  ng_st_file f;

  EXPECT_TRUE(ng_test_write_file(path, "\x02\0\0\0", 4));
  EXPECT_STATUS(ng__st_open(&f, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(path);
  EXPECT_ERR_HAS("too short");
  EXPECT_TRUE(ng_test_write_file(path, "", 0));
  EXPECT_STATUS(ng__st_open(&f, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("too short");

  /* A header length past the end of the file. */
  write_raw(path, 100, "{}", 2, 10, false);
  EXPECT_STATUS(ng__st_open(&f, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS(path);
  EXPECT_ERR_HAS("header length 100 runs past the end of the 20-byte file");
  /* Huge header lengths, including one that would wrap around when added to 8. */
  write_raw(path, 1ULL << 40, "{}", 2, 0, false);
  EXPECT_STATUS(ng__st_open(&f, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("header length 1099511627776 exceeds the limit");
  write_raw(path, UINT64_MAX, "{}", 2, 0, false);
  EXPECT_STATUS(ng__st_open(&f, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("exceeds the limit");
  /* An empty header is not JSON. */
  write_raw(path, 0, "", 0, 8, false);
  EXPECT_STATUS(ng__st_open(&f, path), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("not valid JSON");
  /* An unpadded header is fine where nothing needs alignment. */
  const char *u8 = "{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
  write_raw(path, strlen(u8), u8, strlen(u8), 3, false);
  EXPECT_OK(ng__st_open(&f, path));
  EXPECT_EQ_I(f.n, 1);
  EXPECT_EQ_I(f.tensors[0].nbytes, 3);
  EXPECT_EQ_I(((const unsigned char *)f.tensors[0].data)[1], 36);
  ng__st_close(&f);

  EXPECT_STATUS(ng__st_open(&f, ng_test_tmpdir()), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("not a regular file");
  EXPECT_STATUS(ng__st_open(&f, ng_test_path("absent.safetensors")), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("absent.safetensors");
}

static void test_reject_json(void) {
  expect_reject("truncated JSON", "{\"w\": ", 0, NG_ERR_FORMAT, "not valid JSON");
  expect_reject("array root", "[1, 2]", 0, NG_ERR_FORMAT, "header is a JSON array, not an object");
  expect_reject("string root", "\"w\"", 0, NG_ERR_FORMAT, "header is a JSON string");
  expect_reject("trailing text", "{} x", 0, NG_ERR_FORMAT, "unexpected text after the header");
  expect_reject("control character", "{\"w\x01\":{}}", 0, NG_ERR_FORMAT, "control character");
  expect_reject("invalid UTF-8", "{\"\xff\":{}}", 0, NG_ERR_FORMAT, "header byte 2 is not valid");
  expect_reject("UTF-16 surrogate", "{\"\xed\xa0\x80\":{}}", 0, NG_ERR_FORMAT, "not valid UTF-8");
  expect_reject("overlong UTF-8", "{\"\xc0\xaf\":{}}", 0, NG_ERR_FORMAT, "not valid UTF-8");
  expect_reject("entry not an object", "{\"w\": 3}", 0, NG_ERR_FORMAT,
                "tensor 'w': entry is number, not an object");
}

#define W_F32(shape, offs)                                                                         \
  "{\"w\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void test_reject_tensor_fields(void) {
  expect_reject("unknown dtype", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                8, NG_ERR_FORMAT, "tensor 'w': unknown dtype \"Q7\"; the supported ones are F32");
  expect_reject("unsupported dtype",
                "{\"w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8,
                NG_ERR_UNSUPPORTED, "tensor 'w': dtype F16 is not supported");
  expect_reject("dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}",
                8, NG_ERR_FORMAT, "\"dtype\" is number");
  expect_reject("dtype missing", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NG_ERR_FORMAT,
                "\"dtype\" is missing");
  expect_reject("shape missing", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
                NG_ERR_FORMAT, "\"shape\" is missing");
  expect_reject("shape not an array", W_F32("2", "[0,8]"), 8, NG_ERR_FORMAT, "\"shape\" is number");
  expect_reject("negative dimension", W_F32("[-2]", "[0,8]"), 8, NG_ERR_FORMAT,
                "tensor 'w': dimension 0 of \"shape\" is not an integer");
  expect_reject("fractional dimension", W_F32("[2,1.5]", "[0,8]"), 8, NG_ERR_FORMAT,
                "dimension 1 of \"shape\"");
  expect_reject("dimension past 2^53", W_F32("[9007199254740992]", "[0,8]"), 8, NG_ERR_FORMAT,
                "dimension 0 of \"shape\"");
  expect_reject("dimension as string", W_F32("[\"2\"]", "[0,8]"), 8, NG_ERR_FORMAT,
                "dimension 0 of \"shape\"");
  expect_reject("rank 5", W_F32("[1,1,1,1,2]", "[0,8]"), 8, NG_ERR_UNSUPPORTED,
                "tensor 'w' has 5 dimensions");
  expect_reject("overflowing shape", W_F32("[4294967296,4294967296,4294967296]", "[0,8]"), 8,
                NG_ERR_FORMAT, "tensor 'w': shape too large");
  expect_reject("overflowing element count", W_F32("[4194304,4194304,4194304,0]", "[0,0]"), 0,
                NG_ERR_FORMAT, "shape too large");
  expect_reject("offsets missing", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, NG_ERR_FORMAT,
                "\"data_offsets\" is not an array");
  expect_reject("three offsets", W_F32("[2]", "[0,8,8]"), 8, NG_ERR_FORMAT,
                "\"data_offsets\" is not an array [begin, end]");
  expect_reject("fractional offset", W_F32("[2]", "[0,7.5]"), 8, NG_ERR_FORMAT,
                "\"data_offsets\" is not an array");
  expect_reject("negative offset", W_F32("[2]", "[-8,0]"), 8, NG_ERR_FORMAT,
                "\"data_offsets\" is not an array");
  expect_reject("huge offset", W_F32("[2]", "[0,1e300]"), 8, NG_ERR_FORMAT,
                "\"data_offsets\" is not an array");
  expect_reject("end before begin", W_F32("[0]", "[8,0]"), 8, NG_ERR_FORMAT,
                "tensor 'w': data_offsets [8, 0] end before they begin");
  expect_reject("offsets past the data", W_F32("[4]", "[0,16]"), 8, NG_ERR_FORMAT,
                "tensor 'w': data_offsets [0, 16] run past the end of the 8-byte data section");
  expect_reject("size not shape times dtype", W_F32("[3]", "[0,8]"), 8, NG_ERR_FORMAT,
                "tensor 'w': data_offsets [0, 8] span 8 bytes but shape [3] of F32 needs 12");
  expect_reject("misaligned",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
                6, NG_ERR_FORMAT, "(data offset 2 after a");
  expect_reject("BOOL not 0 or 1",
                "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3,
                NG_ERR_FORMAT, "tensor 'm': BOOL element 0 is 7, not 0 or 1");
}

static void test_reject_layout(void) {
  expect_reject("overlap",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                12, NG_ERR_FORMAT, "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a'");
  expect_reject("same data twice",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                8, NG_ERR_FORMAT, "overlaps tensor");
  expect_reject("gap",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                20, NG_ERR_FORMAT, "4 unused bytes before tensor 'b'");
  expect_reject("trailing data", W_F32("[2]", "[0,8]"), 12, NG_ERR_FORMAT,
                "4 bytes after the last tensor");
  expect_reject("data without tensors", "{}", 8, NG_ERR_FORMAT, "8 bytes after the last tensor");
  expect_reject("duplicate tensor",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, NG_ERR_FORMAT, "tensor 'w' appears twice");

  /* Zero-size tensors may sit anywhere a tensor begins or ends; padding may use any JSON
   * whitespace; order in the header need not follow the data. */
  EXPECT_EQ_I(expect_accept("zero-size neighbours",
                            "{\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]},"
                            "\"z0\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]},"
                            "\"a\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                            "\"z1\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]}}\n\t",
                            16),
              4);
  EXPECT_EQ_I(expect_accept("empty", "{}", 0), 0);
  EXPECT_EQ_I(expect_accept("unknown keys ignored",
                            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                            "\"extra\":[1]}}",
                            8),
              1);
}

/* A header of `n` zero-size U8 tensors named t0, t1, ... plus `extra` JSON (malloc'd). */
static char *many_tensors(int n, const char *extra) {
  size_t cap = (size_t)n * 80 + strlen(extra) + 16;
  char *json = malloc(cap);
  size_t len = (size_t)snprintf(json, cap, "{%s", extra);
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(json + len, cap - len,
                            "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}",
                            i || *extra ? "," : "", i);
  snprintf(json + len, cap - len, "}");
  return json;
}

static void test_reject_limits(void) {
  char *json = many_tensors(NG_ST_MAX_TENSORS, "");
  EXPECT_EQ_I(expect_accept("256 tensors", json, 0), NG_ST_MAX_TENSORS);
  free(json);
  json = many_tensors(NG_ST_MAX_TENSORS + 1, "");
  expect_reject("257 tensors", json, 0, NG_ERR_FORMAT, "more than 256 tensors");
  free(json);

  char name[200], text[400];
  memset(name, 'n', sizeof name);
  name[127] = '\0';
  snprintf(text, sizeof text, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
           name);
  EXPECT_EQ_I(expect_accept("127-byte name", text, 1), 1);
  name[127] = 'n';
  name[128] = '\0';
  snprintf(text, sizeof text, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
           name);
  expect_reject("128-byte name", text, 1, NG_ERR_FORMAT, "is 128 bytes long; at most 127");
}

static void test_reject_metadata(void) {
  expect_reject("metadata not an object", "{\"__metadata__\":[\"pt\"]}", 0, NG_ERR_FORMAT,
                "\"__metadata__\" is array, not an object of strings");
  expect_reject("metadata value a number", "{\"__metadata__\":{\"format\":\"pt\",\"epoch\":3}}", 0,
                NG_ERR_FORMAT, "metadata value of 'epoch' is number");
  expect_reject("metadata value an object", "{\"__metadata__\":{\"cfg\":{\"a\":\"b\"}}}", 0,
                NG_ERR_FORMAT, "metadata value of 'cfg' is object");
  expect_reject("metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, NG_ERR_FORMAT,
                "\"__metadata__\" appears twice");
  expect_reject("metadata key twice", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0,
                NG_ERR_FORMAT, "metadata key 'k' appears twice");

  char text[2048], big[300];
  memset(big, 'k', sizeof big);
  big[64] = '\0';
  snprintf(text, sizeof text, "{\"__metadata__\":{\"%s\":\"v\"}}", big);
  expect_reject("metadata key too long", text, 0, NG_ERR_FORMAT, "longer than 63 bytes");
  big[63] = '\0';
  snprintf(text, sizeof text, "{\"__metadata__\":{\"%s\":\"v\"}}", big);
  EXPECT_EQ_I(expect_accept("63-byte metadata key", text, 0), 0);
  memset(big, 'v', sizeof big);
  big[256] = '\0';
  snprintf(text, sizeof text, "{\"__metadata__\":{\"k\":\"%s\"}}", big);
  expect_reject("metadata value too long", text, 0, NG_ERR_FORMAT,
                "metadata value of 'k' is longer than 255 bytes");

  size_t len = (size_t)snprintf(text, sizeof text, "{\"__metadata__\":{");
  for (int i = 0; i <= NG_ST_MAX_META; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%s\"k%d\":\"v\"", i ? "," : "", i);
  snprintf(text + len, sizeof text - len, "}}");
  expect_reject("33 metadata entries", text, 0, NG_ERR_FORMAT, "more than 32 metadata entries");
}

/* A file in the form PyTorch's safetensors writes: metadata first, data sorted by alignment,
 * header padded to 8 bytes; the values are checked element by element. */
static void test_read_reference_layout(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("reference.safetensors"));
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                     "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}";
  size_t n = strlen(json), padded = (n + 7) / 8 * 8;
  unsigned char buf[512] = {0};
  buf[0] = (unsigned char)padded;
  memcpy(buf + 8, json, n);
  memset(buf + 8 + n, ' ', padded - n);
  const int64_t step = 1234567890123LL;
  const float bias[2] = {-0.5f, 3.0f};
  memcpy(buf + 8 + padded, &step, 8);
  memcpy(buf + 8 + padded + 8, bias, 8);
  EXPECT_TRUE(ng_test_write_file(path, buf, 8 + padded + 16));

  ng_st_file f;
  EXPECT_OK(ng__st_open(&f, path));
  EXPECT_STR(meta_or(&f, "format"), "pt");
  const ng_st_tensor *b = ng__st_find(&f, "bias"), *s = ng__st_find(&f, "step");
  EXPECT_TRUE(b && s);
  if (b && s) {
    EXPECT_EQ_I(s->ndim, 0);
    EXPECT_EQ_I(*(const int64_t *)s->data, step);
    EXPECT_EQ_I(b->shape[0], 2);
    EXPECT_NEAR(((const float *)b->data)[0], -0.5, 0);
    EXPECT_NEAR(((const float *)b->data)[1], 3.0, 0);
  }
  ng__st_close(&f);

  /* The same image parsed from memory: nothing is mapped, and close leaves the buffer alone. */
  unsigned long long aligned[64];
  memcpy(aligned, buf, 8 + padded + 16);
  EXPECT_OK(ng__st_parse(&f, aligned, 8 + padded + 16, NULL));
  EXPECT_TRUE(f.map == NULL);
  EXPECT_EQ_I(f.n, 2);
  ng__st_close(&f);
  EXPECT_STATUS(ng__st_parse(&f, aligned, 8 + padded + 15, "mem"), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("mem: tensor 'bias'");
}

/* The pid of a process that has exited and been reaped. */
static pid_t dead_pid(void) {
  pid_t p = fork();
  if (p == 0)
    _exit(0);
  int status = 0;
  waitpid(p, &status, 0);
  return p;
}

/* Temporary files that killed writers left beside a destination (`<dst>.tmp-<pid>-XXXXXX`)
 * are removed by the next write to it; those of live processes, other destinations and names
 * without a pid stay (issue 26: they were never removed). */
static void test_stale_temporaries_removed(void) {
  char dir[4096], path[4200], stale[4300], live[4300], other[4300], old[4300];
  make_dir(dir, sizeof dir, "stale");
  snprintf(path, sizeof path, "%s/ck.safetensors", dir);
  snprintf(stale, sizeof stale, "%s.tmp-%ld-abcdef", path, (long)dead_pid());
  snprintf(live, sizeof live, "%s.tmp-%ld-abcdef", path, (long)getppid());
  snprintf(other, sizeof other, "%s/other.safetensors.tmp-%ld-abcdef", dir, (long)dead_pid());
  snprintf(old, sizeof old, "%s.tmp-Xy12ab", path);
  const char junk[] = "half-written";
  EXPECT_TRUE(ng_test_write_file(stale, junk, sizeof junk));
  EXPECT_TRUE(ng_test_write_file(live, junk, sizeof junk));
  EXPECT_TRUE(ng_test_write_file(other, junk, sizeof junk));
  EXPECT_TRUE(ng_test_write_file(old, junk, sizeof junk));
  float v[4] = {1, 2, 3, 4};
  ng_st_tensor t = {.name = "t", .dtype = NG_DTYPE_F32, .ndim = 1, .shape = {4}};
  t.data = v;
  t.nbytes = sizeof v;
  EXPECT_OK(ng__st_write(path, &t, 1, NULL, 0));
  EXPECT_TRUE(!ng_test_exists(stale));
  EXPECT_TRUE(ng_test_exists(live));
  EXPECT_TRUE(ng_test_exists(other));
  EXPECT_TRUE(ng_test_exists(old));
  /* A stale folder (the dataset writer's) goes with its contents. */
  char sub[4400], inner[4500];
  snprintf(sub, sizeof sub, "%s.tmp-%ld-ghijkl", path, (long)dead_pid());
  EXPECT_EQ_I(mkdir(sub, 0700), 0);
  snprintf(inner, sizeof inner, "%s/features.npy", sub);
  EXPECT_TRUE(ng_test_write_file(inner, junk, sizeof junk));
  EXPECT_EQ_I(ng__tmp_sweep(path), 1);
  EXPECT_TRUE(!ng_test_exists(inner));
  struct stat sb;
  EXPECT_TRUE(stat(sub, &sb) != 0);
}

int main(void) {
  RUN_TEST(test_round_trip);
  RUN_TEST(test_round_trip_large);
  RUN_TEST(test_header_layout);
  RUN_TEST(test_exact_bytes);
  RUN_TEST(test_replace_is_atomic);
  RUN_TEST(test_failed_write_keeps_old);
  RUN_TEST(test_stale_temporaries_removed);
  RUN_TEST(test_reject_prefix);
  RUN_TEST(test_reject_json);
  RUN_TEST(test_reject_tensor_fields);
  RUN_TEST(test_reject_layout);
  RUN_TEST(test_reject_limits);
  RUN_TEST(test_reject_metadata);
  RUN_TEST(test_read_reference_layout);
  return ng_test_summary();
}
