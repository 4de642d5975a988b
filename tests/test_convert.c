/* ng_dataset_convert(): Cora (planetoid) against its README, SNAP edge lists and OGB folders
 * written here, malformed inputs (a clear error, nothing left behind) and interruption. Every
 * output is opened with ng_dataset_open(), which validates it. */
#include "ng_test.h"

#include "convert_impl.h"
#include "rng.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers ---- */

static char *xstrdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xstrdup_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

/* Float arrays compared bit for bit: -0.0 differs from 0.0 here, which is the point. */
static bool same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof *a) == 0; // NOLINT(bugprone-suspicious-memory-comparison)
}

static bool write_text(const char *path, const char *text) {
  return ng_test_write_file(path, text, strlen(text));
}

static bool write_gz(const char *path, const char *text) {
  gzFile gz = gzopen(path, "wb");
  if (!gz)
    return false;
  bool ok = gzputs(gz, text) == (int)strlen(text);
  return gzclose(gz) == Z_OK && ok;
}

static void make_dir(const char *path) {
  if (mkdir(path, 0755) != 0)
    printf("  mkdir %s failed\n", path);
}

/* True when neither `dst` nor any `dst.tmp-*` exists: a failed conversion leaves nothing. */
static bool nothing_left(const char *dst) {
  if (ng_test_exists(dst))
    return false;
  const char *slash = strrchr(dst, '/');
  char parent[4096];
  size_t plen = (size_t)(slash - dst);
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

/* A fresh, not yet existing output folder path. */
static const char *fresh_out(void) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/out%d", ng_test_tmpdir(), out_count++);
  return buf;
}

static cJSON *read_json(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/dataset.json", dir);
  char *text = ng_test_read_file(path, NULL);
  cJSON *json = text ? cJSON_Parse(text) : NULL;
  free(text);
  return json;
}

/* The rows of a CSR are sorted, free of repeats and of self loops. */
static bool rows_clean(const ng_csr *g) {
  for (int64_t v = 0; v < g->nodes; v++)
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++) {
      int64_t u = ng__csr_index(g, e);
      if (u == v || (e > g->indptr[v] && ng__csr_index(g, e - 1) >= u))
        return false;
    }
  return true;
}

static bool has_entry(const ng_csr *g, int64_t row, int64_t col) {
  for (int64_t e = g->indptr[row]; e < g->indptr[row + 1]; e++)
    if (ng__csr_index(g, e) == col)
      return true;
  return false;
}

static bool symmetric(const ng_csr *g) {
  for (int64_t v = 0; v < g->nodes; v++)
    for (int64_t e = g->indptr[v]; e < g->indptr[v + 1]; e++)
      if (!has_entry(g, ng__csr_index(g, e), v))
        return false;
  return true;
}

/* Reads a text file of one integer per line ('#' lines skipped) into a new array. */
static int64_t *read_ids(const char *path, int64_t *count) {
  FILE *f = fopen(path, "r");
  *count = 0;
  if (!f)
    return NULL;
  int64_t cap = 1024, *ids = malloc((size_t)cap * sizeof *ids);
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#')
      continue;
    if (*count == cap)
      ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
    ids[(*count)++] = strtoll(line, NULL, 10);
  }
  fclose(f);
  return ids;
}

/* ---- number parsing ---- */

/* Random decimal tokens in the shapes real files hold parse to exactly strtof's float, on the
 * fast path and off it; malformed tokens are refused and leave the cursor in place. */
static void test_parse_numbers(void) {
  ng_rng r;
  ng_rng_seed(&r, 99);
  int64_t mismatches = 0, fast_shaped = 0;
  char tok[64];
  for (int i = 0; i < 200000; i++) {
    int int_digits = (int)ng_rng_below(&r, 4), frac_digits = (int)ng_rng_below(&r, 12);
    int n = 0;
    if (ng_rng_below(&r, 3) == 0)
      tok[n++] = '-';
    for (int d = 0; d < int_digits || (d == 0 && frac_digits == 0); d++)
      tok[n++] = (char)('0' + ng_rng_below(&r, 10));
    if (frac_digits) {
      tok[n++] = '.';
      for (int d = 0; d < frac_digits; d++)
        tok[n++] = (char)('0' + ng_rng_below(&r, 10));
    }
    if (ng_rng_below(&r, 4) == 0)
      n += snprintf(tok + n, sizeof tok - (size_t)n, "e%d", (int)ng_rng_below(&r, 60) - 30);
    tok[n] = '\0';
    fast_shaped += int_digits + frac_digits <= 7;
    const char *p = tok;
    float got = -1.0f, want = strtof(tok, NULL);
    bool ok = ng__parse_float(&p, &got);
    if (!ok || *p != '\0' || !same_bits(&got, &want, 1)) {
      if (mismatches++ < 5)
        printf("  '%s': parsed %.9g, strtof %.9g\n", tok, (double)got, (double)want);
    }
  }
  EXPECT_EQ_I(mismatches, 0);
  EXPECT_TRUE(fast_shaped > 50000);
  const char *bad[] = {"", "-", ".", "e5", "1e", "1e+", "nan", "inf", "+.e1", "abc"};
  for (size_t i = 0; i < NG_ARRAY_LEN(bad); i++) {
    const char *p = bad[i];
    float f;
    EXPECT_TRUE(!ng__parse_float(&p, &f));
    EXPECT_TRUE(p == bad[i]);
  }
  const char *q = "9223372036854775807 ";
  int64_t v = 0;
  EXPECT_TRUE(ng__parse_u63(&q, &v));
  EXPECT_EQ_I(v, INT64_MAX);
  EXPECT_TRUE(*q == ' ');
  q = "9223372036854775808";
  EXPECT_TRUE(!ng__parse_u63(&q, &v));
  q = "-1";
  EXPECT_TRUE(!ng__parse_u63(&q, &v));
}

/* ---- Cora ---- */

static void test_cora(void) {
  char *src = xstrdup_printf("%s/cora", ng_test_data_dir());
  const char *dst = fresh_out();
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_PLANETOID;
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ng_dataset_t ds = ng_test_open_ok(dst);
  if (!ds) {
    free(src);
    return;
  }
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_STR(info.name, "cora");
  EXPECT_EQ_I(info.nodes, 2708);
  EXPECT_EQ_I(info.edges, 10556);
  EXPECT_EQ_I(info.feature_dim, 1433);
  EXPECT_EQ_I(info.classes, 7);
  EXPECT_EQ_I(info.undirected, 1);
  EXPECT_EQ_I(info.index_bytes, 4);
  EXPECT_EQ_I(info.train, 140);
  EXPECT_EQ_I(info.val, 500);
  EXPECT_EQ_I(info.test, 1000);
  const ng_csr *g = &ds->csr;
  EXPECT_TRUE(rows_clean(g));
  EXPECT_TRUE(symmetric(g));
  /* Every edge of edges.txt is there, in both directions. */
  char *edges = xstrdup_printf("%s/edges.txt", src);
  FILE *f = fopen(edges, "r");
  EXPECT_TRUE(f != NULL);
  long long a, b;
  int64_t lines = 0, missing = 0;
  char line[128];
  while (f && fgets(line, sizeof line, f)) {
    if (line[0] == '#' || sscanf(line, "%lld %lld", &a, &b) != 2)
      continue;
    lines++;
    missing += !has_entry(g, a, b) || !has_entry(g, b, a);
  }
  if (f)
    fclose(f);
  EXPECT_EQ_I(lines, 5278);
  EXPECT_EQ_I(missing, 0);
  /* Class sizes of the README. */
  int64_t sizes[7] = {0};
  for (int64_t v = 0; v < info.nodes; v++)
    if (ds->labels[v] >= 0 && ds->labels[v] < 7)
      sizes[ds->labels[v]]++;
  const int64_t want[7] = {351, 217, 418, 818, 426, 298, 180};
  for (int k = 0; k < 7; k++)
    EXPECT_EQ_I(sizes[k], want[k]);
  /* Features are the source's, bit for bit. */
  char *fpath = xstrdup_printf("%s/features.npy", src);
  ng_npy feat;
  EXPECT_OK(ng__npy_map(&feat, fpath, false));
  EXPECT_TRUE(feat.data && same_bits(feat.data, ds->features, (size_t)2708 * 1433));
  double sum = 0;
  for (int64_t i = 0; i < (int64_t)2708 * 1433; i++)
    sum += ds->features[i];
  EXPECT_NEAR(sum, 49216, 0.5); /* 49216 ones, per the README */
  ng__npy_close(&feat);
  /* The splits are the files' ids, in order. */
  const char *split_file[3] = {"train.txt", "val.txt", "test.txt"};
  for (int s = 0; s < 3; s++) {
    char *p = xstrdup_printf("%s/%s", src, split_file[s]);
    int64_t n, *ids = read_ids(p, &n), bad = 0;
    int64_t have = s == 0 ? info.train : s == 1 ? info.val : info.test;
    EXPECT_EQ_I(n, have);
    for (int64_t i = 0; i < n && i < have; i++)
      bad += ids[i] != ds->split[s][i];
    EXPECT_EQ_I(bad, 0);
    free(ids);
    free(p);
  }
  /* dataset.json records the format and the input. */
  cJSON *json = read_json(dst);
  const cJSON *source = cJSON_GetObjectItemCaseSensitive(json, "source");
  EXPECT_TRUE(cJSON_IsString(source));
  if (cJSON_IsString(source)) {
    EXPECT_TRUE(strstr(source->valuestring, "format=planetoid") != NULL);
    EXPECT_TRUE(strstr(source->valuestring, src) != NULL);
  }
  cJSON_Delete(json);
  ng_dataset_close(ds);
  /* An existing destination is refused and left alone. */
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_EXISTS);
  EXPECT_ERR_HAS("already exists");
  EXPECT_TRUE(ng_test_exists(dst));
  free(fpath);
  free(edges);
  free(src);
}

/* ---- SNAP ---- */

/* Sparse ids (7, 42, 100000007, 2^40, 9), comments, tabs, CRLF, duplicates, self loops, a
 * blank line and no final newline. Node order after renumbering: 7, 9, 42, 100000007, 2^40. */
static const char SNAP_TEXT[] = "# Directed graph: test\n"
                                "# FromNodeId\tToNodeId\n"
                                "7\t42\n"
                                "42 100000007\r\n"
                                "   100000007\t \t1099511627776  \n"
                                "\n"
                                "7 42\n"
                                "42 42\n"
                                "9 7\n"
                                "1099511627776 7";

static void expect_row(const ng_csr *g, int64_t v, const int64_t *want, int64_t n) {
  EXPECT_EQ_I(g->indptr[v + 1] - g->indptr[v], n);
  for (int64_t k = 0; k < n && g->indptr[v] + k < g->indptr[v + 1]; k++)
    EXPECT_EQ_I(ng__csr_index(g, g->indptr[v] + k), want[k]);
}

static void test_snap_sparse(void) {
  const char *src = ng_test_path("edges.txt");
  EXPECT_TRUE(write_text(src, SNAP_TEXT));
  char dst[4096];
  for (int undirected = 0; undirected < 2; undirected++) {
    snprintf(dst, sizeof dst, "%s", fresh_out());
    ng_convert_opts o = NG_CONVERT_OPTS_INIT;
    o.format = NG_FORMAT_SNAP;
    o.undirected = undirected;
    EXPECT_OK(ng_dataset_convert(dst, src, &o));
    ng_dataset_t ds = ng_test_open_ok(dst);
    if (!ds)
      continue;
    ng_dataset_info info = NG_DATASET_INFO_INIT;
    EXPECT_OK(ng_dataset_info_get(&info, ds));
    EXPECT_STR(info.name, "edges");
    EXPECT_EQ_I(info.nodes, 5);
    EXPECT_EQ_I(info.undirected, undirected);
    EXPECT_EQ_I(info.feature_dim, 0);
    EXPECT_EQ_I(info.classes, 0);
    const ng_csr *g = &ds->csr;
    EXPECT_TRUE(rows_clean(g));
    /* Edges (new ids): 0->2, 2->3, 3->4, 1->0, 4->0; row v lists whom v aggregates from. */
    if (!undirected) {
      EXPECT_EQ_I(info.edges, 5);
      const int64_t r0[] = {1, 4}, r2[] = {0}, r3[] = {2}, r4[] = {3};
      expect_row(g, 0, r0, 2);
      expect_row(g, 1, NULL, 0);
      expect_row(g, 2, r2, 1);
      expect_row(g, 3, r3, 1);
      expect_row(g, 4, r4, 1);
    } else {
      EXPECT_EQ_I(info.edges, 10);
      EXPECT_TRUE(symmetric(g));
      const int64_t r0[] = {1, 2, 4}, r1[] = {0}, r2[] = {0, 3}, r3[] = {2, 4}, r4[] = {0, 3};
      expect_row(g, 0, r0, 3);
      expect_row(g, 1, r1, 1);
      expect_row(g, 2, r2, 2);
      expect_row(g, 3, r3, 2);
      expect_row(g, 4, r4, 2);
    }
    char *orig_path = xstrdup_printf("%s/%s", dst, NG_ARRAY_FILE[NG_ARR_ORIG_ID]);
    ng_npy orig;
    EXPECT_OK(ng__npy_map(&orig, orig_path, false));
    EXPECT_EQ_I(orig.hdr.dtype, NG_DTYPE_I64);
    EXPECT_EQ_I(orig.hdr.ndim == 1 ? orig.hdr.shape[0] : -1, 5);
    const int64_t want_orig[5] = {7, 9, 42, 100000007, (int64_t)1 << 40};
    for (int i = 0; i < 5 && orig.data; i++)
      EXPECT_EQ_I(((int64_t *)orig.data)[i], want_orig[i]);
    ng__npy_close(&orig);
    free(orig_path);
    cJSON *json = read_json(dst);
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(json, "source");
    char removed[80];
    snprintf(removed, sizeof removed, "removed %d duplicate entries and 1 self loops",
             undirected ? 2 : 1);
    EXPECT_TRUE(cJSON_IsString(source) && strstr(source->valuestring, "format=snap") &&
                strstr(source->valuestring, NG_ARRAY_FILE[NG_ARR_ORIG_ID]) &&
                strstr(source->valuestring, removed));
    cJSON_Delete(json);
    ng_dataset_close(ds);
  }
}

/* Dense ids (every id in [0, max] used) keep their numbers and need no orig_id.npy; a gzip file
 * reads like a plain one. */
static void test_snap_dense_gz(void) {
  const char *src = ng_test_path("dense.txt.gz");
  EXPECT_TRUE(write_gz(src, "0 1\n1 2\n2 3\n3 0\n3 3\n4 0\n"));
  const char *dst = fresh_out();
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  o.name = "ring";
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ng_dataset_t ds = ng_test_open_ok(dst);
  if (!ds)
    return;
  EXPECT_STR(ds->info.name, "ring");
  EXPECT_EQ_I(ds->info.nodes, 5);
  EXPECT_EQ_I(ds->info.edges, 5);
  const int64_t r0[] = {3, 4}, r1[] = {0}, r2[] = {1}, r3[] = {2};
  expect_row(&ds->csr, 0, r0, 2);
  expect_row(&ds->csr, 1, r1, 1);
  expect_row(&ds->csr, 2, r2, 1);
  expect_row(&ds->csr, 3, r3, 1);
  expect_row(&ds->csr, 4, NULL, 0);
  char *orig_path = xstrdup_printf("%s/%s", dst, NG_ARRAY_FILE[NG_ARR_ORIG_ID]);
  EXPECT_TRUE(!ng_test_exists(orig_path));
  free(orig_path);
  ng_dataset_close(ds);
  /* The default name drops the extensions. */
  const char *dst2 = fresh_out();
  o.name = NULL;
  EXPECT_OK(ng_dataset_convert(dst2, src, &o));
  ds = ng_test_open_ok(dst2);
  if (ds)
    EXPECT_STR(ds->info.name, "dense");
  ng_dataset_close(ds);
}

/* Large ids first go to the hash part of the id table, and move into the direct part once
 * enough ids have been read; the result must not care. */
static void test_snap_id_table(void) {
  enum { CHAIN = 800000 };
  const int64_t late = 1200000, early = 1500000;
  const char *src = ng_test_path("chain.txt");
  FILE *f = fopen(src, "w");
  EXPECT_TRUE(f != NULL);
  if (!f)
    return;
  fprintf(f, "0 %lld\n", (long long)early);
  fprintf(f, "%lld 5\n", 1LL << 50);
  for (int64_t i = 0; i < CHAIN; i++)
    fprintf(f, "%lld %lld\n", (long long)i, (long long)i + 1);
  fprintf(f, "%lld %lld\n", (long long)late, (long long)early);
  fclose(f);
  const char *dst = fresh_out();
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ng_dataset_t ds = ng_test_open_ok(dst);
  if (!ds)
    return;
  /* Ids: 0..CHAIN, late, early, 2^50. */
  int64_t nodes = CHAIN + 4;
  EXPECT_EQ_I(ds->info.nodes, nodes);
  EXPECT_EQ_I(ds->info.edges, CHAIN + 3);
  char *orig_path = xstrdup_printf("%s/%s", dst, NG_ARRAY_FILE[NG_ARR_ORIG_ID]);
  ng_npy orig;
  EXPECT_OK(ng__npy_map(&orig, orig_path, false));
  const int64_t *id = orig.data;
  int64_t bad = 0;
  for (int64_t v = 0; id && v <= CHAIN; v++)
    bad += id[v] != v;
  EXPECT_EQ_I(bad, 0);
  if (id) {
    EXPECT_EQ_I(id[CHAIN + 1], late);
    EXPECT_EQ_I(id[CHAIN + 2], early);
    EXPECT_EQ_I(id[CHAIN + 3], (int64_t)1 << 50);
  }
  /* Row of `early` (new id CHAIN + 2) aggregates from 0 and from `late` (CHAIN + 1). */
  const int64_t r_early[] = {0, CHAIN + 1}, r5[] = {4, CHAIN + 3}, r1[] = {0};
  expect_row(&ds->csr, CHAIN + 2, r_early, 2);
  expect_row(&ds->csr, 5, r5, 2);
  expect_row(&ds->csr, 1, r1, 1);
  expect_row(&ds->csr, CHAIN + 3, NULL, 0);
  ng__npy_close(&orig);
  free(orig_path);
  ng_dataset_close(ds);
}

static void convert_random(const char *dst, const char *src, uint64_t seed) {
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  o.undirected = 1;
  o.features = NG_FEATURES_RANDOM;
  o.feature_dim = 8;
  o.classes = 5;
  o.train_frac = 0.3;
  o.val_frac = 0.2;
  o.test_frac = 0.25;
  o.seed = seed;
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
}

static bool same_file(const char *dir_a, const char *dir_b, const char *name) {
  char *pa = xstrdup_printf("%s/%s", dir_a, name), *pb = xstrdup_printf("%s/%s", dir_b, name);
  ng_npy a, b;
  bool same = ng__npy_map(&a, pa, false) == NG_OK && ng__npy_map(&b, pb, false) == NG_OK &&
              a.hdr.nbytes == b.hdr.nbytes && memcmp(a.data, b.data, a.hdr.nbytes) == 0;
  ng__npy_close(&a);
  ng__npy_close(&b);
  free(pa);
  free(pb);
  return same;
}

/* Made-up features, labels and splits: shapes, ranges, statistics, and the same for the same
 * seed whatever the thread count; different for another seed. */
static void test_snap_random(void) {
  enum { N = 2000 };
  const char *src = ng_test_path("ring.txt");
  FILE *f = fopen(src, "w");
  for (int v = 0; f && v < N; v++)
    fprintf(f, "%d %d\n", v, (v + 1) % N);
  if (f)
    fclose(f);
  char a[4096], b[4096], c[4096];
  snprintf(a, sizeof a, "%s", fresh_out());
  snprintf(b, sizeof b, "%s", fresh_out());
  snprintf(c, sizeof c, "%s", fresh_out());
  omp_set_num_threads(1);
  convert_random(a, src, 5);
  omp_set_num_threads(3);
  convert_random(b, src, 5);
  omp_set_num_threads(2);
  convert_random(c, src, 6);
  ng_dataset_t ds = ng_test_open_ok(a);
  if (!ds)
    return;
  ng_dataset_info info = NG_DATASET_INFO_INIT;
  EXPECT_OK(ng_dataset_info_get(&info, ds));
  EXPECT_EQ_I(info.nodes, N);
  EXPECT_EQ_I(info.edges, 2 * N);
  EXPECT_EQ_I(info.feature_dim, 8);
  EXPECT_EQ_I(info.classes, 5);
  EXPECT_EQ_I(info.train, 600);
  EXPECT_EQ_I(info.val, 400);
  EXPECT_EQ_I(info.test, 500);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < (int64_t)N * 8; i++) {
    sum += ds->features[i];
    sq += (double)ds->features[i] * ds->features[i];
  }
  EXPECT_NEAR(sum / (N * 8), 0.0, 0.05);
  EXPECT_NEAR(sq / (N * 8), 1.0, 0.06);
  int64_t per_class[5] = {0};
  for (int64_t v = 0; v < N; v++)
    if (ds->labels[v] >= 0 && ds->labels[v] < 5)
      per_class[ds->labels[v]]++;
  for (int k = 0; k < 5; k++)
    EXPECT_TRUE(per_class[k] > 300 && per_class[k] < 500);
  /* Splits: sorted, disjoint (ng_dataset_open checked), and not simply the first ids. */
  int64_t unsorted = 0;
  for (int s = 0; s < 3; s++) {
    int64_t n = s == 0 ? info.train : s == 1 ? info.val : info.test;
    for (int64_t i = 1; i < n; i++)
      unsorted += ds->split[s][i] <= ds->split[s][i - 1];
  }
  EXPECT_EQ_I(unsorted, 0);
  EXPECT_TRUE(ds->split[0][599] > 700);
  ng_dataset_close(ds);
  const char *arrays[] = {"features.npy", "labels.npy",   "train_idx.npy",
                          "val_idx.npy",  "test_idx.npy", "indices.npy"};
  for (size_t i = 0; i < NG_ARRAY_LEN(arrays); i++) {
    EXPECT_TRUE(same_file(a, b, arrays[i]));
    if (i < 5)
      EXPECT_TRUE(!same_file(a, c, arrays[i]));
  }
}

/* ---- OGB ---- */

/* An OGB-style folder: 6 nodes, a node without label (nan), one with an empty label, one
 * written as a float, and two split schemes. */
static const char *make_ogb(const char *name, bool with_features) {
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  make_dir(dir);
  char *p = xstrdup_printf("%s/raw", dir);
  make_dir(p);
  free(p);
#define OGB_WRITE(rel, text)                                                                       \
  do {                                                                                             \
    char *path_ = xstrdup_printf("%s/%s", dir, rel);                                               \
    EXPECT_TRUE(write_gz(path_, text));                                                            \
    free(path_);                                                                                   \
  } while (0)
  OGB_WRITE("raw/num-node-list.csv.gz", "6\n");
  OGB_WRITE("raw/edge.csv.gz", "0,1\n1,2\n2,0\n3,4\n4,5\n5,3\n0,1\n2,2\n");
  if (with_features)
    OGB_WRITE("raw/node-feat.csv.gz", "0.5,-1.25,3\n"
                                      "1e-3,2.5E2,-0\n"
                                      "0.1,0.2,0.3\n"
                                      "-0.057943,0.123456789012,7\n"
                                      "1,2,3\n"
                                      "4,5,6\n");
  OGB_WRITE("raw/node-label.csv.gz", "2\n0\nnan\n1.0\n\n3\n");
  const char *schemes[2] = {"random", "time"};
  p = xstrdup_printf("%s/split", dir);
  make_dir(p);
  free(p);
  for (int s = 0; s < 2; s++) {
    char *sd = xstrdup_printf("%s/split/%s", dir, schemes[s]);
    make_dir(sd);
    char *t = xstrdup_printf("%s/train.csv.gz", sd), *v = xstrdup_printf("%s/valid.csv.gz", sd),
         *x = xstrdup_printf("%s/test.csv.gz", sd);
    EXPECT_TRUE(write_gz(t, s ? "0\n1\n" : "5\n"));
    EXPECT_TRUE(write_gz(v, s ? "3\n" : "0\n"));
    EXPECT_TRUE(write_gz(x, s ? "5\n" : "1\n3\n"));
    free(t);
    free(v);
    free(x);
    free(sd);
  }
#undef OGB_WRITE
  return dir;
}

static void test_ogb(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s", make_ogb("ogbn_test", true));
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_OGB;
  /* Two schemes and none chosen: the error lists them. */
  const char *dst = fresh_out();
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("several split schemes (random, time)");
  EXPECT_TRUE(nothing_left(dst));
  o.split = "nosuch";
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_NOT_FOUND);
  EXPECT_ERR_HAS("no split scheme 'nosuch'; available: random, time");
  EXPECT_TRUE(nothing_left(dst));
  o.split = "time";
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ng_dataset_t ds = ng_test_open_ok(dst);
  if (ds) {
    EXPECT_STR(ds->info.name, "ogbn_test");
    EXPECT_EQ_I(ds->info.nodes, 6);
    EXPECT_EQ_I(ds->info.edges, 6);
    EXPECT_EQ_I(ds->info.undirected, 0);
    EXPECT_EQ_I(ds->info.feature_dim, 3);
    EXPECT_EQ_I(ds->info.classes, 4);
    EXPECT_EQ_I(ds->info.train, 2);
    EXPECT_EQ_I(ds->info.val, 1);
    EXPECT_EQ_I(ds->info.test, 1);
    const int64_t r0[] = {2}, r1[] = {0}, r3[] = {5};
    expect_row(&ds->csr, 0, r0, 1);
    expect_row(&ds->csr, 1, r1, 1);
    expect_row(&ds->csr, 3, r3, 1);
    const int32_t want_labels[6] = {2, 0, -1, 1, -1, 3};
    for (int v = 0; v < 6; v++)
      EXPECT_EQ_I(ds->labels[v], want_labels[v]);
    const float want_feat[18] = {
        0.5f,       -1.25f,          3.0f, 1e-3f, 2.5e2f, -0.0f, 0.1f, 0.2f, 0.3f,
        -0.057943f, 0.123456789012f, 7.0f, 1,     2,      3,     4,    5,    6};
    int bad = 0;
    for (int i = 0; i < 18; i++)
      bad += !same_bits(&ds->features[i], &want_feat[i], 1);
    EXPECT_EQ_I(bad, 0);
    EXPECT_EQ_I(ds->split[0][0], 0);
    EXPECT_EQ_I(ds->split[0][1], 1);
    EXPECT_EQ_I(ds->split[1][0], 3);
    EXPECT_EQ_I(ds->split[2][0], 5);
    cJSON *json = read_json(dst);
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(json, "source");
    EXPECT_TRUE(cJSON_IsString(source) && strstr(source->valuestring, "format=ogb") &&
                strstr(source->valuestring, "split=time"));
    cJSON_Delete(json);
    ng_dataset_close(ds);
  }
  /* Undirected, the other scheme. */
  dst = fresh_out();
  o.split = "random";
  o.undirected = 1;
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ds = ng_test_open_ok(dst);
  if (ds) {
    EXPECT_EQ_I(ds->info.edges, 12);
    EXPECT_EQ_I(ds->info.undirected, 1);
    EXPECT_TRUE(symmetric(&ds->csr));
    EXPECT_EQ_I(ds->info.train, 1);
    EXPECT_EQ_I(ds->split[0][0], 5);
    EXPECT_EQ_I(ds->info.test, 2);
    ng_dataset_close(ds);
  }
  /* Without node-feat.csv.gz there are no features; a single scheme is picked alone. */
  snprintf(src, sizeof src, "%s", make_ogb("ogbn_nofeat", false));
  char *extra = xstrdup_printf("%s/split/random", src);
  char *cmd = xstrdup_printf("rm -r '%s'", extra);
  EXPECT_TRUE(system(cmd) == 0);
  free(cmd);
  free(extra);
  dst = fresh_out();
  o.split = NULL;
  o.undirected = 0;
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  ds = ng_test_open_ok(dst);
  if (ds) {
    EXPECT_EQ_I(ds->info.feature_dim, 0);
    EXPECT_TRUE(ds->features == NULL);
    EXPECT_EQ_I(ds->info.train, 2);
    ng_dataset_close(ds);
  }
}

/* ---- malformed inputs: a clear error and nothing left behind ---- */

typedef struct {
  const char *file;   /* relative to the input folder ("" = the input is this file) */
  const char *text;   /* its new content */
  bool gz;            /* write it gzip-compressed */
  ng_status status;   /* expected status */
  const char *needle; /* expected in ng_last_error() */
} bad_case;

static void expect_failure(ng_format fmt, const char *src, const char *split, ng_status status,
                           const char *needle) {
  const char *dst = fresh_out();
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = fmt;
  o.split = split;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), status);
  EXPECT_ERR_HAS(needle);
  EXPECT_TRUE(nothing_left(dst));
}

/* A small planetoid folder: 4 nodes, 2 features, labels 0/1. */
static const char *make_planetoid(const char *name) {
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s", ng_test_path(name));
  make_dir(dir);
  char *p = xstrdup_printf("%s/edges.txt", dir);
  EXPECT_TRUE(write_text(p, "# small\n0 1\n1 2\n2 3\n"));
  free(p);
  const float feat[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t lab[4] = {0, 1, 0, 1};
  int64_t fs[2] = {4, 2}, ls = 4;
  p = xstrdup_printf("%s/features.npy", dir);
  EXPECT_OK(ng__npy_write(p, NG_DTYPE_F32, 2, fs, feat));
  free(p);
  p = xstrdup_printf("%s/labels.npy", dir);
  EXPECT_OK(ng__npy_write(p, NG_DTYPE_I32, 1, &ls, lab));
  free(p);
  const char *splits[3][2] = {{"train.txt", "0\n"}, {"val.txt", "1\n"}, {"test.txt", "2\n3\n"}};
  for (int s = 0; s < 3; s++) {
    p = xstrdup_printf("%s/%s", dir, splits[s][0]);
    EXPECT_TRUE(write_text(p, splits[s][1]));
    free(p);
  }
  return dir;
}

static void test_bad_planetoid(void) {
  const bad_case cases[] = {
      {"edges.txt", "0 1\n1 abc\n", false, NG_ERR_FORMAT,
       "edges.txt:2: expected two node ids (integers from 0 to 2^63-1) separated by blanks; the "
       "line stops parsing at column 3"},
      {"edges.txt", "0 1\n# c\n1 2 3\n", false, NG_ERR_FORMAT, "edges.txt:3: expected two node"},
      {"edges.txt", "0 1\n3\n", false, NG_ERR_FORMAT, "edges.txt:2: expected two node ids"},
      {"edges.txt", "-1 2\n", false, NG_ERR_FORMAT, "edges.txt:1:"},
      {"edges.txt", "0 99999999999999999999\n", false, NG_ERR_FORMAT, "edges.txt:1:"},
      {"edges.txt", "0 1\n1 4\n", false, NG_ERR_FORMAT,
       "edges.txt:2: node id 4 is out of range: features.npy gives 4 nodes (ids 0 to 3)"},
      {"train.txt", "0\nx\n", false, NG_ERR_FORMAT, "train.txt:2: expected one node id per line"},
      {"train.txt", "0\n9\n", false, NG_ERR_FORMAT, "train.txt:2: node id 9 is out of range"},
      {"train.txt", "0\n0\n", false, NG_ERR_FORMAT,
       "train.txt:2: node 0 is already in the train split (listed twice)"},
      {"val.txt", "1\n0\n", false, NG_ERR_FORMAT,
       "val.txt:2: node 0 is already in the train split; splits must be disjoint"},
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    char name[32];
    snprintf(name, sizeof name, "bad_planetoid%zu", i);
    const char *dir = make_planetoid(name);
    char *p = xstrdup_printf("%s/%s", dir, cases[i].file);
    EXPECT_TRUE(write_text(p, cases[i].text));
    free(p);
    expect_failure(NG_FORMAT_PLANETOID, dir, NULL, cases[i].status, cases[i].needle);
  }
  /* Arrays: wrong dtype, wrong length, non-finite features, bad labels; missing files. */
  const char *dir = make_planetoid("bad_arrays");
  char *fp = xstrdup_printf("%s/features.npy", dir), *lp = xstrdup_printf("%s/labels.npy", dir);
  int64_t fs[2] = {4, 2}, ls3 = 3, ls4 = 4;
  const int32_t ints[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  unlink(fp);
  EXPECT_OK(ng__npy_write(fp, NG_DTYPE_I32, 2, fs, ints));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT, "features.npy: int32 array");
  unlink(fp);
  const double feat64[8] = {1, 2, 3, 4, 5, NAN, 7, 8};
  EXPECT_OK(ng__npy_write(fp, NG_DTYPE_F64, 2, fs, feat64));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT,
                 "features.npy: row 2, column 1 is nan; neargnn needs finite features");
  unlink(fp);
  const double big[8] = {1, 2, 3, 4, 5, 6, 1e300, 8};
  EXPECT_OK(ng__npy_write(fp, NG_DTYPE_F64, 2, fs, big));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT, "(too large for float32)");
  unlink(lp);
  const int32_t lab3[3] = {0, 1, 0};
  EXPECT_OK(ng__npy_write(lp, NG_DTYPE_I32, 1, &ls3, lab3));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT,
                 "one label per row of features.npy");
  unlink(fp);
  const double ok64[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_OK(ng__npy_write(fp, NG_DTYPE_F64, 2, fs, ok64));
  unlink(lp);
  const int64_t lab_bad[4] = {0, 1, -5, 1};
  EXPECT_OK(ng__npy_write(lp, NG_DTYPE_I64, 1, &ls4, lab_bad));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT, "node 2 has label -5");
  /* Issue 26: a stray huge label is refused with the node and value, not turned into 1000001
   * classes; sparse labels that leave most classes empty are refused too. */
  unlink(lp);
  const int64_t lab_huge[4] = {0, 1, 1000000, 1};
  EXPECT_OK(ng__npy_write(lp, NG_DTYPE_I64, 1, &ls4, lab_huge));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT,
                 "labels.npy: node 2 has label 1000000; at most 65536 classes are supported");
  unlink(lp);
  const int64_t lab_sparse[4] = {0, 0, 0, 12};
  EXPECT_OK(ng__npy_write(lp, NG_DTYPE_I64, 1, &ls4, lab_sparse));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT,
                 "labels.npy: node 3: label 12 makes 13 classes, but only 2 distinct labels are "
                 "used, so 11 classes would be empty");
  /* At the limit (2 x 2 distinct + 8 slack = 12 classes) the labels convert. */
  unlink(lp);
  const int64_t lab_gap[4] = {0, 11, 0, 11};
  EXPECT_OK(ng__npy_write(lp, NG_DTYPE_I64, 1, &ls4, lab_gap));
  {
    const char *out = fresh_out();
    ng_convert_opts po = NG_CONVERT_OPTS_INIT;
    EXPECT_OK(ng_dataset_convert(out, dir, &po));
    cJSON *js = read_json(out);
    EXPECT_TRUE(js && cJSON_GetNumberValue(cJSON_GetObjectItem(js, "classes")) == 12);
    cJSON_Delete(js);
  }
  unlink(lp);
  const int64_t lab_unl[4] = {0, -1, 0, 1};
  EXPECT_OK(ng__npy_write(lp, NG_DTYPE_I64, 1, &ls4, lab_unl));
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_FORMAT,
                 "val.txt:1: node 1 has no label, so it cannot be in the val split");
  /* float64 features and int64 labels with an unlabelled node outside the splits convert. */
  char *vp = xstrdup_printf("%s/val.txt", dir);
  EXPECT_TRUE(write_text(vp, "# none\n"));
  const char *dst = fresh_out();
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  EXPECT_OK(ng_dataset_convert(dst, dir, &o));
  ng_dataset_t ds = ng_test_open_ok(dst);
  if (ds) {
    EXPECT_EQ_I(ds->info.classes, 2);
    EXPECT_EQ_I(ds->info.val, 0);
    EXPECT_EQ_I(ds->labels[1], -1);
    EXPECT_TRUE(ds->features[6] == 7.0f);
    ng_dataset_close(ds);
  }
  unlink(fp);
  expect_failure(NG_FORMAT_PLANETOID, dir, NULL, NG_ERR_NOT_FOUND, "features.npy: not found");
  char *file_src = xstrdup_printf("%s/edges.txt", dir);
  expect_failure(NG_FORMAT_PLANETOID, file_src, NULL, NG_ERR_INVALID_ARG,
                 "the planetoid format reads a folder");
  expect_failure(NG_FORMAT_PLANETOID, ng_test_path("no_such_folder"), NULL, NG_ERR_NOT_FOUND,
                 "no_such_folder");
  free(file_src);
  free(vp);
  free(fp);
  free(lp);
}

static void test_bad_snap(void) {
  const bad_case cases[] = {
      {"", "1 2\n1\t2\t3\n", false, NG_ERR_FORMAT, "s.txt:2: expected two node ids"},
      {"", "# only a comment\n\n", false, NG_ERR_FORMAT, "no edge found"},
      {"", "1 2\n2,3\n", false, NG_ERR_FORMAT, "s.txt:2:"},
      {"", "12345678901234567890 1\n", false, NG_ERR_FORMAT, "s.txt:1:"},
  };
  const char *src = ng_test_path("s.txt");
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    EXPECT_TRUE(write_text(src, cases[i].text));
    expect_failure(NG_FORMAT_SNAP, src, NULL, cases[i].status, cases[i].needle);
  }
  /* A truncated gzip file is an error, not a shorter graph. */
  const char *gz = ng_test_path("t.txt.gz");
  enum { LINES = 20000, CAP = LINES * 16 };
  char *text = malloc(CAP);
  size_t n = 0;
  for (int i = 0; i < LINES; i++)
    n += (size_t)snprintf(text + n, CAP - n, "%d %d\n", i, (i * 7919) % LINES);
  EXPECT_TRUE(write_gz(gz, text));
  free(text);
  struct stat st;
  EXPECT_TRUE(stat(gz, &st) == 0);
  EXPECT_TRUE(truncate(gz, st.st_size / 2) == 0);
  expect_failure(NG_FORMAT_SNAP, gz, NULL, NG_ERR_FORMAT, "corrupt or truncated gzip data");
  expect_failure(NG_FORMAT_SNAP, ng_test_tmpdir(), NULL, NG_ERR_INVALID_ARG,
                 "is a folder; the snap format reads an edge-list file");
}

static void test_bad_ogb(void) {
  const bad_case cases[] = {
      {"raw/node-feat.csv.gz", "1,2,3\n4,5\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n", true, NG_ERR_FORMAT,
       "node-feat.csv.gz:2: expected 3 comma-separated numbers"},
      {"raw/node-feat.csv.gz", "1,2,3\n4,5,6,7\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n", true, NG_ERR_FORMAT,
       "node-feat.csv.gz:2: expected 3 comma-separated numbers"},
      {"raw/node-feat.csv.gz", "1,2,3\n1,nan,3\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n", true, NG_ERR_FORMAT,
       "node-feat.csv.gz:2: value 2 (column 3): expected a finite number"},
      {"raw/node-feat.csv.gz", "1,2,3\n1,2,3e99\n1,2,3\n1,2,3\n1,2,3\n1,2,3\n", true, NG_ERR_FORMAT,
       "node-feat.csv.gz:2: value 3 (column 5) does not fit float32"},
      {"raw/node-feat.csv.gz", "1,2,3\n1,2,3\n", true, NG_ERR_FORMAT,
       "node-feat.csv.gz: 2 feature lines but raw/num-node-list.csv.gz says 6 nodes"},
      {"raw/node-label.csv.gz", "1\n2\nabc\n1\n1\n1\n", true, NG_ERR_FORMAT,
       "node-label.csv.gz:3: expected a class id"},
      {"raw/node-label.csv.gz", "1\n2\n3.5\n1\n1\n1\n", true, NG_ERR_FORMAT,
       "node-label.csv.gz:3:"},
      {"raw/node-label.csv.gz", "1,0\n", true, NG_ERR_UNSUPPORTED, "multi-label"},
      {"raw/node-label.csv.gz", "1\n2\n1000000\n1\n1\n1\n", true, NG_ERR_FORMAT,
       "node-label.csv.gz:3: label 1000000; at most 65536 classes are supported"},
      {"raw/node-label.csv.gz", "1\n2\n1\n1\n\n300\n", true, NG_ERR_FORMAT,
       "node-label.csv.gz:6: label 300 makes 301 classes, but only 3 distinct labels are used"},
      {"raw/num-node-list.csv.gz", "300000000\n", true, NG_ERR_FORMAT,
       "raw/num-node-list.csv.gz says 300000000 nodes, but"},
      {"raw/num-node-list.csv.gz", "1000000000000\n", true, NG_ERR_FORMAT,
       "label lines, one per node"},
      {"raw/node-label.csv.gz", "1\n2\n", true, NG_ERR_FORMAT,
       "node-label.csv.gz: 2 label lines but raw/num-node-list.csv.gz says 6 nodes"},
      {"raw/edge.csv.gz", "0,1\n1,6\n", true, NG_ERR_FORMAT,
       "edge.csv.gz:2: node id 6 is out of range: raw/num-node-list.csv.gz gives 6 nodes"},
      {"raw/edge.csv.gz", "0,1\n1 2\n", true, NG_ERR_FORMAT,
       "edge.csv.gz:2: expected two node ids (integers from 0 to 2^63-1) separated by a comma"},
      {"raw/num-node-list.csv.gz", "6\n7\n", true, NG_ERR_UNSUPPORTED, "a second node count"},
      {"raw/num-node-list.csv.gz", "six\n", true, NG_ERR_FORMAT, "expected the node count"},
      {"split/time/valid.csv.gz", "0\n", true, NG_ERR_FORMAT,
       "valid.csv.gz:1: node 0 is already in the train split"},
      {"split/time/test.csv.gz", "2\n", true, NG_ERR_FORMAT, "node 2 has no label"},
      {"raw/edge.csv.gz", "this is not gzip but plain text\n", false, NG_ERR_FORMAT,
       "edge.csv.gz:1: expected two node ids"},
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    char name[32];
    snprintf(name, sizeof name, "bad_ogb%zu", i);
    const char *dir = make_ogb(name, true);
    char *p = xstrdup_printf("%s/%s", dir, cases[i].file);
    unlink(p);
    EXPECT_TRUE(cases[i].gz ? write_gz(p, cases[i].text) : write_text(p, cases[i].text));
    free(p);
    expect_failure(NG_FORMAT_OGB, dir, "time", cases[i].status, cases[i].needle);
  }
  const char *dir = make_ogb("bad_ogb_missing", true);
  char *p = xstrdup_printf("%s/split/time/test.csv.gz", dir);
  unlink(p);
  expect_failure(NG_FORMAT_OGB, dir, "time", NG_ERR_NOT_FOUND, "test.csv.gz: not found");
  free(p);
  p = xstrdup_printf("%s/raw/edge.csv.gz", dir);
  unlink(p);
  expect_failure(NG_FORMAT_OGB, dir, "time", NG_ERR_NOT_FOUND, "heterogeneous");
  free(p);
  expect_failure(NG_FORMAT_OGB, ng_test_tmpdir(), NULL, NG_ERR_NOT_FOUND, "no raw/ folder");
}

static void test_bad_options(void) {
  const char *src = ng_test_path("opt.txt");
  EXPECT_TRUE(write_text(src, "0 1\n"));
  const char *dst = fresh_out();
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  o.format = NG_FORMAT_SNAP;
  o.size = 3;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("NG_CONVERT_OPTS_INIT");
  o.size = sizeof o;
  o.features = NG_FEATURES_RANDOM;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("random features need a dimension");
  o.features = NG_FEATURES_NONE;
  o.feature_dim = 4;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("without random features");
  o.feature_dim = 0;
  o.classes = 3;
  o.train_frac = 0.7;
  o.val_frac = 0.4;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("split fractions");
  o.classes = -1;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  o.classes = 65537;
  o.val_frac = 0.1;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("classes is 65537; at most 65536 classes are supported");
  o.classes = 0;
  o.split = "time";
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("only for OGB");
  o.split = NULL;
  o.format = NG_FORMAT_PLANETOID;
  o.classes = 3;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("take");
  o.classes = 0;
  o.format = (ng_format)7;
  EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("unknown input format");
  EXPECT_STATUS(ng_dataset_convert(dst, NULL, NULL), NG_ERR_INVALID_ARG);
  EXPECT_TRUE(nothing_left(dst));
}

/* ---- progress and interruption ---- */

typedef struct {
  int calls;
  int stop_at;            /* stop on this call (1-based); 0 = never */
  const char *stop_phase; /* or stop on the first call of this phase */
  char phases[512];       /* distinct phases seen, each followed by '|' */
  const char *last;       /* the phase of the last call */
  bool sane;              /* done never exceeded total */
} progress_log;

static int on_progress(void *ctx, const char *phase, double done, double total) {
  progress_log *log = ctx;
  log->calls++;
  log->last = phase;
  if (total > 0 && done > total + 1e-9)
    log->sane = false;
  size_t used = strlen(log->phases);
  if (!strstr(log->phases, phase))
    snprintf(log->phases + used, sizeof log->phases - used, "%s|", phase);
  return (log->stop_at && log->calls >= log->stop_at) ||
         (log->stop_phase && strcmp(phase, log->stop_phase) == 0);
}

static void test_progress(void) {
  char *src = xstrdup_printf("%s/cora", ng_test_data_dir());
  ng_convert_opts o = NG_CONVERT_OPTS_INIT;
  progress_log log = {.sane = true};
  o.progress = on_progress;
  o.progress_ctx = &log;
  const char *dst = fresh_out();
  EXPECT_OK(ng_dataset_convert(dst, src, &o));
  EXPECT_TRUE(log.sane);
  EXPECT_TRUE(strstr(log.phases, "edges (pass 1 of 2)|") != NULL);
  EXPECT_TRUE(strstr(log.phases, "edges (sort)|") != NULL);
  EXPECT_TRUE(log.last && strcmp(log.last, "done") == 0);
  /* Stopping at the first call, in the middle and at the very last: nothing is left. */
  const char *stop_phase[3] = {NULL, "edges (sort)", "done"};
  for (int i = 0; i < 3; i++) {
    progress_log stop = {.stop_at = i == 0, .stop_phase = stop_phase[i], .sane = true};
    o.progress_ctx = &stop;
    dst = fresh_out();
    EXPECT_STATUS(ng_dataset_convert(dst, src, &o), NG_ERR_INTERRUPTED);
    EXPECT_ERR_HAS("stopped by the caller");
    EXPECT_TRUE(nothing_left(dst));
    if (i == 0)
      EXPECT_EQ_I(stop.calls, 1);
    else
      EXPECT_TRUE(stop.last && strcmp(stop.last, stop_phase[i]) == 0);
  }
  /* SNAP with made-up features reports those too, and stops there. */
  const char *snap = ng_test_path("prog.txt");
  EXPECT_TRUE(write_text(snap, "0 1\n1 2\n"));
  o.format = NG_FORMAT_SNAP;
  o.features = NG_FEATURES_RANDOM;
  o.feature_dim = 4;
  progress_log flog = {.sane = true};
  o.progress_ctx = &flog;
  EXPECT_OK(ng_dataset_convert(fresh_out(), snap, &o));
  EXPECT_TRUE(strstr(flog.phases, "features|") != NULL);
  progress_log fstop = {.stop_phase = "features", .sane = true};
  o.progress_ctx = &fstop;
  dst = fresh_out();
  EXPECT_STATUS(ng_dataset_convert(dst, snap, &o), NG_ERR_INTERRUPTED);
  EXPECT_TRUE(nothing_left(dst));
  free(src);
}

/* A file rewritten between the two passes is an error, never an out-of-bounds write. */
typedef struct {
  const char *path, *text;
  bool done;
} rewrite_ctx;

static int rewrite_after_pass1(void *ctx, const char *phase, double done, double total) {
  rewrite_ctx *rw = ctx;
  if (!rw->done && strcmp(phase, "edges (pass 1 of 2)") == 0 && done >= total) {
    EXPECT_TRUE(write_text(rw->path, rw->text));
    rw->done = true;
  }
  return 0;
}

static void test_changed_between_passes(void) {
  char src[4096];
  snprintf(src, sizeof src, "%s", ng_test_path("changing.txt"));
  /* Same line count but all edges into one row; more lines; fewer lines; an unseen id. */
  const char *after[] = {"0 3\n1 3\n2 3\n", "0 1\n1 2\n2 3\n3 0\n0 2\n", "0 1\n",
                         "0 1\n1 2\n2 9\n"};
  for (int fmt = 0; fmt < 2; fmt++) {
    for (size_t i = 0; i < NG_ARRAY_LEN(after); i++) {
      char *before = fmt ? "0 1\n1 2\n2 7\n" : "0 1\n1 2\n2 3\n";
      const char *input = src;
      char *edges = NULL;
      if (fmt == 0) { /* planetoid: rewrite its edges.txt */
        input = make_planetoid(i == 0 ? "chg0" : i == 1 ? "chg1" : i == 2 ? "chg2" : "chg3");
        edges = xstrdup_printf("%s/edges.txt", input);
      }
      EXPECT_TRUE(write_text(edges ? edges : src, before));
      rewrite_ctx rw = {edges ? edges : src, after[i], false};
      ng_convert_opts o = NG_CONVERT_OPTS_INIT;
      o.format = fmt ? NG_FORMAT_SNAP : NG_FORMAT_PLANETOID;
      o.undirected = 1;
      o.progress = rewrite_after_pass1;
      o.progress_ctx = &rw;
      const char *dst = fresh_out();
      EXPECT_STATUS(ng_dataset_convert(dst, input, &o), NG_ERR_IO);
      EXPECT_ERR_HAS("changed while it was being read");
      EXPECT_TRUE(rw.done);
      EXPECT_TRUE(nothing_left(dst));
      free(edges);
    }
  }
}

int main(void) {
  RUN_TEST(test_parse_numbers);
  RUN_TEST(test_cora);
  RUN_TEST(test_snap_sparse);
  RUN_TEST(test_snap_dense_gz);
  RUN_TEST(test_snap_id_table);
  RUN_TEST(test_snap_random);
  RUN_TEST(test_ogb);
  RUN_TEST(test_bad_planetoid);
  RUN_TEST(test_bad_snap);
  RUN_TEST(test_bad_ogb);
  RUN_TEST(test_bad_options);
  RUN_TEST(test_progress);
  RUN_TEST(test_changed_between_passes);
  return ng_test_summary();
}
