/* Datasets: the writer, ng_dataset_open's round trip, one broken file per validation rule, handle
 * checks, versioned structs and degree statistics. */
#include "dataset_impl.h"
#include "ng_test.h"
#include "ng_test_graph.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- building datasets ---- */

/* Everything a dataset holds, as plain arrays. */
typedef struct {
  const char *name;
  int undirected;
  int64_t nodes, edges;
  const int64_t *indptr;
  const void *indices;
  int index_bytes;
  int64_t feature_dim;
  const float *features;
  int32_t classes;
  const int32_t *labels;
  int64_t nsplit[3];
  const int64_t *split[3];
  const int64_t *orig_id; /* [nodes] or NULL */
} ds_src;

static ng_status add_array(ng_dataset_writer *w, ng_array_id id, ng_dtype dtype, int ndim,
                           const int64_t *shape, const void *data) {
  ng_npy *a = NULL;
  NG_CHECK(ng__writer_array(&a, w, id, dtype, ndim, shape));
  if (a->hdr.nbytes)
    memcpy(a->data, data, a->hdr.nbytes);
  return NG_OK;
}

static ng_status write_dataset(const char *dir, const ds_src *s) {
  ng_dataset_writer w;
  NG_CHECK(ng__writer_begin(&w, dir));
  ng_status st = NG_OK;
  int64_t shape[2] = {s->nodes + 1, 0};
  NG_CHECK_GOTO(st, add_array(&w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, shape, s->indptr), fail);
  shape[0] = s->edges;
  NG_CHECK_GOTO(st,
                add_array(&w, NG_ARR_INDICES, s->index_bytes == 8 ? NG_DTYPE_I64 : NG_DTYPE_I32, 1,
                          shape, s->indices),
                fail);
  if (s->feature_dim > 0) {
    int64_t fshape[2] = {s->nodes, s->feature_dim};
    NG_CHECK_GOTO(st, add_array(&w, NG_ARR_FEATURES, NG_DTYPE_F32, 2, fshape, s->features), fail);
  }
  shape[0] = s->nodes;
  if (s->classes > 0)
    NG_CHECK_GOTO(st, add_array(&w, NG_ARR_LABELS, NG_DTYPE_I32, 1, shape, s->labels), fail);
  for (int k = 0; k < 3; k++) {
    shape[0] = s->nsplit[k];
    if (s->nsplit[k] > 0)
      NG_CHECK_GOTO(
          st, add_array(&w, (ng_array_id)(NG_ARR_TRAIN + k), NG_DTYPE_I64, 1, shape, s->split[k]),
          fail);
  }
  if (s->orig_id) {
    shape[0] = s->nodes;
    NG_CHECK_GOTO(st, add_array(&w, NG_ARR_ORIG_ID, NG_DTYPE_I64, 1, shape, s->orig_id), fail);
  }
  ng_dataset_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info.size = sizeof meta.info;
  ng__strlcpy(meta.info.name, s->name, sizeof meta.info.name);
  meta.info.nodes = s->nodes;
  meta.info.edges = s->edges;
  meta.info.feature_dim = s->feature_dim;
  meta.info.classes = s->classes;
  meta.info.undirected = s->undirected;
  meta.info.index_bytes = s->index_bytes;
  meta.info.train = s->nsplit[0];
  meta.info.val = s->nsplit[1];
  meta.info.test = s->nsplit[2];
  meta.info.orig_ids = s->orig_id != NULL;
  snprintf(meta.source, sizeof meta.source, "test_dataset.c");
  return ng__writer_commit(&w, &meta);
fail:
  ng__writer_abort(&w);
  return st;
}

/* The small graph of most tests. Rows (neighbours each node aggregates from):
 *   0: 1 2   1: 0 2 1   2: 0 1 3   3: 2   4: (none)   5: 3
 * Row lengths 2 3 3 1 0 1; one self loop (1, 1); in-degrees 2 3 3 2 0 0. */
static const int64_t SMALL_INDPTR[7] = {0, 2, 5, 8, 9, 9, 10};
static const int32_t SMALL_INDICES[10] = {1, 2, 0, 2, 1, 0, 1, 3, 2, 3};
static const int64_t SMALL_INDICES64[10] = {1, 2, 0, 2, 1, 0, 1, 3, 2, 3};
static float SMALL_FEATURES[6 * 3];
static const int32_t SMALL_LABELS[6] = {0, 1, 2, 0, -1, 1};
static const int64_t SMALL_TRAIN[2] = {0, 1}, SMALL_VAL[1] = {2}, SMALL_TEST[2] = {3, 5};

static ds_src small_src(void) {
  for (int i = 0; i < 18; i++)
    SMALL_FEATURES[i] = 0.25f * (float)i - 1.5f;
  ds_src s = {
      .name = "small",
      .undirected = 0,
      .nodes = 6,
      .edges = 10,
      .indptr = SMALL_INDPTR,
      .indices = SMALL_INDICES,
      .index_bytes = 4,
      .feature_dim = 3,
      .features = SMALL_FEATURES,
      .classes = 3,
      .labels = SMALL_LABELS,
      .nsplit = {2, 1, 2},
      .split = {SMALL_TRAIN, SMALL_VAL, SMALL_TEST},
  };
  return s;
}

/* A fresh valid copy of the small dataset in the test folder; `dir` receives its path. */
static bool make_small(char *dir, size_t cap, const char *name) {
  snprintf(dir, cap, "%s", ng_test_path(name));
  ds_src s = small_src();
  ng_status st = write_dataset(dir, &s);
  if (st != NG_OK)
    fprintf(stderr, "writing %s failed: %s\n", dir, ng_last_error());
  return st == NG_OK;
}

/* ---- breaking datasets ---- */

static const char *in_dir(const char *dir, const char *file) {
  static char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  return path;
}

/* Sets (or with value NULL removes) `key` of dataset.json; "splits.train" reaches into the
 * nested object. Takes `value`. */
static bool json_set(const char *dir, const char *key, cJSON *value) {
  size_t len = 0;
  char *text = ng_test_read_file(in_dir(dir, "dataset.json"), &len);
  bool ok = text && len > 0;
  cJSON *root = ok ? cJSON_Parse(text) : NULL;
  free(text);
  if (!root) {
    cJSON_Delete(value);
    return false;
  }
  cJSON *obj = root;
  const char *dot = strchr(key, '.');
  char head[64];
  if (dot) {
    snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
    obj = cJSON_GetObjectItemCaseSensitive(root, head);
    key = dot + 1;
  }
  if (obj) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    if (value)
      cJSON_AddItemToObject(obj, key, value);
  } else {
    cJSON_Delete(value);
  }
  char *out = cJSON_Print(root);
  cJSON_Delete(root);
  ok = obj && out && ng_test_write_file(in_dir(dir, "dataset.json"), out, strlen(out));
  cJSON_free(out);
  return ok;
}

static bool json_set_num(const char *dir, const char *key, double v) {
  return json_set(dir, key, cJSON_CreateNumber(v));
}

static bool json_set_str(const char *dir, const char *key, const char *v) {
  return json_set(dir, key, cJSON_CreateString(v));
}

/* Overwrites element `index` (of `size` bytes) of an array file in place. */
static bool poke(const char *dir, const char *file, int64_t index, const void *value, size_t size) {
  char path[8192];
  snprintf(path, sizeof path, "%s", in_dir(dir, file));
  ng_npy a;
  if (ng__npy_map(&a, path, false) != NG_OK)
    return false;
  off_t at = (off_t)(a.hdr.data_offset + (size_t)index * size);
  ng__npy_close(&a);
  int fd = open(path, O_WRONLY);
  if (fd < 0)
    return false;
  bool ok = pwrite(fd, value, size, at) == (ssize_t)size;
  return close(fd) == 0 && ok;
}

static bool poke_i64(const char *dir, const char *file, int64_t index, int64_t v) {
  return poke(dir, file, index, &v, sizeof v);
}
static bool poke_i32(const char *dir, const char *file, int64_t index, int32_t v) {
  return poke(dir, file, index, &v, sizeof v);
}
static bool poke_f32(const char *dir, const char *file, int64_t index, float v) {
  return poke(dir, file, index, &v, sizeof v);
}

/* Replaces an array file by another array. */
static bool replace_array(const char *dir, const char *file, ng_dtype dtype, int ndim,
                          const int64_t *shape, const void *data) {
  char path[8192];
  snprintf(path, sizeof path, "%s", in_dir(dir, file));
  if (unlink(path) != 0)
    return false;
  return ng__npy_write(path, dtype, ndim, shape, data) == NG_OK;
}

/* Expects ng_dataset_open to fail with `status`, leave *out NULL, and report a message holding
 * both `file` and `text`. */
#define EXPECT_OPEN_ERR(dir, opts, status, file, text)                                             \
  do {                                                                                             \
    struct ng_dataset ng_sentinel_;                                                                \
    memset(&ng_sentinel_, 0, sizeof ng_sentinel_);                                                 \
    ng_dataset_t ng_ds_ = &ng_sentinel_;                                                           \
    EXPECT_STATUS(ng_dataset_open(&ng_ds_, (dir), (opts)), (status));                              \
    EXPECT_TRUE(ng_ds_ == NULL);                                                                   \
    EXPECT_ERR_HAS(file);                                                                          \
    EXPECT_ERR_HAS(text);                                                                          \
    if (ng_ds_ != &ng_sentinel_)                                                                   \
      ng_dataset_close(ng_ds_);                                                                    \
  } while (0)

static const ng_open_opts CHECK_FEATURES = {sizeof(ng_open_opts), 1, 0};

/* ---- round trips ---- */

static void expect_same_as_src(ng_dataset_t ds, const ds_src *s) {
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(info.size, sizeof info);
  EXPECT_STR(info.name, s->name);
  EXPECT_EQ_I(info.nodes, s->nodes);
  EXPECT_EQ_I(info.edges, s->edges);
  EXPECT_EQ_I(info.feature_dim, s->feature_dim);
  EXPECT_EQ_I(info.classes, s->classes);
  EXPECT_EQ_I(info.undirected, s->undirected);
  EXPECT_EQ_I(info.index_bytes, s->index_bytes);
  EXPECT_EQ_I(info.train, s->nsplit[0]);
  EXPECT_EQ_I(info.val, s->nsplit[1]);
  EXPECT_EQ_I(info.test, s->nsplit[2]);

  EXPECT_EQ_I(ds->csr.nodes, s->nodes);
  EXPECT_EQ_I(ds->csr.nnz, s->edges);
  EXPECT_TRUE(memcmp(ds->csr.indptr, s->indptr, (size_t)(s->nodes + 1) * 8) == 0);
  EXPECT_TRUE((ds->csr.idx32 != NULL) == (s->index_bytes == 4));
  EXPECT_TRUE((ds->csr.idx64 != NULL) == (s->index_bytes == 8));
  const void *idx = s->index_bytes == 8 ? (const void *)ds->csr.idx64 : (const void *)ds->csr.idx32;
  EXPECT_TRUE(idx && memcmp(idx, s->indices, (size_t)s->edges * (size_t)s->index_bytes) == 0);
  if (s->feature_dim > 0)
    EXPECT_TRUE(ds->features &&
                memcmp(ds->features, s->features, (size_t)(s->nodes * s->feature_dim) * 4) == 0);
  else
    EXPECT_TRUE(ds->features == NULL);
  if (s->classes > 0)
    EXPECT_TRUE(ds->labels && memcmp(ds->labels, s->labels, (size_t)s->nodes * 4) == 0);
  else
    EXPECT_TRUE(ds->labels == NULL);
  for (int k = 0; k < 3; k++) {
    if (s->nsplit[k] > 0)
      EXPECT_TRUE(ds->split[k] && memcmp(ds->split[k], s->split[k], (size_t)s->nsplit[k] * 8) == 0);
    else
      EXPECT_TRUE(ds->split[k] == NULL);
  }
}

static void test_round_trip_small(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "rt_small"));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, &CHECK_FEATURES));
  EXPECT_OK(ng__dataset_check(ds));
  ds_src s = small_src();
  if (ds)
    expect_same_as_src(ds, &s);
  ng_dataset_close(ds);

  /* Defaults (opts NULL), pre-faulted mappings, and a trailing slash on the folder. */
  char slash[4200];
  snprintf(slash, sizeof slash, "%s/", dir);
  const ng_open_opts populate = {sizeof(ng_open_opts), 1, 1};
  EXPECT_OK(ng_dataset_open(&ds, slash, &populate));
  if (ds)
    expect_same_as_src(ds, &s);
  ng_dataset_close(ds);
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_dataset_close(ds);
}

/* int64 indices, undirected, no features, no labels, no splits. */
static void test_round_trip_int64_minimal(void) {
  ds_src s = small_src();
  s.name = "minimal";
  s.undirected = 1;
  s.indices = SMALL_INDICES64;
  s.index_bytes = 8;
  s.feature_dim = 0;
  s.classes = 0;
  s.nsplit[0] = s.nsplit[1] = s.nsplit[2] = 0;
  const char *dir = ng_test_path("rt_min");
  char path[4096];
  snprintf(path, sizeof path, "%s", dir);
  EXPECT_OK(write_dataset(path, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, path, &CHECK_FEATURES));
  if (ds)
    expect_same_as_src(ds, &s);
  ng_dataset_close(ds);
}

/* An empty graph is a valid, if useless, dataset. */
static void test_round_trip_empty(void) {
  const int64_t indptr[1] = {0};
  ds_src s = {.name = "empty", .nodes = 0, .edges = 0, .indptr = indptr, .index_bytes = 4};
  s.indices = indptr; /* zero entries are read */
  char path[4096];
  snprintf(path, sizeof path, "%s", ng_test_path("rt_empty"));
  EXPECT_OK(write_dataset(path, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, path, &CHECK_FEATURES));
  ng_degree_stats st = NG_DEGREE_STATS_INIT;
  st.min = 99;
  EXPECT_OK(ng_dataset_degree_stats(&st, ds));
  EXPECT_EQ_I(st.min, 0);
  EXPECT_EQ_I(st.isolated, 0);
  ng_dataset_close(ds);
}

/* A dataset assembled from the real Cora arrays (features and labels as numpy wrote them, the
 * edge list stored both ways): opens with every check, and its degree statistics match the
 * counts of its README. */
static void test_cora(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s/cora/edges.txt", ng_test_data_dir());
  int64_t m = 0;
  int64_t *ends = ng_test_read_edges(src, &m);
  EXPECT_TRUE(ends != NULL);
  if (!ends)
    return;
  enum { N = 2708, E = 5278 };
  static int64_t indptr[N + 1];
  static int32_t indices[2 * E];
  EXPECT_EQ_I(m, E);
  if (m != E) {
    free(ends);
    return;
  }
  ng_test_undirected_csr(indptr, indices, N, ends, E);
  free(ends);

  ng_npy feat, lab;
  snprintf(src, sizeof src, "%s/cora/features.npy", ng_test_data_dir());
  EXPECT_OK(ng__npy_map(&feat, src, false));
  snprintf(src, sizeof src, "%s/cora/labels.npy", ng_test_data_dir());
  EXPECT_OK(ng__npy_map(&lab, src, false));
  if (!feat.data || !lab.data) {
    ng__npy_close(&feat);
    ng__npy_close(&lab);
    return;
  }
  static int64_t train[140], val[500];
  for (int i = 0; i < 140; i++)
    train[i] = i;
  for (int i = 0; i < 500; i++)
    val[i] = 140 + i;
  ds_src s = {.name = "cora",
              .undirected = 1,
              .nodes = N,
              .edges = 2 * E,
              .indptr = indptr,
              .indices = indices,
              .index_bytes = 4,
              .feature_dim = 1433,
              .features = feat.data,
              .classes = 7,
              .labels = lab.data,
              .nsplit = {140, 500, 0},
              .split = {train, val, NULL}};
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path("cora"));
  EXPECT_OK(write_dataset(dir, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, &CHECK_FEATURES));
  if (ds) {
    expect_same_as_src(ds, &s);
    ng_degree_stats st = NG_DEGREE_STATS_INIT;
    EXPECT_OK(ng_dataset_degree_stats(&st, ds));
    EXPECT_EQ_I(st.isolated, 0);
    EXPECT_EQ_I(st.self_loops, 0);
    EXPECT_TRUE(st.min >= 1);
    EXPECT_NEAR(st.mean, 2.0 * E / N, 1e-12);
    /* Undirected: in-degrees equal row lengths, so the largest of each agree. */
    EXPECT_EQ_I(st.in_max, st.max);
    EXPECT_TRUE(st.p50 <= st.p90 && st.p90 <= st.p99 && st.p99 <= st.max);
    EXPECT_TRUE(st.powerlaw_exponent > 1.5 && st.powerlaw_exponent < 4.0);
    EXPECT_TRUE(st.powerlaw_xmin >= 1);
  }
  ng_dataset_close(ds);
  ng__npy_close(&feat);
  ng__npy_close(&lab);
}

/* ---- the writer ---- */

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
  closedir(d);
  return n;
}

static void test_writer_refuses_existing_and_cleans_up(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "wr_exists"));
  ng_dataset_writer w;
  EXPECT_STATUS(ng__writer_begin(&w, dir), NG_ERR_EXISTS);
  EXPECT_ERR_HAS("wr_exists already exists");

  /* Abort after creating arrays: nothing is left beside the destination. */
  char parent[4096];
  snprintf(parent, sizeof parent, "%s", ng_test_path("wr_abort"));
  EXPECT_TRUE(mkdir(parent, 0755) == 0);
  char dst[4200];
  snprintf(dst, sizeof dst, "%s/out", parent);
  EXPECT_OK(ng__writer_begin(&w, dst));
  ng_npy *a = NULL;
  int64_t shape[1] = {4};
  EXPECT_OK(ng__writer_array(&a, &w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, shape));
  EXPECT_STATUS(ng__writer_array(&a, &w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, shape), NG_ERR_INTERNAL);
  EXPECT_EQ_I(count_entries(parent), 1); /* the temporary folder */
  ng__writer_abort(&w);
  EXPECT_EQ_I(count_entries(parent), 0);

  /* The destination appears while writing: commit fails and removes its temporary folder. The
   * dataset is a valid one (3 nodes, no edges): commit opens it before the rename. */
  EXPECT_OK(ng__writer_begin(&w, dst));
  EXPECT_OK(ng__writer_array(&a, &w, NG_ARR_INDPTR, NG_DTYPE_I64, 1, shape));
  const int64_t no_edges[1] = {0};
  EXPECT_OK(ng__writer_array(&a, &w, NG_ARR_INDICES, NG_DTYPE_I32, 1, no_edges));
  EXPECT_TRUE(mkdir(dst, 0755) == 0);
  EXPECT_TRUE(ng_test_write_file(in_dir(dst, "other"), "x", 1));
  ng_dataset_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.info = (ng_dataset_info)NG_DATASET_INFO_INIT;
  ng__strlcpy(meta.info.name, "appeared", sizeof meta.info.name);
  meta.info.nodes = 3;
  meta.info.index_bytes = 4;
  EXPECT_STATUS(ng__writer_commit(&w, &meta), NG_ERR_EXISTS);
  EXPECT_ERR_HAS("out: cannot move");
  EXPECT_EQ_I(count_entries(parent), 1); /* only the folder that appeared */
}

/* ---- dataset.json rules ---- */

static void test_json_missing_or_not_a_file(void) {
  char dir[4096];
  EXPECT_OPEN_ERR(ng_test_path("no_such_folder"), NULL, NG_ERR_NOT_FOUND, "no_such_folder",
                  "no such dataset folder");
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_missing"));
  EXPECT_TRUE(unlink(in_dir(dir, "dataset.json")) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_NOT_FOUND, "j_missing/dataset.json", "missing");

  /* A file given as the folder. */
  EXPECT_OPEN_ERR(in_dir(dir, "indptr.npy"), NULL, NG_ERR_FORMAT, "indptr.npy", "not a folder");

  EXPECT_TRUE(mkdir(in_dir(dir, "dataset.json"), 0755) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "not a regular file");
  EXPECT_TRUE(rmdir(in_dir(dir, "dataset.json")) == 0);

  EXPECT_TRUE(symlink("/dev/zero", in_dir(dir, "dataset.json")) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "not a regular file");
  EXPECT_TRUE(unlink(in_dir(dir, "dataset.json")) == 0);

  EXPECT_TRUE(mkfifo(in_dir(dir, "dataset.json"), 0644) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "not a regular file");
  EXPECT_TRUE(unlink(in_dir(dir, "dataset.json")) == 0);

  /* Far larger than any dataset.json. */
  size_t big = (1 << 20) + 1;
  char *junk = malloc(big);
  EXPECT_TRUE(junk != NULL);
  if (junk) {
    memset(junk, ' ', big);
    EXPECT_TRUE(ng_test_write_file(in_dir(dir, "dataset.json"), junk, big));
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "far larger");
  }
  free(junk);
}

static void test_json_syntax_and_format(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_syntax"));
  const char *garbage = "{\"format\": \"neargnn-dataset\", \"version\": 1,, }";
  EXPECT_TRUE(ng_test_write_file(in_dir(dir, "dataset.json"), garbage, strlen(garbage)));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json",
                  "not valid JSON (error near line 1, column 45)");
  const char *second_line = "{\"format\": \"neargnn-dataset\",\n  \"version\": x}";
  EXPECT_TRUE(ng_test_write_file(in_dir(dir, "dataset.json"), second_line, strlen(second_line)));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "near line 2, column 14");
  EXPECT_TRUE(ng_test_write_file(in_dir(dir, "dataset.json"), "", 0));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "not valid JSON");
  EXPECT_TRUE(ng_test_write_file(in_dir(dir, "dataset.json"), "[1, 2]", 6));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "must be a JSON object");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_format"));
  EXPECT_TRUE(json_set_str(dir, "format", "some-other-format"));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "not a neargnn dataset");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_version"));
  EXPECT_TRUE(json_set_num(dir, "version", NG_DATASET_VERSION + 1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_UNSUPPORTED, "dataset.json", "upgrade neargnn");
  EXPECT_TRUE(json_set_num(dir, "version", 0));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "versions start at 1");
  EXPECT_TRUE(json_set_num(dir, "version", 1.5));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"version\" is 1.5");
}

static void test_json_required_keys(void) {
  static const char *const keys[] = {"format",       "version",     "nodes",       "edges",
                                     "classes",      "feature_dim", "index_dtype", "splits",
                                     "splits.train", "splits.val",  "splits.test"};
  for (size_t i = 0; i < NG_ARRAY_LEN(keys); i++) {
    char name[64], dir[4096], needle[64];
    snprintf(name, sizeof name, "j_req_%zu", i);
    EXPECT_TRUE(make_small(dir, sizeof dir, name));
    EXPECT_TRUE(json_set(dir, keys[i], NULL));
    snprintf(needle, sizeof needle, "\"%s\" is missing", keys[i]);
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", needle);
  }
}

static void test_json_types(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types"));
  EXPECT_TRUE(json_set_str(dir, "nodes", "6"));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json",
                  "\"nodes\" is a string; it must be a non-negative integer");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types2"));
  EXPECT_TRUE(json_set(dir, "format", cJSON_CreateNumber(1)));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"format\" is a number");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types3"));
  EXPECT_TRUE(json_set_num(dir, "undirected", 1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "must be true or false");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types4"));
  EXPECT_TRUE(json_set(dir, "name", cJSON_CreateNull()));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"name\" is null");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types5"));
  EXPECT_TRUE(json_set(dir, "splits", cJSON_CreateArray()));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"splits\" is an array");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types6"));
  EXPECT_TRUE(json_set(dir, "source", cJSON_CreateTrue()));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"source\" is a boolean");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types7"));
  EXPECT_TRUE(json_set_str(dir, "index_dtype", "int16"));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"int32\" or \"int64\"");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_types8"));
  EXPECT_TRUE(json_set_str(dir, "feature_dtype", "float16"));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_UNSUPPORTED, "dataset.json", "only float32");
}

static void test_json_counts(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_neg"));
  EXPECT_TRUE(json_set_num(dir, "edges", -10));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"edges\" is -10");
  EXPECT_TRUE(json_set_num(dir, "edges", 2.5));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "must be an integer");
  EXPECT_TRUE(json_set_num(dir, "edges", 1e300));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "at most 2^53");
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_neg_split"));
  EXPECT_TRUE(json_set_num(dir, "splits.val", -1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"splits.val\" is -1");

  /* int32 ids cannot number 2^31 nodes; int64 may (the arrays then disagree instead). */
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_idx32"));
  EXPECT_TRUE(json_set_num(dir, "nodes", 2147483648.0));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "store indices.npy as int64");
  EXPECT_TRUE(json_set_str(dir, "index_dtype", "int64"));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indptr.npy",
                  "shape [7], but dataset.json implies "
                  "[2147483649]");

  EXPECT_TRUE(make_small(dir, sizeof dir, "j_classes"));
  EXPECT_TRUE(json_set_num(dir, "classes", 2147483648.0));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "at most 65536 are accepted");
  /* A hand-edited class count far above the labels (issue 26: 1000001 classes made 10.8 GB of
   * training state) is refused before anything is allocated for it. */
  EXPECT_TRUE(json_set_num(dir, "classes", 1000001));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "\"classes\" is 1000001");
  /* The cap itself passes dataset.json, but not beside labels of 3 classes (check_labels). */
  EXPECT_TRUE(json_set_num(dir, "classes", 65536));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "j_classes",
                  "\"classes\" is 65536 but the largest label in labels.npy is 2");

  /* Splits need labels, and cannot hold more nodes than the graph. */
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_split_nolabels"));
  EXPECT_TRUE(json_set_num(dir, "classes", 0));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "split nodes need labels");
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_split_total"));
  EXPECT_TRUE(json_set_num(dir, "splits.test", 4));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "dataset.json", "the splits hold 7 nodes together");
}

static void test_json_name(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "j_name"));
  char longname[200];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  EXPECT_TRUE(json_set_str(dir, "name", longname));
  ng_dataset_t ds = NULL;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(strlen(info.name), sizeof info.name - 1);
  EXPECT_TRUE(strspn(info.name, "n") == sizeof info.name - 1);
  ng_dataset_close(ds);

  /* Unnamed datasets take their folder's name. */
  EXPECT_TRUE(json_set(dir, "name", NULL));
  ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_STR(info.name, "j_name");
  ng_dataset_close(ds);
}

/* ---- array presence, dtype and shape ---- */

static void test_arrays_missing_or_unexpected(void) {
  static const ng_array_id required[] = {NG_ARR_INDPTR, NG_ARR_INDICES, NG_ARR_FEATURES,
                                         NG_ARR_LABELS, NG_ARR_TRAIN,   NG_ARR_VAL,
                                         NG_ARR_TEST};
  for (size_t i = 0; i < NG_ARRAY_LEN(required); i++) {
    char name[64], dir[4096];
    snprintf(name, sizeof name, "a_missing_%zu", i);
    EXPECT_TRUE(make_small(dir, sizeof dir, name));
    EXPECT_TRUE(unlink(in_dir(dir, NG_ARRAY_FILE[required[i]])) == 0);
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_NOT_FOUND, NG_ARRAY_FILE[required[i]], "missing");
  }
  /* Present although dataset.json says the array is empty. */
  static const struct {
    const char *key;
    const char *file;
  } absent[] = {{"feature_dim", "features.npy"},
                {"splits.train", "train_idx.npy"},
                {"splits.val", "val_idx.npy"},
                {"splits.test", "test_idx.npy"}};
  for (size_t i = 0; i < NG_ARRAY_LEN(absent); i++) {
    char name[64], dir[4096];
    snprintf(name, sizeof name, "a_extra_%zu", i);
    EXPECT_TRUE(make_small(dir, sizeof dir, name));
    EXPECT_TRUE(json_set_num(dir, absent[i].key, 0));
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, absent[i].file, "present but dataset.json says");
  }
  /* Labels without classes (splits emptied too, so that dataset.json alone is consistent). */
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "a_extra_labels"));
  EXPECT_TRUE(json_set_num(dir, "classes", 0));
  EXPECT_TRUE(json_set_num(dir, "splits.train", 0));
  EXPECT_TRUE(json_set_num(dir, "splits.val", 0));
  EXPECT_TRUE(json_set_num(dir, "splits.test", 0));
  for (int k = 0; k < 3; k++)
    EXPECT_TRUE(unlink(in_dir(dir, NG_ARRAY_FILE[NG_ARR_TRAIN + k])) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "labels.npy", "\"classes\" is 0");
}

static void test_arrays_not_files(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "a_dir"));
  EXPECT_TRUE(unlink(in_dir(dir, "indices.npy")) == 0);
  EXPECT_TRUE(mkdir(in_dir(dir, "indices.npy"), 0755) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indices.npy", "not a regular file");

  EXPECT_TRUE(make_small(dir, sizeof dir, "a_devzero"));
  EXPECT_TRUE(unlink(in_dir(dir, "features.npy")) == 0);
  EXPECT_TRUE(symlink("/dev/zero", in_dir(dir, "features.npy")) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "features.npy", "not a regular file");

  EXPECT_TRUE(make_small(dir, sizeof dir, "a_fifo"));
  EXPECT_TRUE(unlink(in_dir(dir, "labels.npy")) == 0);
  EXPECT_TRUE(mkfifo(in_dir(dir, "labels.npy"), 0644) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "labels.npy", "not a regular file");

  EXPECT_TRUE(make_small(dir, sizeof dir, "a_garbage"));
  EXPECT_TRUE(ng_test_write_file(in_dir(dir, "val_idx.npy"), "garbage, not numpy", 18));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "val_idx.npy", "bad magic");

  EXPECT_TRUE(make_small(dir, sizeof dir, "a_truncated"));
  EXPECT_TRUE(truncate(in_dir(dir, "test_idx.npy"), 64 + 8) == 0);
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "test_idx.npy", "truncated");
}

static void test_arrays_dtype(void) {
  static const struct {
    const char *file;
    ng_dtype wrong;
    int64_t rows, cols;
    const char *needle;
  } cases[] = {
      {"indptr.npy", NG_DTYPE_I32, 7, 0, "dtype int32, but it must be int64"},
      {"indices.npy", NG_DTYPE_I64, 10, 0, "dtype int64, but it must be int32"},
      {"features.npy", NG_DTYPE_F64, 6, 3, "dtype float64, but it must be float32"},
      {"labels.npy", NG_DTYPE_I64, 6, 0, "dtype int64, but it must be int32"},
      {"train_idx.npy", NG_DTYPE_I32, 2, 0, "dtype int32, but it must be int64"},
      {"val_idx.npy", NG_DTYPE_U8, 1, 0, "dtype uint8, but it must be int64"},
      {"test_idx.npy", NG_DTYPE_F64, 2, 0, "dtype float64, but it must be int64"},
  };
  static const int64_t zeros[32] = {0};
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    char name[64], dir[4096];
    snprintf(name, sizeof name, "a_dtype_%zu", i);
    EXPECT_TRUE(make_small(dir, sizeof dir, name));
    int64_t shape[2] = {cases[i].rows, cases[i].cols};
    EXPECT_TRUE(
        replace_array(dir, cases[i].file, cases[i].wrong, cases[i].cols ? 2 : 1, shape, zeros));
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, cases[i].file, cases[i].needle);
  }
  /* int64 indices where dataset.json says int32, and the other way round. */
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "a_dtype_idx"));
  EXPECT_TRUE(json_set_str(dir, "index_dtype", "int64"));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indices.npy", "dtype int32, but it must be int64");
}

static void test_arrays_shape(void) {
  static const struct {
    const char *file;
    ng_dtype dtype;
    int ndim;
    int64_t shape[2];
    const char *needle;
  } cases[] = {
      {"indptr.npy", NG_DTYPE_I64, 1, {6, 0}, "shape [6], but dataset.json implies [7]"},
      {"indices.npy", NG_DTYPE_I32, 1, {11, 0}, "shape [11], but dataset.json implies [10]"},
      {"features.npy", NG_DTYPE_F32, 2, {6, 2}, "shape [6, 2], but dataset.json implies [6, 3]"},
      {"features.npy", NG_DTYPE_F32, 1, {18, 0}, "shape [18], but dataset.json implies [6, 3]"},
      {"labels.npy", NG_DTYPE_I32, 2, {6, 1}, "shape [6, 1], but dataset.json implies [6]"},
      {"train_idx.npy", NG_DTYPE_I64, 1, {3, 0}, "shape [3], but dataset.json implies [2]"},
      {"val_idx.npy", NG_DTYPE_I64, 0, {0, 0}, "shape [], but dataset.json implies [1]"},
  };
  static const int64_t data[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    char name[64], dir[4096];
    snprintf(name, sizeof name, "a_shape_%zu", i);
    EXPECT_TRUE(make_small(dir, sizeof dir, name));
    EXPECT_TRUE(
        replace_array(dir, cases[i].file, cases[i].dtype, cases[i].ndim, cases[i].shape, data));
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, cases[i].file, cases[i].needle);
  }
  /* dataset.json disagreeing with correct arrays is reported the same way. */
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "a_shape_json"));
  EXPECT_TRUE(json_set_num(dir, "feature_dim", 4));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "features.npy",
                  "shape [6, 3], but dataset.json implies [6, 4]");
}

/* ---- array contents ---- */

static void test_csr_structure(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "c_indptr0"));
  EXPECT_TRUE(poke_i64(dir, "indptr.npy", 0, 1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indptr.npy", "indptr[0] = 1, but it must be 0");

  /* Two places out of order: the first is reported. */
  EXPECT_TRUE(make_small(dir, sizeof dir, "c_monotone"));
  EXPECT_TRUE(poke_i64(dir, "indptr.npy", 4, 7));
  EXPECT_TRUE(poke_i64(dir, "indptr.npy", 2, 1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indptr.npy",
                  "indptr[2] = 1 < indptr[1] = 2: not monotone; the CSR is corrupt");

  EXPECT_TRUE(make_small(dir, sizeof dir, "c_last"));
  EXPECT_TRUE(poke_i64(dir, "indptr.npy", 6, 9));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indptr.npy",
                  "indptr[6] = 9, but dataset.json says \"edges\": 10");

  EXPECT_TRUE(make_small(dir, sizeof dir, "c_index_high"));
  EXPECT_TRUE(poke_i32(dir, "indices.npy", 7, 6));
  EXPECT_TRUE(poke_i32(dir, "indices.npy", 9, -4));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indices.npy",
                  "indices[7] = 6 (in row 2) is not a node id in [0, 6)");

  EXPECT_TRUE(make_small(dir, sizeof dir, "c_index_neg"));
  EXPECT_TRUE(poke_i32(dir, "indices.npy", 9, -1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indices.npy", "indices[9] = -1 (in row 5)");

  /* The same with int64 indices. */
  ds_src s = small_src();
  s.indices = SMALL_INDICES64;
  s.index_bytes = 8;
  snprintf(dir, sizeof dir, "%s", ng_test_path("c_index64"));
  EXPECT_OK(write_dataset(dir, &s));
  EXPECT_TRUE(poke_i64(dir, "indices.npy", 3, (int64_t)1 << 40));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indices.npy", "indices[3] = 1099511627776 (in row 1)");
}

static void test_labels_and_splits(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "l_high"));
  EXPECT_TRUE(poke_i32(dir, "labels.npy", 5, 3));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "labels.npy",
                  "labels[5] = 3 is outside [-1, 3) (-1 marks an unlabelled node)");
  EXPECT_TRUE(make_small(dir, sizeof dir, "l_low"));
  EXPECT_TRUE(poke_i32(dir, "labels.npy", 4, -2));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "labels.npy", "labels[4] = -2");

  EXPECT_TRUE(make_small(dir, sizeof dir, "s_range"));
  EXPECT_TRUE(poke_i64(dir, "val_idx.npy", 0, 6));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "val_idx.npy",
                  "val_idx[0] = 6 is not a node id in [0, 6)");
  EXPECT_TRUE(make_small(dir, sizeof dir, "s_range_neg"));
  EXPECT_TRUE(poke_i64(dir, "test_idx.npy", 1, -1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "test_idx.npy", "test_idx[1] = -1");

  /* Node 4 is unlabelled (-1): no split may hold it. */
  EXPECT_TRUE(make_small(dir, sizeof dir, "s_unlabelled"));
  EXPECT_TRUE(poke_i64(dir, "test_idx.npy", 1, 4));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "test_idx.npy",
                  "node 4 (test_idx[1]) has label -1 (unlabelled)");

  EXPECT_TRUE(make_small(dir, sizeof dir, "s_dup"));
  EXPECT_TRUE(poke_i64(dir, "train_idx.npy", 1, 0));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "train_idx.npy",
                  "node 0 appears twice (positions 0 and 1)");

  EXPECT_TRUE(make_small(dir, sizeof dir, "s_overlap"));
  EXPECT_TRUE(poke_i64(dir, "test_idx.npy", 1, 2));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "test_idx.npy",
                  "node 2 (position 1) is also in val_idx.npy (position 0)");
  EXPECT_TRUE(make_small(dir, sizeof dir, "s_overlap2"));
  EXPECT_TRUE(poke_i64(dir, "val_idx.npy", 0, 1));
  EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "val_idx.npy",
                  "node 1 (position 0) is also in train_idx.npy (position 1); the splits must "
                  "be disjoint");
}

/* orig_id.npy: present iff dataset.json says "orig_ids": true, int64 [nodes], non-negative. */
static void test_orig_ids(void) {
  static const int64_t ORIG[6] = {10, 20, 35, 36, 90, 1000000007};
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path("orig"));
  ds_src s = small_src();
  s.orig_id = ORIG;
  EXPECT_OK(write_dataset(dir, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  if (ds) {
    EXPECT_OK(ng_dataset_info_get(&info, ds));
    EXPECT_EQ_I(info.orig_ids, 1);
    EXPECT_TRUE(memcmp(ds->arrays[NG_ARR_ORIG_ID].data, ORIG, sizeof ORIG) == 0);
  }
  ng_dataset_close(ds);
  EXPECT_TRUE(poke_i64(dir, "orig_id.npy", 4, -3));
  EXPECT_STATUS(ng_dataset_open(&ds, dir, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("orig_id.npy");
  EXPECT_ERR_HAS("orig_id[4] = -3");
  /* The flag without the file, and the file without the flag. */
  EXPECT_TRUE(json_set(dir, "orig_ids", cJSON_CreateFalse()));
  EXPECT_STATUS(ng_dataset_open(&ds, dir, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("orig_id.npy");
  char plain[4096];
  EXPECT_TRUE(make_small(plain, sizeof plain, "orig-flag-only"));
  EXPECT_TRUE(json_set(plain, "orig_ids", cJSON_CreateTrue()));
  EXPECT_STATUS(ng_dataset_open(&ds, plain, NULL), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("orig_id.npy");
  EXPECT_TRUE(json_set(plain, "orig_ids", cJSON_CreateString("yes")));
  EXPECT_STATUS(ng_dataset_open(&ds, plain, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("orig_ids");
}

static void test_features_finite(void) {
  static const struct {
    float value;
    const char *needle;
  } cases[] = {{NAN, "features[4, 1] is NaN"},
               {INFINITY, "features[4, 1] is +Inf"},
               {-INFINITY, "features[4, 1] is -Inf"}};
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    char name[64], dir[4096];
    snprintf(name, sizeof name, "f_bad_%zu", i);
    EXPECT_TRUE(make_small(dir, sizeof dir, name));
    EXPECT_TRUE(poke_f32(dir, "features.npy", 16, NAN));
    EXPECT_TRUE(poke_f32(dir, "features.npy", 13, cases[i].value));
    EXPECT_OPEN_ERR(dir, &CHECK_FEATURES, NG_ERR_FORMAT, "features.npy", cases[i].needle);
    /* Without check_features the sampled check on open (every row of a small table) finds it
     * too, naming the row (issue 26: NaN features used to surface only as a training error). */
    EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, cases[i].needle, "sampled rows on open");
  }
}

/* A graph larger than one scan block, broken in two blocks: the lower position is reported
 * however the threads run. */
static void test_first_bad_across_blocks(void) {
  enum { N = 150000, D = 2 };
  int64_t *indptr = malloc((N + 1) * sizeof *indptr);
  int32_t *indices = malloc(2 * N * sizeof *indices);
  float *features = malloc((size_t)N * D * sizeof *features);
  int32_t *labels = malloc(N * sizeof *labels);
  int64_t *ids = malloc(N * sizeof *ids);
  EXPECT_TRUE(indptr && indices && features && labels && ids);
  if (!indptr || !indices || !features || !labels || !ids)
    goto done;
  /* Splits of more than one block each: train [0, 80000), val [80000, 100000), test the rest. */
  for (int64_t v = 0; v < N; v++) {
    labels[v] = (int32_t)(v % 3);
    ids[v] = v;
  }
  for (int64_t v = 0; v <= N; v++)
    indptr[v] = 2 * v;
  for (int64_t v = 0; v < N; v++) {
    indices[2 * v] = (int32_t)((v + 1) % N);
    indices[2 * v + 1] = (int32_t)((v + N - 1) % N);
    features[D * v] = (float)(v % 17) * 0.5f;
    features[D * v + 1] = -(float)(v % 5);
  }
  ds_src s = {.name = "ring",
              .undirected = 1,
              .nodes = N,
              .edges = 2 * N,
              .indptr = indptr,
              .indices = indices,
              .index_bytes = 4,
              .feature_dim = D,
              .features = features,
              .classes = 3,
              .labels = labels,
              .nsplit = {80000, 20000, N - 100000},
              .split = {ids, ids + 80000, ids + 100000}};
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path("ring"));
  EXPECT_OK(write_dataset(dir, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, &CHECK_FEATURES));
  if (ds) {
    ng_degree_stats st = NG_DEGREE_STATS_INIT;
    EXPECT_OK(ng_dataset_degree_stats(&st, ds));
    EXPECT_EQ_I(st.min, 2);
    EXPECT_EQ_I(st.max, 2);
    EXPECT_EQ_I(st.in_max, 2);
    EXPECT_NEAR(st.in_top1pct_share, 0.01, 1e-12);
  }
  ng_dataset_close(ds);

  static const char *const rounds[] = {"ring_idx", "ring_ptr", "ring_f", "ring_split"};
  for (int round = 0; round < 4; round++) {
    snprintf(dir, sizeof dir, "%s", ng_test_path(rounds[round]));
    EXPECT_OK(write_dataset(dir, &s));
    if (round == 0) {
      EXPECT_TRUE(poke_i32(dir, "indices.npy", 250000, N));
      EXPECT_TRUE(poke_i32(dir, "indices.npy", 140001, -7));
      EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indices.npy",
                      "indices[140001] = -7 (in row 70000)");
    } else if (round == 1) {
      EXPECT_TRUE(poke_i64(dir, "indptr.npy", 140000, 0));
      EXPECT_TRUE(poke_i64(dir, "indptr.npy", 70001, 5));
      EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "indptr.npy",
                      "indptr[70001] = 5 < indptr[70000] = 140000");
    } else if (round == 2) {
      EXPECT_TRUE(poke_f32(dir, "features.npy", 2 * 140000, NAN));
      EXPECT_TRUE(poke_f32(dir, "features.npy", 2 * 65537 + 1, INFINITY));
      EXPECT_OPEN_ERR(dir, &CHECK_FEATURES, NG_ERR_FORMAT, "features.npy",
                      "features[65537, 1] is +Inf");
      /* Rows 65537 and 140000 fall between the 4098 sampled rows: only the full check sees
       * them. The first and the last row are always sampled. */
      ng_dataset_t sampled = NULL;
      EXPECT_OK(ng_dataset_open(&sampled, dir, NULL));
      ng_dataset_close(sampled);
      EXPECT_TRUE(poke_f32(dir, "features.npy", 2 * (N - 1) + 1, -INFINITY));
      EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "features[149999, 1] is -Inf",
                      "found by the check of 4098 sampled rows on open");
      EXPECT_TRUE(poke_f32(dir, "features.npy", 1, NAN));
      EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "features[0, 1] is NaN", "--check-features");
    } else {
      /* Two repeats: the one met first in train, val, test order is reported. */
      EXPECT_TRUE(poke_i64(dir, "test_idx.npy", 30000, 70000));
      EXPECT_TRUE(poke_i64(dir, "val_idx.npy", 19999, 79999));
      EXPECT_OPEN_ERR(dir, NULL, NG_ERR_FORMAT, "val_idx.npy",
                      "node 79999 (position 19999) is also in train_idx.npy (position 79999)");
    }
  }
done:
  free(indptr);
  free(indices);
  free(features);
  free(labels);
  free(ids);
}

/* ---- handles and versioned structs ---- */

static void test_handles(void) {
  EXPECT_STATUS(ng__dataset_check(NULL), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NULL");
  struct ng_dataset closed;
  memset(&closed, 0, sizeof closed); /* what a closed handle holds: magic 0 */
  EXPECT_STATUS(ng__dataset_check(&closed), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("closed");
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_STATUS(ng_dataset_info_get(&info, &closed), NG_ERR_INVALID_ARG);
  ng_degree_stats st = NG_DEGREE_STATS_INIT;
  EXPECT_STATUS(ng_dataset_degree_stats(&st, NULL), NG_ERR_INVALID_ARG);
  ng_dataset_close(NULL);
  ng_dataset_close(&closed); /* ignored: not an open handle */

  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "h_args"));
  EXPECT_STATUS(ng_dataset_open(NULL, dir, NULL), NG_ERR_INVALID_ARG);
  ng_dataset_t ds = NULL;
  EXPECT_STATUS(ng_dataset_open(&ds, NULL, NULL), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng_dataset_open(&ds, "", NULL), NG_ERR_INVALID_ARG);
  ng_open_opts bad = NG_OPEN_OPTS_INIT;
  bad.size = 0;
  EXPECT_STATUS(ng_dataset_open(&ds, dir, &bad), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_OPEN_OPTS_INIT");
  EXPECT_TRUE(ds == NULL);

  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  EXPECT_STATUS(ng_dataset_info_get(NULL, ds), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng_dataset_degree_stats(NULL, ds), NG_ERR_INVALID_ARG);
  info.size = 0;
  EXPECT_STATUS(ng_dataset_info_get(&info, ds), NG_ERR_INVALID_ARG);
  st.size = 3;
  EXPECT_STATUS(ng_dataset_degree_stats(&st, ds), NG_ERR_INVALID_ARG);
  ng_dataset_close(ds);
}

/* Callers compiled against older, smaller structs: only their fields are read or written. */
static void test_versioned_structs(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "v_small"));
  /* Old options: a field past `size` is never read, so check_features set there is ignored. */
  EXPECT_TRUE(poke_f32(dir, "features.npy", 2, NAN));
  /* (The sampled check on open, which every row of this small table is in, reports it then;
   * the full check's message lacks "sampled".) */
  ng_open_opts old = {offsetof(ng_open_opts, check_features), 1, 0};
  EXPECT_OPEN_ERR(dir, &old, NG_ERR_FORMAT, "features[0, 2] is NaN", "sampled rows on open");
  old.size = offsetof(ng_open_opts, populate);
  EXPECT_OPEN_ERR(dir, &old, NG_ERR_FORMAT, "features.npy", "features[0, 2] is NaN");
  EXPECT_TRUE(!strstr(ng_last_error(), "sampled"));
  old.check_features = 0;
  EXPECT_TRUE(poke_f32(dir, "features.npy", 2, 0.5f));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, &old));

  ng_dataset_info info;
  memset(&info, 0x5a, sizeof info);
  info.size = offsetof(ng_dataset_info, train);
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(info.size, offsetof(ng_dataset_info, train));
  EXPECT_STR(info.name, "small");
  EXPECT_EQ_I(info.nodes, 6);
  EXPECT_EQ_I(info.index_bytes, 4);
  EXPECT_EQ_I(info.train, 0x5a5a5a5a5a5a5a5a);
  EXPECT_EQ_I(info.test, 0x5a5a5a5a5a5a5a5a);

  /* A newer caller's larger struct: the known part is filled, the rest left alone. */
  struct {
    ng_dataset_info info;
    int64_t future;
  } newer;
  memset(&newer, 0x33, sizeof newer);
  newer.info.size = sizeof newer;
  EXPECT_OK(ng_dataset_info_get(&newer.info, ds));
  EXPECT_EQ_I(newer.info.size, sizeof newer);
  EXPECT_EQ_I(newer.info.test, 2);
  EXPECT_EQ_I(newer.future, 0x3333333333333333);

  ng_degree_stats st;
  memset(&st, 0x5a, sizeof st);
  st.size = offsetof(ng_degree_stats, p50);
  EXPECT_OK(ng_dataset_degree_stats(&st, ds));
  EXPECT_EQ_I(st.max, 3);
  EXPECT_NEAR(st.mean, 10.0 / 6.0, 1e-12);
  EXPECT_EQ_I(st.p50, 0x5a5a5a5a5a5a5a5a);
  ng_dataset_close(ds);
}

/* ---- degree statistics ---- */

static void test_degree_stats_small(void) {
  char dir[4096];
  EXPECT_TRUE(make_small(dir, sizeof dir, "d_small"));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_degree_stats st = NG_DEGREE_STATS_INIT;
  EXPECT_OK(ng_dataset_degree_stats(&st, ds));
  /* Row lengths 2 3 3 1 0 1, sorted 0 1 1 2 3 3; nearest-rank percentiles. */
  EXPECT_EQ_I(st.min, 0);
  EXPECT_EQ_I(st.max, 3);
  EXPECT_NEAR(st.mean, 10.0 / 6.0, 1e-12);
  EXPECT_EQ_I(st.p50, 1);
  EXPECT_EQ_I(st.p90, 3);
  EXPECT_EQ_I(st.p99, 3);
  EXPECT_EQ_I(st.isolated, 1);
  EXPECT_EQ_I(st.self_loops, 1);
  /* In-degrees 2 3 3 2 0 0: the top 1% is one node with 3 of the 10 entries. */
  EXPECT_EQ_I(st.in_max, 3);
  EXPECT_NEAR(st.in_top1pct_share, 0.3, 1e-12);
  /* Six samples are too few for a power-law fit. */
  EXPECT_NEAR(st.powerlaw_exponent, 0.0, 0.0);
  EXPECT_EQ_I(st.powerlaw_xmin, 0);
  ng_dataset_close(ds);
}

/* Row v lists nodes 0..v-1: distinct row lengths 0..6, where nearest-rank percentiles differ
 * from rounded-down ranks (p50 of 7 is the 4th value, 3). */
static void test_degree_stats_percentiles(void) {
  enum { N = 7 };
  int64_t indptr[N + 1] = {0};
  int32_t indices[N * (N - 1) / 2];
  for (int v = 0; v < N; v++) {
    indptr[v + 1] = indptr[v] + v;
    for (int u = 0; u < v; u++)
      indices[indptr[v] + u] = u;
  }
  ds_src s = {.name = "triangle",
              .nodes = N,
              .edges = indptr[N],
              .indptr = indptr,
              .indices = indices,
              .index_bytes = 4};
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path("d_triangle"));
  EXPECT_OK(write_dataset(dir, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_degree_stats st = NG_DEGREE_STATS_INIT;
  EXPECT_OK(ng_dataset_degree_stats(&st, ds));
  EXPECT_EQ_I(st.min, 0);
  EXPECT_EQ_I(st.max, 6);
  EXPECT_NEAR(st.mean, 3.0, 1e-12);
  EXPECT_EQ_I(st.p50, 3);
  EXPECT_EQ_I(st.p90, 6);
  EXPECT_EQ_I(st.p99, 6);
  EXPECT_EQ_I(st.isolated, 1);
  EXPECT_EQ_I(st.self_loops, 0);
  /* Node u is a neighbour of the 6 - u later nodes: node 0 holds 6 of the 21 entries. */
  EXPECT_EQ_I(st.in_max, 6);
  EXPECT_NEAR(st.in_top1pct_share, 6.0 / 21.0, 1e-12);
  ng_dataset_close(ds);
}

/* Row lengths drawn deterministically from a discrete power law; the stats report the same fit
 * as ng__powerlaw_fit on those lengths, near the exponent they were drawn with. */
static void test_degree_stats_powerlaw(void) {
  enum { N = 4000 };
  static int64_t indptr[N + 1], deg[N];
  int64_t total = 0;
  for (int64_t v = 0; v < N; v++) {
    /* Inverse CDF of P(X >= x) = x^(1 - 2.5) at evenly spaced quantiles, capped. */
    double u = ((double)v + 0.5) / N;
    int64_t d = (int64_t)floor(pow(u, -1.0 / 1.5));
    deg[v] = NG_MIN(d, N - 1);
    total += deg[v];
  }
  int32_t *indices = malloc((size_t)total * sizeof *indices);
  EXPECT_TRUE(indices != NULL);
  if (!indices)
    return;
  indptr[0] = 0;
  uint64_t x = 88172645463325252ull;
  for (int64_t v = 0; v < N; v++) {
    indptr[v + 1] = indptr[v] + deg[v];
    for (int64_t e = indptr[v]; e < indptr[v + 1]; e++) {
      x ^= x << 13; /* xorshift64: a fixed pseudo-random neighbour sequence */
      x ^= x >> 7;
      x ^= x << 17;
      indices[e] = (int32_t)(x % N);
    }
  }
  ds_src s = {.name = "powerlaw",
              .nodes = N,
              .edges = total,
              .indptr = indptr,
              .indices = indices,
              .index_bytes = 4};
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path("d_powerlaw"));
  EXPECT_OK(write_dataset(dir, &s));
  ng_dataset_t ds = NULL;
  EXPECT_OK(ng_dataset_open(&ds, dir, NULL));
  ng_degree_stats st = NG_DEGREE_STATS_INIT;
  EXPECT_OK(ng_dataset_degree_stats(&st, ds));
  ng_powerlaw_fit fit;
  EXPECT_OK(ng__powerlaw_fit(&fit, deg, N)); /* sorts deg */
  EXPECT_NEAR(st.powerlaw_exponent, fit.alpha, 0.0);
  EXPECT_EQ_I(st.powerlaw_xmin, fit.xmin);
  EXPECT_NEAR(st.powerlaw_exponent, 2.5, 0.3);
  EXPECT_EQ_I(st.min, deg[0]);
  EXPECT_EQ_I(st.max, deg[N - 1]);
  EXPECT_EQ_I(st.p50, deg[N / 2 - 1]);
  EXPECT_EQ_I(st.p90, deg[N * 9 / 10 - 1]);
  EXPECT_EQ_I(st.p99, deg[N * 99 / 100 - 1]);
  EXPECT_NEAR(st.mean, (double)total / N, 1e-9);
  /* In-degrees counted independently. */
  int64_t *in = calloc(N, sizeof *in);
  int64_t in_max = 0, loops = 0;
  for (int64_t v = 0; v < N && in; v++)
    for (int64_t e = indptr[v]; e < indptr[v + 1]; e++) {
      in[indices[e]]++;
      loops += indices[e] == v;
    }
  for (int64_t v = 0; v < N && in; v++)
    in_max = NG_MAX(in_max, in[v]);
  EXPECT_EQ_I(st.in_max, in_max);
  EXPECT_EQ_I(st.self_loops, loops);
  free(in);
  ng_dataset_close(ds);
  free(indices);
}

int main(void) {
  RUN_TEST(test_round_trip_small);
  RUN_TEST(test_round_trip_int64_minimal);
  RUN_TEST(test_round_trip_empty);
  RUN_TEST(test_cora);
  RUN_TEST(test_writer_refuses_existing_and_cleans_up);
  RUN_TEST(test_json_missing_or_not_a_file);
  RUN_TEST(test_json_syntax_and_format);
  RUN_TEST(test_json_required_keys);
  RUN_TEST(test_json_types);
  RUN_TEST(test_json_counts);
  RUN_TEST(test_json_name);
  RUN_TEST(test_arrays_missing_or_unexpected);
  RUN_TEST(test_orig_ids);
  RUN_TEST(test_arrays_not_files);
  RUN_TEST(test_arrays_dtype);
  RUN_TEST(test_arrays_shape);
  RUN_TEST(test_csr_structure);
  RUN_TEST(test_labels_and_splits);
  RUN_TEST(test_features_finite);
  RUN_TEST(test_first_bad_across_blocks);
  RUN_TEST(test_handles);
  RUN_TEST(test_versioned_structs);
  RUN_TEST(test_degree_stats_small);
  RUN_TEST(test_degree_stats_percentiles);
  RUN_TEST(test_degree_stats_powerlaw);
  return ng_test_summary();
}
