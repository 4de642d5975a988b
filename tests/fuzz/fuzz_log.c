/* libFuzzer target: the serving engine's update log at start-up (ng__srv_log_open,
 * serve/delta.c). The harness writes a valid log of K records for a small graph once, then
 * applies each input to a copy of it as a mutation and opens the copy:
 *   byte 0     flags: bit 0 truncates the log to (bytes 1-2, little-endian) modulo its length,
 *              bit 1 appends the rest of the input to the end as well;
 *   bytes 3..  triples (u16 offset modulo the length, u8 mask): the byte at offset ^= mask.
 * It checks one property: the open either accepts and replays, refuses and leaves the file as it
 * was, or cuts a torn tail and reports the cut; it never cuts a record that has a valid successor.
 * An original record whose bytes the mutation left alone is valid, so every such record must lie
 * before the point where the log was cut. A violation traps. */
#include "fuzz_files.h"

#include "engine_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { NODES = 8, DIM = 2, K = 6 };

static int64_t indptr[NODES + 1] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
static int32_t indices[NODES] = {1, 2, 3, 4, 5, 6, 7, 0};
static float features[NODES * DIM] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const ng_csr graph = {NODES, NODES, indptr, indices, NULL};
static const ng_srv_fingerprint fp = {
    NODES, NODES, DIM, 0x12345678u, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

static uint8_t *valid_log;     /* the log as written */
static size_t valid_len;       /* its bytes */
static int64_t rec_off[K + 1]; /* where each record starts; rec_off[K]: the end */
static char path[512], tmp[512];

static ng_srv_snap *base(void) {
  ng_srv_snap *s = NULL;
  if (ng__srv_snap_base(&s, &graph, features, DIM, NG_NORMALIZE_NONE) != NG_OK)
    __builtin_trap();
  return s;
}

static uint8_t *read_all(const char *p, size_t *len) {
  FILE *f = fopen(p, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* The K records: one of each kind of change, so that every part of a payload is present. */
static void write_valid_log(void) {
  snprintf(path, sizeof path, "%s/valid.log", fuzz_scratch());
  snprintf(tmp, sizeof tmp, "%s/input.log", fuzz_scratch());
  ng_srv_snap *s = base();
  ng_srv_log log;
  ng_srv_log_report rep;
  if (ng__srv_log_open(&log, path, &s, &fp, &rep) != NG_OK)
    __builtin_trap();
  const float row[2 * DIM] = {0.5f, 0.25f, 2.0f, -1.0f};
  const int64_t src[2] = {3, 8}, dst[2] = {0, 1}, ids[2] = {2, 5};
  ng_graph_update u[K];
  memset(u, 0, sizeof u);
  u[0].n_add_edges = 1, u[0].add_src = src, u[0].add_dst = dst; /* 3 -> 0 */
  u[1].add_nodes = 1, u[1].add_features = row;                  /* node 8 */
  u[2].n_add_edges = 2, u[2].add_src = src, u[2].add_dst = dst; /* 3 -> 0 again, 8 -> 1 */
  u[3].n_feature_rows = 2, u[3].feature_ids = ids, u[3].feature_values = row;
  u[4].n_remove_edges = 1, u[4].remove_src = src, u[4].remove_dst = dst;
  u[5].add_nodes = 2, u[5].add_features = row, u[5].n_add_edges = 1;
  u[5].add_src = src + 1, u[5].add_dst = dst + 1;
  rec_off[0] = log.length;
  for (int i = 0; i < K; i++) {
    ng_srv_snap *next = NULL;
    if (ng__srv_snap_apply(&next, s, &u[i], NULL) != NG_OK ||
        ng__srv_log_append(&log, &u[i], DIM) != NG_OK)
      __builtin_trap();
    ng__srv_snap_unref(s);
    s = next;
    rec_off[i + 1] = log.length;
  }
  ng__srv_log_close(&log);
  ng__srv_snap_unref(s);
  valid_log = read_all(path, &valid_len);
  if (!valid_log || (int64_t)valid_len != rec_off[K])
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fuzz_scratch())
    return 0;
  if (!valid_log)
    write_valid_log();
  if (size < 3)
    return 0;
  size_t len = valid_len;
  const size_t extra = (data[0] & 2) ? size - 3 : 0;
  uint8_t *buf = malloc(valid_len + extra + 1);
  if (!buf)
    return 0;
  memcpy(buf, valid_log, valid_len);
  for (size_t i = 3; i + 3 <= size; i += 3) {
    const size_t at = ((size_t)data[i] | (size_t)data[i + 1] << 8) % valid_len;
    buf[at] ^= data[i + 2];
  }
  if (data[0] & 1)
    len = ((size_t)data[1] | (size_t)data[2] << 8) % (valid_len + 1);
  if (extra) {
    memmove(buf + len, data + 3, extra);
    len += extra;
  }
  if (!fuzz_write(tmp, buf, len))
    __builtin_trap();

  ng_srv_snap *s = base();
  ng_srv_log log;
  ng_srv_log_report rep;
  const ng_status st = ng__srv_log_open(&log, tmp, &s, &fp, &rep);
  size_t now_len = 0;
  uint8_t *now = read_all(tmp, &now_len);
  if (!now)
    __builtin_trap();
  if (st != NG_OK) {
    /* (b) refused: said why, and left the file as it was. */
    if (st != NG_ERR_FORMAT || !ng_last_error()[0] || now_len != len || memcmp(now, buf, len) != 0)
      __builtin_trap();
  } else {
    ng__srv_log_close(&log);
    /* (a) or (c): the log kept [0, end) of the input (a version-1 reading rewrites the file, a
     * log shorter than its header starts afresh: neither keeps the bytes). */
    int64_t end = (int64_t)len;
    if (rep.migrated) {
      end = rep.cut_offset >= 0 ? rep.cut_offset : (int64_t)len;
    } else if (now_len < len) {
      end = (int64_t)now_len;
      if (rep.cut_offset != end || rep.cut_bytes != (int64_t)len - end || !rep.cut_why)
        __builtin_trap(); /* a cut that is not reported */
    }
    /* Never a record with a valid successor: every record the mutation did not touch and that
     * is still whole lies before the end. */
    for (int i = 0; i < K; i++) {
      const bool whole = rec_off[i + 1] <= (int64_t)len;
      if (whole &&
          memcmp(buf + rec_off[i], valid_log + rec_off[i], (size_t)(rec_off[i + 1] - rec_off[i])) ==
              0 &&
          rec_off[i + 1] > end && len >= (size_t)rec_off[0])
        __builtin_trap();
    }
  }
  free(now);
  free(buf);
  ng__srv_snap_unref(s);
  return 0;
}
