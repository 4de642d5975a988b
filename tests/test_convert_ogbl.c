/* ng_dataset_convert() on OGB link-property folders (ogbl-*) written here: both plain-file split
 * forms (collab-style edge/edge_neg, citation2-style source_node/target_node/target_node_neg)
 * into links/, the leak check (no held-out edge in the message-passing graph), a folder with
 * only torch pickles (graph alone), bad input with clear errors and nothing left behind, and
 * link training on a converted folder, through the C API and the `neargnn` command. */
#include "ng_test.h"

#include "convert_impl.h"
#include "link_impl.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers ---- */

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

static void make_dir(const char *path) {
  if (mkdir(path, 0755) != 0)
    printf("  mkdir %s failed\n", path);
}

static void put_gz(const char *dir, const char *rel, const char *text) {
  char *path = xprintf("%s/%s", dir, rel);
  gzFile gz = gzopen(path, "wb");
  EXPECT_TRUE(gz != NULL);
  if (gz) {
    EXPECT_EQ_I(gzputs(gz, text), (int64_t)strlen(text));
    EXPECT_EQ_I(gzclose(gz), Z_OK);
  }
  free(path);
}

/* Writes split/<scheme>/<part>/<key>.npy (int64), replacing any such file. */
static void put_npy(const char *dir, const char *part, const char *key, int ndim,
                    const int64_t *shape, const int64_t *data) {
  char *pd = xprintf("%s/split/s/%s", dir, part);
  mkdir(pd, 0755);
  char *path = xprintf("%s/%s.npy", pd, key);
  unlink(path);
  EXPECT_OK(ng__npy_write(path, NG_DTYPE_I64, ndim, shape, data));
  free(path);
  free(pd);
}

static void drop_npy(const char *dir, const char *part, const char *key) {
  char *path = xprintf("%s/split/s/%s/%s.npy", dir, part, key);
  EXPECT_EQ_I(unlink(path), 0);
  free(path);
}

/* True when neither `dst` nor any `dst.tmp-*` exists: a failed conversion leaves nothing. */
static bool nothing_left(const char *dst) {
  if (ng_test_exists(dst))
    return false;
  const char *slash = strrchr(dst, '/');
  char parent[4096];
  const size_t plen = (size_t)(slash - dst);
  memcpy(parent, dst, plen);
  parent[plen] = '\0';
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s.tmp-", slash + 1);
  DIR *d = opendir(parent);
  if (!d)
    return false;
  bool clean = true;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
      clean = false;
  closedir(d);
  return clean;
}

static int out_count;
static const char *fresh_out(void) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/out%d", ng_test_tmpdir(), out_count++);
  return buf;
}

/* The raw/ part of a folder: `nodes`, the edge list and (optional) 3 features per node. */
static const char *make_raw(const char *name, const char *nodes, const char *edges, bool feats) {
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  make_dir(dir);
  char *p = xprintf("%s/raw", dir);
  make_dir(p);
  free(p);
  put_gz(dir, "raw/num-node-list.csv.gz", nodes);
  put_gz(dir, "raw/edge.csv.gz", edges);
  if (feats) {
    const int64_t n = atoll(nodes);
    char *text = ng_test_xmalloc((size_t)n * 64 + 1);
    size_t len = 0;
    for (int64_t v = 0; v < n; v++) /* distinct, non-zero rows */
      len += (size_t)sprintf(text + len, "%lld.5,%lld,-%lld.25\n", (long long)v, (long long)(v % 3),
                             (long long)(n - v));
    put_gz(dir, "raw/node-feat.csv.gz", text);
    free(text);
  }
  p = xprintf("%s/split", dir);
  make_dir(p);
  free(p);
  p = xprintf("%s/split/s", dir);
  make_dir(p);
  free(p);
  return dir;
}

/* A collab-style undirected folder of 8 nodes: a ring plus chords; valid (0, 4) and test (6, 2)
 * are in the raw edge list too (as a user's own data might have them), so that their removal
 * from the message-passing graph is seen. Train lists a repeat, a self loop and the held-out
 * {0, 4} twice. Valid has 3 pooled negatives, test 1: K = 3, test's dealt three times. */
static const char *make_collab(const char *name) {
  const char *dir =
      make_raw(name, "8\n", "0,1\n1,2\n2,3\n3,4\n4,5\n5,6\n6,7\n7,0\n0,2\n1,3\n0,4\n2,6\n", true);
  static const int64_t train[] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7,
                                  7, 0, 0, 2, 1, 3, 1, 0, 5, 5, 4, 0, 0, 4};
  const int64_t ts[2] = {14, 2};
  put_npy(dir, "train", "edge", 2, ts, train);
  const int64_t one[2] = {1, 2};
  put_npy(dir, "valid", "edge", 2, one, (const int64_t[]){0, 4});
  put_npy(dir, "valid", "edge_neg", 2, (const int64_t[]){3, 2},
          (const int64_t[]){0, 5, 1, 6, 3, 7});
  put_npy(dir, "test", "edge", 2, one, (const int64_t[]){6, 2});
  put_npy(dir, "test", "edge_neg", 2, one, (const int64_t[]){1, 5});
  return dir;
}

/* A citation2-style directed folder of 6 nodes: valid 0 -> 3 and test 1 -> 4 with two negative
 * targets each; the raw list also has 3 -> 0, the reverse of a held-out edge, which stays. */
static const char *make_citation(const char *name) {
  const char *dir = make_raw(name, "6\n", "0,1\n1,2\n2,3\n3,4\n4,5\n5,0\n0,3\n1,4\n3,0\n", true);
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 3}, dst[] = {1, 2, 3, 4, 5, 0, 0};
  const int64_t n7[1] = {7}, n1[1] = {1}, k2[2] = {1, 2};
  put_npy(dir, "train", "source_node", 1, n7, src);
  put_npy(dir, "train", "target_node", 1, n7, dst);
  put_npy(dir, "valid", "source_node", 1, n1, (const int64_t[]){0});
  put_npy(dir, "valid", "target_node", 1, n1, (const int64_t[]){3});
  put_npy(dir, "valid", "target_node_neg", 2, k2, (const int64_t[]){4, 5});
  put_npy(dir, "test", "source_node", 1, n1, (const int64_t[]){1});
  put_npy(dir, "test", "target_node", 1, n1, (const int64_t[]){4});
  put_npy(dir, "test", "target_node_neg", 2, k2, (const int64_t[]){0, 2});
  return dir;
}

static ng_status convert(const char *dst, const char *src, bool undirected) {
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_OGB;
  o.undirected = undirected;
  return ng_dataset_convert(dst, src, &o);
}

/* A links/ array of the converted folder `dir`, mapped (the caller closes it). */
static void map_links(ng_npy *out, const char *dir, int id) {
  char *path = xprintf("%s/links/%s", dir, NG_LINK_FILE[id]);
  memset(out, 0, sizeof *out);
  EXPECT_OK(ng__npy_map(out, path, false));
  free(path);
}

static bool row_has(const ng_npy *ip, const ng_npy *ix, int64_t row, int64_t col) {
  const int64_t *p = ip->data;
  for (int64_t e = p[row]; e < p[row + 1]; e++) {
    const int64_t c = ix->hdr.dtype == NG_DTYPE_I32 ? ((const int32_t *)ix->data)[e]
                                                    : ((const int64_t *)ix->data)[e];
    if (c == col)
      return true;
  }
  return false;
}

/* The leak check: no held-out positive of val_pos.npy or test_pos.npy (u, v), an edge u -> v
 * stored in row v, is in the message-passing graph; undirected, in neither row. Returns how
 * many held-out pairs were checked. */
static int64_t expect_no_leak(const char *dir, bool undirected) {
  ng_npy ip, ix;
  map_links(&ip, dir, NG_LINK_ARR_INDPTR);
  map_links(&ix, dir, NG_LINK_ARR_INDICES);
  int64_t checked = 0;
  for (int id = NG_LINK_ARR_VAL_POS; id <= NG_LINK_ARR_TEST_POS; id += 2) {
    ng_npy pos;
    map_links(&pos, dir, id);
    const ng_link_pair *p = pos.data;
    for (int64_t i = 0; pos.data && ip.data && ix.data && i < pos.hdr.shape[0]; i++) {
      EXPECT_TRUE(!row_has(&ip, &ix, p[i].v, p[i].u));
      if (undirected)
        EXPECT_TRUE(!row_has(&ip, &ix, p[i].u, p[i].v));
      checked++;
    }
    ng__npy_close(&pos);
  }
  ng__npy_close(&ix);
  ng__npy_close(&ip);
  return checked;
}

static void expect_pairs(const char *dir, int id, const int64_t *want, int64_t n_values) {
  ng_npy a;
  map_links(&a, dir, id);
  EXPECT_EQ_I(ng__npy_count(&a.hdr), n_values);
  for (int64_t i = 0; a.data && i < n_values && i < ng__npy_count(&a.hdr); i++)
    EXPECT_EQ_I(((const int64_t *)a.data)[i], want[i]);
  ng__npy_close(&a);
}

/* ---- the two split forms ---- */

static void test_collab_form(void) {
  const char *src = make_collab("ogbl_collab");
  const char *dst = fresh_out();
  EXPECT_OK(convert(dst, src, true));
  ng_dataset_t ds = ng_test_open_ok(dst);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(info.nodes, 8);
  EXPECT_EQ_I(info.edges, 24); /* 12 undirected edges, both ways */
  EXPECT_EQ_I(info.feature_dim, 3);
  EXPECT_EQ_I(info.classes, 0);
  EXPECT_EQ_I(info.train + info.val + info.test, 0);
  ng_dataset_close(ds);
  /* Train: canonical (min, max), sorted, unique, without the self loop and the held-out {0, 4}. */
  static const int64_t train[] = {0, 1, 0, 2, 0, 7, 1, 2, 1, 3, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7};
  expect_pairs(dst, NG_LINK_ARR_TRAIN_POS, train, 20);
  expect_pairs(dst, NG_LINK_ARR_VAL_POS, (const int64_t[]){0, 4}, 2);
  expect_pairs(dst, NG_LINK_ARR_TEST_POS, (const int64_t[]){6, 2}, 2);
  /* K = ceil(3 / 1) = 3: valid's pool in order; test's single negative dealt three times. */
  expect_pairs(dst, NG_LINK_ARR_VAL_NEG, (const int64_t[]){0, 5, 1, 6, 3, 7}, 6);
  expect_pairs(dst, NG_LINK_ARR_TEST_NEG, (const int64_t[]){1, 5, 1, 5, 1, 5}, 6);
  EXPECT_EQ_I(expect_no_leak(dst, true), 2);
  /* The message-passing graph: the 24 entries less both directions of {0, 4} and {2, 6}. */
  ng_npy ix;
  map_links(&ix, dst, NG_LINK_ARR_INDICES);
  EXPECT_EQ_I(ix.hdr.shape[0], 20);
  ng__npy_close(&ix);
  char *json = xprintf("%s/links/links.json", dst);
  char *text = ng_test_read_file(json, NULL);
  EXPECT_TRUE(text && strstr(text, "\"neg_per_pos\": 3") && strstr(text, "\"train\": 10") &&
              strstr(text, "\"undirected\": true") && strstr(text, "\"mp_edges\": 20"));
  free(text);
  free(json);
  json = xprintf("%s/dataset.json", dst);
  text = ng_test_read_file(json, NULL);
  EXPECT_TRUE(text && strstr(text, "train 10 (dropped 3 repeats and self loops and 1 held-out "
                                   "pairs), val 1, test 1, 3 negatives per positive (dealt from "
                                   "edge_neg)"));
  free(text);
  free(json);
}

static void test_citation_form(void) {
  const char *src = make_citation("ogbl_citation");
  const char *dst = fresh_out();
  EXPECT_OK(convert(dst, src, false));
  ng_dataset_t ds = ng_test_open_ok(dst);
  ng_dataset_close(ds);
  /* Directed: pairs keep OGB's (source, target); the negatives keep the source. */
  static const int64_t train[] = {0, 1, 1, 2, 2, 3, 3, 0, 3, 4, 4, 5, 5, 0};
  expect_pairs(dst, NG_LINK_ARR_TRAIN_POS, train, 14);
  expect_pairs(dst, NG_LINK_ARR_VAL_POS, (const int64_t[]){0, 3}, 2);
  expect_pairs(dst, NG_LINK_ARR_VAL_NEG, (const int64_t[]){0, 4, 0, 5}, 4);
  expect_pairs(dst, NG_LINK_ARR_TEST_NEG, (const int64_t[]){1, 0, 1, 2}, 4);
  EXPECT_EQ_I(expect_no_leak(dst, false), 2);
  /* Only the held-out entries left: row 3 lost 0 (0 -> 3), row 4 lost 1; row 0 keeps 3 (3 -> 0,
   * a training edge) and 5. */
  ng_npy ip, ix;
  map_links(&ip, dst, NG_LINK_ARR_INDPTR);
  map_links(&ix, dst, NG_LINK_ARR_INDICES);
  if (ip.data && ix.data) {
    EXPECT_EQ_I(ix.hdr.shape[0], 7);
    EXPECT_TRUE(row_has(&ip, &ix, 0, 3));
    EXPECT_TRUE(row_has(&ip, &ix, 0, 5));
    EXPECT_TRUE(row_has(&ip, &ix, 3, 2));
    EXPECT_TRUE(!row_has(&ip, &ix, 3, 0));
    EXPECT_TRUE(!row_has(&ip, &ix, 4, 1));
  }
  ng__npy_close(&ix);
  ng__npy_close(&ip);
  char *json = xprintf("%s/links/links.json", dst);
  char *text = ng_test_read_file(json, NULL);
  EXPECT_TRUE(text && strstr(text, "\"neg_per_pos\": 2") &&
              strstr(text, "\"neg_source\": \"source\"") && strstr(text, "\"undirected\": false"));
  free(text);
  free(json);
}

/* Only OGB's torch pickles: the graph converts, no links/, and dataset.json says so. */
static void test_pickles_only(void) {
  const char *src = make_raw("ogbl_pt", "5\n", "0,1\n1,2\n2,3\n3,4\n", false);
  char *pt = xprintf("%s/split/s/train.pt", src);
  EXPECT_TRUE(ng_test_write_file(pt, "PK", 2));
  free(pt);
  const char *dst = fresh_out();
  EXPECT_OK(convert(dst, src, true));
  ng_dataset_t ds = ng_test_open_ok(dst);
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(info.edges, 8);
  EXPECT_EQ_I(info.feature_dim, 0);
  ng_dataset_close(ds);
  char *links = xprintf("%s/links", dst);
  EXPECT_TRUE(!ng_test_exists(links));
  free(links);
  char *json = xprintf("%s/dataset.json", dst);
  char *text = ng_test_read_file(json, NULL);
  EXPECT_TRUE(text && strstr(text, "task=link split=s links=none"));
  free(text);
  free(json);
}

/* ---- bad input: a clear error, nothing left ---- */

static void expect_failure(const char *src, bool undirected, ng_status status, const char *needle) {
  const char *dst = fresh_out();
  EXPECT_STATUS(convert(dst, src, undirected), status);
  EXPECT_ERR_HAS(needle);
  EXPECT_TRUE(nothing_left(dst));
}

static void test_bad_input(void) {
  const int64_t one[2] = {1, 2};
  /* An id out of range. */
  const char *src = make_collab("bad_range");
  put_npy(src, "valid", "edge_neg", 2, one, (const int64_t[]){2, 8});
  expect_failure(src, true, NG_ERR_FORMAT, "node id 8 is out of range");
  /* An edge array of three columns. */
  src = make_collab("bad_cols");
  put_npy(src, "test", "edge", 2, (const int64_t[]){1, 3}, (const int64_t[]){6, 2, 1});
  expect_failure(src, true, NG_ERR_FORMAT, "test/edge.npy: shape [1, 3]; expected [n, 2]");
  /* Negative targets for a different number of positives. */
  src = make_citation("bad_neg_rows");
  put_npy(src, "test", "target_node_neg", 2, (const int64_t[]){2, 2},
          (const int64_t[]){0, 2, 3, 5});
  expect_failure(src, false, NG_ERR_FORMAT, "target_node_neg.npy: shape [2, 2]; expected [1, K]");
  /* Sources and targets of different lengths. */
  src = make_citation("bad_lengths");
  put_npy(src, "train", "target_node", 1, (const int64_t[]){6},
          (const int64_t[]){1, 2, 3, 4, 5, 0});
  expect_failure(src, false, NG_ERR_FORMAT,
                 "source_node.npy has shape [7] and target_node.npy [6]");
  /* Different K in valid and test. */
  src = make_citation("bad_k");
  put_npy(src, "test", "target_node_neg", 2, (const int64_t[]){1, 3}, (const int64_t[]){0, 2, 5});
  expect_failure(src, false, NG_ERR_FORMAT, "valid has 2 negatives per positive and test 3");
  /* Missing files: negatives, then positives. */
  src = make_collab("bad_no_neg");
  drop_npy(src, "valid", "edge_neg");
  expect_failure(src, true, NG_ERR_NOT_FOUND, "valid: no negatives");
  src = make_collab("bad_no_pos");
  drop_npy(src, "test", "edge");
  expect_failure(src, true, NG_ERR_NOT_FOUND, "test: neither edge.npy nor source_node.npy");
  /* A float array where node ids belong. */
  src = make_collab("bad_dtype");
  char *path = xprintf("%s/split/s/valid/edge.npy", src);
  unlink(path);
  EXPECT_OK(ng__npy_write(path, NG_DTYPE_F32, 2, one, (const float[]){0.0f, 4.0f}));
  free(path);
  expect_failure(src, true, NG_ERR_FORMAT, "dtype float32; node ids are int64");
  /* A node count the edge list cannot have (no features to bound it by). */
  src = make_raw("bad_count", "1000000\n", "0,1\n", false);
  expect_failure(src, true, NG_ERR_FORMAT, "says 1000000 nodes");
  /* A knowledge graph. */
  src = make_raw("bad_kg", "3\n", "0,1\n1,2\n", false);
  put_gz(src, "raw/edge_reltype.csv.gz", "0\n1\n");
  expect_failure(src, true, NG_ERR_UNSUPPORTED, "knowledge graphs");
}

/* Interrupted once links/ is written (its progress phase, then the last one): the whole output
 * goes, links/ with it. */
static int stop_at(void *ctx, const char *phase, double done, double total) {
  (void)done;
  (void)total;
  return strcmp(phase, (const char *)ctx) == 0;
}

static void test_interrupted_after_links(void) {
  const char *src = make_collab("interrupted");
  static const char *const PHASES[2] = {"links", "done"};
  for (int i = 0; i < 2; i++) {
    const char *dst = fresh_out();
    ng_convert_opts o = NG_CONVERT_OPTS_INIT;
    o.format = NG_FORMAT_OGB;
    o.undirected = 1;
    o.progress = stop_at;
    o.progress_ctx = (void *)PHASES[i];
    EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INTERRUPTED);
    EXPECT_TRUE(nothing_left(dst));
  }
}

/* ---- training on the converted folder ---- */

static void test_train_link(void) {
  const char *src = make_collab("train_src");
  char dst[4096];
  snprintf(dst, sizeof dst, "%s", fresh_out());
  EXPECT_OK(convert(dst, src, true));
  ng_dataset_t ds = ng_test_open_ok(dst);
  ng_model_t m = NULL;
  EXPECT_OK(ng_model_create(&m, NG_MODEL_SAGE, 3));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT, l1 = NG_LAYER_OPTS_INIT;
  l0.fanout = l1.fanout = 3;
  l0.out_dim = 8;
  l1.out_dim = 4;
  l0.activation = NG_ACT_RELU;
  l1.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(m, &l0));
  EXPECT_OK(ng_model_add_layer(m, &l1));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.batch = 4;
  o.threads = 1;
  ng_link_opts lo = NG_LINK_OPTS_INIT;
  ng_link_trainer_t t = NULL;
  EXPECT_OK(ng_link_trainer_create(&t, ds, m, &o, &lo));
  if (t) {
    ng_link_split_info li = NG_LINK_SPLIT_INFO_INIT;
    EXPECT_OK(ng_link_info(&li, t));
    EXPECT_EQ_I(li.train, 10);
    EXPECT_EQ_I(li.neg_per_pos, 3);
    EXPECT_EQ_I(li.mp_edges, 20);
    for (int e = 0; e < 2; e++) {
      ng_epoch_stats s = NG_EPOCH_STATS_INIT;
      EXPECT_OK(ng_link_trainer_epoch(&s, t));
      EXPECT_TRUE(isfinite(s.loss) && s.loss > 0.0);
    }
    ng_link_metrics r = NG_LINK_METRICS_INIT;
    EXPECT_OK(ng_link_trainer_evaluate(&r, t, NG_SPLIT_TEST));
    EXPECT_TRUE(r.mrr > 0.0 && r.mrr <= 1.0);
  }
  ng_link_trainer_destroy(t);
  ng_model_destroy(m);
  ng_dataset_close(ds);
}

/* The command line: convert prints the links line (or the hint to run split-edges), and
 * `train --task link` runs a few iterations on the converted folder. */
static int run_cmd(const char *cmd, const char *log, const char *needle) {
  char *full = xprintf("%s > %s 2>&1", cmd, log);
  const int rc = system(full);
  free(full);
  char *text = ng_test_read_file(log, NULL);
  const bool found = text && strstr(text, needle);
  if (!found)
    printf("  %s: output lacks '%s':\n%s\n", cmd, needle, text ? text : "(none)");
  EXPECT_TRUE(found);
  free(text);
  return rc;
}

static void test_cli(void) {
  const char *bin = getenv("NG_BIN");
  EXPECT_TRUE(bin != NULL); /* ctest sets it to the neargnn binary */
  if (!bin)
    return;
  char log[4096];
  snprintf(log, sizeof log, "%s/cli.log", ng_test_tmpdir());
  char src[4096], dst[4096];
  snprintf(src, sizeof src, "%s", make_collab("cli_src"));
  snprintf(dst, sizeof dst, "%s", fresh_out());
  char *cmd = xprintf("'%s' convert --format ogb --in '%s' --out '%s' --undirected --progress none",
                      bin, src, dst);
  EXPECT_EQ_I(run_cmd(cmd, log, "train 10, val 1, test 1, 3 negatives per positive"), 0);
  free(cmd);
  cmd = xprintf("'%s' train --dataset '%s' --task link --model sage --fanouts 3,3 --hidden 8 "
                "--batch 4 --epochs 1 --epoch-iters 2 --eval-every 0 --threads 1 --progress none",
                bin, dst);
  EXPECT_EQ_I(run_cmd(cmd, log, "mrr"), 0);
  free(cmd);
  snprintf(src, sizeof src, "%s", make_raw("cli_pt", "4\n", "0,1\n1,2\n2,3\n", false));
  snprintf(dst, sizeof dst, "%s", fresh_out());
  cmd = xprintf("'%s' convert --format ogb --in '%s' --out '%s' --undirected --progress none", bin,
                src, dst);
  EXPECT_EQ_I(run_cmd(cmd, log, "run neargnn split-edges --dataset"), 0);
  free(cmd);
}

int main(void) {
  RUN_TEST(test_collab_form);
  RUN_TEST(test_citation_form);
  RUN_TEST(test_pickles_only);
  RUN_TEST(test_bad_input);
  RUN_TEST(test_interrupted_after_links);
  RUN_TEST(test_train_link);
  RUN_TEST(test_cli);
  return ng_test_summary();
}
