/* Heterogeneous datasets: a small hand-built folder (two node types, three relations) opened and
 * described through the public API, each validation rule refused with its message, and the
 * homogeneous layout read as one type and one relation. */
#include "hetero_impl.h"
#include "ng_test.h"
#include "ng_test_cora.h"
#include "ng_test_hetero.h"
#include "rng.h"
#include "sampler_hetero_impl.h"
#include "sampler_impl.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Cora, converted once per process (ng_test_fetch_cora converts into a fixed folder) and
 * closed by main. */
static ng_dataset_t cora_handle;
static ng_dataset_t cora_once(void) {
  if (!cora_handle)
    cora_handle = ng_test_fetch_cora();
  return cora_handle;
}

/* ---- the fixture ----
 * paper: 6 nodes, 3 features, 2 classes (the target); author: 4 nodes, no features.
 * (author, writes, paper): rows are papers, entries authors.
 * (paper, cites, paper) and (paper, written_by, author): rows are authors, entries papers. */

static const char *const BASE_JSON =
    "{\n"
    "  \"format\": \"neargnn-dataset\",\n"
    "  \"version\": 1,\n"
    "  \"name\": \"tiny-hetero\",\n"
    "  \"index_dtype\": \"int32\",\n"
    "  \"node_types\": [\n"
    "    {\"name\": \"paper\", \"count\": 6, \"feature_dim\": 3, \"classes\": 2},\n"
    "    {\"name\": \"author\", \"count\": 4, \"feature_dim\": 0}\n"
    "  ],\n"
    "  \"edge_types\": [\n"
    "    {\"src\": \"author\", \"relation\": \"writes\", \"dst\": \"paper\", \"edges\": 7},\n"
    "    {\"src\": \"paper\", \"relation\": \"cites\", \"dst\": \"paper\", \"edges\": 5},\n"
    "    {\"src\": \"paper\", \"relation\": \"written_by\", \"dst\": \"author\", \"edges\": 7}\n"
    "  ],\n"
    "  \"splits\": {\"train\": 2, \"val\": 1, \"test\": 1}\n"
    "}\n";

/* writes: paper p is written by these authors. */
static const int64_t WRITES_PTR[7] = {0, 2, 3, 4, 5, 6, 7};
static const int32_t WRITES_IDX[7] = {0, 1, 1, 2, 3, 0, 2};
static const int64_t CITES_PTR[7] = {0, 0, 1, 3, 4, 5, 5};
static const int32_t CITES_IDX[5] = {0, 0, 1, 2, 3};
/* written_by: author a wrote these papers (the reverse of writes). */
static const int64_t WBY_PTR[5] = {0, 2, 4, 6, 7};
static const int32_t WBY_IDX[7] = {0, 5, 0, 1, 2, 5, 3};
static const int32_t LABELS[6] = {0, 1, 1, -1, 0, 1};
static const int64_t TRAIN[2] = {0, 1};
static const int64_t VAL[1] = {2};
static const int64_t TEST[1] = {4};

static void put(const char *dir, const char *file, ng_dtype dtype, int ndim, int64_t d0, int64_t d1,
                const void *data) {
  char *path = ng__path_join(dir, file);
  unlink(path);
  int64_t shape[2] = {d0, d1};
  ng_status st = ng__npy_write(path, dtype, ndim, shape, data);
  if (st != NG_OK)
    ng_test_fail(__FILE__, __LINE__, "writing %s: %s", path, ng_last_error());
  free(path);
}

static void put_json(const char *dir, const char *text) {
  char *path = ng__path_join(dir, "dataset.json");
  if (!ng_test_write_file(path, text, strlen(text)))
    ng_test_fail(__FILE__, __LINE__, "writing %s", path);
  free(path);
}

/* `text` with its first `from` replaced by `to` (the test's own JSON, so `from` must occur). */
static char *replaced(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) {
    ng_test_fail(__FILE__, __LINE__, "\"%s\" not in the JSON", from);
    at = text + strlen(text);
  }
  size_t a = (size_t)(at - text), f = strlen(from) <= strlen(at) ? strlen(from) : 0;
  char *out = ng_test_xmalloc(strlen(text) + strlen(to) + 1);
  memcpy(out, text, a);
  strcpy(out + a, to);
  strcat(out, at + f);
  return out;
}

static float feature_value(int64_t row, int64_t col) {
  return (float)(row * 10 + col) * 0.25f - 3.0f;
}

/* A fresh copy of the fixture in folder `name` (under the test's temporary folder). */
static const char *fixture(const char *name) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  mkdir(dir, 0755);
  float feats[6 * 3];
  for (int64_t r = 0; r < 6; r++)
    for (int64_t c = 0; c < 3; c++)
      feats[r * 3 + c] = feature_value(r, c);
  put(dir, "paper.features.npy", NG_DTYPE_F32, 2, 6, 3, feats);
  put(dir, "paper.labels.npy", NG_DTYPE_I32, 1, 6, 0, LABELS);
  put(dir, "author.writes.paper.indptr.npy", NG_DTYPE_I64, 1, 7, 0, WRITES_PTR);
  put(dir, "author.writes.paper.indices.npy", NG_DTYPE_I32, 1, 7, 0, WRITES_IDX);
  put(dir, "paper.cites.paper.indptr.npy", NG_DTYPE_I64, 1, 7, 0, CITES_PTR);
  put(dir, "paper.cites.paper.indices.npy", NG_DTYPE_I32, 1, 5, 0, CITES_IDX);
  put(dir, "paper.written_by.author.indptr.npy", NG_DTYPE_I64, 1, 5, 0, WBY_PTR);
  put(dir, "paper.written_by.author.indices.npy", NG_DTYPE_I32, 1, 7, 0, WBY_IDX);
  put(dir, "train_idx.npy", NG_DTYPE_I64, 1, 2, 0, TRAIN);
  put(dir, "val_idx.npy", NG_DTYPE_I64, 1, 1, 0, VAL);
  put(dir, "test_idx.npy", NG_DTYPE_I64, 1, 1, 0, TEST);
  put_json(dir, BASE_JSON);
  return dir;
}

/* Expects opening `dir` to fail with `status` and a message holding `needle`. */
static void expect_refused(const char *dir, ng_status status, const char *needle, int line) {
  ng_hetero_t ds = NULL;
  ng_status st = ng_hetero_open(&ds, dir, NULL);
  if (st != status)
    ng_test_fail(__FILE__, line, "open %s: got %s, expected %s (last error: %s)", dir,
                 ng_status_name(st), ng_status_name(status), ng_last_error());
  else if (!strstr(ng_last_error(), needle))
    ng_test_fail(__FILE__, line, "last error \"%s\" lacks \"%s\"", ng_last_error(), needle);
  if (ds)
    ng_test_fail(__FILE__, line, "a refused open returned a handle");
  ng_hetero_close(ds);
}
#define EXPECT_REFUSED(dir, status, needle) expect_refused(dir, status, needle, __LINE__)

/* The fixture with dataset.json's `from` replaced by `to`, expected refused. */
static void expect_json_refused(const char *from, const char *to, ng_status status,
                                const char *needle, int line) {
  const char *dir = fixture("json");
  char *text = replaced(BASE_JSON, from, to);
  put_json(dir, text);
  free(text);
  expect_refused(dir, status, needle, line);
}
#define EXPECT_JSON_REFUSED(from, to, status, needle)                                              \
  expect_json_refused(from, to, status, needle, __LINE__)

/* ---- cases ---- */

/* Opens `dir` with every check (features included) and reads its info; NULL on failure, which
 * is already reported. */
static ng_hetero_t open_checked(const char *dir, ng_hetero_info *info) {
  ng_hetero_t ds = NULL;
  ng_open_opts oo = NG_OPEN_OPTS_INIT;
  oo.check_features = 1;
  EXPECT_OK(ng_hetero_open(&ds, dir, &oo));
  if (ds)
    EXPECT_OK(ng_hetero_info_get(info, ds));
  return ds;
}

static void test_open_and_describe(void) {
  const char *dir = fixture("ok");
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_hetero_t ds = open_checked(dir, &info);
  if (!ds)
    return;
  EXPECT_STR(info.name, "tiny-hetero");
  EXPECT_EQ_I(info.node_types, 2);
  EXPECT_EQ_I(info.edge_types, 3);
  EXPECT_EQ_I(info.nodes, 10);
  EXPECT_EQ_I(info.edges, 19);
  EXPECT_EQ_I(info.target, 0);
  EXPECT_EQ_I(info.classes, 2);
  EXPECT_EQ_I(info.index_bytes, 4);
  EXPECT_EQ_I(info.homogeneous, 0);
  EXPECT_EQ_I(info.train, 2);
  EXPECT_EQ_I(info.val, 1);
  EXPECT_EQ_I(info.test, 1);

  ng_node_type_info nt = NG_NODE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_node_type(&nt, ds, 1));
  EXPECT_STR(nt.name, "author");
  EXPECT_EQ_I(nt.count, 4);
  EXPECT_EQ_I(nt.feature_dim, 0);
  EXPECT_EQ_I(nt.classes, 0);
  EXPECT_OK(ng_hetero_node_type(&nt, ds, 0));
  EXPECT_STR(nt.name, "paper");
  EXPECT_EQ_I(nt.count, 6);
  EXPECT_EQ_I(nt.feature_dim, 3);
  EXPECT_EQ_I(nt.classes, 2);
  EXPECT_STATUS(ng_hetero_node_type(&nt, ds, 2), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("node type 2 is out of range");

  ng_edge_type_info et = NG_EDGE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_edge_type(&et, ds, 2));
  EXPECT_STR(et.relation, "written_by");
  EXPECT_EQ_I(et.src_type, 0);
  EXPECT_EQ_I(et.dst_type, 1);
  EXPECT_EQ_I(et.edges, 7);
  EXPECT_STATUS(ng_hetero_edge_type(&et, ds, -1), NG_ERR_INVALID_ARG);

  int32_t t = -5, r = -5;
  EXPECT_OK(ng_hetero_find_node_type(&t, ds, "author"));
  EXPECT_EQ_I(t, 1);
  EXPECT_STATUS(ng_hetero_find_node_type(&t, ds, "venue"), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("the types are paper, author");
  EXPECT_OK(ng_hetero_find_edge_type(&r, ds, "paper", "cites", "paper"));
  EXPECT_EQ_I(r, 1);
  EXPECT_STATUS(ng_hetero_find_edge_type(&r, ds, "author", "cites", "paper"), NG_ERR_NOT_FOUND);

  const float *f = NULL;
  EXPECT_OK(ng_hetero_features(&f, ds, 0));
  EXPECT_TRUE(f != NULL);
  for (int64_t row = 0; f && row < 6; row++)
    for (int64_t c = 0; c < 3; c++)
      EXPECT_NEAR(f[row * 3 + c], feature_value(row, c), 0.0);
  EXPECT_OK(ng_hetero_features(&f, ds, 1));
  EXPECT_TRUE(f == NULL);
  const int32_t *lab = NULL;
  EXPECT_OK(ng_hetero_labels(&lab, ds));
  for (int i = 0; lab && i < 6; i++)
    EXPECT_EQ_I(lab[i], LABELS[i]);

  const int64_t *ptr = NULL;
  const void *idx = NULL;
  int32_t ib = 0;
  EXPECT_OK(ng_hetero_csr(&ptr, &idx, &ib, ds, 0));
  EXPECT_EQ_I(ib, 4);
  for (int i = 0; ptr && i < 7; i++)
    EXPECT_EQ_I(ptr[i], WRITES_PTR[i]);
  for (int i = 0; idx && i < 7; i++)
    EXPECT_EQ_I(((const int32_t *)idx)[i], WRITES_IDX[i]);

  const int64_t *ids = NULL;
  int64_t n = -1;
  EXPECT_OK(ng_hetero_split(&ids, &n, ds, 2));
  EXPECT_EQ_I(n, 1);
  EXPECT_EQ_I(ids ? ids[0] : -1, 4);
  EXPECT_STATUS(ng_hetero_split(&ids, &n, ds, 3), NG_ERR_INVALID_ARG);

  /* A caller built against a smaller struct gets only its fields. */
  struct {
    size_t size;
    char name[64];
    int32_t node_types;
  } small = {offsetof(ng_hetero_info, edge_types), {0}, -7};
  EXPECT_OK(ng_hetero_info_get((ng_hetero_info *)&small, ds));
  EXPECT_EQ_I(small.node_types, 2);

  /* The homogeneous reader names the call that reads this folder. */
  ng_dataset_t homo = NULL;
  EXPECT_STATUS(ng_dataset_open(&homo, dir, NULL), NG_ERR_UNSUPPORTED);
  EXPECT_ERR_HAS("ng_hetero_open");
  ng_hetero_close(ds);
}

static void test_handles(void) {
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  EXPECT_STATUS(ng_hetero_info_get(&info, NULL), NG_ERR_INVALID_ARG);
  EXPECT_STATUS(ng_hetero_open(NULL, "x", NULL), NG_ERR_INVALID_ARG);
  ng_hetero_t ds = NULL;
  EXPECT_STATUS(ng_hetero_open(&ds, ng_test_path("absent"), NULL), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("no such dataset folder");
  ng_open_opts bad = NG_OPEN_OPTS_INIT;
  bad.size = 0;
  EXPECT_STATUS(ng_hetero_open(&ds, fixture("handles"), &bad), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_OPEN_OPTS_INIT");
  info.size = 0;
  EXPECT_OK(ng_hetero_open(&ds, fixture("handles"), NULL));
  EXPECT_STATUS(ng_hetero_info_get(&info, ds), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("_INIT");
  ng_hetero_close(ds);
  ng_hetero_close(NULL);
}

static void test_json_refusals(void) {
  EXPECT_JSON_REFUSED("{\"name\": \"author\",", "{\"name\": \"paper\",", NG_ERR_FORMAT,
                      "node type \"paper\" is named twice");
  EXPECT_JSON_REFUSED("{\"src\": \"paper\", \"relation\": \"cites\"",
                      "{\"src\": \"author\", \"relation\": \"writes\"", NG_ERR_FORMAT,
                      "edge type (author, writes, paper) is listed twice");
  EXPECT_JSON_REFUSED(
      "{\"src\": \"paper\", \"relation\": \"written_by\"",
      "{\"src\": \"venue\", \"relation\": \"written_by\"", NG_ERR_FORMAT,
      "\"src\" is \"venue\", which is not a node type; the types are paper, author");
  EXPECT_JSON_REFUSED("\"name\": \"author\"", "\"name\": \"au.thor\"", NG_ERR_FORMAT,
                      "names are 1 to 31 letters");
  EXPECT_JSON_REFUSED("\"feature_dim\": 0}", "\"feature_dim\": 0, \"classes\": 3}", NG_ERR_FORMAT,
                      "node types \"paper\" and \"author\" both have \"classes\"");
  EXPECT_JSON_REFUSED("\"count\": 6", "\"count\": 6e0", NG_ERR_FORMAT, "plain digits");
  EXPECT_JSON_REFUSED("\"count\": 6", "\"count\": 6.0", NG_ERR_FORMAT, "plain digits");
  EXPECT_JSON_REFUSED("\"count\": 6", "\"count\": -6", NG_ERR_FORMAT, "non-negative");
  EXPECT_JSON_REFUSED("\"count\": 4", "\"count\": 9007199254740993", NG_ERR_FORMAT, "at most 2^53");
  EXPECT_JSON_REFUSED("\"count\": 4", "\"count\": 2147483648", NG_ERR_FORMAT,
                      "\"author\" has 2147483648 nodes");
  EXPECT_JSON_REFUSED("\"count\": 4", "\"count\": \"4\"", NG_ERR_FORMAT, "\"count\" is a string");
  EXPECT_JSON_REFUSED(", \"feature_dim\": 0}", "}", NG_ERR_FORMAT,
                      "node type \"author\": key \"feature_dim\" is missing");
  EXPECT_JSON_REFUSED("\"node_types\": [", "\"node_types\": {\"a\": [", NG_ERR_FORMAT,
                      "not valid JSON");
  EXPECT_JSON_REFUSED("\"edges\": 5}", "\"edges\": 5, \"edges\": 5}", NG_ERR_FORMAT,
                      "appears twice in one object");
  EXPECT_JSON_REFUSED("\"version\": 1", "\"version\": 2", NG_ERR_UNSUPPORTED, "upgrade neargnn");
  EXPECT_JSON_REFUSED("\"index_dtype\": \"int32\"", "\"index_dtype\": \"uint8\"", NG_ERR_FORMAT,
                      "\"int32\" or \"int64\"");
  EXPECT_JSON_REFUSED("\"train\": 2, \"val\": 1, \"test\": 1",
                      "\"train\": 4, \"val\": 1, \"test\": 2", NG_ERR_FORMAT,
                      "the splits hold 7 nodes together but the target type");
  EXPECT_JSON_REFUSED(", \"classes\": 2}", "}", NG_ERR_FORMAT,
                      "\"splits.train\" is 2 but no node type has \"classes\"");
  EXPECT_JSON_REFUSED("\"edge_types\": [", "\"edge_typos\": [", NG_ERR_FORMAT,
                      "key \"edge_types\" is missing");
  EXPECT_JSON_REFUSED("\"classes\": 2}", "\"classes\": 70000}", NG_ERR_FORMAT, "at most 65536");
  EXPECT_JSON_REFUSED("\"classes\": 2}", "\"classes\": 13}", NG_ERR_FORMAT,
                      "its largest label is 1");
}

static void test_array_refusals(void) {
  const char *dir;
  /* Counts that disagree: dataset.json against an array's shape. */
  dir = fixture("counts");
  {
    char *text = replaced(BASE_JSON, "\"count\": 6", "\"count\": 7");
    put_json(dir, text);
    free(text);
  }
  EXPECT_REFUSED(dir, NG_ERR_FORMAT,
                 "paper.features.npy: shape [6, 3], but dataset.json implies "
                 "[7, 3]");
  dir = fixture("edges");
  {
    char *text = replaced(BASE_JSON, "\"edges\": 5", "\"edges\": 4");
    put_json(dir, text);
    free(text);
  }
  EXPECT_REFUSED(dir, NG_ERR_FORMAT,
                 "paper.cites.paper.indices.npy: shape [5], but dataset.json "
                 "implies [4]");
  /* A feature table for a type that has none. */
  dir = fixture("extra");
  float f[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  put(dir, "author.features.npy", NG_DTYPE_F32, 2, 4, 2, f);
  EXPECT_REFUSED(dir, NG_ERR_FORMAT,
                 "author.features.npy: present but dataset.json says its "
                 "type's \"feature_dim\" is 0");
  /* Labels on a type that is not the target. */
  dir = fixture("extra_labels");
  put(dir, "author.labels.npy", NG_DTYPE_I32, 1, 4, 0, LABELS);
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "author.labels.npy: present");
  /* A relation's file missing, or of the wrong dtype. */
  dir = fixture("missing");
  char *path = ng__path_join(dir, "paper.written_by.author.indices.npy");
  unlink(path);
  free(path);
  EXPECT_REFUSED(dir, NG_ERR_NOT_FOUND, "paper.written_by.author.indices.npy: missing");
  dir = fixture("dtype");
  put(dir, "paper.cites.paper.indptr.npy", NG_DTYPE_I32, 1, 7, 0,
      (const int32_t[]){0, 0, 1, 3, 4, 5, 5});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "dtype int32, but it must be int64");
}

static void test_csr_refusals(void) {
  const char *dir = fixture("range");
  /* Author ids are [0, 4): 4 is a paper id's range, not an author's. */
  put(dir, "author.writes.paper.indices.npy", NG_DTYPE_I32, 1, 7, 0,
      (const int32_t[]){0, 1, 1, 2, 3, 4, 2});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT,
                 "author.writes.paper.indices.npy: indices[5] = 4 (in row 4, a \"paper\" node) is "
                 "not a \"author\" id in [0, 4)");
  dir = fixture("negative");
  put(dir, "paper.written_by.author.indices.npy", NG_DTYPE_I32, 1, 7, 0,
      (const int32_t[]){0, 5, 0, 1, -2, 5, 3});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "indices[4] = -2 (in row 2, a \"author\" node)");
  dir = fixture("monotone");
  put(dir, "paper.cites.paper.indptr.npy", NG_DTYPE_I64, 1, 7, 0,
      (const int64_t[]){0, 2, 1, 3, 4, 5, 5});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "indptr[2] = 1 < indptr[1] = 2: not monotone");
  dir = fixture("first");
  put(dir, "paper.cites.paper.indptr.npy", NG_DTYPE_I64, 1, 7, 0,
      (const int64_t[]){1, 1, 1, 3, 4, 5, 5});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "indptr[0] = 1, but it must be 0");
  dir = fixture("last");
  put(dir, "paper.cites.paper.indptr.npy", NG_DTYPE_I64, 1, 7, 0,
      (const int64_t[]){0, 0, 1, 3, 4, 4, 4});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT,
                 "indptr[6] = 4, but dataset.json says \"edges\": 5 for (paper, cites, paper)");
}

static void test_label_split_feature_refusals(void) {
  const char *dir = fixture("labels");
  put(dir, "paper.labels.npy", NG_DTYPE_I32, 1, 6, 0, (const int32_t[]){0, 1, 2, -1, 0, 1});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "labels[2] = 2 is outside [-1, 2)");
  dir = fixture("split_range");
  put(dir, "val_idx.npy", NG_DTYPE_I64, 1, 1, 0, (const int64_t[]){6});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "val_idx.npy: entry 0 is 6, not a \"paper\" id in [0, 6)");
  dir = fixture("split_unlabelled");
  put(dir, "test_idx.npy", NG_DTYPE_I64, 1, 1, 0, (const int64_t[]){3});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "test_idx.npy: entry 0 is node 3, which is unlabelled");
  dir = fixture("split_twice");
  put(dir, "train_idx.npy", NG_DTYPE_I64, 1, 2, 0, (const int64_t[]){1, 1});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "train_idx.npy: node 1 appears twice (entry 1)");
  dir = fixture("split_overlap");
  put(dir, "test_idx.npy", NG_DTYPE_I64, 1, 1, 0, (const int64_t[]){0});
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "test_idx.npy: node 0 (entry 0) is also in the train split");
  dir = fixture("nonfinite");
  float feats[6 * 3];
  for (int i = 0; i < 18; i++)
    feats[i] = (float)i;
  feats[5 * 3 + 1] = NAN;
  put(dir, "paper.features.npy", NG_DTYPE_F32, 2, 6, 3, feats);
  EXPECT_REFUSED(dir, NG_ERR_FORMAT, "paper.features.npy: row 5, column 1 is nan");
}

/* A homogeneous folder reads as one node type and one relation, with the dataset's arrays. */
static void test_homogeneous_as_one_type(void) {
  ng_dataset_t cora = cora_once();
  ng_dataset_info ci = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&ci, cora));
  ng_hetero_t ds = NULL;
  EXPECT_OK(ng_hetero_open(&ds, cora->dir, NULL));
  if (!ds)
    return;
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  EXPECT_OK(ng_hetero_info_get(&info, ds));
  EXPECT_EQ_I(info.homogeneous, 1);
  EXPECT_EQ_I(info.node_types, 1);
  EXPECT_EQ_I(info.edge_types, 1);
  EXPECT_EQ_I(info.nodes, ci.nodes);
  EXPECT_EQ_I(info.edges, ci.edges);
  EXPECT_EQ_I(info.classes, ci.classes);
  EXPECT_EQ_I(info.target, 0);
  EXPECT_EQ_I(info.train, ci.train);
  ng_node_type_info nt = NG_NODE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_node_type(&nt, ds, 0));
  EXPECT_STR(nt.name, "node");
  EXPECT_EQ_I(nt.feature_dim, ci.feature_dim);
  ng_edge_type_info et = NG_EDGE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_edge_type(&et, ds, 0));
  EXPECT_STR(et.relation, "to");
  EXPECT_EQ_I(et.src_type, 0);
  EXPECT_EQ_I(et.dst_type, 0);
  EXPECT_EQ_I(et.edges, ci.edges);
  const int64_t *ptr = NULL;
  const void *idx = NULL;
  int32_t ib = 0;
  EXPECT_OK(ng_hetero_csr(&ptr, &idx, &ib, ds, 0));
  /* Its own mapping of the same files. */
  EXPECT_TRUE(ptr && memcmp(ptr, cora->csr.indptr, sizeof(int64_t) * (size_t)(ci.nodes + 1)) == 0);
  EXPECT_EQ_I(ib, ci.index_bytes);
  const float *f = NULL, *cf = NULL;
  EXPECT_OK(ng_hetero_features(&f, ds, 0));
  EXPECT_OK(ng_dataset_features(&cf, cora));
  EXPECT_TRUE(f && cf && memcmp(f, cf, sizeof(float) * (size_t)(ci.nodes * ci.feature_dim)) == 0);
  ng_hetero_close(ds);
}

/* ---- the generator ---- */

static const char GEN_TYPES[] = "paper:3000:8,author:5000:0,venue:7:0";
static const char GEN_RELATIONS[] =
    "author:writes:paper:3,paper:written_by:author:1.8,paper:cites:paper:5,venue:hosts:paper:1";

static ng_hetero_generate_opts gen_opts(int threads) {
  ng_hetero_generate_opts o = NG_HETERO_GENERATE_OPTS_INIT;
  o.types = GEN_TYPES;
  o.relations = GEN_RELATIONS;
  o.classes = 5;
  o.homophily = 0.6;
  o.seed = 11;
  o.threads = threads;
  return o;
}

static bool same_file(const char *a_dir, const char *b_dir, const char *file) {
  char *a = ng__path_join(a_dir, file), *b = ng__path_join(b_dir, file);
  size_t la = 0, lb = 0;
  void *da = ng_test_read_file(a, &la), *db = ng_test_read_file(b, &lb);
  bool same = da && db && la == lb && memcmp(da, db, la) == 0;
  free(da);
  free(db);
  free(a);
  free(b);
  return same;
}

/* The files depend on the seed only: one thread and three write the same bytes. */
static void test_generate_deterministic(void) {
  char one[512], three[512], other[512];
  snprintf(one, sizeof one, "%s", ng_test_path("gen1"));
  snprintf(three, sizeof three, "%s", ng_test_path("gen3"));
  snprintf(other, sizeof other, "%s", ng_test_path("gen_seed"));
  ng_hetero_generate_opts o = gen_opts(1);
  EXPECT_OK(ng_hetero_generate(one, &o));
  o = gen_opts(3);
  EXPECT_OK(ng_hetero_generate(three, &o));
  o.seed = 12;
  EXPECT_OK(ng_hetero_generate(other, &o));
  static const char *const FILES[] = {"paper.features.npy",
                                      "paper.labels.npy",
                                      "author.writes.paper.indptr.npy",
                                      "author.writes.paper.indices.npy",
                                      "paper.cites.paper.indices.npy",
                                      "venue.hosts.paper.indices.npy",
                                      "train_idx.npy",
                                      "test_idx.npy"};
  for (size_t i = 0; i < NG_TEST_LEN(FILES); i++) {
    if (!same_file(one, three, FILES[i]))
      ng_test_fail(__FILE__, __LINE__, "%s differs between 1 and 3 threads", FILES[i]);
    if (same_file(one, other, FILES[i]))
      ng_test_fail(__FILE__, __LINE__, "%s is the same for seeds 11 and 12", FILES[i]);
  }
  /* The folder is written atomically and exists: a second run to it is refused. */
  o = gen_opts(1);
  EXPECT_STATUS(ng_hetero_generate(one, &o), NG_ERR_EXISTS);
}

/* What the options ask for: counts, dimensions, degrees, shares; labels planted in the
 * relations: an entry of a row comes from the row node's class with probability homophily, so
 * the papers a paper cites share its label at about h + (1 - h) / C. */
static void test_generate_shape_and_planted_labels(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", ng_test_path("gen_shape"));
  ng_hetero_generate_opts o = gen_opts(2);
  EXPECT_OK(ng_hetero_generate(dir, &o));
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_hetero_t ds = open_checked(dir, &info);
  if (!ds)
    return;
  EXPECT_EQ_I(info.node_types, 3);
  EXPECT_EQ_I(info.edge_types, 4);
  EXPECT_EQ_I(info.nodes, 8007);
  EXPECT_EQ_I(info.target, 0);
  EXPECT_EQ_I(info.classes, 5);
  /* Shares 0.1, 0.1, 0.2 of 3000 papers: binomial, far inside +-20%. */
  EXPECT_NEAR(info.train, 300, 60);
  EXPECT_NEAR(info.val, 300, 60);
  EXPECT_NEAR(info.test, 600, 120);
  ng_node_type_info nt = NG_NODE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_node_type(&nt, ds, 2));
  EXPECT_STR(nt.name, "venue");
  EXPECT_EQ_I(nt.count, 7);
  EXPECT_EQ_I(nt.feature_dim, 0);
  const double degree[4] = {3, 1.8, 5, 1};
  const int64_t rows[4] = {3000, 5000, 3000, 3000};
  for (int32_t r = 0; r < 4; r++) {
    ng_edge_type_info et = NG_EDGE_TYPE_INFO_INIT;
    EXPECT_OK(ng_hetero_edge_type(&et, ds, r));
    EXPECT_NEAR((double)et.edges / (double)rows[r], degree[r], 0.1 * degree[r]);
  }
  const int32_t *labels = NULL;
  EXPECT_OK(ng_hetero_labels(&labels, ds));
  int64_t per_class[5] = {0};
  for (int64_t v = 0; labels && v < 3000; v++) {
    EXPECT_TRUE(labels[v] >= 0 && labels[v] < 5);
    per_class[labels[v] >= 0 && labels[v] < 5 ? labels[v] : 0]++;
  }
  for (int c = 0; c < 5; c++)
    EXPECT_EQ_I(per_class[c], 600); /* equal ranges of a permutation */
  int32_t cites = -1;
  EXPECT_OK(ng_hetero_find_edge_type(&cites, ds, "paper", "cites", "paper"));
  const int64_t *ptr = NULL;
  const void *idx = NULL;
  int32_t ib = 0;
  EXPECT_OK(ng_hetero_csr(&ptr, &idx, &ib, ds, cites));
  int64_t same = 0, total = 0;
  for (int64_t v = 0; ptr && labels && v < 3000; v++)
    for (int64_t e = ptr[v]; e < ptr[v + 1]; e++, total++)
      same += labels[((const int32_t *)idx)[e]] == labels[v];
  EXPECT_TRUE(total > 10000);
  EXPECT_NEAR((double)same / (double)total, 0.6 + 0.4 / 5, 0.03);
  /* Features: each class's mean plus noise, so a paper's features lean to its class: the
   * nearest class centroid is its label far more often than chance (1/5). */
  const float *x = NULL;
  EXPECT_OK(ng_hetero_features(&x, ds, 0));
  EXPECT_TRUE(x != NULL);
  if (x && labels) {
    double centroid[5][8] = {{0}};
    for (int64_t v = 0; v < 3000; v++)
      for (int j = 0; j < 8; j++)
        centroid[labels[v]][j] += x[v * 8 + j] / 600.0;
    int64_t nearest_is_label = 0;
    for (int64_t v = 0; v < 3000; v++) {
      int best = 0;
      double best_d = INFINITY;
      for (int c = 0; c < 5; c++) {
        double d = 0;
        for (int j = 0; j < 8; j++)
          d += (x[v * 8 + j] - centroid[c][j]) * (x[v * 8 + j] - centroid[c][j]);
        if (d < best_d) {
          best_d = d;
          best = c;
        }
      }
      nearest_is_label += best == labels[v];
    }
    printf("  nearest centroid is the label for %lld of 3000 papers\n",
           (long long)nearest_is_label);
    EXPECT_TRUE(nearest_is_label > 3000 * 3 / 10);
  }
  ng_hetero_close(ds);
}

static void test_generate_presets_and_refusals(void) {
  const char *types = NULL, *rels = NULL, *target = NULL;
  EXPECT_OK(ng_hetero_preset(&types, &rels, &target, "mag"));
  EXPECT_TRUE(types && strstr(types, "paper:736389:128") && strstr(types, "field_of_study"));
  EXPECT_TRUE(rels && strstr(rels, "author:writes:paper"));
  EXPECT_STR(target, "paper");
  EXPECT_OK(ng_hetero_preset(&types, &rels, &target, "igbh"));
  EXPECT_TRUE(types && strstr(types, ":1024"));
  EXPECT_STATUS(ng_hetero_preset(&types, &rels, &target, "dblp"), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("the presets are mag, igbh");

  /* MAG at 1/1000 scale: every count scaled and rounded, the relations as the preset's. */
  EXPECT_OK(ng_hetero_preset(&types, &rels, &target, "mag"));
  ng_hetero_generate_opts o = NG_HETERO_GENERATE_OPTS_INIT;
  o.types = types;
  o.relations = rels;
  o.target = target;
  o.scale = 0.001;
  o.classes = 8;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", ng_test_path("gen_mag"));
  EXPECT_OK(ng_hetero_generate(dir, &o));
  ng_hetero_t ds = NULL;
  EXPECT_OK(ng_hetero_open(&ds, dir, NULL));
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  EXPECT_OK(ng_hetero_info_get(&info, ds));
  EXPECT_EQ_I(info.node_types, 4);
  EXPECT_EQ_I(info.edge_types, 5);
  EXPECT_EQ_I(info.nodes, 736 + 1135 + 9 + 60);
  ng_hetero_close(ds);

  struct {
    const char *types, *relations, *target, *needle;
  } bad[] = {
      {"paper:10:4,paper:5:0", "paper:cites:paper:2", NULL, "node type \"paper\" is named twice"},
      {"paper:10", "paper:cites:paper:2", NULL, "expected NAME:COUNT:DIM"},
      {"paper:ten:4", "paper:cites:paper:2", NULL, "COUNT a positive count"},
      {"pa.per:10:4", "paper:cites:paper:2", NULL, "NAME is 1 to 31"},
      {"paper:10:4", "paper:cites:venue:2", NULL, "\"venue\" is not one of the node types"},
      {"paper:10:4", "paper:cites:paper:-1", NULL, "DEGREE is the mean entries per DST row"},
      {"paper:10:4", "paper:cites:paper:2,paper:cites:paper:3", NULL,
       "relation (paper, cites, paper) is listed twice"},
      {"paper:10:4", "paper:cites:paper", NULL, "expected SRC:RELATION:DST:DEGREE"},
      {"paper:10:4", "paper:cites:paper:2", "author", "target \"author\" is not one of"},
      {"", "paper:cites:paper:2", NULL, "no node types given"},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad); i++) {
    ng_hetero_generate_opts b = NG_HETERO_GENERATE_OPTS_INIT;
    b.types = bad[i].types;
    b.relations = bad[i].relations;
    b.target = bad[i].target;
    snprintf(dir, sizeof dir, "%s", ng_test_path("gen_bad"));
    ng_status st = ng_hetero_generate(dir, &b);
    if (st != NG_ERR_INVALID_ARG || !strstr(ng_last_error(), bad[i].needle))
      ng_test_fail(__FILE__, __LINE__, "case %zu: got %s \"%s\", expected \"%s\"", i,
                   ng_status_name(st), ng_last_error(), bad[i].needle);
    EXPECT_TRUE(!ng_test_exists(dir));
  }
  ng_hetero_generate_opts b = gen_opts(1);
  b.classes = 0;
  snprintf(dir, sizeof dir, "%s", ng_test_path("gen_bad"));
  EXPECT_STATUS(ng_hetero_generate(dir, &b), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("classes 0");
}

/* ---- the OGB heterogeneous converter ---- */

/* Writes `text` gzip-compressed to `dir`/`rel`, creating the folders on the way. */
static void put_gz(const char *dir, const char *rel, const char *text) {
  char *path = ng__path_join(dir, rel);
  for (char *p = path + strlen(dir) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  gzFile gz = gzopen(path, "wb");
  const size_t n = strlen(text);
  if (!gz || (n && gzwrite(gz, text, (unsigned)n) != (int)n) || gzclose(gz) != Z_OK)
    ng_test_fail(__FILE__, __LINE__, "writing %s", path);
  free(path);
}

/* A tiny ogbn-mag-like folder: 3 authors, 2 institutions, 4 papers (2 features, labelled). */
static const char *ogb_folder(const char *name) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  mkdir(dir, 0755);
  put_gz(dir, "raw/num-node-dict.csv.gz", "author,institution,paper\n3,2,4\n");
  put_gz(dir, "raw/relations/author___writes___paper/edge.csv.gz", "0,0\n1,0\n1,1\n2,3\n0,0\n");
  put_gz(dir, "raw/relations/paper___cites___paper/edge.csv.gz", "1,0\n2,0\n3,2\n");
  put_gz(dir, "raw/relations/author___affiliated_with___institution/edge.csv.gz", "0,1\n2,0\n");
  put_gz(dir, "raw/node-feat/paper/node-feat.csv.gz", "0.5,1\n-2,3.25\n4,5\n6e-1,-7\n");
  put_gz(dir, "raw/node-label/paper/node-label.csv.gz", "0\n1\nnan\n1\n");
  put_gz(dir, "split/time/paper/train.csv.gz", "0\n1\n");
  put_gz(dir, "split/time/paper/valid.csv.gz", "3\n");
  put_gz(dir, "split/time/paper/test.csv.gz", "");
  return dir;
}

/* Relation `rel` of `ds` is (src, relation, dst) with exactly these rows. */
static void expect_relation(ng_hetero_t ds, const char *src, const char *relation, const char *dst,
                            const int64_t *ptr, int64_t rows, const int32_t *idx, int line) {
  int32_t r = -1;
  if (ng_hetero_find_edge_type(&r, ds, src, relation, dst) != NG_OK) {
    ng_test_fail(__FILE__, line, "(%s, %s, %s): %s", src, relation, dst, ng_last_error());
    return;
  }
  const int64_t *p = NULL;
  const void *ix = NULL;
  int32_t ib = 0;
  EXPECT_OK(ng_hetero_csr(&p, &ix, &ib, ds, r));
  for (int64_t v = 0; p && v <= rows; v++)
    if (p[v] != ptr[v])
      ng_test_fail(__FILE__, line, "(%s, %s, %s): indptr[%lld] = %lld, expected %lld", src,
                   relation, dst, (long long)v, (long long)p[v], (long long)ptr[v]);
  for (int64_t e = 0; p && ib == 4 && e < ptr[rows]; e++)
    if (((const int32_t *)ix)[e] != idx[e])
      ng_test_fail(__FILE__, line, "(%s, %s, %s): indices[%lld] = %d, expected %d", src, relation,
                   dst, (long long)e, ((const int32_t *)ix)[e], idx[e]);
}
#define EXPECT_RELATION(ds, s, r, d, ptr, rows, idx)                                               \
  expect_relation(ds, s, r, d, ptr, rows, idx, __LINE__)

static void test_convert_ogb(void) {
  const char *src = ogb_folder("ogb_mag");
  char out[512];
  snprintf(out, sizeof out, "%s", ng_test_path("ogb_mag_out"));
  ng_convert_opts co = NG_CONVERT_OPTS_INIT;
  co.format = NG_FORMAT_OGB;
  EXPECT_OK(ng_hetero_convert_ogb(out, src, &co));
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_hetero_t ds = open_checked(out, &info);
  if (!ds)
    return;
  EXPECT_STR(info.name, "ogb_mag");
  EXPECT_EQ_I(info.node_types, 3);
  EXPECT_EQ_I(info.edge_types, 3);
  EXPECT_EQ_I(info.nodes, 9);
  EXPECT_EQ_I(info.edges, 4 + 3 + 2); /* the repeated 0,0 of writes is dropped */
  EXPECT_EQ_I(info.target, 2);
  EXPECT_EQ_I(info.classes, 2);
  EXPECT_EQ_I(info.train, 2);
  EXPECT_EQ_I(info.val, 1);
  EXPECT_EQ_I(info.test, 0);
  /* Relations in folder-name order. */
  ng_edge_type_info et = NG_EDGE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_edge_type(&et, ds, 0));
  EXPECT_STR(et.relation, "affiliated_with");
  EXPECT_OK(ng_hetero_edge_type(&et, ds, 2));
  EXPECT_STR(et.relation, "cites");
  EXPECT_RELATION(ds, "author", "writes", "paper", ((const int64_t[]){0, 2, 3, 3, 4}), 4,
                  ((const int32_t[]){0, 1, 1, 2}));
  EXPECT_RELATION(ds, "paper", "cites", "paper", ((const int64_t[]){0, 2, 2, 3, 3}), 4,
                  ((const int32_t[]){1, 2, 3}));
  EXPECT_RELATION(ds, "author", "affiliated_with", "institution", ((const int64_t[]){0, 1, 2}), 2,
                  ((const int32_t[]){2, 0}));
  const float *x = NULL;
  EXPECT_OK(ng_hetero_features(&x, ds, 2));
  const float want[8] = {0.5f, 1, -2, 3.25f, 4, 5, 0.6f, -7};
  for (int i = 0; x && i < 8; i++)
    EXPECT_NEAR(x[i], want[i], 0.0);
  EXPECT_OK(ng_hetero_features(&x, ds, 0));
  EXPECT_TRUE(x == NULL);
  const int32_t *y = NULL;
  EXPECT_OK(ng_hetero_labels(&y, ds));
  const int32_t want_y[4] = {0, 1, -1, 1};
  for (int i = 0; y && i < 4; i++)
    EXPECT_EQ_I(y[i], want_y[i]);
  ng_hetero_close(ds);

  /* undirected: each relation's reverse; cites (within papers) both ways. */
  snprintf(out, sizeof out, "%s", ng_test_path("ogb_mag_undirected"));
  co.undirected = 1;
  co.name = "mag-u";
  EXPECT_OK(ng_hetero_convert_ogb(out, src, &co));
  EXPECT_OK(ng_hetero_open(&ds, out, NULL));
  if (!ds)
    return;
  EXPECT_OK(ng_hetero_info_get(&info, ds));
  EXPECT_STR(info.name, "mag-u");
  EXPECT_EQ_I(info.edge_types, 5);
  EXPECT_RELATION(ds, "paper", "rev_writes", "author", ((const int64_t[]){0, 1, 3, 4}), 3,
                  ((const int32_t[]){0, 0, 1, 3}));
  EXPECT_RELATION(ds, "institution", "rev_affiliated_with", "author",
                  ((const int64_t[]){0, 1, 1, 2}), 3, ((const int32_t[]){1, 0}));
  EXPECT_RELATION(ds, "paper", "cites", "paper", ((const int64_t[]){0, 2, 3, 5, 6}), 4,
                  ((const int32_t[]){1, 2, 0, 0, 3, 2}));
  ng_hetero_close(ds);
}

static void test_convert_ogb_refusals(void) {
  struct {
    const char *file, *text, *needle;
    ng_status status;
  } bad[] = {
      {"raw/relations/author___writes___paper/edge.csv.gz", "0,0\n3,1\n",
       "edge.csv.gz:2: source id 3 is not a \"author\" node (it has 3)", NG_ERR_FORMAT},
      {"raw/relations/author___writes___paper/edge.csv.gz", "0,4\n",
       "destination id 4 is not a \"paper\" node", NG_ERR_FORMAT},
      {"raw/relations/venue___hosts___paper/edge.csv.gz", "0,0\n", "\"venue\" is not a node type",
       NG_ERR_FORMAT},
      {"raw/relations/authorwritespaper/edge.csv.gz", "0,0\n", "<src>___<relation>___<dst>",
       NG_ERR_FORMAT},
      {"raw/num-node-dict.csv.gz", "author,institution,paper\n3,2\n",
       "expected 3 comma-separated node counts", NG_ERR_FORMAT},
      {"raw/num-node-dict.csv.gz", "author,author,paper\n3,2,4\n",
       "node type \"author\" is named twice", NG_ERR_FORMAT},
      {"raw/node-label/paper/node-label.csv.gz", "0\n1\nx\n1\n",
       "node-label.csv.gz:3: expected one class id", NG_ERR_FORMAT},
      {"raw/node-label/paper/node-label.csv.gz", "0\n1\n", "2 label lines but", NG_ERR_FORMAT},
      {"raw/node-feat/paper/node-feat.csv.gz", "1,2\n3\n4,5\n6,7\n",
       "expected 2 comma-separated numbers", NG_ERR_FORMAT},
      {"raw/node-label/author/node-label.csv.gz", "0\n0\n0\n", "labels on a second type",
       NG_ERR_UNSUPPORTED},
      {"split/time/paper/test.csv.gz", "2\n", "node 2 has no label", NG_ERR_FORMAT},
      {"split/time/paper/test.csv.gz", "1\n", "node 1 is listed twice or in two splits",
       NG_ERR_FORMAT},
  };
  for (size_t i = 0; i < NG_TEST_LEN(bad); i++) {
    char name[32], out[512];
    snprintf(name, sizeof name, "ogb_bad%zu", i);
    const char *src = ogb_folder(name);
    put_gz(src, bad[i].file, bad[i].text);
    snprintf(out, sizeof out, "%s_out", src);
    ng_status st = ng_hetero_convert_ogb(out, src, NULL);
    if (st != bad[i].status || !strstr(ng_last_error(), bad[i].needle))
      ng_test_fail(__FILE__, __LINE__, "case %zu: got %s \"%s\", expected %s \"%s\"", i,
                   ng_status_name(st), ng_last_error(), ng_status_name(bad[i].status),
                   bad[i].needle);
    EXPECT_TRUE(!ng_test_exists(out));
  }
  /* A homogeneous OGB folder is not this converter's. */
  char out[512];
  snprintf(out, sizeof out, "%s", ng_test_path("ogb_none_out"));
  EXPECT_STATUS(ng_hetero_convert_ogb(out, ng_test_path("ogb_none"), NULL), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("raw/relations/<src>___<relation>___<dst>");
}

static void test_cora_with_authors(void) {
  ng_dataset_t cora = cora_once();
  char dir[512];
  snprintf(dir, sizeof dir, "%s", ng_test_path("cora_hetero"));
  EXPECT_OK(ng_test_build_cora_hetero(dir, cora));
  ng_hetero_info info = NG_HETERO_INFO_INIT;
  ng_hetero_t ds = open_checked(dir, &info);
  if (!ds)
    return;
  EXPECT_EQ_I(info.node_types, 2);
  EXPECT_EQ_I(info.edge_types, 3);
  EXPECT_EQ_I(info.nodes, 2708 + CORA_AUTHORS);
  EXPECT_EQ_I(info.classes, 7);
  EXPECT_EQ_I(info.train, 140);
  EXPECT_EQ_I(info.val, 500);
  EXPECT_EQ_I(info.test, 1000);
  int32_t writes = -1, wby = -1, cites = -1;
  EXPECT_OK(ng_hetero_find_edge_type(&writes, ds, "author", "writes", "paper"));
  EXPECT_OK(ng_hetero_find_edge_type(&wby, ds, "paper", "written_by", "author"));
  EXPECT_OK(ng_hetero_find_edge_type(&cites, ds, "paper", "cites", "paper"));
  ng_edge_type_info e = NG_EDGE_TYPE_INFO_INIT;
  EXPECT_OK(ng_hetero_edge_type(&e, ds, cites));
  EXPECT_EQ_I(e.edges, 10556);
  const int64_t *wp = NULL, *bp = NULL;
  const void *wi = NULL, *bi = NULL;
  int32_t ib = 0;
  EXPECT_OK(ng_hetero_csr(&wp, &wi, &ib, ds, writes));
  EXPECT_OK(ng_hetero_csr(&bp, &bi, &ib, ds, wby));
  const int32_t *labels = NULL;
  EXPECT_OK(ng_hetero_labels(&labels, ds));
  if (!wp || !bp || !labels) {
    ng_hetero_close(ds);
    return;
  }
  /* Every paper has 1 to 3 authors; most share its label as their home class. */
  int64_t home = 0;
  for (int64_t p = 0; p < 2708; p++) {
    const int64_t len = wp[p + 1] - wp[p];
    if (len < 1 || len > CORA_MAX_AUTHORS_PER_PAPER)
      ng_test_fail(__FILE__, __LINE__, "paper %lld has %lld authors", (long long)p, (long long)len);
    for (int64_t k = wp[p]; k < wp[p + 1]; k++)
      home += ng_test_cora_author_class(((const int32_t *)wi)[k]) == labels[p];
  }
  /* 0.8 + 0.2 / 7 of the draws; a draw repeated in a row counts once. */
  EXPECT_NEAR((double)home / (double)wp[2708], 0.8 + 0.2 / 7, 0.03);
  /* written_by is the exact transpose of writes. */
  EXPECT_EQ_I(bp[CORA_AUTHORS], wp[2708]);
  int64_t matched = 0;
  for (int64_t a = 0; a < CORA_AUTHORS; a++)
    for (int64_t k = bp[a]; k < bp[a + 1]; k++) {
      const int32_t p = ((const int32_t *)bi)[k];
      for (int64_t j = wp[p]; j < wp[p + 1]; j++)
        matched += ((const int32_t *)wi)[j] == a;
    }
  EXPECT_EQ_I(matched, wp[2708]);
  ng_hetero_close(ds);
}

/* ---- per-relation sampling ---- */

typedef struct {
  const ng_csr *csr[8];
  int32_t src[8], dst[8];
  ng_hetero_sampler_cfg cfg;
} sample_setup;

static void setup_sampler(sample_setup *s, ng_hetero_t ds, int32_t layers, const int32_t *fanouts) {
  memset(s, 0, sizeof *s);
  for (int32_t r = 0; r < ds->info.edge_types; r++) {
    s->csr[r] = &ds->etypes[r].csr;
    s->src[r] = ds->etypes[r].src;
    s->dst[r] = ds->etypes[r].dst;
  }
  s->cfg = (ng_hetero_sampler_cfg){ds->info.node_types,
                                   ds->info.edge_types,
                                   layers,
                                   ds->info.target,
                                   s->csr,
                                   s->src,
                                   s->dst,
                                   fanouts};
}

/* The rule every sampler follows, written out: destination v of block l over relation r keeps
 * every position when its fanout k is -1 or at least the row length n; else Floyd's draw of
 * min(k, n - k) positions from stream ng_hash3(ng_hash2(seed, l), r, v), the kept positions
 * when k <= n - k, the excluded ones otherwise. */
static int64_t expected_row(int64_t *out, const ng_csr *g, int64_t v, int32_t k, int32_t l,
                            int32_t r, uint64_t seed) {
  const int64_t lo = g->indptr[v], n = g->indptr[v + 1] - lo;
  const int64_t take = k < 0 || k >= n ? n : k;
  const int64_t m = take == n ? 0 : NG_MIN(take, n - take);
  int64_t *pos = ng_test_xmalloc(sizeof(int64_t) * (size_t)NG_MAX(m, 1));
  if (m > 0) {
    ng_rng rng;
    ng_rng_seed(&rng, ng_hash3(ng_hash2(seed, (uint64_t)l), (uint64_t)r, (uint64_t)v));
    ng__floyd_sorted(pos, m, n, &rng);
  }
  int64_t len = 0;
  for (int64_t p = 0, next = 0; p < n; p++) {
    const bool drawn = next < m && pos[next] == p;
    next += drawn;
    if (m == 0 || drawn == (m == take))
      out[len++] = ng__csr_index(g, lo + p);
  }
  free(pos);
  return len;
}

/* Every block of `mb` as the rule says, the layer lists nested, the counts consistent. */
static void check_minibatch(const ng_hetero_minibatch *mb, const sample_setup *s, uint64_t seed,
                            const int64_t *targets, int32_t n_targets) {
  const ng_hetero_sampler_cfg *c = &s->cfg;
  const int32_t T = c->n_types, R = c->n_rels, L = c->n_layers;
  EXPECT_EQ_I(mb->n_nodes[L * T + c->target_type], n_targets);
  for (int32_t i = 0; i < n_targets; i++)
    EXPECT_EQ_I(mb->node_ids[c->target_type][i], targets[i]);
  for (int32_t l = 0; l < L; l++)
    for (int32_t t = 0; t < T; t++)
      EXPECT_TRUE(mb->n_nodes[l * T + t] >= mb->n_nodes[(l + 1) * T + t]);
  int64_t *want = ng_test_xmalloc(sizeof(int64_t) * 100000);
  int64_t bad = 0;
  for (int32_t l = 0; l < L; l++)
    for (int32_t r = 0; r < R; r++) {
      const ng_block *b = &mb->blocks[l * R + r];
      EXPECT_EQ_I(b->n_dst, mb->n_nodes[(l + 1) * T + c->rel_dst[r]]);
      EXPECT_EQ_I(b->n_src, mb->n_nodes[l * T + c->rel_src[r]]);
      EXPECT_EQ_I(b->nnz, b->indptr[b->n_dst]);
      for (int32_t d = 0; d < b->n_dst; d++) {
        const int64_t v = mb->node_ids[c->rel_dst[r]][d];
        const int64_t len = expected_row(want, c->csr[r], v, c->fanouts[l * R + r], l, r, seed);
        bool ok = b->indptr[d + 1] - b->indptr[d] == len;
        for (int64_t j = 0; ok && j < len; j++) {
          const int32_t u = b->indices[b->indptr[d] + j];
          ok = u >= 0 && u < b->n_src && mb->node_ids[c->rel_src[r]][u] == want[j];
        }
        bad += !ok;
      }
    }
  EXPECT_EQ_I(bad, 0);
  free(want);
}

static void test_sample_per_relation(void) {
  ng_dataset_t cora = cora_once();
  char dir[512];
  snprintf(dir, sizeof dir, "%s", ng_test_path("cora_hetero_sample"));
  EXPECT_OK(ng_test_build_cora_hetero(dir, cora));
  ng_hetero_t ds = NULL;
  EXPECT_OK(ng_hetero_open(&ds, dir, NULL));
  if (!ds)
    return;
  /* Relations: cites, writes, written_by. Block 1 (output): cites 3, writes all, written_by 0;
   * block 0 (input): cites 2, writes 1, written_by 2 (authors reached in block 1 are none:
   * written_by's destinations are authors, sampled only from writes). */
  const int32_t fanouts[2 * 3] = {2, 1, 2, 3, -1, 0};
  sample_setup su;
  setup_sampler(&su, ds, 2, fanouts);
  const int64_t targets[5] = {1701, 12, 2000, 7, 333};
  const uint64_t seed = 0x5eedu;
  ng_hetero_minibatch mb, again, other;
  EXPECT_OK(ng__hetero_sample(&mb, &su.cfg, targets, 5, seed));
  if (mb.n_layers == 2) {
    check_minibatch(&mb, &su, seed, targets, 5);
    /* Authors appear in layer 1 (from writes) and feed written_by in block 0. */
    EXPECT_TRUE(mb.n_nodes[1 * 2 + 1] > 0);
    EXPECT_TRUE(mb.blocks[0 * 3 + 2].nnz > 0);
    EXPECT_EQ_I(mb.blocks[1 * 3 + 2].nnz, 0);
  }
  /* The same seed: the same bytes; another seed: other draws. */
  EXPECT_OK(ng__hetero_sample(&again, &su.cfg, targets, 5, seed));
  EXPECT_OK(ng__hetero_sample(&other, &su.cfg, targets, 5, seed + 1));
  bool same = again.n_layers == 2, differs = false;
  for (int32_t i = 0; same && i < 6; i++) {
    same = mb.blocks[i].nnz == again.blocks[i].nnz &&
           memcmp(mb.blocks[i].indices, again.blocks[i].indices,
                  sizeof(int32_t) * (size_t)mb.blocks[i].nnz) == 0;
    differs |= other.n_layers == 2 && (mb.blocks[i].nnz != other.blocks[i].nnz ||
                                       memcmp(mb.blocks[i].indices, other.blocks[i].indices,
                                              sizeof(int32_t) * (size_t)mb.blocks[i].nnz) != 0);
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(differs);
  check_minibatch(&other, &su, seed + 1, targets, 5);
  ng__hetero_minibatch_free(&again);
  ng__hetero_minibatch_free(&other);
  /* A target's neighbours do not depend on the batch around it. */
  ng_hetero_minibatch alone;
  EXPECT_OK(ng__hetero_sample(&alone, &su.cfg, &targets[2], 1, seed));
  if (alone.n_layers == 2 && mb.n_layers == 2) {
    const ng_block *a = &alone.blocks[1 * 3 + 0], *b = &mb.blocks[1 * 3 + 0];
    const int64_t len = a->indptr[1];
    EXPECT_EQ_I(len, b->indptr[3] - b->indptr[2]);
    for (int64_t j = 0; j < len && j < b->indptr[3] - b->indptr[2]; j++)
      EXPECT_EQ_I(alone.node_ids[0][a->indices[j]], mb.node_ids[0][b->indices[b->indptr[2] + j]]);
  }
  ng__hetero_minibatch_free(&alone);
  ng__hetero_minibatch_free(&mb);

  /* Large fanouts (more than half a row) draw the excluded positions instead: the rule holds. */
  const int32_t wide[3] = {-1, 2, 3};
  setup_sampler(&su, ds, 1, wide);
  int64_t many[200];
  for (int i = 0; i < 200; i++)
    many[i] = (int64_t)i * 13;
  EXPECT_OK(ng__hetero_sample(&mb, &su.cfg, many, 200, 99));
  if (mb.n_layers == 1)
    check_minibatch(&mb, &su, 99, many, 200);
  ng__hetero_minibatch_free(&mb);

  /* Refusals: a repeated target, a fanout below -1. */
  EXPECT_STATUS(ng__hetero_sample(&mb, &su.cfg, (const int64_t[]){4, 4}, 2, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("negative or repeated");
  EXPECT_TRUE(mb.n_layers == 0 && mb.blocks == NULL);
  const int32_t neg[3] = {-2, 1, 1};
  setup_sampler(&su, ds, 1, neg);
  EXPECT_STATUS(ng__hetero_sample(&mb, &su.cfg, targets, 1, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("fanout -2");
  const int32_t ok[3] = {1, 1, 1};
  setup_sampler(&su, ds, 1, ok);
  EXPECT_STATUS(ng__hetero_sample(&mb, &su.cfg, (const int64_t[]){2708}, 1, 1), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("not a row of relation");
  ng_hetero_close(ds);
}

int main(void) {
  RUN_TEST(test_open_and_describe);
  RUN_TEST(test_handles);
  RUN_TEST(test_json_refusals);
  RUN_TEST(test_array_refusals);
  RUN_TEST(test_csr_refusals);
  RUN_TEST(test_label_split_feature_refusals);
  RUN_TEST(test_homogeneous_as_one_type);
  RUN_TEST(test_generate_deterministic);
  RUN_TEST(test_generate_shape_and_planted_labels);
  RUN_TEST(test_generate_presets_and_refusals);
  RUN_TEST(test_convert_ogb);
  RUN_TEST(test_convert_ogb_refusals);
  RUN_TEST(test_cora_with_authors);
  RUN_TEST(test_sample_per_relation);
  ng_dataset_close(cora_handle);
  return ng_test_summary();
}
