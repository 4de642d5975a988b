/* Datasets made from caller-owned arrays (ng_dataset_from_arrays): the arrays are read in place
 * and validated by the same checks as a folder's (ng__dataset_validate). Only what has another
 * type than the library reads, and the CSR of an edge list, is built into memory the dataset
 * owns. */
#include "dataset_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAYS_NAME_DEFAULT "arrays"

static const char *const SPLIT_NAME[3] = {"train", "val", "test"};

/* Memory the dataset owns (freed by ng_dataset_close), zero-filled. */
static void *own(struct ng_dataset *ds, size_t bytes, const char *what) {
  size_t slot = 0;
  while (slot < NG_ARRAY_LEN(ds->owned) && ds->owned[slot].ptr)
    slot++;
  if (slot == NG_ARRAY_LEN(ds->owned)) {
    ng__err(NG_ERR_INTERNAL, "ng_dataset_from_arrays: more owned buffers than slots");
    return NULL;
  }
  void *p = ng__big_alloc(NG_MAX(bytes, 1), what);
  if (p) {
    ds->owned[slot].ptr = p;
    ds->owned[slot].bytes = NG_MAX(bytes, 1);
  }
  return p;
}

/* An int32 or int64 array as int64: the caller's when it is int64, else a converted copy. */
static ng_status as_i64(const int64_t **out, struct ng_dataset *ds, const void *src,
                        ng_int_type type, int64_t n, const char *what) {
  if (type == NG_INT64) {
    *out = src;
    return NG_OK;
  }
  int64_t *dst = own(ds, (size_t)n * sizeof *dst, what);
  if (!dst)
    return NG_ERR_NOMEM;
  const int32_t *s = src;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; i++)
    dst[i] = s[i];
  *out = dst;
  return NG_OK;
}

static int64_t id_at(const void *a, ng_int_type type, int64_t i) {
  return type == NG_INT64 ? ((const int64_t *)a)[i] : (int64_t)((const int32_t *)a)[i];
}

/* The CSR of an edge list: row dst lists the sources of its edges in the order of the list
 * (a stable counting sort); with `undirected` every edge also goes the other way. */
static ng_status build_csr(struct ng_dataset *ds, const ng_dataset_arrays *a) {
  const int64_t nodes = a->nodes, m = a->edges;
  const int64_t nnz = a->undirected ? 2 * m : m;
  for (int64_t e = 0; e < m; e++) {
    int64_t s = id_at(a->edge_src, a->index_type, e), d = id_at(a->edge_dst, a->index_type, e);
    if (s < 0 || s >= nodes || d < 0 || d >= nodes)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_dataset_from_arrays: edge %lld (%lld -> %lld) has a node id outside "
                     "[0, %lld); fix the edge list or `nodes`",
                     (long long)e, (long long)s, (long long)d, (long long)nodes);
  }
  int64_t *indptr = own(ds, ((size_t)nodes + 1) * sizeof *indptr, "the CSR's row offsets");
  if (!indptr)
    return NG_ERR_NOMEM;
  const bool wide = a->index_type == NG_INT64 || nodes >= NG_INDEX32_MAX_NODES;
  void *idx = own(ds, (size_t)nnz * (wide ? 8 : 4), "the CSR's neighbour ids");
  if (!idx)
    return NG_ERR_NOMEM;
  for (int64_t e = 0; e < m; e++) {
    indptr[id_at(a->edge_dst, a->index_type, e) + 1]++;
    if (a->undirected)
      indptr[id_at(a->edge_src, a->index_type, e) + 1]++;
  }
  for (int64_t v = 0; v < nodes; v++)
    indptr[v + 1] += indptr[v];
  /* The fill positions, then restored from the offsets: one pass per direction keeps the
   * list's order within each row. */
  int64_t *fill = ng__malloc(((size_t)nodes + 1) * sizeof *fill, "the CSR's fill positions");
  if (!fill)
    return NG_ERR_NOMEM;
  memcpy(fill, indptr, ((size_t)nodes + 1) * sizeof *fill);
  for (int64_t e = 0; e < m; e++) {
    int64_t s = id_at(a->edge_src, a->index_type, e), d = id_at(a->edge_dst, a->index_type, e);
    for (int dir = 0; dir < (a->undirected ? 2 : 1); dir++) {
      int64_t row = dir ? s : d, nb = dir ? d : s, at = fill[row]++;
      if (wide)
        ((int64_t *)idx)[at] = nb;
      else
        ((int32_t *)idx)[at] = (int32_t)nb;
    }
  }
  free(fill);
  ds->csr.indptr = indptr;
  ds->csr.nnz = nnz;
  if (wide)
    ds->csr.idx64 = idx;
  else
    ds->csr.idx32 = idx;
  ds->info.index_bytes = wide ? 8 : 4;
  return NG_OK;
}

/* The argument checks a folder's dataset.json would have made. */
static ng_status check_args(const ng_dataset_arrays *a) {
  const bool csr = a->indptr != NULL, list = a->edge_src != NULL || a->edge_dst != NULL;
  if (a->nodes <= 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_from_arrays: nodes is %lld; it must be > 0",
                   (long long)a->nodes);
  if (csr == list)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: give the graph either as a CSR (indptr and indices) "
                   "or as an edge list (edge_src and edge_dst), not %s",
                   csr ? "both" : "neither");
  if (csr && !a->indices && a->nodes > 0)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_from_arrays: indptr without indices");
  if (list && (!a->edge_src || !a->edge_dst || a->edges < 0))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: an edge list needs edge_src, edge_dst and edges >= 0");
  if ((unsigned)a->indptr_type > NG_INT64 || (unsigned)a->index_type > NG_INT64 ||
      (unsigned)a->label_type > NG_INT64 || (unsigned)a->split_type > NG_INT64)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: an element type is neither NG_INT32 nor NG_INT64");
  if (a->index_type == NG_INT32 && a->nodes >= NG_INDEX32_MAX_NODES)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: %lld nodes need int64 node ids (index_type NG_INT64)",
                   (long long)a->nodes);
  if ((a->features != NULL) != (a->feature_dim > 0))
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: features %s but feature_dim is %lld; give both or "
                   "neither",
                   a->features ? "given" : "missing", (long long)a->feature_dim);
  if (a->feature_dim > 0 &&
      (uint64_t)a->nodes > SIZE_MAX / sizeof(float) / (uint64_t)a->feature_dim)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_from_arrays: features too large to address");
  if (a->classes < 0 || a->classes > NG_MAX_CLASSES)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: classes is %d; it must be in [0, %d] (0: from the "
                   "labels)",
                   (int)a->classes, NG_MAX_CLASSES);
  int64_t total = 0;
  for (int s = 0; s < 3; s++) {
    if (a->split_size[s] < 0 || (a->split_size[s] > 0 && !a->split[s]))
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_dataset_from_arrays: the %s split has size %lld but %s", SPLIT_NAME[s],
                     (long long)a->split_size[s],
                     a->split_size[s] < 0 ? "sizes must be >= 0" : "no ids");
    if (a->split_size[s] > 0 && !a->labels)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_dataset_from_arrays: the %s split needs labels; give labels or leave "
                     "the split empty",
                     SPLIT_NAME[s]);
    total += a->split_size[s];
  }
  if (total > a->nodes)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: the splits hold %lld nodes together but the graph has "
                   "%lld; splits must be disjoint",
                   (long long)total, (long long)a->nodes);
  return NG_OK;
}

/* Labels as int32 (the caller's array when it is int32) and the class count (0: the largest
 * label + 1). */
static ng_status set_labels(struct ng_dataset *ds, const ng_dataset_arrays *a) {
  const int64_t n = a->nodes;
  int64_t top = -1;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = id_at(a->labels, a->label_type, i);
    if (v < -1 || v >= NG_MAX_CLASSES)
      return ng__err(NG_ERR_INVALID_ARG,
                     "ng_dataset_from_arrays: labels[%lld] = %lld is outside [-1, %d) (-1 marks "
                     "an unlabelled node)",
                     (long long)i, (long long)v, NG_MAX_CLASSES);
    top = NG_MAX(top, v);
  }
  ds->info.classes = a->classes > 0 ? a->classes : (int32_t)(top + 1);
  if (ds->info.classes == 0)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: every label is -1; give at least one labelled node "
                   "or no labels");
  if (a->label_type == NG_INT32) {
    ds->labels = a->labels;
    return NG_OK;
  }
  int32_t *lab = own(ds, (size_t)n * sizeof *lab, "the labels as int32");
  if (!lab)
    return NG_ERR_NOMEM;
  for (int64_t i = 0; i < n; i++)
    lab[i] = (int32_t)((const int64_t *)a->labels)[i];
  ds->labels = lab;
  return NG_OK;
}

ng_status ng_dataset_from_arrays(ng_dataset_t *out, const ng_dataset_arrays *a) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_from_arrays: out is NULL");
  *out = NULL;
  if (!a || a->size < sizeof *a)
    return ng__err(NG_ERR_INVALID_ARG,
                   "ng_dataset_from_arrays: arrays missing or from an older header (initialise "
                   "them with NG_DATASET_ARRAYS_INIT)");
  NG_CHECK(check_args(a));
  struct ng_dataset *ds = ng__calloc(1, sizeof *ds, "a dataset handle");
  if (!ds)
    return NG_ERR_NOMEM;
  ng_status st = NG_OK;
  const char *name = a->name && *a->name ? a->name : ARRAYS_NAME_DEFAULT;
  /* Validation messages name "<dir>/<array>.npy": the "folder" says where the arrays came from. */
  size_t dir_len = strlen(name) + 32;
  ds->dir = ng__malloc(dir_len, "a dataset name");
  if (!ds->dir) {
    st = NG_ERR_NOMEM;
    goto fail;
  }
  snprintf(ds->dir, dir_len, "ng_dataset_from_arrays(%s)", name);
  ds->info.size = sizeof ds->info;
  ng__strlcpy(ds->info.name, name, sizeof ds->info.name);
  ds->info.nodes = a->nodes;
  ds->info.feature_dim = a->feature_dim;
  ds->info.undirected = a->undirected != 0;
  ds->csr.nodes = a->nodes;
  if (a->indptr) {
    const int64_t *indptr = NULL;
    NG_CHECK_GOTO(st, as_i64(&indptr, ds, a->indptr, a->indptr_type, a->nodes + 1, "indptr"), fail);
    if (indptr[0] != 0 || indptr[a->nodes] < 0) {
      st = ng__err(NG_ERR_FORMAT,
                   "ng_dataset_from_arrays: indptr[0] = %lld and indptr[nodes] = %lld; a CSR "
                   "starts at 0 and ends at the number of entries",
                   (long long)indptr[0], (long long)indptr[a->nodes]);
      goto fail;
    }
    ds->csr.indptr = (int64_t *)indptr; /* read-only, as the mappings of a folder */
    ds->csr.nnz = indptr[a->nodes];
    if (a->index_type == NG_INT64)
      ds->csr.idx64 = (int64_t *)a->indices;
    else
      ds->csr.idx32 = (int32_t *)a->indices;
    ds->info.index_bytes = a->index_type == NG_INT64 ? 8 : 4;
  } else {
    NG_CHECK_GOTO(st, build_csr(ds, a), fail);
  }
  ds->info.edges = ds->csr.nnz;
  ds->features = a->features;
  if (a->labels)
    NG_CHECK_GOTO(st, set_labels(ds, a), fail);
  int64_t *count[3] = {&ds->info.train, &ds->info.val, &ds->info.test};
  for (int s = 0; s < 3; s++) {
    *count[s] = a->split_size[s];
    if (a->split_size[s] > 0)
      NG_CHECK_GOTO(
          st,
          as_i64(&ds->split[s], ds, a->split[s], a->split_type, a->split_size[s], SPLIT_NAME[s]),
          fail);
  }
  NG_CHECK_GOTO(st, ng__dataset_validate(ds, a->check_features != 0), fail);
  ds->magic = NG_DATASET_MAGIC;
  *out = ds;
  return NG_OK;
fail:
  ds->magic = NG_DATASET_MAGIC; /* so that close frees what was built */
  ng_dataset_close(ds);
  return st;
}

ng_status ng_dataset_features(const float **out, ng_dataset_t ds) {
  if (!out)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_features: out is NULL");
  *out = NULL;
  NG_CHECK(ng__dataset_check(ds));
  *out = ds->features;
  return NG_OK;
}

ng_status ng_dataset_split(const int64_t **ids, int64_t *n, ng_dataset_t ds, int split) {
  if (!ids || !n)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_split: ids or n is NULL");
  *ids = NULL;
  *n = 0;
  NG_CHECK(ng__dataset_check(ds));
  if (split < 0 || split > 2)
    return ng__err(NG_ERR_INVALID_ARG, "ng_dataset_split: split %d is not 0, 1 or 2", split);
  const int64_t counts[3] = {ds->info.train, ds->info.val, ds->info.test};
  *ids = counts[split] > 0 ? ds->split[split] : NULL;
  *n = counts[split];
  return NG_OK;
}
