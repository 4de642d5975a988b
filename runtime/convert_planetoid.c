/* Planetoid folders (as ../shared/data/cora): edges.txt (undirected "src dst" lines, '#'
 * comments), features.npy float32/float64 [N, D], labels.npy int32/int64 [N], and the split
 * files train.txt, val.txt, test.txt (one node id per line; a missing file is an empty split). */
#include "convert_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Features are copied in blocks of rows, with a progress report between blocks. */
enum { FEATURE_BLOCK_ROWS = 1 << 14 };

static ng_status copy_features(ng_conv *c, const ng_npy *src, const char *path) {
  int64_t rows = src->hdr.shape[0], dim = src->hdr.shape[1];
  int64_t shape[2] = {rows, dim};
  ng_npy *dst;
  NG_CHECK(ng__writer_array(&dst, &c->w, NG_ARR_FEATURES, NG_DTYPE_F32, 2, shape));
  float *out = dst->data;
  bool f32 = src->hdr.dtype == NG_DTYPE_F32;
  const float *in32 = src->data;
  const double *in64 = src->data;
  for (int64_t lo = 0; lo < rows; lo += FEATURE_BLOCK_ROWS) {
    int64_t hi = NG_MIN(lo + FEATURE_BLOCK_ROWS, rows), bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad)
    for (int64_t i = lo * dim; i < hi * dim; i++) {
      float x = f32 ? in32[i] : (float)in64[i];
      bad += !isfinite(x);
      out[i] = x;
    }
    if (bad) {
      int64_t i = lo * dim;
      while (isfinite(out[i]))
        i++;
      double x = f32 ? (double)in32[i] : in64[i];
      return ng__err(NG_ERR_FORMAT,
                     "%s: row %lld, column %lld is %g%s; neargnn needs finite features", path,
                     (long long)(i / dim), (long long)(i % dim), x,
                     isfinite(x) ? " (too large for float32)" : "");
    }
    NG_CHECK(ng__progress(&c->progress, "features", (double)hi, (double)rows, hi == rows));
  }
  c->meta.info.feature_dim = dim;
  return NG_OK;
}

static ng_status copy_labels(ng_conv *c, const ng_npy *src, const char *path, int32_t **labels) {
  int64_t n = src->hdr.shape[0];
  ng_npy *dst;
  NG_CHECK(ng__writer_array(&dst, &c->w, NG_ARR_LABELS, NG_DTYPE_I32, 1, &n));
  int32_t *out = dst->data;
  bool i32 = src->hdr.dtype == NG_DTYPE_I32;
  const int32_t *in32 = src->data;
  const int64_t *in64 = src->data;
  for (int64_t v = 0; v < n; v++) {
    int64_t y = i32 ? in32[v] : in64[v];
    if (y < -1)
      return ng__err(NG_ERR_FORMAT,
                     "%s: node %lld has label %lld; labels are class ids from 0 (or -1 for "
                     "unlabelled nodes)",
                     path, (long long)v, (long long)y);
    if (y >= NG_MAX_CLASSES)
      return ng__err(NG_ERR_FORMAT,
                     "%s: node %lld has label %lld; at most %d classes are supported (labels 0 "
                     "to %d)",
                     path, (long long)v, (long long)y, NG_MAX_CLASSES, NG_MAX_CLASSES - 1);
    out[v] = (int32_t)y;
  }
  NG_CHECK(ng__conv_classes(c, out, n, path, false));
  *labels = out;
  return NG_OK;
}

ng_status ng__convert_planetoid(ng_conv *c) {
  static const char *const FILES[] = {"edges.txt", "features.npy", "labels.npy",
                                      "train.txt", "val.txt",      "test.txt"};
  char *path[NG_ARRAY_LEN(FILES)] = {0};
  ng_npy feat = {0}, lab = {0};
  uint8_t *member = NULL;
  ng_status st = NG_OK;
  for (size_t i = 0; i < NG_ARRAY_LEN(FILES); i++)
    if (!(path[i] = ng__path_join(c->src, FILES[i]))) {
      st = NG_ERR_NOMEM;
      goto done;
    }
  for (size_t i = 0; i < 3; i++)
    if (!ng__file_exists(path[i])) {
      st = ng__err(NG_ERR_NOT_FOUND,
                   "%s: not found; a planetoid folder has edges.txt, features.npy, labels.npy "
                   "and train.txt, val.txt, test.txt",
                   path[i]);
      goto done;
    }
  NG_CHECK_GOTO(st, ng__npy_map(&feat, path[1], false), done);
  if ((feat.hdr.dtype != NG_DTYPE_F32 && feat.hdr.dtype != NG_DTYPE_F64) || feat.hdr.ndim != 2 ||
      feat.hdr.shape[0] < 1) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: %s array of %d dimensions; expected float32 or float64 "
                 "[nodes, features] with at least one node",
                 path[1], ng__dtype_name(feat.hdr.dtype), feat.hdr.ndim);
    goto done;
  }
  int64_t nodes = feat.hdr.shape[0];
  NG_CHECK_GOTO(st, ng__npy_map(&lab, path[2], false), done);
  if ((lab.hdr.dtype != NG_DTYPE_I32 && lab.hdr.dtype != NG_DTYPE_I64) || lab.hdr.ndim != 1 ||
      lab.hdr.shape[0] != nodes) {
    st = ng__err(NG_ERR_FORMAT,
                 "%s: %s array of %d dimensions and %lld entries; expected int32 or int64 "
                 "[%lld], one label per row of features.npy",
                 path[2], ng__dtype_name(lab.hdr.dtype), lab.hdr.ndim,
                 (long long)(lab.hdr.ndim >= 1 ? lab.hdr.shape[0] : 0), (long long)nodes);
    goto done;
  }
  NG_CHECK_GOTO(st, ng__conv_edges(c, path[0], NG_SEP_BLANKS, nodes, "features.npy", true), done);
  if (feat.hdr.shape[1] > 0)
    NG_CHECK_GOTO(st, copy_features(c, &feat, path[1]), done);
  int32_t *labels = NULL;
  NG_CHECK_GOTO(st, copy_labels(c, &lab, path[2], &labels), done);
  member = ng__calloc((size_t)nodes, 1, "split membership");
  if (!member) {
    st = NG_ERR_NOMEM;
    goto done;
  }
  for (int s = 0; s < 3; s++)
    if (ng__file_exists(path[3 + s]))
      NG_CHECK_GOTO(st, ng__conv_split(c, NG_ARR_TRAIN + s, path[3 + s], nodes, member, labels),
                    done);
  c->meta.info.undirected = 1;
done:
  free(member);
  ng__npy_close(&lab);
  ng__npy_close(&feat);
  for (size_t i = 0; i < NG_ARRAY_LEN(FILES); i++)
    free(path[i]);
  return st;
}
