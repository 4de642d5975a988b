/* The serving engine's update log (serve/delta.c, docs/serving-engine.md "The log"): records
 * whose header carries its own CRC, the rule that a damaged record is cut only when no valid
 * record follows it (and that every cut is reported), the dataset fingerprint in the log's
 * header, version-1 logs, and the update path's checks (a row that is not finite after the
 * model's normalisation, what an update counts as changed, an update that changes nothing), and
 * group commit: concurrent updates that share one fsync, each answered as if serialised. */
#include "ng_test.h"
#include "ng_test_fetch.h"

#include "dataset_impl.h"
#include "engine_impl.h"
#include "neargnn_serve.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static ng_dataset_t cora;
static ng_srv_fingerprint cora_fp;

/* A path in the test's folder that stays valid (ng_test_path's buffer is reused). */
static const char *tpath(const char *name) {
  static char paths[32][4096];
  static int n;
  char *p = paths[n++ % 32];
  snprintf(p, 4096, "%s", ng_test_path(name));
  return p;
}

static int64_t file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static ng_srv_snap *base_snap(ng_dataset_t ds) {
  ng_srv_snap *s = NULL;
  EXPECT_OK(ng__srv_snap_base(&s, &ds->csr, ds->features, ds->info.feature_dim, NG_NORMALIZE_NONE));
  return s;
}

/* Opens `path` for `fp` on a fresh snapshot of cora; the snapshot is dropped. */
static ng_status reopen(const char *path, const ng_srv_fingerprint *fp, ng_srv_log_report *rep) {
  ng_srv_snap *s = base_snap(cora);
  ng_srv_log log;
  ng_status st = ng__srv_log_open(&log, path, &s, fp, rep);
  if (st == NG_OK)
    ng__srv_log_close(&log);
  ng__srv_snap_unref(s);
  return st;
}

/* Writes a log of `n` one-edge records (edge 200 + i -> 100 + i % 7) and keeps each record's
 * offset in off[0, n] (off[n]: the end), read from the file's size after each append, so that the
 * test does not depend on the record layout. */
static void write_log(const char *path, int n, int64_t *off) {
  unlink(path);
  ng_srv_snap *s = base_snap(cora);
  ng_srv_log log;
  ng_srv_log_report rep;
  EXPECT_OK(ng__srv_log_open(&log, path, &s, &cora_fp, &rep));
  off[0] = file_size(path);
  for (int i = 0; i < n; i++) {
    int64_t src = 200 + i, dst = 100 + i % 7;
    ng_graph_update u;
    memset(&u, 0, sizeof u);
    u.n_add_edges = 1;
    u.add_src = &src;
    u.add_dst = &dst;
    EXPECT_OK(ng__srv_log_append(&log, &u, cora->info.feature_dim));
    off[i + 1] = file_size(path);
  }
  ng__srv_log_close(&log);
  ng__srv_snap_unref(s);
}

static void flip(const char *path, int64_t at, uint8_t mask) {
  size_t len = 0;
  uint8_t *data = ng_test_read_file(path, &len);
  EXPECT_TRUE(data && (size_t)at < len);
  if (data && (size_t)at < len) {
    data[at] ^= mask;
    EXPECT_TRUE(ng_test_write_file(path, data, len));
  }
  free(data);
}

/* The reproduction of issue 37, case 1: one flipped bit in the length field of a middle record
 * of a 140-record log. The log was cut to 70 records; it must be refused, naming the record. */
static void test_flipped_length_refused(void) {
  enum { N = 140 };
  int64_t off[N + 1];
  const char *path = tpath("flip-length.log");
  write_log(path, N, off);
  ng_srv_log_report rep;
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N);
  EXPECT_EQ_I(rep.cut_offset, -1);
  /* Bit 22 of record 70's payload length (bytes 8..16 of a record): now far past the end. */
  flip(path, off[70] + 8 + 2, 0x40);
  const int64_t before = file_size(path);
  EXPECT_STATUS(reopen(path, &cora_fp, &rep), NG_ERR_FORMAT);
  char want[64];
  snprintf(want, sizeof want, "record at byte %lld", (long long)off[70]);
  EXPECT_ERR_HAS(want);
  EXPECT_ERR_HAS("header that fails its CRC-32"); /* checked before the length was used */
  snprintf(want, sizeof want, "follows at byte %lld", (long long)off[71]);
  EXPECT_ERR_HAS(want);
  EXPECT_EQ_I(file_size(path), before); /* nothing cut */
  /* The same bit in the sequence number and a bit of the payload: refused as well. */
  write_log(path, N, off);
  flip(path, off[70] + 16, 0x01);
  EXPECT_STATUS(reopen(path, &cora_fp, &rep), NG_ERR_FORMAT);
  EXPECT_EQ_I(file_size(path), off[N]);
  write_log(path, N, off);
  flip(path, off[70] + 40, 0x08);
  EXPECT_STATUS(reopen(path, &cora_fp, &rep), NG_ERR_FORMAT);
  EXPECT_EQ_I(file_size(path), off[N]);
}

/* A tail is cut only when nothing valid follows it, and the cut is reported. */
static void test_torn_tail_cut_and_reported(void) {
  enum { N = 20 };
  int64_t off[N + 1];
  const char *path = tpath("torn.log");
  ng_srv_log_report rep;
  /* The last record cut short by a crash during its append. */
  write_log(path, N, off);
  const int64_t keep = off[N - 1] + (off[N] - off[N - 1]) / 2;
  EXPECT_EQ_I(truncate(path, keep), 0);
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N - 1);
  EXPECT_EQ_I(rep.cut_offset, off[N - 1]);
  EXPECT_EQ_I(rep.cut_bytes, keep - off[N - 1]);
  EXPECT_TRUE(rep.cut_why != NULL);
  EXPECT_EQ_I(file_size(path), off[N - 1]);
  /* The last record's length damaged: nothing follows it, so it is a torn tail. */
  write_log(path, N, off);
  flip(path, off[N - 1] + 8 + 2, 0x40);
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N - 1);
  EXPECT_EQ_I(rep.cut_offset, off[N - 1]);
  EXPECT_EQ_I(rep.cut_bytes, off[N] - off[N - 1]);
  /* Zeros after the last record (the file system extended the file before the crash). */
  write_log(path, N, off);
  {
    size_t len = 0;
    char *data = ng_test_read_file(path, &len);
    char *grown = calloc(len + 100, 1);
    if (data && grown) {
      memcpy(grown, data, len);
      EXPECT_TRUE(ng_test_write_file(path, grown, len + 100));
    }
    free(data);
    free(grown);
  }
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N);
  EXPECT_EQ_I(rep.cut_offset, off[N]);
  EXPECT_EQ_I(rep.cut_bytes, 100);
  EXPECT_OK(reopen(path, &cora_fp, &rep)); /* and the next start finds nothing to cut */
  EXPECT_EQ_I(rep.cut_offset, -1);
  EXPECT_EQ_I(rep.replayed, N);
  /* A damaged record followed by a torn one: the torn one is not valid, so both are cut. */
  write_log(path, N, off);
  flip(path, off[N - 2] + 40, 0x01);
  EXPECT_EQ_I(truncate(path, off[N] - 3), 0);
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N - 2);
  EXPECT_EQ_I(rep.cut_offset, off[N - 2]);
  /* A whole record copied after garbage is a valid successor: refused, not cut. */
  write_log(path, N, off);
  {
    size_t len = 0;
    char *data = ng_test_read_file(path, &len);
    const size_t rec = (size_t)(off[N] - off[N - 1]);
    char *more = calloc(len + 7 + rec, 1);
    if (data && more) {
      memcpy(more, data, len);
      memcpy(more + len + 7, data + off[N - 1], rec); /* 7 bytes of zeros, then a record */
      EXPECT_TRUE(ng_test_write_file(path, more, len + 7 + rec));
    }
    free(data);
    free(more);
  }
  EXPECT_STATUS(reopen(path, &cora_fp, &rep), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("valid record follows");
}

/* A version-1 log (the format before record headers had their own CRC) still replays, and is
 * rewritten in the current format; the scan rule holds for it too. */
static uint32_t crc_of(const void *p, size_t n) {
  return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n);
}

static void write_v1_log(const char *path, int n, int64_t *off) {
  const int64_t nodes = cora->info.nodes, dim = cora->info.feature_dim;
  size_t cap = 32 + (size_t)n * 72, len = 0;
  char *buf = calloc(cap, 1);
  memcpy(buf, "NGSRVLOG", 8);
  const uint32_t version = 1;
  memcpy(buf + 8, &version, 4);
  memcpy(buf + 16, &nodes, 8);
  memcpy(buf + 24, &dim, 8);
  len = 32;
  for (int i = 0; i < n; i++) {
    off[i] = (int64_t)len;
    char *r = buf + len;
    const uint32_t magic = 0x5255474eu;
    const uint64_t plen = 56, seq = (uint64_t)i + 1;
    const int64_t counts[4] = {0, 1, 0, 0}, src = 300 + i, dst = 50;
    memcpy(r + 8, &plen, 8);
    memcpy(r + 16, &seq, 8);
    memcpy(r + 24, counts, 32);
    memcpy(r + 56, &src, 8);
    memcpy(r + 64, &dst, 8);
    const uint32_t c = crc_of(r + 8, 64);
    memcpy(r, &magic, 4);
    memcpy(r + 4, &c, 4);
    len += 72;
  }
  off[n] = (int64_t)len;
  EXPECT_TRUE(ng_test_write_file(path, buf, len));
  free(buf);
}

static void test_v1_log(void) {
  enum { N = 6 };
  int64_t off[N + 1];
  const char *path = tpath("v1.log");
  write_v1_log(path, N, off);
  ng_srv_snap *s = base_snap(cora);
  ng_srv_log log;
  ng_srv_log_report rep;
  EXPECT_OK(ng__srv_log_open(&log, path, &s, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N);
  EXPECT_TRUE(rep.migrated);
  ng_srv_rowview rv;
  ng__srv_row(&rv, s, 50);
  EXPECT_EQ_I(ng__srv_rowview_at(&rv, rv.n - 1), 300 + N - 1); /* the updates applied */
  /* The log goes on in version 2. */
  int64_t src = 7, dst = 8;
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  u.n_add_edges = 1;
  u.add_src = &src;
  u.add_dst = &dst;
  EXPECT_OK(ng__srv_log_append(&log, &u, cora->info.feature_dim));
  ng__srv_log_close(&log);
  ng__srv_snap_unref(s);
  size_t len = 0;
  char *data = ng_test_read_file(path, &len);
  uint32_t version = 0;
  if (data)
    memcpy(&version, data + 8, 4);
  free(data);
  EXPECT_EQ_I(version, 2);
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N + 1);
  EXPECT_TRUE(!rep.migrated);
  /* A flipped length in a middle record of a version-1 log: refused, the file unchanged. */
  write_v1_log(path, N, off);
  flip(path, off[2] + 8 + 2, 0x40);
  EXPECT_STATUS(reopen(path, &cora_fp, &rep), NG_ERR_FORMAT);
  EXPECT_EQ_I(file_size(path), off[N]);
  data = ng_test_read_file(path, &len);
  if (data)
    memcpy(&version, data + 8, 4);
  free(data);
  EXPECT_EQ_I(version, 1);
  /* A torn version-1 tail is cut, reported, and the rest rewritten. */
  write_v1_log(path, N, off);
  EXPECT_EQ_I(truncate(path, off[N] - 5), 0);
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_EQ_I(rep.replayed, N - 1);
  EXPECT_EQ_I(rep.cut_offset, off[N - 1]);
  EXPECT_TRUE(rep.migrated);
}

/* ---- the dataset fingerprint ---- */

static void copy_dataset(const char *dst, const char *src, const char *json) {
  EXPECT_EQ_I(mkdir(dst, 0755), 0);
  for (int i = 0; i < NG_ARR_COUNT_; i++) {
    char from[4096], to[4096];
    snprintf(from, sizeof from, "%s/%s", src, NG_ARRAY_FILE[i]);
    snprintf(to, sizeof to, "%s/%s", dst, NG_ARRAY_FILE[i]);
    size_t len = 0;
    void *data = ng_test_read_file(from, &len);
    if (data)
      EXPECT_TRUE(ng_test_write_file(to, data, len));
    free(data);
  }
  char to[4096];
  snprintf(to, sizeof to, "%s/dataset.json", dst);
  EXPECT_TRUE(ng_test_write_file(to, json, strlen(json)));
}

/* dataset.json of `dir` with its "id" line replaced by `line` ("" drops it). */
static char *json_with_id(const char *dir, const char *line) {
  char p[4096];
  snprintf(p, sizeof p, "%s/dataset.json", dir);
  size_t len = 0;
  char *text = ng_test_read_file(p, &len);
  char *at = text ? strstr(text, "\"id\":") : NULL;
  EXPECT_TRUE(at != NULL);
  if (!at)
    return text;
  char *end = strchr(at, '\n');
  char *out = calloc(len + strlen(line) + 1, 1);
  memcpy(out, text, (size_t)(at - text));
  strcat(out, line);
  strcat(out, end + 1);
  free(text);
  return out;
}

static void test_fingerprint(void) {
  /* Every writer draws a new id: the reorder copy of cora has another one. */
  const char *reordered = tpath("cora-reordered");
  ng_reorder_opts ro = NG_REORDER_OPTS_INIT;
  EXPECT_OK(ng_dataset_reorder(reordered, cora, &ro));
  ng_dataset_t r = ng_test_open_ok(reordered);
  if (!r)
    return;
  EXPECT_TRUE(cora->has_id && r->has_id);
  EXPECT_TRUE(memcmp(cora->id, r->id, NG_DATASET_ID_BYTES) != 0);
  ng_srv_fingerprint rfp;
  ng__srv_fingerprint(&rfp, r);
  EXPECT_EQ_I(rfp.nodes, cora_fp.nodes);
  EXPECT_EQ_I(rfp.edges, cora_fp.edges);
  EXPECT_EQ_I(rfp.dim, cora_fp.dim);
  /* The reproduction of issue 37, case 6: a log written for cora onto its reorder copy. */
  int64_t off[4];
  const char *path = tpath("cora-fp.log");
  write_log(path, 3, off);
  ng_srv_log_report rep;
  EXPECT_OK(reopen(path, &cora_fp, &rep));
  EXPECT_STATUS(reopen(path, &rfp, &rep), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("written for the dataset with id");
  EXPECT_EQ_I(file_size(path), off[3]);
  ng_dataset_close(r);

  /* The same arrays under another id: refused by the id alone. */
  const char *twin = tpath("cora-twin");
  char *json = json_with_id(cora->dir, "  \"id\": \"0123456789abcdef0123456789abcdef\",\n");
  copy_dataset(twin, cora->dir, json);
  free(json);
  ng_dataset_t t = ng_test_open_ok(twin);
  if (t) {
    ng_srv_fingerprint tfp;
    ng__srv_fingerprint(&tfp, t);
    EXPECT_EQ_I(tfp.indptr_crc, cora_fp.indptr_crc);
    EXPECT_STATUS(reopen(path, &tfp, &rep), NG_ERR_FORMAT);
    EXPECT_ERR_HAS("0123456789abcdef0123456789abcdef");
    ng_dataset_close(t);
  }
  /* A folder without an id (written before ids) still serves its own log: sizes and indptr. */
  const char *old = tpath("cora-noid");
  json = json_with_id(cora->dir, "");
  copy_dataset(old, cora->dir, json);
  free(json);
  ng_dataset_t o = ng_test_open_ok(old);
  if (o) {
    EXPECT_TRUE(!o->has_id);
    ng_srv_fingerprint ofp;
    ng__srv_fingerprint(&ofp, o);
    const char *opath = tpath("noid.log");
    ng_srv_snap *s = base_snap(o);
    ng_srv_log log;
    EXPECT_OK(ng__srv_log_open(&log, opath, &s, &ofp, &rep));
    ng__srv_log_close(&log);
    ng__srv_snap_unref(s);
    EXPECT_OK(reopen(opath, &ofp, &rep));
    /* ... and not a log of a graph of the same counts with other rows. */
    ng_srv_fingerprint other = ofp;
    other.indptr_crc ^= 1;
    EXPECT_STATUS(reopen(opath, &other, &rep), NG_ERR_FORMAT);
    EXPECT_ERR_HAS("indptr CRC-32");
    ng_dataset_close(o);
  }
  /* An id that is not 32 hex digits is refused on open. */
  const char *bad = tpath("cora-badid");
  json = json_with_id(cora->dir, "  \"id\": \"xyz\",\n");
  copy_dataset(bad, cora->dir, json);
  free(json);
  ng_dataset_t b = NULL;
  EXPECT_STATUS(ng_dataset_open(&b, bad, NULL), NG_ERR_FORMAT);
  EXPECT_ERR_HAS("\"id\"");
}

/* ---- the update path through the engine ---- */

static ng_model_t model;
static char ckpt[4096];

/* An engine over cora with row normalisation and an untrained GCN (the update path does not
 * depend on the weights). */
static ng_engine *row_engine(const char *log) {
  ng_engine_opts o = NG_ENGINE_OPTS_INIT;
  o.log_path = log;
  o.normalize = NG_NORMALIZE_ROW;
  o.workers = 1;
  ng_engine *e = NULL;
  EXPECT_OK(ng_engine_create(&e, cora, model, ckpt, &o));
  return e;
}

/* The reproduction of issue 37, case 5: finite rows that are not finite once row-normalised. */
static void test_nonfinite_after_normalisation(void) {
  const char *path = tpath("nonfinite.log");
  unlink(path);
  ng_engine *e = row_engine(path);
  if (!e)
    return;
  const int64_t dim = cora->info.feature_dim;
  float *row = calloc((size_t)dim, sizeof(float));
  const int64_t size0 = file_size(path);
  int64_t id = 17;
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  u.n_feature_rows = 1;
  u.feature_ids = &id;
  u.feature_values = row;
  /* A row whose only non-zero is the smallest subnormal: its inverse sum overflows. */
  row[3] = 1.4e-45f;
  ng_update_result res = NG_UPDATE_RESULT_INIT;
  EXPECT_STATUS(ng_engine_apply(e, &u, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("node 17");
  EXPECT_ERR_HAS("normalisation");
  /* Values near FLT_MAX whose sum is small: the normalised values overflow. */
  row[3] = 0.0f;
  row[0] = 3e38f;
  row[1] = -3e38f;
  row[2] = 1e-30f;
  EXPECT_STATUS(ng_engine_apply(e, &u, &res), NG_ERR_INVALID_ARG);
  /* The same as an added node's row. */
  u.n_feature_rows = 0;
  u.add_nodes = 1;
  u.add_features = row;
  EXPECT_STATUS(ng_engine_apply(e, &u, &res), NG_ERR_INVALID_ARG);
  EXPECT_ERR_HAS("add_features row 0");
  EXPECT_EQ_I(file_size(path), size0); /* never logged */
  ng_engine_stats st;
  ng_engine_stats_get(&st, e);
  EXPECT_EQ_I(st.updates, 0);
  /* A finite row is still taken. */
  row[0] = 1.0f;
  row[1] = 2.0f;
  row[2] = 0.5f;
  EXPECT_OK(ng_engine_apply(e, &u, &res));
  EXPECT_TRUE(file_size(path) > size0);
  ng_engine_destroy(e);
  free(row);
}

/* Issue 37, case 14: a repeated edge counts once, an edge the graph has counts not at all, and
 * an update that changes nothing is answered without a record. */
static void test_counts_and_empty(void) {
  const char *path = tpath("counts.log");
  unlink(path);
  ng_engine *e = row_engine(path);
  if (!e)
    return;
  const ng_csr *g = &cora->csr;
  const int64_t v = 5, have = ng__csr_index(g, g->indptr[v]); /* an edge have -> v exists */
  int64_t src[4] = {1000, 1000, have, 1001}, dst[4] = {v, v, v, v};
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  u.n_add_edges = 4;
  u.add_src = src;
  u.add_dst = dst;
  ng_update_result res = NG_UPDATE_RESULT_INIT;
  int64_t size = file_size(path);
  EXPECT_OK(ng_engine_apply(e, &u, &res));
  EXPECT_EQ_I(res.added_edges, 2); /* 1000 -> v and 1001 -> v */
  EXPECT_EQ_I(res.added_nodes, 0);
  EXPECT_EQ_I(res.first_new_id, cora->info.nodes);
  EXPECT_EQ_I(res.logged, 1);
  EXPECT_TRUE(file_size(path) > size);
  /* Nothing to do, and only edges that exist: NG_OK, every count 0, no record. */
  size = file_size(path);
  ng_graph_update none;
  memset(&none, 0, sizeof none);
  res = (ng_update_result)NG_UPDATE_RESULT_INIT;
  EXPECT_OK(ng_engine_apply(e, &none, &res));
  EXPECT_EQ_I(res.logged, 0);
  EXPECT_EQ_I(res.added_edges + res.removed_edges + res.added_nodes + res.updated_features, 0);
  EXPECT_EQ_I(res.first_new_id, cora->info.nodes);
  u.n_add_edges = 3; /* 1000, 1000 and `have` -> v: all there now */
  EXPECT_OK(ng_engine_apply(e, &u, &res));
  EXPECT_EQ_I(res.added_edges, 0);
  EXPECT_EQ_I(res.logged, 0);
  int64_t first = -1;
  EXPECT_OK(ng_engine_update(e, &none, &first));
  EXPECT_EQ_I(first, cora->info.nodes);
  EXPECT_EQ_I(file_size(path), size);
  ng_engine_stats st;
  ng_engine_stats_get(&st, e);
  EXPECT_EQ_I(st.updates, 1);
  ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
  EXPECT_OK(ng_engine_log_info_get(&li, e));
  EXPECT_EQ_I(li.records, 1);
  ng_engine_destroy(e);
}

/* The engine reports what its start cut (the command prints it). */
static void test_engine_reports_cut(void) {
  const char *path = tpath("engine-cut.log");
  unlink(path);
  ng_engine *e = row_engine(path);
  if (!e)
    return;
  int64_t src = 9, dst = 10;
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  u.n_add_edges = 1;
  u.add_src = &src;
  u.add_dst = &dst;
  EXPECT_OK(ng_engine_update(e, &u, NULL));
  const int64_t one = file_size(path);
  src = 11;
  EXPECT_OK(ng_engine_update(e, &u, NULL));
  const int64_t two = file_size(path);
  ng_engine_destroy(e);
  EXPECT_EQ_I(truncate(path, two - 1), 0);
  e = row_engine(path);
  if (!e)
    return;
  ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
  EXPECT_OK(ng_engine_log_info_get(&li, e));
  EXPECT_EQ_I(li.replayed, 1);
  EXPECT_EQ_I(li.records, 1);
  EXPECT_EQ_I(li.cut_offset, one);
  EXPECT_EQ_I(li.cut_bytes, two - 1 - one);
  EXPECT_TRUE(li.cut_what[0] != '\0');
  ng_engine_destroy(e);
  e = row_engine(path);
  if (!e)
    return;
  li = (ng_engine_log_info)NG_ENGINE_LOG_INFO_INIT;
  EXPECT_OK(ng_engine_log_info_get(&li, e));
  EXPECT_EQ_I(li.cut_offset, -1);
  ng_engine_destroy(e);
}

/* ---- group commit (docs/serving-engine.md "Online updates and snapshots") ---- */

/* Copies the log at `src` to `dst`, so that a second engine replays it while the first runs. */
static void copy_file(const char *dst, const char *src) {
  size_t len = 0;
  void *data = ng_test_read_file(src, &len);
  EXPECT_TRUE(data != NULL);
  if (data)
    EXPECT_TRUE(ng_test_write_file(dst, data, len));
  free(data);
}

/* Logits of `ids` (full neighbourhood) from `e` into a malloc'ed array of n x classes. */
static float *logits_of(ng_engine *e, const int64_t *ids, int64_t n) {
  ng_infer_request rq;
  memset(&rq, 0, sizeof rq);
  rq.node_ids = ids;
  rq.n = n;
  rq.outputs = NG_OUT_LOGITS;
  ng_infer_result r;
  memset(&r, 0, sizeof r);
  EXPECT_OK(ng_engine_infer(e, &rq, &r));
  float *out = r.logits;
  r.logits = NULL;
  ng_infer_result_free(&r);
  return out;
}

/* Whether engines a and b answer `ids` with the same bits. */
static void expect_same_answers(ng_engine *a, ng_engine *b, const int64_t *ids, int64_t n) {
  float *la = logits_of(a, ids, n), *lb = logits_of(b, ids, n);
  EXPECT_TRUE(la && lb);
  if (la && lb)
    EXPECT_TRUE(memcmp(la, lb, (size_t)(n * cora->info.classes) * sizeof(float)) == 0);
  free(la);
  free(lb);
}

/* Polls (no timing: the ctest TIMEOUT bounds it) until `k` updates wait in `e`'s queue. */
static void wait_queued(ng_engine *e, int k) {
  while (ng__engine_test_updates_queued(e) < k)
    sched_yield();
}

enum { GC_THREADS = 8, GC_EACH = 12, GC_TOTAL = GC_THREADS * GC_EACH };

typedef struct {
  ng_engine *e;
  int t;
  int64_t first_new[GC_EACH];
  int failed;
} gc_thread;

/* Update k of thread t (index i = t * GC_EACH + k): a node with cora's row i, an edge
 * 1000 + i -> 10 + t, and node 1500 + i's features replaced by cora's row 300 + i. */
static void gc_update(ng_graph_update *u, int64_t *src, int64_t *dst, int64_t *fid, int i, int t) {
  const int64_t dim = cora->info.feature_dim;
  memset(u, 0, sizeof *u);
  *src = 1000 + i;
  *dst = 10 + t;
  *fid = 1500 + i;
  u->add_nodes = 1;
  u->add_features = cora->features + (size_t)i * (size_t)dim;
  u->n_add_edges = 1;
  u->add_src = src;
  u->add_dst = dst;
  u->n_feature_rows = 1;
  u->feature_ids = fid;
  u->feature_values = cora->features + (size_t)(300 + i) * (size_t)dim;
}

static void *gc_main(void *arg) {
  gc_thread *g = arg;
  for (int k = 0; k < GC_EACH; k++) {
    ng_graph_update u;
    int64_t src, dst, fid;
    gc_update(&u, &src, &dst, &fid, g->t * GC_EACH + k, g->t);
    ng_update_result r = NG_UPDATE_RESULT_INIT;
    if (ng_engine_apply(g->e, &u, &r) != NG_OK || r.added_nodes != 1 || r.added_edges != 1 ||
        r.updated_features != 1 || r.logged != 1)
      g->failed++;
    g->first_new[k] = r.first_new_id;
  }
  return NULL;
}

/* Many threads updating at once: every update is acknowledged, logged with consecutive sequence
 * numbers and replays to the same graph (the same bits for every node it touched); the first
 * GC_THREADS updates form one group (held open until all are queued), so the updates took fewer
 * fsyncs than there were updates. */
static void test_group_commit_concurrent(void) {
  const char *path = tpath("group.log"), *copy = tpath("group-copy.log");
  unlink(path);
  unlink(copy);
  ng_engine *e = row_engine(path);
  if (!e)
    return;
  ng__engine_test_group_hold(e, GC_THREADS);
  gc_thread g[GC_THREADS];
  pthread_t th[GC_THREADS];
  for (int t = 0; t < GC_THREADS; t++) {
    g[t] = (gc_thread){.e = e, .t = t};
    EXPECT_TRUE(pthread_create(&th[t], NULL, gc_main, &g[t]) == 0);
  }
  for (int t = 0; t < GC_THREADS; t++)
    pthread_join(th[t], NULL);
  /* Each added node got its own id, all of them in [2708, 2708 + GC_TOTAL). */
  const int64_t n0 = cora->info.nodes;
  bool seen[GC_TOTAL] = {false};
  for (int t = 0; t < GC_THREADS; t++) {
    EXPECT_EQ_I(g[t].failed, 0);
    for (int k = 0; k < GC_EACH; k++) {
      const int64_t id = g[t].first_new[k];
      EXPECT_TRUE(id >= n0 && id < n0 + GC_TOTAL);
      if (id >= n0 && id < n0 + GC_TOTAL) {
        EXPECT_TRUE(!seen[id - n0]);
        seen[id - n0] = true;
      }
    }
  }
  ng_engine_stats st;
  ng_engine_stats_get(&st, e);
  EXPECT_EQ_I(st.updates, GC_TOTAL);
  EXPECT_TRUE(st.update_syncs >= 1);
  EXPECT_TRUE(st.update_syncs <= GC_TOTAL - GC_THREADS + 1); /* the first group shared one */
  ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
  EXPECT_OK(ng_engine_log_info_get(&li, e));
  EXPECT_EQ_I(li.records, GC_TOTAL);
  ng_engine_info info;
  ng_engine_info_get(&info, e);
  EXPECT_EQ_I(info.nodes, n0 + GC_TOTAL);

  /* A fresh engine replays a copy (a sequence gap would be refused) to the same answers. */
  copy_file(copy, path);
  ng_engine *r = row_engine(copy);
  if (r) {
    li = (ng_engine_log_info)NG_ENGINE_LOG_INFO_INIT;
    EXPECT_OK(ng_engine_log_info_get(&li, r));
    EXPECT_EQ_I(li.replayed, GC_TOTAL);
    EXPECT_EQ_I(li.cut_offset, -1);
    int64_t ids[3 * GC_TOTAL + GC_THREADS];
    int64_t n = 0;
    for (int i = 0; i < GC_TOTAL; i++) {
      ids[n++] = n0 + i;   /* added nodes */
      ids[n++] = 1500 + i; /* replaced rows */
      ids[n++] = 1000 + i; /* sources of added edges */
    }
    for (int t = 0; t < GC_THREADS; t++)
      ids[n++] = 10 + t; /* their destinations */
    expect_same_answers(e, r, ids, n);
    ng_engine_destroy(r);
  }
  ng_engine_destroy(e);
}

typedef struct {
  ng_engine *e;
  ng_graph_update u;
  ng_update_result r;
  ng_status st;
  char err[512];
} one_update;

static void *one_main(void *arg) {
  one_update *o = arg;
  o->r = (ng_update_result)NG_UPDATE_RESULT_INIT;
  o->st = ng_engine_apply(o->e, &o->u, &o->r);
  ng__strlcpy(o->err, o->st == NG_OK ? "" : ng_last_error(), sizeof o->err);
  return NULL;
}

/* Starts one thread per update of `o`, in order: each only once the ones before it are queued,
 * so that the group holds them in this order (the first leads it, held until all n are queued). */
static void run_group(ng_engine *e, one_update *o, int n) {
  pthread_t th[8];
  ng__engine_test_group_hold(e, n);
  for (int i = 0; i < n; i++) {
    o[i].e = e;
    EXPECT_TRUE(pthread_create(&th[i], NULL, one_main, &o[i]) == 0);
    if (i + 1 < n)
      wait_queued(e, i + 1);
  }
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
}

/* One group of four: A adds edge 1200 -> 30, B removes it (valid only on A's result: each
 * update applies onto the ones before it), C removes an edge that does not exist (answered
 * NG_ERR_INVALID_ARG and skipped), D replaces a feature row. One fsync; A, B, D logged. */
static void test_group_invalid_member(void) {
  const char *path = tpath("group-invalid.log"), *copy = tpath("group-invalid-copy.log");
  unlink(path);
  unlink(copy);
  ng_engine *e = row_engine(path);
  if (!e)
    return;
  const int64_t dim = cora->info.feature_dim;
  int64_t a_src = 1200, a_dst = 30, c_src = 1201, c_dst = 31, d_id = 40;
  one_update o[4];
  memset(o, 0, sizeof o);
  o[0].u.n_add_edges = 1;
  o[0].u.add_src = &a_src;
  o[0].u.add_dst = &a_dst;
  o[1].u.n_remove_edges = 1;
  o[1].u.remove_src = &a_src;
  o[1].u.remove_dst = &a_dst;
  o[2].u.n_remove_edges = 1;
  o[2].u.remove_src = &c_src;
  o[2].u.remove_dst = &c_dst;
  o[3].u.n_feature_rows = 1;
  o[3].u.feature_ids = &d_id;
  o[3].u.feature_values = cora->features + 77 * (size_t)dim;
  run_group(e, o, 4);
  EXPECT_STATUS(o[0].st, NG_OK);
  EXPECT_EQ_I(o[0].r.added_edges, 1);
  EXPECT_STATUS(o[1].st, NG_OK);
  EXPECT_EQ_I(o[1].r.removed_edges, 1);
  EXPECT_STATUS(o[2].st, NG_ERR_INVALID_ARG);
  EXPECT_TRUE(strstr(o[2].err, "node 31 has no neighbour 1201") != NULL);
  EXPECT_STATUS(o[3].st, NG_OK);
  EXPECT_EQ_I(o[3].r.updated_features, 1);
  ng_engine_stats st;
  ng_engine_stats_get(&st, e);
  EXPECT_EQ_I(st.updates, 3);
  EXPECT_EQ_I(st.update_syncs, 1);
  copy_file(copy, path);
  ng_engine *r = row_engine(copy);
  if (r) {
    ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
    EXPECT_OK(ng_engine_log_info_get(&li, r));
    EXPECT_EQ_I(li.replayed, 3);
    const int64_t ids[] = {30, 31, 40, 1200, 1201};
    expect_same_answers(e, r, ids, 5);
    ng_engine_destroy(r);
  }
  ng_engine_destroy(e);
}

/* A group whose append fails fails as a whole: every member that would have been logged gets
 * the write's error, the log is cut back, nothing is published; the next update goes on with
 * the next sequence number. */
static void test_group_failed_append(void) {
  const char *path = tpath("group-fail.log"), *copy = tpath("group-fail-copy.log");
  unlink(path);
  unlink(copy);
  ng_engine *e = row_engine(path);
  if (!e)
    return;
  const int64_t size0 = file_size(path);
  int64_t src[3] = {1300, 1301, 1302}, dst[3] = {50, 51, 52};
  one_update o[3];
  memset(o, 0, sizeof o);
  for (int i = 0; i < 3; i++) {
    o[i].u.n_add_edges = 1;
    o[i].u.add_src = &src[i];
    o[i].u.add_dst = &dst[i];
  }
  ng__engine_test_fail_append(e);
  run_group(e, o, 3);
  for (int i = 0; i < 3; i++) {
    EXPECT_STATUS(o[i].st, NG_ERR_IO);
    EXPECT_TRUE(strstr(o[i].err, "injected") != NULL);
  }
  EXPECT_EQ_I(file_size(path), size0);
  ng_engine_stats st;
  ng_engine_stats_get(&st, e);
  EXPECT_EQ_I(st.updates, 0);
  EXPECT_EQ_I(st.update_syncs, 0);
  /* Nothing was published: removing one of the edges is refused. */
  ng_graph_update u;
  memset(&u, 0, sizeof u);
  u.n_remove_edges = 1;
  u.remove_src = &src[0];
  u.remove_dst = &dst[0];
  EXPECT_STATUS(ng_engine_apply(e, &u, NULL), NG_ERR_INVALID_ARG);
  EXPECT_OK(ng_engine_apply(e, &o[1].u, NULL));
  ng_engine_log_info li = NG_ENGINE_LOG_INFO_INIT;
  EXPECT_OK(ng_engine_log_info_get(&li, e));
  EXPECT_EQ_I(li.records, 1);
  copy_file(copy, path);
  ng_engine *r = row_engine(copy);
  if (r) {
    li = (ng_engine_log_info)NG_ENGINE_LOG_INFO_INIT;
    EXPECT_OK(ng_engine_log_info_get(&li, r));
    EXPECT_EQ_I(li.replayed, 1);
    ng_engine_destroy(r);
  }
  ng_engine_destroy(e);
}

/* Whether snapshots a and b hold the same graph: node count, every neighbour row and every
 * feature row of nodes [0, n). */
static bool same_graph(const ng_srv_snap *a, const ng_srv_snap *b, int64_t n) {
  if (a->nodes != b->nodes)
    return false;
  for (int64_t v = 0; v < n && v < a->nodes; v++) {
    ng_srv_rowview x, y;
    ng__srv_row(&x, a, v);
    ng__srv_row(&y, b, v);
    if (x.n != y.n)
      return false;
    for (int64_t i = 0; i < x.n; i++)
      if (ng__srv_rowview_at(&x, i) != ng__srv_rowview_at(&y, i))
        return false;
    if (memcmp(ng__srv_feature(a, v, NULL), ng__srv_feature(b, v, NULL),
               (size_t)a->dim * sizeof(float)) != 0)
      return false;
  }
  return true;
}

/* Updates applied in place into one fork (what a group commit and a replay do) give the graph
 * that applying them one snapshot after another gives; one that fails part-way (its feature row
 * and first edge fine, a later removal not) leaves the fork as it was; *resized names exactly the
 * existing nodes whose row length changed. */
static void test_apply_into(void) {
  const int64_t dim = cora->info.feature_dim, n0 = cora->info.nodes;
  const ng_csr *g = &cora->csr;
  const int64_t have = ng__csr_index(g, g->indptr[5]); /* an edge have -> 5 exists */
  int64_t add_src[3] = {1000, have, n0}, add_dst[3] = {5, 5, 7};
  int64_t rm_src[2] = {1000, 1999}, rm_dst[2] = {5, 9};
  int64_t fid[2] = {3, n0};
  ng_graph_update u[3];
  memset(u, 0, sizeof u);
  u[0].add_nodes = 1; /* node n0, with an edge n0 -> 7; 1000 -> 5 added, have -> 5 already there */
  u[0].add_features = cora->features + 11 * (size_t)dim;
  u[0].n_add_edges = 3;
  u[0].add_src = add_src;
  u[0].add_dst = add_dst;
  u[1].n_feature_rows = 2; /* rows of 3 and n0 replaced; 1000 -> 5 removed again */
  u[1].feature_ids = fid;
  u[1].feature_values = cora->features + 20 * (size_t)dim;
  u[1].n_remove_edges = 1;
  u[1].remove_src = rm_src;
  u[1].remove_dst = rm_dst;
  ng_graph_update bad = u[1]; /* the same, and a removal of an edge 1999 -> 9 that is not there */
  bad.n_remove_edges = 2;
  ng_srv_snap *chain = base_snap(cora), *fork = NULL;
  EXPECT_OK(ng__srv_snap_fork(&fork, chain));
  ng_srv_resized rs = {0};
  for (int i = 0; i < 2; i++) {
    ng_srv_snap *next = NULL;
    EXPECT_OK(ng__srv_snap_apply(&next, chain, &u[i], NULL));
    ng__srv_snap_unref(chain);
    chain = next;
    ng_srv_changes chg = {0};
    EXPECT_OK(ng__srv_snap_apply_into(fork, &u[i], &chg, &rs));
    /* u[0]: 5 (one longer) and 7 (n0 -> 7); u[1]: 5 (one shorter) */
    EXPECT_EQ_I(rs.n, i == 0 ? 2 : 1);
    EXPECT_EQ_I(rs.n > 0 ? rs.ids[0] : -1, 5);
    if (i == 0)
      EXPECT_EQ_I(rs.n > 1 ? rs.ids[1] : -1, 7);
    if (i == 0) {
      EXPECT_EQ_I(chg.added_edges, 2);
      EXPECT_EQ_I(chg.added_nodes, 1);
    }
    if (i == 1) {
      /* the bad update changes nothing, reports no row */
      ng_srv_changes none = {0};
      EXPECT_STATUS(ng__srv_snap_apply_into(fork, &bad, &none, &rs), NG_ERR_INVALID_ARG);
      EXPECT_EQ_I(rs.n, 0);
    }
    EXPECT_TRUE(same_graph(chain, fork, n0 + 1));
    EXPECT_EQ_I((int64_t)fork->version, i + 1);
  }
  ng_srv_rowview r7;
  ng__srv_row(&r7, fork, 7);
  EXPECT_EQ_I(r7.n, g->indptr[8] - g->indptr[7] + 1);
  bool overlay = false;
  ng__srv_feature(fork, 3, &overlay);
  EXPECT_TRUE(overlay);
  free(rs.ids);
  ng__srv_snap_unref(fork);
  ng__srv_snap_unref(chain);
}

int main(void) {
  cora = ng_test_fetch_cora();
  if (!cora)
    return ng_test_summary();
  ng__srv_fingerprint(&cora_fp, cora);
  EXPECT_OK(ng_model_create(&model, NG_MODEL_GCN, cora->info.feature_dim));
  ng_layer_opts l0 = NG_LAYER_OPTS_INIT;
  l0.aggregator = NG_AGGREGATOR_GCN;
  l0.out_dim = cora->info.classes;
  l0.activation = NG_ACT_NONE;
  EXPECT_OK(ng_model_add_layer(model, &l0));
  ng_train_opts o = NG_TRAIN_OPTS_INIT;
  o.workers = -1;
  o.normalize = NG_NORMALIZE_ROW;
  ng_trainer_t tr = NULL;
  EXPECT_OK(ng_trainer_create(&tr, cora, model, &o));
  snprintf(ckpt, sizeof ckpt, "%s", tpath("gcn.safetensors"));
  EXPECT_OK(ng_trainer_save(tr, ckpt));
  ng_trainer_destroy(tr);
  RUN_TEST(test_flipped_length_refused);
  RUN_TEST(test_torn_tail_cut_and_reported);
  RUN_TEST(test_v1_log);
  RUN_TEST(test_fingerprint);
  RUN_TEST(test_nonfinite_after_normalisation);
  RUN_TEST(test_counts_and_empty);
  RUN_TEST(test_engine_reports_cut);
  RUN_TEST(test_group_commit_concurrent);
  RUN_TEST(test_group_invalid_member);
  RUN_TEST(test_group_failed_append);
  RUN_TEST(test_apply_into);
  ng_model_destroy(model);
  ng_dataset_close(cora);
  return ng_test_summary();
}
