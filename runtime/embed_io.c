/* The public helpers of `neargnn embed`: node lists, user ids, and inference into a .npy
 * (include/neargnn.h). */
#include "dataset_impl.h"
#include "npy_impl.h"
#include "trainer_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ng_status ng_node_list_load(int64_t **out, int64_t *n, const char *path) {
  if (!out || !n || !path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_node_list_load: out, n and path must not be NULL");
  *out = NULL;
  *n = 0;
  const size_t len = strlen(path);
  if (len > 4 && strcmp(path + len - 4, ".npy") == 0) {
    ng_npy a;
    NG_CHECK(ng__npy_map(&a, path, false));
    ng_status st = NG_OK;
    const int64_t count = ng__npy_count(&a.hdr);
    if (a.hdr.dtype != NG_DTYPE_I64 || a.hdr.ndim < 1 || a.hdr.ndim > 2 ||
        (a.hdr.ndim == 2 && a.hdr.shape[1] != 1)) {
      st = ng__err(NG_ERR_FORMAT, "%s: node ids must be int64 of shape [n] or [n, 1]", path);
    } else if (!(*out = malloc((size_t)NG_MAX(count, 1) * sizeof **out))) {
      st = ng__err(NG_ERR_NOMEM, "%s: out of memory for %" PRId64 " ids", path, count);
    } else {
      memcpy(*out, a.data, (size_t)count * sizeof **out);
      *n = count;
    }
    ng__npy_close(&a);
    return st;
  }
  FILE *f = fopen(path, "r");
  if (!f)
    return ng__err(NG_ERR_IO, "%s: cannot open the node list: %s", path, strerror(errno));
  int64_t cap = 1024, line_no = 0;
  int64_t *ids = malloc((size_t)cap * sizeof *ids);
  char line[256];
  ng_status st = ids ? NG_OK : NG_ERR_NOMEM;
  while (st == NG_OK && fgets(line, sizeof line, f)) {
    line_no++;
    char *p = line;
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == '\n' || *p == '\0' || *p == '#' || *p == '\r')
      continue;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    while (end && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
      end++;
    if (end == p || errno || !end || *end != '\0' || v < 0) {
      /* The file's text is not echoed: the path may name anything (a link to a secret). */
      st = ng__err(NG_ERR_FORMAT,
                   "%s:%" PRId64 ": not a node id (one non-negative integer per line); the line "
                   "stops parsing at column %zu",
                   path, line_no, (size_t)((end && end != p ? end : p) - line) + 1);
      break;
    }
    if (*n == cap) {
      int64_t *grown = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
      if (!grown) {
        st = ng__err(NG_ERR_NOMEM, "%s: out of memory for the node ids", path);
        break;
      }
      ids = grown;
    }
    ids[(*n)++] = v;
  }
  fclose(f);
  if (st != NG_OK) {
    free(ids);
    *n = 0;
    return st;
  }
  *out = ids;
  return NG_OK;
}

ng_status ng_dataset_ids_of(int64_t *out, const int64_t *ids, int64_t n, ng_dataset_t ds) {
  NG_CHECK(ng__dataset_check(ds));
  if (n < 0 || (n > 0 && (!out || !ids)))
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_ids_of: %" PRId64 " ids, out or ids NULL", n);
  const int64_t nodes = ds->info.nodes;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "node id %" PRId64 " (entry %" PRId64 ") is not in [0, %" PRId64 ")", ids[i],
                     i, nodes);
  const int64_t *orig = NULL;
  NG_CHECK(ng_dataset_orig_ids(&orig, ds));
  if (!orig) {
    if (out != ids)
      memcpy(out, ids, (size_t)n * sizeof *out);
    return NG_OK;
  }
  /* orig is a permutation of [0, nodes) (checked on open): its inverse maps back. */
  int64_t *inv = malloc((size_t)NG_MAX(nodes, 1) * sizeof *inv);
  if (!inv)
    return ng__err(NG_ERR_NOMEM, "out of memory mapping %" PRId64 " node ids", nodes);
  for (int64_t v = 0; v < nodes; v++)
    inv[orig[v]] = v;
  for (int64_t i = 0; i < n; i++)
    out[i] = inv[ids[i]];
  free(inv);
  return NG_OK;
}

/* The output file goes to disk while the last layer writes it: every WRITEBACK_BYTES of rows
 * written, their pages are handed to the disk (sync_file_range, which does not wait for the
 * write) and dropped from the process's mapping (the page cache keeps and writes them, as for
 * inference's temporary files), so that the msync after the last layer waits for the tail only
 * and the output does not add to the peak RSS. */
#define WRITEBACK_BYTES ((size_t)64 << 20)

typedef struct {
  int fd;        /* the output file, -1: none (nothing is handed early) */
  char *data;    /* the mapped array, at byte `offset` of the file */
  size_t offset; /* of the array in the file */
  size_t row;    /* bytes of a row */
  size_t from;   /* bytes of the array handed to the disk so far */
} writeback;

static void rows_written(void *ctx, int64_t first, int64_t n) {
  writeback *w = ctx;
  const size_t upto = (size_t)(first + n) * w->row;
  if (w->fd < 0 || upto < w->from + WRITEBACK_BYTES)
    return;
#ifdef SYNC_FILE_RANGE_WRITE
  (void)sync_file_range(w->fd, (off_t)(w->offset + w->from), (off_t)(upto - w->from),
                        SYNC_FILE_RANGE_WRITE);
#endif
  ng__drop_pages(w->data + w->from, upto - w->from);
  w->from = upto;
}

ng_status ng_trainer_embed_npy(const char *path, ng_trainer_t trainer, const int64_t *nodes,
                               int64_t n, const ng_infer_opts *opts) {
  if (!path)
    return ng__err(NG_ERR_INVALID_ARG, "ng_trainer_embed_npy: path is NULL");
  int64_t dim = 0;
  NG_CHECK(ng_trainer_embed_dim(&dim, trainer, opts ? opts->layer : -1));
  char *tmp;
  NG_CHECK(ng__atomic_begin(&tmp, path));
  const int64_t shape[2] = {n, dim};
  ng_npy a;
  ng_status st = ng__npy_create(&a, tmp, NG_DTYPE_F32, 2, shape);
  if (st != NG_OK)
    return ng__atomic_end(tmp, path, st);
  writeback w = {.fd = nodes ? -1 : open(tmp, O_RDWR | O_CLOEXEC),
                 .data = a.data,
                 .offset = (size_t)((char *)a.data - (char *)a.map),
                 .row = (size_t)dim * sizeof(float)};
  st = ng__trainer_embed(a.data, trainer, nodes, n, opts, rows_written, &w);
  const double t0 = ng__now();
  if (st == NG_OK)
    st = ng__npy_sync(&a, tmp);
  if (st == NG_OK && opts && opts->report && opts->report->size >= sizeof *opts->report)
    opts->report->write_seconds = ng__now() - t0;
  if (w.fd >= 0)
    close(w.fd);
  ng__npy_close(&a);
  return ng__atomic_end(tmp, path, st);
}
