/* The bf16 feature table: a file written once beside the dataset and mapped like features.npy,
 * or anonymous memory for features that are not a dataset's file (see features_bf16_impl.h). */
#include "features_bf16_impl.h"

#include "bf16.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Rows converted per progress report while the file is written. */
#define CONVERT_CHUNK ((size_t)16 << 20)

void (*ng__bf16_before_rename)(const char *path);

void ng__bf16_convert(uint16_t *dst, const float *src, size_t n, int threads) {
  const int64_t m = (int64_t)n;
#pragma omp parallel for schedule(static) num_threads(threads) if (m > 65536)
  for (int64_t i = 0; i < m; i++)
    dst[i] = ng_f32_to_bf16(src[i]);
}

void ng__bf16_table_close(ng_bf16_table *t) {
  if (!t)
    return;
  ng__npy_close(&t->map);
  if (t->owned)
    ng__big_free(t->owned, t->bytes);
  memset(t, 0, sizeof *t);
}

static bool dataset_file(const struct ng_dataset *ds, const float *src) {
  return ds->dir && ds->arrays[NG_ARR_FEATURES].map && src == ds->features;
}

/* Whether the file at `path` is a bf16 table of `src_path`'s features: the shape and dtype, and
 * the modification time of features.npy, which write_file gives the table (a features.npy
 * rewritten or touched since gets a new table). */
static ng_status try_map(ng_bf16_table *out, const char *path, const char *src_path, int64_t nodes,
                         int64_t dim, bool *ok) {
  *ok = false;
  struct stat sb, ss;
  if (stat(path, &sb) != 0 || stat(src_path, &ss) != 0)
    return NG_OK;
  if (sb.st_mtim.tv_sec != ss.st_mtim.tv_sec || sb.st_mtim.tv_nsec != ss.st_mtim.tv_nsec)
    return NG_OK;
  ng_npy m;
  if (ng__npy_map(&m, path, false) != NG_OK)
    return NG_OK; /* unreadable or damaged: written again */
  if (m.hdr.dtype != NG_DTYPE_U16 || m.hdr.ndim != 2 || m.hdr.shape[0] != nodes ||
      m.hdr.shape[1] != dim) {
    ng__npy_close(&m);
    return NG_OK;
  }
  out->map = m;
  out->rows = m.data;
  out->bytes = m.hdr.nbytes;
  *ok = true;
  return NG_OK;
}

/* Writes `path` from `src` (the dataset's read-only mapping of features.npy) through a temporary
 * file renamed into place. */
static ng_status write_file(const char *path, const char *src_path, const float *src, int64_t nodes,
                            int64_t dim, int threads, ng_progress *progress) {
  char *tmp;
  NG_CHECK(ng__atomic_begin(&tmp, path));
  ng_npy w;
  const int64_t shape[2] = {nodes, dim};
  ng_status st = ng__npy_create(&w, tmp, NG_DTYPE_U16, 2, shape);
  if (st == NG_OK) {
    const size_t total = (size_t)nodes * (size_t)dim;
    for (size_t at = 0; at < total && st == NG_OK; at += CONVERT_CHUNK) {
      const size_t k = NG_MIN(CONVERT_CHUNK, total - at);
      ng__bf16_convert((uint16_t *)w.data + at, src + at, k, threads);
      /* Converted: the page cache keeps the fp32 pages, the RSS does not (memory.md). */
      ng__drop_pages(src + at, k * sizeof(float));
      if (progress)
        st = ng__progress(progress, "bf16 features", (double)(at + k), (double)total, false);
    }
    if (st == NG_OK)
      st = ng__npy_sync(&w, tmp);
    ng__npy_close(&w);
  }
  if (st == NG_OK && ng__bf16_before_rename)
    ng__bf16_before_rename(path);
  /* The table carries the time of the features it was converted from (try_map). */
  struct stat ss;
  if (st == NG_OK && stat(src_path, &ss) != 0)
    st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot read its modification time", src_path);
  if (st == NG_OK) {
    const struct timespec times[2] = {ss.st_atim, ss.st_mtim};
    if (utimensat(AT_FDCWD, tmp, times, 0) != 0)
      st = ng__err_errno(NG_ERR_IO, errno, "%s: cannot set its modification time", tmp);
  }
  return ng__atomic_end(tmp, path, st);
}

ng_status ng__bf16_table_open(ng_bf16_table *out, const struct ng_dataset *ds, const float *src,
                              bool in_memory, int threads, ng_progress *progress) {
  memset(out, 0, sizeof *out);
  const int64_t nodes = ds->info.nodes, dim = ds->info.feature_dim;
  const size_t count = (size_t)nodes * (size_t)dim;
  if (!in_memory && dataset_file(ds, src)) {
    char *path = ng__path_join(ds->dir, NG_BF16_FEATURES_FILE);
    char *src_path = ng__path_join(ds->dir, "features.npy");
    ng_status st = path && src_path ? NG_OK : NG_ERR_NOMEM;
    bool ok = false;
    if (st == NG_OK)
      st = try_map(out, path, src_path, nodes, dim, &ok);
    if (st == NG_OK && !ok && access(ds->dir, W_OK) == 0) {
      st = write_file(path, src_path, src, nodes, dim, threads, progress);
      /* Another process that missed the table too (a rank of the same run on this host) wrote
       * it first: each writes its own temporary file, and the rename that comes second finds
       * the first one's table in place and leaves it. That table is the same conversion of the
       * same features, so this process maps it instead. */
      const bool theirs = st == NG_ERR_EXISTS;
      if (theirs)
        st = NG_OK;
      if (st == NG_OK) {
        st = try_map(out, path, src_path, nodes, dim, &ok);
        if (st == NG_OK && !ok)
          st = ng__err(NG_ERR_IO, "%s: the bf16 table just written does not map back", path);
        out->created = ok && !theirs;
      }
    }
    free(path);
    free(src_path);
    if (st != NG_OK || ok)
      return st;
    /* A read-only folder: anonymous memory below. */
  }
  out->bytes = NG_MAX(count, (size_t)1) * sizeof(uint16_t);
  out->owned = ng__big_alloc(out->bytes, "the bf16 feature table");
  if (!out->owned)
    return NG_ERR_NOMEM;
  ng__bf16_convert(out->owned, src, count, threads);
  out->rows = out->owned;
  return NG_OK;
}
