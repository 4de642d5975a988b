/* Cora with generated authors (ng_test_hetero.h). */
#include "ng_test_hetero.h"
#include "hetero_impl.h"
#include "rng.h"

#include <stdlib.h>
#include <string.h>

/* ---- a small real heterogeneous dataset: Cora with generated authors ----
 * paper: Cora's 2708 papers, their 1433 features, 7 classes and Planetoid splits.
 * (paper, cites, paper): Cora's citation graph as converted (both directions).
 * author: CORA_AUTHORS generated authors without features, each with a home class (a hash of
 * the seed and its id). Paper p has 1 to 3 authors (a hash of (seed, p)); each is, with
 * probability CORA_AUTHOR_HOMOPHILY, an author whose home class is p's label, else any author.
 * (author, writes, paper) holds them; (paper, written_by, author) is its exact transpose.
 * Every draw is a function of (seed, paper or author) through core/rng.h, so the folder is the
 * same on every machine; it is built at test time, never committed. */

int32_t ng_test_cora_author_class(int64_t a) {
  return (int32_t)(ng_hash2(CORA_AUTHOR_SEED, (uint64_t)a) % CORA_CLASSES);
}

static int cmp_i32(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Writes the fixture into `dir` through the heterogeneous writer. */
ng_status ng_test_build_cora_hetero(const char *dir, ng_dataset_t cora) {
  const int64_t n = cora->info.nodes, fdim = cora->info.feature_dim;
  /* The authors of each class, in id order. */
  int32_t *by_class = ng_test_xmalloc(sizeof(int32_t) * CORA_AUTHORS);
  int64_t start[CORA_CLASSES + 1] = {0};
  for (int64_t a = 0; a < CORA_AUTHORS; a++)
    start[ng_test_cora_author_class(a) + 1]++;
  for (int c = 0; c < CORA_CLASSES; c++)
    start[c + 1] += start[c];
  int64_t fill[CORA_CLASSES];
  memcpy(fill, start, sizeof fill);
  for (int64_t a = 0; a < CORA_AUTHORS; a++)
    by_class[fill[ng_test_cora_author_class(a)]++] = (int32_t)a;
  /* writes: rows are papers. */
  int64_t *wptr = ng_test_xmalloc(sizeof(int64_t) * (size_t)(n + 1));
  int32_t *widx = ng_test_xmalloc(sizeof(int32_t) * (size_t)(n * CORA_MAX_AUTHORS_PER_PAPER));
  wptr[0] = 0;
  for (int64_t p = 0; p < n; p++) {
    ng_rng r;
    ng_rng_seed(&r, ng_hash2(CORA_AUTHOR_SEED, (uint64_t)p));
    const int k = 1 + (int)(ng_rng_next(&r) % CORA_MAX_AUTHORS_PER_PAPER);
    const int32_t y = cora->labels[p];
    int32_t *row = widx + wptr[p];
    int len = 0;
    for (int i = 0; i < k; i++) {
      const bool home = (double)(ng_rng_next(&r) >> 11) * 0x1p-53 < CORA_AUTHOR_HOMOPHILY;
      const uint64_t u = ng_rng_next(&r);
      const int32_t a =
          home ? by_class[start[y] + (int64_t)(u % (uint64_t)(start[y + 1] - start[y]))]
               : (int32_t)(u % CORA_AUTHORS);
      bool dup = false;
      for (int j = 0; j < len; j++)
        dup |= row[j] == a;
      if (!dup)
        row[len++] = a;
    }
    qsort(row, (size_t)len, sizeof *row, cmp_i32);
    wptr[p + 1] = wptr[p] + len;
  }
  const int64_t nw = wptr[n];
  /* written_by: the transpose, rows are authors (papers in increasing order per row). */
  int64_t *bptr = calloc(CORA_AUTHORS + 1, sizeof(int64_t));
  int32_t *bidx = ng_test_xmalloc(sizeof(int32_t) * (size_t)nw);
  for (int64_t e = 0; e < nw; e++)
    bptr[widx[e] + 1]++;
  for (int64_t a = 0; a < CORA_AUTHORS; a++)
    bptr[a + 1] += bptr[a];
  int64_t *cur = ng_test_xmalloc(sizeof(int64_t) * CORA_AUTHORS);
  memcpy(cur, bptr, sizeof(int64_t) * CORA_AUTHORS);
  for (int64_t p = 0; p < n; p++)
    for (int64_t e = wptr[p]; e < wptr[p + 1]; e++)
      bidx[cur[widx[e]]++] = (int32_t)p;

  struct ng_hetero desc;
  memset(&desc, 0, sizeof desc);
  ng_hetero_ntype nt[2];
  ng_hetero_etype et[3];
  memset(nt, 0, sizeof nt);
  memset(et, 0, sizeof et);
  desc.ntypes = nt;
  desc.etypes = et;
  ng__strlcpy(desc.info.name, "cora-authors", sizeof desc.info.name);
  desc.info.node_types = 2;
  desc.info.edge_types = 3;
  desc.info.index_bytes = 4;
  desc.info.train = cora->info.train;
  desc.info.val = cora->info.val;
  desc.info.test = cora->info.test;
  ng__strlcpy(nt[0].name, "paper", sizeof nt[0].name);
  nt[0].count = n;
  nt[0].feature_dim = fdim;
  nt[0].classes = cora->info.classes;
  ng__strlcpy(nt[1].name, "author", sizeof nt[1].name);
  nt[1].count = CORA_AUTHORS;
  const struct {
    const char *rel;
    int32_t src, dst;
    const int64_t *ptr;
    const int32_t *idx;
    int64_t rows, edges;
  } rels[3] = {
      {"cites", 0, 0, cora->csr.indptr, cora->csr.idx32, n, cora->info.edges},
      {"writes", 1, 0, wptr, widx, n, nw},
      {"written_by", 0, 1, bptr, bidx, CORA_AUTHORS, nw},
  };
  ng_hetero_writer hw;
  ng_status st = ng__hetero_writer_begin(&hw, dir);
  for (int r = 0; r < 3 && st == NG_OK; r++) {
    char file[160];
    ng_npy *a = NULL;
    int64_t shape[1] = {rels[r].rows + 1};
    ng__hetero_csr_file(file, sizeof file, nt[rels[r].src].name, rels[r].rel, nt[rels[r].dst].name,
                        false);
    st = ng__hetero_writer_array(&a, &hw, file, NG_DTYPE_I64, 1, shape);
    if (st == NG_OK)
      memcpy(a->data, rels[r].ptr, sizeof(int64_t) * (size_t)shape[0]);
    shape[0] = rels[r].edges;
    ng__hetero_csr_file(file, sizeof file, nt[rels[r].src].name, rels[r].rel, nt[rels[r].dst].name,
                        true);
    if (st == NG_OK)
      st = ng__hetero_writer_array(&a, &hw, file, NG_DTYPE_I32, 1, shape);
    if (st == NG_OK)
      memcpy(a->data, rels[r].idx, sizeof(int32_t) * (size_t)shape[0]);
    ng__strlcpy(et[r].relation, rels[r].rel, sizeof et[r].relation);
    et[r].src = rels[r].src;
    et[r].dst = rels[r].dst;
    et[r].csr.nnz = rels[r].edges;
  }
  ng_npy *a = NULL;
  int64_t fshape[2] = {n, fdim};
  if (st == NG_OK)
    st = ng__hetero_writer_array(&a, &hw, "paper.features.npy", NG_DTYPE_F32, 2, fshape);
  if (st == NG_OK)
    memcpy(a->data, cora->features, sizeof(float) * (size_t)(n * fdim));
  if (st == NG_OK)
    st = ng__hetero_writer_array(&a, &hw, "paper.labels.npy", NG_DTYPE_I32, 1, &n);
  if (st == NG_OK)
    memcpy(a->data, cora->labels, sizeof(int32_t) * (size_t)n);
  static const char *const SPLIT_FILE[3] = {"train_idx.npy", "val_idx.npy", "test_idx.npy"};
  const int64_t count[3] = {cora->info.train, cora->info.val, cora->info.test};
  for (int k = 0; k < 3 && st == NG_OK; k++) {
    st = ng__hetero_writer_array(&a, &hw, SPLIT_FILE[k], NG_DTYPE_I64, 1, &count[k]);
    if (st == NG_OK)
      memcpy(a->data, cora->split[k], sizeof(int64_t) * (size_t)count[k]);
  }
  if (st == NG_OK)
    st = ng__hetero_writer_commit(&hw, &desc,
                                  "Cora (planetoid) with generated authors (tests/test_hetero.c)");
  ng__hetero_writer_abort(&hw);
  free(by_class);
  free(wptr);
  free(widx);
  free(bptr);
  free(bidx);
  free(cur);
  return st;
}

ng_status ng_test_cora_union(ng_dataset_t *out, void **owned, ng_hetero_t het) {
  *out = NULL;
  *owned = NULL;
  int32_t cites, writes, written_by;
  NG_CHECK(ng_hetero_find_edge_type(&cites, het, "paper", "cites", "paper"));
  NG_CHECK(ng_hetero_find_edge_type(&writes, het, "author", "writes", "paper"));
  NG_CHECK(ng_hetero_find_edge_type(&written_by, het, "paper", "written_by", "author"));
  const ng_csr *c = &het->etypes[cites].csr, *w = &het->etypes[writes].csr;
  const ng_csr *b = &het->etypes[written_by].csr;
  const int64_t papers = het->ntypes[0].count, authors = het->ntypes[1].count;
  const int64_t fdim = het->ntypes[0].feature_dim, n = papers + authors;
  const int64_t nnz = c->nnz + w->nnz + b->nnz;
  /* One allocation: indptr [n + 1], features [n, fdim], indices [nnz], labels [n]. */
  const size_t bytes = sizeof(int64_t) * (size_t)(n + 1) + sizeof(float) * (size_t)(n * fdim) +
                       sizeof(int32_t) * (size_t)(nnz + n);
  char *mem = calloc(1, bytes);
  if (!mem)
    return NG_ERR_NOMEM;
  int64_t *indptr = (int64_t *)mem;
  float *feat = (float *)(indptr + n + 1);
  int32_t *indices = (int32_t *)(feat + n * fdim);
  int32_t *labels = indices + nnz;
  const float *x = NULL;
  const int32_t *y = NULL;
  ng_status st = ng_hetero_features(&x, het, 0);
  if (st == NG_OK)
    st = ng_hetero_labels(&y, het);
  if (st != NG_OK) {
    free(mem);
    return st;
  }
  memcpy(feat, x, sizeof(float) * (size_t)(papers * fdim));
  int64_t e = 0;
  indptr[0] = 0;
  for (int64_t v = 0; v < n; v++) {
    if (v < papers) {
      for (int64_t k = c->indptr[v]; k < c->indptr[v + 1]; k++)
        indices[e++] = c->idx32[k];
      for (int64_t k = w->indptr[v]; k < w->indptr[v + 1]; k++)
        indices[e++] = (int32_t)(papers + w->idx32[k]);
      labels[v] = y[v];
    } else {
      for (int64_t k = b->indptr[v - papers]; k < b->indptr[v - papers + 1]; k++)
        indices[e++] = b->idx32[k];
      labels[v] = -1;
    }
    indptr[v + 1] = e;
  }
  ng_dataset_arrays a = NG_DATASET_ARRAYS_INIT;
  a.name = "cora-authors-union";
  a.nodes = n;
  a.indptr = indptr;
  a.indptr_type = NG_INT64;
  a.indices = indices;
  a.index_type = NG_INT32;
  a.undirected = 1;
  a.features = feat;
  a.feature_dim = fdim;
  a.labels = labels;
  a.label_type = NG_INT32;
  a.classes = het->ntypes[0].classes;
  for (int k = 0; k < 3; k++) {
    const int64_t *ids = NULL;
    int64_t cnt = 0;
    if (ng_hetero_split(&ids, &cnt, het, k) == NG_OK) {
      a.split[k] = ids;
      a.split_size[k] = cnt;
    }
  }
  a.split_type = NG_INT64;
  st = ng_dataset_from_arrays(out, &a);
  if (st != NG_OK) {
    free(mem);
    return st;
  }
  *owned = mem;
  return NG_OK;
}
